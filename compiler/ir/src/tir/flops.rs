//! Floating-point operations a kernel executes, counted from its loop nest:
//! what `kiln bench --profile` divides by time for GFLOP/s and sums per
//! kernel class for each class's share of the model's work.
//!
//! Counted as the usual GFLOP figures count them: every floating-point add,
//! subtract, multiply and divide, per lane, times the trip counts of the
//! loops around it (a multiply-accumulate is two). Comparisons, `min`/`max`
//! (a clip), conversions, loads and index arithmetic are not operations here,
//! nor are intrinsics (`exp`, `tanh`): they are a few per element where the
//! products are thousands. A convolution computed by Winograd counts the
//! operations it executes, fewer than the direct convolution's.

use super::expr::{BinOp, Expr};
use super::stmt::{PrimFunc, Stmt};

/// The floating-point operations one call of `f` executes; `None` where a
/// loop's trip count is not a constant (the count would be a guess).
pub fn float_ops(f: &PrimFunc) -> Option<u64> {
    stmt_ops(&f.body)
}

fn stmt_ops(s: &Stmt) -> Option<u64> {
    Some(match s {
        Stmt::For(l) => {
            let Expr::Int(trips, _) = l.extent else { return None };
            u64::try_from(trips).ok()?.checked_mul(stmt_ops(&l.body)?)?
        }
        Stmt::Store { indices, value, .. } => indices.iter().map(expr_ops).sum::<u64>() + expr_ops(value),
        Stmt::Allocate { body, .. } => stmt_ops(body)?,
        // The dearer branch: a padding guard's two sides differ only in loads.
        Stmt::If { cond, then_case, else_case } => {
            let other = match else_case {
                Some(e) => stmt_ops(e)?,
                None => 0,
            };
            expr_ops(cond) + stmt_ops(then_case)?.max(other)
        }
        Stmt::Seq(v) => v.iter().map(stmt_ops).try_fold(0u64, |acc, n| acc.checked_add(n?))?,
        Stmt::Let { value, body, .. } => expr_ops(value).checked_add(stmt_ops(body)?)?,
        Stmt::Evaluate(e) => expr_ops(e),
    })
}

fn expr_ops(e: &Expr) -> u64 {
    let own = match e {
        Expr::Bin(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div, ..) => {
            let ty = e.ty();
            if ty.elem.is_float() {
                u64::from(ty.lanes)
            } else {
                0
            }
        }
        _ => 0,
    };
    let mut children = 0;
    e.for_each_child(|c| children += expr_ops(c));
    own + children
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::parse_prim_func;

    #[test]
    fn a_matrix_product_is_two_operations_per_multiply_accumulate() {
        let f = parse_prim_func(
            r#"
def mm(a: T.Buffer([4, 8], "float32"), b: T.Buffer([8, 16], "float32"), c: T.Buffer([4, 16], "float32")):
    for i in T.serial(4):
        for j in T.serial(16):
            c[i, j] = T.float32(0.0)
            for k in T.serial(8):
                c[i, j] = c[i, j] + a[i, k] * b[k, j]
"#,
        )
        .unwrap();
        assert_eq!(float_ops(&f), Some(2 * 4 * 16 * 8));
    }

    #[test]
    fn vector_lanes_count_and_clips_and_index_arithmetic_do_not() {
        let f = parse_prim_func(
            r#"
def v(a: T.Buffer([64], "float32"), c: T.Buffer([64], "float32")):
    for i in T.serial(8):
        c[T.Ramp(i * 8, 1, 8)] = T.min(T.max(a[T.Ramp(i * 8, 1, 8)] * T.Broadcast(T.float32(2.0), 8), T.Broadcast(T.float32(0.0), 8)), T.Broadcast(T.float32(6.0), 8))
"#,
        )
        .unwrap();
        assert_eq!(float_ops(&f), Some(64));
    }
}
