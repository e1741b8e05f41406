//! LowerIntrinsics: `exp`, `tanh`, `sigmoid` and `erf` on f32 become
//! polynomial arithmetic (plus one `ldexp`), which every backend vectorizes —
//! a libm call in a loop would block the vectorizer. Each stays within 1e-6
//! relative error of the exact value over the f32 range (tested against f64).
//!
//! Sources of the approximations: Cephes `expf`'s Cody–Waite reduction (and
//! a polynomial of degree 5 fitted here), Eigen's rational `tanh` (clamped, one division),
//! the Taylor series of erf below 1 and Abramowitz & Stegun 7.1.26 above.

use crate::tir::{BinOp, CmpOp, Expr, Intrinsic, PrimFunc, Stmt, TirType};
use crate::DataType;

pub(super) fn f(v: f64) -> Expr {
    Expr::float(v, DataType::F32)
}

pub(super) fn horner(x: &Expr, coeffs: &[f64]) -> Expr {
    let mut acc = f(coeffs[0]);
    for &c in &coeffs[1..] {
        acc = acc * x.clone() + f(c);
    }
    acc
}

pub(super) fn min(a: Expr, b: Expr) -> Expr {
    Expr::bin(BinOp::Min, a, b)
}
pub(super) fn max(a: Expr, b: Expr) -> Expr {
    Expr::bin(BinOp::Max, a, b)
}
pub(super) fn fabs(x: Expr) -> Expr {
    Expr::call(Intrinsic::Fabs, vec![x], TirType::scalar(DataType::F32))
}
pub(super) fn lt(a: Expr, b: Expr) -> Expr {
    Expr::cmp(CmpOp::Lt, a, b)
}

/// The `exp` of a clamped input `xc` before scaling: `(y, n)` with
/// `eˣᶜ = y · 2ⁿ` (Cody–Waite reduction by `n · ln 2`, then the polynomial
/// on the remainder, |r| ≤ ln 2 / 2).
fn exp_reduced(xc: Expr) -> (Expr, Expr) {
    let n = Expr::call(
        Intrinsic::Floor,
        vec![xc.clone() * f(std::f64::consts::LOG2_E) + f(0.5)],
        TirType::scalar(DataType::F32),
    );
    // Sums of products (negated constants, exact): each step one FMA where
    // the backend contracts (LLVM's `fmuladd`).
    let r = xc + n.clone() * f(-0.693_359_375) + n.clone() * f(2.121_944_4e-4);
    // eʳ ≈ 1 + r + r²·q(r), q of degree 3 fitted for the least relative
    // error on |r| ≤ ln 2 / 2 (1.1e-7; 1.7e-7 evaluated in f32): within the
    // 1e-6 this module promises with two FMAs fewer than Cephes' degree-5
    // q (1 ulp, more than f32 models need) — SiLU epilogues, whose
    // sigmoid costs as many vector operations as a stem's products, and
    // softmax rows.
    let p = horner(
        &r,
        &[8.312_369_023_698_076e-3, 4.189_135_606_439_805e-2, 1.666_711_992_623_256_5e-1, 4.999_922_334_383_942e-1],
    );
    (p * r.clone() * r.clone() + r + f(1.0), n)
}

/// NaN where `x` is NaN (a clamp's min/max may turn it into a number), else `v`.
fn keep_nan(x: Expr, v: Expr) -> Expr {
    Expr::select(Expr::cmp(CmpOp::Ne, x.clone(), x.clone()), x, v)
}

/// eˣ for f32. Inputs below `LO` (whose eˣ is 0 or subnormal) are evaluated
/// at 0 and then replaced by 0: evaluated at `LO` they produced a subnormal
/// in the exponent construction, and on Intel CPUs every subnormal result
/// costs a microcode assist — a causal attention's softmax, half its inputs
/// masked to −1e9 or −inf, ran 3.8× slower than on unmasked rows.
pub fn exp_f32(x: Expr) -> Expr {
    // Past ln(f32::MAX) = 88.7228: n = 128 and r ≥ 0, so y · 2¹²⁸ overflows
    // to +inf by itself (no test): r stays within ln 2 / 2 up to 89.
    const HI: f64 = 89.0;
    const LO: f64 = -87.336_544_750_553_1;
    let evaluated = Expr::select(lt(x.clone(), f(LO)), f(0.0), min(x.clone(), f(HI)));
    let (y, n) = exp_reduced(evaluated);
    // n reaches 128 here (2¹²⁸ is no f32): the two-step ldexp.
    let scaled = Expr::call(Intrinsic::Ldexp, vec![y, n], TirType::scalar(DataType::F32));
    // Underflow to 0, NaN stays NaN.
    let v = Expr::select(lt(x.clone(), f(LO)), f(0.0), scaled);
    keep_nan(x, v)
}

/// 1 / (1 + e⁻ˣ), with `e⁻ˣ` for `−x` clamped to [−87, 87.33]: there `2ⁿ`
/// is a normal f32 (n from −126 to 126), so one exponent construction
/// (`LdexpNormal`) and no overflow or underflow tests — past the clamp the
/// quotient is already 1, or 1.18e-38 (within 1e-40 of the smallest normal
/// f32, where the exact value is that small or smaller). Neither `e⁻ˣ` nor
/// the quotient is ever subnormal: on Intel CPUs each subnormal costs a
/// microcode assist (see [`exp_f32`]). A quarter fewer instructions than through [`exp_f32`]:
/// SiLU epilogues (YOLO's every convolution) spend as long on the sigmoid
/// as on the convolution.
pub fn sigmoid_f32(x: Expr) -> Expr {
    // round(87.33 · log₂ e) = 126 with y < 1 (so 1 / (1 + e) stays normal);
    // round(−87 · log₂ e) = −126 with y = 1.4 (so e stays normal).
    const HI: f64 = 87.33;
    const LO: f64 = -87.0;
    let (y, n) = exp_reduced(min(max(f(0.0) - x.clone(), f(LO)), f(HI)));
    let e = Expr::call(Intrinsic::LdexpNormal, vec![y, n], TirType::scalar(DataType::F32));
    keep_nan(x, f(1.0) / (f(1.0) + e))
}

/// tanh for f32: a rational function of the clamped input (Eigen's
/// `generic_fast_tanh_float`, also MLAS's and XNNPACK's): odd degree-13 over
/// even degree-6, one division and no exponential or branch — within
/// 3.5e-7 relative error, and about half the work of `1 − 2/(e²ˣ + 1)`,
/// which matters in GELU epilogues.
pub fn tanh_f32(x: Expr) -> Expr {
    // tanh(±7.905…) rounds to ±1 in f32.
    const CLAMP: f64 = 7.905_311_107_635_498;
    let xc = min(max(x.clone(), f(-CLAMP)), f(CLAMP));
    let z = xc.clone() * xc.clone();
    let p = horner(
        &z,
        &[
            -2.760_768_477_423_55e-16,
            2.000_187_904_824_77e-13,
            -8.604_671_522_137_35e-11,
            5.122_297_090_371_14e-8,
            1.485_722_357_179_79e-5,
            6.372_619_288_754_36e-4,
            4.893_524_558_917_86e-3,
        ],
    ) * xc.clone();
    let q =
        horner(&z, &[1.198_258_394_667_02e-6, 1.185_347_056_866_54e-4, 2.268_434_632_439e-3, 4.893_525_185_543_85e-3]);
    // Tiny inputs are their own tanh (the quotient would lose relative accuracy); NaN stays NaN.
    let v = Expr::select(lt(fabs(x.clone()), f(4e-4)), x.clone(), p / q);
    keep_nan(x, v)
}

/// erf for f32.
pub fn erf_f32(x: Expr) -> Expr {
    // |x| < 1: x · Σₙ cₙ x²ⁿ with cₙ = 2/√π · (−1)ⁿ / (n! (2n+1)).
    let two_over_sqrt_pi = 2.0 / std::f64::consts::PI.sqrt();
    let mut coeffs = Vec::new();
    let mut fact = 1.0f64;
    for n in 0..12 {
        if n > 0 {
            fact *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        coeffs.push(two_over_sqrt_pi * sign / (fact * (2 * n + 1) as f64));
    }
    coeffs.reverse();
    let z = x.clone() * x.clone();
    let small = horner(&z, &coeffs) * x.clone();
    // |x| ≥ 1: 1 − (a₁t + … + a₅t⁵)·e^(−x²), t = 1/(1 + p|x|).
    let a = fabs(x.clone());
    let t = f(1.0) / (f(1.0) + f(0.327_591_1) * a.clone());
    let poly = horner(&t, &[1.061_405_429, -1.453_152_027, 1.421_413_741, -0.284_496_736, 0.254_829_592]) * t;
    let large = f(1.0) - poly * exp_f32(f(0.0) - z);
    let signed = Expr::select(lt(x, f(0.0)), f(0.0) - large.clone(), large);
    Expr::select(lt(a, f(1.0)), small, signed)
}

/// The polynomial form of `op` applied to `x`, for the intrinsics this pass lowers.
fn polynomial(op: Intrinsic, x: Expr) -> Option<Expr> {
    Some(match op {
        Intrinsic::Exp => exp_f32(x),
        Intrinsic::Tanh => tanh_f32(x),
        Intrinsic::Sigmoid => sigmoid_f32(x),
        Intrinsic::Erf => erf_f32(x),
        _ => return None,
    })
}

/// `f` with every scalar f32 call of one argument that `rule` has a form
/// for replaced by that form, innermost calls first. (The argument is
/// repeated in the form; LLVM computes it once.)
pub(super) fn rewrite_f32_unary_calls(mut f: PrimFunc, rule: fn(Intrinsic, Expr) -> Option<Expr>) -> PrimFunc {
    fn walk(e: &Expr, rule: fn(Intrinsic, Expr) -> Option<Expr>) -> Expr {
        let e = e.map_children(|c| walk(c, rule));
        match &e {
            Expr::Call(op, args, t) if t.elem == DataType::F32 && t.lanes == 1 && args.len() == 1 => {
                rule(*op, args[0].clone()).unwrap_or(e)
            }
            _ => e,
        }
    }
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_exprs(&mut |e| walk(&e, rule));
    f
}

/// Replace the f32 transcendentals of `f` by their polynomial forms.
pub fn lower_intrinsics(f: PrimFunc) -> PrimFunc {
    rewrite_f32_unary_calls(f, polynomial)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arith::{simplify, Bounds};
    use crate::tir::Var;

    /// The power of two `lowering(x)` builds its result from, for a constant
    /// `x`: the `Floor` inside its `Ldexp`, folded.
    fn exponent_of(lowering: fn(Expr) -> Expr, x: f64) -> f64 {
        let v = Var::new("x", TirType::scalar(DataType::F32));
        let e = lowering(Expr::var(&v));
        fn find(e: &Expr, intrinsic: Intrinsic) -> Option<Vec<Expr>> {
            if let Expr::Call(i, args, _) = e {
                if *i == intrinsic {
                    return Some(args.clone());
                }
            }
            let mut found = None;
            e.for_each_child(|c| {
                if found.is_none() {
                    found = find(c, intrinsic);
                }
            });
            found
        }
        let ldexp = find(&e, Intrinsic::Ldexp)
            .or_else(|| find(&e, Intrinsic::LdexpNormal))
            .expect("the result is built with ldexp");
        let arg = find(&ldexp[1], Intrinsic::Floor).expect("its exponent is a floor")[0].clone();
        let at_x = simplify(&arg.substitute(&|w| (w == &v).then(|| f(x))), &Bounds::new());
        eval(&at_x).floor()
    }

    /// The value of a constant f32 expression of arithmetic, min/max,
    /// comparisons and selects (what the simplifier leaves unfolded).
    fn eval(e: &Expr) -> f64 {
        match e {
            Expr::Float(v, _) => *v,
            Expr::Bin(op, a, b) => {
                let (a, b) = (eval(a), eval(b));
                match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    BinOp::Min => a.min(b),
                    BinOp::Max => a.max(b),
                    other => panic!("{other:?} in exp's exponent"),
                }
            }
            Expr::Select(c, a, b) => match &**c {
                Expr::Cmp(CmpOp::Lt, p, q) => eval(if eval(p) < eval(q) { a } else { b }),
                Expr::Cmp(CmpOp::Gt, p, q) => eval(if eval(p) > eval(q) { a } else { b }),
                other => panic!("condition {other:?} in exp's exponent"),
            },
            other => panic!("{other:?} in exp's exponent"),
        }
    }

    /// Scores a causal attention masks (−1e9, −inf, f32::MIN) have eˣ = 0,
    /// and the polynomial must not be evaluated at the clamp for them: there
    /// `y · 2⁻¹²⁶` came out subnormal, and on Intel CPUs every subnormal
    /// result is a microcode assist (gpt_tiny's softmax 3.8× slower on
    /// masked rows; the exp kernel 10× slower unless FTZ is set). Within the
    /// range, the exponent is the usual one.
    #[test]
    fn masked_inputs_build_no_subnormal() {
        for x in [-1e9, f64::NEG_INFINITY, f32::MIN as f64, -100.0, -87.5] {
            let n = exponent_of(exp_f32, x);
            assert!(n >= -125.0, "exp({x}) is built from 2^{n}, whose products can be subnormal");
        }
        assert_eq!(exponent_of(exp_f32, -87.0), -126.0);
        assert_eq!(exponent_of(exp_f32, 1.0), 1.0);
    }

    /// The sigmoid's e⁻ˣ stays normal (n ≥ −126 with y ≥ 1.4 at the clamp)
    /// and so does 1 / (1 + e⁻ˣ) (n ≤ 126 with y < 1): for x = ±1e9, ±inf
    /// and the f32 extremes, as for gating or masked inputs. It was 2¹²⁷ for
    /// x below −88: a subnormal quotient (6e-39).
    #[test]
    fn sigmoid_of_extreme_inputs_builds_no_subnormal() {
        for x in [1e9, f64::INFINITY, f32::MAX as f64, 88.0, -1e9, f64::NEG_INFINITY, f32::MIN as f64, -88.0] {
            let n = exponent_of(sigmoid_f32, x);
            assert!((-126.0..=126.0).contains(&n), "sigmoid({x}) builds e⁻ˣ from 2^{n}");
        }
    }
}
