//! The matrix products' CPU strategy (`nn.matmul`, `nn.dense` packed or
//! not, `nn.batch_matmul`, `nn.contrib_batch_matmul_pack`): register tiles
//! of rows × whole vectors of columns sized from the vector unit, the panel
//! widths and row panels AlterOpLayout packs constant operands in.

use super::prefetch::{prefetch_stream, PREFETCH_AHEAD_BYTES};
use super::{collect_loads, divisor_at_most, extent, fuse_parallel, reduction_nest, tile_kinds};
use super::{Knobs, ReductionTile, Schedule, ScheduleError};
use crate::target::VectorUnit;
use crate::tir::{Buffer, PrimFunc, Scope, Stmt, Var};

/// The register tile of a matrix product with `rows` × `cols` outputs:
/// `mi` rows (up to 4) × `jb` columns, whole vectors where the columns allow
/// (any number of them: 1000 columns take 5 vectors of 8), accumulators in
/// half the registers (the rest hold A's broadcasts and B's rows). Also
/// AlterOpLayout's panel width for a constant weight.
pub fn matmul_tile(rows: i64, cols: i64, unit: VectorUnit) -> (i64, i64) {
    let mi = divisor_at_most(rows, 4);
    let lanes = unit.f32_lanes as i64;
    let accumulators = (unit.registers as i64 / 2).max(1);
    let jb = (1..=8)
        .rev()
        .map(|v| v * lanes)
        .find(|&b| cols % b == 0 && mi * b <= accumulators * lanes)
        .unwrap_or_else(|| divisor_at_most(cols, lanes));
    (mi, jb)
}

/// The rows of the register tile that the product of `rows` × `cols`
/// outputs takes (the rule's, as `schedule_matmul` picks it), where it is
/// a fixed number of rows for every tile but the last: AlterOpLayout packs
/// a constant A (Winograd's weights) in panels of that many rows, so that
/// each tile reads one sequential stream of A. None where the rule's tile
/// leaves no use for it (a single tile of rows).
pub fn packed_product_rows(rows: i64, cols: i64, unit: VectorUnit) -> Option<i64> {
    if let Some((mi, _)) = odd_vector_tile(rows, cols, unit) {
        return Some(mi);
    }
    let (mi, jb) = matmul_tile(rows, cols, unit);
    let r = two_vector_tile_rows(rows, jb, unit).unwrap_or_else(|| latency_rows(rows, mi, jb, unit));
    (r > 1 && r < rows && cols % jb == 0).then_some(r)
}

/// The register tile of a product over A packed in row panels (Winograd's)
/// whose columns are an odd number of vectors from 3 to 7 on a unit of 32
/// registers: every column × 2 rows (up to 14 accumulators; B's row read
/// once per two rows), where [`matmul_tile`] takes one vector × 8 rows (8
/// accumulators, nine loads per eight FMAs: 112 columns have no wider
/// divisor). YOLOv8n's 64 × 64 × 112 products on 40 × 40 maps 0.91× the
/// time at one and two threads (Zen 5); 4 rows measured no better.
fn odd_vector_tile(rows: i64, cols: i64, unit: VectorUnit) -> Option<(i64, i64)> {
    let lanes = unit.f32_lanes as i64;
    let vectors = cols / lanes;
    let odd = cols % lanes == 0 && vectors % 2 == 1 && (3..=7).contains(&vectors);
    (unit.registers >= 32 && odd && rows % ODD_VECTOR_TILE_ROWS == 0 && rows > ODD_VECTOR_TILE_ROWS)
        .then_some((ODD_VECTOR_TILE_ROWS, cols))
}

/// The rows of [`odd_vector_tile`].
const ODD_VECTOR_TILE_ROWS: i64 = 2;

/// The FMA latency needs at least this many independent accumulators in a
/// register tile (two FMA ports, four cycles each).
const LATENCY_ACCUMULATORS: i64 = 8;

/// The rows of a register tile of `jb` columns: `mi` rows, or more where
/// the columns are one or two vectors and `mi` rows leave fewer than
/// [`LATENCY_ACCUMULATORS`] accumulators — Winograd products on AVX-512 have
/// 16 columns (one vector), and a 4 × 16 tile waits on its FMAs half the time.
/// A's elements are broadcast one at a time, so the accumulators, one row of B
/// and one broadcast must fit the registers. Units under 8 lanes (NEON, SSE)
/// keep `mi`: not measured there.
fn latency_rows(rows: i64, mi: i64, jb: i64, unit: VectorUnit) -> i64 {
    let lanes = unit.f32_lanes as i64;
    if jb % lanes != 0 || lanes < 8 {
        return mi;
    }
    let vectors = jb / lanes;
    if mi * vectors >= LATENCY_ACCUMULATORS {
        return mi;
    }
    let fit = (unit.registers as i64 - vectors - 1) / vectors;
    let want = (LATENCY_ACCUMULATORS / vectors).min(fit);
    divisor_at_most(rows, want).max(mi)
}

/// A column tile of several vectors whose count is not a power of two (a
/// dense panel of 40 columns on 8 lanes, LeNet's 400 → 120) as that many
/// separate vectors, the loop over them unrolled with the tile's rows: LLVM
/// 14 widens a `<40 x float>` to 64 lanes and assembles its pieces through
/// the stack in every reduction step.
fn split_odd_vector_counts(s: &mut Schedule, columns: &Var, width: i64, unit: VectorUnit) -> Result<(), ScheduleError> {
    let lanes = unit.f32_lanes as i64;
    let vectors = width / lanes;
    if width % lanes == 0 && vectors > 1 && !(vectors as u64).is_power_of_two() {
        s.split(columns, lanes as usize)?;
    }
    Ok(())
}

/// matmul, dense, batch_matmul: see the module docs. A product over A
/// packed in row panels (Winograd's weights, read once per call and used for
/// few columns) prefetches that stream ahead of its reduction.
pub(super) fn schedule_matmul(f: PrimFunc, unit: VectorUnit, knobs: &Knobs) -> Result<PrimFunc, ScheduleError> {
    let streamed = f.attrs.contains_key("batch_matmul_pack.rows").then(|| f.params.first().cloned()).flatten();
    let f = schedule_tiles(f, unit, knobs)?;
    Ok(match streamed.filter(|a| a.shape().len() == 4) {
        Some(a) => prefetch_stream(f, &a, PREFETCH_AHEAD_BYTES),
        None => f,
    })
}

/// The register tiles of [`schedule_matmul`].
fn schedule_tiles(f: PrimFunc, unit: VectorUnit, knobs: &Knobs) -> Result<PrimFunc, ScheduleError> {
    let panel = f.attrs.get("dense_pack.panel").and_then(|b| b.parse::<i64>().ok());
    let packed_rows = f.attrs.get("batch_matmul_pack.rows").and_then(|b| b.parse::<i64>().ok());
    let mut s = Schedule::new(f);
    let spatial = reduction_nest(s.func())
        .ok_or_else(|| ScheduleError { kernel: s.func().name.clone(), message: "no reduction nest".into() })?;
    let [outer @ .., i, j] = &spatial[..] else {
        return Err(ScheduleError { kernel: s.func().name.clone(), message: "not a matrix product".into() });
    };
    let (ie, je) = (extent(&s, i).unwrap_or(1), extent(&s, j).unwrap_or(1));
    let (mi, jb) = match odd_vector_tile(ie, je, unit).filter(|_| packed_rows.is_some()) {
        Some(t) => t,
        None => matmul_tile(ie, je, unit),
    };
    // Over a packed weight the column tile is one panel (AlterOpLayout chose
    // its width by the same rule), contiguous per reduction step.
    let (mi, jb) = match panel {
        Some(panel) => (mi, panel),
        None => (latency_rows(ie, mi, jb, unit), jb),
    };
    let (mi, jb) = (knobs.rows.unwrap_or(mi), knobs.cols.unwrap_or(jb));
    let lanes = unit.f32_lanes as i64;
    if let Some(r) = packed_rows {
        // A in panels of r rows (see `packed_product_rows`): r-row tiles only.
        if *knobs != Knobs::default() || packed_product_rows(ie, je, unit) != Some(r) {
            return Err(ScheduleError {
                kernel: s.func().name.clone(),
                message: format!("A packed in panels of {r} rows takes the rule's {r}-row tiles only"),
            });
        }
        if let Some(rows) = two_vector_tile_rows(ie, jb, unit).filter(|&t| t == r) {
            return schedule_rows_with_tail(s, outer, (i, j), rows, (jb, true), true);
        }
    }
    let vectors = (jb + lanes - 1) / lanes;
    let tuned = *knobs != Knobs::default();
    if tuned
        && (mi < 1
            || jb < 1
            || ie % mi != 0
            || panel.is_some_and(|p| p != jb)
            || (panel.is_none() && je % jb != 0)
            || mi * vectors + vectors + 1 > unit.registers as i64
            || knobs.order.is_some())
    {
        return Err(ScheduleError {
            kernel: s.func().name.clone(),
            message: format!("a {mi} × {jb} tile does not fit {ie} × {je} outputs"),
        });
    }
    // Over a panel the last one may be a padded one; a product without one
    // takes the wider tile only over whole column tiles.
    if let Some(rows) = two_vector_tile_rows(ie, jb, unit).filter(|_| !tuned && (panel.is_some() || je % jb == 0)) {
        return schedule_rows_with_tail(s, outer, (i, j), rows, (jb, je % jb == 0), panel.is_none());
    }
    if let Some(rows) = wide_panel_tile_rows(ie, je, jb, unit).filter(|_| !tuned && panel.is_some()) {
        return schedule_rows_with_tail(s, outer, (i, j), rows, (jb, je % jb == 0), false);
    }
    let (i_o, i_i) = s.split(i, mi as usize)?;
    let (j_o, j_i) = s.split(j, jb as usize)?;
    // Column blocks outside row blocks: one block of B's columns stays in
    // cache while every row block of A passes over it.
    s.reorder(&[j_o.clone(), i_o.clone(), i_i, j_i.clone()])?;
    split_odd_vector_counts(&mut s, &j_i, jb, unit)?;
    // A packed weight padded to whole panels (the last one past the
    // columns): whole tiles; only the last panel's write-back checks the tail.
    let tile = if panel.is_some() && je % jb != 0 {
        s.decompose_reduction_whole_tiles(&i_o)?
    } else {
        s.decompose_reduction(&i_o, true)?
    };
    tile_kinds(&mut s, &tile)?;
    s.split_writeback_at_tail(&tile)?;
    // One row of too few column vectors to hide the FMA latency: the sum in
    // interleaved partial tiles.
    let factor = (LATENCY_ACCUMULATORS + vectors - 1) / vectors;
    let few_chains = ie == 1 && !tuned && factor > 1 && factor * vectors + 2 <= unit.registers as i64;
    if let ([k], true) = (&tile.reduce_loops[..], few_chains) {
        // A reduction too short for two steps per partial tile stays as it is.
        let _ = s.split_accumulation(k, factor as usize);
    }
    // Where several row blocks reuse a column block of B, copy it once into a
    // contiguous [k, jb] panel: B's rows are a page apart in big matrices,
    // which defeats the hardware prefetcher. Not where the block is B's
    // whole rows, already that panel.
    let mut par: Vec<Var> = outer.to_vec();
    par.push(j_o.clone());
    match column_operand(s.func(), &tile) {
        Some(b) if panel.is_none() && extent(&s, &i_o).unwrap_or(1) >= 4 && !whole_rows_of(s.func(), &tile, &b, jb) => {
            s.cache_read(&b, &j_o)?;
        }
        // Without a panel, row blocks parallelize too.
        _ => par.push(i_o),
    }
    fuse_parallel(&mut s, &par)?;
    Ok(s.into_func())
}

/// The rows of a register tile of two vectors of columns (a packed panel
/// of 16, or a 16-column tile of a product without one) on a unit of 16
/// vector registers, where every register is needed: 6 rows (12
/// accumulators, two for B's row and one broadcast), the `rows % 6` left
/// over as a tail tile. The 4 × 16 tile of [`matmul_tile`] has 8
/// accumulators, which only just cover the FMA latency: a C model of GPT's
/// 64 × 256 × 1024 product on Zen 3 ran 53 GFLOP/s with it, 93 with 6 × 16.
/// None where the rule's tile stands (wider register files, other column
/// tiles, or no more rows than one tile).
fn two_vector_tile_rows(rows: i64, columns: i64, unit: VectorUnit) -> Option<i64> {
    let lanes = unit.f32_lanes as i64;
    if unit.registers > 16 || lanes < 8 || columns != 2 * lanes {
        return None;
    }
    let tile = (unit.registers as i64 - 3) / 2;
    (rows > tile).then_some(tile)
}

/// The rows of a register tile over a packed panel of four vectors on a unit
/// of 32 registers: 6 (24 accumulators, four for the panel's row and one
/// broadcast), the rows left over a tail tile — not the 4 rows that divide a
/// 64-row product, which stream the panel from L2 once per 4 rows (GPT's
/// 64 × 1024 × 256 products 0.93–0.96× at 1 and 2 threads on Sapphire
/// Rapids). Only with at least 4 panels: the row tiles then run serially,
/// the panels in parallel.
fn wide_panel_tile_rows(rows: i64, columns: i64, panel: i64, unit: VectorUnit) -> Option<i64> {
    let lanes = unit.f32_lanes as i64;
    let tile = 6;
    // The accumulators, the panel row and a broadcast.
    let fits = tile * 4 + 4 < unit.registers as i64;
    (fits && panel == 4 * lanes && rows > tile && (columns + panel - 1) / panel >= MIN_PARALLEL_PANELS).then_some(tile)
}

/// The fewest panels of a product whose row tiles run serially.
const MIN_PARALLEL_PANELS: i64 = 4;

/// A product with `rows`-row tiles and a tail tile for the rows left over
/// (see [`two_vector_tile_rows`]): per column tile (in parallel), the whole
/// row tiles, then one tile of the remaining rows. `(columns, whole)`: the
/// column tile's width, and whether the columns fill whole tiles (else, over
/// a padded panel, the last one's write-back checks the tail). `copy_b`: B's
/// column block is copied into a contiguous panel first (a product without
/// a packed weight, where enough row tiles reuse it).
fn schedule_rows_with_tail(
    mut s: Schedule,
    outer: &[Var],
    (i, j): (&Var, &Var),
    rows: i64,
    (columns, whole): (i64, bool),
    copy_b: bool,
) -> Result<PrimFunc, ScheduleError> {
    let row_count = extent(&s, i).unwrap_or(1);
    let (j_o, j_i) = s.split(j, columns as usize)?;
    s.reorder(&[j_o.clone(), i.clone(), j_i])?;
    let (i_o, _, tail) = s.split_with_tail(i, rows as usize)?;
    let decompose = |s: &mut Schedule, at: &Var| {
        if whole {
            s.decompose_reduction(at, true)
        } else {
            s.decompose_reduction_whole_tiles(at)
        }
    };
    let tile = decompose(&mut s, &i_o)?;
    tile_kinds(&mut s, &tile)?;
    s.split_writeback_at_tail(&tile)?;
    if let Some(t) = tail {
        // One iteration around the tail rows, so that they form one tile.
        let extent_t = extent(&s, &t).unwrap_or(1);
        let (t_o, _) = s.split(&t, extent_t as usize)?;
        let tile = decompose(&mut s, &t_o)?;
        tile_kinds(&mut s, &tile)?;
        s.split_writeback_at_tail(&tile)?;
    }
    if copy_b && row_count / rows >= 4 {
        if let Some(b) = column_operand(s.func(), &tile).filter(|b| !whole_rows_of(s.func(), &tile, b, columns)) {
            s.cache_read(&b, &j_o)?;
        }
    }
    let mut par: Vec<Var> = outer.to_vec();
    par.push(j_o);
    fuse_parallel(&mut s, &par)?;
    Ok(s.into_func())
}

/// Whether the tile reads `b` (B of `A·B`) along its columns contiguously
/// and a column block of `columns` is `b`'s whole rows: the block is then
/// already a contiguous `[k, columns]` panel, and the copy only costs time
/// (without it GPT's 64 × 64 attention products 0.95×, YOLOv8n's Winograd
/// products 0.78–0.97×, ResNet-18's 0.94–0.99× on Zen 5).
fn whole_rows_of(f: &PrimFunc, tile: &ReductionTile, b: &Buffer, columns: i64) -> bool {
    let Some(col) = tile.update_loops.last() else { return false };
    if b.shape().last().map(|&d| d as i64) != Some(columns) {
        return false;
    }
    let mut whole = true;
    f.body.visit(&mut |s| {
        if let Stmt::Store { value, .. } = s {
            let mut loads = Vec::new();
            collect_loads(value, &mut loads);
            for (_, idx) in loads.iter().filter(|(l, idx)| l == b && idx.iter().any(|i| i.uses_var(col))) {
                whole &= super::contiguous(idx, col);
            }
        }
    });
    whole
}

/// The input read along the column tile's variable (B of `A·B`).
fn column_operand(f: &PrimFunc, tile: &ReductionTile) -> Option<Buffer> {
    let col = tile.update_loops.last()?;
    let mut found = None;
    f.body.visit(&mut |s| {
        if let Stmt::Store { value, .. } = s {
            let mut loads = Vec::new();
            collect_loads(value, &mut loads);
            for (b, idx) in loads {
                if b.scope() == Scope::Global && idx.iter().any(|i| i.uses_var(col)) && found.is_none() {
                    found = Some(b);
                }
            }
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::transform::PassContext;

    /// Whether the batched product of `a` and `b` (Relay types) copies B
    /// into a panel.
    fn copies_b(a: &str, b: &str) -> bool {
        let text = format!(
            "def @main(%a: Tensor[{a}, float32], %b: Tensor[{b}, float32]) {{\n  nn.batch_matmul(%a, %b, transpose_b=False)\n}}"
        );
        let m = crate::relay::parse_module(&text).unwrap();
        let (_, plan) = crate::build::optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3))).unwrap();
        let product = plan.kernels.iter().find(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.batch_matmul"));
        crate::tir::print_prim_func(product.expect("a product kernel")).contains("_shared")
    }

    #[test]
    fn b_is_copied_into_a_panel_unless_its_rows_are_one() {
        // Attention's 64 × 64 products: B's rows are the column block.
        assert!(!copies_b("(4, 64, 64)", "(4, 64, 64)"));
        // A block of wider rows: copied.
        assert!(copies_b("(2, 96, 64)", "(2, 64, 1024)"));
    }
}
