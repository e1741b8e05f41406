//! [`OwnedArena`]: the heap buffer an `OwnedModel` runs in.
//!
//! A model's arena and weights span megabytes that every run sweeps through;
//! in 4 KiB pages that is thousands of TLB entries (a Zen 3 core's L2 TLB
//! holds 2,048), and the page walks showed as a wider spread of run times
//! than ONNX Runtime's on MobileNetV2. A buffer of 2 MiB or more is therefore
//! 2 MiB-aligned and, on Linux, marked for transparent huge pages before its
//! first touch (`madvise(MADV_HUGEPAGE)`: the default THP mode of most
//! distributions gives huge pages only to regions that ask).

use core::ptr::NonNull;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};

use crate::ARENA_ALIGN;

/// The size of an x86-64 or AArch64 (4 KiB granule) huge page.
pub const HUGE_PAGE: usize = 2 << 20;

/// An owned, zeroed, 64-byte-aligned buffer; from [`HUGE_PAGE`] bytes on, it
/// is huge-page aligned and asks the kernel for huge pages.
///
/// ```
/// let mut arena = kiln_runtime::OwnedArena::new(1000);
/// let bytes = arena.bytes_mut();
/// assert!(bytes.len() >= 1000 && bytes.as_ptr() as usize % kiln_runtime::ARENA_ALIGN == 0);
/// assert!(bytes.iter().all(|&b| b == 0));
/// let big = kiln_runtime::OwnedArena::new(5 << 20);
/// assert_eq!(big.bytes().as_ptr() as usize % kiln_runtime::HUGE_PAGE, 0);
/// ```
#[derive(Debug)]
pub struct OwnedArena {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the arena owns its bytes exclusively, like a `Vec<u8>`.
unsafe impl Send for OwnedArena {}
// SAFETY: shared access only reads (`bytes`).
unsafe impl Sync for OwnedArena {}

impl OwnedArena {
    /// A zeroed arena of at least `bytes` bytes (one block for zero bytes).
    pub fn new(bytes: usize) -> Self {
        let huge = bytes >= HUGE_PAGE;
        let align = if huge { HUGE_PAGE } else { ARENA_ALIGN };
        let size = bytes.max(1).div_ceil(align) * align;
        let layout = Layout::from_size_align(size, align).expect("an arena's size fits in isize");
        // SAFETY: `size` is nonzero.
        let Some(ptr) = NonNull::new(unsafe { alloc(layout) }) else { handle_alloc_error(layout) };
        if huge {
            advise_huge_pages(ptr, size);
        }
        // Zeroed after the advice, so that these first touches fault in huge pages.
        // SAFETY: `ptr` is valid for `size` bytes.
        unsafe { ptr.as_ptr().write_bytes(0, size) };
        OwnedArena { ptr, layout }
    }

    /// The arena as bytes, 64-byte aligned (its length rounded up to the alignment).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `layout.size()` initialized bytes, owned by `self`.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The arena as mutable bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The first byte, for kernel arguments.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for OwnedArena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Ask for transparent huge pages over `[ptr, ptr + len)`; only a hint (a
/// kernel without THP, or with it off, says no and the pages stay small).
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the range is one live allocation; MADV_HUGEPAGE changes no contents.
    let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_: NonNull<u8>, _: usize) {}
