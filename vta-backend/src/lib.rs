//! heron-vta: the VTA accelerator back end (ISA encoding, simulator device, driver and runtime API,
//! offload lowering).
//!
//! Nothing is implemented yet; the crate exists so the workspace layout matches the map in
//! DEVELOPERS.md.
