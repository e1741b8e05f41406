//! LowerTE: each `Primitive` function (made by FuseOps) becomes one TIR kernel.
//!
//! The function's parameters become TE placeholders; its operator calls
//! become TOPI computes, in post-order; its result (a tensor or a tuple of
//! them) becomes the kernel's outputs. `te::lower` then inlines the injective
//! producers into their consumers, so the stage with the highest pattern
//! anchors the loop nest. Structurally equal primitive functions share one kernel.

use kiln_ir::relay::visit::post_order_filtered;
use kiln_ir::relay::{op_registry, Callee, ExprId, ExprKind, Store, Type};
use rustc_hash::FxHashMap;

use crate::te::{self, compute, placeholder, Tensor};
use crate::tir::PrimFunc;
use crate::topi::{compute_op, TeValue};

/// Why a primitive function cannot become a kernel.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("lowering `{kernel}`: {message}")]
pub struct LowerTeError {
    /// The kernel being lowered (from [`kernel_name`]).
    pub kernel: String,
    /// What could not be lowered.
    pub message: String,
}

/// A kernel name from the operators it fuses: `fused_nn_dense_add_nn_relu`.
pub fn kernel_name(store: &Store, func: ExprId) -> String {
    let mut name = String::from("fused");
    if let Some(f) = store.as_function(func) {
        for id in post_order_filtered(store, &[f.body], |n| !matches!(store.kind(n), ExprKind::Function(_))) {
            if let Some(op) = store.op_name(id) {
                name.push('_');
                name.push_str(&op.replace('.', "_"));
            }
        }
    }
    name
}

/// The longest softmax row whose exponentials are a kernel-local row (see
/// `topi::nn::SOFTMAX_EXP_STAGE`); a longer one keeps them inlined.
const SOFTMAX_ROW_BYTES: usize = 64 * 1024;

/// Whether a softmax runs along the last axis of rows (rank 2 or more) of at
/// most [`SOFTMAX_ROW_BYTES`]: its exponentials are then computed a row at a
/// time (see `topi::nn::SOFTMAX_EXP_STAGE`).
fn softmax_over_rows(store: &Store, call: &kiln_ir::relay::Call) -> bool {
    let Some(t) = call.args.first().and_then(|&x| store.checked_type(x)) else { return false };
    let Some(t) = t.as_tensor() else { return false };
    let axis = call.attrs.int("axis").unwrap_or(-1);
    let rank = t.shape.len();
    let last = axis == -1 || axis == rank as i64 - 1;
    rank >= 2 && last && t.shape[rank - 1] * t.dtype.size_bytes() <= SOFTMAX_ROW_BYTES
}

/// The largest padded image a max pooling materializes (see `lower_primitive`).
const POOL_IMAGE_BYTES: usize = 512 * 1024;

fn flatten_outputs(v: &TeValue, out: &mut Vec<Tensor>) {
    match v {
        TeValue::Tensor(t) => out.push(t.clone()),
        TeValue::Tuple(fields) => fields.iter().for_each(|f| flatten_outputs(f, out)),
    }
}

/// Placeholders for a parameter of type `ty`, appended to `inputs`.
fn placeholders(ty: &Type, name: &str, inputs: &mut Vec<Tensor>) -> Result<TeValue, String> {
    match ty {
        Type::Tensor(tt) => {
            let t = placeholder(name, &tt.shape, tt.dtype);
            inputs.push(t.clone());
            Ok(TeValue::Tensor(t))
        }
        Type::Tuple(fields) => Ok(TeValue::Tuple(
            fields
                .iter()
                .enumerate()
                .map(|(i, f)| placeholders(f, &format!("{name}_{i}"), inputs))
                .collect::<Result<_, _>>()?,
        )),
        Type::Func(_) => Err(format!("parameter `{name}` is a function")),
        Type::Var(v) => {
            Err(format!("parameter `{name}` has the type parameter `{v}` (a polymorphic function is not compiled)"))
        }
    }
}

/// Lower the primitive function `func` (with checked types) into the kernel `name`.
pub fn lower_primitive(store: &Store, func: ExprId, name: &str) -> Result<PrimFunc, LowerTeError> {
    let err = |m: String| LowerTeError { kernel: name.to_string(), message: m };
    let f = store.as_function(func).ok_or_else(|| err("not a function".into()))?;
    let mut values: FxHashMap<ExprId, TeValue> = FxHashMap::default();
    let mut inputs = Vec::new();
    for (k, &p) in f.params.iter().enumerate() {
        let ty = store
            .checked_type(p)
            .cloned()
            .or_else(|| store.as_var(p).and_then(|v| v.ty).map(|t| store.ty(t).clone()))
            .ok_or_else(|| err(format!("parameter {k} has no type")))?;
        // A tuple parameter becomes one kernel input per tensor field, in order
        // (the executor passes tuples flattened the same way).
        let value = placeholders(&ty, &format!("p{k}"), &mut inputs).map_err(err)?;
        values.insert(p, value);
    }
    for id in post_order_filtered(store, &[f.body], |n| !matches!(store.kind(n), ExprKind::Function(_))) {
        let value = match store.kind(id) {
            ExprKind::Var(_) => {
                if values.contains_key(&id) {
                    continue;
                }
                return Err(err(format!(
                    "free variable `%{}` in a primitive function",
                    store.as_var(id).map_or("", |v| v.name.as_str())
                )));
            }
            ExprKind::Constant(c) => {
                let data = store.constant_data(*c);
                if data.numel() != 1 {
                    return Err(err(format!(
                        "a non-scalar constant of shape {:?} inside a primitive function (FuseOps passes them as parameters)",
                        data.shape()
                    )));
                }
                let (v, dt, shape) = (data.get_f64(0), data.dtype(), data.shape().to_vec());
                TeValue::Tensor(compute("const", &shape, |_| crate::tir::Expr::constant(v, dt)))
            }
            ExprKind::Call(call) => {
                let Callee::Op(op) = call.callee else {
                    return Err(err("a call of a function inside a primitive function".into()));
                };
                let op_name = op_registry().get(op).name;
                let args: Vec<TeValue> = call
                    .args
                    .iter()
                    .map(|a| values.get(a).cloned().ok_or_else(|| err(format!("`{op_name}` argument not computed"))))
                    .collect::<Result<_, _>>()?;
                let out = store.checked_type(id).ok_or_else(|| err("missing checked types: run InferType".into()))?;
                compute_op(op, &args, &call.attrs, out).map_err(|m| err(format!("`{op_name}`: {m}")))?
            }
            ExprKind::Tuple(fields) => TeValue::Tuple(
                fields
                    .iter()
                    .map(|a| values.get(a).cloned().ok_or_else(|| err("tuple field not computed".into())))
                    .collect::<Result<_, _>>()?,
            ),
            ExprKind::TupleGetItem { tuple, index } => {
                let t = values.get(tuple).ok_or_else(|| err("tuple not computed".into()))?;
                t.tuple()
                    .map_err(|e| err(e.to_string()))?
                    .get(*index)
                    .cloned()
                    .ok_or_else(|| err(format!("tuple index {index} out of range")))?
            }
            other => return Err(err(format!("{} inside a primitive function", other.kind_name()))),
        };
        values.insert(id, value);
    }
    let result = values.get(&f.body).ok_or_else(|| err("the body was not computed".into()))?;
    let mut outputs = Vec::new();
    flatten_outputs(result, &mut outputs);
    // An output that is an input, or that appears twice, needs its own copy.
    let mut seen: Vec<Tensor> = Vec::new();
    for o in outputs.iter_mut() {
        if inputs.contains(o) || seen.contains(o) {
            let src = o.clone();
            *o = compute("copy", src.shape(), |i| src.at(i));
        }
        seen.push(o.clone());
    }
    // The anchor (the operator of the highest pattern, the first of equals)
    // picks the default schedule; a convolution keeps its padded input as a
    // stage of its own, which the schedule computes row by row.
    let mut anchor: Option<(kiln_ir::relay::OpPattern, &str)> = None;
    let mut transposed_weight = false;
    let mut weight_block = None;
    let mut groups = 1;
    let mut panel = None;
    let mut packed_rows = None;
    let mut winograd_tile = None;
    let mut pointwise = false;
    let mut pool_rows = false;
    let mut softmax_rows = false;
    for id in post_order_filtered(store, &[f.body], |n| !matches!(store.kind(n), ExprKind::Function(_))) {
        if let Some(ExprKind::Call(call)) = Some(store.kind(id)) {
            if let Callee::Op(op) = call.callee {
                let def = op_registry().get(op);
                if anchor.is_none_or(|(p, _)| def.pattern > p) {
                    anchor = Some((def.pattern, def.name));
                    transposed_weight = def.name == "nn.dense"
                        || call.attrs.bool("transpose_b").unwrap_or(false)
                        || call.attrs.bool("transpose_a").unwrap_or(false);
                    weight_block = (def.name == "nn.conv2d")
                        .then(|| kiln_ir::relay::op::conv2d_weight_block(&call.attrs).ok().flatten())
                        .flatten();
                    groups = if def.name == "nn.conv2d" { call.attrs.int("groups").unwrap_or(1) } else { 1 };
                    pointwise = def.name == "nn.conv2d" && crate::topi::is_pointwise_conv2d(store, call);
                    pool_rows = def.name == "nn.max_pool2d" && crate::topi::has_pool_rows(&call.attrs);
                    softmax_rows = def.name == "nn.softmax" && softmax_over_rows(store, call);
                    // A packed dense weight [units / b, in, b]: the schedule's column tile is b.
                    // Dimension `dim` of argument `arg`'s checked type.
                    let dim = |arg: usize, dim: usize| {
                        let t = call.args.get(arg).and_then(|&a| store.checked_type(a))?;
                        t.as_tensor().and_then(|t| t.shape.get(dim).copied())
                    };
                    panel = (def.name == "nn.contrib_dense_pack").then(|| dim(1, 2)).flatten();
                    // A packed in row panels [batch, units / r, in, r]: the tile's rows are r.
                    packed_rows = (def.name == "nn.contrib_batch_matmul_pack").then(|| dim(0, 3)).flatten();
                    let transform = matches!(
                        def.name,
                        "nn.contrib_winograd_input_transform" | "nn.contrib_winograd_output_transform"
                    );
                    winograd_tile = transform.then(|| call.attrs.int("tile_size").ok()).flatten();
                }
            }
        }
    }
    let anchor_name = anchor.map_or("", |(_, n)| n);
    let padded_anchor = matches!(
        anchor_name,
        "nn.conv2d"
            | "nn.contrib_conv2d_u8s8"
            | "nn.contrib_conv2d_bf16"
            | "nn.contrib_dense_bf16"
            | "nn.contrib_winograd_input_transform"
    );
    // A max pooling's padded image where a channel's plane is small and the
    // window reads it directly (no row maxima, which read it once per output
    // row, border tests and all): the schedule computes it channel by channel
    // (`schedule_reduction`); were that to fail, the whole image stays a
    // kernel-local buffer, so it is bounded too.
    let small_plane = |t: &Tensor| {
        let plane = t.shape().iter().skip(2).product::<usize>() * t.dtype().size_bytes();
        t.shape().len() == 4
            && plane <= crate::schedule::POOL_PLANE_BYTES
            && plane * t.shape()[..2].iter().product::<usize>() <= POOL_IMAGE_BYTES
    };
    let materialize = |t: &Tensor| {
        (padded_anchor && t.name() == "pad")
            || (anchor_name == "nn.max_pool2d" && !pool_rows && t.name() == "pad" && small_plane(t))
            || (pool_rows && t.name() == crate::topi::POOL_ROWS_STAGE)
            || (softmax_rows && t.name() == crate::topi::SOFTMAX_EXP_STAGE)
            || (anchor_name == "nn.contrib_winograd_input_transform"
                && crate::topi::WINOGRAD_INPUT_STAGES.contains(&t.name()))
    };
    let mut prim = te::lower_with(name, &inputs, &outputs, &materialize).map_err(|e| err(e.to_string()))?;
    prim.attrs.insert("anchor".into(), anchor_name.to_string());
    if transposed_weight {
        prim.attrs.insert("transpose_b".into(), "true".into());
    }
    if let Some(k) = weight_block {
        prim.attrs.insert("conv2d.weight_block".into(), k.to_string());
    }
    if pointwise {
        prim.attrs.insert("conv2d.pointwise".into(), "true".into());
    }
    if let Some(b) = panel {
        prim.attrs.insert("dense_pack.panel".into(), b.to_string());
    }
    if let Some(r) = packed_rows {
        prim.attrs.insert("batch_matmul_pack.rows".into(), r.to_string());
    }
    if let Some(m) = winograd_tile {
        prim.attrs.insert("winograd.tile".into(), m.to_string());
    }
    if groups > 1 {
        prim.attrs.insert("conv2d.groups".into(), groups.to_string());
    }
    Ok(prim)
}
