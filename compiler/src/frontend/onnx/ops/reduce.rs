//! Reductions (`Reduce*` with axes as attribute or input, `keepdims`,
//! `noop_with_empty_axes`) and ArgMax/ArgMin.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;

use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(
        &[
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSumSquare",
        ],
        reduce,
        &["axes", "keepdims", "noop_with_empty_axes"],
    );
    t.add(&["ArgMax", "ArgMin"], arg_reduce, &["axis", "keepdims", "select_last_index"]);
}

fn reduce(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let rank = im.rank_of(node, x)? as i64;
    let axes = match node.ints("axes")? {
        Some(a) => Some(a),
        None => im.const_ints(node, 1, "axes")?,
    };
    let axes = axes.filter(|a| !a.is_empty());
    if axes.is_none() && node.int("noop_with_empty_axes", 0)? != 0 {
        return one(x);
    }
    let axes: Vec<i64> = match axes {
        Some(a) => a
            .iter()
            .map(|&v| {
                let n = if v < 0 { v + rank } else { v };
                if (0..rank).contains(&n) {
                    Ok(n)
                } else {
                    Err(node.err(format!("axis {v} is out of range for rank {rank}")))
                }
            })
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    let keep = node.int("keepdims", 1)? != 0;
    let red = |im: &mut Importer, op: &str, v: ExprId| {
        im.call(
            node,
            op,
            vec![v],
            attrs(&[("axis", AttrValue::Ints(axes.clone())), ("keepdims", AttrValue::Bool(keep))]),
        )
    };
    let y = match node.op() {
        "ReduceSum" => red(im, "sum", x)?,
        "ReduceMean" => red(im, "mean", x)?,
        "ReduceMax" => red(im, "max", x)?,
        "ReduceMin" => red(im, "min", x)?,
        "ReduceProd" => red(im, "prod", x)?,
        "ReduceL1" => {
            let a = im.op(node, "abs", vec![x])?;
            red(im, "sum", a)?
        }
        "ReduceSumSquare" | "ReduceL2" => {
            let sq = im.op(node, "multiply", vec![x, x])?;
            let s = red(im, "sum", sq)?;
            if node.op() == "ReduceL2" {
                im.op(node, "sqrt", vec![s])?
            } else {
                s
            }
        }
        "ReduceLogSum" => {
            let s = red(im, "sum", x)?;
            im.op(node, "log", vec![s])?
        }
        _ => {
            // ReduceLogSumExp: m + ln Σ e^(x − m), m the max (kept for broadcasting).
            let ka = attrs(&[("axis", AttrValue::Ints(axes.clone())), ("keepdims", AttrValue::Bool(true))]);
            let m = im.call(node, "max", vec![x], ka)?;
            let c = im.op(node, "subtract", vec![x, m])?;
            let e = im.op(node, "exp", vec![c])?;
            let s = red(im, "sum", e)?;
            let l = im.op(node, "log", vec![s])?;
            // The kept max has the shape of the result, less the dropped unit axes.
            let shape = im.shape_of(node, l)?;
            let m = super::shape::reshape_to(im, node, m, &shape)?;
            im.op(node, "add", vec![l, m])?
        }
    };
    one(y)
}

fn arg_reduce(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let a = attrs(&[
        ("axis", AttrValue::Int(node.int("axis", 0)?)),
        ("keepdims", AttrValue::Bool(node.int("keepdims", 1)? != 0)),
        ("select_last_index", AttrValue::Bool(node.int("select_last_index", 0)? != 0)),
    ]);
    one(im.call(node, if node.op() == "ArgMax" { "argmax" } else { "argmin" }, vec![x], a)?)
}
