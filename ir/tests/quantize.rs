//! `heron_ir::quantize`: a float CNN (conv, relu, residual add, max pool, global average pool,
//! dense) quantized to QDQ: what gets quantized, power-of-two scales, int8 weights and int32
//! biases, per-channel scales, skipped nodes, the global-scale mode, clear errors, the output
//! close to the float model's, and the same bytes on every run.

use heron_ir::onnx::proto::{ModelProto, NodeProto};
use heron_ir::onnx::{ImportOptions, import_model, tensor_from_proto};
use heron_ir::quantize::{Calibration, QuantizeOptions, ScaleKind, quantize_model};
use heron_ir::tensor::Tensor;
use heron_ir::testing::data;
use heron_ir::testing::onnx::{OnnxModel, small_cnn};
use heron_ir::{DType, interp};
use prost::Message;

fn f32s(seed: u64, shape: &[usize], scale: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, data(seed, n).into_iter().map(|v| v * scale).collect()).unwrap()
}

fn calibration() -> Vec<Vec<Tensor>> {
    (0..3).map(|k| vec![f32s(10 + k, &[1, 3, 8, 8], 2.0)]).collect()
}

fn nodes(bytes: &[u8]) -> (Vec<NodeProto>, Vec<(String, Tensor)>) {
    let model = ModelProto::decode(bytes).unwrap();
    let g = model.graph.unwrap();
    let inits = g.initializer.iter().map(|t| (t.name.clone(), tensor_from_proto(t).unwrap())).collect();
    (g.node, inits)
}

fn init<'a>(inits: &'a [(String, Tensor)], name: &str) -> &'a Tensor {
    &inits.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no initializer {name}")).1
}

fn run(bytes: &[u8], x: &Tensor) -> Tensor {
    let g = import_model(bytes, &ImportOptions::default()).expect("the model imports");
    interp::run(&g, std::slice::from_ref(x)).unwrap().remove(0)
}

#[test]
fn a_cnn_becomes_qdq_with_power_of_two_scales_int8_weights_and_int32_biases() {
    let (bytes, report) = quantize_model(&small_cnn(), &calibration(), &QuantizeOptions::default()).unwrap();
    assert_eq!(report.anchors, ["conv_0", "conv_2", "gemm_8"]);
    // x, conv1's relu output, conv2's output (an add follows, not a relu), the relu after the
    // add, the max pool, the pooled mean, the dense layer's input and output.
    let names: Vec<&str> = report.activations.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x", "r1", "c2", "r2", "p", "g", "f", "y"]);
    let (nodes, inits) = nodes(&bytes);
    for (name, s) in &report.activations {
        assert_eq!(s.log2().fract(), 0.0, "{name}: scale {s} is not a power of two");
    }
    for anchor in ["conv_0", "conv_2", "gemm_8"] {
        let n = nodes.iter().find(|n| n.name == anchor).unwrap();
        for input in &n.input {
            let producer = nodes.iter().find(|p| p.output.contains(input));
            assert_eq!(producer.map(|p| p.op_type.as_str()), Some("DequantizeLinear"), "{anchor} input {input}");
        }
    }
    for w in ["w1", "w2", "wd"] {
        let q = init(&inits, &format!("{w}_quantized"));
        assert_eq!(q.dtype(), DType::I8);
        assert!(q.to_i64_vec().unwrap().iter().all(|v| v.abs() <= 127));
        let s = init(&inits, &format!("{w}_scale")).to_f64_vec()[0];
        assert_eq!(s.log2().fract(), 0.0);
    }
    // Bias at scale s_x * s_w, so requantization is a shift.
    let b1 = init(&inits, "b1_quantized");
    assert_eq!(b1.dtype(), DType::I32);
    let s_x = report.activations[0].1 as f64;
    let s_w = init(&inits, "w1_scale").to_f64_vec()[0];
    assert_eq!(init(&inits, "b1_scale").to_f64_vec()[0], s_x * s_w);
    assert!(
        inits.iter().all(|(n, _)| !["w1", "w2", "wd", "b1", "b2", "bd"].contains(&n.as_str())),
        "float weights dropped"
    );
    // Close to the float model, and the same bytes every time.
    let x = f32s(20, &[1, 3, 8, 8], 2.0);
    let (want, got) = (run(&small_cnn(), &x).to_f64_vec(), run(&bytes, &x).to_f64_vec());
    let range = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let err = want.iter().zip(&got).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= 0.1 * range, "quantization error {err} against output range {range}");
    assert_eq!(quantize_model(&small_cnn(), &calibration(), &QuantizeOptions::default()).unwrap().0, bytes);
}

#[test]
fn per_channel_scales_skipped_nodes_and_percentiles() {
    let options = QuantizeOptions { per_channel: true, skip: vec!["conv_2".into()], ..QuantizeOptions::default() };
    let (bytes, report) = quantize_model(&small_cnn(), &calibration(), &options).unwrap();
    assert_eq!(report.anchors, ["conv_0", "gemm_8"]);
    assert!(report.left_float.contains(&("conv_2".into(), "--skip".into())));
    let (nodes, inits) = nodes(&bytes);
    assert_eq!(init(&inits, "w1_scale").shape(), [8]);
    assert_eq!(init(&inits, "wd_scale").shape(), [4]);
    let dq = nodes.iter().find(|n| n.output == ["w1_dequantized"]).unwrap();
    assert!(dq.attribute.iter().any(|a| a.name == "axis" && a.i == 0));
    assert!(init(&inits, "w2").dtype() == DType::F32, "the skipped conv keeps its float weight");
    run(&bytes, &f32s(20, &[1, 3, 8, 8], 2.0));
    let pct = QuantizeOptions { calibration: Calibration::Percentile(99.0), ..QuantizeOptions::default() };
    let (_, low) = quantize_model(&small_cnn(), &calibration(), &pct).unwrap();
    let (_, max) = quantize_model(&small_cnn(), &calibration(), &QuantizeOptions::default()).unwrap();
    assert!(low.activations.iter().zip(&max.activations).all(|(a, b)| a.1 <= b.1), "{low:?}\n{max:?}");
    assert!(low.activations.iter().zip(&max.activations).any(|(a, b)| a.1 < b.1));
}

#[test]
fn global_scale_needs_no_calibration_and_errors_are_clear() {
    let global = QuantizeOptions { global_scale: Some(8.0), ..QuantizeOptions::default() };
    let (_, report) = quantize_model(&small_cnn(), &[], &global).unwrap();
    assert!(report.activations.iter().all(|(_, s)| *s == 1.0 / 16.0));
    let err = |options: &QuantizeOptions, calibration: &[Vec<Tensor>]| {
        quantize_model(&small_cnn(), calibration, options).unwrap_err().to_string()
    };
    assert!(err(&QuantizeOptions::default(), &[]).contains("no calibration data"));
    let odd = QuantizeOptions { global_scale: Some(6.0), ..QuantizeOptions::default() };
    assert!(err(&odd, &[]).contains("not a power of two"));
    let float = QuantizeOptions { global_scale: Some(6.0), scales: ScaleKind::Float, ..QuantizeOptions::default() };
    quantize_model(&small_cnn(), &[], &float).unwrap();
    let pct = QuantizeOptions { calibration: Calibration::Percentile(0.0), ..QuantizeOptions::default() };
    assert!(err(&pct, &calibration()).contains("percentile"));
    let wrong = vec![vec![f32s(1, &[1, 3, 4, 4], 1.0)]];
    assert!(err(&QuantizeOptions::default(), &wrong).contains("calibration input 0"));
    let mut old = OnnxModel::new(9);
    old.input("x", DType::F32, &[1, 4]).node("Relu", &["x"], &["y"], vec![]).output("y");
    let e = quantize_model(&old.to_bytes(), &[], &global).unwrap_err().to_string();
    assert!(e.contains("opset 9"), "{e}");
}

#[test]
fn requantize_rounds_half_up_and_clips() {
    use heron_ir::Op;
    let x = Tensor::from_vec::<i32>(&[8], vec![5, 6, -6, -2, 1000, -1000, 7, -7]).unwrap();
    let run = |op: &Op| interp::eval_op(op, &[&x]).unwrap().remove(0).to_i64_vec().unwrap();
    // 1.25 -> 1, 1.5 -> 2, -1.5 -> -1, -0.5 -> 0, 250 -> 127, -250 -> -128, 1.75 -> 2, -1.75 -> -2.
    assert_eq!(run(&Op::Requantize { shift: 2, min: -128, max: 127 }), [1, 2, -1, 0, 127, -128, 2, -2]);
    assert_eq!(run(&Op::Requantize { shift: 2, min: 0, max: 127 }), [1, 2, 0, 0, 127, 0, 2, 0]);
    assert_eq!(run(&Op::Requantize { shift: -1, min: -128, max: 127 }), [10, 12, -12, -4, 127, -128, 14, -14]);
    let mut g = heron_ir::Graph::new();
    let v = g.add_input("x", heron_ir::TensorType::new(DType::I32, vec![8]));
    for bad in [Op::Requantize { shift: 32, min: 0, max: 1 }, Op::Requantize { shift: 1, min: -129, max: 1 }] {
        assert!(g.add_op("r", bad, &[v]).is_err());
    }
}

#[test]
fn weights_shared_through_identity_nodes_are_quantized() {
    // torchvision exports route shared biases through Identity nodes.
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[1, 2, 4, 4])
        .initializer("w", &f32s(1, &[4, 2, 1, 1], 0.5))
        .initializer("b", &f32s(2, &[4], 0.1))
        .node("Identity", &["b"], &["b_shared"], vec![])
        .node("Conv", &["x", "w", "b_shared"], &["y"], vec![])
        .output("y");
    let calibration = vec![vec![f32s(3, &[1, 2, 4, 4], 1.0)]];
    let (bytes, report) = quantize_model(&m.to_bytes(), &calibration, &QuantizeOptions::default()).unwrap();
    assert_eq!(report.anchors, ["conv_1"]);
    let (nodes, inits) = nodes(&bytes);
    let conv = nodes.iter().find(|n| n.op_type == "Conv").unwrap();
    assert_eq!(conv.input[2], "b_dequantized");
    assert_eq!(init(&inits, "b_quantized").dtype(), DType::I32);
    assert!(nodes.iter().all(|n| n.op_type != "Identity"));
    // The graph output keeps its name, now on the DequantizeLinear.
    assert_eq!(nodes.last().map(|n| (n.op_type.as_str(), n.output[0].as_str())), Some(("DequantizeLinear", "y")));
    run(&bytes, &f32s(4, &[1, 2, 4, 4], 1.0));
}

/// `Conv -> BatchNormalization -> Clip(0, 6)`: the batch norm is folded into the convolution
/// before quantizing (the float function unchanged), the activation is quantized after the
/// Clip, and the integer form fuses the Clip into the requantization's range.
#[test]
fn batch_norms_fold_and_clips_fuse() {
    let mut m = OnnxModel::new(13);
    let positive =
        |seed, n| Tensor::from_vec(&[n], data(seed, n).into_iter().map(|v| v.abs() + 0.5).collect()).unwrap();
    m.input("x", DType::F32, &[1, 3, 8, 8])
        .initializer("w", &f32s(1, &[8, 3, 3, 3], 0.5))
        .initializer("gamma", &positive(2, 8))
        .initializer("beta", &f32s(3, &[8], 0.2))
        .initializer("mean", &f32s(4, &[8], 0.1))
        .initializer("var", &positive(5, 8))
        .initializer("lo", &Tensor::from_vec::<f32>(&[], vec![0.0]).unwrap())
        .initializer("hi", &Tensor::from_vec::<f32>(&[], vec![6.0]).unwrap())
        .node("Conv", &["x", "w"], &["c"], vec![heron_ir::testing::onnx::attr_ints("pads", &[1, 1, 1, 1])])
        .node("BatchNormalization", &["c", "gamma", "beta", "mean", "var"], &["n"], vec![])
        .node("Clip", &["n", "lo", "hi"], &["y"], vec![])
        .output("y");
    let float = m.to_bytes();
    let (bytes, report) = quantize_model(&float, &calibration(), &QuantizeOptions::default()).unwrap();
    assert_eq!(report.folded_batch_norms, 1);
    let (nodes, _) = nodes(&bytes);
    assert!(nodes.iter().all(|n| n.op_type != "BatchNormalization"));
    let names: Vec<&str> = report.activations.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x", "y"], "quantized after the Clip");
    let mut g = import_model(&bytes, &ImportOptions::default()).unwrap();
    heron_ir::passes::optimize(&mut g);
    let requant: Vec<_> = g
        .nodes
        .iter()
        .filter_map(|n| match n.op {
            heron_ir::Op::Requantize { min, max, .. } => Some((min, max)),
            _ => None,
        })
        .collect();
    let step = report.activations[1].1;
    assert_eq!(requant, [(0, (6.0 / step) as i32)], "the Clip is the requantization's range");
    for seed in 20..23 {
        let x = f32s(seed, &[1, 3, 8, 8], 2.0);
        let (want, got) =
            (run(&float, &x).to_f64_vec(), interp::run(&g, std::slice::from_ref(&x)).unwrap()[0].to_f64_vec());
        let worst = want.iter().zip(&got).map(|(w, g)| (w - g).abs()).fold(0.0, f64::max);
        assert!(worst <= 0.5, "integer form off by {worst} (step {step})");
    }
}
