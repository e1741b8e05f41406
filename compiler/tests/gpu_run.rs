//! On an NVIDIA GPU (`cargo test -p kiln --features cuda --test gpu_run`):
//! every program of the Relay corpus — together, every registered operator —
//! compiled to PTX and run through `CudaExecutor` matches the reference
//! interpreter (relative 1e-5, 1e-4 through a transcendental), and the
//! reference ONNX models match ONNX Runtime's outputs — one test per program
//! and model. Without a driver or a device each is ignored with the reason.
//!
//! On a GPU machine without LLVM, build this test with
//! `--no-default-features --features cuda,cli` and point `KILN_PTX_DIR` at PTX
//! written on a machine with LLVM (`KILN_PTX_OUT=DIR cargo test -p kiln
//! --test gpu_ptx`); `scripts/gpu_session.sh` does both halves.

mod common;

use std::sync::Arc;

use common::sweep::{Completion, Coverage, Failed};

use kiln::backend::cuda::CudaExecutor;
use kiln::transform::PassContext;

fn main() {
    // Without a driver or a device every test is ignored with the reason.
    let unavailable = kiln_runtime::cuda::cuda_available().err().map(|e| e.to_string());
    let sweep = common::sweep::CorpusSweep {
        unavailable: unavailable.clone(),
        check: on_the_gpu_matches_the_interpreter,
        exempt: &[],
        min_programs: 60,
        at_least: &[],
    };
    let models = common::sweep::model_trials_where(
        "reference_models_on_the_gpu_match_onnx_runtime",
        &common::sweep::GPU_REFERENCE_MODELS,
        unavailable,
        model_on_the_gpu_matches_onnx_runtime,
    );
    common::sweep::run(sweep, models)
}

const NO_PTX: &str = "no LLVM to compile PTX and no KILN_PTX_DIR";

/// One corpus program compiled to PTX (or read from `KILN_PTX_DIR`) at opt
/// levels 0 and 3 and run by `CudaExecutor`.
fn on_the_gpu_matches_the_interpreter(case: &common::CorpusCase, coverage: &Coverage) -> Result<Completion, Failed> {
    let common::CorpusCase { name, module: m, transcendental, args, want } = case;
    for opt_level in [0, 3] {
        let ctx = Arc::new(common::sweep_context(opt_level));
        let result = kiln::build::optimize_and_plan_gpu(m.clone(), ctx);
        let Some((fused, plan)) = common::ahead_of_time(name, result) else {
            return common::sweep::not_ahead_of_time();
        };
        if opt_level == 0 {
            coverage.operators_of(&fused);
        }
        let Some(ptx) = common::ptx_for(&format!("{name}_o{opt_level}"), &plan.kernels) else {
            return Ok(Completion::ignored_with(NO_PTX));
        };
        let mut ex = CudaExecutor::new(&plan, &ptx)?;
        ex.set_inputs(args)?;
        ex.run()?;
        let got = ex.outputs()?;
        common::compare(name, &format!("cuda opt {opt_level}"), &got, want, *transcendental);
        coverage.program();
    }
    Ok(Completion::Completed)
}

/// A reference model on the GPU, kernel by kernel and then replayed as a captured CUDA graph.
fn model_on_the_gpu_matches_onnx_runtime(
    name: &str,
    m: kiln::relay::IRModule,
    input: kiln::Tensor,
    want: kiln::Tensor,
) -> Result<(), Failed> {
    let (_, plan) = kiln::build::optimize_and_plan_gpu(m, Arc::new(PassContext::new().with_opt_level(3)))?;
    let ptx = common::ptx_for(name, &plan.kernels).ok_or(NO_PTX)?;
    let mut ex = CudaExecutor::new(&plan, &ptx)?;
    ex.set_inputs(&[input])?;
    for graph in [false, true] {
        if graph {
            ex.capture_graph()?;
        }
        ex.run()?;
        let got = ex.outputs()?;
        let (err, scale) = common::max_abs_error(&got[0], &want);
        println!("{name} on {} (graph: {graph}): max abs error {err:e}", ex.device_name());
        if err > 1e-4 * scale {
            return Err(format!("{name} (graph: {graph}): {err} > 1e-4 × {scale}").into());
        }
    }
    Ok(())
}
