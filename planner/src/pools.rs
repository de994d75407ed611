//! Spreading buffers over pools: each buffer goes to the first of its candidate pools in which
//! it fits under the pool's size hint. Buffers a bounded pool cannot hold fall back to their
//! next candidate and the affected pools are planned again.

use std::collections::HashMap;

use crate::algorithms::Algorithm;
use crate::problem::PoolProblem;
use crate::types::{Budget, BufferInfo, Plan, PlanError, PoolAllocation, PoolInfo, normalize};

/// Candidate pool indices of every buffer, checking names.
pub fn resolve_candidates(buffers: &[BufferInfo], pools: &[PoolInfo]) -> Result<Vec<Vec<usize>>, PlanError> {
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, p) in pools.iter().enumerate() {
        if by_name.insert(p.name.as_str(), i).is_some() {
            return Err(PlanError::DuplicatePool(p.name.clone()));
        }
        if p.alignment == 0 || !p.alignment.is_power_of_two() {
            return Err(PlanError::BadPool {
                pool: p.name.clone(),
                reason: format!("alignment {} is not a power of two", p.alignment),
            });
        }
    }
    buffers
        .iter()
        .map(|b| {
            if b.pool_candidates.is_empty() {
                return Err(PlanError::NoCandidates { buffer: b.name.clone() });
            }
            b.pool_candidates
                .iter()
                .map(|n| {
                    by_name
                        .get(n.as_str())
                        .copied()
                        .ok_or_else(|| PlanError::UnknownPool { buffer: b.name.clone(), pool: n.clone() })
                })
                .collect()
        })
        .collect()
}

/// Plans `buffers` over `pools` with `alg` placing each pool.
pub fn plan_pools<A: Algorithm + ?Sized>(
    alg: &A,
    buffers: &[BufferInfo],
    pools: &[PoolInfo],
    budget: &Budget,
) -> Result<Plan, PlanError> {
    let mut buffers = buffers.to_vec();
    normalize(&mut buffers)?;
    let candidates = resolve_candidates(&buffers, pools)?;
    let n = buffers.len();
    let mut choice = vec![0usize; n]; // index into the buffer's candidate list
    let mut offsets = vec![0u64; n];
    let mut sizes = vec![0u64; pools.len()];
    let mut dirty = vec![true; pools.len()];
    loop {
        let members: Vec<Vec<usize>> =
            (0..pools.len()).map(|p| (0..n).filter(|&i| candidates[i][choice[i]] == p).collect()).collect();
        let todo = dirty.iter().filter(|&&d| d).count().max(1);
        let mut moved = false;
        for (p, pool) in pools.iter().enumerate() {
            if !dirty[p] {
                continue;
            }
            dirty[p] = false;
            let m = &members[p];
            let problem = PoolProblem::from_buffers(&buffers, m, pool.size_hint_bytes);
            let placed = alg.place(&problem, &budget.share(0.9 / todo as f64));
            debug_assert!(problem.is_valid(&placed), "{} produced an invalid placement", alg.name());
            sizes[p] = problem.peak(&placed);
            for (k, &i) in m.iter().enumerate() {
                offsets[i] = placed[k];
            }
            let Some(limit) = pool.size_hint_bytes else { continue };
            if sizes[p] <= limit {
                continue;
            }
            // Buffers larger than the limit fall back to their next candidate; when none is,
            // only the largest buffer sticking out over the limit does, since moving it may
            // leave room for the others.
            let sticking: Vec<usize> =
                m.iter().copied().filter(|&i| offsets[i] + buffers[i].size_bytes > limit).collect();
            let mut falling: Vec<usize> = sticking.iter().copied().filter(|&i| buffers[i].size_bytes > limit).collect();
            if falling.is_empty() {
                falling.extend(sticking.iter().copied().max_by_key(|&i| (buffers[i].size_bytes, std::cmp::Reverse(i))));
            }
            for i in falling {
                if choice[i] + 1 >= candidates[i].len() {
                    return Err(no_pool_fits(&buffers[i], &candidates[i], pools, &sizes));
                }
                choice[i] += 1;
                dirty[candidates[i][choice[i]]] = true;
                moved = true;
            }
            dirty[p] = true;
            // Pool membership changed: recompute it before planning any other pool.
            break;
        }
        if !moved && !dirty.iter().any(|&d| d) {
            break;
        }
    }
    let allocations = (0..n).map(|i| PoolAllocation { pool: candidates[i][choice[i]], offset: offsets[i] }).collect();
    Ok(Plan { algorithm: alg.name().to_string(), allocations, pool_sizes: sizes })
}

fn no_pool_fits(b: &BufferInfo, candidates: &[usize], pools: &[PoolInfo], sizes: &[u64]) -> PlanError {
    let detail: Vec<String> = candidates
        .iter()
        .map(|&p| match pools[p].size_hint_bytes {
            Some(limit) => format!("{} (limit {limit} bytes, {} bytes planned)", pools[p].name, sizes[p]),
            None => format!("{} (unbounded)", pools[p].name),
        })
        .collect();
    PlanError::NoPoolFits { buffer: b.name.clone(), size: b.size_bytes, pools: detail.join(", ") }
}
