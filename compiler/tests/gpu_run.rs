//! On an NVIDIA GPU (`cargo test -p kiln --features cuda --test gpu_run`):
//! every program of the Relay corpus — together, every registered operator —
//! compiled to PTX and run through `CudaExecutor` matches the reference
//! interpreter (relative 1e-5, 1e-4 through a transcendental), and the
//! reference ONNX models match ONNX Runtime's outputs. Without a driver or a
//! device each test prints why it was skipped.
#![cfg(feature = "cuda")]

mod common;

use std::path::Path;
use std::sync::Arc;

use kiln::backend::cuda::CudaExecutor;
use kiln::codegen::llvm::{compile_ptx, CudaTarget};
use kiln::relay::{eval_function, infer_module, parse_module, Type, Value};
use kiln::transform::PassContext;
use kiln::Tensor;

fn gpu() -> bool {
    match kiln_runtime::cuda::cuda_available() {
        Ok(()) => true,
        Err(e) => {
            println!("skipped: {e}");
            false
        }
    }
}

fn random_inputs(m: &kiln::relay::IRModule) -> Option<Vec<Tensor>> {
    let main = m.main().ok()?;
    let f = m.store.as_function(main)?;
    let mut out = Vec::new();
    for (k, &p) in f.params.iter().enumerate() {
        let Some(Type::Tensor(t)) = m.store.checked_type(p).cloned() else { return None };
        let n: usize = t.shape.iter().product();
        let data: Vec<f64> = (0..n).map(|i| (((i * 7 + k * 13) as f64) * 0.37).sin() * 0.5 + 0.75).collect();
        out.push(Tensor::from_f64(t.dtype, t.shape.clone(), &data));
    }
    Some(out)
}

#[test]
fn every_operator_on_the_gpu_matches_the_interpreter() {
    if !gpu() {
        return;
    }
    let target = CudaTarget::parse("cuda").expect("target");
    let mut ran = 0;
    for (name, text) in common::corpus() {
        let transcendental = common::transcendental(&text);
        let mut m = parse_module(&text).expect("parse");
        infer_module(&mut m).expect("infer");
        let Some(args) = random_inputs(&m) else { continue };
        let values: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
        let Ok(Value::Tensor(want)) = eval_function(&m, "main", &values) else { continue };
        let Ok((_, plan)) =
            kiln::build::optimize_and_plan_gpu(m.clone(), Arc::new(PassContext::new().with_opt_level(3)))
        else {
            continue;
        };
        let ptx = compile_ptx(&name, &plan.kernels, &target).expect("ptx");
        let mut ex = CudaExecutor::new(&plan, &ptx).unwrap_or_else(|e| panic!("{name}: {e}"));
        ex.set_inputs(&args).expect("inputs");
        ex.run().unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = ex.outputs().expect("outputs");
        let tol = if transcendental { 1e-4 } else { 1e-5 };
        for (a, b) in got[0].to_f64_vec().iter().zip(want.to_f64_vec()) {
            assert!((a - b).abs() <= tol * b.abs().max(1.0), "{name}: {a} vs {b}");
        }
        ran += 1;
    }
    println!("{ran} programs ran on the GPU");
    assert!(ran > 30, "only {ran} programs ran");
}

#[test]
fn reference_models_on_the_gpu_match_onnx_runtime() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models");
    if !gpu() || !models.is_dir() {
        return;
    }
    for name in ["mlp", "lenet", "resnet18", "mobilenetv2"] {
        let bytes = std::fs::read(models.join(format!("{name}.onnx"))).expect("model");
        let input =
            kiln::npy::read_npy(&std::fs::read(models.join(format!("{name}.input.npy"))).expect("input")).expect("npy");
        let want = kiln::npy::read_npy(&std::fs::read(models.join(format!("{name}.output.npy"))).expect("output"))
            .expect("npy");
        let mut m = kiln::frontend::onnx::import(&bytes, &[]).expect("import");
        infer_module(&mut m).expect("infer");
        let (_, plan) =
            kiln::build::optimize_and_plan_gpu(m, Arc::new(PassContext::new().with_opt_level(3))).expect("compile");
        let ptx = compile_ptx(name, &plan.kernels, &CudaTarget::parse("cuda").expect("target")).expect("ptx");
        let mut ex = CudaExecutor::new(&plan, &ptx).expect("load");
        ex.set_inputs(&[input]).expect("inputs");
        ex.run().expect("run");
        let got = ex.outputs().expect("outputs");
        let w = want.to_f64_vec();
        let scale = w.iter().fold(0f64, |a, v| a.max(v.abs()));
        let err = got[0].to_f64_vec().iter().zip(&w).fold(0f64, |a, (x, y)| a.max((x - y).abs()));
        println!("{name} on {}: max abs error {err:e}", ex.device_name());
        assert!(err <= 1e-4 * scale, "{name}: {err} > 1e-4 × {scale}");
    }
}
