//! TE, tensor expressions: each tensor is a placeholder (an input) or a
//! `compute` — an expression of its output indices over other tensors —
//! possibly reducing over extra axes. `lower` turns a set of output tensors
//! into one TIR `PrimFunc`, inlining injective producers into their consumers.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use kiln_ir::DataType;

use crate::tir::{Buffer, Combiner, Expr, Reduce, Scope, TirType, Var};

mod lower;

pub use lower::{lower, lower_with, LowerError};

/// How a tensor is produced.
#[derive(Debug)]
pub enum Operation {
    /// An input of the kernel.
    Placeholder,
    /// `out[axes] = body`, where `body` may be one `Expr::Reduce`.
    Compute { axes: Vec<Var>, body: Expr },
}

#[derive(Debug)]
pub struct TensorNode {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: DataType,
    pub op: Operation,
    /// The buffer that loads of this tensor refer to (and that holds it once materialized).
    pub buffer: Buffer,
    /// The tensors the body loads from (kept alive with this one).
    pub deps: Vec<Tensor>,
}

/// Buffer id → tensor, so that a compute can find the tensors its body loads.
/// Weak: the registry never keeps a tensor alive; `TensorNode::deps` does.
fn registry() -> &'static Mutex<HashMap<u32, Weak<TensorNode>>> {
    static REGISTRY: std::sync::OnceLock<Mutex<HashMap<u32, Weak<TensorNode>>>> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn register(node: TensorNode) -> Tensor {
    let t = Tensor(Arc::new(node));
    let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    if reg.len() > 4096 {
        reg.retain(|_, w| w.strong_count() > 0);
    }
    reg.insert(t.buffer().id(), Arc::downgrade(&t.0));
    t
}

/// The live tensors whose buffers `body` loads.
fn find_deps(body: &Expr) -> Vec<Tensor> {
    let mut ids = Vec::new();
    collect_load_ids(body, &mut ids);
    let reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    let mut deps: Vec<Tensor> = Vec::new();
    for id in ids {
        if let Some(t) = reg.get(&id).and_then(Weak::upgrade).map(Tensor) {
            if !deps.contains(&t) {
                deps.push(t);
            }
        }
    }
    deps
}

fn collect_load_ids(e: &Expr, out: &mut Vec<u32>) {
    if let Expr::Load(b, _) = e {
        out.push(b.id());
    }
    e.for_each_child(|c| collect_load_ids(c, out));
}

/// A tensor of a tensor expression. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Tensor(pub Arc<TensorNode>);

impl PartialEq for Tensor {
    fn eq(&self, other: &Self) -> bool {
        self.0.buffer == other.0.buffer
    }
}
impl Eq for Tensor {}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}:{}", self.0.name, self.0.shape, self.0.dtype)
    }
}

impl Tensor {
    pub fn name(&self) -> &str {
        &self.0.name
    }
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    pub fn dtype(&self) -> DataType {
        self.0.dtype
    }
    pub fn buffer(&self) -> &Buffer {
        &self.0.buffer
    }
    pub fn ndim(&self) -> usize {
        self.0.shape.len()
    }

    /// `self[indices]` as an expression.
    pub fn at(&self, indices: &[Expr]) -> Expr {
        Expr::Load(self.0.buffer.clone(), indices.to_vec())
    }

    /// Whether the tensor's body reduces (such tensors are never inlined).
    pub fn is_reduction(&self) -> bool {
        matches!(&self.0.op, Operation::Compute { body: Expr::Reduce(_), .. })
    }
}

/// An input tensor.
pub fn placeholder(name: &str, shape: &[usize], dtype: DataType) -> Tensor {
    register(TensorNode {
        name: name.to_string(),
        shape: shape.to_vec(),
        dtype,
        op: Operation::Placeholder,
        buffer: Buffer::new(name, dtype, shape.to_vec(), Scope::Global),
        deps: Vec::new(),
    })
}

/// `name[i0, i1, …] = f([i0, i1, …])`. The dtype is the body's.
pub fn compute(name: &str, shape: &[usize], f: impl FnOnce(&[Expr]) -> Expr) -> Tensor {
    let axes: Vec<Var> = (0..shape.len()).map(|i| Var::index(&format!("ax{i}"))).collect();
    let idx: Vec<Expr> = axes.iter().map(Expr::var).collect();
    let body = f(&idx);
    let dtype = body.ty().elem;
    let deps = find_deps(&body);
    register(TensorNode {
        name: name.to_string(),
        shape: shape.to_vec(),
        dtype,
        op: Operation::Compute { axes, body },
        buffer: Buffer::new(name, dtype, shape.to_vec(), Scope::Global),
        deps,
    })
}

/// [`compute`] with a body that may fail.
pub fn try_compute<E>(name: &str, shape: &[usize], f: impl FnOnce(&[Expr]) -> Result<Expr, E>) -> Result<Tensor, E> {
    let mut err = None;
    let t = compute(name, shape, |idx| {
        f(idx).unwrap_or_else(|e| {
            err = Some(e);
            Expr::int(0)
        })
    });
    match err {
        Some(e) => Err(e),
        None => Ok(t),
    }
}

/// A reduction axis of `extent` iterations.
pub fn reduce_axis(extent: usize, name: &str) -> (Var, usize) {
    (Var::new(name, TirType::INDEX), extent)
}

/// `combiner` of `source` over `axes`.
pub fn reduce(combiner: Combiner, source: Expr, axes: &[(Var, usize)]) -> Expr {
    Expr::Reduce(Box::new(Reduce { combiner, source, axes: axes.to_vec() }))
}

/// Σ `source` over `axes`.
pub fn sum(source: Expr, axes: &[(Var, usize)]) -> Expr {
    reduce(Combiner::Sum, source, axes)
}
