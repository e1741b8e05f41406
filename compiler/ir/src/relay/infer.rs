//! Type inference: the checked type of every expression of a module.
//!
//! Types flow bottom-up: an operator call's type is its type relation applied
//! to its arguments' types; a `let`-bound variable without annotation takes
//! its value's type, and an unannotated parameter of a function called in the
//! same body (directly, or through the `let` variable bound to it) takes its
//! argument's type at the first such call (TVM's `let %id = fn (%x) { %x };
//! %id(1)`). Otherwise an unannotated parameter passed to an operator that
//! can tell its type from the call's other arguments and attributes
//! (`OpDef::infer_inputs`: a convolution's or dense layer's weight, a bias,
//! batch-norm vectors) takes that type — the cases TVM's unification through
//! type relations solves in its tests; any other needs an annotation.
//!
//! The walk uses an explicit stack (a `let` variable may have a smaller
//! handle than its value, so plain handle order is not enough), so
//! a 10 000-deep chain costs no native stack. Errors name the operator, the
//! argument types and the location.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Error, Result};

use super::expr::{Callee, ExprId, ExprKind, Store};
use super::module::IRModule;
use super::op::op_registry;
use super::ty::{FuncType, Type};

/// The types of module-level functions, for `@name` references.
struct Globals {
    functions: FxHashMap<String, ExprId>,
    /// Functions whose inference is under way (recursion needs annotations).
    in_progress: FxHashSet<String>,
}

/// The function type a fully annotated function declares, if it does.
fn declared_type(store: &Store, func: ExprId) -> Option<Type> {
    let f = store.as_function(func)?;
    let params =
        f.params.iter().map(|&p| store.as_var(p)?.ty.map(|t| store.ty(t).clone())).collect::<Option<Vec<_>>>()?;
    let ret = store.ty(f.ret_ty?).clone();
    Some(Type::Func(FuncType { type_params: f.type_params.clone(), params, ret: Box::new(ret) }))
}

/// Type parameters being solved at one call: each bound, or not yet.
type Solution = FxHashMap<String, Option<Type>>;

/// `t` with its solved type parameters replaced by their solutions. A
/// polymorphic function type inside `t` binds its own parameters: a name it
/// declares is not replaced in it.
fn substitute(t: &Type, solved: &Solution) -> Type {
    match t {
        Type::Var(n) => match solved.get(n) {
            Some(Some(s)) => substitute(s, solved),
            _ => t.clone(),
        },
        Type::Tensor(_) => t.clone(),
        Type::Tuple(fields) => Type::Tuple(fields.iter().map(|f| substitute(f, solved)).collect()),
        Type::Func(f) => {
            let shadowed;
            let inner = if f.type_params.iter().any(|n| solved.contains_key(n)) {
                shadowed = solved
                    .iter()
                    .filter(|(n, _)| !f.type_params.contains(n))
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect();
                &shadowed
            } else {
                solved
            };
            Type::Func(FuncType {
                type_params: f.type_params.clone(),
                params: f.params.iter().map(|p| substitute(p, inner)).collect(),
                ret: Box::new(substitute(&f.ret, inner)),
            })
        }
    }
}

/// Whether a type parameter named so that `pred` holds occurs in `t`.
fn any_var(t: &Type, pred: &dyn Fn(&str) -> bool) -> bool {
    match t {
        Type::Var(n) => pred(n),
        Type::Tensor(_) => false,
        Type::Tuple(fields) => fields.iter().any(|f| any_var(f, pred)),
        Type::Func(f) => f.params.iter().chain([&*f.ret]).any(|p| any_var(p, pred)),
    }
}

/// The monomorphic body of function type `f`, its type parameters renamed to
/// fresh names (`A'3`, which no program can write) that `solved` may bind.
fn instantiate(f: &FuncType, solved: &mut Solution) -> (Vec<Type>, Type) {
    let renamed: Solution = f
        .type_params
        .iter()
        .map(|n| {
            let fresh = format!("{n}'{}", solved.len());
            solved.insert(fresh.clone(), None);
            (n.clone(), Some(Type::Var(fresh)))
        })
        .collect();
    (f.params.iter().map(|p| substitute(p, &renamed)).collect(), substitute(&f.ret, &renamed))
}

/// Whether type parameter `name` occurs in `t` (binding it there would make an infinite type).
fn occurs(name: &str, t: &Type, solved: &Solution) -> bool {
    any_var(&substitute(t, solved), &|n| n == name)
}

/// Unify `a` and `b`, binding the unsolved type parameters of `solved` (a
/// polymorphic function's, at a call): TVM's unification of a call's
/// argument types with the callee's instantiated parameter types. Any other
/// type parameter (one of an enclosing function) is equal only to itself.
fn unify(a: &Type, b: &Type, solved: &mut Solution) -> bool {
    let (a, b) = (substitute(a, solved), substitute(b, solved));
    match (&a, &b) {
        (Type::Var(x), Type::Var(y)) if x == y => true,
        (Type::Var(x), t) | (t, Type::Var(x)) if matches!(solved.get(x), Some(None)) => {
            if occurs(x, t, solved) {
                return false;
            }
            solved.insert(x.clone(), Some(t.clone()));
            true
        }
        (Type::Tuple(x), Type::Tuple(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| unify(x, y, solved)),
        (Type::Func(x), Type::Func(y)) => {
            let ((xp, xr), (yp, yr)) = (instantiate(x, solved), instantiate(y, solved));
            xp.len() == yp.len() && xp.iter().zip(&yp).all(|(x, y)| unify(x, y, solved)) && unify(&xr, &yr, solved)
        }
        _ => a == b,
    }
}

/// The result type of a call of a function of type `ft` with arguments of
/// types `args`, the callee's type parameters solved from the arguments.
fn call_result(ft: &FuncType, args: &[Type]) -> std::result::Result<Type, String> {
    if ft.params.len() != args.len() {
        return Err(format!("the function takes {} argument(s), {} given", ft.params.len(), args.len()));
    }
    let mut solved = Solution::default();
    let (params, ret) = instantiate(ft, &mut solved);
    for (k, (p, a)) in params.iter().zip(args).enumerate() {
        if !unify(p, a, &mut solved) {
            let here = substitute(p, &solved);
            let solved_here = if here != ft.params[k] && !has_instance(&here) {
                format!(" ({here} at this call)")
            } else {
                String::new()
            };
            return Err(format!("argument {k} has type {a}, the function expects {}{solved_here}", ft.params[k]));
        }
    }
    let ret = substitute(&ret, &solved);
    match ft.type_params.iter().find(|n| has_instance_of(n, &ret)) {
        Some(n) => Err(format!(
            "the arguments do not determine the function's type parameter `{n}` in its result {}",
            without_instances(&ret)
        )),
        None => Ok(ret),
    }
}

/// `t` with each unsolved instance `A'k` written as its parameter `A` again (for messages).
fn without_instances(t: &Type) -> Type {
    match t {
        Type::Var(n) => Type::Var(n.split('\'').next().unwrap_or(n).to_string()),
        Type::Tensor(_) => t.clone(),
        Type::Tuple(fields) => Type::Tuple(fields.iter().map(without_instances).collect()),
        Type::Func(f) => Type::Func(FuncType {
            type_params: f.type_params.clone(),
            params: f.params.iter().map(without_instances).collect(),
            ret: Box::new(without_instances(&f.ret)),
        }),
    }
}

/// Whether `t` still holds an unsolved instance (`A'k`) of a type parameter.
fn has_instance(t: &Type) -> bool {
    any_var(t, &|n| n.contains('\''))
}

/// Whether `t` still holds an unsolved instance (`A'k`) of type parameter `name`.
fn has_instance_of(name: &str, t: &Type) -> bool {
    any_var(t, &|n| n.split_once('\'').is_some_and(|(base, _)| base == name))
}

/// The function node a callee evaluates to, where the body says so: a
/// function, a `let` variable bound to one, or a call of a function whose
/// body returns a function (`%curried(1)(2)`). `fuel` bounds the steps (a
/// hostile chain of calls must not recurse without limit).
fn called_function(store: &Store, let_value: &FxHashMap<ExprId, ExprId>, callee: ExprId) -> Option<ExprId> {
    fn walk(store: &Store, let_value: &FxHashMap<ExprId, ExprId>, mut e: ExprId, fuel: &mut u32) -> Option<ExprId> {
        loop {
            *fuel = fuel.checked_sub(1)?;
            e = match store.kind(e) {
                ExprKind::Function(_) => return Some(e),
                ExprKind::Var(_) => *let_value.get(&e)?,
                ExprKind::Let { body, .. } => *body,
                ExprKind::Call(c) => match c.callee {
                    Callee::Expr(inner) => store.as_function(walk(store, let_value, inner, fuel)?)?.body,
                    Callee::Op(_) => return None,
                },
                _ => return None,
            };
        }
    }
    walk(store, let_value, callee, &mut 64)
}

fn describe(types: &[Type]) -> String {
    types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

/// Infer the type of `root` and of everything below it, recording each in the store.
fn infer_root(store: &mut Store, root: ExprId, globals: &mut Globals) -> Result<Type> {
    // Which `let` binds each variable (for unannotated let variables).
    let mut let_value: FxHashMap<ExprId, ExprId> = FxHashMap::default();
    for id in super::visit::post_order(store, &[root]) {
        if let ExprKind::Let { var, value, .. } = *store.kind(id) {
            let_value.insert(var, value);
        }
    }
    // An unannotated parameter of a function that is called takes the type
    // of its argument at the first call (kiln's functions are monomorphic;
    // a call with other types is then a type error at that call).
    let mut param_arg: FxHashMap<ExprId, ExprId> = FxHashMap::default();
    for id in super::visit::post_order(store, &[root]) {
        let ExprKind::Call(call) = store.kind(id) else { continue };
        let Callee::Expr(callee) = call.callee else { continue };
        let Some(f) = called_function(store, &let_value, callee).and_then(|f| store.as_function(f)) else {
            continue;
        };
        for (&p, &a) in f.params.iter().zip(&call.args) {
            match (store.as_var(p).map(|v| v.ty), store.as_var(a).map(|v| v.ty)) {
                (Some(None), _) => {
                    param_arg.entry(p).or_insert(a);
                }
                // The other way round: an untyped variable passed for an
                // annotated parameter (a weight passed to a fused kernel).
                (Some(Some(_)), Some(None)) if !let_value.contains_key(&a) => {
                    param_arg.entry(a).or_insert(p);
                }
                _ => {}
            }
        }
    }
    // An unannotated parameter neither bound nor called with an argument
    // takes the type its first operator use determines from that call's other
    // arguments and attributes (`nn.conv2d(%x, %w, channels=16,
    // kernel_size=[3, 3])` types `%w`), where the operator can tell.
    let mut op_use: FxHashMap<ExprId, (ExprId, usize)> = FxHashMap::default();
    for id in super::visit::post_order(store, &[root]) {
        let ExprKind::Call(call) = store.kind(id) else { continue };
        let Callee::Op(op) = call.callee else { continue };
        if op_registry().get(op).infer_inputs.is_none() {
            continue;
        }
        for (i, &a) in call.args.iter().enumerate() {
            let untyped = store.as_var(a).is_some_and(|v| v.ty.is_none());
            if untyped && !let_value.contains_key(&a) && !param_arg.contains_key(&a) {
                op_use.entry(a).or_insert((id, i));
            }
        }
    }
    // The arguments of `call` whose types come from that call itself.
    let solved_by = |call: ExprId, arg: ExprId| op_use.get(&arg).is_some_and(|&(c, _)| c == call);
    let mut done: FxHashMap<ExprId, Type> = FxHashMap::default();
    let mut on_stack: FxHashSet<ExprId> = FxHashSet::default();
    let mut stack = vec![root];
    while let Some(&id) = stack.last() {
        if done.contains_key(&id) {
            stack.pop();
            continue;
        }
        // What this node needs typed first.
        let kind = store.kind(id).clone();
        // A `let`-bound function with a declared type is typed by it, so that
        // its body may call it (recursion).
        let declared = let_value.get(&id).and_then(|&f| declared_type(store, f));
        let deps: Vec<ExprId> = match &kind {
            ExprKind::Var(v) if v.ty.is_none() && declared.is_some() => vec![],
            ExprKind::Var(v) if v.ty.is_none() && op_use.contains_key(&id) => {
                let call = op_use[&id].0;
                store.kind(call).children().into_iter().filter(|&a| !solved_by(call, a)).collect()
            }
            ExprKind::Var(v) if v.ty.is_none() => {
                let_value.get(&id).or(param_arg.get(&id)).copied().into_iter().collect()
            }
            ExprKind::Let { var, value, body } => vec![*value, *var, *body],
            ExprKind::Function(f) => f.params.iter().copied().chain([f.body]).collect(),
            other => other.children(),
        };
        let pending: Vec<ExprId> = deps.into_iter().filter(|d| !done.contains_key(d)).collect();
        if !pending.is_empty() {
            if !on_stack.insert(id) {
                return Err(Error::ty(
                    store.span(id).clone(),
                    "an expression depends on itself (a `let` variable used in its own value?)",
                ));
            }
            stack.extend(pending.into_iter().rev());
            continue;
        }
        let span = store.span(id).clone();
        let ty_of = |e: ExprId, done: &FxHashMap<ExprId, Type>| done.get(&e).cloned().unwrap_or(Type::Tuple(vec![]));
        let ty = match &kind {
            ExprKind::Var(v) => match (v.ty, let_value.get(&id).or(param_arg.get(&id))) {
                (Some(t), _) => store.ty(t).clone(),
                (None, _) if declared.is_some() => declared.unwrap_or(Type::Tuple(vec![])),
                (None, None) if op_use.contains_key(&id) => {
                    let (call, index) = op_use[&id];
                    let ExprKind::Call(c) = store.kind(call) else { unreachable!("op_use records calls") };
                    let Callee::Op(op) = c.callee else { unreachable!("op_use records operator calls") };
                    let def = op_registry().get(op);
                    let known: Vec<Option<Type>> =
                        c.args.iter().map(|&a| (!solved_by(call, a)).then(|| ty_of(a, &done))).collect();
                    let solved = def.infer_inputs.map(|f| f(&known, &c.attrs)).unwrap_or_default();
                    match solved.get(index).cloned().flatten() {
                        Some(t) => t,
                        None => {
                            return Err(Error::ty(
                                span,
                                format!(
                                    "variable `%{}` has no type annotation, and {} cannot tell its `{}` from the \
                                     other arguments and attributes (annotate it)",
                                    v.name,
                                    def.name,
                                    def.inputs.get(index).copied().unwrap_or("argument")
                                ),
                            ))
                        }
                    }
                }
                (None, Some(value)) => ty_of(*value, &done),
                (None, None) => {
                    return Err(Error::ty(
                        span,
                        format!(
                            "variable `%{}` has no type annotation, is not bound by a `let`, and is not a \
                             parameter of a function called here (annotate it)",
                            v.name
                        ),
                    ))
                }
            },
            ExprKind::GlobalVar(name) => {
                let Some(&func) = globals.functions.get(name) else {
                    return Err(Error::ty(span, format!("unknown global function `@{name}`")));
                };
                if let Some(t) = store.checked_type(func) {
                    t.clone()
                } else if let Some(t) = declared_type(store, func) {
                    t
                } else if globals.in_progress.contains(name) {
                    return Err(Error::ty(
                        span,
                        format!("recursive call of `@{name}`: annotate its parameters and return type"),
                    ));
                } else {
                    globals.in_progress.insert(name.clone());
                    let t = infer_root(store, func, globals)?;
                    globals.in_progress.remove(name);
                    t
                }
            }
            ExprKind::Constant(c) => {
                let t = store.constant_data(*c);
                Type::tensor(t.shape().to_vec(), t.dtype())
            }
            ExprKind::Call(call) => {
                let args: Vec<Type> = call.args.iter().map(|a| ty_of(*a, &done)).collect();
                match call.callee {
                    Callee::Op(op) => {
                        let def = op_registry().get(op);
                        (def.type_rel)(&args, &call.attrs).map_err(|m| {
                            Error::ty(span.clone(), format!("{}: {m}; argument types: ({})", def.name, describe(&args)))
                        })?
                    }
                    Callee::Expr(f) => match ty_of(f, &done) {
                        Type::Func(ft) => call_result(&ft, &args).map_err(|m| Error::ty(span.clone(), m))?,
                        other => {
                            return Err(Error::ty(
                                span,
                                format!("calling a value of type {other}, which is not a function"),
                            ))
                        }
                    },
                }
            }
            ExprKind::Tuple(fields) => Type::Tuple(fields.iter().map(|f| ty_of(*f, &done)).collect()),
            ExprKind::TupleGetItem { tuple, index } => match ty_of(*tuple, &done) {
                Type::Tuple(fields) => fields.get(*index).cloned().ok_or_else(|| {
                    Error::ty(
                        span.clone(),
                        format!("index {index} is out of range for a tuple of {} fields", fields.len()),
                    )
                })?,
                other => {
                    return Err(Error::ty(span, format!("`.{index}` of a value of type {other}, which is not a tuple")))
                }
            },
            ExprKind::Let { var, value, body } => {
                let (vt, xt) = (ty_of(*var, &done), ty_of(*value, &done));
                if vt != xt {
                    return Err(Error::ty(
                        span,
                        format!("`let` variable annotated {vt} is bound to a value of type {xt}"),
                    ));
                }
                ty_of(*body, &done)
            }
            ExprKind::If { cond, then_branch, else_branch } => {
                let ct = ty_of(*cond, &done);
                if ct != Type::tensor([], crate::dtype::DataType::Bool) {
                    return Err(Error::ty(span, format!("an `if` condition must be a scalar bool, found {ct}")));
                }
                let (a, b) = (ty_of(*then_branch, &done), ty_of(*else_branch, &done));
                if a != b {
                    return Err(Error::ty(span, format!("the branches of an `if` have different types: {a} and {b}")));
                }
                a
            }
            ExprKind::Function(f) => {
                let params: Vec<Type> = f.params.iter().map(|p| ty_of(*p, &done)).collect();
                let ret = ty_of(f.body, &done);
                if let Some(r) = f.ret_ty {
                    if store.ty(r) != &ret {
                        return Err(Error::ty(
                            span,
                            format!("the function is annotated to return {}, but its body has type {ret}", store.ty(r)),
                        ));
                    }
                }
                Type::Func(FuncType { type_params: f.type_params.clone(), params, ret: Box::new(ret) })
            }
        };
        crate::relay::ty::check_size(&ty).map_err(|m| Error::ty(span, m))?;
        store.set_checked_type(id, ty.clone());
        done.insert(id, ty);
        on_stack.remove(&id);
        stack.pop();
    }
    done.remove(&root).ok_or_else(|| Error::ty(store.span(root).clone(), "type inference did not reach the root"))
}

/// Infer and record the checked type of every expression of every function of `m`.
pub fn infer_module(m: &mut IRModule) -> Result<()> {
    let funcs: Vec<(String, ExprId)> = m.functions().map(|(n, f)| (n.to_string(), f)).collect();
    let mut globals = Globals { functions: funcs.iter().cloned().collect(), in_progress: FxHashSet::default() };
    m.store.clear_checked_types();
    for (name, f) in funcs {
        if m.store.checked_type(f).is_some() {
            continue;
        }
        globals.in_progress.insert(name.clone());
        infer_root(&mut m.store, f, &mut globals)?;
        globals.in_progress.remove(&name);
    }
    Ok(())
}

/// Infer the type of a closed expression (no `@global` references) in `store`.
pub fn infer_expr(store: &mut Store, root: ExprId) -> Result<Type> {
    let mut globals = Globals { functions: FxHashMap::default(), in_progress: FxHashSet::default() };
    infer_root(store, root, &mut globals)
}
