//! FoldScaleAxis: fold per-channel scales into the weights of `nn.conv2d`
//! and `nn.dense` (TVM v0.16's `FoldScaleAxis`, a Sequential of a backward
//! pass, a forward pass and FoldConstant, which then computes the scaled
//! weights at build time).
//!
//! Both halves follow TVM's design: a *prep* phase finds, for each
//! expression, the `Message` a scale may carry there (on which axes, and
//! whether it must be non-negative), starting from the consumers that absorb
//! it; a *transform* phase then moves the scale only where the prep said it
//! can arrive.
//!
//! - Forward (`forward.rs`): `conv2d(relu(x * s) + b, w)` →
//!   `conv2d(relu(x) + b / s, w * s')`. The prep runs backwards from each
//!   `nn.conv2d` / `nn.dense` (scale on its data's channel axis) through
//!   `nn.relu` / `nn.leaky_relu` (non-negative scales only) and
//!   `add` / `subtract` (the other operand a broadcast bias, divided by the
//!   scale); the rewrite carries the scaled value forward from the `multiply`.
//! - Backward (`backward.rs`): `relu(conv2d(x, w) + b) * s` →
//!   `relu(conv2d(x, w * s') + b * s)`. The prep runs forwards from each
//!   `nn.conv2d` / `nn.dense` (scale on its output channel axis) through
//!   `nn.relu` / `nn.leaky_relu`, `add` / `subtract` (a bias, or two such
//!   paths of one shape: dual paths) and `nn.bias_add`; the transform pushes
//!   the scale of a `multiply` down to the weights.
//!
//! A scale is taken only where every use is accounted for: a forward message
//! is the intersection over all consumers of a value, a backward one needs
//! each expression on the path to have one use. Convolutions are folded for
//! `groups = 1` or depthwise (one filter per group), plain layouts
//! (NCHW/NHWC data, OIHW/HWIO/… weights) only. Types come from the original
//! nodes (run InferType first).
//!
//! Where kiln differs from TVM, deliberately:
//! - A run-time (non-constant) scale is never moved into a constant weight
//!   (the product would be computed per inference over the larger weight,
//!   and the weight could no longer be packed at build time): a
//!   squeeze-and-excitation gate stays a multiply. The messages record
//!   whether a weight they lead to is a constant.
//! - A scalar scale is broadcast to a channel vector with `broadcast_to`
//!   (kiln has no `repeat`; TVM writes `repeat(expand_dims(s))`).
//! - Only floating-point tensors are folded (the forward rewrite divides
//!   biases), and a constant scale holding a zero is not moved past a bias
//!   (`b / 0`): the scale is applied before the bias instead.
//! - Where two backward paths meet at an `add`, a path that broadcasts onto
//!   the other is scaled as a bias (TVM scales it as a path whenever it
//!   could take a scale, though the add's message, and so the check of the
//!   scale's sign, came from the other path alone); two paths of one shape
//!   keep the stricter of their requirements (TVM the left one's). A path
//!   longer than `MAX_PATH` operators is not folded (the backward
//!   transform recurses along it).
//! - `nn.dense` takes a scale on the last axis of its data and result (TVM:
//!   axis 1, the same for 2-D data); the backward half also folds into a 2-D
//!   `nn.matmul` (as kiln did before).

mod backward;
mod forward;

use rustc_hash::FxHashMap;

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::ty::TensorType;
use kiln_ir::relay::{post_order, Callee, ExprId, ExprKind, Store, Type};

pub use backward::backward_fold_scale_axis;
pub use forward::forward_fold_scale_axis;

/// The longest chain of operators a backward scale is pushed through.
const MAX_PATH: usize = 64;

/// Where a scale may go at an expression: sorted `axes` of its value that
/// may carry a per-axis scale. TVM's `Message`; `None` (no message) means no
/// scale can pass.
#[derive(Clone, Debug, PartialEq)]
struct Message {
    /// Sorted, never empty.
    axes: Vec<usize>,
    /// Only a non-negative constant scale may pass (a relu is on the way).
    positive: bool,
    /// A weight the scale would go into is a constant (kiln's rule: no run-time scale then).
    into_constant: bool,
    /// Operators between here and the consuming weight (backward only).
    depth: usize,
}

impl Message {
    fn new(axes: Vec<usize>, into_constant: bool) -> Self {
        Message { axes, positive: false, into_constant, depth: 0 }
    }

    /// The same message past a relu: only a non-negative scale commutes with it.
    fn through_relu(&self) -> Self {
        Message { positive: true, depth: self.depth + 1, ..self.clone() }
    }
}

/// TVM's `Intersect`: the axes both allow, the requirements of either.
fn intersect(a: &Option<Message>, b: &Option<Message>) -> Option<Message> {
    let (a, b) = (a.as_ref()?, b.as_ref()?);
    let axes: Vec<usize> = a.axes.iter().copied().filter(|x| b.axes.contains(x)).collect();
    (!axes.is_empty()).then(|| Message {
        axes,
        positive: a.positive || b.positive,
        into_constant: a.into_constant || b.into_constant,
        depth: a.depth.max(b.depth),
    })
}

/// How many times each node is used inside `func`.
fn use_counts(store: &Store, func: ExprId) -> FxHashMap<ExprId, usize> {
    let mut uses = FxHashMap::default();
    for id in post_order(store, &[func]) {
        store.kind(id).for_each_child(|c| *uses.entry(c).or_insert(0) += 1);
    }
    uses
}

fn tensor_type(store: &Store, id: ExprId) -> Option<&TensorType> {
    store.checked_type(id).and_then(Type::as_tensor)
}

fn shape(store: &Store, id: ExprId) -> Option<Vec<usize>> {
    tensor_type(store, id).map(|t| t.shape.clone())
}

fn args(store: &Store, id: ExprId) -> Vec<ExprId> {
    store.as_call(id).map(|c| c.args.clone()).unwrap_or_default()
}

fn attrs(store: &Store, id: ExprId) -> Attrs {
    store.as_call(id).map(|c| c.attrs.clone()).unwrap_or_default()
}

/// TVM's `MatchBroadcastToLeftAxes` without the value: whether `rhs`
/// broadcasts into `lhs` with the dimensions of `lhs` at `axes` and 1
/// elsewhere. Returns the axes of `rhs` to squeeze to get a vector over `axes`.
fn match_broadcast(lhs: &[usize], rhs: &[usize], axes: &[usize]) -> Option<Vec<usize>> {
    if lhs.len() < rhs.len() {
        return None;
    }
    let base = lhs.len() - rhs.len();
    let mut squeeze = Vec::new();
    for (i, &d) in lhs.iter().enumerate() {
        if axes.contains(&i) {
            if i < base || rhs[i - base] != d {
                return None;
            }
        } else if i >= base {
            if rhs[i - base] != 1 {
                return None;
            }
            squeeze.push(i - base);
        }
    }
    Some(squeeze)
}

/// TVM's `MatchBroadcastToLeftAxes` with the value: `rhs` (of shape
/// `rhs_shape`) as a scale over the `axes` of a value of shape `lhs`,
/// squeezed to those axes; a scalar is broadcast to them.
fn scale_over_axes(
    store: &mut Store,
    lhs: &[usize],
    rhs_shape: &[usize],
    axes: &[usize],
    rhs: ExprId,
    at: ExprId,
) -> Option<ExprId> {
    if rhs_shape.is_empty() {
        let dims: Vec<i64> = axes.iter().map(|&a| lhs.get(a).map(|&d| d as i64)).collect::<Option<_>>()?;
        return call(store, "broadcast_to", vec![rhs], Attrs::from_pairs([("shape", AttrValue::Ints(dims))]), at);
    }
    let squeeze = match_broadcast(lhs, rhs_shape, axes)?;
    if squeeze.is_empty() {
        return Some(rhs);
    }
    let axis = AttrValue::Ints(squeeze.iter().map(|&a| a as i64).collect());
    call(store, "squeeze", vec![rhs], Attrs::from_pairs([("axis", axis)]), at)
}

fn call(store: &mut Store, op: &str, args: Vec<ExprId>, attrs: Attrs, at: ExprId) -> Option<ExprId> {
    let span = store.span(at).clone();
    store.call_op_at(op, args, attrs, span).ok()
}

fn mul(store: &mut Store, a: ExprId, b: ExprId, at: ExprId) -> Option<ExprId> {
    call(store, "multiply", vec![a, b], Attrs::new(), at)
}

fn expand_dims(store: &mut Store, x: ExprId, axis: usize, num_newaxis: usize, at: ExprId) -> Option<ExprId> {
    let a =
        Attrs::from_pairs([("axis", AttrValue::Int(axis as i64)), ("num_newaxis", AttrValue::Int(num_newaxis as i64))]);
    call(store, "expand_dims", vec![x], a, at)
}

/// TVM's `ExpandBiasToMatchAxis`: a vector over `axes` (sorted) reshaped with
/// `expand_dims` so that it broadcasts onto those axes of a rank-`ndim` tensor.
fn expand_to_axes(store: &mut Store, scale: ExprId, ndim: usize, axes: &[usize], at: ExprId) -> Option<ExprId> {
    let mut scale = scale;
    for i in (1..=axes.len()).rev() {
        let pad =
            if i == axes.len() { ndim.checked_sub(axes[i - 1] + 1)? } else { axes[i].checked_sub(axes[i - 1])? };
        if pad > 0 {
            scale = expand_dims(store, scale, i, pad, at)?;
        }
    }
    Some(scale)
}

/// TVM's `ReshapeOrExpandToMatchAxis`: `expand_dims` for one axis, else a
/// `reshape` to the dimensions of `shape` at `axes` and 1 elsewhere.
fn reshape_or_expand(store: &mut Store, scale: ExprId, shape: &[usize], axes: &[usize], at: ExprId) -> Option<ExprId> {
    if axes.len() <= 1 {
        return expand_to_axes(store, scale, shape.len(), axes, at);
    }
    let dims = shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { d as i64 } else { 1 }).collect();
    call(store, "reshape", vec![scale], Attrs::from_pairs([("newshape", AttrValue::Ints(dims))]), at)
}

/// The constant under the layout-only operators TVM's `IsAllPositiveConstant` looks through.
fn peel_constant(store: &Store, id: ExprId) -> Option<&kiln_ir::Tensor> {
    let mut id = id;
    loop {
        match store.kind(id) {
            ExprKind::Constant(c) => return Some(store.constant_data(*c)),
            ExprKind::Call(c)
                if matches!(
                    store.op_name(id),
                    Some("expand_dims" | "reshape" | "transpose" | "squeeze" | "broadcast_to")
                ) =>
            {
                id = *c.args.first()?
            }
            _ => return None,
        }
    }
}

/// Whether the scale is known at build time: only then may it go into a constant weight.
fn is_constant_scale(store: &Store, id: ExprId) -> bool {
    peel_constant(store, id).is_some()
}

/// TVM's `IsAllPositiveConstant`: a constant with no negative (or NaN) element.
fn is_non_negative_constant(store: &Store, id: ExprId) -> bool {
    peel_constant(store, id).is_some_and(|t| t.to_f64_vec().iter().all(|&v| v >= 0.0))
}

/// A constant scale with a zero element (it cannot divide a bias).
fn has_zero(store: &Store, id: ExprId) -> bool {
    peel_constant(store, id).is_some_and(|t| t.to_f64_vec().contains(&0.0))
}

/// Whether a scale may go where `m` says, by kiln's and TVM's rules.
fn scale_allowed(store: &Store, m: &Message, scale: ExprId) -> bool {
    (!m.positive || is_non_negative_constant(store, scale)) && (!m.into_constant || is_constant_scale(store, scale))
}

/// The weight's constness, for `Message::into_constant`: a constant, or an
/// operator over constants only — the backward half leaves a folded weight as
/// `multiply(W, s)` for FoldConstant to compute after the forward half, and a
/// squeeze-and-excitation gate after a batch-normalized convolution must
/// still stay out of that weight (PP-LCNet's 512 × 512 convolutions were
/// scaled per inference and left unpacked). Bounded depth: a deeper chain
/// counts as not constant, which only folds less.
fn is_constant(store: &Store, id: ExprId) -> bool {
    fn walk(store: &Store, id: ExprId, fuel: &mut u32) -> bool {
        if *fuel == 0 {
            return false;
        }
        *fuel -= 1;
        match store.kind(id) {
            ExprKind::Constant(_) => true,
            ExprKind::Call(c) if matches!(c.callee, Callee::Op(_)) => {
                let args = c.args.clone();
                args.into_iter().all(|a| walk(store, a, fuel))
            }
            _ => false,
        }
    }
    walk(store, id, &mut 32)
}

/// What a foldable `nn.conv2d` looks like: its channel axis (of the data for
/// the forward pass, of the output for the backward one) and the weight axis
/// a scale on it multiplies.
struct Conv {
    channel_axis: usize,
    /// Weight axis for a scale on the data channels (`I`, or `O` when depthwise).
    in_axis: usize,
    /// Weight axis for a scale on the output channels (`O`).
    out_axis: usize,
    weight_ndim: usize,
}

/// The foldable shape of conv2d `id` (TVM's `ConvForwardPrep` /
/// `ConvBackwardPrep` conditions): plain layouts, `groups = 1` or depthwise,
/// one float type throughout. `output`: the channel axis of the output layout.
fn conv(store: &Store, id: ExprId, output: bool) -> Option<Conv> {
    let [data, weight] = args(store, id)[..] else { return None };
    let a = attrs(store, id);
    let data_layout = a.str("data_layout").ok()?;
    let kernel_layout = a.str("kernel_layout").ok()?;
    let out_layout = a.str("out_layout").ok().filter(|l| !l.is_empty()).unwrap_or(data_layout);
    let layout = if output { out_layout } else { data_layout };
    let plain = |l: &str| l.chars().all(|c| c.is_ascii_uppercase());
    if ![data_layout, kernel_layout, out_layout].iter().all(|l| plain(l)) {
        return None;
    }
    let channel_axis = layout.find('C')?;
    let (i_axis, o_axis) = (kernel_layout.find('I')?, kernel_layout.find('O')?);
    let w = tensor_type(store, weight)?;
    if w.shape.len() != kernel_layout.len() || !same_float_type(store, &[data, weight, id]) {
        return None;
    }
    let groups = a.int("groups").ok()?;
    let depthwise = w.shape[o_axis] as i64 == groups && w.shape[i_axis] == 1;
    if groups != 1 && !depthwise {
        return None;
    }
    Some(Conv {
        channel_axis,
        in_axis: if depthwise { o_axis } else { i_axis },
        out_axis: o_axis,
        weight_ndim: w.shape.len(),
    })
}

/// The data axis `nn.dense` `id` can take a scale on (its last), if its
/// operands and result share one float type and its weight is 2-D.
fn dense_axis(store: &Store, id: ExprId) -> Option<usize> {
    let [data, weight] = args(store, id)[..] else { return None };
    let rank = shape(store, data)?.len();
    (rank >= 1 && shape(store, weight)?.len() == 2 && same_float_type(store, &[data, weight, id])).then(|| rank - 1)
}

/// Whether every one of `ids` is a float tensor of one dtype.
fn same_float_type(store: &Store, ids: &[ExprId]) -> bool {
    let dtypes: Option<Vec<_>> = ids.iter().map(|&i| tensor_type(store, i).map(|t| t.dtype)).collect();
    dtypes.is_some_and(|d| d[0].is_float() && d.iter().all(|&x| x == d[0]))
}

/// The same call as `pre` (operator and attributes) over `new_args`.
fn same_call(store: &mut Store, pre: ExprId, new_args: Vec<ExprId>) -> Option<ExprId> {
    let op = store.op_name(pre)?;
    call(store, op, new_args, attrs(store, pre), pre)
}

/// `pre` over its children mapped by `f`; `pre` itself when none changed.
fn rebuild(store: &mut Store, pre: ExprId, f: impl Fn(ExprId) -> ExprId) -> ExprId {
    let mut changed = false;
    store.kind(pre).for_each_child(|c| changed |= f(c) != c);
    if !changed {
        return pre;
    }
    let kind = store.kind(pre).map_children(f);
    let span = store.span(pre).clone();
    store.add(kind, span)
}
