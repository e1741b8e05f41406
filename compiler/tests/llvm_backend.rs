//! TE → TIR → LLVM: JIT-compiled kernels against values computed in Rust, and
//! the emitted assembly of an elementwise kernel uses vector registers.
#![cfg(feature = "llvm")]

mod common;

use kiln::codegen::llvm::{compile, Jit, LlvmTarget};
use kiln::te::{compute, lower, placeholder};
use kiln::tir::transform::{flatten_buffers, simplify_prim_func};
use kiln::tir::{BinOp, Expr, ForKind, PrimFunc, Stmt};
use kiln::DataType;

fn add_relu(n: usize, m: usize) -> PrimFunc {
    let a = placeholder("a", &[n, m], DataType::F32);
    let b = placeholder("b", &[m], DataType::F32);
    let add = compute("add", &[n, m], |i| a.at(i) + b.at(&i[1..]));
    let relu = compute("relu", &[n, m], |i| Expr::bin(BinOp::Max, add.at(i), Expr::float(0.0, DataType::F32)));
    simplify_prim_func(flatten_buffers(lower("add_relu", &[a, b], &[relu]).expect("lower")))
}

fn run(jit: &Jit, name: &str, args: &mut [&mut [f32]], tasks: i64) {
    let k = jit.kernel(name).expect("kernel");
    let ptrs: Vec<*mut u8> = args.iter_mut().map(|a| a.as_mut_ptr() as *mut u8).collect();
    for t in 0..tasks {
        unsafe { k(ptrs.as_ptr(), t, tasks) };
    }
}

#[test]
fn jit_elementwise_serial_and_task_sliced() {
    let (n, m) = (7, 13);
    let serial = add_relu(n, m);
    // The same kernel with its outer loop parallel: every task computes a slice.
    let mut parallel = serial.clone();
    parallel.name = "add_relu_par".into();
    if let Stmt::For(l) = &mut parallel.body {
        l.kind = ForKind::Parallel;
    }
    let jit = Jit::new("ew", &[serial, parallel]).expect("jit");
    let mut a: Vec<f32> = (0..n * m).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut b: Vec<f32> = (0..m).map(|i| i as f32 * 0.1 - 0.5).collect();
    for (name, tasks) in [("add_relu", 1), ("add_relu", 3), ("add_relu_par", 1), ("add_relu_par", 4)] {
        let mut out = vec![-1f32; n * m];
        run(&jit, name, &mut [&mut a, &mut b, &mut out], tasks);
        for i in 0..n {
            for j in 0..m {
                assert_eq!(out[i * m + j], (a[i * m + j] + b[j]).max(0.0), "{name} with {tasks} tasks at ({i},{j})");
            }
        }
    }
}

#[test]
fn jit_matmul() {
    let (m, k, n) = (5, 33, 9);
    let f = common::matmul_kernel("mm", m, k, n);
    let jit = Jit::new("mm", &[f]).expect("jit");
    let mut av: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut bv: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let mut out = vec![0f32; m * n];
    run(&jit, "mm", &mut [&mut av, &mut bv, &mut out], 1);
    for i in 0..m {
        for j in 0..n {
            let want: f32 = (0..k).map(|t| av[i * k + t] * bv[t * n + j]).sum();
            assert!((out[i * n + j] - want).abs() <= 1e-4 * want.abs().max(1.0));
        }
    }
}

#[test]
fn object_assembly_and_ir_are_emitted() {
    let target = LlvmTarget::parse("llvm -mcpu=haswell").expect("target");
    let out = compile("ew", &[add_relu(64, 256)], &target).expect("compile");
    // LLVM 14 prints `define i32 @add_relu(`, later versions add return attributes (`noundef`).
    let defined = out.llvm_ir.lines().any(|l| l.starts_with("define ") && l.contains(" i32 @add_relu("));
    assert!(defined, "{}", out.llvm_ir);
    assert!(out.llvm_ir.contains("noalias"));
    assert!(out.assembly.contains("ymm"), "AVX2 code expected for -mcpu=haswell");
    assert!(out.object.starts_with(b"\x7fELF"));
    assert!(LlvmTarget::parse("llvm -mcpu=native -bogus").is_err());
    assert!(LlvmTarget::parse("cuda").is_err());
}

/// Floor division and remainder by positive constants, of a loop variable
/// (known non-negative: emitted as unsigned division) and of a value below
/// zero (the corrected signed form), against Rust's `div_euclid`/`rem_euclid`
/// (which floor for positive divisors).
#[test]
fn floor_division_of_loop_variables_and_negative_values() {
    use kiln::tir::TirType;
    let n = 40usize;
    let a = placeholder("a", &[n], DataType::F32);
    let f32t = TirType::scalar(DataType::F32);
    let out = compute("out", &[n], |i| {
        let v = i[0].clone();
        let shifted = Expr::bin(BinOp::Sub, v.clone(), Expr::int(17));
        let terms = [
            Expr::bin(BinOp::FloorDiv, v.clone(), Expr::int(7)),
            Expr::bin(BinOp::FloorMod, v.clone(), Expr::int(7)),
            Expr::bin(BinOp::FloorDiv, shifted.clone(), Expr::int(5)),
            Expr::bin(BinOp::FloorMod, shifted, Expr::int(5)),
        ];
        let mut sum = a.at(i);
        for (k, t) in terms.into_iter().enumerate() {
            let weight = Expr::float(10f64.powi(2 * k as i32), DataType::F32);
            sum = sum + Expr::cast(f32t, t) * weight;
        }
        sum
    });
    let f = simplify_prim_func(flatten_buffers(lower("floordiv", &[a], &[out]).expect("lower")));
    let jit = Jit::new("floordiv", &[f]).expect("jit");
    let mut a: Vec<f32> = vec![0.0; n];
    let mut out = vec![0f32; n];
    run(&jit, "floordiv", &mut [&mut a, &mut out], 1);
    for (i, got) in out.iter().enumerate() {
        let (v, s) = (i as i64, i as i64 - 17);
        let want =
            (v.div_euclid(7) + v.rem_euclid(7) * 100 + s.div_euclid(5) * 10_000 + s.rem_euclid(5) * 1_000_000) as f32;
        assert_eq!(*got, want, "at {i}");
    }
}

/// A kernel is compiled once — its packed entry calls it, never holds an
/// inlined copy — and a copy stays the loop kiln wrote, not `memcpy` calls
/// that LLVM would unroll and expand into blocks too large to compile fast
/// (a 4 × 64 × 64 head transpose took half a second). It still copies right.
#[test]
fn kernels_compile_once_and_copies_stay_loops() {
    let (h, s, d) = (4usize, 64usize, 64usize);
    let x = placeholder("x", &[s, h * d], DataType::F32);
    // [s, h·d] → [h, s, d]: one contiguous run of d per (head, row).
    let heads = compute("heads", &[h, s, d], |i| {
        x.at(&[
            i[1].clone(),
            Expr::bin(BinOp::Add, Expr::bin(BinOp::Mul, i[0].clone(), Expr::int(d as i64)), i[2].clone()),
        ])
    });
    let f = simplify_prim_func(flatten_buffers(lower("heads", &[x], &[heads]).expect("lower")));
    let target = LlvmTarget::parse("llvm -mcpu=haswell").expect("target");
    let out = compile("copy", &[f.clone()], &target).expect("compile");
    assert!(!out.llvm_ir.contains("llvm.memcpy"), "{}", out.llvm_ir);
    let packed = out.llvm_ir.split("define ").find(|d| d.contains("@heads_packed(")).expect("packed entry");
    assert!(packed.contains("call i32 @heads("), "the packed entry calls the kernel: {packed}");
    let jit = Jit::new("copy", &[f]).expect("jit");
    let mut xv: Vec<f32> = (0..s * h * d).map(|i| i as f32).collect();
    let mut got = vec![0f32; h * s * d];
    run(&jit, "heads", &mut [&mut xv, &mut got], 1);
    for (k, v) in got.iter().enumerate() {
        let (head, row, col) = (k / (s * d), k / d % s, k % d);
        assert_eq!(*v, xv[row * h * d + head * d + col], "at {k}");
    }
}
