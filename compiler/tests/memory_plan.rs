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
    for (t, slot) in plan.tensors.iter().enumerate() {
        if let Storage::Arena { offset } = slot.storage {
            let steps: Vec<usize> =
                plan.calls.iter().enumerate().filter(|(_, c)| c.args.contains(&t)).map(|(s, _)| s).collect();
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
