//! Network layers: matrix products, convolution, pooling, normalization and
//! the softmax family (resizing is in `resize.rs`).

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::math::cast_to;
use super::shape::reshape_to;
use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(&["MatMul"], matmul, &[]);
    t.add(&["Gemm"], gemm, &["alpha", "beta", "transA", "transB"]);
    t.add(&["Conv"], conv, &["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]);
    t.add(
        &["MaxPool", "AveragePool"],
        pool,
        &[
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "dilations",
            "kernel_shape",
            "pads",
            "storage_order",
            "strides",
        ],
    );
    t.add(&["GlobalAveragePool", "GlobalMaxPool"], global_pool, &[]);
    t.add(&["LpPool"], lp_pool, &["auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"]);
    t.add(&["BatchNormalization"], batch_norm, &["epsilon", "momentum", "spatial", "training_mode"]);
    t.add(&["InstanceNormalization"], instance_norm, &["epsilon"]);
    t.add(&["LayerNormalization"], layer_norm, &["axis", "epsilon", "stash_type"]);
    t.add(&["RMSNormalization"], rms_norm, &["axis", "epsilon", "stash_type"]);
    t.add(&["LpNormalization"], lp_norm, &["axis", "p"]);
    t.add(&["LRN"], lrn, &["alpha", "beta", "bias", "size"]);
    t.add(&["Softmax", "LogSoftmax", "Hardmax"], softmax, &["axis"]);
}

pub(super) fn broadcast(im: &mut Importer, node: &Node, x: ExprId, shape: &[usize]) -> Result<ExprId, OnnxError> {
    if im.shape_of(node, x)? == shape {
        return Ok(x);
    }
    let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    im.call(node, "broadcast_to", vec![x], attrs(&[("shape", AttrValue::Ints(s))]))
}

/// NumPy `matmul`: 1-D operands gain and lose a unit dimension, batch
/// dimensions broadcast, a 2-D right operand is one `nn.matmul`.
fn matmul(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (a, b) = (im.input(node, 0)?, im.input(node, 1)?);
    one(matmul_of(im, node, a, b)?)
}

/// The NumPy `matmul` of two imported values.
pub(super) fn matmul_of(im: &mut Importer, node: &Node, mut a: ExprId, mut b: ExprId) -> Result<ExprId, OnnxError> {
    let (mut sa, mut sb) = (im.shape_of(node, a)?, im.shape_of(node, b)?);
    if sa.is_empty() || sb.is_empty() {
        return Err(node.err("MatMul operands must have at least one dimension"));
    }
    let (vec_a, vec_b) = (sa.len() == 1, sb.len() == 1);
    if vec_a {
        sa.insert(0, 1);
        a = reshape_to(im, node, a, &sa)?;
    }
    if vec_b {
        sb.push(1);
        b = reshape_to(im, node, b, &sb)?;
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (kb, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != kb {
        return Err(node.err(format!("MatMul of {sa:?} and {sb:?}: reduction sizes {k} and {kb} differ")));
    }
    let mut out_shape;
    let y = if sb.len() == 2 {
        out_shape = sa[..sa.len() - 2].to_vec();
        im.call(node, "nn.matmul", vec![a, b], Attrs::new())?
    } else {
        let batch = kiln_ir::relay::op::broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])
            .map_err(|m| node.err(format!("MatMul batch dimensions: {m}")))?;
        let bsz: usize = batch.iter().product();
        let full_a: Vec<usize> = batch.iter().copied().chain([m, k]).collect();
        let full_b: Vec<usize> = batch.iter().copied().chain([k, n]).collect();
        let a3 = broadcast(im, node, a, &full_a)?;
        let a3 = reshape_to(im, node, a3, &[bsz, m, k])?;
        let b3 = broadcast(im, node, b, &full_b)?;
        let b3 = reshape_to(im, node, b3, &[bsz, k, n])?;
        out_shape = batch;
        let a = attrs(&[("transpose_a", AttrValue::Bool(false)), ("transpose_b", AttrValue::Bool(false))]);
        im.call(node, "nn.batch_matmul", vec![a3, b3], a)?
    };
    if !vec_a {
        out_shape.push(m);
    }
    if !vec_b {
        out_shape.push(n);
    }
    reshape_to(im, node, y, &out_shape)
}

fn gemm(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (a, b) = (im.input(node, 0)?, im.input(node, 1)?);
    let c = im.optional_input(node, 2)?;
    one(gemm_of(im, node, a, b, c, node.float("beta", 1.0)? as f64)?)
}

/// `alpha · op(a) · op(b) + beta · c` with Gemm's attributes (`transA`,
/// `transB`, `alpha`) read from `node` (Gemm, com.microsoft's QGemm).
pub(super) fn gemm_of(
    im: &mut Importer,
    node: &Node,
    a: ExprId,
    b: ExprId,
    c: Option<ExprId>,
    beta: f64,
) -> Result<ExprId, OnnxError> {
    let (ta, tb) = (node.int("transA", 0)? != 0, node.int("transB", 0)? != 0);
    let alpha = node.float("alpha", 1.0)? as f64;
    if im.rank_of(node, a)? != 2 || im.rank_of(node, b)? != 2 {
        return Err(node.err("Gemm needs 2-D operands"));
    }
    let dt = im.dtype_of(node, a)?;
    let mut y = im.call(
        node,
        "nn.matmul",
        vec![a, b],
        attrs(&[("transpose_a", AttrValue::Bool(ta)), ("transpose_b", AttrValue::Bool(tb))]),
    )?;
    if alpha != 1.0 {
        let s = im.scalar(dt, alpha);
        y = im.op(node, "multiply", vec![y, s])?;
    }
    if let Some(c) = c {
        let c = if beta != 1.0 {
            let s = im.scalar(dt, beta);
            im.op(node, "multiply", vec![c, s])?
        } else {
            c
        };
        y = im.op(node, "add", vec![y, c])?;
    }
    Ok(y)
}

/// The spatial attributes of a convolution or pooling window of `dims` dimensions.
struct Window {
    kernel: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    /// `[begin…, end…]`, ONNX's order.
    pads: Vec<i64>,
}

fn window(node: &Node, in_spatial: &[usize], kernel: Vec<i64>) -> Result<Window, OnnxError> {
    let dims = in_spatial.len();
    let get = |name: &str, default: i64, len: usize| -> Result<Vec<i64>, OnnxError> {
        match node.ints(name)? {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => Ok(v),
            Some(v) => Err(node.err(format!("`{name}` has {} values, expected {len}", v.len()))),
        }
    };
    if kernel.len() != dims {
        return Err(node.err(format!("a {}-D kernel on a {dims}-D input", kernel.len())));
    }
    let strides = get("strides", 1, dims)?;
    let dilations = get("dilations", 1, dims)?;
    if strides.iter().chain(&dilations).chain(&kernel).any(|&v| v < 1) {
        return Err(node.err("kernel sizes, strides and dilations must be positive"));
    }
    let mode = node.string("auto_pad")?.unwrap_or_default();
    let pads = match mode.as_str() {
        "" | "NOTSET" => get("pads", 0, 2 * dims)?,
        "VALID" => vec![0; 2 * dims],
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = vec![0; 2 * dims];
            for d in 0..dims {
                let (n, s, k, r) = (in_spatial[d] as i64, strides[d], kernel[d], dilations[d]);
                let out = (n + s - 1) / s;
                let total = ((out - 1) * s + (k - 1) * r + 1 - n).max(0);
                let small = total / 2;
                (p[d], p[d + dims]) =
                    if mode == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
            }
            p
        }
        other => return Err(node.err(format!("auto_pad={other} is not an ONNX padding mode"))),
    };
    if pads.iter().any(|&p| p < 0) {
        return Err(node.err("negative pads are not supported"));
    }
    Ok(Window { kernel, strides, dilations, pads })
}

impl Window {
    /// As 2-D attributes; a 1-D window gains a unit leading dimension.
    fn as_2d(&self) -> (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>) {
        if self.kernel.len() == 2 {
            let p = &self.pads;
            return (self.kernel.clone(), self.strides.clone(), self.dilations.clone(), vec![p[0], p[1], p[2], p[3]]);
        }
        (
            vec![1, self.kernel[0]],
            vec![1, self.strides[0]],
            vec![1, self.dilations[0]],
            vec![0, self.pads[0], 0, self.pads[1]],
        )
    }
}

/// `x` as 4-D `[N, C, H, W]`: a 3-D `[N, C, L]` gains a unit height. 2-D and
/// 3-D spatial inputs other than these are refused by the caller.
pub(super) fn lift(im: &mut Importer, node: &Node, x: ExprId) -> Result<ExprId, OnnxError> {
    let s = im.shape_of(node, x)?;
    if s.len() == 3 {
        return reshape_to(im, node, x, &[s[0], s[1], 1, s[2]]);
    }
    Ok(x)
}

pub(super) fn lower(im: &mut Importer, node: &Node, y: ExprId, rank: usize) -> Result<ExprId, OnnxError> {
    if rank == 4 {
        return Ok(y);
    }
    let s = im.shape_of(node, y)?;
    reshape_to(im, node, y, &[s[0], s[1], s[3]])
}

pub(super) fn spatial_rank(im: &mut Importer, node: &Node, x: ExprId) -> Result<(usize, Vec<usize>), OnnxError> {
    let s = im.shape_of(node, x)?;
    match s.len() {
        3 | 4 => Ok((s.len(), s[2..].to_vec())),
        5 => Err(node.err("3-D (volumetric) windows are not supported yet; 1-D and 2-D are")),
        r => Err(node.err(format!("needs an input of rank 3 or 4 (N, C, spatial…), found rank {r}"))),
    }
}

fn conv(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, w) = (im.input(node, 0)?, im.input(node, 1)?);
    let b = im.optional_input(node, 2)?;
    one(conv_of(im, node, x, w, b)?)
}

/// The convolution of `x` by `w` (plus the bias `b`) with Conv's attributes
/// read from `node` (Conv, QLinearConv).
pub(super) fn conv_of(
    im: &mut Importer,
    node: &Node,
    x: ExprId,
    w: ExprId,
    b: Option<ExprId>,
) -> Result<ExprId, OnnxError> {
    let (rank, spatial) = spatial_rank(im, node, x)?;
    let ws = im.shape_of(node, w)?;
    if ws.len() != rank {
        return Err(node.err(format!("the weight has rank {}, the input rank {rank}", ws.len())));
    }
    let kernel = match node.ints("kernel_shape")? {
        Some(k) => k,
        None => ws[2..].iter().map(|&d| d as i64).collect(),
    };
    if kernel.iter().zip(&ws[2..]).any(|(&k, &d)| k as usize != d) {
        return Err(node.err(format!("kernel_shape {kernel:?} differs from the weight's {:?}", &ws[2..])));
    }
    let win = window(node, &spatial, kernel)?;
    let (k, s, d, p) = win.as_2d();
    let a = attrs(&[
        ("padding", AttrValue::Ints(p)),
        ("strides", AttrValue::Ints(s)),
        ("dilation", AttrValue::Ints(d)),
        ("groups", AttrValue::Int(node.int("group", 1)?)),
        ("kernel_size", AttrValue::Ints(k)),
    ]);
    let (x4, w4) = (lift(im, node, x)?, lift(im, node, w)?);
    let mut y = im.call(node, "nn.conv2d", vec![x4, w4], a)?;
    if let Some(b) = b {
        y = im.op(node, "nn.bias_add", vec![y, b])?;
    }
    lower(im, node, y, rank)
}

fn pool(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let (rank, spatial) = spatial_rank(im, node, x)?;
    if node.num_outputs() > 1 {
        return Err(node.err("the Indices output of MaxPool is not supported"));
    }
    if node.int("storage_order", 0)? != 0 {
        return Err(node.err("storage_order=1 is not supported"));
    }
    let kernel = node.ints("kernel_shape")?.ok_or_else(|| node.err("missing attribute `kernel_shape`"))?;
    let win = window(node, &spatial, kernel)?;
    let is_max = node.op() == "MaxPool";
    if !is_max && win.dilations.iter().any(|&d| d != 1) {
        return Err(node.err("dilated average pooling is not supported"));
    }
    let (k, s, d, p) = win.as_2d();
    let mut a = vec![
        ("pool_size", AttrValue::Ints(k)),
        ("strides", AttrValue::Ints(s)),
        ("padding", AttrValue::Ints(p)),
        ("dilation", AttrValue::Ints(d)),
        ("ceil_mode", AttrValue::Bool(node.int("ceil_mode", 0)? != 0)),
    ];
    if !is_max {
        a.push(("count_include_pad", AttrValue::Bool(node.int("count_include_pad", 0)? != 0)));
    }
    let x4 = lift(im, node, x)?;
    let y = im.call(node, if is_max { "nn.max_pool2d" } else { "nn.avg_pool2d" }, vec![x4], attrs(&a))?;
    one(lower(im, node, y, rank)?)
}

/// `(Σ |x|ᵖ)^(1/p)` over each window (padding adds nothing): the average
/// of `|x|ᵖ` over the whole window, padding included, times its area.
fn lp_pool(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let (rank, spatial) = spatial_rank(im, node, x)?;
    let dt = im.dtype_of(node, x)?;
    if !dt.is_float() {
        return Err(node.err(format!("needs a floating-point input, found {dt}")));
    }
    let kernel = node.ints("kernel_shape")?.ok_or_else(|| node.err("missing attribute `kernel_shape`"))?;
    let win = window(node, &spatial, kernel)?;
    if win.dilations.iter().any(|&d| d != 1) || node.int("ceil_mode", 0)? != 0 {
        return Err(node.err("dilations and ceil_mode are not supported for LpPool"));
    }
    let p = node.int("p", 2)?;
    if p < 1 {
        return Err(node.err(format!("p={p} must be positive")));
    }
    let area: i64 = win.kernel.iter().product();
    let (k, s, d, pads) = win.as_2d();
    let a = attrs(&[
        ("pool_size", AttrValue::Ints(k)),
        ("strides", AttrValue::Ints(s)),
        ("padding", AttrValue::Ints(pads)),
        ("dilation", AttrValue::Ints(d)),
        ("ceil_mode", AttrValue::Bool(false)),
        ("count_include_pad", AttrValue::Bool(true)),
    ]);
    let x4 = lift(im, node, x)?;
    let powered = match p {
        1 => im.op(node, "abs", vec![x4])?,
        2 => im.op(node, "multiply", vec![x4, x4])?,
        _ => {
            let ax = im.op(node, "abs", vec![x4])?;
            let e = im.scalar(dt, p as f64);
            im.op(node, "power", vec![ax, e])?
        }
    };
    let mean = im.call(node, "nn.avg_pool2d", vec![powered], a)?;
    let n = im.scalar(dt, area as f64);
    let sum = im.op(node, "multiply", vec![mean, n])?;
    let y = match p {
        1 => sum,
        2 => im.op(node, "sqrt", vec![sum])?,
        _ => {
            let e = im.scalar(dt, 1.0 / p as f64);
            im.op(node, "power", vec![sum, e])?
        }
    };
    one(lower(im, node, y, rank)?)
}

fn global_pool(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    one(global_pool_of(im, node, x, node.op() == "GlobalMaxPool")?)
}

/// The mean (or max) of `x` over its spatial axes, kept as size 1.
pub(super) fn global_pool_of(im: &mut Importer, node: &Node, x: ExprId, max: bool) -> Result<ExprId, OnnxError> {
    let rank = im.rank_of(node, x)?;
    if rank < 3 {
        return Err(node.err(format!("needs an input of rank 3 or more, found {rank}")));
    }
    if !max && rank == 4 {
        return im.op(node, "nn.global_avg_pool2d", vec![x]);
    }
    let axes: Vec<i64> = (2..rank as i64).collect();
    let op = if max { "max" } else { "mean" };
    let a = attrs(&[("axis", AttrValue::Ints(axes)), ("keepdims", AttrValue::Bool(true))]);
    im.call(node, op, vec![x], a)
}

fn batch_norm(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    if node.int("training_mode", 0)? != 0 || node.num_outputs() > 1 {
        return Err(node.err("training-mode batch normalization is not supported (kiln compiles inference)"));
    }
    if node.int("spatial", 1)? != 1 {
        return Err(node.err("spatial=0 is not supported"));
    }
    let args = (0..5).map(|i| im.input(node, i)).collect::<Result<Vec<_>, _>>()?;
    let eps = node.float("epsilon", 1e-5)? as f64;
    let bn = im.call(node, "nn.batch_norm", args, attrs(&[("epsilon", AttrValue::Float(eps))]))?;
    one(im.item(node, bn, 0)?)
}

/// `(x − mean) / √(var + ε)` over the reduced `axes`, with the mean and
/// `1/√(var + ε)` (kept dimensions), which LayerNormalization also returns.
struct Normalized {
    y: ExprId,
    mean: ExprId,
    inv_std: ExprId,
}

fn normalize(im: &mut Importer, node: &Node, x: ExprId, axes: Vec<i64>, eps: f64) -> Result<Normalized, OnnxError> {
    let dt = im.dtype_of(node, x)?;
    if !dt.is_float() {
        return Err(node.err(format!("needs a floating-point input, found {dt}")));
    }
    let red = attrs(&[("axis", AttrValue::Ints(axes)), ("keepdims", AttrValue::Bool(true))]);
    let mean = im.call(node, "mean", vec![x], red.clone())?;
    let centered = im.op(node, "subtract", vec![x, mean])?;
    let sq = im.op(node, "multiply", vec![centered, centered])?;
    let var = im.call(node, "mean", vec![sq], red)?;
    let e = im.scalar(dt, eps);
    let ve = im.op(node, "add", vec![var, e])?;
    let inv_std = im.op(node, "rsqrt", vec![ve])?;
    let y = im.op(node, "multiply", vec![centered, inv_std])?;
    Ok(Normalized { y, mean, inv_std })
}

fn instance_norm(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, scale, bias) = (im.input(node, 0)?, im.input(node, 1)?, im.input(node, 2)?);
    let rank = im.rank_of(node, x)?;
    if rank < 3 {
        return Err(node.err("needs an input of rank 3 or more"));
    }
    let axes: Vec<i64> = (2..rank as i64).collect();
    let y = normalize(im, node, x, axes, node.float("epsilon", 1e-5)? as f64)?.y;
    // scale and bias are per channel: [C] → [C, 1, …].
    let c = im.shape_of(node, scale)?;
    let per_channel: Vec<usize> = c.iter().copied().chain(std::iter::repeat_n(1, rank - 2)).collect();
    let s = reshape_to(im, node, scale, &per_channel)?;
    let b = reshape_to(im, node, bias, &per_channel)?;
    let ys = im.op(node, "multiply", vec![y, s])?;
    one(im.op(node, "add", vec![ys, b])?)
}

/// The normalized axis of a LayerNormalization/RMSNormalization: `axis..rank`.
fn norm_axes(node: &Node, axis: i64, rank: usize) -> Result<Vec<i64>, OnnxError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..r).contains(&a) {
        return Err(node.err(format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok((a..r).collect())
}

/// Where `stash_type=1` asks for float32 statistics of a lower-precision input.
fn stash(im: &mut Importer, node: &Node, x: ExprId) -> Result<(ExprId, DataType), OnnxError> {
    let dt = im.dtype_of(node, x)?;
    match node.int("stash_type", 1)? {
        1 if dt != DataType::F32 => Ok((cast_to(im, node, x, DataType::F32)?, dt)),
        1 | -1 => Ok((x, dt)),
        other => Err(node.err(format!("stash_type={other} is not supported"))),
    }
}

fn layer_norm(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, g) = (im.input(node, 0)?, im.input(node, 1)?);
    let rank = im.rank_of(node, x)?;
    let axes = norm_axes(node, node.int("axis", -1)?, rank)?;
    let eps = node.float("epsilon", 1e-5)? as f64;
    let b = im.optional_input(node, 2)?;
    let gs = im.shape_of(node, g)?;
    let dt = im.dtype_of(node, x)?;
    if axes.len() == 1 && gs.len() == 1 && node.num_outputs() == 1 && dt == DataType::F32 {
        let b = match b {
            Some(b) => b,
            None => im.constant(Tensor::zeros(dt, gs)),
        };
        let a = attrs(&[("axis", AttrValue::Int(-1)), ("epsilon", AttrValue::Float(eps))]);
        return one(im.call(node, "nn.layer_norm", vec![x, g, b], a)?);
    }
    // The composed form: several axes, lower precision, or the Mean/InvStdDev outputs.
    let (xs, dt) = stash(im, node, x)?;
    let Normalized { y, mean, inv_std } = normalize(im, node, xs, axes, eps)?;
    let y = cast_to(im, node, y, dt)?;
    let mut y = im.op(node, "multiply", vec![y, g])?;
    if let Some(b) = b {
        y = im.op(node, "add", vec![y, b])?;
    }
    Ok(vec![y, mean, inv_std])
}

/// `x / √(mean(x²) + ε) · scale` over `axis..rank`.
fn rms_norm(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, g) = (im.input(node, 0)?, im.input(node, 1)?);
    let rank = im.rank_of(node, x)?;
    let axes = norm_axes(node, node.int("axis", -1)?, rank)?;
    let eps = node.float("epsilon", 1e-5)? as f64;
    let (xs, dt) = stash(im, node, x)?;
    let sdt = im.dtype_of(node, xs)?;
    let sq = im.op(node, "multiply", vec![xs, xs])?;
    let red = attrs(&[("axis", AttrValue::Ints(axes)), ("keepdims", AttrValue::Bool(true))]);
    let ms = im.call(node, "mean", vec![sq], red)?;
    let e = im.scalar(sdt, eps);
    let me = im.op(node, "add", vec![ms, e])?;
    let inv = im.op(node, "rsqrt", vec![me])?;
    let y = im.op(node, "multiply", vec![xs, inv])?;
    let y = cast_to(im, node, y, dt)?;
    one(im.op(node, "multiply", vec![y, g])?)
}

/// `x / ‖x‖ₚ` along `axis` (p = 1 or 2).
fn lp_norm(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let rank = im.rank_of(node, x)?;
    let axis = node.int("axis", -1)?;
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if !(0..rank as i64).contains(&a) {
        return Err(node.err(format!("axis {axis} is out of range for rank {rank}")));
    }
    let red = attrs(&[("axis", AttrValue::Ints(vec![a])), ("keepdims", AttrValue::Bool(true))]);
    let norm = match node.int("p", 2)? {
        1 => {
            let ab = im.op(node, "abs", vec![x])?;
            im.call(node, "sum", vec![ab], red)?
        }
        2 => {
            let sq = im.op(node, "multiply", vec![x, x])?;
            let s = im.call(node, "sum", vec![sq], red)?;
            im.op(node, "sqrt", vec![s])?
        }
        p => return Err(node.err(format!("p={p} is not supported (1 or 2)"))),
    };
    // A zero norm means a zero vector, which stays zero (ONNX's reference), not 0/0.
    let dt = im.dtype_of(node, x)?;
    let (zero, one_) = (im.scalar(dt, 0.0), im.scalar(dt, 1.0));
    let is_zero = im.op(node, "equal", vec![norm, zero])?;
    let safe = im.op(node, "where", vec![is_zero, one_, norm])?;
    one(im.op(node, "divide", vec![x, safe])?)
}

/// Softmax, LogSoftmax and Hardmax. Before opset 13 the input is coerced to
/// 2-D at `axis` (default 1) and the operator runs on the flattened rows.
fn softmax(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let shape = im.shape_of(node, x)?;
    let rank = shape.len() as i64;
    let legacy = im.opset < 13;
    let axis = node.int("axis", if legacy { 1 } else { -1 })?;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank.max(1)).contains(&axis) {
        return Err(node.err(format!("axis {axis} is out of range for rank {rank}")));
    }
    let dt = im.dtype_of(node, x)?;
    if !dt.is_float() {
        return Err(node.err(format!("needs a floating-point input, found {dt}")));
    }
    let (xin, ax) = if legacy && rank > 0 {
        let rows: usize = shape[..axis as usize].iter().product();
        let cols: usize = shape[axis as usize..].iter().product();
        (reshape_to(im, node, x, &[rows, cols])?, 1)
    } else {
        (x, axis)
    };
    let keep = |a: i64| attrs(&[("axis", AttrValue::Ints(vec![a])), ("keepdims", AttrValue::Bool(true))]);
    let y = match node.op() {
        "Softmax" => im.call(node, "nn.softmax", vec![xin], attrs(&[("axis", AttrValue::Int(ax))]))?,
        "LogSoftmax" => {
            // x − max − ln Σ e^(x − max)
            let m = im.call(node, "max", vec![xin], keep(ax))?;
            let c = im.op(node, "subtract", vec![xin, m])?;
            let e = im.op(node, "exp", vec![c])?;
            let s = im.call(node, "sum", vec![e], keep(ax))?;
            let l = im.op(node, "log", vec![s])?;
            im.op(node, "subtract", vec![c, l])?
        }
        _ => {
            // 1 at the first maximum along the axis, 0 elsewhere.
            let ia = attrs(&[("axis", AttrValue::Int(ax)), ("keepdims", AttrValue::Bool(true))]);
            let idx = im.call(node, "argmax", vec![xin], ia)?;
            let n = im.shape_of(node, xin)?[ax as usize];
            let xs = im.shape_of(node, xin)?;
            let mut pos_shape = vec![1; xs.len()];
            pos_shape[ax as usize] = n;
            let pos = Tensor::from_f64(DataType::I64, pos_shape, &(0..n).map(|v| v as f64).collect::<Vec<_>>());
            let pos = im.constant(pos);
            let hit = im.op(node, "equal", vec![idx, pos])?;
            let hit = cast_to(im, node, hit, dt)?;
            broadcast(im, node, hit, &xs)?
        }
    };
    if legacy && rank > 0 {
        return one(reshape_to(im, node, y, &shape)?);
    }
    one(y)
}

/// Local response normalization across channels: `x / (bias + α/size ·
/// Σ x²)^β`, the sum over the `size` channels around each one (clipped at
/// the edges), as a product of the squares with a constant band matrix.
fn lrn(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let shape = im.shape_of(node, x)?;
    let dt = im.dtype_of(node, x)?;
    if shape.len() < 3 || !dt.is_float() {
        return Err(node.err(format!("needs a floating-point input of rank 3 or more, found {dt} {shape:?}")));
    }
    let size = node.opt_int("size")?.ok_or_else(|| node.err("missing attribute `size`"))?;
    if size < 1 {
        return Err(node.err(format!("size={size} must be positive")));
    }
    let (alpha, beta, bias) = (
        f64::from(node.float("alpha", 1e-4)?),
        f64::from(node.float("beta", 0.75)?),
        f64::from(node.float("bias", 1.0)?),
    );
    let c = shape[1];
    let (before, after) = ((size - 1) / 2, (size - 1) - (size - 1) / 2);
    // band[c'][c] = 1 when channel c' is in the window of channel c.
    let band: Vec<f64> = (0..c * c)
        .map(|p| {
            let (from, to) = ((p / c) as i64, (p % c) as i64);
            (to - before <= from && from <= to + after) as u8 as f64
        })
        .collect();
    let band = im.constant(Tensor::from_f64(dt, vec![c, c], &band));
    let rank = shape.len() as i64;
    // Channels last, multiplied by the band, channels back.
    let mut perm: Vec<i64> = vec![0];
    perm.extend(2..rank);
    perm.push(1);
    let back = super::shape::inverse_permutation(&perm);
    let sq = im.op(node, "multiply", vec![x, x])?;
    let sq = im.call(node, "transpose", vec![sq], attrs(&[("axes", AttrValue::Ints(perm))]))?;
    let sums = matmul_of(im, node, sq, band)?;
    let sums = im.call(node, "transpose", vec![sums], attrs(&[("axes", AttrValue::Ints(back))]))?;
    let k = im.scalar(dt, alpha / size as f64);
    let scaled = im.op(node, "multiply", vec![sums, k])?;
    let b = im.scalar(dt, bias);
    let base = im.op(node, "add", vec![scaled, b])?;
    let e = im.scalar(dt, beta);
    let den = im.op(node, "power", vec![base, e])?;
    one(im.op(node, "divide", vec![x, den])?)
}
