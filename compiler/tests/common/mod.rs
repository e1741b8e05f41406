//! Helpers shared by the integration tests that sweep the Relay corpus or
//! assemble PTX (each test binary uses a part of them).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kiln::backend::host::KernelLibrary;
use kiln::codegen::PackedKernel;
use kiln::relay::{post_order, IRModule};
use kiln::tir::PrimFunc;
use kiln::transform::PassContext;

/// Every program of the Relay corpus as (name, text), sorted by name.
pub fn corpus() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ir/tests/data/relay");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "relay"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
            (name, std::fs::read_to_string(&p).expect("read"))
        })
        .collect()
}

/// Whether a program's values go through an approximated transcendental
/// (compared at 1e-4 instead of 1e-5).
pub fn transcendental(text: &str) -> bool {
    ["exp", "tanh", "sigmoid", "erf", "softmax", "log", "power", "gelu"].iter().any(|t| text.contains(t))
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
    kiln::relay::op_registry().iter().map(|(_, d)| d.name).filter(|n| !covered.contains(n)).collect()
}

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

/// A small deterministic generator (xorshift*) for randomized tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in [-1, 1).
    pub fn float(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

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

/// Kernels compiled as C into a shared object and loaded.
pub struct CLibrary {
    _dir: tempfile::TempDir,
    lib: libloading::Library,
}

impl CLibrary {
    pub fn build(kernels: &[PrimFunc]) -> CLibrary {
        let src = kiln::codegen::c::codegen_module(kernels).expect("C code");
        let dir = tempfile::tempdir().expect("dir");
        let (c, so) = (dir.path().join("k.c"), dir.path().join("k.so"));
        std::fs::write(&c, &src).expect("write");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let ok = std::process::Command::new(cc)
            .args(["-O1", "-std=c99", "-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&c)
            .arg("-lm")
            .status()
            .expect("cc");
        assert!(ok.success(), "the C compiler rejected:\n{src}");
        // SAFETY: a library just built from kiln's C output; it runs no initializers.
        let lib = unsafe { libloading::Library::new(&so) }.expect("load");
        CLibrary { _dir: dir, lib }
    }
}

impl KernelLibrary for CLibrary {
    fn packed(&self, name: &str) -> Result<PackedKernel, String> {
        // SAFETY: every `<name>_packed` kiln emits has the PackedKernel signature.
        let sym: libloading::Symbol<PackedKernel> =
            unsafe { self.lib.get(format!("{name}_packed").as_bytes()) }.map_err(|e| e.to_string())?;
        Ok(*sym)
    }
}
