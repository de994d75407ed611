//! Planning buffers whose conflicts are exactly their overlapping live ranges, without listing
//! the conflicts. A model's constants (all live for the whole program) or a Concat of 20,000
//! branches (all live at once) conflict pairwise: listing that would take billions of pairs.
//! Here buffers are placed by sweeping time like an allocator would run: each buffer, when its
//! range starts, takes the first gap that fits among the memory freed so far (or the top of the
//! pool), and gives its memory back when its range ends. Near-linear, deterministic, and never
//! wrong: memory is only reused once its previous owner's range is over. Constants, which all
//! start together and never end, come out stacked, which is optimal.

use std::collections::BTreeMap;

use crate::pools::resolve_candidates;
use crate::types::{BufferInfo, MAX_POOL_BYTES, Plan, PlanError, PoolAllocation, PoolInfo, normalized};

/// How many free gaps an allocation looks through before taking the top of the pool: keeps a
/// pathologically fragmented pool from making the sweep quadratic.
const MAX_GAPS_SCANNED: usize = 64;

/// One pool's memory during the sweep.
#[derive(Default)]
struct Arena {
    /// Free gaps below `top`, by offset: offset -> length.
    gaps: BTreeMap<u64, u64>,
    /// End of the used region.
    top: u64,
    /// Largest `top` so far: the pool's size.
    peak: u64,
}

impl Arena {
    /// An aligned offset for `size` bytes staying under `limit`, or None.
    fn alloc(&mut self, size: u64, align: u64, limit: u64) -> Option<u64> {
        let fit = self.gaps.iter().take(MAX_GAPS_SCANNED).find_map(|(&start, &len)| {
            let at = start.checked_next_multiple_of(align)?;
            (at.checked_add(size)? <= start + len).then_some((start, len, at))
        });
        if let Some((start, len, at)) = fit {
            self.gaps.remove(&start);
            if at > start {
                self.gaps.insert(start, at - start);
            }
            if at + size < start + len {
                self.gaps.insert(at + size, start + len - at - size);
            }
            return Some(at);
        }
        let at = self.top.checked_next_multiple_of(align)?;
        let end = at.checked_add(size).filter(|&e| e <= limit)?;
        if at > self.top {
            self.free(self.top, at - self.top);
        }
        self.top = end;
        self.peak = self.peak.max(end);
        Some(at)
    }

    /// Gives `[offset, offset + size)` back, merging it with neighbouring gaps and the top.
    fn free(&mut self, offset: u64, size: u64) {
        let (mut start, mut end) = (offset, offset + size);
        if let Some((&s, &l)) = self.gaps.range(..start).next_back()
            && s + l == start
        {
            self.gaps.remove(&s);
            start = s;
        }
        if let Some(&l) = self.gaps.get(&end) {
            self.gaps.remove(&end);
            end += l;
        }
        if end == self.top {
            self.top = start;
        } else {
            self.gaps.insert(start, end - start);
        }
    }
}

/// Live-range events in processing order: ends before starts at the same time (ranges are
/// half-open), then by buffer index. `true` marks a start.
fn events(buffers: &[BufferInfo]) -> Result<Vec<(u64, bool, usize)>, PlanError> {
    let mut events = Vec::with_capacity(2 * buffers.len());
    for (i, b) in buffers.iter().enumerate() {
        let (lo, hi) = b.live_range.ok_or_else(|| PlanError::BadBuffer {
            buffer: b.name.clone(),
            reason: "conflicts implied by live ranges need a live range".into(),
        })?;
        events.push((lo, true, i));
        events.push((hi, false, i));
    }
    events.sort_unstable_by_key(|&(t, start, i)| (t, start, i));
    Ok(events)
}

/// Plans `buffers`, whose conflicts are their overlapping live ranges (their `conflicts` lists
/// are ignored), over `pools`: each goes to the first candidate pool where it fits under the
/// size hint at the moment its range starts.
pub fn plan_live_ranges(buffers: &[BufferInfo], pools: &[PoolInfo]) -> Result<Plan, PlanError> {
    let buffers = normalized(buffers)?;
    let candidates = resolve_candidates(&buffers, pools)?;
    let mut arenas: Vec<Arena> = pools.iter().map(|_| Arena::default()).collect();
    let mut allocations = vec![PoolAllocation { pool: 0, offset: 0 }; buffers.len()];
    for (_, start, i) in events(&buffers)? {
        let b = &buffers[i];
        if !start {
            let a = &allocations[i];
            arenas[a.pool].free(a.offset, b.size_bytes);
            continue;
        }
        let placed = candidates[i].iter().find_map(|&p| {
            let limit = pools[p].size_hint_bytes.unwrap_or(MAX_POOL_BYTES).min(MAX_POOL_BYTES);
            arenas[p].alloc(b.size_bytes, b.alignment, limit).map(|offset| PoolAllocation { pool: p, offset })
        });
        allocations[i] = placed.ok_or_else(|| {
            let detail: Vec<String> = candidates[i]
                .iter()
                .map(|&p| match pools[p].size_hint_bytes {
                    Some(h) => format!("{} (limit {h} bytes, {} in use)", pools[p].name, arenas[p].top),
                    None => format!("{} (unbounded)", pools[p].name),
                })
                .collect();
            PlanError::NoPoolFits { buffer: b.name.clone(), size: b.size_bytes, pools: detail.join(", ") }
        })?;
    }
    Ok(Plan { algorithm: "live_range_sweep".into(), allocations, pool_sizes: arenas.iter().map(|a| a.peak).collect() })
}

/// Checks that no two of `buffers` whose live ranges overlap share memory in `plan` (their
/// `conflicts` lists are ignored; `verify_plan` checks everything else). One sweep over time
/// with the live buffers' memory ranges in an ordered map.
pub fn verify_live_ranges(buffers: &[BufferInfo], pools: &[PoolInfo], plan: &Plan) -> Result<(), Vec<String>> {
    let events = events(buffers).map_err(|e| vec![e.to_string()])?;
    let mut live: Vec<BTreeMap<u64, (u64, usize)>> = pools.iter().map(|_| BTreeMap::new()).collect();
    let mut errors = Vec::new();
    for (_, start, i) in events {
        let Some(a) = plan.allocations.get(i).filter(|a| a.pool < pools.len()) else {
            return Err(vec![format!("buffer '{}' has no allocation in an existing pool", buffers[i].name)]);
        };
        let map = &mut live[a.pool];
        let end = a.offset.saturating_add(buffers[i].size_bytes);
        if !start {
            map.remove(&a.offset);
            continue;
        }
        let before = map.range(..=a.offset).next_back().filter(|(_, (e, _))| *e > a.offset);
        let after = map.range(a.offset..).next().filter(|(s, _)| **s < end);
        for (_, &(_, j)) in before.into_iter().chain(after) {
            errors.push(format!(
                "buffers '{}' and '{}' are live at once and overlap in pool '{}'",
                buffers[j].name, buffers[i].name, pools[a.pool].name
            ));
        }
        map.insert(a.offset, (end, i));
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::verify_plan;

    fn buffer(name: &str, size: u64, range: (u64, u64), pools: &[&str]) -> BufferInfo {
        BufferInfo {
            name: name.into(),
            size_bytes: size,
            alignment: 64,
            conflicts: vec![],
            pool_candidates: pools.iter().map(|p| p.to_string()).collect(),
            live_range: Some(range),
        }
    }

    #[test]
    fn a_chain_reuses_memory_and_a_clique_stacks() {
        let pools = [PoolInfo::workspace("w", None)];
        let chain: Vec<BufferInfo> = (0..100).map(|i| buffer(&format!("c{i}"), 100, (i, i + 2), &["w"])).collect();
        let plan = plan_live_ranges(&chain, &pools).unwrap();
        verify_plan(&chain, &pools, &plan).unwrap();
        verify_live_ranges(&chain, &pools, &plan).unwrap();
        assert_eq!(plan.pool_sizes, [228], "two buffers live at a time, the second at offset 128");
        let clique: Vec<BufferInfo> = (0..50_000).map(|i| buffer(&format!("k{i}"), 64, (0, 10), &["w"])).collect();
        let plan = plan_live_ranges(&clique, &pools).unwrap();
        verify_live_ranges(&clique, &pools, &plan).unwrap();
        assert_eq!(plan.pool_sizes, [64 * 50_000], "stacked: the lower bound");
    }

    #[test]
    fn a_bounded_pool_spills_and_the_verifier_catches_overlaps() {
        let pools = [PoolInfo::workspace("fast", Some(256)), PoolInfo::workspace("slow", None)];
        let bufs: Vec<BufferInfo> = (0..6).map(|i| buffer(&format!("b{i}"), 128, (0, 4), &["fast", "slow"])).collect();
        let plan = plan_live_ranges(&bufs, &pools).unwrap();
        verify_plan(&bufs, &pools, &plan).unwrap();
        verify_live_ranges(&bufs, &pools, &plan).unwrap();
        assert_eq!(plan.pool_sizes, [256, 512]);
        let mut bad = plan.clone();
        bad.allocations[1] = bad.allocations[0].clone();
        assert!(verify_live_ranges(&bufs, &pools, &bad).is_err());
        let only_fast = [buffer("x", 300, (0, 1), &["fast"])];
        assert!(matches!(plan_live_ranges(&only_fast, &pools), Err(PlanError::NoPoolFits { .. })));
    }
}
