//! The Relay optimization passes, one file each, and their registration as
//! [`Pass`]es: [`builtin_passes`] (what this layer adds to the registry; the
//! crate root wires it in) and [`default_pipeline`] (what `relay.build` runs,
//! as far as the passes exist). The TIR passes are registered by their own
//! layer, [`crate::schedule::passes`].

use std::sync::Arc;

use kiln_ir::relay::{infer_module, IRModule};

use crate::transform::{FunctionPass, ModulePass, Pass, PassContext, PassError, PassInfo, Sequential};

pub mod alter_op_layout;
pub mod bf16_precision;
pub mod byte_activations;
pub mod common_subexpr;
pub mod convert_layout;
pub mod dead_code;
pub mod fold_constant;
pub mod fold_scale_axis;
pub mod fuse_ops;
pub mod integer_conv2d;
pub mod simplify_expr;
pub mod simplify_inference;
pub mod split_reduction;
pub mod to_anf;

/// `InferType`: fill in every checked type.
pub fn infer_type() -> Arc<dyn Pass> {
    ModulePass::new(PassInfo::new("InferType", 0, &[]), |mut m: IRModule, _: &PassContext| {
        infer_module(&mut m)?;
        Ok(m)
    })
    .arc()
}

fn function_pass(
    name: &str,
    opt_level: u32,
    required: &[&str],
    f: fn(&mut IRModule, kiln_ir::relay::ExprId) -> Result<kiln_ir::relay::ExprId, String>,
) -> Arc<dyn Pass> {
    FunctionPass::new(PassInfo::new(name, opt_level, required), move |m: &mut IRModule, func, _: &PassContext| {
        Ok(f(m, func)?)
    })
    .arc()
}

/// An opt-level-3 function pass (after InferType) that runs only where the
/// boolean configuration key `key` is true (targets set it by their features).
fn pass_enabled_by(
    name: &str,
    key: &'static str,
    run: fn(&mut kiln_ir::relay::Store, kiln_ir::relay::ExprId) -> kiln_ir::relay::ExprId,
) -> Arc<dyn Pass> {
    FunctionPass::new(PassInfo::new(name, 3, &["InferType"]), move |m: &mut IRModule, f, ctx: &PassContext| {
        Ok(if ctx.config_bool(key) == Some(true) { run(&mut m.store, f) } else { f })
    })
    .arc()
}

/// `PrintIR` (TVM's): writes the module's text to standard error, headed by
/// the pass name, and returns it unchanged — a probe to put in a `Sequential`.
pub fn print_ir() -> Arc<dyn Pass> {
    ModulePass::new(PassInfo::new("PrintIR", 0, &[]), |m: IRModule, _: &PassContext| {
        eprintln!("PrintIR:\n{}", kiln_ir::relay::print_module(&m));
        Ok(m)
    })
    .arc()
}

/// Every built-in Relay pass, as registered by name.
pub fn builtin_passes() -> Vec<Arc<dyn Pass>> {
    let mut v: Vec<Arc<dyn Pass>> = vec![
        infer_type(),
        print_ir(),
        FunctionPass::new(
            PassInfo::new("SimplifyInference", 0, &["InferType"]),
            |m: &mut IRModule, f, ctx: &PassContext| {
                let layer_norm = ctx.config_bool("relay.SimplifyInference.layer_norm").unwrap_or(true);
                Ok(simplify_inference::simplify_inference(&mut m.store, f, layer_norm)?)
            },
        )
        .arc(),
        function_pass("ConvertLayout", 0, &["InferType"], |m, f| convert_layout::convert_layout(&mut m.store, f)),
        FunctionPass::new(PassInfo::new("FoldConstant", 2, &[]), |m: &mut IRModule, f, ctx: &PassContext| {
            let max = ctx.config_int("relay.FoldConstant.max_bytes").map(|v| v.max(0) as usize);
            Ok(fold_constant::fold_constant_up_to(&mut m.store, f, max.unwrap_or(fold_constant::DEFAULT_MAX_BYTES)))
        })
        .arc(),
        function_pass("EliminateCommonSubexpr", 3, &["InferType"], |m, f| {
            Ok(common_subexpr::eliminate_common_subexpr(&mut m.store, f))
        }),
        function_pass("SimplifyExpr", 0, &["InferType"], |m, f| Ok(simplify_expr::simplify_expr(&mut m.store, f))),
        FunctionPass::new(
            PassInfo::new("AlterOpLayout", 3, &["InferType"]),
            |m: &mut IRModule, f, ctx: &PassContext| {
                // Packed weights are sized from the target's vector unit.
                let unit = crate::target::VectorUnit::of_context(ctx);
                let winograd = ctx.config_bool("relay.AlterOpLayout.winograd").unwrap_or(true);
                Ok(alter_op_layout::alter_op_layout(&mut m.store, f, unit, winograd))
            },
        )
        .arc(),
        FunctionPass::new(
            PassInfo::new("IntegerConv2d", 3, &["InferType"]),
            |m: &mut IRModule, f, ctx: &PassContext| {
                Ok(if ctx.config_bool("relay.IntegerConv2d.enable") == Some(true) {
                    let amx = ctx.config_bool("relay.IntegerConv2d.amx") == Some(true);
                    integer_conv2d::integer_conv2d(&mut m.store, f, amx)
                } else {
                    f
                })
            },
        )
        .arc(),
        FunctionPass::new(
            PassInfo::new("Bf16Precision", 3, &["InferType"]),
            |m: &mut IRModule, f, ctx: &PassContext| {
                Ok(if ctx.config_bool("relay.Bf16Precision.enable") == Some(true) {
                    let floor = ctx.config_int("relay.Bf16Precision.min_macs").filter(|&v| v >= 0);
                    let floor = floor.map_or(bf16_precision::MIN_MACS, |v| v as u64);
                    bf16_precision::bf16_precision(&mut m.store, f, floor)
                } else {
                    f
                })
            },
        )
        .arc(),
        pass_enabled_by("ByteActivations", "relay.ByteActivations.enable", byte_activations::byte_activations),
        function_pass("SplitConvReduction", 3, &["InferType"], |m, f| {
            Ok(split_reduction::split_conv_reduction(&mut m.store, f))
        }),
        function_pass("BackwardFoldScaleAxis", 3, &["InferType"], |m, f| {
            Ok(fold_scale_axis::backward_fold_scale_axis(&mut m.store, f))
        }),
        function_pass("ForwardFoldScaleAxis", 3, &["InferType"], |m, f| {
            Ok(fold_scale_axis::forward_fold_scale_axis(&mut m.store, f))
        }),
        function_pass("ToANormalForm", 1, &[], |m, f| Ok(to_anf::to_a_normal_form(&mut m.store, f))),
        // TVM's split: DeadCodeElimination (a module pass) drops unused `let`s in
        // every function; RemoveUnusedFunctions drops the globals `@main` cannot reach.
        ModulePass::new(PassInfo::new("DeadCodeElimination", 1, &["InferType"]), |mut m: IRModule, _: &PassContext| {
            dead_code::dead_code_elimination(&mut m);
            Ok(m)
        })
        .arc(),
        ModulePass::new(PassInfo::new("RemoveUnusedFunctions", 1, &[]), |mut m: IRModule, _: &PassContext| {
            dead_code::remove_unused_functions(&mut m);
            Ok(m)
        })
        .arc(),
        FunctionPass::new(PassInfo::new("FuseOps", 0, &["InferType"]), |m: &mut IRModule, f, ctx: &PassContext| {
            // At opt level 0 every operator stays in its own kernel, as in TVM.
            let depth = if ctx.opt_level == 0 {
                1
            } else {
                ctx.config_int("relay.FuseOps.max_depth").unwrap_or(fuse_ops::DEFAULT_MAX_DEPTH as i64).max(1) as usize
            };
            Ok(fuse_ops::fuse_function(&mut m.store, f, depth)?)
        })
        .arc(),
    ];
    // FoldScaleAxis is a Sequential of the backward and the forward pass (the
    // seeds' example), then FoldConstant, so the scaled weights are constants (TVM's).
    let mut halves: Vec<Arc<dyn Pass>> =
        v.iter().filter(|p| p.info().name.ends_with("FoldScaleAxis")).cloned().collect();
    halves.extend(v.iter().find(|p| p.info().name == "FoldConstant").cloned());
    v.push(Arc::new(Sequential::unchecked(PassInfo::new("FoldScaleAxis", 3, &[]), halves)));
    v
}

/// The standard pipeline, in TVM's `relay.build` order as far as the passes
/// exist: unused functions, inference simplification, layouts kiln's kernels
/// take (NHWC convolutions as NCHW), CSE, constant folding,
/// scale folding (with its own FoldConstant), expression simplification,
/// layout alteration and the folding of what it packed, dead code, fusion.
/// Passes above the context's opt level are skipped.
pub fn default_pipeline() -> Result<Sequential, PassError> {
    Sequential::from_names("DefaultPipeline", &DEFAULT_PIPELINE)
}

/// The default pipeline for a GPU target: the same passes, with
/// `SplitConvReduction` before `AlterOpLayout` (split-K for convolutions too
/// small to fill the GPU; see [`split_reduction`]).
pub fn gpu_pipeline() -> Result<Sequential, PassError> {
    let mut names = DEFAULT_PIPELINE.to_vec();
    // Bytes between kernels: measured on CPUs only; bf16 products: AMX tiles.
    names.retain(|&n| n != "ByteActivations" && n != "Bf16Precision");
    let at = names.iter().position(|&n| n == "AlterOpLayout").unwrap_or(names.len());
    names.insert(at, "SplitConvReduction");
    Sequential::from_names("GpuPipeline", &names)
}

const DEFAULT_PIPELINE: [&str; 18] = [
    "RemoveUnusedFunctions",
    "SimplifyInference",
    "ConvertLayout",
    "EliminateCommonSubexpr",
    "FoldConstant",
    "FoldScaleAxis",
    "SimplifyExpr",
    "InferType",
    "IntegerConv2d",
    "Bf16Precision",
    "AlterOpLayout",
    "FoldConstant",
    "DeadCodeElimination",
    "InferType",
    "FuseOps",
    "InferType",
    "ByteActivations",
    "InferType",
];
