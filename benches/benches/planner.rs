//! Planning time per algorithm for 100, 1,000 and 10,000 buffers with random lifetimes; the
//! printed ratio is the plan's size over the lower bound.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use heron_benches::random_lifetimes;
use heron_planner::bound::lower_bound;
use heron_planner::{Budget, registry};

fn planning(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(10).measurement_time(Duration::from_secs(5));
    for n in [100usize, 1_000, 10_000] {
        let p = random_lifetimes(n, 42);
        let lb = lower_bound(&p, &Budget::unlimited());
        for alg in registry() {
            // Budgets as the CLI default would give them.
            let offsets = alg.place(&p, &Budget::default_limit());
            println!("{} n={n}: {:.4}x the lower bound", alg.name(), p.peak(&offsets) as f64 / lb as f64);
            group.bench_with_input(BenchmarkId::new(alg.name(), n), &p, |b, p| {
                b.iter(|| alg.place(p, &Budget::default_limit()))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);
