//! TIR statements and primitive functions.

use std::collections::BTreeMap;

use super::expr::{Buffer, Expr, Var};

/// How a loop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForKind {
    /// One iteration after another.
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
    /// `blockIdx.x`.
    BlockX,
    /// `blockIdx.y`.
    BlockY,
    /// `blockIdx.z`.
    BlockZ,
    /// `threadIdx.x`.
    ThreadX,
    /// `threadIdx.y`.
    ThreadY,
    /// `threadIdx.z`.
    ThreadZ,
}

impl ThreadAxis {
    /// The CUDA name (`blockIdx.x`, `threadIdx.y`, …).
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
    /// The loop variable, bound in `body`.
    pub var: Var,
    /// The first value of `var`.
    pub min: Expr,
    /// The number of iterations.
    pub extent: Expr,
    /// How the iterations run.
    pub kind: ForKind,
    /// The loop body.
    pub body: Stmt,
}

/// A TIR statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// A loop.
    For(Box<For>),
    /// `buffer[indices] = value`.
    Store {
        /// The buffer written.
        buffer: Buffer,
        /// One index per dimension, or one flat element index (after FlattenBuffer).
        indices: Vec<Expr>,
        /// The value stored, of the buffer's dtype.
        value: Expr,
    },
    /// A temporary buffer live for `body`.
    Allocate {
        /// The buffer, in scope only inside `body`.
        buffer: Buffer,
        /// Where the buffer is live.
        body: Box<Stmt>,
    },
    /// `if cond { then_case } else { else_case }`.
    If {
        /// A `bool` condition.
        cond: Expr,
        /// Runs when `cond` is true.
        then_case: Box<Stmt>,
        /// Runs when `cond` is false, if present.
        else_case: Option<Box<Stmt>>,
    },
    /// Statements in order.
    Seq(Vec<Stmt>),
    /// `let var = value` in `body`.
    Let {
        /// The variable, bound in `body`.
        var: Var,
        /// Its value, evaluated once.
        value: Expr,
        /// Where `var` is bound.
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

    /// Whether this is a no-op: an evaluated integer constant or an empty sequence.
    pub fn is_nop(&self) -> bool {
        matches!(self, Stmt::Evaluate(Expr::Int(..))) || matches!(self, Stmt::Seq(v) if v.is_empty())
    }

    /// `for var in 0..extent { body }`.
    pub fn for_loop(var: Var, extent: usize, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::For(Box::new(For { var, min: Expr::int(0), extent: Expr::int(extent as i64), kind, body }))
    }

    /// `stmts` in order, flattening nested sequences and dropping no-ops; a single statement stays itself.
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
    /// The loop nest.
    pub body: Stmt,
    /// Kernel attributes, name → text: `anchor`, `schedule`, `gpu.grid`, `conv2d.weight_block`, …
    pub attrs: BTreeMap<String, String>,
}
