//! Relay text in TVM's syntax (`#[version = "0.0.5"]`, `def @main(…) { … }`).
//!
//! Each function body is printed as scopes — the body, each `if` branch, each
//! nested function — and every node is printed once, in the innermost scope
//! that contains all of its uses (their lowest common ancestor in the scope
//! tree), in dependency order: `%N = …;` for intermediate values, `let %v = …;`
//! for let bindings, and the scope's result last. Finding scopes and order
//! uses explicit stacks; only the syntactic nesting of `if`s and `fn`s
//! recurses, so a 10 000-long chain of calls prints without deep recursion.
//!
//! Non-scalar constants print as `meta[relay.Constant][k]`, with their bytes
//! in a `#[metadata]` section at the end that the parser reads back exactly.

use std::fmt::Write;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::attrs::{format_float, AttrValue};
use crate::dtype::DataType;
use crate::tensor::Tensor;

use super::expr::{Callee, ConstId, ExprId, ExprKind, Store};
use super::module::IRModule;
use super::op::op_registry;

/// The header every printed module starts with.
pub const VERSION_HEADER: &str = "#[version = \"0.0.5\"]";

/// A scalar constant as an inline literal, if it has one that parses back exactly.
pub fn scalar_literal(t: &Tensor) -> Option<String> {
    if !t.shape().is_empty() {
        return None;
    }
    let v = t.get_f64(0);
    Some(match t.dtype() {
        DataType::F32 | DataType::F16 | DataType::F64 => {
            if !v.is_finite() {
                return None;
            }
            let text = match t.dtype() {
                DataType::F32 => format!("{:?}", v as f32),
                DataType::F64 => format!("{v:?}"),
                _ => format_float(v),
            };
            let text = text.strip_suffix(".0").unwrap_or(&text).to_string();
            match t.dtype() {
                DataType::F32 => format!("{text}f"),
                DataType::F64 => format!("{text}f64"),
                _ => format!("{text}f16"),
            }
        }
        DataType::I32 => format!("{}", v as i64),
        // The lexer reads literals as i64: larger u64 values print as tensors.
        DataType::U64 if v > i64::MAX as f64 => return None,
        DataType::Bool => (if v != 0.0 { "True" } else { "False" }).to_string(),
        dt => format!("{}{}", v as i64, short_name(dt)),
    })
}

/// The Rust-style suffix of an integer literal (`i64`, `u8`, …).
fn short_name(dt: DataType) -> &'static str {
    match dt {
        DataType::I64 => "i64",
        DataType::I16 => "i16",
        DataType::I8 => "i8",
        DataType::U8 => "u8",
        DataType::U16 => "u16",
        DataType::U32 => "u32",
        DataType::U64 => "u64",
        _ => "",
    }
}

struct Scopes {
    parent: Vec<usize>,
    depth: Vec<usize>,
}

impl Scopes {
    fn add(&mut self, parent: usize) -> usize {
        self.parent.push(parent);
        self.depth.push(self.depth[parent] + 1);
        self.parent.len() - 1
    }
    fn lca(&self, mut a: usize, mut b: usize) -> usize {
        while a != b {
            if self.depth[a] >= self.depth[b] {
                a = self.parent[a];
            } else {
                b = self.parent[b];
            }
        }
        a
    }
}

/// What a function body prints as: scopes, their items in order, names.
struct Layout {
    /// Items (nodes to bind, and `let` nodes) per scope, in print order.
    items: Vec<Vec<ExprId>>,
    /// The scope an `if` branch or a function body opens, by (node, branch): 0 = then/body, 1 = else.
    opens: FxHashMap<(ExprId, u8), usize>,
    /// Let values printed inline in their `let` statement.
    inline_let_value: FxHashSet<ExprId>,
}

struct Printer<'a> {
    store: &'a Store,
    out: String,
    meta: Vec<ConstId>,
    meta_index: FxHashMap<ConstId, usize>,
    /// The text each printed node is referred to by (`%3`, `%x`).
    names: FxHashMap<ExprId, String>,
    used_names: FxHashSet<String>,
    counter: usize,
}

/// Record that `c` is used in scope `cs`: its scope becomes the common ancestor of all its uses.
fn put(scope: &mut FxHashMap<ExprId, usize>, scopes: &Scopes, c: ExprId, cs: usize) {
    let merged = scope.get(&c).map_or(cs, |&old| scopes.lca(old, cs));
    scope.insert(c, merged);
}

fn is_atom(kind: &ExprKind) -> bool {
    matches!(kind, ExprKind::Var(_) | ExprKind::GlobalVar(_) | ExprKind::Constant(_))
}

impl<'a> Printer<'a> {
    fn new(store: &'a Store) -> Self {
        Printer {
            store,
            out: String::new(),
            meta: Vec::new(),
            meta_index: FxHashMap::default(),
            names: FxHashMap::default(),
            used_names: FxHashSet::default(),
            counter: 0,
        }
    }

    /// The print order (dependencies first) of everything reachable from `root`.
    fn order(&self, root: ExprId) -> Vec<ExprId> {
        let store = self.store;
        let mut let_value: FxHashMap<ExprId, ExprId> = FxHashMap::default();
        for id in super::visit::post_order(store, &[root]) {
            if let ExprKind::Let { var, value, .. } = *store.kind(id) {
                let_value.insert(var, value);
            }
        }
        let deps = |id: ExprId| -> Vec<ExprId> {
            match store.kind(id) {
                ExprKind::Let { var, value, body } => vec![*value, *var, *body],
                ExprKind::Var(_) => let_value.get(&id).copied().into_iter().collect(),
                ExprKind::Function(f) => vec![f.body],
                // Arguments before the function they are passed to, so data flows downwards.
                ExprKind::Call(c) => {
                    let mut d = c.args.clone();
                    if let Callee::Expr(f) = c.callee {
                        d.push(f);
                    }
                    d
                }
                k => k.children(),
            }
        };
        let mut let_of_var: FxHashMap<ExprId, ExprId> = FxHashMap::default();
        for id in super::visit::post_order(store, &[root]) {
            if let ExprKind::Let { var, .. } = *store.kind(id) {
                let_of_var.insert(var, id);
            }
        }
        let mut out = Vec::new();
        let mut state: FxHashMap<ExprId, bool> = FxHashMap::default(); // false: entered, true: done
        let mut stack = vec![(root, false)];
        while let Some((id, expanded)) = stack.pop() {
            if expanded {
                if state.get(&id) != Some(&true) {
                    state.insert(id, true);
                    out.push(id);
                    // A `let` statement goes right after its variable (its value is
                    // already out), before anything of its body.
                    if let Some(&l) = let_of_var.get(&id) {
                        if state.get(&l) != Some(&true) {
                            state.insert(l, true);
                            out.push(l);
                        }
                    }
                }
                continue;
            }
            if state.contains_key(&id) {
                continue;
            }
            state.insert(id, false);
            stack.push((id, true));
            for d in deps(id).into_iter().rev() {
                if !state.contains_key(&d) {
                    stack.push((d, false));
                }
            }
        }
        out
    }

    fn layout(&self, func_body: ExprId) -> Layout {
        let store = self.store;
        let order = self.order(func_body);
        let mut scopes = Scopes { parent: vec![0], depth: vec![0] };
        let mut scope: FxHashMap<ExprId, usize> = FxHashMap::default();
        let mut opens: FxHashMap<(ExprId, u8), usize> = FxHashMap::default();
        let mut uses: FxHashMap<ExprId, usize> = FxHashMap::default();
        scope.insert(func_body, 0);
        // Parents before children, so each node's scope is final before its
        // children's is derived from it. (Not the reverse of `order`: that
        // puts a `let` before its body, so a branch inside the body of a
        // `let` that is itself inside a branch landed in the outermost scope,
        // away from the variable it uses.)
        for &n in super::visit::post_order(store, &[func_body]).iter().rev() {
            let s = scope.get(&n).copied().unwrap_or(0);
            match store.kind(n).clone() {
                ExprKind::If { cond, then_branch, else_branch } => {
                    let (t, e) = (scopes.add(s), scopes.add(s));
                    opens.insert((n, 0), t);
                    opens.insert((n, 1), e);
                    put(&mut scope, &scopes, cond, s);
                    put(&mut scope, &scopes, then_branch, t);
                    put(&mut scope, &scopes, else_branch, e);
                    *uses.entry(cond).or_default() += 1;
                }
                ExprKind::Function(f) => {
                    let b = scopes.add(s);
                    opens.insert((n, 0), b);
                    put(&mut scope, &scopes, f.body, b);
                }
                ExprKind::Let { var, value, body } => {
                    put(&mut scope, &scopes, value, s);
                    put(&mut scope, &scopes, var, s);
                    put(&mut scope, &scopes, body, s);
                    *uses.entry(value).or_default() += 1;
                }
                k => k.for_each_child(|c| {
                    put(&mut scope, &scopes, c, s);
                    *uses.entry(c).or_default() += 1;
                }),
            }
        }
        // Scope results are printed inline, not bound.
        let mut results: FxHashSet<ExprId> = FxHashSet::default();
        let mut roots: Vec<ExprId> = vec![func_body];
        for &(n, branch) in opens.keys() {
            match store.kind(n) {
                ExprKind::If { then_branch, else_branch, .. } => {
                    roots.push(if branch == 0 { *then_branch } else { *else_branch })
                }
                ExprKind::Function(f) => roots.push(f.body),
                _ => {}
            }
        }
        for mut r in roots {
            while let ExprKind::Let { body, .. } = store.kind(r) {
                r = *body;
            }
            results.insert(r);
        }
        let mut inline_let_value = FxHashSet::default();
        for &n in &order {
            if let ExprKind::Let { value, .. } = store.kind(n) {
                if uses.get(value) == Some(&1) && !is_atom(store.kind(*value)) && !results.contains(value) {
                    inline_let_value.insert(*value);
                }
            }
        }
        let mut items: Vec<Vec<ExprId>> = vec![Vec::new(); scopes.parent.len()];
        for &n in &order {
            let kind = store.kind(n);
            if is_atom(kind) || results.contains(&n) || inline_let_value.contains(&n) {
                continue;
            }
            items[scope.get(&n).copied().unwrap_or(0)].push(n);
        }
        Layout { items, opens, inline_let_value }
    }

    fn fresh_var_name(&mut self, base: &str) -> String {
        let base = if base.is_empty() || base.chars().all(|c| c.is_ascii_digit()) {
            format!("v{base}")
        } else {
            base.to_string()
        };
        let mut name = base.clone();
        let mut k = 1;
        while self.used_names.contains(&name) {
            name = format!("{base}{k}");
            k += 1;
        }
        self.used_names.insert(name.clone());
        name
    }

    /// The name a variable prints as, allocated on first sight.
    fn var_name(&mut self, id: ExprId) -> String {
        if let Some(n) = self.names.get(&id) {
            return n.clone();
        }
        let base = self.store.as_var(id).map(|v| v.name.clone()).unwrap_or_default();
        let n = format!("%{}", self.fresh_var_name(&base));
        self.names.insert(id, n.clone());
        n
    }

    fn constant(&mut self, c: ConstId) -> String {
        if let Some(lit) = scalar_literal(self.store.constant_data(c)) {
            return lit;
        }
        let k = match self.meta_index.get(&c) {
            Some(&k) => k,
            None => {
                self.meta.push(c);
                self.meta_index.insert(c, self.meta.len() - 1);
                self.meta.len() - 1
            }
        };
        format!("meta[relay.Constant][{k}]")
    }

    /// How a node is referred to from other expressions.
    fn atom(&mut self, id: ExprId, layout: &Layout, depth: usize) -> String {
        let mut id = id;
        while let ExprKind::Let { body, .. } = self.store.kind(id) {
            id = *body;
        }
        if let Some(n) = self.names.get(&id) {
            return n.clone();
        }
        match self.store.kind(id) {
            ExprKind::Var(_) => self.var_name(id),
            ExprKind::GlobalVar(g) => format!("@{g}"),
            ExprKind::Constant(c) => self.constant(*c),
            // Results and inline let values print in place.
            _ => self.expr(id, layout, depth),
        }
    }

    fn ty_comment(&self, id: ExprId) -> String {
        match self.store.checked_type(id) {
            Some(t) if !matches!(self.store.kind(id), ExprKind::Function(_)) => format!(" /* ty={t} */"),
            _ => String::new(),
        }
    }

    fn attrs_text(values: impl Iterator<Item = (String, String)>) -> Vec<String> {
        values.map(|(k, v)| format!("{k}={v}")).collect()
    }

    /// The expression text of a non-atomic node, its children as atoms.
    fn expr(&mut self, id: ExprId, layout: &Layout, depth: usize) -> String {
        let store = self.store;
        match store.kind(id).clone() {
            ExprKind::Call(call) => {
                let mut parts: Vec<String> = call.args.iter().map(|&a| self.atom(a, layout, depth)).collect();
                let head = match call.callee {
                    Callee::Op(op) => {
                        let def = op_registry().get(op);
                        parts.extend(Self::attrs_text(
                            call.attrs.non_default(&def.attrs).map(|(k, v)| (k.to_string(), v.to_string())),
                        ));
                        def.name.to_string()
                    }
                    Callee::Expr(f) => {
                        // A function call's attributes have no schema: all are printed.
                        parts.extend(Self::attrs_text(call.attrs.iter().map(|(k, v)| (k.to_string(), v.to_string()))));
                        let callee = self.atom(f, layout, depth);
                        if matches!(store.kind(f), ExprKind::Function(_)) && !self.names.contains_key(&f) {
                            format!("({callee})")
                        } else {
                            callee
                        }
                    }
                };
                format!("{head}({}){}", parts.join(", "), self.ty_comment(id))
            }
            ExprKind::Tuple(fields) => {
                let f: Vec<String> = fields.iter().map(|&x| self.atom(x, layout, depth)).collect();
                let comma = if f.len() == 1 { "," } else { "" };
                format!("({}{comma}){}", f.join(", "), self.ty_comment(id))
            }
            ExprKind::TupleGetItem { tuple, index } => {
                let t = self.atom(tuple, layout, depth);
                let t = if t.starts_with('%') || t.starts_with('@') { t } else { format!("({t})") };
                format!("{t}.{index}{}", self.ty_comment(id))
            }
            ExprKind::If { cond, .. } => {
                let c = self.atom(cond, layout, depth);
                let pad = "  ".repeat(depth);
                let t = self.scope(layout, layout.opens[&(id, 0)], self.branch(id, 0), depth + 1);
                let e = self.scope(layout, layout.opens[&(id, 1)], self.branch(id, 1), depth + 1);
                format!("if ({c}) {{\n{t}{pad}}} else {{\n{e}{pad}}}")
            }
            ExprKind::Function(f) => {
                let mut params: Vec<String> = f.params.iter().map(|&p| self.param(p)).collect();
                params.extend(Self::attrs_text(f.attrs.iter().map(|(k, v)| (k.to_string(), v.to_string()))));
                let ret = f.ret_ty.map(|t| format!(" -> {}", store.ty(t))).unwrap_or_default();
                let pad = "  ".repeat(depth);
                let body = self.scope(layout, layout.opens[&(id, 0)], f.body, depth + 1);
                format!("fn {}({}){ret} {{\n{body}{pad}}}", type_params_text(&f.type_params), params.join(", "))
            }
            ExprKind::Let { .. } | ExprKind::Var(_) | ExprKind::GlobalVar(_) | ExprKind::Constant(_) => {
                self.atom(id, layout, depth)
            }
        }
    }

    fn branch(&self, id: ExprId, which: u8) -> ExprId {
        match self.store.kind(id) {
            ExprKind::If { then_branch, else_branch, .. } => {
                if which == 0 {
                    *then_branch
                } else {
                    *else_branch
                }
            }
            _ => id,
        }
    }

    /// `%x: T` for a binder (allocating its name).
    fn param(&mut self, p: ExprId) -> String {
        let name = self.var_name(p);
        match self.store.as_var(p).and_then(|v| v.ty) {
            Some(t) => format!("{name}: {}", self.store.ty(t)),
            None => name,
        }
    }

    /// The lines of one scope: its items, then its result.
    fn scope(&mut self, layout: &Layout, scope: usize, root: ExprId, depth: usize) -> String {
        let pad = "  ".repeat(depth);
        let mut out = String::new();
        for &n in &layout.items[scope] {
            match self.store.kind(n).clone() {
                ExprKind::Let { var, value, .. } => {
                    let v = self.param(var);
                    let val = if layout.inline_let_value.contains(&value) {
                        self.expr(value, layout, depth)
                    } else {
                        self.atom(value, layout, depth)
                    };
                    let _ = writeln!(out, "{pad}let {v} = {val};");
                }
                _ => {
                    let text = self.expr(n, layout, depth);
                    let name = format!("%{}", self.counter);
                    self.counter += 1;
                    let _ = writeln!(out, "{pad}{name} = {text};");
                    self.names.insert(n, name);
                }
            }
        }
        let result = self.atom(root, layout, depth);
        let _ = writeln!(out, "{pad}{result}");
        out
    }

    /// Variables used but bound nowhere in `func`.
    fn free_vars(&self, func: ExprId) -> Vec<ExprId> {
        let store = self.store;
        let order = super::visit::post_order(store, &[func]);
        let mut bound: FxHashSet<ExprId> = FxHashSet::default();
        for &id in &order {
            match store.kind(id) {
                ExprKind::Let { var, .. } => {
                    bound.insert(*var);
                }
                ExprKind::Function(f) => bound.extend(f.params.iter().copied()),
                _ => {}
            }
        }
        order.into_iter().filter(|&id| matches!(store.kind(id), ExprKind::Var(_)) && !bound.contains(&id)).collect()
    }

    fn def(&mut self, name: &str, func: ExprId) {
        let store = self.store;
        let Some(f) = store.as_function(func).cloned() else { return };
        self.names.clear();
        self.used_names.clear();
        self.counter = 0;
        let layout = self.layout(f.body);
        let mut params: Vec<String> = f.params.iter().map(|&p| self.param(p)).collect();
        params.extend(Self::attrs_text(f.attrs.iter().map(|(k, v)| (k.to_string(), v.to_string()))));
        let ret = f.ret_ty.map(|t| format!(" -> {}", store.ty(t))).unwrap_or_default();
        let _ = writeln!(self.out, "def @{name}{}({}){ret} {{", type_params_text(&f.type_params), params.join(", "));
        for v in self.free_vars(func) {
            let p = self.param(v);
            let _ = writeln!(self.out, "  free_var {p};");
        }
        let body = self.scope(&layout, 0, f.body, 1);
        self.out.push_str(&body);
        self.out.push_str("}\n");
    }

    fn metadata(&mut self) {
        self.metadata_with(true);
    }

    /// The `#[metadata]` section: each constant's type, and its bytes as hex when `values`.
    fn metadata_with(&mut self, values: bool) {
        if self.meta.is_empty() {
            return;
        }
        self.out.push_str("\n#[metadata]\n");
        for (k, &c) in self.meta.iter().enumerate() {
            let t = self.store.constant_data(c);
            let ty = super::ty::TensorType::new(t.shape().to_vec(), t.dtype());
            if values {
                let hex: String = t.bytes().iter().map(|b| format!("{b:02x}")).collect();
                let _ = writeln!(self.out, "relay.Constant[{k}]: {ty} = \"{hex}\"");
            } else {
                let _ = writeln!(self.out, "relay.Constant[{k}]: {ty}");
            }
        }
    }
}

/// The whole module as Relay text.
pub fn print_module(m: &IRModule) -> String {
    print_module_with(m, true)
}

/// [`print_module`] with each non-scalar constant's type but not its bytes
/// (scalars still print in place): the module's structure, for keys that
/// must not change when only the weights do. Not parseable back.
pub fn print_module_structure(m: &IRModule) -> String {
    print_module_with(m, false)
}

fn print_module_with(m: &IRModule, values: bool) -> String {
    let mut p = Printer::new(&m.store);
    p.out.push_str(VERSION_HEADER);
    p.out.push('\n');
    for (k, (name, f)) in m.functions().enumerate() {
        if k > 0 {
            p.out.push('\n');
        }
        p.def(name, f);
    }
    // Lowered kernels print as TVMScript inside a comment: Relay text cannot hold them.
    for f in m.prim_funcs() {
        p.out.push_str("\n/* TIR kernel\n");
        p.out.push_str(&crate::tir::print_prim_func(f));
        p.out.push_str("*/\n");
    }
    p.metadata_with(values);
    p.out
}

/// `[A, B]` after `def @name` or `fn ` (TVM's printer), or nothing.
fn type_params_text(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("[{}]", names.join(", "))
    }
}

/// One expression, as the body of an anonymous `def @main()`-less block (for messages and tests).
pub fn print_expr(store: &Store, id: ExprId) -> String {
    let mut p = Printer::new(store);
    let layout = p.layout(id);
    let body = p.scope(&layout, 0, id, 0);
    p.out.push_str(&body);
    p.metadata();
    p.out
}

/// An attribute value as printed (exposed for the parser's tests).
pub fn attr_text(v: &AttrValue) -> String {
    v.to_string()
}
