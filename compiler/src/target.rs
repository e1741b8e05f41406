//! What the CPU schedules size their work by: the vector unit of the target
//! CPU — f32 lanes per vector register and the number of registers.
//!
//! Resolved once per build from the target string (`llvm -mcpu=native`,
//! `llvm -mcpu=<cpu> [-mattr=…]`, or `c`, which compiles for this machine)
//! and handed to the passes as the configuration keys `tir.vector_lanes` and
//! `tir.vector_registers`; a pass run without them sizes for this machine.

use crate::transform::{ConfigValue, PassContext};

/// A CPU vector unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorUnit {
    /// f32 lanes of one vector register.
    pub f32_lanes: usize,
    /// Architectural vector registers.
    pub registers: usize,
}

/// x86 CPUs (LLVM 14 names) with AVX-512.
const AVX512_CPUS: &[&str] = &[
    "skylake-avx512",
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
    pub const AVX512: VectorUnit = VectorUnit { f32_lanes: 16, registers: 32 };
    pub const AVX2: VectorUnit = VectorUnit { f32_lanes: 8, registers: 16 };
    pub const NEON: VectorUnit = VectorUnit { f32_lanes: 4, registers: 32 };
    pub const SSE: VectorUnit = VectorUnit { f32_lanes: 4, registers: 16 };

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
    pub fn of_target(target: &str) -> VectorUnit {
        let words: Vec<&str> = target.split_whitespace().collect();
        let option = |name: &str| words.iter().find_map(|w| w.strip_prefix(name));
        let cpu = option("-mcpu=").unwrap_or("native");
        let triple = option("-mtriple=").unwrap_or("");
        let attrs = option("-mattr=").unwrap_or("");
        let mut unit = if triple.starts_with("aarch64") || triple.starts_with("arm64") {
            VectorUnit::NEON
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

/// The CPU names LLVM 14 knows for x86 (`llc -mtriple=x86_64 -mcpu=help`).
/// A name outside them makes LLVM abort the process later, so targets are
/// checked against this list first.
pub const LLVM14_X86_CPUS: &[&str] = &[
    "alderlake",
    "amdfam10",
    "athlon",
    "athlon-4",
    "athlon-fx",
    "athlon-mp",
    "athlon-tbird",
    "athlon-xp",
    "athlon64",
    "athlon64-sse3",
    "atom",
    "barcelona",
    "bdver1",
    "bdver2",
    "bdver3",
    "bdver4",
    "bonnell",
    "broadwell",
    "btver1",
    "btver2",
    "c3",
    "c3-2",
    "cannonlake",
    "cascadelake",
    "cooperlake",
    "core-avx-i",
    "core-avx2",
    "core2",
    "corei7",
    "corei7-avx",
    "generic",
    "geode",
    "goldmont",
    "goldmont-plus",
    "haswell",
    "i386",
    "i486",
    "i586",
    "i686",
    "icelake-client",
    "icelake-server",
    "ivybridge",
    "k6",
    "k6-2",
    "k6-3",
    "k8",
    "k8-sse3",
    "knl",
    "knm",
    "lakemont",
    "nehalem",
    "nocona",
    "opteron",
    "opteron-sse3",
    "penryn",
    "pentium",
    "pentium-m",
    "pentium-mmx",
    "pentium2",
    "pentium3",
    "pentium3m",
    "pentium4",
    "pentium4m",
    "pentiumpro",
    "prescott",
    "rocketlake",
    "sandybridge",
    "sapphirerapids",
    "silvermont",
    "skx",
    "skylake",
    "skylake-avx512",
    "slm",
    "tigerlake",
    "tremont",
    "westmere",
    "winchip-c6",
    "winchip2",
    "x86-64",
    "x86-64-v2",
    "x86-64-v3",
    "x86-64-v4",
    "yonah",
    "znver1",
    "znver2",
    "znver3",
];

/// The CPU names LLVM 14 knows for AArch64.
pub const LLVM14_AARCH64_CPUS: &[&str] = &[
    "a64fx",
    "ampere1",
    "apple-a10",
    "apple-a11",
    "apple-a12",
    "apple-a13",
    "apple-a14",
    "apple-a7",
    "apple-a8",
    "apple-a9",
    "apple-latest",
    "apple-m1",
    "apple-s4",
    "apple-s5",
    "carmel",
    "cortex-a34",
    "cortex-a35",
    "cortex-a510",
    "cortex-a53",
    "cortex-a55",
    "cortex-a57",
    "cortex-a65",
    "cortex-a65ae",
    "cortex-a710",
    "cortex-a72",
    "cortex-a73",
    "cortex-a75",
    "cortex-a76",
    "cortex-a76ae",
    "cortex-a77",
    "cortex-a78",
    "cortex-a78c",
    "cortex-r82",
    "cortex-x1",
    "cortex-x1c",
    "cortex-x2",
    "cyclone",
    "exynos-m3",
    "exynos-m4",
    "exynos-m5",
    "falkor",
    "generic",
    "kryo",
    "neoverse-512tvb",
    "neoverse-e1",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-v1",
    "saphira",
    "thunderx",
    "thunderx2t99",
    "thunderx3t110",
    "thunderxt81",
    "thunderxt83",
    "thunderxt88",
    "tsv110",
];

/// Newer CPUs than LLVM 14 knows, and the name to use instead.
const NEWER_CPUS: &[(&str, &str)] = &[
    ("znver4", "znver3 -mattr=+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512vnni,+avx512bf16"),
    ("znver5", "znver3 -mattr=+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512vnni,+avx512bf16"),
    ("graniterapids", "sapphirerapids"),
    ("emeraldrapids", "sapphirerapids"),
    ("raptorlake", "alderlake"),
    ("meteorlake", "alderlake"),
    ("arrowlake", "alderlake"),
    ("lunarlake", "alderlake"),
    ("neoverse-v2", "neoverse-v1"),
    ("neoverse-n3", "neoverse-n2"),
];

/// An error when LLVM 14 does not know `cpu` for `triple` (x86 and AArch64
/// are checked; other architectures are left to LLVM).
pub fn check_llvm_cpu(triple: &str, cpu: &str) -> Result<(), String> {
    let known = if triple.starts_with("x86_64") || triple.starts_with("i686") || triple.starts_with("i386") {
        LLVM14_X86_CPUS
    } else if triple.starts_with("aarch64") || triple.starts_with("arm64") {
        LLVM14_AARCH64_CPUS
    } else {
        return Ok(());
    };
    if cpu.is_empty() || known.contains(&cpu) {
        return Ok(());
    }
    let arch = triple.split('-').next().unwrap_or(triple);
    match NEWER_CPUS.iter().find(|(n, _)| *n == cpu) {
        Some((_, instead)) => Err(format!(
            "LLVM 14, which kiln links, predates the CPU `{cpu}`; use `-mcpu={instead}` (or `-mcpu=native` on that machine)"
        )),
        None => Err(format!("LLVM 14 does not know the {arch} CPU `{cpu}`; it knows: {}", known.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_cpus_and_attributes_decide_the_width() {
        assert_eq!(VectorUnit::of_target("llvm -mcpu=znver3"), VectorUnit::AVX2);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=haswell"), VectorUnit::AVX2);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=skylake-avx512"), VectorUnit::AVX512);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=icelake-server -mattr=-avx512f"), VectorUnit::AVX2);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=znver3 -mattr=+avx512f"), VectorUnit::AVX512);
        assert_eq!(VectorUnit::of_target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"), VectorUnit::NEON);
        assert_eq!(VectorUnit::of_target("llvm -mcpu=native"), VectorUnit::host());
        assert_eq!(VectorUnit::of_target("c"), VectorUnit::host());
    }
}
