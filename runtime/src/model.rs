//! `Model`: a verified graph plus its name, loaded from ONNX or built in code, with input
//! binding and checking shared by every engine.

use std::path::Path;

use heron_ir::interp::{self, InterpError};
use heron_ir::onnx::{ImportError, ImportOptions, load_model};
use heron_ir::{Graph, Tensor, TensorType, VerifyErrors, verify};

use crate::builtin::{BUILTIN_NAME, builtin_model};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Invalid(#[from] VerifyErrors),
    #[error(transparent)]
    Run(#[from] InterpError),
    #[error("the model takes {expected} inputs ({names}), got {got}")]
    InputCount { expected: usize, got: usize, names: String },
    #[error("the model has no input named '{name}' (inputs: {names})")]
    UnknownInput { name: String, names: String },
    #[error("input '{0}' is given twice")]
    DuplicateInput(String),
    #[error("input '{name}' must be {expected}, got {got}")]
    InputType { name: String, expected: TensorType, got: TensorType },
    #[error(transparent)]
    Lower(#[from] heron_ir::lower::LowerError),
    #[error(transparent)]
    Plan(#[from] heron_planner::PlanError),
    #[error(transparent)]
    Codegen(#[from] heron_jit::CodegenError),
    #[error(transparent)]
    Execute(#[from] heron_jit::JitRunError),
    #[error("compile: {0}")]
    Compile(String),
    #[error("the workspace was made for another model")]
    ForeignWorkspace,
    #[error(transparent)]
    Aot(#[from] heron_aot::AotError),
    #[error(transparent)]
    Memory(#[from] crate::memory::AllocError),
    /// (Not a `source`: the message holds the VTA error already.)
    #[error("VTA: {0}")]
    Vta(heron_vta::VtaError),
}

impl From<heron_vta::VtaError> for RuntimeError {
    fn from(e: heron_vta::VtaError) -> Self {
        RuntimeError::Vta(e)
    }
}

/// A named tensor slot of a model: an input or an output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
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
    pub fn load(path: &Path) -> Result<Model, RuntimeError> {
        Model::load_with(path, &ImportOptions::default())
    }

    /// Imports an ONNX file, with values supplied for shape-deciding inputs.
    pub fn load_with(path: &Path, options: &ImportOptions) -> Result<Model, RuntimeError> {
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

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn inputs(&self) -> Vec<TensorInfo> {
        self.infos(&self.graph.inputs)
    }

    pub fn outputs(&self) -> Vec<TensorInfo> {
        self.infos(&self.graph.outputs)
    }

    fn infos(&self, ids: &[heron_ir::ValueId]) -> Vec<TensorInfo> {
        ids.iter()
            .map(|&id| TensorInfo { name: self.graph.value(id).name.clone(), ty: self.graph.ty(id).clone() })
            .collect()
    }

    fn input_names(&self) -> String {
        input_names(&self.inputs())
    }

    /// Orders inputs given by name (or by position when the name is `None`) to match the
    /// model's input list, checking count, names, dtypes and shapes.
    pub fn bind_inputs(&self, given: Vec<(Option<String>, Tensor)>) -> Result<Vec<Tensor>, RuntimeError> {
        let infos = self.inputs();
        if given.len() != infos.len() {
            return Err(RuntimeError::InputCount {
                expected: infos.len(),
                got: given.len(),
                names: self.input_names(),
            });
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
                        .ok_or_else(|| RuntimeError::UnknownInput { name: n.clone(), names: self.input_names() })?;
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
        self.check_inputs(&bound)?;
        Ok(bound)
    }

    /// Checks that `inputs` match the model's inputs in count, dtype and shape.
    pub fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), RuntimeError> {
        check_inputs(&self.inputs(), inputs)
    }

    /// Runs the model on the reference interpreter (inputs in model order).
    pub fn run_interpreter(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.check_inputs(inputs)?;
        Ok(interp::run(&self.graph, inputs)?)
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
