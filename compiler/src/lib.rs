//! kiln: compile deep-learning models into machine code at `cargo build` time.
//!
//! The IR levels without LLVM live in `kiln-ir` and are re-exported here.

extern crate self as kiln;

pub use kiln_ir::*;

pub mod arith;
pub mod backend;
pub mod codegen;
pub mod relay;
pub mod schedule;
pub mod te;
pub mod tir;
pub mod topi;
pub mod transform;

pub use kiln_macros::{function_pass, module_pass, relay_model};

/// What the macros' expansions call. Not a public API.
#[doc(hidden)]
pub mod __private {
    use crate::relay::ExprId;

    /// A `transform_function` may return the new function or a `Result` of it.
    pub trait IntoPassResult {
        fn into_pass_result(self) -> Result<ExprId, String>;
    }

    impl IntoPassResult for ExprId {
        fn into_pass_result(self) -> Result<ExprId, String> {
            Ok(self)
        }
    }

    impl<E: std::fmt::Display> IntoPassResult for Result<ExprId, E> {
        fn into_pass_result(self) -> Result<ExprId, String> {
            self.map_err(|e| e.to_string())
        }
    }

    /// Parse the Relay text `relay_model!` embedded after checking it.
    pub fn parse_embedded_model(text: &str) -> crate::relay::IRModule {
        match kiln_ir::relay::parser::parse_module(text) {
            Ok(m) => m,
            // The macro parsed this exact text while expanding; failing here means
            // kiln and kiln-macros come from different versions.
            Err(e) => panic!("kiln: a model embedded by relay_model! no longer parses ({e}); are kiln and kiln-macros the same version?"),
        }
    }
}
