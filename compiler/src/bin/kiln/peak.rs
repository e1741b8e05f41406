//! `kiln peak`: the fp32 multiply-add peak of this CPU, measured, so that a
//! benchmark can show each model's GFLOP/s against what the machine does in
//! the same minutes (a shared machine's clock and neighbours move both).
//!
//! Each thread runs independent chains of fused multiply-adds on the widest
//! vectors the CPU has (AVX-512, AVX2 + FMA, NEON; scalar `mul_add`
//! otherwise): enough chains to cover the FMA latency on two pipes, no
//! memory traffic. The best of a few rounds is the peak.
//!
//! Where the CPU has them, the dot-product instructions that low-precision
//! kernels use are timed the same way, one line each: AVX-512 VNNI's
//! `vpdpbusd` (64 byte products per instruction, counted as 2 ops each) and
//! AVX-512 BF16's `vdpbf16ps` (32 bf16 products). Whether they beat the
//! FMA depends on the CPU: Sapphire Rapids issues `vdpbf16ps` at half the
//! FMA's rate, so bf16 there saves memory but no time.

use std::time::Instant;

/// Multiply-adds per chain per timed call (each is 2 FLOPs per lane).
const STEPS: u64 = 1 << 22;
/// Independent accumulators: latency (4–5 cycles) × FMA pipes (2), rounded up.
const CHAINS: usize = 12;

/// `kiln peak`: prints the peak at each thread count up to `threads`.
pub fn peak(threads: usize) -> Result<(), String> {
    let isa = Isa::widest();
    for n in 1..=threads.max(1) {
        let gflops = (0..5).map(|_| measure(isa, n)).fold(0.0, f64::max);
        println!("fp32 FMA peak: {gflops:.1} GFLOP/s on {n} thread(s) ({})", isa.name());
    }
    #[cfg(target_arch = "x86_64")]
    for dot in x86::Dot::available() {
        for n in 1..=threads.max(1) {
            let rate = (0..5).map(|_| measure_dot(dot, n)).fold(0.0, f64::max);
            println!("{}: {rate:.1} {} on {n} thread(s)", dot.name(), dot.unit());
        }
    }
    Ok(())
}

/// Giga-operations per second of `threads` threads each running one timed
/// dot-product call (12 chains of 16 lanes).
#[cfg(target_arch = "x86_64")]
fn measure_dot(dot: x86::Dot, threads: usize) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| std::hint::black_box(dot.chains()));
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    (threads as u64 * STEPS * CHAINS as u64 * 16 * dot.ops_per_lane()) as f64 / seconds / 1e9
}

/// GFLOP/s of `threads` threads each running one timed call.
fn measure(isa: Isa, threads: usize) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| std::hint::black_box(isa.chains()));
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    (threads as u64 * STEPS * CHAINS as u64 * 2 * isa.lanes() as u64) as f64 / seconds / 1e9
}

/// The instruction set timed: the widest this CPU has.
#[derive(Clone, Copy)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "aarch64")]
    Neon,
    #[cfg_attr(target_arch = "aarch64", allow(dead_code))]
    Scalar,
}

impl Isa {
    fn widest() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            return Isa::Neon;
        }
        #[allow(unreachable_code)]
        Isa::Scalar
    }

    fn name(self) -> &'static str {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "AVX-512",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "AVX2 + FMA",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "NEON",
            Isa::Scalar => "scalar",
        }
    }

    /// fp32 lanes per vector.
    fn lanes(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => 16,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => 8,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => 4,
            Isa::Scalar => 1,
        }
    }

    /// One timed call; returns a value so the work is kept.
    fn chains(self) -> f32 {
        match self {
            // SAFETY: `widest` chose this only on a CPU with AVX-512F.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { x86::avx512() },
            // SAFETY: `widest` chose this only on a CPU with AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::avx2() },
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => aarch64::neon(),
            Isa::Scalar => scalar(),
        }
    }
}

fn scalar() -> f32 {
    let mut acc = [0.0f32; CHAINS];
    let (a, b) = (std::hint::black_box(0.999_999f32), std::hint::black_box(1e-7f32));
    for _ in 0..STEPS {
        for x in &mut acc {
            *x = x.mul_add(a, b);
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, STEPS};
    use std::arch::x86_64::*;

    /// AVX-512 in assembly: its intrinsics are newer than kiln's minimum
    /// Rust (1.85). Twelve zmm accumulators, zeroed by the VEX `vxorps`.
    pub unsafe fn avx512() -> f32 {
        let (a, b) = (0.999_999f32, 1e-7f32);
        // SAFETY: the caller checked AVX-512F; the registers written are
        // caller-saved (`clobber_abi("C")`) and nothing touches memory but
        // the two loads from `a` and `b`.
        unsafe {
            std::arch::asm!(
                "vbroadcastss zmm12, dword ptr [{a}]",
                "vbroadcastss zmm13, dword ptr [{b}]",
                "vxorps xmm0, xmm0, xmm0", "vxorps xmm1, xmm1, xmm1", "vxorps xmm2, xmm2, xmm2",
                "vxorps xmm3, xmm3, xmm3", "vxorps xmm4, xmm4, xmm4", "vxorps xmm5, xmm5, xmm5",
                "vxorps xmm6, xmm6, xmm6", "vxorps xmm7, xmm7, xmm7", "vxorps xmm8, xmm8, xmm8",
                "vxorps xmm9, xmm9, xmm9", "vxorps xmm10, xmm10, xmm10", "vxorps xmm11, xmm11, xmm11",
                "2:",
                "vfmadd213ps zmm0, zmm12, zmm13", "vfmadd213ps zmm1, zmm12, zmm13",
                "vfmadd213ps zmm2, zmm12, zmm13", "vfmadd213ps zmm3, zmm12, zmm13",
                "vfmadd213ps zmm4, zmm12, zmm13", "vfmadd213ps zmm5, zmm12, zmm13",
                "vfmadd213ps zmm6, zmm12, zmm13", "vfmadd213ps zmm7, zmm12, zmm13",
                "vfmadd213ps zmm8, zmm12, zmm13", "vfmadd213ps zmm9, zmm12, zmm13",
                "vfmadd213ps zmm10, zmm12, zmm13", "vfmadd213ps zmm11, zmm12, zmm13",
                "dec rcx",
                "jnz 2b",
                "vzeroupper",
                a = in(reg) &a,
                b = in(reg) &b,
                inout("rcx") STEPS => _,
                clobber_abi("C"),
                options(nostack),
            );
        }
        const { assert!(CHAINS == 12) };
        0.0
    }

    /// A dot-product instruction `kiln peak` times where the CPU has it.
    #[derive(Clone, Copy)]
    pub enum Dot {
        /// AVX-512 VNNI `vpdpbusd`: per 32-bit lane, 4 byte products and their sum.
        Vnni,
        /// AVX-512 BF16 `vdpbf16ps`: per fp32 lane, 2 bf16 products and their sum.
        Bf16,
    }

    impl Dot {
        pub fn available() -> Vec<Dot> {
            let mut v = Vec::new();
            if std::arch::is_x86_feature_detected!("avx512vnni") {
                v.push(Dot::Vnni);
            }
            if std::arch::is_x86_feature_detected!("avx512bf16") {
                v.push(Dot::Bf16);
            }
            v
        }

        pub fn name(self) -> &'static str {
            match self {
                Dot::Vnni => "int8 dot products (AVX-512 VNNI vpdpbusd)",
                Dot::Bf16 => "bf16 dot products (AVX-512 BF16 vdpbf16ps)",
            }
        }

        pub fn unit(self) -> &'static str {
            match self {
                Dot::Vnni => "GOP/s",
                Dot::Bf16 => "GFLOP/s",
            }
        }

        /// Operations per 32-bit lane and instruction (a multiply and an add per product).
        pub fn ops_per_lane(self) -> u64 {
            match self {
                Dot::Vnni => 8,
                Dot::Bf16 => 4,
            }
        }

        /// One timed call: twelve zmm accumulators, STEPS rounds.
        pub fn chains(self) -> f32 {
            // SAFETY: `available` listed this instruction only on a CPU that has it;
            // the registers written are caller-saved (`clobber_abi("C")`) and
            // nothing touches memory.
            unsafe {
                match self {
                    Dot::Vnni => std::arch::asm!(
                        "vpternlogd zmm12, zmm12, zmm12, 0xff",
                        "vpabsb zmm12, zmm12",
                        "vxorps xmm0, xmm0, xmm0", "vxorps xmm1, xmm1, xmm1", "vxorps xmm2, xmm2, xmm2",
                        "vxorps xmm3, xmm3, xmm3", "vxorps xmm4, xmm4, xmm4", "vxorps xmm5, xmm5, xmm5",
                        "vxorps xmm6, xmm6, xmm6", "vxorps xmm7, xmm7, xmm7", "vxorps xmm8, xmm8, xmm8",
                        "vxorps xmm9, xmm9, xmm9", "vxorps xmm10, xmm10, xmm10", "vxorps xmm11, xmm11, xmm11",
                        "2:",
                        "vpdpbusd zmm0, zmm12, zmm12", "vpdpbusd zmm1, zmm12, zmm12",
                        "vpdpbusd zmm2, zmm12, zmm12", "vpdpbusd zmm3, zmm12, zmm12",
                        "vpdpbusd zmm4, zmm12, zmm12", "vpdpbusd zmm5, zmm12, zmm12",
                        "vpdpbusd zmm6, zmm12, zmm12", "vpdpbusd zmm7, zmm12, zmm12",
                        "vpdpbusd zmm8, zmm12, zmm12", "vpdpbusd zmm9, zmm12, zmm12",
                        "vpdpbusd zmm10, zmm12, zmm12", "vpdpbusd zmm11, zmm12, zmm12",
                        "dec rcx",
                        "jnz 2b",
                        "vzeroupper",
                        inout("rcx") STEPS => _,
                        clobber_abi("C"),
                        options(nostack, nomem),
                    ),
                    // bf16 1.0 in both halves of each lane (0x3f80): normal
                    // values, no microcode assists.
                    Dot::Bf16 => std::arch::asm!(
                        "mov eax, 0x3f803f80",
                        "vpbroadcastd zmm12, eax",
                        "vxorps xmm0, xmm0, xmm0", "vxorps xmm1, xmm1, xmm1", "vxorps xmm2, xmm2, xmm2",
                        "vxorps xmm3, xmm3, xmm3", "vxorps xmm4, xmm4, xmm4", "vxorps xmm5, xmm5, xmm5",
                        "vxorps xmm6, xmm6, xmm6", "vxorps xmm7, xmm7, xmm7", "vxorps xmm8, xmm8, xmm8",
                        "vxorps xmm9, xmm9, xmm9", "vxorps xmm10, xmm10, xmm10", "vxorps xmm11, xmm11, xmm11",
                        "2:",
                        "vdpbf16ps zmm0, zmm12, zmm12", "vdpbf16ps zmm1, zmm12, zmm12",
                        "vdpbf16ps zmm2, zmm12, zmm12", "vdpbf16ps zmm3, zmm12, zmm12",
                        "vdpbf16ps zmm4, zmm12, zmm12", "vdpbf16ps zmm5, zmm12, zmm12",
                        "vdpbf16ps zmm6, zmm12, zmm12", "vdpbf16ps zmm7, zmm12, zmm12",
                        "vdpbf16ps zmm8, zmm12, zmm12", "vdpbf16ps zmm9, zmm12, zmm12",
                        "vdpbf16ps zmm10, zmm12, zmm12", "vdpbf16ps zmm11, zmm12, zmm12",
                        "dec rcx",
                        "jnz 2b",
                        "vzeroupper",
                        out("eax") _,
                        inout("rcx") STEPS => _,
                        clobber_abi("C"),
                        options(nostack, nomem),
                    ),
                }
            }
            0.0
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2() -> f32 {
        let (a, b) = (_mm256_set1_ps(std::hint::black_box(0.999_999)), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_setzero_ps(); CHAINS];
        for _ in 0..STEPS {
            for x in &mut acc {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        let mut lanes = [0.0f32; 8];
        acc.iter()
            .map(|&x| {
                // SAFETY: `lanes` holds the 8 floats written.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), x) };
                lanes.iter().sum::<f32>()
            })
            .sum()
    }
}

#[cfg(target_arch = "aarch64")]
mod aarch64 {
    use super::{CHAINS, STEPS};
    use std::arch::aarch64::*;

    pub fn neon() -> f32 {
        // SAFETY: NEON is part of the AArch64 base architecture.
        unsafe {
            let (a, b) = (vdupq_n_f32(std::hint::black_box(0.999_999)), vdupq_n_f32(1e-7));
            let mut acc = [vdupq_n_f32(0.0); CHAINS];
            for _ in 0..STEPS {
                for x in &mut acc {
                    *x = vfmaq_f32(b, *x, a);
                }
            }
            acc.iter().map(|&x| vaddvq_f32(x)).sum()
        }
    }
}
