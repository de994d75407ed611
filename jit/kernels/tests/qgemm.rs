//! The integer kernels against a direct i32 formula, bit for bit: every variant (one this CPU
//! lacks runs its layout's scalar code), u8 and i8 operands, zero points for all and per line,
//! shapes with tails and primes, padding, strides, dilations, groups, task splits; bad
//! arguments are errors, not panics.

use heron_kernels::KernelError;
use heron_kernels::conv::Conv2d;
use heron_kernels::qgemm::{
    Bytes, Int8Isa, conv_pack_weights, conv_packed_weights_len, conv_scratch_len, conv_share, gemm_scratch_len,
    gemm_share, pack_b, packed_b_len,
};
use proptest::prelude::*;

const VARIANTS: [Int8Isa; 3] = [Int8Isa::Vnni512, Int8Isa::Avx2, Int8Isa::Scalar];

/// Bytes from a seed (a small LCG; extremes included).
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            match i % 11 {
                0 => 0,
                1 => 255,
                2 => 128,
                3 => 127,
                _ => (s >> 33) as u8,
            }
        })
        .collect()
}

fn v(bits: u8, signed: bool) -> i32 {
    if signed { i32::from(bits as i8) } else { i32::from(bits) }
}

/// Zero points: one or `lines`, within the bytes' range.
fn zeros(lines: usize, per_line: bool, signed: bool, seed: u64) -> Vec<i32> {
    bytes(if per_line { lines } else { 1 }, seed).into_iter().map(|b| v(b, signed)).collect()
}

fn zero_at(zero: &[i32], line: usize) -> i32 {
    if zero.len() == 1 { zero[0] } else { zero[line] }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn gemm_matches_the_formula(
        m in 1usize..30, n in 1usize..70, k in 0usize..70,
        a_signed in any::<bool>(), b_signed in any::<bool>(), per_column in any::<bool>(),
        transposed in any::<bool>(), tasks in 1usize..4, seed in any::<u64>(),
    ) {
        let a = bytes(m * k, seed);
        let b = bytes(k * n, seed ^ 0x55);
        let za = zeros(1, false, a_signed, seed ^ 1);
        let zb = zeros(n, per_column, b_signed, seed ^ 2);
        let mut want = vec![0i32; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k).fold(0i32, |acc, p| {
                    let x = v(a[i * k + p], a_signed) - za[0];
                    let y = v(b[p * n + j], b_signed) - zero_at(&zb, j);
                    acc.wrapping_add(x * y)
                });
            }
        }
        let bt: Vec<u8> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        for isa in VARIANTS {
            let mut packed = vec![0xA5; packed_b_len(isa, k, n).unwrap()];
            let (data, strides) = if transposed { (&bt[..], (1, k)) } else { (&b[..], (n, 1)) };
            pack_b(isa, Bytes { data, signed: b_signed, zero: &zb }, strides, (k, n), &mut packed).unwrap();
            let mut c = vec![i32::MIN; m * n];
            let per_task = gemm_scratch_len(isa, k).unwrap();
            for task in 0..tasks {
                let mut scratch = vec![0x5A; per_task];
                let a = Bytes { data: &a, signed: a_signed, zero: &za };
                gemm_share(isa, (m, n, k), a, &packed, &mut c, &mut scratch, (task, tasks)).unwrap();
            }
            prop_assert_eq!(&c, &want, "{:?}", isa);
        }
    }

    #[test]
    fn conv_matches_the_formula(
        batch in 1usize..3, groups in 1usize..4, cg in 1usize..6, mg in 1usize..11,
        in_h in 1usize..9, in_w in 1usize..12, kh in 1usize..4, kw in 1usize..4,
        sh in 1usize..3, sw in 1usize..3, dh in 1usize..3, dw in 1usize..3,
        pad_top in 0usize..3, pad_left in 0usize..3, pad_bottom in 0usize..3, pad_right in 0usize..3,
        x_signed in any::<bool>(), w_signed in any::<bool>(), per_channel in any::<bool>(),
        tasks in 1usize..4, seed in any::<u64>(),
    ) {
        let (c, m) = (cg * groups, mg * groups);
        let span = |n: usize, pads: usize, k: usize, d: usize| (n + pads).checked_sub((k - 1) * d + 1);
        let (Some(oh), Some(ow)) = (span(in_h, pad_top + pad_bottom, kh, dh), span(in_w, pad_left + pad_right, kw, dw))
        else {
            return Ok(());
        };
        let (oh, ow) = (oh / sh + 1, ow / sw + 1);
        let geo = Conv2d {
            batch, in_channels: c, in_h, in_w, out_channels: m, out_h: oh, out_w: ow,
            kernel: (kh, kw), stride: (sh, sw), dilation: (dh, dw), groups, pad: (pad_top, pad_left),
        };
        let x = bytes(batch * c * in_h * in_w, seed);
        let w = bytes(m * cg * kh * kw, seed ^ 0x77);
        let zx = zeros(1, false, x_signed, seed ^ 3);
        let zw = zeros(m, per_channel, w_signed, seed ^ 4);
        let mut want = vec![0i32; batch * m * oh * ow];
        for n in 0..batch {
            for o in 0..m {
                let g = o / mg;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = 0i32;
                        for ci in 0..cg {
                            for r in 0..kh {
                                for s in 0..kw {
                                    let y = (oy * sh + r * dh) as isize - pad_top as isize;
                                    let xx = (ox * sw + s * dw) as isize - pad_left as isize;
                                    let inside = y >= 0 && xx >= 0 && (y as usize) < in_h && (xx as usize) < in_w;
                                    // Padding holds the zero point (ConvInteger's padding).
                                    let xv = if inside {
                                        v(x[((n * c + g * cg + ci) * in_h + y as usize) * in_w + xx as usize], x_signed)
                                    } else {
                                        zx[0]
                                    };
                                    let wv = v(w[((o * cg + ci) * kh + r) * kw + s], w_signed);
                                    acc = acc.wrapping_add((xv - zx[0]) * (wv - zero_at(&zw, o)));
                                }
                            }
                        }
                        want[((n * m + o) * oh + oy) * ow + ox] = acc;
                    }
                }
            }
        }
        for isa in VARIANTS {
            let mut packed = vec![0xA5; conv_packed_weights_len(isa, &geo).unwrap()];
            conv_pack_weights(isa, &geo, Bytes { data: &w, signed: w_signed, zero: &zw }, &mut packed).unwrap();
            let mut out = vec![i32::MIN; want.len()];
            for task in 0..tasks {
                let mut scratch = vec![0x5A; conv_scratch_len(isa, &geo).unwrap()];
                let x = Bytes { data: &x, signed: x_signed, zero: &zx };
                conv_share(isa, &geo, x, &packed, &mut out, &mut scratch, (task, tasks)).unwrap();
            }
            prop_assert_eq!(&out, &want, "{:?}", isa);
        }
    }
}

/// Accumulators that wrap: a long reduction of extreme bytes, the same bits as the i32
/// formula (the loop IR's wrapping arithmetic).
#[test]
fn long_reductions_wrap_like_the_formula() {
    let (m, n, k) = (3, 5, 70_001);
    let a = vec![255u8; m * k];
    let b = vec![0x80u8; k * n]; // -128 as i8
    let want = (0..k).fold(0i32, |acc, _| acc.wrapping_add(255 * -128));
    for isa in VARIANTS {
        let mut packed = vec![0; packed_b_len(isa, k, n).unwrap()];
        pack_b(isa, Bytes { data: &b, signed: true, zero: &[0] }, (n, 1), (k, n), &mut packed).unwrap();
        let mut c = vec![0; m * n];
        let mut scratch = vec![0; gemm_scratch_len(isa, k).unwrap()];
        gemm_share(
            isa,
            (m, n, k),
            Bytes { data: &a, signed: false, zero: &[0] },
            &packed,
            &mut c,
            &mut scratch,
            (0, 1),
        )
        .unwrap();
        assert!(c.iter().all(|&x| x == want), "{isa:?}: {c:?} vs {want}");
    }
}

#[test]
fn bad_arguments_are_errors() {
    let isa = Int8Isa::detect();
    let (m, n, k) = (4, 4, 8);
    let b = vec![1u8; k * n];
    let mut packed = vec![0; packed_b_len(isa, k, n).unwrap()];
    let zero_out_of_range = Bytes { data: &b, signed: true, zero: &[200] };
    assert!(matches!(pack_b(isa, zero_out_of_range, (n, 1), (k, n), &mut packed), Err(KernelError::Geometry(_))));
    let wrong_count = Bytes { data: &b, signed: false, zero: &[1, 2] };
    assert!(pack_b(isa, wrong_count, (n, 1), (k, n), &mut packed).is_err());
    pack_b(isa, Bytes { data: &b, signed: false, zero: &[3] }, (n, 1), (k, n), &mut packed).unwrap();
    let a = vec![1u8; m * k];
    let mut c = vec![0; m * n];
    let mut scratch = vec![0; gemm_scratch_len(isa, k).unwrap()];
    let good = Bytes { data: &a, signed: false, zero: &[0] };
    let short = Bytes { data: &a[1..], ..good };
    assert!(matches!(
        gemm_share(isa, (m, n, k), short, &packed, &mut c, &mut scratch, (0, 1)),
        Err(KernelError::TooShort { .. })
    ));
    assert!(gemm_share(isa, (m, n, k), good, &packed, &mut c, &mut scratch[1..], (0, 1)).is_err());
    assert!(gemm_share(isa, (m, n, k), good, &packed, &mut c, &mut scratch, (2, 2)).is_err());
    assert!(gemm_share(isa, (m, n, k), good, &packed[1..], &mut c, &mut scratch, (0, 1)).is_err());
    assert!(packed_b_len(isa, usize::MAX, usize::MAX).is_err());
}
