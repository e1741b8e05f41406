//! Reductions: `sum`, `mean`, `max`.

use super::pending::{eval_pending, rel_pending};
use super::{OpDef, OpPattern};
use crate::attrs::AttrSpec;

pub(super) fn register(defs: &mut Vec<OpDef>) {
    let ops: [(&'static str, &'static str); 3] = [
        ("sum", "Sum over `axis` (all axes when None)."),
        ("mean", "Arithmetic mean over `axis` (all axes when None)."),
        ("max", "Maximum over `axis` (all axes when None)."),
    ];
    for (name, doc) in ops {
        defs.push(
            OpDef::new(name, &["data"], OpPattern::CommReduce, rel_pending, eval_pending, doc)
                .attr(AttrSpec::opt_ints("axis"))
                .attr(AttrSpec::bool("keepdims", false))
                .attr(AttrSpec::bool("exclude", false)),
        );
    }
}
