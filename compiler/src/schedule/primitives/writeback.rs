//! A whole-tile write-back split into an unguarded copy for the tiles that
//! lie inside the output and a guarded one for the tile across its end.

use std::collections::HashMap;

use kiln_ir::arith::{linear, simplify, Bounds};

use super::{
    fresh_headers, peel_chain, rebuild_chain, strip_guards, subst_stmt, wrap_guards, ReductionTile, Result, Schedule,
};
use crate::tir::{CmpOp, Expr, Stmt, Var};

/// The most tile loops a guard may test (its corners are tested one by one).
const MAX_GUARDED_LOOPS: usize = 2;

impl Schedule {
    /// After [`Schedule::decompose_reduction_whole_tiles`], where the
    /// write-back's guard tests a loop outside the tile as well as the tile's
    /// loops — the last column panel of a weight padded to whole panels,
    /// `16·j + c < 1000` — the write-back becomes
    /// `if <the whole tile passes> { unguarded copy } else { guarded copy }`:
    /// every tile but the last stores whole vectors (a guarded store goes
    /// lane by lane). The unguarded copy keeps `tile.writeback_loops`; the
    /// guarded copy's loops (with the same kinds) are returned. Nothing
    /// changes, and no loops are returned, where the guard tests the tile's
    /// loops only (unrolling folds it) or is not affine in them.
    pub fn split_writeback_at_tail(&mut self, tile: &ReductionTile) -> Result<Vec<Var>> {
        let Some(first) = tile.writeback_loops.first() else { return Ok(Vec::new()) };
        let mut copy_loops = Vec::new();
        let out = &mut copy_loops;
        self.rewrite_loop(first, |l| {
            let (headers, inner) = peel_chain(Stmt::For(Box::new(l)), &|_| false);
            let mut guards = Vec::new();
            let body = strip_guards(inner, &mut guards);
            let Some(inside) = whole_tile_test(&guards, &headers) else {
                return Ok(rebuild_chain(headers, wrap_guards(body, &guards)));
            };
            let (copy_headers, map) = fresh_headers(&headers, "tail");
            out.extend(copy_headers.iter().map(|h| h.0.clone()));
            let guarded = rebuild_chain(copy_headers, subst_stmt(wrap_guards(body.clone(), &guards), &map));
            Ok(Stmt::If {
                cond: inside,
                then_case: Box::new(rebuild_chain(headers, body)),
                else_case: Some(Box::new(guarded)),
            })
        })?;
        Ok(copy_loops)
    }
}

/// A test, outside the tile, that every element of the tile passes
/// `guards`: each guard at every corner of the range of the tile loops it
/// reads (a conjunction of comparisons affine in those loops holds on the
/// whole box when it holds at its corners). None where a guard is not such
/// a conjunction, reads more than [`MAX_GUARDED_LOOPS`] tile loops, or reads
/// no loop outside the tile (then the corners are constants).
fn whole_tile_test(guards: &[Expr], headers: &[super::Header]) -> Option<Expr> {
    let mut ranges = Vec::new();
    for (v, min, extent, _) in headers {
        if guards.iter().any(|g| g.uses_var(v)) {
            let (min, extent) = (min.as_int()?, extent.as_int()?);
            ranges.push((v.clone(), min, min + extent - 1));
        }
    }
    let vars: Vec<Var> = ranges.iter().map(|r| r.0.clone()).collect();
    if ranges.is_empty() || ranges.len() > MAX_GUARDED_LOOPS || !guards.iter().all(|g| half_spaces(g, &vars)) {
        return None;
    }
    let mut tests = Vec::new();
    for corner in 0..1usize << ranges.len() {
        let at: HashMap<u32, Expr> = ranges
            .iter()
            .enumerate()
            .map(|(k, (v, lo, hi))| (v.id, Expr::int(if corner >> k & 1 == 1 { *hi } else { *lo })))
            .collect();
        for g in guards {
            let test = simplify(&g.substitute(&|v| at.get(&v.id).cloned()), &Bounds::new());
            match test.as_int() {
                // A corner that fails everywhere: no tile is whole.
                Some(0) => return None,
                Some(_) => {}
                None => tests.push(test),
            }
        }
    }
    tests.into_iter().reduce(Expr::and)
}

/// Whether `e` is a conjunction of ordering comparisons whose sides are
/// linear in each of `vars` ([`linear`]: constant coefficients, so affine in all).
fn half_spaces(e: &Expr, vars: &[Var]) -> bool {
    match e {
        Expr::And(a, b) => half_spaces(a, vars) && half_spaces(b, vars),
        Expr::Cmp(CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge, a, b) => {
            vars.iter().all(|v| linear(a, v).is_some() && linear(b, v).is_some())
        }
        _ => !vars.iter().any(|v| e.uses_var(v)),
    }
}
