//! Lower bounds: the largest total size of pairwise-conflicting buffers (a clique). Exact for
//! lifetimes (the peak of live bytes) and for any chordal conflict graph (via a perfect
//! elimination order); otherwise the best clique a greedy search finds within the budget.

use crate::problem::PoolProblem;
use crate::types::Budget;

/// Peak of summed sizes over time for half-open intervals (saturating at `u64::MAX`).
pub fn max_load(sizes: &[u64], intervals: &[(u64, u64)]) -> u64 {
    let mut events: Vec<(u64, i128)> = Vec::with_capacity(2 * sizes.len());
    for (s, &(lo, hi)) in sizes.iter().zip(intervals) {
        events.push((lo, *s as i128));
        events.push((hi, -(*s as i128)));
    }
    // Ends before starts at the same time: intervals are half-open.
    events.sort_by_key(|&(t, d)| (t, d > 0));
    let (mut load, mut best) = (0i128, 0i128);
    for (_, d) in events {
        load += d;
        best = best.max(load);
    }
    u64::try_from(best).unwrap_or(u64::MAX)
}

/// Maximum cardinality search order, reversed: a perfect elimination order when the graph is
/// chordal.
fn elimination_order(adj: &[Vec<u32>]) -> Vec<usize> {
    let n = adj.len();
    let mut weight = vec![0usize; n];
    let mut done = vec![false; n];
    // Buckets by weight for O(n + m).
    let mut buckets: Vec<Vec<usize>> = vec![(0..n).collect()];
    let mut order = Vec::with_capacity(n);
    let mut top = 0usize;
    while order.len() < n {
        let v = loop {
            match buckets[top].pop() {
                Some(v) if !done[v] && weight[v] == top => break v,
                Some(_) => {}
                None => top -= 1,
            }
        };
        done[v] = true;
        order.push(v);
        for &u in &adj[v] {
            let u = u as usize;
            if !done[u] {
                weight[u] += 1;
                if buckets.len() <= weight[u] {
                    buckets.push(Vec::new());
                }
                buckets[weight[u]].push(u);
                top = top.max(weight[u]);
            }
        }
    }
    order.reverse();
    order
}

/// The heaviest clique (by `weight`, saturating) when `order` is a perfect elimination order
/// of `adj`, or None when it is not. Linear: each vertex's later neighbours must be a clique,
/// which holds when all but the earliest of them neighbour that earliest one ("parent"); the
/// checks are grouped by parent, so each parent's neighbours are marked once.
pub(crate) fn chordal_max_clique(adj: &[Vec<u32>], order: &[usize], weight: impl Fn(usize) -> u64) -> Option<u64> {
    let n = adj.len();
    let mut pos = vec![0usize; n];
    for (k, &v) in order.iter().enumerate() {
        pos[v] = k;
    }
    let mut best = 0u64;
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); n];
    for &v in order {
        let later = adj[v].iter().map(|&u| u as usize).filter(|&u| pos[u] > pos[v]);
        best = best.max(later.clone().fold(weight(v), |sum, u| sum.saturating_add(weight(u))));
        if let Some(parent) = later.min_by_key(|&u| pos[u]) {
            children[parent].push(v as u32);
        }
    }
    let mut mark = vec![usize::MAX; n];
    for (parent, kids) in children.iter().enumerate() {
        if kids.is_empty() {
            continue;
        }
        for &u in &adj[parent] {
            mark[u as usize] = parent;
        }
        for &v in kids {
            let v = v as usize;
            if adj[v].iter().map(|&u| u as usize).any(|u| pos[u] > pos[v] && u != parent && mark[u] != parent) {
                return None;
            }
        }
    }
    Some(best)
}

/// Greedy clique growth from every vertex, heaviest first (heaviest compatible neighbour
/// first), while the budget lasts; the first one always completes. `hits[u]` counts the clique
/// members `u` neighbours, so a vertex joins in constant time and a clique costs the sum of its
/// members' degrees.
fn greedy_clique(p: &PoolProblem, budget: &Budget) -> u64 {
    let n = p.len();
    let mut best = 0;
    let mut starts: Vec<usize> = (0..n).collect();
    starts.sort_by_key(|&v| std::cmp::Reverse(p.sizes[v]));
    let mut hits = vec![0u32; n];
    let mut touched: Vec<u32> = Vec::new();
    for (k, &v) in starts.iter().enumerate() {
        if k > 0 && budget.expired() {
            break;
        }
        for &u in &touched {
            hits[u as usize] = 0;
        }
        touched.clear();
        let mut cand: Vec<usize> = p.adj[v].iter().map(|&u| u as usize).collect();
        cand.sort_by_key(|&u| std::cmp::Reverse(p.sizes[u]));
        let (mut members, mut total) = (0u32, 0u64);
        for u in std::iter::once(v).chain(cand) {
            if hits[u] == members {
                for &w in &p.adj[u] {
                    hits[w as usize] += 1;
                    touched.push(w);
                }
                members += 1;
                total = total.saturating_add(p.sizes[u]);
            }
        }
        best = best.max(total);
    }
    best
}

/// A proven lower bound on the pool size of `p`.
pub fn lower_bound(p: &PoolProblem, budget: &Budget) -> u64 {
    if let Some(iv) = &p.intervals {
        return max_load(&p.sizes, iv);
    }
    let order = elimination_order(&p.adj);
    chordal_max_clique(&p.adj, &order, |v| p.sizes[v]).unwrap_or_else(|| greedy_clique(p, budget))
}
