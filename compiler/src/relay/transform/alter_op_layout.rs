//! AlterOpLayout: weights known at build time get the layout the kernels read
//! fastest. `nn.dense(x, W)` and `nn.matmul(x, W, transpose_b=true)` with a
//! constant `W` ([units, in]) become `nn.matmul(x, transpose(W))`: the matmul
//! schedule vectorizes over the output columns, which are then contiguous in
//! the weight. FoldConstant turns `transpose(W)` into the transposed constant.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, ExprId, ExprKind, ExprMutator, Store};

struct Alter {
    /// Output channels per packed convolution weight block.
    conv_block: usize,
}

impl ExprMutator for Alter {
    fn rewrite_call(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        let Some(name) = store.op_name(post) else { return post };
        let Some(call) = store.as_call(post).cloned() else { return post };
        if name == "nn.conv2d" {
            return pack_conv2d_weight(store, post, &call, self.conv_block).unwrap_or(post);
        }
        let transposed_weight = match name {
            "nn.dense" => true,
            "nn.matmul" => {
                call.attrs.bool("transpose_b").unwrap_or(false) && !call.attrs.bool("transpose_a").unwrap_or(true)
            }
            _ => false,
        };
        let [x, w] = call.args[..] else { return post };
        if !transposed_weight || !matches!(store.kind(w), ExprKind::Constant(_)) {
            return post;
        }
        let span = store.span(post).clone();
        let Ok(wt) = store.call_op_at(
            "transpose",
            vec![w],
            Attrs::from_pairs([("axes", AttrValue::Ints(vec![1, 0]))]),
            span.clone(),
        ) else {
            return post;
        };
        let mut attrs = vec![("transpose_a", AttrValue::Bool(false)), ("transpose_b", AttrValue::Bool(false))];
        if let Ok(Some(units)) = call.attrs.opt_int("units") {
            attrs.push(("units", AttrValue::Int(units)));
        }
        store.call_op_at("nn.matmul", vec![x, wt], Attrs::from_pairs(attrs), span).unwrap_or(post)
    }
}

/// The shortest reduction per output (I·KH·KW) whose convolution is packed:
/// MobileNetV2's 3 × 3 × 3 stem stays OIHW, LeNet's 6 × 5 × 5 and ResNet's
/// 3 × 7 × 7 stem are packed (measured on Zen 3).
const MIN_PACKED_REDUCTION: usize = 32;

/// Packs a constant OIHW weight into `OIHW<block>o`: `block` output channels
/// (one vector of the target) contiguous.
fn pack_conv2d_weight(store: &mut Store, post: ExprId, call: &kiln_ir::relay::Call, block: usize) -> Option<ExprId> {
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
pub fn alter_op_layout(store: &mut Store, func: ExprId, conv_block: usize) -> ExprId {
    mutate(store, func, &mut Alter { conv_block })
}
