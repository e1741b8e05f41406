//! ConvTranspose (1-D and 2-D) as a convolution: each spatial axis of the
//! input is spread out by the stride (zeros between elements), padded or
//! cropped so that a stride-1 convolution produces exactly the requested
//! output, in one constant-index `take` and mask per axis; the weight is
//! regrouped to `[M, C/group, kh, kw]` and flipped, which folds at import
//! when it is constant. Output size, `pads`, `output_padding`,
//! `output_shape` and `auto_pad` follow the ONNX specification (as ONNX
//! Runtime reads it).

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::nn::{lift, lower, spatial_rank};
use super::shape::reshape_to;
use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::{proto, OnnxError};

pub(super) fn register(t: &mut Table) {
    t.add(
        &["ConvTranspose"],
        conv_transpose,
        &["auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"],
    );
}

/// One spatial axis: input size, stride, kernel size, dilation, and the
/// output's first position and size within the full transposed result.
struct Axis {
    n: i64,
    s: i64,
    k: i64,
    d: i64,
    begin: i64,
    out: i64,
}

fn conv_transpose(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, w) = (im.input(node, 0)?, im.input(node, 1)?);
    let (rank, spatial) = spatial_rank(im, node, x)?;
    let dims = spatial.len();
    let xs = im.shape_of(node, x)?;
    let ws = im.shape_of(node, w)?;
    let group = node.int("group", 1)?;
    let c = xs[1] as i64;
    if ws.len() != rank || ws[0] as i64 != c {
        return Err(node.err(format!("weight {ws:?} does not fit input {xs:?} (needs [C, M/group, k…])")));
    }
    if group < 1 || c % group != 0 {
        return Err(node.err(format!("group={group} does not divide the {c} input channels")));
    }
    let kernel: Vec<i64> = ws[2..].iter().map(|&d| d as i64).collect();
    if let Some(k) = node.ints("kernel_shape")? {
        if k != kernel {
            return Err(node.err(format!("kernel_shape {k:?} differs from the weight's {kernel:?}")));
        }
    }
    let get = |name: &str, default: i64, len: usize| -> Result<Vec<i64>, OnnxError> {
        match node.ints(name)? {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => Ok(v),
            Some(v) => Err(node.err(format!("`{name}` has {} values, expected {len}", v.len()))),
        }
    };
    let strides = get("strides", 1, dims)?;
    let dilations = get("dilations", 1, dims)?;
    let out_pad = match node.ints("output_padding")? {
        None => vec![0; dims],
        // The reference accepts a doubled list; only the first half counts.
        Some(v) if v.len() == dims || v.len() == 2 * dims => v[..dims].to_vec(),
        Some(v) => return Err(node.err(format!("`output_padding` has {} values, expected {dims}", v.len()))),
    };
    if strides.iter().chain(&dilations).any(|&v| v < 1) || out_pad.iter().any(|&v| v < 0) {
        return Err(node.err("strides and dilations must be positive, output_padding not negative"));
    }
    let output_shape = match node.ints("output_shape")? {
        Some(v) if v.len() == dims => Some(v),
        Some(v) if v.len() == dims + 2 => Some(v[2..].to_vec()),
        Some(v) => return Err(node.err(format!("`output_shape` has {} values, expected {dims}", v.len()))),
        None => None,
    };
    let mode = node.string("auto_pad")?.unwrap_or_default();
    // The full transposed length; None when the attributes overflow it.
    let full = |i: usize| -> Option<i64> {
        let spread = strides[i].checked_mul(spatial[i] as i64 - 1)?;
        let reach = (kernel[i] - 1).checked_mul(dilations[i])?;
        spread.checked_add(out_pad[i])?.checked_add(reach)?.checked_add(1)
    };
    let too_big = || node.err("strides, dilations, pads and output_padding give sizes beyond any tensor");
    let mut axes = Vec::with_capacity(dims);
    for i in 0..dims {
        if !matches!(mode.as_str(), "" | "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER") {
            return Err(node.err(format!("auto_pad={mode} is not an ONNX padding mode")));
        }
        // An explicit output shape, or SAME padding without pads, decides the
        // padding: the excess split as auto_pad says (as ONNX Runtime computes
        // it; the spec ignores `pads` then).
        let same = matches!(mode.as_str(), "SAME_UPPER" | "SAME_LOWER") && node.ints("pads")?.is_none();
        let target = match &output_shape {
            Some(o) => Some(o[i]),
            None if same => Some(spatial[i] as i64 * strides[i]),
            None => None,
        };
        let (begin, out) = match target {
            Some(out) => {
                // A longer output than the full result is padded at the end only.
                let total = full(i).ok_or_else(too_big)?.checked_sub(out).ok_or_else(too_big)?.max(0);
                let half = total / 2;
                (if mode == "SAME_UPPER" { half } else { total - half }, out)
            }
            None => {
                let pads = if mode == "VALID" { vec![0; 2 * dims] } else { get("pads", 0, 2 * dims)? };
                let out = full(i).and_then(|f| f.checked_sub(pads[i])?.checked_sub(pads[i + dims]));
                (pads[i], out.ok_or_else(too_big)?)
            }
        };
        if out < 1 {
            return Err(node.err(format!("the output would have {out} elements along spatial axis {i}")));
        }
        axes.push(Axis { n: spatial[i] as i64, s: strides[i], k: kernel[i], d: dilations[i], begin, out });
    }
    let dt = im.dtype_of(node, x)?;
    let m = (ws[1] as i64).checked_mul(group).ok_or_else(too_big)?;
    let mut out_dims = vec![xs[0] as i64, m];
    out_dims.extend(axes.iter().map(|a| a.out));
    proto::checked_shape(&out_dims, dt).map_err(|e| node.err(e))?;
    // The spread input the convolution reads: out + (k − 1)·d per axis.
    let mut spread_dims = vec![xs[0] as i64, c];
    for a in &axes {
        let len = (a.k - 1).checked_mul(a.d).and_then(|r| r.checked_add(a.out)).ok_or_else(too_big)?;
        spread_dims.push(len);
    }
    proto::checked_shape(&spread_dims, dt).map_err(|e| node.err(e))?;

    // Work in 4-D: a 1-D transposed convolution is a 2-D one of height 1.
    let mut y = lift(im, node, x)?;
    let w4 = lift(im, node, w)?;
    if dims == 1 {
        axes.insert(0, Axis { n: 1, s: 1, k: 1, d: 1, begin: 0, out: 1 });
    }
    for (i, a) in axes.iter().enumerate() {
        y = spread_axis(im, node, y, 2 + i, a, dt)?;
    }
    let wt = regroup_and_flip(im, node, w4, group as usize)?;
    let conv = attrs(&[
        ("padding", AttrValue::Ints(vec![0; 4])),
        ("strides", AttrValue::Ints(vec![1, 1])),
        ("dilation", AttrValue::Ints(axes.iter().map(|a| a.d).collect())),
        ("groups", AttrValue::Int(group)),
        ("kernel_size", AttrValue::Ints(axes.iter().map(|a| a.k).collect())),
    ]);
    let mut y = im.call(node, "nn.conv2d", vec![y, wt], conv)?;
    if let Some(b) = im.optional_input(node, 2)? {
        y = im.op(node, "nn.bias_add", vec![y, b])?;
    }
    one(lower(im, node, y, rank)?)
}

/// Axis `axis` of `x` as the stride-spread input, padded (or cropped) so
/// that a stride-1 convolution with the flipped kernel gives output
/// positions `begin .. begin + out` of the full transposed result.
fn spread_axis(
    im: &mut Importer,
    node: &Node,
    x: ExprId,
    axis: usize,
    a: &Axis,
    dt: DataType,
) -> Result<ExprId, OnnxError> {
    let reach = (a.k - 1) * a.d;
    let left = reach - a.begin;
    let len = a.out + reach;
    let spread_len = (a.n - 1) * a.s + 1;
    let (mut idx, mut inside) = (Vec::with_capacity(len as usize), Vec::with_capacity(len as usize));
    for p in 0..len {
        let q = p - left;
        let hit = (0..spread_len).contains(&q) && q % a.s == 0;
        idx.push(if hit { (q / a.s) as f64 } else { 0.0 });
        inside.push(hit as u8 as f64);
    }
    if idx.len() == a.n as usize && inside.iter().all(|&v| v == 1.0) {
        return Ok(x); // stride 1 and no padding: the input itself
    }
    let rank = im.rank_of(node, x)?;
    let idx = im.constant(Tensor::from_f64(DataType::I64, vec![len as usize], &idx));
    let take = attrs(&[("axis", AttrValue::Int(axis as i64)), ("mode", AttrValue::Str("clip".into()))]);
    let taken = im.call(node, "take", vec![x, idx], take)?;
    let mut mshape = vec![1; rank];
    mshape[axis] = len as usize;
    let mask = im.constant(Tensor::from_f64(DataType::Bool, mshape, &inside));
    let zero = im.scalar(dt, 0.0);
    im.op(node, "where", vec![mask, taken, zero])
}

/// `[C, M/g, kh, kw]` → `[M, C/g, kh, kw]`, spatially flipped.
fn regroup_and_flip(im: &mut Importer, node: &Node, w: ExprId, g: usize) -> Result<ExprId, OnnxError> {
    let s = im.shape_of(node, w)?;
    let (c, mg, kh, kw) = (s[0], s[1], s[2], s[3]);
    let w = reshape_to(im, node, w, &[g, c / g, mg, kh, kw])?;
    let w = im.call(node, "transpose", vec![w], attrs(&[("axes", AttrValue::Ints(vec![0, 2, 1, 3, 4]))]))?;
    let mut w = reshape_to(im, node, w, &[g * mg, c / g, kh, kw])?;
    for (axis, k) in [(2, kh), (3, kw)] {
        if k > 1 {
            let rev: Vec<f64> = (0..k).rev().map(|v| v as f64).collect();
            let idx = im.constant(Tensor::from_f64(DataType::I64, vec![k], &rev));
            let a = attrs(&[("axis", AttrValue::Int(axis)), ("mode", AttrValue::Str("clip".into()))]);
            w = im.call(node, "take", vec![w, idx], a)?;
        }
    }
    Ok(w)
}
