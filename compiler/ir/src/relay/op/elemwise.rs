//! Elementwise and broadcasting operators: arithmetic, comparisons of the
//! unary math functions, `clip`, `cast`, `nn.relu`.

use super::pending::{eval_pending, rel_pending};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrKind, AttrSpec};

pub(super) fn register(defs: &mut Vec<OpDef>) {
    let binary: [(&'static str, &'static str); 7] = [
        ("add", "Elementwise sum with NumPy broadcasting."),
        ("subtract", "Elementwise difference with NumPy broadcasting."),
        ("multiply", "Elementwise product with NumPy broadcasting."),
        ("divide", "Elementwise quotient with NumPy broadcasting (integer division truncates)."),
        ("maximum", "Elementwise maximum with NumPy broadcasting."),
        ("minimum", "Elementwise minimum with NumPy broadcasting."),
        ("power", "Elementwise power `lhs ^ rhs` with NumPy broadcasting."),
    ];
    for (name, doc) in binary {
        defs.push(OpDef::new(name, &["lhs", "rhs"], OpPattern::Broadcast, rel_pending, eval_pending, doc));
    }
    let unary: [(&'static str, &'static str); 9] = [
        ("negative", "Elementwise negation."),
        ("exp", "Elementwise e^x."),
        ("log", "Elementwise natural logarithm."),
        ("sqrt", "Elementwise square root."),
        ("rsqrt", "Elementwise 1/sqrt(x)."),
        ("tanh", "Elementwise hyperbolic tangent."),
        ("sigmoid", "Elementwise 1/(1+e^-x)."),
        ("erf", "Elementwise Gauss error function."),
        ("nn.relu", "Elementwise max(x, 0)."),
    ];
    for (name, doc) in unary {
        defs.push(OpDef::new(name, &["data"], OpPattern::ElemWise, rel_pending, eval_pending, doc));
    }
    defs.push(
        OpDef::new("clip", &["data"], OpPattern::ElemWise, rel_pending, eval_pending, "Clamp to [a_min, a_max].")
            .attr(AttrSpec::required("a_min", AttrKind::Float))
            .attr(AttrSpec::required("a_max", AttrKind::Float)),
    );
    defs.push(
        OpDef::new("cast", &["data"], OpPattern::ElemWise, rel_pending, eval_pending, "Convert to another dtype.")
            .attr(AttrSpec::required("dtype", AttrKind::DType)),
    );
}
