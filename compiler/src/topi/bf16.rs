//! The computes of the bf16 precision's products (`nn.contrib_conv2d_bf16`,
//! `nn.contrib_dense_bf16`; see their operator docs in `kiln_ir::relay::op`):
//! the data rounded to bfloat16 in an image of 32-bit words holding two
//! channels (features) each — AMX-BF16's pairs — and float32 sums of the
//! two products per word.

use std::sync::Arc;

use kiln_ir::relay::op::BF16_INPUT_GROUP;
use kiln_ir::relay::OpMap;
use kiln_ir::{DataType, OpError};

use super::quantized::{amx_image_pads, word_image, WordPacking};
use super::{expand_ints, in_range, one, select, ComputeCall, ComputeFn, TeValue};
use crate::te::{compute, reduce_axis, sum};
use crate::tir::{BinOp, Expr, Intrinsic, TirType};

pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    m.set("nn.contrib_conv2d_bf16", Arc::new(conv2d_bf16));
    m.set("nn.contrib_dense_bf16", Arc::new(dense_bf16));
}

/// The bfloat16 bits of `v` where `inside`, else of 0, in a uint32.
fn rounded(inside: Expr, v: Expr) -> Expr {
    let zero = Expr::constant(0.0, DataType::F32);
    Expr::call(Intrinsic::Bf16Bits, vec![select(inside, v, zero)], TirType::scalar(DataType::U32))
}

/// The two products of a word of bfloat16 pairs and the weight pair that
/// `weight(j)` loads (uint16 bits), summed: as AMX takes them.
fn pair_products(word: Expr, weight: impl Fn(i64) -> Expr) -> Expr {
    let f32 = TirType::scalar(DataType::F32);
    let u32 = TirType::scalar(DataType::U32);
    let value = |bits: Expr| Expr::call(Intrinsic::Bf16Value, vec![bits], f32);
    (0..BF16_INPUT_GROUP as i64)
        .map(|j| {
            let shifted =
                Expr::bin(BinOp::FloorDiv, word.clone(), Expr::constant((1u64 << (16 * j)) as f64, DataType::U32));
            let half = Expr::bin(BinOp::FloorMod, shifted, Expr::constant(65536.0, DataType::U32));
            value(half) * value(Expr::cast(u32, weight(j)))
        })
        .reduce(|a, b| a + b)
        .expect("two products")
}

/// `nn.contrib_conv2d_bf16` (stride 1, `OHWI` bfloat16 weight): the data
/// rounded to bfloat16 in a word image of channel pairs (as AMX reads
/// them), each word's two products summed in float32 per step.
fn conv2d_bf16(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (x, w) = (c.tensor(0)?, c.tensor(1)?);
    let strides = expand_ints(c.attrs, "strides", 2)?;
    let pads = expand_ints(c.attrs, "padding", 4)?;
    let [_, kh, kw, c2] = [w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]];
    let parts = BF16_INPUT_GROUP as i64;
    let packing = WordPacking { parts, bits: &rounded };
    let groups = c2 / BF16_INPUT_GROUP;
    let image = if strides.iter().all(|&s| s == 1) {
        word_image(&x, groups, &amx_image_pads(&pads, shape[3], x.shape()[3], kw), &packing)
    } else {
        word_image(&x, groups, &pads, &packing)
    };
    let (rc, ry, rx) = (reduce_axis(groups, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx"));
    let (cv, yv, xv) = (Expr::var(&rc.0), Expr::var(&ry.0), Expr::var(&rx.0));
    one(compute("conv2d_bf16", &shape, |i| {
        let h = i[2].clone() * Expr::int(strides[0]) + yv.clone();
        let ww = i[3].clone() * Expr::int(strides[1]) + xv.clone();
        let word = image.at(&[i[0].clone(), cv.clone(), h, ww]);
        let dot = pair_products(word, |j| {
            w.at(&[i[1].clone(), yv.clone(), xv.clone(), cv.clone() * Expr::int(parts) + Expr::int(j)])
        });
        sum(dot, &[rc.clone(), ry.clone(), rx.clone()])
    }))
}

/// `nn.contrib_dense_bf16`: the data's rows (all leading axes, `M`) rounded
/// to bfloat16 in an image `pad[Mp, K2/2]` of feature pairs — `Mp` reaching
/// the end of the last whole tile of rows (`topi::amx_pixel_tile`), the rows past `M` and
/// the feature past `K` zero — so that an AMX tile of 16 rows × 32 features
/// is 16 rows of 64 contiguous bytes; `out[…, n] = Σ` of the pairs' products.
fn dense_bf16(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (x, w) = (c.tensor(0)?, c.tensor(1)?);
    let xs = x.shape().to_vec();
    let k = *xs.last().ok_or("the data has no axis")?;
    let rows: usize = xs[..xs.len() - 1].iter().product();
    let pairs = w.shape()[0];
    // The schedule tiles the last leading axis (`inner` rows of each of
    // `rows / inner` blocks) in whole tiles: the last block's last tile ends
    // `⌈inner / tile⌉ · tile` rows into it.
    let inner = if xs.len() >= 2 { xs[xs.len() - 2] } else { 1 };
    let tile = super::amx_pixel_tile(inner);
    let padded_rows = rows - inner + inner.div_ceil(tile) * tile;
    let parts = BF16_INPUT_GROUP as i64;
    // Row m of the data: its leading indices, last axis fastest.
    let leading = |m: &Expr| -> Vec<Expr> {
        let mut idx = Vec::new();
        let mut rest = m.clone();
        for &d in xs[..xs.len() - 1].iter().rev() {
            let d = Expr::int(d as i64);
            idx.push(Expr::bin(BinOp::FloorMod, rest.clone(), d.clone()));
            rest = Expr::bin(BinOp::FloorDiv, rest, d);
        }
        idx.reverse();
        idx
    };
    let clamp = |e: Expr, n: usize| Expr::bin(BinOp::Min, e, Expr::int(n as i64 - 1));
    let packing = WordPacking { parts, bits: &rounded };
    let image = compute("pad", &[padded_rows, pairs], |i| {
        let row_inside = in_range(&i[0], 0, rows as i64);
        let mut at = leading(&clamp(i[0].clone(), rows));
        packing.word(|j| {
            let f = i[1].clone() * Expr::int(parts) + Expr::int(j);
            let inside = Expr::and(row_inside.clone(), in_range(&f, 0, k as i64));
            at.push(clamp(f, k));
            let v = x.at(&at);
            at.pop();
            (inside, v)
        })
    });
    let rk = reduce_axis(pairs, "rc");
    let kv = Expr::var(&rk.0);
    let outer = shape.len() - 1;
    one(compute("dense_bf16", &shape, |i| {
        // The row: the leading output indices raveled.
        let m = i[..outer]
            .iter()
            .zip(&shape[..outer])
            .fold(Expr::int(0), |acc, (e, &d)| acc * Expr::int(d as i64) + e.clone());
        let word = image.at(&[m, kv.clone()]);
        let dot = pair_products(word, |j| w.at(&[kv.clone(), i[outer].clone(), Expr::int(j)]));
        sum(dot, std::slice::from_ref(&rk))
    }))
}
