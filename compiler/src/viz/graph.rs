//! A model's `@main` as a graph of kernels: one node per input, per call
//! (a fused kernel after FuseOps, an operator before it) and per output;
//! one edge per tensor passed, labelled with its type. Constants (weights)
//! are not nodes: a call lists how many it reads and their bytes.

use kiln_ir::relay::visit::post_order_filtered;
use kiln_ir::relay::{op_registry, Callee, ExprId, ExprKind, IRModule, OpPattern, Type};
use rustc_hash::FxHashMap;

use crate::backend::aot::ExecutorPlan;

/// What a node stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A parameter of `@main`.
    Input,
    /// A call: a fused kernel or one operator.
    Kernel,
    /// A `relay.reshape_only` kernel: no code runs, its result shares its
    /// argument's bytes.
    Alias,
    /// A result of `@main`.
    Output,
}

/// One box of the picture.
#[derive(Clone, Debug)]
pub struct Node {
    pub kind: NodeKind,
    /// The kernel's name (the plan's, when a plan was given), the input's or output's.
    pub title: String,
    /// The operators inside a kernel, in evaluation order (one for an unfused call).
    pub ops: Vec<&'static str>,
    /// The index in `ops` of the anchor: the operator with the most complex
    /// fusion pattern (a convolution, a dense; the first one on a tie).
    pub anchor: Option<usize>,
    /// Constants the call reads: how many, and their bytes.
    pub weights: (usize, usize),
    /// The type of what the node produces.
    pub ty: String,
    /// Time per run in microseconds (`--profile`).
    pub micros: Option<f64>,
}

/// One tensor passed from a node to another.
#[derive(Clone, Debug)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    /// `1x64x56x56 f32`.
    pub label: String,
}

/// The graph; node indices are a topological order (producers first).
#[derive(Clone, Debug, Default)]
pub struct KernelGraph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

impl KernelGraph {
    /// The graph of `m`'s `@main` (type-checked). With the executor `plan`
    /// made from this module, kernels take the plan's names and `times`
    /// (microseconds per plan call, from a profile) attach to them.
    pub fn of_module(
        name: &str,
        m: &IRModule,
        plan: Option<&ExecutorPlan>,
        times: Option<&[f64]>,
    ) -> Result<KernelGraph, String> {
        let main = m.main().map_err(|e| e.to_string())?;
        let f = m.store.as_function(main).ok_or("@main is not a function")?;
        let store = &m.store;
        let mut g = KernelGraph { name: name.to_string(), ..KernelGraph::default() };
        // What each expression evaluates to: the nodes whose outputs it holds.
        let mut sources: FxHashMap<ExprId, Vec<(usize, String)>> = FxHashMap::default();
        for &p in &f.params {
            let title = store.as_var(p).map(|v| v.name.clone()).unwrap_or_default();
            let ty = type_label(store.checked_type(p));
            g.nodes.push(Node {
                kind: NodeKind::Input,
                title,
                ops: Vec::new(),
                anchor: None,
                weights: (0, 0),
                ty: ty.clone(),
                micros: None,
            });
            sources.insert(p, vec![(g.nodes.len() - 1, ty)]);
        }
        let mut kernel_calls = 0;
        let order = post_order_filtered(store, &[f.body], |id| !matches!(store.kind(id), ExprKind::Function(_)));
        for id in order {
            match store.kind(id) {
                ExprKind::Call(call) => {
                    let (mut title, ops, is_kernel) = match call.callee {
                        Callee::Op(op) => {
                            let name = op_registry().get(op).name;
                            (name.to_string(), vec![name], false)
                        }
                        Callee::Expr(callee) => {
                            let func = store.as_function(callee);
                            let ops = func.map_or_else(Vec::new, |func| {
                                let inside = post_order_filtered(store, &[func.body], |n| {
                                    !matches!(store.kind(n), ExprKind::Function(_))
                                });
                                inside.into_iter().filter_map(|n| store.op_name(n)).collect()
                            });
                            let title = crate::backend::lower_te::kernel_name(store, callee);
                            // Reshape-only kernels are not calls of the plan.
                            let runs = func.is_some_and(|func| func.is_primitive() && !func.is_reshape_only());
                            (title, ops, runs)
                        }
                    };
                    // The plan's calls are the primitive calls in this same order.
                    let mut micros = None;
                    if is_kernel {
                        if let Some(p) = plan {
                            if let Some(c) = p.calls.get(kernel_calls) {
                                title = p.kernels[c.kernel].name.clone();
                            }
                        }
                        micros = times.and_then(|t| t.get(kernel_calls).copied());
                        kernel_calls += 1;
                    }
                    let anchor = anchor_of(&ops);
                    let ty = type_label(store.checked_type(id));
                    let mut weights = (0, 0);
                    let node = g.nodes.len();
                    for a in &call.args {
                        if let ExprKind::Constant(c) = store.kind(*a) {
                            weights.0 += 1;
                            weights.1 += store.constant_data(*c).bytes().len();
                        }
                        for (from, label) in sources.get(a).cloned().unwrap_or_default() {
                            g.edges.push(Edge { from, to: node, label });
                        }
                    }
                    let reshape_only = matches!(call.callee, Callee::Expr(f) if store.as_function(f).is_some_and(|f| f.is_reshape_only()));
                    let kind = if reshape_only { NodeKind::Alias } else { NodeKind::Kernel };
                    g.nodes.push(Node { kind, title, ops, anchor, weights, ty: ty.clone(), micros });
                    let outs = match store.checked_type(id) {
                        Some(Type::Tuple(fields)) => fields.iter().map(|t| (node, type_label(Some(t)))).collect(),
                        _ => vec![(node, ty)],
                    };
                    sources.insert(id, outs);
                }
                ExprKind::Tuple(fields) => {
                    let s = fields.iter().flat_map(|x| sources.get(x).cloned().unwrap_or_default()).collect();
                    sources.insert(id, s);
                }
                ExprKind::TupleGetItem { tuple, index } => {
                    let s = sources.get(tuple).cloned().unwrap_or_default();
                    // One field of a call's tuple, or of a tuple expression's sources.
                    let picked = s.get(*index).cloned().map(|x| vec![x]).unwrap_or(s);
                    sources.insert(id, picked);
                }
                // Constants are counted at their call; other expressions pass nothing drawn.
                _ => {}
            }
        }
        let results = sources.get(&f.body).cloned().unwrap_or_default();
        for (i, (from, label)) in results.into_iter().enumerate() {
            g.nodes.push(Node {
                kind: NodeKind::Output,
                title: format!("output{i}"),
                ops: Vec::new(),
                anchor: None,
                weights: (0, 0),
                ty: label.clone(),
                micros: None,
            });
            let to = g.nodes.len() - 1;
            g.edges.push(Edge { from, to, label });
        }
        Ok(g)
    }

    /// The kernels' nodes.
    pub fn kernels(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Kernel)
    }

    /// The lines a node shows: title, operators (anchor marked), weights, type, time.
    pub fn lines(&self, n: &Node) -> Vec<(String, LineStyle)> {
        let mut lines = vec![(n.title.clone(), LineStyle::Title)];
        if n.kind == NodeKind::Alias {
            lines.push(("no kernel: shares its input's bytes".into(), LineStyle::Note));
        }
        if n.kind == NodeKind::Kernel && (n.ops.len() > 1 || n.ops.first().is_some_and(|o| *o != n.title)) {
            for (i, op) in n.ops.iter().enumerate() {
                let style = if Some(i) == n.anchor { LineStyle::Anchor } else { LineStyle::Op };
                lines.push((op.to_string(), style));
            }
        }
        if n.weights.0 > 0 {
            let noun = if n.weights.0 == 1 { "weight" } else { "weights" };
            lines.push((format!("{} {noun}, {}", n.weights.0, bytes(n.weights.1)), LineStyle::Note));
        }
        if n.kind != NodeKind::Output {
            lines.push((n.ty.clone(), LineStyle::Note));
        }
        if let Some(us) = n.micros {
            lines.push((format!("{us:.1} µs"), LineStyle::Time));
        }
        lines
    }
}

/// How a line of a node is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineStyle {
    Title,
    Op,
    Anchor,
    Note,
    Time,
}

/// The anchor among `ops`: the highest fusion pattern, if above injective.
fn anchor_of(ops: &[&'static str]) -> Option<usize> {
    let pattern = |name: &str| op_registry().by_name(name).map_or(OpPattern::ElemWise, |d| d.pattern);
    let (mut best, mut at) = (OpPattern::Injective, None);
    for (i, op) in ops.iter().enumerate() {
        let p = pattern(op);
        if p > best && p != OpPattern::Tuple {
            best = p;
            at = Some(i);
        }
    }
    at
}

/// `1x64x56x56 f32`, or the type as Relay prints it when it is not a tensor.
pub fn type_label(ty: Option<&Type>) -> String {
    match ty {
        Some(Type::Tensor(t)) => {
            let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
            let shape = if dims.is_empty() { "scalar".to_string() } else { dims.join("x") };
            format!("{shape} {}", t.dtype)
        }
        Some(other) => other.to_string(),
        None => "?".into(),
    }
}

/// A byte count as people read it.
pub fn bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}
