//! Schedule search (`kiln tune`): for each distinct kernel of a model, time
//! points of its schedule space ([`crate::schedule::knobs`]) against the
//! rule's schedule, in process, on the model's real sizes, and keep the
//! fastest in a [`TuningLog`] that builds apply ([`crate::Build::tuning_log`]).
//!
//! The search runs in rounds. Each round gives every kernel still searching
//! its next candidate — alternately the cheapest untried point by the
//! analytic cost of [`crate::schedule::knobs::candidates`] and the untried
//! point nearest the kernel's best so far —, lowers the optimized model
//! once with all of them, compiles it, and times every kernel call of it
//! interleaved with the rule's build, so that the machine's drift cancels:
//! one compilation measures one candidate of every kernel. When the budget
//! is nearly spent, a confirming round re-times the winners with three
//! times the repetitions and keeps those still faster; the model's whole
//! latency, tuned and untuned, is measured the same way. Every build's
//! outputs are checked against the rule's build's.

pub mod log;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_ir::relay::IRModule;
use kiln_ir::Tensor;

pub use log::{TuningLog, TuningLogError, TuningRecord};

use crate::backend::aot::ExecutorPlan;
use crate::backend::host::{Executor, KernelLibrary};
use crate::backend::RunError;
use crate::schedule::knobs::SeenKernel;
use crate::schedule::{Knobs, ScheduleTuning};
use crate::target::TargetDescription;
use crate::transform::{ConfigValue, PassContext, PassError};

/// What to tune for, and for how long.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// The target string (`llvm -mcpu=native`, `c`).
    pub target: String,
    pub opt_level: u32,
    /// Threads the kernels are timed on (and tuned for).
    pub threads: usize,
    /// Wall-clock time for the whole search, compilation included.
    pub budget: Duration,
    /// Candidates timed per kernel at most.
    pub candidates: usize,
    /// Pass configuration, as `kiln build --config` sets it.
    pub config: Vec<(String, ConfigValue)>,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            target: "llvm -mcpu=native".into(),
            opt_level: 3,
            threads: 1,
            budget: Duration::from_secs(600),
            candidates: 64,
            config: Vec::new(),
        }
    }
}

/// A kernel's result.
#[derive(Clone, Debug)]
pub struct KernelOutcome {
    pub name: String,
    pub key: String,
    pub anchor: String,
    /// Median microseconds per model run (all its calls) with the rule's
    /// schedule and with the tuned one, from the confirming measurement.
    pub default_us: f64,
    pub tuned_us: f64,
    /// The knobs kept (`Knobs::default()`: the rule stays).
    pub knobs: Knobs,
    /// Candidates timed.
    pub tried: usize,
    /// The record came from the log given, not from this search.
    pub reused: bool,
}

/// What a search found and measured.
#[derive(Clone, Debug)]
pub struct TuneReport {
    pub kernels: Vec<KernelOutcome>,
    /// Median whole-model microseconds, untuned and tuned, measured interleaved.
    pub model_default_us: f64,
    pub model_tuned_us: f64,
    /// Search rounds (one compilation each), the confirming round not counted.
    pub rounds: usize,
    pub elapsed: Duration,
    /// The CPU and features the records are for.
    pub target: TargetDescription,
    pub threads: usize,
}

/// Why a search stopped.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{0}")]
    Target(String),
    #[error(
        "the tuned build's output {output} differs from the untuned one's by {difference:e} \
         (more than floating-point reassociation allows, {tolerance:e}): a schedule bug; nothing was written"
    )]
    Mismatch { output: usize, difference: f64, tolerance: f64 },
}

type Pool = Arc<kiln_runtime::ThreadPool>;

/// A compiled build of the model: its plan and kernels.
struct Variant {
    plan: ExecutorPlan,
    lib: Box<dyn KernelLibrary>,
}

/// Searches the schedule space of `m`'s kernels (a prepared, type-checked
/// module) for `opts.target`, timed on `inputs` by name (zero-filled where not given).
/// Kernels with a record in `previous` for this CPU are not searched again:
/// their records are reused. Returns the new records and the report;
/// `progress` hears a line per round.
pub fn tune(
    m: IRModule,
    inputs: &[(String, Tensor)],
    opts: &TuneOptions,
    previous: &TuningLog,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<TuningRecord>, TuneReport), TuneError> {
    let start = Instant::now();
    let target = TargetDescription::resolve(&opts.target);
    if let Some(feature) = target.first_missing_on_this_cpu() {
        return Err(TuneError::Target(format!(
            "target `{}` compiles for `{feature}`, which this CPU lacks: kernels are tuned by running them here",
            opts.target
        )));
    }
    if crate::build::is_cuda_target(&opts.target) {
        return Err(TuneError::Target("`kiln tune` times CPU kernels; a `cuda` target is not tuned yet".into()));
    }
    let context = |tuning: Arc<ScheduleTuning>| -> Result<Arc<PassContext>, PassError> {
        let mut ctx = PassContext::new().with_opt_level(opts.opt_level);
        for (k, v) in &opts.config {
            ctx.set_config(k, v.clone())?;
        }
        crate::target::configure_context(&opts.target, &mut ctx);
        Ok(Arc::new(ctx.with_extension(tuning)))
    };
    progress("optimizing the model");
    let fused = context(ScheduleTuning::applying(BTreeMap::new()))?
        .scope(|ctx| crate::transform::apply(&crate::relay::transform::default_pipeline()?, m, ctx))?;
    let tir = crate::schedule::passes::tir_pipeline()?;
    let build = |tuning: Arc<ScheduleTuning>| -> Result<Variant, TuneError> {
        let plan = context(tuning)?.scope(|ctx| crate::build::lower_and_schedule(&fused, ctx, &tir))?;
        let lib = crate::backend::host::compile_in_process(&plan, &opts.target)?;
        Ok(Variant { plan, lib })
    };

    // The rule's build, which also lists every kernel and its candidates.
    progress("lowering with the rule's schedules and listing each kernel's candidates");
    // The whole (valid, distinct) space of each kernel, cheapest first; `opts.candidates` of it are timed.
    let recorder = ScheduleTuning::recording(BTreeMap::new(), opts.threads, SPACE_LIMIT);
    let base = build(recorder.clone())?;
    let recorded = recorder.seen();
    // Every kernel's key (identical kernels under other names share one), then one entry per key.
    let key_of: BTreeMap<String, String> = recorded.iter().map(|k| (k.name.clone(), k.key.clone())).collect();
    let seen: Vec<SeenKernel> = distinct(recorded);
    let (previous_knobs, _) = previous.knobs_for(&target);
    let reused: BTreeMap<String, Knobs> =
        previous_knobs.into_iter().filter(|(key, _)| seen.iter().any(|k| &k.key == key)).collect();
    let inputs = arrange_inputs(&base.plan, inputs)?;
    // One pool for every build timed: the builds take turns on the same workers.
    let pool: Pool = Arc::new(
        kiln_runtime::ThreadPool::try_new(opts.threads.max(1))
            .map_err(|e| RunError::Threads { threads: opts.threads, message: e.to_string() })?,
    );

    // How many interleaved repetitions a round takes: about half a second of the model.
    let latency = {
        let mut ex = executor(&base, &inputs, &pool)?;
        ex.run()?;
        let t = Instant::now();
        ex.run()?;
        t.elapsed().as_secs_f64()
    };
    let reps = ((0.25 / latency.max(1e-6)) as usize).clamp(5, 200);

    let searching: Vec<&SeenKernel> =
        seen.iter().filter(|k| !reused.contains_key(&k.key) && !k.candidates.is_empty()).collect();
    let mut best: BTreeMap<String, (f64, Knobs)> = BTreeMap::new();
    let mut tried: BTreeMap<String, usize> = BTreeMap::new();
    let mut untried: BTreeMap<String, Vec<Knobs>> =
        searching.iter().map(|k| (k.key.clone(), k.candidates.clone())).collect();
    let mut rounds = 0;
    let mut last_round = Duration::ZERO;
    loop {
        // Odd rounds explore the neighbours of a kernel's best point so far
        // (where it beats the rule); even rounds, and kernels without one,
        // take the cheapest untried point by the analytic cost.
        let mut table: BTreeMap<String, Knobs> = BTreeMap::new();
        for (key, left) in untried.iter_mut() {
            if left.is_empty() || tried.get(key).copied().unwrap_or(0) >= opts.candidates {
                continue;
            }
            let pick = match best.get(key) {
                Some((r, b)) if rounds % 2 == 1 && *r < 1.0 => {
                    (0..left.len()).min_by_key(|&i| (distance(&left[i], b), i)).unwrap_or(0)
                }
                _ => 0,
            };
            table.insert(key.clone(), left.remove(pick));
        }
        // Stop when no kernel has a candidate left, or before a round and
        // the confirming rounds would overrun the budget.
        if table.is_empty() || start.elapsed() + last_round * 5 > opts.budget {
            break;
        }
        let round_start = Instant::now();
        let candidate = build(ScheduleTuning::applying(table.clone()))?;
        // Every candidate build computes the rule's values (a schedule bug stops the search).
        check_outputs(&base, &candidate, &inputs, &pool)?;
        let (base_us, cand_us) = time_kernels(&base, &candidate, &inputs, &pool, reps, &key_of)?;
        for key in table.keys() {
            let (Some(b), Some(c)) = (base_us.get(key), cand_us.get(key)) else { continue };
            *tried.entry(key.clone()).or_default() += 1;
            let ratio = c / b.max(1e-9);
            if best.get(key).is_none_or(|(r, _)| ratio < *r) {
                best.insert(key.clone(), (ratio, table[key].clone()));
            }
        }
        rounds += 1;
        last_round = round_start.elapsed();
        let gains = best.values().filter(|(r, _)| *r < WIN).count();
        let top = best.values().map(|(r, _)| 1.0 / r).fold(1.0, f64::max);
        // A kernel is done when its listed points or its share of candidates are all timed.
        let done = untried
            .iter()
            .filter(|(key, left)| left.is_empty() || tried.get(*key).copied().unwrap_or(0) >= opts.candidates)
            .count();
        progress(&format!(
            "round {rounds}: {done} of {} kernels done, {} candidates timed, {gains} faster than the rule (best ×{top:.2}), {:.0} s of {:.0} s",
            searching.len(),
            tried.values().sum::<usize>(),
            start.elapsed().as_secs_f64(),
            opts.budget.as_secs_f64()
        ));
    }

    // Confirm the winners (with the reused records) with three times the repetitions.
    let mut winners: BTreeMap<String, Knobs> =
        best.iter().filter(|(_, (r, _))| *r < WIN).map(|(k, (_, knobs))| (k.clone(), knobs.clone())).collect();
    progress(&format!("confirming {} winners and {} reused records", winners.len(), reused.len()));
    let with_reused = |w: &BTreeMap<String, Knobs>| {
        let mut t = reused.clone();
        t.extend(w.iter().map(|(k, v)| (k.clone(), v.clone())));
        t
    };
    // Winners that time slower than the rule again are dropped and the rest
    // re-timed, until every kept one confirms (at most CONFIRM_ROUNDS times;
    // after the last, the build without the unconfirmed is timed for the report).
    let mut attempt = 0;
    let (tuned, base_us, tuned_us) = loop {
        attempt += 1;
        let tuned = build(ScheduleTuning::applying(with_reused(&winners)))?;
        let (base_us, tuned_us) = time_kernels(&base, &tuned, &inputs, &pool, reps * 3, &key_of)?;
        let lost: Vec<String> = winners
            .keys()
            .filter(|k| match (base_us.get(*k), tuned_us.get(*k)) {
                (Some(b), Some(t)) => *t >= b * CONFIRM,
                _ => true,
            })
            .cloned()
            .collect();
        for k in &lost {
            winners.remove(k);
        }
        if lost.is_empty() {
            break (tuned, base_us, tuned_us);
        }
        if attempt == CONFIRM_ROUNDS {
            // The build without them, timed once more for the report.
            let tuned = build(ScheduleTuning::applying(with_reused(&winners)))?;
            let (base_us, tuned_us) = time_kernels(&base, &tuned, &inputs, &pool, reps * 3, &key_of)?;
            break (tuned, base_us, tuned_us);
        }
        progress(&format!("{} winners did not confirm; timing the {} others again", lost.len(), winners.len()));
    };
    check_outputs(&base, &tuned, &inputs, &pool)?;
    let (model_default_us, model_tuned_us) = time_models(&base, &tuned, &inputs, &pool, reps * 3)?;

    let mut kernels = Vec::new();
    let mut records = Vec::new();
    for k in &seen {
        let (default_us, tuned_k) = (base_us.get(&k.key).copied().unwrap_or(0.0), tuned_us.get(&k.key).copied());
        let knobs = winners.get(&k.key).or_else(|| reused.get(&k.key)).cloned().unwrap_or_default();
        if let Some(w) = winners.get(&k.key) {
            records.push(TuningRecord {
                key: k.key.clone(),
                kernel: k.name.clone(),
                anchor: k.anchor.clone(),
                cpu: target.cpu.clone(),
                features: target.features.clone(),
                threads: opts.threads,
                knobs: w.clone(),
                tuned_us: tuned_k.unwrap_or(0.0),
                default_us,
            });
        }
        kernels.push(KernelOutcome {
            name: k.name.clone(),
            key: k.key.clone(),
            anchor: k.anchor.clone(),
            default_us,
            tuned_us: tuned_k.unwrap_or(default_us),
            knobs,
            tried: tried.get(&k.key).copied().unwrap_or(0),
            reused: reused.contains_key(&k.key),
        });
    }
    kernels.sort_by(|a, b| b.default_us.total_cmp(&a.default_us));
    let report = TuneReport {
        kernels,
        model_default_us,
        model_tuned_us,
        rounds,
        elapsed: start.elapsed(),
        target,
        threads: opts.threads,
    };
    Ok((records, report))
}

/// At most this many points of a kernel's space are listed (cheapest first).
const SPACE_LIMIT: usize = 400;

/// How far apart two points of a space are: tile steps, plus a loop order
/// or thread change counted as two and four steps.
fn distance(a: &Knobs, b: &Knobs) -> i64 {
    let steps = |x: Option<i64>, y: Option<i64>| (x.unwrap_or(0) - y.unwrap_or(0)).abs();
    steps(a.rows, b.rows)
        + steps(a.cols, b.cols)
        + 2 * i64::from(a.order != b.order)
        + 4 * i64::from(a.serial != b.serial)
}

/// A candidate wins its round when it takes less than this share of the rule's time...
const WIN: f64 = 0.97;
/// ...and is kept when the confirming round times it below this share...
const CONFIRM: f64 = 0.99;
/// ...in up to this many confirming rounds (each drops the winners it does not confirm).
const CONFIRM_ROUNDS: usize = 3;

/// One entry per kernel key (identical kernels share their knobs).
fn distinct(seen: Vec<SeenKernel>) -> Vec<SeenKernel> {
    let mut keys = BTreeSet::new();
    seen.into_iter().filter(|k| keys.insert(k.key.clone())).collect()
}

/// The plan's inputs in order: the one of each name given, zeros otherwise.
fn arrange_inputs(plan: &ExecutorPlan, given: &[(String, Tensor)]) -> Result<Vec<Tensor>, TuneError> {
    for (name, _) in given {
        if !plan.inputs.iter().any(|&t| &plan.tensors[t].name == name) {
            let names: Vec<&str> = plan.inputs.iter().map(|&t| plan.tensors[t].name.as_str()).collect();
            return Err(TuneError::Target(format!(
                "`{name}` is not an input of the model (its inputs: {})",
                names.join(", ")
            )));
        }
    }
    Ok(plan
        .inputs
        .iter()
        .map(|&t| {
            let slot = &plan.tensors[t];
            given
                .iter()
                .find(|(n, _)| n == &slot.name)
                .map_or_else(|| Tensor::zeros(slot.dtype, slot.shape.clone()), |(_, x)| x.clone())
        })
        .collect())
}

fn executor<'v>(v: &'v Variant, inputs: &[Tensor], pool: &Pool) -> Result<Executor<'v>, RunError> {
    let mut ex = Executor::with_pool(&v.plan, v.lib.as_ref(), pool.clone())?;
    ex.set_inputs(inputs)?;
    Ok(ex)
}

/// Per kernel key, the median microseconds of its calls (summed over the
/// calls of one run) in `a` and in `b`, timed interleaved run by run.
#[allow(clippy::type_complexity)]
fn time_kernels(
    a: &Variant,
    b: &Variant,
    inputs: &[Tensor],
    pool: &Pool,
    reps: usize,
    key_of: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, f64>, BTreeMap<String, f64>), RunError> {
    let (mut ea, mut eb) = (executor(a, inputs, pool)?, executor(b, inputs, pool)?);
    for _ in 0..2 {
        ea.run()?;
        eb.run()?;
    }
    let mut sa = vec![Vec::with_capacity(reps); a.plan.calls.len()];
    let mut sb = vec![Vec::with_capacity(reps); b.plan.calls.len()];
    for _ in 0..reps {
        for (i, t) in ea.run_timed()?.into_iter().enumerate() {
            sa[i].push(t);
        }
        for (i, t) in eb.run_timed()?.into_iter().enumerate() {
            sb[i].push(t);
        }
    }
    Ok((by_key(&a.plan, sa, key_of), by_key(&b.plan, sb, key_of)))
}

fn by_key(plan: &ExecutorPlan, samples: Vec<Vec<f64>>, key_of: &BTreeMap<String, String>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (call, s) in plan.calls.iter().zip(samples) {
        if let Some(key) = key_of.get(&plan.kernels[call.kernel].name) {
            *out.entry(key.clone()).or_insert(0.0) += median(s);
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Median whole-model microseconds of `a` and `b`, interleaved.
fn time_models(a: &Variant, b: &Variant, inputs: &[Tensor], pool: &Pool, reps: usize) -> Result<(f64, f64), RunError> {
    let (mut ea, mut eb) = (executor(a, inputs, pool)?, executor(b, inputs, pool)?);
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        ea.run()?;
        eb.run()?;
    }
    for _ in 0..reps {
        let t = Instant::now();
        ea.run()?;
        ta.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        eb.run()?;
        tb.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok((median(ta), median(tb)))
}

/// The tuned build computes what the rule's does, up to reassociation.
fn check_outputs(base: &Variant, tuned: &Variant, inputs: &[Tensor], pool: &Pool) -> Result<(), TuneError> {
    let mut eb = executor(base, inputs, pool)?;
    let mut et = executor(tuned, inputs, pool)?;
    eb.run()?;
    et.run()?;
    for (output, (x, y)) in eb.outputs().iter().zip(et.outputs()).enumerate() {
        let (x, y) = (x.to_f64_vec(), y.to_f64_vec());
        let scale = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let tolerance = 1e-4 * scale.max(1.0);
        let difference = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        if difference > tolerance || difference.is_nan() {
            return Err(TuneError::Mismatch { output, difference, tolerance });
        }
    }
    Ok(())
}
