//! Which instruction-set features the running CPU has, so that a model
//! compiled for features this CPU lacks is refused when it is created
//! instead of dying of SIGILL in its first kernel.
//!
//! Names are LLVM's (`avx2`, `avx512f`, `avx512vnni`, `amx-tile`, `dotprod`):
//! kiln records them from the target a model was built for. On x86 they are
//! read from CPUID and, for the register files the OS must save (AVX,
//! AVX-512, AMX), from XCR0 — without `std`, so `no_std` models check too.

/// Whether this CPU (and OS) supports the feature `name`; `None` for a name
/// this runtime cannot check (the caller then trusts the build).
pub fn has_feature(name: &str) -> Option<bool> {
    imp::Cpu::read().has(name)
}

/// The first of `required` that this CPU lacks (the CPU read once: CPUID
/// leaves the virtual machine on every call).
pub fn first_missing<'a>(required: &[&'a str]) -> Option<&'a str> {
    let cpu = imp::Cpu::read();
    required.iter().copied().find(|f| cpu.has(f) == Some(false))
}

/// The features [`has_feature`] can check on this architecture that this CPU has.
pub fn detected() -> impl Iterator<Item = &'static str> {
    let cpu = imp::Cpu::read();
    imp::CHECKABLE.iter().copied().filter(move |f| cpu.has(f) == Some(true))
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use core::arch::x86_64::{__cpuid_count, CpuidResult};

    pub const CHECKABLE: &[&str] = &[
        "sse4.2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512cd",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512vnni",
        "avx512bf16",
        "avxvnni",
        "amx-tile",
        "amx-int8",
        "amx-bf16",
        // AMD's own extensions: LLVM emits SSE4A's INSERTQ/EXTRQ for byte
        // shuffles when building for a Zen CPU, which Intel CPUs lack.
        "sse4a",
        "fma4",
        "xop",
        "tbm",
    ];

    // `__cpuid_count` became a safe function after kiln's minimum Rust (1.85).
    #[allow(unused_unsafe)]
    fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
        // SAFETY: CPUID exists on every x86_64 CPU; leaves above the maximum
        // are not asked for (callers check leaf 0 first).
        unsafe { __cpuid_count(leaf, sub) }
    }

    /// XCR0: which register states the OS saves (0 when XGETBV is unavailable:
    /// no OSXSAVE in leaf 1's ECX).
    fn xcr0(l1: CpuidResult) -> u64 {
        if l1.ecx & (1 << 27) == 0 {
            return 0;
        }
        #[target_feature(enable = "xsave")]
        unsafe fn read() -> u64 {
            // SAFETY: the caller checked OSXSAVE.
            unsafe { core::arch::x86_64::_xgetbv(0) }
        }
        // SAFETY: OSXSAVE set means XGETBV is available and enabled.
        unsafe { read() }
    }

    /// Whether this process may use the AMX tile registers. Linux enables
    /// their (8 KB) state per process on request (`arch_prctl`
    /// `ARCH_REQ_XCOMP_PERM`, XTILEDATA): without the request the first tile
    /// instruction raises SIGILL. Requesting it again is harmless, and
    /// covers every thread of the process.
    #[cfg(target_os = "linux")]
    fn amx_permitted() -> bool {
        const SYS_ARCH_PRCTL: usize = 158;
        const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
        const XFEATURE_XTILEDATA: usize = 18;
        let ret: isize;
        // SAFETY: the arch_prctl system call with two integer arguments; it
        // reads and writes no user memory. `syscall` clobbers rcx and r11.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }

    /// Other systems enable the tile state for every process (or not at all,
    /// which XCR0 shows).
    #[cfg(not(target_os = "linux"))]
    fn amx_permitted() -> bool {
        true
    }

    /// The CPUID leaves and XCR0 the checks read.
    #[derive(Clone, Copy)]
    pub struct Cpu {
        l1: CpuidResult,
        l7: CpuidResult,
        l7_1: CpuidResult,
        /// Extended leaf 0x8000_0001 (AMD's extensions).
        ext1: CpuidResult,
        xcr0: u64,
    }

    impl Cpu {
        pub fn read() -> Cpu {
            let zero = CpuidResult { eax: 0, ebx: 0, ecx: 0, edx: 0 };
            let (l7, l7_1) = if cpuid(0, 0).eax >= 7 { (cpuid(7, 0), cpuid(7, 1)) } else { (zero, zero) };
            let ext1 = if cpuid(0x8000_0000, 0).eax >= 0x8000_0001 { cpuid(0x8000_0001, 0) } else { zero };
            let l1 = cpuid(1, 0);
            Cpu { l1, l7, l7_1, ext1, xcr0: xcr0(l1) }
        }

        pub fn has(&self, name: &str) -> Option<bool> {
            let Cpu { l1, l7, l7_1, ext1, xcr0 } = *self;
            let avx_state = xcr0 & 0b110 == 0b110;
            let avx512_state = avx_state && xcr0 & 0b1110_0000 == 0b1110_0000;
            let amx_state = xcr0 & (0b11 << 17) == 0b11 << 17;
            let bit = |r: u32, b: u32| r & (1 << b) != 0;
            Some(match name {
                "sse4.2" => bit(l1.ecx, 20),
                "avx" => bit(l1.ecx, 28) && avx_state,
                "fma" => bit(l1.ecx, 12) && avx_state,
                "f16c" => bit(l1.ecx, 29) && avx_state,
                "avx2" => bit(l7.ebx, 5) && avx_state,
                "avxvnni" => bit(l7_1.eax, 4) && avx_state,
                "avx512f" => bit(l7.ebx, 16) && avx512_state,
                "avx512dq" => bit(l7.ebx, 17) && avx512_state,
                "avx512cd" => bit(l7.ebx, 28) && avx512_state,
                "avx512bw" => bit(l7.ebx, 30) && avx512_state,
                "avx512vl" => bit(l7.ebx, 31) && avx512_state,
                "avx512vnni" => bit(l7.ecx, 11) && avx512_state,
                "avx512bf16" => bit(l7_1.eax, 5) && avx512_state,
                "amx-bf16" => bit(l7.edx, 22) && amx_state && amx_permitted(),
                "amx-tile" => bit(l7.edx, 24) && amx_state && amx_permitted(),
                "amx-int8" => bit(l7.edx, 25) && amx_state && amx_permitted(),
                "sse4a" => bit(ext1.ecx, 6),
                "xop" => bit(ext1.ecx, 11) && avx_state,
                "fma4" => bit(ext1.ecx, 16) && avx_state,
                "tbm" => bit(ext1.ecx, 21),
                _ => return None,
            })
        }
    }
}

#[cfg(all(target_arch = "aarch64", feature = "std"))]
mod imp {
    pub const CHECKABLE: &[&str] = &["neon", "dotprod", "bf16", "i8mm", "fullfp16"];

    /// std caches the detection; nothing to read up front.
    #[derive(Clone, Copy)]
    pub struct Cpu;

    impl Cpu {
        pub fn read() -> Cpu {
            Cpu
        }

        pub fn has(&self, name: &str) -> Option<bool> {
            Some(match name {
                "neon" => std::arch::is_aarch64_feature_detected!("neon"),
                "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
                "bf16" => std::arch::is_aarch64_feature_detected!("bf16"),
                "i8mm" => std::arch::is_aarch64_feature_detected!("i8mm"),
                "fullfp16" => std::arch::is_aarch64_feature_detected!("fp16"),
                _ => return None,
            })
        }
    }
}

#[cfg(not(any(target_arch = "x86_64", all(target_arch = "aarch64", feature = "std"))))]
mod imp {
    pub const CHECKABLE: &[&str] = &[];

    #[derive(Clone, Copy)]
    pub struct Cpu;

    impl Cpu {
        pub fn read() -> Cpu {
            Cpu
        }

        pub fn has(&self, _: &str) -> Option<bool> {
            None
        }
    }
}

#[cfg(all(test, target_arch = "x86_64", feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_std_detection() {
        assert_eq!(has_feature("avx2"), Some(std::arch::is_x86_feature_detected!("avx2")));
        assert_eq!(has_feature("fma"), Some(std::arch::is_x86_feature_detected!("fma")));
        assert_eq!(has_feature("avx512f"), Some(std::arch::is_x86_feature_detected!("avx512f")));
        assert_eq!(has_feature("avx512vnni"), Some(std::arch::is_x86_feature_detected!("avx512vnni")));
        assert_eq!(has_feature("avx512bf16"), Some(std::arch::is_x86_feature_detected!("avx512bf16")));
        assert_eq!(has_feature("sse4.2"), Some(true));
        assert_eq!(has_feature("sse4a"), Some(std::arch::is_x86_feature_detected!("sse4a")));
        assert_eq!(has_feature("tbm"), Some(std::arch::is_x86_feature_detected!("tbm")));
        assert_eq!(has_feature("no-such-feature"), None);
        assert_eq!(first_missing(&["sse4.2"]), None);
    }
}
