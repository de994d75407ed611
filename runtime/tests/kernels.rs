//! The CPU target's precompiled kernels on whole models: with kernels on (the default), the
//! reference models still match ONNX Runtime's outputs, give the same bits on one and two
//! threads, and the target stage shows the kernel calls; with kernels off, no call is left and
//! the generated code matches too.

use heron_ir::npy::read_npy;
use heron_ir::testing::{assert_float_rule, shared_dir};
use heron_jit::kernels::KernelConfig;
use heron_runtime::pipeline::{Pipeline, PipelineOptions, Stage};
use heron_runtime::{CompileOptions, Compiler, Model};

fn kernel_calls(model: &Model, kernels: Option<KernelConfig>) -> usize {
    let options = PipelineOptions { kernels, ..PipelineOptions::default() };
    let module = Pipeline::new(options).module(model, Stage::Target).expect("target stage");
    let text = heron_ir::loop_ir::print::print_module(&module, heron_ir::loop_ir::print::ConstData::Elided);
    text.matches("call extern \"heron_").count()
}

#[test]
fn reference_models_match_with_kernels_on_and_off() {
    let dir = shared_dir().join("reference");
    let expected_calls = [("mlp", 3), ("lenet", 7), ("mobilenet_ish", 14), ("resnet18", 22), ("mobilenet_v2", 53)];
    for (name, calls) in expected_calls {
        let model = Model::load(&dir.join(format!("{name}.onnx"))).expect("model");
        let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
        let want = read_npy(&dir.join(format!("{name}.ref.npy"))).expect("reference output");
        let config = KernelConfig::host(2);
        if config.is_some() {
            assert_eq!(kernel_calls(&model, config), calls, "{name}: kernel calls at the target stage");
        }
        assert_eq!(kernel_calls(&model, None), 0, "{name}: kernels off");
        let run = |kernels: bool, threads: usize| {
            let options = CompileOptions { kernels, threads, ..CompileOptions::default() };
            let compiled = Compiler::new(options).compile(&model).expect("compile");
            compiled.run(std::slice::from_ref(&input)).expect("run").remove(0)
        };
        let (one, two) = (run(true, 1), run(true, 2));
        assert_eq!(one, two, "{name}: kernels give different bits on one and two threads");
        assert_float_rule(&one, &want).unwrap_or_else(|e| panic!("{name} with kernels: {e}"));
        assert_float_rule(&run(false, 1), &want).unwrap_or_else(|e| panic!("{name} without kernels: {e}"));
    }
}
