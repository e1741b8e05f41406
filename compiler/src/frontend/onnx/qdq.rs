//! QDQ node units as the quantized operators they stand for, before import
//! (ONNX Runtime's QDQ transformer does the same): a `Conv`, `MatMul` or
//! `Gemm` whose data input and weight are each a `DequantizeLinear` (the
//! bias, if any, one of int32) and whose only use is a `QuantizeLinear`
//! becomes one `QLinearConv`, `QLinearMatMul` or `com.microsoft.QGemm`,
//! which import as the integer arithmetic of ONNX Runtime's kernels (see
//! `ops::quantize`). Dequantized, the product rounds each term and the
//! division by the output scale differently from that arithmetic, and values
//! that fall on the other side of a rounding tie move whole quantization
//! steps away from what every int8 runtime computes.
//!
//! A unit is rewritten only where the integer form means the same thing:
//! the scales are float32 initializers (single values for the input and the
//! output), the weight's scale is single or per output channel (the axis
//! the operator's integer form takes it on), the bias has no zero point
//! other than 0 and the scale `x_scale · w_scale` (as `quantize_static`
//! writes it), a `Gemm` has `alpha` and `beta` 1, and the `QuantizeLinear`
//! has no attribute that changes its output type. Anything else keeps the
//! float form, which is the operators' definition. The `DequantizeLinear`
//! nodes stay (other uses may read them; unused ones are dead code the
//! passes remove).

use std::collections::HashMap;

use kiln_ir::{DataType, Tensor};

use super::proto::{self, GraphProto, NodeProto, TensorProto};

/// The quantized operator a QDQ unit around `op` becomes: its name and
/// domain, and the axis its weight's per-channel scale must be on.
fn quantized_form(op: &NodeProto) -> Option<(&'static str, &'static str, i64)> {
    let int = |name: &str, default: i64| op.attribute.iter().find(|a| a.name() == name).map_or(default, |a| a.i());
    let float = |name: &str| op.attribute.iter().find(|a| a.name() == name).map_or(1.0, |a| a.f());
    match op.op_type() {
        "Conv" => Some(("QLinearConv", "", 0)),
        "MatMul" => Some(("QLinearMatMul", "", 1)),
        "Gemm" if float("alpha") == 1.0 && float("beta") == 1.0 => {
            Some(("QGemm", "com.microsoft", if int("transB", 0) != 0 { 0 } else { 1 }))
        }
        _ => None,
    }
}

/// Rewrite `graph`'s QDQ products in place; returns how many.
pub(super) fn fuse_qdq_products(graph: &mut GraphProto) -> usize {
    let inits: HashMap<&str, &TensorProto> = graph.initializer.iter().map(|t| (t.name(), t)).collect();
    let producer: HashMap<&str, usize> =
        graph.node.iter().enumerate().flat_map(|(k, n)| n.output.iter().map(move |o| (o.as_str(), k))).collect();
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for n in &graph.node {
        for i in &n.input {
            *uses.entry(i.as_str()).or_default() += 1;
        }
    }
    for o in &graph.output {
        *uses.entry(o.name()).or_default() += 1;
    }
    let consumer: HashMap<&str, usize> =
        graph.node.iter().enumerate().flat_map(|(k, n)| n.input.iter().map(move |i| (i.as_str(), k))).collect();
    let value = |name: &str| -> Option<Tensor> {
        let t = inits.get(name)?;
        proto::tensor_with_raw(t, t.raw_data.clone()).ok()
    };
    let floats = |name: &str| -> Option<Vec<f32>> {
        let t = value(name).filter(|t| t.dtype() == DataType::F32)?;
        Some(t.to_f64_vec().iter().map(|&v| v as f32).collect())
    };
    let dequantize = |name: &str| -> Option<&NodeProto> {
        let n = &graph.node[*producer.get(name)?];
        (n.op_type() == "DequantizeLinear" && n.domain().is_empty()).then_some(n)
    };
    let input = |n: &NodeProto, k: usize| n.input.get(k).cloned().unwrap_or_default();
    let mut fused: Vec<(usize, usize, NodeProto)> = Vec::new();
    for (k, op) in graph.node.iter().enumerate() {
        if !op.domain().is_empty() || op.output.len() != 1 {
            continue;
        }
        let Some((fused_op, fused_domain, weight_axis)) = quantized_form(op) else { continue };
        let out = op.output[0].as_str();
        let Some(&q_at) = consumer.get(out).filter(|_| uses.get(out) == Some(&1)) else { continue };
        let q = &graph.node[q_at];
        let plain_q = q.attribute.iter().all(|a| a.name() == "axis");
        if q.op_type() != "QuantizeLinear"
            || !q.domain().is_empty()
            || !plain_q
            || q.input.first().map(String::as_str) != Some(out)
        {
            continue;
        }
        let (Some(dx), Some(dw)) = (dequantize(&input(op, 0)), dequantize(&input(op, 1))) else { continue };
        let (Some(xs), Some(ws), Some(ys)) = (floats(&input(dx, 1)), floats(&input(dw, 1)), floats(&input(q, 1)))
        else {
            continue;
        };
        let axis = dw.attribute.iter().find(|a| a.name() == "axis").map_or(1, |a| a.i());
        // A MatMul's weight is 2-D: its last axis, written either way.
        let axis = if fused_op == "QLinearMatMul" && axis == -1 { 1 } else { axis };
        if xs.len() != 1 || ys.len() != 1 || (ws.len() != 1 && axis != weight_axis) {
            continue;
        }
        let mut inputs = vec![input(dx, 0), input(dx, 1), input(dx, 2), input(dw, 0), input(dw, 1), input(dw, 2)];
        let bias_at = if fused_op == "QLinearMatMul" { None } else { Some(2) };
        let bias = bias_at.and_then(|b| op.input.get(b)).filter(|b| !b.is_empty());
        let mut bias_input = String::new();
        if let Some(b) = bias {
            let Some(db) = dequantize(b) else { continue };
            let Some(bias) = value(&input(db, 0)).filter(|t| t.dtype() == DataType::I32) else { continue };
            let zero = input(db, 2);
            let zero_ok = zero.is_empty() || value(&zero).is_some_and(|z| z.to_f64_vec().iter().all(|&v| v == 0.0));
            let Some(bs) = floats(&input(db, 1)) else { continue };
            let per_channel = |v: &[f32], c: usize| if v.len() == 1 { v[0] } else { v[c] };
            let channels = bias.numel();
            let scaled = (bs.len() == 1 || bs.len() == channels)
                && (ws.len() == 1 || ws.len() == channels)
                && (0..channels).all(|c| per_channel(&bs, c) == xs[0] * per_channel(&ws, c));
            if !zero_ok || !scaled {
                continue;
            }
            bias_input = input(db, 0);
        }
        // QLinearConv takes the bias last; QGemm between the weight and the output's scale.
        match fused_op {
            "QGemm" => inputs.extend([bias_input, input(q, 1), input(q, 2)]),
            _ => {
                inputs.extend([input(q, 1), input(q, 2)]);
                if !bias_input.is_empty() {
                    inputs.push(bias_input);
                }
            }
        }
        let attribute = op.attribute.iter().filter(|a| a.name() != "beta").cloned().collect();
        let node = NodeProto {
            input: inputs,
            output: q.output.clone(),
            name: op.name.clone(),
            op_type: Some(fused_op.into()),
            domain: (!fused_domain.is_empty()).then(|| fused_domain.into()),
            attribute,
            ..Default::default()
        };
        fused.push((k, q_at, node));
    }
    let count = fused.len();
    let mut removed = vec![false; graph.node.len()];
    for (k, q_at, node) in fused {
        graph.node[k] = node;
        removed[q_at] = true;
    }
    let mut k = 0;
    graph.node.retain(|_| {
        k += 1;
        !removed[k - 1]
    });
    count
}
