//! CUDA without a GPU: every program of the Relay corpus (together, every
//! registered operator) goes through the GPU TIR pipeline and LLVM's NVPTX
//! backend to PTX, each kernel a `.entry` with its launch shape recorded; where
//! `ptxas` is available (PATH, `$KILN_PTXAS`, or the `nvidia-cuda-nvcc-cu12`
//! Python wheel) the PTX is assembled for sm_80. Running the kernels needs an
//! NVIDIA GPU: `gpu_run.rs`, with feature `cuda`.

mod common;

use std::sync::Arc;

use common::sweep::{Completion, Coverage, Failed};

use kiln::codegen::llvm::{compile_ptx, CudaTarget};
use kiln::transform::PassContext;

fn main() {
    match common::find_ptxas() {
        Some(p) => println!("assembling PTX with {}", p.display()),
        None => println!("not assembling PTX: no ptxas (pip install nvidia-cuda-nvcc-cu12, or set KILN_PTXAS)"),
    }
    let sweep = common::sweep::CorpusSweep {
        unavailable: None,
        check: compiles_to_ptx,
        exempt: &[],
        min_programs: 40,
        at_least: &[],
    };
    let mut others = common::sweep::model_trials(
        "reference_onnx_models_compile_to_ptx",
        &common::sweep::GPU_REFERENCE_MODELS,
        model_to_ptx,
    );
    others.extend(trials![bad_cuda_targets_are_errors, double_precision_trigonometry_is_refused_on_the_gpu]);
    common::sweep::run(sweep, others)
}

/// One corpus program through the GPU pipeline to PTX at opt levels 0 and 3
/// (assembled where `ptxas` is).
fn compiles_to_ptx(case: &common::CorpusCase, coverage: &Coverage) -> Result<Completion, Failed> {
    let common::CorpusCase { name, module: m, .. } = case;
    let ptxas = common::find_ptxas();
    let tmp = tempfile::tempdir()?;
    let target = CudaTarget::parse("cuda -arch=sm_80")?;
    for opt_level in [0, 3] {
        let ctx = common::sweep_context(opt_level);
        let result = kiln::build::optimize_and_plan_gpu(m.clone(), Arc::new(ctx));
        let Some((fused, plan)) = common::ahead_of_time(name, result) else {
            return common::sweep::not_ahead_of_time();
        };
        if opt_level == 0 {
            coverage.operators_of(&fused);
        }
        let ptx = compile_ptx(name, &plan.kernels, &target)?;
        assert!(ptx.contains(".target sm_80"), "{name}");
        common::save_ptx(&format!("{name}_o{opt_level}"), &ptx);
        for k in &plan.kernels {
            assert!(ptx.contains(&format!(".entry {}(", k.name)), "{name}: no entry for {}", k.name);
            let grid: u64 = k.attrs.get("gpu.grid").and_then(|g| g.parse().ok()).expect("grid");
            let block: u64 = k.attrs.get("gpu.block").and_then(|b| b.parse().ok()).expect("block");
            assert!(grid >= 1 && (1..=1024).contains(&block), "{name}/{}: {grid}×{block}", k.name);
        }
        if let Some(ptxas) = &ptxas {
            common::assemble(ptxas, tmp.path(), &format!("{name}_{opt_level}"), &ptx);
        }
        coverage.program();
    }
    Ok(Completion::Completed)
}

/// A reference model to PTX: one entry per kernel, nothing in local memory.
fn model_to_ptx(name: &str, m: kiln::relay::IRModule, _: kiln::Tensor, _: kiln::Tensor) -> Result<(), Failed> {
    let ptxas = common::find_ptxas();
    let tmp = tempfile::tempdir()?;
    let target = CudaTarget::parse("cuda")?;
    let (_, plan) = kiln::build::optimize_and_plan_gpu(m, Arc::new(PassContext::new().with_opt_level(3)))?;
    let ptx = compile_ptx(name, &plan.kernels, &target)?;
    assert_eq!(ptx.matches(".entry ").count(), plan.kernels.len(), "{name}");
    kiln::backend::cuda::check_ptx(&plan, &ptx)?;
    common::save_ptx(name, &ptx);
    // Register tiles live in registers: nothing spills to local memory.
    assert!(!ptx.contains("st.local"), "{name}: a kernel uses local memory");
    let tiled = plan.kernels.iter().filter(|k| k.attrs.get("schedule").is_some_and(|s| s.contains("tiled"))).count();
    println!("{name}: {} kernels, {tiled} tiled", plan.kernels.len());
    if let Some(ptxas) = &ptxas {
        common::assemble(ptxas, tmp.path(), name, &ptx);
    }
    Ok(())
}

fn bad_cuda_targets_are_errors() {
    assert!(CudaTarget::parse("cuda -arch=sm_7x").unwrap_err().to_string().contains("sm_7x"));
    // An SM the linked LLVM cannot emit is refused (H100 is sm_90: LLVM 14 stops at sm_86).
    let newest = if kiln::target::LLVM_VERSION == "14" { "sm_86" } else { "sm_90a" };
    assert!(CudaTarget::parse(&format!("cuda -arch={newest}")).is_ok());
    for sm in ["sm_100", if kiln::target::LLVM_VERSION == "14" { "sm_90" } else { "sm_120" }] {
        let e = CudaTarget::parse(&format!("cuda -arch={sm}")).unwrap_err().to_string();
        assert!(e.contains(&format!("cannot emit PTX for `{sm}`")) && e.contains(newest), "{e}");
    }
    assert!(CudaTarget::parse("cuda -O3").unwrap_err().to_string().contains("-O3"));
    assert_eq!(CudaTarget::parse("cuda").expect("default").arch, "sm_80");
}

/// f32 trigonometry becomes arithmetic on the GPU (`tir.LowerTrig`); f64 has
/// no lowering there (NVPTX has no libm): an error naming the function.
fn double_precision_trigonometry_is_refused_on_the_gpu() {
    let text = "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(4), float64]) { sin(%x) }";
    let mut m = kiln::relay::parse_module(text).expect("parse");
    kiln::relay::infer_module(&mut m).expect("types");
    let (_, plan) = kiln::build::optimize_and_plan_gpu(m, Arc::new(PassContext::new())).expect("plan");
    let target = CudaTarget::parse("cuda").expect("target");
    let e = compile_ptx("f64_sin", &plan.kernels, &target).expect_err("f64 sin compiled for the GPU");
    assert!(e.to_string().contains("`sin` on the GPU"), "{e}");
}
