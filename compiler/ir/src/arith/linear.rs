//! Linear decomposition of an index expression in one variable.

use crate::tir::{BinOp, Expr, Var};

/// `e` as `c·v + rest` (`rest` free of `v`), when it is linear in `v` with
/// a constant coefficient `c` (0 where `e` does not read `v`).
pub fn linear(e: &Expr, v: &Var) -> Option<(i64, Expr)> {
    if !e.uses_var(v) {
        return Some((0, e.clone()));
    }
    match e {
        Expr::Var(w) if w == v => Some((1, Expr::int(0))),
        Expr::Bin(BinOp::Add, a, b) => {
            let ((ca, ra), (cb, rb)) = (linear(a, v)?, linear(b, v)?);
            Some((ca + cb, ra + rb))
        }
        Expr::Bin(BinOp::Sub, a, b) => {
            let ((ca, ra), (cb, rb)) = (linear(a, v)?, linear(b, v)?);
            Some((ca - cb, ra - rb))
        }
        Expr::Bin(BinOp::Mul, a, b) => match (a.as_int(), b.as_int()) {
            (Some(k), _) => linear(b, v).map(|(c, r)| (c * k, Expr::int(k) * r)),
            (_, Some(k)) => linear(a, v).map(|(c, r)| (c * k, r * Expr::int(k))),
            _ => None,
        },
        _ => None,
    }
}
