//! Runs every planning algorithm on MiniMalloc's challenging instances through the JSON
//! interface of `heron plan --buffers` (conflicts only, as that format has them) and prints the
//! pool size each finds against the capacity:
//! `cargo run --release -p heron-planner --example minimalloc [PATH] [WORK_UNITS] [ALGORITHM] [--unbounded]`.
//! By default the pool's size hint is the instance's capacity; `--unbounded` leaves it open.

use heron_planner::json::plan_json;
use heron_planner::{Budget, registry};

fn main() {
    let args: Vec<String> = std::env::args().filter(|a| a != "--unbounded").collect();
    let unbounded = std::env::args().any(|a| a == "--unbounded");
    let path =
        args.get(1).cloned().unwrap_or_else(|| "../shared/benchmarks/planner/minimalloc_challenging.json".into());
    let work: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(Budget::PLAN_WORK);
    let only = args.get(3).cloned();
    let text = std::fs::read_to_string(&path).expect("benchmark file");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    for inst in doc["instances"].as_array().expect("instances") {
        let cap = inst["capacity_bytes"].as_u64().expect("capacity");
        let rows = inst["buffers"].as_array().expect("buffers");
        let span = |r: &serde_json::Value| (r[1].as_u64().expect("lower"), r[2].as_u64().expect("upper"));
        let buffers: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let (lo, hi) = span(r);
                let conflicts: Vec<&serde_json::Value> =
                    rows.iter().filter(|q| q[0] != r[0] && span(q).0 < hi && lo < span(q).1).map(|q| &q[0]).collect();
                serde_json::json!({"name": r[0], "size_bytes": r[3], "alignment": 1, "conflicts": conflicts,
                    "pool_candidates": ["pool"]})
            })
            .collect();
        let hint = if unbounded { serde_json::Value::Null } else { cap.into() };
        let problem = serde_json::json!({"pools": [{"name": "pool", "size_hint_bytes": hint}], "buffers": buffers});
        let problem = problem.to_string();
        let mut line = format!("{} n={} cap={cap}:", inst["id"].as_str().unwrap_or("?"), rows.len());
        for alg in registry() {
            if only.as_deref().is_some_and(|o| o != alg.name()) {
                continue;
            }
            let t = std::time::Instant::now();
            let budget = Budget::work(work);
            let result = match plan_json(&problem, alg.name(), &budget) {
                Ok(plan) => {
                    let size = plan.pool_sizes["pool"].as_u64().expect("pool size");
                    format!("{size} ({:.3}x)", size as f64 / cap as f64)
                }
                Err(e) => format!("error ({e})"),
            };
            let dt = t.elapsed().as_secs_f64();
            let per_unit = dt * 1e9 / budget.spent().max(1) as f64;
            line += &format!(" {}={result} {dt:.1}s {} units ({per_unit:.1} ns each)", alg.name(), budget.spent());
        }
        println!("{line}");
    }
}
