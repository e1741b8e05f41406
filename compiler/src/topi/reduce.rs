//! Computes of the reductions: `sum`, `mean`, `max`, `min`, `prod`, `argmax`, `argmin`.

use std::sync::Arc;

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::OpMap;
use kiln_ir::{DataType, OpError};

use super::{one, select, ComputeCall, ComputeFn, TeValue};
use crate::te::{compute, reduce, reduce_axis};
use crate::tir::{BinOp, CmpOp, Combiner, Expr, TirType};

/// Attach this module's computes to their operators.
pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    m.set("sum", Arc::new(|c: &ComputeCall| reduction(c, Combiner::Sum, false)));
    m.set("mean", Arc::new(|c: &ComputeCall| reduction(c, Combiner::Sum, true)));
    m.set("max", Arc::new(|c: &ComputeCall| reduction(c, Combiner::Max, false)));
    m.set("min", Arc::new(|c: &ComputeCall| reduction(c, Combiner::Min, false)));
    m.set("prod", Arc::new(|c: &ComputeCall| reduction(c, Combiner::Prod, false)));
    m.set("argmax", Arc::new(|c: &ComputeCall| arg_reduction(c, Combiner::Max)));
    m.set("argmin", Arc::new(|c: &ComputeCall| arg_reduction(c, Combiner::Min)));
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

/// `sum`, `max`, `min`, `prod` over the reduced axes; `mean` is the sum divided by the count.
fn reduction(c: &ComputeCall, combiner: Combiner, mean: bool) -> Result<TeValue, OpError> {
    let (out_shape, _) = c.out_tensor()?;
    let (x, attrs, name) = (&c.tensor(0)?, c.attrs, c.op);
    let ndim = x.ndim();
    let axes = reduce_axes(attrs, ndim)?;
    let keepdims = attrs.bool("keepdims")?;
    let raxes: Vec<_> = axes.iter().map(|&a| reduce_axis(x.shape()[a], &format!("r{a}"))).collect();
    let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
    let xc = x.clone();
    let summed = compute(&format!("{}_red", name), &out_shape, |idx| {
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
    if !mean {
        return one(summed);
    }
    let dt = x.dtype();
    one(compute("mean", &out_shape, |idx| Expr::bin(BinOp::Div, summed.at(idx), Expr::constant(count as f64, dt))))
}

/// `argmax`/`argmin` in two stages: the extreme value along the axis, then
/// the first (or, with `select_last_index`, the last) index that holds it.
fn arg_reduction(c: &ComputeCall, combiner: Combiner) -> Result<TeValue, OpError> {
    let (out_shape, _) = c.out_tensor()?;
    let (x, attrs, name) = (&c.tensor(0)?, c.attrs, c.op);
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
    let s1 = src;
    let extreme = compute(&format!("{name}_value"), &out_shape, |idx| {
        reduce(combiner, xc.at(&s1(idx, Expr::var(&r1.0))), std::slice::from_ref(&r1))
    });
    let r2 = reduce_axis(n, "k");
    let xc = x.clone();
    let i64t = TirType::scalar(DataType::I64);
    one(compute(name, &out_shape, |idx| {
        let k = Expr::var(&r2.0);
        let hit = Expr::cmp(CmpOp::Eq, xc.at(&src(idx, k.clone())), extreme.at(idx));
        let miss = Expr::constant(if last { -1.0 } else { n as f64 }, DataType::I64);
        let pick = select(hit, Expr::cast(i64t, k), miss);
        reduce(if last { Combiner::Max } else { Combiner::Min }, pick, std::slice::from_ref(&r2))
    }))
}
