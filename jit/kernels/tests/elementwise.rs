//! Elementwise programs on every ISA variant against an f64 evaluation of the same program:
//! the activations networks use (SiLU, sigmoid, hard-swish, a per-channel scale, GELU's tanh-free
//! parts), random shapes with rows narrower and wider than a block, per-row operands, NaN, ±∞,
//! ±0 and values past `exp`'s range, every task split. All ISAs give the same bits.

#[allow(dead_code)]
mod common;

use MapOp::*;
use common::{close, erf, values};
use heron_kernels::elementwise::{MapOp, Operand, Program, map_share};
use heron_kernels::{Isa, KernelError};
use proptest::prelude::*;

/// The program in f64, each result rounded to f32 (as the graph's ops give f32 tensors),
/// NaN-propagating `min`/`max` as the kernels.
fn reference(program: &Program, consts: &[f32], inputs: &[f64]) -> f64 {
    let mut stack = Vec::new();
    for &op in program.ops() {
        match op {
            Input(k) => stack.push(inputs[usize::from(k)]),
            Const(k) => stack.push(f64::from(consts[usize::from(k)])),
            Neg | Abs | Sqrt | Exp | Ln | Sigmoid | Tanh | Erf | TanhSoftplus => {
                let x = stack.pop().unwrap();
                stack.push(f32_result(match op {
                    Neg => -x,
                    Abs => x.abs(),
                    Sqrt => x.sqrt(),
                    Exp => x.exp(),
                    Ln => x.ln(),
                    Tanh => x.tanh(),
                    Erf => erf(x),
                    TanhSoftplus => tanh_softplus(x),
                    // The kernels' sigmoid is 0 below −87 (`SIGMOID_LO`: no subnormal step;
                    // the true one is below 1.7e-38 there), which `inf · sigmoid(s)` tells
                    // apart (NaN, not inf).
                    _ if x < -87.0 => 0.0,
                    _ => 1.0 / (1.0 + (-x).exp()),
                }));
            }
            LessSelect | LessEqSelect => {
                let (otherwise, then) = (stack.pop().unwrap(), stack.pop().unwrap());
                let (b, a) = (stack.pop().unwrap(), stack.pop().unwrap());
                let taken = if op == LessSelect { a < b } else { a <= b };
                stack.push(if taken { then } else { otherwise });
            }
            binary => {
                let (b, a) = (stack.pop().unwrap(), stack.pop().unwrap());
                stack.push(f32_result(match binary {
                    Add => a + b,
                    Sub => a - b,
                    Mul => a * b,
                    Div => a / b,
                    _ if a.is_nan() || b.is_nan() => f64::NAN,
                    Min => a.min(b),
                    _ => a.max(b),
                }));
            }
        }
    }
    stack[0]
}

fn f32_result(v: f64) -> f64 {
    f64::from(v as f32)
}

/// Programs and their constants: SiLU, sigmoid, hard-swish `x·min(max(x + 3, 0), 6) / 6`, a
/// squeeze-excitation scale `x·sigmoid(s)`, a residual `relu(x + y)`, LeakyReLU
/// `x < 0 ? 0.1·x : x`, ELU-like `x <= y ? exp(x) − 1 : x`, and one of everything.
fn programs() -> Vec<(Vec<MapOp>, Vec<f32>)> {
    vec![
        (vec![Input(0), Input(0), Sigmoid, Mul], vec![]),
        (vec![Input(0), Sigmoid], vec![]),
        (
            vec![Input(0), Input(0), Const(0), Add, Const(1), Max, Const(2), Min, Mul, Const(2), Div],
            vec![3.0, 0.0, 6.0],
        ),
        (vec![Input(0), Input(1), Sigmoid, Mul], vec![]),
        (vec![Input(0), Input(1), Add, Const(0), Max], vec![0.0]),
        (vec![Input(0), Exp, Input(1), Abs, Sqrt, Sub, Input(2), Neg, Div, Input(0), Min], vec![]),
        (vec![Input(0), Const(0), Input(0), Const(1), Mul, Input(0), LessSelect], vec![0.0, 0.1]),
        (vec![Input(0), Input(1), Input(0), Exp, Const(0), Sub, Input(0), LessEqSelect], vec![1.0]),
        (vec![Input(0), Tanh], vec![]),
        // GELU: x · (1 + erf(x / √2)) / 2.
        (vec![Input(0), Input(0), Const(0), Mul, Erf, Const(1), Add, Mul, Const(2), Mul], vec![0.707_106_77, 1.0, 0.5]),
        // ln(e^x + 1) (Mish's softplus as lowering writes it; the routine takes its tanh
        // without it), and a log-sum.
        (vec![Input(0), Exp, Const(0), Add, Ln], vec![1.0]),
        (vec![Input(0), Input(1), Add, Ln], vec![]),
        // Mish: x · tanh(softplus(x)).
        (vec![Input(0), Input(0), TanhSoftplus, Mul], vec![]),
        // Chains (the running value in registers): hard-swish as lowering orders it, and one
        // from the second input through every unary step and both operand kinds.
        (
            vec![Input(0), Const(0), Add, Const(1), Max, Const(2), Min, Input(0), Mul, Const(2), Div],
            vec![3.0, 0.0, 6.0],
        ),
        (
            vec![
                Input(1),
                Neg,
                Abs,
                Sqrt,
                Input(0),
                Sub,
                Exp,
                Ln,
                Const(0),
                Mul,
                Sigmoid,
                Tanh,
                Erf,
                TanhSoftplus,
                Input(2),
                Min,
            ],
            vec![0.5],
        ),
    ]
}

/// `tanh(ln(1 + e^x))` in f64: `ln(1 + e^x)` by `ln_1p` (kept where `1 + e^x` rounds to 1),
/// `x` itself past where `e^x` overflows.
fn tanh_softplus(x: f64) -> f64 {
    let softplus = if x > 700.0 { x } else { x.exp().ln_1p() };
    softplus.tanh()
}

/// Values with specials mixed in (`special_every` > 0: one in that many), scaled to reach past
/// `exp`'s range.
fn data(len: usize, seed: u64, scale: f32, special_every: usize) -> Vec<f32> {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 100.0, -120.0, 88.8];
    values(len, seed)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            if special_every > 0 && i % special_every == special_every - 1 {
                specials[(i / special_every) % specials.len()]
            } else {
                v * scale
            }
        })
        .collect()
}

/// `program` over `x` (one input, one row, one task) on every ISA this CPU has, the output
/// NaN-filled first.
fn on_every_isa(program: &Program, x: &[f32]) -> Vec<Vec<f32>> {
    Isa::available()
        .into_iter()
        .map(|isa| {
            let mut out = vec![f32::NAN; x.len()];
            map_share(isa, program, &[(x, Operand::Full)], &mut out, (1, x.len()), (0, 1)).unwrap();
            out
        })
        .collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn programs_match_the_reference(
        which in 0usize..15,
        rows in 1usize..9,
        cols in 1usize..300,
        per_row in any::<[bool; 3]>(),
        scale in prop_oneof![Just(1.0f32), Just(30.0), Just(200.0)],
        special_every in prop_oneof![Just(0usize), Just(7), Just(13)],
        tasks in 1usize..4,
        seed in any::<u64>(),
    ) {
        let (ops, consts) = &programs()[which];
        let program = Program::new(ops, consts).unwrap();
        let operands = per_row.map(|r| if r { Operand::PerRow } else { Operand::Full });
        let inputs: Vec<Vec<f32>> = (0..3)
            .map(|k| {
                let len = if operands[k] == Operand::PerRow { rows } else { rows * cols };
                data(len, seed.wrapping_add(k as u64), scale, special_every)
            })
            .collect();
        let refs: Vec<(&[f32], Operand)> = inputs.iter().map(|v| v.as_slice()).zip(operands).collect();
        let mut results = Vec::new();
        for isa in Isa::available() {
            let mut out = vec![f32::NAN; rows * cols];
            for task in 0..tasks {
                map_share(isa, &program, &refs, &mut out, (rows, cols), (task, tasks)).unwrap();
            }
            results.push(out);
        }
        for (k, got) in results[0].iter().enumerate() {
            let (r, c) = (k / cols, k % cols);
            let args: Vec<f64> = (0..3)
                .map(|i| f64::from(if operands[i] == Operand::PerRow { inputs[i][r] } else { inputs[i][r * cols + c] }))
                .collect();
            let want = reference(&program, consts, &args);
            let ok = if want.is_nan() {
                got.is_nan()
            } else if want.is_infinite() || want.abs() > f64::from(f32::MAX) {
                *got as f64 == want || (got.is_infinite() && got.signum() as f64 == want.signum())
            } else {
                close(*got, want)
            };
            prop_assert!(ok, "program {which} element {k} ({args:?}): got {got}, want {want}");
        }
        for other in &results[1..] {
            prop_assert!(same_bits(&results[0], other), "the ISAs differ");
        }
    }
}

/// The sigmoid across its whole range, every 1/64 from -120 to 120: within 2.5e-7 of the f64
/// value, relative, from −87 up; below, 0 (the true value is below 1.7e-38), never a
/// subnormal; the same bits on every ISA.
#[test]
fn sigmoid_is_accurate_over_its_range() {
    let program = Program::new(&[Input(0), Sigmoid], &[]).unwrap();
    let x: Vec<f32> = (-120 * 64..=120 * 64).map(|k| k as f32 / 64.0).collect();
    let results = on_every_isa(&program, &x);
    for (&x, &got) in x.iter().zip(&results[0]) {
        let want = 1.0 / (1.0 + (-f64::from(x)).exp());
        let error = (f64::from(got) - want).abs();
        assert!(!got.is_subnormal(), "sigmoid({x}) = {got}: subnormal");
        if x < -87.0 {
            assert_eq!(got, 0.0, "sigmoid({x})");
        } else {
            assert!(error <= 2.5e-7 * want, "sigmoid({x}) = {got}, want {want}");
        }
    }
    for other in &results[1..] {
        assert!(same_bits(&results[0], other), "the ISAs differ");
    }
}

/// `exp` every 1/256 from −110 to 90 and at the edges: within 1.5e-7 of the f64 value,
/// relative, where that is a normal float; within one subnormal spacing below (from −87.3);
/// 0 from −104 down, ∞ where the value overflows (from 88.73); NaN kept; the same bits on
/// every ISA.
#[test]
fn exp_is_accurate_over_its_range() {
    let mut x: Vec<f32> = (-110 * 256..=90 * 256).map(|k| k as f32 / 256.0).collect();
    x.extend([88.722_83, 88.722_84, 88.73, -87.336_54, -103.972_08, -103.98, 1e-30, -1e-30, 1e30, -1e30]);
    x.extend([f32::MAX, -f32::MAX, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let program = Program::new(&[Input(0), Exp], &[]).unwrap();
    let results = on_every_isa(&program, &x);
    let (max_normal, spacing) = (f64::from(f32::MAX), f64::from(f32::from_bits(1)));
    for (&x, &got) in x.iter().zip(&results[0]) {
        let want = f64::from(x).exp();
        if x.is_nan() {
            assert!(got.is_nan(), "exp(NaN) = {got}");
        } else if want > max_normal * (1.0 + 1e-7) {
            assert_eq!(got, f32::INFINITY, "exp({x})");
        } else if want < spacing / 2.0 * (1.0 - 1e-6) {
            assert_eq!(got, 0.0, "exp({x})");
        } else if want < f64::from(f32::MIN_POSITIVE) {
            assert!((f64::from(got) - want).abs() <= spacing, "exp({x}) = {got}, want {want}");
        } else if want <= max_normal {
            assert!((f64::from(got) - want).abs() <= 1.5e-7 * want, "exp({x}) = {got}, want {want}");
        }
    }
    for other in &results[1..] {
        assert!(same_bits(&results[0], other), "the ISAs differ");
    }
}

/// `ln x` on every 509th positive float below +∞ (subnormals and normals) and at the edges:
/// within `ε·|ln x|` of the f64 value (an ulp or two of the result; 0.67 of that measured),
/// at least `ε·2^-126` near 0; exactly 0 at 1, −∞ at ±0, NaN below 0 and
/// at NaN, +∞ at +∞; the same bits on every ISA.
#[test]
fn ln_is_accurate_over_the_floats() {
    let mut x: Vec<f32> = (1..f32::INFINITY.to_bits()).step_by(509).map(f32::from_bits).collect();
    x.extend([1.0, 1.0 - f32::EPSILON / 2.0, 1.0 + f32::EPSILON, f32::MIN_POSITIVE, f32::from_bits(1), f32::MAX]);
    x.extend([0.0, -0.0, -1e-30, -1.0, f32::NEG_INFINITY, f32::INFINITY, f32::NAN]);
    let program = Program::new(&[Input(0), Ln], &[]).unwrap();
    let results = on_every_isa(&program, &x);
    for (&x, &got) in x.iter().zip(&results[0]) {
        let want = f64::from(x).ln();
        if x.is_nan() || x < 0.0 {
            assert!(got.is_nan(), "ln({x}) = {got}");
        } else if !want.is_finite() {
            assert_eq!(f64::from(got), want, "ln({x})");
        } else {
            let ulp = f64::from((want.abs() as f32).max(f32::MIN_POSITIVE)) * f64::from(f32::EPSILON);
            let error = (f64::from(got) - want).abs() / ulp;
            assert!(error <= 1.0, "ln({x}) = {got}, want {want}: {error} ulp");
        }
    }
    assert_eq!(results[0][x.iter().position(|&v| v == 1.0).unwrap()].to_bits(), 0, "ln(1) is +0");
    for other in &results[1..] {
        assert!(same_bits(&results[0], other), "the ISAs differ");
    }
}

/// `tanh(softplus(x))` (Mish's factor) every 1/64 from −120 to 40 and at the edges: within
/// 3e-7 of the f64 value, relative, from −87 up, 0 below (never a subnormal), exactly 1 from
/// 9 up, ±∞ and NaN as the logarithm's form gives them (1, 0, NaN); the same bits on every ISA.
#[test]
fn tanh_softplus_is_accurate_over_its_range() {
    let mut x: Vec<f32> = (-120 * 64..=40 * 64).map(|k| k as f32 / 64.0).collect();
    x.extend([1e-30, -1e-30, 20.0, 1e30, -1e30, f32::MAX, -f32::MAX, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let program = Program::new(&[Input(0), TanhSoftplus], &[]).unwrap();
    let results = on_every_isa(&program, &x);
    for (&x, &got) in x.iter().zip(&results[0]) {
        let want = tanh_softplus(f64::from(x));
        assert!(!got.is_subnormal(), "tanh_softplus({x}) = {got}: subnormal");
        if x.is_nan() {
            assert!(got.is_nan(), "tanh_softplus(NaN) = {got}");
        } else if x < -87.0 {
            assert_eq!(got, 0.0, "tanh_softplus({x})");
        } else if x >= 9.0 {
            assert_eq!(got, 1.0, "tanh_softplus({x})");
        } else {
            let error = (f64::from(got) - want).abs();
            assert!(error <= 3e-7 * want, "tanh_softplus({x}) = {got}, want {want}");
        }
    }
    for other in &results[1..] {
        assert!(same_bits(&results[0], other), "the ISAs differ");
    }
}

/// `tanh` and `erf` on every 1021st float up to 12 and far past it: within 4e-7 of the f64
/// value, relative (so also near 0, where `tanh x` and `erf x` are about `x`); exactly ±1 past
/// where they round to it, ±∞ included; the same bits on every ISA; NaN and −0 kept.
#[test]
fn tanh_and_erf_are_accurate_over_their_range() {
    // Every 1021st float from 0 to 12 (past where both round to 1), both signs, and the edges.
    let mut x: Vec<f32> = (0..=12f32.to_bits()).step_by(1021).map(f32::from_bits).flat_map(|x| [x, -x]).collect();
    x.extend([1e-30, -1e-30, 1e-6, 3.92, 9.0, 10.5, 45.0, 88.0, 1e30, -1e30, -0.0]);
    x.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    for (op, f) in [(Tanh, f64::tanh as fn(f64) -> f64), (Erf, erf)] {
        let program = Program::new(&[Input(0), op], &[]).unwrap();
        let results = on_every_isa(&program, &x);
        for (&x, &got) in x.iter().zip(&results[0]) {
            let want = f(f64::from(x));
            if want.is_nan() {
                assert!(got.is_nan(), "{op:?}({x}) = {got}");
                continue;
            }
            let error = (f64::from(got) - want).abs();
            // Relative where the result is normal; a subnormal's spacing is absolute.
            let spacing = f64::from(f32::from_bits(1));
            assert!(error <= 4e-7 * want.abs() + spacing, "{op:?}({x}) = {got}, want {want}");
            assert_eq!(got.is_sign_negative(), x.is_sign_negative(), "{op:?}({x}) = {got}: the sign");
            // Past where the value rounds to ±1, exactly ±1 (saturated, as the interpreter).
            if x.abs() >= 12.0 {
                assert_eq!(got.abs(), 1.0, "{op:?}({x}) = {got}: saturated");
            }
        }
        for other in &results[1..] {
            assert!(same_bits(&results[0], other), "{op:?}: the ISAs differ");
        }
    }
}

#[test]
fn programs_are_checked_and_round_trip_their_encoding() {
    for (ops, consts) in programs() {
        let program = Program::new(&ops, &consts).unwrap();
        let mut padded = [0.0; 4];
        padded[..consts.len()].copy_from_slice(&consts);
        assert_eq!(Program::decode(program.encode(), padded).unwrap().ops(), program.ops());
    }
    let bad = |ops: &[MapOp], consts: &[f32]| matches!(Program::new(ops, consts), Err(KernelError::Program(_)));
    assert!(bad(&[], &[]), "empty");
    assert!(bad(&[Add], &[]), "pops an empty stack");
    assert!(bad(&[Input(0), Input(1)], &[]), "leaves two values");
    assert!(bad(&[Input(3)], &[]), "input past 2");
    assert!(bad(&[Const(0)], &[]), "constant not given");
    assert!(bad(&[Input(0); 5].iter().copied().chain([Add, Add, Add, Add]).collect::<Vec<_>>(), &[]), "stack of 5");
    assert!(bad(&[Input(0); 17], &[]), "17 operations");
    assert!(Program::decode([0x99, 0], [0.0; 4]).is_err(), "unknown code");
    // Lengths are checked before anything runs.
    let program = Program::new(&[Input(0), Input(1), Add], &[]).unwrap();
    let (x, mut out) = (vec![1.0; 12], vec![0.0; 12]);
    let short = vec![1.0; 11];
    let r = map_share(Isa::Scalar, &program, &[(&x, Operand::Full), (&short, Operand::Full)], &mut out, (3, 4), (0, 1));
    assert!(matches!(r, Err(KernelError::TooShort { .. })), "{r:?}");
    let r = map_share(Isa::Scalar, &program, &[(&x, Operand::Full)], &mut out, (3, 4), (0, 1));
    assert!(matches!(r, Err(KernelError::Program(_))), "a missing input: {r:?}");
}
