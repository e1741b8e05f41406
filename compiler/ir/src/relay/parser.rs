//! Parse Relay text in TVM's syntax into an [`IRModule`].
//!
//! A recursive-descent parser over the tokens of [`super::lexer`]. Sequences
//! (`%0 = …; %1 = …;`) are parsed in a loop, so a 10 000-binding chain costs
//! no stack; only syntactic nesting (parentheses, calls inside calls, `if`,
//! `fn`) recurses, and it is capped at [`MAX_NESTING`] with a clear error.
//! Every node gets the `line:column` of its first token; every error says
//! what was expected, what was found, and where.

use rustc_hash::FxHashMap;

use crate::attrs::{AttrValue, Attrs};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::span::Span;
use crate::tensor::Tensor;

use super::expr::{ExprId, ExprKind, Function, Store, Var};
use super::lexer::{lex, Tok, Token};
use super::module::IRModule;
use super::ty::{FuncType, Type};

/// Infix operators: the token, its precedence level (higher binds tighter)
/// and the operator it calls — TVM's parser's table.
const INFIX: [(&str, u8, &str); 10] = [
    ("==", 2, "equal"),
    ("!=", 2, "not_equal"),
    ("<", 4, "less"),
    (">", 4, "greater"),
    ("<=", 4, "less_equal"),
    (">=", 4, "greater_equal"),
    ("+", 6, "add"),
    ("-", 6, "subtract"),
    ("*", 7, "multiply"),
    ("/", 7, "divide"),
];

/// The deepest syntactic nesting the parser accepts.
pub const MAX_NESTING: usize = 500;

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    store: Store,
    scopes: Vec<FxHashMap<String, ExprId>>,
    /// The type parameters of the enclosing functions, innermost last.
    type_scopes: Vec<Vec<String>>,
    meta: Vec<Tensor>,
    depth: usize,
}

/// Whether integer `v` is representable in `dtype`.
fn int_fits(v: i64, dtype: DataType) -> bool {
    match dtype {
        DataType::I8 => i8::try_from(v).is_ok(),
        DataType::I16 => i16::try_from(v).is_ok(),
        DataType::I32 => i32::try_from(v).is_ok(),
        DataType::U8 => u8::try_from(v).is_ok(),
        DataType::U16 => u16::try_from(v).is_ok(),
        DataType::U32 => u32::try_from(v).is_ok(),
        DataType::U64 => v >= 0,
        _ => true,
    }
}

fn dtype_of(name: &str) -> Option<DataType> {
    DataType::from_name(name)
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos.min(self.toks.len() - 1)].span()
    }

    fn next(&mut self) -> Token {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn error<T>(&self, expected: &str) -> Result<T> {
        Err(Error::parse(self.span(), format!("expected {expected}, found {}", self.peek().describe())))
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Ident(q) if q == s)
    }

    /// `: type` if it follows.
    fn type_annotation(&mut self) -> Result<Option<Type>> {
        if !self.is_punct(":") {
            return Ok(None);
        }
        self.next();
        // `_` is TVM's incomplete type: no annotation, inferred.
        if matches!(self.peek(), Tok::Ident(k) if k == "_") {
            self.next();
            return Ok(None);
        }
        Ok(Some(self.ty()?))
    }

    /// A `%name` (after `what`) and where it is.
    fn local(&mut self, what: &str) -> Result<(String, Span)> {
        match self.peek().clone() {
            Tok::Local(n) => {
                let s = self.span();
                self.next();
                Ok((n, s))
            }
            _ => self.error(&format!("a variable `%name` after {what}")),
        }
    }

    /// Items separated by `,` up to `close`, which it consumes (a trailing
    /// comma is allowed).
    fn separated<T>(&mut self, close: &str, mut item: impl FnMut(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let mut items = Vec::new();
        while !self.is_punct(close) {
            items.push(item(self)?);
            if !self.is_punct(close) {
                self.expect_punct(",")?;
            }
        }
        self.next();
        Ok(items)
    }

    fn expect_punct(&mut self, p: &str) -> Result<()> {
        if self.is_punct(p) {
            self.next();
            Ok(())
        } else {
            self.error(&format!("`{p}`"))
        }
    }

    fn expect_ident(&mut self, s: &str) -> Result<()> {
        if self.is_ident(s) {
            self.next();
            Ok(())
        } else {
            self.error(&format!("`{s}`"))
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Error::parse(self.span(), format!("nesting deeper than {MAX_NESTING} levels")));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn lookup(&self, name: &str) -> Option<ExprId> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    fn bind(&mut self, name: String, id: ExprId) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name, id);
        }
    }

    fn add(&mut self, kind: ExprKind, span: Span) -> ExprId {
        self.store.add(kind, span)
    }

    // ---- types --------------------------------------------------------------

    fn ty(&mut self) -> Result<Type> {
        self.enter()?;
        let t = self.ty_inner();
        self.leave();
        t
    }

    fn ty_inner(&mut self) -> Result<Type> {
        match self.peek().clone() {
            Tok::Ident(n) if n == "Tensor" => {
                self.next();
                self.expect_punct("[")?;
                let shape = self.shape()?;
                self.expect_punct(",")?;
                let dtype = self.dtype()?;
                self.expect_punct("]")?;
                Ok(Type::tensor(shape, dtype))
            }
            Tok::Ident(n) if n == "fn" => {
                self.next();
                let type_params = self.type_params()?;
                self.type_scopes.push(type_params.clone());
                let sig = self.expect_punct("(").and_then(|_| self.separated(")", Self::ty)).and_then(|params| {
                    self.expect_punct("->")?;
                    Ok((params, self.ty()?))
                });
                self.type_scopes.pop();
                let (params, ret) = sig?;
                Ok(Type::Func(FuncType { type_params, params, ret: Box::new(ret) }))
            }
            Tok::Ident(n) if self.type_scopes.iter().any(|s| s.contains(&n)) => {
                self.next();
                Ok(Type::Var(n))
            }
            Tok::Ident(n) if dtype_of(&n).is_some() => {
                self.next();
                Ok(Type::tensor([], dtype_of(&n).unwrap_or(DataType::F32)))
            }
            Tok::Punct("(") => {
                self.next();
                Ok(Type::Tuple(self.separated(")", Self::ty)?))
            }
            _ => self.error("a type (`Tensor[(…), dtype]`, a dtype, a tuple type or `fn (…) -> …`)"),
        }
    }

    /// `[A, B]`: the type parameters of a polymorphic function, if any.
    fn type_params(&mut self) -> Result<Vec<String>> {
        if !self.is_punct("[") {
            return Ok(vec![]);
        }
        self.next();
        let mut names: Vec<String> = Vec::new();
        self.separated("]", |p| match p.peek().clone() {
            Tok::Ident(n) if names.contains(&n) => {
                Err(Error::parse(p.span(), format!("type parameter `{n}` is declared twice")))
            }
            Tok::Ident(n) if dtype_of(&n).is_none() && !matches!(n.as_str(), "Tensor" | "fn") => {
                p.next();
                names.push(n);
                Ok(())
            }
            _ => p.error("a type parameter name (`A`)"),
        })?;
        Ok(names)
    }

    /// A function's type parameters, `(params)`, `-> ret` and `{ body }`,
    /// after `fn` or `def @name`.
    fn function_rest(&mut self, span: Span) -> Result<ExprId> {
        let type_params = self.type_params()?;
        self.scopes.push(FxHashMap::default());
        self.type_scopes.push(type_params.clone());
        let parts = self.params().and_then(|(params, attrs)| {
            let ret = self.ret_type()?;
            Ok((params, attrs, ret, self.block()?))
        });
        self.type_scopes.pop();
        self.scopes.pop();
        let (params, attrs, ret, body) = parts?;
        let ret_ty = ret.map(|t| self.store.intern_type(t));
        Ok(self.add(ExprKind::Function(Function { type_params, params, body, ret_ty, attrs }), span))
    }

    fn shape(&mut self) -> Result<Vec<usize>> {
        self.expect_punct("(")?;
        self.separated(")", |p| match p.peek().clone() {
            Tok::Int(v, s) if v >= 0 && s.is_empty() => {
                p.next();
                Ok(v as usize)
            }
            _ => p.error("a dimension (a non-negative integer)"),
        })
    }

    fn dtype(&mut self) -> Result<DataType> {
        match self.peek().clone() {
            Tok::Ident(n) => match dtype_of(&n) {
                Some(d) => {
                    self.next();
                    Ok(d)
                }
                None => Err(Error::parse(
                    self.span(),
                    format!("unknown dtype `{n}`; expected float32, float16, int64, int32, int8, uint8 or bool"),
                )),
            },
            _ => self.error("a dtype"),
        }
    }

    // ---- attributes ---------------------------------------------------------

    fn attr_value(&mut self) -> Result<AttrValue> {
        match self.peek().clone() {
            Tok::Int(v, _) => {
                self.next();
                Ok(AttrValue::Int(v))
            }
            Tok::Float(v, _) => {
                self.next();
                Ok(AttrValue::Float(v))
            }
            Tok::Str(s) => {
                self.next();
                Ok(AttrValue::Str(s))
            }
            Tok::Punct("-") => {
                self.next();
                match self.attr_value()? {
                    AttrValue::Int(v) => Ok(AttrValue::Int(-v)),
                    AttrValue::Float(v) => Ok(AttrValue::Float(-v)),
                    _ => self.error("a number after `-`"),
                }
            }
            Tok::Ident(n) if n == "True" || n == "False" => {
                self.next();
                Ok(AttrValue::Bool(n == "True"))
            }
            Tok::Ident(n) if n == "None" => {
                self.next();
                Ok(AttrValue::None)
            }
            Tok::Ident(n) => {
                self.next();
                Ok(AttrValue::Str(n))
            }
            Tok::Punct("[") => {
                self.next();
                let items = self.separated("]", Self::attr_value)?;
                if items.iter().all(|v| matches!(v, AttrValue::Int(_))) {
                    Ok(AttrValue::Ints(
                        items.into_iter().map(|v| if let AttrValue::Int(i) = v { i } else { 0 }).collect(),
                    ))
                } else if items.iter().all(|v| matches!(v, AttrValue::Int(_) | AttrValue::Float(_))) {
                    Ok(AttrValue::Floats(
                        items
                            .into_iter()
                            .map(|v| match v {
                                AttrValue::Int(i) => i as f64,
                                AttrValue::Float(f) => f,
                                _ => 0.0,
                            })
                            .collect(),
                    ))
                } else {
                    self.error("a list of numbers")
                }
            }
            _ => self.error("an attribute value"),
        }
    }

    /// `%x: T` binders and `Key=value` attributes, up to `)` (consumed).
    fn params(&mut self) -> Result<(Vec<ExprId>, Attrs)> {
        self.expect_punct("(")?;
        let mut params = Vec::new();
        let mut attrs = Attrs::new();
        while !self.is_punct(")") {
            match self.peek().clone() {
                Tok::Local(name) => {
                    let span = self.span();
                    self.next();
                    let ty = self.type_annotation()?;
                    let ty = ty.map(|t| self.store.intern_type(t));
                    let v = self.add(ExprKind::Var(Var { name: name.clone(), ty }), span);
                    self.bind(name, v);
                    params.push(v);
                }
                Tok::Ident(key) if matches!(self.peek_at(1), Tok::Punct("=")) => {
                    self.next();
                    self.next();
                    let v = self.attr_value()?;
                    attrs.set(key, v);
                }
                _ => return self.error("a parameter `%name: type` or an attribute `Name=value`"),
            }
            if !self.is_punct(")") {
                self.expect_punct(",")?;
            }
        }
        self.next();
        Ok((params, attrs))
    }

    fn ret_type(&mut self) -> Result<Option<Type>> {
        if self.is_punct("->") {
            self.next();
            Ok(Some(self.ty()?))
        } else {
            Ok(None)
        }
    }

    // ---- blocks and expressions -----------------------------------------------

    /// `{ stmt* expr }`: bindings, lets and free vars, then the result.
    fn block(&mut self) -> Result<ExprId> {
        self.expect_punct("{")?;
        self.statements("}")
    }

    /// Bindings (`%x = e;`, `let %x = e;`, `free_var`, and `e;` which TVM
    /// reads as `let %_ = e;`) and a result, up to and including `close`.
    fn statements(&mut self, close: &'static str) -> Result<ExprId> {
        self.scopes.push(FxHashMap::default());
        let mut lets: Vec<(ExprId, ExprId, Span)> = Vec::new();
        let result = loop {
            match (self.peek().clone(), self.peek_at(1).clone()) {
                (Tok::Local(name), Tok::Punct("=")) => {
                    self.next();
                    self.next();
                    let e = self.expr()?;
                    self.expect_punct(";")?;
                    self.bind(name, e);
                }
                (Tok::Ident(k), _) if k == "let" => {
                    let span = self.span();
                    self.next();
                    let (name, vspan) = self.local("`let`")?;
                    let ty = self.type_annotation()?;
                    self.expect_punct("=")?;
                    let ty = ty.map(|t| self.store.intern_type(t));
                    // A function may call itself by its `let` name, so its
                    // variable is in scope in its value; any other variable is
                    // created after its value (handles in dependency order).
                    let recursive = matches!(self.peek(), Tok::Ident(k) if k == "fn");
                    let early = recursive.then(|| {
                        let var = self.add(ExprKind::Var(Var { name: name.clone(), ty }), vspan.clone());
                        self.scopes.push(FxHashMap::default());
                        self.bind(name.clone(), var);
                        var
                    });
                    let value = self.expr();
                    if early.is_some() {
                        self.scopes.pop();
                    }
                    let value = value?;
                    self.expect_punct(";")?;
                    let var = match early {
                        Some(var) => var,
                        None => self.add(ExprKind::Var(Var { name: name.clone(), ty }), vspan),
                    };
                    self.bind(name, var);
                    lets.push((var, value, span));
                }
                (Tok::Ident(k), _) if k == "free_var" => {
                    self.next();
                    let (name, vspan) = self.local("`free_var`")?;
                    self.expect_punct(":")?;
                    let t = self.ty()?;
                    let ty = Some(self.store.intern_type(t));
                    self.expect_punct(";")?;
                    let var = self.add(ExprKind::Var(Var { name: name.clone(), ty }), vspan);
                    self.bind(name, var);
                }
                _ => {
                    let span = self.span();
                    let e = self.expr()?;
                    if self.is_punct(";") {
                        // A sequence `e1; e2` binds `e1` to a fresh `%_` (TVM's `ParseSequence`).
                        self.next();
                        let var = self.add(ExprKind::Var(Var { name: "_".into(), ty: None }), span.clone());
                        lets.push((var, e, span));
                        continue;
                    }
                    if !self.is_punct(close) {
                        return self.error(&format!("`{close}` after the result (or `;` after a binding)"));
                    }
                    self.next();
                    break e;
                }
            }
        };
        self.scopes.pop();
        let mut body = result;
        for (var, value, span) in lets.into_iter().rev() {
            body = self.add(ExprKind::Let { var, value, body }, span);
        }
        Ok(body)
    }

    fn expr(&mut self) -> Result<ExprId> {
        self.enter()?;
        let r = self.expr_inner();
        self.leave();
        r
    }

    /// Infix operators as TVM's parser reads them, loosest first: `==` `!=`,
    /// then `<` `>` `<=` `>=`, then `+` `-`, then `*` `/`, all left
    /// associative; each is a call of its operator (`%x + %y` is
    /// `add(%x, %y)`, and prints so).
    fn expr_inner(&mut self) -> Result<ExprId> {
        let mut operands = vec![self.postfix()?];
        let mut operators: Vec<(u8, &'static str, Span)> = Vec::new();
        // Operator precedence by a stack, so that a chain of any length is a loop.
        loop {
            let next = match self.peek() {
                Tok::Punct(p) => INFIX.iter().find(|(q, ..)| q == p).map(|&(_, level, op)| (level, op)),
                _ => None,
            };
            // Reduce what binds at least as tightly as the next operator (left associativity).
            while operators.last().is_some_and(|&(level, ..)| next.is_none_or(|(n, _)| n <= level)) {
                let Some((_, op, span)) = operators.pop() else { break };
                let (Some(b), Some(a)) = (operands.pop(), operands.pop()) else {
                    unreachable!("an operator has two operands")
                };
                let call = self.store.call_op_at(op, vec![a, b], Attrs::new(), span)?;
                operands.push(call);
            }
            let Some((level, op)) = next else { break };
            operators.push((level, op, self.span()));
            self.next();
            operands.push(self.postfix()?);
        }
        Ok(operands.pop().unwrap_or_else(|| unreachable!("one operand is left")))
    }

    /// An expression with its projections (`.0`) and calls (`(…)`).
    fn postfix(&mut self) -> Result<ExprId> {
        let mut e = self.primary()?;
        loop {
            if self.is_punct(".") {
                let span = self.span();
                self.next();
                match self.peek().clone() {
                    Tok::Int(i, s) if i >= 0 && s.is_empty() => {
                        self.next();
                        e = self.add(ExprKind::TupleGetItem { tuple: e, index: i as usize }, span);
                    }
                    _ => return self.error("a tuple index after `.`"),
                }
            } else if self.is_punct("(") {
                let span = self.span();
                // As in TVM, a function call may carry attributes; they have
                // no schema and no effect, and are printed back.
                let (args, attrs) = self.call_args()?;
                e = self
                    .add(ExprKind::Call(super::expr::Call { callee: super::expr::Callee::Expr(e), args, attrs }), span);
            } else {
                return Ok(e);
            }
        }
    }

    /// `(args…, key=value…)`.
    fn call_args(&mut self) -> Result<(Vec<ExprId>, Attrs)> {
        self.expect_punct("(")?;
        let mut args = Vec::new();
        let mut attrs = Attrs::new();
        while !self.is_punct(")") {
            if let (Tok::Ident(key), Tok::Punct("=")) = (self.peek().clone(), self.peek_at(1).clone()) {
                self.next();
                self.next();
                let v = self.attr_value()?;
                attrs.set(key, v);
            } else {
                if !attrs.is_empty() {
                    return self.error("an attribute `name=value` (positional arguments come first)");
                }
                args.push(self.expr()?);
            }
            if !self.is_punct(")") {
                if !self.is_punct(",") {
                    return self.error("`,` or `)` in the argument list");
                }
                self.next();
            }
        }
        self.next();
        Ok((args, attrs))
    }

    fn literal(&mut self, negative: bool) -> Result<ExprId> {
        let span = self.span();
        let sign = if negative { -1.0 } else { 1.0 };
        let t = match self.next().tok {
            Tok::Int(v, s) => {
                let v = if negative { -v } else { v };
                // As in TVM: no suffix is int32 where the value fits, else
                // int64; `i` is int32; an explicit type must hold the value.
                let dtype = match s.as_str() {
                    "" if i32::try_from(v).is_ok() => DataType::I32,
                    "" => DataType::I64,
                    "i" => DataType::I32,
                    suffix => DataType::from_name(suffix).unwrap_or(DataType::I32),
                };
                if !int_fits(v, dtype) {
                    return Err(Error::parse(span, format!("the literal {v} does not fit in {dtype}")));
                }
                match dtype {
                    // Exact: the 64-bit types do not pass through f64.
                    DataType::I64 | DataType::U64 => Tensor::from_bytes(dtype, vec![], v.to_le_bytes().to_vec())
                        .ok_or_else(|| Error::parse(span.clone(), "malformed integer literal"))?,
                    _ => Tensor::from_i64(vec![], &[v]).cast(dtype),
                }
            }
            Tok::Float(v, s) => {
                let dtype = match s.as_str() {
                    "f16" => DataType::F16,
                    "f64" => DataType::F64,
                    _ => DataType::F32,
                };
                // As in TVM, a literal its type cannot hold is an error (not infinity or the largest value).
                let max = match dtype {
                    DataType::F16 => 65504.0,
                    DataType::F32 => f32::MAX as f64,
                    _ => f64::MAX,
                };
                // Infinity and NaN (`inff`, `nanf`) are taken as they are, as in TVM.
                // A float32 is printed as the shortest text that reads back as
                // itself, and for f32::MAX that is `3.4028235e38`, a hair above
                // it as f64: what rounds to a finite float32 fits.
                let too_large = match dtype {
                    DataType::F32 => (v as f32).is_infinite(),
                    _ => v.abs() > max,
                };
                if v.is_finite() && too_large {
                    return Err(Error::parse(span, format!("the literal {v:e} does not fit in {dtype}")));
                }
                Tensor::scalar(dtype, sign * v)
            }
            _ => return Err(Error::parse(span, "expected a number")),
        };
        let c = self.store.intern_const(t);
        Ok(self.add(ExprKind::Constant(c), span))
    }

    fn primary(&mut self) -> Result<ExprId> {
        let span = self.span();
        match self.peek().clone() {
            Tok::Local(name) => {
                self.next();
                self.lookup(&name).ok_or_else(|| Error::parse(span, format!("unknown variable `%{name}`")))
            }
            Tok::Global(name) => {
                self.next();
                Ok(self.add(ExprKind::GlobalVar(name), span))
            }
            Tok::Int(..) | Tok::Float(..) => self.literal(false),
            Tok::Punct("-") => {
                // `--10` is the literal 10, as in TVM; `-%x` is `negative(%x)`.
                let mut minus = 0;
                while self.is_punct("-") {
                    self.next();
                    minus += 1;
                }
                if matches!(self.peek(), Tok::Int(..) | Tok::Float(..)) {
                    return self.literal(minus % 2 == 1);
                }
                let mut x = self.postfix()?;
                for _ in 0..minus {
                    x = self.store.call_op_at("negative", vec![x], Attrs::new(), span.clone())?;
                }
                Ok(x)
            }
            Tok::Punct("(") if matches!(self.peek_at(1), Tok::Ident(k) if k == "let") => {
                // `(let %a = 1; %a + 2)`: a let expression in parentheses.
                self.next();
                self.statements(")")
            }
            Tok::Punct("(") => {
                self.next();
                let mut fields = Vec::new();
                let mut trailing_comma = false;
                while !self.is_punct(")") {
                    fields.push(self.expr()?);
                    trailing_comma = false;
                    if !self.is_punct(")") {
                        if !self.is_punct(",") {
                            return self.error("`,` or `)`");
                        }
                        self.next();
                        trailing_comma = true;
                    }
                }
                self.next();
                if fields.len() == 1 && !trailing_comma {
                    Ok(fields[0])
                } else {
                    Ok(self.add(ExprKind::Tuple(fields), span))
                }
            }
            Tok::Ident(n) if n == "True" || n == "False" => {
                self.next();
                let c = self.store.intern_const(Tensor::scalar(DataType::Bool, (n == "True") as u8 as f64));
                Ok(self.add(ExprKind::Constant(c), span))
            }
            Tok::Ident(n) if n == "meta" => {
                self.next();
                self.expect_punct("[")?;
                self.expect_ident("relay.Constant")?;
                self.expect_punct("]")?;
                self.expect_punct("[")?;
                let k = match self.peek().clone() {
                    Tok::Int(k, _) if k >= 0 => k as usize,
                    _ => return self.error("a constant index"),
                };
                self.next();
                self.expect_punct("]")?;
                let t = self.meta.get(k).cloned().ok_or_else(|| {
                    Error::parse(span.clone(), format!("meta[relay.Constant][{k}] is not in the #[metadata] section"))
                })?;
                let c = self.store.intern_const(t);
                Ok(self.add(ExprKind::Constant(c), span))
            }
            Tok::Ident(n) if n == "fn" => {
                self.next();
                self.function_rest(span)
            }
            Tok::Ident(n) if n == "if" => {
                self.next();
                self.expect_punct("(")?;
                let cond = self.expr()?;
                self.expect_punct(")")?;
                let then_branch = self.block()?;
                self.expect_ident("else")?;
                let else_branch = self.block()?;
                Ok(self.add(ExprKind::If { cond, then_branch, else_branch }, span))
            }
            Tok::Ident(n) if n == "let" => self.error("an expression (`let` only starts a statement of a block)"),
            Tok::Ident(op) => {
                self.next();
                if !self.is_punct("(") {
                    return Err(Error::parse(
                        span,
                        format!("expected `(` after operator `{op}`, found {}", self.peek().describe()),
                    ));
                }
                let (args, attrs) = self.call_args()?;
                self.store.call_op_at(&op, args, attrs, span)
            }
            _ => self.error("an expression"),
        }
    }

    // ---- module -----------------------------------------------------------------

    /// The `#[version = "0.0.5"]` header, the one text format version kiln
    /// (like TVM) reads; `required` for whole files, as TVM's parser does.
    fn version(&mut self, required: bool) -> Result<()> {
        if self.is_punct("#") && matches!(self.peek_at(2), Tok::Ident(v) if v == "version") {
            self.next();
            self.expect_punct("[")?;
            self.expect_ident("version")?;
            self.expect_punct("=")?;
            match self.peek().clone() {
                Tok::Str(v) if v == TEXT_VERSION => {
                    self.next();
                }
                Tok::Str(v) => {
                    return Err(Error::parse(
                        self.span(),
                        format!("text format version \"{v}\" is not supported; kiln reads \"{TEXT_VERSION}\""),
                    ))
                }
                _ => return self.error(&format!("a version string \"{TEXT_VERSION}\"")),
            }
            self.expect_punct("]")?;
        } else if required {
            return Err(Error::parse(
                self.span(),
                format!("expected the text format version `#[version = \"{TEXT_VERSION}\"]` at the start of the file"),
            ));
        }
        Ok(())
    }

    fn module(&mut self, require_version: bool) -> Result<IRModule> {
        self.version(require_version)?;
        let mut defs: Vec<(String, ExprId, Span)> = Vec::new();
        while !matches!(self.peek(), Tok::Eof) {
            let span = self.span();
            self.expect_ident("def")?;
            let name = match self.peek().clone() {
                Tok::Global(n) => {
                    self.next();
                    n
                }
                _ => return self.error("a function name `@name` after `def`"),
            };
            if defs.iter().any(|(n, _, _)| *n == name) {
                return Err(Error::parse(span, format!("`@{name}` is defined twice")));
            }
            let f = self.function_rest(span.clone())?;
            defs.push((name, f, span));
        }
        let mut m = IRModule::new();
        m.store = std::mem::take(&mut self.store);
        for (name, f, _) in defs {
            m.add_function(name, f)?;
        }
        Ok(m)
    }
}

/// Parse the `#[metadata]` section (`relay.Constant[k]: Tensor[…] = "hex"` lines).
fn metadata(toks: &[Token]) -> Result<Vec<Tensor>> {
    let mut p = Parser {
        toks: toks.to_vec(),
        pos: 0,
        store: Store::new(),
        scopes: Vec::new(),
        type_scopes: Vec::new(),
        meta: Vec::new(),
        depth: 0,
    };
    let mut out = Vec::new();
    while !matches!(p.peek(), Tok::Eof) {
        let span = p.span();
        p.expect_ident("relay.Constant")?;
        p.expect_punct("[")?;
        match p.peek().clone() {
            Tok::Int(k, _) if k as usize == out.len() => {
                p.next();
            }
            _ => return p.error(&format!("constant index {}", out.len())),
        }
        p.expect_punct("]")?;
        p.expect_punct(":")?;
        let ty = p.ty()?;
        p.expect_punct("=")?;
        let hex = match p.peek().clone() {
            Tok::Str(s) => {
                p.next();
                s
            }
            _ => return p.error("the constant's bytes as a hex string"),
        };
        let Type::Tensor(t) = ty else { return Err(Error::parse(span, "a constant must have a tensor type")) };
        if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::parse(span, "malformed hex data"));
        }
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).filter_map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok()).collect();
        let n = bytes.len();
        let tensor = Tensor::from_bytes(t.dtype, t.shape.clone(), bytes).ok_or_else(|| {
            Error::parse(span.clone(), format!("{n} bytes do not fill a {}", Type::Tensor(t.clone())))
        })?;
        out.push(tensor);
    }
    Ok(out)
}

/// The Relay text format version kiln reads and prints.
pub const TEXT_VERSION: &str = "0.0.5";

/// Parse a module in Relay text; the version header is optional (a snippet).
pub fn parse_module(text: &str) -> Result<IRModule> {
    parse(text, false)
}

/// Parse the bytes of a whole Relay file: UTF-8 text (an invalid byte is an
/// error at its line and column) in which [`parse_module`]'s syntax follows
/// the header `#[version = "0.0.5"]`, as TVM's parser requires of a file.
pub fn parse_module_file(bytes: &[u8]) -> Result<IRModule> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let valid = &bytes[..e.valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        // Columns count characters, as the lexer's do.
        let column = String::from_utf8_lossy(&valid[line_start..]).chars().count() + 1;
        let span = Span::Text { line: line as u32, column: column as u32 };
        Error::parse(span, format!("not UTF-8 text (byte 0x{:02x})", bytes[e.valid_up_to()]))
    })?;
    parse(text, true)
}

fn parse(text: &str, require_version: bool) -> Result<IRModule> {
    let mut toks = lex(text)?;
    // The metadata section (at the end) is read first: the program refers to it.
    let mut meta = Vec::new();
    if let Some(at) = toks.windows(4).position(|w| {
        matches!(w[0].tok, Tok::Punct("#"))
            && matches!(w[1].tok, Tok::Punct("["))
            && matches!(&w[2].tok, Tok::Ident(s) if s == "metadata")
            && matches!(w[3].tok, Tok::Punct("]"))
    }) {
        let rest = toks.split_off(at);
        meta = metadata(&rest[4..])?;
        let eof = rest.last().cloned().unwrap_or(Token { tok: Tok::Eof, line: 1, column: 1 });
        toks.push(Token { tok: Tok::Eof, line: eof.line, column: eof.column });
    }
    let mut p =
        Parser { toks, pos: 0, store: Store::new(), scopes: Vec::new(), type_scopes: Vec::new(), meta, depth: 0 };
    p.module(require_version)
}
