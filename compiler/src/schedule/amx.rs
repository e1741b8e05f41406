//! The CPU strategy of an int8 or bfloat16 convolution on AMX tiles
//! (`nn.contrib_conv2d_u8s8` with `OHWI` weights — IntegerConv2d picks that
//! layout where the target has `amx-int8` — and `nn.contrib_conv2d_bf16`,
//! the bf16 precision's, whose weight pairs are a tile row's 4-byte groups
//! as int8's quadruples are: `tdpbf16ps` in place of `tdpbsud`).
//!
//! One `tdpbsud` multiplies a tile of 16 output channels × K weight bytes
//! (A: a weight row per channel, K input channels of one window position)
//! by a tile of K/4 channel groups × 16 pixels of the byte image (B: each
//! row 16 consecutive words of one group, four channels to a word), adding
//! to a 16 × 16 int32 tile (C): output channels × pixels, rows of the NCHW
//! output. 4096 products per instruction where `vpdpbusd` does 64.
//!
//! The loop nest is the general convolution's: output rows in bands (the
//! byte image computed per band, bands in parallel), in a band
//! `channels / 32 × pixels / 32` register tiles of 2 × 2 C tiles (fewer
//! where the channels or the row are narrower), each the reduction over
//! window positions and steps of K channels — two weight tiles and two
//! image tiles loaded per step for four products — then stored to a
//! kernel-local tile that the usual write-back (the fused epilogue) reads.
//! The tile schedule is made by the ordinary primitives (split, reorder,
//! compute_at, whole-tile decompose_reduction), then the tile's
//! initialization and update are replaced by the AMX statements, their
//! addresses read off the update's own loads.

use std::collections::HashMap;

use kiln_ir::arith::{simplify, Bounds};
use kiln_ir::relay::op::{u8s8_amx_step, U8S8_INPUT_GROUP, U8S8_OUTPUT_BLOCK};

use super::primitives::ReductionTile;
use super::{collect_loads, extent, fuse_parallel, materialized, reduction_nest, Schedule, ScheduleError};
use crate::tir::{Buffer, Expr, For, ForKind, Intrinsic, PrimFunc, Stmt, TirType, Var};
use crate::topi::amx_pixel_tile;
use kiln_ir::DataType;

/// Rows (and bytes per row) of every AMX tile register.
const TILE_ROWS: usize = 16;
/// The tile registers: C tiles 0–3, A (weight) tiles 4–5, B (image) tiles 6–7.
const FIRST_A: i64 = 4;
const FIRST_B: i64 = 6;
/// The most output rows per band (one byte image per band: a band of
/// `rows` output rows computes `rows + KH − 1` image rows).
const MAX_BAND_ROWS: i64 = 8;

/// The `OHWI` weight of an AMX convolution: a 4-D int8 (`nn.contrib_conv2d_u8s8`)
/// or uint16 (bfloat16 bits, `nn.contrib_conv2d_bf16`) parameter.
fn amx_weight(f: &PrimFunc) -> Option<&Buffer> {
    f.params.iter().find(|b| matches!(b.elem(), DataType::I8 | DataType::U16) && b.shape().len() == 4)
}

/// Whether `f` is a convolution with `OHWI` weights (see [`amx_weight`]).
pub(super) fn is_amx_convolution(f: &PrimFunc) -> bool {
    amx_weight(f).is_some()
}

fn statement(f: Intrinsic, args: Vec<Expr>) -> Stmt {
    Stmt::Evaluate(Expr::call(f, args, TirType::scalar(DataType::I32)))
}

/// The output rows per band: the most up to [`MAX_BAND_ROWS`] that divide
/// the rows into one or an even number of bands (two threads share them
/// evenly: 56 rows in 8 bands of 7, not 7 of 8), else the most that divide.
fn band_rows(rows: i64) -> i64 {
    let divisors = || (1..=MAX_BAND_ROWS.min(rows)).rev().filter(|b| rows % b == 0);
    divisors().find(|b| rows / b == 1 || (rows / b) % 2 == 0).or_else(|| divisors().next()).unwrap_or(1)
}

/// Bytes between consecutive elements along dimension `dim` of a buffer of `shape`.
fn byte_stride(shape: &[usize], dim: usize, elem: DataType) -> i64 {
    (shape[dim + 1..].iter().product::<usize>() * elem.size_bytes()) as i64
}

pub(super) fn schedule_amx(f: PrimFunc) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    let err = |s: &Schedule, m: &str| ScheduleError { kernel: s.func().name.clone(), message: format!("AMX: {m}") };
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(&s, "no reduction nest"))?;
    let [outer @ .., oc, oh, ow] = &spatial[..] else { return Err(err(&s, "not an NCHW convolution")) };
    let (oce, ohe, owe) = (extent(&s, oc).unwrap_or(0), extent(&s, oh).unwrap_or(0), extent(&s, ow).unwrap_or(0));
    let block = U8S8_OUTPUT_BLOCK as i64;
    if oce % block != 0 || oce == 0 || ohe == 0 || owe == 0 {
        return Err(err(&s, "the output channels are not whole blocks of 16"));
    }
    let weight = amx_weight(s.func()).cloned().ok_or_else(|| err(&s, "no OHWI weight"))?;
    // Bytes of input channels per pixel: int8 weights one per channel, bfloat16 two.
    let row_bytes = weight.shape()[3] * weight.elem().size_bytes();
    let step = u8s8_amx_step(row_bytes).ok_or_else(|| err(&s, "input channels that fit no tile row"))? as i64;
    let dot = if weight.elem() == DataType::U16 { Intrinsic::AmxDotBf16 } else { Intrinsic::AmxDotS8U8 };
    let a_tiles = if oce % (2 * block) == 0 { 2 } else { 1 };
    let pixels = amx_pixel_tile(owe as usize) as i64;
    let b_tiles = pixels / block;
    // Bands of rows in parallel, each computing its image once and reusing
    // each channel tile's weights over its rows (a tile's, not the layer's,
    // must stay in L2). Where the map makes one band (7 × 7), the output
    // channels split into two chunks instead (each computing the image).
    let tile_channels = a_tiles * block;
    let band = band_rows(ohe);
    let tiles = oce / tile_channels;
    let chunks = if ohe / band >= 2 { 1 } else { (2..=tiles).find(|c| tiles % c == 0).unwrap_or(1) };

    let (oc_c, oc_rest) = s.split(oc, (oce / chunks) as usize)?;
    let (oh_o, oh_i) = s.split(oh, band as usize)?;
    let (oc_o, oc_i) = s.split(&oc_rest, tile_channels as usize)?;
    let (ow_o, ow_i) = s.split(ow, pixels as usize)?;
    // Within a band, each channel tile's weights serve every row of the
    // band before the next tile's.
    s.reorder(&[oc_c.clone(), oh_o.clone(), oc_o, oh_i, ow_o.clone(), oc_i.clone(), ow_i.clone()])?;
    // Whole tiles: an image tile reads whole 16-pixel rows of the image
    // (its right padding covers the last tile; see `topi::quantized`).
    let tile = s.decompose_reduction_whole_tiles(&ow_o)?;
    for pad in materialized(s.func()) {
        s.compute_at(&pad, &oh_o)?;
    }
    let shape = TileShape { a_tiles, b_tiles, step, dot, oc_i, ow_i };
    replace_with_tiles(&mut s, &ow_o, &tile, &shape).map_err(|m| err(&s, &m))?;
    // The write-back: output channels unrolled, a tile's pixels as vectors.
    if let [rows @ .., cols] = &tile.writeback_loops[..] {
        for r in rows {
            s.unroll(r)?;
        }
        s.vectorize(cols)?;
    }
    // A few tiles per row unrolled: their write-back guards fold (LoopPartition
    // then leaves whole tiles unguarded).
    if extent(&s, &ow_o).is_some_and(|n| n <= 4) {
        s.unroll(&ow_o)?;
    }
    // The tile configuration once per band (each task of a parallel loop may
    // run on another thread: the configuration is per thread).
    let config = tile_config(a_tiles, b_tiles, step);
    s.rewrite_loop(&oh_o, |l| {
        let body = Stmt::seq(vec![config, l.body, statement(Intrinsic::AmxRelease, vec![])]);
        Ok(Stmt::For(Box::new(For { body, ..l })))
    })?;
    let mut par = outer.to_vec();
    par.extend([oc_c, oh_o]);
    fuse_parallel(&mut s, &par)?;
    Ok(s.into_func())
}

/// The register tile: A tiles of 16 output channels, B tiles of 16 pixels,
/// `step` bytes (input channels) per reduction step.
struct TileShape {
    a_tiles: i64,
    b_tiles: i64,
    step: i64,
    /// The tile product: `kiln.amx_dot_s8u8` or `kiln.amx_dot_bf16`.
    dot: Intrinsic,
    /// The tile's output-channel and pixel loops (variables of the update).
    oc_i: Var,
    ow_i: Var,
}

/// `kiln.amx_config`: C tiles 16 rows × 64 bytes; A tiles 16 rows × `step`
/// bytes; B tiles `step / 4` rows × 64 bytes.
fn tile_config(a_tiles: i64, b_tiles: i64, step: i64) -> Stmt {
    let rows = TILE_ROWS as i64;
    let mut args = Vec::new();
    for t in 0..8 {
        let (r, bytes) = match t {
            t if t < a_tiles * b_tiles => (rows, 4 * rows),
            t if (FIRST_A..FIRST_A + a_tiles).contains(&t) => (rows, step),
            t if (FIRST_B..FIRST_B + b_tiles).contains(&t) => (step / U8S8_INPUT_GROUP as i64, 4 * rows),
            _ => (0, 0),
        };
        args.push(Expr::int(r));
        args.push(Expr::int(bytes));
    }
    statement(Intrinsic::AmxConfig, args)
}

/// In loop `at`'s body, replaces the tile's initialization by zeroed C tiles
/// and its reduction by AMX tile loads and products followed by the C
/// tiles' stores into the kernel-local tile.
fn replace_with_tiles(s: &mut Schedule, at: &Var, tile: &ReductionTile, shape: &TileShape) -> Result<(), String> {
    let cache = tile.cache.clone().ok_or("no kernel-local tile")?;
    let (Some(init), Some(reduce)) = (tile.init_loops.first(), tile.reduce_loops.first()) else {
        return Err("no initialization or reduction loops".into());
    };
    let (init, reduce) = (init.clone(), reduce.clone());
    let mut result = Ok(());
    let out = &mut result;
    s.rewrite_loop(at, |l| {
        let body = in_sequence(l.body, &mut |parts| {
            let mut body = Vec::new();
            for part in parts {
                match &part {
                    Stmt::For(f) if f.var == init => {
                        let c_tiles = shape.a_tiles * shape.b_tiles;
                        body.extend((0..c_tiles).map(|t| statement(Intrinsic::AmxZero, vec![Expr::int(t)])));
                    }
                    Stmt::For(f) if f.var == reduce => match tile_products(&part, shape, &cache) {
                        Ok(stmts) => body.extend(stmts),
                        Err(e) => {
                            *out = Err(e);
                            body.push(part);
                        }
                    },
                    _ => body.push(part),
                }
            }
            body
        });
        match body {
            Some(body) => Ok(Stmt::For(Box::new(For { body, ..l }))),
            None => Err(ScheduleError { kernel: String::new(), message: "the tile's body is not a sequence".into() }),
        }
    })
    .map_err(|e| e.message)?;
    result
}

/// `s` with the statements of its first sequence (below allocations and
/// lets) replaced by `f`'s; None where there is none.
fn in_sequence(s: Stmt, f: &mut dyn FnMut(Vec<Stmt>) -> Vec<Stmt>) -> Option<Stmt> {
    match s {
        Stmt::Seq(parts) => Some(Stmt::seq(f(parts))),
        Stmt::Allocate { buffer, body } => Some(Stmt::Allocate { buffer, body: Box::new(in_sequence(*body, f)?) }),
        Stmt::Let { var, value, body } => Some(Stmt::Let { var, value, body: Box::new(in_sequence(*body, f)?) }),
        _ => None,
    }
}

/// The reduction nest `reduce` (loops over channel groups `rc`, window rows
/// and columns, the tile's loops inside, one update) as AMX statements:
/// loops over the window and steps of `step` bytes of channels, each loading
/// the A and B tiles and adding their products to the C tiles; then the C
/// tiles stored into `cache` (`[channels, pixels]` of the tile).
fn tile_products(reduce: &Stmt, shape: &TileShape, cache: &Buffer) -> Result<Vec<Stmt>, String> {
    // The reduction loops (outermost first) and the update below them.
    let mut loops = Vec::new();
    let mut cur = reduce;
    while let Stmt::For(l) = cur {
        loops.push((l.var.clone(), l.extent.as_int().ok_or("a reduction loop of unknown extent")?));
        cur = &l.body;
    }
    let Stmt::Store { value, .. } = cur else { return Err("the reduction does not end in one update".into()) };
    // The tile's own loops (oc_i, ow_i) were the innermost; the rest reduce.
    let reduce_loops: Vec<(Var, i64)> =
        loops.into_iter().filter(|(v, _)| *v != shape.oc_i && *v != shape.ow_i).collect();
    let [(rc, groups), window @ ..] = &reduce_loops[..] else { return Err("no reduction loops".into()) };
    let group = U8S8_INPUT_GROUP as i64;
    let steps_per_group = shape.step / group;
    if groups % steps_per_group != 0 {
        return Err(format!("{groups} channel groups in steps of {steps_per_group}"));
    }
    let mut loads = Vec::new();
    collect_loads(value, &mut loads);
    let weight_loads: Vec<_> = loads
        .iter()
        .filter(|(b, _)| matches!(b.elem(), DataType::I8 | DataType::U16) && b.shape().len() == 4)
        .collect();
    let image = loads.iter().find(|(b, _)| b.elem() == DataType::U32).ok_or("no image word in the update")?;
    // The weight load of the group's first byte: the one whose last index is
    // smallest (they differ by the byte, 0–3).
    let first_byte = |(_, i): &&&(Buffer, Vec<Expr>)| {
        let last = i.last().cloned().unwrap_or_else(|| Expr::int(0));
        let base = weight_loads[0].1.last().cloned().unwrap_or_else(|| Expr::int(0));
        simplify(&(last - base), &Bounds::new()).as_int().unwrap_or(i64::MAX)
    };
    let weight = weight_loads.iter().min_by_key(first_byte).ok_or("no weight byte in the update")?;
    if !weight.1.last().is_some_and(|i| i.uses_var(rc)) {
        return Err("the first reduction loop is not over the channel groups".into());
    }
    let kb = Var::new("kb", TirType::INDEX);
    let at = |e: &[Expr], map: &HashMap<u32, Expr>| -> Vec<Expr> {
        e.iter().map(|x| simplify(&x.substitute(&|v| map.get(&v.id).cloned()), &Bounds::new())).collect()
    };
    let tile_map = |i: i64, j: i64| {
        HashMap::from([
            (shape.oc_i.id, Expr::int(i * U8S8_OUTPUT_BLOCK as i64)),
            (shape.ow_i.id, Expr::int(j * U8S8_OUTPUT_BLOCK as i64)),
            (rc.id, Expr::var(&kb) * Expr::int(steps_per_group)),
        ])
    };
    // A B tile's 16 pixels must be 16 consecutive words of the image, an A
    // tile's 16 rows 16 consecutive output channels' weight rows (a stride-2
    // convolution written with OHWI weights by hand stays as lowered).
    let step_along = |e: &Expr, v: &Var| -> Option<i64> {
        let at = |k: i64| e.substitute(&|x| (x.id == v.id).then(|| Expr::int(k)));
        simplify(&(at(1) - at(0)), &Bounds::new()).as_int()
    };
    let only_in = |idx: &[Expr], dim: usize, v: &Var| {
        idx.iter().enumerate().all(|(d, i)| d == dim || !i.uses_var(v)) && step_along(&idx[dim], v) == Some(1)
    };
    if !only_in(&image.1, image.1.len() - 1, &shape.ow_i) || !only_in(&weight.1, 0, &shape.oc_i) {
        return Err("pixels or output channels not contiguous in the tiles' operands".into());
    }
    let a_stride = byte_stride(weight.0.shape(), 0, weight.0.elem());
    let b_stride = byte_stride(image.0.shape(), 1, DataType::U32);
    let c_stride = byte_stride(cache.shape(), 0, cache.elem());
    if a_stride <= 0 || b_stride <= 0 || cache.shape().len() != 2 {
        return Err("unexpected buffer shapes".into());
    }
    let mut step = Vec::new();
    for i in 0..shape.a_tiles {
        let addr = Expr::Load(weight.0.clone(), at(&weight.1, &tile_map(i, 0)));
        step.push(statement(Intrinsic::AmxLoad, vec![Expr::int(FIRST_A + i), addr, Expr::int(a_stride)]));
    }
    for j in 0..shape.b_tiles {
        let addr = Expr::Load(image.0.clone(), at(&image.1, &tile_map(0, j)));
        step.push(statement(Intrinsic::AmxLoad, vec![Expr::int(FIRST_B + j), addr, Expr::int(b_stride)]));
    }
    for i in 0..shape.a_tiles {
        for j in 0..shape.b_tiles {
            let c = Expr::int(i * shape.b_tiles + j);
            step.push(statement(shape.dot, vec![c, Expr::int(FIRST_A + i), Expr::int(FIRST_B + j)]));
        }
    }
    // Window positions outside, channel steps inside (contiguous weight rows).
    let mut nest = Stmt::for_loop(kb.clone(), (groups / steps_per_group) as usize, ForKind::Serial, Stmt::seq(step));
    for (v, e) in window.iter().rev() {
        nest = Stmt::for_loop(v.clone(), *e as usize, ForKind::Serial, nest);
    }
    let mut out = vec![nest];
    for i in 0..shape.a_tiles {
        for j in 0..shape.b_tiles {
            let b = U8S8_OUTPUT_BLOCK as i64;
            let addr = Expr::Load(cache.clone(), vec![Expr::int(i * b), Expr::int(j * b)]);
            let c = Expr::int(i * shape.b_tiles + j);
            out.push(statement(Intrinsic::AmxStore, vec![c, addr, Expr::int(c_stride)]));
        }
    }
    Ok(out)
}
