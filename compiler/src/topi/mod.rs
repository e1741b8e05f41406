//! TOPI: the tensor-expression compute of every Relay operator.
//!
//! Each operator's compute is attached to it in the operator registry's
//! terms — an [`OpMap`] keyed by [`OpId`], TVM's `FTVMCompute` — by the
//! module of its family (`elemwise`, `reduce`, `nn`, `transform`,
//! `winograd`); [`compute_op`] looks it up by id, never by name. A compute
//! takes the operator's TE inputs, its normalized attributes and its checked
//! output type ([`ComputeCall`]) and returns the TE value of its result. The
//! shapes have been checked by the operator's type relation, so the computes
//! trust them; anything the type relation let through but a compute cannot
//! express is an error, never a panic.

use std::sync::{Arc, OnceLock};

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::{op_registry, OpId, OpMap, Type};
use kiln_ir::DataType;
use kiln_ir::OpError;

use crate::te::Tensor;
use crate::tir::{CmpOp, Expr};

mod bf16;
mod elemwise;
mod image;
mod nn;
mod quantized;
mod reduce;
mod transform;
mod winograd;
pub(crate) use nn::{has_pool_rows, POOL_ROWS_STAGE, SOFTMAX_EXP_STAGE};
pub(crate) use quantized::amx_pixel_tile;
pub(crate) use winograd::WINOGRAD_INPUT_STAGES;

/// A TE value: one tensor, or a tuple of them.
#[derive(Clone, Debug)]
pub enum TeValue {
    Tensor(Tensor),
    Tuple(Vec<TeValue>),
}

impl TeValue {
    pub fn tensor(&self) -> Result<&Tensor, OpError> {
        match self {
            TeValue::Tensor(t) => Ok(t),
            TeValue::Tuple(_) => Err("expected a tensor, found a tuple".into()),
        }
    }

    pub fn tuple(&self) -> Result<&[TeValue], OpError> {
        match self {
            TeValue::Tuple(v) => Ok(v),
            TeValue::Tensor(_) => Err("expected a tuple, found a tensor".into()),
        }
    }
}

/// One operator call as its compute sees it.
#[derive(Clone, Copy, Debug)]
pub struct ComputeCall<'a> {
    /// The operator's registered name: names the TE stages it creates and
    /// lets operators that share one compute (`nn.dense`/`nn.matmul`) differ.
    pub op: &'static str,
    pub inputs: &'a [TeValue],
    /// The normalized attributes (every schema attribute present).
    pub attrs: &'a Attrs,
    /// The checked output type.
    pub out: &'a Type,
}

impl ComputeCall<'_> {
    /// Argument `i`.
    pub fn input(&self, i: usize) -> Result<&TeValue, OpError> {
        self.inputs.get(i).ok_or_else(|| format!("`{}` is missing input {i}", self.op).into())
    }

    /// Argument `i`, which must be a tensor.
    pub fn tensor(&self, i: usize) -> Result<Tensor, OpError> {
        self.input(i)?.tensor().cloned()
    }

    /// The shape and dtype of a single-tensor result.
    pub fn out_tensor(&self) -> Result<(Vec<usize>, DataType), OpError> {
        out_tensor(self.out)
    }
}

/// The TE compute of an operator (TVM's `FTVMCompute`).
pub type ComputeFn = Arc<dyn Fn(&ComputeCall) -> Result<TeValue, OpError> + Send + Sync>;

/// Every operator's compute, attached by its family's module.
pub fn computes() -> &'static OpMap<ComputeFn> {
    static COMPUTES: OnceLock<OpMap<ComputeFn>> = OnceLock::new();
    COMPUTES.get_or_init(|| {
        let mut m = OpMap::new("FTVMCompute");
        elemwise::register(&mut m);
        reduce::register(&mut m);
        nn::register(&mut m);
        quantized::register(&mut m);
        bf16::register(&mut m);
        image::register(&mut m);
        transform::register(&mut m);
        winograd::register(&mut m);
        m
    })
}

/// The TE value of `op(inputs…)` with output type `out`.
pub fn compute_op(op: OpId, inputs: &[TeValue], attrs: &Attrs, out: &Type) -> Result<TeValue, OpError> {
    let name = op_registry().get(op).name;
    let compute = computes().get(op).ok_or_else(|| format!("`{name}` has no compute: it cannot be compiled yet"))?;
    compute(&ComputeCall { op: name, inputs, attrs, out })
}

/// A single-tensor result.
pub(crate) fn one(t: Tensor) -> Result<TeValue, OpError> {
    Ok(TeValue::Tensor(t))
}

/// The output shape and dtype of a single-tensor result.
pub(crate) fn out_tensor(ty: &Type) -> Result<(Vec<usize>, DataType), OpError> {
    ty.as_tensor()
        .map(|t| (t.shape.clone(), t.dtype))
        .ok_or_else(|| OpError::from(format!("expected a tensor result, found {ty}")))
}

/// `x` read at output indices `idx` with NumPy broadcasting (right-aligned; size-1 dims read index 0).
pub(crate) fn broadcast_at(x: &Tensor, idx: &[Expr]) -> Expr {
    let offset = idx.len() - x.ndim();
    let sub: Vec<Expr> = x
        .shape()
        .iter()
        .enumerate()
        .map(|(k, &d)| if d == 1 { Expr::int(0) } else { idx[offset + k].clone() })
        .collect();
    x.at(&sub)
}

pub(crate) fn zero(dt: DataType) -> Expr {
    Expr::constant(0.0, dt)
}

/// `cond ? a : b` over index conditions.
pub(crate) fn select(cond: Expr, a: Expr, b: Expr) -> Expr {
    Expr::select(cond, a, b)
}

/// `lo <= e < hi`.
pub(crate) fn in_range(e: &Expr, lo: i64, hi: i64) -> Expr {
    Expr::and(Expr::cmp(CmpOp::Ge, e.clone(), Expr::int(lo)), Expr::cmp(CmpOp::Lt, e.clone(), Expr::int(hi)))
}

/// An integer attribute list of exactly `n` values, expanding TVM's short
/// forms (one value for all; for 4-value padding, 2 values mean [a, b, a, b]).
pub(crate) fn expand_ints(attrs: &Attrs, name: &str, n: usize) -> Result<Vec<i64>, OpError> {
    let v = attrs.ints(name)?.to_vec();
    Ok(match (v.len(), n) {
        (k, n) if k == n => v,
        (1, n) => vec![v[0]; n],
        (2, 4) => vec![v[0], v[1], v[0], v[1]],
        (k, n) => return Err(format!("`{name}` has {k} values, expected {n}").into()),
    })
}

/// Whether a `nn.conv2d` call is pointwise: a 1 × 1 OIHW weight, one
/// group, stride 1, dilation 1 and no padding, so that each output pixel
/// reads the input pixel at the same place (a matrix product over channels).
pub(crate) fn is_pointwise_conv2d(store: &kiln_ir::relay::Store, call: &kiln_ir::relay::Call) -> bool {
    let a = &call.attrs;
    let all = |name: &str, n: usize, v: i64| expand_ints(a, name, n).is_ok_and(|x| x.iter().all(|&q| q == v));
    let one_by_one = call
        .args
        .get(1)
        .and_then(|&w| store.checked_type(w))
        .and_then(|t| t.as_tensor().map(|t| t.shape.len() == 4 && t.shape[2..] == [1, 1]))
        .unwrap_or(false);
    one_by_one
        && a.str("kernel_layout").is_ok_and(|l| l == "OIHW")
        && a.str("data_layout").is_ok_and(|l| l == "NCHW")
        && a.int("groups").is_ok_and(|g| g == 1)
        && all("strides", 2, 1)
        && all("dilation", 2, 1)
        && all("padding", 4, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operator kiln can parse can also be compiled: a registered
    /// operator without a compute would fail only when a model used it.
    #[test]
    fn every_operator_has_a_compute() {
        assert_eq!(computes().unset(), Vec::<&str>::new());
    }
}
