//! heron-runtime: the inference API (load a model, compile it with Cranelift, run it with
//! statically planned memory) and the `heron` command-line tool.
//!
//! ```
//! use heron_runtime::{CompileOptions, Compiler, Model};
//! use heron_runtime::builtin::builtin_input;
//!
//! // Load (or `Model::load("model.onnx")`), compile once...
//! let model = Model::builtin();
//! let compiled = Compiler::new(CompileOptions::default()).compile(&model).unwrap();
//! println!("{} -> {}", compiled.inputs()[0].ty, compiled.outputs()[0].ty);
//!
//! // ...then run as often as needed; a workspace holds the memory pools and is reused, so a
//! // run allocates nothing but its outputs. Threads share `compiled`, each with a workspace.
//! let mut workspace = compiled.workspace().unwrap();
//! let inputs = model.bind_inputs(vec![(Some("image".into()), builtin_input())]).unwrap();
//! let outputs = compiled.run_with(&mut workspace, &inputs).unwrap();
//! assert_eq!(outputs[0].shape(), &[1, 10]);
//!
//! // The reference interpreter gives the same answer (to float rounding).
//! let want = model.run_interpreter(&inputs).unwrap();
//! let (got, want) = (outputs[0].to_f64_vec(), want[0].to_f64_vec());
//! assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-4 * w.abs().max(1.0)));
//! ```

pub mod builtin;
mod compiler;
mod dynamic;
pub mod memory;
mod model;
pub mod pipeline;
pub mod vta;

pub use compiler::{
    CompileOptions, CompileStats, CompiledModel, Compiler, Engine, PoolLayout, VtaStats, Workspace, physical_cores,
};
pub use dynamic::DynamicModel;
pub use heron_ir::Limits;
pub use heron_jit::isa::OptLevel;
pub use heron_vta::HwConfig;
pub use memory::GuardPages;
pub use model::{Model, RuntimeError, TensorInfo};
