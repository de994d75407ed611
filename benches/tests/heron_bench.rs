//! heron-bench as a user runs it (Heron only: the peers are optional features CI does not
//! build): the JSON holds every figure for every thread count, the table prints, missing
//! features and bad arguments are clear errors.

use std::path::PathBuf;
use std::process::Command;

fn reference(name: &str) -> PathBuf {
    heron_ir::testing::shared_dir().join("reference").join(name)
}

fn heron_bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_heron-bench")).args(args).output().expect("heron-bench runs")
}

#[test]
fn json_reports_every_thread_count_and_figure() {
    let model = reference("lenet.onnx");
    let args = ["--threads", "1,2", "--passes", "2", "--runs", "3", "--warmup", "1", "--min-time-ms", "0"];
    let out = heron_bench(&[&[model.to_str().unwrap()][..], &args, &["--json", "-"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is only the JSON");
    let results = json["models"][0]["results"].as_array().unwrap();
    assert_eq!(json["models"][0]["model"], "lenet");
    assert_eq!(results.len(), 2);
    for (r, threads) in results.iter().zip([1, 2]) {
        assert_eq!(r["engine"], "heron");
        assert_eq!(r["threads"], threads);
        // Two passes of three runs each.
        assert_eq!(r["runs"], 6);
        let (p10, median, p90, min) = (
            r["p10_ms"].as_f64().unwrap(),
            r["median_ms"].as_f64().unwrap(),
            r["p90_ms"].as_f64().unwrap(),
            r["min_ms"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= p10 && p10 <= median && median <= p90, "{r}");
        assert!(r["compile_ms"].as_f64().unwrap() > 0.0 && r["prepare_ms"].as_f64().unwrap() > 0.0);
        assert!(r["workspace_bytes"].as_u64().unwrap() > 0);
        // No ONNX Runtime: no ratio; Heron at 2 threads is checked against Heron at 1 only
        // when it is a different configuration.
        assert!(r["ratio_to_ort"].is_null());
    }
    // Without ONNX Runtime the first configuration is the reference: Heron on 2 threads gives
    // the same bits as on 1.
    assert!(results[0]["check"].is_null());
    assert_eq!(results[1]["check"]["against"], "heron 1T");
    assert_eq!(results[1]["check"]["max_abs_diff"], 0.0);
    assert_eq!(results[1]["check"]["agrees"], true);
}

#[test]
fn the_table_prints_and_missing_peers_are_clear_errors() {
    let model = reference("tiny_relu.onnx");
    let model = model.to_str().unwrap();
    let out = heron_bench(&[model, "--threads", "1", "--passes", "1", "--runs", "2", "--min-time-ms", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("median ms") && table.contains("tiny_relu") && table.contains("heron"), "{table}");

    for engine in ["ort", "tract"] {
        let out = heron_bench(&[model, "--compare", engine, "--runs", "1"]);
        let err = String::from_utf8_lossy(&out.stderr);
        if cfg!(feature = "ort") && engine == "ort" || cfg!(feature = "tract") && engine == "tract" {
            continue;
        }
        assert!(!out.status.success());
        assert!(err.contains(&format!("--features {engine}")), "{err}");
    }
    for bad in
        [&["--compare", "onnxruntime"][..], &["--threads", "0"], &["--passes", "0"], &["--input", "/nonexistent.npy"]]
    {
        let out = heron_bench(&[&[model][..], bad].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !err.contains("panicked"), "{bad:?}: {err}");
    }
    let out = heron_bench(&["/nonexistent.onnx", "--runs", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("nonexistent.onnx") && !err.contains("panicked"), "{err}");
}
