//! Relay expressions, stored in an arena ([`Store`]) and addressed by [`ExprId`].
//!
//! Invariant: a node's children always have smaller handles than the node
//! (a child must exist before its parent is built). Walking the arena in index
//! order is therefore topological, and no traversal needs recursion: see
//! [`mod@super::visit`]. Identity is the handle: two `Var` nodes with the same name
//! are different variables; every use of one variable is the same handle.

use crate::arena::{Arena, Handle, HandleMap, UniqueArena};
use crate::attrs::Attrs;
use crate::error::{Error, Result};
use crate::span::Span;
use crate::tensor::Tensor;

use super::op::{op_registry, OpId};
use super::ty::{Type, TypeId};

/// A handle to an expression node in a [`Store`].
pub type ExprId = Handle<Expr>;
/// A handle to a hash-consed constant tensor in a [`Store`].
pub type ConstId = Handle<Tensor>;

/// A variable: a function parameter, a `let` binder, or a free variable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Var {
    /// The name without `%`. Names need not be unique; the handle is the identity.
    pub name: String,
    /// The annotated type, if any.
    pub ty: Option<TypeId>,
}

/// What a call calls: a registered operator, or an expression of function type
/// (a `GlobalVar`, a `Function`, or a variable bound to one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Callee {
    /// A registered operator.
    Op(OpId),
    /// An expression of function type.
    Expr(ExprId),
}

/// A call: a callee applied to arguments, with attributes for operator calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    /// What is called.
    pub callee: Callee,
    /// The arguments, in order.
    pub args: Vec<ExprId>,
    /// Normalized against the operator's schema for operator calls; empty otherwise.
    pub attrs: Attrs,
}

/// A function. Attributes such as `Primitive=1` and `SkipOptimization=1` are
/// kept in `attrs` (see [`Function::is_primitive`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// The names of its type parameters (`fn [A](%x: A) -> A`), in scope in
    /// its parameter and return annotations; empty unless polymorphic.
    pub type_params: Vec<String>,
    /// `Var` nodes.
    pub params: Vec<ExprId>,
    /// The body, in which the parameters are bound.
    pub body: ExprId,
    /// The annotated result type, if any.
    pub ret_ty: Option<TypeId>,
    /// Function attributes (`Primitive`, `SkipOptimization`, `Compiler`, …).
    pub attrs: Attrs,
}

/// Function attribute marking a fused kernel (set by FuseOps).
pub const ATTR_PRIMITIVE: &str = "Primitive";
/// Function attribute asking function passes to leave the function alone.
pub const ATTR_SKIP_OPTIMIZATION: &str = "SkipOptimization";
/// Function attribute naming the external compiler that owns the function
/// (TVM's BYOC `Compiler`, e.g. `"ccompiler"`).
pub const ATTR_COMPILER: &str = "Compiler";
/// Function attribute marking an external function (TVM's `Extern`).
pub const ATTR_EXTERN: &str = "Extern";
/// Function attribute FuseOps sets on a kernel of reshape-like operators
/// only (TVM's `relay.reshape_only`): the executor runs no kernel for it,
/// its result shares its argument's bytes.
pub const ATTR_RESHAPE_ONLY: &str = "relay.reshape_only";

impl Function {
    fn flag(&self, name: &str) -> bool {
        match self.attrs.get(name) {
            Some(crate::attrs::AttrValue::Int(v)) => *v != 0,
            Some(crate::attrs::AttrValue::Bool(b)) => *b,
            _ => false,
        }
    }

    /// Whether the function is a fused kernel (`Primitive=1`, set by FuseOps).
    pub fn is_primitive(&self) -> bool {
        self.flag(ATTR_PRIMITIVE)
    }

    /// Whether the kernel only reshapes (`relay.reshape_only=1`, set by FuseOps).
    pub fn is_reshape_only(&self) -> bool {
        self.flag(ATTR_RESHAPE_ONLY)
    }

    /// Whether function passes must leave the function alone (`SkipOptimization=1`).
    pub fn skips_optimization(&self) -> bool {
        self.flag(ATTR_SKIP_OPTIMIZATION)
    }

    /// Whether another compiler owns the function (`Compiler="…"` or
    /// `Extern=1`): function passes leave it alone, as TVM's do.
    pub fn is_external(&self) -> bool {
        let named = matches!(self.attrs.get(ATTR_COMPILER), Some(crate::attrs::AttrValue::Str(s)) if !s.is_empty());
        named || self.flag(ATTR_EXTERN)
    }
}

/// The kinds of Relay expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExprKind {
    /// A variable; every use of it is the same node.
    Var(Var),
    /// A reference to a module-level function by name (without `@`).
    GlobalVar(String),
    /// A constant tensor, hash-consed in the store.
    Constant(ConstId),
    /// A call of an operator or a function.
    Call(Call),
    /// A tuple of the fields, in order.
    Tuple(Vec<ExprId>),
    /// Field `index` of a tuple: `tuple.index` in text.
    TupleGetItem {
        /// The tuple.
        tuple: ExprId,
        /// 0-based field index.
        index: usize,
    },
    /// `let var = value; body`. `var` is a `Var` node.
    Let {
        /// The bound `Var` node.
        var: ExprId,
        /// The value bound to `var`.
        value: ExprId,
        /// The expression in which `var` is bound.
        body: ExprId,
    },
    /// `if (cond) { then_branch } else { else_branch }`; both branches have one type.
    If {
        /// A scalar `bool`.
        cond: ExprId,
        /// Evaluated when `cond` is true.
        then_branch: ExprId,
        /// Evaluated when `cond` is false.
        else_branch: ExprId,
    },
    /// A function literal (a global's definition, a fused kernel or a closure).
    Function(Function),
}

impl ExprKind {
    /// The direct children, in evaluation order (binders included).
    pub fn children(&self) -> Vec<ExprId> {
        let mut out = Vec::new();
        self.for_each_child(|c| out.push(c));
        out
    }

    /// Calls `f` on each direct child, in evaluation order.
    pub fn for_each_child(&self, mut f: impl FnMut(ExprId)) {
        match self {
            ExprKind::Var(_) | ExprKind::GlobalVar(_) | ExprKind::Constant(_) => {}
            ExprKind::Call(c) => {
                if let Callee::Expr(e) = c.callee {
                    f(e);
                }
                c.args.iter().copied().for_each(f);
            }
            ExprKind::Tuple(fields) => fields.iter().copied().for_each(f),
            ExprKind::TupleGetItem { tuple, .. } => f(*tuple),
            ExprKind::Let { var, value, body } => {
                f(*var);
                f(*value);
                f(*body);
            }
            ExprKind::If { cond, then_branch, else_branch } => {
                f(*cond);
                f(*then_branch);
                f(*else_branch);
            }
            ExprKind::Function(func) => {
                func.params.iter().copied().for_each(&mut f);
                f(func.body);
            }
        }
    }

    /// The same node with every child replaced by `f(child)`.
    pub fn map_children(&self, mut f: impl FnMut(ExprId) -> ExprId) -> ExprKind {
        match self {
            ExprKind::Var(_) | ExprKind::GlobalVar(_) | ExprKind::Constant(_) => self.clone(),
            ExprKind::Call(c) => ExprKind::Call(Call {
                callee: match c.callee {
                    Callee::Expr(e) => Callee::Expr(f(e)),
                    op => op,
                },
                args: c.args.iter().map(|&a| f(a)).collect(),
                attrs: c.attrs.clone(),
            }),
            ExprKind::Tuple(fields) => ExprKind::Tuple(fields.iter().map(|&a| f(a)).collect()),
            ExprKind::TupleGetItem { tuple, index } => ExprKind::TupleGetItem { tuple: f(*tuple), index: *index },
            ExprKind::Let { var, value, body } => ExprKind::Let { var: f(*var), value: f(*value), body: f(*body) },
            ExprKind::If { cond, then_branch, else_branch } => {
                ExprKind::If { cond: f(*cond), then_branch: f(*then_branch), else_branch: f(*else_branch) }
            }
            ExprKind::Function(func) => ExprKind::Function(Function {
                type_params: func.type_params.clone(),
                params: func.params.iter().map(|&p| f(p)).collect(),
                body: f(func.body),
                ret_ty: func.ret_ty,
                attrs: func.attrs.clone(),
            }),
        }
    }

    /// A short name of the node kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ExprKind::Var(_) => "Var",
            ExprKind::GlobalVar(_) => "GlobalVar",
            ExprKind::Constant(_) => "Constant",
            ExprKind::Call(_) => "Call",
            ExprKind::Tuple(_) => "Tuple",
            ExprKind::TupleGetItem { .. } => "TupleGetItem",
            ExprKind::Let { .. } => "Let",
            ExprKind::If { .. } => "If",
            ExprKind::Function(_) => "Function",
        }
    }
}

/// An expression node: its kind and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Expr {
    /// What the node is.
    pub kind: ExprKind,
    /// Where the node came from.
    pub span: Span,
}

/// The storage of one module's expressions, types and constants.
///
/// Nodes are never removed; rewriting appends new nodes and leaves the old
/// ones unreachable ([`super::IRModule::compact`] drops them). Checked types
/// (filled by type inference) live in a side table.
#[derive(Clone, Debug, Default)]
pub struct Store {
    exprs: Arena<Expr>,
    types: UniqueArena<Type>,
    consts: UniqueArena<Tensor>,
    checked: HandleMap<Expr, TypeId>,
}

impl std::ops::Index<ExprId> for Store {
    type Output = Expr;
    fn index(&self, id: ExprId) -> &Expr {
        &self.exprs[id]
    }
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of expression nodes (reachable or not).
    pub fn len(&self) -> usize {
        self.exprs.len()
    }

    /// Whether the store has no expression node.
    pub fn is_empty(&self) -> bool {
        self.exprs.is_empty()
    }

    /// What node `id` is.
    pub fn kind(&self, id: ExprId) -> &ExprKind {
        &self.exprs[id].kind
    }

    /// Where node `id` came from.
    pub fn span(&self, id: ExprId) -> &Span {
        &self.exprs[id].span
    }

    /// Sets where node `id` came from.
    pub fn set_span(&mut self, id: ExprId, span: Span) {
        self.exprs[id].span = span;
    }

    /// Whether `id` is a handle of this store.
    pub fn contains(&self, id: ExprId) -> bool {
        id.index() < self.exprs.len()
    }

    /// Append a node. Every child must already be in the store, which keeps
    /// handles topologically ordered.
    pub fn add(&mut self, kind: ExprKind, span: Span) -> ExprId {
        let next = self.exprs.len();
        kind.for_each_child(|c| assert!(c.index() < next, "child {c:?} is not in this store (next handle {next})"));
        self.exprs.append(Expr { kind, span })
    }

    // ---- types and constants -------------------------------------------------

    /// Hash-cons a type.
    pub fn intern_type(&mut self, ty: Type) -> TypeId {
        self.types.insert(ty)
    }

    /// The hash-consed type `id`.
    pub fn ty(&self, id: TypeId) -> &Type {
        &self.types[id]
    }

    /// Hash-cons a constant tensor.
    pub fn intern_const(&mut self, t: Tensor) -> ConstId {
        self.consts.insert(t)
    }

    /// The hash-consed constant tensor `id`.
    pub fn constant_data(&self, id: ConstId) -> &Tensor {
        &self.consts[id]
    }

    /// Every distinct constant tensor, in insertion order.
    pub fn constants(&self) -> impl Iterator<Item = (ConstId, &Tensor)> {
        self.consts.iter()
    }

    /// The type inferred for `id`, if type inference has run over it.
    pub fn checked_type(&self, id: ExprId) -> Option<&Type> {
        self.checked.get(id).map(|&t| &self.types[t])
    }

    /// The handle of the type inferred for `id`, if type inference has run over it.
    pub fn checked_type_id(&self, id: ExprId) -> Option<TypeId> {
        self.checked.get(id).copied()
    }

    /// Records `ty` as the checked type of `id` and returns its handle.
    pub fn set_checked_type(&mut self, id: ExprId, ty: Type) -> TypeId {
        let t = self.intern_type(ty);
        self.checked.insert(id, t);
        t
    }

    /// Forget every checked type (after a pass that changed the program).
    pub fn clear_checked_types(&mut self) {
        self.checked = HandleMap::new();
    }

    // ---- builders -------------------------------------------------------------

    /// A fresh variable.
    pub fn var(&mut self, name: impl Into<String>, ty: Option<Type>) -> ExprId {
        let ty = ty.map(|t| self.intern_type(t));
        self.add(ExprKind::Var(Var { name: name.into(), ty }), Span::Unknown)
    }

    /// A reference to the module function named `name` (without `@`).
    pub fn global_var(&mut self, name: impl Into<String>) -> ExprId {
        self.add(ExprKind::GlobalVar(name.into()), Span::Unknown)
    }

    /// A constant node of `t` (hash-consed: equal tensors share a [`ConstId`]).
    pub fn constant(&mut self, t: Tensor) -> ExprId {
        let c = self.intern_const(t);
        self.add(ExprKind::Constant(c), Span::Unknown)
    }

    /// A call of the operator named `op`. The attributes are checked against
    /// the operator's schema and completed with defaults; an unknown operator,
    /// an unknown or mistyped attribute, or a wrong number of arguments is an error.
    pub fn call_op(&mut self, op: &str, args: Vec<ExprId>, attrs: Attrs) -> Result<ExprId> {
        self.call_op_at(op, args, attrs, Span::Unknown)
    }

    /// [`Store::call_op`] with a source location for the node and its errors.
    pub fn call_op_at(&mut self, op: &str, args: Vec<ExprId>, attrs: Attrs, span: Span) -> Result<ExprId> {
        let registry = op_registry();
        let Some(id) = registry.lookup(op) else {
            let hint = registry.suggest(op).map(|s| format!("; did you mean `{s}`?")).unwrap_or_default();
            return Err(Error::invalid(span, format!("unknown operator `{op}`{hint}")));
        };
        let def = registry.get(id);
        if args.len() != def.num_inputs {
            return Err(Error::ty(
                span,
                format!("operator `{op}` takes {} argument(s), found {}", def.num_inputs, args.len()),
            ));
        }
        let attrs = Attrs::normalize(&attrs, &def.attrs, op).map_err(|m| Error::ty(span.clone(), m))?;
        Ok(self.add(ExprKind::Call(Call { callee: Callee::Op(id), args, attrs }), span))
    }

    /// A call of a function-typed expression.
    pub fn call(&mut self, callee: ExprId, args: Vec<ExprId>) -> ExprId {
        self.add(ExprKind::Call(Call { callee: Callee::Expr(callee), args, attrs: Attrs::new() }), Span::Unknown)
    }

    /// A tuple of `fields`.
    pub fn tuple(&mut self, fields: Vec<ExprId>) -> ExprId {
        self.add(ExprKind::Tuple(fields), Span::Unknown)
    }

    /// Field `index` of `tuple`.
    pub fn tuple_get_item(&mut self, tuple: ExprId, index: usize) -> ExprId {
        self.add(ExprKind::TupleGetItem { tuple, index }, Span::Unknown)
    }

    /// `let var = value; body`; `var` must be a `Var` node.
    pub fn let_(&mut self, var: ExprId, value: ExprId, body: ExprId) -> ExprId {
        self.add(ExprKind::Let { var, value, body }, Span::Unknown)
    }

    /// `if (cond) { then_branch } else { else_branch }`.
    pub fn if_(&mut self, cond: ExprId, then_branch: ExprId, else_branch: ExprId) -> ExprId {
        self.add(ExprKind::If { cond, then_branch, else_branch }, Span::Unknown)
    }

    /// A function literal over the `Var` nodes `params`.
    pub fn function(&mut self, params: Vec<ExprId>, body: ExprId, ret_ty: Option<Type>, attrs: Attrs) -> ExprId {
        let ret_ty = ret_ty.map(|t| self.intern_type(t));
        self.add(ExprKind::Function(Function { type_params: vec![], params, body, ret_ty, attrs }), Span::Unknown)
    }

    // ---- accessors ------------------------------------------------------------

    /// The variable, if `id` is a `Var`.
    pub fn as_var(&self, id: ExprId) -> Option<&Var> {
        match self.kind(id) {
            ExprKind::Var(v) => Some(v),
            _ => None,
        }
    }

    /// The function, if `id` is a function literal.
    pub fn as_function(&self, id: ExprId) -> Option<&Function> {
        match self.kind(id) {
            ExprKind::Function(f) => Some(f),
            _ => None,
        }
    }

    /// The call, if `id` is a call.
    pub fn as_call(&self, id: ExprId) -> Option<&Call> {
        match self.kind(id) {
            ExprKind::Call(c) => Some(c),
            _ => None,
        }
    }

    /// The operator's name if `id` calls one.
    pub fn op_name(&self, id: ExprId) -> Option<&'static str> {
        match self.as_call(id)?.callee {
            Callee::Op(op) => Some(op_registry().get(op).name),
            Callee::Expr(_) => None,
        }
    }
}
