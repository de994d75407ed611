//! Large planning problems as JSON text, written directly (millions of conflicts would be slow
//! through `serde_json::Value`): shared by the hardening tests and the `stress_problems`
//! example that writes them out for timing `heron plan --buffers`.

use std::fmt::Write;

use heron_planner::problem::Rng;

/// Pools as `(name, size hint)`.
pub type Pools<'a> = &'a [(&'a str, Option<u64>)];

/// `n` random lifetimes on a timeline of `10 * n` steps, each overlapping about `overlap`
/// others.
pub fn lifetimes(n: usize, overlap: usize, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let start = rng.below(10 * n) as u64;
            (start, start + 1 + rng.below(20 * overlap.max(1)) as u64)
        })
        .collect()
}

/// For every interval, the earlier-starting ones it overlaps (each conflict listed once).
pub fn earlier_overlaps(intervals: &[(u64, u64)]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| (intervals[i].0, i));
    let mut conflicts = vec![Vec::new(); intervals.len()];
    let mut active: Vec<usize> = Vec::new();
    for &i in &order {
        active.retain(|&j| intervals[j].1 > intervals[i].0);
        conflicts[i].extend_from_slice(&active);
        active.push(i);
    }
    conflicts
}

/// One buffer of a problem.
pub struct Buffer {
    pub size: u64,
    pub alignment: u64,
    pub conflicts: Vec<usize>,
    pub live_range: Option<(u64, u64)>,
}

/// The problem's JSON text: buffers `b0`, `b1`, ... each with every pool as a candidate, in order.
pub fn problem_json(pools: Pools<'_>, buffers: &[Buffer]) -> String {
    let mut out = String::from("{\"pools\":[");
    for (k, (name, hint)) in pools.iter().enumerate() {
        let hint = hint.map_or("null".to_string(), |h| h.to_string());
        let _ = write!(out, "{}{{\"name\":\"{name}\",\"size_hint_bytes\":{hint}}}", if k > 0 { "," } else { "" });
    }
    let candidates: Vec<String> = pools.iter().map(|(name, _)| format!("\"{name}\"")).collect();
    let candidates = candidates.join(",");
    out.push_str("],\"buffers\":[");
    for (i, b) in buffers.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"name\":\"b{i}\",\"size_bytes\":{},\"alignment\":{},\"pool_candidates\":[{candidates}],\"conflicts\":[",
            if i > 0 { "," } else { "" },
            b.size,
            b.alignment
        );
        for (k, j) in b.conflicts.iter().enumerate() {
            let _ = write!(out, "{}\"b{j}\"", if k > 0 { "," } else { "" });
        }
        out.push(']');
        if let Some((lo, hi)) = b.live_range {
            let _ = write!(out, ",\"live_range\":[{lo},{hi}]");
        }
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// Buffer sizes of 64 B to 64 KiB.
pub fn small(rng: &mut Rng) -> u64 {
    64 + rng.below(65_536) as u64
}

/// Buffer sizes of up to `isize::MAX`, most near it.
pub fn huge(rng: &mut Rng) -> u64 {
    (isize::MAX as u64) >> rng.below(3)
}

/// `n` buffers of `size` with random lifetimes overlapping about `overlap` others (none when 0),
/// given as conflicts, and also as live ranges when `live`.
pub fn lifetime_problem(
    pools: Pools<'_>,
    n: usize,
    overlap: usize,
    live: bool,
    seed: u64,
    size: fn(&mut Rng) -> u64,
) -> String {
    let intervals = lifetimes(n, overlap, seed);
    let mut rng = Rng::new(seed ^ 0x5123);
    let conflicts = if overlap == 0 { vec![Vec::new(); n] } else { earlier_overlaps(&intervals) };
    let buffers: Vec<Buffer> = conflicts
        .into_iter()
        .zip(&intervals)
        .map(|(conflicts, &iv)| Buffer {
            size: size(&mut rng),
            alignment: 1 << rng.below(7),
            conflicts,
            live_range: live.then_some(iv),
        })
        .collect();
    problem_json(pools, &buffers)
}

/// `n` buffers of up to 1 MiB that all conflict with each other (each listing the earlier ones).
pub fn clique_problem(pools: Pools<'_>, n: usize, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let buffers: Vec<Buffer> = (0..n)
        .map(|i| Buffer {
            size: 1 + rng.below(1 << 20) as u64,
            alignment: 1 << rng.below(7),
            conflicts: (0..i).collect(),
            live_range: None,
        })
        .collect();
    problem_json(pools, &buffers)
}

/// TVM's bounded-pool problem (`test_bounded` of its hill-climb tests), generalised: `n` buffers
/// of 1 B to 64 KiB, each picking `partners` random other buffers to conflict with; alignments
/// of 1 to 24 bytes, powers of two or not.
pub fn random_conflicts(pools: Pools<'_>, n: usize, partners: usize, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let mut conflicts = vec![std::collections::BTreeSet::new(); n];
    for i in 0..n {
        for _ in 0..partners {
            let j = (i + 1 + rng.below(n - 1)) % n;
            conflicts[i].insert(j);
            conflicts[j].insert(i);
        }
    }
    let buffers: Vec<Buffer> = conflicts
        .into_iter()
        .map(|c| Buffer {
            size: 1 + rng.below(65_534) as u64,
            alignment: 1 + rng.below(24) as u64,
            conflicts: c.into_iter().collect(),
            live_range: None,
        })
        .collect();
    problem_json(pools, &buffers)
}

/// A named problem of the stress set.
pub struct Stress {
    pub name: &'static str,
    pub json: String,
}

/// The stress set at `scale` (1.0: the acceptance sizes — 100,000 buffers, 3,000-cliques,
/// 2,000 buffers over two pools; smaller scales for the default test run). Problems named
/// `*_too_large` must be rejected as too large; the others must plan.
pub fn stress_set(scale: f64) -> Vec<Stress> {
    let n = |full: usize| ((full as f64 * scale) as usize).max(2);
    let two: Pools<'_> = &[("fast", Some(1 << 20)), ("slow", None)];
    let one: Pools<'_> = &[("ws", None)];
    let bounded: Pools<'_> = &[("default", Some(65_535)), ("slow", None)];
    let lifetime = |pools, full, overlap, live, seed, size| lifetime_problem(pools, n(full), overlap, live, seed, size);
    vec![
        Stress { name: "fallback2000_conflicts", json: lifetime(two, 2_000, 40, false, 7, small) },
        Stress { name: "fallback2000_live", json: lifetime(two, 2_000, 40, true, 7, small) },
        Stress { name: "bounded150_random_conflicts", json: random_conflicts(bounded, 150, 1, 5) },
        Stress { name: "clique3000", json: clique_problem(one, n(3_000), 3) },
        Stress { name: "clique3000_two_pools", json: clique_problem(two, n(3_000), 3) },
        Stress { name: "n100k_live", json: lifetime(one, 100_000, 20, true, 11, small) },
        Stress { name: "n100k_conflicts", json: lifetime(one, 100_000, 20, false, 11, small) },
        Stress { name: "n100k_two_pools", json: lifetime(two, 100_000, 20, true, 12, small) },
        Stress { name: "n100k_huge_disjoint", json: lifetime(two, 100_000, 0, false, 13, huge) },
        Stress { name: "n100k_huge_too_large", json: lifetime(one, 100_000, 20, false, 14, huge) },
    ]
}
