//! The CPU target: the first [`Target`]. With kernels on, it first replaces the contraction
//! nests a precompiled kernel computes with kernel calls ([`crate::kernels`]). It picks physical layouts for the CPU kernels and
//! reshapes integer dot products for VNNI ([`crate::schedule::choose_layouts`]), runs a
//! channel block's lanes innermost in elementwise functions storing blocked tensors
//! ([`crate::schedule::block_lanes_innermost`]), then marks loops vectorized and unrolled
//! ([`crate::schedule::schedule`]), splits operators into
//! one function per loop nest ([`crate::outline`]) and marks one loop of each parallel
//! ([`crate::schedule::mark_parallel`]), and claims every function no
//! earlier target took. The code generator emits these decisions; it does not make them.

use heron_ir::loop_ir::Module;
use heron_ir::loop_ir::target::{Target, TargetError};

use crate::kernels::{KernelConfig, use_kernels};
use crate::outline::split_loop_nests;
use crate::schedule::{block_lanes_innermost, choose_layouts, mark_parallel, schedule};

/// The host CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTarget {
    /// Call precompiled kernels (`None`: generated code only).
    pub kernels: Option<KernelConfig>,
}

impl CpuTarget {
    pub const NAME: &'static str = "cpu";
}

impl Target for CpuTarget {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn apply(&self, module: &mut Module) -> Result<(), TargetError> {
        if let Some(config) = self.kernels {
            use_kernels(module, config);
        }
        choose_layouts(module);
        block_lanes_innermost(module);
        schedule(module);
        split_loop_nests(module);
        mark_parallel(module);
        for f in module.funcs.iter_mut().filter(|f| f.target.is_none()) {
            f.target = Some(Self::NAME.to_string());
        }
        Ok(())
    }
}
