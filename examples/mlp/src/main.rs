//! The seeds' MLP, compiled into this binary by `build.rs`: run a sample
//! input, print the 10 outputs, check them against the reference
//! interpreter's values recorded at build time, and time 10 000 runs.
//! `--cuda` (with feature `cuda`) does the same on an NVIDIA GPU.

use std::time::Instant;

kiln_runtime::include_model!("mlp");
#[cfg(feature = "cuda")]
kiln_runtime::include_model!("mlp_cuda");
include!(concat!(env!("OUT_DIR"), "/mlp_reference.rs"));

/// Max abs error against the reference, and the tolerance.
fn check(out: &[f32; 10]) {
    println!("outputs:  {out:?}");
    println!("expected: {EXPECTED:?}");
    let scale = EXPECTED.iter().fold(0f32, |a, v| a.max(v.abs()));
    let err = out.iter().zip(&EXPECTED).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
    println!("max abs error {err:e} (tolerance {:e}); arena {} bytes", 1e-4 * scale, mlp::ARENA_BYTES);
    if err > 1e-4 * scale {
        eprintln!("error: the compiled model disagrees with the reference interpreter");
        std::process::exit(1);
    }
}

#[cfg(feature = "cuda")]
fn run_cuda() {
    let mut model = match mlp_cuda::CudaModel::new() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    };
    println!("GPU: {}", model.device_name().unwrap_or_else(|e| e.to_string()));
    let mut out = [0f32; 10];
    if let Err(e) = model.run(&SAMPLE, &mut out) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    check(&out);
    // Kernel by kernel, then replayed as one captured CUDA graph.
    for mode in ["kernel launches", "CUDA graph"] {
        if mode == "CUDA graph" {
            if let Err(e) = model.capture_graph() {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        let mut times: Vec<f64> = (0..1000)
            .map(|_| {
                let t = Instant::now();
                let _ = model.run(std::hint::black_box(&SAMPLE), &mut out);
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        check(&out);
        times.sort_by(f64::total_cmp);
        println!(
            "median latency over 1000 runs, {mode} (copies in and out included): {:.2} µs",
            times[times.len() / 2]
        );
    }
}

#[cfg(not(feature = "cuda"))]
fn run_cuda() {
    eprintln!("error: --cuda needs the example built with `--features cuda`");
    std::process::exit(1);
}

fn main() {
    if std::env::args().any(|a| a == "--cuda") {
        return run_cuda();
    }
    let mut model = match mlp::OwnedModel::with_threads(1) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let mut out = [0f32; 10];
    if let Err(e) = model.run(&SAMPLE, &mut out) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    check(&out);
    let mut times: Vec<f64> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            let _ = model.run(std::hint::black_box(&SAMPLE), &mut out);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!("median latency over 10000 runs: {:.2} µs", times[times.len() / 2]);
}
