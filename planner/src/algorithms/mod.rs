//! Planning algorithms behind one trait, and the registry that finds them by name.
//!
//! An algorithm places the buffers of one pool ([`Algorithm::place`]); spreading buffers over
//! several pools with fallback is shared by all of them ([`Algorithm::plan`], see
//! [`crate::pools`]). New algorithms plug in by implementing `place` and joining [`registry`].

pub mod best_fit;
pub mod canonical;
pub mod exact;
pub mod greedy;
pub mod hill_climb;

use crate::problem::PoolProblem;
use crate::types::{Budget, BufferInfo, Plan, PlanError, PoolInfo};

pub trait Algorithm: Send + Sync {
    fn name(&self) -> &'static str;

    /// Offsets for the buffers of one pool. Must return a valid placement (aligned, no two
    /// conflicting buffers overlapping) even when the budget runs out.
    fn place(&self, problem: &PoolProblem, budget: &Budget) -> Vec<u64>;

    /// Plans buffers over pools: each buffer goes to the first of its candidate pools where it
    /// fits under the pool's size hint.
    fn plan(&self, buffers: &[BufferInfo], pools: &[PoolInfo], budget: &Budget) -> Result<Plan, PlanError> {
        crate::pools::plan_pools(self, buffers, pools, budget)
    }
}

/// The default: best-fit heuristics with local search, then the exact search when buffers have
/// lifetimes and time remains; the best plan found wins.
pub struct Auto;

impl Algorithm for Auto {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn place(&self, problem: &PoolProblem, budget: &Budget) -> Vec<u64> {
        exact::Exact.place(problem, budget)
    }
}

/// Every algorithm, by name.
pub fn registry() -> Vec<Box<dyn Algorithm>> {
    vec![
        Box::new(Auto),
        Box::new(greedy::GreedyBySize),
        Box::new(greedy::GreedyByConflicts),
        Box::new(hill_climb::HillClimb),
        Box::new(best_fit::BestFit),
        Box::new(exact::Exact),
    ]
}

/// The algorithm called `name`.
pub fn algorithm(name: &str) -> Result<Box<dyn Algorithm>, PlanError> {
    let all = registry();
    let known = all.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ");
    all.into_iter().find(|a| a.name() == name).ok_or(PlanError::UnknownAlgorithm { name: name.into(), known })
}
