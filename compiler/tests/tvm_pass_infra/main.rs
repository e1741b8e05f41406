//! TVM v0.16's own tests of the pass infrastructure, ported: one test per
//! TVM test that kiln's API can express, named after it, checking what TVM's
//! test checks (translated to kiln's API), from
//! - `tests/python/relay/test_pass_manager.py`: module, function and
//!   class passes, `PassInfo`, `Sequential` (alone, nested, under a scoped
//!   context), `PrintIR`, an instrument counting passes;
//! - `tests/python/relay/test_pass_instrument.py`: instruments — timing,
//!   custom ones, disabling passes, several at once, counts over a whole
//!   build, the call sequence, the config keys, and what happens when a hook
//!   or a pass fails;
//! - `tests/python/ir/test_pass_instrument.py`: `test_tir_print_all_passes`;
//! - `tests/python/ir/test_node_reflection.py`: `test_pass_config` (the
//!   file's other ports need only `kiln-ir`: `compiler/ir/tests/tvm_node_reflection.rs`).
//!
//! Instruments record their calls as `"<id> <hook> [<pass>]"`; TVM's tests
//! record the same calls in the same order under their own spellings.
//! Where TVM runs a Relay function with its "graph" and "debug" executors,
//! kiln runs it compiled (LLVM JIT over the executor plan) and in its
//! reference interpreter. kiln has no `AnnotateSpans`; the tests that apply
//! it use a module pass of that name doing what TVM's does, printing the
//! module and parsing it back.
//!
//! Where kiln differs (each test says so where it matters):
//! - `test_module_class_pass`: TVM checks that the module returned is the very
//!   object (`same_as`); kiln's passes take and return modules by value.
//! - A pass declared with `#[module_pass]`/`#[function_pass]` without a name
//!   is named after the function in CamelCase (`DirectTransform`), where TVM
//!   keeps the function's name (`direct_transform`).
//! - `relay.build` inside `with PassContext(...)` is `optimize_and_plan(mod,
//!   ctx)`, which enters the context itself: `test_instrument_pass_counts`
//!   checks the counts as the build leaves it.
//! - `PrintIr` heads its output `// IR before <pass>`, TVM's `PrintBeforeAll`
//!   `Before Running Pass:` … `pass name: <pass>`.
//!
//! The tests are in `pass_manager.rs` (`test_pass_manager.py`) and
//! `pass_instrument.rs` (the instrument and config tests); this file holds
//! what they share.
//!
//! Not expressible in kiln:
//! - `test_relax_print_all_passes` (`tests/python/ir/test_pass_instrument.py`):
//!   it runs Relax's `default_build` pipeline; kiln has no Relax.
//! - `test_custom_instrument`'s two parametrizations (a decorated class, a
//!   subclass of `PassInstrument`) are one in Rust: a type implementing the
//!   `PassInstrument` trait.

// The child process of `test_print_ir` learns its role from the environment.
#![allow(clippy::disallowed_methods)]

#[path = "../common/tvm_port.rs"]
mod tvm_port;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kiln::relay::{
    eval_function, infer_module, mutate, parse_module, print_module, ExprId, ExprMutator, IRModule, Store, Value,
};
use kiln::transform::instrument::{IrPrinter, PassTimingInstrument, PrintIr, Selection};
use kiln::transform::{
    apply, get_pass, ConfigValue, ModulePass, Pass, PassBodyError, PassContext, PassError, PassInfo, PassInstrument,
    Sequential,
};
use kiln::{function_pass, module_pass, Attrs, Tensor};

// ---- helpers -------------------------------------------------------------------------

/// A module from Relay text (untyped, as TVM builds it).
fn text(t: &str) -> IRModule {
    parse_module(&format!("#[version = \"0.0.5\"]\n{t}\n")).unwrap_or_else(|e| panic!("{e}\n{t}"))
}

/// `m`, typed (TVM's `run_infer_type`, `InferType()(mod)`).
fn typed(mut m: IRModule) -> IRModule {
    infer_module(&mut m).unwrap_or_else(|e| panic!("{e}\n{}", print_module(&m)));
    m
}

/// The global function `name` of `m` as the `@main` of a module of its own, typed.
fn function_module(m: &IRModule, name: &str) -> IRModule {
    let f = m.function(name).unwrap_or_else(|| panic!("no @{name} in\n{}", print_module(m)));
    let mut out = IRModule::new();
    let f = out.store.import(&m.store, f);
    out.add_function("main", f).expect("a function");
    typed(out)
}

/// TVM's `check_func`: the function `name` of `m`, typed, is structurally
/// equal to `reference` (the Relay text of a `@main`), typed.
fn check_func(m: &IRModule, name: &str, reference: &str) {
    check_func_against(m, name, &text(reference));
}

/// [`check_func`] with the reference function the `@main` of a module.
fn check_func_against(m: &IRModule, name: &str, reference: &IRModule) {
    let (got, want) = (function_module(m, name), function_module(reference, "main"));
    assert!(got.structural_eq(&want), "@{name}:\n{}\n!=\n{}", print_module(&got), print_module(&want));
}

/// TVM's `OptTester.transform` of a module: it gains `@myAbs`, `abs` of a (5, 10) tensor.
fn add_my_abs(mut m: IRModule) -> Result<IRModule, PassBodyError> {
    let abs = text("def @myAbs(%x: Tensor[(5, 10), float32]) { abs(%x) }");
    let f = m.store.import(&abs.store, abs.function("myAbs").ok_or("no @myAbs")?);
    m.add_function("myAbs", f)?;
    Ok(m)
}

/// TVM's `update_func` (`DoubleValues`): every variable and constant `v` of
/// the body becomes `add(v, v)`; the parameters stay as they are.
struct DoubleValues;

impl ExprMutator for DoubleValues {
    fn rewrite_var(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        store.call_op("add", vec![post, post], Attrs::new()).expect("add")
    }
    fn rewrite_constant(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        store.call_op("add", vec![post, post], Attrs::new()).expect("add")
    }
}

/// TVM's `OptTester.transform` of a function.
fn update_func(m: &mut IRModule, func: ExprId) -> ExprId {
    let f = m.store.as_function(func).cloned().expect("a function");
    let body = mutate(&mut m.store, f.body, &mut DoubleValues);
    let ret = f.ret_ty.map(|t| m.store.ty(t).clone());
    m.store.function(f.params.clone(), body, ret, f.attrs.clone())
}

/// Deterministic values in [0, 1) (TVM's `get_rand`).
fn get_rand(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed;
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Tensor::from_f32(shape.to_vec(), &v)
}

/// TVM evaluates the function with the "graph" and the "debug" executors and
/// compares with numpy (`rtol=1e-5`); kiln runs it compiled (LLVM JIT over
/// the executor plan) and in its reference interpreter.
fn assert_executes_to(m: &IRModule, name: &str, args: &[Tensor], want: &[f32]) {
    let main = function_module(m, name);
    let values: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
    let interpreted = eval_function(&main, "main", &values).expect("interpreter");
    let interpreted = interpreted.as_tensor().expect("a tensor").to_f32_vec();
    let (_, plan) =
        kiln::build::optimize_and_plan(main, Arc::new(PassContext::new().with_opt_level(3))).expect("build");
    let jit = kiln::codegen::llvm::Jit::new(name, &plan.kernels).expect("LLVM");
    let compiled = kiln::backend::host::run(&plan, &jit, args, 1).expect("run");
    for (executor, got) in [("interpreter", interpreted), ("compiled", compiled[0].to_f32_vec())] {
        assert_eq!(got.len(), want.len(), "{executor}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-5 * w.abs() + 1e-7, "{executor}: {g} != {w}");
        }
    }
}

type Log = Arc<Mutex<Vec<String>>>;

fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

/// TVM's test model: `(x + y) * ((x + y) / (x - z)) + (x - z)`.
fn get_test_model() -> IRModule {
    typed(text(
        "def @main(%x: Tensor[(3, 4), float32], %y: Tensor[(3, 4), float32], %z: Tensor[(3, 4), float32]) {
           %0 = add(%x, %y);
           %1 = subtract(%x, %z);
           %2 = multiply(%0, divide(%0, %1));
           add(%2, %1)
         }",
    ))
}

/// TVM's `AnnotateSpans`: the module printed and parsed back (spans from the text).
fn annotate_spans() -> Arc<dyn Pass> {
    ModulePass::new(PassInfo::new("AnnotateSpans", 0, &[]), |m, _| Ok(typed(parse_module(&print_module(&m))?))).arc()
}

fn registered(name: &str) -> Arc<dyn Pass> {
    get_pass(name).unwrap_or_else(|| panic!("{name} is not registered"))
}

/// An instrument recording the hooks in `hooks` as `"<id> <hook> [<pass>]"`,
/// and failing in `fails` ("Just a dummy error"); `skip`: `should_run` is
/// false for the passes whose name contains one of these.
#[derive(Default)]
struct PI {
    id: String,
    log: Log,
    hooks: Vec<&'static str>,
    fails: Option<&'static str>,
    skip: Vec<String>,
    /// Every hook call, logged or not.
    calls: Arc<AtomicUsize>,
}

const ALL_HOOKS: [&str; 5] = ["enter_pass_ctx", "exit_pass_ctx", "should_run", "run_before_pass", "run_after_pass"];

impl PI {
    fn new(id: &str, log: &Log, hooks: &[&'static str]) -> PI {
        PI { id: id.into(), log: log.clone(), hooks: hooks.to_vec(), ..PI::default() }
    }
    fn all(id: &str, log: &Log) -> PI {
        PI::new(id, log, &ALL_HOOKS)
    }
    fn failing(self, hook: &'static str) -> PI {
        PI { fails: Some(hook), ..self }
    }
    fn counting(self, calls: &Arc<AtomicUsize>) -> PI {
        PI { calls: calls.clone(), ..self }
    }
    fn skipping(self, names: &[&str]) -> PI {
        PI { skip: names.iter().map(|s| s.to_string()).collect(), ..self }
    }
    fn arc(self) -> Arc<dyn PassInstrument> {
        Arc::new(self)
    }
    fn hit(&self, hook: &'static str, pass: Option<&PassInfo>) -> Result<(), PassBodyError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.hooks.contains(&hook) {
            let what = match pass {
                Some(info) => format!("{hook} {}", info.name),
                None => hook.to_string(),
            };
            let line = if self.id.is_empty() { what } else { format!("{} {what}", self.id) };
            self.log.lock().unwrap().push(line);
        }
        if self.fails == Some(hook) {
            return Err("Just a dummy error".into());
        }
        Ok(())
    }
}

impl PassInstrument for PI {
    fn name(&self) -> &str {
        &self.id
    }
    fn enter_pass_ctx(&self) -> Result<(), PassBodyError> {
        self.hit("enter_pass_ctx", None)
    }
    fn exit_pass_ctx(&self) -> Result<(), PassBodyError> {
        self.hit("exit_pass_ctx", None)
    }
    fn should_run(&self, _: &IRModule, info: &PassInfo) -> Result<bool, PassBodyError> {
        self.hit("should_run", Some(info))?;
        Ok(!self.skip.iter().any(|s| info.name.contains(s.as_str())))
    }
    fn run_before_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        self.hit("run_before_pass", Some(info))
    }
    fn run_after_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        self.hit("run_after_pass", Some(info))
    }
}

/// TVM's `not ctx.instruments`: kiln's instruments are private to their
/// context, so seen from outside — running a pass on it calls none of the
/// instruments counting into `calls`.
fn has_instruments(ctx: &PassContext, calls: &Arc<AtomicUsize>) -> bool {
    let before = calls.load(Ordering::SeqCst);
    let probe = ModulePass::new(PassInfo::new("Probe", 0, &[]), |m, _| Ok(m));
    apply(&probe, get_test_model(), ctx).expect("probe");
    calls.load(Ordering::SeqCst) != before
}

mod pass_instrument;
mod pass_manager;
