//! heron-benches: criterion benchmarks and the comparison harness.
//!
//! The benchmarks arrive with the compiled engines; the crate exists so the workspace layout
//! matches the map in DEVELOPERS.md.
