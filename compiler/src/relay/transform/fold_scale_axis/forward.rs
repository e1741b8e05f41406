//! ForwardFoldScaleAxis: a scale before `nn.conv2d` / `nn.dense` (on their
//! input channels) goes into the weight, through relus and biases.
//!
//! Prep (TVM's `ForwardPrep`): parents before children, each consumer tells
//! each argument which axes may arrive scaled; a value's message is the
//! intersection over all its uses, so a scale is taken only if every use can
//! absorb it. Rewrite (TVM's `ForwardRewrite`): children first, a `multiply`
//! whose message allows it becomes a `Val::Scaled` (value, scale, axes)
//! that relu and add/subtract pass on and conv2d/dense consume.

use rustc_hash::FxHashMap;

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::{post_order, Callee, ExprId, ExprKind, Store};

use super::{
    args, call, conv, dense_axis, expand_to_axes, has_zero, intersect, is_constant, match_broadcast, mul, rebuild,
    reshape_or_expand, same_call, scale_allowed, scale_over_axes, shape, Message,
};

type Messages = FxHashMap<ExprId, Option<Message>>;

/// TVM's `ForwardPrep::Update`: a value used several times takes the
/// intersection of what its uses allow.
fn update(messages: &mut Messages, id: ExprId, m: Option<Message>) {
    let merged = match messages.get(&id) {
        Some(old) => intersect(old, &m),
        None => m,
    };
    messages.insert(id, merged);
}

/// What each argument of operator call `id` may carry, given what its result may.
fn prep_call(store: &Store, id: ExprId, out: &Option<Message>) -> Vec<Option<Message>> {
    let a = args(store, id);
    let none = vec![None; a.len()];
    match store.op_name(id) {
        Some("nn.relu" | "nn.leaky_relu") => vec![out.as_ref().map(Message::through_relu)],
        Some("add" | "subtract") => {
            let (Some(m), Some(l), Some(r)) = (out, shape(store, a[0]), shape(store, a[1])) else { return none };
            if match_broadcast(&l, &r, &m.axes).is_some() {
                vec![out.clone(), None]
            } else if match_broadcast(&r, &l, &m.axes).is_some() {
                vec![None, out.clone()]
            } else {
                none
            }
        }
        Some("nn.conv2d") => match conv(store, id, false) {
            Some(c) => vec![Some(Message::new(vec![c.channel_axis], is_constant(store, a[1]))), None],
            None => none,
        },
        Some("nn.dense") => match dense_axis(store, id) {
            Some(axis) => vec![Some(Message::new(vec![axis], is_constant(store, a[1]))), None],
            None => none,
        },
        _ => none,
    }
}

/// Messages for every node of `order` (children first), from the consumers back.
fn prepare(store: &Store, order: &[ExprId], func: ExprId) -> Messages {
    let mut messages = Messages::default();
    update(&mut messages, func, None);
    for &id in order.iter().rev() {
        let out = messages.get(&id).cloned().flatten();
        match store.kind(id) {
            ExprKind::Call(c) if matches!(c.callee, Callee::Op(_)) => {
                for (arg, m) in c.args.clone().into_iter().zip(prep_call(store, id, &out)) {
                    update(&mut messages, arg, m);
                }
            }
            // Nothing passes a scale through lets, ifs, tuples, functions and closures.
            kind => kind.for_each_child(|c| update(&mut messages, c, None)),
        }
    }
    messages
}

/// A rewritten value: plain, or TVM's `ScaledExpr` — `value` whose `axes`
/// are still to be multiplied by `scale` (a vector over those axes).
#[derive(Clone)]
enum Val {
    Plain(ExprId),
    Scaled { value: ExprId, scale: ExprId, axes: Vec<usize> },
}

struct Rewriter<'a> {
    messages: &'a Messages,
    vals: FxHashMap<ExprId, Val>,
    realized: FxHashMap<ExprId, ExprId>,
}

impl Rewriter<'_> {
    /// The plain expression for the rewrite of `pre`. TVM's prep makes a
    /// scale reach only consumers that absorb it; should one not (a rewrite
    /// refused late, e.g. a zero scale at a bias), it is applied here.
    fn realize(&mut self, store: &mut Store, pre: ExprId) -> Option<ExprId> {
        match self.vals.get(&pre).cloned() {
            None => Some(pre),
            Some(Val::Plain(e)) => Some(e),
            Some(Val::Scaled { value, scale, axes }) => {
                if let Some(&done) = self.realized.get(&pre) {
                    return Some(done);
                }
                let s = reshape_or_expand(store, scale, &shape(store, pre)?, &axes, pre)?;
                let scaled = mul(store, value, s, pre)?;
                self.realized.insert(pre, scaled);
                Some(scaled)
            }
        }
    }

    fn message(&self, id: ExprId) -> Option<&Message> {
        self.messages.get(&id).and_then(Option::as_ref)
    }

    /// TVM's `FScaleAxisForwardRewrite` of operator call `pre`, or `None`
    /// for the ordinary rebuild.
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId) -> Option<Val> {
        let pre_args = args(store, pre);
        let vals: Vec<Val> = pre_args.iter().map(|a| self.vals.get(a).cloned().unwrap_or(Val::Plain(*a))).collect();
        match store.op_name(pre)? {
            "multiply" => {
                // The producer: the scale is the operand that broadcasts onto the message's axes.
                let m = self.message(pre)?.clone();
                let [Val::Plain(l), Val::Plain(r)] = vals[..] else { return None };
                let (tl, tr) = (shape(store, pre_args[0])?, shape(store, pre_args[1])?);
                for (value, vshape, scale, sshape) in [(l, &tl, r, &tr), (r, &tr, l, &tl)] {
                    let matches = sshape.is_empty() || match_broadcast(vshape, sshape, &m.axes).is_some();
                    if matches && vshape.len() == shape(store, pre)?.len() && scale_allowed(store, &m, scale) {
                        let scale = scale_over_axes(store, vshape, sshape, &m.axes, scale, pre)?;
                        return Some(Val::Scaled { value, scale, axes: m.axes });
                    }
                }
                None
            }
            "nn.relu" | "nn.leaky_relu" => {
                let Val::Scaled { value, scale, axes } = vals[0].clone() else { return None };
                Some(Val::Scaled { value: same_call(store, pre, vec![value])?, scale, axes })
            }
            "add" | "subtract" => {
                // value·s ± b = (value ± b/s)·s
                let (tl, tr) = (shape(store, pre_args[0])?, shape(store, pre_args[1])?);
                let (side, value, scale, axes, other, tscaled, tother) = match (&vals[0], &vals[1]) {
                    (Val::Scaled { value, scale, axes }, Val::Plain(o)) => {
                        (0, *value, *scale, axes.clone(), *o, tl, tr)
                    }
                    (Val::Plain(o), Val::Scaled { value, scale, axes }) => {
                        (1, *value, *scale, axes.clone(), *o, tr, tl)
                    }
                    _ => return None,
                };
                if match_broadcast(&tscaled, &tother, &axes).is_none() || has_zero(store, scale) {
                    return None;
                }
                let s = reshape_or_expand(store, scale, &tscaled, &axes, pre)?;
                let other = call(store, "divide", vec![other, s], Attrs::new(), pre)?;
                let new_args = if side == 0 { vec![value, other] } else { vec![other, value] };
                Some(Val::Scaled { value: same_call(store, pre, new_args)?, scale, axes })
            }
            "nn.conv2d" => {
                let [Val::Scaled { value, scale, axes }, Val::Plain(w)] = &vals[..] else { return None };
                let c = conv(store, pre, false)?;
                if axes[..] != [c.channel_axis] {
                    return None;
                }
                let s = expand_to_axes(store, *scale, c.weight_ndim, &[c.in_axis], pre)?;
                let w = mul(store, *w, s, pre)?;
                Some(Val::Plain(same_call(store, pre, vec![*value, w])?))
            }
            "nn.dense" => {
                let [Val::Scaled { value, scale, axes }, Val::Plain(w)] = &vals[..] else { return None };
                if axes[..] != [dense_axis(store, pre)?] {
                    return None;
                }
                let w = mul(store, *w, *scale, pre)?;
                Some(Val::Plain(same_call(store, pre, vec![*value, w])?))
            }
            _ => None,
        }
    }
}

/// The forward half: scales before conv2d/dense; returns the new function.
pub fn forward_fold_scale_axis(store: &mut Store, func: ExprId) -> ExprId {
    let order = post_order(store, &[func]);
    let messages = prepare(store, &order, func);
    if messages.values().all(Option::is_none) {
        return func;
    }
    let mut r = Rewriter { messages: &messages, vals: FxHashMap::default(), realized: FxHashMap::default() };
    for &id in &order {
        let is_op_call = matches!(store.kind(id), ExprKind::Call(c) if matches!(c.callee, Callee::Op(_)));
        let val = match is_op_call.then(|| r.rewrite_call(store, id)).flatten() {
            Some(v) => v,
            None => {
                let mut new = FxHashMap::default();
                for c in store.kind(id).children() {
                    // Never expected: a scale that cannot be applied again. Leave the function as it was.
                    let Some(n) = r.realize(store, c) else { return func };
                    new.insert(c, n);
                }
                Val::Plain(rebuild(store, id, |c| new.get(&c).copied().unwrap_or(c)))
            }
        };
        r.vals.insert(id, val);
    }
    r.realize(store, func).unwrap_or(func)
}
