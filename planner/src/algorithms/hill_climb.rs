//! TVM's hill climb: start from the greedy-by-size order and keep random swaps of two buffers
//! in the order that do not make the first-fit placement worse.

use crate::algorithms::Algorithm;
use crate::algorithms::best_fit::{Search, improve_order};
use crate::algorithms::greedy::size_order;
use crate::problem::{Fit, PoolProblem, place_in_order};
use crate::types::Budget;

pub struct HillClimb;

/// Most swaps tried, so small problems finish quickly even with a long budget.
const MAX_STEPS: usize = 20_000;

impl Algorithm for HillClimb {
    fn name(&self) -> &'static str {
        "hill_climb"
    }

    fn place(&self, p: &PoolProblem, budget: &Budget) -> Vec<u64> {
        let order = size_order(p);
        let (offsets, peak) = place_in_order(p, &order, Fit::First);
        let search = Search { fit: Fit::First, inserts: false, seed: 0x5EED, max_steps: MAX_STEPS, floor: 0 };
        improve_order(p, order, offsets, peak, search, budget)
    }
}
