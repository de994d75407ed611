//! The ONNX backend node tests on the JIT engine: every case the interpreter supports must
//! compile and match the expected outputs. Cases the JIT cannot compile (dtypes it has no code
//! for) are skipped with the reason printed.

use heron_ir::testing::{CaseError, ConformanceCase, assert_close, conformance_dirs, load_conformance_case};
use heron_runtime::{CompileOptions, Compiler, Model, RuntimeError};

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
    let model = match Model::from_graph("case", graph) {
        Ok(m) => m,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let compiled = match Compiler::new(CompileOptions::default()).compile(&model) {
        Ok(c) => c,
        Err(e @ RuntimeError::Codegen(heron_jit::CodegenError::Unsupported { .. })) => {
            return Outcome::Skip(e.to_string());
        }
        Err(e) => return Outcome::Fail(format!("compile: {e}")),
    };
    let got = match compiled.run(&inputs) {
        Ok(o) => o,
        Err(e) => return Outcome::Fail(format!("run: {e}")),
    };
    for (i, (g, w)) in got.iter().zip(&expected).enumerate() {
        let g = g.reshape(w.shape()).unwrap_or_else(|_| g.clone());
        if let Err(e) = assert_close(&g, w, 1e-3, 1e-6) {
            return Outcome::Fail(format!("output {i}: {e}"));
        }
    }
    Outcome::Pass
}

#[test]
fn onnx_node_conformance_on_jit() {
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
    println!("onnx-node conformance (JIT): {pass} passed, {} failed, {} skipped", fail.len(), skip.len());
    assert!(fail.is_empty(), "{} conformance failures", fail.len());
}
