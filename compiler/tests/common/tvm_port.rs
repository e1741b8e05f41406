//! What the ports of TVM's pass tests share (`tvm_passes.rs`,
//! `tvm_fuse_ops.rs`, `tvm_standard_passes.rs`): modules from Relay text,
//! passes run as TVM's `run_opt_pass` runs them, and TVM's structural
//! equality as equality of the printed text (which holds every constant's
//! value in its metadata section). Included with `#[path]` by those files.

#![allow(dead_code)]

use std::sync::Arc;

use kiln::relay::{infer_module, parse_module, print_module, IRModule};
use kiln::transform::{apply, PassContext, Sequential};
use kiln::Tensor;

/// A module from Relay text (`#[version]` added) and its metadata constants, typed.
pub fn module(text: &str, constants: &[Tensor]) -> IRModule {
    let mut source = format!("#[version = \"0.0.5\"]\n{text}\n");
    if !constants.is_empty() {
        source.push_str("\n#[metadata]\n");
        for (i, c) in constants.iter().enumerate() {
            let hex: String = c.bytes().iter().map(|b| format!("{b:02x}")).collect();
            let shape: Vec<String> = c.shape().iter().map(|d| d.to_string()).collect();
            let shape = if shape.len() == 1 { format!("({},)", shape[0]) } else { format!("({})", shape.join(", ")) };
            source.push_str(&format!("relay.Constant[{i}]: Tensor[{shape}, {}] = \"{hex}\"\n", c.dtype()));
        }
    }
    let mut m = parse_module(&source).unwrap_or_else(|e| panic!("{e}\n{source}"));
    infer_module(&mut m).expect("infer");
    m
}

/// `passes` (then InferType) under `ctx`; the passes run whatever their opt level.
pub fn run_in(m: IRModule, passes: &[&str], ctx: PassContext) -> IRModule {
    let mut names = passes.to_vec();
    names.push("InferType");
    let seq = Sequential::from_names("Test", &names).expect("pipeline");
    let ctx = Arc::new(ctx.with_required(passes));
    ctx.scope(|ctx| apply(&seq, m, ctx)).expect("passes")
}

/// `passes` (then InferType) at opt level 3.
pub fn run(m: IRModule, passes: &[&str]) -> IRModule {
    run_in(m, passes, PassContext::new().with_opt_level(3))
}

/// `passes` (then InferType) under `ctx`, printed.
pub fn after_in(m: IRModule, passes: &[&str], ctx: PassContext) -> String {
    print_module(&run_in(m, passes, ctx))
}

/// `passes` (then InferType) at opt level 3, printed.
pub fn after(m: IRModule, passes: &[&str]) -> String {
    print_module(&run(m, passes))
}

/// TVM's `assert_structural_equal(after, run_infer_type(expected))`.
pub fn assert_becomes(before: IRModule, passes: &[&str], expected: IRModule) {
    assert_eq!(after(before, passes), after(expected, &[]));
}

/// The passes leave the module as it is.
pub fn assert_unchanged(before: IRModule, passes: &[&str]) {
    assert_becomes(before.clone(), passes, before);
}

/// A float32 tensor.
pub fn f32s(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::from_f32(shape.to_vec(), values)
}
