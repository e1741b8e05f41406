//! CUDA without a GPU: every program of the Relay corpus (together, every
//! registered operator) goes through the GPU TIR pipeline and LLVM's NVPTX
//! backend to PTX, each kernel a `.entry` with its launch shape recorded; where
//! `ptxas` is available (PATH, `$KILN_PTXAS`, or the `nvidia-cuda-nvcc-cu12`
//! Python wheel) the PTX is assembled for sm_80. Running the kernels needs an
//! NVIDIA GPU, which this test does not assume.
#![cfg(feature = "llvm")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln::codegen::llvm::{compile_ptx, CudaTarget};
use kiln::relay::{infer_module, parse_module, post_order};
use kiln::transform::PassContext;

/// `ptxas`, if this machine has one.
fn find_ptxas() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KILN_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(p) = std::env::split_paths(&path).map(|d| d.join("ptxas")).find(|p| p.is_file()) {
        return Some(p);
    }
    // The nvidia-cuda-nvcc-cu12 wheel: site-packages/nvidia/cuda_nvcc/bin/ptxas.
    let out = std::process::Command::new("python3")
        .args(["-c", "import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])"])
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    Some(Path::new(dir.trim()).join("bin/ptxas")).filter(|p| p.is_file())
}

#[test]
fn every_operator_compiles_to_ptx() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ir/tests/data/relay");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "relay"))
        .collect();
    files.sort();
    let ptxas = find_ptxas();
    match &ptxas {
        Some(p) => println!("assembling PTX with {}", p.display()),
        None => println!("skipped assembling PTX: no ptxas (pip install nvidia-cuda-nvcc-cu12, or set KILN_PTXAS)"),
    }
    let tmp = tempfile::tempdir().expect("dir");
    let target = CudaTarget::parse("cuda -arch=sm_80").expect("target");
    let (mut covered, mut compiled, mut assembled) = (BTreeSet::new(), 0, 0);
    for path in files {
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        let mut m = parse_module(&std::fs::read_to_string(&path).expect("read")).expect("parse");
        infer_module(&mut m).expect("infer");
        for opt_level in [0, 3] {
            let ctx = if opt_level == 0 {
                PassContext::new().with_opt_level(0).with_disabled(&["SimplifyInference"])
            } else {
                PassContext::new().with_opt_level(3)
            };
            let (fused, plan) = match kiln::build::optimize_and_plan_gpu(m.clone(), Arc::new(ctx)) {
                Ok(r) => r,
                Err(msg) => {
                    assert!(msg.contains("ahead of time") || msg.contains("primitive"), "{name}: {msg}");
                    continue;
                }
            };
            if opt_level == 0 {
                for (_, f) in fused.functions() {
                    for id in post_order(&fused.store, &[f]) {
                        if let Some(op) = fused.store.op_name(id) {
                            covered.insert(op);
                        }
                    }
                }
            }
            let ptx = compile_ptx(&name, &plan.kernels, &target).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(ptx.contains(".target sm_80"), "{name}");
            for k in &plan.kernels {
                assert!(ptx.contains(&format!(".entry {}(", k.name)), "{name}: no entry for {}", k.name);
                let grid: u64 = k.attrs.get("gpu.grid").and_then(|g| g.parse().ok()).expect("grid");
                let block: u64 = k.attrs.get("gpu.block").and_then(|b| b.parse().ok()).expect("block");
                assert!(grid >= 1 && (1..=1024).contains(&block), "{name}/{}: {grid}×{block}", k.name);
            }
            if let Some(ptxas) = &ptxas {
                let file = tmp.path().join(format!("{name}_{opt_level}.ptx"));
                std::fs::write(&file, &ptx).expect("write");
                let out = std::process::Command::new(ptxas)
                    .args(["-arch=sm_80", "-o"])
                    .arg(file.with_extension("cubin"))
                    .arg(&file)
                    .output()
                    .expect("run ptxas");
                assert!(out.status.success(), "{name}: ptxas failed: {}\n{ptx}", String::from_utf8_lossy(&out.stderr));
                assembled += 1;
            }
            compiled += 1;
        }
    }
    let missing: Vec<&str> =
        kiln::relay::op_registry().iter().map(|(_, d)| d.name).filter(|n| !covered.contains(n)).collect();
    assert!(missing.is_empty(), "operators without PTX: {missing:?}");
    assert!(compiled > 40, "only {compiled} programs compiled");
    println!("{compiled} programs to PTX, {assembled} assembled");
}

#[test]
fn bad_cuda_targets_are_errors() {
    assert!(CudaTarget::parse("cuda -arch=sm_7x").unwrap_err().to_string().contains("sm_7x"));
    assert!(CudaTarget::parse("cuda -O3").unwrap_err().to_string().contains("-O3"));
    assert_eq!(CudaTarget::parse("cuda").expect("default").arch, "sm_80");
}

#[test]
fn reference_onnx_models_compile_to_ptx() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models");
    if !models.is_dir() {
        println!("skipped: {} is absent", models.display());
        return;
    }
    let ptxas = find_ptxas();
    let tmp = tempfile::tempdir().expect("dir");
    let target = CudaTarget::parse("cuda").expect("target");
    for name in ["mlp", "lenet", "resnet18", "mobilenetv2"] {
        let bytes = std::fs::read(models.join(format!("{name}.onnx"))).expect("model");
        let mut m = kiln::frontend::onnx::import(&bytes, &[]).expect("import");
        infer_module(&mut m).expect("infer");
        let (_, plan) = kiln::build::optimize_and_plan_gpu(m, Arc::new(PassContext::new().with_opt_level(3)))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let ptx = compile_ptx(name, &plan.kernels, &target).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ptx.matches(".entry ").count(), plan.kernels.len(), "{name}");
        if let Some(ptxas) = &ptxas {
            let file = tmp.path().join(format!("{name}.ptx"));
            std::fs::write(&file, &ptx).expect("write");
            let out = std::process::Command::new(ptxas)
                .args(["-arch=sm_80", "-o"])
                .arg(file.with_extension("cubin"))
                .arg(&file)
                .output()
                .expect("run ptxas");
            assert!(out.status.success(), "{name}: ptxas failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}
