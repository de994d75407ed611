//! Which candidate pool each buffer goes to, chosen together with a quick placement of every
//! pool (step 2 of [`crate::pools`]): local search over one order of all buffers, each buffer
//! going, in that order, to the first of its candidates where it fits under the size hint at
//! its lowest free offset (its last candidate takes it regardless). The order decides which
//! buffers the earlier pools hold, so searching it minimises the total while the rule that a
//! buffer only goes to a later pool when the earlier ones cannot hold it stays true.

use crate::problem::{Fit, Rng, fit_offset, packed_range};
use crate::types::{Budget, BufferInfo, MAX_POOL_BYTES, PoolInfo};

/// How good a placement is, compared in field order (smaller is better): bytes over size hints
/// (only a bounded last candidate can overflow), then the total of the pool sizes, then the
/// bytes in later candidates (each buffer's size times the position of its pool among its
/// candidates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Score {
    over: u128,
    total: u128,
    later: u128,
}

/// Moves tried without improving the score before the search ends, per buffer.
const PATIENCE_PER_BUFFER: usize = 200;

/// Moves tried at most, per buffer.
const MAX_STEPS_PER_BUFFER: usize = 2_000;

const UNPLACED: u64 = u64::MAX;

/// A placement of every buffer decoded from an order.
pub(crate) struct Assignment<'a> {
    buffers: &'a [BufferInfo],
    limits: Vec<u64>,
    candidates: &'a [Vec<usize>],
    order: Vec<usize>,
    /// Per buffer: the index of its pool among its candidates.
    pub choice: Vec<usize>,
    /// Per buffer: its offset in its pool, `UNPLACED` while it is being decoded.
    pub offset: Vec<u64>,
    busy: Vec<u128>,
}

impl<'a> Assignment<'a> {
    /// The placement `order` decodes to.
    pub fn new(
        buffers: &'a [BufferInfo],
        pools: &[PoolInfo],
        candidates: &'a [Vec<usize>],
        order: Vec<usize>,
        budget: &Budget,
    ) -> Assignment<'a> {
        let n = buffers.len();
        let mut a = Assignment {
            buffers,
            limits: pools.iter().map(|p| p.size_hint_bytes.unwrap_or(MAX_POOL_BYTES).min(MAX_POOL_BYTES)).collect(),
            candidates,
            order,
            choice: vec![0; n],
            offset: vec![UNPLACED; n],
            busy: Vec::new(),
        };
        a.decode_from(0, budget);
        a
    }

    fn pool(&self, i: usize) -> usize {
        self.candidates[i][self.choice[i]]
    }

    /// Places the buffers at positions `from..` of the order again, next to those before.
    fn decode_from(&mut self, from: usize, budget: &Budget) {
        for k in from..self.order.len() {
            self.offset[self.order[k]] = UNPLACED;
        }
        let mut units = 0;
        for k in from..self.order.len() {
            let i = self.order[k];
            let b = &self.buffers[i];
            units += (1 + b.conflicts.len() as u64) * self.candidates[i].len() as u64;
            for (c, &p) in self.candidates[i].iter().enumerate() {
                self.busy.clear();
                for &j in &b.conflicts {
                    if self.offset[j] != UNPLACED && self.pool(j) == p {
                        self.busy.push(packed_range(self.offset[j], self.buffers[j].size_bytes));
                    }
                }
                let at = fit_offset(&mut self.busy, b.size_bytes, b.alignment, Fit::First);
                if at + b.size_bytes <= self.limits[p] || c + 1 == self.candidates[i].len() {
                    (self.choice[i], self.offset[i]) = (c, at);
                    break;
                }
            }
        }
        budget.charge(units);
    }

    /// Each pool's peak.
    fn peaks(&self) -> Vec<u64> {
        let mut peaks = vec![0u64; self.limits.len()];
        for (i, b) in self.buffers.iter().enumerate() {
            let p = self.pool(i);
            peaks[p] = peaks[p].max(self.offset[i] + b.size_bytes);
        }
        peaks
    }

    pub fn score(&self) -> Score {
        let mut peaks = vec![0u64; self.limits.len()];
        let mut later = 0u128;
        for (i, b) in self.buffers.iter().enumerate() {
            let p = self.pool(i);
            peaks[p] = peaks[p].max(self.offset[i] + b.size_bytes);
            later += self.choice[i] as u128 * b.size_bytes as u128;
        }
        let over = peaks.iter().zip(&self.limits).map(|(&p, &l)| p.saturating_sub(l) as u128).sum();
        Score { over, total: peaks.iter().map(|&p| p as u128).sum(), later }
    }

    /// Local search over the order: random swaps of two buffers, moves of one to another position
    /// and moves of a buffer that ends at its pool's peak to an earlier position (as squeaky-wheel
    /// re-ordering does), kept when the score does not grow (so the search walks across
    /// plateaus), until a while passes without improvement or the budget ends.
    pub fn search(&mut self, seed: u64, budget: &Budget) {
        let n = self.order.len();
        if n < 2 {
            return;
        }
        let mut rng = Rng::new(seed);
        let mut current = self.score();
        let mut stale = 0;
        for _ in 0..MAX_STEPS_PER_BUFFER.saturating_mul(n) {
            if stale >= PATIENCE_PER_BUFFER.saturating_mul(n) || budget.expired() {
                break;
            }
            // Scoring (and finding the peaks) reads every buffer.
            budget.charge(n as u64);
            let (mut a, mut b) = (rng.below(n), rng.below(n));
            let kind = rng.below(3);
            if kind == 0 {
                let peaks = self.peaks();
                let critical: Vec<usize> = (0..n)
                    .filter(|&k| {
                        let i = self.order[k];
                        self.offset[i] + self.buffers[i].size_bytes == peaks[self.pool(i)]
                    })
                    .collect();
                a = critical[rng.below(critical.len())];
                b = rng.below(a + 1);
            }
            if a == b {
                continue;
            }
            let from = a.min(b);
            let saved: Vec<(usize, u64)> =
                self.order[from..].iter().map(|&i| (self.choice[i], self.offset[i])).collect();
            let old_order = self.order[from..].to_vec();
            if kind == 1 {
                self.order.swap(a, b);
            } else {
                let x = self.order.remove(a);
                self.order.insert(b, x);
            }
            self.decode_from(from, budget);
            let score = self.score();
            if score <= current {
                stale = if score < current { 0 } else { stale + 1 };
                current = score;
                continue;
            }
            stale += 1;
            self.order[from..].copy_from_slice(&old_order);
            for (&i, &(c, o)) in old_order.iter().zip(&saved) {
                (self.choice[i], self.offset[i]) = (c, o);
            }
        }
    }
}
