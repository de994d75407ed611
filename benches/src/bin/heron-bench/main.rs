//! heron-bench: times Heron, ONNX Runtime and tract on the same models and inputs, and checks
//! that they compute the same outputs.
//!
//! Every measurement runs in a fresh worker process (this binary, `heron-bench worker ...`), so
//! each engine's peak memory is its own and no engine's idle threads (ONNX Runtime spins after a
//! run) steal cores from the next. A pass measures every (engine, threads) configuration once;
//! the order rotates from pass to pass so machine drift spreads over all engines, and ratios to
//! ONNX Runtime are taken within a pass, then their median is reported.
//!
//! ONNX Runtime and tract are optional cargo features (`ort`, `tract`), not built by default or in
//! CI: `cargo run --release -p heron-benches --features ort,tract --bin heron-bench -- ...`.
//! ONNX Runtime is loaded at run time from `ORT_DYLIB_PATH` (or `--ort-lib`).

mod engines;
mod report;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use heron_ir::npy::{read_npy, write_npy};

use engines::EngineKind;
use report::{Measurement, ModelReport};

#[derive(Parser)]
#[command(name = "heron-bench", version, about = "Time Heron against ONNX Runtime and tract on the same models")]
struct Cli {
    #[command(subcommand)]
    worker: Option<WorkerCommand>,
    #[command(flatten)]
    compare: CompareArgs,
}

#[derive(Args)]
struct CompareArgs {
    /// ONNX models to time.
    models: Vec<PathBuf>,
    /// Engines besides Heron: a comma-separated list of `ort` and `tract` (each needs its cargo
    /// feature).
    #[arg(long, value_delimiter = ',', value_name = "ENGINES")]
    compare: Vec<EngineKind>,
    /// Thread counts, comma-separated (default: 1 and the physical cores).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    threads: Vec<usize>,
    /// Interleaved passes over all configurations.
    #[arg(long, default_value_t = 3)]
    passes: usize,
    #[command(flatten)]
    timing: Timing,
    /// Input as [NAME=]FILE.npy (one model only); by default MODEL.input.npy, MODEL.input1.npy,
    /// ... beside the model, else seeded random values (floats in [-1, 1), integers 0).
    #[arg(long = "input", value_name = "[NAME=]FILE.npy")]
    inputs: Vec<String>,
    /// Also write the results as JSON to FILE (`-` for standard output, which then holds only
    /// the JSON).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The ONNX Runtime shared library (default: $ORT_DYLIB_PATH).
    #[arg(long, value_name = "PATH")]
    ort_lib: Option<PathBuf>,
}

#[derive(Args, Clone, Copy)]
struct Timing {
    /// Timed runs per measurement (at least; see --min-time-ms).
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Keep running until the timed runs take at least this long (at most 100000 runs).
    #[arg(long, default_value_t = 300)]
    min_time_ms: u64,
}

#[derive(Subcommand)]
enum WorkerCommand {
    /// One measurement (used by heron-bench itself): prints one JSON line.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        engine: EngineKind,
        #[arg(long)]
        threads: usize,
        #[arg(long)]
        model: PathBuf,
        #[arg(long = "input")]
        inputs: Vec<String>,
        #[command(flatten)]
        timing: Timing,
        /// Write the outputs here (little-endian f64, output after output).
        #[arg(long)]
        outputs: Option<PathBuf>,
        #[arg(long)]
        ort_lib: Option<PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.worker {
        Some(WorkerCommand::Worker { engine, threads, model, inputs, timing, outputs, ort_lib }) => {
            worker(engine, threads, &model, &inputs, timing, outputs.as_deref(), ort_lib.as_deref())
        }
        None => compare(&cli.compare),
    };
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A named input the workers read: every engine sees the same bytes.
struct InputFile {
    name: String,
    path: PathBuf,
}

fn compare(args: &CompareArgs) -> Result<bool> {
    if args.models.is_empty() {
        bail!("no model given (usage: heron-bench MODEL.onnx... [--compare ort,tract])");
    }
    if !args.inputs.is_empty() && args.models.len() > 1 {
        bail!("--input applies to one model; give one model, or put MODEL.input.npy beside each");
    }
    if args.passes == 0 || args.timing.runs == 0 {
        bail!("--passes and --runs must be at least 1");
    }
    let mut engines = vec![EngineKind::Heron];
    for &e in &args.compare {
        if e == EngineKind::Heron {
            continue;
        }
        e.check_built()?;
        if !engines.contains(&e) {
            engines.push(e);
        }
    }
    let threads = if args.threads.is_empty() {
        let mut t = vec![1, heron_runtime::physical_cores()];
        t.dedup();
        t
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        bail!("--threads: thread counts start at 1");
    }
    let ort_lib = args.ort_lib.clone().or_else(|| std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from));
    if engines.contains(&EngineKind::Ort) && ort_lib.is_none() {
        bail!("ONNX Runtime's library is not given: set ORT_DYLIB_PATH or pass --ort-lib PATH");
    }
    let scratch = ScratchDir::new()?;
    let quiet = args.json.as_deref() == Some(Path::new("-"));
    let mut reports = Vec::new();
    let mut all_agree = true;
    for (m, model) in args.models.iter().enumerate() {
        let inputs = prepare_inputs(model, &args.inputs, &scratch.path.join(format!("m{m}")))?;
        let configs: Vec<(EngineKind, usize)> =
            threads.iter().flat_map(|&t| engines.iter().map(move |&e| (e, t))).collect();
        let mut measurements: Vec<Vec<Measurement>> = vec![Vec::new(); configs.len()];
        let mut outputs: Vec<Option<PathBuf>> = vec![None; configs.len()];
        for pass in 0..args.passes {
            // Rotate, and reverse every other pass, so no configuration always runs first or
            // always follows the same neighbour.
            let mut order: Vec<usize> = (0..configs.len()).collect();
            order.rotate_left(pass % configs.len());
            if pass % 2 == 1 {
                order.reverse();
            }
            for c in order {
                let (engine, t) = configs[c];
                let out = (pass == 0).then(|| scratch.path.join(format!("m{m}.{}.{t}.out", engine.name())));
                let measured =
                    run_worker(engine, t, model, &inputs, args.timing, out.as_deref(), ort_lib.as_deref())
                        .with_context(|| format!("{} on {} with {t} thread(s)", engine.name(), model.display()))?;
                if !quiet {
                    eprintln!(
                        "  pass {}/{}: {} {}T {}: median {:.4} ms",
                        pass + 1,
                        args.passes,
                        model_name(model),
                        t,
                        engine.name(),
                        measured.median_ms()
                    );
                }
                measurements[c].push(measured);
                if out.is_some() {
                    outputs[c] = out;
                }
            }
        }
        let report = ModelReport::new(model_name(model), &configs, measurements, &outputs)?;
        all_agree &= report.all_agree();
        if !quiet {
            report.print_table();
        }
        reports.push(report);
    }
    if let Some(path) = &args.json {
        let json = report::json(&reports, &threads);
        let text = serde_json::to_string_pretty(&json)?;
        if path == Path::new("-") {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if !all_agree {
        eprintln!("error: some engines' outputs differ (see the `check` column)");
    }
    Ok(all_agree)
}

fn model_name(path: &Path) -> String {
    path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned())
}

/// The inputs every engine reads: `--input` files, else `STEM.input.npy`, `STEM.input1.npy`, ...
/// beside the model, else seeded random tensors of the model's input types written to `dir`
/// (symbolic dimensions bound to 1, as `heron bench` binds them).
fn prepare_inputs(model: &Path, given: &[String], dir: &Path) -> Result<Vec<InputFile>> {
    let bytes = std::fs::read(model).with_context(|| format!("reading {}", model.display()))?;
    let declared = heron_ir::onnx::declared_inputs(&bytes).with_context(|| format!("loading {}", model.display()))?;
    let mut files: Vec<(Option<String>, PathBuf)> = given
        .iter()
        .map(|arg| match arg.split_once('=') {
            Some((n, f)) if !n.is_empty() => (Some(n.to_string()), PathBuf::from(f)),
            _ => (None, PathBuf::from(arg)),
        })
        .collect();
    if files.is_empty() {
        let stem = model.with_extension("");
        for k in 0..declared.len() {
            let suffix = if k == 0 { String::new() } else { k.to_string() };
            let path = PathBuf::from(format!("{}.input{suffix}.npy", stem.display()));
            if !path.is_file() {
                files.clear();
                break;
            }
            files.push((None, path));
        }
    }
    let read = files
        .iter()
        .map(|(n, f)| Ok((n.clone(), read_npy(f).with_context(|| format!("reading {}", f.display()))?)))
        .collect::<Result<Vec<_>>>()?;
    // The shapes the files give bind the symbolic dimensions of their inputs (by name, else in
    // order); without files, free ones are 1.
    let mut options = heron_ir::onnx::ImportOptions::default().reading_data_beside(model);
    options.bind_given_shapes(&declared, &read);
    if read.is_empty() {
        let bound = options.bind_free_dims_to_one(&declared);
        if !bound.is_empty() {
            eprintln!("note: symbolic dimensions bound to 1 for the generated inputs: {}", bound.join(", "));
        }
    }
    let heron =
        heron_runtime::Model::load_with(model, &options).with_context(|| format!("loading {}", model.display()))?;
    let infos = heron.inputs();
    let tensors = if read.is_empty() {
        heron.generated_inputs(heron_runtime::InputFill::DEFAULT_RANDOM)?
    } else {
        heron.bind_inputs(read)?
    };
    std::fs::create_dir_all(dir)?;
    infos
        .iter()
        .zip(&tensors)
        .enumerate()
        .map(|(k, (info, t))| {
            let path = dir.join(format!("input{k}.npy"));
            write_npy(&path, t)?;
            Ok(InputFile { name: info.name.clone(), path })
        })
        .collect()
}

fn run_worker(
    engine: EngineKind,
    threads: usize,
    model: &Path,
    inputs: &[InputFile],
    timing: Timing,
    outputs: Option<&Path>,
    ort_lib: Option<&Path>,
) -> Result<Measurement> {
    let exe = std::env::current_exe().context("locating heron-bench")?;
    let mut cmd = Command::new(exe);
    cmd.arg("worker")
        .args(["--engine", engine.name(), "--threads", &threads.to_string()])
        .arg("--model")
        .arg(model)
        .args(["--runs", &timing.runs.to_string(), "--warmup", &timing.warmup.to_string()])
        .args(["--min-time-ms", &timing.min_time_ms.to_string()]);
    for i in inputs {
        cmd.arg("--input").arg(format!("{}={}", i.name, i.path.display()));
    }
    if let Some(o) = outputs {
        cmd.arg("--outputs").arg(o);
    }
    if let Some(l) = ort_lib {
        cmd.arg("--ort-lib").arg(l);
    }
    let out = cmd.output().context("starting the worker")?;
    if !out.status.success() {
        bail!("worker failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let line = line.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("reading the worker's report {line:?}"))
}

/// The worker: prepare one engine, time it, report.
fn worker(
    engine: EngineKind,
    threads: usize,
    model: &Path,
    inputs: &[String],
    timing: Timing,
    outputs: Option<&Path>,
    ort_lib: Option<&Path>,
) -> Result<bool> {
    let named = inputs
        .iter()
        .map(|arg| {
            let (name, file) = arg.split_once('=').context("worker inputs are NAME=FILE")?;
            Ok((name.to_string(), read_npy(Path::new(file)).with_context(|| format!("reading {file}"))?))
        })
        .collect::<Result<Vec<_>>>()?;
    let start = std::time::Instant::now();
    let mut runner = engines::prepare(engine, model, &named, threads, ort_lib)?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    for _ in 0..timing.warmup {
        runner.run()?;
    }
    let mut samples_ms = Vec::with_capacity(timing.runs);
    let started = std::time::Instant::now();
    while samples_ms.len() < timing.runs
        || (started.elapsed().as_millis() < u128::from(timing.min_time_ms) && samples_ms.len() < 100_000)
    {
        let t = std::time::Instant::now();
        runner.run()?;
        samples_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let results = runner.outputs()?;
    if let Some(path) = outputs {
        let bytes: Vec<u8> = results.iter().flat_map(|o| o.values.iter().flat_map(|v| v.to_le_bytes())).collect();
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    let measured = Measurement {
        engine: engine.name().to_string(),
        version: runner.version(),
        threads,
        prepare_ms,
        compile_ms: runner.compile_ms(),
        samples_ms,
        peak_rss_bytes: peak_rss_bytes(),
        workspace_bytes: runner.workspace_bytes(),
        output_shapes: results.iter().map(|o| o.shape.clone()).collect(),
    };
    println!("{}", serde_json::to_string(&measured)?);
    Ok(true)
}

/// The process's peak resident set (`VmHWM`), where Linux reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// A directory under the system temp dir, removed when dropped.
struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    fn new() -> Result<ScratchDir> {
        let base = std::env::temp_dir();
        for k in 0..1000u32 {
            let path = base.join(format!("heron-bench-{}-{k}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(ScratchDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
            }
        }
        bail!("no free scratch directory name under {}", base.display())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
