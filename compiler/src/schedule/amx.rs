//! The CPU strategies on AMX tiles: int8 and bfloat16 convolutions
//! (`nn.contrib_conv2d_u8s8` with `OHWI` weights — IntegerConv2d picks that
//! layout where the target has `amx-int8` — and `nn.contrib_conv2d_bf16`,
//! the bf16 precision's, whose weight pairs are a tile row's 4-byte groups
//! as int8's quadruples are: `tdpbf16ps` in place of `tdpbsud`), and the bf16
//! precision's matrix products (`nn.contrib_dense_bf16`, see
//! [`schedule_amx_dense`]).
//!
//! One `tdpbsud` multiplies a tile of 16 output channels × K weight bytes
//! (A: a weight row per channel, K input channels of one window position)
//! by a tile of K/4 channel groups × 16 pixels of the byte image (B: each
//! row 16 consecutive words of one group, four channels to a word), adding
//! to a 16 × 16 int32 tile (C): output channels × pixels, rows of the NCHW
//! output. 4096 products per instruction where `vpdpbusd` does 64.
//!
//! The loop nest is the general convolution's: output rows in bands (the
//! byte image computed per band, bands in parallel; a map of one band in
//! two channel chunks instead), in a band `channels / 32` register tiles,
//! each sweeping the band's rows (its weights stay in L2) in `pixels / 32`
//! tiles of 2 × 2 C tiles (fewer where the channels or the row are
//! narrower), each the reduction over
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
/// The tile registers: C tiles 0–3, A tiles 4–5, B tiles 6–7.
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

/// Whether `f` is a kernel made for AMX tiles: an `OHWI` convolution or a
/// bf16 product (`tir.DefaultSchedule` marks it `amx` where the target has
/// AMX).
pub(crate) fn for_tiles(f: &PrimFunc) -> bool {
    match f.attrs.get("anchor").map(String::as_str) {
        Some("nn.contrib_conv2d_u8s8" | "nn.contrib_conv2d_bf16") => is_amx_convolution(f),
        Some("nn.contrib_dense_bf16") => true,
        _ => false,
    }
}

/// Whether `f` is made for AMX tiles and the target has them.
pub(super) fn tiles_allowed(f: &PrimFunc) -> bool {
    for_tiles(f) && f.attrs.get("amx").is_some_and(|v| v == "true")
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

/// An `OHWI` convolution on AMX tiles (see the module docs); an error (the
/// kernel then stays as lowered, computing the same values) where its
/// operands do not lie as the tiles need them.
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
    let chunks = if ohe / band >= 2 { 1 } else { fewest_chunks(tiles) };

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
    let shape = TileShape { a_tiles, b_tiles, step, dot, rows: oc_i, cols: ow_i, a_is_weight: true };
    let mut par = outer.to_vec();
    par.extend([oc_c, oh_o.clone()]);
    finish_tiles(s, &ow_o, &tile, &shape, &oh_o, &par)
}

/// `nn.contrib_dense_bf16` on AMX tiles: A tiles of 16 data rows × 32
/// features of the bfloat16 image (`pad[Mp, K2/2]`), B tiles of 16 feature
/// pairs × 16 columns of the paired weight, 32 × 32 register tiles (fewer
/// on narrower rows or columns); column tiles in two parallel chunks, each
/// computing the image once and sweeping its columns with every row tile
/// (a weight panel is read once).
pub(super) fn schedule_amx_dense(f: PrimFunc) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    let err = |s: &Schedule, m: &str| ScheduleError { kernel: s.func().name.clone(), message: format!("AMX: {m}") };
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(&s, "no reduction nest"))?;
    let [outer @ .., rows, cols] = &spatial[..] else { return Err(err(&s, "not a matrix product")) };
    let (re, units) = (extent(&s, rows).unwrap_or(0), extent(&s, cols).unwrap_or(0));
    let block = U8S8_OUTPUT_BLOCK as i64;
    let weight = s.func().params.iter().find(|b| b.elem() == DataType::U16 && b.shape().len() == 3).cloned();
    let weight = weight.ok_or_else(|| err(&s, "no paired bfloat16 weight"))?;
    // The weight's columns: whole blocks of 16, past the output's where padded.
    let ce = weight.shape()[1] as i64;
    if ce % block != 0 || re == 0 || units > ce || (units < ce && ce % (2 * block) != 0) {
        return Err(err(&s, "the weight's columns are not whole tiles"));
    }
    let step = u8s8_amx_step(4 * weight.shape()[0]).ok_or_else(|| err(&s, "features that fit no tile row"))? as i64;
    let pixels = amx_pixel_tile(re as usize) as i64;
    let a_tiles = pixels / block;
    let b_tiles = if ce % (2 * block) == 0 { 2 } else { 1 };
    let col_tiles = ce / (b_tiles * block);
    let chunks = fewest_chunks(col_tiles);

    // (Splits past the output's columns are guarded: whole tiles compute
    // the padded columns, the write-back stores the output's.)
    let (chunk, cols_rest) = s.split(cols, (ce / chunks) as usize)?;
    let (cols_o, cols_i) = s.split(&cols_rest, (b_tiles * block) as usize)?;
    let (rows_o, rows_i) = s.split(rows, pixels as usize)?;
    s.reorder(&[chunk.clone(), cols_o, rows_o.clone(), rows_i.clone(), cols_i.clone()])?;
    // Whole tiles: the image has rows up to the last tile's end (`topi::bf16`).
    let tile = s.decompose_reduction_whole_tiles(&rows_o)?;
    for pad in materialized(s.func()) {
        s.compute_at(&pad, &chunk)?;
    }
    let shape = TileShape {
        a_tiles,
        b_tiles,
        step,
        dot: Intrinsic::AmxDotBf16,
        rows: rows_i,
        cols: cols_i,
        a_is_weight: false,
    };
    let mut par = outer.to_vec();
    par.push(chunk.clone());
    finish_tiles(s, &rows_o, &tile, &shape, &chunk, &par)
}

/// The common end of both strategies: the tile's initialization and update
/// replaced by AMX statements (in loop `at`); the write-back's rows unrolled
/// and its columns vectorized; a few tiles per row unrolled (their
/// write-back guards fold, LoopPartition then leaves whole tiles
/// unguarded); the tile configuration and release around each iteration of
/// `task` (each task of a parallel loop may run on another thread: the
/// configuration is per thread); the loops `par` fused in parallel.
fn finish_tiles(
    mut s: Schedule,
    at: &Var,
    tile: &ReductionTile,
    shape: &TileShape,
    task: &Var,
    par: &[Var],
) -> Result<PrimFunc, ScheduleError> {
    replace_with_tiles(&mut s, at, tile, shape)
        .map_err(|m| ScheduleError { kernel: s.func().name.clone(), message: format!("AMX: {m}") })?;
    if let [rows @ .., cols] = &tile.writeback_loops[..] {
        for r in rows {
            s.unroll(r)?;
        }
        s.vectorize(cols)?;
    }
    if extent(&s, at).is_some_and(|n| n <= 4) {
        s.unroll(at)?;
    }
    let config = tile_config(shape);
    s.rewrite_loop(task, |l| {
        let body = Stmt::seq(vec![config, l.body, statement(Intrinsic::AmxRelease, vec![])]);
        Ok(Stmt::For(Box::new(For { body, ..l })))
    })?;
    fuse_parallel(&mut s, par)?;
    Ok(s.into_func())
}

/// The smallest divisor of `n` from 2 up (`n` itself for a prime; 1 for 1):
/// the fewest chunks that split `n` tiles evenly between two threads or more.
fn fewest_chunks(n: i64) -> i64 {
    (2..=n).find(|c| n % c == 0).unwrap_or(1)
}

/// The register tile: A tiles of 16 output channels, B tiles of 16 pixels,
/// `step` bytes (input channels) per reduction step.
struct TileShape {
    a_tiles: i64,
    b_tiles: i64,
    step: i64,
    /// The tile product: `kiln.amx_dot_s8u8` or `kiln.amx_dot_bf16`.
    dot: Intrinsic,
    /// The tile's loops (variables of the update): C rows (A tiles, 16 each)
    /// and C columns (B tiles).
    rows: Var,
    cols: Var,
    /// Which operand the A tiles load: the weight (convolutions: output
    /// channels are C rows) or the image (dense: data rows are C rows).
    a_is_weight: bool,
}

/// Where an operand's tile rows and 64-byte rows lie in its buffer.
struct Operand<'a> {
    buffer: &'a Buffer,
    index: &'a [Expr],
    /// The dimension a tile row steps along (its stride), and the loop variable stepping it.
    row_dim: usize,
    row_var: &'a Var,
    /// The dimension a tile row's bytes run along, and the loop variable stepping it.
    col_dim: usize,
    col_var: &'a Var,
}

/// `kiln.amx_config`: C tiles 16 rows × 64 bytes; A tiles 16 rows × `step`
/// bytes; B tiles `step / 4` rows × 64 bytes.
fn tile_config(&TileShape { a_tiles, b_tiles, step, .. }: &TileShape) -> Stmt {
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
        loops.into_iter().filter(|(v, _)| *v != shape.rows && *v != shape.cols).collect();
    let [(rc, groups), window @ ..] = &reduce_loops[..] else { return Err("no reduction loops".into()) };
    let group = U8S8_INPUT_GROUP as i64;
    let steps_per_group = shape.step / group;
    if groups % steps_per_group != 0 {
        return Err(format!("{groups} channel groups in steps of {steps_per_group}"));
    }
    let mut loads = Vec::new();
    collect_loads(value, &mut loads);
    let weight_loads: Vec<_> = loads.iter().filter(|(b, _)| matches!(b.elem(), DataType::I8 | DataType::U16)).collect();
    let image = loads.iter().find(|(b, _)| b.elem() == DataType::U32).ok_or("no image word in the update")?;
    // The weight load of the group's first byte: the one whose last index is
    // smallest (they differ by the byte, 0–3).
    let first_byte = |(_, i): &&&(Buffer, Vec<Expr>)| {
        let last = i.last().cloned().unwrap_or_else(|| Expr::int(0));
        let base = weight_loads[0].1.last().cloned().unwrap_or_else(|| Expr::int(0));
        simplify(&(last - base), &Bounds::new()).as_int().unwrap_or(i64::MAX)
    };
    let weight = weight_loads.iter().min_by_key(first_byte).ok_or("no weight byte in the update")?;
    if !weight.1.iter().any(|i| i.uses_var(rc)) {
        return Err("the first reduction loop is not over the channel groups".into());
    }
    let kb = Var::new("kb", TirType::INDEX);
    let at = |e: &[Expr], map: &HashMap<u32, Expr>| -> Vec<Expr> {
        e.iter().map(|x| simplify(&x.substitute(&|v| map.get(&v.id).cloned()), &Bounds::new())).collect()
    };
    let tile_map = |i: i64, j: i64| {
        HashMap::from([
            (shape.rows.id, Expr::int(i * U8S8_OUTPUT_BLOCK as i64)),
            (shape.cols.id, Expr::int(j * U8S8_OUTPUT_BLOCK as i64)),
            (rc.id, Expr::var(&kb) * Expr::int(steps_per_group)),
        ])
    };
    // A convolution: A = weight rows (output channels × channel bytes), B =
    // image rows (channel groups × pixel words). A dense: A = image rows
    // (data rows × feature-pair words), B = weight rows (pairs × columns).
    let last = |i: &[Expr]| i.len() - 1;
    let (a, b) = if shape.a_is_weight {
        (
            Operand {
                buffer: &weight.0,
                index: &weight.1,
                row_dim: 0,
                row_var: &shape.rows,
                col_dim: last(&weight.1),
                col_var: rc,
            },
            Operand {
                buffer: &image.0,
                index: &image.1,
                row_dim: 1,
                row_var: rc,
                col_dim: last(&image.1),
                col_var: &shape.cols,
            },
        )
    } else {
        (
            Operand {
                buffer: &image.0,
                index: &image.1,
                row_dim: 0,
                row_var: &shape.rows,
                col_dim: last(&image.1),
                col_var: rc,
            },
            Operand { buffer: &weight.0, index: &weight.1, row_dim: 0, row_var: rc, col_dim: 1, col_var: &shape.cols },
        )
    };
    // Each tile row must be one run of bytes along `col_dim`, the rows one
    // stride apart along `row_dim` (a stride-2 convolution written with OHWI
    // weights by hand stays as lowered).
    let step_along = |e: &Expr, v: &Var| -> Option<i64> {
        let at = |k: i64| e.substitute(&|x| (x.id == v.id).then(|| Expr::int(k)));
        simplify(&(at(1) - at(0)), &Bounds::new()).as_int()
    };
    let only_in = |idx: &[Expr], dim: usize, v: &Var| idx.iter().enumerate().all(|(d, i)| d == dim || !i.uses_var(v));
    let fits = |o: &Operand| {
        let tile_var_steps_one =
            |dim: usize, v: &Var| only_in(o.index, dim, v) && step_along(&o.index[dim], v) == Some(1);
        let (tile_dim, tile_var) = if o.row_var == rc { (o.col_dim, o.col_var) } else { (o.row_dim, o.row_var) };
        let reduce_dim = if o.row_var == rc { o.row_dim } else { o.col_dim };
        tile_var_steps_one(tile_dim, tile_var) && only_in(o.index, reduce_dim, rc)
    };
    if !fits(&a) || !fits(&b) {
        return Err("the tiles' rows are not contiguous in their operands".into());
    }
    let a_stride = byte_stride(a.buffer.shape(), a.row_dim, a.buffer.elem());
    let b_stride = byte_stride(b.buffer.shape(), b.row_dim, b.buffer.elem());
    let c_stride = byte_stride(cache.shape(), 0, cache.elem());
    if a_stride <= 0 || b_stride <= 0 || cache.shape().len() != 2 {
        return Err("unexpected buffer shapes".into());
    }
    let mut step = Vec::new();
    for i in 0..shape.a_tiles {
        let addr = Expr::Load(a.buffer.clone(), at(a.index, &tile_map(i, 0)));
        step.push(statement(Intrinsic::AmxLoad, vec![Expr::int(FIRST_A + i), addr, Expr::int(a_stride)]));
    }
    for j in 0..shape.b_tiles {
        let addr = Expr::Load(b.buffer.clone(), at(b.index, &tile_map(0, j)));
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
            let block = U8S8_OUTPUT_BLOCK as i64;
            let addr = Expr::Load(cache.clone(), vec![Expr::int(i * block), Expr::int(j * block)]);
            let c = Expr::int(i * shape.b_tiles + j);
            out.push(statement(Intrinsic::AmxStore, vec![c, addr, Expr::int(c_stride)]));
        }
    }
    Ok(out)
}
