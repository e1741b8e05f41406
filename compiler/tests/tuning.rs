//! Schedule tuning (`kiln tune`, tuning logs): every point of a kernel's
//! schedule space computes the rule's values; a log found by the search
//! rebuilds byte-identically and matches the interpreter; logs for other
//! CPUs, records that no longer fit and unreadable logs are handled as the
//! user is promised.
#![cfg(feature = "llvm")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kiln::relay::{parse_module, IRModule, Value};
use kiln::schedule::{ConvOrder, Knobs, ScheduleTuning};
use kiln::transform::PassContext;
use kiln::tune::{TuneOptions, TuningLog, TuningRecord};
use kiln::Tensor;

/// A convolution (packed weights), depthwise convolutions (stride 1 and 2:
/// a plain and a phase-split padded image), a pointwise one and a dense
/// layer: every tiled strategy.
const MODEL: &str = "#[version = \"0.0.5\"]
def @main(%x: Tensor[(1, 16, 14, 14), float32], %w1: Tensor[(32, 16, 3, 3), float32],
          %w2: Tensor[(32, 1, 3, 3), float32], %w3: Tensor[(64, 32, 1, 1), float32],
          %w4: Tensor[(48, 64), float32], %w5: Tensor[(32, 1, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1, 1, 1], groups=32, channels=32, kernel_size=[3, 3]);
  %20 = nn.conv2d(%2, %w5, strides=[2, 2], padding=[1, 1, 1, 1], groups=32, channels=32, kernel_size=[3, 3]);
  %3 = nn.conv2d(%20, %w3, padding=[0, 0, 0, 0], channels=64, kernel_size=[1, 1]);
  %4 = nn.global_avg_pool2d(%3);
  %5 = reshape(%4, newshape=[1, 64]);
  nn.dense(%5, %w4, units=48)
}";

fn tensor(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 200) as f32 / 100.0 - 1.0)
        .collect();
    Tensor::from_f32(shape.to_vec(), &v)
}

/// The model with its weights bound as constants (so that they are packed), and an input.
fn model() -> (kiln::Build, IRModule, Tensor) {
    let mut b = kiln::Build::new("tuned");
    b.module(parse_module(MODEL).expect("parse"))
        .weight("w1", tensor(&[32, 16, 3, 3], 1))
        .weight("w2", tensor(&[32, 1, 3, 3], 2))
        .weight("w3", tensor(&[64, 32, 1, 1], 3))
        .weight("w4", tensor(&[48, 64], 4))
        .weight("w5", tensor(&[32, 1, 3, 3], 6))
        .target("llvm -mcpu=native")
        .cargo_metadata(false);
    let m = b.prepare().expect("prepare");
    (b, m, tensor(&[1, 16, 14, 14], 5))
}

fn interpreted(m: &IRModule, x: &Tensor) -> Vec<f64> {
    match kiln::relay::eval_function(m, "main", &[Value::Tensor(x.clone())]).expect("eval") {
        Value::Tensor(t) => t.to_f64_vec(),
        other => panic!("{other:?}"),
    }
}

fn run(plan: &kiln::backend::aot::ExecutorPlan, x: &Tensor, threads: usize) -> Vec<f64> {
    let jit = kiln::codegen::llvm::Jit::new("tuning_test", &plan.kernels).expect("jit");
    kiln::backend::host::run(plan, &jit, &[x.clone()], threads).expect("run")[0].to_f64_vec()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let err = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(err <= 1e-4 * scale, "{what}: max error {err} (scale {scale})");
}

/// The plan of `fused` with `tuning` attached to the context.
fn plan_with(fused: &IRModule, tuning: Arc<ScheduleTuning>) -> kiln::backend::aot::ExecutorPlan {
    let mut ctx = PassContext::new().with_opt_level(3);
    kiln::target::configure_context("llvm -mcpu=native", &mut ctx);
    let tir = kiln::schedule::passes::tir_pipeline().expect("pipeline");
    Arc::new(ctx.with_extension(tuning)).scope(|ctx| kiln::build::lower_and_schedule(fused, ctx, &tir)).expect("lower")
}

fn optimized(m: &IRModule) -> IRModule {
    let mut ctx = PassContext::new().with_opt_level(3);
    kiln::target::configure_context("llvm -mcpu=native", &mut ctx);
    Arc::new(ctx)
        .scope(|ctx| kiln::transform::apply(&kiln::relay::transform::default_pipeline()?, m.clone(), ctx))
        .expect("optimize")
}

/// Applying a record never changes results beyond reassociation: round by
/// round, every kernel at its next candidate (serial variants included,
/// run on two threads), each applied as asked and checked against the
/// interpreter.
#[test]
fn every_candidate_computes_the_rules_values() {
    let (_, m, x) = model();
    let want = interpreted(&m, &x);
    let fused = optimized(&m);
    let recorder = ScheduleTuning::recording(BTreeMap::new(), 2, 12);
    let base = plan_with(&fused, recorder.clone());
    assert_close(&run(&base, &x, 2), &want, "the rule's schedules");
    let seen = recorder.seen();
    let tiled: Vec<_> = seen
        .iter()
        .filter(|k| k.anchor == "nn.conv2d" || k.anchor == "nn.dense" || k.anchor.contains("dense"))
        .collect();
    assert!(tiled.len() >= 3, "{seen:?}");
    for k in tiled.iter().filter(|k| k.anchor == "nn.conv2d") {
        assert!(k.candidates.len() >= 2, "{}: {:?}", k.name, k.candidates);
    }
    // The two depthwise convolutions (no column knobs) may compute their
    // padded image per block of output rows.
    let depthwise = |k: &&kiln::schedule::knobs::SeenKernel| {
        k.anchor == "nn.conv2d" && k.candidates.iter().all(|c| c.cols.is_none())
    };
    let per_rows =
        seen.iter().filter(depthwise).filter(|k| k.candidates.iter().any(|c| c.order == Some(ConvOrder::Rows))).count();
    assert_eq!(per_rows, 2, "{seen:?}");
    let rounds = seen.iter().map(|k| k.candidates.len()).max().unwrap_or(0);
    for r in 0..rounds {
        let table: BTreeMap<String, Knobs> =
            seen.iter().filter_map(|k| k.candidates.get(r).map(|c| (k.key.clone(), c.clone()))).collect();
        let plan = plan_with(&fused, ScheduleTuning::applying(table.clone()));
        for kernel in &plan.kernels {
            let Some(k) = seen.iter().find(|s| s.name == kernel.name) else { continue };
            if let Some(knobs) = table.get(&k.key) {
                assert_eq!(kernel.attrs.get("tuning"), Some(&knobs.to_string()), "{} round {r}", kernel.name);
            }
        }
        assert_close(&run(&plan, &x, 2), &want, &format!("round {r}: {table:?}"));
    }
}

/// The search writes a log; a build with it applies its records, matches
/// the interpreter and is byte-identical when repeated; the kernel keys are
/// those a build computes.
#[test]
fn a_tuned_log_rebuilds_byte_identically_and_matches_the_interpreter() {
    let (build, m, x) = model();
    let want = interpreted(&m, &x);
    let opts = TuneOptions {
        target: "llvm -mcpu=native".into(),
        budget: Duration::from_secs(10),
        candidates: 4,
        ..TuneOptions::default()
    };
    let mut lines = 0;
    let (records, report) =
        kiln::tune::tune(m.clone(), &[("x".into(), x.clone())], &opts, &TuningLog::default(), &mut |_| lines += 1)
            .expect("tune");
    assert!(lines >= 3, "progress lines: {lines}");
    assert!(report.rounds >= 1 && report.model_default_us > 0.0 && report.model_tuned_us > 0.0, "{report:?}");
    assert!(report.kernels.iter().any(|k| k.tried > 0), "{report:?}");
    // Whatever the timings chose, one record is forced in, so that a record is surely applied.
    let forced = report.kernels.iter().find(|k| k.anchor == "nn.conv2d" && k.tried > 0).expect("a tuned convolution");
    let mut log = TuningLog::default();
    log.merge(records);
    let recorder = ScheduleTuning::recording(BTreeMap::new(), 1, 4);
    plan_with(&optimized(&m), recorder.clone());
    let candidate = recorder.seen().into_iter().find(|k| k.key == forced.key).expect("seen").candidates[0].clone();
    let target = kiln::target::TargetDescription::resolve("llvm -mcpu=native");
    log.merge(vec![TuningRecord {
        key: forced.key.clone(),
        kernel: forced.name.clone(),
        anchor: forced.anchor.clone(),
        cpu: target.cpu.clone(),
        features: target.features.clone(),
        threads: 1,
        knobs: candidate.clone(),
        tuned_us: 1.0,
        default_us: 1.0,
    }]);
    let dir = tempfile::tempdir().expect("tempdir");
    let log_path = dir.path().join("kiln-tuning.json");
    std::fs::write(&log_path, log.to_json()).expect("write log");

    let mut outputs = Vec::new();
    for attempt in ["a", "b"] {
        let mut b = build.clone();
        b.tuning_log(&log_path);
        let out = dir.path().join(attempt);
        let artifacts = b.compile_in(&out).expect("build with the log");
        let tuned = artifacts.plan.kernels.iter().find(|k| k.name == format!("tuned_{}", forced.name)).expect("kernel");
        assert_eq!(tuned.attrs.get("tuning"), Some(&candidate.to_string()));
        let report: serde_json::Value = serde_json::from_str(&artifacts.report).expect("report");
        assert_eq!(report["tuned_kernels"][&tuned.name], candidate.to_string(), "{report}");
        assert_close(&run(&artifacts.plan, &x, 1), &want, "the tuned build");
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&out)
            .expect("read dir")
            .map(|e| e.expect("entry").path())
            // The kernel cache's folder holds the same objects by content.
            .filter(|p| p.is_file() && !p.to_string_lossy().ends_with(".timings.txt"))
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).expect("read")))
            .collect();
        files.sort();
        outputs.push(files);
    }
    assert_eq!(outputs[0].len(), outputs[1].len());
    for (a, b) in outputs[0].iter().zip(&outputs[1]) {
        assert_eq!(a.0, b.0);
        assert!(a.1 == b.1, "{} differs between two builds with the same log", a.0);
    }
}

/// A log for another CPU builds with the rule and says why; a record that
/// no longer fits its kernel falls back to the rule, saying why in the
/// kernel; a log that is not JSON is an error naming the file.
#[test]
fn other_cpus_unfit_records_and_broken_logs() {
    let (build, m, x) = model();
    let want = interpreted(&m, &x);
    let recorder = ScheduleTuning::recording(BTreeMap::new(), 1, 4);
    plan_with(&optimized(&m), recorder.clone());
    let conv = recorder.seen().into_iter().find(|k| k.anchor == "nn.conv2d").expect("a convolution");
    let target = kiln::target::TargetDescription::resolve("llvm -mcpu=native");
    let record = |cpu: &str, knobs: Knobs| TuningRecord {
        key: conv.key.clone(),
        kernel: conv.name.clone(),
        anchor: conv.anchor.clone(),
        cpu: cpu.into(),
        features: target.features.clone(),
        threads: 1,
        knobs,
        tuned_us: 1.0,
        default_us: 2.0,
    };
    let dir = tempfile::tempdir().expect("tempdir");

    // Another CPU: nothing applies, and the build says so.
    let path = dir.path().join("other.json");
    let other = TuningLog { records: vec![record("some-other-cpu", conv.candidates[0].clone())] };
    std::fs::write(&path, other.to_json()).expect("write");
    let (knobs, warnings) = TuningLog::knobs_from_file(&path, &target).expect("read");
    assert!(knobs.is_empty());
    assert!(warnings.iter().any(|w| w.contains("1 for some-other-cpu")), "{warnings:?}");
    let mut b = build.clone();
    b.tuning_log(&path);
    let artifacts = b.compile_in(&dir.path().join("other")).expect("build");
    assert!(artifacts.plan.kernels.iter().all(|k| !k.attrs.contains_key("tuning")));
    assert_close(&run(&artifacts.plan, &x, 1), &want, "a build with another CPU's log");

    // A record whose tile does not fit: the rule, and the reason in the kernel.
    let path = dir.path().join("unfit.json");
    let unfit =
        TuningLog { records: vec![record(&target.cpu, Knobs { rows: Some(7), cols: Some(13), ..Knobs::default() })] };
    std::fs::write(&path, unfit.to_json()).expect("write");
    let mut b = build.clone();
    b.tuning_log(&path);
    let artifacts = b.compile_in(&dir.path().join("unfit")).expect("build");
    let kernel = artifacts.plan.kernels.iter().find(|k| k.name == format!("tuned_{}", conv.name)).expect("kernel");
    let why = kernel.attrs.get("tuning").expect("a tuning attribute");
    assert!(why.starts_with("record not applied (rows=7 cols=13"), "{why}");
    assert_close(&run(&artifacts.plan, &x, 1), &want, "a build with an unfit record");

    // Not JSON: an error naming the file.
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "{\"format\": \"kiln-tuning/1\", \"records\": [").expect("write");
    let mut b = build.clone();
    b.tuning_log(&path);
    let err = b.compile_in(&dir.path().join("broken")).expect_err("a broken log").to_string();
    assert!(err.contains("broken.json") && err.contains("not JSON"), "{err}");
}
