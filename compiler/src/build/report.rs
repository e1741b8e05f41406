//! `<model>.json`, the build report: the target, the memory plan and the
//! kernels (with the knobs of those a tuning log scheduled), written by serde_json so that any name an ONNX file brings is
//! escaped correctly; deterministic (sorted keys), like every artifact.

use crate::backend::aot::ExecutorPlan;
use crate::target::TargetDescription;

/// `<model>.json`: the memory plan and the kernels, deterministic (sorted keys).
pub(super) fn report_json(name: &str, target: &TargetDescription, plan: &ExecutorPlan) -> String {
    use crate::backend::aot::{Storage, TensorSlot};
    // Aliases (reshape-only results) share another tensor's bytes: not counted again.
    let bytes = |f: &dyn Fn(&TensorSlot) -> bool| {
        plan.tensors.iter().filter(|t| t.alias_of.is_none() && f(t)).map(|t| t.bytes()).sum::<usize>()
    };
    let report = serde_json::json!({
        "model": name,
        "target": target.target,
        "target_description": target.to_json(),
        "memory": {
            "arena_bytes": plan.arena_bytes,
            "lower_bound_bytes": plan.arena_lower_bound,
            "input_bytes": bytes(&|t| matches!(t.storage, Storage::Input(_))),
            "output_bytes": bytes(&|t| matches!(t.storage, Storage::Output(_))),
            "constant_bytes": plan.constants.iter().map(|c| c.bytes().len()).sum::<usize>(),
        },
        "kernels": plan.kernels.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        // The arithmetic of each kernel's products (its anchor operator's).
        "kernel_precision": plan
            .kernels
            .iter()
            .map(|k| (k.name.clone(), serde_json::json!(kernel_precision(k))))
            .collect::<serde_json::Map<_, _>>(),
        // The kernels a tuning log scheduled: their knobs, or why a record was not applied.
        "tuned_kernels": plan
            .kernels
            .iter()
            .filter_map(|k| k.attrs.get("tuning").map(|t| (k.name.clone(), serde_json::json!(t))))
            .collect::<serde_json::Map<_, _>>(),
        "calls": plan.calls.iter().map(|c| serde_json::json!({
            "kernel": plan.kernels[c.kernel].name,
            "args": c.args,
        })).collect::<Vec<_>>(),
        "tensors": plan.tensors.iter().map(|t| serde_json::json!({
            "name": t.name,
            "shape": t.shape,
            "dtype": t.dtype.to_string(),
            "storage": format!("{:?}", t.storage),
        })).collect::<Vec<_>>(),
    });
    // Serializing a `Value` cannot fail (string keys, finite numbers only).
    serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
}

/// `bf16` (bfloat16 products summed in float32), `int8` (integer products)
/// or `fp32`, by the kernel's anchor operator.
pub(crate) fn kernel_precision(k: &crate::tir::PrimFunc) -> &'static str {
    match k.attrs.get("anchor").map(String::as_str) {
        Some("nn.contrib_conv2d_bf16") => "bf16",
        Some("nn.contrib_conv2d_u8s8") => "int8",
        _ => "fp32",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::aot::{Storage, TensorSlot};
    use kiln_ir::DataType;

    /// Names come from ONNX files: quotes, backslashes and control
    /// characters must not break `<model>.json` (the hand-written writer
    /// escaped only `"` and `\`).
    #[test]
    fn the_report_is_valid_json_whatever_the_names() {
        let hostile = "x\"y\\z\nw\u{1}";
        let plan = ExecutorPlan {
            tensors: vec![TensorSlot {
                name: hostile.into(),
                shape: vec![2, 3],
                dtype: DataType::F32,
                storage: Storage::Input(0),
                alias_of: None,
            }],
            inputs: vec![0],
            arena_bytes: 64,
            ..ExecutorPlan::default()
        };
        let text = report_json(hostile, &TargetDescription::resolve("c"), &plan);
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(v["model"], hostile);
        assert_eq!(v["tensors"][0]["name"], hostile);
        assert_eq!(v["memory"]["input_bytes"], 24);
        assert_eq!(v["memory"]["arena_bytes"], 64);
    }
}
