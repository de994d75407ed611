//! The compile pipeline is one: what `heron lower --stage S` prints is what the compiler
//! compiles. The planned program, printed and parsed back, compiles to the same output bits as
//! the `Compiler`; the target stage runs on the loop-IR interpreter and matches the graph
//! interpreter on the reference models.

use heron_ir::loop_ir::parse::parse_module;
use heron_ir::loop_ir::print::{ConstData, print_module};
use heron_ir::loop_ir::verify::verify_module;
use heron_ir::npy::read_npy;
use heron_ir::testing::{assert_float_rule, shared_dir};
use heron_ir::{Tensor, loop_ir};
use heron_jit::{CodegenOptions, JitArg, JitModule, JitOptions};
use heron_planner::PoolKind;
use heron_runtime::pipeline::{Pipeline, PipelineOptions, Stage};
use heron_runtime::{CompileOptions, Compiler, Model};

fn reference(name: &str) -> (Model, Tensor) {
    let dir = shared_dir().join("reference");
    let model = Model::load(dir.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    (model, read_npy(&dir.join(format!("{name}.input.npy"))).expect("input"))
}

/// Compiles the planned program from its text and runs it on `input` with the planner's pools.
fn run_from_text(name: &str, model: &Model, input: &Tensor) -> Vec<Tensor> {
    let pipeline = Pipeline::new(PipelineOptions::default());
    let flat = pipeline.module(model, Stage::Flat).expect("flat module");
    let planned = pipeline.plan(&flat).expect("planned").planned.rewritten;
    let text = print_module(&planned.module, ConstData::Full);
    let parsed = parse_module(&text).unwrap_or_else(|e| panic!("{name}: the planned program does not parse: {e}"));
    // Buffer numbering may differ (the parser numbers in order of appearance); the text may not.
    assert!(
        print_module(&parsed, ConstData::Full) == text,
        "{name}: the planned program changes when printed and parsed"
    );
    verify_module(&parsed).unwrap_or_else(|e| panic!("{name}: {e}"));

    let outputs = model.outputs();
    let read_only: Vec<bool> = std::iter::once(true)
        .chain(outputs.iter().map(|_| false))
        .chain(planned.pools.iter().map(|p| p.kind == PoolKind::Constant))
        .collect();
    let options = JitOptions {
        opt_level: Default::default(),
        codegen: CodegenOptions { vectorize: true, fma: true },
        routines: heron_jit::kernels::routines(),
    };
    let jit = JitModule::compile(&parsed, &read_only, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    // What the target marked vectorized is what the code generator emitted vectorized.
    assert!(jit.scalar_vector_loops().is_empty(), "{name}: emitted as scalar: {:?}", jit.scalar_vector_loops());
    let mut input_bytes = vec![0u8; input.size_bytes()];
    input.write_le_bytes(&mut input_bytes);
    let mut out_bytes: Vec<Vec<u8>> = outputs.iter().map(|o| vec![0u8; o.ty.size_bytes()]).collect();
    let mut pools: Vec<Vec<u8>> = planned
        .images
        .iter()
        .zip(&planned.pool_sizes)
        .map(|(image, &size)| image.as_ref().map_or_else(|| vec![0u8; size as usize], |i| i.to_bytes().expect("image")))
        .collect();
    let args = std::iter::once(JitArg::Read(&input_bytes))
        .chain(out_bytes.iter_mut().map(|b| JitArg::Write(b)))
        .chain(pools.iter_mut().map(|p| JitArg::Write(p)));
    jit.run(args).unwrap_or_else(|e| panic!("{name}: {e}"));
    outputs.iter().zip(&out_bytes).map(|(o, b)| Tensor::from_le_bytes(&o.ty, b).expect("output")).collect()
}

#[test]
fn the_planned_program_as_printed_compiles_to_what_the_compiler_runs() {
    for name in ["tiny_relu", "mlp", "lenet", "mobilenet_ish", "resnet_ish"] {
        let (model, input) = reference(name);
        let compiled = Compiler::new(CompileOptions::default()).compile(&model).expect("compile");
        let want = compiled.run(std::slice::from_ref(&input)).expect("run");
        let got = run_from_text(name, &model, &input);
        assert_eq!(got, want, "{name}: the printed planned program computes something else");
    }
}

/// The target stage (layouts chosen, loops scheduled) on the loop-IR interpreter, against ONNX
/// Runtime's stored output.
fn target_stage_matches(name: &str) {
    let (model, input) = reference(name);
    let want = read_npy(&shared_dir().join("reference").join(format!("{name}.ref.npy"))).expect("reference output");
    let module = Pipeline::new(PipelineOptions::default()).module(&model, Stage::Target).expect("target stage");
    assert!(module.funcs.iter().all(|f| f.target.as_deref() == Some("cpu")), "{name}: every function has a target");
    let got =
        loop_ir::interp::run_with(&module, std::slice::from_ref(&input), Some(&heron_jit::kernels::KernelExterns))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    let got = got[0].reshape(want.shape()).expect("output shape");
    assert_float_rule(&got, &want).unwrap_or_else(|e| panic!("{name}: {e}"));
}

#[test]
fn target_stage_of_small_reference_models_matches_onnx_runtime() {
    for name in ["tiny_relu", "mlp", "lenet"] {
        target_stage_matches(name);
    }
}

#[test]
#[ignore = "slow: mobilenet_ish and resnet_ish through the loop-IR interpreter"]
fn target_stage_of_large_reference_models_matches_onnx_runtime() {
    for name in ["mobilenet_ish", "resnet_ish"] {
        target_stage_matches(name);
    }
}
