//! `nn.contrib_conv2d_bf16` and `nn.contrib_dense_bf16`: a convolution and a
//! matrix product whose products are bfloat16 × bfloat16 summed in float32 — the arithmetic of x86 AMX-BF16 (`tdpbf16ps`)
//! and AVX-512 BF16 (`vdpbf16ps`), made by Bf16Precision in the opt-in bf16
//! precision.
//!
//! The data stay float32 NCHW; each value is rounded to bfloat16 (to
//! nearest, ties to even) as the kernel reads it. The weight is bfloat16
//! bits in uint16, `[O, KH, KW, C2]` (`OHWI`; `C2`: the input channels
//! rounded up to an even number, the extra one zero): an AMX weight tile's
//! rows. Output float32 NCHW.
//!
//! The dense's data are float32 `[…, K]` (rounded likewise), its weight
//! bfloat16 bits `[K2/2, N, 2]` (`K2`: K rounded up to even): the rows of
//! an AMX tile of pairs, each holding two consecutive `k` of 16 columns.
//! Output float32 `[…, N]`.

use super::nn::{check_nchw, ints_n, window_out};
use super::util::{shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrSpec, Attrs};
use crate::dtype::DataType;
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

/// Input channels per 32-bit word of a bfloat16 image (one AMX pair).
pub const BF16_INPUT_GROUP: usize = 2;

pub(super) fn register(defs: &mut Vec<OpDef>) {
    defs.push(
        OpDef::new(
            "nn.contrib_conv2d_bf16",
            &["data", "weight"],
            OpPattern::OutEWiseFusable,
            rel_conv2d_bf16,
            eval_conv2d_bf16,
            "2-D convolution of float32 data rounded to bfloat16 with a bfloat16 weight (uint16 bits, [O, KH, KW, C2]), \
             products summed in float32; float32 NCHW out.",
        )
        .attr(AttrSpec::ints("strides", &[1, 1]))
        .attr(AttrSpec::ints("padding", &[0, 0, 0, 0])),
    );
    defs.push(
        OpDef::new(
            "nn.contrib_dense_bf16",
            &["data", "weight"],
            OpPattern::OutEWiseFusable,
            rel_dense_bf16,
            eval_dense_bf16,
            "x · Wᵀ of float32 data rounded to bfloat16 with a bfloat16 weight (uint16 bits, [K2/2, N', 2]: pairs of k; \
             N' columns, of which the first `units` are the output's — 0: all), products summed in float32; float32 [..., units] out.",
        )
        .attr(AttrSpec::int("units", 0)),
    );
}

/// `[…, units]`; the weight must be `[K2/2, N', 2]` uint16 for data `[…, K]`,
/// with `units ≤ N'` (0: N').
fn rel_dense_bf16(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, w) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "weight")?);
    if x.dtype != DataType::F32 || w.dtype != DataType::U16 {
        return Err(
            format!("takes float32 data and a uint16 (bfloat16) weight, found {} and {}", x.dtype, w.dtype).into()
        );
    }
    let Some(&k) = x.shape.last() else { return Err("the data must have at least one axis".into()) };
    let &[pairs, n, two] = &w.shape[..] else {
        return Err(format!("the weight must be [K2/2, N, 2], found shape {}", shape_str(&w.shape)).into());
    };
    if two != BF16_INPUT_GROUP || pairs != k.div_ceil(BF16_INPUT_GROUP) {
        return Err(format!(
            "the weight must be [{}, N, 2] for {k} input features, found shape {}",
            k.div_ceil(BF16_INPUT_GROUP),
            shape_str(&w.shape)
        )
        .into());
    }
    let units = match attrs.int("units")? {
        0 => n,
        u if u > 0 && u as usize <= n => u as usize,
        u => return Err(format!("units must be in 1..={n} (the weight's columns) or 0, found {u}").into()),
    };
    let mut shape = x.shape.clone();
    *shape.last_mut().expect("an axis") = units;
    Ok(Type::tensor(shape, DataType::F32))
}

/// The reference semantics: bfloat16 values, exact products, f64 sums.
fn eval_dense_bf16(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, w) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let types = [x, w].map(|t| Type::tensor(t.shape().to_vec(), t.dtype()));
    let ty = rel_dense_bf16(&types, attrs)?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let k = *x.shape().last().ok_or("no axis")?;
    let (n, units) = (w.shape()[1], *t.shape.last().ok_or("no axis")?);
    let data: Vec<f64> = x.to_f64_vec().into_iter().map(|v| bf16_value(bf16_bits(v as f32)) as f64).collect();
    let weight: Vec<f64> = w.to_f64_vec().into_iter().map(|v| bf16_value(v as u16) as f64).collect();
    let rows = data.len() / k.max(1);
    let mut res = vec![0.0; rows * units];
    for m in 0..rows {
        for j in 0..units {
            let acc: f64 = (0..k).map(|i| data[m * k + i] * weight[((i / 2) * n + j) * 2 + i % 2]).sum();
            res[m * units + j] = acc as f32 as f64;
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(DataType::F32, t.shape.clone(), &res)))
}

/// `x` rounded to bfloat16 (nearest, ties to even; NaN stays a quiet NaN):
/// the upper 16 bits of the float32 it rounds to.
pub fn bf16_bits(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7fc0;
    }
    let b = x.to_bits();
    let round = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

/// The float32 value of bfloat16 bits.
pub fn bf16_value(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// The output type; the weight must be `[O, KH, KW, C2]` uint16 with `C2`
/// the data's channels rounded up to even.
fn rel_conv2d_bf16(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, w) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "weight")?);
    if x.dtype != DataType::F32 || w.dtype != DataType::U16 {
        return Err(
            format!("takes float32 data and a uint16 (bfloat16) weight, found {} and {}", x.dtype, w.dtype).into()
        );
    }
    check_nchw(x, "data")?;
    let &[o, kh, kw, c2] = &w.shape[..] else {
        return Err(format!("the weight must be [O, KH, KW, C2], found shape {}", shape_str(&w.shape)).into());
    };
    if c2 != x.shape[1].div_ceil(BF16_INPUT_GROUP) * BF16_INPUT_GROUP {
        return Err(format!(
            "the weight must have {} input channels (the data's rounded up to even), found shape {}",
            x.shape[1].div_ceil(BF16_INPUT_GROUP) * BF16_INPUT_GROUP,
            shape_str(&w.shape)
        )
        .into());
    }
    let (s, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "padding", 4)?);
    let h = window_out(x.shape[2], (p[0], p[2]), kh, s[0], 1, false)?;
    let wd = window_out(x.shape[3], (p[1], p[3]), kw, s[1], 1, false)?;
    Ok(Type::tensor([x.shape[0], o, h, wd], DataType::F32))
}

/// The reference semantics: data and weight as bfloat16 values, each
/// product exact, summed in f64 (the kernels sum in float32, in their order).
fn eval_conv2d_bf16(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, w) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let types = [x, w].map(|t| Type::tensor(t.shape().to_vec(), t.dtype()));
    let ty = rel_conv2d_bf16(&types, attrs)?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let (s, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "padding", 4)?);
    let [n, c, h, wi] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let [_, kh, kw, c2] = [w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]];
    let data: Vec<f64> = x.to_f64_vec().into_iter().map(|v| bf16_value(bf16_bits(v as f32)) as f64).collect();
    let weight: Vec<f64> = w.to_f64_vec().into_iter().map(|v| bf16_value(v as u16) as f64).collect();
    let (o, oh, ow) = (t.shape[1], t.shape[2], t.shape[3]);
    let mut res = vec![0.0; n * o * oh * ow];
    for img in 0..n {
        for oc in 0..o {
            for y in 0..oh {
                for z in 0..ow {
                    let mut acc = 0.0;
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let iy = y as i64 * s[0] + ky as i64 - p[0];
                            let ix = z as i64 * s[1] + kx as i64 - p[1];
                            if !(0..h as i64).contains(&iy) || !(0..wi as i64).contains(&ix) {
                                continue;
                            }
                            for ic in 0..c {
                                let d = data[((img * c + ic) * h + iy as usize) * wi + ix as usize];
                                acc += d * weight[((oc * kh + ky) * kw + kx) * c2 + ic];
                            }
                        }
                    }
                    res[((img * o + oc) * oh + y) * ow + z] = acc as f32 as f64;
                }
            }
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(DataType::F32, t.shape.clone(), &res)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even_bfloat16() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        // 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷: ties to the even 1.
        assert_eq!(bf16_bits(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(bf16_bits(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf16_value(bf16_bits(-2.5)), -2.5);
        assert_eq!(bf16_bits(f32::NAN), 0x7fc0);
        assert_eq!(bf16_bits(f32::INFINITY), 0x7f80);
    }

    /// x [2, 3] · Wᵀ with W's pairs packed [2, 16, 2] (k = 3 padded to 4).
    #[test]
    fn multiplies_by_the_paired_weight() {
        let x = Tensor::from_f64(DataType::F32, vec![2, 3], &[1.0, 2.0, 3.0, -1.0, 0.5, 4.0]);
        let mut w = vec![0.0; 2 * 16 * 2];
        // Column 0: weights (1, 1, 1); column 5: (0, 0, 2).
        for k in 0..3 {
            w[((k / 2) * 16) * 2 + k % 2] = bf16_bits(1.0) as f64;
        }
        w[(16 + 5) * 2] = bf16_bits(2.0) as f64;
        let w = Tensor::from_f64(DataType::U16, vec![2, 16, 2], &w);
        let attrs = Attrs::from_pairs([("units", crate::attrs::AttrValue::Int(0))]);
        let y = eval_dense_bf16(&[Value::Tensor(x), Value::Tensor(w)], &attrs).unwrap();
        let y = y.tensor().unwrap().to_f64_vec();
        assert_eq!((y[0], y[5], y[16], y[21]), (6.0, 6.0, 3.5, 8.0));
    }

    /// A 3 × 3 window of weight 1 over one channel at pad 1 sums the bf16
    /// data it covers: 1 + 2⁻⁹ rounds to 1.
    #[test]
    fn sums_bfloat16_products() {
        let x = Tensor::from_f64(DataType::F32, vec![1, 1, 2, 2], &[1.0 + 1.0 / 512.0, 2.0, 3.0, 4.0]);
        let w = Tensor::from_f64(DataType::U16, vec![1, 3, 3, 2], &[bf16_bits(1.0) as f64, 0.0].repeat(9));
        let attrs = Attrs::from_pairs([
            ("padding", crate::attrs::AttrValue::Ints(vec![1; 4])),
            ("strides", crate::attrs::AttrValue::Ints(vec![1, 1])),
        ]);
        let y = eval_conv2d_bf16(&[Value::Tensor(x), Value::Tensor(w)], &attrs).unwrap();
        assert_eq!(y.tensor().unwrap().to_f64_vec(), vec![10.0; 4]);
    }
}
