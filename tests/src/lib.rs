//! kiln used from outside, exactly as a user crate would: the models that
//! `build.rs` compiled, linked into this crate (see `tests/`).

kiln_runtime::include_model!("mlp_text");
kiln_runtime::include_model!("convnet");
kiln_runtime::include_model!("mlp_amx");
kiln_runtime::include_model!("mlp_zen");
#[cfg(kiln_reference_models)]
kiln_runtime::include_model!("onnx_mlp");
#[cfg(kiln_reference_models)]
kiln_runtime::include_model!("onnx_lenet");
#[cfg(kiln_reference_models)]
kiln_runtime::include_model!("onnx_resnet18");
#[cfg(kiln_reference_models)]
kiln_runtime::include_model!("onnx_mobilenetv2");
#[cfg(kiln_gpt_tiny)]
kiln_runtime::include_model!("onnx_gpt_tiny");
#[cfg(kiln_real_models)]
kiln_runtime::include_model!("onnx_yolov8n");
#[cfg(kiln_real_models)]
kiln_runtime::include_model!("onnx_pplcnet");

/// The conv net's Relay text, as `build.rs` saw it (for reference runs).
pub const CONVNET_RELAY: &str = include_str!(concat!(env!("OUT_DIR"), "/convnet.relay"));

/// The parameter values `build.rs` bound (same formula).
pub fn param(name: &str, shape: &[usize]) -> kiln::Tensor {
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
    kiln::Tensor::from_f64(kiln::DataType::F32, shape.to_vec(), &vals)
}
