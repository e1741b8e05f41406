//! `kiln-ir`: the IR levels of kiln that need no LLVM.
//!
//! - IR-level building blocks every level shares: [`arena`], [`dtype`],
//!   [`span`], [`attrs`], [`tensor`], [`error`].
//! - [`relay`]: the graph IR, its operator registry, text format, type
//!   inference and reference interpreter.
//!
//! `kiln-macros` depends on this crate to type-check models while it expands
//! them; `kiln` re-exports all of it.

pub mod arena;
pub mod arith;
pub mod attrs;
pub mod dtype;
pub mod error;
pub mod npy;
pub mod relay;
pub mod span;
pub mod tensor;
pub mod tir;

pub use attrs::{AttrValue, Attrs};
pub use dtype::DataType;
pub use error::{Error, OpError, Result};
pub use span::Span;
pub use tensor::Tensor;
