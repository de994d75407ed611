//! Helpers shared by the integration tests: locating `shared/` and comparing tensors.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use heron_ir::testing::{assert_close, assert_float_rule, check_stages, check_stages_with, data, shared_dir};
