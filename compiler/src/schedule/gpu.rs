//! The default GPU schedule (`tir.GpuSchedule`): every lowered kernel becomes
//! one CUDA launch whose loops are bound to `blockIdx.x`/`threadIdx.x`.
//!
//! - A kernel of one loop nest (an elementwise chain, a reduction with its
//!   epilogue, stages that FuseSiblingLoops merged under shared loops): the
//!   nest's perfectly nested outer loops are fused into one, split by
//!   [`THREADS`], and bound to blocks × threads — one thread per output
//!   element (or per row, for merged stages), its reduction serial.
//! - A kernel of several stages that depend on each other across elements:
//!   one block; each stage's outer loops fused and strided over the block's
//!   threads, a barrier between stages, the intermediates in shared memory.
//!
//! The launch shape is recorded in the kernel's attributes `gpu.grid` and
//! `gpu.block` (x only), which the artifacts carry to the runtime.

use crate::tir::{Buffer, Expr, ForKind, Intrinsic, PrimFunc, Scope, Stmt, ThreadAxis, TirType, Var};

use super::primitives::{retarget_buffer, Schedule, ScheduleError};
use super::{fuse_all, materialized};

/// Threads per block of a one-nest kernel.
pub const THREADS: usize = 256;
/// Threads of the single block of a multi-stage kernel.
pub const BLOCK_THREADS: usize = 1024;
/// Static shared memory per block.
pub const MAX_SHARED_BYTES: usize = 48 * 1024;

fn err(f: &PrimFunc, m: impl Into<String>) -> ScheduleError {
    ScheduleError { kernel: f.name.clone(), message: m.into() }
}

/// The perfectly nested loops from `s` down.
fn chain(s: &Stmt) -> Vec<Var> {
    let mut out = Vec::new();
    let mut cur = s;
    while let Stmt::For(l) = cur {
        out.push(l.var.clone());
        cur = &l.body;
    }
    out
}

fn barrier() -> Stmt {
    Stmt::Evaluate(Expr::call(Intrinsic::Barrier, vec![], TirType::scalar(crate::DataType::I32)))
}

/// One stage of kernel `f` with its outer loops fused, split by `threads`,
/// and bound: across blocks × threads, or (`one_block`) strided over the
/// threads of a single block. A stage without loops runs on one thread.
fn bind_stage(f: &PrimFunc, stage: Stmt, threads: usize, one_block: bool) -> Result<Stmt, ScheduleError> {
    let vars = chain(&stage);
    let mut s = Schedule::new(PrimFunc {
        name: f.name.clone(),
        params: f.params.clone(),
        num_outputs: f.num_outputs,
        body: stage,
        attrs: Default::default(),
    });
    let Some(fused) = fuse_all(&mut s, &vars)? else {
        let body = s.into_func().body;
        return Ok(Stmt::for_loop(Var::index("t"), 1, ForKind::ThreadBinding(ThreadAxis::ThreadX), body));
    };
    let (o, t) = s.split(&fused, threads)?;
    if one_block {
        s.reorder(&[t.clone(), o])?;
    } else {
        s.bind(&o, ThreadAxis::BlockX)?;
    }
    s.bind(&t, ThreadAxis::ThreadX)?;
    Ok(s.into_func().body)
}

/// The default GPU schedule of a lowered kernel (before flattening).
pub fn default_gpu_schedule(f: PrimFunc) -> Result<PrimFunc, ScheduleError> {
    // Materialized stages (a convolution's padded input) are inlined: one thread per output.
    let mut sch = Schedule::new(f);
    for p in materialized(sch.func()) {
        sch.compute_inline(&p)?;
    }
    let mut f = sch.into_func();
    // Kernel-local buffers around the stages.
    let mut locals: Vec<Buffer> = Vec::new();
    let mut body = std::mem::replace(&mut f.body, Stmt::nop());
    while let Stmt::Allocate { buffer, body: inner } = body {
        locals.push(buffer);
        body = *inner;
    }
    let stages: Vec<Stmt> = match body {
        Stmt::Seq(v) => v,
        s => vec![s],
    };
    f.body = if stages.len() == 1 && locals.is_empty() {
        let stage = stages.into_iter().next().expect("one stage");
        bind_stage(&f, stage, THREADS, false)?
    } else {
        // One block; stages separated by barriers; intermediates in shared memory.
        let shared_bytes: usize = locals.iter().map(|b| b.numel() * b.elem().size_bytes()).sum();
        if shared_bytes > MAX_SHARED_BYTES {
            return Err(err(
                &f,
                format!("{shared_bytes} bytes of intermediates exceed the {MAX_SHARED_BYTES} bytes of shared memory"),
            ));
        }
        let shared: Vec<(Buffer, Buffer)> = locals
            .into_iter()
            .map(|b| {
                let s = Buffer::new(b.name(), b.elem(), b.shape().to_vec(), Scope::Shared);
                (b, s)
            })
            .collect();
        let mut scheduled = Vec::new();
        for (k, stage) in stages.into_iter().enumerate() {
            let stage = shared.iter().fold(stage, |st, (b, s)| retarget_buffer(st, b, s, &|idx| idx.to_vec()));
            if k > 0 {
                scheduled.push(barrier());
            }
            scheduled.push(bind_stage(&f, stage, BLOCK_THREADS, true)?);
        }
        shared
            .into_iter()
            .rev()
            .fold(Stmt::Seq(scheduled), |body, (_, buffer)| Stmt::Allocate { buffer, body: Box::new(body) })
    };
    let (mut grid, mut block) = (1i64, 1i64);
    f.body.visit(&mut |s| {
        if let Stmt::For(l) = s {
            match l.kind {
                ForKind::ThreadBinding(ThreadAxis::BlockX) => grid = grid.max(l.extent.as_int().unwrap_or(1)),
                ForKind::ThreadBinding(ThreadAxis::ThreadX) => block = block.max(l.extent.as_int().unwrap_or(1)),
                _ => {}
            }
        }
    });
    f.attrs.insert("gpu.grid".into(), grid.to_string());
    f.attrs.insert("gpu.block".into(), block.to_string());
    f.attrs.insert("schedule".into(), "gpu".into());
    Ok(f)
}
