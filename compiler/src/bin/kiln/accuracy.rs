//! `kiln accuracy`: a model's outputs against a reference model's on the
//! same inputs — how far a quantized model is from its float original, so
//! that users can decide whether its speed is worth the error.

use crate::args::AccuracyOptions;
use crate::{execute, out, prepare_run, CompileArgs};

/// How one output differs from the reference's.
struct Difference {
    max_abs: f64,
    mean_abs: f64,
    /// `max_abs` over the reference's largest magnitude.
    relative: f64,
    /// Rows (along the last axis) whose largest value is at the same index.
    top1_same: usize,
    rows: usize,
    /// Values that are NaN in one output and not in the other.
    nan_mismatches: usize,
}

fn argmax(row: &[f64]) -> usize {
    row.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b }).0
}

fn difference(got: &[f64], want: &[f64], last: usize) -> Difference {
    let (mut max_abs, mut sum, mut counted, mut nan_mismatches) = (0f64, 0f64, 0usize, 0usize);
    for (g, w) in got.iter().zip(want) {
        if g.is_nan() || w.is_nan() {
            nan_mismatches += usize::from(g.is_nan() != w.is_nan());
            continue;
        }
        let d = (g - w).abs();
        max_abs = max_abs.max(d);
        sum += d;
        counted += 1;
    }
    let scale = want.iter().filter(|v| !v.is_nan()).fold(0f64, |a, v| a.max(v.abs()));
    let last = last.max(1);
    let rows = got.len() / last;
    let top1_same =
        (0..rows).filter(|&r| argmax(&got[r * last..][..last]) == argmax(&want[r * last..][..last])).count();
    Difference {
        max_abs,
        mean_abs: if counted > 0 { sum / counted as f64 } else { 0.0 },
        relative: if scale > 0.0 { max_abs / scale } else { max_abs },
        top1_same,
        rows,
        nan_mismatches,
    }
}

pub fn accuracy(a: AccuracyOptions) -> Result<(), String> {
    let c = CompileArgs::run(a.run);
    let r =
        CompileArgs { file: a.reference, weights: a.reference_weights, tuning: None, outputs: Vec::new(), ..c.clone() };
    let (plan, inputs) = prepare_run(&c)?;
    let got = execute(&c, &plan, &inputs, false)?;
    let (reference_plan, reference_inputs) = prepare_run(&r)?;
    let want = execute(&r, &reference_plan, &reference_inputs, false)?;
    if got.len() != want.len() {
        return Err(format!("{} has {} output(s), the reference {} has {}", c.file, got.len(), r.file, want.len()));
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.shape() != w.shape() {
            return Err(format!(
                "output {i} is {:?} in {}, {:?} in the reference {}",
                g.shape(),
                c.file,
                w.shape(),
                r.file
            ));
        }
        let d = difference(&g.to_f64_vec(), &w.to_f64_vec(), g.shape().last().copied().unwrap_or(1));
        let mut line = format!(
            "output {i} {:?}: max abs error {:.6e}, mean abs error {:.6e}, max relative error {:.6e} (of the \
             reference's largest magnitude), top-1 agreement {}/{} ({:.1}%)",
            g.shape(),
            d.max_abs,
            d.mean_abs,
            d.relative,
            d.top1_same,
            d.rows,
            100.0 * d.top1_same as f64 / d.rows.max(1) as f64
        );
        if d.nan_mismatches > 0 {
            line.push_str(&format!(", {} value(s) NaN on one side only", d.nan_mismatches));
        }
        out(&format!("{line}\n"));
        if let Some(p) = c.outputs.get(i) {
            std::fs::write(p, kiln::npy::write_npy(g)).map_err(|e| format!("{p}: {e}"))?;
        }
    }
    Ok(())
}
