//! Data movement and creation: `reshape`, `transpose`, `concatenate`, `split`,
//! `squeeze`, `expand_dims`, `strided_slice`, `nn.batch_flatten`, `zeros`, `ones`, `full`.

use super::pending::{eval_pending, rel_pending};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrKind, AttrSpec};
use crate::dtype::DataType;

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::*;
    let (r, e) = (rel_pending, eval_pending);
    defs.push(
        OpDef::new("reshape", &["data"], Injective, r, e, "Reshape; `0` copies an input dim, `-1` is inferred.")
            .attr(AttrSpec::required("newshape", AttrKind::Ints)),
    );
    defs.push(
        OpDef::new("transpose", &["data"], Injective, r, e, "Permute axes (reverse them when `axes` is None).")
            .attr(AttrSpec::opt_ints("axes")),
    );
    defs.push(
        OpDef::new("concatenate", &["data"], Injective, r, e, "Join the tensors of a tuple along `axis`.")
            .attr(AttrSpec::int("axis", 0)),
    );
    defs.push(
        OpDef::new(
            "split",
            &["data"],
            Injective,
            r,
            e,
            "Split into equal sections (an integer) or at indices (a list).",
        )
        .attr(AttrSpec::required("indices_or_sections", AttrKind::IntOrInts))
        .attr(AttrSpec::int("axis", 0)),
    );
    defs.push(
        OpDef::new("squeeze", &["data"], Injective, r, e, "Remove size-1 axes (all of them when `axis` is None).")
            .attr(AttrSpec::opt_ints("axis")),
    );
    defs.push(
        OpDef::new("expand_dims", &["data"], Broadcast, r, e, "Insert `num_newaxis` size-1 axes at `axis`.")
            .attr(AttrSpec::required("axis", AttrKind::Int))
            .attr(AttrSpec::int("num_newaxis", 1)),
    );
    defs.push(
        OpDef::new("strided_slice", &["data"], Injective, r, e, "Slice `begin:end:strides` on `axes` (all when None).")
            .attr(AttrSpec::required("begin", AttrKind::Ints))
            .attr(AttrSpec::required("end", AttrKind::Ints))
            .attr(AttrSpec::opt_ints("strides"))
            .attr(AttrSpec::opt_ints("axes")),
    );
    defs.push(OpDef::new("nn.batch_flatten", &["data"], Injective, r, e, "Flatten all but the first axis."));
    for (name, doc) in [("zeros", "A tensor of zeros."), ("ones", "A tensor of ones.")] {
        defs.push(
            OpDef::new(name, &[], ElemWise, r, e, doc)
                .attr(AttrSpec::required("shape", AttrKind::Ints))
                .attr(AttrSpec::dtype("dtype", DataType::F32)),
        );
    }
    defs.push(
        OpDef::new("full", &["fill_value"], ElemWise, r, e, "A tensor filled with the scalar `fill_value`.")
            .attr(AttrSpec::required("shape", AttrKind::Ints))
            .attr(AttrSpec::dtype("dtype", DataType::F32)),
    );
}
