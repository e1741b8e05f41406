//! `kiln accuracy`: a model's outputs against a reference model's on the
//! same inputs — how far a quantized model is from its float original, or
//! a model in the bf16 precision (`--precision bf16`, no `--reference`)
//! from itself in fp32, so that users can decide whether its speed is
//! worth the error. An input
//! file may hold several samples: `N × …` where the model takes `1 × …`
//! (or a symbolic first dimension, which is then fixed to 1 unless
//! `--input-shape` says otherwise) runs each of the N in turn: top-1
//! agreement over a set of images.

use kiln::backend::aot::ExecutorPlan;
use kiln::backend::host::Executor;
use kiln::Tensor;

use crate::args::AccuracyOptions;
use crate::{kernel_library, out, prepare_run, CompileArgs};

/// How the outputs differ from the reference's, over every sample.
#[derive(Default)]
struct Difference {
    max_abs: f64,
    sum_abs: f64,
    counted: usize,
    /// The reference's largest magnitude (for the relative error).
    scale: f64,
    /// Rows (along the last axis) whose largest value is at the same index.
    top1_same: usize,
    rows: usize,
    /// Values that are NaN in one output and not in the other.
    nan_mismatches: usize,
}

fn argmax(row: &[f64]) -> usize {
    row.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b }).0
}

impl Difference {
    fn add(&mut self, got: &[f64], want: &[f64], last: usize) {
        for (g, w) in got.iter().zip(want) {
            if g.is_nan() || w.is_nan() {
                self.nan_mismatches += usize::from(g.is_nan() != w.is_nan());
                continue;
            }
            let d = (g - w).abs();
            self.max_abs = self.max_abs.max(d);
            self.sum_abs += d;
            self.counted += 1;
            self.scale = self.scale.max(w.abs());
        }
        let last = last.max(1);
        let rows = got.len() / last;
        self.rows += rows;
        self.top1_same +=
            (0..rows).filter(|&r| argmax(&got[r * last..][..last]) == argmax(&want[r * last..][..last])).count();
    }
}

/// The samples of `inputs` for `plan`: each input as given when it has the
/// plan's shape, else split along its first axis when that is the plan's
/// batch of 1 repeated N times (the same N for every input so split).
fn samples(plan: &ExecutorPlan, inputs: Vec<Tensor>) -> Result<Vec<Vec<Tensor>>, String> {
    let mut count = 1;
    for (&t, x) in plan.inputs.iter().zip(&inputs) {
        let want = &plan.tensors[t].shape;
        if x.shape() == want.as_slice() {
            continue;
        }
        let stacked = want.first() == Some(&1)
            && x.shape().len() == want.len()
            && x.shape()[0] > 1
            && x.shape()[1..] == want[1..];
        if !stacked || (count > 1 && x.shape()[0] != count) {
            return Err(format!(
                "input `{}` is {:?}: expected {want:?}, or N samples of it stacked along the first axis (the same \
                 N for every input)",
                plan.tensors[t].name,
                x.shape()
            ));
        }
        count = x.shape()[0];
    }
    (0..count)
        .map(|k| {
            plan.inputs
                .iter()
                .zip(&inputs)
                .map(|(&t, x)| {
                    let want = &plan.tensors[t].shape;
                    if x.shape() == want.as_slice() {
                        return Ok(x.clone());
                    }
                    let size = x.bytes().len() / x.shape()[0];
                    Tensor::from_bytes(x.dtype(), want.clone(), x.bytes()[k * size..][..size].to_vec())
                        .ok_or_else(|| format!("input `{}`: sample {k} could not be cut out", plan.tensors[t].name))
                })
                .collect()
        })
        .collect()
}

/// Every sample's outputs from `c`'s model, compiled once.
fn outputs(c: &CompileArgs) -> Result<(ExecutorPlan, Vec<Vec<Tensor>>), String> {
    if kiln::build::is_cuda_target(&c.target) {
        return Err("kiln accuracy runs CPU targets (llvm, c)".into());
    }
    let (plan, inputs) = prepare_run(c)?;
    let runs = samples(&plan, inputs)?;
    let lib = kernel_library(c, &plan)?;
    let mut ex = Executor::new(&plan, lib.as_ref(), c.threads).map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    for sample in &runs {
        ex.set_inputs(sample).map_err(|e| e.to_string())?;
        ex.run().map_err(|e| e.to_string())?;
        all.push(ex.outputs());
    }
    drop(ex);
    Ok((plan, all))
}

/// Each `--input` file of `N × …` (N > 1) as `1 × …` for the compiler, where
/// `--input-shape` does not say otherwise: its samples run one at a time.
fn one_sample_shapes(c: &mut CompileArgs) {
    for (name, path) in &c.inputs {
        if c.input_shapes.iter().any(|(n, _)| n == name) {
            continue;
        }
        let shape = std::fs::read(path).ok().and_then(|b| kiln::npy::read_npy(&b).ok()).map(|t| t.shape().to_vec());
        if let Some(mut shape) = shape.filter(|s| s.first().is_some_and(|&n| n > 1)) {
            shape[0] = 1;
            c.input_shapes.push((name.clone(), shape));
        }
    }
}

pub fn accuracy(a: AccuracyOptions) -> Result<(), String> {
    let mut c = CompileArgs::run(a.run);
    one_sample_shapes(&mut c);
    // The reference: another model, or this one; in fp32 either way.
    let (file, weights) = match a.reference {
        Some(file) => (file, a.reference_weights),
        None => (c.file.clone(), c.weights.clone()),
    };
    let r =
        CompileArgs { file, weights, tuning: None, outputs: Vec::new(), precision: kiln::Precision::Fp32, ..c.clone() };
    let (_, got) = outputs(&c)?;
    let (_, want) = outputs(&r)?;
    let (first, reference) = (&got[0], &want[0]);
    if first.len() != reference.len() {
        return Err(format!(
            "{} has {} output(s), the reference {} has {}",
            c.file,
            first.len(),
            r.file,
            reference.len()
        ));
    }
    for (i, (g, w)) in first.iter().zip(reference).enumerate() {
        if g.shape() != w.shape() {
            return Err(format!(
                "output {i} is {:?} in {}, {:?} in the reference {}",
                g.shape(),
                c.file,
                w.shape(),
                r.file
            ));
        }
    }
    for i in 0..first.len() {
        let mut d = Difference::default();
        for (g, w) in got.iter().zip(&want) {
            let last = g[i].shape().last().copied().unwrap_or(1);
            d.add(&g[i].to_f64_vec(), &w[i].to_f64_vec(), last);
        }
        let relative = if d.scale > 0.0 { d.max_abs / d.scale } else { d.max_abs };
        let mut line = format!(
            "output {i} {:?}, {} sample(s): max abs error {:.6e}, mean abs error {:.6e}, max relative error {:.6e} \
             (of the reference's largest magnitude), top-1 agreement {}/{} ({:.1}%)",
            first[i].shape(),
            got.len(),
            d.max_abs,
            if d.counted > 0 { d.sum_abs / d.counted as f64 } else { 0.0 },
            relative,
            d.top1_same,
            d.rows,
            100.0 * d.top1_same as f64 / d.rows.max(1) as f64
        );
        if d.nan_mismatches > 0 {
            line.push_str(&format!(", {} value(s) NaN on one side only", d.nan_mismatches));
        }
        out(&format!("{line}\n"));
    }
    // `--output`: the first sample's outputs, as `kiln run` writes them.
    for (p, t) in c.outputs.iter().zip(first) {
        std::fs::write(p, kiln::npy::write_npy(t)).map_err(|e| format!("{p}: {e}"))?;
    }
    Ok(())
}
