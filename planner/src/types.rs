//! The planner's vocabulary, as in the USMP seed: buffers, pools, allocations, plans, budgets
//! and errors.

use std::time::{Duration, Instant};

/// One buffer to place: an inter-operator tensor, operator scratch or a constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferInfo {
    pub name: String,
    pub size_bytes: u64,
    /// Required alignment of the buffer's offset (a power of two).
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    #[serde(rename = "rw")]
    ReadWrite,
    #[serde(rename = "ro")]
    ReadOnly,
}

/// A memory pool buffers are placed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    pub name: String,
    /// Hard size limit; `None` is unbounded.
    pub size_hint_bytes: Option<u64>,
    /// Alignment of the pool's base address.
    pub alignment: u64,
    pub kind: PoolKind,
    /// Which targets (e.g. "cpu", "vta") access the pool, and how.
    pub targets: Vec<(String, Access)>,
}

impl PoolInfo {
    pub fn workspace(name: impl Into<String>, size_hint_bytes: Option<u64>) -> PoolInfo {
        PoolInfo {
            name: name.into(),
            size_hint_bytes,
            alignment: 64,
            kind: PoolKind::Workspace,
            targets: vec![("cpu".into(), Access::ReadWrite)],
        }
    }

    pub fn constant(name: impl Into<String>, size_hint_bytes: Option<u64>) -> PoolInfo {
        PoolInfo {
            name: name.into(),
            size_hint_bytes,
            alignment: 64,
            kind: PoolKind::Constant,
            targets: vec![("cpu".into(), Access::ReadOnly)],
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

/// How long planning may take.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub deadline: Instant,
}

impl Budget {
    /// The planning time limit when none is given: small enough for interactive compiles,
    /// enough for 10,000 buffers to come within 5% of the lower bound.
    pub const DEFAULT_MILLIS: u64 = 500;

    pub fn default_limit() -> Budget {
        Budget::millis(Budget::DEFAULT_MILLIS)
    }

    pub fn millis(ms: u64) -> Budget {
        Budget { deadline: Instant::now() + Duration::from_millis(ms) }
    }

    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// A budget ending after `fraction` of the remaining time.
    pub fn share(&self, fraction: f64) -> Budget {
        Budget { deadline: Instant::now() + self.remaining().mul_f64(fraction.clamp(0.0, 1.0)) }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("buffer '{buffer}' ({size} bytes) fits none of its candidate pools: {pools}")]
    NoPoolFits { buffer: String, size: u64, pools: String },
    #[error("buffer '{buffer}' names unknown pool '{pool}'")]
    UnknownPool { buffer: String, pool: String },
    #[error("buffer '{buffer}' has no candidate pool")]
    NoCandidates { buffer: String },
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
    #[error("the plan failed verification: {0}")]
    Invalid(String),
}

/// Checks sizes and alignments and makes every conflict symmetric (a conflict listed on one
/// side counts both ways); removes self-conflicts and duplicates.
pub fn normalize(buffers: &mut [BufferInfo]) -> Result<(), PlanError> {
    for b in buffers.iter() {
        if b.size_bytes == 0 {
            return Err(PlanError::BadBuffer { buffer: b.name.clone(), reason: "size must be positive".into() });
        }
        if b.alignment == 0 || !b.alignment.is_power_of_two() {
            return Err(PlanError::BadBuffer {
                buffer: b.name.clone(),
                reason: format!("alignment {} is not a power of two", b.alignment),
            });
        }
        if let Some((lo, hi)) = b.live_range
            && lo >= hi
        {
            return Err(PlanError::BadBuffer {
                buffer: b.name.clone(),
                reason: format!("empty live range [{lo}, {hi})"),
            });
        }
    }
    let n = buffers.len();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, b) in buffers.iter().enumerate() {
        for &j in &b.conflicts {
            if j >= n {
                return Err(PlanError::UnknownConflict { buffer: b.name.clone(), other: format!("#{j}") });
            }
            if j != i {
                adj[i].push(j);
                adj[j].push(i);
            }
        }
    }
    for (b, mut a) in buffers.iter_mut().zip(adj) {
        a.sort_unstable();
        a.dedup();
        b.conflicts = a;
    }
    Ok(())
}
