//! TOPI: the tensor-expression compute of every Relay operator.
//!
//! [`compute_op`] takes the operator's name, its TE inputs, its normalized
//! attributes and its checked output type, and returns the TE value of its
//! result. The shapes have been checked by the operator's type relation, so
//! the computes trust them; anything the type relation let through but a
//! compute cannot express is an error, never a panic.

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::Type;
use kiln_ir::DataType;
use kiln_ir::OpError;

use crate::te::{compute, reduce, reduce_axis, try_compute, Tensor};
use crate::tir::{BinOp, CmpOp, Combiner, Expr, Intrinsic, TirType};

mod nn;
mod transform;
mod winograd;

/// A TE value: one tensor, or a tuple of them.
#[derive(Clone, Debug)]
pub enum TeValue {
    Tensor(Tensor),
    Tuple(Vec<TeValue>),
}

impl TeValue {
    pub fn tensor(&self) -> Result<&Tensor, OpError> {
        match self {
            TeValue::Tensor(t) => Ok(t),
            TeValue::Tuple(_) => Err("expected a tensor, found a tuple".into()),
        }
    }

    pub fn tuple(&self) -> Result<&[TeValue], OpError> {
        match self {
            TeValue::Tuple(v) => Ok(v),
            TeValue::Tensor(_) => Err("expected a tuple, found a tensor".into()),
        }
    }
}

/// The output shape and dtype of a single-tensor result.
pub(crate) fn out_tensor(ty: &Type) -> Result<(Vec<usize>, DataType), OpError> {
    ty.as_tensor()
        .map(|t| (t.shape.clone(), t.dtype))
        .ok_or_else(|| OpError::from(format!("expected a tensor result, found {ty}")))
}

/// `x` read at output indices `idx` with NumPy broadcasting (right-aligned; size-1 dims read index 0).
pub(crate) fn broadcast_at(x: &Tensor, idx: &[Expr]) -> Expr {
    let offset = idx.len() - x.ndim();
    let sub: Vec<Expr> = x
        .shape()
        .iter()
        .enumerate()
        .map(|(k, &d)| if d == 1 { Expr::int(0) } else { idx[offset + k].clone() })
        .collect();
    x.at(&sub)
}

pub(crate) fn zero(dt: DataType) -> Expr {
    Expr::constant(0.0, dt)
}

fn unary(name: &str, x: Expr, dt: DataType, attrs: &Attrs) -> Result<Expr, OpError> {
    let t = TirType::scalar(dt);
    let call = |f: Intrinsic, x: Expr| Expr::call(f, vec![x], t);
    Ok(match name {
        "negative" => Expr::bin(BinOp::Sub, zero(dt), x),
        "exp" => call(Intrinsic::Exp, x),
        "log" => call(Intrinsic::Log, x),
        "sqrt" => call(Intrinsic::Sqrt, x),
        "rsqrt" => call(Intrinsic::Rsqrt, x),
        "tanh" => call(Intrinsic::Tanh, x),
        "sigmoid" => call(Intrinsic::Sigmoid, x),
        "erf" => call(Intrinsic::Erf, x),
        "nn.relu" => Expr::bin(BinOp::Max, x, zero(dt)),
        "clip" => {
            let lo = Expr::constant(attrs.float("a_min")?, dt);
            let hi = Expr::constant(attrs.float("a_max")?, dt);
            Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, x, lo), hi)
        }
        "cast" => Expr::cast(t, x),
        "abs" if dt.is_float() => call(Intrinsic::Fabs, x),
        "abs" => select(Expr::cmp(CmpOp::Lt, x.clone(), zero(dt)), Expr::bin(BinOp::Sub, zero(dt), x.clone()), x),
        "sign" => {
            let one = Expr::constant(1.0, dt);
            let neg = Expr::constant(-1.0, dt);
            let s = select(
                Expr::cmp(CmpOp::Gt, x.clone(), zero(dt)),
                one,
                select(Expr::cmp(CmpOp::Lt, x.clone(), zero(dt)), neg, zero(dt)),
            );
            // NaN (the only value unequal to itself) stays NaN.
            if dt.is_float() {
                select(Expr::cmp(CmpOp::Ne, x.clone(), x.clone()), x, s)
            } else {
                s
            }
        }
        "floor" => call(Intrinsic::Floor, x),
        "ceil" => call(Intrinsic::Ceil, x),
        "round" => call(Intrinsic::Round, x),
        "sin" => call(Intrinsic::Sin, x),
        "cos" => call(Intrinsic::Cos, x),
        "tan" => call(Intrinsic::Tan, x),
        "asin" => call(Intrinsic::Asin, x),
        "acos" => call(Intrinsic::Acos, x),
        "atan" => call(Intrinsic::Atan, x),
        "sinh" => call(Intrinsic::Sinh, x),
        "cosh" => call(Intrinsic::Cosh, x),
        "asinh" => call(Intrinsic::Asinh, x),
        "acosh" => call(Intrinsic::Acosh, x),
        "atanh" => call(Intrinsic::Atanh, x),
        "isnan" => Expr::cmp(CmpOp::Ne, x.clone(), x),
        "bitwise_not" => call(Intrinsic::BitNot, x),
        _ => return Err(format!("no unary compute for `{name}`").into()),
    })
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

fn binary(name: &str, a: Expr, b: Expr, dt: DataType) -> Result<Expr, OpError> {
    Ok(match name {
        "add" => Expr::bin(BinOp::Add, a, b),
        "subtract" => Expr::bin(BinOp::Sub, a, b),
        "multiply" => Expr::bin(BinOp::Mul, a, b),
        "divide" if dt.is_int() => int_division(BinOp::Div, a, b, dt),
        "divide" => Expr::bin(BinOp::Div, a, b),
        "mod" if dt.is_float() => Expr::call(Intrinsic::Fmod, vec![a, b], TirType::scalar(dt)),
        // Truncated remainder: a − (a / b)·b with the truncating division.
        "mod" => {
            let q = int_division(BinOp::Div, a.clone(), b.clone(), dt);
            let r = Expr::bin(BinOp::Sub, a, Expr::bin(BinOp::Mul, q, b.clone()));
            select(Expr::cmp(CmpOp::Eq, b, zero(dt)), zero(dt), r)
        }
        "floor_mod" if dt.is_int() => int_division(BinOp::FloorMod, a, b, dt),
        "floor_mod" => {
            // NumPy's mod: fmod, moved into the divisor's sign (exact, and right for infinities).
            let r = Expr::call(Intrinsic::Fmod, vec![a, b.clone()], TirType::scalar(dt));
            let z = zero(dt);
            let differ = Expr::cmp(
                CmpOp::Ne,
                Expr::cmp(CmpOp::Lt, r.clone(), z.clone()),
                Expr::cmp(CmpOp::Lt, b.clone(), z.clone()),
            );
            let fix = Expr::and(Expr::cmp(CmpOp::Ne, r.clone(), z), differ);
            select(fix, Expr::bin(BinOp::Add, r.clone(), b), r)
        }
        "maximum" => Expr::bin(BinOp::Max, a, b),
        "minimum" => Expr::bin(BinOp::Min, a, b),
        "power" => Expr::call(Intrinsic::Pow, vec![a, b], TirType::scalar(dt)),
        "bitwise_and" => Expr::call(Intrinsic::BitAnd, vec![a, b], TirType::scalar(dt)),
        "bitwise_or" => Expr::call(Intrinsic::BitOr, vec![a, b], TirType::scalar(dt)),
        "bitwise_xor" => Expr::call(Intrinsic::BitXor, vec![a, b], TirType::scalar(dt)),
        "left_shift" | "right_shift" => shift(name == "left_shift", a, b, dt),
        _ => return Err(format!("no binary compute for `{name}`").into()),
    })
}

/// Normalized reduction axes of a rank-`ndim` input (`None` = all; `exclude` inverts).
pub(crate) fn reduce_axes(attrs: &Attrs, ndim: usize) -> Result<Vec<usize>, OpError> {
    let mut axes: Vec<usize> = match attrs.opt_ints("axis")? {
        None => (0..ndim).collect(),
        Some(list) => list
            .iter()
            .map(|&a| {
                let a = if a < 0 { a + ndim as i64 } else { a };
                usize::try_from(a).ok().filter(|&a| a < ndim).ok_or_else(|| format!("axis {a} out of range"))
            })
            .collect::<Result<_, _>>()?,
    };
    if attrs.get("exclude").is_some() && attrs.bool("exclude")? {
        axes = (0..ndim).filter(|a| !axes.contains(a)).collect();
    }
    axes.sort_unstable();
    axes.dedup();
    Ok(axes)
}

fn reduction(name: &str, x: &Tensor, attrs: &Attrs, out_shape: &[usize]) -> Result<Tensor, OpError> {
    let ndim = x.ndim();
    let axes = reduce_axes(attrs, ndim)?;
    let keepdims = attrs.bool("keepdims")?;
    let raxes: Vec<_> = axes.iter().map(|&a| reduce_axis(x.shape()[a], &format!("r{a}"))).collect();
    let combiner = match name {
        "max" => Combiner::Max,
        "min" => Combiner::Min,
        "prod" => Combiner::Prod,
        _ => Combiner::Sum,
    };
    let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
    let xc = x.clone();
    let summed = compute(&format!("{}_red", name), out_shape, |idx| {
        let mut src = Vec::with_capacity(ndim);
        let mut out_k = 0;
        for d in 0..ndim {
            if let Some(p) = axes.iter().position(|&a| a == d) {
                src.push(Expr::var(&raxes[p].0));
                if keepdims {
                    out_k += 1;
                }
            } else {
                src.push(idx[out_k].clone());
                out_k += 1;
            }
        }
        reduce(combiner, xc.at(&src), &raxes)
    });
    if name != "mean" {
        return Ok(summed);
    }
    let dt = x.dtype();
    Ok(compute("mean", out_shape, |idx| Expr::bin(BinOp::Div, summed.at(idx), Expr::constant(count as f64, dt))))
}

/// `argmax`/`argmin` in two stages: the extreme value along the axis, then
/// the first (or, with `select_last_index`, the last) index that holds it.
fn arg_reduction(name: &str, x: &Tensor, attrs: &Attrs, out_shape: &[usize]) -> Result<Tensor, OpError> {
    let ndim = x.ndim();
    let a = attrs.int("axis")?;
    let axis = usize::try_from(if a < 0 { a + ndim as i64 } else { a })
        .ok()
        .filter(|&a| a < ndim)
        .ok_or_else(|| format!("axis {a} out of range"))?;
    let keep = attrs.bool("keepdims")?;
    let last = attrs.bool("select_last_index")?;
    let n = x.shape()[axis];
    // Input indices for output index `idx` with the reduced axis at `r`.
    let src = move |idx: &[Expr], r: Expr| -> Vec<Expr> {
        let mut s = Vec::with_capacity(ndim);
        let mut k = 0;
        for d in 0..ndim {
            if d == axis {
                s.push(r.clone());
                if keep {
                    k += 1;
                }
            } else {
                s.push(idx[k].clone());
                k += 1;
            }
        }
        s
    };
    let r1 = reduce_axis(n, "r");
    let xc = x.clone();
    let combiner = if name == "argmax" { Combiner::Max } else { Combiner::Min };
    let s1 = src;
    let extreme = compute(&format!("{name}_value"), out_shape, |idx| {
        reduce(combiner, xc.at(&s1(idx, Expr::var(&r1.0))), std::slice::from_ref(&r1))
    });
    let r2 = reduce_axis(n, "k");
    let xc = x.clone();
    let i64t = TirType::scalar(DataType::I64);
    Ok(compute(name, out_shape, |idx| {
        let k = Expr::var(&r2.0);
        let hit = Expr::cmp(CmpOp::Eq, xc.at(&src(idx, k.clone())), extreme.at(idx));
        let miss = Expr::constant(if last { -1.0 } else { n as f64 }, DataType::I64);
        let pick = select(hit, Expr::cast(i64t, k), miss);
        reduce(if last { Combiner::Max } else { Combiner::Min }, pick, std::slice::from_ref(&r2))
    }))
}

/// The TE value of `op(inputs…)` with output type `out`.
pub fn compute_op(op: &str, inputs: &[TeValue], attrs: &Attrs, out: &Type) -> Result<TeValue, OpError> {
    let tensor = |i: usize| -> Result<&Tensor, OpError> {
        inputs.get(i).ok_or_else(|| format!("`{op}` is missing input {i}"))?.tensor()
    };
    let t = |x: Tensor| Ok(TeValue::Tensor(x));
    match op {
        "negative" | "exp" | "log" | "sqrt" | "rsqrt" | "tanh" | "sigmoid" | "erf" | "nn.relu" | "clip" | "cast"
        | "abs" | "sign" | "floor" | "ceil" | "round" | "sin" | "cos" | "tan" | "asin" | "acos" | "atan" | "sinh"
        | "cosh" | "asinh" | "acosh" | "atanh" | "isnan" | "bitwise_not" => {
            let (shape, dt) = out_tensor(out)?;
            let x = tensor(0)?.clone();
            t(try_compute(op, &shape, |i| unary(op, x.at(i), dt, attrs))?)
        }
        "add" | "subtract" | "multiply" | "divide" | "maximum" | "minimum" | "power" | "mod" | "floor_mod"
        | "bitwise_and" | "bitwise_or" | "bitwise_xor" | "left_shift" | "right_shift" => {
            let (shape, dt) = out_tensor(out)?;
            let (a, b) = (tensor(0)?.clone(), tensor(1)?.clone());
            t(try_compute(op, &shape, |i| binary(op, broadcast_at(&a, i), broadcast_at(&b, i), dt))?)
        }
        "argmax" | "argmin" => {
            let (shape, _) = out_tensor(out)?;
            t(arg_reduction(op, tensor(0)?, attrs, &shape)?)
        }
        "sum" | "mean" | "max" | "min" | "prod" => {
            let (shape, _) = out_tensor(out)?;
            t(reduction(op, tensor(0)?, attrs, &shape)?)
        }
        "zeros" | "ones" | "full" => {
            let (shape, dt) = out_tensor(out)?;
            let fill = match op {
                "zeros" => Some(0.0),
                "ones" => Some(1.0),
                _ => None,
            };
            match fill {
                Some(v) => t(compute(op, &shape, |_| Expr::constant(v, dt))),
                None => {
                    let f = tensor(0)?.clone();
                    t(compute(op, &shape, |_| Expr::cast(TirType::scalar(dt), f.at(&[]))))
                }
            }
        }
        "equal" | "less" | "greater" | "greater_equal" | "less_equal" | "not_equal" => {
            let (shape, _) = out_tensor(out)?;
            let (a, b) = (tensor(0)?.clone(), tensor(1)?.clone());
            let cmp = match op {
                "equal" => CmpOp::Eq,
                "less" => CmpOp::Lt,
                "greater" => CmpOp::Gt,
                "greater_equal" => CmpOp::Ge,
                "less_equal" => CmpOp::Le,
                _ => CmpOp::Ne,
            };
            t(compute(op, &shape, |i| Expr::cmp(cmp, broadcast_at(&a, i), broadcast_at(&b, i))))
        }
        "logical_and" | "logical_or" | "logical_xor" => {
            let (shape, _) = out_tensor(out)?;
            let (a, b) = (tensor(0)?.clone(), tensor(1)?.clone());
            t(compute(op, &shape, |i| {
                let (x, y) = (broadcast_at(&a, i), broadcast_at(&b, i));
                match op {
                    "logical_and" => Expr::and(x, y),
                    "logical_or" => Expr::or(x, y),
                    _ => Expr::cmp(CmpOp::Ne, x, y),
                }
            }))
        }
        "logical_not" => {
            let (shape, _) = out_tensor(out)?;
            let x = tensor(0)?.clone();
            t(compute(op, &shape, |i| Expr::Not(Box::new(x.at(i)))))
        }
        "where" => {
            let (shape, _) = out_tensor(out)?;
            let (c, x, y) = (tensor(0)?.clone(), tensor(1)?.clone(), tensor(2)?.clone());
            t(compute(op, &shape, |i| select(broadcast_at(&c, i), broadcast_at(&x, i), broadcast_at(&y, i))))
        }
        "broadcast_to" => {
            let (shape, _) = out_tensor(out)?;
            let x = tensor(0)?.clone();
            t(compute(op, &shape, |i| broadcast_at(&x, i)))
        }
        "nn.leaky_relu" => {
            let (shape, dt) = out_tensor(out)?;
            let x = tensor(0)?.clone();
            let alpha = attrs.float("alpha")?;
            t(compute("leaky_relu", &shape, |i| {
                let v = x.at(i);
                select(Expr::cmp(CmpOp::Gt, v.clone(), zero(dt)), v.clone(), v * Expr::constant(alpha, dt))
            }))
        }
        "check_index" => {
            let (shape, dt) = out_tensor(out)?;
            let x = tensor(0)?.clone();
            let bounds = attrs.ints("bounds")?;
            if bounds.is_empty() {
                return Err("check_index without bounds".into());
            }
            t(compute(op, &shape, |i| {
                // Negative indices count from the end; the rest is checked when the kernel runs.
                let v = x.at(i);
                let last = i.last().cloned().unwrap_or_else(|| Expr::int(0));
                // One bound, or the one of this position on the last axis.
                let bound =
                    bounds.iter().enumerate().skip(1).fold(Expr::constant(bounds[0] as f64, dt), |b, (k, &n)| {
                        select(Expr::cmp(CmpOp::Eq, last.clone(), Expr::int(k as i64)), Expr::constant(n as f64, dt), b)
                    });
                let from_end = Expr::cmp(CmpOp::Lt, v.clone(), zero(dt));
                let v = select(from_end, v.clone() + bound.clone(), v);
                Expr::call(Intrinsic::CheckIndex, vec![v, bound], TirType::scalar(dt))
            }))
        }
        "take" => {
            let (shape, _) = out_tensor(out)?;
            let (d, ix) = (tensor(0)?.clone(), tensor(1)?.clone());
            let wrap = attrs.str("mode")? == "wrap";
            let pick = move |v: Expr, n: usize| {
                let v = Expr::cast(TirType::INDEX, v);
                if wrap {
                    Expr::bin(BinOp::FloorMod, v, Expr::int(n.max(1) as i64))
                } else {
                    Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, v, Expr::int(0)), Expr::int(n.max(1) as i64 - 1))
                }
            };
            match attrs.opt_int("axis")? {
                Some(a) => {
                    let a = if a < 0 { a + d.ndim() as i64 } else { a } as usize;
                    let ir = ix.ndim();
                    t(compute(op, &shape, |i| {
                        let p = pick(ix.at(&i[a..a + ir]), d.shape()[a]);
                        let mut idx = i[..a].to_vec();
                        idx.push(p);
                        idx.extend_from_slice(&i[a + ir..]);
                        d.at(&idx)
                    }))
                }
                None => {
                    let n: usize = d.shape().iter().product();
                    let ds = kiln_ir::tensor::strides(d.shape());
                    t(compute(op, &shape, |i| {
                        let flat = pick(ix.at(i), n);
                        let idx: Vec<Expr> = d
                            .shape()
                            .iter()
                            .zip(&ds)
                            .map(|(&dim, &st)| {
                                let q = Expr::bin(BinOp::FloorDiv, flat.clone(), Expr::int(st as i64));
                                Expr::bin(BinOp::FloorMod, q, Expr::int(dim as i64))
                            })
                            .collect();
                        d.at(&idx)
                    }))
                }
            }
        }
        "nn.contrib_conv2d_winograd_weight_transform"
        | "nn.contrib_winograd_input_transform"
        | "nn.contrib_winograd_output_transform"
        | "nn.contrib_winograd_tiles_to_nchw" => winograd::compute_winograd(op, inputs, attrs, out),
        _ if op.starts_with("nn.") && op != "nn.batch_flatten" => nn::compute_nn(op, inputs, attrs, out),
        _ => transform::compute_transform(op, inputs, attrs, out),
    }
}

/// `cond ? a : b` over index conditions.
pub(crate) fn select(cond: Expr, a: Expr, b: Expr) -> Expr {
    Expr::select(cond, a, b)
}

/// `lo <= e < hi`.
pub(crate) fn in_range(e: &Expr, lo: i64, hi: i64) -> Expr {
    Expr::and(Expr::cmp(CmpOp::Ge, e.clone(), Expr::int(lo)), Expr::cmp(CmpOp::Lt, e.clone(), Expr::int(hi)))
}

/// An integer attribute list of exactly `n` values, expanding TVM's short
/// forms (one value for all; for 4-value padding, 2 values mean [a, b, a, b]).
pub(crate) fn expand_ints(attrs: &Attrs, name: &str, n: usize) -> Result<Vec<i64>, OpError> {
    let v = attrs.ints(name)?.to_vec();
    Ok(match (v.len(), n) {
        (k, n) if k == n => v,
        (1, n) => vec![v[0]; n],
        (2, 4) => vec![v[0], v[1], v[0], v[1]],
        (k, n) => return Err(format!("`{name}` has {k} values, expected {n}").into()),
    })
}
