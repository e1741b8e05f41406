//! Elementwise and broadcasting operators: arithmetic, the unary math
//! functions, `clip`, `cast`, `nn.relu`.

use super::util::{
    broadcast_index_map, broadcast_shapes, float_dtype, for_each_broadcast_run, same_dtype, tensor_arg, tensor_val,
};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrKind, AttrSpec, Attrs};
use crate::dtype::DataType;
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

/// Binary ops: same dtype, NumPy broadcasting.
fn rel_broadcast(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let (a, b) = (tensor_arg(args, 0, "lhs")?, tensor_arg(args, 1, "rhs")?);
    let dtype = same_dtype(a.dtype, b.dtype)?;
    Ok(Type::tensor(broadcast_shapes(&a.shape, &b.shape)?, dtype))
}

/// Unary ops defined on every numeric dtype.
fn rel_unary(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    if t.dtype == DataType::Bool {
        return Err("data must be numeric, found bool".into());
    }
    Ok(Type::Tensor(t.clone()))
}

/// Unary math functions (`log`, `sin`, …): TVM's `IdentityRel`, so any
/// numeric tensor type-checks (TVM's tests type-check `log` of an int32);
/// only floating-point ones are computed (the interpreter and the TE computes
/// refuse an integer one, as TVM fails to compile it).
fn rel_unary_math(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    rel_unary(args, attrs)
}

fn rel_clip(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (lo, hi) = (attrs.float("a_min")?, attrs.float("a_max")?);
    if lo > hi {
        return Err(format!("a_min ({lo}) is greater than a_max ({hi})").into());
    }
    rel_unary(args, attrs)
}

fn rel_cast(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    Ok(Type::tensor(t.shape.clone(), attrs.dtype("dtype")?))
}

/// Apply `f` elementwise with broadcasting, in `f64`.
fn binary(args: &[Value], f: impl Fn(f64, f64) -> Result<f64, OpError>) -> Result<Value, OpError> {
    let (a, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let dtype = same_dtype(a.dtype(), b.dtype())?;
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let (ia, ib) = (broadcast_index_map(a.shape(), &shape), broadcast_index_map(b.shape(), &shape));
    let out = ia.iter().zip(&ib).map(|(&i, &j)| f(av[i], bv[j])).collect::<Result<Vec<f64>, OpError>>()?;
    Ok(Value::Tensor(Tensor::from_f64(dtype, shape, &out)))
}

/// [`binary`] for an operator whose result on two `float32` values, computed
/// in `f64` and rounded, is the one computed in `f32` (`+ − × ÷`, max, min:
/// each is correctly rounded, and `f64` holds an `f32` product exactly).
/// Float32 operands take that path: no `f64` copies nor index maps, which
/// constant folding paid over every weight tensor (batch norm into
/// convolutions). Results are identical either way (NaN payloads aside).
fn binary_exact(
    args: &[Value],
    f32_op: impl Fn(f32, f32) -> f32,
    f64_op: impl Fn(f64, f64) -> Result<f64, OpError>,
) -> Result<Value, OpError> {
    let (a, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    if a.dtype() != DataType::F32 || b.dtype() != DataType::F32 {
        return binary(args, f64_op);
    }
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    // Operands read and the result written as bytes in place, a run at a
    // time: one allocation, and loops over slices the compiler vectorizes
    // (a weight times its batch-norm scale is megabytes).
    let (ab, bb) = (a.bytes(), b.bytes());
    let mut out = vec![0u8; shape.iter().product::<usize>() * 4];
    let mut at = 0;
    for_each_broadcast_run(a.shape(), b.shape(), &shape, |r| {
        let dst = out[at * 4..(at + r.len) * 4].chunks_exact_mut(4);
        at += r.len;
        match (r.a_step, r.b_step) {
            (1, 0) => {
                let y = f32_at(bb, r.b);
                for (o, x) in dst.zip(f32_run(ab, r.a, r.len).chunks_exact(4)) {
                    o.copy_from_slice(&f32_op(f32_at(x, 0), y).to_le_bytes());
                }
            }
            (0, 1) => {
                let x = f32_at(ab, r.a);
                for (o, y) in dst.zip(f32_run(bb, r.b, r.len).chunks_exact(4)) {
                    o.copy_from_slice(&f32_op(x, f32_at(y, 0)).to_le_bytes());
                }
            }
            (1, 1) => {
                let pairs = f32_run(ab, r.a, r.len).chunks_exact(4).zip(f32_run(bb, r.b, r.len).chunks_exact(4));
                for (o, (x, y)) in dst.zip(pairs) {
                    o.copy_from_slice(&f32_op(f32_at(x, 0), f32_at(y, 0)).to_le_bytes());
                }
            }
            _ => {
                for (t, o) in dst.enumerate() {
                    let (x, y) = (f32_at(ab, r.a + t * r.a_step), f32_at(bb, r.b + t * r.b_step));
                    o.copy_from_slice(&f32_op(x, y).to_le_bytes());
                }
            }
        }
    });
    Ok(Value::Tensor(Tensor::from_bytes(DataType::F32, shape, out).ok_or("result size")?))
}

/// Element `i` of little-endian float32 `bytes`.
fn f32_at(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]])
}

/// The bytes of elements `start..start + len` of little-endian float32 `bytes`.
fn f32_run(bytes: &[u8], start: usize, len: usize) -> &[u8] {
    &bytes[start * 4..(start + len) * 4]
}

fn unary(args: &[Value], f: impl Fn(f64) -> f64) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let out: Vec<f64> = x.to_f64_vec().into_iter().map(f).collect();
    Ok(Value::Tensor(Tensor::from_f64(x.dtype(), x.shape().to_vec(), &out)))
}

/// A math function of floating-point values (`log`, `sin`, …). Its type
/// relation accepts an integer tensor, as TVM's does; computing it is refused,
/// as TVM refuses to compile it, rather than rounding an answer.
fn float_unary(args: &[Value], f: impl Fn(f64) -> f64) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    if !x.dtype().is_float() {
        return Err(format!("computed on floating-point tensors only, found {}", x.dtype()).into());
    }
    unary(args, f)
}

/// Whether integer semantics apply (truncating division, exact integer powers).
fn is_int(args: &[Value]) -> bool {
    tensor_val(args, 0).map(|t| !t.dtype().is_float()).unwrap_or(false)
}

fn eval_add(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary_exact(args, |a, b| a + b, |a, b| Ok(a + b))
}
fn eval_subtract(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary_exact(args, |a, b| a - b, |a, b| Ok(a - b))
}
fn eval_multiply(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary_exact(args, |a, b| a * b, |a, b| Ok(a * b))
}
fn eval_divide(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    if is_int(args) {
        binary(args, |a, b| if b == 0.0 { Err("integer division by zero".into()) } else { Ok((a / b).trunc()) })
    } else {
        binary_exact(args, |a, b| a / b, |a, b| Ok(a / b))
    }
}
fn eval_maximum(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary_exact(
        args,
        |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) },
        |a, b| Ok(if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }),
    )
}
fn eval_minimum(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary_exact(
        args,
        |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.min(b) },
        |a, b| Ok(if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) }),
    )
}
fn eval_power(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    if is_int(args) {
        binary(
            args,
            |a, b| {
                if b < 0.0 {
                    Err("integer power with a negative exponent".into())
                } else {
                    Ok(a.powi(b as i32))
                }
            },
        )
    } else {
        binary(args, |a, b| Ok(a.powf(b)))
    }
}
fn eval_negative(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    unary(args, |x| -x)
}
fn eval_exp(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    float_unary(args, f64::exp)
}
fn eval_log(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    float_unary(args, f64::ln)
}
fn eval_sqrt(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    float_unary(args, f64::sqrt)
}
fn eval_rsqrt(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    float_unary(args, |x| 1.0 / x.sqrt())
}
fn eval_tanh(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    float_unary(args, f64::tanh)
}
fn eval_sigmoid(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    float_unary(args, |x| 1.0 / (1.0 + (-x).exp()))
}
fn eval_erf(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    float_unary(args, libm::erf)
}
fn eval_relu(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    unary(args, |x| if x.is_nan() { x } else { x.max(0.0) })
}
fn eval_clip(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (lo, hi) = (attrs.float("a_min")?, attrs.float("a_max")?);
    unary(args, |x| if x.is_nan() { x } else { x.max(lo).min(hi) })
}
fn eval_cast(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    Ok(Value::Tensor(x.cast(attrs.dtype("dtype")?)))
}

/// Unary ops whose result is bool (`isnan`).
fn rel_unary_to_bool(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    float_dtype(t, "data")?;
    Ok(Type::tensor(t.shape.clone(), DataType::Bool))
}

/// Binary integer-or-float ops whose integer form needs both operands integral.
fn rel_broadcast_numeric(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = rel_broadcast(args, attrs)?;
    if t.as_tensor().is_some_and(|t| t.dtype == DataType::Bool) {
        return Err("operands must be numeric, found bool".into());
    }
    Ok(t)
}

/// `fn $name(args, attrs)` evaluating `$f` per element through `$apply`
/// (`unary`, or `float_unary` for the floating-point math functions).
macro_rules! unary_evals {
    ($apply:ident: $($name:ident => $f:expr;)*) => {
        $(fn $name(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
            $apply(args, $f)
        })*
    };
}

unary_evals! { unary:
    eval_abs => f64::abs;
    eval_sign => |x: f64| if x.is_nan() || x == 0.0 { x } else { x.signum() };
}

unary_evals! { float_unary:
    eval_floor => f64::floor;
    eval_ceil => f64::ceil;
    eval_round => f64::round_ties_even;
    eval_sin => f64::sin;
    eval_cos => f64::cos;
    eval_tan => f64::tan;
    eval_asin => f64::asin;
    eval_acos => f64::acos;
    eval_atan => f64::atan;
    eval_sinh => f64::sinh;
    eval_cosh => f64::cosh;
    eval_asinh => f64::asinh;
    eval_acosh => f64::acosh;
    eval_atanh => f64::atanh;
}

fn eval_isnan(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let out: Vec<f64> = x.to_f64_vec().iter().map(|v| v.is_nan() as u8 as f64).collect();
    Ok(Value::Tensor(Tensor::from_f64(DataType::Bool, x.shape().to_vec(), &out)))
}

/// Truncated remainder (C `fmod`, the sign of the dividend); integer division by zero is an error.
fn eval_mod(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    let int = is_int(args);
    binary(args, move |a, b| if int && b == 0.0 { Err("integer modulo by zero".into()) } else { Ok(a % b) })
}

/// Floored remainder (Python `%`, the sign of the divisor).
fn eval_floor_mod(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    let int = is_int(args);
    binary(args, move |a, b| {
        if int && b == 0.0 {
            return Err("integer modulo by zero".into());
        }
        let r = a % b;
        Ok(if r != 0.0 && (r < 0.0) != (b < 0.0) { r + b } else { r })
    })
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::{Broadcast, ElemWise};
    let binary: [(&'static str, super::EvalFn, &'static str); 7] = [
        ("add", eval_add, "Elementwise sum with NumPy broadcasting."),
        ("subtract", eval_subtract, "Elementwise difference with NumPy broadcasting."),
        ("multiply", eval_multiply, "Elementwise product with NumPy broadcasting."),
        ("divide", eval_divide, "Elementwise quotient with NumPy broadcasting (integer division truncates)."),
        ("maximum", eval_maximum, "Elementwise maximum with NumPy broadcasting."),
        ("minimum", eval_minimum, "Elementwise minimum with NumPy broadcasting."),
        ("power", eval_power, "Elementwise power `lhs ^ rhs` with NumPy broadcasting."),
    ];
    for (name, eval, doc) in binary {
        defs.push(OpDef::new(name, &["lhs", "rhs"], Broadcast, rel_broadcast, eval, doc));
    }
    defs.push(OpDef::new(
        "mod",
        &["lhs", "rhs"],
        Broadcast,
        rel_broadcast_numeric,
        eval_mod,
        "Truncated remainder (the sign of the dividend, C `fmod`); integer modulo by zero gives 0 in compiled code.",
    ));
    defs.push(OpDef::new(
        "floor_mod",
        &["lhs", "rhs"],
        Broadcast,
        rel_broadcast_numeric,
        eval_floor_mod,
        "Floored remainder (the sign of the divisor, Python `%`); integer modulo by zero gives 0 in compiled code.",
    ));
    let unary: [(&'static str, super::TypeRelFn, super::EvalFn, &'static str); 9] = [
        ("negative", rel_unary, eval_negative, "Elementwise negation."),
        ("exp", rel_unary_math, eval_exp, "Elementwise e^x."),
        ("log", rel_unary_math, eval_log, "Elementwise natural logarithm."),
        ("sqrt", rel_unary_math, eval_sqrt, "Elementwise square root."),
        ("rsqrt", rel_unary_math, eval_rsqrt, "Elementwise 1/sqrt(x)."),
        ("tanh", rel_unary_math, eval_tanh, "Elementwise hyperbolic tangent."),
        ("sigmoid", rel_unary_math, eval_sigmoid, "Elementwise 1/(1+e^-x)."),
        ("erf", rel_unary_math, eval_erf, "Elementwise Gauss error function."),
        ("nn.relu", rel_unary, eval_relu, "Elementwise max(x, 0)."),
    ];
    for (name, rel, eval, doc) in unary {
        defs.push(OpDef::new(name, &["data"], ElemWise, rel, eval, doc));
    }
    let more: [(&'static str, super::TypeRelFn, super::EvalFn, &'static str); 17] = [
        ("abs", rel_unary, eval_abs, "Elementwise absolute value."),
        ("sign", rel_unary, eval_sign, "Elementwise sign: -1, 0 or 1 (NaN stays NaN)."),
        ("floor", rel_unary_math, eval_floor, "Elementwise floor."),
        ("ceil", rel_unary_math, eval_ceil, "Elementwise ceiling."),
        ("round", rel_unary_math, eval_round, "Elementwise rounding to nearest, ties to even."),
        ("sin", rel_unary_math, eval_sin, "Elementwise sine."),
        ("cos", rel_unary_math, eval_cos, "Elementwise cosine."),
        ("tan", rel_unary_math, eval_tan, "Elementwise tangent."),
        ("asin", rel_unary_math, eval_asin, "Elementwise arcsine."),
        ("acos", rel_unary_math, eval_acos, "Elementwise arccosine."),
        ("atan", rel_unary_math, eval_atan, "Elementwise arctangent."),
        ("sinh", rel_unary_math, eval_sinh, "Elementwise hyperbolic sine."),
        ("cosh", rel_unary_math, eval_cosh, "Elementwise hyperbolic cosine."),
        ("asinh", rel_unary_math, eval_asinh, "Elementwise inverse hyperbolic sine."),
        ("acosh", rel_unary_math, eval_acosh, "Elementwise inverse hyperbolic cosine."),
        ("atanh", rel_unary_math, eval_atanh, "Elementwise inverse hyperbolic tangent."),
        ("isnan", rel_unary_to_bool, eval_isnan, "Elementwise test for NaN (bool result)."),
    ];
    for (name, rel, eval, doc) in more {
        defs.push(OpDef::new(name, &["data"], ElemWise, rel, eval, doc));
    }
    defs.push(
        OpDef::new("clip", &["data"], ElemWise, rel_clip, eval_clip, "Clamp to [a_min, a_max].")
            .attr(AttrSpec::required("a_min", AttrKind::Float))
            .attr(AttrSpec::required("a_max", AttrKind::Float)),
    );
    defs.push(
        OpDef::new("cast", &["data"], ElemWise, rel_cast, eval_cast, "Convert to another dtype.")
            .attr(AttrSpec::required("dtype", AttrKind::DType)),
    );
}

#[cfg(test)]
mod tests {
    use super::super::util::broadcast_shapes;
    use super::{binary, binary_exact};
    use crate::attrs::{AttrValue, Attrs};
    use crate::dtype::DataType::{self, *};
    use crate::relay::op::op_registry;
    use crate::relay::ty::Type;
    use crate::relay::value::Value;
    use crate::tensor::Tensor;
    use crate::OpError;

    fn rel(op: &str, args: &[Type], attrs: &[(&str, AttrValue)]) -> Result<Type, OpError> {
        let def = op_registry().by_name(op).unwrap();
        let a = Attrs::normalize(&Attrs::from_pairs(attrs.iter().map(|(k, v)| (*k, v.clone()))), &def.attrs, op)?;
        (def.type_rel)(args, &a)
    }

    fn eval(op: &str, args: &[Tensor], attrs: &[(&str, AttrValue)]) -> Result<Tensor, OpError> {
        let def = op_registry().by_name(op).unwrap();
        let a = Attrs::normalize(&Attrs::from_pairs(attrs.iter().map(|(k, v)| (*k, v.clone()))), &def.attrs, op)?;
        let vals: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
        match (def.eval)(&vals, &a)? {
            Value::Tensor(t) => Ok(t),
            other => Err(format!("not a tensor: {other:?}").into()),
        }
    }

    fn t(shape: &[usize], dt: DataType) -> Type {
        Type::tensor(shape.to_vec(), dt)
    }

    fn f32s(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::from_f64(F32, shape.to_vec(), v)
    }

    #[test]
    fn broadcast_type_relation() {
        assert_eq!(rel("add", &[t(&[2, 1, 3], F32), t(&[4, 1], F32)], &[]).unwrap(), t(&[2, 4, 3], F32));
        assert_eq!(rel("multiply", &[t(&[], F32), t(&[5], F32)], &[]).unwrap(), t(&[5], F32));
        let e = rel("add", &[t(&[2, 3], F32), t(&[4], F32)], &[]).unwrap_err();
        assert_eq!(e.to_string(), "cannot broadcast shapes (2, 3) and (4,)");
        let e = rel("subtract", &[t(&[2], F32), t(&[2], I32)], &[]).unwrap_err();
        assert_eq!(e.to_string(), "dtype mismatch: float32 vs int32");
        let tuple = Type::Tuple(vec![t(&[2], F32)]);
        assert!(rel("add", &[tuple, t(&[2], F32)], &[]).unwrap_err().to_string().contains("must be a tensor"));
    }

    #[test]
    fn unary_type_relations() {
        assert_eq!(rel("exp", &[t(&[3], F16)], &[]).unwrap(), t(&[3], F16));
        // TVM's IdentityRel: an integer tensor type-checks; it is not computed.
        assert_eq!(rel("exp", &[t(&[3], I32)], &[]).unwrap(), t(&[3], I32));
        assert!(rel("log", &[t(&[3], Bool)], &[]).is_err());
        assert_eq!(rel("nn.relu", &[t(&[3], I8)], &[]).unwrap(), t(&[3], I8));
        assert!(rel("negative", &[t(&[3], Bool)], &[]).is_err());
        assert_eq!(rel("cast", &[t(&[2], F32)], &[("dtype", AttrValue::Str("int64".into()))]).unwrap(), t(&[2], I64));
        let clip = [("a_min", AttrValue::Float(1.0)), ("a_max", AttrValue::Float(0.0))];
        assert!(rel("clip", &[t(&[2], F32)], &clip).unwrap_err().to_string().contains("greater"));
    }

    #[test]
    fn binary_values() {
        let a = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = f32s(&[2], &[10.0, 20.0]);
        assert_eq!(eval("add", &[a.clone(), b.clone()], &[]).unwrap().to_f64_vec(), vec![11.0, 22.0, 13.0, 24.0]);
        assert_eq!(
            eval("subtract", &[a.clone(), b.clone()], &[]).unwrap().to_f64_vec(),
            vec![-9.0, -18.0, -7.0, -16.0]
        );
        assert_eq!(eval("multiply", &[a.clone(), b.clone()], &[]).unwrap().to_f64_vec(), vec![10.0, 40.0, 30.0, 80.0]);
        assert_eq!(eval("divide", &[b.clone(), f32s(&[], &[4.0])], &[]).unwrap().to_f64_vec(), vec![2.5, 5.0]);
        assert_eq!(
            eval("maximum", &[a.clone(), f32s(&[], &[2.5])], &[]).unwrap().to_f64_vec(),
            vec![2.5, 2.5, 3.0, 4.0]
        );
        assert_eq!(
            eval("minimum", &[a.clone(), f32s(&[], &[2.5])], &[]).unwrap().to_f64_vec(),
            vec![1.0, 2.0, 2.5, 2.5]
        );
        assert_eq!(eval("power", &[a, f32s(&[], &[2.0])], &[]).unwrap().to_f64_vec(), vec![1.0, 4.0, 9.0, 16.0]);
        let i = Tensor::from_i64(vec![3], &[7, -7, 6]);
        let d = Tensor::from_i64(vec![], &[2]);
        assert_eq!(eval("divide", &[i.clone(), d], &[]).unwrap().to_f64_vec(), vec![3.0, -3.0, 3.0]);
        let zero = Tensor::from_i64(vec![], &[0]);
        assert!(eval("divide", &[i, zero], &[]).unwrap_err().to_string().contains("division by zero"));
    }

    /// The float32 path (runs over bytes) gives what the f64 path gives, for
    /// operands broadcast every way a rank-3 output allows: equal shapes,
    /// scalars, unit axes on either side, and both sides broadcast at once.
    #[test]
    fn float32_runs_equal_the_f64_path() {
        let shapes: [&[usize]; 9] = [&[], &[3], &[1], &[4, 1], &[4, 3], &[2, 1, 3], &[2, 4, 1], &[1, 4, 3], &[2, 4, 3]];
        let values = |shape: &[usize], seed: f64| -> Tensor {
            let n: usize = shape.iter().product();
            f32s(shape, &(0..n).map(|i| ((i as f64 + seed) * 0.37).sin() * 3.0).collect::<Vec<_>>())
        };
        for a in shapes {
            for b in shapes {
                let Ok(shape) = broadcast_shapes(a, b) else { continue };
                let args = [Value::Tensor(values(a, 0.5)), Value::Tensor(values(b, 1.5))];
                for (name, f32_op, f64_op) in [
                    ("multiply", (|x, y| x * y) as fn(f32, f32) -> f32, (|x, y| x * y) as fn(f64, f64) -> f64),
                    ("subtract", |x, y| x - y, |x, y| x - y),
                    ("divide", |x, y| x / y, |x, y| x / y),
                ] {
                    let fast = binary_exact(&args, f32_op, |x, y| Ok(f64_op(x, y))).unwrap();
                    let slow = binary(&args, |x, y| Ok(f64_op(x, y))).unwrap();
                    let (Value::Tensor(fast), Value::Tensor(slow)) = (fast, slow) else { panic!("tensors") };
                    assert_eq!(fast.shape(), &shape[..]);
                    assert_eq!(fast, slow, "{name} {a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn unary_values() {
        let x = f32s(&[4], &[-1.0, 0.0, 0.5, 2.0]);
        let close = |a: Vec<f64>, b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        assert_eq!(eval("negative", &[x.clone()], &[]).unwrap().to_f64_vec(), vec![1.0, -0.0, -0.5, -2.0]);
        assert_eq!(eval("nn.relu", &[x.clone()], &[]).unwrap().to_f64_vec(), vec![0.0, 0.0, 0.5, 2.0]);
        assert!(close(
            eval("exp", &[x.clone()], &[]).unwrap().to_f64_vec(),
            &[0.367_879_4, 1.0, 1.648_721_3, 7.389_056]
        ));
        assert!(close(
            eval("sigmoid", &[x.clone()], &[]).unwrap().to_f64_vec(),
            &[0.268_941_4, 0.5, 0.622_459_3, 0.880_797_1]
        ));
        assert!(close(
            eval("tanh", &[x.clone()], &[]).unwrap().to_f64_vec(),
            &[-0.761_594_2, 0.0, 0.462_117_2, 0.964_027_6]
        ));
        assert!(close(
            eval("erf", &[x.clone()], &[]).unwrap().to_f64_vec(),
            &[-0.842_700_8, 0.0, 0.520_499_9, 0.995_322_3]
        ));
        let p = f32s(&[3], &[1.0, 4.0, 0.25]);
        assert!(close(eval("sqrt", &[p.clone()], &[]).unwrap().to_f64_vec(), &[1.0, 2.0, 0.5]));
        assert!(close(eval("rsqrt", &[p.clone()], &[]).unwrap().to_f64_vec(), &[1.0, 0.5, 2.0]));
        assert!(close(eval("log", &[p], &[]).unwrap().to_f64_vec(), &[0.0, 1.386_294_4, -1.386_294_4]));
        // Bitwise operators likewise (TVM's BroadcastRel): float32 type-checks, is not computed.
        assert_eq!(rel("left_shift", &[t(&[2], F32), t(&[2], F32)], &[]).unwrap(), t(&[2], F32));
        assert_eq!(rel("bitwise_not", &[t(&[2], F32)], &[]).unwrap(), t(&[2], F32));
        let floats = Tensor::from_f64(F32, vec![2], &[1.0, 4.0]);
        let e = eval("left_shift", &[floats.clone(), floats], &[]).unwrap_err().to_string();
        assert!(e.contains("needs integer operands, found float32"), "{e}");
        let ints = Tensor::from_f64(I32, vec![2], &[1.0, 4.0]);
        for op in ["log", "exp", "sin", "floor"] {
            let e = eval(op, &[ints.clone()], &[]).unwrap_err().to_string();
            assert!(e.contains("floating-point tensors only, found int32"), "{op}: {e}");
        }
        let clip = [("a_min", AttrValue::Float(-0.5)), ("a_max", AttrValue::Float(1.0))];
        assert_eq!(eval("clip", &[x.clone()], &clip).unwrap().to_f64_vec(), vec![-0.5, 0.0, 0.5, 1.0]);
        let c = eval("cast", &[x], &[("dtype", AttrValue::Str("int32".into()))]).unwrap();
        assert_eq!((c.dtype(), c.to_f64_vec()), (I32, vec![-1.0, 0.0, 0.0, 2.0]));
    }
}
