//! The inference API around the JIT: sharing one compiled model between threads, workspaces,
//! and errors before any generated code runs.

use heron_ir::npy::read_npy;
use heron_ir::testing::{assert_float_rule, data, shared_dir};
use heron_ir::{DType, Tensor, TensorType};
use heron_runtime::{CompileOptions, CompiledModel, Compiler, Model, RuntimeError};

fn lenet() -> (CompiledModel, Tensor) {
    let dir = shared_dir().join("reference");
    let model = Model::load(dir.join("lenet.onnx")).expect("lenet");
    let input = read_npy(&dir.join("lenet.input.npy")).expect("input");
    (Compiler::new(CompileOptions::default()).compile(&model).expect("compile"), input)
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn two_threads_share_one_compiled_model() {
    assert_send_sync::<CompiledModel>();
    let (compiled, _) = lenet();
    let inputs: Vec<Tensor> =
        (0..8).map(|s| Tensor::from_vec(&[1, 1, 28, 28], data(s + 1, 28 * 28)).expect("input")).collect();
    let want: Vec<Vec<Tensor>> =
        inputs.iter().map(|x| compiled.run(std::slice::from_ref(x)).expect("single-threaded run")).collect();
    std::thread::scope(|scope| {
        for t in 0..2 {
            let (compiled, inputs, want) = (&compiled, &inputs, &want);
            scope.spawn(move || {
                let mut ws = compiled.workspace().unwrap();
                for round in 0..50 {
                    let k = (round * 3 + t) % inputs.len();
                    let got = compiled.run_with(&mut ws, std::slice::from_ref(&inputs[k])).expect("run");
                    assert_eq!(got, want[k], "thread {t}, round {round}");
                }
            });
        }
    });
}

#[test]
fn jit_matches_the_interpreter_on_lenet() {
    let (compiled, input) = lenet();
    let model = Model::load(shared_dir().join("reference/lenet.onnx")).expect("lenet");
    let want = model.run_interpreter(std::slice::from_ref(&input)).expect("interpreter");
    let got = compiled.run(std::slice::from_ref(&input)).expect("jit");
    assert_float_rule(&got[0], &want[0]).expect("float rule");
}

#[test]
fn wrong_inputs_are_rejected_before_running() {
    let (compiled, input) = lenet();
    let mut ws = compiled.workspace().unwrap();
    assert!(matches!(compiled.run_with(&mut ws, &[]), Err(RuntimeError::InputCount { .. })));
    let wrong_shape = Tensor::zeros(&TensorType::new(DType::F32, vec![1, 1, 28, 27]));
    assert!(matches!(compiled.run_with(&mut ws, &[wrong_shape]), Err(RuntimeError::InputType { .. })));
    let wrong_dtype = Tensor::zeros(&TensorType::new(DType::F64, vec![1, 1, 28, 28]));
    assert!(matches!(compiled.run_with(&mut ws, &[wrong_dtype]), Err(RuntimeError::InputType { .. })));
    assert!(matches!(
        compiled.run_with(&mut ws, &[input.clone(), input.clone()]),
        Err(RuntimeError::InputCount { .. })
    ));
    // A workspace of another model is refused.
    let builtin = Compiler::new(CompileOptions::default()).compile(&Model::builtin()).expect("builtin");
    let mut foreign = builtin.workspace().unwrap();
    assert!(matches!(compiled.run_with(&mut foreign, &[input]), Err(RuntimeError::ForeignWorkspace)));
}

/// `run_into` writes the outputs in place when it can, through staging otherwise (a tensor not
/// in standard layout, guard pages), gives `run_with`'s results every way, and refuses tensors
/// of the wrong count, dtype or shape.
#[test]
fn run_into_writes_the_given_tensors() {
    use heron_runtime::GuardPages;
    let (compiled, input) = lenet();
    let want = compiled.run(std::slice::from_ref(&input)).expect("run");
    let mut ws = compiled.workspace().unwrap();
    let mut outputs = vec![Tensor::zeros(&compiled.outputs()[0].ty)];
    compiled.run_into(&mut ws, std::slice::from_ref(&input), &mut outputs).expect("in place");
    assert_eq!(outputs, want);
    // An input in column-major order and an output with gaps take the staging buffers.
    let Tensor::F32(a) = &input else { panic!("f32 input") };
    let column_major = Tensor::F32(a.t().as_standard_layout().into_owned().reversed_axes());
    assert!(column_major.le_bytes().is_none() && column_major == input);
    let gaps = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[1, 20]));
    let mut strided = vec![Tensor::F32(gaps.slice_move(ndarray::s![.., ..;2]).into_dyn())];
    assert!(strided[0].le_bytes_mut().is_none());
    compiled.run_into(&mut ws, &[column_major], &mut strided).expect("staged");
    assert_eq!(strided, want);
    let options = CompileOptions { guard_pages: GuardPages::End, ..CompileOptions::default() };
    let model = Model::load(shared_dir().join("reference/lenet.onnx")).expect("lenet");
    let guarded = Compiler::new(options).compile(&model).expect("guarded");
    let mut outputs = vec![Tensor::zeros(&compiled.outputs()[0].ty)];
    guarded.run_into(&mut guarded.workspace().unwrap(), std::slice::from_ref(&input), &mut outputs).expect("guarded");
    assert_eq!(outputs, want);
    let mut none: Vec<Tensor> = Vec::new();
    assert!(matches!(
        compiled.run_into(&mut ws, std::slice::from_ref(&input), &mut none),
        Err(RuntimeError::OutputCount { expected: 1, got: 0 })
    ));
    let mut wrong = vec![Tensor::zeros(&TensorType::new(DType::F32, vec![1, 9]))];
    let err = compiled.run_into(&mut ws, std::slice::from_ref(&input), &mut wrong).unwrap_err();
    assert!(matches!(err, RuntimeError::OutputType { .. }), "{err}");
    assert!(err.to_string().contains("f32[1, 9]"), "{err}");
}

#[test]
fn introspection_names_shapes_and_pools() {
    let (compiled, _) = lenet();
    assert_eq!(compiled.inputs().len(), 1);
    assert_eq!(compiled.inputs()[0].ty, TensorType::new(DType::F32, vec![1, 1, 28, 28]));
    assert_eq!(compiled.outputs()[0].ty.shape, vec![1, 10]);
    assert!(compiled.pools().iter().any(|p| p.size_bytes > 0));
    assert!(compiled.workspace().unwrap().pool_bytes() > 0);
}
