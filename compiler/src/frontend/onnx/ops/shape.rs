//! Tensor and shape operators. Shapes are static after import, so the
//! results of `Shape`, `Size`, `ConstantOfShape`, `Range` and everything
//! computed from constants are constants, and shape-changing operators get
//! their final shapes here (no 0/-1 conventions reach Relay).

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, ints_of, Importer, Node};
use crate::frontend::onnx::proto;
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(&["Reshape"], reshape, &["allowzero"]);
    t.add(&["Flatten"], flatten, &["axis"]);
    t.add(&["Squeeze", "Unsqueeze"], squeeze, &["axes"]);
    t.add(&["Transpose"], transpose, &["perm"]);
    t.add(&["Concat"], concat, &["axis"]);
    t.add(&["Shape"], shape, &["start", "end"]);
    t.add(&["Size"], size, &[]);
    t.add(&["Slice"], slice, &["starts", "ends", "axes"]);
    t.add(&["Split"], split, &["axis", "split", "num_outputs"]);
    t.add(&["Expand"], expand, &[]);
    t.add(&["Gather"], gather, &["axis"]);
    t.add(
        &["Constant"],
        constant,
        &[
            "value",
            "value_float",
            "value_floats",
            "value_int",
            "value_ints",
            "sparse_value",
            "value_string",
            "value_strings",
        ],
    );
    t.add(&["ConstantOfShape"], constant_of_shape, &["value"]);
    t.add(&["Range"], range, &[]);
    t.add(&["Tile"], tile, &[]);
    t.add(&["Trilu"], trilu, &["upper"]);
    t.add(&["EyeLike"], eye_like, &["dtype", "k"]);
    t.add(&["DepthToSpace", "SpaceToDepth"], depth_space, &["blocksize", "mode"]);
    t.add(&["Pad"], pad, &["mode", "pads", "value"]);
    t.add(&["GatherElements"], gather_elements, &["axis"]);
    t.add(&["OneHot"], one_hot, &["axis"]);
}

pub(crate) fn reshape_to(im: &mut Importer, node: &Node, x: ExprId, shape: &[usize]) -> Result<ExprId, OnnxError> {
    if im.shape_of(node, x)? == shape {
        return Ok(x);
    }
    let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    im.call(node, "reshape", vec![x], attrs(&[("newshape", AttrValue::Ints(s))]))
}

/// The permutation that undoes `perm` (`transpose` back).
pub(super) fn inverse_permutation(perm: &[i64]) -> Vec<i64> {
    let mut inverse = vec![0i64; perm.len()];
    for (k, &p) in perm.iter().enumerate() {
        inverse[p as usize] = k as i64;
    }
    inverse
}

pub(super) fn norm_axis(node: &Node, a: i64, rank: usize) -> Result<usize, OnnxError> {
    let n = if a < 0 { a + rank as i64 } else { a };
    usize::try_from(n)
        .ok()
        .filter(|&n| n < rank)
        .ok_or_else(|| node.err(format!("axis {a} is out of range for rank {rank}")))
}

fn reshape(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let from = im.shape_of(node, x)?;
    let spec = im.const_ints(node, 1, "the new shape")?.ok_or_else(|| node.err("missing input 1 (shape)"))?;
    let allow_zero = node.int("allowzero", 0)? != 0;
    let total: usize = from.iter().product();
    let mut shape = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (k, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(k);
                shape.push(1);
            }
            0 if !allow_zero => shape.push(
                *from
                    .get(k)
                    .ok_or_else(|| node.err(format!("0 at position {k} copies a dimension the input does not have")))?,
            ),
            d if d >= 0 => shape.push(d as usize),
            _ => return Err(node.err(format!("invalid shape {spec:?}"))),
        }
    }
    let known =
        shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| node.err("the shape overflows"))?;
    if let Some(k) = infer {
        if known == 0 || total % known != 0 {
            return Err(node.err(format!("cannot reshape {from:?} to {spec:?}")));
        }
        shape[k] = total / known;
    } else if known != total {
        return Err(node.err(format!("cannot reshape {from:?} ({total} elements) to {spec:?}")));
    }
    one(reshape_to(im, node, x, &shape)?)
}

fn flatten(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    let axis = node.int("axis", 1)?;
    let a = if axis < 0 { axis + s.len() as i64 } else { axis };
    if !(0..=s.len() as i64).contains(&a) {
        return Err(node.err(format!("axis {axis} is out of range for rank {}", s.len())));
    }
    let a = a as usize;
    let shape = [s[..a].iter().product(), s[a..].iter().product()];
    one(reshape_to(im, node, x, &shape)?)
}

fn squeeze(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    let axes = match node.ints("axes")? {
        Some(a) => Some(a),
        None => im.const_ints(node, 1, "the axes")?,
    };
    let shape: Vec<usize> = if node.op() == "Squeeze" {
        match axes {
            None => s.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let axes: Vec<usize> = axes.iter().map(|&a| norm_axis(node, a, s.len())).collect::<Result<_, _>>()?;
                if let Some(&a) = axes.iter().find(|&&a| s[a] != 1) {
                    return Err(node.err(format!("axis {a} has size {}, not 1", s[a])));
                }
                s.iter().enumerate().filter(|(k, _)| !axes.contains(k)).map(|(_, &d)| d).collect()
            }
        }
    } else {
        let axes = axes.ok_or_else(|| node.err("missing axes"))?;
        let rank = s.len() + axes.len();
        let mut axes: Vec<usize> = axes.iter().map(|&a| norm_axis(node, a, rank)).collect::<Result<_, _>>()?;
        axes.sort_unstable();
        if axes.windows(2).any(|w| w[0] == w[1]) {
            return Err(node.err("repeated axes"));
        }
        let mut src = s.iter();
        (0..rank).map(|k| if axes.contains(&k) { 1 } else { *src.next().unwrap_or(&1) }).collect()
    };
    one(reshape_to(im, node, x, &shape)?)
}

fn transpose(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let a = match node.ints("perm")? {
        Some(p) => attrs(&[("axes", AttrValue::Ints(p))]),
        None => kiln_ir::attrs::Attrs::new(),
    };
    one(im.call(node, "transpose", vec![x], a)?)
}

fn concat(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let xs = im.inputs(node)?;
    let axis = node.opt_int("axis")?.ok_or_else(|| node.err("missing attribute `axis`"))?;
    if xs.len() == 1 {
        return one(xs[0]);
    }
    let t = im.tuple(node, xs)?;
    one(im.call(node, "concatenate", vec![t], attrs(&[("axis", AttrValue::Int(axis))]))?)
}

/// `Shape` with `start`/`end` (opset 15), clamped to the rank as the spec says.
fn shape(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    let r = s.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(node.int("start", 0)?);
    let end = clamp(node.int("end", r)?);
    let dims: Vec<i64> = s[start..end.max(start)].iter().map(|&d| d as i64).collect();
    one(im.constant(Tensor::from_i64(vec![dims.len()], &dims)))
}

fn size(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let n: usize = im.shape_of(node, x)?.iter().product();
    one(im.constant(Tensor::from_i64(vec![], &[n as i64])))
}

fn slice(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let rank = im.rank_of(node, x)?;
    let (starts, ends, axes, steps) = if im.opset < 10 {
        let starts = node.ints("starts")?.ok_or_else(|| node.err("missing attribute `starts`"))?;
        let ends = node.ints("ends")?.ok_or_else(|| node.err("missing attribute `ends`"))?;
        (starts, ends, node.ints("axes")?, None)
    } else {
        let starts = im.const_ints(node, 1, "starts")?.ok_or_else(|| node.err("missing input 1 (starts)"))?;
        let ends = im.const_ints(node, 2, "ends")?.ok_or_else(|| node.err("missing input 2 (ends)"))?;
        (starts, ends, im.const_ints(node, 3, "axes")?, im.const_ints(node, 4, "steps")?)
    };
    // Without axes, `starts` covers the leading axes, which must exist.
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let axes: Vec<i64> = axes.iter().map(|&v| norm_axis(node, v, rank).map(|v| v as i64)).collect::<Result<_, _>>()?;
    let mut seen = vec![false; rank];
    for &a in &axes {
        if std::mem::replace(&mut seen[a as usize], true) {
            return Err(node.err(format!("axis {a} is sliced twice")));
        }
    }
    if starts.len() != axes.len() || ends.len() != axes.len() || steps.as_ref().is_some_and(|s| s.len() != axes.len()) {
        return Err(node.err("starts, ends, axes and steps must have the same length"));
    }
    if steps.as_ref().is_some_and(|s| s.contains(&0)) {
        return Err(node.err("a step of 0"));
    }
    let mut a =
        vec![("begin", AttrValue::Ints(starts)), ("end", AttrValue::Ints(ends)), ("axes", AttrValue::Ints(axes))];
    if let Some(st) = steps {
        a.push(("strides", AttrValue::Ints(st)));
    }
    one(im.call(node, "strided_slice", vec![x], attrs(&a))?)
}

fn split(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    let axis = norm_axis(node, node.int("axis", 0)?, s.len())?;
    let dim = s[axis];
    let n_out = node.n.output.len();
    let sizes: Vec<usize> = match (node.ints("split")?, im.const_ints(node, 1, "the split sizes")?) {
        (Some(v), _) | (None, Some(v)) => {
            let sum = v.iter().try_fold(0i64, |a, &d| a.checked_add(d));
            if v.iter().any(|&d| d < 0) || sum != Some(dim as i64) {
                return Err(node.err(format!("split sizes {v:?} do not add up to the axis size {dim}")));
            }
            v.iter().map(|&d| d as usize).collect()
        }
        (None, None) => {
            let parts = match node.opt_int("num_outputs")? {
                Some(k) if k as usize != n_out => {
                    return Err(node.err(format!("num_outputs={k} but the node has {n_out} outputs")))
                }
                Some(k) => k as usize,
                None => n_out,
            };
            if parts == 0 {
                return Err(node.err("no outputs"));
            }
            if node.opt_int("num_outputs")?.is_none() && dim % parts != 0 {
                return Err(node.err(format!("axis size {dim} does not split evenly into {parts} outputs")));
            }
            // opset 18: chunks of ⌈dim/parts⌉, the last one smaller.
            let chunk = dim.div_ceil(parts);
            (0..parts).map(|k| chunk.min(dim.saturating_sub(k * chunk))).collect()
        }
    };
    if sizes.len() != n_out {
        return Err(node.err(format!("{} split sizes for {n_out} outputs", sizes.len())));
    }
    let mut outs = Vec::with_capacity(n_out);
    let mut begin = 0i64;
    for &len in &sizes {
        let a = attrs(&[
            ("begin", AttrValue::Ints(vec![begin])),
            ("end", AttrValue::Ints(vec![begin + len as i64])),
            ("axes", AttrValue::Ints(vec![axis as i64])),
        ]);
        outs.push(im.call(node, "strided_slice", vec![x], a)?);
        begin += len as i64;
    }
    Ok(outs)
}

fn expand(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let target = im.const_ints(node, 1, "the shape")?.ok_or_else(|| node.err("missing input 1 (shape)"))?;
    if target.iter().any(|&d| d < 0) {
        return Err(node.err(format!("negative dimension in {target:?}")));
    }
    let own = im.shape_of(node, x)?;
    let target: Vec<usize> = target.iter().map(|&d| d as usize).collect();
    // ONNX broadcasts both ways: the result has the broadcast of both shapes.
    let full = kiln_ir::relay::op::broadcast_shapes(&own, &target).map_err(|m| node.err(m))?;
    let dt = im.dtype_of(node, x)?;
    let dims: Vec<i64> = full.iter().map(|&d| d as i64).collect();
    proto::checked_shape(&dims, dt).map_err(|m| node.err(m))?;
    if full == own {
        return one(x);
    }
    one(im.call(node, "broadcast_to", vec![x], attrs(&[("shape", AttrValue::Ints(dims))]))?)
}

/// Run-time indices into axes of `bounds` elements (one for all, or one per
/// position on the last axis), as int64 checked when the model runs (the
/// `check_index` operator): negative ones count from the end, and one out of
/// range fails the run with an error, as in ONNX Runtime — never a wrapped
/// or clipped read.
pub(crate) fn checked_indices(
    im: &mut Importer,
    node: &Node,
    indices: ExprId,
    bounds: &[usize],
) -> Result<ExprId, OnnxError> {
    if let Some(axis) = bounds.iter().position(|&n| n == 0) {
        return Err(node.err(format!("indexes axis {axis} of size 0")));
    }
    let i = crate::frontend::onnx::ops::math::cast_to(im, node, indices, DataType::I64)?;
    let bounds = bounds.iter().map(|&n| n as i64).collect();
    im.call(node, "check_index", vec![i], attrs(&[("bounds", AttrValue::Ints(bounds))]))
}

/// `Gather`: constant indices are checked against the axis (negative ones
/// count from the end) and normalized when the model is built; run-time ones
/// when it runs.
fn gather(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (d, i) = (im.input(node, 0)?, im.input(node, 1)?);
    let s = im.shape_of(node, d)?;
    let axis = norm_axis(node, node.int("axis", 0)?, s.len())?;
    let n = s[axis] as i64;
    let checked = match im.constant_value(i).cloned() {
        // Constant indices: checked and made non-negative, so nothing wraps.
        Some(t) => {
            let idx = ints_of(&t);
            if let Some(&bad) = idx.iter().find(|&&v| v < -n || v >= n) {
                return Err(node.err(format!("index {bad} is out of range for axis {axis} of size {n}")));
            }
            let fixed: Vec<f64> = idx.iter().map(|&v| if v < 0 { v + n } else { v } as f64).collect();
            let c = im.constant(Tensor::from_f64(t.dtype(), t.shape().to_vec(), &fixed));
            return gather_with(im, node, d, c, axis);
        }
        None => checked_indices(im, node, i, &[n as usize])?,
    };
    gather_with(im, node, d, checked, axis)
}

/// `take` along `axis` at indices already known to be in range.
fn gather_with(im: &mut Importer, node: &Node, d: ExprId, i: ExprId, axis: usize) -> Result<Vec<ExprId>, OnnxError> {
    let a = attrs(&[("axis", AttrValue::Int(axis as i64)), ("mode", AttrValue::Str("clip".into()))]);
    one(im.call(node, "take", vec![d, i], a)?)
}

fn constant(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let given: Vec<&str> = node.n.attribute.iter().map(|a| a.name()).collect();
    if given.len() != 1 {
        return Err(node.err(format!("needs exactly one value attribute, found {given:?}")));
    }
    let t = match given[0] {
        "value" => {
            let t = node.attr("value").and_then(|a| a.t.as_ref()).ok_or_else(|| node.err("`value` holds no tensor"))?;
            proto::tensor(t).map_err(|m| node.err(m))?
        }
        "value_float" => Tensor::scalar(DataType::F32, node.float("value_float", 0.0)? as f64),
        "value_int" => Tensor::from_i64(vec![], &[node.int("value_int", 0)?]),
        "value_floats" => {
            let v: Vec<f64> = node.floats("value_floats")?.unwrap_or_default().iter().map(|&f| f as f64).collect();
            Tensor::from_f64(DataType::F32, vec![v.len()], &v)
        }
        "value_ints" => {
            let v = node.ints("value_ints")?.unwrap_or_default();
            Tensor::from_i64(vec![v.len()], &v)
        }
        other => return Err(node.err(format!("a `{other}` constant is not supported"))),
    };
    one(im.constant(t))
}

fn constant_of_shape(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let dims = im.const_ints(node, 0, "the shape")?.ok_or_else(|| node.err("missing input 0 (shape)"))?;
    let value = match node.attr("value").and_then(|a| a.t.as_ref()) {
        Some(t) => proto::tensor(t).map_err(|m| node.err(m))?,
        None => Tensor::scalar(DataType::F32, 0.0),
    };
    if value.numel() != 1 {
        return Err(node.err("`value` must hold one element"));
    }
    let shape = proto::checked_shape(&dims, value.dtype()).map_err(|m| node.err(m))?;
    let scalar = im.constant(Tensor::scalar(value.dtype(), value.get_f64(0)));
    if shape.is_empty() {
        return one(scalar);
    }
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    one(im.call(node, "broadcast_to", vec![scalar], attrs(&[("shape", AttrValue::Ints(dims))]))?)
}

/// `Range(start, limit, delta)` of constant scalars.
fn range(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let get = |im: &Importer, i: usize, what: &str| -> Result<Tensor, OnnxError> {
        let t = im.const_input(node, i, what)?.ok_or_else(|| node.err(format!("missing {what}")))?;
        if t.numel() != 1 {
            return Err(node.err(format!("{what} must be a scalar")));
        }
        Ok(t)
    };
    let (start, limit, delta) = (get(im, 0, "start")?, get(im, 1, "limit")?, get(im, 2, "delta")?);
    if limit.dtype() != start.dtype() || delta.dtype() != start.dtype() {
        return Err(node.err("start, limit and delta must have one element type"));
    }
    let (s, l, d) = (start.get_f64(0), limit.get_f64(0), delta.get_f64(0));
    if d == 0.0 || !d.is_finite() || !s.is_finite() || !l.is_finite() {
        return Err(node.err("delta must be finite and not zero"));
    }
    let n = ((l - s) / d).ceil().max(0.0);
    let dims = [n as i64];
    proto::checked_shape(&dims, start.dtype()).map_err(|m| node.err(m))?;
    let n = n as usize;
    let values: Vec<f64> = if start.dtype().is_float() {
        (0..n).map(|k| s + k as f64 * d).collect()
    } else {
        let at = |k: usize| (k as i64).checked_mul(d as i64).and_then(|v| v.checked_add(s as i64));
        (0..n).map(|k| at(k).map(|v| v as f64)).collect::<Option<_>>().ok_or_else(|| node.err("the range overflows"))?
    };
    one(im.constant(Tensor::from_f64(start.dtype(), vec![n], &values)))
}

/// `Tile` as reshape → broadcast → reshape: `[a, b]` × `[r, s]` reads
/// `[1, a, 1, b]` broadcast to `[r, a, s, b]`.
fn tile(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    let reps = im.const_ints(node, 1, "repeats")?.ok_or_else(|| node.err("missing input 1 (repeats)"))?;
    if reps.len() != s.len() || reps.iter().any(|&r| r < 0) {
        return Err(node.err(format!("repeats {reps:?} do not fit an input of rank {}", s.len())));
    }
    let lifted: Vec<usize> = s.iter().flat_map(|&d| [1, d]).collect();
    let wide: Vec<i64> = s.iter().zip(&reps).flat_map(|(&d, &r)| [r, d as i64]).collect();
    let out: Vec<usize> = s
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| d.checked_mul(r as usize).ok_or_else(|| node.err(format!("repeats {reps:?} overflow"))))
        .collect::<Result<_, _>>()?;
    let dt = im.dtype_of(node, x)?;
    let dims: Vec<i64> = out.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect();
    proto::checked_shape(&dims, dt).map_err(|m| node.err(m))?;
    let y = reshape_to(im, node, x, &lifted)?;
    let y = im.call(node, "broadcast_to", vec![y], attrs(&[("shape", AttrValue::Ints(wide))]))?;
    one(reshape_to(im, node, y, &out)?)
}

/// Upper or lower triangle of the last two axes: a constant mask and `where`.
fn trilu(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    if s.len() < 2 {
        return Err(node.err("needs an input of rank 2 or more"));
    }
    let k = match im.const_input(node, 1, "k")? {
        Some(t) if t.numel() == 1 => t.get_f64(0) as i64,
        Some(_) => return Err(node.err("k must be a scalar")),
        None => 0,
    };
    let upper = node.int("upper", 1)? != 0;
    let (rows, cols) = (s[s.len() - 2], s[s.len() - 1]);
    let mask: Vec<f64> = (0..rows * cols)
        .map(|p| {
            let (i, j) = ((p / cols) as i64, (p % cols) as i64);
            (if upper { j - i >= k } else { j - i <= k }) as u8 as f64
        })
        .collect();
    let mask = im.constant(Tensor::from_f64(DataType::Bool, vec![rows, cols], &mask));
    let dt = im.dtype_of(node, x)?;
    let zero = im.scalar(dt, 0.0);
    one(im.op(node, "where", vec![mask, x, zero])?)
}

fn eye_like(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    if s.len() != 2 {
        return Err(node.err("needs a 2-D input"));
    }
    let dt = match node.opt_int("dtype")? {
        Some(c) => proto::dtype(c as i32)
            .ok_or_else(|| node.err(format!("dtype {} is not supported", proto::onnx_type_name(c as i32))))?,
        None => im.dtype_of(node, x)?,
    };
    let k = node.int("k", 0)?;
    let v: Vec<f64> = (0..s[0] * s[1]).map(|p| ((p % s[1]) as i64 - (p / s[1]) as i64 == k) as u8 as f64).collect();
    one(im.constant(Tensor::from_f64(dt, s, &v)))
}

/// DepthToSpace (DCR or CRD) and SpaceToDepth as reshape → transpose → reshape.
fn depth_space(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let s = im.shape_of(node, x)?;
    let b = node.opt_int("blocksize")?.ok_or_else(|| node.err("missing attribute `blocksize`"))?;
    if s.len() != 4 || b < 1 {
        return Err(node.err("needs a 4-D input and a positive blocksize"));
    }
    let b = b as usize;
    let [n, c, h, w] = [s[0], s[1], s[2], s[3]];
    let bb = b.checked_mul(b).filter(|&bb| c.checked_mul(bb).is_some());
    let bb = bb.ok_or_else(|| node.err(format!("blocksize {b} is too large")))?;
    let (tmp, perm, out): (Vec<usize>, Vec<i64>, Vec<usize>) = if node.op() == "DepthToSpace" {
        if c % bb != 0 {
            return Err(node.err(format!("{c} channels are not a multiple of blocksize² = {bb}")));
        }
        let c2 = c / bb;
        match node.string("mode")?.as_deref().unwrap_or("DCR") {
            "DCR" => (vec![n, b, b, c2, h, w], vec![0, 3, 4, 1, 5, 2], vec![n, c2, h * b, w * b]),
            "CRD" => (vec![n, c2, b, b, h, w], vec![0, 1, 4, 2, 5, 3], vec![n, c2, h * b, w * b]),
            other => return Err(node.err(format!("mode={other} is not a DepthToSpace mode"))),
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(node.err(format!("spatial size {h}×{w} is not a multiple of blocksize {b}")));
        }
        let tmp = vec![n, c, h / b, b, w / b, b];
        let out = vec![n, c * bb, h / b, w / b];
        match node.string("mode")?.as_deref().unwrap_or("DCR") {
            // Output channel (by·b + bx)·C + c.
            "DCR" => (tmp, vec![0, 3, 5, 1, 2, 4], out),
            // Output channel c·b² + by·b + bx.
            "CRD" => (tmp, vec![0, 1, 3, 5, 2, 4], out),
            other => return Err(node.err(format!("mode={other} is not a SpaceToDepth mode"))),
        }
    };
    let y = reshape_to(im, node, x, &tmp)?;
    let y = im.call(node, "transpose", vec![y], attrs(&[("axes", AttrValue::Ints(perm))]))?;
    one(reshape_to(im, node, y, &out)?)
}

/// `Pad` in every mode, one axis at a time, as a gather with constant
/// indices (negative pads crop); constant mode then fills the padded rows.
fn pad(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let shape = im.shape_of(node, x)?;
    let rank = shape.len();
    let dt = im.dtype_of(node, x)?;
    let mode = node.string("mode")?.unwrap_or_else(|| "constant".into());
    let (pads, value) = if im.opset < 11 {
        let pads = node.ints("pads")?.ok_or_else(|| node.err("missing attribute `pads`"))?;
        (pads, node.float("value", 0.0)? as f64)
    } else {
        let pads = im.const_ints(node, 1, "the pads")?.ok_or_else(|| node.err("missing input 1 (pads)"))?;
        let value = match im.const_input(node, 2, "the constant value")? {
            Some(t) if t.numel() == 1 => t.get_f64(0),
            Some(_) => return Err(node.err("the constant value must be a scalar")),
            None => 0.0,
        };
        (pads, value)
    };
    let axes: Vec<usize> = match im.const_ints(node, 3, "the axes")? {
        Some(a) => a.iter().map(|&v| norm_axis(node, v, rank)).collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(node.err(format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    if !matches!(mode.as_str(), "constant" | "reflect" | "edge" | "wrap") {
        return Err(node.err(format!("mode={mode} is not a Pad mode")));
    }
    let mut y = x;
    let mut cur = shape.clone();
    for (k, &axis) in axes.iter().enumerate() {
        let (b, e) = (pads[k], pads[k + axes.len()]);
        if b == 0 && e == 0 {
            continue;
        }
        let n = shape[axis] as i64;
        let len = n.checked_add(b).and_then(|v| v.checked_add(e)).filter(|&v| v >= 0);
        let len = len.ok_or_else(|| node.err(format!("pads ({b}, {e}) crop axis {axis} of size {n} below zero")))?;
        let mut dims: Vec<i64> = cur.iter().map(|&d| d as i64).collect();
        dims[axis] = len;
        proto::checked_shape(&dims, dt).map_err(|m| node.err(m))?;
        if n == 0 && mode != "constant" {
            return Err(node.err(format!("{mode} padding of an empty axis")));
        }
        let src: Vec<i64> = (0..len).map(|o| o - b).collect();
        let idx: Vec<f64> = src
            .iter()
            .map(|&s| {
                let i = match mode.as_str() {
                    "reflect" if n > 1 => {
                        let p = 2 * (n - 1);
                        let m = s.rem_euclid(p);
                        if m < n {
                            m
                        } else {
                            p - m
                        }
                    }
                    "wrap" => s.rem_euclid(n.max(1)),
                    _ => s.clamp(0, (n - 1).max(0)),
                };
                i as f64
            })
            .collect();
        let taken = if n == 0 {
            let mut d = cur.clone();
            d[axis] = len as usize;
            im.constant(Tensor::full(dt, d, value))
        } else {
            let idx = im.constant(Tensor::from_f64(DataType::I64, vec![len as usize], &idx));
            let a = attrs(&[("axis", AttrValue::Int(axis as i64)), ("mode", AttrValue::Str("clip".into()))]);
            im.call(node, "take", vec![y, idx], a)?
        };
        y = if mode == "constant" && n > 0 {
            let mut mshape = vec![1; rank];
            mshape[axis] = len as usize;
            let inside: Vec<f64> = src.iter().map(|&s| (0..n).contains(&s) as u8 as f64).collect();
            let mask = im.constant(Tensor::from_f64(DataType::Bool, mshape, &inside));
            let v = im.scalar(dt, value);
            im.op(node, "where", vec![mask, taken, v])?
        } else {
            taken
        };
        cur[axis] = len as usize;
    }
    one(y)
}

/// `GatherElements` as a gather from the flattened data at flat indices
/// `index·stride(axis) + (the other coordinates' offset)`, the offsets a constant.
fn gather_elements(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (d, i) = (im.input(node, 0)?, im.input(node, 1)?);
    let ds = im.shape_of(node, d)?;
    let is = im.shape_of(node, i)?;
    let rank = ds.len();
    if is.len() != rank {
        return Err(node.err(format!("indices of rank {} for data of rank {rank}", is.len())));
    }
    let axis = norm_axis(node, node.int("axis", 0)?, rank)?;
    if is.iter().zip(&ds).enumerate().any(|(k, (&a, &b))| k != axis && a > b) {
        return Err(node.err(format!("indices {is:?} exceed data {ds:?} off the axis")));
    }
    let n = ds[axis] as i64;
    let strides = kiln_ir::tensor::strides(&ds);
    let count: usize = is.iter().product();
    let istrides = kiln_ir::tensor::strides(&is);
    let offsets: Vec<f64> = (0..count)
        .map(|p| {
            (0..rank).filter(|&k| k != axis).map(|k| (p / istrides[k] % is[k].max(1)) * strides[k]).sum::<usize>()
                as f64
        })
        .collect();
    let total: usize = ds.iter().product();
    let flat_data = reshape_to(im, node, d, &[total])?;
    if let Some(t) = im.constant_value(i).cloned() {
        let idx = ints_of(&t);
        if let Some(&bad) = idx.iter().find(|&&v| v < -n || v >= n) {
            return Err(node.err(format!("index {bad} is out of range for axis {axis} of size {n}")));
        }
        let flat: Vec<f64> = idx
            .iter()
            .zip(&offsets)
            .map(|(&v, &o)| (if v < 0 { v + n } else { v }) as f64 * strides[axis] as f64 + o)
            .collect();
        let flat = im.constant(Tensor::from_f64(DataType::I64, is.clone(), &flat));
        let a = attrs(&[("mode", AttrValue::Str("clip".into()))]);
        return one(im.call(node, "take", vec![flat_data, flat], a)?);
    }
    // Run-time indices: checked on their axis, then flattened.
    let fixed = checked_indices(im, node, i, &[n as usize])?;
    let st = im.scalar(DataType::I64, strides[axis] as f64);
    let scaled = im.op(node, "multiply", vec![fixed, st])?;
    let off = im.constant(Tensor::from_f64(DataType::I64, is.clone(), &offsets));
    let flat = im.op(node, "add", vec![scaled, off])?;
    let a = attrs(&[("mode", AttrValue::Str("clip".into()))]);
    one(im.call(node, "take", vec![flat_data, flat], a)?)
}

/// `OneHot(indices, depth, values)`: `values[1]` where the position along the
/// new axis equals the index (negative indices count from the end), else
/// `values[0]`; an index outside `[-depth, depth)` matches nothing.
fn one_hot(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (indices, values) = (im.input(node, 0)?, im.input(node, 2)?);
    let depth = im.const_input(node, 1, "the depth")?.ok_or_else(|| node.err("missing input 1 (depth)"))?;
    if depth.numel() != 1 {
        return Err(node.err("the depth must be a single value"));
    }
    let depth = depth.get_f64(0);
    if !(1.0..=(1u64 << 31) as f64).contains(&depth) {
        return Err(node.err(format!("depth {depth} is not a positive size")));
    }
    let depth = depth as usize;
    if im.shape_of(node, values)?.iter().product::<usize>() != 2 {
        return Err(node.err("values must hold two elements: [off, on]"));
    }
    let mut out_shape = im.shape_of(node, indices)?;
    let axis = norm_axis(node, node.int("axis", -1)?, out_shape.len() + 1)?;
    out_shape.insert(axis, depth);
    let dt = im.dtype_of(node, values)?;
    let dims: Vec<i64> = out_shape.iter().map(|&d| d as i64).collect();
    proto::checked_shape(&dims, dt).map_err(|m| node.err(m))?;
    // Indices may be of any numeric type: integral values, as int64.
    let idx = crate::frontend::onnx::ops::math::cast_to(im, node, indices, DataType::I64)?;
    let zero = im.scalar(DataType::I64, 0.0);
    let d = im.scalar(DataType::I64, depth as f64);
    let neg = im.op(node, "less", vec![idx, zero])?;
    let wrapped = im.op(node, "add", vec![idx, d])?;
    let idx = im.op(node, "where", vec![neg, wrapped, idx])?;
    let mut with_axis = out_shape.clone();
    with_axis[axis] = 1;
    let idx = reshape_to(im, node, idx, &with_axis)?;
    let mut pos_shape = vec![1; out_shape.len()];
    pos_shape[axis] = depth;
    let positions: Vec<f64> = (0..depth).map(|v| v as f64).collect();
    let positions = im.constant(Tensor::from_f64(DataType::I64, pos_shape, &positions));
    let hit = im.op(node, "equal", vec![idx, positions])?;
    let flat = reshape_to(im, node, values, &[2])?;
    let pick = |im: &mut Importer, k: f64| -> Result<ExprId, OnnxError> {
        let i = im.constant(Tensor::scalar(DataType::I64, k));
        let a = attrs(&[("axis", AttrValue::Int(0)), ("mode", AttrValue::Str("clip".into()))]);
        im.call(node, "take", vec![flat, i], a)
    };
    let (off, on) = (pick(im, 0.0)?, pick(im, 1.0)?);
    let y = im.op(node, "where", vec![hit, on, off])?;
    let s: Vec<i64> = out_shape.iter().map(|&d| d as i64).collect();
    one(im.call(node, "broadcast_to", vec![y], attrs(&[("shape", AttrValue::Ints(s))]))?)
}
