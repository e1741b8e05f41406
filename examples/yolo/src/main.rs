//! A YOLOv8n detector from ONNX, compiled into this binary by `build.rs`:
//! detect objects in an image file, draw their boxes, save the result.
//!
//! `cargo run -p kiln-example-yolo [--release] -- [IMAGE] [-o OUT]` (PNG or
//! JPEG; without IMAGE the bundled `data/sample.png`, default OUT
//! `yolo_out.png`). The model is the one `fetch_real_models.py` fetches: the
//! 320×320 YOLOv8n of NudeNet 3.4 (a content-moderation detector trained with
//! ultralytics on the 18 body-part classes below, not COCO), exported by
//! ultralytics — so it shows a real exporter's graph and real weights. The
//! bundled synthetic image contains none of its classes.

mod detect;

use std::process::ExitCode;

#[cfg(kiln_yolov8n)]
kiln_runtime::include_model!("yolov8n");

/// The bundled image, used when no IMAGE is given.
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample.png");
/// The class names, from the model's `names` metadata.
const CLASSES: [&str; 18] = [
    "FEMALE_GENITALIA_COVERED",
    "FACE_FEMALE",
    "BUTTOCKS_EXPOSED",
    "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED",
    "MALE_BREAST_EXPOSED",
    "ANUS_EXPOSED",
    "FEET_EXPOSED",
    "BELLY_COVERED",
    "FEET_COVERED",
    "ARMPITS_COVERED",
    "ARMPITS_EXPOSED",
    "FACE_MALE",
    "BELLY_EXPOSED",
    "MALE_GENITALIA_EXPOSED",
    "ANUS_COVERED",
    "FEMALE_BREAST_COVERED",
    "BUTTOCKS_COVERED",
];
/// ultralytics' defaults for prediction.
const SCORE_THRESHOLD: f32 = 0.25;
const IOU_THRESHOLD: f32 = 0.45;

/// The network's output ([1, 22, 2100]: cx, cy, w, h, 18 class scores per anchor) for input `x`.
#[cfg(kiln_yolov8n)]
fn infer(x: Vec<f32>) -> Result<Option<Vec<f32>>, String> {
    // Boxed: 1.2 MB in, fixed-size arrays as the glue wants them.
    let x: Box<[f32; yolov8n::IMAGES_LEN]> = x.into_boxed_slice().try_into().map_err(|_| "input size")?;
    let mut y = Box::new([0f32; yolov8n::OUTPUT0_LEN]);
    let mut model = yolov8n::OwnedModel::new().map_err(|e| e.to_string())?;
    model.run(&x, &mut y).map_err(|e| e.to_string())?;
    Ok(Some(y.to_vec()))
}

/// Without the model: say which file is missing and how to get it.
#[cfg(not(kiln_yolov8n))]
fn infer(_: Vec<f32>) -> Result<Option<Vec<f32>>, String> {
    println!(
        "skipped: {} was not present when this example was built; fetch it with \
         `python3 shared/models/fetch_real_models.py {}` (needs pip, numpy and onnxruntime), then rebuild",
        env!("YOLOV8N_ONNX"),
        env!("YOLOV8N_DIR")
    );
    Ok(None)
}

/// Letterbox, run, decode, suppress, map back: the detections in `img`'s pixels.
fn detect_in(img: &image::RgbImage) -> Result<Option<Vec<detect::Detection>>, String> {
    let (x, lb) = detect::letterbox(img);
    let Some(out) = infer(x)? else {
        return Ok(None);
    };
    let candidates = detect::decode(&out, CLASSES.len(), SCORE_THRESHOLD);
    Ok(Some(detect::nms(candidates, IOU_THRESHOLD).into_iter().map(|d| lb.unmap(d)).collect()))
}

fn run(input: &str, output: &str) -> Result<(), String> {
    let mut img = image::open(input).map_err(|e| format!("{input}: {e}"))?.to_rgb8();
    println!("{input}: {}x{}, letterboxed to 320x320", img.width(), img.height());
    let Some(dets) = detect_in(&img)? else {
        return Ok(());
    };
    println!("{} detection(s) (score >= {SCORE_THRESHOLD}, class-wise NMS at IoU {IOU_THRESHOLD})", dets.len());
    for d in &dets {
        println!(
            "  class {:2} {:<24} score {:.3}  box ({:.1}, {:.1})-({:.1}, {:.1})",
            d.class, CLASSES[d.class], d.score, d.x1, d.y1, d.x2, d.y2
        );
        detect::draw_box(&mut img, d, detect::color(d.class), 2);
    }
    img.save(output).map_err(|e| format!("{output}: {e}"))?;
    println!("wrote {output}");
    Ok(())
}

fn main() -> ExitCode {
    let (mut input, mut output) = (None, "yolo_out.png".to_string());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-o" | "--output" => match args.next() {
                Some(o) => output = o,
                None => {
                    eprintln!("error: {a} needs a file name");
                    return ExitCode::FAILURE;
                }
            },
            _ if input.is_none() => input = Some(a),
            _ => {
                eprintln!("usage: kiln-example-yolo [IMAGE] [-o OUT.png]");
                return ExitCode::FAILURE;
            }
        }
    }
    match run(input.as_deref().unwrap_or(SAMPLE), &output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// The compiled model against ONNX Runtime's output for the reference input.
    #[cfg(kiln_yolov8n)]
    #[test]
    fn compiled_model_matches_onnx_runtime() {
        let read = |name: &str| -> Vec<f32> {
            let bytes = std::fs::read(format!("{}/{name}", env!("OUT_DIR"))).expect("written by build.rs");
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
        };
        let (x, want) = (read("yolov8n.input.f32"), read("yolov8n.output.f32"));
        let got = super::infer(x).expect("run").expect("model compiled in");
        assert_eq!(got.len(), (4 + super::CLASSES.len()) * 2100);
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |a, (g, w)| a.max((g - w).abs()));
        println!("max abs error {err:e}, tolerance {:e}", 1e-4 * scale);
        assert!(err <= 1e-4 * scale, "max abs error {err:e} > 1e-4 * {scale:e}");
        // The scale is set by box coordinates (hundreds of pixels); the scores,
        // in [0, 1], must match to the same relative tolerance on their own.
        let scores_start = 4 * 2100;
        let score_err =
            got[scores_start..].iter().zip(&want[scores_start..]).fold(0f32, |a, (g, w)| a.max((g - w).abs()));
        println!("class scores: max abs error {score_err:e}");
        assert!(score_err <= 1e-4, "class scores: max abs error {score_err:e} > 1e-4");
    }

    #[cfg(not(kiln_yolov8n))]
    #[test]
    #[ignore = "yolov8n.onnx is not in ../shared/models/real (run shared/models/fetch_real_models.py)"]
    fn compiled_model_matches_onnx_runtime() {
        println!("skipped: {} was not present at build time", env!("YOLOV8N_ONNX"));
    }

    /// The whole path on the bundled image: it decodes, and nothing there is one of the classes.
    #[test]
    fn bundled_image_runs_end_to_end() {
        let img = image::open(super::SAMPLE).expect("the bundled image decodes").to_rgb8();
        if let Some(dets) = super::detect_in(&img).expect("run") {
            assert!(dets.is_empty(), "{dets:?}");
        }
    }
}
