//! Schedules of the Winograd transforms (`nn.contrib_winograd_input_transform`,
//! `nn.contrib_winograd_output_transform`; the product between them is a
//! `nn.batch_matmul` and takes the matmul schedule).
//!
//! Both computes select their transform row by the element's position in its
//! tile; the schedule unrolls the positions inside a vector of tiles, so
//! that each vector of tiles is read once and every unrolled copy folds to
//! its own linear combination (see `topi::winograd`). The output's
//! `nn.contrib_winograd_tiles_to_nchw` (with the epilogue) is injective and
//! takes the default schedule.

use super::{extent, fill_loops, fuse_parallel, loop_chain, materialized, Schedule, ScheduleError};
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
