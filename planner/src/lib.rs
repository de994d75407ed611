//! heron-planner: Unified Static Memory Planning (the USMP seed).
//!
//! Every buffer — inter-operator tensors, operator scratch, constants — gets a static offset in
//! a memory pool. [`types`] holds the vocabulary (`BufferInfo`, `PoolInfo`, `PoolAllocation`,
//! `Plan`), [`algorithms`] the placement algorithms behind one trait and a registry, [`pools`]
//! the multi-pool fallback, [`bound`] the lower bounds, [`verify`] the independent verifier.

pub mod algorithms;
pub mod bound;
pub mod extract;
pub mod json;
pub mod pools;
pub mod problem;
pub mod rewrite;
pub mod spec;
pub mod svg;
pub mod types;
pub mod verify;

pub use algorithms::{Algorithm, algorithm, registry};
pub use problem::PoolProblem;
pub use types::{Access, Budget, BufferInfo, Plan, PlanError, PoolAllocation, PoolInfo, PoolKind, normalize};
pub use verify::verify_plan;
