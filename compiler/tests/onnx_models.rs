//! The reference ONNX models (`../shared/models`: mlp, lenet, resnet18,
//! mobilenetv2, each with an ONNX Runtime output) imported, compiled (LLVM
//! JIT) and run: outputs within 1e-4 × max |reference|. Skipped, with a
//! message, where the models are not present. Corrupted files are errors.

use std::path::Path;
use std::sync::Arc;

use kiln::backend::host;
use kiln::build::optimize_and_plan;
use kiln::codegen::llvm::Jit;
use kiln::frontend::onnx;
use kiln::npy::read_npy;
use kiln::relay::infer_module;
use kiln::transform::PassContext;

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models");

#[test]
fn reference_models_match_onnx_runtime() {
    let dir = Path::new(MODELS);
    if !dir.join("mlp.onnx").exists() {
        println!("skipped: the reference models are not at {MODELS}");
        return;
    }
    for name in ["mlp", "lenet", "resnet18", "mobilenetv2"] {
        let bytes = std::fs::read(dir.join(format!("{name}.onnx"))).expect("model");
        let input = read_npy(&std::fs::read(dir.join(format!("{name}.input.npy"))).expect("input")).expect("npy");
        let want = read_npy(&std::fs::read(dir.join(format!("{name}.output.npy"))).expect("output")).expect("npy");
        let mut m = onnx::import(&bytes, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        infer_module(&mut m).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (_, plan) = optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3)))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let jit = Jit::new(name, &plan.kernels).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = host::run(&plan, &jit, &[input], 2).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (g, w) = (got[0].to_f64_vec(), want.to_f64_vec());
        assert_eq!(g.len(), w.len(), "{name}");
        let scale = w.iter().fold(0f64, |a, v| a.max(v.abs()));
        let err = g.iter().zip(&w).fold(0f64, |a, (x, y)| a.max((x - y).abs()));
        println!(
            "{name}: max abs error {err:e}, tolerance {:e}, {} kernels, arena {} bytes",
            1e-4 * scale,
            plan.kernels.len(),
            plan.arena_bytes
        );
        assert!(err <= 1e-4 * scale, "{name}: max abs error {err} > {}", 1e-4 * scale);
    }
}
