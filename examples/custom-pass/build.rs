//! A user's own Relay pass in a kiln build: `ReluToRelu6`, written with
//! `#[kiln::function_pass]`, rewrites every `nn.relu(x)` into
//! `clip(x, a_min=0f, a_max=6f)` (ReLU6, as mobile networks use to keep
//! activations in a fixed range). `Build::pass` runs it on the typed module,
//! weights bound, before kiln's default pipeline, so it composes with fusion
//! like any built-in pass.
//!
//! The same small MLP is compiled twice, `plain` and with the pass (`relu6`),
//! and the reference interpreter's outputs of both — the model as declared,
//! and the model after the pass applied here with `kiln::transform::apply` —
//! are recorded for `main` and the tests to check the compiled models against.

use std::fmt::Write;

use kiln::relay::{eval_function, mutate, print_module, ExprId, ExprMutator, IRModule, Store, Value};
use kiln::transform::{apply, PassContext};
use kiln::{AttrValue, Attrs, DataType, Tensor};

kiln::relay_model! {
    /// A 16-32-8 MLP with ReLU after both layers.
    fn mlp(x: Tensor<[1, 16], f32>) -> Tensor<[1, 8], f32> {
        weight w1: [16, 32]; weight b1: [32];
        weight w2: [32, 8];  weight b2: [8];
        let h = relu(matmul(x, w1) + b1);
        relu(matmul(h, w2) + b2)
    }
}

/// The rewrite itself: TVM's post-order `ExprMutator`, so `post` is the call
/// over already-rewritten arguments and nested ReLUs are all replaced.
struct Relu6Rewriter;

impl ExprMutator for Relu6Rewriter {
    fn rewrite_call(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        if store.op_name(post) != Some("nn.relu") {
            return post;
        }
        let arg = store.as_call(post).expect("an operator call").args[0];
        let bounds = Attrs::from_pairs([("a_min", AttrValue::Float(0.0)), ("a_max", AttrValue::Float(6.0))]);
        // clip's schema checks the attributes; both are given, so this cannot fail.
        store.call_op("clip", vec![arg], bounds).expect("clip(x, a_min, a_max)")
    }
}

/// ReLU → ReLU6 in every function. `opt_level = 0`: it runs at any opt level
/// (a pass above the build's level would be skipped, as built-in passes are).
#[kiln::function_pass(opt_level = 0, name = "ReluToRelu6")]
fn relu_to_relu6(func: ExprId, module: &mut IRModule, _ctx: &PassContext) -> ExprId {
    // The function node rebuilt over its rewritten body (itself if no ReLU was found).
    mutate(&mut module.store, func, &mut Relu6Rewriter)
}

/// Deterministic weights in [-scale, scale) (the shader hash `fract(sin(x) * 43758.5453)`),
/// scaled so that one output of the sample exceeds 6 while every hidden value stays below:
/// there ReLU6 caps that output and leaves the others as they were.
fn param(name: &str, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let (seed, scale) = match name {
        "w1" => (1.0, 1.0),
        "b1" => (2.0, 0.5),
        "w2" => (3.0, 1.5),
        _ => (4.0, 0.5),
    };
    let hash = |i: usize| ((i as f64 * 12.9898 + seed * 78.233).sin() * 43758.5453).rem_euclid(1.0);
    let values: Vec<f32> = (0..n).map(|i| ((hash(i) * 2.0 - 1.0) * scale) as f32).collect();
    Tensor::from_f32(shape.to_vec(), &values)
}

const WEIGHTS: [(&str, &[usize]); 4] = [("w1", &[16, 32]), ("b1", &[32]), ("w2", &[32, 8]), ("b2", &[8])];

fn build(name: &str, pass: bool) {
    let mut b = kiln::Build::new(name);
    b.module(mlp());
    for (w, shape) in WEIGHTS {
        b.weight(w, param(w, shape));
    }
    if pass {
        b.pass(ReluToRelu6::pass());
    }
    b.compile_or_exit();
}

/// The reference interpreter's output of `m` on the sample, weights as arguments.
fn reference(m: &IRModule, sample: &[f32]) -> Vec<f32> {
    let mut args = vec![Value::Tensor(Tensor::from_f32(vec![1, 16], sample))];
    args.extend(WEIGHTS.iter().map(|(w, shape)| Value::Tensor(param(w, shape))));
    match eval_function(m, "main", &args) {
        Ok(Value::Tensor(t)) if t.dtype() == DataType::F32 => t.to_f32_vec(),
        other => panic!("the reference interpreter failed: {other:?}"),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    build("plain", false);
    build("relu6", true);

    // The pass applied by hand, as Build applies it: the IR and the reference the compiled model must match.
    let passed = apply(ReluToRelu6::pass().as_ref(), mlp(), &PassContext::new()).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let text = print_module(&passed);
    assert!(text.matches("clip(").count() == 2 && !text.contains("nn.relu"), "the pass missed a ReLU:\n{text}");

    let sample: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).cos() * 1.5).collect();
    let (plain, relu6) = (reference(&mlp(), &sample), reference(&passed, &sample));
    // The sample must show the difference, or the example proves nothing; and
    // with no hidden value above 6, the pass's effect is exactly min(plain, 6).
    assert!(plain.iter().any(|&v| v > 6.0), "no plain output above 6: {plain:?}");
    assert!(plain.iter().zip(&relu6).all(|(p, r)| (p.min(6.0) - r).abs() < 1e-5), "{plain:?} vs {relu6:?}");

    let mut out = String::from("// @generated by the example's build.rs\n");
    let _ = writeln!(out, "pub const SAMPLE: [f32; 16] = {sample:?};");
    let _ = writeln!(out, "pub const EXPECTED_PLAIN: [f32; 8] = {plain:?};");
    let _ = writeln!(out, "pub const EXPECTED_RELU6: [f32; 8] = {relu6:?};");
    let _ = writeln!(out, "pub const RELU6_RELAY: &str = {text:?};");
    let path = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("reference.rs");
    std::fs::write(path, out).expect("write the reference values");
}
