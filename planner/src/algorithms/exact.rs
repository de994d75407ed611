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

use crate::algorithms::Algorithm;
use crate::algorithms::best_fit::BestFit;
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

/// A change to the search state, kept so that any branch can be undone.
enum Undo {
    /// A buffer was placed on sections whose floor was `floor` before.
    Place { buffer: usize, floor: u64 },
    /// A section's floor was raised from `floor`.
    Raise { section: usize, floor: u64 },
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
    trail: Vec<Undo>,
    /// Scratch for the decomposition check: unplaced buffers crossing each section boundary.
    crossing: Vec<i64>,
    /// Scratch for the bound: the lowest offset each unplaced buffer can take now.
    start_at: Vec<u64>,
    /// Branch on the tightest of the lowest sections instead of the leftmost.
    tightest_first: bool,
    nodes: u64,
    budget: Budget,
    timed_out: bool,
}

impl Search<'_> {
    fn max_floor(&self, b: usize) -> u64 {
        self.floor[self.first[b]..=self.last[b]].iter().copied().max().unwrap_or(0)
    }

    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            match self.trail.pop().expect("non-empty trail") {
                Undo::Place { buffer, floor } => {
                    self.placed[buffer] = false;
                    for s in self.first[buffer]..=self.last[buffer] {
                        self.floor[s] = floor;
                        self.remaining[s] += self.p.sizes[buffer];
                    }
                }
                Undo::Raise { section, floor } => self.floor[section] = floor,
            }
        }
    }

    /// Places `b` at `offset` on sections all at floor `f`; false when a section it covers can
    /// no longer hold its remaining buffers (the caller undoes).
    fn place(&mut self, b: usize, offset: u64, f: u64) -> bool {
        let top = offset + self.p.sizes[b];
        self.placed[b] = true;
        self.offsets[b] = offset;
        self.trail.push(Undo::Place { buffer: b, floor: f });
        let mut ok = true;
        for s in self.first[b]..=self.last[b] {
            self.floor[s] = top;
            self.remaining[s] -= self.p.sizes[b];
            ok &= top + self.remaining[s] <= self.capacity;
        }
        ok
    }

    /// Every unplaced buffer covering a section starts at or above the lowest height any of
    /// them can take there, and they stack: that height plus their total size must fit.
    /// Stronger than `floor + remaining <= capacity` when the floors around a section are high.
    fn bound_holds(&mut self, lo: usize, hi: usize) -> bool {
        for b in 0..self.placed.len() {
            if !self.placed[b] && self.first[b] >= lo && self.last[b] <= hi {
                self.start_at[b] = self.max_floor(b);
            }
        }
        for s in lo..=hi {
            if self.remaining[s] == 0 {
                continue;
            }
            let lowest =
                self.covering[s].iter().filter(|&&b| !self.placed[b]).map(|&b| self.start_at[b]).min().unwrap_or(0);
            if lowest + self.remaining[s] > self.capacity {
                return false;
            }
        }
        true
    }

    /// Section boundaries in `lo..hi` (between `s` and `s + 1`) that no unplaced buffer crosses:
    /// the parts between them are independent sub-problems.
    fn cuts(&mut self, lo: usize, hi: usize) -> Vec<usize> {
        for c in &mut self.crossing[lo..=hi] {
            *c = 0;
        }
        for b in 0..self.placed.len() {
            if !self.placed[b] && self.first[b] >= lo && self.last[b] <= hi && self.last[b] > self.first[b] {
                self.crossing[self.first[b]] += 1;
                self.crossing[self.last[b]] -= 1;
            }
        }
        let mut cuts = Vec::new();
        let mut running = 0;
        for s in lo..hi {
            running += self.crossing[s];
            if running == 0 {
                cuts.push(s);
            }
        }
        cuts
    }

    /// Places every unplaced buffer whose sections lie in `lo..=hi`; on failure the state is
    /// as before the call.
    fn solve(&mut self, mut lo: usize, mut hi: usize) -> bool {
        self.nodes += 1;
        if self.nodes.is_multiple_of(256) && self.budget.expired() {
            self.timed_out = true;
        }
        if self.timed_out {
            return false;
        }
        while lo <= hi && self.remaining[lo] == 0 {
            lo += 1;
        }
        while hi >= lo && self.remaining[hi] == 0 {
            if hi == 0 {
                return true;
            }
            hi -= 1;
        }
        if lo > hi {
            return true;
        }
        // The full bound costs a pass over every unplaced buffer; every other node is enough.
        if self.nodes.is_multiple_of(2) && !self.bound_holds(lo, hi) {
            return false;
        }
        let cuts = self.cuts(lo, hi);
        if !cuts.is_empty() {
            // Independent parts: one failing sinks the node, whatever the others do.
            let mark = self.trail.len();
            let mut start = lo;
            for end in cuts.into_iter().chain([hi]) {
                if !self.solve(start, end) {
                    self.undo_to(mark);
                    return false;
                }
                start = end + 1;
            }
            return true;
        }
        // The lowest section; among equally low ones either the leftmost or the tightest (least
        // free room, failing first), depending on the restart.
        let tight = self.tightest_first;
        let s = (lo..=hi)
            .filter(|&s| self.remaining[s] > 0)
            .min_by_key(|&s| (self.floor[s], std::cmp::Reverse(if tight { self.remaining[s] } else { 0 })))
            .expect("open section");
        let f = self.floor[s];
        // The flat run at height f around s: a candidate spanning all of it leaves no sliver,
        // so such candidates go first.
        let (mut run_a, mut run_b) = (s, s);
        while run_a > lo && self.floor[run_a - 1] == f {
            run_a -= 1;
        }
        while run_b < hi && self.floor[run_b + 1] == f {
            run_b += 1;
        }
        let mut candidates: Vec<usize> = Vec::new();
        let mut next_height = u64::MAX;
        for &b in &self.covering[s] {
            if self.placed[b] {
                continue;
            }
            let mf = self.max_floor(b);
            if mf > f {
                next_height = next_height.min(mf);
            } else {
                candidates.push(b);
            }
        }
        candidates.sort_by_key(|&b| !(self.first[b] == run_a && self.last[b] == run_b));
        let mut tried: HashSet<(usize, usize, u64, u64)> = HashSet::new();
        for b in candidates {
            let offset = f.next_multiple_of(self.p.aligns[b]);
            let size = self.p.sizes[b];
            // Identical buffers are interchangeable: try one of them.
            if offset + size > self.capacity || !tried.insert((self.first[b], self.last[b], size, self.p.aligns[b])) {
                continue;
            }
            let mark = self.trail.len();
            if self.place(b, offset, f) && self.solve(lo, hi) {
                return true;
            }
            self.undo_to(mark);
            if self.timed_out {
                return false;
            }
        }
        // Leave the gap above `f` in section `s` empty.
        if next_height == u64::MAX || next_height + self.remaining[s] > self.capacity {
            return false;
        }
        let mark = self.trail.len();
        self.trail.push(Undo::Raise { section: s, floor: f });
        self.floor[s] = next_height;
        if self.solve(lo, hi) {
            return true;
        }
        self.undo_to(mark);
        false
    }
}

/// Number of candidate orderings [`decide_with`] knows.
pub const ORDERINGS: usize = 24;

/// Is there a placement of `p` (which must have intervals) within `capacity`? Restarts the
/// search with different candidate orderings and growing time slices until the budget ends,
/// since one ordering can get lost in a subtree another avoids.
pub fn decide(p: &PoolProblem, capacity: u64, budget: Budget) -> Decision {
    // A slice must allow at least one full dive (about one node per buffer and section).
    let mut slice_ms = 20 + p.len() as u64 / 2;
    loop {
        for ordering in 0..ORDERINGS {
            if budget.expired() {
                return Decision::Unknown;
            }
            let slice = Budget {
                deadline: budget.deadline.min(std::time::Instant::now() + std::time::Duration::from_millis(slice_ms)),
            };
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
    let given = p.intervals.as_ref().expect("exact search needs lifetimes");
    // Half the restarts run time backwards: the skyline then grows from the other end, which
    // changes which sections the search settles first (offsets mean the same either way).
    let horizon = given.iter().map(|&(_, b)| b).max().unwrap_or(0);
    let reversed: Vec<(u64, u64)>;
    let intervals = if ordering % 4 >= 2 {
        reversed = given.iter().map(|&(a, b)| (horizon - b, horizon - a)).collect();
        &reversed
    } else {
        given
    };
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
    match ordering / 4 {
        0 => order.sort_by_key(|&b| std::cmp::Reverse((p.sizes[b], len(b)))),
        1 => order.sort_by_key(|&b| std::cmp::Reverse((len(b), p.sizes[b]))),
        2 => order
            .sort_by_key(|&b| std::cmp::Reverse(((intervals[b].1 - intervals[b].0) as u128 * p.sizes[b] as u128, b))),
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
        trail: Vec::new(),
        crossing: vec![0; sections],
        start_at: vec![0; p.len()],
        tightest_first: ordering % 2 == 1,
        nodes: 0,
        budget,
        timed_out: false,
    };
    if sections == 0 || search.solve(0, sections - 1) {
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
        // The exact search needs about one slice for a first dive; when the budget cannot pay
        // for it, the heuristics get everything.
        let slice = std::time::Duration::from_millis(20 + p.len() as u64 / 2);
        // When every buffer conflicts with every other (a constant pool), placements are
        // stacking orders and the bound is missed only by alignment padding, which the exact
        // search would spend its whole budget failing to close: the orderings decide.
        let clique = p.adj.iter().all(|a| a.len() + 1 == p.len());
        let exact_pays = p.intervals.is_some() && !clique && budget.remaining() > slice;
        let heuristic_budget = budget.share(if exact_pays { 0.15 } else { 1.0 });
        let mut best = BestFit.place(p, &heuristic_budget);
        let Some(intervals) = p.intervals.as_ref().filter(|_| exact_pays) else { return best };
        if budget.expired() {
            return best;
        }
        let lb = max_load(&p.sizes, intervals);
        let mut hi = p.peak(&best); // best known
        let mut lo = lb; // nothing below is feasible
        // A bounded pool wants the limit first; then close the gap from below.
        if let Some(cap) = p.capacity
            && cap < hi
            && cap >= lo
            && let Decision::Feasible(o) = decide(p, cap, budget.share(0.7))
        {
            hi = p.peak(&o);
            best = o;
        }
        // From the lower bound upwards in eighths of the gap: near-optimal targets with a
        // little slack are found quickly, exact ones may take the whole budget. Then bisect.
        let steps = 8u64;
        let gap = hi.saturating_sub(lo);
        for k in 0..steps {
            if lo >= hi || budget.expired() {
                break;
            }
            let target = (lb + gap * k / steps).max(lo);
            if target >= hi {
                break;
            }
            let share = if k == 0 { 0.4 } else { 1.0 / (steps - k + 1) as f64 };
            match decide(p, target, budget.share(share)) {
                Decision::Feasible(o) => {
                    hi = p.peak(&o);
                    best = o;
                    break;
                }
                Decision::Infeasible | Decision::Unknown => lo = target + 1,
            }
        }
        while lo < hi && !budget.expired() {
            let target = lo + (hi - lo) / 2;
            match decide(p, target, budget.share(0.5)) {
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
