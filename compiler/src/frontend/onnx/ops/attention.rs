//! Attention (opset 23 and later) as the products, masks and softmax it is
//! defined by, and RotaryEmbedding. Each step follows the ONNX reference implementation, which
//! the node cases compare against: scaling split as √scale on Q and on K,
//! the additive bias built from the mask, causal and sliding-window
//! frontiers and padded key lengths, and rows with no attendable key set to
//! zero. Biases that depend only on shapes are constants and fold at import.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::math::cast_to;
use super::nn::{broadcast, matmul_of};
use super::shape::reshape_to;
use super::Table;
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(
        &["Attention"],
        attention,
        &[
            "is_causal",
            "kv_num_heads",
            "left_window_size",
            "q_num_heads",
            "qk_matmul_output_mode",
            "right_window_size",
            "scale",
            "softcap",
            "softmax_precision",
        ],
    );
    t.add(&["RotaryEmbedding"], rotary_embedding, &["interleaved", "num_heads", "rotary_embedding_dim"]);
}

/// Where the causal and window frontiers of each query row start: a shift
/// known at build time, or one per batch element computed from the
/// `nonpad_kv_seqlen` input.
enum Offset {
    Fixed(i64),
    PerBatch(ExprId),
}

fn attention(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (mut q, mut k, mut v) = (im.input(node, 0)?, im.input(node, 1)?, im.input(node, 2)?);
    let mask = im.optional_input(node, 3)?;
    let (past_k, past_v) = (im.optional_input(node, 4)?, im.optional_input(node, 5)?);
    let nonpad = im.optional_input(node, 6)?;
    if past_k.is_some() != past_v.is_some() {
        return Err(node.err("past_key and past_value must be given together"));
    }
    if nonpad.is_some() && past_k.is_some() {
        return Err(node.err("nonpad_kv_seqlen cannot be combined with past_key/past_value"));
    }
    let dt = im.dtype_of(node, q)?;
    if !dt.is_float() {
        return Err(node.err(format!("needs floating-point Q, K and V, found {dt}")));
    }
    let rank = im.rank_of(node, q)?;
    if im.rank_of(node, k)? != rank || im.rank_of(node, v)? != rank {
        return Err(node.err("Q, K and V must have the same rank"));
    }
    let (q_heads, kv_heads) = (node.opt_int("q_num_heads")?, node.opt_int("kv_num_heads")?);
    match rank {
        3 => {
            let (Some(qh), Some(kvh)) = (q_heads, kv_heads) else {
                return Err(node.err("3-D inputs need the q_num_heads and kv_num_heads attributes"));
            };
            q = split_heads(im, node, q, qh, "Q")?;
            k = split_heads(im, node, k, kvh, "K")?;
            v = split_heads(im, node, v, kvh, "V")?;
        }
        4 => {
            let (hq, hk) = (im.shape_of(node, q)?[1] as i64, im.shape_of(node, k)?[1] as i64);
            if q_heads.is_some_and(|h| h != hq) || kv_heads.is_some_and(|h| h != hk) {
                return Err(node.err("q_num_heads/kv_num_heads disagree with the head dimension of 4-D inputs"));
            }
        }
        r => return Err(node.err(format!("Q, K and V must be 3-D or 4-D, found rank {r}"))),
    }
    let sq = im.shape_of(node, q)?;
    let (batch, q_len, head_size) = (sq[0], sq[2], sq[3]);

    // The key/value cache: past entries first.
    let past_len = match past_k {
        Some(pk) => im.shape_of(node, pk)?.get(2).copied().unwrap_or(0) as i64,
        None => 0,
    };
    if let (Some(pk), Some(pv)) = (past_k, past_v) {
        k = concat(im, node, vec![pk, k], 2)?;
        v = concat(im, node, vec![pv, v], 2)?;
    }
    let (present_k, present_v) = (k, v);
    let kv_len = im.shape_of(node, k)?[2];

    let offset = match nonpad {
        Some(n) if im.rank_of(node, n)? == 1 => {
            let n = cast_to(im, node, n, DataType::I64)?;
            let ql = im.scalar(DataType::I64, q_len as f64);
            Offset::PerBatch(im.op(node, "subtract", vec![n, ql])?)
        }
        Some(_) => return Err(node.err("nonpad_kv_seqlen must be 1-D (one length per batch element)")),
        None => Offset::Fixed(past_len),
    };

    // The additive bias: 0 where a key may be attended, −∞ where not.
    let mut bias = match mask {
        Some(m) => Some(mask_bias(im, node, m, dt, kv_len)?),
        None => None,
    };
    let add = |im: &mut Importer, bias: Option<ExprId>, b: ExprId| match bias {
        Some(a) => im.op(node, "add", vec![a, b]),
        None => Ok(b),
    };
    if node.int("is_causal", 0)? != 0 {
        let diff = frontier(im, node, &offset, q_len, kv_len)?;
        let zero = im.scalar(DataType::I64, 0.0);
        let allowed = im.op(node, "greater_equal", vec![diff, zero])?;
        let b = allowed_bias(im, node, allowed, dt)?;
        bias = Some(add(im, bias, b)?);
    }
    let (left, right) = (node.int("left_window_size", -1)?, node.int("right_window_size", -1)?);
    if left < -1 || right < -1 {
        return Err(node.err("left_window_size and right_window_size must be -1 or non-negative"));
    }
    if left >= 0 || right >= 0 {
        let diff = frontier(im, node, &offset, q_len, kv_len)?;
        // Key j is in the window of query i when −right ≤ i + offset − j ≤ left.
        let mut bounds = Vec::new();
        if left >= 0 {
            bounds.push((left, "less_equal"));
        }
        if right >= 0 {
            bounds.push((-right, "greater_equal"));
        }
        let mut allowed = None;
        for (limit, op) in bounds {
            let c = im.scalar(DataType::I64, limit as f64);
            let a = im.op(node, op, vec![diff, c])?;
            allowed = Some(match allowed {
                Some(p) => im.op(node, "logical_and", vec![p, a])?,
                None => a,
            });
        }
        if let Some(allowed) = allowed {
            let b = allowed_bias(im, node, allowed, dt)?;
            bias = Some(add(im, bias, b)?);
        }
    }
    if let Some(n) = nonpad {
        // Keys at or past each batch element's length are padding.
        let n = cast_to(im, node, n, DataType::I64)?;
        let n = reshape_to(im, node, n, &[batch, 1, 1, 1])?;
        let j = positions(im, &[1, 1, 1, kv_len]);
        let allowed = im.op(node, "less", vec![j, n])?;
        let b = allowed_bias(im, node, allowed, dt)?;
        bias = Some(add(im, bias, b)?);
    }

    // Grouped-query attention: each key/value head serves several query heads.
    let (hq, hk, hv) = (sq[1], im.shape_of(node, k)?[1], im.shape_of(node, v)?[1]);
    if hq != hk && hk > 0 && hq % hk == 0 && hk == hv {
        k = repeat_heads(im, node, k, hq / hk)?;
        v = repeat_heads(im, node, v, hq / hk)?;
    }

    let scale = match node.opt_float("scale")? {
        Some(s) => f64::from(s),
        None => 1.0 / (head_size as f64).sqrt(),
    };
    let s = im.scalar(dt, scale.sqrt());
    let qs = im.op(node, "multiply", vec![q, s])?;
    let kt = im.call(node, "transpose", vec![k], attrs(&[("axes", AttrValue::Ints(vec![0, 1, 3, 2]))]))?;
    let kts = im.op(node, "multiply", vec![kt, s])?;
    let mut qk = matmul_of(im, node, qs, kts)?;
    let softcap = f64::from(node.float("softcap", 0.0)?);
    if softcap > 0.0 {
        let c = im.scalar(dt, softcap);
        let t = im.op(node, "divide", vec![qk, c])?;
        let t = im.op(node, "tanh", vec![t])?;
        qk = im.op(node, "multiply", vec![t, c])?;
    }
    let mode = node.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(node.err(format!("qk_matmul_output_mode={mode} is not one of 0, 1, 2, 3")));
    }
    let mut qk_out = qk;
    let logits = match bias {
        Some(b) => im.op(node, "add", vec![qk, b])?,
        None => qk,
    };
    if mode == 2 {
        qk_out = logits;
    }
    let logits = match node.opt_int("softmax_precision")? {
        Some(code) => {
            let p = crate::frontend::onnx::proto::dtype(code as i32)
                .filter(|d| d.is_float())
                .ok_or_else(|| node.err(format!("softmax_precision={code} is not a supported float type")))?;
            cast_to(im, node, logits, p)?
        }
        None => logits,
    };
    let mut probs = im.call(node, "nn.softmax", vec![logits], attrs(&[("axis", AttrValue::Int(-1))]))?;
    if let Some(b) = bias {
        // A row whose bias is −∞ everywhere has no key to attend: zero, not NaN.
        let keep = attrs(&[("axis", AttrValue::Ints(vec![-1])), ("keepdims", AttrValue::Bool(true))]);
        let row_max = im.call(node, "max", vec![b], keep)?;
        let neg_inf = im.scalar(dt, f64::NEG_INFINITY);
        let masked = im.op(node, "equal", vec![row_max, neg_inf])?;
        let pdt = im.dtype_of(node, probs)?;
        let zero = im.scalar(pdt, 0.0);
        probs = im.op(node, "where", vec![masked, zero, probs])?;
    }
    if mode == 3 {
        qk_out = probs;
    }
    let qk_out = cast_to(im, node, qk_out, dt)?;
    let probs = cast_to(im, node, probs, dt)?;
    let mut y = matmul_of(im, node, probs, v)?;
    if rank == 3 {
        y = im.call(node, "transpose", vec![y], attrs(&[("axes", AttrValue::Ints(vec![0, 2, 1, 3]))]))?;
        let ys = im.shape_of(node, y)?;
        y = reshape_to(im, node, y, &[ys[0], ys[1], ys[2] * ys[3]])?;
    }
    Ok(vec![y, present_k, present_v, qk_out])
}

/// `[batch, seq, heads·size]` → `[batch, heads, seq, size]`.
fn split_heads(im: &mut Importer, node: &Node, x: ExprId, heads: i64, what: &str) -> Result<ExprId, OnnxError> {
    let s = im.shape_of(node, x)?;
    if heads <= 0 || s[2] % heads as usize != 0 {
        return Err(node.err(format!("{what}'s hidden size {} is not a multiple of {heads} heads", s[2])));
    }
    let h = heads as usize;
    let x = reshape_to(im, node, x, &[s[0], s[1], h, s[2] / h])?;
    im.call(node, "transpose", vec![x], attrs(&[("axes", AttrValue::Ints(vec![0, 2, 1, 3]))]))
}

/// Each head `reps` times in a row: `[h0, h0, h1, h1, …]` (NumPy `repeat`).
fn repeat_heads(im: &mut Importer, node: &Node, x: ExprId, reps: usize) -> Result<ExprId, OnnxError> {
    let s = im.shape_of(node, x)?;
    let x = reshape_to(im, node, x, &[s[0], s[1], 1, s[2], s[3]])?;
    let x = broadcast(im, node, x, &[s[0], s[1], reps, s[2], s[3]])?;
    reshape_to(im, node, x, &[s[0], s[1] * reps, s[2], s[3]])
}

fn concat(im: &mut Importer, node: &Node, xs: Vec<ExprId>, axis: i64) -> Result<ExprId, OnnxError> {
    let t = im.tuple(node, xs)?;
    im.call(node, "concatenate", vec![t], attrs(&[("axis", AttrValue::Int(axis))]))
}

/// `0, 1, …, n−1` along the one axis of `shape` that is not 1, as int64.
fn positions(im: &mut Importer, shape: &[usize]) -> ExprId {
    let n: usize = shape.iter().product();
    im.constant(Tensor::from_f64(DataType::I64, shape.to_vec(), &(0..n).map(|v| v as f64).collect::<Vec<_>>()))
}

/// `i + offset − j` for query row `i` and key `j`: `[q, kv]` for a fixed
/// offset, `[batch, 1, q, kv]` for one per batch element.
fn frontier(im: &mut Importer, node: &Node, offset: &Offset, q: usize, kv: usize) -> Result<ExprId, OnnxError> {
    let i = positions(im, &[q, 1]);
    let j = positions(im, &[1, kv]);
    let d = im.op(node, "subtract", vec![i, j])?;
    match *offset {
        Offset::Fixed(o) => {
            let o = im.scalar(DataType::I64, o as f64);
            im.op(node, "add", vec![d, o])
        }
        Offset::PerBatch(o) => {
            let b = im.shape_of(node, o)?[0];
            let o = reshape_to(im, node, o, &[b, 1, 1, 1])?;
            im.op(node, "add", vec![d, o])
        }
    }
}

/// 0 where `allowed`, −∞ elsewhere.
fn allowed_bias(im: &mut Importer, node: &Node, allowed: ExprId, dt: DataType) -> Result<ExprId, OnnxError> {
    let zero = im.scalar(dt, 0.0);
    let neg_inf = im.scalar(dt, f64::NEG_INFINITY);
    im.op(node, "where", vec![allowed, zero, neg_inf])
}

/// The mask as an additive bias, padded to `kv_len` keys (masked) when it
/// covers fewer. A boolean mask says which keys may be attended; a float
/// mask is added as it is.
fn mask_bias(im: &mut Importer, node: &Node, m: ExprId, dt: DataType, kv_len: usize) -> Result<ExprId, OnnxError> {
    let mdt = im.dtype_of(node, m)?;
    let mut m = match mdt {
        DataType::Bool => allowed_bias(im, node, m, dt)?,
        d if d == dt => m,
        d => return Err(node.err(format!("attn_mask must be bool or {dt}, found {d}"))),
    };
    let mut ms = im.shape_of(node, m)?;
    let Some(&last) = ms.last() else { return Err(node.err("attn_mask must have at least one dimension")) };
    if last > kv_len {
        return Err(node.err(format!("attn_mask covers {last} keys, more than the {kv_len} there are")));
    }
    if last < kv_len {
        *ms.last_mut().unwrap() = kv_len - last;
        let fill = im.constant(Tensor::full(dt, ms, f64::NEG_INFINITY));
        m = concat(im, node, vec![m, fill], -1)?;
    }
    Ok(m)
}

/// `x[..., begin..end]` along the last axis.
fn last_axis_slice(im: &mut Importer, node: &Node, x: ExprId, begin: usize, end: usize) -> Result<ExprId, OnnxError> {
    let a = attrs(&[
        ("begin", AttrValue::Ints(vec![begin as i64])),
        ("end", AttrValue::Ints(vec![end as i64])),
        ("axes", AttrValue::Ints(vec![-1])),
    ]);
    im.call(node, "strided_slice", vec![x], a)
}

/// RotaryEmbedding (opset 23), as the reference implementation computes it:
/// the first `rotary_embedding_dim` features of each head rotated pairwise
/// (halves, or even/odd features when `interleaved`) by the cached cosines
/// and sines, looked up by `position_ids` when given.
fn rotary_embedding(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, cos, sin) = (im.input(node, 0)?, im.input(node, 1)?, im.input(node, 2)?);
    let positions = im.optional_input(node, 3)?;
    let shape = im.shape_of(node, x)?;
    let transpose = |im: &mut Importer, v: ExprId| {
        im.call(node, "transpose", vec![v], attrs(&[("axes", AttrValue::Ints(vec![0, 2, 1, 3]))]))
    };
    // [batch, seq, heads, head_size]
    let xs = match shape.len() {
        4 => transpose(im, x)?,
        3 => {
            let heads = node.int("num_heads", 0)?;
            if heads <= 0 || shape[2] % heads as usize != 0 {
                return Err(node.err(format!("3-D input needs num_heads dividing its hidden size {}", shape[2])));
            }
            let h = heads as usize;
            reshape_to(im, node, x, &[shape[0], shape[1], h, shape[2] / h])?
        }
        r => return Err(node.err(format!("the input must be 3-D or 4-D, found rank {r}"))),
    };
    let s4 = im.shape_of(node, xs)?;
    let (b, seq, heads, d) = (s4[0], s4[1], s4[2], s4[3]);
    let r = match node.int("rotary_embedding_dim", 0)? {
        0 => d,
        v if v > 0 && v as usize <= d && v % 2 == 0 => v as usize,
        v => return Err(node.err(format!("rotary_embedding_dim={v} must be even and at most the head size {d}"))),
    };
    let half = r / 2;
    let lookup = |im: &mut Importer, cache: ExprId| -> Result<ExprId, OnnxError> {
        let c = match positions {
            Some(p) => {
                // Positions past the cache are a run-time error, never a clipped row.
                let rows = im.shape_of(node, cache)?.first().copied().unwrap_or(0);
                let p = super::shape::checked_indices(im, node, p, &[rows])?;
                let a = attrs(&[("axis", AttrValue::Int(0)), ("mode", AttrValue::Str("clip".into()))]);
                im.call(node, "take", vec![cache, p], a)?
            }
            None => cache,
        };
        if im.shape_of(node, c)? != [b, seq, half] {
            return Err(node.err(format!("the cos/sin caches must give [{b}, {seq}, {half}] per position")));
        }
        reshape_to(im, node, c, &[b, seq, 1, half])
    };
    let (cos, sin) = (lookup(im, cos)?, lookup(im, sin)?);
    let rot = if r == d { xs } else { last_axis_slice(im, node, xs, 0, r)? };
    let interleaved = node.int("interleaved", 0)? != 0;
    let (x1, x2) = if interleaved {
        let pairs = reshape_to(im, node, rot, &[b, seq, heads, half, 2])?;
        let even = last_axis_slice(im, node, pairs, 0, 1)?;
        let odd = last_axis_slice(im, node, pairs, 1, 2)?;
        (reshape_to(im, node, even, &[b, seq, heads, half])?, reshape_to(im, node, odd, &[b, seq, heads, half])?)
    } else {
        (last_axis_slice(im, node, rot, 0, half)?, last_axis_slice(im, node, rot, half, r)?)
    };
    let (c1, s2) = (im.op(node, "multiply", vec![cos, x1])?, im.op(node, "multiply", vec![sin, x2])?);
    let real = im.op(node, "subtract", vec![c1, s2])?;
    let (s1, c2) = (im.op(node, "multiply", vec![sin, x1])?, im.op(node, "multiply", vec![cos, x2])?);
    let imag = im.op(node, "add", vec![s1, c2])?;
    let rotated = if interleaved {
        let re = reshape_to(im, node, real, &[b, seq, heads, half, 1])?;
        let im_ = reshape_to(im, node, imag, &[b, seq, heads, half, 1])?;
        let both = concat(im, node, vec![re, im_], -1)?;
        reshape_to(im, node, both, &[b, seq, heads, r])?
    } else {
        concat(im, node, vec![real, imag], -1)?
    };
    let y = if r == d {
        rotated
    } else {
        let rest = last_axis_slice(im, node, xs, r, d)?;
        concat(im, node, vec![rotated, rest], -1)?
    };
    Ok(vec![if shape.len() == 4 { transpose(im, y)? } else { reshape_to(im, node, y, &shape)? }])
}
