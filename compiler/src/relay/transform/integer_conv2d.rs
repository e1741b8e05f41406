//! IntegerConv2d: convolutions of quantized models as int8 dot products.
//!
//! The ONNX importer computes a QLinearConv (and each QDQ convolution unit)
//! as `Σ (x − x_zp)(w − w_zp)` over integers held in float32 — exact, and
//! fast where only the FMA units multiply. A CPU with int8 dot products
//! (x86 VNNI: `vpdpbusd`, 64 byte products per instruction, four times the
//! multiply-adds of an fp32 FMA) does it in integers. This pass rewrites an
//! `nn.conv2d` whose operands are provably bytes into
//! `nn.contrib_conv2d_u8s8`: the weight a constant of integers in
//! [−128, 127] (packed as int8 `[O/16, ⌈C/4⌉, KH, KW, 16, 4]`), the data
//! integers in a range of at most 256 values containing 0 (read as
//! `d + offset` in [0, 255], the offset's share of the sum subtracted per
//! output channel). The range comes from the ops that make the data — a
//! rounding clipped to integral bounds, a conversion from an 8-bit integer,
//! a shift by an integral constant, a max pooling or ReLU of such — never
//! from the values of one input, so the rewrite is exact for every input.
//! Convolutions it cannot prove so stay as they are.
//!
//! Where the target has AMX (`relay.IntegerConv2d.amx`), the convolutions
//! that fit its tiles — stride 1, whole blocks of 16 output channels — take
//! the `OHWI` weight layout instead: `schedule/amx.rs` computes them as tile
//! products (`tdpbsud`, 16 × 16 outputs × 64 byte products per instruction).
//!
//! Run where the target has the instruction (`relay.IntegerConv2d.enable`,
//! set from the target's `avx512vnni`; see `target::configure_context`), before
//! AlterOpLayout (which would otherwise pack or Winograd-transform the weight).

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::op::{u8s8_amx_step, u8s8_weight_index, U8S8Layout, U8S8_INPUT_GROUP, U8S8_OUTPUT_BLOCK};
use kiln_ir::relay::{mutate, Call, ExprId, ExprKind, ExprMutator, Store};
use kiln_ir::{DataType, Tensor};

struct Rewrite {
    /// Whether the target has AMX tiles (see the module docs).
    amx: bool,
}

/// The shortest reduction per output (C · KH · KW) rewritten: see `rewrite_conv2d`.
const MIN_REDUCTION: usize = 64;
/// The same for a kernel with pixels as lanes (see `pixels_as_lanes`) or AMX tiles.
const MIN_POINTWISE_REDUCTION: usize = 16;

impl ExprMutator for Rewrite {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        if store.op_name(post) != Some("nn.conv2d") {
            return post;
        }
        let (Some(pre_call), Some(call)) = (store.as_call(pre).cloned(), store.as_call(post).cloned()) else {
            return post;
        };
        rewrite_conv2d(store, &pre_call, &call, post, self.amx).unwrap_or(post)
    }
}

/// Rewrites the convolutions of `func` that qualify (see the module docs).
pub fn integer_conv2d(store: &mut Store, func: ExprId, amx: bool) -> ExprId {
    mutate(store, func, &mut Rewrite { amx })
}

/// The offset that maps every value in `[lo, hi]` and 0 (the padding) into [0, 255].
fn byte_offset((lo, hi): (f64, f64)) -> Option<i64> {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    (lo.is_finite() && hi.is_finite() && hi - lo <= 255.0).then_some(-lo as i64)
}

/// The data and the constant weight of a plain float32 `nn.conv2d` (one
/// group, no dilation, NCHW data, OIHW weight, float32 out) — what
/// IntegerConv2d and Bf16Precision rewrite — with the weight's
/// `[O, C, KH, KW]`; `pre` is the call before its arguments were rewritten
/// (whose data has a checked type).
pub(super) fn plain_conv2d(store: &Store, pre: &Call, call: &Call) -> Option<(ExprId, Tensor, [usize; 4])> {
    let a = &call.attrs;
    let plain = a.int("groups").ok()? == 1
        && a.ints("dilation").ok()?.iter().all(|&d| d == 1)
        && a.str("data_layout").ok()? == "NCHW"
        && a.str("kernel_layout").ok()? == "OIHW"
        && matches!(a.str("out_dtype").ok()?, "" | "float32");
    let ([_, _], [x, w]) = (&pre.args[..], &call.args[..]) else { return None };
    let ExprKind::Constant(c) = store.kind(*w) else { return None };
    let weight = store.constant_data(*c).clone();
    let x_type = store.checked_type(pre.args[0])?.as_tensor()?.clone();
    if !plain || weight.dtype() != DataType::F32 || x_type.dtype != DataType::F32 || weight.shape().len() != 4 {
        return None;
    }
    let dims = [weight.shape()[0], weight.shape()[1], weight.shape()[2], weight.shape()[3]];
    (dims[1] == x_type.shape.get(1).copied()?).then_some((*x, weight, dims))
}

fn rewrite_conv2d(store: &mut Store, pre: &Call, call: &Call, post: ExprId, amx: bool) -> Option<ExprId> {
    let a = &call.attrs;
    let (x, weight, [o, ci, kh, kw]) = plain_conv2d(store, pre, call)?;
    let x_shape = store.checked_type(pre.args[0])?.as_tensor()?.shape.clone();
    let values = weight.to_f64_vec();
    if !values.iter().all(|&v| v.fract() == 0.0 && (-128.0..=127.0).contains(&v)) {
        return None;
    }
    let offset = byte_offset(integer_range(store, pre.args[0])?)?;
    let (g, b) = (U8S8_INPUT_GROUP, U8S8_OUTPUT_BLOCK);
    let groups = ci.div_ceil(g);
    let layout = if amx && ci * kh * kw >= MIN_REDUCTION && amx_tiles(a, o, groups * g) {
        U8S8Layout::Rows
    } else if pixels_as_lanes(a, &x_shape, kh, kw) {
        U8S8Layout::PixelLanes
    } else {
        U8S8Layout::ChannelLanes
    };
    // Output channels as lanes come in whole blocks of 16; pixels as lanes
    // take any number (MobileNetV2's 24-channel projections).
    if layout == U8S8Layout::ChannelLanes && o % b != 0 {
        return None;
    }
    // Where the integer kernel beats the float one (measured on Sapphire
    // Rapids, one thread): a reduction of 64 or more per output. Shorter
    // ones spend their time in the byte image and the float write-back,
    // where the float kernels are tuned (MobileNetV2's 1 × 1 layers over
    // 16–32 channels with channels as lanes: 4.2 ms for the model with them
    // in float, 5.1–5.3 ms in integers). ResNet-18's 3-channel 7 × 7 stem
    // (147): 1.7 → 0.94 ms.
    let shortest = if layout == U8S8Layout::ChannelLanes { MIN_REDUCTION } else { MIN_POINTWISE_REDUCTION };
    if ci * kh * kw < shortest {
        return None;
    }
    // [O/16, C4/4, KH, KW, 16, 4] (or [O, C4/4, KH, KW, 4], [O, KH, KW, C4]), channels past C zero.
    let dims = [o, groups, kh, kw];
    let mut packed = vec![0.0; o * groups * g * kh * kw];
    for oc in 0..o {
        for ic in 0..ci {
            for y in 0..kh {
                for z in 0..kw {
                    packed[u8s8_weight_index(layout, dims, [oc, ic, y, z])] =
                        values[((oc * ci + ic) * kh + y) * kw + z];
                }
            }
        }
    }
    let per_output = ci * kh * kw;
    let compensation: Vec<f64> = values.chunks(per_output).map(|w| -(offset as f64) * w.iter().sum::<f64>()).collect();
    let span = store.span(post).clone();
    let packed = store.constant(Tensor::from_f64(DataType::I8, layout.shape(dims), &packed));
    let compensation = store.constant(Tensor::from_f64(DataType::I32, vec![o], &compensation));
    let attrs = Attrs::from_pairs([
        ("strides", AttrValue::Ints(a.ints("strides").ok()?.to_vec())),
        ("padding", AttrValue::Ints(a.ints("padding").ok()?.to_vec())),
        ("data_offset", AttrValue::Int(offset)),
        ("weight_layout", AttrValue::Str(layout.name().into())),
    ]);
    store.call_op_at("nn.contrib_conv2d_u8s8", vec![x, packed, compensation], attrs, span).ok()
}

/// Whether AMX tiles compute the convolution (weight `OHWI`; the caller
/// also asks for 64 or more products per output: MobileNetV2's 16 → 96 and
/// 24 → 144 expansions on 112 × 112 and 56 × 56, bound by their image and
/// write-back, took 299 and 111 µs as tiles against 227 and 93 µs with
/// pixels as vector lanes): stride 1 (a
/// tile's 16 pixels are 16 consecutive words of the byte image), whole
/// blocks of 16 output channels (a tile's rows), and input channels that
/// split into equal steps of at most 64 bytes (a tile row; see
/// `u8s8_amx_step`).
fn amx_tiles(attrs: &Attrs, o: usize, c4: usize) -> bool {
    let stride_one = attrs.ints("strides").is_ok_and(|s| s.iter().all(|&v| v == 1));
    stride_one && o % U8S8_OUTPUT_BLOCK == 0 && u8s8_amx_step(c4).is_some()
}

/// Whether the kernel's vector lanes are pixels (weight `OIHW4i`): a 1 × 1,
/// stride-1, unpadded convolution over a map of whole 16-pixel vectors — a
/// matrix product over the pixels, whose accumulators are then contiguous
/// in the NCHW output (with channels as lanes, each tile is transposed on
/// its way out, which cost more than the products on short reductions).
fn pixels_as_lanes(attrs: &Attrs, data: &[usize], kh: usize, kw: usize) -> bool {
    let all = |name: &str, v: i64| attrs.ints(name).is_ok_and(|x| x.iter().all(|&q| q == v));
    (kh, kw) == (1, 1) && all("strides", 1) && all("padding", 0) && (data[2] * data[3]) % U8S8_OUTPUT_BLOCK == 0
}

/// `[lo, hi]` of a float tensor whose values are all integers, by the ops
/// that make it (infinite bounds where only integrality is known); None
/// where integrality is not proven.
pub(super) fn integer_range(store: &Store, id: ExprId) -> Option<(f64, f64)> {
    const ANY: (f64, f64) = (f64::NEG_INFINITY, f64::INFINITY);
    let integral = |v: f64| v.is_finite() && v.fract() == 0.0;
    let args = store.as_call(id).map(|c| c.args.clone()).unwrap_or_default();
    let attrs = store.as_call(id).map(|c| c.attrs.clone());
    match store.op_name(id)? {
        "round" | "floor" | "ceil" | "trunc" => Some(ANY),
        "clip" => {
            let attrs = attrs?;
            let (lo, hi) = (attrs.float("a_min").ok()?, attrs.float("a_max").ok()?);
            let (xlo, xhi) = integer_range(store, args[0])?;
            // Integral bounds keep integers integers (a NaN stays NaN: no byte
            // reads it, as the float path would not either).
            (integral(lo) && integral(hi)).then_some((xlo.max(lo), xhi.min(hi)))
        }
        "cast" => {
            let from = store.checked_type(args[0])?.as_tensor()?.dtype;
            let to = store.checked_type(id)?.as_tensor()?.dtype;
            let range = match from {
                DataType::U8 => (0.0, 255.0),
                DataType::I8 => (-128.0, 127.0),
                DataType::U16 => (0.0, 65535.0),
                DataType::I16 => (-32768.0, 32767.0),
                _ => return None,
            };
            (to == DataType::F32).then_some(range)
        }
        "add" | "subtract" => {
            let (xlo, xhi) = integer_range(store, args[0])?;
            let k = scalar_integer(store, args[1])?;
            let k = if store.op_name(id)? == "add" { k } else { -k };
            Some((xlo + k, xhi + k))
        }
        "nn.relu" => integer_range(store, args[0]).map(|(lo, hi)| (lo.max(0.0), hi.max(0.0))),
        // Every window of a pooling without ceil mode and with pads smaller
        // than the window holds an input value: the maximum is one of them.
        "nn.max_pool2d" => {
            let attrs = attrs?;
            let pool = attrs.ints("pool_size").ok()?;
            let pads = attrs.ints("padding").ok()?;
            let fits = pads.iter().zip(pool.iter().cycle()).all(|(&p, &k)| p < k);
            (fits && !attrs.bool("ceil_mode").ok()?).then(|| integer_range(store, args[0])).flatten()
        }
        _ => None,
    }
}

/// A constant holding one integral value (any shape that broadcasts it).
fn scalar_integer(store: &Store, id: ExprId) -> Option<f64> {
    let ExprKind::Constant(c) = store.kind(id) else { return None };
    let v = store.constant_data(*c).to_f64_vec();
    let first = *v.first()?;
    (first.is_finite() && first.fract() == 0.0 && v.iter().all(|&x| x == first)).then_some(first)
}
