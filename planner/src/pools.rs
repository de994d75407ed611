//! Spreading buffers over pools: which pool each buffer goes to and where in it, chosen
//! together.
//!
//! The rule (the USMP seed's): **each buffer goes to the first of its candidate pools that can
//! hold it under its size hint, given the buffers placed before it; its last candidate takes it
//! regardless.** Fast memory is used first, and a later pool only takes what an earlier one
//! cannot hold. Which buffers come first is free, and that is what the planner optimises: the
//! order that gives the smallest total of the pool sizes.
//!
//! Steps:
//! 1. A first assignment: buffers are placed one by one (those with a single candidate first,
//!    then the largest first) at the lowest free offset (first fit) of their first candidate
//!    pool where they end under its size hint.
//! 2. When some buffer has a choice, a local search over that order (see [`crate::assign`]),
//!    every pool placed again by first fit after each move, keeps moves that do not make the
//!    plan worse: first the bytes over size hints, then the total, then the bytes in later pools.
//! 3. The algorithm places every pool once, the budget shared by buffer count (its placement is
//!    kept unless it overflows a limit the quick one kept), and the assignment is revised where
//!    it fell short: only buffers without another candidate can push a pool over its limit; when
//!    the algorithm cannot fit them either, the buffers with another candidate that stick out or
//!    conflict with one that does move on for good (in a second round, all of them), and the
//!    pool is placed again; buffers that fell from a pool move back into the room the
//!    algorithm's tighter placement leaves.
//!
//! Every pool's placement is valid at every step, and the algorithm runs once per pool plus at
//! most two rounds per pool its last-choice buffers overflow.

use std::collections::HashMap;

use crate::algorithms::Algorithm;
use crate::assign::Assignment;
use crate::problem::{Fit, PoolProblem, fit_offset, packed_range};
use crate::types::{
    Budget, BufferInfo, MAX_POOL_BYTES, Plan, PlanError, PoolAllocation, PoolInfo, check_pool_alignment, normalized,
};

/// Candidate pool indices of every buffer, checking names and pool alignments.
pub fn resolve_candidates(buffers: &[BufferInfo], pools: &[PoolInfo]) -> Result<Vec<Vec<usize>>, PlanError> {
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, p) in pools.iter().enumerate() {
        if by_name.insert(p.name.as_str(), i).is_some() {
            return Err(PlanError::DuplicatePool(p.name.clone()));
        }
        check_pool_alignment(p.alignment).map_err(|reason| PlanError::BadPool { pool: p.name.clone(), reason })?;
    }
    // Per pool: the last buffer listing it.
    let mut listed = vec![usize::MAX; pools.len()];
    buffers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if b.pool_candidates.is_empty() {
                return Err(PlanError::NoCandidates { buffer: b.name.clone() });
            }
            let mut resolved = Vec::with_capacity(b.pool_candidates.len());
            for n in &b.pool_candidates {
                let p = *by_name
                    .get(n.as_str())
                    .ok_or_else(|| PlanError::UnknownPool { buffer: b.name.clone(), pool: n.clone() })?;
                if listed[p] == i {
                    return Err(PlanError::BadBuffer {
                        buffer: b.name.clone(),
                        reason: format!("pool '{n}' is listed twice among its candidates"),
                    });
                }
                listed[p] = i;
                resolved.push(p);
            }
            Ok(resolved)
        })
        .collect()
}

/// The bytes a pool may hold: its size hint, at most [`MAX_POOL_BYTES`].
fn limit(pool: &PoolInfo) -> u64 {
    pool.size_hint_bytes.unwrap_or(MAX_POOL_BYTES).min(MAX_POOL_BYTES)
}

/// Rejects sizes no plan can hold before any algorithm runs: a buffer larger than every
/// candidate pool, and buffers that could stack beyond [`MAX_POOL_BYTES`] in a pool. Buffers
/// only ever rest at offset 0 or on buffers they conflict with, so a pool never grows past the
/// largest total of a group of its buffers connected by conflicts, each but the bottom one
/// padded by its alignment; every such total must fit. Then no offset, end or pool size the
/// algorithms compute exceeds it, and no intermediate sum overflows `u64`. `buffers` must be
/// normalized.
pub fn check_sizes(buffers: &[BufferInfo], pools: &[PoolInfo], candidates: &[Vec<usize>]) -> Result<(), PlanError> {
    for (b, cands) in buffers.iter().zip(candidates) {
        if cands.iter().all(|&p| b.size_bytes > limit(&pools[p])) {
            let detail: Vec<String> = cands.iter().map(|&p| describe(&pools[p], None)).collect();
            return Err(PlanError::TooLarge {
                buffer: b.name.clone(),
                size: b.size_bytes,
                why: format!(
                    "it fits none of its candidate pools: {}; raise a size hint or add a larger candidate pool",
                    detail.join(", ")
                ),
            });
        }
    }
    // Per pool, the buffers that may go there; per group (named by its root buffer), the sizes
    // with padding, the smallest alignment (the bottom buffer needs no padding) and the
    // largest buffer. The tables are reset per pool for its members only.
    let n = buffers.len();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); pools.len()];
    for (i, cands) in candidates.iter().enumerate() {
        for &p in cands {
            members[p].push(i);
        }
    }
    let mut in_pool = vec![usize::MAX; n];
    let mut groups = Groups((0..n).collect());
    let (mut total, mut min_alignment, mut largest) = (vec![0u128; n], vec![u64::MAX; n], vec![0usize; n]);
    for (p, (pool, members)) in pools.iter().zip(&members).enumerate() {
        for &i in members {
            in_pool[i] = p;
            groups.0[i] = i;
            (total[i], min_alignment[i], largest[i]) = (0, u64::MAX, i);
        }
        for &i in members {
            for &j in buffers[i].conflicts.iter().filter(|&&j| in_pool[j] == p) {
                groups.join(i, j);
            }
        }
        for &i in members {
            let (g, b) = (groups.find(i), &buffers[i]);
            total[g] += (b.size_bytes + b.alignment - 1) as u128;
            min_alignment[g] = min_alignment[g].min(b.alignment);
            if buffers[largest[g]].size_bytes < b.size_bytes {
                largest[g] = i;
            }
        }
        let need = |g: usize| total[g] - (min_alignment[g] - 1) as u128;
        if let Some(g) = members.iter().copied().find(|&g| groups.0[g] == g && need(g) > MAX_POOL_BYTES as u128) {
            let b = &buffers[largest[g]];
            return Err(PlanError::TooLarge {
                buffer: b.name.clone(),
                size: b.size_bytes,
                why: format!(
                    "with the buffers it conflicts with, directly or through others, it could need {} bytes \
                     (alignment padding included) in pool '{}', more than the largest pool Heron plans \
                     ({MAX_POOL_BYTES} bytes, isize::MAX); use smaller buffers or fewer conflicts",
                    need(g),
                    pool.name
                ),
            });
        }
    }
    Ok(())
}

/// Union-find over buffer indices: each buffer's parent, roots their own.
struct Groups(Vec<usize>);

impl Groups {
    fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        self.0[a.max(b)] = a.min(b);
    }
}

fn describe(pool: &PoolInfo, planned: Option<u64>) -> String {
    match (pool.size_hint_bytes, planned) {
        (Some(limit), Some(planned)) => format!("{} (limit {limit} bytes, {planned} bytes planned)", pool.name),
        (Some(limit), None) => format!("{} (limit {limit} bytes)", pool.name),
        (None, _) => format!("{} (unbounded)", pool.name),
    }
}

const UNPLACED: usize = usize::MAX;

/// The share of the budget the assignment search may spend; the pools' placements get the rest.
const ASSIGNMENT_SHARE: f64 = 0.3;

const ASSIGNMENT_SEED: u64 = 0x00A5_516E;

/// The spread of buffers over pools while it is being decided: every placed buffer has an
/// offset in its current candidate pool, and no two conflicting buffers of a pool overlap.
struct Spread<'a> {
    buffers: &'a [BufferInfo],
    pools: &'a [PoolInfo],
    candidates: &'a [Vec<usize>],
    /// Per buffer: index of its current pool in its candidate list.
    choice: Vec<usize>,
    offset: Vec<u64>,
    /// Per buffer: the pool it is placed in, `UNPLACED` while it moves.
    placed_in: Vec<usize>,
    /// Per pool: whether its offsets are real. Until the algorithm places an unbounded pool,
    /// its buffers need none (they fit whatever their offsets), which saves a first-fit pass.
    real: Vec<bool>,
    /// Buffers moved on for overflowing a pool: they never move back.
    shed: Vec<bool>,
    /// The order buffers are decided in.
    order: Vec<usize>,
    /// Per pool: the method whose placement it holds.
    placed_by: Vec<Option<&'static str>>,
    busy: Vec<u128>,
}

impl Spread<'_> {
    fn pool(&self, i: usize) -> usize {
        self.candidates[i][self.choice[i]]
    }

    fn end(&self, i: usize) -> u64 {
        self.offset[i] + self.buffers[i].size_bytes
    }

    fn members(&self, p: usize) -> Vec<usize> {
        (0..self.buffers.len()).filter(|&i| self.placed_in[i] == p).collect()
    }

    fn peak(&self, p: usize) -> u64 {
        self.members(p).iter().map(|&i| self.end(i)).max().unwrap_or(0)
    }

    /// The lowest offset of buffer `i` in pool `p` next to the buffers placed there.
    fn first_fit(&mut self, i: usize, p: usize) -> u64 {
        self.busy.clear();
        for &j in &self.buffers[i].conflicts {
            if self.placed_in[j] == p {
                self.busy.push(packed_range(self.offset[j], self.buffers[j].size_bytes));
            }
        }
        let b = &self.buffers[i];
        fit_offset(&mut self.busy, b.size_bytes, b.alignment, Fit::First)
    }

    /// Places unplaced buffer `i` in its current candidate pool or a later one, the first where
    /// it ends under the limit; the last one takes it regardless.
    fn place_buffer(&mut self, i: usize) {
        loop {
            let p = self.pool(i);
            let offset = if self.real[p] { self.first_fit(i, p) } else { 0 };
            if offset + self.buffers[i].size_bytes <= limit(&self.pools[p])
                || self.choice[i] + 1 == self.candidates[i].len()
            {
                self.offset[i] = offset;
                self.placed_in[i] = p;
                return;
            }
            self.choice[i] += 1;
        }
    }

    /// Places pool `p` with the algorithm, moving buffers on while it overflows, then moves
    /// buffers that fell from it back where they fit.
    fn settle<A: Algorithm + ?Sized>(&mut self, alg: &A, p: usize, budget: &Budget) -> Result<(), PlanError> {
        let limit = limit(&self.pools[p]);
        for round in 0.. {
            let members = self.members(p);
            let mut problem = PoolProblem::with_given_lifetimes(self.buffers, &members, self.pools[p].size_hint_bytes);
            problem.recover_lifetimes(budget);
            let (offsets, by) = alg.place_explained(&problem, budget);
            debug_assert!(problem.is_valid(&offsets), "{} produced an invalid placement", alg.name());
            // The algorithm's placement, unless it overflows where the current one does not.
            if problem.peak(&offsets) <= limit || !self.real[p] || self.peak(p) > limit {
                for (&i, &o) in members.iter().zip(&offsets) {
                    self.offset[i] = o;
                }
                self.real[p] = true;
                self.placed_by[p] = Some(by);
            }
            let sticking: Vec<usize> = members.iter().copied().filter(|&i| self.end(i) > limit).collect();
            if sticking.is_empty() {
                break;
            }
            let movable = |i: usize| self.choice[i] + 1 < self.candidates[i].len();
            let mut under = vec![false; self.buffers.len()];
            for &i in &sticking {
                under[i] = true;
                for &j in &self.buffers[i].conflicts {
                    under[j] = true;
                }
            }
            let moving: Vec<usize> = self
                .order
                .iter()
                .copied()
                .filter(|&i| self.placed_in[i] == p && movable(i) && (round > 0 || under[i]))
                .collect();
            if moving.is_empty() {
                let worst = sticking.into_iter().max_by_key(|&i| (self.buffers[i].size_bytes, std::cmp::Reverse(i)));
                return Err(self.no_pool_fits(worst.expect("a buffer sticks out")));
            }
            for &i in &moving {
                self.placed_in[i] = UNPLACED;
                self.shed[i] = true;
            }
            for i in moving {
                self.choice[i] += 1;
                self.place_buffer(i);
            }
        }
        self.pull_back(p, limit);
        Ok(())
    }

    /// Moves buffers that prefer pool `p` to where they are into it, where they fit under
    /// `limit` next to the buffers there (leaving a pool keeps its placement valid).
    fn pull_back(&mut self, p: usize, limit: u64) {
        for k in 0..self.order.len() {
            let i = self.order[k];
            if self.shed[i] {
                continue;
            }
            let Some(at) = self.candidates[i][..self.choice[i]].iter().position(|&c| c == p) else { continue };
            let offset = self.first_fit(i, p);
            if offset + self.buffers[i].size_bytes <= limit {
                self.choice[i] = at;
                self.offset[i] = offset;
                self.placed_in[i] = p;
            }
        }
    }

    fn no_pool_fits(&self, i: usize) -> PlanError {
        let b = &self.buffers[i];
        let detail: Vec<String> =
            self.candidates[i].iter().map(|&p| describe(&self.pools[p], Some(self.peak(p)))).collect();
        PlanError::NoPoolFits { buffer: b.name.clone(), size: b.size_bytes, pools: detail.join(", ") }
    }
}

/// Plans `buffers` over `pools` with `alg` placing each pool.
pub fn plan_pools<A: Algorithm + ?Sized>(
    alg: &A,
    buffers: &[BufferInfo],
    pools: &[PoolInfo],
    budget: &Budget,
) -> Result<Plan, PlanError> {
    let buffers = normalized(buffers)?;
    let candidates = resolve_candidates(&buffers, pools)?;
    check_sizes(&buffers, pools, &candidates)?;
    let n = buffers.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (candidates[i].len() > 1, std::cmp::Reverse(buffers[i].size_bytes), i));
    let mut spread = Spread {
        buffers: &buffers,
        pools,
        candidates: &candidates,
        choice: vec![0; n],
        offset: vec![0; n],
        placed_in: vec![UNPLACED; n],
        real: pools.iter().map(|p| p.size_hint_bytes.is_some()).collect(),
        shed: vec![false; n],
        order,
        placed_by: vec![None; pools.len()],
        busy: Vec::new(),
    };
    // With a choice of pools, the search decodes the first assignment itself (by the same rule);
    // without, the first-fit pass is the assignment.
    if candidates.iter().all(|c| c.len() == 1) {
        for k in 0..n {
            spread.place_buffer(spread.order[k]);
        }
    } else {
        let share = budget.share(ASSIGNMENT_SHARE);
        let mut assignment = Assignment::new(&buffers, pools, &candidates, spread.order.clone(), &share);
        assignment.search(ASSIGNMENT_SEED, &share);
        spread.choice = assignment.choice;
        spread.offset = assignment.offset;
        for i in 0..n {
            spread.placed_in[i] = spread.pool(i);
        }
        spread.real.fill(true);
    }
    for p in 0..pools.len() {
        let members = spread.members(p).len();
        if members == 0 {
            continue;
        }
        let later = (0..n).filter(|&i| spread.pool(i) >= p).count();
        spread.settle(alg, p, &budget.share(0.9 * members as f64 / later as f64))?;
    }
    // Buffers moved on by a later pool may overflow an earlier one, or land in one without real
    // offsets yet.
    let unsettled = |s: &Spread<'_>, p: usize| {
        let members = s.members(p);
        !members.is_empty() && (!s.real[p] || members.iter().any(|&i| s.end(i) > limit(&pools[p])))
    };
    while let Some(p) = (0..pools.len()).find(|&p| unsettled(&spread, p)) {
        spread.settle(alg, p, &budget.share(0.5))?;
    }
    let allocations = (0..n).map(|i| PoolAllocation { pool: spread.pool(i), offset: spread.offset[i] }).collect();
    let pool_sizes = (0..pools.len()).map(|p| spread.peak(p)).collect();
    // An algorithm that combines methods names the one each pool's placement came from.
    let methods: Vec<String> = (0..pools.len())
        .filter_map(|p| spread.placed_by[p].filter(|&by| by != alg.name()).map(|by| format!("{}: {by}", pools[p].name)))
        .collect();
    let algorithm =
        if methods.is_empty() { alg.name().to_string() } else { format!("{} ({})", alg.name(), methods.join(", ")) };
    Ok(Plan { algorithm, allocations, pool_sizes })
}
