//! Test support shared by every crate's tests: locating the `shared/` folder and comparing
//! tensors under the project's rules, building ONNX models ([`onnx`]) and the corpus of hostile
//! ones ([`adversarial`]).

pub mod adversarial;
pub mod fuzz;
pub mod onnx;

use std::path::PathBuf;

use crate::loop_ir::{flatten, interp as loop_interp, layout, print, verify::verify_module};
use crate::{Graph, Tensor, interp, lower};

/// The `shared/` folder that sits beside the repository (override with `HERON_SHARED`).
pub fn shared_dir() -> PathBuf {
    if let Ok(p) = std::env::var("HERON_SHARED") {
        return PathBuf::from(p);
    }
    // Every crate sits one level below the repository, which sits beside shared/.
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidate = here.join("../../shared");
    assert!(candidate.is_dir(), "shared/ not found at {}; set HERON_SHARED to its location", candidate.display());
    candidate
}

/// Element-wise comparison: same dtype and shape; integers and bools exactly; floats within
/// `atol + rtol * |want|` (NaN matches NaN; f16 to at least 4 units in the last place).
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
    // An f16 result is good to a few units in the last place (2^-10 each): references that
    // round every step of a multi-op computation to f16 differ from one that rounds once.
    let rtol = if got.dtype() == crate::DType::F16 { rtol.max(4.0 * f64::powi(2.0, -10)) } else { rtol };
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
        if !ok {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    Ok(())
}

/// A conformance test's output against its stored reference: [`assert_close`] with ONNX's
/// tolerances (`rtol` 1e-3, `atol`), where `atol` is raised to 8 f32 roundings of the output's
/// largest magnitude: references computed and stored in f32 carry that absolute noise on every
/// element (a transform whose true value is 0 is stored as 2e-7 next to values of 50).
pub fn assert_conformance(got: &Tensor, want: &Tensor, atol: f64) -> Result<(), String> {
    let scale = want.to_f64_vec().iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
    let noise = if want.dtype() == crate::DType::F32 { 8.0 * f64::from(f32::EPSILON) * scale } else { 0.0 };
    assert_close(got, want, 1e-3, atol.max(noise))
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

/// Two engines' results agree: integers and bools exactly, floats by the project's float rule,
/// where NaN must meet NaN and an infinity the same infinity.
pub fn assert_engines_agree(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if !want.dtype().is_float() || got.shape() != want.shape() {
        return assert_close(got, want, 0.0, 0.0);
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let mut finite = (Vec::new(), Vec::new());
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        if b.is_finite() {
            finite.0.push(a);
            finite.1.push(b);
        } else if !(a == b || a.is_nan() && b.is_nan()) {
            return Err(format!("element {i}: got {a}, want {b}"));
        }
    }
    let n = finite.0.len();
    let as_tensor = |v: Vec<f64>| Tensor::from_vec::<f64>(&[n], v).expect("1-d");
    assert_float_rule(&as_tensor(finite.0), &as_tensor(finite.1))
}

/// One ONNX backend node test, loaded: the imported graph, its inputs (model order) and the
/// expected outputs.
pub struct ConformanceCase {
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
    pub expected: Vec<Tensor>,
}

/// Why a conformance case is not run.
pub enum CaseError {
    /// Outside what Heron supports (the reason says what).
    Skip(String),
    /// Malformed, or rejected when it should not be.
    Fail(String),
}

fn read_pb(path: &std::path::Path) -> Result<Result<Tensor, String>, String> {
    use prost::Message;
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = crate::onnx::proto::TensorProto::decode(&bytes[..]).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(crate::onnx::tensor_from_proto(&t).map_err(|e| e.to_string()))
}

/// Loads the conformance case in `dir` (`model.onnx` and `test_data_set_0/`). Input values are
/// also given to the importer, so shape-deciding inputs work.
pub fn load_conformance_case(dir: &std::path::Path) -> Result<ConformanceCase, CaseError> {
    use crate::onnx::{ImportError, ImportOptions, import_model, proto};
    use prost::Message;
    let model_bytes =
        std::fs::read(dir.join("model.onnx")).map_err(|e| CaseError::Fail(format!("cannot read model: {e}")))?;
    let model = proto::ModelProto::decode(&model_bytes[..]).map_err(|e| CaseError::Fail(format!("decode: {e}")))?;
    // Non-tensor inputs (sequence, optional) have no TensorProto data: let the importer say why.
    if let Err(e @ ImportError::UnsupportedTypeKind { .. }) = import_model(&model_bytes, &ImportOptions::default()) {
        return Err(CaseError::Skip(e.to_string()));
    }
    let g = model.graph.unwrap_or_default();
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    let input_names: Vec<&str> = g.input.iter().map(|i| i.name.as_str()).filter(|n| !inits.contains(n)).collect();
    let data = dir.join("test_data_set_0");
    let mut options = ImportOptions::default();
    for (i, name) in input_names.iter().enumerate() {
        match read_pb(&data.join(format!("input_{i}.pb"))) {
            Err(e) => return Err(CaseError::Skip(format!("input not a tensor ({e})"))),
            Ok(Err(e)) => return Err(CaseError::Skip(e)),
            Ok(Ok(t)) => {
                options.known_values.insert(name.to_string(), t);
            }
        }
    }
    let mut expected = Vec::new();
    for i in 0..g.output.len() {
        match read_pb(&data.join(format!("output_{i}.pb"))) {
            Err(e) => return Err(CaseError::Skip(format!("output not a tensor ({e})"))),
            Ok(Err(e)) => return Err(CaseError::Skip(e)),
            Ok(Ok(t)) => expected.push(t),
        }
    }
    let graph = match import_model(&model_bytes, &options) {
        Ok(g) => g,
        Err(e @ (ImportError::UnsupportedDtype { .. } | ImportError::UnsupportedTypeKind { .. })) => {
            return Err(CaseError::Skip(e.to_string()));
        }
        Err(e @ ImportError::TrainingMode { .. }) => {
            return Err(CaseError::Skip(format!("needs training/randomness: {e}")));
        }
        Err(e) => return Err(CaseError::Fail(format!("import: {e}"))),
    };
    crate::verify(&graph).map_err(|e| CaseError::Fail(e.to_string()))?;
    let inputs = graph.inputs.iter().map(|&id| options.known_values[&graph.value(id).name].clone()).collect();
    Ok(ConformanceCase { graph, inputs, expected })
}

/// The conformance case folders, sorted: those of `shared/conformance/onnx-node` plus the
/// tests of `onnx-node-all` pinned in `ir/tests/conformance_pinned.txt` (the newly supported
/// ops'), or with `HERON_CONFORMANCE=all` every test of `onnx-node-all`.
pub fn conformance_dirs() -> Vec<PathBuf> {
    let list = |root: &std::path::Path| -> Vec<PathBuf> {
        std::fs::read_dir(root)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display()))
            .map(|e| e.expect("dir entry").path())
            .collect()
    };
    let mut dirs = list(&shared_dir().join(conformance_suite()));
    if !full_conformance() {
        let pinned = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance_pinned.txt");
        let text = std::fs::read_to_string(&pinned).unwrap_or_else(|e| panic!("{}: {e}", pinned.display()));
        let all = shared_dir().join("conformance/onnx-node-all");
        let names = text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty());
        dirs.extend(names.map(|n| all.join(n)));
    }
    dirs.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    dirs.dedup_by(|a, b| a.file_name() == b.file_name());
    dirs
}

/// The node suite the conformance runners use: the 409 tests CI runs (`conformance/onnx-node`),
/// or, with `HERON_CONFORMANCE=all`, all 1,884 of the onnx wheel (`conformance/onnx-node-all`),
/// whose summary is printed without checking the pinned skip list.
pub fn conformance_suite() -> &'static str {
    if full_conformance() { "conformance/onnx-node-all" } else { "conformance/onnx-node" }
}

fn full_conformance() -> bool {
    std::env::var("HERON_CONFORMANCE").is_ok_and(|v| v == "all")
}

/// Runs the three stages of `graph` on `inputs` and compares each with the graph interpreter.
/// Returns the graph interpreter's outputs.
pub fn check_stages(graph: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    check_stages_with(graph, inputs, |_| {})
}

/// Like [`check_stages`], with `annotate` adding layout transforms to the lowered module first.
pub fn check_stages_with(
    graph: &Graph,
    inputs: &[Tensor],
    annotate: impl FnOnce(&mut crate::loop_ir::Module),
) -> Vec<Tensor> {
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
    want
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

/// Runs `case` on every conformance folder, prints the reason of every skip and failure and a
/// passed / failed / skipped summary labelled `engine`, and panics on any failure.
///
/// The skips are pinned: `skips` is a file listing the expected skipped cases, one name per line
/// (`#` starts a comment). A case skipped but not listed, or listed but not skipped, fails the
/// run, so a regression cannot hide as a new skip; `HERON_BLESS=1` rewrites the file.
pub fn run_conformance(
    engine: &str,
    skips: &std::path::Path,
    mut case: impl FnMut(&std::path::Path) -> Result<(), CaseError>,
) {
    let dirs = conformance_dirs();
    assert!(dirs.len() >= 400, "expected the 409 conformance tests, found {}", dirs.len());
    let (mut pass, mut fail, mut skip) = (0, Vec::new(), Vec::new());
    for d in &dirs {
        let name = d.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        match case(d) {
            Ok(()) => pass += 1,
            Err(CaseError::Skip(r)) => skip.push((name, r)),
            Err(CaseError::Fail(r)) => fail.push((name, r)),
        }
    }
    for (n, r) in &skip {
        println!("skipped {n}: {r}");
    }
    for (n, r) in &fail {
        println!("FAILED {n}: {r}");
    }
    println!(
        "{} conformance ({engine}): {pass} passed, {} failed, {} skipped",
        conformance_suite(),
        fail.len(),
        skip.len()
    );
    if full_conformance() {
        return;
    }
    assert!(fail.is_empty(), "{} conformance failures", fail.len());
    let skipped: std::collections::BTreeSet<&str> = skip.iter().map(|(n, _)| n.as_str()).collect();
    if std::env::var_os("HERON_BLESS").is_some() {
        let mut text = format!("# Conformance cases expected to be skipped ({engine}); see run_conformance.\n");
        skipped.iter().for_each(|n| text.push_str(&format!("{n}\n")));
        std::fs::write(skips, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", skips.display()));
        return;
    }
    let listed_text = std::fs::read_to_string(skips)
        .unwrap_or_else(|e| panic!("{}: {e} (run with HERON_BLESS=1 to create it)", skips.display()));
    let listed: std::collections::BTreeSet<&str> =
        listed_text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect();
    let new: Vec<&&str> = skipped.difference(&listed).collect();
    let gone: Vec<&&str> = listed.difference(&skipped).collect();
    assert!(new.is_empty(), "{engine}: newly skipped (not in {}): {new:?}", skips.display());
    assert!(gone.is_empty(), "{engine}: listed in {} but no longer skipped (remove them): {gone:?}", skips.display());
}

/// The static library `lib<name>*.a` cargo built into the deps directory next to the running
/// test (the newest, should several builds have left one): for C programs the tests link.
pub fn static_library(name: &str) -> PathBuf {
    let deps = std::env::current_exe().expect("test path").parent().expect("deps dir").to_path_buf();
    let prefix = format!("lib{name}");
    std::fs::read_dir(&deps)
        .expect("deps dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let file = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            file.starts_with(&prefix) && file.ends_with(".a")
        })
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("{prefix}*.a in {}", deps.display()))
}
