//! `PassInfo`, the `Pass` trait, module and function passes, and the
//! instrumented application of a pass.

use std::fmt;
use std::sync::Arc;

use kiln_ir::relay::{ExprId, IRModule};

use super::context::PassContext;

/// What the pass infrastructure knows of a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassInfo {
    /// The registered name (`FoldConstant`, `tir.Simplify`), unique in the pass registry.
    pub name: String,
    /// The pass runs in a `Sequential` when this is ≤ the context's opt level.
    pub opt_level: u32,
    /// Passes (by registered name) that run before this one in a `Sequential`.
    pub required: Vec<String>,
}

impl PassInfo {
    /// Info for the pass `name`, run at `opt_level` and above, after the passes named in `required`.
    pub fn new(name: impl Into<String>, opt_level: u32, required: &[&str]) -> Self {
        PassInfo { name: name.into(), opt_level, required: required.iter().map(|s| s.to_string()).collect() }
    }
}

/// What a pass body fails with: any error type (kept as the `source` of
/// [`PassError::Failed`], with its own source chain), or a message — `String`
/// and `&str` convert with `?` and `.into()`.
pub type PassBodyError = Box<dyn std::error::Error + Send + Sync>;

/// A pass body's error as [`PassError::Failed`] keeps it: shared, so that
/// `PassError` stays `Clone`; two are equal when they say the same.
#[derive(Clone, Debug)]
pub struct BodyError(Arc<dyn std::error::Error + Send + Sync>);

impl BodyError {
    /// Wraps a pass body's error (or message).
    pub fn new(e: impl Into<PassBodyError>) -> Self {
        BodyError(Arc::from(e.into()))
    }

    /// The error the body returned (`downcast_ref` it to its type).
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for BodyError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Why a pass pipeline failed. Every variant names the pass (or instrument) involved.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PassError {
    /// The pass body returned an error; `context` says where (`in `@main``,
    /// `in kernel `k``) or is empty.
    #[error("pass `{pass}` failed: {}{error}", if context.is_empty() { String::new() } else { format!("{context}: ") })]
    Failed {
        /// The pass that failed.
        pass: String,
        /// Where in the module, or empty.
        context: String,
        /// What the body returned.
        #[source]
        error: BodyError,
    },
    /// No pass is registered under `name`.
    #[error("unknown pass `{name}`{}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownPass {
        /// The name asked for.
        name: String,
        /// The nearest registered name, if one is close enough to be a typo.
        suggestion: Option<String>,
    },
    /// A pass requires a name no pass is registered under.
    #[error("pass `{pass}` requires `{required}`, which is not a registered pass (chain: {chain})")]
    MissingRequired {
        /// The pass that requires it.
        pass: String,
        /// The unregistered name.
        required: String,
        /// The requirement path from the pass applied, `A -> B -> C`.
        chain: String,
    },
    /// Passes require each other in a cycle.
    #[error("passes require each other in a cycle: {chain}")]
    Cycle {
        /// The cycle, `A -> B -> A`.
        chain: String,
    },
    /// A pass instrument's hook returned an error.
    #[error("instrument `{instrument}` failed in {stage}: {error}")]
    Instrument {
        /// The instrument's name.
        instrument: String,
        /// The hook that failed (`should_run`, `run_before_pass`, `enter_pass_ctx`, …).
        stage: &'static str,
        /// What the hook returned.
        #[source]
        error: BodyError,
    },
    /// A pass configuration option was invalid.
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
    /// A function pass (or a `PrimFuncPass`) added, removed or renamed a global function or kernel.
    #[error("function pass `{pass}` added or removed global functions")]
    FunctionSetChanged {
        /// The pass.
        pass: String,
    },
    /// A pass context was left while a context entered after it was still entered.
    #[error("a pass context was left before the contexts entered inside it (contexts are left innermost first)")]
    ContextNotInnermost,
    /// A pass name was registered twice with different pass objects.
    #[error("pass `{name}` is registered twice")]
    Duplicate {
        /// The name registered twice.
        name: String,
    },
    /// A pass returned a module that is not well-formed or not well-typed
    /// (checked after every pass in debug builds, so in every test).
    #[error("pass `{pass}` left the module {message}")]
    Malformed {
        /// The pass that returned the module.
        pass: String,
        /// What is wrong (`malformed: …` or `ill-typed: …`).
        message: String,
    },
}

/// A module-to-module transformation.
pub trait Pass: Send + Sync {
    /// The pass's name, opt level and requirements.
    fn info(&self) -> &PassInfo;

    /// The transformation itself, without instruments or enabling rules
    /// (call [`apply`] to run a pass the way the infrastructure does).
    fn run(&self, module: IRModule, ctx: &PassContext) -> Result<IRModule, PassError>;
}

impl fmt::Debug for dyn Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pass({})", self.info().name)
    }
}

/// Run `pass` as TVM's `Pass::operator()` does: ask the instruments whether
/// it should run, tell them before and after, and run it. A pass applied
/// directly always runs (enabling rules belong to `Sequential`), unless an
/// instrument's `should_run` says no.
pub fn apply(pass: &dyn Pass, module: IRModule, ctx: &PassContext) -> Result<IRModule, PassError> {
    let info = pass.info();
    if !ctx.instrument_before_pass(&module, info)? {
        return Ok(module);
    }
    // What the pass could change in the Relay part: nodes are only ever
    // appended, so an unchanged store length and function table mean an
    // unchanged Relay module (a PrimFuncPass, a pass that rewrote nothing), already checked.
    let relay_before = cfg!(debug_assertions).then(|| relay_fingerprint(&module));
    let out = pass.run(module, ctx)?;
    ctx.instrument_after_pass(&out, info)?;
    if relay_before.is_some_and(|before| before != relay_fingerprint(&out)) {
        check_result(&out, &info.name)?;
    }
    Ok(out)
}

fn relay_fingerprint(m: &IRModule) -> (usize, Vec<(String, ExprId)>) {
    (m.store.len(), m.functions().map(|(n, f)| (n.to_string(), f)).collect())
}

/// What debug builds check after every pass: the module is well-formed and
/// well-typed (inference runs on a copy, so the pass's own types stay as
/// they are). Release builds leave it to `WellFormedChecker` (`opt --verify`).
fn check_result(m: &IRModule, pass: &str) -> Result<(), PassError> {
    let malformed = |message: String| PassError::Malformed { pass: pass.to_string(), message };
    super::verify::well_formed(m).map_err(|e| malformed(format!("malformed: {}", e.message())))?;
    super::verify::well_typed(m).map_err(|e| malformed(format!("ill-typed: {e}")))
}

type ModuleFn = dyn Fn(IRModule, &PassContext) -> Result<IRModule, PassBodyError> + Send + Sync;

/// A pass over the whole module: it may add and remove functions.
pub struct ModulePass {
    info: PassInfo,
    f: Box<ModuleFn>,
}

impl fmt::Debug for ModulePass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ModulePass({})", self.info.name)
    }
}

impl ModulePass {
    /// A module pass running `f` on the whole module.
    pub fn new(
        info: PassInfo,
        f: impl Fn(IRModule, &PassContext) -> Result<IRModule, PassBodyError> + Send + Sync + 'static,
    ) -> Self {
        ModulePass { info, f: Box::new(f) }
    }

    /// The pass as a shared [`Pass`] (for `Sequential` and the registry).
    pub fn arc(self) -> Arc<dyn Pass> {
        Arc::new(self)
    }
}

impl Pass for ModulePass {
    fn info(&self) -> &PassInfo {
        &self.info
    }

    fn run(&self, module: IRModule, ctx: &PassContext) -> Result<IRModule, PassError> {
        (self.f)(module, ctx).map_err(|e| PassError::Failed {
            pass: self.info.name.clone(),
            context: String::new(),
            error: BodyError::new(e),
        })
    }
}

type FunctionFn = dyn Fn(&mut IRModule, ExprId, &PassContext) -> Result<ExprId, PassBodyError> + Send + Sync;

/// A pass over one global function at a time. It gets the module (to read
/// other functions and to build new nodes in its store) and the function's
/// handle, and returns the new function. It cannot add or remove functions,
/// and functions marked `SkipOptimization`, or owned by another compiler
/// (`Compiler`, `Extern`), are left alone.
pub struct FunctionPass {
    info: PassInfo,
    f: Box<FunctionFn>,
}

impl fmt::Debug for FunctionPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FunctionPass({})", self.info.name)
    }
}

impl FunctionPass {
    /// A function pass running `f` on each global function in turn; `f` returns the new function.
    pub fn new(
        info: PassInfo,
        f: impl Fn(&mut IRModule, ExprId, &PassContext) -> Result<ExprId, PassBodyError> + Send + Sync + 'static,
    ) -> Self {
        FunctionPass { info, f: Box::new(f) }
    }

    /// The pass as a shared [`Pass`] (for `Sequential` and the registry).
    pub fn arc(self) -> Arc<dyn Pass> {
        Arc::new(self)
    }
}

impl Pass for FunctionPass {
    fn info(&self) -> &PassInfo {
        &self.info
    }

    fn run(&self, module: IRModule, ctx: &PassContext) -> Result<IRModule, PassError> {
        run_function_pass(&self.info, module, ctx, |m, f, c| (self.f)(m, f, c))
    }
}

/// Apply a function-level transformation to every global function not marked
/// `SkipOptimization`, `Compiler` or `Extern`, checking that the set of functions does not change
/// (what [`FunctionPass`] and `#[function_pass]` structs run).
pub fn run_function_pass(
    info: &PassInfo,
    mut module: IRModule,
    ctx: &PassContext,
    mut f: impl FnMut(&mut IRModule, ExprId, &PassContext) -> Result<ExprId, PassBodyError>,
) -> Result<IRModule, PassError> {
    let fail = |name: &str, e: PassBodyError| PassError::Failed {
        pass: info.name.clone(),
        context: format!("in `@{name}`"),
        error: BodyError::new(e),
    };
    let names = module.function_names();
    for name in &names {
        let Some(func) = module.function(name) else { continue };
        // As TVM's FunctionPass: functions marked SkipOptimization and those
        // another compiler owns (`Compiler`, `Extern`) are left alone.
        if module.store.as_function(func).is_some_and(|f| f.skips_optimization() || f.is_external()) {
            continue;
        }
        let new = f(&mut module, func, ctx).map_err(|e| fail(name, e))?;
        if module.store.as_function(new).is_none() {
            return Err(fail(name, "the pass returned something that is not a function".into()));
        }
        module.update_function(name, new).map_err(|_| PassError::FunctionSetChanged { pass: info.name.clone() })?;
    }
    if module.function_names() != names {
        return Err(PassError::FunctionSetChanged { pass: info.name.clone() });
    }
    // As TVM's FunctionPass: the rewritten functions are type-checked right
    // away, by InferType run as a pass of its own (instruments see it).
    match super::registry::get_pass("InferType") {
        Some(infer) if info.name != "InferType" => super::apply(infer.as_ref(), module, ctx),
        _ => Ok(module),
    }
}

type PrimFuncFn = dyn Fn(kiln_ir::tir::PrimFunc, &IRModule, &PassContext) -> Result<kiln_ir::tir::PrimFunc, PassBodyError>
    + Send
    + Sync;

/// A pass over the module's TIR kernels, one at a time (TVM's `PrimFuncPass`).
/// It cannot add or remove kernels.
pub struct PrimFuncPass {
    info: PassInfo,
    f: Box<PrimFuncFn>,
}

impl fmt::Debug for PrimFuncPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrimFuncPass({})", self.info.name)
    }
}

impl PrimFuncPass {
    /// A kernel pass running `f` on each TIR kernel in turn; `f` must keep the kernel's name.
    pub fn new(
        info: PassInfo,
        f: impl Fn(kiln_ir::tir::PrimFunc, &IRModule, &PassContext) -> Result<kiln_ir::tir::PrimFunc, PassBodyError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        PrimFuncPass { info, f: Box::new(f) }
    }

    /// The pass as a shared [`Pass`] (for `Sequential` and the registry).
    pub fn arc(self) -> Arc<dyn Pass> {
        Arc::new(self)
    }
}

impl Pass for PrimFuncPass {
    fn info(&self) -> &PassInfo {
        &self.info
    }

    fn run(&self, mut module: IRModule, ctx: &PassContext) -> Result<IRModule, PassError> {
        let kernels = module.take_prim_funcs();
        for k in kernels {
            let name = k.name.clone();
            let new = (self.f)(k, &module, ctx).map_err(|e| PassError::Failed {
                pass: self.info.name.clone(),
                context: format!("in kernel `{name}`"),
                error: BodyError::new(e),
            })?;
            if new.name != name {
                return Err(PassError::FunctionSetChanged { pass: self.info.name.clone() });
            }
            // Debug builds (and so every test) check that the pass left well-formed TIR.
            if cfg!(debug_assertions) {
                kiln_ir::tir::verify_prim_func(&new).map_err(|e| PassError::Failed {
                    pass: self.info.name.clone(),
                    context: format!("in kernel `{name}`"),
                    error: BodyError::new(e),
                })?;
            }
            module.add_prim_func(new);
        }
        Ok(module)
    }
}
