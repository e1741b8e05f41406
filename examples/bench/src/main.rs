//! GFLOP/s of kiln-compiled kernels, next to this machine's measured peak.
//!
//! `cargo run --release -p kiln-bench` compiles (LLVM JIT, host CPU) the MLP's
//! first layer (1×784×128, as `nn.dense` and as `nn.matmul`) and a 512×512×512
//! matmul, runs each on 1 and 2 threads, and prints the median GFLOP/s and its
//! share of the peak *measured in the same run*: a loop of independent vector
//! FMAs (AVX-512 where the CPU has it, else AVX2+FMA), timed on 1 and 2
//! threads just before each kernel, since these machines are shared and their
//! speed drifts (the nominal cores × GHz × lanes × 2 × 2 overstates it).

use std::time::Instant;

use kiln::build::optimize_and_plan;
use kiln::codegen::llvm::Jit;
use kiln::relay::{infer_module, parse_module};
use kiln::transform::PassContext;

/// Flops of `iters` rounds of 16 independent FMAs on vector registers.
#[cfg(target_arch = "x86_64")]
fn fma_loop(iters: u64) -> f64 {
    use std::arch::x86_64::*;
    #[target_feature(enable = "avx512f")]
    unsafe fn wide(iters: u64) -> f32 {
        let (b, c) = (_mm512_set1_ps(0.9999), _mm512_set1_ps(1e-4));
        let mut acc = [_mm512_set1_ps(0.5); 16];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, b, c);
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }
    #[target_feature(enable = "avx2,fma")]
    unsafe fn narrow(iters: u64) -> f32 {
        let (b, c) = (_mm256_set1_ps(0.9999), _mm256_set1_ps(1e-4));
        let mut acc = [_mm256_set1_ps(0.5); 16];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, b, c);
            }
        }
        let mut out = [0f32; 8];
        // SAFETY: `out` holds 8 floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc[0]) };
        out[0]
    }
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        std::hint::black_box(unsafe { wide(iters) });
        iters as f64 * 16.0 * 16.0 * 2.0
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        std::hint::black_box(unsafe { narrow(iters) });
        iters as f64 * 16.0 * 8.0 * 2.0
    } else {
        0.0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn fma_loop(_: u64) -> f64 {
    0.0
}

/// The machine's attainable GFLOP/s on `threads` threads right now (best of 3).
fn measured_peak(threads: usize) -> f64 {
    let iters = 2_000_000;
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let flops: f64 = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads).map(|_| s.spawn(|| fma_loop(iters))).collect();
                hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
            });
            flops / t.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

fn bench(name: &str, relay: &str, flops: f64) {
    let mut m = parse_module(relay).expect("parse");
    infer_module(&mut m).expect("infer");
    let (_, plan) = optimize_and_plan(m, std::sync::Arc::new(PassContext::new().with_opt_level(3))).expect("compile");
    assert_eq!(plan.calls.len(), 1, "one kernel per benchmark");
    let jit = Jit::new(name, &plan.kernels).expect("jit");
    let kernel = jit.kernel(&plan.kernels[plan.calls[0].kernel].name).expect("kernel");
    // One buffer per kernel argument, allocated once: only the kernel is timed.
    let mut buffers: Vec<Vec<f32>> = plan.calls[0]
        .args
        .iter()
        .map(|&t| {
            let n: usize = plan.tensors[t].shape.iter().product();
            (0..n).map(|i| ((i % 97) as f32) * 0.01).collect()
        })
        .collect();
    let args: Vec<*mut u8> = buffers.iter_mut().map(|b| b.as_mut_ptr() as *mut u8).collect();
    for threads in [1, 2] {
        let pool = kiln_runtime::ThreadPool::new(threads);
        let runs = if flops > 1e8 { 20 } else { 5000 };
        let mut times: Vec<f64> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                // SAFETY: the buffers match the kernel's parameters (built from its plan).
                let status = unsafe { pool.run(kernel, &args) };
                assert_eq!(status, 0, "{}", kiln_runtime::status_message(status));
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let gflops = flops / median / 1e9;
        let peak = measured_peak(threads);
        println!(
            "{name:<20} {threads} thread(s): {:>9.1} µs  {gflops:>7.2} GFLOP/s  ({:>4.1}% of measured peak {peak:.0})",
            median * 1e6,
            100.0 * gflops / peak
        );
    }
}

fn main() {
    println!("peak: a loop of independent vector FMAs, measured before each kernel on the same threads");
    bench(
        "dense 1x784x128",
        "def @main(%x: Tensor[(1, 784), float32], %w: Tensor[(128, 784), float32]) { nn.dense(%x, %w) }",
        2.0 * 784.0 * 128.0,
    );
    bench(
        "matmul 1x784x128",
        "def @main(%x: Tensor[(1, 784), float32], %w: Tensor[(784, 128), float32]) { nn.matmul(%x, %w) }",
        2.0 * 784.0 * 128.0,
    );
    bench(
        "matmul 512x512x512",
        "def @main(%a: Tensor[(512, 512), float32], %b: Tensor[(512, 512), float32]) { nn.matmul(%a, %b) }",
        2.0 * 512.0f64.powi(3),
    );
}
