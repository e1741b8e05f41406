//! DeadCodeElimination: drop `let` bindings whose variable is never used
//! (a function pass, as TVM's); RemoveUnusedFunctions: drop the global
//! functions that `@main` cannot reach (TVM's module pass of that name).
//!
//! Every Relay operator is pure, so an unused binding can go whatever it
//! computes. Removing one binding can make another one dead (its only use was
//! in the removed value), so the rewrite runs until nothing changes.

use rustc_hash::FxHashSet;

use kiln_ir::relay::{mutate, post_order, ExprId, ExprKind, ExprMutator, IRModule, Store};

/// The variables used (not merely bound) by the nodes reachable from `root`.
fn used_vars(store: &Store, root: ExprId) -> FxHashSet<ExprId> {
    let mut used = FxHashSet::default();
    for id in post_order(store, &[root]) {
        // Children in use positions (a binder's own slot is not a use, but
        // the same variable as a `let` body or argument is).
        let uses: Vec<ExprId> = match store.kind(id) {
            ExprKind::Let { value, body, .. } => vec![*value, *body],
            ExprKind::Function(f) => vec![f.body],
            k => k.children(),
        };
        for c in uses {
            if matches!(store.kind(c), ExprKind::Var(_)) {
                used.insert(c);
            }
        }
    }
    used
}

struct DropUnusedLets<'a> {
    used: &'a FxHashSet<ExprId>,
    changed: bool,
}

impl ExprMutator for DropUnusedLets<'_> {
    fn rewrite_let(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        match *store.kind(post) {
            ExprKind::Let { var, body, .. } if !self.used.contains(&var) => {
                self.changed = true;
                body
            }
            // A function that only calls itself is dead too (TVM's
            // `test_dead_recursion`): its variable is not used in the body.
            ExprKind::Let { var, value, body }
                if matches!(store.kind(value), ExprKind::Function(_)) && !post_order(store, &[body]).contains(&var) =>
            {
                self.changed = true;
                body
            }
            _ => post,
        }
    }
}

/// Remove unused `let`s from one function; returns the new function handle.
pub fn remove_unused_lets(store: &mut Store, func: ExprId) -> ExprId {
    let mut current = func;
    loop {
        let used = used_vars(store, current);
        let mut m = DropUnusedLets { used: &used, changed: false };
        let next = mutate(store, current, &mut m);
        if !m.changed {
            return next;
        }
        current = next;
    }
}

/// The global functions reachable from `@main` through `@name` references
/// (every function when there is no `@main`).
pub fn reachable_globals(m: &IRModule) -> FxHashSet<String> {
    let Some(main) = m.function("main") else {
        return m.functions().map(|(n, _)| n.to_string()).collect();
    };
    let mut seen: FxHashSet<String> = FxHashSet::default();
    seen.insert("main".to_string());
    let mut work = vec![main];
    while let Some(f) = work.pop() {
        for id in post_order(&m.store, &[f]) {
            if let ExprKind::GlobalVar(name) = m.store.kind(id) {
                if let Some(g) = m.function(name) {
                    if seen.insert(name.clone()) {
                        work.push(g);
                    }
                }
            }
        }
    }
    seen
}

/// DeadCodeElimination: unused `let`s removed in every global function (none removed).
pub fn dead_code_elimination(m: &mut IRModule) {
    for name in m.function_names() {
        let Some(f) = m.function(&name) else { continue };
        let new = remove_unused_lets(&mut m.store, f);
        if new != f {
            // `new` is a Function node: the rewrite keeps node kinds.
            let _ = m.update_function(&name, new);
        }
    }
}

/// RemoveUnusedFunctions: drop the global functions `@main` cannot reach.
pub fn remove_unused_functions(m: &mut IRModule) {
    let keep = reachable_globals(m);
    for name in m.function_names() {
        if !keep.contains(&name) {
            m.remove_function(&name);
        }
    }
}
