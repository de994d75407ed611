//! Writes the planner's stress set (`tests/stress`) as JSON files, for timing the CLI:
//! `cargo run --release -p heron-planner --example stress_problems [DIR] [SCALE]`, then e.g.
//! `/usr/bin/time heron plan --buffers DIR/clique3000.json --algorithm exact --time-limit-ms 500`.
//! SCALE 1 (the default) gives the acceptance sizes: 100,000 buffers, 3,000-cliques.

#[path = "../tests/stress/mod.rs"]
mod stress;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).map_or("stress", String::as_str));
    let scale: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    std::fs::create_dir_all(&dir).expect("output directory");
    for problem in stress::stress_set(scale) {
        let path = dir.join(format!("{}.json", problem.name));
        std::fs::write(&path, &problem.json).expect("writable output");
        println!("{} ({} bytes)", path.display(), problem.json.len());
    }
}
