//! The Relay optimization passes, one file each.

pub mod common_subexpr;
pub mod dead_code;
pub mod fuse_ops;
pub mod simplify_expr;
pub mod simplify_inference;
