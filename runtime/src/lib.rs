//! `kiln-runtime`: what a binary with a kiln-compiled model links at run time.
//!
//! kiln compiles a model in `build.rs` into a static library of kernels and a
//! Rust file of glue; [`include_model!`] includes that glue, which defines a
//! typed `Model` whose `run` calls the kernels in order over one arena. This
//! crate holds only what the glue needs: the kernel ABI, the error type, and
//! (with feature `std`) a persistent thread pool that spreads task-sliced
//! kernels over threads. No allocation happens in `run`.
//!
//! `no_std` unless feature `std` (on by default) is enabled.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]

#[cfg(feature = "std")]
mod arena;
pub mod cpu;
#[cfg(feature = "std")]
mod pool;

#[cfg(feature = "std")]
pub use arena::{OwnedArena, HUGE_PAGE};
#[cfg(feature = "std")]
pub use pool::ThreadPool;

#[cfg(feature = "cuda")]
pub mod cuda;

/// The packed entry point every kernel has:
/// `int32_t name_packed(void** args, int64_t task_id, int64_t num_tasks)`,
/// returning 0 on success or one of the `STATUS_*` codes.
pub type PackedKernel = unsafe extern "C" fn(args: *const *mut u8, task_id: i64, num_tasks: i64) -> i32;

/// A kernel's status: an index taken from the model's inputs (a `Gather`
/// index, a token id) was outside its axis. The kernel read element 0
/// instead, so its outputs are meaningless.
pub const STATUS_INDEX_OUT_OF_RANGE: i32 = 1;

/// Errors of the generated glue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The arena given to `Model::new` is smaller than the model's `ARENA_BYTES`.
    ArenaTooSmall {
        /// Bytes the buffer needs: the arena plus the padding to align it.
        needed: usize,
        /// Bytes the buffer has.
        given: usize,
    },
    /// An input or output slice has the wrong number of elements.
    WrongLength {
        /// The input's or output's name in the model.
        name: &'static str,
        /// Elements the model's shape has.
        expected: usize,
        /// Elements the slice has.
        given: usize,
    },
    /// Kernel `kernel` returned the nonzero `status` (a `STATUS_*` code); the
    /// outputs of this run are not valid.
    Kernel {
        /// The kernel's symbol (without `_packed`).
        kernel: &'static str,
        /// What it returned: a `STATUS_*` code ([`status_message`] says what it means).
        status: i32,
    },
    /// The model was compiled for `target`, whose code uses the instruction
    /// set extension `feature`, and this CPU lacks it.
    MissingCpuFeature {
        /// The missing feature, as LLVM names it (`avx512f`, `fma`).
        feature: &'static str,
        /// The target string the model was compiled for.
        target: &'static str,
    },
}

impl Error {
    /// The error for kernel `kernel`'s `status`, or `Ok` when it is 0.
    #[inline]
    pub fn check(kernel: &'static str, status: i32) -> Result<(), Error> {
        if status == 0 {
            Ok(())
        } else {
            Err(Error::Kernel { kernel, status })
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::ArenaTooSmall { needed, given } => {
                write!(f, "the arena has {given} bytes, the model needs {needed}")
            }
            Error::WrongLength { name, expected, given } => {
                write!(f, "`{name}` has {given} elements, the model expects {expected}")
            }
            Error::Kernel { kernel, status } => write!(f, "kernel `{kernel}`: {}", status_message(*status)),
            Error::MissingCpuFeature { feature, target } => write!(
                f,
                "the model was compiled for `{target}`, whose code uses the CPU feature `{feature}`, \
                 which this CPU lacks; rebuild it for this CPU (e.g. `llvm -mcpu=native`) or a portable one"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// What a kernel's nonzero status means.
pub fn status_message(status: i32) -> &'static str {
    match status {
        STATUS_INDEX_OUT_OF_RANGE => {
            "an index read from the inputs is out of range for the axis it indexes \
             (a Gather index or token id at or past the axis size, or below minus it)"
        }
        _ => "failed with an unknown status",
    }
}

/// Refuse to run on a CPU without every feature in `required` (what the glue
/// calls before creating a model compiled for `target`).
pub fn check_cpu(required: &[&'static str], target: &'static str) -> Result<(), Error> {
    match cpu::first_missing(required) {
        Some(feature) => Err(Error::MissingCpuFeature { feature, target }),
        None => Ok(()),
    }
}

/// Call one kernel as a single task on the calling thread; its status.
///
/// # Safety
/// `args` must hold one valid pointer per kernel parameter, each to a buffer
/// of the size the kernel was compiled for.
#[inline]
#[must_use = "a nonzero status is an error the caller must report"]
pub unsafe fn run_serial(kernel: PackedKernel, args: &[*mut u8]) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { kernel(args.as_ptr(), 0, 1) }
}

/// The arena offset alignment kiln plans with; an arena must start at a multiple of it.
pub const ARENA_ALIGN: usize = 64;

/// Split a caller-provided buffer into the 64-byte-aligned arena of `bytes`.
///
/// ```
/// let mut buffer = [0u8; 300];
/// let arena = kiln_runtime::align_arena(&mut buffer, 200).expect("200 + 63 bytes fit");
/// assert_eq!((arena.len(), arena.as_ptr() as usize % 64), (200, 0));
/// // Too small for the arena and the alignment padding: an error, not a panic.
/// assert!(kiln_runtime::align_arena(&mut [0u8; 100], 200).is_err());
/// ```
pub fn align_arena(buf: &mut [u8], bytes: usize) -> Result<&mut [u8], Error> {
    let skip = buf.as_ptr().align_offset(ARENA_ALIGN);
    let given = buf.len();
    if skip == usize::MAX || given < skip || given - skip < bytes {
        return Err(Error::ArenaTooSmall { needed: bytes + ARENA_ALIGN - 1, given });
    }
    Ok(&mut buf[skip..skip + bytes])
}

/// Include the glue kiln generated for `model` in `build.rs`:
/// `kiln_runtime::include_model!("mlp");` defines the module `mlp`.
///
/// ```ignore
/// // build.rs: kiln::Build::new("mlp").onnx("mlp.onnx").compile_or_exit();
/// kiln_runtime::include_model!("mlp");
///
/// fn main() -> Result<(), kiln_runtime::Error> {
///     let mut model = mlp::OwnedModel::new()?; // checks the CPU's features
///     let x = [0.5f32; mlp::X_LEN];
///     let mut y = [0f32; mlp::OUTPUT0_LEN];
///     model.run(&x, &mut y)?; // fixed-size arrays: a wrong length does not compile
///     Ok(())
/// }
/// ```
#[macro_export]
macro_rules! include_model {
    ($name:literal) => {
        include!(concat!(env!("OUT_DIR"), "/kiln/", $name, ".rs"));
    };
}
