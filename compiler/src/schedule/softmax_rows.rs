//! A softmax's rows two at a time. Each row is a chain — its maximum, the
//! exponentials, their sum, the quotients — and one row's code filled the
//! out-of-order window alone: the core ran little more than a row at a time
//! (a C model of gpt_tiny's 64-wide rows: 15 % faster with two rows'
//! statements interleaved). The row loop steps by two rows, each stage
//! written for the first row and then for the second, which has its own row
//! of exponentials; the stages of one row touch only that row's elements.

use crate::tir::{Buffer, Expr, For, ForKind, PrimFunc, Stmt, Var};

/// `f` with each softmax row loop (a serial loop of an even number of rows
/// around one row's local exponentials, `topi::nn::SOFTMAX_EXP_STAGE`) over
/// pairs of rows.
pub(super) fn pair_rows(mut f: PrimFunc) -> PrimFunc {
    if f.attrs.get("anchor").map(String::as_str) != Some("nn.softmax") {
        return f;
    }
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(l) if row_loop(&l).is_some() => paired(*l),
        s => s,
    });
    f
}

/// The first row and the row count of a row loop, if `l` is one.
fn row_loop(l: &For) -> Option<(i64, i64)> {
    let (Some(min), Some(rows)) = (l.min.as_int(), l.extent.as_int()) else { return None };
    let Stmt::Allocate { buffer, body } = &l.body else { return None };
    let stages = matches!(&**body, Stmt::Seq(s) if s.len() > 1);
    // (`localize` names its per-row copy `<stage>_at`.)
    let exps = buffer.name().starts_with(crate::topi::SOFTMAX_EXP_STAGE);
    (l.kind == ForKind::Serial && exps && stages && rows >= 2 && rows % 2 == 0).then_some((min, rows))
}

/// The row loop `l` over pairs of rows, each stage for both rows in turn.
fn paired(l: For) -> Stmt {
    let Some((min, rows)) = row_loop(&l) else { return Stmt::For(Box::new(l)) };
    let Stmt::Allocate { buffer: exps, body } = l.body else { unreachable!("checked by row_loop") };
    let Stmt::Seq(stages) = *body else { unreachable!("checked by row_loop") };
    let pair = Var::index(&format!("{}_pair", l.var.name));
    let second = Buffer::new(exps.name(), exps.elem(), exps.shape().to_vec(), exps.scope());
    let row = |k: i64| Expr::var(&pair) * Expr::int(2) + Expr::int(min + k);
    let for_row = |stage: &Stmt, k: i64, own: &Buffer| {
        let at = row(k);
        let stage = stage.clone().map_exprs(&mut |e| {
            let e = e.substitute(&|v| (v.id == l.var.id).then(|| at.clone()));
            loads_renamed(&e, &exps, own)
        });
        stores_renamed(stage, &exps, own)
    };
    let both: Vec<Stmt> = stages.iter().flat_map(|s| [for_row(s, 0, &exps), for_row(s, 1, &second)]).collect();
    let body = Stmt::Allocate {
        buffer: exps.clone(),
        body: Box::new(Stmt::Allocate { buffer: second, body: Box::new(Stmt::seq(both)) }),
    };
    Stmt::For(Box::new(For { var: pair, min: Expr::int(0), extent: Expr::int(rows / 2), kind: ForKind::Serial, body }))
}

/// `e` with its loads of `from` reading `to`.
fn loads_renamed(e: &Expr, from: &Buffer, to: &Buffer) -> Expr {
    match e {
        Expr::Load(b, idx) if b == from => {
            Expr::Load(to.clone(), idx.iter().map(|i| loads_renamed(i, from, to)).collect())
        }
        _ => e.map_children(|c| loads_renamed(c, from, to)),
    }
}

/// `s` with its stores to `from` writing `to`.
fn stores_renamed(s: Stmt, from: &Buffer, to: &Buffer) -> Stmt {
    s.map_post(&mut |s| match s {
        Stmt::Store { buffer, indices, value } if buffer == *from => Stmt::Store { buffer: to.clone(), indices, value },
        s => s,
    })
}
