//! Throughput of JIT-compiled kernels: a square MatMul (default 1024^3) and a 3x3 convolution
//! (default 64 -> 64 channels, 56x56), in f32 (GFLOP/s) and as u8 x i8 integer kernels with zero
//! points (`MatMulInteger`, `ConvInteger`; GOP/s, one multiply-add counted as two operations):
//! `cargo run --release -p heron-benches --example kernel_gflops [N] [RUNS] [CHANNELS] [SIZE]`.
//! First, the precompiled f32 GEMM called directly on each ISA this CPU has, against that
//! ISA's measured FMA peak (one thread), then the precompiled convolution on the layer shapes
//! of ResNet-18 and MobileNet-v2 (one thread, the best ISA), the integer kernels, and the
//! elementwise routine on SiLU (`HERON_BENCH_ONLY=gemm|conv|int8|elementwise`: that part alone).

use std::time::Instant;

use heron_ir::{ConvAttrs, DType, Graph, Op, Tensor, TensorType, ValueId, Window};
use heron_kernels::conv::{Conv2d, ConvEpilogue, ConvMethod, conv2d_share};
use heron_kernels::{Isa, gemm, peak};
use heron_runtime::{CompileOptions, Compiler, Model};

fn filled(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..n).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect()).expect("shape")
}

fn bytes(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..n).map(|i| ((i * 7919) % 256) as u8).collect()).expect("shape")
}

fn signed_bytes(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..n).map(|i| ((i * 7919) % 256) as u8 as i8).collect()).expect("shape")
}

/// Prints the median time of `runs` runs of `g` on `inputs` and the operations per second.
fn time(name: &str, g: Graph, inputs: Vec<Tensor>, ops: f64, runs: usize, unit: &str) {
    let model = Model::from_graph(name, g).expect("valid graph");
    let compiled = Compiler::new(CompileOptions::default()).compile(&model).expect("compile");
    let mut ws = compiled.workspace().unwrap();
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
    println!("{name}: median {:.3} ms, {:.1} {unit}", median * 1e3, ops / median / 1e9);
}

/// Median seconds of `runs` calls of `f` (after one untimed call).
fn median_seconds(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A layer on a `size`² plane with a `k`×`k` window at `stride`, padded to keep the size
/// (divided by the stride).
fn square_layer(c: usize, m: usize, size: usize, k: usize, stride: usize, groups: usize) -> Conv2d {
    let out = size / stride;
    Conv2d::from_dims([1, c, size, size, m, out, out, k, k, stride, stride, 1, 1, groups, k / 2, k / 2])
}

/// The GEMM kernel on each available ISA against its FMA peak. The peak and the kernel are
/// timed alternately and compared pair by pair (the median of the pairs' ratios): on a shared
/// machine whose speed drifts, a peak measured minutes apart from the kernel says little.
fn direct_gemm(n: usize, runs: usize) {
    let values = |len: usize| (0..len).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect::<Vec<f32>>();
    let (a, b) = (values(n * n), values(n * n));
    for isa in Isa::available() {
        let iterations = 20_000_000 / if isa == Isa::Scalar { 16 } else { 1 };
        let mut packed = vec![0.0; gemm::packed_b_len(isa, n, n).expect("size")];
        gemm::pack_b(isa, &b, (n, 1), (n, n), &mut packed).expect("pack");
        let mut c = vec![0.0; n * n];
        let pairs = if isa == Isa::Scalar { 1 } else { runs.max(3) };
        let (mut peaks, mut kernels, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..pairs {
            let mut flops = 0.0;
            let peak_seconds = median_seconds(3, || flops = peak::fma_flops(isa, iterations));
            let peak = flops / peak_seconds / 1e9;
            let seconds = median_seconds(3.min(runs), || {
                gemm::sgemm(isa, (n, n, n), &a, n, &packed, &mut c, n, gemm::Epilogue::default()).expect("gemm")
            });
            let gflops = 2.0 * (n * n * n) as f64 / seconds / 1e9;
            peaks.push(peak);
            kernels.push(gflops);
            ratios.push(gflops / peak);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (peak, gflops, ratio) = (median(&mut peaks), median(&mut kernels), median(&mut ratios));
        println!(
            "kernel sgemm {n}^3 {}: median {:.3} ms, {gflops:.1} GFLOP/s = {:.0}% of the measured FMA peak {peak:.1} GFLOP/s \
             (median of {pairs} alternating peak/kernel pairs' ratios)",
            isa.name(),
            2.0 * (n * n * n) as f64 / gflops / 1e6,
            100.0 * ratio
        );
    }
}

/// The convolution kernel on typical CNN layers: `(channels in, out, size, kernel, stride,
/// depthwise)`, padded to keep the size (divided by the stride).
fn direct_convs(runs: usize) {
    let isa = Isa::detect();
    let mut flops = 0.0;
    let peak_seconds = median_seconds(5, || flops = peak::fma_flops(isa, 20_000_000));
    let peak = flops / peak_seconds / 1e9;
    let layers = [
        (64, 64, 56, 3, 1, false),
        (128, 128, 28, 3, 1, false),
        (256, 256, 14, 3, 1, false),
        (512, 512, 7, 3, 1, false),
        (64, 128, 56, 3, 2, false),
        (256, 512, 14, 1, 2, false),
        (128, 256, 28, 3, 2, false),
        (256, 512, 14, 3, 2, false),
        (64, 128, 56, 1, 2, false),
        (128, 256, 28, 1, 2, false),
        (3, 64, 224, 7, 2, false),
        (3, 32, 224, 3, 2, false),
        (32, 192, 56, 1, 1, false),
        (192, 32, 56, 1, 1, false),
        (960, 160, 7, 1, 1, false),
        (160, 960, 7, 1, 1, false),
        (576, 96, 14, 1, 1, false),
        (96, 576, 14, 1, 1, false),
        (144, 24, 56, 1, 1, false),
        (24, 144, 56, 1, 1, false),
        (192, 32, 28, 1, 1, false),
        (32, 192, 28, 1, 1, false),
        (144, 144, 56, 3, 1, true),
        (144, 144, 56, 3, 2, true),
        (960, 960, 7, 3, 1, true),
        (32, 32, 112, 3, 1, true),
        (96, 96, 112, 3, 2, true),
        (192, 192, 28, 3, 1, true),
        (192, 192, 28, 3, 2, true),
        (384, 384, 14, 3, 1, true),
        (576, 576, 14, 3, 2, true),
    ];
    for (c, m, size, k, stride, depthwise) in layers {
        let out = size / stride;
        let geo = square_layer(c, m, size, k, stride, if depthwise { c } else { 1 });
        let values = |len: usize| (0..len).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect::<Vec<f32>>();
        let (x, w) = (values(geo.input_len().expect("size")), values(geo.weights_len().expect("size")));
        let mut packed = vec![0.0; geo.packed_weights_len(isa).expect("size")];
        geo.pack_weights(isa, &w, &mut packed).expect("pack");
        let mut scratch = vec![0.0; geo.scratch_len(isa).expect("size")];
        let mut y = vec![0.0; geo.output_len().expect("size")];
        let bias = values(m);
        let epilogue = relu(&bias);
        let seconds = median_seconds(runs, || {
            conv2d_share(isa, &geo, &x, &packed, &mut y, epilogue, &mut scratch, (0, 1)).expect("conv")
        });
        let gflops = 2.0 * (m * out * out * (c / geo.groups) * k * k) as f64 / seconds / 1e9;
        // Winograd does fewer multiplies than it is credited with here: its figure is the
        // direct convolution's FLOPs over its time, and may pass the peak.
        println!(
            "kernel conv {k}x{k}/{stride} {c}->{m} {size}x{size} ({}) {}: median {:.3} ms, {gflops:.1} GFLOP/s{} = {:.0}% of peak {peak:.1}",
            geo.method(isa).name(),
            isa.name(),
            seconds * 1e3,
            if geo.method(isa) == ConvMethod::Winograd { " (direct-equivalent)" } else { "" },
            100.0 * gflops / peak
        );
    }
}

/// The convolutions over channel-blocked tensors (`heron_kernels::blocked`, the layout the CPU
/// target stores activations between convolutions in) on ResNet and MobileNet layer shapes
/// (one thread, the best ISA, blocked input and output; a 3-channel first layer reads planar
/// input), against the ISA's measured FMA peak.
fn blocked_convs(runs: usize) {
    use heron_kernels::blocked::{BlockedConv, Layout, block_for, conv_share};
    let isa = Isa::detect();
    let mut flops = 0.0;
    let peak_seconds = median_seconds(5, || flops = peak::fma_flops(isa, 20_000_000));
    let peak = flops / peak_seconds / 1e9;
    let layers = [
        (3, 64, 224, 7, 2, false),
        (3, 32, 224, 3, 2, false),
        (64, 128, 56, 3, 2, false),
        (128, 256, 28, 3, 2, false),
        (64, 64, 56, 3, 1, false),
        (32, 192, 56, 1, 1, false),
        (192, 32, 56, 1, 1, false),
        (144, 24, 56, 1, 1, false),
        (24, 144, 56, 1, 1, false),
        (96, 576, 14, 1, 1, false),
        (576, 96, 14, 1, 1, false),
        (960, 160, 7, 1, 1, false),
        (160, 960, 7, 1, 1, false),
        (144, 144, 56, 3, 1, true),
        (96, 96, 112, 3, 2, true),
        (384, 384, 14, 3, 1, true),
        (960, 960, 7, 3, 1, true),
    ];
    for (c, m, size, k, stride, depthwise) in layers {
        let out = size / stride;
        let geo = square_layer(c, m, size, k, stride, if depthwise { c } else { 1 });
        let input = if c < 4 { Layout::Planar } else { Layout::Blocked };
        let conv = BlockedConv { geo, block: block_for(isa), input, output: Layout::Blocked };
        let values = |len: usize| (0..len).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect::<Vec<f32>>();
        let (x, w) = (values(conv.input_len().expect("size")), values(geo.weights_len().expect("size")));
        let mut packed = vec![0.0; conv.packed_weights_len().expect("size")];
        conv.pack_weights(&w, &mut packed).expect("pack");
        let mut y = vec![0.0; conv.output_len().expect("size")];
        let bias = values(m);
        let epilogue = relu(&bias);
        let mut scratch = vec![0.0; conv.scratch_len().expect("size")];
        let seconds = median_seconds(runs, || {
            conv_share(isa, &conv, &x, &packed, &mut y, epilogue, &mut scratch, (0, 1)).expect("conv")
        });
        let gflops = 2.0 * (m * out * out * (c / geo.groups) * k * k) as f64 / seconds / 1e9;
        println!(
            "kernel blocked conv {k}x{k}/{stride} {c}->{m} {size}x{size}{} nchw{}c {}: median {:.3} ms, {gflops:.1} GFLOP/s = {:.0}% of peak {peak:.1}",
            if depthwise { " depthwise" } else { "" },
            conv.block,
            isa.name(),
            seconds * 1e3,
            100.0 * gflops / peak
        );
    }
}

/// The integer kernels (u8 input with zero point 128, i8 weights with 0) on each variant this
/// CPU has, against that variant's measured multiply-accumulate peak: a GEMM `n^3` and
/// ResNet-shaped convolutions (one thread).
fn direct_int8(n: usize, runs: usize) {
    use heron_kernels::qgemm::{self, Bytes, Int8Isa};
    let bytes = |len: usize| (0..len).map(|i| ((i * 7919) % 256) as u8).collect::<Vec<u8>>();
    for isa in [Int8Isa::Vnni512, Int8Isa::Avx2].into_iter().filter(|i| i.is_available()) {
        let mut ops = 0.0;
        let peak_seconds = median_seconds(5, || ops = peak::int8_ops(isa, 20_000_000));
        let peak = ops / peak_seconds / 1e9;
        let report = |what: String, seconds: f64, work: f64| {
            let gops = work / seconds / 1e9;
            println!(
                "kernel {what} {}: median {:.3} ms, {gops:.1} GOP/s = {:.0}% of the measured peak {peak:.1} GOP/s",
                isa.name(),
                seconds * 1e3,
                100.0 * gops / peak
            );
        };
        let (a, b) = (bytes(n * n), bytes(n * n));
        let mut packed = vec![0; qgemm::packed_b_len(isa, n, n).expect("size")];
        let weights = Bytes { data: &b, signed: true, zero: &[0] };
        qgemm::pack_b(isa, weights, (n, 1), (n, n), &mut packed).expect("pack");
        let mut c = vec![0; n * n];
        let mut scratch = vec![0; qgemm::gemm_scratch_len(isa, n).expect("size")];
        let input = Bytes { data: &a, signed: false, zero: &[128] };
        let seconds = median_seconds(runs, || {
            qgemm::gemm_share(isa, (n, n, n), input, &packed, &mut c, &mut scratch, (0, 1)).expect("gemm")
        });
        report(format!("u8 x i8 gemm {n}^3"), seconds, 2.0 * (n * n * n) as f64);
        for (ch, m, size, k, stride) in [
            (64, 64, 56, 3, 1),
            (128, 128, 28, 3, 1),
            (256, 256, 14, 3, 1),
            (512, 512, 7, 3, 1),
            (64, 128, 56, 1, 2),
            (256, 64, 56, 1, 1),
        ] {
            let out = size / stride;
            let geo = square_layer(ch, m, size, k, stride, 1);
            let (x, w) = (bytes(geo.input_len().expect("size")), bytes(geo.weights_len().expect("size")));
            let mut packed = vec![0; qgemm::conv_packed_weights_len(isa, &geo).expect("size")];
            qgemm::conv_pack_weights(isa, &geo, Bytes { data: &w, signed: true, zero: &[0] }, &mut packed)
                .expect("pack");
            let mut scratch = vec![0; qgemm::conv_scratch_len(isa, &geo).expect("size")];
            let mut y = vec![0; geo.output_len().expect("size")];
            let input = Bytes { data: &x, signed: false, zero: &[128] };
            let seconds = median_seconds(runs * 5, || {
                qgemm::conv_share(isa, &geo, input, &packed, &mut y, &mut scratch, (0, 1)).expect("conv")
            });
            let work = 2.0 * (m * out * out * ch * k * k) as f64;
            report(format!("u8 x i8 conv {k}x{k}/{stride} {ch}->{m} {size}x{size}"), seconds, work);
        }
    }
}

/// SiLU (`x · sigmoid(x)`) on a MobileNet-sized activation (96 × 112 × 112) by the elementwise
/// routine on each ISA this CPU has (one thread), in elements per nanosecond.
fn elementwise(runs: usize) {
    use heron_kernels::elementwise::{MapOp, Operand, Program, map_share};
    let n = 96 * 112 * 112;
    let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 2001) as f32 / 100.0 - 10.0).collect();
    let mut y = vec![0.0; n];
    let silu = Program::new(&[MapOp::Input(0), MapOp::Input(0), MapOp::Sigmoid, MapOp::Mul], &[]).expect("program");
    for isa in Isa::available() {
        let seconds = median_seconds(runs, || {
            map_share(isa, &silu, &[(&x, Operand::Full)], &mut y, (1, n), (0, 1)).expect("map")
        });
        println!(
            "kernel silu {n} elements {}: median {:.3} ms, {:.2} elements/ns",
            isa.name(),
            seconds * 1e3,
            n as f64 / seconds / 1e9
        );
    }
}

/// The zero points of an integer kernel: the input's 128 (u8), the weights' 0 (i8).
fn zero_points(g: &mut Graph) -> (ValueId, ValueId) {
    let zx = g.add_constant("zx", Tensor::from_vec::<u8>(&[], vec![128]).expect("scalar"));
    let zw = g.add_constant("zw", Tensor::from_vec::<i8>(&[], vec![0]).expect("scalar"));
    (zx, zw)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let c: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let hw: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(56);
    let mut window = Window::dense(vec![3, 3]);
    window.pads_begin = vec![1, 1];
    window.pads_end = vec![1, 1];
    let conv = Op::Conv(ConvAttrs { window: window.clone(), group: 1 });
    // HERON_BENCH_ONLY=gemm|conv|blocked|int8|elementwise runs that section of the kernels
    // alone.
    let only = std::env::var("HERON_BENCH_ONLY").ok();
    let run = |section: &str| only.as_deref().is_none_or(|o| o == section);
    if run("gemm") {
        direct_gemm(n, runs);
    }
    if run("conv") {
        direct_convs(runs * 5);
    }
    if run("blocked") {
        blocked_convs(runs * 5);
    }
    if run("int8") {
        direct_int8(n, runs);
    }
    if run("elementwise") {
        elementwise(runs);
    }
    if only.is_some() {
        return;
    }
    let conv_ops = 2.0 * (c * c * 9 * hw * hw) as f64;
    let matmul_ops = 2.0 * (n * n * n) as f64;

    let mut g = Graph::new();
    let a = g.add_input("a", TensorType::new(DType::F32, vec![n, n]));
    let b = g.add_constant("b", filled(&[n, n]));
    let y = g.add_op("matmul", Op::MatMul, &[a, b]).expect("matmul");
    g.set_outputs(vec![y]);
    time(&format!("f32 matmul {n}^3"), g, vec![filled(&[n, n])], matmul_ops, runs, "GFLOP/s");

    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, hw, hw]));
    let w = g.add_constant("w", filled(&[c, c, 3, 3]));
    let y = g.add_op("conv", conv, &[x, w]).expect("conv");
    g.set_outputs(vec![y]);
    time(&format!("f32 conv3x3 {c}->{c} {hw}x{hw}"), g, vec![filled(&[1, c, hw, hw])], conv_ops, runs * 5, "GFLOP/s");

    let mut g = Graph::new();
    let a = g.add_input("a", TensorType::new(DType::U8, vec![n, n]));
    let b = g.add_constant("b", signed_bytes(&[n, n]));
    let (za, zb) = zero_points(&mut g);
    let y = g.add_op("matmul", Op::MatMulInteger, &[a, b, za, zb]).expect("matmul");
    g.set_outputs(vec![y]);
    time(&format!("u8 x i8 matmul {n}^3"), g, vec![bytes(&[n, n])], matmul_ops, runs, "GOP/s");

    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::U8, vec![1, c, hw, hw]));
    let w = g.add_constant("w", signed_bytes(&[c, c, 3, 3]));
    let (zx, zw) = zero_points(&mut g);
    let y = g.add_op("conv", Op::ConvInteger(ConvAttrs { window, group: 1 }), &[x, w, zx, zw]).expect("conv");
    g.set_outputs(vec![y]);
    time(&format!("u8 x i8 conv3x3 {c}->{c} {hw}x{hw}"), g, vec![bytes(&[1, c, hw, hw])], conv_ops, runs * 5, "GOP/s");
}

/// A bias and ReLU, the epilogue every timed convolution takes.
fn relu(bias: &[f32]) -> ConvEpilogue<'_> {
    ConvEpilogue { bias: Some(bias), residual: None, clamp: Some((0.0, f32::INFINITY)), activation: None, tail: None }
}
