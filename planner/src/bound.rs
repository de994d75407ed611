//! Lower bounds: the largest total size of pairwise-conflicting buffers (a clique). Exact for
//! lifetimes (the peak of live bytes) and for any chordal conflict graph (via a perfect
//! elimination order); otherwise the best clique a greedy search finds within the budget.

use crate::problem::PoolProblem;
use crate::types::{Budget, BufferInfo, PlanError, PoolInfo};

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
/// chordal. Linear: unvisited vertices sit in doubly linked lists by weight (the number of
/// visited neighbours). None when the budget ends first.
fn elimination_order(adj: &[Vec<u32>], budget: &Budget) -> Option<Vec<usize>> {
    const NONE: u32 = u32::MAX;
    let n = adj.len();
    let mut weight = vec![0u32; n];
    let mut done = vec![false; n];
    let (mut head, mut next, mut prev) = (vec![NONE; n + 1], vec![NONE; n], vec![NONE; n]);
    let insert = |head: &mut [u32], next: &mut [u32], prev: &mut [u32], v: usize, w: usize| {
        (next[v], prev[v]) = (head[w], NONE);
        if head[w] != NONE {
            prev[head[w] as usize] = v as u32;
        }
        head[w] = v as u32;
    };
    for v in 0..n {
        insert(&mut head, &mut next, &mut prev, v, 0);
    }
    let mut order = Vec::with_capacity(n);
    let mut top = 0usize;
    let mut units = 0u64;
    while order.len() < n {
        // Work is charged in batches; small graphs always finish.
        if order.len() % 4096 == 4095 {
            budget.charge(std::mem::take(&mut units));
            if budget.expired() {
                return None;
            }
        }
        while head[top] == NONE {
            top -= 1;
        }
        let v = head[top] as usize;
        head[top] = next[v];
        if next[v] != NONE {
            prev[next[v] as usize] = NONE;
        }
        done[v] = true;
        order.push(v);
        units += 1 + adj[v].len() as u64;
        for &u in &adj[v] {
            let u = u as usize;
            if done[u] {
                continue;
            }
            let w = weight[u] as usize;
            match prev[u] {
                NONE => head[w] = next[u],
                p => next[p as usize] = next[u],
            }
            if next[u] != NONE {
                prev[next[u] as usize] = prev[u];
            }
            weight[u] += 1;
            insert(&mut head, &mut next, &mut prev, u, w + 1);
            top = top.max(w + 1);
        }
    }
    budget.charge(units);
    order.reverse();
    Some(order)
}

/// The heaviest clique (by `weight`, saturating) when `order` is a perfect elimination order
/// of `adj`, or None when it is not. Linear: each vertex's later neighbours must be a clique,
/// which holds when all but the earliest of them neighbour that earliest one ("parent"); the
/// checks are grouped by parent, so each parent's neighbours are marked once.
pub(crate) fn chordal_max_clique(adj: &[Vec<u32>], order: &[usize], weight: impl Fn(usize) -> u64) -> Option<u64> {
    const NONE: u32 = u32::MAX;
    let n = adj.len();
    let mut pos = vec![0u32; n];
    for (k, &v) in order.iter().enumerate() {
        pos[v] = k as u32;
    }
    let mut best = 0u64;
    let mut parent = vec![NONE; n];
    for (v, a) in adj.iter().enumerate() {
        let mut sum = weight(v);
        for &u in a.iter().filter(|&&u| pos[u as usize] > pos[v]) {
            sum = sum.saturating_add(weight(u as usize));
            if parent[v] == NONE || pos[u as usize] < pos[parent[v] as usize] {
                parent[v] = u;
            }
        }
        best = best.max(sum);
    }
    // Children grouped by parent (a counting sort).
    let mut start = vec![0usize; n + 1];
    for &p in parent.iter().filter(|&&p| p != NONE) {
        start[p as usize + 1] += 1;
    }
    for k in 0..n {
        start[k + 1] += start[k];
    }
    let mut fill = start.clone();
    let mut children = vec![0u32; start[n]];
    for (v, &p) in parent.iter().enumerate().filter(|&(_, &p)| p != NONE) {
        children[fill[p as usize]] = v as u32;
        fill[p as usize] += 1;
    }
    let mut mark = vec![NONE; n];
    for p in 0..n {
        let kids = &children[start[p]..start[p + 1]];
        if kids.is_empty() {
            continue;
        }
        for &u in &adj[p] {
            mark[u as usize] = p as u32;
        }
        for &v in kids {
            let later = adj[v as usize].iter().filter(|&&u| pos[u as usize] > pos[v as usize]);
            if later.clone().any(|&u| u != p as u32 && mark[u as usize] != p as u32) {
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
        budget.charge(1 + cand.len() as u64);
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

/// A proven lower bound on the pool size of `p`: exact with lifetimes or a chordal conflict
/// graph (when the budget lets the elimination order finish), else the heaviest clique the
/// greedy growth finds within the budget.
pub fn lower_bound(p: &PoolProblem, budget: &Budget) -> u64 {
    if let Some(iv) = &p.intervals {
        return max_load(&p.sizes, iv);
    }
    elimination_order(&p.adj, budget)
        .and_then(|order| chordal_max_clique(&p.adj, &order, |v| p.sizes[v]))
        .unwrap_or_else(|| greedy_clique(p, budget))
}

/// A proven lower bound on the total of the pool sizes of any plan of `buffers` (normalized) over
/// `pools`: the larger of the heaviest clique among all buffers (however a clique is spread
/// over pools, its parts add up) and the sum over pools of the bounds of the buffers that have
/// no other candidate.
pub fn total_lower_bound(buffers: &[BufferInfo], pools: &[PoolInfo], budget: &Budget) -> Result<u64, PlanError> {
    let all: Vec<usize> = (0..buffers.len()).collect();
    let together = lower_bound(&PoolProblem::with_given_lifetimes(buffers, &all, None), &budget.share(0.5));
    let candidates = crate::pools::resolve_candidates(buffers, pools)?;
    let mut apart = 0u64;
    for p in 0..pools.len() {
        let pinned: Vec<usize> = (0..buffers.len()).filter(|&i| candidates[i] == [p]).collect();
        if !pinned.is_empty() {
            let bound = lower_bound(&PoolProblem::with_given_lifetimes(buffers, &pinned, None), budget);
            apart = apart.saturating_add(bound);
        }
    }
    Ok(together.max(apart))
}
