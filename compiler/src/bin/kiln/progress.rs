//! The progress line of `kiln build`, `run`, `bench` and `viz`: the stage
//! and the pass, kernel or run in progress, on stderr. indicatif draws
//! nothing when stderr is not a terminal, so pipes, CI logs and tests see
//! only the commands' own output.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use kiln::relay::IRModule;
use kiln::transform::{PassBodyError, PassInfo, PassInstrument};

static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// The one progress line of this process, shown from its first use.
fn bar() -> &'static ProgressBar {
    BAR.get_or_init(|| {
        let bar = ProgressBar::new_spinner();
        let style = ProgressStyle::with_template("{spinner} {prefix:.bold} {wide_msg} {elapsed}");
        bar.set_style(style.unwrap_or_else(|_| ProgressStyle::default_spinner()));
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    })
}

/// Show `stage` (and clear the detail).
pub fn stage(stage: &str) {
    bar().set_prefix(stage.to_string());
    bar().set_message("");
}

/// Show what the stage is working on.
pub fn detail(text: impl Into<String>) {
    bar().set_message(text.into());
}

/// Remove the line for good (before the command prints its results or an error).
pub fn finish() {
    if let Some(bar) = BAR.get() {
        bar.finish_and_clear();
    }
}

/// A line on stderr that does not tear the progress line.
pub fn note(line: &str) {
    match BAR.get() {
        Some(bar) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

/// Names each pass on the progress line as it starts.
#[derive(Debug, Default)]
pub struct PassProgress;

impl PassProgress {
    pub fn instrument() -> Arc<dyn PassInstrument> {
        Arc::new(PassProgress)
    }
}

impl PassInstrument for PassProgress {
    fn name(&self) -> &str {
        "Progress"
    }

    fn run_before_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        detail(format!("pass {}", info.name));
        Ok(())
    }
}
