//! Lower bounds: the largest total size of pairwise-conflicting buffers (a clique). Exact for
//! lifetimes (the peak of live bytes) and for any chordal conflict graph (via a perfect
//! elimination order); otherwise the best clique a greedy search finds within the budget.

use crate::problem::PoolProblem;
use crate::types::Budget;

/// Peak of summed sizes over time for half-open intervals.
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
    best as u64
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

/// The heaviest clique when `order` is a perfect elimination order, or None when it is not.
fn chordal_max_clique(p: &PoolProblem, order: &[usize]) -> Option<u64> {
    let n = p.len();
    let mut pos = vec![0usize; n];
    for (k, &v) in order.iter().enumerate() {
        pos[v] = k;
    }
    let mut best = 0u64;
    let mut mark = vec![usize::MAX; n];
    for &v in order {
        // v's later neighbours must form a clique: check against the earliest of them.
        let later: Vec<usize> = p.adj[v].iter().map(|&u| u as usize).filter(|&u| pos[u] > pos[v]).collect();
        best = best.max(p.sizes[v] + later.iter().map(|&u| p.sizes[u]).sum::<u64>());
        if let Some(&first) = later.iter().min_by_key(|&&u| pos[u]) {
            for &u in &p.adj[first] {
                mark[u as usize] = v;
            }
            if later.iter().any(|&u| u != first && mark[u] != v) {
                return None;
            }
        }
    }
    Some(best)
}

/// Greedy clique growth from every vertex (heaviest compatible neighbour first).
fn greedy_clique(p: &PoolProblem, budget: &Budget) -> u64 {
    let n = p.len();
    let mut best = 0;
    let mut starts: Vec<usize> = (0..n).collect();
    starts.sort_by_key(|&v| std::cmp::Reverse(p.sizes[v]));
    for &v in &starts {
        if budget.expired() && best > 0 {
            break;
        }
        let mut cand: Vec<usize> = p.adj[v].iter().map(|&u| u as usize).collect();
        cand.sort_by_key(|&u| std::cmp::Reverse(p.sizes[u]));
        let mut clique = vec![v];
        let mut total = p.sizes[v];
        for u in cand {
            if clique[1..].iter().all(|&c| p.adj[u].contains(&(c as u32))) {
                clique.push(u);
                total += p.sizes[u];
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
    chordal_max_clique(p, &order).unwrap_or_else(|| greedy_clique(p, budget))
}
