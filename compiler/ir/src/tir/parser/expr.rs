//! Expressions of the TIR text: literals, names and loads, calls of `T.*`,
//! and infix operators by precedence.

use super::lexer::Tok;
use super::*;

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

impl Parser {
    pub(super) fn expr(&mut self) -> Result<Expr> {
        self.nested(|p| p.binary(0))
    }

    /// Comma-separated expressions up to `close` (consumed).
    pub(super) fn list(&mut self, close: &str) -> Result<Vec<Expr>> {
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
    pub(super) fn args<const N: usize>(&mut self) -> Result<[Expr; N]> {
        let args = self.list(")")?;
        let n = args.len();
        args.try_into().or_else(|_| self.fail(format!("expected {N} arguments, found {n}")))
    }

    /// Left-associative infix operators of precedence `level` and above.
    pub(super) fn binary(&mut self, level: u8) -> Result<Expr> {
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

    pub(super) fn unary(&mut self) -> Result<Expr> {
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
    pub(super) fn number(&mut self) -> Result<std::result::Result<i64, f64>> {
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
    pub(super) fn call(&mut self, span: Span) -> Result<Expr> {
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
                if let Some(f) = Intrinsic::ALL.iter().copied().find(|f| f.name() == n) {
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
    pub(super) fn intrinsic(&mut self, f: Intrinsic) -> Result<Expr> {
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
    pub(super) fn reduce(&mut self, combiner: Combiner) -> Result<Expr> {
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
}
