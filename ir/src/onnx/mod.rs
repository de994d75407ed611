//! ONNX frontend: decodes a `ModelProto` (prost) and builds a [`Graph`].
//!
//! The graph-level import (initializers, inputs, topological order, outputs) lives here; the
//! per-operator translation, dispatched on each op's own schema version, lives in [`ops`].

mod external;
mod functions;
mod ops;
pub mod proto;
mod tensor;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use prost::Message;

use crate::dtype::{DType, TensorType};
use crate::graph::{Graph, GraphError, NameTable, ValueId};
use crate::limits::Limits;
use crate::tensor::Tensor;

pub use ops::{SUPPORTED_OPS, schema_version};
pub use tensor::{tensor_from_proto, tensor_from_proto_within, tensor_to_proto};

use proto::{GraphProto, ModelProto, NodeProto, ValueInfoProto, type_proto};

/// The oldest default-domain opset Heron imports.
pub const MIN_OPSET: i64 = 7;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("not a valid ONNX model (protobuf decode failed: {0})")]
    Decode(String),
    #[error("the model has no graph")]
    NoGraph,
    #[error("the model imports no default-domain ('ai.onnx') opset (it imports {0}); Heron runs ai.onnx operators")]
    NoOpset(String),
    #[error("opset {0} is too old: Heron imports models of opset {MIN_OPSET} and newer")]
    OpsetTooOld(i64),
    #[error("unsupported operator {op_type} (domain '{domain}', opset {opset}) in node '{node}'")]
    UnsupportedOp { op_type: String, domain: String, node: String, opset: i64 },
    #[error("{context}: unsupported element type {dtype}")]
    UnsupportedDtype { context: String, dtype: String },
    #[error("value '{name}': unsupported type kind '{kind}' (only tensors are supported)")]
    UnsupportedTypeKind { name: String, kind: &'static str },
    #[error(
        "graph input '{name}' has a symbolic dimension {dim} ('{param}'): bind it from the input given, or with --input-shape {name}=D0,D1,... or --dim {param}=N (API: ImportOptions::input_shapes / dims); compiled code, AOT objects included, has fixed shapes"
    )]
    DynamicShape { name: String, dim: usize, param: String },
    #[error("graph input '{name}' is declared {declared}, the shape given is {given:?}")]
    ShapeMismatch { name: String, declared: String, given: Vec<usize> },
    #[error("symbolic dimension '{param}' is bound to both {first} and {second}")]
    DimConflict { param: String, first: usize, second: usize },
    #[error("no graph input is named '{0}' (a shape was given for it)")]
    UnknownShapeInput(String),
    #[error("graph input '{0}' has no tensor type information")]
    MissingType(String),
    #[error("{context}: {reason}")]
    TooLarge { context: String, reason: String },
    #[error("tensor '{name}': {reason}")]
    BadTensor { name: String, reason: String },
    #[error("model-local function '{function}': {reason}")]
    BadFunction { function: String, reason: String },
    #[error("tensor '{name}': external data {reason}")]
    ExternalData { name: String, reason: String },
    #[error("node '{node}' reads '{input}', which no node, input or initializer defines")]
    UndefinedInput { node: String, input: String },
    #[error("the graph has a cycle: nodes {0:?} can never run")]
    Cycle(Vec<String>),
    #[error("value '{0}' is defined more than once")]
    DuplicateValue(String),
    #[error("node '{node}' ({op}): attribute '{attr}': {reason}")]
    BadAttribute { node: String, op: String, attr: String, reason: String },
    #[error("node '{node}' ({op}): {reason}")]
    BadNode { node: String, op: String, reason: String },
    #[error(
        "node '{node}' ({op}): input '{input}' ({what}) must be known at compile time: make it an initializer or Constant, or supply its value when loading"
    )]
    NotConstant { node: String, op: String, input: String, what: String },
    #[error("node '{node}' ({op}): its output shape depends on the data ({reason}); Heron compiles static shapes")]
    DataDependent { node: String, op: String, reason: String },
    #[error("node '{node}' ({op}): training mode is not supported (inference only)")]
    TrainingMode { node: String, op: String },
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("graph output '{name}' is declared {declared} but computes {inferred}")]
    OutputMismatch { name: String, declared: String, inferred: String },
    #[error("graph output '{0}' is not produced by any node, input or initializer")]
    UndefinedOutput(String),
    #[error("supplied value for input '{name}' is {got}, the model declares {declared}")]
    SuppliedMismatch { name: String, declared: String, got: String },
}

/// Options for [`import_model`].
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Values for graph inputs, used where an op needs its input at compile time (Reshape's
    /// shape, Pad's pads, ...). Such inputs become constants and leave the graph's input list;
    /// supplied inputs that no op needs stay ordinary inputs.
    pub known_values: HashMap<String, Tensor>,
    /// Size limits every tensor of the model must respect (checked before anything is
    /// allocated).
    pub limits: Limits,
    /// Shapes for graph inputs by name: they bind the inputs' symbolic dimensions (and must
    /// agree with the fixed ones).
    pub input_shapes: HashMap<String, Vec<usize>>,
    /// Values of symbolic dimensions by name (`batch`, `sequence`, ...), for inputs without a
    /// shape in `input_shapes`.
    pub dims: HashMap<String, usize>,
    /// The directory external tensor data is read from (the model file's; [`load_model`] sets
    /// it). None: a model with external data is an error.
    pub model_dir: Option<std::path::PathBuf>,
}

impl ImportOptions {
    /// Binds the symbolic dimensions of the inputs the `given` tensors go to (by name, else the
    /// declared inputs no tensor names, in order) to those tensors' shapes, unless
    /// `input_shapes` gives that input's shape already.
    pub fn bind_given_shapes(&mut self, declared: &[DeclaredInput], given: &[(Option<String>, Tensor)]) {
        let mut unnamed = declared.iter().filter(|d| !given.iter().any(|(n, _)| n.as_deref() == Some(&d.name)));
        for (name, t) in given {
            let input = match name {
                Some(n) => declared.iter().find(|d| &d.name == n),
                None => unnamed.next(),
            };
            if let Some(d) = input
                && d.dims.iter().any(|d| matches!(d, Dim::Symbolic(_)))
            {
                self.input_shapes.entry(d.name.clone()).or_insert_with(|| t.shape().to_vec());
            }
        }
    }

    /// Binds to 1 every symbolic dimension of `declared` that neither `dims` nor a shape in
    /// `input_shapes` (of that input or another sharing the symbol) binds; an input so
    /// completed gets its whole shape in `input_shapes`. Benchmark tools take a free batch
    /// dimension so for generated inputs. Returns the ones bound, as `input's name`.
    pub fn bind_free_dims_to_one(&mut self, declared: &[DeclaredInput]) -> Vec<String> {
        // An unnamed dimension (`?`, or a number as its name) binds nothing beyond its input.
        let shared = |name: &str| name != "?" && name.parse::<i64>().is_err();
        let mut known: HashMap<String, usize> = self.dims.clone();
        for d in declared {
            if let Some(shape) = self.input_shapes.get(&d.name) {
                for (dim, &size) in d.dims.iter().zip(shape) {
                    if let Dim::Symbolic(name) = dim
                        && shared(name)
                    {
                        known.entry(name.clone()).or_insert(size);
                    }
                }
            }
        }
        let mut bound = Vec::new();
        for d in declared {
            if self.input_shapes.contains_key(&d.name) || d.dims.iter().all(|dim| matches!(dim, Dim::Fixed(_))) {
                continue;
            }
            let shape = d
                .dims
                .iter()
                .map(|dim| match dim {
                    Dim::Fixed(n) => *n,
                    Dim::Symbolic(name) if shared(name) => *known.entry(name.clone()).or_insert_with(|| {
                        bound.push(format!("{}'s {name}", d.name));
                        1
                    }),
                    Dim::Symbolic(name) => {
                        bound.push(format!("{}'s {name}", d.name));
                        1
                    }
                })
                .collect();
            self.input_shapes.insert(d.name.clone(), shape);
        }
        bound
    }

    /// These options with external data read from the directory of the model file `path`,
    /// unless `model_dir` is set already.
    pub fn reading_data_beside(mut self, path: &Path) -> ImportOptions {
        if self.model_dir.is_none() {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            self.model_dir = Some(dir.to_path_buf());
        }
        self
    }
}

/// One dimension of a declared graph input: a size, or a symbolic name (`?` when unnamed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    Fixed(usize),
    Symbolic(String),
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Symbolic(s) => f.write_str(s),
        }
    }
}

/// A graph input as the model declares it (initializers excluded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredInput {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<Dim>,
}

/// The graph inputs a serialized model declares, in order, with their symbolic dimensions:
/// what a caller needs to bind given tensors to inputs before importing.
pub fn declared_inputs(bytes: &[u8]) -> Result<Vec<DeclaredInput>, ImportError> {
    let model = ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    let graph = model.graph.as_ref().ok_or(ImportError::NoGraph)?;
    let initializers: std::collections::HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut out = Vec::new();
    for input in graph.input.iter().filter(|i| !initializers.contains(i.name.as_str())) {
        let (dtype, dims) = declared_type(input)?.ok_or_else(|| ImportError::MissingType(input.name.clone()))?;
        let dims = dims.into_iter().map(|d| d.map_or_else(Dim::Symbolic, Dim::Fixed)).collect();
        out.push(DeclaredInput { name: input.name.clone(), dtype, dims });
    }
    Ok(out)
}

/// Resolves every input's shape: given shapes first (binding the symbolic dimensions they
/// meet), then the named dimensions. Conflicting bindings and mismatching shapes are errors.
fn bind_shapes(
    inputs: &[(String, Vec<Result<usize, String>>)],
    options: &ImportOptions,
) -> Result<HashMap<String, Vec<usize>>, ImportError> {
    for name in options.input_shapes.keys() {
        if !inputs.iter().any(|(n, _)| n == name) {
            return Err(ImportError::UnknownShapeInput(name.clone()));
        }
    }
    let mut bound: HashMap<String, usize> = options.dims.clone();
    let mut shapes = HashMap::new();
    let declared = |dims: &[Result<usize, String>]| {
        let d: Vec<String> = dims.iter().map(|d| d.as_ref().map_or_else(|p| p.clone(), |v| v.to_string())).collect();
        format!("[{}]", d.join(", "))
    };
    for (name, dims) in inputs {
        let Some(given) = options.input_shapes.get(name) else { continue };
        let mismatch =
            || ImportError::ShapeMismatch { name: name.clone(), declared: declared(dims), given: given.clone() };
        if dims.len() != given.len() {
            return Err(mismatch());
        }
        for (d, &g) in dims.iter().zip(given) {
            match d {
                Ok(v) if *v != g => return Err(mismatch()),
                Ok(_) => {}
                // An unnamed dimension binds nothing beyond this input.
                Err(p) if p == "?" || p.parse::<i64>().is_ok() => {}
                Err(p) => match bound.insert(p.clone(), g) {
                    Some(first) if first != g => {
                        return Err(ImportError::DimConflict { param: p.clone(), first, second: g });
                    }
                    _ => {}
                },
            }
        }
        shapes.insert(name.clone(), given.clone());
    }
    for (name, dims) in inputs {
        if shapes.contains_key(name) {
            continue;
        }
        let shape = dims
            .iter()
            .enumerate()
            .map(|(dim, d)| match d {
                Ok(v) => Ok(*v),
                Err(p) => bound.get(p).copied().ok_or_else(|| ImportError::DynamicShape {
                    name: name.clone(),
                    dim,
                    param: p.clone(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        shapes.insert(name.clone(), shape);
    }
    Ok(shapes)
}

/// Reads and imports an ONNX model file.
pub fn load_model(path: &Path, options: &ImportOptions) -> Result<Graph, ImportError> {
    let bytes =
        std::fs::read(path).map_err(|e| ImportError::Io { path: path.display().to_string(), reason: e.to_string() })?;
    import_model(&bytes, &options.clone().reading_data_beside(path))
}

/// Imports a serialized ONNX `ModelProto`.
pub fn import_model(bytes: &[u8], options: &ImportOptions) -> Result<Graph, ImportError> {
    let mut model = ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    let opset = model
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .max()
        .ok_or_else(|| {
            let domains: Vec<String> =
                model.opset_import.iter().map(|o| format!("'{}' {}", o.domain, o.version)).collect();
            ImportError::NoOpset(if domains.is_empty() { "nothing".into() } else { domains.join(", ") })
        })?;
    if opset < MIN_OPSET {
        return Err(ImportError::OpsetTooOld(opset));
    }
    functions::inline_functions(&mut model, opset)?;
    let graph = model.graph.as_mut().ok_or(ImportError::NoGraph)?;
    external::load_external_data(graph, options.model_dir.as_deref(), &options.limits)?;
    let graph = &*graph;
    Importer::new(opset, options, graph).import(graph)
}

pub(crate) struct Importer<'a> {
    pub(crate) graph: Graph,
    pub(crate) names: HashMap<String, ValueId>,
    known: &'a HashMap<String, Tensor>,
    pub(crate) opset: i64,
    options: &'a ImportOptions,
    /// Every name of the model (including node outputs not imported yet) and every name the
    /// importer made, so made-up names never collide.
    taken: NameTable,
}

/// A declared element type with each dimension: its size, or the symbolic name it has instead.
type DeclaredType = (DType, Vec<Result<usize, String>>);

/// Static type of a declared value, or why it has none.
fn declared_type(v: &ValueInfoProto) -> Result<Option<DeclaredType>, ImportError> {
    let Some(tp) = &v.r#type else { return Ok(None) };
    let tensor = match &tp.value {
        Some(type_proto::Value::TensorType(t)) => t,
        Some(type_proto::Value::SequenceType(_)) => {
            return Err(ImportError::UnsupportedTypeKind { name: v.name.clone(), kind: "sequence" });
        }
        Some(type_proto::Value::MapType(_)) => {
            return Err(ImportError::UnsupportedTypeKind { name: v.name.clone(), kind: "map" });
        }
        Some(type_proto::Value::SparseTensorType(_)) => {
            return Err(ImportError::UnsupportedTypeKind { name: v.name.clone(), kind: "sparse tensor" });
        }
        Some(type_proto::Value::OptionalType(_)) => {
            return Err(ImportError::UnsupportedTypeKind { name: v.name.clone(), kind: "optional" });
        }
        None => return Ok(None),
    };
    let dtype = DType::from_onnx_code(tensor.elem_type)
        .map_err(|dtype| ImportError::UnsupportedDtype { context: format!("value '{}'", v.name), dtype })?;
    let Some(shape) = &tensor.shape else {
        return Ok(Some((dtype, vec![])));
    };
    use proto::tensor_shape_proto::dimension::Value as D;
    let dims = shape
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(D::DimValue(v)) if *v >= 0 => Ok(*v as usize),
            Some(D::DimValue(v)) => Err(v.to_string()),
            Some(D::DimParam(p)) => Err(p.clone()),
            None => Err("?".to_string()),
        })
        .collect();
    Ok(Some((dtype, dims)))
}

impl<'a> Importer<'a> {
    fn new(opset: i64, options: &'a ImportOptions, proto: &GraphProto) -> Self {
        let mut taken = NameTable::default();
        let declared = proto.input.iter().map(|v| &v.name).chain(proto.initializer.iter().map(|t| &t.name));
        for name in declared.chain(proto.node.iter().flat_map(|n| &n.output)) {
            taken.reserve(name);
        }
        let graph = Graph { limits: options.limits, ..Graph::new() };
        Importer { graph, names: HashMap::new(), known: &options.known_values, opset, options, taken }
    }

    /// A fresh value name derived from `base`.
    pub(crate) fn fresh_name(&mut self, base: &str) -> String {
        self.taken.fresh(base)
    }

    fn define(&mut self, name: &str, id: ValueId) -> Result<(), ImportError> {
        if self.names.insert(name.to_string(), id).is_some() {
            return Err(ImportError::DuplicateValue(name.to_string()));
        }
        Ok(())
    }

    fn import(mut self, g: &GraphProto) -> Result<Graph, ImportError> {
        if let Some(s) = g.sparse_initializer.first() {
            let name = s.values.as_ref().map(|v| v.name.clone()).unwrap_or_default();
            return Err(ImportError::UnsupportedDtype {
                context: format!("sparse initializer '{name}'"),
                dtype: "sparse tensor".into(),
            });
        }
        for init in &g.initializer {
            let t = tensor_from_proto_within(init, &self.graph.limits)?;
            let id = self.graph.add_constant(init.name.clone(), t);
            self.define(&init.name, id)?;
        }
        let mut declared = Vec::new();
        for input in g.input.iter().filter(|i| !self.names.contains_key(&i.name)) {
            // A known value decides its input's type; the others' shapes are bound below.
            if self.known.contains_key(&input.name) {
                continue;
            }
            let (_, dims) = declared_type(input)?.ok_or_else(|| ImportError::MissingType(input.name.clone()))?;
            declared.push((input.name.clone(), dims));
        }
        let shapes = bind_shapes(&declared, self.options)?;
        for input in &g.input {
            if self.names.contains_key(&input.name) {
                continue; // an initializer provides it: a constant with a default value
            }
            let (dtype, _) = declared_type(input)?.ok_or_else(|| ImportError::MissingType(input.name.clone()))?;
            let ty = match self.known.get(&input.name) {
                Some(t) => t.tensor_type(),
                None => TensorType::new(dtype, shapes[&input.name].clone()),
            };
            if ty.dtype != dtype {
                return Err(ImportError::SuppliedMismatch {
                    name: input.name.clone(),
                    declared: dtype.to_string(),
                    got: ty.to_string(),
                });
            }
            self.graph.limits.check(&ty).map_err(|e| ImportError::TooLarge {
                context: format!("graph input '{}'", input.name),
                reason: e.to_string(),
            })?;
            let id = self.graph.add_input(input.name.clone(), ty);
            self.define(&input.name, id)?;
        }
        for node_index in topological_order(g, &self.names)? {
            let node = &g.node[node_index];
            let name = node_name(node, node_index);
            ops::import_node(&mut self, node, &name)?;
        }
        let mut outputs = Vec::new();
        for out in &g.output {
            let id = *self.names.get(&out.name).ok_or_else(|| ImportError::UndefinedOutput(out.name.clone()))?;
            self.check_declared_output(out, id)?;
            outputs.push(id);
        }
        self.graph.set_outputs(outputs);
        Ok(self.graph)
    }

    fn check_declared_output(&self, out: &ValueInfoProto, id: ValueId) -> Result<(), ImportError> {
        let Some((dtype, dims)) = declared_type(out)? else {
            return Ok(());
        };
        let ty = self.graph.ty(id);
        let has_shape = out
            .r#type
            .as_ref()
            .and_then(|t| match &t.value {
                Some(type_proto::Value::TensorType(t)) => t.shape.as_ref(),
                _ => None,
            })
            .is_some();
        let shape_ok = !has_shape
            || (dims.len() == ty.rank()
                && dims.iter().zip(&ty.shape).all(|(d, s)| d.as_ref().map_or(true, |d| d == s)));
        if dtype != ty.dtype || !shape_ok {
            let declared: Vec<String> =
                dims.iter().map(|d| d.as_ref().map_or_else(|p| p.clone(), |v| v.to_string())).collect();
            return Err(ImportError::OutputMismatch {
                name: out.name.clone(),
                declared: format!("{dtype}[{}]", declared.join(", ")),
                inferred: ty.to_string(),
            });
        }
        Ok(())
    }

    /// The value an input name refers to.
    pub(crate) fn value(&self, node: &str, name: &str) -> Result<ValueId, ImportError> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| ImportError::UndefinedInput { node: node.to_string(), input: name.to_string() })
    }

    /// The compile-time value of `name`: a constant, a graph input whose value was supplied
    /// (which then becomes a constant), or computed by the nodes producing it from such values
    /// (they are evaluated now and their outputs become constants).
    pub(crate) fn constant_value(&mut self, name: &str) -> Option<Tensor> {
        let id = *self.names.get(name)?;
        self.evaluate(id, 0)
    }

    pub(crate) fn evaluate(&mut self, id: ValueId, depth: usize) -> Option<Tensor> {
        /// How far back through producers a compile-time value is computed.
        const MAX_DEPTH: usize = 256;
        /// Values up to this many elements are computed at import.
        const MAX_ELEMENTS: usize = 1 << 16;
        if let Some(c) = self.graph.constant(id) {
            return Some(c.clone());
        }
        let name = self.graph.value(id).name.clone();
        if self.graph.inputs.contains(&id) {
            let known = self.known.get(&name)?.clone();
            if known.tensor_type() != *self.graph.ty(id) {
                return None;
            }
            self.graph.inputs.retain(|&i| i != id);
            self.graph.values[id.0].constant = Some(std::sync::Arc::new(known.clone()));
            return Some(known);
        }
        if depth >= MAX_DEPTH || self.graph.ty(id).num_elements() > MAX_ELEMENTS {
            return None;
        }
        let at = self.graph.nodes.iter().rposition(|n| n.outputs.contains(&id))?;
        let node = self.graph.nodes[at].clone();
        let inputs = node.inputs.iter().map(|&i| self.evaluate(i, depth + 1)).collect::<Option<Vec<_>>>()?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let results = crate::interp::eval_op(&node.op, &refs).ok()?;
        let fits = results.len() >= node.outputs.len()
            && results.iter().zip(&node.outputs).all(|(t, &o)| t.tensor_type() == *self.graph.ty(o));
        if !fits {
            return None;
        }
        let at = self.graph.nodes.iter().position(|n| n.outputs == node.outputs)?;
        self.graph.nodes.remove(at);
        for (t, &o) in results.into_iter().zip(&node.outputs) {
            self.graph.values[o.0].constant = Some(std::sync::Arc::new(t));
        }
        self.graph.constant(id).cloned()
    }
}

/// The names `g` reads from enclosing scopes: used by its nodes (or nested subgraphs) and not
/// defined inside it.
fn free_names(g: &GraphProto, out: &mut Vec<String>) {
    let defined: std::collections::HashSet<&str> = g
        .initializer
        .iter()
        .map(|t| t.name.as_str())
        .chain(g.input.iter().map(|i| i.name.as_str()))
        .chain(g.node.iter().flat_map(|n| n.output.iter().map(String::as_str)))
        .collect();
    let mut used: Vec<String> = Vec::new();
    for n in &g.node {
        used.extend(n.input.iter().filter(|s| !s.is_empty()).cloned());
        for a in n.attribute.iter().filter_map(|a| a.g.as_deref()) {
            free_names(a, &mut used);
        }
    }
    used.extend(g.output.iter().map(|o| o.name.clone()));
    out.extend(used.into_iter().filter(|u| !defined.contains(u.as_str())));
}

pub(crate) fn node_name(node: &NodeProto, index: usize) -> String {
    if node.name.is_empty() { format!("{}_{index}", node.op_type) } else { node.name.clone() }
}

/// Node indices in an order where every node follows the producers of its inputs (stable: the
/// file order when it already is one). Reports undefined inputs and cycles.
pub(crate) fn topological_order(g: &GraphProto, defined: &HashMap<String, ValueId>) -> Result<Vec<usize>, ImportError> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if producer.insert(o, i).is_some() || defined.contains_key(o) {
                return Err(ImportError::DuplicateValue(o.clone()));
            }
        }
    }
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); g.node.len()];
    let mut indegree = vec![0usize; g.node.len()];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); g.node.len()];
    for (i, n) in g.node.iter().enumerate() {
        // A subgraph (If's branches, a Loop body) reads enclosing values by name too.
        let mut reads: Vec<String> = n.input.iter().filter(|s| !s.is_empty()).cloned().collect();
        for a in n.attribute.iter().filter_map(|a| a.g.as_deref()) {
            free_names(a, &mut reads);
        }
        reads.sort();
        reads.dedup();
        for input in &reads {
            if let Some(&p) = producer.get(input.as_str()) {
                deps[i].push(p);
                users[p].push(i);
                indegree[i] += 1;
            } else if !defined.contains_key(input) {
                return Err(ImportError::UndefinedInput { node: node_name(n, i), input: input.clone() });
            }
        }
    }
    let mut ready: BTreeSet<usize> = (0..g.node.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(g.node.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != g.node.len() {
        let stuck = (0..g.node.len()).filter(|&i| indegree[i] > 0).map(|i| node_name(&g.node[i], i)).collect();
        return Err(ImportError::Cycle(stuck));
    }
    Ok(order)
}
