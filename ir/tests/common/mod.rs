//! Helpers shared by the integration tests: locating `shared/` and comparing tensors.
#![allow(dead_code)]

use std::path::PathBuf;

use heron_ir::loop_ir::{flatten, interp as loop_interp, layout, print, verify::verify_module};
use heron_ir::{Graph, Tensor, interp, lower};

/// The `shared/` folder that sits beside the repository (override with `HERON_SHARED`).
pub fn shared_dir() -> PathBuf {
    if let Ok(p) = std::env::var("HERON_SHARED") {
        return PathBuf::from(p);
    }
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidate = here.join("../../shared");
    assert!(candidate.is_dir(), "shared/ not found at {}; set HERON_SHARED to its location", candidate.display());
    candidate
}

/// Element-wise comparison: same dtype and shape; integers and bools exactly; floats within
/// `atol + rtol * |want|` (NaN matches NaN).
pub fn assert_close(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {}, want {}", got.tensor_type(), want.tensor_type()));
    }
    if !got.dtype().is_float() {
        if got != want {
            return Err(format!("integer values differ: got {got:?}, want {want:?}"));
        }
        return Ok(());
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
        if !ok {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    Ok(())
}

/// The project's float rule: |got - want| <= 1e-4 * max(1, |want|) for every element.
pub fn assert_float_rule(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!("got shape {:?}, want {:?}", got.shape(), want.shape()));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let err = (a - b).abs() / b.abs().max(1.0);
        // Written so that NaN fails too.
        if err.is_nan() || err > 1e-4 {
            return Err(format!("element {i}: got {a}, want {b} (relative error {err:e})"));
        }
    }
    Ok(())
}

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
