//! Software prefetch of a streamed operand.
//!
//! A Winograd product reads each transformed weight once per call and uses
//! it for one vector of tiles: 4 bytes per FMA, 8 bytes a cycle at the FMA
//! rate. Those weights (2–9 MB a layer) stream from L3 or memory, and the
//! hardware prefetcher alone kept ResNet-18's 14 × 14 products at 60–90
//! GFLOP/s on Sapphire Rapids. Asking for the line 2 KiB ahead once per
//! reduction step brought a C model of the same loop from 113–156 to
//! 178–190 GFLOP/s (six 256-channel layers, 56 MB of weights).

use kiln_ir::arith::linear;

use crate::tir::{Buffer, Expr, For, ForKind, Intrinsic, PrimFunc, Stmt, TirType, Var};

/// How far ahead of the reduction step a prefetch reads.
pub(super) const PREFETCH_AHEAD_BYTES: i64 = 2048;

/// Inserts into the innermost serial loop that walks `buffer` (its index
/// linear in the loop's variable, in one dimension) a `kiln.prefetch` of the
/// element `ahead` bytes past the step's first one: the loop's first read
/// with the variable advanced by whole steps and the loops inside it at
/// their first iteration. Past the buffer's end the backends clamp the
/// address (see [`Intrinsic::Prefetch`]). The kernel's values are unchanged.
pub(super) fn prefetch_stream(mut f: PrimFunc, buffer: &Buffer, ahead: i64) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(mut l) if l.kind == ForKind::Serial && !has_prefetch(&l.body) => {
            if let Some(p) = prefetch_for(&l, buffer, ahead) {
                let body = std::mem::replace(&mut l.body, Stmt::nop());
                l.body = Stmt::seq(vec![p, body]);
            }
            Stmt::For(l)
        }
        s => s,
    });
    f
}

fn has_prefetch(s: &Stmt) -> bool {
    super::contains(s, |s| matches!(s, Stmt::Evaluate(Expr::Call(Intrinsic::Prefetch, ..))))
}

/// The prefetch statement for loop `l`, if its body reads `buffer` along
/// `l`'s variable.
fn prefetch_for(l: &For, buffer: &Buffer, ahead: i64) -> Option<Stmt> {
    let mut first = None;
    let mut inner: Vec<(Var, Expr)> = Vec::new();
    l.body.visit(&mut |s| match s {
        Stmt::For(i) => inner.push((i.var.clone(), i.min.clone())),
        Stmt::Store { value, indices, .. } if first.is_none() => {
            let mut loads = Vec::new();
            indices.iter().chain(std::iter::once(value)).for_each(|e| super::collect_loads(e, &mut loads));
            first = loads.into_iter().find(|(b, idx)| b.id() == buffer.id() && idx.iter().any(|i| i.uses_var(&l.var)));
        }
        _ => {}
    });
    let (_, idx) = first?;
    // The one dimension that moves with the loop, with a positive coefficient.
    let moving: Vec<usize> = (0..idx.len()).filter(|&d| idx[d].uses_var(&l.var)).collect();
    let [d] = moving[..] else { return None };
    let (coefficient, _) = linear(&idx[d], &l.var).filter(|(c, _)| *c > 0)?;
    let row: usize = buffer.shape().get(d + 1..)?.iter().product();
    let step_bytes = coefficient * (row * buffer.elem().size_bytes()) as i64;
    if step_bytes >= ahead {
        // A step already spans the distance: the stream is not one line a step.
        return None;
    }
    let steps = (ahead + step_bytes - 1) / step_bytes;
    let at_first = |e: &Expr| e.substitute(&|v: &Var| inner.iter().find(|(w, _)| w == v).map(|(_, min)| min.clone()));
    let mut target: Vec<Expr> = idx.iter().map(at_first).collect();
    target[d] = target[d].clone() + Expr::int(steps);
    let load = Expr::Load(buffer.clone(), target);
    Some(Stmt::Evaluate(Expr::call(Intrinsic::Prefetch, vec![load], TirType::scalar(crate::DataType::I32))))
}

/// The bytes of the cache line each prefetch asks for.
const LINE_BYTES: i64 = 64;

/// Inserts after each loop that copies a run of `source` into a
/// kernel-local buffer inside the loop over `row` — a padded input row —
/// a loop of `kiln.prefetch`es of the lines that same copy reads `ahead`
/// iterations of `row` later. The kernel's values are unchanged.
pub(super) fn prefetch_rows_ahead(mut f: PrimFunc, row: &Var, source: &Buffer, ahead: i64) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(l) if l.kind == ForKind::Serial && l.var != *row => match copy_ahead(&l, row, source, ahead) {
            Some(p) => Stmt::seq(vec![Stmt::For(l), p]),
            None => Stmt::For(l),
        },
        s => s,
    });
    f
}

/// The prefetch loop for copy loop `l`: its store into a local buffer reads
/// `source` along a row with `l`'s variable, the row chosen by `row`.
fn copy_ahead(l: &For, row: &Var, source: &Buffer, ahead: i64) -> Option<Stmt> {
    let Stmt::Store { buffer, value, .. } = &l.body else { return None };
    if buffer.scope() != crate::tir::Scope::Local {
        return None;
    }
    let mut loads = Vec::new();
    super::collect_loads(value, &mut loads);
    let (_, idx) =
        loads.into_iter().find(|(b, idx)| b.id() == source.id() && idx.iter().any(|i| i.uses_var(&l.var)))?;
    // Along a row of the source (its last axis; clamped into the image at
    // the padding's columns, as the copy reads it), in a row that moves with `row`.
    let (last, rest) = idx.split_last()?;
    if !idx.iter().any(|i| i.uses_var(row)) || !last.uses_var(&l.var) || rest.iter().any(|i| i.uses_var(&l.var)) {
        return None;
    }
    let (min, extent) = (l.min.as_int()?, l.extent.as_int()?);
    let per_line = (LINE_BYTES / source.elem().size_bytes() as i64).max(1);
    let line = Var::index(&format!("{}_line", l.var.name));
    let target: Vec<Expr> = idx
        .iter()
        .map(|i| {
            i.substitute(&|v: &Var| {
                if v == &l.var {
                    Some(Expr::int(min) + Expr::var(&line) * Expr::int(per_line))
                } else if v == row {
                    Some(Expr::var(row) + Expr::int(ahead))
                } else {
                    None
                }
            })
        })
        .collect();
    let fetch = Stmt::Evaluate(Expr::call(
        Intrinsic::Prefetch,
        vec![Expr::Load(source.clone(), target)],
        TirType::scalar(crate::DataType::I32),
    ));
    // Unrolled: each line's address folds to the row's base and a constant
    // (left a loop, LLVM vectorized the addresses' clamps and extracted them).
    Some(Stmt::For(Box::new(For {
        var: line,
        min: Expr::int(0),
        extent: Expr::int((extent + per_line - 1) / per_line),
        kind: ForKind::Unrolled,
        body: fetch,
    })))
}

/// Inserts into each innermost serial loop inside the kernel's parallel loop
/// that reads `buffer` along its own variable a `kiln.prefetch` per distinct
/// read of `buffer` there that moves with the parallel loop: the element
/// that read asks for one parallel iteration later (vector lanes at the
/// first, loops unrolled inside kept: one prefetch per unrolled read). A
/// packed convolution's parallel loop walks blocks of output channels, each
/// reading its block's weights once per pass over output rows: from L1
/// after the first pass, the first streaming them from L3 or memory at a
/// fraction of the FMA rate; the next block's lines now arrive during this
/// block's passes. The kernel's values are unchanged.
pub(super) fn prefetch_next_parallel_iteration(mut f: PrimFunc, buffer: &Buffer) -> PrimFunc {
    let Some(parallel) = parallel_loop(&f).map(|l| l.var.clone()) else { return f };
    let stepping = |s: &Stmt| matches!(s, Stmt::For(l) if matches!(l.kind, ForKind::Serial | ForKind::Parallel));
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(mut l)
            if l.kind == ForKind::Serial && !super::contains(&l.body, stepping) && !has_prefetch(&l.body) =>
        {
            let fetches = next_iteration_reads(&l, buffer, &parallel);
            if !fetches.is_empty() {
                let body = std::mem::replace(&mut l.body, Stmt::nop());
                l.body = Stmt::seq(fetches.into_iter().chain(std::iter::once(body)).collect());
            }
            Stmt::For(l)
        }
        s => s,
    });
    f
}

/// The kernel's (first) parallel loop.
pub(super) fn parallel_loop(f: &PrimFunc) -> Option<&For> {
    fn find(s: &Stmt) -> Option<&For> {
        match s {
            Stmt::For(l) if l.kind == ForKind::Parallel => Some(l),
            Stmt::For(l) => find(&l.body),
            Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => find(body),
            Stmt::If { then_case, else_case, .. } => find(then_case).or_else(|| else_case.as_deref().and_then(find)),
            Stmt::Seq(v) => v.iter().find_map(find),
            _ => None,
        }
    }
    find(&f.body)
}

/// The prefetches of [`prefetch_next_parallel_iteration`] for loop `l`.
fn next_iteration_reads(l: &For, buffer: &Buffer, parallel: &Var) -> Vec<Stmt> {
    let mut loads = Vec::new();
    let mut inner: Vec<For> = Vec::new();
    l.body.visit(&mut |s| match s {
        Stmt::For(i) => inner.push(For { body: Stmt::nop(), ..(**i).clone() }),
        Stmt::Store { value, indices, .. } => {
            indices.iter().chain(std::iter::once(value)).for_each(|e| super::collect_loads(e, &mut loads))
        }
        _ => {}
    });
    let moves = |idx: &[Expr]| idx.iter().any(|i| i.uses_var(&l.var)) && idx.iter().any(|i| i.uses_var(parallel));
    let mut seen = std::collections::HashSet::new();
    let mut fetches = Vec::new();
    for (_, idx) in loads.into_iter().filter(|(b, idx)| b.id() == buffer.id() && moves(idx)) {
        let at = |v: &Var| {
            if v == parallel {
                return Some(Expr::var(parallel) + Expr::int(1));
            }
            // Vector lanes at the first.
            inner.iter().find(|i| i.var == *v && i.kind == ForKind::Vectorized).map(|i| i.min.clone())
        };
        let target: Vec<Expr> = idx.iter().map(|i| first_lane(i).substitute(&at)).collect();
        if !seen.insert(format!("{target:?}")) {
            continue;
        }
        // One prefetch per iteration of the unrolled loops the read moves
        // with (each its own variable: a loop binds one).
        let unrolled: Vec<(&For, Var)> = inner
            .iter()
            .filter(|i| i.kind == ForKind::Unrolled && target.iter().any(|t| t.uses_var(&i.var)))
            .map(|i| (i, Var::index(&format!("{}_ahead", i.var.name))))
            .collect();
        let renamed = |v: &Var| unrolled.iter().find(|(i, _)| i.var == *v).map(|(_, fresh)| Expr::var(fresh));
        let target = target.iter().map(|t| t.substitute(&renamed)).collect();
        // Past the buffer in the last iteration, unclamped: LLVM vectorized a
        // reduction step's clamps (`vpminsq`, `vpextrq`), PP-LCNet's 7 × 7
        // 1 × 1 convolutions 1.11× slower.
        let mut fetch = Stmt::Evaluate(Expr::call(
            Intrinsic::Prefetch,
            vec![Expr::Load(buffer.clone(), target), Expr::int(1)],
            TirType::scalar(crate::DataType::I32),
        ));
        for (i, fresh) in unrolled.into_iter().rev() {
            fetch = Stmt::For(Box::new(For { var: fresh, body: fetch, ..i.clone() }));
        }
        fetches.push(fetch);
    }
    fetches
}

/// A vector index's first lane (a scalar index as it is).
fn first_lane(e: &Expr) -> Expr {
    match e {
        Expr::Ramp { base, .. } => first_lane(base),
        Expr::Broadcast(x, _) => first_lane(x),
        _ => e.map_children(first_lane),
    }
}
