//! `NAME.json`: what a compiled object expects and how its memory is laid out — inputs and
//! outputs, pools, every planned buffer, every function's workspace size (seed 002) and the C
//! identifier of every name. The loader reads it back to call the object.

use std::collections::BTreeMap;

use heron_ir::DType;
use serde::{Deserialize, Serialize};

/// An input or output tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMeta {
    pub name: String,
    pub c_name: String,
    /// ONNX-style dtype name (`float32`, `int8`, ...).
    pub dtype: String,
    pub shape: Vec<usize>,
    pub size_elements: usize,
    pub size_bytes: usize,
    /// C element type in the header.
    pub c_type: String,
}

impl TensorMeta {
    pub fn dtype(&self) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == self.dtype)
    }
}

/// What a pool holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolRole {
    /// Scratch and activations, written by the model.
    Workspace,
    /// Constants (weights), read only.
    Parameter,
}

impl std::fmt::Display for PoolRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PoolRole::Workspace => "workspace",
            PoolRole::Parameter => "parameter",
        })
    }
}

/// Who provides a pool's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolSource {
    /// The caller passes it (`HeronWorkspaces_<name>` / `HeronParameters_<name>`).
    User,
    /// A static buffer inside the object (zeroed workspace in `.bss`, constants in `.rodata`).
    Embedded,
}

impl std::fmt::Display for PoolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PoolSource::User => "passed by the caller",
            PoolSource::Embedded => "inside the object",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetAccess {
    pub target: String,
    /// `rw` or `ro`.
    pub access: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolMeta {
    pub name: String,
    pub c_name: String,
    pub kind: PoolRole,
    pub source: PoolSource,
    pub size_bytes: u64,
    pub size_hint_bytes: Option<u64>,
    pub alignment: u64,
    pub targets: Vec<TargetAccess>,
    /// The blob holding a user-provided parameter pool's contents, next to the object.
    pub params_file: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferMeta {
    pub name: String,
    pub pool: String,
    pub offset: u64,
    pub size_bytes: u64,
    /// Half-open live ranges on the planner's timeline (one per call of the owning function).
    pub live_ranges: Vec<(u64, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionMeta {
    pub name: String,
    /// Scratch bytes with the function's own allocations sharing memory where their lives
    /// allow (seed 002's workspace-size query).
    pub workspace_bytes: u64,
    /// Scratch bytes with every allocation on its own.
    pub workspace_bytes_unshared: u64,
}

/// Original name to C identifier, per namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identifiers {
    pub model: BTreeMap<String, String>,
    pub tensors: BTreeMap<String, String>,
    pub pools: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub name: String,
    pub c_name: String,
    /// The exported function, `heron_<c_name>_run`.
    pub entry: String,
    /// The exported function that also checks buffer sizes, `heron_<c_name>_run_checked`.
    pub entry_checked: String,
    /// The exported function that takes a run context (threads), `heron_<c_name>_run_ctx`.
    #[serde(default)]
    pub entry_ctx: String,
    /// Both: `heron_<c_name>_run_checked_ctx` (what the loader calls).
    #[serde(default)]
    pub entry_checked_ctx: String,
    /// Routines the run context of `entry_ctx` must provide, in table order.
    #[serde(default)]
    pub routines: Vec<String>,
    /// Device slots the run context must provide.
    #[serde(default)]
    pub device_slots: usize,
    pub target_cpu: String,
    pub inputs: Vec<TensorMeta>,
    pub outputs: Vec<TensorMeta>,
    pub pools: Vec<PoolMeta>,
    pub buffers: Vec<BufferMeta>,
    pub functions: Vec<FunctionMeta>,
    /// Symbols the object needs from libc / libm.
    pub undefined_symbols: Vec<String>,
    pub identifiers: Identifiers,
}

impl Metadata {
    pub fn pools_of(&self, role: PoolRole) -> impl Iterator<Item = &PoolMeta> {
        self.pools.iter().filter(move |p| p.kind == role)
    }

    /// The pools of `role` the caller provides, in the order of the header's struct fields.
    pub fn user_pools(&self, role: PoolRole) -> impl Iterator<Item = &PoolMeta> {
        self.pools_of(role).filter(|p| p.source == PoolSource::User)
    }
}
