//! VTA offload end to end: single int8 layers (ResNet-18's C1-C11, MobileNet's D1-D9 group
//! convolutions, a dilated convolution, a dense layer) and random convolutions run on the
//! simulated VTA must equal the CPU's integer form bit for bit, with `gemm_counter` equal to the
//! padded multiply-accumulates / (BATCH x BLOCK_IN x BLOCK_OUT); counters of a small model are
//! checked against hand-computed values; non-default hardware configurations give the same bits;
//! malformed configurations and impossible tilings are clear errors or stated reasons.

use heron_ir::{ConvAttrs, DType, Graph, Op, Tensor, TensorType, Window};
use heron_runtime::{CompileOptions, Compiler, HwConfig, Model, VtaStats};
use proptest::prelude::*;

/// Deterministic pseudo-random integers in `lo..=hi`.
fn ints(seed: u64, n: usize, lo: i64, hi: i64) -> Vec<i64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (s % (hi - lo + 1) as u64) as i64
        })
        .collect()
}

fn i8s(seed: u64, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, ints(seed, n, -128, 127).into_iter().map(|v| v as i8).collect()).unwrap()
}

#[derive(Clone, Copy, Debug)]
struct Conv {
    n: usize,
    c: usize,
    hw: (usize, usize),
    o: usize,
    k: (usize, usize),
    stride: usize,
    pad: usize,
    dilation: usize,
    groups: usize,
}

impl Conv {
    fn square(hw: usize, c: usize, o: usize, k: usize, pad: usize, stride: usize) -> Conv {
        Conv { n: 1, c, hw: (hw, hw), o, k: (k, k), stride, pad, dilation: 1, groups: 1 }
    }

    fn out(&self) -> (usize, usize) {
        let o = |x: usize, k: usize| (x + 2 * self.pad - self.dilation * (k - 1) - 1) / self.stride + 1;
        (o(self.hw.0, self.k.0), o(self.hw.1, self.k.1))
    }

    /// `gemm_counter`, computed from the definition: one GEMM micro-op per (batch block,
    /// output block, output pixel, input block, kernel tap), channels padded to whole blocks
    /// per group.
    fn gemm_ops(&self, c: &HwConfig) -> u64 {
        let (oh, ow) = self.out();
        let (cg, og) = (self.c / self.groups, self.o / self.groups);
        let blocks = |x: usize, b: usize| x.div_ceil(b) as u64;
        blocks(self.n, c.batch())
            * self.groups as u64
            * blocks(og, c.block_out())
            * (oh * ow) as u64
            * blocks(cg, c.block_in())
            * (self.k.0 * self.k.1) as u64
    }
}

fn zero_points(g: &mut Graph) -> (heron_ir::ValueId, heron_ir::ValueId) {
    let zero = || Tensor::from_vec::<i8>(&[], vec![0]).unwrap();
    (g.add_constant("x_zero_point", zero()), g.add_constant("w_zero_point", zero()))
}

/// `ConvInteger(x, w) + bias -> Requantize(shift, 0..=127)` with random int8 data and an
/// int8 graph input and output, and its input.
fn conv_model(s: &Conv, shift: i32, seed: u64) -> (Model, Tensor) {
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::I8, vec![s.n, s.c, s.hw.0, s.hw.1]));
    let w = g.add_constant("w", i8s(seed, &[s.o, s.c / s.groups, s.k.0, s.k.1]));
    let bias: Vec<i32> = ints(seed + 1, s.o, -(1 << 14), 1 << 14).into_iter().map(|v| v as i32).collect();
    let b = g.add_constant("b", Tensor::from_vec(&[s.o, 1, 1], bias).unwrap());
    let mut window = Window::dense(vec![s.k.0, s.k.1]);
    window.strides = vec![s.stride; 2];
    window.dilations = vec![s.dilation; 2];
    window.pads_begin = vec![s.pad; 2];
    window.pads_end = vec![s.pad; 2];
    let (zx, zw) = zero_points(&mut g);
    let acc = g.add_op("conv", Op::ConvInteger(ConvAttrs { window, group: s.groups }), &[x, w, zx, zw]).unwrap();
    let biased = g.add_op("bias", Op::Binary(heron_ir::BinaryOp::Add), &[acc, b]).unwrap();
    let y = g.add_op("y", Op::Requantize { shift, min: 0, max: 127 }, &[biased]).unwrap();
    g.set_outputs(vec![y]);
    (Model::from_graph("conv", g).unwrap(), i8s(seed + 2, &[s.n, s.c, s.hw.0, s.hw.1]))
}

/// Runs `model` on the CPU and on VTA; returns both outputs and the VTA run's stats.
fn cpu_and_vta(model: &Model, input: &Tensor, config: HwConfig) -> (Tensor, Tensor, VtaStats) {
    let cpu = Compiler::new(CompileOptions { threads: 1, ..CompileOptions::default() }).compile(model).unwrap();
    let want = cpu.run(std::slice::from_ref(input)).unwrap().remove(0);
    let options = CompileOptions { threads: 1, vta: Some(config), ..CompileOptions::default() };
    let vta = Compiler::new(options).compile(model).unwrap();
    let mut ws = vta.workspace().unwrap();
    ws.take_vta_stats();
    let got = vta.run_with(&mut ws, std::slice::from_ref(input)).unwrap().remove(0);
    let stats = ws.take_vta_stats().unwrap();
    (want, got, stats)
}

fn check_conv(name: &str, s: Conv, config: HwConfig) {
    let (model, x) = conv_model(&s, 8, 7);
    let (want, got, stats) = cpu_and_vta(&model, &x, config);
    assert_eq!(stats.calls.len(), 1, "{name}: one region");
    assert_eq!(got, want, "{name}: VTA differs from the CPU");
    let p = stats.profile.unwrap();
    assert_eq!(p.gemm_counter, s.gemm_ops(&config), "{name}: gemm_counter");
}

/// ResNet-18's convolutions: C1 (the 3-channel first layer, padded to a block) and C2-C11
/// (VTA-FACTS 8.2).
#[test]
fn resnet18_layers_equal_the_cpu() {
    let layers = [
        ("C1", Conv::square(224, 3, 64, 7, 3, 2)),
        ("C2", Conv::square(56, 64, 64, 3, 1, 1)),
        ("C3", Conv::square(56, 64, 128, 3, 1, 2)),
        ("C4", Conv::square(56, 64, 128, 1, 0, 2)),
        ("C5", Conv::square(28, 128, 128, 3, 1, 1)),
        ("C6", Conv::square(28, 128, 256, 3, 1, 2)),
        ("C7", Conv::square(28, 128, 256, 1, 0, 2)),
        ("C8", Conv::square(14, 256, 256, 3, 1, 1)),
        ("C9", Conv::square(14, 256, 512, 3, 1, 2)),
        ("C10", Conv::square(14, 256, 512, 1, 0, 2)),
        ("C11", Conv::square(7, 512, 512, 3, 1, 1)),
    ];
    for (name, s) in layers {
        check_conv(name, s, HwConfig::default());
    }
}

/// MobileNet's group convolutions D1-D9: 16 input channels per group, one block each.
#[test]
fn mobilenet_group_convolutions_equal_the_cpu() {
    let layers = [
        ("D1", 112, 32, 2, 1),
        ("D2", 112, 64, 4, 2),
        ("D3", 56, 128, 8, 1),
        ("D4", 56, 128, 8, 2),
        ("D5", 28, 256, 16, 1),
        ("D6", 28, 256, 16, 2),
        ("D7", 14, 512, 32, 1),
        ("D8", 14, 512, 32, 2),
        ("D9", 7, 1024, 64, 1),
    ];
    for (name, hw, c, groups, stride) in layers {
        check_conv(name, Conv { groups, ..Conv::square(hw, c, c, 3, 1, stride) }, HwConfig::default());
    }
}

#[test]
fn dilated_convolution_equals_the_cpu() {
    let s = Conv { dilation: 2, ..Conv::square(20, 24, 40, 3, 2, 1) };
    check_conv("dilated", s, HwConfig::default());
}

#[test]
fn dense_layer_equals_the_cpu() {
    let (m, k, n) = (3, 200, 130);
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::I8, vec![m, k]));
    let w = g.add_constant("w", i8s(3, &[k, n]));
    let bias: Vec<i32> = ints(4, n, -5000, 5000).into_iter().map(|v| v as i32).collect();
    let b = g.add_constant("b", Tensor::from_vec(&[n], bias).unwrap());
    let (zx, zw) = zero_points(&mut g);
    let acc = g.add_op("dense", Op::MatMulInteger, &[x, w, zx, zw]).unwrap();
    let biased = g.add_op("bias", Op::Binary(heron_ir::BinaryOp::Add), &[acc, b]).unwrap();
    let y = g.add_op("y", Op::Requantize { shift: 9, min: -128, max: 127 }, &[biased]).unwrap();
    g.set_outputs(vec![y]);
    let model = Model::from_graph("dense", g).unwrap();
    let config = HwConfig::default();
    let (want, got, stats) = cpu_and_vta(&model, &i8s(5, &[m, k]), config);
    assert_eq!(got, want);
    // m rows of one batch lane each, 13 input blocks, 9 output blocks.
    assert_eq!(stats.profile.unwrap().gemm_counter, 3 * 13 * 9);
}

/// Every counter of a one-tile convolution, by hand: 1x16x4x4 -> 16, 1x1 kernel, bias, shift 8.
#[test]
fn counters_of_a_small_model_match_hand_computed_values() {
    let s = Conv::square(4, 16, 16, 1, 0, 1);
    let (model, x) = conv_model(&s, 8, 11);
    let (want, got, stats) = cpu_and_vta(&model, &x, HwConfig::default());
    assert_eq!(got, want);
    let p = stats.profile.unwrap();
    // One tile: 16 input elements (16 bytes each), one weight element (256 bytes), one bias
    // element (64 bytes), 16 output elements (16 bytes each).
    assert_eq!(p.inp_load_nbytes, 16 * 16);
    assert_eq!(p.wgt_load_nbytes, 256);
    assert_eq!(p.acc_load_nbytes, 64);
    assert_eq!(p.out_store_nbytes, 16 * 16);
    // 16 pixels x 1 block x 1 tap.
    assert_eq!(p.gemm_counter, 16);
    // Micro-ops, 4 bytes each: one for resets and immediates, one for the bias add, and the
    // GEMM kernel's 4 (one per output column; its inner loop steps over the 4 rows).
    assert_eq!(p.uop_load_nbytes, (2 + 4) * 4);
    // ALU over the 16 accumulators: bias add, then shift 8 as SHR 1 / ADD 64 / SHR 7, then
    // MAX 0 and MIN 127.
    assert_eq!(p.alu_counter, 16 * 6);
}

fn config(log_batch: u32, log_block: u32, inp: u32, wgt: u32, acc: u32) -> HwConfig {
    HwConfig {
        log_batch,
        log_block_in: log_block,
        log_block_out: log_block,
        log_inp_buff_size: inp,
        log_wgt_buff_size: wgt,
        log_acc_buff_size: acc,
        ..HwConfig::default()
    }
}

/// BATCH 2 and BLOCK 32 (other SRAM sizes): the same bits.
#[test]
fn non_default_configurations_give_the_same_bits() {
    let batch2 = config(1, 4, 15, 18, 18);
    let block32 = config(0, 5, 16, 20, 18);
    for (k, c) in [batch2, block32].into_iter().enumerate() {
        c.validate().unwrap();
        check_conv(&format!("C5 on config {k}"), Conv::square(28, 128, 128, 3, 1, 1), c);
        check_conv(&format!("odd channels on config {k}"), Conv { n: 3, ..Conv::square(9, 20, 37, 3, 1, 2) }, c);
    }
}

#[test]
fn malformed_configurations_are_clear_errors() {
    use heron_runtime::vta::hw_config_from_json;
    let ok = r#"{"TARGET": "sim", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5,
        "LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_UOP_BUFF_SIZE": 15, "LOG_INP_BUFF_SIZE": 15,
        "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17}"#;
    assert_eq!(hw_config_from_json(ok).unwrap(), HwConfig::default());
    for (bad, why) in [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        (&ok.replace("\"LOG_BLOCK\": 4,", "") as &str, "LOG_BLOCK is missing"),
        (&ok.replace("\"LOG_BATCH\": 0", "\"LOG_BATCH\": -1"), "LOG_BATCH"),
        (&ok.replace("\"LOG_INP_WIDTH\": 3", "\"LOG_INP_WIDTH\": 4"), "8-bit"),
        (&ok.replace("\"LOG_ACC_BUFF_SIZE\": 17", "\"LOG_ACC_BUFF_SIZE\": 16"), "32"),
    ] {
        let e = hw_config_from_json(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

/// A convolution whose smallest tile does not fit the SRAMs stays on the CPU with the reason,
/// and the model still runs (on the CPU) with the same bits.
#[test]
fn impossible_tilings_leave_the_region_on_the_cpu_with_a_reason() {
    // A 15x15 kernel needs 225 weight elements per block pair; a WGT SRAM of 128 cannot.
    let tiny = config(0, 4, 17, 15, 18);
    tiny.validate().unwrap();
    let s = Conv::square(20, 16, 16, 15, 7, 1);
    let (model, x) = conv_model(&s, 6, 3);
    let pipeline = heron_runtime::pipeline::Pipeline::new(heron_runtime::pipeline::PipelineOptions {
        vta: Some(tiny),
        ..Default::default()
    });
    let (graph, partition) = pipeline.partition(&model).unwrap();
    assert!(partition.regions.is_empty());
    let text = heron_vta_compiler::partition::Display { partition: &partition, graph: &graph }.to_string();
    assert!(text.contains("no tiling fits the SRAMs"), "{text}");
    let (want, got, stats) = cpu_and_vta(&model, &x, tiny);
    assert_eq!(got, want);
    assert!(stats.calls.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random convolutions (channels not multiples of 16, strides 1-2, pads 0-3, kernels 1-7,
    /// random requantization): VTA == CPU.
    #[test]
    fn random_convolutions_equal_the_cpu(
        c in 1usize..40, o in 1usize..40, k in 1usize..=7, stride in 1usize..=2, pad in 0usize..=3,
        extra in 0usize..6, n in 1usize..=2, shift in -3i32..=14, seed in 0u64..1000,
    ) {
        let pad = pad.min(k - 1);
        let hw = (k + extra).max(1);
        let s = Conv { n, c, hw: (hw, hw + 1), o, k: (k, k), stride, pad, dilation: 1, groups: 1 };
        let (model, x) = conv_model(&s, shift, seed);
        let (want, got, stats) = cpu_and_vta(&model, &x, HwConfig::default());
        prop_assert_eq!(got, want);
        prop_assert_eq!(stats.profile.unwrap().gemm_counter, s.gemm_ops(&HwConfig::default()));
    }
}

/// The quantized ResNet-18: the JIT's VTA run equals the CPU's bit for bit, and the C example
/// `aot/examples/vta_offload` runs it compiled with `--target vta` from plain C (libheron_vta.a's
/// session and context) with the same bits and counters.
#[test]
fn aot_c_program_runs_the_quantized_resnet18_like_the_jit() {
    use heron_ir::npy::read_npy;
    use heron_ir::quantize::{QuantizeOptions, quantize_model};
    use std::process::Command;
    let tmp = tempfile::Builder::new().prefix("heron-vta-aot-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let reference = heron_ir::testing::shared_dir().join("reference");
    let input = read_npy(&reference.join("resnet18.input.npy")).unwrap();
    let float = std::fs::read(reference.join("resnet18.onnx")).unwrap();
    let (bytes, _) = quantize_model(&float, &[vec![input.clone()]], &QuantizeOptions::default()).unwrap();
    std::fs::write(dir.join("r18q.onnx"), bytes).unwrap();
    let model = Model::load(dir.join("r18q.onnx")).unwrap();

    let options = CompileOptions { threads: 1, vta: Some(HwConfig::default()), ..CompileOptions::default() };
    let compiler = Compiler::new(options);
    let jit = compiler.compile(&model).unwrap();
    let mut ws = jit.workspace().unwrap();
    ws.take_vta_stats();
    let want = jit.run_with(&mut ws, std::slice::from_ref(&input)).unwrap().remove(0);
    let counters = ws.take_vta_stats().unwrap().profile.unwrap().to_json();

    let cpu = Compiler::new(CompileOptions { threads: 1, ..CompileOptions::default() }).compile(&model).unwrap();
    assert_eq!(cpu.run(std::slice::from_ref(&input)).unwrap()[0], want, "VTA differs from the CPU");

    let artifacts = compiler.compile_aot(&model, &heron_aot::AotOptions::new("r18")).unwrap();
    assert_eq!(artifacts.metadata.routines, ["heron_vta_region"]);
    artifacts.write(&dir).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(root.join("vta-backend/include/heron_vta.h"), dir.join("heron_vta.h")).unwrap();
    let exe = dir.join("vta_offload");
    let vta = heron_ir::testing::static_library("heron_vta");
    let example = root.join("aot/examples/vta_offload/main.c");
    heron_aot::link::build_c_program_with_runtime(&[&example], &[&dir.join("r18.o")], Some(&vta), &dir, &exe)
        .expect("cc");
    heron_ir::npy::write_npy(&dir.join("in.npy"), &input).unwrap();
    let run = Command::new(&exe)
        .arg(dir.join("r18.vta_constants.params"))
        .arg(dir.join("in.npy"))
        .arg(dir.join("out.bin"))
        .output()
        .unwrap();
    assert!(run.status.success(), "the C program failed: {}", String::from_utf8_lossy(&run.stderr));
    let got = Tensor::from_le_bytes(&want.tensor_type(), &std::fs::read(dir.join("out.bin")).unwrap()).unwrap();
    assert_eq!(got, want, "the C program's output differs from the JIT's VTA run");
    let printed = String::from_utf8_lossy(&run.stdout);
    assert!(printed.contains(&counters), "counters: C printed {printed}, the JIT run had {counters}");
    // Loaded in-process, the object gets a thread pool's context, which lists the kernels and
    // not the region routine: the entry's id check refuses the call instead of calling a
    // kernel with a region's arguments.
    let loaded = Model::load_aot(&dir).unwrap();
    let err = loaded.run(std::slice::from_ref(&input)).unwrap_err().to_string();
    assert!(err.contains("heron_vta_region") && err.contains("does not provide"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A quantized model as `heron quantize` writes it (power-of-two scales) and the same with float
/// scales (as ONNX Runtime's `quantize_static` writes them): the first offloads its layers, the
/// second stays on the CPU with the reason; each gives the same bits on both targets.
#[test]
fn quantized_models_offload_what_vta_runs_exactly() {
    use heron_ir::quantize::{QuantizeOptions, ScaleKind, quantize_model};
    let x = |seed| {
        let v: Vec<f32> = ints(seed, 192, -300, 300).into_iter().map(|v| v as f32 / 100.0).collect();
        Tensor::from_vec(&[1, 3, 8, 8], v).unwrap()
    };
    let tmp = tempfile::Builder::new().prefix("heron-vta-qdq-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    for (scales, regions) in [(ScaleKind::Pow2, 4), (ScaleKind::Float, 0)] {
        let options = QuantizeOptions { scales, ..QuantizeOptions::default() };
        let (bytes, _) = quantize_model(&heron_ir::testing::onnx::small_cnn(), &[vec![x(1)]], &options).unwrap();
        let path = dir.join("q.onnx");
        std::fs::write(&path, bytes).unwrap();
        let model = Model::load(&path).unwrap();
        let pipeline = heron_runtime::pipeline::Pipeline::new(heron_runtime::pipeline::PipelineOptions {
            vta: Some(HwConfig::default()),
            ..Default::default()
        });
        let (graph, partition) = pipeline.partition(&model).unwrap();
        let text = heron_vta_compiler::partition::Display { partition: &partition, graph: &graph }.to_string();
        assert_eq!(partition.regions.len(), regions, "{text}");
        if regions == 0 {
            assert!(text.contains("stays in float (VTA cannot run it exactly)"), "{text}");
        }
        for seed in 2..4 {
            let (want, got, stats) = cpu_and_vta(&model, &x(seed), HwConfig::default());
            assert_eq!(got, want, "{text}");
            assert_eq!(stats.calls.len(), regions);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One compiled model, workspaces on several threads: each runs on its own device session and
/// gets the CPU's bits.
#[test]
fn workspaces_on_several_threads_run_on_their_own_devices() {
    let s = Conv::square(14, 32, 48, 3, 1, 1);
    let (model, x) = conv_model(&s, 7, 5);
    let cpu = Compiler::new(CompileOptions { threads: 1, ..CompileOptions::default() }).compile(&model).unwrap();
    let want = cpu.run(std::slice::from_ref(&x)).unwrap();
    let options = CompileOptions { threads: 1, vta: Some(HwConfig::default()), ..CompileOptions::default() };
    let vta = Compiler::new(options).compile(&model).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                let mut ws = vta.workspace().unwrap();
                for _ in 0..3 {
                    assert_eq!(vta.run_with(&mut ws, std::slice::from_ref(&x)).unwrap(), want);
                }
            });
        }
    });
}

/// The quantized mobilenet_ish end to end (depthwise convolutions on the CPU between VTA
/// regions, reading and writing packed tensors): VTA == CPU.
#[test]
fn quantized_mobilenet_ish_equals_the_cpu() {
    use heron_ir::npy::read_npy;
    use heron_ir::quantize::{QuantizeOptions, quantize_model};
    let reference = heron_ir::testing::shared_dir().join("reference");
    let input = read_npy(&reference.join("mobilenet_ish.input.npy")).unwrap();
    let float = std::fs::read(reference.join("mobilenet_ish.onnx")).unwrap();
    let (bytes, _) = quantize_model(&float, &[vec![input.clone()]], &QuantizeOptions::default()).unwrap();
    let tmp = tempfile::Builder::new().prefix("heron-vta-mobilenet-").tempdir().unwrap();
    let path = tmp.path().join("file.onnx");
    std::fs::write(&path, bytes).unwrap();
    let model = Model::load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let (want, got, stats) = cpu_and_vta(&model, &input, HwConfig::default());
    assert_eq!(got, want);
    assert!(stats.calls.len() >= 8, "{} regions", stats.calls.len());
}
