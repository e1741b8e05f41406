//! Loss operators exporters leave in inference graphs:
//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, with class
//! weights, `ignore_index` and every reduction, as the ONNX reference
//! implementation computes them.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::math::cast_to;
use super::shape::reshape_to;
use super::Table;
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(&["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"], loss, &["ignore_index", "reduction"]);
}

fn loss(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, target) = (im.input(node, 0)?, im.input(node, 1)?);
    let weight = im.optional_input(node, 2)?;
    let dt = im.dtype_of(node, x)?;
    if !dt.is_float() {
        return Err(node.err(format!("needs a floating-point input, found {dt}")));
    }
    if !im.dtype_of(node, target)?.is_int() {
        return Err(node.err("the target must hold integer class indices"));
    }
    let xs = im.shape_of(node, x)?;
    let ts = im.shape_of(node, target)?;
    if xs.len() < 2 || ts.len() != xs.len() - 1 || ts[0] != xs[0] || ts[1..] != xs[2..] {
        return Err(node.err(format!("input {xs:?} and target {ts:?} must be [N, C, d…] and [N, d…]")));
    }
    let reduction = node.string("reduction")?.unwrap_or_else(|| "mean".into());
    if !matches!(reduction.as_str(), "none" | "sum" | "mean") {
        return Err(node.err(format!("reduction `{reduction}` is not one of none, sum, mean")));
    }
    let ignore = node.opt_int("ignore_index")?;
    let (n, c) = (xs[0], xs[1]);
    let d: usize = xs[2..].iter().product();

    let log_prob = if node.op() == "SoftmaxCrossEntropyLoss" { Some(log_softmax_axis1(im, node, x)?) } else { None };
    let input = log_prob.unwrap_or(x);

    // −input[i, target[i, d], d], picked by comparing with every class (an
    // out-of-range or ignored target picks nothing).
    let x3 = reshape_to(im, node, input, &[n, c, d])?;
    let t = cast_to(im, node, target, DataType::I64)?;
    let t2 = reshape_to(im, node, t, &[n, 1, d])?;
    let classes =
        im.constant(Tensor::from_f64(DataType::I64, vec![1, c, 1], &(0..c).map(|v| v as f64).collect::<Vec<_>>()));
    let hit = im.op(node, "equal", vec![t2, classes])?;
    let zero = im.scalar(dt, 0.0);
    let picked = im.op(node, "where", vec![hit, x3, zero])?;
    let sum1 = attrs(&[("axis", AttrValue::Ints(vec![1])), ("keepdims", AttrValue::Bool(false))]);
    let picked = im.call(node, "sum", vec![picked], sum1)?;
    let mut loss = im.op(node, "negative", vec![picked])?;
    let t_nd = reshape_to(im, node, t, &[n, d])?;

    // Per-element weights: the class weight, 0 at ignored targets.
    let kept = match ignore {
        Some(ii) => {
            let ii = im.scalar(DataType::I64, ii as f64);
            let is = im.op(node, "equal", vec![t_nd, ii])?;
            Some(im.op(node, "logical_not", vec![is])?)
        }
        None => None,
    };
    let gathered = match weight {
        Some(w) => {
            if im.shape_of(node, w)? != [c] {
                return Err(node.err(format!("weight must have shape [{c}]")));
            }
            let a = attrs(&[("axis", AttrValue::Int(0)), ("mode", AttrValue::Str("clip".into()))]);
            Some(im.call(node, "take", vec![w, t_nd], a)?)
        }
        None => None,
    };
    let weights = match (gathered, kept) {
        (Some(g), Some(k)) => Some(im.op(node, "where", vec![k, g, zero])?),
        (Some(g), None) => Some(g),
        (None, Some(k)) => Some(cast_to(im, node, k, dt)?),
        (None, None) => None,
    };
    if let Some(w) = weights {
        loss = im.op(node, "multiply", vec![loss, w])?;
    }
    let all = || attrs(&[("keepdims", AttrValue::Bool(false))]);
    let out = match reduction.as_str() {
        "none" => reshape_to(im, node, loss, &ts)?,
        "sum" => im.call(node, "sum", vec![loss], all())?,
        _ => match weights {
            // The mean over the weights given (ignored elements weigh nothing).
            Some(w) => {
                let num = im.call(node, "sum", vec![loss], all())?;
                let den = im.call(node, "sum", vec![w], all())?;
                im.op(node, "divide", vec![num, den])?
            }
            None => im.call(node, "mean", vec![loss], all())?,
        },
    };
    let mut outs = vec![out];
    if let Some(lp) = log_prob {
        outs.push(lp);
    }
    Ok(outs)
}

/// `log(softmax(x))` along axis 1, computed as the reference does.
fn log_softmax_axis1(im: &mut Importer, node: &Node, x: ExprId) -> Result<ExprId, OnnxError> {
    let keep = || attrs(&[("axis", AttrValue::Ints(vec![1])), ("keepdims", AttrValue::Bool(true))]);
    let m = im.call(node, "max", vec![x], keep())?;
    let c = im.op(node, "subtract", vec![x, m])?;
    let e = im.op(node, "exp", vec![c])?;
    let s = im.call(node, "sum", vec![e], keep())?;
    let l = im.op(node, "log", vec![s])?;
    im.op(node, "subtract", vec![c, l])
}
