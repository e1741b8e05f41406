//! What the C API tests share: the small test model, a model's library
//! loaded as a shared object, DLPack structs as Rust sees them, the models
//! the C programs run, and finding the tools.

use std::path::{Path, PathBuf};
use std::process::Command;

pub use kiln::build::Artifacts;
use kiln::relay::{eval_function, parse_module, IRModule, Value};
pub use kiln::Build;
use kiln::{DataType, Tensor};

use super::common;
use super::common::sweep::Failed;

/// A model with two inputs of two dtypes, a weight, two outputs, an
/// intermediate in the arena and a run-time index check:
/// `(dense(relu(x + x), w), w[ids])`.
pub const SMALL: &str = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %ids: Tensor[(2), int64], %w: Tensor[(4, 3), float32]) {
  (nn.dense(nn.relu(add(%x, %x)), %w), take(%w, check_index(%ids, bounds=[4]), axis=0))
}
"#;

pub fn small_module() -> Result<IRModule, Failed> {
    Ok(parse_module(SMALL).map_err(|e| e.to_string())?)
}

/// The small model's weight `w`: row r is (r, r + 0.5, r + 0.25).
pub fn small_table() -> Tensor {
    let v: Vec<f32> = (0..4).flat_map(|r| [r as f32, r as f32 + 0.5, r as f32 + 0.25]).collect();
    Tensor::from_f32(vec![4, 3], &v)
}

/// The small model built into `dir/kiln` for `target` ("" for cargo's default).
pub fn build_small(dir: &Path, target: &str) -> Result<Artifacts, Failed> {
    build_small_with(dir, target, small_table())
}

/// [`build_small`] with another weight `w` (4 × 3).
pub fn build_small_with(dir: &Path, target: &str, table: Tensor) -> Result<Artifacts, Failed> {
    let mut b = Build::new("small");
    b.module(small_module()?).weight("w", table).out_dir(dir).cargo_metadata(false);
    if !target.is_empty() {
        b.target(target);
    }
    Ok(b.compile()?)
}

/// The interpreter's outputs of the small model.
pub fn small_reference(x: &[f32], ids: &[i64]) -> [Vec<f32>; 2] {
    small_reference_with(x, ids, small_table())
}

/// [`small_reference`] with another weight `w`.
pub fn small_reference_with(x: &[f32], ids: &[i64], table: Tensor) -> [Vec<f32>; 2] {
    let mut m = small_module().expect("parses");
    kiln::relay::infer_module(&mut m).expect("types");
    let args = [
        Value::Tensor(Tensor::from_f32(vec![2, 3], x)),
        Value::Tensor(Tensor::from_i64(vec![2], ids)),
        Value::Tensor(table),
    ];
    let mut out = Vec::new();
    common::flat(&eval_function(&m, "main", &args).expect("interpreter"), &mut out);
    [out[0].to_f32_vec(), out[1].to_f32_vec()]
}

/// `DLDevice`, `DLDataType` and `DLTensor` of `dlpack.h` (v0.8 and later).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DlDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DlDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DlTensor {
    pub data: *mut u8,
    pub device: DlDevice,
    pub ndim: i32,
    pub dtype: DlDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// `kiln_tensor_info`.
#[repr(C)]
pub struct TensorInfo {
    name: *const std::ffi::c_char,
    ndim: i32,
    shape: *const i64,
    pub dtype: DlDataType,
}

impl TensorInfo {
    pub fn name(&self) -> String {
        // SAFETY: the library's static, NUL-terminated name.
        unsafe { std::ffi::CStr::from_ptr(self.name) }.to_string_lossy().into_owned()
    }

    pub fn shape(&self) -> Vec<i64> {
        if self.ndim == 0 {
            return Vec::new();
        }
        // SAFETY: `ndim` entries, static in the library.
        unsafe { std::slice::from_raw_parts(self.shape, self.ndim as usize) }.to_vec()
    }
}

/// `kiln_model_info`.
#[repr(C)]
pub struct ModelInfo {
    name: *const std::ffi::c_char,
    target: *const std::ffi::c_char,
    pub num_inputs: i32,
    inputs: *const TensorInfo,
    pub num_outputs: i32,
    outputs: *const TensorInfo,
    pub arena_bytes: u64,
    pub arena_align: u64,
}

impl ModelInfo {
    pub fn input(&self, i: usize) -> &TensorInfo {
        assert!(i < self.num_inputs as usize);
        // SAFETY: in bounds of the library's static table.
        unsafe { &*self.inputs.add(i) }
    }

    pub fn output(&self, i: usize) -> &TensorInfo {
        assert!(i < self.num_outputs as usize);
        // SAFETY: in bounds of the library's static table.
        unsafe { &*self.outputs.add(i) }
    }
}

type CallFn = unsafe extern "C" fn(*const DlTensor, i32, *mut DlTensor, i32, *mut u8) -> i32;
type RunSmallFn = unsafe extern "C" fn(*const f32, *const i64, *mut f32, *mut f32, *mut u8) -> i32;

/// A model's static library linked into a shared object and loaded.
pub struct SharedModel {
    lib: libloading::Library,
    name: String,
}

impl SharedModel {
    pub fn load(dir: &Path, name: &str) -> Result<SharedModel, Failed> {
        let cc = c_compiler().ok_or("no C compiler (`cc`)")?;
        let so = shared_library(&cc, dir, name)?;
        // SAFETY: the model's library; loading it runs no initializers of ours.
        let lib = unsafe { libloading::Library::new(&so) }?;
        Ok(SharedModel { lib, name: name.to_string() })
    }

    fn symbol<T: Copy>(&self, f: &str) -> T {
        let sym = format!("kiln_{}_{f}", self.name);
        // SAFETY: the signature is the header's.
        unsafe { *self.lib.get::<T>(sym.as_bytes()).unwrap_or_else(|e| panic!("{sym}: {e}")) }
    }

    pub fn describe(&self) -> &ModelInfo {
        let f: unsafe extern "C" fn() -> *const ModelInfo = self.symbol("describe");
        // SAFETY: a pointer to the library's static info.
        unsafe { &*f() }
    }

    pub fn error_string(&self, code: i32) -> String {
        let f: unsafe extern "C" fn(i32) -> *const std::ffi::c_char = self.symbol("error_string");
        // SAFETY: a static string.
        unsafe { std::ffi::CStr::from_ptr(f(code)) }.to_string_lossy().into_owned()
    }

    pub fn run_small(&self, x: &[f32], ids: &[i64], y0: &mut [f32], y1: &mut [f32], arena: *mut u8) -> i32 {
        let f: RunSmallFn = self.symbol("run");
        // SAFETY: the small model's shapes, checked by the callers' arrays.
        unsafe { f(x.as_ptr(), ids.as_ptr(), y0.as_mut_ptr(), y1.as_mut_ptr(), arena) }
    }
}

/// A 64-byte-aligned arena.
pub struct AlignedArena(Vec<u8>, usize);

impl AlignedArena {
    pub fn new(bytes: usize) -> AlignedArena {
        let v = vec![0u8; bytes + 64];
        let skip = v.as_ptr().align_offset(64);
        AlignedArena(v, skip)
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: `skip` < 64 < the vector's length.
        unsafe { self.0.as_mut_ptr().add(self.1) }
    }
}

/// One packed call of the small model, as the cases edit it before it is made.
pub struct Call {
    pub tensors: [DlTensor; 4],
    pub shapes: [Vec<i64>; 4],
    pub strides: [Option<Vec<i64>>; 4],
    pub num_inputs: i32,
    pub num_outputs: i32,
    pub inputs_null: bool,
    pub arena_null: bool,
    pub arena_offset: usize,
    pub ids_override: Option<Vec<i64>>,
}

/// Packed calls of the small model on fixed inputs.
pub struct Calls<'a> {
    lib: &'a SharedModel,
    x: Vec<f32>,
    ids: Vec<i64>,
    y: [Vec<f32>; 2],
    arena: AlignedArena,
}

impl<'a> Calls<'a> {
    pub fn new(lib: &'a SharedModel, x: &[f32], ids: &[i64]) -> Calls<'a> {
        let arena = AlignedArena::new(lib.describe().arena_bytes as usize + 64);
        Calls { lib, x: x.to_vec(), ids: ids.to_vec(), y: [vec![0.0; 8], vec![0.0; 6]], arena }
    }

    /// Make the call after `edit`; its status.
    pub fn call(&mut self, edit: impl FnOnce(&mut Call)) -> i32 {
        let f: CallFn = self.lib.symbol("call");
        let tensor = |data: *mut u8, code: u8, bits: u8, ndim: i32| DlTensor {
            data,
            device: DlDevice { device_type: 1, device_id: 0 },
            ndim,
            dtype: DlDataType { code, bits, lanes: 1 },
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let mut ids = self.ids.clone();
        let mut c = Call {
            tensors: [
                tensor(self.x.as_mut_ptr() as *mut u8, 2, 32, 2),
                tensor(ids.as_mut_ptr() as *mut u8, 0, 64, 1),
                tensor(self.y[0].as_mut_ptr() as *mut u8, 2, 32, 2),
                tensor(self.y[1].as_mut_ptr() as *mut u8, 2, 32, 2),
            ],
            shapes: [vec![2, 3], vec![2], vec![2, 4], vec![2, 3]],
            strides: [None, None, None, None],
            num_inputs: 2,
            num_outputs: 2,
            inputs_null: false,
            arena_null: false,
            arena_offset: 0,
            ids_override: None,
        };
        // Shapes are set after `edit` unless it nulled one: edits see and change `shapes`.
        for t in &mut c.tensors {
            t.shape = std::ptr::NonNull::dangling().as_ptr();
        }
        edit(&mut c);
        if let Some(v) = c.ids_override.take() {
            ids = v;
            c.tensors[1].data = ids.as_mut_ptr() as *mut u8;
        }
        for i in 0..4 {
            if !c.tensors[i].shape.is_null() {
                c.tensors[i].shape = c.shapes[i].as_mut_ptr();
            }
            if let Some(s) = &mut c.strides[i] {
                c.tensors[i].strides = s.as_mut_ptr();
            }
        }
        let arena =
            if c.arena_null { std::ptr::null_mut() } else { self.arena.as_mut_ptr().wrapping_add(c.arena_offset) };
        let (ins, outs) = c.tensors.split_at_mut(2);
        let inputs = if c.inputs_null { std::ptr::null() } else { ins.as_ptr() };
        // SAFETY: the tensors point at live buffers of their shapes (or the edit broke them on purpose,
        // which the entry must notice before touching the data).
        unsafe { f(inputs, c.num_inputs, outs.as_mut_ptr(), c.num_outputs, arena) }
    }

    pub fn outputs(&self) -> [Vec<f32>; 2] {
        self.y.clone()
    }
}

/// The C compiler: `$CC`, else `cc` where it runs.
pub fn c_compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    which(&cc).then_some(cc)
}

/// Whether `tool --version` runs.
pub fn which(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// `dir/kiln/lib<name>.so` from `libkiln_<name>.a`, every member kept.
pub fn shared_library(cc: &str, dir: &Path, name: &str) -> Result<PathBuf, Failed> {
    let kiln = dir.join("kiln");
    let so = kiln.join(format!("lib{name}.so"));
    let out = Command::new(cc)
        .args(["-shared", "-o"])
        .arg(&so)
        .arg("-Wl,--whole-archive")
        .arg(kiln.join(format!("libkiln_{name}.a")))
        .args(["-Wl,--no-whole-archive", "-lm"])
        .output()?;
    if !out.status.success() {
        return Err(format!("linking {}: {}", so.display(), String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(so)
}

/// `examples/c/run_model.c` compiled with `cc` and linked against `dir/kiln/libkiln_<name>.a`.
pub fn link_run_model(cc: &str, dir: &Path, name: &str, flags: &[&str]) -> Result<PathBuf, Failed> {
    let kiln = dir.join("kiln");
    let prog = dir.join(format!("run_{name}"));
    let out = Command::new(cc)
        .args(["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-DKILN_MODEL={name}"))
        .arg("-I")
        .arg(&kiln)
        .args(flags)
        .arg(common::manifest_dir().join("../examples/c/run_model.c"))
        .arg("-L")
        .arg(&kiln)
        .arg(format!("-lkiln_{name}"))
        .args(["-lm", "-o"])
        .arg(&prog)
        .output()?;
    if !out.status.success() {
        return Err(format!("{cc} run_model.c: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(prog)
}

/// A model a C program runs: how to build it, its input, and the interpreter's output.
pub struct ModelCase {
    pub name: String,
    source: ModelSource,
    pub input: Tensor,
    pub want: Tensor,
}

enum ModelSource {
    Onnx(PathBuf),
    Relay { text: PathBuf, weights: PathBuf },
}

impl ModelCase {
    /// `mlp_example` (the repository's MLP, always there) or a reference model of `../shared/models`.
    pub fn load(model: &str) -> Result<Option<ModelCase>, Failed> {
        if model == "mlp_example" {
            let root = common::manifest_dir().join("..");
            let source = ModelSource::Relay {
                text: root.join("examples/relay/mlp.relay"),
                weights: root.join("examples/mlp/weights/mlp.safetensors"),
            };
            let input: Vec<f32> = (0..784).map(|i| ((i * 37 % 101) as f32 / 101.0) - 0.3).collect();
            let input = Tensor::from_f32(vec![1, 784], &input);
            let mut case = ModelCase { name: "mlp".into(), source, want: input.clone(), input };
            case.want = case.interpret()?;
            return Ok(Some(case));
        }
        let Some((m, input, _ort)) = common::reference_model(model) else { return Ok(None) };
        let Value::Tensor(want) = eval_function(&m, "main", &[Value::Tensor(input.clone())])? else {
            return Err("a tensor output".into());
        };
        let source = ModelSource::Onnx(common::models_dir().join(format!("{model}.onnx")));
        Ok(Some(ModelCase { name: model.to_string(), source, input, want }))
    }

    fn builder(&self) -> Build {
        let mut b = Build::new(&self.name);
        match &self.source {
            ModelSource::Onnx(p) => b.onnx(p),
            ModelSource::Relay { text, weights } => b.relay_file(text).weights(weights),
        };
        b
    }

    /// The interpreter on the model as built (weights bound).
    fn interpret(&self) -> Result<Tensor, Failed> {
        let m = self.builder().prepare()?;
        let Value::Tensor(t) = eval_function(&m, "main", &[Value::Tensor(self.input.clone())])? else {
            return Err("a tensor output".into());
        };
        Ok(t)
    }

    /// Build into `dir/kiln` for `target` ("" for cargo's default).
    pub fn build(&self, dir: &Path, target: &str) -> Result<Artifacts, Failed> {
        let mut b = self.builder();
        b.out_dir(dir).cargo_metadata(false);
        if !target.is_empty() {
            b.target(target);
        }
        Ok(b.compile()?)
    }

    /// Within 1e-4 × max |interpreter|.
    pub fn check(&self, got: &Tensor, how: &str) -> Result<(), Failed> {
        let (err, scale) = common::max_abs_error(got, &self.want);
        println!("{} via {how}: max abs error {err:e} (scale {scale:e})", self.name);
        if err > 1e-4 * scale.max(1e-6) {
            return Err(format!("{} via {how}: max abs error {err} > {}", self.name, 1e-4 * scale).into());
        }
        Ok(())
    }
}

/// Run `command` (a program and its leading arguments) on the case's input
/// file, reading back its output file.
pub fn run_program(command: &[String], dir: &Path, case: &ModelCase) -> Result<Tensor, Failed> {
    let (input, output) = (dir.join("input.bin"), dir.join("output.bin"));
    std::fs::write(&input, case.input.bytes())?;
    let out = Command::new(&command[0]).args(&command[1..]).arg(&input).arg(&output).output()?;
    if !out.status.success() {
        return Err(format!(
            "{command:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let bytes = std::fs::read(&output)?;
    Ok(Tensor::from_bytes(DataType::F32, case.want.shape().to_vec(), bytes).ok_or("output of the wrong size")?)
}

/// Why Python with NumPy cannot run here, or None when it can.
pub fn python_with_numpy() -> Option<String> {
    match Command::new("python3").args(["-c", "import numpy"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(_) => Some("python3 has no numpy (pip install numpy)".into()),
        Err(_) => Some("no python3".into()),
    }
}
