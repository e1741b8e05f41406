//! GPU schedules checked without a GPU. Kernels from the GPU TIR pipeline
//! keep serial semantics until `tir.LowerThreadLocal` (thread loops run one
//! after another, barriers sit between them, a thread's registers carry a
//! thread dimension), so with that pass disabled the CPU backend runs them as
//! they stand. Every program of the Relay corpus — every operator, tiled
//! products and convolutions with shared-memory chunks included — and the
//! reference ONNX models must then match the interpreter and ONNX Runtime.
//! What this cannot see (a missing barrier) `verify_barriers` checks on every
//! scheduled kernel.
#![cfg(feature = "llvm")]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use kiln::backend::host;
use kiln::codegen::llvm::Jit;
use kiln::tir::{ForKind, Stmt};
use kiln::transform::PassContext;

fn serial_gpu_context(opt_level: u32) -> Arc<PassContext> {
    Arc::new(common::sweep_context(opt_level).with_disabled(&["tir.LowerThreadLocal"]))
}

fn uses_shared_memory(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |st| {
        found |= matches!(st, Stmt::Allocate { buffer, .. } if buffer.scope() == kiln::tir::Scope::Shared)
    });
    found
}

#[test]
fn every_operator_under_the_gpu_schedule_matches_the_interpreter() {
    let (mut covered, mut ran, mut tiled) = (BTreeSet::new(), 0, 0);
    for common::CorpusCase { name, module: m, transcendental, args, want } in common::corpus_cases() {
        for opt_level in [0, 3] {
            let result = kiln::build::optimize_and_plan_gpu(m.clone(), serial_gpu_context(opt_level));
            let Some((fused, plan)) = common::ahead_of_time(&name, result) else { continue };
            if opt_level == 0 {
                common::operators(&fused, &mut covered);
            }
            for k in &plan.kernels {
                let mut bound = false;
                k.body
                    .visit(&mut |s| bound |= matches!(s, Stmt::For(l) if matches!(l.kind, ForKind::ThreadBinding(_))));
                // A scalar kernel's one-iteration thread loop simplifies away: one thread runs it.
                let single = ["gpu.grid", "gpu.block"].iter().all(|a| k.attrs.get(*a).map(String::as_str) == Some("1"));
                assert!(bound || single, "{name}/{}: no loop bound to the GPU", k.name);
                tiled += usize::from(uses_shared_memory(&k.body));
            }
            let jit = Jit::new(&name, &plan.kernels).unwrap_or_else(|e| panic!("{name}: {e}"));
            let got = host::run(&plan, &jit, &args, 1).expect("run");
            common::compare(&name, &format!("gpu schedule on the CPU, opt {opt_level}"), &got, &want, transcendental);
            ran += 1;
        }
    }
    let missing = common::missing_operators(&covered);
    assert!(missing.is_empty(), "operators not covered: {missing:?}");
    assert!(ran > 60, "only {ran} programs ran");
    assert!(tiled >= 10, "only {tiled} kernels staged operands in shared memory");
    println!("{ran} programs, {tiled} kernels with shared-memory tiles");
}

#[test]
fn reference_models_under_the_gpu_schedule_match_onnx_runtime() {
    for name in ["mlp", "lenet", "resnet18", "mobilenetv2"] {
        let Some((m, input, want)) = common::reference_model(name) else {
            println!("skipped {name}: not in ../shared/models (or $KILN_MODELS)");
            continue;
        };
        let (_, plan) = kiln::build::optimize_and_plan_gpu(m, serial_gpu_context(3)).expect("compile");
        let jit = Jit::new(name, &plan.kernels).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = host::run(&plan, &jit, &[input], 1).expect("run");
        let (err, scale) = common::max_abs_error(&got[0], &want);
        println!("{name}: max abs error {err:e}");
        assert!(err <= 1e-4 * scale, "{name}: {err} > 1e-4 × {scale}");
    }
}
