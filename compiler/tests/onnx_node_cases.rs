//! A stored subset of ONNX's own operator test cases (one per operator that
//! kiln imports, exported by `scripts/onnx_node_tests.py --export-subset`
//! from `onnx.backend.test.case.node.collect_testcases()`), replayed without
//! Python: import (inputs listed as `bound` in `meta.json` are fixed at build
//! time, as `kiln run --bind` does), compile with the LLVM JIT, run, and
//! compare with ONNX's expected outputs. One test per case.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};

const CASES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/onnx_node");

fn main() {
    let args = Arguments::from_args();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(CASES)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    dirs.sort();
    let trials = dirs
        .into_iter()
        .map(|d| {
            let name = d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let ignored = !cfg!(feature = "llvm");
            Trial::test(name, move || run_case(&d)).with_ignored_flag(ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

fn read_npy(p: &Path) -> Result<kiln::Tensor, Failed> {
    let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(kiln::npy::read_npy(&bytes).map_err(|e| format!("{}: {e}", p.display()))?)
}

#[cfg(not(feature = "llvm"))]
fn run_case(_: &Path) -> Result<(), Failed> {
    Ok(())
}

#[cfg(feature = "llvm")]
fn run_case(dir: &Path) -> Result<(), Failed> {
    use kiln::transform::PassContext;
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json"))?)?;
    let names: Vec<String> =
        meta["inputs"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
    let bound_names: Vec<String> =
        meta["bound"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
    let (rtol, atol) = (meta["rtol"].as_f64().unwrap_or(1e-3), meta["atol"].as_f64().unwrap_or(1e-5));
    let mut inputs = Vec::new();
    let mut bound = Vec::new();
    for (k, n) in names.iter().enumerate() {
        let file = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.file_name().is_some_and(|f| f.to_string_lossy().starts_with(&format!("input_{k}_"))))
            .ok_or_else(|| format!("no input file for input {k} `{n}`"))?;
        let t = read_npy(&file)?;
        if bound_names.contains(n) {
            bound.push((n.clone(), t));
        } else {
            inputs.push(t);
        }
    }
    let bytes = std::fs::read(dir.join("model.onnx"))?;
    let mut m = kiln::frontend::onnx::import_with(&bytes, &[], &bound)?;
    kiln::relay::infer_module(&mut m)?;
    let (_, plan) = kiln::build::optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3)))?;
    let jit = kiln::codegen::llvm::Jit::new("case", &plan.kernels)?;
    let got = kiln::backend::host::run(&plan, &jit, &inputs, 1)?;
    let outputs = meta["outputs"].as_u64().unwrap_or(1) as usize;
    if got.len() != outputs {
        return Err(format!("{} outputs, expected {outputs}", got.len()).into());
    }
    for (k, g) in got.iter().enumerate() {
        let want = read_npy(&dir.join(format!("output_{k}.npy")))?;
        if g.shape() != want.shape() || g.dtype() != want.dtype() {
            return Err(format!(
                "output {k}: {:?} {} but ONNX expects {:?} {}",
                g.shape(),
                g.dtype(),
                want.shape(),
                want.dtype()
            )
            .into());
        }
        let (rtol, atol) =
            if want.dtype() == kiln::DataType::F16 { (rtol.max(5e-3), atol.max(1e-3)) } else { (rtol, atol) };
        for (i, (a, b)) in g.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || a == &b || (a - b).abs() <= atol + rtol * b.abs();
            if !same {
                return Err(format!("output {k}[{i}] = {a}, ONNX expects {b}").into());
            }
        }
    }
    Ok(())
}
