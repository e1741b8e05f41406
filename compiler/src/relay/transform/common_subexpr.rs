//! EliminateCommonSubexpr: operator calls with the same operator, attributes
//! and arguments become one node, and so do equal tuples and projections.
//!
//! The rewrite is post-order, so arguments are already deduplicated when a
//! call is looked at, and a whole repeated subtree collapses bottom-up.
//! Constants are hash-consed by value in the store, so constant nodes of
//! equal value become one node first: `add(%y, 1f)` written twice is one
//! call, as in TVM (which compares scalar constants by value), and so is
//! `concatenate((%y, meta[relay.Constant][0]))`. Stateful operators are
//! never merged.

use rustc_hash::FxHashMap;

use kiln_ir::relay::{mutate, op_registry, Callee, ExprId, ExprKind, ExprMutator, Store};

#[derive(Default)]
struct Cse {
    seen: FxHashMap<ExprKind, ExprId>,
}

impl Cse {
    fn dedup(&mut self, store: &Store, post: ExprId) -> ExprId {
        *self.seen.entry(store.kind(post).clone()).or_insert(post)
    }
}

impl ExprMutator for Cse {
    fn rewrite_constant(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        self.dedup(store, post)
    }

    fn rewrite_call(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        match store.as_call(post).map(|c| c.callee) {
            Some(Callee::Op(op)) if !op_registry().get(op).stateful => self.dedup(store, post),
            _ => post,
        }
    }

    fn rewrite_tuple(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        self.dedup(store, post)
    }

    fn rewrite_tuple_get_item(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        self.dedup(store, post)
    }
}

/// Deduplicate the common subexpressions of one function; returns the new function.
pub fn eliminate_common_subexpr(store: &mut Store, func: ExprId) -> ExprId {
    mutate(store, func, &mut Cse::default())
}
