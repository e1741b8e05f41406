//! LoopPartition: an innermost loop whose body tests its variable against
//! constants (`0 ≤ w − 1 < 56`, a padded row) is split at those constants into
//! pieces where every such test has one answer, and each piece is simplified
//! under its own range — the tests fold away, clamped indices become plain
//! ones, and the middle piece of a padded row is a straight copy the
//! vectorizer handles (TVM's `tir.LoopPartition`, for constant bounds).

use crate::arith::{simplify, simplify_stmt, Bounds};
use crate::tir::{BinOp, CmpOp, Expr, For, ForKind, PrimFunc, Stmt, Var};

/// At most this many pieces per loop (code size).
const MAX_PIECES: usize = 5;

/// `e` as `c·v + rest`, when it is linear in `v`.
fn linear(e: &Expr, v: &Var) -> Option<(i64, Expr)> {
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

/// The values of `v` at which a comparison in `e` can change its answer.
fn cut_points(e: &Expr, v: &Var, out: &mut Vec<i64>) {
    if let Expr::Cmp(op, a, b) = e {
        // a − b = c·v + r with constant r: the test flips between v = ⌊−r/c⌋ and the next.
        if let Some((c, r)) = linear(&(a.as_ref().clone() - b.as_ref().clone()), v) {
            if let (Some(r), true) = (simplify(&r, &Bounds::new()).as_int(), c == 1 || c == -1) {
                let k = -r * c; // c·v + r ⋚ 0  ⇔  v ⋚ −r/c (c = ±1)
                match op {
                    CmpOp::Lt | CmpOp::Ge => out.push(k),
                    CmpOp::Le | CmpOp::Gt => out.push(k + 1),
                    CmpOp::Eq | CmpOp::Ne => out.extend([k, k + 1]),
                }
                if c == -1 {
                    // −v + r ⋚ 0 flips at the same v, seen from the other side.
                    let last = out.len() - 1;
                    if matches!(op, CmpOp::Lt | CmpOp::Ge) {
                        out[last] = k + 1;
                    } else if matches!(op, CmpOp::Le | CmpOp::Gt) {
                        out[last] = k;
                    }
                }
            }
        }
    }
    e.for_each_child(|c| cut_points(c, v, out));
}

fn partition(l: For) -> Stmt {
    let (Some(min), Some(ext)) = (l.min.as_int(), l.extent.as_int()) else { return Stmt::For(Box::new(l)) };
    let mut cuts = Vec::new();
    l.body.clone().map_exprs(&mut |e| {
        cut_points(&e, &l.var, &mut cuts);
        e
    });
    cuts.retain(|&c| c > min && c < min + ext);
    cuts.sort_unstable();
    cuts.dedup();
    if cuts.is_empty() || cuts.len() + 1 > MAX_PIECES {
        return Stmt::For(Box::new(l));
    }
    let mut bounds: Vec<i64> = vec![min];
    bounds.extend(&cuts);
    bounds.push(min + ext);
    let pieces = bounds
        .windows(2)
        .map(|w| {
            // A piece storing one element per iteration (the copy in a padded
            // row) is marked for VectorizeLoop, which keeps it serial if it can't.
            let extent = w[1] - w[0];
            let kind = if (4..=64).contains(&extent) && matches!(l.body, Stmt::Store { .. }) {
                ForKind::Vectorized
            } else {
                l.kind
            };
            let piece = Stmt::For(Box::new(For {
                var: l.var.clone(),
                min: Expr::int(w[0]),
                extent: Expr::int(extent),
                kind,
                body: l.body.clone(),
            }));
            simplify_stmt(piece, &mut Bounds::new())
        })
        .collect();
    Stmt::seq(pieces)
}

fn has_loop(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |s| found |= matches!(s, Stmt::For(_)));
    found
}

/// Partition the innermost serial loops of `f` at the constants their bodies test.
pub fn partition_loops(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(l) if l.kind == ForKind::Serial && !has_loop(&l.body) => partition(*l),
        s => s,
    });
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::{print_stmt, Buffer, Scope};
    use crate::DataType;

    /// A padded row: `out[w] = 0 ≤ w−1 < 8 ? x[clamp(w−1)] : 0` over w in 0..10.
    #[test]
    fn padded_row_splits_into_border_copy_border() {
        let x = Buffer::new("x", DataType::F32, vec![8], Scope::Global);
        let out = Buffer::new("out", DataType::F32, vec![10], Scope::Global);
        let w = Var::index("w");
        let i = Expr::var(&w) - Expr::int(1);
        let inside =
            Expr::and(Expr::cmp(CmpOp::Ge, i.clone(), Expr::int(0)), Expr::cmp(CmpOp::Lt, i.clone(), Expr::int(8)));
        let clamped = Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, i, Expr::int(0)), Expr::int(7));
        let value = Expr::select(inside, Expr::Load(x, vec![clamped]), Expr::float(0.0, DataType::F32));
        let body = Stmt::Store { buffer: out.clone(), indices: vec![Expr::var(&w)], value };
        let f = PrimFunc {
            name: "pad".into(),
            params: vec![out],
            num_outputs: 1,
            body: Stmt::for_loop(w, 10, ForKind::Serial, body),
            attrs: Default::default(),
        };
        let text = print_stmt(&partition_loops(f).body);
        assert!(!text.contains("Select") && !text.contains("min(") && !text.contains("max("), "{text}");
        assert_eq!(text.matches("out[").count(), 3, "{text}");
        // A loop with no constant tests is left alone.
        let v = Var::index("v");
        let b = Buffer::new("b", DataType::F32, vec![4], Scope::Global);
        let plain = Stmt::for_loop(
            v.clone(),
            4,
            ForKind::Serial,
            Stmt::Store { buffer: b.clone(), indices: vec![Expr::var(&v)], value: Expr::float(1.0, DataType::F32) },
        );
        let g = PrimFunc {
            name: "g".into(),
            params: vec![b],
            num_outputs: 1,
            body: plain.clone(),
            attrs: Default::default(),
        };
        assert_eq!(partition_loops(g).body, plain);
    }
}
