//! The compile pipeline, defined once. Every entry point — [`Compiler`](crate::Compiler) for the
//! JIT and AOT engines, the CLI's `lower`, `plan` and `inspect`, the tests — runs a model
//! through these stages, so what `heron lower --stage S` prints is what the compiler compiles:
//!
//! 1. import (`Model::load`, before the pipeline)
//! 2. graph passes
//! 3. lowering to loop IR
//! 4. the target layer ([`Target`]: with VTA, its regions first (`heron_vta_compiler`), then
//!    the CPU: layouts chosen, loops scheduled, functions claimed)
//! 5. layouts applied
//! 6. flattening
//! 7. memory planning
//! 8. code generation (heron-jit or heron-aot, from the planned module)

use std::time::{Duration, Instant};

use heron_ir::loop_ir::Module;
use heron_ir::loop_ir::flatten::flatten;
use heron_ir::loop_ir::layout::apply_layout_transforms;
use heron_ir::loop_ir::target::Target;
use heron_ir::{Graph, Limits, passes};
use heron_jit::kernels::KernelConfig;
use heron_jit::target::CpuTarget;
use heron_planner::{Access, Budget, PlannedModule, PoolInfo, PoolKind};
use heron_vta::HwConfig;
use heron_vta_compiler::{Partition, VtaTarget};

use crate::model::{Model, RuntimeError};

/// The loop-IR stages, in pipeline order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Straight out of lowering: logical shapes, target-independent loop nests.
    Lowered,
    /// After the target layer: layout choices annotated, loops marked vectorized / unrolled,
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

/// Pipeline settings (the part of [`CompileOptions`](crate::CompileOptions) the stages read).
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// Limits on the scratch buffers lowering adds and on the total workspace.
    pub limits: Limits,
    /// Memory pools, most preferred first; empty means one unbounded workspace pool and one
    /// constant pool.
    pub pools: Vec<PoolInfo>,
    /// Planning algorithm (see `heron_planner::registry`).
    pub planner: heron_planner::AlgorithmKind,
    /// Planning work budget in work units (see `heron_planner::Budget`): plans, and so the
    /// compiled code, are the same on every run and machine.
    pub planner_work: u64,
    /// Also stop planning after this many milliseconds. Not reproducible: where the clock cuts
    /// the search depends on the machine's speed and load.
    pub planner_time_limit_ms: Option<u64>,
    /// Offload int8 regions to VTA with this hardware configuration (`None`: CPU only).
    pub vta: Option<HwConfig>,
    /// The CPU target calls precompiled kernels with this ISA and task count (`None`: generated
    /// code only). Default: this CPU's best ISA, one task per physical core, unless
    /// `HERON_KERNELS=off`.
    pub kernels: Option<KernelConfig>,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            limits: Limits::DEFAULT,
            pools: Vec::new(),
            planner: heron_planner::AlgorithmKind::Auto,
            planner_work: Budget::DEFAULT_WORK,
            planner_time_limit_ms: None,
            vta: None,
            kernels: KernelConfig::host(crate::compiler::physical_cores()),
        }
    }
}

/// The pools VTA regions use: activations they touch and their constants (weights, biases,
/// programs) live in memory both the CPU and the device reach, aligned to VTA's largest element.
/// This one holds the activations.
pub const VTA_WORKSPACE_POOL: &str = "vta_workspace";
/// The VTA regions' constants (see [`VTA_WORKSPACE_POOL`]).
pub const VTA_CONSTANT_POOL: &str = "vta_constants";

/// Whether `pool` is device memory (the executor allocates it through the VTA session).
pub fn is_device_pool(pool: &PoolInfo) -> bool {
    pool.targets.iter().any(|(t, _)| t == heron_vta_compiler::target::TARGET)
}

fn vta_pools(config: &HwConfig) -> [PoolInfo; 2] {
    use heron_vta::MemId;
    let largest = [MemId::Inp, MemId::Wgt, MemId::Acc, MemId::Out].iter().map(|&m| config.elem_bytes(m)).max();
    let alignment = (largest.unwrap_or(64) as u64).next_power_of_two().max(64);
    let vta = |name: &str, kind: PoolKind, access: Access| PoolInfo {
        name: name.into(),
        size_hint_bytes: None,
        alignment,
        kind,
        targets: vec![("cpu".into(), access), (heron_vta_compiler::target::TARGET.into(), access)],
    };
    [
        vta(VTA_WORKSPACE_POOL, PoolKind::Workspace, Access::ReadWrite),
        vta(VTA_CONSTANT_POOL, PoolKind::Constant, Access::ReadOnly),
    ]
}

/// Time spent in each stage of a compile, in the order the stages ran.
#[derive(Clone, Debug, Default)]
pub struct StageTimes(pub Vec<(&'static str, Duration)>);

impl StageTimes {
    /// Runs `f`, adding its time to the stage `name`.
    pub fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let result = f();
        self.add(name, start.elapsed());
        result
    }

    /// Adds `time` to the stage `name` (a new stage goes last).
    pub fn add(&mut self, name: &'static str, time: Duration) {
        tracing::info!(stage = name, ms = time.as_secs_f64() * 1e3, "compile stage");
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, t)) => *t += time,
            None => self.0.push((name, time)),
        }
    }

    /// The time of stage `name` (zero if it did not run).
    pub fn get(&self, name: &str) -> Duration {
        self.0.iter().find(|(n, _)| *n == name).map_or(Duration::ZERO, |&(_, t)| t)
    }

    /// The sum of every stage.
    pub fn sum(&self) -> Duration {
        self.0.iter().map(|&(_, t)| t).sum()
    }
}

/// A planned module and what planning took.
pub struct Planned {
    /// The module with every buffer at its pool offset, and the plan.
    pub planned: PlannedModule,
    /// How long planning took.
    pub planning: Duration,
}

/// The stages, with the targets they run for.
pub struct Pipeline {
    options: PipelineOptions,
    /// Applied in order; each claims the functions it runs (the CPU last, taking the rest).
    targets: Vec<Box<dyn Target>>,
}

impl Pipeline {
    /// The pipeline for the host CPU.
    pub fn new(options: PipelineOptions) -> Pipeline {
        let cpu = CpuTarget { kernels: options.kernels };
        Pipeline { options, targets: vec![Box::new(cpu)] }
    }

    /// What its stages read.
    pub fn options(&self) -> &PipelineOptions {
        &self.options
    }

    /// The pools planning places buffers in (with VTA, its two pools after the CPU's).
    pub fn pools(&self) -> Vec<PoolInfo> {
        let mut pools = if self.options.pools.is_empty() {
            vec![PoolInfo::workspace("workspace", None), PoolInfo::constant("constants", None)]
        } else {
            self.options.pools.clone()
        };
        if let Some(config) = &self.options.vta {
            pools.extend(vta_pools(config));
        }
        pools
    }

    /// The VTA partition of the model's optimised graph (`None` without VTA).
    /// Float operators whose QDQ pattern did not reach the integer form say why.
    pub fn partition(&self, model: &Model) -> Option<(Graph, Partition)> {
        let config = self.options.vta.as_ref()?;
        let (graph, stats) = self.optimized_graph_with_stats(model);
        let mut partition = heron_vta_compiler::partition(&graph, config);
        for op in partition.cpu.iter_mut() {
            let name = &graph.nodes[op.node].name;
            if let Some((_, why)) = stats.integer_form.left.iter().find(|(n, _)| n == name) {
                op.reason = format!("its QDQ pattern stays in float (VTA cannot run it exactly): {why}");
            }
        }
        Some((graph, partition))
    }

    /// Stage 2: the model's graph after the graph passes, under the pipeline's limits.
    pub fn optimized_graph(&self, model: &Model) -> Graph {
        self.optimized_graph_with_stats(model).0
    }

    /// [`Pipeline::optimized_graph`] and what the passes did.
    pub fn optimized_graph_with_stats(&self, model: &Model) -> (Graph, passes::PassStats) {
        let mut graph = model.graph().clone();
        graph.limits = self.options.limits;
        let stats = passes::optimize(&mut graph);
        (graph, stats)
    }

    /// The loop-IR module after `stage` (up to [`Stage::Flat`]; [`Stage::Planned`] is
    /// [`Pipeline::plan`] of the flat module).
    pub fn module(&self, model: &Model, stage: Stage) -> Result<Module, RuntimeError> {
        self.module_timed(model, stage, &mut StageTimes::default())
    }

    /// [`Pipeline::module`], adding each stage's time to `times`.
    pub fn module_timed(&self, model: &Model, stage: Stage, times: &mut StageTimes) -> Result<Module, RuntimeError> {
        let compile = |e: &dyn std::fmt::Display| RuntimeError::Compile(e.to_string());
        let graph = times.time("graph passes", || self.optimized_graph(model));
        let mut module = times.time("lowering", || heron_ir::lower::lower(&graph))?;
        if stage >= Stage::Target {
            times.time("target", || -> Result<(), RuntimeError> {
                if let Some(config) = &self.options.vta {
                    let partition = heron_vta_compiler::partition(&graph, config);
                    let vta = VtaTarget::new(&graph, &partition, config).map_err(|e| compile(&e))?;
                    vta.apply(&mut module).map_err(|e| compile(&e))?;
                }
                for target in &self.targets {
                    target.apply(&mut module).map_err(|e| compile(&e))?;
                }
                Ok(())
            })?;
        }
        if stage >= Stage::Layout {
            times.time("layouts", || apply_layout_transforms(&mut module)).map_err(|e| compile(&e))?;
        }
        if stage >= Stage::Flat {
            times.time("flattening", || flatten(&mut module));
        }
        Ok(module)
    }

    /// Stage 7: plans a module from [`Stage::Flat`] into the pools and checks the workspace
    /// limit.
    pub fn plan(&self, flat: &Module) -> Result<Planned, RuntimeError> {
        let start = Instant::now();
        let budget = Budget::new(self.options.planner_work, self.options.planner_time_limit_ms);
        let planned = heron_planner::plan_module(flat, &self.pools(), self.options.planner, &budget)?;
        let planning = start.elapsed();
        let rewritten = &planned.rewritten;
        let workspace_bytes = rewritten
            .pools
            .iter()
            .zip(&rewritten.pool_sizes)
            .filter(|(p, _)| p.kind == PoolKind::Workspace)
            .try_fold(0u64, |acc, (_, &size)| acc.checked_add(size))
            .unwrap_or(u64::MAX);
        self.options.limits.check_workspace(workspace_bytes).map_err(|e| RuntimeError::Compile(e.to_string()))?;
        Ok(Planned { planned, planning })
    }
}
