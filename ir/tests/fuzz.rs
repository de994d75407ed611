//! Fuzz targets of the front end, on stable Rust (see `heron_ir::testing::fuzz`): ONNX bytes
//! through import, verification, the passes, lowering and the interpreter; `.npy` bytes
//! through the reader; loop-IR text through the parser, the verifier and the printer. Any
//! panic is a finding (reported with its seed); errors are the expected outcome.
//! `HERON_FUZZ_CASES=N` (and `HERON_FUZZ_SEED=S`) run more.

use std::panic::{AssertUnwindSafe, catch_unwind};

use heron_ir::loop_ir::parse::parse_module;
use heron_ir::loop_ir::print::{ConstData, print_module};
use heron_ir::loop_ir::verify::verify_module;
use heron_ir::loop_ir::{flatten, layout};
use heron_ir::npy::{parse_npy, write_npy};
use heron_ir::onnx::{ImportOptions, import_model};
use heron_ir::testing::adversarial::{Scale, corpus};
use heron_ir::testing::fuzz::{Rng, mutate_bytes, mutate_text, random_model, seeds};
use heron_ir::testing::shared_dir;
use heron_ir::{Graph, Tensor, interp, lower, passes, verify};

/// Runs `case` for every seed, collecting the seeds that panic.
fn fuzz(target: &str, default_cases: u64, mut case: impl FnMut(u64)) {
    let range = seeds(default_cases);
    let count = range.end - range.start;
    let mut failed = Vec::new();
    for seed in range {
        if catch_unwind(AssertUnwindSafe(|| case(seed))).is_err() {
            failed.push(seed);
        }
    }
    println!("{target}: {count} cases, {} panicked", failed.len());
    assert!(
        failed.is_empty(),
        "{target}: seeds {failed:?} panicked (rerun one with HERON_FUZZ_SEED=S HERON_FUZZ_CASES=1)"
    );
}

/// Small, varied ONNX models to mutate: the adversarial corpus at a small scale and the small
/// reference models.
fn onnx_seeds() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> =
        corpus(Scale { chain: 40, fan_in: 40, outputs: 20 }).into_iter().map(|c| c.model).collect();
    for name in ["tiny_relu", "mlp", "lenet"] {
        v.push(std::fs::read(shared_dir().join(format!("reference/{name}.onnx"))).expect("reference model"));
    }
    v
}

/// A graph is small enough to interpret in a fuzz case.
fn small(graph: &Graph) -> bool {
    graph.values.iter().all(|v| v.ty.size_bytes() <= 1 << 20)
}

/// Everything after import: verify, optimize, lower and verify, interpret on zeros.
fn exercise(graph: Graph) {
    if verify(&graph).is_err() {
        return;
    }
    if small(&graph) {
        let inputs: Vec<Tensor> = graph.inputs.iter().map(|&i| Tensor::zeros(graph.ty(i))).collect();
        let _ = interp::run(&graph, &inputs);
    }
    let mut g = graph;
    passes::optimize(&mut g);
    if let Ok(mut m) = lower::lower(&g) {
        verify_module(&m).expect("lowering makes verified modules");
        if layout::apply_layout_transforms(&mut m).is_ok() {
            flatten::flatten(&mut m);
            verify_module(&m).expect("flattening keeps modules verified");
        }
    }
}

#[test]
fn fuzz_onnx_import() {
    let bases = onnx_seeds();
    fuzz("onnx import", 400, |seed| {
        let mut rng = Rng::new(seed);
        let bytes = if rng.chance(0.3) {
            random_model(&mut rng).0
        } else {
            let base = &bases[rng.below(bases.len())];
            mutate_bytes(&mut rng, base)
        };
        if let Ok(graph) = import_model(&bytes, &ImportOptions::default()) {
            exercise(graph);
        }
    });
}

#[test]
fn fuzz_random_models() {
    fuzz("random models", 300, |seed| {
        let mut rng = Rng::new(seed);
        let (bytes, inputs) = random_model(&mut rng);
        let Ok(graph) = import_model(&bytes, &ImportOptions::default()) else { return };
        if verify(&graph).is_ok() && small(&graph) {
            let _ = interp::run(&graph, &inputs);
        }
        exercise(graph);
    });
}

#[test]
fn fuzz_npy() {
    let tmp = tempfile::Builder::new().prefix("heron-fuzz-npy-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let samples = [
        Tensor::from_vec::<f32>(&[2, 3], vec![1.0; 6]).unwrap(),
        Tensor::from_vec::<i64>(&[0, 4], vec![]).unwrap(),
        Tensor::from_vec::<u8>(&[5], vec![1, 2, 3, 4, 5]).unwrap(),
        Tensor::from_vec::<bool>(&[], vec![true]).unwrap(),
    ];
    let mut bases: Vec<Vec<u8>> = samples
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let p = dir.join(format!("{i}.npy"));
            write_npy(&p, t).expect("write");
            std::fs::read(&p).expect("read back")
        })
        .collect();
    bases.push(f16_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }", &[1.0, -2.5, 0.0, 65504.0]));
    let _ = std::fs::remove_dir_all(&dir);
    fuzz("npy", 3000, |seed| {
        let mut rng = Rng::new(seed);
        let base = &bases[rng.below(bases.len())];
        let bytes = if rng.chance(0.5) {
            mutate_bytes(&mut rng, base)
        } else {
            // Edit the header dictionary as text and fix its length field.
            let header_len = u16::from_le_bytes([base[8], base[9]]) as usize;
            let text = String::from_utf8_lossy(&base[10..10 + header_len]).into_owned();
            let text = mutate_text(&mut rng, &text);
            let mut b = base[..8].to_vec();
            b.extend_from_slice(&(text.len().min(u16::MAX as usize) as u16).to_le_bytes());
            b.extend_from_slice(text.as_bytes());
            b.extend_from_slice(&base[10 + header_len..]);
            b
        };
        if let Ok(t) = parse_npy(&bytes, "fuzz.npy") {
            assert_eq!(t.len(), t.shape().iter().product::<usize>());
        }
    });
}

/// A version-1 `.npy` file of f16 values with the header dictionary `dict`.
fn f16_npy(dict: &str, values: &[f32]) -> Vec<u8> {
    let mut header = dict.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.extend(values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()));
    b
}

#[test]
fn f16_npy_files_read_in_c_order() {
    let values = [1.0, -2.5, 0.0, 65504.0, 0.099975586, -0.0];
    let t =
        parse_npy(&f16_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", &values), "x.npy").unwrap();
    assert_eq!((t.dtype(), t.shape()), (heron_ir::DType::F16, &[2usize, 3][..]));
    assert_eq!(t.to_f64_vec(), values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    let fortran = f16_npy("{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3), }", &values);
    assert!(parse_npy(&fortran, "x.npy").unwrap_err().to_string().contains("Fortran order"));
    let short = f16_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 4), }", &values);
    assert!(parse_npy(&short, "x.npy").unwrap_err().to_string().contains("needs more data"));
}

#[test]
fn fuzz_loop_ir_text() {
    let mut texts = Vec::new();
    for seed in 0..40 {
        let mut rng = Rng::new(1000 + seed);
        let Ok(graph) = import_model(&random_model(&mut rng).0, &ImportOptions::default()) else { continue };
        let Ok(mut m) = lower::lower(&graph) else { continue };
        texts.push(print_module(&m, ConstData::Full));
        if layout::apply_layout_transforms(&mut m).is_ok() {
            flatten::flatten(&mut m);
            texts.push(print_module(&m, ConstData::Full));
        }
    }
    assert!(texts.len() > 20, "enough seed programs");
    fuzz("loop-IR text", 400, |seed| {
        let mut rng = Rng::new(seed);
        let base = &texts[rng.below(texts.len())];
        let text = mutate_text(&mut rng, base);
        let Ok(m) = parse_module(&text) else { return };
        if verify_module(&m).is_ok() {
            let printed = print_module(&m, ConstData::Full);
            let again = parse_module(&printed).expect("printed modules parse");
            // Compared as text: a NaN literal is never equal to itself.
            assert_eq!(print_module(&again, ConstData::Full), printed, "print and parse round-trip");
        }
    });
    // Nesting deeper than any pass may recurse through is refused by the parser.
    let deep = format!("func @f() {{\n{}{}\n}}\n", "{\n".repeat(100_000), "}\n".repeat(100_000));
    let e = parse_module(&deep).expect_err("too deep");
    assert!(e.to_string().contains("nested more than"), "{e}");
    let deep = format!(
        "func @f(%a: f32[1]) {{\n  %a[0] = {}%a[0]{}\n}}\n",
        "(".repeat(100_000),
        " + f32(1.0))".repeat(100_000)
    );
    let e = parse_module(&deep).expect_err("too deep");
    assert!(e.to_string().contains("nested more than"), "{e}");
}
