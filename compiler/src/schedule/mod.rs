//! Schedules: the primitives ([`primitives`]) and the default CPU strategy
//! applied to every lowered kernel (`tir.DefaultSchedule`), chosen by the
//! kernel's anchor operator:
//!
//! - `nn.conv2d`: output channels × output columns register tiles (up to 8
//!   channels × up to two vectors of lanes) accumulated in a kernel-local
//!   tile, reduction loops outside the tile, columns vectorized, channels
//!   unrolled — or, over a packed `OIHW<lanes>o` weight, `v` vectors of
//!   channels × `c` columns (the fewest loads per FMA that fit the
//!   registers: 2 × 4 on AVX2 for wide rows, 1 × 14 or 1 × 7 for late
//!   stages); the padded input computed per output row (`compute_at`), rows
//!   in parallel — or, for large weights on maps of at most 64 pixels, the
//!   whole image padded once and channel blocks in parallel. A pointwise
//!   (1 × 1, stride-1, unpadded) convolution over whole vectors of pixels,
//!   which AlterOpLayout leaves OIHW on 16-lane targets, fuses rows and
//!   columns into one run of pixels: tiles of up to 8 channel rows × up to
//!   3 pixel vectors, contiguous loads and stores, pixel blocks in parallel.
//! - depthwise `nn.conv2d` (one input channel per group): channels in
//!   parallel, each channel's padded image computed once, tiles of rows ×
//!   whole vectors with the window unrolled; rows that are not whole vectors
//!   are computed to the next whole vector and written back to the row's end.
//! - `nn.matmul`, `nn.dense`, `nn.batch_matmul`: rows × columns register
//!   tiles the same way, the column tile vectorized; tiles in parallel. On
//!   AVX2 a two-vector column tile takes 6 rows and a tail tile for the rest
//!   (every register used: `two_vector_tile_rows`).
//! - the Winograd input and output transforms (`winograd.rs`): per channel,
//!   a vector of tiles at a time, the tile positions unrolled.
//! - other reductions: the reduction loops moved outside the last output
//!   axis (in every nest: a softmax's sum as well as its maximum), so that
//!   consecutive iterations write consecutive outputs, vectorized in whole
//!   vectors with a scalar tail —
//!   unless they reduce a row of contiguous elements (softmax, layer norm,
//!   a row's sum or maximum, a dense product over a run-time weight): such a
//!   row stays innermost and accumulates per vector lane
//!   ([`Schedule::rfactor_lanes`]), and the loops that store contiguous
//!   elements beside it (softmax's normalized row) are vectorized.
//! - everything: innermost store loops split by the vector width and
//!   vectorized; the outer loop of a single-nest kernel parallel when the
//!   work pays for the threads (`tir.ParallelizeOuter`).
//!
//! Tiles are sized from the target's vector unit ([`VectorUnit`]: lanes and
//! registers), so that the accumulators of a tile stay in registers.
//! A strategy that does not apply to a kernel's shape leaves it as lowered;
//! every primitive preserves the kernel's meaning.

pub(crate) mod amx;
mod conv2d;
mod copies;
pub mod gpu;
mod int8;
pub mod knobs;
mod matmul;
pub mod passes;
mod prefetch;
pub mod primitives;
mod softmax_rows;
mod unswitch;
mod winograd;

pub use conv2d::pointwise_over_pixels;
use copies::vectorize_local_copies;
pub(crate) use copies::vectorize_partitioned_copies;
pub use knobs::{kernel_key, ConvOrder, Knobs, ScheduleTuning};
use matmul::schedule_matmul;
pub use matmul::{matmul_tile, packed_product_rows};

use crate::target::VectorUnit;
use crate::tir::{Buffer, ForKind, PrimFunc, Scope, Stmt, Var};
pub use primitives::{ReductionTile, Schedule, ScheduleError};

/// Below this much work (about a store's worth per unit, a vector store's per lane) a kernel stays on one thread.
pub const MIN_PARALLEL_WORK: u64 = 16 * 1024;

/// Distinct expression nodes per unit of work: a plain store (a copy, an
/// add) is one unit; a softmax's polynomial `exp`, some 60 nodes, is several.
const NODES_PER_WORK_UNIT: u64 = 8;

/// The work of `s`: its stores, each weighted by the size of its value,
/// times the trip counts around them.
fn work(s: &Stmt) -> u64 {
    match s {
        Stmt::For(l) => l.extent.as_int().unwrap_or(1).max(1) as u64 * work(&l.body),
        Stmt::Seq(v) => v.iter().map(work).sum(),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => work(body),
        Stmt::If { then_case, else_case, .. } => work(then_case).max(else_case.as_deref().map_or(0, work)),
        // A vector store is a store per lane: `tir.ParallelizeOuter` runs
        // after vectorization, the strategies' `fuse_parallel` before it.
        Stmt::Store { value, .. } | Stmt::Evaluate(value) => {
            (distinct_nodes(value) / NODES_PER_WORK_UNIT).max(1) * u64::from(value.ty().lanes.max(1))
        }
    }
}

/// The number of distinct subexpressions of `e`: a lowered intrinsic repeats
/// its operand in every select (a softmax's `exp` holds `x - max` a dozen
/// times, ~1,000 nodes as a tree), which the backends compute once.
fn distinct_nodes(e: &crate::tir::Expr) -> u64 {
    let mut seen = std::collections::HashSet::new();
    structural_hash(e, &mut seen);
    seen.len() as u64
}

/// A hash of `e`'s structure, computed bottom-up (each node's own fields and
/// its children's hashes), recording every subexpression's in `seen`.
fn structural_hash(e: &crate::tir::Expr, seen: &mut std::collections::HashSet<u64>) -> u64 {
    use crate::tir::Expr;
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::mem::discriminant(e).hash(&mut h);
    match e {
        Expr::Int(v, t) => (v, t).hash(&mut h),
        Expr::Float(v, t) => (v.to_bits(), t).hash(&mut h),
        Expr::Var(v) => v.hash(&mut h),
        Expr::Bin(op, ..) => op.hash(&mut h),
        Expr::Cmp(op, ..) => op.hash(&mut h),
        Expr::Cast(t, _) => t.hash(&mut h),
        Expr::Load(b, _) => b.0.id.hash(&mut h),
        Expr::Call(intrinsic, _, t) => (intrinsic, t).hash(&mut h),
        Expr::Ramp { lanes, .. } | Expr::Broadcast(_, lanes) => lanes.hash(&mut h),
        Expr::And(..) | Expr::Or(..) | Expr::Not(_) | Expr::Select(..) | Expr::Reduce(_) => {}
    }
    e.for_each_child(|c| structural_hash(c, seen).hash(&mut h));
    let hash = h.finish();
    seen.insert(hash);
    hash
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
/// The outermost loop may sit inside kernel-local allocations (a softmax's
/// row maxima and sums) of which each iteration provably touches a slice of
/// its own: each task slice runs the kernel with its own copy.
pub fn parallelize_outer_above(mut f: PrimFunc, min_work: u64) -> PrimFunc {
    let total = work(&f.body);
    if total < min_work || has_kind(&f.body, ForKind::Parallel) || f.attrs.contains_key(knobs::SERIAL_ATTR) {
        return f;
    }
    let mut locals = Vec::new();
    let mut s = &mut f.body;
    while let Stmt::Allocate { buffer, body } = s {
        if buffer.scope() != Scope::Local {
            return f;
        }
        locals.push(buffer.clone());
        s = body;
    }
    if let Stmt::For(l) = s {
        if l.extent.as_int().is_some_and(|e| e >= 2) && locals.iter().all(|b| own_slices(l, b)) {
            l.kind = ForKind::Parallel;
        }
    }
    f
}

/// Whether the iterations of loop `l` touch disjoint slices of the
/// (flattened) buffer `b`: every access index is `c·v + r` with `r` free of
/// the loop variable `v` and `c · extent ≥ |b|` — in bounds for every `v`,
/// `r` then stays below `c`.
fn own_slices(l: &crate::tir::For, b: &Buffer) -> bool {
    use crate::tir::Expr;
    let (Some(extent), numel) = (l.extent.as_int(), b.shape().iter().product::<usize>() as i64) else { return false };
    let own = |idx: &[Expr]| match idx {
        [i] => kiln_ir::arith::linear(i, &l.var).is_some_and(|(c, _)| c > 0 && c.saturating_mul(extent) >= numel),
        _ => false,
    };
    fn loads_ok(e: &Expr, b: &Buffer, own: &dyn Fn(&[Expr]) -> bool) -> bool {
        let mut ok = !matches!(e, Expr::Load(buf, idx) if buf == b && !own(idx));
        e.for_each_child(|c| ok &= loads_ok(c, b, own));
        ok
    }
    let mut ok = true;
    l.body.visit(&mut |st| {
        if let Stmt::Store { buffer, indices, .. } = st {
            ok &= buffer != b || own(indices);
        }
    });
    l.body.clone().map_exprs(&mut |e| {
        ok &= loads_ok(&e, b, &own);
        e
    });
    ok
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

/// Unroll the row loops and vectorize the column loop of each tile copy.
fn tile_kinds(s: &mut Schedule, t: &ReductionTile) -> Result<(), ScheduleError> {
    for loops in [&t.init_loops, &t.update_loops, &t.writeback_loops] {
        if let [rows @ .., cols] = &loops[..] {
            for r in rows {
                s.unroll(r)?;
            }
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
        // Filling kernel-local buffers first is allowed: every task fills its
        // own copy (a padded input computed once per image).
        Stmt::Seq(list) => match &list[..] {
            [fills @ .., last] => fills.iter().all(writes_only_local) && sole_path(last, v),
            [] => false,
        },
        _ => false,
    }
}

/// Whether every store of `s` writes a kernel-local buffer.
fn writes_only_local(s: &Stmt) -> bool {
    !contains(s, |st| matches!(st, Stmt::Store { buffer, .. } if buffer.scope() != Scope::Local))
}

/// The loops of the nest that fills kernel-local buffer `b`, outermost first.
fn fill_loops(f: &PrimFunc, b: &Buffer) -> Vec<Var> {
    let mut out = Vec::new();
    f.body.visit(&mut |s| {
        if out.is_empty() && matches!(s, Stmt::For(_)) {
            let mut cur = s;
            while let Stmt::For(l) = cur {
                cur = &l.body;
            }
            while let Stmt::If { then_case, else_case: None, .. } = cur {
                cur = then_case;
            }
            if matches!(cur, Stmt::Store { buffer, .. } if buffer == b) {
                out = loop_chain(s);
            }
        }
    });
    out
}

/// The materialized stages of a kernel not placed yet (a convolution's
/// padded input; the Winograd input transform's tile and right factor).
pub(crate) fn materialized(f: &PrimFunc) -> Vec<Buffer> {
    let mut out = Vec::new();
    f.body.visit(&mut |s| {
        if let Stmt::Allocate { buffer, .. } = s {
            let name = buffer.name();
            let placed = name == "pad"
                || name == crate::topi::POOL_ROWS_STAGE
                || name == crate::topi::SOFTMAX_EXP_STAGE
                || crate::topi::WINOGRAD_INPUT_STAGES.contains(&name);
            if buffer.scope() == Scope::Local && placed {
                out.push(buffer.clone());
            }
        }
    });
    out
}

/// The number of iterations of the (first) reduction's reduction loops.
fn reduction_extent(f: &PrimFunc) -> i64 {
    reduction_loops(f).iter().fold(1i64, |n, &(_, e)| n.saturating_mul(e))
}

/// The (first) reduction's reduction loops, outermost first, with their
/// extents (1 where not constant).
fn reduction_loops(f: &PrimFunc) -> Vec<(Var, i64)> {
    let mut found: Option<Vec<(Var, i64)>> = None;
    f.body.visit(&mut |s| {
        if let (Stmt::Seq(parts), None) = (s, &found) {
            if let [Stmt::Store { .. }, r @ Stmt::For(_), ..] = &parts[..] {
                let mut loops = Vec::new();
                let mut cur = r;
                while let Stmt::For(l) = cur {
                    loops.push((l.var.clone(), l.extent.as_int().unwrap_or(1)));
                    cur = &l.body;
                }
                found = Some(loops);
            }
        }
    });
    found.unwrap_or_default()
}

pub(crate) fn collect_loads(e: &crate::tir::Expr, out: &mut Vec<(Buffer, Vec<crate::tir::Expr>)>) {
    if let crate::tir::Expr::Load(b, idx) = e {
        out.push((b.clone(), idx.clone()));
    }
    e.for_each_child(|c| collect_loads(c, out));
}

/// Other reductions: the reduction loops outside the last output axis.
/// A pooling window is unrolled (up to [`MAX_UNROLLED_WINDOW`] steps, from
/// its innermost loop) and the rows vectorized, accumulating in a
/// kernel-local row: each unrolled step is then a row whose border tests
/// are constants, which LoopPartition splits off, leaving a plain (strided)
/// vector in the middle instead of a clamped, tested read per element.
fn schedule_reduction(f: PrimFunc, unit: VectorUnit) -> Result<PrimFunc, ScheduleError> {
    let pooling = matches!(f.attrs.get("anchor").map(String::as_str), Some("nn.max_pool2d" | "nn.avg_pool2d"));
    let mut s = Schedule::new(f);
    // A softmax's exponentials (see `topi::nn::SOFTMAX_EXP_STAGE`), fused
    // into the row loop with its maximum, sum and quotients: one row per
    // iteration of that loop (else inlined back by `inline_unplaced`).
    for exp in materialized(s.func()).into_iter().filter(|b| b.name() == crate::topi::SOFTMAX_EXP_STAGE) {
        let row = fill_loops(s.func(), &exp).first().map(|l| s.loops_around(l)).transpose()?;
        if let Some(at) = row.as_ref().and_then(|loops| loops.last()) {
            // Where it is not one row per iteration (a softmax along a
            // non-last axis), `inline_unplaced` inlines it back.
            s.localize(&exp, at).ok();
        }
    }
    if let Some(spatial) = reduction_nest(s.func()) {
        // A reduction along contiguous elements (a row: softmax, layer norm)
        // stays innermost and runs on vector lanes (`vectorize_rows`); so
        // does one whose last output axis has one element (nothing to make
        // consecutive).
        if let [.., at, last] = &spatial[..] {
            if extent(&s, last) == Some(1) || (!pooling && reduces_a_row(s.func(), unit.f32_lanes as i64)) {
                return Ok(s.into_func());
            }
            // A pooling's row accumulates in a kernel-local vector (registers):
            // read and written back in the output once, not once per window
            // step (ResNet-18's 3 × 3 stride-2 pooling 298 -> 210-225 µs).
            let tile = s.decompose_reduction(at, pooling)?;
            if pooling {
                // A padded plane that fits L1 easily (LowerTE materializes no
                // larger one: `POOL_PLANE_BYTES`) is computed once per channel:
                // each window step then reads a whole row of the plane — no
                // border tests, which loop partitioning had made into runs of 8,
                // 9 and 10 lanes written into the row's accumulator piece by
                // piece (YOLOv8n's 5 × 5 SPPF poolings on 10 × 10 maps).
                // FuseSiblingLoops has already fused the plane's nest with the
                // pooling's in the channel loop around both; `localize` gives it
                // one plane per channel, and where it is not one slice per
                // channel (a batch of images) it is inlined back, read in place.
                // A max pooling over windows of several rows has no plane:
                // its row maxima, computed per output row, read the input in
                // place (border tests on whole rows) — the 5 × 5 SPPF
                // poolings 0.41–0.47× the time of the plane's reads per
                // window step (Zen 5, AVX-512 and AVX2 code).
                let around = spatial.first().map(|first| s.loops_around(first)).transpose()?;
                let channel = around.as_ref().and_then(|loops| loops.last().cloned());
                let (rows, pads): (Vec<_>, Vec<_>) =
                    materialized(s.func()).into_iter().partition(|b| b.name() == crate::topi::POOL_ROWS_STAGE);
                // A max pooling's row maxima (see `topi::nn::pool2d`): one
                // row per output row (in registers), vectorized along it
                // (LeNet's 2 × 2 poolings 0.68–0.86×, ResNet-18's 3 × 3 0.96×).
                for r in rows {
                    let local = s.compute_at(&r, at)?;
                    if let Some(cols) = fill_loops(s.func(), &local).iter().find(|l| extent(&s, l) != Some(1)) {
                        s.vectorize(cols)?;
                    }
                }
                for pad in pads {
                    if channel.as_ref().is_none_or(|c| s.localize(&pad, c).is_err()) {
                        s.compute_inline(&pad)?;
                    }
                }
                // The window unrolled from its innermost loop while it stays
                // within the limit: a 3 × 3 window whole (each step then a
                // row whose border tests are constants), a 5 × 5 one
                // (YOLOv8n's SPPF on 10 × 10 maps, 180 µs each as scalar
                // code, 70 µs so) along its columns.
                let mut unrolled = 1;
                for r in tile.reduce_loops.iter().rev() {
                    match extent(&s, r) {
                        Some(n) if unrolled * n <= MAX_UNROLLED_WINDOW => {
                            s.unroll(r)?;
                            unrolled *= n;
                        }
                        _ => break,
                    }
                }
                let rows = [tile.init_loops.last(), tile.update_loops.last(), tile.writeback_loops.last()];
                for row in rows.into_iter().flatten() {
                    s.vectorize(row)?;
                }
            } else {
                // Later reduction nests of the same kind (a softmax's sum after
                // its maximum, along a non-last axis), whose outer loops
                // FuseSiblingLoops merged with the first's: their reduction
                // loops go outside their last axis too.
                for x in single_loop_reductions(s.func(), unit.f32_lanes as i64) {
                    s.hoist_reduction(&x)?;
                }
            }
        }
    }
    Ok(s.into_func())
}

/// The loops `x` of nests `for x { A[…x…] = init; R… { A[…x…] = f(…) } }`
/// (at least a vector long) whose update reads contiguously along `x`: for
/// [`Schedule::hoist_reduction`].
fn single_loop_reductions(f: &PrimFunc, lanes: i64) -> Vec<Var> {
    let mut found = Vec::new();
    f.body.visit(&mut |st| {
        let Stmt::For(l) = st else { return };
        let Stmt::Seq(parts) = &l.body else { return };
        let [Stmt::Store { buffer, .. }, reduce @ Stmt::For(_)] = &parts[..] else { return };
        let mut inner = reduce;
        while let Stmt::For(r) = inner {
            inner = &r.body;
        }
        if let Stmt::Store { buffer: b, indices, value } = inner {
            if b == buffer
                && l.extent.as_int().is_some_and(|n| n >= lanes)
                && contiguous(indices, &l.var)
                && reads_contiguously(value, &l.var)
            {
                found.push(l.var.clone());
            }
        }
    });
    found
}

/// Rows shorter than a vector but at least this long are one partial vector
/// in [`vectorize_rows`]: a classifier's softmax over 10 scores had run its
/// polynomial `exp` twice per score on scalars (0.2 µs of LeNet's 5.5).
const MIN_ROW_VECTOR: i64 = 4;

/// The innermost loops of a reduction kernel on whole vectors: a reduction
/// along contiguous elements (a softmax's row maximum and sum, a layer
/// norm's mean) accumulates per lane ([`Schedule::rfactor_lanes`]); a loop
/// that stores contiguous elements (the softmax's normalized row) is
/// vectorized. Loops already vectorized or unrolled stay as they are.
fn vectorize_rows(f: PrimFunc, unit: VectorUnit) -> PrimFunc {
    let lanes = unit.f32_lanes;
    let mut reductions = Vec::new();
    let mut stores = Vec::new();
    f.body.visit(&mut |st| {
        let Stmt::For(l) = st else { return };
        let Stmt::Store { indices, value, .. } = &l.body else { return };
        let n = l.extent.as_int().unwrap_or(0);
        if l.kind != ForKind::Serial || n < MIN_ROW_VECTOR {
            return;
        }
        if indices.iter().all(|i| !i.uses_var(&l.var)) {
            if reads_contiguously(value, &l.var) {
                reductions.push((l.var.clone(), n));
            }
        } else if contiguous(indices, &l.var) && reads_contiguously(value, &l.var) {
            stores.push((l.var.clone(), n));
        }
    });
    let mut s = Schedule::new(f);
    for (k, n) in reductions {
        // Not every update is a sum, maximum or minimum: those stay serial.
        let _ = s.rfactor_lanes(&k, lanes.min(n as usize));
    }
    for (v, n) in stores {
        // (YOLOv8's softmax over 16 × 4 × 2100 had run on scalars, an `exp` call each.)
        vectorize_in_vectors(&mut s, &v, n, (lanes as i64).min(n));
    }
    s.into_func()
}

/// Vectorize loop `v` of extent `n` in vectors of `lanes`: whole vectors
/// where they divide it, else whole vectors and then the rest one element
/// at a time.
pub(super) fn vectorize_in_vectors(s: &mut Schedule, v: &Var, n: i64, lanes: i64) {
    if n % lanes == 0 {
        vectorize_by(s, v, n, lanes);
    } else if let Ok((_, inner, _)) = s.split_with_tail(v, lanes as usize) {
        let done = s.vectorize(&inner);
        debug_assert!(done.is_ok(), "{done:?}");
    }
}

/// Vectorize loop `v` of extent `n` in vectors of `width` (which divides it):
/// the whole loop, or its inner part after a split.
fn vectorize_by(s: &mut Schedule, v: &Var, n: i64, width: i64) {
    let done =
        if width == n { s.vectorize(v) } else { s.split(v, width as usize).and_then(|(_, inner)| s.vectorize(&inner)) };
    debug_assert!(done.is_ok(), "{done:?}");
}

/// Whether `indices` step by one element along `v`: only the last one uses
/// it, as `v` plus a term without it.
pub(super) fn contiguous(indices: &[crate::tir::Expr], v: &Var) -> bool {
    steps_by(indices, v, 1)
}

/// Whether `indices` step by `stride` elements along `v`: only the last one
/// uses it, as `stride · v` plus a term without it.
pub(super) fn steps_by(indices: &[crate::tir::Expr], v: &Var, stride: i64) -> bool {
    use crate::tir::Expr;
    let Some((last, rest)) = indices.split_last() else { return false };
    let offset =
        kiln_ir::arith::simplify(&(last.clone() - Expr::var(v) * Expr::int(stride)), &kiln_ir::arith::Bounds::new());
    rest.iter().all(|i| !i.uses_var(v)) && !offset.uses_var(v)
}

/// Whether every load of `e` that varies along `v` reads contiguous elements.
pub(super) fn reads_contiguously(e: &crate::tir::Expr, v: &Var) -> bool {
    let mut loads = Vec::new();
    collect_loads(e, &mut loads);
    loads.iter().all(|(_, idx)| idx.iter().all(|i| !i.uses_var(v)) || contiguous(idx, v))
}

/// Whether the (first) reduction's innermost loop reads contiguous
/// elements, at least a vector of them.
fn reduces_a_row(f: &PrimFunc, lanes: i64) -> bool {
    let Some((k, n)) = reduction_loops(f).pop() else { return false };
    if n < lanes {
        return false;
    }
    let mut row = false;
    f.body.visit(&mut |st| {
        if let Stmt::For(l) = st {
            if l.var == k {
                if let Stmt::Store { value, .. } = &l.body {
                    let mut loads = Vec::new();
                    collect_loads(value, &mut loads);
                    row = loads.iter().any(|(_, idx)| idx.iter().any(|i| i.uses_var(&k)))
                        && reads_contiguously(value, &k);
                }
            }
        }
    });
    row
}

/// The largest padded plane per channel a max pooling computes before its
/// rows (see `schedule_reduction`; LowerTE materializes no larger one).
pub(crate) const POOL_PLANE_BYTES: usize = 16 * 1024;

/// The largest pooling window unrolled (a 3 × 3 or 4 × 4 window).
const MAX_UNROLLED_WINDOW: i64 = 16;

/// Whether any statement of `f` stores a value that calls an intrinsic (a
/// SiLU's sigmoid in a convolution's or a Winograd write-back's epilogue),
/// before a strategy chooses its tile.
pub(crate) fn calls_in_epilogue(f: &PrimFunc) -> bool {
    contains(&f.body, |st| matches!(st, Stmt::Store { value, .. } if value.calls_a_function()))
}

/// Split every innermost loop that stores one element per iteration by the
/// vector width and vectorize the inner part (where the width divides it).
fn vectorize_inner(f: PrimFunc, unit: VectorUnit) -> PrimFunc {
    // An upsampling's rows read their input through `o / k` (a contiguous
    // load and a shuffle, `codegen::llvm`'s constant lane offsets): worth
    // vectors and a tail where whole vectors do not divide them (YOLOv8n's
    // 20- and 40-wide rows).
    let upsampling = f.attrs.get("anchor").is_some_and(|a| a == "nn.upsampling");
    let mut s = Schedule::new(unswitch::fuse_plane_runs_of(unswitch::unswitch_selects(f)));
    let mut candidates = Vec::new();
    s.func().body.visit(&mut |st| {
        if let Stmt::For(l) = st {
            if let (ForKind::Serial, Stmt::Store { value, .. }) = (l.kind, &l.body) {
                let worth_a_tail = upsampling || value.calls_a_function() || !unswitch::selects(value);
                candidates.push((l.var.clone(), l.extent.as_int().unwrap_or(0), worth_a_tail));
            }
        }
    });
    let lanes = unit.f32_lanes as i64;
    for (v, n, worth_a_tail) in candidates {
        // Two registers' worth where it divides (LLVM interleaves them), one otherwise.
        if let Some(w) = [2 * lanes, lanes].into_iter().find(|&w| n % w == 0 && n >= w) {
            vectorize_by(&mut s, &v, n, w);
        } else if worth_a_tail && n >= lanes {
            // A row of a function's values (a SiLU's sigmoid) or of an
            // upsampling, which whole vectors do not divide: vectors of half
            // the width where they divide it, else whole ones, and a serial
            // tail — not a scalar row of polynomial exponentials (YOLOv8n's
            // Winograd outputs on 40 × 40 and 20 × 20 maps 2-3× faster).
            // So is a row without a select (a copy, an element-wise
            // function; a concatenation's rows once `unswitch` has hoisted
            // its selects). Other cheap rows stay scalar: a vector of a
            // concatenation loads every input for every lane.
            let w = if n % (lanes / 2) == 0 && lanes >= 8 { lanes / 2 } else { lanes };
            if n % w == 0 {
                vectorize_by(&mut s, &v, n, w);
            } else if let Ok((_, inner, _)) = s.split_with_tail(&v, w as usize) {
                s.vectorize(&inner).ok();
            }
        }
    }
    s.into_func()
}

/// The default CPU schedule of a lowered kernel (before flattening).
pub fn default_cpu_schedule(f: PrimFunc, opt_level: u32, unit: VectorUnit) -> PrimFunc {
    tuned_cpu_schedule(f, opt_level, unit, &Knobs::default())
}

/// The kernel attribute holding its operator's floating-point operations,
/// counted ([`kiln_ir::tir::float_ops`]) on its loops as lowered, before a
/// schedule computes lanes past a row's end (a 7-wide depthwise row as 16
/// lanes) or tiles that overlap: the work the model asks for, which
/// `kiln bench --profile` divides by time (a Winograd convolution's is its
/// transforms' and products', fewer than the direct convolution's).
pub const LOWERED_FLOPS_ATTR: &str = "flops.lowered";

/// [`default_cpu_schedule`] at the point `knobs` of the kernel's space; the
/// rule's schedule, with the reason in the `tuning` attribute, where the
/// knobs do not fit the kernel. The result carries [`LOWERED_FLOPS_ATTR`].
pub fn tuned_cpu_schedule(f: PrimFunc, opt_level: u32, unit: VectorUnit, knobs: &Knobs) -> PrimFunc {
    let lowered_flops = kiln_ir::tir::float_ops(&f);
    let mut g = schedule_cpu(f, opt_level, unit, knobs);
    if let Some(n) = lowered_flops {
        g.attrs.insert(LOWERED_FLOPS_ATTR.into(), n.to_string());
    }
    g
}

fn schedule_cpu(f: PrimFunc, opt_level: u32, unit: VectorUnit, knobs: &Knobs) -> PrimFunc {
    if *knobs != Knobs::default() && opt_level > 0 {
        match schedule_with_knobs(f.clone(), unit, knobs) {
            Ok(mut g) => {
                let anchor = g.attrs.get("anchor").cloned().unwrap_or_else(|| "default".into());
                g.attrs.insert("schedule".into(), anchor);
                g.attrs.insert("tuning".into(), knobs.to_string());
                return g;
            }
            Err(e) => {
                let mut g = default_cpu_schedule(f, opt_level, unit);
                g.attrs.insert("tuning".into(), format!("record not applied ({}: {})", knobs, e.message));
                return g;
            }
        }
    }
    let anchor = f.attrs.get("anchor").cloned().unwrap_or_default();
    let scheduled = if opt_level == 0 {
        Err(ScheduleError { kernel: f.name.clone(), message: "opt level 0".into() })
    } else {
        match strategy(f.clone(), unit, knobs) {
            None => Ok(vectorize_inner(f.clone(), unit)),
            // The general reduction schedule where a strategy does not apply.
            Some(Err(_)) if is_tiled(&anchor, &f) => schedule_reduction(f.clone(), unit),
            Some(scheduled) => scheduled,
        }
    };
    // The kernel says which strategy shaped it, or why none did (printed with the TIR).
    let out = match scheduled {
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
    inline_unplaced(out)
}

/// Whether `anchor` has a tiled strategy (convolutions, matrix products).
fn is_tiled(anchor: &str, f: &PrimFunc) -> bool {
    anchor == "nn.conv2d" || (MATMULS.contains(&anchor) && !f.attrs.contains_key("transpose_b"))
}

const MATMULS: [&str; 4] = ["nn.matmul", "nn.batch_matmul", "nn.contrib_batch_matmul_pack", "nn.contrib_dense_pack"];

/// The strategy of `f`'s anchor at `knobs`, without falling back; None for
/// a kernel with neither a reduction nor a strategy of its own (which
/// `vectorize_inner` vectorizes).
fn strategy(f: PrimFunc, unit: VectorUnit, knobs: &Knobs) -> Option<Result<PrimFunc, ScheduleError>> {
    let anchor = f.attrs.get("anchor").cloned().unwrap_or_default();
    let untiled = knobs.rows.is_some() || knobs.cols.is_some() || knobs.order.is_some();
    Some(match anchor.as_str() {
        "nn.conv2d" => conv2d::schedule_conv2d(f, unit, knobs).map(|g| vectorize_local_copies(g, unit)),
        "nn.contrib_conv2d_u8s8" | "nn.contrib_conv2d_bf16" if !untiled && amx::tiles_allowed(&f) => {
            amx::schedule_amx(f).map(|g| vectorize_local_copies(g, unit))
        }
        "nn.contrib_dense_bf16" if !untiled && amx::tiles_allowed(&f) => {
            amx::schedule_amx_dense(f).map(|g| vectorize_local_copies(g, unit))
        }
        // (An OHWI convolution without AMX: the generic reduction below.)
        "nn.contrib_conv2d_u8s8" if !untiled && !amx::is_amx_convolution(&f) => {
            int8::schedule_conv2d_u8s8(f, unit).map(|g| vectorize_local_copies(g, unit))
        }
        // A weight read along its rows (dense, transpose_b) is not contiguous
        // in the output columns: LLVM's vectorizer does better on the plain reduction.
        a if is_tiled(a, &f) => schedule_matmul(f, unit, knobs).map(|g| vectorize_local_copies(g, unit)),
        _ if untiled => {
            Err(ScheduleError { kernel: f.name.clone(), message: "this kernel has no register tile to tune".into() })
        }
        "nn.contrib_winograd_input_transform" | "nn.contrib_winograd_output_transform" => {
            winograd::schedule_transform(f, unit)
        }
        "nn.contrib_winograd_tiles_to_nchw" => {
            return winograd::whole_tile_rows(&f, unit).map(|m| winograd::schedule_tiles_to_nchw(f, m))
        }
        _ if reduction_nest(&f).is_some() => {
            schedule_reduction(f, unit).map(|g| softmax_rows::pair_rows(vectorize_rows(g, unit)))
        }
        _ => return None,
    })
}

/// `f` scheduled at `knobs` exactly: an error where a knob does not fit.
pub(crate) fn schedule_with_knobs(f: PrimFunc, unit: VectorUnit, knobs: &Knobs) -> Result<PrimFunc, ScheduleError> {
    let g = match strategy(f.clone(), unit, knobs) {
        None => vectorize_inner(f, unit),
        Some(scheduled) => scheduled?,
    };
    let g = inline_unplaced(g);
    Ok(if knobs.serial { knobs::make_serial(g) } else { g })
}

/// A materialized stage nobody placed is inlined back (no full-size local
/// buffer), unless the strategy chose to keep it (a small padded image).
fn inline_unplaced(mut out: PrimFunc) -> PrimFunc {
    let keep = out.attrs.contains_key("keep_materialized");
    for pad in materialized(&out).into_iter().filter(|_| !keep) {
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
