//! QuantizeLinear and DequantizeLinear (per tensor and per axis; int8,
//! uint8, int16, uint16 and, for dequantization, int32) as float arithmetic:
//! `q = saturate(round_half_to_even(x / scale) + zero_point)` and
//! `x = (q − zero_point) · scale`. A QDQ model (ONNX Runtime's
//! `quantize_static`) then runs with each quantization step made explicit,
//! so its values are those of the integer kernels up to float rounding.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::DataType;

use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(&["QuantizeLinear"], quantize_linear, &["axis", "saturate", "block_size", "output_dtype"]);
    t.add(&["DequantizeLinear"], dequantize_linear, &["axis", "block_size"]);
}

/// The integer types kiln quantizes to.
fn quantized(dt: DataType) -> bool {
    matches!(dt, DataType::I8 | DataType::U8 | DataType::I16 | DataType::U16)
}

/// `scale` (or a zero point) shaped to broadcast against `x`: a scalar (or
/// one-element vector) as it is, a vector along `axis` as `[C, 1, …, 1]`.
fn along_axis(im: &mut Importer, node: &Node, v: ExprId, x: ExprId, what: &str) -> Result<ExprId, OnnxError> {
    if node.int("block_size", 0)? != 0 {
        return Err(node.err("blocked quantization (block_size) is not supported"));
    }
    let shape = im.shape_of(node, v)?;
    let numel: usize = shape.iter().product();
    if shape.is_empty() || (shape.len() == 1 && numel == 1) {
        return Ok(v);
    }
    let xs = im.shape_of(node, x)?;
    let rank = xs.len() as i64;
    let axis = node.int("axis", 1)?;
    let axis = if axis < 0 { axis + rank } else { axis };
    if shape.len() != 1 || axis < 0 || axis >= rank || xs[axis as usize] != numel {
        return Err(node.err(format!(
            "{what} of shape {shape:?} is neither a scalar nor a vector along axis {} of the input {xs:?}",
            node.int("axis", 1)?
        )));
    }
    let trailing = rank as usize - axis as usize - 1;
    if trailing == 0 {
        return Ok(v);
    }
    let a = attrs(&[("axis", AttrValue::Int(1)), ("num_newaxis", AttrValue::Int(trailing as i64))]);
    im.call(node, "expand_dims", vec![v], a)
}

fn float_scale(im: &mut Importer, node: &Node, scale: ExprId) -> Result<DataType, OnnxError> {
    let dt = im.dtype_of(node, scale)?;
    if !dt.is_float() {
        return Err(node.err(format!("the scale must be a float tensor, found {dt}")));
    }
    Ok(dt)
}

fn quantize_linear(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, scale) = (im.input(node, 0)?, im.input(node, 1)?);
    let zero_point = im.optional_input(node, 2)?;
    let dt = float_scale(im, node, scale)?;
    let xdt = im.dtype_of(node, x)?;
    if !xdt.is_float() {
        return Err(node.err(format!("quantizes a float tensor, found {xdt}")));
    }
    let out = match zero_point {
        Some(z) => im.dtype_of(node, z)?,
        None => match node.opt_int("output_dtype")? {
            Some(code) if code != 0 => crate::frontend::onnx::proto::dtype(code as i32)
                .ok_or_else(|| node.err(format!("output_dtype {code} is not supported")))?,
            _ => DataType::U8,
        },
    };
    if !quantized(out) {
        return Err(node.err(format!("quantization to {out} is not supported (int8, uint8, int16, uint16)")));
    }
    let x = if xdt == dt { x } else { im.call(node, "cast", vec![x], attrs(&[("dtype", AttrValue::DType(dt))]))? };
    let scale = along_axis(im, node, scale, x, "the scale")?;
    let scaled = im.op(node, "divide", vec![x, scale])?;
    let mut q = im.op(node, "round", vec![scaled])?;
    if let Some(z) = zero_point {
        let z = along_axis(im, node, z, x, "the zero point")?;
        let z = im.call(node, "cast", vec![z], attrs(&[("dtype", AttrValue::DType(dt))]))?;
        q = im.op(node, "add", vec![q, z])?;
    }
    let (lo, hi) = DataType::value_range(out);
    let q =
        im.call(node, "clip", vec![q], attrs(&[("a_min", AttrValue::Float(lo)), ("a_max", AttrValue::Float(hi))]))?;
    one(im.call(node, "cast", vec![q], attrs(&[("dtype", AttrValue::DType(out))]))?)
}

fn dequantize_linear(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (q, scale) = (im.input(node, 0)?, im.input(node, 1)?);
    let zero_point = im.optional_input(node, 2)?;
    let dt = float_scale(im, node, scale)?;
    let qdt = im.dtype_of(node, q)?;
    if !quantized(qdt) && qdt != DataType::I32 {
        return Err(node.err(format!("dequantization of {qdt} is not supported (int8, uint8, int16, uint16, int32)")));
    }
    let mut x = im.call(node, "cast", vec![q], attrs(&[("dtype", AttrValue::DType(dt))]))?;
    if let Some(z) = zero_point {
        let z = along_axis(im, node, z, q, "the zero point")?;
        let z = im.call(node, "cast", vec![z], attrs(&[("dtype", AttrValue::DType(dt))]))?;
        x = im.op(node, "subtract", vec![x, z])?;
    }
    let scale = along_axis(im, node, scale, q, "the scale")?;
    one(im.op(node, "multiply", vec![x, scale])?)
}
