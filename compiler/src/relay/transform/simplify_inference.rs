//! SimplifyInference: inference-time normalization ops become plain arithmetic
//! that later passes can fold and fuse (TVM's `SimplifyInference`).
//!
//! - `batch_norm(x, γ, β, μ, σ²).0` → `x * s + (β - μ * s)` with
//!   `s = γ / sqrt(σ² + ε)`, the per-channel vectors expanded to broadcast on `axis`;
//! - `layer_norm(x, γ, β)` → `(x - mean(x)) / sqrt(var(x) + ε) * γ + β` over `axis`
//!   (unless `relay.SimplifyInference.layer_norm=false`: CPU targets keep it
//!   one kernel, one pass over each row's cache-resident elements, where the
//!   expansion is four kernels — two reductions and two element-wise passes
//!   — each crossing between cores when run beside parallel ones);
//! - `dropout(x).0` → `x`.
//!
//! Needs checked types (the rank and dtype of the data).

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, Call, ExprId, ExprKind, ExprMutator, Store, TensorType};
use kiln_ir::{DataType, Tensor};

struct Simplify {
    error: Option<String>,
    /// Whether `nn.layer_norm` is expanded (TVM's behaviour) or kept.
    layer_norm: bool,
}

fn attrs(pairs: &[(&str, AttrValue)]) -> Attrs {
    Attrs::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())))
}

/// Build `op(args…)` with attributes, inheriting `span_of`'s span.
fn op(store: &mut Store, name: &str, args: Vec<ExprId>, a: Attrs, span_of: ExprId) -> Result<ExprId, String> {
    let span = store.span(span_of).clone();
    store.call_op_at(name, args, a, span).map_err(|e| e.to_string())
}

fn scalar(store: &mut Store, dtype: DataType, v: f64) -> ExprId {
    store.constant(Tensor::scalar(dtype, v))
}

/// Reshape a per-channel vector so it broadcasts against a rank-`ndim` tensor on `axis`.
fn expand_to_axis(store: &mut Store, v: ExprId, ndim: usize, axis: usize, at: ExprId) -> Result<ExprId, String> {
    let trailing = ndim - axis - 1;
    if trailing == 0 {
        return Ok(v);
    }
    let a = attrs(&[("axis", AttrValue::Int(1)), ("num_newaxis", AttrValue::Int(trailing as i64))]);
    op(store, "expand_dims", vec![v], a, at)
}

/// What batch and layer normalization share: the rewritten call, the data's
/// checked type, the axis (normalized; `None` when out of range, left to the
/// type checker) and epsilon.
fn normalization(
    store: &Store,
    call: ExprId,
    original: ExprId,
) -> Result<Option<(Call, TensorType, usize, f64)>, String> {
    let call = store.as_call(call).cloned().ok_or("not a call")?;
    let data = store.as_call(original).map(|c| c.args[0]).ok_or("not a call")?;
    let ty = store.checked_type(data).and_then(|t| t.as_tensor()).cloned();
    let Some(ty) = ty else { return Err("SimplifyInference needs checked types: run InferType first".into()) };
    let ndim = ty.rank() as i64;
    let axis = call.attrs.int("axis")?;
    let axis = if axis < 0 { axis + ndim } else { axis };
    if axis < 0 || axis >= ndim {
        return Ok(None);
    }
    let eps = call.attrs.float("epsilon")?;
    Ok(Some((call, ty, axis as usize, eps)))
}

impl Simplify {
    /// `bn` is the call over rewritten arguments, `original` the call before
    /// the rewrite (rewritten nodes have no checked type yet).
    fn batch_norm(&self, store: &mut Store, bn: ExprId, original: ExprId) -> Result<Option<ExprId>, String> {
        let Some((call, ty, axis, eps)) = normalization(store, bn, original)? else { return Ok(None) };
        let ndim = ty.rank();
        let (x, gamma, beta, mean, var) = (call.args[0], call.args[1], call.args[2], call.args[3], call.args[4]);
        let eps_c = scalar(store, ty.dtype, eps);
        let var_eps = op(store, "add", vec![var, eps_c], Attrs::new(), bn)?;
        let std = op(store, "sqrt", vec![var_eps], Attrs::new(), bn)?;
        let one = scalar(store, ty.dtype, 1.0);
        let mut scale = op(store, "divide", vec![one, std], Attrs::new(), bn)?;
        if call.attrs.bool("scale")? {
            scale = op(store, "multiply", vec![scale, gamma], Attrs::new(), bn)?;
        }
        let neg_mean = op(store, "negative", vec![mean], Attrs::new(), bn)?;
        let mut shift = op(store, "multiply", vec![neg_mean, scale], Attrs::new(), bn)?;
        if call.attrs.bool("center")? {
            shift = op(store, "add", vec![shift, beta], Attrs::new(), bn)?;
        }
        let scale = expand_to_axis(store, scale, ndim, axis, bn)?;
        let shift = expand_to_axis(store, shift, ndim, axis, bn)?;
        let scaled = op(store, "multiply", vec![x, scale], Attrs::new(), bn)?;
        op(store, "add", vec![scaled, shift], Attrs::new(), bn).map(Some)
    }

    /// `ln` is the call over rewritten arguments, `original` the call before
    /// the rewrite (rewritten nodes have no checked type yet).
    fn layer_norm(&self, store: &mut Store, ln: ExprId, original: ExprId) -> Result<Option<ExprId>, String> {
        let Some((call, ty, axis, eps)) = normalization(store, ln, original)? else { return Ok(None) };
        let ndim = ty.rank();
        let (x, gamma, beta) = (call.args[0], call.args[1], call.args[2]);
        let reduce = attrs(&[("axis", AttrValue::Ints(vec![axis as i64])), ("keepdims", AttrValue::Bool(true))]);
        let mean = op(store, "mean", vec![x], reduce.clone(), ln)?;
        let diff = op(store, "subtract", vec![x, mean], Attrs::new(), ln)?;
        let sq = op(store, "multiply", vec![diff, diff], Attrs::new(), ln)?;
        let var = op(store, "mean", vec![sq], reduce, ln)?;
        let eps_c = scalar(store, ty.dtype, eps);
        let var_eps = op(store, "add", vec![var, eps_c], Attrs::new(), ln)?;
        let std = op(store, "sqrt", vec![var_eps], Attrs::new(), ln)?;
        let mut out = op(store, "divide", vec![diff, std], Attrs::new(), ln)?;
        if call.attrs.bool("scale")? {
            let g = expand_to_axis(store, gamma, ndim, axis, ln)?;
            out = op(store, "multiply", vec![out, g], Attrs::new(), ln)?;
        }
        if call.attrs.bool("center")? {
            let b = expand_to_axis(store, beta, ndim, axis, ln)?;
            out = op(store, "add", vec![out, b], Attrs::new(), ln)?;
        }
        Ok(Some(out))
    }
}

impl ExprMutator for Simplify {
    fn rewrite_tuple_get_item(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        let ExprKind::TupleGetItem { tuple, index: 0 } = *store.kind(post) else { return post };
        let ExprKind::TupleGetItem { tuple: original, .. } = *store.kind(pre) else { return post };
        let result = match store.op_name(tuple) {
            Some("nn.batch_norm") => self.batch_norm(store, tuple, original),
            Some("nn.dropout") => Ok(store.as_call(tuple).map(|c| c.args[0])),
            _ => Ok(None),
        };
        match result {
            Ok(new) => new.unwrap_or(post),
            Err(e) => {
                self.error.get_or_insert(e);
                post
            }
        }
    }

    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        if !self.layer_norm || store.op_name(post) != Some("nn.layer_norm") {
            return post;
        }
        match self.layer_norm(store, post, pre) {
            Ok(new) => new.unwrap_or(post),
            Err(e) => {
                self.error.get_or_insert(e);
                post
            }
        }
    }
}

/// Rewrite one function; returns the new function handle. `layer_norm`:
/// whether `nn.layer_norm` is expanded too.
pub(crate) fn simplify_inference(store: &mut Store, func: ExprId, layer_norm: bool) -> Result<ExprId, String> {
    let mut s = Simplify { error: None, layer_norm };
    let out = mutate(store, func, &mut s);
    match s.error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
