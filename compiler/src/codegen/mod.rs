//! Code generation from TIR: portable C (`c`), and later LLVM.
//!
//! The kernel ABI, shared by every backend: a kernel is
//! `int32_t name(T0* p0, …, Tn* pn, int64_t task_id, int64_t num_tasks)` with
//! the inputs first (read-only) and the outputs last. Its outermost parallel
//! loop is split into `num_tasks` contiguous slices and the call computes
//! slice `task_id`; a kernel without a parallel loop does all the work in
//! task 0. It returns 0, or `kiln_runtime::STATUS_INDEX_OUT_OF_RANGE` when a
//! `check_index` failed (indices read from the inputs: the kernel never reads
//! out of bounds, but its outputs are then invalid). Kernels never allocate
//! from the heap. Every kernel also has a packed entry point
//! `int32_t name_packed(void** args, int64_t task_id, int64_t num_tasks)`
//! ([`PackedKernel`]), so callers need one function-pointer type for all.

pub mod c;
#[cfg(feature = "llvm")]
pub mod llvm;

/// The packed kernel entry point: `args` holds one pointer per kernel parameter.
pub use kiln_runtime::PackedKernel;

/// Why a kernel cannot be generated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CodegenError {
    #[error("kernel `{kernel}`: {what} is not supported by the {backend} backend")]
    Unsupported { kernel: String, backend: &'static str, what: String },
    #[error("target `{target}`: {message}")]
    BadTarget { target: String, message: String },
    #[error("kernel `{kernel}`: LLVM: {message}")]
    Llvm { kernel: String, message: String },
}
