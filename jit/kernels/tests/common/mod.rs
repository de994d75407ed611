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

/// `erf x` in f64: its Taylor series below 3 (the largest term is below e^9, so the sum keeps
/// 1e-12), above it `1 − erfc x` with erfc's asymptotic series cut at its smallest term (within
/// 1e-8 at 3, where erfc is 2e-5, far closer beyond).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a < 3.0 {
        // erf x = 2/√π · Σ (−1)^n x^(2n+1) / (n! (2n+1)).
        let (mut term, mut sum) = (x, x);
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        return sum * 2.0 / std::f64::consts::PI.sqrt();
    }
    // erfc a = e^-a² / (a √π) · Σ (−1)^n (2n − 1)!! / (2a²)^n.
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for n in 1..100 {
        let next = term * -((2 * n - 1) as f64) / (2.0 * a * a);
        if next.abs() >= term.abs() {
            break;
        }
        term = next;
        sum += term;
    }
    let erfc = (-a * a).exp() / (a * std::f64::consts::PI.sqrt()) * sum;
    (1.0 - erfc).copysign(x)
}
