//! Bad input of every kind gets a one-line error and a non-zero exit from `heron`, never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

use heron_ir::npy::write_npy;
use heron_ir::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use heron_ir::onnx::tensor_to_proto;
use heron_ir::{DType, Tensor};
use prost::Message;

fn shared() -> PathBuf {
    std::env::var("HERON_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
}

fn mlp() -> PathBuf {
    shared().join("reference/mlp.onnx")
}

/// A path in a fresh directory, removed (with whatever was written there) when this drops.
struct ScratchFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl std::ops::Deref for ScratchFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ScratchFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

fn scratch(name: &str) -> ScratchFile {
    let dir = tempfile::Builder::new().prefix("heron-bad-input-").tempdir().unwrap();
    ScratchFile { path: dir.path().join(name), _dir: dir }
}

/// Runs `heron args...` and checks it fails cleanly with an error mentioning every `needle`.
fn fails_with(args: &[&str], needles: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_heron")).args(args).output().expect("run heron");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "heron {args:?} succeeded; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "heron {args:?} panicked: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "heron {args:?}: expected one error line, got: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "heron {args:?}: error lacks '{n}': {stderr}");
    }
}

fn tensor_type(elem: i32, dims: &[i64]) -> Option<TypeProto> {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension { value: Some(tensor_shape_proto::dimension::Value::DimValue(d)) })
        .collect();
    Some(TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: elem,
            shape: Some(TensorShapeProto { dim }),
        })),
    })
}

fn value_info(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto { name: name.into(), r#type: tensor_type(elem, dims) }
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(opset: i64, graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: opset }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// A graph with input x: f32[2, 3], output y, and the given nodes and initializers.
fn graph(nodes: Vec<NodeProto>, inits: Vec<TensorProto>) -> GraphProto {
    GraphProto {
        node: nodes,
        name: "g".into(),
        initializer: inits,
        input: vec![value_info("x", 1, &[2, 3])],
        output: vec![ValueInfoProto { name: "y".into(), r#type: None }],
        ..Default::default()
    }
}

fn write_model(name: &str, m: &ModelProto) -> ScratchFile {
    let p = scratch(name);
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn truncated_protobuf() {
    let bytes = std::fs::read(mlp()).unwrap();
    let p = scratch("truncated.onnx");
    std::fs::write(&p, &bytes[..bytes.len() / 3]).unwrap();
    fails_with(&["run", s(&p)], &["not a valid ONNX model"]);
}

#[test]
fn random_bytes() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 7;
            x ^= x >> 9;
            x as u8
        })
        .collect();
    let p = scratch("random.onnx");
    std::fs::write(&p, bytes).unwrap();
    fails_with(&["run", s(&p)], &["error"]);
}

#[test]
fn missing_model_file() {
    fails_with(&["run", "/nonexistent/model.onnx"], &["cannot read", "/nonexistent/model.onnx"]);
    fails_with(&["inspect", "/nonexistent/model.onnx"], &["cannot read"]);
}

#[test]
fn missing_initializer() {
    let g = graph(vec![node("MatMul", "mm", &["x", "W"], &["y"])], vec![]);
    let p = write_model("missing_init.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'mm'", "'W'"]);
}

#[test]
fn dangling_node_input() {
    let g = graph(vec![node("Relu", "r", &["ghost"], &["y"])], vec![]);
    let p = write_model("dangling.onnx", &model(13, g));
    fails_with(&["inspect", s(&p)], &["'r'", "'ghost'"]);
}

#[test]
fn cycle() {
    let g = graph(
        vec![
            node("Add", "a", &["x", "b_out"], &["a_out"]),
            node("Relu", "b", &["a_out"], &["b_out"]),
            node("Relu", "c", &["a_out"], &["y"]),
        ],
        vec![],
    );
    let p = write_model("cycle.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["cycle"]);
}

#[test]
fn shape_mismatch() {
    let w = tensor_to_proto("w", &Tensor::from_vec::<f32>(&[4], vec![1.0; 4]).unwrap());
    let g = graph(vec![node("Add", "add", &["x", "w"], &["y"])], vec![w]);
    let p = write_model("shape_mismatch.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'add'", "broadcast"]);
}

#[test]
fn conv_channel_mismatch() {
    let mut g =
        graph(vec![], vec![tensor_to_proto("w", &Tensor::from_vec::<f32>(&[1, 5, 1, 1], vec![1.0; 5]).unwrap())]);
    g.input = vec![value_info("x", 1, &[1, 3, 4, 4])];
    g.node = vec![node("Conv", "conv", &["x", "w"], &["y"])];
    let p = write_model("conv_mismatch.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'conv'", "channels"]);
}

#[test]
fn unsupported_op() {
    let g = graph(vec![node("TfIdfVectorizer", "tfidf_1", &["x"], &["y"])], vec![]);
    let p = write_model("unsupported_op.onnx", &model(17, g));
    fails_with(&["run", s(&p)], &["TfIdfVectorizer", "tfidf_1", "opset 17"]);
}

#[test]
fn data_dependent_output_shape() {
    let g = graph(vec![node("NonMaxSuppression", "nms_1", &["x"], &["y"])], vec![]);
    let p = write_model("nms.onnx", &model(17, g));
    fails_with(&["run", s(&p)], &["NonMaxSuppression", "nms_1", "depends on the data"]);
    let g = graph(vec![node("NonZero", "nz", &["x"], &["y"])], vec![]);
    let p = write_model("nonzero.onnx", &model(17, g));
    fails_with(&["run", s(&p)], &["NonZero", "nz", "depends on the data"]);
}

#[test]
fn unsupported_domain() {
    let mut n = node("Relu", "ms_relu", &["x"], &["y"]);
    n.domain = "com.microsoft".into();
    let p = write_model("domain.onnx", &model(13, graph(vec![n], vec![])));
    fails_with(&["run", s(&p)], &["Relu", "com.microsoft", "ms_relu"]);
}

#[test]
fn unsupported_dtype() {
    let mut g = graph(vec![node("Relu", "r", &["x"], &["y"])], vec![]);
    g.input = vec![value_info("x", 16, &[2, 3])]; // BFLOAT16
    let p = write_model("bf16.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["BFLOAT16"]);
}

#[test]
fn opset_too_old() {
    let p = write_model("old.onnx", &model(6, graph(vec![node("Relu", "r", &["x"], &["y"])], vec![])));
    fails_with(&["run", s(&p)], &["opset 6"]);
}

#[test]
fn model_without_graph() {
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 13 }],
        ..Default::default()
    };
    let p = write_model("nograph.onnx", &m);
    fails_with(&["inspect", s(&p)], &["no graph"]);
}

#[test]
fn dynamic_input_shape() {
    let mut g = graph(vec![node("Relu", "r", &["x"], &["y"])], vec![]);
    let mut vi = value_info("x", 1, &[2, 3]);
    if let Some(TypeProto { value: Some(type_proto::Value::TensorType(t)) }) = &mut vi.r#type {
        t.shape.as_mut().unwrap().dim[0].value = Some(tensor_shape_proto::dimension::Value::DimParam("batch".into()));
    }
    g.input = vec![vi];
    let p = write_model("dynamic.onnx", &model(13, g));
    // `heron run` binds a free batch to 1 on generated inputs; an AOT object cannot.
    let out = p.path.with_extension("aot");
    fails_with(&["compile", s(&p), "--name", "dynamic", "-o", out.to_str().unwrap()], &["'x'", "batch", "AOT"]);
}

#[test]
fn reshape_shape_not_constant() {
    let mut g = graph(vec![node("Reshape", "reshape", &["x", "shape"], &["y"])], vec![]);
    g.input.push(value_info("shape", 7, &[1]));
    let p = write_model("reshape_dynamic.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'reshape'", "'shape'", "compile time"]);
}

#[test]
fn external_data_file_missing() {
    let mut w = tensor_to_proto("w", &Tensor::from_vec::<f32>(&[3], vec![1.0; 3]).unwrap());
    w.raw_data.clear();
    w.data_location = 1;
    w.external_data = vec![StringStringEntryProto { key: "location".into(), value: "weights.bin".into() }];
    let g = graph(vec![node("Add", "add", &["x", "w"], &["y"])], vec![w]);
    let p = write_model("external.onnx", &model(13, g));
    // The data file is read from beside the model; here it does not exist.
    fails_with(&["run", s(&p)], &["tensor 'w'", "external data", "weights.bin"]);
}

#[test]
fn initializer_with_wrong_byte_count() {
    let mut w = tensor_to_proto("w", &Tensor::from_vec::<f32>(&[3], vec![1.0; 3]).unwrap());
    w.raw_data.truncate(7);
    let g = graph(vec![node("Add", "add", &["x", "w"], &["y"])], vec![w]);
    let p = write_model("short_raw.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'w'", "7 bytes"]);
}

#[test]
fn bad_attribute() {
    let mut n = node("Conv", "conv", &["x", "w"], &["y"]);
    n.attribute =
        vec![AttributeProto { name: "auto_pad".into(), r#type: 3, s: b"SIDEWAYS".to_vec(), ..Default::default() }];
    let mut g = graph(vec![n], vec![tensor_to_proto("w", &Tensor::from_vec::<f32>(&[1, 1, 1, 1], vec![1.0]).unwrap())]);
    g.input = vec![value_info("x", 1, &[1, 1, 4, 4])];
    let p = write_model("bad_attr.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'conv'", "auto_pad", "SIDEWAYS"]);
}

#[test]
fn declared_output_type_disagrees() {
    let mut g = graph(vec![node("Relu", "r", &["x"], &["y"])], vec![]);
    g.output = vec![value_info("y", 1, &[3, 2])];
    let p = write_model("out_mismatch.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'y'", "declared"]);
}

#[test]
fn undefined_graph_output() {
    let mut g = graph(vec![node("Relu", "r", &["x"], &["z"])], vec![]);
    g.output = vec![value_info("y", 1, &[2, 3])];
    let p = write_model("no_output.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'y'"]);
}

#[test]
fn value_defined_twice() {
    let g = graph(vec![node("Relu", "a", &["x"], &["y"]), node("Relu", "b", &["x"], &["y"])], vec![]);
    let p = write_model("twice.onnx", &model(13, g));
    fails_with(&["run", s(&p)], &["'y'", "more than once"]);
}

fn write_input(name: &str, t: &Tensor) -> ScratchFile {
    let p = scratch(name);
    write_npy(&p, t).unwrap();
    p
}

#[test]
fn wrong_input_count() {
    let a = write_input("mlp_a.npy", &Tensor::zeros(&heron_ir::TensorType::new(DType::F32, vec![1, 784])));
    fails_with(&["run", s(&mlp()), "--input", s(&a), "--input", s(&a)], &["takes 1 input,", "got 2"]);
}

#[test]
fn wrong_input_shape() {
    let a = write_input("mlp_shape.npy", &Tensor::zeros(&heron_ir::TensorType::new(DType::F32, vec![1, 10])));
    fails_with(&["run", s(&mlp()), "--input", s(&a)], &["f32[1, 784]", "f32[1, 10]"]);
}

#[test]
fn wrong_input_dtype() {
    let a = write_input("mlp_dtype.npy", &Tensor::zeros(&heron_ir::TensorType::new(DType::I32, vec![1, 784])));
    fails_with(&["run", s(&mlp()), "--input", s(&a)], &["f32[1, 784]", "i32[1, 784]"]);
}

#[test]
fn unknown_input_name() {
    let a = write_input("mlp_named.npy", &Tensor::zeros(&heron_ir::TensorType::new(DType::F32, vec![1, 784])));
    let arg = format!("nosuchinput={}", s(&a));
    fails_with(&["run", s(&mlp()), "--input", &arg], &["no input named 'nosuchinput'"]);
}

#[test]
fn unreadable_npy() {
    fails_with(&["run", s(&mlp()), "--input", "/nonexistent/x.npy"], &["cannot read", "/nonexistent/x.npy"]);
}

#[test]
fn invalid_npy() {
    let p = scratch("garbage.npy");
    std::fs::write(&p, b"this is not numpy data at all").unwrap();
    fails_with(&["run", s(&mlp()), "--input", s(&p)], &["not a valid .npy"]);
    let mut header = b"\x93NUMPY\x01\x00".to_vec();
    let dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 784), }          \n";
    header.extend((dict.len() as u16).to_le_bytes());
    header.extend(dict);
    header.extend([0u8; 100]); // far fewer than 784 floats
    let p = scratch("short.npy");
    std::fs::write(&p, header).unwrap();
    fails_with(&["run", s(&mlp()), "--input", s(&p)], &["not a valid .npy"]);
}

#[test]
fn unsupported_npy_dtype() {
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let dict = b"{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }              \n";
    bytes.extend((dict.len() as u16).to_le_bytes());
    bytes.extend(dict);
    bytes.extend([0u8; 8]);
    let p = scratch("complex.npy");
    std::fs::write(&p, bytes).unwrap();
    fails_with(&["run", s(&mlp()), "--input", s(&p)], &["<c8"]);
}

#[test]
fn output_dir_is_a_file() {
    let a = write_input("ok_input.npy", &Tensor::zeros(&heron_ir::TensorType::new(DType::F32, vec![1, 784])));
    let file = scratch("not_a_dir");
    std::fs::write(&file, b"x").unwrap();
    fails_with(&["run", s(&mlp()), "--input", s(&a), "--output-dir", s(&file)], &["not_a_dir"]);
}

#[test]
fn bad_index_maps() {
    fails_with(&["layout", "--shape", "8,8", "--map", "lambda a, b: [a + b]"], &["not injective"]);
    fails_with(&["layout", "--shape", "8", "--map", "lambda a, b: [a, b]"], &["rank 1"]);
    fails_with(&["layout", "--shape", "8", "--map", "lambda a: [z]"], &["unknown variable 'z'"]);
    fails_with(&["layout", "--shape", "8", "--map", "lambda a: [a,"], &["malformed index map"]);
    fails_with(&["layout", "--shape", "8", "--map", "lambda a: [a]", "--index", "9"], &["outside shape"]);
}

#[test]
fn bad_pool_flags_and_plans() {
    let m = mlp();
    let m = s(&m);
    fails_with(&["plan", m, "--workspace-pool", "sram:size_hint"], &["not key=value"]);
    fails_with(&["plan", m, "--workspace-pool", "sram:color=red"], &["unknown key 'color'"]);
    fails_with(&["plan", m, "--workspace-pool", "sram:size_hint=lots"], &["not a byte count"]);
    fails_with(&["plan", m, "--workspace-pool", ":size_hint=5"], &["non-empty name"]);
    fails_with(&["plan", m, "--workspace-pool", "sram:targets=gpu"], &["known targets"]);
    fails_with(&["plan", m, "--workspace-pool", "a", "--workspace-pool", "a"], &["pool 'a' is defined twice"]);
    fails_with(
        &["plan", m, "--workspace-pool", "tiny:size_hint=100"],
        &["fits none of its candidate pools", "tiny (limit 100"],
    );
    let planning = scratch("unknown_pool.json");
    std::fs::write(
        &planning,
        r#"{"pools":[{"name":"p"}],"buffers":[{"name":"a","size_bytes":8,"pool_candidates":["q"]}]}"#,
    )
    .unwrap();
    fails_with(&["plan", "--buffers", s(&planning)], &["unknown pool 'q'"]);
}

#[test]
fn bad_compile_flags() {
    let m = mlp();
    let m = s(&m);
    let out = scratch("compile-out");
    let compile = |extra: &[&str], needles: &[&str]| {
        let mut args = vec!["compile", m, "--name", "mlp", "-o", s(&out)];
        args.extend_from_slice(extra);
        fails_with(&args, needles);
    };
    compile(&["--workspace-pool", "tiny:size_hint=100"], &["fits none of its candidate pools", "tiny (limit 100"]);
    compile(&["--workspace-pool", "a", "--parameter-pool", "a"], &["pool 'a' is defined twice"]);
    compile(&["--parameter-pool", "w:size_hint=10"], &["fits none of its candidate pools", "w (limit 10"]);
    compile(&["--workspace-pool", "a:size_hint"], &["not key=value"]);
    fails_with(&["compile", m, "--name", "../x", "-o", s(&out)], &["not a valid model name"]);
    // Flag syntax errors come from clap, with a usage hint after the message.
    for (args, needle) in [
        (vec!["compile", m, "--name", "mlp", "-o", s(&out), "--target-cpu", "pentium"], "unknown target CPU 'pentium'"),
        (vec!["compile", m, "-o", s(&out)], "--name <NAME>"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_heron")).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn plans_with_a_fallback_pool_succeed() {
    let out = Command::new(env!("CARGO_BIN_EXE_heron"))
        .args(["plan", s(&mlp()), "--workspace-pool", "tiny:size_hint=100", "--workspace-pool", "big"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pool big"), "{text}");
}

/// A branch graph computing `op(x)` as its output `name`.
fn branch(op: &str, name: &str) -> AttributeProto {
    let body = GraphProto {
        node: vec![node(op, &format!("{name}_node"), &["x"], &[name])],
        output: vec![ValueInfoProto { name: name.into(), r#type: None }],
        ..Default::default()
    };
    AttributeProto { name: name.into(), r#type: 5, g: Some(Box::new(body)), ..Default::default() }
}

#[test]
fn control_flow_needs_compile_time_decisions() {
    // If on a graph input: which branch runs is not known when compiling.
    let mut g = graph(vec![], vec![]);
    let mut n = node("If", "choose", &["c"], &["y"]);
    n.attribute = vec![branch("Relu", "then_branch"), branch("Neg", "else_branch")];
    g.node = vec![n];
    g.input.push(value_info("c", 9, &[]));
    let p = write_model("if_runtime.onnx", &model(17, g));
    fails_with(&["run", s(&p)], &["choose", "If", "condition", "compile time"]);
    // A Loop whose condition is computed from data cannot be unrolled.
    let mut g = graph(vec![], vec![]);
    let body = GraphProto {
        node: vec![node("ReduceMax", "m", &["v"], &["mx"]), node("Less", "lt", &["mx", "v"], &["cond_out"])],
        input: vec![value_info("i", 7, &[]), value_info("cond", 9, &[]), value_info("v", 1, &[2, 3])],
        output: ["cond_out", "v"].iter().map(|n| ValueInfoProto { name: n.to_string(), r#type: None }).collect(),
        ..Default::default()
    };
    let mut n = node("Loop", "spin", &["", "", "x"], &["y"]);
    n.attribute =
        vec![AttributeProto { name: "body".into(), r#type: 5, g: Some(Box::new(body)), ..Default::default() }];
    g.node = vec![n];
    let p = write_model("loop_runtime.onnx", &model(17, g));
    fails_with(&["run", s(&p)], &["spin", "Loop", "condition"]);
}

#[test]
fn hostile_extents_in_new_operators() {
    // A one-hot depth beyond every size limit.
    let inits = vec![
        tensor_to_proto("idx", &Tensor::from_vec::<i64>(&[2], vec![0, 1]).unwrap()),
        tensor_to_proto("depth", &Tensor::from_vec::<i64>(&[], vec![1 << 50]).unwrap()),
        tensor_to_proto("vals", &Tensor::from_vec::<f32>(&[2], vec![0.0, 1.0]).unwrap()),
    ];
    let g = graph(vec![node("OneHot", "hot", &["idx", "depth", "vals"], &["y"])], inits);
    let p = write_model("onehot_huge.onnx", &model(17, g));
    fails_with(&["run", s(&p)], &["hot", "OneHot"]);
    // A transposed convolution whose stride would overflow the output extent.
    let mut g = graph(vec![], vec![tensor_to_proto("w", &Tensor::from_vec::<f32>(&[1, 1, 1, 1], vec![1.0]).unwrap())]);
    g.input = vec![value_info("x", 1, &[1, 1, 2, 2])];
    let mut n = node("ConvTranspose", "up", &["x", "w"], &["y"]);
    n.attribute =
        vec![AttributeProto { name: "strides".into(), r#type: 7, ints: vec![i64::MAX, 1], ..Default::default() }];
    g.node = vec![n];
    let p = write_model("convtranspose_huge.onnx", &model(17, g));
    fails_with(&["run", s(&p)], &["up", "ConvTranspose", "longer than"]);
}
