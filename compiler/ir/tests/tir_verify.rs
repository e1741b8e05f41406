//! The TIR verifier (`tir::verify_prim_func`): what every TIR pass must
//! preserve, checked after each one in debug builds.

use kiln_ir::tir::{verify_prim_func, Buffer, Expr, ForKind, PrimFunc, Scope, Stmt, Var};
use kiln_ir::DataType::F32;

fn kernel(params: &[&Buffer], body: Stmt) -> PrimFunc {
    PrimFunc {
        name: "k".into(),
        params: params.iter().map(|b| (*b).clone()).collect(),
        num_outputs: 1,
        body,
        attrs: Default::default(),
    }
}

fn copy(from: &Buffer, to: &Buffer, i: &Var) -> Stmt {
    Stmt::Store { buffer: to.clone(), indices: vec![Expr::var(i)], value: Expr::Load(from.clone(), vec![Expr::var(i)]) }
}

#[test]
fn loops_lets_and_allocations_bind_what_their_bodies_use() {
    let (a, b) = (Buffer::new("a", F32, vec![4], Scope::Global), Buffer::new("b", F32, vec![4], Scope::Global));
    let t = Buffer::new("t", F32, vec![4], Scope::Local);
    let (i, j) = (Var::index("i"), Var::index("j"));
    let body = Stmt::seq(vec![
        Stmt::Allocate {
            buffer: t.clone(),
            body: Box::new(Stmt::for_loop(i.clone(), 4, ForKind::Serial, copy(&a, &t, &i))),
        },
        Stmt::for_loop(
            i.clone(),
            4,
            ForKind::Parallel,
            Stmt::Let { var: j.clone(), value: Expr::var(&i), body: Box::new(copy(&a, &b, &j)) },
        ),
    ]);
    verify_prim_func(&kernel(&[&a, &b], body)).expect("well-formed");
}

#[test]
fn unbound_variables_unknown_buffers_and_wrong_index_counts_are_refused() {
    let (a, b) = (Buffer::new("a", F32, vec![4], Scope::Global), Buffer::new("b", F32, vec![4], Scope::Global));
    let t = Buffer::new("t", F32, vec![4], Scope::Local);
    let (i, j) = (Var::index("i"), Var::index("j"));
    let cases = [
        // `j` is bound by no loop.
        (Stmt::for_loop(i.clone(), 4, ForKind::Serial, copy(&a, &b, &j)), "variable `j` is used outside"),
        // `i` is used after its loop.
        (
            Stmt::seq(vec![Stmt::for_loop(i.clone(), 4, ForKind::Serial, copy(&a, &b, &i)), copy(&a, &b, &i)]),
            "variable `i`",
        ),
        // `t` is read outside the Allocate that holds it.
        (
            Stmt::seq(vec![
                Stmt::Allocate { buffer: t.clone(), body: Box::new(Stmt::nop()) },
                Stmt::for_loop(i.clone(), 4, ForKind::Serial, copy(&t, &b, &i)),
            ]),
            "reads buffer `t`, which is neither a parameter nor allocated",
        ),
        // Two indices into a one-dimensional buffer.
        (
            Stmt::for_loop(
                i.clone(),
                4,
                ForKind::Serial,
                Stmt::Store {
                    buffer: b.clone(),
                    indices: vec![Expr::var(&i), Expr::var(&i)],
                    value: Expr::float(0.0, F32),
                },
            ),
            "has 2 indices",
        ),
    ];
    for (body, says) in cases {
        let e = verify_prim_func(&kernel(&[&a, &b], body)).expect_err(says).to_string();
        assert!(e.starts_with("kernel `k` is ill-formed TIR: ") && e.contains(says), "{e}");
    }
}
