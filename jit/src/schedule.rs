//! Loop schedules applied before code generation.

use heron_ir::loop_ir::Module;

/// Marks the loops the code generator should vectorize.
pub fn schedule(_module: &mut Module) {}
