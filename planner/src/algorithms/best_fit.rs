//! Gap-filling best fit over several orderings, then local search on the best order (random
//! swaps and moves of one buffer, kept when the peak does not grow). The local search is shared
//! with `hill_climb`.

use crate::algorithms::Algorithm;
use crate::problem::{Fit, PoolProblem, Rng, place_in_order};
use crate::types::Budget;

pub struct BestFit;

const MAX_STEPS: usize = 50_000;

/// The candidate orderings: by size, by conflict bytes, by lifetime start, by size x lifetime.
fn orderings(p: &PoolProblem) -> Vec<Vec<usize>> {
    let n = p.len();
    let conflict_bytes: Vec<u64> =
        (0..n).map(|i| p.adj[i].iter().map(|&j| p.sizes[j as usize]).sum::<u64>() + p.sizes[i]).collect();
    let by = |key: &dyn Fn(usize) -> (u64, u64)| {
        let mut o: Vec<usize> = (0..n).collect();
        o.sort_by_key(|&i| (std::cmp::Reverse(key(i)), i));
        o
    };
    let mut all = vec![
        by(&|i| (p.sizes[i], p.adj[i].len() as u64)),
        by(&|i| (conflict_bytes[i], p.sizes[i])),
        by(&|i| (p.adj[i].len() as u64, p.sizes[i])),
    ];
    if let Some(iv) = &p.intervals {
        let mut start: Vec<usize> = (0..n).collect();
        start.sort_by_key(|&i| (iv[i].0, std::cmp::Reverse(iv[i].1)));
        all.push(start);
        all.push(by(&|i| (p.sizes[i] * (iv[i].1 - iv[i].0), p.sizes[i])));
    }
    all
}

impl Algorithm for BestFit {
    fn name(&self) -> &'static str {
        "best_fit"
    }

    fn place(&self, p: &PoolProblem, budget: &Budget) -> Vec<u64> {
        let mut best: Option<(Vec<usize>, Vec<u64>, u64)> = None;
        for order in orderings(p) {
            // The first ordering always runs, so there is a plan whatever the budget.
            if best.is_some() && budget.expired() {
                break;
            }
            for fit in [Fit::Best, Fit::First] {
                let (offsets, peak) = place_in_order(p, &order, fit);
                if best.as_ref().is_none_or(|b| peak < b.2) {
                    best = Some((order.clone(), offsets, peak));
                }
            }
        }
        let (order, offsets, peak) = best.expect("at least one ordering");
        improve_order(
            p,
            order,
            offsets,
            peak,
            Search { fit: Fit::Best, inserts: true, seed: 0xB357, max_steps: MAX_STEPS },
            budget,
        )
    }
}

/// How [`improve_order`] searches.
pub(crate) struct Search {
    pub fit: Fit,
    /// Also move one buffer to another place in the order, not only swap two.
    pub inserts: bool,
    pub seed: u64,
    pub max_steps: usize,
}

/// Local search on a placement order: random swaps (and moves, with `inserts`) are kept when
/// the peak does not grow. Returns the best offsets found.
pub(crate) fn improve_order(
    p: &PoolProblem,
    mut order: Vec<usize>,
    mut offsets: Vec<u64>,
    mut peak: u64,
    search: Search,
    budget: &Budget,
) -> Vec<u64> {
    if p.len() < 2 {
        return offsets;
    }
    let mut rng = Rng::new(search.seed);
    for _ in 0..search.max_steps {
        if budget.expired() {
            break;
        }
        let (a, b) = (rng.below(order.len()), rng.below(order.len()));
        let mut trial = order.clone();
        if !search.inserts || rng.next_u64() & 1 == 0 {
            trial.swap(a, b);
        } else {
            let x = trial.remove(a);
            trial.insert(b, x);
        }
        let (o, pk) = place_in_order(p, &trial, search.fit);
        if pk <= peak {
            order = trial;
            offsets = o;
            peak = pk;
        }
    }
    offsets
}
