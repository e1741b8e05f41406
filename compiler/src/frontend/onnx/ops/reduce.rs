//! Reductions (`Reduce*` with axes as attribute or input, `keepdims`,
//! `noop_with_empty_axes`), ArgMax/ArgMin, CumSum, Einsum and TopK.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::shape::{inverse_permutation, norm_axis};
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
    t.add(&["CumSum"], cum_sum, &["exclusive", "reverse"]);
    t.add(&["Einsum"], einsum, &["equation"]);
    t.add(&["TopK"], top_k, &["axis", "largest", "sorted"]);
}

/// Longest axis CumSum handles: its `n × n` triangular product grows as n².
const CUMSUM_MAX_AXIS: usize = 1 << 12;

/// CumSum along a constant axis as a product with a constant triangular
/// matrix (`T[k][i] = 1` where element `k` counts towards position `i`):
/// `exclusive` drops the diagonal, `reverse` mirrors it. Integers go
/// through float64 (exact below 2^53) and back.
fn cum_sum(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let axis = im.const_ints(node, 1, "the axis")?.ok_or_else(|| node.err("missing input 1 (axis)"))?;
    let [axis] = axis[..] else { return Err(node.err("the axis must be a single value")) };
    let shape = im.shape_of(node, x)?;
    let rank = shape.len() as i64;
    let axis = norm_axis(node, axis, shape.len())?;
    let n = shape[axis];
    if n > CUMSUM_MAX_AXIS {
        return Err(node.err(format!("an axis of {n} elements is longer than the {CUMSUM_MAX_AXIS} CumSum supports")));
    }
    let (exclusive, reverse) = (node.int("exclusive", 0)? != 0, node.int("reverse", 0)? != 0);
    let dt = im.dtype_of(node, x)?;
    let work = if dt.is_float() {
        dt
    } else if dt.is_int() {
        DataType::F64
    } else {
        return Err(node.err(format!("needs a numeric input, found {dt}")));
    };
    let mut perm: Vec<i64> = (0..rank).filter(|&d| d != axis as i64).collect();
    perm.push(axis as i64);
    let last = axis as i64 == rank - 1;
    let mut y = super::math::cast_to(im, node, x, work)?;
    if !last {
        y = im.call(node, "transpose", vec![y], attrs(&[("axes", AttrValue::Ints(perm.clone()))]))?;
    }
    let tri: Vec<f64> = (0..n * n)
        .map(|p| {
            let (k, i) = (p / n, p % n);
            let counts = match (reverse, exclusive) {
                (false, false) => k <= i,
                (false, true) => k < i,
                (true, false) => k >= i,
                (true, true) => k > i,
            };
            counts as u8 as f64
        })
        .collect();
    let t = im.constant(Tensor::from_f64(work, vec![n, n], &tri));
    y = super::nn::matmul_of(im, node, y, t)?;
    if !last {
        let back = attrs(&[("axes", AttrValue::Ints(inverse_permutation(&perm)))]);
        y = im.call(node, "transpose", vec![y], back)?;
    }
    one(super::math::cast_to(im, node, y, dt)?)
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

/// The labels of one Einsum term over an operand of rank `rank`: letters,
/// and `...` expanded to the trailing `ell` labels of `ellipsis` (so that
/// ellipsis dimensions broadcast right-aligned, as NumPy does).
fn einsum_labels(node: &Node, term: &str, rank: usize, ellipsis: &[char]) -> Result<Vec<char>, OnnxError> {
    let letters: Vec<char> = term.replace("...", "").chars().collect();
    if letters.iter().any(|c| !c.is_ascii_alphabetic()) {
        return Err(node.err(format!("term `{term}` of the equation has a character that is not a letter")));
    }
    if !term.contains("...") {
        if letters.len() != rank {
            return Err(node.err(format!("term `{term}` names {} axes of an operand of rank {rank}", letters.len())));
        }
        return Ok(letters);
    }
    let ell = rank.checked_sub(letters.len()).filter(|&e| e <= ellipsis.len());
    let ell = ell.ok_or_else(|| node.err(format!("term `{term}` does not fit an operand of rank {rank}")))?;
    let at = term.find("...").map_or(0, |i| term[..i].chars().count());
    let mut out = letters[..at].to_vec();
    out.extend_from_slice(&ellipsis[ellipsis.len() - ell..]);
    out.extend_from_slice(&letters[at..]);
    Ok(out)
}

/// Einsum without repeated labels in one term (no diagonals): each operand
/// transposed and reshaped onto every label of the equation, the operands
/// multiplied with broadcasting, and the labels missing from the output
/// summed away.
fn einsum(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let xs = im.inputs(node)?;
    let eq: String = node.string("equation")?.ok_or_else(|| node.err("missing attribute `equation`"))?;
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != xs.len() || xs.is_empty() {
        return Err(node.err(format!("the equation has {} terms for {} inputs", terms.len(), xs.len())));
    }
    let shapes: Vec<Vec<usize>> = xs.iter().map(|&x| im.shape_of(node, x)).collect::<Result<_, _>>()?;
    let max_ell = terms
        .iter()
        .zip(&shapes)
        .filter(|(t, _)| t.contains("..."))
        .map(|(t, s)| s.len().saturating_sub(t.replace("...", "").len()))
        .max()
        .unwrap_or(0);
    // Ellipsis dimensions get labels no equation uses.
    let ellipsis: Vec<char> = (0..max_ell).map(|k| char::from_u32(0x2460 + k as u32).unwrap_or('?')).collect();
    let labels: Vec<Vec<char>> =
        terms.iter().zip(&shapes).map(|(t, s)| einsum_labels(node, t, s.len(), &ellipsis)).collect::<Result<_, _>>()?;
    for l in &labels {
        let mut seen = std::collections::HashSet::new();
        if let Some(c) = l.iter().find(|c| !seen.insert(**c)) {
            return Err(node.err(format!("label `{c}` repeats in one term (diagonals are not supported)")));
        }
    }
    let output: Vec<char> = match &rhs {
        Some(r) => {
            let ell_out = if r.contains("...") { max_ell } else { 0 };
            einsum_labels(node, r, r.replace("...", "").chars().count() + ell_out, &ellipsis)?
        }
        None => {
            // Implicit output: the ellipsis, then the labels used once, alphabetically.
            let mut once: Vec<char> = labels.iter().flatten().copied().filter(|c| c.is_ascii_alphabetic()).collect();
            once.sort_unstable();
            let single: Vec<char> =
                once.iter().copied().filter(|c| once.iter().filter(|d| *d == c).count() == 1).collect();
            ellipsis.iter().copied().chain(single).collect()
        }
    };
    if let Some(c) = output.iter().find(|c| !labels.iter().flatten().any(|d| d == *c)) {
        return Err(node.err(format!("output label `{c}` is not in any input term")));
    }
    // Every label: the output's first, then the summed ones.
    let mut all = output.clone();
    for &c in labels.iter().flatten() {
        if !all.contains(&c) {
            all.push(c);
        }
    }
    let mut size = vec![1usize; all.len()];
    for (l, s) in labels.iter().zip(&shapes) {
        for (c, &d) in l.iter().zip(s) {
            let k = all.iter().position(|a| a == c).unwrap_or(0);
            if size[k] != 1 && d != 1 && size[k] != d {
                return Err(node.err(format!("label `{c}` has sizes {} and {d}", size[k])));
            }
            size[k] = size[k].max(d);
        }
    }
    let mut product: Option<ExprId> = None;
    for ((&x, l), s) in xs.iter().zip(&labels).zip(&shapes) {
        // Axes in the order of `all`, then size-1 axes for the labels it lacks.
        let mut order: Vec<usize> = (0..l.len()).collect();
        order.sort_by_key(|&k| all.iter().position(|a| *a == l[k]));
        let mut y = x;
        if order.iter().enumerate().any(|(k, &o)| k != o) {
            let perm: Vec<i64> = order.iter().map(|&o| o as i64).collect();
            y = im.call(node, "transpose", vec![y], attrs(&[("axes", AttrValue::Ints(perm))]))?;
        }
        let full: Vec<usize> = all.iter().map(|a| l.iter().position(|c| c == a).map_or(1, |k| s[k])).collect();
        y = super::shape::reshape_to(im, node, y, &full)?;
        product = Some(match product {
            Some(p) => im.op(node, "multiply", vec![p, y])?,
            None => y,
        });
    }
    let mut y = product.ok_or_else(|| node.err("no inputs"))?;
    let full: Vec<usize> = size.clone();
    if im.shape_of(node, y)? != full {
        let s: Vec<i64> = full.iter().map(|&d| d as i64).collect();
        y = im.call(node, "broadcast_to", vec![y], attrs(&[("shape", AttrValue::Ints(s))]))?;
    }
    if all.len() > output.len() {
        let summed: Vec<i64> = (output.len()..all.len()).map(|k| k as i64).collect();
        let a = attrs(&[("axis", AttrValue::Ints(summed)), ("keepdims", AttrValue::Bool(false))]);
        y = im.call(node, "sum", vec![y], a)?;
    }
    one(y)
}

/// Longest axis TopK handles: it compares every pair of elements (n²).
const TOPK_MAX_AXIS: usize = 1 << 12;

/// TopK without sorting: each element's rank is the number of elements that
/// beat it (larger — or smaller for `largest=0` — or equal and earlier, so
/// ties keep index order as ONNX requires); the element of rank `r` is
/// output `r`. Exact for every type; `n²` comparisons per row.
fn top_k(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let k = match im.const_ints(node, 1, "K")? {
        Some(v) if v.len() == 1 => v[0],
        Some(_) => return Err(node.err("K must be a single value")),
        None => node.int("k", -1)?,
    };
    let shape = im.shape_of(node, x)?;
    let rank = shape.len() as i64;
    let axis = norm_axis(node, node.int("axis", -1)?, shape.len())?;
    let n = shape[axis];
    if k < 0 || k as usize > n {
        return Err(node.err(format!("K={k} is not between 0 and the axis size {n}")));
    }
    if n > TOPK_MAX_AXIS {
        return Err(node.err(format!("an axis of {n} elements is longer than the {TOPK_MAX_AXIS} TopK supports")));
    }
    let k = k as usize;
    let dt = im.dtype_of(node, x)?;
    let largest = node.int("largest", 1)? != 0;
    // The axis last.
    let mut perm: Vec<i64> = (0..rank).filter(|&d| d != axis as i64).collect();
    perm.push(axis as i64);
    let last = axis as i64 == rank - 1;
    let xt =
        if last { x } else { im.call(node, "transpose", vec![x], attrs(&[("axes", AttrValue::Ints(perm.clone()))]))? };
    let lead: Vec<usize> = perm[..perm.len() - 1].iter().map(|&d| shape[d as usize]).collect();
    let column = |im: &mut Importer, v: ExprId, at_end: bool| -> Result<ExprId, OnnxError> {
        let mut s = lead.clone();
        s.extend(if at_end { [1, n] } else { [n, 1] });
        super::shape::reshape_to(im, node, v, &s)
    };
    let xi = column(im, xt, false)?; // [..., n_i, 1]
    let xj = column(im, xt, true)?; // [..., 1, n_j]
    let beats = im.op(node, if largest { "greater" } else { "less" }, vec![xj, xi])?;
    let same = im.op(node, "equal", vec![xj, xi])?;
    let earlier: Vec<f64> = (0..n * n).map(|p| ((p % n) < (p / n)) as u8 as f64).collect();
    let earlier = im.constant(Tensor::from_f64(DataType::Bool, vec![n, n], &earlier));
    let tie = im.op(node, "logical_and", vec![same, earlier])?;
    let before = im.op(node, "logical_or", vec![beats, tie])?;
    let before = super::math::cast_to(im, node, before, DataType::I64)?;
    let sum_j = attrs(&[("axis", AttrValue::Ints(vec![-1])), ("keepdims", AttrValue::Bool(true))]);
    let ranks = im.call(node, "sum", vec![before], sum_j)?; // [..., n, 1]
    let slots: Vec<f64> = (0..k).map(|v| v as f64).collect();
    let slots = im.constant(Tensor::from_f64(DataType::I64, vec![1, k], &slots));
    let hit = im.op(node, "equal", vec![ranks, slots])?; // [..., n, k]
    let sum_i = || attrs(&[("axis", AttrValue::Ints(vec![-2])), ("keepdims", AttrValue::Bool(false))]);
    let zero = im.scalar(dt, 0.0);
    let picked = im.op(node, "where", vec![hit, xi, zero])?;
    let mut values = im.call(node, "sum", vec![picked], sum_i())?;
    let positions: Vec<f64> = (0..n).map(|v| v as f64).collect();
    let positions = im.constant(Tensor::from_f64(DataType::I64, vec![n, 1], &positions));
    let zero_i = im.scalar(DataType::I64, 0.0);
    let at = im.op(node, "where", vec![hit, positions, zero_i])?;
    let mut indices = im.call(node, "sum", vec![at], sum_i())?;
    if !last {
        let back = attrs(&[("axes", AttrValue::Ints(inverse_permutation(&perm)))]);
        values = im.call(node, "transpose", vec![values], back.clone())?;
        indices = im.call(node, "transpose", vec![indices], back)?;
    }
    Ok(vec![values, indices])
}
