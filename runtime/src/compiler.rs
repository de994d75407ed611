//! Compiling a [`Model`] and running it: [`Compiler`] takes a model through graph passes,
//! lowering, layouts, flattening, memory planning and Cranelift code generation into a
//! [`CompiledModel`]; a [`Workspace`] holds one caller's pools and staging buffers, allocated
//! once and reused, so a run allocates nothing but its outputs.

use std::time::{Duration, Instant};

use heron_ir::loop_ir::flatten::flatten;
use heron_ir::loop_ir::layout::apply_layout_transforms;
use heron_ir::{Tensor, passes};
use heron_jit::isa::OptLevel;
use heron_jit::{CodegenOptions, JitArg, JitModule, JitOptions};
use heron_planner::{Budget, PoolInfo, PoolKind};

use crate::model::{Model, RuntimeError, TensorInfo};

/// How a compiled model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Engine {
    /// Cranelift machine code with statically planned pools.
    #[default]
    Jit,
    /// The reference interpreter (the oracle; no code generation).
    Interpreter,
}

/// Compiler settings.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    pub engine: Engine,
    pub opt_level: OptLevel,
    /// Emit loops marked vectorized with SIMD.
    pub vectorize: bool,
    /// Planning algorithm (see `heron_planner::registry`).
    pub planner: String,
    pub planner_time_limit_ms: u64,
    /// Memory pools, most preferred first; empty means one unbounded workspace pool and one
    /// constant pool.
    pub pools: Vec<PoolInfo>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            engine: Engine::Jit,
            opt_level: OptLevel::default(),
            vectorize: true,
            planner: "auto".into(),
            planner_time_limit_ms: Budget::DEFAULT_MILLIS,
            pools: Vec::new(),
        }
    }
}

/// Compiles models.
#[derive(Clone, Debug, Default)]
pub struct Compiler {
    options: CompileOptions,
}

/// Bytes aligned to 64, carved from a slightly larger vector (no unsafe needed).
#[derive(Clone, Debug)]
struct AlignedBytes {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBytes {
    const ALIGN: usize = 64;

    fn zeroed(len: usize) -> AlignedBytes {
        let storage = vec![0u8; len + Self::ALIGN];
        let start = storage.as_ptr().align_offset(Self::ALIGN);
        AlignedBytes { storage, start, len }
    }

    fn from_bytes(bytes: &[u8]) -> AlignedBytes {
        let mut a = AlignedBytes::zeroed(bytes.len());
        a.as_mut().copy_from_slice(bytes);
        a
    }

    fn as_ref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// A memory pool as the compiled code sees it.
#[derive(Clone, Debug)]
pub struct PoolLayout {
    pub name: String,
    pub kind: PoolKind,
    pub size_bytes: u64,
}

/// What compiling took.
#[derive(Clone, Debug)]
pub struct CompileStats {
    pub total: Duration,
    pub planning: Duration,
    pub codegen: Duration,
}

struct JitParts {
    code: JitModule,
    pools: Vec<PoolLayout>,
    /// Contents of each constant pool (`None` for workspace pools), shared by all workspaces.
    constants: Vec<Option<AlignedBytes>>,
}

/// A model ready to run; `Send + Sync`, so threads can share it, each with its own
/// [`Workspace`].
pub struct CompiledModel {
    model: Model,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    jit: Option<JitParts>,
    stats: CompileStats,
}

/// One caller's memory for running a [`CompiledModel`]: workspace pools and input/output
/// staging, allocated once, 64-byte aligned.
pub struct Workspace {
    inputs: Vec<AlignedBytes>,
    outputs: Vec<AlignedBytes>,
    /// Workspace pools, in pool order (`None` where the pool is a constant pool).
    pools: Vec<Option<AlignedBytes>>,
}

impl Workspace {
    /// Bytes held by the workspace pools.
    pub fn pool_bytes(&self) -> usize {
        self.pools.iter().flatten().map(|p| p.len).sum()
    }
}

impl Compiler {
    pub fn new(options: CompileOptions) -> Compiler {
        Compiler { options }
    }

    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    pub fn compile(&self, model: &Model) -> Result<CompiledModel, RuntimeError> {
        let start = Instant::now();
        let (inputs, outputs) = (model.inputs(), model.outputs());
        if self.options.engine == Engine::Interpreter {
            let stats = CompileStats { total: start.elapsed(), planning: Duration::ZERO, codegen: Duration::ZERO };
            return Ok(CompiledModel { model: model.clone(), inputs, outputs, jit: None, stats });
        }
        let mut graph = model.graph().clone();
        passes::optimize(&mut graph);
        let mut module = heron_ir::lower::lower(&graph)?;
        heron_jit::schedule::choose_layouts(&mut module);
        apply_layout_transforms(&mut module).map_err(|e| RuntimeError::Compile(e.to_string()))?;
        flatten(&mut module);
        heron_jit::schedule::schedule(&mut module);
        let pools = if self.options.pools.is_empty() {
            vec![PoolInfo::workspace("workspace", None), PoolInfo::constant("constants", None)]
        } else {
            self.options.pools.clone()
        };
        let plan_start = Instant::now();
        let budget = Budget::millis(self.options.planner_time_limit_ms);
        let planned = heron_planner::plan_module(&module, &pools, &self.options.planner, &budget)?;
        let planning = plan_start.elapsed();
        let rewritten = planned.rewritten;
        let main = rewritten.module.main().ok_or_else(|| RuntimeError::Compile("lowering produced no main".into()))?;
        let expected = inputs.len() + outputs.len() + rewritten.pools.len();
        if main.params.len() != expected {
            return Err(RuntimeError::Compile(format!(
                "main takes {} buffers, expected {expected} (inputs, outputs, pools)",
                main.params.len()
            )));
        }
        let read_only: Vec<bool> = (0..inputs.len())
            .map(|_| true)
            .chain((0..outputs.len()).map(|_| false))
            .chain(rewritten.pools.iter().map(|p| p.kind == PoolKind::Constant))
            .collect();
        let codegen_start = Instant::now();
        let options = JitOptions {
            opt_level: self.options.opt_level,
            codegen: CodegenOptions { vectorize: self.options.vectorize, fma: true },
            routines: Vec::new(),
        };
        let code = JitModule::compile(&rewritten.module, &read_only, options)?;
        let codegen = codegen_start.elapsed();
        let pool_layouts = rewritten
            .pools
            .iter()
            .zip(&rewritten.pool_sizes)
            .map(|(p, &size)| PoolLayout { name: p.name.clone(), kind: p.kind, size_bytes: size })
            .collect();
        let constants = rewritten.images.iter().map(|img| img.as_deref().map(AlignedBytes::from_bytes)).collect();
        let stats = CompileStats { total: start.elapsed(), planning, codegen };
        Ok(CompiledModel {
            model: model.clone(),
            inputs,
            outputs,
            jit: Some(JitParts { code, pools: pool_layouts, constants }),
            stats,
        })
    }
}

impl CompiledModel {
    pub fn name(&self) -> &str {
        self.model.name()
    }

    pub fn inputs(&self) -> &[TensorInfo] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    pub fn engine(&self) -> Engine {
        if self.jit.is_some() { Engine::Jit } else { Engine::Interpreter }
    }

    pub fn stats(&self) -> &CompileStats {
        &self.stats
    }

    /// The planned pools (empty for the interpreter).
    pub fn pools(&self) -> &[PoolLayout] {
        self.jit.as_ref().map_or(&[], |j| &j.pools)
    }

    /// Fresh memory for runs of this model.
    pub fn workspace(&self) -> Workspace {
        let staging = |infos: &[TensorInfo]| infos.iter().map(|i| AlignedBytes::zeroed(i.ty.size_bytes())).collect();
        let pools = self
            .pools()
            .iter()
            .map(|p| (p.kind == PoolKind::Workspace).then(|| AlignedBytes::zeroed(p.size_bytes as usize)))
            .collect();
        Workspace { inputs: staging(&self.inputs), outputs: staging(&self.outputs), pools }
    }

    /// Runs the model on `inputs` (in model order) with a fresh workspace.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_with(&mut self.workspace(), inputs)
    }

    /// Runs the model in `ws`, which must come from [`CompiledModel::workspace`] of this model.
    /// Inputs are checked (count, dtype, shape) before any generated code runs.
    pub fn run_with(&self, ws: &mut Workspace, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        // Checked against the cached signature without allocating; the model's own check (with
        // its error messages) runs only when something is wrong.
        let matches = inputs.len() == self.inputs.len()
            && inputs
                .iter()
                .zip(&self.inputs)
                .all(|(t, i)| t.dtype() == i.ty.dtype && t.shape() == i.ty.shape.as_slice());
        if !matches {
            self.model.check_inputs(inputs)?;
        }
        let Some(jit) = &self.jit else { return self.model.run_interpreter(inputs) };
        let fits = ws.inputs.len() == self.inputs.len()
            && ws.outputs.len() == self.outputs.len()
            && ws.pools.len() == jit.pools.len()
            && ws.pools.iter().zip(&jit.pools).all(|(b, p)| {
                b.as_ref().map_or(0, |b| b.len as u64) == if p.kind == PoolKind::Workspace { p.size_bytes } else { 0 }
            });
        if !fits {
            return Err(RuntimeError::ForeignWorkspace);
        }
        for (t, buf) in inputs.iter().zip(ws.inputs.iter_mut()) {
            t.write_le_bytes(buf.as_mut());
        }
        let args = ws
            .inputs
            .iter()
            .map(|b| JitArg::Read(b.as_ref()))
            .chain(ws.outputs.iter_mut().map(|b| JitArg::Write(b.as_mut())))
            .chain(ws.pools.iter_mut().zip(&jit.constants).map(|(w, c)| match (w, c) {
                (Some(w), _) => JitArg::Write(w.as_mut()),
                (None, Some(c)) => JitArg::Read(c.as_ref()),
                (None, None) => JitArg::Read(&[]),
            }));
        jit.code.run(args)?;
        self.outputs
            .iter()
            .zip(&ws.outputs)
            .map(|(info, b)| Tensor::from_le_bytes(&info.ty, b.as_ref()).map_err(RuntimeError::Compile))
            .collect()
    }
}
