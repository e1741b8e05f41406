//! `kiln bench` on the CPU: timed runs, `--profile`'s tables (per kernel,
//! per class of kernel) and `--paced` batches for a benchmark program that
//! alternates kiln with another runtime or another kiln, batch by batch.

use kiln::backend::aot::ExecutorPlan;
use kiln::backend::host::Executor;
use kiln::target::TargetDescription;

use super::{out, progress, CompileArgs};

/// After the model's first run: 10 warm-up runs, then `c.runs` timed ones
/// (and with `--profile` each kernel call timed), printed with where they
/// were taken; with `--paced`, batches until standard input ends.
pub(super) fn time_model(
    c: &CompileArgs,
    plan: &ExecutorPlan,
    ex: &mut Executor<'_>,
    description: &TargetDescription,
) -> Result<(), String> {
    // Set once: updating the line inside the timed loop would perturb what it times.
    progress::stage("timing");
    progress::detail(format!("10 warm-up and {} timed runs", c.runs));
    for _ in 0..10 {
        ex.run().map_err(|e| e.to_string())?;
    }
    if c.paced {
        return paced_batches(c, plan, ex);
    }
    let times = timed_runs(ex, c.runs)?;
    if c.profile {
        progress::detail(format!("each of {} kernel calls, {} runs", plan.calls.len(), c.runs.min(50)));
        print_kernel_profile(plan, &mut timed_calls(ex, c.runs.min(50))?);
    }
    // Where the figure was taken: the code's CPU and features, and this machine's.
    let here = TargetDescription::resolve("llvm -mcpu=native");
    out(&format!(
        "{}: median {:.1} us, min {:.1} us over {} runs, {} thread(s), target `{}` (cpu {}: {}), on {} ({})\n",
        c.file,
        times[times.len() / 2],
        times[0],
        times.len(),
        c.threads,
        c.target,
        description.cpu,
        description.features.join(" "),
        here.cpu,
        here.features.join(" ")
    ));
    Ok(())
}

/// The microseconds of `runs` runs, sorted.
fn timed_runs(ex: &mut Executor<'_>, runs: usize) -> Result<Vec<f64>, String> {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = std::time::Instant::now();
            ex.run().map(|()| t.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// Per plan call, its microseconds in each of `runs` runs.
pub(super) fn timed_calls(ex: &mut Executor<'_>, runs: usize) -> Result<Vec<Vec<f64>>, String> {
    let mut per_call: Vec<Vec<f64>> = Vec::new();
    for _ in 0..runs {
        for (i, t) in ex.run_timed().map_err(|e| e.to_string())?.into_iter().enumerate() {
            if per_call.len() <= i {
                per_call.push(Vec::new());
            }
            per_call[i].push(t);
        }
    }
    Ok(per_call)
}

/// One kernel's time in a profile: the sum over its calls of each call's median.
struct KernelTime {
    kernel: usize,
    us: f64,
    calls: usize,
}

/// Per kernel, in the order of its first call, [`KernelTime`]; and each
/// call's median (`per_call[i]`: the samples of plan call `i`).
fn kernel_times(plan: &ExecutorPlan, per_call: &mut [Vec<f64>]) -> (Vec<KernelTime>, Vec<f64>) {
    let mut by_kernel: Vec<KernelTime> = Vec::new();
    let mut call_us = Vec::with_capacity(plan.calls.len());
    for (call, samples) in plan.calls.iter().zip(per_call.iter_mut()) {
        samples.sort_by(f64::total_cmp);
        let median = samples.get(samples.len() / 2).copied().unwrap_or(0.0);
        call_us.push(median);
        match by_kernel.iter_mut().find(|e| e.kernel == call.kernel) {
            Some(e) => {
                e.us += median;
                e.calls += 1;
            }
            None => by_kernel.push(KernelTime { kernel: call.kernel, us: median, calls: 1 }),
        }
    }
    (by_kernel, call_us)
}

/// `--profile`'s table: per kernel, the sum over its calls of each call's
/// median time, slowest first; then the classes' shares.
pub(super) fn print_kernel_profile(plan: &ExecutorPlan, per_call: &mut [Vec<f64>]) {
    use kiln::backend::profile::{kernel_class, kernel_flops};
    let (mut by_kernel, call_us) = kernel_times(plan, per_call);
    by_kernel.sort_by(|a, b| b.us.total_cmp(&a.us));
    let total: f64 = by_kernel.iter().map(|k| k.us).sum();
    let flops = kernel_flops(plan);
    for k in &by_kernel {
        let rate = flops[k.kernel] as f64 * k.calls as f64 / k.us.max(1e-9) / 1e3;
        let call = plan.calls.iter().find(|call| call.kernel == k.kernel).expect("a kernel of the plan's calls");
        out(&format!(
            "{:>10.1} us {:>5.1}%  {:>3}×  {rate:>6.1} GFLOP/s  {:<12} {}\n",
            k.us,
            100.0 * k.us / total,
            k.calls,
            kernel_class(plan, call).name(),
            plan.kernels[k.kernel].name
        ));
    }
    print_class_shares(plan, &call_us, &flops);
}

/// `--profile`'s second table: per class of kernel, its share of the time
/// next to its share of the floating-point work, and their ratio (above 1, a
/// class takes more of the time than of the work).
fn print_class_shares(plan: &ExecutorPlan, call_us: &[f64], flops: &[u64]) {
    let shares = kiln::backend::profile::class_shares(plan, call_us, flops);
    let (us, flops): (f64, u64) = shares.iter().fold((0.0, 0), |(t, f), s| (t + s.us, f + s.flops));
    if us <= 0.0 || flops == 0 {
        return;
    }
    out(&format!(
        "\nby class ({:.3} GFLOP: per kernel the fewer of as lowered and as executed; Winograd's are fewer than a direct convolution's)\n",
        flops as f64 / 1e9
    ));
    out(&format!(
        "{:>14} {:>12} {:>7} {:>11} {:>13} {:>9}\n",
        "class", "time", "time %", "FLOP %", "time / FLOP", "GFLOP/s"
    ));
    for s in &shares {
        let (time_share, work_share) = (s.us / us, s.flops as f64 / flops as f64);
        let ratio = if work_share > 0.0 { format!("{:.2}", time_share / work_share) } else { "-".into() };
        let rate = if s.us > 0.0 { s.flops as f64 / s.us / 1e3 } else { 0.0 };
        out(&format!(
            "{:>14} {:>9.1} us {:>6.1}% {:>10.1}% {:>13} {:>9.1}\n",
            s.class.name(),
            s.us,
            100.0 * time_share,
            100.0 * work_share,
            ratio,
            rate
        ));
    }
}

/// `kiln bench --paced`: per line of standard input, a batch of `c.runs`
/// timed runs, printed as one line `median_us min_us` — with `--profile`
/// followed by `kernel=us` for each kernel (the sum over its calls of each
/// call's median over `min(runs, 50)` more runs, in the order of first
/// call) — until the input ends. A program that alternates kiln with
/// another runtime, or two kiln binaries, batch by batch compares them in
/// the same moments of a shared machine, whose slow phases last longer than
/// a batch (`scripts/bench_onnx.py`, `scripts/ab_kernels.py`).
fn paced_batches(c: &CompileArgs, plan: &ExecutorPlan, ex: &mut Executor<'_>) -> Result<(), String> {
    use std::fmt::Write as _;
    use std::io::{BufRead, Write};
    let mut stdout = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        line.map_err(|e| format!("reading the pace from standard input: {e}"))?;
        let times = timed_runs(ex, c.runs)?;
        let mut text = format!("{:.1} {:.1}", times[times.len() / 2], times[0]);
        if c.profile {
            for k in kernel_times(plan, &mut timed_calls(ex, c.runs.min(50))?).0 {
                let _ = write!(text, " {}={:.2}", plan.kernels[k.kernel].name, k.us);
            }
        }
        writeln!(stdout, "{text}").and_then(|()| stdout.flush()).map_err(|e| format!("writing a batch's time: {e}"))?;
    }
    Ok(())
}
