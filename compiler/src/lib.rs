//! kiln: compile deep-learning models into machine code at `cargo build` time.
//!
//! The IR levels without LLVM live in `kiln-ir` and are re-exported here.

extern crate self as kiln;

pub use kiln_ir::*;

pub mod arith;
pub mod backend;
pub mod codegen;
pub mod relay;
pub mod te;
pub mod tir;
pub mod topi;

