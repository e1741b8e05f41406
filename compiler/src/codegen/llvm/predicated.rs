//! Predicated loads: `Select(c, buf[… clamp(e) …], z)` — a padded image read
//! in place, `c` the test that the position is inside the image and the
//! clamp keeping the unselected lanes' reads in bounds — where `c` bounds
//! every clamped `e`, is `buf[… e …]` under `c`. On AVX-512 that is one
//! masked load (`vmovups` with a mask register: a masked-off lane is neither
//! read nor faults), where the clamped lanes were a gather. A depthwise
//! convolution then reads its input rows in place instead of from a padded
//! copy stored just before (see `schedule::conv2d::depthwise`). A stride-2
//! index (a stride-2 window's row) is the masked loads of the span its lanes
//! cover and one permute of the even elements.

use inkwell::types::VectorType;
use inkwell::values::BasicValueEnum;
use kiln_ir::arith::{simplify, Bounds};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{BinOp, CmpOp, Expr};

/// The integer constant `e` is, as a scalar or the same in every lane.
fn constant(e: &Expr) -> Option<i64> {
    match e {
        Expr::Broadcast(s, _) => s.as_int(),
        e => e.as_int(),
    }
}

/// The comparisons `c` is a conjunction of (a condition the same in every
/// lane, `Broadcast(c)`, contributes its scalar ones).
fn conjuncts<'e>(c: &'e Expr, out: &mut Vec<&'e Expr>) {
    match c {
        Expr::And(a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        Expr::Broadcast(s, _) => conjuncts(s, out),
        c => out.push(c),
    }
}

/// `c`'s conjuncts split into those the same in every lane (scalars, from
/// `Broadcast`) and per-lane ones.
fn split_uniform(c: &Expr, uniform: &mut Vec<Expr>, per_lane: &mut Vec<Expr>) {
    match c {
        Expr::And(a, b) => {
            split_uniform(a, uniform, per_lane);
            split_uniform(b, uniform, per_lane);
        }
        Expr::Broadcast(s, _) => uniform.push(s.as_ref().clone()),
        c => per_lane.push(c.clone()),
    }
}

/// Whether one of `facts` says `e ≥ lo`.
fn at_least(e: &Expr, lo: i64, facts: &[&Expr]) -> bool {
    facts.iter().any(|f| match f {
        Expr::Cmp(CmpOp::Ge, x, k) => **x == *e && constant(k).is_some_and(|k| k >= lo),
        Expr::Cmp(CmpOp::Gt, x, k) => **x == *e && constant(k).is_some_and(|k| k + 1 >= lo),
        _ => false,
    })
}

/// Whether one of `facts` says `e ≤ hi`.
fn at_most(e: &Expr, hi: i64, facts: &[&Expr]) -> bool {
    facts.iter().any(|f| match f {
        Expr::Cmp(CmpOp::Lt, x, k) => **x == *e && constant(k).is_some_and(|k| k - 1 <= hi),
        Expr::Cmp(CmpOp::Le, x, k) => **x == *e && constant(k).is_some_and(|k| k <= hi),
        _ => false,
    })
}

/// `e` with every clamp `min(max(x, lo), hi)` (or one side of it) that
/// `facts` show to leave `x` unchanged replaced by `x`.
fn unclamp(e: &Expr, facts: &[&Expr]) -> Expr {
    let bound = |b: &Expr| constant(b);
    match e {
        Expr::Bin(BinOp::Min, x, hi) => match (&**x, bound(hi)) {
            (Expr::Bin(BinOp::Max, y, lo), Some(h)) => match bound(lo) {
                Some(l) if at_least(y, l, facts) && at_most(y, h, facts) => unclamp(y, facts),
                _ => e.map_children(|c| unclamp(c, facts)),
            },
            (x, Some(h)) if at_most(x, h, facts) => unclamp(x, facts),
            _ => e.map_children(|c| unclamp(c, facts)),
        },
        Expr::Bin(BinOp::Max, x, lo) => match (&**x, bound(lo)) {
            (Expr::Bin(BinOp::Min, y, hi), Some(l)) => match bound(hi) {
                Some(h) if at_least(y, l, facts) && at_most(y, h, facts) => unclamp(y, facts),
                _ => e.map_children(|c| unclamp(c, facts)),
            },
            (x, Some(l)) if at_least(x, l, facts) => unclamp(x, facts),
            _ => e.map_children(|c| unclamp(c, facts)),
        },
        e => e.map_children(|c| unclamp(c, facts)),
    }
}

/// `e` as one `Ramp`: a ramp, or a ramp plus the same value in every lane
/// (`Broadcast(a) + Ramp(b, s)` is `Ramp(a + b, s)`).
fn as_ramp(e: &Expr) -> Option<Expr> {
    match e {
        Expr::Ramp { .. } => Some(e.clone()),
        Expr::Bin(BinOp::Add, x, y) => {
            let (splat, ramp) = match (&**x, &**y) {
                (Expr::Broadcast(a, _), r) | (r, Expr::Broadcast(a, _)) => (a, as_ramp(r)?),
                _ => return None,
            };
            let Expr::Ramp { base, stride, lanes } = ramp else { return None };
            Some(Expr::Ramp { base: Box::new(splat.as_ref().clone() + *base), stride, lanes })
        }
        _ => None,
    }
}

impl<'ctx> FnGen<'_, 'ctx> {
    /// `Select(c, a, b)` as one masked load where `a` reads a contiguous
    /// vector of a buffer the kernel does not store to (a masked load cannot
    /// forward from a store in flight) at an index clamped only for the
    /// lanes `c` leaves out; `b` fills those lanes. None where that does not
    /// apply: the caller then computes both sides and selects.
    pub(super) fn predicated_load(
        &mut self,
        c: &Expr,
        a: &Expr,
        b: &Expr,
        lanes: u32,
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let Expr::Load(buf, idx) = a else { return Ok(None) };
        let elem = buf.elem();
        if !self.features.masked_partial
            || idx.len() != 1
            || elem == DataType::Bool
            || !matches!(elem.size_bytes(), 4 | 8)
            || self.stored.contains(&buf.id())
        {
            return Ok(None);
        }
        let mut facts = Vec::new();
        conjuncts(c, &mut facts);
        let unclamped = unclamp(&idx[0], &facts);
        if unclamped == idx[0] {
            return Ok(None);
        }
        let Some(Expr::Ramp { base, stride, lanes: n }) = as_ramp(&unclamped) else { return Ok(None) };
        let (n, stride) = (n as u32, stride.as_int());
        let bits = 8 * elem.size_bytes() as u32;
        if n != lanes || !n.is_power_of_two() || n * bits > 512 || !matches!(stride, Some(1 | 2)) {
            return Ok(None);
        }
        let vt = self.vector_type(elem, n);
        let first = self.expr(&simplify(&base, &Bounds::new()))?.into_int_value();
        let origin = self.buffer_base(buf)?;
        // Not `inbounds`: the first lane may lie before the buffer (a padded
        // image's column −1 of its first row), masked off.
        let ptr = self.e(compat::gep(&self.b, elem_type(self.ctx, elem), origin, &[first], "paddr"))?;
        let mask = self.lane_mask_of(c, n)?;
        let fill = self.vexpr_or_splat(b, n)?.into_vector_value();
        if stride == Some(1) {
            return Ok(Some(self.masked_load_at(ptr, vt, mask, fill, bits / 8)?.into()));
        }
        // Stride 2 (a stride-2 window's row): the two vectors the lanes'
        // span covers, each element loaded where its lane is kept (the odd
        // ones never), then one two-input permute of the even elements.
        let i32t = self.ctx.i32_type();
        let spread = |half: u32, zero_at: u32| -> Vec<inkwell::values::IntValue<'ctx>> {
            (0..n)
                .map(|k| {
                    if k % 2 == 0 {
                        i32t.const_int((half * n / 2 + k / 2) as u64, false)
                    } else {
                        i32t.const_int(zero_at as u64, false)
                    }
                })
                .collect()
        };
        let off = mask.get_type().const_zero();
        let mut halves = Vec::new();
        for half in 0..2 {
            let pick = VectorType::const_vector(&spread(half, n));
            let half_mask = self.e(self.b.build_shuffle_vector(mask, off, pick, "hmask"))?;
            let half_fill =
                self.e(self.b.build_shuffle_vector(fill, fill, VectorType::const_vector(&spread(half, 0)), "hfill"))?;
            let at = i32t.const_int((half * n) as u64, false);
            let half_ptr = self.e(compat::gep(&self.b, elem_type(self.ctx, elem), ptr, &[at], "hptr"))?;
            halves.push(self.masked_load_at(half_ptr, vt, half_mask, half_fill, bits / 8)?);
        }
        let evens: Vec<_> = (0..n).map(|k| i32t.const_int((2 * k) as u64, false)).collect();
        let v = self.b.build_shuffle_vector(halves[0], halves[1], VectorType::const_vector(&evens), "evens");
        Ok(Some(self.e(v)?.into()))
    }

    /// `llvm.masked.load` of `vt` at `ptr` (any address: masked-off lanes
    /// are not read), `fill` in those lanes, `align` bytes aligned.
    pub(super) fn masked_load_at(
        &mut self,
        ptr: inkwell::values::PointerValue<'ctx>,
        vt: VectorType<'ctx>,
        mask: inkwell::values::VectorValue<'ctx>,
        fill: inkwell::values::VectorValue<'ctx>,
        align: u32,
    ) -> Result<inkwell::values::VectorValue<'ctx>, CodegenError> {
        let vptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "pvptr"))?;
        let decl = inkwell::intrinsics::Intrinsic::find("llvm.masked.load")
            .and_then(|i| i.get_declaration(self.module, &[vt.into(), vptr.get_type().into()]))
            .ok_or_else(|| self.unsupported("llvm.masked.load"))?;
        // Element-aligned (as the buffer's elements are).
        let align = self.ctx.i32_type().const_int(align as u64, false);
        let args: [inkwell::values::BasicMetadataValueEnum; 4] = [vptr.into(), align.into(), mask.into(), fill.into()];
        let call = self.e(self.b.build_call(decl, &args, "pload"))?;
        match call.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(v.into_vector_value()),
            inkwell::values::ValueKind::Instruction(_) => Err(self.unsupported("a void masked load")),
        }
    }

    /// The `<n x i1>` mask of condition `c`: its per-lane conjuncts as a
    /// vector (constant when they test constant lanes), then all lanes off
    /// unless its same-in-every-lane ones hold — one scalar `select` of the
    /// mask, where a splat `i1` and-ed in lane by lane took ~50 mask-register
    /// instructions per kernel.
    fn lane_mask_of(&mut self, c: &Expr, n: u32) -> Result<inkwell::values::VectorValue<'ctx>, CodegenError> {
        let (mut uniform, mut per_lane) = (Vec::new(), Vec::new());
        split_uniform(c, &mut uniform, &mut per_lane);
        let all = |v: Vec<Expr>| v.into_iter().reduce(Expr::and);
        let lanes = match all(per_lane) {
            Some(p) => self.vexpr_or_splat(&p, n)?.into_vector_value(),
            None => {
                let on: Vec<_> = (0..n).map(|_| self.ctx.bool_type().const_int(1, false)).collect();
                inkwell::types::VectorType::const_vector(&on)
            }
        };
        let Some(u) = all(uniform) else { return Ok(lanes) };
        let u = self.expr(&u)?.into_int_value();
        let off = lanes.get_type().const_zero();
        Ok(self.e(self.b.build_select(u, lanes, off, "rowmask"))?.into_vector_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::Var;

    fn ramp(base: Expr) -> Expr {
        Expr::Ramp { base: Box::new(base), stride: Box::new(Expr::int(1)), lanes: 16 }
    }
    fn splat(e: Expr) -> Expr {
        Expr::Broadcast(Box::new(e), 16)
    }

    /// A padded image's read in place, `Select(row and columns inside,
    /// x[row·14 + clamp(col)], 0)`: the clamps the test covers go (the row's
    /// scalar one inside a `Broadcast`, the columns' per lane), and the index
    /// is one ramp; a clamp the test does not bound stays.
    #[test]
    fn clamps_bounded_by_the_test_are_dropped() {
        let row = Expr::var(&Var::index("row"));
        let cols = ramp(Expr::int(-1));
        let clamp = |e: Expr, hi: i64, lanes: bool| {
            let (lo, hi) =
                if lanes { (splat(Expr::int(0)), splat(Expr::int(hi))) } else { (Expr::int(0), Expr::int(hi)) };
            Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, e, lo), hi)
        };
        let inside = |e: Expr, n: i64, lanes: bool| {
            let (lo, hi) =
                if lanes { (splat(Expr::int(0)), splat(Expr::int(n))) } else { (Expr::int(0), Expr::int(n)) };
            Expr::and(Expr::cmp(CmpOp::Ge, e.clone(), lo), Expr::cmp(CmpOp::Lt, e, hi))
        };
        let index = splat(clamp(row.clone(), 13, false) * Expr::int(14)) + clamp(cols.clone(), 13, true);
        let test = Expr::and(splat(inside(row.clone(), 14, false)), inside(cols.clone(), 14, true));
        let mut facts = Vec::new();
        conjuncts(&test, &mut facts);
        let plain = unclamp(&index, &facts);
        assert_eq!(plain, splat(row.clone() * Expr::int(14)) + cols.clone());
        let Some(Expr::Ramp { base, .. }) = as_ramp(&plain) else { panic!("one ramp") };
        assert_eq!(*base, row.clone() * Expr::int(14) + Expr::int(-1));
        // Only the columns tested: the row's clamp stays.
        let mut facts = Vec::new();
        let columns_only = inside(cols.clone(), 14, true);
        conjuncts(&columns_only, &mut facts);
        assert_eq!(unclamp(&index, &facts), splat(clamp(row, 13, false) * Expr::int(14)) + cols.clone());
        // A test that allows past the clamp's upper bound keeps that side.
        let mut facts = Vec::new();
        let wider = inside(cols.clone(), 15, true);
        conjuncts(&wider, &mut facts);
        let upper = Expr::bin(BinOp::Min, cols.clone(), splat(Expr::int(13)));
        assert_eq!(unclamp(&clamp(cols, 13, true), &facts), upper);
    }
}
