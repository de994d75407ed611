//! Shared by the property and fuzz tests: how many cases to run, from which seed.

use proptest::test_runner::{Config, RngSeed};

/// `default_cases` cases (`HERON_FUZZ_CASES` overrides) from a fixed seed (`HERON_FUZZ_SEED`
/// overrides), so a default run is reproducible and a long one is one variable away.
pub fn fuzz_config(default_cases: u32) -> Config {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
    Config {
        cases: env("HERON_FUZZ_CASES").map_or(default_cases, |n| n.min(u32::MAX as u64) as u32),
        rng_seed: RngSeed::Fixed(env("HERON_FUZZ_SEED").unwrap_or(0x5654_4655_5a5a)),
        ..Config::default()
    }
}
