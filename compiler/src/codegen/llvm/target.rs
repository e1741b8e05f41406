//! The `llvm …` target string and the LLVM target machine it names.

use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::values::FunctionValue;
use inkwell::OptimizationLevel;

use crate::codegen::CodegenError;

/// A parsed `llvm …` target string: `llvm -mcpu=native`, `llvm -mcpu=skylake-avx512 -mattr=+avx512f`,
/// `llvm -mtriple=x86_64-unknown-linux-gnu`, `llvm -fast-math`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlvmTarget {
    pub triple: String,
    pub cpu: String,
    pub features: String,
    pub fast_math: bool,
}

impl LlvmTarget {
    /// Whether the code may use `feature` (LLVM's name): named in `-mattr`
    /// (`+`), or implied by the CPU and not removed.
    pub fn has_feature(&self, feature: &str) -> bool {
        let mut spelled = format!("llvm -mcpu={}", if self.cpu.is_empty() { "x86-64" } else { &self.cpu });
        if !self.features.is_empty() {
            spelled.push_str(&format!(" -mattr={}", self.features));
        }
        crate::target::TargetDescription::resolve(&spelled).features.iter().any(|f| f == feature)
    }

    /// The host CPU with all its features.
    pub fn native() -> LlvmTarget {
        LlvmTarget::parse("llvm -mcpu=native").unwrap_or(LlvmTarget {
            triple: String::new(),
            cpu: String::new(),
            features: String::new(),
            fast_math: false,
        })
    }

    pub fn parse(s: &str) -> Result<LlvmTarget, CodegenError> {
        let bad = |what: String| CodegenError::BadTarget { target: s.to_string(), message: what };
        let mut words = s.split_whitespace();
        if words.next() != Some("llvm") {
            return Err(bad("an LLVM target string starts with `llvm`".into()));
        }
        let mut t = LlvmTarget {
            triple: TargetMachine::get_default_triple().as_str().to_string_lossy().into_owned(),
            cpu: "generic".into(),
            features: String::new(),
            fast_math: false,
        };
        for w in words {
            if let Some(cpu) = w.strip_prefix("-mcpu=") {
                if cpu == "native" {
                    t.cpu = TargetMachine::get_host_cpu_name().to_string();
                    t.features = TargetMachine::get_host_cpu_features().to_string();
                } else {
                    t.cpu = cpu.to_string();
                }
            } else if let Some(attr) = w.strip_prefix("-mattr=") {
                if !t.features.is_empty() {
                    t.features.push(',');
                }
                t.features.push_str(attr);
            } else if let Some(triple) = w.strip_prefix("-mtriple=") {
                t.triple = triple.to_string();
            } else if w == "-fast-math" {
                t.fast_math = true;
            } else {
                return Err(bad(format!("unknown option `{w}`; expected -mcpu=, -mattr=, -mtriple= or -fast-math")));
            }
        }
        // An unknown CPU would make LLVM abort the whole process later; an
        // unknown feature would be ignored with only a warning.
        crate::target::check_llvm_cpu(&t.triple, &t.cpu).map_err(|e| bad(e.to_string()))?;
        for attrs in s.split_whitespace().filter_map(|w| w.strip_prefix("-mattr=")) {
            crate::target::check_llvm_features(&t.triple, attrs).map_err(|e| bad(e.to_string()))?;
        }
        Ok(t)
    }

    pub(super) fn machine(&self, target_name: &str) -> Result<TargetMachine, CodegenError> {
        // Once per process: LLVM's target registry is not for concurrent initialization.
        static INIT: std::sync::Once = std::sync::Once::new();
        INIT.call_once(|| Target::initialize_all(&InitializationConfig::default()));
        configure_llvm();
        // Normalized: LLVM reads `thumbv7em-none-eabihf` positionally (OS `eabihf`, no
        // environment), which would lose the hard-float ABI; `…-none-unknown-eabihf` keeps it.
        let triple = TargetMachine::normalize_triple(&TargetTriple::create(&self.triple));
        let fail = |m: String| CodegenError::BadTarget { target: target_name.to_string(), message: m };
        let target = Target::from_triple(&triple).map_err(|e| fail(e.to_string()))?;
        target
            .create_target_machine(
                &triple,
                &self.cpu,
                &self.features,
                OptimizationLevel::Aggressive,
                // Position-independent where there is an OS to load it; bare metal links it where it runs.
                if self.triple.contains("-none") { RelocMode::Static } else { RelocMode::PIC },
                CodeModel::Default,
            )
            .ok_or_else(|| fail(format!("LLVM cannot make a target machine for `{}` cpu `{}`", self.triple, self.cpu)))
    }
}

/// The CPU and its features on a function, so that every code generator —
/// the target machine and MCJIT, which otherwise picks a generic x86-64 —
/// emits the same instructions (the packed entry points too: the kernel is
/// inlined into them).
pub(super) fn set_target_attributes<'ctx>(ctx: &'ctx Context, func: FunctionValue<'ctx>, target: &LlvmTarget) {
    if !target.cpu.is_empty() {
        func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("target-cpu", &target.cpu));
    }
    if !target.features.is_empty() {
        func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("target-features", &target.features));
    }
    // LLVM tunes Skylake-class AVX-512 CPUs to vectorize its own loops 256
    // bits wide (a frequency concern of 2017 parts); kiln's tiles are sized
    // for the full 512-bit registers, so its loops use them.
    let spelled = format!("llvm -mcpu={} -mattr={} -mtriple={}", target.cpu, target.features, target.triple);
    if crate::target::VectorUnit::of_target(&spelled) == crate::target::VectorUnit::AVX512 {
        func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("prefer-vector-width", "512"));
    }
}

/// Process-wide LLVM options, set once before any pass runs — for CPU and
/// NVPTX alike, so that what LLVM emits does not depend on which kind of
/// compile came first in the process.
pub(super) fn configure_llvm() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(disable_interleaved_accesses);
}

/// LLVM 14's loop vectorizer miscompiles interleaved access groups on
/// AVX-512 targets: in `argmax` over the outer axis of a `[3, 4, 5]` tensor
/// (ONNX's `test_hardmax_axis_0`), it moved a strided load of the running
/// maximum above the store of the last row's maximum, so the index compare
/// saw a stale value (6 of 60 outputs wrong; AVX2 and the C backend were
/// right). Interleaved-group vectorization is turned off for the process
/// (`-enable-interleaved-mem-accesses=false`, a `cl::opt`); kiln's schedules
/// vectorize explicitly, along contiguous axes.
fn disable_interleaved_accesses() {
    let args = [c"kiln".as_ptr(), c"-enable-interleaved-mem-accesses=false".as_ptr()];
    // SAFETY: two NUL-terminated strings that outlive the call; LLVM copies what it keeps.
    unsafe { inkwell::llvm_sys::support::LLVMParseCommandLineOptions(2, args.as_ptr(), std::ptr::null()) };
}
