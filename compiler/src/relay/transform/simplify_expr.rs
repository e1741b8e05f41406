//! SimplifyExpr: algebraic identities and chains of data-movement ops.
//!
//! - `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x`, `x / 1` → `x` when the
//!   constant is all zeros/ones and the result has `x`'s type (so no broadcast is lost);
//! - `power(x, 2)` → `x * x`, `power(x, 3)` → `x * x * x` (float `x`);
//! - `negative(negative(x))` → `x`; `cast(x, dtype of x)` → `x`;
//! - `reshape(reshape(x))` (either may be `contrib_reverse_reshape`) → one `reshape`; a reshape to the same shape → `x`;
//! - `transpose(transpose(x))` → one `transpose`, or `x` when the permutations cancel;
//! - quantization round trips (ONNX QuantizeLinear then DequantizeLinear):
//!   `cast(cast(x, int), float)` → `x` when `x` is a float of the outer
//!   type holding integers inside the integer type's range (a `clip` to
//!   integral bounds of integral values), and `clip(r + z, lo, hi) − z` →
//!   `clip(r, lo − z, hi − z)` for integral `r` and the same scalar integral
//!   `z` (exact: every value involved below 2²⁴ is an integer, and one
//!   that is not is clipped on both sides). Each quantized activation then
//!   costs a division, a rounding and a clip, not also two conversions and
//!   two additions. A NaN, which the conversions would have turned into
//!   some integer, stays NaN. A max pooling between the two conversions
//!   moves before them (`cast(max_pool2d(cast(x, int)), float)` →
//!   `max_pool2d(x)`) where every window holds an input value.
//!
//! Types come from the original (pre-rewrite) nodes, which inference has seen.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, ExprId, ExprKind, ExprMutator, Store, Type};

struct Simplify;

fn is_constant_all(store: &Store, id: ExprId, value: f64) -> bool {
    match store.kind(id) {
        ExprKind::Constant(c) => {
            let t = store.constant_data(*c);
            t.numel() > 0 && t.to_f64_vec().iter().all(|&v| v == value)
        }
        _ => false,
    }
}

/// A rank-0 constant's value (it broadcasts nothing).
fn scalar_constant(store: &Store, id: ExprId) -> Option<f64> {
    match store.kind(id) {
        ExprKind::Constant(c) if store.constant_data(*c).shape().is_empty() => {
            store.constant_data(*c).to_f64_vec().first().copied()
        }
        _ => None,
    }
}

fn integral(v: f64) -> bool {
    v.is_finite() && v.fract() == 0.0
}

/// Whether every (non-NaN) value of `id` is an integer: a rounding, a clip
/// of integers to integral bounds, a sum or difference of integers, an
/// integral constant. (By the ops alone: nodes this pass made have no type yet.)
fn integral_valued(store: &Store, id: ExprId) -> bool {
    if let ExprKind::Constant(c) = store.kind(id) {
        return store.constant_data(*c).to_f64_vec().iter().all(|&v| integral(v));
    }
    let a = args(store, id);
    match store.op_name(id) {
        Some("round" | "floor" | "ceil" | "trunc") => true,
        Some("clip") => {
            clip_bounds(store, id).is_some_and(|(lo, hi)| integral(lo) && integral(hi)) && integral_valued(store, a[0])
        }
        Some("add" | "subtract") => integral_valued(store, a[0]) && integral_valued(store, a[1]),
        _ => false,
    }
}

fn clip_bounds(store: &Store, clip: ExprId) -> Option<(f64, f64)> {
    let c = store.as_call(clip)?;
    Some((c.attrs.float("a_min").ok()?, c.attrs.float("a_max").ok()?))
}

fn args(store: &Store, id: ExprId) -> Vec<ExprId> {
    store.as_call(id).map(|c| c.args.clone()).unwrap_or_default()
}

fn same_type(store: &Store, a: ExprId, b: ExprId) -> bool {
    matches!((store.checked_type(a), store.checked_type(b)), (Some(x), Some(y)) if x == y)
}

fn is_float(store: &Store, id: ExprId) -> bool {
    store.checked_type(id).and_then(Type::as_tensor).is_some_and(|t| t.dtype.is_float())
}

fn rank(store: &Store, id: ExprId) -> Option<usize> {
    store.checked_type(id).and_then(Type::as_tensor).map(|t| t.rank())
}

/// The permutation of a `transpose` call (reversed axes when `axes` is None), normalized.
fn permutation(store: &Store, call: ExprId, rank: usize) -> Option<Vec<usize>> {
    let c = store.as_call(call)?;
    match c.attrs.opt_ints("axes").ok()? {
        None => Some((0..rank).rev().collect()),
        Some(axes) => axes
            .iter()
            .map(|&a| {
                let a = if a < 0 { a + rank as i64 } else { a };
                (0..rank as i64).contains(&a).then_some(a as usize)
            })
            .collect(),
    }
}

impl ExprMutator for Simplify {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        let Some(name) = store.op_name(post) else { return post };
        let (pre_args, post_args) = (args(store, pre), args(store, post));
        match name {
            "add" | "subtract" | "multiply" | "divide" => {
                if name == "subtract" {
                    if let Some(clip) = quantized_zero_point(store, pre, post) {
                        return clip;
                    }
                }
                let identity = if matches!(name, "add" | "subtract") { 0.0 } else { 1.0 };
                let commutes = matches!(name, "add" | "multiply");
                if is_constant_all(store, post_args[1], identity) && same_type(store, pre, pre_args[0]) {
                    return post_args[0];
                }
                if commutes && is_constant_all(store, post_args[0], identity) && same_type(store, pre, pre_args[1]) {
                    return post_args[1];
                }
                post
            }
            // A GELU's `x³` was a libm `powf` call per element (no vector
            // form); a product is exact for x² and within an ulp for x³,
            // and NaN, infinities and signed zeros come out as pow's.
            "power" if is_float(store, pre) && same_type(store, pre, pre_args[0]) => {
                let x = post_args[0];
                let factors = match () {
                    _ if is_constant_all(store, post_args[1], 2.0) => 2,
                    _ if is_constant_all(store, post_args[1], 3.0) => 3,
                    _ => return post,
                };
                let span = store.span(post).clone();
                let mut product = x;
                for _ in 1..factors {
                    match store.call_op_at("multiply", vec![product, x], Attrs::default(), span.clone()) {
                        Ok(p) => product = p,
                        Err(_) => return post,
                    }
                }
                product
            }
            "negative" => match store.op_name(post_args[0]) {
                Some("negative") => args(store, post_args[0])[0],
                _ => post,
            },
            "cast" => {
                if same_type(store, pre, pre_args[0]) {
                    post_args[0]
                } else {
                    integer_round_trip(store, pre, post).or_else(|| pooled_round_trip(store, pre, post)).unwrap_or(post)
                }
            }
            // TVM's SimplifyReshape: a reshape-like op (`reshape`,
            // `contrib_reverse_reshape`) of a reshape-like op is one reshape.
            "reshape" | "contrib_reverse_reshape" => {
                if same_type(store, pre, pre_args[0]) {
                    return post_args[0];
                }
                let inner = post_args[0];
                if !matches!(store.op_name(inner), Some("reshape" | "contrib_reverse_reshape")) {
                    return post;
                }
                let source = args(store, inner)[0];
                // The outer `newshape` may use 0 or -1, which mean something else over
                // another input: the merged reshape spells out the inferred shape.
                let Some(Type::Tensor(out)) = store.checked_type(pre).cloned() else { return post };
                let newshape: Vec<i64> = out.shape.iter().map(|&d| d as i64).collect();
                let a = Attrs::from_pairs([("newshape", AttrValue::Ints(newshape))]);
                let span = store.span(post).clone();
                store.call_op_at("reshape", vec![source], a, span).unwrap_or(post)
            }
            "transpose" => {
                let inner = post_args[0];
                if store.op_name(inner) != Some("transpose") {
                    return post;
                }
                let Some(r) = rank(store, pre) else { return post };
                let (Some(outer_p), Some(inner_p)) = (permutation(store, post, r), permutation(store, inner, r)) else {
                    return post;
                };
                let composed: Vec<usize> = outer_p.iter().map(|&i| inner_p[i]).collect();
                let source = args(store, inner)[0];
                if composed.iter().enumerate().all(|(i, &a)| i == a) {
                    return source;
                }
                let a = Attrs::from_pairs([("axes", AttrValue::Ints(composed.iter().map(|&a| a as i64).collect()))]);
                let span = store.span(post).clone();
                store.call_op_at("transpose", vec![source], a, span).unwrap_or(post)
            }
            _ => post,
        }
    }
}

/// `cast(cast(x, int), float)` as `x` (see the module's notes): `pre` and
/// `post` are the outer cast before and after its operands were rewritten.
fn integer_round_trip(store: &Store, pre: ExprId, post: ExprId) -> Option<ExprId> {
    let inner = args(store, post)[0];
    if store.op_name(inner) != Some("cast") {
        return None;
    }
    let x = args(store, inner)[0];
    let int = store.checked_type(args(store, pre)[0]).and_then(Type::as_tensor)?.dtype;
    if !int.is_int() || !same_type(store, pre, args(store, args(store, pre)[0])[0]) {
        return None;
    }
    let (lo, hi) = clip_bounds(store, x).filter(|_| store.op_name(x) == Some("clip"))?;
    let (min, max) = int.value_range();
    (min <= lo && hi <= max && integral_valued(store, x)).then_some(x)
}

/// `cast(max_pool2d(cast(x, int)), float)` as `max_pool2d(x)` where the
/// inner conversion is one [`integer_round_trip`] drops: the maximum of
/// integers commutes with exact conversions, provided every window holds
/// an input value (no ceil mode, pads narrower than the window) — the
/// padding's identity differs between the types. (A QOperator ResNet's max
/// pool ran over bytes in a kernel of its own, 0.54 ms, serial.)
fn pooled_round_trip(store: &mut Store, pre: ExprId, post: ExprId) -> Option<ExprId> {
    let pool = args(store, post)[0];
    let pool_pre = args(store, pre)[0];
    if store.op_name(pool) != Some("nn.max_pool2d") || store.op_name(pool_pre) != Some("nn.max_pool2d") {
        return None;
    }
    let attrs = store.as_call(pool)?.attrs.clone();
    let (size, pads) = (attrs.ints("pool_size").ok()?.to_vec(), attrs.ints("padding").ok()?.to_vec());
    let windows_hold_values = size.len() == 2 && pads.iter().enumerate().all(|(i, &p)| p < size[i % 2]);
    if attrs.bool("ceil_mode").ok()? || !windows_hold_values || !is_float(store, pre) {
        return None;
    }
    let (inner, inner_pre) = (args(store, pool)[0], args(store, pool_pre)[0]);
    if store.op_name(inner) != Some("cast") || store.op_name(inner_pre) != Some("cast") {
        return None;
    }
    let x = args(store, inner)[0];
    let int = store.checked_type(inner_pre).and_then(Type::as_tensor)?.dtype;
    let x_type = store.checked_type(args(store, inner_pre)[0]).and_then(Type::as_tensor)?.dtype;
    let out_type = store.checked_type(pre).and_then(Type::as_tensor)?.dtype;
    if !int.is_int() || x_type != out_type || store.op_name(x) != Some("clip") {
        return None;
    }
    let (lo, hi) = clip_bounds(store, x)?;
    let (min, max) = int.value_range();
    if !(min <= lo && hi <= max && integral_valued(store, x)) {
        return None;
    }
    let span = store.span(post).clone();
    store.call_op_at("nn.max_pool2d", vec![x], attrs, span).ok()
}

/// `clip(r + z, lo, hi) − z` as `clip(r, lo − z, hi − z)` (see the module's
/// notes), for the `subtract` `pre` / `post`.
fn quantized_zero_point(store: &mut Store, pre: ExprId, post: ExprId) -> Option<ExprId> {
    let [clip, z] = args(store, post)[..] else { return None };
    // Floats only: an integer sum could wrap where the clip would not.
    if store.op_name(clip) != Some("clip") || !is_float(store, pre) || !same_type(store, pre, args(store, pre)[0]) {
        return None;
    }
    let (lo, hi) = clip_bounds(store, clip)?;
    let sum = args(store, clip)[0];
    if store.op_name(sum) != Some("add") {
        return None;
    }
    let [r, z_in] = args(store, sum)[..] else { return None };
    let z_value = scalar_constant(store, z).filter(|&v| integral(v))?;
    if scalar_constant(store, z_in) != Some(z_value) || !integral_valued(store, r) || !integral_valued(store, clip) {
        return None;
    }
    let bounds = [("a_min", AttrValue::Float(lo - z_value)), ("a_max", AttrValue::Float(hi - z_value))];
    let span = store.span(post).clone();
    store.call_op_at("clip", vec![r], Attrs::from_pairs(bounds), span).ok()
}

/// Simplify one function; returns the new function handle.
pub fn simplify_expr(store: &mut Store, func: ExprId) -> ExprId {
    mutate(store, func, &mut Simplify)
}
