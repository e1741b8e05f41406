//! The products: `nn.dense`, `nn.contrib_dense_pack` (a dense weight packed
//! in column panels), `nn.matmul`, `nn.batch_matmul`,
//! `nn.contrib_batch_matmul_pack` (its A packed in row panels); and the
//! attributes they share with the convolution (`out_dtype`, blocked weight
//! layouts).

use super::util::{same_dtype, shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrSpec, Attrs};
use crate::relay::ty::{TensorType, Type};
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

fn out(t: Tensor) -> Result<Value, OpError> {
    Ok(Value::Tensor(t))
}

// ---- dense, matmul, batch_matmul ------------------------------------------------

/// The data's last axis and a dense weight's axis 1 (`[units, in]`, or
/// `[units/b, in, b]` packed) are the same reduction.
fn same_reduction(x: &TensorType, w: &TensorType) -> Result<(), OpError> {
    let k = x.shape[x.rank() - 1];
    if w.shape[1] != k {
        return Err(format!(
            "data {} and weight {} disagree on the reduction size ({k} vs {})",
            shape_str(&x.shape),
            shape_str(&w.shape),
            w.shape[1]
        )
        .into());
    }
    Ok(())
}

/// TVM's `out_dtype` of the products and the convolution: empty (the
/// operands' dtype) or that same dtype. kiln computes in the operands' dtype
/// and refuses another one rather than ignoring it.
pub(super) fn check_out_dtype(attrs: &Attrs, dtype: crate::dtype::DataType) -> Result<(), OpError> {
    match attrs.str("out_dtype")? {
        "" => Ok(()),
        name => match crate::dtype::DataType::from_name(name) {
            Some(d) if d == dtype => Ok(()),
            Some(d) => Err(format!(
                "out_dtype={d} differs from the operands' {dtype}: kiln computes in the operands' dtype (cast the result instead)"
            ).into()),
            None => Err(format!("unknown out_dtype \"{name}\"").into()),
        },
    }
}

/// An untyped `nn.dense` weight `[units, K]` from the data's last axis and `units` (TVM's DenseRel).
fn dense_infer_inputs(args: &[Option<Type>], attrs: &Attrs) -> Vec<Option<Type>> {
    let weight = || -> Option<Type> {
        let x = args.first()?.as_ref()?.as_tensor()?;
        let units = usize::try_from(attrs.opt_int("units").ok()??).ok()?;
        Some(Type::tensor([units, *x.shape.last()?], x.dtype))
    };
    vec![None, if args.get(1).is_some_and(Option::is_none) { weight() } else { None }]
}

fn rel_dense(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, w) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "weight")?);
    let dtype = same_dtype(x.dtype, w.dtype)?;
    check_out_dtype(attrs, dtype)?;
    if x.rank() < 1 || w.rank() != 2 {
        return Err(format!(
            "dense needs data of rank >= 1 and a 2-D weight, found {} and {}",
            shape_str(&x.shape),
            shape_str(&w.shape)
        )
        .into());
    }
    same_reduction(x, w)?;
    if let Some(units) = attrs.opt_int("units")? {
        if units as usize != w.shape[0] {
            return Err(format!("units={units} but the weight has {} rows", w.shape[0]).into());
        }
    }
    let mut shape = x.shape.clone();
    *shape.last_mut().ok_or("empty shape")? = w.shape[0];
    Ok(Type::tensor(shape, dtype))
}

fn eval_dense(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, w) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let ty =
        rel_dense(&[Type::tensor(x.shape().to_vec(), x.dtype()), Type::tensor(w.shape().to_vec(), w.dtype())], attrs)?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let (k, units) = (w.shape()[1], w.shape()[0]);
    let rows = x.numel() / k.max(1);
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let mut o = vec![0.0; rows * units];
    for r in 0..rows {
        for u in 0..units {
            o[r * units + u] = (0..k).map(|i| xv[r * k + i] * wv[u * k + i]).sum();
        }
    }
    out(Tensor::from_f64(t.dtype, t.shape.clone(), &o))
}

/// The block of a blocked layout attribute: `base` → None, `base<k>axis`
/// (e.g. `OIHW16o`, `NC8n`) → `k`; anything else is an error.
pub(super) fn layout_block(attrs: &Attrs, key: &str, base: &str, axis: char) -> Result<Option<usize>, OpError> {
    let layout = attrs.str(key)?;
    if layout == base {
        return Ok(None);
    }
    layout
        .strip_prefix(base)
        .and_then(|r| r.strip_suffix(axis))
        .and_then(|k| k.parse::<usize>().ok())
        .filter(|&k| k >= 1)
        .map(Some)
        .ok_or_else(|| OpError::from(format!("unsupported {key} `{layout}`; expected {base} or {base}<k>{axis}")))
}

/// The panel width `b` named by a `nn.contrib_dense_pack` weight layout
/// `NC<b>n`; None for TVM's default `NC` (the width is the weight's last axis).
pub fn dense_pack_block(attrs: &Attrs) -> Result<Option<usize>, OpError> {
    layout_block(attrs, "weight_layout", "NC", 'n')
}

/// The `units` of a product over an operand packed in panels of `panel`
/// (`total` rows or columns in all): by default all of them; fewer may leave
/// the last panel partly unused (zero padding, so that every panel is whole
/// vectors), never a whole panel. `holds`/`what` word the error.
fn panel_units(attrs: &Attrs, total: usize, panel: usize, holds: &str, what: &str) -> Result<usize, OpError> {
    match attrs.opt_int("units")? {
        None => Ok(total),
        Some(u) if u >= 1 && (u as usize) <= total && total - (u as usize) < panel => Ok(u as usize),
        Some(u) => Err(format!("units={u} but {holds} {total} {what} (panels of {panel})").into()),
    }
}

/// `nn.contrib_dense_pack`: `data · weightᵀ` over a weight packed in panels,
/// `[units / b, in, b]` (TVM's `NC<b>n`): the `b` columns of each panel are
/// contiguous for every reduction step.
fn rel_dense_pack(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, w) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "weight")?);
    let dtype = same_dtype(x.dtype, w.dtype)?;
    check_out_dtype(attrs, dtype)?;
    let named = dense_pack_block(attrs)?;
    if x.rank() < 1 || w.rank() != 3 || named.is_some_and(|b| w.shape[2] != b) {
        let b = named.map_or("b".to_string(), |b| b.to_string());
        return Err(format!(
            "dense_pack needs data of rank >= 1 and a weight [units/{b}, in, {b}], found {} and {}",
            shape_str(&x.shape),
            shape_str(&w.shape)
        )
        .into());
    }
    same_reduction(x, w)?;
    let units = panel_units(attrs, w.shape[0] * w.shape[2], w.shape[2], "the weight holds", "columns")?;
    let mut shape = x.shape.clone();
    *shape.last_mut().ok_or("empty shape")? = units;
    Ok(Type::tensor(shape, dtype))
}

fn eval_dense_pack(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, w) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let ty = rel_dense_pack(
        &[Type::tensor(x.shape().to_vec(), x.dtype()), Type::tensor(w.shape().to_vec(), w.dtype())],
        attrs,
    )?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let (k, b) = (w.shape()[1], w.shape()[2]);
    let units = *t.shape.last().ok_or("empty shape")?;
    let rows = x.numel() / k.max(1);
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let mut o = vec![0.0; rows * units];
    for r in 0..rows {
        for u in 0..units {
            let panel = (u / b) * k * b + u % b;
            o[r * units + u] = (0..k).map(|i| xv[r * k + i] * wv[panel + i * b]).sum();
        }
    }
    out(Tensor::from_f64(t.dtype, t.shape.clone(), &o))
}

/// (rows, reduction, columns) of a matmul and whether the operands are transposed.
fn matmul_dims(a: &TensorType, b: &TensorType, ta: bool, tb: bool) -> Result<(Vec<usize>, usize, usize), OpError> {
    if b.rank() != 2 || a.rank() < 2 || (ta && a.rank() != 2) {
        return Err(
            format!("matmul needs 2-D operands, found {} and {}", shape_str(&a.shape), shape_str(&b.shape)).into()
        );
    }
    let n = a.rank();
    let (lead, k) = if ta { (vec![a.shape[1]], a.shape[0]) } else { (a.shape[..n - 1].to_vec(), a.shape[n - 1]) };
    let (kb, cols) = if tb { (b.shape[1], b.shape[0]) } else { (b.shape[0], b.shape[1]) };
    if k != kb {
        return Err(format!(
            "matmul of {} and {} (transpose_a={ta}, transpose_b={tb}): reduction sizes {k} and {kb} differ",
            shape_str(&a.shape),
            shape_str(&b.shape)
        )
        .into());
    }
    Ok((lead, k, cols))
}

fn rel_matmul(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (a, b) = (tensor_arg(args, 0, "tensor_a")?, tensor_arg(args, 1, "tensor_b")?);
    let dtype = same_dtype(a.dtype, b.dtype)?;
    check_out_dtype(attrs, dtype)?;
    let (mut shape, _, cols) = matmul_dims(a, b, attrs.bool("transpose_a")?, attrs.bool("transpose_b")?)?;
    if let Some(units) = attrs.opt_int("units")? {
        if units as usize != cols {
            return Err(format!("units={units} but the product has {cols} columns").into());
        }
    }
    shape.push(cols);
    Ok(Type::tensor(shape, dtype))
}

fn eval_matmul(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (a, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let (ta, tb) = (attrs.bool("transpose_a")?, attrs.bool("transpose_b")?);
    let ty_a = TensorType::new(a.shape().to_vec(), a.dtype());
    let ty_b = TensorType::new(b.shape().to_vec(), b.dtype());
    let (lead, k, cols) = matmul_dims(&ty_a, &ty_b, ta, tb)?;
    same_dtype(a.dtype(), b.dtype())?;
    let rows: usize = lead.iter().product();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let at = |r: usize, i: usize| if ta { av[i * rows + r] } else { av[r * k + i] };
    let bt = |i: usize, c: usize| if tb { bv[c * k + i] } else { bv[i * cols + c] };
    let mut o = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            o[r * cols + c] = (0..k).map(|i| at(r, i) * bt(i, c)).sum();
        }
    }
    let mut shape = lead;
    shape.push(cols);
    out(Tensor::from_f64(a.dtype(), shape, &o))
}

fn rel_batch_matmul(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (a, b) = (tensor_arg(args, 0, "tensor_a")?, tensor_arg(args, 1, "tensor_b")?);
    let dtype = same_dtype(a.dtype, b.dtype)?;
    check_out_dtype(attrs, dtype)?;
    if a.rank() != 3 || b.rank() != 3 {
        return Err(format!(
            "batch_matmul needs 3-D operands, found {} and {}",
            shape_str(&a.shape),
            shape_str(&b.shape)
        )
        .into());
    }
    let (ta, tb) = (attrs.bool("transpose_a")?, attrs.bool("transpose_b")?);
    let (m, k) = if ta { (a.shape[2], a.shape[1]) } else { (a.shape[1], a.shape[2]) };
    let (kb, n) = if tb { (b.shape[2], b.shape[1]) } else { (b.shape[1], b.shape[2]) };
    if k != kb {
        return Err(format!(
            "batch_matmul of {} and {}: reduction sizes {k} and {kb} differ",
            shape_str(&a.shape),
            shape_str(&b.shape)
        )
        .into());
    }
    let batch = match (a.shape[0], b.shape[0]) {
        (x, y) if x == y => x,
        (1, y) => y,
        (x, 1) => x,
        (x, y) => return Err(format!("batch sizes {x} and {y} do not broadcast").into()),
    };
    Ok(Type::tensor([batch, m, n], dtype))
}

fn eval_batch_matmul(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (a, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let ty = rel_batch_matmul(
        &[Type::tensor(a.shape().to_vec(), a.dtype()), Type::tensor(b.shape().to_vec(), b.dtype())],
        attrs,
    )?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let (ta, tb) = (attrs.bool("transpose_a")?, attrs.bool("transpose_b")?);
    let (batch, m, n) = (t.shape[0], t.shape[1], t.shape[2]);
    let k = if ta { a.shape()[1] } else { a.shape()[2] };
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let mut o = vec![0.0; batch * m * n];
    for z in 0..batch {
        let (za, zb) = (if sa[0] == 1 { 0 } else { z }, if sb[0] == 1 { 0 } else { z });
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for r in 0..k {
                    let x = if ta { av[(za * sa[1] + r) * sa[2] + i] } else { av[(za * sa[1] + i) * sa[2] + r] };
                    let y = if tb { bv[(zb * sb[1] + j) * sb[2] + r] } else { bv[(zb * sb[1] + r) * sb[2] + j] };
                    acc += x * y;
                }
                o[(z * m + i) * n + j] = acc;
            }
        }
    }
    out(Tensor::from_f64(t.dtype, t.shape.clone(), &o))
}

/// `nn.contrib_batch_matmul_pack`: `A · B` per batch over an `A` packed in
/// row panels, `[batch, ⌈units / r⌉, in, r]`: row `i` is lane `i % r` of
/// panel `i / r`, and the `r` rows of a panel are contiguous for every
/// reduction step — one sequential stream for a product that walks `r` rows
/// at a time (Winograd's transformed weights). `units` (the rows, default all
/// of them) may leave the last panel partly unused (zero padding).
fn rel_batch_matmul_pack(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (a, b) = (tensor_arg(args, 0, "tensor_a")?, tensor_arg(args, 1, "tensor_b")?);
    let dtype = same_dtype(a.dtype, b.dtype)?;
    check_out_dtype(attrs, dtype)?;
    if a.rank() != 4 || b.rank() != 3 || a.shape[3] == 0 || a.shape[2] != b.shape[1] {
        return Err(format!(
            "batch_matmul_pack needs A [batch, units/r, in, r] and B [batch, in, n], found {} and {}",
            shape_str(&a.shape),
            shape_str(&b.shape)
        )
        .into());
    }
    if a.shape[0] != b.shape[0] {
        return Err(format!("batch sizes {} and {} differ", a.shape[0], b.shape[0]).into());
    }
    let units = panel_units(attrs, a.shape[1] * a.shape[3], a.shape[3], "A holds", "rows")?;
    Ok(Type::tensor([a.shape[0], units, b.shape[2]], dtype))
}

fn eval_batch_matmul_pack(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (a, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let ty = rel_batch_matmul_pack(
        &[Type::tensor(a.shape().to_vec(), a.dtype()), Type::tensor(b.shape().to_vec(), b.dtype())],
        attrs,
    )?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let (batch, m, n) = (t.shape[0], t.shape[1], t.shape[2]);
    let (panels, k, r) = (a.shape()[1], a.shape()[2], a.shape()[3]);
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let mut o = vec![0.0; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            let row = ((z * panels + i / r) * k) * r + i % r;
            for j in 0..n {
                o[(z * m + i) * n + j] = (0..k).map(|x| av[row + x * r] * bv[(z * k + x) * n + j]).sum();
            }
        }
    }
    out(Tensor::from_f64(t.dtype, t.shape.clone(), &o))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::*;
    defs.push(
        OpDef::new(
            "nn.dense",
            &["data", "weight"],
            OutEWiseFusable,
            rel_dense,
            eval_dense,
            "`data · weightᵀ`; weight is [units, in].",
        )
        .attr(AttrSpec::opt_int("units"))
        .attr(AttrSpec::str("out_dtype", ""))
        .infer_inputs(dense_infer_inputs),
    );
    defs.push(
        OpDef::new(
            "nn.contrib_dense_pack",
            &["data", "weight"],
            OutEWiseFusable,
            rel_dense_pack,
            eval_dense_pack,
            "`data · weightᵀ` over a weight packed in column panels: [units/b, in, b] (`NC<b>n`).",
        )
        .attr(AttrSpec::opt_int("units"))
        .attr(AttrSpec::str("weight_layout", "NC"))
        .attr(AttrSpec::str("out_dtype", "")),
    );
    defs.push(
        OpDef::new(
            "nn.matmul",
            &["tensor_a", "tensor_b"],
            OutEWiseFusable,
            rel_matmul,
            eval_matmul,
            "Matrix product; tensor_b is [in, units] unless transposed.",
        )
        .attr(AttrSpec::opt_int("units"))
        .attr(AttrSpec::bool("transpose_a", false))
        .attr(AttrSpec::bool("transpose_b", false))
        .attr(AttrSpec::str("out_dtype", "")),
    );
    defs.push(
        OpDef::new(
            "nn.batch_matmul",
            &["tensor_a", "tensor_b"],
            OutEWiseFusable,
            rel_batch_matmul,
            eval_batch_matmul,
            "Batched matrix product of 3-D tensors (TVM's attribute defaults: neither operand transposed).",
        )
        .attr(AttrSpec::bool("transpose_a", false))
        .attr(AttrSpec::bool("transpose_b", false))
        .attr(AttrSpec::str("out_dtype", "")),
    );
    defs.push(
        OpDef::new(
            "nn.contrib_batch_matmul_pack",
            &["tensor_a", "tensor_b"],
            OutEWiseFusable,
            rel_batch_matmul_pack,
            eval_batch_matmul_pack,
            "`A · B` per batch over an A packed in row panels: [batch, units/r, in, r].",
        )
        .attr(AttrSpec::opt_int("units"))
        .attr(AttrSpec::str("out_dtype", "")),
    );
}
