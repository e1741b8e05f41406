//! ResNet-18 from ONNX, compiled into this binary by `build.rs`: classify an
//! image file and print the five most likely ImageNet classes.
//!
//! `cargo run -p kiln-example-onnx-resnet [--release] -- [IMAGE]` (PNG or JPEG;
//! without one, the bundled `data/sample.png`). The reference model's weights
//! are random (seeded), not trained: the pipeline is the real one, the classes
//! it picks mean nothing.

mod preprocess;

use std::process::ExitCode;

#[cfg(kiln_resnet18)]
kiln_runtime::include_model!("resnet18");

/// The bundled image, used when no IMAGE is given.
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample.png");
/// The 1000 ImageNet-1k class names, in the order of the network's outputs.
const CLASSES: &str = include_str!("../data/imagenet_classes.txt");

fn load(path: &str) -> Result<image::RgbImage, String> {
    Ok(image::open(path).map_err(|e| format!("{path}: {e}"))?.to_rgb8())
}

/// The network's 1000 logits for input `x` ([1, 3, 224, 224]).
#[cfg(kiln_resnet18)]
fn classify(x: Vec<f32>) -> Result<Option<Vec<f32>>, String> {
    // Boxed: 600 KB in, fixed-size arrays as the glue wants them (a wrong size is a compile error).
    let x: Box<[f32; resnet18::X_LEN]> = x.into_boxed_slice().try_into().map_err(|_| "input size")?;
    let mut y = Box::new([0f32; resnet18::OUTPUT0_LEN]);
    let mut model = resnet18::OwnedModel::new().map_err(|e| e.to_string())?;
    model.run(&x, &mut y).map_err(|e| e.to_string())?;
    Ok(Some(y.to_vec()))
}

/// Without the model: say which file is missing and where it goes.
#[cfg(not(kiln_resnet18))]
fn classify(_: Vec<f32>) -> Result<Option<Vec<f32>>, String> {
    println!(
        "skipped: {} was not present when this example was built; put the reference models \
         (shared/models) beside the repository or set KILN_MODELS to their folder, then rebuild",
        env!("RESNET18_ONNX")
    );
    Ok(None)
}

fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = logits.iter().map(|&v| (v - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.iter().map(|v| v / sum).collect()
}

/// The `k` largest probabilities, largest first, with their class indices.
fn top_k(probs: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = probs.iter().copied().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked.truncate(k);
    ranked
}

fn run(path: &str) -> Result<(), String> {
    let img = load(path)?;
    let x = preprocess::to_tensor(&img);
    println!(
        "{path}: {}x{} -> [1, 3, 224, 224] f32 (resize 256, center crop 224, ImageNet mean/std)",
        img.width(),
        img.height()
    );
    let Some(logits) = classify(x)? else {
        return Ok(());
    };
    let names: Vec<&str> = CLASSES.lines().collect();
    println!("top 5 (the reference model's weights are random, so these classes are meaningless):");
    for (class, p) in top_k(&softmax(&logits), 5) {
        let name = names.get(class).copied().unwrap_or("?");
        println!("  {:6.2}%  {class:4}  {name}", p * 100.0);
    }
    Ok(())
}

fn main() -> ExitCode {
    let path = std::env::args().nth(1).unwrap_or_else(|| SAMPLE.to_string());
    match run(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use preprocess::{MEAN, SIDE, STD};

    #[test]
    fn bundled_image_preprocesses_to_a_normalized_nchw_tensor() {
        let x = preprocess::to_tensor(&load(SAMPLE).expect("the bundled image decodes"));
        assert_eq!(x.len(), 3 * SIDE * SIDE);
        // The sample's sun is pure white: somewhere all three planes hold (1 - mean) / std.
        let white =
            (0..SIDE * SIDE).any(|i| (0..3).all(|c| (x[c * SIDE * SIDE + i] - (1.0 - MEAN[c]) / STD[c]).abs() < 1e-6));
        assert!(white, "no pure-white pixel after preprocessing");
        assert_eq!(CLASSES.lines().count(), 1000);
    }

    #[test]
    fn softmax_and_top_k() {
        let p = softmax(&[1.0, 3.0, 2.0, 4.0]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(top_k(&p, 2).iter().map(|c| c.0).collect::<Vec<_>>(), [3, 1]);
    }

    /// The compiled model against ONNX Runtime's output for the reference input.
    #[cfg(kiln_resnet18)]
    #[test]
    fn compiled_model_matches_onnx_runtime() {
        let read = |name: &str| -> Vec<f32> {
            let bytes = std::fs::read(format!("{}/{name}", env!("OUT_DIR"))).expect("written by build.rs");
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
        };
        let (x, want) = (read("resnet18.input.f32"), read("resnet18.output.f32"));
        let got = classify(x).expect("run").expect("model compiled in");
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |a, (g, w)| a.max((g - w).abs()));
        println!("max abs error {err:e}, tolerance {:e}", 1e-4 * scale);
        assert!(err <= 1e-4 * scale, "max abs error {err:e} > 1e-4 * {scale:e}");
    }

    #[cfg(not(kiln_resnet18))]
    #[test]
    #[ignore = "resnet18.onnx is not in ../shared/models (or $KILN_MODELS): the model was not compiled"]
    fn compiled_model_matches_onnx_runtime() {
        println!("skipped: {} was not present at build time", env!("RESNET18_ONNX"));
    }
}
