//! `kiln peak`: the fp32 multiply-add peak of this CPU, measured, so that a
//! benchmark can show each model's GFLOP/s against what the machine does in
//! the same minutes (a shared machine's clock and neighbours move both).
//!
//! Each thread runs independent chains of fused multiply-adds on the widest
//! vectors the CPU has (AVX-512, AVX2 + FMA, NEON; scalar `mul_add`
//! otherwise): enough chains to cover the FMA latency on two pipes, no
//! memory traffic. The best of a few rounds is the peak.

use std::time::Instant;

/// Multiply-adds per chain per timed call (each is 2 FLOPs per lane).
const STEPS: u64 = 1 << 22;
/// Independent accumulators: latency (4–5 cycles) × FMA pipes (2), rounded up.
const CHAINS: usize = 12;

/// `kiln peak`: prints the peak at each thread count up to `threads`.
pub fn peak(threads: usize) -> Result<(), String> {
    let (isa, _) = widest();
    for n in 1..=threads.max(1) {
        let gflops = (0..5).map(|_| measure(n)).fold(0.0, f64::max);
        println!("fp32 FMA peak: {gflops:.1} GFLOP/s on {n} thread(s) ({isa})");
    }
    Ok(())
}

/// GFLOP/s of `threads` threads each running one timed call.
fn measure(threads: usize) -> f64 {
    let (_, lanes) = widest();
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| std::hint::black_box(chains()));
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    (threads as u64 * STEPS * CHAINS as u64 * 2 * lanes as u64) as f64 / seconds / 1e9
}

/// The instruction set timed and its fp32 lanes.
fn widest() -> (&'static str, usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return ("AVX-512", 16);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return ("AVX2 + FMA", 8);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        return ("NEON", 4);
    }
    #[allow(unreachable_code)]
    ("scalar", 1)
}

/// One timed call on the widest vectors; returns a value so the work is kept.
fn chains() -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { x86::avx512() };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { x86::avx2() };
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        return aarch64::neon();
    }
    #[allow(unreachable_code)]
    scalar()
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
