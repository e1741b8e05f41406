//! ByteActivations: a quantized model's activations stored as bytes between
//! kernels.
//!
//! The ONNX importer computes a quantized model in float32 holding integers:
//! every quantization ends a kernel as `clip(round(x / s) + zp, lo, hi)`,
//! 256 integers, which the next kernel reads as floats — four bytes per
//! value for one byte of information, and most of a quantized MobileNetV2's
//! kernels are bound by moving them (its 96 × 112 × 112 expansion writes
//! 4.8 MB). After FuseOps, this pass makes such a tensor a `uint8` one where
//! every reader is a kernel: the producing kernel ends with
//! `cast(v − lo, uint8)` (exact: `v` is an integer in `[lo, lo + 255]`) and
//! each consuming kernel reads `cast(b, float32) + lo` in place of the float
//! (the cast inlined into its loads). Results are bit-identical.
//!
//! The range is proved as IntegerConv2d proves its data's: by the ops that
//! make the value (see `integer_conv2d::integer_range`), never from the
//! values of one input. A tensor that leaves `@main` (an output, a tuple
//! field), or that a reshape-only kernel reads (its output aliases its
//! input's buffer), stays float.
//!
//! Off by default (`relay.ByteActivations.enable=true` turns it on; CPU
//! pipeline only): measured on MobileNetV2 QOperator (Sapphire Rapids, one
//! thread) it is exact but not yet faster — 3.34 → 3.42–3.55 ms with only the
//! int8 convolutions' outputs as bytes, 3.2 → 3.7 ms with the depthwise
//! ones' too, whose 14 × 14 and 7 × 7 kernels ran 1.8× slower writing rows
//! of 14 and 7 bytes. What the kernels make of byte loads and stores (rows
//! of partial vectors, the word image built from bytes) is the next step.

use std::collections::{HashMap, HashSet};

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, Callee, ExprId, ExprKind, ExprMutator, Store, Type};
use kiln_ir::{DataType, Tensor};

use super::integer_conv2d::integer_range;

/// The kernels' outputs that become bytes: call → the value of its byte 0.
struct Plan {
    bytes: HashMap<ExprId, f64>,
}

/// Rewrites `@main`'s kernel calls (see the module docs); `func` is `@main`'s
/// function after FuseOps.
pub fn byte_activations(store: &mut Store, func: ExprId) -> ExprId {
    let Some(f) = store.as_function(func).cloned() else { return func };
    let plan = plan(store, f.body);
    if plan.bytes.is_empty() {
        return func;
    }
    let body = mutate(store, f.body, &mut Rewrite { plan: &plan });
    let span = store.span(func).clone();
    let new = store.function(f.params.clone(), body, None, f.attrs.clone());
    store.set_span(new, span);
    new
}

/// A call of a fused kernel (a primitive function literal): the function.
fn kernel(store: &Store, id: ExprId) -> Option<ExprId> {
    let call = store.as_call(id)?;
    let Callee::Expr(callee) = call.callee else { return None };
    store.as_function(callee).filter(|f| f.is_primitive()).map(|_| callee)
}

/// The float32 kernel outputs whose every reader is a kernel (not a
/// reshape-only one) and whose value is provably 256 integers or fewer.
fn plan(store: &Store, body: ExprId) -> Plan {
    // Per kernel output read by kernels: the data offsets of the int8
    // convolutions reading it, or None once a reader reads it otherwise than
    // elementwise or as such data.
    let mut readers: HashMap<ExprId, Option<Vec<i64>>> = HashMap::new();
    let mut escapes: HashSet<ExprId> = HashSet::from([body]);
    let mut seen = HashSet::new();
    let mut stack = vec![body];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let kind = store.kind(id);
        if let ExprKind::Function(_) = kind {
            continue;
        }
        let reader = kernel(store, id).and_then(|f| store.as_function(f)).filter(|f| !f.is_reshape_only());
        match (kind, reader) {
            (ExprKind::Call(call), Some(f)) => {
                for (k, &a) in call.args.iter().enumerate() {
                    let offsets = byte_reads(store, f, k);
                    let entry = readers.entry(a).or_insert_with(|| Some(Vec::new()));
                    match (entry.as_mut(), offsets) {
                        (Some(all), Some(these)) => all.extend(these),
                        _ => *entry = None,
                    }
                    stack.push(a);
                }
            }
            _ => kind.for_each_child(|c| {
                if store.as_function(c).is_none() {
                    escapes.insert(c);
                    stack.push(c);
                }
            }),
        }
    }
    let mut bytes = HashMap::new();
    for (&id, offsets) in readers.iter().filter(|(id, _)| !escapes.contains(id)) {
        let Some(offsets) = offsets else { continue };
        let Some(f) = kernel(store, id).and_then(|f| store.as_function(f)) else { continue };
        if f.is_reshape_only() {
            continue;
        }
        let float = store.checked_type(id).and_then(|t| t.as_tensor()).is_some_and(|t| t.dtype == DataType::F32);
        let Some((lo, hi)) = integer_range(store, f.body) else { continue };
        // A reader's int8 convolution takes the bytes as they are only where
        // its data offset is the bytes' (−lo); otherwise the tensor stays float.
        let offsets_match = offsets.iter().all(|&o| o as f64 == -lo);
        if float && lo.is_finite() && hi.is_finite() && hi - lo <= 255.0 && offsets_match {
            bytes.insert(id, lo);
        }
    }
    Plan { bytes }
}

/// Operators that read a byte tensor's values (`cast(b) + lo`) inlined into
/// their loads at no cost worth counting. A padded or windowed read (a
/// float convolution's image, a pooling) of converted bytes was measured
/// slower than of floats (MobileNetV2 QOperator's depthwise kernels 1.8×
/// slower: their image rows became loops of partial vectors), so those
/// readers keep float data.
const ELEMENTWISE: [&str; 12] = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "round",
    "clip",
    "cast",
    "nn.relu",
    "maximum",
    "minimum",
    "floor",
    "nn.bias_add",
];

/// How kernel `f` reads its parameter `index`: the data offsets of the int8
/// convolutions that take it as data, where every other use is elementwise;
/// None where some use is neither.
fn byte_reads(store: &Store, f: &kiln_ir::relay::Function, index: usize) -> Option<Vec<i64>> {
    let &param = f.params.get(index)?;
    if f.body == param {
        return None;
    }
    let mut offsets = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![f.body];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let kind = store.kind(id);
        kind.for_each_child(|c| stack.push(c));
        let uses = kind.children().iter().filter(|&&c| c == param).count();
        if uses == 0 {
            continue;
        }
        match (kind, store.op_name(id)) {
            (ExprKind::Call(call), Some("nn.contrib_conv2d_u8s8")) if call.args[0] == param && uses == 1 => {
                offsets.push(call.attrs.int("data_offset").ok()?);
            }
            (ExprKind::Call(_), Some(op)) if ELEMENTWISE.contains(&op) => {}
            _ => return None,
        }
    }
    Some(offsets)
}

struct Rewrite<'p> {
    plan: &'p Plan,
}

impl ExprMutator for Rewrite<'_> {
    fn descend_into(&mut self, store: &Store, id: ExprId) -> bool {
        // The kernels' bodies are rewritten below, per call.
        store.as_function(id).is_none()
    }

    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        let Some(function) = kernel(store, pre) else { return post };
        let Some(args) = store.as_call(post).map(|c| c.args.clone()) else { return post };
        let pre_args = store.as_call(pre).map(|c| c.args.clone()).unwrap_or_default();
        let produces = self.plan.bytes.get(&pre).copied();
        let reads: Vec<Option<f64>> = pre_args.iter().map(|a| self.plan.bytes.get(a).copied()).collect();
        if produces.is_none() && reads.iter().all(Option::is_none) {
            return post;
        }
        let Some(new_function) = rewrite_kernel(store, function, produces, &reads) else { return post };
        let call = store.call(new_function, args);
        let span = store.span(pre).clone();
        store.set_span(call, span);
        call
    }
}

/// Kernel `function` writing bytes (`produces`: the value of byte 0) and
/// reading bytes for each parameter with `Some(lo)` in `reads`.
fn rewrite_kernel(store: &mut Store, function: ExprId, produces: Option<f64>, reads: &[Option<f64>]) -> Option<ExprId> {
    let f = store.as_function(function)?.clone();
    let mut params = Vec::with_capacity(f.params.len());
    let mut substitutions = HashMap::new();
    // The byte variable that replaces each parameter.
    let mut bytes = HashMap::new();
    for (&p, read) in f.params.iter().zip(reads) {
        let Some(lo) = *read else {
            params.push(p);
            continue;
        };
        let var = store.as_var(p)?.clone();
        let shape = store.ty(var.ty?).as_tensor()?.shape.clone();
        let byte = store.var(var.name.clone(), Some(Type::tensor(shape, DataType::U8)));
        let float = cast(store, byte, "float32")?;
        let value = shifted(store, float, "add", lo)?;
        substitutions.insert(p, value);
        bytes.insert(p, byte);
        params.push(byte);
    }
    let mut body = if substitutions.is_empty() {
        f.body
    } else {
        mutate(store, f.body, &mut Substitute { substitutions: &substitutions, bytes: &bytes })
    };
    if let Some(lo) = produces {
        let shifted = shifted(store, body, "subtract", lo)?;
        body = cast(store, shifted, "uint8")?;
    }
    let new = store.function(params, body, None, f.attrs.clone());
    let span = store.span(function).clone();
    store.set_span(new, span);
    Some(new)
}

/// `x` converted to `dtype`.
fn cast(store: &mut Store, x: ExprId, dtype: &str) -> Option<ExprId> {
    let mut attrs = Attrs::new();
    attrs.set("dtype", AttrValue::Str(dtype.into()));
    store.call_op("cast", vec![x], attrs).ok()
}

/// `op(x, k)` for a float32 scalar `k`, or `x` itself where `k` is 0.
fn shifted(store: &mut Store, x: ExprId, op: &str, k: f64) -> Option<ExprId> {
    if k == 0.0 {
        return Some(x);
    }
    let k = store.constant(Tensor::scalar(DataType::F32, k));
    store.call_op(op, vec![x, k], Attrs::new()).ok()
}

/// Replaces parameter variables by their float values, and an int8
/// convolution's float data by the bytes themselves (the plan checked that
/// its data offset is the bytes' shift: its padding byte stays the byte of 0).
struct Substitute<'s> {
    substitutions: &'s HashMap<ExprId, ExprId>,
    bytes: &'s HashMap<ExprId, ExprId>,
}

impl ExprMutator for Substitute<'_> {
    fn rewrite_var(&mut self, _: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        self.substitutions.get(&pre).copied().unwrap_or(post)
    }

    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        if store.op_name(pre) != Some("nn.contrib_conv2d_u8s8") {
            return post;
        }
        let (Some(pre_call), Some(call)) = (store.as_call(pre).cloned(), store.as_call(post).cloned()) else {
            return post;
        };
        let Some(&byte) = self.bytes.get(&pre_call.args[0]) else { return post };
        let mut args = call.args.clone();
        args[0] = byte;
        let span = store.span(pre).clone();
        store.call_op_at("nn.contrib_conv2d_u8s8", args, call.attrs.clone(), span).unwrap_or(post)
    }
}
