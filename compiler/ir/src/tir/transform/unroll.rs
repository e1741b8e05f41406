//! UnrollLoop: a `T.unroll` loop of constant extent becomes its body repeated
//! with the variable replaced by each value (then simplified), so that the
//! register tiles of the schedules become straight-line code.

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

/// Unroll every `T.unroll` loop of `f`, innermost first.
pub fn unroll_loops(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(l) if l.kind == ForKind::Unrolled => unroll(*l),
        s => s,
    });
    f
}
