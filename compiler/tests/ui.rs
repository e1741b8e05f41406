//! Compile-time errors of the proc-macros, each pointing at the user's token
//! (`.stderr` snapshots next to each case; bless with TRYBUILD=overwrite).
//!
//! The snapshots are rustc's own output, so they hold for the rustc they were
//! taken with, recorded in `ui/RUSTC_VERSION` (update it when re-blessing).
//! Under another rustc the test shows as ignored, naming both versions,
//! rather than failing on a reworded diagnostic or passing silently.

use libtest_mimic::{Arguments, Trial};

const NAME: &str = "macro_errors_point_at_the_offending_token";

/// `1.95.0` from `rustc 1.95.0 (59807616e 2026-04-14)`, for the rustc cargo uses.
fn rustc_version() -> Option<String> {
    #[allow(clippy::disallowed_methods)] // a test, not the build API
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc).arg("--version").output().ok()?;
    String::from_utf8(out.stdout).ok()?.split_whitespace().nth(1).map(str::to_string)
}

fn main() {
    let recorded = include_str!("ui/RUSTC_VERSION").trim();
    let running = rustc_version().unwrap_or_else(|| "unknown".into());
    let trial = if running == recorded {
        Trial::test(NAME, || {
            trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
            Ok(())
        })
    } else {
        let why = format!("{NAME} (ignored: snapshots taken with rustc {recorded}, this is rustc {running})");
        Trial::test(why, || Ok(())).with_ignored_flag(true)
    };
    libtest_mimic::run(&Arguments::from_args(), vec![trial]).exit();
}
