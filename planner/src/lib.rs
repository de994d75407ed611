//! heron-planner: Unified Static Memory Planning (the USMP seed).
//!
//! Every buffer — inter-operator tensors, operator scratch, constants — gets a static offset in
//! a memory pool. [`types`] holds the vocabulary (`BufferInfo`, `PoolInfo`, `PoolAllocation`,
//! `Plan`), [`algorithms`] the placement algorithms behind one trait and a registry, [`pools`]
//! the multi-pool fallback, [`bound`] the lower bounds, [`verify`] the independent verifier.

pub mod algorithms;
mod assign;
pub mod bound;
pub mod extract;
pub mod intervals;
pub mod json;
pub mod pools;
pub mod problem;
pub mod rewrite;
pub mod spec;
pub mod svg;
pub mod sweep;
pub mod types;
pub mod verify;

pub use algorithms::{Algorithm, AlgorithmKind, algorithm, registry};
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
    algorithm: AlgorithmKind,
    budget: &Budget,
) -> Result<PlannedModule, PlanError> {
    let problem = extract::extract_for_pools(module, pools)?;
    let plan = plan_extracted(&problem, pools, algorithm.algorithm().as_ref(), budget)?;
    let rewritten = rewrite::rewrite(module, &problem, pools, &plan)?;
    heron_ir::loop_ir::verify::verify_module(&rewritten.module).map_err(|e| PlanError::Invalid(e.to_string()))?;
    Ok(PlannedModule { rewritten, problem, plan })
}

/// Plans an extracted problem over `pools` and verifies the plan: buffers with listed
/// conflicts with `algorithm`, those whose conflicts are implied by live ranges with the
/// live-range sweep ([`sweep`]); a pool only ever holds one kind (constants are always implied).
pub fn plan_extracted(
    problem: &extract::Extracted,
    pools: &[PoolInfo],
    algorithm: &dyn Algorithm,
    budget: &Budget,
) -> Result<Plan, PlanError> {
    let n = problem.buffers.len();
    let (listed, implied): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| !problem.implied[i]);
    let mut local = vec![usize::MAX; n];
    for (k, &i) in listed.iter().enumerate() {
        local[i] = k;
    }
    let listed_buffers: Vec<BufferInfo> = listed
        .iter()
        .map(|&i| {
            let b = &problem.buffers[i];
            BufferInfo { conflicts: b.conflicts.iter().map(|&j| local[j]).collect(), ..b.clone() }
        })
        .collect();
    let implied_buffers: Vec<BufferInfo> = implied.iter().map(|&i| problem.buffers[i].clone()).collect();
    let invalid = |e: Vec<String>| PlanError::Invalid(e.join("; "));
    let a = algorithm.plan(&listed_buffers, pools, budget)?;
    verify_plan(&listed_buffers, pools, &a).map_err(invalid)?;
    let b = sweep::plan_live_ranges(&implied_buffers, pools)?;
    verify_plan(&implied_buffers, pools, &b).map_err(invalid)?;
    sweep::verify_live_ranges(&implied_buffers, pools, &b).map_err(invalid)?;
    let mut allocations = vec![PoolAllocation { pool: 0, offset: 0 }; n];
    for (k, &i) in listed.iter().enumerate() {
        allocations[i] = a.allocations[k].clone();
    }
    for (k, &i) in implied.iter().enumerate() {
        allocations[i] = b.allocations[k].clone();
    }
    let pool_sizes = a.pool_sizes.iter().zip(&b.pool_sizes).map(|(x, y)| *x.max(y)).collect();
    Ok(Plan { algorithm: a.algorithm, allocations, pool_sizes })
}
