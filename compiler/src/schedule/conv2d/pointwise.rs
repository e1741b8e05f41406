//! Pointwise (1 × 1) convolutions vectorized over pixels: the rule that
//! picks this strategy (shared with AlterOpLayout), its register tile and
//! the loop orders that decide which thread writes which pixels and channels.

use super::super::{divisor_at_most, extent, reduction_extent};
use super::{Schedule, ScheduleError, MIN_ACCUMULATORS};
use crate::target::VectorUnit;
use crate::tir::Var;

/// The loop order of a pointwise convolution over pixels that reads its input
/// in place (`[px_o, oc_o, oc_i, px_i]`: pixel tiles, channel tiles, then a
/// tile's channel rows and pixels), the loops to run in parallel and the
/// loop whose body is the register tile.
///
/// Pixel tiles outermost (a block of every input channel stays in L1 across
/// all the channel rows), in parallel with the channel tiles (a 14 × 14 map
/// has 7 tiles of 32 pixels, split 4 : 3 over two threads alone). On a map
/// of 56 × 56 or more, the channels in chunks of at most
/// [`MAX_CHANNELS_PER_SWEEP`], each sweeping the pixels of a band: the
/// outputs of a tile of pixels go to that many planes at once, not to every
/// plane (Sapphire Rapids, MobileNetV2's 16 → 96 on 112 × 112 writing 96
/// planes at once: 0.72× at one thread, 0.59× at two; its 24 → 144 on 56 ×
/// 56 0.84–0.93×, also on AVX2 code). Bands × chunks run in parallel, so
/// that two threads split the pixels as the depthwise convolution after it
/// does. An expansion (`expansion`: out ≥ 2 · in channels) on a smaller map
/// runs its channel tiles in two halves instead, each sweeping every pixel
/// tile (half × pixel tiles in parallel): the depthwise convolution after it
/// splits channels there, so each thread reads the channels its own core
/// wrote (MobileNetV2, two threads: its 14² and 28² depthwise kernels
/// 0.50–0.60×, the model 0.91×; PP-LCNet 0.97×; one thread unchanged).
pub(super) fn pointwise_in_place_order(
    s: &mut Schedule,
    [px_o, oc_o, oc_i, px_i]: [&Var; 4],
    rows: i64,
    pixels: i64,
    expansion: bool,
) -> Result<(Vec<Var>, Var), ScheduleError> {
    let channel_tiles = extent(s, oc_o).unwrap_or(1);
    match channel_sweeps(s, px_o, oc_o, rows, pixels)? {
        Some(w) => {
            s.reorder(&[
                w.band.clone(),
                w.chunk.clone(),
                w.pixel_tiles,
                w.channel_tiles.clone(),
                oc_i.clone(),
                px_i.clone(),
            ])?;
            Ok((vec![w.band, w.chunk], w.channel_tiles))
        }
        None if expansion && pixels < MIN_SWEPT_PIXELS && channel_tiles % 2 == 0 => {
            let (half, half_tiles) = s.split(oc_o, (channel_tiles / 2) as usize)?;
            s.reorder(&[half.clone(), px_o.clone(), half_tiles.clone(), oc_i.clone(), px_i.clone()])?;
            Ok((vec![half, px_o.clone()], half_tiles))
        }
        None => {
            s.reorder(&[px_o.clone(), oc_o.clone(), oc_i.clone(), px_i.clone()])?;
            Ok((vec![px_o.clone(), oc_o.clone()], oc_o.clone()))
        }
    }
}

/// A pointwise convolution's pixel tiles `px_o` split into bands and its
/// channel tiles `oc_o` (of `rows` channels) into chunks of at most
/// [`MAX_CHANNELS_PER_SWEEP`], on a map of at least [`MIN_SWEPT_PIXELS`]
/// pixels with more than one chunk (see `pointwise_in_place_order`); the
/// caller orders them band, chunk, pixel tiles, channel tiles.
pub(in crate::schedule) fn channel_sweeps(
    s: &mut Schedule,
    px_o: &Var,
    oc_o: &Var,
    rows: i64,
    pixels: i64,
) -> Result<Option<ChannelSweeps>, ScheduleError> {
    let px_tiles = extent(s, px_o).unwrap_or(1);
    let oc_tiles = extent(s, oc_o).unwrap_or(1);
    let chunks =
        (1..=oc_tiles).find(|c| oc_tiles % c == 0 && oc_tiles / c * rows <= MAX_CHANNELS_PER_SWEEP).unwrap_or(1);
    if pixels < MIN_SWEPT_PIXELS || chunks == 1 {
        return Ok(None);
    }
    let bands = [4, 2].into_iter().find(|b| px_tiles % b == 0).unwrap_or(1);
    let (band, pixel_tiles) = s.split(px_o, (px_tiles / bands) as usize)?;
    let (chunk, channel_tiles) = s.split(oc_o, (oc_tiles / chunks) as usize)?;
    Ok(Some(ChannelSweeps { band, chunk, pixel_tiles, channel_tiles }))
}

/// The loops of [`channel_sweeps`].
pub(in crate::schedule) struct ChannelSweeps {
    /// Bands of pixel tiles (4 or 2, or 1 where neither divides).
    pub band: Var,
    /// Chunks of channel tiles.
    pub chunk: Var,
    /// A band's pixel tiles.
    pub pixel_tiles: Var,
    /// A chunk's channel tiles.
    pub channel_tiles: Var,
}

/// The most output channels a pointwise convolution's sweep over a large map
/// writes at once...
const MAX_CHANNELS_PER_SWEEP: i64 = 32;

/// ...on maps of at least this many pixels (56 × 56).
const MIN_SWEPT_PIXELS: i64 = 3136;

/// The register tile of a pointwise convolution vectorized over pixels.
pub(super) struct PointwiseTile {
    /// Output channels (broadcast weights) per tile: a divisor of the channels.
    pub rows: i64,
    /// Pixels per tile: whole vectors.
    pub pixels: i64,
}

/// Whether a pointwise convolution over a map of `pixels` is vectorized over
/// its pixels: on 8- and 16-lane targets (AVX2, AVX-512), where the map is
/// whole vectors. AlterOpLayout keeps such convolutions OIHW by this same
/// rule. Its lanes are pixels, contiguous in the input and in the NCHW
/// output; packed (`OIHW8o`), the lanes are output channels a plane apart,
/// scattered on every write-back. On AVX2 (Zen 3; `scripts/ab_kernels.py`,
/// per-kernel times normalized by the unchanged kernels, three alternated
/// rounds, one thread): MobileNetV2's 32 → 192 on 28 × 28 0.75×, 32 → 16 on
/// 112 × 112 0.84×; PP-LCNet's 32 → 64 and 64 → 64 on 56 × 56 0.70× and
/// 0.82×; YOLOv8n's 1 × 1 SiLU convolutions on 80², 40² and 20² maps
/// 0.66–0.95×.
///
/// On AVX-512 also an expansion (at least twice the input channels) over a
/// map of whole vectors but one, its last vector overlapping the one before
/// (MobileNetV2's 14 × 14: 13 vectors for 196 pixels): the packed tile's
/// 7-column write-back, a transpose through shuffles into 7-lane runs, cost
/// about a third of its multiply-adds' time (Sapphire Rapids, two threads:
/// 96 → 576 0.89×, 64 → 384 0.83×). Projections stay packed: streaming their
/// long reduction's input rows per tile of pixels lost (576 → 96 1.33×).
pub fn pointwise_over_pixels(pixels: usize, in_channels: usize, out_channels: usize, unit: VectorUnit) -> bool {
    let lanes = unit.f32_lanes;
    let whole = pixels % lanes == 0;
    let expansion = out_channels >= 2 * in_channels;
    lanes >= 8 && pixels > 0 && (whole || lanes >= 16 && expansion && overlapping_vectors_waste(pixels, lanes) <= 1.1)
}

/// The work a run of `pixels` takes in whole vectors of `lanes` (the last
/// one overlapping the one before), relative to the pixels themselves.
fn overlapping_vectors_waste(pixels: usize, lanes: usize) -> f64 {
    (pixels.div_ceil(lanes) * lanes) as f64 / pixels as f64
}

/// The tile of the pixel-vectorized pointwise strategy, where it applies: a
/// `conv2d.pointwise` kernel left OIHW — by [`pointwise_over_pixels`] on
/// AVX2 and AVX-512, or on any unit for a reduction too short to pack
/// (MobileNetV2's 16 and 24 input channels) — whose `oh` × `ow` map is whole
/// vectors. Up to 3 vectors of pixels and 8 channel rows (a divisor of the
/// channels), the accumulators, one vector row of the input and a broadcast
/// within the registers. On AVX-512 the most vectors (3 or 2) that divide the
/// map, else the tile of fewest loads per multiply-add, the last overlapping
/// (MobileNetV2's 32 → 192 on 28 × 28, 49 vectors: 8 × 2 instead of 8 × 1,
/// 0.84–0.87×; PP-LCNet's 28² and YOLOv8n's 20² ones 0.79–0.89×). On
/// AVX2 the tile with the fewest loads per multiply-add (at least 8
/// accumulators) — its vectors need not divide the map: the last tile then
/// overlaps the one before (YOLOv8n's 128 channels on 400 pixels: 4 × 3
/// vectors, 12 accumulators, where only 4 × 2 divides: its 1 × 1 SiLU
/// convolutions 0.68–1.04× of 4 × 2 at two threads, 0.62–1.00× at one).
/// Below 16 lanes only where a row holds no whole tile of two vectors: on
/// AVX2 the general tile took 8 channels × one vector of a 56-wide row (8
/// accumulators, 9 loads per 8 multiply-adds; MobileNetV2's 24 → 144 on
/// 56 × 56 24 % faster as 6 × 2 vectors of fused pixels), while on 112-wide
/// rows its 6 × 2-vector row tiles were 9 % faster than fused pixels (longer
/// runs per output plane).
pub(super) fn pointwise_pixels(s: &Schedule, oh: &Var, oce: i64, owe: i64, unit: VectorUnit) -> Option<PointwiseTile> {
    let pixels = extent(s, oh)? * owe;
    let channels = reduction_extent(s.func());
    let lanes = unit.f32_lanes as i64;
    let pointwise = s.func().attrs.get("conv2d.pointwise").is_some_and(|v| v == "true");
    let row_tiles = lanes < 16 && owe % (2 * lanes) == 0;
    let overlapping = pixels % lanes != 0;
    let over_pixels = pixels > 0 && pointwise_over_pixels(pixels as usize, channels as usize, oce as usize, unit);
    if !pointwise || row_tiles || pixels <= 0 || overlapping && !over_pixels {
        return None;
    }
    let registers = unit.registers as i64;
    let tile = |vectors: i64| PointwiseTile {
        rows: divisor_at_most(oce, ((registers - vectors - 1) / vectors).clamp(1, 8)),
        pixels: vectors * lanes,
    };
    if lanes >= 16 {
        // A projection on a small map (at least twice the input channels as
        // output ones, at most 32 × 32 pixels): 8 channel rows × 2 vectors
        // (4 × 2 where 8 do not divide the channels), the last tile
        // overlapping where 2 vectors do not divide the map. MobileNetV2's
        // 144 and 192 → 32 on 28 × 28 took 8 × 1 by the rule below, 1.12–1.25×
        // slower than 4 × 2 on Sapphire Rapids (`kiln tune`'s find); on Zen 5
        // 8 × 2 — 16 accumulators where 4 × 2's 8 only just cover the FMA
        // latency, 10 loads per 16 multiply-adds instead of 6 per 8 — ran
        // 0.85–0.87× the time of 4 × 2 in the model at one and two threads
        // (`kiln tune` there). On 56 × 56 the rule's 8 × 2 stays ahead.
        let projection = channels >= 2 * oce && oce % 4 == 0;
        if projection && (2 * lanes..=SMALL_PROJECTION_PIXELS).contains(&pixels) {
            let rows = if oce % 8 == 0 { 8 } else { 4 };
            return Some(PointwiseTile { rows, pixels: 2 * lanes });
        }
        if let Some(v) = (2..=3).rev().find(|v| pixels % (v * lanes) == 0) {
            return Some(tile(v));
        }
        // A map of whole vectors but one (MobileNetV2's 14 × 14), or of a
        // vector count neither 2 nor 3 divides (its 28 × 28: 49 vectors,
        // one-vector tiles of 8 channel rows load 9 values per 8
        // multiply-adds): the tile that computes the fewest pixels per
        // load-bound multiply-add, the last one overlapping.
        let cost = |t: &PointwiseTile| {
            let (vectors, computed) = (t.pixels / lanes, (pixels + t.pixels - 1) / t.pixels * t.pixels);
            let loads = (t.rows + vectors) as f64 / (t.rows * vectors) as f64;
            loads.max(1.0) * computed as f64 / pixels as f64
        };
        return (1..=3).rev().filter(|v| v * lanes <= pixels).map(tile).fold(None, |best: Option<PointwiseTile>, t| {
            match best {
                Some(b) if cost(&b) <= cost(&t) => Some(b),
                _ => Some(t),
            }
        });
    }
    // Three vectors cost a little more than their loads say (kept apart, and
    // mostly overlapping): with 12 accumulators either way, 6 × 2 was ahead
    // of 4 × 3 on MobileNetV2's 24 → 144 on 56 × 56 (1.01–1.09×) and level on
    // 32 → 192 on 28 × 28; 4 × 3 beats the 4 × 2 that 64 or 128 channels
    // allow otherwise (YOLOv8n's, 8 accumulators).
    let cost = |t: &PointwiseTile| {
        let (vectors, computed) = (t.pixels / lanes, (pixels + t.pixels - 1) / t.pixels * t.pixels);
        let accumulators = t.rows * vectors;
        let loads = (t.rows + vectors) as f64 / accumulators as f64;
        let penalty = if accumulators < MIN_ACCUMULATORS { 1.0 } else { 0.0 } + if vectors == 3 { 0.1 } else { 0.0 };
        loads * computed as f64 / pixels as f64 + penalty
    };
    // Most vectors first: the first of equal costs wins.
    (1..=3).rev().filter(|v| v * lanes <= pixels).map(tile).fold(None, |best: Option<PointwiseTile>, t| match best {
        Some(b) if cost(&b) <= cost(&t) => Some(b),
        _ => Some(t),
    })
}

/// The most pixels of a projection on a small map (see `pointwise_pixels`).
const SMALL_PROJECTION_PIXELS: i64 = 1024;
