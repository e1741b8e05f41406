//! RemoveNoOp: drop statements that do nothing — empty loops and sequences,
//! conditions decided at compile time, allocations nobody uses.

use crate::tir::{Expr, PrimFunc, Stmt};

fn uses_buffer(s: &Stmt, id: u32) -> bool {
    let mut used = false;
    fn in_expr(e: &Expr, id: u32, used: &mut bool) {
        if let Expr::Load(b, _) = e {
            *used |= b.id() == id;
        }
        e.for_each_child(|c| in_expr(c, id, used));
    }
    s.visit(&mut |s| match s {
        Stmt::Store { buffer, indices, value } => {
            used |= buffer.id() == id;
            indices.iter().for_each(|i| in_expr(i, id, &mut used));
            in_expr(value, id, &mut used);
        }
        Stmt::If { cond: e, .. } | Stmt::Let { value: e, .. } | Stmt::Evaluate(e) => in_expr(e, id, &mut used),
        Stmt::For(l) => {
            in_expr(&l.min, id, &mut used);
            in_expr(&l.extent, id, &mut used);
        }
        _ => {}
    });
    used
}

/// Remove the no-ops of `s`.
pub fn remove_noop_stmt(s: Stmt) -> Stmt {
    s.map_post(&mut |s| match s {
        Stmt::For(l) if l.body.is_nop() || l.extent.as_int() == Some(0) => Stmt::nop(),
        Stmt::Seq(v) => Stmt::seq(v),
        Stmt::If { cond, then_case, else_case } => match cond.as_int() {
            Some(0) => else_case.map_or_else(Stmt::nop, |e| *e),
            Some(_) => *then_case,
            None if then_case.is_nop() && else_case.as_ref().is_none_or(|e| e.is_nop()) => Stmt::nop(),
            None => Stmt::If { cond, then_case, else_case },
        },
        Stmt::Allocate { buffer, body } if !uses_buffer(&body, buffer.id()) => *body,
        Stmt::Allocate { body, .. } if body.is_nop() => Stmt::nop(),
        Stmt::Let { body, .. } if body.is_nop() => Stmt::nop(),
        s => s,
    })
}

/// [`remove_noop_stmt`] over a kernel.
pub fn remove_noops(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = remove_noop_stmt(body);
    f
}
