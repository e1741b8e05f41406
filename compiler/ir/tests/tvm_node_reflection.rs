//! Tests ported from TVM v0.16's `tests/python/ir/test_node_reflection.py`,
//! one per TVM test that kiln's API can express, named after it.
//!
//! TVM's tests save objects with `tvm.ir.save_json` and load them back.
//! kiln has no node reflection and no JSON form of its IR: its serializations
//! are its text formats — Relay text, whose `#[metadata]` section holds every
//! constant tensor's bytes (`print_module` → `parse_module`), and TIR text
//! (`print_expr` → `parse_expr`) — and `.npy` for a tensor. The ports check
//! that what TVM's tests save survives those.
//!
//! Not expressible in kiln:
//! - `test_make_smap`: a `Map`/`Array` of IR nodes saved as one object, with
//!   node sharing kept; kiln has no generic containers of IR nodes to save.
//! - `test_make_node`: building a node from its type key and fields
//!   (`tvm.ir.make_node("IntImm", …)`); kiln has no reflection registry.
//! - `test_env_func`: `EnvFunc`, a global packed function saved by name, and
//!   the test-only `attrs.TestAttrs`; kiln has neither a global function
//!   registry nor attrs nodes built by name.
//! - `test_dict`: that a Python object of a node class sees the class's
//!   Python-defined methods; kiln has no Python binding.
//! - `test_alloc_const`: TIR's `AllocateConst` (a buffer holding constant
//!   data); kiln's TIR has no allocation with constant contents (constant
//!   tensors stay Relay constants, placed by the executor plan).
//! - `test_pass_config` is ported with the pass-infrastructure tests, in
//!   `compiler/tests/tvm_pass_infra.rs` (it needs the `kiln` crate).

use kiln_ir::npy::{read_npy, write_npy};
use kiln_ir::relay::{parse_module, print_module, ExprKind, IRModule};
use kiln_ir::tir::{parse_expr, print_expr, BinOp, Buffer, Combiner, Expr, Reduce, Scope, Var};
use kiln_ir::{AttrValue, Attrs, DataType, Tensor};

/// A TIR expression saved as TIR text and read back.
fn tir_round_trip(e: &Expr, buffers: &[Buffer], vars: &[Var]) -> Expr {
    let text = print_expr(e);
    parse_expr(&text, buffers, vars).unwrap_or_else(|err| panic!("{err}\n{text}"))
}

/// A module whose functions (by name) return these constants.
fn constants_module(constants: &[(&str, Tensor)]) -> IRModule {
    let mut m = IRModule::new();
    for (name, t) in constants {
        let c = m.store.constant(t.clone());
        let f = m.store.function(Vec::new(), c, None, Attrs::new());
        m.add_function(*name, f).expect("function");
    }
    m
}

/// A module saved as Relay text and read back: structurally the same.
fn relay_round_trip(m: &IRModule) -> IRModule {
    let text = print_module(m);
    let back = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(back.structural_eq(m), "\n{}\n!=\n{text}", print_module(&back));
    back
}

/// The constant function `name` of `m` returns.
fn constant_of(m: &IRModule, name: &str) -> Tensor {
    let f = m.store.as_function(m.function(name).expect(name)).expect("function");
    let ExprKind::Constant(c) = m.store.kind(f.body) else { panic!("@{name} does not return a constant") };
    m.store.constant_data(*c).clone()
}

/// Deterministic values in [0, 1) (TVM's tests use `np.random.rand`).
fn rand(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

#[test]
fn test_const_saveload_json() {
    let x = Expr::constant(1.0, DataType::I32);
    let y = Expr::constant(10.0, DataType::I32);
    let z = Expr::bin(BinOp::Add, x, y);
    let z = Expr::bin(BinOp::Add, z.clone(), z);
    assert_eq!(tir_round_trip(&z, &[], &[]), z);
    // The same sum over Relay constants, through Relay text.
    let m = parse_module("def @main() { %0 = add(1, 10); add(%0, %0) }").expect("parse");
    relay_round_trip(&m);
}

#[test]
fn test_infinity_value() {
    for dtype in [DataType::F64, DataType::F32] {
        for value in [f64::INFINITY, f64::NEG_INFINITY] {
            let x = Expr::float(value, dtype);
            assert_eq!(tir_round_trip(&x, &[], &[]), x, "{value} {dtype}");
            let back = relay_round_trip(&constants_module(&[("main", Tensor::scalar(dtype, value))]));
            let c = constant_of(&back, "main");
            assert_eq!((c.dtype(), c.get_f64(0)), (dtype, value));
        }
    }
}

#[test]
fn test_minmax_value() {
    // `tvm.tir.min_value("float32")` and `max_value`: the lowest and the highest finite float32.
    for value in [f32::MIN, f32::MAX] {
        let x = Expr::float(value as f64, DataType::F32);
        assert_eq!(tir_round_trip(&x, &[], &[]), x, "{value}");
        // Relay prints a scalar float32 as its shortest literal (`3.4028235e38f`), which must read back.
        let back = relay_round_trip(&constants_module(&[("main", Tensor::scalar(DataType::F32, value as f64))]));
        assert_eq!(constant_of(&back, "main").to_f32_vec(), [value]);
    }
}

/// TVM saves the tensor `B` of `te.compute((2,), lambda i: te.sum(A[i, k], axis=k))`
/// and checks that its reduction keeps its combiner. kiln saves no TE
/// operation; the body it lowers, the reduction, round-trips through TIR text.
#[test]
fn test_make_sum() {
    let a = Buffer::new("A", DataType::F32, vec![2, 10], Scope::Global);
    let (i, k) = (Var::index("i"), Var::index("k"));
    let source = Expr::Load(a.clone(), vec![Expr::var(&i), Expr::var(&k)]);
    let sum = Expr::Reduce(Box::new(Reduce { combiner: Combiner::Sum, source, axes: vec![(k, 10)] }));
    let back = tir_round_trip(&sum, &[a.clone()], &[i.clone()]);
    let Expr::Reduce(r) = &back else { panic!("not a reduction: {}", print_expr(&back)) };
    assert_eq!(r.combiner, Combiner::Sum);
    assert_eq!(r.axes.iter().map(|(v, n)| (v.name.to_string(), *n)).collect::<Vec<_>>(), [("k".to_string(), 10)]);
    // The reduction axis is bound anew when read: equal up to its renaming.
    assert_eq!(print_expr(&back), print_expr(&sum));
}

/// TVM saves a non-printable string (stored base64) and a printable one.
/// kiln's strings live in attributes, and Relay text writes every character
/// but `"`, `\`, newline and tab as itself.
#[test]
fn test_string() {
    for s in ["xy\x01z", "xyz", "a \"quoted\" \\ line\n\tend"] {
        let mut m = IRModule::new();
        let x = m.store.var("x", None);
        let f = m.store.function(vec![x], x, None, Attrs::from_pairs([("name", AttrValue::Str(s.into()))]));
        m.add_function("main", f).expect("main");
        let back = relay_round_trip(&m);
        let g = back.store.as_function(back.main().expect("main")).expect("function");
        assert_eq!(g.attrs.get("name"), Some(&AttrValue::Str(s.into())), "{s:?}");
    }
}

#[test]
fn test_ndarray() {
    let t = Tensor::from_f64(DataType::F64, vec![4], &rand(4, 1));
    // `.npy`, kiln's file form of a tensor …
    let back = read_npy(&write_npy(&t)).expect("npy");
    assert_eq!(back, t);
    assert_eq!(back.to_f64_vec(), t.to_f64_vec());
    // … and a Relay constant, in the metadata section of the text.
    let m = relay_round_trip(&constants_module(&[("main", t.clone())]));
    assert_eq!(constant_of(&m, "main").to_f64_vec(), t.to_f64_vec());
}

/// TVM saves `{"key1": array, "key2": array}`; kiln's text names tensors by
/// the global functions returning them.
#[test]
fn test_ndarray_dict() {
    let m1 = [
        ("key1", Tensor::from_f64(DataType::F64, vec![4], &rand(4, 2))),
        ("key2", Tensor::from_f64(DataType::F64, vec![4], &rand(4, 3))),
    ];
    let m2 = relay_round_trip(&constants_module(&m1));
    for (key, t) in &m1 {
        assert_eq!(&constant_of(&m2, key), t, "{key}");
    }
}
