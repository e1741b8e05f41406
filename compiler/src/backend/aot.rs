//! AOT executor planning: the fused `@main` becomes an ordered list of kernel
//! calls over numbered tensors, each tensor stored as an input, an output, a
//! constant, or a slice of one arena placed by [`super::plan_memory`].
//!
//! This is the executor as data; `build` turns it into generated code, and
//! [`super::host`] runs it in process for tests and the CLI.

use rustc_hash::FxHashMap;

use kiln_ir::relay::visit::post_order_filtered;
use kiln_ir::relay::{structural_eq, structural_hash, Callee, ExprId, ExprKind, IRModule, Type};
use kiln_ir::{DataType, Tensor};

use super::lower_te::{kernel_name, lower_primitive};
use super::plan_memory::{plan, Lifetime};
use crate::tir::PrimFunc;

/// Arena offsets are multiples of this (a cache line; enough for AVX-512 loads).
pub const ARENA_ALIGN: usize = 64;

/// Where a tensor's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The `i`-th input of the model.
    Input(usize),
    /// The `i`-th output of the model.
    Output(usize),
    /// The `i`-th constant (read-only data).
    Constant(usize),
    /// A slice of the arena.
    Arena {
        /// Offset in bytes from the arena's start, a multiple of [`ARENA_ALIGN`].
        offset: usize,
    },
}

/// One tensor of the executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSlot {
    /// The input's parameter name; `constantN`, `outputN` or `tN` for the others.
    pub name: String,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DataType,
    /// Where the bytes are.
    pub storage: Storage,
    /// The tensor whose bytes these are, under another shape (the result of a
    /// `relay.reshape_only` kernel, for which no kernel runs); its storage is
    /// that tensor's.
    pub alias_of: Option<usize>,
}

impl TensorSlot {
    /// Size in bytes (row-major, no padding).
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size_bytes()
    }
}

/// One kernel call: the kernel and its arguments (inputs then outputs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCall {
    /// Index of the kernel in [`ExecutorPlan::kernels`].
    pub kernel: usize,
    /// Tensor ids (indices into [`ExecutorPlan::tensors`]): the kernel's inputs, then its outputs.
    pub args: Vec<usize>,
}

/// The whole executor of a model (the default: empty, no arena).
#[derive(Clone, Debug, Default)]
pub struct ExecutorPlan {
    /// The kernels; structurally equal fused functions share one.
    pub kernels: Vec<PrimFunc>,
    /// Every tensor; a tensor id is an index here.
    pub tensors: Vec<TensorSlot>,
    /// The kernel calls, in execution order.
    pub calls: Vec<KernelCall>,
    /// The constant data, indexed by [`Storage::Constant`].
    pub constants: Vec<Tensor>,
    /// Tensor ids of the inputs, in order.
    pub inputs: Vec<usize>,
    /// Tensor ids of the outputs, in order.
    pub outputs: Vec<usize>,
    /// Size of the arena in bytes (placed tensors at `ARENA_ALIGN`-aligned offsets).
    pub arena_bytes: usize,
    /// The peak of simultaneously live intermediate bytes (no plan can do better).
    pub arena_lower_bound: usize,
}

impl ExecutorPlan {
    /// Check that `inputs` are the model's inputs: their number, shapes and dtypes.
    pub fn check_inputs(&self, inputs: &[kiln_ir::Tensor]) -> Result<(), super::RunError> {
        if inputs.len() != self.inputs.len() {
            return Err(super::RunError::InputCount { expected: self.inputs.len(), given: inputs.len() });
        }
        for (index, (&t, given)) in self.inputs.iter().zip(inputs).enumerate() {
            let slot = &self.tensors[t];
            if given.shape() != slot.shape.as_slice() || given.dtype() != slot.dtype {
                return Err(super::RunError::InputMismatch {
                    index,
                    name: slot.name.clone(),
                    expected_shape: slot.shape.clone(),
                    expected_dtype: slot.dtype,
                    shape: given.shape().to_vec(),
                    dtype: given.dtype(),
                });
            }
        }
        Ok(())
    }
}

/// Why `@main` cannot become an executor.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("building the executor: {0}")]
pub struct AotError(pub String);

/// A value of `@main`: one tensor or a tuple of them.
#[derive(Clone, Debug)]
enum Val {
    T(usize),
    Tuple(Vec<Val>),
}

fn flatten(v: &Val, out: &mut Vec<usize>) {
    match v {
        Val::T(t) => out.push(*t),
        Val::Tuple(f) => f.iter().for_each(|x| flatten(x, out)),
    }
}

fn leaf_types(ty: &Type, out: &mut Vec<(Vec<usize>, DataType)>) -> Result<(), AotError> {
    match ty {
        Type::Tensor(t) => out.push((t.shape.clone(), t.dtype)),
        Type::Tuple(f) => f.iter().try_for_each(|x| leaf_types(x, out))?,
        Type::Func(_) => return Err(AotError("a function value cannot be a model output".into())),
        Type::Var(v) => {
            return Err(AotError(format!(
                "a model output of type parameter `{v}`: a polymorphic function is not compiled (call it with concrete types)"
            )))
        }
    }
    Ok(())
}

/// Plan the executor of a fused, type-checked module.
pub fn plan_executor(m: &IRModule) -> Result<ExecutorPlan, AotError> {
    let err = |s: String| AotError(s);
    // The source location of `id`, when it has one: "<what> (at 3:5)".
    let at = |id: ExprId, what: String| match m.store.span(id) {
        kiln_ir::Span::Unknown => AotError(what),
        span => AotError(format!("{what} (at {span})")),
    };
    let main = m.main().map_err(|e| err(e.to_string()))?;
    let f = m.store.as_function(main).ok_or_else(|| err("@main is not a function".into()))?;
    let store = &m.store;
    let mut p = ExecutorPlan::default();
    let mut vals: FxHashMap<ExprId, Val> = FxHashMap::default();
    for (i, &param) in f.params.iter().enumerate() {
        let ty = store.checked_type(param).ok_or_else(|| err("run InferType before planning".into()))?;
        let t = ty.as_tensor().ok_or_else(|| err(format!("input {i} is not a tensor")))?;
        let name = store.as_var(param).map(|v| v.name.clone()).unwrap_or_default();
        p.tensors.push(TensorSlot {
            name,
            shape: t.shape.clone(),
            dtype: t.dtype,
            storage: Storage::Input(i),
            alias_of: None,
        });
        p.inputs.push(p.tensors.len() - 1);
        vals.insert(param, Val::T(p.tensors.len() - 1));
    }
    // Kernel dedup: structurally equal primitive functions share one kernel.
    let mut kernel_of: Vec<(u64, ExprId, usize)> = Vec::new();
    let order = post_order_filtered(store, &[f.body], |id| !matches!(store.kind(id), ExprKind::Function(_)));
    for id in order {
        let v = match store.kind(id) {
            ExprKind::Var(_) if vals.contains_key(&id) => continue,
            ExprKind::Function(_) => continue,
            ExprKind::Constant(c) => {
                let data = store.constant_data(*c).clone();
                p.tensors.push(TensorSlot {
                    name: format!("constant{}", p.constants.len()),
                    shape: data.shape().to_vec(),
                    dtype: data.dtype(),
                    storage: Storage::Constant(p.constants.len()),
                    alias_of: None,
                });
                p.constants.push(data);
                Val::T(p.tensors.len() - 1)
            }
            ExprKind::Call(call) => {
                let Callee::Expr(callee) = call.callee else {
                    return Err(err(format!(
                        "operator `{}` outside a fused function: run FuseOps first",
                        store.op_name(id).unwrap_or("?")
                    )));
                };
                let is_primitive = store.as_function(callee).is_some_and(|g| g.is_primitive());
                if !is_primitive {
                    return Err(at(
                        id,
                        "only calls of primitive (fused) functions can be compiled ahead of time".into(),
                    ));
                }
                if let Some(alias) = reshape_alias(&mut p, store, callee, id, &call.args, &vals) {
                    vals.insert(id, Val::T(alias));
                    continue;
                }
                let h = structural_hash(store, callee);
                let existing =
                    kernel_of.iter().find(|(kh, kf, _)| *kh == h && structural_eq(store, *kf, store, callee));
                let kernel = match existing {
                    Some(&(_, _, k)) => k,
                    None => {
                        let mut name = kernel_name(store, callee);
                        if p.kernels.iter().any(|k| k.name == name) {
                            name = format!("{name}_{}", p.kernels.len());
                        }
                        let prim = lower_primitive(store, callee, &name).map_err(|e| err(e.to_string()))?;
                        p.kernels.push(prim);
                        kernel_of.push((h, callee, p.kernels.len() - 1));
                        p.kernels.len() - 1
                    }
                };
                let mut args = Vec::new();
                for a in &call.args {
                    let v = vals.get(a).ok_or_else(|| err("an argument was not computed".into()))?;
                    flatten(v, &mut args);
                }
                let ty = store.checked_type(id).ok_or_else(|| err("run InferType before planning".into()))?;
                let mut leaves = Vec::new();
                leaf_types(ty, &mut leaves)?;
                let mut outs = Vec::new();
                for (shape, dtype) in leaves {
                    p.tensors.push(TensorSlot {
                        name: format!("t{}", p.tensors.len()),
                        shape,
                        dtype,
                        storage: Storage::Arena { offset: 0 },
                        alias_of: None,
                    });
                    outs.push(p.tensors.len() - 1);
                }
                args.extend(&outs);
                p.calls.push(KernelCall { kernel, args });
                if outs.len() == 1 && ty.as_tensor().is_some() {
                    Val::T(outs[0])
                } else {
                    Val::Tuple(outs.into_iter().map(Val::T).collect())
                }
            }
            ExprKind::Tuple(fields) => Val::Tuple(
                fields
                    .iter()
                    .map(|x| vals.get(x).cloned().ok_or_else(|| err("a tuple field was not computed".into())))
                    .collect::<Result<_, _>>()?,
            ),
            ExprKind::TupleGetItem { tuple, index } => match vals.get(tuple) {
                Some(Val::Tuple(fs)) => {
                    fs.get(*index).cloned().ok_or_else(|| err("tuple index out of range".into()))?
                }
                _ => return Err(err("a projection of a non-tuple".into())),
            },
            other => return Err(at(id, format!("{} in @main is not supported ahead of time", other.kind_name()))),
        };
        vals.insert(id, v);
    }
    let result = vals.get(&f.body).ok_or_else(|| err("@main's result was not computed".into()))?;
    let mut outs = Vec::new();
    flatten(result, &mut outs);
    for (i, &t) in outs.iter().enumerate() {
        let root = p.tensors[t].alias_of;
        match p.tensors[t].storage {
            Storage::Arena { .. } if !p.outputs.contains(&t) && root.is_none() => {
                p.tensors[t].storage = Storage::Output(i);
                p.outputs.push(t);
            }
            // A reshape-only result: the tensor it aliases is computed into
            // the output buffer, unless that tensor is placed otherwise.
            _ if root.is_some_and(|r| {
                matches!(p.tensors[r].storage, Storage::Arena { .. })
                    && !p.outputs.contains(&r)
                    && !p.outputs.contains(&t)
            }) =>
            {
                let r = root.unwrap_or(t);
                p.tensors[r].storage = Storage::Output(i);
                p.outputs.push(t);
            }
            // An input, a constant or a repeated output is copied into its own output buffer.
            _ => {
                let src = p.tensors[t].clone();
                let kernel = copy_kernel(&mut p, &src.shape, src.dtype).map_err(err)?;
                p.tensors.push(TensorSlot {
                    name: format!("output{i}"),
                    storage: Storage::Output(i),
                    alias_of: None,
                    ..src
                });
                let dst = p.tensors.len() - 1;
                p.calls.push(KernelCall { kernel, args: vec![t, dst] });
                p.outputs.push(dst);
            }
        }
    }
    place_intermediates(&mut p);
    for t in 0..p.tensors.len() {
        if let Some(root) = p.tensors[t].alias_of {
            p.tensors[t].storage = p.tensors[root].storage.clone();
        }
    }
    Ok(p)
}

/// For a call of a `relay.reshape_only` kernel with one tensor argument and
/// one tensor result: a new tensor slot sharing the argument's bytes (no
/// kernel call); `None` for any other call.
fn reshape_alias(
    p: &mut ExecutorPlan,
    store: &kiln_ir::relay::Store,
    callee: ExprId,
    call: ExprId,
    args: &[ExprId],
    vals: &FxHashMap<ExprId, Val>,
) -> Option<usize> {
    if !store.as_function(callee)?.is_reshape_only() {
        return None;
    }
    let [arg] = args else { return None };
    let Some(Val::T(source)) = vals.get(arg) else { return None };
    let out = store.checked_type(call)?.as_tensor()?;
    let src = &p.tensors[*source];
    if out.dtype != src.dtype || out.numel() != src.shape.iter().product::<usize>() {
        return None;
    }
    let root = src.alias_of.unwrap_or(*source);
    p.tensors.push(TensorSlot {
        name: format!("t{}", p.tensors.len()),
        shape: out.shape.clone(),
        dtype: out.dtype,
        storage: Storage::Arena { offset: 0 },
        alias_of: Some(root),
    });
    Some(p.tensors.len() - 1)
}

/// The index of a kernel copying a tensor of `shape` and `dtype`, added once.
fn copy_kernel(p: &mut ExecutorPlan, shape: &[usize], dtype: DataType) -> Result<usize, String> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let name = format!("copy_{dtype}_{}", dims.join("x"));
    if let Some(k) = p.kernels.iter().position(|k| k.name == name) {
        return Ok(k);
    }
    let src = crate::te::placeholder("src", shape, dtype);
    let s2 = src.clone();
    let dst = crate::te::compute("dst", shape, |i| s2.at(i));
    let f = crate::te::lower(&name, &[src], &[dst]).map_err(|e| e.to_string())?;
    p.kernels.push(f);
    Ok(p.kernels.len() - 1)
}

/// Live ranges of the arena tensors (from the call that writes them to the last that reads them), then placement.
fn place_intermediates(p: &mut ExecutorPlan) {
    let mut first: FxHashMap<usize, usize> = FxHashMap::default();
    let mut last: FxHashMap<usize, usize> = FxHashMap::default();
    for (step, c) in p.calls.iter().enumerate() {
        // A use of an alias is a use of the tensor it aliases.
        for t in c.args.iter().map(|&t| p.tensors[t].alias_of.unwrap_or(t)) {
            if matches!(p.tensors[t].storage, Storage::Arena { .. }) {
                first.entry(t).or_insert(step);
                last.insert(t, step);
            }
        }
    }
    let ids: Vec<usize> = (0..p.tensors.len()).filter(|t| first.contains_key(t)).collect();
    let lives: Vec<Lifetime> =
        ids.iter().map(|t| Lifetime { bytes: p.tensors[*t].bytes(), first: first[t], last: last[t] }).collect();
    let mp = plan(&lives, ARENA_ALIGN);
    for (k, &t) in ids.iter().enumerate() {
        p.tensors[t].storage = Storage::Arena { offset: mp.offsets[k] };
    }
    p.arena_bytes = mp.arena_bytes;
    p.arena_lower_bound = mp.lower_bound;
}
