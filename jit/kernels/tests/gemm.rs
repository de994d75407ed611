//! Every available ISA variant of the f32 GEMM against a direct f64 formula: shapes with tails
//! and primes, leading dimensions wider than the matrices, transposed B, every epilogue (every
//! activation), task splits; all ISAs give the same bits; bad arguments are errors, not panics.

#[allow(dead_code)]
mod common;

use common::{activation_reference, activations, clamp, close, values};
use heron_kernels::conv::Activation;
use heron_kernels::gemm::{Epilogue, pack_b, packed_b_len, sgemm, sgemm_share};
use heron_kernels::{Isa, KernelError};
use proptest::prelude::*;

#[allow(clippy::too_many_arguments)]
fn reference(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    lda: usize,
    b: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    bounds: Option<(f32, f32)>,
    activation: Option<Activation>,
) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc: f64 = (0..k).map(|p| a[i * lda + p] as f64 * b[p * n + j] as f64).sum();
            acc += bias.map_or(0.0, |b| b[j] as f64);
            acc += residual.map_or(0.0, |r| r[i * n + j] as f64);
            let v = clamp(acc, bounds);
            c[i * n + j] = activation.map_or(v, |f| activation_reference(f, v));
        }
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_isa_matches_the_reference(
        m in 1usize..40, n in 1usize..70, k in 0usize..50, extra in 0usize..5,
        bias in any::<bool>(), residual in any::<bool>(), clamp_kind in 0usize..3, transposed in any::<bool>(),
        activation in prop_oneof![Just(None), activations().prop_map(Some)], tasks in 1usize..4, seed in any::<u64>(),
    ) {
        let (lda, ldc) = (k + extra, n + extra);
        let a = values(m * lda, seed);
        let b = values(k * n, seed ^ 0x55);
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let bias_values = values(n, seed ^ 0xAA);
        let bias = bias.then_some(&bias_values[..]);
        let residual_values = values(m * n, seed ^ 0x33);
        let residual = residual.then_some(&residual_values[..]);
        let bounds = [None, Some((0.0, f32::INFINITY)), Some((-0.25, 0.5))][clamp_kind];
        let want = reference((m, n, k), &a, lda, &b, bias, residual, bounds, activation);
        let mut first: Option<Vec<f32>> = None;
        for isa in [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar] {
            let mut packed = vec![f32::NAN; packed_b_len(isa, k, n).unwrap()];
            if transposed {
                pack_b(isa, &bt, (1, k), (k, n), &mut packed).unwrap();
            } else {
                pack_b(isa, &b, (n, 1), (k, n), &mut packed).unwrap();
            }
            let mut c = vec![f32::NAN; (m - 1) * ldc + n];
            let epilogue = Epilogue { bias, residual: residual.map(|r| (r, n)), clamp: bounds, activation };
            for task in 0..tasks {
                sgemm_share(isa, (m, n, k), (&a, lda), &packed, (&mut c, ldc), epilogue, (task, tasks)).unwrap();
            }
            for i in 0..m {
                for j in 0..n {
                    let (got, w) = (c[i * ldc + j], want[i * n + j]);
                    prop_assert!(close(got, w), "{isa:?} [{i}, {j}]: {got} vs {w}");
                }
                // Padding between rows of C is left alone.
                if i + 1 < m {
                    prop_assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|v| v.is_nan()), "{isa:?} wrote padding");
                }
            }
            // The same bits on every ISA (missing ones run their tile shapes in scalar code).
            match &first {
                None => first = Some(c),
                Some(f) => prop_assert!(f.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan()), "{isa:?} differs"),
            }
        }
    }
}

/// Long reductions split the rows into bands that fit L2 (several bands, the last short):
/// every element is still the in-order f32 sum, bit for bit, for any task split.
#[test]
fn long_reductions_run_in_row_bands() {
    for (m, n, k) in [(101, 40, 3000), (13, 70, 20_000), (64, 17, 1500)] {
        let a = values(m * k, 7);
        let b = values(k * n, 9);
        // Every tile adds its products in order, in f32: the same bits as this.
        let want: Vec<f32> = (0..m * n)
            .map(|e| (0..k).fold(0.0f32, |acc, p| a[(e / n) * k + p].mul_add(b[p * n + e % n], acc)))
            .collect();
        for isa in [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar] {
            let mut packed = vec![0.0; packed_b_len(isa, k, n).unwrap()];
            pack_b(isa, &b, (n, 1), (k, n), &mut packed).unwrap();
            for tasks in [1, 2, 3, 7] {
                let mut c = vec![f32::NAN; m * n];
                for task in 0..tasks {
                    sgemm_share(isa, (m, n, k), (&a, k), &packed, (&mut c, n), Epilogue::default(), (task, tasks))
                        .unwrap();
                }
                for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
                    assert_eq!(got.to_bits(), w.to_bits(), "{isa:?} {m}x{n}x{k}, {tasks} tasks, element {i}");
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
    let mut c = vec![0.0; m * n];
    let short_a = vec![0.0; m * k - 1];
    let err = sgemm(isa, (m, n, k), &short_a, k, &packed, &mut c, n, Epilogue::default()).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "A", .. }), "{err}");
    let a = vec![0.0; m * k];
    let err = sgemm(isa, (m, n, k), &a, k, &packed[1..], &mut c, n, Epilogue::default()).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "packed B", .. }), "{err}");
    let bias = [0.0; 6];
    let epilogue = Epilogue { bias: Some(&bias), ..Epilogue::default() };
    let err = sgemm(isa, (m, n, k), &a, k, &packed, &mut c, n, epilogue).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "bias", .. }), "{err}");
    let err = sgemm(isa, (m, n, k), &a, k, &packed, &mut c, n - 1, Epilogue::default()).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "C", .. }), "{err}");
    assert!(matches!(packed_b_len(isa, usize::MAX, 2), Err(KernelError::Overflow(_))));
    let err = sgemm_share(isa, (m, n, k), (&a, k), &packed, (&mut c, n), Epilogue::default(), (2, 2)).unwrap_err();
    assert!(matches!(err, KernelError::Share { .. }), "{err}");
    // k = 0 with an empty A and a wide leading dimension: C is the clamped bias.
    let bias = [1.0; 7];
    let epilogue = Epilogue { bias: Some(&bias), clamp: Some((0.0, 0.5)), ..Epilogue::default() };
    sgemm(isa, (m, n, 0), &[], 9, &[], &mut c, n, epilogue).unwrap();
    assert!(c.iter().all(|&v| v == 0.5));
}
