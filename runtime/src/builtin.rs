//! The built-in default model: a small CNN classifier with deterministic weights, built in code,
//! and a generated input image — so `heron run` works on a fresh machine with no files.

use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, GraphError, Op, PoolAttrs, Tensor, TensorType, UnaryOp, Window};

/// Name of the built-in model, as shown by the CLI.
pub const BUILTIN_NAME: &str = "builtin-cnn";

/// Deterministic pseudo-random numbers (xorshift64*), uniform in [-1, 1).
struct Weights(u64);

impl Weights {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (bits as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// `shape`-sized tensor scaled by `scale` (He-style scaling keeps activations bounded).
    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        let data = (0..n).map(|_| self.next() * scale).collect();
        Tensor::from_vec::<f32>(shape, data).expect("shape matches data")
    }
}

fn conv(k: usize, stride: usize, pad: usize, group: usize) -> Op {
    let window = Window {
        kernel: vec![k, k],
        strides: vec![stride, stride],
        dilations: vec![1, 1],
        pads_begin: vec![pad, pad],
        pads_end: vec![pad, pad],
    };
    Op::Conv(ConvAttrs { window, group })
}

/// A 10-class classifier for a 1x3x32x32 image: conv+BN+relu, a depthwise-separable block with
/// relu6 clipping, a residual add, max pooling, global average pooling and a dense head.
pub fn builtin_model() -> Result<Graph, GraphError> {
    let mut w = Weights(0x5EED_1234_ABCD_0001);
    let mut g = Graph::new();
    let x = g.add_input("image", TensorType::new(DType::F32, vec![1, 3, 32, 32]));

    let w1 = g.add_constant("conv1.weight", w.tensor(&[16, 3, 3, 3], 0.4));
    let b1 = g.add_constant("conv1.bias", w.tensor(&[16], 0.1));
    let c1 = g.add_op("conv1", conv(3, 1, 1, 1), &[x, w1, b1])?;
    let bn = [
        g.add_constant(
            "bn1.scale",
            Tensor::from_vec::<f32>(&[16], (0..16).map(|i| 0.8 + 0.02 * i as f32).collect()).expect("16"),
        ),
        g.add_constant("bn1.bias", w.tensor(&[16], 0.1)),
        g.add_constant("bn1.mean", w.tensor(&[16], 0.05)),
        g.add_constant(
            "bn1.var",
            Tensor::from_vec::<f32>(&[16], (0..16).map(|i| 0.5 + 0.05 * i as f32).collect()).expect("16"),
        ),
    ];
    let n1 = g.add_op("bn1", Op::BatchNormalization { epsilon: 1e-5 }, &[c1, bn[0], bn[1], bn[2], bn[3]])?;
    let r1 = g.add_op("relu1", Op::Unary(UnaryOp::Relu), &[n1])?;
    let mut window = Window::dense(vec![2, 2]);
    window.strides = vec![2, 2];
    let pool = PoolAttrs { window, ceil_mode: false };
    let p1 = g.add_op("pool1", Op::MaxPool { pool, storage_order_col_major: false }, &[r1])?;

    let wd = g.add_constant("dw.weight", w.tensor(&[16, 1, 3, 3], 0.5));
    let d = g.add_op("dw", conv(3, 1, 1, 16), &[p1, wd])?;
    let hi = g.add_constant("relu6.max", Tensor::scalar_from_f64(DType::F32, 6.0));
    let lo = g.add_constant("relu6.min", Tensor::scalar_from_f64(DType::F32, 0.0));
    let clip = |g: &Graph| Op::Clip { min: g.constant(lo).cloned(), max: g.constant(hi).cloned() };
    let op = clip(&g);
    let d = g.add_op("dw.relu6", op, &[d])?;
    let wp = g.add_constant("pw.weight", w.tensor(&[16, 16, 1, 1], 0.35));
    let bp = g.add_constant("pw.bias", w.tensor(&[16], 0.05));
    let pw = g.add_op("pw", conv(1, 1, 0, 1), &[d, wp, bp])?;
    let res = g.add_op("residual", Op::Binary(BinaryOp::Add), &[pw, p1])?;
    let op = clip(&g);
    let res = g.add_op("residual.relu6", op, &[res])?;

    let w2 = g.add_constant("conv2.weight", w.tensor(&[32, 16, 3, 3], 0.12));
    let b2 = g.add_constant("conv2.bias", w.tensor(&[32], 0.05));
    let c2 = g.add_op("conv2", conv(3, 2, 1, 1), &[res, w2, b2])?;
    let r2 = g.add_op("relu2", Op::Unary(UnaryOp::Relu), &[c2])?;
    let gap = g.add_op("gap", Op::GlobalAveragePool, &[r2])?;
    let flat = g.add_op("flatten", Op::Flatten { axis: 1 }, &[gap])?;
    let wf = g.add_constant("fc.weight", w.tensor(&[10, 32], 0.4));
    let bf = g.add_constant("fc.bias", w.tensor(&[10], 0.1));
    let fc = g.add_op("fc", Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true }, &[flat, wf, bf])?;
    let probs = g.add_op("probabilities", Op::Softmax { axis: 1, coerce_2d: false, log: false }, &[fc])?;
    g.set_outputs(vec![probs]);
    Ok(g)
}

/// The generated input: a smooth colour gradient with a bright diagonal stripe.
pub fn builtin_input() -> Tensor {
    let mut data = Vec::with_capacity(3 * 32 * 32);
    for c in 0..3 {
        for y in 0..32 {
            for x in 0..32 {
                let base = (x as f32 / 31.0) * (1.0 - c as f32 * 0.3) + (y as f32 / 31.0) * (c as f32 * 0.3);
                let stripe = if (x + y) % 16 < 3 { 1.0 } else { 0.0 };
                data.push(base + stripe - 0.5);
            }
        }
    }
    Tensor::from_vec::<f32>(&[1, 3, 32, 32], data).expect("1x3x32x32")
}
