//! Runs every planning algorithm on MiniMalloc's challenging instances and prints the pool size
//! each finds against the capacity: `cargo run --release -p heron-planner --example minimalloc
//! [PATH] [TIME_LIMIT_MS] [ALGORITHM]`.

use heron_planner::bound::max_load;
use heron_planner::{Budget, PoolProblem, registry};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path =
        args.get(1).cloned().unwrap_or_else(|| "../shared/benchmarks/planner/minimalloc_challenging.json".into());
    let ms: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let only = args.get(3).cloned();
    let text = std::fs::read_to_string(&path).expect("benchmark file");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    for inst in doc["instances"].as_array().expect("instances") {
        let cap = inst["capacity_bytes"].as_u64().expect("capacity");
        let rows = inst["buffers"].as_array().expect("buffers");
        let sizes: Vec<u64> = rows.iter().map(|r| r[3].as_u64().expect("size")).collect();
        let iv: Vec<(u64, u64)> =
            rows.iter().map(|r| (r[1].as_u64().expect("lo"), r[2].as_u64().expect("hi"))).collect();
        // The capacity is the pool's size limit, as with `--workspace-pool NAME:size_hint=1048576`.
        let p = PoolProblem::from_intervals(sizes.clone(), iv.clone(), Some(cap));
        let lb = max_load(&sizes, &iv);
        let mut line = format!("{} n={} lb={lb} cap={cap}:", inst["id"].as_str().unwrap_or("?"), rows.len());
        for alg in registry() {
            if only.as_deref().is_some_and(|o| o != alg.name()) {
                continue;
            }
            let t = std::time::Instant::now();
            let offsets = alg.place(&p, &Budget::millis(ms));
            assert!(p.is_valid(&offsets), "{} produced an invalid placement", alg.name());
            let peak = p.peak(&offsets);
            line += &format!(
                " {}={} ({:.3}x, {:.1}s)",
                alg.name(),
                peak,
                peak as f64 / cap as f64,
                t.elapsed().as_secs_f64()
            );
        }
        println!("{line}");
    }
}
