//! Schedule primitives: each rewrite of a kernel computes the same values as
//! the kernel as lowered (LLVM JIT and the C backend, serial and task-sliced),
//! and primitives that do not apply are errors naming the kernel.
#![cfg(feature = "llvm")]

mod common;

use kiln::backend::host::KernelLibrary;
use kiln::codegen::llvm::Jit;
use kiln::schedule::Schedule;
use kiln::te::{compute, lower, lower_with, placeholder, reduce_axis, sum, Tensor};
use kiln::tir::transform::{
    flatten_buffers, lower_intrinsics, remove_noops, simplify_prim_func, unroll_loops, vectorize_loops,
};
use kiln::tir::{BinOp, CmpOp, Expr, ForKind, PrimFunc, Stmt};
use kiln::DataType;
use proptest::prelude::*;

/// The backend half of the TIR pipeline.
fn finish(f: PrimFunc) -> PrimFunc {
    remove_noops(vectorize_loops(unroll_loops(simplify_prim_func(lower_intrinsics(flatten_buffers(f))))))
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + seed as f32 * 0.61) * 0.731).sin()).collect()
}

/// Run `f` (flattened) with the given inputs on the JIT and through C; outputs per backend.
fn run_both(f: &PrimFunc, inputs: &[Vec<f32>], tasks: i64) -> Vec<Vec<f32>> {
    let mut results = Vec::new();
    let out_len: usize = f.params.last().expect("an output").numel();
    let jit = Jit::new(&f.name, std::slice::from_ref(f)).expect("jit");
    let k = jit.kernel(&f.name).expect("kernel");
    let lib = common::c_library(std::slice::from_ref(f));
    let ck = lib.packed(&f.name).expect("C kernel");
    for kernel in [k, ck] {
        let mut args: Vec<Vec<f32>> = inputs.to_vec();
        args.push(vec![f32::NAN; out_len]);
        let ptrs: Vec<*mut u8> = args.iter_mut().map(|a| a.as_mut_ptr() as *mut u8).collect();
        for t in 0..tasks {
            // SAFETY: the buffers have the kernel's parameter sizes.
            unsafe { kernel(ptrs.as_ptr(), t, tasks) };
        }
        results.push(args.pop().expect("output"));
    }
    results
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{what}: element {i}: {a} vs {b}");
    }
}

/// `f` scheduled by `schedule` computes what `f` as lowered computes.
fn check(f: PrimFunc, inputs: &[Vec<f32>], schedule: impl FnOnce(&mut Schedule)) -> PrimFunc {
    let reference = run_both(&finish(f.clone()), inputs, 1);
    let mut s = Schedule::new(f);
    schedule(&mut s);
    let scheduled = finish(s.into_func());
    for tasks in [1, 3] {
        for (got, want) in run_both(&scheduled, inputs, tasks).iter().zip(&reference) {
            assert_close(got, want, &format!("{} with {tasks} tasks", scheduled.name));
        }
    }
    scheduled
}

fn matmul(name: &str, m: usize, k: usize, n: usize) -> (PrimFunc, Vec<Vec<f32>>) {
    let a = placeholder("a", &[m, k], DataType::F32);
    let b = placeholder("b", &[k, n], DataType::F32);
    let bias = placeholder("bias", &[n], DataType::F32);
    let kk = reduce_axis(k, "k");
    let kv = Expr::var(&kk.0);
    let c = compute("c", &[m, n], |i| {
        sum(a.at(&[i[0].clone(), kv.clone()]) * b.at(&[kv.clone(), i[1].clone()]), &[kk.clone()])
    });
    let out = compute("out", &[m, n], |i| c.at(i) + bias.at(&i[1..]));
    let f = kiln::tir::transform::fuse_sibling_loops(lower(name, &[a, b, bias], &[out]).expect("lower"));
    (f, vec![data(m * k, 1), data(k * n, 2), data(n, 3)])
}

#[test]
fn split_with_tails_reorder_fuse_and_tiles_keep_matmul_values() {
    let (f, inputs) = matmul("mm", 7, 19, 37);
    let scheduled = check(f, &inputs, |s| {
        let i = s.get_loop("ax0").expect("i");
        let j = s.get_loop("ax1").expect("j");
        let (io, ii) = s.split(&i, 3).expect("split i (tail)");
        let (jo, ji) = s.split(&j, 16).expect("split j (tail)");
        s.reorder(&[io.clone(), jo.clone(), ii, ji]).expect("reorder");
        let tile = s.decompose_reduction(&jo, true).expect("decompose");
        s.unroll(&tile.update_loops[0]).expect("unroll");
        s.vectorize(&tile.update_loops[1]).expect("vectorize (falls back on the tail guard)");
        let fused = s.fuse(&io, &jo).expect("fuse");
        s.parallel(&fused).expect("parallel");
    });
    let mut parallel = false;
    scheduled.body.visit(&mut |s| parallel |= matches!(s, Stmt::For(l) if l.kind == ForKind::Parallel));
    assert!(parallel);
}

/// `split_overlapping`: 37 columns as three whole 16-column tiles, the last
/// moved back to columns 21–36 (recomputing 21–31); each tile initializes,
/// reduces and writes back its own outputs, so the values are the lowered
/// kernel's, with every tile vectorized unguarded. A loop shorter than the
/// factor is refused.
#[test]
fn overlapping_tiles_recompute_the_same_values() {
    let (f, inputs) = matmul("mm_overlap", 5, 9, 37);
    let scheduled = check(f, &inputs, |s| {
        let j = s.get_loop("ax1").expect("j");
        let (jo, _) = s.split_overlapping(&j, 16).expect("overlapping split");
        let tile = s.decompose_reduction(&jo, true).expect("decompose");
        s.vectorize(&tile.update_loops[0]).expect("whole vectors, no guard");
        let i = s.get_loop("ax0").expect("i");
        assert!(s.split_overlapping(&i, 8).is_err(), "5 rows hold no 8-row block");
    });
    let text = kiln::tir::print_prim_func(&scheduled);
    assert!(text.contains("T.min(") && text.contains(", 21)"), "{text}");
}

#[test]
fn divisible_tiles_become_vector_code() {
    let (f, inputs) = matmul("mm16", 4, 9, 32);
    let scheduled = check(f, &inputs, |s| {
        let (i, j) = (s.get_loop("ax0").expect("i"), s.get_loop("ax1").expect("j"));
        let (io, ii) = s.split(&i, 2).expect("split");
        let (jo, ji) = s.split(&j, 16).expect("split");
        s.reorder(&[io, jo.clone(), ii, ji]).expect("reorder");
        let tile = s.decompose_reduction(&jo, true).expect("decompose");
        for loops in [&tile.init_loops, &tile.update_loops, &tile.writeback_loops] {
            s.unroll(&loops[0]).expect("unroll");
            s.vectorize(&loops[1]).expect("vectorize");
        }
    });
    let text = kiln::tir::print_prim_func(&scheduled);
    assert!(text.contains("T.Ramp("), "{text}");
    assert!(text.contains("_local = T.alloc_buffer([2, 16]"), "{text}");
}

fn conv(name: &str) -> (PrimFunc, Vec<Vec<f32>>, kiln::tir::Buffer) {
    let (c, h, w, oc, k) = (3, 9, 11, 5, 3);
    let x = placeholder("x", &[1, c, h, w], DataType::F32);
    let wt = placeholder("w", &[oc, c, k, k], DataType::F32);
    let xs = x.clone();
    let pad = compute("pad", &[1, c, h + 2, w + 2], move |i| {
        let (hh, ww) = (i[2].clone() - Expr::int(1), i[3].clone() - Expr::int(1));
        let inside = Expr::and(
            Expr::and(
                Expr::cmp(CmpOp::Ge, hh.clone(), Expr::int(0)),
                Expr::cmp(CmpOp::Lt, hh.clone(), Expr::int(h as i64)),
            ),
            Expr::and(
                Expr::cmp(CmpOp::Ge, ww.clone(), Expr::int(0)),
                Expr::cmp(CmpOp::Lt, ww.clone(), Expr::int(w as i64)),
            ),
        );
        let clamp =
            |e: Expr, n: usize| Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, e, Expr::int(0)), Expr::int(n as i64 - 1));
        Expr::select(
            inside,
            xs.at(&[i[0].clone(), i[1].clone(), clamp(hh, h), clamp(ww, w)]),
            Expr::float(0.0, DataType::F32),
        )
    });
    let (rc, ry, rx) = (reduce_axis(c, "rc"), reduce_axis(k, "ry"), reduce_axis(k, "rx"));
    let p = pad.clone();
    let out = compute("conv", &[1, oc, h, w], |i| {
        let (vc, vy, vx) = (Expr::var(&rc.0), Expr::var(&ry.0), Expr::var(&rx.0));
        sum(
            p.at(&[i[0].clone(), vc.clone(), i[2].clone() + vy.clone(), i[3].clone() + vx.clone()])
                * wt.at(&[i[1].clone(), vc, vy, vx]),
            &[rc.clone(), ry.clone(), rx.clone()],
        )
    });
    let keep = |t: &Tensor| t.name() == "pad";
    let f = lower_with(name, &[x, wt.clone()], &[out], &keep).expect("lower");
    // The stage's kernel-local buffer.
    let mut buf = None;
    f.body.visit(&mut |s| {
        if let Stmt::Allocate { buffer, .. } = s {
            buf = Some(buffer.clone());
        }
    });
    let buf = buf.expect("the padded input is materialized");
    assert_eq!(buf.name(), pad.name());
    (f, vec![data(c * h * w, 4), data(oc * c * k * k, 5)], buf)
}

#[test]
fn compute_at_places_the_padded_rows_inside_the_row_loop() {
    let (f, inputs, pad) = conv("conv_at");
    let scheduled = check(f, &inputs, |s| {
        // The conv's row loop (the pad stage's own loops come first and share names).
        let oh = s.loops().into_iter().filter(|v| &*v.name == "ax2").last().expect("rows");
        let ow = s.loops().into_iter().filter(|v| &*v.name == "ax3").last().expect("columns");
        let (_, owi) = s.split(&ow, 4).expect("split");
        let oc = s.loops().into_iter().filter(|v| &*v.name == "ax1").last().expect("channels");
        s.reorder(&[oh.clone(), oc]).expect("reorder");
        let local = s.compute_at(&pad, &oh).expect("compute_at");
        // One output row reads 3 padded rows of every channel, all columns.
        assert_eq!(local.shape(), &[1, 3, 3, 13]);
        assert!(s.loop_of(&owi).is_ok());
        s.parallel(&oh).expect("parallel");
    });
    let text = kiln::tir::print_prim_func(&scheduled);
    assert!(!text.contains("pad = T.alloc_buffer"), "{text}");
}

#[test]
fn compute_inline_undoes_materialization() {
    let (f, inputs, pad) = conv("conv_inline");
    let scheduled = check(f, &inputs, |s| s.compute_inline(&pad).expect("inline"));
    assert!(!kiln::tir::print_prim_func(&scheduled).contains("alloc_buffer"));
}

#[test]
fn primitives_that_do_not_apply_are_errors_naming_the_kernel() {
    let (f, _) = matmul("mm_err", 4, 4, 4);
    let mut s = Schedule::new(f);
    let i = s.get_loop("ax0").expect("i");
    let j = s.get_loop("ax1").expect("j");
    let k = s.get_loop("k").expect("k");
    let e = s.split(&i, 0).expect_err("split by 0");
    assert!(e.to_string().contains("mm_err") && e.to_string().contains("by 0"), "{e}");
    let e = s.reorder(&[k.clone(), i.clone()]).expect_err("k is not perfectly nested under i");
    assert!(e.to_string().contains("not perfectly nested"), "{e}");
    let e = s.fuse(&j, &i).expect_err("i is not inside j");
    assert!(e.to_string().contains("is not directly inside"), "{e}");
    assert!(s.get_loop("nope").is_err());
    let e = s.decompose_reduction(&k, true).expect_err("nothing to decompose below k");
    assert!(e.to_string().contains("decompose_reduction"), "{e}");
    // Failed primitives leave the kernel as it was.
    let (g, _) = matmul("mm_err", 4, 4, 4);
    assert_eq!(kiln::tir::print_prim_func(s.func()).lines().count(), kiln::tir::print_prim_func(&g).lines().count());
}

#[test]
fn polynomial_intrinsics_are_accurate_to_1e_6() {
    use kiln::tir::transform::lower_intrinsics::{erf_f32, exp_f32, sigmoid_f32, tanh_f32};
    let n = 4608; // whole vectors of 16 and of 48 lanes
    let x = placeholder("x", &[n], DataType::F32);
    let mk = |name: &str, f: Lowering, lanes: usize| {
        let xs = x.clone();
        let out = compute(name, &[n], |i| f(xs.at(i)));
        let mut k = lower(name, &[x.clone()], &[out]).expect("lower");
        // Vectorized, as kernels run: 16 lanes, or 48 (three AVX-512
        // vectors: the `ldexp` of each, joined).
        let mut s = Schedule::new(k.clone());
        let v = s.get_loop("ax0").expect("loop");
        let (_, vi) = s.split(&v, lanes).expect("split");
        s.vectorize(&vi).expect("vectorize");
        k = s.into_func();
        finish(k)
    };
    let mut xs: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32 - 0.5) * 40.0).collect();
    // Tiny values (tanh's small-input branch), zeros of both signs, the tanh
    // clamp, and both sides of the exp's and the sigmoid's clamps.
    // Around ln(f32::MAX) = 88.72284 exp overflows to +inf by itself.
    xs[..26].copy_from_slice(&[
        1e-8,
        -3e-5,
        3.9e-4,
        4.1e-4,
        -1e-3,
        0.0,
        -0.0,
        7.9,
        -7.91,
        9.0,
        -87.3,
        -87.4,
        87.9,
        88.1,
        88.7,
        -88.1,
        -88.7,
        -89.0,
        100.0,
        -1000.0,
        88.72,
        88.7228,
        88.7229,
        88.9,
        89.5,
        f32::INFINITY,
    ]);
    type Exact = fn(f64) -> f64;
    type Lowering = fn(Expr) -> Expr;
    let exact_erf: Exact = |v| libm_erf(v);
    let cases: [(&str, Lowering, Exact); 4] = [
        ("exp", exp_f32, |v: f64| v.exp()),
        ("tanh", tanh_f32, |v: f64| v.tanh()),
        ("sigmoid", sigmoid_f32, |v: f64| 1.0 / (1.0 + (-v).exp())),
        ("erf", erf_f32, exact_erf),
    ];
    for ((name, f, exact), lanes) in cases.into_iter().flat_map(|c| [(c, 16), (c, 48)]) {
        let k = mk(&format!("poly_{name}_{lanes}"), f, lanes);
        let text = kiln::tir::print_prim_func(&k);
        assert!(!text.contains(&format!("T.{name}(")), "{name} still calls the intrinsic:\n{text}");
        let input = xs.clone();
        for got in run_both(&k, std::slice::from_ref(&input), 1) {
            for (i, (&g, &v)) in got.iter().zip(&input).enumerate() {
                let want = exact(v as f64);
                let rel = ((g as f64 - want) / want.abs().max(1e-30)).abs();
                // exp underflows to subnormals below −87.3: judged absolutely there.
                let tiny = want.abs() < 1.2e-38;
                assert!(
                    rel <= 1e-6
                        || tiny && (g as f64 - want).abs() < 1e-37
                        || want > f32::MAX as f64 && g == f32::INFINITY,
                    "{name}({v}) = {g}, exact {want} (rel {rel:e}) at {i}"
                );
            }
        }
        // NaN stays NaN (the clamps' min and max would make it a number).
        for got in run_both(&k, &[vec![f32::NAN; n]], 1) {
            assert!(got.iter().all(|g| g.is_nan()), "{name}(NaN) = {got:?}");
        }
    }
}

#[test]
fn trigonometry_lowered_for_the_gpu_is_accurate_to_2e_6() {
    use kiln::tir::transform::lower_trig::lowered;
    use kiln::tir::Intrinsic;
    let n = 4096;
    let x = placeholder("x", &[n], DataType::F32);
    type Exact = fn(f64) -> f64;
    // (function, exact, domain): 4096 points across the domain, plus its edges and zeros.
    let cases: [(Intrinsic, Exact, f32, f32); 11] = [
        (Intrinsic::Sin, f64::sin, -100.0, 100.0),
        (Intrinsic::Cos, f64::cos, -100.0, 100.0),
        (Intrinsic::Tan, f64::tan, -1.5, 1.5),
        (Intrinsic::Asin, f64::asin, -1.0, 1.0),
        (Intrinsic::Acos, f64::acos, -1.0, 1.0),
        (Intrinsic::Atan, f64::atan, -100.0, 100.0),
        (Intrinsic::Sinh, f64::sinh, -80.0, 80.0),
        (Intrinsic::Cosh, f64::cosh, -80.0, 80.0),
        (Intrinsic::Asinh, f64::asinh, -3000.0, 3000.0),
        (Intrinsic::Acosh, f64::acosh, 1.0, 3000.0),
        (Intrinsic::Atanh, f64::atanh, -0.999, 0.999),
    ];
    for (op, exact, lo, hi) in cases {
        let name = format!("lowered_{}", op.name());
        let xs_ = x.clone();
        let out = compute(&name, &[n], |i| lowered(op, xs_.at(i)).expect("a lowering"));
        let k = finish(lower(&name, &[x.clone()], &[out]).expect("lower"));
        let text = kiln::tir::print_prim_func(&k);
        assert!(!text.contains(&format!("T.{}(", op.name())), "{name} still calls the intrinsic:\n{text}");
        let mut input: Vec<f32> = (0..n).map(|i| lo + (hi - lo) * i as f32 / (n - 1) as f32).collect();
        let edges = [lo, hi, 0.0, -0.0, 1e-6, -1e-6, 0.3, 1.0];
        for (slot, e) in input.iter_mut().zip(edges.into_iter().filter(|e| (lo..=hi).contains(e))) {
            *slot = e;
        }
        for got in run_both(&k, std::slice::from_ref(&input), 1) {
            for (&g, &v) in got.iter().zip(&input) {
                let want = exact(v as f64);
                let err = (g as f64 - want).abs();
                // Sine and cosine near their zeros carry the reduction's absolute error (|x|·2⁻²⁴).
                let floor =
                    if matches!(op, Intrinsic::Sin | Intrinsic::Cos) { 2e-7 * (v.abs() as f64).max(1.0) } else { 0.0 };
                assert!(
                    err <= 2e-6 * want.abs() || err <= floor || (want.is_infinite() && g as f64 == want),
                    "{}({v}) = {g}, exact {want} (rel {:e})",
                    op.name(),
                    err / want.abs()
                );
            }
        }
    }
    // Outside the domains: NaN, as libm.
    for (op, v) in
        [(Intrinsic::Asin, 1.5f32), (Intrinsic::Acos, -1.5), (Intrinsic::Acosh, 0.5), (Intrinsic::Atanh, 2.0)]
    {
        let name = format!("nan_{}", op.name());
        let xs_ = x.clone();
        let out = compute(&name, &[n], |i| lowered(op, xs_.at(i)).expect("a lowering"));
        let k = finish(lower(&name, &[x.clone()], &[out]).expect("lower"));
        for got in run_both(&k, &[vec![v; n]], 1) {
            assert!(got[0].is_nan(), "{}({v}) = {}", op.name(), got[0]);
        }
    }
}

/// erf in f64 (Abramowitz & Stegun 7.1.28 is too coarse; the series and continued fraction are exact enough).
fn libm_erf(x: f64) -> f64 {
    if x.abs() < 3.0 {
        // Taylor series: converges fast enough in f64 below 3.
        let mut sum = 0.0f64;
        let mut term = x;
        let mut n = 0.0f64;
        while term.abs() > 1e-17 * sum.abs().max(1e-300) || n < 3.0 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
            if n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction (Lentz).
        let z = x.abs();
        let mut f = z;
        for k in (1..60).rev() {
            f = z + (k as f64 / 2.0) / f;
        }
        let erfc = (-z * z).exp() / (std::f64::consts::PI.sqrt() * f);
        (1.0 - erfc).copysign(x)
    }
}

proptest! {
    #![proptest_config(common::randomized::config(24))]

    /// Random matrix products (odd sizes) under random schedules — splits with
    /// and without tails, reorders, tiles with and without a cache, unrolled and
    /// vectorized tiles, fused parallel outer loops — compute what they computed
    /// as lowered, on the JIT and through C, serially and task-sliced.
    #[test]
    fn random_schedules_preserve_random_matrix_products(
        (m, k, n) in (1..10usize, 1..22usize, 1..41usize),
        (fi, fj) in (1..6usize, 1..21usize),
        (cache, outer_rows_first, fuse) in (any::<bool>(), any::<bool>(), any::<bool>()),
        (unroll, vectorize) in (any::<bool>(), any::<bool>()),
    ) {
        let order = usize::from(!outer_rows_first);
        let (f, inputs) = matmul(&format!("rand_{m}x{k}x{n}"), m, k, n);
        check(f, &inputs, |s| {
            let (i, j) = (s.get_loop("ax0").expect("i"), s.get_loop("ax1").expect("j"));
            let (io, ii) = s.split(&i, fi).expect("split i");
            let (jo, ji) = s.split(&j, fj).expect("split j");
            let at = if order == 0 {
                s.reorder(&[io.clone(), jo.clone(), ii, ji]).expect("reorder");
                jo.clone()
            } else {
                s.reorder(&[jo.clone(), io.clone(), ii, ji]).expect("reorder");
                io.clone()
            };
            let tile = s.decompose_reduction(&at, cache).expect("decompose");
            for loops in [&tile.init_loops, &tile.update_loops, &tile.writeback_loops] {
                if let [rows, cols] = &loops[..] {
                    if unroll {
                        s.unroll(rows).expect("unroll");
                    }
                    if vectorize {
                        s.vectorize(cols).expect("vectorize");
                    }
                }
            }
            if fuse {
                let (outer, inner) = if order == 0 { (io, jo) } else { (jo, io) };
                let f = s.fuse(&outer, &inner).expect("fuse");
                s.parallel(&f).expect("parallel");
            }
        });
    }
}

/// A thread loop distributed around a reduction chunk loop: run serially
/// (thread copies one after another) it keeps the values, and each thread's
/// register tile, widened by the thread dimension, narrows back for the GPU.
#[test]
fn thread_loop_distribution_keeps_values_and_per_thread_registers() {
    let (f, inputs) = matmul("mm_threads", 7, 19, 37);
    let schedule = |s: &mut Schedule| -> Vec<kiln::tir::Var> {
        let (i, j) = (s.get_loop("ax0").expect("i"), s.get_loop("ax1").expect("j"));
        let (t, _) = s.split(&j, 4).expect("split j (tail)");
        s.bind(&i, kiln::tir::ThreadAxis::BlockX).expect("bind block");
        s.bind(&t, kiln::tir::ThreadAxis::ThreadX).expect("bind thread");
        let tile = s.decompose_reduction(&t, true).expect("decompose");
        let (ko, _) = s.split(&tile.reduce_loops[0], 5).expect("split k (tail)");
        s.distribute_thread_loop(&t, &ko).expect("distribute")
    };
    let mut copies = Vec::new();
    check(f.clone(), &inputs, |s| copies = schedule(s));
    assert_eq!(copies.len(), 3, "init, chunk and write-back copies");
    let mut s = Schedule::new(f);
    schedule(&mut s);
    let serial = s.into_func();
    assert!(
        kiln::tir::print_prim_func(&serial).contains("out_local = T.alloc_buffer([10, 4]"),
        "{}",
        kiln::tir::print_prim_func(&serial)
    );
    kiln::schedule::gpu::verify_barriers(&serial).expect("no shared memory, nothing to synchronize");
    let gpu = kiln::schedule::gpu::lower_thread_local(serial).expect("per-thread registers");
    assert!(kiln::tir::print_prim_func(&gpu).contains("out_local = T.alloc_buffer([4]"));
}

/// The GPU tiled strategy on a product with tails in every dimension: equal
/// values serially on LLVM and C; staged chunks in shared memory between
/// barriers, and without those barriers the kernel is refused.
#[test]
fn gpu_tiles_with_tails_keep_values_and_need_their_barriers() {
    let (mut f, inputs) = matmul("mm_gpu", 37, 45, 83);
    f.attrs.insert("anchor".into(), "nn.matmul".into());
    let tiled = kiln::schedule::gpu::default_gpu_schedule(f.clone(), 3).expect("schedule");
    assert!(tiled.attrs["schedule"].contains("tiled"), "{:?}", tiled.attrs);
    let text = kiln::tir::print_prim_func(&tiled);
    assert!(text.contains("scope=\"shared\"") && text.contains("tvm_storage_sync"), "{text}");
    let reference = run_both(&finish(f), &inputs, 1);
    for (got, want) in run_both(&finish(tiled.clone()), &inputs, 1).iter().zip(&reference) {
        assert_close(got, want, "tiled on the CPU");
    }
    let unsynchronized = PrimFunc {
        body: tiled.body.clone().map_post(&mut |s| match s {
            Stmt::Evaluate(Expr::Call(kiln::tir::Intrinsic::Barrier, ..)) => Stmt::nop(),
            s => s,
        }),
        ..tiled
    };
    let e = kiln::schedule::gpu::verify_barriers(&unsynchronized).expect_err("missing barriers").to_string();
    assert!(e.contains("a barrier is missing"), "{e}");
}

/// A kernel-local buffer that threads share (one thread writes what another
/// reads) cannot become per-thread registers: an error naming it.
#[test]
fn a_local_buffer_shared_by_threads_is_an_error_on_the_gpu() {
    use kiln::tir::{Buffer, Scope, ThreadAxis, Var};
    let a = Buffer::new("a", DataType::F32, vec![4], Scope::Global);
    let out = Buffer::new("out", DataType::F32, vec![4], Scope::Global);
    let local = Buffer::new("tmp", DataType::F32, vec![4], Scope::Local);
    let (t0, t1) = (Var::index("t0"), Var::index("t1"));
    let write = Stmt::Store {
        buffer: local.clone(),
        indices: vec![Expr::var(&t0)],
        value: Expr::Load(a.clone(), vec![Expr::var(&t0)]),
    };
    let read = Stmt::Store {
        buffer: out.clone(),
        indices: vec![Expr::var(&t1)],
        value: Expr::Load(local.clone(), vec![Expr::int(3) - Expr::var(&t1)]),
    };
    let kind = ForKind::ThreadBinding(ThreadAxis::ThreadX);
    let body = Stmt::Allocate {
        buffer: local,
        body: Box::new(Stmt::seq(vec![Stmt::for_loop(t0, 4, kind, write), Stmt::for_loop(t1, 4, kind, read)])),
    };
    let f =
        PrimFunc { name: "shared_tmp".into(), params: vec![a, out], num_outputs: 1, body, attrs: Default::default() };
    let e = kiln::schedule::gpu::lower_thread_local(f).expect_err("shared by threads");
    assert!(e.to_string().contains("`tmp` is used by several threads"), "{e}");
}

/// Whole tiles past a tail read a global buffer only where the loop ranges
/// prove the read inside it: a B of 37 columns split by 16 would be read up
/// to column 47 (refused); a B padded to 48 columns, of which the product
/// writes 37, is read in bounds, and the whole tiles keep the values.
#[test]
fn whole_tiles_read_a_global_buffer_past_the_tail_only_in_bounds() {
    let (f, _) = matmul("mm_tail", 4, 9, 37);
    let mut s = Schedule::new(f);
    let (j, i) = (s.get_loop("ax1").expect("j"), s.get_loop("ax0").expect("i"));
    let (jo, ji) = s.split(&j, 16).expect("split");
    s.reorder(&[jo, i.clone(), ji]).expect("reorder");
    let e = s.decompose_reduction_whole_tiles(&i).expect_err("B has 37 columns");
    assert!(e.to_string().contains("past the tail"), "{e}");

    let (m, k, n, padded) = (4, 9, 37, 48);
    let a = placeholder("a", &[m, k], DataType::F32);
    let b = placeholder("b", &[k, padded], DataType::F32);
    let kk = reduce_axis(k, "k");
    let kv = Expr::var(&kk.0);
    let c = compute("c", &[m, n], |i| {
        sum(a.at(&[i[0].clone(), kv.clone()]) * b.at(&[kv.clone(), i[1].clone()]), &[kk.clone()])
    });
    let f = lower("mm_padded", &[a, b], &[c]).expect("lower");
    check(f, &[data(m * k, 1), data(k * padded, 2)], |s| {
        let (j, i) = (s.get_loop("ax1").expect("j"), s.get_loop("ax0").expect("i"));
        let (jo, ji) = s.split(&j, 16).expect("split");
        s.reorder(&[jo, i.clone(), ji.clone()]).expect("reorder");
        let tile = s.decompose_reduction_whole_tiles(&i).expect("B holds the whole tiles");
        s.vectorize(&tile.update_loops[0]).expect("a whole vector");
    });
}

/// A column sum `c[j] = Σ_k a[k, j]` lowered as `for j { c[j] = 0; for k { … } }`:
/// `hoist_reduction` moves `k` outside `j` (rows of `a` read contiguously),
/// and `split_with_tail` vectorizes `j` over whole vectors with a scalar
/// tail; the values stay the lowered kernel's.
#[test]
fn hoisted_reductions_and_tail_splits_keep_values() {
    let (k, n) = (5, 37);
    let a = placeholder("a", &[k, n], DataType::F32);
    let kk = reduce_axis(k, "k");
    let kv = Expr::var(&kk.0);
    let c = compute("c", &[n], |i| sum(a.at(&[kv.clone(), i[0].clone()]), &[kk.clone()]));
    let f = lower("colsum", &[a], &[c]).expect("lower");
    let scheduled = check(f, &[data(k * n, 4)], |s| {
        let j = s.get_loop("ax0").expect("j");
        s.hoist_reduction(&j).expect("hoist");
        let (_, inner, tail) = s.split_with_tail(&j, 16).expect("split with tail");
        assert!(tail.is_some(), "37 = 2 × 16 + 5 leaves a tail");
        s.vectorize(&inner).expect("whole vectors, no guard");
    });
    // The update is a 16-lane vector inside the reduction loop `k`.
    let text = kiln::tir::print_prim_func(&scheduled);
    assert!(text.contains("for k in"), "{text}");
    assert!(text.contains("T.Ramp") && text.contains(", 1, 16)"), "{text}");
    // A nest that is not `init; reduction` is an error naming the kernel.
    let (f, _) = matmul("mm_err", 2, 3, 4);
    let mut s = Schedule::new(f);
    let i = s.get_loop("ax0").expect("i");
    let e = s.hoist_reduction(&i).expect_err("ax0's body is a loop, not an initialization");
    assert!(e.to_string().contains("mm_err"), "{e}");
}

/// `tir.ParallelizeOuter` weighs a vector store as a store per lane (it runs
/// after vectorization): a transformer's head split, a 64 KB transpose that
/// is 1,024 stores of 16 lanes, runs on every thread — serial, the caller
/// read the half of its input that the other core's product had written
/// (gpt_tiny's head transposes 0.51–0.76× the time at 2 threads, Zen 3) —
/// while a transpose of 128 floats stays on one.
#[test]
fn vectorized_copies_count_their_lanes_towards_running_in_parallel() {
    let has_parallel_loop = |shape: &str, heads: usize, head: usize| {
        let text = format!(
            "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[({shape}), float32]) {{\n  \
             %0 = reshape(%x, newshape=[1, -1, {heads}, {head}]);\n  \
             %1 = transpose(%0, axes=[0, 2, 1, 3]);\n  \
             reshape(%1, newshape=[{heads}, -1, {head}])\n}}\n"
        );
        let mut m = kiln::relay::parse_module(&text).expect("parse");
        kiln::relay::infer_module(&mut m).expect("infer");
        let ctx = std::sync::Arc::new(kiln::transform::PassContext::new().with_opt_level(3));
        let (_, plan) = kiln::build::optimize_and_plan(m, ctx).expect("plan");
        assert_eq!(plan.kernels.len(), 1, "one transpose kernel");
        plan.kernels[0].body.has_parallel_loop()
    };
    assert!(has_parallel_loop("1, 64, 256", 4, 64), "gpt_tiny's head split runs in parallel");
    assert!(!has_parallel_loop("1, 8, 16", 2, 8), "a 128-float transpose stays serial");
}
