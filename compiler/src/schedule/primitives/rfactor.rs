//! `rfactor_lanes`: a reduction along a loop becomes `lanes` partial
//! reductions, one per vector lane, combined after the loop (TVM's `rfactor`
//! with the factored axis vectorized). A row's maximum or sum over
//! contiguous elements then runs on whole vectors instead of one element per
//! step behind the previous one's latency.

use kiln_ir::arith::{simplify, Bounds};

use super::{fresh_loop_vars, Result, Schedule};
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
            if idx.iter().any(|i| i.uses_var(&l.var)) || source.reads(acc) {
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
            let fold = if lanes.is_power_of_two() {
                // Halves combined in place, log2(lanes) vector steps (a
                // shuffle and an operation each), then the first lane: a
                // serial fold was a chain of `lanes` dependent scalar steps
                // per row (a softmax row's maximum and sum, ~100 cycles).
                let mut steps = Vec::new();
                let mut half = lanes / 2;
                let span = |from: i64, n: usize| match n {
                    1 => Expr::int(from),
                    n => {
                        Expr::Ramp { base: Box::new(Expr::int(from)), stride: Box::new(Expr::int(1)), lanes: n as u16 }
                    }
                };
                while half >= 1 {
                    let (lower, upper) = (span(0, half), span(half as i64, half));
                    let value = combiner
                        .combine(Expr::Load(part.clone(), vec![lower.clone()]), Expr::Load(part.clone(), vec![upper]));
                    steps.push(Stmt::Store { buffer: part.clone(), indices: vec![lower], value });
                    half /= 2;
                }
                steps.push(Stmt::Store {
                    buffer: acc.clone(),
                    indices: idx.clone(),
                    value: combiner.combine(acc_now.clone(), Expr::Load(part.clone(), vec![Expr::int(0)])),
                });
                Stmt::seq(steps)
            } else {
                Stmt::for_loop(
                    l_fold.clone(),
                    lanes,
                    ForKind::Serial,
                    Stmt::Store {
                        buffer: acc.clone(),
                        indices: idx.clone(),
                        value: combiner.combine(acc_now.clone(), part_at(&l_fold)),
                    },
                )
            };
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

/// The accumulator of every update in `body`, where `body` is loops around
/// updates `acc[i] = acc[i] + value` of one kernel-local `acc`, `i`
/// independent of `k` and `value` not reading `acc`; None otherwise.
fn summed_accumulator(body: &Stmt, k: &Var) -> Option<Buffer> {
    let mut acc: Option<Buffer> = None;
    let mut ok = true;
    body.visit(&mut |s| match s {
        Stmt::For(_) | Stmt::Seq(_) => {}
        Stmt::Store { buffer, indices, value } => {
            let sum = matches!(split_update(buffer, indices, value), Some((Combiner::Sum, ref v)) if !v.reads(buffer));
            let same = acc.as_ref().is_none_or(|a| a == buffer);
            ok &= sum && same && buffer.scope() == Scope::Local && indices.iter().all(|i| !i.uses_var(k));
            acc = Some(buffer.clone());
        }
        _ => ok = false,
    });
    acc.filter(|_| ok)
}

impl Schedule {
    /// A sum `for k { loops { acc[i] = acc[i] + f(k) } }` over a register
    /// tile as `factor` interleaved partial tiles, each accumulating every
    /// `factor`-th step (their loops unrolled), added into `acc` after the
    /// loop; the last `n % factor` steps accumulate into `acc` directly.
    /// A product with one row of few column vectors (a classifier's 128 →
    /// 10) then keeps `factor` FMA chains in flight instead of waiting on one
    /// (TVM's `rfactor` with the factored axis unrolled). The sum's order
    /// changes (reassociation). Errors unless the loop is serial, has at
    /// least `2 × factor` steps and holds only such updates of one
    /// kernel-local accumulator.
    pub fn split_accumulation(&mut self, k: &Var, factor: usize) -> Result<()> {
        let kernel = self.func.name.clone();
        self.rewrite_loop(k, |l| {
            let err =
                |m: &str| super::ScheduleError { kernel: kernel.clone(), message: format!("split accumulation: {m}") };
            let (Some(min), Some(n)) = (l.min.as_int(), l.extent.as_int()) else {
                return Err(err("the loop range is not constant"));
            };
            if l.kind != ForKind::Serial || factor < 2 || n < 2 * factor as i64 {
                return Err(err("not a serial loop of at least two steps per partial tile"));
            }
            let Some(acc) = summed_accumulator(&l.body, &l.var) else {
                return Err(err("the loop body is not sums into one kernel-local accumulator"));
            };
            let mut shape = vec![factor];
            shape.extend(acc.shape().iter().copied());
            let part = Buffer::new(&format!("{}_split", acc.name()), acc.elem(), shape, Scope::Local);
            // `body` with each access of `acc` made one to `part[which]`.
            let onto_part = |body: Stmt, which: Expr| {
                let retarget = |e: Expr| retarget_loads(&e, &acc, &part, &which);
                body.map_post(&mut |s| match s {
                    Stmt::Store { buffer, indices, value } if buffer == acc => {
                        let mut at = vec![which.clone()];
                        at.extend(indices.iter().map(|i| retarget(i.clone())));
                        Stmt::Store { buffer: part.clone(), indices: at, value: retarget(value) }
                    }
                    s => s,
                })
            };
            let lane = |name: &str| Var::index(&format!("{}_{name}", l.var.name));
            let (k_o, kk, k_i, k_t) = (lane("so"), lane("s"), lane("si"), lane("st"));
            let at = |step: Expr, suffix: &str| {
                let body =
                    l.body.clone().map_exprs(&mut |e| e.substitute(&|v| (v.id == l.var.id).then(|| step.clone())));
                fresh_loop_vars(body, suffix)
            };
            // Zero every partial tile: the update's loops, each store a zero.
            let zero = acc.elem();
            let init = Stmt::for_loop(
                k_i.clone(),
                factor,
                ForKind::Unrolled,
                onto_part(fresh_loop_vars(l.body.clone(), "si"), Expr::var(&k_i)).map_post(&mut |s| match s {
                    Stmt::Store { buffer, indices, .. } if buffer == part => {
                        Stmt::Store { buffer, indices, value: Combiner::Sum.identity(zero) }
                    }
                    s => s,
                }),
            );
            let whole = n / factor as i64;
            let step = Expr::int(min) + Expr::var(&k_o) * Expr::int(factor as i64) + Expr::var(&kk);
            let update = Stmt::for_loop(
                k_o.clone(),
                whole as usize,
                ForKind::Serial,
                Stmt::for_loop(
                    kk.clone(),
                    factor,
                    ForKind::Unrolled,
                    onto_part(at(simplify(&step, &Bounds::new()), "s"), Expr::var(&kk)),
                ),
            );
            // acc[i] += part[0][i] + part[1][i] + …, over the update's loops.
            let fold = fresh_loop_vars(l.body.clone(), "sf").map_post(&mut |s| match s {
                Stmt::Store { buffer, indices, .. } if buffer == acc => {
                    let partial = |w: usize| {
                        let mut at = vec![Expr::int(w as i64)];
                        at.extend(indices.iter().cloned());
                        Expr::Load(part.clone(), at)
                    };
                    let total = (1..factor).fold(partial(0), |t, w| t + partial(w));
                    let value = Expr::Load(acc.clone(), indices.clone()) + total;
                    Stmt::Store { buffer, indices, value }
                }
                s => s,
            });
            let tail_start = min + whole * factor as i64;
            let tail = (tail_start < min + n).then(|| {
                Stmt::for_loop(
                    k_t.clone(),
                    (min + n - tail_start) as usize,
                    ForKind::Serial,
                    at(Expr::int(tail_start) + Expr::var(&k_t), "st"),
                )
            });
            let mut body = vec![init, update, fold];
            body.extend(tail);
            Ok(Stmt::Allocate { buffer: part.clone(), body: Box::new(Stmt::seq(body)) })
        })
    }
}

/// `e` with each load of `acc` a load of `part[which, …]`.
fn retarget_loads(e: &Expr, acc: &Buffer, part: &Buffer, which: &Expr) -> Expr {
    match e {
        Expr::Load(b, idx) if b == acc => {
            let mut at = vec![which.clone()];
            at.extend(idx.iter().map(|i| retarget_loads(i, acc, part, which)));
            Expr::Load(part.clone(), at)
        }
        _ => e.map_children(|c| retarget_loads(c, acc, part, which)),
    }
}
