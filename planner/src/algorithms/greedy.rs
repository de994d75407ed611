//! TVM's greedy family (`greedy_by_size`, `greedy_by_conflicts`), without its known defects:
//! each buffer honours its own alignment, conflicts are symmetric, and placement scans every
//! gap, so a bounded pool never gets overlapping buffers.

use crate::algorithms::Algorithm;
use crate::problem::{Fit, PoolProblem, place_in_order};
use crate::types::Budget;

/// Largest buffers first (ties: more conflicts first), each at its lowest fitting offset.
pub struct GreedyBySize;

/// Most conflicted buffers first (ties: larger first), each at its lowest fitting offset.
pub struct GreedyByConflicts;

pub(crate) fn size_order(p: &PoolProblem) -> Vec<usize> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(p.sizes[i]), std::cmp::Reverse(p.adj[i].len()), i));
    order
}

impl Algorithm for GreedyBySize {
    fn name(&self) -> &'static str {
        "greedy_by_size"
    }

    fn place(&self, p: &PoolProblem, _budget: &Budget) -> Vec<u64> {
        place_in_order(p, &size_order(p), Fit::First).0
    }
}

impl Algorithm for GreedyByConflicts {
    fn name(&self) -> &'static str {
        "greedy_by_conflicts"
    }

    fn place(&self, p: &PoolProblem, _budget: &Budget) -> Vec<u64> {
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(p.adj[i].len()), std::cmp::Reverse(p.sizes[i]), i));
        place_in_order(p, &order, Fit::First).0
    }
}
