//! `kiln tune`: the schedule search of [`kiln::tune`] on the command line,
//! with its progress on the terminal and its result as a tuning log and a
//! table of per-kernel and whole-model speed-ups.

use std::path::Path;

use kiln::tune::{TuneOptions as SearchOptions, TuningLog};

use super::{out, prepare_module, progress, CompileArgs};
use crate::args::TuneOptions;

pub fn tune(t: TuneOptions) -> Result<(), String> {
    let mut c = CompileArgs::new(t.compile);
    c.inputs = t.input;
    c.threads = t.threads;
    if c.tuning.is_some() {
        return Err(
            "`kiln tune` reads and extends its own log (-o FILE); --tuning applies to build, run and bench".into()
        );
    }
    if kiln::build::is_cuda_target(&c.target) {
        return Err("`kiln tune` times CPU kernels; a `cuda` target is not tuned yet".into());
    }
    let out_path = Path::new(&t.out);
    // An existing log is extended: its records for this CPU are reused, the others kept.
    let mut log = if out_path.exists() {
        let (log, warnings) = TuningLog::read(out_path).map_err(|e| e.to_string())?;
        for w in warnings {
            progress::note(&format!("warning: {w}"));
        }
        log
    } else {
        TuningLog::default()
    };
    let module = prepare_module(&c)?;
    let mut inputs = Vec::new();
    for (name, path) in &c.inputs {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        inputs.push((name.clone(), kiln::npy::read_npy(&bytes).map_err(|e| format!("{path}: {e}"))?));
    }
    let mut config = Vec::new();
    for (k, v) in &c.config {
        config.push((k.clone(), kiln::transform::parse_config(k, v).map_err(|e| e.to_string())?));
    }
    let opts = SearchOptions {
        target: c.target.clone(),
        opt_level: c.opt_level,
        threads: c.threads,
        budget: t.budget,
        candidates: t.candidates as usize,
        config,
    };
    progress::stage("tuning");
    let (records, report) = kiln::tune::tune(module, &inputs, &opts, &log, &mut |line| progress::detail(line))
        .map_err(|e| format!("{}: {e}", c.file))?;
    progress::finish();
    let found = records.len();
    log.merge(records);
    std::fs::write(out_path, log.to_json()).map_err(|e| format!("{}: {e}", out_path.display()))?;

    out(&format!(
        "{}: tuned for {} ({}) at {} thread(s): {} search rounds in {:.0} s\n\n",
        c.file,
        report.target.cpu,
        report.target.features.join(" "),
        report.threads,
        report.rounds,
        report.elapsed.as_secs_f64()
    ));
    out("| kernel | anchor | rule µs | tuned µs | speed-up | knobs | tried |\n| --- | --- | ---: | ---: | ---: | --- | ---: |\n");
    for k in &report.kernels {
        let knobs = if k.reused { format!("{} (reused)", k.knobs) } else { k.knobs.to_string() };
        out(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.2}× | {} | {} |\n",
            k.name,
            if k.anchor.is_empty() { "-" } else { &k.anchor },
            k.default_us,
            k.tuned_us,
            k.default_us / k.tuned_us.max(1e-9),
            knobs,
            k.tried
        ));
    }
    let reused = report.kernels.iter().filter(|k| k.reused).count();
    out(&format!(
        "\nwhole model: {:.1} µs with the rule's schedules, {:.1} µs tuned ({:.2}× faster; medians, interleaved)\n\
         {found} new record(s), {reused} reused from {}; wrote {}\n",
        report.model_default_us,
        report.model_tuned_us,
        report.model_default_us / report.model_tuned_us.max(1e-9),
        out_path.display(),
        out_path.display()
    ));
    Ok(())
}
