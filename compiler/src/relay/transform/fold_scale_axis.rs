//! FoldScaleAxis: fold per-channel scales into the weights of `nn.conv2d`,
//! `nn.dense` and `nn.matmul`, so that FoldConstant can then compute the
//! scaled weights at build time (TVM's `FoldScaleAxis`, which is a Sequential
//! of a backward and a forward pass).
//!
//! Backward (a scale after the op, on its output channels):
//! - `conv2d(x, w) * s` → `conv2d(x, w * s')`, `s` of shape `[C,1,1]` or `[1,C,1,1]`;
//! - `(conv2d(x, w) + b) * s` and `bias_add(conv2d(x, w), b) * s` → the bias scaled too;
//! - `dense(x, w) * s` / `matmul(x, w) * s`, `s` of shape `[U]` or `[1,U]`.
//!
//! Forward (a scale before the op, on its input channels):
//! - `conv2d(x * s, w)` → `conv2d(x, w * s')` for `groups = 1`, `s` of shape `[Cin,1,1]` or `[1,Cin,1,1]`;
//! - `dense(x * s, w)` → `dense(x, w * s)`, `s` of shape `[In]` or `[1,In]`.
//!
//! A rewrite happens only when the intermediate result has no other use, and
//! never moves a run-time scale into a constant weight.
//! Types come from the original nodes (run InferType first).

use rustc_hash::FxHashMap;

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, post_order, ExprId, ExprKind, ExprMutator, Store, Type};

/// How many times each node is used inside `func`.
fn use_counts(store: &Store, func: ExprId) -> FxHashMap<ExprId, usize> {
    let mut uses = FxHashMap::default();
    for id in post_order(store, &[func]) {
        store.kind(id).for_each_child(|c| *uses.entry(c).or_insert(0) += 1);
    }
    uses
}

fn shape(store: &Store, id: ExprId) -> Option<Vec<usize>> {
    store.checked_type(id).and_then(Type::as_tensor).map(|t| t.shape.clone())
}

/// Whether folding `scale` into `weight` pays: not when the weight is a
/// constant and the scale is computed at run time (a squeeze-and-excitation
/// gate) — the product would then be computed per inference over the larger
/// weight, and the weight could no longer be packed at build time.
fn worth_folding(store: &Store, weight: ExprId, scale: ExprId) -> bool {
    let constant = |id| matches!(store.kind(id), ExprKind::Constant(_));
    constant(scale) || !constant(weight)
}

fn args(store: &Store, id: ExprId) -> Vec<ExprId> {
    store.as_call(id).map(|c| c.args.clone()).unwrap_or_default()
}

/// Whether `s` (a shape) is a per-channel vector of `c` channels laid out for
/// the channel axis of an NCHW tensor: `[c,1,1]` or `[1,c,1,1]`.
fn is_nchw_channel_vector(s: &[usize], c: usize) -> bool {
    matches!(s, [a, 1, 1] if *a == c) || matches!(s, [1, a, 1, 1] if *a == c)
}

/// Whether `s` is a vector on the last axis of a 2-D tensor with `u` columns: `[u]` or `[1,u]`.
fn is_row_vector(s: &[usize], u: usize) -> bool {
    matches!(s, [a] if *a == u) || matches!(s, [1, a] if *a == u)
}

fn call(store: &mut Store, op: &str, args: Vec<ExprId>, attrs: Attrs, at: ExprId) -> Option<ExprId> {
    let span = store.span(at).clone();
    store.call_op_at(op, args, attrs, span).ok()
}

fn reshape(store: &mut Store, x: ExprId, shape: &[usize], at: ExprId) -> Option<ExprId> {
    let a = Attrs::from_pairs([("newshape", AttrValue::Ints(shape.iter().map(|&d| d as i64).collect()))]);
    call(store, "reshape", vec![x], a, at)
}

fn mul(store: &mut Store, a: ExprId, b: ExprId, at: ExprId) -> Option<ExprId> {
    call(store, "multiply", vec![a, b], Attrs::new(), at)
}

/// The same call as `op_call` with its weight (second argument) replaced.
fn with_weight(store: &mut Store, op_call: ExprId, data: ExprId, weight: ExprId) -> Option<ExprId> {
    let c = store.as_call(op_call)?.clone();
    let name = store.op_name(op_call)?;
    let span = store.span(op_call).clone();
    store.call_op_at(name, vec![data, weight], c.attrs, span).ok()
}

struct Backward {
    uses: FxHashMap<ExprId, usize>,
}

impl Backward {
    fn single_use(&self, id: ExprId) -> bool {
        self.uses.get(&id).copied().unwrap_or(0) <= 1
    }

    /// `anchor_post * scale` with `anchor_pre` the original anchor (conv2d/dense/matmul).
    fn fold_into(
        &self,
        store: &mut Store,
        anchor_pre: ExprId,
        anchor_post: ExprId,
        scale: ExprId,
        scale_shape: &[usize],
    ) -> Option<ExprId> {
        let op = store.op_name(anchor_post)?;
        if !matches!(op, "nn.conv2d" | "nn.dense" | "nn.matmul") {
            return None;
        }
        let out = shape(store, anchor_pre)?;
        let pre_args = args(store, anchor_pre);
        let w_shape = shape(store, *pre_args.get(1)?)?;
        let [x, w] = args(store, anchor_post)[..] else { return None };
        if !worth_folding(store, w, scale) {
            return None;
        }
        let scaled_w = match op {
            "nn.conv2d" if out.len() == 4 && is_nchw_channel_vector(scale_shape, out[1]) => {
                let s = reshape(store, scale, &[out[1], 1, 1, 1], anchor_post)?;
                mul(store, w, s, anchor_post)?
            }
            "nn.dense" if out.len() == 2 && is_row_vector(scale_shape, out[1]) => {
                let s = reshape(store, scale, &[out[1], 1], anchor_post)?;
                mul(store, w, s, anchor_post)?
            }
            "nn.matmul" if out.len() == 2 && is_row_vector(scale_shape, out[1]) => {
                let c = store.as_call(anchor_post)?;
                let transpose_b = c.attrs.bool("transpose_b").ok()?;
                let s_shape = if transpose_b { [out[1], 1] } else { [1, out[1]] };
                if w_shape.len() != 2 {
                    return None;
                }
                let s = reshape(store, scale, &s_shape, anchor_post)?;
                mul(store, w, s, anchor_post)?
            }
            _ => return None,
        };
        with_weight(store, anchor_post, x, scaled_w)
    }
}

impl ExprMutator for Backward {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        if store.op_name(post) != Some("multiply") {
            return post;
        }
        let (pre_args, post_args) = (args(store, pre), args(store, post));
        // The scale may be on either side of the product.
        for (side, other) in [(0, 1), (1, 0)] {
            let (lhs_pre, lhs_post, scale) = (pre_args[side], post_args[side], post_args[other]);
            let Some(scale_shape) = shape(store, pre_args[other]) else { continue };
            if !self.single_use(lhs_pre) || shape(store, pre) != shape(store, lhs_pre) {
                continue;
            }
            // Direct: anchor * s.
            if let Some(new) = self.fold_into(store, lhs_pre, lhs_post, scale, &scale_shape) {
                return new;
            }
            // Through a bias: (anchor + b) * s or bias_add(anchor, b) * s.
            let bias_op = store.op_name(lhs_post);
            if !matches!(bias_op, Some("add") | Some("nn.bias_add")) {
                continue;
            }
            let (inner_pre, inner_post) = (args(store, lhs_pre), args(store, lhs_post));
            if inner_pre.len() != 2 || inner_post.len() != 2 || !self.single_use(inner_pre[0]) {
                continue;
            }
            let Some(bias_shape) = shape(store, inner_pre[1]) else { continue };
            let Some(out) = shape(store, inner_pre[0]) else { continue };
            let Some(folded) = self.fold_into(store, inner_pre[0], inner_post[0], scale, &scale_shape) else {
                continue;
            };
            // Scale the bias in its own layout.
            let bias_scale = if bias_op == Some("nn.bias_add") {
                let channels = out.get(1).copied().unwrap_or(0);
                reshape(store, scale, &[channels], post)
            } else if bias_shape == scale_shape || bias_shape.iter().product::<usize>() == 1 {
                Some(scale)
            } else {
                None
            };
            let Some(bias_scale) = bias_scale else { continue };
            let Some(new_bias) = mul(store, inner_post[1], bias_scale, post) else { continue };
            let Some(name) = bias_op else { continue };
            let attrs = store.as_call(lhs_post).map(|c| c.attrs.clone()).unwrap_or_default();
            let span = store.span(lhs_post).clone();
            if let Ok(new) = store.call_op_at(name, vec![folded, new_bias], attrs, span) {
                return new;
            }
        }
        post
    }
}

struct Forward {
    uses: FxHashMap<ExprId, usize>,
}

impl ExprMutator for Forward {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        let Some(op) = store.op_name(post) else { return post };
        if !matches!(op, "nn.conv2d" | "nn.dense") {
            return post;
        }
        let (pre_args, post_args) = (args(store, pre), args(store, post));
        let (data_pre, data_post, w) = (pre_args[0], post_args[0], post_args[1]);
        if store.op_name(data_post) != Some("multiply") || self.uses.get(&data_pre).copied().unwrap_or(0) > 1 {
            return post;
        }
        let Some(w_shape) = shape(store, pre_args[1]) else { return post };
        let (mul_pre, mul_post) = (args(store, data_pre), args(store, data_post));
        if mul_pre.len() != 2 || mul_post.len() != 2 {
            return post;
        }
        for (side, other) in [(0, 1), (1, 0)] {
            let Some(s_shape) = shape(store, mul_pre[other]) else { continue };
            if shape(store, mul_pre[side]) != shape(store, data_pre) {
                continue;
            }
            let (x, s) = (mul_post[side], mul_post[other]);
            if !worth_folding(store, w, s) {
                continue;
            }
            let new_w = match op {
                "nn.conv2d" => {
                    let groups = store.as_call(post).and_then(|c| c.attrs.int("groups").ok());
                    if groups != Some(1) || w_shape.len() != 4 || !is_nchw_channel_vector(&s_shape, w_shape[1]) {
                        continue;
                    }
                    reshape(store, s, &[1, w_shape[1], 1, 1], post).and_then(|s| mul(store, w, s, post))
                }
                _ => {
                    if w_shape.len() != 2 || !is_row_vector(&s_shape, w_shape[1]) {
                        continue;
                    }
                    reshape(store, s, &[1, w_shape[1]], post).and_then(|s| mul(store, w, s, post))
                }
            };
            if let Some(new) = new_w.and_then(|nw| with_weight(store, post, x, nw)) {
                return new;
            }
        }
        post
    }
}

/// The backward half: scales after conv2d/dense/matmul; returns the new function.
pub fn backward_fold_scale_axis(store: &mut Store, func: ExprId) -> ExprId {
    let uses = use_counts(store, func);
    mutate(store, func, &mut Backward { uses })
}

/// The forward half: scales before conv2d/dense; returns the new function.
pub fn forward_fold_scale_axis(store: &mut Store, func: ExprId) -> ExprId {
    let uses = use_counts(store, func);
    mutate(store, func, &mut Forward { uses })
}
