//! Parse the TIR text of [`super::printer`] back into TIR, so that passes and
//! schedules can be tested text in, text out.
//!
//! A line-based lexer (Python's rules: `INDENT`/`DEDENT` tokens, newlines
//! inside brackets join lines, `#` comments) and a recursive-descent parser
//! with the usual precedence for unparenthesized infix operators (`or` <
//! `and` < comparisons < `+ -` < `* / // %`), except that `not` binds tighter
//! than all of them, as the printer writes it (`not a == b` is `(not a) == b`).
//!
//! Each distinct name of the text (identifiers joined by dots: `nn.relu`) is
//! one [`Var`] or [`Buffer`]: loops, `let`s and reduction axes bind
//! variables, parameters and `T.alloc_buffer` bind buffers, and binding a
//! name again (sibling loops over one variable, as the printer writes them)
//! gives the same one. An allocation or `let` scopes over the rest of its
//! block, or up to `del name`. A use outside every binding of its name is an
//! error. Every error is a [`crate::Error::Parse`] at a `line:column`, saying
//! what was expected and what was found; no input makes the parser panic.

use std::collections::{BTreeMap, HashMap};

mod expr;
mod lexer;

use crate::error::{Error, Result};
use crate::span::Span;
use crate::DataType;

use super::expr::{BinOp, Buffer, CmpOp, Combiner, Expr, Intrinsic, Reduce, Scope, TirType, Var};
use super::printer::{default_call_type, scope_name, KEYWORDS};
use super::stmt::{For, ForKind, PrimFunc, Stmt, ThreadAxis};
use lexer::{lex, Tok, Token};

/// The deepest nesting (of blocks, parentheses and calls) the parser accepts.
pub const MAX_NESTING: usize = 200;

const COMBINERS: [Combiner; 4] = [Combiner::Sum, Combiner::Max, Combiner::Min, Combiner::Prod];
const AXES: [ThreadAxis; 6] = {
    use ThreadAxis::*;
    [BlockX, BlockY, BlockZ, ThreadX, ThreadY, ThreadZ]
};
const CMP_OPS: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
const ARITH_OPS: [BinOp; 6] = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::FloorDiv, BinOp::FloorMod];
/// A `TirType` from its name (`float32`, `float32x8`).
fn tir_type(name: &str) -> std::result::Result<TirType, String> {
    let (elem, lanes) = match name.rfind('x') {
        Some(k) if k + 1 < name.len() && name[k + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            (&name[..k], Some(&name[k + 1..]))
        }
        _ => (name, None),
    };
    let Some(elem) = DataType::from_name(elem) else {
        let all: Vec<&str> = DataType::ALL.iter().map(|d| d.name()).collect();
        return Err(format!("unknown dtype `{name}`; expected {} (with `xN` for N lanes)", all.join(", ")));
    };
    match lanes.map(str::parse::<u16>) {
        None => Ok(TirType::scalar(elem)),
        Some(Ok(l)) if l >= 1 => Ok(TirType::scalar(elem).with_lanes(l)),
        Some(_) => Err(format!("the lanes of `{name}` must be 1 to {}", u16::MAX)),
    }
}

#[derive(Clone)]
enum Named {
    Var(Var),
    Buffer(Buffer),
}

/// An allocation or a `let`: its scope is the rest of its block, or up to its `del`.
enum Binding {
    Let(Var, Expr),
    Alloc(Buffer),
}

/// A line of a block.
enum Item {
    Stmt(Stmt),
    Bind(Binding, String),
    Del(String, Span),
}

/// A binding whose scope is open, with the statements in it so far.
struct Open {
    binding: Binding,
    name: String,
    /// How many names were in scope before it.
    bound: usize,
    body: Vec<Stmt>,
}

impl Open {
    fn close(self) -> Stmt {
        let body = Box::new(one(self.body));
        match self.binding {
            Binding::Let(var, value) => Stmt::Let { var, value, body },
            Binding::Alloc(buffer) => Stmt::Allocate { buffer, body },
        }
    }
}

fn one(mut stmts: Vec<Stmt>) -> Stmt {
    match stmts.len() {
        1 => stmts.pop().unwrap_or_else(Stmt::nop),
        0 => Stmt::nop(),
        _ => Stmt::Seq(stmts),
    }
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    /// Every name bound so far: its one variable or buffer, and where it was first bound.
    known: HashMap<String, (Named, Span)>,
    /// The names bound where the parser stands, innermost last.
    scope: Vec<String>,
    depth: usize,
}

impl Parser {
    fn new(text: &str) -> Result<Parser> {
        Ok(Parser { toks: lex(text)?, pos: 0, known: HashMap::new(), scope: Vec::new(), depth: 0 })
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }

    fn peek(&self) -> &Tok {
        self.peek_at(0)
    }

    fn span(&self) -> Span {
        self.toks[self.pos.min(self.toks.len() - 1)].span.clone()
    }

    fn next(&mut self) {
        self.pos = (self.pos + 1).min(self.toks.len() - 1);
    }

    fn fail<T>(&self, message: impl Into<String>) -> Result<T> {
        Err(Error::parse(self.span(), message))
    }

    fn error<T>(&self, expected: &str) -> Result<T> {
        // The line and the blocks that end with the input are its end.
        let at_end = self.toks[self.pos.min(self.toks.len() - 1)..]
            .iter()
            .all(|t| matches!(t.tok, Tok::Newline | Tok::Dedent | Tok::Eof));
        self.fail(format!(
            "expected {expected}, found {}",
            if at_end { Tok::Eof } else { self.peek().clone() }.describe()
        ))
    }

    /// The next token's value when `f` accepts it (then consumed), else an error expecting `what`.
    fn take<T>(&mut self, what: &str, f: impl FnOnce(&Tok) -> Option<T>) -> Result<T> {
        match f(self.peek()) {
            Some(v) => {
                self.next();
                Ok(v)
            }
            None => self.error(what),
        }
    }

    fn is(&self, tok: &str) -> bool {
        matches!(self.peek(), Tok::Punct(p) if *p == tok) || matches!(self.peek(), Tok::Ident(n) if n == tok)
    }

    fn eat(&mut self, tok: &str) -> bool {
        let found = self.is(tok);
        if found {
            self.next();
        }
        found
    }

    /// Expect each of `toks` (punctuation or words) in turn.
    fn expect(&mut self, toks: &[&str]) -> Result<()> {
        for tok in toks {
            if !self.eat(tok) {
                return self.error(&format!("`{tok}`"));
            }
        }
        Ok(())
    }

    fn expect_tok(&mut self, tok: Tok) -> Result<()> {
        let what = tok.describe();
        self.take(&what, |t| (*t == tok).then_some(()))
    }

    /// A name being bound (not a keyword), with its place.
    fn name(&mut self, what: &str) -> Result<(String, Span)> {
        let span = self.span();
        let mut n = self.take(what, |t| match t {
            Tok::Ident(n) if !KEYWORDS.contains(&n.as_str()) => Some(n.clone()),
            _ => None,
        })?;
        while self.is(".") && matches!(self.peek_at(1), Tok::Ident(_)) {
            self.next();
            n = format!("{n}.{}", self.word("a name")?);
        }
        Ok((n, span))
    }

    fn word(&mut self, what: &str) -> Result<String> {
        self.take(what, |t| if let Tok::Ident(n) = t { Some(n.clone()) } else { None })
    }

    fn string(&mut self, what: &str) -> Result<String> {
        self.take(what, |t| if let Tok::Str(s) = t { Some(s.clone()) } else { None })
    }

    fn int(&mut self, what: &str, range: std::ops::RangeInclusive<u64>) -> Result<u64> {
        self.take(what, |t| if let Tok::Int(v) = t { Some(*v).filter(|v| range.contains(v)) } else { None })
    }

    fn size(&mut self, what: &str) -> Result<usize> {
        Ok(self.int(what, 0..=usize::MAX as u64)? as usize)
    }

    fn lanes(&mut self) -> Result<u16> {
        Ok(self.int("a number of lanes (1 to 65535)", 1..=u16::MAX as u64)? as u16)
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.depth >= MAX_NESTING {
            return self.fail(format!("nesting deeper than {MAX_NESTING} levels"));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// A type written `T.float32x8`.
    fn ty(&mut self) -> Result<TirType> {
        self.expect(&["T", "."])?;
        let span = self.span();
        tir_type(&self.word("a dtype")?).map_err(|m| Error::parse(span, m))
    }

    /// A type written as a string, `"float32x8"`.
    fn ty_str(&mut self) -> Result<TirType> {
        let span = self.span();
        tir_type(&self.string("a dtype string such as \"float32\"")?).map_err(|m| Error::parse(span, m))
    }

    /// `shape, "dtype"[, scope="…"])`: a buffer's declaration after `T.Buffer(` or `T.alloc_buffer(`.
    fn buffer_decl(&mut self) -> Result<(DataType, Vec<usize>, Scope)> {
        let close = match self.peek() {
            Tok::Punct("[") => "]",
            Tok::Punct("(") => ")",
            _ => return self.error("a shape `[…]`"),
        };
        self.next();
        let mut shape = Vec::new();
        while !self.eat(close) {
            shape.push(self.size("a dimension (a non-negative integer)")?);
            if !self.is(close) {
                self.expect(&[","])?;
            }
        }
        self.expect(&[","])?;
        let span = self.span();
        let elem = match self.ty_str()? {
            t if t.lanes == 1 => t.elem,
            _ => return Err(Error::parse(span, "a buffer's elements are scalars")),
        };
        let mut scope = Scope::Global;
        if self.eat(",") {
            self.expect(&["scope", "="])?;
            let span = self.span();
            scope = match self.string("a scope string")?.as_str() {
                "global" => Scope::Global,
                "local" => Scope::Local,
                "shared" => Scope::Shared,
                s => {
                    let m = format!("unknown scope \"{s}\"; expected \"global\", \"local\" or \"shared\"");
                    return Err(Error::parse(span, m));
                }
            };
        }
        self.expect(&[")"])?;
        Ok((elem, shape, scope))
    }

    // ---- names ----------------------------------------------------------------

    /// Why `name` cannot be bound again as something else.
    fn rebound<T>(&self, name: &str, span: Span) -> Result<T> {
        let m = match self.known.get(name) {
            Some((Named::Var(v), at)) => format!("`{name}` is the {} variable bound at {at}", v.ty),
            Some((Named::Buffer(b), at)) => format!(
                "`{name}` is the {} buffer of shape {:?} ({}) declared at {at}",
                b.elem(),
                b.shape(),
                scope_name(b.scope())
            ),
            None => format!("`{name}` cannot be bound here"),
        };
        Err(Error::parse(span, format!("{m}; one name is one variable or buffer")))
    }

    fn bind_var(&mut self, (name, span): (String, Span), ty: TirType) -> Result<Var> {
        let v = match self.known.get(&name) {
            None => {
                let v = Var::new(&name, ty);
                self.known.insert(name.clone(), (Named::Var(v.clone()), span));
                v
            }
            Some((Named::Var(v), _)) if v.ty == ty => v.clone(),
            Some(_) => return self.rebound(&name, span),
        };
        self.scope.push(name);
        Ok(v)
    }

    fn bind_buffer(
        &mut self,
        (name, span): (String, Span),
        (elem, shape, scope): (DataType, Vec<usize>, Scope),
    ) -> Result<Buffer> {
        let b = match self.known.get(&name) {
            None => {
                let b = Buffer::new(&name, elem, shape, scope);
                self.known.insert(name.clone(), (Named::Buffer(b.clone()), span));
                b
            }
            Some((Named::Buffer(b), _)) if (b.elem(), b.shape(), b.scope()) == (elem, &shape[..], scope) => b.clone(),
            Some(_) => return self.rebound(&name, span),
        };
        self.scope.push(name);
        Ok(b)
    }

    fn resolve(&self, name: &str, span: &Span) -> Result<Named> {
        let m = match self.known.get(name) {
            Some((n, _)) if self.scope.iter().any(|s| s == name) => return Ok(n.clone()),
            Some((_, at)) => format!("`{name}` is used outside the loop, `let` or allocation that binds it (at {at})"),
            None => format!("unbound name `{name}`: no parameter, enclosing loop, `let` or allocation binds it"),
        };
        Err(Error::parse(span.clone(), m))
    }

    /// `name[indices]`: a buffer and one index per dimension, or one.
    fn access(&mut self, name: &str, span: &Span) -> Result<(Buffer, Vec<Expr>)> {
        let Named::Buffer(b) = self.resolve(name, span)? else {
            return Err(Error::parse(span.clone(), format!("`{name}` is a variable, not a buffer")));
        };
        self.expect(&["["])?;
        let idx = self.list("]")?;
        let rank = b.shape().len();
        if idx.len() != rank && idx.len() != 1 {
            let n = idx.len();
            let m = format!("`{name}` has {rank} dimensions: expected {rank} indices (or 1 once flattened), found {n}");
            return Err(Error::parse(span.clone(), m));
        }
        Ok((b, idx))
    }

    // ---- expressions ------------------------------------------------------------

    // ---- statements ---------------------------------------------------------------

    /// `:`, the end of the line and an indented block.
    fn block(&mut self) -> Result<Stmt> {
        self.expect(&[":"])?;
        self.expect_tok(Tok::Newline)?;
        self.take("an indented block", |t| (*t == Tok::Indent).then_some(()))?;
        let s = self.nested(Self::items)?;
        self.expect_tok(Tok::Dedent)?;
        Ok(s)
    }

    /// The statements up to the end of the block.
    fn items(&mut self) -> Result<Stmt> {
        let (bound, mut stmts, mut open) = (self.scope.len(), Vec::new(), Vec::<Open>::new());
        fn add(stmts: &mut Vec<Stmt>, open: &mut [Open], s: Stmt) {
            open.last_mut().map_or(stmts, |o| &mut o.body).push(s);
        }
        while !matches!(self.peek(), Tok::Dedent | Tok::Eof) {
            let before = self.scope.len();
            match self.item()? {
                Item::Stmt(s) => add(&mut stmts, &mut open, s),
                Item::Bind(binding, name) => open.push(Open { binding, name, bound: before, body: Vec::new() }),
                Item::Del(name, span) => {
                    let innermost = open.last().is_some_and(|o| o.name == name);
                    let Some(o) = open.pop().filter(|_| innermost) else {
                        let m = format!("`del {name}` must end the innermost allocation or `let` open in this block");
                        return Err(Error::parse(span, m));
                    };
                    self.scope.truncate(o.bound);
                    add(&mut stmts, &mut open, o.close());
                }
            }
        }
        while let Some(o) = open.pop() {
            add(&mut stmts, &mut open, o.close());
        }
        self.scope.truncate(bound);
        if stmts.is_empty() {
            return self.error("a statement");
        }
        Ok(one(stmts))
    }

    /// `T.serial(…)` and the other loop kinds, with the range.
    fn range(&mut self) -> Result<(ForKind, Expr, Expr)> {
        self.expect(&["T", "."])?;
        let span = self.span();
        let kind = match self.word("a loop kind")?.as_str() {
            "serial" => ForKind::Serial,
            "parallel" => ForKind::Parallel,
            "vectorized" => ForKind::Vectorized,
            "unroll" => ForKind::Unrolled,
            "thread_binding" => ForKind::ThreadBinding(ThreadAxis::ThreadX),
            k => {
                let m =
                    format!("unknown loop kind `{k}`; expected serial, parallel, vectorized, unroll or thread_binding");
                return Err(Error::parse(span, m));
            }
        };
        self.expect(&["("])?;
        let first = self.expr()?;
        let thread = matches!(self.peek_at(1), Tok::Ident(t) if t == "thread") && self.peek_at(2) == &Tok::Punct("=");
        let (min, extent) = if self.is(",") && !thread {
            self.next();
            let span = self.span();
            // `min, min + extent`; or `min, end` with constants.
            match (self.expr()?, &first) {
                (Expr::Bin(BinOp::Add, a, b), _) if *a == first => (first, *b),
                (Expr::Int(end, t), Expr::Int(min, u)) if t == TirType::INDEX && *u == t => {
                    (Expr::int(*min), Expr::int(end.wrapping_sub(*min)))
                }
                _ => return Err(Error::parse(span, "expected the end of the range `min + extent`")),
            }
        } else {
            (Expr::int(0), first)
        };
        let kind = match kind {
            ForKind::ThreadBinding(_) => {
                self.expect(&[",", "thread", "="])?;
                let span = self.span();
                let axis = self.string("a thread axis such as \"threadIdx.x\"")?;
                let Some(axis) = AXES.into_iter().find(|a| a.name() == axis) else {
                    let m = format!("unknown thread axis \"{axis}\"; expected blockIdx.x/y/z or threadIdx.x/y/z");
                    return Err(Error::parse(span, m));
                };
                ForKind::ThreadBinding(axis)
            }
            kind => kind,
        };
        self.expect(&[")"])?;
        Ok((kind, min, extent))
    }

    fn item(&mut self) -> Result<Item> {
        let bound = self.scope.len();
        let Tok::Ident(word) = self.peek().clone() else {
            if *self.peek() == Tok::Indent {
                return self.fail("unexpected indentation: no `for`, `if` or `else` opens a block here");
            }
            return self.error("a statement");
        };
        let s = match word.as_str() {
            "for" => {
                self.next();
                let name = self.name("a loop variable")?;
                let ty = if self.eat(":") { self.ty()? } else { TirType::INDEX };
                self.expect(&["in"])?;
                let (kind, min, extent) = self.range()?;
                let var = self.bind_var(name, ty)?;
                let body = self.block()?;
                Stmt::For(Box::new(For { var, min, extent, kind, body }))
            }
            "if" => {
                self.next();
                let cond = self.expr()?;
                let then_case = Box::new(self.block()?);
                let else_case = if self.eat("else") { Some(Box::new(self.block()?)) } else { None };
                Stmt::If { cond, then_case, else_case }
            }
            _ => {
                let item = self.simple_item(&word)?;
                self.expect_tok(Tok::Newline)?;
                return Ok(item);
            }
        };
        self.scope.truncate(bound);
        Ok(Item::Stmt(s))
    }

    /// A statement of one line.
    fn simple_item(&mut self, word: &str) -> Result<Item> {
        Ok(match word {
            "pass" => {
                self.next();
                Item::Stmt(Stmt::nop())
            }
            "del" => {
                self.next();
                let (name, span) = self.name("the name whose scope ends")?;
                Item::Del(name, span)
            }
            "T" if matches!(self.peek_at(2), Tok::Ident(a) if a == "func_attr" || a == "num_outputs") => {
                return self.fail("function attributes belong at the top of the function body");
            }
            "T" => {
                self.expect(&["T", ".", "evaluate", "("])?;
                let [e] = self.args()?;
                Item::Stmt(Stmt::Evaluate(e))
            }
            n if !KEYWORDS.contains(&n) => {
                let (n, span) = self.name("a name")?;
                match self.peek() {
                    Tok::Punct("[") => {
                        let (buffer, indices) = self.access(&n, &span)?;
                        self.expect(&["="])?;
                        Item::Stmt(Stmt::Store { buffer, indices, value: self.expr()? })
                    }
                    Tok::Punct("=") => {
                        self.expect(&["=", "T", ".", "alloc_buffer", "("])?;
                        let decl = self.buffer_decl()?;
                        Item::Bind(Binding::Alloc(self.bind_buffer((n.clone(), span), decl)?), n)
                    }
                    Tok::Punct(":") => {
                        self.expect(&[":"])?;
                        let ty = self.ty()?;
                        self.expect(&["="])?;
                        let value = self.expr()?;
                        Item::Bind(Binding::Let(self.bind_var((n.clone(), span), ty)?, value), n)
                    }
                    _ => return self.error("`[`, `=` or `:` after a name at the start of a statement"),
                }
            }
            _ => return self.error("a statement"),
        })
    }

    fn prim_func(&mut self) -> Result<PrimFunc> {
        if self.is("@") {
            self.expect(&["@", "T", ".", "prim_func"])?;
            self.expect_tok(Tok::Newline)?;
        }
        self.expect(&["def"])?;
        let (name, _) = self.name("the kernel's name")?;
        self.expect(&["("])?;
        let mut params = Vec::new();
        while !self.eat(")") {
            let name = self.name("a parameter `name: T.Buffer(…)`")?;
            self.expect(&[":", "T", ".", "Buffer", "("])?;
            let decl = self.buffer_decl()?;
            params.push(self.bind_buffer(name, decl)?);
            if !self.is(")") && !self.eat(",") {
                return self.error("`,` or `)`");
            }
        }
        self.expect(&[":"])?;
        self.expect_tok(Tok::Newline)?;
        self.expect_tok(Tok::Indent)?;
        let (mut num_outputs, mut attrs) = (1, BTreeMap::new());
        while self.is("T") && matches!(self.peek_at(2), Tok::Ident(a) if a == "num_outputs" || a == "func_attr") {
            if self.peek_at(2) == &Tok::Ident("num_outputs".into()) {
                self.expect(&["T", ".", "num_outputs", "("])?;
                num_outputs = self.size("the number of outputs")?;
            } else {
                self.expect(&["T", ".", "func_attr", "(", "{"])?;
                while !self.eat("}") {
                    let span = self.span();
                    let k = self.string("an attribute name (a string)")?;
                    self.expect(&[":"])?;
                    if attrs.insert(k.clone(), self.string("an attribute value (a string)")?).is_some() {
                        return Err(Error::parse(span, format!("attribute \"{k}\" is set twice")));
                    }
                    if !self.is("}") {
                        self.expect(&[","])?;
                    }
                }
            }
            self.expect(&[")"])?;
            self.expect_tok(Tok::Newline)?;
        }
        let body = self.items()?;
        self.expect_tok(Tok::Dedent)?;
        self.expect_tok(Tok::Eof)?;
        Ok(PrimFunc { name, params, num_outputs, body, attrs })
    }

    /// Bind `buffers` and `vars` by their names, for a statement or expression on its own.
    fn with_env(mut self, buffers: &[Buffer], vars: &[Var]) -> Self {
        let named = buffers.iter().map(|b| (b.name().to_string(), Named::Buffer(b.clone())));
        for (name, n) in named.chain(vars.iter().map(|v| (v.name.to_string(), Named::Var(v.clone())))) {
            self.known.insert(name.clone(), (n, Span::Unknown));
            self.scope.push(name);
        }
        self
    }
}

/// Parse one kernel in the text of [`super::print_prim_func`].
pub fn parse_prim_func(text: &str) -> Result<PrimFunc> {
    Parser::new(text)?.prim_func()
}

/// Parse statements at indentation 0 (the text of [`super::print_stmt`]);
/// names not bound in the text are the given buffers and variables, by name.
pub fn parse_stmt(text: &str, buffers: &[Buffer], vars: &[Var]) -> Result<Stmt> {
    let mut p = Parser::new(text)?.with_env(buffers, vars);
    let s = p.items()?;
    p.expect_tok(Tok::Eof)?;
    Ok(s)
}

/// Parse one expression (the text of [`super::print_expr`]); names are the
/// given buffers and variables.
pub fn parse_expr(text: &str, buffers: &[Buffer], vars: &[Var]) -> Result<Expr> {
    let mut p = Parser::new(text)?.with_env(buffers, vars);
    let e = p.expr()?;
    p.expect_tok(Tok::Newline)?;
    p.expect_tok(Tok::Eof)?;
    Ok(e)
}
