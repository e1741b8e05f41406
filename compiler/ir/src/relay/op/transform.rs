//! Data movement and creation: `reshape`, `transpose`, `concatenate`, `split`,
//! `squeeze`, `expand_dims`, `strided_slice`, `nn.batch_flatten`, `zeros`, `ones`, `full`.

use super::util::{flat, for_each_index, for_each_row, norm_axis, shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrKind, AttrSpec, AttrValue, Attrs};
use crate::dtype::DataType;
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::{numel, strides, Tensor};
use crate::OpError;

/// The shape `newshape` denotes for an input of `shape` (TVM: 0 copies the
/// input's dim at the same position, -1 is inferred).
pub(crate) fn reshape_target(shape: &[usize], newshape: &[i64]) -> Result<Vec<usize>, OpError> {
    let total = numel(shape);
    let mut out = Vec::with_capacity(newshape.len());
    let mut infer = None;
    for (i, &d) in newshape.iter().enumerate() {
        match d {
            0 => out.push(*shape.get(i).ok_or_else(|| {
                format!("newshape[{i}] = 0 copies a dimension the input (rank {}) lacks", shape.len())
            })?),
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            -1 => return Err("newshape has more than one -1".into()),
            d if d > 0 => out.push(d as usize),
            d => return Err(format!("newshape value {d} is not supported (use positive sizes, 0 or -1)").into()),
        }
    }
    if let Some(i) = infer {
        let known: usize = out.iter().product();
        if known == 0 || total % known != 0 {
            return Err(format!("cannot reshape {} into {:?}", shape_str(shape), newshape).into());
        }
        out[i] = total / known;
    }
    if numel(&out) != total {
        return Err(format!(
            "cannot reshape {} ({total} elements) into {} ({} elements)",
            shape_str(shape),
            shape_str(&out),
            numel(&out)
        )
        .into());
    }
    Ok(out)
}

fn rel_reshape(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    Ok(Type::tensor(reshape_target(&t.shape, attrs.ints("newshape")?)?, t.dtype))
}

/// Same data, new shape (row-major order is unchanged).
fn reshaped_value(args: &[Value], out: &Type) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let shape = out.as_tensor().ok_or("not a tensor type")?.shape.clone();
    x.reshaped(shape).map(Value::Tensor).ok_or_else(|| OpError::from("element count changed"))
}

fn types_of(args: &[Value]) -> Vec<Type> {
    args.iter()
        .map(|v| match v {
            Value::Tensor(t) => Type::tensor(t.shape().to_vec(), t.dtype()),
            Value::Tuple(f) => Type::Tuple(types_of(f)),
            Value::Closure(_) => Type::Tuple(vec![]),
        })
        .collect()
}

fn eval_reshape(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reshaped_value(args, &rel_reshape(&types_of(args), attrs)?)
}

/// `contrib_reverse_reshape`'s target: `newshape` applied from the right
/// (a `0` copies the input's dim at the same position counted from the end).
pub(crate) fn reverse_reshape_target(shape: &[usize], newshape: &[i64]) -> Result<Vec<usize>, OpError> {
    let rev_shape: Vec<usize> = shape.iter().rev().copied().collect();
    let rev_new: Vec<i64> = newshape.iter().rev().copied().collect();
    let mut out = reshape_target(&rev_shape, &rev_new)?;
    out.reverse();
    Ok(out)
}

fn rel_reverse_reshape(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    Ok(Type::tensor(reverse_reshape_target(&t.shape, attrs.ints("newshape")?)?, t.dtype))
}

fn eval_reverse_reshape(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reshaped_value(args, &rel_reverse_reshape(&types_of(args), attrs)?)
}

/// `annotation.stop_fusion`: the identity, as a fusion barrier.
fn rel_identity(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    Ok(Type::Tensor(tensor_arg(args, 0, "data")?.clone()))
}

fn eval_identity(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    Ok(Value::Tensor(tensor_val(args, 0)?.clone()))
}

/// `shape_of`'s value for a tensor of `shape`.
pub fn shape_of_tensor(shape: &[usize], dtype: DataType) -> Tensor {
    Tensor::from_f64(dtype, vec![shape.len()], &shape.iter().map(|&d| d as f64).collect::<Vec<_>>())
}

/// `ndarray_size`'s value for a tensor of `shape`.
pub fn ndarray_size_tensor(shape: &[usize], dtype: DataType) -> Tensor {
    Tensor::from_f64(dtype, vec![], &[numel(shape) as f64])
}

fn rel_shape_of(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    Ok(Type::tensor([t.rank()], attrs.dtype("dtype")?))
}

fn eval_shape_of(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    Ok(Value::Tensor(shape_of_tensor(tensor_val(args, 0)?.shape(), attrs.dtype("dtype")?)))
}

fn rel_ndarray_size(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    tensor_arg(args, 0, "data")?;
    Ok(Type::tensor([0usize; 0], attrs.dtype("dtype")?))
}

fn eval_ndarray_size(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    Ok(Value::Tensor(ndarray_size_tensor(tensor_val(args, 0)?.shape(), attrs.dtype("dtype")?)))
}

fn rel_batch_flatten(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    if t.rank() < 1 {
        return Err("batch_flatten needs a tensor of rank at least 1".into());
    }
    Ok(Type::tensor([t.shape[0], t.shape[1..].iter().product()], t.dtype))
}

fn eval_batch_flatten(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reshaped_value(args, &rel_batch_flatten(&types_of(args), attrs)?)
}

fn permutation(attrs: &Attrs, ndim: usize) -> Result<Vec<usize>, OpError> {
    match attrs.opt_ints("axes")? {
        None => Ok((0..ndim).rev().collect()),
        Some(axes) => {
            if axes.len() != ndim {
                return Err(format!("axes {axes:?} has {} entries for a tensor of rank {ndim}", axes.len()).into());
            }
            let perm: Vec<usize> = axes.iter().map(|&a| norm_axis(a, ndim)).collect::<Result<_, _>>()?;
            let mut seen = vec![false; ndim];
            for &p in &perm {
                if std::mem::replace(&mut seen[p], true) {
                    return Err(format!("axes {axes:?} is not a permutation").into());
                }
            }
            Ok(perm)
        }
    }
}

fn rel_transpose(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let perm = permutation(attrs, t.rank())?;
    Ok(Type::tensor(perm.iter().map(|&p| t.shape[p]).collect::<Vec<_>>(), t.dtype))
}

/// `x` with its axes permuted: output axis `k` is input axis `perm[k]`.
/// Elements move as bytes: no f64 copy of the tensor (FoldConstant packs
/// every convolution's weights with a transpose, 9 MB for one of
/// ResNet-18's layers), and f16 values stay bit-exact.
pub(crate) fn permuted(x: &Tensor, perm: &[usize]) -> Tensor {
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let in_strides = strides(x.shape());
    // The source stride of each output axis.
    let step: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let out = match x.dtype().size_bytes() {
        1 => gather_elements::<1>(x.bytes(), &out_shape, &step),
        2 => gather_elements::<2>(x.bytes(), &out_shape, &step),
        4 => gather_elements::<4>(x.bytes(), &out_shape, &step),
        _ => gather_elements::<8>(x.bytes(), &out_shape, &step),
    };
    Tensor::from_bytes(x.dtype(), out_shape, out).expect("as many bytes as the input's")
}

/// The elements of `src` (each `N` bytes) read in the row-major order of
/// `shape`, element `idx` at `Σ idx[k]·step[k]`: the source offset moves
/// by odometer, one add per element of the innermost axis.
fn gather_elements<const N: usize>(src: &[u8], shape: &[usize], step: &[usize]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    if shape.contains(&0) {
        return out;
    }
    let Some((&inner, outer)) = shape.split_last() else {
        out.extend_from_slice(&src[..N.min(src.len())]);
        return out;
    };
    let inner_step = step[outer.len()];
    for_each_row(outer, [&step[..outer.len()]], |[base]| {
        for t in 0..inner {
            let i = (base + t * inner_step) * N;
            let element: [u8; N] = src[i..i + N].try_into().expect("N bytes");
            out.extend_from_slice(&element);
        }
    });
    out
}

fn eval_transpose(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let perm = permutation(attrs, x.shape().len())?;
    Ok(Value::Tensor(permuted(x, &perm)))
}

fn rel_concatenate(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let Some(Type::Tuple(fields)) = args.first() else {
        return Err("concatenate takes one tuple of tensors".into());
    };
    let first = match fields.first() {
        Some(Type::Tensor(t)) => t,
        Some(other) => return Err(format!("concatenate needs tensors, found {other}").into()),
        None => return Err("concatenate of an empty tuple".into()),
    };
    let axis = norm_axis(attrs.int("axis")?, first.rank())?;
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for (k, f) in fields.iter().enumerate() {
        let t = f.as_tensor().ok_or_else(|| format!("field {k} of concatenate is not a tensor"))?;
        if t.dtype != first.dtype {
            return Err(format!("dtype mismatch: field 0 is {}, field {k} is {}", first.dtype, t.dtype).into());
        }
        if t.rank() != first.rank() || t.shape.iter().enumerate().any(|(d, &n)| d != axis && n != first.shape[d]) {
            return Err(format!(
                "cannot concatenate {} and {} on axis {axis}",
                shape_str(&first.shape),
                shape_str(&t.shape)
            )
            .into());
        }
        shape[axis] += t.shape[axis];
    }
    Ok(Type::tensor(shape, first.dtype))
}

fn eval_concatenate(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let out = rel_concatenate(&types_of(args), attrs)?;
    let out_t = out.as_tensor().ok_or("not a tensor")?;
    let parts: Vec<&Tensor> = args[0].tuple()?.iter().map(Value::tensor).collect::<Result<_, _>>()?;
    let axis = norm_axis(attrs.int("axis")?, out_t.rank())?;
    let outer: usize = out_t.shape[..axis].iter().product();
    let mut data = Vec::with_capacity(out_t.numel());
    let vals: Vec<Vec<f64>> = parts.iter().map(|p| p.to_f64_vec()).collect();
    for o in 0..outer {
        for (p, v) in parts.iter().zip(&vals) {
            let chunk: usize = p.shape()[axis..].iter().product();
            data.extend_from_slice(&v[o * chunk..(o + 1) * chunk]);
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(out_t.dtype, out_t.shape.clone(), &data)))
}

/// The `[start, end)` ranges `split` cuts axis `dim` into.
fn split_ranges(attrs: &Attrs, dim: usize) -> Result<Vec<(usize, usize)>, OpError> {
    match attrs.get("indices_or_sections") {
        Some(AttrValue::Int(n)) => {
            let n = *n;
            // At most one section per element (one for an empty axis): the
            // result is a tuple of `n` tensors, so `n` must stay small.
            if n <= 0 || n as u64 > dim.max(1) as u64 || dim % n as usize != 0 {
                return Err(format!("cannot split an axis of size {dim} into {n} equal sections").into());
            }
            let size = dim / n as usize;
            Ok((0..n as usize).map(|k| (k * size, (k + 1) * size)).collect())
        }
        Some(AttrValue::Ints(idx)) => {
            let mut out = Vec::new();
            let mut start = 0usize;
            for &i in idx {
                if i < start as i64 || i > dim as i64 {
                    return Err(format!("split indices {idx:?} must be increasing and within 0..={dim}").into());
                }
                out.push((start, i as usize));
                start = i as usize;
            }
            out.push((start, dim));
            Ok(out)
        }
        _ => Err("indices_or_sections must be an integer or a list of integers".into()),
    }
}

fn rel_split(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let axis = norm_axis(attrs.int("axis")?, t.rank())?;
    let fields = split_ranges(attrs, t.shape[axis])?
        .into_iter()
        .map(|(a, b)| {
            let mut s = t.shape.clone();
            s[axis] = b - a;
            Type::tensor(s, t.dtype)
        })
        .collect();
    Ok(Type::Tuple(fields))
}

fn eval_split(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let axis = norm_axis(attrs.int("axis")?, x.shape().len())?;
    let data = x.to_f64_vec();
    let outer: usize = x.shape()[..axis].iter().product();
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let dim = x.shape()[axis];
    let mut parts = Vec::new();
    for (a, b) in split_ranges(attrs, dim)? {
        let mut v = Vec::with_capacity(outer * (b - a) * inner);
        for o in 0..outer {
            v.extend_from_slice(&data[(o * dim + a) * inner..(o * dim + b) * inner]);
        }
        let mut shape = x.shape().to_vec();
        shape[axis] = b - a;
        parts.push(Value::Tensor(Tensor::from_f64(x.dtype(), shape, &v)));
    }
    Ok(Value::Tuple(parts))
}

fn rel_squeeze(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let shape: Vec<usize> = match attrs.opt_ints("axis")? {
        None => t.shape.iter().copied().filter(|&d| d != 1).collect(),
        Some(axes) => {
            let axes: Vec<usize> = axes.iter().map(|&a| norm_axis(a, t.rank())).collect::<Result<_, _>>()?;
            for &a in &axes {
                if t.shape[a] != 1 {
                    return Err(format!("cannot squeeze axis {a} of size {}", t.shape[a]).into());
                }
            }
            t.shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect()
        }
    };
    Ok(Type::tensor(shape, t.dtype))
}

fn eval_squeeze(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reshaped_value(args, &rel_squeeze(&types_of(args), attrs)?)
}

fn rel_expand_dims(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let n = attrs.int("num_newaxis")?;
    if n < 0 {
        return Err(format!("num_newaxis must not be negative, found {n}").into());
    }
    let axis = attrs.int("axis")?;
    let rank = t.rank() as i64;
    if axis < -rank - 1 || axis > rank {
        return Err(format!("axis {axis} is out of range [{}, {rank}] for a tensor of rank {rank}", -rank - 1).into());
    }
    if n > crate::relay::ty::MAX_RANK as i64 - rank {
        return Err(format!(
            "num_newaxis={n} would make a tensor of rank {}, more than the {} kiln allows",
            rank.saturating_add(n),
            crate::relay::ty::MAX_RANK
        )
        .into());
    }
    let axis = if axis < 0 { axis + rank + 1 } else { axis } as usize;
    let mut shape = t.shape.clone();
    shape.splice(axis..axis, std::iter::repeat_n(1, n as usize));
    Ok(Type::tensor(shape, t.dtype))
}

fn eval_expand_dims(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    reshaped_value(args, &rel_expand_dims(&types_of(args), attrs)?)
}

/// Per axis of the input: (start, step, length) of a strided slice, with NumPy's clamping.
pub(crate) fn slice_plan(shape: &[usize], attrs: &Attrs) -> Result<Vec<(i64, i64, usize)>, OpError> {
    let begin = attrs.ints("begin")?;
    let end = attrs.ints("end")?;
    let strides_attr = attrs.opt_ints("strides")?;
    let ndim = shape.len();
    let axes: Vec<usize> = match attrs.opt_ints("axes")? {
        Some(a) => a.iter().map(|&v| norm_axis(v, ndim)).collect::<Result<_, _>>()?,
        None => (0..begin.len()).collect(),
    };
    if begin.len() != axes.len() || end.len() != axes.len() {
        return Err(format!(
            "begin ({}), end ({}) and axes ({}) must have the same length",
            begin.len(),
            end.len(),
            axes.len()
        )
        .into());
    }
    if axes.iter().any(|&a| a >= ndim) {
        return Err(format!("begin has {} entries for a tensor of rank {ndim}", begin.len()).into());
    }
    let mut plan: Vec<(i64, i64, usize)> = shape.iter().map(|&d| (0, 1, d)).collect();
    for (k, &ax) in axes.iter().enumerate() {
        let d = shape[ax] as i64;
        let step = match strides_attr {
            None => 1,
            Some(s) if s.len() == 1 => s[0],
            Some(s) => *s.get(k).ok_or_else(|| format!("strides has {} entries for {} axes", s.len(), axes.len()))?,
        };
        if step == 0 {
            return Err("a slice stride of 0".into());
        }
        let norm = |v: i64| if v < 0 { v + d } else { v };
        let (b, e, len) = if step > 0 {
            let b = norm(begin[k]).clamp(0, d);
            let e = norm(end[k]).clamp(0, d);
            // ceil((e − b) / step) without overflow for steps near i64::MAX.
            (b, e, if e > b { (e - b - 1) / step + 1 } else { 0 })
        } else {
            let b = norm(begin[k]).clamp(-1, d - 1);
            let e = norm(end[k]).clamp(-1, d - 1);
            // The same for a negative step (i64::MIN has no negation: divide as i128).
            (b, e, if b > e { ((b - e - 1) as i128 / -(step as i128) + 1) as i64 } else { 0 })
        };
        let _ = e;
        plan[ax] = (b, step, len as usize);
    }
    Ok(plan)
}

fn rel_strided_slice(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let t = tensor_arg(args, 0, "data")?;
    let plan = slice_plan(&t.shape, attrs)?;
    Ok(Type::tensor(plan.iter().map(|p| p.2).collect::<Vec<_>>(), t.dtype))
}

fn eval_strided_slice(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let plan = slice_plan(x.shape(), attrs)?;
    let out_shape: Vec<usize> = plan.iter().map(|p| p.2).collect();
    let st = strides(x.shape());
    let data = x.to_f64_vec();
    let mut out = vec![0.0; numel(&out_shape)];
    for_each_index(&out_shape, |idx, o| {
        let src: Vec<usize> = idx.iter().zip(&plan).map(|(&i, &(b, s, _))| (b + i as i64 * s) as usize).collect();
        out[o] = data[flat(&src, &st)];
    });
    Ok(Value::Tensor(Tensor::from_f64(x.dtype(), out_shape, &out)))
}

fn creation_shape(attrs: &Attrs) -> Result<Vec<usize>, OpError> {
    attrs
        .ints("shape")?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| OpError::from(format!("shape has a negative dimension {d}"))))
        .collect()
}

fn rel_create(_: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    Ok(Type::tensor(creation_shape(attrs)?, attrs.dtype("dtype")?))
}

fn rel_full(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let fill = tensor_arg(args, 0, "fill_value")?;
    if fill.rank() != 0 {
        return Err(format!("fill_value must be a scalar, found shape {}", shape_str(&fill.shape)).into());
    }
    rel_create(args, attrs)
}

fn eval_zeros(_: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    Ok(Value::Tensor(Tensor::full(attrs.dtype("dtype")?, creation_shape(attrs)?, 0.0)))
}

fn eval_ones(_: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    Ok(Value::Tensor(Tensor::full(attrs.dtype("dtype")?, creation_shape(attrs)?, 1.0)))
}

fn eval_full(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let fill = tensor_val(args, 0)?;
    if fill.numel() != 1 {
        return Err("fill_value must be a scalar".into());
    }
    Ok(Value::Tensor(Tensor::full(attrs.dtype("dtype")?, creation_shape(attrs)?, fill.get_f64(0))))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::*;
    defs.push(
        OpDef::new(
            "contrib_reverse_reshape",
            &["data"],
            Injective,
            rel_reverse_reshape,
            eval_reverse_reshape,
            "Reshape with `newshape` read from the right (`0` copies the input dim at the same place from the end).",
        )
        .attr(AttrSpec::required("newshape", AttrKind::Ints))
        .reshape_like(),
    );
    defs.push(OpDef::new(
        "annotation.stop_fusion",
        &["data"],
        Opaque,
        rel_identity,
        eval_identity,
        "The identity; FuseOps starts a new kernel after it and drops it.",
    ));
    defs.push(
        OpDef::new(
            "shape_of",
            &["data"],
            Injective,
            rel_shape_of,
            eval_shape_of,
            "The shape of a tensor, as a 1-D tensor.",
        )
        .attr(AttrSpec::dtype("dtype", DataType::I32)),
    );
    defs.push(
        OpDef::new(
            "ndarray_size",
            &["data"],
            Injective,
            rel_ndarray_size,
            eval_ndarray_size,
            "The number of elements of a tensor, as a scalar.",
        )
        .attr(AttrSpec::dtype("dtype", DataType::I32)),
    );
    defs.push(
        OpDef::new(
            "reshape",
            &["data"],
            Injective,
            rel_reshape,
            eval_reshape,
            "Reshape; `0` copies an input dim, `-1` is inferred.",
        )
        .attr(AttrSpec::required("newshape", AttrKind::Ints))
        .reshape_like(),
    );
    defs.push(
        OpDef::new(
            "transpose",
            &["data"],
            Injective,
            rel_transpose,
            eval_transpose,
            "Permute axes (reverse them when `axes` is None).",
        )
        .attr(AttrSpec::opt_ints("axes")),
    );
    defs.push(
        OpDef::new(
            "concatenate",
            &["data"],
            Injective,
            rel_concatenate,
            eval_concatenate,
            "Join the tensors of a tuple along `axis`.",
        )
        .attr(AttrSpec::int("axis", 0)),
    );
    defs.push(
        OpDef::new(
            "split",
            &["data"],
            Injective,
            rel_split,
            eval_split,
            "Split into equal sections (an integer) or at indices (a list).",
        )
        .attr(AttrSpec::required("indices_or_sections", AttrKind::IntOrInts))
        .attr(AttrSpec::int("axis", 0)),
    );
    defs.push(
        OpDef::new(
            "squeeze",
            &["data"],
            Injective,
            rel_squeeze,
            eval_squeeze,
            "Remove size-1 axes (all of them when `axis` is None).",
        )
        .attr(AttrSpec::opt_ints("axis"))
        .reshape_like(),
    );
    defs.push(
        OpDef::new(
            "expand_dims",
            &["data"],
            Broadcast,
            rel_expand_dims,
            eval_expand_dims,
            "Insert `num_newaxis` size-1 axes at `axis`.",
        )
        .attr(AttrSpec::required("axis", AttrKind::Int))
        .attr(AttrSpec::int("num_newaxis", 1))
        .reshape_like(),
    );
    defs.push(
        OpDef::new(
            "strided_slice",
            &["data"],
            Injective,
            rel_strided_slice,
            eval_strided_slice,
            "Slice `begin:end:strides` on `axes` (the leading axes when None).",
        )
        .attr(AttrSpec::required("begin", AttrKind::Ints))
        .attr(AttrSpec::required("end", AttrKind::Ints))
        .attr(AttrSpec::opt_ints("strides"))
        .attr(AttrSpec::opt_ints("axes")),
    );
    defs.push(
        OpDef::new(
            "nn.batch_flatten",
            &["data"],
            Injective,
            rel_batch_flatten,
            eval_batch_flatten,
            "Flatten all but the first axis.",
        )
        .reshape_like(),
    );
    let creators: [(&'static str, super::EvalFn, &'static str); 2] =
        [("zeros", eval_zeros, "A tensor of zeros."), ("ones", eval_ones, "A tensor of ones.")];
    for (name, eval, doc) in creators {
        defs.push(
            OpDef::new(name, &[], ElemWise, rel_create, eval, doc)
                .attr(AttrSpec::required("shape", AttrKind::Ints))
                .attr(AttrSpec::dtype("dtype", DataType::F32)),
        );
    }
    defs.push(
        OpDef::new(
            "full",
            &["fill_value"],
            ElemWise,
            rel_full,
            eval_full,
            "A tensor filled with the scalar `fill_value`.",
        )
        .attr(AttrSpec::required("shape", AttrKind::Ints))
        .attr(AttrSpec::dtype("dtype", DataType::F32)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The odometer walk of [`permuted`] equals the definition (output
    /// element `idx` is input element `idx` permuted back), for every
    /// permutation of a rank-4 shape with a unit axis, and each element size.
    #[test]
    fn permuted_matches_the_definition() {
        let shape = [2, 3, 1, 4];
        let perms = (0..4usize.pow(4)).map(|mut code| {
            (0..4)
                .map(|_| {
                    let d = code % 4;
                    code /= 4;
                    d
                })
                .collect::<Vec<usize>>()
        });
        let perms: Vec<Vec<usize>> = perms.filter(|p| (0..4).all(|d| p.contains(&d))).collect::<Vec<_>>();
        assert_eq!(perms.len(), 24);
        for dtype in [DataType::U8, DataType::F16, DataType::F32, DataType::F64] {
            let values: Vec<f64> = (0..numel(&shape)).map(|v| v as f64).collect();
            let x = Tensor::from_f64(dtype, shape.to_vec(), &values);
            for perm in &perms {
                let y = permuted(&x, perm);
                let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                assert_eq!(y.shape(), &out_shape[..]);
                let in_strides = strides(&shape);
                let mut want = Vec::new();
                for_each_index(&out_shape, |idx, _| {
                    want.push(values[idx.iter().zip(perm).map(|(&v, &p)| v * in_strides[p]).sum::<usize>()]);
                });
                assert_eq!(y.to_f64_vec(), want, "{dtype} {perm:?}");
            }
        }
        // A scalar and an empty tensor.
        assert_eq!(permuted(&Tensor::scalar(DataType::F32, 2.5), &[]).to_f64_vec(), vec![2.5]);
        assert_eq!(permuted(&Tensor::zeros(DataType::F32, vec![2, 0]), &[1, 0]).shape(), &[0, 2]);
    }
}
