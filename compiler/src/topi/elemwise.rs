//! Computes of the element-wise operators: unary and binary arithmetic,
//! comparisons, logic, selection, broadcasting and fills — one closure per
//! operator over the scalar at each output position.

use std::sync::Arc;

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::OpMap;
use kiln_ir::{DataType, OpError};

use super::{broadcast_at, one, select, zero, ComputeCall, ComputeFn, TeValue};
use crate::te::{compute, try_compute};
use crate::tir::{BinOp, CmpOp, Expr, Intrinsic, TirType};

/// The compute of a unary element-wise operator: `f(x, dtype, attrs)` at every position.
fn map1(f: impl Fn(Expr, DataType, &Attrs) -> Result<Expr, OpError> + Send + Sync + 'static) -> ComputeFn {
    Arc::new(move |c: &ComputeCall| {
        let (shape, dt) = c.out_tensor()?;
        let x = c.tensor(0)?;
        one(try_compute(c.op, &shape, |i| f(x.at(i), dt, c.attrs))?)
    })
}

/// A unary operator that is one intrinsic call.
fn intrinsic1(f: Intrinsic) -> ComputeFn {
    map1(move |x, dt, _| Ok(Expr::call(f, vec![x], TirType::scalar(dt))))
}

/// `compute` only where the result's dtype is `kind` (`is_kind`): the math
/// functions (floating-point) and the bitwise operators (integer), whose
/// type relations accept any numeric dtype as TVM's do (`IdentityRel`,
/// `BroadcastRel`); another dtype is refused here, as TVM fails to compile
/// it, instead of reaching the backend.
fn only_for(kind: &'static str, is_kind: fn(DataType) -> bool, compute: ComputeFn) -> ComputeFn {
    Arc::new(move |c: &ComputeCall| {
        let (_, dt) = c.out_tensor()?;
        if !is_kind(dt) {
            return Err(format!("computed on {kind} tensors only, found {dt}").into());
        }
        compute(c)
    })
}

fn floats_only(compute: ComputeFn) -> ComputeFn {
    only_for("floating-point", DataType::is_float, compute)
}

fn integers_only(compute: ComputeFn) -> ComputeFn {
    only_for("integer", DataType::is_int, compute)
}

/// The compute of a binary operator with NumPy broadcasting: `f(a, b, dtype)`.
fn map2(f: impl Fn(Expr, Expr, DataType) -> Expr + Send + Sync + 'static) -> ComputeFn {
    Arc::new(move |c: &ComputeCall| {
        let (shape, dt) = c.out_tensor()?;
        let (a, b) = (c.tensor(0)?, c.tensor(1)?);
        one(compute(c.op, &shape, |i| f(broadcast_at(&a, i), broadcast_at(&b, i), dt)))
    })
}

/// A binary operator that is one intrinsic call.
fn intrinsic2(f: Intrinsic) -> ComputeFn {
    map2(move |a, b, dt| Expr::call(f, vec![a, b], TirType::scalar(dt)))
}

/// Attach this module's computes to their operators.
pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    use Intrinsic as I;
    let float_intrinsics = [
        ("exp", I::Exp),
        ("log", I::Log),
        ("sqrt", I::Sqrt),
        ("rsqrt", I::Rsqrt),
        ("tanh", I::Tanh),
        ("sigmoid", I::Sigmoid),
        ("erf", I::Erf),
        ("floor", I::Floor),
        ("ceil", I::Ceil),
        ("round", I::Round),
        ("sin", I::Sin),
        ("cos", I::Cos),
        ("tan", I::Tan),
        ("asin", I::Asin),
        ("acos", I::Acos),
        ("atan", I::Atan),
        ("sinh", I::Sinh),
        ("cosh", I::Cosh),
        ("asinh", I::Asinh),
        ("acosh", I::Acosh),
        ("atanh", I::Atanh),
    ];
    for (op, f) in float_intrinsics {
        m.set(op, floats_only(intrinsic1(f)));
    }
    m.set("bitwise_not", integers_only(intrinsic1(I::BitNot)));
    m.set("negative", map1(|x, dt, _| Ok(Expr::bin(BinOp::Sub, zero(dt), x))));
    m.set("nn.relu", map1(|x, dt, _| Ok(Expr::bin(BinOp::Max, x, zero(dt)))));
    m.set(
        "clip",
        map1(|x, dt, attrs| {
            let lo = Expr::constant(attrs.float("a_min")?, dt);
            let hi = Expr::constant(attrs.float("a_max")?, dt);
            Ok(Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, x, lo), hi))
        }),
    );
    m.set("cast", map1(|x, dt, _| Ok(Expr::cast(TirType::scalar(dt), x))));
    m.set(
        "abs",
        map1(|x, dt, _| {
            Ok(if dt.is_float() {
                Expr::call(Intrinsic::Fabs, vec![x], TirType::scalar(dt))
            } else {
                select(Expr::cmp(CmpOp::Lt, x.clone(), zero(dt)), Expr::bin(BinOp::Sub, zero(dt), x.clone()), x)
            })
        }),
    );
    m.set("sign", map1(|x, dt, _| Ok(sign(x, dt))));
    // NaN is the only value unequal to itself.
    m.set("isnan", map1(|x, _, _| Ok(Expr::cmp(CmpOp::Ne, x.clone(), x))));
    m.set("nn.leaky_relu", Arc::new(leaky_relu));

    m.set("add", map2(|a, b, _| Expr::bin(BinOp::Add, a, b)));
    m.set("subtract", map2(|a, b, _| Expr::bin(BinOp::Sub, a, b)));
    m.set("multiply", map2(|a, b, _| Expr::bin(BinOp::Mul, a, b)));
    m.set(
        "divide",
        map2(|a, b, dt| if dt.is_int() { int_division(BinOp::Div, a, b, dt) } else { Expr::bin(BinOp::Div, a, b) }),
    );
    m.set("mod", map2(truncated_mod));
    m.set("floor_mod", map2(floor_mod));
    m.set("maximum", map2(|a, b, _| Expr::bin(BinOp::Max, a, b)));
    m.set("minimum", map2(|a, b, _| Expr::bin(BinOp::Min, a, b)));
    m.set("power", intrinsic2(I::Pow));
    m.set("bitwise_and", integers_only(intrinsic2(I::BitAnd)));
    m.set("bitwise_or", integers_only(intrinsic2(I::BitOr)));
    m.set("bitwise_xor", integers_only(intrinsic2(I::BitXor)));
    m.set("left_shift", integers_only(map2(|a, b, dt| shift(true, a, b, dt))));
    m.set("right_shift", integers_only(map2(|a, b, dt| shift(false, a, b, dt))));

    let comparisons = [
        ("equal", CmpOp::Eq),
        ("not_equal", CmpOp::Ne),
        ("less", CmpOp::Lt),
        ("less_equal", CmpOp::Le),
        ("greater", CmpOp::Gt),
        ("greater_equal", CmpOp::Ge),
    ];
    for (op, cmp) in comparisons {
        m.set(op, map2(move |a, b, _| Expr::cmp(cmp, a, b)));
    }
    m.set("logical_and", map2(|a, b, _| Expr::and(a, b)));
    m.set("logical_or", map2(|a, b, _| Expr::or(a, b)));
    m.set("logical_xor", map2(|a, b, _| Expr::cmp(CmpOp::Ne, a, b)));
    m.set("logical_not", map1(|x, _, _| Ok(Expr::Not(Box::new(x)))));

    m.set("where", Arc::new(where_));
    m.set("broadcast_to", Arc::new(broadcast_to));
    m.set("zeros", fill(0.0));
    m.set("ones", fill(1.0));
    m.set("full", Arc::new(full));
}

/// −1, 0 or 1 by the sign of `x`; NaN stays NaN.
fn sign(x: Expr, dt: DataType) -> Expr {
    let s = select(
        Expr::cmp(CmpOp::Gt, x.clone(), zero(dt)),
        Expr::constant(1.0, dt),
        select(Expr::cmp(CmpOp::Lt, x.clone(), zero(dt)), Expr::constant(-1.0, dt), zero(dt)),
    );
    if dt.is_float() {
        select(Expr::cmp(CmpOp::Ne, x.clone(), x.clone()), x, s)
    } else {
        s
    }
}

fn leaky_relu(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let alpha = c.attrs.float("alpha")?;
    one(compute("leaky_relu", &shape, |i| {
        let v = x.at(i);
        select(Expr::cmp(CmpOp::Gt, v.clone(), zero(dt)), v.clone(), v * Expr::constant(alpha, dt))
    }))
}

/// `a << b` or `a >> b` defined for every amount (the machine shifts are
/// undefined outside `[0, bits)`): such amounts shift every bit out.
fn shift(left: bool, a: Expr, b: Expr, dt: DataType) -> Expr {
    let bits = Expr::constant(dt.size_bytes() as f64 * 8.0, dt);
    let mut out_of_range = Expr::cmp(CmpOp::Ge, b.clone(), bits);
    if dt.is_signed_int() {
        out_of_range = Expr::or(out_of_range, Expr::cmp(CmpOp::Lt, b.clone(), zero(dt)));
    }
    let (op, all_out) = if left {
        (Intrinsic::ShiftLeft, zero(dt))
    } else if dt.is_signed_int() {
        // The sign fills every bit: −1 for negative values, 0 otherwise.
        let neg = Expr::cmp(CmpOp::Lt, a.clone(), zero(dt));
        (Intrinsic::ShiftRight, select(neg, Expr::constant(-1.0, dt), zero(dt)))
    } else {
        (Intrinsic::ShiftRight, zero(dt))
    };
    let safe_b = select(out_of_range.clone(), zero(dt), b);
    select(out_of_range, all_out, Expr::call(op, vec![a, safe_b], TirType::scalar(dt)))
}

/// Integer `a op b` that never traps: a zero divisor gives 0 and `MIN / -1`
/// wraps (x86 raises SIGFPE for both), by dividing by a safe divisor and selecting.
fn int_division(op: BinOp, a: Expr, b: Expr, dt: DataType) -> Expr {
    let is = |v: f64| Expr::cmp(CmpOp::Eq, b.clone(), Expr::constant(v, dt));
    let unsafe_divisor = if dt.is_unsigned() { is(0.0) } else { Expr::or(is(0.0), is(-1.0)) };
    let safe_b = select(unsafe_divisor, Expr::constant(1.0, dt), b.clone());
    let q = Expr::bin(op, a.clone(), safe_b);
    if dt.is_unsigned() {
        return select(is(0.0), zero(dt), q);
    }
    // b = -1: a / -1 = -a (wrapping), a mod -1 = 0.
    let by_minus_one = match op {
        BinOp::Div | BinOp::FloorDiv => Expr::bin(BinOp::Sub, zero(dt), a),
        _ => zero(dt),
    };
    select(is(0.0), zero(dt), select(is(-1.0), by_minus_one, q))
}

/// C's `%`: fmod for floats; for integers the truncated remainder
/// a − (a / b)·b with the truncating division, 0 for a zero divisor.
fn truncated_mod(a: Expr, b: Expr, dt: DataType) -> Expr {
    if dt.is_float() {
        return Expr::call(Intrinsic::Fmod, vec![a, b], TirType::scalar(dt));
    }
    let q = int_division(BinOp::Div, a.clone(), b.clone(), dt);
    let r = Expr::bin(BinOp::Sub, a, Expr::bin(BinOp::Mul, q, b.clone()));
    select(Expr::cmp(CmpOp::Eq, b, zero(dt)), zero(dt), r)
}

/// NumPy's mod: for floats fmod moved into the divisor's sign (exact, and
/// right for infinities); for integers the floored division's remainder.
fn floor_mod(a: Expr, b: Expr, dt: DataType) -> Expr {
    if dt.is_int() {
        return int_division(BinOp::FloorMod, a, b, dt);
    }
    let r = Expr::call(Intrinsic::Fmod, vec![a, b.clone()], TirType::scalar(dt));
    let z = zero(dt);
    let differ =
        Expr::cmp(CmpOp::Ne, Expr::cmp(CmpOp::Lt, r.clone(), z.clone()), Expr::cmp(CmpOp::Lt, b.clone(), z.clone()));
    let fix = Expr::and(Expr::cmp(CmpOp::Ne, r.clone(), z), differ);
    select(fix, Expr::bin(BinOp::Add, r.clone(), b), r)
}

fn where_(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (cond, x, y) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    one(compute(c.op, &shape, |i| select(broadcast_at(&cond, i), broadcast_at(&x, i), broadcast_at(&y, i))))
}

fn broadcast_to(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let x = c.tensor(0)?;
    one(compute(c.op, &shape, |i| broadcast_at(&x, i)))
}

/// `zeros` / `ones`: a constant of the output's dtype everywhere.
fn fill(value: f64) -> ComputeFn {
    Arc::new(move |c: &ComputeCall| {
        let (shape, dt) = c.out_tensor()?;
        one(compute(c.op, &shape, |_| Expr::constant(value, dt)))
    })
}

/// `full`: the scalar input, cast to the output's dtype, everywhere.
fn full(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let f = c.tensor(0)?;
    one(compute(c.op, &shape, |_| Expr::cast(TirType::scalar(dt), f.at(&[]))))
}
