//! Neural-network operators: convolution, pooling,
//! normalization, softmax, dropout, bias_add.

use super::matmul::{check_out_dtype, layout_block};
use super::util::{float_dtype, norm_axis, same_dtype, shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrSpec, Attrs};
use crate::relay::ty::{TensorType, Type};
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

fn out(t: Tensor) -> Result<Value, OpError> {
    Ok(Value::Tensor(t))
}

// ---- bias_add ------------------------------------------------------------------

fn rel_bias_add(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, b) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "bias")?);
    same_dtype(x.dtype, b.dtype)?;
    let axis = norm_axis(attrs.int("axis")?, x.rank())?;
    if b.shape != [x.shape[axis]] {
        return Err(format!(
            "bias of shape {} does not match axis {axis} of data {}",
            shape_str(&b.shape),
            shape_str(&x.shape)
        )
        .into());
    }
    Ok(Type::Tensor(x.clone()))
}

fn eval_bias_add(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, b) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    let axis = norm_axis(attrs.int("axis")?, x.shape().len())?;
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let c = x.shape()[axis];
    let bv = b.to_f64_vec();
    if bv.len() != c {
        return Err("bias size does not match".into());
    }
    let o: Vec<f64> = x.to_f64_vec().iter().enumerate().map(|(i, v)| v + bv[(i / inner.max(1)) % c]).collect();
    out(Tensor::from_f64(x.dtype(), x.shape().to_vec(), &o))
}

// ---- conv2d and pooling ----------------------------------------------------------

/// An integer list attribute of `n` values, expanding TVM's short forms
/// (one value for all; for 4-value padding, 2 values mean [top/bottom, left/right]).
pub(super) fn ints_n(attrs: &Attrs, name: &str, n: usize) -> Result<Vec<i64>, OpError> {
    let v = attrs.ints(name)?.to_vec();
    let v = match (v.len(), n) {
        (k, n) if k == n => v,
        (1, n) => vec![v[0]; n],
        (2, 4) => vec![v[0], v[1], v[0], v[1]],
        (k, n) => {
            return Err(
                format!("`{name}` must have {} values, found {k}", if n == 4 { "1, 2 or 4" } else { "1 or 2" }).into()
            )
        }
    };
    if v.iter().any(|&x| x < 0) || (!name.ends_with("padding") && v.contains(&0)) {
        return Err(format!("`{name}` has an invalid value in {v:?}").into());
    }
    // TVM's window attributes are 32-bit; larger ones overflow the sizes computed from them.
    if v.iter().any(|&x| x > i32::MAX as i64) {
        return Err(format!("`{name}` has a value of 2^31 or more in {v:?}").into());
    }
    Ok(v)
}

pub(super) fn check_nchw(t: &TensorType, what: &str) -> Result<(), OpError> {
    if t.rank() != 4 {
        return Err(format!("{what} must be 4-D (NCHW), found shape {}", shape_str(&t.shape)).into());
    }
    Ok(())
}

/// Output size of a window op along one axis.
/// Output positions of a sliding window. With `ceil`, a partial last window
/// counts only if it starts inside the input or its leading padding (as in
/// PyTorch and ONNX Runtime), never wholly in the trailing padding.
pub(super) fn window_out(
    size: usize,
    pads: (i64, i64),
    kernel: usize,
    stride: i64,
    dilation: i64,
    ceil: bool,
) -> Result<usize, OpError> {
    let pad = pads.0.saturating_add(pads.1);
    if stride < 1 || dilation < 1 || pads.0 < 0 || pads.1 < 0 {
        return Err(format!("strides and dilations must be positive and pads not negative, found stride {stride}, dilation {dilation}, pads {pads:?}").into());
    }
    let span = dilation.saturating_mul(kernel as i64 - 1).saturating_add(1);
    let room = (size as i64).saturating_add(pad).saturating_sub(span);
    if room < 0 {
        return Err(format!("a window of {span} does not fit an input of {size} with padding {pad}").into());
    }
    // ceil(room / stride) without overflow (room ≥ 0, stride ≥ 1).
    let room_ceil = if room == 0 { 0 } else { (room - 1) / stride + 1 };
    let mut n = if ceil { room_ceil + 1 } else { room / stride + 1 };
    if ceil && (n - 1).saturating_mul(stride) >= (size as i64).saturating_add(pads.0) {
        n -= 1;
    }
    Ok(n as usize)
}

/// The output-channel block of a packed weight layout: `OIHW` → None,
/// `OIHW16o` (weight `[O/16, I, KH, KW, 16]`, what AlterOpLayout makes of a
/// constant weight so that the kernel reads 16 output channels at once) → 16.
pub fn conv2d_weight_block(attrs: &Attrs) -> Result<Option<usize>, OpError> {
    layout_block(attrs, "kernel_layout", "OIHW", 'o')
}

/// The weight's [O, I, KH, KW], from an OIHW or OIHW<k>o weight shape.
fn conv2d_weight_dims(w: &TensorType, attrs: &Attrs) -> Result<[usize; 4], OpError> {
    match conv2d_weight_block(attrs)? {
        None if w.rank() == 4 => Ok([w.shape[0], w.shape[1], w.shape[2], w.shape[3]]),
        None => Err(format!("weight must be 4-D (OIHW), found shape {}", shape_str(&w.shape)).into()),
        Some(k) if w.rank() == 5 && w.shape[4] == k => Ok([w.shape[0] * k, w.shape[1], w.shape[2], w.shape[3]]),
        Some(k) => {
            Err(format!("an OIHW{k}o weight must be [O/{k}, I, KH, KW, {k}], found shape {}", shape_str(&w.shape))
                .into())
        }
    }
}

/// The data's type, when it is a known tensor (for the `infer_inputs` hooks).
fn known_tensor(args: &[Option<Type>], i: usize) -> Option<&TensorType> {
    args.get(i)?.as_ref()?.as_tensor()
}

/// An untyped OIHW weight from the data, `channels` and `kernel_size` (TVM's Conv2DRel).
fn conv2d_infer_inputs(args: &[Option<Type>], attrs: &Attrs) -> Vec<Option<Type>> {
    let weight = || -> Option<Type> {
        let x = known_tensor(args, 0).filter(|x| x.rank() == 4)?;
        let channels = usize::try_from(attrs.opt_int("channels").ok()??).ok()?;
        let groups = usize::try_from(attrs.int("groups").ok()?).ok().filter(|&g| g > 0)?;
        let [kh, kw] = attrs.opt_ints("kernel_size").ok()??.try_into().ok()?;
        let plain_oihw = attrs.str("kernel_layout").ok()? == "OIHW" && conv2d_weight_block(attrs).ok()?.is_none();
        plain_oihw
            .then(|| Type::tensor([channels, x.shape[1] / groups, kh.max(0) as usize, kw.max(0) as usize], x.dtype))
    };
    vec![None, if args.get(1).is_some_and(Option::is_none) { weight() } else { None }]
}

/// Untyped per-channel vectors (`bias_add`'s bias, `batch_norm`'s four) from the data's `axis`.
fn channel_vectors_infer_inputs(args: &[Option<Type>], attrs: &Attrs) -> Vec<Option<Type>> {
    let vector = || -> Option<Type> {
        let x = known_tensor(args, 0)?;
        let axis = norm_axis(attrs.int("axis").ok()?, x.rank()).ok()?;
        Some(Type::tensor([x.shape[axis]], x.dtype))
    };
    args.iter().enumerate().map(|(i, a)| if i > 0 && a.is_none() { vector() } else { None }).collect()
}

/// NHWC data → NCHW, HWIO weight → OIHW, and NCHW results back to NHWC.
pub const NHWC_TO_NCHW: [usize; 4] = [0, 3, 1, 2];
pub const HWIO_TO_OIHW: [usize; 4] = [3, 2, 0, 1];
pub const NCHW_TO_NHWC: [usize; 4] = [0, 2, 3, 1];

/// For an `nn.conv2d` over NHWC data and an HWIO weight (TensorFlow's
/// layouts, which TVM's parser tests use), the same attributes for NCHW and
/// OIHW; `None` when they already are. Other layouts are refused.
pub fn conv2d_nchw_attrs(attrs: &Attrs) -> Result<Option<Attrs>, OpError> {
    match (attrs.str("data_layout")?, attrs.str("kernel_layout")?) {
        ("NCHW", _) => Ok(None),
        ("NHWC", "HWIO") if matches!(attrs.str("out_layout")?, "" | "NHWC") => {
            let mut a = attrs.clone();
            a.set("data_layout", crate::attrs::AttrValue::Str("NCHW".into()));
            a.set("kernel_layout", crate::attrs::AttrValue::Str("OIHW".into()));
            a.set("out_layout", crate::attrs::AttrValue::Str(String::new()));
            Ok(Some(a))
        }
        (d, k) => Err(format!(
            "kiln's nn.conv2d takes NCHW data with an OIHW (or OIHW<k>o) weight, or NHWC data with an HWIO weight; \
             found {d} data with a {k} weight"
        )
        .into()),
    }
}

fn permuted_type(t: &TensorType, perm: &[usize]) -> Result<Type, OpError> {
    if t.rank() != perm.len() {
        return Err(format!("expected a {}-D tensor, found shape {}", perm.len(), shape_str(&t.shape)).into());
    }
    Ok(Type::tensor(perm.iter().map(|&p| t.shape[p]).collect::<Vec<_>>(), t.dtype))
}

fn rel_conv2d(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (x, w) = (tensor_arg(args, 0, "data")?, tensor_arg(args, 1, "weight")?);
    if let Some(nchw) = conv2d_nchw_attrs(attrs)? {
        let out = rel_conv2d(&[permuted_type(x, &NHWC_TO_NCHW)?, permuted_type(w, &HWIO_TO_OIHW)?], &nchw)?;
        return permuted_type(out.as_tensor().ok_or("not a tensor")?, &NCHW_TO_NHWC);
    }
    let dtype = same_dtype(x.dtype, w.dtype)?;
    check_out_dtype(attrs, dtype)?;
    if attrs.str("data_layout")? != "NCHW" {
        return Err(format!("only NCHW data is supported, found {}", attrs.str("data_layout")?).into());
    }
    check_nchw(x, "data")?;
    let dims = conv2d_weight_dims(w, attrs)?;
    if conv2d_weight_block(attrs)?.is_some() && attrs.int("groups")? != 1 {
        return Err("a packed (OIHW<k>o) weight needs groups=1".into());
    }
    let w = &TensorType { shape: dims.to_vec(), dtype: w.dtype };
    let groups = attrs.int("groups")?;
    if groups < 1 {
        return Err(format!("groups must be positive, found {groups}").into());
    }
    let g = groups as usize;
    let (c, o) = (x.shape[1], w.shape[0]);
    if c % g != 0 || o % g != 0 || w.shape[1].checked_mul(g) != Some(c) {
        return Err(
            format!("mismatched channels: data has {c} channels, weight expects {} × groups {g}", w.shape[1]).into()
        );
    }
    if let Some(ch) = attrs.opt_int("channels")? {
        if ch as usize != o {
            return Err(format!("channels={ch} but the weight has {o} output channels").into());
        }
    }
    if let Some(ks) = attrs.opt_ints("kernel_size")? {
        if ks.len() != 2 || ks[0] as usize != w.shape[2] || ks[1] as usize != w.shape[3] {
            return Err(format!("kernel_size={ks:?} but the weight's kernel is {}x{}", w.shape[2], w.shape[3]).into());
        }
    }
    let (s, d, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "dilation", 2)?, ints_n(attrs, "padding", 4)?);
    let h = window_out(x.shape[2], (p[0], p[2]), w.shape[2], s[0], d[0], false)?;
    let wd = window_out(x.shape[3], (p[1], p[3]), w.shape[3], s[1], d[1], false)?;
    Ok(Type::tensor([x.shape[0], o, h, wd], dtype))
}

fn eval_conv2d(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let (x, w) = (tensor_val(args, 0)?, tensor_val(args, 1)?);
    if let Some(nchw) = conv2d_nchw_attrs(attrs)? {
        let (x, w) = (super::transform::permuted(x, &NHWC_TO_NCHW), super::transform::permuted(w, &HWIO_TO_OIHW));
        let out = eval_conv2d(&[Value::Tensor(x), Value::Tensor(w)], &nchw)?;
        return out.tensor().map(|t| Value::Tensor(super::transform::permuted(t, &NCHW_TO_NHWC)));
    }
    let ty =
        rel_conv2d(&[Type::tensor(x.shape().to_vec(), x.dtype()), Type::tensor(w.shape().to_vec(), w.dtype())], attrs)?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let (s, d, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "dilation", 2)?, ints_n(attrs, "padding", 4)?);
    let g = attrs.int("groups")? as usize;
    let [n, c, h, wi] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let wt = TensorType { shape: w.shape().to_vec(), dtype: w.dtype() };
    let [o, icpg, kh, kw] = conv2d_weight_dims(&wt, attrs)?;
    let (oh, ow) = (t.shape[2], t.shape[3]);
    let opg = o / g;
    let xv = x.to_f64_vec();
    let wv = match conv2d_weight_block(attrs)? {
        None => w.to_f64_vec(),
        // Unpack [O/k, I, KH, KW, k] to OIHW.
        Some(k) => {
            let packed = w.to_f64_vec();
            let mut v = vec![0.0; o * icpg * kh * kw];
            for (i, slot) in v.iter_mut().enumerate() {
                let (oc, rest) = (i / (icpg * kh * kw), i % (icpg * kh * kw));
                *slot = packed[((oc / k) * icpg * kh * kw + rest) * k + oc % k];
            }
            v
        }
    };
    let mut res = vec![0.0; n * o * oh * ow];
    for b in 0..n {
        for oc in 0..o {
            let grp = oc / opg;
            for y in 0..oh {
                for z in 0..ow {
                    let mut acc = 0.0;
                    for ic in 0..icpg {
                        let cin = grp * icpg + ic;
                        for ky in 0..kh {
                            let iy = y as i64 * s[0] + ky as i64 * d[0] - p[0];
                            if iy < 0 || iy >= h as i64 {
                                continue;
                            }
                            for kx in 0..kw {
                                let ix = z as i64 * s[1] + kx as i64 * d[1] - p[1];
                                if ix < 0 || ix >= wi as i64 {
                                    continue;
                                }
                                let xi = ((b * c + cin) * h + iy as usize) * wi + ix as usize;
                                let wj = ((oc * icpg + ic) * kh + ky) * kw + kx;
                                acc += xv[xi] * wv[wj];
                            }
                        }
                    }
                    res[((b * o + oc) * oh + y) * ow + z] = acc;
                }
            }
        }
    }
    out(Tensor::from_f64(t.dtype, t.shape.clone(), &res))
}

fn rel_pool(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    if attrs.str("layout")? != "NCHW" {
        return Err(format!("only the NCHW layout is supported, found {}", attrs.str("layout")?).into());
    }
    check_nchw(x, "data")?;
    let k = ints_n(attrs, "pool_size", 2)?;
    let (s, d, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "dilation", 2)?, ints_n(attrs, "padding", 4)?);
    let ceil = attrs.bool("ceil_mode")?;
    let h = window_out(x.shape[2], (p[0], p[2]), k[0] as usize, s[0], d[0], ceil)?;
    let w = window_out(x.shape[3], (p[1], p[3]), k[1] as usize, s[1], d[1], ceil)?;
    Ok(Type::tensor([x.shape[0], x.shape[1], h, w], x.dtype))
}

fn pool(args: &[Value], attrs: &Attrs, is_max: bool) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let ty = rel_pool(&[Type::tensor(x.shape().to_vec(), x.dtype())], attrs)?;
    let t = ty.as_tensor().ok_or("not a tensor")?;
    let k = ints_n(attrs, "pool_size", 2)?;
    let (s, d, p) = (ints_n(attrs, "strides", 2)?, ints_n(attrs, "dilation", 2)?, ints_n(attrs, "padding", 4)?);
    let include_pad = !is_max && attrs.bool("count_include_pad")?;
    let [n, c, h, w] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let (oh, ow) = (t.shape[2], t.shape[3]);
    let xv = x.to_f64_vec();
    let mut res = vec![0.0; n * c * oh * ow];
    for plane in 0..n * c {
        for y in 0..oh {
            for z in 0..ow {
                let (mut acc, mut count, mut padded) = (if is_max { f64::NEG_INFINITY } else { 0.0 }, 0usize, 0usize);
                for ky in 0..k[0] {
                    let iy = y as i64 * s[0] + ky * d[0] - p[0];
                    for kx in 0..k[1] {
                        let ix = z as i64 * s[1] + kx * d[1] - p[1];
                        // Positions inside the padded input count for count_include_pad.
                        if iy >= -p[0] && iy < h as i64 + p[2] && ix >= -p[1] && ix < w as i64 + p[3] {
                            padded += 1;
                        }
                        if iy < 0 || iy >= h as i64 || ix < 0 || ix >= w as i64 {
                            continue;
                        }
                        let v = xv[(plane * h + iy as usize) * w + ix as usize];
                        // NaN propagates through max as through the sum.
                        acc = if !is_max {
                            acc + v
                        } else if acc.is_nan() || v.is_nan() {
                            f64::NAN
                        } else {
                            acc.max(v)
                        };
                        count += 1;
                    }
                }
                res[(plane * oh + y) * ow + z] = if is_max {
                    acc
                } else {
                    let div = if include_pad { padded } else { count };
                    if div == 0 {
                        0.0
                    } else {
                        acc / div as f64
                    }
                };
            }
        }
    }
    out(Tensor::from_f64(t.dtype, t.shape.clone(), &res))
}

fn eval_max_pool2d(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    pool(args, attrs, true)
}

fn eval_avg_pool2d(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    pool(args, attrs, false)
}

/// `nn.adaptive_avg_pool2d`'s output height and width: `output_size` of
/// none (the input's), one (both) or two values.
fn adaptive_output(x: &TensorType, attrs: &Attrs) -> Result<(usize, usize), OpError> {
    let size = attrs.ints("output_size")?;
    let (h, w) = match size {
        [] => (x.shape[2] as i64, x.shape[3] as i64),
        [s] => (*s, *s),
        [h, w] => (*h, *w),
        _ => return Err(format!("output_size must have at most 2 values, found {size:?}").into()),
    };
    if h < 1 || w < 1 || (x.shape[2] == 0 && h > 0) || (x.shape[3] == 0 && w > 0) {
        return Err(format!("output_size {size:?} does not fit data {}", shape_str(&x.shape)).into());
    }
    if h as usize > x.shape[2].max(1) * 65536 || w as usize > x.shape[3].max(1) * 65536 {
        return Err(format!("output_size {size:?} is out of proportion to data {}", shape_str(&x.shape)).into());
    }
    Ok((h as usize, w as usize))
}

/// The input positions `start..end` averaged into output position `o` of
/// `out` along an axis of `size` (PyTorch's and TVM's adaptive bins).
pub fn adaptive_bin(o: usize, size: usize, out: usize) -> (usize, usize) {
    (o * size / out, ((o + 1) * size).div_ceil(out))
}

fn rel_adaptive_avg_pool2d(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    if attrs.str("layout")? != "NCHW" || !matches!(attrs.str("out_layout")?, "" | "NCHW") {
        return Err(format!("only the NCHW layout is supported, found {}", attrs.str("layout")?).into());
    }
    check_nchw(x, "data")?;
    float_dtype(x, "data")?;
    let (h, w) = adaptive_output(x, attrs)?;
    Ok(Type::tensor([x.shape[0], x.shape[1], h, w], x.dtype))
}

fn eval_adaptive_avg_pool2d(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let [n, c, ih, iw] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let (oh, ow) = adaptive_output(&TensorType { shape: x.shape().to_vec(), dtype: x.dtype() }, attrs)?;
    let xv = x.to_f64_vec();
    let mut res = Vec::with_capacity(n * c * oh * ow);
    for plane in 0..n * c {
        for y in 0..oh {
            let (y0, y1) = adaptive_bin(y, ih, oh);
            for z in 0..ow {
                let (z0, z1) = adaptive_bin(z, iw, ow);
                let sum: f64 = (y0..y1)
                    .flat_map(|r| (z0..z1).map(move |q| (r, q)))
                    .map(|(r, q)| xv[(plane * ih + r) * iw + q])
                    .sum();
                res.push(sum / ((y1 - y0) * (z1 - z0)).max(1) as f64);
            }
        }
    }
    out(Tensor::from_f64(x.dtype(), vec![n, c, oh, ow], &res))
}

fn rel_global_avg_pool2d(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    if attrs.str("layout")? != "NCHW" {
        return Err(format!("only the NCHW layout is supported, found {}", attrs.str("layout")?).into());
    }
    check_nchw(x, "data")?;
    Ok(Type::tensor([x.shape[0], x.shape[1], 1, 1], x.dtype))
}

fn eval_global_avg_pool2d(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let [n, c, h, w] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let xv = x.to_f64_vec();
    let area = (h * w).max(1);
    let res: Vec<f64> = (0..n * c).map(|p| xv[p * area..(p + 1) * area].iter().sum::<f64>() / area as f64).collect();
    out(Tensor::from_f64(x.dtype(), vec![n, c, 1, 1], &res))
}

// ---- normalization, softmax, dropout ------------------------------------------------

/// Check that every vector argument from `first` on is 1-D of size `n`.
fn check_vectors(
    args: &[Type],
    first: usize,
    names: &[&str],
    n: usize,
    dtype: crate::dtype::DataType,
) -> Result<TensorType, OpError> {
    for (k, name) in names.iter().enumerate() {
        let v = tensor_arg(args, first + k, name)?;
        same_dtype(dtype, v.dtype)?;
        if v.shape != [n] {
            return Err(format!("{name} must have shape ({n},), found {}", shape_str(&v.shape)).into());
        }
    }
    Ok(TensorType::new([n], dtype))
}

fn rel_batch_norm(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    float_dtype(x, "data")?;
    let axis = norm_axis(attrs.int("axis")?, x.rank())?;
    let v = check_vectors(args, 1, &["gamma", "beta", "moving_mean", "moving_var"], x.shape[axis], x.dtype)?;
    Ok(Type::Tuple(vec![Type::Tensor(x.clone()), Type::Tensor(v.clone()), Type::Tensor(v)]))
}

fn eval_batch_norm(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let vecs: Vec<Vec<f64>> = (1..5).map(|i| tensor_val(args, i).map(Tensor::to_f64_vec)).collect::<Result<_, _>>()?;
    let axis = norm_axis(attrs.int("axis")?, x.shape().len())?;
    let eps = attrs.float("epsilon")?;
    let (scale, center) = (attrs.bool("scale")?, attrs.bool("center")?);
    let c = x.shape()[axis];
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let res: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / inner.max(1)) % c;
            let mut y = (v - vecs[2][ch]) / (vecs[3][ch] + eps).sqrt();
            if scale {
                y *= vecs[0][ch];
            }
            if center {
                y += vecs[1][ch];
            }
            y
        })
        .collect();
    Ok(Value::Tuple(vec![
        Value::Tensor(Tensor::from_f64(x.dtype(), x.shape().to_vec(), &res)),
        args[3].clone(),
        args[4].clone(),
    ]))
}

fn rel_layer_norm(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    float_dtype(x, "data")?;
    let axis = norm_axis(attrs.int("axis")?, x.rank())?;
    check_vectors(args, 1, &["gamma", "beta"], x.shape[axis], x.dtype)?;
    Ok(Type::Tensor(x.clone()))
}

/// For every position of the other axes, the flat indices along `axis`.
fn lanes(shape: &[usize], axis: usize) -> impl Iterator<Item = Vec<usize>> + '_ {
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    (0..outer).flat_map(move |o| (0..inner).map(move |i| (0..n).map(|k| (o * n + k) * inner + i).collect()))
}

fn eval_layer_norm(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let (g, b) = (tensor_val(args, 1)?.to_f64_vec(), tensor_val(args, 2)?.to_f64_vec());
    let axis = norm_axis(attrs.int("axis")?, x.shape().len())?;
    let eps = attrs.float("epsilon")?;
    let (scale, center) = (attrs.bool("scale")?, attrs.bool("center")?);
    let xv = x.to_f64_vec();
    let mut res = vec![0.0; xv.len()];
    for lane in lanes(x.shape(), axis) {
        let n = lane.len() as f64;
        let mean = lane.iter().map(|&i| xv[i]).sum::<f64>() / n;
        let var = lane.iter().map(|&i| (xv[i] - mean).powi(2)).sum::<f64>() / n;
        for (k, &i) in lane.iter().enumerate() {
            let mut y = (xv[i] - mean) / (var + eps).sqrt();
            if scale {
                y *= g[k];
            }
            if center {
                y += b[k];
            }
            res[i] = y;
        }
    }
    out(Tensor::from_f64(x.dtype(), x.shape().to_vec(), &res))
}

fn rel_softmax(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    float_dtype(x, "data")?;
    norm_axis(attrs.int("axis")?, x.rank())?;
    Ok(Type::Tensor(x.clone()))
}

fn eval_softmax(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let axis = norm_axis(attrs.int("axis")?, x.shape().len())?;
    let xv = x.to_f64_vec();
    let mut res = vec![0.0; xv.len()];
    for lane in lanes(x.shape(), axis) {
        let m = lane.iter().map(|&i| xv[i]).fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = lane.iter().map(|&i| (xv[i] - m).exp()).sum();
        for &i in &lane {
            res[i] = (xv[i] - m).exp() / total;
        }
    }
    out(Tensor::from_f64(x.dtype(), x.shape().to_vec(), &res))
}

fn rel_dropout(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    let rate = attrs.float("rate")?;
    if !(0.0..1.0).contains(&rate) {
        return Err(format!("rate must be in [0, 1), found {rate}").into());
    }
    Ok(Type::Tuple(vec![Type::Tensor(x.clone()), Type::Tensor(x.clone())]))
}

fn eval_dropout(args: &[Value], _: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let mask = Tensor::full(x.dtype(), x.shape().to_vec(), 1.0);
    Ok(Value::Tuple(vec![Value::Tensor(x.clone()), Value::Tensor(mask)]))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::*;
    defs.push(
        OpDef::new(
            "nn.bias_add",
            &["data", "bias"],
            Broadcast,
            rel_bias_add,
            eval_bias_add,
            "Add a 1-D bias along `axis`.",
        )
        .attr(AttrSpec::int("axis", 1))
        .infer_inputs(channel_vectors_infer_inputs),
    );
    defs.push(
        OpDef::new(
            "nn.conv2d",
            &["data", "weight"],
            OutEWiseFusable,
            rel_conv2d,
            eval_conv2d,
            "2-D convolution, NCHW data, OIHW weight.",
        )
        .attr(AttrSpec::ints("strides", &[1, 1]))
        .attr(AttrSpec::ints("padding", &[0, 0, 0, 0]))
        .attr(AttrSpec::ints("dilation", &[1, 1]))
        .attr(AttrSpec::int("groups", 1))
        .attr(AttrSpec::opt_int("channels"))
        .attr(AttrSpec::opt_ints("kernel_size"))
        .attr(AttrSpec::str("data_layout", "NCHW"))
        .attr(AttrSpec::str("kernel_layout", "OIHW"))
        .attr(AttrSpec::str("out_layout", ""))
        .attr(AttrSpec::str("out_dtype", ""))
        .infer_inputs(conv2d_infer_inputs),
    );
    let pools: [(&'static str, super::EvalFn, &'static str); 2] = [
        ("nn.max_pool2d", eval_max_pool2d, "2-D max pooling, NCHW."),
        ("nn.avg_pool2d", eval_avg_pool2d, "2-D average pooling, NCHW."),
    ];
    for (name, eval, doc) in pools {
        let mut def = OpDef::new(name, &["data"], OutEWiseFusable, rel_pool, eval, doc)
            .attr(AttrSpec::ints("pool_size", &[1, 1]))
            .attr(AttrSpec::ints("strides", &[1, 1]))
            .attr(AttrSpec::ints("dilation", &[1, 1]))
            .attr(AttrSpec::ints("padding", &[0, 0, 0, 0]))
            .attr(AttrSpec::str("layout", "NCHW"))
            .attr(AttrSpec::bool("ceil_mode", false));
        if name == "nn.avg_pool2d" {
            def = def.attr(AttrSpec::bool("count_include_pad", false));
        }
        defs.push(def);
    }
    defs.push(
        OpDef::new(
            "nn.global_avg_pool2d",
            &["data"],
            OutEWiseFusable,
            rel_global_avg_pool2d,
            eval_global_avg_pool2d,
            "Mean over H and W, NCHW.",
        )
        .attr(AttrSpec::str("layout", "NCHW")),
    );
    defs.push(
        OpDef::new(
            "nn.adaptive_avg_pool2d",
            &["data"],
            OutEWiseFusable,
            rel_adaptive_avg_pool2d,
            eval_adaptive_avg_pool2d,
            "Mean over adaptive bins of H and W giving `output_size`, NCHW.",
        )
        .attr(AttrSpec::ints("output_size", &[]))
        .attr(AttrSpec::str("layout", "NCHW"))
        .attr(AttrSpec::str("out_layout", "")),
    );
    defs.push(
        OpDef::new(
            "nn.batch_norm",
            &["data", "gamma", "beta", "moving_mean", "moving_var"],
            Opaque,
            rel_batch_norm,
            eval_batch_norm,
            "Inference batch norm; returns (output, moving_mean, moving_var).",
        )
        .infer_inputs(channel_vectors_infer_inputs)
        .attr(AttrSpec::int("axis", 1))
        .attr(AttrSpec::float("epsilon", 1e-5))
        .attr(AttrSpec::bool("center", true))
        .attr(AttrSpec::bool("scale", true)),
    );
    defs.push(
        OpDef::new(
            "nn.layer_norm",
            &["data", "gamma", "beta"],
            Opaque,
            rel_layer_norm,
            eval_layer_norm,
            "Layer normalization over `axis`.",
        )
        .attr(AttrSpec::int("axis", -1))
        .attr(AttrSpec::float("epsilon", 1e-5))
        .attr(AttrSpec::bool("center", true))
        .attr(AttrSpec::bool("scale", true)),
    );
    defs.push(
        OpDef::new("nn.softmax", &["data"], OutEWiseFusable, rel_softmax, eval_softmax, "Softmax along `axis`.")
            .attr(AttrSpec::int("axis", -1)),
    );
    defs.push(
        OpDef::new(
            "nn.dropout",
            &["data"],
            Opaque,
            rel_dropout,
            eval_dropout,
            "Dropout (identity at inference); returns (output, mask).",
        )
        .attr(AttrSpec::float("rate", 0.5))
        // As in TVM: random at training time, so FoldConstant leaves it
        // (SimplifyInference removes it).
        .stateful(),
    );
}
