//! Debug helper: the peak of each placement order on the random-lifetime workload.
use heron_benches::random_lifetimes;
use heron_planner::Budget;
use heron_planner::bound::lower_bound;
use heron_planner::problem::{Fit, place_in_order};

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let p = random_lifetimes(n, 42);
    let lb = lower_bound(&p, &Budget::millis(1000)) as f64;
    let iv = p.intervals.clone().unwrap();
    let keys: Vec<(&str, Box<dyn Fn(usize) -> i128>)> = vec![
        ("size desc", Box::new(|i| -(p.sizes[i] as i128))),
        ("start", Box::new(|i| iv[i].0 as i128)),
        ("len desc", Box::new(|i| -((iv[i].1 - iv[i].0) as i128))),
        ("area desc", Box::new(|i| -((iv[i].1 - iv[i].0) as i128 * p.sizes[i] as i128))),
        ("conflicts desc", Box::new(|i| -(p.adj[i].len() as i128))),
        ("conflict bytes desc", Box::new(|i| -(p.adj[i].iter().map(|&j| p.sizes[j as usize] as i128).sum::<i128>()))),
    ];
    for (name, key) in keys {
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by_key(|&i| key(i));
        for fit in [Fit::First, Fit::Best] {
            let t = std::time::Instant::now();
            let (_, peak) = place_in_order(&p, &order, fit);
            println!("{name:>20} {fit:?}: {:.4}x ({:.0} ms)", peak as f64 / lb, t.elapsed().as_secs_f64() * 1e3);
        }
    }
}
