//! `nn.contrib_conv2d_u8s8`: a convolution over 8-bit integers with 32-bit
//! sums, the form int8 dot-product instructions compute (x86 VNNI's
//! `vpdpbusd`: four unsigned-byte × signed-byte products added to each
//! 32-bit lane).
//!
//! The data stay float32 tensors holding integers `d` (what the ONNX
//! importer makes of quantized activations, `q − zero_point`); the kernel
//! reads them as the bytes `d + data_offset`, which must lie in [0, 255]
//! (the rewrite that makes this operator proves it; the compiled kernel
//! does not check), and the weight is int8, packed `[O/16, C4/4, KH, KW,
//! 16, 4]` (`OIHW16o4i`; `C4`: the input channels rounded up to a multiple
//! of 4, the extra ones zero): 16 output channels × 4 input channels, 64
//! contiguous bytes per dot-product step — or `[O, C4/4, KH, KW, 4]`
//! (`OIHW4i`), four bytes per output channel and step, for kernels whose
//! vector lanes are pixels — or `[O, KH, KW, C4]` (`OHWI`), each output
//! channel's input channels contiguous per window position: the rows of an
//! AMX tile (x86 `tdpbsud`: 16 output channels × 64 input channels). `compensation[o]` is
//! `−data_offset · Σ w[o, …]`, added in int32 so that the result is exactly
//! `Σ d · w` (as float32: exact below 2²⁴ in magnitude, like the float
//! arithmetic it replaces). Padding reads `d = 0`. The data may also be
//! uint8: the bytes themselves (`d + data_offset` already; padding reads
//! the byte `data_offset`) — ByteActivations stores a quantized model's
//! activations so between kernels.

use super::nn::{check_nchw, ints_n, window_out};
use super::util::{shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrSpec, Attrs};
use crate::dtype::DataType;
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

/// Output channels per weight block (one 16-lane vector of int32 sums).
pub const U8S8_OUTPUT_BLOCK: usize = 16;
/// Input channels per dot-product step (four bytes per 32-bit lane).
pub const U8S8_INPUT_GROUP: usize = 4;

pub(super) fn register(defs: &mut Vec<OpDef>) {
    defs.push(
        OpDef::new(
            "nn.contrib_conv2d_u8s8",
            &["data", "weight", "compensation"],
            OpPattern::OutEWiseFusable,
            rel_conv2d_u8s8,
            eval_conv2d_u8s8,
            "2-D convolution of float32 data holding integers (read as bytes `d + data_offset`; or uint8 bytes, padding `data_offset`) with an int8 \
             weight packed [O/16, C4/4, KH, KW, 16, 4] (or OIHW4i, OHWI: weight_layout), summed in int32 plus `compensation` [O]; float32 NCHW out.",
        )
        .attr(AttrSpec::ints("strides", &[1, 1]))
        .attr(AttrSpec::ints("padding", &[0, 0, 0, 0]))
        .attr(AttrSpec::int("data_offset", 0))
        .attr(AttrSpec::str("weight_layout", "OIHW16o4i")),
    );
}

/// How `nn.contrib_conv2d_u8s8`'s int8 weight is packed (its
/// `weight_layout` attribute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum U8S8Layout {
    /// `OIHW16o4i`, `[O/16, C4/4, KH, KW, 16, 4]`: output channels as vector lanes.
    ChannelLanes,
    /// `OIHW4i`, `[O, C4/4, KH, KW, 4]`: pixels as vector lanes, each output
    /// channel's four bytes broadcast.
    PixelLanes,
    /// `OHWI`, `[O, KH, KW, C4]`: each output channel's input channels
    /// contiguous per window position (the rows of an AMX weight tile).
    Rows,
}

impl U8S8Layout {
    /// The layout an attribute set names.
    pub fn of(attrs: &Attrs) -> Result<U8S8Layout, OpError> {
        match attrs.str("weight_layout")? {
            "OIHW16o4i" => Ok(U8S8Layout::ChannelLanes),
            "OIHW4i" => Ok(U8S8Layout::PixelLanes),
            "OHWI" => Ok(U8S8Layout::Rows),
            other => Err(format!("weight_layout must be OIHW16o4i, OIHW4i or OHWI, found {other}").into()),
        }
    }

    /// The attribute's spelling.
    pub fn name(self) -> &'static str {
        match self {
            U8S8Layout::ChannelLanes => "OIHW16o4i",
            U8S8Layout::PixelLanes => "OIHW4i",
            U8S8Layout::Rows => "OHWI",
        }
    }

    /// The packed shape of a weight of `[O, C4/4, KH, KW]`.
    pub fn shape(self, [o, g, kh, kw]: [usize; 4]) -> Vec<usize> {
        let (b, four) = (U8S8_OUTPUT_BLOCK, U8S8_INPUT_GROUP);
        match self {
            U8S8Layout::ChannelLanes => vec![o / b, g, kh, kw, b, four],
            U8S8Layout::PixelLanes => vec![o, g, kh, kw, four],
            U8S8Layout::Rows => vec![o, kh, kw, g * four],
        }
    }
}

/// The bytes per AMX reduction step of an `OHWI` weight over `c4` input
/// channels (a multiple of 4): the largest multiple of 4 of at most 64 (a
/// tile row) that divides `c4` — every step then fills the tile rows alike,
/// one tile configuration per kernel — or None where that is under 16.
pub fn u8s8_amx_step(c4: usize) -> Option<usize> {
    (16..=64.min(c4)).rev().find(|s| s % 4 == 0 && c4 % s == 0)
}

/// `[O, C4/4, KH, KW]` of the weight in its layout (see [`U8S8Layout`]).
pub fn u8s8_weight_dims(shape: &[usize], attrs: &Attrs) -> Result<[usize; 4], OpError> {
    let (b, four) = (U8S8_OUTPUT_BLOCK, U8S8_INPUT_GROUP);
    let layout = U8S8Layout::of(attrs)?;
    let dims = match (layout, shape) {
        (U8S8Layout::ChannelLanes, &[ob, g, kh, kw, bb, f]) if bb == b && f == four => Some([ob * b, g, kh, kw]),
        (U8S8Layout::PixelLanes, &[o, g, kh, kw, f]) if f == four => Some([o, g, kh, kw]),
        (U8S8Layout::Rows, &[o, kh, kw, c4]) if c4 % four == 0 => Some([o, c4 / four, kh, kw]),
        _ => None,
    };
    dims.ok_or_else(|| {
        let form = match layout {
            U8S8Layout::ChannelLanes => "[O/16, ⌈C/4⌉, KH, KW, 16, 4]",
            U8S8Layout::PixelLanes => "[O, ⌈C/4⌉, KH, KW, 4]",
            U8S8Layout::Rows => "[O, KH, KW, 4·⌈C/4⌉]",
        };
        format!("a {} weight must be {form}, found shape {}", layout.name(), shape_str(shape)).into()
    })
}

/// The flat index of weight element `[o, c, y, x]` (`c` an input channel)
/// in `layout`, for a weight of `[O, C4/4, KH, KW]` (`dims`, as
/// [`u8s8_weight_dims`] gives them).
pub fn u8s8_weight_index(layout: U8S8Layout, [_, g, kh, kw]: [usize; 4], [o, c, y, x]: [usize; 4]) -> usize {
    let (b, four) = (U8S8_OUTPUT_BLOCK, U8S8_INPUT_GROUP);
    match layout {
        U8S8Layout::PixelLanes => (((o * g + c / four) * kh + y) * kw + x) * four + c % four,
        U8S8Layout::ChannelLanes => {
            ((((o / b) * g + c / four) * kh + y) * kw + x) * b * four + (o % b) * four + c % four
        }
        U8S8Layout::Rows => ((o * kh + y) * kw + x) * g * four + c,
    }
}

/// The output type, and `[O, C4, KH, KW]` from the packed weight.
fn rel_conv2d_u8s8(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, w, comp) =
        (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "weight")?, tensor_arg(args, 2, "compensation")?);
    let data = matches!(x.dtype, DataType::F32 | DataType::U8);
    if !data || w.dtype != DataType::I8 || comp.dtype != DataType::I32 {
        return Err(format!(
            "takes float32 or uint8 data, an int8 weight and int32 compensation, found {}, {} and {}",
            x.dtype, w.dtype, comp.dtype
        )
        .into());
    }
    check_nchw(x, "data")?;
    let [o, c4, kh, kw] = u8s8_weight_dims(&w.shape, attrs)?;
    let g = U8S8_INPUT_GROUP;
    if c4 * g < x.shape[1] || (c4 * g).saturating_sub(x.shape[1]) >= g {
        return Err(format!(
            "the weight must have ⌈C/4⌉ channel groups for {} input channels, found shape {}",
            x.shape[1],
            shape_str(&w.shape)
        )
        .into());
    }
    if comp.shape != [o] {
        return Err(format!("compensation must be [{o}], found shape {}", shape_str(&comp.shape)).into());
    }
    let offset = attrs.int("data_offset")?;
    if !(0..=255).contains(&offset) {
        return Err(format!("data_offset must be in [0, 255], found {offset}").into());
    }
    let (s, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "padding", 4)?);
    let h = window_out(x.shape[2], (p[0], p[2]), kh, s[0], 1, false)?;
    let wd = window_out(x.shape[3], (p[1], p[3]), kw, s[1], 1, false)?;
    Ok(Type::tensor([x.shape[0], o, h, wd], DataType::F32))
}

/// The reference semantics, in exact integers: each data value plus the
/// offset must be a byte (the kernel reads it as one).
fn eval_conv2d_u8s8(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, w, comp) = (tensor_val(args, 0)?, tensor_val(args, 1)?, tensor_val(args, 2)?);
    let types = [x, w, comp].map(|t| Type::tensor(t.shape().to_vec(), t.dtype()));
    let ty = rel_conv2d_u8s8(&types, attrs)?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let (s, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "padding", 4)?);
    let offset = attrs.int("data_offset")?;
    let [n, c, h, wi] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let dims = u8s8_weight_dims(w.shape(), attrs)?;
    let layout = U8S8Layout::of(attrs)?;
    let [_, c4, kh, kw] = dims;
    let g = U8S8_INPUT_GROUP;
    let (o, oh, ow) = (t.shape[1], t.shape[2], t.shape[3]);
    // uint8 data are the bytes themselves.
    let shift = if x.dtype() == DataType::U8 { 0.0 } else { offset as f64 };
    let bytes = x
        .to_f64_vec()
        .into_iter()
        .map(|d| {
            let v = d + shift;
            if v.fract() == 0.0 && (0.0..=255.0).contains(&v) {
                Ok(v as i64)
            } else {
                Err(OpError::from(format!("data value {d} plus data_offset {offset} is not a byte")))
            }
        })
        .collect::<Result<Vec<i64>, OpError>>()?;
    let wv: Vec<i64> = w.to_f64_vec().into_iter().map(|v| v as i64).collect();
    let cv: Vec<i64> = comp.to_f64_vec().into_iter().map(|v| v as i64).collect();
    let mut res = vec![0.0; n * o * oh * ow];
    for img in 0..n {
        for oc in 0..o {
            for y in 0..oh {
                for z in 0..ow {
                    let mut acc = cv[oc];
                    for ic in 0..c4 * g {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = y as i64 * s[0] + ky as i64 - p[0];
                                let ix = z as i64 * s[1] + kx as i64 - p[1];
                                let inside = ic < c && (0..h as i64).contains(&iy) && (0..wi as i64).contains(&ix);
                                let byte = if inside {
                                    bytes[((img * c + ic) * h + iy as usize) * wi + ix as usize]
                                } else {
                                    offset
                                };
                                let wj = u8s8_weight_index(layout, dims, [oc, ic, ky, kx]);
                                acc += byte * wv[wj];
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

    fn conv(x: Tensor, w: Tensor, comp: Tensor, offset: i64, pad: i64) -> Result<Value, OpError> {
        let attrs = Attrs::from_pairs([
            ("data_offset", crate::attrs::AttrValue::Int(offset)),
            ("padding", crate::attrs::AttrValue::Ints(vec![pad; 4])),
            ("strides", crate::attrs::AttrValue::Ints(vec![1, 1])),
            ("weight_layout", crate::attrs::AttrValue::Str("OIHW16o4i".into())),
        ]);
        eval_conv2d_u8s8(&[Value::Tensor(x), Value::Tensor(w), Value::Tensor(comp)], &attrs)
    }

    /// A weight of 1 on input channel 0 at every 3 × 3 window position for
    /// output channel 0 (of 16), and its compensation for a data offset of 7.
    fn window_sum_weight() -> (Tensor, Tensor) {
        let mut w = vec![0.0; 16 * 9 * 4];
        for k in 0..9 {
            w[k * 64] = 1.0; // output channel 0, input channel 0, window position k
        }
        let mut comp = vec![0.0; 16];
        comp[0] = -9.0 * 7.0;
        (Tensor::from_f64(DataType::I8, vec![1, 1, 3, 3, 16, 4], &w), Tensor::from_f64(DataType::I32, vec![16], &comp))
    }

    /// One output channel of 16 with weight 1 on channel 0 (of 3, padded to
    /// 4): the sum of data plus offset over the 3 × 3 window, pads reading
    /// the offset, and the compensation removing 9 offsets: the plain sum.
    #[test]
    fn sums_the_data_exactly_with_offset_and_compensation() {
        let x = Tensor::from_f64(DataType::F32, vec![1, 3, 2, 2], &(0..12).map(|v| v as f64 - 5.0).collect::<Vec<_>>());
        let (w, comp) = window_sum_weight();
        let y = conv(x, w, comp, 7, 1).unwrap().tensor().unwrap().to_f64_vec();
        // Channel 0 holds −5, −4, −3, −2: every 3 × 3 window at pad 1 covers all four.
        assert_eq!(&y[..4], &[-14.0; 4]);
        assert!(y[4..].iter().all(|&v| v == 0.0));
    }

    /// The same sum over uint8 data — the bytes themselves, `d + 7` — with
    /// the padding reading the byte of 0 (`data_offset`, 7): the same result.
    #[test]
    fn takes_uint8_data_as_the_bytes_themselves() {
        let x = Tensor::from_f64(DataType::U8, vec![1, 3, 2, 2], &(0..12).map(|v| v as f64 + 2.0).collect::<Vec<_>>());
        let (w, comp) = window_sum_weight();
        let y = conv(x, w, comp, 7, 1).unwrap().tensor().unwrap().to_f64_vec();
        assert_eq!(&y[..4], &[-14.0; 4]);
    }

    /// The same window sum with the weight in `OHWI` (`[O, KH, KW, C4]`, the
    /// AMX layout): weight 1 at input channel 0 of output channel 0 for every
    /// window position.
    #[test]
    fn reads_an_ohwi_weight_by_output_channel_window_and_input_channel() {
        let x = Tensor::from_f64(DataType::F32, vec![1, 3, 2, 2], &(0..12).map(|v| v as f64 - 5.0).collect::<Vec<_>>());
        let mut w = vec![0.0; 16 * 9 * 4];
        for k in 0..9 {
            w[k * 4] = 1.0; // output channel 0, window position k, input channel 0
        }
        let w = Tensor::from_f64(DataType::I8, vec![16, 3, 3, 4], &w);
        let (_, comp) = window_sum_weight();
        let attrs = Attrs::from_pairs([
            ("data_offset", crate::attrs::AttrValue::Int(7)),
            ("padding", crate::attrs::AttrValue::Ints(vec![1; 4])),
            ("strides", crate::attrs::AttrValue::Ints(vec![1, 1])),
            ("weight_layout", crate::attrs::AttrValue::Str("OHWI".into())),
        ]);
        let y = eval_conv2d_u8s8(&[Value::Tensor(x), Value::Tensor(w), Value::Tensor(comp)], &attrs).unwrap();
        let y = y.tensor().unwrap().to_f64_vec();
        assert_eq!(&y[..4], &[-14.0; 4]);
        assert!(y[4..].iter().all(|&v| v == 0.0));
        assert_eq!(u8s8_amx_step(20), Some(20));
        assert_eq!(u8s8_amx_step(96), Some(48));
        assert_eq!(u8s8_amx_step(12), None);
    }

    #[test]
    fn refuses_data_that_are_not_bytes_after_the_offset() {
        let x = Tensor::from_f64(DataType::F32, vec![1, 4, 1, 1], &[0.0, 1.0, 2.0, 300.0]);
        let w = Tensor::from_f64(DataType::I8, vec![1, 1, 1, 1, 16, 4], &[0.0; 64]);
        let comp = Tensor::from_f64(DataType::I32, vec![16], &[0.0; 16]);
        let e = conv(x, w, comp, 0, 0).unwrap_err();
        assert!(e.to_string().contains("not a byte"), "{e}");
    }
}
