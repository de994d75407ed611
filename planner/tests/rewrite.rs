//! Planned programs compute what the graph interpreter computes: models are lowered, planned
//! (one or two workspace pools), rewritten to pool offsets and run on the loop-IR interpreter
//! with every buffer inside its pool. Overlapping live buffers would corrupt the results.

use std::path::PathBuf;

use heron_ir::loop_ir::interp::run_params;
use heron_ir::loop_ir::print::{ConstData, print_module};
use heron_ir::loop_ir::verify::verify_module;
use heron_ir::loop_ir::{Stmt, flatten::flatten, layout::apply_layout_transforms, parse::parse_module};
use heron_ir::npy::read_npy;
use heron_ir::onnx::{ImportOptions, load_model};
use heron_ir::{Graph, Tensor, interp};
use heron_planner::extract::{ExtractOptions, extract};
use heron_planner::rewrite::rewrite;
use heron_planner::{Budget, PoolInfo, algorithm, plan_extracted, verify_plan};

fn shared() -> PathBuf {
    std::env::var("HERON_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

fn check_planned(g: &Graph, inputs: &[Tensor], pools: Vec<PoolInfo>, alg: &str) {
    let want = interp::run(g, inputs).unwrap();
    let mut m = heron_ir::lower::lower(g).unwrap();
    apply_layout_transforms(&mut m).unwrap();
    flatten(&mut m);
    let ws: Vec<String> =
        pools.iter().filter(|p| p.kind == heron_planner::PoolKind::Workspace).map(|p| p.name.clone()).collect();
    let opts = ExtractOptions { workspace_pools: ws, ..Default::default() };
    let problem = extract(&m, &opts).unwrap();
    let plan = plan_extracted(&problem, &pools, algorithm(alg).unwrap().as_ref(), &Budget::work(20_000_000)).unwrap();
    verify_plan(&problem.buffers, &pools, &plan).unwrap();
    let r = rewrite(&m, &problem, &pools, &plan).unwrap();
    verify_module(&r.module).unwrap();
    // No allocation is left except accumulators, and the text form still round-trips.
    r.module.funcs.iter().for_each(|f| {
        f.body.walk(&mut |s| {
            if let Stmt::Allocate { buffer, .. } = s {
                assert_eq!(
                    f.buffer(*buffer).scope,
                    heron_ir::loop_ir::Scope::Local,
                    "{} left unplanned",
                    f.buffer(*buffer).name
                );
            }
            assert!(!matches!(s, Stmt::AllocateConst { .. }));
        })
    });
    let text = print_module(&r.module, ConstData::Full);
    assert!(
        print_module(&parse_module(&text).unwrap(), ConstData::Full) == text,
        "the planned module's text round-trips"
    );
    let mut params: Vec<Option<Tensor>> = inputs.iter().cloned().map(Some).collect();
    params.extend(g.outputs.iter().map(|_| None));
    for image in &r.images {
        params.push(image.as_ref().map(|i| {
            let bytes = i.to_bytes().unwrap();
            Tensor::from_vec::<u8>(&[bytes.len()], bytes).unwrap()
        }));
    }
    let got = run_params(&r.module, params).unwrap();
    for (k, w) in want.iter().enumerate() {
        let g = got[inputs.len() + k].reshape(w.shape()).unwrap();
        let (a, b) = (g.to_f64_vec(), w.to_f64_vec());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "output {k} element {i}: {x} vs {y}");
        }
    }
}

fn model(name: &str) -> (Graph, Tensor) {
    let dir = shared().join("reference");
    let mut g = load_model(&dir.join(format!("{name}.onnx")), &ImportOptions::default()).unwrap();
    heron_ir::passes::optimize(&mut g);
    (g, read_npy(&dir.join(format!("{name}.input.npy"))).unwrap())
}

fn default_pools() -> Vec<PoolInfo> {
    vec![PoolInfo::workspace("workspace", None), PoolInfo::constant("constants", None)]
}

#[test]
fn planned_reference_models_match_the_interpreter() {
    for name in ["tiny_relu", "mlp", "lenet"] {
        let (g, x) = model(name);
        for alg in ["auto", "greedy_by_size", "greedy_by_conflicts", "hill_climb"] {
            check_planned(&g, std::slice::from_ref(&x), default_pools(), alg);
        }
    }
}

#[test]
fn a_small_fast_pool_with_fallback_keeps_results() {
    let (g, x) = model("lenet");
    let pools = vec![
        PoolInfo::workspace("sram", Some(4096)),
        PoolInfo::workspace("dram", None),
        PoolInfo::constant("constants", None),
    ];
    check_planned(&g, &[x], pools, "auto");
}

/// Constants' conflicts are implied by their live ranges, not listed: a plan that only looked
/// at the lists (and so stacked every constant at offset 0) is refused before any rewrite.
#[test]
fn a_plan_ignoring_implied_conflicts_is_refused() {
    let (g, _) = model("mlp");
    let mut m = heron_ir::lower::lower(&g).unwrap();
    apply_layout_transforms(&mut m).unwrap();
    flatten(&mut m);
    let problem = extract(&m, &ExtractOptions::default()).unwrap();
    assert!(problem.implied.iter().filter(|&&i| i).count() >= 2, "mlp's constants");
    let pools = default_pools();
    let naive = algorithm("greedy_by_size").unwrap().plan(&problem.buffers, &pools, &Budget::work(10_000_000)).unwrap();
    let Err(err) = rewrite(&m, &problem, &pools, &naive) else {
        panic!("a plan that breaks implied conflicts must be refused")
    };
    assert!(err.to_string().contains("overlap"), "{err}");
}
