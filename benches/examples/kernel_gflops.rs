//! GFLOP/s of JIT-compiled kernels: a square f32 MatMul (default 1024^3) and a 3x3
//! convolution (default 64 -> 64 channels, 56x56):
//! `cargo run --release -p heron-benches --example kernel_gflops [N] [RUNS] [CHANNELS] [SIZE]`.

use std::time::Instant;

use heron_ir::{ConvAttrs, DType, Graph, Op, Tensor, TensorType, Window};
use heron_runtime::{CompileOptions, Compiler, Model};

fn filled(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..n).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect()).expect("shape")
}

/// Median seconds of `runs` runs of `g` on `inputs`.
fn time(name: &str, g: Graph, inputs: Vec<Tensor>, flops: f64, runs: usize) {
    let model = Model::from_graph(name, g).expect("valid graph");
    let compiled = Compiler::new(CompileOptions::default()).compile(&model).expect("compile");
    let mut ws = compiled.workspace();
    compiled.run_with(&mut ws, &inputs).expect("run");
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            compiled.run_with(&mut ws, &inputs).expect("run");
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!("{name}: median {:.3} ms, {:.1} GFLOP/s", median * 1e3, flops / median / 1e9);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);

    let mut g = Graph::new();
    let a = g.add_input("a", TensorType::new(DType::F32, vec![n, n]));
    let b = g.add_constant("b", filled(&[n, n]));
    let y = g.add_op("matmul", Op::MatMul, &[a, b]).expect("matmul");
    g.set_outputs(vec![y]);
    time(&format!("matmul {n}^3"), g, vec![filled(&[n, n])], 2.0 * (n * n * n) as f64, runs);

    let c: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let hw: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(56);
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, hw, hw]));
    let w = g.add_constant("w", filled(&[c, c, 3, 3]));
    let mut window = Window::dense(vec![3, 3]);
    window.pads_begin = vec![1, 1];
    window.pads_end = vec![1, 1];
    let y = g.add_op("conv", Op::Conv(ConvAttrs { window, group: 1 }), &[x, w]).expect("conv");
    g.set_outputs(vec![y]);
    let flops = 2.0 * (c * c * 9 * hw * hw) as f64;
    time(&format!("conv3x3 {c}->{c} {hw}x{hw}"), g, vec![filled(&[1, c, hw, hw])], flops, runs * 5);
}
