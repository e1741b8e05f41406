//! Ports of `tests/python/relay/test_pass_instrument.py`,
//! `tests/python/ir/test_pass_instrument.py` and `test_node_reflection.py`'s
//! `test_pass_config`.

use super::*;

// ---- test_pass_instrument.py ---------------------------------------------------------------

/// TVM's `test_pass_timing_instrument`: a timing instrument set on the
/// current (default) context with `override_instruments` profiles the
/// passes run after it; taking it off again clears its profiles, and
/// `render()` of nothing is empty.
#[test]
fn test_pass_timing_instrument() {
    std::thread::spawn(|| {
        let timing = Arc::new(PassTimingInstrument::new());
        let current = PassContext::current();
        current.override_instruments(vec![timing.clone()]).unwrap();
        let passes = [annotate_spans(), registered("ToANormalForm"), registered("InferType")];
        let mut m = get_test_model();
        for p in &passes {
            m = apply(p.as_ref(), m, &current).unwrap();
        }
        let profiles = timing.render();
        for name in ["AnnotateSpans", "ToANormalForm", "InferType"] {
            assert!(profiles.contains(name), "{name} not in {profiles}");
        }
        // Reset the current context's instruments to none.
        current.override_instruments(Vec::new()).unwrap();
        let mut m = get_test_model();
        for p in &passes {
            m = apply(p.as_ref(), m, &current).unwrap();
        }
        assert_eq!(timing.render(), "");
    })
    .join()
    .unwrap();
}

#[test]
fn test_custom_instrument() {
    let log: Log = Default::default();
    let my_test = PI::new("", &log, &["enter_pass_ctx", "exit_pass_ctx", "run_before_pass", "run_after_pass"]);
    let ctx = Arc::new(PassContext::new().with_instruments(vec![my_test.arc()]));
    ctx.scope(|ctx| apply(registered("InferType").as_ref(), get_test_model(), ctx)).expect("InferType");
    assert_eq!(
        take(&log),
        ["enter_pass_ctx", "run_before_pass InferType", "run_after_pass InferType", "exit_pass_ctx"]
    );
}

#[test]
fn test_disable_pass() {
    let log: Log = Default::default();
    // Only passes whose name contains "InferType" run.
    struct CustomPI(Log);
    impl PassInstrument for CustomPI {
        fn name(&self) -> &str {
            "CustomPI"
        }
        fn should_run(&self, _: &IRModule, info: &PassInfo) -> Result<bool, PassBodyError> {
            Ok(info.name.contains("InferType"))
        }
        fn run_before_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
            self.0.lock().unwrap().push(info.name.clone());
            Ok(())
        }
    }
    let ctx = Arc::new(PassContext::new().with_instruments(vec![Arc::new(CustomPI(log.clone()))]));
    ctx.scope(|ctx| {
        let m = apply(annotate_spans().as_ref(), get_test_model(), ctx)?;
        let m = apply(registered("ToANormalForm").as_ref(), m, ctx)?;
        apply(registered("InferType").as_ref(), m, ctx)
    })
    .expect("passes");
    assert_eq!(take(&log).concat(), "InferType");
}

#[test]
fn test_multiple_instrument() {
    let log: Log = Default::default();
    let unlogged: Log = Default::default();
    let skip_annotate = PI::new("SkipAnnotate", &unlogged, &[]).skipping(&["AnnotateSpans"]);
    let skip_anf = PI::new("SkipANF", &unlogged, &[]).skipping(&["ToANormalForm"]);
    let print_pass_name = PI::new("", &log, &["run_before_pass"]);
    let ctx =
        Arc::new(PassContext::new().with_instruments(vec![skip_annotate.arc(), skip_anf.arc(), print_pass_name.arc()]));
    ctx.scope(|ctx| {
        let m = apply(annotate_spans().as_ref(), get_test_model(), ctx)?;
        let m = apply(registered("ToANormalForm").as_ref(), m, ctx)?;
        apply(registered("InferType").as_ref(), m, ctx)
    })
    .expect("passes");
    assert_eq!(take(&log), ["run_before_pass InferType"]);
}

/// TVM's `PassesCounter`: counts `run_before_pass` and `run_after_pass`,
/// reset on entering and leaving the context. `at_exit`: the counts just
/// before leaving it.
#[derive(Default)]
struct PassesCounter {
    counts: Mutex<(usize, usize)>,
    at_exit: Mutex<Option<(usize, usize)>>,
}

impl PassInstrument for PassesCounter {
    fn name(&self) -> &str {
        "PassesCounter"
    }
    fn enter_pass_ctx(&self) -> Result<(), PassBodyError> {
        *self.counts.lock().unwrap() = (0, 0);
        Ok(())
    }
    fn exit_pass_ctx(&self) -> Result<(), PassBodyError> {
        let mut counts = self.counts.lock().unwrap();
        *self.at_exit.lock().unwrap() = Some(*counts);
        *counts = (0, 0);
        Ok(())
    }
    fn run_before_pass(&self, _: &IRModule, _: &PassInfo) -> Result<(), PassBodyError> {
        self.counts.lock().unwrap().0 += 1;
        Ok(())
    }
    fn run_after_pass(&self, _: &IRModule, _: &PassInfo) -> Result<(), PassBodyError> {
        self.counts.lock().unwrap().1 += 1;
        Ok(())
    }
}

/// TVM's `with PassContext(instruments=[counter]): relay.build(mod, "llvm")`
/// is kiln's `optimize_and_plan(mod, ctx)`, which enters the context it is
/// given for the build: TVM's checks inside the `with` are made on the
/// counts the instrument had when the build left the context.
#[test]
fn test_instrument_pass_counts() {
    let passes_counter = Arc::new(PassesCounter::default());
    let ctx = Arc::new(PassContext::new().with_instruments(vec![passes_counter.clone()]));
    kiln::build::optimize_and_plan(get_test_model(), ctx).expect("build");
    let (run_before_count, run_after_count) = passes_counter.at_exit.lock().unwrap().expect("the context was left");
    assert_ne!(run_after_count, 0);
    assert_eq!(run_after_count, run_before_count);
    // Out of the pass context's scope: reset.
    assert_eq!(*passes_counter.counts.lock().unwrap(), (0, 0));
}

/// TVM's `test_list_pass_configs`: every key is listed with its type (and a
/// map's fields with theirs). TVM checks `relay.backend.use_auto_scheduler`,
/// which kiln lacks; kiln's keys stand in for it.
#[test]
fn test_list_pass_configs() {
    let keys = kiln::transform::config_keys();
    assert!(keys.len() > 1);
    let depth = keys.iter().find(|k| k.name == "relay.FuseOps.max_depth").expect("listed");
    assert_eq!(depth.kind, kiln::transform::ConfigKind::Int);
    let unroll = keys.iter().find(|k| k.name == "tir.UnrollLoop").expect("listed");
    let fields: Vec<(&str, String)> = unroll.fields.iter().map(|f| (f.name.as_str(), f.kind.to_string())).collect();
    assert_eq!(
        fields,
        [
            ("auto_max_step", "int".to_string()),
            ("auto_max_depth", "int".into()),
            ("auto_max_extent", "int".into()),
            ("explicit_unroll", "bool".into())
        ]
    );
}

/// When an instrument's `enter_pass_ctx` fails, those already entered exit
/// (in reverse order, as TVM's `ExitContextOnError` does), the instruments
/// are cleared and the context is not entered.
#[test]
fn test_enter_pass_ctx_exception() {
    std::thread::spawn(|| {
        let log: Log = Default::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let hooks = ["enter_pass_ctx", "exit_pass_ctx"];
        let pass_ctx = Arc::new(PassContext::new().with_instruments(vec![
            PI::new("%1", &log, &hooks).counting(&calls).arc(),
            PI::new("%2", &log, &hooks).counting(&calls).failing("enter_pass_ctx").arc(),
            PI::new("%3", &log, &hooks).counting(&calls).arc(),
        ]));
        let e = Arc::clone(&pass_ctx).enter().unwrap_err();
        assert!(e.to_string().contains("Just a dummy error"), "{e}");
        assert_eq!(take(&log), ["%1 enter_pass_ctx", "%2 enter_pass_ctx", "%1 exit_pass_ctx"]);
        // The current context is not the one that failed, and has no instruments.
        let cur_pass_ctx = PassContext::current();
        assert!(!Arc::ptr_eq(&pass_ctx, &cur_pass_ctx));
        assert!(!has_instruments(&cur_pass_ctx, &calls));
        // The failed context's instruments were cleared too.
        assert!(!has_instruments(&pass_ctx, &calls));
        // With two entered before the failure, they exit in reverse order.
        let ctx = Arc::new(PassContext::new().with_instruments(vec![
            PI::new("A", &log, &hooks).arc(),
            PI::new("B", &log, &hooks).arc(),
            PI::new("C", &log, &hooks).failing("enter_pass_ctx").arc(),
        ]));
        assert!(ctx.enter().is_err());
        assert_eq!(
            take(&log),
            ["A enter_pass_ctx", "B enter_pass_ctx", "C enter_pass_ctx", "B exit_pass_ctx", "A exit_pass_ctx"]
        );
    })
    .join()
    .unwrap();
}

#[test]
fn test_enter_pass_ctx_exception_global() {
    std::thread::spawn(|| {
        let log: Log = Default::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let cur_pass_ctx = PassContext::current();
        let e = cur_pass_ctx
            .override_instruments(vec![PI::new("PIBroken", &log, &[]).counting(&calls).failing("enter_pass_ctx").arc()])
            .unwrap_err();
        assert!(e.to_string().contains("Just a dummy error"), "{e}");
        assert!(!has_instruments(&cur_pass_ctx, &calls));
    })
    .join()
    .unwrap();
}

#[test]
fn test_exit_pass_ctx_exception() {
    std::thread::spawn(|| {
        let log: Log = Default::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let hooks = ["exit_pass_ctx"];
        let pass_ctx = Arc::new(PassContext::new().with_instruments(vec![
            PI::new("%1", &log, &hooks).counting(&calls).arc(),
            PI::new("%2", &log, &hooks).counting(&calls).failing("exit_pass_ctx").arc(),
            PI::new("%3", &log, &hooks).counting(&calls).arc(),
        ]));
        let e = Arc::clone(&pass_ctx).scope(|_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("Just a dummy error"), "{e}");
        assert_eq!(take(&log), ["%1 exit_pass_ctx", "%2 exit_pass_ctx"]);
        let cur_pass_ctx = PassContext::current();
        assert!(!Arc::ptr_eq(&pass_ctx, &cur_pass_ctx));
        assert!(!has_instruments(&cur_pass_ctx, &calls));
        assert!(!has_instruments(&pass_ctx, &calls));
    })
    .join()
    .unwrap();
}

#[test]
fn test_exit_pass_ctx_exception_global() {
    std::thread::spawn(|| {
        let log: Log = Default::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let broken = || PI::new("PIBroken", &log, &[]).counting(&calls).failing("exit_pass_ctx").arc();
        let cur_pass_ctx = PassContext::current();
        // The first override enters the broken instrument; the second exits it, which fails.
        cur_pass_ctx.override_instruments(vec![broken()]).expect("entered");
        assert!(has_instruments(&cur_pass_ctx, &calls));
        let e = cur_pass_ctx.override_instruments(vec![broken()]).unwrap_err();
        assert!(e.to_string().contains("Just a dummy error"), "{e}");
        assert!(!has_instruments(&cur_pass_ctx, &calls));
    })
    .join()
    .unwrap();
}

/// A module pass named `transform` (TVM's decorated function) that records
/// that it ran, and fails when told.
fn transform(name: &str, log: &Log, fails: bool) -> Arc<dyn Pass> {
    let (log, n) = (log.clone(), name.to_string());
    ModulePass::new(PassInfo::new(name, 2, &[]), move |m, _| {
        log.lock().unwrap().push(format!("{n} pass"));
        if fails {
            return Err("Just a dummy error".into());
        }
        Ok(m)
    })
    .arc()
}

/// The events of running `passes` in turn under a context holding `instruments`, and its result.
fn run_instrumented(instruments: Vec<PI>, passes: &[Arc<dyn Pass>], m: IRModule) -> Result<IRModule, PassError> {
    let ctx = Arc::new(PassContext::new().with_instruments(instruments.into_iter().map(PI::arc).collect()));
    ctx.scope(|ctx| passes.iter().try_fold(m, |m, p| apply(p.as_ref(), m, ctx)))
}

#[test]
fn test_pass_exception() {
    let log: Log = Default::default();
    let e =
        run_instrumented(vec![PI::all("", &log)], &[transform("transform", &log, true)], get_test_model()).unwrap_err();
    assert!(e.to_string().contains("Just a dummy error"), "{e}");
    assert_eq!(
        take(&log),
        ["enter_pass_ctx", "should_run transform", "run_before_pass transform", "transform pass", "exit_pass_ctx"]
    );
}

#[test]
fn test_should_run_exception() {
    let log: Log = Default::default();
    let pis = vec![PI::all("%1", &log).failing("should_run"), PI::all("%2", &log).failing("should_run")];
    let e = run_instrumented(pis, &[transform("transform", &log, false)], get_test_model()).unwrap_err();
    assert!(e.to_string().contains("Just a dummy error"), "{e}");
    assert_eq!(
        take(&log),
        ["%1 enter_pass_ctx", "%2 enter_pass_ctx", "%1 should_run transform", "%1 exit_pass_ctx", "%2 exit_pass_ctx"]
    );
}

#[test]
fn test_run_before_exception() {
    let log: Log = Default::default();
    let pis = vec![PI::all("%1", &log).failing("run_before_pass"), PI::all("%2", &log).failing("run_before_pass")];
    let e = run_instrumented(pis, &[transform("transform", &log, false)], get_test_model()).unwrap_err();
    assert!(e.to_string().contains("Just a dummy error"), "{e}");
    assert_eq!(
        take(&log),
        [
            "%1 enter_pass_ctx",
            "%2 enter_pass_ctx",
            "%1 should_run transform",
            "%2 should_run transform",
            "%1 run_before_pass transform",
            "%1 exit_pass_ctx",
            "%2 exit_pass_ctx"
        ]
    );
}

#[test]
fn test_run_after_exception() {
    let log: Log = Default::default();
    let pis = vec![PI::all("%1", &log).failing("run_after_pass"), PI::all("%2", &log).failing("run_after_pass")];
    let m = typed(text("def @main(%x: Tensor[(3, 4), float32], %y: Tensor[(3, 4), float32]) { add(%x, %y) }"));
    let e = run_instrumented(pis, &[transform("transform", &log, false)], m).unwrap_err();
    assert!(e.to_string().contains("Just a dummy error"), "{e}");
    assert_eq!(
        take(&log),
        [
            "%1 enter_pass_ctx",
            "%2 enter_pass_ctx",
            "%1 should_run transform",
            "%2 should_run transform",
            "%1 run_before_pass transform",
            "%2 run_before_pass transform",
            "transform pass",
            "%1 run_after_pass transform",
            "%1 exit_pass_ctx",
            "%2 exit_pass_ctx"
        ]
    );
}

#[test]
fn test_instrument_call_sequence() {
    let log: Log = Default::default();
    let passes = [transform("transform1", &log, false), transform("transform2", &log, false)];
    run_instrumented(vec![PI::all("%1", &log), PI::all("%2", &log)], &passes, get_test_model()).expect("passes");
    assert_eq!(
        take(&log),
        [
            "%1 enter_pass_ctx",
            "%2 enter_pass_ctx",
            "%1 should_run transform1",
            "%2 should_run transform1",
            "%1 run_before_pass transform1",
            "%2 run_before_pass transform1",
            "transform1 pass",
            "%1 run_after_pass transform1",
            "%2 run_after_pass transform1",
            "%1 should_run transform2",
            "%2 should_run transform2",
            "%1 run_before_pass transform2",
            "%2 run_before_pass transform2",
            "transform2 pass",
            "%1 run_after_pass transform2",
            "%2 run_after_pass transform2",
            "%1 exit_pass_ctx",
            "%2 exit_pass_ctx"
        ]
    );
}

// ---- tests/python/ir/test_pass_instrument.py ------------------------------------------------

/// A sink the printing instrument writes into and the test reads.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// TVM lowers a TIR function under `PrintBeforeAll()` and `PrintAfterAll()`
/// and finds `Before Running Pass:`, `After Running Pass:` and
/// `pass name: tir.` in the output; kiln's `PrintIr` heads each module
/// `// IR before <pass>` / `// IR after <pass>`.
#[test]
fn test_tir_print_all_passes() {
    let func = kiln::tir::parse_prim_func(
        r#"def func(A: T.Buffer([128, 128, 128, 128], "float32"), B: T.Buffer([128, 128, 128, 128], "float32")):
    for i in T.serial(128):
        for j in T.serial(128):
            for k in T.serial(128):
                for l in T.serial(128):
                    B[i, j, k, l] = (A[i, j, k, l] * T.float32(2.0))
"#,
    )
    .expect("TIR");
    let mut m = IRModule::new();
    m.add_prim_func(func);
    let out = Captured::default();
    let printer: IrPrinter = print_module;
    let print_all = PrintIr::with_sink(Selection::All, Selection::All, Box::new(out.clone()), printer);
    let ctx = Arc::new(PassContext::new().with_opt_level(3).with_instruments(vec![Arc::new(print_all)]));
    let lower = kiln::schedule::passes::tir_pipeline().expect("TIR pipeline");
    ctx.scope(|ctx| apply(&lower, m, ctx)).expect("lowered");
    let all_passes_output = String::from_utf8(out.0.lock().unwrap().clone()).expect("text");
    assert!(all_passes_output.contains("// IR before "), "{all_passes_output}");
    assert!(all_passes_output.contains("// IR after "), "{all_passes_output}");
    assert!(all_passes_output.contains("// IR before tir."), "{all_passes_output}");
}

// ---- tests/python/ir/test_node_reflection.py --------------------------------------------------

/// A map for an attrs-typed key gets its defaults; unknown fields and keys,
/// and a value of another kind, are refused.
#[test]
fn test_pass_config() {
    let map = |fields: &[(&str, ConfigValue)]| {
        ConfigValue::Map(fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<BTreeMap<_, _>>())
    };
    let ctx = PassContext::new()
        .with_opt_level(1)
        .with_config("tir.UnrollLoop", map(&[("auto_max_step", ConfigValue::Int(10))]))
        .expect("config");
    assert_eq!(ctx.opt_level, 1);
    assert_eq!(ctx.config_field("tir.UnrollLoop", "auto_max_step"), Some(&ConfigValue::Int(10)));
    // Default option.
    assert_eq!(ctx.config_field("tir.UnrollLoop", "explicit_unroll"), Some(&ConfigValue::Bool(true)));
    // Schema checking for the key's fields, unregistered keys and the value's kind.
    let e = PassContext::new().with_config("tir.UnrollLoop", map(&[("invalid", ConfigValue::Int(1))])).unwrap_err();
    assert!(e.to_string().contains("has no field `invalid`; its fields: auto_max_step"), "{e}");
    let e = PassContext::new().with_config("inavlid-opt", ConfigValue::Bool(true)).unwrap_err();
    assert!(e.to_string().contains("unknown config key `inavlid-opt`"), "{e}");
    let e = PassContext::new().with_config("tir.UnrollLoop", ConfigValue::Int(1)).unwrap_err();
    assert!(e.to_string().contains("takes a map, given a int"), "{e}");
    let e =
        PassContext::new().with_config("tir.UnrollLoop", map(&[("explicit_unroll", ConfigValue::Int(1))])).unwrap_err();
    assert!(e.to_string().contains("field `explicit_unroll` of config key `tir.UnrollLoop` takes a bool"), "{e}");
    // The command-line form.
    let parsed = kiln::transform::parse_config("tir.UnrollLoop", "{auto_max_step: 16, explicit_unroll: false}");
    assert_eq!(
        parsed.expect("parse"),
        map(&[
            ("auto_max_depth", ConfigValue::Int(8)),
            ("auto_max_extent", ConfigValue::Int(0)),
            ("auto_max_step", ConfigValue::Int(16)),
            ("explicit_unroll", ConfigValue::Bool(false)),
        ])
    );
}
