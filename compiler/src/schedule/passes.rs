//! The TIR passes as registered [`Pass`]es — this layer's contribution to the
//! pass registry (the crate root wires [`tir_passes`] in) — and the two TIR
//! pipelines built from them by name.

use std::sync::Arc;

use crate::tir::PrimFunc;
use crate::transform::{Pass, PassContext, PassError, PassInfo, PrimFuncPass, Sequential};

/// A TIR pass that rewrites each kernel with `f`, which cannot fail.
fn infallible(name: &str, opt_level: u32, f: fn(PrimFunc) -> PrimFunc) -> Arc<dyn Pass> {
    PrimFuncPass::new(PassInfo::new(name, opt_level, &[]), move |k, _, _| Ok(f(k))).arc()
}

/// The `tir.UnrollLoop` configuration set in `ctx` (TVM's defaults for what is not).
fn unroll_config(ctx: &PassContext) -> kiln_ir::tir::transform::UnrollConfig {
    use crate::transform::ConfigValue::{Bool, Int};
    let mut c = kiln_ir::tir::transform::UnrollConfig::default();
    let field = |name| ctx.config_field("tir.UnrollLoop", name);
    if let Some(Int(v)) = field("auto_max_step") {
        c.auto_max_step = *v;
    }
    if let Some(Int(v)) = field("auto_max_depth") {
        c.auto_max_depth = *v;
    }
    if let Some(Int(v)) = field("auto_max_extent") {
        c.auto_max_extent = *v;
    }
    if let Some(Bool(v)) = field("explicit_unroll") {
        c.explicit_unroll = *v;
    }
    c
}

/// Every built-in TIR pass: the loop transforms of `kiln_ir::tir::transform`
/// and this crate's schedules.
pub fn tir_passes() -> Vec<Arc<dyn Pass>> {
    use kiln_ir::tir::transform as t;
    vec![
        infallible("tir.FuseSiblingLoops", 1, t::fuse_sibling_loops),
        PrimFuncPass::new(PassInfo::new("tir.DefaultSchedule", 0, &[]), |mut f, _, ctx: &PassContext| {
            let unit = crate::target::VectorUnit::of_context(ctx);
            // The kernels made for AMX get tiles only where the target has them.
            if ctx.config_bool("tir.amx") == Some(true) && super::amx::for_tiles(&f) {
                f.attrs.insert("amx".into(), "true".into());
            }
            // Tuning records (`kiln tune`'s log) by kernel key; the tuner also records what it sees.
            let mut f = match ctx.extension::<super::ScheduleTuning>() {
                // The key (the kernel printed and hashed) only when records or the tuner need it.
                Some(tuning) if tuning.recording.is_some() || !tuning.knobs.is_empty() => {
                    let key = super::kernel_key(&f);
                    if let Some(recording) = &tuning.recording {
                        let record = super::knobs::SeenKernel {
                            name: f.name.clone(),
                            key: key.clone(),
                            anchor: f.attrs.get("anchor").cloned().unwrap_or_default(),
                            candidates: super::knobs::candidates(&f, unit, recording.threads, recording.limit),
                        };
                        recording.seen.lock().unwrap_or_else(|e| e.into_inner()).push(record);
                    }
                    let knobs = tuning.knobs.get(&key).cloned().unwrap_or_default();
                    super::tuned_cpu_schedule(f, ctx.opt_level, unit, &knobs)
                }
                _ => super::default_cpu_schedule(f, ctx.opt_level, unit),
            };
            if ctx.config_bool("tir.fast_math") == Some(true) {
                f.attrs.insert("fast_math".into(), "true".into());
            }
            Ok(f)
        })
        .arc(),
        PrimFuncPass::new(PassInfo::new("tir.GpuSchedule", 0, &[]), |f, _, ctx: &PassContext| {
            super::gpu::default_gpu_schedule(f, ctx.opt_level).map_err(Into::into)
        })
        .arc(),
        PrimFuncPass::new(PassInfo::new("tir.LowerThreadLocal", 0, &[]), |f, _, _| {
            super::gpu::lower_thread_local(f).map_err(Into::into)
        })
        .arc(),
        infallible("tir.LowerIntrinsics", 0, t::lower_intrinsics),
        infallible("tir.LowerTrig", 0, t::lower_trig),
        infallible("tir.LoopPartition", 1, t::partition_loops),
        PrimFuncPass::new(PassInfo::new("tir.VectorizeCopies", 1, &[]), |f, _, ctx: &PassContext| {
            Ok(super::vectorize_partitioned_copies(f, crate::target::VectorUnit::of_context(ctx)))
        })
        .arc(),
        PrimFuncPass::new(PassInfo::new("tir.UnrollLoop", 0, &[]), |f, _, ctx: &PassContext| {
            Ok(t::unroll_loops_with(f, unroll_config(ctx)))
        })
        .arc(),
        infallible("tir.VectorizeLoop", 0, t::vectorize_loops),
        infallible("tir.DotProducts", 1, t::dot_products),
        infallible("tir.ForwardStores", 0, t::forward_stores),
        infallible("tir.RemoveNoOp", 0, t::remove_noops),
        infallible("tir.FlattenBuffer", 0, t::flatten_buffers),
        infallible("tir.Simplify", 0, t::simplify_prim_func),
        infallible("tir.ParallelizeOuter", 1, super::parallelize_outer),
    ]
}

/// The TIR pipeline run on lowered kernels: fuse stage loops, schedule, flatten buffers,
/// lower intrinsics, simplify, unroll, partition loops at constant tests (after
/// unrolling, which makes tests on small outer loops constant), vectorize the
/// copies whose padding partitioning split off, vectorize,
/// fuse byte products into dot products, forward write-backs into their epilogues, clean up, parallelize.
pub fn tir_pipeline() -> Result<Sequential, PassError> {
    Sequential::from_names(
        "TirPipeline",
        &[
            "tir.FuseSiblingLoops",
            "tir.DefaultSchedule",
            "tir.FlattenBuffer",
            "tir.LowerIntrinsics",
            "tir.Simplify",
            "tir.UnrollLoop",
            "tir.LoopPartition",
            "tir.VectorizeCopies",
            "tir.VectorizeLoop",
            "tir.DotProducts",
            "tir.ForwardStores",
            "tir.RemoveNoOp",
            "tir.ParallelizeOuter",
        ],
    )
}

/// The TIR pipeline for GPU kernels: fuse stage loops, bind them to blocks and
/// threads (tiles in shared memory and registers), make registers per thread,
/// flatten, lower intrinsics, simplify, unroll register tiles, clean up.
/// Without `tir.LowerThreadLocal` the kernels keep serial semantics and run on
/// the CPU backends as they are (how tests check GPU schedules without a GPU).
pub fn gpu_tir_pipeline() -> Result<Sequential, PassError> {
    Sequential::from_names(
        "GpuTirPipeline",
        &[
            "tir.FuseSiblingLoops",
            "tir.GpuSchedule",
            "tir.LowerThreadLocal",
            "tir.FlattenBuffer",
            // NVPTX has no libm: the trigonometric functions become arithmetic
            // (their `exp`s then polynomials too).
            "tir.LowerTrig",
            "tir.LowerIntrinsics",
            "tir.Simplify",
            "tir.UnrollLoop",
            "tir.RemoveNoOp",
        ],
    )
}
