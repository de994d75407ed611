//! The machine's measured FMA peak, the yardstick kernel GFLOP/s are reported against: a loop
//! of independent fused multiply-adds on registers (no memory traffic), enough chains in
//! flight to cover the FMA latency on every port. The integer kernels' yardstick is the same
//! loop of their multiply-accumulate instruction (`vpdpbusd`, or `vpmaddwd` and `vpaddd`).

use crate::Isa;
use crate::qgemm::Int8Isa;

/// Runs `iterations` rounds of independent FMAs with `isa`'s widest vectors and returns the
/// floating-point operations done (a multiply-add counts two); time the call to get FLOP/s.
/// The scalar ISA runs scalar FMAs.
pub fn fma_flops(isa: Isa, iterations: u64) -> f64 {
    const CHAINS: usize = 12;
    let lanes = match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.is_available() => {
            // SAFETY: the feature was detected.
            std::hint::black_box(unsafe { x86::avx512(iterations) });
            16
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma if isa.is_available() => {
            // SAFETY: the features were detected.
            std::hint::black_box(unsafe { x86::avx2(iterations) });
            8
        }
        _ => {
            let mut acc = [1.0f32; CHAINS];
            let (a, b) = (std::hint::black_box(0.999_f32), std::hint::black_box(0.001_f32));
            for _ in 0..iterations {
                for v in acc.iter_mut() {
                    *v = v.mul_add(a, b);
                }
            }
            std::hint::black_box(acc);
            1
        }
    };
    2.0 * (CHAINS * lanes) as f64 * iterations as f64
}

/// Runs `iterations` rounds of independent integer multiply-accumulates with `isa`'s
/// instruction and returns the operations done (a byte multiply-add counts two); the scalar
/// variant runs scalar multiply-adds.
pub fn int8_ops(isa: Int8Isa, iterations: u64) -> f64 {
    const CHAINS: usize = 12;
    let products = match isa {
        #[cfg(target_arch = "x86_64")]
        Int8Isa::Vnni512 if isa.is_available() => {
            // SAFETY: the features were detected.
            std::hint::black_box(unsafe { x86::vnni512(iterations) });
            64
        }
        #[cfg(target_arch = "x86_64")]
        Int8Isa::Avx2 if isa.is_available() => {
            // SAFETY: the feature was detected.
            std::hint::black_box(unsafe { x86::madd256(iterations) });
            16
        }
        _ => {
            let mut acc = [1i32; CHAINS];
            let (a, b) = (std::hint::black_box(3i32), std::hint::black_box(5i32));
            for _ in 0..iterations {
                for v in acc.iter_mut() {
                    *v = v.wrapping_mul(a).wrapping_add(b);
                }
            }
            std::hint::black_box(acc);
            1
        }
    };
    2.0 * (CHAINS * products) as f64 * iterations as f64
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    macro_rules! peak {
        ($name:ident, $feature:literal, $ty:ty, $splat:ident, $fma:ident) => {
            #[target_feature(enable = $feature)]
            pub(super) fn $name(iterations: u64) -> [$ty; 12] {
                let (a, b) = ($splat(std::hint::black_box(0.999)), $splat(std::hint::black_box(0.001)));
                let mut acc = [$splat(1.0); 12];
                for _ in 0..iterations {
                    for v in acc.iter_mut() {
                        *v = $fma(*v, a, b);
                    }
                }
                acc
            }
        };
    }
    peak!(avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps);
    peak!(avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps);

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn vnni512(iterations: u64) -> [__m512i; 12] {
        let (a, b) = (_mm512_set1_epi8(std::hint::black_box(3)), _mm512_set1_epi8(std::hint::black_box(5)));
        let mut acc = [_mm512_setzero_si512(); 12];
        for _ in 0..iterations {
            for v in acc.iter_mut() {
                *v = _mm512_dpbusd_epi32(*v, a, b);
            }
        }
        acc
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn madd256(iterations: u64) -> [__m256i; 12] {
        let b = _mm256_set1_epi16(std::hint::black_box(5));
        let mut acc = [_mm256_set1_epi16(std::hint::black_box(3)); 12];
        // Each product reads its chain, so none is hoisted out of the loop.
        for _ in 0..iterations {
            for v in acc.iter_mut() {
                *v = _mm256_add_epi32(*v, _mm256_madd_epi16(*v, b));
            }
        }
        acc
    }
}
