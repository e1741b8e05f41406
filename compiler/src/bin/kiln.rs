//! The `kiln` command line: a thin shell over the library.
//!
//! Every user error is one message on stderr that says what and where, and
//! exit code 1 — never a panic.

use std::process::ExitCode;
use std::sync::Arc;

use kiln::relay::transform::default_pipeline;
use kiln::relay::{infer_module, parse_module_file, print_module, IRModule};
use kiln::transform::instrument::{DumpIr, PassTimingInstrument, PrintIr, Selection, WellFormedChecker};
use kiln::transform::{apply, registry, ConfigValue, Pass, PassContext, PassInstrument, Sequential};

const USAGE: &str = "\
usage: kiln <command> [options]

commands:
  print FILE      parse Relay text and print it back, type-annotated
  opt FILE        optimize a Relay module and print it
      --opt-level N              optimization level (default 2)
      --passes P1,P2,…           run these registered passes instead of the default pipeline
      --disable P                never run pass P (repeatable)
      --require P                always run pass P (repeatable)
      --config KEY=VALUE         set a pass configuration key (repeatable)
      --print-ir-before P|all    print the module before pass P (repeatable)
      --print-ir-after P|all     print the module after pass P (repeatable)
      --time-passes              print a pass timing report
      --dump-ir DIR              write the module after every pass to DIR/NNN_<pass>.relay
      --verify                   check the module is well-formed and well-typed after every pass
  build FILE      compile a Relay module and write what --emit asks for
      --target T                 `llvm -mcpu=native` (default), `llvm -mcpu=…`, `c`, or
                                 `cuda [-arch=sm_80]` (NVIDIA GPUs; run/bench need feature `cuda`)
      --opt-level N              optimization level (default 3)
      --weights FILE             bind @main parameters from .safetensors/.npy (repeatable)
      --config KEY=VALUE         set a pass configuration key, as for opt (repeatable; e.g.
                                 relay.AlterOpLayout.winograd=false keeps convolutions direct)
      --input-shape NAME=1x3x224x224  (ONNX) fix the symbolic dimensions of an input (repeatable)
      --emit LIST                comma-separated: relay,tir,llvm,asm,obj,c,ptx (default obj)
      -o DIR                     output directory (default .)
  run FILE        compile in process (JIT, or C) and run on .npy inputs
      --input NAME=PATH.npy      an input of @main (repeatable; every non-weight parameter)
      --bind NAME=PATH.npy       (ONNX) fix an input at build time: it becomes a constant, so
                                 shapes, axes or scales fed as inputs are known to the compiler
      --output PATH.npy          where to write each output, in order (repeatable)
      --weights FILE, --target T, --opt-level N, --config as for build
      --threads N                threads for the parallel kernels (default 1)
      --ptx FILE                 (cuda) run this PTX, from `kiln build --target cuda --emit ptx`
                                 on a machine with LLVM, instead of compiling it here
  bench FILE      like run, then time the compiled model
      --runs N                   timed runs after 10 warm-up runs (default 100)
      --profile                  also the time of each kernel, slowest first
  passes          list the registered passes
";

/// Write to stdout; a closed pipe (`kiln print f | head`) ends quietly instead of panicking.
fn out(text: &str) {
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    if so.write_all(text.as_bytes()).and_then(|_| so.flush()).is_err() {
        std::process::exit(0);
    }
}

fn read_module(path: &str) -> Result<IRModule, String> {
    read_module_with_shapes(path, &[])
}

/// Relay text, or an ONNX file (`.onnx`; dynamic input dimensions fixed by `shapes`).
fn read_module_with_shapes(path: &str, shapes: &[(String, Vec<usize>)]) -> Result<IRModule, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: cannot read: {e}"))?;
    if path.ends_with(".onnx") {
        let mut m = kiln::frontend::onnx::import(&bytes, shapes).map_err(|e| format!("{path}: {e}"))?;
        infer_module(&mut m).map_err(|e| format!("{path}: {e}"))?;
        return Ok(m);
    }
    let mut m = parse_module_file(&bytes).map_err(|e| format!("{path}:{e}"))?;
    // Every command works on a model: its `@main`.
    m.main().map_err(|e| format!("{path}:{e}"))?;
    infer_module(&mut m).map_err(|e| format!("{path}:{e}"))?;
    Ok(m)
}

/// More threads than any machine kiln runs on has cores: a typo, not a plan.
const MAX_THREADS: usize = 1024;

/// Options of `kiln opt`.
#[derive(Default)]
struct OptArgs {
    file: Option<String>,
    opt_level: u32,
    passes: Option<Vec<String>>,
    disable: Vec<String>,
    require: Vec<String>,
    config: Vec<(String, String)>,
    before: Vec<String>,
    after: Vec<String>,
    time: bool,
    dump: Option<String>,
    verify: bool,
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
        let kind = kiln::transform::config_kind(k).map_err(|e| e.to_string())?;
        let value = ConfigValue::parse(kind, v).ok_or_else(|| format!("config key `{k}` takes a {kind}, not `{v}`"))?;
        ctx.set_config(k, value).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `--config KEY=VALUE`, split at the first `=`.
fn config_option(v: &str) -> Result<(String, String), String> {
    let (k, x) = v.split_once('=').ok_or_else(|| format!("--config takes KEY=VALUE, not `{v}`"))?;
    Ok((k.to_string(), x.to_string()))
}

fn parse_opt_args(args: &[String]) -> Result<OptArgs, String> {
    let mut o = OptArgs { opt_level: 2, ..Default::default() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or_else(|| format!("`{flag}` needs a value"));
        match a.as_str() {
            "--opt-level" => {
                let v = value(a)?;
                o.opt_level = v.parse().map_err(|_| format!("--opt-level takes a number, not `{v}`"))?;
            }
            "--passes" => {
                o.passes = Some(value(a)?.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
            }
            "--disable" => o.disable.push(value(a)?),
            "--require" => o.require.push(value(a)?),
            "--config" => o.config.push(config_option(&value(a)?)?),
            "--print-ir-before" => o.before.push(value(a)?),
            "--print-ir-after" => o.after.push(value(a)?),
            "--time-passes" => o.time = true,
            "--dump-ir" => o.dump = Some(value(a)?),
            "--verify" => o.verify = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option `{flag}`\n\n{USAGE}")),
            file if o.file.is_none() => o.file = Some(file.to_string()),
            extra => return Err(format!("unexpected argument `{extra}`")),
        }
    }
    Ok(o)
}

fn opt(args: &[String]) -> Result<(), String> {
    let o = parse_opt_args(args)?;
    let file = o.file.clone().ok_or_else(|| format!("`kiln opt` needs a FILE\n\n{USAGE}"))?;
    let module = read_module(&file)?;
    // Every pass name given must exist.
    for name in o.disable.iter().chain(&o.require).chain(o.before.iter().chain(&o.after).filter(|n| *n != "all")) {
        registry::lookup(name).map_err(|e| e.to_string())?;
    }
    let pipeline: Arc<dyn Pass> = match &o.passes {
        Some(names) => {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
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
    if o.time {
        instruments.push(timing.clone());
    }
    if !o.before.is_empty() || !o.after.is_empty() {
        instruments.push(Arc::new(PrintIr::new(selection(&o.before), selection(&o.after))));
    }
    if let Some(dir) = &o.dump {
        instruments.push(Arc::new(DumpIr::new(dir)));
    }
    let ctx = Arc::new(ctx.with_instruments(instruments));
    let result = ctx.scope(|ctx| apply(pipeline.as_ref(), module, ctx)).map_err(|e| format!("{file}: {e}"))?;
    if o.time {
        eprint!("{}", timing.report());
    }
    out(&print_module(&result));
    Ok(())
}

/// Options shared by `kiln build` and `kiln run`.
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
    /// `--ptx FILE`: prebuilt PTX for a `cuda` run (this kiln may lack LLVM).
    ptx: Option<String>,
    /// `--config KEY=VALUE`: pass configuration.
    config: Vec<(String, String)>,
}

fn parse_compile_args(args: &[String], cmd: &str) -> Result<CompileArgs, String> {
    let mut c = CompileArgs {
        file: String::new(),
        target: "llvm -mcpu=native".into(),
        opt_level: 3,
        weights: Vec::new(),
        emit: vec!["obj".into()],
        out: ".".into(),
        inputs: Vec::new(),
        bound: Vec::new(),
        input_shapes: Vec::new(),
        outputs: Vec::new(),
        threads: 1,
        runs: 100,
        profile: false,
        ptx: None,
        config: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or_else(|| format!("`{flag}` needs a value"));
        match a.as_str() {
            "--target" => c.target = value(a)?,
            "--opt-level" => {
                let v = value(a)?;
                c.opt_level = v.parse().map_err(|_| format!("--opt-level takes a number, not `{v}`"))?;
            }
            "--weights" => c.weights.push(value(a)?),
            "--emit" => c.emit = value(a)?.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            "-o" => c.out = value(a)?,
            "--input" => {
                let v = value(a)?;
                let (n, p) = v.split_once('=').ok_or_else(|| format!("--input takes NAME=PATH.npy, not `{v}`"))?;
                c.inputs.push((n.to_string(), p.to_string()));
            }
            "--bind" => {
                let v = value(a)?;
                let (n, p) = v.split_once('=').ok_or_else(|| format!("--bind takes NAME=PATH.npy, not `{v}`"))?;
                c.bound.push((n.to_string(), p.to_string()));
            }
            "--input-shape" => {
                let v = value(a)?;
                let bad = || format!("--input-shape takes NAME=D1xD2x…, e.g. x=1x3x224x224, not `{v}`");
                let (n, dims) = v.split_once('=').ok_or_else(bad)?;
                let shape: Vec<usize> =
                    dims.split('x').map(|d| d.trim().parse::<usize>()).collect::<Result<_, _>>().map_err(|_| bad())?;
                c.input_shapes.push((n.to_string(), shape));
            }
            "--output" => c.outputs.push(value(a)?),
            "--ptx" => c.ptx = Some(value(a)?),
            "--config" => c.config.push(config_option(&value(a)?)?),
            "--profile" => c.profile = true,
            "--runs" => {
                let v = value(a)?;
                c.runs = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--runs takes a positive number, not `{v}`"))?;
            }
            "--threads" => {
                let v = value(a)?;
                c.threads = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--threads takes a positive number, not `{v}`"))?;
                if c.threads > MAX_THREADS {
                    return Err(format!("--threads {v}: at most {MAX_THREADS} threads"));
                }
            }
            flag if flag.starts_with('-') => {
                return Err(format!("unknown option `{flag}` for `kiln {cmd}`\n\n{USAGE}"))
            }
            file if c.file.is_empty() => c.file = file.to_string(),
            extra => return Err(format!("unexpected argument `{extra}`")),
        }
    }
    if c.file.is_empty() {
        return Err(format!("`kiln {cmd}` needs a FILE\n\n{USAGE}"));
    }
    for e in &c.emit {
        if !["relay", "tir", "llvm", "asm", "obj", "c", "ptx"].contains(&e.as_str()) {
            return Err(format!("unknown --emit kind `{e}`; expected relay, tir, llvm, asm, obj, c or ptx"));
        }
    }
    Ok(c)
}

/// Parse, bind weights, type-check, optimize and plan.
fn compile_file(c: &CompileArgs) -> Result<(IRModule, kiln::backend::aot::ExecutorPlan), String> {
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
    if c.file.ends_with(".onnx") {
        // File errors with their location first.
        let bytes = std::fs::read(&c.file).map_err(|e| format!("{}: cannot read: {e}", c.file))?;
        let mut m =
            kiln::frontend::onnx::import_with(&bytes, &shapes, &bound).map_err(|e| format!("{}: {e}", c.file))?;
        infer_module(&mut m).map_err(|e| format!("{}: {e}", c.file))?;
    } else {
        read_module_with_shapes(&c.file, &shapes)?;
    }
    let mut b = kiln::Build::new("model");
    if c.file.ends_with(".onnx") {
        b.onnx(&c.file);
        for (n, s) in &shapes {
            b.input_shape(n, s);
        }
        for (n, t) in bound {
            b.bind_input(&n, t);
        }
    } else {
        b.relay_file(&c.file);
    }
    b.opt_level(c.opt_level).target(&c.target);
    for w in &c.weights {
        b.weights(w);
    }
    let m = b.prepare().map_err(|e| e.to_string())?;
    let mut ctx = PassContext::new().with_opt_level(c.opt_level);
    set_config(&mut ctx, &c.config)?;
    // Tiles and packed layouts sized for the CPU the target names (unless set above).
    kiln::target::configure_context(&c.target, &mut ctx);
    let ctx = Arc::new(ctx);
    if kiln::build::is_cuda_target(&c.target) {
        return kiln::build::optimize_and_plan_gpu(m, ctx).map_err(|e| format!("{}: {e}", c.file));
    }
    kiln::build::optimize_and_plan(m, ctx).map_err(|e| format!("{}: {e}", c.file))
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
    ex.outputs()
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

fn build(args: &[String]) -> Result<(), String> {
    let c = parse_compile_args(args, "build")?;
    let (fused, plan) = compile_file(&c)?;
    let dir = std::path::Path::new(&c.out);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, bytes: &[u8]| -> Result<(), String> {
        let p = dir.join(name);
        std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
        eprintln!("wrote {}", p.display());
        Ok(())
    };
    let stem = std::path::Path::new(&c.file).file_stem().and_then(|s| s.to_str()).unwrap_or("model").to_string();
    for e in &c.emit {
        match e.as_str() {
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
                emit_llvm(&c, &stem, &plan.kernels, kind, &write)?;
            }
        }
    }
    Ok(())
}

/// Writes one output file of `kiln build`.
type WriteFile<'a> = dyn Fn(&str, &[u8]) -> Result<(), String> + 'a;

/// `--emit llvm|asm|obj`: LLVM IR, assembly or an object file.
#[cfg(feature = "llvm")]
fn emit_llvm(
    c: &CompileArgs,
    stem: &str,
    kernels: &[kiln::tir::PrimFunc],
    kind: &str,
    write: &WriteFile<'_>,
) -> Result<(), String> {
    let target = kiln::codegen::llvm::LlvmTarget::parse(&c.target).map_err(|e| e.to_string())?;
    let out = kiln::codegen::llvm::compile(stem, kernels, &target).map_err(|e| e.to_string())?;
    match kind {
        "llvm" => write(&format!("{stem}.ll"), out.llvm_ir.as_bytes()),
        "asm" => write(&format!("{stem}.s"), out.assembly.as_bytes()),
        _ => write(&format!("{stem}.o"), &out.object),
    }
}

#[cfg(not(feature = "llvm"))]
fn emit_llvm(_: &CompileArgs, _: &str, _: &[kiln::tir::PrimFunc], kind: &str, _: &WriteFile<'_>) -> Result<(), String> {
    Err(format!("--emit {kind} needs LLVM: this kiln was built without the `llvm` feature (use --target c)"))
}

/// The LLVM JIT as a kernel library, compiled for the target's CPU.
#[cfg(feature = "llvm")]
fn llvm_library(plan: &kiln::backend::aot::ExecutorPlan, target: &str) -> Result<kiln::codegen::llvm::Jit, String> {
    let target = kiln::codegen::llvm::LlvmTarget::parse(target).map_err(|e| e.to_string())?;
    kiln::codegen::llvm::Jit::for_target("model", &plan.kernels, &target).map_err(|e| e.to_string())
}

#[cfg(not(feature = "llvm"))]
fn llvm_library(_: &kiln::backend::aot::ExecutorPlan, _: &str) -> Result<CLibrary, String> {
    Err("an LLVM target needs LLVM: this kiln was built without the `llvm` feature (use --target c)".into())
}

/// Kernels compiled as C into a shared object and loaded.
struct CLibrary {
    _dir: std::path::PathBuf,
    lib: libloading::Library,
}

impl kiln::backend::host::KernelLibrary for CLibrary {
    fn packed(&self, name: &str) -> Result<kiln::codegen::PackedKernel, kiln::backend::RunError> {
        // SAFETY: every kernel has a `<name>_packed` entry point of this type (codegen::c).
        let sym: libloading::Symbol<kiln::codegen::PackedKernel> = unsafe {
            self.lib.get(format!("{name}_packed").as_bytes())
        }
        .map_err(|e| kiln::backend::RunError::MissingKernel { kernel: name.to_string(), message: e.to_string() })?;
        Ok(*sym)
    }
}

fn c_library(plan: &kiln::backend::aot::ExecutorPlan) -> Result<CLibrary, String> {
    let src = kiln::codegen::c::codegen_module(&plan.kernels).map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("kiln-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (cfile, so) = (dir.join("kernels.c"), dir.join("kernels.so"));
    std::fs::write(&cfile, src).map_err(|e| e.to_string())?;
    let status = std::process::Command::new("cc")
        .args(["-O2", "-std=c99", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&cfile)
        .arg("-lm")
        .status()
        .map_err(|e| format!("cannot run the C compiler `cc`: {e}"))?;
    if !status.success() {
        return Err("the C compiler failed on the generated kernels".into());
    }
    // SAFETY: the library is the C we just generated; loading it runs no initializers of ours.
    let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string())?;
    Ok(CLibrary { _dir: dir, lib })
}

/// Compile `FILE` and load its inputs: what `run` and `bench` share.
fn prepare_run(c: &CompileArgs) -> Result<(kiln::backend::aot::ExecutorPlan, Vec<kiln::Tensor>), String> {
    let (_, plan) = compile_file(c)?;
    let mut inputs = Vec::new();
    for &t in &plan.inputs {
        let name = &plan.tensors[t].name;
        let path = c.inputs.iter().find(|(n, _)| n == name).map(|(_, p)| p).ok_or_else(|| {
            let names: Vec<&str> = plan.inputs.iter().map(|&i| plan.tensors[i].name.as_str()).collect();
            format!("missing --input {name}=PATH.npy (the model's inputs: {})", names.join(", "))
        })?;
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        inputs.push(kiln::npy::read_npy(&bytes).map_err(|e| format!("{path}: {e}"))?);
    }
    for (n, _) in &c.inputs {
        if !plan.inputs.iter().any(|&i| &plan.tensors[i].name == n) {
            return Err(format!("`{n}` is not an input of the model"));
        }
    }
    Ok((plan, inputs))
}

/// Run (and, for `bench`, time) a compiled model with the chosen backend.
fn execute(
    c: &CompileArgs,
    plan: &kiln::backend::aot::ExecutorPlan,
    inputs: &[kiln::Tensor],
    bench: bool,
) -> Result<Vec<kiln::Tensor>, String> {
    if kiln::build::is_cuda_target(&c.target) {
        return execute_cuda(c, plan, inputs, bench);
    }
    // Code for a CPU feature this machine lacks would die of SIGILL.
    let description = kiln::target::TargetDescription::resolve(&c.target);
    if let Some(feature) = description.first_missing_on_this_cpu() {
        return Err(format!(
            "target `{}` compiles for the CPU feature `{feature}`, which this CPU lacks; \
             run it with `--target \"llvm -mcpu=native\"` here, or on a CPU that has it",
            c.target
        ));
    }
    let jit;
    let clib;
    let lib: &dyn kiln::backend::host::KernelLibrary = if c.target.trim() == "c" {
        clib = c_library(plan)?;
        &clib
    } else {
        jit = llvm_library(plan, &c.target)?;
        &jit
    };
    let mut ex = kiln::backend::host::Executor::new(plan, lib, c.threads).map_err(|e| e.to_string())?;
    ex.set_inputs(inputs).map_err(|e| e.to_string())?;
    ex.run().map_err(|e| e.to_string())?;
    if bench {
        for _ in 0..10 {
            ex.run().map_err(|e| e.to_string())?;
        }
        let mut times: Vec<f64> = (0..c.runs)
            .map(|_| {
                let t = std::time::Instant::now();
                ex.run().map(|()| t.elapsed().as_secs_f64() * 1e6)
            })
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        times.sort_by(f64::total_cmp);
        if c.profile {
            // Per kernel: the median over the runs of each call's time, grouped by kernel.
            let mut per_call: Vec<Vec<f64>> = Vec::new();
            for _ in 0..c.runs.min(50) {
                for (i, t) in ex.run_timed().map_err(|e| e.to_string())?.into_iter().enumerate() {
                    if per_call.len() <= i {
                        per_call.push(Vec::new());
                    }
                    per_call[i].push(t);
                }
            }
            let mut by_kernel: Vec<(String, f64, usize)> = Vec::new();
            for (call, samples) in plan.calls.iter().zip(per_call.iter_mut()) {
                samples.sort_by(f64::total_cmp);
                let median = samples[samples.len() / 2];
                let name = &plan.kernels[call.kernel].name;
                match by_kernel.iter_mut().find(|(n, ..)| n == name) {
                    Some(e) => {
                        e.1 += median;
                        e.2 += 1;
                    }
                    None => by_kernel.push((name.clone(), median, 1)),
                }
            }
            by_kernel.sort_by(|a, b| b.1.total_cmp(&a.1));
            let total: f64 = by_kernel.iter().map(|k| k.1).sum();
            for (name, us, calls) in &by_kernel {
                out(&format!("{us:>10.1} us {:>5.1}%  {calls:>3}×  {name}\n", 100.0 * us / total));
            }
        }
        // Where the figure was taken: the code's CPU and features, and this machine's.
        let here = kiln::target::TargetDescription::resolve("llvm -mcpu=native");
        out(&format!(
            "{}: median {:.1} us, min {:.1} us over {} runs, {} thread(s), target `{}` (cpu {}: {}), on {} ({})\n",
            c.file,
            times[times.len() / 2],
            times[0],
            times.len(),
            c.threads,
            c.target,
            description.cpu,
            description.features.join(" "),
            here.cpu,
            here.features.join(" ")
        ));
    }
    Ok(ex.outputs())
}

fn run_model(args: &[String], bench: bool) -> Result<(), String> {
    let c = parse_compile_args(args, if bench { "bench" } else { "run" })?;
    let (plan, inputs) = prepare_run(&c)?;
    let outputs = execute(&c, &plan, &inputs, bench)?;
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

fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("build") => build(&args[1..]),
        Some("run") => run_model(&args[1..], false),
        Some("bench") => run_model(&args[1..], true),
        Some("print") => {
            let [_, file] = args else { return Err(format!("`kiln print` takes one FILE\n\n{USAGE}")) };
            let m = read_module(file)?;
            out(&print_module(&m));
            Ok(())
        }
        Some("opt") => opt(&args[1..]),
        Some("passes") => {
            for name in registry::pass_names() {
                if let Some(p) = registry::get_pass(&name) {
                    let i = p.info();
                    out(&format!("{name} (opt_level {}, requires [{}])\n", i.opt_level, i.required.join(", ")));
                }
            }
            Ok(())
        }
        Some("-h" | "--help" | "help") => {
            out(USAGE);
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
