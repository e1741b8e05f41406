//! LowerTrig (GPU pipeline): the f32 trigonometric and hyperbolic functions
//! and their inverses — the libm functions NVPTX has no lowering for — as
//! arithmetic on `floor`, `sqrt`, `log`, `exp` and selects, which every
//! backend compiles. The CPU pipeline keeps calling libm.
//!
//! The approximations are Cephes' single-precision ones (`sinf`, `cosf`,
//! `atanf`, `asinf`, `acosf`, `sinhf`, `asinhf`, `acoshf`, `atanhf`): a range
//! reduction, then a short minimax polynomial, each branch a select. Within
//! 2e-6 relative error of the exact value on their domains (tested against
//! f64 in `compiler/tests/schedule_primitives.rs`); sine and cosine reduce
//! by π/4 in three parts (Cody–Waite) and keep that accuracy for |x| up to
//! about 8192, as Cephes' `sinf` does.

use super::lower_intrinsics::{f, fabs, horner, lt, rewrite_f32_unary_calls};
use crate::tir::{CmpOp, Expr, Intrinsic, PrimFunc, TirType};
use crate::DataType;

use std::f64::consts::{FRAC_PI_2, FRAC_PI_4, LN_2, PI};

fn call(op: Intrinsic, x: Expr) -> Expr {
    Expr::call(op, vec![x], TirType::scalar(DataType::F32))
}
fn floor(x: Expr) -> Expr {
    call(Intrinsic::Floor, x)
}
fn sqrt(x: Expr) -> Expr {
    call(Intrinsic::Sqrt, x)
}
fn log(x: Expr) -> Expr {
    call(Intrinsic::Log, x)
}
fn exp(x: Expr) -> Expr {
    call(Intrinsic::Exp, x)
}
fn gt(a: Expr, b: Expr) -> Expr {
    Expr::cmp(CmpOp::Gt, a, b)
}
fn eq(a: Expr, b: Expr) -> Expr {
    Expr::cmp(CmpOp::Eq, a, b)
}
fn neg(x: Expr) -> Expr {
    f(0.0) - x
}
/// `magnitude` with the sign of `x` (`magnitude` ≥ 0).
fn with_sign_of(x: &Expr, magnitude: Expr) -> Expr {
    Expr::select(lt(x.clone(), f(0.0)), neg(magnitude.clone()), magnitude)
}

/// sin(r) for |r| ≤ π/4.
fn sin_poly(r: &Expr) -> Expr {
    let z = r.clone() * r.clone();
    horner(&z, &[-1.951_529_589_1e-4, 8.332_160_873_6e-3, -1.666_665_461_1e-1]) * z * r.clone() + r.clone()
}

/// cos(r) for |r| ≤ π/4.
fn cos_poly(r: &Expr) -> Expr {
    let z = r.clone() * r.clone();
    horner(&z, &[2.443_315_711_809_948e-5, -1.388_731_625_493_765e-3, 4.166_664_568_298_827e-2]) * z.clone() * z.clone()
        - f(0.5) * z
        + f(1.0)
}

/// |x| reduced by π/4: `(r, q)` with |x| = q·π/4 + r, |r| ≤ π/4 and q the
/// octant rounded to even, modulo 8 (0, 2, 4 or 6).
fn reduce_quarter_pi(x: &Expr) -> (Expr, Expr) {
    let a = fabs(x.clone());
    let j = floor(a.clone() * f(1.0 / FRAC_PI_4));
    // Odd octants round up: r then lies in [−π/4, π/4].
    let j = j.clone() + (j.clone() - f(2.0) * floor(j * f(0.5)));
    let r = a
        - j.clone() * f(0.785_156_25)
        - j.clone() * f(2.418_756_484_985_351_6e-4)
        - j.clone() * f(3.774_894_977_445_941e-8);
    let q = j.clone() - f(8.0) * floor(j * f(0.125));
    (r, q)
}

/// sin for f32.
pub fn sin_f32(x: Expr) -> Expr {
    let (r, q) = reduce_quarter_pi(&x);
    let (s, c) = (sin_poly(&r), cos_poly(&r));
    // q = 0: sin r; 2: cos r; 4: −sin r; 6: −cos r.
    let v = Expr::select(eq(q.clone(), f(0.0)), s.clone(), Expr::select(eq(q.clone(), f(2.0)), c.clone(), f(0.0)));
    let v = Expr::select(eq(q.clone(), f(4.0)), neg(s), Expr::select(eq(q, f(6.0)), neg(c), v));
    // sin is odd: the reduction took |x|.
    Expr::select(lt(x, f(0.0)), neg(v.clone()), v)
}

/// cos for f32.
pub fn cos_f32(x: Expr) -> Expr {
    let (r, q) = reduce_quarter_pi(&x);
    let (s, c) = (sin_poly(&r), cos_poly(&r));
    // q = 0: cos r; 2: −sin r; 4: −cos r; 6: sin r.
    let v = Expr::select(eq(q.clone(), f(0.0)), c.clone(), Expr::select(eq(q.clone(), f(2.0)), neg(s.clone()), f(0.0)));
    Expr::select(eq(q.clone(), f(4.0)), neg(c), Expr::select(eq(q, f(6.0)), s, v))
}

/// tan for f32.
pub fn tan_f32(x: Expr) -> Expr {
    sin_f32(x.clone()) / cos_f32(x)
}

/// atan for f32 (Cephes `atanf`: three ranges, one polynomial).
pub fn atan_f32(x: Expr) -> Expr {
    let a = fabs(x.clone());
    const TAN_3PI_8: f64 = 2.414_213_562_373_095;
    const TAN_PI_8: f64 = 0.414_213_562_373_095_1;
    let big = gt(a.clone(), f(TAN_3PI_8));
    let mid = gt(a.clone(), f(TAN_PI_8));
    let base = Expr::select(big.clone(), f(FRAC_PI_2), Expr::select(mid.clone(), f(FRAC_PI_4), f(0.0)));
    let t =
        Expr::select(big, neg(f(1.0) / a.clone()), Expr::select(mid, (a.clone() - f(1.0)) / (a.clone() + f(1.0)), a));
    let z = t.clone() * t.clone();
    let p = horner(&z, &[8.053_744_495_38e-2, -1.387_768_560_32e-1, 1.997_771_064_78e-1, -3.333_294_915_39e-1])
        * z
        * t.clone()
        + t;
    with_sign_of(&x, base + p)
}

/// asin(a) for 0 ≤ a ≤ 1 (Cephes `asinf`); NaN above 1.
fn asin_of_magnitude(a: Expr) -> Expr {
    let high = gt(a.clone(), f(0.5));
    let z = Expr::select(high.clone(), f(0.5) * (f(1.0) - a.clone()), a.clone() * a.clone());
    let t = Expr::select(high.clone(), sqrt(z.clone()), a);
    let p = horner(
        &z,
        &[4.216_319_904_8e-2, 2.418_131_104_9e-2, 4.547_002_599_8e-2, 7.495_300_268_6e-2, 1.666_675_242_2e-1],
    ) * z
        * t.clone()
        + t;
    Expr::select(high, f(FRAC_PI_2) - f(2.0) * p.clone(), p)
}

/// asin for f32; NaN outside [−1, 1].
pub fn asin_f32(x: Expr) -> Expr {
    with_sign_of(&x, asin_of_magnitude(fabs(x.clone())))
}

/// acos for f32 (Cephes `acosf`: near ±1 through the half-angle, so acos
/// keeps its relative accuracy as it goes to 0); NaN outside [−1, 1].
pub fn acos_f32(x: Expr) -> Expr {
    let below = lt(x.clone(), f(-0.5));
    let above = gt(x.clone(), f(0.5));
    let half_angle = asin_of_magnitude(sqrt(f(0.5) * (f(1.0) - fabs(x.clone()))));
    let near_one = f(2.0) * half_angle.clone();
    let near_minus_one = f(PI) - f(2.0) * half_angle;
    let middle = f(FRAC_PI_2) - asin_of_magnitude(fabs(x.clone())) * Expr::select(lt(x, f(0.0)), f(-1.0), f(1.0));
    Expr::select(above, near_one, Expr::select(below, near_minus_one, middle))
}

/// e^|x| / 2, without overflowing where e^|x| alone would (|x| up to ln(2·f32::MAX)).
fn half_exp_magnitude(x: &Expr) -> Expr {
    exp(fabs(x.clone()) - f(LN_2))
}

/// sinh for f32: a polynomial below 1 (no cancellation), (eˣ − e⁻ˣ)/2 above.
pub fn sinh_f32(x: Expr) -> Expr {
    let z = x.clone() * x.clone();
    let small =
        horner(&z, &[2.037_219_129_45e-4, 8.330_283_762_39e-3, 1.666_671_602_11e-1]) * z * x.clone() + x.clone();
    let e = half_exp_magnitude(&x);
    let large = with_sign_of(&x, e.clone() - f(0.25) / e);
    Expr::select(lt(fabs(x), f(1.0)), small, large)
}

/// cosh for f32: (eˣ + e⁻ˣ)/2.
pub fn cosh_f32(x: Expr) -> Expr {
    let e = half_exp_magnitude(&x);
    e.clone() + f(0.25) / e
}

/// Inputs above this take log(2x) for log(x + √(x² ± 1)) (x² would overflow).
const HUGE: f64 = 1500.0;

/// asinh for f32.
pub fn asinh_f32(x: Expr) -> Expr {
    let a = fabs(x.clone());
    let z = a.clone() * a.clone();
    let small = horner(&z, &[2.012_200_330_9e-2, -4.269_934_097_2e-2, 7.484_758_608_8e-2, -1.666_628_813_4e-1])
        * z.clone()
        * a.clone()
        + a.clone();
    let mid = log(a.clone() + sqrt(z + f(1.0)));
    let huge = log(a.clone()) + f(LN_2);
    let v = Expr::select(lt(a.clone(), f(0.5)), small, Expr::select(gt(a, f(HUGE)), huge, mid));
    with_sign_of(&x, v)
}

/// acosh for f32; NaN below 1.
pub fn acosh_f32(x: Expr) -> Expr {
    let z = x.clone() - f(1.0);
    let near_one = horner(
        &z,
        &[1.759_688_107_1e-3, -7.527_288_671_3e-3, 2.645_490_501_9e-2, -1.178_474_170_3e-1, 1.414_213_526_3],
    ) * sqrt(z.clone());
    let mid = log(x.clone() + sqrt(z.clone() * (x.clone() + f(1.0))));
    let huge = log(x.clone()) + f(LN_2);
    let v = Expr::select(lt(z, f(0.5)), near_one, Expr::select(gt(x.clone(), f(HUGE)), huge, mid));
    Expr::select(lt(x, f(1.0)), f(f64::NAN), v)
}

/// atanh for f32: a polynomial below ½, ½·log((1 + x)/(1 − x)) above; NaN
/// outside [−1, 1], ±∞ at ±1.
pub fn atanh_f32(x: Expr) -> Expr {
    let z = x.clone() * x.clone();
    let small = horner(
        &z,
        &[1.817_400_783_49e-1, 8.243_703_010_58e-2, 1.466_914_317_30e-1, 1.997_821_645_00e-1, 3.333_373_003_03e-1],
    ) * z
        * x.clone()
        + x.clone();
    let large = f(0.5) * log((f(1.0) + x.clone()) / (f(1.0) - x.clone()));
    let v = Expr::select(lt(fabs(x.clone()), f(0.5)), small, large);
    Expr::select(gt(fabs(x), f(1.0)), f(f64::NAN), v)
}

/// The arithmetic form of a libm unary intrinsic on f32, if it has one here.
pub fn lowered(op: Intrinsic, x: Expr) -> Option<Expr> {
    Some(match op {
        Intrinsic::Sin => sin_f32(x),
        Intrinsic::Cos => cos_f32(x),
        Intrinsic::Tan => tan_f32(x),
        Intrinsic::Asin => asin_f32(x),
        Intrinsic::Acos => acos_f32(x),
        Intrinsic::Atan => atan_f32(x),
        Intrinsic::Sinh => sinh_f32(x),
        Intrinsic::Cosh => cosh_f32(x),
        Intrinsic::Asinh => asinh_f32(x),
        Intrinsic::Acosh => acosh_f32(x),
        Intrinsic::Atanh => atanh_f32(x),
        _ => return None,
    })
}

/// Replace the f32 trigonometric and hyperbolic calls of `f` by arithmetic.
pub fn lower_trig(f: PrimFunc) -> PrimFunc {
    rewrite_f32_unary_calls(f, lowered)
}
