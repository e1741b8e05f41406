//! An [`ExecutorPlan`] on an NVIDIA GPU: one block of device memory holds the
//! planned arena, the inputs, the outputs and the weights at fixed offsets
//! ([`DeviceLayout`]); every kernel's launch shape comes from the GPU schedule.
//! `CudaExecutor` (feature `cuda`) runs it through `kiln-runtime`'s
//! `CudaModel`; the layout and launch tables are also what the generated glue
//! of a `cuda` build embeds.

use super::aot::{ExecutorPlan, Storage};
use super::RunError;

/// Device allocations are aligned like cudaMalloc's (256 bytes).
pub const DEVICE_ALIGN: usize = 256;

/// Where each tensor of a plan lives in the model's device memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLayout {
    /// Total bytes of device memory.
    pub bytes: usize,
    /// Byte offset of every tensor of the plan (indexed like `plan.tensors`).
    pub offsets: Vec<usize>,
    /// Byte offset of every constant (indexed like `plan.constants`).
    pub constant_offsets: Vec<usize>,
}

/// One kernel: name, blocks, threads per block.
pub type LaunchShape = (String, u32, u32);

/// Lay out `plan` in device memory: the arena first (its offsets unchanged),
/// then the inputs, the outputs and the constants.
pub fn device_layout(plan: &ExecutorPlan) -> DeviceLayout {
    let align = |n: usize| n.div_ceil(DEVICE_ALIGN) * DEVICE_ALIGN;
    let mut next = align(plan.arena_bytes);
    let mut place = |bytes: usize| {
        let at = next;
        next = align(next + bytes.max(1));
        at
    };
    let inputs: Vec<usize> = plan.inputs.iter().map(|&t| place(plan.tensors[t].bytes())).collect();
    let outputs: Vec<usize> = plan.outputs.iter().map(|&t| place(plan.tensors[t].bytes())).collect();
    let constant_offsets: Vec<usize> = plan.constants.iter().map(|c| place(c.bytes().len())).collect();
    let offsets = plan
        .tensors
        .iter()
        .map(|t| match t.storage {
            Storage::Arena { offset } => offset,
            Storage::Input(i) => inputs[i],
            Storage::Output(i) => outputs[i],
            Storage::Constant(i) => constant_offsets[i],
        })
        .collect();
    DeviceLayout { bytes: next.max(DEVICE_ALIGN), offsets, constant_offsets }
}

/// Every kernel's launch shape, from the GPU schedule's `gpu.grid`/`gpu.block`.
pub fn launch_shapes(plan: &ExecutorPlan) -> Result<Vec<LaunchShape>, RunError> {
    plan.kernels
        .iter()
        .map(|k| {
            let dim = |key: &str| -> Result<u32, RunError> {
                k.attrs.get(key).and_then(|v| v.parse().ok()).ok_or_else(|| RunError::MissingKernel {
                    kernel: k.name.clone(),
                    message: format!("no `{key}`: it was not scheduled for the GPU"),
                })
            };
            Ok((k.name.clone(), dim("gpu.grid")?, dim("gpu.block")?))
        })
        .collect()
}

/// Each call of the plan as (kernel index, argument byte offsets).
pub fn launches(plan: &ExecutorPlan, layout: &DeviceLayout) -> Vec<(usize, Vec<usize>)> {
    plan.calls.iter().map(|c| (c.kernel, c.args.iter().map(|&t| layout.offsets[t]).collect())).collect()
}

/// Whether `ptx` holds every kernel of `plan` (PTX built elsewhere, from the
/// same model and compiler, e.g. for a GPU machine without LLVM).
pub fn check_ptx(plan: &ExecutorPlan, ptx: &str) -> Result<(), RunError> {
    match plan.kernels.iter().find(|k| !ptx.contains(&format!(".entry {}(", k.name))) {
        Some(k) => Err(RunError::MissingKernel {
            kernel: k.name.clone(),
            message: "not in the PTX: it was not built from this model".into(),
        }),
        None => Ok(()),
    }
}

/// A GPU runtime failure as a [`RunError`].
#[cfg(feature = "cuda")]
fn device(e: impl std::fmt::Display) -> RunError {
    RunError::Device { message: e.to_string() }
}

/// A plan ready to run repeatedly on the GPU: PTX loaded, memory allocated,
/// weights copied once.
#[cfg(feature = "cuda")]
pub struct CudaExecutor<'p> {
    plan: &'p ExecutorPlan,
    layout: DeviceLayout,
    model: kiln_runtime::cuda::CudaModel,
}

#[cfg(feature = "cuda")]
impl std::fmt::Debug for CudaExecutor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaExecutor").field("device_bytes", &self.layout.bytes).finish_non_exhaustive()
    }
}

#[cfg(feature = "cuda")]
impl<'p> CudaExecutor<'p> {
    /// Load `ptx` (compiled from `plan`'s kernels) and copy the weights to the device.
    pub fn new(plan: &'p ExecutorPlan, ptx: &str) -> Result<Self, RunError> {
        use kiln_runtime::cuda::{CudaKernelSpec, CudaLaunch, CudaModel};
        let layout = device_layout(plan);
        let shapes = launch_shapes(plan)?;
        let specs: Vec<CudaKernelSpec> =
            shapes.iter().map(|(n, g, b)| CudaKernelSpec { name: n, grid: *g, block: *b }).collect();
        let calls = launches(plan, &layout);
        let ls: Vec<CudaLaunch> = calls.iter().map(|(k, a)| CudaLaunch { kernel: *k, args: a }).collect();
        let mut model = CudaModel::new(ptx, &specs, layout.bytes, &ls).map_err(device)?;
        for (c, &at) in plan.constants.iter().zip(&layout.constant_offsets) {
            model.write(at, c.bytes()).map_err(device)?;
        }
        Ok(CudaExecutor { plan, layout, model })
    }

    /// The GPU's name.
    pub fn device_name(&self) -> String {
        self.model.device_name().unwrap_or_else(|e| e.to_string())
    }

    /// Copy `inputs` to the device, checking their shapes and dtypes.
    pub fn set_inputs(&mut self, inputs: &[kiln_ir::Tensor]) -> Result<(), RunError> {
        self.plan.check_inputs(inputs)?;
        for (&t, given) in self.plan.inputs.iter().zip(inputs) {
            self.model.write(self.layout.offsets[t], given.bytes()).map_err(device)?;
        }
        Ok(())
    }

    /// From now on, replay the launch sequence as one CUDA graph.
    pub fn capture_graph(&mut self) -> Result<(), RunError> {
        self.model.capture_graph().map_err(device)
    }

    /// Launch every kernel once, in order.
    pub fn run(&mut self) -> Result<(), RunError> {
        self.model.run().map_err(device)
    }

    /// Each plan call's time in microseconds (see `CudaModel::time_launches`;
    /// it leaves the outputs unspecified).
    pub fn time_calls(&mut self, repeats: usize) -> Result<Vec<f64>, RunError> {
        self.model.time_launches(repeats).map_err(device)
    }

    /// Copy the outputs back.
    pub fn outputs(&mut self) -> Result<Vec<kiln_ir::Tensor>, RunError> {
        let mut out = Vec::new();
        for &t in &self.plan.outputs {
            let slot = &self.plan.tensors[t];
            let mut bytes = vec![0u8; slot.bytes()];
            self.model.read(self.layout.offsets[t], &mut bytes).map_err(device)?;
            out.push(
                kiln_ir::Tensor::from_bytes(slot.dtype, slot.shape.clone(), bytes)
                    .ok_or_else(|| RunError::Device { message: format!("output `{}`: malformed bytes", slot.name) })?,
            );
        }
        Ok(out)
    }
}
