//! FuseOps: group operators into `Primitive` functions, one kernel each.
//!
//! TVM's algorithm (`src/relay/transforms/fuse_ops.cc`), over handles:
//! 1. an indexed forward graph of the dataflow in post-order, with the fusion
//!    pattern of each node and of each edge (a broadcast edge whose input has
//!    the output's shape counts as elementwise);
//! 2. the post-dominator tree of that graph (a node's parent is the lowest
//!    common ancestor of its consumers; the edge pattern is the worst pattern
//!    on the way);
//! 3. three phases of union-find grouping: out-elemwise-fusable anchors
//!    (conv2d, dense, softmax) take their elementwise/broadcast epilogues; elementwise
//!    and broadcast ops fuse into injective or reduction consumers; injective
//!    ops fuse last (so conv2d always finishes fusing), then injective ops into
//!    intermediate tuples;
//! 4. each group becomes `fn (%p0, ..., Primitive=1) { ... }` called with the
//!    group's inputs — except 0-d constants of int32/int64/float32/float64/bool,
//!    which stay inside every kernel that uses them (TVM's rule). A kernel
//!    of reshape-like operators only also gets `relay.reshape_only=1`: the
//!    executor plan runs nothing for it (its result aliases its argument).
//!
//! Nothing here recurses on graph depth: every walk uses explicit stacks.

use rustc_hash::{FxHashMap, FxHashSet};

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::expr::{ATTR_PRIMITIVE, ATTR_RESHAPE_ONLY};
use kiln_ir::relay::{
    op_registry, visit::post_order_filtered, Call, Callee, ExprId, ExprKind, Function, OpPattern, Store, Type, Var,
};
use kiln_ir::span::Span;
use kiln_ir::DataType;

/// Default of the `relay.FuseOps.max_depth` option: the most operators in one group.
pub const DEFAULT_MAX_DEPTH: usize = 256;

/// An edge of the forward graph: the consumer and the pattern of the use.
#[derive(Clone, Copy, Debug)]
struct Edge {
    to: usize,
    pattern: OpPattern,
}

/// The dataflow of one function body, nodes in post-order.
struct ForwardGraph {
    nodes: Vec<ExprId>,
    index: FxHashMap<ExprId, usize>,
    pattern: Vec<OpPattern>,
    outputs: Vec<Vec<Edge>>,
    /// Used by something outside the dataflow (the function result, a `let`, an `if`).
    extern_ref: Vec<bool>,
}

impl ForwardGraph {
    fn build(store: &Store, body: ExprId) -> Result<ForwardGraph, String> {
        // Nested functions are opaque leaves: fused functions stay as they are.
        let nodes = post_order_filtered(store, &[body], |id| !matches!(store.kind(id), ExprKind::Function(_)));
        let index: FxHashMap<ExprId, usize> = nodes.iter().enumerate().map(|(i, &e)| (e, i)).collect();
        let n = nodes.len();
        let mut g = ForwardGraph {
            nodes,
            index,
            pattern: vec![OpPattern::Opaque; n],
            outputs: vec![Vec::new(); n],
            extern_ref: vec![false; n],
        };
        let ty = |id: ExprId| -> Result<&Type, String> {
            store.checked_type(id).ok_or_else(|| "FuseOps needs checked types: run InferType first".to_string())
        };
        for i in 0..n {
            let id = g.nodes[i];
            match store.kind(id) {
                ExprKind::Call(c) => match c.callee {
                    Callee::Op(op) => {
                        let op_pattern = op_registry().get(op).pattern;
                        g.pattern[i] = op_pattern;
                        let out = ty(id)?.as_tensor().map(|t| t.shape.clone());
                        for &a in &c.args {
                            let mut edge = op_pattern;
                            if edge == OpPattern::Broadcast {
                                let same_shape = ty(a)?.as_tensor().map(|t| &t.shape) == out.as_ref();
                                if same_shape && out.is_some() {
                                    edge = OpPattern::ElemWise;
                                }
                            }
                            g.link(a, Some(i), edge);
                        }
                    }
                    Callee::Expr(f) => {
                        g.link(f, None, OpPattern::Opaque);
                        for &a in &c.args {
                            g.link(a, Some(i), OpPattern::Opaque);
                        }
                    }
                },
                ExprKind::Tuple(fields) => {
                    g.pattern[i] = OpPattern::Tuple;
                    for &f in fields {
                        if ty(f)?.as_tensor().is_some() {
                            g.link(f, Some(i), OpPattern::Injective);
                        } else {
                            g.link(f, None, OpPattern::Opaque);
                        }
                    }
                }
                ExprKind::TupleGetItem { tuple, .. } => {
                    let all_tensors =
                        ty(*tuple)?.as_tuple().is_some_and(|fs| fs.iter().all(|f| f.as_tensor().is_some()));
                    if all_tensors {
                        g.pattern[i] = OpPattern::Injective;
                        g.link(*tuple, Some(i), OpPattern::Injective);
                    } else {
                        g.link(*tuple, None, OpPattern::Opaque);
                    }
                }
                ExprKind::Constant(c) => {
                    // A scalar constant can sit inside any elementwise kernel.
                    if store.constant_data(*c).shape().is_empty() {
                        g.pattern[i] = OpPattern::ElemWise;
                    }
                }
                ExprKind::Let { var, value, body } => {
                    for e in [*var, *value, *body] {
                        g.link(e, None, OpPattern::Opaque);
                    }
                }
                ExprKind::If { cond, then_branch, else_branch } => {
                    for e in [*cond, *then_branch, *else_branch] {
                        g.link(e, None, OpPattern::Opaque);
                    }
                }
                ExprKind::Var(_) | ExprKind::GlobalVar(_) | ExprKind::Function(_) => {}
            }
        }
        g.link(body, None, OpPattern::Opaque);
        Ok(g)
    }

    /// Record that `from` is used by node `to` (or outside the dataflow when `None`).
    fn link(&mut self, from: ExprId, to: Option<usize>, pattern: OpPattern) {
        let Some(&f) = self.index.get(&from) else { return };
        match to {
            Some(to) => self.outputs[f].push(Edge { to, pattern }),
            None => self.extern_ref[f] = true,
        }
    }
}

/// The post-dominator tree: for each node, its immediate post-dominator
/// (`None` at a root), the tree depth, and the worst edge pattern on the way.
struct PostDomTree {
    parent: Vec<Option<usize>>,
    depth: Vec<usize>,
    pattern: Vec<OpPattern>,
}

impl PostDomTree {
    fn build(g: &ForwardGraph) -> PostDomTree {
        let n = g.nodes.len();
        let mut t = PostDomTree { parent: vec![None; n], depth: vec![1; n], pattern: vec![OpPattern::Opaque; n] };
        for i in (0..n).rev() {
            if g.extern_ref[i] {
                continue;
            }
            let mut pattern = OpPattern::ElemWise;
            let mut parent: Option<usize> = None;
            for e in &g.outputs[i] {
                pattern = pattern.max(e.pattern);
                parent = match parent {
                    None => Some(e.to),
                    Some(p) => t.lca(p, e.to, &mut pattern),
                };
                if parent.is_none() {
                    break;
                }
            }
            t.parent[i] = parent;
            t.depth[i] = parent.map_or(1, |p| t.depth[p] + 1);
            t.pattern[i] = pattern;
        }
        t
    }

    fn lca(&self, mut a: usize, mut b: usize, pattern: &mut OpPattern) -> Option<usize> {
        while a != b {
            if self.depth[a] < self.depth[b] {
                *pattern = (*pattern).max(self.pattern[b]);
                b = self.parent[b]?;
            } else if self.depth[b] < self.depth[a] {
                *pattern = (*pattern).max(self.pattern[a]);
                a = self.parent[a]?;
            } else {
                *pattern = (*pattern).max(self.pattern[a]).max(self.pattern[b]);
                a = self.parent[a]?;
                b = self.parent[b]?;
            }
        }
        Some(a)
    }
}

/// Union-find groups of graph nodes.
struct Partition {
    parent: Vec<usize>,
    pattern: Vec<OpPattern>,
    num_nodes: Vec<usize>,
    /// Whether the group holds an out-elemwise-fusable anchor (conv2d, dense).
    anchored: Vec<bool>,
}

impl Partition {
    fn root(&self, mut i: usize) -> usize {
        while self.parent[i] != i {
            i = self.parent[i];
        }
        i
    }

    fn merge(&mut self, child: usize, into: usize) {
        let (c, p) = (self.root(child), self.root(into));
        if c == p {
            return;
        }
        self.num_nodes[p] += self.num_nodes[c];
        self.parent[c] = p;
        // As in TVM, only an anchor changes the pattern of the group it joins:
        // a tuple fused into `concatenate` leaves the group injective.
        if self.anchored[c] {
            self.anchored[p] = true;
            self.pattern[p] = self.pattern[p].max(self.pattern[c]);
        }
    }

    /// Whether every node on every path from `src` (exclusive) to `sink` satisfies `ok(pattern, is_sink)`.
    fn check_path(&self, g: &ForwardGraph, src: usize, sink: usize, ok: impl Fn(OpPattern, bool) -> bool) -> bool {
        let mut visited = FxHashSet::default();
        let mut stack: Vec<usize> = g.outputs[src].iter().map(|e| e.to).collect();
        while let Some(n) = stack.pop() {
            if !visited.insert(n) {
                continue;
            }
            let pattern = self.pattern[self.root(n)];
            if n == sink {
                if !ok(pattern, true) {
                    return false;
                }
                continue;
            }
            if !ok(pattern, false) {
                return false;
            }
            stack.extend(g.outputs[n].iter().map(|e| e.to));
        }
        true
    }

    /// The nodes strictly between `src` (inclusive) and `sink` (exclusive) on any path.
    fn path_nodes(g: &ForwardGraph, src: usize, sink: usize) -> Vec<usize> {
        let mut visited = FxHashSet::default();
        let mut out = Vec::new();
        let mut stack = vec![src];
        while let Some(n) = stack.pop() {
            if n == sink || !visited.insert(n) {
                continue;
            }
            out.push(n);
            stack.extend(g.outputs[n].iter().map(|e| e.to));
        }
        out
    }

    /// Put everything on the paths from `src` to `sink` into `sink`'s group.
    fn commit(&mut self, g: &ForwardGraph, src: usize, sink: usize) {
        for n in Self::path_nodes(g, src, sink) {
            self.merge(n, sink);
        }
    }

    /// How many nodes the sink's group would hold after fusing the paths from `src`.
    fn count_with(&self, g: &ForwardGraph, src: usize, sink: usize) -> usize {
        let target = self.root(sink);
        let mut groups = FxHashSet::default();
        let mut count = self.num_nodes[target];
        for n in Self::path_nodes(g, src, sink) {
            let r = self.root(n);
            if r != target && groups.insert(r) {
                count += self.num_nodes[r];
            }
        }
        count
    }

    fn run(g: &ForwardGraph, dom: &PostDomTree, max_depth: usize) -> Partition {
        let n = g.nodes.len();
        let anchored = g.pattern.iter().map(|&k| k == OpPattern::OutEWiseFusable).collect();
        let mut p = Partition { parent: (0..n).collect(), pattern: g.pattern.clone(), num_nodes: vec![1; n], anchored };
        for phase in 0..3 {
            for i in 0..n {
                // The node's own pattern (a merged node's group pattern lives at its root).
                let group_pattern = p.pattern[i];
                if group_pattern == OpPattern::Opaque {
                    continue;
                }
                let Some(dom_parent) = dom.parent[i] else { continue };
                if p.count_with(g, i, dom_parent) > max_depth {
                    continue;
                }
                if phase == 2 {
                    // Fuse injective ops into intermediate tuples, if any.
                    if group_pattern > OpPattern::Injective {
                        continue;
                    }
                    let root_pattern = p.pattern[p.root(dom_parent)];
                    if root_pattern == OpPattern::Tuple {
                        continue;
                    }
                    if p.pattern[dom_parent] == OpPattern::Tuple
                        && root_pattern <= OpPattern::Injective
                        && p.check_path(g, i, dom_parent, |k, _| k <= OpPattern::Injective)
                    {
                        p.commit(g, i, dom_parent);
                    }
                    continue;
                }
                if p.root(i) == p.root(dom_parent) {
                    continue;
                }
                // Do not fuse into a tuple (phase 2 handles tuples).
                if p.pattern[dom_parent] == OpPattern::Tuple {
                    continue;
                }
                match group_pattern {
                    OpPattern::OutEWiseFusable
                        if phase == 0
                            && dom.pattern[i] == OpPattern::ElemWise
                            && p.check_path(g, i, dom_parent, |k, _| k <= OpPattern::Broadcast) =>
                    {
                        p.commit(g, i, dom_parent);
                    }
                    k if k <= OpPattern::Broadcast => {
                        let edge = dom.pattern[i];
                        if (edge <= OpPattern::Injective || edge == OpPattern::CommReduce)
                            && p.check_path(g, i, dom_parent, |k, is_sink| {
                                if is_sink {
                                    k <= OpPattern::Injective
                                        || k == OpPattern::CommReduce
                                        || k == OpPattern::OutEWiseFusable
                                } else {
                                    k <= OpPattern::Injective
                                }
                            })
                        {
                            p.commit(g, i, dom_parent);
                        }
                    }
                    OpPattern::Injective | OpPattern::Tuple
                        if phase == 1 && p.check_path(g, i, dom_parent, |k, _| k <= OpPattern::Injective) =>
                    {
                        p.commit(g, i, dom_parent);
                    }
                    _ => {}
                }
            }
        }
        p
    }
}

/// Per-group state while rewriting: the new parameters and the outside
/// expressions they stand for.
#[derive(Default)]
struct GroupInfo {
    params: Vec<ExprId>,
    args: Vec<ExprId>,
    param_of: FxHashMap<ExprId, ExprId>,
}

/// A 0-d constant of a dtype every code generator writes as an immediate
/// (TVM's rule: int32, int64, float32, float64, bool).
fn is_simple_scalar(store: &Store, id: ExprId) -> bool {
    let ExprKind::Constant(c) = store.kind(id) else { return false };
    let t = store.constant_data(*c);
    t.shape().is_empty()
        && matches!(t.dtype(), DataType::I32 | DataType::I64 | DataType::F32 | DataType::F64 | DataType::Bool)
}

/// Fuse the body of function `func`; returns the new function (or `func` when nothing changed).
pub(crate) fn fuse_function(store: &mut Store, func: ExprId, max_depth: usize) -> Result<ExprId, String> {
    let Some(f) = store.as_function(func).cloned() else {
        return Err("FuseOps: expected a function".into());
    };
    if f.is_primitive() {
        return Ok(func);
    }
    let g = ForwardGraph::build(store, f.body)?;
    let dom = PostDomTree::build(&g);
    let part = Partition::run(&g, &dom, max_depth.max(1));
    let n = g.nodes.len();

    // `annotation.stop_fusion` (opaque, so no group spans it) is dropped, as
    // TVM's FuseMutator does: its users read its argument.
    let stop_fusion = op_registry().lookup("annotation.stop_fusion");
    let stopped = |store: &Store, id: ExprId| match store.kind(id) {
        ExprKind::Call(c) if c.args.len() == 1 && matches!(c.callee, Callee::Op(op) if Some(op) == stop_fusion) => {
            Some(c.args[0])
        }
        _ => None,
    };
    // Which nodes are kernel members: op calls, tuples and projections.
    let is_member = |store: &Store, id: ExprId| match store.kind(id) {
        ExprKind::Call(c) => matches!(c.callee, Callee::Op(_)) && stopped(store, id).is_none(),
        ExprKind::Tuple(_) | ExprKind::TupleGetItem { .. } => true,
        _ => false,
    };
    let mut group_has_call: FxHashMap<usize, bool> = FxHashMap::default();
    for i in 0..n {
        if is_member(store, g.nodes[i]) && matches!(store.kind(g.nodes[i]), ExprKind::Call(_)) {
            group_has_call.insert(part.root(i), true);
        }
    }
    // A group becomes a function when it holds an operator call; lone tuples
    // and projections stay as they are.
    let fused_group = |i: usize| -> Option<usize> {
        let r = part.root(i);
        group_has_call.get(&r).copied().unwrap_or(false).then_some(r)
    };

    // `outer[i]`: what code outside node i's group sees; `inner[i]`: the node
    // inside its group's function body.
    let mut outer: Vec<ExprId> = Vec::with_capacity(n);
    let mut inner: Vec<ExprId> = Vec::with_capacity(n);
    let mut infos: FxHashMap<usize, GroupInfo> = FxHashMap::default();
    for i in 0..n {
        let id = g.nodes[i];
        let group = if is_member(store, id) { fused_group(i) } else { None };
        let Some(group) = group else {
            if let Some(arg) = stopped(store, id) {
                let arg = g.index.get(&arg).map_or(arg, |&ai| outer[ai]);
                outer.push(arg);
                inner.push(arg);
                continue;
            }
            // Outside every kernel: rebuild over the outer versions of the children.
            let kind = store.kind(id).map_children(|c| g.index.get(&c).map_or(c, |&ci| outer[ci]));
            let new = if &kind == store.kind(id) {
                id
            } else {
                let span = store.span(id).clone();
                let new = store.add(kind, span);
                copy_type(store, id, new);
                new
            };
            outer.push(new);
            inner.push(new);
            continue;
        };
        // Inside a kernel: a child from the same group is used directly,
        // anything else through a parameter of the group's function.
        let kind = store.kind(id).clone();
        let children = kind.children();
        let mut mapped = Vec::with_capacity(children.len());
        for c in children {
            let ci = g.index.get(&c).copied();
            let same_group = ci.is_some_and(|ci| is_member(store, c) && fused_group(ci) == Some(group));
            if same_group {
                mapped.push(inner[ci.unwrap_or_default()]);
            } else if is_simple_scalar(store, c) {
                // As in TVM, a scalar constant stays inside the kernel (every
                // kernel that uses it), not a parameter.
                mapped.push(c);
            } else {
                let outside = ci.map_or(c, |ci| outer[ci]);
                let info = infos.entry(group).or_default();
                let param = match info.param_of.get(&outside) {
                    Some(&p) => p,
                    None => {
                        let ty = store.checked_type(c).cloned().ok_or("FuseOps needs checked types")?;
                        let name = format!("p{}", info.params.len());
                        let ty_id = store.intern_type(ty.clone());
                        let p = store.add(ExprKind::Var(Var { name, ty: Some(ty_id) }), Span::Unknown);
                        store.set_checked_type(p, ty);
                        let info = infos.entry(group).or_default();
                        info.param_of.insert(outside, p);
                        info.params.push(p);
                        info.args.push(outside);
                        p
                    }
                };
                mapped.push(param);
            }
        }
        let mut it = mapped.into_iter();
        let new_kind = kind.map_children(|c| it.next().unwrap_or(c));
        let span = store.span(id).clone();
        let body = store.add(new_kind, span.clone());
        copy_type(store, id, body);
        inner.push(body);
        // Merges always go into the post-dominator's group, so a group's
        // union-find root is its last member: the kernel's output.
        if i == group {
            let info = infos.remove(&group).unwrap_or_default();
            let ret = store.checked_type(id).cloned();
            let ret_id = ret.clone().map(|t| store.intern_type(t));
            let mut attrs = Attrs::from_pairs([(ATTR_PRIMITIVE, AttrValue::Int(1))]);
            if reshape_only(store, body, &info.params) {
                attrs.set(ATTR_RESHAPE_ONLY, AttrValue::Int(1));
            }
            let func = store.add(
                ExprKind::Function(Function {
                    type_params: vec![],
                    params: info.params.clone(),
                    body,
                    ret_ty: ret_id,
                    attrs,
                }),
                span.clone(),
            );
            let call = store
                .add(ExprKind::Call(Call { callee: Callee::Expr(func), args: info.args, attrs: Attrs::new() }), span);
            if let Some(t) = ret {
                store.set_checked_type(call, t);
            }
            outer.push(call);
        } else {
            // An intermediate node: nothing outside the group may use it.
            outer.push(body);
        }
    }
    let new_body = g.index.get(&f.body).map_or(f.body, |&i| outer[i]);
    if new_body == f.body {
        return Ok(func);
    }
    let new_func = store.add(
        ExprKind::Function(Function {
            type_params: f.type_params,
            params: f.params.clone(),
            body: new_body,
            ret_ty: f.ret_ty,
            attrs: f.attrs,
        }),
        store.span(func).clone(),
    );
    copy_type(store, func, new_func);
    Ok(new_func)
}

/// Whether a kernel body only reshapes its tensor parameters (TVM's
/// `CheckReshapeOnly`): every call is of a reshape-like operator.
fn reshape_only(store: &Store, body: ExprId, params: &[ExprId]) -> bool {
    let calls_reshape_only = kiln_ir::relay::post_order(store, &[body]).into_iter().all(|id| match store.kind(id) {
        ExprKind::Call(c) => matches!(c.callee, Callee::Op(op) if op_registry().get(op).reshape_like),
        _ => true,
    });
    let tensor_params = params.iter().all(|&p| store.checked_type(p).is_some_and(|t| t.as_tensor().is_some()));
    calls_reshape_only && tensor_params && matches!(store.kind(body), ExprKind::Call(_))
}

fn copy_type(store: &mut Store, from: ExprId, to: ExprId) {
    if let Some(t) = store.checked_type(from).cloned() {
        store.set_checked_type(to, t);
    }
}
