//! Interleaved stores: a statement sequence that stores `m` vectors at
//! `buf[Ramp(b + j, m, L)]` for `j` in `0..m`, one after another — a Winograd
//! output's tiles written back to NCHW rows, column `j` of every tile of a
//! row in one vector (see `schedule::winograd::schedule_tiles_to_nchw`) —
//! writes the `m·L` consecutive elements from `b`. The `m` values are
//! computed, their lanes interleaved by one shuffle, and stored as one
//! contiguous run, instead of `m·L` single-lane stores.

use inkwell::types::VectorType;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, VectorValue};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{BinOp, Buffer, Expr, Stmt};

/// The most vectors interleaved into one run (a power of two).
const MAX_INTERLEAVED: i64 = 8;

/// `e` as a base and a constant offset: `B + c`, or `e` and 0.
fn constant_offset(e: &Expr) -> (&Expr, i64) {
    if let Expr::Bin(BinOp::Add, a, b) = e {
        if let Some(c) = b.as_int() {
            return (a, c);
        }
    }
    (e, 0)
}

/// The strided loads in `e` (`buf[Ramp(B + c, m, lanes)]`): buffer, the text
/// of `B`, `c` and the whole index.
fn strided_loads(e: &Expr, m: i64, lanes: u16, out: &mut Vec<(Buffer, String, i64, Expr)>) {
    if let Expr::Load(buf, idx) = e {
        if let [ramp @ Expr::Ramp { base, stride, lanes: l }] = &idx[..] {
            if stride.as_int() == Some(m) && *l == lanes {
                let (at, c) = constant_offset(base);
                out.push((buf.clone(), format!("{at:?}"), c, ramp.clone()));
            }
        }
    }
    e.for_each_child(|c| strided_loads(c, m, lanes, out));
}

impl<'ctx> FnGen<'_, 'ctx> {
    /// Loads `values` make at `buf[Ramp(B + c + j, m, lanes)]` for every `j`
    /// in `0..m` — the residual a Winograd output adds, read like the row
    /// it is stored to — as one contiguous run of `m·lanes` elements split
    /// into its `m` strided vectors (kept in `deinterleaved` for the group).
    fn deinterleave_loads(&mut self, values: &[&Expr], m: i64, lanes: u16) -> Result<(), CodegenError> {
        let mut loads = Vec::new();
        for v in values {
            strided_loads(v, m, lanes, &mut loads);
        }
        // Runs by buffer, base and first offset (a multiple of `m` past the
        // base): the index of each of their `m` strided loads.
        let mut runs: Vec<(Buffer, String, i64, Vec<Option<Expr>>)> = Vec::new();
        for (buf, at, c, idx) in loads {
            let start = c - c.rem_euclid(m);
            let i = match runs.iter().position(|(b, a, s, _)| *b == buf && *a == at && *s == start) {
                Some(i) => i,
                None => {
                    runs.push((buf, at, start, vec![None; m as usize]));
                    runs.len() - 1
                }
            };
            runs[i].3[(c - start) as usize] = Some(idx);
        }
        for (buf, _, _, indices) in runs {
            // Only a whole run: each of its elements is read by one of the loads.
            let Some(indices) = indices.into_iter().collect::<Option<Vec<Expr>>>() else { continue };
            let Expr::Ramp { base, .. } = &indices[0] else { continue };
            let run = Expr::Ramp { base: base.clone(), stride: Box::new(Expr::int(1)), lanes: lanes * m as u16 };
            let Some((ptr, vt)) = self.contiguous(&buf, &run)? else { continue };
            let whole = self.e(compat::load(&self.b, vt, ptr, "run"))?;
            if let Some(i) = whole.as_instruction_value() {
                i.set_alignment(buf.elem().size_bytes() as u32).map_err(|e| llvm_err(&self.kernel, e))?;
            }
            let whole = whole.into_vector_value();
            let i32t = self.ctx.i32_type();
            for (j, idx) in indices.iter().enumerate() {
                let picks: Vec<IntValue> =
                    (0..lanes as i64).map(|t| i32t.const_int((t * m + j as i64) as u64, false)).collect();
                let undef = whole.get_type().get_undef();
                let v =
                    self.e(self.b.build_shuffle_vector(whole, undef, VectorType::const_vector(&picks), "strided"))?;
                self.deinterleaved.insert((buf.id(), format!("{idx:?}")), v);
            }
        }
        Ok(())
    }

    /// `buf[idx]` split from its run by [`Self::deinterleave_loads`], if it was.
    pub(super) fn deinterleaved_load(&self, buf: &Buffer, idx: &Expr) -> Option<BasicValueEnum<'ctx>> {
        if self.deinterleaved.is_empty() {
            return None;
        }
        self.deinterleaved.get(&(buf.id(), format!("{idx:?}"))).map(|v| (*v).into())
    }

    /// The interleaved group at the head of `stmts`, stored as one run (see
    /// the module's note): how many statements it covered, or None where the
    /// head is no such group. The group's values must not read the buffer
    /// (they are all computed before any of them is stored).
    pub(super) fn interleaved_stores(&mut self, stmts: &[Stmt]) -> Result<Option<usize>, CodegenError> {
        let Some(Stmt::Store { buffer, indices, .. }) = stmts.first() else { return Ok(None) };
        let [Expr::Ramp { base, stride, lanes }] = &indices[..] else { return Ok(None) };
        let Some(m) = stride.as_int() else { return Ok(None) };
        if self.gpu
            || buffer.elem() == DataType::Bool
            || !(2..=MAX_INTERLEAVED).contains(&m)
            || !(m as u64).is_power_of_two()
            || stmts.len() < m as usize
        {
            return Ok(None);
        }
        let (first, c0) = constant_offset(base);
        let first_key = format!("{first:?}");
        let mut values = Vec::with_capacity(m as usize);
        for (j, s) in stmts[..m as usize].iter().enumerate() {
            let Stmt::Store { buffer: b, indices, value } = s else { return Ok(None) };
            let [Expr::Ramp { base: bj, stride: sj, lanes: lj }] = &indices[..] else { return Ok(None) };
            let (at, cj) = constant_offset(bj);
            if b.id() != buffer.id()
                || sj.as_int() != Some(m)
                || lj != lanes
                || value.ty().lanes != *lanes
                || cj != c0 + j as i64
                || format!("{at:?}") != first_key
                || value.reads(buffer)
            {
                return Ok(None);
            }
            values.push(value);
        }
        let run = Expr::Ramp { base: base.clone(), stride: Box::new(Expr::int(1)), lanes: lanes * m as u16 };
        let Some((ptr, vt)) = self.contiguous(buffer, &run)? else { return Ok(None) };
        self.deinterleave_loads(&values, m, *lanes)?;
        let mut vs: Vec<VectorValue<'ctx>> = Vec::with_capacity(m as usize);
        for v in values {
            match self.vexpr_or_splat(v, *lanes as u32) {
                Ok(v) => vs.push(v.into_vector_value()),
                Err(e) => {
                    self.deinterleaved.clear();
                    return Err(e);
                }
            }
        }
        self.deinterleaved.clear();
        // Vector `j` at lanes `j·L…`; element `t·m + j` of the run is lane `t` of vector `j`.
        let joined = self.concat_vectors(vs)?;
        let (l, m) = (*lanes as u64, m as u64);
        let i32t = self.ctx.i32_type();
        let order: Vec<IntValue> = (0..m * l).map(|k| i32t.const_int((k % m) * l + k / m, false)).collect();
        let undef = joined.get_type().get_undef();
        let run_value =
            self.e(self.b.build_shuffle_vector(joined, undef, VectorType::const_vector(&order), "interleaved"))?;
        match self.masked_access(buffer, vt) {
            Some(wt) => self.masked_store(buffer, ptr, (vt, wt), run_value)?,
            None => {
                let st = self.e(self.b.build_store(ptr, run_value))?;
                st.set_alignment(buffer.elem().size_bytes() as u32).map_err(|e| llvm_err(&self.kernel, e))?;
            }
        }
        self.forget_transposes_of(buffer);
        Ok(Some(m as usize))
    }
}
