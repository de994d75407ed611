//! Compiling a [`Model`] and running it: [`Compiler`] takes a model through the
//! [`Pipeline`](crate::pipeline) and Cranelift code generation into a
//! [`CompiledModel`] (JIT), or into an object file with a C header (AOT, `compile_aot`); a
//! shared library compiled ahead of time loads back with [`Model::load_aot`] and runs through
//! the same API. A [`Workspace`] holds one caller's pools and staging buffers, allocated once
//! and reused, so a run allocates nothing but its outputs.

use std::path::Path;
use std::time::{Duration, Instant};

use heron_aot::loader::AotLibrary;
use heron_aot::metadata::{PoolRole, PoolSource};
use heron_aot::{AotOptions, Artifacts, TensorSpec};
use heron_ir::loop_ir::workspace::{WorkspaceSize, module_workspace};
use heron_ir::{Limits, Tensor};
use heron_jit::isa::OptLevel;
use heron_jit::kernels::KernelConfig;
use heron_jit::routines::{Routine, RoutineParam, RoutineSignature};
use heron_jit::threads::ThreadPool;
use heron_jit::{CodegenOptions, JitArg, JitModule, JitOptions};
use heron_planner::{AlgorithmKind, Budget, PlannedModule, PoolInfo, PoolKind};
use heron_vta::HwConfig;
use heron_vta::region::{RegionCall, Session};
use heron_vta::sim::Profile;

use crate::memory::{Block, GuardPages};
use crate::model::{Model, RuntimeError, TensorInfo, check_inputs};
use crate::pipeline::{self, Pipeline, PipelineOptions, Stage, StageTimes};

/// How a compiled model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Engine {
    /// Cranelift machine code with statically planned pools.
    #[default]
    Jit,
    /// The reference interpreter (the oracle; no code generation).
    Interpreter,
    /// An object compiled ahead of time, linked into a shared library and loaded in-process.
    Aot,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::Jit => "jit",
            Engine::Interpreter => "interp",
            Engine::Aot => "aot",
        })
    }
}

/// Compiler settings.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// How the compiled model runs.
    pub engine: Engine,
    /// Cranelift's optimization level.
    pub opt_level: OptLevel,
    /// Emit loops marked vectorized with SIMD.
    pub vectorize: bool,
    /// The planning algorithm.
    pub planner: AlgorithmKind,
    /// Planning work budget in work units (see `heron_planner::Budget`): plans, and so the
    /// compiled code, are the same on every run and machine.
    pub planner_work: u64,
    /// Also stop planning after this many milliseconds. Not reproducible: where the clock cuts
    /// the search depends on the machine's speed and load.
    pub planner_time_limit_ms: Option<u64>,
    /// Memory pools, most preferred first; empty means one unbounded workspace pool and one
    /// constant pool.
    pub pools: Vec<PoolInfo>,
    /// Limits on the scratch buffers lowering adds and on the total workspace (the model's
    /// own tensors were checked against the import limits).
    pub limits: Limits,
    /// Place every pool and staging buffer between guard pages (see [`GuardPages`]); the
    /// default comes from `HERON_GUARD_PAGES`.
    pub guard_pages: GuardPages,
    /// Threads a run uses (the caller and `threads - 1` workers of each [`Workspace`]'s pool)
    /// for the loops the target marked parallel; results are bit-identical for any count.
    /// Default: the number of physical cores. The JIT and the in-process AOT engine.
    pub threads: usize,
    /// Offload the int8 regions of a quantized model to VTA with this hardware configuration
    /// (`None`: everything on the CPU). Each [`Workspace`] then owns a device session: its own
    /// device (the simulator, or the driver `HERON_VTA_DRIVER` names) holding the workspace's
    /// VTA pools, so threads with their own workspaces run independently.
    pub vta: Option<HwConfig>,
    /// Let the CPU target call precompiled AVX-512 / AVX2 kernels for convolutions, GEMMs and
    /// max pooling (`HERON_KERNELS=off` also turns them off). Off: pure Cranelift code, for
    /// comparison and for CPUs without AVX2. The JIT and the in-process AOT engine call them
    /// through their run context; [`Compiler::compile_aot`] only with `AotOptions::kernels`.
    pub kernels: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            engine: Engine::Jit,
            opt_level: OptLevel::default(),
            vectorize: true,
            planner: AlgorithmKind::Auto,
            planner_work: Budget::DEFAULT_WORK,
            planner_time_limit_ms: None,
            pools: Vec::new(),
            limits: Limits::DEFAULT,
            guard_pages: GuardPages::from_env(),
            threads: physical_cores(),
            vta: None,
            kernels: true,
        }
    }
}

/// Physical cores of this machine (hyperthread siblings counted once), from Linux's CPU
/// topology; the logical CPU count where that is unavailable.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, usize::from);
    let mut cores = std::collections::BTreeSet::new();
    for cpu in 0..logical {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/core_cpus_list");
        match std::fs::read_to_string(path) {
            Ok(siblings) => {
                cores.insert(siblings.trim().to_string());
            }
            Err(_) => return logical,
        }
    }
    cores.len().max(1)
}

/// Compiles models.
#[derive(Clone, Debug, Default)]
pub struct Compiler {
    options: CompileOptions,
}

/// Alignment of pools and staging buffers.
const ALIGN: usize = 64;

/// A memory pool as the compiled code sees it.
#[derive(Clone, Debug)]
pub struct PoolLayout {
    /// The pool's name (`workspace`, `constants`, or one the options gave).
    pub name: String,
    /// Workspace (activations and scratch) or constants.
    pub kind: PoolKind,
    /// Its planned size.
    pub size_bytes: u64,
    /// The alignment the compiled code assumes for the pool's base.
    pub alignment: u64,
    /// Device memory (a VTA pool), allocated by each workspace's session.
    pub device: bool,
}

impl PoolLayout {
    /// The alignment of the pool's host memory: at least [`ALIGN`]; a pool asking for more
    /// than a page (or not a power of two: metadata read from disk) is refused.
    fn block_align(&self) -> Result<usize, RuntimeError> {
        let align = usize::try_from(self.alignment).unwrap_or(usize::MAX).max(ALIGN);
        if !align.is_power_of_two() || align > 4096 {
            return Err(RuntimeError::Compile(format!(
                "pool '{}' asks for {}-byte alignment: a power of two up to 4096 is supported",
                self.name, self.alignment
            )));
        }
        Ok(align)
    }
}

/// What compiling took.
#[derive(Clone, Debug)]
pub struct CompileStats {
    /// The whole compile, from model to runnable code.
    pub total: Duration,
    /// Each stage's time, in the order they ran (graph passes, lowering, target, layouts,
    /// flattening, planning, code generation, constants; linking for the AOT engine).
    pub stages: StageTimes,
}

impl CompileStats {
    /// What no stage accounts for (the time between stages).
    pub fn other(&self) -> Duration {
        self.total.saturating_sub(self.stages.sum())
    }
}

/// Where a pool's memory comes from at run time.
#[derive(Debug)]
enum PoolMemory {
    /// Each [`Workspace`] holds its own.
    PerWorkspace,
    /// Read-only contents shared by every workspace (constants).
    Shared(Block),
    /// Inside the compiled code (an AOT object's embedded pools).
    Internal,
    /// Device memory of each workspace's VTA session, holding `image` (constants) if any.
    Device(Option<std::sync::Arc<[u8]>>),
}

enum Code {
    Jit(JitModule),
    Aot(AotLibrary),
}

/// Compiled code and the pools it runs on.
struct Executable {
    code: Code,
    pools: Vec<PoolLayout>,
    memory: Vec<PoolMemory>,
    guard_pages: GuardPages,
    threads: usize,
    /// The VTA configuration its regions were compiled for.
    vta: Option<HwConfig>,
}

enum Backend {
    Interpreter(Model),
    Compiled(Box<Executable>),
}

/// A model ready to run; `Send + Sync`, so threads can share it, each with its own
/// [`Workspace`].
pub struct CompiledModel {
    name: String,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    backend: Backend,
    stats: CompileStats,
}

/// One caller's memory for running a [`CompiledModel`]: workspace pools and input/output
/// staging, allocated once, 64-byte aligned.
pub struct Workspace {
    inputs: Vec<Block>,
    outputs: Vec<Block>,
    /// One per pool, in pool order (`None` where the pool's memory is not per workspace).
    pools: Vec<Option<Block>>,
    /// Workers for parallel loops (`None`: single-threaded).
    threads: Option<ThreadPool>,
    /// The VTA session and, per pool, its block there (models with VTA regions).
    vta: Option<(Box<Session>, Vec<Option<usize>>)>,
}

/// What the VTA regions did: the last run's region calls, and the counters since the last
/// [`Workspace::take_vta_stats`].
#[derive(Clone, Debug)]
pub struct VtaStats {
    /// Each region call, in order.
    pub calls: Vec<RegionCall>,
    /// The device's profiling counters (simulators only).
    pub profile: Option<Profile>,
}

impl Workspace {
    /// Bytes held by the workspace pools.
    pub fn pool_bytes(&self) -> usize {
        self.pools.iter().flatten().map(|p| p.len()).sum()
    }

    /// Threads a run in this workspace uses (the caller and its pool's workers).
    pub fn threads(&self) -> usize {
        self.threads.as_ref().map_or(1, ThreadPool::threads)
    }

    /// The last run's VTA region calls and the counters since the last call (`None` without
    /// VTA regions); the counters start anew.
    pub fn take_vta_stats(&mut self) -> Option<VtaStats> {
        let (session, _) = self.vta.as_mut()?;
        let stats = VtaStats { calls: session.take_calls(), profile: session.profile() };
        session.clear_profile();
        Some(stats)
    }
}

/// A model through the compiler's front half: planned, ready for a code generator.
struct Planned {
    planned: PlannedModule,
    /// Per-function workspace sizes, when asked for.
    workspace: Vec<WorkspaceSize>,
}

impl CompileOptions {
    /// What the pipeline's stages read.
    pub fn pipeline(&self) -> PipelineOptions {
        PipelineOptions {
            limits: self.limits,
            pools: self.pools.clone(),
            planner: self.planner,
            planner_work: self.planner_work,
            planner_time_limit_ms: self.planner_time_limit_ms,
            vta: self.vta,
            kernels: if self.kernels && self.engine != Engine::Interpreter {
                KernelConfig::host(self.threads)
            } else {
                None
            },
        }
    }
}

/// The routine VTA region functions call (see `heron_vta::region`).
fn vta_routine() -> Routine {
    let mut params = vec![RoutineParam::Device(0), RoutineParam::Buffer];
    params.extend([RoutineParam::Buffer; heron_vta::region::SLOTS]);
    Routine {
        signature: RoutineSignature { name: heron_vta_compiler::target::ROUTINE.into(), params },
        features: Vec::new(),
        address: heron_vta::region::heron_vta_region as *const u8,
    }
}

impl Compiler {
    /// A compiler with these options.
    pub fn new(options: CompileOptions) -> Compiler {
        Compiler { options }
    }

    /// Its options.
    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    /// The pipeline up to code generation (see [`Pipeline`]), shared by the JIT and AOT paths.
    /// `workspace_sizes`: also run the per-function workspace-size query (AOT metadata only).
    /// `kernels`: the CPU target may call the kernels (if the options let it).
    fn plan(
        &self,
        model: &Model,
        workspace_sizes: bool,
        kernels: bool,
        times: &mut StageTimes,
    ) -> Result<Planned, RuntimeError> {
        let mut options = self.options.pipeline();
        if !kernels {
            options.kernels = None;
        }
        let pipeline = Pipeline::new(options);
        let flat = pipeline.module_timed(model, Stage::Flat, times)?;
        let workspace = if workspace_sizes { module_workspace(&flat) } else { Vec::new() };
        let pipeline::Planned { planned, planning } = pipeline.plan(&flat)?;
        times.add("planning", planning);
        let main =
            planned.rewritten.module.main().ok_or_else(|| RuntimeError::Compile("lowering produced no main".into()))?;
        let expected = model.inputs().len() + model.outputs().len() + planned.rewritten.pools.len();
        if main.params.len() != expected {
            return Err(RuntimeError::Compile(format!(
                "main takes {} buffers, expected {expected} (inputs, outputs, pools)",
                main.params.len()
            )));
        }
        Ok(Planned { planned, workspace })
    }

    /// Compiles `model` for in-process runs: lowers, plans and generates code (or prepares
    /// the interpreter, as the options' engine says).
    pub fn compile(&self, model: &Model) -> Result<CompiledModel, RuntimeError> {
        let start = Instant::now();
        let (inputs, outputs) = (model.inputs(), model.outputs());
        let mut stages = StageTimes::default();
        let exe = match self.options.engine {
            Engine::Interpreter => {
                let stats = CompileStats { total: start.elapsed(), stages };
                let name = model.name().to_string();
                return Ok(CompiledModel {
                    name,
                    inputs,
                    outputs,
                    backend: Backend::Interpreter(model.clone()),
                    stats,
                });
            }
            Engine::Jit => self.compile_jit(model, &mut stages)?,
            Engine::Aot => self.compile_aot_in_process(model, &mut stages)?,
        };
        let stats = CompileStats { total: start.elapsed(), stages };
        Ok(CompiledModel {
            name: model.name().to_string(),
            inputs,
            outputs,
            backend: Backend::Compiled(Box::new(exe)),
            stats,
        })
    }

    fn compile_jit(&self, model: &Model, times: &mut StageTimes) -> Result<Executable, RuntimeError> {
        let Planned { planned, .. } = self.plan(model, false, true, times)?;
        let rewritten = planned.rewritten;
        let (inputs, outputs) = (model.inputs().len(), model.outputs().len());
        let read_only: Vec<bool> = (0..inputs)
            .map(|_| true)
            .chain((0..outputs).map(|_| false))
            .chain(rewritten.pools.iter().map(|p| p.kind == PoolKind::Constant))
            .collect();
        let codegen_start = Instant::now();
        let options = JitOptions {
            opt_level: self.options.opt_level,
            codegen: CodegenOptions { vectorize: self.options.vectorize, fma: true },
            routines: self
                .options
                .vta
                .map(|_| vta_routine())
                .into_iter()
                .chain(heron_jit::kernels::routines())
                .collect(),
        };
        let code = JitModule::compile(&rewritten.module, &read_only, options)?;
        times.add("code generation", codegen_start.elapsed());
        let constants_start = Instant::now();
        let pools = rewritten
            .pools
            .iter()
            .zip(&rewritten.pool_sizes)
            .map(|(p, &size)| PoolLayout {
                name: p.name.clone(),
                kind: p.kind,
                size_bytes: size,
                alignment: p.alignment,
                device: pipeline::is_device_pool(p),
            })
            .collect::<Vec<_>>();
        let guard = self.options.guard_pages;
        let memory = rewritten
            .images
            .iter()
            .zip(&rewritten.pools)
            .zip(&pools)
            .map(|((img, pool), layout)| match img {
                _ if pipeline::is_device_pool(pool) => {
                    let bytes = img
                        .as_ref()
                        .map(|i| i.to_bytes())
                        .transpose()
                        .map_err(|e| RuntimeError::Compile(e.to_string()))?;
                    Ok(PoolMemory::Device(bytes.map(Into::into)))
                }
                None => Ok(PoolMemory::PerWorkspace),
                Some(image) => Ok(PoolMemory::Shared(Block::read_only_filled(
                    image.size,
                    layout.block_align()?,
                    guard,
                    &format!("pool '{}'", pool.name),
                    |dst| image.write_into(dst),
                )?)),
            })
            .collect::<Result<_, RuntimeError>>()?;
        times.add("constants", constants_start.elapsed());
        Ok(Executable {
            code: Code::Jit(code),
            pools,
            memory,
            guard_pages: guard,
            threads: self.options.threads,
            vta: self.options.vta,
        })
    }

    /// Compiles `model` ahead of time: an object file, its C header, metadata and parameter
    /// blobs (see `heron_aot`). Pools come from the compile options; `aot` says which are
    /// embedded in the object and whether it calls the kernels (packed for this machine's ISA,
    /// split into `threads` tasks).
    pub fn compile_aot(&self, model: &Model, aot: &AotOptions) -> Result<Artifacts, RuntimeError> {
        self.compile_aot_timed(model, aot, &mut StageTimes::default())
    }

    fn compile_aot_timed(
        &self,
        model: &Model,
        aot: &AotOptions,
        times: &mut StageTimes,
    ) -> Result<Artifacts, RuntimeError> {
        let Planned { planned, workspace } = self.plan(model, true, aot.kernels, times)?;
        let spec = |infos: Vec<TensorInfo>| {
            infos.into_iter().map(|i| TensorSpec { name: i.name, ty: i.ty }).collect::<Vec<_>>()
        };
        let mut aot = aot.clone();
        aot.opt_level = self.options.opt_level;
        // The routine table's order: VTA's routine, then the kernels (as every context lists
        // them).
        let kernels = aot.kernels && self.options.pipeline().kernels.is_some();
        aot.routines = (self.options.vta.map(|_| vta_routine()).into_iter())
            .chain(kernels.then(heron_jit::kernels::routines).into_iter().flatten())
            .map(|r| r.signature)
            .collect();
        let (inputs, outputs) = (spec(model.inputs()), spec(model.outputs()));
        Ok(times.time("code generation", || heron_aot::compile(&planned, &workspace, &inputs, &outputs, &aot))?)
    }

    /// [`Engine::Aot`]: compile for this machine, link a shared library in a scratch directory
    /// and load it (the directory is removed once the library is mapped).
    fn compile_aot_in_process(&self, model: &Model, times: &mut StageTimes) -> Result<Executable, RuntimeError> {
        if self.options.vta.is_some() {
            return Err(RuntimeError::Compile(
                "the in-process AOT engine runs without VTA; use the JIT, or `heron compile --target vta` and a C \
                 program linking libheron_vta.a"
                    .into(),
            ));
        }
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut aot = AotOptions::new("model");
        aot.target_cpu = heron_jit::isa::TargetCpu::Native;
        aot.kernels = true;
        // Constants in heap memory like the JIT's, not file-backed .rodata: large weight sets
        // stream measurably slower from 4 KiB file pages (resnet_ish: ~1.4x).
        aot.embed_parameters = false;
        let artifacts = self.compile_aot_timed(model, &aot, times)?;
        let start = Instant::now();
        let unique = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("heron-aot-{}-{unique}", std::process::id()));
        let guard = self.options.guard_pages;
        let loaded = artifacts
            .write(&dir)
            .map_err(RuntimeError::from)
            .and_then(|()| aot_executable(AotLibrary::open(&dir)?, guard, self.options.threads));
        // Best effort: a leftover scratch directory is harmless.
        let _ = std::fs::remove_dir_all(&dir);
        times.add("linking", start.elapsed());
        loaded
    }
}

/// A loaded AOT library with its pools: parameter blobs read, workspaces per [`Workspace`],
/// parallel loops on `threads`.
fn aot_executable(library: AotLibrary, guard: GuardPages, threads: usize) -> Result<Executable, RuntimeError> {
    let mut parameters = library.read_parameters()?.into_iter();
    let meta = library.metadata();
    let pools = meta
        .pools
        .iter()
        .map(|p| PoolLayout {
            name: p.name.clone(),
            kind: if p.kind == PoolRole::Parameter { PoolKind::Constant } else { PoolKind::Workspace },
            size_bytes: p.size_bytes,
            alignment: p.alignment,
            device: false,
        })
        .collect::<Vec<_>>();
    let memory = meta
        .pools
        .iter()
        .zip(&pools)
        .map(|(p, layout)| {
            Ok(match (p.source, p.kind) {
                (PoolSource::Embedded, _) => PoolMemory::Internal,
                (PoolSource::User, PoolRole::Parameter) => {
                    let bytes = parameters.next().unwrap_or_default();
                    let align = layout.block_align()?;
                    PoolMemory::Shared(Block::read_only_filled(
                        bytes.len(),
                        align,
                        guard,
                        &format!("pool '{}'", p.name),
                        |dst| dst.copy_from_slice(&bytes),
                    )?)
                }
                (PoolSource::User, _) => PoolMemory::PerWorkspace,
            })
        })
        .collect::<Result<_, RuntimeError>>()?;
    Ok(Executable { code: Code::Aot(library), pools, memory, guard_pages: guard, threads, vta: None })
}

impl Model {
    /// Loads a model compiled ahead of time into `dir` (or `dir/NAME.json`) by `heron compile` (or
    /// [`Compiler::compile_aot`]): links `NAME.o` into a shared library if needed, loads it and
    /// its parameter blobs, and runs it through the same API as the JIT.
    pub fn load_aot(dir: impl AsRef<Path>) -> Result<CompiledModel, RuntimeError> {
        let start = Instant::now();
        let library = AotLibrary::open(dir.as_ref())?;
        let meta = library.metadata();
        let info = |t: &heron_aot::metadata::TensorMeta| {
            let dtype = t.dtype().ok_or_else(|| RuntimeError::Compile(format!("unknown dtype '{}'", t.dtype)))?;
            Ok(TensorInfo { name: t.name.clone(), ty: heron_ir::TensorType::new(dtype, t.shape.clone()) })
        };
        let inputs = meta.inputs.iter().map(info).collect::<Result<Vec<_>, RuntimeError>>()?;
        let outputs = meta.outputs.iter().map(info).collect::<Result<Vec<_>, RuntimeError>>()?;
        let name = meta.name.clone();
        let exe = aot_executable(library, GuardPages::from_env(), physical_cores())?;
        let mut stages = StageTimes::default();
        stages.add("loading", start.elapsed());
        let stats = CompileStats { total: start.elapsed(), stages };
        Ok(CompiledModel { name, inputs, outputs, backend: Backend::Compiled(Box::new(exe)), stats })
    }
}

impl CompiledModel {
    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The inputs, in order.
    pub fn inputs(&self) -> &[TensorInfo] {
        &self.inputs
    }

    /// The outputs, in order.
    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    /// How it runs.
    pub fn engine(&self) -> Engine {
        match &self.backend {
            Backend::Interpreter(_) => Engine::Interpreter,
            Backend::Compiled(exe) => match exe.code {
                Code::Jit(_) => Engine::Jit,
                Code::Aot(_) => Engine::Aot,
            },
        }
    }

    /// What compiling took.
    pub fn stats(&self) -> &CompileStats {
        &self.stats
    }

    /// The planned pools (empty for the interpreter).
    pub fn pools(&self) -> &[PoolLayout] {
        match &self.backend {
            Backend::Interpreter(_) => &[],
            Backend::Compiled(exe) => &exe.pools,
        }
    }

    /// Fresh memory for runs of this model: its pools and staging buffers, allocated now (an
    /// error, not an abort, when the machine does not have it).
    pub fn workspace(&self) -> Result<Workspace, RuntimeError> {
        let Backend::Compiled(exe) = &self.backend else {
            return Ok(Workspace {
                inputs: Vec::new(),
                outputs: Vec::new(),
                pools: Vec::new(),
                threads: None,
                vta: None,
            });
        };
        let guard = exe.guard_pages;
        let staging = |infos: &[TensorInfo], kind: &str| {
            infos
                .iter()
                .map(|i| {
                    let align = i.ty.dtype.size_bytes();
                    Block::zeroed(i.ty.size_bytes(), align, guard, &format!("{kind} '{}'", i.name))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let pools = exe
            .pools
            .iter()
            .zip(&exe.memory)
            .map(|(p, m)| {
                let size = usize::try_from(p.size_bytes).unwrap_or(usize::MAX);
                matches!(m, PoolMemory::PerWorkspace)
                    .then(|| Ok(Block::zeroed(size, p.block_align()?, guard, &format!("pool '{}'", p.name))?))
                    .transpose()
            })
            .collect::<Result<_, RuntimeError>>()?;
        // An AOT library's routines (the kernels) come from the pool's context, so a library
        // that calls any gets a pool even for one thread.
        let threads = match (&exe.code, exe.threads) {
            (Code::Jit(_), n) if n > 1 => Some(n),
            (Code::Aot(library), n) if n > 1 || !library.metadata().routines.is_empty() => Some(n),
            _ => None,
        };
        let threads = threads
            .map(|n| ThreadPool::new(n).map_err(|e| RuntimeError::Compile(format!("cannot start {n} threads: {e}"))))
            .transpose()?;
        let vta = match exe.vta {
            None => None,
            Some(config) => {
                let mut session = Box::new(Session::new(config)?);
                let mut blocks = Vec::with_capacity(exe.pools.len());
                for (p, m) in exe.pools.iter().zip(&exe.memory) {
                    blocks.push(match m {
                        PoolMemory::Device(image) => {
                            let size = usize::try_from(p.size_bytes).unwrap_or(usize::MAX);
                            Some(session.alloc(size, image.as_deref().unwrap_or(&[]))?)
                        }
                        _ => None,
                    });
                }
                Some((session, blocks))
            }
        };
        Ok(Workspace {
            inputs: staging(&self.inputs, "input")?,
            outputs: staging(&self.outputs, "output")?,
            pools,
            threads,
            vta,
        })
    }

    /// Orders inputs given by name (or by position when the name is `None`) to match the
    /// model's inputs, checking count, names, dtypes and shapes.
    pub fn bind_inputs(&self, given: Vec<(Option<String>, Tensor)>) -> Result<Vec<Tensor>, RuntimeError> {
        crate::model::bind_inputs(&self.inputs, given)
    }

    /// Runs the model on inputs given by name or position (as [`CompiledModel::bind_inputs`]
    /// takes them) and returns the outputs with their names, in the model's output order.
    pub fn run_named(
        &self,
        ws: &mut Workspace,
        given: Vec<(Option<String>, Tensor)>,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let outputs = self.run_with(ws, &self.bind_inputs(given)?)?;
        Ok(self.outputs.iter().map(|o| o.name.clone()).zip(outputs).collect())
    }

    /// Runs the model on `inputs` (in model order) with a fresh workspace.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_with(&mut self.workspace()?, inputs)
    }

    /// Runs the model in `ws`, which must come from [`CompiledModel::workspace`] of this model,
    /// and returns fresh output tensors. Inputs are checked (count, dtype, shape) before any
    /// generated code runs.
    pub fn run_with(&self, ws: &mut Workspace, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        if let Backend::Interpreter(model) = &self.backend {
            return model.run_interpreter(inputs);
        }
        if !signature_matches(inputs, &self.inputs) {
            check_inputs(&self.inputs, inputs)?;
        }
        // Allocated before the run, so a machine without the memory fails before spending
        // the run on it.
        let mut outputs = self
            .outputs
            .iter()
            .map(|o| {
                Tensor::try_zeros(&o.ty).map_err(|e| {
                    RuntimeError::Memory(crate::memory::AllocError {
                        what: format!("output '{}'", o.name),
                        bytes: o.ty.size_bytes(),
                        detail: Some(e),
                    })
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.run_into(ws, inputs, &mut outputs)?;
        Ok(outputs)
    }

    /// Runs the model in `ws` and writes its outputs into `outputs` (model order, each of its
    /// output's dtype and shape, e.g. the tensors an earlier run returned): a run that
    /// allocates nothing. Generated code reads standard-layout inputs and writes
    /// standard-layout outputs in place; under guard pages, and for other layouts, it goes
    /// through the workspace's staging buffers instead.
    pub fn run_into(&self, ws: &mut Workspace, inputs: &[Tensor], outputs: &mut [Tensor]) -> Result<(), RuntimeError> {
        if !signature_matches(inputs, &self.inputs) {
            check_inputs(&self.inputs, inputs)?;
        }
        if !signature_matches(outputs, &self.outputs) {
            check_outputs(&self.outputs, outputs)?;
        }
        let exe = match &self.backend {
            Backend::Interpreter(model) => {
                for (slot, t) in outputs.iter_mut().zip(model.run_interpreter(inputs)?) {
                    *slot = t;
                }
                return Ok(());
            }
            Backend::Compiled(exe) => exe,
        };
        let fits = ws.inputs.len() == self.inputs.len()
            && ws.outputs.len() == self.outputs.len()
            && ws.pools.len() == exe.pools.len()
            && ws.pools.iter().zip(&exe.pools).zip(&exe.memory).all(|((b, p), m)| match (b, m) {
                (Some(b), PoolMemory::PerWorkspace) => b.len() as u64 == p.size_bytes,
                (None, PoolMemory::PerWorkspace) | (Some(_), _) => false,
                (None, PoolMemory::Device(_)) => ws.vta.is_some(),
                (None, _) => true,
            });
        if !fits {
            return Err(RuntimeError::ForeignWorkspace);
        }
        // Guard pages must surround every buffer generated code touches, which the caller's
        // tensors do not have.
        let in_place = exe.guard_pages == GuardPages::Off;
        match &exe.code {
            Code::Jit(code) => {
                // The session is the device handle of slot 0; its blocks back the VTA pools.
                let (devices, mut device_memory) = match ws.vta.as_mut() {
                    Some((session, blocks)) => {
                        session.clear_calls();
                        let handle = &mut **session as *mut Session as heron_jit::threads::DeviceHandle;
                        let mut memory: Vec<Option<&mut [u8]>> = session.memory().into_iter().map(Some).collect();
                        let per_pool: Vec<Option<&mut [u8]>> =
                            blocks.iter().map(|b| b.and_then(|k| memory.get_mut(k).and_then(Option::take))).collect();
                        (vec![handle], per_pool)
                    }
                    None => (Vec::new(), Vec::new()),
                };
                let args = input_bytes(inputs, &mut ws.inputs, in_place)
                    .map(JitArg::Read)
                    .chain(output_bytes(outputs, &mut ws.outputs, in_place).map(JitArg::Write))
                    .chain(ws.pools.iter_mut().zip(&exe.memory).enumerate().map(|(k, (w, m))| match (w, m) {
                        (Some(w), _) => JitArg::Write(w.bytes_mut()),
                        (None, PoolMemory::Shared(c)) => JitArg::Read(c.bytes()),
                        (None, PoolMemory::Device(_)) => {
                            JitArg::Write(device_memory.get_mut(k).and_then(Option::take).unwrap_or_default())
                        }
                        (None, _) => JitArg::Read(&[]),
                    }));
                code.run_in(args, ws.threads.as_ref(), &devices)?;
                if let Some((session, _)) = ws.vta.as_mut()
                    && let Some(e) = session.take_error()
                {
                    return Err(RuntimeError::Vta(e));
                }
            }
            Code::Aot(library) => {
                let parameters = exe
                    .memory
                    .iter()
                    .filter_map(|m| if let PoolMemory::Shared(c) = m { Some(c.bytes()) } else { None });
                library.run(
                    input_bytes(inputs, &mut ws.inputs, in_place),
                    output_bytes(outputs, &mut ws.outputs, in_place),
                    ws.pools.iter_mut().flatten().map(Block::bytes_mut),
                    parameters,
                    ws.threads.as_ref(),
                )?;
            }
        }
        for ((info, t), buf) in self.outputs.iter().zip(outputs.iter_mut()).zip(&ws.outputs) {
            if in_place && t.le_bytes_mut().is_some() {
                continue;
            }
            // Staged: into the tensor's own memory when it is standard-layout (guard pages),
            // else (another layout, bool) as a new tensor.
            if let Some(dst) = t.le_bytes_mut() {
                dst.copy_from_slice(buf.bytes());
            } else {
                *t = Tensor::from_le_bytes(&info.ty, buf.bytes()).map_err(|e| {
                    RuntimeError::Memory(crate::memory::AllocError {
                        what: format!("output '{}'", info.name),
                        bytes: buf.len(),
                        detail: Some(e),
                    })
                })?;
            }
        }
        Ok(())
    }
}

/// Whether `given` have the dtypes and shapes of `infos`, checked without allocating; the full
/// check (with its error messages) runs only when something is wrong.
fn signature_matches(given: &[Tensor], infos: &[TensorInfo]) -> bool {
    given.len() == infos.len()
        && given.iter().zip(infos).all(|(t, i)| t.dtype() == i.ty.dtype && t.shape() == i.ty.shape.as_slice())
}

/// Where generated code reads each input: the tensor's own memory when it can be read in
/// place, else its staging buffer, filled here.
fn input_bytes<'a>(inputs: &'a [Tensor], staging: &'a mut [Block], in_place: bool) -> impl Iterator<Item = &'a [u8]> {
    inputs.iter().zip(staging).map(move |(t, buf)| match t.le_bytes().filter(|_| in_place) {
        Some(bytes) => bytes,
        None => {
            t.write_le_bytes(buf.bytes_mut());
            let buf: &Block = buf;
            buf.bytes()
        }
    })
}

/// Where generated code writes each output: the tensor itself when it can be written in
/// place, else its staging buffer (copied out after the run).
fn output_bytes<'a>(
    outputs: &'a mut [Tensor],
    staging: &'a mut [Block],
    in_place: bool,
) -> impl Iterator<Item = &'a mut [u8]> {
    outputs.iter_mut().zip(staging).map(move |(t, buf)| match if in_place { t.le_bytes_mut() } else { None } {
        Some(bytes) => bytes,
        None => buf.bytes_mut(),
    })
}

/// Outputs given to [`CompiledModel::run_into`] checked against the model's: count, dtype
/// and shape.
fn check_outputs(infos: &[TensorInfo], outputs: &[Tensor]) -> Result<(), RuntimeError> {
    if outputs.len() != infos.len() {
        return Err(RuntimeError::OutputCount { expected: infos.len(), got: outputs.len() });
    }
    for (info, t) in infos.iter().zip(outputs) {
        if t.tensor_type() != info.ty {
            return Err(RuntimeError::OutputType {
                name: info.name.clone(),
                expected: info.ty.clone(),
                got: t.tensor_type(),
            });
        }
    }
    Ok(())
}
