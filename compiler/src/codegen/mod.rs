//! Code generation from TIR: portable C (`c`), and later LLVM.
//!
//! The kernel ABI, shared by every backend: a kernel is
//! `void name(T0* p0, …, Tn* pn, int64_t task_id, int64_t num_tasks)` with the
//! inputs first (read-only) and the outputs last. Its outermost parallel loop
//! is split into `num_tasks` contiguous slices and the call computes slice
//! `task_id`; a kernel without a parallel loop does all the work in task 0.
//! Kernels never allocate from the heap.

pub mod c;
#[cfg(feature = "llvm")]
pub mod llvm;

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
