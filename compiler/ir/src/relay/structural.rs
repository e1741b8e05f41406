//! Structural equality and hashing of expressions, possibly across stores.
//!
//! Two expressions are structurally equal when they have the same shape of
//! nodes, operators, attributes, constants and type annotations, with their
//! variables in one-to-one correspondence (alpha-equivalence): a binder
//! (parameter, `let` variable) maps to the binder at the same place, a free
//! variable to a free variable of the same name and type. Sharing does not
//! matter: `add(%0, %0)` with `%0 = exp(%x)` equals `add(exp(%x), exp(%x))`.
//! Equal expressions have equal hashes.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHashSet};

use super::expr::{Callee, ExprId, ExprKind, Store};
use super::ty::TypeId;
use super::visit::post_order;

struct EqState<'a> {
    a: &'a Store,
    b: &'a Store,
    vars: FxHashMap<ExprId, ExprId>,
    vars_rev: FxHashMap<ExprId, ExprId>,
}

impl EqState<'_> {
    fn types_eq(&self, x: Option<TypeId>, y: Option<TypeId>) -> bool {
        match (x, y) {
            (None, None) => true,
            (Some(x), Some(y)) => self.a.ty(x) == self.b.ty(y),
            _ => false,
        }
    }

    /// Record that variable `x` (in `a`) corresponds to `y` (in `b`).
    fn bind(&mut self, x: ExprId, y: ExprId, by_name: bool) -> bool {
        if let Some(&m) = self.vars.get(&x) {
            return m == y;
        }
        if self.vars_rev.contains_key(&y) {
            return false;
        }
        let (Some(vx), Some(vy)) = (self.a.as_var(x), self.b.as_var(y)) else {
            return false;
        };
        if !self.types_eq(vx.ty, vy.ty) || (by_name && vx.name != vy.name) {
            return false;
        }
        self.vars.insert(x, y);
        self.vars_rev.insert(y, x);
        true
    }
}

/// Whether `a_root` in `a` and `b_root` in `b` are structurally equal.
pub fn structural_eq(a: &Store, a_root: ExprId, b: &Store, b_root: ExprId) -> bool {
    let mut st = EqState { a, b, vars: FxHashMap::default(), vars_rev: FxHashMap::default() };
    let mut seen: FxHashSet<(ExprId, ExprId)> = FxHashSet::default();
    let mut stack = vec![(a_root, b_root)];
    while let Some((x, y)) = stack.pop() {
        if !seen.insert((x, y)) {
            continue;
        }
        let ok = match (a.kind(x), b.kind(y)) {
            // A variable not bound yet is free: it must match by name.
            (ExprKind::Var(_), ExprKind::Var(_)) => st.bind(x, y, true),
            (ExprKind::GlobalVar(n), ExprKind::GlobalVar(m)) => n == m,
            (ExprKind::Constant(c), ExprKind::Constant(d)) => a.constant_data(*c) == b.constant_data(*d),
            (ExprKind::Call(c), ExprKind::Call(d)) => {
                let callee_ok = match (c.callee, d.callee) {
                    (Callee::Op(o), Callee::Op(p)) => o == p,
                    (Callee::Expr(e), Callee::Expr(f)) => {
                        stack.push((e, f));
                        true
                    }
                    _ => false,
                };
                callee_ok && c.attrs == d.attrs && c.args.len() == d.args.len() && {
                    stack.extend(c.args.iter().copied().zip(d.args.iter().copied()));
                    true
                }
            }
            (ExprKind::Tuple(f), ExprKind::Tuple(g)) => {
                f.len() == g.len() && {
                    stack.extend(f.iter().copied().zip(g.iter().copied()));
                    true
                }
            }
            (ExprKind::TupleGetItem { tuple: t, index: i }, ExprKind::TupleGetItem { tuple: u, index: j }) => {
                i == j && {
                    stack.push((*t, *u));
                    true
                }
            }
            (ExprKind::Let { var: v, value: e, body: b1 }, ExprKind::Let { var: w, value: f, body: b2 }) => {
                st.bind(*v, *w, false) && {
                    stack.push((*e, *f));
                    stack.push((*b1, *b2));
                    true
                }
            }
            (
                ExprKind::If { cond: c1, then_branch: t1, else_branch: e1 },
                ExprKind::If { cond: c2, then_branch: t2, else_branch: e2 },
            ) => {
                stack.extend([(*c1, *c2), (*t1, *t2), (*e1, *e2)]);
                true
            }
            (ExprKind::Function(f), ExprKind::Function(g)) => {
                f.params.len() == g.params.len()
                    && f.type_params == g.type_params
                    && f.attrs == g.attrs
                    && st.types_eq(f.ret_ty, g.ret_ty)
                    && f.params.iter().zip(&g.params).all(|(&p, &q)| st.bind(p, q, false))
                    && {
                        stack.push((f.body, g.body));
                        true
                    }
            }
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// A hash consistent with [`structural_eq`]: variables hash by their type
/// annotation only, so alpha-equivalent expressions hash alike.
/// Deterministic across runs and platforms of the same endianness.
pub fn structural_hash(store: &Store, root: ExprId) -> u64 {
    let mut h: FxHashMap<ExprId, u64> = FxHashMap::default();
    for id in post_order(store, &[root]) {
        let mut s = DefaultHasher::new();
        let kind = store.kind(id);
        kind.kind_name().hash(&mut s);
        let ty = |t: Option<TypeId>, s: &mut DefaultHasher| t.map(|t| store.ty(t)).hash(s);
        match kind {
            ExprKind::Var(v) => ty(v.ty, &mut s),
            ExprKind::GlobalVar(n) => n.hash(&mut s),
            ExprKind::Constant(c) => store.constant_data(*c).hash(&mut s),
            ExprKind::Call(c) => {
                if let Callee::Op(op) = c.callee {
                    op.hash(&mut s);
                }
                c.attrs.hash(&mut s);
            }
            ExprKind::TupleGetItem { index, .. } => index.hash(&mut s),
            ExprKind::Function(f) => {
                f.type_params.hash(&mut s);
                f.attrs.hash(&mut s);
                ty(f.ret_ty, &mut s);
            }
            ExprKind::Tuple(_) | ExprKind::Let { .. } | ExprKind::If { .. } => {}
        }
        kind.for_each_child(|c| h[&c].hash(&mut s));
        h.insert(id, s.finish());
    }
    h[&root]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::Attrs;
    use crate::dtype::DataType;
    use crate::relay::ty::Type;

    fn model(store: &mut Store, param: &str, shared: bool) -> ExprId {
        let t = Type::tensor([3], DataType::F32);
        let x = store.var(param, Some(t));
        let e1 = store.call_op("exp", vec![x], Attrs::new()).unwrap();
        let e2 = if shared { e1 } else { store.call_op("exp", vec![x], Attrs::new()).unwrap() };
        let body = store.call_op("add", vec![e1, e2], Attrs::new()).unwrap();
        store.function(vec![x], body, None, Attrs::new())
    }

    #[test]
    fn alpha_equivalent_and_sharing_insensitive() {
        let mut a = Store::new();
        let mut b = Store::new();
        let fa = model(&mut a, "x", true);
        let fb = model(&mut b, "y", false);
        assert!(structural_eq(&a, fa, &b, fb));
        assert_eq!(structural_hash(&a, fa), structural_hash(&b, fb));
    }

    #[test]
    fn different_ops_differ() {
        let mut a = Store::new();
        let fa = model(&mut a, "x", true);
        let x = a.var("x", Some(Type::tensor([3], DataType::F32)));
        let body = a.call_op("multiply", vec![x, x], Attrs::new()).unwrap();
        let fb = a.function(vec![x], body, None, Attrs::new());
        assert!(!structural_eq(&a, fa, &a, fb));
    }

    #[test]
    fn free_variables_match_by_name() {
        let mut a = Store::new();
        let x = a.var("x", None);
        let y = a.var("y", None);
        let ex = a.call_op("exp", vec![x], Attrs::new()).unwrap();
        let ey = a.call_op("exp", vec![y], Attrs::new()).unwrap();
        assert!(!structural_eq(&a, ex, &a, ey));
        assert!(structural_eq(&a, ex, &a, ex));
    }
}
