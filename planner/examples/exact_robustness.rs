//! Robustness harness for the exact search: every MiniMalloc instance in several views
//! (true lifetimes, recovered from conflicts, recovered after shuffling buffer ids).
//! `exact_robustness FILE WORK_UNITS VIEWS` with VIEWS like "orig,rec,s1,s2".
use heron_planner::algorithms::exact::{Decision, decide};
use heron_planner::problem::Rng;
use heron_planner::{Budget, PoolProblem};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a[1]).unwrap()).unwrap();
    let work: u64 = a[2].parse().unwrap();
    let views: Vec<String> = a[3].split(',').map(String::from).collect();
    let mut solved = 0;
    let mut total_time = 0.0;
    let mut runs = 0;
    for inst in doc["instances"].as_array().unwrap() {
        let rows = inst["buffers"].as_array().unwrap();
        let cap = inst["capacity_bytes"].as_u64().unwrap();
        let mut line = format!("{}:", &inst["id"].as_str().unwrap()[22..]);
        for view in &views {
            let mut idx: Vec<usize> = (0..rows.len()).collect();
            if let Some(seed) = view.strip_prefix('s') {
                let mut rng = Rng::new(seed.parse().unwrap());
                for i in (1..idx.len()).rev() {
                    idx.swap(i, rng.below(i + 1));
                }
            }
            let sizes: Vec<u64> = idx.iter().map(|&i| rows[i][3].as_u64().unwrap()).collect();
            let iv: Vec<(u64, u64)> =
                idx.iter().map(|&i| (rows[i][1].as_u64().unwrap(), rows[i][2].as_u64().unwrap())).collect();
            let mut p = PoolProblem::from_intervals(sizes, iv, None);
            if view != "orig" {
                p.intervals = heron_planner::intervals::recover_intervals(&p.adj, &Budget::unlimited());
            }
            let t = std::time::Instant::now();
            let r = decide(&p, cap, &Budget::work(work));
            let dt = t.elapsed().as_secs_f64();
            total_time += dt;
            runs += 1;
            line += &match r {
                Decision::Feasible(o) => {
                    assert!(p.is_valid(&o) && p.peak(&o) <= cap);
                    solved += 1;
                    format!(" {view}={dt:.2}s")
                }
                Decision::Infeasible => format!(" {view}=INFEASIBLE?!"),
                Decision::Unknown => format!(" {view}=----"),
            };
        }
        println!("{line}");
    }
    println!("solved {solved}/{runs}, total {total_time:.1}s");
}
