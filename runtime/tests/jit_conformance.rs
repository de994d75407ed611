//! The ONNX backend node tests on the JIT engine: every case the interpreter supports must
//! compile and match the expected outputs, in ordinary memory and between guard pages. Cases
//! the JIT cannot compile (dtypes it has no code for) are skipped with the reason printed.

use heron_ir::testing::{CaseError, ConformanceCase, assert_conformance, load_conformance_case, run_conformance};
use heron_runtime::{CompileOptions, Compiler, GuardPages, Model, RuntimeError};

fn run_case(dir: &std::path::Path, guard_pages: GuardPages) -> Result<(), CaseError> {
    let ConformanceCase { graph, inputs, expected } = load_conformance_case(dir)?;
    let model = Model::from_graph("case", graph).map_err(|e| CaseError::Fail(e.to_string()))?;
    let options = CompileOptions { guard_pages, ..CompileOptions::default() };
    let compiled = match Compiler::new(options).compile(&model) {
        Ok(c) => c,
        Err(e @ RuntimeError::Codegen(heron_jit::CodegenError::Unsupported { .. })) => {
            return Err(CaseError::Skip(e.to_string()));
        }
        Err(e) => return Err(CaseError::Fail(format!("compile: {e}"))),
    };
    let got = compiled.run(&inputs).map_err(|e| CaseError::Fail(format!("run: {e}")))?;
    for (i, (g, w)) in got.iter().zip(&expected).enumerate() {
        let g = g.reshape(w.shape()).unwrap_or_else(|_| g.clone());
        assert_conformance(&g, w, 1e-6).map_err(|e| CaseError::Fail(format!("output {i}: {e}")))?;
    }
    Ok(())
}

/// The cases the JIT is expected to skip.
fn skips() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/jit_conformance_skips.txt")
}

#[test]
fn onnx_node_conformance_on_jit() {
    run_conformance("JIT", &skips(), |dir| run_case(dir, GuardPages::from_env()));
}

/// Every pool and staging buffer flush against a guard page: an access past any end, or before
/// any start, would fault.
#[test]
fn onnx_node_conformance_between_guard_pages() {
    for mode in [GuardPages::End, GuardPages::Start] {
        run_conformance(&format!("JIT, guard pages at the {mode}"), &skips(), |dir| run_case(dir, mode));
    }
}
