//! Register buffers: a kernel-local f32 buffer of at most one vector that a
//! straight-line sequence stores in pieces and reads back at constant
//! offsets — a separable max pooling's row of vertical maxima, stored in
//! three pieces (the window's `-inf` borders and the row) and read at the
//! window's five column offsets — is kept as one vector value: a store
//! merges its piece in with a shuffle, a load takes its lanes out with one.
//! Through the stack, every read spanned several of the stores just made,
//! which cannot forward to it (YOLOv8n's SPPF pools waited on each).

use inkwell::types::VectorType;
use inkwell::values::{BasicValueEnum, IntValue, VectorValue};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{Buffer, Expr, Stmt};

/// A constant element index, or a contiguous run of them: (first, lanes).
fn constant_run(idx: &[Expr]) -> Option<(i64, u32)> {
    match idx {
        [Expr::Ramp { base, stride, lanes }] if stride.as_int() == Some(1) => Some((base.as_int()?, *lanes as u32)),
        [i] => Some((i.as_int()?, 1)),
        _ => None,
    }
}

/// Whether every access to `buffer` in `e` is at a constant run inside it.
fn reads_constant_runs(e: &Expr, buffer: &Buffer) -> bool {
    let here = match e {
        Expr::Load(b, idx) if b.id() == buffer.id() => {
            constant_run(idx).is_some_and(|(at, n)| at >= 0 && at + n as i64 <= buffer.numel() as i64)
        }
        _ => true,
    };
    let mut ok = here;
    e.for_each_child(|c| ok &= reads_constant_runs(c, buffer));
    ok
}

/// Whether `buffer` (allocated around `body`) can live in one vector of at
/// most `lanes` f32 lanes: `body` is stores only, no control flow, and each
/// access to the buffer a constant run inside it.
pub(super) fn fits_a_register(buffer: &Buffer, body: &Stmt, lanes: u32) -> bool {
    if buffer.elem() != DataType::F32 || buffer.numel() < 2 || buffer.numel() > lanes as usize {
        return false;
    }
    let stmts: &[Stmt] = match body {
        Stmt::Seq(v) => v,
        s => std::slice::from_ref(s),
    };
    stmts.iter().all(|s| match s {
        Stmt::Store { buffer: b, indices, value } => {
            let target_ok = b.id() != buffer.id()
                || constant_run(indices).is_some_and(|(at, n)| at >= 0 && at + n as i64 <= buffer.numel() as i64);
            target_ok && reads_constant_runs(value, buffer) && indices.iter().all(|i| reads_constant_runs(i, buffer))
        }
        _ => false,
    })
}

impl<'ctx> FnGen<'_, 'ctx> {
    /// The lanes `at..at + n` of register buffer `buf`, if it is one.
    pub(super) fn register_load(
        &self,
        buf: &Buffer,
        idx: &[Expr],
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let Some(whole) = self.register_buffers.get(&buf.id()) else { return Ok(None) };
        let Some((at, n)) = constant_run(idx) else {
            return Err(self.unsupported("a register buffer read at a run-time index"));
        };
        let i32t = self.ctx.i32_type();
        if n == 1 {
            return Ok(Some(self.e(self.b.build_extract_element(*whole, i32t.const_int(at as u64, false), "reg"))?));
        }
        let pick: Vec<IntValue> = (0..n).map(|k| i32t.const_int(at as u64 + k as u64, false)).collect();
        let undef = whole.get_type().get_undef();
        Ok(Some(self.e(self.b.build_shuffle_vector(*whole, undef, VectorType::const_vector(&pick), "reg"))?.into()))
    }

    /// Stores `value` into register buffer `buf` at its constant run; false
    /// where `buf` is no register buffer.
    pub(super) fn register_store(&mut self, buf: &Buffer, idx: &[Expr], value: &Expr) -> Result<bool, CodegenError> {
        let Some(&whole) = self.register_buffers.get(&buf.id()) else { return Ok(false) };
        let Some((at, n)) = constant_run(idx) else {
            return Err(self.unsupported("a register buffer stored at a run-time index"));
        };
        let i32t = self.ctx.i32_type();
        let total = whole.get_type().get_size();
        // A reduction's update into the buffer keeps the accumulator's
        // min/max semantics (see `nan_minmax`), as a store to memory does.
        self.accumulator = Some(buf.id());
        let computed = if n == 1 { self.expr(value) } else { self.vexpr_or_splat(value, n) };
        self.accumulator = None;
        let computed = computed?;
        let merged: VectorValue<'ctx> = if n == 1 {
            self.e(self.b.build_insert_element(whole, computed, i32t.const_int(at as u64, false), "reg"))?
        } else {
            let v = computed.into_vector_value();
            // The piece widened to the buffer's lanes, then lane k from it where k is in the run.
            let widen: Vec<IntValue> =
                (0..total).map(|k| if k < n { i32t.const_int(k as u64, false) } else { i32t.get_undef() }).collect();
            let wide = self.e(self.b.build_shuffle_vector(
                v,
                v.get_type().get_undef(),
                VectorType::const_vector(&widen),
                "reg",
            ))?;
            let pick: Vec<IntValue> = (0..total)
                .map(|k| {
                    let k = k as i64;
                    if k >= at && k < at + n as i64 {
                        i32t.const_int((total as i64 + k - at) as u64, false)
                    } else {
                        i32t.const_int(k as u64, false)
                    }
                })
                .collect();
            self.e(self.b.build_shuffle_vector(whole, wide, VectorType::const_vector(&pick), "reg"))?
        };
        self.register_buffers.insert(buf.id(), merged);
        Ok(true)
    }
}
