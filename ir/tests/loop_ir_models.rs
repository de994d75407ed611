//! Lowered programs compute what the graph interpreter computes: on the reference models before
//! and after layout transforms and flattening, and at every stage the loop-IR verifier passes.

mod common;

use heron_ir::loop_ir::{flatten, interp as loop_interp, layout, print, verify::verify_module};
use heron_ir::npy::read_npy;
use heron_ir::onnx::{ImportOptions, load_model};
use heron_ir::{Graph, Tensor, interp, lower, passes};

/// Runs the three stages of `graph` on `inputs` and compares each with the graph interpreter.
pub fn check_stages(graph: &Graph, inputs: &[Tensor]) {
    let want = interp::run(graph, inputs).expect("graph interpreter");
    let mut m = lower::lower(graph).expect("lowering");
    for stage in ["lowered", "layout", "flat"] {
        match stage {
            "layout" => layout::apply_layout_transforms(&mut m).expect("layout transforms"),
            "flat" => flatten::flatten(&mut m),
            _ => {}
        }
        verify_module(&m)
            .unwrap_or_else(|e| panic!("{stage}: {e}\n{}", print::print_module(&m, print::ConstData::Elided)));
        let got = loop_interp::run(&m, inputs).unwrap_or_else(|e| panic!("{stage}: {e}"));
        for ((g, w), &o) in got.iter().zip(&want).zip(&graph.outputs) {
            let g = g.reshape(&graph.ty(o).shape).unwrap();
            let r = if w.dtype().is_float() {
                common::assert_float_rule(&g, w)
            } else {
                common::assert_close(&g, w, 0.0, 0.0)
            };
            r.unwrap_or_else(|e| panic!("{stage}, output '{}': {e}", graph.value(o).name));
        }
    }
}

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
