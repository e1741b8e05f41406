//! The one seam between LLVM versions: LLVM 14 has typed pointers (`float*`,
//! loads and address computations take the type from the pointer), LLVM 15 and
//! later one opaque `ptr` (each load and `getelementptr` names its type).
//! Code generation always names the pointee; these helpers pass it on or drop
//! it, so no other file knows which LLVM it is built against.

use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::types::{BasicType, PointerType};
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::AddressSpace;

#[cfg(all(feature = "llvm14", feature = "llvm19"))]
compile_error!("kiln: the features `llvm14` and `llvm19` exclude each other; build with `--no-default-features --features llvm19` for LLVM 19");

/// A pointer to `pointee` in the default address space.
pub(super) fn pointer_to<'ctx>(ctx: &'ctx Context, pointee: impl BasicType<'ctx>) -> PointerType<'ctx> {
    pointer_in(ctx, pointee, AddressSpace::default())
}

/// A pointer to `pointee` in `space`.
pub(super) fn pointer_in<'ctx>(
    ctx: &'ctx Context,
    pointee: impl BasicType<'ctx>,
    space: AddressSpace,
) -> PointerType<'ctx> {
    #[cfg(feature = "llvm14")]
    {
        let _ = ctx;
        pointee.ptr_type(space)
    }
    #[cfg(not(feature = "llvm14"))]
    {
        let _ = pointee;
        ctx.ptr_type(space)
    }
}

/// `load pointee, ptr`.
pub(super) fn load<'ctx>(
    b: &Builder<'ctx>,
    pointee: impl BasicType<'ctx>,
    ptr: PointerValue<'ctx>,
    name: &str,
) -> Result<BasicValueEnum<'ctx>, BuilderError> {
    #[cfg(feature = "llvm14")]
    {
        let _ = pointee;
        b.build_load(ptr, name)
    }
    #[cfg(not(feature = "llvm14"))]
    {
        b.build_load(pointee, ptr, name)
    }
}

/// `getelementptr inbounds pointee, ptr, index…`.
///
/// # Safety
/// As LLVM's `inbounds`: the address must stay inside the object `ptr` points
/// into, or the generated code has undefined behaviour.
pub(super) unsafe fn in_bounds_gep<'ctx>(
    b: &Builder<'ctx>,
    pointee: impl BasicType<'ctx>,
    ptr: PointerValue<'ctx>,
    index: &[IntValue<'ctx>],
    name: &str,
) -> Result<PointerValue<'ctx>, BuilderError> {
    #[cfg(feature = "llvm14")]
    {
        let _ = pointee;
        // SAFETY: forwarded to the caller.
        unsafe { b.build_in_bounds_gep(ptr, index, name) }
    }
    #[cfg(not(feature = "llvm14"))]
    {
        // SAFETY: forwarded to the caller.
        unsafe { b.build_in_bounds_gep(pointee, ptr, index, name) }
    }
}

/// `getelementptr pointee, ptr, index…` (not `inbounds`: the address may
/// lie outside the object, for an access that reads none of it there).
pub(super) fn gep<'ctx>(
    b: &Builder<'ctx>,
    pointee: impl BasicType<'ctx>,
    ptr: PointerValue<'ctx>,
    index: &[IntValue<'ctx>],
    name: &str,
) -> Result<PointerValue<'ctx>, BuilderError> {
    #[cfg(feature = "llvm14")]
    {
        let _ = pointee;
        // SAFETY: a plain `getelementptr` only computes an address (wrapping
        // arithmetic); using it is the caller's concern.
        unsafe { b.build_gep(ptr, index, name) }
    }
    #[cfg(not(feature = "llvm14"))]
    {
        // SAFETY: as above.
        unsafe { b.build_gep(pointee, ptr, index, name) }
    }
}

/// The name of `llvm.prefetch` over a generic address-space-0 pointer:
/// typed (`i8*`) before LLVM 15, opaque after.
pub(super) const PREFETCH: &str = if cfg!(feature = "llvm14") { "llvm.prefetch.p0i8" } else { "llvm.prefetch.p0" };
