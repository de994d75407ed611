//! The `heron` CLI end to end: the built-in model, reference models through `--output-dir`, and
//! `inspect`.

use std::path::PathBuf;
use std::process::Command;

use heron_ir::npy::{read_npy, write_npy};

fn shared() -> PathBuf {
    std::env::var("HERON_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
}

fn heron(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_heron")).args(args).output().expect("run heron");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "heron {args:?} failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn run_without_a_model_runs_the_builtin_cnn() {
    let out = heron(&["run"]);
    assert!(out.contains("builtin-cnn"), "{out}");
    assert!(out.contains("output 'probabilities': f32 [1, 10]"), "{out}");
    assert!(out.contains("top-5: class "), "{out}");
}

#[test]
fn builtin_model_is_deterministic_and_sums_to_one() {
    let model = heron_runtime::Model::builtin();
    let input = heron_runtime::builtin::builtin_input();
    let a = model.run_interpreter(std::slice::from_ref(&input)).unwrap();
    let b = model.run_interpreter(&[input]).unwrap();
    assert_eq!(a, b);
    let p = a[0].to_f64_vec();
    assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    assert!(p.iter().all(|&v| v > 0.0 && v < 0.5), "a non-degenerate distribution: {p:?}");
}

/// Every reference model the interpreter runs quickly enough for CI: the written output matches
/// ONNX Runtime's under the project's float rule. resnet_ish goes through the same path in
/// `cargo test -- --ignored`.
fn check_reference(name: &str) {
    let dir = shared().join("reference");
    let tmp = tempfile::Builder::new().prefix(&format!("heron-cli-{name}-")).tempdir().unwrap();
    let out_dir = tmp.path().to_path_buf();
    let model = dir.join(format!("{name}.onnx"));
    let input = dir.join(format!("{name}.input.npy"));
    heron(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output-dir",
        out_dir.to_str().unwrap(),
    ]);
    let files: Vec<_> = std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let got = read_npy(&files[0]).unwrap().to_f64_vec();
    let want = read_npy(&dir.join(format!("{name}.ref.npy"))).unwrap().to_f64_vec();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{name} element {i}: {g} vs {w}");
    }
    std::fs::remove_dir_all(out_dir).ok();
}

#[test]
fn reference_tiny_relu() {
    check_reference("tiny_relu");
}

#[test]
fn reference_mlp() {
    check_reference("mlp");
}

#[test]
fn reference_lenet() {
    check_reference("lenet");
}

#[test]
fn reference_mobilenet_ish() {
    check_reference("mobilenet_ish");
}

#[test]
#[ignore = "slow: runs resnet_ish through the interpreter"]
fn reference_resnet_ish() {
    check_reference("resnet_ish");
}

#[test]
fn inspect_reports_ops_bytes_and_flops() {
    let model = shared().join("reference/lenet.onnx");
    let out = heron(&["inspect", model.to_str().unwrap()]);
    assert!(out.contains("Conv                 2"), "{out}");
    assert!(out.contains("MaxPool              2"), "{out}");
    assert!(out.contains("parameter bytes: 177704"), "{out}");
    // The reference README's activation lower bound for lenet.
    assert!(out.contains("peak live in node order: 27648"), "{out}");
    assert!(out.contains("0.0006 GFLOP") || out.contains("0.0005 GFLOP"), "{out}");
}

#[test]
fn layout_prints_the_seed_examples_as_json() {
    let out = heron(&[
        "layout",
        "--shape",
        "16,64,64,128",
        "--map",
        "lambda n, h, w, c: [n, c // 4, h, w, c % 4]",
        "--index",
        "11,37,23,101",
    ]);
    assert_eq!(
        out.trim(),
        r#"{"transformed_shape": [16, 32, 64, 64, 4], "physical_shape": [8388608], "flat_index": 6186333}"#
    );
    let map = "lambda n, h, w, c: [n, c // 4, h, AXIS_SEPARATOR, w, c % 4]";
    let out = heron(&["layout", "--shape", "16,64,64,128", "--map", map, "--index", "11,37,23,101"]);
    assert_eq!(
        out.trim(),
        r#"{"transformed_shape": [16, 32, 64, 64, 4], "physical_shape": [32768, 256], "flat_index": [24165, 93]}"#
    );
    let out = heron(&["layout", "--shape", "64,128", "--map", "lambda i, j: [j, i]"]);
    assert_eq!(out.trim(), r#"{"transformed_shape": [128, 64], "physical_shape": [8192]}"#);
}

#[test]
fn lower_prints_every_stage_and_inspect_reports_workspace() {
    let model = shared().join("reference/lenet.onnx");
    let m = model.to_str().unwrap();
    let lowered = heron(&["lower", m, "--stage", "lowered"]);
    assert!(lowered.contains("func @conv_relu_0(%input: f32[1, 1, 28, 28]"), "{lowered}");
    let flat = heron(&["lower", m]);
    assert!(flat.contains("func @conv_relu_0(%input: f32[784]"), "{flat}");
    assert!(flat.contains("func @main("));
    let full = heron(&["lower", m, "--stage", "layout", "--full-constants"]);
    heron_ir::loop_ir::parse::parse_module(&full).expect("full output parses back");
    let ws = heron(&["inspect", "--workspace", m]);
    assert!(ws.contains("workspace per function"), "{ws}");
    assert!(ws.lines().any(|l| l.trim_start().starts_with("main ")), "{ws}");
}

#[test]
fn compile_writes_object_header_metadata_and_parameter_blobs() {
    let model = shared().join("reference/mlp.onnx");
    let tmp = tempfile::Builder::new().prefix("heron-cli-compile-").tempdir().unwrap();
    let out_dir = tmp.path().to_path_buf();
    let (model, dir) = (model.to_str().unwrap(), out_dir.to_str().unwrap());
    let out = heron(&[
        "compile",
        model,
        "--name",
        "mlp",
        "-o",
        dir,
        "--workspace-pool",
        "fast:size_hint=4096",
        "--workspace-pool",
        "slow",
        "--parameter-pool",
        "weights",
        "--target-cpu",
        "x86-64-v2",
    ]);
    assert!(out.contains("entry heron_mlp_run"), "{out}");
    let header = std::fs::read_to_string(out_dir.join("mlp.h")).unwrap();
    for needle in [
        "#define HERON_MLP_FAST_WORKSPACE_BUFFER_SIZE ",
        "#define HERON_MLP_SLOW_WORKSPACE_BUFFER_SIZE ",
        "#define HERON_MLP_WEIGHTS_PARAMETER_BUFFER_SIZE ",
        "#define HERON_MLP_WEIGHTS_ALIGNMENT 64",
        "#define HERON_MLP_INPUT_SIZE 784",
        "  uint8_t* fast;\n  uint8_t* slow;\n} HeronWorkspaces_mlp;",
        "  const uint8_t* weights;\n} HeronParameters_mlp;",
        "int32_t heron_mlp_run(const HeronInputs_mlp* inputs, HeronOutputs_mlp* outputs, const HeronWorkspaces_mlp* \
         workspaces, const HeronParameters_mlp* parameters);",
    ] {
        assert!(header.contains(needle), "missing {needle:?} in\n{header}");
    }
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("mlp.json")).unwrap()).unwrap();
    let weights = meta["pools"].as_array().unwrap().iter().find(|p| p["name"] == "weights").unwrap();
    let blob = std::fs::metadata(out_dir.join("mlp.weights.params")).unwrap().len();
    assert_eq!(weights["size_bytes"].as_u64(), Some(blob));
    assert!(
        meta["buffers"].as_array().unwrap().iter().all(|b| b["live_ranges"].as_array().is_some_and(|r| !r.is_empty()))
    );
    assert!(meta["functions"].as_array().unwrap().iter().any(|f| f["name"] == "main"));
}

#[test]
fn vta_disasm_prints_a_raw_stream() {
    // LOAD WGT with push_next, a compute NOP, FINISH and an undefined opcode (the golden words).
    let words: [(u64, u64); 4] = [(0x00001000800000c0, 0x0000000100010001), (0x18, 0), (3, 0), (7, 0)];
    let bytes: Vec<u8> = words.iter().flat_map(|(lo, hi)| [lo.to_le_bytes(), hi.to_le_bytes()].concat()).collect();
    let tmp = tempfile::Builder::new().prefix("heron-cli-vta-").tempdir().unwrap();
    let path = tmp.path().join("file.bin");
    std::fs::write(&path, bytes).unwrap();
    let out = heron(&["vta", "disasm", path.to_str().unwrap()]);
    assert!(out.contains("LOAD WGT sram 0 dram 0x40020 y 1 x 1 stride 1"), "{out}");
    assert!(out.contains("[push_next]") && out.contains("NOP (LOAD UOP) [pop_prev pop_next]"), "{out}");
    assert!(out.contains("FINISH") && out.contains("<undefined opcode 7>"), "{out}");
}

#[test]
fn bench_and_run_take_a_thread_count() {
    let model = heron_ir::testing::shared_dir().join("reference/mobilenet_ish.onnx");
    let model = model.to_str().expect("utf-8 path");
    let out = heron(&["bench", model, "--runs", "2", "--warmup", "0", "--threads", "2"]);
    // The summary lines scripts read stay as they were; the thread count is a line of its own.
    assert!(out.lines().any(|l| l.starts_with("compiled in ")), "{out}");
    assert!(out.lines().any(|l| l.contains(": 2 runs, median ") && l.contains(" ms, p90 ")), "{out}");
    assert!(out.lines().any(|l| l == "threads: 2"), "{out}");
    let out = Command::new(env!("CARGO_BIN_EXE_heron")).args(["run", "--threads", "0"]).output().expect("run heron");
    assert_eq!(out.status.code(), Some(2), "a thread count of 0 is a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a thread count"));
    let out = heron(&["run", "--threads", "3"]);
    assert!(out.contains("top-5"), "{out}");
}

#[test]
fn lower_prints_the_target_stage() {
    let model = heron_ir::testing::shared_dir().join("reference/lenet.onnx");
    let out = heron(&["lower", model.to_str().expect("utf-8 path"), "--stage", "target"]);
    assert!(out.contains("  target \"cpu\"\n"), "{out}");
    assert!(out.contains(" parallel {") && out.contains(" vectorized(lanes=4, vectors="), "{out}");
}

#[test]
fn quantize_writes_a_qdq_model_that_runs() {
    let reference = heron_ir::testing::shared_dir().join("reference");
    let tmp = tempfile::Builder::new().prefix("heron-quantize-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    // Two samples in one file: the input's batch of 1, twice along the leading axis.
    let x = read_npy(&reference.join("lenet.input.npy")).expect("input");
    let mut both = x.to_le_bytes();
    both.extend(x.to_le_bytes());
    let mut shape = x.shape().to_vec();
    shape[0] = 2;
    let twice = heron_ir::Tensor::from_le_bytes(&heron_ir::TensorType::new(x.dtype(), shape), &both).expect("tensor");
    let samples = dir.join("samples.npy");
    write_npy(&samples, &twice).expect("write samples");
    let out = dir.join("lenet_q.onnx");
    let model = reference.join("lenet.onnx");
    let text = heron(&[
        "quantize",
        model.to_str().expect("utf-8"),
        "--calibration",
        samples.to_str().expect("utf-8"),
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(text.contains("(2 calibration samples)") && text.contains("quantized 5 Conv/Gemm/MatMul"), "{text}");
    let run = heron(&[
        "run",
        out.to_str().expect("utf-8"),
        "--input",
        reference.join("lenet.input.npy").to_str().expect("utf-8"),
    ]);
    assert!(run.contains("top-5"), "{run}");
    let failed = Command::new(env!("CARGO_BIN_EXE_heron"))
        .args(["quantize", model.to_str().expect("utf-8"), "-o", out.to_str().expect("utf-8")])
        .output()
        .expect("run heron");
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("no calibration data"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn output_files_never_overwrite_each_other() {
    use heron_ir::testing::onnx::OnnxModel;
    let tmp = tempfile::Builder::new().prefix("heron-cli-names-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    // Four outputs whose names map to the same file name, and a second "_2" taken already.
    let names = ["a:b", "a/b", "a_b_2", "A_B"];
    let mut m = OnnxModel::new(13);
    m.input("x", heron_ir::DType::F32, &[2]);
    for (i, name) in names.iter().enumerate() {
        m.initializer(&format!("c{i}"), &heron_ir::Tensor::from_vec::<f32>(&[2], vec![i as f32; 2]).unwrap());
        m.node("Add", &["x", &format!("c{i}")], &[name], vec![]).output(name);
    }
    let model = dir.join("names.onnx");
    std::fs::write(&model, m.to_bytes()).unwrap();
    let (out_dir, x) = (dir.join("out"), dir.join("x.npy"));
    write_npy(&x, &heron_ir::Tensor::from_vec::<f32>(&[2], vec![0.0; 2]).unwrap()).unwrap();
    let out = heron(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
        "--output-dir",
        out_dir.to_str().unwrap(),
    ]);
    for (i, (name, file)) in names.iter().zip(["a_b", "a_b_2", "a_b_2_2", "A_B_3"]).enumerate() {
        assert!(out.contains(&format!("{file}.npy (output '{name}')")), "{out}");
        // Zeros plus the constant i: the value identifies the output.
        let got = read_npy(&out_dir.join(format!("{file}.npy"))).unwrap().to_f64_vec();
        assert_eq!(got, vec![i as f64; 2], "{file}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn reference(name: &str) -> String {
    shared().join("reference").join(name).display().to_string()
}

/// `heron ARGS`, expected to fail: its standard error.
fn heron_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_heron")).args(args).output().expect("run heron");
    assert_eq!(out.status.code(), Some(1), "heron {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn run_without_inputs_generates_them_and_says_so() {
    let out = heron(&["run", &reference("mlp.onnx"), "--threads", "1"]);
    assert!(out.contains("no --input given: running on generated inputs (seeded random"), "{out}");
    let again = heron(&["run", &reference("mlp.onnx"), "--threads", "1"]);
    let values = |s: &str| s.lines().find(|l| l.contains("values:")).map(str::to_string);
    assert_eq!(values(&out), values(&again), "the generated inputs are the same on every run");
    let zeros = heron(&["run", &reference("tiny_relu.onnx"), "--fill", "zeros"]);
    assert!(zeros.contains("(zeros)") && zeros.contains("values: [0.000000, 0.000000"), "{zeros}");
    // A Relu's output is no class scores: no top-5 (the MLP's Softmax is).
    assert!(!zeros.contains("top-5") && out.contains("top-5"), "{zeros}\n{out}");
}

#[test]
fn an_input_without_a_model_is_an_error() {
    let err = heron_fails(&["run", "--input", &reference("mlp.input.npy")]);
    assert!(err.contains("the model is missing"), "{err}");
}

#[test]
fn inputs_come_from_npz_and_tensor_proto_files() {
    let dir = tempfile::tempdir().unwrap();
    let x = read_npy(&shared().join("reference/mlp.input.npy")).unwrap();
    let want = heron(&["run", &reference("mlp.onnx"), "--input", &reference("mlp.input.npy")]);
    let values = |s: &str| s.lines().find(|l| l.contains("values:")).map(str::to_string).expect("values line");
    // .npz, stored (np.savez): the array named by the input.
    let npz = dir.path().join("x.npz");
    {
        let file = std::fs::File::create(&npz).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("input.npy", options).unwrap();
        let npy = dir.path().join("x.npy");
        write_npy(&npy, &x).unwrap();
        std::io::Write::write_all(&mut zip, &std::fs::read(&npy).unwrap()).unwrap();
        zip.finish().unwrap();
    }
    let got = heron(&["run", &reference("mlp.onnx"), "--input", npz.to_str().unwrap()]);
    assert_eq!(values(&got), values(&want));
    // An ONNX TensorProto .pb.
    let pb = dir.path().join("input_0.pb");
    let proto = heron_ir::onnx::tensor_to_proto("input", &x);
    std::fs::write(&pb, prost::Message::encode_to_vec(&proto)).unwrap();
    let got = heron(&["run", &reference("mlp.onnx"), "--input", pb.to_str().unwrap()]);
    assert_eq!(values(&got), values(&want));
    // f16 .npy files are read (and then must match the input's dtype).
    let half = dir.path().join("h.npy");
    write_f16_npy(&half, &[1, 784]);
    let err = heron_fails(&["run", &reference("mlp.onnx"), "--input", half.to_str().unwrap()]);
    assert!(err.contains("must be f32[1, 784], got f16[1, 784]"), "{err}");
    std::fs::write(&pb, b"\xff\xff\xff not a tensor").unwrap();
    let err = heron_fails(&["run", &reference("mlp.onnx"), "--input", pb.to_str().unwrap()]);
    assert!(err.contains("not an ONNX TensorProto"), "{err}");
}

/// An f16 .npy file of zeros (numpy's format, version 1.0).
fn write_f16_npy(path: &std::path::Path, shape: &[usize]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!("{{'descr': '<f2', 'fortran_order': False, 'shape': ({},), }}", dims.join(", "));
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(vec![0u8; 2 * shape.iter().product::<usize>()]);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn output_that_cannot_be_written_is_an_error() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let out = Command::new(env!("CARGO_BIN_EXE_heron"))
        .args(["inspect", &reference("mlp.onnx")])
        .stdout(full)
        .output()
        .expect("run heron");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write to standard output: no space left"), "{err}");
    // A reader that closes the pipe early.
    let mut child = Command::new(env!("CARGO_BIN_EXE_heron"))
        .args(["lower", &reference("resnet18.onnx"), "--full-constants"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run heron");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken pipe") && !err.contains("internal error"), "{err}");
}

#[test]
fn the_compile_line_names_every_stage_and_adds_up() {
    let out = heron(&["run", &reference("lenet.onnx"), "--input", &reference("lenet.input.npy"), "--threads", "1"]);
    let line = out.lines().find(|l| l.starts_with("compiled in ")).expect("compile line");
    for stage in ["graph passes", "lowering", "target", "layouts", "planning", "code generation", "constants", "other"]
    {
        assert!(line.contains(stage), "{line}");
    }
    let total: f64 = line["compiled in ".len()..].split(' ').next().unwrap().parse().unwrap();
    let parts: f64 = line
        .split(['(', '+'])
        .skip(1)
        .map(|p| p.trim().trim_end_matches(" ms)").rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!((total - parts).abs() <= 0.5, "{line}: stages sum to {parts}");
    assert!(out.contains("ran on the JIT engine (target cpu)"), "{out}");
}

#[test]
fn bench_writes_json_and_keeps_its_summary_lines() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = heron(&[
        "bench",
        &reference("lenet.onnx"),
        "--input",
        &reference("lenet.input.npy"),
        "--runs",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.lines().any(|l| l.starts_with("compiled in ")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("lenet: 5 runs, median ")), "{out}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["runs"], 5);
    assert_eq!(report["run_ms"].as_array().unwrap().len(), 5);
    assert_eq!(report["generated_inputs"], false);
    assert!(report["compile_stages_ms"]["planning"].as_f64().is_some(), "{report}");
    assert!(report["workspace_bytes"].as_u64().unwrap() > 0);
    let only_json = heron(&["bench", &reference("tiny_relu.onnx"), "--runs", "2", "--json", "-"]);
    let parsed: serde_json::Value = serde_json::from_str(&only_json).expect("standard output is the JSON alone");
    assert_eq!(parsed["generated_inputs"], true);
}

#[test]
fn run_loads_a_folder_heron_compile_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("mlp_aot");
    let compiled = heron(&["compile", &reference("mlp.onnx"), "--name", "mlp", "-o", out_dir.to_str().unwrap()]);
    assert!(compiled.contains(&format!("link: cc prog.c {}/mlp.o -lm", out_dir.display())), "{compiled}");
    let jit = heron(&["run", &reference("mlp.onnx"), "--input", &reference("mlp.input.npy")]);
    let aot = heron(&["run", out_dir.to_str().unwrap(), "--input", &reference("mlp.input.npy")]);
    assert!(aot.contains("AOT model mlp loaded from"), "{aot}");
    let values = |s: &str| s.lines().find(|l| l.contains("values:")).map(str::to_string).expect("values line");
    assert_eq!(values(&aot), values(&jit));
    let err = heron_fails(&["run", dir.path().to_str().unwrap()]);
    assert!(err.contains("loads what `heron compile MODEL -o DIR` wrote"), "{err}");
    // A folder holding several models: each is run by its NAME.json.
    heron(&["compile", &reference("lenet.onnx"), "--name", "lenet", "-o", out_dir.to_str().unwrap()]);
    let err = heron_fails(&["run", out_dir.to_str().unwrap()]);
    assert!(err.contains("several .json files; give the model's own"), "{err}");
    let lenet = out_dir.join("lenet.json");
    let aot = heron(&["run", lenet.to_str().unwrap(), "--input", &reference("lenet.input.npy")]);
    assert!(aot.contains("AOT model lenet loaded from"), "{aot}");
}

#[test]
fn verbose_logs_the_compile_stages() {
    let out = Command::new(env!("CARGO_BIN_EXE_heron"))
        .args(["-v", "run", &reference("mlp.onnx")])
        .env_remove("RUST_LOG")
        .output()
        .expect("run heron");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("compile stage") && err.contains("stage=\"planning\""), "{err}");
    assert!(!err.contains('\x1b'), "no colour codes when standard error is no terminal: {err}");
}

#[test]
fn plan_reports_the_method_behind_the_plan() {
    let out = heron(&["plan", &reference("lenet.onnx")]);
    assert!(out.lines().next().is_some_and(|l| l.contains("algorithm auto (")), "{out}");
    assert!(out.contains("(workspace, unbounded)") && out.contains("(constants, unbounded)"), "{out}");
}
