//! TE → TIR: one `PrimFunc` for a set of output tensors.
//!
//! Every compute tensor that is not an output and does not reduce is inlined
//! into its consumers (its body substituted at each load). The others are
//! materialized in dependency order, each as a loop nest over its axes: an
//! output into its parameter buffer, an intermediate into a kernel-local buffer.
//! A reduction becomes `init; for k…: acc = acc ⊕ source`.
//!
//! Inlining substitutes trees, so a graph whose values each feed several
//! later ones (`%i = add(%{i-1}, %{i-2})`) would expand exponentially. A body
//! whose full expansion exceeds [`SHARE_ABOVE_NODES`] therefore computes each
//! inlined value it reads more than once at the same index once, `let`-bound
//! before the store; ordinary fused kernels stay below and are unchanged.

use std::collections::{HashMap, HashSet};

use crate::tir::{Buffer, Expr, ForKind, PrimFunc, Scope, Stmt, TirType, Var};

use super::{Operation, Tensor};

/// Why a set of tensors cannot become one kernel.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowerError {
    #[error("kernel `{kernel}`: tensor `{tensor}` is read but is neither an input nor computed")]
    MissingInput { kernel: String, tensor: String },
}

/// All tensors reachable from `outputs`, producers before consumers.
fn topo_order(outputs: &[Tensor]) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut done: HashSet<u32> = HashSet::new();
    // Explicit stack of (tensor, dependencies already pushed).
    let mut stack: Vec<(Tensor, bool)> = outputs.iter().rev().map(|t| (t.clone(), false)).collect();
    while let Some((t, expanded)) = stack.pop() {
        let id = t.buffer().id();
        if done.contains(&id) {
            continue;
        }
        if expanded {
            done.insert(id);
            order.push(t);
            continue;
        }
        stack.push((t.clone(), true));
        for dep in t.0.deps.iter().rev() {
            if !done.contains(&dep.buffer().id()) {
                stack.push((dep.clone(), false));
            }
        }
    }
    order
}

/// Substitute the bodies of inlined tensors into `e`.
fn inline(e: &Expr, inlined: &HashMap<u32, Tensor>) -> Expr {
    match e {
        Expr::Load(b, idx) => {
            let idx: Vec<Expr> = idx.iter().map(|i| inline(i, inlined)).collect();
            match inlined.get(&b.id()).map(|t| &t.0.op) {
                Some(Operation::Compute { axes, body }) => {
                    let substituted = body.substitute(&|v| axes.iter().position(|a| a == v).map(|k| idx[k].clone()));
                    inline(&substituted, inlined)
                }
                _ => Expr::Load(b.clone(), idx),
            }
        }
        _ => e.map_children(|c| inline(c, inlined)),
    }
}

/// Above this many expression nodes, a fully inlined body shares repeated
/// values (see the module comment).
const SHARE_ABOVE_NODES: u64 = 4096;

/// Nodes of `e` with every inlined tensor substituted, from the expanded
/// sizes of the tensors already seen (saturating: the point is to notice
/// when it is huge).
fn expanded_size(e: &Expr, sizes: &HashMap<u32, u64>) -> u64 {
    let mut n: u64 = 1;
    if let Expr::Load(b, _) = e {
        n = n.saturating_add(sizes.get(&b.id()).copied().unwrap_or(0));
    }
    e.for_each_child(|c| n = n.saturating_add(expanded_size(c, sizes)));
    n
}

/// Inlining that binds each inlined value read at an index it was read at
/// before to one `let` variable (computed once). Values under a `select`
/// branch are inlined as usual: hoisting them could read out of bounds
/// where the branch guards the index.
struct SharedInline<'a> {
    inlined: &'a HashMap<u32, Tensor>,
    memo: HashMap<(u32, String), Var>,
    lets: Vec<(Var, Expr)>,
}

impl SharedInline<'_> {
    fn expr(&mut self, e: &Expr, guarded: bool) -> Expr {
        match e {
            Expr::Load(b, idx) => {
                let idx: Vec<Expr> = idx.iter().map(|i| self.expr(i, guarded)).collect();
                let Some(t) = self.inlined.get(&b.id()) else { return Expr::Load(b.clone(), idx) };
                let Operation::Compute { axes, body } = &t.0.op else { return Expr::Load(b.clone(), idx) };
                let key = (b.id(), format!("{idx:?}"));
                if let Some(v) = self.memo.get(&key).filter(|_| !guarded) {
                    return Expr::var(v);
                }
                let substituted = body.substitute(&|v| axes.iter().position(|a| a == v).map(|k| idx[k].clone()));
                let value = self.expr(&substituted, guarded);
                if guarded || matches!(value, Expr::Load(..) | Expr::Var(_) | Expr::Int(..) | Expr::Float(..)) {
                    return value;
                }
                let v = Var::new(t.name(), TirType::scalar(t.dtype()));
                self.lets.push((v.clone(), value));
                self.memo.insert(key, v.clone());
                Expr::var(&v)
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(c, guarded);
                Expr::select(c, self.expr(a, true), self.expr(b, true))
            }
            _ => e.map_children(|c| self.expr(c, guarded)),
        }
    }
}

/// The loop nest computing `t` into `target`.
fn materialize(t: &Tensor, target: &Buffer, inlined: &HashMap<u32, Tensor>, sizes: &HashMap<u32, u64>) -> Stmt {
    let Operation::Compute { axes, body } = &t.0.op else { return Stmt::nop() };
    let idx: Vec<Expr> = axes.iter().map(Expr::var).collect();
    let loop_over = |vars: &[(crate::tir::Var, usize)], mut s: Stmt| {
        for (v, extent) in vars.iter().rev() {
            s = Stmt::for_loop(v.clone(), *extent, ForKind::Serial, s);
        }
        s
    };
    let spatial: Vec<(crate::tir::Var, usize)> = axes.iter().cloned().zip(t.shape().iter().copied()).collect();
    match body {
        Expr::Reduce(r) => {
            // `for spatial… { init; for reduce… { update } }`: the form the
            // schedule primitives expect (decompose_reduction moves the reduction
            // loops outside a tile of the spatial ones).
            let source = inline(&r.source, inlined);
            let init =
                Stmt::Store { buffer: target.clone(), indices: idx.clone(), value: r.combiner.identity(t.dtype()) };
            let acc = Expr::Load(target.clone(), idx.clone());
            let update =
                Stmt::Store { buffer: target.clone(), indices: idx.clone(), value: r.combiner.combine(acc, source) };
            loop_over(&spatial, Stmt::seq(vec![init, loop_over(&r.axes, update)]))
        }
        _ if expanded_size(body, sizes) > SHARE_ABOVE_NODES => {
            let mut sharing = SharedInline { inlined, memo: HashMap::new(), lets: Vec::new() };
            let value = sharing.expr(body, false);
            let mut s = Stmt::Store { buffer: target.clone(), indices: idx, value };
            for (var, value) in sharing.lets.into_iter().rev() {
                s = Stmt::Let { var, value, body: Box::new(s) };
            }
            loop_over(&spatial, s)
        }
        _ => loop_over(&spatial, Stmt::Store { buffer: target.clone(), indices: idx, value: inline(body, inlined) }),
    }
}

/// Lower `outputs` (computed from `inputs`) into the kernel `name`, whose
/// parameters are the inputs' buffers then the outputs' buffers.
pub fn lower(name: &str, inputs: &[Tensor], outputs: &[Tensor]) -> Result<PrimFunc, LowerError> {
    lower_with(name, inputs, outputs, &|_| false)
}

/// [`lower`], keeping the injective tensors for which `materialize` holds as
/// their own stages (kernel-local buffers) instead of inlining them, so that
/// a schedule can `compute_at` them (a convolution's padded input).
pub fn lower_with(
    name: &str,
    inputs: &[Tensor],
    outputs: &[Tensor],
    keep: &dyn Fn(&Tensor) -> bool,
) -> Result<PrimFunc, LowerError> {
    let order = topo_order(outputs);
    let is_output = |t: &Tensor| outputs.contains(t);
    let mut inlined: HashMap<u32, Tensor> = HashMap::new();
    let mut stages: Vec<(Tensor, Buffer)> = Vec::new();
    // Each inlined tensor's expanded size, producers first.
    let mut sizes: HashMap<u32, u64> = HashMap::new();
    for t in &order {
        if let Operation::Compute { body, .. } = &t.0.op {
            if !is_output(t) && !t.is_reduction() && !keep(t) {
                let n = expanded_size(body, &sizes);
                sizes.insert(t.buffer().id(), n);
            }
        }
        match &t.0.op {
            Operation::Placeholder => {
                if !inputs.contains(t) {
                    return Err(LowerError::MissingInput { kernel: name.to_string(), tensor: t.name().to_string() });
                }
            }
            Operation::Compute { .. } if !is_output(t) && !t.is_reduction() && !keep(t) => {
                inlined.insert(t.buffer().id(), t.clone());
            }
            Operation::Compute { .. } => {
                let target = if is_output(t) {
                    t.buffer().clone()
                } else {
                    Buffer::new(t.name(), t.dtype(), t.shape().to_vec(), Scope::Local)
                };
                stages.push((t.clone(), target));
            }
        }
    }
    // An intermediate read by one output only, at the output's own index (a
    // conv2d or matmul under its elementwise epilogue), is computed straight
    // into the output buffer and the epilogue runs in place: no kernel-local
    // buffer, whatever the size.
    for k in 0..stages.len() {
        let (r, _) = &stages[k];
        if is_output(r) {
            continue;
        }
        let readers: Vec<usize> = (0..stages.len()).filter(|&j| j != k && reads(&stages[j].0, r, &inlined)).collect();
        if let [j] = readers[..] {
            let o = &stages[j].0;
            if is_output(o)
                && o.shape() == r.shape()
                && o.dtype() == r.dtype()
                && reads_only_at_own_index(o, r, &inlined)
            {
                stages[k].1 = o.buffer().clone();
            }
        }
    }
    // Loads of a materialized intermediate read its buffer.
    let remap: HashMap<u32, Buffer> = stages.iter().map(|(t, b)| (t.buffer().id(), b.clone())).collect();
    let mut body_stmts = Vec::new();
    let mut locals = Vec::new();
    for (t, target) in &stages {
        let s = materialize(t, target, &inlined, &sizes);
        let s = s.map_exprs(&mut |e| retarget(e, &remap));
        body_stmts.push(s);
        if target.scope() == Scope::Local {
            locals.push(target.clone());
        }
    }
    let mut body = Stmt::seq(body_stmts);
    for b in locals.into_iter().rev() {
        body = Stmt::Allocate { buffer: b, body: Box::new(body) };
    }
    let params = inputs.iter().chain(outputs).map(|t| t.buffer().clone()).collect();
    Ok(PrimFunc { name: name.to_string(), params, num_outputs: outputs.len(), body, attrs: Default::default() })
}

/// Every index list with which `consumer`'s body (after inlining) loads `producer`.
fn load_indices(consumer: &Tensor, producer: &Tensor, inlined: &HashMap<u32, Tensor>) -> Vec<Vec<Expr>> {
    let Operation::Compute { body, .. } = &consumer.0.op else { return Vec::new() };
    let body = match body {
        Expr::Reduce(r) => inline(&r.source, inlined),
        b => inline(b, inlined),
    };
    let mut out = Vec::new();
    fn walk(e: &Expr, id: u32, out: &mut Vec<Vec<Expr>>) {
        if let Expr::Load(b, idx) = e {
            if b.id() == id {
                out.push(idx.clone());
            }
        }
        e.for_each_child(|c| walk(c, id, out));
    }
    walk(&body, producer.buffer().id(), &mut out);
    out
}

fn reads(consumer: &Tensor, producer: &Tensor, inlined: &HashMap<u32, Tensor>) -> bool {
    !load_indices(consumer, producer, inlined).is_empty()
}

/// Whether `consumer` (elementwise, not a reduction) reads `producer` only at its own output index.
fn reads_only_at_own_index(consumer: &Tensor, producer: &Tensor, inlined: &HashMap<u32, Tensor>) -> bool {
    let Operation::Compute { axes, body } = &consumer.0.op else { return false };
    if matches!(body, Expr::Reduce(_)) {
        return false;
    }
    let own: Vec<Expr> = axes.iter().map(Expr::var).collect();
    let shape = consumer.shape();
    // A size-1 axis may be read at a literal 0 (broadcasting writes it that way).
    load_indices(consumer, producer, inlined).iter().all(|idx| {
        idx.len() == own.len()
            && idx.iter().zip(&own).enumerate().all(|(k, (i, o))| i == o || (shape[k] == 1 && i.as_int() == Some(0)))
    })
}

fn retarget(e: Expr, remap: &HashMap<u32, Buffer>) -> Expr {
    match e {
        Expr::Load(b, idx) => {
            let idx = idx.into_iter().map(|i| retarget(i, remap)).collect();
            Expr::Load(remap.get(&b.id()).cloned().unwrap_or(b), idx)
        }
        other => other.map_children(|c| retarget(c.clone(), remap)),
    }
}
