//! Compile ResNet-18 straight from its ONNX file, for what cargo compiles the
//! crate for (no `.target(…)`). The model is one of the reference models of
//! `../shared/models` (or `$KILN_MODELS`); a fresh clone may not have them, so
//! without the file the build still succeeds: `cfg(kiln_resnet18)` stays unset
//! and `main` says what is missing. With it, ONNX Runtime's reference input and
//! output are also written to `$OUT_DIR` as raw little-endian f32, for the test.

use std::path::{Component, Path, PathBuf};

/// `$KILN_MODELS`, else `../shared/models` beside the repository.
fn models_dir() -> PathBuf {
    println!("cargo:rerun-if-env-changed=KILN_MODELS");
    match std::env::var_os("KILN_MODELS") {
        Some(dir) => PathBuf::from(dir),
        None => normalize(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models")),
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
    println!("cargo::rustc-check-cfg=cfg(kiln_resnet18)");
    let models = models_dir();
    let onnx = models.join("resnet18.onnx");
    // Also when absent: cargo then reruns this script on every build, so the
    // model is picked up as soon as it appears.
    println!("cargo:rerun-if-changed={}", onnx.display());
    println!("cargo:rustc-env=RESNET18_ONNX={}", onnx.display());
    if !onnx.exists() {
        println!("cargo:warning=skipped ResNet-18: {} is not present (set KILN_MODELS)", onnx.display());
        return;
    }
    kiln::Build::new("resnet18").onnx(&onnx).compile_or_exit();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    npy_to_raw(&models.join("resnet18.input.npy"), &out, "resnet18.input.f32");
    npy_to_raw(&models.join("resnet18.output.npy"), &out, "resnet18.output.f32");
    println!("cargo:rustc-cfg=kiln_resnet18");
}
