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
    let shape = l.kind == ForKind::Serial && exps && stages && rows >= 2 && rows % 2 == 0;
    (shape && rows_apart(body, &l.var, buffer)).then_some((min, rows))
}

/// Whether every buffer that `body` stores to other than its row of
/// exponentials `exps` and what it allocates itself (the rows' maxima and
/// sums, the output) is stored and read at indices of the row `row`: two
/// rows' stages then touch different elements, and may run in either order.
fn rows_apart(body: &Stmt, row: &Var, exps: &Buffer) -> bool {
    let mut inner = vec![exps.id()];
    let mut stored = Vec::new();
    body.visit(&mut |s| match s {
        Stmt::Allocate { buffer, .. } => inner.push(buffer.id()),
        Stmt::Store { buffer, indices, .. } => stored.push((buffer.id(), indices.iter().any(|i| i.uses_var(row)))),
        _ => {}
    });
    let outside: Vec<u32> = stored.iter().map(|&(b, _)| b).filter(|b| !inner.contains(b)).collect();
    let stores_apart = stored.iter().all(|&(b, by_row)| inner.contains(&b) || by_row);
    let mut loads_apart = true;
    body.clone().map_exprs(&mut |e| {
        let mut loads = Vec::new();
        super::collect_loads(&e, &mut loads);
        loads_apart &= loads.iter().all(|(b, idx)| !outside.contains(&b.id()) || idx.iter().any(|i| i.uses_var(row)));
        e
    });
    stores_apart && loads_apart
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

#[cfg(test)]
mod tests {
    use super::row_loop;
    use crate::tir::{Buffer, Expr, For, ForKind, Scope, Stmt, Var};
    use kiln_ir::DataType;

    /// A row loop of 4 rows whose stages store a row's maximum into `max`
    /// at `index(row)`, then its exponentials.
    fn rows_storing_max(index: impl Fn(&Var) -> Expr) -> For {
        let row = Var::index("ax2");
        let exps = Buffer::new(crate::topi::SOFTMAX_EXP_STAGE, DataType::F32, vec![8], Scope::Local);
        let max = Buffer::new("softmax_max", DataType::F32, vec![4], Scope::Local);
        let stages = Stmt::seq(vec![
            Stmt::Store { buffer: max.clone(), indices: vec![index(&row)], value: Expr::float(0.0, DataType::F32) },
            Stmt::Store {
                buffer: exps.clone(),
                indices: vec![Expr::int(0)],
                value: Expr::Load(max.clone(), vec![index(&row)]),
            },
        ]);
        For {
            var: row,
            min: Expr::int(0),
            extent: Expr::int(4),
            kind: ForKind::Serial,
            body: Stmt::Allocate { buffer: exps, body: Box::new(stages) },
        }
    }

    #[test]
    fn rows_pair_only_where_their_stages_touch_their_own_elements() {
        assert_eq!(row_loop(&rows_storing_max(Expr::var)), Some((0, 4)));
        // One maximum shared by every row: the second row's would overwrite
        // the first's before its exponentials read it.
        assert_eq!(row_loop(&rows_storing_max(|_| Expr::int(0))), None);
    }
}
