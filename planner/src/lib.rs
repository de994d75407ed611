//! heron-planner: Unified Static Memory Planning.
//!
//! Will hold buffer info and liveness extraction from the loop IR, pool descriptions, the planning
//! algorithms and the rewrite of allocations to pool offsets (see ARCHITECTURE.md). Nothing is
//! implemented yet; the crate exists so the workspace layout matches the map in DEVELOPERS.md.
