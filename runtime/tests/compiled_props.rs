//! Property tests: randomly configured operators lowered to the loop IR compute what the graph
//! interpreter computes, before and after layout transforms and flattening, and so does the
//! JIT-compiled code (floats under the project's rule, integers bit-exact); random
//! split/reorder index maps on intermediate tensors do not change results.

use heron_ir::loop_ir::IndexMap;
use heron_ir::loop_ir::layout::set_layout;
use heron_ir::testing::{assert_close, assert_float_rule, check_stages_with, data};
use heron_ir::{
    BinaryOp, ConvAttrs, DType, Graph, Op, PoolAttrs, QuantAxis, Tensor, TensorType, UnaryOp, ValueId, Window,
};
use heron_runtime::pipeline::{Pipeline, PipelineOptions, Stage};
use heron_runtime::{CompileOptions, Compiler, Model};
use proptest::prelude::*;

/// The loop-IR stages and the JIT against the graph interpreter.
fn check_stages(graph: &Graph, inputs: &[Tensor]) {
    let want = check_stages_with(graph, inputs, |_| {});
    check_pipeline_stages(graph, inputs, &want);
    check_jit(graph, inputs, &want);
}

/// The loop-IR interpreter runs what the compile pipeline makes of `graph` at the target,
/// layout and flat stages (loop kinds and layouts as the CPU target chose them).
fn check_pipeline_stages(graph: &Graph, inputs: &[Tensor], want: &[Tensor]) {
    let model = Model::from_graph("prop", graph.clone()).expect("valid graph");
    let pipeline = Pipeline::new(PipelineOptions::default());
    for stage in [Stage::Target, Stage::Layout, Stage::Flat] {
        let m = pipeline.module(&model, stage).expect("pipeline");
        heron_ir::loop_ir::verify::verify_module(&m).unwrap_or_else(|e| panic!("{stage:?}: {e}"));
        let got = heron_ir::loop_ir::interp::run_with(&m, inputs, Some(&heron_jit::kernels::KernelExterns))
            .unwrap_or_else(|e| panic!("{stage:?}: {e}"));
        for ((g, w), &o) in got.iter().zip(want).zip(&graph.outputs) {
            let g = g.reshape(&graph.ty(o).shape).unwrap();
            let r = if w.dtype().is_float() { assert_float_rule(&g, w) } else { assert_close(&g, w, 0.0, 0.0) };
            r.unwrap_or_else(|e| panic!("{stage:?}, output '{}': {e}", graph.value(o).name));
        }
    }
}

fn check_jit(graph: &Graph, inputs: &[Tensor], want: &[Tensor]) {
    let model = Model::from_graph("prop", graph.clone()).expect("valid graph");
    let compiled = Compiler::new(CompileOptions::default()).compile(&model).expect("JIT compile");
    let got = compiled.run(inputs).expect("JIT run");
    for ((g, w), &o) in got.iter().zip(want).zip(&graph.outputs) {
        let r = if w.dtype().is_float() { assert_float_rule(g, w) } else { assert_close(g, w, 0.0, 0.0) };
        r.unwrap_or_else(|e| panic!("JIT, output '{}': {e}", graph.value(o).name));
    }
}

/// A k x k pooling window with stride `s` and padding `p` on every side.
fn square_window(k: usize, s: usize, p: usize) -> Window {
    let mut window = Window::dense(vec![k, k]);
    window.strides = vec![s, s];
    window.pads_begin = vec![p, p];
    window.pads_end = vec![p, p];
    window
}

fn f32s(seed: u64, shape: &[usize]) -> Tensor {
    Tensor::from_vec(shape, data(seed, shape.iter().product())).unwrap()
}

fn input(g: &mut Graph, name: &str, shape: &[usize]) -> ValueId {
    g.add_input(name, TensorType::new(DType::F32, shape.to_vec()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn conv_lowering_matches(
        seed in any::<u64>(), n in 1usize..3, cg in 1usize..4, mg in 1usize..3, groups in 1usize..4,
        h in 1usize..8, w in 1usize..8, kh in 1usize..4, kw in 1usize..4, s in 1usize..3, d in 1usize..3,
        pads in proptest::array::uniform4(0usize..3), bias in any::<bool>(), act in 0usize..3,
    ) {
        let (c, m) = (cg * groups, mg * groups);
        prop_assume!(h + pads[0] + pads[2] > d * (kh - 1) && w + pads[1] + pads[3] > d * (kw - 1));
        let mut g = Graph::new();
        let x = input(&mut g, "x", &[n, c, h, w]);
        let wt = g.add_constant("w", f32s(seed ^ 1, &[m, cg, kh, kw]));
        let mut ins = vec![x, wt];
        if bias {
            ins.push(g.add_constant("b", f32s(seed ^ 2, &[m])));
        }
        let window = Window {
            kernel: vec![kh, kw], strides: vec![s, s], dilations: vec![d, d],
            pads_begin: vec![pads[0], pads[1]], pads_end: vec![pads[2], pads[3]],
        };
        let mut y = g.add_op("conv", Op::Conv(ConvAttrs { window, group: groups }), &ins).unwrap();
        if act == 1 {
            y = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        } else if act == 2 {
            let lo = Tensor::scalar_from_f64(DType::F32, 0.0);
            let hi = Tensor::scalar_from_f64(DType::F32, 0.5);
            y = g.add_op("clip", Op::Clip { min: Some(lo), max: Some(hi) }, &[y]).unwrap();
        }
        g.set_outputs(vec![y]);
        check_stages(&g, &[f32s(seed, &[n, c, h, w])]);
    }

    /// Wider shapes than above, so the JIT's full vector loops, unroll-and-jam blocks and
    /// overlapping tails all run (JIT only: the loop-IR interpreter is slow at this size).
    #[test]
    fn wide_convs_on_the_jit(
        seed in any::<u64>(), cg in 1usize..6, mg in 1usize..7, groups in 1usize..3, h in 4usize..20,
        w in 4usize..40, k in 1usize..4, s in 1usize..3, p in 0usize..2, act in 0usize..2,
    ) {
        let (c, m) = (cg * groups, mg * groups);
        let mut g = Graph::new();
        let x = input(&mut g, "x", &[1, c, h, w]);
        let wt = g.add_constant("w", f32s(seed ^ 1, &[m, cg, k, k]));
        let b = g.add_constant("b", f32s(seed ^ 2, &[m]));
        let window = Window {
            kernel: vec![k, k], strides: vec![s, s], dilations: vec![1, 1],
            pads_begin: vec![p, p], pads_end: vec![p, p],
        };
        let mut y = g.add_op("conv", Op::Conv(ConvAttrs { window, group: groups }), &[x, wt, b]).unwrap();
        if act == 1 {
            y = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        }
        g.set_outputs(vec![y]);
        let inputs = [f32s(seed, &[1, c, h, w])];
        let want = heron_ir::interp::run(&g, &inputs).expect("graph interpreter");
        check_jit(&g, &inputs, &want);
    }

    /// GEMMs wide enough for the full vector loops (U = 4) and transposed constant weights.
    #[test]
    fn wide_gemms_on_the_jit(
        seed in any::<u64>(), m in 1usize..5, k in 1usize..40, n in 1usize..70, ta in any::<bool>(), tb in any::<bool>(),
    ) {
        let mut g = Graph::new();
        let ga = input(&mut g, "ga", &if ta { [k, m] } else { [m, k] });
        let gb = g.add_constant("gb", f32s(seed ^ 6, &if tb { [n, k] } else { [k, n] }));
        let gc = g.add_constant("gc", f32s(seed ^ 7, &[n]));
        let gemm = g.add_op("gemm", Op::Gemm { alpha: 1.5, beta: 0.5, trans_a: ta, trans_b: tb }, &[ga, gb, gc]).unwrap();
        let y = g.add_op("sig", Op::Unary(UnaryOp::Sigmoid), &[gemm]).unwrap();
        g.set_outputs(vec![y]);
        let inputs = [f32s(seed, &if ta { [k, m] } else { [m, k] })];
        let want = heron_ir::interp::run(&g, &inputs).expect("graph interpreter");
        check_jit(&g, &inputs, &want);
    }

    /// Integer GEMMs wide enough for i32 vector lanes (u8 inputs widened, zero points,
    /// requantization): bit-exact against the interpreter.
    #[test]
    fn wide_integer_matmuls_on_the_jit(seed in any::<u64>(), m in 1usize..4, k in 1usize..20, n in 4usize..40) {
        let bytes = |s: u64, len: usize| data(s, len).into_iter().map(|v| ((v + 1.0) * 127.0) as u8).collect::<Vec<u8>>();
        let mut g = Graph::new();
        let a = g.add_input("a", TensorType::new(DType::U8, vec![m, k]));
        let b = g.add_constant("b", Tensor::from_vec(&[k, n], bytes(seed ^ 3, k * n)).unwrap());
        let azp = g.add_constant("azp", Tensor::from_vec::<u8>(&[], vec![7]).unwrap());
        let bzp = g.add_constant("bzp", Tensor::from_vec::<u8>(&[n], (0..n).map(|i| (i * 5 % 30) as u8).collect()).unwrap());
        let y = g.add_op("mmi", Op::MatMulInteger, &[a, b, azp, bzp]).unwrap();
        let f = g.add_op("tofloat", Op::Cast { to: DType::F32 }, &[y]).unwrap();
        let scale = g.add_constant("scale", Tensor::from_vec::<f32>(&[], vec![0.05]).unwrap());
        let qzp = g.add_constant("qzp", Tensor::from_vec::<i8>(&[], vec![-3]).unwrap());
        let q = g.add_op("quant", Op::QuantizeLinear { axis: QuantAxis::PerTensor }, &[f, scale, qzp]).unwrap();
        g.set_outputs(vec![y, q]);
        let inputs = [Tensor::from_vec(&[m, k], bytes(seed, m * k)).unwrap()];
        let want = heron_ir::interp::run(&g, &inputs).expect("graph interpreter");
        check_jit(&g, &inputs, &want);
    }

    /// Pooling rows wide enough for full vector blocks (max pooling's running maximum becomes
    /// lane-predicated register updates).
    #[test]
    fn wide_pools_on_the_jit(
        seed in any::<u64>(), c in 1usize..4, h in 2usize..12, w in 4usize..40, k in 1usize..4, s in 1usize..3,
        p in 0usize..2, ceil in any::<bool>(), max in any::<bool>(),
    ) {
        prop_assume!(p < k && h + 2 * p >= k && w + 2 * p >= k);
        let mut g = Graph::new();
        let x = input(&mut g, "x", &[1, c, h, w]);
        let pool = PoolAttrs { window: square_window(k, s, p), ceil_mode: ceil };
        let y = if max {
            g.add_op("pool", Op::MaxPool { pool, storage_order_col_major: false }, &[x]).unwrap()
        } else {
            g.add_op("pool", Op::AveragePool { pool, count_include_pad: false }, &[x]).unwrap()
        };
        g.set_outputs(vec![y]);
        let inputs = [f32s(seed, &[1, c, h, w])];
        let want = heron_ir::interp::run(&g, &inputs).expect("graph interpreter");
        check_jit(&g, &inputs, &want);
    }

    /// Softmax rows wide enough for vector blocks (the row maximum and sum stay scalars).
    #[test]
    fn wide_softmax_on_the_jit(seed in any::<u64>(), rows in 1usize..4, n in 4usize..60, scale in 1.0f32..30.0) {
        let mut g = Graph::new();
        let x = input(&mut g, "x", &[rows, n]);
        let y = g.add_op("softmax", Op::Softmax { axis: 1, coerce_2d: false, log: false }, &[x]).unwrap();
        g.set_outputs(vec![y]);
        let data: Vec<f32> = data(seed, rows * n).into_iter().map(|v| v * scale).collect();
        let inputs = [Tensor::from_vec(&[rows, n], data).unwrap()];
        let want = heron_ir::interp::run(&g, &inputs).expect("graph interpreter");
        check_jit(&g, &inputs, &want);
    }

    #[test]
    fn pooling_lowering_matches(
        seed in any::<u64>(), c in 1usize..3, h in 1usize..9, w in 1usize..9, k in 1usize..4, s in 1usize..3,
        p in 0usize..2, ceil in any::<bool>(), include in any::<bool>(), kind in 0usize..3, col in any::<bool>(),
    ) {
        prop_assume!(p < k && h + 2 * p >= k && w + 2 * p >= k);
        let mut g = Graph::new();
        let x = input(&mut g, "x", &[1, c, h, w]);
        let pool = PoolAttrs { window: square_window(k, s, p), ceil_mode: ceil };
        let outs = match kind {
            0 => g.add_node("pool", Op::MaxPool { pool, storage_order_col_major: col }, &[x], 2).unwrap(),
            1 => vec![g.add_op("pool", Op::AveragePool { pool, count_include_pad: include }, &[x]).unwrap()],
            _ => vec![g.add_op("pool", Op::GlobalAveragePool, &[x]).unwrap()],
        };
        g.set_outputs(outs);
        check_stages(&g, &[f32s(seed, &[1, c, h, w])]);
    }

    #[test]
    fn matmul_and_gemm_lowering_matches(
        seed in any::<u64>(), m in 1usize..6, k in 1usize..7, n in 1usize..6, batch in 1usize..3,
        a_1d in any::<bool>(), b_1d in any::<bool>(), ta in any::<bool>(), tb in any::<bool>(),
    ) {
        let ashape: Vec<usize> = if a_1d { vec![k] } else { vec![batch, m, k] };
        let bshape: Vec<usize> = if b_1d { vec![k] } else { vec![1, k, n] };
        let mut g = Graph::new();
        let a = input(&mut g, "a", &ashape);
        let b = g.add_constant("b", f32s(seed ^ 5, &bshape));
        let mm = g.add_op("mm", Op::MatMul, &[a, b]).unwrap();
        let ga = input(&mut g, "ga", &if ta { [k, m] } else { [m, k] });
        let gb = g.add_constant("gb", f32s(seed ^ 6, &if tb { [n, k] } else { [k, n] }));
        let gc = g.add_constant("gc", f32s(seed ^ 7, &[n]));
        let gemm = g.add_op("gemm", Op::Gemm { alpha: 0.5, beta: 2.0, trans_a: ta, trans_b: tb }, &[ga, gb, gc]).unwrap();
        g.set_outputs(vec![mm, gemm]);
        let ga_shape = if ta { [k, m] } else { [m, k] };
        check_stages(&g, &[f32s(seed, &ashape), f32s(seed ^ 9, &ga_shape)]);
    }

    #[test]
    fn broadcasting_elementwise_chains_fuse_correctly(
        seed in any::<u64>(), a in 1usize..4, b in 1usize..5, c in 1usize..5, ops in proptest::collection::vec(0usize..7, 1..5),
    ) {
        let mut g = Graph::new();
        let x = input(&mut g, "x", &[a, b, c]);
        let mut v = g.add_op("exp", Op::Unary(UnaryOp::Tanh), &[x]).unwrap();
        for (i, op) in ops.iter().enumerate() {
            v = match op {
                0 => g.add_op(format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[v]).unwrap(),
                1 => g.add_op(format!("sig{i}"), Op::Unary(UnaryOp::Sigmoid), &[v]).unwrap(),
                2 => g.add_op(format!("leaky{i}"), Op::LeakyRelu { alpha: 0.1 }, &[v]).unwrap(),
                6 => g.add_op(format!("erf{i}"), Op::Unary(UnaryOp::Erf), &[v]).unwrap(),
                3 => {
                    let k = g.add_constant(format!("k{i}"), f32s(seed ^ i as u64, &[b, 1]));
                    g.add_op(format!("add{i}"), Op::Binary(BinaryOp::Add), &[k, v]).unwrap()
                }
                4 => {
                    let k = g.add_constant(format!("k{i}"), f32s(seed ^ i as u64, &[c]));
                    g.add_op(format!("mul{i}"), Op::Binary(BinaryOp::Mul), &[v, k]).unwrap()
                }
                _ => {
                    let k = g.add_constant(format!("k{i}"), f32s(seed ^ i as u64, &[1, b, c]));
                    g.add_op(format!("max{i}"), Op::Binary(BinaryOp::Max), &[v, k]).unwrap()
                }
            };
        }
        g.set_outputs(vec![v]);
        let m = heron_ir::lower::lower(&g).unwrap();
        prop_assert_eq!(m.funcs.len(), 2, "one fused function and main");
        check_stages(&g, &[f32s(seed, &[a, b, c])]);
    }

    #[test]
    fn softmax_lowering_matches(seed in any::<u64>(), shape in proptest::collection::vec(1usize..5, 1..4), axis in 0usize..3, coerce in any::<bool>()) {
        prop_assume!(axis < shape.len());
        let mut g = Graph::new();
        let x = input(&mut g, "x", &shape);
        let y = g.add_op("softmax", Op::Softmax { axis, coerce_2d: coerce, log: seed % 2 == 1 }, &[x]).unwrap();
        g.set_outputs(vec![y]);
        check_stages(&g, &[f32s(seed, &shape)]);
    }

    #[test]
    fn integer_ops_are_bit_exact(
        seed in any::<u64>(), m in 1usize..5, k in 1usize..6, n in 1usize..5, zp in 0u8..20, per_row in any::<bool>(),
    ) {
        let bytes = |s: u64, len: usize| data(s, len).into_iter().map(|v| ((v + 1.0) * 127.0) as u8).collect::<Vec<u8>>();
        let mut g = Graph::new();
        let a = g.add_input("a", TensorType::new(DType::U8, vec![m, k]));
        let b = g.add_constant("b", Tensor::from_vec(&[k, n], bytes(seed ^ 3, k * n)).unwrap());
        let azp = if per_row {
            g.add_constant("azp", Tensor::from_vec(&[m], vec![zp; m]).unwrap())
        } else {
            g.add_constant("azp", Tensor::from_vec::<u8>(&[], vec![zp]).unwrap())
        };
        let bzp = g.add_constant("bzp", Tensor::from_vec::<u8>(&[n], (0..n as u8).collect()).unwrap());
        let y = g.add_op("mmi", Op::MatMulInteger, &[a, b, azp, bzp]).unwrap();
        let scale = g.add_constant("scale", Tensor::from_vec::<f32>(&[], vec![0.37]).unwrap());
        let qzp = g.add_constant("qzp", Tensor::from_vec::<i8>(&[], vec![-3]).unwrap());
        let f = g.add_op("tofloat", Op::Cast { to: DType::F32 }, &[y]).unwrap();
        let q = g.add_op("quant", Op::QuantizeLinear { axis: QuantAxis::PerTensor }, &[f, scale, qzp]).unwrap();
        let dq = g.add_op("dequant", Op::DequantizeLinear { axis: QuantAxis::PerTensor }, &[q, scale, qzp]).unwrap();
        let sh = g.add_constant("shift", Tensor::from_vec::<i32>(&[1], vec![3]).unwrap());
        let shifted = g.add_op("shr", Op::BitShift { left: false }, &[y, sh]).unwrap();
        g.set_outputs(vec![y, q, dq, shifted]);
        check_stages(&g, &[Tensor::from_vec(&[m, k], bytes(seed, m * k)).unwrap()]);
    }

    #[test]
    fn random_layouts_on_intermediates_keep_results(
        seed in any::<u64>(), shape in proptest::collection::vec(1usize..6, 1..4),
        factors in proptest::collection::vec(1usize..4, 3), order in any::<u64>(), sep in any::<bool>(),
    ) {
        // t = tanh(x) is an intermediate main allocates; y = t * 2 + x reads it back.
        let mut g = Graph::new();
        let x = input(&mut g, "x", &shape);
        let t = g.add_op("t", Op::Unary(UnaryOp::Tanh), &[x]).unwrap();
        let two = g.add_constant("two", Tensor::scalar_from_f64(DType::F32, 2.0));
        let t2 = g.add_op("t2", Op::Binary(BinaryOp::Mul), &[two, x]).unwrap();
        let y = g.add_op("y", Op::Binary(BinaryOp::Add), &[t2, t]).unwrap();
        g.set_outputs(vec![y]);
        let map = random_map(shape.len(), &factors, order, sep);
        check_stages_with(&g, &[f32s(seed, &shape)], |m| {
            // `t` stays an intermediate only when it is not fused into its consumer.
            if m.main().unwrap().find_buffer("t").is_some() {
                set_layout(m, "main", "t", map.clone()).unwrap();
            } else {
                set_layout(m, "main", "t2", map.clone()).unwrap();
            }
        });
    }
}

/// A random split/reorder map on `rank` axes: axis i is split by `factors[i]` (1 = not split),
/// the parts are shuffled, and optionally an axis separator is inserted.
fn random_map(rank: usize, factors: &[usize], order: u64, sep: bool) -> IndexMap {
    let vars: Vec<String> = (0..rank).map(|i| format!("v{i}")).collect();
    let mut parts: Vec<String> = Vec::new();
    for (i, v) in vars.iter().enumerate() {
        match factors[i] {
            1 => parts.push(v.clone()),
            f => {
                parts.push(format!("{v} // {f}"));
                parts.push(format!("{v} % {f}"));
            }
        }
    }
    let mut r = order;
    for i in (1..parts.len()).rev() {
        r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        parts.swap(i, (r >> 33) as usize % (i + 1));
    }
    if sep && parts.len() > 1 {
        parts.insert(1 + (r as usize % (parts.len() - 1)), "AXIS_SEPARATOR".into());
    }
    IndexMap::parse(&format!("lambda {}: [{}]", vars.join(", "), parts.join(", "))).unwrap()
}

#[test]
fn layout_transformed_conv_scratch_matches() {
    // The padded input of a convolution in NCHWc (4-channel blocks innermost): the layout a
    // target may choose for it must not change results.
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 8, 5, 5]);
    let w = g.add_constant("w", f32s(3, &[4, 8, 3, 3]));
    let mut window = Window::dense(vec![3, 3]);
    window.pads_begin = vec![1, 1];
    window.pads_end = vec![1, 1];
    let y = g.add_op("conv", Op::Conv(ConvAttrs { window, group: 1 }), &[x, w]).unwrap();
    g.set_outputs(vec![y]);
    let nchwc = |m: &mut heron_ir::loop_ir::Module| {
        let mut annotated = 0;
        for f in &mut m.funcs {
            if let Some(pad) = f.find_buffer("pad") {
                f.layout_transforms.insert(pad, heron_ir::loop_ir::layouts::axis_blocked(4, 1, 4));
                annotated += 1;
            }
        }
        assert_eq!(annotated, 1, "the convolution pads its input in a scratch buffer");
    };
    check_stages_with(&g, &[f32s(11, &[1, 8, 5, 5])], nchwc);
}

#[test]
fn vta_packed_layouts_tile_like_the_reference() {
    use heron_ir::loop_ir::layouts::{vta_conv_data, vta_conv_kernel};
    // numpy: reshape(N/B, B, C/16, 16, H, W).transpose(0, 2, 4, 5, 1, 3)
    let data = vta_conv_data(1, 16);
    let t = data.transformed_shape(&[2, 32, 3, 3]).unwrap();
    assert_eq!(t, vec![2, 2, 3, 3, 1, 16]);
    assert_eq!(data.apply(&[1, 17, 2, 0]), vec![1, 1, 2, 0, 0, 1]);
    let kernel = vta_conv_kernel(16, 16);
    assert_eq!(kernel.transformed_shape(&[32, 16, 3, 3]).unwrap(), vec![2, 1, 3, 3, 16, 16]);
    assert_eq!(kernel.apply(&[20, 5, 1, 2]), vec![1, 0, 1, 2, 4, 5]);
    kernel.check_injective(&[32, 16, 3, 3]).unwrap();
}

#[test]
fn vta_packed_layouts_on_an_int8_convolution_are_bit_exact() {
    use heron_ir::loop_ir::layouts::{vta_conv_data, vta_conv_kernel};
    let (c, m) = (16, 32);
    let bytes = |s: u64, n: usize| data(s, n).into_iter().map(|v| (v * 100.0) as i8).collect::<Vec<i8>>();
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::I8, vec![1, c, 5, 5]));
    // The conv input is an intermediate (relu of x), so its layout is the compiler's to choose.
    let data_t = g.add_op("data", Op::Unary(UnaryOp::Relu), &[x]).unwrap();
    let w = g.add_constant("kernel", Tensor::from_vec(&[m, c, 3, 3], bytes(7, m * c * 9)).unwrap());
    let zx = g.add_constant("zx", Tensor::from_vec::<i8>(&[], vec![0]).unwrap());
    let zw = g.add_constant("zw", Tensor::from_vec::<i8>(&[], vec![0]).unwrap());
    let y = g
        .add_op(
            "conv",
            Op::ConvInteger(ConvAttrs { window: Window::dense(vec![3, 3]), group: 1 }),
            &[data_t, w, zx, zw],
        )
        .unwrap();
    g.set_outputs(vec![y]);
    let input = Tensor::from_vec(&[1, c, 5, 5], bytes(3, c * 25)).unwrap();
    check_stages_with(&g, &[input], |m| {
        set_layout(m, "main", "data", vta_conv_data(1, 16)).unwrap();
        set_layout(m, "main", "kernel", vta_conv_kernel(16, 16)).unwrap();
    });
}

/// Bytes of `dtype` (u8 or i8) covering the whole range.
fn int8_tensor(seed: u64, dtype: DType, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    let v = data(seed, n);
    match dtype {
        DType::U8 => Tensor::from_vec(shape, v.into_iter().map(|x| ((x + 1.0) * 127.9) as u8).collect()).unwrap(),
        _ => Tensor::from_vec(shape, v.into_iter().map(|x| (x * 127.9) as i8).collect()).unwrap(),
    }
}

/// How a test supplies a zero point: `0` a constant zero, `1` a constant scalar, `2` a
/// constant per row / column / output channel, `3` a graph input (not foldable). Returns the
/// value and, for an input, its tensor.
fn zero_point(
    g: &mut Graph,
    name: &str,
    kind: u8,
    dtype: DType,
    axis_len: usize,
    seed: u64,
) -> (ValueId, Option<Tensor>) {
    let shape = if kind == 2 { vec![axis_len] } else { vec![] };
    let t = if kind == 0 {
        Tensor::zeros(&TensorType::new(dtype, shape.clone()))
    } else {
        int8_tensor(seed, dtype, &shape)
    };
    if kind == 3 {
        (g.add_input(name, TensorType::new(dtype, shape)), Some(t))
    } else {
        (g.add_constant(name, t), None)
    }
}

fn byte_type(signed: bool) -> DType {
    if signed { DType::I8 } else { DType::U8 }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Integer GEMMs of every u8/i8 pairing with K in quads or not, weights constant or an
    /// input, zero points absent, constant (scalar or per row/column) or inputs: the CPU's
    /// dot-product rewrite (K in quads for VNNI, operand sums for zero points and sign flips)
    /// checked on the loop-IR interpreter at every stage, and the JIT bit-exact.
    #[test]
    fn int8_gemms_are_bit_exact(
        seed in any::<u64>(), m in 1usize..5, k in 1usize..21, n in 1usize..24,
        a_signed in any::<bool>(), b_signed in any::<bool>(), b_constant in any::<bool>(),
        za in 0u8..4, zb in 0u8..4,
    ) {
        let (ta, tb) = (byte_type(a_signed), byte_type(b_signed));
        let mut g = Graph::new();
        let mut inputs = vec![int8_tensor(seed, ta, &[m, k])];
        let a = g.add_input("a", TensorType::new(ta, vec![m, k]));
        let bt = int8_tensor(seed ^ 5, tb, &[k, n]);
        let b = if b_constant {
            g.add_constant("b", bt)
        } else {
            inputs.push(bt);
            g.add_input("b", TensorType::new(tb, vec![k, n]))
        };
        let (az, az_in) = zero_point(&mut g, "az", za, ta, m, seed ^ 7);
        let (bz, bz_in) = zero_point(&mut g, "bz", zb, tb, n, seed ^ 11);
        inputs.extend(az_in.into_iter().chain(bz_in));
        let y = g.add_op("mmi", Op::MatMulInteger, &[a, b, az, bz]).unwrap();
        g.set_outputs(vec![y]);
        let want = check_stages_with(&g, &inputs, heron_jit::schedule::choose_layouts);
        check_jit(&g, &inputs, &want);
    }

    /// Integer convolutions of every u8/i8 pairing, channels in quads or not, with padding,
    /// strides, groups, and the zero-point variants of the GEMM test (the padded input is
    /// stored channel-blocked, other inputs staged).
    #[test]
    fn int8_convolutions_are_bit_exact(
        seed in any::<u64>(), c in prop::sample::select(vec![2usize, 4, 8, 12]), m in 1usize..6,
        hw in 3usize..9, k in 1usize..4, s in 1usize..3, p in 0usize..2, grouped in any::<bool>(),
        x_signed in any::<bool>(), w_signed in any::<bool>(), w_constant in any::<bool>(),
        zx in 0u8..4, zw in prop::sample::select(vec![0u8, 1, 2]),
    ) {
        let group = if grouped && c % 2 == 0 { 2 } else { 1 };
        let m = m * group;
        let (tx, tw) = (byte_type(x_signed), byte_type(w_signed));
        let mut g = Graph::new();
        let mut inputs = vec![int8_tensor(seed, tx, &[1, c, hw, hw])];
        let x = g.add_input("x", TensorType::new(tx, vec![1, c, hw, hw]));
        let wt = int8_tensor(seed ^ 5, tw, &[m, c / group, k, k]);
        let w = if w_constant {
            g.add_constant("w", wt)
        } else {
            inputs.push(wt);
            g.add_input("w", TensorType::new(tw, vec![m, c / group, k, k]))
        };
        // The input's zero point is per tensor: no per-axis variant.
        let (xz, xz_in) = zero_point(&mut g, "xz", [0, 1, 1, 3][zx as usize], tx, 1, seed ^ 7);
        let (wz, wz_in) = zero_point(&mut g, "wz", zw, tw, m, seed ^ 11);
        inputs.extend(xz_in.into_iter().chain(wz_in));
        let window = Window { strides: vec![s, s], pads_begin: vec![p, p], pads_end: vec![p, p], ..Window::dense(vec![k, k]) };
        let y = g.add_op("conv", Op::ConvInteger(ConvAttrs { window, group }), &[x, w, xz, wz]).unwrap();
        g.set_outputs(vec![y]);
        let want = check_stages_with(&g, &inputs, heron_jit::schedule::choose_layouts);
        check_jit(&g, &inputs, &want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Rows wide enough for vector lanes of 8- and 16-bit integers (held in i32 lanes, widened
    /// on load, wrapped or saturated and packed on store): quantize, dequantize, casts both
    /// ways and wrapping arithmetic, bit-exact against the interpreter.
    #[test]
    fn narrow_integer_lanes_on_the_jit(
        seed in any::<u64>(), rows in 1usize..4, w in 1usize..41,
        dtype in prop::sample::select(vec![DType::U8, DType::I8, DType::U16, DType::I16]),
        scale in 0.001f32..0.05, zp_seed in any::<u64>(),
    ) {
        let mut g = Graph::new();
        let x = input(&mut g, "x", &[rows, w]);
        let y = input(&mut g, "y", &[rows, w]);
        let s = g.add_constant("s", Tensor::from_vec::<f32>(&[], vec![scale]).unwrap());
        let zp = Tensor::zeros(&TensorType::new(dtype, vec![]));
        let zp = match zp {
            Tensor::U8(_) => Tensor::from_vec::<u8>(&[], vec![zp_seed as u8]).unwrap(),
            Tensor::I8(_) => Tensor::from_vec::<i8>(&[], vec![zp_seed as i8]).unwrap(),
            Tensor::U16(_) => Tensor::from_vec::<u16>(&[], vec![zp_seed as u16]).unwrap(),
            _ => Tensor::from_vec::<i16>(&[], vec![zp_seed as i16]).unwrap(),
        };
        let zp = g.add_constant("zp", zp);
        let per_tensor = QuantAxis::PerTensor;
        let qx = g.add_op("qx", Op::QuantizeLinear { axis: per_tensor }, &[x, s, zp]).unwrap();
        let qy = g.add_op("qy", Op::QuantizeLinear { axis: per_tensor }, &[y, s, zp]).unwrap();
        let dq = g.add_op("dq", Op::DequantizeLinear { axis: per_tensor }, &[qx, s, zp]).unwrap();
        let mut outputs = vec![qx, dq];
        for (name, op) in [("max", BinaryOp::Max), ("min", BinaryOp::Min), ("add", BinaryOp::Add), ("sub", BinaryOp::Sub), ("mul", BinaryOp::Mul)] {
            outputs.push(g.add_op(name, Op::Binary(op), &[qx, qy]).unwrap());
        }
        outputs.push(g.add_op("widen", Op::Cast { to: DType::I32 }, &[qx]).unwrap());
        outputs.push(g.add_op("tofloat", Op::Cast { to: DType::F32 }, &[qy]).unwrap());
        // Out-of-range floats saturate, as Rust's `as` does.
        let big = g.add_constant("big", Tensor::from_vec::<f32>(&[], vec![90_000.0]).unwrap());
        let scaled = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[x, big]).unwrap();
        outputs.push(g.add_op("narrow", Op::Cast { to: dtype }, &[scaled]).unwrap());
        g.set_outputs(outputs);
        check_stages(&g, &[f32s(seed, &[rows, w]), f32s(seed ^ 9, &[rows, w])]);
    }
}

/// Every unary op, on floats (inputs in its domain, shapes with vector tails) and, for those
/// ONNX defines on integers, on int8 and int32 (extremes included): the loop-IR stages and the
/// JIT compute what the interpreter computes.
#[test]
fn every_unary_op_matches_the_interpreter() {
    use UnaryOp::*;
    let all = [
        Relu, Sigmoid, Tanh, Exp, Sqrt, Erf, Abs, Neg, Floor, Ceil, Round, Sign, Reciprocal, Log, Sin, Cos, Tan, Asin,
        Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Softplus, Softsign, HardSwish, Mish, Gelu, GeluTanh,
    ];
    for op in all {
        let shape = [3, 7];
        let n = 21;
        // Domains: (0, 4] for sqrt/log, [1, 5] for acosh, (-1, 1) for asin/acos/atanh.
        let v: Vec<f32> = data(op as u64 + 1, n)
            .into_iter()
            .map(|x| match op {
                Sqrt | Log | Reciprocal => x.abs() * 4.0 + 0.01,
                Acosh => 1.0 + x.abs() * 4.0,
                Asin | Acos | Atanh => x * 0.99,
                _ => x * 4.0,
            })
            .collect();
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, shape.to_vec()));
        let y = g.add_op("y", Op::Unary(op), &[x]).unwrap();
        g.set_outputs(vec![y]);
        check_stages(&g, &[Tensor::from_vec(&shape, v).unwrap()]);
        if op.takes_integers() {
            for dtype in [DType::I8, DType::I32] {
                let mut g = Graph::new();
                let x = g.add_input("x", TensorType::new(dtype, vec![2, 9]));
                let y = g.add_op("y", Op::Unary(op), &[x]).unwrap();
                g.set_outputs(vec![y]);
                let vals: Vec<i64> =
                    (0..18).map(|k| [-128, 127, 0, -1, 1, -7, 5][k % 7] * (k as i64 + 1) / 3).collect();
                let t = match dtype {
                    DType::I8 => Tensor::from_vec(&[2, 9], vals.iter().map(|&v| v.clamp(-128, 127) as i8).collect()),
                    _ => Tensor::from_vec(&[2, 9], vals.iter().map(|&v| v as i32 * 1000).collect()),
                };
                check_stages(&g, &[t.unwrap()]);
            }
        }
    }
}
