//! The convolution strategies of the default CPU schedule (see the parent
//! module's docs): packed (`OIHW<k>o`) register tiles and the general NCHW
//! tile here, pointwise over pixel vectors in [`pointwise`], depthwise in
//! [`depthwise`]; each takes its register tile and loop order from the rule
//! or from tuning [`Knobs`].

use super::prefetch::{parallel_loop, prefetch_next_parallel_iteration, prefetch_rows_ahead};
use super::primitives::ReductionTile;
use super::{
    calls_in_epilogue, contains, divisor_at_most, extent, fuse_parallel, materialized, reduction_extent,
    reduction_loops, reduction_nest, tile_kinds, ConvOrder, Knobs, Schedule, ScheduleError,
};
use crate::target::VectorUnit;
use crate::tir::{PrimFunc, Stmt, Var};

mod depthwise;
mod pointwise;

use depthwise::{is_depthwise, schedule_depthwise};
pub(super) use pointwise::channel_sweeps;
pub use pointwise::pointwise_over_pixels;
use pointwise::{pointwise_in_place_order, pointwise_pixels, PointwiseTile};

/// conv2d: see the module docs. Over an `OIHW<k>o` weight (AlterOpLayout's
/// packing of a constant weight) the vector lanes are `k` output channels,
/// contiguous in the weight, with an input value broadcast to all of them —
/// whole vectors even on the 7- and 14-column maps of late stages; otherwise
/// the lanes are output columns.
pub(super) fn schedule_conv2d(f: PrimFunc, unit: VectorUnit, knobs: &Knobs) -> Result<PrimFunc, ScheduleError> {
    let mut f = f;
    if is_depthwise(&f) {
        // The general strategy below still applies where this one does not;
        // the kernel says why (printed with the TIR).
        match schedule_depthwise(f.clone(), unit, knobs) {
            Ok(g) => return Ok(g),
            // A tuning record that does not fit is refused, not worked around.
            Err(e) if *knobs != Knobs::default() => return Err(e),
            Err(e) => {
                f.attrs.insert("depthwise".into(), format!("not applied ({})", e.message));
            }
        }
    }
    let mut s = Schedule::new(f);
    let err = |s: &Schedule, m: &str| ScheduleError { kernel: s.func().name.clone(), message: m.into() };
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(&s, "no reduction nest"))?;
    let [outer @ .., oc, oh, ow] = &spatial[..] else { return Err(err(&s, "not an NCHW convolution")) };
    let (oce, ohe, owe) = (extent(&s, oc).unwrap_or(1), extent(&s, oh).unwrap_or(1), extent(&s, ow).unwrap_or(1));
    let block = s.func().attrs.get("conv2d.weight_block").and_then(|b| b.parse::<i64>().ok());
    let lanes = unit.f32_lanes as i64;
    // Where the padded input is computed, and the loops that run in parallel.
    let (mut pad_at, mut par) = (PaddedImage::At(oh.clone()), vec![oh.clone()]);
    // Whether a packed tile's write-back runs along the columns (see
    // `columns_last_in_writeback`).
    let mut columns_last = false;
    // A register tile computed whole past a row's end (the write-back
    // guarded), decomposed before the padded image is placed so that the
    // image covers what the tile reads past the row.
    let mut whole_tile = None;
    // The tile loop of a tail tile (a row left over by two-row tiles).
    let mut tail_root: Option<Var> = None;
    // The columns of a packed tile (output columns, or fused pixels).
    let mut packed_columns = None;
    let pointwise = if block.is_none() { pointwise_pixels(&s, oh, oce, owe, unit) } else { None };
    // The loop whose body is the register tile.
    let ow_o = 'strategy: {
        match (block, pointwise) {
            (Some(k), _) => {
                let blocks = oce / k.max(1);
                let registers = unit.registers as i64;
                let pixels = extent(&s, oh).unwrap_or(1) * owe;
                let one_by_one = reduction_loops(s.func()).iter().filter(|(_, e)| *e > 1).count() == 1;
                let unit_stride_1x1 = one_by_one && stride_one(s.func());
                // A 1 × 1, stride-1, unpadded convolution is a matrix product over
                // the pixels: its tile's columns may run across rows, where a
                // narrow row (14 wide) allows only 1 × 14 tiles on AVX2 (15 loads
                // per 14 FMAs) and 196 pixels allow 3 × 4 (7 per 12). By the rule
                // only: a tuning record's columns are a row's.
                let mut rows_tile = packed_conv_tile(blocks, owe, registers);
                // A heavy epilogue (SiLU's sigmoid) is computed along the
                // columns of the write-back: on a whole vector of them where the
                // row allows, not on 5- or 10-lane ones split into 4 + 1 or
                // 8 + 2 (YOLOv8n's 80-wide rows took 2 × 5 tiles on AVX2: its
                // 3 → 16 stem 19 % faster as 1 × 8). A stride-1 1 × 1 one then
                // finds the pixels' 2 × 5 cheaper than the rows' 1 × 8 and reads
                // its input in place over fused pixels instead of repacking
                // every row (YOLOv8n's 32 → 32 on 80 × 80 8 % faster, its other
                // 1 × 1 ones within noise).
                // So does a stem's short reduction (3 × 3 over 3 channels):
                // a whole vector of columns per tile, its write-back whole
                // vectors after the transpose (`kiln tune`'s find on Zen 5:
                // MobileNetV2's 3 → 32 stem as 1 × 16 instead of 2 × 14 0.96×
                // the time at one thread, 0.81× at two; PP-LCNet's 0.94× and
                // 0.98×; AVX2 code unchanged). ResNet-18's 7 × 7 stem keeps
                // 2 × 14, which reads its weights half as often.
                let short_reduction = reduction_extent(s.func()) <= STEM_REDUCTION_STEPS;
                if (calls_in_epilogue(s.func()) || short_reduction)
                    && owe % lanes == 0
                    && rows_tile.columns % 4 != 0
                    && lanes + 2 <= registers
                {
                    rows_tile = PackedConvTile { channel_vectors: 1, columns: lanes };
                }
                let pixels_tile = packed_conv_tile(blocks, pixels, registers);
                let fuse_pixels = knobs.rows.is_none()
                    && knobs.cols.is_none()
                    && knobs.order != Some(ConvOrder::ChannelsPaddedOnce)
                    && unit_stride_1x1
                    && tile_cost_in_row(&pixels_tile, pixels, registers) < tile_cost_in_row(&rows_tile, owe, registers);
                let (rule, width) = if fuse_pixels { (pixels_tile, pixels) } else { (rows_tile, owe) };
                let by_rule = knobs.rows.is_none() && knobs.cols.is_none();
                let rule = if by_rule { wider_tile(rule, width, registers) } else { rule };
                // A row tile that does not divide the row (`wider_tile`) ends
                // in one that overlaps the tile before; a tuning record's
                // columns divide the row.
                let overlapping_row = !fuse_pixels && width % rule.columns != 0 && by_rule;
                let tile = PackedConvTile {
                    channel_vectors: knobs.rows.unwrap_or(rule.channel_vectors),
                    columns: knobs.cols.unwrap_or(rule.columns),
                };
                let (v, c) = (tile.channel_vectors, tile.columns);
                packed_columns = Some(c);
                if v < 1
                    || c < 1
                    || blocks % v != 0
                    || (width % c != 0 && !fuse_pixels && !overlapping_row)
                    || v * c + v + 1 > registers
                {
                    return Err(err(
                        &s,
                        &format!("a {v} × {c} tile does not fit {blocks} channel blocks × {owe} columns"),
                    ));
                }
                let (oc_o, oc_i) = s.split(oc, k as usize)?;
                let (oc_oo, oc_oi) = s.split(&oc_o, tile.channel_vectors as usize)?;
                let weight_bytes = oce * reduction_extent(s.func()) * 4;
                let padded_bytes: i64 =
                    materialized(s.func()).iter().map(|b| b.shape().iter().product::<usize>() as i64 * 4).sum();
                let fits_stack = padded_bytes <= PADDED_IMAGE_BYTES;
                if fuse_pixels {
                    // Pixel tiles in the Rows order (pixel blocks outermost and
                    // in parallel) or channel tiles outermost, as the rule says
                    // for the rows; the input read in place either way.
                    let px = s.fuse(oh, ow)?;
                    // A tile that does not divide the pixels (`wider_tile`)
                    // ends in one that overlaps the tile before.
                    let (px_o, px_i) = if pixels % tile.columns == 0 {
                        s.split(&px, tile.columns as usize)?
                    } else {
                        s.split_overlapping(&px, tile.columns as usize)?
                    };
                    let channels_first = knobs.order.map_or_else(
                        || channel_tiles_first(pixels, oce, extent(&s, &oc_oo).unwrap_or(1)),
                        |o| o == ConvOrder::ChannelsInPlace,
                    );
                    columns_last = true;
                    pad_at = PaddedImage::Inlined;
                    let root = if channels_first {
                        s.reorder(&[oc_oo.clone(), px_o.clone(), px_i, oc_oi, oc_i])?;
                        par = vec![oc_oo];
                        px_o
                    } else {
                        s.reorder(&[px_o.clone(), oc_oo.clone(), px_i, oc_oi, oc_i])?;
                        par = vec![px_o];
                        oc_oo
                    };
                    break 'strategy root;
                }
                let (ow_o, ow_i) = if overlapping_row {
                    s.split_overlapping(ow, tile.columns as usize)?
                } else {
                    s.split(ow, tile.columns as usize)?
                };
                // Stationary weights on a small map; on 16 lanes a 1 × 1
                // convolution with few output channels reads its input in
                // place instead of padding it once (the copy costs as much
                // per output channel as the products: MobileNetV2's 960 → 160
                // and 576 → 160 on 7 × 7 0.85–0.90× in place on Sapphire
                // Rapids, as `kiln tune` found; 960 → 320 and 320 → 1280 stay
                // ahead padded once). On 8 lanes each input pixel feeds half
                // the multiply-adds, and the in-place reads (7 floats per
                // 64-byte line, a line per input channel) outrun the L2's
                // bandwidth: padded once, the tile reads one sequential stream
                // (Zen 3: the same two 0.59–0.61× the time at 1 thread,
                // 0.73–0.76× at 2; by rows 1.14–1.28× slower than padded
                // once). NEON (4 lanes) keeps the in-place read: unmeasured,
                // and its padded two-row tile spills (`no_spill`).
                let stationary =
                    weight_bytes > WEIGHT_STATIONARY_BYTES && fits_stack && pixels <= WEIGHT_STATIONARY_PIXELS;
                let rule_order = if stationary && one_by_one && oce < MIN_PADDED_ONCE_CHANNELS && lanes != 8 {
                    ConvOrder::ChannelsInPlace
                } else if stationary {
                    ConvOrder::ChannelsPaddedOnce
                } else if one_by_one
                    && channel_tiles_first(pixels, oce, extent(&s, &oc_oo).unwrap_or(1))
                    && extent(&s, oh).unwrap_or(1) < MIN_SHARED_ROWS
                {
                    ConvOrder::ChannelsInPlace
                } else {
                    ConvOrder::Rows
                };
                let order = knobs.order.unwrap_or(rule_order);
                columns_last = writeback_along_columns(order, tile, unit);
                match order {
                    // The padded image is a kernel-local (stack) buffer.
                    ConvOrder::ChannelsPaddedOnce if !fits_stack => {
                        return Err(err(&s, "the padded image is too large to compute once"))
                    }
                    ConvOrder::ChannelsInPlace if !one_by_one => {
                        return Err(err(&s, "only a 1 × 1 convolution reads its input in place"))
                    }
                    _ => {}
                }
                match order {
                    // Weights larger than half the L2 cache on a small map (the
                    // 7 × 7 rows of late layers, 9.4 MB of weights in ResNet-18's
                    // last stage) would stream from L3 once per output row for
                    // only a row of work: keep each block of output channels in
                    // cache over every row instead, pad the whole image once, and
                    // run the channel blocks in parallel (7 rows split badly over
                    // threads, 32 channel blocks do not). On 14 × 14 maps the
                    // padded image no longer sits near L1 and this loses (Zen 3).
                    ConvOrder::ChannelsPaddedOnce => {
                        let n = outer.last();
                        s.reorder(&[
                            oc_oo.clone(),
                            oh.clone(),
                            ow_o.clone(),
                            ow_i.clone(),
                            oc_oi.clone(),
                            oc_i.clone(),
                        ])?;
                        // Without a batch loop the padded image stays where it was lowered.
                        pad_at = n.map_or(PaddedImage::AsLowered, |b| PaddedImage::At(b.clone()));
                        par = vec![oc_oo];
                        if by_rule && two_row_tile(tile, registers) && extent(&s, oh).is_some_and(|r| r >= 2) {
                            tail_root = tile_two_rows(&mut s, oh, [&ow_o, &ow_i, &oc_oi, &oc_i])?;
                        }
                        if tail_root.is_none() {
                            par = with_rows_if_few(&s, par, oh);
                        }
                    }
                    // A 1 × 1 convolution on a small map of few rows (see
                    // `MIN_SHARED_ROWS`) with more output channels than pixels:
                    // channel tiles in parallel too, each reading the input
                    // image (no larger than its weights) in place.
                    ConvOrder::ChannelsInPlace => {
                        s.reorder(&[oc_oo.clone(), oh.clone(), ow_o.clone(), ow_i, oc_oi, oc_i])?;
                        pad_at = PaddedImage::Inlined;
                        par = with_rows_if_few(&s, vec![oc_oo], oh);
                    }
                    // Per column one broadcast input, used by every channel vector.
                    ConvOrder::Rows => {
                        s.reorder(&[oh.clone(), oc_oo, ow_o.clone(), ow_i, oc_oi, oc_i])?;
                        let projection = reduction_extent(s.func()) > oce;
                        if unit_stride_1x1 && projection && owe >= WIDE_ROW {
                            pad_at = PaddedImage::Inlined;
                        }
                    }
                }
                ow_o
            }
            (None, Some(rule)) => {
                let tile = PointwiseTile {
                    rows: knobs.rows.unwrap_or(rule.rows),
                    pixels: knobs.cols.map_or(rule.pixels, |v| v * lanes),
                };
                let pixels = extent(&s, oh).unwrap_or(1) * owe;
                let vectors = tile.pixels / lanes;
                if tile.rows < 1
                    || vectors < 1
                    || oce % tile.rows != 0
                    || tile.pixels > pixels
                    || tile.rows * vectors + vectors + 1 > unit.registers as i64
                    || knobs.order.is_some()
                {
                    return Err(err(&s, &format!("a {} × {vectors}-vector pointwise tile does not fit", tile.rows)));
                }
                // Pointwise over whole vectors of pixels: rows and columns fused
                // into one run of pixels (contiguous in the input and the
                // output), tiles of channel rows × pixel vectors, pixel blocks
                // outermost (see `pointwise_in_place_order`) and in parallel.
                let px = s.fuse(oh, ow)?;
                let (oc_o, oc_i) = s.split(oc, tile.rows as usize)?;
                // Tiles that do not divide the map end in one that overlaps
                // the tile before (it recomputes a few pixels).
                let (px_o, px_i) = if pixels % tile.pixels == 0 {
                    s.split(&px, tile.pixels as usize)?
                } else {
                    s.split_overlapping(&px, tile.pixels as usize)?
                };
                let in_place = materialized(s.func()).is_empty();
                let (parallel, root) = if in_place {
                    let in_channels = reduction_loops(s.func()).first().map_or(1, |&(_, e)| e);
                    let expansion = oce >= 2 * in_channels;
                    pointwise_in_place_order(&mut s, [&px_o, &oc_o, &oc_i, &px_i], tile.rows, pixels, expansion)?
                } else {
                    s.reorder(&[px_o.clone(), oc_o.clone(), oc_i, px_i.clone()])?;
                    (vec![px_o.clone()], oc_o)
                };
                // Three vectors of 8 lanes as three (unrolled), not one of
                // 24: LLVM 14 widens a 24-lane vector to 32 lanes and builds
                // it element by element through the stack (YOLOv8n's 4 × 3
                // tiles ran 2–3.5× slower than 4 × 2 that way).
                if lanes < 16 && vectors > 1 && !(vectors as u64).is_power_of_two() {
                    s.split(&px_i, lanes as usize)?;
                }
                pad_at = if in_place { PaddedImage::Inlined } else { PaddedImage::At(px_o) };
                par = parallel;
                root
            }
            (None, None) => {
                if knobs.rows.is_some() || knobs.cols.is_some() || knobs.order.is_some() {
                    return Err(err(&s, "the general convolution tile has no knobs"));
                }
                // A row that is not whole vectors (LeNet's 28 columns on 8
                // lanes), read through a padded image: whole vectors of it,
                // computed past the row's end inside the image and stored up
                // to the row's end. (A divisor of the row made LeNet's stem
                // 14-lane vectors, split into 8 + 4 + 2 lanes and shuffled
                // together: 12 GFLOP/s.)
                if owe % lanes != 0 && !materialized(s.func()).is_empty() {
                    let vectors = if owe > lanes { 2 } else { 1 };
                    let registers = unit.registers as i64;
                    let rows = ((registers - vectors - 1) / vectors).clamp(1, 8);
                    let channels = divisor_at_most(oce, rows);
                    let (oc_o, oc_i) = s.split(oc, channels as usize)?;
                    let (ow_o, ow_i) = s.split(ow, (vectors * lanes) as usize)?;
                    // Two output rows where the registers hold them share each
                    // weight broadcast and the padded rows between them (LeNet's
                    // stem on 16 lanes: 24 accumulators, 0.88× the time).
                    let output_rows =
                        general_tile_rows(extent(&s, oh).unwrap_or(1), channels * vectors, vectors, registers);
                    if output_rows > 1 {
                        let (oh_o, oh_i) = s.split(oh, output_rows as usize)?;
                        s.reorder(&[oh_o.clone(), oc_o, ow_o.clone(), oh_i, oc_i, ow_i])?;
                        // A small padded image (LeNet's 32 × 32 stem input) is
                        // filled whole before the rows (by each thread), not
                        // per two output rows: those refilled six rows for
                        // every two and their first loads waited on the rows
                        // just stored (a load spanning several stores in flight
                        // is not forwarded from them). The stem 0.87× the time
                        // at one thread, 0.91× at two (Zen 5).
                        let image_bytes: usize = materialized(s.func())
                            .iter()
                            .map(|p| p.shape().iter().product::<usize>() * p.elem().size_bytes())
                            .sum();
                        if image_bytes <= SMALL_IMAGE_BYTES {
                            let tiles = extent(&s, &oh_o).unwrap_or(1);
                            let (image, rows) = s.split(&oh_o, tiles as usize)?;
                            pad_at = PaddedImage::At(image);
                            par = vec![rows];
                        } else {
                            pad_at = PaddedImage::At(oh_o.clone());
                            par = vec![oh_o];
                        }
                    } else {
                        s.reorder(&[oh.clone(), oc_o, ow_o.clone(), oc_i, ow_i])?;
                    }
                    whole_tile = Some(s.decompose_reduction_whole_tiles(&ow_o)?);
                    // A few tiles per row are unrolled: each write-back's guard
                    // then tests constants, so that LoopPartition leaves full
                    // tiles unguarded and the last one a shorter run of whole
                    // stores — both vectorized (a guarded write-back is stored
                    // lane by lane).
                    if extent(&s, &ow_o).is_some_and(|n| n <= MAX_UNROLLED_ROW_TILES) {
                        s.unroll(&ow_o)?;
                    }
                    break 'strategy ow_o;
                }
                // Whole vector registers where the row allows it (a 14-lane vector
                // costs split loads); any divisor up to 16 otherwise; as many
                // channel rows as leave a register for each row vector of the
                // weight broadcast and one for the input.
                let pow2 = [16, 8].into_iter().find(|&w| owe % w == 0);
                let mut owb = pow2.unwrap_or_else(|| divisor_at_most(owe, 16));
                if owb < 4 && owe > 16 {
                    owb = 16;
                }
                let vectors_per_row = (owb + lanes - 1) / lanes;
                let rows = ((unit.registers as i64 - vectors_per_row - 1) / vectors_per_row).clamp(1, 8);
                let (oc_o, oc_i) = s.split(oc, divisor_at_most(oce, rows) as usize)?;
                let (ow_o, ow_i) = s.split(ow, owb as usize)?;
                s.reorder(&[oh.clone(), oc_o, ow_o.clone(), oc_i, ow_i])?;
                ow_o
            }
        }
    };
    if let PaddedImage::At(at) = &pad_at {
        for pad in materialized(s.func()) {
            s.compute_at(&pad, at)?;
        }
    }
    let tile = match whole_tile {
        Some(t) => t,
        None => s.decompose_reduction(&ow_o, true)?,
    };
    let mut tiles = vec![tile];
    if let Some(t) = &tail_root {
        tiles.push(s.decompose_reduction(t, true)?);
    }
    for tile in &tiles {
        tile_kinds(&mut s, tile)?;
        let heavy = block.is_some() && heavy_epilogue(&s, tile);
        if (columns_last || heavy) && !(heavy && epilogue_along_channels(packed_columns, lanes)) {
            columns_last_in_writeback(&mut s, tile)?;
        }
    }
    // A stem's input (an image of at most 4 channels: the model's input,
    // read once per run and likely out of the caches) is asked for a few
    // output rows ahead of its padded rows' copy. YOLOv8n's 3 → 16 stem on
    // Zen 5: 0.77× the time in the model (its input's lines had arrived as
    // each row's copy asked for them), MobileNetV2's 0.85×, ResNet-18's
    // 7 × 7 0.95×, PP-LCNet's unchanged; YOLOv8n's kernel linked into a C
    // harness cycling 24 images 0.78×, on one image in cache 1.00×. Four
    // rows ahead as good as two, eight worse.
    let image = s.func().params[0].shape().get(1).is_some_and(|&c| c <= 4);
    if let (PaddedImage::At(at), true, Some(_)) = (&pad_at, image, block) {
        if at == oh {
            let input = s.func().params[0].clone();
            let f = prefetch_rows_ahead(s.into_func(), oh, &input, STEM_PREFETCH_ROWS);
            s = Schedule::new(f);
        }
    }
    // Rows in parallel, with the batch loop when directly above them.
    if par[0] == *oh {
        par = with_batch_loop(&s, outer.last(), oh)?;
    }
    fuse_parallel(&mut s, &par)?;
    let mut f = s.into_func();
    // The next block of output channels' weights, where each weight is read
    // for several pixels (not a squeeze-excitation's 1 × 1 map: each read
    // once, the hardware prefetcher keeps up — 1.08× slower so) and a block's
    // are few enough that two stay in L2 (not ResNet-18's 590 KB blocks of
    // 512 → 512 3 × 3: evicted before the block's own later passes, 1.38×
    // slower). MobileNetV2's 7 × 7 1 × 1 kernels on Zen 5: 0.79–0.95× the
    // time at one thread, 0.93–0.98× at two, 0.75–0.80× as AVX2 code;
    // ResNet-18's 1 × 1 downsampling 0.77×; a C harness of the 160 → 960
    // kernel with its weights out of the caches 0.81×, in L1 1.00×.
    if block.is_some() && ohe * owe >= PREFETCH_MIN_PIXELS {
        let weights = f.params[1].clone();
        let bytes = (weights.numel() * weights.elem().size_bytes()) as i64;
        // The weights one parallel iteration reads (`[O / k, I, kh, kw, k]`:
        // one or more blocks of `k` output channels; rows fused into the
        // parallel loop share their block's).
        let iterations = parallel_loop(&f).and_then(|l| l.extent.as_int()).unwrap_or(1);
        let per_iteration = bytes / iterations.min(weights.shape()[0] as i64).max(1);
        if bytes >= STREAMED_WEIGHT_BYTES && per_iteration <= PREFETCHED_BLOCK_BYTES {
            f = prefetch_next_parallel_iteration(f, &weights);
        }
    }
    if pad_at == PaddedImage::AsLowered {
        f.attrs.insert("keep_materialized".into(), "the padded image".into());
    }
    Ok(f)
}

/// Channel tiles in parallel, fused with the rows below them where there are
/// too few to share evenly: MobileNetV2's 960 → 160 on 7 × 7 has 5 tiles,
/// split 3 : 2 over two threads (1.41× from 1 thread to 2); 35 tasks of a
/// row each split 18 : 17, each thread's rows mostly of one channel tile.
fn with_rows_if_few(s: &Schedule, channel_tiles: Vec<Var>, rows: &Var) -> Vec<Var> {
    let few = channel_tiles.iter().map(|v| extent(s, v).unwrap_or(1)).product::<i64>() < MIN_CHANNEL_TASKS;
    if few {
        channel_tiles.into_iter().chain([rows.clone()]).collect()
    } else {
        channel_tiles
    }
}

/// A general convolution's padded image of at most this many bytes is
/// filled whole before its row tiles (see `schedule_conv2d`).
const SMALL_IMAGE_BYTES: usize = 16 * 1024;

/// The fewest channel tiles run in parallel without their rows.
const MIN_CHANNEL_TASKS: i64 = 8;

/// Accumulators that hide the FMA latency: two FMAs a cycle, four cycles each.
const MIN_ACCUMULATORS: i64 = 8;

/// Whether a packed tile over a short row fits twice over — the
/// accumulators of two rows, its weight vectors and a broadcast — where one
/// row is too short to hide the FMA latency (a 7-column row of one channel
/// vector: 7 accumulators, 87.5 % of the FMA rate at best) or to stream
/// weights at the FMA rate: with 7 columns each weight vector feeds 7 FMAs,
/// and a weight-stationary block of 32 channels (590 KB in ResNet-18's last
/// stage) comes from L2 at over 32 bytes a cycle; two rows halve that
/// (Sapphire Rapids: its 512 → 512 and 256 → 512 convolutions on 7 × 7
/// 0.87–0.90× at two threads, the model ~0.96×).
fn two_row_tile(tile: PackedConvTile, registers: i64) -> bool {
    let accumulators = tile.channel_vectors * tile.columns;
    let short = accumulators < MIN_ACCUMULATORS || tile.columns < MIN_ACCUMULATORS;
    short && 2 * accumulators + tile.channel_vectors < registers
}

/// Tiles of two rows (`oh` split by 2 above the tile loops `[ow_o, ow_i,
/// oc_oi, oc_i]`, `ow_o` the tile's root), and the odd row as a tail of its
/// own: the loop to decompose its tile at, where there is one.
fn tile_two_rows(
    s: &mut Schedule,
    oh: &Var,
    [ow_o, ow_i, oc_oi, oc_i]: [&Var; 4],
) -> Result<Option<Var>, ScheduleError> {
    let (oh_o, oh_i, tail) = s.split_with_tail(oh, 2)?;
    s.reorder(&[oh_o, ow_o.clone(), oh_i, ow_i.clone(), oc_oi.clone(), oc_i.clone()])?;
    // One iteration around the odd row: one tile.
    tail.map(|t| s.split(&t, 1).map(|(t_o, _)| t_o)).transpose()
}

/// The most register tiles per row of a whole-tile convolution that are
/// unrolled (code size: each copy holds the whole window's updates).
const MAX_UNROLLED_ROW_TILES: i64 = 4;

/// Where a convolution's materialized (padded) input stage goes.
#[derive(PartialEq)]
enum PaddedImage {
    /// Computed inside this loop, for the region below it.
    At(Var),
    /// Kept where it was lowered: the whole image once, before the loops.
    AsLowered,
    /// Inlined back: the kernel reads its input in place.
    Inlined,
}

/// The output rows of a general (unpacked) tile of `accumulators` per row
/// over rows of `vectors` input vectors: two where they fit the registers
/// beside two rows of input vectors and a broadcast and divide the `rows`,
/// else one.
fn general_tile_rows(rows: i64, accumulators: i64, vectors: i64, registers: i64) -> i64 {
    if rows % 2 == 0 && 2 * accumulators + 2 * vectors < registers {
        2
    } else {
        1
    }
}

/// The loops to run in parallel from `first`: `[batch, first]` when the
/// batch loop is directly above `first` (fused into one), else `[first]`.
fn with_batch_loop(s: &Schedule, batch: Option<&Var>, first: &Var) -> Result<Vec<Var>, ScheduleError> {
    match batch {
        Some(n) if matches!(&s.loop_of(n)?.body, Stmt::For(l) if l.var == *first) => Ok(vec![n.clone(), first.clone()]),
        _ => Ok(vec![first.clone()]),
    }
}

/// Whether the write-back of `tile` calls an intrinsic (the exponential of
/// SiLU's sigmoid, GELU's tanh): more than adds, multiplies, clamps and a
/// division by a constant (hardswish, which measured no better).
fn heavy_epilogue(s: &Schedule, tile: &ReductionTile) -> bool {
    let Some(Ok(wb)) = tile.writeback_loops.first().map(|v| s.loop_of(v)) else { return false };
    contains(&wb.body, |st| matches!(st, Stmt::Store { value, .. } if value.calls_a_function()))
}

/// The write-back of a channel-vectorized tile (`columns × channel vectors ×
/// lanes`) stores along the columns instead: the lanes of the tile are output
/// channels, a whole plane apart in NCHW, so channel-wise each lane is a
/// scattered store, and each residual or sigmoid operand a gathered load —
/// hundreds of scalar accesses per tile, which LLVM's SLP vectorizer then
/// works through. Along the columns it loads and stores contiguously, after
/// a transpose of the tile in registers.
///
/// Where [`writeback_along_columns`] says so, or for a heavy epilogue (a
/// sigmoid reads its input three times: YOLOv8n's SiLU convolutions ~10 %
/// faster on AVX2).
fn columns_last_in_writeback(s: &mut Schedule, tile: &ReductionTile) -> Result<(), ScheduleError> {
    let [col, channel_loops @ ..] = &tile.writeback_loops[..] else { return Ok(()) };
    if channel_loops.is_empty() {
        return Ok(());
    }
    let mut order = channel_loops.to_vec();
    order.push(col.clone());
    s.reorder(&order)?;
    for c in channel_loops {
        s.unroll(c)?;
    }
    s.vectorize(col)
}

/// Whether a packed tile of `columns` computes a heavy epilogue (see
/// [`heavy_epilogue`]) on its accumulators, whole vectors of output channels
/// stored lane by lane, instead of along the columns after a transpose: where
/// the columns fill at most half a vector. On 5 of 16 lanes each sigmoid's
/// exponential and division ran on a third of a vector, 64 times per tile of
/// 4 × 5 accumulators instead of 20 (YOLOv8n's 3 × 3 and 1 × 1 SiLU
/// convolutions 0.77–0.98× the time on Sapphire Rapids; its stem's 16-column
/// tile, one whole vector a row, 2.7× slower along the channels).
fn epilogue_along_channels(columns: Option<i64>, lanes: i64) -> bool {
    columns.is_some_and(|c| c < lanes)
}

/// Whether a 1 × 1 convolution over `pixels` walks its `channel_tiles`
/// tiles of `channels` outermost (`ChannelsInPlace`): see [`SMALL_MAP_PIXELS`].
fn channel_tiles_first(pixels: i64, channels: i64, channel_tiles: i64) -> bool {
    pixels <= SMALL_MAP_PIXELS && pixels <= channels && channel_tiles >= MIN_CHANNEL_TILES
}

/// Whether `f`, a packed 1 × 1 convolution, has stride 1: its input stage
/// (`pad[n, oh, c, ow]`, see `topi::nn::input_rows`) has the input's rows and
/// columns, so that output pixel `p` of a plane reads input pixel `p`.
fn stride_one(f: &PrimFunc) -> bool {
    let stages = materialized(f);
    !stages.is_empty()
        && stages.iter().all(|stage| {
            let rows = stage.shape();
            f.params.iter().any(|p| matches!(p.shape(), [n, c, h, w] if rows == [*n, *h, *c, *w]))
        })
}

/// Whether a packed tile with a cheap epilogue writes back along the columns.
/// Measured per kernel (minimum of interleaved `kiln bench --profile`
/// rounds, Sapphire Rapids): LLVM's time on MobileNetV2's kernels 3.6 → 2.5 s
/// and on ResNet-18's 5.8 → 4.0 s (one thread, kernel by kernel); ResNet-18's
/// stem and 1 × 1 downsampling convolutions (`Rows`) 11–14 % faster, the
/// rest within noise. Not in the weight-stationary order (ResNet-18's
/// 512 × 7 × 7 3 × 3 layers: 4–6 % slower on AVX-512), nor for 14-column
/// `ChannelsInPlace` tiles of 8 lanes (MobileNetV2's 14 × 14 expansions on
/// AVX2 10–14 % slower; its 7-column ones 5 % faster).
fn writeback_along_columns(order: ConvOrder, tile: PackedConvTile, unit: VectorUnit) -> bool {
    match order {
        ConvOrder::Rows => true,
        ConvOrder::ChannelsInPlace => unit.f32_lanes >= 16 || tile.columns <= 8,
        ConvOrder::ChannelsPaddedOnce => false,
    }
}

/// A packed convolution's reduction of at most this many steps (a 3 × 3
/// stem over RGB: 27) takes whole-vector rows of columns (see above).
const STEM_REDUCTION_STEPS: i64 = 32;

/// From this many bytes of weights (past L1) a packed convolution asks for
/// the next block of output channels' weights while computing this one...
const STREAMED_WEIGHT_BYTES: i64 = 64 << 10;

/// ...where one block's (the weights over the parallel loop's iterations)
/// are at most this many: two of them fit a 512 KB L2 with the block's rows...
const PREFETCHED_BLOCK_BYTES: i64 = 128 << 10;

/// ...and each weight is read for at least this many output pixels.
const PREFETCH_MIN_PIXELS: i64 = 4;

/// How many output rows ahead a stem prefetches its input rows.
const STEM_PREFETCH_ROWS: i64 = 2;

/// Above this many bytes of weights a packed convolution keeps each block of
/// output channels in cache over the whole image (half a 512 KiB L2)...
const WEIGHT_STATIONARY_BYTES: i64 = 256 * 1024;
/// ...on an output map of at most this many pixels...
const WEIGHT_STATIONARY_PIXELS: i64 = 64;
/// ...when its padded input, a kernel-local (stack) buffer, is at most this large.
const PADDED_IMAGE_BYTES: i64 = 512 * 1024;
/// ...and, for a 1 × 1 one, at least this many output channels.
const MIN_PADDED_ONCE_CHANNELS: i64 = 256;
/// A 1 × 1 convolution on a map of at most this many pixels (14 × 14) splits
/// its output channels over the threads where they outnumber the pixels...
const SMALL_MAP_PIXELS: i64 = 196;
/// ...when it has at least this many channel tiles to share out...
const MIN_CHANNEL_TILES: i64 = 8;
/// ...and, in rows of packed tiles, fewer rows than this: more rows are
/// shared out instead, each row's input copied once (`Rows`). With channel
/// tiles first, each thread read every input row in place, half of them
/// written by the other core, and two threads ran the kernel at 1.4–1.5×
/// the speed of one (Sapphire Rapids: PP-LCNet's five 256 → 256 on 14 × 14
/// 0.83× the time at two threads by rows, 1.00× at one; ResNet-18's stride-2
/// 128 → 256 downsampling 0.76× at two, 1.07× at one). A squeeze-excitation
/// convolution on a 1 × 1 map has one row to share: channel tiles.
const MIN_SHARED_ROWS: i64 = 8;
/// A stride-1 1 × 1 projection (more input than output channels) over rows
/// at least this wide reads its input rows in place: a tile's columns are
/// consecutive floats of a row already, and the row repack
/// (`topi::nn::input_rows`, for 7- and 14-wide rows) only copies every input
/// channel's row before each output row, for few output channels. Per-kernel
/// minima on Zen 3, interleaved with the repack: MobileNetV2's 56- and
/// 28-wide projections 8–19 % faster (96 → 24 the most); PP-LCNet's square
/// 64 → 64 and 128 → 128 ones 5–15 % slower in one of two runs, YOLOv8n's
/// 20-wide 384 → 128 possibly slower: those keep the repack.
const WIDE_ROW: i64 = 28;

/// The register tile of a convolution over a packed `OIHW<k>o` weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PackedConvTile {
    /// Vectors of `k` output channels (weight loads per reduction step).
    channel_vectors: i64,
    /// Output columns (input broadcasts per reduction step).
    columns: i64,
}

/// On 16 registers, a tile of 2 channel vectors × 4 columns (8 accumulators,
/// the most whose columns divide a 14 × 14 map's 196 fused pixels or a
/// 112-wide row) grows to 2 × 6 (12), its last tile overlapping the one
/// before, where that computes at most [`MAX_OVERLAP_WASTE`] more columns:
/// with 8 accumulators every FMA must issue exactly on time to cover the
/// latency (a C model of the loop on one Zen 3 core: 2 × 4 62 GFLOP/s, 2 × 6
/// 94). Paired `ab_kernels.py`, 9 pairs, one / two threads: over fused
/// pixels, MobileNetV2's 384 → 64 on 14 × 14 0.92× / 0.98× the time, its
/// 192 → 64 1.00× / 0.92×; over 112-wide rows (19 tiles for 112 columns),
/// the stems — ResNet-18's 7 × 7 0.91× / 1.03×, MobileNetV2's 3 × 3
/// 0.95× / 1.02×, PP-LCNet's 0.90× / 0.93×. (56- and 28-wide rows would
/// compute 7 % more: left at 2 × 4.)
fn wider_tile(tile: PackedConvTile, columns: i64, registers: i64) -> PackedConvTile {
    let wider = PackedConvTile { channel_vectors: 2, columns: 6 };
    let computed = (columns + wider.columns - 1) / wider.columns * wider.columns;
    let narrow = tile == PackedConvTile { channel_vectors: 2, columns: 4 };
    if registers == 16 && narrow && columns >= wider.columns && computed as f64 <= columns as f64 * MAX_OVERLAP_WASTE {
        wider
    } else {
        tile
    }
}

/// The most columns (fused pixels or a row's) tiles with an overlapping last
/// one may compute, relative to the run's.
const MAX_OVERLAP_WASTE: f64 = 1.05;

/// Loads per FMA of a packed tile over a `row` of columns, with penalties for
/// too few accumulators to cover the FMA latency and for short tiles.
fn tile_cost_in_row(t: &PackedConvTile, row: i64, registers: i64) -> f64 {
    // A weight vector costs twice a broadcast on AVX-512 (32 registers): a
    // tile's weights outgrow L1 sooner there, where the broadcasts (one
    // padded input row) stay. ResNet-18's stem (3 channels, 7 × 7, stride 2)
    // took 4 × 4 tiles, each re-reading 37.6 KB of weights from L2: 3.3 ms;
    // 2 × 14 read half of them, over 3.5 times fewer tiles: 1.9 ms.
    let weight_load_cost = if registers >= 32 { 2 } else { 1 };
    let acc = t.channel_vectors * t.columns;
    let loads = (weight_load_cost * t.channel_vectors + t.columns) as f64 / acc as f64;
    // Measured on Zen 3: 2 × 4 beats 1 × 14 on 56- and 28-wide rows, but
    // 4 × 2 loses to 1 × 14 on 14-wide ones (four weight vectors per
    // step stream from L2): at least 4 columns per tile.
    let short = t.columns < 4 && t.columns < row;
    loads + if acc < 8 || short { 1.0 } else { 0.0 }
}

/// The tile with the fewest loads per FMA whose accumulators, weight vectors
/// and one broadcast input fit the vector registers: `channel_vectors` must
/// divide the `channel_blocks` and `columns` the row width (no tails inside a
/// tile). At least 8 accumulators hide the FMA latency when the row allows.
/// AVX2 (16 registers) gets 2 × 4 on 56- and 28-wide rows and 1 × 14 or
/// 1 × 7 on late stages (a stride-1 1 × 1 convolution on a 14 × 14 map
/// tiles its 196 pixels instead: 3 × 4 or 2 × 4); AVX-512 (32) 2 × 14 on 112-, 56- and 28-wide rows
/// (3 × 8 where the channel blocks are a multiple of 3), 3 × 7 or 2 × 14 on
/// 14-wide ones.
fn packed_conv_tile(channel_blocks: i64, row: i64, registers: i64) -> PackedConvTile {
    let cost = |t: &PackedConvTile| tile_cost_in_row(t, row, registers);
    // Accumulators + weight vectors + one broadcast: v·c + v + 1 ≤ registers.
    // (One accumulator more spills, and its store-to-load round trip then
    // bounds every reduction step: twice the time.) The first of equals wins.
    (1..=4.min(channel_blocks).max(1))
        .filter(|v| channel_blocks % v == 0)
        .map(|v| PackedConvTile {
            channel_vectors: v,
            columns: divisor_at_most(row, ((registers - v - 1) / v).clamp(1, 14)),
        })
        .fold(None, |best: Option<PackedConvTile>, t| match best {
            Some(b) if cost(&b) <= cost(&t) => Some(b),
            _ => Some(t),
        })
        .unwrap_or(PackedConvTile { channel_vectors: 1, columns: 1 })
}
