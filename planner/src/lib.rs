//! heron-planner: Unified Static Memory Planning (the USMP seed).
//!
//! Every buffer — inter-operator tensors, operator scratch, constants — gets a static offset in
//! a memory pool. [`types`] holds the vocabulary (`BufferInfo`, `PoolInfo`, `PoolAllocation`,
//! `Plan`), [`algorithms`] the placement algorithms behind one trait and a registry, [`pools`]
//! the multi-pool fallback, [`bound`] the lower bounds, [`verify`] the independent verifier.

pub mod algorithms;
pub mod bound;
pub mod extract;
pub mod intervals;
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
pub use types::{
    Access, Budget, BufferInfo, MAX_ALIGNMENT, MAX_POOL_BYTES, Plan, PlanError, PoolAllocation, PoolInfo, PoolKind,
    normalize,
};
pub use verify::verify_plan;

/// Everything that planning a lowered module produces.
#[derive(Clone, Debug)]
pub struct PlannedModule {
    pub rewritten: rewrite::Rewritten,
    pub problem: extract::Extracted,
    pub plan: Plan,
}

/// Extracts, plans, verifies and rewrites a lowered, flattened module: the pipeline step
/// between lowering and code generation. The plan is checked by the independent verifier and
/// the rewritten module by the loop-IR verifier (pool views inside their pools).
pub fn plan_module(
    module: &heron_ir::loop_ir::Module,
    pools: &[PoolInfo],
    algorithm_name: &str,
    budget: &Budget,
) -> Result<PlannedModule, PlanError> {
    let names = |kind: PoolKind| pools.iter().filter(|p| p.kind == kind).map(|p| p.name.clone()).collect::<Vec<_>>();
    let opts = extract::ExtractOptions {
        workspace_pools: names(PoolKind::Workspace),
        constant_pools: names(PoolKind::Constant),
        ..Default::default()
    };
    let problem = extract::extract(module, &opts)?;
    let plan = algorithm(algorithm_name)?.plan(&problem.buffers, pools, budget)?;
    verify_plan(&problem.buffers, pools, &plan).map_err(|e| PlanError::Invalid(e.join("; ")))?;
    let rewritten = rewrite::rewrite(module, &problem, pools, &plan)?;
    heron_ir::loop_ir::verify::verify_module(&rewritten.module).map_err(|e| PlanError::Invalid(e.to_string()))?;
    Ok(PlannedModule { rewritten, problem, plan })
}
