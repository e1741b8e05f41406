//! SplitConvReduction (GPU pipeline only): a convolution with few outputs and
//! a long reduction per output becomes `S` partial convolutions over slices
//! of the input channels, added up afterwards — split-K, written with
//! standard operators so that every backend and the interpreter run it:
//!
//! ```text
//! conv2d(x, W)                       W: [O, C, KH, KW], groups 1
//!   => p = conv2d(x, W', groups=S)   W': [S·O, C/S, KH, KW] (group s: every
//!                                    output channel over input slice s)
//!      q = stop_fusion(p)
//!      stop_fusion(q[:, 0:O] + q[:, O:2O] + …)   (S slices)
//! ```
//!
//! FoldConstant reorders the weight at build time. `annotation.stop_fusion`
//! keeps the slices and adds out of the convolution's kernel (whose GPU
//! schedule tiles a kernel that is only its reduction nest) and out of the
//! epilogue's (bias, residual, ReLU): three kernels where there was one.
//!
//! Why: a batch-1 layer of a GPU-scheduled network with few outputs leaves
//! most of the GPU idle while each thread runs a long serial reduction.
//! ResNet-18's 7 × 7 stage (25,088 outputs, 4,608 products each) took 561 µs
//! per 3 × 3 convolution on an H200 — 20 % of the whole network — and 93 µs
//! split four ways (`scripts/gpu_split_conv_models.py`, 2026-11-28).

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, Call, ExprId, ExprKind, ExprMutator, Store};
use kiln_ir::DataType;

/// Convolutions with at least this many outputs are left whole: they fill an
/// H200 already. Measured there (one 3 × 3 layer of each ResNet-18 stage,
/// split 1/2/4/8 ways, µs per layer): 200,704 outputs (56 × 56 × 64) 45 / 51
/// / 52 / 44; 100,352 (28 × 28 × 128) 74 / 71 / **50** / 65; 50,176
/// (14 × 14 × 256) 116 / 106 / **105** / 134; 25,088 (7 × 7 × 512) 561 / 158
/// / **93** / 114.
pub const MAX_SPLIT_OUTPUTS: usize = 128 * 1024;

/// The shortest reduction per output that a part may have: shorter parts
/// save less than the partial sums' extra kernel and memory cost (a
/// 1 × 1 convolution of 256 channels stays whole).
pub const MIN_PART_REDUCTION: usize = 288;

/// The ways a reduction is split, most first.
pub const SPLITS: [usize; 2] = [4, 2];

struct Split;

impl ExprMutator for Split {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        if store.op_name(post) != Some("nn.conv2d") {
            return post;
        }
        let Some(call) = store.as_call(post).cloned() else { return post };
        split_conv2d(store, pre, post, &call).unwrap_or(post)
    }
}

/// How many ways to split a convolution of `outputs` elements whose
/// reduction is `channels` input channels × `window` kernel positions:
/// the most of [`SPLITS`] that divides the channels and leaves each part
/// [`MIN_PART_REDUCTION`] products, or none.
pub fn split_ways(outputs: usize, channels: usize, window: usize) -> Option<usize> {
    if outputs >= MAX_SPLIT_OUTPUTS {
        return None;
    }
    SPLITS.into_iter().find(|&s| channels % s == 0 && channels / s * window >= MIN_PART_REDUCTION)
}

fn split_conv2d(store: &mut Store, pre: ExprId, post: ExprId, call: &Call) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    let ExprKind::Constant(c) = store.kind(w) else { return None };
    let wshape = store.constant_data(*c).shape().to_vec();
    let a = &call.attrs;
    if a.str("kernel_layout").ok()? != "OIHW" || a.str("data_layout").ok()? != "NCHW" || a.int("groups").ok()? != 1 {
        return None;
    }
    let out_ty = store.checked_type(pre)?.as_tensor()?.clone();
    let [o, ch, kh, kw] = wshape[..] else { return None };
    if out_ty.dtype != DataType::F32 || out_ty.shape.len() != 4 || out_ty.shape[1] != o {
        return None;
    }
    let s = split_ways(out_ty.shape.iter().product(), ch, kh * kw)?;
    let span = store.span(post).clone();
    let mut op = |name: &str, args: Vec<ExprId>, attrs: Attrs| store.call_op_at(name, args, attrs, span.clone()).ok();
    let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&d| d as i64).collect());
    // W [O, C, KH, KW] -> [O, S, C/S, KH, KW] -> [S, O, C/S, KH, KW] -> [S·O, C/S, KH, KW].
    let parts_of_w = op("reshape", vec![w], Attrs::from_pairs([("newshape", ints(&[o, s, ch / s, kh, kw]))]))?;
    let by_part = op("transpose", vec![parts_of_w], Attrs::from_pairs([("axes", ints(&[1, 0, 2, 3, 4]))]))?;
    let grouped_w = op("reshape", vec![by_part], Attrs::from_pairs([("newshape", ints(&[s * o, ch / s, kh, kw]))]))?;
    let mut attrs = a.clone();
    attrs.set("groups", AttrValue::Int(s as i64));
    if a.get("channels").is_some() {
        attrs.set("channels", AttrValue::Int((s * o) as i64));
    }
    let partials = op("nn.conv2d", vec![x, grouped_w], attrs)?;
    let partials = op("annotation.stop_fusion", vec![partials], Attrs::new())?;
    let mut sum: Option<ExprId> = None;
    for part in 0..s {
        let slice = Attrs::from_pairs([
            ("begin", ints(&[part * o])),
            ("end", ints(&[(part + 1) * o])),
            ("axes", AttrValue::Ints(vec![1])),
        ]);
        let p = op("strided_slice", vec![partials], slice)?;
        sum = Some(match sum {
            None => p,
            Some(acc) => op("add", vec![acc, p], Attrs::new())?,
        });
    }
    // Stop here too: the sum is an elementwise chain, and where the layer's
    // epilogue joins another convolution's output (a residual block's
    // downsampling path), fusion would otherwise pull the chain into that
    // convolution's kernel as a prologue, which the GPU schedule does not tile.
    op("annotation.stop_fusion", vec![sum?], Attrs::new())
}

/// Rewrite one function; returns the new function handle.
pub fn split_conv_reduction(store: &mut Store, func: ExprId) -> ExprId {
    mutate(store, func, &mut Split)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resnet18_stages_split_where_the_h200_measured_a_gain() {
        // (outputs, input channels, window) of ResNet-18's 3 × 3 layers.
        assert_eq!(split_ways(64 * 56 * 56, 64, 9), None);
        assert_eq!(split_ways(128 * 28 * 28, 128, 9), Some(4));
        assert_eq!(split_ways(256 * 14 * 14, 256, 9), Some(4));
        assert_eq!(split_ways(512 * 7 * 7, 512, 9), Some(4));
        // The stride-2 entry of the 28 × 28 stage: 64 channels, halves of 288.
        assert_eq!(split_ways(128 * 28 * 28, 64, 9), Some(2));
        // 1 × 1 downsampling layers are too short to split.
        assert_eq!(split_ways(512 * 7 * 7, 256, 1), None);
        // Channels that no split divides.
        assert_eq!(split_ways(512 * 7 * 7, 513, 9), None);
    }
}
