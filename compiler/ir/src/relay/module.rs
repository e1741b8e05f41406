//! `IRModule`: the global functions of a program, by name, over one [`Store`].

use indexmap::IndexMap;
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::span::Span;

use super::expr::{Call, Callee, ExprId, ExprKind, Function, Store, Var};
use super::structural::structural_eq;
use super::visit::post_order;

/// A module: named global Relay functions (`@main`, …) sharing one store,
/// and, once lowered, the TIR kernels (TVM keeps both kinds in one
/// `IRModule`, so `PrimFuncPass`es and instruments work on the same value).
/// Order is insertion order, which printing follows.
#[derive(Clone, Debug, Default)]
pub struct IRModule {
    /// The nodes of every function (and of unreachable garbage until [`IRModule::compact`]).
    pub store: Store,
    functions: IndexMap<String, ExprId>,
    prim_funcs: IndexMap<String, crate::tir::PrimFunc>,
}

impl IRModule {
    /// An empty module.
    pub fn new() -> Self {
        Self::default()
    }

    /// A module whose only function, `main`, is `func` (a `Function` node of `store`).
    pub fn from_main(store: Store, func: ExprId) -> Result<Self> {
        let mut m = IRModule { store, functions: IndexMap::new(), prim_funcs: IndexMap::new() };
        m.add_function("main", func)?;
        Ok(m)
    }

    /// Add or replace the global function `name`. `func` must be a `Function` node.
    pub fn add_function(&mut self, name: impl Into<String>, func: ExprId) -> Result<()> {
        let name = name.into();
        if !self.store.contains(func) || self.store.as_function(func).is_none() {
            return Err(Error::invalid(
                if self.store.contains(func) { self.store.span(func).clone() } else { Default::default() },
                format!("global `@{name}` must be bound to a function"),
            ));
        }
        self.functions.insert(name, func);
        Ok(())
    }

    /// Replace the function bound to `name` (it must exist).
    pub fn update_function(&mut self, name: &str, func: ExprId) -> Result<()> {
        if !self.functions.contains_key(name) {
            return Err(Error::invalid(Span::Unknown, format!("no global function `@{name}` to update")));
        }
        self.add_function(name, func)
    }

    /// Removes the global function `name`, keeping the others' order; returns its `Function` node.
    pub fn remove_function(&mut self, name: &str) -> Option<ExprId> {
        self.functions.shift_remove(name)
    }

    /// The `Function` node bound to `name` (without `@`), if any.
    pub fn function(&self, name: &str) -> Option<ExprId> {
        self.functions.get(name).copied()
    }

    /// `@main`, or an error saying it is missing, at the first function,
    /// with the names defined instead.
    pub fn main(&self) -> Result<ExprId> {
        self.function("main").ok_or_else(|| {
            let span = self.functions.values().next().map(|&f| self.store.span(f).clone()).unwrap_or_default();
            let names: Vec<String> = self.functions.keys().map(|n| format!("`@{n}`")).collect();
            let defined = if names.is_empty() { "no functions".to_string() } else { names.join(", ") };
            Error::invalid(span, format!("the module has no `@main` function (it defines {defined})"))
        })
    }

    /// `(name, Function node)` in order.
    pub fn functions(&self) -> impl Iterator<Item = (&str, ExprId)> {
        self.functions.iter().map(|(k, &v)| (k.as_str(), v))
    }

    /// The global function names, in order.
    pub fn function_names(&self) -> Vec<String> {
        self.functions.keys().cloned().collect()
    }

    /// Number of global Relay functions (TIR kernels not counted).
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// Whether the module has no global Relay function.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// Add or replace a TIR kernel (by its name).
    pub fn add_prim_func(&mut self, f: crate::tir::PrimFunc) {
        self.prim_funcs.insert(f.name.clone(), f);
    }

    /// The TIR kernel named `name`, if any.
    pub fn prim_func(&self, name: &str) -> Option<&crate::tir::PrimFunc> {
        self.prim_funcs.get(name)
    }

    /// The TIR kernels, in order.
    pub fn prim_funcs(&self) -> impl Iterator<Item = &crate::tir::PrimFunc> {
        self.prim_funcs.values()
    }

    /// Remove and return every TIR kernel, in order.
    pub fn take_prim_funcs(&mut self) -> Vec<crate::tir::PrimFunc> {
        std::mem::take(&mut self.prim_funcs).into_values().collect()
    }

    /// Drop the nodes no function reaches and renumber the rest (in the same
    /// relative order, so printing is unchanged). Checked types are kept.
    pub fn compact(&mut self) {
        let mut store = Store::new();
        let roots: Vec<ExprId> = self.functions.values().copied().collect();
        let map = store.import_many(&self.store, &roots);
        for f in self.functions.values_mut() {
            *f = map[f];
        }
        self.store = store;
    }

    /// Structural equality of two modules: the same function names, in any
    /// order, bound to structurally equal Relay functions (TIR kernels are
    /// compared by name only).
    pub fn structural_eq(&self, other: &IRModule) -> bool {
        self.functions.len() == other.functions.len()
            && self
                .functions
                .iter()
                .all(|(name, &f)| other.function(name).is_some_and(|g| structural_eq(&self.store, f, &other.store, g)))
    }
}

impl Store {
    /// Deep-copy the expression `root` of `other` into this store; returns its new handle.
    pub fn import(&mut self, other: &Store, root: ExprId) -> ExprId {
        self.import_many(other, &[root])[&root]
    }

    /// Deep-copy everything reachable from `roots` of `other` into this store,
    /// re-interning types and constants; returns the old → new handle map.
    pub fn import_many(&mut self, other: &Store, roots: &[ExprId]) -> FxHashMap<ExprId, ExprId> {
        let mut map: FxHashMap<ExprId, ExprId> = FxHashMap::default();
        for id in post_order(other, roots) {
            let m = |c: ExprId| map[&c];
            let kind = match other.kind(id) {
                ExprKind::Var(v) => {
                    ExprKind::Var(Var { name: v.name.clone(), ty: v.ty.map(|t| self.intern_type(other.ty(t).clone())) })
                }
                ExprKind::Constant(c) => ExprKind::Constant(self.intern_const(other.constant_data(*c).clone())),
                ExprKind::Function(f) => ExprKind::Function(Function {
                    type_params: f.type_params.clone(),
                    params: f.params.iter().map(|&p| m(p)).collect(),
                    body: m(f.body),
                    ret_ty: f.ret_ty.map(|t| self.intern_type(other.ty(t).clone())),
                    attrs: f.attrs.clone(),
                }),
                ExprKind::Call(Call { callee, args, attrs }) => ExprKind::Call(Call {
                    callee: match callee {
                        Callee::Expr(e) => Callee::Expr(m(*e)),
                        op => *op,
                    },
                    args: args.iter().map(|&a| m(a)).collect(),
                    attrs: attrs.clone(),
                }),
                k => k.map_children(m),
            };
            let new = self.add(kind, other.span(id).clone());
            if let Some(t) = other.checked_type(id) {
                self.set_checked_type(new, t.clone());
            }
            map.insert(id, new);
        }
        map
    }
}
