//! QDQ models as exporters write them: ONNX Runtime's `quantize_static` stores per-tensor scales
//! and zero points as 1-element or 0-d tensors interchangeably and omits the zero point of the
//! int32 bias dequantization. They load, and the interpreter and the JIT agree with values
//! computed by hand.

use heron_ir::DType;
use heron_ir::onnx::{ImportOptions, import_model};
use heron_ir::tensor::Tensor;
use heron_ir::testing::onnx::OnnxModel;
use heron_runtime::{CompileOptions, Compiler, Model};

#[test]
fn per_tensor_parameters_of_either_rank_and_an_omitted_bias_zero_point_load_and_run() {
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[1, 4])
        .initializer("s1", &Tensor::from_vec(&[1], vec![0.5f32]).unwrap())
        .initializer("z0", &Tensor::from_vec::<i8>(&[], vec![1]).unwrap())
        .initializer("s0", &Tensor::from_vec::<f32>(&[], vec![0.5]).unwrap())
        .initializer("z1", &Tensor::from_vec::<i8>(&[1], vec![1]).unwrap())
        .initializer("bias", &Tensor::from_vec::<i32>(&[4], vec![-2, 0, 3, 100]).unwrap())
        .initializer("sb", &Tensor::from_vec(&[1], vec![0.25f32]).unwrap())
        .node("QuantizeLinear", &["x", "s1", "z0"], &["q"], vec![])
        .node("DequantizeLinear", &["q", "s0", "z1"], &["y"], vec![])
        .node("DequantizeLinear", &["bias", "sb"], &["b"], vec![])
        .node("Add", &["y", "b"], &["out"], vec![])
        .output("out");
    let graph = import_model(&m.to_bytes(), &ImportOptions::default()).expect("the model loads");
    let model = Model::from_graph("qdq", graph).expect("model");
    let x = Tensor::from_vec(&[1, 4], vec![1.0f32, -0.74, 70.0, -100.0]).unwrap();
    // q = clamp(round_half_even(x / 0.5) + 1): 3, 0 (-1.48 -> -1, + 1), 127, -128;
    // y = (q - 1) * 0.5; b = bias * 0.25.
    let want = [1.0 - 0.5, -0.5 + 0.0, 63.0 + 0.75, -64.5 + 25.0];
    let interp = model.run_interpreter(std::slice::from_ref(&x)).expect("interpreter");
    let jit = Compiler::new(CompileOptions::default()).compile(&model).expect("compile").run(&[x]).expect("run");
    for got in [&interp[0], &jit[0]] {
        assert_eq!(got.dtype(), DType::F32);
        assert_eq!(got.to_f64_vec(), want, "{got:?}");
    }
}

/// A CNN quantized by `heron quantize` (power-of-two scales) in its integer form: every
/// Conv/Gemm becomes int8 products summed in int32, an int32 bias and one rounding shift, the
/// residual add an int32 sum at the finer scale, the max pool a pool of int8 values; the
/// JIT (dot-product kernels) equals the interpreter bit for bit, and both stay within a few
/// quantization steps of the same QDQ model run in float (ONNX's reference semantics).
#[test]
fn the_integer_form_runs_bit_exact_on_the_jit_and_close_to_the_float_qdq_model() {
    use heron_ir::interp;
    use heron_ir::passes::{integer_form, optimize};
    use heron_ir::quantize::{QuantizeOptions, quantize_model};
    use heron_ir::testing::data;
    use heron_ir::testing::onnx::small_cnn;

    let sample =
        |seed: u64| Tensor::from_vec(&[1, 3, 8, 8], data(seed, 192).iter().map(|v| v * 2.0).collect()).unwrap();
    let calibration: Vec<Vec<Tensor>> = (0..3).map(|k| vec![sample(10 + k)]).collect();
    let (bytes, quantized) = quantize_model(&small_cnn(), &calibration, &QuantizeOptions::default()).unwrap();
    let qdq = import_model(&bytes, &ImportOptions::default()).unwrap();
    let mut integer = qdq.clone();
    let report = integer_form(&mut integer).unwrap();
    assert_eq!(quantized.anchors, ["conv_0", "conv_2", "gemm_8"]);
    assert_eq!(report.converted, ["conv_0", "conv_2", "add_3", "maxpool_5", "gemm_8"], "left: {:?}", report.left);
    optimize(&mut integer);
    let ops: Vec<&str> = integer.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops.iter().filter(|o| ["Conv", "Gemm"].contains(o)).count(), 0, "{ops:?}");
    assert_eq!(ops.iter().filter(|o| **o == "Requantize").count(), 4, "{ops:?}");
    // Dequantized only where float runs: into the global average pool, into the Flatten
    // (quantized again for the dense layer) and the output.
    assert_eq!(ops.iter().filter(|o| **o == "DequantizeLinear").count(), 3, "{ops:?}");
    let step = quantized.activations.iter().find(|(n, _)| n == "y").unwrap().1 as f64;
    let model = Model::from_graph("cnn_int8", integer.clone()).unwrap();
    let compiled = Compiler::new(CompileOptions::default()).compile(&model).unwrap();
    for seed in 20..25 {
        let x = sample(seed);
        let want = interp::run(&integer, std::slice::from_ref(&x)).unwrap();
        let got = compiled.run(std::slice::from_ref(&x)).unwrap();
        assert_eq!(got[0].to_f64_vec(), want[0].to_f64_vec(), "JIT vs interpreter, input {seed}");
        let float = interp::run(&qdq, std::slice::from_ref(&x)).unwrap();
        let worst = float[0].to_f64_vec().iter().zip(want[0].to_f64_vec()).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        println!("input {seed}: integer form vs float QDQ run: max abs {worst} (output step {step})");
        assert!(worst <= 4.0 * step, "input {seed}: integer form {worst} from the float QDQ run (step {step})");
    }
}

/// A residual add of tensors at different scales: aligned by a left shift to the finer one,
/// summed in int32, requantized; the JIT equals the interpreter, and the float QDQ run differs
/// at most where a value falls exactly half-way (rounded half up here, half to even there).
#[test]
fn an_add_of_two_scales_aligns_them_exactly() {
    use heron_ir::passes::{integer_form, optimize};
    let mut m = OnnxModel::new(13);
    let scalar = |v: f32| Tensor::from_vec::<f32>(&[], vec![v]).unwrap();
    m.input("a", DType::F32, &[64])
        .input("b", DType::F32, &[64])
        .initializer("sa", &scalar(0.25))
        .initializer("sb", &scalar(0.0625))
        .initializer("sy", &scalar(0.5))
        .initializer("z", &Tensor::from_vec::<i8>(&[], vec![0]).unwrap())
        .node("QuantizeLinear", &["a", "sa", "z"], &["aq"], vec![])
        .node("DequantizeLinear", &["aq", "sa", "z"], &["ad"], vec![])
        .node("QuantizeLinear", &["b", "sb", "z"], &["bq"], vec![])
        .node("DequantizeLinear", &["bq", "sb", "z"], &["bd"], vec![])
        .node("Add", &["ad", "bd"], &["s"], vec![])
        .node("QuantizeLinear", &["s", "sy", "z"], &["sq"], vec![])
        .node("DequantizeLinear", &["sq", "sy", "z"], &["y"], vec![])
        .output("y");
    let qdq = import_model(&m.to_bytes(), &ImportOptions::default()).unwrap();
    let mut integer = qdq.clone();
    assert_eq!(integer_form(&mut integer).unwrap().converted, ["add_4"]);
    optimize(&mut integer);
    let a = Tensor::from_vec(&[64], (0..64).map(|i| (i as f32 - 32.0) * 0.3).collect()).unwrap();
    let b = Tensor::from_vec(&[64], (0..64).map(|i| (i as f32 * 7.0 % 13.0 - 6.0) * 0.11).collect()).unwrap();
    let inputs = [a, b];
    let float = heron_ir::interp::run(&qdq, &inputs).unwrap()[0].to_f64_vec();
    let want = heron_ir::interp::run(&integer, &inputs).unwrap()[0].to_f64_vec();
    let model = Model::from_graph("add", integer).unwrap();
    let got = Compiler::new(CompileOptions::default()).compile(&model).unwrap().run(&inputs).unwrap()[0].to_f64_vec();
    assert_eq!(got, want);
    for (f, w) in float.iter().zip(&want) {
        assert!((f - w).abs() <= 0.5, "{f} vs {w}: more than one step apart");
    }
}
