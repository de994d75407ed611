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

/// Every activation a convolution kernel applies (fixed constants for those that take them).
pub fn activations() -> impl proptest::strategy::Strategy<Value = heron_kernels::conv::Activation> {
    use heron_kernels::conv::Activation;
    use proptest::prelude::*;
    prop_oneof![
        Just(Activation::LeakyRelu(0.1)),
        Just(Activation::HardSwish),
        Just(Activation::Sigmoid),
        Just(Activation::Silu),
        Just(Activation::HardSigmoid { alpha: 0.2, beta: 0.5 }),
        Just(Activation::Tanh),
        Just(Activation::Gelu),
        Just(Activation::GeluTanh),
    ]
}

/// `activation` of `v`, in f64.
pub fn activation_reference(activation: heron_kernels::conv::Activation, v: f64) -> f64 {
    use heron_kernels::conv::Activation;
    match activation {
        Activation::LeakyRelu(alpha) => {
            if v < 0.0 {
                v * alpha as f64
            } else {
                v
            }
        }
        Activation::HardSwish => v * (v / 6.0 + 0.5).clamp(0.0, 1.0),
        Activation::Sigmoid => 1.0 / (1.0 + (-v).exp()),
        Activation::Silu => v / (1.0 + (-v).exp()),
        Activation::HardSigmoid { alpha, beta } => (alpha as f64 * v + beta as f64).clamp(0.0, 1.0),
        Activation::Tanh => v.tanh(),
        Activation::Gelu => v / 2.0 * (1.0 + erf(v / std::f64::consts::SQRT_2)),
        Activation::GeluTanh => {
            v / 2.0 * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
        }
    }
}
