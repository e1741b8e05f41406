//! The static memory plan of a ResNet-18-shaped model: one arena within 5%
//! of the lower bound (the most bytes alive at one step), and every pair of
//! tensors alive at the same time placed apart.

use kiln::backend::aot::{plan_executor, Storage};
use kiln::relay::transform::default_pipeline;
use kiln::relay::{infer_module, parse_module};
use kiln::transform::{apply, PassContext};

#[test]
fn resnet18_arena_is_within_five_percent_of_the_lower_bound() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/resnet18.relay")).expect("model");
    let mut m = parse_module(&text).expect("parse");
    infer_module(&mut m).expect("infer");
    let fused =
        apply(&default_pipeline().expect("pipeline"), m, &PassContext::new().with_opt_level(3)).expect("optimize");
    let plan = plan_executor(&fused).expect("plan");
    let ratio = plan.arena_bytes as f64 / plan.arena_lower_bound as f64;
    println!(
        "resnet18: {} kernels, {} calls, arena {} bytes, lower bound {} bytes (ratio {ratio:.4})",
        plan.kernels.len(),
        plan.calls.len(),
        plan.arena_bytes,
        plan.arena_lower_bound
    );
    assert!(ratio <= 1.05, "arena {} vs lower bound {}", plan.arena_bytes, plan.arena_lower_bound);
    // No two tensors that live at the same time overlap.
    let mut life: Vec<(usize, usize, usize, usize)> = Vec::new(); // (first, last, offset, bytes)
                                                                  // A reshape-only alias shares its tensor's bytes on purpose: its uses count as that tensor's.
    let root = |t: usize| plan.tensors[t].alias_of.unwrap_or(t);
    for (t, slot) in plan.tensors.iter().enumerate() {
        if let (Storage::Arena { offset }, None) = (&slot.storage, slot.alias_of) {
            let offset = *offset;
            let steps: Vec<usize> = plan
                .calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.args.iter().any(|&a| root(a) == t))
                .map(|(s, _)| s)
                .collect();
            if let (Some(&a), Some(&b)) = (steps.first(), steps.last()) {
                life.push((a, b, offset, slot.bytes()));
            }
        }
    }
    for (i, x) in life.iter().enumerate() {
        for y in &life[i + 1..] {
            let in_time = x.0 <= y.1 && y.0 <= x.1;
            let in_space = x.2 < y.2 + y.3 && y.2 < x.2 + x.3;
            assert!(!(in_time && in_space), "overlap: {x:?} and {y:?}");
        }
    }
}

/// TVM's `relay.reshape_only`: a kernel of reshape-like operators runs no
/// code; its result shares its argument's bytes (or the output buffer its
/// argument is computed into), and the values are the interpreter's.
#[test]
fn reshape_only_kernels_run_nothing_and_alias_their_argument() {
    use std::sync::Arc;
    let text = "#[version = \"0.0.5\"]
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = exp(%x);
  %1 = squeeze(expand_dims(reshape(%0, newshape=[24]), axis=0), axis=[0]);
  %2 = add(%1, 1f);
  (reshape(%2, newshape=[4, 6]), nn.batch_flatten(%0), reshape(%x, newshape=[6, 4]))
}";
    let mut m = parse_module(text).expect("parse");
    infer_module(&mut m).expect("infer");
    let (fused, plan) =
        kiln::build::optimize_and_plan(m.clone(), Arc::new(PassContext::new().with_opt_level(3))).expect("compile");
    let printed = kiln::relay::print_module(&fused);
    // The reshapes around `add` fuse with it; the two others are reshape-only.
    assert_eq!(printed.matches("relay.reshape_only=1").count(), 2, "{printed}");
    // exp and the add kernel run; batch_flatten runs nothing (exp is computed
    // into its output buffer); the reshape of the input is a copy into its
    // output buffer.
    let names: Vec<&str> = plan.calls.iter().map(|c| plan.kernels[c.kernel].name.as_str()).collect();
    assert_eq!(names.iter().filter(|n| n.starts_with("fused_")).count(), 2, "{names:?}");
    assert!(plan
        .tensors
        .iter()
        .filter(|t| t.alias_of.is_some())
        .all(|t| t.storage == plan.tensors[t.alias_of.unwrap()].storage));
    let x: Vec<f32> = (0..24).map(|i| i as f32 / 10.0).collect();
    let input = kiln::Tensor::from_f32(vec![2, 3, 4], &x);
    let want = kiln::relay::eval_function(&m, "main", &[kiln::relay::Value::Tensor(input.clone())]).expect("eval");
    let want: Vec<kiln::Tensor> = match want {
        kiln::relay::Value::Tuple(fields) => fields.into_iter().map(|f| f.tensor().expect("tensor").clone()).collect(),
        other => panic!("{other:?}"),
    };
    let jit = kiln::codegen::llvm::Jit::new("reshape_only", &plan.kernels).expect("jit");
    let got = kiln::backend::host::run(&plan, &jit, &[input], 1).expect("run");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.shape(), w.shape());
        let err = g.to_f64_vec().iter().zip(w.to_f64_vec()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 1e-5, "{err}");
    }
}
