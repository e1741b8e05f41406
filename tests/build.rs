//! kiln used from a build script exactly as a user would: two models, one a
//! conv net with parameters bound in memory, compiled for the host.

use kiln::{DataType, Tensor};

kiln::relay_model! {
    /// A small conv net: conv-bn-relu, max pool, residual conv, global pool, dense.
    fn convnet(x: Tensor<[1, 3, 12, 12], f32>) -> Tensor<[1, 5], f32> {
        weight c1: [8, 3, 3, 3]; weight g: [8]; weight b: [8]; weight m: [8]; weight v: [8];
        weight c2: [8, 8, 3, 3]; weight fc: [5, 8]; weight fb: [5];
        let y = relu(batch_norm(conv2d(x, c1, padding = [1, 1]), g, b, m, v).0);
        let p = max_pool2d(y, pool_size = [2, 2], strides = [2, 2]);
        let r = relu(conv2d(p, c2, padding = [1, 1]) + p);
        let f = batch_flatten(global_avg_pool2d(r));
        softmax(bias_add(dense(f, fc), fb))
    }
}

/// Deterministic parameter values: small, and positive where a variance is needed.
pub fn param(name: &str, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let seed = name.bytes().fold(7u64, |a, b| a.wrapping_mul(31).wrapping_add(b as u64));
    let vals: Vec<f64> = (0..n)
        .map(|i| {
            let x = ((seed as f64) * 0.001 + i as f64 * 0.7).sin() * 0.3;
            if name == "v" {
                x.abs() + 0.5
            } else {
                x
            }
        })
        .collect();
    Tensor::from_f64(DataType::F32, shape.to_vec(), &vals)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=models/mlp.relay");
    // Model 1: Relay text, weights given in memory.
    let mut mlp = kiln::Build::new("mlp_text");
    mlp.relay_file("models/mlp.relay");
    for (name, shape) in [("w1", [784usize, 128].as_slice()), ("b1", &[128]), ("w2", &[128, 10]), ("b2", &[10])] {
        mlp.weight(name, param(name, shape));
    }
    mlp.compile_or_exit();
    // The same MLP compiled for a CPU feature the test machine may lack
    // (AMX): creating it must fail with the feature's name, never run.
    // And for a Zen CPU, whose code may hold AMD's SSE4A: Intel CPUs lack it
    // (every x86 machine lacks one of the two).
    for (name, target) in [("mlp_amx", "llvm -mcpu=native -mattr=+amx-tile"), ("mlp_zen", "llvm -mcpu=znver3")] {
        let mut build = kiln::Build::new(name);
        build.relay_file("models/mlp.relay").target(target);
        for (name, shape) in [("w1", [784usize, 128].as_slice()), ("b1", &[128]), ("w2", &[128, 10]), ("b2", &[10])] {
            build.weight(name, param(name, shape));
        }
        build.compile_or_exit();
    }
    // Model 2: a conv net declared with relay_model!, compiled to C.
    let mut conv = kiln::Build::new("convnet");
    conv.module(convnet()).target("c");
    for (name, shape) in [
        ("c1", [8usize, 3, 3, 3].as_slice()),
        ("g", &[8]),
        ("b", &[8]),
        ("m", &[8]),
        ("v", &[8]),
        ("c2", &[8, 8, 3, 3]),
        ("fc", &[5, 8]),
        ("fb", &[5]),
    ] {
        conv.weight(name, param(name, shape));
    }
    conv.compile_or_exit();
    // Models 3–6, when the reference models are here (../shared/models): straight from ONNX.
    println!("cargo:rustc-check-cfg=cfg(kiln_reference_models)");
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models");
    let names = ["mlp", "lenet", "resnet18", "mobilenetv2"];
    if names.iter().all(|n| models.join(format!("{n}.onnx")).exists()) {
        for n in names {
            let path = models.join(format!("{n}.onnx"));
            println!("cargo:rerun-if-changed={}", path.display());
            kiln::Build::new(&format!("onnx_{n}")).onnx(&path).compile_or_exit();
        }
        println!("cargo:rustc-cfg=kiln_reference_models");
    }
    // Model 7: the GPT-style decoder (int64 token ids in, logits out).
    println!("cargo:rustc-check-cfg=cfg(kiln_gpt_tiny)");
    let gpt = models.join("gpt_tiny.onnx");
    if gpt.exists() {
        println!("cargo:rerun-if-changed={}", gpt.display());
        kiln::Build::new("onnx_gpt_tiny").onnx(&gpt).compile_or_exit();
        println!("cargo:rustc-cfg=kiln_gpt_tiny");
    } else {
        println!("cargo:warning=skipped gpt_tiny: {} is not present", gpt.display());
    }
    // Models 8 and 9: real exporters' models, fetched by
    // ../shared/models/fetch_real_models.py into KILN_REAL_MODELS
    // (default ../shared/models/real). Their batch and image sizes are
    // symbolic in the files: fixed here by name.
    println!("cargo:rustc-check-cfg=cfg(kiln_real_models)");
    println!("cargo:rerun-if-env-changed=KILN_REAL_MODELS");
    let real =
        std::env::var_os("KILN_REAL_MODELS").map(std::path::PathBuf::from).unwrap_or_else(|| models.join("real"));
    let (yolo, ppl) = (real.join("yolov8n.onnx"), real.join("pplcnet.onnx"));
    if yolo.exists() && ppl.exists() {
        for p in [&yolo, &ppl] {
            println!("cargo:rerun-if-changed={}", p.display());
        }
        kiln::Build::new("onnx_yolov8n").onnx(&yolo).input_shape("images", &[1, 3, 320, 320]).compile_or_exit();
        kiln::Build::new("onnx_pplcnet").onnx(&ppl).input_shape("x", &[1, 3, 224, 224]).compile_or_exit();
        println!("cargo:rustc-cfg=kiln_real_models");
        println!("cargo:rustc-env=KILN_REAL_MODELS_DIR={}", real.display());
    } else {
        println!(
            "cargo:warning=skipped yolov8n and pplcnet: not in {} (run ../shared/models/fetch_real_models.py {})",
            real.display(),
            real.display()
        );
    }
    // The models themselves, for the tests' reference interpreter runs.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("convnet.relay"), kiln::relay::print_module(&convnet())).expect("write");
}
