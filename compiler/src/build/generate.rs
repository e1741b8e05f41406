//! From a prepared module to [`Artifacts`]: the passes, lowering (or the
//! kernel cache's record of it), the kernel objects through LLVM (or the
//! cache), the weights' object, and the generated glue, C API and report.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;

use kiln_ir::relay::IRModule;

use super::*;

impl Build {
    /// Compile the prepared module `m`, its kernels scheduled by the tuning
    /// `knobs`; with `out_dir`, its kernel objects go through the kernel
    /// cache there.
    pub(super) fn generate_with(
        &self,
        m: IRModule,
        dump_ir: Option<PathBuf>,
        knobs: BTreeMap<String, crate::schedule::Knobs>,
        out_dir: Option<&Path>,
    ) -> Result<Artifacts, Error> {
        // What steers lowering and scheduling besides the fused module (the
        // lowered-module entries of the kernel cache are keyed by both).
        let mut settings = std::collections::hash_map::DefaultHasher::new();
        (&knobs, &self.target, self.opt_level, &self.disabled, &self.name, self.precision).hash(&mut settings);
        let settings = settings.finish();
        let mut ctx = PassContext::new()
            .with_opt_level(self.opt_level)
            .with_extension(crate::schedule::ScheduleTuning::applying(knobs));
        ctx.disabled = self.disabled.clone();
        // Tiles and packed layouts sized for the CPU the target names.
        crate::target::configure_context(&self.target, &mut ctx);
        self.precision.configure(&self.target, &mut ctx).map_err(|e| self.model_err(e))?;
        let timing = Arc::new(crate::transform::instrument::PassTimingInstrument::new());
        let mut instruments: Vec<Arc<dyn PassInstrument>> = vec![timing.clone()];
        let dumping = dump_ir.is_some();
        if let Some(dir) = dump_ir {
            instruments.push(Arc::new(DumpIr::new(dir)));
        }
        let ctx = Arc::new(ctx.with_instruments(instruments));
        if is_cuda_target(&self.target) {
            return self.generate_cuda(m, ctx, timing);
        }
        let pipelines = Pipelines::cpu().map_err(|e| self.compile_err(e))?;
        let description = TargetDescription::resolve(&self.target);
        // Objects of LLVM targets go through the kernel cache under `out_dir`.
        let cache = out_dir
            .filter(|_| self.target.trim() != "c")
            .map(|d| kernel_cache::KernelCache::new(d, &self.name, &description));
        // Pictures need the scheduled kernels, and an IR dump the TIR passes'
        // output: a build drawing or dumping lowers.
        let lowering_cache = cache.as_ref().filter(|_| !self.viz && !dumping).map(|c| (c, settings));
        let (fused, mut plan, mut timings, lowering) =
            self.passes_and_plan(m, ctx, &timing, &pipelines, lowering_cache)?;
        // Kernel symbols carry the model's name: several models link into one binary.
        for k in &mut plan.kernels {
            k.name = format!("{}_{}", self.name, k.name);
        }
        if let Some(reused) = &lowering.reused {
            // The lowered kernels stand for the scheduled ones (the entry was
            // checked to name them): what the glue and the report read of
            // those comes from the entry.
            for (k, facts) in plan.kernels.iter_mut().zip(&reused.kernels) {
                k.attrs.insert(glue::PARALLEL_ATTR.into(), facts.parallel.to_string());
                if let Some(note) = &facts.tuning {
                    k.attrs.insert("tuning".into(), note.clone());
                }
            }
        }
        let pictures = if self.viz {
            let graph = crate::viz::KernelGraph::of_module(&self.name, &fused, Some(&plan), None)
                .map_err(|m| self.model_err(m))?;
            Some((crate::viz::graph_svg(&graph), crate::viz::memory_svg(&self.name, &plan)))
        } else {
            None
        };
        let symbols = glue::constant_symbols(&self.name, &plan);
        let c_api = c_api::c_api_source(&self.name, &plan, &description);
        let header = c_api::c_header(&self.name, &plan);
        let (objects, weights_in_library, c_source) = if self.target.trim() == "c" {
            let src = crate::codegen::c::codegen_module_with_data(&plan.kernels, &symbols)
                .map_err(|e| self.model_err(e.to_string()))?;
            (Vec::new(), false, Some(src))
        } else {
            // Where kiln writes the library itself, the weights' object is
            // streamed into it then (`library::archive`), never made here.
            let library = out_dir.is_some() && super::library::archives_from_memory(&self.target);
            let (objects, streamed, reuse) = std::thread::scope(|scope| {
                if let Some(dir) = out_dir.filter(|_| !c_api.is_empty()) {
                    scope.spawn(|| prebuild_c_api(dir, &self.name, &c_api, &header, &self.target));
                }
                self.llvm_objects(&plan, &symbols, cache.as_ref(), lowering, library)
            })?;
            timings.push_str(&reuse);
            (objects, streamed, None)
        };
        let glue = glue::rust_glue(&self.name, &plan, "::kiln_runtime", self.runtime_std, &description);
        let report = report_json(&self.name, &description, &plan);
        Ok(Artifacts {
            name: self.name.clone(),
            objects,
            weights_in_library,
            c_source,
            ptx: None,
            device_weights: None,
            glue,
            header,
            c_api,
            report,
            pictures,
            timings,
            plan,
            reused: false,
        })
    }

    /// The passes added with [`Build::pass`], then type inference.
    fn user_passes(&self, m: IRModule, ctx: &PassContext) -> Result<IRModule, PassError> {
        if self.passes.is_empty() {
            return Ok(m);
        }
        let mut passes = self.passes.clone();
        passes.push(crate::transform::registry::lookup("InferType")?);
        apply(&Sequential::new("UserPasses", passes)?, m, ctx)
    }

    /// The user's passes, the target's pipelines and the executor plan, in
    /// one entered `ctx`; with the pass timing report, rendered before the
    /// context is left (which clears it). With a kernel `cache` (and the
    /// hash of the build's other settings), a fused module found among its
    /// lowered-module entries is planned without the TIR passes: its
    /// kernels come back as lowered, unscheduled, and their objects from
    /// the cache.
    fn passes_and_plan(
        &self,
        m: IRModule,
        ctx: Arc<PassContext>,
        timing: &crate::transform::instrument::PassTimingInstrument,
        pipelines: &Pipelines,
        cache: Option<(&kernel_cache::KernelCache, u64)>,
    ) -> Result<(IRModule, ExecutorPlan, String, Lowering), Error> {
        ctx.scope(|ctx| {
            let m = self.user_passes(m, ctx)?;
            let fused = apply(&pipelines.relay, m, ctx)?;
            let key = cache.map(|(c, settings)| c.lowered_key(&fused, settings));
            let mut reused = cache.zip(key.as_deref()).and_then(|((c, _), k)| c.lowered(k));
            let mut plan = None;
            if let Some(entry) = &reused {
                let lowered = plan_executor(&fused).map_err(|e| PassError::Failed {
                    pass: "LowerTE".into(),
                    context: String::new(),
                    error: BodyError::new(e),
                })?;
                // An entry that does not name these kernels (in order) is a miss.
                let names = |p: &ExecutorPlan| {
                    p.kernels.iter().map(|k| format!("{}_{}", self.name, k.name)).collect::<Vec<_>>()
                };
                if names(&lowered).iter().eq(entry.kernels.iter().map(|f| &f.name)) {
                    plan = Some(lowered);
                } else {
                    reused = None;
                }
            }
            let plan = match plan {
                Some(plan) => plan,
                None => lower_and_schedule(&fused, ctx, &pipelines.tir)?,
            };
            Ok((fused, plan, timing.render(), Lowering { key, reused }))
        })
        .map_err(|e| self.compile_err(e))
    }

    /// The objects of an LLVM target: the weights' (`symbols`) first —
    /// unless `library` (the static library is written by kiln, which then
    /// streams the weights' object into it, where it writes that object
    /// itself; the flag returned says so) — then the kernels' groups: all of
    /// them from `cache` where `lowering` found the fused module's entry,
    /// else each from `cache` where it holds it, else compiled (in parallel)
    /// and stored there. Also a line for the timings saying how many were reused.
    #[cfg(feature = "llvm")]
    fn llvm_objects(
        &self,
        plan: &ExecutorPlan,
        symbols: &[(String, &[u8])],
        cache: Option<&kernel_cache::KernelCache>,
        lowering: Lowering,
        library: bool,
    ) -> Result<(Vec<Vec<u8>>, bool, String), Error> {
        use crate::codegen::llvm::{compile_object_jobs, partition_kernels, DataSymbol, LlvmTarget, ObjectJob};
        let target = LlvmTarget::parse(&self.target).map_err(|e| self.model_err(e.to_string()))?;
        let data: Vec<DataSymbol> = symbols.iter().map(|(s, b)| DataSymbol { symbol: s.clone(), bytes: b }).collect();
        let start = std::time::Instant::now();
        let streamed = library && crate::codegen::llvm::writes_data_object(&target);
        let data_job = ObjectJob { module: format!("{}.data", self.name), funcs: &[], data: &data };
        let data_jobs = if streamed { Vec::new() } else { vec![data_job] };
        if let Some(reused) = lowering.reused {
            // The fused module compiled before: its kernel objects as they were.
            let mut all = compile_object_jobs(&data_jobs, &target, 1).map_err(|e| self.model_err(e.to_string()))?;
            let weights = if streamed {
                "weights' object streamed into the library".to_string()
            } else {
                format!("weights' object {:.0} ms", start.elapsed().as_secs_f64() * 1e3)
            };
            let line = format!(
                "kernel objects: 0 compiled, {} reused from the kernel cache (fused module unchanged: no TIR pass \
                 ran); {weights}\n",
                reused.objects.len(),
            );
            all.extend(reused.objects);
            return Ok((all, streamed, line));
        }
        // Cargo's job count where it runs the build script, else this machine's cores.
        let threads = env_var("NUM_JOBS", false)
            .and_then(|n| n.parse().ok())
            .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
            .unwrap_or(1);
        let parts = partition_kernels(&plan.kernels);
        let keys: Vec<Option<String>> = parts.iter().map(|p| cache.map(|c| c.key(p))).collect();
        let mut objects: Vec<Option<Vec<u8>>> =
            keys.iter().map(|k| k.as_deref().and_then(|k| cache.and_then(|c| c.get(k)))).collect();
        let reused = objects.iter().filter(|o| o.is_some()).count();
        let mut jobs = data_jobs;
        let missing: Vec<usize> = (0..parts.len()).filter(|&k| objects[k].is_none()).collect();
        for &k in &missing {
            jobs.push(ObjectJob { module: format!("{}.{k}", self.name), funcs: &parts[k], data: &[] });
        }
        let llvm_start = std::time::Instant::now();
        let mut compiled =
            compile_object_jobs(&jobs, &target, threads).map_err(|e| self.model_err(e.to_string()))?.into_iter();
        let llvm_ms = llvm_start.elapsed().as_secs_f64() * 1e3;
        let data_object = if streamed { None } else { Some(compiled.next().unwrap_or_default()) };
        for (&k, object) in missing.iter().zip(compiled) {
            if let (Some(c), Some(key)) = (cache, &keys[k]) {
                // A cache that cannot be written only costs the next build its time.
                let _ = c.put(key, &object);
            }
            objects[k] = Some(object);
        }
        if let Some(c) = cache {
            let object_keys: Vec<String> = keys.iter().flatten().cloned().collect();
            if let Some(lowered_key) = &lowering.key {
                let kernels: Vec<kernel_cache::KernelFacts> =
                    plan.kernels.iter().map(kernel_cache::KernelFacts::of).collect();
                // As with objects, an entry that cannot be written only costs the next build its time.
                let _ = c.put_lowered(lowered_key, &object_keys, &kernels);
            }
            c.prune(&object_keys, lowering.key.as_deref().unwrap_or(""));
        }
        let mut all: Vec<Vec<u8>> = data_object.into_iter().collect();
        all.extend(objects.into_iter().flatten());
        let line = format!(
            "kernel objects: {} compiled, {reused} reused from the kernel cache; LLVM {llvm_ms:.0} ms on {} thread(s)\n",
            missing.len(),
            threads.clamp(1, jobs.len().max(1))
        );
        Ok((all, streamed, line))
    }

    #[cfg(not(feature = "llvm"))]
    fn llvm_objects(
        &self,
        _: &ExecutorPlan,
        _: &[(String, &[u8])],
        _: Option<&kernel_cache::KernelCache>,
        _: Lowering,
        _: bool,
    ) -> Result<(Vec<Vec<u8>>, bool, String), Error> {
        Err(self.model_err(format!("target `{}` needs kiln's `llvm` feature; use `.target(\"c\")`", self.target)))
    }

    /// A `cuda` build: GPU-scheduled kernels as PTX, glue around
    /// `kiln_runtime::cuda::CudaModel`, the weights as a device-layout blob.
    #[cfg(feature = "llvm")]
    fn generate_cuda(
        &self,
        m: IRModule,
        ctx: Arc<PassContext>,
        timing: Arc<crate::transform::instrument::PassTimingInstrument>,
    ) -> Result<Artifacts, Error> {
        let target =
            crate::codegen::llvm::CudaTarget::parse(&self.target).map_err(|e| self.model_err(e.to_string()))?;
        let pipelines = Pipelines::gpu().map_err(|e| self.compile_err(e))?;
        let (_, mut plan, timings, _) = self.passes_and_plan(m, ctx, &timing, &pipelines, None)?;
        for k in &mut plan.kernels {
            k.name = format!("{}_{}", self.name, k.name);
        }
        let ptx = crate::codegen::llvm::compile_ptx(&self.name, &plan.kernels, &target)
            .map_err(|e| self.model_err(e.to_string()))?;
        let glue =
            glue::cuda_glue(&self.name, &plan, &ptx, "::kiln_runtime").map_err(|e| self.model_err(e.to_string()))?;
        Ok(Artifacts {
            name: self.name.clone(),
            objects: Vec::new(),
            weights_in_library: false,
            c_source: None,
            ptx: Some(ptx),
            device_weights: Some(glue::cuda_weights(&plan)),
            glue,
            header: String::new(),
            c_api: String::new(),
            pictures: None,
            report: report_json(&self.name, &TargetDescription::resolve(&self.target), &plan),
            timings,
            plan,
            reused: false,
        })
    }

    #[cfg(not(feature = "llvm"))]
    fn generate_cuda(
        &self,
        _: IRModule,
        _: Arc<PassContext>,
        _: Arc<crate::transform::instrument::PassTimingInstrument>,
    ) -> Result<Artifacts, Error> {
        Err(self.model_err("target `cuda` needs kiln's `llvm` feature (PTX comes from LLVM's NVPTX backend)"))
    }
}

/// How a build's kernels were lowered: the key of its fused module among
/// the kernel cache's lowered-module entries (with a cache), and that
/// entry's kernels where it was found (the TIR passes did not run).
#[derive(Debug)]
#[cfg_attr(not(feature = "llvm"), allow(dead_code))]
struct Lowering {
    key: Option<String>,
    reused: Option<kernel_cache::LoweredKernels>,
}
