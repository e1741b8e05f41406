//! Helpers shared by the integration tests that sweep the Relay corpus or
//! assemble PTX (each test binary uses a part of them).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kiln::relay::{post_order, IRModule};

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
