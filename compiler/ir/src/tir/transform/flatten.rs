//! FlattenBuffer: multi-dimensional loads and stores become one row-major
//! index, which is what every backend addresses.

use crate::tir::{Buffer, Expr, PrimFunc, Stmt};

fn flat_index(buffer: &Buffer, indices: Vec<Expr>) -> Vec<Expr> {
    match indices.len() {
        // A 0-d buffer holds one element at offset 0.
        0 => return vec![Expr::int(0)],
        1 => return indices,
        _ => {}
    }
    let shape = buffer.shape();
    let mut acc: Option<Expr> = None;
    for (k, idx) in indices.into_iter().enumerate() {
        let dim = shape.get(k).copied().unwrap_or(1) as i64;
        acc = Some(match acc {
            None => idx,
            Some(a) => a * Expr::int(dim) + idx,
        });
    }
    vec![acc.unwrap_or_else(|| Expr::int(0))]
}

fn flatten_expr(e: Expr) -> Expr {
    match e {
        Expr::Load(b, idx) => {
            let idx = idx.into_iter().map(flatten_expr).collect();
            let flat = flat_index(&b, idx);
            Expr::Load(b, flat)
        }
        other => other.map_children(|c| flatten_expr(c.clone())),
    }
}

/// Flatten every buffer access of `f`.
pub fn flatten_buffers(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    let body = body.map_exprs(&mut flatten_expr);
    f.body = body.map_post(&mut |s| match s {
        Stmt::Store { buffer, indices, value } => {
            let indices = flat_index(&buffer, indices);
            Stmt::Store { buffer, indices, value }
        }
        s => s,
    });
    f
}
