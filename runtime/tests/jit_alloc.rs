//! A run allocates nothing but its outputs, on one thread or several: counted with a global
//! allocator that tallies the allocations of every thread (this binary runs one test, so no
//! other test's allocations mix in).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use heron_ir::Tensor;
use heron_ir::npy::read_npy;
use heron_ir::testing::shared_dir;
use heron_runtime::{CompileOptions, Compiler, Engine, Model};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; the counter is an atomic, touched without
// allocating.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_run_allocates_only_its_outputs_and_a_run_into_nothing() {
    use heron_ir::quantize::{QuantizeOptions, quantize_model};
    let dir = shared_dir().join("reference");
    // mobilenet_ish quantized too: its integer convolutions run on the integer kernels.
    for (name, quantized) in [("lenet", false), ("mobilenet_ish", false), ("mobilenet_ish", true)] {
        let path = dir.join(format!("{name}.onnx"));
        let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
        let model = if quantized {
            let float = std::fs::read(&path).expect("model file");
            let samples = [vec![input.clone()]];
            let (bytes, _) = quantize_model(&float, &samples, &QuantizeOptions::default()).expect("quantize");
            let tmp = tempfile::Builder::new().prefix("heron-alloc-").tempdir().expect("temporary directory");
            let file = tmp.path().join("quantized.onnx");
            std::fs::write(&file, bytes).expect("write");
            Model::load(&file).expect("quantized model")
        } else {
            Model::load(&path).expect("model")
        };
        // The JIT on one and on two threads (parallel loops on the workspace's pool), and a
        // shared library compiled ahead of time, through the same API.
        for (engine, threads) in [(Engine::Jit, 1), (Engine::Jit, 2), (Engine::Aot, 1)] {
            let options = CompileOptions { engine, threads, ..CompileOptions::default() };
            let compiled = Compiler::new(options).compile(&model).expect("compile");
            let mut ws = compiled.workspace().unwrap();
            let inputs = [input.clone()];
            compiled.run_with(&mut ws, &inputs).expect("warm-up run");
            let before = ALLOCATIONS.load(Ordering::SeqCst);
            let outputs = compiled.run_with(&mut ws, &inputs).expect("run");
            let during = ALLOCATIONS.load(Ordering::SeqCst) - before;
            // The output vector, and per output tensor its data and (at most) its shape.
            assert!(
                during <= 1 + 2 * outputs.len(),
                "{name}, {engine:?} on {threads} thread(s): {during} allocations for {} output(s)",
                outputs.len()
            );
            // Into the tensors of an earlier run: nothing at all, and the same results.
            let mut reused = outputs.clone();
            reused.iter_mut().for_each(|t| *t = Tensor::zeros(&t.tensor_type()));
            let before = ALLOCATIONS.load(Ordering::SeqCst);
            compiled.run_into(&mut ws, &inputs, &mut reused).expect("run into");
            let during = ALLOCATIONS.load(Ordering::SeqCst) - before;
            assert_eq!(during, 0, "{name}, {engine:?} on {threads} thread(s): run_into allocated");
            assert_eq!(reused, outputs, "{name}, {engine:?} on {threads} thread(s)");
        }
    }
}
