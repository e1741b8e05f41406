//! The `kiln` command line: a thin shell over the library.
//!
//! Every user error is one message on stderr that says what and where, and
//! exit code 1 — never a panic.

mod accuracy;
mod args;
mod bench;
mod peak;
mod progress;
mod tune;
mod viz;

use std::process::ExitCode;
use std::sync::Arc;

use args::{BenchOptions, BuildOptions, Cli, Command, CompileOptions, OptOptions, RunOptions};
use clap::Parser;

use kiln::relay::transform::default_pipeline;
use kiln::relay::{infer_module, print_module, IRModule};
use kiln::transform::instrument::{DumpIr, PassTimingInstrument, PrintIr, Selection, WellFormedChecker};
use kiln::transform::{apply, registry, Pass, PassContext, PassInstrument, Sequential};

/// Write to stdout; a closed pipe (`kiln print f | head`) ends quietly instead of panicking.
fn out(text: &str) {
    progress::finish();
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    if so.write_all(text.as_bytes()).and_then(|_| so.flush()).is_err() {
        std::process::exit(0);
    }
}

/// Relay text, or an ONNX file (`.onnx`; dynamic input dimensions fixed by
/// `shapes`, inputs in `bound` made constants), type-checked.
fn read_module_with_shapes(
    path: &str,
    shapes: &[(String, Vec<usize>)],
    bound: &[(String, kiln::Tensor)],
) -> Result<IRModule, String> {
    let file = std::path::Path::new(path);
    let format = kiln::frontend::ModelFormat::of_path(file);
    let mut m = kiln::frontend::load_model(file, format, shapes, bound).map_err(|e| e.to_string())?;
    let sep = if path.ends_with(".onnx") { ": " } else { ":" };
    infer_module(&mut m).map_err(|e| format!("{path}{sep}{e}"))?;
    Ok(m)
}

fn selection(names: &[String]) -> Selection {
    if names.iter().any(|n| n == "all") {
        Selection::All
    } else if names.is_empty() {
        Selection::None
    } else {
        Selection::Names(names.to_vec())
    }
}

/// `--config KEY=VALUE` options, each checked against the registered key's kind.
fn set_config(ctx: &mut PassContext, config: &[(String, String)]) -> Result<(), String> {
    for (k, v) in config {
        let value = kiln::transform::parse_config(k, v).map_err(|e| e.to_string())?;
        ctx.set_config(k, value).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn opt(o: &OptOptions) -> Result<(), String> {
    let file = o.file.clone();
    let module = read_module_with_shapes(&file, &o.input_shape, &[])?;
    // Every pass name given must exist.
    for name in o.disable.iter().chain(&o.require).chain(o.before.iter().chain(&o.after).filter(|n| *n != "all")) {
        registry::lookup(name).map_err(|e| e.to_string())?;
    }
    let pipeline: Arc<dyn Pass> = match &o.passes {
        Some(names) => {
            let refs: Vec<&str> = names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).collect();
            Sequential::from_names("Passes", &refs).map_err(|e| e.to_string())?.arc()
        }
        None => default_pipeline().map_err(|e| e.to_string())?.arc(),
    };
    let mut ctx = PassContext::new().with_opt_level(o.opt_level);
    ctx.disabled = o.disable.clone();
    ctx.required = o.require.clone();
    set_config(&mut ctx, &o.config)?;
    let timing = Arc::new(PassTimingInstrument::new());
    let mut instruments: Vec<Arc<dyn PassInstrument>> = Vec::new();
    if o.verify {
        instruments.push(Arc::new(WellFormedChecker::with_type_check()));
    }
    if o.time_passes {
        instruments.push(timing.clone());
    }
    if !o.before.is_empty() || !o.after.is_empty() {
        instruments.push(Arc::new(PrintIr::new(selection(&o.before), selection(&o.after))));
    }
    if let Some(dir) = &o.dump_ir {
        instruments.push(Arc::new(DumpIr::new(dir)));
    }
    let ctx = Arc::new(ctx.with_instruments(instruments));
    // The timing profiles last while the context is entered.
    let (result, timings) = ctx
        .scope(|ctx| Ok((apply(pipeline.as_ref(), module, ctx)?, timing.render())))
        .map_err(|e| format!("{file}: {e}"))?;
    if o.time_passes {
        eprint!("{timings}");
    }
    out(&print_module(&result));
    Ok(())
}

/// Options shared by `kiln build` and `kiln run`.
#[derive(Clone)]
struct CompileArgs {
    file: String,
    target: String,
    opt_level: u32,
    weights: Vec<String>,
    emit: Vec<String>,
    out: String,
    inputs: Vec<(String, String)>,
    /// `--bind NAME=PATH.npy`: ONNX inputs fixed at build time.
    bound: Vec<(String, String)>,
    /// `--input-shape NAME=1x3x224x224`: symbolic ONNX input dimensions fixed.
    input_shapes: Vec<(String, Vec<usize>)>,
    outputs: Vec<String>,
    threads: usize,
    runs: usize,
    /// `kiln bench --profile`: time each kernel too.
    profile: bool,
    /// `kiln bench --paced`: a batch of `runs` per line of standard input.
    paced: bool,
    /// `--ptx FILE`: prebuilt PTX for a `cuda` run (this kiln may lack LLVM).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    ptx: Option<String>,
    /// `--config KEY=VALUE`: pass configuration.
    config: Vec<(String, String)>,
    /// `--tuning FILE`: schedule records from `kiln tune`.
    tuning: Option<String>,
    /// `--precision fp32|bf16`.
    precision: kiln::Precision,
}

impl CompileArgs {
    fn new(c: CompileOptions) -> Self {
        CompileArgs {
            file: c.file,
            target: c.target,
            opt_level: c.opt_level,
            weights: c.weights,
            emit: Vec::new(),
            out: ".".into(),
            inputs: Vec::new(),
            bound: Vec::new(),
            input_shapes: c.input_shape,
            outputs: Vec::new(),
            threads: 1,
            runs: 100,
            profile: false,
            paced: false,
            ptx: None,
            config: c.config,
            tuning: c.tuning,
            precision: c.precision,
        }
    }

    fn build(b: BuildOptions) -> Self {
        CompileArgs { emit: b.emit, out: b.out, ..CompileArgs::new(b.compile) }
    }

    fn run(r: RunOptions) -> Self {
        CompileArgs {
            inputs: r.input,
            bound: r.bind,
            outputs: r.output,
            threads: r.threads,
            ptx: r.ptx,
            ..CompileArgs::new(r.compile)
        }
    }

    fn bench(b: BenchOptions) -> Self {
        CompileArgs { runs: b.runs as usize, profile: b.profile, paced: b.paced, ..CompileArgs::run(b.run) }
    }
}

/// The `--input NAME=PATH.npy` of every input of `plan`, in the plan's order.
fn load_inputs(c: &CompileArgs, plan: &kiln::backend::aot::ExecutorPlan) -> Result<Vec<kiln::Tensor>, String> {
    let mut inputs = Vec::new();
    for &t in &plan.inputs {
        let name = &plan.tensors[t].name;
        let Some(path) = c.inputs.iter().find(|(n, _)| n == name).map(|(_, p)| p) else {
            let names: Vec<&str> = plan.inputs.iter().map(|&i| plan.tensors[i].name.as_str()).collect();
            return Err(format!("missing --input {name}=PATH.npy (the model's inputs: {})", names.join(", ")));
        };
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        inputs.push(kiln::npy::read_npy(&bytes).map_err(|e| format!("{path}: {e}"))?);
    }
    for (n, _) in &c.inputs {
        if !plan.inputs.iter().any(|&i| &plan.tensors[i].name == n) {
            return Err(format!("`{n}` is not an input of the model"));
        }
    }
    Ok(inputs)
}

/// Parse, bind weights and type-check: the module the pipeline optimizes.
fn prepare_module(c: &CompileArgs) -> Result<IRModule, String> {
    // Dynamic ONNX input dimensions: `--input-shape`, else (`kiln run`) the
    // shapes of the .npy inputs.
    let mut shapes = c.input_shapes.clone();
    for (name, path) in &c.inputs {
        if shapes.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(t) = std::fs::read(path).ok().and_then(|b| kiln::npy::read_npy(&b).ok()) {
            shapes.push((name.clone(), t.shape().to_vec()));
        }
    }
    let mut bound = Vec::new();
    for (name, path) in &c.bound {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: cannot read: {e}"))?;
        bound.push((name.clone(), kiln::npy::read_npy(&bytes).map_err(|e| format!("{path}: {e}"))?));
    }
    if !bound.is_empty() && !c.file.ends_with(".onnx") {
        return Err("--bind applies to ONNX models".into());
    }
    // File errors with their location first; a model is its `@main`.
    let m = read_module_with_shapes(&c.file, &shapes, &bound)?;
    m.main().map_err(|e| format!("{}:{e}", c.file))?;
    progress::stage("compiling");
    progress::detail(format!("reading {}", c.file));
    builder(c, "model", &shapes, bound).prepare().map_err(|e| e.to_string())
}

/// Parse, bind weights, type-check, optimize and plan.
fn compile_file(c: &CompileArgs) -> Result<(IRModule, kiln::backend::aot::ExecutorPlan), String> {
    let m = prepare_module(c)?;
    let mut ctx = PassContext::new().with_opt_level(c.opt_level);
    set_config(&mut ctx, &c.config)?;
    // Tiles and packed layouts sized for the CPU the target names (unless set above).
    kiln::target::configure_context(&c.target, &mut ctx);
    c.precision.configure(&c.target, &mut ctx)?;
    if let Some(path) = &c.tuning {
        let target = kiln::target::TargetDescription::resolve(&c.target);
        let (knobs, warnings) =
            kiln::tune::TuningLog::knobs_from_file(std::path::Path::new(path), &target).map_err(|e| e.to_string())?;
        for w in warnings {
            progress::note(&format!("warning: {w}"));
        }
        ctx = ctx.with_extension(kiln::schedule::ScheduleTuning::applying(knobs));
    }
    let ctx = Arc::new(ctx.with_instruments(vec![progress::PassProgress::instrument()]));
    if kiln::build::is_cuda_target(&c.target) {
        return kiln::build::optimize_and_plan_gpu(m, ctx).map_err(|e| format!("{}: {e}", c.file));
    }
    kiln::build::optimize_and_plan(m, ctx).map_err(|e| format!("{}: {e}", c.file))
}

/// A [`kiln::Build`] of the file with the command's target, weights, fixed
/// input shapes and bound inputs.
fn builder(
    c: &CompileArgs,
    name: &str,
    shapes: &[(String, Vec<usize>)],
    bound: Vec<(String, kiln::Tensor)>,
) -> kiln::Build {
    let mut b = kiln::Build::new(name);
    if c.file.ends_with(".onnx") {
        b.onnx(&c.file);
        for (n, s) in shapes {
            b.input_shape(n, s);
        }
        for (n, t) in bound {
            b.bind_input(&n, t);
        }
    } else {
        b.relay_file(&c.file);
    }
    b.opt_level(c.opt_level).target(&c.target).precision(c.precision).cargo_metadata(false);
    if let Some(t) = &c.tuning {
        b.tuning_log(t);
    }
    for w in &c.weights {
        b.weights(w);
    }
    b
}

/// `--emit lib`: the static library, header, C API and Rust glue of the
/// model, named after the file's stem (made a C identifier).
fn write_library(c: &CompileArgs, stem: &str, dir: &std::path::Path) -> Result<(), String> {
    if !c.config.is_empty() {
        return Err("--config does not apply to --emit lib (kiln::Build has no configuration keys yet)".into());
    }
    if kiln::build::is_cuda_target(&c.target) {
        return Err("--emit lib needs a CPU target; a `cuda` target emits relay, tir and ptx".into());
    }
    let name = kiln::build::glue::sanitize(stem, "model");
    progress::stage("building");
    progress::detail(format!("libkiln_{name}.a: optimizing, lowering, generating code"));
    builder(c, &name, &c.input_shapes, Vec::new()).compile_in(dir).map_err(|e| e.to_string())?;
    progress::finish();
    for f in [format!("libkiln_{name}.a"), format!("{name}.h"), format!("{name}.rs"), format!("{name}.json")] {
        eprintln!("wrote {}", dir.join(f).display());
    }
    Ok(())
}

/// PTX of a GPU-scheduled plan for the `cuda …` target.
#[cfg(feature = "llvm")]
fn ptx_of(target: &str, stem: &str, plan: &kiln::backend::aot::ExecutorPlan) -> Result<String, String> {
    let t = kiln::codegen::llvm::CudaTarget::parse(target).map_err(|e| e.to_string())?;
    kiln::codegen::llvm::compile_ptx(stem, &plan.kernels, &t).map_err(|e| e.to_string())
}

#[cfg(not(feature = "llvm"))]
fn ptx_of(_: &str, _: &str, _: &kiln::backend::aot::ExecutorPlan) -> Result<String, String> {
    Err("PTX needs LLVM: this kiln was built without the `llvm` feature".into())
}

/// Run (and, for `bench`, time) a GPU plan.
#[cfg(feature = "cuda")]
fn execute_cuda(
    c: &CompileArgs,
    plan: &kiln::backend::aot::ExecutorPlan,
    inputs: &[kiln::Tensor],
    bench: bool,
) -> Result<Vec<kiln::Tensor>, String> {
    let ptx = match &c.ptx {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            kiln::backend::cuda::check_ptx(plan, &text).map_err(|e| format!("{path}: {e}"))?;
            text
        }
        None => ptx_of(&c.target, "model", plan)?,
    };
    run_on_gpu(c, plan, &ptx, inputs, bench).map_err(|e| e.to_string())
}

#[cfg(feature = "cuda")]
fn run_on_gpu(
    c: &CompileArgs,
    plan: &kiln::backend::aot::ExecutorPlan,
    ptx: &str,
    inputs: &[kiln::Tensor],
    bench: bool,
) -> Result<Vec<kiln::Tensor>, kiln::backend::RunError> {
    let mut ex = kiln::backend::cuda::CudaExecutor::new(plan, ptx)?;
    ex.set_inputs(inputs)?;
    ex.run()?;
    if bench {
        // Kernel by kernel, then the same launches replayed as one CUDA graph.
        for mode in ["launches", "graph"] {
            if mode == "graph" {
                ex.capture_graph()?;
            }
            for _ in 0..10 {
                ex.run()?;
            }
            let mut times = Vec::with_capacity(c.runs);
            for _ in 0..c.runs {
                let t = std::time::Instant::now();
                ex.run()?;
                times.push(t.elapsed().as_secs_f64() * 1e6);
            }
            times.sort_by(f64::total_cmp);
            out(&format!(
                "{}: median {:.1} us, min {:.1} us over {} runs ({mode}), {}, target `{}`\n",
                c.file,
                times[times.len() / 2],
                times[0],
                times.len(),
                ex.device_name(),
                c.target
            ));
        }
    }
    let outputs = ex.outputs()?;
    if bench && c.profile {
        // Each kernel enqueued 20 times back to back (launch cost amortized, as
        // in a graph); the median of 5 rounds. Repeating an in-place kernel
        // changes the values, so this comes after the outputs are read.
        let mut per_call: Vec<Vec<f64>> = vec![Vec::new(); plan.calls.len()];
        for _ in 0..5 {
            for (i, t) in ex.time_calls(20)?.into_iter().enumerate() {
                per_call[i].push(t);
            }
        }
        bench::print_kernel_profile(plan, &mut per_call);
    }
    Ok(outputs)
}

#[cfg(not(feature = "cuda"))]
fn execute_cuda(
    _: &CompileArgs,
    _: &kiln::backend::aot::ExecutorPlan,
    _: &[kiln::Tensor],
    _: bool,
) -> Result<Vec<kiln::Tensor>, String> {
    Err("running on a GPU needs kiln's `cuda` feature (cargo install … --features cuda); \
         `kiln build --target cuda --emit ptx` works without it"
        .into())
}

fn build(c: &CompileArgs) -> Result<(), String> {
    let dir = std::path::Path::new(&c.out);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stem = std::path::Path::new(&c.file).file_stem().and_then(|s| s.to_str()).unwrap_or("model").to_string();
    if c.emit.iter().all(|e| e == "lib") {
        // The library is Build's own compilation; nothing else to make.
        return write_library(c, &stem, dir);
    }
    let (fused, plan) = compile_file(c)?;
    let write = |name: &str, bytes: &[u8]| -> Result<(), String> {
        let p = dir.join(name);
        std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
        progress::note(&format!("wrote {}", p.display()));
        Ok(())
    };
    // LLVM IR, assembly and object come from one compilation, made once.
    let llvm_kinds: Vec<&str> =
        c.emit.iter().map(String::as_str).filter(|k| matches!(*k, "llvm" | "asm" | "obj")).collect();
    let llvm_outputs = if llvm_kinds.is_empty() || c.target.trim() == "c" || kiln::build::is_cuda_target(&c.target) {
        Vec::new()
    } else {
        compile_llvm(c, &stem, &plan.kernels, &llvm_kinds)?
    };
    for e in &c.emit {
        match e.as_str() {
            "lib" => write_library(c, &stem, dir)?,
            "relay" => write(&format!("{stem}.relay"), print_module(&fused).as_bytes())?,
            "tir" => {
                let text: Vec<String> = plan.kernels.iter().map(kiln::tir::print_prim_func).collect();
                write(&format!("{stem}.tir"), text.join("\n").as_bytes())?
            }
            "ptx" => {
                if !kiln::build::is_cuda_target(&c.target) {
                    return Err("--emit ptx needs a CUDA target (`--target cuda`)".into());
                }
                write(&format!("{stem}.ptx"), ptx_of(&c.target, &stem, &plan)?.as_bytes())?
            }
            kind if kiln::build::is_cuda_target(&c.target) => {
                return Err(format!("--emit {kind} needs a CPU target; a `cuda` target emits relay, tir and ptx"))
            }
            "c" => {
                let src = kiln::codegen::c::codegen_module(&plan.kernels).map_err(|e| e.to_string())?;
                write(&format!("{stem}.c"), src.as_bytes())?
            }
            kind => {
                if c.target.trim() == "c" {
                    return Err(format!("--emit {kind} needs an LLVM target, not `c`"));
                }
                let at =
                    llvm_kinds.iter().position(|k| *k == kind).ok_or_else(|| format!("unknown --emit `{kind}`"))?;
                let extension = match kind {
                    "llvm" => "ll",
                    "asm" => "s",
                    _ => "o",
                };
                write(&format!("{stem}.{extension}"), &llvm_outputs[at])?;
            }
        }
    }
    Ok(())
}

/// `--emit llvm|asm|obj`: LLVM IR, assembly and object file, in `kinds`' order.
#[cfg(feature = "llvm")]
fn compile_llvm(
    c: &CompileArgs,
    stem: &str,
    kernels: &[kiln::tir::PrimFunc],
    kinds: &[&str],
) -> Result<Vec<Vec<u8>>, String> {
    use kiln::codegen::llvm::Artifact;
    let target = kiln::codegen::llvm::LlvmTarget::parse(&c.target).map_err(|e| e.to_string())?;
    let wanted: Vec<Artifact> = kinds
        .iter()
        .map(|k| match *k {
            "llvm" => Artifact::LlvmIr,
            "asm" => Artifact::Assembly,
            _ => Artifact::Object,
        })
        .collect();
    progress::stage("generating code");
    progress::detail(format!("{} kernels: {}", kernels.len(), kinds.join(", ")));
    kiln::codegen::llvm::compile_artifacts(stem, kernels, &[], &target, &wanted).map_err(|e| e.to_string())
}

#[cfg(not(feature = "llvm"))]
fn compile_llvm(_: &CompileArgs, _: &str, _: &[kiln::tir::PrimFunc], kinds: &[&str]) -> Result<Vec<Vec<u8>>, String> {
    Err(format!(
        "--emit {} needs LLVM: this kiln was built without the `llvm` feature (use --target c)",
        kinds.join(",")
    ))
}

/// Compile `FILE` and load its inputs: what `run` and `bench` share.
fn prepare_run(c: &CompileArgs) -> Result<(kiln::backend::aot::ExecutorPlan, Vec<kiln::Tensor>), String> {
    let (_, plan) = compile_file(c)?;
    let inputs = load_inputs(c, &plan)?;
    Ok((plan, inputs))
}

/// The plan's kernels compiled in process for the CPU target: LLVM's JIT, or C.
fn kernel_library(
    c: &CompileArgs,
    plan: &kiln::backend::aot::ExecutorPlan,
) -> Result<Box<dyn kiln::backend::host::KernelLibrary>, String> {
    progress::stage("generating code");
    let how = if c.target.trim() == "c" { "C, $CC" } else { "LLVM JIT" };
    progress::detail(format!("{} kernels ({how})", plan.kernels.len()));
    kiln::backend::host::compile_in_process(plan, &c.target).map_err(|e| e.to_string())
}

/// Per plan call, the median microseconds over 20 runs on zero-filled
/// inputs, after 3 warm-up runs (`kiln viz --profile`).
fn execute_timed(c: &CompileArgs, plan: &kiln::backend::aot::ExecutorPlan) -> Result<Vec<f64>, String> {
    if kiln::build::is_cuda_target(&c.target) {
        return Err("--profile times CPU kernels; use `kiln bench --target cuda` for the GPU".into());
    }
    let lib = kernel_library(c, plan)?;
    let mut ex = kiln::backend::host::Executor::new(plan, lib.as_ref(), c.threads).map_err(|e| e.to_string())?;
    let zeros: Vec<kiln::Tensor> = plan
        .inputs
        .iter()
        .map(|&t| kiln::Tensor::zeros(plan.tensors[t].dtype, plan.tensors[t].shape.clone()))
        .collect();
    ex.set_inputs(&zeros).map_err(|e| e.to_string())?;
    progress::stage("profiling");
    progress::detail(format!("{} kernel calls × 20 runs", plan.calls.len()));
    for _ in 0..3 {
        ex.run().map_err(|e| e.to_string())?;
    }
    Ok(bench::timed_calls(&mut ex, 20)?
        .into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect())
}

/// Run (and, for `bench`, time) a compiled model with the chosen backend.
fn execute(
    c: &CompileArgs,
    plan: &kiln::backend::aot::ExecutorPlan,
    inputs: &[kiln::Tensor],
    bench: bool,
) -> Result<Vec<kiln::Tensor>, String> {
    if kiln::build::is_cuda_target(&c.target) {
        if c.paced {
            return Err("`kiln bench --paced` times CPU targets (llvm, c)".into());
        }
        return execute_cuda(c, plan, inputs, bench);
    }
    let description = kiln::target::TargetDescription::resolve(&c.target);
    let lib = kernel_library(c, plan)?;
    let lib = lib.as_ref();
    let mut ex = kiln::backend::host::Executor::new(plan, lib, c.threads).map_err(|e| e.to_string())?;
    ex.set_inputs(inputs).map_err(|e| e.to_string())?;
    progress::stage("running");
    progress::detail(format!("{} kernel calls on {} thread(s)", plan.calls.len(), c.threads));
    ex.run().map_err(|e| e.to_string())?;
    if bench {
        bench::time_model(c, plan, &mut ex, &description)?;
    }
    Ok(ex.outputs())
}

fn run_model(c: &CompileArgs, bench: bool) -> Result<(), String> {
    let (plan, inputs) = prepare_run(c)?;
    let outputs = execute(c, &plan, &inputs, bench)?;
    if bench {
        return Ok(());
    }
    for (i, t) in outputs.iter().enumerate() {
        let v = t.to_f64_vec();
        let head: Vec<String> = v.iter().take(8).map(|x| format!("{x:.6}")).collect();
        out(&format!(
            "output {i}: {:?} {} [{}{}]\n",
            t.shape(),
            t.dtype(),
            head.join(", "),
            if v.len() > 8 { ", …" } else { "" }
        ));
        if let Some(p) = c.outputs.get(i) {
            std::fs::write(p, kiln::npy::write_npy(t)).map_err(|e| format!("{p}: {e}"))?;
        }
    }
    Ok(())
}

fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Build(b) => build(&CompileArgs::build(b)),
        Command::Run(r) => run_model(&CompileArgs::run(r), false),
        Command::Bench(b) => run_model(&CompileArgs::bench(b), true),
        Command::Tune(t) => tune::tune(t),
        Command::Accuracy(a) => accuracy::accuracy(a),
        Command::Peak { threads } => {
            peak::peak(threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())))
        }
        Command::Print { file, input_shape } => {
            let m = read_module_with_shapes(&file, &input_shape, &[])?;
            out(&print_module(&m));
            Ok(())
        }
        Command::Opt(o) => opt(&o),
        Command::Viz(v) => viz::viz(v),
        Command::Passes => {
            for name in registry::pass_names() {
                if let Some(p) = registry::get_pass(&name) {
                    let i = p.info();
                    out(&format!("{name} (opt_level {}, requires [{}])\n", i.opt_level, i.required.join(", ")));
                }
            }
            out("\nconfiguration keys (--config KEY=VALUE; a map as KEY={field: value, ...}):\n");
            for key in kiln::transform::config_keys() {
                out(&format!("{} ({}): {}\n", key.name, key.kind, key.doc));
                for f in &key.fields {
                    out(&format!("    {} ({}, default {}): {}\n", f.name, f.kind, f.default, f.doc));
                }
            }
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    // A closed pipe ends `kiln … | head` quietly, as it ends other Unix tools
    // (Rust ignores SIGPIPE, and `println!` then panics on the write).
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to the default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `--help` and `--version` print and succeed; a wrong option is a
        // user error like any other (exit code 1), with clap's message.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("error: no command given\n\n{}", e.render());
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprint!("{}", e.render());
            return ExitCode::FAILURE;
        }
    };
    match run(cli.command) {
        Ok(()) => {
            progress::finish();
            ExitCode::SUCCESS
        }
        Err(e) => {
            progress::finish();
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
