//! Interval bounds of integer expressions.

use std::collections::HashMap;

use crate::tir::{BinOp, Expr, Var};

/// An inclusive integer interval; `None` ends are unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The least value, or `None` when unbounded below.
    pub lo: Option<i64>,
    /// The greatest value, or `None` when unbounded above.
    pub hi: Option<i64>,
}

impl Interval {
    /// Every integer: unbounded both ways.
    pub const EVERYTHING: Interval = Interval { lo: None, hi: None };

    /// The interval holding only `v`.
    pub fn point(v: i64) -> Self {
        Interval { lo: Some(v), hi: Some(v) }
    }

    /// `lo..=hi`.
    pub fn new(lo: i64, hi: i64) -> Self {
        Interval { lo: Some(lo), hi: Some(hi) }
    }

    /// The single value, if the interval has exactly one.
    pub fn as_point(&self) -> Option<i64> {
        match (self.lo, self.hi) {
            (Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        }
    }

    fn union(self, o: Interval) -> Interval {
        Interval { lo: self.lo.zip(o.lo).map(|(a, b)| a.min(b)), hi: self.hi.zip(o.hi).map(|(a, b)| a.max(b)) }
    }

    fn add(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.zip(o.lo).and_then(|(a, b)| a.checked_add(b)),
            hi: self.hi.zip(o.hi).and_then(|(a, b)| a.checked_add(b)),
        }
    }

    fn neg(self) -> Interval {
        Interval { lo: self.hi.and_then(|v| v.checked_neg()), hi: self.lo.and_then(|v| v.checked_neg()) }
    }

    fn mul(self, o: Interval) -> Interval {
        match (self.lo, self.hi, o.lo, o.hi) {
            (Some(a), Some(b), Some(c), Some(d)) => {
                let ps = [a.checked_mul(c), a.checked_mul(d), b.checked_mul(c), b.checked_mul(d)];
                if ps.iter().any(Option::is_none) {
                    return Interval::EVERYTHING;
                }
                let ps: Vec<i64> = ps.iter().flatten().copied().collect();
                Interval { lo: ps.iter().min().copied(), hi: ps.iter().max().copied() }
            }
            _ => match (o.as_point(), self.as_point()) {
                (Some(0), _) | (_, Some(0)) => Interval::point(0),
                (Some(k), _) if k > 0 => {
                    Interval { lo: self.lo.and_then(|v| v.checked_mul(k)), hi: self.hi.and_then(|v| v.checked_mul(k)) }
                }
                (Some(k), _) if k < 0 => self.neg().mul(Interval::point(-k)),
                (_, Some(_)) => o.mul(self),
                _ => Interval::EVERYTHING,
            },
        }
    }
}

/// Known ranges of variables (from enclosing loops).
#[derive(Clone, Debug, Default)]
pub struct Bounds {
    ranges: HashMap<Var, Interval>,
}

impl Bounds {
    /// No variable bound.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record `min <= v < min + extent`.
    pub fn bind_loop(&mut self, v: &Var, min: i64, extent: i64) {
        self.ranges.insert(v.clone(), Interval::new(min, min + extent - 1));
    }

    /// Records `range` as the values `v` takes.
    pub fn bind(&mut self, v: &Var, range: Interval) {
        self.ranges.insert(v.clone(), range);
    }

    /// Forgets what is known of `v` (on leaving its scope).
    pub fn unbind(&mut self, v: &Var) {
        self.ranges.remove(v);
    }

    /// An interval holding every value `e` can take.
    pub fn interval(&self, e: &Expr) -> Interval {
        match e {
            Expr::Int(v, _) => Interval::point(*v),
            Expr::Var(v) => self.ranges.get(v).copied().unwrap_or(Interval::EVERYTHING),
            Expr::Bin(op, a, b) => {
                let (x, y) = (self.interval(a), self.interval(b));
                match op {
                    BinOp::Add => x.add(y),
                    BinOp::Sub => x.add(y.neg()),
                    BinOp::Mul => x.mul(y),
                    BinOp::Min => Interval {
                        lo: x.lo.zip(y.lo).map(|(p, q)| p.min(q)),
                        hi: match (x.hi, y.hi) {
                            (Some(p), Some(q)) => Some(p.min(q)),
                            (p, q) => p.or(q),
                        },
                    },
                    BinOp::Max => Interval {
                        lo: match (x.lo, y.lo) {
                            (Some(p), Some(q)) => Some(p.max(q)),
                            (p, q) => p.or(q),
                        },
                        hi: x.hi.zip(y.hi).map(|(p, q)| p.max(q)),
                    },
                    BinOp::FloorDiv => match y.as_point() {
                        Some(c) if c > 0 => {
                            Interval { lo: x.lo.map(|v| v.div_euclid(c)), hi: x.hi.map(|v| v.div_euclid(c)) }
                        }
                        _ => Interval::EVERYTHING,
                    },
                    BinOp::FloorMod => match y.as_point() {
                        Some(c) if c > 0 => {
                            // Within one period the value itself is the remainder.
                            match (x.lo, x.hi) {
                                (Some(lo), Some(hi)) if lo.div_euclid(c) == hi.div_euclid(c) => {
                                    Interval::new(lo.rem_euclid(c), hi.rem_euclid(c))
                                }
                                _ => Interval::new(0, c - 1),
                            }
                        }
                        _ => Interval::EVERYTHING,
                    },
                    BinOp::Div => Interval::EVERYTHING,
                }
            }
            Expr::Select(_, a, b) => self.interval(a).union(self.interval(b)),
            Expr::Cmp(..) | Expr::And(..) | Expr::Or(..) | Expr::Not(_) => Interval::new(0, 1),
            Expr::Cast(t, a) if !t.elem.is_float() => self.interval(a),
            _ => Interval::EVERYTHING,
        }
    }
}
