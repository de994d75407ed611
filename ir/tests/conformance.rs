//! The ONNX backend node tests in `shared/conformance/onnx-node`, run on the reference
//! interpreter. Prints passed / failed / skipped counts and the reason for every skip; fails on
//! any failure.

use heron_ir::testing::{CaseError, ConformanceCase, assert_conformance, load_conformance_case, run_conformance};
use heron_ir::{Tensor, interp};

fn run_case(dir: &std::path::Path) -> Result<(), CaseError> {
    let ConformanceCase { graph, inputs, expected } = load_conformance_case(dir)?;
    let got = interp::run(&graph, &inputs).map_err(|e| CaseError::Fail(format!("run: {e}")))?;
    for (i, (g, w)) in got.iter().zip(&expected).enumerate() {
        assert_conformance(g, w, 1e-7).map_err(|e| CaseError::Fail(format!("output {i}: {e}")))?;
    }
    // The same graph lowered to the loop IR, layout-transformed and flattened.
    let outs = lower_and_run(&graph, &inputs).map_err(|e| CaseError::Fail(format!("loop IR: {e}")))?;
    for (i, (g, w)) in outs.iter().zip(&expected).enumerate() {
        let g = g.reshape(w.shape()).unwrap_or_else(|_| g.clone());
        assert_conformance(&g, w, 1e-7).map_err(|e| CaseError::Fail(format!("loop IR output {i}: {e}")))?;
    }
    Ok(())
}

fn lower_and_run(graph: &heron_ir::Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    use heron_ir::loop_ir::{flatten, interp as loop_interp, layout, verify::verify_module};
    let mut m = heron_ir::lower::lower(graph).map_err(|e| e.to_string())?;
    verify_module(&m).map_err(|e| e.to_string())?;
    layout::apply_layout_transforms(&mut m).map_err(|e| e.to_string())?;
    flatten::flatten(&mut m);
    verify_module(&m).map_err(|e| e.to_string())?;
    loop_interp::run(&m, inputs).map_err(|e| e.to_string())
}

#[test]
fn onnx_node_conformance_on_interpreter() {
    let skips = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance_skips.txt");
    run_conformance("graph and loop-IR interpreters", &skips, run_case);
}
