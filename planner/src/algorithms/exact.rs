//! The `exact` algorithm: best-fit heuristics first, then the exact search ([`canonical`])
//! when the buffers have lifetimes — at the pool's size limit first when it has one, then from
//! the lower bound up. Without lifetimes (conflicts that are no interval graph), the heuristics
//! are the best it does.

use crate::algorithms::Algorithm;
use crate::algorithms::best_fit::BestFit;
use crate::algorithms::canonical;
use crate::bound::max_load;
use crate::problem::PoolProblem;
use crate::types::Budget;

pub use canonical::{Decision, decide};

pub struct Exact;

/// What plans say when the exact search beat the heuristics.
const EXACT_SEARCH: &str = "exact search";

impl Algorithm for Exact {
    fn name(&self) -> &'static str {
        "exact"
    }

    fn place(&self, p: &PoolProblem, budget: &Budget) -> Vec<u64> {
        self.place_explained(p, budget).0
    }

    fn place_explained(&self, p: &PoolProblem, budget: &Budget) -> (Vec<u64>, &'static str) {
        // The exact search needs work for at least a few rounds of restarts; when the budget
        // cannot pay for them, the heuristics get everything.
        let restarts = 64 * p.len() as u64 * canonical::NODE_UNITS;
        // When every buffer conflicts with every other (a constant pool), placements are
        // stacking orders and the bound is missed only by alignment padding, which the
        // heuristics handle exactly.
        let clique = p.adj.iter().all(|a| a.len() + 1 == p.len());
        let exact_pays = p.intervals.is_some() && !clique && budget.remaining() > restarts;
        let mut best = BestFit.place(p, &budget.share(if exact_pays { 0.1 } else { 1.0 }));
        let mut by = BestFit.name();
        let Some(intervals) = p.intervals.as_ref().filter(|_| exact_pays) else { return (best, by) };
        let lb = max_load(&p.sizes, intervals);
        let mut hi = p.peak(&best); // the best found
        let mut lo = lb; // nothing below is feasible
        // A bounded pool wants its limit first.
        if let Some(cap) = p.capacity
            && (lo..hi).contains(&cap)
        {
            match decide(p, cap, &budget.share(0.8)) {
                Decision::Feasible(o) => {
                    hi = p.peak(&o);
                    best = o;
                    by = EXACT_SEARCH;
                }
                Decision::Infeasible => lo = cap + 1,
                Decision::Unknown => {}
            }
        }
        // Then from the lower bound up, in eighths of the gap: targets with a little slack are
        // decided quickly, exact ones may take long. Then bisect.
        let gap = hi.saturating_sub(lo);
        for k in 0..8u64 {
            let target = lo.max(lb + (gap as u128 * k as u128 / 8) as u64);
            if target >= hi || budget.expired() {
                break;
            }
            let share = if k == 0 { 0.4 } else { 1.0 / (9 - k) as f64 };
            match decide(p, target, &budget.share(share)) {
                Decision::Feasible(o) => {
                    hi = p.peak(&o);
                    best = o;
                    by = EXACT_SEARCH;
                    break;
                }
                Decision::Infeasible => lo = target + 1,
                Decision::Unknown => lo = lo.max(target + 1),
            }
        }
        while lo < hi && !budget.expired() {
            let target = lo + (hi - lo) / 2;
            match decide(p, target, &budget.share(0.5)) {
                Decision::Feasible(o) => {
                    hi = p.peak(&o);
                    best = o;
                    by = EXACT_SEARCH;
                }
                Decision::Infeasible | Decision::Unknown => lo = target + 1,
            }
        }
        (best, by)
    }
}
