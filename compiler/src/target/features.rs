//! The instruction-set features a build's code may use, resolved once from
//! the target string: recorded in the build's cache key and `<model>.json`,
//! and checked by the generated glue (and `kiln run`) before the first kernel
//! runs, so that a model built for a CPU feature this machine lacks is
//! refused with its name instead of dying of SIGILL.
//!
//! Names are LLVM's and limited to what `kiln_runtime::cpu` can check at run
//! time: the vector extensions and the dot-product / matrix units.

use super::VectorUnit;

const SSE42: &[&str] = &["sse4.2"];
const AVX: &[&str] = &["sse4.2", "avx"];
const AVX_F16C: &[&str] = &["sse4.2", "avx", "f16c"];
const AVX_FMA: &[&str] = &["sse4.2", "avx", "fma", "f16c"];
/// x86-64-v3: Haswell, Zen 1–3.
const V3: &[&str] = &["sse4.2", "avx", "avx2", "fma", "f16c"];
/// x86-64-v4: AVX-512 F, CD, BW, DQ, VL.
const V4: &[&str] =
    &["sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"];

/// The checkable features an x86 CPU implies (LLVM 14's names, and the
/// newer CPUs LLVM 19 knows).
fn x86_cpu_features(cpu: &str) -> Vec<&'static str> {
    x86_common_features(cpu).into_iter().chain(amd_only_features(cpu).iter().copied()).collect()
}

/// AMD's own extensions a CPU implies: code built for a Zen CPU may hold
/// SSE4A instructions (LLVM lowers some byte shuffles to INSERTQ), which
/// fault on Intel CPUs that have every other feature of a Zen.
fn amd_only_features(cpu: &str) -> &'static [&'static str] {
    match cpu {
        "znver1" | "znver2" | "znver3" | "znver4" | "znver5" | "btver1" | "btver2" | "amdfam10" | "barcelona" => {
            &["sse4a"]
        }
        "bdver1" => &["sse4a", "fma4", "xop"],
        "bdver2" | "bdver3" | "bdver4" => &["sse4a", "fma4", "xop", "tbm"],
        _ => &[],
    }
}

/// The checkable features of the Intel-compatible extensions.
fn x86_common_features(cpu: &str) -> Vec<&'static str> {
    let (base, extra): (&[&str], &[&str]) = match cpu {
        "sapphirerapids" | "emeraldrapids" | "graniterapids" | "graniterapids-d" => {
            (V4, &["avx512vnni", "avx512bf16", "avxvnni", "amx-tile", "amx-int8", "amx-bf16"])
        }
        "znver4" | "znver5" => (V4, &["avx512vnni", "avx512bf16"]),
        "raptorlake" | "meteorlake" | "arrowlake" | "lunarlake" | "gracemont" => (V3, &["avxvnni"]),
        "cooperlake" => (V4, &["avx512vnni", "avx512bf16"]),
        "cascadelake" | "icelake-client" | "icelake-server" | "tigerlake" | "rocketlake" => (V4, &["avx512vnni"]),
        "skylake-avx512" | "skx" | "cannonlake" | "x86-64-v4" => (V4, &[]),
        "knl" | "knm" => (V3, &["avx512f", "avx512cd"]),
        "alderlake" => (V3, &["avxvnni"]),
        "haswell" | "broadwell" | "skylake" | "core-avx2" | "x86-64-v3" | "znver1" | "znver2" | "znver3" | "bdver4" => {
            (V3, &[])
        }
        "bdver2" | "bdver3" => (AVX_FMA, &[]),
        "ivybridge" | "core-avx-i" | "btver2" => (AVX_F16C, &[]),
        "sandybridge" | "corei7-avx" | "bdver1" => (AVX, &[]),
        "nehalem" | "westmere" | "corei7" | "x86-64-v2" | "silvermont" | "slm" | "goldmont" | "goldmont-plus"
        | "tremont" => (SSE42, &[]),
        _ => (&[], &[]),
    };
    base.iter().chain(extra).copied().collect()
}

/// The checkable features an AArch64 CPU implies (NEON always).
fn aarch64_cpu_features(cpu: &str) -> Vec<&'static str> {
    let extra: &[&str] = match cpu {
        "neoverse-n2" | "neoverse-v1" | "neoverse-v2" | "neoverse-n3" | "cortex-a710" | "cortex-x2" | "apple-a14"
        | "apple-a15" | "apple-m1" => &["dotprod", "bf16", "i8mm", "fullfp16"],
        "neoverse-n1" | "neoverse-e1" | "cortex-a76" | "cortex-a76ae" | "cortex-a77" | "cortex-a78" | "cortex-a78c"
        | "cortex-x1" | "cortex-a55" | "cortex-a75" | "apple-a12" | "apple-a13" => &["dotprod", "fullfp16"],
        _ => &[],
    };
    ["neon"].into_iter().chain(extra.iter().copied()).collect()
}

/// What a build's code was compiled for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TargetDescription {
    /// The target string as given (`llvm -mcpu=native`, `c`, …).
    pub target: String,
    /// The LLVM triple (the host's for `c` and when none is named).
    pub triple: String,
    /// The CPU, `native` resolved to this machine's name.
    pub cpu: String,
    /// The checkable instruction-set features the code may use, sorted.
    pub features: Vec<String>,
    /// f32 lanes per vector register.
    pub f32_lanes: usize,
    /// Vector registers.
    pub vector_registers: usize,
}

impl TargetDescription {
    /// Resolves `target` (`native` reads this machine).
    pub fn resolve(target: &str) -> TargetDescription {
        let words: Vec<&str> = target.split_whitespace().collect();
        let option = |name| super::target_option(target, name);
        let unit = VectorUnit::of_target(target);
        let is_llvm = words.first() == Some(&"llvm");
        let triple = option("-mtriple=").unwrap_or(super::host_triple()).to_string();
        let aarch64 = triple.starts_with("aarch64") || triple.starts_with("arm64");
        let requested = if is_llvm { option("-mcpu=").unwrap_or("native") } else { "" };
        let (cpu, mut features): (String, Vec<String>) = match requested {
            // C is compiled by the C compiler for its default CPU; `cuda`'s
            // host side is the glue alone.
            "" => ("generic".into(), Vec::new()),
            "native" => (host_cpu_name(), host_features()),
            cpu if aarch64 => (cpu.into(), aarch64_cpu_features(cpu).into_iter().map(String::from).collect()),
            cpu => (cpu.into(), x86_cpu_features(cpu).into_iter().map(String::from).collect()),
        };
        // -mattr=+a,-b adds and removes (LLVM's names, as the runtime checks them).
        for words in words.iter().filter_map(|w| w.strip_prefix("-mattr=")) {
            for attr in words.split(',') {
                if let Some(f) = attr.strip_prefix('+') {
                    if !features.iter().any(|g| g == f) {
                        features.push(f.to_string());
                    }
                } else if let Some(f) = attr.strip_prefix('-') {
                    features.retain(|g| g != f);
                }
            }
        }
        features.sort();
        TargetDescription {
            target: target.trim().to_string(),
            triple,
            cpu,
            features,
            f32_lanes: unit.f32_lanes,
            vector_registers: unit.registers,
        }
    }

    /// The first of [`TargetDescription::features`] the running CPU lacks
    /// (of those the runtime can check on this architecture).
    pub fn first_missing_on_this_cpu(&self) -> Option<&str> {
        let names: Vec<&str> = self.features.iter().map(String::as_str).collect();
        kiln_runtime::cpu::first_missing(&names)
    }

    /// A JSON object (for `<model>.json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "target": self.target,
            "triple": self.triple,
            "cpu": self.cpu,
            "features": self.features,
            "f32_lanes": self.f32_lanes,
            "vector_registers": self.vector_registers,
        })
    }
}

/// The features of `target` that `kiln_runtime` checks before running.
pub fn required_features(target: &str) -> Vec<String> {
    TargetDescription::resolve(target).features
}

fn host_cpu_name() -> String {
    #[cfg(feature = "llvm")]
    {
        inkwell::targets::TargetMachine::get_host_cpu_name().to_string()
    }
    #[cfg(not(feature = "llvm"))]
    {
        "native".into()
    }
}

/// Every checkable feature this machine has.
fn host_features() -> Vec<String> {
    kiln_runtime::cpu::detected().map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_cpus_imply_their_features() {
        let d = TargetDescription::resolve("llvm -mcpu=znver3");
        assert_eq!(d.features, ["avx", "avx2", "f16c", "fma", "sse4.2", "sse4a"]);
        // The AVX2 path on an Intel CPU: Zen's scheduling, without SSE4A.
        let d = TargetDescription::resolve("llvm -mcpu=znver3 -mattr=-sse4a");
        assert_eq!(d.features, ["avx", "avx2", "f16c", "fma", "sse4.2"]);
        assert_eq!((d.f32_lanes, d.vector_registers), (8, 16));
        let d = TargetDescription::resolve("llvm -mcpu=icelake-server");
        assert!(d.features.iter().any(|f| f == "avx512vnni") && d.features.iter().any(|f| f == "avx512f"));
        let d = TargetDescription::resolve("llvm -mcpu=znver3 -mattr=+amx-tile,-f16c");
        assert!(d.features.iter().any(|f| f == "amx-tile") && !d.features.iter().any(|f| f == "f16c"));
        let d = TargetDescription::resolve("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1");
        assert_eq!(d.features, ["dotprod", "fullfp16", "neon"]);
        assert!(TargetDescription::resolve("c").features.is_empty());
    }

    #[test]
    fn native_is_this_machine_and_runs_here() {
        let d = TargetDescription::resolve("llvm -mcpu=native");
        assert_ne!(d.cpu, "native");
        assert!(d.first_missing_on_this_cpu().is_none(), "{d:?}");
        assert_eq!(d.to_json()["cpu"].as_str(), Some(d.cpu.as_str()));
    }
}
