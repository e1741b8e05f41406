//! Schedule primitives on TIR loop nests (TVM's `tir.Schedule`, reduced to
//! what kiln's strategies use): split, fuse, reorder, loop kinds (vectorize,
//! parallel, unroll, bind), `decompose_reduction` (with an optional cache
//! write of the output tile into a kernel-local accumulator), `compute_at`
//! and `compute_inline` of a materialized producer stage (those in `stages.rs`),
//! `rfactor_lanes` (a reduction split into per-lane partials, `rfactor.rs`),
//! `split_writeback_at_tail` (whole tiles' write-back unguarded but for the
//! tile across the end, `writeback.rs`).
//!
//! Loops are named by their variables; every primitive either rewrites the
//! kernel into an equivalent one or returns an error naming the kernel and
//! what does not hold, leaving the schedule unchanged.

mod rfactor;
mod stages;
mod writeback;

use std::collections::HashMap;

use kiln_ir::arith::{simplify, Bounds};

use crate::tir::{BinOp, Buffer, CmpOp, Expr, For, ForKind, PrimFunc, Scope, Stmt, ThreadAxis, Var};

/// Why a primitive does not apply.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("schedule of `{kernel}`: {message}")]
pub struct ScheduleError {
    pub kernel: String,
    pub message: String,
}

type Result<T> = std::result::Result<T, ScheduleError>;

/// A loop header: variable, min, extent, kind.
type Header = (Var, Expr, Expr, ForKind);

/// A kernel being scheduled.
#[derive(Debug, Clone)]
pub struct Schedule {
    func: PrimFunc,
    /// Kernel-local stages that whole tiles read past a row's tail, unguarded:
    /// their region may not stop at the stage's end.
    read_past_tail: Vec<Buffer>,
}

/// The loops `decompose_reduction` made.
#[derive(Debug, Clone)]
pub struct ReductionTile {
    /// The tile loops of the initialization, outermost first.
    pub init_loops: Vec<Var>,
    /// The reduction loops (unchanged), outermost first.
    pub reduce_loops: Vec<Var>,
    /// The tile loops inside the reduction loops (the original variables).
    pub update_loops: Vec<Var>,
    /// The tile loops of the write-back and epilogue (empty when there is none).
    pub writeback_loops: Vec<Var>,
    /// The kernel-local accumulator, when cached.
    pub cache: Option<Buffer>,
}

fn subst_stmt(s: Stmt, map: &HashMap<u32, Expr>) -> Stmt {
    s.map_exprs(&mut |e| e.substitute(&|v| map.get(&v.id).cloned()))
}

/// The first statement satisfying `pred`, parents before children.
fn find_mut<'a>(s: &'a mut Stmt, pred: &dyn Fn(&Stmt) -> bool) -> Option<&'a mut Stmt> {
    if pred(s) {
        return Some(s);
    }
    match s {
        Stmt::For(l) => find_mut(&mut l.body, pred),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => find_mut(body, pred),
        Stmt::If { then_case, else_case, .. } => {
            find_mut(then_case, pred).or_else(|| else_case.as_mut().and_then(|e| find_mut(e, pred)))
        }
        Stmt::Seq(v) => v.iter_mut().find_map(|c| find_mut(c, pred)),
        Stmt::Store { .. } | Stmt::Evaluate(_) => None,
    }
}

fn find_loop<'a>(s: &'a Stmt, v: &Var) -> Option<&'a For> {
    match s {
        Stmt::For(l) if l.var == *v => Some(l),
        Stmt::For(l) => find_loop(&l.body, v),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => find_loop(body, v),
        Stmt::If { then_case, else_case, .. } => {
            find_loop(then_case, v).or_else(|| else_case.as_deref().and_then(|e| find_loop(e, v)))
        }
        Stmt::Seq(list) => list.iter().find_map(|c| find_loop(c, v)),
        Stmt::Store { .. } | Stmt::Evaluate(_) => None,
    }
}

fn is_loop(v: &Var) -> impl Fn(&Stmt) -> bool + '_ {
    move |s| matches!(s, Stmt::For(l) if l.var == *v)
}

fn const_extent(l: &For) -> Option<i64> {
    l.extent.as_int()
}

/// Wrap the innermost non-loop statement of a perfect loop chain in `if cond`.
fn guard_innermost(s: Stmt, cond: Expr) -> Stmt {
    match s {
        Stmt::For(mut l) => {
            let body = std::mem::replace(&mut l.body, Stmt::nop());
            l.body = guard_innermost(body, cond);
            Stmt::For(l)
        }
        s => Stmt::If { cond, then_case: Box::new(s), else_case: None },
    }
}

/// `s` with each loop it declares over a new variable named `<name>_<suffix>`.
pub(super) fn fresh_loop_vars(s: Stmt, suffix: &str) -> Stmt {
    s.map_post(&mut |s| match s {
        Stmt::For(l) => {
            let l = *l;
            let var = Var::index(&format!("{}_{suffix}", l.var.name));
            let map = HashMap::from([(l.var.id, Expr::var(&var))]);
            loop_stmt(var, l.min, l.extent, l.kind, subst_stmt(l.body, &map))
        }
        s => s,
    })
}

fn loop_stmt(var: Var, min: Expr, extent: Expr, kind: ForKind, body: Stmt) -> Stmt {
    Stmt::For(Box::new(For { var, min, extent, kind, body }))
}

/// The loop headers (var, min, extent, kind) of a perfect chain from `s`, and what is inside.
fn peel_chain(s: Stmt, stop: &dyn Fn(&For) -> bool) -> (Vec<Header>, Stmt) {
    let mut headers = Vec::new();
    let mut cur = s;
    loop {
        match cur {
            Stmt::For(l) if !stop(&l) => {
                let l = *l;
                headers.push((l.var, l.min, l.extent, l.kind));
                cur = l.body;
            }
            other => return (headers, other),
        }
    }
}

fn rebuild_chain(headers: Vec<Header>, body: Stmt) -> Stmt {
    headers.into_iter().rev().fold(body, |b, (v, min, ext, kind)| loop_stmt(v, min, ext, kind, b))
}

/// Copies of loop `headers` over new variables named `<name>_<suffix>`, and
/// the substitution from the old variables to the new.
fn fresh_headers(headers: &[Header], suffix: &str) -> (Vec<Header>, HashMap<u32, Expr>) {
    let mut map = HashMap::new();
    let copies = headers
        .iter()
        .map(|(v, min, ext, kind)| {
            let nv = Var::index(&format!("{}_{suffix}", v.name));
            map.insert(v.id, Expr::var(&nv));
            (nv, min.clone(), ext.clone(), *kind)
        })
        .collect();
    (copies, map)
}

/// Strip `if` guards (split tails) around a statement, collecting their conditions.
fn strip_guards(s: Stmt, guards: &mut Vec<Expr>) -> Stmt {
    match s {
        Stmt::If { cond, then_case, else_case: None } => {
            guards.push(cond);
            strip_guards(*then_case, guards)
        }
        s => s,
    }
}

fn wrap_guards(s: Stmt, guards: &[Expr]) -> Stmt {
    match guards.iter().cloned().reduce(Expr::and) {
        Some(cond) => Stmt::If { cond, then_case: Box::new(s), else_case: None },
        None => s,
    }
}

/// The buffer and indices of the store at the bottom of a perfect loop chain.
fn innermost_store(s: &Stmt) -> Option<(&Buffer, &Vec<Expr>)> {
    match s {
        Stmt::For(l) => innermost_store(&l.body),
        Stmt::Store { buffer, indices, .. } => Some((buffer, indices)),
        _ => None,
    }
}

fn map_loads(e: &Expr, f: &dyn Fn(&Buffer, &[Expr]) -> Option<Expr>) -> Expr {
    match e {
        Expr::Load(b, idx) => {
            let idx: Vec<Expr> = idx.iter().map(|i| map_loads(i, f)).collect();
            f(b, &idx).unwrap_or_else(|| Expr::Load(b.clone(), idx))
        }
        _ => e.map_children(|c| map_loads(c, f)),
    }
}

/// Replace loads and stores of `from` by `to`, mapping the indices.
pub(crate) fn retarget_buffer(s: Stmt, from: &Buffer, to: &Buffer, index: &dyn Fn(&[Expr]) -> Vec<Expr>) -> Stmt {
    let s = s.map_exprs(&mut |e| map_loads(&e, &|b, idx| (b == from).then(|| Expr::Load(to.clone(), index(idx)))));
    s.map_post(&mut |s| match s {
        Stmt::Store { buffer, indices, value } if buffer == *from => {
            Stmt::Store { buffer: to.clone(), indices: index(&indices), value }
        }
        s => s,
    })
}

fn collect_loads(s: &Stmt, buf: &Buffer) -> Vec<Vec<Expr>> {
    fn walk(e: &Expr, buf: &Buffer, out: &mut Vec<Vec<Expr>>) {
        if let Expr::Load(b, idx) = e {
            if b == buf {
                out.push(idx.clone());
            }
        }
        e.for_each_child(|c| walk(c, buf, out));
    }
    let mut out = Vec::new();
    s.clone().map_exprs(&mut |e| {
        walk(&e, buf, &mut out);
        e
    });
    out
}

/// Every loop variable of `s` with its (constant) range.
fn loop_ranges(s: &Stmt) -> Vec<(Var, i64, i64)> {
    let mut out = Vec::new();
    s.visit(&mut |s| {
        if let Stmt::For(l) = s {
            if let (Some(min), Some(ext)) = (l.min.as_int(), l.extent.as_int()) {
                out.push((l.var.clone(), min, ext));
            }
        }
    });
    out
}

impl Schedule {
    pub fn new(func: PrimFunc) -> Schedule {
        Schedule { func, read_past_tail: Vec::new() }
    }

    pub fn func(&self) -> &PrimFunc {
        &self.func
    }

    pub fn into_func(self) -> PrimFunc {
        self.func
    }

    fn err(&self, message: impl Into<String>) -> ScheduleError {
        ScheduleError { kernel: self.func.name.clone(), message: message.into() }
    }

    /// Every loop variable, parents before children.
    pub fn loops(&self) -> Vec<Var> {
        let mut out = Vec::new();
        self.func.body.visit(&mut |s| {
            if let Stmt::For(l) = s {
                out.push(l.var.clone());
            }
        });
        out
    }

    /// The first loop (pre-order) whose variable is called `name`.
    pub fn get_loop(&self, name: &str) -> Result<Var> {
        self.loops().into_iter().find(|v| &*v.name == name).ok_or_else(|| self.err(format!("no loop `{name}`")))
    }

    /// The loop of `v`.
    pub fn loop_of(&self, v: &Var) -> Result<&For> {
        find_loop(&self.func.body, v).ok_or_else(|| self.err(format!("no loop `{}`", v.name)))
    }

    /// Replace the loop of `v` by `f(loop)`.
    pub(crate) fn rewrite_loop(&mut self, v: &Var, f: impl FnOnce(For) -> Result<Stmt>) -> Result<()> {
        let kernel = self.func.name.clone();
        let node = find_mut(&mut self.func.body, &is_loop(v))
            .ok_or_else(|| ScheduleError { kernel, message: format!("no loop `{}`", v.name) })?;
        let Stmt::For(l) = std::mem::replace(node, Stmt::nop()) else { unreachable!("find_mut matched a loop") };
        let saved = (*l).clone();
        match f(*l) {
            Ok(s) => {
                *node = s;
                Ok(())
            }
            Err(e) => {
                *node = Stmt::For(Box::new(saved));
                Err(e)
            }
        }
    }

    /// `for v in 0..n` → `for v_o in 0..⌈n/factor⌉ { for v_i in 0..factor { if v_o·factor+v_i < n { … } } }`;
    /// the tail check sits around the innermost statement and exists only when `factor ∤ n`.
    pub fn split(&mut self, v: &Var, factor: usize) -> Result<(Var, Var)> {
        if factor == 0 {
            return Err(self.err(format!("split of `{}` by 0", v.name)));
        }
        let outer = Var::index(&format!("{}_o", v.name));
        let inner = Var::index(&format!("{}_i", v.name));
        let (o, i) = (outer.clone(), inner.clone());
        let kernel = self.func.name.clone();
        self.rewrite_loop(v, move |l| {
            let n = const_extent(&l).ok_or_else(|| ScheduleError {
                kernel,
                message: format!("split of `{}`: extent not constant", v.name),
            })?;
            let f = factor as i64;
            let rel = Expr::var(&o) * Expr::int(f) + Expr::var(&i);
            let mut map = HashMap::new();
            map.insert(l.var.id, simplify(&(l.min.clone() + rel.clone()), &Bounds::new()));
            let mut body = subst_stmt(l.body, &map);
            if n % f != 0 {
                body = guard_innermost(body, Expr::cmp(CmpOp::Lt, rel, Expr::int(n)));
            }
            let inner_loop = loop_stmt(i, Expr::int(0), Expr::int(f), ForKind::Serial, body);
            Ok(loop_stmt(o, Expr::int(0), Expr::int((n + f - 1) / f), ForKind::Serial, inner_loop))
        })?;
        Ok((outer, inner))
    }

    /// `for x { A[…x…] = init; R… { A[…x…] = f(A[…x…], …) } }` → `for x' {
    /// init }; R… { for x { update } }`: the reduction loops hoisted outside
    /// the one spatial loop `x` of a nest, for a reduction nest that has no
    /// tile loops of its own to decompose (a softmax's sum over a non-last
    /// axis, after FuseSiblingLoops merged its outer loops with the maximum's).
    /// Legal because each `x` updates only its own element.
    pub fn hoist_reduction(&mut self, x: &Var) -> Result<()> {
        let kernel = self.func.name.clone();
        self.rewrite_loop(x, |l| {
            let err = |m: &str| ScheduleError { kernel: kernel.clone(), message: format!("hoist_reduction: {m}") };
            let Stmt::Seq(parts) = &l.body else { return Err(err("no initialization and reduction")) };
            let [init @ Stmt::Store { buffer: acc, indices: acc_idx, .. }, reduce @ Stmt::For(_)] = &parts[..] else {
                return Err(err("no initialization and reduction"));
            };
            let (headers, update) = peel_chain(reduce.clone(), &|_| false);
            let Stmt::Store { buffer: ub, indices: ui, .. } = &update else {
                return Err(err("the reduction nest does not end in one update"));
            };
            if ub != acc || ui != acc_idx || headers.iter().any(|(v, ..)| acc_idx.iter().any(|i| i.uses_var(v))) {
                return Err(err("the reduction does not update the initialized element"));
            }
            let x_init = Var::index(&format!("{}_init", l.var.name));
            let mut map = HashMap::new();
            map.insert(l.var.id, Expr::var(&x_init));
            let init_loop = loop_stmt(x_init, l.min.clone(), l.extent.clone(), l.kind, subst_stmt(init.clone(), &map));
            let inner = loop_stmt(l.var.clone(), l.min.clone(), l.extent.clone(), l.kind, update);
            Ok(Stmt::seq(vec![init_loop, rebuild_chain(headers, inner)]))
        })
    }

    /// `split` without a guard: the whole blocks of `factor` iterations as
    /// `outer × inner` loops, then the `extent % factor` remaining iterations
    /// as a loop of their own (returned when there are any), so that `inner`
    /// can be vectorized whatever the extent.
    pub fn split_with_tail(&mut self, v: &Var, factor: usize) -> Result<(Var, Var, Option<Var>)> {
        if factor == 0 {
            return Err(self.err(format!("split of `{}` by 0", v.name)));
        }
        let outer = Var::index(&format!("{}_o", v.name));
        let inner = Var::index(&format!("{}_i", v.name));
        let tail = Var::index(&format!("{}_t", v.name));
        let (o, i, t) = (outer.clone(), inner.clone(), tail.clone());
        let kernel = self.func.name.clone();
        let mut has_tail = false;
        self.rewrite_loop(v, |l| {
            let n = const_extent(&l).ok_or_else(|| ScheduleError {
                kernel,
                message: format!("split of `{}`: extent not constant", v.name),
            })?;
            let f = factor as i64;
            let (blocks, rest) = (n / f, n % f);
            let at = |e: Expr| {
                let mut map = HashMap::new();
                map.insert(l.var.id, simplify(&(l.min.clone() + e), &Bounds::new()));
                subst_stmt(l.body.clone(), &map)
            };
            let main_body = at(Expr::var(&o) * Expr::int(f) + Expr::var(&i));
            let main = loop_stmt(
                o.clone(),
                Expr::int(0),
                Expr::int(blocks),
                ForKind::Serial,
                loop_stmt(i, Expr::int(0), Expr::int(f), ForKind::Serial, main_body),
            );
            if rest == 0 {
                return Ok(main);
            }
            has_tail = true;
            // The copied body's loops get variables of their own: primitives
            // find loops by variable, and a tail must be scheduled apart.
            let tail_body = fresh_loop_vars(at(Expr::int(blocks * f) + Expr::var(&t)), "t");
            Ok(Stmt::seq(vec![main, loop_stmt(t, Expr::int(0), Expr::int(rest), ForKind::Serial, tail_body)]))
        })?;
        Ok((outer, inner, has_tail.then_some(tail)))
    }

    /// `split` without a guard or a tail: `ceil(extent / factor)` blocks of
    /// `factor` iterations, the last block moved back to end at the extent
    /// (`v = min(o·factor, extent − factor) + i`), so that it repeats
    /// `factor − extent % factor` iterations of the block before. Only for a
    /// body that computes the same values whenever it runs an iteration again
    /// (a register tile that initializes, reduces and writes back its own
    /// outputs, reading only buffers it does not write): every block is then
    /// whole, for any extent of at least `factor`.
    pub fn split_overlapping(&mut self, v: &Var, factor: usize) -> Result<(Var, Var)> {
        let outer = Var::index(&format!("{}_o", v.name));
        let inner = Var::index(&format!("{}_i", v.name));
        let (o, i) = (outer.clone(), inner.clone());
        let kernel = self.func.name.clone();
        self.rewrite_loop(v, move |l| {
            let err = |m: String| ScheduleError { kernel: kernel.clone(), message: m };
            let n = const_extent(&l).ok_or_else(|| err(format!("split of `{}`: extent not constant", v.name)))?;
            let f = factor as i64;
            if f == 0 || n < f {
                return Err(err(format!("overlapping split of `{}` ({n} iterations) by {factor}", v.name)));
            }
            let start = Expr::bin(BinOp::Min, Expr::var(&o) * Expr::int(f), Expr::int(n - f));
            let mut map = HashMap::new();
            map.insert(l.var.id, simplify(&(l.min.clone() + start + Expr::var(&i)), &Bounds::new()));
            let body = subst_stmt(l.body, &map);
            let inner_loop = loop_stmt(i, Expr::int(0), Expr::int(f), ForKind::Serial, body);
            Ok(loop_stmt(o, Expr::int(0), Expr::int((n + f - 1) / f), ForKind::Serial, inner_loop))
        })?;
        Ok((outer, inner))
    }

    /// Two directly nested loops become one over the product of their extents.
    pub fn fuse(&mut self, outer: &Var, inner: &Var) -> Result<Var> {
        let fused = Var::index(&format!("{}_{}_f", outer.name, inner.name));
        let fv = fused.clone();
        let kernel = self.func.name.clone();
        let inner = inner.clone();
        self.rewrite_loop(outer, move |lo| {
            let err = |m: String| ScheduleError { kernel: kernel.clone(), message: m };
            let eo = const_extent(&lo);
            let Stmt::For(li) = lo.body else {
                return Err(err(format!("fuse: `{}` is not directly inside `{}`", inner.name, lo.var.name)));
            };
            if li.var != inner {
                return Err(err(format!("fuse: `{}` is not directly inside `{}`", inner.name, lo.var.name)));
            }
            let (Some(eo), Some(ei)) = (eo, const_extent(&li)) else {
                return Err(err("fuse: extents not constant".into()));
            };
            let mut map = HashMap::new();
            let f = Expr::var(&fv);
            map.insert(lo.var.id, lo.min.clone() + Expr::bin(BinOp::FloorDiv, f.clone(), Expr::int(ei)));
            map.insert(li.var.id, li.min.clone() + Expr::bin(BinOp::FloorMod, f, Expr::int(ei)));
            let body = subst_stmt(li.body, &map);
            Ok(loop_stmt(fv, Expr::int(0), Expr::int(eo * ei), ForKind::Serial, body))
        })?;
        Ok(fused)
    }

    /// Permute loops of one perfect nest: the positions the given loops occupy
    /// receive them in the given order; loops in between stay where they are.
    pub fn reorder(&mut self, order: &[Var]) -> Result<()> {
        let Some(first) = self.loops().into_iter().find(|v| order.contains(v)) else {
            return Err(self.err("reorder: none of the loops exists"));
        };
        let kernel = self.func.name.clone();
        let order = order.to_vec();
        self.rewrite_loop(&first, move |l| {
            let err = |m: String| ScheduleError { kernel: kernel.clone(), message: m };
            let mut headers: Vec<Header> = Vec::new();
            let mut cur = Stmt::For(Box::new(l));
            while headers.iter().filter(|(v, ..)| order.contains(v)).count() < order.len() {
                match cur {
                    Stmt::For(l) => {
                        let l = *l;
                        headers.push((l.var, l.min, l.extent, l.kind));
                        cur = l.body;
                    }
                    _ => {
                        return Err(err(format!(
                            "reorder: {} are not perfectly nested",
                            order.iter().map(|v| format!("`{}`", v.name)).collect::<Vec<_>>().join(", ")
                        )))
                    }
                }
            }
            let mut slots = Vec::new();
            let mut taken: HashMap<u32, Header> = HashMap::new();
            for (k, h) in headers.iter().enumerate() {
                if order.contains(&h.0) {
                    slots.push(k);
                    taken.insert(h.0.id, h.clone());
                }
            }
            for (slot, v) in slots.into_iter().zip(&order) {
                headers[slot] = taken[&v.id].clone();
            }
            // An extent may not depend on a loop that now sits inside it.
            for (k, (_, min, ext, _)) in headers.iter().enumerate() {
                if headers[k..].iter().any(|(v, ..)| min.uses_var(v) || ext.uses_var(v)) {
                    return Err(err("reorder: a loop's range depends on a loop moved inside it".into()));
                }
            }
            Ok(rebuild_chain(headers, cur))
        })
    }

    fn set_kind(&mut self, v: &Var, kind: ForKind) -> Result<()> {
        let kernel = self.func.name.clone();
        self.rewrite_loop(v, |mut l| {
            if matches!(kind, ForKind::Vectorized | ForKind::Unrolled) && const_extent(&l).is_none() {
                return Err(ScheduleError {
                    kernel,
                    message: format!("`{}` has no constant extent to {kind:?}", l.var.name),
                });
            }
            l.kind = kind;
            Ok(Stmt::For(Box::new(l)))
        })
    }

    /// The loop's iterations become vector lanes (`tir.VectorizeLoop` emits the vector code).
    pub fn vectorize(&mut self, v: &Var) -> Result<()> {
        self.set_kind(v, ForKind::Vectorized)
    }

    /// The loop's iterations are spread over threads (task slices on the CPU).
    pub fn parallel(&mut self, v: &Var) -> Result<()> {
        self.set_kind(v, ForKind::Parallel)
    }

    /// The loop is fully unrolled (`tir.UnrollLoop`).
    pub fn unroll(&mut self, v: &Var) -> Result<()> {
        self.set_kind(v, ForKind::Unrolled)
    }

    /// The loop's variable becomes a GPU block or thread index.
    pub fn bind(&mut self, v: &Var, axis: ThreadAxis) -> Result<()> {
        self.set_kind(v, ForKind::ThreadBinding(axis))
    }

    /// Distribute the thread-bound loop `t` over the statements between it and
    /// the loop `to` below it, so that `to` runs outside copies of `t` (thread
    /// loop fission, where a barrier will go):
    /// `for t { alloc L; A; for to { B }; C }` → `alloc L'; for t₀ { A }; for to { for t₁ { B } }; for t₂ { C }`.
    /// Run one copy after another, each thread keeps its own kernel-local
    /// buffers: a buffer allocated on the way gets a leading dimension of
    /// `t`'s extent, indexed by the copy's variable (`tir.LowerThreadLocal`
    /// drops it again on the GPU, where each thread has its own registers).
    /// The loops on the way may not depend on `t`. Returns the copies' variables.
    pub fn distribute_thread_loop(&mut self, t: &Var, to: &Var) -> Result<Vec<Var>> {
        let kernel = self.func.name.clone();
        let mut copies = Vec::new();
        let out = &mut copies;
        self.rewrite_loop(t, |l| {
            let err =
                |m: String| ScheduleError { kernel: kernel.clone(), message: format!("distribute_thread_loop: {m}") };
            if !matches!(l.kind, ForKind::ThreadBinding(_)) || const_extent(&l).is_none() {
                return Err(err(format!("`{}` is not a thread loop of constant extent", l.var.name)));
            }
            if find_loop(&l.body, to).is_none() {
                return Err(err(format!("no loop `{}` below `{}`", to.name, l.var.name)));
            }
            let header = For {
                var: l.var.clone(),
                min: l.min.clone(),
                extent: l.extent.clone(),
                kind: l.kind,
                body: Stmt::nop(),
            };
            distribute(&header, l.body, to, &mut Vec::new(), out).map_err(err)
        })?;
        Ok(copies)
    }

    /// For the reduction below loop `at` — `at { T… { [if g] { init; R… { update }; epilogue… } } }`,
    /// with `T` the perfectly nested tile loops — hoist the reduction loops
    /// `R` outside the tile: `at { T' { init }; R { T { update } }; T'' { epilogue } }`.
    /// With `cache`, the tile accumulates in a kernel-local buffer (registers,
    /// after unrolling) and the write-back copies it out before the epilogue.
    pub fn decompose_reduction(&mut self, at: &Var, cache: bool) -> Result<ReductionTile> {
        self.decompose(at, cache, true)
    }

    /// [`Schedule::decompose_reduction`] into a kernel-local tile for a split
    /// whose factor does not divide the extent: the tile computes whole
    /// (its initialization and update unguarded, so they stay whole vectors)
    /// and only the write-back checks the tail. The lanes past the end read
    /// only kernel-local stages — an error if the update reads a global
    /// buffer along a guarded variable — which must then be placed with
    /// [`Schedule::compute_at`] so that their region covers those reads.
    pub fn decompose_reduction_whole_tiles(&mut self, at: &Var) -> Result<ReductionTile> {
        self.decompose(at, true, false)
    }

    fn decompose(&mut self, at: &Var, cache: bool, guard_update: bool) -> Result<ReductionTile> {
        let kernel = self.func.name.clone();
        // Every loop's range, to prove a whole tile's global reads in bounds
        // (only whole tiles read past a tail).
        let mut loop_ranges = Bounds::new();
        if !guard_update {
            self.func.body.visit(&mut |s| {
                if let Stmt::For(l) = s {
                    if let (Some(m), Some(e)) = (l.min.as_int(), l.extent.as_int()) {
                        loop_ranges.bind_loop(&l.var, m, e);
                    }
                }
            });
        }
        let mut tile = None;
        let out = &mut tile;
        let mut past_tail = Vec::new();
        let past = &mut past_tail;
        self.rewrite_loop(at, |l| {
            let err = |m: &str| ScheduleError { kernel: kernel.clone(), message: format!("decompose_reduction: {m}") };
            let (tiles, inner) = peel_chain(l.body, &|_| false);
            let mut guards = Vec::new();
            let inner = strip_guards(inner, &mut guards);
            let Stmt::Seq(mut parts) = inner else { return Err(err("no initialization and reduction below the loop")) };
            if parts.len() < 2 {
                return Err(err("no initialization and reduction below the loop"));
            }
            let epilogue: Vec<Stmt> = parts.split_off(2);
            let reduce = parts.pop().expect("two parts");
            let init = parts.pop().expect("two parts");
            let Stmt::Store { buffer: acc, indices: acc_idx, value: init_value } = init else {
                return Err(err("the first statement is not an initialization"));
            };
            let (reduce_headers, update) = peel_chain(reduce, &|_| false);
            let Stmt::Store { buffer: ub, indices: ui, value: uv } = update else {
                return Err(err("the reduction nest does not end in one update"));
            };
            if reduce_headers.is_empty() || ub != acc || ui != acc_idx {
                return Err(err("the reduction does not update the initialized element"));
            }
            if tiles.iter().any(|(_, min, ext, _)| min.as_int().is_none() || ext.as_int().is_none()) {
                return Err(err("tile loops need constant ranges"));
            }
            let fresh = |suffix: &str| fresh_headers(&tiles, suffix);
            let cache_buf = cache.then(|| {
                let shape: Vec<usize> = tiles.iter().map(|(_, _, e, _)| e.as_int().unwrap_or(1) as usize).collect();
                Buffer::new(&format!("{}_local", acc.name()), acc.elem(), shape, Scope::Local)
            });
            // The accumulator element of the tile at the current tile loop variables.
            let tile_index = |map: &HashMap<u32, Expr>| -> Vec<Expr> {
                tiles
                    .iter()
                    .map(|(v, min, ..)| {
                        let e = map.get(&v.id).cloned().unwrap_or_else(|| Expr::var(v));
                        simplify(&(e - min.clone()), &Bounds::new())
                    })
                    .collect()
            };
            let target = |map: &HashMap<u32, Expr>| match &cache_buf {
                Some(c) => (c.clone(), tile_index(map)),
                None => (acc.clone(), acc_idx.iter().map(|i| i.substitute(&|v| map.get(&v.id).cloned())).collect()),
            };
            let retarget_value = |e: &Expr, map: &HashMap<u32, Expr>| match &cache_buf {
                Some(c) => {
                    let (buf, idx) = (c.clone(), tile_index(map));
                    map_loads(e, &|b, i| {
                        (b == &acc && i == acc_idx.as_slice()).then(|| Expr::Load(buf.clone(), idx.clone()))
                    })
                }
                None => e.clone(),
            };
            // init
            let (init_h, init_map) = fresh("init");
            let (tb, ti) = target(&init_map);
            if !guard_update && !guards.is_empty() {
                let guarded: Vec<Var> =
                    tiles.iter().map(|h| h.0.clone()).filter(|v| guards.iter().any(|g| g.uses_var(v))).collect();
                let mut reads = Vec::new();
                crate::schedule::collect_loads(&uv, &mut reads);
                // (The accumulator's own reads go to the tile.)
                for (b, idx) in reads.into_iter().filter(|(b, _)| *b != acc) {
                    if idx.iter().any(|i| guarded.iter().any(|v| i.uses_var(v))) {
                        if b.scope() != Scope::Local {
                            // A global buffer that holds the whole tiles (a weight
                            // padded to whole panels) may be read past the tail.
                            let inside = idx.len() == b.shape().len()
                                && idx.iter().zip(b.shape()).all(|(i, &n)| {
                                    let r = loop_ranges.interval(i);
                                    matches!((r.lo, r.hi), (Some(lo), Some(hi)) if lo >= 0 && hi < n as i64)
                                });
                            if !inside {
                                return Err(err("a whole tile would read a global buffer past the tail"));
                            }
                            continue;
                        }
                        past.push(b);
                    }
                }
            }
            let update_guards: &[Expr] = if guard_update { &guards } else { &[] };
            let init_guards: Vec<Expr> =
                update_guards.iter().map(|g| g.substitute(&|v| init_map.get(&v.id).cloned())).collect();
            let init_stmt = wrap_guards(Stmt::Store { buffer: tb, indices: ti, value: init_value }, &init_guards);
            let init_vars = init_h.iter().map(|h| h.0.clone()).collect();
            let init_nest = rebuild_chain(init_h, init_stmt);
            // update: R { T { update } }
            let ident = HashMap::new();
            let (ub2, ui2) = target(&ident);
            let update_stmt = wrap_guards(
                Stmt::Store { buffer: ub2, indices: ui2, value: retarget_value(&uv, &ident) },
                update_guards,
            );
            let reduce_vars = reduce_headers.iter().map(|h| h.0.clone()).collect();
            let update_vars = tiles.iter().map(|h| h.0.clone()).collect();
            let update_nest = rebuild_chain(reduce_headers, rebuild_chain(tiles.clone(), update_stmt));
            // write-back and epilogue
            let mut wb_parts = Vec::new();
            if let Some(c) = &cache_buf {
                wb_parts.push(Stmt::Store {
                    buffer: acc.clone(),
                    indices: acc_idx.clone(),
                    value: Expr::Load(c.clone(), tile_index(&HashMap::new())),
                });
            }
            wb_parts.extend(epilogue);
            let mut parts = vec![init_nest, update_nest];
            let mut wb_vars = Vec::new();
            if !wb_parts.is_empty() {
                let (wb_h, wb_map) = fresh("wb");
                wb_vars = wb_h.iter().map(|h| h.0.clone()).collect();
                let wb = subst_stmt(wrap_guards(Stmt::seq(wb_parts), &guards), &wb_map);
                parts.push(rebuild_chain(wb_h, wb));
            }
            let mut body = Stmt::seq(parts);
            if let Some(c) = &cache_buf {
                body = Stmt::Allocate { buffer: c.clone(), body: Box::new(body) };
            }
            *out = Some(ReductionTile {
                init_loops: init_vars,
                reduce_loops: reduce_vars,
                update_loops: update_vars,
                writeback_loops: wb_vars,
                cache: cache_buf.clone(),
            });
            Ok(loop_stmt(l.var, l.min, l.extent, l.kind, body))
        })?;
        self.read_past_tail.extend(past_tail);
        tile.ok_or_else(|| self.err("decompose_reduction: nothing decomposed"))
    }
}

/// [`Schedule::distribute_thread_loop`] below thread loop `t` (its header):
/// `expanded` holds the kernel-local buffers widened so far, `copies` the new loops.
fn distribute(
    t: &For,
    s: Stmt,
    to: &Var,
    expanded: &mut Vec<(Buffer, Buffer)>,
    copies: &mut Vec<Var>,
) -> std::result::Result<Stmt, String> {
    if find_loop(&s, to).is_none() {
        // Off the path to `to`: this statement runs under its own copy of the thread loop.
        let v = Var::index(&format!("{}_{}", t.var.name, copies.len()));
        let mut map = HashMap::new();
        map.insert(t.var.id, Expr::var(&v));
        let mut body = subst_stmt(s, &map);
        for (narrow, wide) in expanded.iter() {
            body = retarget_buffer(body, narrow, wide, &|idx| {
                std::iter::once(Expr::var(&v)).chain(idx.iter().cloned()).collect()
            });
        }
        copies.push(v.clone());
        return Ok(loop_stmt(v, t.min.clone(), t.extent.clone(), t.kind, body));
    }
    match s {
        Stmt::Allocate { buffer, body } if buffer.scope() == Scope::Local => {
            let threads = t.extent.as_int().unwrap_or(1) as usize;
            let shape: Vec<usize> = std::iter::once(threads).chain(buffer.shape().iter().copied()).collect();
            let wide = Buffer::new(buffer.name(), buffer.elem(), shape, Scope::Local);
            expanded.push((buffer, wide.clone()));
            let body = distribute(t, *body, to, expanded, copies)?;
            Ok(Stmt::Allocate { buffer: wide, body: Box::new(body) })
        }
        Stmt::Seq(parts) => {
            let parts = parts
                .into_iter()
                .map(|p| distribute(t, p, to, expanded, copies))
                .collect::<std::result::Result<_, _>>()?;
            Ok(Stmt::seq(parts))
        }
        Stmt::For(l) => {
            if l.min.uses_var(&t.var) || l.extent.uses_var(&t.var) {
                return Err(format!("the range of `{}` depends on the thread loop", l.var.name));
            }
            let l = *l;
            let body = distribute(t, l.body, to, expanded, copies)?;
            Ok(loop_stmt(l.var, l.min, l.extent, l.kind, body))
        }
        _ => Err(format!("a guard, let or shared allocation lies on the way to `{}`", to.name)),
    }
}
