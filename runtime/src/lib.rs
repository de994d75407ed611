//! heron-runtime: the inference API (load a model, bind and check inputs, run it) and the
//! `heron` command-line tool.
//!
//! ```
//! use heron_runtime::Model;
//! use heron_runtime::builtin::builtin_input;
//!
//! let model = Model::builtin();
//! let inputs = model.bind_inputs(vec![(Some("image".into()), builtin_input())]).unwrap();
//! let outputs = model.run_interpreter(&inputs).unwrap();
//! assert_eq!(outputs[0].shape(), &[1, 10]);
//! ```

pub mod builtin;
mod compiler;
mod model;

pub use compiler::{CompileOptions, CompileStats, CompiledModel, Compiler, Engine, PoolLayout, Workspace};
pub use heron_jit::isa::OptLevel;
pub use model::{Model, RuntimeError, TensorInfo};
