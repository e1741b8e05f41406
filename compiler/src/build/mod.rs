//! The build-script API: compile a model in `build.rs`.
//!
//! ```no_run
//! // build.rs
//! # kiln::relay_model! {
//! #     fn mlp(x: Tensor<[1, 784], f32>) -> Tensor<[1, 10], f32> {
//! #         weight w1: [784, 10];
//! #         matmul(x, w1)
//! #     }
//! # }
//! fn main() {
//!     kiln::Build::new("mlp")
//!         .module(mlp())                          // from relay_model!, or .relay_file("mlp.relay")
//!         .weights("weights/mlp.safetensors")     // bound as constants before optimization
//!         .target("llvm -mcpu=znver3")            // or none (cargo's target), "c", "cuda -arch=sm_80"
//!         .opt_level(3)
//!         .compile_or_exit();                     // or .compile()? for a Result
//! }
//! ```
//!
//! `compile` optimizes the model, lowers and compiles its kernels, and writes
//! into `$OUT_DIR/kiln/`: `lib kiln_<model>.a` (kernels and weights),
//! `<model>.rs` (the typed glue, included with `kiln_runtime::include_model!`),
//! `<model>.h` (for C callers) and `<model>.json` (memory plan and kernels).
//! It prints the `cargo:` lines that link the library and rerun the build
//! script only when an input changed; when nothing changed since the last
//! build, it reuses the artifacts without compiling (the same inputs always
//! give byte-identical artifacts). `KILN_TARGET` overrides the target,
//! `KILN_DUMP_IR=dir` dumps the IR after every pass, and `KILN_VERBOSE=1`
//! makes the build say whether it compiled or reused the model, `KILN_VIZ=1`
//! draws `<model>.graph.svg` and `<model>.memory.svg` ([`crate::viz`]). When cargo
//! cross-compiles (its `TARGET` is not the machine kiln runs on), an LLVM
//! target gets cargo's triple and must name the target's CPU: `-mcpu=native`
//! is refused there instead of building host code
//! ([`crate::target::follow_cargo_target`]). Without a target, a model is
//! compiled for what cargo compiles the crate for: its triple, a portable
//! CPU and the features of `CARGO_CFG_TARGET_FEATURE`
//! ([`crate::target::cargo_default_target`]).

pub mod c_api;
mod generate;
pub mod glue;
mod kernel_cache;
mod library;
mod report;
mod weights;

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_ir::relay::{ExprId, ExprKind, ExprMutator, IRModule, Store};
use kiln_ir::Tensor;

use crate::backend::aot::{plan_executor, ExecutorPlan};
use crate::frontend::ModelFormat;
use crate::relay::transform::default_pipeline;
use crate::target::TargetDescription;
use crate::transform::instrument::DumpIr;
use crate::transform::{apply, BodyError, Pass, PassContext, PassError, PassInstrument, Sequential};
use library::{archive, object_file, prebuild_c_api, write_if_changed};
use report::report_json;

/// What went wrong in a model build; the text says what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither `.module(…)`, `.relay_file(…)` nor `.onnx(…)` gave a model.
    #[error("kiln: model `{model}`: no model given; call .module(…) or .relay_file(…)")]
    NoModel {
        /// The model's name.
        model: String,
    },
    /// The model could not be loaded, typed, lowered or compiled for the target.
    #[error("kiln: model `{model}`: {message}")]
    Model {
        /// The model's name.
        model: String,
        /// What went wrong.
        message: String,
    },
    /// A pass of the pipeline (or the lowering after it) failed.
    #[error("kiln: model `{model}`: {source}")]
    Compile {
        /// The model's name.
        model: String,
        /// The pass's error.
        source: PassError,
    },
    /// A weight file could not be read, or a weight does not fit the parameter it binds.
    #[error("kiln: model `{model}`: weights: {message}")]
    Weights {
        /// The model's name.
        model: String,
        /// What went wrong, naming the file or weight.
        message: String,
    },
    /// A file could not be read or written.
    #[error("kiln: model `{model}`: {path}: {source}")]
    Io {
        /// The model's name.
        model: String,
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No output directory: `OUT_DIR` unset and no [`Build::out_dir`].
    #[error("kiln: model `{model}`: OUT_DIR is not set; call .out_dir(…) when not running in a build script")]
    NoOutDir {
        /// The model's name.
        model: String,
    },
}

#[derive(Clone, Debug)]
enum ModelSource {
    Module(Box<IRModule>),
    RelayFile(PathBuf),
    Onnx(PathBuf),
}

#[derive(Clone, Debug)]
enum WeightSource {
    File(PathBuf),
    Tensor(String, Tensor),
}

/// A model to compile in `build.rs` (see the module docs).
///
/// Outside a build script, give the output directory:
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use kiln::{Build, Tensor};
///
/// let dir = tempfile::tempdir()?;
/// let model = kiln::relay::parse_module(
///     "def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(4, 4), float32]) { nn.relu(nn.matmul(%x, %w)) }",
/// )?;
/// let artifacts = Build::new("tiny")
///     .module(model)
///     .weight("w", Tensor::from_f32(vec![4, 4], &[0.5; 16])) // bound as a constant
///     .target("c")                                           // portable C; or "llvm -mcpu=…", none: cargo's
///     .out_dir(dir.path())
///     .cargo_metadata(false)                                 // not in a build script: print no cargo: lines
///     .compile()?;
/// assert!(dir.path().join("kiln/libkiln_tiny.a").exists());
/// assert!(artifacts.header.contains("int kiln_tiny_run(const float* in0, float* out0, void* arena);"));
/// assert!(artifacts.glue.contains("pub mod tiny"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Build {
    name: String,
    model: Option<ModelSource>,
    weights: Vec<WeightSource>,
    target: String,
    opt_level: u32,
    disabled: Vec<String>,
    out_dir: Option<PathBuf>,
    cargo_metadata: bool,
    runtime_std: bool,
    input_shapes: Vec<(String, Vec<usize>)>,
    bound_inputs: Vec<(String, Tensor)>,
    /// The user's passes, run in order on the typed module before the default pipeline.
    passes: Vec<Arc<dyn Pass>>,
    /// Draw the kernel graph and the memory plan (`KILN_VIZ=1`).
    viz: bool,
    /// Schedule records from `kiln tune` ([`Build::tuning_log`]).
    tuning_log: Option<PathBuf>,
    /// The arithmetic of the products ([`Build::precision`]).
    precision: Precision,
}

/// The arithmetic a build computes its convolutions and matrix products with
/// constant weights in ([`Build::precision`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// float32 everywhere (the default).
    #[default]
    Fp32,
    /// Opt-in: the convolutions and matrix products with constant weights
    /// that fit AMX tiles as bfloat16 products summed in float32 (weights
    /// rounded to bfloat16 at build time, the data as the kernel reads
    /// them); everything else float32. Needs an `llvm` target with AMX-BF16
    /// (`amx-bf16`, `amx-tile`: Sapphire Rapids and later).
    Bf16,
}

impl Precision {
    /// `fp32` or `bf16` (what `--precision` takes).
    pub fn parse(name: &str) -> Result<Precision, String> {
        match name {
            "fp32" | "f32" | "float32" => Ok(Precision::Fp32),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            other => Err(format!("unknown precision `{other}` (fp32 or bf16)")),
        }
    }

    /// The pass configuration of this precision on `target`: bf16 sets
    /// `relay.Bf16Precision.enable`, and is refused (with the reason) where the
    /// target lacks AMX-BF16 — its bf16 products would run slower than float32.
    pub fn configure(self, target: &str, ctx: &mut crate::transform::PassContext) -> Result<(), String> {
        if self == Precision::Fp32 {
            return Ok(());
        }
        let description = TargetDescription::resolve(target);
        let has = |f: &str| description.features.iter().any(|x| x == f);
        if target.split_whitespace().next() != Some("llvm") || !has("amx-bf16") || !has("amx-tile") {
            return Err(format!(
                "the bf16 precision needs an LLVM target with AMX-BF16 (amx-bf16, amx-tile), and `{}` has none \
                 (Sapphire Rapids and later have it: -mcpu=sapphirerapids, or -mattr=+amx-tile,+amx-bf16)",
                description.target
            ));
        }
        ctx.set_config("relay.Bf16Precision.enable", crate::transform::ConfigValue::Bool(true))
            .map_err(|e| e.to_string())
    }
}

impl std::fmt::Debug for Build {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let passes: Vec<&str> = self.passes.iter().map(|p| p.info().name.as_str()).collect();
        f.debug_struct("Build")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("target", &self.target)
            .field("opt_level", &self.opt_level)
            .field("disabled", &self.disabled)
            .field("passes", &passes)
            .finish_non_exhaustive()
    }
}

/// Everything a build produces, in memory ([`Artifacts::write_to`] writes it).
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// The model's name (the generated module's and the symbols' prefix).
    pub name: String,
    /// The weights and kernels as object files (LLVM targets): the weights'
    /// first (unless [`Artifacts::weights_in_library`]),
    /// then the kernels in up to `codegen::llvm::OBJECT_PARTS`,
    /// compiled in parallel — or, by [`Build::compile`], taken from the
    /// kernel cache in its output directory where the kernels are unchanged.
    pub objects: Vec<Vec<u8>>,
    /// Whether the weights' object is not in `objects` (then the kernels'
    /// only) but streamed by [`Build::compile`] straight into the static
    /// library, as its last member: where kiln writes the library itself
    /// (GNU archives) and the object (ELF). Never held in memory nor written
    /// to a file of its own (ResNet-18's is 97 MB).
    pub weights_in_library: bool,
    /// The kernels and weights as C source (the `c` target).
    pub c_source: Option<String>,
    /// The kernels as PTX (the `cuda` target).
    pub ptx: Option<String>,
    /// The weights laid out for device memory, `<model>.weights.bin` (the `cuda` target).
    pub device_weights: Option<Vec<u8>>,
    /// `<model>.rs`.
    pub glue: String,
    /// `<model>.h`: the C API's declarations (empty for `cuda`).
    pub header: String,
    /// `<model>_api.c`: the C API (run, packed call, describe), compiled
    /// into the static library with the kernels (empty for `cuda`).
    pub c_api: String,
    /// `<model>.json`: memory plan and kernels (deterministic).
    pub report: String,
    /// `<model>.graph.svg` and `<model>.memory.svg`: the kernel graph and the
    /// memory plan ([`crate::viz`]), when `KILN_VIZ=1` or [`Build::viz`] asked for them.
    pub pictures: Option<(String, String)>,
    /// The pass timing report, written to `<model>.timings.txt` (not deterministic,
    /// so kept out of the artifacts that must be byte-identical).
    pub timings: String,
    /// The executor plan: kernel calls, arena layout, inputs and outputs.
    /// Empty when the artifacts were reused; when a rebuild took its kernels
    /// from the kernel cache without the TIR passes (the timings say so), its
    /// kernels are as lowered, before scheduling.
    pub plan: ExecutorPlan,
    /// Whether `compile` reused the artifacts of an identical earlier build.
    pub reused: bool,
}

/// Read an environment variable and tell cargo to rerun when it changes.
fn env_var(name: &str, emit: bool) -> Option<String> {
    if emit {
        println!("cargo:rerun-if-env-changed={name}");
    }
    #[allow(clippy::disallowed_methods)]
    std::env::var(name).ok()
}

struct BindWeights<'a> {
    constants: &'a BTreeMap<ExprId, ExprId>,
}

impl ExprMutator for BindWeights<'_> {
    fn rewrite_var(&mut self, _: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        self.constants.get(&pre).copied().unwrap_or(post)
    }
}

impl Build {
    /// A build of the model that the generated module `name` will hold.
    pub fn new(name: &str) -> Build {
        Build {
            name: name.to_string(),
            model: None,
            weights: Vec::new(),
            // Empty: follow cargo ([`crate::target::cargo_default_target`]).
            target: String::new(),
            opt_level: 3,
            disabled: Vec::new(),
            out_dir: None,
            cargo_metadata: true,
            runtime_std: true,
            input_shapes: Vec::new(),
            bound_inputs: Vec::new(),
            passes: Vec::new(),
            viz: false,
            tuning_log: None,
            precision: Precision::Fp32,
        }
    }

    /// The arithmetic of the convolutions and constant-weight products
    /// (default [`Precision::Fp32`]); part of the build's cache key. [`Precision::Bf16`] on a target without
    /// AMX-BF16 is an error when the build compiles.
    pub fn precision(&mut self, precision: Precision) -> &mut Self {
        self.precision = precision;
        self
    }

    /// Also draw the kernel graph and the memory plan as `<model>.graph.svg`
    /// and `<model>.memory.svg` next to `<model>.json` (what `KILN_VIZ=1` does).
    pub fn viz(&mut self, on: bool) -> &mut Self {
        self.viz = on;
        self
    }

    /// Run `pass` (a `#[function_pass]`/`#[module_pass]`, a [`crate::transform::Sequential`], …)
    /// on the typed module, weights bound, before the default pipeline — as TVM users
    /// run their own `Sequential` before `relay.build`. Passes run in the order added,
    /// under the build's `PassContext` (its opt level decides whether each runs, and
    /// [`Build::disable_pass`] applies to them too); the module is type-checked after them.
    pub fn pass(&mut self, pass: Arc<dyn Pass>) -> &mut Self {
        self.passes.push(pass);
        self
    }

    /// The model, from an ONNX file (initializers become constants).
    pub fn onnx(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.model = Some(ModelSource::Onnx(path.as_ref().to_path_buf()));
        self
    }

    /// Fix the shape of a model input whose dimensions are dynamic in the file.
    pub fn input_shape(&mut self, name: &str, shape: &[usize]) -> &mut Self {
        self.input_shapes.push((name.to_string(), shape.to_vec()));
        self
    }

    /// Bind an ONNX model input to a value known at build time: it becomes a
    /// constant of the compiled model (no longer an input), so operators that
    /// need it constant — shapes, axes, scales, split sizes — accept it.
    pub fn bind_input(&mut self, name: &str, value: Tensor) -> &mut Self {
        self.bound_inputs.push((name.to_string(), value));
        self
    }

    /// Whether the glue may use `kiln-runtime`'s `std` feature (default true): it
    /// then also defines `OwnedModel` (own arena, thread pool). Set false for `no_std` crates.
    pub fn runtime_std(&mut self, on: bool) -> &mut Self {
        self.runtime_std = on;
        self
    }

    /// The model, e.g. from a `relay_model!` function.
    pub fn module(&mut self, m: IRModule) -> &mut Self {
        self.model = Some(ModelSource::Module(Box::new(m)));
        self
    }

    /// The model, from a Relay text file.
    pub fn relay_file(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.model = Some(ModelSource::RelayFile(path.as_ref().to_path_buf()));
        self
    }

    /// Weights from a `.safetensors` file (each tensor binds the `@main`
    /// parameter of its name) or a `.npy` file (binding the parameter named like the file).
    pub fn weights(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.weights.push(WeightSource::File(path.as_ref().to_path_buf()));
        self
    }

    /// One weight, in memory.
    pub fn weight(&mut self, name: &str, value: Tensor) -> &mut Self {
        self.weights.push(WeightSource::Tensor(name.to_string(), value));
        self
    }

    /// `llvm -mcpu=<cpu> [-mattr=…]`, `llvm -mcpu=native`, `c`, or
    /// `cuda -arch=sm_NN`. Without one, the model is compiled for what cargo
    /// compiles the crate for: its target triple, a portable CPU of that
    /// architecture and the features cargo enables (`-C target-cpu=native`
    /// or `-C target-feature=+avx2,+fma` in `RUSTFLAGS` enable more) — so
    /// the binary runs wherever the crate's own code does.
    /// `llvm -mcpu=native` is opt-in: it compiles for this machine's CPU, and
    /// the binary then refuses to start on a CPU without its features.
    pub fn target(&mut self, target: &str) -> &mut Self {
        self.target = target.to_string();
        self
    }

    /// Apply the schedule records of a tuning log written by `kiln tune`
    /// (`kiln-tuning.json`, kept in the crate): each kernel with a record
    /// for the target's CPU and features is scheduled as the record says;
    /// every other kernel, and every record that no longer fits its kernel,
    /// gets the rule's schedule. Records for other CPUs are left out (said
    /// under `KILN_VERBOSE`); a log that cannot be read as JSON is an error.
    /// The log is part of the build's cache key and of `rerun-if-changed`.
    pub fn tuning_log(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.tuning_log = Some(path.as_ref().to_path_buf());
        self
    }

    /// The schedule knobs by kernel key that the tuning log gives this
    /// build's target (none without a log), and the log's warnings.
    pub fn tuning_knobs(&self) -> Result<(BTreeMap<String, crate::schedule::Knobs>, Vec<String>), Error> {
        match &self.tuning_log {
            None => Ok((BTreeMap::new(), Vec::new())),
            Some(path) => crate::tune::TuningLog::knobs_from_file(path, &TargetDescription::resolve(&self.target))
                .map_err(|e| self.model_err(e.to_string())),
        }
    }

    /// The opt level of the default pipeline (default 3).
    pub fn opt_level(&mut self, level: u32) -> &mut Self {
        self.opt_level = level;
        self
    }

    /// Never run pass `name`.
    pub fn disable_pass(&mut self, name: &str) -> &mut Self {
        self.disabled.push(name.to_string());
        self
    }

    /// Where to write (default: `$OUT_DIR`); artifacts go in its `kiln/` folder.
    pub fn out_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Whether to print `cargo:` directives (default true).
    pub fn cargo_metadata(&mut self, on: bool) -> &mut Self {
        self.cargo_metadata = on;
        self
    }

    fn model_err(&self, message: impl Into<String>) -> Error {
        Error::Model { model: self.name.clone(), message: message.into() }
    }

    fn compile_err(&self, source: PassError) -> Error {
        Error::Compile { model: self.name.clone(), source }
    }

    fn load_module(&self) -> Result<IRModule, Error> {
        match &self.model {
            None => Err(Error::NoModel { model: self.name.clone() }),
            Some(ModelSource::Module(m)) => Ok((**m).clone()),
            Some(ModelSource::RelayFile(p)) => self.load_file(p, ModelFormat::RelayText, &[], &[]),
            Some(ModelSource::Onnx(p)) => self.load_file(p, ModelFormat::Onnx, &self.input_shapes, &self.bound_inputs),
        }
    }

    fn load_file(
        &self,
        path: &Path,
        format: ModelFormat,
        shapes: &[(String, Vec<usize>)],
        bound: &[(String, Tensor)],
    ) -> Result<IRModule, Error> {
        crate::frontend::load_model(path, format, shapes, bound).map_err(|e| match e {
            crate::frontend::LoadError::Io { path, source } => Error::Io { model: self.name.clone(), path, source },
            e => self.model_err(e.to_string()),
        })
    }

    fn load_weights(&self) -> Result<Vec<(String, Tensor)>, Error> {
        let mut out = Vec::new();
        for w in &self.weights {
            match w {
                WeightSource::Tensor(n, t) => out.push((n.clone(), t.clone())),
                WeightSource::File(p) => {
                    let bytes = std::fs::read(p).map_err(|e| Error::Io {
                        model: self.name.clone(),
                        path: p.display().to_string(),
                        source: e,
                    })?;
                    let tensors = tensors_of_weight_file(p, &bytes).map_err(|m| Error::Weights {
                        model: self.name.clone(),
                        message: format!("{}: {m}", p.display()),
                    })?;
                    out.extend(tensors);
                }
            }
        }
        Ok(out)
    }

    /// Replace the `@main` parameters named by weights with constants.
    fn bind_weights(&self, mut m: IRModule, weights: &[(String, Tensor)]) -> Result<IRModule, Error> {
        let werr = |message: String| Error::Weights { model: self.name.clone(), message };
        let main = m.main().map_err(|e| self.model_err(e.to_string()))?;
        let f = m.store.as_function(main).cloned().ok_or_else(|| self.model_err("@main is not a function"))?;
        let mut constants = BTreeMap::new();
        for (name, t) in weights {
            let param =
                f.params.iter().copied().find(|&p| m.store.as_var(p).is_some_and(|v| &v.name == name)).ok_or_else(
                    || {
                        let names: Vec<String> =
                            f.params.iter().filter_map(|&p| m.store.as_var(p).map(|v| v.name.clone())).collect();
                        werr(format!("`{name}` is not a parameter of @main (parameters: {})", names.join(", ")))
                    },
                )?;
            if let Some(ty) = m.store.as_var(param).and_then(|v| v.ty) {
                let want = m.store.ty(ty).clone();
                let got = kiln_ir::relay::Type::tensor(t.shape().to_vec(), t.dtype());
                if want != got {
                    return Err(werr(format!("`{name}` is {got} in the weights, but the model declares {want}")));
                }
            }
            let c = m.store.constant(t.clone());
            constants.insert(param, c);
        }
        let body = kiln_ir::relay::mutate(&mut m.store, f.body, &mut BindWeights { constants: &constants });
        let params: Vec<ExprId> = f.params.iter().copied().filter(|p| !constants.contains_key(p)).collect();
        let new = m.store.add(
            ExprKind::Function(kiln_ir::relay::Function {
                type_params: f.type_params.clone(),
                params,
                body,
                ret_ty: f.ret_ty,
                attrs: f.attrs.clone(),
            }),
            m.store.span(main).clone(),
        );
        m.update_function("main", new).map_err(|e| self.model_err(e.to_string()))?;
        m.compact();
        Ok(m)
    }

    /// Compile in memory: nothing is written, nothing printed.
    pub fn generate(&self) -> Result<Artifacts, Error> {
        let (knobs, _) = self.tuning_knobs()?;
        self.generate_with(self.prepare()?, None, knobs, None)
    }

    /// The model with its weights bound as constants, type-checked: what gets optimized.
    pub fn prepare(&self) -> Result<IRModule, Error> {
        self.prepared(self.load_module()?, &self.load_weights()?)
    }

    /// [`Build::prepare`] from a model and weights already read.
    fn prepared(&self, m: IRModule, weights: &[(String, Tensor)]) -> Result<IRModule, Error> {
        let mut m = self.bind_weights(m, weights)?;
        kiln_ir::relay::infer_module(&mut m).map_err(|e| self.model_err(e.to_string()))?;
        Ok(m)
    }

    /// The cache key of this build of model `m` with `weights` (as read, before binding).
    fn cache_key(
        &self,
        m: &IRModule,
        weights: &[(String, Tensor)],
        knobs: &BTreeMap<String, crate::schedule::Knobs>,
    ) -> String {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        // The tuning records that apply (not the log's bytes: records for other CPUs change nothing here).
        knobs.hash(&mut h);
        // The module's structure and constants (their bytes, not their text:
        // printing a ResNet's weights as hex took a second), and the names
        // that reach the generated API.
        for (name, f) in m.functions() {
            name.hash(&mut h);
            kiln_ir::relay::structural_hash(&m.store, f).hash(&mut h);
            for id in kiln_ir::relay::post_order(&m.store, &[f]) {
                if let kiln_ir::relay::ExprKind::Var(v) = m.store.kind(id) {
                    v.name.hash(&mut h);
                }
            }
        }
        for (n, t) in weights {
            n.hash(&mut h);
            t.hash(&mut h);
        }
        (&self.target, self.opt_level, &self.disabled, &self.name, &self.input_shapes, &self.bound_inputs).hash(&mut h);
        self.precision.hash(&mut h);
        // A pass's code is the build script's (its binary is hashed below); its name and order are here.
        for p in &self.passes {
            p.info().name.hash(&mut h);
        }
        hash_code_generator(&TargetDescription::resolve(&self.target), &mut h);
        // Touching an input file rebuilds, as cargo users expect.
        for w in &self.weights {
            if let WeightSource::File(p) = w {
                std::fs::metadata(p).and_then(|m| m.modified()).ok().hash(&mut h);
            }
        }
        format!("{:016x}", h.finish())
    }

    /// Generate, write into `$OUT_DIR/kiln/` (reusing an identical earlier
    /// build), build the static library and print the cargo directives.
    pub fn compile(&self) -> Result<Artifacts, Error> {
        let out_dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => env_var("OUT_DIR", false)
                .map(PathBuf::from)
                .ok_or_else(|| Error::NoOutDir { model: self.name.clone() })?,
        };
        self.compile_in(&out_dir.join("kiln"))
    }

    /// [`Build::compile`] into `dir` itself (what `kiln build --emit lib -o DIR` writes).
    pub fn compile_in(&self, dir: &Path) -> Result<Artifacts, Error> {
        // The name prefixes C symbols and names files and the glue's module.
        let mut chars = self.name.chars();
        if !chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(self.model_err(
                "a model name must be a C identifier (ASCII letters, digits and `_`, not starting with a digit): \
                 it prefixes the kernels' symbols and names the generated files",
            ));
        }
        let emit = self.cargo_metadata;
        let dir = dir.to_path_buf();
        let mut build = self.clone();
        if let Some(t) = env_var("KILN_TARGET", emit) {
            build.target = t;
        }
        if env_var("KILN_VIZ", emit).is_some_and(|v| v != "0") {
            build.viz = true;
        }
        // In a build script, cargo's TARGET is the triple the crate is built
        // for: a cross build compiles the model for it, never for this machine.
        #[allow(clippy::disallowed_methods)]
        let cargo_target = std::env::var("TARGET").ok();
        let host = crate::target::host_triple();
        if build.target.is_empty() {
            let features = env_var("CARGO_CFG_TARGET_FEATURE", emit).unwrap_or_default();
            build.target =
                crate::target::cargo_default_target(cargo_target.as_deref().unwrap_or(host), host, &features);
        } else if let Some(cargo_target) = cargo_target {
            build.target = crate::target::follow_cargo_target(&build.target, &cargo_target, host)
                .map_err(|m| self.model_err(m.to_string()))?;
        }
        let dump = env_var("KILN_DUMP_IR", emit).map(PathBuf::from);
        if emit {
            for w in &self.weights {
                if let WeightSource::File(p) = w {
                    println!("cargo:rerun-if-changed={}", p.display());
                }
            }
            if let Some(ModelSource::RelayFile(p) | ModelSource::Onnx(p)) = &self.model {
                println!("cargo:rerun-if-changed={}", p.display());
            }
            if let Some(p) = &self.tuning_log {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
        let io = |path: &Path, e: std::io::Error| Error::Io {
            model: self.name.clone(),
            path: path.display().to_string(),
            source: e,
        };
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        // The model and weights are read once: for the key, and to compile them when it changed.
        let (model, weights) = (build.load_module()?, build.load_weights()?);
        let (knobs, warnings) = build.tuning_knobs()?;
        if emit && env_var("KILN_VERBOSE", true).is_some() {
            for w in &warnings {
                println!("cargo:warning=kiln: model `{}`: {w}", self.name);
            }
        }
        let key = build.cache_key(&model, &weights, &knobs);
        let key_file = dir.join(format!("{}.key", self.name));
        let lib_name = format!("kiln_{}", self.name);
        let lib_file = dir.join(format!("lib{lib_name}.a"));
        let glue_file = dir.join(format!("{}.rs", self.name));
        let cuda = is_cuda_target(&build.target);
        let fresh = std::fs::read_to_string(&key_file).ok().as_deref() == Some(key.as_str())
            && (cuda || lib_file.exists())
            && glue_file.exists()
            && dump.is_none()
            && (!build.viz || dir.join(format!("{}.graph.svg", self.name)).exists());
        let mut artifacts = if fresh {
            // Reuse: regenerate nothing, but report what is there.
            let plan = ExecutorPlan::default();
            let read = |p: PathBuf| std::fs::read_to_string(&p).map_err(|e| io(&p, e));
            Artifacts {
                name: self.name.clone(),
                objects: Vec::new(),
                weights_in_library: false,
                c_source: None,
                ptx: None,
                device_weights: None,
                glue: read(glue_file.clone())?,
                header: read(dir.join(format!("{}.h", self.name)))?,
                c_api: read(dir.join(format!("{}_api.c", self.name))).unwrap_or_default(),
                pictures: None,
                report: read(dir.join(format!("{}.json", self.name)))?,
                timings: read(dir.join(format!("{}.timings.txt", self.name))).unwrap_or_default(),
                plan,
                reused: true,
            }
        } else {
            let a = build.generate_with(build.prepared(model, &weights)?, dump, knobs, Some(&dir))?;
            // The library is written from the objects in memory where kiln
            // writes it itself: no loose copies of them (75 MB of ResNet-18's
            // weights written twice), and none left from an older build.
            let loose_objects = cuda || !library::archives_from_memory(&build.target);
            // The key goes first and comes back last: files written in place
            // (the library) are never taken for a finished build's.
            let _ = std::fs::remove_file(&key_file);
            a.write_files(&dir, loose_objects)?;
            if !loose_objects {
                for k in 0.. {
                    if std::fs::remove_file(dir.join(object_file(&self.name, k))).is_err() {
                        break;
                    }
                }
                // An older kiln's copy of the weights' object, now only in the library.
                let _ = std::fs::remove_file(dir.join(format!("{}.weights.o", self.name)));
            }
            if !cuda {
                archive(&a, &dir, &lib_name, &build.target).map_err(|m| self.model_err(m))?;
            }
            write_if_changed(&key_file, key.as_bytes()).map_err(|e| io(&key_file, e))?;
            a
        };
        if emit && !cuda {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static={lib_name}");
        }
        if emit && env_var("KILN_VERBOSE", true).is_some() {
            println!(
                "cargo:warning=kiln: model `{}` {}",
                self.name,
                if fresh { "unchanged, artifacts reused" } else { "compiled" }
            );
        }
        artifacts.reused = fresh;
        Ok(artifacts)
    }

    /// [`Build::compile`], printing the error and exiting the build script on failure.
    pub fn compile_or_exit(&self) -> Artifacts {
        match self.compile() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1)
            }
        }
    }
}

impl Artifacts {
    /// Write `<model>.rs`, `.h`, `.json` and the object (`.o`) or C source (`.c`) into `dir`.
    pub fn write_to(&self, dir: &Path) -> Result<(), Error> {
        self.write_files(dir, true)
    }

    /// [`Artifacts::write_to`], the object files only when `objects`.
    fn write_files(&self, dir: &Path, objects: bool) -> Result<(), Error> {
        let io = |path: &Path, e: std::io::Error| Error::Io {
            model: self.name.clone(),
            path: path.display().to_string(),
            source: e,
        };
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let mut files: Vec<(PathBuf, &[u8])> = vec![
            (dir.join(format!("{}.rs", self.name)), self.glue.as_bytes()),
            (dir.join(format!("{}.h", self.name)), self.header.as_bytes()),
            (dir.join(format!("{}.json", self.name)), self.report.as_bytes()),
        ];
        for (k, o) in self.objects.iter().enumerate().filter(|_| objects) {
            files.push((dir.join(object_file(&self.name, k)), o));
        }
        if let Some(c) = &self.c_source {
            files.push((dir.join(format!("{}.c", self.name)), c.as_bytes()));
        }
        if !self.c_api.is_empty() {
            files.push((dir.join(format!("{}_api.c", self.name)), self.c_api.as_bytes()));
        }
        if let Some(p) = &self.ptx {
            files.push((dir.join(format!("{}.ptx", self.name)), p.as_bytes()));
        }
        if let Some(w) = &self.device_weights {
            files.push((dir.join(format!("{}.weights.bin", self.name)), w));
        }
        if let Some((graph, memory)) = &self.pictures {
            files.push((dir.join(format!("{}.graph.svg", self.name)), graph.as_bytes()));
            files.push((dir.join(format!("{}.memory.svg", self.name)), memory.as_bytes()));
        }
        files.push((dir.join(format!("{}.timings.txt", self.name)), self.timings.as_bytes()));
        for (p, bytes) in files {
            write_if_changed(&p, bytes).map_err(|e| io(&p, e))?;
        }
        Ok(())
    }
}

/// Hash what turns the same kernels into other code: the target (`native`
/// is this machine, so an artifact built on another CPU is not reused),
/// LLVM's version, and kiln itself — its version and binary (a relinked
/// build script never reuses old artifacts).
fn hash_code_generator(target: &TargetDescription, h: &mut impl Hasher) {
    target.hash(h);
    crate::target::LLVM_VERSION.hash(h);
    hash_kiln_binary(h);
}

/// kiln's version and the running binary (a rebuilt kiln, or a build script
/// linking another, may generate other code under the same version).
fn hash_kiln_binary(h: &mut impl Hasher) {
    env!("CARGO_PKG_VERSION").hash(h);
    if let Ok(exe) = std::env::current_exe() {
        std::fs::metadata(&exe).map(|m| (m.len(), m.modified().ok())).ok().hash(h);
    }
}

/// Whether a target string names an NVIDIA GPU (`cuda [-arch=sm_NN]`).
pub fn is_cuda_target(target: &str) -> bool {
    crate::target::is_cuda(target)
}

/// The compiler's middle: the default pipeline under `ctx`, then the
/// executor plan with its kernels flattened, simplified and scheduled.
/// (What [`Build`] and `kiln build`/`kiln run` share.)
pub fn optimize_and_plan(m: IRModule, ctx: Arc<PassContext>) -> Result<(IRModule, ExecutorPlan), PassError> {
    let pipelines = Pipelines::cpu()?;
    ctx.scope(|ctx| optimize_and_plan_in(m, ctx, &pipelines))
}

/// [`optimize_and_plan`] for NVIDIA GPUs: the GPU's Relay pipeline
/// ([`crate::relay::transform::gpu_pipeline`]), then kernels out of the GPU
/// TIR pipeline, bound to blocks and threads, with their launch shapes in
/// the attributes `gpu.grid` and `gpu.block`.
pub fn optimize_and_plan_gpu(m: IRModule, ctx: Arc<PassContext>) -> Result<(IRModule, ExecutorPlan), PassError> {
    let pipelines = Pipelines::gpu()?;
    ctx.scope(|ctx| optimize_and_plan_in(m, ctx, &pipelines))
}

/// The compiler's middle for one kind of target: the Relay pipeline up to
/// fusion, and the TIR pipeline every kernel goes through.
struct Pipelines {
    relay: Sequential,
    tir: Sequential,
}

impl Pipelines {
    fn cpu() -> Result<Pipelines, PassError> {
        Ok(Pipelines { relay: default_pipeline()?, tir: crate::schedule::passes::tir_pipeline()? })
    }

    fn gpu() -> Result<Pipelines, PassError> {
        Ok(Pipelines {
            relay: crate::relay::transform::gpu_pipeline()?,
            tir: crate::schedule::passes::gpu_tir_pipeline()?,
        })
    }
}

/// [`optimize_and_plan`]'s work under a context already entered.
fn optimize_and_plan_in(
    m: IRModule,
    ctx: &PassContext,
    pipelines: &Pipelines,
) -> Result<(IRModule, ExecutorPlan), PassError> {
    let fused = apply(&pipelines.relay, m, ctx)?;
    let plan = lower_and_schedule(&fused, ctx, &pipelines.tir)?;
    Ok((fused, plan))
}

/// The executor plan of an optimized (fused) module, its kernels through the
/// TIR pipeline `tir`, under a context already entered. (`kiln tune` lowers
/// one optimized module many times, with other schedule knobs each time.)
pub fn lower_and_schedule(
    fused: &IRModule,
    ctx: &PassContext,
    tir: &crate::transform::Sequential,
) -> Result<ExecutorPlan, PassError> {
    let mut plan = plan_executor(fused).map_err(|e| PassError::Failed {
        pass: "LowerTE".into(),
        context: String::new(),
        error: BodyError::new(e),
    })?;
    // The kernels travel in the module through the TIR passes, so instruments see them.
    let mut lowered = fused.clone();
    for k in std::mem::take(&mut plan.kernels) {
        if cfg!(debug_assertions) {
            kiln_ir::tir::verify_prim_func(&k).map_err(|e| PassError::Failed {
                pass: "LowerTE".into(),
                context: String::new(),
                error: BodyError::new(e),
            })?;
        }
        lowered.add_prim_func(k);
    }
    let mut lowered = apply(tir, lowered, ctx)?;
    plan.kernels = lowered.take_prim_funcs();
    Ok(plan)
}

/// Every tensor of a `.npy` file (named by the file's stem) or `.safetensors` file.
pub fn read_weight_file(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>, Error> {
    let p = path.as_ref();
    let model = String::from("(weights)");
    let bytes =
        std::fs::read(p).map_err(|e| Error::Io { model: model.clone(), path: p.display().to_string(), source: e })?;
    tensors_of_weight_file(p, &bytes).map_err(|m| Error::Weights { model, message: format!("{}: {m}", p.display()) })
}

/// The tensors of weight file `path`'s `bytes`: a `.npy` file is one tensor,
/// named by the file's stem; any other is read as `.safetensors`.
fn tensors_of_weight_file(path: &Path, bytes: &[u8]) -> Result<Vec<(String, Tensor)>, String> {
    if path.extension().is_some_and(|e| e == "npy") {
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        return kiln_ir::npy::read_npy(bytes).map(|t| vec![(name, t)]).map_err(|e| e.to_string());
    }
    weights::read_safetensors(bytes)
}

/// Every tensor of a `.safetensors` file, by name (what `.weights(…)` binds).
pub fn read_safetensors(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>, Error> {
    let p = path.as_ref();
    let model = String::from("(weights)");
    let bytes =
        std::fs::read(p).map_err(|e| Error::Io { model: model.clone(), path: p.display().to_string(), source: e })?;
    weights::read_safetensors(&bytes).map_err(|m| Error::Weights { model, message: format!("{}: {m}", p.display()) })
}
