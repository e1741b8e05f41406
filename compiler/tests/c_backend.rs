//! TE → TIR → C, compiled with the system C compiler and run: the kernels'
//! results must match values computed directly in Rust.

mod common;

use kiln::te::{compute, lower, placeholder};
use kiln::tir::transform::{flatten_buffers, simplify_prim_func};
use kiln::tir::{BinOp, Expr};
use kiln::DataType;

type Kernel3 = unsafe extern "C" fn(*const f32, *const f32, *mut f32, i64, i64);

#[test]
fn elementwise_add_relu_inlines_and_runs() {
    let a = placeholder("a", &[3, 5], DataType::F32);
    let b = placeholder("b", &[5], DataType::F32);
    let add = compute("add", &[3, 5], |i| a.at(i) + b.at(&i[1..]));
    let relu = compute("relu", &[3, 5], |i| Expr::bin(BinOp::Max, add.at(i), Expr::float(0.0, DataType::F32)));
    let f = lower("add_relu", &[a, b], &[relu]).expect("lower");
    let f = simplify_prim_func(flatten_buffers(f));
    let text = kiln::tir::print_prim_func(&f);
    assert!(!text.contains("alloc_buffer"), "the add must be inlined:\n{text}");
    let lib = common::c_library(&[f]);
    let k: libloading::Symbol<Kernel3> = unsafe { lib.library().get(b"add_relu") }.expect("symbol");
    let av: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
    let bv: Vec<f32> = (0..5).map(|i| i as f32 * 0.5 - 1.0).collect();
    let mut out = vec![0f32; 15];
    unsafe { k(av.as_ptr(), bv.as_ptr(), out.as_mut_ptr(), 0, 1) };
    for r in 0..3 {
        for c in 0..5 {
            assert_eq!(out[r * 5 + c], (av[r * 5 + c] + bv[c]).max(0.0));
        }
    }
}

#[test]
fn matmul_reduction_runs() {
    let (m, k, n) = (3, 7, 5);
    let f = common::matmul_kernel("matmul", m, k, n);
    let lib = common::c_library(&[f]);
    let kern: libloading::Symbol<Kernel3> = unsafe { lib.library().get(b"matmul") }.expect("symbol");
    let av: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32 - 2.0).collect();
    let bv: Vec<f32> = (0..k * n).map(|i| (i % 3) as f32 * 0.25).collect();
    let mut out = vec![0f32; m * n];
    unsafe { kern(av.as_ptr(), bv.as_ptr(), out.as_mut_ptr(), 0, 1) };
    for i in 0..m {
        for j in 0..n {
            let want: f32 = (0..k).map(|t| av[i * k + t] * bv[t * n + j]).sum();
            assert!((out[i * n + j] - want).abs() < 1e-5, "({i},{j}): {} vs {want}", out[i * n + j]);
        }
    }
}

/// The smallest int64 is written as `(-INT64_C(9223372036854775807) - 1)`:
/// `INT64_C(-9223372036854775808)` negates a literal that does not fit
/// (a compiler warning, and undefined in strict C).
#[test]
fn the_smallest_int64_constant_is_valid_c() {
    type KernelI64 = unsafe extern "C" fn(*const i64, *mut i64, i64, i64);
    let a = placeholder("a", &[3], DataType::I64);
    let min = Expr::Int(i64::MIN, kiln::tir::TirType::scalar(DataType::I64));
    let out = compute("clamp_low", &[3], |i| {
        Expr::select(Expr::cmp(kiln::tir::CmpOp::Lt, a.at(i), Expr::Int(0, min.ty())), min.clone(), a.at(i))
    });
    let f = simplify_prim_func(flatten_buffers(lower("clamp_low", &[a], &[out]).expect("lower")));
    let source = kiln::codegen::c::codegen_module(std::slice::from_ref(&f)).expect("C");
    assert!(
        source.contains("(-INT64_C(9223372036854775807) - 1)") && !source.contains("9223372036854775808"),
        "{source}"
    );
    let lib = common::c_library(&[f]);
    let k: libloading::Symbol<KernelI64> = unsafe { lib.library().get(b"clamp_low") }.expect("symbol");
    let input = [5i64, -1, 0];
    let mut got = [0i64; 3];
    unsafe { k(input.as_ptr(), got.as_mut_ptr(), 0, 1) };
    assert_eq!(got, [5, i64::MIN, 0]);
}
