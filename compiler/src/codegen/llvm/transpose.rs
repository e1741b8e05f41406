//! Transposed reads of a register tile: a write-back that reads a kernel-local
//! tile across its vectors (`acc[Ramp(c, S, n)]`: lane `j` from the `j`-th
//! of `n` vectors — a packed convolution's output channels in lanes, written
//! back along NCHW rows of `n` pixels) as one transpose of those vectors.
//!
//! Read lane by lane, each such column took LLVM a chain of inserts and
//! shuffles (~14 per 16-lane column: 224 per 16 × 16 tile of YOLOv8n's stem,
//! as many cycles of port 5 as its multiply-adds). The tile's columns at one
//! block offset are instead transposed together in `log2 n` rounds of
//! two-input interleaves (`n` per round; one `vpermt2ps` each on AVX-512, a
//! few instructions on AVX2); each column is then a sub-vector of the
//! result, kept until the tile or control flow changes (see
//! `FnGen::forget_transposes`).

use inkwell::types::VectorType;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, VectorValue};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{Buffer, Expr, Scope};

/// A transposed block of a tile: the buffer, the block's first element, the
/// stride between the read's lanes and their count.
pub(super) type TransposeKey = (u32, i64, i64, u16);

impl<'ctx> FnGen<'_, 'ctx> {
    /// `buf[Ramp(c, s, n)]` from a transpose of the `n` vectors of
    /// `features.transpose_lanes` lanes at `block + j·s` (`block`: `c`
    /// rounded down to whole vectors), where `buf` is a kernel-local f32 tile,
    /// `c` and `s` constants, `s` whole vectors, `n` no larger than the
    /// lanes, and — on 8 lanes — a power of two. Other counts are padded to a
    /// power of two with repeats of the first row (lanes never read), and
    /// their rounds are AVX-512's `vpermi2var` intrinsic: as generic
    /// shuffles LLVM's combiner folded padded rounds back into lane-by-lane
    /// code (MobileNetV2's 7-column tiles 352 → 247 shuffles; 112 so).
    pub(super) fn transposed_read(
        &mut self,
        buf: &Buffer,
        idx: &Expr,
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let lanes = self.features.transpose_lanes as i64;
        let Expr::Ramp { base, stride, lanes: n } = idx else { return Ok(None) };
        let (Some(c), Some(s)) = (base.as_int(), stride.as_int()) else { return Ok(None) };
        let n = *n as i64;
        if lanes < 2
            || self.gpu
            || buf.scope() != Scope::Local
            || buf.elem() != DataType::F32
            || s < lanes
            || s % lanes != 0
            || !(2..=lanes).contains(&n)
            || (!(n as u64).is_power_of_two() && lanes != 16)
            || c < 0
        {
            return Ok(None);
        }
        let block = c - c % lanes;
        if block + (n - 1) * s + lanes > buf.numel() as i64 {
            return Ok(None);
        }
        let key: TransposeKey = (buf.id(), block, s, n as u16);
        let columns = match self.transposes.get(&key) {
            Some(v) => v.clone(),
            None => {
                let v = self.transpose_block(buf, block, s, n, lanes)?;
                self.transposes.insert(key, v.clone());
                v
            }
        };
        // Column k sits in vector k / (L / N), from lane (k % (L / N)) · N,
        // for the N rows (n padded) of the transposed block.
        let k = c % lanes;
        let width = columns.len() as i64;
        let per_vector = lanes / width;
        let from = (k % per_vector) * width;
        let i32t = self.ctx.i32_type();
        let mask: Vec<IntValue> = (0..n).map(|j| i32t.const_int((from + j) as u64, false)).collect();
        let v = columns[(k / per_vector) as usize];
        let picked = self.e(self.b.build_shuffle_vector(v, v, VectorType::const_vector(&mask), "column"))?;
        Ok(Some(picked.into()))
    }

    /// The `n` vectors at `buf[block + j·s]`, padded to a power of two `N`,
    /// transposed: in each round the vectors that differ in one index bit
    /// (highest first) interleave their low halves into the first and their
    /// high halves into the second. After the last round vector `m` holds
    /// columns `m·L/N …`, `N` lanes each (the first `n` of them read).
    fn transpose_block(
        &mut self,
        buf: &Buffer,
        block: i64,
        s: i64,
        n: i64,
        lanes: i64,
    ) -> Result<Vec<VectorValue<'ctx>>, CodegenError> {
        let vt = self.ctx.f32_type().vec_type(lanes as u32);
        let mut rows = Vec::with_capacity(n as usize);
        for j in 0..n {
            let ptr = self.address(buf, &[Expr::int(block + j * s)])?;
            let ptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "tile_row"))?;
            let v = self.e(compat::load(&self.b, vt, ptr, "tile_row"))?;
            if let Some(i) = v.as_instruction_value() {
                i.set_alignment(4).map_err(|m| llvm_err(&self.kernel, m))?;
            }
            rows.push(v.into_vector_value());
        }
        self.transpose_rows(rows, lanes)
    }

    /// `rows` (vectors of `lanes` lanes), padded to a power of two `N` with
    /// repeats of the first, transposed (see [`Self::transpose_block`]).
    pub(super) fn transpose_rows(
        &mut self,
        mut rows: Vec<VectorValue<'ctx>>,
        lanes: i64,
    ) -> Result<Vec<VectorValue<'ctx>>, CodegenError> {
        let n = rows.len() as i64;
        let width = (n as u64).next_power_of_two() as i64;
        rows.resize(width as usize, rows[0]);
        let i32t = self.ctx.i32_type();
        let interleave = |from: i64| -> Vec<IntValue<'ctx>> {
            (0..lanes).map(|l| i32t.const_int((from + l / 2 + (l % 2) * lanes) as u64, false)).collect()
        };
        let (low, high) = (interleave(0), interleave(lanes / 2));
        let mut bit = width / 2;
        let permute = lanes == 16 && !(n as u64).is_power_of_two();
        while bit >= 1 {
            for a in (0..width).filter(|a| a & bit == 0) {
                let (x, y) = (rows[a as usize], rows[(a | bit) as usize]);
                let (lo, hi) = if permute {
                    let lo = self.vector_intrinsic(
                        "llvm.x86.avx512.vpermi2var.ps.512",
                        &[x.into(), VectorType::const_vector(&low).into(), y.into()],
                    )?;
                    let hi = self.vector_intrinsic(
                        "llvm.x86.avx512.vpermi2var.ps.512",
                        &[x.into(), VectorType::const_vector(&high).into(), y.into()],
                    )?;
                    (lo.into_vector_value(), hi.into_vector_value())
                } else {
                    (
                        self.e(self.b.build_shuffle_vector(x, y, VectorType::const_vector(&low), "interleave_low"))?,
                        self.e(self.b.build_shuffle_vector(x, y, VectorType::const_vector(&high), "interleave_high"))?,
                    )
                };
                rows[a as usize] = lo;
                rows[(a | bit) as usize] = hi;
            }
            bit /= 2;
        }
        Ok(rows)
    }

    /// Forget every transposed tile: at control flow (a value computed in one
    /// block need not dominate the next) and where memory may change.
    pub(super) fn forget_transposes(&mut self) {
        self.transposes.clear();
        self.forget_row_gathers();
    }

    /// Forget the transposed blocks of a buffer being stored to.
    pub(super) fn forget_transposes_of(&mut self, buf: &Buffer) {
        let id = buf.id();
        self.transposes.retain(|k, _| k.0 != id);
        self.forget_row_gathers_of(buf);
    }
}
