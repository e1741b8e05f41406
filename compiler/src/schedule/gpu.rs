//! The default GPU schedule (`tir.GpuSchedule`): every lowered kernel becomes
//! one CUDA launch whose loops are bound to `blockIdx.x`/`threadIdx.x`.
//!
//! - Matrix products and convolutions (anchor `nn.dense`, `nn.matmul`,
//!   `nn.batch_matmul`, `nn.conv2d`; opt level ≥ 1): tiled. Each block
//!   computes a tile of output rows (columns of a matrix product, output
//!   channels of a convolution) × output columns (columns, or output pixels);
//!   each of its threads a register tile of up to 4 × 4, strided over the
//!   columns so that neighbouring threads touch neighbouring addresses. The
//!   reduction runs in chunks; every operand whose chunk is small enough is
//!   copied into shared memory by all threads of the block, with barriers
//!   around the chunk's compute.
//! - Any other kernel of one loop nest (an elementwise chain, a reduction with
//!   its epilogue, stages that FuseSiblingLoops merged under shared loops): the
//!   nest's perfectly nested outer loops are fused into one, split by
//!   [`THREADS`], and bound to blocks × threads — one thread per output
//!   element (or per row, for merged stages), its reduction serial.
//! - A kernel of several stages that depend on each other across elements:
//!   one block; each stage's outer loops fused and strided over the block's
//!   threads, a barrier between stages, the intermediates in shared memory.
//!
//! The kernels keep serial semantics: a thread loop runs its iterations one
//! after another, barriers sit only between thread loops, and a thread's
//! registers that live across barriers are kernel-local buffers with a
//! leading thread dimension (see `Schedule::distribute_thread_loop`). So the
//! CPU backends run a GPU-scheduled kernel as it stands (how tests check the
//! schedules without a GPU); on the GPU, `tir.LowerThreadLocal` drops the
//! thread dimension and each thread loop becomes its thread's index.
//! [`verify_barriers`] checks that no thread touches shared memory another
//! may be using without a barrier in between.
//!
//! The launch shape is recorded in the kernel's attributes `gpu.grid` and
//! `gpu.block` (x only), which the artifacts carry to the runtime.

use crate::tir::{Buffer, Expr, For, ForKind, Intrinsic, PrimFunc, Scope, Stmt, ThreadAxis, TirType, Var};

use super::primitives::{retarget_buffer, Schedule, ScheduleError};
use super::{collect_loads, contains, extent, fuse_all, loop_chain, materialized, reduction_nest};

/// Threads per block of a one-nest kernel.
pub const THREADS: usize = 256;
/// Threads of the single block of a multi-stage kernel.
pub const BLOCK_THREADS: usize = 1024;
/// Static shared memory per block.
pub const MAX_SHARED_BYTES: usize = 48 * 1024;
/// Threads per block of a tiled product, at most.
pub const TILE_THREADS: i64 = 256;
/// A thread's register tile: this many rows × columns, at most.
pub const REGISTER_TILE: i64 = 4;
/// Reduction elements (products) per chunk staged in shared memory. Each
/// chunk costs a global-load round trip and two barriers; on an H200,
/// ResNet-18 took 4.24–4.31 ms with 16, 3.70 ms with 32 and 4.33 ms with 64
/// (interleaved runs, CUDA graph; the 14 × 14 stage's 3 × 3 convolutions
/// halved, the 7 × 7 stage unchanged: too few outputs to hide the latency).
pub const REDUCTION_CHUNK: i64 = 32;
/// The largest shared copy of one operand's chunk.
pub const MAX_STAGED_BYTES: usize = 16 * 1024;

fn err(f: &PrimFunc, m: impl Into<String>) -> ScheduleError {
    ScheduleError { kernel: f.name.clone(), message: m.into() }
}

fn barrier() -> Stmt {
    Stmt::Evaluate(Expr::call(Intrinsic::Barrier, vec![], TirType::scalar(crate::DataType::I32)))
}

/// One stage of kernel `f` with its outer loops fused, split by `threads`,
/// and bound: across blocks × threads, or (`one_block`) strided over the
/// threads of a single block. A stage without loops runs on one thread.
fn bind_stage(f: &PrimFunc, stage: Stmt, threads: usize, one_block: bool) -> Result<Stmt, ScheduleError> {
    let vars = data_parallel_prefix(&stage);
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

/// The leading loops of `stage` that may run on different threads: those
/// whose variable indexes every store to memory that outlives an iteration
/// (global or shared). A reduction's own loops do not (a whole tensor's
/// maximum is `out[0] = max(out[0], x[r])`): bound to threads, every thread
/// would race on `out[0]` — the last writer's element won on an H200 — so
/// they stay serial inside the thread that owns the output.
fn data_parallel_prefix(stage: &Stmt) -> Vec<Var> {
    let stores = outliving_store_indices(stage);
    loop_chain(stage).into_iter().take_while(|v| stores.iter().all(|idx| idx.iter().any(|e| e.uses_var(v)))).collect()
}

/// The indices of every store in `s` to a buffer not allocated inside `s`
/// (kernel-local buffers allocated inside are private to an iteration).
fn outliving_store_indices(s: &Stmt) -> Vec<Vec<Expr>> {
    let mut inner = Vec::new();
    s.visit(&mut |st| {
        if let Stmt::Allocate { buffer, .. } = st {
            inner.push(buffer.clone());
        }
    });
    let mut stores = Vec::new();
    s.visit(&mut |st| {
        if let Stmt::Store { buffer, indices, .. } = st {
            if !inner.contains(buffer) {
                stores.push(indices.clone());
            }
        }
    });
    stores
}

/// No two threads (or blocks) write one element: every store inside a
/// bound loop of more than one iteration indexes by the loop's variable,
/// unless the buffer is kernel-local (after `tir.LowerThreadLocal`, private
/// to a thread) or, under a block loop, in shared memory (one copy per
/// block). Serial semantics hide such a race on the CPU.
fn verify_thread_writes(s: &Stmt) -> Result<(), String> {
    let mut found = Ok(());
    s.visit(&mut |st| {
        let Stmt::For(l) = st else { return };
        if found.is_err() || !matches!(l.kind, ForKind::ThreadBinding(_)) || l.extent.as_int() == Some(1) {
            return;
        }
        // Each block has its own shared memory.
        let block = matches!(l.kind, ForKind::ThreadBinding(ThreadAxis::BlockX));
        l.body.visit(&mut |inner| {
            if let Stmt::Store { buffer, indices, .. } = inner {
                let shared_by_all = match buffer.scope() {
                    Scope::Global => true,
                    Scope::Shared => !block,
                    Scope::Local => false,
                };
                if found.is_ok() && shared_by_all && !indices.iter().any(|e| e.uses_var(&l.var)) {
                    found = Err(format!(
                        "`{}` is written by every iteration of the bound loop `{}` at the same place: \
                         a race between threads",
                        buffer.name(),
                        l.var.name
                    ));
                }
            }
        });
    });
    found
}

/// The default GPU schedule of a lowered kernel (before flattening).
pub fn default_gpu_schedule(f: PrimFunc, opt_level: u32) -> Result<PrimFunc, ScheduleError> {
    // Materialized stages (a convolution's padded input) are inlined: one thread per output.
    let mut sch = Schedule::new(f);
    for p in materialized(sch.func()) {
        sch.compute_inline(&p)?;
    }
    let f = sch.into_func();
    let anchor = f.attrs.get("anchor").cloned().unwrap_or_default();
    let mut f = if opt_level >= 1 && TILED_ANCHORS.contains(&anchor.as_str()) {
        match schedule_tiled(f.clone()) {
            Ok(tiled) => return finish(tiled, format!("gpu tiled ({anchor})")),
            Err(e) => {
                let mut f = f;
                f.attrs.insert("gpu.untiled".into(), e.message);
                f
            }
        }
    } else {
        f
    };
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
    finish(f, "gpu".into())
}

/// Record the launch shape and the strategy, and check the barriers.
fn finish(mut f: PrimFunc, strategy: String) -> Result<PrimFunc, ScheduleError> {
    verify_barriers(&f)?;
    verify_thread_writes(&f.body).map_err(|m| err(&f, m))?;
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
    f.attrs.insert("schedule".into(), strategy);
    Ok(f)
}

/// The anchors of the tiled strategy.
const TILED_ANCHORS: [&str; 6] =
    ["nn.dense", "nn.matmul", "nn.contrib_dense_pack", "nn.batch_matmul", "nn.contrib_batch_matmul_pack", "nn.conv2d"];

fn pow2_at_least(n: i64) -> i64 {
    (n.max(1) as u64).next_power_of_two() as i64
}

/// Blocks a tiled kernel should launch at least, where its size allows:
/// two per streaming multiprocessor of an H100 (132).
pub const MIN_BLOCKS: i64 = 264;
/// Threads per block of a tiled product, at least.
const MIN_TILE_THREADS: i64 = 64;

/// The tile of a product with `rows` × `cols` outputs per batch: `ty` × `tx`
/// threads, each an `rm` × `rn` register tile. Big register tiles reuse
/// more of each staged operand, but a batch-1 layer may then leave most of
/// the GPU idle: the register tile, then the block, shrinks until the launch
/// has [`MIN_BLOCKS`] blocks or cannot shrink further.
fn tile_shape(rows: i64, cols: i64, batches: i64) -> (i64, i64, i64, i64) {
    let ceil = |a: i64, b: i64| (a + b - 1) / b;
    let mut rm = if rows >= 16 { REGISTER_TILE } else { 1 };
    let mut rn = if cols >= 64 { REGISTER_TILE } else { 1 };
    let mut threads = TILE_THREADS;
    loop {
        let ty = pow2_at_least(ceil(rows, rm)).min(16).min(threads);
        let tx = pow2_at_least(ceil(cols, rn)).min(threads / ty);
        let blocks = batches * ceil(rows, ty * rm) * ceil(cols, tx * rn);
        if blocks >= MIN_BLOCKS {
            return (ty, tx, rm, rn);
        }
        if rn > 1 {
            rn /= 2;
        } else if rm > 1 {
            rm /= 2;
        } else if ty * tx > MIN_TILE_THREADS {
            threads = ty * tx / 2;
        } else {
            return (ty, tx, rm, rn);
        }
    }
}

/// The tiled strategy (see the module docs).
fn schedule_tiled(f: PrimFunc) -> Result<PrimFunc, ScheduleError> {
    let anchor = f.attrs.get("anchor").cloned().unwrap_or_default();
    let mut s = Schedule::new(f);
    let spatial = reduction_nest(s.func()).ok_or_else(|| err(s.func(), "no reduction nest"))?;
    if loop_chain(&s.func().body) != spatial {
        return Err(err(s.func(), "the kernel is more than its reduction nest"));
    }
    let (outer, rows, cols) = match (anchor.as_str(), &spatial[..]) {
        ("nn.conv2d", [outer @ .., oc, oh, ow]) => {
            let pixels = s.fuse(oh, ow)?;
            (outer.to_vec(), oc.clone(), pixels)
        }
        (_, [outer @ .., i, j]) if anchor != "nn.conv2d" => (outer.to_vec(), i.clone(), j.clone()),
        _ => return Err(err(s.func(), "not a matrix product or NCHW convolution")),
    };
    let (re, ce) = (extent(&s, &rows).unwrap_or(1), extent(&s, &cols).unwrap_or(1));
    let batches: i64 = outer.iter().map(|v| extent(&s, v).unwrap_or(1)).product();
    let (ty, tx, rm, rn) = tile_shape(re, ce, batches);
    let (rows_o, rows_i) = s.split(&rows, (ty * rm) as usize)?;
    let (thread_y, ri) = s.split(&rows_i, rm as usize)?;
    let (cols_o, cols_i) = s.split(&cols, (tx * rn) as usize)?;
    // The register tile's columns tx apart: neighbouring threads, neighbouring columns.
    let (rj, thread_x) = s.split(&cols_i, tx as usize)?;
    s.reorder(&[rows_o.clone(), cols_o.clone(), thread_y.clone(), thread_x.clone(), ri, rj])?;
    let blocks: Vec<Var> = outer.iter().cloned().chain([rows_o, cols_o]).collect();
    let block = fuse_all(&mut s, &blocks)?.ok_or_else(|| err(s.func(), "no block loops"))?;
    let thread = s.fuse(&thread_y, &thread_x)?;
    s.bind(&block, ThreadAxis::BlockX)?;
    s.bind(&thread, ThreadAxis::ThreadX)?;
    let tile = s.decompose_reduction(&thread, true)?;
    for v in tile.init_loops.iter().chain(&tile.update_loops).chain(&tile.writeback_loops) {
        s.unroll(v)?;
    }
    // The reduction in chunks of about REDUCTION_CHUNK products.
    let [first, rest @ ..] = &tile.reduce_loops[..] else { return Err(err(s.func(), "no reduction loop")) };
    let per_first: i64 = rest.iter().map(|v| extent(&s, v).unwrap_or(1)).product();
    let chunk = (REDUCTION_CHUNK / per_first.max(1)).max(1);
    let (chunk_loop, chunk_inner) = s.split(first, chunk as usize)?;
    let inner: Vec<Var> = std::iter::once(chunk_inner).chain(rest.iter().cloned()).collect();
    if inner.iter().map(|v| extent(&s, v).unwrap_or(i64::MAX)).product::<i64>() <= 2 * REDUCTION_CHUNK {
        for v in &inner {
            s.unroll(v)?;
        }
    }
    s.distribute_thread_loop(&thread, &chunk_loop)?;
    stage_operands(&mut s, &chunk_loop, (ty * tx) as usize)?;
    Ok(s.into_func())
}

/// The global buffers the reduction below loop `at` reads, in order of first use.
fn global_operands(s: &Schedule, at: &Var) -> Vec<Buffer> {
    let mut loads = Vec::new();
    if let Ok(l) = s.loop_of(at) {
        l.body.visit(&mut |st| {
            if let Stmt::Store { value, .. } = st {
                collect_loads(value, &mut loads);
            }
        });
    }
    let mut out: Vec<Buffer> = Vec::new();
    for (b, _) in loads {
        if b.scope() == Scope::Global && !out.contains(&b) {
            out.push(b);
        }
    }
    out
}

/// A shared copy's shape: one padding column, so that rows read by
/// neighbouring threads fall in different banks.
fn padded(shape: &[usize]) -> Vec<usize> {
    let mut shape = shape.to_vec();
    if let Some(last) = shape.last_mut() {
        *last += usize::from(*last > 1);
    }
    shape
}

/// Copy each operand's chunk that fits into shared memory at the start of the
/// chunk loop `at` (all threads of the block copying), read the copies, and put
/// barriers after the copies and after the chunk's compute.
fn stage_operands(s: &mut Schedule, at: &Var, threads: usize) -> Result<(), ScheduleError> {
    let mut staged: Vec<Buffer> = Vec::new();
    let mut bytes = 0;
    for operand in global_operands(s, at) {
        let mut trial = s.clone();
        let Ok(local) = trial.cache_read(&operand, at) else { continue };
        let size: usize = padded(local.shape()).iter().product::<usize>() * local.elem().size_bytes();
        if size <= MAX_STAGED_BYTES && bytes + size <= MAX_SHARED_BYTES {
            *s = trial;
            bytes += size;
            staged.push(local);
        }
    }
    if staged.is_empty() {
        return Ok(());
    }
    let func = s.func().clone();
    s.rewrite_loop(at, |mut l| {
        let mut locals = Vec::new();
        let mut parts = Vec::new();
        flatten_allocations(std::mem::replace(&mut l.body, Stmt::nop()), &mut locals, &mut parts);
        let shared: Vec<(Buffer, Buffer)> = locals
            .into_iter()
            .map(|b| {
                let sh = Buffer::new(b.name(), b.elem(), padded(b.shape()), Scope::Shared);
                (b, sh)
            })
            .collect();
        let (fills, compute): (Vec<Stmt>, Vec<Stmt>) = parts.into_iter().partition(|p| writes_any(p, &staged));
        let mut body = Vec::new();
        for fill in fills {
            body.push(bind_stage(&func, fill, threads, true)?);
        }
        body.push(barrier());
        body.extend(compute);
        body.push(barrier());
        l.body = Stmt::seq(body);
        let mut out = Stmt::For(Box::new(l));
        for (local, sh) in &shared {
            out = retarget_buffer(out, local, sh, &|idx| idx.to_vec());
        }
        Ok(shared.into_iter().rev().fold(out, |body, (_, buffer)| Stmt::Allocate { buffer, body: Box::new(body) }))
    })
}

/// Strip the allocations off `s` (collecting them) and flatten its sequences into `parts`.
fn flatten_allocations(s: Stmt, locals: &mut Vec<Buffer>, parts: &mut Vec<Stmt>) {
    match s {
        Stmt::Allocate { buffer, body } => {
            locals.push(buffer);
            flatten_allocations(*body, locals, parts);
        }
        Stmt::Seq(v) => v.into_iter().for_each(|p| flatten_allocations(p, locals, parts)),
        s => parts.push(s),
    }
}

fn writes_any(s: &Stmt, buffers: &[Buffer]) -> bool {
    contains(s, |st| matches!(st, Stmt::Store { buffer, .. } if buffers.contains(buffer)))
}

fn is_thread_loop(l: &For) -> bool {
    matches!(l.kind, ForKind::ThreadBinding(ThreadAxis::ThreadX | ThreadAxis::ThreadY | ThreadAxis::ThreadZ))
}

fn is_barrier(s: &Stmt) -> bool {
    matches!(s, Stmt::Evaluate(Expr::Call(Intrinsic::Barrier, ..)))
}

/// `tir.LowerThreadLocal` (GPU kernels, before flattening): a kernel-local
/// buffer allocated outside the thread loops and indexed, at every access, by
/// its enclosing thread loop's variable first (a thread's registers widened by
/// `distribute_thread_loop`) loses that dimension: each CUDA thread has its
/// own. Any other kernel-local buffer outside the thread loops would be one
/// copy per thread where the kernel means one per block: an error.
pub fn lower_thread_local(mut f: PrimFunc) -> Result<PrimFunc, ScheduleError> {
    let mut outer = Vec::new();
    outer_locals(&f.body, &mut outer);
    for wide in outer {
        if !accesses_by_thread(&f.body, &wide, None) {
            return Err(err(
                &f,
                format!(
                    "kernel-local buffer `{}` is used by several threads; it must be in shared memory",
                    wide.name()
                ),
            ));
        }
        let narrow = Buffer::new(wide.name(), wide.elem(), wide.shape()[1..].to_vec(), Scope::Local);
        let body =
            retarget_buffer(std::mem::replace(&mut f.body, Stmt::nop()), &wide, &narrow, &|idx| idx[1..].to_vec());
        f.body = body.map_post(&mut |s| match s {
            Stmt::Allocate { buffer, body } if buffer == wide => Stmt::Allocate { buffer: narrow.clone(), body },
            s => s,
        });
    }
    Ok(f)
}

/// The kernel-local buffers allocated outside every thread loop.
fn outer_locals(s: &Stmt, out: &mut Vec<Buffer>) {
    match s {
        Stmt::For(l) if is_thread_loop(l) => {}
        Stmt::For(l) => outer_locals(&l.body, out),
        Stmt::Allocate { buffer, body } => {
            if buffer.scope() == Scope::Local {
                out.push(buffer.clone());
            }
            outer_locals(body, out);
        }
        Stmt::Let { body, .. } => outer_locals(body, out),
        Stmt::If { then_case, else_case, .. } => {
            outer_locals(then_case, out);
            if let Some(e) = else_case {
                outer_locals(e, out);
            }
        }
        Stmt::Seq(v) => v.iter().for_each(|c| outer_locals(c, out)),
        Stmt::Store { .. } | Stmt::Evaluate(_) => {}
    }
}

/// Whether every access of `b` in `s` is first indexed by the variable of its
/// enclosing thread loop (`thread`), whose extent is `b`'s first dimension.
fn accesses_by_thread(s: &Stmt, b: &Buffer, thread: Option<&For>) -> bool {
    let index_ok = |idx: &[Expr]| {
        thread.is_some_and(|l| {
            matches!(idx.first(), Some(Expr::Var(v)) if *v == l.var)
                && l.extent.as_int() == b.shape().first().map(|&n| n as i64)
        })
    };
    fn loads_ok(e: &Expr, b: &Buffer, index_ok: &dyn Fn(&[Expr]) -> bool) -> bool {
        let here = match e {
            Expr::Load(buf, idx) if buf == b => index_ok(idx),
            _ => true,
        };
        let mut children = true;
        e.for_each_child(|c| children &= loads_ok(c, b, index_ok));
        here && children
    }
    let e_ok = |e: &Expr| loads_ok(e, b, &index_ok);
    match s {
        Stmt::For(l) => {
            let inner = if is_thread_loop(l) { Some(&**l) } else { thread };
            e_ok(&l.min) && e_ok(&l.extent) && accesses_by_thread(&l.body, b, inner)
        }
        Stmt::Store { buffer, indices, value } => {
            (buffer != b || index_ok(indices)) && indices.iter().all(e_ok) && e_ok(value)
        }
        Stmt::Allocate { body, .. } => accesses_by_thread(body, b, thread),
        Stmt::Let { value, body, .. } => e_ok(value) && accesses_by_thread(body, b, thread),
        Stmt::If { cond, then_case, else_case } => {
            e_ok(cond)
                && accesses_by_thread(then_case, b, thread)
                && else_case.as_deref().is_none_or(|e| accesses_by_thread(e, b, thread))
        }
        Stmt::Seq(v) => v.iter().all(|c| accesses_by_thread(c, b, thread)),
        Stmt::Evaluate(e) => e_ok(e),
    }
}

/// Shared buffers read and written since the last barrier.
#[derive(Default)]
struct SinceBarrier {
    reads: Vec<Buffer>,
    writes: Vec<Buffer>,
}

/// Check a GPU-scheduled kernel's barriers: between two statements that
/// threads run concurrently (thread loops), a shared buffer one writes is
/// neither read nor written by the other without a barrier in between —
/// also across iterations of a loop around them — and no barrier sits where
/// only some threads would reach it (inside a thread loop or a guard).
pub fn verify_barriers(f: &PrimFunc) -> Result<(), ScheduleError> {
    check_barriers(&f.body, &mut SinceBarrier::default()).map_err(|m| err(f, m))
}

fn check_barriers(s: &Stmt, since: &mut SinceBarrier) -> Result<(), String> {
    match s {
        _ if is_barrier(s) => {
            *since = SinceBarrier::default();
            Ok(())
        }
        Stmt::Seq(v) => v.iter().try_for_each(|c| check_barriers(c, since)),
        Stmt::Allocate { body, .. } | Stmt::Let { body, .. } => check_barriers(body, since),
        // Block loops, and loops every thread runs alike around barriers: twice,
        // for the hazards between one iteration and the next.
        Stmt::For(l) if matches!(l.kind, ForKind::ThreadBinding(ThreadAxis::BlockX)) => check_barriers(&l.body, since),
        Stmt::For(l)
            if !is_thread_loop(l) && contains(&l.body, |st| matches!(st, Stmt::For(t) if is_thread_loop(t))) =>
        {
            check_barriers(&l.body, since)?;
            check_barriers(&l.body, since)
        }
        _ => {
            if contains(s, is_barrier) {
                return Err("a barrier inside a thread loop or a guard, which not every thread reaches".into());
            }
            let (mut reads, mut writes) = (Vec::new(), Vec::new());
            shared_accesses(s, &mut reads, &mut writes);
            if let Some(b) = writes.iter().find(|b| since.reads.contains(b) || since.writes.contains(b)) {
                return Err(format!(
                    "shared buffer `{}` is written while other threads may use it: a barrier is missing",
                    b.name()
                ));
            }
            if let Some(b) = reads.iter().find(|b| since.writes.contains(b)) {
                return Err(format!(
                    "shared buffer `{}` is read while other threads may write it: a barrier is missing",
                    b.name()
                ));
            }
            since.reads.extend(reads);
            since.writes.extend(writes);
            Ok(())
        }
    }
}

fn shared_accesses(s: &Stmt, reads: &mut Vec<Buffer>, writes: &mut Vec<Buffer>) {
    let mut loads = Vec::new();
    s.clone().map_exprs(&mut |e| {
        collect_loads(&e, &mut loads);
        e
    });
    s.visit(&mut |st| {
        if let Stmt::Store { buffer, .. } = st {
            writes.push(buffer.clone());
        }
    });
    reads.extend(loads.into_iter().map(|(b, _)| b));
    for list in [reads, writes] {
        list.retain(|b| b.scope() == Scope::Shared);
    }
}
