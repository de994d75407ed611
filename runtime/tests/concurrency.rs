//! Several threads sharing one compiled model, with real overlap: every thread runs
//! mobilenet_ish over and over for seconds, each in its own workspace and on its own input,
//! and every result must be bit-identical to the same input run alone. Once on the JIT (each
//! workspace with its own 2-thread pool for the parallel loops) and once on the AOT shared
//! library.

use std::time::{Duration, Instant};

use heron_ir::Tensor;
use heron_ir::npy::read_npy;
use heron_ir::testing::{data, shared_dir};
use heron_runtime::{CompileOptions, CompiledModel, Compiler, Engine, Model};

const THREADS: usize = 4;
/// How long the threads run side by side.
const OVERLAP: Duration = Duration::from_secs(2);

fn stress(compiled: &CompiledModel, base: &Tensor) {
    // One input per thread, so a run reading another thread's memory would show.
    let inputs: Vec<Tensor> = (0..THREADS)
        .map(|t| {
            let noise = data(t as u64 + 1, base.len());
            let v: Vec<f32> = base.to_f64_vec().iter().zip(noise).map(|(x, n)| *x as f32 + 0.1 * n).collect();
            Tensor::from_vec(base.shape(), v).expect("input shape")
        })
        .collect();
    let alone: Vec<Vec<Tensor>> = inputs.iter().map(|x| compiled.run(std::slice::from_ref(x)).expect("run")).collect();
    let runs: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (input, want) = (&inputs[t], &alone[t]);
                s.spawn(move || {
                    let mut ws = compiled.workspace().expect("workspace");
                    let start = Instant::now();
                    let mut n = 0;
                    while start.elapsed() < OVERLAP || n < 3 {
                        let got = compiled.run_with(&mut ws, std::slice::from_ref(input)).expect("run");
                        assert_eq!(&got, want, "thread {t}, run {n}: differs from the same input run alone");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    println!("{:?}: {THREADS} threads, {runs:?} runs each over {OVERLAP:?}, all identical", compiled.engine());
}

fn mobilenet() -> (Model, Tensor) {
    let dir = shared_dir().join("reference");
    let model = Model::load(dir.join("mobilenet_ish.onnx")).expect("model");
    let input = read_npy(&dir.join("mobilenet_ish.input.npy")).expect("input");
    (model, input)
}

#[test]
fn threads_share_one_jit_model() {
    let (model, input) = mobilenet();
    let options = CompileOptions { threads: 2, ..CompileOptions::default() };
    let compiled = Compiler::new(options).compile(&model).expect("compile");
    stress(&compiled, &input);
}

#[test]
fn threads_share_one_aot_library() {
    let (model, input) = mobilenet();
    let options = CompileOptions { engine: Engine::Aot, ..CompileOptions::default() };
    let compiled = Compiler::new(options).compile(&model).expect("compile");
    stress(&compiled, &input);
}
