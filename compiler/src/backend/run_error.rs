//! Why a plan could not run in this process (the host executor, the CUDA
//! executor, the input checks they share).

use kiln_ir::DataType;

/// Why an executor could not be set up, or a run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run was given the wrong number of inputs.
    #[error("the model takes {expected} input(s), {given} given")]
    InputCount {
        /// How many inputs the model takes.
        expected: usize,
        /// How many were given.
        given: usize,
    },
    /// An input's shape or dtype is not the model's.
    #[error("input {index} (`{name}`) must be {expected_shape:?} {expected_dtype}, got {shape:?} {dtype}")]
    InputMismatch {
        /// 0-based position of the input.
        index: usize,
        /// The input's name in the model.
        name: String,
        /// The shape the model takes.
        expected_shape: Vec<usize>,
        /// The dtype the model takes.
        expected_dtype: DataType,
        /// The shape given.
        shape: Vec<usize>,
        /// The dtype given.
        dtype: DataType,
    },
    /// The kernel library (JIT, shared object, PTX) has no usable kernel of this name.
    #[error("kernel `{kernel}`: {message}")]
    MissingKernel {
        /// The kernel's name.
        kernel: String,
        /// Why it is unusable.
        message: String,
    },
    /// The thread pool could not start.
    #[error("cannot start {threads} threads: {message}")]
    Threads {
        /// Threads asked for.
        threads: usize,
        /// What the system said.
        message: String,
    },
    /// Kernel `kernel` returned the nonzero `status` (a `kiln_runtime::STATUS_*` code).
    #[error("kernel `{kernel}`: {}", kiln_runtime::status_message(*status))]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// The status it returned.
        status: i32,
    },
    /// Generating, compiling or loading the kernels' C failed (`CLibrary`).
    #[error("C backend: {message}")]
    CCompiler {
        /// What failed, with the compiler's output where there is some.
        message: String,
    },
    /// The target cannot be compiled for or run on this machine: a CPU
    /// feature it lacks, a CPU LLVM does not know, a kiln without LLVM.
    #[error("{message}")]
    Target {
        /// What is wrong, naming the target.
        message: String,
    },
    /// The GPU (driver, memory, launch) failed.
    #[error("GPU: {message}")]
    Device {
        /// What failed, with the driver's error where there is one.
        message: String,
    },
}
