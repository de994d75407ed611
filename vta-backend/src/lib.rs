//! heron-vta: the VTA accelerator back end, part 1 — a bit-exact model of VTA's ISA and
//! functional simulator, its device-driver API and its runtime API.
//!
//! [`config`] holds the hardware configuration and what derives from it; [`isa`] encodes,
//! decodes and disassembles instructions and micro-ops; [`memory`] is the simulator's DRAM
//! (physical addresses as VTA's simulator hands them out); [`sim`] executes streams on a
//! simulated core with the dependency-token queues and profiling counters. [`driver`] is the
//! HAL-style device/memory/run trait, implemented by the simulator and by drivers loaded from
//! other shared libraries; [`runtime`] builds instruction streams exactly like VTA's runtime
//! (command queue, uop kernels, dependency flags, synchronize); [`capi`] exports both APIs with
//! VTA's C names (`include/heron_vta.h`). [`region`] runs the compiler's offloaded regions: a
//! program format and the session generated code calls through its run context.

pub mod capi;
pub mod config;
pub mod driver;
mod handles;
pub mod isa;
pub mod memory;
pub mod program;
pub mod region;
pub mod runtime;
pub mod sim;

pub use config::{HwConfig, MemId};
pub use isa::{AluOp, DepFlags, Insn, Isa, Uop};

/// Everything that can go wrong, from encoding to running a stream.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VtaError {
    #[error("hardware configuration: {0}")]
    Config(String),
    #[error("cannot encode: {0}")]
    Encode(String),
    #[error("undefined opcode {0}")]
    BadOpcode(u64),
    #[error("undefined ALU opcode {0}")]
    BadAluOpcode(u64),
    #[error("{insn} with memory type {id}, which it cannot use")]
    BadMemoryType { insn: &'static str, id: u8 },
    #[error("{what} SRAM index {index} is out of range (depth {depth})")]
    SramOutOfRange { what: &'static str, index: u64, depth: usize },
    #[error("micro-op range [{bgn}, {end}) is out of range (uop depth {depth})")]
    UopOutOfRange { bgn: u32, end: u32, depth: usize },
    #[error("DRAM access of {len} bytes at physical address {phys:#x} is outside every allocation")]
    DramOutOfRange { phys: u64, len: usize },
    #[error("instruction {index}: {error}")]
    AtInstruction { index: usize, error: Box<VtaError> },
    #[error("deadlock: no module can proceed (waiting: {stuck}; tokens {tokens})")]
    Deadlock { stuck: String, tokens: String },
    /// The run needed more cycles than its limit (`wait_cycles` or the work limit; the unit is
    /// described in [`sim`]). Nothing of the instruction that would exceed it was executed.
    #[error("timed out after {spent} cycles: the next step needs {needed} more, over the limit of {limit}")]
    Timeout { spent: u64, limit: u64, needed: u64 },
    #[error("the stream ended without executing FINISH")]
    NoFinish,
    #[error("malformed stream: {0}")]
    Stream(String),
    #[error("out of simulated DRAM allocating {0} bytes")]
    OutOfMemory(usize),
    #[error("the host cannot allocate {0} bytes")]
    HostMemory(usize),
    #[error("{kind} handle {handle:#x} {problem}")]
    BadHandle { kind: &'static str, handle: usize, problem: &'static str },
    #[error("{0:#x} is not a buffer allocated by this driver")]
    UnknownBuffer(usize),
    #[error("unknown device handle")]
    UnknownDevice,
    #[error("{driver}: VTADeviceRun timed out (wait_cycles {wait})")]
    DriverTimeout { driver: String, wait: u32 },
    #[error("driver: {0}")]
    Driver(String),
    #[error("runtime: {0}")]
    Runtime(String),
}

impl VtaError {
    /// Whether a run stopped on its cycle limit (here or in a loaded driver).
    pub fn is_timeout(&self) -> bool {
        match self {
            VtaError::Timeout { .. } | VtaError::DriverTimeout { .. } => true,
            VtaError::AtInstruction { error, .. } => error.is_timeout(),
            _ => false,
        }
    }
}
