//! Every available ISA variant of the f32 GEMM against a direct f64 formula: shapes with tails
//! and primes, leading dimensions wider than the matrices, each epilogue; bad arguments are
//! errors, not panics.

use heron_kernels::sgemm::{Epilogue, pack_b, packed_b_len, scratch_len, sgemm};
use heron_kernels::{Isa, KernelError};
use proptest::prelude::*;

#[allow(clippy::too_many_arguments)]
fn reference(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc: f64 = (0..k).map(|p| a[i * lda + p] as f64 * b[p * n + j] as f64).sum();
            acc += bias.map_or(0.0, |b| b[j] as f64);
            c[i * n + j] = if relu { acc.max(0.0) } else { acc };
        }
    }
    c
}

fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_isa_matches_the_reference(
        m in 1usize..40, n in 1usize..70, k in 0usize..50, extra in 0usize..5,
        bias in any::<bool>(), relu in any::<bool>(), seed in any::<u64>(),
    ) {
        let (lda, ldc) = (k + extra, n + extra);
        let a = values(m * lda, seed);
        let b = values(k * n, seed ^ 0x55);
        let bias_values = values(n, seed ^ 0xAA);
        let bias = bias.then_some(&bias_values[..]);
        let want = reference(m, n, k, &a, lda, &b, bias, relu);
        for isa in Isa::available() {
            let mut packed = vec![f32::NAN; packed_b_len(isa, k, n).unwrap()];
            pack_b(isa, &b, n, k, n, &mut packed).unwrap();
            let mut scratch = vec![f32::NAN; scratch_len(isa, k).unwrap()];
            let mut c = vec![f32::NAN; (m - 1) * ldc + n];
            sgemm(isa, (m, n, k), &a, lda, &packed, &mut c, ldc, Epilogue { bias, relu }, &mut scratch).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (got, w) = (c[i * ldc + j] as f64, want[i * n + j]);
                    prop_assert!((got - w).abs() <= 1e-4 * w.abs().max(1.0), "{isa:?} [{i}, {j}]: {got} vs {w}");
                }
                // Padding between rows of C is left alone.
                if i + 1 < m {
                    prop_assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|v| v.is_nan()), "{isa:?} wrote padding");
                }
            }
        }
    }
}

#[test]
fn short_operands_are_errors() {
    let isa = Isa::detect();
    let (m, n, k) = (5, 7, 3);
    let packed = vec![0.0; packed_b_len(isa, k, n).unwrap()];
    let mut scratch = vec![0.0; scratch_len(isa, k).unwrap()];
    let mut c = vec![0.0; m * n];
    let short_a = vec![0.0; m * k - 1];
    let err = sgemm(isa, (m, n, k), &short_a, k, &packed, &mut c, n, Epilogue::default(), &mut scratch).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "A", .. }), "{err}");
    let a = vec![0.0; m * k];
    let err = sgemm(isa, (m, n, k), &a, k, &packed[1..], &mut c, n, Epilogue::default(), &mut scratch).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "packed B", .. }), "{err}");
    let bias = [0.0; 6];
    let epilogue = Epilogue { bias: Some(&bias), relu: false };
    let err = sgemm(isa, (m, n, k), &a, k, &packed, &mut c, n, epilogue, &mut scratch).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "bias", .. }), "{err}");
    let err = sgemm(isa, (m, n, k), &a, k, &packed, &mut c, n - 1, Epilogue::default(), &mut scratch).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "C", .. }), "{err}");
    assert!(matches!(packed_b_len(isa, usize::MAX, 2), Err(KernelError::Overflow(_))));
    // k = 0 with an empty A and a wide leading dimension: C is the bias.
    let bias = [1.0; 7];
    let epilogue = Epilogue { bias: Some(&bias), relu: true };
    sgemm(isa, (m, n, 0), &[], 9, &[], &mut c, n, epilogue, &mut scratch).unwrap();
    assert!(c.iter().all(|&v| v == 1.0));
}
