//! Masks and lookups (what ONNX graphs use for attention masks and
//! embeddings): `equal`, `less`, `logical_not`, `where`, `take`,
//! `broadcast_to`, and `nn.leaky_relu`.

use super::util::{
    broadcast_index_map, broadcast_shapes, for_each_index, norm_axis, same_dtype, shape_str, tensor_arg, tensor_val,
};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrKind, AttrSpec, Attrs};
use crate::dtype::DataType;
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::{strides, Tensor};
use crate::OpError;

fn rel_compare(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let (a, b) = (tensor_arg(args, 0, "lhs")?, tensor_arg(args, 1, "rhs")?);
    same_dtype(a.dtype, b.dtype)?;
    Ok(Type::tensor(broadcast_shapes(&a.shape, &b.shape)?, DataType::Bool))
}

fn compare(args: &[Value], f: fn(f64, f64) -> bool) -> Result<Value, OpError> {
    let (a, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    same_dtype(a.dtype(), b.dtype())?;
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let (ia, ib) = (broadcast_index_map(a.shape(), &shape), broadcast_index_map(b.shape(), &shape));
    let out: Vec<f64> = ia.iter().zip(&ib).map(|(&i, &j)| f(av[i], bv[j]) as u8 as f64).collect();
    Ok(Value::Tensor(Tensor::from_f64(DataType::Bool, shape, &out)))
}

fn eval_equal(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a == b)
}

fn eval_less(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a < b)
}

fn eval_greater(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a > b)
}

fn eval_greater_equal(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a >= b)
}

fn eval_less_equal(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a <= b)
}

fn eval_not_equal(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a != b)
}

/// Bool operands, broadcast, bool result.
fn rel_logical(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (a, b) = (tensor_arg(args, 0, "lhs")?, tensor_arg(args, 1, "rhs")?);
    if a.dtype != DataType::Bool || b.dtype != DataType::Bool {
        return Err(format!("logical operators need bool operands, found {} and {}", a.dtype, b.dtype).into());
    }
    rel_compare(args, attrs)
}

fn eval_logical_and(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a != 0.0 && b != 0.0)
}

fn eval_logical_or(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| a != 0.0 || b != 0.0)
}

fn eval_logical_xor(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    compare(args, |a, b| (a != 0.0) != (b != 0.0))
}

fn rel_not(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    if t.dtype != DataType::Bool {
        return Err(format!("logical_not needs a bool tensor, found {}", t.dtype).into());
    }
    Ok(Type::Tensor(t.clone()))
}

fn eval_not(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let out: Vec<f64> = x.to_f64_vec().iter().map(|&v| (v == 0.0) as u8 as f64).collect();
    Ok(Value::Tensor(Tensor::from_f64(DataType::Bool, x.shape().to_vec(), &out)))
}

fn rel_where(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let (c, x, y) = (tensor_arg(args, 0, "condition")?, tensor_arg(args, 1, "x")?, tensor_arg(args, 2, "y")?);
    if c.dtype != DataType::Bool {
        return Err(format!("the condition must be bool, found {}", c.dtype).into());
    }
    let dtype = same_dtype(x.dtype, y.dtype)?;
    let shape = broadcast_shapes(&broadcast_shapes(&c.shape, &x.shape)?, &y.shape)?;
    Ok(Type::tensor(shape, dtype))
}

fn eval_where(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (c, x, y) = (tensor_val(args, 0)?, tensor_val(args, 1)?, tensor_val(args, 2)?);
    let types: Vec<Type> = [c, x, y].iter().map(|t| Type::tensor(t.shape().to_vec(), t.dtype())).collect();
    let out_ty = rel_where(&types, attrs)?;
    let shape = out_ty.as_tensor().ok_or("not a tensor")?.shape.clone();
    let (cv, xv, yv) = (c.to_f64_vec(), x.to_f64_vec(), y.to_f64_vec());
    let (ic, ix, iy) = (
        broadcast_index_map(c.shape(), &shape),
        broadcast_index_map(x.shape(), &shape),
        broadcast_index_map(y.shape(), &shape),
    );
    let out: Vec<f64> = (0..ic.len()).map(|k| if cv[ic[k]] != 0.0 { xv[ix[k]] } else { yv[iy[k]] }).collect();
    Ok(Value::Tensor(Tensor::from_f64(x.dtype(), shape, &out)))
}

fn rel_take(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (d, i) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "indices")?);
    if !i.dtype.is_int() {
        return Err(format!("indices must be integers, found {}", i.dtype).into());
    }
    let mode = attrs.str("mode")?;
    if mode != "clip" && mode != "wrap" {
        return Err(format!("mode must be \"clip\" or \"wrap\", found \"{mode}\"").into());
    }
    let shape = match attrs.opt_int("axis")? {
        None => i.shape.clone(),
        Some(a) => {
            let a = norm_axis(a, d.rank())?;
            let mut s = d.shape[..a].to_vec();
            s.extend(&i.shape);
            s.extend(&d.shape[a + 1..]);
            s
        }
    };
    Ok(Type::tensor(shape, d.dtype))
}

/// The bound of every index of `check_index`: one for all, or one per
/// position along the last axis (GatherND's index tuples).
fn check_index_bounds(shape: &[usize], attrs: &Attrs) -> Result<Vec<i64>, OpError> {
    let bounds = attrs.ints("bounds")?;
    if let Some(&b) = bounds.iter().find(|&&b| b < 1) {
        return Err(format!("bounds must be positive, found {b}").into());
    }
    match bounds.len() {
        0 => Err("no bounds".into()),
        1 => Ok(bounds.to_vec()),
        n if shape.last() == Some(&n) => Ok(bounds.to_vec()),
        n => Err(format!(
            "{n} bounds for indices of shape {}: expected 1 or one per position on the last axis",
            shape_str(shape)
        )
        .into()),
    }
}

fn rel_check_index(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let i = tensor_arg(args, 0, "indices")?;
    if !i.dtype.is_int() {
        return Err(format!("indices must be integers, found {}", i.dtype).into());
    }
    check_index_bounds(&i.shape, attrs)?;
    Ok(Type::tensor(i.shape.clone(), i.dtype))
}

fn eval_check_index(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let i = tensor_val(args, 0)?;
    let bounds = check_index_bounds(i.shape(), attrs)?;
    let fixed = i
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let (v, n) = (v as i64, bounds[k % bounds.len()]);
            match v {
                _ if (0..n).contains(&v) => Ok(v as f64),
                _ if (-n..0).contains(&v) => Ok((v + n) as f64),
                _ => Err(format!("index {v} is out of range for an axis of size {n}").into()),
            }
        })
        .collect::<Result<Vec<f64>, OpError>>()?;
    Ok(Value::Tensor(Tensor::from_f64(i.dtype(), i.shape().to_vec(), &fixed)))
}

/// An index into an axis of `n` elements: clipped, or wrapped (negative counts from the end).
pub(crate) fn take_index(v: i64, n: usize, wrap: bool) -> usize {
    let n = n.max(1) as i64;
    (if wrap { v.rem_euclid(n) } else { v.clamp(0, n - 1) }) as usize
}

fn eval_take(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (d, i) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let types = [Type::tensor(d.shape().to_vec(), d.dtype()), Type::tensor(i.shape().to_vec(), i.dtype())];
    let out_shape = rel_take(&types, attrs)?.as_tensor().ok_or("not a tensor")?.shape.clone();
    let wrap = attrs.str("mode")? == "wrap";
    let (dv, iv) = (d.to_f64_vec(), i.to_f64_vec());
    let mut out = vec![0.0; out_shape.iter().product()];
    match attrs.opt_int("axis")? {
        None => {
            for (k, v) in iv.iter().enumerate() {
                out[k] = dv[take_index(*v as i64, dv.len(), wrap)];
            }
        }
        Some(a) => {
            let a = norm_axis(a, d.shape().len())?;
            let ds = strides(d.shape());
            let is = strides(i.shape());
            let ir = i.shape().len();
            for_each_index(&out_shape, |idx, o| {
                let j: usize = idx[a..a + ir].iter().zip(&is).map(|(x, s)| x * s).sum();
                let pick = take_index(iv[j] as i64, d.shape()[a], wrap);
                let mut flat = 0;
                for (k, s) in ds.iter().enumerate() {
                    let x = if k < a {
                        idx[k]
                    } else if k == a {
                        pick
                    } else {
                        idx[k - 1 + ir]
                    };
                    flat += x * s;
                }
                out[o] = dv[flat];
            });
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(d.dtype(), out_shape, &out)))
}

fn rel_broadcast_to(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let shape: Vec<usize> = attrs
        .ints("shape")?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let b = broadcast_shapes(&t.shape, &shape)?;
    if b != shape {
        return Err(format!("cannot broadcast {} to {}", shape_str(&t.shape), shape_str(&shape)).into());
    }
    Ok(Type::tensor(shape, t.dtype))
}

fn eval_broadcast_to(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let shape = rel_broadcast_to(&[Type::tensor(x.shape().to_vec(), x.dtype())], attrs)?
        .as_tensor()
        .ok_or("not a tensor")?
        .shape
        .clone();
    let xv = x.to_f64_vec();
    let out: Vec<f64> = broadcast_index_map(x.shape(), &shape).iter().map(|&i| xv[i]).collect();
    Ok(Value::Tensor(Tensor::from_f64(x.dtype(), shape, &out)))
}

fn rel_leaky_relu(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    super::util::float_dtype(t, "data")?;
    Ok(Type::Tensor(t.clone()))
}

fn eval_leaky_relu(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let a = attrs.float("alpha")?;
    let out: Vec<f64> = x.to_f64_vec().iter().map(|&v| if v > 0.0 { v } else { v * a }).collect();
    Ok(Value::Tensor(Tensor::from_f64(x.dtype(), x.shape().to_vec(), &out)))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::*;
    defs.push(OpDef::new(
        "equal",
        &["lhs", "rhs"],
        Broadcast,
        rel_compare,
        eval_equal,
        "Elementwise `lhs == rhs` (bool), broadcasting.",
    ));
    defs.push(OpDef::new(
        "less",
        &["lhs", "rhs"],
        Broadcast,
        rel_compare,
        eval_less,
        "Elementwise `lhs < rhs` (bool), broadcasting.",
    ));
    let more: [(&'static str, super::TypeRelFn, super::EvalFn, &'static str); 7] = [
        ("greater", rel_compare, eval_greater, "Elementwise `lhs > rhs` (bool), broadcasting."),
        ("greater_equal", rel_compare, eval_greater_equal, "Elementwise `lhs >= rhs` (bool), broadcasting."),
        ("less_equal", rel_compare, eval_less_equal, "Elementwise `lhs <= rhs` (bool), broadcasting."),
        ("not_equal", rel_compare, eval_not_equal, "Elementwise `lhs != rhs` (bool), broadcasting."),
        ("logical_and", rel_logical, eval_logical_and, "Elementwise `lhs && rhs` of bool tensors, broadcasting."),
        ("logical_or", rel_logical, eval_logical_or, "Elementwise `lhs || rhs` of bool tensors, broadcasting."),
        ("logical_xor", rel_logical, eval_logical_xor, "Elementwise `lhs != rhs` of bool tensors, broadcasting."),
    ];
    for (name, rel, eval, doc) in more {
        defs.push(OpDef::new(name, &["lhs", "rhs"], Broadcast, rel, eval, doc));
    }
    defs.push(OpDef::new(
        "logical_not",
        &["data"],
        ElemWise,
        rel_not,
        eval_not,
        "Elementwise negation of a bool tensor.",
    ));
    defs.push(OpDef::new(
        "where",
        &["condition", "x", "y"],
        Broadcast,
        rel_where,
        eval_where,
        "`x` where `condition`, else `y`, broadcasting.",
    ));
    defs.push(
        OpDef::new(
            "take",
            &["data", "indices"],
            Injective,
            rel_take,
            eval_take,
            "Gather along `axis` (the flattened data when None) at run-time indices.",
        )
        .attr(AttrSpec::opt_int("axis"))
        .attr(AttrSpec::str("mode", "clip")),
    );
    defs.push(
        OpDef::new(
            "check_index",
            &["indices"],
            ElemWise,
            rel_check_index,
            eval_check_index,
            "Indices into axes of `bounds` elements (one bound for all, or one per position on the \
             last axis), checked when the model runs: negative ones count from the end, and one outside \
             `[-bound, bound)` makes the run fail with an error (ONNX's Gather semantics; `take` alone \
             clips or wraps).",
        )
        .attr(AttrSpec::required("bounds", AttrKind::Ints)),
    );
    defs.push(
        OpDef::new("broadcast_to", &["data"], Broadcast, rel_broadcast_to, eval_broadcast_to, "Broadcast to `shape`.")
            .attr(AttrSpec::required("shape", AttrKind::Ints)),
    );
    defs.push(
        OpDef::new(
            "nn.leaky_relu",
            &["data"],
            ElemWise,
            rel_leaky_relu,
            eval_leaky_relu,
            "`x` if positive, else `alpha · x`.",
        )
        .attr(AttrSpec::float("alpha", 0.01)),
    );
}
