//! The ONNX backend node tests in `shared/conformance/onnx-node`, run on the reference
//! interpreter. Prints passed / failed / skipped counts and the reason for every skip; fails on
//! any failure.

mod common;

use heron_ir::onnx::{ImportError, ImportOptions, import_model, proto, tensor_from_proto};
use heron_ir::{Tensor, interp};
use prost::Message;

enum Outcome {
    Pass,
    Skip(String),
    Fail(String),
}

fn read_pb(path: &std::path::Path) -> Result<Result<Tensor, String>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = proto::TensorProto::decode(&bytes[..]).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(tensor_from_proto(&t).map_err(|e| e.to_string()))
}

fn run_case(dir: &std::path::Path) -> Outcome {
    let model_bytes = match std::fs::read(dir.join("model.onnx")) {
        Ok(b) => b,
        Err(e) => return Outcome::Fail(format!("cannot read model: {e}")),
    };
    let model = match proto::ModelProto::decode(&model_bytes[..]) {
        Ok(m) => m,
        Err(e) => return Outcome::Fail(format!("decode: {e}")),
    };
    // Non-tensor inputs (sequence, optional) have no TensorProto data: let the importer say why.
    if let Err(e @ ImportError::UnsupportedTypeKind { .. }) = import_model(&model_bytes, &ImportOptions::default()) {
        return Outcome::Skip(e.to_string());
    }
    let g = model.graph.unwrap_or_default();
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    let input_names: Vec<&str> = g.input.iter().map(|i| i.name.as_str()).filter(|n| !inits.contains(n)).collect();
    let data = dir.join("test_data_set_0");
    let mut options = ImportOptions::default();
    for (i, name) in input_names.iter().enumerate() {
        match read_pb(&data.join(format!("input_{i}.pb"))) {
            Err(e) => return Outcome::Skip(format!("input not a tensor ({e})")),
            Ok(Err(e)) => return Outcome::Skip(e),
            Ok(Ok(t)) => {
                options.known_values.insert(name.to_string(), t);
            }
        }
    }
    let mut expected = Vec::new();
    for i in 0..g.output.len() {
        match read_pb(&data.join(format!("output_{i}.pb"))) {
            Err(e) => return Outcome::Skip(format!("output not a tensor ({e})")),
            Ok(Err(e)) => return Outcome::Skip(e),
            Ok(Ok(t)) => expected.push(t),
        }
    }
    let graph = match import_model(&model_bytes, &options) {
        Ok(g) => g,
        Err(e @ (ImportError::UnsupportedDtype { .. } | ImportError::UnsupportedTypeKind { .. })) => {
            return Outcome::Skip(e.to_string());
        }
        Err(e @ ImportError::TrainingMode { .. }) => {
            return Outcome::Skip(format!("needs training/randomness: {e}"));
        }
        Err(e) => return Outcome::Fail(format!("import: {e}")),
    };
    if let Err(e) = heron_ir::verify(&graph) {
        return Outcome::Fail(e.to_string());
    }
    let inputs: Vec<Tensor> =
        graph.inputs.iter().map(|&id| options.known_values[&graph.value(id).name].clone()).collect();
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
    let root = common::shared_dir().join("conformance/onnx-node");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    dirs.sort();
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
