//! Computes of the data-movement operators.

use std::sync::Arc;

use kiln_ir::relay::op::{IndexOps, LayoutTransform};
use kiln_ir::relay::OpMap;
use kiln_ir::OpError;

use super::{one, out_tensor, select, zero, ComputeCall, ComputeFn, TeValue};
use crate::te::{compute, Tensor};
use crate::tir::{BinOp, CmpOp, Expr, Intrinsic, TirType};

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

/// Attach this module's computes to their operators.
pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    m.set_all(
        &["reshape", "nn.batch_flatten", "squeeze", "expand_dims", "contrib_reverse_reshape", "annotation.stop_fusion"],
        Arc::new(reshape),
    );
    m.set("layout_transform", Arc::new(layout_transform));
    m.set_all(&["shape_of", "ndarray_size"], Arc::new(shape_constant));
    m.set("transpose", Arc::new(transpose));
    m.set("concatenate", Arc::new(concatenate));
    m.set("split", Arc::new(split));
    m.set("strided_slice", Arc::new(strided_slice));
    m.set("take", Arc::new(take));
    m.set("check_index", Arc::new(check_index));
}

fn reshape(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    one(reshaped(&c.tensor(0)?, &shape, c.op))
}

/// Index arithmetic on TE expressions, for [`LayoutTransform::source_index`].
struct ExprIndex;

impl IndexOps<Expr> for ExprIndex {
    fn add(&self, a: Expr, b: Expr) -> Expr {
        a + b
    }
    fn mul(&self, a: Expr, k: i64) -> Expr {
        a * Expr::int(k)
    }
    fn div(&self, a: Expr, k: i64) -> Expr {
        Expr::bin(BinOp::FloorDiv, a, Expr::int(k))
    }
    fn rem(&self, a: Expr, k: i64) -> Expr {
        Expr::bin(BinOp::FloorMod, a, Expr::int(k))
    }
}

fn layout_transform(c: &ComputeCall) -> Result<TeValue, OpError> {
    let x = c.tensor(0)?;
    let t = LayoutTransform::new(x.shape(), c.attrs.str("src_layout")?, c.attrs.str("dst_layout")?)?;
    one(compute("layout_transform", &t.out_shape, |i| x.at(&t.source_index(i, &ExprIndex))))
}

/// `shape_of` / `ndarray_size`: constants of the input's static shape
/// (FoldConstant usually replaces the call before it gets here).
fn shape_constant(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let values: Vec<i64> = if c.op == "shape_of" {
        x.shape().iter().map(|&d| d as i64).collect()
    } else {
        vec![x.shape().iter().product::<usize>() as i64]
    };
    one(compute(c.op, &shape, |i| {
        let constant = |v: i64| Expr::constant(v as f64, dt);
        match i.first() {
            None => constant(values[0]),
            Some(k) => {
                values.iter().enumerate().rev().skip(1).fold(constant(values[values.len() - 1]), |e, (j, &v)| {
                    select(Expr::cmp(CmpOp::Eq, k.clone(), Expr::int(j as i64)), constant(v), e)
                })
            }
        }
    }))
}

fn transpose(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let nd = x.ndim();
    let perm: Vec<usize> = match c.attrs.opt_ints("axes")? {
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

fn concatenate(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let parts: Vec<Tensor> = c.input(0)?.tuple()?.iter().map(|v| v.tensor().cloned()).collect::<Result<_, _>>()?;
    let axis = norm_axis(c.attrs.int("axis")?, shape.len())?;
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

fn split(c: &ComputeCall) -> Result<TeValue, OpError> {
    let fields = c.out.as_tuple().ok_or("split returns a tuple")?;
    let x = c.tensor(0)?;
    let axis = norm_axis(c.attrs.int("axis")?, x.ndim())?;
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

fn strided_slice(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let nd = x.ndim();
    let begin = c.attrs.ints("begin")?.to_vec();
    let strides_attr = c.attrs.opt_ints("strides")?.map(<[i64]>::to_vec);
    let axes: Vec<usize> = match c.attrs.opt_ints("axes")? {
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
        let idx: Vec<Expr> = (0..nd).map(|d| Expr::int(starts[d]) + i[d].clone() * Expr::int(steps[d])).collect();
        x.at(&idx)
    }))
}

/// `take` with clamped (or, in `wrap` mode, wrapped) indices.
fn take(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (d, ix) = (c.tensor(0)?, c.tensor(1)?);
    let wrap = c.attrs.str("mode")? == "wrap";
    let pick = move |v: Expr, n: usize| {
        let v = Expr::cast(TirType::INDEX, v);
        if wrap {
            Expr::bin(BinOp::FloorMod, v, Expr::int(n.max(1) as i64))
        } else {
            Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, v, Expr::int(0)), Expr::int(n.max(1) as i64 - 1))
        }
    };
    match c.attrs.opt_int("axis")? {
        Some(a) => {
            let a = if a < 0 { a + d.ndim() as i64 } else { a } as usize;
            let ir = ix.ndim();
            one(compute(c.op, &shape, |i| {
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
            one(compute(c.op, &shape, |i| {
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

/// Indices checked against their bounds when the kernel runs (negative ones count from the end).
fn check_index(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let bounds = c.attrs.ints("bounds")?;
    if bounds.is_empty() {
        return Err("check_index without bounds".into());
    }
    one(compute(c.op, &shape, |i| {
        // Negative indices count from the end; the rest is checked when the kernel runs.
        let v = x.at(i);
        let last = i.last().cloned().unwrap_or_else(|| Expr::int(0));
        // One bound, or the one of this position on the last axis.
        let bound = bounds.iter().enumerate().skip(1).fold(Expr::constant(bounds[0] as f64, dt), |b, (k, &n)| {
            select(Expr::cmp(CmpOp::Eq, last.clone(), Expr::int(k as i64)), Expr::constant(n as f64, dt), b)
        });
        let from_end = Expr::cmp(CmpOp::Lt, v.clone(), zero(dt));
        let v = select(from_end, v.clone() + bound.clone(), v);
        Expr::call(Intrinsic::CheckIndex, vec![v, bound], TirType::scalar(dt))
    }))
}
