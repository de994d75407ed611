//! The planner's vocabulary, as in the USMP seed: buffers, pools, allocations, plans, budgets
//! and errors.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One buffer to place: an inter-operator tensor, operator scratch or a constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferInfo {
    pub name: String,
    pub size_bytes: u64,
    /// Required alignment of the buffer's offset: any positive number (offsets are multiples of
    /// it).
    pub alignment: u64,
    /// Indices of buffers that must not overlap this one (kept symmetric by [`normalize`]).
    pub conflicts: Vec<usize>,
    /// Pools this buffer may live in, most preferred first.
    pub pool_candidates: Vec<String>,
    /// Half-open live interval on the program timeline, when the conflicts come from lifetimes.
    /// Lets the planner use interval-specific (exact) algorithms and bounds.
    pub live_range: Option<(u64, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolKind {
    Workspace,
    Constant,
}

impl std::fmt::Display for PoolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PoolKind::Workspace => "workspace",
            PoolKind::Constant => "constants",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    #[serde(rename = "rw")]
    ReadWrite,
    #[serde(rename = "ro")]
    ReadOnly,
}

/// The target of loop-IR functions the target layer did not claim.
pub const DEFAULT_TARGET: &str = "cpu";

/// A memory pool buffers are placed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    pub name: String,
    /// Hard size limit; `None` is unbounded.
    pub size_hint_bytes: Option<u64>,
    /// Alignment of the pool's base address and of every buffer placed in it.
    pub alignment: u64,
    pub kind: PoolKind,
    /// Which targets (e.g. "cpu", "vta") access the pool, and how.
    pub targets: Vec<(String, Access)>,
}

impl PoolInfo {
    /// Whether `target` may access the pool: read-only, or read and write when `write`.
    pub fn reachable_by(&self, target: &str, write: bool) -> bool {
        self.targets.iter().any(|(t, a)| t == target && (!write || *a == Access::ReadWrite))
    }

    pub fn workspace(name: impl Into<String>, size_hint_bytes: Option<u64>) -> PoolInfo {
        PoolInfo {
            name: name.into(),
            size_hint_bytes,
            alignment: 64,
            kind: PoolKind::Workspace,
            targets: vec![(DEFAULT_TARGET.into(), Access::ReadWrite)],
        }
    }

    pub fn constant(name: impl Into<String>, size_hint_bytes: Option<u64>) -> PoolInfo {
        PoolInfo {
            name: name.into(),
            size_hint_bytes,
            alignment: 64,
            kind: PoolKind::Constant,
            targets: vec![(DEFAULT_TARGET.into(), Access::ReadOnly)],
        }
    }
}

/// Where one buffer went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAllocation {
    pub pool: usize,
    pub offset: u64,
}

/// A complete placement of every buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub algorithm: String,
    /// One allocation per buffer, in buffer order.
    pub allocations: Vec<PoolAllocation>,
    /// Per pool: the largest `offset + size` of its buffers (0 when empty).
    pub pool_sizes: Vec<u64>,
}

impl Plan {
    pub fn total_bytes(&self) -> u64 {
        self.pool_sizes.iter().sum()
    }
}

/// The largest pool Heron plans, in bytes: `isize::MAX`, the largest object Rust (and C's
/// `ptrdiff_t`) can address. No buffer may be larger, and the buffers that may share a pool and
/// could stack on each other must add up to no more (see [`crate::pools::check_sizes`]), so
/// offsets, ends and pool sizes never overflow `u64` in any algorithm.
pub const MAX_POOL_BYTES: u64 = isize::MAX as u64;

/// The largest buffer or pool alignment (2^62).
pub const MAX_ALIGNMENT: u64 = 1 << 62;

/// How much work planning may do: a count of work units — a placement of one buffer next to its
/// conflicts, a step of a graph sweep, a node of the exact search — and, only when asked for, a
/// wall-clock deadline.
///
/// Work units make planning a pure function of its input: the same problem and budget give the
/// same plan on every run, thread count and machine (the searches that run on several threads
/// split the budget into fixed shares before they start and combine their results in a fixed
/// order). A deadline ([`Budget::with_time_limit_ms`]) caps the time on top of that, at the cost
/// of reproducibility: where it cuts the search depends on the machine's speed and load.
#[derive(Clone, Debug)]
pub struct Budget {
    /// Units spent on this budget's counter, shared with the budgets [`share`](Self::share)d
    /// from it.
    spent: Arc<AtomicU64>,
    /// The counter value at which the budget is exhausted.
    limit: u64,
    deadline: Option<Instant>,
}

impl Budget {
    /// The work budget for planning a model (`heron compile`, `run`, the API): about half a
    /// second on a 2020s core, enough for 10,000 buffers to come within 5% of the lower bound.
    pub const DEFAULT_WORK: u64 = 50_000_000;

    /// The work budget of `heron plan --buffers`, where a hard problem is the point: about half a
    /// minute on a 2020s core (searches stop earlier when they reach the lower bound).
    pub const PLAN_WORK: u64 = 3_000_000_000;

    /// The default work budget for planning a model.
    pub fn default_limit() -> Budget {
        Budget::work(Budget::DEFAULT_WORK)
    }

    /// A budget of `units` work units and no deadline.
    pub fn work(units: u64) -> Budget {
        Budget { spent: Arc::new(AtomicU64::new(0)), limit: units, deadline: None }
    }

    /// `units` of work, and a deadline `time_limit_ms` from now when one is given.
    pub fn new(units: u64, time_limit_ms: Option<u64>) -> Budget {
        let budget = Budget::work(units);
        match time_limit_ms {
            Some(ms) => budget.with_time_limit_ms(ms),
            None => budget,
        }
    }

    /// No limit to speak of.
    pub fn unlimited() -> Budget {
        Budget::work(u64::MAX)
    }

    /// This budget, also ending `ms` milliseconds from now (limits beyond a century are a
    /// century: the clock's range may end before `u64::MAX` milliseconds). Not reproducible.
    pub fn with_time_limit_ms(self, ms: u64) -> Budget {
        const CENTURY_MS: u64 = 100 * 365 * 24 * 3600 * 1000;
        let end = Instant::now() + Duration::from_millis(ms.min(CENTURY_MS));
        Budget { deadline: Some(self.deadline.map_or(end, |d| d.min(end))), ..self }
    }

    /// Records `units` of work done.
    pub fn charge(&self, units: u64) {
        self.spent.fetch_add(units, Ordering::Relaxed);
    }

    /// Work units spent on this budget's counter.
    pub fn spent(&self) -> u64 {
        self.spent.load(Ordering::Relaxed)
    }

    /// Work units left.
    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.spent())
    }

    /// Whether the work is spent or the deadline passed.
    pub fn expired(&self) -> bool {
        self.remaining() == 0 || self.past_deadline()
    }

    /// Whether a deadline was given and has passed.
    pub fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// A budget for `fraction` of the remaining work, spent on the same counter (for work done
    /// on this thread).
    pub fn share(&self, fraction: f64) -> Budget {
        let units = (self.remaining() as f64 * fraction.clamp(0.0, 1.0)) as u64;
        Budget { spent: Arc::clone(&self.spent), limit: self.spent().saturating_add(units), deadline: self.deadline }
    }

    /// A budget for `fraction` of the remaining work on a counter of its own, for work done on
    /// another thread: its share is fixed before it starts, whatever the other threads spend.
    /// Charge what it spent back with [`absorb`](Self::absorb) once it is done.
    pub fn detached(&self, fraction: f64) -> Budget {
        let units = (self.remaining() as f64 * fraction.clamp(0.0, 1.0)) as u64;
        Budget { spent: Arc::new(AtomicU64::new(0)), limit: units, deadline: self.deadline }
    }

    /// Charges the work a [`detached`](Self::detached) budget spent.
    pub fn absorb(&self, detached: &Budget) {
        self.charge(detached.spent());
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("buffer '{buffer}' ({size} bytes) fits none of its candidate pools: {pools}")]
    NoPoolFits { buffer: String, size: u64, pools: String },
    #[error("buffer '{buffer}' names unknown pool '{pool}'")]
    UnknownPool { buffer: String, pool: String },
    #[error("buffer '{buffer}' ({size} bytes) is too large: {why}")]
    TooLarge { buffer: String, size: u64, why: String },
    #[error("buffer '{buffer}' has no candidate pool")]
    NoCandidates { buffer: String },
    #[error(
        "buffer '{buffer}' is {access} by target(s) {targets}, but none of its candidate pools ({pools}) lets them all do that"
    )]
    NoPoolForTargets { buffer: String, access: &'static str, targets: String, pools: String },
    #[error("buffer '{0}' is defined twice")]
    DuplicateBuffer(String),
    #[error("pool '{0}' is defined twice")]
    DuplicatePool(String),
    #[error("buffer '{buffer}' conflicts with unknown buffer '{other}'")]
    UnknownConflict { buffer: String, other: String },
    #[error("buffer '{buffer}': {reason}")]
    BadBuffer { buffer: String, reason: String },
    #[error("pool '{pool}': {reason}")]
    BadPool { pool: String, reason: String },
    #[error("unknown planning algorithm '{name}' (known: {known})")]
    UnknownAlgorithm { name: String, known: String },
    #[error("buffer '{0}' has a size only known at run time; dynamic sizes are not supported")]
    DynamicSize(String),
    #[error("invalid planning problem JSON: {0}")]
    Json(String),
    #[error("the plan failed verification: {0}")]
    Invalid(String),
}

/// Checks sizes and alignments and makes every conflict symmetric (a conflict listed on one
/// side counts both ways); removes self-conflicts and duplicates.
pub fn normalize(buffers: &mut [BufferInfo]) -> Result<(), PlanError> {
    if !check_buffers(buffers)? {
        symmetrize(buffers);
    }
    Ok(())
}

/// `buffers` normalized (see [`normalize`]), copied only when they are not already.
pub fn normalized(buffers: &[BufferInfo]) -> Result<Cow<'_, [BufferInfo]>, PlanError> {
    if check_buffers(buffers)? {
        return Ok(Cow::Borrowed(buffers));
    }
    let mut owned = buffers.to_vec();
    symmetrize(&mut owned);
    Ok(Cow::Owned(owned))
}

/// Checks sizes, alignments, live ranges and conflict indices; returns whether the conflicts are
/// already normalized: ascending, without self-conflicts or duplicates, and symmetric.
fn check_buffers(buffers: &[BufferInfo]) -> Result<bool, PlanError> {
    let n = buffers.len();
    let mut normalized = true;
    // Per buffer: how many of its lower conflicts the higher lists matched so far.
    let mut matched = vec![0usize; n];
    for (i, b) in buffers.iter().enumerate() {
        if b.size_bytes == 0 {
            return Err(PlanError::BadBuffer { buffer: b.name.clone(), reason: "size must be positive".into() });
        }
        if b.size_bytes > MAX_POOL_BYTES {
            return Err(PlanError::TooLarge {
                buffer: b.name.clone(),
                size: b.size_bytes,
                why: format!("larger than the largest pool Heron plans ({MAX_POOL_BYTES} bytes, isize::MAX)"),
            });
        }
        check_alignment(b.alignment).map_err(|reason| PlanError::BadBuffer { buffer: b.name.clone(), reason })?;
        if let Some((lo, hi)) = b.live_range
            && lo >= hi
        {
            return Err(PlanError::BadBuffer {
                buffer: b.name.clone(),
                reason: format!("empty live range [{lo}, {hi})"),
            });
        }
        if let Some(&j) = b.conflicts.iter().find(|&&j| j >= n) {
            return Err(PlanError::UnknownConflict { buffer: b.name.clone(), other: format!("#{j}") });
        }
        // Symmetric when, taking buffers in order, every higher conflict `j` of `i` finds `i`
        // next among `j`'s lower conflicts (ascending lists meet them in this order), and each
        // buffer, when reached, had all its lower conflicts found.
        normalized = normalized && b.conflicts.is_sorted_by(|x, y| x < y);
        if normalized {
            let lower = b.conflicts.partition_point(|&j| j < i);
            normalized = matched[i] == lower
                && b.conflicts.get(lower) != Some(&i)
                && b.conflicts[lower..].iter().all(|&j| {
                    let found = buffers[j].conflicts.get(matched[j]) == Some(&i);
                    matched[j] += 1;
                    found
                });
        }
    }
    Ok(normalized)
}

/// Makes valid conflicts symmetric, ascending and free of self-conflicts and duplicates.
fn symmetrize(buffers: &mut [BufferInfo]) {
    let n = buffers.len();
    let mut degree = vec![0usize; n];
    for (i, b) in buffers.iter().enumerate() {
        for &j in b.conflicts.iter().filter(|&&j| j != i) {
            degree[i] += 1;
            degree[j] += 1;
        }
    }
    // Sized up front: a problem may list millions of conflicts.
    let mut adj: Vec<Vec<usize>> = degree.into_iter().map(Vec::with_capacity).collect();
    for (i, b) in buffers.iter().enumerate() {
        for &j in b.conflicts.iter().filter(|&&j| j != i) {
            adj[i].push(j);
            adj[j].push(i);
        }
    }
    for (b, mut a) in buffers.iter_mut().zip(adj) {
        a.sort_unstable();
        a.dedup();
        b.conflicts = a;
    }
}

/// Checks a buffer's alignment: any positive number up to [`MAX_ALIGNMENT`] (offsets are
/// multiples of it, whether or not it is a power of two).
pub fn check_alignment(alignment: u64) -> Result<(), String> {
    if alignment == 0 {
        Err("alignment must be positive".into())
    } else if alignment > MAX_ALIGNMENT {
        Err(format!("alignment {alignment} is too large (at most 2^62 = {MAX_ALIGNMENT})"))
    } else {
        Ok(())
    }
}

/// The least common multiple of two alignments, if it is at most [`MAX_ALIGNMENT`].
pub fn common_multiple(a: u64, b: u64) -> Option<u64> {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x.max(1)).checked_mul(b).filter(|&m| m <= MAX_ALIGNMENT)
}

/// Checks a pool's alignment, the alignment of its base address: a power of two (what memory
/// allocators and linkers provide) up to [`MAX_ALIGNMENT`].
pub fn check_pool_alignment(alignment: u64) -> Result<(), String> {
    if !alignment.is_power_of_two() {
        Err(format!("alignment {alignment} is not a power of two (a pool's base address needs one)"))
    } else {
        check_alignment(alignment)
    }
}
