//! What the CPU schedules size their work by: the vector unit of the target
//! CPU — f32 lanes per vector register and the number of registers.
//!
//! Resolved once per build from the target string (`llvm -mcpu=native`,
//! `llvm -mcpu=<cpu> [-mattr=…]`, or `c`, which compiles for this machine)
//! and handed to the passes as the configuration keys `tir.vector_lanes` and
//! `tir.vector_registers`; a pass run without them sizes for this machine.

mod features;
#[cfg(feature = "llvm19")]
mod llvm19_names;
mod llvm_cpus;

pub use features::{required_features, TargetDescription};
pub use llvm_cpus::{
    check_llvm_cpu, check_llvm_features, LLVM14_AARCH64_CPUS, LLVM14_AARCH64_FEATURES, LLVM14_X86_CPUS,
    LLVM14_X86_FEATURES, LLVM_VERSION,
};

use crate::transform::{ConfigValue, PassContext};

/// A CPU vector unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorUnit {
    /// f32 lanes of one vector register.
    pub f32_lanes: usize,
    /// Architectural vector registers.
    pub registers: usize,
}

/// x86 CPUs with AVX-512 (LLVM 14 names, and the newer ones LLVM 19 knows).
const AVX512_CPUS: &[&str] = &[
    "skylake-avx512",
    "znver4",
    "znver5",
    "graniterapids",
    "graniterapids-d",
    "emeraldrapids",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "knl",
    "knm",
    "x86-64-v4",
];

impl VectorUnit {
    /// Whether a vector access can leave out any lanes in one instruction
    /// (AVX-512's mask registers: the unit of 16 `f32` lanes), so that a
    /// load under a per-lane condition reads only the lanes it keeps.
    pub fn masked_loads(&self) -> bool {
        self.f32_lanes == 16
    }

    pub const AVX512: VectorUnit = VectorUnit { f32_lanes: 16, registers: 32 };
    pub const AVX2: VectorUnit = VectorUnit { f32_lanes: 8, registers: 16 };
    pub const NEON: VectorUnit = VectorUnit { f32_lanes: 4, registers: 32 };
    pub const SSE: VectorUnit = VectorUnit { f32_lanes: 4, registers: 16 };
    /// 32-bit Arm with NEON (Cortex-A): 16 quad registers.
    pub const NEON32: VectorUnit = VectorUnit { f32_lanes: 4, registers: 16 };
    /// No f32 vectors (Cortex-M's FPU: 32 single-precision registers); tiles of scalars.
    pub const SCALAR: VectorUnit = VectorUnit { f32_lanes: 1, registers: 32 };

    /// The vector unit of the CPU this process runs on.
    pub fn host() -> VectorUnit {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                VectorUnit::AVX512
            } else if std::arch::is_x86_feature_detected!("avx2") {
                VectorUnit::AVX2
            } else {
                VectorUnit::SSE
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            VectorUnit::NEON
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            VectorUnit::SSE
        }
    }

    /// The vector unit a target string compiles for: `-mcpu=native` and `c`
    /// mean this machine; a named CPU and `-mattr=±avx512f` decide otherwise.
    /// A repeated option counts by its last value, as the LLVM backend reads it.
    pub fn of_target(target: &str) -> VectorUnit {
        let option = |name: &str| target_option(target, name);
        let cpu = option("-mcpu=").unwrap_or("native");
        let triple = option("-mtriple=").unwrap_or("");
        let attrs = option("-mattr=").unwrap_or("");
        let mut unit = if triple.starts_with("aarch64") || triple.starts_with("arm64") {
            VectorUnit::NEON
        } else if ["thumbv6m", "thumbv7m", "thumbv7em", "thumbv8m"].iter().any(|m| triple.starts_with(m)) {
            // Microcontroller profile: no NEON.
            VectorUnit::SCALAR
        } else if triple.starts_with("arm") || triple.starts_with("thumb") {
            VectorUnit::NEON32
        } else if cpu == "native" {
            VectorUnit::host()
        } else if AVX512_CPUS.contains(&cpu) {
            VectorUnit::AVX512
        } else if matches!(cpu, "x86-64" | "x86-64-v2" | "core2" | "nehalem" | "westmere") {
            VectorUnit::SSE
        } else {
            VectorUnit::AVX2
        };
        for a in attrs.split(',') {
            match a {
                "+avx512f" => unit = VectorUnit::AVX512,
                "+avx" | "+avx2" if unit == VectorUnit::SSE => unit = VectorUnit::AVX2,
                "-avx512f" if unit == VectorUnit::AVX512 => unit = VectorUnit::AVX2,
                _ => {}
            }
        }
        unit
    }

    /// The unit a pass context asks for (set by [`VectorUnit::configure`]), or this machine's.
    pub fn of_context(ctx: &PassContext) -> VectorUnit {
        let host = VectorUnit::host();
        let get = |key: &str, default: usize| {
            ctx.config_int(key).filter(|&v| (1..=64).contains(&v)).map_or(default, |v| v as usize)
        };
        VectorUnit {
            f32_lanes: get("tir.vector_lanes", host.f32_lanes),
            registers: get("tir.vector_registers", host.registers),
        }
    }

    /// Records this unit in `ctx`, unless the user set the keys already.
    pub fn configure(self, ctx: &mut PassContext) {
        for (key, v) in [("tir.vector_lanes", self.f32_lanes), ("tir.vector_registers", self.registers)] {
            if ctx.config(key).is_none() {
                // Both keys are registered as integers; setting them cannot fail.
                let _ = ctx.set_config(key, ConfigValue::Int(v as i64));
            }
        }
    }
}

/// Whether `target` names an NVIDIA GPU (`cuda [-arch=…]`).
pub fn is_cuda(target: &str) -> bool {
    target.split_whitespace().next() == Some("cuda")
}

/// Configures `ctx` for `target`, keeping what the user set: the vector
/// unit's keys ([`VectorUnit::configure`]); on GPUs no Winograd rewrite
/// (its transforms have no GPU schedule; the direct convolutions do); on
/// CPUs `nn.layer_norm` kept whole by SimplifyInference (one kernel per
/// normalization instead of four; GPUs schedule the expansion).
pub fn configure_context(target: &str, ctx: &mut PassContext) {
    VectorUnit::of_target(target).configure(ctx);
    // Registered boolean keys: setting them cannot fail.
    if is_cuda(target) && ctx.config("relay.AlterOpLayout.winograd").is_none() {
        let _ = ctx.set_config("relay.AlterOpLayout.winograd", ConfigValue::Bool(false));
    }
    if !is_cuda(target) {
        let features = TargetDescription::resolve(target).features;
        let has = |name: &str| features.iter().any(|f| f == name);
        if ctx.config("relay.IntegerConv2d.enable").is_none() {
            let _ = ctx.set_config("relay.IntegerConv2d.enable", ConfigValue::Bool(has("avx512vnni")));
        }
        // AMX tiles are LLVM intrinsics: the C backend's target is not `llvm`.
        let llvm = target.split_whitespace().next() == Some("llvm");
        if ctx.config("relay.IntegerConv2d.amx").is_none() {
            let amx = llvm && has("amx-int8") && has("amx-tile");
            let _ = ctx.set_config("relay.IntegerConv2d.amx", ConfigValue::Bool(amx));
        }
        if ctx.config("tir.amx").is_none() {
            let _ = ctx.set_config("tir.amx", ConfigValue::Bool(llvm && has("amx-tile")));
        }
    }
    if !is_cuda(target) && ctx.config("relay.SimplifyInference.layer_norm").is_none() {
        let _ = ctx.set_config("relay.SimplifyInference.layer_norm", ConfigValue::Bool(false));
    }
}

/// The value of option `name` (`-mcpu=`, `-mtriple=`, …) in a target string;
/// the last one where it is repeated, as the LLVM backend reads it.
pub(crate) fn target_option<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    target.split_whitespace().rev().find_map(|w| w.strip_prefix(name))
}

/// The target triple kiln itself was compiled for: the machine it runs on
/// (recorded by kiln's build script, spelled as cargo spells it).
pub fn host_triple() -> &'static str {
    env!("KILN_HOST_TRIPLE")
}

/// Why a target cannot be compiled for: a CPU or feature the linked LLVM
/// does not know, or a target that contradicts cargo's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TargetError {
    message: String,
}

impl From<String> for TargetError {
    fn from(message: String) -> Self {
        TargetError { message }
    }
}

/// Rust's names of target features where LLVM's differ.
const RUST_TO_LLVM_FEATURES: [(&str, &str); 9] = [
    ("bmi1", "bmi"),
    ("cmpxchg16b", "cx16"),
    ("lahfsahf", "sahf"),
    ("pclmulqdq", "pclmul"),
    ("rdrand", "rdrnd"),
    ("fp", "fp-armv8"),
    ("fp16", "fullfp16"),
    ("pmuv3", "perfmon"),
    ("paca", "pauth"),
];

/// The target a model is compiled for when its build names none: what cargo
/// compiles the crate for — `cargo_target`'s triple (named when it is not
/// `host`), a portable CPU of its architecture (`x86-64`, `generic`) and the
/// features cargo enables (`rust_features`: its `CARGO_CFG_TARGET_FEATURE`,
/// comma-separated Rust names, which `-C target-cpu`/`-C target-feature`
/// extend), spelled as the linked LLVM spells them; features LLVM does not
/// know for the triple (`crt-static`) are not CPU features and are left out.
pub fn cargo_default_target(cargo_target: &str, host: &str, rust_features: &str) -> String {
    let triple = if cargo_target == host { host } else { cargo_target };
    let cpu = if triple.starts_with("x86_64") { "x86-64" } else { "generic" };
    let mut features: Vec<&str> = rust_features
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(|f| RUST_TO_LLVM_FEATURES.iter().find(|(rust, _)| *rust == f).map_or(f, |(_, llvm)| llvm))
        .filter(|f| llvm_cpus::check_llvm_features(triple, &format!("+{f}")).is_ok())
        .collect();
    features.sort_unstable();
    features.dedup();
    let mut target = format!("llvm -mcpu={cpu}");
    if cargo_target != host {
        target += &format!(" -mtriple={cargo_target}");
    }
    if !features.is_empty() {
        target += &format!(" -mattr=+{}", features.join(",+"));
    }
    target
}

/// The target to compile a model for when cargo builds the crate for
/// `cargo_target` (a build script's `TARGET`) on `host`: unchanged when they
/// are the same machine; for a cross build an LLVM target gets
/// `-mtriple=<cargo_target>`, and `-mcpu=native` (this machine's CPU) is an
/// error — the target's CPU must be named. C is compiled
/// by `cc`, which follows `TARGET` itself.
pub fn follow_cargo_target(target: &str, cargo_target: &str, host: &str) -> Result<String, TargetError> {
    if cargo_target == host || target.split_whitespace().next() != Some("llvm") {
        return Ok(target.to_string());
    }
    let option = |name| target_option(target, name);
    match option("-mtriple=") {
        Some(t) if t == cargo_target => return Ok(target.to_string()),
        Some(t) => {
            return Err(format!(
                "the target `{target}` names triple `{t}`, but cargo builds this crate for `{cargo_target}`"
            )
            .into())
        }
        None => {}
    }
    if option("-mcpu=").unwrap_or("native") == "native" {
        return Err(format!(
            "cargo builds this crate for `{cargo_target}` on `{host}`: `-mcpu=native` is this machine's CPU; \
             name the target's CPU (e.g. `llvm -mcpu=cortex-a72`) with Build::target or KILN_TARGET, or name \
             no target to compile for cargo's (a portable CPU with the features cargo enables)"
        )
        .into());
    }
    Ok(format!("{target} -mtriple={cargo_target}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_target_a_model_follows_cargo() {
        let host = "x86_64-unknown-linux-gnu";
        // rustc's default for x86_64: SSE2, 4 lanes.
        let t = cargo_default_target(host, host, "fxsr,sse,sse2");
        assert_eq!(t, "llvm -mcpu=x86-64 -mattr=+fxsr,+sse,+sse2");
        assert_eq!(VectorUnit::of_target(&t), VectorUnit::SSE);
        // RUSTFLAGS="-C target-cpu=haswell": Rust's names become LLVM's, crt-static is no CPU feature.
        let t = cargo_default_target(host, host, "avx,avx2,bmi1,bmi2,cmpxchg16b,crt-static,fma,lzcnt,pclmulqdq,sse2");
        assert_eq!(t, "llvm -mcpu=x86-64 -mattr=+avx,+avx2,+bmi,+bmi2,+cx16,+fma,+lzcnt,+pclmul,+sse2");
        assert_eq!(VectorUnit::of_target(&t), VectorUnit::AVX2);
        assert!(TargetDescription::resolve(&t).features.iter().any(|f| f == "avx2"));
        let t = cargo_default_target(host, host, "avx2,avx512f,fma");
        assert_eq!(VectorUnit::of_target(&t), VectorUnit::AVX512);
        // A cross build names cargo's triple; AArch64's `fp` is LLVM's `fp-armv8`.
        let t = cargo_default_target("aarch64-unknown-linux-gnu", host, "fp,neon");
        assert_eq!(t, "llvm -mcpu=generic -mtriple=aarch64-unknown-linux-gnu -mattr=+fp-armv8,+neon");
        assert_eq!(VectorUnit::of_target(&t), VectorUnit::NEON);
        let musl = cargo_default_target("x86_64-unknown-linux-musl", host, "crt-static,fxsr,sse,sse2");
        assert_eq!(musl, "llvm -mcpu=x86-64 -mtriple=x86_64-unknown-linux-musl -mattr=+fxsr,+sse,+sse2");
    }

    #[test]
    fn named_cpus_and_attributes_decide_the_width() {
        assert_eq!(VectorUnit::of_target("llvm -mcpu=znver3"), VectorUnit::AVX2);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=haswell"), VectorUnit::AVX2);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=skylake-avx512"), VectorUnit::AVX512);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=icelake-server -mattr=-avx512f"), VectorUnit::AVX2);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=znver3 -mattr=+avx512f"), VectorUnit::AVX512);
        assert_eq!(VectorUnit::of_target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"), VectorUnit::NEON);
        // Cortex-M has no NEON; 32-bit Cortex-A does.
        assert_eq!(VectorUnit::of_target("llvm -mtriple=thumbv7em-none-eabihf -mcpu=cortex-m4"), VectorUnit::SCALAR);
        assert_eq!(VectorUnit::of_target("llvm -mtriple=armv7-unknown-linux-gnueabihf"), VectorUnit::NEON32);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=native"), VectorUnit::host());
        // The last of a repeated option counts, as in the LLVM backend.
        assert_eq!(VectorUnit::of_target("llvm -mcpu=haswell -mcpu=skylake-avx512"), VectorUnit::AVX512);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=skylake-avx512 -mcpu=znver3"), VectorUnit::AVX2);
        assert_eq!(VectorUnit::of_target("c"), VectorUnit::host());
    }

    #[test]
    fn cross_builds_follow_cargos_target_triple() {
        let host = "x86_64-unknown-linux-gnu";
        let arm = "aarch64-unknown-linux-gnu";
        // Native builds, C and CUDA targets: unchanged.
        assert_eq!(follow_cargo_target("llvm -mcpu=native", host, host).unwrap(), "llvm -mcpu=native");
        assert_eq!(follow_cargo_target("c", arm, host).unwrap(), "c");
        // Cross: the triple is cargo's; a named CPU is kept.
        assert_eq!(
            follow_cargo_target("llvm -mcpu=cortex-a72", arm, host).unwrap(),
            "llvm -mcpu=cortex-a72 -mtriple=aarch64-unknown-linux-gnu"
        );
        assert_eq!(
            follow_cargo_target("llvm -mcpu=neoverse-n1 -mtriple=aarch64-unknown-linux-gnu", arm, host).unwrap(),
            "llvm -mcpu=neoverse-n1 -mtriple=aarch64-unknown-linux-gnu"
        );
        // This machine's CPU (named or by default) and a conflicting triple are errors.
        for t in ["llvm", "llvm -mcpu=native"] {
            let e = follow_cargo_target(t, arm, host).unwrap_err().to_string();
            assert!(e.contains("native") && e.contains(arm), "{e}");
        }
        let e = follow_cargo_target("llvm -mcpu=znver3 -mtriple=x86_64-unknown-linux-gnu", arm, host)
            .unwrap_err()
            .to_string();
        assert!(e.contains("x86_64-unknown-linux-gnu") && e.contains(arm), "{e}");
        assert_eq!(host_triple(), env!("KILN_HOST_TRIPLE"));
        assert!(!host_triple().is_empty());
    }
}
