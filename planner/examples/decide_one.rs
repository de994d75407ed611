//! Debug helper: decision search on one MiniMalloc instance at a capacity.
//! `cargo run --release -p heron-planner --example decide_one PATH INDEX CAPACITY MS`
use heron_planner::algorithms::exact::{ORDERINGS, decide, decide_with};
use heron_planner::{Budget, PoolProblem};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a[1]).unwrap()).unwrap();
    let inst = &doc["instances"][a[2].parse::<usize>().unwrap()];
    let rows = inst["buffers"].as_array().unwrap();
    let sizes: Vec<u64> = rows.iter().map(|r| r[3].as_u64().unwrap()).collect();
    let iv: Vec<(u64, u64)> = rows.iter().map(|r| (r[1].as_u64().unwrap(), r[2].as_u64().unwrap())).collect();
    let p = PoolProblem::from_intervals(sizes, iv, None);
    let cap: u64 = a[3].parse().unwrap();
    let ms: u64 = a[4].parse().unwrap();
    for o in 0..ORDERINGS {
        let t = std::time::Instant::now();
        let r = decide_with(&p, cap, Budget::millis(ms), o);
        println!("ordering {o}: {:?} in {:.2}s", std::mem::discriminant(&r), t.elapsed().as_secs_f64());
    }
    let t = std::time::Instant::now();
    let r = decide(&p, cap, Budget::millis(ms));
    println!("decide: {:?} in {:.2}s", std::mem::discriminant(&r), t.elapsed().as_secs_f64());
}
