//! Exact placement for buffers with lifetimes: branch and bound over canonical (bottom-up)
//! placements, in the spirit of MiniMalloc.
//!
//! Time is cut into sections at every interval endpoint; the state is the skyline (the floor of
//! every section: everything below it is decided). The search always works on the lowest
//! section that still has buffers to place: either a buffer that covers it and whose sections
//! all sit at that floor is placed there, or the section's floor is raised to the next height
//! at which any of its buffers could start (the gap stays empty). Every placement that compacts
//! downwards ("gravity") is reached this way, so the search is complete. A section whose floor
//! plus the sizes of its unplaced buffers (which all overlap there) exceeds the capacity prunes
//! the branch.

use std::collections::HashSet;

use crate::algorithms::best_fit::BestFit;
use crate::algorithms::Algorithm;
use crate::bound::max_load;
use crate::problem::PoolProblem;
use crate::types::Budget;

/// Outcome of a decision search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Feasible(Vec<u64>),
    /// Proven: no placement fits the capacity.
    Infeasible,
    /// The budget ran out first.
    Unknown,
}

struct Search<'a> {
    p: &'a PoolProblem,
    first: Vec<usize>,
    last: Vec<usize>,
    covering: Vec<Vec<usize>>,
    floor: Vec<u64>,
    remaining: Vec<u64>,
    placed: Vec<bool>,
    offsets: Vec<u64>,
    capacity: u64,
    nodes: u64,
    budget: Budget,
    timed_out: bool,
}

impl Search<'_> {
    fn max_floor(&self, b: usize) -> u64 {
        self.floor[self.first[b]..=self.last[b]].iter().copied().max().unwrap_or(0)
    }

    fn lowest_open_section(&self) -> Option<usize> {
        let mut best: Option<usize> = None;
        for s in 0..self.floor.len() {
            if self.remaining[s] > 0 && best.is_none_or(|b| self.floor[s] < self.floor[b]) {
                best = Some(s);
            }
        }
        best
    }

    /// Depth-first search; true when every buffer is placed.
    fn run(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes.is_multiple_of(1024) && self.budget.expired() {
            self.timed_out = true;
        }
        if self.timed_out {
            return false;
        }
        let Some(s) = self.lowest_open_section() else { return true };
        let f = self.floor[s];
        let mut tried: HashSet<(usize, usize, u64, u64)> = HashSet::new();
        let mut next_height = u64::MAX;
        for k in 0..self.covering[s].len() {
            let b = self.covering[s][k];
            if self.placed[b] {
                continue;
            }
            let mf = self.max_floor(b);
            if mf > f {
                next_height = next_height.min(mf);
                continue;
            }
            let offset = f.next_multiple_of(self.p.aligns[b]);
            let size = self.p.sizes[b];
            // Identical buffers are interchangeable: try one of them.
            if offset + size > self.capacity || !tried.insert((self.first[b], self.last[b], size, self.p.aligns[b])) {
                continue;
            }
            if self.place(b, offset) && self.run() {
                return true;
            }
            self.unplace(b, f);
            if self.timed_out {
                return false;
            }
        }
        // Leave the gap above `f` in section `s` empty.
        if next_height == u64::MAX || next_height + self.remaining[s] > self.capacity {
            return false;
        }
        self.floor[s] = next_height;
        let found = self.run();
        if !found {
            self.floor[s] = f;
        }
        found
    }

    /// Places `b`; false when a section it covers can no longer fit its remaining buffers.
    fn place(&mut self, b: usize, offset: u64) -> bool {
        let top = offset + self.p.sizes[b];
        self.placed[b] = true;
        self.offsets[b] = offset;
        let mut ok = true;
        for s in self.first[b]..=self.last[b] {
            self.floor[s] = top;
            self.remaining[s] -= self.p.sizes[b];
            ok &= top + self.remaining[s] <= self.capacity;
        }
        ok
    }

    /// Undoes `place(b, ..)`; every section of `b` was at floor `f` before.
    fn unplace(&mut self, b: usize, f: u64) {
        self.placed[b] = false;
        for s in self.first[b]..=self.last[b] {
            self.floor[s] = f;
            self.remaining[s] += self.p.sizes[b];
        }
    }
}

/// Number of candidate orderings [`decide_with`] knows.
pub const ORDERINGS: usize = 6;

/// Is there a placement of `p` (which must have intervals) within `capacity`? Restarts the
/// search with different candidate orderings and growing time slices until the budget ends,
/// since one ordering can get lost in a subtree another avoids.
pub fn decide(p: &PoolProblem, capacity: u64, budget: Budget) -> Decision {
    let mut slice_ms = 40u64;
    loop {
        for ordering in 0..ORDERINGS {
            if budget.expired() {
                return Decision::Unknown;
            }
            let slice = Budget { deadline: budget.deadline.min(std::time::Instant::now() + std::time::Duration::from_millis(slice_ms)) };
            match decide_with(p, capacity, slice, ordering) {
                Decision::Unknown => {}
                done => return done,
            }
        }
        slice_ms *= 2;
    }
}

/// One complete search with candidate ordering `ordering` (0..ORDERINGS).
pub fn decide_with(p: &PoolProblem, capacity: u64, budget: Budget, ordering: usize) -> Decision {
    let intervals = p.intervals.as_ref().expect("exact search needs lifetimes");
    let mut points: Vec<u64> = intervals.iter().flat_map(|&(a, b)| [a, b]).collect();
    points.sort_unstable();
    points.dedup();
    let sections = points.len().saturating_sub(1);
    let index = |t: u64| points.binary_search(&t).expect("endpoint");
    let first: Vec<usize> = intervals.iter().map(|&(a, _)| index(a)).collect();
    let last: Vec<usize> = intervals.iter().map(|&(_, b)| index(b) - 1).collect();
    // Which buffer to try first at a section: big or long-lived ones are the hardest to fit
    // later; the last orderings are seeded shuffles.
    let mut order: Vec<usize> = (0..p.len()).collect();
    let len = |b: usize| (last[b] - first[b]) as u64;
    match ordering {
        0 => order.sort_by_key(|&b| std::cmp::Reverse((p.sizes[b], len(b)))),
        1 => order.sort_by_key(|&b| std::cmp::Reverse((len(b), p.sizes[b]))),
        2 => order.sort_by_key(|&b| std::cmp::Reverse(((intervals[b].1 - intervals[b].0) as u128 * p.sizes[b] as u128, b))),
        3 => order.sort_by_key(|&b| std::cmp::Reverse((intervals[b].1 - intervals[b].0, p.sizes[b]))),
        k => {
            let mut rng = crate::problem::Rng::new(0x9E37_79B9 ^ k as u64);
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i + 1));
            }
        }
    }
    let mut covering: Vec<Vec<usize>> = vec![Vec::new(); sections];
    let mut remaining = vec![0u64; sections];
    for &b in &order {
        for s in first[b]..=last[b] {
            covering[s].push(b);
            remaining[s] += p.sizes[b];
        }
    }
    if remaining.iter().any(|&r| r > capacity) {
        return Decision::Infeasible;
    }
    let mut search = Search {
        p,
        first,
        last,
        covering,
        floor: vec![0; sections],
        remaining,
        placed: vec![false; p.len()],
        offsets: vec![0; p.len()],
        capacity,
        nodes: 0,
        budget,
        timed_out: false,
    };
    if search.run() {
        Decision::Feasible(search.offsets)
    } else if search.timed_out {
        Decision::Unknown
    } else {
        Decision::Infeasible
    }
}

/// Best-fit heuristics first, then the exact search from the lower bound up (with lifetimes);
/// without lifetimes, the best-fit local search is the best this algorithm can do.
pub struct Exact;

impl Algorithm for Exact {
    fn name(&self) -> &'static str {
        "exact"
    }

    fn place(&self, p: &PoolProblem, budget: &Budget) -> Vec<u64> {
        let heuristic_budget = budget.share(if p.intervals.is_some() { 0.15 } else { 1.0 });
        let mut best = BestFit.place(p, &heuristic_budget);
        let Some(intervals) = &p.intervals else { return best };
        let lb = max_load(&p.sizes, intervals);
        let mut hi = p.peak(&best); // best known
        let mut lo = lb; // nothing below is feasible
        // A bounded pool wants the limit first; then close the gap from below.
        if let Some(cap) = p.capacity
            && cap < hi
            && cap >= lo
            && let Decision::Feasible(o) = decide(p, cap, budget.share(0.5))
        {
            hi = p.peak(&o);
            best = o;
        }
        let mut first = true;
        while lo < hi && !budget.expired() {
            let target = if first { lo } else { lo + (hi - lo) / 2 };
            let share = if first { 0.6 } else { 0.5 };
            first = false;
            match decide(p, target, budget.share(share)) {
                Decision::Feasible(o) => {
                    hi = p.peak(&o);
                    best = o;
                }
                Decision::Infeasible | Decision::Unknown => lo = target + 1,
            }
        }
        best
    }
}
