//! The CPU strategies of `nn.contrib_conv2d_u8s8` (int8 convolutions), int32
//! accumulators whose four products per input-channel group stay together
//! in the update (one `vpdpbusd` per accumulator and group after
//! `tir.DotProducts`): with output channels as lanes (`OIHW16o4i`), a
//! register tile of `columns` output pixels × `vectors` blocks of 16 output
//! channels, the word image computed per output row, rows in parallel; with
//! pixels as lanes (`OIHW4i`, 1 × 1), see [`schedule_over_pixels`].

use super::conv2d::channel_sweeps;
use super::{divisor_at_most, extent, fuse_parallel, materialized, reduction_nest, tile_kinds};
use super::{Schedule, ScheduleError};
use crate::target::VectorUnit;
use crate::tir::PrimFunc;
use kiln_ir::relay::op::U8S8_OUTPUT_BLOCK;
use kiln_ir::DataType;

/// The register tile: pixels × channel vectors, the most accumulators that
/// leave a register for each weight vector and one for the broadcast bytes
/// (ties to more channel vectors: fewer broadcasts per product).
fn tile(pixels: i64, channel_vectors: i64, registers: i64) -> (i64, i64) {
    let mut best = (1, 1);
    for v in (1..=4).filter(|v| channel_vectors % v == 0) {
        let columns = divisor_at_most(pixels, ((registers - v - 1) / v).max(1));
        if columns * v >= best.0 * best.1 {
            best = (columns, v);
        }
    }
    best
}

/// Whether the kernel's lanes are pixels: its weight is `OIHW4i` (5-D int8).
fn pixels_as_lanes(f: &PrimFunc) -> bool {
    f.params.iter().any(|b| b.elem() == DataType::I8 && b.shape().len() == 5)
}

/// A 1 × 1 convolution with pixels as lanes: tiles of `rows` output channels
/// × `vectors` vectors of 16 pixels (rows and columns fused), each output
/// channel's four weight bytes broadcast per channel group, the tile's
/// pixels' words loaded as vectors; the image computed per pixel tile;
/// pixel tiles in parallel. The accumulators are rows of the NCHW output.
fn schedule_over_pixels(mut s: Schedule, unit: VectorUnit) -> Result<PrimFunc, ScheduleError> {
    let err = |s: &Schedule, m: &str| ScheduleError { kernel: s.func().name.clone(), message: m.into() };
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(&s, "no reduction nest"))?;
    let [outer @ .., oc, oh, ow] = &spatial[..] else { return Err(err(&s, "not an NCHW convolution")) };
    let block = U8S8_OUTPUT_BLOCK as i64;
    let oce = extent(&s, oc).unwrap_or(1);
    let pixels = extent(&s, oh).unwrap_or(1) * extent(&s, ow).unwrap_or(1);
    if pixels % block != 0 {
        return Err(err(&s, "the pixels are not whole vectors of 16"));
    }
    let registers = unit.registers as i64 / (block / unit.f32_lanes as i64).max(1);
    let (mut rows, mut vectors) = (1, 1);
    for v in [4, 2, 1].into_iter().filter(|v| (pixels / block) % v == 0) {
        let r = divisor_at_most(oce, ((registers - v - 1) / v).max(1));
        if r * v > rows * vectors {
            (rows, vectors) = (r, v);
        }
    }
    let px = s.fuse(oh, ow)?;
    let (px_o, px_i) = s.split(&px, (block * vectors) as usize)?;
    let (px_v, px_l) = s.split(&px_i, block as usize)?;
    let (oc_o, oc_i) = s.split(oc, rows as usize)?;
    // On a large map, channels in chunks sweeping bands of pixels, as for
    // float (`conv2d::channel_sweeps`): MobileNetV2's 16 → 96 on 112 × 112
    // wrote all 96 float planes at once.
    let (image_at, root, mut par) = match channel_sweeps(&mut s, &px_o, &oc_o, rows, pixels)? {
        Some(w) => {
            s.reorder(&[
                w.band.clone(),
                w.chunk.clone(),
                w.pixel_tiles.clone(),
                w.channel_tiles.clone(),
                oc_i,
                px_v,
                px_l,
            ])?;
            (w.pixel_tiles, w.channel_tiles, vec![w.band, w.chunk])
        }
        None => {
            s.reorder(&[px_o.clone(), oc_o.clone(), oc_i, px_v, px_l])?;
            (px_o.clone(), oc_o, vec![px_o])
        }
    };
    for pad in materialized(s.func()) {
        s.compute_at(&pad, &image_at)?;
    }
    let tile = s.decompose_reduction(&root, true)?;
    tile_kinds(&mut s, &tile)?;
    par.splice(0..0, outer.iter().cloned());
    fuse_parallel(&mut s, &par)?;
    Ok(s.into_func())
}

pub(super) fn schedule_conv2d_u8s8(f: PrimFunc, unit: VectorUnit) -> Result<PrimFunc, ScheduleError> {
    if pixels_as_lanes(&f) {
        return schedule_over_pixels(Schedule::new(f), unit);
    }
    let mut s = Schedule::new(f);
    let err = |s: &Schedule, m: &str| ScheduleError { kernel: s.func().name.clone(), message: m.into() };
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(&s, "no reduction nest"))?;
    let [outer @ .., oc, oh, ow] = &spatial[..] else { return Err(err(&s, "not an NCHW convolution")) };
    let (oce, owe) = (extent(&s, oc).unwrap_or(1), extent(&s, ow).unwrap_or(1));
    let block = U8S8_OUTPUT_BLOCK as i64;
    if oce % block != 0 {
        return Err(err(&s, "the output channels are not whole blocks of 16"));
    }
    // Registers of 16 int32 lanes: on narrower units each block takes several.
    let per_block = (block / unit.f32_lanes as i64).max(1);
    let registers = unit.registers as i64 / per_block;
    let (columns, vectors) = tile(owe, oce / block, registers);
    let (oc_o, oc_i) = s.split(oc, (block * vectors) as usize)?;
    let (oc_v, oc_l) = s.split(&oc_i, block as usize)?;
    let (ow_o, ow_i) = s.split(ow, columns as usize)?;
    // Rows outside channel blocks: a row's byte image serves every block.
    // In the tile, columns outside channel vectors: each broadcast word is
    // used by every vector at once and dies, the tile's weight vectors stay
    // (vectors outside, LLVM kept every column's broadcast live across them
    // and spilled accumulators).
    s.reorder(&[oh.clone(), oc_o, ow_o.clone(), ow_i, oc_v, oc_l])?;
    for pad in materialized(s.func()) {
        s.compute_at(&pad, oh)?;
    }
    let tile = s.decompose_reduction(&ow_o, true)?;
    tile_kinds(&mut s, &tile)?;
    // The write-back along the columns: contiguous NCHW stores (along the
    // channels each vector would be a 16-lane scatter, a plane apart).
    if let [col, v, lane] = &tile.writeback_loops[..] {
        s.reorder(&[v.clone(), lane.clone(), col.clone()])?;
        s.unroll(v)?;
        s.unroll(lane)?;
        s.vectorize(col)?;
    }
    let mut par = outer.to_vec();
    par.push(oh.clone());
    fuse_parallel(&mut s, &par)?;
    Ok(s.into_func())
}
