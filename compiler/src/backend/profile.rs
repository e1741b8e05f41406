//! What `kiln bench --profile` says about a plan's kernels beyond their
//! times: each call's class of work (stem, depthwise, 1 × 1, …) and the
//! floating-point operations it executes, so that a class taking more of the
//! time than of the work stands out.

use super::aot::{ExecutorPlan, KernelCall, Storage, TensorSlot};

/// The kinds of kernel a profile groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelClass {
    /// A convolution over at most 4 input channels (an image's RGB).
    Stem,
    /// One input channel per group.
    Depthwise,
    /// A 1 × 1 convolution.
    Pointwise,
    /// Any other convolution computed directly (3 × 3, 7 × 7, grouped).
    SpatialConv,
    /// The transforms and batched products of a Winograd convolution.
    Winograd,
    /// A product with a constant weight (dense, matmul, a linear layer).
    Dense,
    /// Products of two activations and the softmax between them.
    Attention,
    /// Pooling.
    Pooling,
    /// Element-wise and layout kernels, normalizations, reductions.
    Other,
}

impl KernelClass {
    /// The name the profile prints.
    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Stem => "stem",
            KernelClass::Depthwise => "depthwise",
            KernelClass::Pointwise => "1x1",
            KernelClass::SpatialConv => "spatial conv",
            KernelClass::Winograd => "winograd",
            KernelClass::Dense => "dense",
            KernelClass::Attention => "attention",
            KernelClass::Pooling => "pooling",
            KernelClass::Other => "other",
        }
    }
}

/// The class of `call`: from its kernel's anchor operator, and for a
/// convolution from its constant weight's shape (`OIHW` or packed
/// `OIHW<k>o`: input channels per group at 1, the window at 2 and 3).
pub fn kernel_class(plan: &ExecutorPlan, call: &KernelCall) -> KernelClass {
    let kernel = &plan.kernels[call.kernel];
    match anchor_of(plan, call) {
        "nn.conv2d" => {
            let groups = kernel.attrs.get("conv2d.groups").and_then(|g| g.parse::<usize>().ok()).unwrap_or(1);
            match conv_weight(plan, call).map(|w| (w.shape[1], w.shape[2], w.shape[3])) {
                Some((1, ..)) if groups > 1 => KernelClass::Depthwise,
                Some((channels, ..)) if channels <= 4 && groups == 1 => KernelClass::Stem,
                Some((_, 1, 1)) => KernelClass::Pointwise,
                _ => KernelClass::SpatialConv,
            }
        }
        // The window is dims 2–3 of packed weights, 1–2 of OHWI (AMX) ones.
        "nn.contrib_conv2d_u8s8" | "nn.contrib_conv2d_bf16" => {
            let window = |w: &TensorSlot| match w.shape.len() {
                4 => (w.shape[1], w.shape[2]),
                _ => (w.shape[2], w.shape[3]),
            };
            match conv_weight(plan, call).map(window) {
                Some((1, 1)) => KernelClass::Pointwise,
                _ => KernelClass::SpatialConv,
            }
        }
        "nn.contrib_winograd_input_transform"
        | "nn.contrib_winograd_output_transform"
        | "nn.contrib_winograd_tiles_to_nchw" => KernelClass::Winograd,
        a if is_product(a) => product_class(plan, call),
        // A softmax is attention's only next to a product of two activations
        // (YOLO's distribution focal loss has one before a 1 × 1 convolution).
        "nn.softmax" | "nn.log_softmax" => {
            let next_to_attention_product = plan.calls.iter().any(|other| {
                // Neighbours first: a product's class scans the plan's calls.
                is_product(anchor_of(plan, other))
                    && (shares_tensor(plan, call_outputs(plan, call), call_inputs(plan, other))
                        || shares_tensor(plan, call_outputs(plan, other), call_inputs(plan, call)))
                    && product_class(plan, other) == KernelClass::Attention
            });
            if next_to_attention_product {
                KernelClass::Attention
            } else {
                KernelClass::Other
            }
        }
        a if a.contains("pool") => KernelClass::Pooling,
        _ => KernelClass::Other,
    }
}

/// The anchor operator of `call`'s kernel ("" when it has none).
fn anchor_of<'p>(plan: &'p ExecutorPlan, call: &KernelCall) -> &'p str {
    plan.kernels[call.kernel].attrs.get("anchor").map_or("", String::as_str)
}

/// Whether `anchor` is a matrix product (of a weight or of two activations).
fn is_product(anchor: &str) -> bool {
    matches!(
        anchor,
        "nn.batch_matmul" | "nn.contrib_batch_matmul_pack" | "nn.matmul" | "nn.dense" | "nn.contrib_dense_pack"
    )
}

/// The class of a product call: Winograd's middle step, a product with a
/// constant weight, or one of two activations (attention).
fn product_class(plan: &ExecutorPlan, call: &KernelCall) -> KernelClass {
    let inputs = call_inputs(plan, call);
    if inputs.iter().any(|&t| produced_by_winograd_transform(plan, t)) {
        KernelClass::Winograd
    } else if inputs.iter().any(|&t| matches!(plan.tensors[t].storage, Storage::Constant(_))) {
        KernelClass::Dense
    } else {
        KernelClass::Attention
    }
}

/// Whether a tensor of `written` (or the one it aliases) is among `read`.
fn shares_tensor(plan: &ExecutorPlan, written: &[usize], read: &[usize]) -> bool {
    let root = |t: usize| plan.tensors[t].alias_of.unwrap_or(t);
    written.iter().any(|&w| read.iter().any(|&r| root(r) == root(w)))
}

/// The weight of a convolution call: its first constant input of rank 4
/// (`OIHW`), 5 (packed `OIHW<k>o`) or 6 (int8 `[O/16, C/4, KH, KW, 16, 4]`);
/// `None` for a run-time weight.
pub fn conv_weight<'p>(plan: &'p ExecutorPlan, call: &KernelCall) -> Option<&'p TensorSlot> {
    call_inputs(plan, call)
        .iter()
        .map(|&t| &plan.tensors[t])
        .find(|t| matches!(t.storage, Storage::Constant(_)) && matches!(t.shape.len(), 4..=6))
}

/// The tensors `call` reads (its arguments before the kernel's outputs).
fn call_inputs<'c>(plan: &ExecutorPlan, call: &'c KernelCall) -> &'c [usize] {
    &call.args[..call.args.len().saturating_sub(plan.kernels[call.kernel].num_outputs)]
}

/// The tensors `call` writes (the kernel's outputs, its last arguments).
fn call_outputs<'c>(plan: &ExecutorPlan, call: &'c KernelCall) -> &'c [usize] {
    &call.args[call.args.len().saturating_sub(plan.kernels[call.kernel].num_outputs)..]
}

/// Whether tensor `t` is written by a Winograd input transform (the batched
/// product that reads it is the convolution's middle step).
fn produced_by_winograd_transform(plan: &ExecutorPlan, t: usize) -> bool {
    let t = plan.tensors[t].alias_of.unwrap_or(t);
    plan.calls.iter().any(|c| {
        let k = &plan.kernels[c.kernel];
        k.attrs.get("anchor").is_some_and(|a| a == "nn.contrib_winograd_input_transform")
            && call_outputs(plan, c).contains(&t)
    })
}

/// The floating-point operations of one call of each kernel: the fewer of
/// its operator's as lowered, before the schedule
/// ([`crate::schedule::LOWERED_FLOPS_ATTR`]: lanes a tile computes past a
/// row's end, a 7-wide depthwise row as 16, are not work the model asks
/// for) and its loops' as executed ([`kiln_ir::tir::float_ops`]: a Winograd
/// transform's products by constant zeros, simplified away, are not work
/// done). A kernel without the attribute (a GPU one) counts as executed; 0
/// where a loop's trip count is not constant.
pub fn kernel_flops(plan: &ExecutorPlan) -> Vec<u64> {
    let lowered =
        |k: &crate::tir::PrimFunc| k.attrs.get(crate::schedule::LOWERED_FLOPS_ATTR).and_then(|n| n.parse::<u64>().ok());
    plan.kernels
        .iter()
        .map(|k| match (lowered(k), kiln_ir::tir::float_ops(k)) {
            (Some(l), Some(e)) => l.min(e),
            (l, e) => l.or(e).unwrap_or(0),
        })
        .collect()
}

/// One class's line of the profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassShare {
    pub class: KernelClass,
    /// Microseconds over its calls.
    pub us: f64,
    /// Floating-point operations over its calls.
    pub flops: u64,
}

/// Time and work per class, given each call's time (`call_us[i]` for
/// `plan.calls[i]`) and each kernel's operations ([`kernel_flops`]), largest
/// time first.
pub fn class_shares(plan: &ExecutorPlan, call_us: &[f64], flops: &[u64]) -> Vec<ClassShare> {
    let mut shares: Vec<ClassShare> = Vec::new();
    for (call, &us) in plan.calls.iter().zip(call_us) {
        let class = kernel_class(plan, call);
        let work = flops[call.kernel];
        match shares.iter_mut().find(|s| s.class == class) {
            Some(s) => {
                s.us += us;
                s.flops += work;
            }
            None => shares.push(ClassShare { class, us, flops: work }),
        }
    }
    shares.sort_by(|a, b| b.us.total_cmp(&a.us));
    shares
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{kernel_class, KernelClass};
    use crate::transform::PassContext;

    /// The classes of the softmax calls of a Relay program.
    fn softmax_classes(text: &str) -> Vec<KernelClass> {
        let m = crate::relay::parse_module(text).unwrap();
        let (_, plan) = crate::build::optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3))).unwrap();
        let softmax = |c: &&crate::backend::aot::KernelCall| {
            plan.kernels[c.kernel].attrs.get("anchor").is_some_and(|a| a == "nn.softmax")
        };
        plan.calls.iter().filter(softmax).map(|c| kernel_class(&plan, c)).collect()
    }

    #[test]
    fn a_softmax_is_attention_only_between_products_of_activations() {
        let attention = "def @main(%q: Tensor[(2, 8, 16), float32], %k: Tensor[(2, 8, 16), float32], %v: Tensor[(2, 16, 8), float32]) {
  %0 = nn.batch_matmul(%q, %k, transpose_b=True);
  %1 = nn.softmax(%0);
  nn.batch_matmul(%1, %v, transpose_b=True)
}";
        assert_eq!(softmax_classes(attention), [KernelClass::Attention]);
        let alone = "def @main(%x: Tensor[(4, 16, 32), float32]) {\n  exp(nn.softmax(%x, axis=1))\n}";
        assert_eq!(softmax_classes(alone), [KernelClass::Other]);
    }
}
