//! Why a plan could not run in this process (the host executor, the CUDA
//! executor, the input checks they share).

use kiln_ir::DataType;

/// Why an executor could not be set up, or a run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("the model takes {expected} input(s), {given} given")]
    InputCount { expected: usize, given: usize },
    #[error("input {index} (`{name}`) must be {expected_shape:?} {expected_dtype}, got {shape:?} {dtype}")]
    InputMismatch {
        index: usize,
        name: String,
        expected_shape: Vec<usize>,
        expected_dtype: DataType,
        shape: Vec<usize>,
        dtype: DataType,
    },
    /// The kernel library (JIT, shared object, PTX) has no usable kernel of this name.
    #[error("kernel `{kernel}`: {message}")]
    MissingKernel { kernel: String, message: String },
    #[error("cannot start {threads} threads: {message}")]
    Threads { threads: usize, message: String },
    /// Kernel `kernel` returned the nonzero `status` (a `kiln_runtime::STATUS_*` code).
    #[error("kernel `{kernel}`: {}", kiln_runtime::status_message(*status))]
    Kernel { kernel: String, status: i32 },
    /// Generating, compiling or loading the kernels' C failed (`CLibrary`).
    #[error("C backend: {message}")]
    CCompiler { message: String },
    /// The GPU (driver, memory, launch) failed.
    #[error("GPU: {message}")]
    Device { message: String },
}
