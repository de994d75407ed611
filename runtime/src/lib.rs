//! heron-runtime: the inference API: load a model, compile it with Cranelift, run it with
//! statically planned memory. (The `heron` command-line tool is `runtime/cli`; the Python
//! package is `runtime/python`.)
//!
//! ```
//! use heron_runtime::{CompileOptions, Compiler, Model, Tensor};
//!
//! // Load (or `Model::load("model.onnx")?`), compile once...
//! let model = Model::builtin();
//! let compiled = Compiler::new(CompileOptions::default()).compile(&model)?;
//! println!("{} -> {}", compiled.inputs()[0].ty, compiled.outputs()[0].ty);
//!
//! // ...then run as often as needed; a workspace holds the memory pools and is reused, so a
//! // run allocates nothing but its outputs. Threads share `compiled`, each with a workspace.
//! let mut workspace = compiled.workspace()?;
//! let image = Tensor::from_vec(&[1, 3, 32, 32], vec![0.5f32; 3 * 32 * 32])?;
//! let outputs = compiled.run_named(&mut workspace, vec![(Some("image".into()), image.clone())])?;
//! let (name, scores) = &outputs[0];
//! println!("{name}: {:?}", scores.shape());
//!
//! // The reference interpreter gives the same answer (to float rounding).
//! let want = model.run_interpreter(&[image])?;
//! let (got, want) = (scores.to_f64_vec(), want[0].to_f64_vec());
//! assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-4 * w.abs().max(1.0)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Tensors read from and write to `.npy` files ([`read_npy`], [`write_npy`]); errors convert
//! into [`RuntimeError`] with `?` and print as sentences.

#![warn(missing_docs)]

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
pub use heron_aot::{AotOptions, Artifacts};
pub use heron_ir::npy::{NpyError, read_npy, write_npy};
pub use heron_ir::onnx::ImportOptions;
/// Quantization of float ONNX models to int8 QDQ form (what `heron quantize` runs).
pub use heron_ir::quantize;
pub use heron_ir::{DType, Graph, Limits, Tensor, TensorType};
pub use heron_jit::isa::OptLevel;
pub use heron_planner::{AlgorithmKind, PoolInfo, PoolKind};
pub use heron_vta::HwConfig;
pub use memory::GuardPages;
pub use model::{InputFill, Model, RuntimeError, TensorInfo, generate_inputs};
/// The n-dimensional arrays [`Tensor`] holds.
pub use ndarray;
pub use pipeline::StageTimes;
