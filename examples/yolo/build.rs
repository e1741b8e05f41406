//! Compile the YOLOv8n detector straight from its ONNX file, for what cargo
//! compiles the crate for. It is a real exported model (ultralytics, opset 17),
//! fetched rather than stored: `../shared/models/fetch_real_models.py` puts it in
//! `<models>/real/` (`<models>` is `$KILN_MODELS`, else `../shared/models`;
//! `$KILN_REAL_MODELS` names the folder itself). Without it the build still
//! succeeds: `cfg(kiln_yolov8n)` stays unset and `main` says how to get it. Its
//! image size is symbolic in the file, so it is fixed here: 320×320.

use std::path::{Component, Path, PathBuf};

/// `$KILN_REAL_MODELS`, else `real/` in `$KILN_MODELS`, else in `../shared/models`.
fn real_models_dir() -> PathBuf {
    println!("cargo:rerun-if-env-changed=KILN_MODELS");
    println!("cargo:rerun-if-env-changed=KILN_REAL_MODELS");
    if let Some(dir) = std::env::var_os("KILN_REAL_MODELS") {
        return PathBuf::from(dir);
    }
    match std::env::var_os("KILN_MODELS") {
        Some(dir) => PathBuf::from(dir).join("real"),
        None => normalize(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models/real")),
    }
}

/// `a/b/../c` as `a/c`, so that messages name the folder plainly (it may not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// A `.npy` file's values as raw f32 bytes in `$OUT_DIR/<name>`.
fn npy_to_raw(npy: &Path, out: &Path, name: &str) {
    println!("cargo:rerun-if-changed={}", npy.display());
    let tensor = std::fs::read(npy)
        .map_err(|e| e.to_string())
        .and_then(|bytes| kiln::npy::read_npy(&bytes).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| {
            eprintln!("error: {}: {e}", npy.display());
            std::process::exit(1)
        });
    let raw: Vec<u8> = tensor.to_f32_vec().iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(out.join(name), raw).expect("write into OUT_DIR");
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(kiln_yolov8n)");
    let real = real_models_dir();
    let onnx = real.join("yolov8n.onnx");
    // Also when absent: cargo then reruns this script on every build, so the
    // model is picked up as soon as it is fetched.
    println!("cargo:rerun-if-changed={}", onnx.display());
    println!("cargo:rustc-env=YOLOV8N_ONNX={}", onnx.display());
    println!("cargo:rustc-env=YOLOV8N_DIR={}", real.display());
    if !onnx.exists() {
        println!(
            "cargo:warning=skipped YOLOv8n: {} is not present (python3 shared/models/fetch_real_models.py {} fetches it)",
            onnx.display(),
            real.display()
        );
        return;
    }
    kiln::Build::new("yolov8n").onnx(&onnx).input_shape("images", &[1, 3, 320, 320]).compile_or_exit();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    npy_to_raw(&real.join("yolov8n.input.images.npy"), &out, "yolov8n.input.f32");
    npy_to_raw(&real.join("yolov8n.output.npy"), &out, "yolov8n.output.f32");
    println!("cargo:rustc-cfg=kiln_yolov8n");
}
