//! Golden tests of the target stage: each small graph's program after the CPU target (layout
//! choices, loop kinds, operators split per loop nest, parallel loops; constants elided) must
//! equal `runtime/tests/golden/<name>.heron`. `HERON_BLESS=1` rewrites the expected files after
//! an intended change; review the diff. Each program also runs on the loop-IR interpreter and
//! matches the graph interpreter (the VTA target's region calls excepted: the VTA tests run
//! those against the CPU).

use std::path::PathBuf;

use heron_ir::loop_ir::print::{ConstData, print_module};
use heron_ir::testing::{assert_close, assert_float_rule, data};
use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, PoolAttrs, Tensor, TensorType, UnaryOp, Window};
use heron_jit::kernels::{Int8Isa, Isa, KernelConfig};
use heron_runtime::Model;
use heron_runtime::pipeline::{Pipeline, PipelineOptions, Stage};

fn golden(name: &str, graph: Graph, inputs: &[Tensor]) {
    let model = Model::from_graph(name, graph.clone()).expect("valid graph");
    // Kernels pinned, so the text does not depend on this machine's ISA or cores.
    let kernels = Some(KernelConfig { isa: Isa::Avx512, int8: Int8Isa::Vnni512, tasks: 2 });
    let options = PipelineOptions { kernels, ..PipelineOptions::default() };
    let module = Pipeline::new(options).module(&model, Stage::Target).expect("target stage");
    let want = heron_ir::interp::run(&graph, inputs).expect("graph interpreter");
    let got = heron_ir::loop_ir::interp::run_with(&module, inputs, Some(&heron_jit::kernels::KernelExterns))
        .expect("loop-IR interpreter");
    for (g, w) in got.iter().zip(&want) {
        let g = g.reshape(w.shape()).expect("output shape");
        let r = if w.dtype().is_float() { assert_float_rule(&g, w) } else { assert_close(&g, w, 0.0, 0.0) };
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    check_golden(name, &module);
}

/// The module's text (constants elided) must equal `tests/golden/<name>.heron`.
fn check_golden(name: &str, module: &heron_ir::loop_ir::Module) {
    let text = print_module(module, ConstData::Elided);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.heron"));
    if std::env::var_os("HERON_BLESS").is_some() {
        std::fs::write(&path, &text).expect("writable golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with HERON_BLESS=1 to create it)", path.display()));
    assert!(text == expected, "the target stage of {name} changed; run with HERON_BLESS=1 to accept:\n{text}");
}

fn f32s(seed: u64, shape: &[usize]) -> Tensor {
    Tensor::from_vec(shape, data(seed, shape.iter().product())).expect("shape")
}

fn conv(k: usize, pad: usize, group: usize) -> Op {
    let mut window = Window::dense(vec![k, k]);
    window.pads_begin = vec![pad; 2];
    window.pads_end = vec![pad; 2];
    Op::Conv(ConvAttrs { window, group })
}

#[test]
fn golden_target_conv() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 16, 16, 16]));
    let w = g.add_constant("w", f32s(2, &[16, 16, 3, 3]));
    let b = g.add_constant("b", f32s(3, &[16]));
    let y = g.add_op("conv", conv(3, 1, 1), &[x, w, b]).unwrap();
    g.set_outputs(vec![y]);
    golden("target_conv", g, &[f32s(1, &[1, 16, 16, 16])]);
}

#[test]
fn golden_target_depthwise_conv() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 32, 32, 32]));
    let w = g.add_constant("w", f32s(2, &[32, 1, 3, 3]));
    let y = g.add_op("dw", conv(3, 1, 32), &[x, w]).unwrap();
    g.set_outputs(vec![y]);
    golden("target_depthwise_conv", g, &[f32s(1, &[1, 32, 32, 32])]);
}

/// A dense layer `[rows, inputs] x [outputs, inputs]^T + bias`, its target stage checked
/// against the golden file `name`.
fn golden_dense(name: &str, rows: usize, inputs: usize, outputs: usize) {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![rows, inputs]));
    let w = g.add_constant("w", f32s(2, &[outputs, inputs]));
    let b = g.add_constant("b", f32s(3, &[outputs]));
    let y = g.add_op("dense", Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true }, &[x, w, b]).unwrap();
    g.set_outputs(vec![y]);
    golden(name, g, &[f32s(1, &[rows, inputs])]);
}

#[test]
fn golden_target_gemm() {
    golden_dense("target_gemm", 16, 64, 128);
}

/// One row: no loop above the vector loop to split across threads, so the vector loop is
/// split into a parallel loop over chunks.
#[test]
fn golden_target_gemv() {
    golden_dense("target_gemv", 1, 256, 400);
}

#[test]
fn golden_target_pooling() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 16, 32, 32]));
    let mut window = Window::dense(vec![3, 3]);
    window.strides = vec![2, 2];
    window.pads_begin = vec![1, 1];
    window.pads_end = vec![1, 1];
    let pool = PoolAttrs { window, ceil_mode: false };
    let y = g.add_op("maxpool", Op::MaxPool { pool, storage_order_col_major: false }, &[x]).unwrap();
    g.set_outputs(vec![y]);
    golden("target_pooling", g, &[f32s(1, &[1, 16, 32, 32])]);
}

#[test]
fn golden_target_int8_conv() {
    let bytes = |seed: u64, n: usize| data(seed, n).into_iter().map(|v| (v * 100.0) as i8).collect::<Vec<i8>>();
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::U8, vec![1, 16, 14, 14]));
    let w = g.add_constant("w", Tensor::from_vec(&[32, 16, 3, 3], bytes(2, 32 * 16 * 9)).unwrap());
    let xz = g.add_constant("x_zero_point", Tensor::from_vec::<u8>(&[], vec![128]).unwrap());
    let wz = g.add_constant("w_zero_point", Tensor::from_vec::<i8>(&[], vec![3]).unwrap());
    let y =
        g.add_op("qconv", Op::ConvInteger(ConvAttrs { window: Window::dense(vec![3, 3]), group: 1 }), &[x, w, xz, wz]);
    g.set_outputs(vec![y.unwrap()]);
    let input: Vec<u8> = data(1, 16 * 14 * 14).into_iter().map(|v| ((v + 1.0) * 127.0) as u8).collect();
    golden("target_int8_conv", g, &[Tensor::from_vec(&[1, 16, 14, 14], input).unwrap()]);
}

#[test]
fn golden_target_residual_block() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 16, 16, 16]));
    let w = g.add_constant("w", f32s(2, &[16, 16, 3, 3]));
    let b = g.add_constant("b", f32s(3, &[16]));
    let c = g.add_op("conv", conv(3, 1, 1), &[x, w, b]).unwrap();
    let r = g.add_op("residual", Op::Binary(BinaryOp::Add), &[c, x]).unwrap();
    let y = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[r]).unwrap();
    g.set_outputs(vec![y]);
    golden("target_residual_block", g, &[f32s(1, &[1, 16, 16, 16])]);
}

/// The VTA target on an int8 convolution whose 3 input channels are padded to a block, its
/// graph input and output staged through copies: the region function, its program and packed
/// bias as constants, the packed layouts of the activations and weights in `main`.
#[test]
fn golden_target_vta_conv() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::I8, vec![1, 3, 10, 10]));
    let i8s = |shape: &[usize]| {
        let n = shape.iter().product();
        Tensor::from_vec(shape, data(5, n).iter().map(|v| (v * 100.0) as i8).collect::<Vec<i8>>()).unwrap()
    };
    let w = g.add_constant("w", i8s(&[20, 3, 5, 5]));
    let zero = || Tensor::from_vec::<i8>(&[], vec![0]).unwrap();
    let (zx, zw) = (g.add_constant("zx", zero()), g.add_constant("zw", zero()));
    let b = g.add_constant("b", Tensor::from_vec(&[20, 1, 1], (0..20).collect::<Vec<i32>>()).unwrap());
    let ConvAttrs { window, .. } = match conv(5, 1, 1) {
        Op::Conv(a) => a,
        _ => unreachable!(),
    };
    let acc = g.add_op("conv", Op::ConvInteger(ConvAttrs { window, group: 1 }), &[x, w, zx, zw]).unwrap();
    let biased = g.add_op("bias", Op::Binary(BinaryOp::Add), &[acc, b]).unwrap();
    let y = g.add_op("y", Op::Requantize { shift: 6, min: 0, max: 127 }, &[biased]).unwrap();
    g.set_outputs(vec![y]);
    let model = Model::from_graph("vta_conv", g).expect("valid graph");
    let options = PipelineOptions { vta: Some(heron_runtime::HwConfig::default()), ..PipelineOptions::default() };
    let module = Pipeline::new(options).module(&model, Stage::Target).expect("target stage");
    check_golden("target_vta_conv", &module);
}

/// A MobileNet-v2 block: pointwise expansion and depthwise 3×3 (each with ReLU6), pointwise
/// projection plus the block's input. The two tensors between the convolutions are stored
/// channel-blocked (16 channels per block for AVX-512; 24 channels leave a part block); the
/// expansion reads the planar model input, the projection writes the planar output and adds
/// the planar residual, and a global average pool (generated code) reads the blocked
/// depthwise output through its index map.
#[test]
fn golden_target_blocked_layouts() {
    let mut g = Graph::new();
    let relu6 = Op::Clip {
        min: Some(Tensor::scalar_from_f64(DType::F32, 0.0)),
        max: Some(Tensor::scalar_from_f64(DType::F32, 6.0)),
    };
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 8, 10, 10]));
    let we = g.add_constant("w_expand", f32s(2, &[24, 8, 1, 1]));
    let wd = g.add_constant("w_depthwise", f32s(3, &[24, 1, 3, 3]));
    let wp = g.add_constant("w_project", f32s(4, &[8, 24, 1, 1]));
    let e = g.add_op("expand", conv(1, 0, 1), &[x, we]).unwrap();
    let e = g.add_op("expand_relu6", relu6.clone(), &[e]).unwrap();
    let d = g.add_op("depthwise", conv(3, 1, 24), &[e, wd]).unwrap();
    let d = g.add_op("depthwise_relu6", relu6, &[d]).unwrap();
    let p = g.add_op("project", conv(1, 0, 1), &[d, wp]).unwrap();
    let y = g.add_op("residual", Op::Binary(BinaryOp::Add), &[p, x]).unwrap();
    let pooled = g.add_op("pool", Op::GlobalAveragePool, &[d]).unwrap();
    g.set_outputs(vec![y, pooled]);
    golden("target_blocked_layouts", g, &[f32s(1, &[1, 8, 10, 10])]);
}

/// A ResNet stem: a 7×7 stride-2 convolution with ReLU reads the planar 3-channel input and
/// writes a channel-blocked tensor (20 channels: a part block); the 3×3 stride-2 max pool reads
/// it blocked and writes the planar output.
#[test]
fn golden_target_blocked_stem() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 3, 20, 20]));
    let w = g.add_constant("w", f32s(2, &[20, 3, 7, 7]));
    let b = g.add_constant("b", f32s(3, &[20]));
    let mut stem = conv(7, 3, 1);
    if let Op::Conv(attrs) = &mut stem {
        attrs.window.strides = vec![2, 2];
    }
    let c = g.add_op("stem", stem, &[x, w, b]).unwrap();
    let r = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[c]).unwrap();
    let mut window = Window::dense(vec![3, 3]);
    window.strides = vec![2, 2];
    window.pads_begin = vec![1, 1];
    window.pads_end = vec![1, 1];
    let pool = PoolAttrs { window, ceil_mode: false };
    let y = g.add_op("maxpool", Op::MaxPool { pool, storage_order_col_major: false }, &[r]).unwrap();
    g.set_outputs(vec![y]);
    golden("target_blocked_stem", g, &[f32s(1, &[1, 3, 20, 20])]);
}
