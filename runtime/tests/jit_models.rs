//! The JIT on the reference models: its output for the stored input must match ONNX Runtime's
//! stored output under the project's float rule. resnet_ish runs too (compiled code is fast).

use heron_ir::npy::read_npy;
use heron_ir::testing::{assert_float_rule, shared_dir};
use heron_runtime::{CompileOptions, Compiler, Model};

fn check_model(name: &str) {
    let dir = shared_dir().join("reference");
    let model = Model::load(&dir.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
    let want = read_npy(&dir.join(format!("{name}.ref.npy"))).expect("reference output");
    let compiled = Compiler::new(CompileOptions::default()).compile(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
    let got = compiled.run(std::slice::from_ref(&input)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_float_rule(&got[0], &want).unwrap_or_else(|e| panic!("{name}: {e}"));
    // A second run in a reused workspace gives the same result.
    let mut ws = compiled.workspace().unwrap();
    let again = compiled.run_with(&mut ws, std::slice::from_ref(&input)).expect("run");
    let again2 = compiled.run_with(&mut ws, std::slice::from_ref(&input)).expect("run");
    assert_eq!(again, got);
    assert_eq!(again2, got);
    // The parallel loops give the same bits on any number of threads (3: uneven slices).
    let on = |threads: usize| {
        let options = CompileOptions { threads, ..CompileOptions::default() };
        let compiled = Compiler::new(options).compile(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
        compiled.run(std::slice::from_ref(&input)).unwrap_or_else(|e| panic!("{name}: {e}"))
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
