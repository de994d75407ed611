//! Golden tests of the lowering: each small graph's lowered program (constants elided) must equal
//! `ir/tests/golden/<name>.heron`. Set `HERON_BLESS=1` to rewrite the expected files after an
//! intended change, and review the diff.

use std::path::PathBuf;

use heron_ir::loop_ir::print::{ConstData, print_module};
use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, PoolAttrs, Tensor, TensorType, UnaryOp, Window, lower};

fn golden(name: &str, graph: &Graph) {
    heron_ir::verify(graph).unwrap();
    let module = lower::lower(graph).unwrap();
    let text = print_module(&module, ConstData::Elided);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.heron"));
    if std::env::var_os("HERON_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with HERON_BLESS=1 to create it)", path.display()));
    assert!(text == want, "lowering of {name} changed; run with HERON_BLESS=1 to accept:\n{text}");
}

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::zeros(&TensorType::new(DType::F32, shape.to_vec()))
}

fn conv_attrs(k: usize, stride: usize, pad: usize, group: usize) -> ConvAttrs {
    let mut window = Window::dense(vec![k, k]);
    window.strides = vec![stride; 2];
    window.pads_begin = vec![pad; 2];
    window.pads_end = vec![pad; 2];
    ConvAttrs { window, group }
}

#[test]
fn golden_conv2d() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 8, 6, 6]));
    let w = g.add_constant("w", zeros(&[4, 8, 3, 3]));
    let b = g.add_constant("b", zeros(&[4]));
    let y = g.add_op("conv", Op::Conv(conv_attrs(3, 2, 1, 1)), &[x, w, b]).unwrap();
    g.set_outputs(vec![y]);
    golden("conv2d", &g);
}

#[test]
fn golden_depthwise_conv2d() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 4, 5, 5]));
    let w = g.add_constant("w", zeros(&[4, 1, 3, 3]));
    let y = g.add_op("dw", Op::Conv(conv_attrs(3, 1, 1, 4)), &[x, w]).unwrap();
    g.set_outputs(vec![y]);
    golden("depthwise_conv2d", &g);
}

#[test]
fn golden_dense() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![2, 16]));
    let w = g.add_constant("w", zeros(&[10, 16]));
    let b = g.add_constant("b", zeros(&[10]));
    let y = g.add_op("dense", Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true }, &[x, w, b]).unwrap();
    let r = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[y]).unwrap();
    g.set_outputs(vec![r]);
    golden("dense", &g);
}

#[test]
fn golden_pooling() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 2, 7, 7]));
    let mut window = Window::dense(vec![3, 3]);
    window.strides = vec![2, 2];
    window.pads_begin = vec![1, 1];
    window.pads_end = vec![1, 1];
    let pool = PoolAttrs { window, ceil_mode: true };
    let m = g.add_op("maxpool", Op::MaxPool { pool: pool.clone(), storage_order_col_major: false }, &[x]).unwrap();
    let a = g.add_op("avgpool", Op::AveragePool { pool, count_include_pad: true }, &[m]).unwrap();
    let gap = g.add_op("gap", Op::GlobalAveragePool, &[a]).unwrap();
    g.set_outputs(vec![gap]);
    golden("pooling", &g);
}

#[test]
fn golden_fused_conv_relu() {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 3, 4, 4]));
    let w = g.add_constant("w", zeros(&[2, 3, 1, 1]));
    let bias = g.add_constant("bias", zeros(&[1, 2, 1, 1]));
    let skip = g.add_input("skip", TensorType::new(DType::F32, vec![1, 2, 4, 4]));
    let c = g.add_op("conv", Op::Conv(conv_attrs(1, 1, 0, 1)), &[x, w]).unwrap();
    let cb = g.add_op("bias_add", Op::Binary(BinaryOp::Add), &[c, bias]).unwrap();
    let r = g.add_op("residual", Op::Binary(BinaryOp::Add), &[skip, cb]).unwrap();
    let y = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[r]).unwrap();
    g.set_outputs(vec![y]);
    golden("fused_conv_relu", &g);
}
