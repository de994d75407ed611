//! The reference models in `shared/reference/`: the interpreter's output for the stored input
//! must match ONNX Runtime's stored output under the project's float rule, before and after the
//! graph passes. resnet_ish is left to the opt-in slow test (`cargo test -- --ignored`).

mod common;

use heron_ir::npy::read_npy;
use heron_ir::onnx::{ImportOptions, load_model};
use heron_ir::{interp, passes, verify};

fn check_model(name: &str) {
    let dir = common::shared_dir().join("reference");
    let graph = load_model(&dir.join(format!("{name}.onnx")), &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    verify(&graph).unwrap_or_else(|e| panic!("{name}: {e}"));
    let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
    let want = read_npy(&dir.join(format!("{name}.ref.npy"))).expect("reference output");
    let got = interp::run(&graph, std::slice::from_ref(&input)).expect("interpreter");
    common::assert_float_rule(&got[0], &want).unwrap_or_else(|e| panic!("{name}: {e}"));

    let mut optimized = graph.clone();
    let stats = passes::optimize(&mut optimized);
    verify(&optimized).unwrap_or_else(|e| panic!("{name} after passes: {e}"));
    let got = interp::run(&optimized, &[input]).expect("interpreter on optimized graph");
    common::assert_float_rule(&got[0], &want).unwrap_or_else(|e| panic!("{name} after passes {stats:?}: {e}"));
    assert_eq!(optimized.value(optimized.outputs[0]).name, graph.value(graph.outputs[0]).name);
}

#[test]
fn tiny_relu_matches_onnx_runtime() {
    check_model("tiny_relu");
}

#[test]
fn mlp_matches_onnx_runtime() {
    check_model("mlp");
}

#[test]
fn lenet_matches_onnx_runtime() {
    check_model("lenet");
}

#[test]
fn mobilenet_ish_matches_onnx_runtime() {
    check_model("mobilenet_ish");
}

#[test]
#[ignore = "slow: runs resnet_ish through the interpreter"]
fn resnet_ish_matches_onnx_runtime() {
    check_model("resnet_ish");
}

#[test]
fn batch_norms_of_mobilenet_fold_into_convs() {
    let dir = common::shared_dir().join("reference");
    let mut g = load_model(&dir.join("mobilenet_ish.onnx"), &ImportOptions::default()).unwrap();
    let stats = passes::optimize(&mut g);
    assert_eq!(stats.folded_batch_norms, 13, "{stats:?}");
    assert!(g.nodes.iter().all(|n| n.op.name() != "BatchNormalization"));
}
