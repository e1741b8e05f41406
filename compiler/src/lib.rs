//! kiln: compile deep-learning models into machine code at `cargo build` time.
//!
//! A model — declared in Rust with [`relay_model!`], or written in Relay text
//! ([`relay::parse_module`]) — is a [`relay::IRModule`]. The pass
//! infrastructure ([`transform`]) optimizes and fuses it; [`backend`] lowers
//! fused functions to TIR kernels and plans their memory; [`codegen`] emits
//! LLVM (object files, assembly, a JIT) or portable C. The IR levels without
//! LLVM live in `kiln-ir` and are re-exported here.
//!
//! # Declaring a model
//!
//! ```
//! kiln::relay_model! {
//!     /// The 784-128-10 MLP of the seeds.
//!     pub fn mlp(x: Tensor<[1, 784], f32>) -> Tensor<[1, 10], f32> {
//!         weight w1: [784, 128]; weight b1: [128];
//!         weight w2: [128, 10];  weight b2: [10];
//!         let h = relu(matmul(x, w1) + b1);
//!         matmul(h, w2) + b2
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kiln::relay::transform::default_pipeline;
//! use kiln::transform::{apply, PassContext};
//!
//! let mut module = mlp(); // every shape was checked when the macro expanded
//! kiln::relay::infer_module(&mut module)?;
//! let fused = apply(&default_pipeline()?, module, &PassContext::new().with_opt_level(3))?;
//! let text = kiln::relay::print_module(&fused);
//! assert_eq!(text.matches("Primitive=1").count(), 2); // matmul+add+relu, matmul+add
//! # Ok(())
//! # }
//! ```
//!
//! # Declaring passes
//!
//! ```
//! use kiln::relay::{ExprId, IRModule};
//! use kiln::transform::{apply, Pass, PassContext, Sequential};
//!
//! /// A module pass: may add or remove functions.
//! #[kiln::module_pass(opt_level = 1, required = ["InferType"])]
//! fn drop_unused_functions(mut m: IRModule, _ctx: &PassContext) -> IRModule {
//!     for name in m.function_names() {
//!         if name != "main" {
//!             m.remove_function(&name);
//!         }
//!     }
//!     m
//! }
//!
//! /// A function pass with state: constructor arguments kept in fields.
//! #[kiln::function_pass(opt_level = 2, required = ["DropUnusedFunctions"])]
//! struct ReplaceBody {
//!     replacement: String,
//! }
//!
//! impl ReplaceBody {
//!     fn transform_function(&self, _f: ExprId, m: &mut IRModule, _ctx: &PassContext) -> Result<ExprId, String> {
//!         let other = kiln::relay::parse_module(&self.replacement).map_err(|e| e.to_string())?;
//!         Ok(m.store.import(&other.store, other.main().map_err(|e| e.to_string())?))
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! DropUnusedFunctions::register()?; // so `required` can name it
//! let replace = ReplaceBody { replacement: "def @main(%x: float32) { exp(%x) }".into() };
//! let pipeline = Sequential::new("Mine", vec![std::sync::Arc::new(replace)])?;
//! let m = kiln::relay::parse_module("def @main(%x: float32) { %x }\ndef @other() { 1f }")?;
//! let out = apply(&pipeline, m, &PassContext::new())?;
//! assert_eq!(out.function_names(), ["main"]);
//! # Ok(())
//! # }
//! ```

extern crate self as kiln;

pub use kiln_ir::*;

pub mod backend;
pub mod build;
pub mod codegen;
pub mod frontend;
mod parallel;
pub mod relay;
pub mod schedule;
pub mod target;
pub mod te;

pub mod topi;
pub mod transform;
pub mod tune;
pub mod viz;

pub use build::{Build, Precision};

/// The layers that contribute built-in passes to the registry
/// ([`transform::get_pass`]), wired here at the crate root so that the pass
/// infrastructure never names a layer above it.
pub(crate) const BUILTIN_PASS_PROVIDERS: &[transform::PassProvider] =
    &[relay::transform::builtin_passes, schedule::passes::tir_passes];

pub use kiln_macros::{function_pass, module_pass, relay_model};

/// What the macros' expansions call. Not a public API.
#[doc(hidden)]
pub mod __private {
    use crate::relay::ExprId;

    /// A `transform_function` may return the new function or a `Result` of it.
    pub trait IntoPassResult {
        fn into_pass_result(self) -> Result<ExprId, crate::transform::PassBodyError>;
    }

    impl IntoPassResult for ExprId {
        fn into_pass_result(self) -> Result<ExprId, crate::transform::PassBodyError> {
            Ok(self)
        }
    }

    impl<E: std::fmt::Display> IntoPassResult for Result<ExprId, E> {
        fn into_pass_result(self) -> Result<ExprId, crate::transform::PassBodyError> {
            self.map_err(|e| e.to_string().into())
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
