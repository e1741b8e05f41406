//! Row gathers: loads at arbitrary per-lane indices that a statement
//! sequence repeats at consecutive constant offsets — a Winograd input
//! transform's tile stage, `tile[q] = pad[base(tiles) + off(q)]` for the
//! tile's positions `q`, each row of positions `off = i·w + j` for `j` in
//! `0..α` — are read per lane as one row of the run, and the rows transposed
//! into one vector per offset.
//!
//! Element by element (a CPU without fast gathers: AMD's, or AVX2) the 36
//! positions of 16 tiles took 576 scalar loads and as many inserts, three
//! quarters of the kernel's instructions; as rows, 16 row loads and one
//! 16 × 16 transpose (in rounds of two-input interleaves, the columns no
//! offset reads dropped by LLVM) per row of positions: on Zen 5 YOLOv8n's
//! and ResNet-18's input transforms 0.65–0.90× the time (AVX-512), 0.86–0.87×
//! (AVX2 code).

use std::collections::HashMap;

use inkwell::types::VectorType;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, VectorValue};
use kiln_ir::DataType;

use super::*;
use crate::arith::{simplify, Bounds};
use crate::codegen::CodegenError;
use crate::tir::transform::lane_of;
use crate::tir::{BinOp, Buffer, Expr, Stmt};

/// A run of row-gathered offsets: the buffer, the per-lane base's text and
/// the run's first offset.
pub(super) type RowKey = (u32, String, i64);

/// The fewest consecutive offsets read as rows (fewer: element by element)
/// on 16 lanes, and on 8: there rows of 4 (an F(2 × 2, 3 × 3) tile's) were
/// 1.07× slower than element by element (ResNet-18's 7 × 7 transform, AVX2
/// code on Zen 5), rows of 6 0.85–1.00×.
const MIN_ROW: i64 = 3;
const MIN_ROW_ON_8_LANES: i64 = 5;

/// `idx` as a non-affine per-lane base and a constant offset: `B + c` (or
/// `B`, offset 0), where `B` is not a ramp.
fn split_offset(idx: &Expr) -> Option<(&Expr, i64)> {
    let (base, c): (&Expr, i64) = match idx {
        Expr::Bin(BinOp::Add, a, b) => match &**b {
            Expr::Broadcast(c, _) => (a, c.as_int()?),
            _ => (idx, 0),
        },
        _ => (idx, 0),
    };
    (!matches!(base, Expr::Ramp { .. } | Expr::Broadcast(..))).then_some((base, c))
}

impl<'ctx> FnGen<'_, 'ctx> {
    /// Plans the row gathers of a statement sequence: among its stores whose
    /// value is one load (a copy: every such load is executed), the loads of
    /// an f32 buffer at a non-affine vector index plus a constant, grouped by
    /// buffer and base; runs of at least [`MIN_ROW`] and at most a vector of
    /// consecutive offsets become rows. Replaces the current plan and
    /// returns it (the enclosing sequence's).
    pub(super) fn plan_row_gathers(&mut self, stmts: &[Stmt]) -> HashMap<RowKey, (i64, i64)> {
        let outer = std::mem::take(&mut self.row_plan);
        let lanes = self.features.transpose_lanes as u16;
        // Where gathers are fast (Intel's AVX-512) they stay: measured there
        // against element-by-element loads, not against rows.
        if self.gpu || lanes < 8 || self.features.gather {
            return outer;
        }
        let mut offsets: HashMap<(u32, String), Vec<i64>> = HashMap::new();
        for s in stmts {
            let Stmt::Store { value: Expr::Load(buf, idx), .. } = s else { continue };
            let [idx] = &idx[..] else { continue };
            if buf.elem() != DataType::F32 || idx.ty().lanes != lanes {
                continue;
            }
            if let Some((base, c)) = split_offset(idx) {
                offsets.entry((buf.id(), format!("{base:?}"))).or_default().push(c);
            }
        }
        for ((buf, base), mut cs) in offsets {
            cs.sort_unstable();
            cs.dedup();
            let mut start = 0;
            while start < cs.len() {
                let mut end = start + 1;
                while end < cs.len() && cs[end] == cs[end - 1] + 1 && cs[end] - cs[start] < lanes as i64 {
                    end += 1;
                }
                let len = cs[end - 1] - cs[start] + 1;
                if len >= if lanes >= 16 { MIN_ROW } else { MIN_ROW_ON_8_LANES } {
                    for &c in &cs[start..end] {
                        self.row_plan.insert((buf, base.clone(), c), (cs[start], len));
                    }
                }
                start = end;
            }
        }
        outer
    }

    /// `buf[idx]` from its planned row gather (see [`Self::plan_row_gathers`]):
    /// the run's rows loaded lane by lane and transposed once, then kept
    /// until the buffer is stored to or control flow intervenes.
    pub(super) fn row_gather(
        &mut self,
        buf: &Buffer,
        idx: &Expr,
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let Some((base, c)) = split_offset(idx) else { return Ok(None) };
        let base_key = format!("{base:?}");
        let Some(&(first, len)) = self.row_plan.get(&(buf.id(), base_key.clone(), c)) else { return Ok(None) };
        let key: RowKey = (buf.id(), base_key, first);
        let columns = match self.row_gathers.get(&key) {
            Some(v) => v.clone(),
            None => {
                let v = self.gather_rows(buf, base, first, len)?;
                self.row_gathers.insert(key, v.clone());
                v
            }
        };
        Ok(Some(columns[(c - first) as usize].into()))
    }

    /// The `len` elements from `base[k] + first` of every lane `k`, as `len`
    /// vectors over the lanes.
    fn gather_rows(
        &mut self,
        buf: &Buffer,
        base: &Expr,
        first: i64,
        len: i64,
    ) -> Result<Vec<VectorValue<'ctx>>, CodegenError> {
        let lanes = base.ty().lanes as i64;
        let f32t = self.ctx.f32_type();
        let row_t = f32t.vec_type(len as u32);
        let i32t = self.ctx.i32_type();
        let widen: Vec<IntValue> =
            (0..lanes).map(|j| if j < len { i32t.const_int(j as u64, false) } else { i32t.get_undef() }).collect();
        let mut rows = Vec::with_capacity(lanes as usize);
        for k in 0..lanes {
            let at = simplify(&(lane_of(base, k as u16) + Expr::int(first)), &Bounds::new());
            let ptr = self.address(buf, &[at])?;
            let ptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, row_t), "gather_row"))?;
            let row = match self.masked_row(row_t) {
                Some(wt) => self.masked_load(buf, ptr, (wt, wt), Some(len as u32))?.into_vector_value(),
                None => {
                    let v = self.e(compat::load(&self.b, row_t, ptr, "gather_row"))?;
                    if let Some(i) = v.as_instruction_value() {
                        i.set_alignment(4).map_err(|m| llvm_err(&self.kernel, m))?;
                    }
                    let v = v.into_vector_value();
                    self.e(self.b.build_shuffle_vector(v, v, VectorType::const_vector(&widen), "gather_row"))?
                }
            };
            rows.push(row);
        }
        let mut columns = self.transpose_rows(rows, lanes)?;
        columns.truncate(len as usize);
        Ok(columns)
    }

    /// The whole vector a row of `row_t` loads as, masked (AVX-512, a row
    /// whose length is not a power of two; see `masked_access`), if any.
    /// Unlike `masked_access`, also from a buffer the kernel stores to: the
    /// transform's padded plane is filled once per channel and read by every
    /// vector of tiles after it, long after its stores have left the store
    /// buffer (a masked load cannot forward from one).
    fn masked_row(&self, row_t: VectorType<'ctx>) -> Option<VectorType<'ctx>> {
        let len = row_t.get_size();
        let wide = self.features.transpose_lanes;
        (self.features.masked_partial && !len.is_power_of_two() && len < wide)
            .then(|| self.ctx.f32_type().vec_type(wide))
    }

    /// Forget every row gather: where memory may change or control flow
    /// intervenes (see `forget_transposes`).
    pub(super) fn forget_row_gathers(&mut self) {
        self.row_gathers.clear();
    }

    /// Forget the row gathers of a buffer being stored to.
    pub(super) fn forget_row_gathers_of(&mut self, buf: &Buffer) {
        let id = buf.id();
        self.row_gathers.retain(|k, _| k.0 != id);
    }
}
