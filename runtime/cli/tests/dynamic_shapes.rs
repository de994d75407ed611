//! Symbolic dimensions: torchvision's ResNet-18 with its batch dimension made symbolic (as
//! `torch.onnx.export(..., dynamic_axes={"input": {0: "batch"}})` declares it) runs at batch 1
//! and 4 through the API (one compile per shape, cached) and the CLI (batch taken from the
//! input file, or `--input-shape` / `--dim`, else 1 on generated inputs); unbound dimensions
//! are a clear error where nothing can bind them (an AOT object).

use std::path::{Path, PathBuf};
use std::process::Command;

use heron_ir::Tensor;
use heron_ir::npy::{read_npy, write_npy};
use heron_ir::onnx::ImportOptions;
use heron_ir::onnx::proto::{ModelProto, ValueInfoProto, tensor_shape_proto::dimension::Value as Dim, type_proto};
use heron_ir::testing::{assert_float_rule, shared_dir};
use heron_runtime::{CompileOptions, DynamicModel, Model};
use prost::Message;

/// A fresh directory, removed when the value drops.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("heron-dyn-{name}-")).tempdir().unwrap()
}

fn make_batch_symbolic(v: &mut ValueInfoProto) {
    let Some(type_proto::Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) else {
        panic!("tensor input")
    };
    t.shape.as_mut().unwrap().dim[0].value = Some(Dim::DimParam("batch".into()));
}

/// resnet18.onnx with input and output dimension 0 named `batch`.
fn dynamic_resnet18(dir: &Path) -> PathBuf {
    let bytes = std::fs::read(shared_dir().join("reference/resnet18.onnx")).unwrap();
    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    g.input.iter_mut().for_each(make_batch_symbolic);
    g.output.iter_mut().for_each(make_batch_symbolic);
    let path = dir.join("resnet18_dynamic.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path
}

/// The stored input repeated `n` times along the batch axis.
fn batch_of(x: &Tensor, n: usize) -> Tensor {
    let v: Vec<f32> = x.to_f64_vec().iter().map(|&f| f as f32).collect();
    let mut shape = x.shape().to_vec();
    shape[0] = n;
    Tensor::from_vec(&shape, v.repeat(n)).unwrap()
}

/// Every batch row of `got` matches the reference output.
fn check_rows(got: &Tensor, want: &Tensor, n: usize) {
    assert_eq!(got.shape()[0], n);
    let row = want.len();
    let g = got.to_f64_vec();
    for b in 0..n {
        let r = Tensor::from_vec(want.shape(), g[b * row..(b + 1) * row].iter().map(|&f| f as f32).collect()).unwrap();
        assert_float_rule(&r, want).unwrap_or_else(|e| panic!("batch row {b}: {e}"));
    }
}

fn reference() -> (Tensor, Tensor) {
    let dir = shared_dir().join("reference");
    (read_npy(&dir.join("resnet18.input.npy")).unwrap(), read_npy(&dir.join("resnet18.ref.npy")).unwrap())
}

#[test]
fn api_compiles_once_per_shape_and_matches_onnx_runtime() {
    let tmp = scratch("api");
    let dir = tmp.path();
    let path = dynamic_resnet18(dir);
    let (x, want) = reference();
    let options = CompileOptions { threads: 1, ..CompileOptions::default() };
    let model = DynamicModel::load(&path, ImportOptions::default(), options).unwrap();
    assert!(model.is_dynamic());
    assert_eq!(model.inputs()[0].dims[0].to_string(), "batch");
    let one = model.run(std::slice::from_ref(&x)).unwrap();
    check_rows(&one[0], &want, 1);
    let four = model.run(&[batch_of(&x, 4)]).unwrap();
    check_rows(&four[0], &want, 4);
    assert_eq!(model.cached(), 2);
    assert_eq!(model.run(&[x]).unwrap(), one, "the cached specialization gives the same bits");
    assert_eq!(model.cached(), 2);
    // Without a binding, importing says how to give one.
    let err = Model::load(&path).unwrap_err().to_string();
    assert!(err.contains("symbolic dimension") && err.contains("--input-shape") && err.contains("--dim"), "{err}");
}

fn heron(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_heron")).args(args).output().expect("run heron");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn cli_takes_the_batch_from_the_input_or_from_flags() {
    let tmp = scratch("cli");
    let dir = tmp.path();
    let path = dynamic_resnet18(dir);
    let model = path.to_str().unwrap();
    let (x, want) = reference();
    for n in [1, 4] {
        let input = dir.join(format!("x{n}.npy"));
        write_npy(&input, &batch_of(&x, n)).unwrap();
        let out_dir = dir.join(format!("out{n}"));
        let (ok, text) =
            heron(&["run", model, "--input", input.to_str().unwrap(), "--output-dir", out_dir.to_str().unwrap()]);
        assert!(ok, "{text}");
        assert!(text.contains(&format!("f32 [{n}, 1000]")), "{text}");
        check_rows(&read_npy(&out_dir.join("output.npy")).unwrap(), &want, n);
    }
    let (ok, text) =
        heron(&["compile", model, "--name", "r18", "-o", dir.join("aot").to_str().unwrap(), "--dim", "batch=2"]);
    assert!(ok, "{text}");
    let (ok, text) = heron(&["inspect", model, "--input-shape", "input=3,3,224,224"]);
    assert!(ok && text.contains("[3, 1000]"), "{text}");
    // On generated inputs (no file to take the batch from), a free batch is 1, with a note.
    let (ok, text) = heron(&["bench", model, "--runs", "2", "--warmup", "0"]);
    assert!(ok && text.contains("bound to 1 for the generated inputs: input's batch"), "{text}");
    let (ok, text) = heron(&["run", model, "--dim", "batch=2"]);
    assert!(ok && text.contains("f32 [2, 1000]") && !text.contains("bound to 1"), "{text}");
    // Unbound, conflicting or mismatching shapes are clear errors.
    let (ok, text) = heron(&["compile", model, "--name", "r18", "-o", dir.join("aot2").to_str().unwrap()]);
    assert!(!ok && text.contains("symbolic dimension") && text.contains("AOT"), "{text}");
    let (ok, text) = heron(&["inspect", model, "--input-shape", "input=1,3,200,224"]);
    assert!(!ok && text.contains("is declared"), "{text}");
    let (ok, text) = heron(&["inspect", model, "--input-shape", "nope=1"]);
    assert!(!ok && text.contains("no graph input is named 'nope'"), "{text}");
    let (ok, text) = heron(&["inspect", model, "--dim", "batch=x"]);
    assert!(!ok && text.contains("NAME=N"), "{text}");
}

/// Small BERT and GPT-2 encoders exported by torch with symbolic `batch` and `sequence`
/// (`runtime/tests/data/dynamic/make_models.py`), run at batch 1 (5 tokens) and 4 (12 tokens,
/// the last row padded) against ONNX Runtime's outputs.
#[test]
fn transformers_with_symbolic_batch_and_sequence() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/dynamic");
    for name in ["bert_dyn", "gpt2_dyn"] {
        let model =
            DynamicModel::load(dir.join(format!("{name}.onnx")), ImportOptions::default(), CompileOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(model.inputs()[0].dims.iter().map(|d| d.to_string()).collect::<Vec<_>>(), ["batch", "sequence"]);
        for b in [1, 4] {
            let load = |what: &str| read_npy(&dir.join(format!("{name}.b{b}.{what}.npy"))).unwrap();
            let got = model.run(&[load("input_ids"), load("attention_mask")]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_float_rule(&got[0], &load("ref")).unwrap_or_else(|e| panic!("{name} at batch {b}: {e}"));
        }
        assert_eq!(model.cached(), 2);
    }
}
