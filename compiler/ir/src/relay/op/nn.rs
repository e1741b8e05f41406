//! Neural-network operators: dense and matmul, convolution, pooling,
//! normalization, softmax, dropout, bias_add.

use super::pending::{eval_pending, rel_pending};
use super::{OpDef, OpPattern};
use crate::attrs::AttrSpec;

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::*;
    let (r, e) = (rel_pending, eval_pending);
    defs.push(
        OpDef::new("nn.dense", &["data", "weight"], OutEWiseFusable, r, e, "`data · weightᵀ`; weight is [units, in].")
            .attr(AttrSpec::opt_int("units")),
    );
    defs.push(
        OpDef::new("nn.matmul", &["tensor_a", "tensor_b"], OutEWiseFusable, r, e, "Matrix product of 2-D tensors.")
            .attr(AttrSpec::opt_int("units"))
            .attr(AttrSpec::bool("transpose_a", false))
            .attr(AttrSpec::bool("transpose_b", false)),
    );
    defs.push(
        OpDef::new(
            "nn.batch_matmul",
            &["tensor_a", "tensor_b"],
            OutEWiseFusable,
            r,
            e,
            "Batched matrix product of 3-D tensors.",
        )
        .attr(AttrSpec::bool("transpose_a", false))
        .attr(AttrSpec::bool("transpose_b", true)),
    );
    defs.push(
        OpDef::new("nn.bias_add", &["data", "bias"], Broadcast, r, e, "Add a 1-D bias along `axis`.")
            .attr(AttrSpec::int("axis", 1)),
    );
    defs.push(
        OpDef::new("nn.conv2d", &["data", "weight"], OutEWiseFusable, r, e, "2-D convolution, NCHW data, OIHW weight.")
            .attr(AttrSpec::ints("strides", &[1, 1]))
            .attr(AttrSpec::ints("padding", &[0, 0, 0, 0]))
            .attr(AttrSpec::ints("dilation", &[1, 1]))
            .attr(AttrSpec::int("groups", 1))
            .attr(AttrSpec::opt_int("channels"))
            .attr(AttrSpec::opt_ints("kernel_size"))
            .attr(AttrSpec::str("data_layout", "NCHW"))
            .attr(AttrSpec::str("kernel_layout", "OIHW")),
    );
    for (name, doc) in [("nn.max_pool2d", "2-D max pooling, NCHW."), ("nn.avg_pool2d", "2-D average pooling, NCHW.")] {
        let mut def = OpDef::new(name, &["data"], OutEWiseFusable, r, e, doc)
            .attr(AttrSpec::ints("pool_size", &[1, 1]))
            .attr(AttrSpec::ints("strides", &[1, 1]))
            .attr(AttrSpec::ints("dilation", &[1, 1]))
            .attr(AttrSpec::ints("padding", &[0, 0, 0, 0]))
            .attr(AttrSpec::str("layout", "NCHW"))
            .attr(AttrSpec::bool("ceil_mode", false));
        if name == "nn.avg_pool2d" {
            def = def.attr(AttrSpec::bool("count_include_pad", false));
        }
        defs.push(def);
    }
    defs.push(
        OpDef::new("nn.global_avg_pool2d", &["data"], OutEWiseFusable, r, e, "Mean over H and W, NCHW.")
            .attr(AttrSpec::str("layout", "NCHW")),
    );
    defs.push(
        OpDef::new(
            "nn.batch_norm",
            &["data", "gamma", "beta", "moving_mean", "moving_var"],
            Opaque,
            r,
            e,
            "Inference batch norm; returns (output, moving_mean, moving_var).",
        )
        .attr(AttrSpec::int("axis", 1))
        .attr(AttrSpec::float("epsilon", 1e-5))
        .attr(AttrSpec::bool("center", true))
        .attr(AttrSpec::bool("scale", true)),
    );
    defs.push(
        OpDef::new("nn.layer_norm", &["data", "gamma", "beta"], Opaque, r, e, "Layer normalization over `axis`.")
            .attr(AttrSpec::int("axis", -1))
            .attr(AttrSpec::float("epsilon", 1e-5))
            .attr(AttrSpec::bool("center", true))
            .attr(AttrSpec::bool("scale", true)),
    );
    defs.push(
        OpDef::new("nn.softmax", &["data"], Opaque, r, e, "Softmax along `axis`.").attr(AttrSpec::int("axis", -1)),
    );
    defs.push(
        OpDef::new("nn.dropout", &["data"], Opaque, r, e, "Dropout (identity at inference); returns (output, mask).")
            .attr(AttrSpec::float("rate", 0.5)),
    );
}
