//! NVIDIA GPUs: the `cuda` target string and PTX through LLVM's NVPTX backend.

use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetTriple};
use inkwell::OptimizationLevel;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::PrimFunc;

/// The SMs (35 and newer) LLVM 14's NVPTX backend can emit, from
/// `llc -march=nvptx64 -mcpu=help`.
const LLVM14_SMS: &[&str] = &[
    "sm_35", "sm_37", "sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86",
];
/// What LLVM 19 adds to them.
const LLVM19_ADDED_SMS: &[&str] = &["sm_87", "sm_89", "sm_90", "sm_90a"];

/// The SMs the linked LLVM can emit.
fn emittable_sms() -> Vec<&'static str> {
    let added = if cfg!(feature = "llvm19") { LLVM19_ADDED_SMS } else { &[] };
    LLVM14_SMS.iter().chain(added).copied().collect()
}

/// A parsed `cuda` target string: `cuda`, `cuda -arch=sm_80` (the default SM;
/// PTX for an older SM runs on newer GPUs through the driver's JIT).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaTarget {
    pub arch: String,
}

impl CudaTarget {
    pub fn parse(s: &str) -> Result<CudaTarget, CodegenError> {
        let bad = |what: String| CodegenError::BadTarget { target: s.to_string(), message: what };
        let mut words = s.split_whitespace();
        if words.next() != Some("cuda") {
            return Err(bad("a CUDA target string starts with `cuda`".into()));
        }
        let mut t = CudaTarget { arch: "sm_80".into() };
        let sms = emittable_sms();
        for w in words {
            match w.strip_prefix("-arch=") {
                Some(a) if sms.contains(&a) => t.arch = a.to_string(),
                Some(a) if a.strip_prefix("sm_").is_some_and(|n| n.trim_end_matches('a').parse::<u32>().is_ok()) => {
                    // An SM newer than the linked LLVM's NVPTX backend: PTX
                    // claiming it would be wrong, so refuse and say what works.
                    return Err(bad(format!(
                        "LLVM {}, which kiln links, cannot emit PTX for `{a}`; it emits {} (PTX for an older SM \
                         runs on newer GPUs through the driver's JIT){}",
                        crate::target::LLVM_VERSION,
                        sms.join(", "),
                        if cfg!(feature = "llvm19") {
                            ""
                        } else {
                            "; kiln built with LLVM 19 (feature `llvm19`) emits up to sm_90a"
                        }
                    )));
                }
                Some(a) => return Err(bad(format!("unknown architecture `{a}`; expected sm_NN (35 or newer)"))),
                None => return Err(bad(format!("unknown option `{w}`; expected -arch=sm_NN"))),
            }
        }
        Ok(t)
    }

    /// The PTX ISA version the linked LLVM needs for this SM (the oldest that has it).
    fn ptx_feature(&self) -> &'static str {
        match self.arch.as_str() {
            "sm_90a" => return "+ptx80",
            "sm_90" | "sm_89" => return "+ptx78",
            "sm_87" => return "+ptx74",
            _ => {}
        }
        match self.arch.trim_start_matches("sm_").parse::<u32>().unwrap_or(80) {
            n if n >= 86 => "+ptx71",
            n if n >= 80 => "+ptx70",
            n if n >= 75 => "+ptx63",
            n if n >= 70 => "+ptx60",
            _ => "+ptx50",
        }
    }
}

/// Emit the GPU kernel `f` (loops bound to thread and block indices by the GPU
/// schedule) as a `ptx_kernel` taking one pointer per buffer.
fn emit_gpu_kernel<'ctx>(ctx: &'ctx Context, module: &Module<'ctx>, f: &PrimFunc) -> Result<(), CodegenError> {
    let mut g = start_kernel(ctx, module, f, true)?;
    let func = g.func;
    g.stmt(&f.body)?;
    g.e(g.b.build_return(None))?;
    let kernel_md = ctx.metadata_node(&[
        func.as_global_value().as_pointer_value().into(),
        ctx.metadata_string("kernel").into(),
        ctx.i32_type().const_int(1, false).into(),
    ]);
    module.add_global_metadata("nvvm.annotations", &kernel_md).map_err(|e| llvm_err(&f.name, e))?;
    Ok(())
}

/// Compile GPU-scheduled kernels to PTX text for `target`.
pub fn compile_ptx(name: &str, funcs: &[PrimFunc], target: &CudaTarget) -> Result<String, CodegenError> {
    Target::initialize_nvptx(&InitializationConfig::default());
    super::target::configure_llvm();
    let ctx = Context::create();
    let module = ctx.create_module(name);
    let triple = TargetTriple::create("nvptx64-nvidia-cuda");
    let fail = |m: String| CodegenError::BadTarget { target: format!("cuda -arch={}", target.arch), message: m };
    let t = Target::from_triple(&triple).map_err(|e| fail(e.to_string()))?;
    let tm = t
        .create_target_machine(
            &triple,
            &target.arch,
            target.ptx_feature(),
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| fail(format!("LLVM cannot make an NVPTX target machine for `{}`", target.arch)))?;
    module.set_triple(&triple);
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    for f in funcs {
        emit_gpu_kernel(&ctx, &module, f)?;
    }
    module.verify().map_err(|m| llvm_err(name, format!("invalid LLVM IR: {m}")))?;
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|m| llvm_err(name, format!("optimization pipeline: {m}")))?;
    let ptx = tm.write_to_memory_buffer(&module, FileType::Assembly).map_err(|m| llvm_err(name, m))?;
    Ok(String::from_utf8_lossy(ptx.as_slice()).into_owned())
}
