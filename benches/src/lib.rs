//! heron-benches: criterion benchmarks (`cargo bench -p heron-benches`) and the workloads they
//! share.

use heron_planner::PoolProblem;
use heron_planner::problem::Rng;

/// `n` buffers with random lifetimes, each live for 1-5% of a timeline of `10 * n` steps, and
/// random sizes of 64 bytes to 64 KiB.
pub fn random_lifetimes(n: usize, seed: u64) -> PoolProblem {
    let mut rng = Rng::new(seed);
    let horizon = 10 * n as u64;
    let (mut sizes, mut intervals) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let len = horizon / 100 + rng.below((horizon / 25) as usize) as u64;
        let start = rng.below((horizon - len) as usize) as u64;
        sizes.push(64 + rng.below(65_536) as u64);
        intervals.push((start, start + len));
    }
    PoolProblem::from_intervals(sizes, intervals, None)
}
