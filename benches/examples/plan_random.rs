//! Plans `n` random-lifetime buffers with one algorithm and prints time and ratio:
//! `cargo run --release -p heron-benches --example plan_random [N] [ALGORITHM] [WORK_UNITS] [SEED]`.

use heron_benches::random_lifetimes;
use heron_planner::bound::lower_bound;
use heron_planner::{Budget, algorithm};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let name = args.get(2).cloned().unwrap_or_else(|| "auto".into());
    let work: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(Budget::DEFAULT_WORK);
    let seed: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(42);
    let p = random_lifetimes(n, seed);
    let lb = lower_bound(&p, &Budget::unlimited());
    let alg = algorithm(&name).expect("known algorithm");
    let t = std::time::Instant::now();
    let budget = Budget::work(work);
    let offsets = alg.place(&p, &budget);
    let dt = t.elapsed();
    assert!(p.is_valid(&offsets));
    println!(
        "{name} n={n}: {:.1} ms, {} work units ({:.1} ns each), {:.4}x the lower bound",
        dt.as_secs_f64() * 1e3,
        budget.spent(),
        dt.as_secs_f64() * 1e9 / budget.spent().max(1) as f64,
        p.peak(&offsets) as f64 / lb as f64
    );
}
