//! The JSON planning interface (`heron plan --buffers FILE.json`): a test handle anyone can feed
//! planning problems through.
//!
//! Input: `{"pools": [{"name", "size_hint_bytes": N|null, ...}], "buffers": [{"name",
//! "size_bytes", "alignment", "conflicts": [names], "pool_candidates": [names]}]}`. Optional:
//! a pool's `alignment`, `kind` ("workspace"|"constant") and `targets` ({"cpu": "rw"}); a
//! buffer's `alignment` (default 1), `conflicts` and `live_range` ([start, end), half-open),
//! which lets interval algorithms run when the conflicts are exactly the overlapping lifetimes.
//! Numbers are whole counts (`size_bytes` at most [`crate::MAX_POOL_BYTES`], alignments any
//! positive number up to 2^62, a pool's a power of two); anything else is an error naming the field, as are unknown fields,
//! unknown pools or buffers, duplicate names and a problem without buffers.
//!
//! Output: `{"algorithm", "pool_sizes": {pool: bytes}, "allocations": [{"buffer", "pool",
//! "offset"}], "lower_bound_bytes", "pool_lower_bounds_bytes": {pool: bytes}}`: the bound on
//! the total of the pool sizes, and per pool the bound for the buffers the plan put there.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Number;
use serde_json::value::RawValue;

use crate::algorithms::algorithm;
use crate::bound::{lower_bound, total_lower_bound};
use crate::problem::PoolProblem;
use crate::types::{Access, Budget, BufferInfo, Plan, PlanError, PoolInfo, PoolKind, normalize};
use crate::verify::verify_plan;

// Names borrow from the input text where they can, and conflict lists are kept as text until
// the names are known, then read straight into indices: a problem may list millions of
// conflicts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProblemJson<'a> {
    #[serde(borrow)]
    pools: Vec<PoolJson<'a>>,
    #[serde(borrow)]
    buffers: Vec<BufferJson<'a>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolJson<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    size_hint_bytes: Option<Number>,
    #[serde(default)]
    alignment: Option<Number>,
    #[serde(default)]
    kind: Option<PoolKind>,
    #[serde(default)]
    targets: Option<HashMap<String, Access>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BufferJson<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    size_bytes: Number,
    #[serde(default)]
    alignment: Option<Number>,
    #[serde(default, borrow)]
    conflicts: Option<&'a RawValue>,
    #[serde(borrow)]
    pool_candidates: Vec<Cow<'a, str>>,
    #[serde(default)]
    live_range: Option<(Number, Number)>,
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
    /// A proven lower bound on the total of the pool sizes (see [`total_lower_bound`]).
    pub lower_bound_bytes: u64,
    /// Per pool, a proven lower bound on its size given the buffers the plan put there.
    pub pool_lower_bounds_bytes: serde_json::Map<String, serde_json::Value>,
}

/// The work budget of the lower bounds `plan_json` reports.
pub const BOUND_WORK: u64 = 20_000_000;

/// A JSON number as a whole count of at most `u64::MAX` (`1e3` is 1000), or why it is not one.
fn whole(n: &Number, field: &str) -> Result<u64, String> {
    // 2^64: every float below it converts exactly.
    const LIMIT: f64 = 18_446_744_073_709_551_616.0;
    let float = n.as_f64().unwrap_or(f64::NAN);
    match n.as_u64() {
        Some(v) => Ok(v),
        None if float < 0.0 => Err(format!("{field} {n} is negative")),
        None if float.fract() != 0.0 => Err(format!("{field} {n} is not a whole number")),
        None if float < LIMIT => Ok(float as u64),
        None => Err(format!("{field} {n} is too large (more than 2^64 - 1)")),
    }
}

/// A positive alignment (checked against its maximum later, with the sizes; a pool's must also
/// be a power of two).
fn alignment(n: Option<&Number>) -> Result<u64, String> {
    let a = n.map_or(Ok(1), |n| whole(n, "alignment"))?;
    if a == 0 { Err("alignment must be positive".into()) } else { Ok(a) }
}

/// Reads a conflict list into buffer indices; `Err` holds the first unknown name. The names are
/// read first (into `names`, reused from list to list), then looked up in one tight loop, where
/// the independent lookups overlap their cache misses.
struct ConflictList<'i, 'n, 's, 'de> {
    index: &'i HashMap<&'n str, usize>,
    names: &'s mut Vec<Cow<'de, str>>,
}

impl<'de> DeserializeSeed<'de> for ConflictList<'_, '_, '_, 'de> {
    type Value = Result<Vec<usize>, String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ConflictList<'_, '_, '_, 'de> {
    type Value = Result<Vec<usize>, String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of buffer names")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut list: A) -> Result<Self::Value, A::Error> {
        self.names.clear();
        while let Some(name) = list.next_element()? {
            self.names.push(name);
        }
        let index = self.index;
        let found: Option<Vec<usize>> = self.names.iter().map(|n| index.get(n.as_ref()).copied()).collect();
        Ok(found.ok_or_else(|| {
            let unknown = self.names.iter().find(|n| !index.contains_key(n.as_ref()));
            unknown.expect("a name was not found").to_string()
        }))
    }
}

/// Parses a planning problem and checks it: every error names what is wrong.
pub fn parse_problem(text: &str) -> Result<(Vec<BufferInfo>, Vec<PoolInfo>), PlanError> {
    let raw: ProblemJson<'_> = serde_json::from_str(text).map_err(|e| PlanError::Json(e.to_string()))?;
    let mut pools = Vec::with_capacity(raw.pools.len());
    for p in raw.pools {
        let bad = |reason: String| PlanError::BadPool { pool: p.name.to_string(), reason };
        let size_hint_bytes =
            p.size_hint_bytes.as_ref().map(|n| whole(n, "size_hint_bytes")).transpose().map_err(bad)?;
        let alignment = alignment(p.alignment.as_ref()).map_err(bad)?;
        let kind = p.kind.unwrap_or(PoolKind::Workspace);
        let default_access = if kind == PoolKind::Constant { Access::ReadOnly } else { Access::ReadWrite };
        let mut targets: Vec<(String, Access)> =
            p.targets.map(|t| t.into_iter().collect()).unwrap_or_else(|| vec![("cpu".into(), default_access)]);
        targets.sort();
        pools.push(PoolInfo { name: p.name.into_owned(), size_hint_bytes, alignment, kind, targets });
    }
    // The names, copied next to each other: looking up millions of conflicts then compares
    // against a small, cached region instead of all over the input text.
    let arena: String = raw.buffers.iter().map(|b| b.name.as_ref()).collect();
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(raw.buffers.len());
    let mut at = 0;
    for (i, b) in raw.buffers.iter().enumerate() {
        let name = &arena[at..at + b.name.len()];
        at += b.name.len();
        if index.insert(name, i).is_some() {
            return Err(PlanError::DuplicateBuffer(b.name.to_string()));
        }
    }
    let mut buffers = Vec::with_capacity(raw.buffers.len());
    let mut names = Vec::new();
    for b in &raw.buffers {
        let bad = |reason: String| PlanError::BadBuffer { buffer: b.name.to_string(), reason };
        let size_bytes = whole(&b.size_bytes, "size_bytes").map_err(bad)?;
        let alignment = alignment(b.alignment.as_ref()).map_err(bad)?;
        let live_range = match &b.live_range {
            Some((lo, hi)) => {
                Some((whole(lo, "live_range start").map_err(bad)?, whole(hi, "live_range end").map_err(bad)?))
            }
            None => None,
        };
        let conflicts = match b.conflicts {
            Some(list) => {
                let mut de = serde_json::Deserializer::from_str(list.get());
                match (ConflictList { index: &index, names: &mut names }).deserialize(&mut de) {
                    Ok(Ok(conflicts)) => conflicts,
                    Ok(Err(other)) => return Err(PlanError::UnknownConflict { buffer: b.name.to_string(), other }),
                    // The text is valid JSON (it was read once): the list has the wrong type. The
                    // error's position is inside the list, so it is left out.
                    Err(e) => {
                        let e = e.to_string();
                        let reason =
                            format!("conflicts: {}", e.rsplit_once(" at line ").map_or(e.as_str(), |(m, _)| m));
                        return Err(bad(reason));
                    }
                }
            }
            None => Vec::new(),
        };
        buffers.push(BufferInfo {
            name: b.name.to_string(),
            size_bytes,
            alignment,
            conflicts,
            pool_candidates: b.pool_candidates.iter().map(|c| c.to_string()).collect(),
            live_range,
        });
    }
    normalize(&mut buffers)?;
    let candidates = crate::pools::resolve_candidates(&buffers, &pools)?;
    crate::pools::check_sizes(&buffers, &pools, &candidates)?;
    if buffers.is_empty() {
        return Err(PlanError::Json("the problem has no buffers: list at least one under \"buffers\"".into()));
    }
    Ok((buffers, pools))
}

/// Plans a JSON problem with `algorithm_name` within `budget`, verifies the plan and renders the
/// JSON answer with the lower bounds (computed within a fixed work budget of their own,
/// [`BOUND_WORK`]).
pub fn plan_json(text: &str, algorithm_name: &str, budget: &Budget) -> Result<PlanJson, PlanError> {
    let alg = algorithm(algorithm_name)?;
    let (buffers, pools) = parse_problem(text)?;
    let plan: Plan = alg.plan(&buffers, &pools, budget)?;
    verify_plan(&buffers, &pools, &plan).map_err(|e| PlanError::Invalid(e.join("; ")))?;
    let bounds = Budget::work(BOUND_WORK);
    let lower_bound_bytes = total_lower_bound(&buffers, &pools, &bounds.share(0.5))?;
    let mut pool_lower_bounds_bytes = serde_json::Map::new();
    for (p, pool) in pools.iter().enumerate() {
        let members: Vec<usize> = (0..buffers.len()).filter(|&i| plan.allocations[i].pool == p).collect();
        let bound = lower_bound(&PoolProblem::with_given_lifetimes(&buffers, &members, None), &bounds);
        pool_lower_bounds_bytes.insert(pool.name.clone(), bound.into());
    }
    let mut pool_sizes = serde_json::Map::new();
    for (p, size) in pools.iter().zip(&plan.pool_sizes) {
        pool_sizes.insert(p.name.clone(), (*size).into());
    }
    let allocations = buffers
        .iter()
        .zip(&plan.allocations)
        .map(|(b, a)| AllocationJson { buffer: b.name.clone(), pool: pools[a.pool].name.clone(), offset: a.offset })
        .collect();
    Ok(PlanJson { algorithm: plan.algorithm, pool_sizes, allocations, lower_bound_bytes, pool_lower_bounds_bytes })
}
