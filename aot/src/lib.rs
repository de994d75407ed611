//! heron-aot: object files, the C header and metadata, link helpers and the shared-library loader.
//!
//! Nothing is implemented yet; the crate exists so the workspace layout matches the map in
//! DEVELOPERS.md.
