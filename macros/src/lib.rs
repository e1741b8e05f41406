//! Proc-macros of kiln (`#[module_pass]`, `#[function_pass]`, `relay_model!`).
//!
//! Not written yet: see the macros issue. The crate exists so the workspace
//! has its final shape and `kiln` can depend on it.
