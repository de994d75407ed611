//! The independent plan verifier, run before any code generation and in tests. It trusts
//! nothing the algorithms computed: every check is made from the buffers, pools and offsets.

use crate::types::{BufferInfo, Plan, PoolInfo};

/// Checks that every buffer is in one of its candidate pools, aligned, inside its pool and under
/// the pool's size hint, and that no two conflicting buffers overlap. Reports every violation.
pub fn verify_plan(buffers: &[BufferInfo], pools: &[PoolInfo], plan: &Plan) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    if plan.allocations.len() != buffers.len() {
        errors.push(format!("plan has {} allocations for {} buffers", plan.allocations.len(), buffers.len()));
        return Err(errors);
    }
    if plan.pool_sizes.len() != pools.len() {
        errors.push(format!("plan has {} pool sizes for {} pools", plan.pool_sizes.len(), pools.len()));
        return Err(errors);
    }
    let mut used = vec![0u64; pools.len()];
    for (b, a) in buffers.iter().zip(&plan.allocations) {
        let Some(pool) = pools.get(a.pool) else {
            errors.push(format!("buffer '{}' is in pool #{} which does not exist", b.name, a.pool));
            continue;
        };
        if !b.pool_candidates.contains(&pool.name) {
            errors.push(format!(
                "buffer '{}' is in pool '{}', not one of its candidates {:?}",
                b.name, pool.name, b.pool_candidates
            ));
        }
        if b.alignment == 0 || a.offset % b.alignment != 0 {
            errors.push(format!("buffer '{}' at offset {} breaks its alignment {}", b.name, a.offset, b.alignment));
        }
        let end = a.offset.checked_add(b.size_bytes);
        match end {
            None => errors.push(format!("buffer '{}' ends beyond the address space", b.name)),
            Some(end) => {
                used[a.pool] = used[a.pool].max(end);
                if end > plan.pool_sizes[a.pool] {
                    errors.push(format!(
                        "buffer '{}' ends at {end}, past pool '{}' of size {}",
                        b.name, pool.name, plan.pool_sizes[a.pool]
                    ));
                }
                if let Some(limit) = pool.size_hint_bytes
                    && end > limit
                {
                    errors.push(format!(
                        "buffer '{}' ends at {end}, past the size hint {limit} of pool '{}'",
                        b.name, pool.name
                    ));
                }
            }
        }
    }
    for (i, b) in buffers.iter().enumerate() {
        for &j in &b.conflicts {
            let Some(c) = buffers.get(j) else {
                errors.push(format!("buffer '{}' conflicts with buffer #{j} which does not exist", b.name));
                continue;
            };
            let (x, y) = (&plan.allocations[i], &plan.allocations[j]);
            let overlap = x.pool == y.pool
                && x.offset < y.offset.saturating_add(c.size_bytes)
                && y.offset < x.offset.saturating_add(b.size_bytes);
            if overlap && i != j && (i < j || !c.conflicts.contains(&i)) {
                errors.push(format!(
                    "conflicting buffers '{}' and '{}' overlap in pool '{}'",
                    b.name, c.name, pools[x.pool].name
                ));
            }
        }
    }
    for (p, pool) in pools.iter().enumerate() {
        if plan.pool_sizes[p] != used[p] {
            errors.push(format!(
                "pool '{}' is reported as {} bytes but its buffers end at {}",
                pool.name, plan.pool_sizes[p], used[p]
            ));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}
