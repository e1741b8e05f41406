//! Bf16Precision: the opt-in bf16 precision (`relay.Bf16Precision.enable`, set by
//! `Build::precision(Precision::Bf16)` and `--precision bf16`) computes
//! convolutions and matrix products with constant weights as bfloat16
//! products summed in float32.
//!
//! A `nn.conv2d` with a constant float32 weight that AMX tiles can compute
//! (see `schedule/amx.rs`: stride 1, whole blocks of 16 output channels,
//! input channels in equal steps of 16–64 bytes) becomes
//! `nn.contrib_conv2d_bf16`: the weight rounded to bfloat16 at build time
//! (`[O, KH, KW, C2]`), the data rounded as the kernel reads them, the
//! products summed in float32 (`tdpbf16ps`: 16 times the fp32 FMA's
//! multiply-adds per cycle on Sapphire Rapids). Likewise a `nn.dense` (or a
//! `nn.matmul` of plain data) whose constant weight has whole blocks of 16
//! columns becomes `nn.contrib_dense_bf16`, the weight rounded and packed in
//! pairs of rows (`[K2/2, N, 2]`). Everything else — other convolutions,
//! products of two activations, the epilogues, every other operator — stays
//! float32.
//! Run before AlterOpLayout (which would pack or Winograd-transform the
//! weight), after IntegerConv2d (a quantized model's convolutions are exact
//! integers there).

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::op::{bf16_bits, u8s8_amx_step, BF16_INPUT_GROUP, U8S8_OUTPUT_BLOCK};
use kiln_ir::relay::{mutate, Call, ExprId, ExprKind, ExprMutator, Store};
use kiln_ir::{DataType, Tensor};

use super::integer_conv2d::plain_conv2d;

struct Rewrite {
    /// The fewest multiply-adds a product rewritten has (see [`MIN_MACS`]).
    min_macs: u64,
}

/// The default floor of multiply-adds per product: below it, rounding the
/// data to bfloat16 costs more than the tiles save (the MLP's 784 → 128
/// layer, 100 k multiply-adds, took 5.7 µs in bf16 against 2.6 in float32;
/// LeNet's fully connected layers likewise). `relay.Bf16Precision.min_macs`
/// sets it.
pub const MIN_MACS: u64 = 1 << 20;

/// The shortest reduction per output (C · KH · KW) rewritten: shorter ones
/// are bound by their image and write-back, not their products.
const MIN_REDUCTION: usize = 64;

impl ExprMutator for Rewrite {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        let (Some(pre_call), Some(call)) = (store.as_call(pre).cloned(), store.as_call(post).cloned()) else {
            return post;
        };
        match store.op_name(post) {
            _ if macs(store, pre).is_none_or(|m| m < self.min_macs) => post,
            Some("nn.conv2d") => rewrite_conv2d(store, &pre_call, &call, post).unwrap_or(post),
            Some("nn.dense" | "nn.matmul") => rewrite_dense(store, &pre_call, &call, post).unwrap_or(post),
            _ => post,
        }
    }
}

/// Rewrites the convolutions of `func` that qualify (see the module docs).
pub fn bf16_precision(store: &mut Store, func: ExprId, min_macs: u64) -> ExprId {
    mutate(store, func, &mut Rewrite { min_macs })
}

/// The multiply-adds of a convolution or product `pre` (typed): each output
/// element's reduction — a convolution's weight `C · KH · KW`, a product's
/// features — times the output's elements; None for another call.
fn macs(store: &Store, pre: ExprId) -> Option<u64> {
    let call = store.as_call(pre)?;
    let out: u64 = store.checked_type(pre)?.as_tensor()?.shape.iter().map(|&d| d as u64).product();
    let reduction: u64 = match store.op_name(pre)? {
        "nn.conv2d" => {
            store.checked_type(*call.args.get(1)?)?.as_tensor()?.shape[1..].iter().map(|&d| d as u64).product()
        }
        "nn.dense" | "nn.matmul" => *store.checked_type(*call.args.first()?)?.as_tensor()?.shape.last()? as u64,
        _ => return None,
    };
    Some(out * reduction)
}

fn rewrite_conv2d(store: &mut Store, pre: &Call, call: &Call, post: ExprId) -> Option<ExprId> {
    let a = &call.attrs;
    if !a.ints("strides").ok()?.iter().all(|&s| s == 1) {
        return None;
    }
    let (x, weight, [o, ci, kh, kw]) = plain_conv2d(store, pre, call)?;
    let c2 = ci.div_ceil(BF16_INPUT_GROUP) * BF16_INPUT_GROUP;
    let fits = o % U8S8_OUTPUT_BLOCK == 0 && u8s8_amx_step(2 * c2).is_some() && ci * kh * kw >= MIN_REDUCTION;
    if !fits {
        return None;
    }
    // [O, KH, KW, C2], channels past C zero.
    let values = weight.to_f64_vec();
    let mut packed = vec![0.0; o * kh * kw * c2];
    for oc in 0..o {
        for ic in 0..ci {
            for y in 0..kh {
                for z in 0..kw {
                    packed[((oc * kh + y) * kw + z) * c2 + ic] =
                        bf16_bits(values[((oc * ci + ic) * kh + y) * kw + z] as f32) as f64;
                }
            }
        }
    }
    let span = store.span(post).clone();
    let packed = store.constant(Tensor::from_f64(DataType::U16, vec![o, kh, kw, c2], &packed));
    let attrs = Attrs::from_pairs([
        ("strides", AttrValue::Ints(a.ints("strides").ok()?.to_vec())),
        ("padding", AttrValue::Ints(a.ints("padding").ok()?.to_vec())),
    ]);
    store.call_op_at("nn.contrib_conv2d_bf16", vec![x, packed], attrs, span).ok()
}

/// `x · W` with a constant weight (`nn.dense`: `W` is `[N, K]`; `nn.matmul`
/// without `transpose_a`: `[K, N]`, or `[N, K]` with `transpose_b`) as
/// `nn.contrib_dense_bf16` where the features split into equal steps of
/// 16–64 bytes (columns past whole blocks of 16 padded to whole tiles).
fn rewrite_dense(store: &mut Store, pre: &Call, call: &Call, post: ExprId) -> Option<ExprId> {
    let a = &call.attrs;
    let transposed = match store.op_name(post)? {
        "nn.dense" => true,
        _ if a.bool("transpose_a").unwrap_or(false) => return None,
        _ => a.bool("transpose_b").unwrap_or(false),
    };
    if !matches!(a.str("out_dtype").unwrap_or(""), "" | "float32") {
        return None;
    }
    let ([_, _], [x, w]) = (&pre.args[..], &call.args[..]) else { return None };
    let ExprKind::Constant(c) = store.kind(*w) else { return None };
    let weight = store.constant_data(*c).clone();
    let x_type = store.checked_type(pre.args[0])?.as_tensor()?.clone();
    let &[r, q] = weight.shape() else { return None };
    let (n, k) = if transposed { (r, q) } else { (q, r) };
    let pairs = k.div_ceil(BF16_INPUT_GROUP);
    let fits = u8s8_amx_step(4 * pairs).is_some() && k >= MIN_REDUCTION;
    if weight.dtype() != DataType::F32 || x_type.dtype != DataType::F32 || x_type.shape.last() != Some(&k) || !fits {
        return None;
    }
    // [K2/2, N', 2]: element (k, n) at ((k / 2) · N' + n) · 2 + k % 2, k past
    // K zero; columns past N zero up to whole 32-column tiles (a 1000-token
    // head), which the product computes and does not store.
    let columns = if n % U8S8_OUTPUT_BLOCK == 0 { n } else { n.next_multiple_of(2 * U8S8_OUTPUT_BLOCK) };
    let values = weight.to_f64_vec();
    let mut packed = vec![0.0; pairs * columns * 2];
    for row in 0..k {
        for col in 0..n {
            let v = if transposed { values[col * k + row] } else { values[row * n + col] };
            packed[((row / 2) * columns + col) * 2 + row % 2] = bf16_bits(v as f32) as f64;
        }
    }
    let span = store.span(post).clone();
    let packed = store.constant(Tensor::from_f64(DataType::U16, vec![pairs, columns, 2], &packed));
    let attrs = Attrs::from_pairs([("units", AttrValue::Int(n as i64))]);
    store.call_op_at("nn.contrib_dense_bf16", vec![*x, packed], attrs, span).ok()
}
