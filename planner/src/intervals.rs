//! Recovering lifetimes from a conflict graph: when the conflicts are those of some set of
//! intervals (an interval graph), the interval-specific bound and exact search apply even to
//! problems that only list conflicts.
//!
//! An ordering of the buffers is "umbrella-free" when `u < v < w` and `u`-`w` conflicting
//! imply `u`-`v` conflicting; intervals then follow directly (each buffer starts at its
//! position and ends after its last later neighbour). Repeated LexBFS+ sweeps find such an
//! ordering for interval graphs in practice; every candidate is verified against the conflicts,
//! so a wrong guess costs only time.

use crate::problem::interval_conflicts;

/// Largest problem the (quadratic) recovery is attempted on.
const MAX_BUFFERS: usize = 2000;

/// Number of LexBFS+ sweeps tried.
const SWEEPS: usize = 8;

/// A LexBFS order; ties go to the vertex latest in `previous` (LexBFS+) when given.
fn lex_bfs(adj: &[Vec<u32>], previous: Option<&[usize]>) -> Vec<usize> {
    let n = adj.len();
    let rank: Vec<usize> = match previous {
        Some(prev) => {
            let mut r = vec![0; n];
            for (k, &v) in prev.iter().enumerate() {
                r[v] = k;
            }
            r
        }
        None => (0..n).map(|v| n - v).collect(),
    };
    // Labels: the (descending) steps at which a numbered neighbour was visited.
    let mut label: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut done = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for step in 0..n {
        let v = (0..n)
            .filter(|&v| !done[v])
            .max_by(|&a, &b| label[a].cmp(&label[b]).then(rank[a].cmp(&rank[b])))
            .expect("an unvisited vertex");
        done[v] = true;
        order.push(v);
        for &u in &adj[v] {
            if !done[u as usize] {
                // Earlier steps rank higher: push n - step so labels compare lexicographically.
                label[u as usize].push(n - step);
            }
        }
    }
    order
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
    let rebuilt = interval_conflicts(&intervals);
    let same = rebuilt.iter().zip(adj).all(|(a, b)| {
        let mut a = a.clone();
        let mut b = b.clone();
        a.sort_unstable();
        b.sort_unstable();
        a == b
    });
    same.then_some(intervals)
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

/// Intervals whose overlaps are exactly the conflicts `adj`, when the recovery finds them.
pub fn recover_intervals(adj: &[Vec<u32>]) -> Option<Vec<(u64, u64)>> {
    if adj.is_empty() || adj.len() > MAX_BUFFERS {
        return None;
    }
    let mut order = lex_bfs(adj, None);
    for _ in 0..SWEEPS {
        if let Some(iv) = intervals_from_order(adj, &order) {
            return Some(compress(iv));
        }
        order = lex_bfs(adj, Some(&order));
    }
    intervals_from_order(adj, &order).map(compress)
}
