//! What the workers measured, summarized per model: the table and the JSON.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engines::EngineKind;

/// One worker's report (its JSON line).
#[derive(Clone, Serialize, Deserialize)]
pub struct Measurement {
    pub engine: String,
    pub version: String,
    pub threads: usize,
    /// From reading the model file to a runnable engine.
    pub prepare_ms: f64,
    pub compile_ms: Option<f64>,
    pub samples_ms: Vec<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub workspace_bytes: Option<u64>,
    pub output_shapes: Vec<Vec<usize>>,
}

impl Measurement {
    pub fn median_ms(&self) -> f64 {
        let mut s = self.samples_ms.clone();
        s.sort_by(f64::total_cmp);
        quantile(&s, 0.5)
    }
}

/// Linearly interpolated quantile of sorted, non-empty data.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = (sorted.len() - 1) as f64 * q;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| quantile(&v, 0.5))
}

/// How one engine's outputs compare with the reference's (ONNX Runtime's when it ran, else
/// the first configuration's), by the float rule |got - want| <= 1e-4 * max(1, |want|).
#[derive(Clone, Serialize)]
pub struct Check {
    pub against: String,
    pub max_abs_diff: f64,
    pub max_scaled_diff: f64,
    pub agrees: bool,
}

pub struct Row {
    pub engine: EngineKind,
    pub threads: usize,
    pub version: String,
    pub median_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
    pub min_ms: f64,
    pub runs: usize,
    pub prepare_ms: f64,
    pub compile_ms: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub workspace_bytes: Option<u64>,
    /// Median over passes of (this engine's median / ORT's median in the same pass).
    pub ratio_to_ort: Option<f64>,
    pub pass_ratios: Vec<f64>,
    pub check: Option<Check>,
}

pub struct ModelReport {
    pub model: String,
    pub rows: Vec<Row>,
}

impl ModelReport {
    pub fn new(
        model: String,
        configs: &[(EngineKind, usize)],
        measurements: Vec<Vec<Measurement>>,
        outputs: &[Option<PathBuf>],
    ) -> Result<ModelReport> {
        let values: Vec<Option<Vec<f64>>> =
            outputs.iter().map(|o| o.as_deref().map(read_f64s).transpose()).collect::<Result<_>>()?;
        let mut rows = Vec::new();
        for (c, &(engine, threads)) in configs.iter().enumerate() {
            let runs = &measurements[c];
            let mut all: Vec<f64> = runs.iter().flat_map(|m| m.samples_ms.iter().copied()).collect();
            all.sort_by(f64::total_cmp);
            let ort = configs.iter().position(|&cfg| cfg == (EngineKind::Ort, threads));
            let pass_ratios: Vec<f64> = ort
                .map(|o| runs.iter().zip(&measurements[o]).map(|(m, r)| m.median_ms() / r.median_ms()).collect())
                .unwrap_or_default();
            // The reference: ORT at the same thread count, else the first configuration (so
            // Heron on N threads is checked against Heron on the first count).
            let reference = ort.or_else(|| configs.iter().position(|&(e, _)| e == EngineKind::Ort)).or(Some(0));
            let check = match (reference, &values[c]) {
                (Some(r), Some(got)) if r != c => values[r].as_ref().map(|want| {
                    check(
                        &format!("{} {}T", configs[r].0.name(), configs[r].1),
                        got,
                        want,
                        &runs[0].output_shapes,
                        &measurements[r][0].output_shapes,
                    )
                }),
                _ => None,
            };
            let first = &runs[0];
            rows.push(Row {
                engine,
                threads,
                version: first.version.clone(),
                median_ms: quantile(&all, 0.5),
                p10_ms: quantile(&all, 0.1),
                p90_ms: quantile(&all, 0.9),
                min_ms: all[0],
                runs: all.len(),
                prepare_ms: median(&runs.iter().map(|m| m.prepare_ms).collect::<Vec<_>>()).unwrap_or(0.0),
                compile_ms: median(&runs.iter().filter_map(|m| m.compile_ms).collect::<Vec<_>>()),
                peak_rss_bytes: runs.iter().filter_map(|m| m.peak_rss_bytes).max(),
                workspace_bytes: first.workspace_bytes,
                ratio_to_ort: median(&pass_ratios),
                pass_ratios,
                check,
            });
        }
        Ok(ModelReport { model, rows })
    }

    pub fn all_agree(&self) -> bool {
        self.rows.iter().all(|r| r.check.as_ref().is_none_or(|c| c.agrees))
    }

    pub fn print_table(&self) {
        println!();
        println!(
            "{:<16} {:>3} {:<6} {:>10} {:>10} {:>10} {:>10} {:>6} {:>10} {:>9} {:>8}  check",
            "model",
            "thr",
            "engine",
            "median ms",
            "p10 ms",
            "p90 ms",
            "min ms",
            "runs",
            "prepare ms",
            "peak MiB",
            "/ ort"
        );
        for r in &self.rows {
            let ratio = r.ratio_to_ort.map_or("-".to_string(), |x| format!("{x:.3}"));
            let rss = r.peak_rss_bytes.map_or("-".to_string(), |b| format!("{:.1}", b as f64 / (1 << 20) as f64));
            let check = match &r.check {
                None => "reference".to_string(),
                Some(c) if c.agrees => format!("ok (max diff {:.1e})", c.max_abs_diff),
                Some(c) => format!("DIFFERS from {} (max diff {:.3e})", c.against, c.max_abs_diff),
            };
            println!(
                "{:<16} {:>3} {:<6} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>6} {:>10.1} {:>9} {:>8}  {check}",
                self.model,
                r.threads,
                r.engine.name(),
                r.median_ms,
                r.p10_ms,
                r.p90_ms,
                r.min_ms,
                r.runs,
                r.prepare_ms,
                rss,
                ratio
            );
        }
    }
}

fn check(against: &str, got: &[f64], want: &[f64], got_shapes: &[Vec<usize>], want_shapes: &[Vec<usize>]) -> Check {
    if got.len() != want.len() || got_shapes != want_shapes {
        return Check {
            against: against.to_string(),
            max_abs_diff: f64::INFINITY,
            max_scaled_diff: f64::INFINITY,
            agrees: false,
        };
    }
    let (mut max_abs, mut max_scaled) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        let diff = if g == w { 0.0 } else { (g - w).abs() };
        let diff = if diff.is_nan() { f64::INFINITY } else { diff };
        max_abs = max_abs.max(diff);
        max_scaled = max_scaled.max(diff / w.abs().max(1.0));
    }
    Check {
        against: against.to_string(),
        max_abs_diff: max_abs,
        max_scaled_diff: max_scaled,
        agrees: max_scaled <= 1e-4,
    }
}

fn read_f64s(path: &std::path::Path) -> Result<Vec<f64>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("chunks of 8"))).collect())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

pub fn json(reports: &[ModelReport], threads: &[usize]) -> Value {
    let models: Vec<Value> = reports
        .iter()
        .map(|m| {
            let rows: Vec<Value> = m
                .rows
                .iter()
                .map(|r| {
                    json!({
                        "engine": r.engine.name(),
                        "version": r.version,
                        "threads": r.threads,
                        "median_ms": r.median_ms,
                        "p10_ms": r.p10_ms,
                        "p90_ms": r.p90_ms,
                        "min_ms": r.min_ms,
                        "runs": r.runs,
                        "prepare_ms": r.prepare_ms,
                        "compile_ms": r.compile_ms,
                        "peak_rss_bytes": r.peak_rss_bytes,
                        "workspace_bytes": r.workspace_bytes,
                        "ratio_to_ort": r.ratio_to_ort,
                        "pass_ratios_to_ort": r.pass_ratios,
                        "check": r.check,
                    })
                })
                .collect();
            json!({ "model": m.model, "results": rows })
        })
        .collect();
    json!({ "cpu": cpu_model(), "threads": threads, "models": models })
}
