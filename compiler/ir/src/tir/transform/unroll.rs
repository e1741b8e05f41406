//! UnrollLoop: a `T.unroll` loop of constant extent becomes its body repeated
//! with the variable replaced by each value (then simplified), so that the
//! register tiles of the schedules become straight-line code.
//!
//! [`UnrollConfig`] holds the fields of TVM's `tir.UnrollLoop` configuration
//! that kiln implements: `auto_max_step` also unrolls small serial loops the
//! schedule did not mark, and `explicit_unroll = false` leaves the marked loops
//! as loops (TVM's unroll pragma) for LLVM.

use crate::arith::{simplify_stmt, Bounds};
use crate::tir::{Expr, For, ForKind, PrimFunc, Stmt};

/// Loops longer than this stay loops (code size).
pub const MAX_UNROLL: i64 = 64;

fn unroll(l: For) -> Stmt {
    match (l.min.as_int(), l.extent.as_int()) {
        (Some(min), Some(ext)) if ext <= MAX_UNROLL => {
            let copies = (min..min + ext)
                .map(|i| {
                    let body =
                        l.body.clone().map_exprs(&mut |e| e.substitute(&|v| (*v == l.var).then(|| Expr::int(i))));
                    simplify_stmt(body, &mut Bounds::new())
                })
                .collect();
            Stmt::seq(copies)
        }
        _ => Stmt::For(Box::new(For { kind: ForKind::Serial, ..l })),
    }
}

/// How UnrollLoop unrolls (the `tir.UnrollLoop` configuration key's fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnrollConfig {
    /// Also unroll a serial loop of constant extent whose iterations, inner
    /// loops included, number at most this (0: only `T.unroll` loops).
    pub auto_max_step: i64,
    /// ...whose nest, counted from its innermost loop, is at most this deep...
    pub auto_max_depth: i64,
    /// ...and whose extent is at most this (0: no limit).
    pub auto_max_extent: i64,
    /// Unroll in the TIR; false only marks the loops `T.unroll` (TVM's pragma)
    /// and leaves them to the code generator.
    pub explicit_unroll: bool,
}

impl Default for UnrollConfig {
    /// TVM's defaults.
    fn default() -> Self {
        UnrollConfig { auto_max_step: 0, auto_max_depth: 8, auto_max_extent: 0, explicit_unroll: true }
    }
}

/// The statements `s` executes (TVM's step count: loops multiply, sequences
/// add) and the depth of its deepest loop nest.
fn nest(s: &Stmt) -> (i64, i64) {
    match s {
        Stmt::For(l) => {
            let (steps, depth) = nest(&l.body);
            let steps = l.extent.as_int().map_or(i64::MAX, |e| e.saturating_mul(steps));
            (steps, depth + 1)
        }
        Stmt::Seq(v) => v.iter().map(nest).fold((0, 0), |a, b| (a.0.saturating_add(b.0), a.1.max(b.1))),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => nest(body),
        Stmt::If { then_case, else_case, .. } => {
            let (a, b) = (nest(then_case), else_case.as_deref().map_or((0, 0), nest));
            (a.0.max(b.0), a.1.max(b.1))
        }
        Stmt::Store { .. } | Stmt::Evaluate(_) => (1, 0),
    }
}

/// Unroll every `T.unroll` loop of `f`, innermost first (TVM's defaults).
pub fn unroll_loops(f: PrimFunc) -> PrimFunc {
    unroll_loops_with(f, UnrollConfig::default())
}

/// Unroll as `config` says, innermost first.
pub fn unroll_loops_with(mut f: PrimFunc, config: UnrollConfig) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(mut l) => {
            if l.kind == ForKind::Serial && config.auto_max_step > 0 {
                let (inner_steps, inner_depth) = nest(&l.body);
                let extent = l.extent.as_int().unwrap_or(i64::MAX);
                if extent.saturating_mul(inner_steps) <= config.auto_max_step
                    && inner_depth < config.auto_max_depth
                    && (config.auto_max_extent == 0 || extent <= config.auto_max_extent)
                {
                    l.kind = ForKind::Unrolled;
                }
            }
            match l.kind {
                ForKind::Unrolled if config.explicit_unroll => unroll(*l),
                // Kept as a marked loop; the code generators emit a loop (LLVM may unroll it).
                _ => Stmt::For(l),
            }
        }
        s => s,
    });
    f
}
