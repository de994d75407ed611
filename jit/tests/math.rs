//! Accuracy of the inline exp / tanh / sigmoid / erf polynomials, scalar and F32X4, against f64:
//! exp within 2e-6 relative on [-87, 88], 0 far below, inf above 88.72; tanh, sigmoid and erf
//! within 2e-6 absolute over all finite inputs; NaN in, NaN out.

use heron_ir::loop_ir::parse::parse_module;
use heron_jit::{CodegenOptions, JitArg, JitModule, JitOptions};

/// Runs `y[i] = op(x[i])` compiled with the loop vectorized or not.
fn apply(op: &str, xs: &[f32], vectorize: bool) -> Vec<f32> {
    let n = xs.len();
    let text = format!(
        "func @main(%x: f32[{n}], %y: f32[{n}]) {{\n  for %i: i64 in 0..{n} vectorized(lanes=4, vectors=4, tail=overlap) {{\n    %y[%i] = {op}(%x[%i])\n  }}\n}}\n"
    );
    let module = parse_module(&text).expect("valid loop IR");
    let options = JitOptions { codegen: CodegenOptions { vectorize, fma: true }, ..JitOptions::default() };
    let jit = JitModule::compile(&module, &[true, false], options).expect("compile");
    let input: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = vec![0u8; 4 * n];
    jit.run([JitArg::Read(&input), JitArg::Write(&mut out)]).expect("run");
    out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Dense samples over [lo, hi] plus the special values.
fn samples(lo: f32, hi: f32, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n).map(|k| lo + (hi - lo) * k as f32 / (n - 1) as f32).collect();
    v.extend([0.0, -0.0, 1e-30, -1e-30, f32::MIN_POSITIVE, 0.624, 0.626, -0.625, 1e-7]);
    v
}

fn check(op: &str, xs: &[f32], want: impl Fn(f64) -> f64, tolerance: impl Fn(f64) -> f64) {
    for vectorize in [false, true] {
        for (x, got) in xs.iter().zip(apply(op, xs, vectorize)) {
            let w = want(*x as f64);
            let err = (got as f64 - w).abs();
            assert!(
                err <= tolerance(w) || (got.is_infinite() && w.is_infinite()),
                "{op}({x}) = {got}, want {w} (vectorized: {vectorize})"
            );
        }
    }
}

#[test]
fn exp_is_accurate() {
    check("exp", &samples(-87.0, 88.0, 20_001), f64::exp, |w| 2e-6 * w.abs());
    let edges = [88.72, 88.8, 1000.0, f32::INFINITY, -104.0, -200.0, f32::NEG_INFINITY];
    let got = apply("exp", &edges, true);
    assert!(got[0].is_finite() && got[1].is_infinite() && got[2].is_infinite() && got[3].is_infinite());
    assert_eq!(&got[4..], &[0.0, 0.0, 0.0]);
}

#[test]
fn tanh_and_sigmoid_are_accurate() {
    let xs = samples(-30.0, 30.0, 40_001);
    check("tanh", &xs, f64::tanh, |_| 2e-6);
    check("sigmoid", &xs, |x| 1.0 / (1.0 + (-x).exp()), |_| 2e-6);
    let extremes = [f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY];
    assert_eq!(apply("tanh", &extremes, true), vec![1.0, -1.0, 1.0, -1.0]);
    assert_eq!(apply("sigmoid", &extremes, true), vec![1.0, 0.0, 1.0, 0.0]);
}

#[test]
fn erf_is_accurate() {
    let xs = samples(-8.0, 8.0, 40_001);
    check("erf", &xs, heron_ir::interp::erf, |_| 2e-6);
    assert_eq!(apply("erf", &[f32::INFINITY, f32::NEG_INFINITY, 0.0], true), vec![1.0, -1.0, 0.0]);
}

#[test]
fn nan_in_nan_out() {
    for op in ["exp", "tanh", "sigmoid", "erf"] {
        for vectorize in [false, true] {
            let got = apply(op, &[f32::NAN, 1.0, f32::NAN, -1.0, f32::NAN], vectorize);
            assert!(got[0].is_nan() && got[2].is_nan() && got[4].is_nan(), "{op}: {got:?}");
            assert!(!got[1].is_nan() && !got[3].is_nan());
        }
    }
}

/// Runs `y[i] = cast<to>(x[i])` over raw little-endian element bytes.
fn cast_bytes(from: &str, to: &str, input: &[u8], n: usize, out_elem: usize) -> Vec<u8> {
    let text = format!(
        "func @main(%x: {from}[{n}], %y: {to}[{n}]) {{\n  for %i: i64 in 0..{n} serial {{\n    %y[%i] = cast<{to}>(%x[%i])\n  }}\n}}\n"
    );
    let module = parse_module(&text).expect("valid loop IR");
    let jit = JitModule::compile(&module, &[true, false], JitOptions::default()).expect("compile");
    let mut out = vec![0u8; out_elem * n];
    jit.run([JitArg::Read(input), JitArg::Write(&mut out)]).expect("run");
    out
}

#[test]
fn every_f16_widens_exactly() {
    let n = 1 << 16;
    let input: Vec<u8> = (0..n as u32).flat_map(|b| (b as u16).to_le_bytes()).collect();
    let out = cast_bytes("f16", "f32", &input, n, 4);
    for (bits, got) in (0..n as u32).zip(out.chunks_exact(4)) {
        let got = f32::from_le_bytes(got.try_into().unwrap());
        let want = heron_ir::f16::from_bits(bits as u16).to_f32();
        assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#06x}: {got} vs {want}");
    }
}

#[test]
fn f32_narrows_to_f16_with_round_to_nearest_even() {
    // Every f16 value, the midpoints between neighbours (ties), and values around them, plus
    // overflow, underflow and NaN.
    let mut xs: Vec<f32> = Vec::new();
    for bits in 0..0x7c00u16 {
        let v = heron_ir::f16::from_bits(bits).to_f32();
        let next = heron_ir::f16::from_bits(bits + 1).to_f32();
        let mid = (v as f64 + next as f64) / 2.0;
        for x in [v, mid as f32, f32::from_bits((mid as f32).to_bits() + 1), f32::from_bits((mid as f32).to_bits() - 1)]
        {
            xs.extend([x, -x]);
        }
    }
    xs.extend([65504.0, 65520.0, 70000.0, f32::MAX, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-10, -1e-10]);
    let input: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = cast_bytes("f32", "f16", &input, xs.len(), 2);
    for (x, got) in xs.iter().zip(out.chunks_exact(2)) {
        let got = heron_ir::f16::from_bits(u16::from_le_bytes(got.try_into().unwrap()));
        let want = heron_ir::f16::from_f32(*x);
        assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{x}: {got} vs {want}");
    }
}
