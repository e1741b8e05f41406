//! Helpers shared by the operator definitions: argument checks, NumPy
//! broadcasting, axis normalization, multi-index iteration.

use crate::dtype::DataType;
use crate::relay::ty::{TensorType, Type};
use crate::relay::value::Value;
use crate::tensor::{strides, Tensor};
use crate::OpError;

/// The `i`-th argument as a tensor type.
pub(crate) fn tensor_arg<'a>(args: &'a [Type], i: usize, what: &str) -> Result<&'a TensorType, OpError> {
    match args.get(i) {
        Some(Type::Tensor(t)) => Ok(t),
        Some(other) => Err(format!("{what} must be a tensor, found {other}").into()),
        None => Err(format!("missing argument {what}").into()),
    }
}

/// The `i`-th argument value as a tensor.
pub(crate) fn tensor_val(args: &[Value], i: usize) -> Result<&Tensor, OpError> {
    args.get(i).ok_or_else(|| format!("missing argument {i}"))?.tensor()
}

/// Shape text as in TVM messages: `(1, 3, 224, 224)`.
pub(crate) fn shape_str(s: &[usize]) -> String {
    let inner: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    if s.len() == 1 {
        format!("({},)", inner[0])
    } else {
        format!("({})", inner.join(", "))
    }
}

/// Check that two dtypes agree.
pub(crate) fn same_dtype(a: DataType, b: DataType) -> Result<DataType, OpError> {
    if a == b {
        Ok(a)
    } else {
        Err(format!("dtype mismatch: {a} vs {b}").into())
    }
}

/// Require a floating-point dtype.
pub(crate) fn float_dtype(t: &TensorType, what: &str) -> Result<(), OpError> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(format!("{what} must be a floating-point tensor, found {}", t.dtype).into())
    }
}

/// The NumPy broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, OpError> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("cannot broadcast shapes {} and {}", shape_str(a), shape_str(b)).into()),
        };
    }
    Ok(out)
}

/// Normalize a possibly negative axis of a rank-`ndim` tensor.
pub(crate) fn norm_axis(axis: i64, ndim: usize) -> Result<usize, OpError> {
    let a = if axis < 0 { axis + ndim as i64 } else { axis };
    if a < 0 || a >= ndim as i64 {
        Err(format!("axis {axis} is out of range for a tensor of rank {ndim}").into())
    } else {
        Ok(a as usize)
    }
}

/// For each flat output index, the flat index into an input of shape `from`
/// broadcast to `to` (right-aligned; size-1 dims repeat).
pub(crate) fn broadcast_index_map(from: &[usize], to: &[usize]) -> Vec<usize> {
    let total: usize = to.iter().product();
    if from == to {
        return (0..total).collect();
    }
    let step = broadcast_steps(from, to.len());
    let mut out = Vec::with_capacity(total);
    let (inner, inner_step) = (to.last().copied().unwrap_or(1), step.last().copied().unwrap_or(0));
    for_each_row(&to[..to.len().saturating_sub(1)], [&step], |[row]| {
        out.extend((0..inner).map(|t| row + t * inner_step));
    });
    out
}

/// The offset into an input of shape `from`, broadcast to a rank-`n`
/// output, that one step along each output axis moves: 0 where the input
/// repeats (a missing or size-1 axis).
fn broadcast_steps(from: &[usize], n: usize) -> Vec<usize> {
    let fs = strides(from);
    (0..n)
        .map(|k| match (k + from.len()).checked_sub(n) {
            Some(d) if from[d] != 1 => fs[d],
            _ => 0,
        })
        .collect()
}

/// Calls `f` once per row of the row-major index space `outer` (once when
/// it is empty), with each of `K` operands' offsets there: the sum over
/// axes of index × that operand's step. The offsets move by odometer, one
/// add per axis that turns.
pub(crate) fn for_each_row<const K: usize>(outer: &[usize], steps: [&[usize]; K], mut f: impl FnMut([usize; K])) {
    let rows: usize = outer.iter().product();
    let mut idx = vec![0usize; outer.len()];
    let mut at = [0usize; K];
    for _ in 0..rows {
        f(at);
        for k in (0..outer.len()).rev() {
            idx[k] += 1;
            for (o, s) in at.iter_mut().zip(&steps) {
                *o += s[k];
            }
            if idx[k] < outer[k] {
                break;
            }
            for (o, s) in at.iter_mut().zip(&steps) {
                *o -= s[k] * outer[k];
            }
            idx[k] = 0;
        }
    }
}

/// Calls `f(i, j)` for every element of `to`, row-major, with its flat
/// indices into inputs of shapes `a` and `b` broadcast to `to` — what
/// [`broadcast_index_map`] gives for each, without materializing the maps.
/// (The operators walk [`for_each_broadcast_run`]; this spells out what it means.)
#[cfg(test)]
pub(crate) fn for_each_broadcast_pair(a: &[usize], b: &[usize], to: &[usize], mut f: impl FnMut(usize, usize)) {
    for_each_broadcast_run(a, b, to, |run| {
        for t in 0..run.len {
            f(run.a + t * run.a_step, run.b + t * run.b_step);
        }
    });
}

/// A run of consecutive output elements along which both operands'
/// indices move by fixed steps: element `t` of it reads `a + t·a_step` and
/// `b + t·b_step` (a step of 0 repeats a broadcast element).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BroadcastRun {
    pub a: usize,
    pub a_step: usize,
    pub b: usize,
    pub b_step: usize,
    pub len: usize,
}

/// [`for_each_broadcast_pair`] a run at a time, in row-major order: a
/// caller can then compute a run as one loop over slices (a weight times a
/// per-channel scale is a long run of steps 1 and 0).
pub(crate) fn for_each_broadcast_run(a: &[usize], b: &[usize], to: &[usize], mut f: impl FnMut(BroadcastRun)) {
    let total: usize = to.iter().product();
    if total == 0 {
        return;
    }
    let (mut to, mut sa, mut sb) = (to.to_vec(), broadcast_steps(a, to.len()), broadcast_steps(b, to.len()));
    // Merge each axis into the one outside it where both operands walk them
    // as one (a weight times a per-channel scale: [O, I·H·W] by [O, 1]), so
    // the innermost run is long and the rows below are few.
    let mut k = to.len();
    while k > 1 {
        k -= 1;
        let (n, m) = (to[k], to[k - 1]);
        if n == 1 || (sa[k - 1] == sa[k] * n && sb[k - 1] == sb[k] * n) || m == 1 {
            let (ia, ib) = if n == 1 { (sa[k - 1], sb[k - 1]) } else { (sa[k], sb[k]) };
            to[k - 1] = m * n;
            sa[k - 1] = ia;
            sb[k - 1] = ib;
            to.remove(k);
            sa.remove(k);
            sb.remove(k);
        }
    }
    let outer = to.len().saturating_sub(1);
    let len = to.last().copied().unwrap_or(1);
    let (a_step, b_step) = (sa.last().copied().unwrap_or(0), sb.last().copied().unwrap_or(0));
    for_each_row(&to[..outer], [&sa[..outer], &sb[..outer]], |[a, b]| f(BroadcastRun { a, a_step, b, b_step, len }));
}

/// Calls `f(multi_index, flat_index)` for every element of `shape`, row-major.
pub(crate) fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize], usize)) {
    let total: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    for flat in 0..total {
        f(&idx, flat);
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// The flat index of a multi-index under `strides`.
pub(crate) fn flat(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
        assert_eq!(broadcast_shapes(&[], &[5]).unwrap(), vec![5]);
        let e = broadcast_shapes(&[2, 3], &[4]).unwrap_err();
        assert_eq!(e.to_string(), "cannot broadcast shapes (2, 3) and (4,)");
        assert_eq!(broadcast_index_map(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(broadcast_index_map(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
    }

    /// The incremental map equals the flat index computed from scratch, for
    /// every input shape that broadcasts to each output shape of rank ≤ 3.
    #[test]
    fn broadcast_index_map_matches_the_definition() {
        let shapes = |rank: usize, dims: &[usize]| -> Vec<Vec<usize>> {
            (0..dims.len().pow(rank as u32))
                .map(|mut code| {
                    (0..rank)
                        .map(|_| {
                            let d = dims[code % dims.len()];
                            code /= dims.len();
                            d
                        })
                        .collect()
                })
                .collect()
        };
        for to_rank in 0..=3 {
            for to in shapes(to_rank, &[2, 3]) {
                for from_rank in 0..=to_rank {
                    for from in shapes(from_rank, &[1, 2, 3]) {
                        let skip = to_rank - from_rank;
                        if from.iter().zip(&to[skip..]).any(|(&f, &t)| f != 1 && f != t) {
                            continue;
                        }
                        let fs = strides(&from);
                        let ts = strides(&to);
                        let want: Vec<usize> = (0..to.iter().product::<usize>())
                            .map(|flat| {
                                (0..from_rank)
                                    .filter(|&d| from[d] != 1)
                                    .map(|d| (flat / ts[d + skip] % to[d + skip]) * fs[d])
                                    .sum()
                            })
                            .collect();
                        assert_eq!(broadcast_index_map(&from, &to), want, "{from:?} -> {to:?}");
                        // The pair walk gives the same indices, on either side.
                        let whole: Vec<usize> = (0..want.len()).collect();
                        let mut pairs = Vec::new();
                        for_each_broadcast_pair(&from, &to, &to, |i, j| pairs.push((i, j)));
                        assert_eq!(pairs, want.iter().copied().zip(whole.clone()).collect::<Vec<_>>(), "{from:?}");
                        pairs.clear();
                        for_each_broadcast_pair(&to, &from, &to, |i, j| pairs.push((i, j)));
                        assert_eq!(pairs, whole.into_iter().zip(want.iter().copied()).collect::<Vec<_>>(), "{from:?}");
                    }
                }
            }
        }
    }
}
