//! Reductions: `sum`, `mean`, `max`, `min`, `prod`, and `argmax`/`argmin`.

use super::util::{for_each_index, norm_axis, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrSpec, Attrs};
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::{strides, Tensor};
use crate::OpError;

/// The reduced axes (sorted, unique) of a rank-`ndim` input, honouring `exclude`.
pub(crate) fn reduced_axes(attrs: &Attrs, ndim: usize) -> Result<Vec<usize>, OpError> {
    let mut axes: Vec<usize> = match attrs.opt_ints("axis")? {
        None => (0..ndim).collect(),
        Some(list) => list.iter().map(|&a| norm_axis(a, ndim)).collect::<Result<_, _>>()?,
    };
    axes.sort_unstable();
    if axes.windows(2).any(|w| w[0] == w[1]) {
        return Err("an axis is listed twice".into());
    }
    if attrs.bool("exclude")? {
        axes = (0..ndim).filter(|a| !axes.contains(a)).collect();
    }
    Ok(axes)
}

fn out_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &n)| match (axes.contains(&d), keepdims) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(n),
        })
        .collect()
}

fn rel_reduce(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let axes = reduced_axes(attrs, t.rank())?;
    Ok(Type::tensor(out_shape(&t.shape, &axes, attrs.bool("keepdims")?), t.dtype))
}

/// Reduce with `init` and `combine`, then `finish(acc, count)`.
fn reduce(
    args: &[Value],
    attrs: &Attrs,
    init: f64,
    combine: fn(f64, f64) -> f64,
    finish: fn(f64, usize) -> f64,
) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let shape = x.shape().to_vec();
    let axes = reduced_axes(attrs, shape.len())?;
    let keep = attrs.bool("keepdims")?;
    // Accumulate into the keepdims-shaped result; its flat layout equals the squeezed one.
    let kept = out_shape(&shape, &axes, true);
    let kept_strides = strides(&kept);
    let mut acc = vec![init; kept.iter().product()];
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let data = x.to_f64_vec();
    for_each_index(&shape, |idx, i| {
        let o: usize =
            idx.iter().enumerate().map(|(d, &v)| if axes.contains(&d) { 0 } else { v * kept_strides[d] }).sum();
        acc[o] = combine(acc[o], data[i]);
    });
    let out: Vec<f64> = acc.into_iter().map(|a| finish(a, count)).collect();
    Ok(Value::Tensor(Tensor::from_f64(x.dtype(), out_shape(&shape, &axes, keep), &out)))
}

fn eval_sum(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reduce(args, attrs, 0.0, |a, b| a + b, |a, _| a)
}

fn eval_mean(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reduce(args, attrs, 0.0, |a, b| a + b, |a, n| if n == 0 { f64::NAN } else { a / n as f64 })
}

fn eval_max(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reduce(args, attrs, f64::NEG_INFINITY, |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }, |a, _| a)
}

fn eval_min(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reduce(args, attrs, f64::INFINITY, |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) }, |a, _| a)
}

fn eval_prod(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reduce(args, attrs, 1.0, |a, b| a * b, |a, _| a)
}

/// `argmax`/`argmin`: one axis, int64 indices.
fn rel_arg(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let axis = norm_axis(attrs.int("axis")?, t.rank().max(1))?;
    if t.rank() == 0 {
        return Err("argmax/argmin of a scalar".into());
    }
    if t.shape[axis] == 0 {
        return Err(format!("axis {axis} is empty").into());
    }
    Ok(Type::tensor(out_shape(&t.shape, &[axis], attrs.bool("keepdims")?), crate::dtype::DataType::I64))
}

fn arg_reduce(args: &[Value], attrs: &Attrs, better: fn(f64, f64) -> bool) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let ty = rel_arg(&[Type::tensor(x.shape().to_vec(), x.dtype())], attrs)?;
    let shape = x.shape().to_vec();
    let axis = norm_axis(attrs.int("axis")?, shape.len())?;
    let last = attrs.bool("select_last_index")?;
    let (outer, n, inner) =
        (shape[..axis].iter().product::<usize>(), shape[axis], shape[axis + 1..].iter().product::<usize>());
    let data = x.to_f64_vec();
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0;
            for k in 1..n {
                let (v, b) = (data[(o * n + k) * inner + i], data[(o * n + best) * inner + i]);
                if better(v, b) || (last && v == b) {
                    best = k;
                }
            }
            out.push(best as f64);
        }
    }
    let shape = ty.as_tensor().ok_or("not a tensor")?.shape.clone();
    Ok(Value::Tensor(Tensor::from_f64(crate::dtype::DataType::I64, shape, &out)))
}

fn eval_argmax(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    arg_reduce(args, attrs, |v, b| v > b)
}

fn eval_argmin(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    arg_reduce(args, attrs, |v, b| v < b)
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    for (name, eval, doc) in [
        ("argmax", eval_argmax as super::EvalFn, "Index of the largest element along `axis` (int64)."),
        ("argmin", eval_argmin, "Index of the smallest element along `axis` (int64)."),
    ] {
        defs.push(
            OpDef::new(name, &["data"], OpPattern::CommReduce, rel_arg, eval, doc)
                .attr(AttrSpec::int("axis", 0))
                .attr(AttrSpec::bool("keepdims", true))
                .attr(AttrSpec::bool("select_last_index", false)),
        );
    }
    let ops: [(&'static str, super::EvalFn, &'static str); 5] = [
        ("min", eval_min, "Minimum over `axis` (all axes when None)."),
        ("prod", eval_prod, "Product over `axis` (all axes when None)."),
        ("sum", eval_sum, "Sum over `axis` (all axes when None)."),
        ("mean", eval_mean, "Arithmetic mean over `axis` (all axes when None)."),
        ("max", eval_max, "Maximum over `axis` (all axes when None)."),
    ];
    for (name, eval, doc) in ops {
        defs.push(
            OpDef::new(name, &["data"], OpPattern::CommReduce, rel_reduce, eval, doc)
                .attr(AttrSpec::opt_ints("axis"))
                .attr(AttrSpec::bool("keepdims", false))
                .attr(AttrSpec::bool("exclude", false)),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::attrs::{AttrValue, Attrs};
    use crate::dtype::DataType::F32;
    use crate::relay::op::op_registry;
    use crate::relay::ty::Type;
    use crate::relay::value::Value;
    use crate::tensor::Tensor;
    use crate::OpError;

    fn run(op: &str, x: &Tensor, attrs: &[(&str, AttrValue)]) -> Result<(Type, Tensor), OpError> {
        let def = op_registry().by_name(op).unwrap();
        let a = Attrs::normalize(&Attrs::from_pairs(attrs.iter().map(|(k, v)| (*k, v.clone()))), &def.attrs, op)?;
        let ty = (def.type_rel)(&[Type::tensor(x.shape().to_vec(), x.dtype())], &a)?;
        let Value::Tensor(v) = (def.eval)(&[Value::Tensor(x.clone())], &a)? else { return Err("tuple".into()) };
        assert_eq!(ty, Type::tensor(v.shape().to_vec(), v.dtype()), "type relation and value disagree");
        Ok((ty, v))
    }

    #[test]
    fn reductions() {
        // [[1, 2, 3], [4, 5, 6]]
        let x = Tensor::from_f64(F32, vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let ax = |v: &[i64]| ("axis", AttrValue::Ints(v.to_vec()));
        assert_eq!(run("sum", &x, &[]).unwrap().1.to_f64_vec(), vec![21.0]);
        assert_eq!(run("sum", &x, &[ax(&[0])]).unwrap().1.to_f64_vec(), vec![5.0, 7.0, 9.0]);
        assert_eq!(run("sum", &x, &[ax(&[-1])]).unwrap().1.to_f64_vec(), vec![6.0, 15.0]);
        let (ty, v) = run("mean", &x, &[ax(&[1]), ("keepdims", AttrValue::Bool(true))]).unwrap();
        assert_eq!((ty, v.to_f64_vec()), (Type::tensor([2, 1], F32), vec![2.0, 5.0]));
        assert_eq!(run("max", &x, &[ax(&[0])]).unwrap().1.to_f64_vec(), vec![4.0, 5.0, 6.0]);
        // exclude: reduce every axis but 0.
        assert_eq!(
            run("sum", &x, &[ax(&[0]), ("exclude", AttrValue::Bool(true))]).unwrap().1.to_f64_vec(),
            vec![6.0, 15.0]
        );
        assert!(run("sum", &x, &[ax(&[2])]).unwrap_err().to_string().contains("out of range"));
        assert!(run("sum", &x, &[ax(&[1, -1])]).unwrap_err().to_string().contains("twice"));
    }
}
