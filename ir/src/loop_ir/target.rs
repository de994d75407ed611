//! The target layer's interface. A [`Target`] takes a lowered module (logical shapes, no layout
//! applied yet) and writes its decisions into it as loop IR that the printer shows, the parser
//! reads back, the verifier checks and the interpreter runs: layout annotations, loop kinds
//! (vectorized, unrolled, parallel), rewrites of operator functions. It records itself on every
//! function it takes ([`PrimFunc::target`](super::PrimFunc)), so memory planning can keep that
//! function's buffers in pools the target can reach. It runs before layouts, flattening and
//! planning, so the buffers it adds are planned like any other.

use super::Module;

/// A compilation target: the CPU (heron-jit) or an accelerator.
pub trait Target: Send + Sync {
    /// The name recorded on the functions it runs (`cpu`, `vta`).
    fn name(&self) -> &str;

    /// Applies the target's decisions to `module`. Functions that already carry a target were
    /// claimed by an earlier target and are left alone.
    fn apply(&self, module: &mut Module) -> Result<(), TargetError>;
}

/// Why a target could not take a module.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("target '{target}': {message}")]
pub struct TargetError {
    pub target: String,
    pub message: String,
}
