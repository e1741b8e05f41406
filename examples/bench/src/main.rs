//! GFLOP/s of kiln-compiled kernels, next to this machine's peak.
//!
//! `cargo run --release -p kiln-bench` compiles (LLVM JIT, host CPU) the MLP's
//! first layer (1×784×128, as `nn.dense` and as `nn.matmul`) and a 512×512×512
//! matmul, runs each on 1 and 2 threads, and prints the median GFLOP/s and its
//! share of the peak (cores × GHz × FMA lanes × 2 flops × 2 FMA units, read from
//! /proc/cpuinfo; the 2 FMA units are an assumption stated in the output).

use std::time::Instant;

use kiln::build::optimize_and_plan;
use kiln::codegen::llvm::Jit;
use kiln::relay::{infer_module, parse_module};
use kiln::transform::PassContext;

fn peak_gflops(threads: usize) -> (f64, String) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mhz: f64 = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(2000.0);
    let lanes = if info.contains(" avx512f") {
        16.0
    } else if info.contains(" avx2") {
        8.0
    } else {
        4.0
    };
    let per_core = mhz / 1000.0 * lanes * 2.0 * 2.0;
    (per_core * threads as f64, format!("{:.2} GHz × {lanes} f32 lanes × 2 (FMA) × 2 FMA units", mhz / 1000.0))
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
                unsafe { pool.run(kernel, &args) };
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let gflops = flops / median / 1e9;
        let (peak, _) = peak_gflops(threads);
        println!(
            "{name:<20} {threads} thread(s): {:>9.1} µs  {gflops:>7.2} GFLOP/s  ({:>4.1}% of peak {peak:.0})",
            median * 1e6,
            100.0 * gflops / peak
        );
    }
}

fn main() {
    let (_, how) = peak_gflops(1);
    println!("peak per core: {how}");
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
