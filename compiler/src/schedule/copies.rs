//! Copies into kernel-local buffers (a convolution's padded image, a
//! matrix product's panel of B), vectorized along their innermost loop: at
//! schedule time where the copy already reads contiguously, and after
//! `tir.LoopPartition` where a strided copy's partitioned interior does away
//! with the clamped index its padding columns needed.

use super::Schedule;
use super::{collect_loads, contiguous, materialized, reads_contiguously, steps_by, vectorize_in_vectors};
use crate::target::VectorUnit;
use crate::tir::{Buffer, Expr, ForKind, PrimFunc, Scope, Stmt, Var};

/// The copies a tiled strategy makes into kernel-local buffers (a matrix
/// product's panel of B, a pointwise convolution's transposed image),
/// vectorized along their contiguous innermost loop. Left serial, LLVM
/// unrolls a short innermost loop completely and then vectorizes the loop
/// around it — with AVX-512 gathers and scatters, one element per lane:
/// YOLOv8n's Winograd products spent half their time copying 64 × 32 panels
/// that way (256 `vgatherqps` and 256 `vscatterqps` in one kernel).
pub(super) fn vectorize_local_copies(f: PrimFunc, unit: VectorUnit) -> PrimFunc {
    let lanes = unit.f32_lanes as i64;
    // Stages nobody placed go back inline after the strategy (`inline_unplaced`): not copies.
    let inlined_later = if f.attrs.contains_key("keep_materialized") { Vec::new() } else { materialized(&f) };
    let mut copies = Vec::new();
    f.body.visit(&mut |st| {
        let Stmt::For(l) = st else { return };
        // A copy may sit under a guard of the loops outside it (the region's
        // bounds), which moves out of the loop first.
        let (store, guarded) = match &l.body {
            Stmt::If { cond, then_case, else_case: None } if !cond.uses_var(&l.var) => (&**then_case, true),
            body => (body, false),
        };
        let Stmt::Store { buffer, indices, value } = store else { return };
        let n = l.extent.as_int().unwrap_or(0);
        if l.kind == ForKind::Serial
            && n >= 2
            && buffer.scope() == Scope::Local
            && !inlined_later.contains(buffer)
            && contiguous(indices, &l.var)
            && reads_contiguously(value, &l.var)
        {
            copies.push((l.var.clone(), n, guarded));
        }
    });
    let mut s = Schedule::new(f);
    for (v, n, guarded) in copies {
        if guarded {
            let hoisted = s.rewrite_loop(&v, |mut l| match std::mem::replace(&mut l.body, Stmt::nop()) {
                Stmt::If { cond, then_case, else_case: None } => {
                    l.body = *then_case;
                    Ok(Stmt::If { cond, then_case: Box::new(Stmt::For(Box::new(l))), else_case: None })
                }
                body => {
                    l.body = body;
                    Ok(Stmt::For(Box::new(l)))
                }
            });
            if hoisted.is_err() {
                continue;
            }
        }
        // A copy shorter than a vector is one (partial) vector.
        vectorize_in_vectors(&mut s, &v, n, lanes.min(n));
    }
    s.into_func()
}

/// The strided copies into kernel-local buffers that
/// [`vectorize_local_copies`] could not see at schedule time, vectorized once
/// `tir.LoopPartition` has split off their padding: a stride-2 1 × 1
/// convolution's padded image reads every second column of a row (through
/// a clamped index until the padding columns are split off), which LLVM's
/// loop vectorizer leaves scalar (ResNet-18's downsampling convolutions
/// 0.70–0.92× the time vectorized here). Contiguous copies stay with LLVM,
/// which vectorizes them itself and hoists the row's padding test out of
/// the loop (made explicit here, MobileNetV2's first depthwise convolution
/// ran 1.09× slower). A copy here reads each other buffer every second to
/// fourth element (the code generators load those as a span and a
/// shuffle) or contiguously, at least one load strided, and never the
/// buffer it writes, so that lanes are independent.
pub(crate) fn vectorize_partitioned_copies(f: PrimFunc, unit: VectorUnit) -> PrimFunc {
    let lanes = unit.f32_lanes as i64;
    let mut copies = Vec::new();
    f.body.visit(&mut |st| {
        let Stmt::For(l) = st else { return };
        let Stmt::Store { buffer, indices, value } = &l.body else { return };
        let n = l.extent.as_int().unwrap_or(0);
        if l.kind == ForKind::Serial
            && n >= 2
            && l.min.as_int().is_some()
            && buffer.scope() == Scope::Local
            && contiguous(indices, &l.var)
            && strided_copy(value, buffer, &l.var)
        {
            copies.push((l.var.clone(), n));
        }
    });
    if copies.is_empty() {
        return f;
    }
    let mut s = Schedule::new(f);
    for (v, n) in copies {
        vectorize_in_vectors(&mut s, &v, n, lanes.min(n));
    }
    s.into_func()
}

/// Whether `e` copies along `v`: every load of it that varies along `v`
/// reads elements 1 to 4 apart along its last index (the strides the code
/// generators load as one span), at least one of them 2 to 4 apart, none
/// reads `written` (so that lanes are independent), and no call is made (a
/// function of a copied value is not a copy).
fn strided_copy(e: &Expr, written: &Buffer, v: &Var) -> bool {
    let mut loads = Vec::new();
    collect_loads(e, &mut loads);
    let strides: Option<Vec<i64>> = loads
        .iter()
        .filter(|(_, idx)| idx.iter().any(|i| i.uses_var(v)))
        .map(|(_, idx)| (1..=4).find(|&stride| steps_by(idx, v, stride)))
        .collect();
    !e.calls_a_function()
        && loads.iter().all(|(b, _)| b != written)
        && strides.is_some_and(|s| s.iter().any(|&stride| stride > 1))
}
