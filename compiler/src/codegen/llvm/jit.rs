//! Kernels compiled in process (tests, `kiln run`, `kiln bench`).

use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use inkwell::targets::{InitializationConfig, Target};
use inkwell::OptimizationLevel;

use super::*;
use crate::codegen::{CodegenError, PackedKernel};
use crate::tir::PrimFunc;

/// Kernels compiled in process. The LLVM context is leaked on purpose: the
/// JIT'd code must outlive every borrow of it, and a process JITs few modules.
pub struct Jit {
    engine: ExecutionEngine<'static>,
    _module: Module<'static>,
}

impl std::fmt::Debug for Jit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Jit")
    }
}

impl Jit {
    /// JIT-compile `funcs` for the host.
    pub fn new(name: &str, funcs: &[PrimFunc]) -> Result<Jit, CodegenError> {
        Jit::for_target(name, funcs, &LlvmTarget::native())
    }

    /// JIT-compile `funcs` for `target`'s CPU and features, which must be
    /// this machine's architecture: an AVX2 build (`-mcpu=znver3`, with
    /// `-mattr=-sse4a` on Intel) runs on an AVX-512 machine too. The caller
    /// checks that this CPU has the features
    /// (`TargetDescription::first_missing_on_this_cpu`) before running a kernel.
    pub fn for_target(name: &str, funcs: &[PrimFunc], target: &LlvmTarget) -> Result<Jit, CodegenError> {
        Target::initialize_native(&InitializationConfig::default()).map_err(|m| llvm_err(name, m))?;
        let ctx: &'static Context = Box::leak(Box::new(Context::create()));
        let module = build_module(ctx, name, funcs, &[], target)?;
        let engine =
            module.create_jit_execution_engine(OptimizationLevel::Aggressive).map_err(|m| llvm_err(name, m))?;
        Ok(Jit { engine, _module: module })
    }

    /// The packed entry point of kernel `name`.
    pub fn kernel(&self, name: &str) -> Result<PackedKernel, CodegenError> {
        let addr = self
            .engine
            .get_function_address(&format!("{name}_packed"))
            .map_err(|e| llvm_err(name, format!("no JIT'd kernel: {e}")))?;
        // SAFETY: `<name>_packed` was emitted with exactly the `PackedKernel` signature.
        Ok(unsafe { std::mem::transmute::<usize, PackedKernel>(addr) })
    }
}
