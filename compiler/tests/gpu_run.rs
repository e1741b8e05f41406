//! On an NVIDIA GPU (`cargo test -p kiln --features cuda --test gpu_run`):
//! every program of the Relay corpus — together, every registered operator —
//! compiled to PTX and run through `CudaExecutor` matches the reference
//! interpreter (relative 1e-5, 1e-4 through a transcendental), and the
//! reference ONNX models match ONNX Runtime's outputs. Without a driver or a
//! device each test prints why it was skipped.
//!
//! On a GPU machine without LLVM, build this test with
//! `--no-default-features --features cuda,cli` and point `KILN_PTX_DIR` at PTX
//! written on a machine with LLVM (`KILN_PTX_OUT=DIR cargo test -p kiln
//! --test gpu_ptx`); `scripts/gpu_session.sh` does both halves.
#![cfg(feature = "cuda")]

mod common;

use std::sync::Arc;

use kiln::backend::cuda::CudaExecutor;
use kiln::transform::PassContext;

fn gpu() -> bool {
    match kiln_runtime::cuda::cuda_available() {
        Ok(()) => true,
        Err(e) => {
            println!("skipped: {e}");
            false
        }
    }
}

#[test]
fn every_operator_on_the_gpu_matches_the_interpreter() {
    if !gpu() {
        return;
    }
    let mut ran = 0;
    for common::CorpusCase { name, module: m, transcendental, args, want } in common::corpus_cases() {
        for opt_level in [0, 3] {
            let ctx = Arc::new(common::sweep_context(opt_level));
            let Ok((fused, plan)) = kiln::build::optimize_and_plan_gpu(m.clone(), ctx) else { continue };
            if !common::gpu_refused(&fused).is_empty() {
                println!("skipped {name}: libm functions have no GPU lowering");
                continue;
            }
            let Some(ptx) = common::ptx_for(&format!("{name}_o{opt_level}"), &plan.kernels) else {
                println!("skipped: no LLVM to compile PTX and no KILN_PTX_DIR");
                return;
            };
            let mut ex = CudaExecutor::new(&plan, &ptx).unwrap_or_else(|e| panic!("{name}: {e}"));
            ex.set_inputs(&args).expect("inputs");
            ex.run().unwrap_or_else(|e| panic!("{name}: {e}"));
            let got = ex.outputs().expect("outputs");
            common::compare(&name, &format!("cuda opt {opt_level}"), &got, &want, transcendental);
            ran += 1;
        }
    }
    println!("{ran} programs ran on the GPU");
    assert!(ran > 60, "only {ran} programs ran");
}

#[test]
fn reference_models_on_the_gpu_match_onnx_runtime() {
    if !gpu() {
        return;
    }
    for name in ["mlp", "lenet", "resnet18", "mobilenetv2"] {
        let Some((m, input, want)) = common::reference_model(name) else {
            println!("skipped {name}: not in ../shared/models (or $KILN_MODELS)");
            continue;
        };
        let (_, plan) =
            kiln::build::optimize_and_plan_gpu(m, Arc::new(PassContext::new().with_opt_level(3))).expect("compile");
        let Some(ptx) = common::ptx_for(name, &plan.kernels) else {
            println!("skipped: no LLVM to compile PTX and no KILN_PTX_DIR");
            return;
        };
        let mut ex = CudaExecutor::new(&plan, &ptx).expect("load");
        ex.set_inputs(&[input]).expect("inputs");
        // Kernel by kernel, then replayed as a captured CUDA graph.
        for graph in [false, true] {
            if graph {
                ex.capture_graph().expect("capture");
            }
            ex.run().expect("run");
            let got = ex.outputs().expect("outputs");
            let (err, scale) = common::max_abs_error(&got[0], &want);
            println!("{name} on {} (graph: {graph}): max abs error {err:e}", ex.device_name());
            assert!(err <= 1e-4 * scale, "{name}: {err} > 1e-4 × {scale}");
        }
    }
}
