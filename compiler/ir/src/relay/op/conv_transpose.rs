//! `nn.conv2d_transpose`: the gradient of a convolution with respect to its
//! input (NCHW data, IOHW weight, as TVM's defaults).

use super::matmul::check_out_dtype;
use super::nn::{check_nchw, ints_n};
use super::util::{same_dtype, shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrSpec, Attrs};
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

/// A transposed convolution's sizes, checked.
#[derive(Clone, Debug)]
pub struct ConvTranspose2d {
    pub groups: usize,
    /// Output channels per group (the weight's second axis).
    pub out_per_group: usize,
    pub kernel: [usize; 2],
    pub strides: [i64; 2],
    pub dilation: [i64; 2],
    /// Top, left, bottom, right.
    pub padding: [i64; 4],
    pub out_shape: [usize; 4],
}

impl ConvTranspose2d {
    /// The sizes of `nn.conv2d_transpose(data, weight)` with `attrs`.
    pub fn of(data: &[usize], weight: &[usize], attrs: &Attrs) -> Result<ConvTranspose2d, OpError> {
        if attrs.str("data_layout")? != "NCHW" || !matches!(attrs.str("out_layout")?, "" | "NCHW") {
            return Err(format!("only NCHW data is supported, found {}", attrs.str("data_layout")?).into());
        }
        if attrs.str("kernel_layout")? != "IOHW" {
            return Err(
                format!("only the IOHW weight layout is supported, found {}", attrs.str("kernel_layout")?).into()
            );
        }
        if data.len() != 4 || weight.len() != 4 {
            return Err(
                format!("data and weight must be 4-D, found {} and {}", shape_str(data), shape_str(weight)).into()
            );
        }
        if weight[2] == 0 || weight[3] == 0 {
            return Err(format!("the weight {} has an empty kernel", shape_str(weight)).into());
        }
        let groups = attrs.int("groups")?;
        if groups < 1 || data[1] % groups as usize != 0 {
            return Err(format!("groups={groups} does not divide the data's {} channels", data[1]).into());
        }
        let g = groups as usize;
        if weight[0] != data[1] {
            return Err(format!(
                "the weight {} (IOHW) expects {} input channels, the data {} has {}",
                shape_str(weight),
                weight[0],
                shape_str(data),
                data[1]
            )
            .into());
        }
        let channels = weight[1].checked_mul(g).ok_or("output channels overflow")?;
        if let Some(ch) = attrs.opt_int("channels")? {
            if ch < 0 || ch as usize != channels {
                return Err(format!("channels={ch} but the weight gives {channels} output channels").into());
            }
        }
        if let Some(ks) = attrs.opt_ints("kernel_size")? {
            if ks.len() != 2 || ks[0] as usize != weight[2] || ks[1] as usize != weight[3] {
                return Err(format!("kernel_size={ks:?} but the weight's kernel is {}x{}", weight[2], weight[3]).into());
            }
        }
        let (s, d, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "dilation", 2)?, ints_n(attrs, "padding", 4)?);
        let op = ints_n(attrs, "output_padding", 2)?;
        let mut out = [data[0], channels, 0, 0];
        for axis in 0..2 {
            if op[axis] >= s[axis].max(d[axis]) {
                return Err(format!(
                    "output_padding {op:?} must be smaller than the stride or the dilation on each axis"
                )
                .into());
            }
            // (in - 1)·stride - pads + dilation·(kernel - 1) + 1 + output_padding
            let size = (data[2 + axis] as i64 - 1)
                .checked_mul(s[axis])
                .and_then(|v| v.checked_sub(p[axis] + p[axis + 2]))
                .and_then(|v| v.checked_add(d[axis].checked_mul(weight[2 + axis] as i64 - 1)?))
                .and_then(|v| v.checked_add(1 + op[axis]))
                .filter(|&v| v > 0 && v <= u32::MAX as i64)
                .ok_or_else(|| {
                    format!(
                        "data {} with kernel {}x{}, strides {s:?}, padding {p:?} gives no valid output size",
                        shape_str(data),
                        weight[2],
                        weight[3]
                    )
                })?;
            out[2 + axis] = size as usize;
        }
        Ok(ConvTranspose2d {
            groups: g,
            out_per_group: weight[1],
            kernel: [weight[2], weight[3]],
            strides: [s[0], s[1]],
            dilation: [d[0], d[1]],
            padding: [p[0], p[1], p[2], p[3]],
            out_shape: out,
        })
    }
}

fn rel_conv2d_transpose(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, w) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "weight")?);
    let dtype = same_dtype(x.dtype, w.dtype)?;
    check_out_dtype(attrs, dtype)?;
    check_nchw(x, "data")?;
    let c = ConvTranspose2d::of(&x.shape, &w.shape, attrs)?;
    Ok(Type::tensor(c.out_shape, dtype))
}

/// Each input pixel scatters its weighted kernel into the output.
fn eval_conv2d_transpose(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, w) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let ty = rel_conv2d_transpose(
        &[Type::tensor(x.shape().to_vec(), x.dtype()), Type::tensor(w.shape().to_vec(), w.dtype())],
        attrs,
    )?;
    let c = ConvTranspose2d::of(x.shape(), w.shape(), attrs)?;
    let [n, ci, ih, iw] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let [_, co, oh, ow] = c.out_shape;
    let [kh, kw] = c.kernel;
    let cpg = ci / c.groups;
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let mut res = vec![0.0; n * co * oh * ow];
    for b in 0..n {
        for ic in 0..ci {
            let group = ic / cpg;
            for y in 0..ih {
                for z in 0..iw {
                    let v = xv[((b * ci + ic) * ih + y) * iw + z];
                    for o in 0..c.out_per_group {
                        let oc = group * c.out_per_group + o;
                        for ky in 0..kh {
                            let oy = y as i64 * c.strides[0] - c.padding[0] + ky as i64 * c.dilation[0];
                            if oy < 0 || oy >= oh as i64 {
                                continue;
                            }
                            for kx in 0..kw {
                                let ox = z as i64 * c.strides[1] - c.padding[1] + kx as i64 * c.dilation[1];
                                if ox < 0 || ox >= ow as i64 {
                                    continue;
                                }
                                let wt = wv[((ic * c.out_per_group + o) * kh + ky) * kw + kx];
                                res[((b * co + oc) * oh + oy as usize) * ow + ox as usize] += v * wt;
                            }
                        }
                    }
                }
            }
        }
    }
    let dtype = ty.as_tensor().ok_or("not a tensor")?.dtype;
    Ok(Value::Tensor(Tensor::from_f64(dtype, c.out_shape.to_vec(), &res)))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    defs.push(
        OpDef::new(
            "nn.conv2d_transpose",
            &["data", "weight"],
            OpPattern::OutEWiseFusable,
            rel_conv2d_transpose,
            eval_conv2d_transpose,
            "Transposed 2-D convolution, NCHW data, IOHW weight.",
        )
        .attr(AttrSpec::opt_int("channels"))
        .attr(AttrSpec::opt_ints("kernel_size"))
        .attr(AttrSpec::ints("strides", &[1, 1]))
        .attr(AttrSpec::ints("output_padding", &[0, 0]))
        .attr(AttrSpec::ints("padding", &[0, 0]))
        .attr(AttrSpec::ints("dilation", &[1, 1]))
        .attr(AttrSpec::int("groups", 1))
        .attr(AttrSpec::str("data_layout", "NCHW"))
        .attr(AttrSpec::str("kernel_layout", "IOHW"))
        .attr(AttrSpec::str("out_layout", ""))
        .attr(AttrSpec::str("out_dtype", "")),
    );
}
