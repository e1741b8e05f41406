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

use super::primitives::{Schedule, ScheduleError};

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

/// Fuse the perfect chain starting at `s`'s loop into one loop; returns it.
fn fuse_chain(sch: &mut Schedule, vars: &[Var]) -> Result<Option<Var>, ScheduleError> {
    let Some(mut fused) = vars.first().cloned() else { return Ok(None) };
    for v in &vars[1..] {
        fused = sch.fuse(&fused, v)?;
    }
    Ok(Some(fused))
}

fn barrier() -> Stmt {
    Stmt::Evaluate(Expr::call(Intrinsic::Barrier, vec![], TirType::scalar(crate::DataType::I32)))
}

/// The default GPU schedule of a lowered kernel (before flattening).
pub fn default_gpu_schedule(f: PrimFunc) -> Result<PrimFunc, ScheduleError> {
    let mut sch = Schedule::new(f);
    // Materialized stages (a convolution's padded input) are inlined: one thread per output.
    let mut pads = Vec::new();
    sch.func().body.visit(&mut |s| {
        if let Stmt::Allocate { buffer, .. } = s {
            if buffer.name() == "pad" {
                pads.push(buffer.clone());
            }
        }
    });
    for p in pads {
        sch.compute_inline(&p)?;
    }
    // Kernel-local buffers around the stages.
    let mut f = sch.into_func();
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
    f.body = Stmt::seq(stages.clone());
    let mut sch = Schedule::new(f);
    if stages.len() == 1 && locals.is_empty() {
        let vars = chain(&stages[0]);
        if let Some(fused) = fuse_chain(&mut sch, &vars)? {
            let (bx, tx) = sch.split(&fused, THREADS)?;
            sch.bind(&bx, ThreadAxis::BlockX)?;
            sch.bind(&tx, ThreadAxis::ThreadX)?;
        } else {
            // A single scalar statement: one thread.
            let t = Var::index("t");
            let one = Stmt::for_loop(t, 1, ForKind::ThreadBinding(ThreadAxis::ThreadX), sch.func().body.clone());
            let mut g = sch.into_func();
            g.body = one;
            sch = Schedule::new(g);
        }
    } else {
        // One block; stages separated by barriers; intermediates shared.
        let mut shared_bytes = 0;
        let mut g = sch.into_func();
        let mut body = std::mem::replace(&mut g.body, Stmt::nop());
        let mut shared = Vec::new();
        for b in &locals {
            shared_bytes += b.numel() * b.elem().size_bytes();
            let s = Buffer::new(b.name(), b.elem(), b.shape().to_vec(), Scope::Shared);
            body = retarget(body, b, &s);
            shared.push(s);
        }
        if shared_bytes > MAX_SHARED_BYTES {
            return Err(err(
                &g,
                format!("{shared_bytes} bytes of intermediates exceed the {MAX_SHARED_BYTES} bytes of shared memory"),
            ));
        }
        let stages: Vec<Stmt> = match body {
            Stmt::Seq(v) => v,
            s => vec![s],
        };
        let mut scheduled = Vec::new();
        for (k, stage) in stages.into_iter().enumerate() {
            let mut one = g.clone();
            one.body = stage;
            let mut s = Schedule::new(one);
            let vars = chain(&s.func().body);
            match fuse_chain(&mut s, &vars)? {
                Some(fused) => {
                    let (o, t) = s.split(&fused, BLOCK_THREADS)?;
                    s.reorder(&[t.clone(), o])?;
                    s.bind(&t, ThreadAxis::ThreadX)?;
                }
                None => {
                    let t = Var::index("t");
                    let mut h = s.into_func();
                    h.body = Stmt::for_loop(t, 1, ForKind::ThreadBinding(ThreadAxis::ThreadX), h.body);
                    s = Schedule::new(h);
                }
            }
            if k > 0 {
                scheduled.push(barrier());
            }
            scheduled.push(s.into_func().body);
        }
        let mut body = Stmt::Seq(scheduled);
        for b in shared.into_iter().rev() {
            body = Stmt::Allocate { buffer: b, body: Box::new(body) };
        }
        g.body = body;
        sch = Schedule::new(g);
    }
    let mut out = sch.into_func();
    let (mut grid, mut block) = (1i64, 1i64);
    out.body.visit(&mut |s| {
        if let Stmt::For(l) = s {
            match l.kind {
                ForKind::ThreadBinding(ThreadAxis::BlockX) => grid = grid.max(l.extent.as_int().unwrap_or(1)),
                ForKind::ThreadBinding(ThreadAxis::ThreadX) => block = block.max(l.extent.as_int().unwrap_or(1)),
                _ => {}
            }
        }
    });
    out.attrs.insert("gpu.grid".into(), grid.to_string());
    out.attrs.insert("gpu.block".into(), block.to_string());
    out.attrs.insert("schedule".into(), "gpu".into());
    Ok(out)
}

fn retarget(s: Stmt, from: &Buffer, to: &Buffer) -> Stmt {
    fn expr(e: &Expr, from: &Buffer, to: &Buffer) -> Expr {
        match e {
            Expr::Load(b, idx) if b == from => Expr::Load(to.clone(), idx.iter().map(|i| expr(i, from, to)).collect()),
            _ => e.map_children(|c| expr(c, from, to)),
        }
    }
    let s = s.map_exprs(&mut |e| expr(&e, from, to));
    s.map_post(&mut |s| match s {
        Stmt::Store { buffer, indices, value } if buffer == *from => Stmt::Store { buffer: to.clone(), indices, value },
        s => s,
    })
}
