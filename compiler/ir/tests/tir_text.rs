//! TIR text: the printer and the parser are inverses (every expression and
//! statement, with types, kinds, shapes, scopes and attributes), errors at a
//! `line:column`, and no mutation of a printed kernel makes the parser panic.
//! (The TIR passes, text in and text out: `tir_passes.rs`.)

use std::collections::{BTreeMap, HashMap};

use expect_test::{expect, Expect};
use kiln_ir::tir::{
    parse_expr, parse_prim_func, parse_stmt, print_expr, print_prim_func, print_stmt, verify_prim_func, BinOp, Buffer,
    CmpOp, Combiner, Expr, For, ForKind, Intrinsic, PrimFunc, Reduce, Scope, Stmt, ThreadAxis, TirType, Var,
};
use kiln_ir::DataType::{self, Bool, F16, F32, F64, I32, I64, I8, U64, U8};

// ---- structural equality, up to how sequences nest ----------------------------------

/// Sequences flattened, one-statement sequences unwrapped, empty ones `pass`.
fn normalize(s: Stmt) -> Stmt {
    s.map_post(&mut |s| match s {
        Stmt::Seq(v) => {
            let mut flat = Vec::new();
            for s in v {
                match s {
                    Stmt::Seq(inner) => flat.extend(inner),
                    s => flat.push(s),
                }
            }
            match flat.len() {
                0 => Stmt::nop(),
                1 => flat.pop().expect("one"),
                _ => Stmt::Seq(flat),
            }
        }
        s => s,
    })
}

/// A one-to-one map between the variables and buffers of two kernels.
#[derive(Default)]
struct Same {
    ids: HashMap<(bool, u32), u32>,
}

impl Same {
    fn id(&mut self, a: u32, b: u32) -> bool {
        *self.ids.entry((true, a)).or_insert(b) == b && *self.ids.entry((false, b)).or_insert(a) == a
    }
    fn var(&mut self, a: &Var, b: &Var) -> bool {
        a.ty == b.ty && self.id(a.id, b.id)
    }
    fn buf(&mut self, a: &Buffer, b: &Buffer) -> bool {
        (a.elem(), a.shape(), a.scope()) == (b.elem(), b.shape(), b.scope()) && self.id(a.id(), b.id())
    }
    fn exprs(&mut self, a: &[Expr], b: &[Expr]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| self.expr(x, y))
    }
    fn expr(&mut self, a: &Expr, b: &Expr) -> bool {
        use Expr::*;
        match (a, b) {
            (Int(x, t), Int(y, u)) => x == y && t == u,
            (Float(x, t), Float(y, u)) => x.to_bits() == y.to_bits() && t == u,
            (Var(x), Var(y)) => self.var(x, y),
            (Bin(o, a1, a2), Bin(p, b1, b2)) => o == p && self.expr(a1, b1) && self.expr(a2, b2),
            (Cmp(o, a1, a2), Cmp(p, b1, b2)) => o == p && self.expr(a1, b1) && self.expr(a2, b2),
            (And(a1, a2), And(b1, b2)) | (Or(a1, a2), Or(b1, b2)) => self.expr(a1, b1) && self.expr(a2, b2),
            (Not(x), Not(y)) => self.expr(x, y),
            (Select(a1, a2, a3), Select(b1, b2, b3)) => self.expr(a1, b1) && self.expr(a2, b2) && self.expr(a3, b3),
            (Cast(t, x), Cast(u, y)) => t == u && self.expr(x, y),
            (Load(x, i), Load(y, j)) => self.buf(x, y) && self.exprs(i, j),
            (Call(f, x, t), Call(g, y, u)) => f == g && t == u && self.exprs(x, y),
            (Ramp { base: a1, stride: a2, lanes: l }, Ramp { base: b1, stride: b2, lanes: m }) => {
                l == m && self.expr(a1, b1) && self.expr(a2, b2)
            }
            (Broadcast(x, l), Broadcast(y, m)) => l == m && self.expr(x, y),
            (Reduce(r), Reduce(s)) => {
                r.combiner == s.combiner
                    && r.axes.len() == s.axes.len()
                    && r.axes.iter().zip(&s.axes).all(|((v, n), (w, m))| n == m && self.var(v, w))
                    && self.expr(&r.source, &s.source)
            }
            _ => false,
        }
    }
    fn stmt(&mut self, a: &Stmt, b: &Stmt) -> bool {
        match (a, b) {
            (Stmt::For(l), Stmt::For(m)) => {
                l.kind == m.kind
                    && self.var(&l.var, &m.var)
                    && self.expr(&l.min, &m.min)
                    && self.expr(&l.extent, &m.extent)
                    && self.stmt(&l.body, &m.body)
            }
            (Stmt::Store { buffer: x, indices: i, value: v }, Stmt::Store { buffer: y, indices: j, value: w }) => {
                self.buf(x, y) && self.exprs(i, j) && self.expr(v, w)
            }
            (Stmt::Allocate { buffer: x, body: s }, Stmt::Allocate { buffer: y, body: t }) => {
                self.buf(x, y) && self.stmt(s, t)
            }
            (Stmt::If { cond: c, then_case: t, else_case: e }, Stmt::If { cond: d, then_case: u, else_case: f }) => {
                self.expr(c, d)
                    && self.stmt(t, u)
                    && match (e, f) {
                        (None, None) => true,
                        (Some(e), Some(f)) => self.stmt(e, f),
                        _ => false,
                    }
            }
            (Stmt::Seq(v), Stmt::Seq(w)) => v.len() == w.len() && v.iter().zip(w).all(|(s, t)| self.stmt(s, t)),
            (Stmt::Let { var: x, value: v, body: s }, Stmt::Let { var: y, value: w, body: t }) => {
                self.expr(v, w) && self.var(x, y) && self.stmt(s, t)
            }
            (Stmt::Evaluate(e), Stmt::Evaluate(f)) => self.expr(e, f),
            _ => false,
        }
    }
}

/// Print, parse, print: the same text and the same kernel.
fn round_trip(f: &PrimFunc) -> String {
    let text = print_prim_func(f);
    let g = parse_prim_func(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_prim_func(&g), text);
    assert_eq!((&g.name, g.num_outputs, &g.attrs), (&f.name, f.num_outputs, &f.attrs));
    let mut same = Same::default();
    assert!(
        f.params.len() == g.params.len() && f.params.iter().zip(&g.params).all(|(a, b)| same.buf(a, b)),
        "parameters differ:\n{text}"
    );
    assert!(same.stmt(&normalize(f.body.clone()), &normalize(g.body.clone())), "bodies differ:\n{text}");
    text
}

// ---- hand-built kernels ---------------------------------------------------------

fn kernel(name: &str, params: &[&Buffer], num_outputs: usize, body: Stmt) -> PrimFunc {
    let params = params.iter().map(|b| (*b).clone()).collect();
    PrimFunc { name: name.into(), params, num_outputs, body, attrs: BTreeMap::new() }
}

fn f32c(v: f64) -> Expr {
    Expr::float(v, F32)
}

fn ty(elem: DataType, lanes: u16) -> TirType {
    TirType::scalar(elem).with_lanes(lanes)
}

/// Every expression form, each as `T.evaluate(…)` inside a loop nest.
fn every_expr() -> PrimFunc {
    let a = Buffer::new("a", F32, vec![4, 8], Scope::Global);
    let idx = Buffer::new("idx", I32, vec![4], Scope::Global);
    let flag = Buffer::new("flag", Bool, vec![], Scope::Global);
    let out = Buffer::new("out", F32, vec![4, 8], Scope::Global);
    let (i, j, k, r) = (Var::index("i"), Var::index("j"), Var::index("k"), Var::new("r", TirType::scalar(I32)));
    let (vi, vj) = (Expr::var(&i), Expr::var(&j));
    let aij = Expr::Load(a.clone(), vec![vi.clone(), vj.clone()]);
    let not = |e: Expr| Expr::Not(Box::new(e));
    let x8 = Expr::Broadcast(Box::new(aij.clone()), 8);
    let mut exprs = vec![
        Expr::int(-5),
        Expr::int(i64::MIN),
        Expr::int(i64::MAX),
        Expr::Int(7, TirType::scalar(I32)),
        Expr::Int(-1, TirType::scalar(U64)),
        Expr::Int(200, TirType::scalar(U8)),
        Expr::Int(1, TirType::BOOL),
        Expr::Int(0, TirType::BOOL),
        Expr::Int(2, TirType::BOOL),
        Expr::Int(3, ty(I64, 4)),
        Expr::Int(1, ty(Bool, 4)),
        Expr::Int(3, TirType::scalar(F32)),
        Expr::Float(2.5, TirType::scalar(I32)),
        Expr::Float(1.0, ty(F32, 8)),
    ];
    for v in [0.5, 0.1, 1e-5, 1e300, -0.0, 5e-324, 1.0 / 3.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
        exprs.push(f32c(v));
    }
    exprs.push(Expr::float(65504.0, F16));
    exprs.push(Expr::float(std::f64::consts::PI, F64));
    let ops =
        [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::FloorDiv, BinOp::FloorMod, BinOp::Min, BinOp::Max];
    exprs.extend(ops.iter().map(|&op| Expr::bin(op, vi.clone(), Expr::bin(op, vj.clone(), Expr::int(-3)))));
    let cmps = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
    exprs.extend(cmps.iter().map(|&op| Expr::cmp(op, vi.clone(), vj.clone())));
    let lt = Expr::cmp(CmpOp::Lt, vi.clone(), Expr::int(2));
    exprs.extend([
        Expr::and(lt.clone(), Expr::or(Expr::Int(1, TirType::BOOL), not(lt.clone()))),
        Expr::or(Expr::and(lt.clone(), lt.clone()), lt.clone()),
        // `not` binds tighter than any infix operator.
        Expr::bin(BinOp::Add, not(vi.clone()), vj.clone()),
        Expr::cmp(CmpOp::Eq, not(vi.clone()), vj.clone()),
        not(not(Expr::Load(flag.clone(), vec![]))),
        not(Expr::int(-5)),
        Expr::select(lt.clone(), aij.clone(), f32c(0.0)),
        Expr::cast(TirType::scalar(F32), Expr::Load(idx.clone(), vec![vi.clone()])),
        Expr::cast(ty(I32, 8), x8.clone()),
        Expr::Load(a.clone(), vec![vi.clone() * Expr::int(8) + vj.clone()]),
        Expr::Load(flag.clone(), vec![Expr::int(0)]),
        Expr::Ramp { base: Box::new(vi.clone() * Expr::int(8)), stride: Box::new(Expr::int(1)), lanes: 8 },
        Expr::Ramp { base: Box::new(Expr::Int(0, TirType::scalar(I32))), stride: Box::new(Expr::int(2)), lanes: 4 },
        Expr::Load(
            a.clone(),
            vec![
                Expr::Broadcast(Box::new(vi.clone()), 8),
                Expr::Ramp { base: Box::new(Expr::int(0)), stride: Box::new(Expr::int(1)), lanes: 8 },
            ],
        ),
        x8.clone(),
        // Calls whose type is not their first argument's print it.
        Expr::call(Intrinsic::Fabs, vec![x8.clone()], TirType::scalar(F32)),
        Expr::call(Intrinsic::Barrier, vec![], TirType::scalar(I32)),
        Expr::call(Intrinsic::Barrier, vec![], TirType::INDEX),
        Expr::call(Intrinsic::CheckIndex, vec![vi.clone(), Expr::int(4)], TirType::INDEX),
        Expr::Reduce(Box::new(Reduce {
            combiner: Combiner::Sum,
            source: Expr::Load(a.clone(), vec![vi.clone(), Expr::var(&k)]),
            axes: vec![(k.clone(), 8)],
        })),
        Expr::Reduce(Box::new(Reduce {
            combiner: Combiner::Max,
            source: Expr::Load(a.clone(), vec![Expr::cast(TirType::INDEX, Expr::var(&r)), Expr::var(&k)]),
            axes: vec![(r.clone(), 4), (k.clone(), 8)],
        })),
    ]);
    for c in [Combiner::Min, Combiner::Prod] {
        let source = Expr::Load(a.clone(), vec![Expr::var(&k), vj.clone()]);
        exprs.push(Expr::Reduce(Box::new(Reduce { combiner: c, source, axes: vec![(k.clone(), 4)] })));
    }
    use Intrinsic::*;
    for f in [
        Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Erf, Fabs, Floor, Ceil, Round, Sin, Cos, Tan, Asin, Acos, Atan, Sinh,
        Cosh, Asinh, Acosh, Atanh,
    ] {
        exprs.push(Expr::call(f, vec![aij.clone()], TirType::scalar(F32)));
    }
    for f in [Pow, Fmod, Ldexp, LdexpNormal] {
        exprs.push(Expr::call(f, vec![aij.clone(), f32c(2.0)], TirType::scalar(F32)));
    }
    for f in [BitAnd, BitOr, BitXor, ShiftLeft, ShiftRight] {
        exprs.push(Expr::call(f, vec![vi.clone(), vj.clone()], TirType::INDEX));
    }
    exprs.push(Expr::call(BitNot, vec![vi.clone()], TirType::INDEX));
    let mut body: Vec<Stmt> = exprs.into_iter().map(Stmt::Evaluate).collect();
    body.push(Stmt::Store { buffer: out.clone(), indices: vec![vi.clone(), vj.clone()], value: aij });
    let nest = Stmt::for_loop(i, 4, ForKind::Parallel, Stmt::for_loop(j, 8, ForKind::Serial, Stmt::Seq(body)));
    kernel("every_expr", &[&a, &idx, &flag, &out], 1, nest)
}

/// Every statement form, loop kind and binding form.
fn every_stmt() -> PrimFunc {
    let x = Buffer::new("x", F32, vec![16], Scope::Global);
    let y = Buffer::new("y", F32, vec![16], Scope::Local);
    let z = Buffer::new("z", I8, vec![2, 2], Scope::Shared);
    let tmp = Buffer::new("tmp", F32, vec![4], Scope::Local);
    let sh = Buffer::new("sh", F32, vec![8, 2], Scope::Shared);
    let [b, t, v, u, w] = ["b", "t", "v", "u", "w"].map(Var::index);
    let q = Var::new("q", TirType::scalar(I32));
    let n = Var::new("n", TirType::scalar(I32));
    let vec8 = Var::new("vec", ty(F32, 8));
    let store = |buf: &Buffer, i: Expr, value: Expr| Stmt::Store { buffer: buf.clone(), indices: vec![i], value };
    let barrier = Stmt::Evaluate(Expr::call(Intrinsic::Barrier, vec![], TirType::scalar(I32)));
    let threads = Stmt::for_loop(
        b.clone(),
        2,
        ForKind::ThreadBinding(ThreadAxis::BlockX),
        Stmt::for_loop(
            t.clone(),
            8,
            ForKind::ThreadBinding(ThreadAxis::ThreadX),
            store(&x, Expr::var(&b) * Expr::int(8) + Expr::var(&t), f32c(1.0)),
        ),
    );
    let other_axes = [ThreadAxis::BlockY, ThreadAxis::BlockZ, ThreadAxis::ThreadY, ThreadAxis::ThreadZ]
        .into_iter()
        .rev()
        .fold(barrier.clone(), |body, axis| Stmt::for_loop(t.clone(), 1, ForKind::ThreadBinding(axis), body));
    let cond = Expr::cmp(CmpOp::Lt, Expr::var(&n), Expr::Int(2, TirType::scalar(I32)));
    let body = Stmt::Seq(vec![
        threads,
        other_axes,
        // Not the last statement: its scope ends before the next.
        Stmt::Allocate {
            buffer: tmp.clone(),
            body: Box::new(Stmt::seq(vec![
                Stmt::for_loop(v.clone(), 4, ForKind::Vectorized, store(&tmp, Expr::var(&v), f32c(0.0))),
                Stmt::for_loop(
                    u.clone(),
                    4,
                    ForKind::Unrolled,
                    store(&y, Expr::var(&u), Expr::Load(tmp.clone(), vec![Expr::var(&u)])),
                ),
            ])),
        },
        Stmt::Let {
            var: n.clone(),
            value: Expr::Int(3, TirType::scalar(I32)),
            body: Box::new(Stmt::Seq(vec![
                Stmt::If {
                    cond: cond.clone(),
                    then_case: Box::new(barrier.clone()),
                    else_case: Some(Box::new(Stmt::nop())),
                },
                Stmt::If {
                    cond: cond.clone(),
                    then_case: Box::new(barrier.clone()),
                    else_case: Some(Box::new(store(&x, Expr::int(0), f32c(2.0)))),
                },
            ])),
        },
        Stmt::If { cond: Expr::Int(1, TirType::BOOL), then_case: Box::new(Stmt::Seq(vec![])), else_case: None },
        Stmt::For(Box::new(For {
            var: w.clone(),
            min: Expr::int(2),
            extent: Expr::int(6),
            kind: ForKind::Serial,
            body: store(&x, Expr::var(&w), f32c(3.0)),
        })),
        Stmt::for_loop(
            b.clone(),
            2,
            ForKind::Serial,
            Stmt::For(Box::new(For {
                var: w.clone(),
                min: Expr::var(&b),
                extent: Expr::int(6) - Expr::var(&b),
                kind: ForKind::Serial,
                body: Stmt::nop(),
            })),
        ),
        Stmt::For(Box::new(For {
            var: q.clone(),
            min: Expr::Int(1, TirType::scalar(I32)),
            extent: Expr::Int(2, TirType::scalar(I32)),
            kind: ForKind::Serial,
            body: Stmt::Store {
                buffer: z.clone(),
                indices: vec![Expr::cast(TirType::INDEX, Expr::var(&q)), Expr::int(0)],
                value: Expr::Int(-7, TirType::scalar(I8)),
            },
        })),
        Stmt::Evaluate(Expr::Int(5, TirType::scalar(I32))),
        Stmt::Seq(vec![Stmt::Seq(vec![store(&x, Expr::int(1), f32c(1.0))]), Stmt::Seq(vec![])]),
        Stmt::Let {
            var: n.clone(),
            value: Expr::Int(4, TirType::scalar(I32)),
            body: Box::new(store(&x, Expr::cast(TirType::INDEX, Expr::var(&n)), f32c(4.0))),
        },
        // The last statement: its scope is the rest of the block.
        Stmt::Let {
            var: vec8.clone(),
            value: Expr::Broadcast(Box::new(f32c(1.5)), 8),
            body: Box::new(Stmt::Allocate {
                buffer: sh.clone(),
                body: Box::new(Stmt::seq(vec![
                    Stmt::Store {
                        buffer: sh.clone(),
                        indices: vec![Expr::Ramp {
                            base: Box::new(Expr::int(0)),
                            stride: Box::new(Expr::int(2)),
                            lanes: 8,
                        }],
                        value: Expr::var(&vec8),
                    },
                    Stmt::Store {
                        buffer: sh.clone(),
                        indices: vec![Expr::int(1), Expr::int(1)],
                        value: Expr::Load(y.clone(), vec![Expr::int(0)]),
                    },
                ])),
            }),
        },
    ]);
    let mut f = kernel("every_stmt", &[&x, &y, &z], 2, body);
    f.attrs.insert("schedule".into(), "tiled \"quoted\"\nnext line\\".into());
    f.attrs.insert("ünï cödé".into(), "\u{7f}\t\u{0}".into());
    f
}

/// Names the printer has to make distinct or into identifiers.
fn awkward_names() -> PrimFunc {
    let input = Buffer::new("input.1", F32, vec![4], Scope::Global);
    let x = Buffer::new("x", F32, vec![4], Scope::Global);
    let [i1, i2, i_1, kw, xv, empty, slash, t, num] =
        ["i", "i", "i_1", "for", "x", "", "onnx::Gemm/out", "T.x", "7.5"].map(Var::index);
    let [thread, inf] = ["thread", "inf"].map(Var::index);
    let copy = |v: &Var, inner: Stmt| {
        Stmt::for_loop(
            v.clone(),
            4,
            ForKind::Serial,
            Stmt::seq(vec![
                Stmt::Store {
                    buffer: x.clone(),
                    indices: vec![Expr::var(v)],
                    value: Expr::Load(input.clone(), vec![Expr::var(v)]),
                },
                inner,
            ]),
        )
    };
    let body = Stmt::seq(vec![
        copy(&i1, copy(&i2, copy(&i_1, Stmt::nop()))),
        copy(&i1, Stmt::nop()),
        copy(&kw, copy(&xv, copy(&empty, Stmt::nop()))),
        copy(&slash, copy(&t, copy(&num, Stmt::nop()))),
        // Words of the text that are names where a name can stand.
        copy(
            &thread,
            Stmt::For(Box::new(For {
                var: inf.clone(),
                min: Expr::var(&thread),
                extent: Expr::int(2),
                kind: ForKind::ThreadBinding(ThreadAxis::ThreadY),
                body: Stmt::Evaluate(Expr::call(Intrinsic::Exp, vec![Expr::var(&inf)], TirType::INDEX)),
            })),
        ),
    ]);
    kernel("fused.awkward", &[&input, &x], 0, body)
}

#[test]
fn every_expression_round_trips() {
    let text = round_trip(&every_expr());
    for line in [
        "T.evaluate(-9223372036854775808)",
        "T.evaluate(T.uint64(-1))",
        "T.evaluate(T.bool(2))",
        "T.evaluate(T.int64x4(3))",
        "T.evaluate(T.boolx4(1))",
        "T.evaluate(T.float32(3))",
        "T.evaluate(T.int32(2.5))",
        "T.evaluate(T.float32(-0.0))",
        "T.evaluate(T.float32(-inf))",
        "T.evaluate(T.float32(nan))",
        "T.evaluate(T.float32(5e-324))",
        "T.evaluate((not i + j))",
        "T.evaluate(T.fabs(T.Broadcast(a[i, j], 8), dtype=\"float32\"))",
        "T.evaluate(T.tvm_storage_sync())",
        "T.evaluate(T.tvm_storage_sync(dtype=\"int64\"))",
        "T.evaluate(T.kiln.check_index(i, 4))",
        "T.evaluate(T.reduce_max(a[T.Cast(\"int64\", r), k], axes=[r: T.int32(4), k: 8]))",
        "T.evaluate(not not flag[])",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[test]
fn every_statement_round_trips() {
    expect![[r#"
        @T.prim_func
        def every_stmt(x: T.Buffer([16], "float32"), y: T.Buffer([16], "float32", scope="local"), z: T.Buffer([2, 2], "int8", scope="shared")):
            T.num_outputs(2)
            T.func_attr({"schedule": "tiled \"quoted\"\nnext line\\"})
            T.func_attr({"ünï cödé": "\u{7f}\t\0"})
            for b in T.thread_binding(2, thread="blockIdx.x"):
                for t in T.thread_binding(8, thread="threadIdx.x"):
                    x[((b * 8) + t)] = T.float32(1.0)
            for t in T.thread_binding(1, thread="blockIdx.y"):
                for t in T.thread_binding(1, thread="blockIdx.z"):
                    for t in T.thread_binding(1, thread="threadIdx.y"):
                        for t in T.thread_binding(1, thread="threadIdx.z"):
                            T.evaluate(T.tvm_storage_sync())
            tmp = T.alloc_buffer([4], "float32", scope="local")
            for v in T.vectorized(4):
                tmp[v] = T.float32(0.0)
            for u in T.unroll(4):
                y[u] = tmp[u]
            del tmp
            n: T.int32 = T.int32(3)
            if (n < T.int32(2)):
                T.evaluate(T.tvm_storage_sync())
            else:
                pass
            if (n < T.int32(2)):
                T.evaluate(T.tvm_storage_sync())
            else:
                x[0] = T.float32(2.0)
            del n
            if True:
                pass
            for w in T.serial(2, 2 + 6):
                x[w] = T.float32(3.0)
            for b in T.serial(2):
                for w in T.serial(b, b + (6 - b)):
                    pass
            for q: T.int32 in T.serial(T.int32(1), T.int32(1) + T.int32(2)):
                z[T.Cast("int64", q), 0] = T.int8(-7)
            T.evaluate(T.int32(5))
            x[1] = T.float32(1.0)
            pass
            n: T.int32 = T.int32(4)
            x[T.Cast("int64", n)] = T.float32(4.0)
            del n
            vec: T.float32x8 = T.Broadcast(T.float32(1.5), 8)
            sh = T.alloc_buffer([8, 2], "float32", scope="shared")
            sh[T.Ramp(0, 2, 8)] = vec
            sh[1, 1] = y[0]
    "#]]
    .assert_eq(&round_trip(&every_stmt()));
}

#[test]
fn names_print_distinct_and_read_back() {
    expect![[r#"
        @T.prim_func
        def fused.awkward(input.1: T.Buffer([4], "float32"), x: T.Buffer([4], "float32")):
            T.num_outputs(0)
            for i in T.serial(4):
                x[i] = input.1[i]
                for i_1 in T.serial(4):
                    x[i_1] = input.1[i_1]
                    for i_1_1 in T.serial(4):
                        x[i_1_1] = input.1[i_1_1]
            for i in T.serial(4):
                x[i] = input.1[i]
            for for_ in T.serial(4):
                x[for_] = input.1[for_]
                for x_1 in T.serial(4):
                    x[x_1] = input.1[x_1]
                    for _ in T.serial(4):
                        x[_] = input.1[_]
            for onnx__Gemm_out in T.serial(4):
                x[onnx__Gemm_out] = input.1[onnx__Gemm_out]
                for T_.x in T.serial(4):
                    x[T_.x] = input.1[T_.x]
                    for _7.5 in T.serial(4):
                        x[_7.5] = input.1[_7.5]
            for thread in T.serial(4):
                x[thread] = input.1[thread]
                for inf in T.thread_binding(thread, thread + 2, thread="threadIdx.y"):
                    T.evaluate(T.exp(inf))
    "#]]
    .assert_eq(&round_trip(&awkward_names()));
}

/// Kernels as kiln lowers and schedules them: a GPU-tiled matmul (thread
/// bindings, shared memory, barriers) and a dense layer with a per-lane
/// partial sum (`nn.relu_rf`, whose scope ends before the epilogue).
const REAL_KERNELS: [&str; 2] =
    [include_str!("data/tir/gpu_tiled_matmul.tir"), include_str!("data/tir/dense_rfactor.tir")];

#[test]
fn real_kernels_read_back_unchanged() {
    for text in REAL_KERNELS {
        let f = parse_prim_func(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        verify_prim_func(&f).expect("well-formed");
        assert_eq!(round_trip(&f), text);
    }
    // The partial sums' scope ends before the epilogue's store.
    let f = parse_prim_func(REAL_KERNELS[1]).expect("parses");
    let Stmt::For(l) = &f.body else { panic!("{:?}", f.body) };
    assert!(matches!(&l.body, Stmt::Seq(v) if v.len() == 3 && matches!(v[1], Stmt::Allocate { .. })));
}

#[test]
fn statements_and_expressions_parse_on_their_own() {
    let a = Buffer::new("a", F32, vec![4, 4], Scope::Global);
    let i = Var::index("i");
    let e = parse_expr("a[i, 0] * T.float32(2.0) + a[i + 1, 3] // 2", &[a.clone()], &[i.clone()]).expect("parses");
    assert_eq!(print_expr(&e), "((a[i, 0] * T.float32(2.0)) + (a[(i + 1), 3] // 2))");
    let Expr::Bin(BinOp::Add, lhs, _) = &e else { panic!("{e:?}") };
    let Expr::Bin(BinOp::Mul, x, _) = &**lhs else { panic!("{lhs:?}") };
    assert!(matches!(&**x, Expr::Load(b, idx) if *b == a && idx[0] == Expr::var(&i)), "{x:?}");
    let e = parse_expr("1 - 2 - 3 < 4 and not True or False", &[], &[]).expect("parses");
    assert_eq!(print_expr(&e), "(((((1 - 2) - 3) < 4) and not True) or False)");
    let s = "for j in T.serial(4):\n    a[i, j] = T.float32(0.0)\n";
    let stmt = parse_stmt(s, &[a.clone()], &[i.clone()]).expect("parses");
    assert_eq!(print_stmt(&stmt), s);
}

/// `text` without its first line break and its common indentation.
fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let indent = text.lines().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min();
    text.lines().map(|l| format!("{}\n", l.get(indent.unwrap_or(0)..).unwrap_or(""))).collect()
}

// ---- errors ---------------------------------------------------------------------------

fn error(text: &str) -> String {
    match parse_prim_func(text) {
        Ok(f) => panic!("expected an error, parsed:\n{}", print_prim_func(&f)),
        Err(e) => e.to_string(),
    }
}

/// The error for `body` as the body of a kernel with the parameter `a: [4, 4]`.
fn check_error(body: &str, expected: Expect) {
    let body: String = dedent(body).lines().map(|l| format!("    {l}\n")).collect();
    expected.assert_eq(&error(&format!("def k(a: T.Buffer([4, 4], \"float32\")):\n{body}")));
}

#[test]
fn unbound_names_are_errors() {
    check_error(
        "a[i, 0] = T.float32(0.0)",
        expect!["2:7: parse error: unbound name `i`: no parameter, enclosing loop, `let` or allocation binds it"],
    );
    check_error(
        "
        for i in T.serial(4):
            a[i, 0] = T.float32(0.0)
        a[i, 1] = T.float32(1.0)
        ",
        expect!["4:7: parse error: `i` is used outside the loop, `let` or allocation that binds it (at 2:9)"],
    );
    check_error(
        "    T.evaluate(T.reduce_sum(a[k, 0], axes=[j: 4]))",
        expect!["2:31: parse error: unbound name `k`: no parameter, enclosing loop, `let` or allocation binds it"],
    );
    check_error(
        "b[0] = T.float32(0.0)",
        expect!["2:5: parse error: unbound name `b`: no parameter, enclosing loop, `let` or allocation binds it"],
    );
}

#[test]
fn one_name_is_one_variable_or_buffer() {
    check_error(
        "
        for i in T.serial(4):
            i: T.int32 = T.int32(0)
            pass
        ",
        expect!["3:9: parse error: `i` is the int64 variable bound at 2:9; one name is one variable or buffer"],
    );
    check_error("a: T.int64 = 0\npass", expect!["2:5: parse error: `a` is the float32 buffer of shape [4, 4] (global) declared at 1:7; one name is one variable or buffer"]);
    check_error(
        "    for i in T.serial(4):\n        i[0] = T.float32(0.0)",
        expect!["3:9: parse error: `i` is a variable, not a buffer"],
    );
    check_error("T.evaluate(a)", expect!["2:16: parse error: `a` is a buffer; read it as `a[…]`"]);
}

#[test]
fn del_ends_the_innermost_scope() {
    check_error(
        "pass\ndel a",
        expect!["3:9: parse error: `del a` must end the innermost allocation or `let` open in this block"],
    );
    check_error(
        "
        t = T.alloc_buffer([4], \"float32\", scope=\"local\")
        n: T.int32 = T.int32(1)
        del t
        ",
        expect!["4:9: parse error: `del t` must end the innermost allocation or `let` open in this block"],
    );
    check_error(
        "
        t = T.alloc_buffer([4], \"float32\", scope=\"local\")
        t[0] = T.float32(0.0)
        del t
        a[0, 0] = t[0]
        ",
        expect!["5:15: parse error: `t` is used outside the loop, `let` or allocation that binds it (at 2:5)"],
    );
}

#[test]
fn wrong_index_counts_are_errors() {
    check_error(
        "a[0, 0, 1] = T.float32(0.0)",
        expect!["2:5: parse error: `a` has 2 dimensions: expected 2 indices (or 1 once flattened), found 3"],
    );
    check_error(
        "a[0, 0] = a[0, 1, 2] + a[]",
        expect!["2:15: parse error: `a` has 2 dimensions: expected 2 indices (or 1 once flattened), found 3"],
    );
    check_error(
        "a[] = T.float32(0.0)",
        expect!["2:5: parse error: `a` has 2 dimensions: expected 2 indices (or 1 once flattened), found 0"],
    );
}

#[test]
fn unknown_dtypes_and_intrinsics_are_errors() {
    check_error("a[0, 0] = T.float31(0.0)", expect!["2:15: parse error: unknown dtype `float31`; expected float32, float16, float64, int64, int32, int16, int8, uint8, uint16, uint32, uint64, bool (with `xN` for N lanes)"]);
    check_error(
        "    t = T.alloc_buffer([4], \"floot32\", scope=\"local\")\n    pass",
        expect!["2:29: parse error: unknown dtype `floot32`; expected float32, float16, float64, int64, int32, int16, int8, uint8, uint16, uint32, uint64, bool (with `xN` for N lanes)"],
    );
    check_error(
        "    x: T.float32x0 = T.float32(0.0)\n    pass",
        expect!["2:10: parse error: the lanes of `float32x0` must be 1 to 65535"],
    );
    check_error("a[0, 0] = T.expp(a[0, 0])", expect!["2:15: parse error: unknown intrinsic `T.expp`"]);
    check_error(
        "    a[0, 0] = T.reduce_mean(a[0, 0], axes=[])",
        expect!["2:15: parse error: unknown reduction `T.reduce_mean`"],
    );
    check_error(
        "    for i in T.thread_binding(4, thread=\"warp.x\"):\n        pass",
        expect![[r#"2:41: parse error: unknown thread axis "warp.x"; expected blockIdx.x/y/z or threadIdx.x/y/z"#]],
    );
}

#[test]
fn bad_indentation_is_an_error() {
    // Back to a level no enclosing block has.
    check_error(
        "
        for i in T.serial(4):
            a[i, 0] = T.float32(0.0)
          a[i, 1] = T.float32(1.0)
        ",
        expect!["4:7: parse error: an indentation of 6 spaces matches no enclosing block (the nearest is 4)"],
    );
    // Deeper without a block to open.
    check_error(
        "
        a[0, 0] = T.float32(0.0)
            a[0, 1] = T.float32(1.0)
        ",
        expect!["3:9: parse error: unexpected indentation: no `for`, `if` or `else` opens a block here"],
    );
    // A block that is not indented.
    check_error(
        "
        for i in T.serial(4):
        a[i, 0] = T.float32(0.0)
        ",
        expect!["3:5: parse error: expected an indented block, found `a`"],
    );
    let tab = error("def k(a: T.Buffer([4], \"float32\")):\n\ta[0] = T.float32(0.0)\n");
    expect!["2:1: parse error: a tab in the indentation; indent with spaces"].assert_eq(&tab);
}

#[test]
fn truncated_input_is_an_error() {
    let text = print_prim_func(&every_stmt());
    let at = |needle: &str| text.find(needle).expect("in the kernel") + needle.len();
    expect![[r#"6:41: parse error: expected a thread axis such as "threadIdx.x", found the end of the input"#]]
        .assert_eq(&error(&text[..at("for b in T.thread_binding(2, thread=")]));
    expect!["19:9: parse error: expected the name whose scope ends, found the end of the input"]
        .assert_eq(&error(&text[..at("    del ")]));
    expect![[r#"2:34: parse error: expected a dtype string such as "float32", found the end of the input"#]]
        .assert_eq(&error(&text[..at("def every_stmt(x: T.Buffer([16], ")]));
    expect![[r#"43:14: parse error: expected a dtype string such as "float32", found the end of the input"#]]
        .assert_eq(&error(&text[..at("x[T.Cast(")]));
    expect!["1:1: parse error: expected `def`, found the end of the input"].assert_eq(&error(""));
    expect!["2:28: parse error: expected a statement, found the end of the input"]
        .assert_eq(&error("def k(a: T.Buffer([4], \"float32\")):\n    T.func_attr({\"a\": \"1\"})\n"));
}

#[test]
fn malformed_expressions_are_errors() {
    check_error(
        "a[0, 0] = T.float32(0.0) +",
        expect!["2:31: parse error: expected an expression, found the end of the input"],
    );
    check_error(
        "    for i in T.serial(2, 7 - 2):\n        pass",
        expect!["2:26: parse error: expected the end of the range `min + extent`"],
    );
    check_error("a[0, 0] = 1.5", expect!["2:15: parse error: a float constant needs its dtype, e.g. `T.float32(0.5)`"]);
    check_error(
        "T.evaluate(T.Ramp(0, 1, 0))",
        expect!["2:29: parse error: expected a number of lanes (1 to 65535), found `0`"],
    );
    check_error("T.evaluate(1 < 2 < 3)", expect!["2:22: parse error: comparisons do not chain; add parentheses"]);
    check_error("T.evaluate(T.Select(True, 1))", expect!["2:33: parse error: expected 3 arguments, found 2"]);
    check_error("T.evaluate(\"abc)", expect!["2:16: parse error: unterminated string"]);
    check_error("T.evaluate(-x)", expect!["2:17: parse error: expected a number, found `x`"]);
    check_error(
        "    T.evaluate(99999999999999999999)",
        expect!["2:16: parse error: integer `99999999999999999999` is too large"],
    );
    check_error("T.evaluate(1.5.2)", expect!["2:16: parse error: malformed number `1.5.`"]);
}

// ---- robustness -------------------------------------------------------------------------

/// The mutations' random choices, drawn (and shrunk) by proptest.
#[path = "support/randomized.rs"]
mod randomized;

/// `input` parses or fails, never panics; what parses prints as text that
/// reads back as itself. Whether it parsed.
fn reads_back_or_fails(input: &[u8]) -> bool {
    let text = String::from_utf8_lossy(input);
    let result = std::panic::catch_unwind(|| parse_prim_func(&text));
    let Ok(result) = result else { panic!("the parser panicked on:\n{text}") };
    let Ok(f) = result else { return false };
    let printed = print_prim_func(&f);
    let again = parse_prim_func(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}\nfrom\n{text}"));
    assert_eq!(print_prim_func(&again), printed);
    true
}

/// Truncations and byte mutations of printed kernels parse or fail, never
/// panic; what parses prints as text that reads back as itself.
#[test]
fn mutated_kernels_never_panic() {
    let mut seeds: Vec<String> = [every_expr(), every_stmt(), awkward_names()].iter().map(print_prim_func).collect();
    seeds.extend(REAL_KERNELS.map(String::from));
    // Every truncation at a line end.
    for seed in &seeds {
        for (k, _) in seed.bytes().enumerate().filter(|&(_, b)| b == b'\n') {
            reads_back_or_fails(&seed.as_bytes()[..k]);
        }
    }
    // Truncations elsewhere, and bytes replaced, removed or inserted.
    const ALPHABET: &[u8] = b" \n\t()[]{}:,.=+-*/%<>#\"\\_0123456789eTxaiknotdlsp";
    let parsed = std::cell::Cell::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(randomized::config(6000));
    let result = runner.run(&randomized::Choices::strategy(16), |mut r| {
        let mut m = seeds[r.below(seeds.len())].as_bytes().to_vec();
        if r.below(6) == 0 {
            m.truncate(r.below(m.len()));
        } else {
            for _ in 0..1 + r.below(3) {
                let k = r.below(m.len());
                match r.below(4) {
                    0 => m[k] = r.pick(ALPHABET),
                    1 => _ = m.remove(k),
                    2 => m.insert(k, r.pick(ALPHABET)),
                    _ => m[k] = r.below(256) as u8,
                }
            }
        }
        parsed.set(parsed.get() + usize::from(reads_back_or_fails(&m)));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(parsed.get() > 0, "no mutant parsed");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = format!("{}i{}", "(".repeat(10_000), ")".repeat(10_000));
    let e = parse_expr(&deep, &[], &[Var::index("i")]).expect_err("too deep").to_string();
    assert!(e.contains("nesting deeper than"), "{e}");
    let nots = format!("{}True", "not ".repeat(10_000));
    assert!(parse_expr(&nots, &[], &[]).is_err());
    let loops = |n: usize| -> String {
        let mut text = String::from("def k(a: T.Buffer([1], \"float32\")):\n");
        for d in 0..n {
            text += &format!("{}for i{d} in T.serial(1):\n", "    ".repeat(d + 1));
        }
        text + &"    ".repeat(n + 1) + "a[0] = T.float32(0.0)\n"
    };
    assert!(parse_prim_func(&loops(150)).is_ok());
    let e = parse_prim_func(&loops(1000)).expect_err("too deep").to_string();
    assert!(e.contains("nesting deeper than"), "{e}");
    let ok = format!("{}i{}", "(".repeat(150), ")".repeat(150));
    assert!(parse_expr(&ok, &[], &[Var::index("i")]).is_ok());
}
