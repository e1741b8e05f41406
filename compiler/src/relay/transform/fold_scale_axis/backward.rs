//! BackwardFoldScaleAxis: a scale after `nn.conv2d` / `nn.dense` (on their
//! output channels) goes into the weight, back through relus and biases.
//!
//! Prep (TVM's `BackwardPrep`): children first, each conv2d/dense sends its
//! output channel axis up through the operators that commute with a
//! per-channel scale; an expression used more than once sends nothing, so a
//! scale is only moved where it is the sole use. Transform (TVM's
//! `BackwardTransformer`): each `multiply` whose scale broadcasts onto the
//! message of its other operand pushes that scale down the path, scaling the
//! biases on the way and, at the end, the weights.

use rustc_hash::{FxHashMap, FxHashSet};

use kiln_ir::relay::{post_order, Callee, ExprId, ExprKind, Store};

use super::{
    args, attrs, conv, dense_axis, expand_to_axes, is_constant, match_broadcast, mul, rebuild, reshape_or_expand,
    same_call, same_float_type, scale_allowed, scale_over_axes, shape, use_counts, Message, MAX_PATH,
};

type Messages = FxHashMap<ExprId, Message>;

/// What the result of operator call `id` may carry, given its arguments' messages.
fn prep_call(store: &Store, id: ExprId, ins: &[Option<&Message>]) -> Option<Message> {
    let a = args(store, id);
    let deeper = |m: &Message| Message { depth: m.depth + 1, ..m.clone() };
    let m = match store.op_name(id)? {
        "nn.relu" | "nn.leaky_relu" => ins[0]?.through_relu(),
        "add" | "subtract" => {
            let (l, r) = (shape(store, a[0])?, shape(store, a[1])?);
            match (ins[0], ins[1]) {
                (Some(m), _) if match_broadcast(&l, &r, &m.axes).is_some() => deeper(m),
                (_, Some(m)) if match_broadcast(&r, &l, &m.axes).is_some() => deeper(m),
                // Two scaled paths of one shape (TVM keeps the left requirement; both hold here).
                (Some(x), Some(y)) if x.axes == y.axes && l == r => Message {
                    axes: x.axes.clone(),
                    positive: x.positive || y.positive,
                    into_constant: x.into_constant || y.into_constant,
                    depth: x.depth.max(y.depth) + 1,
                },
                _ => return None,
            }
        }
        "nn.bias_add" => {
            let m = ins[0]?;
            let rank = shape(store, a[0])?.len() as i64;
            let axis = attrs(store, id).int("axis").ok()?;
            let axis = if axis < 0 { axis + rank } else { axis };
            if m.axes[..] != [axis as usize] {
                return None;
            }
            deeper(m)
        }
        "nn.conv2d" => Message::new(vec![conv(store, id, true)?.channel_axis], is_constant(store, a[1])),
        "nn.dense" => Message::new(vec![dense_axis(store, id)?], is_constant(store, a[1])),
        // kiln's addition: a 2-D matmul (its weight scaled on the units axis).
        "nn.matmul" => {
            let two_d = shape(store, id)?.len() == 2 && shape(store, a[1])?.len() == 2;
            if !two_d || !same_float_type(store, &[a[0], a[1], id]) {
                return None;
            }
            Message::new(vec![1], is_constant(store, a[1]))
        }
        _ => return None,
    };
    (m.depth <= MAX_PATH).then_some(m)
}

/// Messages of the expressions a scale may be pushed into, children first.
fn prepare(store: &Store, order: &[ExprId], func: ExprId) -> Messages {
    let uses = use_counts(store, func);
    let mut messages = Messages::default();
    for &id in order {
        let ExprKind::Call(c) = store.kind(id) else { continue };
        // Only an expression with one use can be rewritten for that use.
        if !matches!(c.callee, Callee::Op(_)) || uses.get(&id).copied().unwrap_or(0) != 1 {
            continue;
        }
        let ins: Vec<Option<&Message>> = c.args.iter().map(|a| messages.get(a)).collect();
        if let Some(m) = prep_call(store, id, &ins) {
            messages.insert(id, m);
        }
    }
    messages
}

struct Transformer<'a> {
    messages: &'a Messages,
    /// The plain (unscaled) rewrite of each node visited.
    memo: FxHashMap<ExprId, ExprId>,
}

impl Transformer<'_> {
    fn normal(&self, id: ExprId) -> ExprId {
        self.memo.get(&id).copied().unwrap_or(id)
    }

    fn axes_are(&self, id: ExprId, axes: &[usize]) -> bool {
        self.messages.get(&id).is_some_and(|m| m.axes == axes)
    }

    /// TVM's `FScaleAxisBackwardTransform` of `id` with a message: `id`
    /// times `scale` (a vector over `m.axes`), with the scale moved inside.
    /// Recurses along the path, at most `MAX_PATH` deep.
    fn scaled(&self, store: &mut Store, id: ExprId, m: &Message, scale: ExprId) -> Option<ExprId> {
        let a = args(store, id);
        match store.op_name(id)? {
            "nn.relu" | "nn.leaky_relu" => {
                let x = self.scaled(store, a[0], m, scale)?;
                same_call(store, id, vec![x])
            }
            "add" | "subtract" => {
                let (tl, tr) = (shape(store, a[0])?, shape(store, a[1])?);
                // The cases in `prep_call`'s order, so the requirements checked are the path's.
                let (l, r) = if self.axes_are(a[0], &m.axes) && match_broadcast(&tl, &tr, &m.axes).is_some() {
                    // (x + b)·s = x·s + b·s
                    let s = reshape_or_expand(store, scale, &tl, &m.axes, id)?;
                    let r = self.normal(a[1]);
                    (self.scaled(store, a[0], m, scale)?, mul(store, r, s, id)?)
                } else if self.axes_are(a[1], &m.axes) && match_broadcast(&tr, &tl, &m.axes).is_some() {
                    let s = reshape_or_expand(store, scale, &tr, &m.axes, id)?;
                    let l = self.normal(a[0]);
                    (mul(store, l, s, id)?, self.scaled(store, a[1], m, scale)?)
                } else if self.axes_are(a[0], &m.axes) && self.axes_are(a[1], &m.axes) && tl == tr {
                    // (x + y)·s = x·s + y·s, both paths scaled.
                    (self.scaled(store, a[0], m, scale)?, self.scaled(store, a[1], m, scale)?)
                } else {
                    return None;
                };
                same_call(store, id, vec![l, r])
            }
            "nn.bias_add" => {
                let x = self.scaled(store, a[0], m, scale)?;
                let b = self.normal(a[1]);
                let b = mul(store, b, scale, id)?;
                same_call(store, id, vec![x, b])
            }
            "nn.conv2d" => {
                let c = conv(store, id, true)?;
                if m.axes[..] != [c.channel_axis] {
                    return None;
                }
                let s = expand_to_axes(store, scale, c.weight_ndim, &[c.out_axis], id)?;
                self.scale_weight(store, id, s)
            }
            "nn.dense" => {
                let s = expand_to_axes(store, scale, 2, &[0], id)?;
                self.scale_weight(store, id, s)
            }
            "nn.matmul" => {
                let transposed = attrs(store, id).bool("transpose_b").ok()?;
                let s = expand_to_axes(store, scale, 2, &[if transposed { 0 } else { 1 }], id)?;
                self.scale_weight(store, id, s)
            }
            _ => None,
        }
    }

    /// `id` (conv2d, dense, matmul) with its weight multiplied by `s`.
    fn scale_weight(&self, store: &mut Store, id: ExprId, s: ExprId) -> Option<ExprId> {
        let a = args(store, id);
        let (x, w) = (self.normal(a[0]), self.normal(a[1]));
        let w = mul(store, w, s, id)?;
        same_call(store, id, vec![x, w])
    }

    /// TVM's `MultiplyBackwardTransform`: `x * s` with `x` carrying a
    /// message and `s` a scale on its axes becomes `x` with `s` pushed inside.
    fn fold_multiply(&self, store: &mut Store, id: ExprId) -> Option<ExprId> {
        let a = args(store, id);
        for (side, other) in [(0, 1), (1, 0)] {
            let Some(m) = self.messages.get(&a[side]) else { continue };
            let (tv, ts) = (shape(store, a[side])?, shape(store, a[other])?);
            let scale = self.normal(a[other]);
            let matches = ts.is_empty() || match_broadcast(&tv, &ts, &m.axes).is_some();
            if !matches || shape(store, id)? != tv || !scale_allowed(store, m, scale) {
                continue;
            }
            let s = scale_over_axes(store, &tv, &ts, &m.axes, scale, id)?;
            if let Some(new) = self.scaled(store, a[side], m, s) {
                return Some(new);
            }
        }
        None
    }
}

/// The backward half: scales after conv2d/dense/matmul; returns the new function.
pub fn backward_fold_scale_axis(store: &mut Store, func: ExprId) -> ExprId {
    let order = post_order(store, &[func]);
    let messages = prepare(store, &order, func);
    if messages.is_empty() {
        return func;
    }
    // A scale whose product is rounded stays where it is: a quantized
    // product's requantization (`round(acc · m)`) is exact only as written.
    let rounded: FxHashSet<ExprId> = order
        .iter()
        .filter(|&&id| store.op_name(id) == Some("round"))
        .filter_map(|&id| store.as_call(id).and_then(|c| c.args.first().copied()))
        .collect();
    let mut t = Transformer { messages: &messages, memo: FxHashMap::default() };
    for &id in &order {
        let folds = store.op_name(id) == Some("multiply") && !rounded.contains(&id);
        let folded = if folds { t.fold_multiply(store, id) } else { None };
        let new = folded.unwrap_or_else(|| rebuild(store, id, |c| t.memo.get(&c).copied().unwrap_or(c)));
        t.memo.insert(id, new);
    }
    t.normal(func)
}
