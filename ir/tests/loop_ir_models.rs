//! Lowered programs compute what the graph interpreter computes: on the reference models before
//! and after layout transforms and flattening, and at every stage the loop-IR verifier passes.

mod common;

use common::check_stages;
use heron_ir::loop_ir::{flatten, layout, verify::verify_module};
use heron_ir::npy::read_npy;
use heron_ir::onnx::{ImportOptions, load_model};
use heron_ir::{Graph, Tensor, lower, passes};

fn model(name: &str) -> (Graph, Tensor) {
    let dir = common::shared_dir().join("reference");
    let mut g = load_model(&dir.join(format!("{name}.onnx")), &ImportOptions::default()).unwrap();
    passes::optimize(&mut g);
    (g, read_npy(&dir.join(format!("{name}.input.npy"))).unwrap())
}

#[test]
fn tiny_relu_stages_match() {
    let (g, x) = model("tiny_relu");
    check_stages(&g, &[x]);
}

#[test]
fn mlp_stages_match() {
    let (g, x) = model("mlp");
    check_stages(&g, &[x]);
}

#[test]
fn lenet_stages_match() {
    let (g, x) = model("lenet");
    check_stages(&g, &[x]);
}

#[test]
#[ignore = "slow: mobilenet_ish through the loop-IR interpreter"]
fn mobilenet_ish_stages_match() {
    let (g, x) = model("mobilenet_ish");
    check_stages(&g, &[x]);
}

#[test]
#[ignore = "slow: resnet_ish through the loop-IR interpreter"]
fn resnet_ish_stages_match() {
    let (g, x) = model("resnet_ish");
    check_stages(&g, &[x]);
}

#[test]
fn every_reference_model_lowers_and_verifies_at_every_stage() {
    for name in ["tiny_relu", "mlp", "lenet", "mobilenet_ish", "resnet_ish"] {
        let (g, _) = model(name);
        let mut m = lower::lower(&g).unwrap();
        verify_module(&m).unwrap_or_else(|e| panic!("{name} lowered: {e}"));
        layout::apply_layout_transforms(&mut m).unwrap();
        verify_module(&m).unwrap_or_else(|e| panic!("{name} layout: {e}"));
        flatten::flatten(&mut m);
        verify_module(&m).unwrap_or_else(|e| panic!("{name} flat: {e}"));
        assert!(m.funcs.iter().flat_map(|f| &f.buffers).all(|b| b.shape.len() <= 1), "{name}: everything is 1-d");
    }
}
