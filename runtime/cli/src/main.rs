//! `heron`: run and inspect models from the command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use heron_ir::Tensor;
use heron_ir::loop_ir::print::{ConstData, print_module};
use heron_ir::loop_ir::verify::verify_module;
use heron_ir::loop_ir::workspace::module_workspace;
use heron_ir::loop_ir::{IndexMap, Module};
use heron_ir::npy::{read_npy, write_npy};
use heron_ir::onnx::ImportOptions;
use heron_ir::quantize::{Calibration, QuantizeOptions, ScaleKind, quantize_model};
use heron_ir::stats::graph_stats;
use heron_planner::AlgorithmKind;
use heron_runtime::builtin::builtin_input;
use heron_runtime::pipeline::{Pipeline, PipelineOptions, Stage as PipelineStage};
use heron_runtime::{CompileOptions, CompiledModel, Compiler, GuardPages, Limits, Model};

mod inputs;

/// `println!` to standard output that returns the error (a closed pipe, a full disk) instead of
/// panicking, so the command fails with a clear message and status.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err(OutputError)?
    }};
}

/// `print!`, as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*).map_err(OutputError)?
    }};
}

/// Standard output could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output: {}", describe_io(.0))]
struct OutputError(std::io::Error);

fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe => "the reader closed the pipe (broken pipe)".into(),
        std::io::ErrorKind::StorageFull => "no space left on the device".into(),
        _ => e.to_string(),
    }
}

#[derive(Parser)]
#[command(name = "heron", version, about = "Heron: a small-footprint ML compiler and runtime")]
struct Cli {
    /// Log the compile stages and their times to standard error (-v: stages, -vv: more);
    /// `RUST_LOG` (e.g. `RUST_LOG=heron_runtime=debug`) sets the filter itself.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Loop-IR stages of the compile pipeline, in order (see `heron_runtime::pipeline`).
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Stage {
    /// Straight out of lowering: logical shapes, target-independent loop nests.
    Lowered,
    /// After the target layer: layouts chosen (annotated), loops marked vectorized / unrolled,
    /// each function's target recorded.
    Target,
    /// After applying the layout transforms.
    Layout,
    /// After flattening every buffer to its physical rank.
    Flat,
    /// Memory-planned: allocations are views into pools at their planned offsets. What the
    /// code generators compile.
    Planned,
}

impl Stage {
    fn pipeline_stage(self) -> PipelineStage {
        match self {
            Stage::Lowered => PipelineStage::Lowered,
            Stage::Target => PipelineStage::Target,
            Stage::Layout => PipelineStage::Layout,
            Stage::Flat => PipelineStage::Flat,
            Stage::Planned => PipelineStage::Planned,
        }
    }
}

/// How `heron quantize` rounds scales.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Scales {
    /// Powers of two: every requantization is add-round, shift and clip (VTA-ready).
    Pow2,
    /// Exactly range / 127 (CPU only).
    Float,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Engine {
    /// Cranelift machine code with statically planned memory pools.
    Jit,
    /// The reference interpreter (the correctness oracle).
    Interp,
    /// Compiled ahead of time for this CPU, linked into a shared library and loaded.
    Aot,
}

impl Engine {
    /// Words for the run line.
    fn describe(self) -> &'static str {
        match self {
            Engine::Jit => "the JIT engine",
            Engine::Interp => "the reference interpreter",
            Engine::Aot => "the AOT engine",
        }
    }

    fn compile_options(self, limits: &LimitFlags, threads: Option<usize>) -> CompileOptions {
        let engine = match self {
            Engine::Jit => heron_runtime::Engine::Jit,
            Engine::Interp => heron_runtime::Engine::Interpreter,
            Engine::Aot => heron_runtime::Engine::Aot,
        };
        let mut options = CompileOptions { engine, limits: limits.limits(), ..CompileOptions::default() };
        if let Some(threads) = threads {
            options.threads = threads;
        }
        if let Some(guard) = limits.guard_pages {
            options.guard_pages = guard;
        }
        options
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TargetKind {
    /// Everything on the CPU (a quantized model runs its integer form with the JIT's kernels).
    Cpu,
    /// Offload int8 regions to VTA (the built-in simulator, or `HERON_VTA_DRIVER`).
    Vta,
}

impl TargetKind {
    fn describe(self) -> &'static str {
        match self {
            TargetKind::Cpu => "target cpu",
            TargetKind::Vta => "target vta: int8 regions on VTA",
        }
    }
}

/// Where a model runs: the CPU alone, or VTA for its int8 regions.
#[derive(clap::Args)]
struct TargetFlags {
    #[arg(long, value_enum, default_value = "cpu")]
    target: TargetKind,
    /// VTA hardware configuration in TVM's `vta_config.json` format (default: fsim_sample).
    #[arg(long, value_name = "FILE.json")]
    vta_config: Option<PathBuf>,
}

impl TargetFlags {
    /// The VTA configuration to offload to, if the target is VTA.
    fn vta(&self) -> Result<Option<heron_runtime::HwConfig>> {
        if self.target == TargetKind::Cpu {
            if self.vta_config.is_some() {
                anyhow::bail!("--vta-config needs --target vta");
            }
            return Ok(None);
        }
        let Some(path) = &self.vta_config else { return Ok(Some(heron_runtime::HwConfig::default())) };
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Some(heron_runtime::vta::hw_config_from_json(&text).with_context(|| format!("{}", path.display()))?))
    }
}

/// How much work memory planning may do.
#[derive(clap::Args)]
struct EffortFlags {
    /// Planning work budget in work units (buffer placements, search nodes): plans are the same
    /// on every run and machine. Default: 3e9 for `plan --buffers` (about half a minute at most;
    /// searches stop at the lower bound), 5e7 when planning a model (about half a second).
    #[arg(long, value_name = "UNITS")]
    work: Option<u64>,
    /// Also stop planning after this many milliseconds. Plans then depend on the machine's speed
    /// and load: not reproducible.
    #[arg(long, value_name = "MS")]
    time_limit_ms: Option<u64>,
}

impl EffortFlags {
    fn budget(&self, default_work: u64) -> heron_planner::Budget {
        heron_planner::Budget::new(self.work.unwrap_or(default_work), self.time_limit_ms)
    }
}

/// Size limits (and, for commands that run models, guard pages), as every command taking a
/// model accepts them.
#[derive(clap::Args)]
struct LimitFlags {
    /// Largest tensor or scratch buffer a model may use, in bytes.
    #[arg(long, default_value_t = Limits::DEFAULT.max_tensor_bytes, value_name = "BYTES")]
    max_tensor_bytes: u64,
    /// Largest total of the workspace pools, in bytes.
    #[arg(long, default_value_t = Limits::DEFAULT.max_workspace_bytes, value_name = "BYTES")]
    max_workspace_bytes: u64,
    /// Place every pool and staging buffer between inaccessible guard pages, flush against the
    /// following (`end`) or the preceding (`start`) one, so an out-of-bounds access faults
    /// (default: `HERON_GUARD_PAGES`, else off).
    #[arg(long, value_name = "off|end|start", value_parser = parse_guard_pages)]
    guard_pages: Option<GuardPages>,
    /// Shape of a graph input with symbolic dimensions (binds them); repeat for several inputs.
    #[arg(long = "input-shape", value_name = "NAME=D0,D1,...", value_parser = parse_input_shape)]
    input_shapes: Vec<(String, Vec<usize>)>,
    /// Value of a symbolic dimension (e.g. `batch=1`); repeat for several.
    #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
    dims: Vec<(String, usize)>,
}

impl LimitFlags {
    fn limits(&self) -> Limits {
        Limits {
            max_tensor_bytes: self.max_tensor_bytes,
            max_workspace_bytes: self.max_workspace_bytes,
            ..Limits::DEFAULT
        }
    }

    fn import_options(&self) -> ImportOptions {
        ImportOptions {
            limits: self.limits(),
            input_shapes: self.input_shapes.iter().cloned().collect(),
            dims: self.dims.iter().cloned().collect(),
            ..ImportOptions::default()
        }
    }

    fn load(&self, path: &Path) -> Result<Model> {
        Ok(Model::load_with(path, &self.import_options())?)
    }

    /// Loads `path` specialized to the given inputs: each binds the symbolic dimensions of the
    /// input it goes to (by name, else in order), unless `--input-shape` gives that input's shape.
    /// With no input given (generated inputs), a symbolic dimension neither `--dim` nor
    /// `--input-shape` binds is 1, as benchmark tools take a free batch dimension, and a note on
    /// standard error says so.
    fn load_for(&self, path: &Path, given: &[(Option<String>, Tensor)]) -> Result<Model> {
        let mut options = self.import_options().reading_data_beside(path);
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let declared = heron_ir::onnx::declared_inputs(&bytes)?;
        options.bind_given_shapes(&declared, given);
        if given.is_empty() {
            let bound = options.bind_free_dims_to_one(&declared);
            if !bound.is_empty() {
                eprintln!(
                    "note: symbolic dimensions bound to 1 for the generated inputs: {} (choose with --dim NAME=N or \
                     --input-shape NAME=D0,D1,...)",
                    bound.join(", ")
                );
            }
        }
        let graph = heron_ir::onnx::import_model(&bytes, &options)?;
        let name = path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
        Ok(Model::from_graph(name, graph)?)
    }

    /// The compile pipeline under these limits, planning into `pools` (empty: the defaults).
    fn pipeline(&self, pools: Vec<heron_planner::PoolInfo>) -> Pipeline {
        Pipeline::new(PipelineOptions { limits: self.limits(), pools, ..PipelineOptions::default() })
    }
}

fn parse_threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("'{s}' is not a thread count from 1 to 1024")),
    }
}

fn parse_input_shape(s: &str) -> Result<(String, Vec<usize>), String> {
    let bad = || format!("'{s}' is not NAME=D0,D1,... (dimensions as non-negative integers)");
    let (name, dims) = s.split_once('=').filter(|(n, _)| !n.is_empty()).ok_or_else(bad)?;
    let dims = if dims.is_empty() {
        Vec::new() // a scalar
    } else {
        dims.split(',').map(|d| d.trim().parse::<usize>()).collect::<Result<Vec<_>, _>>().map_err(|_| bad())?
    };
    Ok((name.to_string(), dims))
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let bad = || format!("'{s}' is not NAME=N (a non-negative integer)");
    let (name, n) = s.split_once('=').filter(|(n, _)| !n.is_empty()).ok_or_else(bad)?;
    Ok((name.to_string(), n.trim().parse().map_err(|_| bad())?))
}

fn parse_algorithm(s: &str) -> Result<AlgorithmKind, String> {
    s.parse().map_err(|e: heron_planner::PlanError| e.to_string())
}

fn parse_guard_pages(s: &str) -> Result<GuardPages, String> {
    GuardPages::parse(s).ok_or_else(|| format!("unknown guard-page mode '{s}' (off, end, start)"))
}

/// How `heron run` and `heron bench` make inputs when none are given.
#[derive(Clone, Copy, ValueEnum)]
enum Fill {
    Random,
    Zeros,
}

impl Fill {
    fn input_fill(self) -> heron_runtime::InputFill {
        match self {
            Fill::Random => heron_runtime::InputFill::DEFAULT_RANDOM,
            Fill::Zeros => heron_runtime::InputFill::Zeros,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Fill::Random => "seeded random values: floats uniform in [-1, 1), integers 0; --fill zeros for zeros",
            Fill::Zeros => "zeros",
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a model (the built-in CNN when no MODEL is given) and print its outputs.
    Run {
        /// ONNX model file, or a folder `heron compile` wrote (or its NAME.json); omit to run the
        /// built-in model on a generated image.
        model: Option<PathBuf>,
        /// Input as [NAME=]FILE: .npy (any dtype, f16 included), .npz (arrays by name) or an
        /// ONNX TensorProto .pb; in model input order without NAME=. Repeat for several inputs.
        /// Without any, the inputs are generated (see --fill).
        #[arg(long = "input", value_name = "[NAME=]FILE")]
        inputs: Vec<String>,
        /// Generated inputs (when no --input is given): `random` (floats uniform in [-1, 1)
        /// from a fixed seed, integers 0) or `zeros`.
        #[arg(long, value_enum, default_value = "random")]
        fill: Fill,
        /// Write every output to DIR/<output name>.npy (characters other than letters, digits,
        /// `.`, `_` and `-` become `_`; a file name already taken gets `_2`, `_3`, ...).
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "jit")]
        engine: Engine,
        /// Threads for the loops marked parallel (default: the physical cores; JIT only).
        #[arg(long, value_name = "N", value_parser = parse_threads)]
        threads: Option<usize>,
        #[command(flatten)]
        target: TargetFlags,
        /// Write the run's regions (target, time) and VTA counters as JSON.
        #[arg(long, value_name = "FILE.json")]
        stats: Option<PathBuf>,
        #[command(flatten)]
        limits: LimitFlags,
    },
    /// Compile a model and time its runs: compile time, median / p90 / min latency and the
    /// peak workspace bytes.
    Bench {
        model: PathBuf,
        /// Input as [NAME=]FILE (as for `heron run`); without any, generated inputs.
        #[arg(long = "input", value_name = "[NAME=]FILE")]
        inputs: Vec<String>,
        /// Generated inputs (when no --input is given): `random` or `zeros`.
        #[arg(long, value_enum, default_value = "random")]
        fill: Fill,
        /// Also write the results as JSON (per-run times, statistics, compile stages, memory)
        /// to FILE (`-` for standard output, which then holds only the JSON).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Timed runs.
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Untimed runs first.
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        #[arg(long, value_enum, default_value = "jit")]
        engine: Engine,
        /// Threads for the loops marked parallel (default: the physical cores; JIT only).
        #[arg(long, value_name = "N", value_parser = parse_threads)]
        threads: Option<usize>,
        #[command(flatten)]
        target: TargetFlags,
        #[command(flatten)]
        limits: LimitFlags,
    },
    /// Compile a model ahead of time: DIR/NAME.o (ELF object), NAME.h (C header), NAME.json
    /// (metadata) and NAME.<pool>.params for user-provided parameter pools.
    Compile {
        model: PathBuf,
        /// Model name (files, and as a C identifier the entry heron_<name>_run and the types).
        #[arg(long)]
        name: String,
        /// Output directory (created if missing).
        #[arg(short = 'o', long = "output", value_name = "DIR")]
        output: PathBuf,
        #[command(flatten)]
        pools: PoolFlags,
        /// The workspace pools become zero-initialised static buffers inside the object.
        #[arg(long)]
        embed_workspace: bool,
        /// ISA of the object: native, x86-64-v2, x86-64-v3, or the portable x86-64 (SSE4.1).
        #[arg(long, default_value = "x86-64", value_parser = parse_target_cpu)]
        target_cpu: heron_jit::isa::TargetCpu,
        /// Convolutions, GEMMs and max pools call the precompiled AVX-512 / AVX2 kernels,
        /// weights packed for this machine's best ISA (elsewhere the kernels' scalar path gives
        /// the same results). The object then runs through heron_<name>_run_ctx with a context
        /// from heron_threads_context and links libheron_threads.a, which carries the kernels.
        #[arg(long)]
        kernels: bool,
        /// With --kernels: the tasks each kernel call splits into (a pool of any size runs
        /// them; default: this machine's physical cores).
        #[arg(long, requires = "kernels")]
        threads: Option<usize>,
        /// Planning algorithm (see `heron plan`).
        #[arg(long, default_value = "auto", value_parser = parse_algorithm)]
        algorithm: AlgorithmKind,
        #[command(flatten)]
        effort: EffortFlags,
        /// `--target vta`: the object runs its int8 regions through libheron_vta.a's sessions
        /// (see include/heron_vta.h); its VTA pools are always provided by the caller.
        #[command(flatten)]
        target: TargetFlags,
        #[command(flatten)]
        limits: LimitFlags,
    },
    /// Print a model's inputs, outputs, op counts, parameter and activation bytes and FLOPs.
    Inspect {
        model: PathBuf,
        /// Also print every lowered function's workspace (scratch) size.
        #[arg(long)]
        workspace: bool,
        /// With `--target vta`, print the partition: each region, its ops, and why every
        /// operator left on the CPU stays there.
        #[command(flatten)]
        target: TargetFlags,
        #[command(flatten)]
        limits: LimitFlags,
    },
    /// Print the loop-IR program of a model at a lowering stage.
    Lower {
        model: PathBuf,
        #[arg(long, value_enum, default_value = "flat")]
        stage: Stage,
        /// Print constant data in full (hex), so the output parses back.
        #[arg(long)]
        full_constants: bool,
        #[command(flatten)]
        target: TargetFlags,
        #[command(flatten)]
        limits: LimitFlags,
    },
    /// Quantize a float model to a standard int8 QDQ ONNX model (QuantizeLinear /
    /// DequantizeLinear, symmetric, power-of-two scales by default) that ONNX Runtime and Heron
    /// load.
    Quantize {
        model: PathBuf,
        #[arg(short, long, value_name = "OUT.onnx")]
        output: PathBuf,
        /// Calibration data: FILE.npy per model input, in input order (groups of that many
        /// files for several samples); a file whose leading axis is N times the input's holds
        /// N samples.
        #[arg(long = "calibration", value_name = "FILE.npy")]
        calibration: Vec<PathBuf>,
        /// Weight scales per output channel (opset 13+).
        #[arg(long)]
        per_channel: bool,
        /// Leave this node in float; repeatable.
        #[arg(long = "skip", value_name = "NODE")]
        skip: Vec<String>,
        /// No calibration: every activation's step is S/128 (TVM's global scale).
        #[arg(long, value_name = "S")]
        global_scale: Option<f32>,
        /// Activation ranges from this percentile of |x| (default: the largest |x|).
        #[arg(long, value_name = "P")]
        percentile: Option<f64>,
        #[arg(long, value_enum, default_value = "pow2")]
        scales: Scales,
    },
    /// Plan memory: a model's buffers (memory map), or a JSON planning problem (--buffers).
    Plan {
        /// ONNX model whose lowered program to plan.
        #[arg(required_unless_present = "buffers", conflicts_with = "buffers")]
        model: Option<PathBuf>,
        /// Planning problem: {"pools": [...], "buffers": [...]}; prints the plan as JSON.
        #[arg(long, value_name = "FILE.json")]
        buffers: Option<PathBuf>,
        #[command(flatten)]
        pools: PoolFlags,
        /// Draw the memory map as SVG (time on x, offset on y).
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Planning algorithm (auto, greedy_by_size, greedy_by_conflicts, hill_climb, best_fit, exact).
        #[arg(long, default_value = "auto", value_parser = parse_algorithm)]
        algorithm: AlgorithmKind,
        #[command(flatten)]
        effort: EffortFlags,
        #[command(flatten)]
        limits: LimitFlags,
    },
    /// VTA accelerator tools.
    Vta {
        #[command(subcommand)]
        command: VtaCommand,
    },
    /// Apply an index map to a buffer shape (and optionally one index) and print JSON.
    Layout {
        /// Logical shape, e.g. 16,64,64,128.
        #[arg(long, value_delimiter = ',', required = true)]
        shape: Vec<usize>,
        /// Index map in lambda syntax, e.g. "lambda n, h, w, c: [n, c // 4, h, w, c % 4]".
        #[arg(long)]
        map: String,
        /// A logical index to map, e.g. 11,37,23,101.
        #[arg(long, value_delimiter = ',')]
        index: Option<Vec<i64>>,
    },
}

#[derive(Subcommand)]
enum VtaCommand {
    /// Print an instruction stream readably: FILE holds raw little-endian 16-byte
    /// instructions, as the runtime writes them (default hardware configuration).
    Disasm { file: PathBuf },
}

/// Memory pools, as `heron plan` and `heron compile` take them.
#[derive(clap::Args)]
struct PoolFlags {
    /// Workspace pool NAME[:size_hint=BYTES][:targets=cpu,vta]; repeat, most preferred first.
    #[arg(long = "workspace-pool", value_name = "SPEC")]
    workspace_pools: Vec<String>,
    /// Parameter (constant) pool NAME[:size_hint=BYTES]; repeat, most preferred first. None:
    /// constants are embedded (AOT: in .rodata).
    #[arg(long = "parameter-pool", value_name = "SPEC")]
    parameter_pools: Vec<String>,
}

impl PoolFlags {
    /// The pools, workspace pools first; a kind with no flag gets one default unbounded pool.
    fn pools(&self) -> Result<Vec<heron_planner::PoolInfo>> {
        use heron_planner::{PoolKind, spec::parse_pool_spec};
        let mut pools: Vec<heron_planner::PoolInfo> = Vec::new();
        for (specs, kind, default) in [
            (&self.workspace_pools, PoolKind::Workspace, "workspace"),
            (&self.parameter_pools, PoolKind::Constant, "constants"),
        ] {
            if specs.is_empty() {
                pools.push(parse_pool_spec(default, kind)?);
            }
            for s in specs {
                let pool = parse_pool_spec(s, kind)?;
                if pools.iter().any(|p| p.name == pool.name) {
                    return Err(heron_planner::PlanError::DuplicatePool(pool.name).into());
                }
                pools.push(pool);
            }
        }
        Ok(pools)
    }
}

fn parse_target_cpu(s: &str) -> Result<heron_jit::isa::TargetCpu, String> {
    heron_jit::isa::TargetCpu::parse(s)
        .ok_or_else(|| format!("unknown target CPU '{s}' (native, x86-64, x86-64-v2, x86-64-v3)"))
}

/// Output that cannot be written (outside [`outln!`]: clap's help, say) is an error with a
/// failing status, not a success; any other panic is a bug, reported on one line like every
/// error.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info.payload_as_str().unwrap_or("panic");
        if message.starts_with("failed printing to stdout") {
            eprintln!("error: cannot write to standard output: {message}");
            std::process::exit(1);
        }
        let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("error: internal error (please report): {message}{place}");
    }));
}

/// Logging to standard error: `RUST_LOG` when set, else by `-v` count.
fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "heron_runtime=info,heron=info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .init();
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Run { model, inputs, fill, output_dir, engine, threads, target, stats, limits } => run(
            model.as_deref(),
            (&inputs, fill),
            (output_dir.as_deref(), stats.as_deref()),
            (engine, threads, &target),
            &limits,
        ),
        Command::Bench { model, inputs, fill, json, runs, warmup, engine, threads, target, limits } => {
            target.vta().and_then(|vta| {
                let options = CompileOptions { vta, ..engine.compile_options(&limits, threads) };
                let timing = BenchTiming { runs, warmup };
                bench(&model, (&inputs, fill), json.as_deref(), timing, options, &limits)
            })
        }
        Command::Inspect { model, workspace, target, limits } => inspect(&model, workspace, &target, &limits),
        Command::Lower { model, stage, full_constants, target, limits } => {
            lower(&model, stage, full_constants, &target, &limits)
        }
        Command::Vta { command: VtaCommand::Disasm { file } } => vta_disasm(&file),
        Command::Layout { shape, map, index } => layout(&shape, &map, index.as_deref()),
        Command::Compile {
            model,
            name,
            output,
            pools,
            embed_workspace,
            target_cpu,
            kernels,
            threads,
            algorithm,
            effort,
            target,
            limits,
        } => {
            let opts = CompileFlags {
                name,
                pools,
                embed_workspace,
                target_cpu,
                kernels: kernels.then(|| threads.unwrap_or_else(heron_runtime::physical_cores)),
                algorithm,
                effort,
                target,
                limits,
            };
            compile(&model, &output, &opts)
        }
        Command::Quantize { model, output, calibration, per_channel, skip, global_scale, percentile, scales } => {
            let options = QuantizeOptions {
                calibration: percentile.map_or(Calibration::MaxAbs, Calibration::Percentile),
                per_channel,
                skip,
                global_scale,
                scales: match scales {
                    Scales::Pow2 => ScaleKind::Pow2,
                    Scales::Float => ScaleKind::Float,
                },
            };
            quantize(&model, &output, &calibration, &options)
        }
        Command::Plan { model, buffers, pools, svg, algorithm, effort, limits } => match (model, buffers) {
            (_, Some(buffers)) => plan_buffers(&buffers, algorithm, &effort.budget(heron_planner::Budget::PLAN_WORK)),
            (Some(model), None) => {
                let opts = PlanOptions { pools, svg, algorithm, effort, limits };
                plan_model(&model, &opts)
            }
            (None, None) => Err(anyhow::anyhow!("give a MODEL or --buffers FILE.json")),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The tensors the `--input` arguments name, in order.
fn read_inputs(args: &[String], limits: &Limits) -> Result<Vec<(Option<String>, Tensor)>> {
    let mut given = Vec::new();
    for arg in args {
        given.extend(inputs::read_input_arg(arg, limits)?);
    }
    Ok(given)
}

/// The inputs of a run: the files given, else generated ones (and a line saying so).
fn inputs_for(model: &Model, given: Vec<(Option<String>, Tensor)>, fill: Fill) -> Result<Vec<Tensor>> {
    if !given.is_empty() {
        return Ok(model.bind_inputs(given)?);
    }
    let generated = model.generated_inputs(fill.input_fill())?;
    if !generated.is_empty() {
        outln!("no --input given: running on generated inputs ({})", fill.describe());
    }
    Ok(generated)
}

fn run(
    model_path: Option<&Path>,
    (inputs, fill): (&[String], Fill),
    (output_dir, stats_file): (Option<&Path>, Option<&Path>),
    (engine, threads, target): (Engine, Option<usize>, &TargetFlags),
    limits: &LimitFlags,
) -> Result<()> {
    let compiled_folder = |p: &&Path| p.is_dir() || p.extension().is_some_and(|e| e == "json");
    if let Some(dir) = model_path.filter(compiled_folder) {
        return run_aot_folder(dir, (inputs, fill), output_dir, limits);
    }
    if model_path.is_none() && !inputs.is_empty() {
        anyhow::bail!(
            "the model is missing: `heron run MODEL.onnx --input FILE` (only `heron run` with no arguments runs the \
             built-in model, on a generated image)"
        );
    }
    let given = match model_path {
        None => vec![(None, builtin_input())],
        Some(_) => read_inputs(inputs, &limits.limits())?,
    };
    let t0 = Instant::now();
    let model = match model_path {
        Some(p) => limits.load_for(p, &given)?,
        None => Model::builtin(),
    };
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    outln!("model {} loaded in {load_ms:.2} ms", model.name());
    let bound = inputs_for(&model, given, fill)?;
    let vta = target.vta()?;
    if vta.is_some() && !matches!(engine, Engine::Jit) {
        anyhow::bail!("--target vta runs on the JIT engine");
    }
    let options = CompileOptions { vta, ..engine.compile_options(limits, threads) };
    let compiled = Compiler::new(options).compile(&model)?;
    if !matches!(engine, Engine::Interp) {
        print_compile_stats(&compiled)?;
    }
    let mut ws = compiled.workspace()?;
    ws.take_vta_stats();
    let t1 = Instant::now();
    let outputs = compiled.run_with(&mut ws, &bound)?;
    let t2 = Instant::now();
    let run_ms = (t2 - t1).as_secs_f64() * 1e3;
    outln!("ran on {} ({}) in {run_ms:.3} ms", engine.describe(), target.target.describe());
    let vta_stats = ws.take_vta_stats();
    if let Some(stats) = &vta_stats {
        let regions = heron_runtime::vta::region_times(stats, t1, t2);
        let json = heron_runtime::vta::stats_json(&regions, stats);
        let summary = &json["summary"];
        outln!(
            "regions: {} on VTA ({:.3} ms, {:.3} ms in the device, {} simulated cycles), {:.3} ms on the CPU",
            regions.iter().filter(|r| r.target == "vta").count(),
            summary["vta_ms"].as_f64().unwrap_or(0.0),
            summary["device_ms"].as_f64().unwrap_or(0.0),
            summary["simulated_cycles"],
            summary["cpu_ms"].as_f64().unwrap_or(0.0)
        );
        outln!("vta counters: {}", json["vta"]);
        if let Some(file) = stats_file {
            let text = serde_json::to_string_pretty(&json)?;
            std::fs::write(file, text).with_context(|| format!("cannot write {}", file.display()))?;
            outln!("wrote {}", file.display());
        }
    } else if let Some(file) = stats_file {
        let regions = [heron_runtime::vta::RegionTime {
            name: "cpu_0".into(),
            target: "cpu",
            time_ms: run_ms,
            device_ms: 0.0,
            cycles: None,
        }];
        let empty = heron_runtime::VtaStats { calls: Vec::new(), profile: None };
        let text = serde_json::to_string_pretty(&heron_runtime::vta::stats_json(&regions, &empty))?;
        std::fs::write(file, text).with_context(|| format!("cannot write {}", file.display()))?;
        outln!("wrote {}", file.display());
    }
    let scores = |name: &str| heron_ir::stats::is_class_scores(model.graph(), name);
    report_outputs(&model.outputs(), &outputs, output_dir, scores)
}

/// Prints each output (values, and the top five where it holds class scores) and writes them to
/// `output_dir`.
fn report_outputs(
    infos: &[heron_runtime::TensorInfo],
    outputs: &[Tensor],
    output_dir: Option<&Path>,
    class_scores: impl Fn(&str) -> bool,
) -> Result<()> {
    for (info, t) in infos.iter().zip(outputs) {
        print_output(&info.name, t, class_scores(&info.name))?;
    }
    if let Some(dir) = output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let names: Vec<&str> = infos.iter().map(|o| o.name.as_str()).collect();
        for ((name, stem), t) in names.iter().zip(file_stems(&names)).zip(outputs) {
            let file = dir.join(format!("{stem}.npy"));
            write_npy(&file, t)?;
            outln!("wrote {} (output '{name}')", file.display());
        }
    }
    Ok(())
}

/// `heron run DIR` on a folder `heron compile` wrote: loads its object (linked into a shared
/// library) and runs it.
fn run_aot_folder(
    dir: &Path,
    (inputs, fill): (&[String], Fill),
    output_dir: Option<&Path>,
    limits: &LimitFlags,
) -> Result<()> {
    let t0 = Instant::now();
    let compiled = Model::load_aot(dir).with_context(|| {
        format!("`heron run {}` loads what `heron compile MODEL -o DIR` wrote (DIR, or DIR/NAME.json)", dir.display())
    })?;
    outln!("AOT model {} loaded from {} in {:.2} ms", compiled.name(), dir.display(), t0.elapsed().as_secs_f64() * 1e3);
    let given = read_inputs(inputs, &limits.limits())?;
    let bound = if given.is_empty() {
        let generated = heron_runtime::generate_inputs(compiled.inputs(), &limits.limits(), fill.input_fill())?;
        outln!("no --input given: running on generated inputs ({})", fill.describe());
        generated
    } else {
        compiled.bind_inputs(given)?
    };
    let t1 = Instant::now();
    let outputs = compiled.run(&bound)?;
    outln!("ran on the AOT engine in {:.3} ms", t1.elapsed().as_secs_f64() * 1e3);
    // Which outputs are class scores is the graph's to say, and an object has none.
    report_outputs(compiled.outputs(), &outputs, output_dir, |_| false)
}

fn print_compile_stats(compiled: &CompiledModel) -> Result<()> {
    let st = compiled.stats();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let stages: Vec<String> = st
        .stages
        .0
        .iter()
        .map(|&(name, t)| format!("{name} {:.1}", ms(t)))
        .chain(std::iter::once(format!("other {:.1}", ms(st.other()))))
        .collect();
    outln!("compiled in {:.1} ms ({} ms)", ms(st.total), stages.join(" + "));
    for p in compiled.pools() {
        outln!("  pool {} ({}): {} bytes", p.name, p.kind, p.size_bytes);
    }
    Ok(())
}

/// How many runs `heron bench` times.
#[derive(Clone, Copy)]
struct BenchTiming {
    runs: usize,
    warmup: usize,
}

fn bench(
    path: &Path,
    (inputs, fill): (&[String], Fill),
    json: Option<&Path>,
    timing: BenchTiming,
    options: CompileOptions,
    limits: &LimitFlags,
) -> Result<()> {
    let given = read_inputs(inputs, &limits.limits())?;
    let model = limits.load_for(path, &given)?;
    let to_stdout = json == Some(Path::new("-"));
    let (inputs, generated) = if given.is_empty() {
        (model.generated_inputs(fill.input_fill())?, true)
    } else {
        (model.bind_inputs(given)?, false)
    };
    let compiled = Compiler::new(options).compile(&model)?;
    if !to_stdout {
        if generated && !inputs.is_empty() {
            outln!("no --input given: timing on generated inputs ({})", fill.describe());
        }
        print_compile_stats(&compiled)?;
    }
    let mut ws = compiled.workspace()?;
    // Timed runs write into the first run's outputs: what a serving loop does.
    let mut outputs = compiled.run_with(&mut ws, &inputs)?;
    for _ in 0..timing.warmup {
        compiled.run_into(&mut ws, &inputs, &mut outputs)?;
    }
    let mut times: Vec<f64> = Vec::with_capacity(timing.runs.max(1));
    for _ in 0..timing.runs.max(1) {
        let t = Instant::now();
        compiled.run_into(&mut ws, &inputs, &mut outputs)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    if !to_stdout {
        outln!(
            "{}: {} runs, median {:.4} ms, p90 {:.4} ms, min {:.4} ms",
            model.name(),
            sorted.len(),
            at(0.5),
            at(0.9),
            sorted[0]
        );
        outln!("peak workspace: {} bytes", ws.pool_bytes());
        outln!("threads: {}", ws.threads());
    }
    if let Some(file) = json {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let stages: serde_json::Map<String, serde_json::Value> =
            compiled.stats().stages.0.iter().map(|&(name, t)| (name.to_string(), ms(t).into())).collect();
        let report = serde_json::json!({
            "model": model.name(),
            "engine": compiled.engine().to_string(),
            "threads": ws.threads(),
            "generated_inputs": generated,
            "compile_ms": ms(compiled.stats().total),
            "compile_stages_ms": stages,
            "runs": sorted.len(),
            "warmup": timing.warmup,
            "median_ms": at(0.5),
            "p10_ms": at(0.1),
            "p90_ms": at(0.9),
            "min_ms": sorted[0],
            "max_ms": sorted[sorted.len() - 1],
            "mean_ms": sorted.iter().sum::<f64>() / sorted.len() as f64,
            "run_ms": times,
            "workspace_bytes": ws.pool_bytes(),
            "pools": compiled.pools().iter().map(|p| serde_json::json!({"name": p.name, "bytes": p.size_bytes})).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&report)?;
        if to_stdout {
            outln!("{text}");
        } else {
            std::fs::write(file, text).with_context(|| format!("cannot write {}", file.display()))?;
            outln!("wrote {}", file.display());
        }
    }
    Ok(())
}

/// Output names become file names: path separators and other awkward characters become `_`,
/// and a name already taken (case-insensitively: `a:b` and `a/b`, `Y` and `y`) gets `_2`, `_3`,
/// ... so no output overwrites another.
fn file_stems(names: &[&str]) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    names
        .iter()
        .map(|name| {
            let s: String =
                name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
            let base = if s.is_empty() || s.starts_with('.') { format!("_{s}") } else { s };
            let mut stem = base.clone();
            let mut k = 1;
            while !taken.insert(stem.to_ascii_lowercase()) {
                k += 1;
                stem = format!("{base}_{k}");
            }
            stem
        })
        .collect()
}

fn print_output(name: &str, t: &Tensor, class_scores: bool) -> Result<()> {
    outln!("output '{name}': {} {:?}", t.dtype(), t.shape());
    // Only what is printed is converted: outputs may be gigabytes.
    let shown: Vec<String> = t.first_f64(8).iter().map(|v| format!("{v:.6}")).collect();
    let more = if t.len() > 8 { ", ..." } else { "" };
    outln!("  values: [{}{more}]", shown.join(", "));
    let classes = t.shape().last().copied().unwrap_or(0);
    if class_scores && t.len() == classes {
        let values = t.to_f64_vec();
        let mut idx: Vec<usize> = (0..classes).collect();
        idx.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
        let top: Vec<String> = idx.iter().take(5).map(|&i| format!("class {i}: {:.6}", values[i])).collect();
        outln!("  top-{}: {}", top.len(), top.join(", "));
    }
    Ok(())
}

fn lowered(path: &Path, stage: Stage, vta: Option<heron_runtime::HwConfig>, limits: &LimitFlags) -> Result<Module> {
    let model = limits.load(path)?;
    let pipeline = Pipeline::new(PipelineOptions { vta, ..limits.pipeline(Vec::new()).options().clone() });
    let module = match stage.pipeline_stage() {
        PipelineStage::Planned => {
            let flat = pipeline.module(&model, PipelineStage::Flat)?;
            pipeline.plan(&flat)?.planned.rewritten.module
        }
        stage => pipeline.module(&model, stage)?,
    };
    verify_module(&module)?;
    Ok(module)
}

fn lower(path: &Path, stage: Stage, full_constants: bool, target: &TargetFlags, limits: &LimitFlags) -> Result<()> {
    let module = lowered(path, stage, target.vta()?, limits)?;
    let data = if full_constants { ConstData::Full } else { ConstData::Elided };
    out!("{}", print_module(&module, data));
    Ok(())
}

fn plan_buffers(path: &Path, algorithm: AlgorithmKind, budget: &heron_planner::Budget) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let plan = heron_planner::json::plan_json(&text, algorithm.name(), budget)?;
    outln!("{}", serde_json::to_string(&plan)?);
    Ok(())
}

struct PlanOptions {
    pools: PoolFlags,
    svg: Option<PathBuf>,
    algorithm: AlgorithmKind,
    effort: EffortFlags,
    limits: LimitFlags,
}

fn plan_model(path: &Path, opts: &PlanOptions) -> Result<()> {
    let module = lowered(path, Stage::Flat, None, &opts.limits)?;
    let pools = opts.pools.pools()?;
    let problem = heron_planner::extract::extract_for_pools(&module, &pools)?;
    let alg = opts.algorithm.algorithm();
    let budget = opts.effort.budget(heron_planner::Budget::DEFAULT_WORK);
    let plan = heron_planner::plan_extracted(&problem, &pools, alg.as_ref(), &budget)?;
    outln!("memory plan of {} ({} buffers, algorithm {})", path.display(), problem.buffers.len(), plan.algorithm);
    let bounds = heron_planner::svg::pool_lower_bounds(&problem, &pools, &plan);
    for ((p, pool), &lb) in pools.iter().enumerate().zip(&bounds) {
        let ratio = if lb == 0 { 1.0 } else { plan.pool_sizes[p] as f64 / lb as f64 };
        let hint = pool.size_hint_bytes.map_or("unbounded".to_string(), |h| format!("limit {h}"));
        outln!(
            "pool {} ({}, {hint}): {} bytes, lower bound {lb}, ratio {ratio:.4}",
            pool.name,
            pool.kind,
            plan.pool_sizes[p]
        );
    }
    outln!("{:<48} {:>10} {:>10} {:>12}  live", "buffer", "size", "offset", "pool");
    for (i, b) in problem.buffers.iter().enumerate() {
        let a = &plan.allocations[i];
        let live: Vec<String> = problem.ranges[i].iter().map(|(s, e)| format!("[{s}, {e})")).collect();
        outln!("{:<48} {:>10} {:>10} {:>12}  {}", b.name, b.size_bytes, a.offset, pools[a.pool].name, live.join(" "));
    }
    if let Some(svg) = &opts.svg {
        std::fs::write(svg, heron_planner::svg::memory_map_svg(&problem, &pools, &plan))
            .with_context(|| format!("cannot write {}", svg.display()))?;
        outln!("wrote {}", svg.display());
    }
    Ok(())
}

struct CompileFlags {
    name: String,
    pools: PoolFlags,
    embed_workspace: bool,
    target_cpu: heron_jit::isa::TargetCpu,
    /// Kernels on, split into this many tasks.
    kernels: Option<usize>,
    algorithm: AlgorithmKind,
    effort: EffortFlags,
    target: TargetFlags,
    limits: LimitFlags,
}

fn compile(path: &Path, dir: &Path, flags: &CompileFlags) -> Result<()> {
    let start = Instant::now();
    let model = flags.limits.load(path)?;
    let options = CompileOptions {
        planner: flags.algorithm,
        planner_work: flags.effort.work.unwrap_or(heron_planner::Budget::DEFAULT_WORK),
        planner_time_limit_ms: flags.effort.time_limit_ms,
        pools: flags.pools.pools()?,
        limits: flags.limits.limits(),
        vta: flags.target.vta()?,
        threads: flags.kernels.unwrap_or(1),
        ..CompileOptions::default()
    };
    let mut aot = heron_aot::AotOptions::new(flags.name.clone());
    aot.kernels = flags.kernels.is_some();
    aot.target_cpu = flags.target_cpu;
    aot.embed_workspace = flags.embed_workspace;
    aot.embed_parameters = flags.pools.parameter_pools.is_empty();
    let artifacts = Compiler::new(options).compile_aot(&model, &aot)?;
    artifacts.write(dir)?;
    let meta = &artifacts.metadata;
    outln!(
        "compiled {} to {}/{}.{{o,h,json}} in {:.1} ms: object {} bytes, entry {}",
        path.display(),
        dir.display(),
        meta.name,
        start.elapsed().as_secs_f64() * 1e3,
        artifacts.object.len(),
        meta.entry
    );
    for p in &meta.pools {
        let file = p.params_file.as_ref().map_or(String::new(), |f| format!(", contents in {f}"));
        outln!("pool {} ({}, {}): {} bytes, aligned to {}{file}", p.name, p.kind, p.source, p.size_bytes, p.alignment);
    }
    outln!("imports: {}", meta.undefined_symbols.join(" "));
    if let Some((context, _)) = artifacts.context_library() {
        outln!(
            "routines from the run context: {} (run with heron_{}_run_ctx and {context})",
            meta.routines.join(" "),
            meta.c_name
        );
    }
    outln!("link: {}", artifacts.link_line(dir));
    Ok(())
}

fn vta_disasm(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let isa = heron_vta::Isa::new(heron_vta::HwConfig::default())?;
    out!("{}", heron_vta::isa::disassemble(&isa, &bytes)?);
    Ok(())
}

fn layout(shape: &[usize], map: &str, index: Option<&[i64]>) -> Result<()> {
    let map = IndexMap::parse(map)?;
    let transformed = map.transformed_shape(shape)?;
    map.check_injective(shape)?;
    let physical = map.physical_shape(&transformed);
    let mut json = format!("{{\"transformed_shape\": {transformed:?}, \"physical_shape\": {physical:?}");
    if let Some(index) = index {
        if index.len() != shape.len() || index.iter().zip(shape).any(|(&i, &n)| i < 0 || i as usize >= n) {
            anyhow::bail!("index {index:?} is outside shape {shape:?}");
        }
        let flat = map.physical_index(&transformed, index);
        if flat.len() == 1 {
            json.push_str(&format!(", \"flat_index\": {}", flat[0]));
        } else {
            json.push_str(&format!(", \"flat_index\": {flat:?}"));
        }
    }
    json.push('}');
    outln!("{json}");
    Ok(())
}

fn quantize(path: &Path, output: &Path, files: &[PathBuf], options: &QuantizeOptions) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let graph = heron_ir::onnx::import_model(&bytes, &ImportOptions::default().reading_data_beside(path))?;
    let inputs: Vec<_> = graph.inputs.iter().map(|&i| graph.value(i).ty.clone()).collect();
    if !files.is_empty() && !files.len().is_multiple_of(inputs.len().max(1)) {
        anyhow::bail!("{} calibration files for a model with {} inputs: give one per input", files.len(), inputs.len());
    }
    let mut samples: Vec<Vec<Tensor>> = Vec::new();
    for group in files.chunks(inputs.len().max(1)) {
        let mut split: Vec<Vec<Tensor>> = Vec::new();
        for (file, ty) in group.iter().zip(&inputs) {
            let t = read_npy(file).with_context(|| format!("reading {}", file.display()))?;
            let parts = split_samples(t, ty).with_context(|| format!("calibration file {}", file.display()))?;
            if split.is_empty() {
                split = vec![Vec::new(); parts.len()];
            }
            if parts.len() != split.len() {
                anyhow::bail!("calibration files of one group hold different numbers of samples");
            }
            for (sample, part) in split.iter_mut().zip(parts) {
                sample.push(part);
            }
        }
        samples.extend(split);
    }
    let (quantized, report) = quantize_model(&bytes, &samples, options)?;
    std::fs::write(output, quantized).with_context(|| format!("writing {}", output.display()))?;
    outln!(
        "quantized {} Conv/Gemm/MatMul and {} activations ({} calibration samples) -> {}",
        report.anchors.len(),
        report.activations.len(),
        samples.len(),
        output.display()
    );
    if report.folded_batch_norms > 0 {
        outln!("folded {} BatchNormalization into the Conv before them", report.folded_batch_norms);
    }
    for (node, why) in &report.left_float {
        outln!("left in float: {node} ({why})");
    }
    Ok(())
}

/// A calibration tensor as samples of the input type `ty`: itself, or, when its leading axis
/// is a multiple of the input's, that many slices along it.
fn split_samples(t: Tensor, ty: &heron_ir::TensorType) -> Result<Vec<Tensor>> {
    if t.tensor_type() == *ty {
        return Ok(vec![t]);
    }
    let (shape, want) = (t.shape().to_vec(), &ty.shape);
    let fits = t.dtype() == ty.dtype
        && shape.len() == want.len()
        && !want.is_empty()
        && shape[1..] == want[1..]
        && want[0] > 0
        && shape[0].is_multiple_of(want[0]);
    if !fits {
        anyhow::bail!("holds {}{:?}, the input is {ty}", t.dtype(), shape);
    }
    let per = t.len() / (shape[0] / want[0]);
    let bytes = t.to_le_bytes();
    let width = t.dtype().size_bytes();
    bytes.chunks(per * width).map(|c| Tensor::from_le_bytes(ty, c).map_err(|e| anyhow::anyhow!(e))).collect()
}

fn inspect(path: &Path, workspace: bool, target: &TargetFlags, limits: &LimitFlags) -> Result<()> {
    let model = limits.load(path)?;
    let stats = graph_stats(model.graph());
    outln!("model {}", model.name());
    for i in model.inputs() {
        outln!("input  {}: {}", i.name, i.ty);
    }
    for o in model.outputs() {
        outln!("output {}: {}", o.name, o.ty);
    }
    let nodes: usize = stats.op_counts.values().sum();
    outln!("nodes: {nodes}");
    for (op, n) in &stats.op_counts {
        outln!("  {op:<20} {n}");
    }
    outln!("parameter bytes: {}", stats.parameter_bytes);
    outln!("activation bytes: {} (peak live in node order: {})", stats.activation_bytes, stats.peak_activation_bytes);
    outln!("FLOPs: {} ({:.4} GFLOP, 2 x MACs of Conv/Gemm/MatMul)", stats.flops, stats.flops as f64 / 1e9);
    if let Some(vta) = target.vta()? {
        let pipeline =
            Pipeline::new(PipelineOptions { limits: limits.limits(), vta: Some(vta), ..PipelineOptions::default() });
        if let Some((graph, partition)) = pipeline.partition(&model) {
            out!("{}", heron_vta_compiler::partition::Display { partition: &partition, graph: &graph });
        }
    }
    if workspace {
        let module = lowered(path, Stage::Flat, None, limits)?;
        outln!("workspace per function (bytes; unshared / shared by liveness):");
        for w in module_workspace(&module) {
            outln!("  {:<32} {:>10} {:>10}", w.func, w.unshared_bytes, w.shared_bytes);
        }
    }
    Ok(())
}
