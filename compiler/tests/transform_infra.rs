//! The pass infrastructure, kiln's own tests: enabling rules, required
//! passes, build-time dependency checks, context scopes across threads and
//! failures, typed config, `should_run` and required passes, instrument
//! overrides, the built-in instruments (timing, IR dumps, the checker), TIR
//! passes, pass errors. The ports of TVM's own tests of the infrastructure
//! (instrument call order and failure semantics, `Sequential`, `PrintIR`,
//! pass configs) are in `tvm_pass_infra.rs`, named after the TVM test.

use std::sync::{Arc, Mutex};

use kiln::relay::{parse_module, IRModule};
use kiln::transform::instrument::{DumpIr, PassTimingInstrument, WellFormedChecker};
use kiln::transform::{
    apply, register_pass, ConfigValue, ModulePass, Pass, PassBodyError, PassContext, PassError, PassInfo,
    PassInstrument, Sequential,
};

fn module() -> IRModule {
    parse_module("#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32]) {\n  exp(%x)\n}\n").expect("parse")
}

type Log = Arc<Mutex<Vec<String>>>;

/// A pass that only records that it ran.
fn recording_pass(name: &str, opt_level: u32, required: &[&str], log: &Log) -> Arc<dyn Pass> {
    let log = log.clone();
    let n = name.to_string();
    ModulePass::new(PassInfo::new(name, opt_level, required), move |m, _| {
        log.lock().unwrap().push(format!("run {n}"));
        Ok(m)
    })
    .arc()
}

/// Unique names per test: the registry is process-wide.
fn uniq(test: &str, name: &str) -> String {
    format!("{test}_{name}")
}

#[test]
fn enabling_rules() {
    let log: Log = Default::default();
    let a = recording_pass("EnA", 1, &[], &log);
    let b = recording_pass("EnB", 3, &[], &log);
    let c = recording_pass("EnC", 0, &[], &log);
    let seq = Sequential::new("Seq", vec![a.clone(), b.clone(), c.clone()]).unwrap();
    let run = |ctx: PassContext| {
        log.lock().unwrap().clear();
        apply(&seq, module(), &ctx).unwrap();
        log.lock().unwrap().clone()
    };
    // opt_level ≤ context's opt level runs.
    assert_eq!(run(PassContext::new().with_opt_level(2)), ["run EnA", "run EnC"]);
    // Required runs whatever its level.
    assert_eq!(run(PassContext::new().with_opt_level(2).with_required(&["EnB"])), ["run EnA", "run EnB", "run EnC"]);
    // Disabled never runs, even when also required.
    assert_eq!(
        run(PassContext::new().with_opt_level(3).with_required(&["EnA"]).with_disabled(&["EnA"])),
        ["run EnB", "run EnC"]
    );
    // A pass applied directly always runs.
    log.lock().unwrap().clear();
    apply(b.as_ref(), module(), &PassContext::new().with_opt_level(0).with_disabled(&["EnB"])).unwrap();
    assert_eq!(*log.lock().unwrap(), ["run EnB"]);
}

#[test]
fn required_passes_run_first_transitively() {
    let log: Log = Default::default();
    let (base, mid, top) = (uniq("req", "Base"), uniq("req", "Mid"), uniq("req", "Top"));
    register_pass(recording_pass(&base, 0, &[], &log)).unwrap();
    register_pass(recording_pass(&mid, 0, &[&base], &log)).unwrap();
    let t = recording_pass(&top, 0, &[&mid], &log);
    let seq = Sequential::new("S", vec![t]).unwrap();
    apply(&seq, module(), &PassContext::new()).unwrap();
    assert_eq!(*log.lock().unwrap(), [format!("run {base}"), format!("run {mid}"), format!("run {top}")]);
}

#[test]
fn dependency_errors_at_build_time() {
    let log: Log = Default::default();
    let bad = recording_pass("NeedsGhost", 0, &["GhostPass"], &log);
    let e = Sequential::new("S", vec![bad]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "pass `NeedsGhost` requires `GhostPass`, which is not a registered pass (chain: NeedsGhost -> GhostPass)"
    );
    let (a, b) = (uniq("cyc", "A"), uniq("cyc", "B"));
    register_pass(recording_pass(&a, 0, &[&b], &log)).unwrap();
    register_pass(recording_pass(&b, 0, &[&a], &log)).unwrap();
    let user = recording_pass("UsesCycle", 0, &[&a], &log);
    let e = Sequential::new("S", vec![user]).unwrap_err();
    assert_eq!(e, PassError::Cycle { chain: format!("UsesCycle -> {a} -> {b} -> {a}") });
    assert!(log.lock().unwrap().is_empty(), "nothing may run when the pipeline is rejected");
    let unknown = Sequential::from_names("S", &["FoldConstnt"]).unwrap_err();
    assert_eq!(unknown.to_string(), "unknown pass `FoldConstnt`; did you mean `FoldConstant`?");
}

#[test]
fn contexts_nest_restore_and_stay_per_thread() {
    assert_eq!(PassContext::current().opt_level, 2);
    let outer = Arc::new(PassContext::new().with_opt_level(3));
    let g1 = outer.enter().unwrap();
    assert_eq!(PassContext::current().opt_level, 3);
    {
        let inner = Arc::new(PassContext::new().with_opt_level(1));
        let _g2 = inner.enter().unwrap();
        assert_eq!(PassContext::current().opt_level, 1);
        // Another thread sees its own default.
        std::thread::spawn(|| assert_eq!(PassContext::current().opt_level, 2)).join().unwrap();
    }
    assert_eq!(PassContext::current().opt_level, 3);
    g1.exit().unwrap();
    assert_eq!(PassContext::current().opt_level, 2);
    // Restored after an error…
    let r: Result<(), PassError> =
        Arc::new(PassContext::new().with_opt_level(0)).scope(|_| Err(PassError::Cycle { chain: "boom".into() }));
    assert!(r.is_err());
    assert_eq!(PassContext::current().opt_level, 2);
    // …and after a panic.
    let caught = std::panic::catch_unwind(|| {
        let _g = Arc::new(PassContext::new().with_opt_level(0)).enter().unwrap();
        panic!("inside a context");
    });
    assert!(caught.is_err());
    assert_eq!(PassContext::current().opt_level, 2);
}

#[test]
fn typed_config() {
    let mut ctx = PassContext::new();
    ctx.set_config("relay.FuseOps.max_depth", ConfigValue::Int(4)).unwrap();
    assert_eq!(ctx.config_int("relay.FuseOps.max_depth"), Some(4));
    let e = ctx.set_config("relay.FuseOps.max_dept", ConfigValue::Int(4)).unwrap_err().to_string();
    assert!(
        e.starts_with("unknown config key `relay.FuseOps.max_dept`; valid keys:")
            && e.contains("relay.FuseOps.max_depth (int"),
        "{e}"
    );
    let e = ctx.set_config("relay.FuseOps.max_depth", ConfigValue::Str("4".into())).unwrap_err().to_string();
    assert_eq!(e, "config key `relay.FuseOps.max_depth` takes a int, given a string");
}

/// An instrument that logs every call (and answers no to `should_run` for `skip`).
struct Recorder {
    name: String,
    log: Log,
    skip: Option<String>,
}

impl Recorder {
    fn new(name: &str, log: &Log) -> Arc<Recorder> {
        Arc::new(Recorder { name: name.into(), log: log.clone(), skip: None })
    }
    fn hit(&self, what: &str) -> Result<(), PassBodyError> {
        self.log.lock().unwrap().push(format!("{} {what}", self.name));
        Ok(())
    }
}

impl PassInstrument for Recorder {
    fn name(&self) -> &str {
        &self.name
    }
    fn enter_pass_ctx(&self) -> Result<(), PassBodyError> {
        self.hit("enter")
    }
    fn exit_pass_ctx(&self) -> Result<(), PassBodyError> {
        self.hit("exit")
    }
    fn should_run(&self, _: &IRModule, info: &PassInfo) -> Result<bool, PassBodyError> {
        self.hit(&format!("should_run {}", info.name))?;
        Ok(self.skip.as_deref() != Some(info.name.as_str()))
    }
    fn run_before_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        self.hit(&format!("before {}", info.name))
    }
    fn run_after_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        self.hit(&format!("after {}", info.name))
    }
}

fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

#[test]
fn should_run_blocks_and_is_not_asked_for_required_passes() {
    let log: Log = Default::default();
    let p = recording_pass("Blockable", 0, &[], &log);
    let blocker = Arc::new(Recorder { name: "A".into(), log: log.clone(), skip: Some("Blockable".into()) });
    let ctx = PassContext::new().with_instruments(vec![blocker.clone()]);
    apply(p.as_ref(), module(), &ctx).unwrap();
    assert_eq!(take(&log), ["A should_run Blockable"]);
    let ctx = PassContext::new().with_required(&["Blockable"]).with_instruments(vec![blocker]);
    apply(p.as_ref(), module(), &ctx).unwrap();
    assert_eq!(take(&log), ["A before Blockable", "run Blockable", "A after Blockable"]);
}

#[test]
fn override_instruments_exits_old_and_enters_new() {
    let log: Log = Default::default();
    let ctx = Arc::new(PassContext::new().with_instruments(vec![Recorder::new("Old", &log)]));
    let g = ctx.clone().enter().unwrap();
    ctx.override_instruments(vec![Recorder::new("New", &log)]).unwrap();
    g.exit().unwrap();
    assert_eq!(take(&log), ["Old enter", "Old exit", "New enter", "New exit"]);
}

#[test]
fn timing_report_is_nested() {
    let log: Log = Default::default();
    let inner = Sequential::new("Inner", vec![recording_pass("T1", 0, &[], &log)]).unwrap().arc();
    let outer = Sequential::new("Outer", vec![inner, recording_pass("T2", 0, &[], &log)]).unwrap();
    let timing = Arc::new(PassTimingInstrument::new());
    let ctx = Arc::new(PassContext::new().with_instruments(vec![timing.clone()]));
    let (rows, report) = ctx
        .scope(|ctx| {
            apply(&outer, module(), ctx)?;
            let rows: Vec<(usize, String)> = timing.times().into_iter().map(|t| (t.depth, t.name)).collect();
            Ok((rows, timing.render()))
        })
        .unwrap();
    assert_eq!(rows, [(0, "Outer".into()), (1, "Inner".into()), (2, "T1".into()), (1, "T2".into())]);
    assert!(report.contains("  Outer: ") && report.contains("(100.0%)") && report.contains("      T1: "), "{report}");
    // Leaving the context clears the profiles, as in TVM.
    assert_eq!(timing.render(), "");
}

#[test]
fn dump_ir_numbers_files() {
    let log: Log = Default::default();
    let dir = tempfile::tempdir().unwrap();
    let seq =
        Sequential::new("S", vec![recording_pass("D1", 0, &[], &log), recording_pass("D2", 0, &[], &log)]).unwrap();
    let ctx = Arc::new(PassContext::new().with_instruments(vec![Arc::new(DumpIr::new(dir.path()))]));
    ctx.scope(|ctx| apply(&seq, module(), ctx)).unwrap();
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["000_D1.relay", "001_D2.relay", "002_S.relay"]);
    let text = std::fs::read_to_string(dir.path().join("000_D1.relay")).unwrap();
    assert!(text.contains("exp(%x)"));
}

#[test]
fn checker_names_the_pass_that_broke_the_module() {
    // A pass that makes `@main` call a global function that does not exist.
    let breaker = ModulePass::new(PassInfo::new("Breaker", 0, &[]), |mut m: IRModule, _| {
        let main = m.main().map_err(|e| e.to_string())?;
        let f = m.store.as_function(main).cloned().ok_or("no function")?;
        let g = m.store.global_var("missing");
        let call = m.store.call(g, vec![f.body]);
        let new = m.store.function(f.params.clone(), call, None, f.attrs.clone());
        m.update_function("main", new).map_err(|e| e.to_string())?;
        Ok(m)
    })
    .arc();
    let ok = kiln::relay::transform::infer_type();
    let seq = Sequential::new("S", vec![ok, breaker]).unwrap();
    let ctx = PassContext::new().with_instruments(vec![Arc::new(WellFormedChecker::with_type_check())]);
    let e = apply(&seq, module(), &ctx).unwrap_err().to_string();
    assert_eq!(e, "instrument `WellFormedChecker` failed in run_after_pass: after pass `Breaker`, the module is malformed: in `@main`: `@missing` is not a function of the module");
    // Without the instrument, debug builds (every test) check each pass's result anyway.
    let result = apply(&seq, module(), &PassContext::new());
    if !cfg!(debug_assertions) {
        return; // release test builds do not verify
    }
    let e = result.unwrap_err().to_string();
    assert_eq!(e, "pass `Breaker` left the module malformed: in `@main`: `@missing` is not a function of the module");
}

#[test]
fn prim_func_passes_run_over_lowered_kernels_and_instruments_see_them() {
    let log: Log = Default::default();
    struct Names(Log);
    impl PassInstrument for Names {
        fn name(&self) -> &str {
            "Names"
        }
        fn run_before_pass(&self, m: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
            if info.name.starts_with("tir.") {
                let kernels: Vec<String> = m.prim_funcs().map(|k| k.name.clone()).collect();
                self.0.lock().unwrap().push(format!("{} on {}", info.name, kernels.join(",")));
            }
            Ok(())
        }
    }
    let mut m = parse_module(
        "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(4, 4), float32]) {\n  %0 = exp(%x);\n  add(%0, %x)\n}\n",
    )
    .unwrap();
    kiln::relay::infer_module(&mut m).unwrap();
    let ctx = Arc::new(PassContext::new().with_opt_level(3).with_instruments(vec![Arc::new(Names(log.clone()))]));
    let (_, plan) = kiln::build::optimize_and_plan(m, ctx).unwrap();
    assert_eq!(plan.kernels.len(), 1);
    assert_eq!(
        *log.lock().unwrap(),
        [
            "tir.FuseSiblingLoops on fused_exp_add",
            "tir.DefaultSchedule on fused_exp_add",
            "tir.FlattenBuffer on fused_exp_add",
            "tir.LowerIntrinsics on fused_exp_add",
            "tir.Simplify on fused_exp_add",
            "tir.UnrollLoop on fused_exp_add",
            "tir.LoopPartition on fused_exp_add",
            "tir.VectorizeCopies on fused_exp_add",
            "tir.VectorizeLoop on fused_exp_add",
            "tir.DotProducts on fused_exp_add",
            "tir.ForwardStores on fused_exp_add",
            "tir.RemoveNoOp on fused_exp_add",
            "tir.ParallelizeOuter on fused_exp_add"
        ]
    );
    // A PrimFuncPass may not rename (add or remove) kernels.
    let mut lowered = IRModule::new();
    lowered.add_prim_func(plan.kernels[0].clone());
    let renamer = kiln::transform::PrimFuncPass::new(PassInfo::new("Renamer", 0, &[]), |mut f, _, _| {
        f.name = "other".into();
        Ok(f)
    });
    let e = apply(&renamer, lowered.clone(), &PassContext::new()).unwrap_err();
    assert_eq!(e, PassError::FunctionSetChanged { pass: "Renamer".into() });

    // Debug builds (every test) verify each kernel a PrimFuncPass returns:
    // here a store through a variable no loop binds.
    let unbinder = kiln::transform::PrimFuncPass::new(PassInfo::new("Unbinder", 0, &[]), |mut f, _, _| {
        let out = f.params.last().cloned().ok_or("no output")?;
        let stray = kiln::tir::Var::index("stray");
        let store = kiln::tir::Stmt::Store {
            buffer: out,
            indices: vec![kiln::tir::Expr::var(&stray)],
            value: kiln::tir::Expr::float(0.0, kiln::DataType::F32),
        };
        f.body = kiln::tir::Stmt::seq(vec![f.body, store]);
        Ok(f)
    });
    let result = apply(&unbinder, lowered, &PassContext::new());
    if !cfg!(debug_assertions) {
        return; // release test builds do not verify
    }
    let e = result.unwrap_err().to_string();
    assert_eq!(
        e,
        "pass `Unbinder` failed: in kernel `fused_exp_add`: kernel `fused_exp_add` is ill-formed TIR: \
         variable `stray` is used outside the loop or `let` that binds it"
    );
}

/// A pass body's own error type survives as the `source` of the pass error,
/// and can be downcast there; a message (`String`) works as well.
#[test]
fn a_pass_body_error_is_the_source_of_the_pass_error() {
    #[derive(Debug, thiserror::Error)]
    #[error("weights are {0} bytes short")]
    struct ShortWeights(usize);

    let typed = ModulePass::new(PassInfo::new("Typed", 0, &[]), |_, _| Err(ShortWeights(12).into()));
    let e = apply(&typed, module(), &PassContext::new()).unwrap_err();
    assert_eq!(e.to_string(), "pass `Typed` failed: weights are 12 bytes short");
    let PassError::Failed { pass, error, .. } = &e else { panic!("{e:?}") };
    assert_eq!(pass, "Typed");
    assert_eq!(error.get().downcast_ref::<ShortWeights>().map(|s| s.0), Some(12));
    assert!(std::error::Error::source(&e).is_some());

    let message = ModulePass::new(PassInfo::new("Message", 0, &[]), |_, _| Err(format!("{} is odd", 3).into()));
    let e = apply(&message, module(), &PassContext::new()).unwrap_err();
    assert_eq!(e.to_string(), "pass `Message` failed: 3 is odd");
}

// ---- TVM behaviour no single TVM test checks ------------------------------------------

/// TVM's `PassContext.current()` outside any `with`: one default context per
/// thread, the same every time, so instruments set on it stay set.
#[test]
fn the_default_context_is_one_per_thread_and_keeps_its_instruments() {
    std::thread::spawn(|| {
        let log: Log = Default::default();
        let (a, b) = (PassContext::current(), PassContext::current());
        assert!(Arc::ptr_eq(&a, &b));
        a.override_instruments(vec![Recorder::new("D", &log)]).unwrap();
        apply(recording_pass("OnTheDefault", 0, &[], &log).as_ref(), module(), &PassContext::current()).unwrap();
        assert!(take(&log).contains(&"D before OnTheDefault".to_string()));
        let here = PassContext::current();
        let elsewhere = std::thread::spawn(PassContext::current).join().unwrap();
        assert!(!Arc::ptr_eq(&here, &elsewhere), "each thread has its own default");
    })
    .join()
    .unwrap();
}

/// Contexts are left innermost first (TVM checks that the context exited is
/// the one on top): leaving an outer one first is an error, and the stack
/// stays sound.
#[test]
fn leaving_a_context_that_is_not_innermost_is_an_error() {
    std::thread::spawn(|| {
        let outer = Arc::new(PassContext::new().with_opt_level(1)).enter().unwrap();
        let inner_ctx = Arc::new(PassContext::new().with_opt_level(2));
        let inner = Arc::clone(&inner_ctx).enter().unwrap();
        assert!(matches!(outer.exit(), Err(PassError::ContextNotInnermost)));
        assert!(Arc::ptr_eq(&PassContext::current(), &inner_ctx));
        inner.exit().unwrap();
        assert_eq!(PassContext::current().opt_level, PassContext::new().opt_level);
    })
    .join()
    .unwrap();
}

/// TVM's FunctionPass skips functions another compiler owns (`Compiler`,
/// `Extern`), as it does `SkipOptimization` ones (`test_pass_manager.py`'s
/// external-codegen cases): FoldConstant and FuseOps leave them as written.
#[test]
fn function_passes_skip_functions_another_compiler_owns() {
    let text = r#"
        def @ext(%x: Tensor[(2), float32], Compiler="ccompiler") { add(%x, add(1f, 2f)) }
        def @ext2(%x: Tensor[(2), float32], Extern=1) { add(%x, add(1f, 2f)) }
        def @main(%x: Tensor[(2), float32]) { add(%x, add(1f, 2f)) }
    "#;
    let mut m = parse_module(text).expect("parse");
    kiln::relay::infer_module(&mut m).expect("types");
    let fold = kiln::transform::get_pass("FoldConstant").expect("FoldConstant");
    let out = apply(fold.as_ref(), m, &PassContext::new().with_opt_level(3)).unwrap();
    let text = kiln::relay::print_module(&out);
    let body = |name: &str| {
        text.split(&format!("def @{name}(")).nth(1).and_then(|t| t.split("def @").next()).unwrap_or("").to_string()
    };
    assert!(body("ext").contains("add(1f, 2f)") && body("ext2").contains("add(1f, 2f)"), "{text}");
    assert!(!body("main").contains("add(1f, 2f)"), "{text}");
}
