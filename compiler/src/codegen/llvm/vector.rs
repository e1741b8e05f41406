//! Vector expressions (from `tir.VectorizeLoop`): native vector instructions
//! for arithmetic, comparisons, selects, contiguous and strided loads and
//! stores, and the common intrinsics; anything else lane by lane.

use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, VectorType};
use inkwell::values::{BasicMetadataValueEnum, BasicValue, BasicValueEnum, IntValue, PointerValue, VectorValue};
use kiln_ir::DataType;

use super::*;
use crate::arith::{simplify, Bounds};
use crate::codegen::CodegenError;
use crate::tir::transform::lane_of;
use crate::tir::{BinOp, Buffer, Expr, Intrinsic, Stmt};

/// The fewest lanes of a gather: YOLOv8n's 8-lane Winograd output rows (40
/// wide) took 15 % longer as gathers than lane by lane.
const GATHER_MIN_LANES: u32 = 16;

/// Whether `e` divides (floor division or remainder) anywhere.
fn has_division(e: &Expr) -> bool {
    let mut found = matches!(e, Expr::Bin(BinOp::FloorDiv | BinOp::FloorMod, ..));
    e.for_each_child(|c| found |= has_division(c));
    found
}

impl<'ctx> FnGen<'_, 'ctx> {
    pub(super) fn vector_type(&self, elem: DataType, lanes: u32) -> VectorType<'ctx> {
        match self.value_type(elem) {
            BasicTypeEnum::FloatType(t) => t.vec_type(lanes),
            BasicTypeEnum::IntType(t) => t.vec_type(lanes),
            _ => self.ctx.i8_type().vec_type(lanes),
        }
    }

    pub(super) fn splat(&self, v: BasicValueEnum<'ctx>, lanes: u32) -> Result<VectorValue<'ctx>, CodegenError> {
        let vt = match v {
            BasicValueEnum::FloatValue(f) => f.get_type().vec_type(lanes),
            BasicValueEnum::IntValue(i) => i.get_type().vec_type(lanes),
            _ => return Err(self.unsupported("a broadcast of a non-scalar")),
        };
        let one = self.e(self.b.build_insert_element(vt.get_undef(), v, self.i64c(0), "one"))?;
        let mask = self.ctx.i32_type().vec_type(lanes).const_zero();
        self.e(self.b.build_shuffle_vector(one, vt.get_undef(), mask, "splat"))
    }

    /// A vector of `e`'s lanes, each computed as a scalar (operations without a vector form).
    pub(super) fn scalarize(&mut self, e: &Expr) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let t = e.ty();
        let mut v = self.vector_type(t.elem, t.lanes as u32).get_undef();
        for k in 0..t.lanes {
            let lane = self.expr(&simplify(&lane_of(e, k), &Bounds::new()))?;
            v = self.e(self.b.build_insert_element(v, lane, self.i64c(k as i64), "lane"))?;
        }
        Ok(v.into())
    }

    /// `buf[Ramp(base, s)]` for any other constant stride (a residual read
    /// from NCHW by a channel-vectorized epilogue): one load per lane, each
    /// at [`Self::lane_address`].
    fn lane_loads(&mut self, buf: &Buffer, idx: &Expr) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let Expr::Ramp { base, stride, lanes } = idx else { return Ok(None) };
        let Some(s) = stride.as_int() else { return Ok(None) };
        if buf.elem() == DataType::Bool {
            return Ok(None);
        }
        let elem = elem_type(self.ctx, buf.elem());
        let first = self.address(buf, std::slice::from_ref(base))?;
        let mut v = self.vector_type(buf.elem(), *lanes as u32).get_undef();
        for k in 0..*lanes {
            let ptr = self.lane_address(buf, first, k, s)?;
            let lane = self.e(compat::load(&self.b, elem, ptr, "lane"))?;
            v = self.e(self.b.build_insert_element(v, lane, self.i64c(k as i64), "lane"))?;
        }
        Ok(Some(v.into()))
    }

    /// Lane `k`'s address in `buf` for a ramp of constant stride `s` whose
    /// first lane is at `first`: a constant offset, not the lane's index
    /// expression again (which LLVM's induction-variable and CSE passes had
    /// to fold, a large part of a convolution kernel's compile time).
    fn lane_address(
        &self,
        buf: &Buffer,
        first: PointerValue<'ctx>,
        k: u16,
        s: i64,
    ) -> Result<PointerValue<'ctx>, CodegenError> {
        let offset = [self.i64c(k as i64 * s)];
        // SAFETY (of the generated code): lane k's index is base + k·s, in bounds as the access is.
        unsafe { self.e(compat::in_bounds_gep(&self.b, elem_type(self.ctx, buf.elem()), first, &offset, "lane_addr")) }
    }

    /// `buf[idx]` where every lane's index is the first lane's plus a
    /// constant (`Ramp(r, 1, n) / k` with `r` a multiple of `k`: an integer
    /// upsampling's row, each element repeated `k` times) and the lanes span
    /// at most two vectors: one contiguous load of the span and a shuffle.
    /// Every element of the span lies between two that lanes read, so in
    /// the buffer. Only for indices with a division (the lanes' differences
    /// are then worth simplifying).
    fn constant_offsets_load(
        &mut self,
        buf: &Buffer,
        idx: &Expr,
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let lanes = idx.ty().lanes;
        if lanes < 4 || buf.elem() == DataType::Bool || !has_division(idx) {
            return Ok(None);
        }
        let first = simplify(&lane_of(idx, 0), &Bounds::new());
        let mut offsets = Vec::with_capacity(lanes as usize);
        for k in 0..lanes {
            match simplify(&(lane_of(idx, k) - first.clone()), &Bounds::new()).as_int() {
                Some(d) => offsets.push(d),
                None => return Ok(None),
            }
        }
        let (lo, hi) = (*offsets.iter().min().unwrap_or(&0), *offsets.iter().max().unwrap_or(&0));
        let span = hi - lo + 1;
        if span > 2 * lanes as i64 {
            return Ok(None);
        }
        let vt = self.vector_type(buf.elem(), span as u32);
        let ptr = self.address(buf, &[simplify(&(first + Expr::int(lo)), &Bounds::new())])?;
        let ptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "span"))?;
        let wide = self.e(compat::load(&self.b, vt, ptr, "span"))?;
        if let Some(i) = wide.as_instruction_value() {
            i.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
        }
        let wide = wide.into_vector_value();
        let i32t = self.ctx.i32_type();
        let mask: Vec<IntValue> = offsets.iter().map(|&d| i32t.const_int((d - lo) as u64, false)).collect();
        let picked = self.b.build_shuffle_vector(wide, vt.get_undef(), VectorType::const_vector(&mask), "offsets");
        Ok(Some(self.e(picked)?.into()))
    }

    /// `buf[Ramp(base, s)]` for a small constant stride `s` (a stride-2
    /// convolution's input row): one contiguous load of the `(lanes−1)·s+1`
    /// elements from the first lane's to the last's — never past them — then
    /// a shuffle picking every `s`-th.
    pub(super) fn strided_load(
        &mut self,
        buf: &Buffer,
        idx: &Expr,
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let Expr::Ramp { base, stride, lanes } = idx else { return Ok(None) };
        let Some(s) = stride.as_int().filter(|s| (2..=4).contains(s)) else { return Ok(None) };
        let span = (*lanes as u32 - 1) * s as u32 + 1;
        let ft = match elem_type(self.ctx, buf.elem()) {
            BasicTypeEnum::FloatType(t) if buf.elem() != DataType::Bool => t,
            _ => return Ok(None),
        };
        let ptr = self.address(buf, std::slice::from_ref(base))?;
        let i32t = self.ctx.i32_type();
        let n = *lanes as u32;
        if let Some(v) = self.masked_strided_load(buf, ptr, ft, (n, s as u32))? {
            return Ok(Some(v));
        }
        if span <= 2 * n {
            // Two overlapping whole vectors — the first `n` elements of the
            // span and the last `n` — and one two-input shuffle: an odd-sized
            // `<15 x float>` load was legalized piece by piece (eight inserts).
            let nt = ft.vec_type(n);
            let high_offset = span - n;
            let low = self.load_at(buf, (ptr, ft), 0, nt)?;
            let high = self.load_at(buf, (ptr, ft), high_offset, nt)?;
            let mask: Vec<IntValue> = (0..n)
                .map(|k| {
                    let j = k * s as u32;
                    i32t.const_int(if j < n { j } else { n + j - high_offset } as u64, false)
                })
                .collect();
            let picked = self.e(self.b.build_shuffle_vector(low, high, VectorType::const_vector(&mask), "strided"))?;
            return Ok(Some(picked.into()));
        }
        let vt = ft.vec_type(span);
        let ptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "sptr"))?;
        let wide = self.e(compat::load(&self.b, vt, ptr, "wide"))?;
        if let Some(i) = wide.as_instruction_value() {
            i.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
        }
        let wide = wide.into_vector_value();
        let mask: Vec<IntValue> = (0..*lanes as u64).map(|k| i32t.const_int(k * s as u64, false)).collect();
        let picked =
            self.e(self.b.build_shuffle_vector(wide, vt.get_undef(), VectorType::const_vector(&mask), "strided"))?;
        Ok(Some(picked.into()))
    }

    /// [`Self::strided_load`] of `n` lanes `s` apart from `ptr` as whole
    /// vectors, the last one masked, where masked access is one instruction
    /// (see [`Self::masked_access`]): each vector's worth of lanes (16 `f32`
    /// on AVX-512) from the one or two vectors its span covers and one
    /// two-input permute, the pieces then joined. A 14-lane stride-2 row of
    /// a 2 × 2 max pooling is one 16-lane load, one masked 11-lane load and
    /// one permute, where the two overlapping `<14 x float>` loads had been
    /// legalized into three pieces each and joined by inserts; a 28-lane
    /// stride-2 row of a depthwise convolution's phase-split image is two
    /// such pieces, where LLVM's shuffles of one `<55 x float>` load took
    /// ~25 instructions. None where that does not apply.
    fn masked_strided_load(
        &mut self,
        buf: &Buffer,
        ptr: PointerValue<'ctx>,
        ft: inkwell::types::FloatType<'ctx>,
        (n, s): (u32, u32),
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let bits = 8 * buf.elem().size_bytes() as u32;
        let maskable = self.features.masked_partial
            && buf.scope() == crate::tir::Scope::Global
            && !self.stored.contains(&buf.id())
            && matches!(bits, 32 | 64);
        let whole = n.next_power_of_two().min(512 / bits);
        // Whole vectors (`n` a power of two within one register) already
        // load as two overlapping ones. Rows of more than two vectors too:
        // ResNet-18's 3 × 3 stride-2 pooling, whose 55- and 56-lane rows
        // meet an accumulator row shifted by one lane, ran 1.39× slower in
        // pieces.
        let one_register = n == whole;
        if !maskable || one_register || n < 3 || n > 2 * whole || (n.min(whole) - 1) * s + 1 > 2 * whole {
            return Ok(None);
        }
        let wt = ft.vec_type(whole);
        // The `part` lanes at element `offset`: a plain load when whole,
        // masked otherwise (a masked-off lane is never read).
        let part = |g: &mut Self, offset: u32, part: u32| -> Result<VectorValue<'ctx>, CodegenError> {
            if part == whole {
                return g.load_at(buf, (ptr, ft), offset, wt);
            }
            // SAFETY: the span's elements are in the buffer (the caller's index).
            let p = g.e(unsafe { compat::in_bounds_gep(&g.b, ft, ptr, &[g.i64c(offset as i64)], "part") })?;
            Ok(g.masked_load(buf, p, (wt, wt), Some(part))?.into_vector_value())
        };
        let i32t = self.ctx.i32_type();
        let mut pieces = Vec::new();
        for first in (0..n).step_by(whole as usize) {
            let lanes = whole.min(n - first);
            let (offset, span) = (first * s, (lanes - 1) * s + 1);
            let low = part(self, offset, span.min(whole))?;
            let high = if span > whole { part(self, offset + whole, span - whole)? } else { wt.get_undef() };
            let mask: Vec<IntValue> = (0..whole)
                .map(|k| if k < lanes { i32t.const_int((k * s) as u64, false) } else { i32t.get_undef() })
                .collect();
            pieces.push(self.e(self.b.build_shuffle_vector(low, high, VectorType::const_vector(&mask), "strided"))?);
        }
        let joined = self.concat_vectors(pieces)?;
        Ok(Some(self.first_lanes(joined, n)?.into()))
    }

    /// The first `n` lanes of `v` (`v` itself where it has `n`): a
    /// [`Self::concat_vectors`] of an odd count of pieces cut back to its
    /// lanes.
    pub(super) fn first_lanes(&self, v: VectorValue<'ctx>, n: u32) -> Result<VectorValue<'ctx>, CodegenError> {
        if v.get_type().get_size() == n {
            return Ok(v);
        }
        let i32t = self.ctx.i32_type();
        let first: Vec<IntValue> = (0..n).map(|k| i32t.const_int(k as u64, false)).collect();
        let undef = v.get_type().get_undef();
        self.e(self.b.build_shuffle_vector(v, undef, VectorType::const_vector(&first), "first"))
    }

    /// The lanes of `vs` (vectors of one type) one after another, joined
    /// pairwise (an odd one out beside an undefined vector).
    pub(super) fn concat_vectors(&self, mut vs: Vec<VectorValue<'ctx>>) -> Result<VectorValue<'ctx>, CodegenError> {
        let i32t = self.ctx.i32_type();
        while vs.len() > 1 {
            let mut next = Vec::with_capacity(vs.len().div_ceil(2));
            for pair in vs.chunks(2) {
                let a = pair[0];
                let b = pair.get(1).copied().unwrap_or_else(|| a.get_type().get_undef());
                let both: Vec<IntValue> =
                    (0..2 * a.get_type().get_size()).map(|k| i32t.const_int(k as u64, false)).collect();
                next.push(self.e(self.b.build_shuffle_vector(a, b, VectorType::const_vector(&both), "join"))?);
            }
            vs = next;
        }
        vs.pop().ok_or_else(|| self.unsupported("an empty vector"))
    }

    /// The vector `vt` at element `offset` past `ptr` (elements of `elem`),
    /// aligned to one element of `buf`: a whole piece of a strided span.
    fn load_at(
        &mut self,
        buf: &Buffer,
        (ptr, elem): (PointerValue<'ctx>, inkwell::types::FloatType<'ctx>),
        offset: u32,
        vt: VectorType<'ctx>,
    ) -> Result<VectorValue<'ctx>, CodegenError> {
        // SAFETY: the span's elements are in the buffer (the caller's index).
        let p = self.e(unsafe { compat::in_bounds_gep(&self.b, elem, ptr, &[self.i64c(offset as i64)], "piece") })?;
        let p = self.e(self.b.build_pointer_cast(p, compat::pointer_to(self.ctx, vt), "piece"))?;
        let v = self.e(compat::load(&self.b, vt, p, "piece"))?;
        if let Some(i) = v.as_instruction_value() {
            i.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
        }
        Ok(v.into_vector_value())
    }

    /// A pointer to `<lanes x T>` at `buf[base]` and that vector type, when
    /// `idx` is `Ramp(base, 1)`.
    pub(super) fn contiguous(
        &mut self,
        buf: &Buffer,
        idx: &Expr,
    ) -> Result<Option<(PointerValue<'ctx>, VectorType<'ctx>)>, CodegenError> {
        let Expr::Ramp { base, stride, lanes } = idx else { return Ok(None) };
        if stride.as_int() != Some(1) || buf.elem() == DataType::Bool {
            return Ok(None);
        }
        let ptr = self.address(buf, std::slice::from_ref(base))?;
        let vt = match elem_type(self.ctx, buf.elem()) {
            BasicTypeEnum::FloatType(t) => t.vec_type(*lanes as u32),
            BasicTypeEnum::IntType(t) => t.vec_type(*lanes as u32),
            _ => return Ok(None),
        };
        Ok(Some((self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "vptr"))?, vt)))
    }

    /// The whole vector type a contiguous access of `vt` is done as, masked,
    /// where that is one instruction: on AVX-512, a vector of 32- or 64-bit
    /// lanes whose count is not a power of two, within two 512-bit registers.
    /// LLVM 14 legalizes a `<14 x float>` access piece by piece — 8, 4 and 2
    /// lanes, three loads or stores and the shuffles that join or split them
    /// — where one masked `vmovups` does (a masked-off lane is neither read
    /// nor written, so the access never reaches past the partial vector).
    ///
    /// Only in main memory: a kernel-local buffer is an accumulator tile or
    /// a padded image that LLVM keeps in registers or reads back at once,
    /// and a masked access neither promotes to a register nor forwards from
    /// the store buffer (a 15-lane matmul accumulator went through the stack
    /// on every step, 5× slower). Loads only from buffers the kernel does
    /// not store to (see `FnGen::stored`).
    pub(super) fn masked_access(&self, buf: &Buffer, vt: VectorType<'ctx>) -> Option<VectorType<'ctx>> {
        let elem = buf.elem();
        let (lanes, bits) = (vt.get_size(), 8 * elem.size_bytes() as u32);
        let whole = lanes.next_power_of_two();
        let partial = lanes > 2 && !lanes.is_power_of_two() && whole * bits <= 1024;
        let wide_lanes = matches!(bits, 32 | 64) && elem != DataType::Bool;
        (self.features.masked_partial && buf.scope() == crate::tir::Scope::Global && partial && wide_lanes)
            .then(|| self.vector_type(elem, whole))
    }

    /// The `<whole x i1>` mask of the first `lanes` lanes.
    fn lane_mask(&self, lanes: u32, whole: u32) -> VectorValue<'ctx> {
        let bit = self.ctx.bool_type();
        let mask: Vec<IntValue> = (0..whole).map(|k| bit.const_int((k < lanes) as u64, false)).collect();
        VectorType::const_vector(&mask)
    }

    /// `buf[idx]` for a vector of arbitrary indices, on AVX-512, of at least
    /// [`GATHER_MIN_LANES`] lanes, as one
    /// `llvm.masked.gather` of every lane (`vgatherdps` with 32-bit indices
    /// where the buffer allows them). Lane by lane — each element loaded and
    /// inserted — a Winograd input transform's tile gathers took 432
    /// `vinsertps` per vector of 16 tiles (ResNet-18's and YOLOv8n's input
    /// transforms 13–43 % faster as gathers).
    fn gather(&mut self, buf: &Buffer, idx: &Expr, lanes: u32) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        use inkwell::types::AsTypeRef;
        use inkwell::values::AsValueRef;
        if !self.features.gather
            || lanes < GATHER_MIN_LANES
            || buf.elem().size_bytes() != 4
            || buf.elem() == DataType::Bool
        {
            return Ok(None);
        }
        let base = self.buffer_base(buf)?;
        let index = self.vexpr_or_splat(idx, lanes)?.into_vector_value();
        let index = if buf.numel() < i32::MAX as usize {
            let i32s = self.ctx.i32_type().vec_type(lanes);
            self.e(self.b.build_int_truncate(index, i32s, "index32"))?
        } else {
            index
        };
        let elem = elem_type(self.ctx, buf.elem());
        let mut indices = [index.as_value_ref()];
        // SAFETY: the builder, type and values belong to this function's
        // live context; the indices are the load's own, inside the buffer as
        // every lane's scalar load would be (inkwell has no vector-index GEP).
        let pointers = unsafe {
            VectorValue::new(inkwell::llvm_sys::core::LLVMBuildInBoundsGEP2(
                self.b.as_mut_ptr(),
                elem.as_type_ref(),
                base.as_value_ref(),
                indices.as_mut_ptr(),
                1,
                c"gather_at".as_ptr(),
            ))
        };
        let vt = self.vector_type(buf.elem(), lanes);
        let decl = inkwell::intrinsics::Intrinsic::find("llvm.masked.gather")
            .and_then(|i| i.get_declaration(self.module, &[vt.into(), pointers.get_type().into()]))
            .ok_or_else(|| self.unsupported("llvm.masked.gather"))?;
        let align = self.ctx.i32_type().const_int(buf.elem().size_bytes() as u64, false);
        let args: [BasicMetadataValueEnum; 4] =
            [pointers.into(), align.into(), self.lane_mask(lanes, lanes).into(), vt.get_undef().into()];
        let call = self.e(self.b.build_call(decl, &args, "gather"))?;
        match call.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(Some(v)),
            inkwell::values::ValueKind::Instruction(_) => Err(self.unsupported("a void gather")),
        }
    }

    /// `llvm.masked.load` of the first lanes of the whole vector `wt` at
    /// `ptr` (see [`Self::masked_access`]), narrowed back to `vt`; `read`
    /// lanes are read where given (the rest are undefined), else `vt`'s.
    pub(super) fn masked_load(
        &mut self,
        buf: &Buffer,
        ptr: PointerValue<'ctx>,
        (vt, wt): (VectorType<'ctx>, VectorType<'ctx>),
        read: Option<u32>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let (lanes, whole) = (vt.get_size(), wt.get_size());
        let mask = self.lane_mask(read.unwrap_or(lanes), whole);
        let wide = self.masked_load_at(ptr, wt, mask, wt.get_undef(), buf.elem().size_bytes() as u32)?;
        let i32t = self.ctx.i32_type();
        let first: Vec<IntValue> = (0..lanes).map(|k| i32t.const_int(k as u64, false)).collect();
        let v = self.b.build_shuffle_vector(wide, wt.get_undef(), VectorType::const_vector(&first), "partial");
        Ok(self.e(v)?.into())
    }

    /// `llvm.masked.store` of `v` (of type `vt`) as the first lanes of the
    /// whole vector `wt` at `ptr` (see [`Self::masked_access`]).
    pub(super) fn masked_store(
        &mut self,
        buf: &Buffer,
        ptr: PointerValue<'ctx>,
        (vt, wt): (VectorType<'ctx>, VectorType<'ctx>),
        v: VectorValue<'ctx>,
    ) -> Result<(), CodegenError> {
        let (lanes, whole) = (vt.get_size(), wt.get_size());
        let wptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, wt), "mptr"))?;
        let i32t = self.ctx.i32_type();
        let widen: Vec<IntValue> =
            (0..whole).map(|k| if k < lanes { i32t.const_int(k as u64, false) } else { i32t.get_undef() }).collect();
        let wide = self.e(self.b.build_shuffle_vector(v, vt.get_undef(), VectorType::const_vector(&widen), "whole"))?;
        let decl = inkwell::intrinsics::Intrinsic::find("llvm.masked.store")
            .and_then(|i| i.get_declaration(self.module, &[wt.into(), wptr.get_type().into()]))
            .ok_or_else(|| self.unsupported("llvm.masked.store"))?;
        let align = self.ctx.i32_type().const_int(buf.elem().size_bytes() as u64, false);
        let args: [BasicMetadataValueEnum; 4] =
            [wide.into(), wptr.into(), align.into(), self.lane_mask(lanes, whole).into()];
        self.e(self.b.build_call(decl, &args, ""))?;
        Ok(())
    }

    /// Vector expressions (from tir.VectorizeLoop): native vector instructions
    /// for arithmetic, comparisons, selects, contiguous loads and the common
    /// intrinsics; anything else lane by lane.
    pub(super) fn vexpr(&mut self, e: &Expr) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let t = e.ty();
        let lanes = t.lanes as u32;
        let float_vec = |v: BasicValueEnum<'ctx>| v.into_vector_value();
        Ok(match e {
            Expr::Broadcast(x, n) => {
                let s = self.expr(x)?;
                self.splat(s, *n as u32)?.into()
            }
            Expr::Ramp { base, stride, lanes } => {
                let (b, s) = (self.expr(base)?, self.expr(stride)?);
                let (b, s) = (self.splat(b, *lanes as u32)?, self.splat(s, *lanes as u32)?);
                let iota: Vec<IntValue> = (0..*lanes).map(|k| self.i64c(k as i64)).collect();
                let step = self.e(self.b.build_int_mul(s, VectorType::const_vector(&iota), "step"))?;
                self.e(self.b.build_int_add(b, step, "ramp"))?.into()
            }
            Expr::Bin(BinOp::Add, a, b) if t.elem == DataType::F32 && fma_operands(a, b).is_some() => {
                let (acc, m1, m2) = fma_operands(a, b).expect("checked");
                let acc = self.vexpr_or_splat(acc, lanes)?;
                let (m1, m2) = (self.vexpr_or_splat(m1, lanes)?, self.vexpr_or_splat(m2, lanes)?);
                self.vector_intrinsic(&format!("llvm.fmuladd.v{lanes}f32"), &[m1, m2, acc])?
            }
            Expr::Bin(op, a, b) if t.elem == DataType::F32 => {
                let (x, y) = (float_vec(self.vexpr_or_splat(a, lanes)?), float_vec(self.vexpr_or_splat(b, lanes)?));
                match op {
                    BinOp::Add => self.e(self.b.build_float_add(x, y, "vadd"))?.into(),
                    BinOp::Sub => self.e(self.b.build_float_sub(x, y, "vsub"))?.into(),
                    BinOp::Mul => self.e(self.b.build_float_mul(x, y, "vmul"))?.into(),
                    BinOp::Div => self.e(self.b.build_float_div(x, y, "vdiv"))?.into(),
                    BinOp::Min | BinOp::Max => self.nan_minmax(*op == BinOp::Min, (a, x.into()), (b, y.into()))?,
                    BinOp::FloorDiv | BinOp::FloorMod => return self.scalarize(e),
                }
            }
            Expr::Bin(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), a, b) if t.elem == DataType::I64 => {
                let (x, y) = (
                    self.vexpr_or_splat(a, lanes)?.into_vector_value(),
                    self.vexpr_or_splat(b, lanes)?.into_vector_value(),
                );
                match op {
                    BinOp::Add => self.e(self.b.build_int_add(x, y, "vadd"))?.into(),
                    BinOp::Sub => self.e(self.b.build_int_sub(x, y, "vsub"))?.into(),
                    _ => self.e(self.b.build_int_mul(x, y, "vmul"))?.into(),
                }
            }
            Expr::Cmp(op, a, b) if a.ty().elem == DataType::F32 => {
                let (x, y) = (float_vec(self.vexpr_or_splat(a, lanes)?), float_vec(self.vexpr_or_splat(b, lanes)?));
                let pred = float_predicate(*op);
                self.e(self.b.build_float_compare(pred, x, y, "vcmp"))?.into()
            }
            Expr::Select(c, a, b) if t.elem != DataType::Bool => {
                if let Some(v) = self.predicated_load(c, a, b, lanes)? {
                    return Ok(v);
                }
                let (x, y) = (self.vexpr_or_splat(a, lanes)?, self.vexpr_or_splat(b, lanes)?);
                // One condition for every lane (a padded row inside or outside
                // the image): a scalar `select` of whole vectors. As a splat
                // `<56 x i1>` mask, LLVM's instruction selection spent 0.3 s on
                // one ResNet-18 kernel legalizing the masks of its 56-wide rows.
                match &**c {
                    Expr::Broadcast(scalar, _) => {
                        let c = self.expr(scalar)?.into_int_value();
                        self.e(self.b.build_select(c, x, y, "vselect"))?
                    }
                    _ => {
                        let c = self.vexpr_or_splat(c, lanes)?.into_vector_value();
                        self.e(self.b.build_select(c, x, y, "vselect"))?
                    }
                }
            }
            Expr::Load(buf, idx) if idx.len() == 1 => {
                // A piece of an interleaved group's run (`interleave.rs`).
                if let Some(v) = self.deinterleaved_load(buf, &idx[0]) {
                    return Ok(v);
                }
                if let Some(v) = self.register_load(buf, idx)? {
                    return Ok(v);
                }
                if let Some(v) = self.grid_plain_load(buf, &idx[0])? {
                    return Ok(v.into());
                }
                self.contiguous_or_scattered_load(e, buf, &idx[0], lanes)?
            }
            Expr::Call(Intrinsic::DotU8I8, args, _) => self.dot_u8i8(args)?,
            Expr::Call(f @ (Intrinsic::Bf16Bits | Intrinsic::Bf16Value), args, _) if args.len() == 1 => {
                let v = self.vexpr_or_splat(&args[0], lanes)?;
                self.bf16_convert(*f, v)?
            }
            Expr::Call(f, args, _) if t.elem == DataType::F32 => {
                let vals: Vec<BasicValueEnum> =
                    args.iter().map(|a| self.vexpr_or_splat(a, lanes)).collect::<Result<_, _>>()?;
                let name = match f {
                    Intrinsic::Fabs => "fabs",
                    Intrinsic::Sqrt => "sqrt",
                    Intrinsic::Floor => "floor",
                    Intrinsic::Ceil => "ceil",
                    Intrinsic::Round => "rint",
                    Intrinsic::Exp => "exp",
                    Intrinsic::Log => "log",
                    Intrinsic::Ldexp => return self.ldexp(vals[0], vals[1], false),
                    Intrinsic::LdexpNormal => return self.ldexp(vals[0], vals[1], true),
                    _ => return self.scalarize(e),
                };
                self.vector_intrinsic(&format!("llvm.{name}.v{lanes}f32"), &vals)?
            }
            _ => self.scalarize(e)?,
        })
    }

    /// A vector load of `buf[idx]`: one load where `idx` is contiguous (a
    /// masked one for a partial vector), else lane by lane or gathered.
    fn contiguous_or_scattered_load(
        &mut self,
        e: &Expr,
        buf: &Buffer,
        idx: &Expr,
        lanes: u32,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        Ok(match self.contiguous(buf, idx)? {
            Some((ptr, vt)) => match self.masked_access(buf, vt).filter(|_| !self.stored.contains(&buf.id())) {
                Some(wt) => self.masked_load(buf, ptr, (vt, wt), None)?,
                None => {
                    let v = self.e(compat::load(&self.b, vt, ptr, "vload"))?;
                    if let Some(i) = v.as_instruction_value() {
                        i.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
                    }
                    v
                }
            },
            None => self.scattered_load(e, buf, idx, lanes)?,
        })
    }

    /// `kiln.dot_u8i8(acc, a, b)`: `vpdpbusd` where the target has VNNI, else
    /// the same sums in plain integer arithmetic (bytes widened, multiplied,
    /// each lane's four added).
    fn dot_u8i8(&mut self, args: &[Expr]) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let [acc, a, b] = args else { return Err(self.unsupported("kiln.dot_u8i8 with other than 3 arguments")) };
        let lanes = acc.ty().lanes as u32;
        let (a_lanes, b_lanes) = (a.ty().lanes as u32, b.ty().lanes as u32);
        let (a_fits, b_fits) = (a_lanes == 1 || a_lanes == lanes, b_lanes == 4 || b_lanes == 4 * lanes);
        if !(a_fits && b_fits) {
            return Err(self.unsupported("kiln.dot_u8i8 over other than words and 4 bytes per lane"));
        }
        let i32t = self.ctx.i32_type();
        let i32v = i32t.vec_type(lanes);
        let acc = self.vexpr(acc)?;
        // Both sides as 16 dwords: a scalar word or four bytes splat to every lane.
        let a = if a_lanes == 1 {
            let word = self.expr(a)?;
            self.splat(word, lanes)?.into()
        } else {
            let words = self.vexpr(a)?;
            self.e(self.b.build_bit_cast(words, i32v, "words"))?
        };
        let b = self.vexpr(b)?;
        let b = if b_lanes == 4 {
            let word = self.e(self.b.build_bit_cast(b, i32t, "dword"))?;
            self.splat(word, lanes)?.into()
        } else {
            self.e(self.b.build_bit_cast(b, i32v, "bytes"))?
        };
        if self.features.vnni && lanes == 16 {
            return self.vector_intrinsic("llvm.x86.avx512.vpdpbusd.512", &[acc, a, b]);
        }
        let bytes = 4 * lanes;
        let i8v = self.ctx.i8_type().vec_type(bytes);
        let a = self.e(self.b.build_bit_cast(a, i8v, "ubytes"))?.into_vector_value();
        let b = self.e(self.b.build_bit_cast(b, i8v, "sbytes"))?.into_vector_value();
        let wide = i32t.vec_type(bytes);
        let a = self.e(self.b.build_int_z_extend(a, wide, "u"))?;
        let b = self.e(self.b.build_int_s_extend(b, wide, "s"))?;
        let products = self.e(self.b.build_int_mul(a, b, "products"))?;
        let mut sum = acc.into_vector_value();
        for j in 0..4 {
            let mask: Vec<_> = (0..lanes).map(|l| i32t.const_int((4 * l + j) as u64, false)).collect();
            let part = self.e(self.b.build_shuffle_vector(
                products,
                wide.get_undef(),
                VectorType::const_vector(&mask),
                "part",
            ))?;
            sum = self.e(self.b.build_int_add(sum, part, "dot"))?;
        }
        Ok(sum.into())
    }

    pub(super) fn vexpr_or_splat(&mut self, e: &Expr, lanes: u32) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        if e.ty().lanes == 1 {
            let s = self.expr(e)?;
            Ok(self.splat(s, lanes)?.into())
        } else {
            self.vexpr(e)
        }
    }

    pub(super) fn vector_intrinsic(
        &self,
        name: &str,
        args: &[BasicValueEnum<'ctx>],
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let ty = args.first().ok_or_else(|| self.unsupported("an intrinsic without arguments"))?.get_type();
        let f = match self.module.get_function(name) {
            Some(f) => f,
            None => {
                let params: Vec<BasicMetadataTypeEnum> = args.iter().map(|a| a.get_type().into()).collect();
                self.module.add_function(name, ty.fn_type(&params, false), Some(Linkage::External))
            }
        };
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        let call = self.e(self.b.build_call(f, &args, "vcall"))?;
        match call.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(v),
            inkwell::values::ValueKind::Instruction(_) => Err(self.unsupported("a void intrinsic")),
        }
    }

    /// `e`, a load of `buf` at `idx` (not contiguous), by the first way that
    /// applies (a piece of an interleaved group's run is taken before, for
    /// every load): a transposed tile, a strided row, per-lane loads, a row gather, constant offsets, a
    /// hardware gather, else lane by lane.
    fn scattered_load(
        &mut self,
        e: &Expr,
        buf: &Buffer,
        idx: &Expr,
        lanes: u32,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        if let Some(v) = self.transposed_read(buf, idx)? {
            return Ok(v);
        }
        if let Some(v) = self.strided_load(buf, idx)? {
            return Ok(v);
        }
        if let Some(v) = self.lane_loads(buf, idx)? {
            return Ok(v);
        }
        if let Some(v) = self.row_gather(buf, idx)? {
            return Ok(v);
        }
        if let Some(v) = self.constant_offsets_load(buf, idx)? {
            return Ok(v);
        }
        match self.gather(buf, idx, lanes)? {
            Some(v) => Ok(v),
            None => self.scalarize(e),
        }
    }

    /// A vector store: one store when the lanes are contiguous, else one per lane.
    pub(super) fn vector_store(&mut self, buf: &Buffer, idx: &Expr, value: &Expr) -> Result<(), CodegenError> {
        let lanes = idx.ty().lanes.max(value.ty().lanes);
        if value.ty().elem == DataType::Bool {
            for k in 0..lanes {
                let i = simplify(&lane_of(idx, k), &Bounds::new());
                self.stmt(&Stmt::Store { buffer: buf.clone(), indices: vec![i], value: lane_of(value, k) })?;
            }
            return Ok(());
        }
        let contiguous = self.contiguous(buf, idx)?;
        self.accumulator = Some(buf.id());
        let v = self.vexpr_or_splat(value, lanes as u32);
        self.accumulator = None;
        let v = v?;
        if let Some((ptr, vt)) = contiguous {
            if let Some(wt) = self.masked_access(buf, vt) {
                return self.masked_store(buf, ptr, (vt, wt), v.into_vector_value());
            }
            let st = self.e(self.b.build_store(ptr, v))?;
            st.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
            return Ok(());
        }
        // Scattered lanes (a channel-vectorized tile written to NCHW): the
        // value is still computed once as a vector and each lane stored from
        // it — computed lane by lane, an epilogue would run on scalars.
        let v = v.into_vector_value();
        // A constant stride: the first lane's address once, the others at
        // `lane_address`.
        let strided = match idx {
            Expr::Ramp { base, stride, .. } => stride.as_int().map(|s| (base, s)),
            _ => None,
        };
        if let Some((base, stride)) = strided {
            let first = self.address(buf, std::slice::from_ref(base))?;
            for k in 0..lanes {
                let ptr = self.lane_address(buf, first, k, stride)?;
                let lane = self.e(self.b.build_extract_element(v, self.i64c(k as i64), "lane"))?;
                self.e(self.b.build_store(ptr, lane))?;
            }
            return Ok(());
        }
        for k in 0..lanes {
            let i = simplify(&lane_of(idx, k), &Bounds::new());
            let ptr = self.address(buf, &[i])?;
            let lane = self.e(self.b.build_extract_element(v, self.i64c(k as i64), "lane"))?;
            self.e(self.b.build_store(ptr, lane))?;
        }
        Ok(())
    }
}
