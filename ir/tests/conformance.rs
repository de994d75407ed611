//! The ONNX backend node tests in `shared/conformance/onnx-node`, run on the reference
//! interpreter. Prints passed / failed / skipped counts and the reason for every skip; fails on
//! any failure.

mod common;

use heron_ir::testing::{CaseError, ConformanceCase, conformance_dirs, load_conformance_case};
use heron_ir::{Tensor, interp};

enum Outcome {
    Pass,
    Skip(String),
    Fail(String),
}

fn run_case(dir: &std::path::Path) -> Outcome {
    let ConformanceCase { graph, inputs, expected } = match load_conformance_case(dir) {
        Ok(c) => c,
        Err(CaseError::Skip(r)) => return Outcome::Skip(r),
        Err(CaseError::Fail(r)) => return Outcome::Fail(r),
    };
    let got = match interp::run(&graph, &inputs) {
        Ok(o) => o,
        Err(e) => return Outcome::Fail(format!("run: {e}")),
    };
    for (i, (g, w)) in got.iter().zip(&expected).enumerate() {
        if let Err(e) = common::assert_close(g, w, 1e-3, 1e-7) {
            return Outcome::Fail(format!("output {i}: {e}"));
        }
    }
    // The same graph lowered to the loop IR, layout-transformed and flattened.
    let lowered = lower_and_run(&graph, &inputs);
    match lowered {
        Err(e) => return Outcome::Fail(format!("loop IR: {e}")),
        Ok(outs) => {
            for (i, (g, w)) in outs.iter().zip(&expected).enumerate() {
                let g = g.reshape(w.shape()).unwrap_or_else(|_| g.clone());
                if let Err(e) = common::assert_close(&g, w, 1e-3, 1e-7) {
                    return Outcome::Fail(format!("loop IR output {i}: {e}"));
                }
            }
        }
    }
    Outcome::Pass
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
    let dirs = conformance_dirs();
    assert!(dirs.len() >= 400, "expected the 409 conformance tests, found {}", dirs.len());
    let (mut pass, mut fail, mut skip) = (0, Vec::new(), Vec::new());
    for d in &dirs {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        match run_case(d) {
            Outcome::Pass => pass += 1,
            Outcome::Skip(r) => skip.push((name, r)),
            Outcome::Fail(r) => fail.push((name, r)),
        }
    }
    for (n, r) in &skip {
        println!("skipped {n}: {r}");
    }
    for (n, r) in &fail {
        println!("FAILED {n}: {r}");
    }
    println!(
        "onnx-node conformance (graph and loop-IR interpreters): {pass} passed, {} failed, {} skipped",
        fail.len(),
        skip.len()
    );
    assert!(fail.is_empty(), "{} conformance failures", fail.len());
}
