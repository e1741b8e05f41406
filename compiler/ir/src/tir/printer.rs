//! A TVMScript-like text form of TIR, for debugging and snapshot tests.
//!
//! Variables and buffers print by name, with a `_N` suffix when two distinct
//! ones share a name, numbered in order of first appearance so the output is
//! deterministic.

use std::collections::HashMap;
use std::fmt::Write;

use super::expr::{BinOp, Buffer, Expr, Var};
use super::stmt::{ForKind, PrimFunc, Stmt};

#[derive(Default)]
struct Names {
    by_id: HashMap<u32, String>,
    taken: HashMap<String, usize>,
}

impl Names {
    fn get(&mut self, id: u32, base: &str) -> String {
        if let Some(n) = self.by_id.get(&id) {
            return n.clone();
        }
        let count = self.taken.entry(base.to_string()).or_insert(0);
        let name = if *count == 0 { base.to_string() } else { format!("{base}_{count}") };
        *count += 1;
        self.by_id.insert(id, name.clone());
        name
    }

    fn var(&mut self, v: &Var) -> String {
        self.get(v.id, &v.name)
    }

    fn buffer(&mut self, b: &Buffer) -> String {
        self.get(b.id(), b.name())
    }
}

fn expr(e: &Expr, names: &mut Names) -> String {
    match e {
        Expr::Int(v, t) => {
            if t.elem == crate::DataType::Bool {
                (if *v != 0 { "True" } else { "False" }).to_string()
            } else if t.elem == crate::DataType::I64 {
                v.to_string()
            } else {
                format!("T.{}({v})", t.elem)
            }
        }
        Expr::Float(v, t) => format!("T.{}({})", t.elem, crate::attrs::format_float(*v)),
        Expr::Var(v) => names.var(v),
        Expr::Bin(op, a, b) => match op {
            BinOp::Min | BinOp::Max => format!("T.{}({}, {})", op.symbol(), expr(a, names), expr(b, names)),
            _ => format!("({} {} {})", expr(a, names), op.symbol(), expr(b, names)),
        },
        Expr::Cmp(op, a, b) => format!("({} {} {})", expr(a, names), op.symbol(), expr(b, names)),
        Expr::And(a, b) => format!("({} and {})", expr(a, names), expr(b, names)),
        Expr::Or(a, b) => format!("({} or {})", expr(a, names), expr(b, names)),
        Expr::Not(a) => format!("not {}", expr(a, names)),
        Expr::Select(c, a, b) => format!("T.Select({}, {}, {})", expr(c, names), expr(a, names), expr(b, names)),
        Expr::Cast(t, a) => format!("T.Cast(\"{t}\", {})", expr(a, names)),
        Expr::Load(b, idx) => {
            let idx: Vec<String> = idx.iter().map(|i| expr(i, names)).collect();
            format!("{}[{}]", names.buffer(b), idx.join(", "))
        }
        Expr::Call(f, args, _) => {
            let args: Vec<String> = args.iter().map(|a| expr(a, names)).collect();
            format!("T.{}({})", f.name(), args.join(", "))
        }
        Expr::Ramp { base, stride, lanes } => {
            format!("T.Ramp({}, {}, {lanes})", expr(base, names), expr(stride, names))
        }
        Expr::Broadcast(a, lanes) => format!("T.Broadcast({}, {lanes})", expr(a, names)),
        Expr::Reduce(r) => {
            let axes: Vec<String> = r.axes.iter().map(|(v, n)| format!("{}: {n}", names.var(v))).collect();
            format!("T.reduce_{}({}, axes=[{}])", r.combiner.name(), expr(&r.source, names), axes.join(", "))
        }
    }
}

fn stmt(s: &Stmt, depth: usize, names: &mut Names, out: &mut String) {
    let pad = "    ".repeat(depth);
    match s {
        Stmt::For(l) => {
            let v = names.var(&l.var);
            let (min, ext) = (expr(&l.min, names), expr(&l.extent, names));
            let range = if min == "0" { ext } else { format!("{min}, {min} + {ext}") };
            let kind = match l.kind {
                ForKind::Serial => format!("T.serial({range})"),
                ForKind::Parallel => format!("T.parallel({range})"),
                ForKind::Vectorized => format!("T.vectorized({range})"),
                ForKind::Unrolled => format!("T.unroll({range})"),
                ForKind::ThreadBinding(axis) => format!("T.thread_binding({range}, thread=\"{}\")", axis.name()),
            };
            let _ = writeln!(out, "{pad}for {v} in {kind}:");
            stmt(&l.body, depth + 1, names, out);
        }
        Stmt::Store { buffer, indices, value } => {
            let idx: Vec<String> = indices.iter().map(|i| expr(i, names)).collect();
            let b = names.buffer(buffer);
            let _ = writeln!(out, "{pad}{b}[{}] = {}", idx.join(", "), expr(value, names));
        }
        Stmt::Allocate { buffer, body } => {
            let b = names.buffer(buffer);
            let _ = writeln!(
                out,
                "{pad}{b} = T.alloc_buffer({:?}, \"{}\", scope=\"{}\")",
                buffer.shape(),
                buffer.elem(),
                format!("{:?}", buffer.scope()).to_lowercase()
            );
            stmt(body, depth, names, out);
        }
        Stmt::If { cond, then_case, else_case } => {
            let _ = writeln!(out, "{pad}if {}:", expr(cond, names));
            stmt(then_case, depth + 1, names, out);
            if let Some(e) = else_case {
                let _ = writeln!(out, "{pad}else:");
                stmt(e, depth + 1, names, out);
            }
        }
        Stmt::Seq(v) => {
            if v.is_empty() {
                let _ = writeln!(out, "{pad}pass");
            }
            v.iter().for_each(|s| stmt(s, depth, names, out));
        }
        Stmt::Let { var, value, body } => {
            let v = names.var(var);
            let _ = writeln!(out, "{pad}{v}: T.{} = {}", var.ty, expr(value, names));
            stmt(body, depth, names, out);
        }
        Stmt::Evaluate(e) => {
            if s.is_nop() {
                let _ = writeln!(out, "{pad}pass");
            } else {
                let _ = writeln!(out, "{pad}T.evaluate({})", expr(e, names));
            }
        }
    }
}

/// The text of one kernel.
pub fn print_prim_func(f: &PrimFunc) -> String {
    let mut names = Names::default();
    let mut out = String::new();
    let params: Vec<String> =
        f.params.iter().map(|b| format!("{}: T.Buffer({:?}, \"{}\")", names.buffer(b), b.shape(), b.elem())).collect();
    let _ = writeln!(out, "@T.prim_func");
    let _ = writeln!(out, "def {}({}):", f.name, params.join(", "));
    for (k, v) in &f.attrs {
        let _ = writeln!(out, "    T.func_attr({{\"{k}\": {v:?}}})");
    }
    stmt(&f.body, 1, &mut names, &mut out);
    out
}

/// The text of a statement on its own.
pub fn print_stmt(s: &Stmt) -> String {
    let mut out = String::new();
    stmt(s, 0, &mut Names::default(), &mut out);
    out
}

/// The text of an expression on its own.
pub fn print_expr(e: &Expr) -> String {
    expr(e, &mut Names::default())
}
