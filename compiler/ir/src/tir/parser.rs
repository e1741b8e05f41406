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

use crate::error::{Error, Result};
use crate::span::Span;
use crate::DataType;

use super::expr::{BinOp, Buffer, CmpOp, Combiner, Expr, Intrinsic, Reduce, Scope, TirType, Var};
use super::printer::{default_call_type, scope_name, KEYWORDS};
use super::stmt::{For, ForKind, PrimFunc, Stmt, ThreadAxis};

/// The deepest nesting (of blocks, parentheses and calls) the parser accepts.
pub const MAX_NESTING: usize = 200;

const INTRINSICS: [Intrinsic; 33] = {
    use Intrinsic::*;
    [
        Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Erf, Pow, Fabs, Floor, Ceil, Round, Fmod, Sin, Cos, Tan, Asin, Acos,
        Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Ldexp, BitAnd, BitOr, BitXor, BitNot, ShiftLeft, ShiftRight, Barrier,
        CheckIndex,
    ]
};
const COMBINERS: [Combiner; 4] = [Combiner::Sum, Combiner::Max, Combiner::Min, Combiner::Prod];
const AXES: [ThreadAxis; 6] = {
    use ThreadAxis::*;
    [BlockX, BlockY, BlockZ, ThreadX, ThreadY, ThreadZ]
};
const CMP_OPS: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
const ARITH_OPS: [BinOp; 6] = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::FloorDiv, BinOp::FloorMod];
const PUNCT: [&str; 23] = [
    "//", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ":", "=", ".", "@", "+", "-", "*", "/", "%", "<",
    ">",
];

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Int(u64),
    Float(f64),
    Str(String),
    Punct(&'static str),
    Newline,
    Indent,
    Dedent,
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(n) => format!("`{n}`"),
            Tok::Int(v) => format!("`{v}`"),
            Tok::Float(v) => format!("`{v:?}`"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Newline => "the end of the line".into(),
            Tok::Indent => "an indented line".into(),
            Tok::Dedent => "the end of the block".into(),
            Tok::Eof => "the end of the input".into(),
        }
    }
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    span: Span,
}

/// `src` as tokens, with `Newline` ending each logical line and
/// `Indent`/`Dedent` around each block.
fn lex(src: &str) -> Result<Vec<Token>> {
    let (mut out, mut indents, mut brackets, mut end) = (Vec::new(), vec![0usize], 0usize, Span::text(1, 1));
    for (line, raw) in (1u32..).zip(src.split('\n')) {
        let chars: Vec<char> = raw.strip_suffix('\r').unwrap_or(raw).chars().collect();
        let at = |i: usize| Span::text(line, i as u32 + 1);
        let mut i = 0;
        if brackets == 0 {
            i = chars.iter().take_while(|&&c| c == ' ' || c == '\t').count();
            if chars.get(i).is_none_or(|&c| c == '#') {
                continue;
            }
            if let Some(t) = chars[..i].iter().position(|&c| c == '\t') {
                return Err(Error::parse(at(t), "a tab in the indentation; indent with spaces"));
            }
            if i > indents.last().copied().unwrap_or(0) {
                indents.push(i);
                out.push(Token { tok: Tok::Indent, span: at(i) });
            }
            while indents.last().is_some_and(|&w| i < w) {
                indents.pop();
                out.push(Token { tok: Tok::Dedent, span: at(i) });
            }
            if let Some(&outer) = indents.last().filter(|&&w| w != i) {
                let m = format!("an indentation of {i} spaces matches no enclosing block (the nearest is {outer})");
                return Err(Error::parse(at(i), m));
            }
        }
        // Where an identifier ends, and where a name's component may start
        // (right after `name.`: `input.1` is a name, not `input` and `.1`).
        let (mut pending, mut ident_end, mut component_at) = (false, None, None);
        while i < chars.len() {
            let (c, start) = (chars[i], i);
            let err = |m: String| Error::parse(at(start), m);
            let run = |i: &mut usize, f: fn(char) -> bool| {
                while chars.get(*i).is_some_and(|&c| f(c)) {
                    *i += 1;
                }
            };
            let tok = match c {
                ' ' | '\t' => {
                    i += 1;
                    continue;
                }
                '#' => break,
                c if c.is_ascii_alphabetic() || c == '_' || component_at == Some(i) && c.is_ascii_digit() => {
                    run(&mut i, |c| c.is_ascii_alphanumeric() || c == '_');
                    Tok::Ident(chars[start..i].iter().collect())
                }
                c if c.is_ascii_digit() => {
                    run(&mut i, |c| c.is_ascii_digit());
                    let mut float = chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit);
                    if float {
                        i += 1;
                        run(&mut i, |c| c.is_ascii_digit());
                    }
                    let sign = usize::from(matches!(chars.get(i + 1), Some('+' | '-')));
                    if matches!(chars.get(i), Some('e' | 'E'))
                        && chars.get(i + 1 + sign).is_some_and(char::is_ascii_digit)
                    {
                        float = true;
                        i += 1 + sign;
                        run(&mut i, |c| c.is_ascii_digit());
                    }
                    let text: String = chars[start..i].iter().collect();
                    if let Some(d) = chars.get(i).filter(|d| d.is_ascii_alphanumeric() || **d == '_' || **d == '.') {
                        return Err(err(format!("malformed number `{text}{d}`")));
                    }
                    if float {
                        Tok::Float(text.parse().map_err(|_| err(format!("malformed number `{text}`")))?)
                    } else {
                        Tok::Int(text.parse().map_err(|_| err(format!("integer `{text}` is too large")))?)
                    }
                }
                '"' => {
                    let mut s = String::new();
                    i += 1;
                    loop {
                        let Some(&ch) = chars.get(i) else { return Err(err("unterminated string".into())) };
                        i += 1;
                        let escaped = match ch {
                            '"' => break,
                            '\\' => chars.get(i).copied(),
                            ch => {
                                s.push(ch);
                                continue;
                            }
                        };
                        i += 1;
                        s.push(match escaped {
                            Some('n') => '\n',
                            Some('t') => '\t',
                            Some('r') => '\r',
                            Some('0') => '\0',
                            Some(q @ ('"' | '\\' | '\'')) => q,
                            // `\u{7f}`, as Rust's `{:?}` writes it.
                            Some('u') if chars.get(i) == Some(&'{') => {
                                let close = chars[i..].iter().position(|&d| d == '}').map(|p| i + p);
                                let hex: String = close.map(|e| chars[i + 1..e].iter().collect()).unwrap_or_default();
                                match (close, u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)) {
                                    (Some(e), Some(ch)) => {
                                        i = e + 1;
                                        ch
                                    }
                                    _ => return Err(err("malformed `\\u{…}` escape in string".into())),
                                }
                            }
                            _ => return Err(err("unknown escape in string".into())),
                        });
                    }
                    Tok::Str(s)
                }
                c => {
                    let rest: String = chars[i..(i + 2).min(chars.len())].iter().collect();
                    let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) else {
                        return Err(err(format!("unexpected character `{c}`")));
                    };
                    i += p.len();
                    match *p {
                        "(" | "[" | "{" => brackets += 1,
                        ")" | "]" | "}" => brackets = brackets.saturating_sub(1),
                        _ => {}
                    }
                    Tok::Punct(p)
                }
            };
            pending = true;
            component_at = (tok == Tok::Punct(".") && ident_end == Some(start)).then_some(i);
            ident_end = matches!(tok, Tok::Ident(_)).then_some(i);
            out.push(Token { tok, span: at(start) });
        }
        if pending {
            end = at(chars.len());
            if brackets == 0 {
                out.push(Token { tok: Tok::Newline, span: end.clone() });
            }
        }
    }
    out.extend((1..indents.len()).map(|_| Token { tok: Tok::Dedent, span: end.clone() }));
    out.push(Token { tok: Tok::Eof, span: end });
    Ok(out)
}

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

/// An infix operator, with its precedence level (0 binds loosest).
#[derive(Clone, Copy)]
enum Infix {
    Or,
    And,
    Cmp(CmpOp),
    Bin(BinOp),
}

fn infix(tok: &Tok) -> Option<(u8, Infix)> {
    match tok {
        Tok::Ident(k) if k == "or" => Some((0, Infix::Or)),
        Tok::Ident(k) if k == "and" => Some((1, Infix::And)),
        Tok::Punct(p) => CMP_OPS.into_iter().find(|op| op.symbol() == *p).map(|op| (2, Infix::Cmp(op))).or_else(|| {
            let op = ARITH_OPS.into_iter().find(|op| op.symbol() == *p)?;
            Some((if matches!(op, BinOp::Add | BinOp::Sub) { 3 } else { 4 }, Infix::Bin(op)))
        }),
        _ => None,
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

    fn expr(&mut self) -> Result<Expr> {
        self.nested(|p| p.binary(0))
    }

    /// Comma-separated expressions up to `close` (consumed).
    fn list(&mut self, close: &str) -> Result<Vec<Expr>> {
        let mut out = Vec::new();
        while !self.eat(close) {
            out.push(self.expr()?);
            if !self.is(close) && !self.eat(",") {
                return self.error(&format!("`,` or `{close}`"));
            }
        }
        Ok(out)
    }

    /// `expr, expr, …` (`n` of them) and `)`.
    fn args<const N: usize>(&mut self) -> Result<[Expr; N]> {
        let args = self.list(")")?;
        let n = args.len();
        args.try_into().or_else(|_| self.fail(format!("expected {N} arguments, found {n}")))
    }

    /// Left-associative infix operators of precedence `level` and above.
    fn binary(&mut self, level: u8) -> Result<Expr> {
        if level > 4 {
            return self.unary();
        }
        let mut e = self.binary(level + 1)?;
        while let Some((_, op)) = infix(self.peek()).filter(|(l, _)| *l == level) {
            self.next();
            let rhs = self.binary(level + 1)?;
            e = match op {
                Infix::Or => Expr::or(e, rhs),
                Infix::And => Expr::and(e, rhs),
                Infix::Cmp(op) => Expr::cmp(op, e, rhs),
                Infix::Bin(op) => Expr::bin(op, e, rhs),
            };
            if level == 2 && infix(self.peek()).is_some_and(|(l, _)| l == 2) {
                return self.fail("comparisons do not chain; add parentheses");
            }
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr> {
        let span = self.span();
        match self.peek().clone() {
            Tok::Ident(n) if n == "not" => {
                self.next();
                Ok(Expr::Not(Box::new(self.nested(Self::unary)?)))
            }
            Tok::Punct("-") | Tok::Int(_) | Tok::Float(_) => match self.number()? {
                Ok(v) => Ok(Expr::int(v)),
                Err(_) => Err(Error::parse(span, "a float constant needs its dtype, e.g. `T.float32(0.5)`")),
            },
            Tok::Punct("(") => {
                self.next();
                let e = self.expr()?;
                self.expect(&[")"])?;
                Ok(e)
            }
            Tok::Ident(n) if n == "True" || n == "False" => {
                self.next();
                Ok(Expr::Int(i64::from(n == "True"), TirType::BOOL))
            }
            Tok::Ident(n) if n == "T" => {
                self.expect(&["T", "."])?;
                self.nested(|p| p.call(span))
            }
            Tok::Ident(n) if !KEYWORDS.contains(&n.as_str()) => {
                let (n, span) = self.name("a name")?;
                if self.is("[") {
                    let (b, idx) = self.access(&n, &span)?;
                    return Ok(Expr::Load(b, idx));
                }
                match self.resolve(&n, &span)? {
                    Named::Var(v) => Ok(Expr::Var(v)),
                    Named::Buffer(_) => Err(Error::parse(span, format!("`{n}` is a buffer; read it as `{n}[…]`"))),
                }
            }
            _ => self.error("an expression"),
        }
    }

    /// An optionally negated number: `Ok` for an integer, `Err` for a float
    /// (`inf` and `nan` included).
    fn number(&mut self) -> Result<std::result::Result<i64, f64>> {
        let neg = self.eat("-");
        let span = self.span();
        let sign = if neg { -1.0 } else { 1.0 };
        let v = self.take("a number", |t| match t {
            Tok::Int(v) => Some(Ok(if neg { -i128::from(*v) } else { i128::from(*v) })),
            Tok::Float(v) => Some(Err(sign * v)),
            Tok::Ident(n) if n == "inf" => Some(Err(sign * f64::INFINITY)),
            Tok::Ident(n) if n == "nan" => Some(Err(f64::NAN)),
            _ => None,
        })?;
        match v {
            Ok(v) => Ok(Ok(i64::try_from(v).map_err(|_| Error::parse(span, "integer out of the range of int64"))?)),
            Err(v) => Ok(Err(v)),
        }
    }

    /// What follows `T.` in an expression.
    fn call(&mut self, span: Span) -> Result<Expr> {
        let mut name = self.word("a name after `T.`")?;
        while self.is(".") && matches!(self.peek_at(1), Tok::Ident(_)) {
            self.next();
            name = format!("{name}.{}", self.word("a name")?);
        }
        self.expect(&["("])?;
        let n = name.as_str();
        Ok(match n {
            "Select" => {
                let [c, a, b] = self.args()?;
                Expr::select(c, a, b)
            }
            "Cast" => {
                let t = self.ty_str()?;
                self.expect(&[","])?;
                let [e] = self.args()?;
                Expr::cast(t, e)
            }
            "Ramp" | "Broadcast" => {
                let e = self.expr()?;
                self.expect(&[","])?;
                let stride = if n == "Ramp" { Some(self.expr()?) } else { None };
                if stride.is_some() {
                    self.expect(&[","])?;
                }
                let lanes = self.lanes()?;
                self.expect(&[")"])?;
                match stride {
                    Some(s) => Expr::Ramp { base: Box::new(e), stride: Box::new(s), lanes },
                    None => Expr::Broadcast(Box::new(e), lanes),
                }
            }
            "min" | "max" => {
                let [a, b] = self.args()?;
                Expr::bin(if n == "min" { BinOp::Min } else { BinOp::Max }, a, b)
            }
            _ if n.starts_with("reduce_") => match COMBINERS.into_iter().find(|c| c.name() == &n[7..]) {
                Some(c) => self.reduce(c)?,
                None => return Err(Error::parse(span, format!("unknown reduction `T.{n}`"))),
            },
            _ => {
                if let Some(f) = INTRINSICS.into_iter().find(|f| f.name() == n) {
                    return self.intrinsic(f);
                }
                if !["float", "int", "uint", "bool"].iter().any(|p| n.starts_with(p)) {
                    return Err(Error::parse(span, format!("unknown intrinsic `T.{n}`")));
                }
                let t = tir_type(n).map_err(|m| Error::parse(span, m))?;
                let v = self.number()?;
                self.expect(&[")"])?;
                v.map_or_else(|v| Expr::Float(v, t), |v| Expr::Int(v, t))
            }
        })
    }

    /// The arguments of an intrinsic call, with an optional `dtype="…"` last.
    fn intrinsic(&mut self, f: Intrinsic) -> Result<Expr> {
        let (mut args, mut ty) = (Vec::new(), None);
        while !self.eat(")") {
            if self.is("dtype") && self.peek_at(1) == &Tok::Punct("=") {
                self.expect(&["dtype", "="])?;
                ty = Some(self.ty_str()?);
                self.expect(&[")"])?;
                break;
            }
            args.push(self.expr()?);
            if !self.is(")") && !self.eat(",") {
                return self.error("`,` or `)`");
            }
        }
        let ty = ty.unwrap_or_else(|| default_call_type(&args));
        Ok(Expr::call(f, args, ty))
    }

    /// `T.reduce_<combiner>(source, axes=[k: 4, …])` after its `(`: the axes
    /// bind the variables the source uses, so they are read first.
    fn reduce(&mut self, combiner: Combiner) -> Result<Expr> {
        let (start, mut depth) = (self.pos, 0usize);
        loop {
            match self.peek() {
                Tok::Punct("(" | "[" | "{") => depth += 1,
                Tok::Punct(")" | "]" | "}") if depth > 0 => depth -= 1,
                Tok::Punct(",") if depth == 0 && matches!(self.peek_at(1), Tok::Ident(a) if a == "axes") => break,
                Tok::Punct(")" | "]" | "}") | Tok::Newline | Tok::Eof | Tok::Indent | Tok::Dedent => {
                    return self.error("`, axes=[…]`")
                }
                _ => {}
            }
            self.next();
        }
        let comma = self.pos;
        self.expect(&[",", "axes", "=", "["])?;
        let (bound, mut axes) = (self.scope.len(), Vec::new());
        while !self.eat("]") {
            let name = self.name("a reduction axis `name: extent`")?;
            self.expect(&[":"])?;
            let (ty, n) = if self.is("T") {
                let ty = self.ty()?;
                self.expect(&["("])?;
                let n = self.size("an extent")?;
                self.expect(&[")"])?;
                (ty, n)
            } else {
                (TirType::INDEX, self.size("an extent")?)
            };
            axes.push((self.bind_var(name, ty)?, n));
            if !self.is("]") {
                self.expect(&[","])?;
            }
        }
        self.expect(&[")"])?;
        let end = self.pos;
        self.pos = start;
        let source = self.expr()?;
        if self.pos != comma {
            return self.error("`, axes=[…]`");
        }
        self.scope.truncate(bound);
        self.pos = end;
        Ok(Expr::Reduce(Box::new(Reduce { combiner, source, axes })))
    }

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
