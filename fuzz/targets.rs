//! The bodies of kiln's fuzz targets, written once: the libFuzzer binaries
//! (`fuzz/fuzz_targets/*.rs`, nightly + cargo-fuzz) wrap them, and so do the
//! stable drivers (`compiler/tests/fuzz_corpus.rs` in `cargo test`,
//! `compiler/examples/fuzz.rs` for long runs), which include this file with
//! `#[path]`. Plain Rust that depends only on `kiln`.
//!
//! Every body takes arbitrary bytes. An error from kiln is the expected
//! outcome of a hostile input; a panic is a defect, and so is a broken round
//! trip (a parsed module that does not print back as parsable text, a `.npy`
//! tensor that does not write back as the same tensor). What a body returns
//! only says how far the input got, for the stable drivers' summaries.

use std::sync::Arc;

use kiln::build::optimize_and_plan;
use kiln::relay::IRModule;
use kiln::transform::PassContext;

/// How far an input got: the stage that refused it, or the last one passed.
pub type Outcome = &'static str;

/// The compiler's middle end as `kiln build` runs it (the Relay pipeline at
/// opt level 3, then the executor plan with its kernels lowered and
/// scheduled). Errors are fine.
fn middle_end(m: IRModule) -> Outcome {
    match optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3))) {
        Ok(_) => "optimized and planned",
        Err(_) => "middle-end error",
    }
}

/// Relay text (any bytes, read as lossy UTF-8) → `parse_module`; a module
/// that parses prints back as text that parses again.
pub fn relay_parser(data: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(data);
    let Ok(m) = kiln::relay::parse_module(&text) else { return "parse error" };
    let printed = kiln::relay::print_module(&m);
    if let Err(e) = kiln::relay::parse_module(&printed) {
        panic!("a parsed module printed as text that does not parse: {e}\n{printed}");
    }
    "parsed, printed and parsed again"
}

/// Relay text → parse → type inference → the middle end.
pub fn relay_typecheck(data: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(data);
    let Ok(mut m) = kiln::relay::parse_module(&text) else { return "parse error" };
    if kiln::relay::infer_module(&mut m).is_err() {
        return "type error";
    }
    middle_end(m)
}

/// ONNX protobuf bytes → `frontend::onnx::import` → the middle end.
pub fn onnx_import(data: &[u8]) -> Outcome {
    match kiln::frontend::onnx::import(data, &[]) {
        Ok(m) => middle_end(m),
        Err(_) => "import error",
    }
}

/// `.npy` bytes → `read_npy`; a tensor that reads writes back (`write_npy`)
/// as bytes that read as the same tensor.
pub fn npy_reader(data: &[u8]) -> Outcome {
    let Ok(t) = kiln::npy::read_npy(data) else { return "read error" };
    match kiln::npy::read_npy(&kiln::npy::write_npy(&t)) {
        Ok(back) if back == t => "read, written and read again",
        Ok(back) => panic!("write_npy then read_npy changed the tensor: {t:?} became {back:?}"),
        Err(e) => panic!("read_npy refused what write_npy wrote for {:?} {:?}: {e}", t.dtype(), t.shape()),
    }
}
