//! The reference interpreter: runs any well-typed module on host tensors.
//!
//! It is the oracle compiled kernels are checked against and the evaluator
//! FoldConstant uses, so it favours obviousness: operators run their
//! reference implementations (plain loops in `f64`). Within one function
//! activation each node is evaluated at most once (memoized by handle); an
//! `if` evaluates only the branch it takes. Expression depth costs no native
//! stack (an explicit work stack); only function calls nest, up to
//! [`MAX_CALL_DEPTH`].

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};

use super::expr::{Callee, ExprId, ExprKind};
use super::module::IRModule;
use super::op::op_registry;
use super::ty::Type;
use super::value::{Closure, Value};

/// The deepest nesting of function calls the interpreter allows.
pub const MAX_CALL_DEPTH: usize = 256;

enum Work {
    Enter(ExprId),
    /// A `let`'s value is ready: bind its variable, then evaluate the body.
    LetBind(ExprId),
    /// An `if`'s condition is ready: evaluate the branch it selects.
    IfSelect(ExprId),
    /// Every child is ready: compute the node.
    Exit(ExprId),
}

struct Activation<'m> {
    m: &'m IRModule,
    env: FxHashMap<ExprId, Value>,
    memo: FxHashMap<ExprId, Value>,
    taken: FxHashMap<ExprId, ExprId>,
    depth: usize,
}

impl Activation<'_> {
    fn err(&self, id: ExprId, msg: impl Into<String>) -> Error {
        Error::eval(self.m.store.span(id).clone(), msg)
    }

    fn value(&self, id: ExprId) -> Result<Value> {
        self.memo.get(&id).cloned().ok_or_else(|| self.err(id, "internal: a sub-expression was not evaluated"))
    }

    fn run(&mut self, root: ExprId) -> Result<Value> {
        let store = &self.m.store;
        let mut work = vec![Work::Enter(root)];
        while let Some(w) = work.pop() {
            match w {
                Work::Enter(id) => {
                    if self.memo.contains_key(&id) {
                        continue;
                    }
                    match store.kind(id) {
                        ExprKind::Var(v) => {
                            let val = self
                                .env
                                .get(&id)
                                .cloned()
                                .ok_or_else(|| self.err(id, format!("unbound variable `%{}`", v.name)))?;
                            self.memo.insert(id, val);
                        }
                        ExprKind::Constant(c) => {
                            self.memo.insert(id, Value::Tensor(store.constant_data(*c).clone()));
                        }
                        ExprKind::GlobalVar(name) => {
                            let f = self
                                .m
                                .function(name)
                                .ok_or_else(|| self.err(id, format!("unknown global function `@{name}`")))?;
                            self.memo.insert(
                                id,
                                Value::Closure(Closure { function: f, captured: Vec::new(), recursive: None }),
                            );
                        }
                        ExprKind::Function(_) => {
                            let captured = self.env.iter().map(|(k, v)| (*k, v.clone())).collect();
                            self.memo.insert(id, Value::Closure(Closure { function: id, captured, recursive: None }));
                        }
                        ExprKind::Let { value, .. } => {
                            work.push(Work::LetBind(id));
                            work.push(Work::Enter(*value));
                        }
                        ExprKind::If { cond, .. } => {
                            work.push(Work::IfSelect(id));
                            work.push(Work::Enter(*cond));
                        }
                        kind => {
                            work.push(Work::Exit(id));
                            for c in kind.children().into_iter().rev() {
                                work.push(Work::Enter(c));
                            }
                        }
                    }
                }
                Work::LetBind(id) => {
                    let ExprKind::Let { var, value, body } = *store.kind(id) else { continue };
                    let mut v = self.value(value)?;
                    if let Value::Closure(c) = &mut v {
                        if c.function == value {
                            c.recursive = Some(var);
                        }
                    }
                    self.env.insert(var, v.clone());
                    self.memo.insert(var, v);
                    work.push(Work::Exit(id));
                    work.push(Work::Enter(body));
                }
                Work::IfSelect(id) => {
                    let ExprKind::If { cond, then_branch, else_branch } = *store.kind(id) else { continue };
                    let c = self.value(cond)?;
                    let t = c.tensor().map_err(|m| self.err(cond, m))?;
                    if t.numel() != 1 {
                        return Err(self.err(cond, "an `if` condition must be a scalar"));
                    }
                    let branch = if t.get_f64(0) != 0.0 { then_branch } else { else_branch };
                    self.taken.insert(id, branch);
                    work.push(Work::Exit(id));
                    work.push(Work::Enter(branch));
                }
                Work::Exit(id) => {
                    let v = self.exit(id)?;
                    self.memo.insert(id, v);
                }
            }
        }
        self.value(root)
    }

    /// Compute a node whose children are evaluated.
    fn exit(&mut self, id: ExprId) -> Result<Value> {
        let store = &self.m.store;
        match store.kind(id) {
            ExprKind::Call(call) => {
                let args: Vec<Value> = call.args.iter().map(|&a| self.value(a)).collect::<Result<_>>()?;
                match call.callee {
                    Callee::Op(op) => {
                        let def = op_registry().get(op);
                        (def.eval)(&args, &call.attrs).map_err(|m| self.err(id, format!("{}: {m}", def.name)))
                    }
                    Callee::Expr(f) => match self.value(f)? {
                        Value::Closure(c) => call_closure(self.m, &c, args, self.depth + 1).map_err(|e| match e {
                            Error::Eval { span, message } if !span.is_known() => self.err(id, message),
                            other => other,
                        }),
                        _ => Err(self.err(id, "calling a value that is not a function")),
                    },
                }
            }
            ExprKind::Tuple(fields) => Ok(Value::Tuple(fields.iter().map(|&f| self.value(f)).collect::<Result<_>>()?)),
            ExprKind::TupleGetItem { tuple, index } => match self.value(*tuple)? {
                Value::Tuple(mut fields) if *index < fields.len() => Ok(fields.swap_remove(*index)),
                Value::Tuple(fields) => {
                    Err(self.err(id, format!("index {index} out of range for a tuple of {}", fields.len())))
                }
                _ => Err(self.err(id, "projecting a field of a value that is not a tuple")),
            },
            ExprKind::Let { body, .. } => self.value(*body),
            ExprKind::If { .. } => {
                let branch = *self.taken.get(&id).ok_or_else(|| self.err(id, "internal: no branch taken"))?;
                self.value(branch)
            }
            other => Err(self.err(id, format!("internal: unexpected {} at exit", other.kind_name()))),
        }
    }
}

fn call_closure(m: &IRModule, c: &Closure, args: Vec<Value>, depth: usize) -> Result<Value> {
    let store = &m.store;
    let span = store.span(c.function).clone();
    if depth > MAX_CALL_DEPTH {
        return Err(Error::eval(span, format!("function calls nest deeper than {MAX_CALL_DEPTH}")));
    }
    let f = store
        .as_function(c.function)
        .ok_or_else(|| Error::eval(span.clone(), "calling a value that is not a function"))?;
    if f.params.len() != args.len() {
        return Err(Error::eval(
            span,
            format!("the function takes {} argument(s), {} given", f.params.len(), args.len()),
        ));
    }
    let mut env: FxHashMap<ExprId, Value> = c.captured.iter().cloned().collect();
    if let Some(var) = c.recursive {
        env.insert(var, Value::Closure(c.clone()));
    }
    for (&p, a) in f.params.iter().zip(args) {
        env.insert(p, a);
    }
    let mut act = Activation { m, env, memo: FxHashMap::default(), taken: FxHashMap::default(), depth };
    act.run(f.body)
}

/// Whether `v` fits the annotated type `t`.
fn check_arg(v: &Value, t: &Type) -> std::result::Result<(), String> {
    match (v, t) {
        (Value::Tensor(x), Type::Tensor(tt)) if x.shape() == tt.shape.as_slice() && x.dtype() == tt.dtype => Ok(()),
        (Value::Tensor(x), Type::Tensor(tt)) => {
            Err(format!("expected {tt}, got a tensor of shape {:?} and dtype {}", x.shape(), x.dtype()))
        }
        (Value::Tuple(fs), Type::Tuple(ts)) if fs.len() == ts.len() => {
            fs.iter().zip(ts).try_for_each(|(f, t)| check_arg(f, t))
        }
        (Value::Closure(_), Type::Func(_)) => Ok(()),
        (_, t) => Err(format!("expected a value of type {t}")),
    }
}

/// Run global function `name` of `m` on `args` (checked against the parameters' annotations).
pub fn eval_function(m: &IRModule, name: &str, args: &[Value]) -> Result<Value> {
    let f = m
        .function(name)
        .ok_or_else(|| Error::eval(crate::span::Span::Unknown, format!("no global function `@{name}`")))?;
    let func = m.store.as_function(f).ok_or_else(|| Error::eval(m.store.span(f).clone(), "not a function"))?;
    if func.params.len() != args.len() {
        return Err(Error::eval(
            m.store.span(f).clone(),
            format!("`@{name}` takes {} argument(s), {} given", func.params.len(), args.len()),
        ));
    }
    for (&p, a) in func.params.iter().zip(args) {
        if let Some(v) = m.store.as_var(p) {
            if let Some(t) = v.ty {
                check_arg(a, m.store.ty(t))
                    .map_err(|e| Error::eval(m.store.span(p).clone(), format!("argument `%{}`: {e}", v.name)))?;
            }
        }
    }
    call_closure(m, &Closure { function: f, captured: Vec::new(), recursive: None }, args.to_vec(), 0)
}

/// Evaluate `root` with the variables in `env` bound.
pub fn eval_expr(m: &IRModule, root: ExprId, env: &[(ExprId, Value)]) -> Result<Value> {
    let mut act = Activation {
        m,
        env: env.iter().cloned().collect(),
        memo: FxHashMap::default(),
        taken: FxHashMap::default(),
        depth: 0,
    };
    act.run(root)
}
