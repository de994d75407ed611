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

    /// [`Algorithm::place`], also naming the method whose placement it kept: an algorithm
    /// that tries several says which one won (plans report it).
    fn place_explained(&self, problem: &PoolProblem, budget: &Budget) -> (Vec<u64>, &'static str) {
        (self.place(problem, budget), self.name())
    }

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

    fn place_explained(&self, problem: &PoolProblem, budget: &Budget) -> (Vec<u64>, &'static str) {
        exact::Exact.place_explained(problem, budget)
    }
}

/// A planning algorithm, as options and command lines name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AlgorithmKind {
    /// [`Auto`]: the default.
    #[default]
    Auto,
    GreedyBySize,
    GreedyByConflicts,
    HillClimb,
    BestFit,
    Exact,
}

impl AlgorithmKind {
    /// Every algorithm, the default first.
    pub const ALL: [AlgorithmKind; 6] = [
        AlgorithmKind::Auto,
        AlgorithmKind::GreedyBySize,
        AlgorithmKind::GreedyByConflicts,
        AlgorithmKind::HillClimb,
        AlgorithmKind::BestFit,
        AlgorithmKind::Exact,
    ];

    /// The algorithm itself.
    pub fn algorithm(self) -> Box<dyn Algorithm> {
        match self {
            AlgorithmKind::Auto => Box::new(Auto),
            AlgorithmKind::GreedyBySize => Box::new(greedy::GreedyBySize),
            AlgorithmKind::GreedyByConflicts => Box::new(greedy::GreedyByConflicts),
            AlgorithmKind::HillClimb => Box::new(hill_climb::HillClimb),
            AlgorithmKind::BestFit => Box::new(best_fit::BestFit),
            AlgorithmKind::Exact => Box::new(exact::Exact),
        }
    }

    /// Its name (`auto`, `greedy_by_size`, ...).
    pub fn name(self) -> &'static str {
        self.algorithm().name()
    }
}

impl std::fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AlgorithmKind {
    type Err = PlanError;

    fn from_str(name: &str) -> Result<AlgorithmKind, PlanError> {
        AlgorithmKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| PlanError::UnknownAlgorithm {
            name: name.into(),
            known: AlgorithmKind::ALL.map(AlgorithmKind::name).join(", "),
        })
    }
}

/// Every algorithm, the default first.
pub fn registry() -> Vec<Box<dyn Algorithm>> {
    AlgorithmKind::ALL.into_iter().map(AlgorithmKind::algorithm).collect()
}

/// The algorithm called `name`.
pub fn algorithm(name: &str) -> Result<Box<dyn Algorithm>, PlanError> {
    Ok(name.parse::<AlgorithmKind>()?.algorithm())
}
