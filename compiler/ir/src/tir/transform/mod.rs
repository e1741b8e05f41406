//! TIR passes.

pub mod flatten;
pub mod fuse_loops;
pub mod simplify;

pub use flatten::flatten_buffers;
pub use fuse_loops::fuse_sibling_loops;
pub use simplify::simplify_prim_func;
