//! VectorizeLoop: a `T.vectorized` loop becomes straight-line vector code —
//! its variable a `Ramp`, loop-invariant operands `Broadcast` — so that
//! backends emit vector loads, stores and arithmetic (TVM's `tir.VectorizeLoop`).
//!
//! A loop that cannot be vectorized safely (an inner loop or condition, a
//! `let`, a store whose address does not vary with the loop, a buffer read at
//! another index than it is written) stays a serial loop: the schedule's
//! request is a hint, never a change of meaning.

use crate::arith::{simplify, Bounds};
use crate::tir::{BinOp, CmpOp, Expr, For, ForKind, Intrinsic, PrimFunc, Stmt, TirType, Var};

fn bcast(e: Expr, lanes: u16) -> Expr {
    if e.ty().lanes == 1 {
        Expr::Broadcast(Box::new(e), lanes)
    } else {
        e
    }
}

fn is_vector(e: &Expr) -> bool {
    e.ty().lanes > 1
}

struct Vectorizer<'a> {
    var: &'a Var,
    min: Expr,
    lanes: u16,
}

impl Vectorizer<'_> {
    fn expr(&self, e: &Expr) -> Option<Expr> {
        Some(match self.expr_raw(e)? {
            Expr::Ramp { base, stride, lanes } => Expr::Ramp {
                base: Box::new(simplify(&base, &Bounds::new())),
                stride: Box::new(simplify(&stride, &Bounds::new())),
                lanes,
            },
            other => other,
        })
    }

    fn expr_raw(&self, e: &Expr) -> Option<Expr> {
        let l = self.lanes;
        Some(match e {
            Expr::Var(v) if v == self.var => {
                Expr::Ramp { base: Box::new(self.min.clone()), stride: Box::new(Expr::int(1)), lanes: l }
            }
            Expr::Int(..) | Expr::Float(..) | Expr::Var(_) => e.clone(),
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                if !is_vector(&a) && !is_vector(&b) {
                    return Some(Expr::bin(*op, a, b));
                }
                match (op, &a, &b) {
                    // Index arithmetic stays affine: ramps combine with scalars and ramps.
                    (BinOp::Add | BinOp::Sub, Expr::Ramp { base, stride, .. }, s) if !is_vector(s) => Expr::Ramp {
                        base: Box::new(Expr::bin(*op, (**base).clone(), s.clone())),
                        stride: stride.clone(),
                        lanes: l,
                    },
                    (BinOp::Add, s, Expr::Ramp { base, stride, .. }) if !is_vector(s) => {
                        Expr::Ramp { base: Box::new(s.clone() + (**base).clone()), stride: stride.clone(), lanes: l }
                    }
                    (
                        BinOp::Add | BinOp::Sub,
                        Expr::Ramp { base: b1, stride: s1, .. },
                        Expr::Ramp { base: b2, stride: s2, .. },
                    ) => Expr::Ramp {
                        base: Box::new(Expr::bin(*op, (**b1).clone(), (**b2).clone())),
                        stride: Box::new(Expr::bin(*op, (**s1).clone(), (**s2).clone())),
                        lanes: l,
                    },
                    (BinOp::Mul, Expr::Ramp { base, stride, .. }, s)
                    | (BinOp::Mul, s, Expr::Ramp { base, stride, .. })
                        if !is_vector(s) =>
                    {
                        Expr::Ramp {
                            base: Box::new((**base).clone() * s.clone()),
                            stride: Box::new((**stride).clone() * s.clone()),
                            lanes: l,
                        }
                    }
                    _ => Expr::bin(*op, bcast(a, l), bcast(b, l)),
                }
            }
            Expr::Cmp(op, a, b) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                if is_vector(&a) || is_vector(&b) {
                    Expr::cmp(*op, bcast(a, l), bcast(b, l))
                } else {
                    Expr::cmp(*op, a, b)
                }
            }
            Expr::And(a, b) | Expr::Or(a, b) => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                let (x, y) = if is_vector(&x) || is_vector(&y) { (bcast(x, l), bcast(y, l)) } else { (x, y) };
                match e {
                    Expr::And(..) => Expr::And(Box::new(x), Box::new(y)),
                    _ => Expr::Or(Box::new(x), Box::new(y)),
                }
            }
            Expr::Not(a) => Expr::Not(Box::new(self.expr(a)?)),
            Expr::Select(c, a, b) => {
                let (c, a, b) = (self.expr(c)?, self.expr(a)?, self.expr(b)?);
                if is_vector(&c) || is_vector(&a) || is_vector(&b) {
                    Expr::select(bcast(c, l), bcast(a, l), bcast(b, l))
                } else {
                    Expr::select(c, a, b)
                }
            }
            Expr::Cast(t, a) => {
                let a = self.expr(a)?;
                let lanes = a.ty().lanes;
                Expr::cast(t.with_lanes(lanes), a)
            }
            Expr::Load(b, idx) => Expr::Load(b.clone(), idx.iter().map(|i| self.expr(i)).collect::<Option<_>>()?),
            Expr::Call(f, args, t) => {
                let args: Vec<Expr> = args.iter().map(|a| self.expr(a)).collect::<Option<_>>()?;
                if args.iter().any(is_vector) {
                    Expr::Call(*f, args.into_iter().map(|a| bcast(a, l)).collect(), t.with_lanes(l))
                } else {
                    Expr::Call(*f, args, *t)
                }
            }
            Expr::Ramp { .. } | Expr::Broadcast(..) | Expr::Reduce(_) => return None,
        })
    }

    fn stmt(&self, s: &Stmt) -> Option<Stmt> {
        match s {
            Stmt::Seq(v) => Some(Stmt::Seq(v.iter().map(|s| self.stmt(s)).collect::<Option<_>>()?)),
            Stmt::Store { buffer, indices, value } => {
                let indices: Vec<Expr> = indices.iter().map(|i| self.expr(i)).collect::<Option<_>>()?;
                // Every lane must write its own element.
                if !indices.iter().any(is_vector) {
                    return None;
                }
                let value = bcast(self.expr(value)?, self.lanes);
                Some(Stmt::Store { buffer: buffer.clone(), indices, value })
            }
            Stmt::Evaluate(e) if s.is_nop() => Some(Stmt::Evaluate(e.clone())),
            _ => None,
        }
    }
}

/// Loads of each stored buffer read only the element being written (no
/// dependence between lanes).
fn lanes_independent(body: &Stmt) -> bool {
    let mut stores: Vec<(u32, Vec<Expr>)> = Vec::new();
    body.visit(&mut |s| {
        if let Stmt::Store { buffer, indices, .. } = s {
            stores.push((buffer.id(), indices.clone()));
        }
    });
    let mut ok = true;
    fn loads(e: &Expr, stores: &[(u32, Vec<Expr>)], ok: &mut bool) {
        if let Expr::Load(b, idx) = e {
            for (id, sidx) in stores {
                if *id == b.id() && sidx != idx {
                    *ok = false;
                }
            }
        }
        e.for_each_child(|c| loads(c, stores, ok));
    }
    body.clone().map_exprs(&mut |e| {
        loads(&e, &stores, &mut ok);
        e
    });
    // Two stores to one buffer must be at one index too.
    for (k, (id, idx)) in stores.iter().enumerate() {
        if stores[..k].iter().any(|(j, jdx)| j == id && jdx != idx) {
            ok = false;
        }
    }
    ok
}

/// `for v in m..m+n { if v + k < c { S } }` is `for v in m..c-k { S }`: the
/// tail check of a split (or of a whole tile's write-back) becomes a shorter
/// loop that vectorizes, instead of a serial loop around a condition.
fn tail_to_extent(l: For) -> Stmt {
    let (Some(min), Some(ext)) = (l.min.as_int(), l.extent.as_int()) else { return Stmt::For(Box::new(l)) };
    let Stmt::If { cond: Expr::Cmp(CmpOp::Lt, a, c), else_case: None, .. } = &l.body else {
        return Stmt::For(Box::new(l));
    };
    let offset = match &**a {
        Expr::Var(v) if *v == l.var => Some(0),
        Expr::Bin(BinOp::Add, x, y) => match (&**x, &**y) {
            (Expr::Var(v), k) | (k, Expr::Var(v)) if *v == l.var => k.as_int(),
            _ => None,
        },
        _ => None,
    };
    let (Some(k), Some(c)) = (offset, c.as_int()) else { return Stmt::For(Box::new(l)) };
    let end = (c - k).clamp(min, min + ext);
    if end == min {
        return Stmt::nop();
    }
    let Stmt::If { then_case, .. } = l.body else { unreachable!("matched above") };
    Stmt::For(Box::new(For { extent: Expr::int(end - min), body: *then_case, ..l }))
}

fn vectorize_loop(l: For) -> Stmt {
    let l = match tail_to_extent(l) {
        Stmt::For(l) => *l,
        other => return other,
    };
    let lanes = l.extent.as_int().filter(|&n| (2..=64).contains(&n));
    let vectorized = lanes.filter(|_| lanes_independent(&l.body)).and_then(|n| {
        let v = Vectorizer { var: &l.var, min: l.min.clone(), lanes: n as u16 };
        v.stmt(&l.body)
    });
    match vectorized {
        Some(s) => s,
        None => Stmt::For(Box::new(For { kind: ForKind::Serial, ..l })),
    }
}

/// Turn every vectorized loop of `f` into vector code (or a serial loop where it cannot be).
pub fn vectorize_loops(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::For(l) if l.kind == ForKind::Vectorized => vectorize_loop(*l),
        s => s,
    });
    f
}

/// Lane `k` of a vector expression as a scalar expression (for backends and
/// operations without a vector form): ramps become `base + k·stride`,
/// broadcasts their scalar.
pub fn lane_of(e: &Expr, k: u16) -> Expr {
    lane(e, &Expr::int(k as i64), Some(k)).expect("a constant lane has a scalar form")
}

/// Lane `lane` (an index expression, e.g. a loop variable) of a vector
/// expression, for a backend that loops over a vector's lanes instead of
/// writing each one out: as [`lane_of`], with the lane symbolic. None where a
/// node has no per-lane form for a symbolic lane (a dot product's bytes).
pub fn lane_at(e: &Expr, lane_index: &Expr) -> Option<Expr> {
    lane(e, lane_index, None)
}

/// Lane `at` of `e`, where `k` is that lane as a constant if it is one (a
/// dot product's bytes need it).
fn lane(e: &Expr, at: &Expr, k: Option<u16>) -> Option<Expr> {
    Some(match e {
        Expr::Ramp { base, stride, .. } => (**base).clone() + (**stride).clone() * at.clone(),
        Expr::Broadcast(x, _) => (**x).clone(),
        Expr::Cast(t, a) => Expr::cast(TirType::scalar(t.elem), lane(a, at, k)?),
        // Lane k of a dot product: its accumulator plus the four bytes of
        // word k of `a` times bytes 4k … 4k + 3 of `b` (a scalar word or 4
        // bytes: the same for every lane).
        Expr::Call(Intrinsic::DotU8I8, args, _) if args.len() == 3 => {
            use crate::dtype::DataType::{I32, U32};
            let k = k?;
            let i32 = |e: Expr| Expr::cast(TirType::scalar(I32), e);
            let word = if args[1].ty().lanes == 1 { args[1].clone() } else { lane_of(&args[1], k) };
            let shared = args[2].ty().lanes == 4;
            (0..4u16).fold(lane_of(&args[0], k), |acc, j| {
                let shifted = Expr::bin(BinOp::FloorDiv, word.clone(), Expr::constant((1u64 << (8 * j)) as f64, U32));
                let byte = Expr::bin(BinOp::FloorMod, shifted, Expr::constant(256.0, U32));
                let b = lane_of(&args[2], if shared { j } else { 4 * k + j });
                acc + i32(byte) * i32(b)
            })
        }
        Expr::Call(f, args, t) => {
            let args = args.iter().map(|a| lane(a, at, k)).collect::<Option<Vec<_>>>()?;
            Expr::Call(*f, args, TirType::scalar(t.elem))
        }
        _ => {
            let mut whole = true;
            let scalar = e.map_children(|c| {
                lane(c, at, k).unwrap_or_else(|| {
                    whole = false;
                    c.clone()
                })
            });
            return whole.then_some(scalar);
        }
    })
}
