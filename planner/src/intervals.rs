//! Recovering lifetimes from a conflict graph: when the conflicts are those of some set of
//! intervals (an interval graph), the interval-specific bound and exact search apply even to
//! problems that only list conflicts.
//!
//! An ordering of the buffers is "umbrella-free" when `u < v < w` and `u`-`w` conflicting
//! imply `u`-`v` conflicting; intervals then follow directly (each buffer starts at its
//! position and ends after its last later neighbour). Repeated LexBFS+ sweeps find such an
//! ordering for interval graphs in practice; every candidate is verified against the conflicts,
//! so a wrong guess costs only time. Every step is linear in buffers plus conflicts, so the
//! recovery is tried on problems of any size, within the caller's budget.

use crate::bound::chordal_max_clique;
use crate::types::Budget;

/// Number of LexBFS+ sweeps tried.
const SWEEPS: usize = 8;

const NIL: u32 = u32::MAX;

/// A vertex's place: its neighbours in its cell's list, and the cell (`NIL` once visited).
#[derive(Clone, Copy)]
struct Link {
    next: u32,
    prev: u32,
    cell: u32,
}

/// A cell of vertices with equal LexBFS label: its list, its neighbours in label order, and the
/// cell split off it at step `split_step`.
#[derive(Clone, Copy)]
struct Cell {
    head: u32,
    tail: u32,
    next: u32,
    prev: u32,
    split: u32,
    split_step: u32,
}

/// Unvisited vertices in cells of equal LexBFS label, the cells in descending label order. Each
/// cell is a linked list of vertices; cells are recycled through a free list. (Arrays of small
/// structs: every step touches a vertex's links and its cell together.)
struct Partition {
    links: Vec<Link>,
    cells: Vec<Cell>,
    free: Vec<u32>,
    first: u32,
}

impl Partition {
    /// One cell holding `vertices` in this order.
    fn new(n: usize, vertices: &[u32]) -> Partition {
        let mut p = Partition {
            links: vec![Link { next: NIL, prev: NIL, cell: NIL }; n],
            cells: Vec::new(),
            free: Vec::new(),
            first: NIL,
        };
        let c = p.new_cell_before(NIL);
        for &v in vertices {
            p.push_back(c, v as usize);
        }
        p
    }

    /// A new empty cell just before `before` (`NIL`: the only cell).
    fn new_cell_before(&mut self, before: u32) -> usize {
        let prev = if before == NIL { NIL } else { self.cells[before as usize].prev };
        let cell = Cell { head: NIL, tail: NIL, next: before, prev, split: NIL, split_step: NIL };
        let c = match self.free.pop() {
            Some(c) => {
                self.cells[c as usize] = cell;
                c as usize
            }
            None => {
                self.cells.push(cell);
                self.cells.len() - 1
            }
        };
        match prev {
            NIL => self.first = c as u32,
            p => self.cells[p as usize].next = c as u32,
        }
        if before != NIL {
            self.cells[before as usize].prev = c as u32;
        }
        c
    }

    fn push_back(&mut self, c: usize, v: usize) {
        let tail = self.cells[c].tail;
        self.links[v] = Link { next: NIL, prev: tail, cell: c as u32 };
        match tail {
            NIL => self.cells[c].head = v as u32,
            t => self.links[t as usize].next = v as u32,
        }
        self.cells[c].tail = v as u32;
    }

    /// Takes `v` out of its cell, dropping the cell when it empties.
    fn unlink(&mut self, v: usize) {
        let Link { next, prev, cell } = self.links[v];
        let c = cell as usize;
        match prev {
            NIL => self.cells[c].head = next,
            p => self.links[p as usize].next = next,
        }
        match next {
            NIL => self.cells[c].tail = prev,
            x => self.links[x as usize].prev = prev,
        }
        self.links[v].cell = NIL;
        let Cell { head, next: cell_next, prev: cell_prev, .. } = self.cells[c];
        if head == NIL {
            match cell_prev {
                NIL => self.first = cell_next,
                p => self.cells[p as usize].next = cell_next,
            }
            if cell_next != NIL {
                self.cells[cell_next as usize].prev = cell_prev;
            }
            self.free.push(c as u32);
        }
    }

    /// Moves unvisited `v` into the cell split off its cell at `step` (made just before it if
    /// new).
    fn split_off(&mut self, v: usize, step: u32) {
        let c = self.links[v].cell as usize;
        if self.cells[c].split_step != step {
            let new = self.new_cell_before(c as u32);
            self.cells[c].split = new as u32;
            self.cells[c].split_step = step;
        }
        let new = self.cells[c].split as usize;
        self.unlink(v);
        self.push_back(new, v);
    }

    /// The next vertex to visit, taken out.
    fn visit_next(&mut self) -> usize {
        let v = self.cells[self.first as usize].head as usize;
        self.unlink(v);
        v
    }

    fn visited(&self, v: usize) -> bool {
        self.links[v].cell == NIL
    }
}

/// A LexBFS order by partition refinement (linear time). Ties go to the highest `rank`: the
/// latest vertex of the previous sweep for LexBFS+, the lowest index for the first sweep.
/// Every cell is kept in descending rank, so its head is the vertex to visit next: visiting a
/// vertex moves its unvisited neighbours into new cells just before theirs, taken in
/// descending rank.
/// None when the budget ends first.
fn lex_bfs(adj: &[Vec<u32>], rank: &[u32], budget: &Budget) -> Option<Vec<usize>> {
    let n = adj.len();
    let mut by_rank: Vec<u32> = (0..n as u32).collect();
    by_rank.sort_unstable_by_key(|&v| std::cmp::Reverse(rank[v as usize]));
    // Neighbour lists in descending rank (compressed rows), unless they already are: ascending
    // lists when rank descends with the index.
    let given = by_rank.iter().enumerate().all(|(k, &v)| k == v as usize) && adj.iter().all(|a| a.is_sorted());
    let mut start = Vec::with_capacity(n + 1);
    start.push(0usize);
    let mut sorted = Vec::new();
    if !given {
        for a in adj {
            start.push(start[start.len() - 1] + a.len());
        }
        let mut fill = start.clone();
        sorted = vec![0u32; start[n]];
        for &u in &by_rank {
            for &w in &adj[u as usize] {
                sorted[fill[w as usize]] = u;
                fill[w as usize] += 1;
            }
        }
    }
    let neighbours = |v: usize| if given { &adj[v][..] } else { &sorted[start[v]..start[v + 1]] };
    let mut cells = Partition::new(n, &by_rank);
    let mut order = Vec::with_capacity(n);
    let mut units = 0u64;
    for step in 0..n as u32 {
        // Work is charged in batches; small graphs always finish.
        if step % 4096 == 4095 {
            budget.charge(std::mem::take(&mut units));
            if budget.expired() {
                return None;
            }
        }
        let v = cells.visit_next();
        order.push(v);
        units += 1 + neighbours(v).len() as u64;
        for &u in neighbours(v) {
            if !cells.visited(u as usize) {
                cells.split_off(u as usize, step);
            }
        }
    }
    budget.charge(units);
    Some(order)
}

/// True when the half-open `intervals` overlap exactly where `adj` has conflicts. `adj` must be
/// symmetric without self-loops or duplicates. Linear after sorting: an interval overlaps as
/// many others as start before its end, less those ending by its start, less itself.
pub fn realises(intervals: &[(u64, u64)], adj: &[Vec<u32>]) -> bool {
    if intervals.len() != adj.len() || intervals.iter().any(|&(s, e)| s >= e) {
        return false;
    }
    let mut starts: Vec<u64> = intervals.iter().map(|iv| iv.0).collect();
    let mut ends: Vec<u64> = intervals.iter().map(|iv| iv.1).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    let overlap = |a: (u64, u64), b: (u64, u64)| a.0 < b.1 && b.0 < a.1;
    intervals.iter().zip(adj).all(|(&(s, e), a)| {
        let count = starts.partition_point(|&x| x < e) - ends.partition_point(|&x| x <= s) - 1;
        count == a.len() && a.iter().all(|&j| overlap((s, e), intervals[j as usize]))
    })
}

/// Intervals realising `adj` from an ordering, if the ordering is umbrella-free for it.
fn intervals_from_order(adj: &[Vec<u32>], order: &[usize]) -> Option<Vec<(u64, u64)>> {
    let n = adj.len();
    let mut pos = vec![0usize; n];
    for (k, &v) in order.iter().enumerate() {
        pos[v] = k;
    }
    let intervals: Vec<(u64, u64)> = (0..n)
        .map(|v| {
            let right = adj[v].iter().map(|&w| pos[w as usize]).filter(|&p| p > pos[v]).max().unwrap_or(pos[v]);
            (pos[v] as u64, right as u64 + 1)
        })
        .collect();
    realises(&intervals, adj).then_some(intervals)
}

/// Re-times half-open intervals so that a point only counts the distinct end points at or
/// before it: overlaps are unchanged (a start before an end stays before it, and vice versa),
/// but starts with no end between them coincide, which leaves far fewer sections.
fn compress(intervals: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut ends: Vec<u64> = intervals.iter().map(|&(_, e)| e).collect();
    ends.sort_unstable();
    ends.dedup();
    let at = |x: u64| ends.partition_point(|&e| e <= x) as u64;
    intervals.into_iter().map(|(s, e)| (at(s), at(e))).collect()
}

/// Intervals whose overlaps are exactly the conflicts `adj` (symmetric, without self-loops or
/// duplicates), when the recovery finds them before the budget ends.
pub fn recover_intervals(adj: &[Vec<u32>], budget: &Budget) -> Option<Vec<(u64, u64)>> {
    let n = adj.len();
    if n == 0 || n >= NIL as usize {
        return None;
    }
    let mut order = lex_bfs(adj, &(0..n as u32).rev().collect::<Vec<_>>(), budget)?;
    for sweep in 0..=SWEEPS {
        if let Some(iv) = intervals_from_order(adj, &order) {
            return Some(compress(iv));
        }
        if sweep == 0 {
            // Interval graphs are chordal, and a LexBFS order of a chordal graph, reversed, is
            // a perfect elimination order: when it is not, no sweep can succeed.
            let reversed: Vec<usize> = order.iter().rev().copied().collect();
            chordal_max_clique(adj, &reversed, |_| 0)?;
        }
        if sweep == SWEEPS {
            break;
        }
        let mut rank = vec![0u32; n];
        for (k, &v) in order.iter().enumerate() {
            rank[v] = k as u32;
        }
        order = lex_bfs(adj, &rank, budget)?;
    }
    None
}
