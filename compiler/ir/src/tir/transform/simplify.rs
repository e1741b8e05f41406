//! Simplify: run the `arith` simplifier over a kernel.

use crate::arith::{simplify_stmt, Bounds};
use crate::tir::{PrimFunc, Stmt};

/// Simplify every expression of `f` using the ranges of its loops.
pub fn simplify_prim_func(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = simplify_stmt(body, &mut Bounds::new());
    f
}
