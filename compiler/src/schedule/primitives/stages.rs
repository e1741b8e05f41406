//! Stage placement: `compute_at`, `compute_inline` and `cache_read` — a
//! materialized stage recomputed, or a read buffer copied, over the region its
//! readers touch (region inference over the loads below a loop), and the check
//! that keeps whole tiles from reading past a stage.

use std::collections::HashMap;

use kiln_ir::arith::{simplify, Bounds};

use super::{
    collect_loads, innermost_store, loop_ranges, map_loads, peel_chain, rebuild_chain, retarget_buffer, wrap_guards,
    Header, Result, Schedule,
};
use crate::tir::{Buffer, CmpOp, Expr, ForKind, Scope, Stmt, Var};

impl Schedule {
    /// The producer nest `for a… { P[a…] = f(a…) }` of the materialized
    /// (kernel-local) buffer `producer`: its position, axes and value.
    /// Returns, per dimension, the loop variable indexing it (`None` for a unit
    /// dimension indexed by 0), and the stored value.
    fn producer_nest(&self, producer: &Buffer) -> Result<(Vec<Option<Var>>, Expr)> {
        let is_nest = |s: &Stmt| matches!(s, Stmt::For(_)) && innermost_store(s).is_some_and(|(b, _)| b == producer);
        let (nest, around) = find_loop(&self.func.body, &is_nest, &mut Vec::new())
            .ok_or_else(|| self.err(format!("no producer nest of `{}`", producer.name())))?;
        let (headers, body) = peel_chain(nest, &|_| false);
        let Stmt::Store { indices, value, .. } = body else { unreachable!("innermost_store matched") };
        let axes: Vec<Var> = headers.iter().map(|h| h.0.clone()).collect();
        let dims: Vec<Option<Var>> = indices
            .iter()
            .zip(producer.shape())
            .map(|(i, &n)| match i {
                // A unit dimension may be indexed by a loop fused around the
                // nest, and so may any dimension whose every reader sits in
                // the same fused loop (FuseSiblingLoops checked that each
                // indexes it with the loop's own variable): a max pooling's
                // padded plane, channel by channel.
                Expr::Var(v) if axes.contains(v) || n == 1 || around.contains(v) => Some(Some(v.clone())),
                Expr::Int(0, _) if n == 1 => Some(None),
                _ => None,
            })
            .collect::<Option<_>>()
            .ok_or_else(|| {
                self.err(format!("`{}` is not computed by a plain loop nest over its own indices", producer.name()))
            })?;
        if indices.len() != producer.shape().len()
            || dims.iter().flatten().filter(|v| axes.contains(v)).count() != axes.len()
        {
            return Err(
                self.err(format!("`{}` is not computed by a plain loop nest over its own indices", producer.name()))
            );
        }
        Ok((dims, value))
    }

    /// Remove the producer nest of `producer` and its allocation.
    fn remove_producer(&mut self, producer: &Buffer) {
        let body = std::mem::replace(&mut self.func.body, Stmt::nop());
        self.func.body = body.map_post(&mut |s| match s {
            Stmt::Allocate { buffer, body } if buffer == *producer => *body,
            s @ Stmt::For(_) if innermost_store(&s).is_some_and(|(b, _)| b == producer) => Stmt::nop(),
            // Loops left empty (the producer's part of a nest FuseSiblingLoops merged).
            Stmt::For(l) if l.body.is_nop() => Stmt::nop(),
            Stmt::Seq(v) => Stmt::seq(v),
            s => s,
        });
    }

    /// Inline a materialized producer into its readers (its loads become its value).
    pub fn compute_inline(&mut self, producer: &Buffer) -> Result<()> {
        let (dims, value) = self.producer_nest(producer)?;
        self.remove_producer(producer);
        let body = std::mem::replace(&mut self.func.body, Stmt::nop());
        self.func.body = body.map_exprs(&mut |e| {
            map_loads(&e, &|b, idx| {
                (b == producer).then(|| {
                    value.substitute(&|v| dims.iter().position(|a| a.as_ref() == Some(v)).map(|k| idx[k].clone()))
                })
            })
        });
        Ok(())
    }

    /// Compute the materialized producer inside loop `at`: only the region its
    /// readers below `at` touch, into a kernel-local buffer of that region's size.
    pub fn compute_at(&mut self, producer: &Buffer, at: &Var) -> Result<Buffer> {
        let (dims, value) = self.producer_nest(producer)?;
        self.loop_of(at)?;
        let make = move |elem: &[Expr]| {
            value.substitute(&|v| dims.iter().position(|a| a.as_ref() == Some(v)).map(|k| elem[k].clone()))
        };
        // Place first (it checks everything), then drop the full-size stage.
        let local = self.stage_region(producer, at, &format!("{}_at", producer.name()), &make)?;
        self.remove_producer(producer);
        Ok(local)
    }

    /// The variables of the loops around loop `v`, outermost first.
    pub fn loops_around(&self, v: &Var) -> Result<Vec<Var>> {
        let is_v = |s: &Stmt| matches!(s, Stmt::For(l) if l.var == *v);
        find_loop(&self.func.body, &is_v, &mut Vec::new())
            .map(|(_, around)| around)
            .ok_or_else(|| self.err(format!("no loop `{}`", v.name)))
    }

    /// A kernel-local `buffer` allocated around loop `at` and used only inside
    /// it, every access indexing one dimension with `at`'s variable (the ones
    /// before it of extent 1, or the same loop variable around `at` in every
    /// access): one copy per iteration of `at`, allocated in its body with
    /// those dimensions of extent 1. FuseSiblingLoops fuses a producer nest
    /// that shares the consumer's outer loops (a max pooling's padded image,
    /// channel by channel; a softmax's row of exponentials) into the
    /// consumer's loop, where `compute_at` no longer finds a nest of its own;
    /// this gives the same placement.
    pub fn localize(&mut self, buffer: &Buffer, at: &Var) -> Result<Buffer> {
        let at_loop = self.loop_of(at)?.clone();
        let around = self.loops_around(at)?;
        let all = access_indices(&self.func.body, buffer);
        let inside = access_indices(&at_loop.body, buffer);
        let dim = inside.first().and_then(|idx| idx.iter().position(|i| matches!(i, Expr::Var(v) if v == at)));
        let first = inside.first().cloned().unwrap_or_default();
        let fixed_outside = |idx: &Vec<Expr>, k: usize| {
            buffer.shape()[k] == 1 || (matches!(&idx[k], Expr::Var(v) if around.contains(v)) && idx[k] == first[k])
        };
        let per_iteration = |idx: &Vec<Expr>, d: usize| {
            matches!(&idx[d], Expr::Var(v) if v == at)
                && (0..d).all(|k| fixed_outside(idx, k))
                && idx.iter().all(|i| !i.uses_var(at) || matches!(i, Expr::Var(v) if v == at))
        };
        let Some(d) = dim.filter(|&d| all.len() == inside.len() && inside.iter().all(|idx| per_iteration(idx, d)))
        else {
            return Err(self.err(format!(
                "localize: `{}` is not used one slice per iteration of `{}`",
                buffer.name(),
                at.name
            )));
        };
        let mut shape = buffer.shape().to_vec();
        shape[..=d].fill(1);
        let local = Buffer::new(&format!("{}_at", buffer.name()), buffer.elem(), shape, Scope::Local);
        let (old, new) = (buffer.clone(), local.clone());
        let at_index = |idx: &[Expr]| -> Vec<Expr> {
            idx.iter().enumerate().map(|(k, i)| if k <= d { Expr::int(0) } else { i.clone() }).collect()
        };
        let body = std::mem::replace(&mut self.func.body, Stmt::nop());
        let body = retarget_buffer(body, &old, &new, &at_index);
        let at_var = at.clone();
        self.func.body = body.map_post(&mut |s| match s {
            Stmt::Allocate { buffer, body } if buffer == old => *body,
            Stmt::For(mut l) if l.var == at_var => {
                let body = std::mem::replace(&mut l.body, Stmt::nop());
                l.body = Stmt::Allocate { buffer: new.clone(), body: Box::new(body) };
                Stmt::For(l)
            }
            s => s,
        });
        Ok(local)
    }

    /// Copy the region of `buffer` that the code below loop `at` reads into a
    /// kernel-local buffer at the start of `at`'s body, and read the copy
    /// (TVM's `cache_read`): a strided operand becomes one contiguous panel.
    pub fn cache_read(&mut self, buffer: &Buffer, at: &Var) -> Result<Buffer> {
        let src = buffer.clone();
        let make = move |elem: &[Expr]| Expr::Load(src.clone(), elem.to_vec());
        self.stage_region(buffer, at, &format!("{}_shared", buffer.name()), &make)
    }

    /// The shared half of `compute_at` and `cache_read`: region inference over
    /// the loads of `src` below `at`, a local buffer of the region's shape
    /// filled with `value(element)`, and the loads redirected to it.
    fn stage_region(&mut self, src: &Buffer, at: &Var, name: &str, value: &dyn Fn(&[Expr]) -> Expr) -> Result<Buffer> {
        let at_loop = self.loop_of(at)?.clone();
        let reads = collect_loads(&at_loop.body, src);
        if reads.is_empty() {
            return Err(self.err(format!("compute_at: nothing below `{}` reads `{}`", at.name, src.name())));
        }
        let inner = loop_ranges(&at_loop.body);
        let mut inner_bounds = Bounds::new();
        for (v, min, ext) in &inner {
            inner_bounds.bind_loop(v, *min, *ext);
        }
        let at_min: HashMap<u32, Expr> = inner.iter().map(|(v, min, _)| (v.id, Expr::int(*min))).collect();
        // Per dimension: base (a function of the loops outside `at`) and extent.
        let mut region = Vec::new();
        for d in 0..src.shape().len() {
            let full = src.shape()[d] as i64;
            let mut dim: Option<(Expr, i64)> = None;
            for idx in &reads {
                let base = simplify(&idx[d].substitute(&|v| at_min.get(&v.id).cloned()), &Bounds::new());
                let offset = simplify(&(idx[d].clone() - base.clone()), &Bounds::new());
                let mut vars = Vec::new();
                collect_vars(&offset, &mut vars);
                let uses_outer = vars.iter().any(|v| !inner.iter().any(|(w, ..)| w == v));
                let iv = inner_bounds.interval(&offset);
                let candidate = match (iv.lo, iv.hi) {
                    (Some(0), Some(hi)) if !uses_outer => Some((base, hi + 1)),
                    _ => None,
                };
                dim = match (dim, candidate) {
                    (None, Some(c)) => Some(c),
                    (Some((b, e)), Some((b2, e2))) if b == b2 => Some((b, e.max(e2))),
                    _ => Some((Expr::int(0), full)),
                };
                if dim.as_ref().is_some_and(|(b, e)| b.as_int() == Some(0) && *e == full) {
                    break;
                }
            }
            region.push(dim.unwrap_or((Expr::int(0), full)));
        }
        // A region reaches past the source's end in two cases. Guarded reads
        // (a split's tail) never happen there: the region stops at the end.
        // Whole tiles over a row's tail read there unguarded: the region goes
        // past the end where every element there is computed from in-bounds
        // reads (a padded image clamps its reads), and is an error otherwise —
        // never a read past a buffer.
        let past_end: Vec<usize> = (0..region.len()).filter(|&d| region[d].1 > src.shape()[d] as i64).collect();
        // The region: loop vars r_d, element base_d + r_d (skipped where the
        // region reaches past the source's extent).
        let rvars: Vec<Var> = (0..region.len()).map(|d| Var::index(&format!("{}_r{d}", src.name()))).collect();
        if !self.read_past_tail.contains(src) {
            for &d in &past_end {
                region[d].1 = src.shape()[d] as i64;
            }
        } else if !computable_past_end(&region, &rvars, &past_end, value) {
            return Err(self.err(format!(
                "whole tiles read `{}` past its end, and its values there are not all computable",
                src.name()
            )));
        }
        let local = Buffer::new(name, src.elem(), region.iter().map(|(_, e)| *e as usize).collect(), Scope::Local);
        let elem: Vec<Expr> = region
            .iter()
            .zip(&rvars)
            .map(|((b, _), r)| simplify(&(b.clone() + Expr::var(r)), &Bounds::new()))
            .collect();
        // Guards the loops' ranges already imply are left out (a column
        // block that is the whole row): a guarded copy is not vectorized.
        let mut all_loops = Bounds::new();
        for (v, min, ext) in loop_ranges(&self.func.body) {
            all_loops.bind_loop(&v, min, ext);
        }
        for (r, (_, e)) in rvars.iter().zip(&region) {
            all_loops.bind_loop(r, 0, *e);
        }
        let in_range: Vec<Expr> = elem
            .iter()
            .zip(src.shape())
            .zip(&region)
            .filter(|((e, &n), (b, _))| {
                b.as_int().is_none() && all_loops.interval(e).hi.is_none_or(|hi| hi >= n as i64)
            })
            .map(|((e, &n), _)| Expr::cmp(CmpOp::Lt, e.clone(), Expr::int(n as i64)))
            .collect();
        let store =
            Stmt::Store { buffer: local.clone(), indices: rvars.iter().map(Expr::var).collect(), value: value(&elem) };
        let headers: Vec<Header> = rvars
            .iter()
            .zip(&region)
            .map(|(r, (_, e))| (r.clone(), Expr::int(0), Expr::int(*e), ForKind::Serial))
            .collect();
        let fill = rebuild_chain(headers, wrap_guards(store, &in_range));
        let bases: Vec<Expr> = region.iter().map(|(b, _)| b.clone()).collect();
        let (p, l) = (src.clone(), local.clone());
        self.rewrite_loop(at, move |mut lp| {
            let body = std::mem::replace(&mut lp.body, Stmt::nop());
            let body = retarget_buffer(body, &p, &l, &|idx| {
                idx.iter().zip(&bases).map(|(i, b)| simplify(&(i.clone() - b.clone()), &Bounds::new())).collect()
            });
            lp.body = Stmt::Allocate { buffer: l.clone(), body: Box::new(Stmt::seq(vec![fill, body])) };
            Ok(Stmt::For(Box::new(lp)))
        })?;
        Ok(local)
    }
}
/// Whether `value` at every element of `region` (base + `rvars`) reads in
/// bounds along the dimensions `past_end` (those past the source's end;
/// indices that do not depend on them were valid before).
fn computable_past_end(
    region: &[(Expr, i64)],
    rvars: &[Var],
    past_end: &[usize],
    value: &dyn Fn(&[Expr]) -> Expr,
) -> bool {
    let mut bounds = Bounds::new();
    for (r, (_, e)) in rvars.iter().zip(region) {
        bounds.bind_loop(r, 0, *e);
    }
    let elem: Vec<Expr> = region.iter().zip(rvars).map(|((base, _), r)| base.clone() + Expr::var(r)).collect();
    let mut loads = Vec::new();
    crate::schedule::collect_loads(&value(&elem), &mut loads);
    loads.iter().all(|(buf, idx)| {
        idx.iter().zip(buf.shape()).filter(|(i, _)| past_end.iter().any(|&d| i.uses_var(&rvars[d]))).all(|(i, &n)| {
            let iv = bounds.interval(i);
            iv.lo.is_some_and(|lo| lo >= 0) && iv.hi.is_some_and(|hi| hi < n as i64)
        })
    })
}

fn collect_vars(e: &Expr, out: &mut Vec<Var>) {
    if let Expr::Var(v) = e {
        out.push(v.clone());
    }
    e.for_each_child(|c| collect_vars(c, out));
}

/// The first loop of `s` that `is` picks, and the variables of the loops
/// around it (outermost first; `around` holds those around `s`).
fn find_loop(s: &Stmt, is: &dyn Fn(&Stmt) -> bool, around: &mut Vec<Var>) -> Option<(Stmt, Vec<Var>)> {
    match s {
        Stmt::For(l) => {
            if is(s) {
                return Some((s.clone(), around.clone()));
            }
            around.push(l.var.clone());
            let found = find_loop(&l.body, is, around);
            around.pop();
            found
        }
        Stmt::Seq(v) => v.iter().find_map(|s| find_loop(s, is, around)),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => find_loop(body, is, around),
        Stmt::If { then_case, else_case, .. } => {
            find_loop(then_case, is, around).or_else(|| else_case.as_ref().and_then(|e| find_loop(e, is, around)))
        }
        _ => None,
    }
}

/// The indices of every load and store of `buffer` in `s`.
fn access_indices(s: &Stmt, buffer: &Buffer) -> Vec<Vec<Expr>> {
    let mut out = collect_loads(s, buffer);
    s.visit(&mut |st| {
        if let Stmt::Store { buffer: b, indices, .. } = st {
            if b == buffer {
                out.push(indices.clone());
            }
        }
    });
    out
}
