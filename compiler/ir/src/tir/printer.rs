//! A TVMScript-like text form of TIR, for debugging and snapshot tests;
//! [`super::parser`] reads it back.
//!
//! Variables and buffers print by name, with a `_N` suffix when two distinct
//! ones share a name, numbered in order of first appearance so the output is
//! deterministic. Names are identifiers joined by dots (`nn.relu`, `input.1`);
//! a character that cannot be in one prints as `_`, a keyword (`for`) with `_` after it.
//!
//! The text is lossless: parsing it gives back the same kernel up to how
//! statement sequences nest. What the text leaves out has one value:
//! `T.num_outputs(n)` follows the `def` line unless `n` is 1; a parameter
//! prints `scope="…"` unless it is global; a loop or reduction variable prints
//! its type unless it is int64 (`for i: T.int32 in …`, `axes=[k: T.int32(4)]`);
//! an intrinsic call prints `dtype="…"` unless its type is its first
//! argument's (int32 without arguments). An allocation or `let` scopes over
//! the rest of its block; where more statements of the block follow its
//! scope, `del name` ends it (`b = T.alloc_buffer(…)`, …, `del b`).

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use super::expr::{BinOp, Buffer, Expr, Scope, TirType, Var};
use super::stmt::{ForKind, PrimFunc, Stmt};
use crate::DataType;

/// Words of the text that cannot be names.
pub(crate) const KEYWORDS: [&str; 13] =
    ["T", "and", "def", "del", "else", "for", "if", "in", "not", "or", "pass", "True", "False"];

/// `name` as a name of the text: identifiers joined by dots (`nn.relu`,
/// `input.1`), the first not a keyword; other characters become `_`.
fn sanitize(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '_' }).collect();
    if s.split('.').any(str::is_empty) {
        s = s.replace('.', "_");
    }
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    let first = s.split('.').next().unwrap_or_default().len();
    if KEYWORDS.contains(&&s[..first]) {
        s.insert(first, '_');
    }
    s
}

#[derive(Default)]
struct Names {
    by_id: HashMap<u32, String>,
    next: HashMap<String, usize>,
    used: HashSet<String>,
}

impl Names {
    fn get(&mut self, id: u32, raw: &str) -> String {
        if let Some(n) = self.by_id.get(&id) {
            return n.clone();
        }
        let base = sanitize(raw);
        let count = self.next.entry(base.clone()).or_insert(0);
        // `i`, `i_1`, …, skipping names another base already took (a variable named `i_1`).
        let name = loop {
            let candidate = if *count == 0 { base.clone() } else { format!("{base}_{count}") };
            *count += 1;
            if !self.used.contains(&candidate) {
                break candidate;
            }
        };
        self.used.insert(name.clone());
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

/// The type an intrinsic call has when its text names none.
pub(crate) fn default_call_type(args: &[Expr]) -> TirType {
    args.first().map_or(TirType::scalar(DataType::I32), Expr::ty)
}

pub(crate) fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::Global => "global",
        Scope::Local => "local",
        Scope::Shared => "shared",
    }
}

fn expr(e: &Expr, names: &mut Names) -> String {
    match e {
        Expr::Int(v, t) => {
            if *t == TirType::BOOL && (*v == 0 || *v == 1) {
                (if *v != 0 { "True" } else { "False" }).to_string()
            } else if *t == TirType::INDEX {
                v.to_string()
            } else {
                format!("T.{t}({v})")
            }
        }
        Expr::Float(v, t) => format!("T.{t}({})", crate::attrs::format_float(*v)),
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
        Expr::Call(f, args, t) => {
            let mut text: Vec<String> = args.iter().map(|a| expr(a, names)).collect();
            if *t != default_call_type(args) {
                text.push(format!("dtype=\"{t}\""));
            }
            format!("T.{}({})", f.name(), text.join(", "))
        }
        Expr::Ramp { base, stride, lanes } => {
            format!("T.Ramp({}, {}, {lanes})", expr(base, names), expr(stride, names))
        }
        Expr::Broadcast(a, lanes) => format!("T.Broadcast({}, {lanes})", expr(a, names)),
        Expr::Reduce(r) => {
            let axes: Vec<String> = r
                .axes
                .iter()
                .map(|(v, n)| {
                    if v.ty == TirType::INDEX {
                        format!("{}: {n}", names.var(v))
                    } else {
                        format!("{}: T.{}({n})", names.var(v), v.ty)
                    }
                })
                .collect();
            format!("T.reduce_{}({}, axes=[{}])", r.combiner.name(), expr(&r.source, names), axes.join(", "))
        }
    }
}

/// `s` at indentation `depth`; `tail`: no statement follows it in its block,
/// so an allocation or `let` scopes over the rest of the block (else `del`
/// ends it).
fn stmt(s: &Stmt, depth: usize, tail: bool, names: &mut Names, out: &mut String) {
    let pad = "    ".repeat(depth);
    match s {
        Stmt::For(l) => {
            let v = names.var(&l.var);
            let ty = if l.var.ty == TirType::INDEX { String::new() } else { format!(": T.{}", l.var.ty) };
            let (min, ext) = (expr(&l.min, names), expr(&l.extent, names));
            let range = if min == "0" { ext } else { format!("{min}, {min} + {ext}") };
            let kind = match l.kind {
                ForKind::Serial => format!("T.serial({range})"),
                ForKind::Parallel => format!("T.parallel({range})"),
                ForKind::Vectorized => format!("T.vectorized({range})"),
                ForKind::Unrolled => format!("T.unroll({range})"),
                ForKind::ThreadBinding(axis) => format!("T.thread_binding({range}, thread=\"{}\")", axis.name()),
            };
            let _ = writeln!(out, "{pad}for {v}{ty} in {kind}:");
            stmt(&l.body, depth + 1, true, names, out);
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
                scope_name(buffer.scope())
            );
            stmt(body, depth, tail, names, out);
            if !tail {
                let _ = writeln!(out, "{pad}del {b}");
            }
        }
        Stmt::If { cond, then_case, else_case } => {
            let _ = writeln!(out, "{pad}if {}:", expr(cond, names));
            stmt(then_case, depth + 1, true, names, out);
            if let Some(e) = else_case {
                let _ = writeln!(out, "{pad}else:");
                stmt(e, depth + 1, true, names, out);
            }
        }
        Stmt::Seq(v) => {
            if v.is_empty() {
                let _ = writeln!(out, "{pad}pass");
            }
            for (k, s) in v.iter().enumerate() {
                stmt(s, depth, tail && k + 1 == v.len(), names, out);
            }
        }
        Stmt::Let { var, value, body } => {
            let v = names.var(var);
            let _ = writeln!(out, "{pad}{v}: T.{} = {}", var.ty, expr(value, names));
            stmt(body, depth, tail, names, out);
            if !tail {
                let _ = writeln!(out, "{pad}del {v}");
            }
        }
        Stmt::Evaluate(Expr::Int(0, t)) if *t == TirType::INDEX => {
            let _ = writeln!(out, "{pad}pass");
        }
        Stmt::Evaluate(e) => {
            let _ = writeln!(out, "{pad}T.evaluate({})", expr(e, names));
        }
    }
}

/// The text of one kernel.
pub fn print_prim_func(f: &PrimFunc) -> String {
    let mut names = Names::default();
    let mut out = String::new();
    let params: Vec<String> = f
        .params
        .iter()
        .map(|b| {
            let scope = match b.scope() {
                Scope::Global => String::new(),
                s => format!(", scope=\"{}\"", scope_name(s)),
            };
            format!("{}: T.Buffer({:?}, \"{}\"{scope})", names.buffer(b), b.shape(), b.elem())
        })
        .collect();
    let _ = writeln!(out, "@T.prim_func");
    let _ = writeln!(out, "def {}({}):", sanitize(&f.name), params.join(", "));
    if f.num_outputs != 1 {
        let _ = writeln!(out, "    T.num_outputs({})", f.num_outputs);
    }
    for (k, v) in &f.attrs {
        let _ = writeln!(out, "    T.func_attr({{{k:?}: {v:?}}})");
    }
    stmt(&f.body, 1, true, &mut names, &mut out);
    out
}

/// The text of a statement on its own.
pub fn print_stmt(s: &Stmt) -> String {
    let mut out = String::new();
    stmt(s, 0, true, &mut Names::default(), &mut out);
    out
}

/// The text of an expression on its own.
pub fn print_expr(e: &Expr) -> String {
    expr(e, &mut Names::default())
}
