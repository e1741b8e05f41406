//! The compute of `nn.contrib_conv2d_u8s8` (see its operator docs in
//! `kiln_ir::relay::op`): the data as bytes in a channel-grouped image of
//! 32-bit words, the int32 sums over groups of four channels written out as
//! four products — the shape of one `vpdpbusd` lane, which
//! `tir::transform::dot_products` turns into the instruction where the
//! target has it.

use std::sync::Arc;

use kiln_ir::relay::op::{U8S8Layout, U8S8_INPUT_GROUP, U8S8_OUTPUT_BLOCK};
use kiln_ir::relay::OpMap;
use kiln_ir::{DataType, OpError};

use super::{expand_ints, in_range, one, select, ComputeCall, ComputeFn, TeValue};
use crate::te::{compute, reduce_axis, sum, Tensor};
use crate::tir::{BinOp, Expr, TirType};

pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    m.set("nn.contrib_conv2d_u8s8", Arc::new(conv2d_u8s8));
}

/// How a word image packs channels into 32-bit words: `parts` channels to
/// a word, channel `parts·g + j` in part `j` (the `j`-th least significant
/// `32 / parts` bits), each made by `bits(inside, value)` — `inside` false
/// for the padding and the channels past the data's.
pub(super) struct WordPacking<'a> {
    pub parts: i64,
    pub bits: &'a dyn Fn(Expr, Expr) -> Expr,
}

impl WordPacking<'_> {
    /// The word of `value(j)` for the parts `j` (each `(inside, value)`).
    pub(super) fn word(&self, mut value: impl FnMut(i64) -> (Expr, Expr)) -> Expr {
        let width = 32 / self.parts;
        (0..self.parts)
            .map(|j| {
                let (inside, v) = value(j);
                (self.bits)(inside, v) * Expr::constant((1u64 << (width * j)) as f64, DataType::U32)
            })
            .reduce(|a, b| a + b)
            .expect("a part")
    }
}

/// Byte `value + offset` of data of `dtype` float32 (integers) or uint8
/// (the bytes themselves; outside, `offset`); 0 + offset outside.
fn byte(dtype: DataType, offset: i64, inside: Expr, v: Expr) -> Expr {
    if dtype == DataType::U8 {
        let outside = Expr::constant(offset as f64, DataType::U8);
        Expr::cast(TirType::scalar(DataType::U32), select(inside, v, outside))
    } else {
        let d = select(inside, v, Expr::constant(0.0, DataType::F32));
        Expr::cast(TirType::scalar(DataType::U32), d + Expr::constant(offset as f64, DataType::F32))
    }
}

/// `pad[n, c/4, y, x]`: the padded data plus the offset as bytes, four
/// channels to a 32-bit word (channel `4g + j` in byte `j`, little-endian:
/// the four bytes of one dot-product lane), channels past the data's (up to
/// a whole group) and the padding read as 0. Words, not bytes, so that the
/// image is computed along a row in whole vectors: four contiguous loads,
/// one contiguous store (a byte layout interleaves four channel rows).
pub(super) fn word_image(x: &Tensor, channel_groups: usize, pads: &[i64], packing: &WordPacking) -> Tensor {
    let s = x.shape().to_vec();
    let g = packing.parts;
    let shape = [s[0], channel_groups, s[2] + (pads[0] + pads[2]) as usize, s[3] + (pads[1] + pads[3]) as usize];
    let clamp =
        |e: Expr, n: usize| Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, e, Expr::int(0)), Expr::int(n as i64 - 1));
    compute("pad", &shape, |i| {
        let h = i[2].clone() - Expr::int(pads[0]);
        let w = i[3].clone() - Expr::int(pads[1]);
        let pixel = Expr::and(in_range(&h, 0, s[2] as i64), in_range(&w, 0, s[3] as i64));
        packing.word(|j| {
            let c = i[1].clone() * Expr::int(g) + Expr::int(j);
            let inside = Expr::and(pixel.clone(), in_range(&c, 0, s[1] as i64));
            (inside, x.at(&[i[0].clone(), clamp(c, s[1]), clamp(h.clone(), s[2]), clamp(w.clone(), s[3])]))
        })
    })
}

/// The output pixels per row an AMX kernel's tile covers (`OHWI` weights):
/// two tiles of 16 on rows wider than 16, else one.
pub(crate) fn amx_pixel_tile(width: usize) -> usize {
    if width > 16 {
        32
    } else {
        16
    }
}

/// The paddings of the word image an AMX kernel reads: its right padding
/// reaches the end of the last whole tile of pixels of a row (stride 1), so
/// that no tile reads past its row (the extra outputs are not written).
pub(super) fn amx_image_pads(pads: &[i64], out_width: usize, in_width: usize, kw: usize) -> [i64; 4] {
    let tile = amx_pixel_tile(out_width) as i64;
    let width = (out_width as i64 + tile - 1) / tile * tile + kw as i64 - 1;
    let right = width - in_width as i64 - pads[1];
    [pads[0], pads[1], pads[2], right.max(pads[3])]
}

/// `pad[n, c/4, p]`: [`word_image`] of an unpadded input over its pixels
/// `p = y·W + x` (a kernel whose vector lanes are pixels reads it along `p`).
fn word_image_over_pixels(x: &Tensor, channel_groups: usize, packing: &WordPacking) -> Tensor {
    let s = x.shape().to_vec();
    let g = packing.parts;
    let width = Expr::int(s[3] as i64);
    compute("pad", &[s[0], channel_groups, s[2] * s[3]], |i| {
        let (h, w) = (
            Expr::bin(BinOp::FloorDiv, i[2].clone(), width.clone()),
            Expr::bin(BinOp::FloorMod, i[2].clone(), width.clone()),
        );
        packing.word(|j| {
            let c = i[1].clone() * Expr::int(g) + Expr::int(j);
            let clamped = Expr::bin(BinOp::Min, c.clone(), Expr::int(s[1] as i64 - 1));
            (in_range(&c, 0, s[1] as i64), x.at(&[i[0].clone(), clamped, h.clone(), w.clone()]))
        })
    })
}

/// Byte `j` of a word of the image, as int32.
fn byte_of(word: Expr, j: i64) -> Expr {
    let shifted = Expr::bin(BinOp::FloorDiv, word, Expr::constant((1u64 << (8 * j)) as f64, DataType::U32));
    let byte = Expr::bin(BinOp::FloorMod, shifted, Expr::constant(256.0, DataType::U32));
    Expr::cast(TirType::scalar(DataType::I32), byte)
}

fn conv2d_u8s8(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (x, w, comp) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    let strides = expand_ints(c.attrs, "strides", 2)?;
    let pads = expand_ints(c.attrs, "padding", 4)?;
    let offset = c.attrs.int("data_offset")?;
    let [_, groups, kh, kw] = kiln_ir::relay::op::u8s8_weight_dims(w.shape(), c.attrs)?;
    let layout = U8S8Layout::of(c.attrs)?;
    let over_pixels = layout == U8S8Layout::PixelLanes
        && pads.iter().all(|&p| p == 0)
        && strides.iter().all(|&s| s == 1)
        && (kh, kw) == (1, 1);
    let bytes = |inside, v| byte(x.dtype(), offset, inside, v);
    let packing = WordPacking { parts: U8S8_INPUT_GROUP as i64, bits: &bytes };
    let image = if over_pixels {
        word_image_over_pixels(&x, groups, &packing)
    } else if layout == U8S8Layout::Rows {
        word_image(&x, groups, &amx_image_pads(&pads, shape[3], x.shape()[3], kw), &packing)
    } else {
        word_image(&x, groups, &pads, &packing)
    };
    let width = Expr::int(x.shape()[3] as i64);
    let (rc, ry, rx) = (reduce_axis(groups, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx"));
    let (cv, yv, xv) = (Expr::var(&rc.0), Expr::var(&ry.0), Expr::var(&rx.0));
    let block = Expr::int(U8S8_OUTPUT_BLOCK as i64);
    let i32 = |e: Expr| Expr::cast(TirType::scalar(DataType::I32), e);
    let acc = compute("conv_acc", &shape, |i| {
        let (ob, oi) = (
            Expr::bin(BinOp::FloorDiv, i[1].clone(), block.clone()),
            Expr::bin(BinOp::FloorMod, i[1].clone(), block.clone()),
        );
        let h = i[2].clone() * Expr::int(strides[0]) + yv.clone();
        let ww = i[3].clone() * Expr::int(strides[1]) + xv.clone();
        // The four products of one dot-product lane, written out (not a
        // reduction loop) so that they stay together inside the register tile.
        let dot = (0..U8S8_INPUT_GROUP as i64)
            .map(|j| {
                let word = if over_pixels {
                    image.at(&[i[0].clone(), cv.clone(), h.clone() * width.clone() + ww.clone()])
                } else {
                    image.at(&[i[0].clone(), cv.clone(), h.clone(), ww.clone()])
                };
                let d = byte_of(word, j);
                let k = match layout {
                    U8S8Layout::PixelLanes => w.at(&[i[1].clone(), cv.clone(), yv.clone(), xv.clone(), Expr::int(j)]),
                    U8S8Layout::ChannelLanes => {
                        w.at(&[ob.clone(), cv.clone(), yv.clone(), xv.clone(), oi.clone(), Expr::int(j)])
                    }
                    U8S8Layout::Rows => {
                        w.at(&[i[1].clone(), yv.clone(), xv.clone(), cv.clone() * Expr::int(4) + Expr::int(j)])
                    }
                };
                d * i32(k)
            })
            .reduce(|a, b| a + b)
            .expect("four products");
        sum(dot, &[rc.clone(), ry.clone(), rx.clone()])
    });
    one(compute("conv2d_u8s8", &shape, |i| {
        Expr::cast(TirType::scalar(DataType::F32), acc.at(i) + comp.at(&[i[1].clone()]))
    }))
}
