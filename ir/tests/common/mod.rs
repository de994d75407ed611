//! Helpers shared by the integration tests: locating `shared/` and comparing tensors.
#![allow(dead_code)]

use heron_ir::loop_ir::{flatten, interp as loop_interp, layout, print, verify::verify_module};
use heron_ir::{Graph, Tensor, interp, lower};

#[allow(unused_imports)]
pub use heron_ir::testing::{assert_close, assert_float_rule, shared_dir};

/// Runs the three stages of `graph` on `inputs` and compares each with the graph interpreter.
pub fn check_stages(graph: &Graph, inputs: &[Tensor]) {
    check_stages_with(graph, inputs, |_| {})
}

/// Like [`check_stages`], with `annotate` adding layout transforms to the lowered module first.
pub fn check_stages_with(graph: &Graph, inputs: &[Tensor], annotate: impl FnOnce(&mut heron_ir::loop_ir::Module)) {
    let want = interp::run(graph, inputs).expect("graph interpreter");
    let mut m = lower::lower(graph).expect("lowering");
    annotate(&mut m);
    for stage in ["lowered", "layout", "flat"] {
        match stage {
            "layout" => layout::apply_layout_transforms(&mut m).expect("layout transforms"),
            "flat" => flatten::flatten(&mut m),
            _ => {}
        }
        verify_module(&m)
            .unwrap_or_else(|e| panic!("{stage}: {e}\n{}", print::print_module(&m, print::ConstData::Elided)));
        let got = loop_interp::run(&m, inputs).unwrap_or_else(|e| panic!("{stage}: {e}"));
        for ((g, w), &o) in got.iter().zip(&want).zip(&graph.outputs) {
            let g = g.reshape(&graph.ty(o).shape).unwrap();
            let r = if w.dtype().is_float() { assert_float_rule(&g, w) } else { assert_close(&g, w, 0.0, 0.0) };
            r.unwrap_or_else(|e| panic!("{stage}, output '{}': {e}", graph.value(o).name));
        }
    }
}

/// Deterministic test data in [-1, 1) (xorshift).
pub fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
