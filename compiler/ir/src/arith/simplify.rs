//! The integer simplifier.

use crate::DataType;

use super::bounds::Bounds;
use crate::tir::{BinOp, CmpOp, Expr, Stmt, TirType};

/// `Σ coef · atom + constant`: the affine canonical form of an integer expression.
#[derive(Clone, Debug, Default)]
struct Linear {
    terms: Vec<(Expr, i64)>,
    constant: i64,
}

impl Linear {
    fn add_term(&mut self, atom: Expr, coef: i64) {
        if coef == 0 {
            return;
        }
        match self.terms.iter_mut().find(|(a, _)| *a == atom) {
            Some(t) => t.1 = t.1.wrapping_add(coef),
            None => self.terms.push((atom, coef)),
        }
        self.terms.retain(|(_, c)| *c != 0);
    }

    fn add(&mut self, other: Linear, scale: i64) {
        for (a, c) in other.terms {
            self.add_term(a, c.wrapping_mul(scale));
        }
        self.constant = self.constant.wrapping_add(other.constant.wrapping_mul(scale));
    }

    fn of(e: &Expr) -> Linear {
        let mut l = Linear::default();
        match e {
            Expr::Int(v, _) => l.constant = *v,
            Expr::Bin(BinOp::Add, a, b) => {
                l.add(Linear::of(a), 1);
                l.add(Linear::of(b), 1);
            }
            Expr::Bin(BinOp::Sub, a, b) => {
                l.add(Linear::of(a), 1);
                l.add(Linear::of(b), -1);
            }
            Expr::Bin(BinOp::Mul, a, b) if b.as_int().is_some() => l.add(Linear::of(a), b.as_int().unwrap_or(1)),
            Expr::Bin(BinOp::Mul, a, b) if a.as_int().is_some() => l.add(Linear::of(b), a.as_int().unwrap_or(1)),
            _ => l.add_term(e.clone(), 1),
        }
        l
    }

    /// `k·c·(x // c) + k·(x % c)` is `k·x` (floor division and modulo by a
    /// positive constant): what fusing two loops and using the fused loop's
    /// quotient and remainder as an index gives back, e.g. a row and a
    /// column fused into one run of pixels.
    fn recombine_div_mod(&mut self) {
        while let Some((q, r)) = self.terms.iter().enumerate().find_map(|(r, (atom, k))| {
            let Expr::Bin(BinOp::FloorMod, x, c) = atom else { return None };
            let c = c.as_int().filter(|&c| c > 0)?;
            let quotient = Expr::bin(BinOp::FloorDiv, (**x).clone(), Expr::Int(c, atom.ty()));
            let q = self.terms.iter().position(|(a, kq)| *a == quotient && *kq == k.wrapping_mul(c))?;
            Some((q, r))
        }) {
            let (mod_atom, k) = self.terms[r].clone();
            let Expr::Bin(_, x, _) = mod_atom else { unreachable!("found as a modulo") };
            let (first, second) = (q.max(r), q.min(r));
            self.terms.remove(first);
            self.terms.remove(second);
            self.add(Linear::of(&x), k);
        }
    }

    fn to_expr(&self, ty: TirType) -> Expr {
        let mut out: Option<Expr> = None;
        for (atom, coef) in &self.terms {
            let (term, negative) = match *coef {
                1 => (atom.clone(), false),
                -1 => (atom.clone(), true),
                c if c < 0 => (Expr::bin(BinOp::Mul, atom.clone(), Expr::Int(-c, ty)), true),
                c => (Expr::bin(BinOp::Mul, atom.clone(), Expr::Int(c, ty)), false),
            };
            out = Some(match (out, negative) {
                (None, false) => term,
                (None, true) => Expr::bin(BinOp::Sub, Expr::Int(0, ty), term),
                (Some(acc), false) => Expr::bin(BinOp::Add, acc, term),
                (Some(acc), true) => Expr::bin(BinOp::Sub, acc, term),
            });
        }
        match out {
            None => Expr::Int(self.constant, ty),
            Some(e) if self.constant == 0 => e,
            Some(e) if self.constant < 0 => Expr::bin(BinOp::Sub, e, Expr::Int(-self.constant, ty)),
            Some(e) => Expr::bin(BinOp::Add, e, Expr::Int(self.constant, ty)),
        }
    }
}

/// Integer types whose values are their `i64` values (uint64's upper half
/// is stored as negative bit patterns, so interval reasoning skips it).
fn is_index_type(t: TirType) -> bool {
    t.lanes == 1 && t.elem.is_int() && t.elem != DataType::U64
}

fn bool_const(v: bool) -> Expr {
    Expr::Int(v as i64, TirType::BOOL)
}

/// `floordiv` (`div == true`) or `floormod` of `a` by a positive constant `c`.
fn floor_div_mod(a: Expr, c: i64, div: bool, ty: TirType, bounds: &Bounds) -> Expr {
    if let Some(v) = a.as_int() {
        return Expr::Int(if div { v.div_euclid(c) } else { v.rem_euclid(c) }, ty);
    }
    if c == 1 {
        return if div { a } else { Expr::Int(0, ty) };
    }
    // floordiv(floordiv(x, a), b) = floordiv(x, a·b) for positive a, b.
    if div {
        if let Expr::Bin(BinOp::FloorDiv, x, inner) = &a {
            if let Some(k) = inner.as_int().filter(|&k| k > 0).and_then(|k| k.checked_mul(c)) {
                return floor_div_mod((**x).clone(), k, true, ty, bounds);
            }
        }
    }
    // (c·q + r) // c = q + r // c and (c·q + r) % c = r % c, for any integer q.
    let lin = Linear::of(&a);
    let mut quotient = Linear::default();
    let mut rest = Linear::default();
    for (atom, coef) in lin.terms {
        if coef % c == 0 {
            quotient.add_term(atom, coef / c);
        } else {
            rest.add_term(atom, coef);
        }
    }
    quotient.constant = lin.constant.div_euclid(c);
    rest.constant = lin.constant.rem_euclid(c);
    let rest_expr = rest.to_expr(ty);
    let r = bounds.interval(&rest_expr);
    let rest_in_range = matches!((r.lo, r.hi), (Some(lo), Some(hi)) if lo >= 0 && hi < c);
    if div {
        if rest_in_range {
            quotient.to_expr(ty)
        } else if quotient.terms.is_empty() && quotient.constant == 0 {
            Expr::bin(BinOp::FloorDiv, rest_expr, Expr::Int(c, ty))
        } else {
            let q = quotient.to_expr(ty);
            let r = Expr::bin(BinOp::FloorDiv, rest_expr, Expr::Int(c, ty));
            let mut l = Linear::of(&q);
            l.add_term(r, 1);
            l.to_expr(ty)
        }
    } else if rest_in_range {
        rest_expr
    } else {
        Expr::bin(BinOp::FloorMod, rest_expr, Expr::Int(c, ty))
    }
}

/// Simplify `e` given the variable ranges in `bounds`.
pub fn simplify(e: &Expr, bounds: &Bounds) -> Expr {
    // A select whose condition folds keeps only the chosen side, simplified
    // alone: unrolled select chains (a Winograd transform's rows) would
    // otherwise simplify every branch of every copy.
    if let Expr::Select(c, a, b) = e {
        let c = simplify(c, bounds);
        return match c.as_int() {
            Some(v) => simplify(if v != 0 { a } else { b }, bounds),
            None => simplify_node(
                Expr::Select(Box::new(c), Box::new(simplify(a, bounds)), Box::new(simplify(b, bounds))),
                bounds,
            ),
        };
    }
    simplify_node(e.map_children(|c| simplify(c, bounds)), bounds)
}

/// One node of [`simplify`] whose children are simplified already.
fn simplify_node(s: Expr, bounds: &Bounds) -> Expr {
    let ty = s.ty();
    match s {
        Expr::Bin(op, a, b) if is_index_type(ty) => {
            let (x, y) = (a.as_int(), b.as_int());
            match op {
                BinOp::Add | BinOp::Sub | BinOp::Mul => {
                    let mut l = Linear::of(&Expr::Bin(op, a, b));
                    l.recombine_div_mod();
                    l.to_expr(ty)
                }
                BinOp::FloorDiv | BinOp::FloorMod => match y {
                    Some(c) if c > 0 => floor_div_mod(*a, c, op == BinOp::FloorDiv, ty, bounds),
                    _ => Expr::Bin(op, a, b),
                },
                BinOp::Div => match (x, y) {
                    (Some(p), Some(q)) if q != 0 => Expr::Int(p.wrapping_div(q), ty),
                    (_, Some(1)) => *a,
                    _ => Expr::Bin(op, a, b),
                },
                BinOp::Min | BinOp::Max => {
                    let (ia, ib) = (bounds.interval(&a), bounds.interval(&b));
                    let a_le_b = matches!((ia.hi, ib.lo), (Some(p), Some(q)) if p <= q);
                    let b_le_a = matches!((ib.hi, ia.lo), (Some(p), Some(q)) if p <= q);
                    match (op, a_le_b, b_le_a) {
                        (BinOp::Min, true, _) | (BinOp::Max, _, true) => *a,
                        (BinOp::Min, _, true) | (BinOp::Max, true, _) => *b,
                        _ => Expr::Bin(op, a, b),
                    }
                }
            }
        }
        Expr::Bin(op, a, b) => match (&*a, &*b) {
            (Expr::Float(p, t), Expr::Float(q, _)) => {
                let v = match op {
                    BinOp::Add => p + q,
                    BinOp::Sub => p - q,
                    BinOp::Mul => p * q,
                    BinOp::Div => p / q,
                    BinOp::Min => p.min(*q),
                    BinOp::Max => p.max(*q),
                    _ => return Expr::Bin(op, a, b),
                };
                Expr::Float(v, *t)
            }
            _ => Expr::Bin(op, a, b),
        },
        Expr::Cmp(op, a, b) if is_index_type(a.ty()) => {
            let diff = simplify(&Expr::bin(BinOp::Sub, (*a).clone(), (*b).clone()), bounds);
            let d = bounds.interval(&diff);
            let decided = match op {
                CmpOp::Lt => decide(d.hi.map(|h| h < 0), d.lo.map(|l| l >= 0)),
                CmpOp::Le => decide(d.hi.map(|h| h <= 0), d.lo.map(|l| l > 0)),
                CmpOp::Gt => decide(d.lo.map(|l| l > 0), d.hi.map(|h| h <= 0)),
                CmpOp::Ge => decide(d.lo.map(|l| l >= 0), d.hi.map(|h| h < 0)),
                CmpOp::Eq => d
                    .as_point()
                    .map(|v| v == 0)
                    .or(decide(None, Some(d.lo.is_some_and(|l| l > 0) || d.hi.is_some_and(|h| h < 0)))),
                CmpOp::Ne => d
                    .as_point()
                    .map(|v| v != 0)
                    .or(decide(Some(d.lo.is_some_and(|l| l > 0) || d.hi.is_some_and(|h| h < 0)), None)),
            };
            match decided {
                Some(v) => bool_const(v),
                None => Expr::Cmp(op, a, b),
            }
        }
        Expr::And(a, b) => match (a.as_int(), b.as_int()) {
            (Some(0), _) | (_, Some(0)) => bool_const(false),
            (Some(_), _) => *b,
            (_, Some(_)) => *a,
            _ => Expr::And(a, b),
        },
        Expr::Or(a, b) => match (a.as_int(), b.as_int()) {
            (Some(x), _) if x != 0 => bool_const(true),
            (_, Some(y)) if y != 0 => bool_const(true),
            (Some(_), _) => *b,
            (_, Some(_)) => *a,
            _ => Expr::Or(a, b),
        },
        Expr::Not(a) => match a.as_int() {
            Some(v) => bool_const(v == 0),
            None => Expr::Not(a),
        },
        Expr::Select(c, a, b) => match c.as_int() {
            Some(v) if v != 0 => *a,
            Some(_) => *b,
            None if a == b => *a,
            None => Expr::Select(c, a, b),
        },
        Expr::Cast(t, a) => match *a {
            Expr::Int(v, src) if t.lanes == 1 && t.elem.is_float() => {
                Expr::Float(if src.elem == DataType::U64 { v as u64 as f64 } else { v as f64 }, t)
            }
            Expr::Int(v, _) if t.lanes == 1 && t.elem == DataType::Bool => bool_const(v != 0),
            Expr::Int(v, _) if t.lanes == 1 => Expr::Int(wrap_int(v, t.elem), t),
            ref inner if inner.ty() == t => (*a).clone(),
            _ => Expr::Cast(t, a),
        },
        other => other,
    }
}

/// `Some(true)` if `yes` holds, `Some(false)` if `no` holds, else undecided.
fn decide(yes: Option<bool>, no: Option<bool>) -> Option<bool> {
    if yes == Some(true) {
        Some(true)
    } else if no == Some(true) {
        Some(false)
    } else {
        None
    }
}

fn wrap_int(v: i64, elem: DataType) -> i64 {
    match elem {
        DataType::I32 => v as i32 as i64,
        DataType::I16 => v as i16 as i64,
        DataType::I8 => v as i8 as i64,
        DataType::U8 => v as u8 as i64,
        DataType::U16 => v as u16 as i64,
        DataType::U32 => v as u32 as i64,
        _ => v,
    }
}

/// Simplify every expression of a statement, using the ranges of the loops
/// around it; loops of one iteration disappear, decided conditions keep one branch.
pub fn simplify_stmt(s: Stmt, bounds: &mut Bounds) -> Stmt {
    match s {
        Stmt::For(mut l) => {
            l.min = simplify(&l.min, bounds);
            l.extent = simplify(&l.extent, bounds);
            match (l.min.as_int(), l.extent.as_int()) {
                (_, Some(e)) if e <= 0 => Stmt::nop(),
                (Some(m), Some(1)) => {
                    let v = l.var.clone();
                    let body = l.body.map_exprs(&mut |e| e.substitute(&|w| (w == &v).then_some(Expr::Int(m, w.ty))));
                    simplify_stmt(body, bounds)
                }
                (Some(m), Some(e)) => {
                    bounds.bind_loop(&l.var, m, e);
                    let body = std::mem::replace(&mut l.body, Stmt::nop());
                    l.body = simplify_stmt(body, bounds);
                    bounds.unbind(&l.var);
                    if l.body.is_nop() {
                        Stmt::nop()
                    } else {
                        Stmt::For(l)
                    }
                }
                _ => {
                    let body = std::mem::replace(&mut l.body, Stmt::nop());
                    l.body = simplify_stmt(body, bounds);
                    Stmt::For(l)
                }
            }
        }
        Stmt::Store { buffer, indices, value } => Stmt::Store {
            buffer,
            indices: indices.iter().map(|i| simplify(i, bounds)).collect(),
            value: simplify(&value, bounds),
        },
        Stmt::Allocate { buffer, body } => Stmt::Allocate { buffer, body: Box::new(simplify_stmt(*body, bounds)) },
        Stmt::If { cond, then_case, else_case } => {
            let cond = simplify(&cond, bounds);
            match cond.as_int() {
                Some(v) if v != 0 => simplify_stmt(*then_case, bounds),
                Some(_) => else_case.map_or_else(Stmt::nop, |e| simplify_stmt(*e, bounds)),
                None => Stmt::If {
                    cond,
                    then_case: Box::new(simplify_stmt(*then_case, bounds)),
                    else_case: else_case.map(|e| Box::new(simplify_stmt(*e, bounds))),
                },
            }
        }
        Stmt::Seq(v) => Stmt::seq(v.into_iter().map(|s| simplify_stmt(s, bounds)).collect()),
        Stmt::Let { var, value, body } => {
            let value = simplify(&value, bounds);
            let range = bounds.interval(&value);
            bounds.bind(&var, range);
            let body = simplify_stmt(*body, bounds);
            bounds.unbind(&var);
            Stmt::Let { var, value, body: Box::new(body) }
        }
        Stmt::Evaluate(e) => Stmt::Evaluate(simplify(&e, bounds)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::{print_expr, Var};

    fn simp(e: Expr, ranges: &[(&Var, i64, i64)]) -> String {
        let mut b = Bounds::new();
        for (v, min, ext) in ranges {
            b.bind_loop(v, *min, *ext);
        }
        print_expr(&simplify(&e, &b))
    }

    #[test]
    fn affine_canonical_form() {
        let i = Var::index("i");
        let j = Var::index("j");
        let e =
            (Expr::var(&i) * Expr::int(4) + Expr::var(&j)) - Expr::var(&i) * Expr::int(4) + Expr::int(3) - Expr::int(1);
        assert_eq!(simp(e, &[]), "(j + 2)");
        assert_eq!(simp(Expr::int(2) * Expr::int(3) + Expr::int(1), &[]), "7");
    }

    #[test]
    fn split_indices_recombine() {
        // (io * 8 + ii) // 8 == io and % 8 == ii when 0 <= ii < 8.
        let io = Var::index("io");
        let ii = Var::index("ii");
        let fused = Expr::var(&io) * Expr::int(8) + Expr::var(&ii);
        let div = Expr::bin(BinOp::FloorDiv, fused.clone(), Expr::int(8));
        let m = Expr::bin(BinOp::FloorMod, fused, Expr::int(8));
        assert_eq!(simp(div, &[(&io, 0, 4), (&ii, 0, 8)]), "io");
        assert_eq!(simp(m, &[(&io, 0, 4), (&ii, 0, 8)]), "ii");
        // Without bounds the remainder part stays.
        let x = Var::index("x");
        let e = Expr::bin(BinOp::FloorDiv, Expr::var(&x) + Expr::int(17), Expr::int(8));
        assert_eq!(simp(e, &[]), "(((x + 1) // 8) + 2)");
    }

    #[test]
    fn fused_quotient_and_remainder_recombine() {
        // (f // 28) * 28 + f % 28 == f, also scaled and with f itself a sum.
        let f = Var::index("f");
        let (fo, fi) = (Var::index("fo"), Var::index("fi"));
        let pixel = |x: Expr| {
            Expr::bin(BinOp::FloorDiv, x.clone(), Expr::int(28)) * Expr::int(28)
                + Expr::bin(BinOp::FloorMod, x, Expr::int(28))
        };
        assert_eq!(simp(pixel(Expr::var(&f)), &[]), "f");
        let split = Expr::var(&fo) * Expr::int(16) + Expr::var(&fi);
        let e = Expr::var(&f) * Expr::int(784) + pixel(split) * Expr::int(2);
        assert_eq!(simp(e, &[]), "(((f * 784) + (fo * 32)) + (fi * 2))");
        // A quotient of another scale stays.
        let e = Expr::bin(BinOp::FloorDiv, Expr::var(&f), Expr::int(28)) * Expr::int(27)
            + Expr::bin(BinOp::FloorMod, Expr::var(&f), Expr::int(28));
        assert_eq!(simp(e, &[]), "(((f // 28) * 27) + (f % 28))");
    }

    #[test]
    fn tail_conditions_decided_by_bounds() {
        let i = Var::index("i");
        let lt = Expr::cmp(CmpOp::Lt, Expr::var(&i), Expr::int(10));
        assert_eq!(simp(lt.clone(), &[(&i, 0, 10)]), "True");
        assert_eq!(simp(lt.clone(), &[(&i, 0, 11)]), "(i < 10)");
        let ge = Expr::cmp(CmpOp::Ge, Expr::var(&i), Expr::int(0));
        assert_eq!(simp(ge, &[(&i, 0, 3)]), "True");
        let mn = Expr::bin(BinOp::Min, Expr::var(&i), Expr::int(100));
        assert_eq!(simp(mn, &[(&i, 0, 3)]), "i");
    }

    #[test]
    fn unit_loops_vanish() {
        let i = Var::index("i");
        let b = crate::tir::Buffer::new("A", DataType::F32, vec![4], crate::tir::Scope::Global);
        let body = Stmt::Store {
            buffer: b,
            indices: vec![Expr::var(&i) + Expr::int(1)],
            value: Expr::float(0.0, DataType::F32),
        };
        let l = Stmt::for_loop(i, 1, crate::tir::ForKind::Serial, body);
        let s = simplify_stmt(l, &mut Bounds::new());
        assert_eq!(crate::tir::print_stmt(&s), "A[1] = T.float32(0.0)\n");
    }
}
