//! TIR passes.

pub mod flatten;
pub mod simplify;

pub use flatten::flatten_buffers;
pub use simplify::simplify_prim_func;
