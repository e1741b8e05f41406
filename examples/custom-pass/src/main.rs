//! Two builds of one MLP, compiled into this binary by `build.rs`: `plain`,
//! and `relu6`, whose build ran the user's pass `ReluToRelu6` (every ReLU
//! becomes a clip to [0, 6]) before kiln's own pipeline. `main` runs both on
//! the sample input, prints them, and checks each against the reference
//! interpreter's output of its model, recorded at build time, and that the
//! pass did what it says: the ReLU6 model's outputs are the plain one's capped at 6
//! (the sample has one above 6).
//!
//! `cargo run -p kiln-example-custom-pass`

use std::process::ExitCode;

kiln_runtime::include_model!("plain");
kiln_runtime::include_model!("relu6");
include!(concat!(env!("OUT_DIR"), "/reference.rs"));

/// Both compiled models on the sample input.
fn run_both() -> Result<([f32; 8], [f32; 8]), kiln_runtime::Error> {
    let (mut a, mut b) = ([0f32; 8], [0f32; 8]);
    plain::OwnedModel::with_threads(1)?.run(&SAMPLE, &mut a)?;
    relu6::OwnedModel::with_threads(1)?.run(&SAMPLE, &mut b)?;
    Ok((a, b))
}

/// Max abs error of `got` against `want`, an error message past 1e-4 × max |want|.
fn compare(what: &str, got: &[f32; 8], want: &[f32; 8]) -> Result<f32, String> {
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let err = got.iter().zip(want).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
    if err > 1e-4 * scale {
        return Err(format!(
            "{what}: max abs error {err:e} against the reference interpreter (tolerance {:e})",
            1e-4 * scale
        ));
    }
    Ok(err)
}

/// Every check `main` and the tests make; the max abs errors of both models.
fn check(plain_out: &[f32; 8], relu6_out: &[f32; 8]) -> Result<(f32, f32), String> {
    let errs = (compare("plain", plain_out, &EXPECTED_PLAIN)?, compare("relu6", relu6_out, &EXPECTED_RELU6)?);
    if !plain_out.iter().any(|&v| v > 6.0) {
        return Err("the plain model has no output above 6: the sample does not show the pass".into());
    }
    // The weights keep every hidden value below 6, so the pass changes exactly the outputs above 6.
    for (i, (p, r)) in plain_out.iter().zip(relu6_out).enumerate() {
        if (p.min(6.0) - r).abs() > 1e-4 {
            return Err(format!("output {i}: ReLU6 model {r}, plain {p}: not min(plain, 6), so the pass did not run"));
        }
    }
    Ok(errs)
}

fn main() -> ExitCode {
    println!("the user's pass ReluToRelu6 turned the model into:\n{RELU6_RELAY}");
    let (plain_out, relu6_out) = match run_both() {
        Ok(outs) => outs,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("plain (ReLU):  {plain_out:?}");
    println!("relu6 (pass):  {relu6_out:?}");
    match check(&plain_out, &relu6_out) {
        Ok((a, b)) => {
            println!("both match the reference interpreter (max abs error {a:e} plain, {b:e} relu6);");
            println!("the pass capped the outputs above 6 and left the others: relu6 = min(plain, 6)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pass_ran_in_the_build_and_both_models_match_the_interpreter() {
        let (plain_out, relu6_out) = run_both().expect("run");
        check(&plain_out, &relu6_out).expect("checks");
        // The rewrite is visible in the IR the build script recorded.
        assert_eq!(RELU6_RELAY.matches("clip(").count(), 2, "{RELU6_RELAY}");
        assert!(!RELU6_RELAY.contains("nn.relu"), "{RELU6_RELAY}");
    }

    #[test]
    fn the_checks_catch_a_model_without_the_pass() {
        let (plain_out, _) = run_both().expect("run");
        assert!(check(&plain_out, &plain_out).is_err());
    }
}
