//! heron-kernels: precompiled CPU kernels for the hot loops Cranelift's 128-bit vectors cannot
//! bring to peak (see `shared/notes/cpu-kernels-facts.md`). Each kernel has an AVX-512 variant
//! and an AVX2+FMA variant, chosen at run time from CPUID ([`Isa::detect`]), and a scalar
//! reference the variants are property-tested against. Kernels allocate nothing: packed
//! operands and scratch are slices the caller provides (planned pool memory), sized by the
//! kernel's `*_len` functions.
//!
//! This is the only crate of the workspace with `unsafe` code besides the memory and loader
//! modules: SIMD intrinsics behind `#[target_feature]`, called only after the feature was
//! detected, on slices whose lengths are checked before any vector access.

#![allow(unsafe_code)]

pub mod sgemm;

/// The instruction set a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512F: 16 f32 lanes, 32 vector registers.
    Avx512,
    /// AVX2 with FMA: 8 f32 lanes, 16 vector registers.
    Avx2Fma,
    /// Portable scalar code (the reference, and the fallback on other CPUs).
    Scalar,
}

impl Isa {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Isa::Avx2Fma;
            }
        }
        Isa::Scalar
    }

    /// Whether this CPU can run kernels of this instruction set.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every instruction set this CPU can run, best first.
    pub fn available() -> Vec<Isa> {
        [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar].into_iter().filter(|i| i.is_available()).collect()
    }
}

/// Why a kernel refused its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("{what} holds {got} elements, the kernel needs {need}")]
    TooShort { what: &'static str, got: usize, need: usize },
    #[error("{isa:?} kernels do not run on this CPU")]
    Unavailable { isa: Isa },
    #[error("the sizes overflow: {0}")]
    Overflow(&'static str),
}
