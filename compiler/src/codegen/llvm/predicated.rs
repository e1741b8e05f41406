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

/// The conjuncts of `c`, each with whether it is the same in every lane (a
/// scalar one, from inside a `Broadcast`).
fn conjuncts(c: &Expr) -> Vec<(&Expr, bool)> {
    fn walk<'e>(c: &'e Expr, uniform: bool, out: &mut Vec<(&'e Expr, bool)>) {
        match c {
            Expr::And(a, b) => {
                walk(a, uniform, out);
                walk(b, uniform, out);
            }
            Expr::Broadcast(s, _) => walk(s, true, out),
            c => out.push((c, uniform)),
        }
    }
    let mut out = Vec::new();
    walk(c, false, &mut out);
    out
}

/// The conjunction of the conjuncts that are (or are not) the same in every
/// lane; None where there are none.
fn conjunction(conjuncts: &[(&Expr, bool)], uniform: bool) -> Option<Expr> {
    conjuncts.iter().filter(|&&(_, u)| u == uniform).map(|&(e, _)| e.clone()).reduce(Expr::and)
}

/// The comparisons of `conjuncts`, the facts `unclamp` reads.
fn facts<'e>(conjuncts: &[(&'e Expr, bool)]) -> Vec<&'e Expr> {
    conjuncts.iter().map(|&(e, _)| e).collect()
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

/// `e` as a clamp of `x` to constant bounds: `min(max(x, lo), hi)`,
/// `max(min(x, hi), lo)`, or one side of it — `x`, `lo` and `hi`.
fn clamp_of(e: &Expr) -> Option<(&Expr, Option<i64>, Option<i64>)> {
    let Expr::Bin(op @ (BinOp::Min | BinOp::Max), x, k) = e else { return None };
    let k = constant(k)?;
    let inner = match (op, &**x) {
        (BinOp::Min, Expr::Bin(BinOp::Max, y, l)) | (BinOp::Max, Expr::Bin(BinOp::Min, y, l)) => {
            constant(l).map(|l| (&**y, l))
        }
        _ => None,
    };
    Some(match (op, inner) {
        (BinOp::Min, Some((y, lo))) => (y, Some(lo), Some(k)),
        (BinOp::Max, Some((y, hi))) => (y, Some(k), Some(hi)),
        (BinOp::Min, None) => (x, None, Some(k)),
        _ => (x, Some(k), None),
    })
}

/// `e` with every clamp (see [`clamp_of`]) that `facts` show to leave its
/// operand unchanged replaced by the operand.
fn unclamp(e: &Expr, facts: &[&Expr]) -> Expr {
    if let Some((x, lo, hi)) = clamp_of(e) {
        let above = lo.is_none_or(|l| at_least(x, l, facts));
        let below = hi.is_none_or(|h| at_most(x, h, facts));
        if above && below {
            return unclamp(x, facts);
        }
    }
    e.map_children(|c| unclamp(c, facts))
}

/// Whether `e` is floating-point zero, as a scalar or in every lane.
fn is_zero(e: &Expr) -> bool {
    match e {
        Expr::Broadcast(s, _) => is_zero(s),
        Expr::Float(v, _) => *v == 0.0,
        _ => false,
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
        let conjuncts = conjuncts(c);
        let unclamped = unclamp(&idx[0], &facts(&conjuncts));
        if unclamped == idx[0] {
            return Ok(None);
        }
        let Some(Expr::Ramp { base, stride, lanes: n }) = as_ramp(&unclamped) else { return Ok(None) };
        let (n, stride) = (n as u32, stride.as_int());
        let bits = 8 * elem.size_bytes() as u32;
        if n != lanes || !n.is_power_of_two() || n * bits > 512 || !matches!(stride, Some(1 | 2)) {
            return Ok(None);
        }
        if let (Some(stride), Some(_), true) = (stride, self.grid_row, is_zero(b)) {
            let valid = match conjunction(&conjuncts, false) {
                Some(per_lane) => super::grid::constant_lanes(&per_lane, n),
                None => Some(vec![true; n as usize]),
            };
            if let Some(valid) = valid {
                let uniform = conjunction(&conjuncts, true);
                if let Some(v) = self.grid_load(buf, (&base, stride), n, uniform.as_ref(), Some(&valid))? {
                    return Ok(Some(v.into()));
                }
            }
        }
        let vt = self.vector_type(elem, n);
        let first = self.expr(&simplify(&base, &Bounds::new()))?.into_int_value();
        let origin = self.buffer_base(buf)?;
        // Not `inbounds`: the first lane may lie before the buffer (a padded
        // image's column −1 of its first row), masked off.
        let ptr = self.e(compat::gep(&self.b, elem_type(self.ctx, elem), origin, &[first], "paddr"))?;
        let mask = self.lane_mask_of(&conjuncts, n)?;
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

    /// The `<n x i1>` mask of a condition's `conjuncts`: the per-lane ones
    /// as a vector (constant when they test constant lanes), then all lanes
    /// off unless the same-in-every-lane ones hold — one scalar `select` of
    /// the mask, where a splat `i1` and-ed in lane by lane took ~50
    /// mask-register instructions per kernel.
    fn lane_mask_of(
        &mut self,
        conjuncts: &[(&Expr, bool)],
        n: u32,
    ) -> Result<inkwell::values::VectorValue<'ctx>, CodegenError> {
        let lanes = match conjunction(conjuncts, false) {
            Some(p) => self.vexpr_or_splat(&p, n)?.into_vector_value(),
            None => {
                let on: Vec<_> = (0..n).map(|_| self.ctx.bool_type().const_int(1, false)).collect();
                VectorType::const_vector(&on)
            }
        };
        self.lanes_if(conjunction(conjuncts, true).as_ref(), lanes)
    }

    /// Mask `lanes` where the scalar test `uniform` holds, all lanes off
    /// where it does not (no test: `lanes`).
    pub(super) fn lanes_if(
        &mut self,
        uniform: Option<&Expr>,
        lanes: inkwell::values::VectorValue<'ctx>,
    ) -> Result<inkwell::values::VectorValue<'ctx>, CodegenError> {
        let Some(u) = uniform else { return Ok(lanes) };
        let u = self.expr(u)?.into_int_value();
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
        let test = conjuncts(&test);
        let plain = unclamp(&index, &facts(&test));
        assert_eq!(plain, splat(row.clone() * Expr::int(14)) + cols.clone());
        let Some(Expr::Ramp { base, .. }) = as_ramp(&plain) else { panic!("one ramp") };
        assert_eq!(*base, row.clone() * Expr::int(14) + Expr::int(-1));
        // Only the columns tested: the row's clamp stays.
        let columns_only = inside(cols.clone(), 14, true);
        let columns_only = conjuncts(&columns_only);
        assert_eq!(unclamp(&index, &facts(&columns_only)), splat(clamp(row, 13, false) * Expr::int(14)) + cols.clone());
        // A test that allows past the clamp's upper bound keeps that side.
        let wider = inside(cols.clone(), 15, true);
        let wider = conjuncts(&wider);
        let upper = Expr::bin(BinOp::Min, cols.clone(), splat(Expr::int(13)));
        assert_eq!(unclamp(&clamp(cols, 13, true), &facts(&wider)), upper);
    }
}
