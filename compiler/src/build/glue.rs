//! The Rust glue `<model>.rs` of a compiled model (the C API is in `c_api`).
//!
//! The glue defines `pub mod <model>` with the model's constants (arena size,
//! shapes), `extern` declarations of the kernels' packed entry points and of
//! the weights in the library's read-only data, and `Model`, whose `run`
//! calls the kernels in the planned order over the arena. Inputs and outputs
//! are fixed-size arrays, so a wrong length is a compile error; `run` never allocates.

use kiln_ir::DataType;
use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote};

use crate::backend::aot::{ExecutorPlan, Storage};
use crate::target::TargetDescription;

/// The Rust element type of a dtype.
pub fn rust_type(t: DataType) -> &'static str {
    match t {
        DataType::F32 => "f32",
        DataType::F16 | DataType::U16 => "u16",
        DataType::F64 => "f64",
        DataType::I64 => "i64",
        DataType::I32 => "i32",
        DataType::I16 => "i16",
        DataType::I8 => "i8",
        DataType::U8 | DataType::Bool => "u8",
        DataType::U32 => "u32",
        DataType::U64 => "u64",
    }
}

/// A model's name for something as identifier text (`x`, `input.1` →
/// `input_1`, `0` → `_0`), keywords left as they are ([`rust_ident`] makes
/// them raw identifiers).
pub fn sanitize(name: &str, fallback: &str) -> String {
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() {
        s = fallback.to_string();
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// The symbol of constant `i` of `model` in the library.
pub fn constant_symbol(model: &str, i: usize) -> String {
    format!("kiln_{model}_c{i}")
}

/// Every constant of `plan` under its [`constant_symbol`], with its bytes:
/// the weights' object's contents.
pub fn constant_symbols<'a>(model: &str, plan: &'a ExecutorPlan) -> Vec<(String, &'a [u8])> {
    plan.constants.iter().enumerate().map(|(i, c)| (constant_symbol(model, i), c.bytes())).collect()
}

/// `<model>.rs`.
pub fn rust_glue(
    model: &str,
    plan: &ExecutorPlan,
    runtime: &str,
    with_std: bool,
    target: &TargetDescription,
) -> String {
    let rt = runtime_path(runtime);
    let m = rust_ident(model, "model");
    let io = Io::of(plan);
    let arena_bytes = lit(plan.arena_bytes);
    let target_doc = format!(" The target the kernels were compiled for (CPU `{}`).", target.cpu);
    let (target_name, features) = (&target.target, &target.features);
    let constants: Vec<TokenStream> = io
        .all(plan)
        .map(|(k, t, n)| {
            let slot = &plan.tensors[t];
            let what = if k < plan.inputs.len() { "Input" } else { "Output" };
            let doc = format!(" {what} `{}`: shape {:?}, {}.", slot.name, slot.shape, slot.dtype);
            let (shape_name, len_name) = (const_name(n, "SHAPE"), const_name(n, "LEN"));
            let (rank, len) = (lit(slot.shape.len()), lit(slot.shape.iter().product::<usize>()));
            let dims = slot.shape.iter().map(|&d| lit(d));
            quote! {
                #[doc = #doc]
                pub const #shape_name: [usize; #rank] = [#(#dims),*];
                pub const #len_name: usize = #len;
            }
        })
        .collect();
    let kernel_decls = plan.kernels.iter().map(|k| {
        let f = format_ident!("{}_packed", k.name);
        quote! { fn #f(args: *const *mut u8, task_id: i64, num_tasks: i64) -> i32; }
    });
    let constant_decls = plan.constants.iter().enumerate().map(|(i, c)| {
        let (sym, len) = (format_ident!("{}", constant_symbol(model, i)), lit(c.bytes().len()));
        quote! { static #sym: [u8; #len]; }
    });
    let params = io.params(plan);
    let call_args = io.call_args();
    let sig = io.raw_params(plan);
    let calls = plan.calls.iter().map(|call| {
        let k = &plan.kernels[call.kernel];
        let args = call.args.iter().map(|&t| match plan.tensors[t].storage {
            Storage::Input(i) => {
                let n = &io.inputs[i];
                quote!(#n as *mut u8)
            }
            Storage::Output(i) => {
                let n = &io.outputs[i];
                quote!(#n as *mut u8)
            }
            Storage::Constant(i) => {
                let sym = format_ident!("{}", constant_symbol(model, i));
                quote!(core::ptr::addr_of!(#sym) as *mut u8)
            }
            Storage::Arena { offset } => {
                let offset = lit(offset);
                quote!(arena.add(#offset))
            }
        });
        let (name, f, parallel) = (&k.name, format_ident!("{}_packed", k.name), runs_parallel(k));
        quote! { #rt::Error::check(#name, call(#f, &[#(#args),*], #parallel))?; }
    });
    let owned = with_std.then(|| {
        quote! {
            /// The compiled model with its own arena and thread pool.
            pub struct OwnedModel { arena: #rt::OwnedArena, pool: #rt::ThreadPool }
            impl OwnedModel {
                /// A model with one worker thread per available core; an error on a
                /// CPU without one of `CPU_FEATURES`.
                pub fn new() -> Result<Self, #rt::Error> {
                    Self::with_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
                }
                /// A model whose parallel kernels use `threads` threads.
                pub fn with_threads(threads: usize) -> Result<Self, #rt::Error> {
                    #rt::check_cpu(CPU_FEATURES, TARGET)?;
                    Ok(OwnedModel { arena: #rt::OwnedArena::new(ARENA_BYTES), pool: #rt::ThreadPool::new(threads) })
                }
                /// Run the model; parallel kernels are spread over the pool. An error (an
                /// index in the inputs out of range) names the kernel that found it.
                pub fn run(&mut self, #(#params),*) -> Result<(), #rt::Error> {
                    let arena = self.arena.bytes_mut().as_mut_ptr();
                    let pool = &self.pool;
                    unsafe {
                        run_kernels(arena, #(#call_args,)* &mut |k, args, parallel| {
                            if parallel { pool.run(k, args) } else { #rt::run_serial(k, args) }
                        })
                    }
                }
            }
        }
    });
    let file = quote! {
        #[allow(dead_code, non_upper_case_globals, clippy::all, unused_unsafe, missing_debug_implementations)]
        pub mod #m {
            /// Bytes of scratch memory one `Model` needs.
            pub const ARENA_BYTES: usize = #arena_bytes;
            #[doc = #target_doc]
            pub const TARGET: &str = #target_name;
            /// The instruction-set features the kernels use; creating a model on a
            /// CPU without one of them fails instead of dying of SIGILL.
            pub const CPU_FEATURES: &[&str] = &[#(#features),*];
            #(#constants)*
            unsafe extern "C" {
                #(#kernel_decls)*
                #(#constant_decls)*
            }
            /// The compiled model over a caller-provided arena (no allocation, `no_std`).
            pub struct Model<'a> { arena: &'a mut [u8] }
            impl<'a> Model<'a> {
                /// A model using `buffer` (at least `ARENA_BYTES + 63` bytes) as its arena;
                /// an error on a CPU without one of `CPU_FEATURES`.
                pub fn new(buffer: &'a mut [u8]) -> Result<Self, #rt::Error> {
                    #rt::check_cpu(CPU_FEATURES, TARGET)?;
                    Ok(Model { arena: #rt::align_arena(buffer, ARENA_BYTES)? })
                }
                /// Run the model on one thread. An error (an index in the inputs out
                /// of range) names the kernel that found it; the outputs are then not valid.
                pub fn run(&mut self, #(#params),*) -> Result<(), #rt::Error> {
                    let arena = self.arena.as_mut_ptr();
                    unsafe { run_kernels(arena, #(#call_args,)* &mut |k, args, _| #rt::run_serial(k, args)) }
                }
            }
            /// The kernel calls, in order; `call(kernel, args, parallel)` runs one and
            /// gives its status. Stops at the first kernel that fails.
            #[inline(always)]
            unsafe fn run_kernels(
                arena: *mut u8,
                #(#sig,)*
                call: &mut dyn FnMut(#rt::PackedKernel, &[*mut u8], bool) -> i32,
            ) -> Result<(), #rt::Error> {
                unsafe {
                    #(#calls)*
                    Ok(())
                }
            }
            #owned
        }
    };
    render(file)
}

/// Rust source from generated tokens, formatted by prettyplease, with the
/// `@generated` marker tools look for.
fn render(tokens: TokenStream) -> String {
    let body = match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        // Only a kiln bug makes unparsable tokens; rustc then reports them where they are.
        Err(_) => tokens.to_string(),
    };
    format!("// @generated by kiln {} — do not edit.\n{body}", env!("CARGO_PKG_VERSION"))
}

/// A size as an unsuffixed literal (`784`, not `784usize`).
fn lit(n: usize) -> Literal {
    Literal::usize_unsuffixed(n)
}

/// The path of the runtime crate in the glue (`::kiln_runtime`).
fn runtime_path(runtime: &str) -> TokenStream {
    syn::parse_str::<syn::Path>(runtime).map(|p| quote!(#p)).unwrap_or_else(|_| quote!(::kiln_runtime))
}

/// A Rust identifier for a model's name for something: [`sanitize`]'s text, a
/// raw identifier for a keyword (`type` → `r#type`), and `self`, `Self`,
/// `super`, `crate` (which cannot be raw) with a trailing `_`.
pub fn rust_ident(name: &str, fallback: &str) -> Ident {
    let text = sanitize(name, fallback);
    if syn::parse_str::<Ident>(&text).is_ok() {
        Ident::new(&text, Span::call_site())
    } else if matches!(text.as_str(), "self" | "Self" | "super" | "crate" | "_") {
        format_ident!("{text}_")
    } else {
        Ident::new_raw(&text, Span::call_site())
    }
}

/// `X_SHAPE` for input `x` (`TYPE_LEN` for `r#type`).
fn const_name(n: &Ident, suffix: &str) -> Ident {
    format_ident!("{}_{suffix}", n.to_string().trim_start_matches("r#").to_uppercase())
}

/// The identifiers of a model's inputs and outputs.
struct Io {
    inputs: Vec<Ident>,
    outputs: Vec<Ident>,
}

impl Io {
    fn of(plan: &ExecutorPlan) -> Io {
        let inputs = plan
            .inputs
            .iter()
            .enumerate()
            .map(|(i, &t)| rust_ident(&plan.tensors[t].name, &format!("input{i}")))
            .collect();
        let outputs = (0..plan.outputs.len()).map(|i| format_ident!("output{i}")).collect();
        Io { inputs, outputs }
    }

    /// (index among inputs then outputs, tensor, identifier).
    fn all<'a>(&'a self, plan: &'a ExecutorPlan) -> impl Iterator<Item = (usize, usize, &'a Ident)> + 'a {
        let tensors = plan.inputs.iter().chain(&plan.outputs).copied();
        tensors.zip(self.inputs.iter().chain(&self.outputs)).enumerate().map(|(k, (t, n))| (k, t, n))
    }

    /// The parameters of `run`: fixed-size arrays, shared for the inputs, mutable for the outputs.
    fn params(&self, plan: &ExecutorPlan) -> Vec<TokenStream> {
        self.typed(plan, |n, output, elem, len| {
            let mutability = output.then(|| quote!(mut));
            quote!(#n: &#mutability [#elem; #len])
        })
    }

    /// The raw-pointer parameters of `run_kernels`.
    fn raw_params(&self, plan: &ExecutorPlan) -> Vec<TokenStream> {
        self.typed(plan, |n, output, elem, _| if output { quote!(#n: *mut #elem) } else { quote!(#n: *const #elem) })
    }

    /// `f(identifier, is an output, element type, elements)` for the inputs, then the outputs.
    fn typed(&self, plan: &ExecutorPlan, f: impl Fn(&Ident, bool, Ident, Literal) -> TokenStream) -> Vec<TokenStream> {
        self.all(plan)
            .map(|(k, t, n)| {
                let s = &plan.tensors[t];
                let elem = format_ident!("{}", rust_type(s.dtype));
                f(n, k >= self.inputs.len(), elem, lit(s.shape.iter().product::<usize>()))
            })
            .collect()
    }

    /// What `run` passes to `run_kernels` for the inputs and outputs.
    fn call_args(&self) -> Vec<TokenStream> {
        let ins = self.inputs.iter().map(|n| quote!(#n.as_ptr()));
        ins.chain(self.outputs.iter().map(|n| quote!(#n.as_mut_ptr()))).collect()
    }
}

/// `<model>.rs` of a `cuda` build: the PTX embedded as a string, every
/// kernel's launch shape and every launch's argument offsets fixed, the
/// weights included from `<model>.weights.bin` (placed at `WEIGHTS_OFFSET` of
/// the model's device memory), and `CudaModel`, whose `run` copies the inputs
/// in, launches the kernels in order and copies the outputs out.
pub fn cuda_glue(
    model: &str,
    plan: &ExecutorPlan,
    ptx: &str,
    runtime: &str,
) -> Result<String, crate::backend::RunError> {
    use crate::backend::cuda::{device_layout, launch_shapes, launches};
    let rt = runtime_path(runtime);
    let m = rust_ident(model, "model");
    let layout = device_layout(plan);
    let kernels = launch_shapes(plan)?.into_iter().map(|(name, grid, block)| {
        let (grid, block) = (Literal::u32_unsuffixed(grid), Literal::u32_unsuffixed(block));
        quote! { CudaKernelSpec { name: #name, grid: #grid, block: #block } }
    });
    let launches = launches(plan, &layout).into_iter().map(|(kernel, args)| {
        let (kernel, args) = (lit(kernel), args.into_iter().map(lit));
        quote! { CudaLaunch { kernel: #kernel, args: &[#(#args),*] } }
    });
    let device_bytes = lit(layout.bytes);
    let weights_offset = lit(layout.constant_offsets.first().copied().unwrap_or(layout.bytes));
    let weights_file = format!("/kiln/{model}.weights.bin");
    let io = Io::of(plan);
    let lens = io.all(plan).map(|(_, t, n)| {
        let name = const_name(n, "LEN");
        let len = lit(plan.tensors[t].shape.iter().product::<usize>());
        quote! { pub const #name: usize = #len; }
    });
    let params = io.params(plan);
    let writes = plan.inputs.iter().zip(&io.inputs).map(|(&t, n)| {
        let at = lit(layout.offsets[t]);
        quote! {
            self.inner.write(#at, unsafe {
                core::slice::from_raw_parts(#n.as_ptr() as *const u8, core::mem::size_of_val(#n))
            })?;
        }
    });
    let reads = plan.outputs.iter().zip(&io.outputs).map(|(&t, n)| {
        let at = lit(layout.offsets[t]);
        quote! {
            self.inner.read(#at, unsafe {
                core::slice::from_raw_parts_mut(#n.as_mut_ptr() as *mut u8, core::mem::size_of_val(#n))
            })?;
        }
    });
    let file = quote! {
        #[allow(dead_code, non_upper_case_globals, clippy::all, missing_debug_implementations)]
        pub mod #m {
            use #rt::cuda::{CudaError, CudaKernelSpec, CudaLaunch};
            /// The kernels, as PTX.
            pub const PTX: &str = #ptx;
            /// Bytes of device memory the model uses (arena, inputs, outputs, weights).
            pub const DEVICE_BYTES: usize = #device_bytes;
            pub const KERNELS: &[CudaKernelSpec<'static>] = &[#(#kernels),*];
            pub const LAUNCHES: &[CudaLaunch<'static>] = &[#(#launches),*];
            /// Where the weights start in device memory.
            pub const WEIGHTS_OFFSET: usize = #weights_offset;
            static WEIGHTS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), #weights_file));
            #(#lens)*
            /// The model resident on the GPU (device 0).
            pub struct CudaModel { inner: #rt::cuda::CudaModel }
            impl CudaModel {
                /// Load the PTX, allocate device memory once, copy the weights.
                pub fn new() -> Result<Self, CudaError> {
                    let mut inner = #rt::cuda::CudaModel::new(PTX, KERNELS, DEVICE_BYTES, LAUNCHES)?;
                    inner.write(WEIGHTS_OFFSET, WEIGHTS)?;
                    Ok(CudaModel { inner })
                }
                /// The GPU's name.
                pub fn device_name(&self) -> Result<String, CudaError> { self.inner.device_name() }
                /// Replay the kernels as one captured CUDA graph from now on (one launch per run).
                pub fn capture_graph(&mut self) -> Result<(), CudaError> { self.inner.capture_graph() }
                /// Run the model: inputs in, every kernel launched in order, outputs out.
                pub fn run(&mut self, #(#params),*) -> Result<(), CudaError> {
                    #(#writes)*
                    self.inner.run()?;
                    #(#reads)*
                    Ok(())
                }
            }
        }
    };
    Ok(render(file))
}

/// `<model>.weights.bin` of a `cuda` build: the constants at their device
/// offsets, relative to the first (zero padding between).
pub fn cuda_weights(plan: &ExecutorPlan) -> Vec<u8> {
    let layout = crate::backend::cuda::device_layout(plan);
    let Some(&start) = layout.constant_offsets.first() else { return Vec::new() };
    let mut blob = Vec::new();
    for (c, &at) in plan.constants.iter().zip(&layout.constant_offsets) {
        blob.resize(at - start, 0);
        blob.extend_from_slice(c.bytes());
    }
    blob
}

/// The attribute that says whether a kernel runs on the thread pool, set on
/// the unscheduled kernels of a build that reused its scheduled ones from
/// the kernel cache; without it, a kernel's parallel loops say.
pub(super) const PARALLEL_ATTR: &str = "kiln.parallel";

/// Whether the kernel `k` runs on the thread pool.
fn runs_parallel(k: &crate::tir::PrimFunc) -> bool {
    match k.attrs.get(PARALLEL_ATTR) {
        Some(v) => v == "true",
        None => k.body.has_parallel_loop(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_become_rust_identifiers() {
        let id = |name: &str| rust_ident(name, "fallback").to_string();
        assert_eq!(id("x"), "x");
        assert_eq!(id("input.1"), "input_1");
        assert_eq!(id("3d"), "_3d");
        assert_eq!(id(""), "fallback");
        // Keywords, strict and reserved, as raw identifiers; those that cannot be raw get a `_`.
        for kw in ["type", "fn", "match", "async", "dyn", "abstract", "yield", "try", "macro"] {
            assert_eq!(id(kw), format!("r#{kw}"));
        }
        for kw in ["self", "Self", "super", "crate", "_"] {
            assert_eq!(id(kw), format!("{kw}_"));
        }
    }

    #[test]
    fn glue_is_formatted_rust_that_parses() {
        let plan = ExecutorPlan {
            tensors: vec![crate::backend::aot::TensorSlot {
                name: "type".into(),
                shape: vec![2],
                dtype: DataType::F32,
                storage: Storage::Input(0),
                alias_of: None,
            }],
            inputs: vec![0],
            ..ExecutorPlan::default()
        };
        let glue = rust_glue("match", &plan, "::kiln_runtime", true, &TargetDescription::resolve("c"));
        assert!(glue.starts_with("// @generated by kiln"), "{glue}");
        syn::parse_file(&glue).expect("the glue parses");
        assert!(glue.contains("pub mod r#match {") && glue.contains("r#type: &[f32; 2]"), "{glue}");
        assert!(glue.contains("pub const TYPE_SHAPE: [usize; 1] = [2];"), "{glue}");
    }
}
