//! Property tests of the interpreter's kernels against direct scalar loops written from the ONNX
//! definitions (the interpreter's conv is im2col + matrix product, its matmul broadcasts views).

mod common;

use common::data;
use heron_ir::interp::eval_op;
use heron_ir::{BinaryOp, ConvAttrs, Op, PadMode, PoolAttrs, Tensor, Window};
use proptest::prelude::*;

fn close(got: &[f64], want: &[f64]) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        prop_assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "element {}: {} vs {}", i, a, b);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn conv2d_matches_direct_loops(
        seed in any::<u64>(), n in 1usize..3, cg in 1usize..4, mg in 1usize..4, groups in 1usize..4,
        h in 1usize..9, w in 1usize..9, kh in 1usize..4, kw in 1usize..4,
        sh in 1usize..3, sw in 1usize..3, dh in 1usize..3, dw in 1usize..3,
        pads in proptest::array::uniform4(0usize..3),
    ) {
        let (c, m) = (cg * groups, mg * groups);
        let (ph0, pw0, ph1, pw1) = (pads[0], pads[1], pads[2], pads[3]);
        let span_h = dh * (kh - 1) + 1;
        let span_w = dw * (kw - 1) + 1;
        prop_assume!(h + ph0 + ph1 >= span_h && w + pw0 + pw1 >= span_w);
        let x = data(seed, n * c * h * w);
        let wt = data(seed ^ 0xABCD, m * cg * kh * kw);
        let bias = data(seed ^ 0x1234, m);
        let window = Window {
            kernel: vec![kh, kw], strides: vec![sh, sw], dilations: vec![dh, dw],
            pads_begin: vec![ph0, pw0], pads_end: vec![ph1, pw1],
        };
        let attrs = ConvAttrs { window, group: groups };
        let xt = Tensor::from_vec(&[n, c, h, w], x.clone()).unwrap();
        let wtt = Tensor::from_vec(&[m, cg, kh, kw], wt.clone()).unwrap();
        let bt = Tensor::from_vec(&[m], bias.clone()).unwrap();
        let got = eval_op(&Op::Conv(attrs), &[&xt, &wtt, &bt]).unwrap().remove(0);
        let oh = (h + ph0 + ph1 - span_h) / sh + 1;
        let ow = (w + pw0 + pw1 - span_w) / sw + 1;
        prop_assert_eq!(got.shape(), &[n, m, oh, ow]);
        let mut want = Vec::new();
        for b in 0..n { for o in 0..m { for y in 0..oh { for xo in 0..ow {
            let gi = o / mg;
            let mut acc = bias[o] as f64;
            for ci in 0..cg { for ky in 0..kh { for kx in 0..kw {
                let iy = (y * sh + ky * dh) as isize - ph0 as isize;
                let ix = (xo * sw + kx * dw) as isize - pw0 as isize;
                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                    let xv = x[((b * c + gi * cg + ci) * h + iy as usize) * w + ix as usize] as f64;
                    acc += xv * wt[((o * cg + ci) * kh + ky) * kw + kx] as f64;
                }
            }}}
            want.push(acc);
        }}}}
        close(&got.to_f64_vec(), &want)?;
    }

    #[test]
    fn batched_matmul_broadcasts_like_numpy(
        seed in any::<u64>(), m in 1usize..5, k in 1usize..6, n in 1usize..5,
        batch_a in proptest::collection::vec(prop_oneof![Just(1usize), Just(2), Just(3)], 0..3),
        a_1d in any::<bool>(), b_1d in any::<bool>(),
    ) {
        // b's batch dims: equal to a's or 1, so they broadcast.
        let batch_b: Vec<usize> = batch_a.iter().enumerate().map(|(i, &d)| if i % 2 == 0 { d } else { 1 }).collect();
        let ashape: Vec<usize> = if a_1d { vec![k] } else { batch_a.iter().copied().chain([m, k]).collect() };
        let bshape: Vec<usize> = if b_1d { vec![k] } else { batch_b.iter().copied().chain([k, n]).collect() };
        let a = data(seed, ashape.iter().product());
        let b = data(seed ^ 99, bshape.iter().product());
        let at = Tensor::from_vec(&ashape, a.clone()).unwrap();
        let bt = Tensor::from_vec(&bshape, b.clone()).unwrap();
        let got = eval_op(&Op::MatMul, &[&at, &bt]).unwrap().remove(0);
        // Direct: broadcast batch index, promote 1-d operands.
        let batch: Vec<usize> = match (a_1d, b_1d) { (true, true) => vec![], (true, false) => batch_b.clone(), _ => batch_a.clone() };
        let (mm, nn) = (if a_1d { 1 } else { m }, if b_1d { 1 } else { n });
        let nb: usize = batch.iter().product();
        let mut want = Vec::new();
        for bi in 0..nb {
            let mut rem = bi;
            let mut idx = vec![0; batch.len()];
            for d in (0..batch.len()).rev() { idx[d] = rem % batch[d]; rem /= batch[d]; }
            let flat = |dims: &[usize]| idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + if d == 1 { 0 } else { i });
            let a_off = if a_1d { 0 } else { flat(&batch_a) * m * k };
            let b_off = if b_1d { 0 } else { flat(&batch_b) * k * n };
            for i in 0..mm { for j in 0..nn {
                let mut acc = 0.0f64;
                for p in 0..k {
                    let av = if a_1d { a[p] } else { a[a_off + i * k + p] };
                    let bv = if b_1d { b[p] } else { b[b_off + p * n + j] };
                    acc += av as f64 * bv as f64;
                }
                want.push(acc);
            }}
        }
        close(&got.to_f64_vec(), &want)?;
    }

    #[test]
    fn pad_modes_match_index_formulas(
        seed in any::<u64>(), len in 1usize..6, before in 0i64..6, after in -1i64..6, mode in 0usize..4,
    ) {
        let mode = [PadMode::Constant, PadMode::Edge, PadMode::Reflect, PadMode::Wrap][mode];
        prop_assume!(len as i64 + before + after >= 0);
        let x = data(seed, len);
        let xt = Tensor::from_vec(&[len], x.clone()).unwrap();
        let value = Tensor::scalar_from_f64(heron_ir::DType::F32, 9.0);
        let got = eval_op(&Op::Pad { pads: vec![before, after], mode, value }, &[&xt]).unwrap().remove(0);
        let n = len as i64;
        let want: Vec<f64> = (0..(n + before + after)).map(|o| {
            let i = o - before;
            let j = match mode {
                _ if (0..n).contains(&i) => i,
                PadMode::Constant => return 9.0,
                PadMode::Edge => i.clamp(0, n - 1),
                PadMode::Wrap => ((i % n) + n) % n,
                PadMode::Reflect => {
                    // Reflect step by step: walk and bounce off the ends.
                    let mut p = 0i64; let mut dir = 1i64;
                    for _ in 0..i.abs() {
                        if n == 1 { break; }
                        let step = if i < 0 { -dir } else { dir };
                        if p + step < 0 || p + step >= n { dir = -dir; }
                        p += if i < 0 { -dir } else { dir };
                    }
                    p
                }
            };
            x[j as usize] as f64
        }).collect();
        close(&got.to_f64_vec(), &want)?;
    }

    #[test]
    fn average_pool_counts_padding_as_specified(
        seed in any::<u64>(), h in 1usize..7, k in 1usize..4, s in 1usize..3, p in 0usize..2,
        include in any::<bool>(), ceil in any::<bool>(),
    ) {
        prop_assume!(p < k && h + 2 * p >= k);
        let x = data(seed, h);
        let xt = Tensor::from_vec(&[1, 1, h], x.clone()).unwrap();
        let window = Window { kernel: vec![k], strides: vec![s], dilations: vec![1], pads_begin: vec![p], pads_end: vec![p] };
        let pool = PoolAttrs { window, ceil_mode: ceil };
        let got = eval_op(&Op::AveragePool { pool, count_include_pad: include }, &[&xt]).unwrap().remove(0);
        let steps = h + 2 * p - k;
        let mut out = if ceil { steps.div_ceil(s) + 1 } else { steps / s + 1 };
        if ceil && (out - 1) * s >= h + p { out -= 1; }
        let want: Vec<f64> = (0..out).map(|o| {
            let start = (o * s) as i64 - p as i64;
            let (mut sum, mut cnt) = (0.0, 0);
            for t in start..start + k as i64 {
                if (0..h as i64).contains(&t) { sum += x[t as usize] as f64; cnt += 1; }
                else if include && t < (h + p) as i64 { cnt += 1; }
            }
            sum / cnt as f64
        }).collect();
        close(&got.to_f64_vec(), &want)?;
    }

    #[test]
    fn integer_arithmetic_wraps_like_twos_complement(a in any::<i8>(), b in any::<i8>()) {
        let at = Tensor::from_vec(&[1], vec![a]).unwrap();
        let bt = Tensor::from_vec(&[1], vec![b]).unwrap();
        let add = eval_op(&Op::Binary(BinaryOp::Add), &[&at, &bt]).unwrap().remove(0);
        let mul = eval_op(&Op::Binary(BinaryOp::Mul), &[&at, &bt]).unwrap().remove(0);
        prop_assert_eq!(add, Tensor::from_vec(&[1], vec![a.wrapping_add(b)]).unwrap());
        prop_assert_eq!(mul, Tensor::from_vec(&[1], vec![a.wrapping_mul(b)]).unwrap());
    }
}

/// The reference erf against tabulated values (Abramowitz & Stegun, Table 7.1, and mpmath).
#[test]
fn reference_erf_matches_tabulated_values() {
    let table = [
        (0.0, 0.0),
        (0.1, 0.112_462_916_018_284_9),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (1.5, 0.966_105_146_475_310_7),
        (2.0, 0.995_322_265_018_952_7),
        (2.5, 0.999_593_047_982_555),
        (3.0, 0.999_977_909_503_001_4),
        (4.0, 0.999_999_984_582_742_1),
        (5.5, 0.999_999_999_999_992_6),
    ];
    for (x, want) in table {
        let got = heron_ir::interp::erf(x);
        assert!((got - want).abs() < 1e-14, "erf({x}) = {got}, want {want}");
        assert!((heron_ir::interp::erf(-x) + want).abs() < 1e-14);
    }
    assert!(heron_ir::interp::erf(f64::NAN).is_nan());
    assert_eq!(heron_ir::interp::erf(f64::INFINITY), 1.0);
}
