//! The JSON planning interface (`heron plan --buffers FILE.json`): a test handle anyone can feed
//! planning problems through.
//!
//! Input: `{"pools": [{"name", "size_hint_bytes": N|null, ...}], "buffers": [{"name",
//! "size_bytes", "alignment", "conflicts": [names], "pool_candidates": [names]}]}`. Optional:
//! a pool's `alignment`, `kind` ("workspace"|"constant") and `targets` ({"cpu": "rw"}); a
//! buffer's `live_range` ([start, end), half-open), which lets interval algorithms run when the
//! conflicts are exactly the overlapping lifetimes.
//!
//! Output: `{"algorithm", "pool_sizes": {pool: bytes}, "allocations": [{"buffer", "pool",
//! "offset"}], "lower_bound_bytes"}`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::algorithms::algorithm;
use crate::bound::lower_bound;
use crate::problem::PoolProblem;
use crate::types::{Access, Budget, BufferInfo, Plan, PlanError, PoolInfo, PoolKind, normalize};
use crate::verify::verify_plan;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProblemJson {
    pools: Vec<PoolJson>,
    buffers: Vec<BufferJson>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolJson {
    name: String,
    #[serde(default)]
    size_hint_bytes: Option<i64>,
    #[serde(default)]
    alignment: Option<i64>,
    #[serde(default)]
    kind: Option<PoolKind>,
    #[serde(default)]
    targets: Option<HashMap<String, Access>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BufferJson {
    name: String,
    size_bytes: i64,
    #[serde(default = "default_alignment")]
    alignment: i64,
    #[serde(default)]
    conflicts: Vec<String>,
    pool_candidates: Vec<String>,
    #[serde(default)]
    live_range: Option<(u64, u64)>,
}

fn default_alignment() -> i64 {
    1
}

#[derive(Debug, Serialize)]
pub struct AllocationJson {
    pub buffer: String,
    pub pool: String,
    pub offset: u64,
}

#[derive(Debug, Serialize)]
pub struct PlanJson {
    pub algorithm: String,
    pub pool_sizes: serde_json::Map<String, serde_json::Value>,
    pub allocations: Vec<AllocationJson>,
    pub lower_bound_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum JsonPlanError {
    #[error("invalid planning problem JSON: {0}")]
    Json(String),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("the plan failed verification: {0}")]
    Verify(String),
}

/// Parses a planning problem.
pub fn parse_problem(text: &str) -> Result<(Vec<BufferInfo>, Vec<PoolInfo>), JsonPlanError> {
    let raw: ProblemJson = serde_json::from_str(text).map_err(|e| JsonPlanError::Json(e.to_string()))?;
    let mut pools = Vec::with_capacity(raw.pools.len());
    for p in raw.pools {
        let bad = |reason: String| PlanError::BadPool { pool: p.name.clone(), reason };
        let size_hint_bytes = match p.size_hint_bytes {
            Some(n) if n < 0 => return Err(bad(format!("negative size hint {n}")).into()),
            n => n.map(|n| n as u64),
        };
        let alignment = match p.alignment {
            Some(a) if a <= 0 || !(a as u64).is_power_of_two() => {
                return Err(bad(format!("alignment {a} is not a power of two")).into());
            }
            Some(a) => a as u64,
            None => 1,
        };
        let kind = p.kind.unwrap_or(PoolKind::Workspace);
        let default_access = if kind == PoolKind::Constant { Access::ReadOnly } else { Access::ReadWrite };
        let mut targets: Vec<(String, Access)> =
            p.targets.map(|t| t.into_iter().collect()).unwrap_or_else(|| vec![("cpu".into(), default_access)]);
        targets.sort();
        pools.push(PoolInfo { name: p.name, size_hint_bytes, alignment, kind, targets });
    }
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, b) in raw.buffers.iter().enumerate() {
        if index.insert(b.name.clone(), i).is_some() {
            return Err(PlanError::DuplicateBuffer(b.name.clone()).into());
        }
    }
    let mut buffers = Vec::with_capacity(raw.buffers.len());
    for b in raw.buffers {
        let bad = |reason: String| PlanError::BadBuffer { buffer: b.name.clone(), reason };
        if b.size_bytes <= 0 {
            return Err(bad(format!("size {} must be positive", b.size_bytes)).into());
        }
        if b.alignment <= 0 || !(b.alignment as u64).is_power_of_two() {
            return Err(bad(format!("alignment {} is not a power of two", b.alignment)).into());
        }
        let conflicts = b
            .conflicts
            .iter()
            .map(|c| {
                index
                    .get(c)
                    .copied()
                    .ok_or_else(|| PlanError::UnknownConflict { buffer: b.name.clone(), other: c.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        buffers.push(BufferInfo {
            name: b.name,
            size_bytes: b.size_bytes as u64,
            alignment: b.alignment as u64,
            conflicts,
            pool_candidates: b.pool_candidates,
            live_range: b.live_range,
        });
    }
    normalize(&mut buffers)?;
    crate::pools::resolve_candidates(&buffers, &pools)?;
    Ok((buffers, pools))
}

/// Plans a JSON problem with `algorithm_name` within `time_limit_ms`, verifies the plan and
/// renders the JSON answer.
pub fn plan_json(text: &str, algorithm_name: &str, time_limit_ms: u64) -> Result<PlanJson, JsonPlanError> {
    let (buffers, pools) = parse_problem(text)?;
    let alg = algorithm(algorithm_name)?;
    let budget = Budget::millis(time_limit_ms);
    let plan: Plan = alg.plan(&buffers, &pools, &budget)?;
    verify_plan(&buffers, &pools, &plan).map_err(|e| JsonPlanError::Verify(e.join("; ")))?;
    let all: Vec<usize> = (0..buffers.len()).collect();
    let lower_bound_bytes =
        lower_bound(&PoolProblem::from_buffers(&buffers, &all, None), &Budget::millis(time_limit_ms.min(200)));
    let mut pool_sizes = serde_json::Map::new();
    for (p, size) in pools.iter().zip(&plan.pool_sizes) {
        pool_sizes.insert(p.name.clone(), (*size).into());
    }
    let allocations = buffers
        .iter()
        .zip(&plan.allocations)
        .map(|(b, a)| AllocationJson { buffer: b.name.clone(), pool: pools[a.pool].name.clone(), offset: a.offset })
        .collect();
    Ok(PlanJson { algorithm: plan.algorithm, pool_sizes, allocations, lower_bound_bytes })
}
