//! Loop unswitching of the selects that pick a concatenation's input: a
//! kernel storing `Select(c < 64, a[..], Select(c < 128, b[..], d[..]))`
//! for every element of a channel `c` tests the channel — which its rows
//! and columns do not change — per element, and loads every input for
//! each (their indices clamped into range). Hoisted to the channel loop,
//! each branch's rows are plain copies of one input: the clamps simplify
//! away under the branch's range of channels, and rows that are contiguous
//! runs of a plane become one run, a loop of whole vectors — as do the rows
//! of any element-wise kernel over whole planes (a channel slice's 40-wide
//! rows, a squeeze-excitation scale over 7 × 7 planes).

use kiln_ir::arith::{simplify_stmt, Bounds, Interval};

use super::primitives::fresh_loop_vars;
use super::{collect_loads, contiguous, Schedule};
use crate::tir::{CmpOp, Expr, For, ForKind, PrimFunc, Stmt, Var};

/// `f` with every loop whose perfect nest of serial loops ends in one store
/// of a chain of selects on that loop's variable (compared with constants)
/// rewritten as an `if` chain around one copy of the nest per arm, each
/// simplified under its range of the variable (its rows then fused into
/// runs by [`fuse_plane_runs_of`], as every injective kernel's are).
pub(super) fn unswitch_selects(mut f: PrimFunc) -> PrimFunc {
    let mut copy = 0usize;
    f.body = std::mem::replace(&mut f.body, Stmt::nop()).map_post(&mut |s| match s {
        Stmt::For(l) => match l
            .min
            .as_int()
            .zip(l.extent.as_int())
            .and_then(|(lo, n)| unswitched(&l.var, (lo, lo + n - 1), &l.body, &mut copy))
        {
            Some(body) => Stmt::For(Box::new(For { body, ..*l })),
            None => Stmt::For(l),
        },
        s => s,
    });
    f
}

/// The `if` replacing `body`, the body of the loop over `var` (in the
/// inclusive `range`), where a select in its store tests `var` against a
/// constant: the store's value with that select's first arm in the `then`
/// branch, its second in the `else` — each nest simplified under its part
/// of the range (selects that part decides go), and unswitched in turn (a
/// chain of selects, a concatenation of concatenations).
fn unswitched(var: &Var, range: (i64, i64), body: &Stmt, copy: &mut usize) -> Option<Stmt> {
    let (chain, store) = serial_chain(body)?;
    // An innermost loop's element-wise select is LoopPartition's (an `if` per element is no better).
    if chain.is_empty() {
        return None;
    }
    let Stmt::Store { buffer, indices, value } = store else { return None };
    // One copy of the nest per range of `var` the tests tell apart: a
    // concatenation of thousands of inputs stays one nest.
    if tests_of(value, var) > MAX_UNSWITCHED_TESTS {
        return None;
    }
    let (cond, test) = hoistable_test(value, var, &chain)?;
    let (taken, left) = split_range(range, test);
    let mut branch = |arm: usize, part: (i64, i64)| {
        let value = with_arm(value, &cond, arm);
        let nest = rebuild(body, &Stmt::Store { buffer: buffer.clone(), indices: indices.clone(), value });
        *copy += 1;
        let mut bounds = Bounds::new();
        bounds.bind(var, Interval::new(part.0, part.1));
        let nest = simplify_stmt(fresh_loop_vars(nest, &format!("u{copy}")), &mut bounds);
        unswitched(var, part, &nest, copy).unwrap_or(nest)
    };
    let empty = |(lo, hi): (i64, i64)| lo > hi;
    // A test the range decides keeps one arm, untested.
    Some(match (empty(taken), empty(left)) {
        (true, true) => return None,
        (false, true) => branch(0, taken),
        (true, false) => branch(1, left),
        (false, false) => {
            let then_case = branch(0, taken);
            let else_case = branch(1, left);
            Stmt::If { cond, then_case: Box::new(then_case), else_case: Some(Box::new(else_case)) }
        }
    })
}

/// The most selects on a loop's variable hoisted out of one nest.
const MAX_UNSWITCHED_TESTS: usize = 64;

/// How many selects of `e` test `var` against a constant.
fn tests_of(e: &Expr, var: &Var) -> usize {
    let here = matches!(e, Expr::Select(c, _, _) if compared_with_constant(c, var).is_some()) as usize;
    let mut n = here;
    e.for_each_child(|c| n += tests_of(c, var));
    n
}

/// The condition of the first select in `e` (outermost first) that tests
/// `var` against a constant and uses none of the `inner` loops' variables.
fn hoistable_test(e: &Expr, var: &Var, inner: &[Var]) -> Option<(Expr, (CmpOp, i64))> {
    if let Expr::Select(c, _, _) = e {
        if !inner.iter().any(|v| c.uses_var(v)) {
            if let Some(test) = compared_with_constant(c, var) {
                return Some(((**c).clone(), test));
            }
        }
    }
    let mut found = None;
    e.for_each_child(|c| {
        if found.is_none() {
            found = hoistable_test(c, var, inner);
        }
    });
    found
}

/// `e` with every select on `cond` replaced by its first (`arm` 0) or second arm.
fn with_arm(e: &Expr, cond: &Expr, arm: usize) -> Expr {
    match e {
        Expr::Select(c, a, b) if **c == *cond => with_arm(if arm == 0 { a } else { b }, cond, arm),
        _ => e.map_children(|c| with_arm(c, cond, arm)),
    }
}

/// The variables of a perfect nest of serial loops and the statement inside it.
fn serial_chain(s: &Stmt) -> Option<(Vec<Var>, &Stmt)> {
    let mut vars = Vec::new();
    let mut cur = s;
    while let Stmt::For(l) = cur {
        if l.kind != ForKind::Serial {
            return None;
        }
        vars.push(l.var.clone());
        cur = &l.body;
    }
    Some((vars, cur))
}

/// The nest `s` (a perfect chain of loops) with `inner` in place of its innermost statement.
fn rebuild(s: &Stmt, inner: &Stmt) -> Stmt {
    match s {
        Stmt::For(l) => Stmt::For(Box::new(For { body: rebuild(&l.body, inner), ..(**l).clone() })),
        _ => inner.clone(),
    }
}

/// `c` as `v <op> constant`, the variable first (`Lt`, `Le`, `Gt` or `Ge`).
fn compared_with_constant(c: &Expr, v: &Var) -> Option<(CmpOp, i64)> {
    let Expr::Cmp(op, a, b) = c else { return None };
    let flipped = |op: CmpOp| match op {
        CmpOp::Lt => Some(CmpOp::Gt),
        CmpOp::Le => Some(CmpOp::Ge),
        CmpOp::Gt => Some(CmpOp::Lt),
        CmpOp::Ge => Some(CmpOp::Le),
        _ => None,
    };
    match (&**a, &**b) {
        (Expr::Var(w), k) if w == v => Some((flipped(flipped(*op)?)?, k.as_int()?)),
        (k, Expr::Var(w)) if w == v => Some((flipped(*op)?, k.as_int()?)),
        _ => None,
    }
}

/// The part of the inclusive `range` where `v <op> c` holds, and the part where it does not.
fn split_range((lo, hi): (i64, i64), (op, c): (CmpOp, i64)) -> ((i64, i64), (i64, i64)) {
    // The first value of the upper part: `v < c` holds below `c`, `v <= c` below `c + 1`.
    let (split, below_holds) = match op {
        CmpOp::Lt => (c, true),
        CmpOp::Le => (c + 1, true),
        CmpOp::Ge => (c, false),
        _ => (c + 1, false), // Gt
    };
    let lower = (lo, hi.min(split - 1));
    let upper = (lo.max(split), hi);
    if below_holds {
        (lower, upper)
    } else {
        (upper, lower)
    }
}

/// Whether `e` selects between values (a vector of it loads every arm).
pub(super) fn selects(e: &Expr) -> bool {
    let mut found = matches!(e, Expr::Select(..));
    e.for_each_child(|c| found |= selects(c));
    found
}

/// `f` with every pair of innermost loops `for r: for c: out[.., r, c] =
/// f(in[.., r, c], ...)` over whole rows (the column loop covers each
/// buffer's last axis, the row loop steps its second-to-last by one) fused
/// ([`Schedule::fuse`]) into one run of the plane.
pub(super) fn fuse_plane_runs_of(f: PrimFunc) -> PrimFunc {
    let mut pairs = Vec::new();
    f.body.visit(&mut |s| {
        if let Stmt::For(outer) = s {
            if walks_whole_rows(outer) {
                let Stmt::For(inner) = &outer.body else { return };
                pairs.push((outer.var.clone(), inner.var.clone()));
            }
        }
    });
    let mut s = Schedule::new(f);
    for (r, c) in pairs {
        // The pair is directly nested with constant extents (checked): fusing cannot fail.
        let fused = s.fuse(&r, &c);
        debug_assert!(fused.is_ok(), "{fused:?}");
    }
    s.into_func()
}

/// Whether `outer` and the loop directly inside it store and read whole rows.
fn walks_whole_rows(outer: &For) -> bool {
    let Stmt::For(inner) = &outer.body else { return false };
    let Stmt::Store { buffer, indices, value } = &inner.body else { return false };
    let (Some(_), Some(cols)) = (outer.extent.as_int(), inner.extent.as_int()) else { return false };
    if outer.kind != ForKind::Serial
        || inner.kind != ForKind::Serial
        || outer.min.as_int() != Some(0)
        || inner.min.as_int() != Some(0)
    {
        return false;
    }
    let (r, c) = (&outer.var, &inner.var);
    let whole_rows = |shape: &[usize], idx: &[Expr]| -> bool {
        let n = idx.len();
        n >= 2
            && shape.len() == n
            && shape[n - 1] as i64 == cols
            && contiguous(&idx[n - 1..], c)
            && idx[..n - 1].iter().all(|i| !i.uses_var(c))
            && contiguous(&idx[..n - 1], r)
    };
    let mut loads = Vec::new();
    collect_loads(value, &mut loads);
    let every_read = loads
        .iter()
        .all(|(b, idx)| (!idx.iter().any(|i| i.uses_var(r) || i.uses_var(c))) || whole_rows(b.shape(), idx));
    whole_rows(buffer.shape(), indices) && every_read
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each comparison splits `0..=9` where it flips, the part where it holds first.
    #[test]
    fn tests_split_the_range_where_they_flip() {
        assert_eq!(split_range((0, 9), (CmpOp::Lt, 4)), ((0, 3), (4, 9)));
        assert_eq!(split_range((0, 9), (CmpOp::Le, 4)), ((0, 4), (5, 9)));
        assert_eq!(split_range((0, 9), (CmpOp::Ge, 4)), ((4, 9), (0, 3)));
        assert_eq!(split_range((0, 9), (CmpOp::Gt, 4)), ((5, 9), (0, 4)));
        // A test the range already decides leaves the other part empty.
        let (holds, fails) = split_range((0, 9), (CmpOp::Lt, 12));
        assert_eq!(holds, (0, 9));
        assert!(fails.0 > fails.1);
    }

    /// A chain of selects on `v` over a nest of one loop: unswitched into
    /// an `if` chain (no select left) up to [`MAX_UNSWITCHED_TESTS`] tests,
    /// left alone past them.
    #[test]
    fn chains_of_tests_are_unswitched_up_to_the_limit() {
        let (v, c) = (Var::index("v"), Var::index("c"));
        let src = crate::tir::Buffer::new("src", crate::DataType::F32, vec![4], crate::tir::Scope::Global);
        let dst = crate::tir::Buffer::new("dst", crate::DataType::F32, vec![4], crate::tir::Scope::Global);
        let nest = |tests: i64| {
            let load = Expr::Load(src.clone(), vec![Expr::var(&c)]);
            let value = (0..tests).rev().fold(load.clone(), |rest, k| {
                Expr::select(
                    Expr::cmp(CmpOp::Lt, Expr::var(&v), Expr::int(k + 1)),
                    load.clone() * Expr::float(k as f64, crate::DataType::F32),
                    rest,
                )
            });
            Stmt::For(Box::new(For {
                var: c.clone(),
                min: Expr::int(0),
                extent: Expr::int(4),
                kind: ForKind::Serial,
                body: Stmt::Store { buffer: dst.clone(), indices: vec![Expr::var(&c)], value },
            }))
        };
        let unswitched_nest = unswitched(&v, (0, 99), &nest(3), &mut 0).expect("three tests unswitch");
        let mut ifs = 0;
        unswitched_nest.visit(&mut |s| match s {
            Stmt::If { .. } => ifs += 1,
            Stmt::Store { value, .. } => assert!(!selects(value), "a select is left: {value:?}"),
            _ => {}
        });
        assert_eq!(ifs, 3);
        let limit = MAX_UNSWITCHED_TESTS as i64;
        assert!(unswitched(&v, (0, 99), &nest(limit), &mut 0).is_some());
        assert!(unswitched(&v, (0, 99), &nest(limit + 1), &mut 0).is_none());
    }

    /// `c < v` is `v > c`; a test of anything but the loop's variable against a constant is not hoisted.
    #[test]
    fn only_the_loop_variable_against_a_constant_is_a_test() {
        let (v, w) = (Var::index("v"), Var::index("w"));
        let cmp = |op, a: Expr, b: Expr| Expr::cmp(op, a, b);
        assert_eq!(compared_with_constant(&cmp(CmpOp::Lt, Expr::var(&v), Expr::int(64)), &v), Some((CmpOp::Lt, 64)));
        assert_eq!(compared_with_constant(&cmp(CmpOp::Lt, Expr::int(64), Expr::var(&v)), &v), Some((CmpOp::Gt, 64)));
        assert_eq!(compared_with_constant(&cmp(CmpOp::Ge, Expr::int(3), Expr::var(&v)), &v), Some((CmpOp::Le, 3)));
        assert_eq!(compared_with_constant(&cmp(CmpOp::Lt, Expr::var(&w), Expr::int(64)), &v), None);
        assert_eq!(compared_with_constant(&cmp(CmpOp::Eq, Expr::var(&v), Expr::int(64)), &v), None);
        assert_eq!(compared_with_constant(&cmp(CmpOp::Lt, Expr::var(&v), Expr::var(&w)), &v), None);
    }
}
