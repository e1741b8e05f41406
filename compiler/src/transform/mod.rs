//! The pass infrastructure, modelled on TVM's (`../shared/seeds/pass-infrastructure-tvm-doc.txt`).
//!
//! - [`PassInfo`] and the [`Pass`] trait: every pass is `IRModule → IRModule`
//!   under a [`PassContext`].
//! - Pass kinds: [`ModulePass`], [`FunctionPass`] (one global function at a
//!   time, skipping `SkipOptimization` ones), and [`Sequential`], which runs its
//!   passes in order, each after the passes it `required`.
//! - [`PassContext`]: opt level, required and disabled passes, typed
//!   configuration, instruments, diagnostics; a thread-local stack of scopes.
//! - [`instrument`]: the `PassInstrument` trait and the built-in instruments
//!   (timing, print IR, dump IR, well-formedness checker).
//! - [`registry`]: passes by name (TVM's `GetPass`), built-in and user ones.
//!
//! - [`PrimFuncPass`]: the same over the module's TIR kernels (after lowering,
//!   `IRModule` carries them, as in TVM), so instruments see TIR passes too.

mod config;
mod context;
pub mod instrument;
mod pass;
pub mod registry;
mod sequential;
pub mod verify;

pub use config::{
    config_keys, config_kind, parse_config, register_config_key, register_config_map, ConfigError, ConfigField,
    ConfigKey, ConfigKind, ConfigValue,
};
pub use context::{ContextGuard, Diagnostic, PassContext, Severity};
pub use instrument::PassInstrument;
pub use pass::{
    apply, run_function_pass, BodyError, FunctionPass, ModulePass, Pass, PassBodyError, PassError, PassInfo,
    PrimFuncPass,
};
pub use registry::{get_pass, pass_names, register_pass, PassProvider};
pub use sequential::Sequential;
