//! AlterOpLayout: weights known at build time get the layout the kernels read
//! fastest.
//!
//! - `nn.dense(x, W)` and `nn.matmul(x, W)` (either orientation of `W`) with
//!   a constant `W` become `nn.contrib_dense_pack(x, P)` (TVM's name), `P`
//!   the weight in column panels `[units / b, in, b]`: the matmul schedule's
//!   register tile covers `b` columns, which are then contiguous for every
//!   reduction step and panel after panel in memory — one sequential stream
//!   per tile instead of rows a matrix width apart (which defeats the
//!   prefetcher; the classifier of MobileNetV2 streamed its 5 MB at 9 GB/s),
//!   and no panel copy at run time. Where no whole-vector panel divides the
//!   columns, `nn.matmul(x, transpose(W))` keeps the columns contiguous.
//! - `nn.conv2d` with a constant OIHW weight becomes `OIHW<lanes>o`.
//!
//! FoldConstant then turns the reshapes and transposes into the packed constant.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, Call, ExprId, ExprKind, ExprMutator, Store};

use crate::schedule::matmul_tile;
use crate::target::VectorUnit;

struct Alter {
    unit: VectorUnit,
}

impl ExprMutator for Alter {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        let Some(name) = store.op_name(post) else { return post };
        let Some(call) = store.as_call(post).cloned() else { return post };
        if name == "nn.conv2d" {
            return pack_conv2d_weight(store, post, &call, self.unit.f32_lanes).unwrap_or(post);
        }
        let transposed_weight = match name {
            "nn.dense" => true,
            "nn.matmul" if !call.attrs.bool("transpose_a").unwrap_or(true) => {
                call.attrs.bool("transpose_b").unwrap_or(false)
            }
            _ => return post,
        };
        let [_, w] = call.args[..] else { return post };
        if !matches!(store.kind(w), ExprKind::Constant(_)) {
            return post;
        }
        pack_dense_weight(store, pre, post, &call, transposed_weight, self.unit)
            .or_else(|| transpose_dense_weight(store, post, &call, transposed_weight))
            .unwrap_or(post)
    }
}

/// `nn.contrib_dense_pack(x, panels(W))`, where the matmul tile for `x`'s
/// rows spans whole vectors (see the module docs).
fn pack_dense_weight(
    store: &mut Store,
    pre: ExprId,
    post: ExprId,
    call: &Call,
    transposed: bool,
    unit: VectorUnit,
) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    let ExprKind::Constant(c) = store.kind(w) else { return None };
    let shape = store.constant_data(*c).shape().to_vec();
    // The rows of one product (the schedule's `i` loop): the data's
    // second-to-last axis, read from the call's type before the rewrite.
    let pre_x = *store.as_call(pre)?.args.first()?;
    let x_shape = store.checked_type(pre_x)?.as_tensor()?.shape.clone();
    let rows = if x_shape.len() >= 2 { x_shape[x_shape.len() - 2] } else { 1 };
    let [a, b] = shape[..] else { return None };
    let (k, n) = if transposed { (b, a) } else { (a, b) };
    let (_, panel) = matmul_tile(rows as i64, n as i64, unit);
    let panel = panel as usize;
    if panel % unit.f32_lanes != 0 || n % panel != 0 {
        return None;
    }
    let span = store.span(post).clone();
    let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&d| d as i64).collect());
    // [N, K] → [N/b, b, K] → [N/b, K, b]; [K, N] → [K, N/b, b] → [N/b, K, b].
    let (split, axes) =
        if transposed { (ints(&[n / panel, panel, k]), [0, 2, 1]) } else { (ints(&[k, n / panel, panel]), [1, 0, 2]) };
    let r = store.call_op_at("reshape", vec![w], Attrs::from_pairs([("newshape", split)]), span.clone()).ok()?;
    let packed =
        store.call_op_at("transpose", vec![r], Attrs::from_pairs([("axes", ints(&axes))]), span.clone()).ok()?;
    let attrs = Attrs::from_pairs([
        ("units", AttrValue::Int(n as i64)),
        ("weight_layout", AttrValue::Str(format!("NC{panel}n"))),
    ]);
    store.call_op_at("nn.contrib_dense_pack", vec![x, packed], attrs, span).ok()
}

/// `nn.matmul(x, transpose(W))` for a `W` stored `[units, in]`: the matmul
/// schedule vectorizes over the output columns, contiguous after this.
fn transpose_dense_weight(store: &mut Store, post: ExprId, call: &Call, transposed: bool) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    if !transposed {
        return None;
    }
    let span = store.span(post).clone();
    let wt = store
        .call_op_at("transpose", vec![w], Attrs::from_pairs([("axes", AttrValue::Ints(vec![1, 0]))]), span.clone())
        .ok()?;
    let mut attrs = vec![("transpose_a", AttrValue::Bool(false)), ("transpose_b", AttrValue::Bool(false))];
    if let Ok(Some(units)) = call.attrs.opt_int("units") {
        attrs.push(("units", AttrValue::Int(units)));
    }
    store.call_op_at("nn.matmul", vec![x, wt], Attrs::from_pairs(attrs), span).ok()
}

/// The shortest reduction per output (I·KH·KW) whose convolution is packed:
/// MobileNetV2's 3 × 3 × 3 stem stays OIHW, LeNet's 6 × 5 × 5 and ResNet's
/// 3 × 7 × 7 stem are packed (measured on Zen 3).
const MIN_PACKED_REDUCTION: usize = 32;

/// Packs a constant OIHW weight into `OIHW<block>o`: `block` output channels
/// (one vector of the target) contiguous.
fn pack_conv2d_weight(store: &mut Store, post: ExprId, call: &Call, block: usize) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    let ExprKind::Constant(c) = store.kind(w) else { return None };
    let shape = store.constant_data(*c).shape().to_vec();
    let layout = call.attrs.str("kernel_layout").ok()?;
    // A short reduction per output (an image's 3 channels × 3 × 3) does not
    // pay for the channel-major write-back: such layers keep OIHW. Few input
    // channels over a large window (LeNet's 6 × 5 × 5, ResNet's 3 × 7 × 7
    // stem) do pay, and rows of 10 or 28 columns fit no whole vector.
    if layout != "OIHW"
        || call.attrs.int("groups").ok()? != 1
        || shape.len() != 4
        || shape[0] % block != 0
        || shape[1] * shape[2] * shape[3] < MIN_PACKED_REDUCTION
    {
        return None;
    }
    let span = store.span(post).clone();
    let k = block as i64;
    let split: Vec<i64> = vec![shape[0] as i64 / k, k, shape[1] as i64, shape[2] as i64, shape[3] as i64];
    let r = store
        .call_op_at("reshape", vec![w], Attrs::from_pairs([("newshape", AttrValue::Ints(split))]), span.clone())
        .ok()?;
    let axes = AttrValue::Ints(vec![0, 2, 3, 4, 1]);
    let packed = store.call_op_at("transpose", vec![r], Attrs::from_pairs([("axes", axes)]), span.clone()).ok()?;
    let mut attrs = call.attrs.clone();
    attrs.set("kernel_layout", AttrValue::Str(format!("OIHW{block}o")));
    store.call_op_at("nn.conv2d", vec![x, packed], attrs, span).ok()
}

/// Rewrite one function; returns the new function handle.
pub fn alter_op_layout(store: &mut Store, func: ExprId, unit: VectorUnit) -> ExprId {
    mutate(store, func, &mut Alter { unit })
}
