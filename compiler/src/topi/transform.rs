//! Computes of the data-movement operators.

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::Type;
use kiln_ir::OpError;

use super::{out_tensor, select, TeValue};
use crate::te::{compute, Tensor};
use crate::tir::{BinOp, CmpOp, Expr};

fn strides(shape: &[usize]) -> Vec<i64> {
    kiln_ir::tensor::strides(shape).into_iter().map(|s| s as i64).collect()
}

/// `x` read in row-major order under another shape (reshape and friends).
fn reshaped(x: &Tensor, shape: &[usize], name: &str) -> Tensor {
    let (out_strides, in_shape) = (strides(shape), x.shape().to_vec());
    let in_strides = strides(&in_shape);
    let xc = x.clone();
    compute(name, shape, |i| {
        let mut flat = Expr::int(0);
        for (k, s) in out_strides.iter().enumerate() {
            flat = flat + i[k].clone() * Expr::int(*s);
        }
        let idx: Vec<Expr> = in_shape
            .iter()
            .zip(&in_strides)
            .map(|(&d, &s)| {
                let q = Expr::bin(BinOp::FloorDiv, flat.clone(), Expr::int(s));
                Expr::bin(BinOp::FloorMod, q, Expr::int(d as i64))
            })
            .collect();
        xc.at(&idx)
    })
}

fn clamp(e: Expr, lo: i64, hi: i64) -> Expr {
    Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, e, Expr::int(lo)), Expr::int(hi))
}

fn norm_axis(axis: i64, ndim: usize) -> Result<usize, OpError> {
    let a = if axis < 0 { axis + ndim as i64 } else { axis };
    usize::try_from(a)
        .ok()
        .filter(|&a| a < ndim)
        .ok_or_else(|| OpError::from(format!("axis {axis} out of range for rank {ndim}")))
}

pub(super) fn compute_transform(op: &str, inputs: &[TeValue], attrs: &Attrs, out: &Type) -> Result<TeValue, OpError> {
    let input = inputs.first().ok_or_else(|| format!("`{op}` has no input"))?;
    let one = |t: Tensor| Ok(TeValue::Tensor(t));
    match op {
        "reshape" | "nn.batch_flatten" | "squeeze" | "expand_dims" => {
            let (shape, _) = out_tensor(out)?;
            one(reshaped(input.tensor()?, &shape, op))
        }
        "transpose" => {
            let (shape, _) = out_tensor(out)?;
            let x = input.tensor()?.clone();
            let nd = x.ndim();
            let perm: Vec<usize> = match attrs.opt_ints("axes")? {
                None => (0..nd).rev().collect(),
                Some(a) => a.iter().map(|&v| norm_axis(v, nd)).collect::<Result<_, _>>()?,
            };
            one(compute("transpose", &shape, |i| {
                let mut idx = vec![Expr::int(0); nd];
                for (k, &p) in perm.iter().enumerate() {
                    idx[p] = i[k].clone();
                }
                x.at(&idx)
            }))
        }
        "concatenate" => {
            let (shape, _) = out_tensor(out)?;
            let parts: Vec<Tensor> = input.tuple()?.iter().map(|v| v.tensor().cloned()).collect::<Result<_, _>>()?;
            let axis = norm_axis(attrs.int("axis")?, shape.len())?;
            one(compute("concatenate", &shape, |i| {
                // Select from the last part backwards; reads are clamped so no branch reads out of bounds.
                let mut offsets = Vec::new();
                let mut o = 0i64;
                for p in &parts {
                    offsets.push(o);
                    o += p.shape()[axis] as i64;
                }
                let read = |k: usize| {
                    let p = &parts[k];
                    let mut idx = i.to_vec();
                    idx[axis] = clamp(i[axis].clone() - Expr::int(offsets[k]), 0, p.shape()[axis] as i64 - 1);
                    p.at(&idx)
                };
                let last = parts.len() - 1;
                let mut e = read(last);
                for k in (0..last).rev() {
                    let limit = offsets[k] + parts[k].shape()[axis] as i64;
                    e = select(Expr::cmp(CmpOp::Lt, i[axis].clone(), Expr::int(limit)), read(k), e);
                }
                e
            }))
        }
        "split" => {
            let fields = out.as_tuple().ok_or("split returns a tuple")?;
            let x = input.tensor()?.clone();
            let axis = norm_axis(attrs.int("axis")?, x.ndim())?;
            let mut start = 0i64;
            let mut outs = Vec::new();
            for (k, f) in fields.iter().enumerate() {
                let (shape, _) = out_tensor(f)?;
                let s = start;
                let xc = x.clone();
                outs.push(TeValue::Tensor(compute(&format!("split{k}"), &shape, |i| {
                    let mut idx = i.to_vec();
                    idx[axis] = i[axis].clone() + Expr::int(s);
                    xc.at(&idx)
                })));
                start += shape[axis] as i64;
            }
            Ok(TeValue::Tuple(outs))
        }
        "strided_slice" => {
            let (shape, _) = out_tensor(out)?;
            let x = input.tensor()?.clone();
            let nd = x.ndim();
            let begin = attrs.ints("begin")?.to_vec();
            let strides_attr = attrs.opt_ints("strides")?.map(<[i64]>::to_vec);
            let axes: Vec<usize> = match attrs.opt_ints("axes")? {
                Some(a) => a.iter().map(|&v| norm_axis(v, nd)).collect::<Result<_, _>>()?,
                None => (0..begin.len().min(nd)).collect(),
            };
            let mut starts = vec![0i64; nd];
            let mut steps = vec![1i64; nd];
            for (k, &ax) in axes.iter().enumerate() {
                let dim = x.shape()[ax] as i64;
                let step = match &strides_attr {
                    Some(s) if s.len() == 1 => s[0],
                    Some(s) => s.get(k).copied().unwrap_or(1),
                    None => 1,
                };
                if step == 0 {
                    return Err("strided_slice: a stride of 0".into());
                }
                let b = begin.get(k).copied().unwrap_or(if step > 0 { 0 } else { dim - 1 });
                let b = if b < 0 { b + dim } else { b };
                starts[ax] = if step > 0 { b.clamp(0, dim) } else { b.clamp(-1, dim - 1) };
                steps[ax] = step;
            }
            one(compute("strided_slice", &shape, |i| {
                let idx: Vec<Expr> =
                    (0..nd).map(|d| Expr::int(starts[d]) + i[d].clone() * Expr::int(steps[d])).collect();
                x.at(&idx)
            }))
        }
        _ => Err(format!("no compute for operator `{op}`").into()),
    }
}
