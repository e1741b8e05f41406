//! What a parallel kernel call costs the thread pool, measured: an empty
//! kernel (the pool's round trip alone) and kernels whose slices each busy-wait
//! a fixed time (what a call adds to real work, start skew included), on one
//! and two threads.
//!
//! `cargo run --release -p kiln-runtime --features std --example pool_overhead`
//!
//! Every figure is the median over many calls, in a run of back-to-back calls
//! as a model's kernels arrive; "added" is the time per call beyond the
//! slice's own work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use kiln_runtime::ThreadPool;

/// Nanoseconds each slice of `busy` works (set before each measurement).
static SLICE_NS: AtomicU64 = AtomicU64::new(0);

/// A kernel that does nothing.
unsafe extern "C" fn empty(_: *const *mut u8, _: i64, _: i64) -> i32 {
    0
}

/// A kernel whose every slice spins for `SLICE_NS` nanoseconds.
unsafe extern "C" fn busy(_: *const *mut u8, _: i64, _: i64) -> i32 {
    let ns = SLICE_NS.load(Ordering::Relaxed);
    let start = Instant::now();
    while (start.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
    0
}

/// The median nanoseconds per call over `rounds` rounds of `calls` back-to-back calls.
fn per_call_ns(pool: &ThreadPool, kernel: kiln_runtime::PackedKernel, calls: usize, rounds: usize) -> f64 {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                // SAFETY: neither kernel reads its arguments.
                let status = unsafe { pool.run(kernel, &[]) };
                assert_eq!(status, 0);
            }
            t.elapsed().as_nanos() as f64 / calls as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    println!("{:<28} {:>10} {:>10}", "kernel", "1 thread", "2 threads");
    let pools = [ThreadPool::new(1), ThreadPool::new(2)];
    let empty_ns: Vec<f64> = pools.iter().map(|p| per_call_ns(p, empty, 20_000, 21)).collect();
    println!("{:<28} {:>8.0} ns {:>8.0} ns", "empty (round trip)", empty_ns[0], empty_ns[1]);
    for slice_us in [2u64, 5, 20, 100] {
        SLICE_NS.store(slice_us * 1000, Ordering::Relaxed);
        let calls = (200_000 / slice_us as usize).max(100);
        let added: Vec<f64> =
            pools.iter().map(|p| per_call_ns(p, busy, calls, 11) - (slice_us * 1000) as f64).collect();
        println!("{:<28} {:>8.0} ns {:>8.0} ns", format!("{slice_us} µs slices (added)"), added[0], added[1]);
    }
}
