//! heron-jit: Cranelift code generation for planned loop-IR modules, and the in-process JIT.
//!
//! [`codegen`] turns a flat, planned [`heron_ir::loop_ir::Module`] into Cranelift functions
//! through any [`cranelift_module::Module`], so the AOT back end (cranelift-object) reuses it
//! unchanged, the way cranelift-jit and cranelift-object share that trait. [`jit`] holds the
//! in-process back end: compile, finalize, call. [`isa`] builds target ISAs; accesses the value
//! ranges of [`heron_ir::loop_ir::analysis`] prove in bounds get no run-time check; [`math`] emits exp/tanh/sigmoid as
//! polynomials, [`vector`] emits loops marked vectorized with 128-bit SIMD, [`target`] is the CPU
//! target layer ([`schedule`] picks loop schedules and layouts, [`int8`] reshapes integer dot
//! products for VNNI), run before planning.

mod blocking;
pub mod codegen;
mod elementwise;
pub mod int8;
pub mod isa;
pub mod jit;
pub mod kernels;
pub mod math;
pub mod outline;
mod pooling;
pub mod readonly;
pub mod routines;
pub mod schedule;
mod softmax;
pub mod target;
pub mod vector;

/// The run context and thread pool (the `heron-threads` crate, also a static library for C).
pub use heron_threads as threads;

pub use codegen::{CodegenOptions, EmittedModule, emit_module};
pub use jit::{JitArg, JitModule, JitOptions, JitRunError};

/// Why code generation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodegenError {
    #[error("function '{func}': {what} is not supported by the code generator")]
    Unsupported { func: String, what: String },
    #[error("module has no function '{0}'")]
    NoFunction(String),
    #[error("target ISA: {0}")]
    Isa(String),
    #[error("cranelift: {0}")]
    Cranelift(String),
}

impl From<cranelift_module::ModuleError> for CodegenError {
    fn from(e: cranelift_module::ModuleError) -> Self {
        CodegenError::Cranelift(e.to_string())
    }
}
