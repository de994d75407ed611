//! The CPU target's precompiled kernels on whole models: with kernels on (the default), the
//! reference models still match ONNX Runtime's outputs, give the same bits on one and two
//! threads, and the target stage shows the kernel calls; with kernels off, no call is left and
//! the generated code matches too.

use heron_ir::npy::read_npy;
use heron_ir::testing::{assert_float_rule, shared_dir};
use heron_jit::kernels::KernelConfig;
use heron_kernels::abi::flags;
use heron_runtime::pipeline::{Pipeline, PipelineOptions, Stage};
use heron_runtime::{CompileOptions, Compiler, Model};

/// The model's module at the target stage with these kernels, and its text.
fn target_stage(model: &Model, kernels: Option<KernelConfig>) -> (heron_ir::loop_ir::Module, String) {
    let options = PipelineOptions { kernels, ..PipelineOptions::default() };
    let module = Pipeline::new(options).module(model, Stage::Target).expect("target stage");
    let text = heron_ir::loop_ir::print::print_module(&module, heron_ir::loop_ir::print::ConstData::Elided);
    (module, text)
}

fn kernel_calls(model: &Model, kernels: Option<KernelConfig>) -> usize {
    target_stage(model, kernels).1.matches("call extern \"heron_").count()
}

#[test]
fn reference_models_match_with_kernels_on_and_off() {
    let dir = shared_dir().join("reference");
    let expected_calls = [("mlp", 4), ("lenet", 7), ("mobilenet_ish", 14), ("resnet18", 22), ("mobilenet_v2", 53)];
    for (name, calls) in expected_calls {
        let model = Model::load(dir.join(format!("{name}.onnx"))).expect("model");
        let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
        let want = read_npy(&dir.join(format!("{name}.ref.npy"))).expect("reference output");
        let config = KernelConfig::host(2);
        if config.is_some() {
            assert_eq!(kernel_calls(&model, config), calls, "{name}: kernel calls at the target stage");
        }
        assert_eq!(kernel_calls(&model, None), 0, "{name}: kernels off");
        let run = |kernels: bool, threads: usize| {
            let options = CompileOptions { kernels, threads, ..CompileOptions::default() };
            let compiled = Compiler::new(options).compile(&model).expect("compile");
            compiled.run(std::slice::from_ref(&input)).expect("run").remove(0)
        };
        let (one, two) = (run(true, 1), run(true, 2));
        assert_eq!(one, two, "{name}: kernels give different bits on one and two threads");
        assert_float_rule(&one, &want).unwrap_or_else(|e| panic!("{name} with kernels: {e}"));
        assert_float_rule(&run(false, 1), &want).unwrap_or_else(|e| panic!("{name} without kernels: {e}"));
    }
}

/// A depthwise 5x5 window padded by 2 on a 7x7 plane (EfficientNet's last stages; the padded
/// copy is 2.5x the input) runs as a kernel; a padding far larger than the plane keeps guarded
/// generated code (no scratch dwarfing the tensors). Both match the interpreter.
#[test]
fn small_planes_with_wide_padding() {
    use heron_ir::{ConvAttrs, DType, Graph, Op, Tensor, TensorType, Window};
    let c = 256;
    for (pad, calls) in [(2, 1), (9, 0)] {
        let mut window = Window::dense(vec![5, 5]);
        window.pads_begin = vec![pad, pad];
        window.pads_end = vec![pad, pad];
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, 7, 7]));
        let values = |n: usize, seed: usize| (0..n).map(|i| ((i * 7919 + seed) % 997) as f32 / 997.0 - 0.5).collect();
        let w = g.add_constant("w", Tensor::from_vec(&[c, 1, 5, 5], values(c * 25, 1)).expect("weights"));
        let y = g.add_op("dw", Op::Conv(ConvAttrs { window, group: c }), &[x, w]).expect("conv");
        g.set_outputs(vec![y]);
        let model = Model::from_graph("dw", g).expect("model");
        if KernelConfig::host(1).is_some() {
            assert_eq!(kernel_calls(&model, KernelConfig::host(1)), calls, "pad {pad}");
        }
        let input = Tensor::from_vec(&[1, c, 7, 7], values(c * 49, 2)).expect("input");
        let want = model.run_interpreter(std::slice::from_ref(&input)).expect("interpreter").remove(0);
        let got = Compiler::new(CompileOptions::default()).compile(&model).expect("compile");
        let got = got.run(std::slice::from_ref(&input)).expect("run").remove(0);
        assert_float_rule(&got, &want).unwrap_or_else(|e| panic!("pad {pad}: {e}"));
    }
}

/// Padding only after each axis (TensorFlow's "SAME" at stride 2: pads 0 before, 1 after), and
/// a ResNet stage over a 1×1 plane (its 3×3 taps trimmed to the centre by the graph passes):
/// every convolution runs as a kernel reading its input directly, no padded copy left in
/// generated code, and the model matches the interpreter on 1 and 2 threads.
#[test]
fn end_only_padding_and_trimmed_taps_run_as_kernels() {
    use heron_ir::{ConvAttrs, DType, Graph, Op, Tensor, TensorType, UnaryOp, Window};
    let (c, size) = (64, 8);
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, size, size]));
    let conv = |g: &mut Graph, name: &str, v, group: usize, stride: usize, pads: [usize; 2], seed: usize| {
        let w = g.add_constant(
            format!("{name}_w"),
            Tensor::from_vec(&[c, c / group, 3, 3], values(c * c / group * 9, seed)).unwrap(),
        );
        let mut window = Window::dense(vec![3, 3]);
        window.strides = vec![stride, stride];
        window.pads_begin = vec![pads[0]; 2];
        window.pads_end = vec![pads[1]; 2];
        let y = g.add_op(name, Op::Conv(ConvAttrs { window, group }), &[v, w]).unwrap();
        g.add_op(format!("{name}_relu"), Op::Unary(UnaryOp::Relu), &[y]).unwrap()
    };
    // 8×8 → 4×4 → 2×2 → 1×1, then two 3×3 layers over the single pixel.
    let mut v = conv(&mut g, "same_dense", x, 1, 2, [0, 1], 1);
    v = conv(&mut g, "same_depthwise", v, c, 2, [0, 1], 2);
    v = conv(&mut g, "same_dense_2", v, 1, 2, [0, 1], 3);
    v = conv(&mut g, "one_pixel", v, 1, 1, [1, 1], 4);
    v = conv(&mut g, "one_pixel_depthwise", v, c, 1, [1, 1], 5);
    g.set_outputs(vec![v]);
    let model = Model::from_graph("same_padding", g).expect("model");
    if let Some(config) = KernelConfig::host(1) {
        let (_, text) = target_stage(&model, Some(config));
        assert_eq!(kernel_calls(&model, Some(config)), 5, "{text}");
        assert!(!text.contains("%pad"), "no padded copy is left:\n{text}");
        assert!(text.contains("one_pixel:trimmed_weight"), "the 1×1 plane's taps are trimmed:\n{text}");
    }
    let input = Tensor::from_vec(&[1, c, size, size], values(c * size * size, 6)).expect("input");
    agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, "end-only padding");
}

/// EfficientNet's block tail: SiLU (`x · sigmoid(x)`) after a planar convolution runs inside
/// its kernel (the call's SiLU flag); the squeeze-excitation gate after it (`x ·
/// sigmoid(mean(x))`, its sigmoid fused into the mean, the scale plain arithmetic) stays
/// generated code. The model matches the interpreter on 1 and 2 threads, with values past
/// `exp`'s range, infinities and NaN among the inputs.
#[test]
fn silu_after_a_planar_convolution_runs_in_its_kernel() {
    use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, UnaryOp, Window};
    let (c, size) = (24, 9);
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, size, size]));
    let w = g.add_constant("w", Tensor::from_vec(&[c, c, 1, 1], values(c * c, 1)).expect("weights"));
    let y =
        g.add_op("conv", Op::Conv(ConvAttrs { window: Window::dense(vec![1, 1]), group: 1 }), &[x, w]).expect("conv");
    let s = g.add_op("sigmoid", Op::Unary(UnaryOp::Sigmoid), &[y]).expect("sigmoid");
    let silu = g.add_op("silu", Op::Binary(BinaryOp::Mul), &[y, s]).expect("mul");
    let mean = g.add_op("mean", Op::GlobalAveragePool, &[silu]).expect("mean");
    let gate = g.add_op("gate", Op::Unary(UnaryOp::Sigmoid), &[mean]).expect("gate");
    let out = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[silu, gate]).expect("scale");
    // SiLU's output too: the NaN input makes every channel's mean NaN.
    g.set_outputs(vec![silu, out]);
    let model = Model::from_graph("silu_se", g).expect("model");
    if KernelConfig::host(1).is_some() {
        let (_, text) = target_stage(&model, KernelConfig::host(1));
        assert_eq!(planar_conv_flags(&text), [flags::SILU], "SiLU runs in the kernel:\n{text}");
        assert!(!text.contains("heron_map_f32"), "{text}");
    }
    let mut input = values(c * size * size, 2).into_iter().map(|v| v * 400.0).collect::<Vec<f32>>();
    input[5] = f32::INFINITY;
    input[17] = f32::NEG_INFINITY;
    input[40] = f32::NAN;
    let input = Tensor::from_vec(&[1, c, size, size], input).expect("input");
    let want = model.run_interpreter(std::slice::from_ref(&input)).expect("interpreter");
    for threads in [1, 2] {
        let compiled =
            Compiler::new(CompileOptions { threads, ..CompileOptions::default() }).compile(&model).expect("compile");
        let got = compiled.run(std::slice::from_ref(&input)).expect("run");
        for (k, (got, want)) in got.iter().zip(&want).enumerate() {
            heron_ir::testing::assert_engines_agree(got, want)
                .unwrap_or_else(|e| panic!("output {k}, {threads} threads: {e}"));
        }
    }
}

/// The planar convolutions' calls' flags, in order (the 24th argument of
/// `heron_conv2d_f32_v4`), activation bits only.
fn planar_conv_flags(text: &str) -> Vec<i64> {
    let activations = flags::KNOWN & !(flags::BIAS | flags::RESIDUAL | flags::CLAMP);
    text.split("call extern \"heron_conv2d_f32_v4\"(")
        .skip(1)
        .map(|call| call.split(", ").nth(23).and_then(|f| f.parse::<i64>().ok()).expect("flags") & activations)
        .collect()
}

/// Activations after planar convolutions run inside the kernel, swept over each run of
/// results just stored: of a residual sum after a 3×3 convolution (Winograd; SiLU reads the
/// sum twice, `e = conv + r; out = e · sigmoid(e)`, lowered with a `let`), and after a strided
/// 1×1 (the GEMM form) and a depthwise 3×3 (planar: its input is the Winograd layer's). The
/// kernels add the residual themselves (the call's fourth argument); no generated loop nor
/// elementwise pass is left, and the model matches the interpreter on 1 and 2 threads.
#[test]
fn activations_after_planar_convolutions_run_in_the_kernel() {
    use heron_ir::op::Activation;
    use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, UnaryOp, ValueId, Window};
    let (c, size) = (32, 7);
    let one = |op: Op| move |g: &mut Graph, name: String, v: ValueId| g.add_op(name, op.clone(), &[v]).unwrap();
    let silu = |g: &mut Graph, name: String, v: ValueId| {
        let s = g.add_op(format!("{name}_sigmoid"), Op::Unary(UnaryOp::Sigmoid), &[v]).unwrap();
        g.add_op(name, Op::Binary(BinaryOp::Mul), &[v, s]).unwrap()
    };
    let gelu = |g: &mut Graph, name: String, v: ValueId| exported_gelu(g, &name, v);
    type Build = Box<dyn Fn(&mut Graph, String, ValueId) -> ValueId>;
    let activations: [(&str, Build, i64); 5] = [
        ("SiLU", Box::new(silu), flags::SILU),
        ("Tanh", Box::new(one(Op::Unary(UnaryOp::Tanh))), flags::TANH),
        ("LeakyRelu", Box::new(one(Op::LeakyRelu { alpha: 0.1 })), flags::LEAKY_RELU),
        (
            "HardSigmoid",
            Box::new(one(Op::Activation(Activation::HardSigmoid { alpha: 0.2, beta: 0.5 }))),
            flags::HARD_SIGMOID,
        ),
        ("GELU", Box::new(gelu), flags::GELU),
    ];
    let conv = |g: &mut Graph, name: &str, v: ValueId, (m, size, stride, group): (usize, usize, usize, usize)| {
        let mut window = Window::dense(vec![size, size]);
        window.strides = vec![stride, stride];
        window.pads_begin = vec![size / 2; 2];
        window.pads_end = vec![size / 2; 2];
        let shape = [m, c / group, size, size];
        let w =
            g.add_constant(format!("{name}_w"), Tensor::from_vec(&shape, values(shape.iter().product(), m)).unwrap());
        g.add_op(name, Op::Conv(ConvAttrs { window, group }), &[v, w]).unwrap()
    };
    for (name, activation, flag) in activations {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, size, size]));
        let y = conv(&mut g, "winograd", x, (c, 3, 1, 1));
        let sum = g.add_op("sum", Op::Binary(BinaryOp::Add), &[y, x]).unwrap();
        let a = activation(&mut g, "act0".into(), sum);
        let d = conv(&mut g, "depthwise", a, (c, 3, 1, c));
        let d = activation(&mut g, "act1".into(), d);
        let p = conv(&mut g, "strided", d, (c, 1, 2, 1));
        let out = activation(&mut g, "act2".into(), p);
        g.set_outputs(vec![a, out]);
        let model = Model::from_graph("planar_activations", g).expect("model");
        if KernelConfig::host(1).is_some() {
            let (_, text) = target_stage(&model, KernelConfig::host(1));
            assert_eq!(planar_conv_flags(&text), [flag; 3], "{name}:\n{text}");
            let call =
                text.lines().find(|l| l.contains("call extern \"heron_conv2d")).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(call.split(", ").nth(3), Some("%x"), "the kernel adds the residual:\n{text}");
            assert!(!text.contains("heron_map_f32") && !text.contains("for %o"), "{name}: a pass is left:\n{text}");
        }
        // Large values saturate the activations. (No infinities: Winograd's transforms take
        // differences of inputs, so an infinite one gives NaN where the direct sum gives ±inf.)
        let input = values(c * size * size, 4).into_iter().map(|v| v * 40.0).collect::<Vec<f32>>();
        let input = Tensor::from_vec(&[1, c, size, size], input).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, name);
    }
}

/// A strided 3×3 between Winograd layers (whose tensors stay planar) runs the blocked kernel
/// reading and writing planar tensors, with its shortcut's residual added in the kernel and a
/// PReLU (per-channel slope) as its tail program; it matches the interpreter on 1 and 2
/// threads. With fewer output channels than three quarters of a block it keeps a planar form.
#[test]
fn strided_convolutions_between_planar_tensors_run_blocked() {
    use heron_ir::{BinaryOp, CompareOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, Window};
    for c in [32, 4] {
        let size = 16;
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, size, size]));
        let conv = |g: &mut Graph, name: &str, v, k: usize, stride: usize, seed: usize| {
            let w = g.add_constant(
                format!("{name}_w"),
                Tensor::from_vec(&[c, c, k, k], values(c * c * k * k, seed)).unwrap(),
            );
            let mut window = Window::dense(vec![k, k]);
            window.strides = vec![stride, stride];
            window.pads_begin = vec![k / 2, k / 2];
            window.pads_end = vec![k / 2, k / 2];
            g.add_op(name, Op::Conv(ConvAttrs { window, group: 1 }), &[v, w]).unwrap()
        };
        let a = conv(&mut g, "winograd_in", x, 3, 1, 1);
        // The shortcut first: the sum fuses into the convolution computed last.
        let shortcut = conv(&mut g, "shortcut", a, 1, 2, 3);
        let strided = conv(&mut g, "strided", a, 3, 2, 2);
        let sum = g.add_op("sum", Op::Binary(BinaryOp::Add), &[strided, shortcut]).unwrap();
        let slope = Tensor::from_vec(&[c, 1, 1], values(c, 11).into_iter().map(|s| s + 0.25).collect()).unwrap();
        let slope = g.add_constant("slope", slope);
        let zero = g.add_constant("zero", Tensor::from_vec(&[], vec![0.0f32]).unwrap());
        let negative = g.add_op("negative", Op::Compare(CompareOp::Less), &[sum, zero]).unwrap();
        let scaled = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[sum, slope]).unwrap();
        let prelu = g.add_op("prelu", Op::Where, &[negative, scaled, sum]).unwrap();
        let out = conv(&mut g, "winograd_out", prelu, 3, 1, 4);
        g.set_outputs(vec![out]);
        let model = Model::from_graph("strided_between_planar", g).expect("model");
        if let Some(config) = KernelConfig::host(1) {
            let (_, text) = target_stage(&model, Some(config));
            let blocked: Vec<&str> =
                text.lines().filter(|l| l.contains("call extern \"heron_conv2d_blocked_f32_v3\"")).collect();
            let block = heron_kernels::blocked::block_for(config.isa);
            if config.isa == heron_jit::kernels::Isa::Scalar || 4 * c < 3 * block {
                assert!(blocked.is_empty(), "{text}");
            } else {
                assert_eq!(blocked.len(), 1, "only the strided 3×3 runs blocked:\n{text}");
                // Five tensors, the ISA and 16 dimensions, then the block and the layouts.
                let args: Vec<&str> = blocked[0].split(", ").collect();
                assert_eq!(args[3], "%shortcut", "the kernel adds the residual:\n{text}");
                assert_eq!(&args[22..24], [block.to_string().as_str(), "0"], "planar input and output:\n{text}");
                assert!(!text.contains("layout %"), "every tensor stays planar:\n{text}");
                assert!(!text.contains("for %o"), "no generated loop is left:\n{text}");
            }
        }
        let input = Tensor::from_vec(&[1, c, size, size], values(c * size * size, 5)).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &format!("strided, {c} channels"));
    }
}

/// Blocked convolutions taking a widened copy of each image (here a 3×3 layer dilated by 2 on
/// 6×20 planes) take several shares per thread while the copies of all shares stay within 2
/// MiB, one share per thread past it: with four threads, 64 channels (37 KiB an image; 4.4 M
/// multiply-adds, a small layer: two shares per thread) take 8 tasks, 256 (147 KiB; 16 shares
/// would pass the budget) take 4; both match the interpreter.
#[test]
fn widened_blocked_convolutions_take_shares_within_a_budget() {
    use heron_ir::{ConvAttrs, DType, Graph, Op, Tensor, TensorType, Window};
    let Some(config) = KernelConfig::host(4) else { return };
    if config.isa == heron_jit::kernels::Isa::Scalar {
        return;
    }
    for (c, tasks) in [(64, 8), (256, 4)] {
        let (h, w) = (6, 20);
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![1, c, h, w]));
        let conv = |g: &mut Graph, name: &str, v, k: usize, seed: usize| {
            let weights = Tensor::from_vec(&[c, c, k, k], values(c * c * k * k, seed)).unwrap();
            let weights = g.add_constant(format!("{name}_w"), weights);
            let mut window = Window::dense(vec![k, k]);
            window.dilations = vec![2, 2];
            window.pads_begin = vec![k - 1, k - 1];
            window.pads_end = vec![k - 1, k - 1];
            g.add_op(name, Op::Conv(ConvAttrs { window, group: 1 }), &[v, weights]).unwrap()
        };
        let a = conv(&mut g, "expand", x, 1, 1);
        let b = conv(&mut g, "wide", a, 3, 2);
        let out = conv(&mut g, "project", b, 1, 3);
        g.set_outputs(vec![out]);
        let model = Model::from_graph("widened", g).expect("model");
        let (_, text) = target_stage(&model, Some(config));
        let call = text
            .lines()
            .find(|l| l.contains("heron_conv2d_blocked_f32_v3") && l.contains(", 3, 3, 1, 1, 2, 2,"))
            .unwrap_or_else(|| panic!("the dilated 3×3 layer runs blocked:\n{text}"));
        let args: Vec<&str> = call.split(", ").collect();
        let at = args.iter().position(|a| *a == "%task").expect("a task argument");
        assert_eq!(args[at + 1], tasks.to_string(), "{c} channels:\n{call}");
        let input = Tensor::from_vec(&[1, c, h, w], values(c * h * w, 5)).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &format!("widened, {c} channels"));
    }
}

/// GELU on `v` as exporters write it: `v · (1 + erf(v / √2)) · ½`, the constants scalar tensors.
fn exported_gelu(g: &mut heron_ir::Graph, name: &str, v: heron_ir::ValueId) -> heron_ir::ValueId {
    use heron_ir::{BinaryOp, Op, Tensor, UnaryOp};
    let mut scalar =
        |what: &str, value: f32| g.add_constant(format!("{name}_{what}"), Tensor::from_vec(&[], vec![value]).unwrap());
    let (root2, one, half) = (scalar("root2", 1.414_213_5), scalar("one", 1.0), scalar("half", 0.5));
    let scaled = g.add_op(format!("{name}_scaled"), Op::Binary(BinaryOp::Div), &[v, root2]).unwrap();
    let erf = g.add_op(format!("{name}_erf"), Op::Unary(UnaryOp::Erf), &[scaled]).unwrap();
    let sum = g.add_op(format!("{name}_sum"), Op::Binary(BinaryOp::Add), &[erf, one]).unwrap();
    let product = g.add_op(format!("{name}_product"), Op::Binary(BinaryOp::Mul), &[v, sum]).unwrap();
    g.add_op(name, Op::Binary(BinaryOp::Mul), &[product, half]).unwrap()
}

/// `n` values in [-0.5, 0.5), different for each seed.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed) % 997) as f32 / 997.0 - 0.5).collect()
}

/// The model compiled for 1 and for 2 threads gives every output the interpreter does.
fn agrees_with_the_interpreter_on_1_and_2_threads(model: &Model, input: &heron_ir::Tensor, what: &str) {
    let want = model.run_interpreter(std::slice::from_ref(input)).expect("interpreter");
    for threads in [1, 2] {
        let compiled =
            Compiler::new(CompileOptions { threads, ..CompileOptions::default() }).compile(model).expect("compile");
        let got = compiled.run(std::slice::from_ref(input)).expect("run");
        for (k, (got, want)) in got.iter().zip(&want).enumerate() {
            heron_ir::testing::assert_engines_agree(got, want)
                .unwrap_or_else(|e| panic!("{what}, output {k}, {threads} threads: {e}"));
        }
    }
}

/// Activations after blocked convolutions run inside the kernel: LeakyReLU, hard-swish (the op,
/// or written out as `v · HardSigmoid(v)`),
/// HardSigmoid, a sigmoid, SiLU (a Sigmoid and a Mul), tanh, GELU (five nodes reading scalar
/// constants) and GELU's tanh form as the kernel's own activation (its flag set), ELU, PReLU (a Less, a Mul by a
/// per-channel slope and a Where) and Mish (the op, or a Softplus, a Tanh and a Mul) as its
/// tail program, so no pass of generated code goes over
/// the blocked tensors after them. Channel counts end inside a block; the chain (a first
/// strided layer on the planar input, pointwise, depthwise, pointwise) matches the interpreter
/// on 1 and 2 threads, with infinities and NaN among the inputs.
#[test]
fn activations_after_blocked_convolutions_run_in_the_kernel() {
    use heron_ir::op::Activation;
    use heron_ir::{BinaryOp, CompareOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, UnaryOp, ValueId, Window};
    let one = |op: Op| move |g: &mut Graph, name: String, v: ValueId| g.add_op(name, op.clone(), &[v]).unwrap();
    let silu = |g: &mut Graph, name: String, v: ValueId| {
        let s = g.add_op(format!("{name}_sigmoid"), Op::Unary(UnaryOp::Sigmoid), &[v]).unwrap();
        g.add_op(name, Op::Binary(BinaryOp::Mul), &[v, s]).unwrap()
    };
    // PReLU as the importer writes it: Less(x, 0), Mul(x, slope), Where; one slope per channel.
    let prelu = move |g: &mut Graph, name: String, v: ValueId| {
        let m = g.ty(v).shape[1];
        let slope = Tensor::from_vec(&[m, 1, 1], values(m, 11).into_iter().map(|s| s + 0.25).collect()).unwrap();
        let slope = g.add_constant(format!("{name}_slope"), slope);
        let zero = g.add_constant(format!("{name}_zero"), Tensor::from_vec(&[], vec![0.0f32]).unwrap());
        let negative = g.add_op(format!("{name}_negative"), Op::Compare(CompareOp::Less), &[v, zero]).unwrap();
        let scaled = g.add_op(format!("{name}_scaled"), Op::Binary(BinaryOp::Mul), &[v, slope]).unwrap();
        g.add_op(name, Op::Where, &[negative, scaled, v]).unwrap()
    };
    let gelu = |g: &mut Graph, name: String, v: ValueId| exported_gelu(g, &name, v);
    // Mish as exporters write it before opset 18's Mish op: Softplus, Tanh, Mul.
    let exported_mish = |g: &mut Graph, name: String, v: ValueId| {
        let s = g.add_op(format!("{name}_softplus"), Op::Unary(UnaryOp::Softplus), &[v]).unwrap();
        let t = g.add_op(format!("{name}_tanh"), Op::Unary(UnaryOp::Tanh), &[s]).unwrap();
        g.add_op(name, Op::Binary(BinaryOp::Mul), &[t, v]).unwrap()
    };
    // Hard-swish written out: v · HardSigmoid(v) with alpha 1/6, beta 1/2.
    let gated_hard_sigmoid = |g: &mut Graph, name: String, v: ValueId| {
        let gate = Op::Activation(Activation::HardSigmoid { alpha: 1.0 / 6.0, beta: 0.5 });
        let h = g.add_op(format!("{name}_gate"), gate, &[v]).unwrap();
        g.add_op(name, Op::Binary(BinaryOp::Mul), &[h, v]).unwrap()
    };
    type Build = Box<dyn Fn(&mut Graph, String, ValueId) -> ValueId>;
    // Each with the kernel's activation flag it sets (none: a tail program).
    let activations: [(&str, Build, i64); 13] = [
        ("LeakyRelu", Box::new(one(Op::LeakyRelu { alpha: 0.1 })), flags::LEAKY_RELU),
        ("HardSwish", Box::new(one(Op::Unary(UnaryOp::HardSwish))), flags::HARD_SWISH),
        ("v·HardSigmoid(v)", Box::new(gated_hard_sigmoid), flags::HARD_SWISH),
        ("Sigmoid", Box::new(one(Op::Unary(UnaryOp::Sigmoid))), flags::SIGMOID),
        ("SiLU", Box::new(silu), flags::SILU),
        ("Elu", Box::new(one(Op::Activation(Activation::Elu { alpha: 0.7 }))), 0),
        (
            "HardSigmoid",
            Box::new(one(Op::Activation(Activation::HardSigmoid { alpha: 0.2, beta: 0.5 }))),
            flags::HARD_SIGMOID,
        ),
        ("PRelu", Box::new(prelu), 0),
        ("Tanh", Box::new(one(Op::Unary(UnaryOp::Tanh))), flags::TANH),
        ("GELU", Box::new(gelu), flags::GELU),
        ("Mish", Box::new(one(Op::Unary(UnaryOp::Mish))), 0),
        ("GELU (tanh)", Box::new(one(Op::Unary(UnaryOp::GeluTanh))), flags::GELU_TANH),
        ("exported Mish", Box::new(exported_mish), 0),
    ];
    let activation_bits = flags::LEAKY_RELU
        | flags::HARD_SWISH
        | flags::SIGMOID
        | flags::SILU
        | flags::HARD_SIGMOID
        | flags::TANH
        | flags::GELU
        | flags::GELU_TANH;
    for (name, activation, flag) in activations {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 3, 19, 19]));
        // (in, out, kernel, stride, groups)
        let layers = [(3, 12, 3, 2, 1), (12, 20, 1, 1, 1), (20, 20, 3, 1, 20), (20, 12, 1, 1, 1)];
        let mut v = x;
        for (k, &(c, m, size, stride, group)) in layers.iter().enumerate() {
            let mut window = Window::dense(vec![size, size]);
            window.strides = vec![stride, stride];
            window.pads_begin = vec![size / 2; 2];
            window.pads_end = vec![size / 2; 2];
            let n = m * (c / group) * size * size;
            let w =
                g.add_constant(format!("w{k}"), Tensor::from_vec(&[m, c / group, size, size], values(n, k)).unwrap());
            let b = g.add_constant(format!("b{k}"), Tensor::from_vec(&[m], values(m, k + 7)).unwrap());
            v = g.add_op(format!("conv{k}"), Op::Conv(ConvAttrs { window, group }), &[v, w, b]).unwrap();
            v = activation(&mut g, format!("act{k}"), v);
        }
        g.set_outputs(vec![v]);
        let model = Model::from_graph("activations", g).expect("model");
        if KernelConfig::host(1).is_some() {
            let (_, text) = target_stage(&model, KernelConfig::host(1));
            let calls: Vec<&str> = text.split("call extern \"heron_conv2d_blocked_f32_v3\"(").skip(1).collect();
            assert_eq!(calls.len(), 4, "{name}:\n{text}");
            for call in calls {
                // The flags are the call's 25th argument (see `heron_conv2d_blocked_f32_v3`).
                let bits: i64 = call.split(", ").nth(24).and_then(|f| f.parse().ok()).expect("flags");
                assert_eq!(bits & activation_bits, flag, "{name}: the kernel's activation flag\n{text}");
            }
            // Four functions, one per layer, and main: no nest after a kernel.
            assert_eq!(
                text.matches("\nfunc @").count() + usize::from(text.starts_with("func @")),
                5,
                "{name}:\n{text}"
            );
        }
        let mut input = values(3 * 19 * 19, 3).into_iter().map(|v| v * 40.0).collect::<Vec<f32>>();
        input[5] = f32::INFINITY;
        input[100] = f32::NEG_INFINITY;
        input[200] = f32::NAN;
        let input = Tensor::from_vec(&[1, 3, 19, 19], input).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, name);
    }
}

/// A squeeze-excitation block (a convolution, its global average, two 1×1 convolutions and a
/// sigmoid giving a per-channel scale, the product, a projecting convolution): the product,
/// which generated code computes, is stored channel-blocked for the projection when its
/// channels fill whole blocks (160; 72 with 8-channel blocks, not with AVX-512's 16), and stays
/// planar when they do not (12, which would leave stale lanes). Either way JIT on 1 and 2
/// threads matches the interpreter.
#[test]
fn squeeze_excitation_products_feed_blocked_convolutions() {
    use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, UnaryOp, Window};
    for channels in [72, 160, 12] {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 3, 28, 28]));
        let conv = |g: &mut Graph, name: &str, v, c: usize, m: usize, size: usize| {
            let mut window = Window::dense(vec![size, size]);
            window.pads_begin = vec![size / 2; 2];
            window.pads_end = vec![size / 2; 2];
            let w = Tensor::from_vec(&[m, c, size, size], values(m * c * size * size, m + c)).unwrap();
            let w = g.add_constant(format!("{name}_w"), w);
            let b = g.add_constant(format!("{name}_b"), Tensor::from_vec(&[m], values(m, c)).unwrap());
            g.add_op(name, Op::Conv(ConvAttrs { window, group: 1 }), &[v, w, b]).unwrap()
        };
        let features = conv(&mut g, "features", x, 3, channels, 3);
        let pooled = g.add_op("pooled", Op::GlobalAveragePool, &[features]).unwrap();
        let squeezed = conv(&mut g, "squeeze", pooled, channels, 4, 1);
        let squeezed = g.add_op("squeezed", Op::Unary(UnaryOp::Relu), &[squeezed]).unwrap();
        let excited = conv(&mut g, "excite", squeezed, 4, channels, 1);
        let scale = g.add_op("scale", Op::Unary(UnaryOp::Sigmoid), &[excited]).unwrap();
        let scaled = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[features, scale]).unwrap();
        let y = conv(&mut g, "project", scaled, channels, 8, 1);
        g.set_outputs(vec![y]);
        let model = Model::from_graph("squeeze_excitation", g).expect("model");
        if let Some(config) = KernelConfig::host(1) {
            let block = heron_kernels::blocked::block_for(config.isa);
            let (_, text) = target_stage(&model, Some(config));
            // The projection's call; for a blocked kernel, the 24th argument holds the layouts
            // (bit 0: a blocked input).
            let call = text.lines().find(|l| l.contains("(%scaled,")).unwrap_or_else(|| panic!("{text}"));
            let blocked_input = call.contains("heron_conv2d_blocked_f32_v3")
                && call.split(", ").nth(23).and_then(|a| a.parse::<i64>().ok()).expect("layouts") & 1 == 1;
            assert_eq!(blocked_input, channels % block == 0, "{channels} channels:\n{call}");
            // The global average over the blocked tensor runs one block a chunk, and the
            // product a block's lanes innermost, so their vector lanes are contiguous channels
            // with no `// B` or `% B` in their indices (72 in 12 chunks of 6 would straddle
            // blocks; 160 in 10 chunks of 16 would index through both at B = 8, and 20 chunks
            // of 8 at B = 16; a vector along the width would step a block apart).
            if channels % block == 0 {
                let options = PipelineOptions { kernels: Some(config), ..PipelineOptions::default() };
                let flat = Pipeline::new(options).module(&model, Stage::Flat).expect("flat stage");
                for prefix in ["globalaveragepool", "mul"] {
                    let f = flat.funcs.iter().find(|f| f.name.starts_with(prefix)).expect(prefix);
                    let text = heron_ir::loop_ir::print::print_func(f, heron_ir::loop_ir::print::ConstData::Elided);
                    assert!(
                        !text.contains(&format!("% {block})")) && !text.contains(&format!("// {block})")),
                        "{text}"
                    );
                    let vector = text.lines().find(|l| l.contains("vectorized")).unwrap_or_else(|| panic!("{text}"));
                    assert!(vector.contains(&format!("in 0..{block} ")), "{text}");
                }
            }
        }
        let input = Tensor::from_vec(&[1, 3, 28, 28], values(3 * 28 * 28, 5)).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &format!("{channels} channels"));
    }
}

/// A tail reading a whole tensor besides the kernel's result (`hard_swish(conv(a) + a)`, the
/// add not taken as a residual) where that tensor is channel-blocked (another convolution's
/// input) and the output planar (a model output), or the other way round: the tail program
/// reads its operands at the output's offsets, so it runs only when their layouts agree, and
/// JIT on 1 and 2 threads matches the interpreter either way.
#[test]
fn tails_read_operands_only_in_their_own_layout() {
    use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, UnaryOp, Window};
    for channels in [16, 12] {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 3, 10, 10]));
        let conv = |g: &mut Graph, name: &str, v, c: usize, m: usize| {
            let mut window = Window::dense(vec![3, 3]);
            window.pads_begin = vec![1, 1];
            window.pads_end = vec![1, 1];
            let w =
                g.add_constant(format!("{name}_w"), Tensor::from_vec(&[m, c, 3, 3], values(m * c * 9, m + c)).unwrap());
            let b = g.add_constant(format!("{name}_b"), Tensor::from_vec(&[m], values(m, c)).unwrap());
            g.add_op(name, Op::Conv(ConvAttrs { window, group: 1 }), &[v, w, b]).unwrap()
        };
        let a = conv(&mut g, "a", x, 3, channels);
        let b = conv(&mut g, "b", a, channels, channels);
        let sum = g.add_op("sum", Op::Binary(BinaryOp::Add), &[b, a]).unwrap();
        let y = g.add_op("y", Op::Unary(UnaryOp::HardSwish), &[sum]).unwrap();
        // `a` also feeds a depthwise-free second branch, so it stays blocked for it.
        let z = conv(&mut g, "z", a, channels, 8);
        g.set_outputs(vec![y, z]);
        let model = Model::from_graph("tails", g).expect("model");
        let input = Tensor::from_vec(&[1, 3, 10, 10], values(300, 9)).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &format!("{channels} channels"));
    }
}

/// A quantized block as QLinearConv and QLinearMatMul import it: an integer convolution
/// (padding, stride 2, weights zero point per channel), its i32 bias, scale and
/// requantization to u8, then an integer GEMM on the flattened result. Both products run as
/// the integer kernels (the requantization stays generated code reading their i32 result),
/// bit-exact against the graph interpreter: through the loop-IR interpreter for each integer
/// layout, and compiled on 1 and 2 threads.
#[test]
fn quantized_blocks_run_as_integer_kernels() {
    use heron_ir::op::QuantAxis;
    use heron_ir::{BinaryOp, ConvAttrs, DType, Graph, Op, Tensor, TensorType, Window};
    use heron_jit::kernels::{Int8Isa, Isa};
    let bytes = |n: usize, seed: usize| (0..n).map(|i| ((i * 7919 + seed * 104729) % 256) as u8).collect::<Vec<_>>();
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::U8, vec![2, 8, 9, 9]));
    let w: Vec<i8> = bytes(16 * 8 * 9, 1).into_iter().map(|b| b as i8).collect();
    let w = g.add_constant("w", Tensor::from_vec(&[16, 8, 3, 3], w).unwrap());
    let xz = g.add_constant("xz", Tensor::from_vec::<u8>(&[], vec![3]).unwrap());
    let wz = g.add_constant("wz", Tensor::from_vec::<i8>(&[16], (0..16).map(|i| i % 5 - 2).collect()).unwrap());
    let mut window = Window::dense(vec![3, 3]);
    (window.strides, window.pads_begin, window.pads_end) = (vec![2, 2], vec![1, 1], vec![1, 1]);
    let acc = g.add_op("conv", Op::ConvInteger(ConvAttrs { window, group: 1 }), &[x, w, xz, wz]).unwrap();
    let bias = g.add_constant(
        "bias",
        Tensor::from_vec(&[16, 1, 1], (0..16).map(|i| i * 1000 - 7000).collect::<Vec<i32>>()).unwrap(),
    );
    let biased = g.add_op("biased", Op::Binary(BinaryOp::Add), &[acc, bias]).unwrap();
    let real = g.add_op("real", Op::Cast { to: DType::F32 }, &[biased]).unwrap();
    let scale = g.add_constant("scale", Tensor::from_vec::<f32>(&[], vec![0.0007]).unwrap());
    let scaled = g.add_op("scaled", Op::Binary(BinaryOp::Mul), &[real, scale]).unwrap();
    let one = g.add_constant("one", Tensor::from_vec::<f32>(&[], vec![1.0]).unwrap());
    let yz = g.add_constant("yz", Tensor::from_vec::<u8>(&[], vec![10]).unwrap());
    let q = g.add_op("q", Op::QuantizeLinear { axis: QuantAxis::PerTensor }, &[scaled, one, yz]).unwrap();
    let flat = g.add_op("flat", Op::Reshape { shape: vec![2, 400] }, &[q]).unwrap();
    let b = g.add_constant("b", Tensor::from_vec(&[400, 7], bytes(400 * 7, 2)).unwrap());
    let bz = g.add_constant("bz", Tensor::from_vec::<u8>(&[], vec![130]).unwrap());
    let y = g.add_op("fc", Op::MatMulInteger, &[flat, b, yz, bz]).unwrap();
    g.set_outputs(vec![q, y]);
    let model = Model::from_graph("qblock", g.clone()).expect("model");
    let input = Tensor::from_vec(&[2, 8, 9, 9], bytes(2 * 8 * 81, 3)).unwrap();
    let want = heron_ir::interp::run(&g, std::slice::from_ref(&input)).expect("graph interpreter");
    for int8 in [Int8Isa::Vnni512, Int8Isa::Avx2, Int8Isa::Scalar] {
        let kernels = Some(KernelConfig { isa: Isa::detect(), int8, tasks: 2 });
        let (module, text) = target_stage(&model, kernels);
        assert!(text.contains("heron_conv2d_q8") && text.contains("heron_gemm_q8"), "{int8:?}: {text}");
        let got = heron_ir::loop_ir::interp::run_with(
            &module,
            std::slice::from_ref(&input),
            Some(&heron_jit::kernels::KernelExterns),
        )
        .expect("loop-IR interpreter");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(&g.reshape(w.shape()).unwrap(), w, "{int8:?}");
        }
    }
    for threads in [1, 2] {
        let compiled =
            Compiler::new(CompileOptions { threads, ..CompileOptions::default() }).compile(&model).expect("compile");
        assert_eq!(compiled.run(std::slice::from_ref(&input)).expect("run"), want, "{threads} threads");
    }
}

/// One-element f32 constants read by an elementwise function become literals, so GELU as
/// exporters write it (its √2, 1 and ½ initializers) on a graph input, with no convolution to
/// fuse into, runs as the elementwise routine; a one-output-channel convolution keeps its bias
/// load (the kernel's start value) and still calls the kernel. Both match the interpreter.
#[test]
fn scalar_constants_become_literals_outside_contractions() {
    use heron_ir::{ConvAttrs, DType, Graph, Op, Tensor, TensorType, Window};
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![2, 3, 9, 9]));
    let gelu = exported_gelu(&mut g, "gelu", x);
    let w = g.add_constant("w", Tensor::from_vec(&[1, 3, 3, 3], values(27, 5)).unwrap());
    let b = g.add_constant("b", Tensor::from_vec(&[1], vec![0.25f32]).unwrap());
    let y =
        g.add_op("conv", Op::Conv(ConvAttrs { window: Window::dense(vec![3, 3]), group: 1 }), &[gelu, w, b]).unwrap();
    g.set_outputs(vec![y]);
    let model = Model::from_graph("gelu_input", g).expect("model");
    if KernelConfig::host(1).is_some() {
        let (_, text) = target_stage(&model, KernelConfig::host(1));
        assert!(text.contains("call extern \"heron_map_f32\""), "{text}");
        assert!(text.contains("call extern \"heron_conv2d"), "{text}");
    }
    let input = Tensor::from_vec(&[2, 3, 9, 9], values(2 * 3 * 81, 9).into_iter().map(|v| v * 6.0).collect()).unwrap();
    agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, "gelu on the input");
}

/// Softmax and LogSoftmax along the last axis (contiguous rows, short and long, with a masked
/// tail), along a middle axis (strided lines), and flattened from an axis as opset 11 does,
/// run as the softmax routine and match the interpreter on 1 and 2 threads, with infinities
/// and NaN among the inputs.
#[test]
fn softmax_runs_as_the_routine() {
    use heron_ir::{DType, Graph, Op, Tensor, TensorType};
    for (shape, axis, coerce_2d) in [
        (vec![3, 5, 70], 2, false),
        (vec![2, 200], 1, false),
        (vec![2, 9, 4, 5], 1, false),
        (vec![2, 3, 40, 3], 2, false),
        (vec![2, 3, 4, 5], 1, true),
    ] {
        for log in [false, true] {
            let mut g = Graph::new();
            let x = g.add_input("x", TensorType::new(DType::F32, shape.clone()));
            let y = g.add_op("softmax", Op::Softmax { axis, coerce_2d, log }, &[x]).expect("softmax");
            g.set_outputs(vec![y]);
            let model = Model::from_graph("softmax", g).expect("model");
            let what =
                format!("{} of {shape:?} along {axis} (2-d: {coerce_2d})", if log { "LogSoftmax" } else { "Softmax" });
            if KernelConfig::host(1).is_some() {
                let (_, text) = target_stage(&model, KernelConfig::host(1));
                assert_eq!(text.matches("call extern \"heron_softmax_f32\"").count(), 1, "{what}:\n{text}");
            }
            let n: usize = shape.iter().product();
            let mut data = values(n, 11).iter().map(|v| v * 40.0).collect::<Vec<_>>();
            data[3] = f32::NEG_INFINITY;
            data[n - 1] = f32::NAN;
            let input = Tensor::from_vec(&shape, data).expect("input");
            agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &what);
        }
    }
}

/// An average pool between two blocked-size convolutions reads its input channel-blocked with
/// the pool kernel (generated code taking a window of a blocked tensor would compute `// B` and
/// `% B` for every tap), with every divisor: taps inside the input, or inside the padded input
/// (`count_include_pad`, ceil mode's overhang past the far pads not counted); strides 1 to 3,
/// dilations, asymmetric pads and channel counts ending inside a block. A window of more taps
/// than lowering visits with constant loops (a 9×9) stays generated code, its input planar.
/// Every model matches the interpreter on 1 and 2 threads.
#[test]
fn average_pools_of_blocked_tensors_run_the_pool_kernel() {
    use heron_ir::{ConvAttrs, DType, Graph, Op, PoolAttrs, Tensor, TensorType, Window};
    // (channels, size, kernel, stride, dilation, pads begin, pads end, count_include_pad, ceil_mode)
    let cases = [
        (32, 12, 3, 1, 1, 1, 1, false, false),
        (32, 12, 3, 1, 1, 1, 1, true, false),
        (20, 15, 2, 2, 1, 0, 0, false, false),
        (20, 16, 3, 2, 1, 1, 1, true, true),
        (20, 15, 3, 2, 1, 1, 1, false, true),
        (40, 23, 5, 3, 1, 2, 1, true, true),
        (12, 14, 3, 1, 2, 2, 0, true, false),
        (24, 21, 9, 1, 1, 4, 4, true, false),
    ];
    for (c, size, k, stride, dilation, begin, end, include_pad, ceil_mode) in cases {
        let what =
            format!("{k}x{k}/{stride} dilation {dilation} pads {begin},{end} include {include_pad} ceil {ceil_mode}");
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![2, 8, size, size]));
        let same = |k: usize| {
            let mut window = Window::dense(vec![k, k]);
            window.pads_begin = vec![k / 2; 2];
            window.pads_end = vec![k / 2; 2];
            window
        };
        let w1 = g.add_constant("w1", Tensor::from_vec(&[c, 8, 3, 3], values(c * 8 * 9, 5)).expect("weights"));
        let y = g.add_op("conv1", Op::Conv(ConvAttrs { window: same(3), group: 1 }), &[x, w1]).expect("conv");
        let mut window = Window::dense(vec![k, k]);
        window.strides = vec![stride; 2];
        window.dilations = vec![dilation; 2];
        window.pads_begin = vec![begin; 2];
        window.pads_end = vec![end; 2];
        let pool = PoolAttrs { window, ceil_mode };
        let p = g.add_op("pool", Op::AveragePool { pool, count_include_pad: include_pad }, &[y]).expect("pool");
        let w2 = g.add_constant("w2", Tensor::from_vec(&[c, c, 3, 3], values(c * c * 9, 6)).expect("weights"));
        let z = g.add_op("conv2", Op::Conv(ConvAttrs { window: same(3), group: 1 }), &[p, w2]).expect("conv");
        g.set_outputs(vec![z]);
        let model = Model::from_graph("pooled", g).expect("model");
        if let Some(config) = KernelConfig::host(1) {
            let (module, text) = target_stage(&model, Some(config));
            let main = module.funcs.iter().find(|f| f.name == "main").expect("main");
            let pooled_input =
                main.buffers.iter().position(|b| b.name == "conv1").map(|k| heron_ir::loop_ir::BufferId(k as u32));
            let pooled_input = pooled_input.unwrap_or_else(|| panic!("no buffer conv1:\n{text}"));
            let kernel = k * k <= 64;
            assert_eq!(main.layout_transforms.contains_key(&pooled_input), kernel, "{what}:\n{text}");
            assert_eq!(text.contains("call extern \"heron_avgpool2d_blocked_f32\""), kernel, "{what}:\n{text}");
        }
        let mut data = values(2 * 8 * size * size, 7);
        data[3] = f32::INFINITY;
        data[40] = f32::NAN;
        let input = Tensor::from_vec(&[2, 8, size, size], data).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &what);
    }
    // After a layer Winograd computes (planar), the average pool stays generated code and
    // still writes its output blocked for the next convolution: 64 channels fill whole blocks.
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::F32, vec![1, 64, 28, 28]));
    let mut same = Window::dense(vec![3, 3]);
    same.pads_begin = vec![1, 1];
    same.pads_end = vec![1, 1];
    let w1 = g.add_constant("w1", Tensor::from_vec(&[64, 64, 3, 3], values(64 * 64 * 9, 5)).expect("weights"));
    let y = g.add_op("conv1", Op::Conv(ConvAttrs { window: same.clone(), group: 1 }), &[x, w1]).expect("conv");
    let pool = PoolAttrs { window: same, ceil_mode: false };
    let p = g.add_op("pool", Op::AveragePool { pool, count_include_pad: true }, &[y]).expect("pool");
    let w2 = g.add_constant("w2", Tensor::from_vec(&[64, 64, 1, 1], values(64 * 64, 6)).expect("weights"));
    let z =
        g.add_op("conv2", Op::Conv(ConvAttrs { window: Window::dense(vec![1, 1]), group: 1 }), &[p, w2]).expect("conv");
    g.set_outputs(vec![z]);
    let model = Model::from_graph("winograd then pool", g).expect("model");
    if let Some(config) = KernelConfig::host(1) {
        let (module, text) = target_stage(&model, Some(config));
        let main = module.funcs.iter().find(|f| f.name == "main").expect("main");
        let blocked = |name: &str| {
            let k = main.buffers.iter().position(|b| b.name == name).unwrap_or_else(|| panic!("no {name}:\n{text}"));
            main.layout_transforms.contains_key(&heron_ir::loop_ir::BufferId(k as u32))
        };
        if !blocked("conv1") {
            assert!(blocked("pool"), "{text}");
            assert!(!text.contains("heron_avgpool2d_blocked_f32"), "{text}");
        }
    }
    let input = Tensor::from_vec(&[1, 64, 28, 28], values(64 * 28 * 28, 9)).expect("input");
    agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, "Winograd, then an average pool");
}

/// A fully connected layer's activation of its biased sum (`sigmoid(x·w + b)`, `tanh(...)`):
/// the GEMM kernel adds the bias per column and applies the activation itself (its call's
/// flag); one it does not know (Softplus) runs as the elementwise routine over its output. All
/// match the interpreter on 1 and 2 threads.
#[test]
fn gemm_activations_of_biased_sums_run_in_the_kernel() {
    use heron_ir::{DType, Graph, Op, Tensor, TensorType, UnaryOp};
    let (m, k, n) = (6, 40, 24);
    for (activation, flag) in [(UnaryOp::Sigmoid, flags::SIGMOID), (UnaryOp::Tanh, flags::TANH), (UnaryOp::Softplus, 0)]
    {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, vec![m, k]));
        let w = g.add_constant("w", Tensor::from_vec(&[n, k], values(n * k, 8)).expect("weights"));
        let b = g.add_constant("b", Tensor::from_vec(&[n], values(n, 9)).expect("bias"));
        let gemm = Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true };
        let y = g.add_op("fc", gemm, &[x, w, b]).expect("gemm");
        let a = g.add_op("act", Op::Unary(activation), &[y]).expect("activation");
        g.set_outputs(vec![a]);
        let model = Model::from_graph("fc", g).expect("model");
        if KernelConfig::host(1).is_some() {
            let (_, text) = target_stage(&model, KernelConfig::host(1));
            let gemm = text
                .lines()
                .find(|l| l.contains("call extern \"heron_gemm_f32_v2\""))
                .unwrap_or_else(|| panic!("{text}"));
            assert!(gemm.contains("%b"), "the kernel adds the bias:\n{text}");
            // The flags are the call's tenth argument (see `heron_gemm_f32_v2`).
            let bits: i64 = gemm.split(", ").nth(9).and_then(|f| f.parse().ok()).expect("flags");
            assert_eq!(bits & !flags::BIAS, flag, "{activation:?}:\n{text}");
            let maps = text.matches("call extern \"heron_map_f32\"").count();
            assert_eq!(maps, usize::from(flag == 0), "{text}");
            assert!(!text.contains("for %o"), "no generated loop is left:\n{text}");
        }
        let input = Tensor::from_vec(&[m, k], values(m * k, 10)).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &format!("{activation:?} of a GEMM"));
    }
}

/// Log and Softplus (`max(x, 0) + ln(1 + e^-|x|)`) run as the elementwise routine's vector
/// logarithm and match the interpreter on 1 and 2 threads over zeros, negatives, subnormals,
/// values near 1, ±∞, NaN and inputs past `e^88` (where `ln(e^x + 1)` would overflow).
#[test]
fn logarithms_run_as_the_elementwise_routine() {
    use heron_ir::{DType, Graph, Op, Tensor, TensorType, UnaryOp};
    let shape = vec![3, 5, 700];
    let n: usize = shape.iter().product();
    let specials = [0.0, -0.0, -1.0, 1e-40, f32::MIN_POSITIVE, 1.0, 1.0 + f32::EPSILON, 100.0, -100.0, 1e30];
    let mut data = values(n, 21).iter().map(|v| (v * 12.0).exp()).collect::<Vec<_>>();
    for (k, &v) in specials.iter().chain(&[f32::INFINITY, f32::NEG_INFINITY, f32::NAN]).enumerate() {
        data[k * 97] = v;
        data[n - 1 - k] = -v;
    }
    let input = Tensor::from_vec(&shape, data).expect("input");
    for op in [UnaryOp::Log, UnaryOp::Softplus] {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, shape.clone()));
        let y = g.add_op("y", Op::Unary(op), &[x]).expect("op");
        g.set_outputs(vec![y]);
        let model = Model::from_graph("log", g).expect("model");
        if KernelConfig::host(1).is_some() {
            let (_, text) = target_stage(&model, KernelConfig::host(1));
            assert_eq!(text.matches("call extern \"heron_map_f32\"").count(), 1, "{op:?}:\n{text}");
        }
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &format!("{op:?}"));
    }
}

/// Large standalone arithmetic chains (ReLU, hard-swish, a residual sum's ReLU, a per-channel
/// scale) run as the elementwise routine; a small one, one starting from the per-channel
/// operand, and any on the scalar ISA stay generated code; each matches the interpreter on 1
/// and 2 threads, NaN and ±∞ included.
#[test]
fn large_arithmetic_chains_run_as_the_elementwise_routine() {
    use heron_ir::{BinaryOp, DType, Graph, Op, Tensor, TensorType, UnaryOp};
    for (what, shape, routine) in [
        ("relu", vec![2, 8, 30, 31], true),
        ("hardswish", vec![1, 16, 20, 20], true),
        ("residual", vec![3, 4100], true),
        ("scale", vec![1, 16, 17, 17], true),
        // The per-channel scale first: a chain from a per-row input would run on the stack.
        ("scaled", vec![1, 16, 17, 17], false),
        ("relu", vec![4, 250], false),
    ] {
        let mut g = Graph::new();
        let x = g.add_input("x", TensorType::new(DType::F32, shape.clone()));
        let n: usize = shape.iter().product();
        let y = match what {
            "relu" => g.add_op("relu", Op::Unary(UnaryOp::Relu), &[x]),
            "hardswish" => g.add_op("hardswish", Op::Unary(UnaryOp::HardSwish), &[x]),
            "residual" => {
                let c = g.add_constant("c", Tensor::from_vec(&shape, values(n, 4)).expect("constant"));
                let s = g.add_op("sum", Op::Binary(BinaryOp::Add), &[x, c]).expect("sum");
                g.add_op("relu", Op::Unary(UnaryOp::Relu), &[s])
            }
            _ => {
                let c = g.add_constant("c", Tensor::from_vec(&[16, 1, 1], values(16, 4)).expect("constant"));
                let operands = if what == "scale" { [x, c] } else { [c, x] };
                g.add_op("scale", Op::Binary(BinaryOp::Mul), &operands)
            }
        }
        .expect("op");
        g.set_outputs(vec![y]);
        let model = Model::from_graph(what, g).expect("model");
        let what = format!("{what} of {shape:?}");
        if KernelConfig::host(1).is_some() {
            let (_, text) = target_stage(&model, KernelConfig::host(1));
            let calls = text.matches("call extern \"heron_map_f32\"").count();
            assert_eq!(calls, usize::from(routine), "{what}:\n{text}");
            // Without vectors the routine would be a scalar loop.
            let scalar = KernelConfig::host(1).map(|c| KernelConfig { isa: heron_kernels::Isa::Scalar, ..c });
            let (_, text) = target_stage(&model, scalar);
            assert!(!text.contains("heron_map_f32"), "{what} on the scalar ISA:\n{text}");
        }
        let mut data = values(n, 12).iter().map(|v| v * 10.0).collect::<Vec<_>>();
        data[7] = f32::NEG_INFINITY;
        data[n / 2] = f32::INFINITY;
        data[n - 1] = f32::NAN;
        let input = Tensor::from_vec(&shape, data).expect("input");
        agrees_with_the_interpreter_on_1_and_2_threads(&model, &input, &what);
    }
}
