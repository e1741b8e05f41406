//! GPU schedules checked without a GPU. Kernels from the GPU TIR pipeline
//! keep serial semantics until `tir.LowerThreadLocal` (thread loops run one
//! after another, barriers sit between them, a thread's registers carry a
//! thread dimension), so with that pass disabled the CPU backend runs them as
//! they stand. Every program of the Relay corpus — every operator, tiled
//! products and convolutions with shared-memory chunks included — and the
//! reference ONNX models must then match the interpreter and ONNX Runtime.
//! What this cannot see (a missing barrier) `verify_barriers` checks on every
//! scheduled kernel.

mod common;

use std::sync::Arc;

use common::sweep::{Completion, Coverage, Failed};

use kiln::backend::host;
use kiln::codegen::llvm::Jit;
use kiln::tir::{ForKind, Stmt};
use kiln::transform::PassContext;

fn serial_gpu_context(opt_level: u32) -> Arc<PassContext> {
    Arc::new(common::sweep_context(opt_level).with_disabled(&["tir.LowerThreadLocal"]))
}

fn uses_shared_memory(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |st| {
        found |= matches!(st, Stmt::Allocate { buffer, .. } if buffer.scope() == kiln::tir::Scope::Shared)
    });
    found
}

fn main() {
    let sweep = common::sweep::CorpusSweep {
        unavailable: None,
        check: gpu_schedule_matches_the_interpreter,
        exempt: &[],
        min_programs: 60,
        at_least: &[(SHARED_TILES, 10)],
    };
    let mut others = common::sweep::model_trials(
        "reference_models_under_the_gpu_schedule_match_onnx_runtime",
        &common::sweep::GPU_REFERENCE_MODELS,
        model_under_the_gpu_schedule_matches_onnx_runtime,
    );
    others.extend(trials![long_reductions_with_few_outputs_are_split_on_the_gpu_only]);
    common::sweep::run(sweep, others)
}

const SHARED_TILES: &str = "kernels staging operands in shared memory";

/// One corpus program under the GPU schedule, at opt levels 0 and 3: every
/// kernel bound to the GPU (or a single thread), results equal the interpreter.
fn gpu_schedule_matches_the_interpreter(case: &common::CorpusCase, coverage: &Coverage) -> Result<Completion, Failed> {
    let common::CorpusCase { name, module: m, transcendental, args, want } = case;
    for opt_level in [0, 3] {
        let result = kiln::build::optimize_and_plan_gpu(m.clone(), serial_gpu_context(opt_level));
        let Some((fused, plan)) = common::ahead_of_time(name, result) else {
            return common::sweep::not_ahead_of_time();
        };
        if opt_level == 0 {
            coverage.operators_of(&fused);
        }
        for k in &plan.kernels {
            let mut bound = false;
            k.body.visit(&mut |s| bound |= matches!(s, Stmt::For(l) if matches!(l.kind, ForKind::ThreadBinding(_))));
            // A scalar kernel's one-iteration thread loop simplifies away: one thread runs it.
            let single = ["gpu.grid", "gpu.block"].iter().all(|a| k.attrs.get(*a).map(String::as_str) == Some("1"));
            if !(bound || single) {
                return Err(format!("{}: no loop bound to the GPU", k.name).into());
            }
            coverage.count(SHARED_TILES, usize::from(uses_shared_memory(&k.body)));
        }
        let jit = Jit::new(name, &plan.kernels)?;
        let got = host::run(&plan, &jit, args, 1)?;
        common::compare(name, &format!("gpu schedule on the CPU, opt {opt_level}"), &got, want, *transcendental);
        coverage.program();
    }
    Ok(Completion::Completed)
}

fn model_under_the_gpu_schedule_matches_onnx_runtime(
    name: &str,
    m: kiln::relay::IRModule,
    input: kiln::Tensor,
    want: kiln::Tensor,
) -> Result<(), Failed> {
    let (_, plan) = kiln::build::optimize_and_plan_gpu(m, serial_gpu_context(3))?;
    let jit = Jit::new(name, &plan.kernels)?;
    let got = host::run(&plan, &jit, &[input], 1)?;
    let (err, scale) = common::max_abs_error(&got[0], &want);
    println!("{name}: max abs error {err:e}");
    if err > 1e-4 * scale {
        return Err(format!("{name}: max abs error {err} > 1e-4 × {scale}").into());
    }
    Ok(())
}

/// The corpus program `split_conv_reduction` (whose values every sweep
/// checks): the GPU pipeline splits its 3 × 3 convolution 4 ways — a grouped
/// convolution, then one kernel adding the slices — and fuses the bias into
/// the 1 × 1 convolution's kernel; the CPU pipeline leaves it whole.
fn long_reductions_with_few_outputs_are_split_on_the_gpu_only() {
    let text = common::corpus().into_iter().find(|(n, _)| n == "split_conv_reduction").expect("in the corpus").1;
    let m = kiln::relay::parse_module(&text).expect("parse");
    let names =
        |plan: &kiln::backend::aot::ExecutorPlan| plan.kernels.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
    let (_, gpu) = kiln::build::optimize_and_plan_gpu(m.clone(), serial_gpu_context(3)).expect("gpu plan");
    let grouped = gpu.kernels.iter().find(|k| k.name == "fused_nn_conv2d").expect("the partial convolution");
    assert_eq!(grouped.params[1].shape(), &[16, 32, 3, 3], "weights of 4 groups of 32 channels");
    assert!(names(&gpu).iter().any(|n| n.starts_with("fused_strided_slice")), "{:?}", names(&gpu));
    assert_eq!(gpu.kernels.len(), 3, "{:?}", names(&gpu));
    let (_, cpu) = kiln::build::optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3))).expect("cpu plan");
    assert!(!names(&cpu).iter().any(|n| n.contains("strided_slice")), "{:?}", names(&cpu));
}
