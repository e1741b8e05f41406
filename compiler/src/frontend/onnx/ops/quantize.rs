//! The quantization operators, as float arithmetic with each quantization
//! step explicit: `q = saturate(round_half_to_even(x / scale) + zero_point)`
//! and `x = (q − zero_point) · scale`.
//!
//! - QDQ (ONNX Runtime's `quantize_static` default): QuantizeLinear and
//!   DequantizeLinear, per tensor and per axis (int8, uint8, int16, uint16;
//!   int32 dequantized).
//! - MatMulInteger and ConvInteger: `(q − zero_point)` in int32, then the
//!   int32 product (exact).
//! - QOperator: QLinearConv, QLinearMatMul, DynamicQuantizeLinear, and
//!   ONNX Runtime's `com.microsoft` QLinearAdd, QLinearMul,
//!   QLinearGlobalAveragePool and QGemm: their inputs dequantized, the float
//!   operator, the result quantized.
//!
//! The values are those of integer kernels up to float rounding (one
//! quantization step at most where a product sum rounds differently).

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::nn::{conv_of, gemm_of, global_pool_of, matmul_of};
use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(&["QuantizeLinear"], quantize_linear, &["axis", "saturate", "block_size", "output_dtype"]);
    t.add(&["DequantizeLinear"], dequantize_linear, &["axis", "block_size"]);
    t.add(&["QLinearConv"], qlinear_conv, &["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]);
    t.add(&["QLinearMatMul"], qlinear_matmul, &[]);
    t.add(&["DynamicQuantizeLinear"], dynamic_quantize_linear, &[]);
    t.add(&["MatMulInteger"], matmul_integer, &[]);
    t.add(&["ConvInteger"], conv_integer, &["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]);
    t.add(&["com.microsoft.QLinearAdd", "com.microsoft.QLinearMul"], qlinear_binary, &[]);
    t.add(&["com.microsoft.QLinearGlobalAveragePool"], qlinear_global_average_pool, &["channels_last"]);
    t.add(&["com.microsoft.QGemm"], qgemm, &["alpha", "transA", "transB"]);
}

/// The integer types kiln quantizes to.
fn quantized(dt: DataType) -> bool {
    matches!(dt, DataType::I8 | DataType::U8 | DataType::I16 | DataType::U16)
}

fn cast(im: &mut Importer, node: &Node, x: ExprId, dt: DataType) -> Result<ExprId, OnnxError> {
    im.call(node, "cast", vec![x], attrs(&[("dtype", AttrValue::DType(dt))]))
}

/// `v` (a scale or zero point) shaped to broadcast against `x`: a scalar or
/// one-element vector as it is, a vector along `axis` as `[C, 1, …, 1]`.
fn along_axis(
    im: &mut Importer,
    node: &Node,
    v: ExprId,
    x: ExprId,
    axis: i64,
    what: &str,
) -> Result<ExprId, OnnxError> {
    let shape = im.shape_of(node, v)?;
    let numel: usize = shape.iter().product();
    if shape.is_empty() || (shape.len() == 1 && numel == 1) {
        return Ok(v);
    }
    let xs = im.shape_of(node, x)?;
    let rank = xs.len() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    if shape.len() != 1 || a < 0 || a >= rank || xs[a as usize] != numel {
        return Err(
            node.err(format!("{what} of shape {shape:?} is neither a scalar nor a vector along axis {axis} of {xs:?}"))
        );
    }
    let trailing = rank as usize - a as usize - 1;
    if trailing == 0 {
        return Ok(v);
    }
    let attrs = attrs(&[("axis", AttrValue::Int(1)), ("num_newaxis", AttrValue::Int(trailing as i64))]);
    im.call(node, "expand_dims", vec![v], attrs)
}

/// The type the quantization arithmetic runs in for `scale` — float32 for a
/// float16 scale, as ONNX's reference computes — and the scale in it.
fn float_scale(im: &mut Importer, node: &Node, scale: ExprId) -> Result<(DataType, ExprId), OnnxError> {
    match im.dtype_of(node, scale)? {
        DataType::F16 => Ok((DataType::F32, cast(im, node, scale, DataType::F32)?)),
        dt if dt.is_float() => Ok((dt, scale)),
        dt => Err(node.err(format!("a scale must be a float tensor, found {dt}"))),
    }
}

/// `(q − zero_point) · scale`, the scale and zero point along `axis` when vectors.
fn dequantize(
    im: &mut Importer,
    node: &Node,
    q: ExprId,
    scale: ExprId,
    zero_point: Option<ExprId>,
    axis: i64,
) -> Result<ExprId, OnnxError> {
    let (dt, scale) = float_scale(im, node, scale)?;
    let qdt = im.dtype_of(node, q)?;
    if !quantized(qdt) && qdt != DataType::I32 {
        return Err(node.err(format!("dequantization of {qdt} is not supported (int8, uint8, int16, uint16, int32)")));
    }
    let x = minus_zero_point(im, node, q, zero_point, axis, dt)?;
    let scale = along_axis(im, node, scale, q, axis, "a scale")?;
    im.op(node, "multiply", vec![x, scale])
}

/// `saturate(round_half_to_even(x / scale) + zero_point)` as `out`.
fn quantize(
    im: &mut Importer,
    node: &Node,
    x: ExprId,
    scale: ExprId,
    zero_point: Option<ExprId>,
    out: DataType,
    axis: i64,
) -> Result<ExprId, OnnxError> {
    let (dt, scale) = float_scale(im, node, scale)?;
    let xdt = im.dtype_of(node, x)?;
    if !xdt.is_float() {
        return Err(node.err(format!("quantizes a float tensor, found {xdt}")));
    }
    if !quantized(out) {
        return Err(node.err(format!("quantization to {out} is not supported (int8, uint8, int16, uint16)")));
    }
    let x = if xdt == dt { x } else { cast(im, node, x, dt)? };
    let scale = along_axis(im, node, scale, x, axis, "a scale")?;
    let scaled = im.op(node, "divide", vec![x, scale])?;
    saturated(im, node, scaled, zero_point, out, axis)
}

/// `saturate(round_half_to_even(y) + zero_point)` as `out`: `y` is in steps
/// of the output's scale, the zero point along `axis` when a vector.
fn saturated(
    im: &mut Importer,
    node: &Node,
    y: ExprId,
    zero_point: Option<ExprId>,
    out: DataType,
    axis: i64,
) -> Result<ExprId, OnnxError> {
    let dt = im.dtype_of(node, y)?;
    let mut q = im.op(node, "round", vec![y])?;
    if let Some(z) = zero_point {
        let z = zero_point_as(im, node, z, y, axis, dt)?;
        q = im.op(node, "add", vec![q, z])?;
    }
    let (lo, hi) = DataType::value_range(out);
    let q =
        im.call(node, "clip", vec![q], attrs(&[("a_min", AttrValue::Float(lo)), ("a_max", AttrValue::Float(hi))]))?;
    cast(im, node, q, out)
}

/// The type a quantized result takes: its zero point's, else uint8.
fn quantized_type(im: &mut Importer, node: &Node, zero_point: Option<ExprId>) -> Result<DataType, OnnxError> {
    zero_point.map_or(Ok(DataType::U8), |z| im.dtype_of(node, z))
}

fn no_blocks(node: &Node) -> Result<(), OnnxError> {
    if node.int("block_size", 0)? != 0 {
        return Err(node.err("blocked quantization (block_size) is not supported"));
    }
    Ok(())
}

fn quantize_linear(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    no_blocks(node)?;
    let (x, scale) = (im.input(node, 0)?, im.input(node, 1)?);
    let zero_point = im.optional_input(node, 2)?;
    let out = match (zero_point, node.opt_int("output_dtype")?) {
        (None, Some(code)) if code != 0 => crate::frontend::onnx::proto::dtype(code as i32)
            .ok_or_else(|| node.err(format!("output_dtype {code} is not supported")))?,
        _ => quantized_type(im, node, zero_point)?,
    };
    one(quantize(im, node, x, scale, zero_point, out, node.int("axis", 1)?)?)
}

fn dequantize_linear(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    no_blocks(node)?;
    let (q, scale) = (im.input(node, 0)?, im.input(node, 1)?);
    let zero_point = im.optional_input(node, 2)?;
    let x = dequantize(im, node, q, scale, zero_point, node.int("axis", 1)?)?;
    // The result has the scale's type.
    let dt = im.dtype_of(node, scale)?;
    one(if im.dtype_of(node, x)? == dt { x } else { cast(im, node, x, dt)? })
}

/// The quantized input at `first` (value, scale, zero point: ONNX's QLinear
/// layout) dequantized along `axis`, with its scale (for an int32 bias
/// scaled by it).
fn dequantized_input(im: &mut Importer, node: &Node, first: usize, axis: i64) -> Result<(ExprId, ExprId), OnnxError> {
    let (q, scale) = (im.input(node, first)?, im.input(node, first + 1)?);
    let zero_point = im.optional_input(node, first + 2)?;
    Ok((dequantize(im, node, q, scale, zero_point, axis)?, scale))
}

/// The float result `y` quantized as the node's output: with the output
/// scale and zero point (inputs `scale_at`, `scale_at + 1`), in the zero
/// point's type (uint8 without one).
fn quantized_output(
    im: &mut Importer,
    node: &Node,
    y: ExprId,
    scale_at: usize,
    axis: i64,
) -> Result<Vec<ExprId>, OnnxError> {
    let (scale, zero_point) = (im.input(node, scale_at)?, im.optional_input(node, scale_at + 1)?);
    let out = quantized_type(im, node, zero_point)?;
    one(quantize(im, node, y, scale, zero_point, out, axis)?)
}

/// A product's int32 bias as float: its scale is the operands' scales
/// multiplied (a vector when the weight's is per channel).
fn product_bias(
    im: &mut Importer,
    node: &Node,
    b: ExprId,
    a_scale: ExprId,
    w_scale: ExprId,
) -> Result<ExprId, OnnxError> {
    let scale = im.op(node, "multiply", vec![a_scale, w_scale])?;
    let (dt, scale) = float_scale(im, node, scale)?;
    let bf = cast(im, node, b, dt)?;
    im.op(node, "multiply", vec![bf, scale])
}

/// QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp (per output channel), y_scale, y_zp, bias (int32,
/// scaled by x_scale · w_scale). Computed as ONNX Runtime's integer kernels
/// compute it, when the three scales are constants: the integers
/// `Σ (x − x_zp)(w − w_zp) + bias` (as floats: exact while the sums stay
/// below 2²⁴), times the per-channel multiplier `x_scale · w_scale / y_scale`
/// (float32, in that order), rounded half to even, plus `y_zp`, saturated.
/// Dequantizing first, as the fallback does, rounds each product and the
/// division differently: on MobileNetV2 that moved values across rounding
/// ties and ended several steps away from ONNX Runtime's output.
fn qlinear_conv(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    if let Some(multiplier) = requantization(im, node, 1, 4, 6)? {
        let x = integral(im, node, 0, 1)?;
        let w = integral(im, node, 3, 0)?;
        let bias = im.optional_input(node, 8)?.map(|b| cast(im, node, b, DataType::F32)).transpose()?;
        let acc = conv_of(im, node, x, w, bias)?;
        return requantized(im, node, acc, &multiplier, 1, 7);
    }
    let (xf, xs) = dequantized_input(im, node, 0, 1)?;
    let (wf, ws) = dequantized_input(im, node, 3, 0)?;
    let bias = im.optional_input(node, 8)?.map(|b| product_bias(im, node, b, xs, ws)).transpose()?;
    let yf = conv_of(im, node, xf, wf, bias)?;
    quantized_output(im, node, yf, 6, 1)
}

/// The per-channel requantization multipliers `a_scale · w_scale[c] / y_scale`
/// (inputs `a_scale_at`, `w_scale_at`, `y_scale_at`) in float32, as ONNX
/// Runtime computes them; `None` unless all three are float32 constants, the
/// input and output scales single values, and both operands 8-bit integers.
fn requantization(
    im: &mut Importer,
    node: &Node,
    a_scale_at: usize,
    w_scale_at: usize,
    y_scale_at: usize,
) -> Result<Option<Vec<f32>>, OnnxError> {
    let value = |im: &Importer, at: usize| -> Result<Option<Vec<f32>>, OnnxError> {
        let x = im.input(node, at)?;
        Ok(im
            .constant_value(x)
            .filter(|t| t.dtype() == DataType::F32)
            .map(|t| t.to_f64_vec().iter().map(|&v| v as f32).collect()))
    };
    // 8-bit operands: their products (at most 255 · 255) sum exactly in
    // float32 far enough; 16-bit ones keep the float arithmetic.
    for operand in [a_scale_at - 1, w_scale_at - 1] {
        let q = im.input(node, operand)?;
        if !matches!(im.dtype_of(node, q)?, DataType::I8 | DataType::U8) {
            return Ok(None);
        }
    }
    let (Some(a), Some(w), Some(y)) = (value(im, a_scale_at)?, value(im, w_scale_at)?, value(im, y_scale_at)?) else {
        return Ok(None);
    };
    let (&[a], &[y]) = (&a[..], &y[..]) else { return Ok(None) };
    if w.is_empty() {
        return Ok(None);
    }
    Ok(Some(w.iter().map(|&w| a * w / y).collect()))
}

/// Input `at` (an 8-bit quantized tensor, its zero point at `at + 2`) as
/// the integers `q − zero_point` in float32, the zero point along `axis`.
fn integral(im: &mut Importer, node: &Node, at: usize, axis: i64) -> Result<ExprId, OnnxError> {
    let q = im.input(node, at)?;
    let zero_point = im.optional_input(node, at + 2)?;
    centered(im, node, q, zero_point, axis, DataType::F32)
}

/// The integer products `acc` times the `multiplier` (one value, or one per
/// index of `axis`), quantized with the zero point at input `zero_point_at`.
fn requantized(
    im: &mut Importer,
    node: &Node,
    acc: ExprId,
    multiplier: &[f32],
    axis: i64,
    zero_point_at: usize,
) -> Result<Vec<ExprId>, OnnxError> {
    let m = match multiplier {
        [one] => im.constant(Tensor::from_f32(vec![], &[*one])),
        _ => im.constant(Tensor::from_f32(vec![multiplier.len()], multiplier)),
    };
    let m = along_axis(im, node, m, acc, axis, "the requantization multiplier")?;
    let scaled = im.op(node, "multiply", vec![acc, m])?;
    let zero_point = im.optional_input(node, zero_point_at)?;
    let out = quantized_type(im, node, zero_point)?;
    one(saturated(im, node, scaled, zero_point, out, axis)?)
}

/// QLinearMatMul: a, a_scale, a_zp (per row), b, b_scale, b_zp (per column), y_scale, y_zp.
/// With constant scales (a single one for `a`), the integer arithmetic of
/// int8 runtimes, as [`qlinear_conv`]: `(a − a_zp)·(b − b_zp)` over
/// integers, times `a_scale · b_scale[column] / y_scale`.
fn qlinear_matmul(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    if let Some(multiplier) = requantization(im, node, 1, 4, 6)? {
        let a = integral(im, node, 0, -2)?;
        let b = integral(im, node, 3, -1)?;
        let acc = matmul_of(im, node, a, b)?;
        return requantized(im, node, acc, &multiplier, -1, 7);
    }
    let (af, _) = dequantized_input(im, node, 0, -2)?;
    let (bf, _) = dequantized_input(im, node, 3, -1)?;
    let yf = matmul_of(im, node, af, bf)?;
    quantized_output(im, node, yf, 6, -1)
}

/// DynamicQuantizeLinear: uint8 with the scale and zero point that map
/// `[min(0, min x), max(0, max x)]` onto `[0, 255]`; returns (y, scale, zero point).
fn dynamic_quantize_linear(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = im.dtype_of(node, x)?;
    if dt != DataType::F32 {
        return Err(node.err(format!("quantizes a float32 tensor, found {dt}")));
    }
    let all = attrs(&[("axis", AttrValue::None), ("keepdims", AttrValue::Bool(false))]);
    let zero = im.scalar(dt, 0.0);
    let hi = im.call(node, "max", vec![x], all.clone())?;
    let hi = im.op(node, "maximum", vec![hi, zero])?;
    let lo = im.call(node, "min", vec![x], all)?;
    let lo = im.op(node, "minimum", vec![lo, zero])?;
    let range = im.op(node, "subtract", vec![hi, lo])?;
    let qmax = im.scalar(dt, 255.0);
    let scale = im.op(node, "divide", vec![range, qmax])?;
    // An all-zero input has no range: scale 0 would divide by zero; ONNX's
    // reference then gives zero point 0 and y = 0, as a scale of 1 does.
    let is_zero = im.op(node, "equal", vec![scale, zero])?;
    let one_ = im.scalar(dt, 1.0);
    let safe = im.op(node, "where", vec![is_zero, one_, scale])?;
    let neg_lo = im.op(node, "negative", vec![lo])?;
    let zp = im.op(node, "divide", vec![neg_lo, safe])?;
    let zp = im.op(node, "round", vec![zp])?;
    let zp = im.call(
        node,
        "clip",
        vec![zp],
        attrs(&[("a_min", AttrValue::Float(0.0)), ("a_max", AttrValue::Float(255.0))]),
    )?;
    let zp = cast(im, node, zp, DataType::U8)?;
    let y = quantize(im, node, x, safe, Some(zp), DataType::U8, 1)?;
    Ok(vec![y, scale, zp])
}

/// com.microsoft QLinearAdd / QLinearMul: a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp.
fn qlinear_binary(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (af, _) = dequantized_input(im, node, 0, 1)?;
    let (bf, _) = dequantized_input(im, node, 3, 1)?;
    let op = if node.op() == "QLinearAdd" { "add" } else { "multiply" };
    let cf = im.op(node, op, vec![af, bf])?;
    quantized_output(im, node, cf, 6, 1)
}

/// com.microsoft QLinearGlobalAveragePool (NCHW): x, x_scale, x_zp, y_scale, y_zp.
fn qlinear_global_average_pool(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    if node.int("channels_last", 0)? != 0 {
        return Err(node.err("channels_last=1 is not supported"));
    }
    let (xf, _) = dequantized_input(im, node, 0, 1)?;
    let yf = global_pool_of(im, node, xf, false)?;
    quantized_output(im, node, yf, 3, 1)
}

/// com.microsoft QGemm: a, a_scale, a_zp, b, b_scale, b_zp (per column of
/// the result), c (int32, scale a_scale · b_scale), y_scale, y_zp; without
/// y_scale the result stays float.
fn qgemm(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let b_axis = if node.int("transB", 0)? != 0 { 0 } else { 1 };
    // Requantized, with alpha 1 and constant scales: the integer arithmetic
    // (see `qlinear_conv`), the int32 bias added to the integer products.
    if im.optional_input(node, 7)?.is_some() && node.float("alpha", 1.0)? == 1.0 {
        if let Some(multiplier) = requantization(im, node, 1, 4, 7)? {
            let a = integral(im, node, 0, 0)?;
            let b = integral(im, node, 3, b_axis)?;
            let c = im.optional_input(node, 6)?.map(|c| cast(im, node, c, DataType::F32)).transpose()?;
            let acc = gemm_of(im, node, a, b, c, 1.0)?;
            return requantized(im, node, acc, &multiplier, 1, 8);
        }
    }
    let (af, a_s) = dequantized_input(im, node, 0, 0)?;
    let (bf, b_s) = dequantized_input(im, node, 3, b_axis)?;
    let c = im.optional_input(node, 6)?.map(|c| product_bias(im, node, c, a_s, b_s)).transpose()?;
    let yf = gemm_of(im, node, af, bf, c, 1.0)?;
    match im.optional_input(node, 7)? {
        Some(_) => quantized_output(im, node, yf, 7, 1),
        None => one(yf),
    }
}

/// `q − zero_point` (int8 or uint8 `q`) as `dt` (int32, or float32 holding
/// the integers), the zero point along `axis` when a vector.
fn centered(
    im: &mut Importer,
    node: &Node,
    q: ExprId,
    zero_point: Option<ExprId>,
    axis: i64,
    dt: DataType,
) -> Result<ExprId, OnnxError> {
    let qdt = im.dtype_of(node, q)?;
    if !matches!(qdt, DataType::I8 | DataType::U8) {
        return Err(node.err(format!("needs int8 or uint8 operands, found {qdt}")));
    }
    minus_zero_point(im, node, q, zero_point, axis, dt)
}

/// `q − zero_point` as `dt` (any integer `q`), the zero point along `axis`
/// when a vector.
fn minus_zero_point(
    im: &mut Importer,
    node: &Node,
    q: ExprId,
    zero_point: Option<ExprId>,
    axis: i64,
    dt: DataType,
) -> Result<ExprId, OnnxError> {
    let x = cast(im, node, q, dt)?;
    match zero_point {
        Some(z) => {
            let z = zero_point_as(im, node, z, q, axis, dt)?;
            im.op(node, "subtract", vec![x, z])
        }
        None => Ok(x),
    }
}

/// The zero point `z` as `dt`, along `axis` of `like` when a vector.
fn zero_point_as(
    im: &mut Importer,
    node: &Node,
    z: ExprId,
    like: ExprId,
    axis: i64,
    dt: DataType,
) -> Result<ExprId, OnnxError> {
    let z = along_axis(im, node, z, like, axis, "a zero point")?;
    cast(im, node, z, dt)
}

/// MatMulInteger: a, b, a_zero_point (per row), b_zero_point (per column); int32.
fn matmul_integer(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (a, b) = (im.input(node, 0)?, im.input(node, 1)?);
    let a = centered(im, node, a, im.optional_input(node, 2)?, -2, DataType::I32)?;
    let b = centered(im, node, b, im.optional_input(node, 3)?, -1, DataType::I32)?;
    one(matmul_of(im, node, a, b)?)
}

/// ConvInteger: x, w, x_zero_point, w_zero_point (per output channel); int32.
fn conv_integer(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, w) = (im.input(node, 0)?, im.input(node, 1)?);
    let x = centered(im, node, x, im.optional_input(node, 2)?, 1, DataType::I32)?;
    let w = centered(im, node, w, im.optional_input(node, 3)?, 0, DataType::I32)?;
    one(conv_of(im, node, x, w, None)?)
}
