//! The seeds' MLP, compiled into this binary by `build.rs`: run a sample
//! input, print the 10 outputs, check them against the reference
//! interpreter's values recorded at build time, and time 10 000 runs.

use std::time::Instant;

kiln_runtime::include_model!("mlp");
include!(concat!(env!("OUT_DIR"), "/mlp_reference.rs"));

fn main() {
    let mut model = mlp::OwnedModel::with_threads(1);
    let mut out = [0f32; 10];
    model.run(&SAMPLE, &mut out);
    println!("outputs:  {out:?}");
    println!("expected: {EXPECTED:?}");
    let scale = EXPECTED.iter().fold(0f32, |a, v| a.max(v.abs()));
    let err = out.iter().zip(&EXPECTED).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
    println!("max abs error {err:e} (tolerance {:e}); arena {} bytes", 1e-4 * scale, mlp::ARENA_BYTES);
    if err > 1e-4 * scale {
        eprintln!("error: the compiled model disagrees with the reference interpreter");
        std::process::exit(1);
    }
    let mut times: Vec<f64> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            model.run(std::hint::black_box(&SAMPLE), &mut out);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!("median latency over 10000 runs: {:.2} µs", times[times.len() / 2]);
}
