//! Depthwise convolutions: the input read in place with masked loads
//! (AVX-512: stride-1 planes that fit L1, every stride-2 one; rows read as
//! whole vectors of the row and shifts of them) or through a padded image
//! per channel (or per band of rows and channel), register tiles of output
//! rows with the window unrolled.

use super::super::{
    divisor_at_most, extent, fill_loops, fuse_parallel, materialized, reduction_loops, reduction_nest, tile_kinds,
};
use super::{with_batch_loop, ConvOrder, Knobs, Schedule, ScheduleError};
use crate::target::VectorUnit;
use crate::tir::PrimFunc;

/// The most output vectors of a depthwise tile (a tuned one included): each
/// is an accumulator beside the window's nine weights.
const MAX_DEPTHWISE_TILE: i64 = 12;

/// The accumulator vectors of a depthwise tile over rows of partial vectors
/// on a unit of 32 registers.
const WIDE_DEPTHWISE_VECTORS: i64 = 8;

/// Output rows per tile of whole-vector rows padded a few rows at a time on
/// a unit of 32 registers (see `schedule_depthwise`).
const PLANE_ROWS_WIDE: i64 = 7;

/// The most row tiles of a plane read in place that are unrolled (see
/// `schedule_depthwise`).
const UNROLLED_ROW_TILES: i64 = 2;

/// The fewest output rows of a depthwise convolution run in bands of rows.
const MIN_BANDED_ROWS: i64 = 32;

/// A padded plane larger than this (an L1 data cache, Zen 3's) is padded a
/// few rows at a time on 8 lanes, and run in bands of rows (see
/// `schedule_depthwise`).
const L1_PLANE_BYTES: i64 = 32 * 1024;

/// An output plane of at most this many pixels (7 × 7, 8 × 8) has two
/// channels padded per image (see `schedule_depthwise`)...
const PAIRED_PLANE_PIXELS: i64 = 64;

/// ...and so has one of at most this many (14 × 14) under a window of at
/// least [`PAIRED_WIDE_WINDOW_TAPS`] taps (5 × 5).
const PAIRED_WIDE_WINDOW_PIXELS: i64 = 196;
const PAIRED_WIDE_WINDOW_TAPS: i64 = 25;

/// Whether a convolution kernel reads one input channel per output channel
/// (grouped, one input channel per group: depthwise, with any multiplier).
pub(super) fn is_depthwise(f: &PrimFunc) -> bool {
    let grouped = f.attrs.get("conv2d.groups").and_then(|g| g.parse::<i64>().ok()).is_some_and(|g| g > 1);
    let unpacked = !f.attrs.contains_key("conv2d.weight_block");
    grouped && unpacked && reduction_loops(f).first().is_some_and(|&(_, e)| e == 1)
}

/// Depthwise convolution: each channel (in parallel) has its padded image
/// computed once (an L1/L2-sized plane), then tiles of output rows × columns
/// with the whole window unrolled. Nine multiply-adds per output vector leave
/// no loop-carried accumulator to keep in registers, the weights stay in
/// registers across the channel, and neighbouring rows share their input
/// loads. (The general strategy padded three rows of every channel per
/// output row, 69 KB for 192 channels, and ran at a tenth of the FMA peak.)
///
/// A map of 32 output rows or more whose padded plane is past L1 and not
/// padded a few rows at a time (a stride-2 image on 16 registers) runs in 4
/// (or 2) bands of rows, band × channel in parallel, each band's padded
/// image per channel: split over two threads, each then reads the half of
/// the map that its core wrote — the pointwise convolutions around it split
/// their pixels the same way — not half of every channel's plane from the
/// other core's cache (Sapphire Rapids, two threads: MobileNetV2's 112² and
/// 56² depthwise kernels 0.73–0.94×, and the 1 × 1 kernels after them
/// 0.83–0.91×). Smaller maps lost to the bands' extra halo rows and tasks
/// (28 × 28: 1.29×), and on Zen 5 so did the 56² one, whose 13 KB plane is
/// in L1 (without bands 0.85–0.89× at one and two threads, AVX-512 and AVX2
/// code alike; the 112² ones 1.12–1.31× slower without). A plane read in
/// place (no padded image) runs without bands: each channel's rows one
/// stream, MobileNetV2's 112 → 56 kernel 0.88× the time at one and two
/// threads on Zen 5, the 1 × 1 kernels around it unchanged.
pub(super) fn schedule_depthwise(f: PrimFunc, unit: VectorUnit, knobs: &Knobs) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    let err = |s: &Schedule, m: &str| ScheduleError { kernel: s.func().name.clone(), message: m.into() };
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(&s, "no reduction nest"))?;
    let [outer @ .., oc, oh, ow] = &spatial[..] else { return Err(err(&s, "not an NCHW convolution")) };
    let (ohe, owe) = (extent(&s, oh).unwrap_or(1), extent(&s, ow).unwrap_or(1));
    let lanes = unit.f32_lanes as i64;
    let pads = materialized(s.func());
    // Columns in whole vectors, each weight broadcast once per channel into
    // one register (a vector of 56 or 28 lanes needs a register per 8 lanes
    // for each of the window's 9 weights: spilled). A row that is not whole
    // vectors (7, 14, 28 wide) is computed to the next whole vector inside
    // the padded image — the write-back stores only the row — when there is
    // a padded image to read past the row's end.
    let whole = owe % lanes == 0;
    if !whole && pads.is_empty() {
        return Err(err(&s, "a row of partial vectors without a padded image"));
    }
    let row_vectors = (owe + lanes - 1) / lanes;
    // Rows while the accumulators leave room for the window's weights; the
    // rows of a tile share their input rows' loads.
    let tile_vectors = if whole { 1 } else { row_vectors };
    // Four accumulator vectors on 16 registers (the window's nine weights
    // take the rest); on 32, rows of partial vectors take up to eight — more
    // rows share each input row's loads: MobileNetV2's 7 × 7 and 14 × 14
    // layers in 7-row tiles (not 1 and 2), its 28 × 28 in 4 (not 2) and
    // 56-wide outputs in 2 (not 1), 1.07–1.26× faster per kernel (`kiln tune`
    // on Sapphire Rapids). Whole-vector rows keep four (two were faster on
    // 112 × 112 there; not taken into the rule).
    // On 8 lanes a stride-1 plane past L1 (MobileNetV2's 112 × 112) is
    // padded a few rows at a time, two output rows per tile: the padded
    // plane computed once per channel (52 KB) left L1 before its last rows
    // were read (Zen 3, `kiln tune`'s find, paired batches: 0.77× the time at
    // one thread, 0.87× at two). 56 × 56 planes (13 KB) gain nothing at one
    // thread; stride-2 images (phase-split) lost. The rule's point is the
    // tuning knobs' `order=rows rows=2`. On 32 registers every plane past L1
    // is padded so, stride 2 included, whole-vector rows seven output rows
    // per tile (nine padded rows for seven, where two rows padded four):
    // MobileNetV2's 112 × 112 kernel 0.83× the time at one thread and 0.93×
    // at two, its 112 → 56 stride-2 one 0.84× and 0.91× (Zen 5, `kiln
    // tune`'s `order=rows rows=7` and `order=rows`, paired in the model;
    // rows=4 1.15× and rows=8 1.02× slower than 7).
    let stride_one = !pads.is_empty() && pads.iter().all(|p| p.shape().len() == 4);
    // One channel's padded image (each pad stage is [N, C, rows, …]).
    let plane_bytes = pads
        .iter()
        .map(|p| (p.shape().iter().skip(2).product::<usize>() * p.elem().size_bytes()) as i64)
        .max()
        .unwrap_or(0);
    let wide_unit = unit.registers >= 32;
    // With masked loads (AVX-512) a stride-1 plane that fits L1 is read in
    // place: the padded image inlined, each window row one load masked to
    // the lanes inside the image (`codegen/llvm/predicated.rs`), the tile's
    // accumulator updates kept whole vectors under their lane tests
    // (`MASKED_UPDATES_ATTR`). The padded copy was stored per channel and
    // read back at once, each 16-lane load spanning several of the fill's
    // stores, which cannot forward to it. Zen 5, per kernel in the model
    // (`scripts/ab_kernels.py`, one thread): MobileNetV2's 14 × 14 and
    // 7 × 7 kernels 0.66×, 28 × 28 0.79×, 56 × 56 0.89×; PP-LCNet's 3 × 3
    // ones 0.84–0.90×, its 5 × 5 ones unchanged. (A C model of the 14 × 14
    // kernel: 6.3 µs in place against 17 µs through a padded copy.) Planes
    // past L1 (112 × 112) measured the same either way, and with the rows
    // read on the grid below 0.95–1.16× (one thread), 0.99× (two): kept
    // padded a few rows at a time. At stride 2 each window row is read as
    // the masked loads of its span and a permute of their even elements:
    // output rows of one vector — MobileNetV2's 14 → 7 kernel 0.42–0.47×,
    // 28 → 14 0.68–0.84×, PP-LCNet's 0.67× and 0.77×. Rows of several
    // vectors (8 accumulators) were 1.09× and 1.15× slower than their
    // phase-split images that way, and are faster read on the grid: the
    // spans of every window column and output vector are the same few
    // vectors of the row, loaded once (`codegen/llvm/grid.rs`). Zen 5, on
    // top of the stride-1 grid, one thread: MobileNetV2's 112 → 56 kernel
    // 0.92×, 56 → 28 0.77×, 28 → 14 0.84×, 14 → 7 0.90× (two threads
    // 0.76–0.91×); PP-LCNet's 0.78–0.97×.
    let inline_pads = knobs.order.is_none() && unit.masked_loads() && (!stride_one || plane_bytes <= L1_PLANE_BYTES);
    // A stride-2 plane read in place whose input rows are wider than a
    // vector keeps four accumulator vectors: each tile row reads two more
    // input rows on the grid, and eight accumulators over 112-, 56- and
    // 28-wide input rows ran slower than four (`kiln tune`'s `rows=1` and
    // `rows=2` on Zen 5; paired in the model, one thread / two: MobileNetV2's
    // 112 → 56 kernel 0.79× / 0.62× the time in 1-row tiles, 56 → 28 0.87× /
    // 0.84× and 28 → 14 1.00× / 0.63× in 2-row ones, PP-LCNet's 0.93–1.02× /
    // 0.93–0.98×).
    let wide_stride_two = inline_pads && !stride_one && 2 * owe > lanes;
    let budget = if !whole && unit.registers >= 32 && !wide_stride_two { WIDE_DEPTHWISE_VECTORS } else { 4 };
    let rows_of_plane = !inline_pads
        && knobs.order.is_none()
        && knobs.rows.is_none()
        && plane_bytes > L1_PLANE_BYTES
        && (wide_unit || (whole && lanes == 8 && stride_one));
    let order = knobs.order.or(rows_of_plane.then_some(ConvOrder::Rows));
    let rows = knobs.rows.unwrap_or_else(|| {
        let most = match (rows_of_plane, wide_unit) {
            (true, false) => 2,
            (true, true) if whole => PLANE_ROWS_WIDE,
            _ => (budget / tile_vectors).max(1),
        };
        divisor_at_most(ohe, most)
    });
    if rows < 1 || ohe % rows != 0 || rows * tile_vectors > MAX_DEPTHWISE_TILE || knobs.cols.is_some() {
        return Err(err(&s, &format!("a depthwise tile of {rows} rows does not fit {ohe} rows")));
    }
    let (oh_o, oh_i) = s.split(oh, rows as usize)?;
    let (ow_o, ow_i) = s.split(ow, lanes as usize)?;
    let row_tiles = extent(&s, &oh_o).unwrap_or(1);
    let by_rule = order.is_none();
    let bands = if by_rule && ohe >= MIN_BANDED_ROWS && plane_bytes > L1_PLANE_BYTES && !inline_pads {
        [4, 2].into_iter().find(|b| row_tiles % b == 0)
    } else {
        None
    };
    let (band, oh_o) = match bands {
        Some(b) => {
            let (band, rest) = s.split(&oh_o, (row_tiles / b) as usize)?;
            s.reorder(&[band.clone(), oc.clone()])?;
            (Some(band), rest)
        }
        None => (None, oh_o),
    };
    // The padded image per channel (the rule) or per block of output rows
    // (`order=rows`: a few input rows, in L1 where a whole plane is not).
    // A small plane (7 × 7) pads two channels before computing either: the
    // tile's first loads no longer wait on the padded rows just stored (each
    // row load spans several of the fill's stores, which cannot forward to
    // it). Zen 5, per kernel in the model (`scripts/ab_kernels.py`):
    // MobileNetV2's 960-channel 7 × 7 kernel 0.63–0.75× the time at one
    // thread (0.75× as AVX2 code, 0.91× at two threads), PP-LCNet's 5 × 5 one
    // 0.64–0.66×, the stride-2 14 → 7 ones 0.92–1.06× (0.65× at two threads);
    // four channels no faster than two. On 14 × 14 planes PP-LCNet's 5 × 5
    // kernels 0.86–0.94× at one thread, 0.98× at two, 0.99× as AVX2 code
    // (five loads per input row where 3 × 3 has three: MobileNetV2's 3 × 3
    // ones 1.05–1.10× slower, not paired).
    let channels = extent(&s, oc).unwrap_or(1);
    let taps: i64 = reduction_loops(s.func()).iter().map(|&(_, e)| e).product();
    let small_plane =
        ohe * owe <= PAIRED_PLANE_PIXELS || (ohe * owe <= PAIRED_WIDE_WINDOW_PIXELS && taps >= PAIRED_WIDE_WINDOW_TAPS);
    let paired = by_rule && band.is_none() && small_plane && channels % 2 == 0 && !inline_pads;
    let (oc, channel_in_pair) = if paired {
        let (pair, channel) = s.split(oc, 2)?;
        (pair, Some(channel))
    } else {
        (oc.clone(), None)
    };
    let oc = &oc;
    let pad_at = match order {
        None | Some(ConvOrder::ChannelsPaddedOnce) => oc.clone(),
        Some(ConvOrder::Rows) => oh_o.clone(),
        Some(ConvOrder::ChannelsInPlace) => return Err(err(&s, "a depthwise convolution reads a padded image")),
    };
    if let Some(channel) = &channel_in_pair {
        s.reorder(&[oc.clone(), channel.clone(), oh_o.clone()])?;
    }
    let row_tile_loop = oh_o.clone();
    let tile = if whole {
        s.reorder(&[oh_o, ow_o.clone(), oh_i, ow_i])?;
        s.decompose_reduction(&ow_o, true)?
    } else {
        s.reorder(&[oh_o.clone(), oh_i, ow_o, ow_i])?;
        s.decompose_reduction_whole_tiles(&oh_o)?
    };
    for pad in pads {
        if inline_pads {
            s.compute_inline(&pad)?;
            continue;
        }
        // (A padded image computed per channel, pair or block of rows.)
        let local = s.compute_at(&pad, &pad_at)?;
        // A phase-split image (stride 2) is filled per phase: unrolled, each
        // phase's row is a plain strided copy once its borders are split off.
        if let [.., phase, _] = &fill_loops(s.func(), &local)[..] {
            if local.shape().len() == 5 && extent(&s, phase) == Some(2) {
                s.unroll(phase)?;
            }
        }
    }
    tile_kinds(&mut s, &tile)?;
    // Read in place, a plane of at most two row tiles (14 × 14 in 7-row
    // tiles) has them unrolled: each tile's rows above and below the image
    // are then known, their masks constants and their loads gone, where a
    // loop over the tiles chose each row's mask at run time. Zen 5, per
    // kernel in the model: PP-LCNet's 5 × 5 kernels on 14 × 14 0.76×,
    // MobileNetV2's 14 × 14 ones 0.83–0.88×; seven 4-row tiles (28 × 28)
    // unrolled were 1.12–1.16× slower (the code outgrows the caches).
    if inline_pads && extent(&s, &row_tile_loop).is_some_and(|n| n <= UNROLLED_ROW_TILES) {
        s.unroll(&row_tile_loop)?;
    }
    for r in &tile.reduce_loops {
        s.unroll(r)?;
    }
    let par = match band {
        Some(b) => vec![b, oc.clone()],
        None => with_batch_loop(&s, outer.last(), oc)?,
    };
    fuse_parallel(&mut s, &par)?;
    let mut f = s.into_func();
    if inline_pads {
        f.attrs.insert(kiln_ir::tir::transform::loop_partition::MASKED_UPDATES_ATTR.into(), "true".into());
        // Each input row is read at every window column per output vector
        // (at stride 2, as spans); on the grid of whole vectors of the row,
        // once (`codegen/llvm/grid.rs`).
        let width = f.params.first().and_then(|x| x.shape().last().copied()).unwrap_or(0);
        f.attrs.insert(crate::codegen::GRID_ROW_ATTR.into(), width.to_string());
    }
    Ok(f)
}
