//! Default CPU schedules, applied to lowered kernels.
//!
//! For now: a kernel whose body is one loop nest gets its outermost loop
//! marked parallel (the codegen slices it into tasks) when there is enough
//! work to pay for the threads. Kernels of several stages stay serial, since
//! a task slice of one stage cannot feed the next without a barrier.

use crate::tir::{ForKind, PrimFunc, Stmt};

/// Below this many innermost iterations a kernel stays on one thread.
pub const MIN_PARALLEL_WORK: u64 = 16 * 1024;

fn work(s: &Stmt) -> u64 {
    match s {
        Stmt::For(l) => l.extent.as_int().unwrap_or(1).max(1) as u64 * work(&l.body),
        Stmt::Seq(v) => v.iter().map(work).sum(),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => work(body),
        Stmt::If { then_case, else_case, .. } => work(then_case).max(else_case.as_deref().map_or(0, work)),
        Stmt::Store { .. } | Stmt::Evaluate(_) => 1,
    }
}

/// Mark the outermost loop of a single-nest kernel parallel when it is worth it.
pub fn parallelize_outer(f: PrimFunc) -> PrimFunc {
    parallelize_outer_above(f, MIN_PARALLEL_WORK)
}

/// [`parallelize_outer`] with an explicit work threshold (tests use 0).
pub fn parallelize_outer_above(mut f: PrimFunc, min_work: u64) -> PrimFunc {
    let total = work(&f.body);
    if total < min_work {
        return f;
    }
    if let Stmt::For(l) = &mut f.body {
        if l.extent.as_int().is_some_and(|e| e >= 2) {
            l.kind = ForKind::Parallel;
        }
    }
    f
}
