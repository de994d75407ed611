//! ONNX import details: schema-version dispatch, initializer encodings, constant specialisation.

use std::collections::HashMap;

use heron_ir::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto, tensor_shape_proto, type_proto,
};
use heron_ir::onnx::{ImportOptions, import_model, schema_version, tensor_to_proto};
use heron_ir::{Op, Tensor, interp, verify};
use prost::Message;

fn value_info(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension { value: Some(tensor_shape_proto::dimension::Value::DimValue(d)) })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: 7, ints: v.to_vec(), ..Default::default() }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: 2, i: v, ..Default::default() }
}

fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: 1, f: v, ..Default::default() }
}

fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: 3, s: v.as_bytes().to_vec(), ..Default::default() }
}

/// One-input model: x: f32 `dims` -> nodes -> y.
fn model(opset: i64, dims: &[i64], nodes: Vec<NodeProto>, inits: Vec<TensorProto>) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: opset }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: inits,
            input: vec![value_info("x", 1, dims)],
            output: vec![ValueInfoProto { name: "y".into(), r#type: None }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn run(bytes: &[u8], x: Tensor) -> Tensor {
    let g = import_model(bytes, &ImportOptions::default()).unwrap();
    verify(&g).unwrap();
    interp::run(&g, &[x]).unwrap().remove(0)
}

fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn assert_close(got: &Tensor, want: &[f64]) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "{got:?}");
    for (a, b) in g.iter().zip(want) {
        assert!((a - b).abs() < 1e-6, "got {g:?}, want {want:?}");
    }
}

#[test]
fn schema_versions_follow_each_ops_history() {
    assert_eq!(schema_version("Relu", 22), Some(14));
    assert_eq!(schema_version("Softmax", 12), Some(11));
    assert_eq!(schema_version("Softmax", 28), Some(13));
    assert_eq!(schema_version("Pad", 10), Some(2));
    assert_eq!(schema_version("Conv", 30), Some(22));
    assert_eq!(schema_version("NonZero", 13), Some(13));
    assert_eq!(schema_version("LSTM", 17), Some(14));
    assert_eq!(schema_version("Resize", 17), Some(13));
    assert_eq!(schema_version("Attention", 28), Some(25));
    assert_eq!(schema_version("TfIdfVectorizer", 13), None);
}

#[test]
fn softmax_before_13_normalises_over_the_flattened_tail() {
    let x = f32s(&[1, 2, 2], vec![0.0, 1.0, 2.0, 3.0]);
    let old = run(&model(11, &[1, 2, 2], vec![node("Softmax", &["x"], &["y"], vec![])], vec![]), x.clone());
    let e: Vec<f64> = (0..4).map(|i| (i as f64).exp()).collect();
    let s: f64 = e.iter().sum();
    assert_close(&old, &e.iter().map(|v| v / s).collect::<Vec<_>>());
    let new = run(&model(13, &[1, 2, 2], vec![node("Softmax", &["x"], &["y"], vec![])], vec![]), x);
    let pair = [1.0 / (1.0 + 1f64.exp()), 1f64.exp() / (1.0 + 1f64.exp())];
    assert_close(&new, &[pair[0], pair[1], pair[0], pair[1]]);
}

#[test]
fn clip_before_11_reads_attributes() {
    let m = model(10, &[4], vec![node("Clip", &["x"], &["y"], vec![float("min", -1.0), float("max", 0.5)])], vec![]);
    assert_close(&run(&m, f32s(&[4], vec![-3.0, -0.5, 0.25, 9.0])), &[-1.0, -0.5, 0.25, 0.5]);
}

#[test]
fn clip_from_11_reads_constant_inputs_and_constant_nodes() {
    let lo = tensor_to_proto("lo", &Tensor::scalar_from_f64(heron_ir::DType::F32, 0.0));
    let hi = AttributeProto {
        name: "value".into(),
        r#type: 4,
        t: Some(tensor_to_proto("", &Tensor::scalar_from_f64(heron_ir::DType::F32, 6.0))),
        ..Default::default()
    };
    let m = model(
        13,
        &[3],
        vec![node("Constant", &[], &["hi"], vec![hi]), node("Clip", &["x", "lo", "hi"], &["y"], vec![])],
        vec![lo],
    );
    assert_close(&run(&m, f32s(&[3], vec![-1.0, 3.0, 7.0])), &[0.0, 3.0, 6.0]);
    // Only an upper bound: the min input is left empty.
    let hi = AttributeProto { name: "value_float".into(), r#type: 1, f: 2.0, ..Default::default() };
    let m = model(
        13,
        &[3],
        vec![node("Constant", &[], &["hi"], vec![hi]), node("Clip", &["x", "", "hi"], &["y"], vec![])],
        vec![],
    );
    assert_close(&run(&m, f32s(&[3], vec![-1.0, 3.0, 7.0])), &[-1.0, 2.0, 2.0]);
}

#[test]
fn pad_version_2_reads_attributes() {
    let m = model(
        10,
        &[1, 3],
        vec![node("Pad", &["x"], &["y"], vec![ints("pads", &[0, 2, 0, 1]), string("mode", "reflect")])],
        vec![],
    );
    assert_close(&run(&m, f32s(&[1, 3], vec![1.0, 2.0, 3.0])), &[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
}

#[test]
fn squeeze_and_unsqueeze_before_13_read_attributes() {
    let m = model(
        11,
        &[1, 3, 1],
        vec![
            node("Squeeze", &["x"], &["s"], vec![ints("axes", &[0, -1])]),
            node("Unsqueeze", &["s"], &["y"], vec![ints("axes", &[1])]),
        ],
        vec![],
    );
    let y = run(&m, f32s(&[1, 3, 1], vec![1.0, 2.0, 3.0]));
    assert_eq!(y.shape(), &[3, 1]);
}

#[test]
fn old_dropout_with_ratio_attribute_is_identity() {
    let m = model(10, &[2], vec![node("Dropout", &["x"], &["y"], vec![float("ratio", 0.5)])], vec![]);
    assert_close(&run(&m, f32s(&[2], vec![1.0, -2.0])), &[1.0, -2.0]);
}

#[test]
fn reshape_resolves_zero_and_minus_one() {
    let shape = tensor_to_proto("shape", &Tensor::from_vec::<i64>(&[3], vec![0, -1, 2]).unwrap());
    let m = model(13, &[2, 3, 4], vec![node("Reshape", &["x", "shape"], &["y"], vec![])], vec![shape]);
    let g = import_model(&m, &ImportOptions::default()).unwrap();
    assert_eq!(g.nodes[0].op, Op::Reshape { shape: vec![2, 6, 2] });
}

#[test]
fn typed_initializer_fields_decode() {
    let mut w = TensorProto {
        name: "w".into(),
        dims: vec![3],
        data_type: 1,
        float_data: vec![1.0, 2.0, 3.0],
        ..Default::default()
    };
    let m = model(13, &[3], vec![node("Add", &["x", "w"], &["y"], vec![])], vec![w.clone()]);
    assert_close(&run(&m, f32s(&[3], vec![1.0, 1.0, 1.0])), &[2.0, 3.0, 4.0]);
    w.float_data.pop();
    let m = model(13, &[3], vec![node("Add", &["x", "w"], &["y"], vec![])], vec![w]);
    let e = import_model(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.contains("float_data has 2 values"), "{e}");
    let i8s =
        TensorProto { name: "q".into(), dims: vec![2], data_type: 3, int32_data: vec![-5, 7], ..Default::default() };
    assert_eq!(heron_ir::onnx::tensor_from_proto(&i8s).unwrap(), Tensor::from_vec::<i8>(&[2], vec![-5, 7]).unwrap());
    let i64s =
        TensorProto { name: "l".into(), dims: vec![1], data_type: 7, int64_data: vec![1 << 40], ..Default::default() };
    assert_eq!(
        heron_ir::onnx::tensor_from_proto(&i64s).unwrap(),
        Tensor::from_vec::<i64>(&[1], vec![1 << 40]).unwrap()
    );
}

#[test]
fn graph_input_with_initializer_is_a_constant() {
    let w = tensor_to_proto("w", &f32s(&[3], vec![1.0, 2.0, 3.0]));
    let mut bytes_model =
        ModelProto::decode(&model(13, &[3], vec![node("Mul", &["x", "w"], &["y"], vec![])], vec![w])[..]).unwrap();
    bytes_model.graph.as_mut().unwrap().input.push(value_info("w", 1, &[3]));
    let g = import_model(&bytes_model.encode_to_vec(), &ImportOptions::default()).unwrap();
    assert_eq!(g.inputs.len(), 1);
    assert_close(&interp::run(&g, &[f32s(&[3], vec![2.0, 2.0, 2.0])]).unwrap()[0], &[2.0, 4.0, 6.0]);
}

#[test]
fn supplied_values_specialise_only_inputs_that_must_be_constant() {
    let mut m =
        ModelProto::decode(&model(13, &[2, 3], vec![node("Reshape", &["x", "shape"], &["y"], vec![])], vec![])[..])
            .unwrap();
    m.graph.as_mut().unwrap().input.push(value_info("shape", 7, &[1]));
    let known = HashMap::from([
        ("shape".to_string(), Tensor::from_vec::<i64>(&[1], vec![-1]).unwrap()),
        ("x".to_string(), f32s(&[2, 3], vec![0.0; 6])),
    ]);
    let g =
        import_model(&m.encode_to_vec(), &ImportOptions { known_values: known, ..ImportOptions::default() }).unwrap();
    assert_eq!(g.inputs.len(), 1, "x stays a runtime input");
    assert_eq!(g.value(g.inputs[0]).name, "x");
    assert_eq!(g.ty(g.outputs[0]).shape, vec![6]);
}

#[test]
fn auto_pad_resolves_to_explicit_pads() {
    let w = tensor_to_proto("w", &f32s(&[1, 1, 2, 2], vec![1.0; 4]));
    let m = model(
        13,
        &[1, 1, 5, 5],
        vec![node("Conv", &["x", "w"], &["y"], vec![string("auto_pad", "SAME_LOWER"), ints("strides", &[2, 2])])],
        vec![w],
    );
    let g = import_model(&m, &ImportOptions::default()).unwrap();
    let Op::Conv(a) = &g.nodes[0].op else { panic!("conv expected") };
    // out = ceil(5 / 2) = 3; total pad = (3 - 1) * 2 + 2 - 5 = 1, SAME_LOWER puts it first.
    assert_eq!((a.window.pads_begin.clone(), a.window.pads_end.clone()), (vec![1, 1], vec![0, 0]));
    assert_eq!(g.ty(g.outputs[0]).shape, vec![1, 1, 3, 3]);
}

#[test]
fn variadic_max_folds_into_binary_nodes() {
    let a = tensor_to_proto("a", &f32s(&[1], vec![0.5]));
    let b = tensor_to_proto("b", &f32s(&[3], vec![-1.0, 4.0, 0.0]));
    let m = model(13, &[3], vec![node("Max", &["x", "a", "b"], &["y"], vec![])], vec![a, b]);
    assert_close(&run(&m, f32s(&[3], vec![1.0, 2.0, -3.0])), &[1.0, 4.0, 0.5]);
}

#[test]
fn maxpool_ceil_mode_and_indices() {
    let m = model(
        12,
        &[1, 1, 3, 3],
        vec![node(
            "MaxPool",
            &["x"],
            &["y", "idx"],
            vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2]), int("ceil_mode", 1)],
        )],
        vec![],
    );
    let mut proto = ModelProto::decode(&m[..]).unwrap();
    proto.graph.as_mut().unwrap().output.push(ValueInfoProto { name: "idx".into(), r#type: None });
    let g = import_model(&proto.encode_to_vec(), &ImportOptions::default()).unwrap();
    let out = interp::run(&g, &[f32s(&[1, 1, 3, 3], (1..=9).map(|v| v as f32).collect())]).unwrap();
    assert_close(&out[0], &[5.0, 6.0, 8.0, 9.0]);
    assert_eq!(out[1], Tensor::from_vec::<i64>(&[1, 1, 2, 2], vec![4, 5, 7, 8]).unwrap());
}

/// numpy's `fft`/`ifft` (with `n`) and `irfft` along axis `axis` of `[.., c]` data (c = 1 real,
/// 2 complex), as a direct O(n^2) sum in f64: the oracle for DFT and STFT.
fn reference_dft(x: &[f64], shape: &[usize], axis: usize, length: usize, inverse: bool, onesided: bool) -> Vec<f64> {
    let (r, c) = (shape.len(), shape[shape.len() - 1]);
    let n_in = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..r - 1].iter().product();
    let sample = |o: usize, n: usize, i: usize| -> (f64, f64) {
        if n >= n_in {
            return (0.0, 0.0);
        }
        let at = ((o * n_in + n) * inner + i) * c;
        (x[at], if c == 2 { x[at + 1] } else { 0.0 })
    };
    let (bins, c_out) = match (inverse, onesided) {
        (true, true) => (length, 1),
        (false, true) => (length / 2 + 1, 2),
        _ => (length, 2),
    };
    let mut y = vec![0.0; outer * bins * inner * c_out];
    for o in 0..outer {
        for i in 0..inner {
            // The full spectrum (or signal) the sum runs over.
            let full: Vec<(f64, f64)> = (0..length)
                .map(|n| {
                    if inverse && onesided {
                        let half = length / 2 + 1;
                        let (k, conj) = if n < half { (n, false) } else { (length - n, true) };
                        let (re, im) = sample(o, k, i);
                        let im = if k == 0 || 2 * k == length { 0.0 } else { im };
                        (re, if conj { -im } else { im })
                    } else {
                        sample(o, n, i)
                    }
                })
                .collect();
            for k in 0..bins {
                let (mut re, mut im) = (0.0, 0.0);
                for (n, &(xr, xi)) in full.iter().enumerate() {
                    let sign = if inverse { 1.0 } else { -1.0 };
                    let theta = sign * 2.0 * std::f64::consts::PI * ((n * k) % length) as f64 / length as f64;
                    re += xr * theta.cos() - xi * theta.sin();
                    im += xr * theta.sin() + xi * theta.cos();
                }
                if inverse {
                    (re, im) = (re / length as f64, im / length as f64);
                }
                let at = ((o * bins + k) * inner + i) * c_out;
                y[at] = re;
                if c_out == 2 {
                    y[at + 1] = im;
                }
            }
        }
    }
    y
}

#[test]
fn dft_and_stft_match_a_direct_sum() {
    use heron_ir::testing::onnx::{OnnxModel, attr_int};
    use heron_ir::testing::{assert_float_rule, check_stages, data};
    let scalar = |v: i64| Tensor::from_vec::<i64>(&[], vec![v]).unwrap();
    /// (opset, shape, axis, dft_length, inverse, onesided)
    type Case = (i64, &'static [usize], i64, Option<i64>, bool, bool);
    let cases: &[Case] = &[
        (17, &[2, 5, 1], 1, Some(8), false, true),   // zero padded, one-sided
        (17, &[3, 6, 4, 2], 2, None, false, false),  // complex, inner axes after the transform
        (20, &[3, 6, 2], -3, Some(4), true, false),  // truncated inverse along the first axis
        (20, &[1, 4, 5, 2], 1, Some(7), true, true), // inverse real transform of odd length
        (20, &[2, 9, 3, 1], -3, None, false, false), // real, full spectrum
    ];
    for (seed, &(opset, shape, axis, length, inverse, onesided)) in cases.iter().enumerate() {
        let mut m = OnnxModel::new(opset);
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        m.input("x", heron_ir::DType::F32, &dims).output("y");
        let mut attrs = vec![attr_int("inverse", inverse as i64), attr_int("onesided", onesided as i64)];
        let mut inputs = vec!["x", "", ""];
        if let Some(l) = length {
            m.initializer("length", &scalar(l));
            inputs[1] = "length";
        }
        if opset >= 20 {
            m.initializer("axis", &scalar(axis));
            inputs[2] = "axis";
        } else {
            attrs.push(attr_int("axis", axis));
        }
        m.node("DFT", &inputs, &["y"], attrs);
        let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
        let n: usize = shape.iter().product();
        let x = f32s(shape, data(seed as u64 + 1, n));
        let got = check_stages(&g, std::slice::from_ref(&x)).remove(0);
        let axis = if axis < 0 { (axis + shape.len() as i64) as usize } else { axis as usize };
        let length =
            length.map_or(if inverse && onesided { 2 * (shape[axis] - 1) } else { shape[axis] }, |l| l as usize);
        let want = reference_dft(&x.to_f64_vec(), shape, axis, length, inverse, onesided);
        let want = Tensor::from_vec::<f64>(got.shape(), want).unwrap().cast(heron_ir::DType::F32);
        assert_float_rule(&got, &want).unwrap_or_else(|e| panic!("case {seed}: {e}"));
    }

    // STFT with a window computed at run time (an input), two-sided, hop 3.
    let mut m = OnnxModel::new(17);
    m.input("signal", heron_ir::DType::F32, &[2, 20, 1]).input("window", heron_ir::DType::F32, &[6]).output("y");
    m.initializer("step", &scalar(3));
    m.node("STFT", &["signal", "step", "window"], &["y"], vec![attr_int("onesided", 0)]);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let (signal, window) = (f32s(&[2, 20, 1], data(7, 40)), f32s(&[6], data(8, 6)));
    let got = check_stages(&g, &[signal.clone(), window.clone()]).remove(0);
    assert_eq!(got.shape(), &[2, 5, 6, 2]);
    let (s, w) = (signal.to_f64_vec(), window.to_f64_vec());
    let mut want = Vec::new();
    for b in 0..2 {
        for f in 0..5 {
            let frame: Vec<f64> = (0..6).map(|n| s[b * 20 + f * 3 + n] * w[n]).collect();
            want.extend(reference_dft(&frame, &[6, 1], 0, 6, false, false));
        }
    }
    let want = Tensor::from_vec::<f64>(got.shape(), want).unwrap().cast(heron_ir::DType::F32);
    assert_float_rule(&got, &want).unwrap();
}

#[test]
fn nearest_resize_picks_sources_in_f32_arithmetic() {
    // 17 / 1.7f32 is exactly 10 in f32 (ONNX Runtime and PyTorch pick row 10), 9.99... in f64.
    use heron_ir::testing::onnx::{OnnxModel, attr_string};
    let (h, w, s) = (21usize, 18usize, 1.7f32);
    let mut m = OnnxModel::new(19);
    m.input("x", heron_ir::DType::F32, &[1, 1, h as i64, w as i64]).output("y");
    m.initializer("scales", &Tensor::from_vec::<f32>(&[4], vec![1.0, 1.0, s, s]).unwrap());
    let attrs = vec![
        attr_string("mode", "nearest"),
        attr_string("coordinate_transformation_mode", "asymmetric"),
        attr_string("nearest_mode", "floor"),
    ];
    m.node("Resize", &["x", "", "scales"], &["y"], attrs);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let x = f32s(&[1, 1, h, w], (0..h * w).map(|v| v as f32).collect());
    let got = heron_ir::testing::check_stages(&g, &[x]).remove(0);
    let (oh, ow) = ((h as f32 * s) as usize, (w as f32 * s) as usize);
    assert_eq!(got.shape(), &[1, 1, oh, ow]);
    let pick = |i: usize, n: usize| ((i as f32 / s).floor() as usize).min(n - 1);
    let want: Vec<f64> = (0..oh).flat_map(|r| (0..ow).map(move |c| (pick(r, h) * w + pick(c, w)) as f64)).collect();
    assert_eq!(pick(17, h), 10);
    assert_eq!(got.to_f64_vec(), want);
}

#[test]
fn stft_reads_a_batch_of_plain_samples_as_a_real_signal() {
    use heron_ir::testing::onnx::OnnxModel;
    use heron_ir::testing::{assert_float_rule, check_stages, data};
    let scalar = |v: i64| Tensor::from_vec::<i64>(&[], vec![v]).unwrap();
    let mut m = OnnxModel::new(17);
    m.input("signal", heron_ir::DType::F32, &[2, 21]).output("y");
    m.initializer("step", &scalar(4)).initializer("frame_length", &scalar(8));
    m.node("STFT", &["signal", "step", "", "frame_length"], &["y"], vec![]);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let signal = f32s(&[2, 21], data(9, 42));
    let got = check_stages(&g, std::slice::from_ref(&signal)).remove(0);
    assert_eq!(got.shape(), &[2, 4, 5, 2]);
    let s = signal.to_f64_vec();
    let mut want = Vec::new();
    for b in 0..2 {
        for f in 0..4 {
            let frame = &s[b * 21 + f * 4..b * 21 + f * 4 + 8];
            want.extend(reference_dft(frame, &[8, 1], 0, 8, false, true));
        }
    }
    let want = Tensor::from_vec::<f64>(got.shape(), want).unwrap().cast(heron_ir::DType::F32);
    assert_float_rule(&got, &want).unwrap();
}

#[test]
fn dynamic_quantize_linear_takes_scale_and_zero_point_from_the_range() {
    use heron_ir::testing::onnx::OnnxModel;
    let mut m = OnnxModel::new(11);
    m.input("x", heron_ir::DType::F32, &[4]).output("y").output("scale").output("zero_point");
    m.node("DynamicQuantizeLinear", &["x"], &["y", "scale", "zero_point"], vec![]);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    // Range [-1, 3]: scale 4/255, zero point round(63.75) = 64.
    let x = [-1.0f32, 0.0, 2.0, 3.0];
    let got = heron_ir::testing::check_stages(&g, &[f32s(&[4], x.to_vec())]);
    let want: Vec<u8> =
        x.iter().map(|v| ((v / (4.0f32 / 255.0)).round_ties_even() + 64.0).clamp(0.0, 255.0) as u8).collect();
    assert_eq!(want, [0, 64, 191, 255]);
    assert_eq!(got[0].as_array::<u8>().unwrap().as_slice().unwrap(), want);
    assert_eq!(got[1].to_f64_vec(), vec![f64::from(4.0f32 / 255.0)]);
    assert_eq!(got[2].as_array::<u8>().unwrap().as_slice().unwrap(), &[64]);
    // All zeros: scale 1 (not a division by zero), zero point 0.
    let got = heron_ir::testing::check_stages(&g, &[f32s(&[4], vec![0.0; 4])]);
    assert_eq!(got[0].as_array::<u8>().unwrap().as_slice().unwrap(), &[0; 4]);
    assert_eq!((got[1].to_f64_vec(), got[2].to_f64_vec()), (vec![1.0], vec![0.0]));
}

#[test]
fn external_data_is_read_beside_the_model_and_nowhere_else() {
    use heron_ir::onnx::load_model;
    use heron_ir::onnx::proto::StringStringEntryProto;
    use heron_ir::testing::onnx::OnnxModel;
    let tmp = tempfile::Builder::new().prefix("heron-external-data-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::create_dir_all(dir.join("model")).unwrap();
    let bias: Vec<f32> = vec![1.5, -2.0, 0.25];
    let mut data = vec![7u8; 16]; // a header the offset skips
    data.extend(bias.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(dir.join("model/weights.bin"), &data).unwrap();
    std::fs::write(dir.join("outside.bin"), &data).unwrap();
    let write = |entries: &[(&str, &str)]| -> std::path::PathBuf {
        let mut m = OnnxModel::new(13);
        m.input("x", heron_ir::DType::F32, &[3]).output("y");
        let external_data =
            entries.iter().map(|(k, v)| StringStringEntryProto { key: k.to_string(), value: v.to_string() }).collect();
        m.raw_initializer(TensorProto {
            name: "b".into(),
            dims: vec![3],
            data_type: 1,
            external_data,
            data_location: 1,
            ..Default::default()
        });
        m.node("Add", &["x", "b"], &["y"], vec![]);
        let path = dir.join("model/model.onnx");
        std::fs::write(&path, m.to_bytes()).unwrap();
        path
    };
    let good = [("location", "weights.bin"), ("offset", "16"), ("length", "12")];
    let path = write(&good);
    let g = load_model(&path, &ImportOptions::default()).unwrap();
    let y = interp::run(&g, &[f32s(&[3], vec![1.0, 1.0, 1.0])]).unwrap().remove(0);
    assert_close(&y, &[2.5, -1.0, 1.25]);
    // From bytes there is no directory to read from.
    let err = import_model(&std::fs::read(&path).unwrap(), &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("tensor 'b'") && err.contains("load it from its file"), "{err}");
    let refused = |entries: &[(&str, &str)], why: &str| {
        let err = load_model(&write(entries), &ImportOptions::default()).unwrap_err().to_string();
        assert!(err.contains(why), "{entries:?}: {err}");
    };
    refused(&[("location", "../outside.bin"), ("offset", "16")], "relative path inside");
    let absolute = dir.join("outside.bin").display().to_string();
    refused(&[("location", &absolute)], "relative path inside");
    refused(&[("location", "missing.bin")], "missing.bin");
    refused(&[("offset", "16")], "has no location");
    refused(&[("location", "weights.bin"), ("offset", "100")], "past the end");
    refused(&[("location", "weights.bin"), ("offset", "16"), ("length", "13")], "run past the end");
    refused(&[("location", "weights.bin"), ("offset", "-1")], "not a byte count");
    // The whole file is 28 bytes, not the 12 the dims ask for.
    refused(&[("location", "weights.bin")], "tensor 'b'");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.join("outside.bin"), dir.join("model/link.bin")).unwrap();
        refused(&[("location", "link.bin"), ("offset", "16")], "outside the model's directory");
        // A FIFO would block the load forever.
        let fifo = std::process::Command::new("mkfifo").arg(dir.join("model/pipe")).status();
        if fifo.is_ok_and(|s| s.success()) {
            refused(&[("location", "pipe")], "not a regular file");
        }
    }
    // Three tensors reading the same 12 bytes of a 28-byte file: no file is read for more than
    // it holds.
    let mut m = OnnxModel::new(13);
    m.input("x", heron_ir::DType::F32, &[3]).output("y");
    for name in ["b", "c", "d"] {
        let entries = [("location", "weights.bin"), ("offset", "16"), ("length", "12")];
        let external_data =
            entries.iter().map(|(k, v)| StringStringEntryProto { key: k.to_string(), value: v.to_string() }).collect();
        m.raw_initializer(TensorProto {
            name: name.into(),
            dims: vec![3],
            data_type: 1,
            external_data,
            data_location: 1,
            ..Default::default()
        });
    }
    m.node("Add", &["x", "b"], &["t"], vec![]).node("Add", &["t", "c"], &["u"], vec![]).node(
        "Add",
        &["u", "d"],
        &["y"],
        vec![],
    );
    let path = dir.join("model/twice.onnx");
    std::fs::write(&path, m.to_bytes()).unwrap();
    let err = load_model(&path, &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("overlap"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn model_local_functions_are_inlined_with_their_attributes() {
    use heron_ir::onnx::proto::FunctionProto;
    use heron_ir::testing::onnx::{OnnxModel, attr_float};
    let call = |op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>| NodeProto {
        op_type: op.into(),
        domain: if op.starts_with(char::is_lowercase) { "local".into() } else { String::new() },
        name: format!("{op}_{}", outputs[0]),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    };
    let by_ref = |name: &str, from: &str| AttributeProto {
        name: name.into(),
        ref_attr_name: from.into(),
        r#type: heron_ir::onnx::proto::attribute_type::FLOAT,
        ..Default::default()
    };
    let function = |name: &str, inputs: &[&str], outputs: &[&str], node: Vec<NodeProto>| FunctionProto {
        name: name.into(),
        domain: "local".into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        node,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        ..Default::default()
    };
    // scaled_leaky(x, y) = LeakyRelu(x * y, slope) (slope defaults to 0.5), plus an unused output.
    let mut leaky = function(
        "scaled_leaky",
        &["x", "y"],
        &["z", "t"],
        vec![
            call("Mul", &["x", "y"], &["t"], vec![]),
            call("LeakyRelu", &["t"], &["z"], vec![by_ref("alpha", "slope")]),
        ],
    );
    leaky.attribute_proto.push(attr_float("slope", 0.5));
    // square_leaky(a) = scaled_leaky(a, a) with slope g_slope: a nested call.
    let square = function(
        "square_leaky",
        &["a"],
        &["b"],
        vec![call("scaled_leaky", &["a", "a"], &["b"], vec![by_ref("slope", "g_slope")])],
    );
    let build = |functions: Vec<FunctionProto>| {
        let mut m = OnnxModel::new(17);
        m.input("x", heron_ir::DType::F32, &[4]).output("y1").output("y2").output("y3");
        m.initializer("c", &f32s(&[4], vec![1.0, -1.0, 2.0, -3.0]));
        m.graph().node.push(call("scaled_leaky", &["x", "c"], &["y1"], vec![attr_float("slope", 0.1)]));
        m.graph().node.push(call("scaled_leaky", &["x", "c"], &["y2", ""], vec![]));
        m.graph().node.push(call("square_leaky", &["x"], &["y3"], vec![attr_float("g_slope", -0.25)]));
        m.model.functions = functions;
        m.to_bytes()
    };
    let g = import_model(&build(vec![leaky.clone(), square.clone()]), &ImportOptions::default()).unwrap();
    verify(&g).unwrap();
    let x = [2.0f32, 3.0, -1.0, 0.5];
    let out = interp::run(&g, &[f32s(&[4], x.to_vec())]).unwrap();
    let leaky_relu = |v: f32, a: f32| f64::from(if v < 0.0 { v * a } else { v });
    let c = [1.0f32, -1.0, 2.0, -3.0];
    assert_close(&out[0], &(0..4).map(|i| leaky_relu(x[i] * c[i], 0.1)).collect::<Vec<_>>());
    assert_close(&out[1], &(0..4).map(|i| leaky_relu(x[i] * c[i], 0.5)).collect::<Vec<_>>());
    assert_close(&out[2], &(0..4).map(|i| leaky_relu(x[i] * x[i], -0.25)).collect::<Vec<_>>());

    // A function calling itself, and one written for another opset, are errors.
    let endless = function("square_leaky", &["a"], &["b"], vec![call("square_leaky", &["a"], &["b"], vec![])]);
    let err = import_model(&build(vec![leaky.clone(), endless]), &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("'square_leaky'") && err.contains("nest deeper"), "{err}");
    let mut old = square;
    old.opset_import[0].version = 11;
    let err = import_model(&build(vec![leaky.clone(), old]), &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("opset 11"), "{err}");
    // square_leaky calling level_0, each level calling the next twice: 2^40 nodes, refused early.
    let mut levels: Vec<FunctionProto> = (0..40)
        .map(|i| {
            let next = format!("level_{}", i + 1);
            let body = vec![call(&next, &["a"], &["m"], vec![]), call(&next, &["m"], &["b"], vec![])];
            function(&format!("level_{i}"), &["a"], &["b"], body)
        })
        .collect();
    levels.push(function("level_40", &["a"], &["b"], vec![call("Identity", &["a"], &["b"], vec![])]));
    levels.push(function("square_leaky", &["a"], &["b"], vec![call("level_0", &["a"], &["b"], vec![])]));
    levels.push(leaky);
    let err = import_model(&build(levels), &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("inlining its calls"), "{err}");
}

#[test]
fn lp_pool_of_any_p_in_ceil_mode_sums_the_elements_inside() {
    use heron_ir::testing::onnx::{OnnxModel, attr_int, attr_ints};
    use heron_ir::testing::{assert_float_rule, check_stages, data};
    let mut m = OnnxModel::new(18);
    m.input("x", heron_ir::DType::F32, &[1, 2, 5, 5]).output("y");
    let attrs = vec![
        attr_ints("kernel_shape", &[2, 2]),
        attr_ints("strides", &[2, 2]),
        attr_int("ceil_mode", 1),
        attr_int("p", 3),
    ];
    m.node("LpPool", &["x"], &["y"], attrs);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let x = f32s(&[1, 2, 5, 5], data(11, 50));
    let got = check_stages(&g, std::slice::from_ref(&x)).remove(0);
    assert_eq!(got.shape(), &[1, 2, 3, 3]);
    let v = x.to_f64_vec();
    let mut want = Vec::new();
    for c in 0..2 {
        for (oy, ox) in (0..3).flat_map(|oy| (0..3).map(move |ox| (oy, ox))) {
            let mut sum = 0.0;
            for (y, x) in (2 * oy..(2 * oy + 2).min(5)).flat_map(|y| (2 * ox..(2 * ox + 2).min(5)).map(move |x| (y, x)))
            {
                sum += v[c * 25 + y * 5 + x].abs().powi(3);
            }
            want.push(sum.powf(1.0 / 3.0));
        }
    }
    let want = Tensor::from_vec::<f64>(&[1, 2, 3, 3], want).unwrap().cast(heron_ir::DType::F32);
    assert_float_rule(&got, &want).unwrap();
}

#[test]
fn image_scaler_of_opset_8_models_scales_then_adds_the_channel_bias() {
    use heron_ir::testing::onnx::{OnnxModel, attr_float};
    let mut m = OnnxModel::new(8);
    m.input("x", heron_ir::DType::F32, &[1, 2, 1, 2]).output("y");
    let bias = AttributeProto {
        name: "bias".into(),
        r#type: heron_ir::onnx::proto::attribute_type::FLOATS,
        floats: vec![10.0, -1.0],
        ..Default::default()
    };
    m.node("ImageScaler", &["x"], &["y"], vec![attr_float("scale", 0.5), bias]);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let y = heron_ir::testing::check_stages(&g, &[f32s(&[1, 2, 1, 2], vec![2.0, 4.0, 6.0, 8.0])]).remove(0);
    assert_close(&y, &[11.0, 12.0, 2.0, 3.0]);
}

#[test]
fn tf2onnx_nearest_resize_sizes_and_coordinates_follow_onnx_runtime() {
    // tf2onnx writes a 20x30 -> 41x61 resize as f32 scales 2.05 and 2.0333333 (41 and 61 when
    // multiplied in f32) with tf_half_pixel_for_nn coordinates.
    use heron_ir::testing::onnx::{OnnxModel, attr_string};
    let (h, w, sh, sw) = (20usize, 30usize, 2.05f32, 61.0f32 / 30.0);
    let mut m = OnnxModel::new(13);
    m.input("x", heron_ir::DType::F32, &[1, 1, h as i64, w as i64]).output("y");
    m.initializer("scales", &Tensor::from_vec::<f32>(&[4], vec![1.0, 1.0, sh, sw]).unwrap());
    let attrs = vec![
        attr_string("mode", "nearest"),
        attr_string("coordinate_transformation_mode", "tf_half_pixel_for_nn"),
        attr_string("nearest_mode", "floor"),
    ];
    m.node("Resize", &["x", "", "scales"], &["y"], attrs);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let x = f32s(&[1, 1, h, w], (0..h * w).map(|v| v as f32).collect());
    let got = heron_ir::testing::check_stages(&g, &[x]).remove(0);
    assert_eq!(got.shape(), &[1, 1, 41, 61]);
    let pick = |i: usize, s: f32, n: usize| (((i as f32 + 0.5) / s).floor() as usize).min(n - 1);
    let want: Vec<f64> =
        (0..41).flat_map(|r| (0..61).map(move |c| (pick(r, sh, h) * w + pick(c, sw, w)) as f64)).collect();
    assert_eq!(got.to_f64_vec(), want);
}

#[test]
fn reverse_sequence_reverses_each_batch_prefix_given_at_run_time() {
    use heron_ir::testing::onnx::{OnnxModel, attr_int};
    let mut m = OnnxModel::new(13);
    m.input("x", heron_ir::DType::F32, &[3, 4, 2]).input("lens", heron_ir::DType::I64, &[3]).output("y");
    m.node("ReverseSequence", &["x", "lens"], &["y"], vec![attr_int("batch_axis", 0), attr_int("time_axis", 1)]);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let x = f32s(&[3, 4, 2], (0..24).map(|v| v as f32).collect());
    let lens = Tensor::from_vec::<i64>(&[3], vec![4, 1, 2]).unwrap();
    let y = heron_ir::testing::check_stages(&g, &[x.clone(), lens]).remove(0);
    // Batch 0 fully reversed, batch 1 unchanged, batch 2 its first two steps swapped.
    let order: [[usize; 4]; 3] = [[3, 2, 1, 0], [0, 1, 2, 3], [1, 0, 2, 3]];
    let want: Vec<f64> = (0..3)
        .flat_map(|b| order[b].iter().flat_map(move |&t| (0..2).map(move |c| (b * 8 + t * 2 + c) as f64)))
        .collect();
    assert_eq!(y.to_f64_vec(), want);
    // A length past the time axis reads outside it: an error, not a wild read.
    let too_long = Tensor::from_vec::<i64>(&[3], vec![5, 1, 1]).unwrap();
    assert!(interp::run(&g, &[x, too_long]).is_err());
}

#[test]
fn batch_norm_with_spatial_0_keeps_statistics_per_element() {
    use heron_ir::testing::onnx::{OnnxModel, attr_float, attr_int};
    use heron_ir::testing::{assert_float_rule, check_stages, data};
    let mut m = OnnxModel::new(7);
    m.input("x", heron_ir::DType::F32, &[2, 3, 2]).output("y");
    let params: Vec<Vec<f32>> = (0..4).map(|i| data(20 + i, 6)).collect();
    let var: Vec<f32> = params[3].iter().map(|v| v.abs() + 0.1).collect();
    for (name, v) in ["scale", "bias", "mean"].iter().zip(&params).chain([(&"var", &var)]) {
        m.initializer(name, &f32s(&[3, 2], v.clone()));
    }
    let attrs = vec![attr_int("spatial", 0), attr_float("epsilon", 1e-3)];
    m.node("BatchNormalization", &["x", "scale", "bias", "mean", "var"], &["y"], attrs);
    let g = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let x = f32s(&[2, 3, 2], data(30, 12));
    let got = check_stages(&g, std::slice::from_ref(&x)).remove(0);
    let want: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let e = i % 6;
            let (s, b, mu, var) = (params[0][e] as f64, params[1][e] as f64, params[2][e] as f64, var[e] as f64);
            (v - mu) / (var + 1e-3).sqrt() * s + b
        })
        .collect();
    let want = Tensor::from_vec::<f64>(&[2, 3, 2], want).unwrap().cast(heron_ir::DType::F32);
    assert_float_rule(&got, &want).unwrap();
}

#[test]
fn tensor_scatter_writes_from_each_batch_start_and_wraps_in_circular_mode() {
    use heron_ir::testing::onnx::{OnnxModel, attr_string};
    let build = |mode: &str| {
        let mut m = OnnxModel::new(24);
        m.input("cache", heron_ir::DType::F32, &[2, 4, 1]).input("update", heron_ir::DType::F32, &[2, 2, 1]);
        m.input("at", heron_ir::DType::I64, &[2]).output("y");
        m.node("TensorScatter", &["cache", "update", "at"], &["y"], vec![attr_string("mode", mode)]);
        import_model(&m.to_bytes(), &ImportOptions::default()).unwrap()
    };
    let cache = f32s(&[2, 4, 1], vec![0.0; 8]);
    let update = f32s(&[2, 2, 1], vec![1.0, 2.0, 3.0, 4.0]);
    let at = |a: i64, b: i64| Tensor::from_vec::<i64>(&[2], vec![a, b]).unwrap();
    let g = build("circular");
    let y = heron_ir::testing::check_stages(&g, &[cache.clone(), update.clone(), at(1, 3)]).remove(0);
    assert_eq!(y.to_f64_vec(), vec![0.0, 1.0, 2.0, 0.0, 4.0, 0.0, 0.0, 3.0]);
    // Linear mode: a write past the end of the cache is an error when the model runs.
    let g = build("linear");
    assert!(interp::run(&g, &[cache, update, at(1, 3)]).is_err());
}

#[test]
fn hostile_attributes_of_the_new_operators_are_errors() {
    use heron_ir::testing::onnx::{OnnxModel, attr_int, attr_ints};
    let huge = 1i64 << 31;
    /// (op, input dims, attributes, i64 constant inputs)
    type Case = (&'static str, Vec<i64>, Vec<AttributeProto>, Vec<(&'static str, Vec<i64>)>);
    let cases: Vec<Case> = vec![
        // A kernel of 2^62 ones (built before any check, once).
        (
            "LpPool",
            vec![1, 1, 1, 1],
            vec![attr_ints("kernel_shape", &[huge, huge]), attr_ints("pads", &[huge / 2; 4])],
            vec![],
        ),
        // BatchNormalization spatial = 0 of a scalar.
        ("BatchNormalization", vec![], vec![attr_int("spatial", 0)], vec![]),
        // AffineGrid of 2^64 points.
        ("AffineGrid", vec![1, 2, 3], vec![], vec![("size", vec![1, 1, 1 << 32, 1 << 32])]),
        // Col2Im whose block counts overflow, and one with a huge dilation.
        ("Col2Im", vec![1, 1, 0], vec![], vec![("image_shape", vec![1 << 32, 1 << 32]), ("block_shape", vec![1, 1])]),
        (
            "Col2Im",
            vec![1, 2, 1],
            vec![attr_ints("dilations", &[i64::MAX]), attr_ints("pads", &[1 << 62, 0])],
            vec![("image_shape", vec![1 << 62]), ("block_shape", vec![2])],
        ),
    ];
    for (op, dims, attrs, consts) in cases {
        let opset = if op == "BatchNormalization" { 7 } else { 20 };
        let mut m = OnnxModel::new(opset);
        m.input("x", heron_ir::DType::F32, &dims).output("y");
        let mut inputs = vec!["x".to_string()];
        if op == "BatchNormalization" {
            for p in ["s", "b", "m", "v"] {
                m.initializer(p, &Tensor::from_vec::<f32>(&[], vec![1.0]).unwrap());
                inputs.push(p.into());
            }
        }
        for (name, v) in &consts {
            m.ints(name, v);
            inputs.push(name.to_string());
        }
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        m.node(op, &inputs, &["y"], attrs);
        let err = import_model(&m.to_bytes(), &ImportOptions::default());
        assert!(err.is_err(), "{op} {dims:?} imported");
    }
    // And/Or/Xor take bools; integers are the Bitwise ops'.
    let mut m = OnnxModel::new(13);
    m.input("a", heron_ir::DType::I32, &[2]).input("b", heron_ir::DType::I32, &[2]).output("y");
    m.node("And", &["a", "b"], &["y"], vec![]);
    let err = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("takes bools"), "{err}");
}

/// Free symbolic dimensions bind to 1, except where `dims` or another input's given shape
/// binds the same symbol; fixed dimensions and given shapes stay as they are.
#[test]
fn free_symbolic_dimensions_bind_to_one_unless_bound_elsewhere() {
    use heron_ir::DType;
    use heron_ir::onnx::{DeclaredInput, Dim};
    let input = |name: &str, dims: &[Dim]| DeclaredInput { name: name.into(), dtype: DType::F32, dims: dims.to_vec() };
    let sym = |s: &str| Dim::Symbolic(s.into());
    let declared = [
        input("a", &[sym("batch"), Dim::Fixed(3)]),
        input("b", &[sym("batch"), sym("seq")]),
        input("c", &[sym("?"), Dim::Fixed(5), sym("?")]),
        input("d", &[Dim::Fixed(2)]),
    ];
    let mut options = ImportOptions::default();
    let bound = options.bind_free_dims_to_one(&declared);
    assert_eq!(bound, ["a's batch", "b's seq", "c's ?", "c's ?"]);
    assert_eq!(options.input_shapes["b"], [1, 1]);
    assert!(!options.input_shapes.contains_key("d"));
    // Another input's `?` binds nothing here.
    let mut options = ImportOptions {
        input_shapes: HashMap::from([("a".to_string(), vec![4, 3]), ("e".to_string(), vec![9])]),
        dims: HashMap::from([("seq".to_string(), 7)]),
        ..ImportOptions::default()
    };
    let declared = [&declared[..], &[input("e", &[sym("?")])]].concat();
    let bound = options.bind_free_dims_to_one(&declared);
    assert_eq!(bound, ["c's ?", "c's ?"]);
    assert_eq!((&options.input_shapes["a"], &options.input_shapes["b"]), (&vec![4, 3], &vec![4, 7]));
    assert_eq!(options.input_shapes["c"], [1, 5, 1]);
}
