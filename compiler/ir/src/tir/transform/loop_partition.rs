//! LoopPartition: an innermost loop whose body tests its variable against
//! constants (`0 ≤ w − 1 < 56`, a padded row) is split at those constants into
//! pieces where every such test has one answer, and each piece is simplified
//! under its own range — the tests fold away, clamped indices become plain
//! ones, and the middle piece of a padded row is a straight copy the
//! vectorizer handles (TVM's `tir.LoopPartition`, for constant bounds).

use crate::arith::{linear, simplify, simplify_stmt, Bounds};
use crate::tir::{CmpOp, Expr, For, ForKind, PrimFunc, Stmt, Var};

/// At most this many pieces per loop (code size).
const MAX_PIECES: usize = 5;

/// The values of `v` at which a comparison in `e` can change its answer.
fn cut_points(e: &Expr, v: &Var, out: &mut Vec<i64>) {
    if let Expr::Cmp(op, a, b) = e {
        // a − b = c·v + r with constant r and c ≠ 0; with c > 0 (else both
        // sides negated and the test mirrored) `c·v + r < 0` holds exactly
        // for v < ⌈−r/c⌉ and `c·v + r ≤ 0` for v ≤ ⌊−r/c⌋.
        if let Some((c, r)) = linear(&(a.as_ref().clone() - b.as_ref().clone()), v) {
            if let (Some(r), true) = (simplify(&r, &Bounds::new()).as_int(), c != 0) {
                let (c, r, op) = if c > 0 { (c, r, *op) } else { (-c, -r, mirrored(*op)) };
                let (floor, ceil) = ((-r).div_euclid(c), -(r.div_euclid(c)));
                match op {
                    CmpOp::Lt | CmpOp::Ge => out.push(ceil),
                    CmpOp::Le | CmpOp::Gt => out.push(floor + 1),
                    CmpOp::Eq | CmpOp::Ne => out.extend([ceil, floor + 1]),
                }
            }
        }
    }
    e.for_each_child(|c| cut_points(c, v, out));
}

/// The comparison with its sides swapped (`a < b` ⇔ `b > a`).
fn mirrored(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Ge => CmpOp::Le,
        other => other,
    }
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
            // (A loop the schedule vectorized stays so, piece by piece.)
            let kind = if l.kind == ForKind::Vectorized
                || (4..=64).contains(&extent) && matches!(l.body, Stmt::Store { .. })
            {
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

/// Partition the innermost serial (and vectorized) loops of `f` at the constants their bodies test.
pub fn partition_loops(mut f: PrimFunc) -> PrimFunc {
    let masked_updates = f.attrs.get(MASKED_UPDATES_ATTR).is_some_and(|v| v == "true");
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(l) if masked_updates && l.kind == ForKind::Vectorized && updates_local(&l.body) => Stmt::For(l),
        Stmt::For(l) if matches!(l.kind, ForKind::Serial | ForKind::Vectorized) && !has_loop(&l.body) => partition(*l),
        s => s,
    });
    f
}

/// A kernel attribute (`"true"`): its vectorized loops that store to a
/// kernel-local buffer — a register tile's accumulator updates — are not
/// partitioned; their tests stay, evaluated per lane (a masked load on
/// AVX-512). Split at a padded row's borders, a 16-lane accumulator became
/// a 14-lane piece and two single lanes, each update of which LLVM
/// legalized piece by piece.
pub const MASKED_UPDATES_ATTR: &str = "partition.masked_updates";

/// Whether `s` stores only to kernel-local buffers.
fn updates_local(s: &Stmt) -> bool {
    let (mut local, mut other) = (false, false);
    s.visit(&mut |s| {
        if let Stmt::Store { buffer, .. } = s {
            if buffer.scope() == crate::tir::Scope::Local {
                local = true;
            } else {
                other = true;
            }
        }
    });
    local && !other
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::{print_stmt, BinOp, Buffer, Scope};
    use crate::DataType;

    /// A padded row of 8 inputs read at `scale·w − 1`:
    /// `out[w] = 0 ≤ scale·w−1 < 8 ? x[clamp(scale·w−1)] : 0` over w in 0..len.
    fn padded_row(scale: i64, len: usize) -> PrimFunc {
        let x = Buffer::new("x", DataType::F32, vec![8], Scope::Global);
        let out = Buffer::new("out", DataType::F32, vec![len], Scope::Global);
        let w = Var::index("w");
        let i = Expr::var(&w) * Expr::int(scale) - Expr::int(1);
        let inside =
            Expr::and(Expr::cmp(CmpOp::Ge, i.clone(), Expr::int(0)), Expr::cmp(CmpOp::Lt, i.clone(), Expr::int(8)));
        let clamped = Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, i, Expr::int(0)), Expr::int(7));
        let value = Expr::select(inside, Expr::Load(x, vec![clamped]), Expr::float(0.0, DataType::F32));
        let body = Stmt::Store { buffer: out.clone(), indices: vec![Expr::var(&w)], value };
        PrimFunc {
            name: "pad".into(),
            params: vec![out],
            num_outputs: 1,
            body: Stmt::for_loop(w, len, ForKind::Serial, body),
            attrs: Default::default(),
        }
    }

    /// Border, copy, border: no test or clamp left.
    fn assert_three_plain_pieces(f: PrimFunc) {
        let text = print_stmt(&partition_loops(f).body);
        assert!(!text.contains("Select") && !text.contains("min(") && !text.contains("max("), "{text}");
        assert_eq!(text.matches("out[").count(), 3, "{text}");
    }

    /// An accumulator update over a vectorized padded row: split at the
    /// borders by default; kept one loop, its test per lane, in a kernel
    /// marked [`MASKED_UPDATES_ATTR`] (a store to a global buffer is split
    /// there too).
    #[test]
    fn marked_kernels_keep_vectorized_accumulator_updates_whole() {
        let x = Buffer::new("x", DataType::F32, vec![8], Scope::Global);
        let w = Var::index("w");
        let i = Expr::var(&w) - Expr::int(1);
        let inside =
            Expr::and(Expr::cmp(CmpOp::Ge, i.clone(), Expr::int(0)), Expr::cmp(CmpOp::Lt, i.clone(), Expr::int(8)));
        let clamped = Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, i, Expr::int(0)), Expr::int(7));
        let value = Expr::select(inside, Expr::Load(x, vec![clamped]), Expr::float(0.0, DataType::F32));
        let nest = |scope: Scope, attr: bool| {
            let acc = Buffer::new("acc", DataType::F32, vec![16], scope);
            let update = Expr::Load(acc.clone(), vec![Expr::var(&w)]) + value.clone();
            let body = Stmt::Store { buffer: acc.clone(), indices: vec![Expr::var(&w)], value: update };
            let mut f = PrimFunc {
                name: "update".into(),
                params: vec![acc],
                num_outputs: 1,
                body: Stmt::for_loop(w.clone(), 16, ForKind::Vectorized, body),
                attrs: Default::default(),
            };
            if attr {
                f.attrs.insert(MASKED_UPDATES_ATTR.into(), "true".into());
            }
            print_stmt(&partition_loops(f).body)
        };
        let loops = |text: &str| text.matches("for ").count();
        let split = |text: String| assert!(!text.contains("Select") && text.matches("acc[").count() > 2, "{text}");
        split(nest(Scope::Local, false));
        let kept = nest(Scope::Local, true);
        assert!(loops(&kept) == 1 && kept.contains("Select"), "{kept}");
        split(nest(Scope::Global, true));
    }

    #[test]
    fn padded_row_splits_into_border_copy_border() {
        assert_three_plain_pieces(padded_row(1, 10));
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

    /// The odd columns of a padded row (a stride-2 phase): `0 ≤ 2w−1 < 8`
    /// flips at w = 1 and w = 5 — tests with a coefficient other than ±1.
    #[test]
    fn strided_padded_row_splits_at_the_rounded_bounds() {
        assert_three_plain_pieces(padded_row(2, 6));
        let mut cuts = Vec::new();
        let v = Var::index("v");
        // 3 − 2v > 0 holds for v ≤ 1: flips at 2.
        cut_points(&Expr::cmp(CmpOp::Gt, Expr::int(3) - Expr::var(&v) * Expr::int(2), Expr::int(0)), &v, &mut cuts);
        assert_eq!(cuts, vec![2]);
    }
}
