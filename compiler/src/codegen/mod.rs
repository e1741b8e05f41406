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

/// The kernel attribute naming the length of the rows its contiguous reads
/// of global buffers lie in (an input plane's width): on LLVM with masked
/// loads, each such read whose lane-invariant part is a multiple of it reads
/// whole vectors at multiples of the vector width from the row's start and
/// shifts two of them (`llvm/grid.rs`). Set by the depthwise schedule for
/// planes read in place at stride 1.
pub const GRID_ROW_ATTR: &str = "codegen.grid_row";

/// The packed kernel entry point: `args` holds one pointer per kernel parameter.
pub use kiln_runtime::PackedKernel;

/// The operand of `kiln.prefetch(b[i])` after FlattenBuffer: the buffer and
/// the element index clamped into it, `min(i, len - 1)` (a prefetch may run
/// ahead past the buffer's end; its address must not) — unclamped where the
/// call says the address may lie past the buffer (`kiln.prefetch(b[i], 1)`)
/// and `clamp_anyway` does not insist (C: a pointer past an array is
/// undefined there). None for another shape.
pub(crate) fn prefetch_operand(
    args: &[crate::tir::Expr],
    clamp_anyway: bool,
) -> Option<(&crate::tir::Buffer, crate::tir::Expr)> {
    use crate::tir::{BinOp, Expr};
    let (Expr::Load(buf, idx), flag) = (match args {
        [load] => (load, None),
        [load, flag] => (load, flag.as_int()),
        _ => return None,
    }) else {
        return None;
    };
    let [i] = &idx[..] else { return None };
    if flag == Some(1) && !clamp_anyway {
        return Some((buf, i.clone()));
    }
    let last = Expr::int(buf.numel().saturating_sub(1) as i64);
    Some((buf, Expr::bin(BinOp::Min, i.clone(), last)))
}

/// Write the file `path` by `write`, over the old file in place and cut to
/// what was written: rewriting a file's cached pages is several times faster
/// than filling a new file's (100 MB on a 2-core VM: 19 ms in place, 82 ms
/// truncated first, 322 ms new) — a rebuild after a weights-only change
/// writes files of the same size. Not atomic: callers make a half-written
/// file harmless (the build's key goes first and comes back last). A file
/// that cannot be opened for writing (read-only) is replaced.
pub fn write_in_place(
    path: &std::path::Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::io::Seek;
    // Readable too: a writer may check what it wrote (`library::write_gnu_archive`).
    let open = || std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path);
    let file = open().or_else(|_| std::fs::remove_file(path).and_then(|()| open()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    write(&mut out)?;
    let len = out.stream_position()?;
    out.into_inner().map_err(|e| e.into_error())?.set_len(len)
}

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
