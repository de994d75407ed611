//! Test values and the float rule shared by the kernel tests.

/// Deterministic values in [-1, 1] (xorshift).
pub fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// The project's float rule: |got - want| <= 1e-4 * max(1, |want|).
pub fn close(got: f32, want: f64) -> bool {
    (got as f64 - want).abs() <= 1e-4 * want.abs().max(1.0)
}

/// Applies the optional clamp to a reference value.
pub fn clamp(v: f64, bounds: Option<(f32, f32)>) -> f64 {
    bounds.map_or(v, |(lo, hi)| v.max(lo as f64).min(hi as f64))
}
