//! Helpers shared by the integration tests that sweep the Relay corpus or
//! assemble PTX (each test binary uses a part of them).

// Tests read their own knobs from the environment (not the build API).
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kiln::backend::aot::ExecutorPlan;
use kiln::relay::{eval_function, infer_module, parse_module, post_order, IRModule, Type, Value};
use kiln::tir::PrimFunc;
use kiln::transform::PassContext;
use kiln::Tensor;

pub mod sweep;

/// The `compiler/` folder: `$KILN_MANIFEST_DIR` where a test binary runs on
/// another machine (scripts/gpu_session.sh), else where it was built.
pub fn manifest_dir() -> PathBuf {
    std::env::var("KILN_MANIFEST_DIR").map(PathBuf::from).unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into())
}

#[path = "../../ir/tests/support/corpus.rs"]
mod relay_corpus;

/// Every program of the Relay corpus as (name, text), sorted by name.
pub fn corpus() -> Vec<(String, String)> {
    relay_corpus::relay_programs(&manifest_dir().join("ir/tests/data/relay"))
}

/// Whether a program's values go through an approximated transcendental
/// (compared at 1e-4 instead of 1e-5) — or a layer norm, whose division by
/// the standard deviation amplifies the f32 rounding of the mean (the order
/// of its sum, per vector lane or serial, moves results by ~1e-5).
pub fn transcendental(text: &str) -> bool {
    ["exp", "tanh", "sigmoid", "erf", "softmax", "log", "power", "gelu", "layer_norm"].iter().any(|t| text.contains(t))
}

/// The operators a module's functions call.
pub fn operators(m: &IRModule, into: &mut BTreeSet<&'static str>) {
    for (_, f) in m.functions() {
        for id in post_order(&m.store, &[f]) {
            if let Some(op) = m.store.op_name(id) {
                into.insert(op);
            }
        }
    }
}

/// Registered operators missing from `covered`.
pub fn missing_operators(covered: &BTreeSet<&'static str>) -> Vec<&'static str> {
    kiln::relay::op_registry()
        .iter()
        .map(|(_, d)| d.name)
        .filter(|n| !covered.contains(n) && !NEVER_IN_A_KERNEL.contains(n))
        .collect()
}

/// Operators FuseOps removes, so that no compiled kernel holds them (the
/// text corpus still covers them).
const NEVER_IN_A_KERNEL: [&str; 1] = ["annotation.stop_fusion"];

/// `ptxas`, if this machine has one: `$KILN_PTXAS`, PATH, or the
/// `nvidia-cuda-nvcc-cu12` Python wheel.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KILN_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(p) = std::env::split_paths(&path).map(|d| d.join("ptxas")).find(|p| p.is_file()) {
        return Some(p);
    }
    let out = std::process::Command::new("python3")
        .args(["-c", "import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])"])
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    Some(Path::new(dir.trim()).join("bin/ptxas")).filter(|p| p.is_file())
}

/// Assemble `ptx` for sm_80 with `ptxas`; panics with ptxas's message on failure.
pub fn assemble(ptxas: &Path, dir: &Path, name: &str, ptx: &str) {
    let file = dir.join(format!("{name}.ptx"));
    std::fs::write(&file, ptx).expect("write");
    let out = std::process::Command::new(ptxas)
        .args(["-arch=sm_80", "-o"])
        .arg(file.with_extension("cubin"))
        .arg(&file)
        .output()
        .expect("run ptxas");
    assert!(out.status.success(), "{name}: ptxas failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// The proptest configuration shared with kiln-ir's tests.
#[path = "../../ir/tests/support/randomized.rs"]
pub mod randomized;

/// The pass context of the corpus sweeps: opt level 3, or opt level 0 with
/// SimplifyInference off, so that normalization ops stay operators and
/// nothing fuses.
pub fn sweep_context(opt_level: u32) -> PassContext {
    if opt_level == 0 {
        PassContext::new().with_opt_level(0).with_disabled(&["SimplifyInference"])
    } else {
        PassContext::new().with_opt_level(opt_level)
    }
}

pub use kiln::backend::c_library::CLibrary;

/// Kernels compiled as C (at -O1, for test speed) and loaded; panics with the C compiler's message.
pub fn c_library(kernels: &[PrimFunc]) -> CLibrary {
    CLibrary::build(kernels, 1).unwrap_or_else(|e| panic!("{e}"))
}

/// Inputs for a corpus program's `@main`: deterministic values in [0.5, 1.5).
pub fn inputs(m: &IRModule) -> Option<Vec<Tensor>> {
    let main = m.main().ok()?;
    let f = m.store.as_function(main)?;
    let mut seed = 7u64;
    f.params
        .iter()
        .map(|&p| {
            let Some(Type::Tensor(t)) = m.store.checked_type(p).cloned() else { return None };
            let vals: Vec<f64> = (0..t.numel())
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    0.5 + ((seed >> 33) % 1000) as f64 / 1000.0
                })
                .collect();
            Some(Tensor::from_f64(t.dtype, t.shape.clone(), &vals))
        })
        .collect()
}

/// The tensors of a value, in order.
/// A Relay program parsed with its types inferred, its seeded inputs
/// ([`inputs`]) and the interpreter's outputs on them, flattened ([`flat`]).
pub fn interpreted(text: &str) -> (IRModule, Vec<Tensor>, Vec<Tensor>) {
    let mut m = parse_module(text).expect("parse");
    infer_module(&mut m).expect("infer");
    let args = inputs(&m).expect("inputs");
    let values: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
    let mut want = Vec::new();
    flat(&eval_function(&m, "main", &values).expect("interpreter"), &mut want);
    (m, args, want)
}

pub fn flat(v: &Value, out: &mut Vec<Tensor>) {
    match v {
        Value::Tensor(t) => out.push(t.clone()),
        Value::Tuple(f) => f.iter().for_each(|x| flat(x, out)),
        Value::Closure(_) => {}
    }
}

/// Relative tolerance 1e-5 for f32, 1e-4 where a transcendental is approximated.
pub fn compare(name: &str, what: &str, got: &[Tensor], want: &[Tensor], transcendental: bool) {
    assert_eq!(got.len(), want.len(), "{name} {what}: output count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.shape(), g.dtype()), (w.shape(), w.dtype()), "{name} {what}");
        let tol = match w.dtype().is_float() {
            false => 0.0,
            true if transcendental => 1e-4,
            true => 1e-5,
        };
        for (a, b) in g.to_f64_vec().iter().zip(w.to_f64_vec()) {
            assert!((a - b).abs() <= tol * b.abs().max(1.0), "{name} {what}: {a} vs {b}");
        }
    }
}

/// A reference model of `../shared/models` (imported and type-checked), its
/// input and ONNX Runtime's output; None when it is absent.
pub fn reference_model(name: &str) -> Option<(IRModule, Tensor, Tensor)> {
    let models = models_dir();
    if !models.join(format!("{name}.onnx")).is_file() {
        return None;
    }
    let read = |file: String| std::fs::read(models.join(file)).expect("model file");
    let mut m = kiln::frontend::onnx::import(&read(format!("{name}.onnx")), &[]).expect("import");
    kiln::relay::infer_module(&mut m).expect("infer");
    let input = kiln::npy::read_npy(&read(format!("{name}.input.npy"))).expect("npy");
    let want = kiln::npy::read_npy(&read(format!("{name}.output.npy"))).expect("npy");
    Some((m, input, want))
}

/// Where the reference models are: `$KILN_MODELS`, else `../shared/models`.
pub fn models_dir() -> PathBuf {
    match std::env::var("KILN_MODELS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => manifest_dir().join("../../shared/models"),
    }
}

/// The largest absolute difference, and the largest magnitude of `want`.
pub fn max_abs_error(got: &Tensor, want: &Tensor) -> (f64, f64) {
    let w = want.to_f64_vec();
    let scale = w.iter().fold(0f64, |a, v| a.max(v.abs()));
    let err = got.to_f64_vec().iter().zip(&w).fold(0f64, |a, (x, y)| a.max((x - y).abs()));
    (err, scale)
}

/// The PTX of `kernels` (the corpus program or model `name`): read from
/// `$KILN_PTX_DIR/<name>.ptx` when that is set — for a GPU machine without
/// LLVM, with PTX written elsewhere by `KILN_PTX_OUT=DIR cargo test -p kiln
/// --test gpu_ptx` — else compiled here for sm_80; None when neither can be.
pub fn ptx_for(name: &str, kernels: &[PrimFunc]) -> Option<String> {
    if let Ok(dir) = std::env::var("KILN_PTX_DIR") {
        let path = Path::new(&dir).join(format!("{name}.ptx"));
        let ptx = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return Some(ptx);
    }
    #[cfg(feature = "llvm")]
    {
        let target = kiln::codegen::llvm::CudaTarget::parse("cuda -arch=sm_80").expect("target");
        Some(kiln::codegen::llvm::compile_ptx(name, kernels, &target).unwrap_or_else(|e| panic!("{name}: {e}")))
    }
    #[cfg(not(feature = "llvm"))]
    {
        let _ = kernels;
        None
    }
}

/// Keep `ptx` as `$KILN_PTX_OUT/<name>.ptx` when that is set (see [`ptx_for`]).
pub fn save_ptx(name: &str, ptx: &str) {
    if let Ok(dir) = std::env::var("KILN_PTX_OUT") {
        std::fs::create_dir_all(&dir).expect("KILN_PTX_OUT");
        std::fs::write(Path::new(&dir).join(format!("{name}.ptx")), ptx).expect("write PTX");
    }
}

/// A program of the Relay corpus, type-checked, with inputs and the
/// reference interpreter's outputs for them.
pub struct CorpusCase {
    pub name: String,
    pub module: IRModule,
    /// Whether the program goes through an approximated transcendental (tolerance 1e-4).
    pub transcendental: bool,
    pub args: Vec<Tensor>,
    pub want: Vec<Tensor>,
}

/// A corpus program type-checked and evaluated by the interpreter on
/// deterministic inputs; None where `@main` does not take tensors only.
pub fn corpus_case(name: String, text: &str) -> Option<CorpusCase> {
    let mut module = parse_module(text).expect("parse");
    infer_module(&mut module).expect("infer");
    let args = inputs(&module)?;
    let values: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
    let mut want = Vec::new();
    flat(&eval_function(&module, "main", &values).expect("interpreter"), &mut want);
    Some(CorpusCase { transcendental: transcendental(text), name, module, args, want })
}

/// The compiled program, or None for one that is not compiled ahead of time
/// (control flow, closures, several globals); any other failure panics.
pub fn ahead_of_time(
    name: &str,
    compiled: Result<(IRModule, ExecutorPlan), kiln::transform::PassError>,
) -> Option<(IRModule, ExecutorPlan)> {
    match compiled {
        Ok(r) => Some(r),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("ahead of time") || msg.contains("primitive"), "{name}: {msg}");
            None
        }
    }
}

/// `c[m, n] = Σ_k a[m, k] · b[k, n]` in f32 as a flattened, simplified kernel `name`.
pub fn matmul_kernel(name: &str, m: usize, k: usize, n: usize) -> PrimFunc {
    use kiln::te::{compute, lower, placeholder, reduce_axis, sum};
    use kiln::tir::transform::{flatten_buffers, simplify_prim_func};
    let a = placeholder("a", &[m, k], kiln::DataType::F32);
    let b = placeholder("b", &[k, n], kiln::DataType::F32);
    let kk = reduce_axis(k, "k");
    let kv = kiln::tir::Expr::var(&kk.0);
    let c = compute("c", &[m, n], |i| {
        sum(a.at(&[i[0].clone(), kv.clone()]) * b.at(&[kv.clone(), i[1].clone()]), &[kk.clone()])
    });
    simplify_prim_func(flatten_buffers(lower(name, &[a, b], &[c]).expect("lower")))
}
