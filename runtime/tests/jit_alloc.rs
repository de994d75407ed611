//! A run allocates nothing but its outputs: counted with a global allocator that tallies the
//! allocations of the current thread.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use heron_ir::npy::read_npy;
use heron_ir::testing::shared_dir;
use heron_runtime::{CompileOptions, Compiler, Engine, Model};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a thread-local Cell, touched without
// allocating.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
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
fn a_run_allocates_only_its_outputs() {
    let dir = shared_dir().join("reference");
    let model = Model::load(&dir.join("lenet.onnx")).expect("lenet");
    let input = read_npy(&dir.join("lenet.input.npy")).expect("input");
    // The JIT, and a shared library compiled ahead of time, through the same API.
    for engine in [Engine::Jit, Engine::Aot] {
        let compiled =
            Compiler::new(CompileOptions { engine, ..CompileOptions::default() }).compile(&model).expect("compile");
        let mut ws = compiled.workspace().unwrap();
        let inputs = [input.clone()];
        compiled.run_with(&mut ws, &inputs).expect("warm-up run");
        let before = ALLOCATIONS.with(Cell::get);
        let outputs = compiled.run_with(&mut ws, &inputs).expect("run");
        let during = ALLOCATIONS.with(Cell::get) - before;
        // The output vector, and per output tensor its data and (at most) its shape.
        assert!(during <= 1 + 2 * outputs.len(), "{engine:?}: {during} allocations for {} output(s)", outputs.len());
    }
}
