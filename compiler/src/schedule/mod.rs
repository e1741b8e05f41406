//! Schedules: the primitives ([`primitives`]) and the default CPU strategy
//! applied to every lowered kernel (`tir.DefaultSchedule`), chosen by the
//! kernel's anchor operator:
//!
//! - `nn.conv2d`: output channels × output columns register tiles (8 × up to
//!   two vectors of lanes) accumulated in a kernel-local tile, reduction
//!   loops outside the tile, columns vectorized, channels unrolled — or, over
//!   a packed `OIHW<lanes>o` weight, one vector of channels × up to 14
//!   columns unrolled; the padded input computed per output row
//!   (`compute_at`); rows in parallel.
//! - `nn.matmul`, `nn.dense`, `nn.batch_matmul`: rows × columns register
//!   tiles the same way, the column tile vectorized; tiles in parallel.
//! - other reductions: the reduction loops moved outside the last output
//!   axis, so that consecutive iterations write consecutive outputs.
//! - everything: innermost store loops split by the vector width and
//!   vectorized; the outer loop of a single-nest kernel parallel when the
//!   work pays for the threads (`tir.ParallelizeOuter`).
//!
//! Tiles are sized from the target's vector unit ([`VectorUnit`]: lanes and
//! registers), so that the accumulators of a tile stay in registers.
//! A strategy that does not apply to a kernel's shape leaves it as lowered;
//! every primitive preserves the kernel's meaning.

pub mod gpu;
pub mod primitives;

use crate::target::VectorUnit;
use crate::tir::{Buffer, ForKind, PrimFunc, Scope, Stmt, Var};
pub use primitives::{ReductionTile, Schedule, ScheduleError};

/// Below this many innermost iterations a kernel stays on one thread.
pub const MIN_PARALLEL_WORK: u64 = 16 * 1024;

fn work(s: &Stmt) -> u64 {
    match s {
        Stmt::For(l) => l.extent.as_int().unwrap_or(1).max(1) as u64 * work(&l.body),
        Stmt::Seq(v) => v.iter().map(work).sum(),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => work(body),
        Stmt::If { then_case, else_case, .. } => work(then_case).max(else_case.as_deref().map_or(0, work)),
        Stmt::Store { .. } | Stmt::Evaluate(_) => 1,
    }
}

/// Whether any statement of `s` (itself included) satisfies `pred`.
pub(crate) fn contains(s: &Stmt, pred: impl Fn(&Stmt) -> bool) -> bool {
    let mut found = false;
    s.visit(&mut |st| found |= pred(st));
    found
}

fn has_kind(s: &Stmt, kind: ForKind) -> bool {
    contains(s, |s| matches!(s, Stmt::For(l) if l.kind == kind))
}

/// The variables of the perfectly nested loops from `s` down.
pub(crate) fn loop_chain(s: &Stmt) -> Vec<Var> {
    let mut out = Vec::new();
    let mut cur = s;
    while let Stmt::For(l) = cur {
        out.push(l.var.clone());
        cur = &l.body;
    }
    out
}

/// Mark the outermost loop of a single-nest kernel parallel when it is worth it.
pub fn parallelize_outer(f: PrimFunc) -> PrimFunc {
    parallelize_outer_above(f, MIN_PARALLEL_WORK)
}

/// [`parallelize_outer`] with an explicit work threshold (tests use 0).
pub fn parallelize_outer_above(mut f: PrimFunc, min_work: u64) -> PrimFunc {
    let total = work(&f.body);
    if total < min_work || has_kind(&f.body, ForKind::Parallel) {
        return f;
    }
    if let Stmt::For(l) = &mut f.body {
        if l.extent.as_int().is_some_and(|e| e >= 2) {
            l.kind = ForKind::Parallel;
        }
    }
    f
}

/// The largest divisor of `n` that is at most `cap`.
fn divisor_at_most(n: i64, cap: i64) -> i64 {
    (1..=cap.min(n).max(1)).rev().find(|d| n % d == 0).unwrap_or(1)
}

/// The spatial loops of the (first) reduction: a perfect nest whose body is
/// `init; for reduce… { update }` (plus epilogue statements).
pub(crate) fn reduction_nest(f: &PrimFunc) -> Option<Vec<Var>> {
    let mut found = None;
    f.body.visit(&mut |s| {
        if found.is_some() {
            return;
        }
        let Stmt::For(_) = s else { return };
        let chain = loop_chain(s);
        let mut cur = s;
        while let Stmt::For(l) = cur {
            cur = &l.body;
        }
        while let Stmt::If { then_case, else_case: None, .. } = cur {
            cur = then_case;
        }
        if let Stmt::Seq(parts) = cur {
            if let (Some(Stmt::Store { buffer, .. }), Some(Stmt::For(r))) = (parts.first(), parts.get(1)) {
                let mut inner = &r.body;
                while let Stmt::For(l) = inner {
                    inner = &l.body;
                }
                if matches!(inner, Stmt::Store { buffer: b, .. } if b == buffer) {
                    found = Some(chain);
                }
            }
        }
    });
    found
}

pub(crate) fn extent(s: &Schedule, v: &Var) -> Option<i64> {
    s.loop_of(v).ok()?.extent.as_int()
}

/// Unroll the row loop and vectorize the column loop of each tile copy.
fn tile_kinds(s: &mut Schedule, t: &ReductionTile) -> Result<(), ScheduleError> {
    for loops in [&t.init_loops, &t.update_loops, &t.writeback_loops] {
        if let [.., rows, cols] = &loops[..] {
            s.unroll(rows)?;
            s.vectorize(cols)?;
        } else if let [cols] = &loops[..] {
            s.vectorize(cols)?;
        }
    }
    Ok(())
}

/// Fuse directly nested loops (outermost first) into one; None for no loops.
pub(crate) fn fuse_all(s: &mut Schedule, loops: &[Var]) -> Result<Option<Var>, ScheduleError> {
    let Some(mut fused) = loops.first().cloned() else { return Ok(None) };
    for v in &loops[1..] {
        fused = s.fuse(&fused, v)?;
    }
    Ok(Some(fused))
}

/// Fuse the loops `outer` (outermost first, directly nested) and mark the result parallel.
fn fuse_parallel(s: &mut Schedule, outer: &[Var]) -> Result<(), ScheduleError> {
    let Some(fused) = fuse_all(s, outer)? else { return Ok(()) };
    if extent(s, &fused).unwrap_or(0) >= 2
        && work(&s.func().body) >= MIN_PARALLEL_WORK
        && sole_path(&s.func().body, &fused)
    {
        s.parallel(&fused)?;
    }
    Ok(())
}

/// Whether everything the kernel does happens inside loop `v`: each task of
/// a parallel loop runs the statements around it, so there may be none
/// besides enclosing loops, allocations and lets.
fn sole_path(s: &Stmt, v: &Var) -> bool {
    match s {
        Stmt::For(l) if l.var == *v => true,
        Stmt::For(l) => sole_path(&l.body, v),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => sole_path(body, v),
        Stmt::Seq(list) => matches!(&list[..], [only] if sole_path(only, v)),
        _ => false,
    }
}

/// The materialized stages of a kernel (a convolution's padded input).
pub(crate) fn materialized(f: &PrimFunc) -> Vec<Buffer> {
    let mut out = Vec::new();
    f.body.visit(&mut |s| {
        if let Stmt::Allocate { buffer, .. } = s {
            if buffer.scope() == Scope::Local && buffer.name() == "pad" {
                out.push(buffer.clone());
            }
        }
    });
    out
}

/// conv2d: see the module docs. Over an `OIHW<k>o` weight (AlterOpLayout's
/// packing of a constant weight) the vector lanes are `k` output channels,
/// contiguous in the weight, with an input value broadcast to all of them —
/// whole vectors even on the 7- and 14-column maps of late stages; otherwise
/// the lanes are output columns.
fn schedule_conv2d(f: PrimFunc, unit: VectorUnit) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    let err = |s: &Schedule, m: &str| ScheduleError { kernel: s.func().name.clone(), message: m.into() };
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(&s, "no reduction nest"))?;
    let [outer @ .., oc, oh, ow] = &spatial[..] else { return Err(err(&s, "not an NCHW convolution")) };
    let (oce, owe) = (extent(&s, oc).unwrap_or(1), extent(&s, ow).unwrap_or(1));
    let block = s.func().attrs.get("conv2d.weight_block").and_then(|b| b.parse::<i64>().ok());
    let lanes = unit.f32_lanes as i64;
    let (ocb, owb) = match block {
        // One vector of channels per column; the columns' accumulators, the
        // broadcast input and the weight vector fill the registers.
        Some(k) => (k, divisor_at_most(owe, (unit.registers as i64 - 2).clamp(1, 14))),
        None => {
            // Whole vector registers where the row allows it (a 14-lane vector
            // costs split loads); any divisor up to 16 otherwise; as many
            // channel rows as keep the accumulators in half the registers.
            let pow2 = [16, 8].into_iter().find(|&w| owe % w == 0);
            let mut owb = pow2.unwrap_or_else(|| divisor_at_most(owe, 16));
            if owb < 4 && owe > 16 {
                owb = 16;
            }
            let vectors_per_row = (owb + lanes - 1) / lanes;
            let rows = (unit.registers as i64 / 2 / vectors_per_row).clamp(1, 8);
            (divisor_at_most(oce, rows), owb)
        }
    };
    let (oc_o, oc_i) = s.split(oc, ocb as usize)?;
    let (ow_o, ow_i) = s.split(ow, owb as usize)?;
    // The innermost tile loop becomes the vector lanes.
    let (rows, lanes) = if block.is_some() { (ow_i, oc_i) } else { (oc_i, ow_i) };
    s.reorder(&[oh.clone(), oc_o, ow_o.clone(), rows, lanes])?;
    for pad in materialized(s.func()) {
        s.compute_at(&pad, oh)?;
    }
    let tile = s.decompose_reduction(&ow_o, true)?;
    tile_kinds(&mut s, &tile)?;
    // Rows in parallel: fuse the batch loop (when directly above) with the rows.
    let mut par = Vec::new();
    if let Some(n) = outer.last() {
        if matches!(&s.loop_of(n)?.body, Stmt::For(l) if l.var == *oh) {
            par.push(n.clone());
        }
    }
    par.push(oh.clone());
    fuse_parallel(&mut s, &par)?;
    Ok(s.into_func())
}

/// matmul, dense, batch_matmul: see the module docs.
fn schedule_matmul(f: PrimFunc, unit: VectorUnit) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    let spatial = reduction_nest(s.func())
        .ok_or_else(|| ScheduleError { kernel: s.func().name.clone(), message: "no reduction nest".into() })?;
    let [outer @ .., i, j] = &spatial[..] else {
        return Err(ScheduleError { kernel: s.func().name.clone(), message: "not a matrix product".into() });
    };
    let (ie, je) = (extent(&s, i).unwrap_or(1), extent(&s, j).unwrap_or(1));
    let mi = divisor_at_most(ie, 4);
    let lanes = unit.f32_lanes as i64;
    // Accumulators: half the registers (the rest hold A's broadcasts and B's rows).
    let accumulators = (unit.registers as i64 / 2).max(1);
    let jb = [8 * lanes, 4 * lanes, 2 * lanes, lanes]
        .into_iter()
        .find(|&b| je % b == 0 && mi * b <= accumulators * lanes)
        .unwrap_or_else(|| divisor_at_most(je, lanes));
    let (i_o, i_i) = s.split(i, mi as usize)?;
    let (j_o, j_i) = s.split(j, jb as usize)?;
    // Column blocks outside row blocks: one block of B's columns stays in
    // cache while every row block of A passes over it.
    s.reorder(&[j_o.clone(), i_o.clone(), i_i, j_i])?;
    let tile = s.decompose_reduction(&i_o, true)?;
    tile_kinds(&mut s, &tile)?;
    // Where several row blocks reuse a column block of B, copy it once into a
    // contiguous [k, jb] panel: B's rows are a page apart in big matrices,
    // which defeats the hardware prefetcher.
    let mut par: Vec<Var> = outer.to_vec();
    par.push(j_o.clone());
    match column_operand(s.func(), &tile) {
        Some(b) if extent(&s, &i_o).unwrap_or(1) >= 4 => {
            s.cache_read(&b, &j_o)?;
        }
        // Without a panel, row blocks parallelize too.
        _ => par.push(i_o),
    }
    fuse_parallel(&mut s, &par)?;
    Ok(s.into_func())
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

pub(crate) fn collect_loads(e: &crate::tir::Expr, out: &mut Vec<(Buffer, Vec<crate::tir::Expr>)>) {
    if let crate::tir::Expr::Load(b, idx) = e {
        out.push((b.clone(), idx.clone()));
    }
    e.for_each_child(|c| collect_loads(c, out));
}

/// Other reductions: the reduction loops outside the last output axis.
fn schedule_reduction(f: PrimFunc) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    if let Some(spatial) = reduction_nest(s.func()) {
        if let [.., at, _] = &spatial[..] {
            s.decompose_reduction(at, false)?;
        }
    }
    Ok(s.into_func())
}

/// Split every innermost loop that stores one element per iteration by the
/// vector width and vectorize the inner part (where the width divides it).
fn vectorize_inner(f: PrimFunc, unit: VectorUnit) -> PrimFunc {
    let mut s = Schedule::new(f);
    let mut candidates = Vec::new();
    s.func().body.visit(&mut |st| {
        if let Stmt::For(l) = st {
            if l.kind == ForKind::Serial && matches!(l.body, Stmt::Store { .. }) {
                candidates.push((l.var.clone(), l.extent.as_int().unwrap_or(0)));
            }
        }
    });
    for (v, n) in candidates {
        // Two registers' worth where it divides (LLVM interleaves them), one otherwise.
        let lanes = 2 * unit.f32_lanes as i64;
        let width = [lanes, lanes / 2].into_iter().find(|&w| n % w == 0 && n >= w);
        let done = match width {
            Some(w) if w == n => s.vectorize(&v),
            Some(w) => s.split(&v, w as usize).and_then(|(_, inner)| s.vectorize(&inner)),
            None => Ok(()),
        };
        debug_assert!(done.is_ok(), "{done:?}");
    }
    s.into_func()
}

/// The default CPU schedule of a lowered kernel (before flattening).
pub fn default_cpu_schedule(f: PrimFunc, opt_level: u32, unit: VectorUnit) -> PrimFunc {
    let anchor = f.attrs.get("anchor").cloned().unwrap_or_default();
    let scheduled = if opt_level == 0 {
        Err(ScheduleError { kernel: f.name.clone(), message: "opt level 0".into() })
    } else {
        match anchor.as_str() {
            "nn.conv2d" => schedule_conv2d(f.clone(), unit).or_else(|_| schedule_reduction(f.clone())),
            // A weight read along its rows (dense, transpose_b) is not contiguous
            // in the output columns: LLVM's vectorizer does better on the plain reduction.
            "nn.matmul" | "nn.batch_matmul" if !f.attrs.contains_key("transpose_b") => {
                schedule_matmul(f.clone(), unit).or_else(|_| schedule_reduction(f.clone()))
            }
            _ if reduction_nest(&f).is_some() => schedule_reduction(f.clone()),
            _ => Ok(vectorize_inner(f.clone(), unit)),
        }
    };
    // The kernel says which strategy shaped it, or why none did (printed with the TIR).
    let mut out = match scheduled {
        Ok(mut g) => {
            g.attrs.insert("schedule".into(), if anchor.is_empty() { "default".into() } else { anchor });
            g
        }
        Err(e) => {
            let mut f = f;
            f.attrs.insert("schedule".into(), format!("as lowered ({})", e.message));
            f
        }
    };
    // A materialized stage nobody placed is inlined back (no full-size local buffer).
    for pad in materialized(&out) {
        let mut s = Schedule::new(out.clone());
        match s.compute_inline(&pad) {
            Ok(()) => out = s.into_func(),
            Err(e) => {
                out.attrs.insert("inline".into(), e.message);
            }
        }
    }
    out
}
