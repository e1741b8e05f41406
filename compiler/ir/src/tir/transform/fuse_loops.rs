//! FuseSiblingLoops: `for v in 0..n { A }; for w in 0..n { B }` → `for v in 0..n { A; B[w := v] }`
//! when iteration `v` of `B` only touches what iteration `v` of `A` touched.
//!
//! A fused kernel lowers to one loop nest per stage (say a conv2d, then its
//! epilogue in place over the same output). Fusing the stages' common outer
//! loops gives one nest — which the default schedule can then parallelize,
//! and which keeps each output row in cache between the stages. Legality: at
//! loop depth `d`, every access to a buffer that either loop writes and both
//! use must index dimension `d` with that loop's own variable.

use std::collections::HashSet;

use crate::tir::{Expr, PrimFunc, Stmt, Var};

/// Buffers stored to in `s`.
fn written(s: &Stmt) -> HashSet<u32> {
    let mut w = HashSet::new();
    s.visit(&mut |s| {
        if let Stmt::Store { buffer, .. } = s {
            w.insert(buffer.id());
        }
    });
    w
}

/// Every (buffer id, indices) loaded or stored in `s`.
fn accesses(s: &Stmt) -> Vec<(u32, Vec<Expr>)> {
    fn in_expr(e: &Expr, out: &mut Vec<(u32, Vec<Expr>)>) {
        if let Expr::Load(b, idx) = e {
            out.push((b.id(), idx.clone()));
        }
        e.for_each_child(|c| in_expr(c, out));
    }
    let mut out = Vec::new();
    s.visit(&mut |s| match s {
        Stmt::Store { buffer, indices, value } => {
            out.push((buffer.id(), indices.clone()));
            indices.iter().for_each(|i| in_expr(i, &mut out));
            in_expr(value, &mut out);
        }
        Stmt::For(l) => {
            in_expr(&l.min, &mut out);
            in_expr(&l.extent, &mut out);
        }
        Stmt::If { cond, .. } => in_expr(cond, &mut out),
        Stmt::Let { value, .. } => in_expr(value, &mut out),
        Stmt::Evaluate(e) => in_expr(e, &mut out),
        _ => {}
    });
    out
}

fn fusable(a: &crate::tir::For, b: &crate::tir::For, depth: usize) -> bool {
    if a.kind != b.kind
        || a.min != b.min
        || a.extent != b.extent
        || a.min.as_int().is_none()
        || a.extent.as_int().is_none()
    {
        return false;
    }
    let (wa, wb) = (written(&a.body), written(&b.body));
    let (xa, xb) = (accesses(&a.body), accesses(&b.body));
    let used_a: HashSet<u32> = xa.iter().map(|(id, _)| *id).collect();
    let used_b: HashSet<u32> = xb.iter().map(|(id, _)| *id).collect();
    let shared: HashSet<u32> = wa.union(&wb).copied().filter(|id| used_a.contains(id) && used_b.contains(id)).collect();
    // A one-iteration loop's variable is 0, which broadcasting may have written literally.
    let unit = a.extent.as_int() == Some(1) && a.min.as_int() == Some(0);
    let own = |xs: &[(u32, Vec<Expr>)], v: &Var| {
        xs.iter().filter(|(id, _)| shared.contains(id)).all(|(_, idx)| match idx.get(depth) {
            Some(Expr::Var(w)) => w == v,
            Some(Expr::Int(0, _)) => unit,
            _ => false,
        })
    };
    own(&xa, &a.var) && own(&xb, &b.var)
}

/// Fuse adjacent fusable loops in `s`, whose loops sit at nest depth `depth`.
fn fuse(s: Stmt, depth: usize) -> Stmt {
    match s {
        Stmt::Seq(items) => {
            let mut out: Vec<Stmt> = Vec::new();
            for item in items {
                let item = fuse(item, depth);
                if let (Some(Stmt::For(prev)), Stmt::For(next)) = (out.last_mut(), &item) {
                    if fusable(prev, next, depth) {
                        let (v, w) = (prev.var.clone(), next.var.clone());
                        let renamed =
                            next.body.clone().map_exprs(&mut |e| e.substitute(&|x| (x == &w).then(|| Expr::var(&v))));
                        let body = std::mem::replace(&mut prev.body, Stmt::nop());
                        prev.body = fuse(Stmt::seq(vec![body, renamed]), depth + 1);
                        continue;
                    }
                }
                out.push(item);
            }
            Stmt::seq(out)
        }
        Stmt::For(mut l) => {
            let body = std::mem::replace(&mut l.body, Stmt::nop());
            l.body = fuse(body, depth + 1);
            Stmt::For(l)
        }
        Stmt::Allocate { buffer, body } => Stmt::Allocate { buffer, body: Box::new(fuse(*body, depth)) },
        other => other,
    }
}

/// Fuse the sibling loop nests of `f` where legal. Run before flattening buffers.
pub fn fuse_sibling_loops(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = fuse(body, 0);
    f
}
