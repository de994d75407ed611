//! The machine's measured FMA peak, the yardstick kernel GFLOP/s are reported against: a loop
//! of independent fused multiply-adds on registers (no memory traffic), enough chains in
//! flight to cover the FMA latency on every port.

use crate::Isa;

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
}
