//! Test support shared by every crate's tests: locating the `shared/` folder and comparing
//! tensors under the project's rules.

use std::path::PathBuf;

use crate::Tensor;

/// The `shared/` folder that sits beside the repository (override with `HERON_SHARED`).
pub fn shared_dir() -> PathBuf {
    if let Ok(p) = std::env::var("HERON_SHARED") {
        return PathBuf::from(p);
    }
    // Every crate sits one level below the repository, which sits beside shared/.
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidate = here.join("../../shared");
    assert!(candidate.is_dir(), "shared/ not found at {}; set HERON_SHARED to its location", candidate.display());
    candidate
}

/// Element-wise comparison: same dtype and shape; integers and bools exactly; floats within
/// `atol + rtol * |want|` (NaN matches NaN).
pub fn assert_close(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {}, want {}", got.tensor_type(), want.tensor_type()));
    }
    if !got.dtype().is_float() {
        if got != want {
            return Err(format!("integer values differ: got {got:?}, want {want:?}"));
        }
        return Ok(());
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
        if !ok {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    Ok(())
}

/// The project's float rule: |got - want| <= 1e-4 * max(1, |want|) for every element.
pub fn assert_float_rule(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!("got shape {:?}, want {:?}", got.shape(), want.shape()));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let err = (a - b).abs() / b.abs().max(1.0);
        // Written so that NaN fails too.
        if err.is_nan() || err > 1e-4 {
            return Err(format!("element {i}: got {a}, want {b} (relative error {err:e})"));
        }
    }
    Ok(())
}
