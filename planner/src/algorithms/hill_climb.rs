//! TVM's hill climb: start from the greedy-by-size order and keep random swaps of two buffers
//! in the order that do not make the first-fit placement worse.

use crate::algorithms::Algorithm;
use crate::algorithms::greedy::size_order;
use crate::problem::{Fit, PoolProblem, Rng, place_in_order};
use crate::types::Budget;

pub struct HillClimb;

/// Most swaps tried, so small problems finish quickly even with a long budget.
const MAX_STEPS: usize = 20_000;

impl Algorithm for HillClimb {
    fn name(&self) -> &'static str {
        "hill_climb"
    }

    fn place(&self, p: &PoolProblem, budget: &Budget) -> Vec<u64> {
        let mut order = size_order(p);
        let (mut best, mut peak) = place_in_order(p, &order, Fit::First);
        if p.len() < 2 {
            return best;
        }
        let mut rng = Rng::new(0x5EED);
        for _ in 0..MAX_STEPS {
            if budget.expired() {
                break;
            }
            let (a, b) = (rng.below(order.len()), rng.below(order.len()));
            order.swap(a, b);
            let (offsets, new_peak) = place_in_order(p, &order, Fit::First);
            if new_peak <= peak {
                peak = new_peak;
                best = offsets;
            } else {
                order.swap(a, b);
            }
        }
        best
    }
}
