//! TIR statements and primitive functions.

use std::collections::BTreeMap;

use super::expr::{Buffer, Expr, Var};

/// How a loop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForKind {
    Serial,
    /// Iterations spread over threads (task-sliced by the CPU codegen).
    Parallel,
    /// Iterations become vector lanes.
    Vectorized,
    /// Fully unrolled.
    Unrolled,
    /// Bound to a GPU thread or block index.
    ThreadBinding(ThreadAxis),
}

/// A GPU launch dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ThreadAxis {
    BlockX,
    BlockY,
    BlockZ,
    ThreadX,
    ThreadY,
    ThreadZ,
}

impl ThreadAxis {
    pub fn name(self) -> &'static str {
        match self {
            ThreadAxis::BlockX => "blockIdx.x",
            ThreadAxis::BlockY => "blockIdx.y",
            ThreadAxis::BlockZ => "blockIdx.z",
            ThreadAxis::ThreadX => "threadIdx.x",
            ThreadAxis::ThreadY => "threadIdx.y",
            ThreadAxis::ThreadZ => "threadIdx.z",
        }
    }
}

/// A loop `for var in min..min+extent`.
#[derive(Clone, Debug, PartialEq)]
pub struct For {
    pub var: Var,
    pub min: Expr,
    pub extent: Expr,
    pub kind: ForKind,
    pub body: Stmt,
}

/// A TIR statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    For(Box<For>),
    /// `buffer[indices] = value`.
    Store {
        buffer: Buffer,
        indices: Vec<Expr>,
        value: Expr,
    },
    /// A temporary buffer live for `body`.
    Allocate {
        buffer: Buffer,
        body: Box<Stmt>,
    },
    If {
        cond: Expr,
        then_case: Box<Stmt>,
        else_case: Option<Box<Stmt>>,
    },
    Seq(Vec<Stmt>),
    Let {
        var: Var,
        value: Expr,
        body: Box<Stmt>,
    },
    /// Evaluate for side effects (e.g. a barrier call); also the empty statement `Evaluate(0)`.
    Evaluate(Expr),
}

impl Stmt {
    /// The no-op statement.
    pub fn nop() -> Stmt {
        Stmt::Evaluate(Expr::int(0))
    }

    pub fn is_nop(&self) -> bool {
        matches!(self, Stmt::Evaluate(Expr::Int(..))) || matches!(self, Stmt::Seq(v) if v.is_empty())
    }

    pub fn for_loop(var: Var, extent: usize, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::For(Box::new(For { var, min: Expr::int(0), extent: Expr::int(extent as i64), kind, body }))
    }

    pub fn seq(stmts: Vec<Stmt>) -> Stmt {
        let mut flat = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s {
                Stmt::Seq(inner) => flat.extend(inner),
                s if s.is_nop() => {}
                s => flat.push(s),
            }
        }
        if flat.len() == 1 {
            flat.pop().unwrap_or_else(Stmt::nop)
        } else {
            Stmt::Seq(flat)
        }
    }

    /// Rebuild bottom-up with `f` applied to every statement after its children.
    pub fn map_post(self, f: &mut impl FnMut(Stmt) -> Stmt) -> Stmt {
        let s = match self {
            Stmt::For(mut l) => {
                let body = std::mem::replace(&mut l.body, Stmt::nop());
                l.body = body.map_post(f);
                Stmt::For(l)
            }
            Stmt::Allocate { buffer, body } => Stmt::Allocate { buffer, body: Box::new(body.map_post(f)) },
            Stmt::If { cond, then_case, else_case } => Stmt::If {
                cond,
                then_case: Box::new(then_case.map_post(f)),
                else_case: else_case.map(|e| Box::new(e.map_post(f))),
            },
            Stmt::Seq(v) => Stmt::Seq(v.into_iter().map(|s| s.map_post(f)).collect()),
            Stmt::Let { var, value, body } => Stmt::Let { var, value, body: Box::new(body.map_post(f)) },
            s @ (Stmt::Store { .. } | Stmt::Evaluate(_)) => s,
        };
        f(s)
    }

    /// Apply `f` to every expression directly held by every statement.
    pub fn map_exprs(self, f: &mut impl FnMut(Expr) -> Expr) -> Stmt {
        self.map_post(&mut |s| match s {
            Stmt::For(mut l) => {
                l.min = f(l.min);
                l.extent = f(l.extent);
                Stmt::For(l)
            }
            Stmt::Store { buffer, indices, value } => {
                Stmt::Store { buffer, indices: indices.into_iter().map(&mut *f).collect(), value: f(value) }
            }
            Stmt::If { cond, then_case, else_case } => Stmt::If { cond: f(cond), then_case, else_case },
            Stmt::Let { var, value, body } => Stmt::Let { var, value: f(value), body },
            Stmt::Evaluate(e) => Stmt::Evaluate(f(e)),
            s => s,
        })
    }

    /// Whether a loop of this statement is parallel (the kernel is then
    /// task-sliced; otherwise task 0 does all the work).
    pub fn has_parallel_loop(&self) -> bool {
        let mut found = false;
        self.visit(&mut |s| found |= matches!(s, Stmt::For(l) if l.kind == ForKind::Parallel));
        found
    }

    /// Calls `f` on every statement, parents before children.
    pub fn visit(&self, f: &mut impl FnMut(&Stmt)) {
        f(self);
        match self {
            Stmt::For(l) => l.body.visit(f),
            Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => body.visit(f),
            Stmt::If { then_case, else_case, .. } => {
                then_case.visit(f);
                if let Some(e) = else_case {
                    e.visit(f);
                }
            }
            Stmt::Seq(v) => v.iter().for_each(|s| s.visit(f)),
            Stmt::Store { .. } | Stmt::Evaluate(_) => {}
        }
    }
}

/// A kernel: buffers in, buffers out, a loop nest in between.
#[derive(Clone, Debug, PartialEq)]
pub struct PrimFunc {
    /// The symbol name.
    pub name: String,
    /// Inputs first, then outputs (TVM's convention for lowered kernels).
    pub params: Vec<Buffer>,
    /// How many of `params` are outputs (the last ones).
    pub num_outputs: usize,
    pub body: Stmt,
    pub attrs: BTreeMap<String, String>,
}
