//! TIR passes.

pub mod dot_products;
pub mod flatten;
pub mod forward_stores;
pub mod fuse_loops;
pub mod loop_partition;
pub mod lower_intrinsics;
pub mod lower_trig;
pub mod remove_noop;
pub mod simplify;
pub mod unroll;
pub mod vectorize;

pub use dot_products::dot_products;
pub use flatten::flatten_buffers;
pub use forward_stores::forward_stores;
pub use fuse_loops::fuse_sibling_loops;
pub use loop_partition::partition_loops;
pub use lower_intrinsics::lower_intrinsics;
pub use lower_trig::lower_trig;
pub use remove_noop::{remove_noop_stmt, remove_noops};
pub use simplify::simplify_prim_func;
pub use unroll::{unroll_loops, unroll_loops_with, UnrollConfig};
pub use vectorize::{lane_at, lane_of, vectorize_loops};
