//! FoldConstant: evaluate at compile time what only depends on constants
//! (the seeds' `ConstantChecker` + `ConstantFolder`).
//!
//! - An expression is constant if it is a `Constant`, or a `Tuple` whose fields
//!   are all constant (memoized per node).
//! - `let %x = <constant>; body` propagates the constant into `body` and drops
//!   the binding; as in TVM, a `let` bound to a tuple of constants stays.
//! - `(c0, c1, …).i` becomes `ci`.
//! - An operator call whose arguments are all constant is evaluated with the
//!   operator's reference implementation — except calls with no arguments
//!   (folding `ones(shape=(4, 5))` would only bloat the program) and stateful ops.
//! - `if (<constant>) { a } else { b }` becomes the branch taken.
//! - `shape_of(x)` and `ndarray_size(x)` become constants from `x`'s checked
//!   type, constant or not (TVM's `EvaluateShapeOf`).
//!
//! The walk is iterative over handles. Primitive (fused) functions are left alone.
//! Before it, the operator calls that read only constants (or such calls) are
//! evaluated level by level, the calls of a level on all cores (a network's
//! layers are independent: ResNet-18's 20 weight rewrites, each up to tens of
//! MB), and the walk takes their values.
//! An evaluation error (say, integer division by zero) leaves the call as it is,
//! and so does a call whose evaluation would take more than `max_bytes` (the
//! result plus 16 bytes per element of working copy; `relay.FoldConstant.max_bytes`,
//! default [`DEFAULT_MAX_BYTES`]): like TVM,
//! kiln keeps `broadcast_to(1f, shape=[…])` of gigabytes as an expression
//! computed when the model runs rather than allocate it while compiling.

use rustc_hash::{FxHashMap, FxHashSet};

use kiln_ir::relay::op::{ndarray_size_tensor, shape_of_tensor};
use kiln_ir::relay::visit::post_order_filtered;
use kiln_ir::relay::{op_registry, Callee, ExprId, ExprKind, Store, Type, Value};

/// Whether `id` is a constant or a tuple of constants (recursively).
fn is_constant(store: &Store, id: ExprId, memo: &mut FxHashMap<ExprId, bool>) -> bool {
    if let Some(&known) = memo.get(&id) {
        return known;
    }
    // Children first, without recursion: tuples nest only as deep as the program wrote them.
    let order = post_order_filtered(store, &[id], |n| matches!(store.kind(n), ExprKind::Tuple(_)));
    for n in order {
        let v = match store.kind(n) {
            ExprKind::Constant(_) => true,
            ExprKind::Tuple(fields) => fields.iter().all(|f| memo.get(f).copied().unwrap_or(false)),
            _ => false,
        };
        memo.insert(n, v);
    }
    memo.get(&id).copied().unwrap_or(false)
}

/// The value of a constant expression (a constant or a tuple of them).
fn to_value(store: &Store, id: ExprId) -> Option<Value> {
    match store.kind(id) {
        ExprKind::Constant(c) => Some(Value::Tensor(store.constant_data(*c).clone())),
        ExprKind::Tuple(fields) => {
            fields.iter().map(|&f| to_value(store, f)).collect::<Option<Vec<_>>>().map(Value::Tuple)
        }
        _ => None,
    }
}

/// An expression for a value: a constant, or a tuple of them.
fn from_value(store: &mut Store, v: Value) -> Option<ExprId> {
    match v {
        Value::Tensor(t) => {
            let ty = Type::tensor(t.shape().to_vec(), t.dtype());
            let c = store.constant(t);
            store.set_checked_type(c, ty);
            Some(c)
        }
        Value::Tuple(fields) => {
            let ids = fields.into_iter().map(|f| from_value(store, f)).collect::<Option<Vec<_>>>()?;
            Some(store.tuple(ids))
        }
        Value::Closure(_) => None,
    }
}

/// Default of `relay.FoldConstant.max_bytes`: the most memory one fold may take (256 MiB).
pub const DEFAULT_MAX_BYTES: usize = 256 << 20;

/// Bytes evaluating a value of type `ty` may take (saturating): the result
/// plus the reference implementations' working copy (an `f64` and an index
/// per element).
fn type_bytes(ty: &Type) -> usize {
    match ty {
        Type::Tensor(t) => t.numel().saturating_mul(t.dtype.size_bytes() + 16),
        Type::Tuple(fields) => fields.iter().fold(0, |a, f| a.saturating_add(type_bytes(f))),
        Type::Func(_) | Type::Var(_) => 0,
    }
}

/// Whether the walk evaluates call `id` once its arguments are constants: an
/// operator with arguments, not stateful, not `shape_of` or `ndarray_size`
/// (folded from types), its result within `max_bytes`.
fn evaluable(store: &Store, id: ExprId, callee: Callee, args: &[ExprId], max_bytes: usize) -> bool {
    let Callee::Op(op) = callee else { return false };
    let info = op_registry().get(op);
    !args.is_empty()
        && !info.stateful
        && !matches!(info.name, "shape_of" | "ndarray_size")
        && store.checked_type(id).is_none_or(|t| type_bytes(t) <= max_bytes)
}

/// The values of the calls of `order` whose arguments are constants or calls
/// of this kind (recursively), evaluated level by level — a call after those
/// it reads — and within a level in parallel, largest results first. A call
/// whose evaluation fails is missing, and so are those that read it (the walk
/// then tries them itself and leaves them as they are).
fn evaluate_constant_calls(
    store: &Store,
    order: &[ExprId],
    max_bytes: usize,
    memo: &mut FxHashMap<ExprId, bool>,
) -> FxHashMap<ExprId, Value> {
    let mut level: FxHashMap<ExprId, usize> = FxHashMap::default();
    let mut levels: Vec<Vec<ExprId>> = Vec::new();
    for &id in order {
        let ExprKind::Call(call) = store.kind(id) else { continue };
        if !evaluable(store, id, call.callee, &call.args, max_bytes) {
            continue;
        }
        let mut depth = 0;
        let ready = call.args.iter().all(|&a| match level.get(&a) {
            Some(&l) => {
                depth = depth.max(l + 1);
                true
            }
            None => is_constant(store, a, memo),
        });
        if ready {
            level.insert(id, depth);
            if levels.len() <= depth {
                levels.resize_with(depth + 1, Vec::new);
            }
            levels[depth].push(id);
        }
    }
    let mut values: FxHashMap<ExprId, Value> = FxHashMap::default();
    for ids in levels {
        // Each job: a call and its argument values (all there: none failed).
        let mut jobs: Vec<(ExprId, Vec<Value>)> = (ids.into_iter())
            .filter_map(|id| {
                let ExprKind::Call(call) = store.kind(id) else { return None };
                let args = call.args.iter().map(|a| values.get(a).cloned().or_else(|| to_value(store, *a)));
                Some((id, args.collect::<Option<Vec<_>>>()?))
            })
            .collect();
        let bytes = |id: ExprId| store.checked_type(id).map_or(0, type_bytes);
        jobs.sort_by_key(|(id, _)| std::cmp::Reverse(bytes(*id)));
        // Threads only for work worth their start (tens of microseconds each).
        let large = jobs.iter().map(|(id, _)| bytes(*id)).sum::<usize>() >= PARALLEL_FOLD_BYTES;
        let threads = if large { crate::parallel::cores() } else { 1 };
        let results = crate::parallel::parallel_map(&jobs, threads, |(id, args)| {
            let ExprKind::Call(call) = store.kind(*id) else { return None };
            let Callee::Op(op) = call.callee else { return None };
            let value = (op_registry().get(op).eval)(args, &call.attrs).ok();
            // Interning the result hashes its bytes: done here, in parallel,
            // not on the main thread after (ResNet-18's weights-only rebuild
            // hashed ~150 MB of folded weights there).
            if let Some(Value::Tensor(t)) = &value {
                t.digest();
            }
            value
        });
        for ((id, _), v) in jobs.into_iter().zip(results) {
            if let Some(v) = v.flatten() {
                values.insert(id, v);
            }
        }
    }
    values
}

/// The results (as [`type_bytes`] counts them) a level of constant calls
/// must reach to be evaluated on several threads.
const PARALLEL_FOLD_BYTES: usize = 1 << 20;

/// Fold the constants of one function, none above [`DEFAULT_MAX_BYTES`].
pub fn fold_constant(store: &mut Store, func: ExprId) -> ExprId {
    fold_constant_up_to(store, func, DEFAULT_MAX_BYTES)
}

/// Fold the constants of one function, leaving calls whose results would
/// take more than `max_bytes`; returns the new function handle.
pub fn fold_constant_up_to(store: &mut Store, func: ExprId, max_bytes: usize) -> ExprId {
    let order = post_order_filtered(
        store,
        &[func],
        |id| !matches!(store.kind(id), ExprKind::Function(f) if f.is_primitive() && id != func),
    );
    // The value each let-bound variable stands for.
    let mut let_value: FxHashMap<ExprId, ExprId> = FxHashMap::default();
    for &id in &order {
        if let ExprKind::Let { var, value, .. } = *store.kind(id) {
            let_value.insert(var, value);
        }
    }
    let mut new_of: FxHashMap<ExprId, ExprId> = FxHashMap::default();
    let mut constant_memo: FxHashMap<ExprId, bool> = FxHashMap::default();
    let mut ahead = evaluate_constant_calls(store, &order, max_bytes, &mut constant_memo);
    // Let-bound variables some use of which could not be replaced by the constant.
    let mut kept_vars: FxHashSet<ExprId> = FxHashSet::default();

    for &id in &order {
        let kind = store.kind(id).clone();
        // A child's new version; a let-bound variable whose value folded to a constant becomes that constant.
        let mut resolve = |c: ExprId, store: &Store| -> ExprId {
            if let Some(&value) = let_value.get(&c) {
                match new_of.get(&value) {
                    Some(&v) if matches!(store.kind(v), ExprKind::Constant(_)) => return v,
                    Some(_) => {}
                    None => {
                        kept_vars.insert(c);
                    }
                }
            }
            new_of.get(&c).copied().unwrap_or(c)
        };
        let mut children = Vec::new();
        kind.for_each_child(|c| children.push(c));
        let mut mapped = Vec::with_capacity(children.len());
        for &c in &children {
            // Binders stay variables.
            let is_binder = match &kind {
                ExprKind::Let { var, .. } => *var == c,
                ExprKind::Function(f) => f.params.contains(&c),
                _ => false,
            };
            mapped.push(if is_binder { c } else { resolve(c, store) });
        }
        let changed = mapped.iter().zip(&children).any(|(a, b)| a != b);
        let mut it = mapped.into_iter();
        let rebuilt = if changed {
            let span = store.span(id).clone();
            let k = kind.map_children(|c| it.next().unwrap_or(c));
            store.add(k, span)
        } else {
            id
        };
        let result = match store.kind(rebuilt).clone() {
            ExprKind::Let { var, value, body } => {
                if matches!(store.kind(value), ExprKind::Constant(_)) && !kept_vars.contains(&var) {
                    body
                } else {
                    rebuilt
                }
            }
            ExprKind::TupleGetItem { tuple, index } => match store.kind(tuple) {
                ExprKind::Tuple(fields) if index < fields.len() => fields[index],
                _ => rebuilt,
            },
            ExprKind::If { cond, then_branch, else_branch } => match store.kind(cond) {
                ExprKind::Constant(c) if store.constant_data(*c).numel() == 1 => {
                    if store.constant_data(*c).get_f64(0) != 0.0 {
                        then_branch
                    } else {
                        else_branch
                    }
                }
                _ => rebuilt,
            },
            ExprKind::Call(call) => {
                let evaluated = match call.callee {
                    // Evaluated ahead, from the same constants this call reads now.
                    Callee::Op(_) if ahead.contains_key(&id) => ahead.remove(&id).and_then(|v| from_value(store, v)),
                    // As in TVM, the shape of a statically shaped value is a
                    // constant whether or not the value is.
                    Callee::Op(op) if matches!(op_registry().get(op).name, "shape_of" | "ndarray_size") => {
                        let arg = call.args.first().and_then(|&a| store.checked_type(a)).and_then(|t| t.as_tensor());
                        match (arg.map(|t| t.shape.clone()), call.attrs.dtype("dtype")) {
                            (Some(shape), Ok(dtype)) => {
                                let value = if op_registry().get(op).name == "shape_of" {
                                    shape_of_tensor(&shape, dtype)
                                } else {
                                    ndarray_size_tensor(&shape, dtype)
                                };
                                from_value(store, Value::Tensor(value))
                            }
                            _ => None,
                        }
                    }
                    Callee::Op(op)
                        if evaluable(store, id, call.callee, &call.args, max_bytes)
                            && call.args.iter().all(|&a| is_constant(store, a, &mut constant_memo)) =>
                    {
                        let values: Option<Vec<Value>> = call.args.iter().map(|&a| to_value(store, a)).collect();
                        values
                            .and_then(|vals| (op_registry().get(op).eval)(&vals, &call.attrs).ok())
                            .and_then(|v| from_value(store, v))
                    }
                    _ => None,
                };
                evaluated.unwrap_or(rebuilt)
            }
            _ => rebuilt,
        };
        if result != id {
            if let (Some(t), None) = (store.checked_type(id).cloned(), store.checked_type(result)) {
                store.set_checked_type(result, t);
            }
        }
        new_of.insert(id, result);
    }
    new_of.get(&func).copied().unwrap_or(func)
}
