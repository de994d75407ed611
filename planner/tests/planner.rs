//! Planner properties: every algorithm's plans pass the independent verifier and never go below
//! the lower bound; broken plans are rejected; the exact search finds optima; the JSON interface
//! reports bad input clearly.

use heron_planner::algorithms::exact::{Decision, decide};
use heron_planner::bound::{lower_bound, max_load};
use heron_planner::json::plan_json;
use heron_planner::problem::Rng;
use heron_planner::{Budget, BufferInfo, Plan, PoolAllocation, PoolInfo, PoolProblem, registry, verify_plan};
use proptest::prelude::*;

fn interval_buffers(spec: &[(u64, u64, u64, u64)], pools: &[&str]) -> Vec<BufferInfo> {
    let problem = PoolProblem::from_intervals(
        spec.iter().map(|s| s.2).collect(),
        spec.iter().map(|s| (s.0, s.0 + s.1)).collect(),
        None,
    );
    spec.iter()
        .enumerate()
        .map(|(i, &(start, len, size, align_log))| BufferInfo {
            name: format!("b{i}"),
            size_bytes: size,
            // Powers of two and others (1, 5, 4, 15, 16): any positive alignment is allowed.
            alignment: if align_log % 2 == 0 { 1 << align_log } else { align_log * 5 },
            conflicts: problem.adj[i].iter().map(|&j| j as usize).collect(),
            pool_candidates: pools.iter().map(|s| s.to_string()).collect(),
            live_range: Some((start, start + len)),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_algorithm_gives_verified_plans_above_the_bound(
        spec in proptest::collection::vec((0u64..50, 1u64..20, 1u64..200, 0u64..5), 1..40),
        bounded in any::<bool>(),
    ) {
        let buffers = interval_buffers(&spec, &["fast", "slow"]);
        let pools = vec![PoolInfo::workspace("fast", bounded.then_some(256)), PoolInfo::workspace("slow", None)];
        let all: Vec<usize> = (0..buffers.len()).collect();
        let lb = lower_bound(&PoolProblem::from_buffers(&buffers, &all, None), &Budget::work(5_000_000));
        let sizes: Vec<u64> = buffers.iter().map(|b| b.size_bytes).collect();
        let ivs: Vec<(u64, u64)> = buffers.iter().map(|b| b.live_range.unwrap()).collect();
        prop_assert_eq!(lb, max_load(&sizes, &ivs));
        for alg in registry() {
            let plan = alg.plan(&buffers, &pools, &Budget::work(2_000_000)).unwrap();
            if let Err(e) = verify_plan(&buffers, &pools, &plan) {
                return Err(TestCaseError::fail(format!("{}: {e:?}", alg.name())));
            }
            prop_assert!(plan.total_bytes() >= lb, "{} below the lower bound", alg.name());
        }
    }

    #[test]
    fn general_conflict_graphs_plan_and_verify(n in 1usize..30, density in 0u64..100, seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let mut buffers: Vec<BufferInfo> = (0..n)
            .map(|i| BufferInfo {
                name: format!("b{i}"),
                size_bytes: 1 + rng.below(300) as u64,
                alignment: 1 << rng.below(6),
                conflicts: vec![],
                pool_candidates: vec!["ws".into()],
                live_range: None,
            })
            .collect();
        for (i, b) in buffers.iter_mut().enumerate() {
            for j in 0..i {
                if (rng.below(100) as u64) < density {
                    b.conflicts.push(j); // one side only: counts both ways
                }
            }
        }
        let pools = vec![PoolInfo::workspace("ws", None)];
        let mut sym = buffers.clone();
        heron_planner::normalize(&mut sym).unwrap();
        let all: Vec<usize> = (0..n).collect();
        let lb = lower_bound(&PoolProblem::from_buffers(&sym, &all, None), &Budget::work(5_000_000));
        for alg in registry() {
            let plan = alg.plan(&buffers, &pools, &Budget::work(2_000_000)).unwrap();
            if let Err(e) = verify_plan(&sym, &pools, &plan) {
                return Err(TestCaseError::fail(format!("{}: {e:?}", alg.name())));
            }
            prop_assert!(plan.total_bytes() >= lb);
        }
    }
}

#[test]
fn broken_plans_are_rejected() {
    let buffers = interval_buffers(&[(0, 10, 100, 4), (5, 10, 100, 0)], &["ws"]);
    let pools = vec![PoolInfo::workspace("ws", Some(150))];
    let plan = |o0: u64, o1: u64, size: u64| Plan {
        algorithm: "manual".into(),
        allocations: vec![PoolAllocation { pool: 0, offset: o0 }, PoolAllocation { pool: 0, offset: o1 }],
        pool_sizes: vec![size],
    };
    let errors = |p: &Plan| verify_plan(&buffers, &pools, p).unwrap_err().join("\n");
    assert!(errors(&plan(0, 50, 150)).contains("overlap"));
    assert!(errors(&plan(8, 120, 220)).contains("alignment"));
    assert!(errors(&plan(0, 100, 200)).contains("size hint"));
    assert!(errors(&plan(0, 100, 150)).contains("past pool"));
    let mut wrong_pool = plan(0, 100, 100);
    wrong_pool.allocations[1].pool = 1;
    wrong_pool.pool_sizes.push(200);
    assert!(
        verify_plan(&buffers, &[pools[0].clone(), PoolInfo::workspace("other", None)], &wrong_pool)
            .unwrap_err()
            .join(" ")
            .contains("not one of its candidates")
    );
}

#[test]
fn exact_search_finds_the_minimalloc_example_optimum() {
    // MiniMalloc's input.12.csv: capacity 12 is tight.
    let p = PoolProblem::from_intervals(vec![4, 4, 4, 4, 4], vec![(0, 3), (3, 9), (0, 9), (9, 21), (0, 21)], None);
    match decide(&p, 12, &Budget::work(100_000_000)) {
        Decision::Feasible(o) => {
            assert!(p.is_valid(&o));
            assert!(p.peak(&o) <= 12);
        }
        other => panic!("expected a placement, got {other:?}"),
    }
    assert_eq!(decide(&p, 11, &Budget::work(100_000_000)), Decision::Infeasible);
}

/// Brute force: the best first-fit placement over all orders (first fit over all orders reaches
/// the optimum for these sizes, since every optimal placement can be compacted into one).
fn brute_force_optimum(p: &PoolProblem) -> u64 {
    fn permute(p: &PoolProblem, order: &mut Vec<usize>, k: usize, best: &mut u64) {
        if k == order.len() {
            let (_, peak) = heron_planner::problem::place_in_order(p, order, heron_planner::problem::Fit::First);
            *best = (*best).min(peak);
            return;
        }
        for i in k..order.len() {
            order.swap(k, i);
            permute(p, order, k + 1, best);
            order.swap(k, i);
        }
    }
    let mut best = u64::MAX;
    permute(p, &mut (0..p.len()).collect(), 0, &mut best);
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn exact_search_matches_brute_force_on_small_instances(
        spec in proptest::collection::vec((0u64..12, 1u64..8, 1u64..9, 0u32..3), 1..8),
    ) {
        let mut p = PoolProblem::from_intervals(spec.iter().map(|s| s.2).collect(), spec.iter().map(|s| (s.0, s.0 + s.1)).collect(), None);
        p.aligns = spec.iter().map(|s| 1 << s.3).collect();
        let optimum = brute_force_optimum(&p);
        let exact = heron_planner::algorithm("exact").unwrap().place(&p, &Budget::work(50_000_000));
        prop_assert!(p.is_valid(&exact));
        prop_assert_eq!(p.peak(&exact), optimum);
        prop_assert_eq!(decide(&p, optimum - 1, &Budget::work(50_000_000)), Decision::Infeasible);
        // The same problem given by its conflicts only (lifetimes recovered, as from JSON).
        let mut graph = p.clone();
        graph.intervals = heron_planner::intervals::recover_intervals(&graph.adj, &Budget::unlimited());
        prop_assert!(graph.intervals.is_some());
        match decide(&graph, optimum, &Budget::work(50_000_000)) {
            Decision::Feasible(o) => prop_assert!(p.is_valid(&o) && p.peak(&o) <= optimum),
            other => prop_assert!(false, "expected a placement at the optimum, got {:?}", other),
        }
        prop_assert_eq!(decide(&graph, optimum - 1, &Budget::work(50_000_000)), Decision::Infeasible);
    }
}

#[test]
fn json_interface_matches_the_documented_example() {
    let text = r#"{"pools":[{"name":"sram","size_hint_bytes":1024},{"name":"dram","size_hint_bytes":null}], "buffers":[{"name":"a","size_bytes":640,"alignment":16,"conflicts":["b"],"pool_candidates":["sram","dram"]},{"name":"b","size_bytes":512,"alignment":64,"conflicts":[],"pool_candidates":["sram","dram"]}]}"#;
    let plan = plan_json(text, "auto", &Budget::work(10_000_000)).unwrap();
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["lower_bound_bytes"], 1152);
    let sizes = &json["pool_sizes"];
    let total = sizes["sram"].as_u64().unwrap() + sizes["dram"].as_u64().unwrap();
    assert_eq!(total, 1152, "{json}");
    assert!(sizes["sram"].as_u64().unwrap() <= 1024);
}

#[test]
fn json_interface_rejects_bad_input_clearly() {
    let cases = [
        ("{\"pools\": [", "invalid planning problem JSON"),
        (
            r#"{"pools":[{"name":"p"}],"buffers":[{"name":"a","size_bytes":8,"pool_candidates":["q"]}]}"#,
            "unknown pool 'q'",
        ),
        (
            r#"{"pools":[{"name":"p"}],"buffers":[{"name":"a","size_bytes":8,"pool_candidates":["p"]},{"name":"a","size_bytes":8,"pool_candidates":["p"]}]}"#,
            "defined twice",
        ),
        (
            r#"{"pools":[{"name":"p"}],"buffers":[{"name":"a","size_bytes":0,"pool_candidates":["p"]}]}"#,
            "must be positive",
        ),
        (
            r#"{"pools":[{"name":"p"}],"buffers":[{"name":"a","size_bytes":-4,"pool_candidates":["p"]}]}"#,
            "size_bytes -4 is negative",
        ),
        (
            r#"{"pools":[{"name":"p","alignment":12}],"buffers":[{"name":"a","size_bytes":8,"pool_candidates":["p"]}]}"#,
            "pool 'p': alignment 12 is not a power of two",
        ),
        (
            r#"{"pools":[{"name":"p"}],"buffers":[{"name":"a","size_bytes":8,"alignment":0,"pool_candidates":["p"]}]}"#,
            "alignment must be positive",
        ),
        (r#"{"pools":[{"name":"p"},{"name":"p"}],"buffers":[]}"#, "pool 'p' is defined twice"),
        (
            r#"{"pools":[{"name":"p"}],"buffers":[{"name":"a","size_bytes":8,"conflicts":["zz"],"pool_candidates":["p"]}]}"#,
            "unknown buffer 'zz'",
        ),
        (
            r#"{"pools":[{"name":"p","size_hint_bytes":100}],"buffers":[{"name":"big","size_bytes":200,"pool_candidates":["p"]}]}"#,
            "fits none of its candidate pools: p (limit 100",
        ),
    ];
    for (text, needle) in cases {
        let err = plan_json(text, "auto", &Budget::work(5_000_000)).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
    // With a fallback pool, a buffer too big for the first is no error.
    let ok = r#"{"pools":[{"name":"p","size_hint_bytes":100},{"name":"q"}],"buffers":[{"name":"big","size_bytes":200,"pool_candidates":["p","q"]}]}"#;
    assert!(plan_json(ok, "auto", &Budget::work(5_000_000)).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn lifetimes_are_recovered_from_interval_conflicts(spec in proptest::collection::vec((0u64..60, 1u64..15, 1u64..50), 1..60)) {
        let from_iv = PoolProblem::from_intervals(spec.iter().map(|s| s.2).collect(), spec.iter().map(|s| (s.0, s.0 + s.1)).collect(), None);
        let buffers: Vec<BufferInfo> = spec.iter().enumerate().map(|(i, s)| BufferInfo {
            name: format!("b{i}"),
            size_bytes: s.2,
            alignment: 1,
            conflicts: from_iv.adj[i].iter().map(|&j| j as usize).collect(),
            pool_candidates: vec!["ws".into()],
            live_range: None,
        }).collect();
        let all: Vec<usize> = (0..buffers.len()).collect();
        let p = PoolProblem::from_buffers(&buffers, &all, None);
        let iv = p.intervals.clone().expect("an interval graph's lifetimes are recovered");
        prop_assert_eq!(max_load(&p.sizes, &iv), max_load(&from_iv.sizes, from_iv.intervals.as_ref().unwrap()));
    }
}

#[test]
fn a_cycle_of_four_has_no_lifetimes() {
    // C4 is not an interval graph (not even chordal).
    let adj = vec![vec![1, 3], vec![0, 2], vec![1, 3], vec![0, 2]];
    assert!(heron_planner::intervals::recover_intervals(&adj, &Budget::unlimited()).is_none());
}

/// Pool placement follows the targets that touch a buffer (`PoolInfo.targets`).
mod targets {
    use heron_ir::loop_ir::parse::parse_module;
    use heron_planner::{Access, Budget, PlanError, PoolInfo, plan_module};

    const TEXT: &str = "func @op(%x: f32[4], %y: f32[4]) {
  target \"cpu\"
  for %i: i64 in 0..4 serial {
    %y[%i] = %x[%i]
  }
}

func @main(%x: f32[4], %z: f32[4]) {
  target \"cpu\"
  allocate %t: f32[4] pools []
  call @op(%x, %t)
  call @op(%t, %z)
}
";

    fn pool(name: &str, targets: &[(&str, Access)]) -> PoolInfo {
        let mut p = PoolInfo::workspace(name, None);
        p.targets = targets.iter().map(|(t, a)| (t.to_string(), *a)).collect();
        p
    }

    #[test]
    fn buffers_go_only_to_pools_their_targets_reach() {
        let m = parse_module(TEXT).unwrap();
        let pools = [pool("vta_only", &[("vta", Access::ReadWrite)]), pool("host", &[("cpu", Access::ReadWrite)])];
        let planned = plan_module(&m, &pools, heron_planner::AlgorithmKind::Auto, &Budget::work(10_000_000)).unwrap();
        assert_eq!(planned.problem.targets[0], vec!["cpu".to_string()]);
        assert_eq!(planned.problem.buffers[0].pool_candidates, vec!["host".to_string()]);
        assert_eq!(planned.plan.allocations[0].pool, 1, "placed in the pool the CPU can write");
    }

    #[test]
    fn an_impossible_placement_is_a_clear_error() {
        let m = parse_module(TEXT).unwrap();
        for targets in [&[("vta", Access::ReadWrite)][..], &[("cpu", Access::ReadOnly)][..]] {
            let pools = [pool("p", targets)];
            let err = plan_module(&m, &pools, heron_planner::AlgorithmKind::Auto, &Budget::work(10_000_000))
                .map(|_| ())
                .unwrap_err();
            assert!(matches!(err, PlanError::NoPoolForTargets { .. }), "{err}");
            assert!(err.to_string().contains("buffer 't' is written by target(s) cpu"), "{err}");
        }
    }
}

#[test]
fn alignments_need_not_be_powers_of_two() {
    // As XLA's heap simulator allows: offsets are multiples of 20 (or 3, or 7).
    let text = r#"{"pools":[{"name":"p"}],"buffers":[
        {"name":"a","size_bytes":30,"alignment":20,"pool_candidates":["p"]},
        {"name":"b","size_bytes":10,"alignment":20,"conflicts":["a"],"pool_candidates":["p"]},
        {"name":"c","size_bytes":7,"alignment":3,"conflicts":["a","b"],"pool_candidates":["p"]},
        {"name":"d","size_bytes":5,"alignment":7,"conflicts":["c"],"pool_candidates":["p"]}]}"#;
    for alg in registry() {
        let plan = plan_json(text, alg.name(), &Budget::work(5_000_000)).unwrap();
        let offset = |name: &str| plan.allocations.iter().find(|a| a.buffer == name).unwrap().offset;
        for (name, alignment) in [("a", 20), ("b", 20), ("c", 3), ("d", 7)] {
            assert_eq!(offset(name) % alignment, 0, "{}: {name} at {}", alg.name(), offset(name));
        }
        // a and b need 30 + 10 bytes at multiples of 20: 50 at best (b at 0, a at 20).
        assert!(plan.pool_sizes["p"].as_u64().unwrap() >= 50, "{}", alg.name());
    }
    // The optimum: b at 0, a at 20, c in the gap at 12 (a multiple of 3 ending by 20), d at 0.
    let exact = plan_json(text, "exact", &Budget::work(5_000_000)).unwrap();
    assert_eq!(exact.pool_sizes["p"].as_u64().unwrap(), 50);
}
