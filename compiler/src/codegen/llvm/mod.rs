//! TIR → LLVM IR through inkwell, then native code: object files, assembly,
//! LLVM IR text, or an in-process JIT for tests and the CLI.
//!
//! Kernels follow the ABI in [`super`]; each also gets a packed entry point
//! `<name>_packed(void** args, int64_t task_id, int64_t num_tasks)` so that
//! callers (the JIT, the runtime) need one function-pointer type for all.
//! Pointer parameters are `noalias`; loops are emitted with phi nodes and the
//! module runs LLVM's `default<O3>` pipeline for the target CPU, whose loop
//! vectorizer produces the vector code.

use std::collections::{HashMap, HashSet};

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::FileType;
use inkwell::types::{BasicMetadataTypeEnum, BasicTypeEnum};
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::IntPredicate;
use kiln_ir::DataType;

mod amx;
mod bf16;
mod compat;
mod data_object;
mod expr;
mod grid;
mod interleave;
mod jit;
mod nvptx;
mod predicated;
mod register_buffer;
mod row_gather;
mod stmt;
mod target;
mod transpose;
mod vector;

pub use jit::Jit;
pub use nvptx::{compile_ptx, CudaTarget};
use target::set_target_attributes;
pub use target::LlvmTarget;

use super::CodegenError;
use crate::tir::{BinOp, CmpOp, Expr, PrimFunc, Stmt};

/// Largest kernel-local buffer placed on the stack (the same limit as the C backend).
const MAX_LOCAL_BYTES: usize = 1 << 20;

/// What to produce.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LlvmOutput {
    pub llvm_ir: String,
    pub assembly: String,
    pub object: Vec<u8>,
}

struct FnGen<'a, 'ctx> {
    ctx: &'ctx Context,
    module: &'a Module<'ctx>,
    b: Builder<'ctx>,
    func: FunctionValue<'ctx>,
    kernel: String,
    vars: HashMap<u32, BasicValueEnum<'ctx>>,
    /// Integer variables known to be non-negative (loop variables from a
    /// non-negative start; lets of non-negative values): their floor
    /// divisions by positive constants are plain unsigned divisions.
    non_negative_vars: HashSet<u32>,
    buffers: HashMap<u32, PointerValue<'ctx>>,
    task_id: IntValue<'ctx>,
    num_tasks: IntValue<'ctx>,
    sliced: bool,
    entry: BasicBlock<'ctx>,
    /// NVPTX kernels: thread-bound loops read the thread/block index, shared
    /// buffers live in address space 3, `log`/`pow` use the PTX approximations.
    gpu: bool,
    /// The buffer the store being emitted writes (see `nan_minmax`).
    accumulator: Option<u32>,
    /// CPU kernels: the `i32` status they return, set by failed `check_index`es.
    status: Option<PointerValue<'ctx>>,
    /// The target's features that change a CPU kernel's code (none on a GPU).
    features: KernelFeatures,
    /// The buffers the kernel stores to: a masked load of one could read
    /// back a store still in flight, which a masked load cannot forward.
    stored: std::collections::HashSet<u32>,
    /// Transposed blocks of register tiles read so far (see `transpose.rs`).
    transposes: HashMap<transpose::TransposeKey, Vec<inkwell::values::VectorValue<'ctx>>>,
    /// Row-gathered offsets of the statement sequence being emitted: the
    /// run each belongs to, its first offset and length (see `row_gather.rs`).
    row_plan: HashMap<row_gather::RowKey, (i64, i64)>,
    /// Transposed rows of row gathers read so far.
    row_gathers: HashMap<row_gather::RowKey, Vec<inkwell::values::VectorValue<'ctx>>>,
    /// Strided loads of the interleaved group being stored, split from one
    /// run (see `interleave.rs`), by buffer and index text.
    deinterleaved: HashMap<(u32, String), inkwell::values::VectorValue<'ctx>>,
    /// Kernel-local buffers kept as one vector value (see `register_buffer.rs`).
    register_buffers: HashMap<u32, inkwell::values::VectorValue<'ctx>>,
    /// The row length of [`crate::codegen::GRID_ROW_ATTR`], where the kernel has one.
    grid_row: Option<i64>,
    /// The latest stride-2 grid reads, by the block they were built in and
    /// what they read (see `grid.rs`): reused only in that block.
    grid_values: std::collections::VecDeque<(
        inkwell::basic_block::BasicBlock<'ctx>,
        String,
        inkwell::values::VectorValue<'ctx>,
    )>,
}

fn llvm_err(kernel: &str, e: impl std::fmt::Display) -> CodegenError {
    CodegenError::Llvm { kernel: kernel.to_string(), message: e.to_string() }
}

/// The LLVM intrinsic suffix of a float type (`llvm.floor.f32`).
fn float_suffix(t: DataType) -> &'static str {
    match t {
        DataType::F16 => "f16",
        DataType::F64 => "f64",
        _ => "f32",
    }
}

fn elem_type<'ctx>(ctx: &'ctx Context, t: DataType) -> BasicTypeEnum<'ctx> {
    match t {
        DataType::F32 => ctx.f32_type().into(),
        DataType::F16 => ctx.f16_type().into(),
        DataType::F64 => ctx.f64_type().into(),
        DataType::I64 | DataType::U64 => ctx.i64_type().into(),
        DataType::I32 | DataType::U32 => ctx.i32_type().into(),
        DataType::I16 | DataType::U16 => ctx.i16_type().into(),
        DataType::I8 | DataType::U8 | DataType::Bool => ctx.i8_type().into(),
    }
}

/// The ordered float comparison for `op` (`!=` unordered: true for NaN, as in C).
fn float_predicate(op: CmpOp) -> inkwell::FloatPredicate {
    use inkwell::FloatPredicate::*;
    match op {
        CmpOp::Eq => OEQ,
        CmpOp::Ne => UNE,
        CmpOp::Lt => OLT,
        CmpOp::Le => OLE,
        CmpOp::Gt => OGT,
        CmpOp::Ge => OGE,
    }
}

/// `acc + m1·m2` (either order): LLVM's `fmuladd`, which the backend may
/// contract into one FMA instruction (C's default FP_CONTRACT semantics).
fn fma_operands<'e>(a: &'e Expr, b: &'e Expr) -> Option<(&'e Expr, &'e Expr, &'e Expr)> {
    match (a, b) {
        (acc, Expr::Bin(BinOp::Mul, m1, m2)) | (Expr::Bin(BinOp::Mul, m1, m2), acc) => Some((acc, m1, m2)),
        _ => None,
    }
}

/// Declare kernel `f` — one `noalias nocapture` pointer per buffer, then, on
/// the CPU, `task_id` and `num_tasks` — and a generator positioned in its
/// entry block with the buffers bound. GPU kernels take only the buffers.
fn start_kernel<'a, 'ctx>(
    ctx: &'ctx Context,
    module: &'a Module<'ctx>,
    f: &PrimFunc,
    gpu: bool,
) -> Result<FnGen<'a, 'ctx>, CodegenError> {
    let i64t = ctx.i64_type();
    let mut params: Vec<BasicMetadataTypeEnum> =
        f.params.iter().map(|b| compat::pointer_to(ctx, elem_type(ctx, b.elem())).into()).collect();
    if !gpu {
        params.extend([BasicMetadataTypeEnum::from(i64t), i64t.into()]);
    }
    let fn_ty = if gpu { ctx.void_type().fn_type(&params, false) } else { ctx.i32_type().fn_type(&params, false) };
    let func = module.add_function(&f.name, fn_ty, Some(Linkage::External));
    let noalias = ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("noalias"), 0);
    let nocapture = ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("nocapture"), 0);
    let mut buffers = HashMap::new();
    for (i, buf) in f.params.iter().enumerate() {
        func.add_attribute(AttributeLoc::Param(i as u32), noalias);
        func.add_attribute(AttributeLoc::Param(i as u32), nocapture);
        let p = func.get_nth_param(i as u32).ok_or_else(|| llvm_err(&f.name, "missing parameter"))?;
        p.set_name(buf.name());
        buffers.insert(buf.id(), p.into_pointer_value());
    }
    let (task_id, num_tasks) = if gpu {
        (i64t.const_zero(), i64t.const_int(1, false))
    } else {
        let n = f.params.len() as u32;
        let param = |k: u32, what: &str| {
            func.get_nth_param(k).map(|p| p.into_int_value()).ok_or_else(|| llvm_err(&f.name, what))
        };
        (param(n, "no task_id")?, param(n + 1, "no num_tasks")?)
    };
    let entry = ctx.append_basic_block(func, "entry");
    let b = ctx.create_builder();
    b.position_at_end(entry);
    let status = if gpu {
        None
    } else {
        let e = |x: inkwell::builder::BuilderError| llvm_err(&f.name, x);
        let slot = b.build_alloca(ctx.i32_type(), "status").map_err(e)?;
        b.build_store(slot, ctx.i32_type().const_zero()).map_err(e)?;
        Some(slot)
    };
    Ok(FnGen {
        ctx,
        module,
        b,
        func,
        kernel: f.name.clone(),
        vars: HashMap::new(),
        non_negative_vars: HashSet::new(),
        buffers,
        task_id,
        num_tasks,
        // A GPU kernel has no task slices.
        sliced: gpu,
        entry,
        gpu,
        accumulator: None,
        status,
        features: KernelFeatures::default(),
        stored: std::collections::HashSet::new(),
        transposes: HashMap::new(),
        row_plan: HashMap::new(),
        row_gathers: HashMap::new(),
        deinterleaved: HashMap::new(),
        register_buffers: HashMap::new(),
        grid_row: f.attrs.get(crate::codegen::GRID_ROW_ATTR).and_then(|w| w.parse().ok()).filter(|&w: &i64| w > 0),
        grid_values: std::collections::VecDeque::new(),
    })
}

/// The target features that change the code of a CPU kernel.
#[derive(Clone, Copy, Default)]
struct KernelFeatures {
    /// AVX-512 VNNI: `kiln.dot_u8i8` is one `vpdpbusd` (else its plain
    /// integer arithmetic).
    vnni: bool,
    /// AVX-512 mask registers: a contiguous access of a partial vector (14
    /// or 7 lanes, the rows of late-stage maps) is one masked load or store
    /// of the next whole vector (see `masked_access`).
    masked_partial: bool,
    /// AVX-512 gathers: a vector load at arbitrary indices is one
    /// `llvm.masked.gather` (else one load per lane).
    gather: bool,
    /// AVX-512's `vscalefps`: `ldexp` of a 16-lane f32 vector is one
    /// instruction (else nine: the exponent field built in two factors).
    scalef: bool,
    /// The widest f32 vector x86's own `minps`/`maxps` take (16 with
    /// AVX-512, 8 with AVX — 4 too —, else 0): an accumulator's min/max
    /// update as one instruction (see `nan_minmax`).
    x86_minmax_lanes: u32,
    /// AMX tiles (`amx-tile` and `amx-int8`): the `kiln.amx_*` statements.
    amx: bool,
    /// AMX-BF16: `kiln.amx_dot_bf16`.
    amx_bf16: bool,
    /// The f32 lanes of the vectors a tile is transposed in (see
    /// `transpose.rs`; 0: read lane by lane): 16 on AVX-512 (a two-input
    /// shuffle is one `vpermt2ps`), 8 on AVX2 (YOLOv8n's 8-column SiLU tiles
    /// 0.93–0.99×, MobileNetV2's and ResNet-18's columns 0.93–1.01×).
    transpose_lanes: u32,
}

/// Emit `f` and its packed entry point into `module`.
fn emit_kernel<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    f: &PrimFunc,
    target: &LlvmTarget,
    features: KernelFeatures,
) -> Result<(), CodegenError> {
    let i64t = ctx.i64_type();
    let mut g = start_kernel(ctx, module, f, false)?;
    g.features = features;
    f.body.visit(&mut |st| {
        if let Stmt::Store { buffer, .. } = st {
            g.stored.insert(buffer.id());
        }
    });
    let (func, task_id) = (g.func, g.task_id);
    // Compiled once: LLVM otherwise inlined a copy of a small kernel into its
    // packed entry and compiled both (a tenth of ResNet-18's code, a third of
    // gpt_tiny's). The call costs nothing next to a kernel's work.
    func.add_attribute(
        AttributeLoc::Function,
        ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("noinline"), 0),
    );
    // Copies stay the vector loops kiln wrote. As `memcpy` calls (loop idiom
    // recognition), unrolled by LLVM and expanded again by its back end, they
    // made blocks of thousands of memory operations whose DAG combining is
    // quadratic: gpt_tiny's 4 × 64 × 64 head transpose took 0.5 s to compile
    // (70 ms now), MobileNetV2's padded-image copies held 1,648 such calls.
    func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("no-builtin-memcpy", ""));
    // Fast math only where the target (`-fast-math`) or the kernel's pass
    // context (`tir.fast_math`) allows it.
    if target.fast_math || f.attrs.get("fast_math").is_some_and(|v| v == "true") {
        for key in
            ["unsafe-fp-math", "no-nans-fp-math", "no-infs-fp-math", "no-signed-zeros-fp-math", "approx-func-fp-math"]
        {
            func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute(key, "true"));
        }
    }
    set_target_attributes(ctx, func, target);
    if !f.body.has_parallel_loop() {
        // Serial kernels do all the work in task 0.
        let work = ctx.append_basic_block(func, "work");
        let done = ctx.append_basic_block(func, "done");
        let is_first = g.e(g.b.build_int_compare(IntPredicate::EQ, task_id, i64t.const_zero(), "first"))?;
        g.e(g.b.build_conditional_branch(is_first, work, done))?;
        g.b.position_at_end(done);
        g.e(g.b.build_return(Some(&ctx.i32_type().const_zero())))?;
        g.b.position_at_end(work);
    }
    g.stmt(&f.body)?;
    let slot = g.status.ok_or_else(|| llvm_err(&f.name, "a CPU kernel without a status"))?;
    let status = g.e(compat::load(&g.b, ctx.i32_type(), slot, "status"))?;
    g.e(g.b.build_return(Some(&status)))?;

    // `i32 <name>_packed(i8** args, i64 task_id, i64 num_tasks)`.
    let i8p = compat::pointer_to(ctx, ctx.i8_type());
    let i8pp = compat::pointer_to(ctx, i8p);
    let packed_ty = ctx.i32_type().fn_type(&[i8pp.into(), i64t.into(), i64t.into()], false);
    let packed = module.add_function(&format!("{}_packed", f.name), packed_ty, Some(Linkage::External));
    set_target_attributes(ctx, packed, target);
    let bb = ctx.append_basic_block(packed, "entry");
    let pb = ctx.create_builder();
    pb.position_at_end(bb);
    let kernel = f.name.clone();
    let e = move |x: inkwell::builder::BuilderError| llvm_err(&kernel, x);
    let args = packed.get_nth_param(0).ok_or_else(|| llvm_err(&f.name, "packed args"))?.into_pointer_value();
    let mut call_args: Vec<BasicMetadataValueEnum> = Vec::new();
    for (i, buf) in f.params.iter().enumerate() {
        let index = [i64t.const_int(i as u64, false)];
        let slot = unsafe { compat::in_bounds_gep(&pb, i8p, args, &index, "slot").map_err(&e)? };
        let raw = compat::load(&pb, i8p, slot, "raw").map_err(&e)?.into_pointer_value();
        let typed =
            pb.build_pointer_cast(raw, compat::pointer_to(ctx, elem_type(ctx, buf.elem())), "arg").map_err(&e)?;
        call_args.push(typed.into());
    }
    for k in 1..3 {
        call_args.push(packed.get_nth_param(k).ok_or_else(|| llvm_err(&f.name, "packed task"))?.into());
    }
    let status = match pb.build_call(func, &call_args, "status").map_err(&e)?.try_as_basic_value() {
        inkwell::values::ValueKind::Basic(v) => v,
        _ => return Err(llvm_err(&f.name, "the kernel returns no status")),
    };
    pb.build_return(Some(&status)).map_err(&e)?;
    Ok(())
}

/// A named block of read-only data (a model weight) placed in the object.
#[derive(Clone, Debug)]
pub struct DataSymbol<'a> {
    pub symbol: String,
    pub bytes: &'a [u8],
}

/// Whether `cpu` runs a 16-lane `vgatherdps` faster than 16 lane loads:
/// Intel's AVX-512 cores (Sapphire Rapids: Winograd input transforms
/// 13–43 % faster as gathers). AMD's Zen 4 and 5 microcode it (Zen 5: the
/// same transforms 0.83–0.89× the time as lane loads), and a CPU LLVM does
/// not name (`generic`: LLVM 14 on Zen 5) gets the lane loads too.
fn fast_gathers(cpu: &str) -> bool {
    !(cpu.is_empty() || cpu.starts_with("znver") || cpu.starts_with("x86-64") || cpu == "generic")
}

fn build_module<'ctx>(
    ctx: &'ctx Context,
    name: &str,
    funcs: &[PrimFunc],
    data: &[DataSymbol<'_>],
    target: &LlvmTarget,
) -> Result<Module<'ctx>, CodegenError> {
    let module = ctx.create_module(name);
    // Resolved once per module: the target's features are every kernel's.
    let features = KernelFeatures {
        vnni: target.has_feature("avx512vnni"),
        masked_partial: target.has_feature("avx512f"),
        gather: target.has_feature("avx512f") && fast_gathers(&target.cpu),
        scalef: target.has_feature("avx512f"),
        x86_minmax_lanes: if target.has_feature("avx512f") {
            16
        } else if target.has_feature("avx") {
            8
        } else {
            0
        },
        amx: target.has_feature("amx-tile") && target.has_feature("amx-int8"),
        amx_bf16: target.has_feature("amx-tile") && target.has_feature("amx-bf16"),
        transpose_lanes: if target.has_feature("avx512f") {
            16
        } else if target.has_feature("avx2") {
            8
        } else {
            0
        },
    };
    for f in funcs {
        emit_kernel(ctx, &module, f, target, features)?;
    }
    for d in data {
        let init = ctx.const_string(d.bytes, false);
        let g = module.add_global(init.get_type(), None, &d.symbol);
        g.set_initializer(&init);
        g.set_constant(true);
        g.set_alignment(64);
        g.set_linkage(Linkage::External);
    }
    module.verify().map_err(|m| llvm_err(name, format!("invalid LLVM IR: {m}")))?;
    let tm = target.machine("llvm")?;
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|m| llvm_err(name, format!("optimization pipeline: {m}")))?;
    Ok(module)
}

/// What the optimized module is turned into. Each costs its own work —
/// assembly and an object file are each a full run of LLVM's back end, and
/// that back end is most of a model's compile time — so callers ask only for
/// what they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Artifact {
    /// The optimized module as LLVM IR text.
    LlvmIr,
    /// The target's assembly text.
    Assembly,
    /// A relocatable object file.
    Object,
}

/// A context for one compilation. Unless the IR is to be read, the names of
/// local values are dropped as they are made: LLVM otherwise keeps a
/// uniqued name for every instruction, a few percent of a model's compile.
fn context(named_values: bool) -> Context {
    let ctx = Context::create();
    if !named_values {
        // SAFETY: `ctx.raw()` is the context just created, alive for this
        // call; the function only sets a flag on it.
        unsafe { inkwell::llvm_sys::core::LLVMContextSetDiscardValueNames(ctx.raw(), 1) };
    }
    ctx
}

/// Compile `funcs` (and read-only `data` symbols) for `target` once, and
/// return the bytes of each of `wanted`, in its order.
pub fn compile_artifacts(
    name: &str,
    funcs: &[PrimFunc],
    data: &[DataSymbol<'_>],
    target: &LlvmTarget,
    wanted: &[Artifact],
) -> Result<Vec<Vec<u8>>, CodegenError> {
    let ctx = context(wanted.contains(&Artifact::LlvmIr));
    let module = build_module(&ctx, name, funcs, data, target)?;
    let tm = target.machine("llvm")?;
    wanted
        .iter()
        .map(|artifact| match artifact {
            Artifact::LlvmIr => Ok(module.print_to_string().to_bytes().to_vec()),
            Artifact::Assembly => tm
                .write_to_memory_buffer(&module, FileType::Assembly)
                .map(|b| b.as_slice().to_vec())
                .map_err(|m| llvm_err(name, m)),
            Artifact::Object => tm
                .write_to_memory_buffer(&module, FileType::Object)
                .map(|b| b.as_slice().to_vec())
                .map_err(|m| llvm_err(name, m)),
        })
        .collect()
}

/// How many groups [`partition_kernels`] splits a model's kernels into: a
/// constant, so that a build's bytes do not depend on the machine's cores.
/// MobileNetV2's LLVM wall time on 2 threads: 1.6 s in 4 groups (of 450 to
/// 710 ms: statement counts are a rough measure of LLVM's work), 1.1–1.5 s in
/// 8, 1.6–1.7 s with one object per kernel (each module has a fixed cost).
pub const OBJECT_PARTS: usize = 8;

/// A model's kernels in up to [`OBJECT_PARTS`] groups of about equal size
/// (largest first onto the lightest group), in a fixed order: each group
/// becomes one object, compiled in its own LLVM context — LLVM's back end
/// being most of a model's compile time, the groups compile in parallel.
pub fn partition_kernels(funcs: &[PrimFunc]) -> Vec<Vec<PrimFunc>> {
    let parts = OBJECT_PARTS.min(funcs.len()).max(1);
    let mut order: Vec<(usize, usize)> = funcs.iter().map(|f| statement_count(&f.body)).enumerate().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chunks: Vec<(usize, Vec<PrimFunc>)> = vec![(0, Vec::new()); parts];
    for (i, cost) in order {
        let lightest = (0..parts).min_by_key(|&c| (chunks[c].0, c)).unwrap_or(0);
        chunks[lightest].0 += cost;
        chunks[lightest].1.push(funcs[i].clone());
    }
    chunks.into_iter().map(|(_, part)| part).collect()
}

/// One object to compile: its module's name, kernels and read-only data.
#[derive(Debug)]
pub struct ObjectJob<'a> {
    pub module: String,
    pub funcs: &'a [PrimFunc],
    pub data: &'a [DataSymbol<'a>],
}

/// Whether kiln writes the object defining a model's weights for `target`
/// itself (ELF: [`stream_data_object`]); else LLVM compiles it
/// ([`compile_object_jobs`]).
pub fn writes_data_object(target: &LlvmTarget) -> bool {
    data_object::elf_architecture(&target.triple).is_some()
}

/// Stream the object defining `data` (a data-only job's) into `out`, where
/// kiln writes such objects itself ([`writes_data_object`]); `None` where
/// LLVM must compile it.
pub fn stream_data_object(
    target: &LlvmTarget,
    data: &[DataSymbol<'_>],
    out: &mut dyn std::io::Write,
) -> Option<std::io::Result<()>> {
    data_object::stream_elf_data_object(&target.triple, data, out)
}

/// An object defining the symbols of [`stream_data_object`]'s, without
/// their bytes (an archive's symbol table is read from it); `None` where
/// LLVM must compile the data.
pub fn data_object_symbols(target: &LlvmTarget, data: &[DataSymbol<'_>]) -> Option<Vec<u8>> {
    data_object::elf_symbols_object(&target.triple, data)
}

/// Compile each job to an object, on up to `threads` threads at once, each
/// in its own LLVM context; the results keep the jobs' order.
pub fn compile_object_jobs(
    jobs: &[ObjectJob<'_>],
    target: &LlvmTarget,
    threads: usize,
) -> Result<Vec<Vec<u8>>, CodegenError> {
    let compile = |job: &ObjectJob<'_>| -> Result<Vec<u8>, CodegenError> {
        if job.funcs.is_empty() {
            if let Some(object) = data_object::elf_data_object(&target.triple, job.data) {
                return Ok(object);
            }
        }
        let mut out = compile_artifacts(&job.module, job.funcs, job.data, target, &[Artifact::Object])?;
        out.pop().ok_or_else(|| llvm_err(&job.module, "no object"))
    };
    // Workers take the largest jobs first (the last to start should be a
    // short one); each result keeps its job's place.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_cached_key(|&k| {
        std::cmp::Reverse(jobs[k].funcs.iter().map(|f| statement_count(&f.body)).sum::<usize>())
    });
    let compiled = crate::parallel::parallel_map(&order, threads.max(1), |&k| compile(&jobs[k]));
    let mut results: Vec<Option<Result<Vec<u8>, CodegenError>>> = jobs.iter().map(|_| None).collect();
    for (k, r) in order.into_iter().zip(compiled) {
        results[k] = r;
    }
    results
        .into_iter()
        .zip(jobs)
        .map(|(r, job)| r.unwrap_or_else(|| Err(llvm_err(&job.module, "not compiled"))))
        .collect()
}

/// The number of statements of a kernel: the size of the code LLVM gets.
fn statement_count(s: &Stmt) -> usize {
    let mut n = 0;
    s.visit(&mut |_| n += 1);
    n
}

/// Compile `funcs` for `target`: optimized LLVM IR, assembly and an object file.
pub fn compile(name: &str, funcs: &[PrimFunc], target: &LlvmTarget) -> Result<LlvmOutput, CodegenError> {
    compile_with_data(name, funcs, &[], target)
}

/// [`compile`], with read-only data symbols (the model's weights) in the
/// object. (A build that needs only the object asks [`compile_artifacts`]
/// for it: producing all three costs two runs of the back end.)
pub fn compile_with_data(
    name: &str,
    funcs: &[PrimFunc],
    data: &[DataSymbol<'_>],
    target: &LlvmTarget,
) -> Result<LlvmOutput, CodegenError> {
    let all = [Artifact::LlvmIr, Artifact::Assembly, Artifact::Object];
    let [ir, asm, object]: [Vec<u8>; 3] = compile_artifacts(name, funcs, data, target, &all)?
        .try_into()
        .map_err(|_| llvm_err(name, "an artifact is missing"))?;
    Ok(LlvmOutput {
        llvm_ir: String::from_utf8_lossy(&ir).into_owned(),
        assembly: String::from_utf8_lossy(&asm).into_owned(),
        object,
    })
}
