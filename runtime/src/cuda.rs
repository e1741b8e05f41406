//! Feature `cuda`: run a kiln model on an NVIDIA GPU through the CUDA driver
//! API (cudarc, loaded dynamically: building needs no CUDA installation, and a
//! machine without a driver gets an `Err`, not a crash).
//!
//! The compiler lays the model out in one block of device memory — the
//! planned arena, the inputs, the outputs and the weights at fixed byte
//! offsets — and fixes every kernel's grid and block at build time. A
//! [`CudaModel`] loads the PTX once, allocates that block once, and then each
//! run is: copy the inputs in, launch the kernels in order on one stream,
//! copy the outputs out. Optionally ([`CudaModel::capture_graph`]) the launch
//! sequence is captured once into a CUDA graph and each run replays it: one
//! launch instead of one per kernel, which is most of a batch-1 model's time.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

/// A CUDA failure, with the driver's own text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError(pub String);

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA: {}", self.0)
    }
}

impl std::error::Error for CudaError {}

fn cuda_err(what: &str, e: impl std::fmt::Display) -> CudaError {
    CudaError(format!("{what}: {e}"))
}

/// One kernel of the PTX module and its launch shape.
#[derive(Clone, Copy, Debug)]
pub struct CudaKernelSpec<'a> {
    /// The kernel's entry in the PTX.
    pub name: &'a str,
    /// Blocks per launch (a one-dimensional grid).
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
}

/// One launch: a kernel and the byte offset of each argument in device memory.
#[derive(Clone, Copy, Debug)]
pub struct CudaLaunch<'a> {
    /// Index of the kernel in the model's `KERNELS`.
    pub kernel: usize,
    /// Byte offset in the model's device memory of each argument buffer, in the kernel's parameter order.
    pub args: &'a [usize],
}

/// A model resident on the GPU.
pub struct CudaModel {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: Vec<(CudaFunction, LaunchConfig)>,
    memory: CudaSlice<u8>,
    launches: Vec<(usize, Vec<u64>)>,
    /// The launch sequence captured once and replayed by `run` (see `capture_graph`).
    graph: Option<cudarc::driver::CudaGraph>,
}

impl std::fmt::Debug for CudaModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaModel")
            .field("kernels", &self.kernels.len())
            .field("device_bytes", &self.memory.len())
            .field("graph", &self.graph.is_some())
            .finish_non_exhaustive()
    }
}

/// Whether this machine has a CUDA driver and at least one device (never panics).
pub fn cuda_available() -> Result<(), CudaError> {
    // SAFETY: only probes whether libcuda can be loaded.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError("no CUDA driver (libcuda.so) on this machine".into()));
    }
    let count =
        guarded("counting devices", || CudaContext::device_count().map_err(|e| cuda_err("cuDeviceGetCount", e)))?;
    if count < 1 {
        return Err(CudaError("the CUDA driver sees no device".into()));
    }
    Ok(())
}

/// Run `f`, turning a panic inside cudarc (a missing driver symbol) into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, CudaError>) -> Result<T, CudaError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(CudaError(format!("{what}: the CUDA driver library is unusable"))))
}

impl CudaModel {
    /// Load `ptx` on device 0, allocate `device_bytes` of device memory, and
    /// resolve every kernel. `launches` are checked against the kernels and
    /// the memory size here, so that `run` cannot address outside it.
    pub fn new(
        ptx: &str,
        kernels: &[CudaKernelSpec<'_>],
        device_bytes: usize,
        launches: &[CudaLaunch<'_>],
    ) -> Result<CudaModel, CudaError> {
        cuda_available()?;
        guarded("loading the model", || {
            let ctx = CudaContext::new(0).map_err(|e| cuda_err("creating a context on device 0", e))?;
            // A stream of its own: the legacy default stream cannot be captured
            // into a graph. Copies and launches are ordered on it.
            let stream = ctx.new_stream().map_err(|e| cuda_err("creating a stream", e))?;
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
                .map_err(|e| cuda_err("loading the PTX module", e))?;
            let mut resolved = Vec::with_capacity(kernels.len());
            for k in kernels {
                let f = module.load_function(k.name).map_err(|e| cuda_err(&format!("kernel `{}`", k.name), e))?;
                let cfg = LaunchConfig {
                    grid_dim: (k.grid.max(1), 1, 1),
                    block_dim: (k.block.max(1), 1, 1),
                    shared_mem_bytes: 0,
                };
                resolved.push((f, cfg));
            }
            let memory = stream
                .alloc_zeros::<u8>(device_bytes.max(1))
                .map_err(|e| cuda_err(&format!("allocating {device_bytes} bytes of device memory"), e))?;
            let base = {
                let (ptr, _sync) = memory.device_ptr(&stream);
                ptr
            };
            let mut checked = Vec::with_capacity(launches.len());
            for (i, l) in launches.iter().enumerate() {
                if l.kernel >= resolved.len() {
                    return Err(CudaError(format!("launch {i} names kernel {} of {}", l.kernel, resolved.len())));
                }
                if let Some(&o) = l.args.iter().find(|&&o| o >= device_bytes.max(1)) {
                    return Err(CudaError(format!("launch {i}: argument offset {o} is outside {device_bytes} bytes")));
                }
                checked.push((l.kernel, l.args.iter().map(|&o| base + o as u64).collect()));
            }
            Ok(CudaModel { ctx, stream, kernels: resolved, memory, launches: checked, graph: None })
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> Result<String, CudaError> {
        self.ctx.name().map_err(|e| cuda_err("cuDeviceGetName", e))
    }

    fn range(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>, CudaError> {
        let end = offset.checked_add(len).filter(|&e| e <= self.memory.len());
        end.map(|e| offset..e).ok_or_else(|| {
            CudaError(format!("bytes {offset}..{} are outside the model's {} bytes", offset + len, self.memory.len()))
        })
    }

    /// Copy `bytes` to device memory at `offset` (inputs, weights).
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<(), CudaError> {
        let r = self.range(offset, bytes.len())?;
        let mut view = self.memory.slice_mut(r);
        self.stream.memcpy_htod(bytes, &mut view).map_err(|e| cuda_err("copying to the device", e))
    }

    /// Copy device memory at `offset` into `out` (outputs), waiting for the launches before.
    pub fn read(&mut self, offset: usize, out: &mut [u8]) -> Result<(), CudaError> {
        let r = self.range(offset, out.len())?;
        let view = self.memory.slice(r);
        self.stream.memcpy_dtoh(&view, out).map_err(|e| cuda_err("copying from the device", e))?;
        self.stream.synchronize().map_err(|e| cuda_err("synchronizing", e))
    }

    /// Launch every kernel once, in order (or replay the captured graph), and wait for them.
    pub fn run(&mut self) -> Result<(), CudaError> {
        match &self.graph {
            Some(g) => g.launch().map_err(|e| cuda_err("launching the CUDA graph", e))?,
            None => self.enqueue()?,
        }
        self.stream.synchronize().map_err(|e| cuda_err("running the kernels", e))
    }

    /// Capture the launch sequence into a CUDA graph once; from then on `run`
    /// replays it with one launch instead of one per kernel (the launches'
    /// arguments never change: every buffer has its fixed place in the arena).
    pub fn capture_graph(&mut self) -> Result<(), CudaError> {
        if self.graph.is_some() {
            return Ok(());
        }
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        self.stream.synchronize().map_err(|e| cuda_err("synchronizing before a capture", e))?;
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| cuda_err("beginning a graph capture", e))?;
        let enqueued = self.enqueue();
        // End the capture whatever happened, so the stream is usable again.
        let ended = self.stream.end_capture(CUgraphInstantiate_flags(0));
        enqueued?;
        let graph = ended.map_err(|e| cuda_err("ending the graph capture", e))?;
        let graph = graph.ok_or_else(|| CudaError("the graph capture recorded nothing".into()))?;
        graph.upload().map_err(|e| cuda_err("uploading the CUDA graph", e))?;
        self.graph = Some(graph);
        Ok(())
    }

    /// Each launch's time in microseconds, in launch order: the launch enqueued
    /// `repeats` times back to back between two synchronizations, divided by
    /// `repeats` (so the launch overhead is amortized, as in a graph replay).
    /// Kernels whose output aliases an input read their own results when
    /// repeated: run this after the outputs that matter have been read.
    pub fn time_launches(&mut self, repeats: usize) -> Result<Vec<f64>, CudaError> {
        let repeats = repeats.max(1);
        let mut times = Vec::with_capacity(self.launches.len());
        for i in 0..self.launches.len() {
            self.stream.synchronize().map_err(|e| cuda_err("synchronizing", e))?;
            let t = std::time::Instant::now();
            for _ in 0..repeats {
                self.enqueue_one(i)?;
            }
            self.stream.synchronize().map_err(|e| cuda_err("running a kernel", e))?;
            times.push(t.elapsed().as_secs_f64() * 1e6 / repeats as f64);
        }
        Ok(times)
    }

    /// Whether `run` replays a captured graph.
    pub fn uses_graph(&self) -> bool {
        self.graph.is_some()
    }

    /// Enqueue every launch on the stream, in order.
    fn enqueue(&self) -> Result<(), CudaError> {
        (0..self.launches.len()).try_for_each(|i| self.enqueue_one(i))
    }

    /// Enqueue launch `i` on the stream.
    fn enqueue_one(&self, i: usize) -> Result<(), CudaError> {
        let (kernel, args) = &self.launches[i];
        let (f, cfg) = &self.kernels[*kernel];
        let mut b = self.stream.launch_builder(f);
        for a in args {
            b.arg(a);
        }
        // SAFETY: each argument is a device pointer into `memory`, at the offset
        // the compiler planned for a buffer of the size the kernel reads and writes.
        unsafe { b.launch(*cfg) }.map_err(|e| cuda_err("launching a kernel", e))?;
        Ok(())
    }
}
