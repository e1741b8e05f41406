//! The CPU and feature names the linked LLVM knows, checked before LLVM
//! sees a target: an unknown CPU makes LLVM abort the whole process, an
//! unknown `-mattr` feature is ignored with a warning (a typo such as
//! `+avx512` silently builds without AVX-512). LLVM 14's lists are here;
//! LLVM 19's (feature `llvm19`) in `llvm19_names.rs`.

use super::TargetError;

/// One list of names the linked LLVM knows: LLVM 14's, with what LLVM 19
/// added and dropped when kiln is built against it.
struct Names {
    base: &'static [&'static str],
    added: &'static [&'static str],
    removed: &'static [&'static str],
}

impl Names {
    fn contains(&self, name: &str) -> bool {
        (self.base.contains(&name) && !self.removed.contains(&name)) || self.added.contains(&name)
    }

    /// Every name, sorted.
    fn all(&self) -> Vec<&'static str> {
        let mut v: Vec<&str> =
            self.base.iter().filter(|n| !self.removed.contains(n)).chain(self.added).copied().collect();
        v.sort_unstable();
        v
    }
}

/// The names of the LLVM kiln is built against (LLVM-C has no call that
/// checks a CPU name without aborting, so they are tables).
#[cfg(not(feature = "llvm19"))]
mod linked {
    use super::*;
    pub const VERSION: &str = "14";
    pub const X86_CPUS: Names = Names { base: LLVM14_X86_CPUS, added: &[], removed: &[] };
    pub const AARCH64_CPUS: Names = Names { base: LLVM14_AARCH64_CPUS, added: &[], removed: &[] };
    pub const X86_FEATURES: Names = Names { base: LLVM14_X86_FEATURES, added: &[], removed: &[] };
    pub const AARCH64_FEATURES: Names = Names { base: LLVM14_AARCH64_FEATURES, added: &[], removed: &[] };
    /// Newer CPUs than LLVM 14 knows, and the name to use instead.
    pub const NEWER_CPUS: &[(&str, &str)] = &[
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
}

#[cfg(feature = "llvm19")]
mod linked {
    use super::super::llvm19_names::*;
    use super::*;
    pub const VERSION: &str = "19";
    pub const X86_CPUS: Names = Names { base: LLVM14_X86_CPUS, added: X86_CPUS_ADDED, removed: X86_CPUS_REMOVED };
    pub const AARCH64_CPUS: Names =
        Names { base: LLVM14_AARCH64_CPUS, added: AARCH64_CPUS_ADDED, removed: AARCH64_CPUS_REMOVED };
    pub const X86_FEATURES: Names =
        Names { base: LLVM14_X86_FEATURES, added: X86_FEATURES_ADDED, removed: X86_FEATURES_REMOVED };
    pub const AARCH64_FEATURES: Names =
        Names { base: LLVM14_AARCH64_FEATURES, added: AARCH64_FEATURES_ADDED, removed: AARCH64_FEATURES_REMOVED };
    pub const NEWER_CPUS: &[(&str, &str)] = &[];
}

/// The major version of the LLVM kiln generates code with.
pub const LLVM_VERSION: &str = linked::VERSION;

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

/// An error when the linked LLVM does not know `cpu` for `triple` (x86 and
/// AArch64 are checked; other architectures are left to LLVM).
pub fn check_llvm_cpu(triple: &str, cpu: &str) -> Result<(), TargetError> {
    let known = if triple.starts_with("x86_64") || triple.starts_with("i686") || triple.starts_with("i386") {
        &linked::X86_CPUS
    } else if triple.starts_with("aarch64") || triple.starts_with("arm64") {
        &linked::AARCH64_CPUS
    } else {
        return Ok(());
    };
    if cpu.is_empty() || known.contains(cpu) {
        return Ok(());
    }
    let arch = triple.split('-').next().unwrap_or(triple);
    let llvm = linked::VERSION;
    match linked::NEWER_CPUS.iter().find(|(n, _)| *n == cpu) {
        Some((_, instead)) => Err(format!(
            "LLVM {llvm}, which kiln links, predates the CPU `{cpu}`; use `-mcpu={instead}` (or `-mcpu=native` on \
             that machine), or build kiln with LLVM 19 (feature `llvm19`)"
        )
        .into()),
        None => {
            Err(format!("LLVM {llvm} does not know the {arch} CPU `{cpu}`; it knows: {}", known.all().join(", "))
                .into())
        }
    }
}

/// The x86 `-mattr` feature names LLVM 14 knows (`llc -march=x86-64 -mattr=help`).
pub const LLVM14_X86_FEATURES: &[&str] = &[
    "16bit-mode",
    "32bit-mode",
    "3dnow",
    "3dnowa",
    "64bit",
    "64bit-mode",
    "adx",
    "aes",
    "amx-bf16",
    "amx-int8",
    "amx-tile",
    "avx",
    "avx2",
    "avx512bf16",
    "avx512bitalg",
    "avx512bw",
    "avx512cd",
    "avx512dq",
    "avx512er",
    "avx512f",
    "avx512fp16",
    "avx512ifma",
    "avx512pf",
    "avx512vbmi",
    "avx512vbmi2",
    "avx512vl",
    "avx512vnni",
    "avx512vp2intersect",
    "avx512vpopcntdq",
    "avxvnni",
    "bmi",
    "bmi2",
    "branchfusion",
    "cldemote",
    "clflushopt",
    "clwb",
    "clzero",
    "cmov",
    "crc32",
    "cx16",
    "cx8",
    "enqcmd",
    "ermsb",
    "f16c",
    "false-deps-lzcnt-tzcnt",
    "false-deps-popcnt",
    "fast-11bytenop",
    "fast-15bytenop",
    "fast-7bytenop",
    "fast-bextr",
    "fast-gather",
    "fast-hops",
    "fast-lzcnt",
    "fast-movbe",
    "fast-scalar-fsqrt",
    "fast-scalar-shift-masks",
    "fast-shld-rotate",
    "fast-variable-crosslane-shuffle",
    "fast-variable-perlane-shuffle",
    "fast-vector-fsqrt",
    "fast-vector-shift-masks",
    "fma",
    "fma4",
    "fsgsbase",
    "fsrm",
    "fxsr",
    "gfni",
    "hreset",
    "idivl-to-divb",
    "idivq-to-divl",
    "invpcid",
    "kl",
    "lea-sp",
    "lea-uses-ag",
    "lvi-cfi",
    "lvi-load-hardening",
    "lwp",
    "lzcnt",
    "macrofusion",
    "mmx",
    "movbe",
    "movdir64b",
    "movdiri",
    "mwaitx",
    "nopl",
    "pad-short-functions",
    "pclmul",
    "pconfig",
    "pku",
    "popcnt",
    "prefer-128-bit",
    "prefer-256-bit",
    "prefer-mask-registers",
    "prefetchwt1",
    "prfchw",
    "ptwrite",
    "rdpid",
    "rdrnd",
    "rdseed",
    "retpoline",
    "retpoline-external-thunk",
    "retpoline-indirect-branches",
    "retpoline-indirect-calls",
    "rtm",
    "sahf",
    "serialize",
    "seses",
    "sgx",
    "sha",
    "shstk",
    "slow-3ops-lea",
    "slow-incdec",
    "slow-lea",
    "slow-pmaddwd",
    "slow-pmulld",
    "slow-shld",
    "slow-two-mem-ops",
    "slow-unaligned-mem-16",
    "slow-unaligned-mem-32",
    "soft-float",
    "sse",
    "sse-unaligned-mem",
    "sse2",
    "sse3",
    "sse4.1",
    "sse4.2",
    "sse4a",
    "ssse3",
    "tagged-globals",
    "tbm",
    "tsxldtrk",
    "uintr",
    "use-aa",
    "use-glm-div-sqrt-costs",
    "use-slm-arith-costs",
    "vaes",
    "vpclmulqdq",
    "vzeroupper",
    "waitpkg",
    "wbnoinvd",
    "widekl",
    "x87",
    "xop",
    "xsave",
    "xsavec",
    "xsaveopt",
    "xsaves",
];

/// The AArch64 `-mattr` feature names LLVM 14 knows (`llc -march=aarch64 -mattr=help`).
pub const LLVM14_AARCH64_FEATURES: &[&str] = &[
    "CONTEXTIDREL2",
    "a35",
    "a510",
    "a53",
    "a55",
    "a57",
    "a64fx",
    "a65",
    "a710",
    "a72",
    "a73",
    "a75",
    "a76",
    "a77",
    "a78",
    "a78c",
    "aes",
    "aggressive-fma",
    "alternate-sextload-cvt-f32-pattern",
    "altnzcv",
    "am",
    "ampere1",
    "amvs",
    "apple-a10",
    "apple-a11",
    "apple-a12",
    "apple-a13",
    "apple-a14",
    "apple-a7",
    "apple-a7-sysreg",
    "arith-bcc-fusion",
    "arith-cbz-fusion",
    "balance-fp-ops",
    "bf16",
    "brbe",
    "bti",
    "call-saved-x10",
    "call-saved-x11",
    "call-saved-x12",
    "call-saved-x13",
    "call-saved-x14",
    "call-saved-x15",
    "call-saved-x18",
    "call-saved-x8",
    "call-saved-x9",
    "carmel",
    "ccdp",
    "ccidx",
    "ccpp",
    "cmp-bcc-fusion",
    "complxnum",
    "cortex-r82",
    "cortex-x1",
    "cortex-x2",
    "crc",
    "crypto",
    "custom-cheap-as-move",
    "disable-latency-sched-heuristic",
    "dit",
    "dotprod",
    "ecv",
    "el2vmsa",
    "el3",
    "ete",
    "exynos-cheap-as-move",
    "exynosm3",
    "exynosm3",
    "f32mm",
    "f64mm",
    "falkor",
    "fgt",
    "fix-cortex-a53-835769",
    "flagm",
    "force-32bit-jump-tables",
    "fp-armv8",
    "fp16fml",
    "fptoint",
    "fullfp16",
    "fuse-address",
    "fuse-aes",
    "fuse-arith-logic",
    "fuse-crypto-eor",
    "fuse-csel",
    "fuse-literals",
    "harden-sls-blr",
    "harden-sls-nocomdat",
    "harden-sls-retbr",
    "hbc",
    "hcx",
    "i8mm",
    "jsconv",
    "kryo",
    "lor",
    "ls64",
    "lse",
    "lse2",
    "lsl-fast",
    "mops",
    "mpam",
    "mte",
    "neon",
    "neoverse512tvb",
    "neoversee1",
    "neoversen1",
    "neoversen2",
    "neoversev1",
    "no-bti-at-return-twice",
    "no-neg-immediates",
    "no-zcz-fp",
    "nv",
    "outline-atomics",
    "pan",
    "pan-rwv",
    "pauth",
    "perfmon",
    "predictable-select-expensive",
    "predres",
    "rand",
    "ras",
    "rcpc",
    "rcpc-immo",
    "rdm",
    "reserve-x1",
    "reserve-x10",
    "reserve-x11",
    "reserve-x12",
    "reserve-x13",
    "reserve-x14",
    "reserve-x15",
    "reserve-x18",
    "reserve-x2",
    "reserve-x20",
    "reserve-x21",
    "reserve-x22",
    "reserve-x23",
    "reserve-x24",
    "reserve-x25",
    "reserve-x26",
    "reserve-x27",
    "reserve-x28",
    "reserve-x3",
    "reserve-x30",
    "reserve-x4",
    "reserve-x5",
    "reserve-x6",
    "reserve-x7",
    "reserve-x9",
    "rme",
    "saphira",
    "sb",
    "sel2",
    "sha2",
    "sha3",
    "slow-misaligned-128store",
    "slow-paired-128",
    "slow-strqro-store",
    "sm4",
    "sme",
    "sme-f64",
    "sme-i64",
    "spe",
    "spe-eef",
    "specrestrict",
    "ssbs",
    "streaming-sve",
    "strict-align",
    "sve",
    "sve2",
    "sve2-aes",
    "sve2-bitperm",
    "sve2-sha3",
    "sve2-sm4",
    "tagged-globals",
    "thunderx",
    "thunderx2t99",
    "thunderx3t110",
    "thunderxt81",
    "thunderxt83",
    "thunderxt88",
    "tlb-rmi",
    "tme",
    "tpidr-el1",
    "tpidr-el2",
    "tpidr-el3",
    "tracev8.4",
    "trbe",
    "tsv110",
    "uaops",
    "use-experimental-zeroing-pseudos",
    "use-postra-scheduler",
    "use-reciprocal-square-root",
    "use-scalar-inc-vl",
    "v8.1a",
    "v8.2a",
    "v8.3a",
    "v8.4a",
    "v8.5a",
    "v8.6a",
    "v8.7a",
    "v8.8a",
    "v8a",
    "v8r",
    "v9.1a",
    "v9.2a",
    "v9.3a",
    "v9a",
    "vh",
    "wfxt",
    "xs",
    "zcm",
    "zcz",
    "zcz-fp-workaround",
    "zcz-gp",
];

/// An error when an `-mattr` list (`+avx2,-fma`) names a feature the linked
/// LLVM does not know for `triple` (x86 and AArch64 are checked).
pub fn check_llvm_features(triple: &str, attrs: &str) -> Result<(), TargetError> {
    let (known, arch, march) =
        if triple.starts_with("x86_64") || triple.starts_with("i686") || triple.starts_with("i386") {
            (&linked::X86_FEATURES, "x86", "x86-64")
        } else if triple.starts_with("aarch64") || triple.starts_with("arm64") {
            (&linked::AARCH64_FEATURES, "AArch64", "aarch64")
        } else {
            return Ok(());
        };
    for attr in attrs.split(',').filter(|a| !a.is_empty()) {
        let Some(name) = attr.strip_prefix('+').or_else(|| attr.strip_prefix('-')) else {
            return Err(format!("`-mattr` entries are `+feature` or `-feature`, not `{attr}`").into());
        };
        if known.contains(name) {
            continue;
        }
        let close: Vec<&str> =
            known.all().into_iter().filter(|k| k.starts_with(name) || name.starts_with(k)).take(8).collect();
        let hint = if close.is_empty() { String::new() } else { format!(" (similar: {})", close.join(", ")) };
        return Err(format!(
            "LLVM {} does not know the {arch} feature `{name}`{hint}; `llc -march={march} -mattr=help` lists them",
            linked::VERSION
        )
        .into());
    }
    Ok(())
}
