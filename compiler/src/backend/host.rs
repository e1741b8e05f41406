//! Run an [`ExecutorPlan`] in this process: the arena is a host buffer, the
//! kernels come from a [`KernelLibrary`] (the LLVM JIT, or a C library built
//! on the fly), and parallel kernels are spread over scoped threads.
//! Used by the tests and by `kiln run`; shipped binaries use `kiln-runtime`.

use kiln_ir::Tensor;

use super::aot::{ExecutorPlan, Storage, ARENA_ALIGN};
use crate::codegen::PackedKernel;

/// Where compiled kernels come from.
pub trait KernelLibrary {
    /// The packed entry point of kernel `name`.
    fn packed(&self, name: &str) -> Result<PackedKernel, String>;
}

#[cfg(feature = "llvm")]
impl KernelLibrary for crate::codegen::llvm::Jit {
    fn packed(&self, name: &str) -> Result<PackedKernel, String> {
        self.kernel(name).map_err(|e| e.to_string())
    }
}

/// 64 bytes with 64-byte alignment: a `Vec<Block>` is an aligned byte buffer.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; ARENA_ALIGN]);

/// A 64-byte-aligned, zeroed byte buffer.
struct Aligned {
    words: Vec<Block>,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Self {
        Aligned { words: vec![Block([0u8; ARENA_ALIGN]); len.div_ceil(ARENA_ALIGN).max(1)], len }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr() as *mut u8
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
}

/// Run `plan` on `inputs` with `threads` workers per parallel kernel.
pub fn run(
    plan: &ExecutorPlan,
    lib: &dyn KernelLibrary,
    inputs: &[Tensor],
    threads: usize,
) -> Result<Vec<Tensor>, String> {
    if inputs.len() != plan.inputs.len() {
        return Err(format!("the model takes {} input(s), {} given", plan.inputs.len(), inputs.len()));
    }
    for (i, (&t, given)) in plan.inputs.iter().zip(inputs).enumerate() {
        let slot = &plan.tensors[t];
        if given.shape() != slot.shape.as_slice() || given.dtype() != slot.dtype {
            return Err(format!(
                "input {i} (`{}`) must be {:?} {}, got {:?} {}",
                slot.name,
                slot.shape,
                slot.dtype,
                given.shape(),
                given.dtype()
            ));
        }
    }
    let kernels: Vec<PackedKernel> = plan.kernels.iter().map(|k| lib.packed(&k.name)).collect::<Result<_, _>>()?;
    let mut arena = Aligned::new(plan.arena_bytes);
    let mut ins: Vec<Aligned> = inputs
        .iter()
        .map(|t| {
            let mut a = Aligned::new(t.bytes().len());
            a.bytes_mut().copy_from_slice(t.bytes());
            a
        })
        .collect();
    let mut consts: Vec<Aligned> = plan
        .constants
        .iter()
        .map(|t| {
            let mut a = Aligned::new(t.bytes().len());
            a.bytes_mut().copy_from_slice(t.bytes());
            a
        })
        .collect();
    let mut outs: Vec<Aligned> = plan.outputs.iter().map(|&t| Aligned::new(plan.tensors[t].bytes())).collect();
    let arena_ptr = arena.ptr();
    let ptr_of = |t: usize, ins: &mut [Aligned], consts: &mut [Aligned], outs: &mut [Aligned]| -> *mut u8 {
        match plan.tensors[t].storage {
            Storage::Input(i) => ins[i].ptr(),
            Storage::Output(i) => outs[i].ptr(),
            Storage::Constant(i) => consts[i].ptr(),
            // SAFETY: offsets come from the memory plan, within `arena_bytes`.
            Storage::Arena { offset } => unsafe { arena_ptr.add(offset) },
        }
    };
    for call in &plan.calls {
        let args: Vec<*mut u8> = call.args.iter().map(|&t| ptr_of(t, &mut ins, &mut consts, &mut outs)).collect();
        let k = kernels[call.kernel];
        let n = threads.max(1) as i64;
        if n == 1 {
            // SAFETY: the arguments match the kernel's parameters (built from the same plan).
            unsafe { k(args.as_ptr(), 0, 1) };
        } else {
            let addr = args.as_ptr() as usize;
            std::thread::scope(|s| {
                for task in 0..n {
                    // SAFETY: tasks write disjoint slices of the outputs (the kernel ABI).
                    s.spawn(move || unsafe { k(addr as *const *mut u8, task, n) });
                }
            });
        }
    }
    Ok(plan
        .outputs
        .iter()
        .zip(&outs)
        .filter_map(|(&t, buf)| {
            let slot = &plan.tensors[t];
            Tensor::from_bytes(slot.dtype, slot.shape.clone(), buf.bytes().to_vec())
        })
        .collect())
}
