//! Well-formedness of a TIR kernel: what every TIR pass must preserve, checked
//! after each one in debug builds (and by tests): every variable used is
//! bound by an enclosing loop or `let` (a TE reduction binds its own axes),
//! every buffer accessed is a parameter or allocated by an enclosing
//! `Allocate`, and an access has one index per dimension or one flat index.

use super::expr::{Buffer, Expr, Var};
use super::stmt::{PrimFunc, Stmt};

/// Why a kernel is not well-formed TIR.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}` is ill-formed TIR: {message}")]
pub struct IllFormed {
    /// The kernel's name.
    pub kernel: String,
    /// What is wrong, naming the variable or buffer.
    pub message: String,
}

/// Check `f` (see the module docs).
pub fn verify_prim_func(f: &PrimFunc) -> Result<(), IllFormed> {
    let mut scope = Scope { vars: Vec::new(), buffers: f.params.iter().map(Buffer::id).collect() };
    scope.stmt(&f.body).map_err(|message| IllFormed { kernel: f.name.clone(), message })
}

/// What is bound where the walk stands: loop/let variables and buffers, innermost last.
struct Scope {
    vars: Vec<Var>,
    buffers: Vec<u32>,
}

impl Scope {
    fn stmt(&mut self, s: &Stmt) -> Result<(), String> {
        match s {
            Stmt::For(l) => {
                self.expr(&l.min)?;
                self.expr(&l.extent)?;
                self.vars.push(l.var.clone());
                let r = self.stmt(&l.body);
                self.vars.pop();
                r
            }
            Stmt::Store { buffer, indices, value } => {
                self.access(buffer, indices, "stores to")?;
                self.expr(value)
            }
            Stmt::Allocate { buffer, body } => {
                self.buffers.push(buffer.id());
                let r = self.stmt(body);
                self.buffers.pop();
                r
            }
            Stmt::If { cond, then_case, else_case } => {
                self.expr(cond)?;
                self.stmt(then_case)?;
                else_case.as_ref().map_or(Ok(()), |e| self.stmt(e))
            }
            Stmt::Seq(v) => v.iter().try_for_each(|s| self.stmt(s)),
            Stmt::Let { var, value, body } => {
                self.expr(value)?;
                self.vars.push(var.clone());
                let r = self.stmt(body);
                self.vars.pop();
                r
            }
            Stmt::Evaluate(e) => self.expr(e),
        }
    }

    fn access(&mut self, buffer: &Buffer, indices: &[Expr], what: &str) -> Result<(), String> {
        if !self.buffers.contains(&buffer.id()) {
            return Err(format!(
                "it {what} buffer `{}`, which is neither a parameter nor allocated around the access",
                buffer.name()
            ));
        }
        let rank = buffer.shape().len();
        if indices.len() != rank && indices.len() != 1 {
            return Err(format!(
                "an access to `{}` (rank {rank}) has {} indices; expected {rank}, or 1 once flattened",
                buffer.name(),
                indices.len()
            ));
        }
        indices.iter().try_for_each(|i| self.expr(i))
    }

    fn expr(&mut self, e: &Expr) -> Result<(), String> {
        match e {
            Expr::Var(v) if !self.vars.contains(v) => {
                Err(format!("variable `{}` is used outside the loop or `let` that binds it", v.name))
            }
            Expr::Load(buffer, indices) => self.access(buffer, indices, "reads"),
            Expr::Reduce(r) => {
                let bound = self.vars.len();
                self.vars.extend(r.axes.iter().map(|(v, _)| v.clone()));
                let result = self.expr(&r.source);
                self.vars.truncate(bound);
                result
            }
            _ => {
                let mut result = Ok(());
                e.for_each_child(|c| {
                    if result.is_ok() {
                        result = self.expr(c);
                    }
                });
                result
            }
        }
    }
}
