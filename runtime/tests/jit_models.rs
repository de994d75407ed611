//! The JIT on the reference models: its output for the stored inputs must match ONNX Runtime's
//! stored output under the project's float rule. The torch exports (resnet18, mobilenet_v2, and
//! the transformers bert_tiny and gpt2_tiny with their int64 token ids and attention masks) run
//! too (compiled code is fast).

use heron_ir::npy::read_npy;
use heron_ir::testing::{assert_float_rule, shared_dir};
use heron_runtime::{CompileOptions, Compiler, Model};

/// `NAME.input.npy`, then `NAME.input1.npy`, ... (the model's inputs in order).
pub fn reference_inputs(name: &str) -> Vec<heron_ir::Tensor> {
    let dir = shared_dir().join("reference");
    let mut inputs = vec![read_npy(&dir.join(format!("{name}.input.npy"))).expect("input")];
    while let Ok(t) = read_npy(&dir.join(format!("{name}.input{}.npy", inputs.len()))) {
        inputs.push(t);
    }
    inputs
}

fn check_model(name: &str) {
    let dir = shared_dir().join("reference");
    let model = Model::load(dir.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    let input = reference_inputs(name);
    let want = read_npy(&dir.join(format!("{name}.ref.npy"))).expect("reference output");
    let compiled = Compiler::new(CompileOptions::default()).compile(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
    let got = compiled.run(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_float_rule(&got[0], &want).unwrap_or_else(|e| panic!("{name}: {e}"));
    // A second run in a reused workspace gives the same result.
    let mut ws = compiled.workspace().unwrap();
    let again = compiled.run_with(&mut ws, &input).expect("run");
    let again2 = compiled.run_with(&mut ws, &input).expect("run");
    assert_eq!(again, got);
    assert_eq!(again2, got);
    // The parallel loops give the same bits on any number of threads (3: uneven slices).
    let on = |threads: usize| {
        let options = CompileOptions { threads, ..CompileOptions::default() };
        let compiled = Compiler::new(options).compile(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
        compiled.run(&input).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let one = on(1);
    assert_float_rule(&one[0], &want).unwrap_or_else(|e| panic!("{name}, 1 thread: {e}"));
    for threads in [2, 3] {
        assert_eq!(on(threads), one, "{name}: {threads} threads differ from 1");
    }
}

#[test]
fn tiny_relu() {
    check_model("tiny_relu");
}

#[test]
fn mlp() {
    check_model("mlp");
}

#[test]
fn lenet() {
    check_model("lenet");
}

#[test]
fn mobilenet_ish() {
    check_model("mobilenet_ish");
}

#[test]
fn resnet_ish() {
    check_model("resnet_ish");
}

#[test]
fn resnet18() {
    check_model("resnet18");
}

#[test]
fn mobilenet_v2() {
    check_model("mobilenet_v2");
}

#[test]
fn bert_tiny() {
    check_model("bert_tiny");
}

#[test]
fn gpt2_tiny() {
    check_model("gpt2_tiny");
}

/// The torch exports through the AOT engine (object file, shared library, loaded back).
#[test]
fn torch_exports_on_the_aot_engine() {
    let dir = shared_dir().join("reference");
    for name in ["bert_tiny", "gpt2_tiny", "mobilenet_v2", "resnet18"] {
        let model = Model::load(dir.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = read_npy(&dir.join(format!("{name}.ref.npy"))).expect("reference output");
        let options = CompileOptions { engine: heron_runtime::Engine::Aot, ..CompileOptions::default() };
        let compiled = Compiler::new(options).compile(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = compiled.run(&reference_inputs(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_float_rule(&got[0], &want).unwrap_or_else(|e| panic!("{name} (AOT): {e}"));
    }
}

/// A token id outside the embedding table is an error on every engine, never a read outside it.
#[test]
fn out_of_range_token_ids_are_errors() {
    let dir = shared_dir().join("reference");
    let model = Model::load(dir.join("bert_tiny.onnx")).unwrap();
    let mut inputs = reference_inputs("bert_tiny");
    let mut ids: Vec<i64> = inputs[0].to_i64_vec().unwrap();
    ids[3] = 5000;
    inputs[0] = heron_ir::Tensor::from_vec(inputs[0].shape(), ids).unwrap();
    for engine in [heron_runtime::Engine::Jit, heron_runtime::Engine::Interpreter, heron_runtime::Engine::Aot] {
        let options = CompileOptions { engine, ..CompileOptions::default() };
        let compiled = Compiler::new(options).compile(&model).unwrap();
        let err = compiled.run(&inputs).expect_err("index 5000 of a 1000-row table").to_string();
        assert!(err.contains("out of range"), "{engine:?}: {err}");
    }
}

/// Activations take epilogues and fuse as epilogues like other elementwise ops: hard-swish as
/// ONNX exports spell it (`x · HardSigmoid(x)`), then an Elu and a residual add become one
/// function, which matches the interpreter on 1 and 2 threads.
#[test]
fn activations_fuse_their_consumers() {
    use heron_ir::op::Activation;
    use heron_ir::{BinaryOp, DType, Graph, Op, Tensor, TensorType};
    let mut g = Graph::new();
    let ty = TensorType::new(DType::F32, vec![2, 24, 19, 19]);
    let x = g.add_input("x", ty.clone());
    let r = g.add_input("r", ty);
    let hs = g.add_op("hs", Op::Activation(Activation::HardSigmoid { alpha: 1.0 / 6.0, beta: 0.5 }), &[x]).unwrap();
    let swish = g.add_op("swish", Op::Binary(BinaryOp::Mul), &[x, hs]).unwrap();
    let elu = g.add_op("elu", Op::Activation(Activation::Elu { alpha: 0.7 }), &[swish]).unwrap();
    let out = g.add_op("res", Op::Binary(BinaryOp::Add), &[elu, r]).unwrap();
    g.set_outputs(vec![out]);
    let model = Model::from_graph("activations", g).unwrap();
    let module = heron_runtime::pipeline::Pipeline::new(Default::default())
        .module(&model, heron_runtime::pipeline::Stage::Target)
        .unwrap();
    let names: Vec<&str> = module.funcs.iter().map(|f| f.name.as_str()).filter(|n| *n != "main").collect();
    assert_eq!(names, ["hardsigmoid_mul_elu_add_0"], "one fused function");
    let n = 2 * 24 * 19 * 19;
    let values =
        |seed: usize| -> Vec<f32> { (0..n).map(|i| ((i * 7919 + seed) % 1201) as f32 / 100.0 - 6.0).collect() };
    let inputs = [
        Tensor::from_vec(&[2, 24, 19, 19], values(1)).unwrap(),
        Tensor::from_vec(&[2, 24, 19, 19], values(2)).unwrap(),
    ];
    let want = model.run_interpreter(&inputs).unwrap();
    for threads in [1, 2] {
        let compiled = Compiler::new(CompileOptions { threads, ..CompileOptions::default() }).compile(&model).unwrap();
        assert_float_rule(&compiled.run(&inputs).unwrap()[0], &want[0])
            .unwrap_or_else(|e| panic!("{threads} threads: {e}"));
    }
}
