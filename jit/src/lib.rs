//! heron-jit: Cranelift code generation shared with the AOT back end, and the in-process JIT.
//!
//! Nothing is implemented yet; the crate exists so the workspace layout matches the map in
//! DEVELOPERS.md.
