//! heron-vta-compiler: offloading a model's int8 regions to VTA.
//!
//! [`partition`] splits an integer graph (`heron_ir::passes::integer_form`) into VTA regions
//! and CPU operators, with a reason for each operator left on the CPU; [`layout`] derives the
//! packed layouts (index maps) from the hardware configuration; [`conv`] and [`eltwise`] choose
//! tilings that provably fit the SRAMs and emit each region's program ([`program`] holds the
//! builder and the requantization's ALU steps); [`target`] is the pipeline's VTA target, which
//! puts the regions into the loop IR as calls of the `heron_vta_region` routine
//! (`heron_vta::region`).

pub mod conv;
pub mod eltwise;
pub mod layout;
pub mod partition;
mod program;
pub mod target;

pub use partition::{CpuOp, Partition, Region, RegionKind, partition};
pub use target::VtaTarget;

/// Why a region cannot be compiled for VTA.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    #[error("tiling: {0}")]
    Tiling(String),
    #[error(transparent)]
    Vta(#[from] heron_vta::VtaError),
}
