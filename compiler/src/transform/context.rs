//! `PassContext`: the settings passes run under, as a thread-local stack of scopes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kiln_ir::relay::IRModule;

use super::config::{normalize_config, ConfigValue};
use super::instrument::PassInstrument;
use super::pass::{BodyError, PassBodyError, PassError, PassInfo};

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Information only.
    Note,
    /// Something the user may want to fix; the pipeline still succeeds.
    Warning,
}

/// A message a pass left for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The pass that left it.
    pub pass: String,
    /// How serious it is.
    pub severity: Severity,
    /// The message.
    pub message: String,
}

/// The settings and instruments a pipeline runs under.
///
/// ```
/// use std::sync::Arc;
/// use kiln::relay::transform::default_pipeline;
/// use kiln::transform::instrument::PassTimingInstrument;
/// use kiln::transform::{apply, ConfigValue, PassContext};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut m = kiln::relay::parse_module(
///     "def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32]) { nn.relu(nn.dense(%x, %w)) }",
/// )?;
/// kiln::relay::infer_module(&mut m)?;
/// let timing = Arc::new(PassTimingInstrument::new());
/// let ctx = Arc::new(
///     PassContext::new()
///         .with_opt_level(3)                                        // passes up to level 3 run
///         .with_config("relay.FuseOps.max_depth", ConfigValue::Int(1))? // a checked key
///         .with_instruments(vec![timing.clone()]),
/// );
/// // Inside the scope, `PassContext::current()` is this context (as TVM's `with PassContext`).
/// // The profiles last while the context is entered: render them inside.
/// let (fused, timings) = ctx.scope(|ctx| Ok((apply(&default_pipeline()?, m, ctx)?, timing.render())))?;
/// // max_depth = 1: dense and relu are two kernels.
/// assert_eq!(kiln::relay::print_module(&fused).matches("Primitive=1").count(), 2);
/// assert!(timings.contains("FuseOps"));
/// assert_eq!(timing.render(), "");
/// // An unknown key is an error that lists the valid ones.
/// assert!(PassContext::new().with_config("relay.FuseOps.max_dept", ConfigValue::Int(1)).is_err());
/// # Ok(())
/// # }
/// ```
pub struct PassContext {
    /// Passes of a `Sequential` with `opt_level` ≤ this run (default 2).
    pub opt_level: u32,
    /// Passes that run regardless of their opt level (and without asking `should_run`).
    pub required: Vec<String>,
    /// Passes that never run inside a `Sequential`.
    pub disabled: Vec<String>,
    config: BTreeMap<String, ConfigValue>,
    instruments: Mutex<Vec<Arc<dyn PassInstrument>>>,
    diagnostics: Mutex<Vec<Diagnostic>>,
    /// Typed values that a layer above the pass infrastructure hands its own
    /// passes (the schedule's tuning records), one per type.
    extensions: BTreeMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for PassContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassContext")
            .field("opt_level", &self.opt_level)
            .field("required", &self.required)
            .field("disabled", &self.disabled)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for PassContext {
    fn default() -> Self {
        PassContext {
            opt_level: 2,
            required: Vec::new(),
            disabled: Vec::new(),
            config: BTreeMap::new(),
            instruments: Mutex::new(Vec::new()),
            diagnostics: Mutex::new(Vec::new()),
            extensions: BTreeMap::new(),
        }
    }
}

thread_local! {
    static STACK: RefCell<Vec<Arc<PassContext>>> = const { RefCell::new(Vec::new()) };
}

fn instrument_err(pi: &dyn PassInstrument, stage: &'static str, error: PassBodyError) -> PassError {
    PassError::Instrument { instrument: pi.name().to_string(), stage, error: BodyError::new(error) }
}

impl PassContext {
    /// A context with the defaults: opt level 2, nothing required or disabled, no config, no instruments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the opt level: passes of a `Sequential` at or below it run.
    pub fn with_opt_level(mut self, level: u32) -> Self {
        self.opt_level = level;
        self
    }

    /// Adds passes (by name) that run whatever their opt level.
    pub fn with_required(mut self, names: &[&str]) -> Self {
        self.required.extend(names.iter().map(|s| s.to_string()));
        self
    }

    /// Adds passes (by name) that never run inside a `Sequential`.
    pub fn with_disabled(mut self, names: &[&str]) -> Self {
        self.disabled.extend(names.iter().map(|s| s.to_string()));
        self
    }

    /// Attaches `value` for passes that look it up by its type
    /// ([`PassContext::extension`]); replaces an earlier value of that type.
    pub fn with_extension<T: std::any::Any + Send + Sync>(mut self, value: Arc<T>) -> Self {
        self.extensions.insert(std::any::TypeId::of::<T>(), value);
        self
    }

    /// The value of type `T` attached with [`PassContext::with_extension`].
    pub fn extension<T: std::any::Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.extensions.get(&std::any::TypeId::of::<T>()).cloned().and_then(|v| v.downcast::<T>().ok())
    }

    /// Replaces the instruments.
    pub fn with_instruments(self, instruments: Vec<Arc<dyn PassInstrument>>) -> Self {
        *self.instruments.lock().unwrap_or_else(|e| e.into_inner()) = instruments;
        self
    }

    /// Set a configuration key; an unknown key or a value of the wrong kind is an error.
    /// A map-valued key ([`ConfigKind::Map`](super::ConfigKind::Map)) is stored with its
    /// defaults filled in; an unknown or mistyped field is an error.
    pub fn set_config(&mut self, key: &str, value: ConfigValue) -> Result<(), PassError> {
        let value = normalize_config(key, value)?;
        self.config.insert(key.to_string(), value);
        Ok(())
    }

    /// Builder form of [`PassContext::set_config`].
    pub fn with_config(mut self, key: &str, value: ConfigValue) -> Result<Self, PassError> {
        self.set_config(key, value)?;
        Ok(self)
    }

    /// The value set for `key`, if any.
    pub fn config(&self, key: &str) -> Option<&ConfigValue> {
        self.config.get(key)
    }

    /// The integer set for `key`; `None` when unset (the caller's default applies).
    pub fn config_int(&self, key: &str) -> Option<i64> {
        match self.config.get(key) {
            Some(ConfigValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    /// Field `field` of the map set for `key`; `None` when the key is unset.
    pub fn config_field(&self, key: &str, field: &str) -> Option<&ConfigValue> {
        match self.config.get(key) {
            Some(ConfigValue::Map(m)) => m.get(field),
            _ => None,
        }
    }

    /// The bool set for `key`; `None` when unset (the caller's default applies).
    pub fn config_bool(&self, key: &str) -> Option<bool> {
        match self.config.get(key) {
            Some(ConfigValue::Bool(v)) => Some(*v),
            _ => None,
        }
    }

    /// Record a diagnostic from a pass.
    pub fn diagnose(&self, pass: &str, severity: Severity, message: impl Into<String>) {
        self.diagnostics.lock().unwrap_or_else(|e| e.into_inner()).push(Diagnostic {
            pass: pass.to_string(),
            severity,
            message: message.into(),
        });
    }

    /// The diagnostics recorded so far, in order.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        self.diagnostics.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The enabling rule of a `Sequential`: disabled never runs; otherwise
    /// required always runs; otherwise it runs when its opt level is low enough.
    pub fn pass_enabled(&self, info: &PassInfo) -> bool {
        if self.disabled.contains(&info.name) {
            false
        } else if self.required.contains(&info.name) {
            true
        } else {
            info.opt_level <= self.opt_level
        }
    }

    fn instruments(&self) -> Vec<Arc<dyn PassInstrument>> {
        self.instruments.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn clear_instruments(&self) {
        self.instruments.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Every instrument's `enter_pass_ctx`, in order. If one fails, the
    /// instruments entered before it are exited, all are cleared, and the error returned.
    pub fn instrument_enter(&self) -> Result<(), PassError> {
        let list = self.instruments();
        for (k, pi) in list.iter().enumerate() {
            if let Err(m) = pi.enter_pass_ctx() {
                // The ones entered exit in reverse order, as TVM's do.
                for entered in list[..k].iter().rev() {
                    let _ = entered.exit_pass_ctx();
                }
                self.clear_instruments();
                return Err(instrument_err(pi.as_ref(), "enter_pass_ctx", m));
            }
        }
        Ok(())
    }

    /// Every instrument's `exit_pass_ctx`, in order. If one fails, the later
    /// ones are not exited, all are cleared, and the error returned.
    pub fn instrument_exit(&self) -> Result<(), PassError> {
        for pi in self.instruments() {
            if let Err(m) = pi.exit_pass_ctx() {
                self.clear_instruments();
                return Err(instrument_err(pi.as_ref(), "exit_pass_ctx", m));
            }
        }
        Ok(())
    }

    /// `should_run` of every instrument (skipped for required passes), then
    /// `run_before_pass` of each if the pass runs. Returns whether it runs.
    pub fn instrument_before_pass(&self, m: &IRModule, info: &PassInfo) -> Result<bool, PassError> {
        let list = self.instruments();
        if list.is_empty() {
            return Ok(true);
        }
        let mut should_run = true;
        if !self.required.contains(&info.name) {
            for pi in &list {
                should_run &= pi.should_run(m, info).map_err(|e| instrument_err(pi.as_ref(), "should_run", e))?;
            }
        }
        if should_run {
            for pi in &list {
                pi.run_before_pass(m, info).map_err(|e| instrument_err(pi.as_ref(), "run_before_pass", e))?;
            }
        }
        Ok(should_run)
    }

    /// `run_after_pass` of every instrument, in order.
    pub fn instrument_after_pass(&self, m: &IRModule, info: &PassInfo) -> Result<(), PassError> {
        for pi in self.instruments() {
            pi.run_after_pass(m, info).map_err(|e| instrument_err(pi.as_ref(), "run_after_pass", e))?;
        }
        Ok(())
    }

    /// Exit the current instruments, then enter `instruments` in their place.
    pub fn override_instruments(&self, instruments: Vec<Arc<dyn PassInstrument>>) -> Result<(), PassError> {
        self.instrument_exit()?;
        *self.instruments.lock().unwrap_or_else(|e| e.into_inner()) = instruments;
        self.instrument_enter()
    }

    /// The innermost context entered on this thread, or — with none entered —
    /// this thread's default context: the same one every time, as in TVM, so
    /// that instruments set on it with [`PassContext::override_instruments`] stay.
    pub fn current() -> Arc<PassContext> {
        thread_local! {
            static DEFAULT: Arc<PassContext> = Arc::new(PassContext::default());
        }
        STACK.with(|s| s.borrow().last().cloned()).unwrap_or_else(|| DEFAULT.with(Arc::clone))
    }

    /// Enter this context: its instruments' `enter_pass_ctx` run and it
    /// becomes [`PassContext::current`] until the guard is dropped or exited.
    pub fn enter(self: Arc<Self>) -> Result<ContextGuard, PassError> {
        self.instrument_enter()?;
        STACK.with(|s| s.borrow_mut().push(Arc::clone(&self)));
        Ok(ContextGuard { ctx: Some(self) })
    }

    /// Run `f` inside this context; the context is left (and its instruments
    /// exited) even when `f` fails or panics.
    pub fn scope<R>(self: Arc<Self>, f: impl FnOnce(&PassContext) -> Result<R, PassError>) -> Result<R, PassError> {
        let guard = Arc::clone(&self).enter()?;
        let result = f(&self);
        let exited = guard.exit();
        let r = result?;
        exited?;
        Ok(r)
    }
}

/// The scope of an entered [`PassContext`]. Leaving (by [`ContextGuard::exit`]
/// or drop, including during a panic) restores the outer context.
#[must_use = "the context is left when the guard is dropped"]
pub struct ContextGuard {
    ctx: Option<Arc<PassContext>>,
}

impl std::fmt::Debug for ContextGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContextGuard")
    }
}

impl ContextGuard {
    /// Leave the context, reporting an instrument's `exit_pass_ctx` failure.
    /// Contexts are left innermost first: leaving one that is not the
    /// innermost is an error ([`PassError::ContextNotInnermost`]) — it is
    /// still left, so the thread's stack stays sound.
    pub fn exit(mut self) -> Result<(), PassError> {
        self.leave()
    }

    fn leave(&mut self) -> Result<(), PassError> {
        let Some(ctx) = self.ctx.take() else { return Ok(()) };
        let innermost = STACK.with(|s| {
            let mut s = s.borrow_mut();
            let innermost = s.last().is_some_and(|c| Arc::ptr_eq(c, &ctx));
            if let Some(pos) = s.iter().rposition(|c| Arc::ptr_eq(c, &ctx)) {
                s.remove(pos);
            }
            innermost
        });
        let exited = ctx.instrument_exit();
        if !innermost {
            return Err(PassError::ContextNotInnermost);
        }
        exited
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        let _ = self.leave();
    }
}
