//! Run an [`ExecutorPlan`] in this process: the arena is a host buffer, the
//! kernels come from a [`KernelLibrary`] (the LLVM JIT, or a C library built
//! on the fly), and parallel kernels run on `kiln-runtime`'s thread pool.
//! Used by the tests, `kiln run` and `kiln bench`; shipped binaries use the
//! generated glue instead.

use kiln_ir::Tensor;

use super::aot::{ExecutorPlan, Storage, ARENA_ALIGN};
use super::RunError;
use crate::codegen::PackedKernel;

/// Where compiled kernels come from.
pub trait KernelLibrary {
    /// The packed entry point of kernel `name`.
    fn packed(&self, name: &str) -> Result<PackedKernel, RunError>;
}

#[cfg(feature = "llvm")]
impl KernelLibrary for crate::codegen::llvm::Jit {
    fn packed(&self, name: &str) -> Result<PackedKernel, RunError> {
        self.kernel(name).map_err(|e| RunError::MissingKernel { kernel: name.to_string(), message: e.to_string() })
    }
}

/// A zeroed, 64-byte-aligned buffer of `len` bytes (huge pages from 2 MiB:
/// see [`kiln_runtime::OwnedArena`]).
struct Aligned {
    buf: kiln_runtime::OwnedArena,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Self {
        Aligned { buf: kiln_runtime::OwnedArena::new(len), len }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.buf.as_mut_ptr()
    }
    fn bytes(&self) -> &[u8] {
        &self.buf.bytes()[..self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf.bytes_mut()[..self.len]
    }
}

/// Every constant of a plan in one buffer, each at a 64-byte-aligned offset:
/// one huge-page region for the weights rather than a small allocation each.
struct Constants {
    buf: kiln_runtime::OwnedArena,
    offsets: Vec<usize>,
}

impl Constants {
    fn new(constants: &[Tensor]) -> Self {
        let mut offsets = Vec::with_capacity(constants.len());
        let mut end = 0;
        for t in constants {
            offsets.push(end);
            end += t.bytes().len().next_multiple_of(ARENA_ALIGN);
        }
        let mut buf = kiln_runtime::OwnedArena::new(end);
        for (t, &at) in constants.iter().zip(&offsets) {
            buf.bytes_mut()[at..at + t.bytes().len()].copy_from_slice(t.bytes());
        }
        Constants { buf, offsets }
    }
}

/// A plan ready to run repeatedly: buffers allocated once, kernels resolved.
pub struct Executor<'p> {
    plan: &'p ExecutorPlan,
    kernels: Vec<(PackedKernel, bool)>,
    arena: Aligned,
    ins: Vec<Aligned>,
    consts: Constants,
    outs: Vec<Aligned>,
    pool: std::sync::Arc<kiln_runtime::ThreadPool>,
    /// Reused for every call's argument pointers (no allocation per run).
    args: Vec<*mut u8>,
}

impl std::fmt::Debug for Executor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("kernels", &self.kernels.len()).finish_non_exhaustive()
    }
}

impl<'p> Executor<'p> {
    /// Resolve the kernels and allocate every buffer, for `threads` threads.
    pub fn new(plan: &'p ExecutorPlan, lib: &dyn KernelLibrary, threads: usize) -> Result<Self, RunError> {
        let pool = kiln_runtime::ThreadPool::try_new(threads.max(1))
            .map_err(|e| RunError::Threads { threads, message: e.to_string() })?;
        Self::with_pool(plan, lib, std::sync::Arc::new(pool))
    }

    /// [`Executor::new`] on an existing pool: executors that take turns
    /// share one, so that one's idle workers, spinning for its next kernel,
    /// do not take the cores from the other's (`kiln tune` times two builds
    /// run by run).
    pub fn with_pool(
        plan: &'p ExecutorPlan,
        lib: &dyn KernelLibrary,
        pool: std::sync::Arc<kiln_runtime::ThreadPool>,
    ) -> Result<Self, RunError> {
        let kernels = plan
            .kernels
            .iter()
            .map(|k| Ok((lib.packed(&k.name)?, k.body.has_parallel_loop())))
            .collect::<Result<_, RunError>>()?;
        Ok(Executor {
            plan,
            kernels,
            arena: Aligned::new(plan.arena_bytes),
            ins: plan.inputs.iter().map(|&t| Aligned::new(plan.tensors[t].bytes())).collect(),
            consts: Constants::new(&plan.constants),
            outs: plan.outputs.iter().map(|&t| Aligned::new(plan.tensors[t].bytes())).collect(),
            pool,
            args: Vec::new(),
        })
    }

    /// Copy `inputs` in, checking their shapes and dtypes.
    pub fn set_inputs(&mut self, inputs: &[Tensor]) -> Result<(), RunError> {
        self.plan.check_inputs(inputs)?;
        for (i, given) in inputs.iter().enumerate() {
            self.ins[i].bytes_mut().copy_from_slice(given.bytes());
        }
        Ok(())
    }

    /// Run every kernel once, in order; the microseconds each call took.
    pub fn run_timed(&mut self) -> Result<Vec<f64>, RunError> {
        let mut times = Vec::with_capacity(self.plan.calls.len());
        for i in 0..self.plan.calls.len() {
            let t = std::time::Instant::now();
            self.run_call(i)?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(times)
    }

    /// Run every kernel once, in order; stops at the first kernel that fails
    /// (an index out of range), whose error names it.
    pub fn run(&mut self) -> Result<(), RunError> {
        for i in 0..self.plan.calls.len() {
            self.run_call(i)?;
        }
        Ok(())
    }

    fn run_call(&mut self, index: usize) -> Result<(), RunError> {
        let arena = self.arena.ptr();
        let consts = self.consts.buf.as_mut_ptr();
        let call = &self.plan.calls[index];
        self.args.clear();
        for &t in &call.args {
            self.args.push(match self.plan.tensors[t].storage {
                Storage::Input(i) => self.ins[i].ptr(),
                Storage::Output(i) => self.outs[i].ptr(),
                // SAFETY: each constant's offset lies within the constants' buffer.
                Storage::Constant(i) => unsafe { consts.add(self.consts.offsets[i]) },
                // SAFETY: offsets come from the memory plan, within `arena_bytes`.
                Storage::Arena { offset } => unsafe { arena.add(offset) },
            });
        }
        let (k, parallel) = self.kernels[call.kernel];
        // SAFETY: the arguments match the kernel's parameters (built from the same plan),
        // and task slices write disjoint parts of the outputs (the kernel ABI).
        let status = unsafe {
            if parallel {
                self.pool.run(k, &self.args)
            } else {
                k(self.args.as_ptr(), 0, 1)
            }
        };
        if status != 0 {
            return Err(RunError::Kernel { kernel: self.plan.kernels[call.kernel].name.clone(), status });
        }
        Ok(())
    }

    /// The outputs of the last run.
    pub fn outputs(&self) -> Vec<Tensor> {
        self.plan
            .outputs
            .iter()
            .zip(&self.outs)
            .filter_map(|(&t, buf)| {
                let slot = &self.plan.tensors[t];
                Tensor::from_bytes(slot.dtype, slot.shape.clone(), buf.bytes().to_vec())
            })
            .collect()
    }
}

/// The plan's kernels compiled in process for the CPU `target`: LLVM's JIT,
/// or C into a shared object for `c`. A target whose features this CPU
/// lacks is refused (its code would die of SIGILL).
pub fn compile_in_process(plan: &ExecutorPlan, target: &str) -> Result<Box<dyn KernelLibrary>, RunError> {
    let description = crate::target::TargetDescription::resolve(target);
    if let Some(feature) = description.first_missing_on_this_cpu() {
        return Err(RunError::Target {
            message: format!(
                "target `{target}` compiles for the CPU feature `{feature}`, which this CPU lacks; \
                 run it with `--target \"llvm -mcpu=native\"` here, or on a CPU that has it"
            ),
        });
    }
    if target.trim() == "c" {
        return Ok(Box::new(super::c_library::CLibrary::build(&plan.kernels, 2)?));
    }
    llvm_jit(plan, target)
}

#[cfg(feature = "llvm")]
fn llvm_jit(plan: &ExecutorPlan, target: &str) -> Result<Box<dyn KernelLibrary>, RunError> {
    let message = |e: &dyn std::fmt::Display| RunError::Target { message: e.to_string() };
    let target = crate::codegen::llvm::LlvmTarget::parse(target).map_err(|e| message(&e))?;
    Ok(Box::new(crate::codegen::llvm::Jit::for_target("model", &plan.kernels, &target).map_err(|e| message(&e))?))
}

#[cfg(not(feature = "llvm"))]
fn llvm_jit(_: &ExecutorPlan, _: &str) -> Result<Box<dyn KernelLibrary>, RunError> {
    Err(RunError::Target {
        message: "an LLVM target needs LLVM: this kiln was built without the `llvm` feature (use --target c)".into(),
    })
}

/// Run `plan` once on `inputs` with `threads` threads for parallel kernels.
pub fn run(
    plan: &ExecutorPlan,
    lib: &dyn KernelLibrary,
    inputs: &[Tensor],
    threads: usize,
) -> Result<Vec<Tensor>, RunError> {
    let mut ex = Executor::new(plan, lib, threads)?;
    ex.set_inputs(inputs)?;
    ex.run()?;
    Ok(ex.outputs())
}
