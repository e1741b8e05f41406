//! Index-addressed reads and writes: GatherND, ScatterElements, ScatterND.
//!
//! GatherND is one `take` over the data flattened across the indexed axes,
//! at flat indices computed from the index tuples (constant or run-time).
//! The scatters need their indices at build time: for each output element
//! the importer lists the updates that write it, in order, and the output is
//! the data combined with one constant-index `take` of the updates per
//! "layer" of writers (the first writer of each element, then the second…),
//! so duplicates combine in ONNX's order under every reduction.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::tensor::strides;
use kiln_ir::{DataType, Tensor};

use super::shape::{checked_indices, norm_axis, reshape_to};
use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, ints_of, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(&["GatherND"], gather_nd, &["batch_dims"]);
    t.add(&["ScatterElements", "Scatter"], scatter_elements, &["axis", "reduction"]);
    t.add(&["ScatterND"], scatter_nd, &["reduction"]);
}

/// The most output elements a scatter builds its constant maps for.
const SCATTER_MAX_ELEMENTS: usize = 1 << 22;

/// An empty writer list per element of data of shape `ds`, refusing a
/// scatter too large for its build-time maps before making it.
fn no_writers(node: &Node, ds: &[usize]) -> Result<Vec<Vec<usize>>, OnnxError> {
    let total: usize = ds.iter().product();
    if total > SCATTER_MAX_ELEMENTS {
        return Err(
            node.err(format!("scattering into {total} elements is more than the {SCATTER_MAX_ELEMENTS} supported"))
        );
    }
    Ok(vec![Vec::new(); total])
}

fn gather_nd(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (data, indices) = (im.input(node, 0)?, im.input(node, 1)?);
    if node.int("batch_dims", 0)? != 0 {
        return Err(node.err("batch_dims other than 0 is not supported"));
    }
    let ds = im.shape_of(node, data)?;
    let is = im.shape_of(node, indices)?;
    let Some(&k) = is.last() else { return Err(node.err("indices must have at least one dimension")) };
    if k == 0 || k > ds.len() {
        return Err(node.err(format!("index tuples of {k} for data of rank {}", ds.len())));
    }
    let lead: usize = ds[..k].iter().product();
    let mut flat_shape = vec![lead];
    flat_shape.extend_from_slice(&ds[k..]);
    let flat_data = reshape_to(im, node, data, &flat_shape)?;
    let st = strides(&ds[..k]);
    let flat = match im.constant_value(indices).cloned() {
        Some(t) => {
            let idx = ints_of(&t);
            let mut out = Vec::with_capacity(idx.len() / k);
            for tuple in idx.chunks(k) {
                let mut f = 0usize;
                for (j, &v) in tuple.iter().enumerate() {
                    let n = ds[j] as i64;
                    if v < -n || v >= n {
                        return Err(node.err(format!("index {v} is out of range for axis {j} of size {n}")));
                    }
                    f += (if v < 0 { v + n } else { v }) as usize * st[j];
                }
                out.push(f as f64);
            }
            im.constant(Tensor::from_f64(DataType::I64, is[..is.len() - 1].to_vec(), &out))
        }
        None => {
            // Σ_j idx[…, j] · stride_j over the last axis, each index checked at run time.
            let idx = checked_indices(im, node, indices, &ds[..k])?;
            let st: Vec<f64> = st.iter().map(|&v| v as f64).collect();
            let st = im.constant(Tensor::from_f64(DataType::I64, vec![k], &st));
            let scaled = im.op(node, "multiply", vec![idx, st])?;
            let a = attrs(&[("axis", AttrValue::Ints(vec![-1])), ("keepdims", AttrValue::Bool(false))]);
            im.call(node, "sum", vec![scaled], a)?
        }
    };
    let a = attrs(&[("axis", AttrValue::Int(0)), ("mode", AttrValue::Str("clip".into()))]);
    one(im.call(node, "take", vec![flat_data, flat], a)?)
}

/// The reduction attribute as the Relay operator that combines (None: replace).
fn reduction(node: &Node) -> Result<Option<&'static str>, OnnxError> {
    Ok(match node.string("reduction")?.as_deref() {
        None | Some("none") => None,
        Some("add") => Some("add"),
        Some("mul") => Some("multiply"),
        Some("max") => Some("maximum"),
        Some("min") => Some("minimum"),
        Some(r) => return Err(node.err(format!("reduction `{r}` is not one of none, add, mul, max, min"))),
    })
}

/// `data` with the updates written where `writers` says: `writers[o]` are
/// the flat update positions that write output element `o`, in order.
fn apply_writes(
    im: &mut Importer,
    node: &Node,
    data: ExprId,
    updates: ExprId,
    writers: &[Vec<usize>],
) -> Result<ExprId, OnnxError> {
    let combine = reduction(node)?;
    let shape = im.shape_of(node, data)?;
    let total = writers.len();
    let n_upd: usize = im.shape_of(node, updates)?.iter().product();
    let flat_upd = reshape_to(im, node, updates, &[n_upd])?;
    let flat_data = reshape_to(im, node, data, &[total])?;
    let layers = match combine {
        // Replacing: only the last writer counts.
        None => 1,
        Some(_) => writers.iter().map(Vec::len).max().unwrap_or(0),
    };
    let mut out = flat_data;
    for layer in 0..layers {
        let pick = |w: &Vec<usize>| -> Option<usize> {
            if combine.is_none() {
                w.last().copied()
            } else {
                w.get(layer).copied()
            }
        };
        let map: Vec<f64> = writers.iter().map(|w| pick(w).map_or(0.0, |u| u as f64)).collect();
        let hit: Vec<f64> = writers.iter().map(|w| pick(w).is_some() as u8 as f64).collect();
        let map = im.constant(Tensor::from_f64(DataType::I64, vec![total], &map));
        let hit = im.constant(Tensor::from_f64(DataType::Bool, vec![total], &hit));
        let a = attrs(&[("axis", AttrValue::Int(0)), ("mode", AttrValue::Str("clip".into()))]);
        let taken = im.call(node, "take", vec![flat_upd, map], a)?;
        let value = match combine {
            Some(op) => im.op(node, op, vec![out, taken])?,
            None => taken,
        };
        out = im.op(node, "where", vec![hit, value, out])?;
    }
    reshape_to(im, node, out, &shape)
}

/// The constant indices of input 1, which scatters need at build time.
fn constant_indices(im: &Importer, node: &Node) -> Result<(Vec<i64>, Vec<usize>), OnnxError> {
    let t = im.const_input(node, 1, "the indices")?.ok_or_else(|| node.err("missing input 1 (indices)"))?;
    Ok((ints_of(&t), t.shape().to_vec()))
}

fn scatter_elements(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (data, updates) = (im.input(node, 0)?, im.input(node, 2)?);
    let (idx, is) = constant_indices(im, node)?;
    let ds = im.shape_of(node, data)?;
    if im.shape_of(node, updates)? != is || is.len() != ds.len() {
        return Err(
            node.err(format!("indices {is:?} and updates must have one shape, of the data's rank {}", ds.len()))
        );
    }
    let axis = norm_axis(node, node.int("axis", 0)?, ds.len())?;
    let (dst, ist) = (strides(&ds), strides(&is));
    let mut writers = no_writers(node, &ds)?;
    for (u, &v) in idx.iter().enumerate() {
        let n = ds[axis] as i64;
        if v < -n || v >= n {
            return Err(node.err(format!("index {v} is out of range for axis {axis} of size {n}")));
        }
        let mut o = 0;
        for d in 0..ds.len() {
            let c = if d == axis { (if v < 0 { v + n } else { v }) as usize } else { u / ist[d] % is[d] };
            if c >= ds[d] {
                return Err(node.err(format!("update {u} falls outside the data along axis {d}")));
            }
            o += c * dst[d];
        }
        writers[o].push(u);
    }
    one(apply_writes(im, node, data, updates, &writers)?)
}

fn scatter_nd(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (data, updates) = (im.input(node, 0)?, im.input(node, 2)?);
    let (idx, is) = constant_indices(im, node)?;
    let ds = im.shape_of(node, data)?;
    let Some(&k) = is.last() else { return Err(node.err("indices must have at least one dimension")) };
    if k == 0 || k > ds.len() {
        return Err(node.err(format!("index tuples of {k} for data of rank {}", ds.len())));
    }
    let mut want = is[..is.len() - 1].to_vec();
    want.extend_from_slice(&ds[k..]);
    if im.shape_of(node, updates)? != want {
        return Err(node.err(format!("updates must have shape {want:?}")));
    }
    let inner: usize = ds[k..].iter().product();
    let st = strides(&ds[..k]);
    let mut writers = no_writers(node, &ds)?;
    for (p, tuple) in idx.chunks(k).enumerate() {
        let mut base = 0;
        for (j, &v) in tuple.iter().enumerate() {
            let n = ds[j] as i64;
            if v < -n || v >= n {
                return Err(node.err(format!("index {v} is out of range for axis {j} of size {n}")));
            }
            base += (if v < 0 { v + n } else { v }) as usize * st[j];
        }
        for q in 0..inner {
            writers[base * inner + q].push(p * inner + q);
        }
    }
    one(apply_writes(im, node, data, updates, &writers)?)
}
