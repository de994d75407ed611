//! The single-pool placement problem every algorithm solves, and the placement engine shared by
//! the order-based algorithms: place buffers one by one at the lowest (first fit) or tightest
//! (best fit) aligned gap left by already placed conflicting buffers.

use crate::types::{Budget, BufferInfo};

/// Buffers to place in one pool: sizes, alignments, symmetric conflicts, optional lifetimes.
#[derive(Clone, Debug)]
pub struct PoolProblem {
    pub sizes: Vec<u64>,
    pub aligns: Vec<u64>,
    pub adj: Vec<Vec<u32>>,
    /// Half-open live intervals, when every buffer has one and conflicts are exactly the
    /// overlapping intervals.
    pub intervals: Option<Vec<(u64, u64)>>,
    /// A hard limit the placement should stay under, when the pool has one.
    pub capacity: Option<u64>,
}

impl PoolProblem {
    /// The sub-problem of `members` (indices into normalized `buffers`, see
    /// [`crate::normalize`]), conflicts restricted to members. Lifetimes are the buffers' when
    /// they explain the conflicts exactly, else recovered when the conflicts form an interval
    /// graph.
    pub fn from_buffers(buffers: &[BufferInfo], members: &[usize], capacity: Option<u64>) -> PoolProblem {
        let mut p = PoolProblem::with_given_lifetimes(buffers, members, capacity);
        p.recover_lifetimes(&Budget::unlimited());
        p
    }

    /// As [`from_buffers`](Self::from_buffers) without recovering lifetimes: enough for a lower
    /// bound, which chordal conflict graphs (interval graphs among them) get exactly from their
    /// conflicts, or for [`recover_lifetimes`](Self::recover_lifetimes) within a budget.
    pub fn with_given_lifetimes(buffers: &[BufferInfo], members: &[usize], capacity: Option<u64>) -> PoolProblem {
        let mut local = vec![u32::MAX; buffers.len()];
        for (k, &i) in members.iter().enumerate() {
            local[i] = k as u32;
        }
        let adj: Vec<Vec<u32>> = members
            .iter()
            .map(|&i| buffers[i].conflicts.iter().map(|&j| local[j]).filter(|&j| j != u32::MAX).collect())
            .collect();
        let intervals: Option<Vec<(u64, u64)>> = members.iter().map(|&i| buffers[i].live_range).collect();
        PoolProblem {
            sizes: members.iter().map(|&i| buffers[i].size_bytes).collect(),
            aligns: members.iter().map(|&i| buffers[i].alignment).collect(),
            intervals: intervals.filter(|iv| crate::intervals::realises(iv, &adj)),
            adj,
            capacity,
        }
    }

    /// Recovers lifetimes from the conflicts when none are given and the conflicts form an
    /// interval graph (see [`crate::intervals`]), unless the budget ends first.
    pub fn recover_lifetimes(&mut self, budget: &Budget) {
        if self.intervals.is_none() {
            self.intervals = crate::intervals::recover_intervals(&self.adj, budget);
        }
    }

    /// A problem given by lifetimes alone: conflicts are the overlapping intervals.
    pub fn from_intervals(sizes: Vec<u64>, intervals: Vec<(u64, u64)>, capacity: Option<u64>) -> PoolProblem {
        let adj = interval_conflicts(&intervals);
        let aligns = vec![1; sizes.len()];
        PoolProblem { sizes, aligns, adj, intervals: Some(intervals), capacity }
    }

    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Work units (see [`Budget`]) of one placement of every buffer: one per buffer and one per
    /// conflict it is placed next to.
    pub fn placement_units(&self) -> u64 {
        self.adj.iter().map(|a| 1 + a.len() as u64).sum()
    }

    /// Largest end offset of a placement.
    pub fn peak(&self, offsets: &[u64]) -> u64 {
        offsets.iter().zip(&self.sizes).map(|(o, s)| o + s).max().unwrap_or(0)
    }

    /// True when no two conflicting buffers overlap and every offset is aligned.
    pub fn is_valid(&self, offsets: &[u64]) -> bool {
        (0..self.len()).all(|i| {
            offsets[i].is_multiple_of(self.aligns[i])
                && self.adj[i].iter().all(|&j| {
                    let j = j as usize;
                    offsets[i] + self.sizes[i] <= offsets[j] || offsets[j] + self.sizes[j] <= offsets[i]
                })
        })
    }
}

/// Conflicts of half-open intervals: the pairs that overlap.
pub fn interval_conflicts(intervals: &[(u64, u64)]) -> Vec<Vec<u32>> {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| intervals[i].0);
    let mut adj: Vec<Vec<u32>> = vec![Vec::new(); intervals.len()];
    let mut active: Vec<usize> = Vec::new();
    for &i in &order {
        let start = intervals[i].0;
        active.retain(|&j| intervals[j].1 > start);
        for &j in &active {
            adj[i].push(j as u32);
            adj[j].push(i as u32);
        }
        active.push(i);
    }
    adj
}

/// How a buffer picks among the gaps that fit it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The lowest offset.
    First,
    /// The gap that leaves the least room (bounded gaps only; otherwise the top).
    Best,
}

/// Places buffers in `order`; returns offsets (indexed by buffer) and the peak.
pub fn place_in_order(p: &PoolProblem, order: &[usize], fit: Fit) -> (Vec<u64>, u64) {
    const UNPLACED: u64 = u64::MAX;
    let mut offsets = vec![UNPLACED; p.len()];
    let mut busy: Vec<u128> = Vec::new();
    let mut peak = 0;
    for &i in order {
        busy.clear();
        for &j in &p.adj[i] {
            let o = offsets[j as usize];
            if o != UNPLACED {
                busy.push(packed_range(o, p.sizes[j as usize]));
            }
        }
        let offset = fit_offset(&mut busy, p.sizes[i], p.aligns[i], fit);
        offsets[i] = offset;
        peak = peak.max(offset + p.sizes[i]);
    }
    (offsets, peak)
}

/// The busy range `[offset, offset + size)` packed as `start << 64 | end`: sorting plain
/// integers is the hot spot of every placement.
pub fn packed_range(offset: u64, size: u64) -> u128 {
    (offset as u128) << 64 | (offset + size) as u128
}

/// The offset `fit` picks for a buffer of `size` and `align` next to the `busy` ranges of its
/// placed conflicting buffers (see [`packed_range`]; sorted here).
pub fn fit_offset(busy: &mut [u128], size: u64, align: u64, fit: Fit) -> u64 {
    busy.sort_unstable();
    let mut cursor = 0u64;
    let mut chosen: Option<(u64, u64)> = None; // (offset, slack)
    for &packed in busy.iter() {
        let (start, end) = ((packed >> 64) as u64, packed as u64);
        let at = cursor.next_multiple_of(align);
        if at + size <= start {
            let slack = start - (at + size);
            match fit {
                Fit::First => return at,
                Fit::Best => {
                    if chosen.is_none_or(|(_, s)| slack < s) {
                        chosen = Some((at, slack));
                    }
                }
            }
        }
        cursor = cursor.max(end);
    }
    chosen.map_or(cursor.next_multiple_of(align), |(o, _)| o)
}

/// A small deterministic generator (xorshift64*) for the randomised searches.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
