//! Bitwise operators on integer tensors: `bitwise_and`, `bitwise_or`,
//! `bitwise_xor`, `bitwise_not`, `left_shift` and `right_shift` (TVM's
//! names). The interpreter works on the stored bits, not through `f64`, so
//! 64-bit values are exact.

use super::util::{broadcast_index_map, broadcast_shapes, same_dtype, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::Attrs;
use crate::dtype::DataType;
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

fn int_only(dt: DataType, what: &str) -> Result<(), OpError> {
    if dt.is_int() {
        Ok(())
    } else {
        Err(format!("{what} needs integer operands, found {dt}").into())
    }
}

/// TVM's `BroadcastRel`: any dtype type-checks (TVM's tests shift float32
/// tensors); only integer tensors are computed — the interpreter and the TE
/// computes refuse others, as TVM fails to compile them.
fn rel_bitwise(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    let (a, b) = (tensor_arg(args, 0, "lhs")?, tensor_arg(args, 1, "rhs")?);
    let dtype = same_dtype(a.dtype, b.dtype)?;
    Ok(Type::tensor(broadcast_shapes(&a.shape, &b.shape)?, dtype))
}

/// TVM's `IdentityRel`, computed on integers only as [`rel_bitwise`].
fn rel_bitwise_not(args: &[Type], _: &Attrs) -> Result<Type, OpError> {
    Ok(Type::Tensor(tensor_arg(args, 0, "data")?.clone()))
}

/// The elements as integers: sign-extended for signed types, zero-extended
/// for unsigned ones.
fn elements(t: &Tensor) -> Vec<i128> {
    let size = t.dtype().size_bytes();
    let signed = t.dtype().is_signed_int();
    t.bytes()
        .chunks_exact(size)
        .map(|c| {
            let mut raw = [0u8; 16];
            raw[..size].copy_from_slice(c);
            if signed && c[size - 1] & 0x80 != 0 {
                raw[size..].fill(0xff);
            }
            i128::from_le_bytes(raw)
        })
        .collect()
}

/// A tensor from integers, keeping the low bits of each (wrapping).
fn from_elements(dtype: DataType, shape: Vec<usize>, vals: &[i128]) -> Result<Tensor, OpError> {
    let size = dtype.size_bytes();
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()[..size].to_vec()).collect();
    Tensor::from_bytes(dtype, shape, bytes).ok_or_else(|| OpError::from("internal: element count mismatch"))
}

fn binary(args: &[Value], f: impl Fn(i128, i128, u32) -> i128) -> Result<Value, OpError> {
    let (a, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let dtype = same_dtype(a.dtype(), b.dtype())?;
    int_only(dtype, "a bitwise operator")?;
    let bits = dtype.size_bytes() as u32 * 8;
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let (av, bv) = (elements(a), elements(b));
    let (ia, ib) = (broadcast_index_map(a.shape(), &shape), broadcast_index_map(b.shape(), &shape));
    let out: Vec<i128> = ia.iter().zip(&ib).map(|(&i, &j)| f(av[i], bv[j], bits)).collect();
    Ok(Value::Tensor(from_elements(dtype, shape, &out)?))
}

fn eval_and(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary(args, |a, b, _| a & b)
}
fn eval_or(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary(args, |a, b, _| a | b)
}
fn eval_xor(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary(args, |a, b, _| a ^ b)
}

/// Shifts by a negative amount or by the width or more shift every bit
/// out: 0, or for a right shift of a negative signed value, −1.
fn eval_left_shift(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary(args, |a, b, bits| if (0..bits as i128).contains(&b) { a << b } else { 0 })
}
fn eval_right_shift(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    binary(args, |a, b, bits| if (0..bits as i128).contains(&b) { a >> b } else { a >> 127 })
}

fn eval_not(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    int_only(x.dtype(), "bitwise_not")?;
    let out: Vec<i128> = elements(x).iter().map(|v| !v).collect();
    Ok(Value::Tensor(from_elements(x.dtype(), x.shape().to_vec(), &out)?))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::{Broadcast, ElemWise};
    let binary: [(&'static str, super::EvalFn, &'static str); 5] = [
        ("bitwise_and", eval_and, "Elementwise bitwise AND of integer tensors, broadcasting."),
        ("bitwise_or", eval_or, "Elementwise bitwise OR of integer tensors, broadcasting."),
        ("bitwise_xor", eval_xor, "Elementwise bitwise XOR of integer tensors, broadcasting."),
        (
            "left_shift",
            eval_left_shift,
            "Elementwise `lhs << rhs`, broadcasting; amounts outside [0, bits) give 0.",
        ),
        (
            "right_shift",
            eval_right_shift,
            "Elementwise `lhs >> rhs` (arithmetic for signed types), broadcasting; amounts outside [0, bits) shift every bit out.",
        ),
    ];
    for (name, eval, doc) in binary {
        defs.push(OpDef::new(name, &["lhs", "rhs"], Broadcast, rel_bitwise, eval, doc));
    }
    defs.push(OpDef::new(
        "bitwise_not",
        &["data"],
        ElemWise,
        rel_bitwise_not,
        eval_not,
        "Elementwise bitwise complement of an integer tensor.",
    ));
}
