//! The reference models, lowered and planned: plans verify, workspace pools stay within 1.02x of
//! the planner's own lower bound (operator scratch included), and resnet_ish needs less
//! workspace than TVM 0.27's static plan of the same model (7,432,096 bytes).

use std::path::PathBuf;

use heron_ir::loop_ir::{flatten::flatten, layout::apply_layout_transforms};
use heron_ir::onnx::{ImportOptions, load_model};
use heron_planner::bound::lower_bound;
use heron_planner::extract::{ExtractOptions, extract};
use heron_planner::{Budget, PoolInfo, PoolProblem, algorithm, plan_extracted};

fn shared() -> PathBuf {
    std::env::var("HERON_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

/// Plans `name` and returns (workspace bytes, workspace lower bound).
fn plan_model(name: &str) -> (u64, u64) {
    let mut g = load_model(&shared().join(format!("reference/{name}.onnx")), &ImportOptions::default()).unwrap();
    heron_ir::passes::optimize(&mut g);
    let mut m = heron_ir::lower::lower(&g).unwrap();
    apply_layout_transforms(&mut m).unwrap();
    flatten(&mut m);
    let problem = extract(&m, &ExtractOptions::default()).unwrap();
    let pools = vec![PoolInfo::workspace("workspace", None), PoolInfo::constant("constants", None)];
    let plan =
        plan_extracted(&problem, &pools, algorithm("auto").unwrap().as_ref(), &Budget::work(50_000_000)).unwrap();
    let ws: Vec<usize> = (0..problem.buffers.len()).filter(|&i| plan.allocations[i].pool == 0).collect();
    let lb = lower_bound(&PoolProblem::from_buffers(&problem.buffers, &ws, None), &Budget::work(10_000_000));
    (plan.pool_sizes[0], lb)
}

#[test]
fn reference_models_plan_near_the_lower_bound() {
    for name in ["tiny_relu", "mlp", "lenet", "mobilenet_ish", "resnet_ish"] {
        let (size, lb) = plan_model(name);
        assert!(size as f64 <= 1.02 * lb as f64, "{name}: workspace {size} vs lower bound {lb}");
        if name == "resnet_ish" {
            assert!(size < 7_432_096, "resnet_ish workspace {size} must beat TVM's 7,432,096");
        }
    }
}
