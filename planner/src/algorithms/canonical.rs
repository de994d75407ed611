//! The exact search: branch and bound over canonical placements, after MiniMalloc (Moffitt,
//! ASPLOS 2023), with learned refutations and conflict-driven restarts.
//!
//! A placement is *canonical* when every buffer rests at offset 0 or on a conflicting buffer
//! (its offset is the aligned top of the highest conflicting buffer below it); every feasible
//! placement drops into one. The search builds canonical placements by increasing offset: a
//! buffer's `min_offset` is the aligned top of its placed conflicting buffers, and a node may
//! place any unplaced buffer at its `min_offset`, never below the offset of the previous
//! placement (a buffer resting lower is *floating* until a placement lifts it). A buffer
//! refuted at an offset is *banned* there in the later branches, so no set of placements is
//! explored twice, whatever the order candidates are tried in.
//!
//! Pruning:
//! - *section inference*: sections are the cliques of buffers live at one moment; the lowest
//!   start of a section's stack (`off` only if a candidate can still start it there) plus the
//!   sizes still to place in it must fit the capacity;
//! - *dominance*: nothing goes at or above the top an unplaced buffer would reach at its own
//!   `min_offset` (it could always drop into the gap below);
//! - *decomposition*: when no unplaced buffer spans a section boundary, both sides are solved
//!   independently (and remembered by their buffers' `min_offset`s);
//! - *refutations*: a node's subtree depends only on the unplaced buffers' `min_offset`s, the
//!   bans, the offset floor and the part, so refuted nodes are remembered by a Zobrist key and
//!   cut when met again, across restarts too.
//!
//! The order candidates are tried in decides how fast a placement is found, and one order can
//! get lost in a subtree another avoids: attempts restart with Luby-sequence node limits. One
//! family of attempts uses fixed orders (buffers of the fullest sections first); the other
//! learns (as SAT solvers' VSIDS does): every section that fails a bound gains weight, recent
//! failures more, and buffers of heavy sections are tried first. The families run side by side
//! on two threads, in rounds of one restart each, so the outcome is the same on any machine. Measured on MiniMalloc's challenging instances, given only their conflicts and
//! with buffer names shuffled, the learned family decides the ones the fixed orders get lost on
//! within seconds.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;

use crate::problem::{PoolProblem, Rng};
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

/// What a candidate order compares, largest first (ties: smaller buffer index).
#[derive(Clone, Copy, Debug)]
enum Key {
    /// The largest total size of any section the buffer lives in.
    Total,
    Size,
    /// Number of sections spanned.
    Sections,
    /// Size times sections spanned.
    SectionArea,
    /// Total learned weight of the buffer's sections.
    Weight,
    /// A hash of the buffer and the attempt.
    Noise,
}

/// Fixed candidate orders: buffers of the fullest sections first, or the largest.
const FIXED_ORDERS: [[Key; 3]; 4] = [
    [Key::Total, Key::Sections, Key::Size],
    [Key::Total, Key::Size, Key::Noise],
    [Key::SectionArea, Key::Total, Key::Noise],
    [Key::Size, Key::Sections, Key::Noise],
];

/// Learned candidate orders: buffers of the sections that failed most (and most recently).
const LEARNED_ORDERS: [[Key; 3]; 4] = [
    [Key::Weight, Key::Sections, Key::Noise],
    [Key::Weight, Key::SectionArea, Key::Noise],
    [Key::Total, Key::Weight, Key::Size],
    [Key::Weight, Key::Total, Key::Size],
];

/// Node limit of a restart: this many nodes per buffer times the Luby sequence.
const RESTART_NODES_PER_BUFFER: u64 = 2;

/// Work units of a search node (see [`Budget`]): about as long as placing this many buffers
/// next to their conflicts.
pub const NODE_UNITS: u64 = 1000;

/// Growth of a section failure's weight from one restart to the next (VSIDS-style decay:
/// recent failures count more). Measured on MiniMalloc's instances: 1.4-1.7 decide all within
/// seconds; 1.0 (plain counts) gets lost on the hardest.
const WEIGHT_GROWTH: f64 = 1.5;

/// Refutations kept per family at most (about 20 bytes each); beyond, the table starts afresh.
const MAX_REFUTED: usize = 1 << 20;

/// Piece outcomes kept per family at most; beyond, the table starts afresh.
const MAX_PIECES: usize = 1 << 14;

/// Stack for one search thread: the search recurses a few frames per placed buffer.
const SEARCH_STACK_BYTES: usize = 64 << 20;

const NONE: u64 = u64::MAX;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A 128-bit Zobrist key for the pair `(a, b)`; `tag` separates the kinds of pairs. 128 bits,
/// so distinct search states practically never share a key.
fn zobrist(tag: u64, a: u64, b: u64) -> u128 {
    let lo = splitmix(b ^ splitmix(a ^ tag.rotate_left(32)));
    let hi = splitmix(lo ^ a.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ tag);
    (hi as u128) << 64 | lo as u128
}

const UNPLACED_TAG: u64 = 1;
const BAN_TAG: u64 = 2;
const NODE_TAG: u64 = 3;

/// Hashes a Zobrist key by taking its low bits: the keys are already uniformly random.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u128(&mut self, key: u128) {
        self.0 = key as u64;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Found,
    NotFound,
    /// The attempt's node limit, the budget or another thread stopped it.
    Stopped,
}

/// Buffers grouped into sections: the sets live just before each distinct end of a lifetime.
/// Every conflicting pair shares a section, and a buffer's sections are consecutive.
struct Sections {
    members: Vec<Vec<u32>>,
    /// Per buffer, its sections `first..end`.
    first: Vec<u32>,
    end: Vec<u32>,
    /// Per buffer, where its entries start in flat per-(buffer, section) tables.
    flat: Vec<usize>,
}

impl Sections {
    fn new(intervals: &[(u64, u64)]) -> Sections {
        let mut ends: Vec<u64> = intervals.iter().map(|&(_, e)| e).collect();
        ends.sort_unstable();
        ends.dedup();
        let mut members = vec![Vec::new(); ends.len()];
        let (mut first, mut end, mut flat) = (Vec::new(), Vec::new(), Vec::new());
        let mut at = 0;
        for (b, &(s, e)) in intervals.iter().enumerate() {
            let lo = ends.partition_point(|&x| x <= s);
            let hi = ends.partition_point(|&x| x <= e);
            for m in &mut members[lo..hi] {
                m.push(b as u32);
            }
            first.push(lo as u32);
            end.push(hi as u32);
            flat.push(at);
            at += hi - lo;
        }
        Sections { members, first, end, flat }
    }

    fn span(&self, b: usize) -> std::ops::Range<usize> {
        self.first[b] as usize..self.end[b] as usize
    }

    fn len(&self) -> usize {
        self.members.len()
    }
}

/// An independent part of the problem: unplaced buffers living only in sections `lo..hi`.
struct Part {
    lo: usize,
    hi: usize,
    buffers: Vec<u32>,
}

/// One undoable change to the search state.
enum Change {
    MinOffset { buffer: u32, old: u64 },
    Lowest { section: u32, old: u64 },
    Placed { buffer: u32 },
    Ban { buffer: u32, old: u64 },
}

/// What a family's attempts on one problem and capacity learn and share.
struct Memory {
    /// Nodes whose subtree holds no placement.
    refuted: HashSet<u128, std::hash::BuildHasherDefault<KeyHasher>>,
    /// Outcomes of independent pieces (None: infeasible), by buffers and their `min_offset`s.
    pieces: HashMap<Vec<(u32, u64)>, Option<Vec<u64>>>,
    /// Per section: the weight of its failures.
    weight: Vec<f64>,
    /// What the next failure adds.
    bump: f64,
}

impl Memory {
    fn new(sections: usize) -> Memory {
        Memory { refuted: HashSet::default(), pieces: HashMap::new(), weight: vec![0.0; sections], bump: 1.0 }
    }

    fn failed(&mut self, section: usize) {
        self.weight[section] += self.bump;
    }

    /// Next restart: failures from now on weigh more.
    fn age(&mut self) {
        self.bump *= WEIGHT_GROWTH;
        if self.bump > 1e100 {
            for w in &mut self.weight {
                *w *= 1e-100;
            }
            self.bump *= 1e-100;
        }
    }
}

struct Solver<'a> {
    p: &'a PoolProblem,
    sec: &'a Sections,
    capacity: u64,
    /// Per buffer: the aligned top of its placed conflicting buffers.
    min_offset: Vec<u64>,
    offset: Vec<u64>,
    solution: Vec<u64>,
    /// Per buffer: the offset it is banned at, or `NONE`.
    banned: Vec<u64>,
    /// Per section: the lowest `min_offset` of its unplaced buffers (`NONE` when none).
    lowest: Vec<u64>,
    /// Per section: total size of its unplaced buffers.
    total: Vec<u64>,
    /// Unplaced buffers spanning the boundary between section `k` and `k + 1`.
    cuts: Vec<u32>,
    /// Per section, its buffers with the unplaced ones first (`unplaced[s]` of them); placing
    /// a buffer swaps it behind them, and undoing in reverse order only moves the count back.
    members: Vec<Vec<u32>>,
    unplaced: Vec<u32>,
    /// Per (buffer, section) entry (see `Sections::flat`): the buffer's index in `members`.
    slot: Vec<u32>,
    trail: Vec<Change>,
    /// XOR of the Zobrist keys of (unplaced buffer, its `min_offset`) and of (banned buffer,
    /// offset): with the floor and the part, this determines a node's subtree.
    state: u128,
    /// The unplaced buffers of the nodes on the current path (by rank), one node's after
    /// another.
    live: Vec<u32>,
    /// The candidates of the nodes on the current path, one node's after another.
    candidates: Vec<u32>,
    /// Per node on the current path and section of its part: candidates that can start the
    /// section at the node's current offset.
    counts: Vec<u32>,
    memory: &'a mut Memory,
    nodes_left: u64,
    /// Consulted only for its deadline: the node limit is the work budget.
    budget: &'a Budget,
}

impl Solver<'_> {
    fn stopped(&mut self) -> bool {
        if self.nodes_left == 0 {
            return true;
        }
        self.nodes_left -= 1;
        if self.nodes_left.is_multiple_of(256) && self.budget.past_deadline() {
            self.nodes_left = 0;
            return true;
        }
        false
    }

    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            match self.trail.pop().expect("above the mark") {
                Change::MinOffset { buffer, old } => {
                    let b = buffer as u64;
                    let now = self.min_offset[buffer as usize];
                    self.state ^= zobrist(UNPLACED_TAG, b, now) ^ zobrist(UNPLACED_TAG, b, old);
                    self.min_offset[buffer as usize] = old;
                }
                Change::Lowest { section, old } => self.lowest[section as usize] = old,
                Change::Placed { buffer } => {
                    let b = buffer as usize;
                    self.offset[b] = NONE;
                    self.state ^= zobrist(UNPLACED_TAG, b as u64, self.min_offset[b]);
                    for s in self.sec.span(b) {
                        self.unplaced[s] += 1;
                        self.total[s] += self.p.sizes[b];
                    }
                }
                Change::Ban { buffer, old } => self.put_ban(buffer as usize, old),
            }
        }
    }

    fn put_ban(&mut self, b: usize, offset: u64) {
        for o in [self.banned[b], offset] {
            if o != NONE {
                self.state ^= zobrist(BAN_TAG, b as u64, o);
            }
        }
        self.banned[b] = offset;
    }

    fn set_ban(&mut self, b: usize, offset: u64) {
        let old = self.banned[b];
        if old != offset {
            self.trail.push(Change::Ban { buffer: b as u32, old });
            self.put_ban(b, offset);
        }
    }

    /// Splits `part` at boundaries no unplaced buffer spans and solves the pieces.
    fn solve_split(&mut self, part: &Part) -> Status {
        let mut start = part.lo;
        let mut pieces = Vec::new();
        for k in part.lo..part.hi {
            if k + 1 == part.hi || self.cuts[k] == 0 {
                let members: Vec<u32> = part
                    .buffers
                    .iter()
                    .copied()
                    .filter(|&b| self.offset[b as usize] == NONE && (self.sec.first[b as usize] as usize) <= k)
                    .filter(|&b| self.sec.end[b as usize] as usize > start)
                    .collect();
                if !members.is_empty() {
                    pieces.push(Part { lo: start, hi: k + 1, buffers: members });
                }
                start = k + 1;
            }
        }
        for piece in &pieces {
            // A piece restarts from offset 0 without bans (a relaxation that loses nothing), so
            // its outcome depends only on its buffers and their `min_offset`s.
            let mut key: Vec<(u32, u64)> = piece.buffers.iter().map(|&b| (b, self.min_offset[b as usize])).collect();
            key.sort_unstable();
            match self.memory.pieces.get(&key) {
                Some(None) => return Status::NotFound,
                Some(Some(offsets)) => {
                    for (&(b, _), &o) in key.iter().zip(offsets) {
                        self.solution[b as usize] = o;
                    }
                    continue;
                }
                None => {}
            }
            if self.memory.pieces.len() >= MAX_PIECES {
                self.memory.pieces.clear();
            }
            let mark = self.trail.len();
            for &b in &piece.buffers {
                self.set_ban(b as usize, NONE);
            }
            let live = self.live.len();
            self.live.extend_from_slice(&piece.buffers);
            let status = self.search(piece, 0, live..self.live.len());
            self.live.truncate(live);
            self.undo_to(mark);
            match status {
                Status::Found => {
                    let offsets = key.iter().map(|&(b, _)| self.solution[b as usize]).collect();
                    self.memory.pieces.insert(key, Some(offsets));
                }
                Status::NotFound => {
                    self.memory.pieces.insert(key, None);
                    return status;
                }
                Status::Stopped => return status,
            }
        }
        Status::Found
    }

    /// Places every unplaced buffer of `part`, none below `floor` (the offset of the previous
    /// placement). `parent` lists (in `self.live`) the parent node's unplaced buffers, by rank.
    fn search(&mut self, part: &Part, floor: u64, parent: std::ops::Range<usize>) -> Status {
        if self.stopped() {
            return Status::Stopped;
        }
        let node = self.state ^ zobrist(NODE_TAG, (part.lo << 32 | part.hi) as u64, floor);
        if self.memory.refuted.contains(&node) {
            return Status::NotFound;
        }
        let status = self.expand(part, floor, parent);
        if status == Status::NotFound {
            if self.memory.refuted.len() >= MAX_REFUTED {
                self.memory.refuted.clear();
            }
            self.memory.refuted.insert(node);
        }
        status
    }

    fn expand(&mut self, part: &Part, floor: u64, parent: std::ops::Range<usize>) -> Status {
        // This node's unplaced buffers, and the lowest top any of them can reach.
        let live = self.live.len();
        let mut min_height = NONE;
        for k in parent {
            let b = self.live[k] as usize;
            if self.offset[b] == NONE {
                self.live.push(b as u32);
                min_height = min_height.min(self.min_offset[b] + self.p.sizes[b]);
            }
        }
        let live = live..self.live.len();
        if live.is_empty() {
            return Status::Found;
        }
        // Candidates: unplaced buffers not floating, not banned at their `min_offset`, and
        // below `min_height` (dominance: a buffer that could drop into the gap below makes every
        // placement at or above its top redundant).
        let base = self.candidates.len();
        for k in live.clone() {
            let b = self.live[k];
            let m = self.min_offset[b as usize];
            if m >= floor && m < min_height && self.banned[b as usize] != m {
                self.candidates.push(b);
            }
        }
        // Buffers are listed by rank, so a stable sort gives (offset, rank) order.
        let min_offset = &self.min_offset;
        self.candidates[base..].sort_by_key(|&b| min_offset[b as usize]);
        let mark = self.trail.len();
        let end = self.candidates.len();
        let counts = self.counts.len();
        self.counts.resize(counts + (part.hi - part.lo), 0);
        let mut status = Status::NotFound;
        let mut k = base;
        'offsets: while k < end {
            let off = self.min_offset[self.candidates[k] as usize];
            let run = k..(k..end).find(|&j| self.min_offset[self.candidates[j] as usize] != off).unwrap_or(end);
            self.counts[counts..].fill(0);
            for j in run.clone() {
                for s in self.sec.span(self.candidates[j] as usize) {
                    self.counts[counts + s - part.lo] += 1;
                }
            }
            // A section over the capacity at some offset is over at every higher one: nothing
            // in this node fits any more.
            if !self.sections_fit(part, off, counts) {
                break;
            }
            for j in run.clone() {
                let b = self.candidates[j] as usize;
                status = self.try_place(part, b, off, live.clone());
                if status != Status::NotFound {
                    break 'offsets;
                }
                self.set_ban(b, off);
                // A section none of whose buffers can start at `off` any more has a gap there.
                for s in self.sec.span(b) {
                    let c = &mut self.counts[counts + s - part.lo];
                    *c -= 1;
                    if *c == 0 && self.total[s] > 0 && self.lowest[s] <= off && off + 1 + self.total[s] > self.capacity
                    {
                        self.memory.failed(s);
                        break 'offsets;
                    }
                }
            }
            k = run.end;
        }
        self.counts.truncate(counts);
        self.undo_to(mark);
        self.candidates.truncate(base);
        self.live.truncate(live.start);
        status
    }

    /// Does every section of `part` fit the capacity when nothing more goes below `off`? A
    /// section starts at `off` only if one of its candidates there (counted in
    /// `self.counts[counts..]`) can start it; floating or banned buffers must first be lifted
    /// by a placement, so they start above.
    fn sections_fit(&mut self, part: &Part, off: u64, counts: usize) -> bool {
        let start = |this: &Self, s: usize| {
            if this.lowest[s] > off {
                this.lowest[s]
            } else if this.counts[counts + s - part.lo] > 0 {
                off
            } else {
                off + 1
            }
        };
        match (part.lo..part.hi).find(|&s| self.total[s] > 0 && start(self, s) + self.total[s] > self.capacity) {
            Some(s) => {
                self.memory.failed(s);
                false
            }
            None => true,
        }
    }

    /// Recomputes the lowest `min_offset` of section `s`'s unplaced buffers.
    fn refresh_lowest(&mut self, s: usize) {
        let lowest = self.members[s][..self.unplaced[s] as usize]
            .iter()
            .map(|&m| self.min_offset[m as usize])
            .min()
            .unwrap_or(NONE);
        if lowest != self.lowest[s] {
            self.trail.push(Change::Lowest { section: s as u32, old: self.lowest[s] });
            self.lowest[s] = lowest;
        }
    }

    /// Removes `b` from the unplaced members of its sections.
    fn take_out(&mut self, b: usize) {
        for (k, s) in self.sec.span(b).enumerate() {
            let n = self.unplaced[s] as usize - 1;
            let at = self.slot[self.sec.flat[b] + k] as usize;
            let other = self.members[s][n] as usize;
            self.members[s].swap(at, n);
            self.slot[self.sec.flat[other] + (s - self.sec.first[other] as usize)] = at as u32;
            self.slot[self.sec.flat[b] + k] = n as u32;
            self.unplaced[s] = n as u32;
        }
    }

    /// Places `b` at `offset` and searches on; the state is as before when it returns.
    fn try_place(&mut self, part: &Part, b: usize, offset: u64, live: std::ops::Range<usize>) -> Status {
        let size = self.p.sizes[b];
        let top = offset + size;
        if top > self.capacity {
            return Status::NotFound;
        }
        let mark = self.trail.len();
        self.offset[b] = offset;
        self.state ^= zobrist(UNPLACED_TAG, b as u64, self.min_offset[b]);
        self.trail.push(Change::Placed { buffer: b as u32 });
        self.take_out(b);
        for s in self.sec.span(b) {
            self.total[s] -= size;
            if self.lowest[s] == offset {
                self.refresh_lowest(s);
            }
        }
        // Lift the unplaced conflicting buffers onto `b`.
        for k in 0..self.p.adj[b].len() {
            let j = self.p.adj[b][k] as usize;
            let old = self.min_offset[j];
            if self.offset[j] != NONE || old >= top {
                continue;
            }
            let new = top.next_multiple_of(self.p.aligns[j]);
            self.min_offset[j] = new;
            self.state ^= zobrist(UNPLACED_TAG, j as u64, old) ^ zobrist(UNPLACED_TAG, j as u64, new);
            self.trail.push(Change::MinOffset { buffer: j as u32, old });
            for s in self.sec.span(j) {
                if self.lowest[s] == old {
                    self.refresh_lowest(s);
                }
            }
        }
        let span = self.sec.span(b);
        let over =
            span.clone().find(|&s| self.total[s] > 0 && self.lowest[s].max(offset) + self.total[s] > self.capacity);
        let status = match over {
            Some(s) => {
                self.memory.failed(s);
                Status::NotFound
            }
            None => {
                let mut split = false;
                for k in span.start..span.end - 1 {
                    self.cuts[k] -= 1;
                    split |= self.cuts[k] == 0;
                }
                let status = if split { self.solve_split(part) } else { self.search(part, offset, live) };
                for k in span.start..span.end - 1 {
                    self.cuts[k] += 1;
                }
                status
            }
        };
        if status == Status::Found {
            self.solution[b] = offset;
        }
        self.undo_to(mark);
        status
    }
}

/// What every attempt on one problem starts from.
struct Prepared {
    sec: Sections,
    total: Vec<u64>,
    cuts: Vec<u32>,
    slot: Vec<u32>,
}

impl Prepared {
    fn new(p: &PoolProblem, intervals: &[(u64, u64)]) -> Prepared {
        let sec = Sections::new(intervals);
        let mut total = vec![0u64; sec.len()];
        let mut cuts = vec![0u32; sec.len().saturating_sub(1)];
        let mut slot = vec![0u32; sec.members.iter().map(Vec::len).sum()];
        for b in 0..p.len() {
            let span = sec.span(b);
            for s in span.clone() {
                total[s] += p.sizes[b];
            }
            for cut in &mut cuts[span.start..span.end - 1] {
                *cut += 1;
            }
        }
        for (s, m) in sec.members.iter().enumerate() {
            for (at, &b) in m.iter().enumerate() {
                slot[sec.flat[b as usize] + s - sec.first[b as usize] as usize] = at as u32;
            }
        }
        Prepared { sec, total, cuts, slot }
    }

    /// The whole problem, its buffers in the candidate order `order`.
    fn root(&self, p: &PoolProblem, order: [Key; 3], seed: u64, weight: &[f64]) -> Part {
        let keys: Vec<[u64; 3]> = (0..p.len())
            .map(|b| {
                let span = self.sec.span(b);
                order.map(|k| match k {
                    Key::Total => span.clone().map(|s| self.total[s]).max().unwrap_or(0),
                    Key::Size => p.sizes[b],
                    Key::Sections => span.len() as u64,
                    Key::SectionArea => p.sizes[b].saturating_mul(span.len() as u64),
                    // Non-negative floats order like their bits.
                    Key::Weight => span.clone().map(|s| weight[s]).sum::<f64>().to_bits(),
                    Key::Noise => Rng::new(seed ^ splitmix(b as u64)).next_u64(),
                })
            })
            .collect();
        let mut buffers: Vec<u32> = (0..p.len() as u32).collect();
        buffers.sort_by(|&a, &b| keys[b as usize].cmp(&keys[a as usize]).then(a.cmp(&b)));
        Part { lo: 0, hi: self.sec.len(), buffers }
    }

    fn solver<'a>(
        &'a self,
        p: &'a PoolProblem,
        capacity: u64,
        nodes: u64,
        memory: &'a mut Memory,
        budget: &'a Budget,
    ) -> Solver<'a> {
        Solver {
            p,
            sec: &self.sec,
            capacity,
            min_offset: vec![0; p.len()],
            offset: vec![NONE; p.len()],
            solution: vec![0; p.len()],
            banned: vec![NONE; p.len()],
            lowest: vec![0; self.sec.len()],
            total: self.total.clone(),
            cuts: self.cuts.clone(),
            members: self.sec.members.clone(),
            unplaced: self.sec.members.iter().map(|m| m.len() as u32).collect(),
            slot: self.slot.clone(),
            trail: Vec::new(),
            state: (0..p.len()).fold(0, |h, b| h ^ zobrist(UNPLACED_TAG, b as u64, 0)),
            live: Vec::new(),
            candidates: Vec::new(),
            counts: Vec::new(),
            memory,
            nodes_left: nodes,
            budget,
        }
    }
}

/// Is there a placement of `p` (which must have intervals) within `capacity`? The two families
/// of attempts search in rounds, each round one restart of each family (on two threads), until
/// one decides or the budget ends. A round's node limits are fixed before it starts and its
/// outcomes are taken in family order, so the decision does not depend on which thread is
/// faster or how many cores there are.
pub fn decide(p: &PoolProblem, capacity: u64, budget: &Budget) -> Decision {
    let intervals = p.intervals.as_ref().expect("the exact search needs lifetimes");
    if p.is_empty() {
        return Decision::Feasible(Vec::new());
    }
    if p.sizes.iter().any(|&s| s > capacity) {
        return Decision::Infeasible;
    }
    let prep = Prepared::new(p, intervals);
    if prep.total.iter().any(|&t| t > capacity) {
        return Decision::Infeasible;
    }
    std::thread::scope(|scope| {
        let families: Vec<(mpsc::Sender<u64>, mpsc::Receiver<Attempt>)> = [&FIXED_ORDERS, &LEARNED_ORDERS]
            .into_iter()
            .map(|orders| {
                let (go, rounds) = mpsc::channel::<u64>();
                let (report, outcomes) = mpsc::channel();
                let prep = &prep;
                std::thread::Builder::new()
                    .stack_size(SEARCH_STACK_BYTES)
                    .spawn_scoped(scope, move || family(prep, p, capacity, budget, orders, rounds, report))
                    .expect("a search thread starts");
                (go, outcomes)
            })
            .collect();
        for round in 1u64.. {
            let nodes_left = budget.remaining() / NODE_UNITS / families.len() as u64;
            if nodes_left == 0 || budget.past_deadline() {
                break;
            }
            let nodes = (RESTART_NODES_PER_BUFFER * p.len() as u64).saturating_mul(luby(round)).min(nodes_left);
            for (go, _) in &families {
                go.send(nodes).expect("the search thread waits for rounds");
            }
            let attempts: Vec<Attempt> =
                families.iter().map(|(_, outcomes)| outcomes.recv().expect("the search thread reports")).collect();
            for attempt in &attempts {
                budget.charge(attempt.nodes.saturating_mul(NODE_UNITS));
            }
            if let Some(decided) = attempts.into_iter().find_map(|a| a.decision) {
                return decided;
            }
        }
        Decision::Unknown
    })
}

/// One restart's outcome: the decision, if it reached one, and the nodes it searched.
struct Attempt {
    decision: Option<Decision>,
    nodes: u64,
}

/// One family's attempts, one per round (the node limit arrives on `rounds`; the family ends when
/// the channel closes): its orders in turn, with a memory shared across its attempts.
fn family(
    prep: &Prepared,
    p: &PoolProblem,
    capacity: u64,
    budget: &Budget,
    orders: &[[Key; 3]],
    rounds: mpsc::Receiver<u64>,
    report: mpsc::Sender<Attempt>,
) {
    let mut memory = Memory::new(prep.sec.len());
    for (attempt, nodes) in rounds.iter().enumerate() {
        let order = orders[attempt % orders.len()];
        let root = prep.root(p, order, attempt as u64, &memory.weight);
        let mut solver = prep.solver(p, capacity, nodes, &mut memory, budget);
        let decision = match solver.solve_split(&root) {
            Status::Found => {
                debug_assert!(p.is_valid(&solver.solution) && p.peak(&solver.solution) <= capacity);
                Some(Decision::Feasible(std::mem::take(&mut solver.solution)))
            }
            Status::NotFound => Some(Decision::Infeasible),
            Status::Stopped => None,
        };
        let searched = nodes - solver.nodes_left;
        if decision.is_none() {
            memory.age();
        }
        if report.send(Attempt { decision, nodes: searched }).is_err() {
            return;
        }
    }
}

/// The Luby sequence 1, 1, 2, 1, 1, 2, 4, 1, ... (restart lengths within a constant factor of
/// the best fixed schedule for an unknown run-time distribution).
fn luby(i: u64) -> u64 {
    let mut k = 1;
    while (1u64 << k) - 1 < i {
        k += 1;
    }
    if (1u64 << k) - 1 == i { 1 << (k - 1) } else { luby(i - (1 << (k - 1)) + 1) }
}
