//! Fuzz target of the compiler (see `heron_ir::testing::fuzz`): random small models, sometimes
//! with their bytes mutated, imported, compiled by the JIT and run; wherever the interpreter
//! and the JIT both give a result, they agree. A panic is a finding (reported with its seed).
//! `HERON_FUZZ_CASES=N` (and `HERON_FUZZ_SEED=S`) run more.

use std::panic::{AssertUnwindSafe, catch_unwind};

use heron_ir::onnx::{ImportOptions, import_model};
use heron_ir::testing::assert_engines_agree;
use heron_ir::testing::fuzz::{Rng, mutate_bytes, random_model, seeds};
use heron_runtime::{CompileOptions, Compiler, Model};

fn case(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let (mut bytes, inputs) = random_model(&mut rng);
    if rng.chance(0.2) {
        bytes = mutate_bytes(&mut rng, &bytes);
    }
    let Ok(graph) = import_model(&bytes, &ImportOptions::default()) else { return Ok(()) };
    let Ok(model) = Model::from_graph("fuzz", graph) else { return Ok(()) };
    let Ok(inputs) = model.check_inputs(&inputs).map(|()| inputs) else { return Ok(()) };
    let want = model.run_interpreter(&inputs);
    let Ok(compiled) = Compiler::new(CompileOptions::default()).compile(&model) else { return Ok(()) };
    let got = compiled.run(&inputs);
    if let (Ok(got), Ok(want)) = (got, want) {
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_engines_agree(g, w).map_err(|e| format!("output {k}: JIT and interpreter differ: {e}"))?;
        }
    }
    Ok(())
}

#[test]
fn fuzz_compile_and_run() {
    let range = seeds(150);
    let count = range.end - range.start;
    let mut failed = Vec::new();
    for seed in range {
        match catch_unwind(AssertUnwindSafe(|| case(seed))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("seed {seed}: {e}")),
            Err(_) => failed.push(format!("seed {seed}: panicked")),
        }
    }
    println!("compile and run: {count} cases, {} failed", failed.len());
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
