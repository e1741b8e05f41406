//! Statements: stores, loops (phi nodes, parallel task slices, GPU thread
//! bindings), allocations and the register-tile unrolling rule.

use inkwell::module::Linkage;
use inkwell::types::BasicTypeEnum;
use inkwell::{AddressSpace, IntPredicate};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{Expr, ForKind, Intrinsic, Scope, Stmt, ThreadAxis, Var};

impl<'ctx> FnGen<'_, 'ctx> {
    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<(), CodegenError> {
        match s {
            Stmt::Store { buffer, .. } => {
                self.statement(s)?;
                self.forget_transposes_of(buffer);
                Ok(())
            }
            Stmt::Seq(v) => {
                // The plan covers this sequence's own loads only: a nested
                // sequence plans its own, and this one's comes back after it.
                let outer = self.plan_row_gathers(v);
                let done = self.sequence(v);
                self.row_plan = outer;
                done
            }
            Stmt::Let { var, value, body } => {
                let v = self.expr(value)?;
                if self.non_negative(value) {
                    self.non_negative_vars.insert(var.id);
                }
                self.vars.insert(var.id, v);
                self.stmt(body)
            }
            // Control flow, allocations and intrinsics: a transposed tile
            // computed before need not dominate what follows, or be current.
            _ => {
                self.forget_transposes();
                self.statement(s)?;
                self.forget_transposes();
                Ok(())
            }
        }
    }

    /// A sequence's statements in order, an interleaved group of stores
    /// (see `interleave.rs`) as one.
    fn sequence(&mut self, v: &[Stmt]) -> Result<(), CodegenError> {
        let mut i = 0;
        while i < v.len() {
            i += match self.interleaved_stores(&v[i..])? {
                Some(n) => n,
                None => {
                    self.stmt(&v[i])?;
                    1
                }
            };
        }
        Ok(())
    }

    /// Every statement but sequences and lets (see `stmt`).
    fn statement(&mut self, s: &Stmt) -> Result<(), CodegenError> {
        if let Stmt::Store { buffer, indices, value } = s {
            if self.register_store(buffer, indices, value)? {
                return Ok(());
            }
        }
        match s {
            Stmt::For(l) => self.for_loop(&l.var, &l.min, &l.extent, l.kind, &l.body),
            Stmt::Store { buffer, indices, value }
                if indices.len() == 1 && (indices[0].ty().lanes > 1 || value.ty().lanes > 1) =>
            {
                self.vector_store(buffer, &indices[0], value)
            }
            Stmt::Store { buffer, indices, value } => {
                self.accumulator = Some(buffer.id());
                let v = self.expr(value);
                self.accumulator = None;
                let mut v = v?;
                if buffer.elem() == DataType::Bool {
                    v = self.e(self.b.build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "frombool"))?.into();
                }
                let ptr = self.address(buffer, indices)?;
                self.e(self.b.build_store(ptr, v))?;
                Ok(())
            }
            Stmt::Allocate { buffer, body } if self.gpu && buffer.scope() == crate::tir::Scope::Shared => {
                // Block-shared memory: a module global in address space 3.
                let ty = elem_type(self.ctx, buffer.elem());
                let arr = match ty {
                    BasicTypeEnum::FloatType(t) => t.array_type(buffer.numel().max(1) as u32),
                    BasicTypeEnum::IntType(t) => t.array_type(buffer.numel().max(1) as u32),
                    _ => return Err(self.unsupported("a shared buffer of this type")),
                };
                let name = format!("{}_{}_shared", self.kernel, buffer.name());
                let g = self.module.add_global(arr, Some(AddressSpace::from(3u16)), &name);
                g.set_initializer(&arr.get_undef());
                g.set_linkage(Linkage::Internal);
                g.set_alignment(16);
                let ptr = self.e(self.b.build_pointer_cast(
                    g.as_pointer_value(),
                    compat::pointer_in(self.ctx, ty, AddressSpace::from(3u16)),
                    "shared",
                ))?;
                self.buffers.insert(buffer.id(), ptr);
                self.stmt(body)
            }
            Stmt::Allocate { buffer, body }
                if register_buffer::fits_a_register(buffer, body, self.features.transpose_lanes) =>
            {
                let t = self.ctx.f32_type().vec_type(buffer.numel() as u32);
                self.register_buffers.insert(buffer.id(), t.get_undef());
                let done = self.stmt(body);
                self.register_buffers.remove(&buffer.id());
                done
            }
            Stmt::Allocate { buffer, body } => {
                let bytes = buffer.numel() * buffer.elem().size_bytes();
                if bytes > MAX_LOCAL_BYTES {
                    return Err(self.unsupported(&format!("a {bytes}-byte kernel-local buffer `{}`", buffer.name())));
                }
                // Allocas go in the entry block so they are static stack slots.
                let here = self.b.get_insert_block();
                match self.entry.get_first_instruction() {
                    Some(i) => self.b.position_before(&i),
                    None => self.b.position_at_end(self.entry),
                }
                let ty = elem_type(self.ctx, buffer.elem());
                let n = self.i64c(buffer.numel().max(1) as i64);
                let ptr = self.e(self.b.build_array_alloca(ty, n, buffer.name()))?;
                if let Some(bb) = here {
                    self.b.position_at_end(bb);
                }
                self.buffers.insert(buffer.id(), ptr);
                self.stmt(body)
            }
            Stmt::If { cond, then_case, else_case } => {
                let c = self.expr(cond)?.into_int_value();
                let then_bb = self.ctx.append_basic_block(self.func, "then");
                let else_bb = self.ctx.append_basic_block(self.func, "else");
                let join = self.ctx.append_basic_block(self.func, "endif");
                self.e(self.b.build_conditional_branch(c, then_bb, else_bb))?;
                self.b.position_at_end(then_bb);
                self.stmt(then_case)?;
                // What the then-branch transposed does not dominate the else-branch.
                self.forget_transposes();
                self.e(self.b.build_unconditional_branch(join))?;
                self.b.position_at_end(else_bb);
                if let Some(e) = else_case {
                    self.stmt(e)?;
                }
                self.e(self.b.build_unconditional_branch(join))?;
                self.b.position_at_end(join);
                Ok(())
            }
            Stmt::Seq(_) | Stmt::Let { .. } => self.stmt(s),
            Stmt::Evaluate(Expr::Call(Intrinsic::Barrier, ..)) => {
                if !self.gpu {
                    // A GPU-scheduled kernel run serially on the CPU (how tests check GPU
                    // schedules without a GPU): its thread loops run one after another,
                    // so every barrier between them already holds.
                    return Ok(());
                }
                let f = match self.module.get_function("llvm.nvvm.barrier0") {
                    Some(f) => f,
                    None => {
                        self.module.add_function("llvm.nvvm.barrier0", self.ctx.void_type().fn_type(&[], false), None)
                    }
                };
                self.e(self.b.build_call(f, &[], ""))?;
                Ok(())
            }
            Stmt::Evaluate(Expr::Call(f, args, _)) if f.is_amx() => self.amx(*f, args),
            Stmt::Evaluate(Expr::Call(Intrinsic::Prefetch, args, _)) => self.prefetch(args),
            Stmt::Evaluate(e) => {
                if !s.is_nop() {
                    self.expr(e)?;
                }
                Ok(())
            }
        }
    }

    pub(super) fn for_loop(
        &mut self,
        var: &Var,
        min: &Expr,
        extent: &Expr,
        kind: ForKind,
        body: &Stmt,
    ) -> Result<(), CodegenError> {
        let min_v = self.expr(min)?.into_int_value();
        let ext_v = self.expr(extent)?.into_int_value();
        if self.non_negative(min) {
            self.non_negative_vars.insert(var.id);
        }
        if let (ForKind::ThreadBinding(axis), true) = (kind, self.gpu) {
            // No loop: this thread's (or block's) index, guarded by the extent
            // (the launch may have more threads than this loop has iterations).
            let name = match axis {
                ThreadAxis::ThreadX => "tid.x",
                ThreadAxis::ThreadY => "tid.y",
                ThreadAxis::ThreadZ => "tid.z",
                ThreadAxis::BlockX => "ctaid.x",
                ThreadAxis::BlockY => "ctaid.y",
                ThreadAxis::BlockZ => "ctaid.z",
            };
            let i32t = self.ctx.i32_type();
            let intr = format!("llvm.nvvm.read.ptx.sreg.{name}");
            let f = match self.module.get_function(&intr) {
                Some(f) => f,
                None => self.module.add_function(&intr, i32t.fn_type(&[], false), None),
            };
            let raw = match self.e(self.b.build_call(f, &[], name))?.try_as_basic_value() {
                inkwell::values::ValueKind::Basic(v) => v.into_int_value(),
                inkwell::values::ValueKind::Instruction(_) => return Err(self.unsupported("a thread index")),
            };
            let idx = self.e(self.b.build_int_z_extend(raw, self.ctx.i64_type(), "idx"))?;
            let inside = self.e(self.b.build_int_compare(IntPredicate::SLT, idx, ext_v, "inside"))?;
            let v = self.e(self.b.build_int_add(min_v, idx, &var.name))?;
            let body_bb = self.ctx.append_basic_block(self.func, "bound");
            let exit = self.ctx.append_basic_block(self.func, "bound.exit");
            self.e(self.b.build_conditional_branch(inside, body_bb, exit))?;
            self.b.position_at_end(body_bb);
            self.vars.insert(var.id, v.into());
            self.stmt(body)?;
            self.e(self.b.build_unconditional_branch(exit))?;
            self.b.position_at_end(exit);
            return Ok(());
        }
        let (begin, end) = if kind == ForKind::Parallel && !self.sliced {
            // This task's contiguous slice of the iterations.
            self.sliced = true;
            let lo = self.e(self.b.build_int_mul(ext_v, self.task_id, "lo"))?;
            let lo = self.e(self.b.build_int_signed_div(lo, self.num_tasks, "lo"))?;
            let next = self.e(self.b.build_int_add(self.task_id, self.i64c(1), "next"))?;
            let hi = self.e(self.b.build_int_mul(ext_v, next, "hi"))?;
            let hi = self.e(self.b.build_int_signed_div(hi, self.num_tasks, "hi"))?;
            (self.e(self.b.build_int_add(min_v, lo, "begin"))?, self.e(self.b.build_int_add(min_v, hi, "end"))?)
        } else {
            (min_v, self.e(self.b.build_int_add(min_v, ext_v, "end"))?)
        };
        let pre = self.b.get_insert_block().ok_or_else(|| self.unsupported("a loop outside a block"))?;
        let header = self.ctx.append_basic_block(self.func, "for.header");
        let body_bb = self.ctx.append_basic_block(self.func, "for.body");
        let exit = self.ctx.append_basic_block(self.func, "for.exit");
        self.e(self.b.build_unconditional_branch(header))?;
        self.b.position_at_end(header);
        let phi = self.e(self.b.build_phi(self.ctx.i64_type(), &var.name))?;
        phi.add_incoming(&[(&begin, pre)]);
        let i = phi.as_basic_value().into_int_value();
        let cond = self.e(self.b.build_int_compare(IntPredicate::SLT, i, end, "cond"))?;
        self.e(self.b.build_conditional_branch(cond, body_bb, exit))?;
        self.b.position_at_end(body_bb);
        self.vars.insert(var.id, i.into());
        self.stmt(body)?;
        let latch = self.b.get_insert_block().ok_or_else(|| self.unsupported("a loop body outside a block"))?;
        let next = self.e(self.b.build_int_add(i, self.i64c(1), "next"))?;
        let backedge = self.e(self.b.build_unconditional_branch(header))?;
        if encloses_register_tile(body) || is_odd_width_local_copy(body) {
            self.disable_unrolling(backedge);
        }
        phi.add_incoming(&[(&next, latch)]);
        self.b.position_at_end(exit);
        Ok(())
    }
}

/// Whether a loop's body holds a register tile the schedule unrolled: vector
/// stores into a kernel-local buffer in a run of statements (TIR expands
/// unrolled loops before code generation), each a whole number of registers
/// wide. Vectors of other widths (10 columns) are legalized lane by lane; as
/// values carried around a loop they cost more than LLVM's unrolling.
///
/// Small tiles count too (one to three accumulators): LLVM unrolled the
/// 128-step tail tile of ResNet-18's 128-channel Winograd product (two rows
/// of accumulators) eight times over, with its prefetches and broadcasts,
/// and the whole kernel took 1.18× the time (Zen 3, paired `ab_kernels.py`,
/// one and two threads); rolled, YOLOv8n's largest Winograd product ran
/// 0.90× and MobileNetV2's one-accumulator 7 × 7 depthwise rows 0.86–0.92×.
/// (A 16-step reduction of three accumulators, YOLOv8n's 16 → 1 box
/// convolution, lost 4 µs.)
fn encloses_register_tile(body: &Stmt) -> bool {
    let whole_vector = |indices: &[Expr]| matches!(indices.last(), Some(Expr::Ramp { lanes, .. }) if *lanes >= 4 && lanes.is_power_of_two());
    let mut found = false;
    body.visit(&mut |s| {
        if let Stmt::Seq(parts) = s {
            found |= parts.iter().any(|p| {
                matches!(p, Stmt::Store { buffer, indices, .. }
                    if buffer.scope() == Scope::Local && whole_vector(indices))
            });
        }
    });
    found
}

/// Whether a loop's body is one copy of a vector of a width that is no power
/// of two (a 7-float row) into a kernel-local buffer: a padded image's fill.
/// Legalized as 4 + 2 + 1 moves, LLVM unrolled it into blocks of thousands of
/// moves (MobileNetV2's 7 × 7 padded images on AVX2: ~3,300 lines of
/// assembly each, a third of the model's, for a copy that streams anyway).
fn is_odd_width_local_copy(body: &Stmt) -> bool {
    matches!(body, Stmt::Store { buffer, indices, value }
        if buffer.scope() == Scope::Local
            && matches!(indices.last(), Some(Expr::Ramp { lanes, .. }) if *lanes > 1 && !lanes.is_power_of_two())
            && matches!(value, Expr::Load(..)))
}

impl FnGen<'_, '_> {
    /// Marks the loop whose backedge is `branch` `llvm.loop.unroll.disable`.
    /// Around a register tile the schedule has decided the unrolling: LLVM
    /// fully unrolls a 3-long window loop and then keeps the input values
    /// shared by neighbouring copies live across them — more vectors than
    /// registers, spilled in the hottest loop.
    fn disable_unrolling(&self, branch: inkwell::values::InstructionValue<'_>) {
        use inkwell::llvm_sys::core::{
            LLVMGetMDKindIDInContext, LLVMMDNodeInContext2, LLVMMDStringInContext2, LLVMMetadataAsValue,
            LLVMSetMetadata,
        };
        use inkwell::llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
        use inkwell::values::AsValueRef;
        let ctx = self.ctx.raw();
        let (kind, option) = ("llvm.loop", "llvm.loop.unroll.disable");
        // SAFETY: every pointer comes from this function's live context and
        // instruction; a loop ID refers to itself (its first operand), so it
        // is made from a temporary node that is then replaced by the result.
        unsafe {
            let name = LLVMMDStringInContext2(ctx, option.as_ptr().cast(), option.len());
            let mut disable = [name];
            let disable = LLVMMDNodeInContext2(ctx, disable.as_mut_ptr(), 1);
            let temp = LLVMTemporaryMDNode(ctx, std::ptr::null_mut(), 0);
            let mut operands = [temp, disable];
            let id = LLVMMDNodeInContext2(ctx, operands.as_mut_ptr(), 2);
            LLVMMetadataReplaceAllUsesWith(temp, id); // also frees `temp`
            let kind = LLVMGetMDKindIDInContext(ctx, kind.as_ptr().cast(), kind.len() as u32);
            LLVMSetMetadata(branch.as_value_ref(), kind, LLVMMetadataAsValue(ctx, id));
        }
    }
}

impl FnGen<'_, '_> {
    /// `kiln.prefetch(b[i])`: `llvm.prefetch` (read, keep in all cache
    /// levels, data) of element `min(i, len - 1)`, or of element `i` where
    /// the call allows it past the buffer (`kiln.prefetch(b[i], 1)`).
    /// Nothing on the GPU.
    fn prefetch(&mut self, args: &[Expr]) -> Result<(), CodegenError> {
        let Some((buf, index)) = crate::codegen::prefetch_operand(args, false) else {
            return Err(self.unsupported("kiln.prefetch without one flat element operand"));
        };
        if self.gpu {
            return Ok(());
        }
        // Not `inbounds`: an address allowed past the buffer (see
        // `Intrinsic::Prefetch`) is a hint nothing dereferences.
        let i = self.expr(&index)?.into_int_value();
        let base = self.buffer_base(buf)?;
        let addr = self.e(compat::gep(&self.b, elem_type(self.ctx, buf.elem()), base, &[i], "prefetchaddr"))?;
        let addr = self.byte_pointer(addr)?;
        let i32t = self.ctx.i32_type();
        let [read, locality, data] = [0, 3, 1].map(|v| i32t.const_int(v, false).into());
        self.call_void(compat::PREFETCH, &[addr.into(), read, locality, data])
    }
}
