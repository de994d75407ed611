//! Every graph pass computes the same outputs as the unoptimised graph.

mod common;

use heron_ir::passes::{
    eliminate_dead_nodes, fold_batch_norm, fold_constants, optimize, reduce_powers, remove_identities,
};
use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, UnaryOp, Window, interp, verify};
use proptest::prelude::*;

fn rand_tensor(seed: &mut u64, shape: &[usize], lo: f32, hi: f32) -> Tensor {
    let n = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((*seed >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect();
    Tensor::from_vec::<f32>(shape, data).unwrap()
}

/// Runs `g` before and after `pass` on `inputs` and compares under the float rule.
fn same_outputs(g: &Graph, inputs: &[Tensor], pass: impl Fn(&mut Graph) -> usize) -> usize {
    let want = interp::run(g, inputs).unwrap();
    let mut opt = g.clone();
    let changed = pass(&mut opt);
    verify(&opt).unwrap();
    let got = interp::run(&opt, inputs).unwrap();
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        common::assert_float_rule(a, b).unwrap();
    }
    for (a, b) in opt.outputs.iter().zip(&g.outputs) {
        assert_eq!(opt.value(*a).name, g.value(*b).name, "output names are kept");
    }
    changed
}

fn bn_params(g: &mut Graph, seed: &mut u64, c: usize) -> Vec<heron_ir::ValueId> {
    vec![
        g.add_constant("scale", rand_tensor(seed, &[c], 0.5, 1.5)),
        g.add_constant("bias", rand_tensor(seed, &[c], -0.5, 0.5)),
        g.add_constant("mean", rand_tensor(seed, &[c], -0.5, 0.5)),
        g.add_constant("var", rand_tensor(seed, &[c], 0.2, 2.0)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn batch_norm_folds_into_conv(
        seed in any::<u64>(), c in 1usize..5, m_per_g in 1usize..4, groups in 1usize..3,
        k in 1usize..4, stride in 1usize..3, pad in 0usize..2, with_bias in any::<bool>(),
    ) {
        let mut seed = seed;
        let (c, m) = (c * groups, m_per_g * groups);
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![2, c, 7, 6]));
        let w = g.add_constant("w", rand_tensor(&mut seed, &[m, c / groups, k, k], -1.0, 1.0));
        let mut ins = vec![x, w];
        if with_bias {
            ins.push(g.add_constant("b", rand_tensor(&mut seed, &[m], -1.0, 1.0)));
        }
        let window = Window {
            kernel: vec![k, k], strides: vec![stride; 2], dilations: vec![1, 1],
            pads_begin: vec![pad; 2], pads_end: vec![pad; 2],
        };
        let attrs = ConvAttrs { window, group: groups };
        let y = g.add_op("conv", Op::Conv(attrs), &ins).unwrap();
        let mut bn_in = vec![y];
        bn_in.extend(bn_params(&mut g, &mut seed, m));
        let z = g.add_op("bn", Op::BatchNormalization { epsilon: 1e-5 }, &bn_in).unwrap();
        g.set_outputs(vec![z]);
        let input = rand_tensor(&mut seed, &[2, c, 7, 6], -1.0, 1.0);
        prop_assert_eq!(same_outputs(&g, &[input], fold_batch_norm), 1);
    }

    #[test]
    fn batch_norm_folds_into_gemm(
        seed in any::<u64>(), m in 1usize..4, k in 1usize..6, n in 1usize..6,
        trans_b in any::<bool>(), beta in -2.0f32..2.0, c_kind in 0usize..3,
    ) {
        let mut seed = seed;
        let mut g = Graph::new();
        let a = g.add_input("a", TensorType::new(DType::F32, vec![m, k]));
        let b_shape = if trans_b { [n, k] } else { [k, n] };
        let b = g.add_constant("b", rand_tensor(&mut seed, &b_shape, -1.0, 1.0));
        let mut ins = vec![a, b];
        match c_kind {
            1 => ins.push(g.add_constant("c", rand_tensor(&mut seed, &[n], -1.0, 1.0))),
            2 => ins.push(g.add_constant("c", rand_tensor(&mut seed, &[1], -1.0, 1.0))),
            _ => {}
        }
        let y = g.add_op("gemm", Op::Gemm { alpha: 0.7, beta, trans_a: false, trans_b }, &ins).unwrap();
        let mut bn_in = vec![y];
        bn_in.extend(bn_params(&mut g, &mut seed, n));
        let z = g.add_op("bn", Op::BatchNormalization { epsilon: 1e-3 }, &bn_in).unwrap();
        g.set_outputs(vec![z]);
        let input = rand_tensor(&mut seed, &[m, k], -1.0, 1.0);
        prop_assert_eq!(same_outputs(&g, &[input], fold_batch_norm), 1);
    }
}

/// A product of a convolution or GEMM by a constant of one value per output channel, or of
/// one value, in any broadcast shape and operand order, folds into its weights and bias; a
/// constant varying along another axis, or an infinite one, does not fold.
#[test]
fn per_channel_products_fold_into_conv_and_gemm() {
    let mut seed = 11;
    let (c, m) = (3, 4);
    let conv_times = |scale_shape: &[usize], scale: Option<Tensor>, constant_first: bool, seed: &mut u64| {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![2, c, 5, 5]));
        let w = g.add_constant("w", rand_tensor(seed, &[m, c, 3, 3], -1.0, 1.0));
        let b = g.add_constant("b", rand_tensor(seed, &[m], -1.0, 1.0));
        let y =
            g.add_op("conv", Op::Conv(ConvAttrs { window: Window::dense(vec![3, 3]), group: 1 }), &[x, w, b]).unwrap();
        let k = g.add_constant("k", scale.unwrap_or_else(|| rand_tensor(seed, scale_shape, -2.0, 2.0)));
        let ins = if constant_first { [k, y] } else { [y, k] };
        let z = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &ins).unwrap();
        g.set_outputs(vec![z]);
        (g, rand_tensor(seed, &[2, c, 5, 5], -1.0, 1.0))
    };
    for (shape, folds) in [
        (vec![m, 1, 1], true),
        (vec![1, m, 1, 1], true),
        (vec![1], true),
        (vec![], true),
        (vec![1, 1, 1, 1], true),
        (vec![1, 1, 3, 3], false),
        (vec![3], false),
        (vec![2, m, 1, 1], false),
        (vec![1, 1, m, 1, 1], false),
    ] {
        for constant_first in [false, true] {
            let (g, input) = conv_times(&shape, None, constant_first, &mut seed);
            assert_eq!(same_outputs(&g, &[input], fold_batch_norm), usize::from(folds), "{shape:?}");
        }
    }
    let inf = Tensor::from_vec(&[1], vec![f32::INFINITY]).unwrap();
    let (mut g, _) = conv_times(&[1], Some(inf), false, &mut seed);
    assert_eq!(fold_batch_norm(&mut g), 0, "an infinite scale");
    // Finite in f64, past f32's range once folded: weights of 2 times f32::MAX.
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 1, 2, 2]));
    let w = g.add_constant("w", Tensor::from_vec(&[1, 1, 1, 1], vec![2.0f32]).unwrap());
    let y = g.add_op("conv", Op::Conv(ConvAttrs { window: Window::dense(vec![1, 1]), group: 1 }), &[x, w]).unwrap();
    let k = g.add_constant("k", Tensor::from_vec(&[1], vec![f32::MAX]).unwrap());
    let z = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[y, k]).unwrap();
    g.set_outputs(vec![z]);
    assert_eq!(fold_batch_norm(&mut g), 0, "a scale overflowing the weights");

    let mut g = Graph::new();
    let a = g.add_input("a", TensorType::new(DType::F32, vec![3, 5]));
    let b = g.add_constant("b", rand_tensor(&mut seed, &[6, 5], -1.0, 1.0));
    let y = g.add_op("gemm", Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true }, &[a, b]).unwrap();
    let k = g.add_constant("k", rand_tensor(&mut seed, &[6], -2.0, 2.0));
    let z = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[y, k]).unwrap();
    g.set_outputs(vec![z]);
    let input = rand_tensor(&mut seed, &[3, 5], -1.0, 1.0);
    assert_eq!(same_outputs(&g, &[input], fold_batch_norm), 1, "GEMM");
}

#[test]
fn batch_norm_is_not_folded_when_the_conv_output_has_other_uses() {
    let mut seed = 7;
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 2, 4, 4]));
    let w = g.add_constant("w", rand_tensor(&mut seed, &[2, 2, 1, 1], -1.0, 1.0));
    let attrs = ConvAttrs { window: Window::dense(vec![1, 1]), group: 1 };
    let y = g.add_op("conv", Op::Conv(attrs), &[x, w]).unwrap();
    let mut bn_in = vec![y];
    bn_in.extend(bn_params(&mut g, &mut seed, 2));
    let z = g.add_op("bn", Op::BatchNormalization { epsilon: 1e-5 }, &bn_in).unwrap();
    let s = g.add_op("sum", Op::Binary(BinaryOp::Add), &[y, z]).unwrap();
    g.set_outputs(vec![s]);
    let input = rand_tensor(&mut seed, &[1, 2, 4, 4], -1.0, 1.0);
    assert_eq!(same_outputs(&g, &[input], fold_batch_norm), 0);
}

#[test]
fn constant_subgraphs_fold() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![3]));
    let a = g.add_constant("a", Tensor::from_vec::<f32>(&[3], vec![1.0, -2.0, 3.0]).unwrap());
    let b = g.add_constant("b", Tensor::from_vec::<f32>(&[1], vec![0.5]).unwrap());
    let ab = g.add_op("ab", Op::Binary(BinaryOp::Mul), &[a, b]).unwrap();
    let r = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[ab]).unwrap();
    let y = g.add_op("y", Op::Binary(BinaryOp::Add), &[x, r]).unwrap();
    g.set_outputs(vec![y]);
    let input = Tensor::from_vec::<f32>(&[3], vec![0.25, 0.5, 0.75]).unwrap();
    assert_eq!(same_outputs(&g, &[input], fold_constants), 2);
}

#[test]
fn integer_division_by_zero_is_not_folded() {
    let mut g = Graph::new();
    let a = g.add_constant("a", Tensor::from_vec::<i32>(&[2], vec![4, 5]).unwrap());
    let b = g.add_constant("b", Tensor::from_vec::<i32>(&[2], vec![2, 0]).unwrap());
    let y = g.add_op("y", Op::Binary(BinaryOp::Div), &[a, b]).unwrap();
    g.set_outputs(vec![y]);
    assert_eq!(fold_constants(&mut g), 0);
    let err = interp::run(&g, &[]).unwrap_err().to_string();
    assert!(err.contains("division by zero"), "{err}");
}

#[test]
fn identities_are_removed_and_output_names_kept() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![2, 2]));
    let r = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[x]).unwrap();
    let i1 = g.add_op("id1", Op::Identity, &[r]).unwrap();
    let d = g.add_op("drop", Op::Dropout, &[i1]).unwrap();
    let out = g.add_op("final", Op::Identity, &[d]).unwrap();
    // An identity straight from the graph input must stay: the input keeps its own name.
    let passthrough = g.add_op("passthrough", Op::Identity, &[x]).unwrap();
    g.set_outputs(vec![out, passthrough]);
    let input = Tensor::from_vec::<f32>(&[2, 2], vec![-1.0, 2.0, -3.0, 4.0]).unwrap();
    assert_eq!(same_outputs(&g, &[input], remove_identities), 3);
}

#[test]
fn dead_nodes_are_eliminated() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![4]));
    let used = g.add_op("used", Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    let dead = g.add_op("dead", Op::Unary(UnaryOp::Tanh), &[x]).unwrap();
    g.add_op("dead2", Op::Unary(UnaryOp::Sqrt), &[dead]).unwrap();
    g.set_outputs(vec![used]);
    let input = Tensor::from_vec::<f32>(&[4], vec![0.0, 1.0, 2.0, 3.0]).unwrap();
    assert_eq!(same_outputs(&g, &[input], eliminate_dead_nodes), 2);
    let mut h = g.clone();
    eliminate_dead_nodes(&mut h);
    assert_eq!(h.nodes.len(), 1);
    assert_eq!(h.values.len(), 2, "unreferenced values are dropped");
}

#[test]
fn optimize_on_the_conformance_style_graph_keeps_results() {
    let mut seed = 3;
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 4]));
    let w = g.add_constant("w", rand_tensor(&mut seed, &[4, 3], -1.0, 1.0));
    let two = g.add_constant("two", Tensor::scalar_from_f64(DType::F32, 2.0));
    let w2 = g.add_op("w2", Op::Binary(BinaryOp::Mul), &[w, two]).unwrap();
    let y = g.add_op("mm", Op::MatMul, &[x, w2]).unwrap();
    let y = g.add_op("id", Op::Identity, &[y]).unwrap();
    g.set_outputs(vec![y]);
    let input = rand_tensor(&mut seed, &[1, 4], -1.0, 1.0);
    same_outputs(&g, &[input], |g| {
        let s = optimize(g);
        s.folded_constants + s.removed_identities
    });
}

#[test]
fn constant_powers_become_products() {
    let mut seed = 7;
    for (e, reduced) in [(0.5f32, 1), (1.0, 1), (2.0, 1), (3.0, 1), (4.0, 0)] {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![2, 5]));
        let c = g.add_constant("c", Tensor::from_vec::<f32>(&[1], vec![e]).unwrap());
        let y = g.add_op("y", Op::Binary(BinaryOp::Pow), &[x, c]).unwrap();
        g.set_outputs(vec![y]);
        let input = rand_tensor(&mut seed, &[2, 5], 0.1, 3.0);
        assert_eq!(same_outputs(&g, &[input], reduce_powers), reduced, "exponent {e}");
    }
    // An exponent that broadcasts x to a larger shape stays a Pow.
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 5]));
    let c = g.add_constant("c", Tensor::from_vec::<f32>(&[3, 1], vec![2.0; 3]).unwrap());
    let y = g.add_op("y", Op::Binary(BinaryOp::Pow), &[x, c]).unwrap();
    g.set_outputs(vec![y]);
    assert_eq!(same_outputs(&g, &[rand_tensor(&mut seed, &[1, 5], 0.1, 3.0)], reduce_powers), 0);
}

/// PReLU as the importer writes it (`Less(v, 0)`, `Mul(v, slope)`, `Where`) fuses into the
/// convolution producing `v` as one epilogue step reading the slope; a Less against another
/// A graph whose 1×1 convolution's output `v` the fusion tests build their epilogues on.
fn conv_graph() -> (Graph, heron_ir::ValueId) {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 2, 4, 4]));
    let w = g.add_constant("w", Tensor::from_vec(&[3, 2, 1, 1], vec![0.5f32; 6]).unwrap());
    let v = g.add_op("conv", Op::Conv(ConvAttrs { window: Window::dense(vec![1, 1]), group: 1 }), &[x, w]).unwrap();
    (g, v)
}

/// constant, or a product read elsewhere too, is not that pattern and stays three nodes.
#[test]
fn prelu_fuses_only_as_the_importer_writes_it() {
    use heron_ir::CompareOp;
    use heron_ir::lower::{Epilogue, fuse};
    let build = |threshold: f32, product_read_twice: bool| {
        let (mut g, v) = conv_graph();
        let slope = g.add_constant("slope", Tensor::from_vec(&[3, 1, 1], vec![0.1f32, 0.2, 0.3]).unwrap());
        let zero = g.add_constant("zero", Tensor::from_vec(&[], vec![threshold]).unwrap());
        let negative = g.add_op("negative", Op::Compare(CompareOp::Less), &[v, zero]).unwrap();
        let scaled = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[v, slope]).unwrap();
        let y = g.add_op("prelu", Op::Where, &[negative, scaled, v]).unwrap();
        let mut outputs = vec![y];
        if product_read_twice {
            outputs.push(g.add_op("again", Op::Unary(UnaryOp::Neg), &[scaled]).unwrap());
        }
        g.set_outputs(outputs);
        (g, slope)
    };
    let (g, slope) = build(0.0, false);
    let groups = fuse(&g);
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].epilogue, [Epilogue::PRelu { slope }]);
    assert!(groups[0].inputs.contains(&slope));
    for (g, _) in [build(0.5, false), build(0.0, true)] {
        let groups = fuse(&g);
        assert!(groups.iter().all(|group| group.epilogue.iter().all(|e| !matches!(e, Epilogue::PRelu { .. }))));
        assert!(groups.len() > 1, "{groups:?}");
    }
}

/// PReLU on a graph input (no anchor to take it) fuses into one group on its product, whose
/// epilogue picks the product where the input is negative; another threshold stays apart.
#[test]
fn prelu_of_a_graph_input_fuses_on_its_product() {
    use heron_ir::CompareOp;
    use heron_ir::lower::{Epilogue, fuse};
    let build = |threshold: f32| {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![2, 3, 4]));
        let slope = g.add_constant("slope", Tensor::from_vec(&[3, 1], vec![0.1f32, 0.2, 0.3]).unwrap());
        let zero = g.add_constant("zero", Tensor::from_vec(&[], vec![threshold]).unwrap());
        let negative = g.add_op("negative", Op::Compare(CompareOp::Less), &[x, zero]).unwrap();
        let scaled = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[x, slope]).unwrap();
        let y = g.add_op("prelu", Op::Where, &[negative, scaled, x]).unwrap();
        g.set_outputs(vec![y]);
        (g, x, slope)
    };
    let (g, x, slope) = build(0.0);
    let groups = fuse(&g);
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].epilogue, [Epilogue::PReluOfProduct { input: x }]);
    assert_eq!(groups[0].inputs, [x, slope]);
    assert_eq!(groups[0].outputs, g.outputs);
    let (g, _, _) = build(0.5);
    assert_eq!(fuse(&g).len(), 3);
}

/// GELU as exporters write it (`Div(v, √2)`, `Erf`, `Add(·, 1)`, `Mul(v, ·)`, `Mul(·, ½)`, or
/// `Mul(v, 1/√2)` first) fuses into the convolution producing `v` as one Gelu step; another
/// constant, or an intermediate read elsewhere too, is not that pattern and stays apart.
#[test]
fn gelu_fuses_only_as_exporters_write_it() {
    use heron_ir::lower::{Epilogue, fuse};
    let build = |divide: bool, scale: f32, sum_read_twice: bool| {
        let (mut g, v) = conv_graph();
        let scalar =
            |g: &mut Graph, name: &str, value: f32| g.add_constant(name, Tensor::from_vec(&[], vec![value]).unwrap());
        let s = scalar(&mut g, "s", scale);
        let (one, half) = (scalar(&mut g, "one", 1.0), scalar(&mut g, "half", 0.5));
        let scaled = if divide {
            g.add_op("div", Op::Binary(BinaryOp::Div), &[v, s]).unwrap()
        } else {
            g.add_op("mul0", Op::Binary(BinaryOp::Mul), &[s, v]).unwrap()
        };
        let e = g.add_op("erf", Op::Unary(UnaryOp::Erf), &[scaled]).unwrap();
        let sum = g.add_op("add", Op::Binary(BinaryOp::Add), &[one, e]).unwrap();
        let product = g.add_op("mul1", Op::Binary(BinaryOp::Mul), &[v, sum]).unwrap();
        let y = g.add_op("mul2", Op::Binary(BinaryOp::Mul), &[product, half]).unwrap();
        let mut outputs = vec![y];
        if sum_read_twice {
            outputs.push(g.add_op("again", Op::Unary(UnaryOp::Neg), &[sum]).unwrap());
        }
        g.set_outputs(outputs);
        g
    };
    for g in [build(true, std::f32::consts::SQRT_2, false), build(false, std::f32::consts::FRAC_1_SQRT_2, false)] {
        let groups = fuse(&g);
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert_eq!(groups[0].epilogue, [Epilogue::Unary(UnaryOp::Gelu)]);
        assert_eq!(groups[0].fused.len(), 5);
    }
    for g in [
        build(true, 1.5, false),
        build(false, std::f32::consts::SQRT_2, false),
        build(true, std::f32::consts::SQRT_2, true),
    ] {
        let groups = fuse(&g);
        assert!(groups.iter().all(|group| !group.epilogue.contains(&Epilogue::Unary(UnaryOp::Gelu))), "{groups:?}");
        assert!(groups.len() > 1, "{groups:?}");
    }
}

/// Mish as exporters write it before opset 18 (`Softplus(v)`, `Tanh`, `Mul(v, ·)` in either
/// order) fuses into the convolution producing `v` as one Mish step (what the step computes is
/// checked against the three nodes end to end in `runtime/tests/kernels.rs`); a Softplus or
/// Tanh read elsewhere too, a product with something else, or the tanh squared, stays apart.
#[test]
fn mish_fuses_only_as_exporters_write_it() {
    use heron_ir::lower::{Epilogue, fuse};
    #[derive(Clone, Copy, PartialEq)]
    enum Variant {
        Exported,
        SoftplusReadTwice,
        TanhReadTwice,
        OtherFactor,
        TanhSquared,
    }
    let build = |value_first: bool, variant: Variant| {
        let (mut g, v) = conv_graph();
        let s = g.add_op("softplus", Op::Unary(UnaryOp::Softplus), &[v]).unwrap();
        let t = g.add_op("tanh", Op::Unary(UnaryOp::Tanh), &[s]).unwrap();
        let factor = match variant {
            Variant::OtherFactor => g.add_op("neg", Op::Unary(UnaryOp::Neg), &[v]).unwrap(),
            Variant::TanhSquared => t,
            _ => v,
        };
        let operands = if value_first { [factor, t] } else { [t, factor] };
        let y = g.add_op("mul", Op::Binary(BinaryOp::Mul), &operands).unwrap();
        let mut outputs = vec![y];
        match variant {
            Variant::SoftplusReadTwice => outputs.push(g.add_op("again", Op::Unary(UnaryOp::Neg), &[s]).unwrap()),
            Variant::TanhReadTwice => outputs.push(g.add_op("again", Op::Unary(UnaryOp::Neg), &[t]).unwrap()),
            _ => {}
        }
        g.set_outputs(outputs);
        g
    };
    for value_first in [true, false] {
        let groups = fuse(&build(value_first, Variant::Exported));
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert_eq!(groups[0].epilogue, [Epilogue::Unary(UnaryOp::Mish)]);
        assert_eq!(groups[0].fused.len(), 3);
        for variant in [Variant::SoftplusReadTwice, Variant::TanhReadTwice, Variant::OtherFactor, Variant::TanhSquared]
        {
            let groups = fuse(&build(value_first, variant));
            assert!(groups.iter().all(|g| !g.epilogue.contains(&Epilogue::Unary(UnaryOp::Mish))), "{groups:?}");
            assert!(groups.len() > 1, "{groups:?}");
        }
    }
}

/// `v · HardSigmoid(v)` fuses into the convolution producing `v` as hard-swish only with
/// HardSwish's own alpha 1/6 and beta 1/2 (either operand order); another alpha or beta is a
/// HardSigmoid step and a product apart.
#[test]
fn gated_hard_sigmoid_fuses_as_hard_swish_only_with_its_constants() {
    use heron_ir::lower::{Epilogue, fuse};
    use heron_ir::op::Activation;
    let build = |alpha: f32, beta: f32, gate_first: bool| {
        let (mut g, v) = conv_graph();
        let h = g.add_op("gate", Op::Activation(Activation::HardSigmoid { alpha, beta }), &[v]).unwrap();
        let operands = if gate_first { [h, v] } else { [v, h] };
        let y = g.add_op("mul", Op::Binary(BinaryOp::Mul), &operands).unwrap();
        g.set_outputs(vec![y]);
        g
    };
    for gate_first in [true, false] {
        let groups = fuse(&build(1.0 / 6.0, 0.5, gate_first));
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert_eq!(groups[0].epilogue, [Epilogue::Unary(UnaryOp::HardSwish)]);
        for (alpha, beta) in [(0.2, 0.5), (1.0 / 6.0, 0.4)] {
            let groups = fuse(&build(alpha, beta, gate_first));
            assert!(groups.iter().all(|g| !g.epilogue.contains(&Epilogue::Unary(UnaryOp::HardSwish))), "{groups:?}");
            assert!(groups.len() > 1, "{groups:?}");
        }
    }
}

/// A convolution of `x_shape` input with a `[m, c/groups, kernel...]` weight and `window`.
fn window_conv(seed: &mut u64, x_shape: &[usize], m: usize, groups: usize, window: Window) -> Graph {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, x_shape.to_vec()));
    let mut w_shape = vec![m, x_shape[1] / groups];
    w_shape.extend(&window.kernel);
    let w = g.add_constant("w", rand_tensor(seed, &w_shape, -1.0, 1.0));
    let b = g.add_constant("b", rand_tensor(seed, &[m], -1.0, 1.0));
    let y = g.add_op("conv", Op::Conv(ConvAttrs { window, group: groups }), &[x, w, b]).unwrap();
    g.set_outputs(vec![y]);
    g
}

/// A 3×3 window padded by one on every side.
fn padded_3x3() -> Window {
    let mut window = Window::dense(vec![3, 3]);
    window.pads_begin = vec![1, 1];
    window.pads_end = vec![1, 1];
    window
}

fn conv_kernel(g: &Graph) -> Vec<usize> {
    match &g.nodes[0].op {
        Op::Conv(attrs) => attrs.window.kernel.clone(),
        op => panic!("{op:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Small images under kernels that reach past them (strides, dilations, uneven padding,
    /// groups, 1-D to 3-D): the taps kept compute the same outputs.
    #[test]
    fn trimmed_convolutions_compute_the_same(
        seed in any::<u64>(), spatial in prop::collection::vec((1usize..4, 1usize..6, 1usize..3, 1usize..3, 0usize..4, 0usize..4), 1..4),
        groups in 1usize..3, c_per_g in 1usize..3, m_per_g in 1usize..3,
    ) {
        let mut seed = seed;
        // Only windows that fit the padded input.
        prop_assume!(spatial.iter().all(|&(input, k, _, d, pb, pe)| (k - 1) * d + 1 <= input + pb + pe));
        let mut x_shape = vec![2, c_per_g * groups];
        x_shape.extend(spatial.iter().map(|s| s.0));
        let window = Window {
            kernel: spatial.iter().map(|s| s.1).collect(),
            strides: spatial.iter().map(|s| s.2).collect(),
            dilations: spatial.iter().map(|s| s.3).collect(),
            pads_begin: spatial.iter().map(|s| s.4).collect(),
            pads_end: spatial.iter().map(|s| s.5).collect(),
        };
        let g = window_conv(&mut seed, &x_shape, m_per_g * groups, groups, window);
        let input = rand_tensor(&mut seed, &x_shape, -1.0, 1.0);
        same_outputs(&g, &[input], heron_ir::passes::trim_conv_taps);
    }
}

#[test]
fn a_3x3_convolution_over_one_pixel_keeps_its_centre() {
    let mut seed = 3;
    let mut window = padded_3x3();
    let g = window_conv(&mut seed, &[1, 4, 1, 1], 5, 1, window.clone());
    let input = rand_tensor(&mut seed, &[1, 4, 1, 1], -1.0, 1.0);
    let mut trimmed = g.clone();
    assert_eq!(same_outputs(&g, &[input.clone()], heron_ir::passes::trim_conv_taps), 1);
    heron_ir::passes::trim_conv_taps(&mut trimmed);
    assert_eq!(conv_kernel(&trimmed), [1, 1]);
    // Over 2×2 every tap reaches inside for some pixel: nothing to trim.
    let g = window_conv(&mut seed, &[1, 4, 2, 2], 5, 1, window.clone());
    let input = rand_tensor(&mut seed, &[1, 4, 2, 2], -1.0, 1.0);
    assert_eq!(same_outputs(&g, &[input], heron_ir::passes::trim_conv_taps), 0);
    // A stride-2 3×3 over 2×2 to one pixel keeps the taps 1..3 of each axis.
    window.strides = vec![2, 2];
    let mut g = window_conv(&mut seed, &[1, 4, 2, 2], 5, 1, window);
    let input = rand_tensor(&mut seed, &[1, 4, 2, 2], -1.0, 1.0);
    assert_eq!(same_outputs(&g, &[input], heron_ir::passes::trim_conv_taps), 1);
    heron_ir::passes::trim_conv_taps(&mut g);
    assert_eq!(conv_kernel(&g), [2, 2]);
}

#[test]
fn taps_with_non_finite_weights_are_kept() {
    // 0 · inf is NaN: dropping the tap would change the output.
    let mut seed = 5;
    let window = padded_3x3();
    let mut g = window_conv(&mut seed, &[1, 2, 1, 1], 2, 1, window);
    let w = g.nodes[0].inputs[1];
    let mut weights = g.constant(w).unwrap().to_f64_vec();
    weights[0] = f64::INFINITY;
    let weights = Tensor::from_vec::<f64>(&[2, 2, 3, 3], weights).unwrap().cast(DType::F32);
    let w = g.add_constant("w_inf", weights);
    g.nodes[0].inputs[1] = w;
    assert_eq!(heron_ir::passes::trim_conv_taps(&mut g), 0);
    assert_eq!(conv_kernel(&g), [3, 3]);
}
