//! heron-aot: ahead-of-time compilation of planned models into ELF objects a C program links
//! with no runtime allocator (the seed's use cases U1-U3).
//!
//! [`compile`] turns a planned module into [`Artifacts`]: the object ([`emit`], the code
//! generator shared with the JIT through cranelift-object), the C header ([`header`], names by
//! [`names`]), the metadata ([`metadata`]) and one `.params` blob per user-provided parameter
//! pool. [`link`] builds shared libraries and C programs with the system compiler; [`loader`]
//! loads a shared library with libloading and calls it.
//!
//! The object's undefined symbols are a subset of [`ALLOWED_IMPORTS`] — libc's `memcpy` /
//! `memset` and libm: it links with `cc main.c NAME.o -lm`.

pub mod emit;
pub mod header;
pub mod link;
pub mod loader;
pub mod metadata;
pub mod names;

use std::path::Path;

use heron_ir::TensorType;
use heron_ir::loop_ir::workspace::WorkspaceSize;
use heron_jit::isa::{OptLevel, TargetCpu};
use heron_planner::rewrite::PoolImage;
use heron_planner::{Access, PlannedModule, PoolKind};

use crate::metadata::{
    BufferMeta, FunctionMeta, Identifiers, Metadata, PoolMeta, PoolRole, PoolSource, TargetAccess, TensorMeta,
};

/// Every symbol an object may import: libc memory routines (Cranelift libcalls) and libm.
pub const ALLOWED_IMPORTS: [&str; 28] = [
    "memcpy",
    "memset",
    "exp",
    "tanh",
    "erf",
    "log",
    "pow",
    "fmod",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "fma",
    "fmaf",
    "nearbyint",
    "nearbyintf",
    "floor",
    "floorf",
    "ceil",
    "ceilf",
    "truncf",
];

#[derive(Debug, thiserror::Error)]
pub enum AotError {
    #[error(transparent)]
    Codegen(#[from] heron_jit::CodegenError),
    #[error("object file: {0}")]
    Object(String),
    #[error("'{name}' is not a valid model name: {reason}")]
    BadName { name: String, reason: String },
    #[error("the model calls precompiled routine '{0}', which an object cannot link yet")]
    Routine(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Metadata(String),
    #[error("{command} failed: {output}")]
    Tool { command: String, output: String },
    #[error("loading '{path}': {reason}")]
    Load { path: String, reason: String },
    #[error("{0}")]
    Run(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<cranelift_module::ModuleError> for AotError {
    fn from(e: cranelift_module::ModuleError) -> Self {
        AotError::Object(e.to_string())
    }
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> AotError + '_ {
    move |source| AotError::Io { path: path.display().to_string(), source }
}

/// AOT choices.
#[derive(Clone, Debug)]
pub struct AotOptions {
    /// Model name; its C identifier names the entry, the structs and the macros.
    pub name: String,
    pub target_cpu: TargetCpu,
    pub opt_level: OptLevel,
    /// Workspace pools become zero-initialised static buffers inside the object (U1).
    pub embed_workspace: bool,
    /// Constant pools go to `.rodata` (no user-provided parameter pool).
    pub embed_parameters: bool,
    /// Precompiled routines the module may call, in the order of the routine table the run
    /// context must provide (`heron_<name>_run_ctx`); e.g. VTA's `heron_vta_region`, whose
    /// context `heron_vta_context` makes. Without routines the object needs libc and libm only.
    pub routines: Vec<heron_jit::routines::RoutineSignature>,
    /// Convolutions, GEMMs and max pools call the precompiled kernels (`heron compile
    /// --kernels`), with weights packed at compile time for this machine's best ISA (a CPU
    /// without it runs the kernels' scalar path, with the same results). Such an object runs
    /// through `heron_<name>_run_ctx` with a context from `heron_threads_context` (or
    /// `heron_vta_context`) and links `libheron_threads.a` (or `libheron_vta.a`), which carry
    /// the kernels. Off: generated code only.
    pub kernels: bool,
}

impl AotOptions {
    pub fn new(name: impl Into<String>) -> AotOptions {
        AotOptions {
            name: name.into(),
            target_cpu: TargetCpu::X86_64Baseline,
            opt_level: OptLevel::default(),
            embed_workspace: false,
            embed_parameters: true,
            routines: Vec::new(),
            kernels: false,
        }
    }
}

/// Everything `heron compile` writes.
#[derive(Clone, Debug)]
pub struct Artifacts {
    pub object: Vec<u8>,
    pub header: String,
    pub metadata: Metadata,
    /// (pool name, contents) of every user-provided parameter pool.
    pub params: Vec<(String, Vec<u8>)>,
}

impl Artifacts {
    /// The command that links a C program `prog.c` with the object written into `dir`: libm
    /// alone for generated code; with routines (kernels, VTA), the static library whose run
    /// context provides them.
    pub fn link_line(&self, dir: &Path) -> String {
        let object = dir.join(format!("{}.o", self.metadata.name));
        match self.context_library() {
            None => format!("cc prog.c {} -lm", object.display()),
            Some((_, library)) => format!("cc prog.c {} {library} -lpthread -ldl -lm", object.display()),
        }
    }

    /// The function that makes the run context and the static library that carries it, when the
    /// object calls routines through one.
    pub fn context_library(&self) -> Option<(&'static str, &'static str)> {
        match (self.metadata.routines.is_empty(), self.metadata.device_slots > 0) {
            (true, _) => None,
            (false, true) => Some(("heron_vta_context", "libheron_vta.a")),
            (false, false) => Some(("heron_threads_context", "libheron_threads.a")),
        }
    }

    /// Writes `NAME.o`, `NAME.h`, `NAME.json` and `NAME.<pool>.params` into `dir` (created if
    /// missing).
    pub fn write(&self, dir: &Path) -> Result<(), AotError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let base = &self.metadata.name;
        let write = |file: String, bytes: &[u8]| {
            let path = dir.join(file);
            std::fs::write(&path, bytes).map_err(io_error(&path))
        };
        write(format!("{base}.o"), &self.object)?;
        write(format!("{base}.h"), self.header.as_bytes())?;
        let json = serde_json::to_string_pretty(&self.metadata).map_err(|e| AotError::Metadata(e.to_string()))?;
        write(format!("{base}.json"), json.as_bytes())?;
        for (pool, bytes) in &self.params {
            let file = self
                .metadata
                .pools
                .iter()
                .find(|p| &p.name == pool)
                .and_then(|p| p.params_file.clone())
                .ok_or_else(|| AotError::Internal(format!("no params file for pool '{pool}'")))?;
            write(file, bytes)?;
        }
        Ok(())
    }
}

/// A model input or output as the object sees it.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub ty: TensorType,
}

/// Compiles a planned module (`planned.rewritten.module` takes inputs, outputs, then pools, in
/// that order) into an object, header, metadata and parameter blobs.
pub fn compile(
    planned: &PlannedModule,
    workspace: &[WorkspaceSize],
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
    options: &AotOptions,
) -> Result<Artifacts, AotError> {
    if options.name.is_empty() || options.name.contains(['/', '\\', '\0']) || options.name.starts_with('.') {
        return Err(AotError::BadName {
            name: options.name.clone(),
            reason: "it names the output files: non-empty, no path separators, not starting with '.'".into(),
        });
    }
    let c_name = names::c_identifier(&options.name);
    let mut routine = None;
    for f in &planned.rewritten.module.funcs {
        f.body.walk(&mut |s| {
            if let heron_ir::loop_ir::Stmt::Evaluate(call) = s
                && let heron_ir::loop_ir::Callee::Extern(name) = &call.callee
                && !options.routines.iter().any(|r| &r.name == name)
            {
                routine.get_or_insert(name.clone());
            }
        });
    }
    if let Some(name) = routine {
        return Err(AotError::Routine(name));
    }
    let metadata = metadata_of(planned, workspace, inputs, outputs, options, &c_name);
    let object = emit::emit_object(&planned.rewritten, &metadata, options)?;
    let params = planned
        .rewritten
        .pools
        .iter()
        .zip(&planned.rewritten.images)
        .zip(&metadata.pools)
        .filter(|(_, m)| m.kind == PoolRole::Parameter && m.source == PoolSource::User)
        .map(|((p, image), _)| {
            Ok((p.name.clone(), image.as_ref().map(PoolImage::to_bytes).transpose()?.unwrap_or_default()))
        })
        .collect::<Result<_, heron_planner::types::PlanError>>()
        .map_err(|e| AotError::Internal(e.to_string()))?;
    let header = header::header(&metadata);
    let mut metadata = metadata;
    metadata.undefined_symbols = link::undefined_symbols(&object)?;
    Ok(Artifacts { object, header, metadata, params })
}

fn metadata_of(
    planned: &PlannedModule,
    workspace: &[WorkspaceSize],
    inputs: &[TensorSpec],
    outputs: &[TensorSpec],
    options: &AotOptions,
    c_name: &str,
) -> Metadata {
    let rewritten = &planned.rewritten;
    let tensor_ids = names::c_identifiers(inputs.iter().chain(outputs).map(|t| t.name.as_str()));
    let pool_ids = names::c_identifiers(rewritten.pools.iter().map(|p| p.name.as_str()));
    let tensor = |(t, c_name): (&TensorSpec, &String)| TensorMeta {
        name: t.name.clone(),
        c_name: c_name.clone(),
        dtype: t.ty.dtype.name().to_string(),
        shape: t.ty.shape.clone(),
        size_elements: t.ty.shape.iter().product(),
        size_bytes: t.ty.size_bytes(),
        c_type: header::c_type(t.ty.dtype).to_string(),
    };
    let pools: Vec<PoolMeta> = rewritten
        .pools
        .iter()
        .zip(&rewritten.pool_sizes)
        .zip(&pool_ids)
        .map(|((p, &size), c)| {
            let parameters = p.kind == PoolKind::Constant;
            // An accelerator's pool is the caller's device memory, never a static of the object.
            let device = p.targets.iter().any(|(t, _)| t != heron_planner::types::DEFAULT_TARGET);
            let embedded = !device && if parameters { options.embed_parameters } else { options.embed_workspace };
            PoolMeta {
                name: p.name.clone(),
                c_name: c.clone(),
                kind: if parameters { PoolRole::Parameter } else { PoolRole::Workspace },
                source: if embedded { PoolSource::Embedded } else { PoolSource::User },
                size_bytes: size,
                size_hint_bytes: p.size_hint_bytes,
                alignment: p.alignment,
                targets: p
                    .targets
                    .iter()
                    .map(|(t, a)| TargetAccess {
                        target: t.clone(),
                        access: if *a == Access::ReadOnly { "ro" } else { "rw" }.into(),
                    })
                    .collect(),
                params_file: (parameters && !embedded).then(|| format!("{}.{}.params", options.name, p.name)),
            }
        })
        .collect();
    let problem = &planned.problem;
    let buffers = problem
        .buffers
        .iter()
        .zip(&planned.plan.allocations)
        .zip(&problem.ranges)
        .map(|((b, a), ranges)| BufferMeta {
            name: b.name.clone(),
            pool: rewritten.pools[a.pool].name.clone(),
            offset: a.offset,
            size_bytes: b.size_bytes,
            live_ranges: ranges.clone(),
        })
        .collect();
    let functions = workspace
        .iter()
        .map(|w| FunctionMeta {
            name: w.func.clone(),
            workspace_bytes: w.shared_bytes as u64,
            workspace_bytes_unshared: w.unshared_bytes as u64,
        })
        .collect();
    let identifiers = Identifiers {
        model: [(options.name.clone(), c_name.to_string())].into(),
        tensors: inputs.iter().chain(outputs).map(|t| t.name.clone()).zip(tensor_ids.iter().cloned()).collect(),
        pools: rewritten.pools.iter().map(|p| p.name.clone()).zip(pool_ids.iter().cloned()).collect(),
    };
    let (in_ids, out_ids) = tensor_ids.split_at(inputs.len());
    Metadata {
        name: options.name.clone(),
        c_name: c_name.to_string(),
        entry: format!("heron_{c_name}_run"),
        entry_checked: format!("heron_{c_name}_run_checked"),
        entry_ctx: format!("heron_{c_name}_run_ctx"),
        entry_checked_ctx: format!("heron_{c_name}_run_checked_ctx"),
        routines: options.routines.iter().map(|r| r.name.clone()).collect(),
        device_slots: heron_jit::routines::device_slots(&options.routines),
        target_cpu: format!("{:?}", options.target_cpu),
        inputs: inputs.iter().zip(in_ids).map(tensor).collect(),
        outputs: outputs.iter().zip(out_ids).map(tensor).collect(),
        pools,
        buffers,
        functions,
        undefined_symbols: Vec::new(),
        identifiers,
    }
}
