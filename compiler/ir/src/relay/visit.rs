//! Traversal without recursion: visitors and mutators over expression handles.
//!
//! Because a node's children always have smaller handles (see [`super::expr`]),
//! the nodes reachable from a root, taken in ascending handle order, are a
//! post-order: children before parents. [`post_order`] finds them with one
//! descending sweep, so a 10 000-deep chain costs no stack at all.
//!
//! - [`ExprVisitor`]: a callback per node kind, each reachable node once
//!   (memoized by identity), children before parents.
//! - [`ExprMutator`]: TVM's `ExprMutator` in its post-order form (TVM's
//!   `MixedModeMutator::Rewrite_`): for each node you get `pre` (the original)
//!   and `post` (the node rebuilt over already-rewritten children) and return
//!   the replacement. Functional update: when nothing below changed, `post == pre`,
//!   so an unchanged subtree keeps its handles.

use rustc_hash::FxHashMap;

use super::expr::{ExprId, ExprKind, Store};

/// The nodes reachable from `roots`, children before parents, each once.
pub fn post_order(store: &Store, roots: &[ExprId]) -> Vec<ExprId> {
    post_order_filtered(store, roots, |_| true)
}

/// Like [`post_order`], but the children of a node for which `descend`
/// returns `false` are not followed (the node itself is included).
pub fn post_order_filtered(store: &Store, roots: &[ExprId], mut descend: impl FnMut(ExprId) -> bool) -> Vec<ExprId> {
    let Some(max) = roots.iter().map(|r| r.index()).max() else {
        return Vec::new();
    };
    let mut marked = vec![false; max + 1];
    for r in roots {
        marked[r.index()] = true;
    }
    for i in (0..=max).rev() {
        if !marked[i] {
            continue;
        }
        let id = ExprId::from_index(i);
        if descend(id) {
            store.kind(id).for_each_child(|c| marked[c.index()] = true);
        }
    }
    marked.iter().enumerate().filter(|(_, &m)| m).map(|(i, _)| ExprId::from_index(i)).collect()
}

/// A read-only visit of every reachable node, children first. Override the
/// methods for the kinds you care about; the defaults do nothing.
#[allow(unused_variables)]
pub trait ExprVisitor {
    /// Return `false` to skip the children of `id` (e.g. not entering primitive functions).
    fn descend_into(&mut self, store: &Store, id: ExprId) -> bool {
        true
    }
    /// Called on each `Var` node.
    fn visit_var(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `GlobalVar` node.
    fn visit_global_var(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `Constant` node.
    fn visit_constant(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `Call` node, after its callee and arguments.
    fn visit_call(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `Tuple` node, after its fields.
    fn visit_tuple(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `TupleGetItem` node, after its tuple.
    fn visit_tuple_get_item(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `Let` node, after its variable, value and body.
    fn visit_let(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `If` node, after its condition and branches.
    fn visit_if(&mut self, store: &Store, id: ExprId) {}
    /// Called on each `Function` node, after its parameters and body.
    fn visit_function(&mut self, store: &Store, id: ExprId) {}

    /// Dispatch on the node kind. Override to see every node in one place.
    fn visit(&mut self, store: &Store, id: ExprId) {
        match store.kind(id) {
            ExprKind::Var(_) => self.visit_var(store, id),
            ExprKind::GlobalVar(_) => self.visit_global_var(store, id),
            ExprKind::Constant(_) => self.visit_constant(store, id),
            ExprKind::Call(_) => self.visit_call(store, id),
            ExprKind::Tuple(_) => self.visit_tuple(store, id),
            ExprKind::TupleGetItem { .. } => self.visit_tuple_get_item(store, id),
            ExprKind::Let { .. } => self.visit_let(store, id),
            ExprKind::If { .. } => self.visit_if(store, id),
            ExprKind::Function(_) => self.visit_function(store, id),
        }
    }
}

/// Visit every node reachable from `roots` once, children before parents.
pub fn visit<V: ExprVisitor + ?Sized>(store: &Store, roots: &[ExprId], visitor: &mut V) {
    for id in post_order_filtered(store, roots, |id| visitor.descend_into(store, id)) {
        visitor.visit(store, id);
    }
}

/// A rewrite of every reachable node, children first, with functional update.
/// Each method gets `pre` (the original node) and `post` (the node over the
/// rewritten children; `post == pre` when no child changed) and returns the
/// replacement. The defaults keep `post`.
///
/// A binder (function parameter or `let` variable) must be rewritten to a `Var`.
#[allow(unused_variables)]
pub trait ExprMutator {
    /// Return `false` to keep `id` and everything below it as they are.
    fn descend_into(&mut self, store: &Store, id: ExprId) -> bool {
        true
    }
    /// Rewrites a `Var` (which has no children, so `post == pre`); a binder must stay a `Var`.
    fn rewrite_var(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites a `GlobalVar` (`post == pre`).
    fn rewrite_global_var(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites a `Constant` (`post == pre`).
    fn rewrite_constant(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites a `Call` over its rewritten callee and arguments.
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites a `Tuple` over its rewritten fields.
    fn rewrite_tuple(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites a `TupleGetItem` over its rewritten tuple.
    fn rewrite_tuple_get_item(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites a `Let` over its rewritten variable, value and body.
    fn rewrite_let(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites an `If` over its rewritten condition and branches.
    fn rewrite_if(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }
    /// Rewrites a `Function` over its rewritten parameters and body.
    fn rewrite_function(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        post
    }

    /// Dispatch on the node kind. Override to handle every node in one place.
    fn rewrite(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        match store.kind(post) {
            ExprKind::Var(_) => self.rewrite_var(store, pre, post),
            ExprKind::GlobalVar(_) => self.rewrite_global_var(store, pre, post),
            ExprKind::Constant(_) => self.rewrite_constant(store, pre, post),
            ExprKind::Call(_) => self.rewrite_call(store, pre, post),
            ExprKind::Tuple(_) => self.rewrite_tuple(store, pre, post),
            ExprKind::TupleGetItem { .. } => self.rewrite_tuple_get_item(store, pre, post),
            ExprKind::Let { .. } => self.rewrite_let(store, pre, post),
            ExprKind::If { .. } => self.rewrite_if(store, pre, post),
            ExprKind::Function(_) => self.rewrite_function(store, pre, post),
        }
    }
}

/// Memo of a mutation: old handle → new handle. Reuse one across several
/// roots (e.g. every function of a module) so shared nodes are rewritten once.
#[derive(Debug, Default)]
pub struct Rewrites {
    memo: FxHashMap<ExprId, ExprId>,
}

impl Rewrites {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    /// What `old` was rewritten to, if it was reached.
    pub fn get(&self, old: ExprId) -> Option<ExprId> {
        self.memo.get(&old).copied()
    }

    /// Rewrite everything reachable from `root` with `mutator`; returns the new root.
    pub fn run<M: ExprMutator + ?Sized>(&mut self, store: &mut Store, root: ExprId, mutator: &mut M) -> ExprId {
        let mut kept = Vec::new();
        let order = post_order_filtered(store, &[root], |id| {
            let descend = mutator.descend_into(store, id);
            if !descend {
                kept.push(id);
            }
            descend
        });
        kept.sort();
        for id in order {
            if self.memo.contains_key(&id) {
                continue;
            }
            if kept.binary_search(&id).is_ok() {
                self.memo.insert(id, id);
                continue;
            }
            let post = rebuild(store, id, &self.memo);
            let new = mutator.rewrite(store, id, post);
            self.memo.insert(id, new);
        }
        self.memo[&root]
    }
}

/// `id` over its rewritten children: `id` itself when none changed.
fn rebuild(store: &mut Store, id: ExprId, memo: &FxHashMap<ExprId, ExprId>) -> ExprId {
    let mut changed = false;
    store.kind(id).for_each_child(|c| changed |= memo.get(&c).is_some_and(|&n| n != c));
    if !changed {
        return id;
    }
    let kind = store.kind(id).map_children(|c| memo.get(&c).copied().unwrap_or(c));
    let span = store.span(id).clone();
    store.add(kind, span)
}

/// Rewrite everything reachable from `root`; returns the new root.
pub fn mutate<M: ExprMutator + ?Sized>(store: &mut Store, root: ExprId, mutator: &mut M) -> ExprId {
    Rewrites::new().run(store, root, mutator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::Attrs;
    use crate::dtype::DataType;
    use crate::relay::ty::Type;

    fn chain(n: usize) -> (Store, ExprId, ExprId) {
        let mut s = Store::new();
        let x = s.var("x", Some(Type::tensor([2], DataType::F32)));
        let mut e = x;
        for _ in 0..n {
            e = s.call_op("add", vec![e, x], Attrs::new()).unwrap();
        }
        (s, x, e)
    }

    struct CountCalls(usize);
    impl ExprVisitor for CountCalls {
        fn visit_call(&mut self, _: &Store, _: ExprId) {
            self.0 += 1;
        }
    }

    struct AddToMul;
    impl ExprMutator for AddToMul {
        fn rewrite_call(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
            let args = store.as_call(post).unwrap().args.clone();
            store.call_op("multiply", args, Attrs::new()).unwrap()
        }
    }

    struct Nothing;
    impl ExprMutator for Nothing {}

    #[test]
    fn deep_chain_visit_and_mutate_without_recursion() {
        let (mut s, _, root) = chain(10_000);
        let mut c = CountCalls(0);
        visit(&s, &[root], &mut c);
        assert_eq!(c.0, 10_000);
        let new_root = mutate(&mut s, root, &mut AddToMul);
        assert_ne!(new_root, root);
        assert_eq!(s.op_name(new_root), Some("multiply"));
        let mut c = CountCalls(0);
        visit(&s, &[new_root], &mut c);
        assert_eq!(c.0, 10_000);
    }

    #[test]
    fn unchanged_tree_keeps_handles() {
        let (mut s, _, root) = chain(10);
        let before = s.len();
        assert_eq!(mutate(&mut s, root, &mut Nothing), root);
        assert_eq!(s.len(), before, "no node may be rebuilt when nothing changed");
    }

    #[test]
    fn shared_nodes_are_visited_once() {
        let mut s = Store::new();
        let x = s.var("x", None);
        let e = s.call_op("exp", vec![x], Attrs::new()).unwrap();
        let a = s.call_op("add", vec![e, e], Attrs::new()).unwrap();
        let mut c = CountCalls(0);
        visit(&s, &[a], &mut c);
        assert_eq!(c.0, 2);
    }
}
