//! Relay: the IR itself comes from `kiln-ir` (re-exported here); this module
//! adds the Relay optimization passes, which need the pass infrastructure.

pub use kiln_ir::relay::*;

pub mod transform;
