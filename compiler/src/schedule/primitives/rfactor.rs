//! `rfactor_lanes`: a reduction along a loop becomes `lanes` partial
//! reductions, one per vector lane, combined after the loop (TVM's `rfactor`
//! with the factored axis vectorized). A row's maximum or sum over
//! contiguous elements then runs on whole vectors instead of one element per
//! step behind the previous one's latency.

use kiln_ir::arith::{simplify, Bounds};

use super::{Result, Schedule};
use crate::tir::{BinOp, Buffer, Combiner, Expr, ForKind, Scope, Stmt, Var};

/// The combiner of an update `acc[i] = acc[i] ⊕ value` and the other operand.
fn split_update(acc: &Buffer, idx: &[Expr], value: &Expr) -> Option<(Combiner, Expr)> {
    let Expr::Bin(op, a, b) = value else { return None };
    let combiner = match op {
        BinOp::Add => Combiner::Sum,
        BinOp::Max => Combiner::Max,
        BinOp::Min => Combiner::Min,
        _ => return None,
    };
    let is_acc = |e: &Expr| matches!(e, Expr::Load(buf, i) if buf == acc && i == idx);
    match (is_acc(a), is_acc(b)) {
        (true, false) => Some((combiner, (**b).clone())),
        (false, true) => Some((combiner, (**a).clone())),
        _ => None,
    }
}

/// Whether `e` reads buffer `b` anywhere.
fn reads(e: &Expr, b: &Buffer) -> bool {
    let mut found = matches!(e, Expr::Load(buf, _) if buf == b);
    e.for_each_child(|c| found |= reads(c, b));
    found
}

impl Schedule {
    /// `for k in min..min+n { acc[i] = acc[i] ⊕ f(k) }` (⊕ a sum, maximum or
    /// minimum; `i` independent of `k`) →
    ///
    /// ```text
    /// part[l] = identity                              (l vectorized, 0..lanes)
    /// for k_o { part[l] = part[l] ⊕ f(min + k_o·lanes + l) }   (l vectorized)
    /// for l { acc[i] = acc[i] ⊕ part[l] }
    /// for k_t in the last n % lanes { acc[i] = acc[i] ⊕ f(k_t) }
    /// ```
    ///
    /// `part` is kernel-local (a register after vectorizing). The order of a
    /// floating-point sum changes (reassociation); a maximum or minimum is
    /// exact. Errors unless the loop has at least one whole vector of steps.
    pub fn rfactor_lanes(&mut self, k: &Var, lanes: usize) -> Result<()> {
        let kernel = self.func.name.clone();
        self.rewrite_loop(k, |l| {
            let err = |m: &str| super::ScheduleError { kernel: kernel.clone(), message: format!("rfactor: {m}") };
            let (Some(min), Some(n)) = (l.min.as_int(), l.extent.as_int()) else {
                return Err(err("the loop range is not constant"));
            };
            if l.kind != ForKind::Serial || lanes < 2 || n < lanes as i64 {
                return Err(err("not a serial loop of at least one vector of steps"));
            }
            let Stmt::Store { buffer: acc, indices: idx, value } = &l.body else {
                return Err(err("the loop body is not one update"));
            };
            let Some((combiner, source)) = split_update(acc, idx, value) else {
                return Err(err("the update is not `acc = acc ⊕ value` with ⊕ a sum, maximum or minimum"));
            };
            if idx.iter().any(|i| i.uses_var(&l.var)) || reads(&source, acc) {
                return Err(err("the accumulator varies along the loop or is read by the value"));
            }
            let elem = acc.elem();
            let part = Buffer::new(&format!("{}_rf", acc.name()), elem, vec![lanes], Scope::Local);
            let lane = |name: &str| Var::index(&format!("{}_{name}", l.var.name));
            let at = |e: Expr| source.substitute(&|v| (v.id == l.var.id).then(|| e.clone()));
            let whole = n / lanes as i64;
            let (l_init, k_o, l_upd, l_fold, k_t) = (lane("l0"), lane("o"), lane("l"), lane("l1"), lane("t"));
            let init = Stmt::for_loop(
                l_init.clone(),
                lanes,
                ForKind::Vectorized,
                Stmt::Store { buffer: part.clone(), indices: vec![Expr::var(&l_init)], value: combiner.identity(elem) },
            );
            let step = Expr::int(min) + Expr::var(&k_o) * Expr::int(lanes as i64) + Expr::var(&l_upd);
            let part_at = |v: &Var| Expr::Load(part.clone(), vec![Expr::var(v)]);
            let update = Stmt::for_loop(
                k_o.clone(),
                whole as usize,
                ForKind::Serial,
                Stmt::for_loop(
                    l_upd.clone(),
                    lanes,
                    ForKind::Vectorized,
                    Stmt::Store {
                        buffer: part.clone(),
                        indices: vec![Expr::var(&l_upd)],
                        value: combiner.combine(part_at(&l_upd), at(simplify(&step, &Bounds::new()))),
                    },
                ),
            );
            let acc_now = Expr::Load(acc.clone(), idx.clone());
            let fold = Stmt::for_loop(
                l_fold.clone(),
                lanes,
                ForKind::Serial,
                Stmt::Store {
                    buffer: acc.clone(),
                    indices: idx.clone(),
                    value: combiner.combine(acc_now.clone(), part_at(&l_fold)),
                },
            );
            let tail_start = min + whole * lanes as i64;
            let tail = (tail_start < min + n).then(|| {
                let mut t = Stmt::for_loop(
                    k_t.clone(),
                    (min + n - tail_start) as usize,
                    ForKind::Serial,
                    Stmt::Store {
                        buffer: acc.clone(),
                        indices: idx.clone(),
                        value: combiner.combine(acc_now.clone(), at(Expr::var(&k_t))),
                    },
                );
                if let Stmt::For(f) = &mut t {
                    f.min = Expr::int(tail_start);
                }
                t
            });
            let mut body = vec![init, update, fold];
            body.extend(tail);
            Ok(Stmt::Allocate { buffer: part.clone(), body: Box::new(Stmt::seq(body)) })
        })
    }
}
