//! The Relay optimization passes, one file each.

pub mod common_subexpr;
pub mod dead_code;
pub mod fold_constant;
pub mod fold_scale_axis;
pub mod fuse_ops;
pub mod simplify_expr;
pub mod simplify_inference;
pub mod to_anf;
