//! Sweeps as one test per case (libtest-mimic): a failure names the corpus
//! program or model, a case the sweep does not apply to shows as *ignored*
//! with the reason, and cases run in parallel. What a sweep must cover as a
//! whole (every operator, a least number of programs) is checked after its
//! cases ran, when none was filtered out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kiln::relay::IRModule;
pub use libtest_mimic::{Completion, Failed, Trial};

use kiln::Tensor;

use super::{corpus, corpus_case, missing_operators, operators, reference_model, CorpusCase};

/// The file's plain tests as trials: `trials![a, b]` runs `a()` and `b()`.
#[macro_export]
macro_rules! trials {
    ($($test:ident),* $(,)?) => {
        vec![$(common::sweep::Trial::test(stringify!($test), || {
            $test();
            Ok(())
        })),*]
    };
}

/// What the cases of a corpus sweep covered together.
#[derive(Default)]
pub struct Coverage {
    operators: Mutex<BTreeSet<&'static str>>,
    programs: AtomicUsize,
    counts: Mutex<BTreeMap<&'static str, usize>>,
}

impl Coverage {
    /// The operators `m`'s functions call count as covered.
    pub fn operators_of(&self, m: &IRModule) {
        operators(m, &mut self.operators.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// One more program compiled and checked.
    pub fn program(&self) {
        self.programs.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` more of what `what` counts (checked against [`CorpusSweep::at_least`]).
    pub fn count(&self, what: &'static str, n: usize) {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()).entry(what).or_default() += n;
    }
}

/// One program's check: `Ok(Completion::ignored_with(why))` where it does not apply.
pub type Check = fn(&CorpusCase, &Coverage) -> Result<Completion, Failed>;

/// A sweep of the Relay corpus: `check` per program (`corpus::<program>`),
/// then every registered operator but `exempt` covered and at least
/// `min_programs` checked, and each of `at_least`'s counts reached — unless
/// the sweep cannot run here at all (`unavailable`: every program ignored
/// with that reason, no coverage check).
pub struct CorpusSweep {
    pub unavailable: Option<String>,
    pub check: Check,
    pub exempt: &'static [&'static str],
    pub min_programs: usize,
    pub at_least: &'static [(&'static str, usize)],
}

/// Run `sweep` beside the file's other tests (`others`) and exit with the result.
pub fn run(sweep: CorpusSweep, mut others: Vec<Trial>) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let coverage = Arc::new(Coverage::default());
    for (name, text) in corpus() {
        let (coverage, check, unavailable) = (coverage.clone(), sweep.check, sweep.unavailable.clone());
        others.push(Trial::ignorable_test(format!("corpus::{name}"), move || {
            if let Some(why) = unavailable {
                return Ok(Completion::ignored_with(why));
            }
            match corpus_case(name, &text) {
                Some(case) => check(&case, &coverage),
                None => Ok(Completion::ignored_with("`@main` does not take tensors only")),
            }
        }));
    }
    let whole =
        sweep.unavailable.is_none() && args.filter.is_none() && args.skip.is_empty() && !args.ignored && !args.list;
    let conclusion = libtest_mimic::run(&args, others);
    if whole && !conclusion.has_failed() {
        let covered = coverage.operators.lock().unwrap_or_else(|e| e.into_inner());
        let missing: Vec<_> = missing_operators(&covered).into_iter().filter(|o| !sweep.exempt.contains(o)).collect();
        let programs = coverage.programs.load(Ordering::Relaxed);
        let counts = coverage.counts.lock().unwrap_or_else(|e| e.into_inner());
        let short: Vec<String> = sweep
            .at_least
            .iter()
            .filter(|(what, n)| counts.get(what).copied().unwrap_or(0) < *n)
            .map(|(what, n)| format!("{} {what} (at least {n})", counts.get(what).copied().unwrap_or(0)))
            .collect();
        if !missing.is_empty() || programs < sweep.min_programs || !short.is_empty() {
            eprintln!(
                "corpus coverage: operators not covered {missing:?}; {programs} programs (at least {}); {short:?}",
                sweep.min_programs
            );
            std::process::exit(101);
        }
        println!("corpus coverage: every operator, {programs} programs, {counts:?}");
    }
    conclusion.exit()
}

/// Where a sweep does not apply to a program: not compiled ahead of time.
pub fn not_ahead_of_time() -> Result<Completion, Failed> {
    Ok(Completion::ignored_with("not compiled ahead of time (control flow, closures or several globals)"))
}

/// A check of one reference model: its module, input and ONNX Runtime's output.
pub type ModelCheck = fn(&str, IRModule, Tensor, Tensor) -> Result<(), Failed>;

/// The reference models (`../shared/models` or `$KILN_MODELS`), one trial
/// each (`<prefix>::<model>`), ignored with the reason where absent.
pub fn model_trials(prefix: &str, models: &[&'static str], check: ModelCheck) -> Vec<Trial> {
    model_trials_where(prefix, models, None, check)
}

/// [`model_trials`], each ignored with `unavailable`'s reason where given.
pub fn model_trials_where(
    prefix: &str,
    models: &[&'static str],
    unavailable: Option<String>,
    check: ModelCheck,
) -> Vec<Trial> {
    models
        .iter()
        .map(|&name| {
            let unavailable = unavailable.clone();
            Trial::ignorable_test(format!("{prefix}::{name}"), move || {
                if let Some(why) = unavailable {
                    return Ok(Completion::ignored_with(why));
                }
                match reference_model(name) {
                    Some((m, input, want)) => check(name, m, input, want).map(|()| Completion::Completed),
                    None => {
                        Ok(Completion::ignored_with(format!("{name} is not in ../shared/models (or $KILN_MODELS)")))
                    }
                }
            })
        })
        .collect()
}

/// The four reference models every sweep runs.
pub const REFERENCE_MODELS: [&str; 4] = ["mlp", "lenet", "resnet18", "mobilenetv2"];

/// The models the GPU sweeps run: the four, and the GPT-style decoder.
pub const GPU_REFERENCE_MODELS: [&str; 5] = ["mlp", "lenet", "resnet18", "mobilenetv2", "gpt_tiny"];
