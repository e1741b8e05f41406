//! Schedules of the Winograd transforms (`nn.contrib_winograd_input_transform`,
//! `nn.contrib_winograd_output_transform`; the product between them is a
//! `nn.batch_matmul` and takes the matmul schedule).
//!
//! Both computes select their transform row by the element's position in its
//! tile; the schedule unrolls the positions inside a vector of tiles, so
//! that each vector of tiles is read once and every unrolled copy folds to
//! its own linear combination (see `topi::winograd`). The output's
//! `nn.contrib_winograd_tiles_to_nchw` (with the epilogue) writes each row
//! as one vector per column of the tiles, interleaved (see
//! [`schedule_tiles_to_nchw`]), where the row is whole tiles.

use super::{calls_in_epilogue, extent, fill_loops, fuse_parallel, loop_chain, materialized, Schedule, ScheduleError};
use crate::target::VectorUnit;
use crate::tir::{PrimFunc, Stmt};

/// The nest that writes the kernel's output: after the allocations, the
/// last statement (a materialized padded image comes first).
fn last_nest(mut s: &Stmt) -> &Stmt {
    loop {
        s = match s {
            Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => body,
            Stmt::Seq(v) if !v.is_empty() => &v[v.len() - 1],
            _ => return s,
        };
    }
}

/// A transform `[positions, channels, tiles]`: per channel (in parallel) and
/// vector of tiles, the positions unrolled, each a vector over the tiles
/// (contiguous in every tensor between the transforms; the tile count is a
/// whole number of vectors, AlterOpLayout pads it).
pub(super) fn schedule_transform(f: PrimFunc, unit: VectorUnit) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    let [q, c, p] = &loop_chain(last_nest(&s.func().body))[..] else {
        return Err(ScheduleError {
            kernel: s.func().name.clone(),
            message: "not a [positions, C, tiles] nest".into(),
        });
    };
    let lanes = unit.f32_lanes;
    let tiles = extent(&s, p).unwrap_or(0);
    let vector = if tiles % lanes as i64 == 0 {
        let (p_o, p_i) = s.split(p, lanes)?;
        s.reorder(&[c.clone(), p_o.clone(), q.clone(), p_i.clone()])?;
        s.vectorize(&p_i)?;
        p_o
    } else {
        s.reorder(&[c.clone(), p.clone(), q.clone()])?;
        p.clone()
    };
    s.unroll(q)?;
    let (pads, stages): (Vec<_>, Vec<_>) = materialized(s.func()).into_iter().partition(|b| b.name() == "pad");
    // The input transform's tile and right factor, per vector of tiles, laid
    // out like the output (positions unrolled, tiles on the lanes). The last
    // stage first: its fill reads the one before, whose region is then
    // inferred over that fill.
    for stage in stages.iter().rev() {
        let local = s.compute_at(stage, &vector)?;
        if let [position, _, tile] = &fill_loops(s.func(), &local)[..] {
            s.unroll(position)?;
            if extent(&s, tile) == Some(lanes as i64) {
                s.vectorize(tile)?;
            }
        }
    }
    // The input transform's padded image, one channel at a time.
    for pad in pads {
        s.compute_at(&pad, c)?;
    }
    fuse_parallel(&mut s, std::slice::from_ref(c))?;
    Ok(s.into_func())
}

/// The tile size `m` of a `nn.contrib_winograd_tiles_to_nchw` kernel (its
/// input is `[m·m, C, tiles]`) whose output rows hold at least two whole
/// tiles (a 14-wide row of 4-wide tiles: three, and two columns of a cut
/// one, on 16 lanes only); None otherwise. Where the epilogue calls a function (a
/// SiLU's sigmoid), also only if a row's tiles fill whole vectors of `unit`
/// or fit in one: 10 tiles on 8 lanes (8 + 2) computed the exponential on
/// twice the vectors of the default's rows of 40 (YOLOv8n's 40 × 40 kernels
/// 1.29–1.71× slower as AVX2 code on Zen 5; 0.72–0.90× on AVX-512, whose
/// 16 lanes hold the 10).
pub(super) fn whole_tile_rows(f: &PrimFunc, unit: VectorUnit) -> Option<i64> {
    // The tiles: the one `[m·m, C, tiles]` parameter (an epilogue's
    // operands are NCHW or per channel).
    let m = f.params.iter().find_map(|p| match p.shape() {
        &[positions, _, _] => (2..=8).find(|k| k * k == positions as i64),
        _ => None,
    })?;
    // The innermost loop of the output's nest: its columns.
    let mut nest = last_nest(&f.body);
    let mut width = None;
    while let Stmt::For(l) = nest {
        width = l.extent.as_int();
        nest = &l.body;
    }
    let width = width?;
    let (tiles, lanes) = (width / m, unit.f32_lanes as i64);
    let whole_vectors = tiles <= lanes || tiles % lanes == 0;
    // A cut last tile only on 16 lanes: there ResNet-18's 14 × 14 kernels
    // (three whole tiles a row) took 0.35–0.53× the time, as AVX2 code
    // 1.13–1.39× (3-lane vectors in pieces, no masked access).
    let cut = width % m != 0;
    (tiles >= 2 && (whole_vectors || !calls_in_epilogue(f)) && (!cut || lanes >= 16)).then_some(m)
}

/// `nn.contrib_winograd_tiles_to_nchw` (and its epilogue): the whole tiles
/// of a row's columns `w = t·m + j` split off (the columns of a cut last
/// tile follow one by one), and for each column `j` of
/// the tiles (unrolled) one vector over the row's tiles `t` — contiguous in
/// the tile buffer (`[m·m, C, tiles]`, tiles row-major) — whose `m` stores
/// into the row the LLVM backend interleaves into one run
/// (`codegen::llvm::interleave`). By default each output was a load from a
/// computed position (`% m`, `/ m` of its row and column): ResNet-18's were
/// scalar loops (a 56-wide row is not whole 16-lane vectors), YOLOv8n's
/// SiLU ones 8-lane vectors of gathered loads.
/// `m` is the tile size [`whole_tile_rows`] found.
pub(super) fn schedule_tiles_to_nchw(f: PrimFunc, m: i64) -> Result<PrimFunc, ScheduleError> {
    let mut s = Schedule::new(f);
    let chain = loop_chain(last_nest(&s.func().body));
    let [.., c, _, w] = &chain[..] else {
        return Err(ScheduleError { kernel: s.func().name.clone(), message: "not an NCHW nest".into() });
    };
    let (c, w) = (c.clone(), w.clone());
    let (t, j, _) = s.split_with_tail(&w, m as usize)?;
    s.reorder(&[j.clone(), t.clone()])?;
    s.unroll(&j)?;
    s.vectorize(&t)?;
    fuse_parallel(&mut s, std::slice::from_ref(&c))?;
    Ok(s.into_func())
}
