//! ToANormalForm: every non-atomic expression gets a `let` binding, in the
//! innermost scope that dominates all of its uses (TVM's `ToANormalForm`).
//!
//! Scopes are the function body and each branch of an `if`. A node's scope is
//! the lowest common ancestor, in the scope tree, of the scopes it is used in;
//! walking handles downwards visits every user before what it uses, so one
//! pass computes all scopes. Bindings are then emitted in handle order (a
//! topological order) inside their scope. Atoms — variables, globals,
//! constants and functions — are not bound. A nested non-primitive function
//! is converted on its own (recursion on function nesting, not on expression depth).

use rustc_hash::FxHashMap;

use kiln_ir::relay::visit::post_order_filtered;
use kiln_ir::relay::{ExprId, ExprKind, Function, Store, Var};
use kiln_ir::span::Span;

struct Scopes {
    parent: Vec<Option<usize>>,
    depth: Vec<usize>,
}

impl Scopes {
    fn child(&mut self, of: usize) -> usize {
        self.parent.push(Some(of));
        self.depth.push(self.depth[of] + 1);
        self.parent.len() - 1
    }

    fn lca(&self, mut a: usize, mut b: usize) -> usize {
        while a != b {
            if self.depth[a] >= self.depth[b] {
                a = self.parent[a].unwrap_or(0);
            } else {
                b = self.parent[b].unwrap_or(0);
            }
        }
        a
    }
}

fn is_atom(kind: &ExprKind) -> bool {
    matches!(kind, ExprKind::Var(_) | ExprKind::GlobalVar(_) | ExprKind::Constant(_) | ExprKind::Function(_))
}

/// Convert one function; returns the new function handle.
pub fn to_a_normal_form(store: &mut Store, func: ExprId) -> ExprId {
    let Some(f) = store.as_function(func).cloned() else { return func };
    if f.is_primitive() {
        return func;
    }
    let nodes = post_order_filtered(store, &[f.body], |id| !matches!(store.kind(id), ExprKind::Function(_)));

    // Nested functions first, each on its own.
    let mut atom: FxHashMap<ExprId, ExprId> = FxHashMap::default();
    for &n in &nodes {
        if matches!(store.kind(n), ExprKind::Function(_)) {
            let converted = to_a_normal_form(store, n);
            atom.insert(n, converted);
        }
    }

    // Scopes, users before what they use.
    let mut scopes = Scopes { parent: vec![None], depth: vec![0] };
    let mut scope: FxHashMap<ExprId, usize> = FxHashMap::default();
    let mut branch_scopes: FxHashMap<ExprId, (usize, usize)> = FxHashMap::default();
    scope.insert(f.body, 0);
    let mut uses: FxHashMap<ExprId, usize> = FxHashMap::default();
    for &n in nodes.iter().rev() {
        let s = scope.get(&n).copied().unwrap_or(0);
        let kind = store.kind(n).clone();
        if matches!(kind, ExprKind::Function(_)) {
            continue;
        }
        let mut contribute = |c: ExprId, cs: usize, scope: &mut FxHashMap<ExprId, usize>, scopes: &Scopes| {
            *uses.entry(c).or_insert(0) += 1;
            let merged = match scope.get(&c) {
                Some(&old) => scopes.lca(old, cs),
                None => cs,
            };
            scope.insert(c, merged);
        };
        if let ExprKind::If { cond, then_branch, else_branch } = kind {
            let (t, e) = (scopes.child(s), scopes.child(s));
            branch_scopes.insert(n, (t, e));
            contribute(cond, s, &mut scope, &scopes);
            contribute(then_branch, t, &mut scope, &scopes);
            contribute(else_branch, e, &mut scope, &scopes);
        } else {
            kind.for_each_child(|c| contribute(c, s, &mut scope, &scopes));
        }
    }

    // A `let` whose value is used only by it binds that value under its own variable.
    let mut named_by_let: FxHashMap<ExprId, ExprId> = FxHashMap::default();
    for &n in &nodes {
        if let ExprKind::Let { var, value, .. } = *store.kind(n) {
            if !is_atom(store.kind(value)) && uses.get(&value) == Some(&1) {
                named_by_let.insert(value, var);
            }
        }
    }

    // Bindings per scope, in handle order.
    let mut bindings: Vec<Vec<(ExprId, ExprId)>> = vec![Vec::new(); scopes.parent.len()];
    let mut fresh = 0usize;
    for &n in &nodes {
        let kind = store.kind(n).clone();
        match kind {
            ExprKind::Var(_) | ExprKind::GlobalVar(_) | ExprKind::Constant(_) => {
                atom.insert(n, n);
            }
            ExprKind::Function(_) => {}
            ExprKind::Let { var, value, body } => {
                if named_by_let.get(&value) != Some(&var) {
                    let v = atom[&value];
                    bindings[scope[&n]].push((var, v));
                }
                atom.insert(n, atom[&body]);
            }
            _ => {
                let value = match kind {
                    ExprKind::If { cond, then_branch, else_branch } => {
                        let (t, e) = branch_scopes[&n];
                        let then_expr = wrap(store, std::mem::take(&mut bindings[t]), atom[&then_branch]);
                        let else_expr = wrap(store, std::mem::take(&mut bindings[e]), atom[&else_branch]);
                        ExprKind::If { cond: atom[&cond], then_branch: then_expr, else_branch: else_expr }
                    }
                    k => k.map_children(|c| atom.get(&c).copied().unwrap_or(c)),
                };
                let span = store.span(n).clone();
                let value = store.add(value, span);
                if let Some(t) = store.checked_type(n).cloned() {
                    store.set_checked_type(value, t);
                }
                let var = match named_by_let.get(&n) {
                    Some(&v) => v,
                    None => {
                        let ty = store.checked_type(n).cloned().map(|t| store.intern_type(t));
                        fresh += 1;
                        store.add(ExprKind::Var(Var { name: format!("x{fresh}"), ty }), Span::Unknown)
                    }
                };
                bindings[scope.get(&n).copied().unwrap_or(0)].push((var, value));
                atom.insert(n, var);
            }
        }
    }
    let result = atom.get(&f.body).copied().unwrap_or(f.body);
    let body = wrap(store, std::mem::take(&mut bindings[0]), result);
    store.add(ExprKind::Function(Function { body, ..f }), store.span(func).clone())
}

/// `let b0 = v0; let b1 = v1; …; result`.
fn wrap(store: &mut Store, bindings: Vec<(ExprId, ExprId)>, result: ExprId) -> ExprId {
    let mut expr = result;
    for (var, value) in bindings.into_iter().rev() {
        expr = store.let_(var, value, expr);
    }
    expr
}
