//! `Model`: a verified graph plus its name, loaded from ONNX or built in code, with input
//! binding and checking shared by every engine.

use std::path::Path;

use heron_ir::interp::{self, InterpError};
use heron_ir::onnx::{ImportError, ImportOptions, load_model};
use heron_ir::{Graph, Limits, Tensor, TensorType, VerifyErrors, verify};

use crate::builtin::{BUILTIN_NAME, builtin_model};

/// Everything that can go wrong loading, compiling or running a model; each prints as a
/// sentence that says what and where.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The ONNX file could not be read or imported.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The graph failed verification.
    #[error(transparent)]
    Invalid(#[from] VerifyErrors),
    /// The reference interpreter failed.
    #[error(transparent)]
    Run(#[from] InterpError),
    /// The wrong number of inputs was given.
    #[error("the model takes {expected} {}, got {got} ({names})", plural(*expected, "input"))]
    InputCount {
        /// Inputs the model takes.
        expected: usize,
        /// Inputs given.
        got: usize,
        /// The model's inputs, `name: type`.
        names: String,
    },
    /// An input was given by a name the model does not have.
    #[error("the model has no input named '{name}' (inputs: {names})")]
    UnknownInput {
        /// The name given.
        name: String,
        /// The model's inputs, `name: type`.
        names: String,
    },
    /// An input was given twice by name.
    #[error("input '{0}' is given twice")]
    DuplicateInput(String),
    /// An input has the wrong dtype or shape.
    #[error("input '{name}' must be {expected}, got {got}")]
    InputType {
        /// The input's name.
        name: String,
        /// What the model takes.
        expected: TensorType,
        /// What was given.
        got: TensorType,
    },
    /// [`crate::CompiledModel::run_into`] was given the wrong number of output tensors.
    #[error("the model has {expected} {}, got {got} tensors to write them into", plural(*expected, "output"))]
    OutputCount {
        /// Outputs the model has.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// A tensor given to [`crate::CompiledModel::run_into`] has the wrong dtype or shape.
    #[error("output '{name}' is {expected}, but the tensor given for it is {got}")]
    OutputType {
        /// The output's name.
        name: String,
        /// What the model writes.
        expected: TensorType,
        /// What was given.
        got: TensorType,
    },
    /// Lowering the graph to loop IR failed.
    #[error(transparent)]
    Lower(#[from] heron_ir::lower::LowerError),
    /// Memory planning failed.
    #[error(transparent)]
    Plan(#[from] heron_planner::PlanError),
    /// Code generation failed.
    #[error(transparent)]
    Codegen(#[from] heron_jit::CodegenError),
    /// Generated code reported an error while running.
    #[error(transparent)]
    Execute(#[from] heron_jit::JitRunError),
    /// Compiling failed for another reason (the message says which).
    #[error("compile: {0}")]
    Compile(String),
    /// An `.npy` file could not be read or written.
    #[error(transparent)]
    Npy(#[from] heron_ir::npy::NpyError),
    /// A [`crate::Workspace`] was used with a model it was not made for.
    #[error("the workspace was made for another model")]
    ForeignWorkspace,
    /// Ahead-of-time compilation, linking or loading failed.
    #[error(transparent)]
    Aot(#[from] heron_aot::AotError),
    /// Memory for pools or staging could not be had.
    #[error(transparent)]
    Memory(#[from] crate::memory::AllocError),
    /// The VTA device or its compiler failed. (Not a `source`: the message holds the VTA
    /// error already.)
    #[error("VTA: {0}")]
    Vta(heron_vta::VtaError),
}

/// `n thing` or `n things`.
fn plural(n: usize, thing: &str) -> String {
    if n == 1 { thing.to_string() } else { format!("{thing}s") }
}

impl From<heron_vta::VtaError> for RuntimeError {
    fn from(e: heron_vta::VtaError) -> Self {
        RuntimeError::Vta(e)
    }
}

/// A named tensor slot of a model: an input or an output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The graph's name for it.
    pub name: String,
    /// Its dtype and shape.
    pub ty: TensorType,
}

/// A model ready to compile or interpret: its graph has passed the verifier.
#[derive(Clone, Debug)]
pub struct Model {
    name: String,
    graph: Graph,
}

impl Model {
    /// Imports an ONNX file.
    pub fn load(path: impl AsRef<Path>) -> Result<Model, RuntimeError> {
        Model::load_with(path, &ImportOptions::default())
    }

    /// Imports an ONNX file with import options: shapes for inputs with symbolic dimensions,
    /// values for shape-deciding inputs, size limits.
    pub fn load_with(path: impl AsRef<Path>, options: &ImportOptions) -> Result<Model, RuntimeError> {
        let path = path.as_ref();
        let graph = load_model(path, options)?;
        let name = path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
        Model::from_graph(name, graph)
    }

    /// Wraps a graph built in code, after verifying it.
    pub fn from_graph(name: impl Into<String>, graph: Graph) -> Result<Model, RuntimeError> {
        verify(&graph)?;
        Ok(Model { name: name.into(), graph })
    }

    /// The built-in default model (see [`crate::builtin`]).
    pub fn builtin() -> Model {
        let graph = builtin_model().expect("the built-in model is well formed");
        Model::from_graph(BUILTIN_NAME, graph).expect("the built-in model verifies")
    }

    /// The model's name (an ONNX file's stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The verified graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The inputs, in order.
    pub fn inputs(&self) -> Vec<TensorInfo> {
        self.infos(&self.graph.inputs)
    }

    /// The outputs, in order.
    pub fn outputs(&self) -> Vec<TensorInfo> {
        self.infos(&self.graph.outputs)
    }

    fn infos(&self, ids: &[heron_ir::ValueId]) -> Vec<TensorInfo> {
        ids.iter()
            .map(|&id| TensorInfo { name: self.graph.value(id).name.clone(), ty: self.graph.ty(id).clone() })
            .collect()
    }

    /// Orders inputs given by name (or by position when the name is `None`) to match the
    /// model's input list, checking count, names, dtypes and shapes.
    pub fn bind_inputs(&self, given: Vec<(Option<String>, Tensor)>) -> Result<Vec<Tensor>, RuntimeError> {
        bind_inputs(&self.inputs(), given)
    }

    /// Checks that `inputs` match the model's inputs in count, dtype and shape.
    pub fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), RuntimeError> {
        check_inputs(&self.inputs(), inputs)
    }

    /// Inputs of the model's types made up for a run without data (`heron run MODEL` with no
    /// `--input`, benchmarks): checked against the model's size limits and allocated fallibly,
    /// as any tensor, so a hostile model's declared input shape is an error, not an abort.
    pub fn generated_inputs(&self, fill: InputFill) -> Result<Vec<Tensor>, RuntimeError> {
        generate_inputs(&self.inputs(), &self.graph.limits, fill)
    }

    /// Runs the model on the reference interpreter (inputs in model order).
    pub fn run_interpreter(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.check_inputs(inputs)?;
        Ok(interp::run(&self.graph, inputs)?)
    }
}

/// Orders inputs given by name (or by position when the name is `None`) to match `infos`,
/// checking count, names, dtypes and shapes.
pub(crate) fn bind_inputs(
    infos: &[TensorInfo],
    given: Vec<(Option<String>, Tensor)>,
) -> Result<Vec<Tensor>, RuntimeError> {
    if given.len() != infos.len() {
        return Err(RuntimeError::InputCount { expected: infos.len(), got: given.len(), names: input_names(infos) });
    }
    let mut slots: Vec<Option<Tensor>> = vec![None; infos.len()];
    let mut positional = Vec::new();
    for (name, t) in given {
        match name {
            None => positional.push(t),
            Some(n) => {
                let i = infos
                    .iter()
                    .position(|info| info.name == n)
                    .ok_or_else(|| RuntimeError::UnknownInput { name: n.clone(), names: input_names(infos) })?;
                if slots[i].replace(t).is_some() {
                    return Err(RuntimeError::DuplicateInput(n));
                }
            }
        }
    }
    let mut positional = positional.into_iter();
    for slot in slots.iter_mut().filter(|s| s.is_none()) {
        *slot = positional.next();
    }
    let bound: Vec<Tensor> = slots.into_iter().map(|s| s.expect("counts checked")).collect();
    check_inputs(infos, &bound)?;
    Ok(bound)
}

/// Tensors of the types `infos` give, made up for a run without data: each checked against
/// `limits` and allocated fallibly (see [`Model::generated_inputs`]).
pub fn generate_inputs(infos: &[TensorInfo], limits: &Limits, fill: InputFill) -> Result<Vec<Tensor>, RuntimeError> {
    let mut rng = fill.seed().map(SplitMix::new);
    infos
        .iter()
        .map(|info| {
            let why =
                |e: String| RuntimeError::Compile(format!("cannot make input '{}' ({}): {e}", info.name, info.ty));
            limits.check(&info.ty).map_err(|e| why(e.to_string()))?;
            let mut t = Tensor::try_zeros(&info.ty).map_err(why)?;
            if let Some(rng) = rng.as_mut() {
                rng.fill_uniform(&mut t);
            }
            Ok(t)
        })
        .collect()
}

/// How [`Model::generated_inputs`] fills its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputFill {
    /// Floats uniform in `[-1, 1)` from this seed (the same values on every run and machine);
    /// integers and booleans zero (valid as indices and masks).
    Random {
        /// The generator's seed.
        seed: u64,
    },
    /// Every element zero.
    Zeros,
}

impl InputFill {
    /// The random fill with the seed `heron run` and the benchmarks use.
    pub const DEFAULT_RANDOM: InputFill = InputFill::Random { seed: 0x5eed };

    fn seed(self) -> Option<u64> {
        match self {
            InputFill::Random { seed } => Some(seed),
            InputFill::Zeros => None,
        }
    }
}

/// SplitMix64: a small, well-mixed generator for reproducible made-up inputs.
struct SplitMix(u64);

impl SplitMix {
    fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`, 24 bits of it.
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 23) as f32 - 1.0
    }

    /// Fills a float tensor in place (other dtypes stay zero).
    fn fill_uniform(&mut self, t: &mut Tensor) {
        match t {
            Tensor::F16(a) => a.mapv_inplace(|_| half::f16::from_f32(self.next_f32())),
            Tensor::F32(a) => a.mapv_inplace(|_| self.next_f32()),
            Tensor::F64(a) => a.mapv_inplace(|_| f64::from(self.next_f32())),
            _ => {}
        }
    }
}

/// The inputs as `name: type`, the first few of a long list (an error line stays readable).
fn input_names(infos: &[TensorInfo]) -> String {
    const SHOWN: usize = 10;
    let mut s = infos.iter().take(SHOWN).map(|i| format!("{}: {}", i.name, i.ty)).collect::<Vec<_>>().join(", ");
    if infos.len() > SHOWN {
        s.push_str(&format!(", ... and {} more", infos.len() - SHOWN));
    }
    s
}

/// Checks that `inputs` match `infos` in count, dtype and shape.
pub(crate) fn check_inputs(infos: &[TensorInfo], inputs: &[Tensor]) -> Result<(), RuntimeError> {
    if inputs.len() != infos.len() {
        return Err(RuntimeError::InputCount { expected: infos.len(), got: inputs.len(), names: input_names(infos) });
    }
    for (info, t) in infos.iter().zip(inputs) {
        if t.tensor_type() != info.ty {
            return Err(RuntimeError::InputType {
                name: info.name.clone(),
                expected: info.ty.clone(),
                got: t.tensor_type(),
            });
        }
    }
    Ok(())
}
