//! From an optimized Relay module to kernels: `lower_te` (each primitive
//! function → one TIR kernel).

pub mod aot;
pub mod c_library;
pub mod cuda;
pub mod host;
pub mod lower_te;
pub mod plan_memory;
pub mod profile;
pub mod run_error;

pub use run_error::RunError;
