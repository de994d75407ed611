//! The graph IR: values (typed, possibly constant), nodes (an [`Op`] over values) and the graph's
//! inputs and outputs.
//!
//! Nodes are kept in a valid execution order. Adding a node infers its output types at once, so a
//! shape error surfaces where the node is wired, with the node's name.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use crate::dtype::TensorType;
use crate::infer::infer_types;
use crate::limits::Limits;
use crate::op::Op;
use crate::tensor::Tensor;

/// Index of a value in [`Graph::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// A tensor-valued edge of the graph.
#[derive(Clone, Debug)]
pub struct Value {
    pub name: String,
    pub ty: TensorType,
    /// Compile-time data (weights, folded constants). Shared so graph copies stay cheap.
    pub constant: Option<Arc<Tensor>>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// An error found while building a graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("node '{node}' ({op}): {message}")]
    Shape { node: String, op: String, message: String },
    #[error("node '{node}' ({op}) asks for {asked} outputs, the op has at most {max}")]
    TooManyOutputs { node: String, op: String, asked: usize, max: usize },
    #[error("value name '{0}' is used twice")]
    DuplicateName(String),
    #[error("node '{node}' ({op}): output {message}")]
    TooLarge { node: String, op: String, message: String },
}

/// A dataflow graph of [`Op`]s over statically typed tensors.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub values: Vec<Value>,
    /// In execution order: every node's inputs are graph inputs, constants or outputs of an
    /// earlier node.
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// What node outputs may be: checked as each node is added (see [`Graph::add_node_named`]),
    /// and for every value by the verifier.
    pub limits: Limits,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0]
    }

    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.values[id.0].ty
    }

    pub fn constant(&self, id: ValueId) -> Option<&Tensor> {
        self.values[id.0].constant.as_deref()
    }

    /// The value named `name`, if any.
    pub fn find_value(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name).map(ValueId)
    }

    fn push_value(&mut self, name: String, ty: TensorType, constant: Option<Arc<Tensor>>) -> ValueId {
        self.values.push(Value { name, ty, constant });
        ValueId(self.values.len() - 1)
    }

    /// Declares a graph input.
    pub fn add_input(&mut self, name: impl Into<String>, ty: TensorType) -> ValueId {
        let id = self.push_value(name.into(), ty, None);
        self.inputs.push(id);
        id
    }

    /// Adds a compile-time constant.
    pub fn add_constant(&mut self, name: impl Into<String>, tensor: Tensor) -> ValueId {
        let ty = tensor.tensor_type();
        self.push_value(name.into(), ty, Some(Arc::new(tensor)))
    }

    /// Appends a node producing `num_outputs` outputs named `<name>` (first output) and
    /// `<name>:<i>`; their types are inferred now.
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        inputs: &[ValueId],
        num_outputs: usize,
    ) -> Result<Vec<ValueId>, GraphError> {
        let name = name.into();
        let names: Vec<String> =
            (0..num_outputs).map(|i| if i == 0 { name.clone() } else { format!("{name}:{i}") }).collect();
        self.add_node_named(name, op, inputs, names)
    }

    /// Appends a node whose outputs get the given names; their types are inferred now.
    pub fn add_node_named(
        &mut self,
        name: String,
        op: Op,
        inputs: &[ValueId],
        output_names: Vec<String>,
    ) -> Result<Vec<ValueId>, GraphError> {
        let tys: Vec<&TensorType> = inputs.iter().map(|&i| self.ty(i)).collect();
        let inferred = infer_types(&op, &tys).map_err(|message| GraphError::Shape {
            node: name.clone(),
            op: op.name().to_string(),
            message,
        })?;
        for ty in &inferred {
            self.limits.check(ty).map_err(|e| GraphError::TooLarge {
                node: name.clone(),
                op: op.name().to_string(),
                message: e.to_string(),
            })?;
        }
        if output_names.len() > inferred.len() {
            return Err(GraphError::TooManyOutputs {
                node: name,
                op: op.name().to_string(),
                asked: output_names.len(),
                max: inferred.len(),
            });
        }
        let outputs =
            output_names.into_iter().zip(inferred).map(|(n, ty)| self.push_value(n, ty, None)).collect::<Vec<_>>();
        self.nodes.push(Node { name, op, inputs: inputs.to_vec(), outputs: outputs.clone() });
        Ok(outputs)
    }

    /// Convenience for single-output nodes.
    pub fn add_op(&mut self, name: impl Into<String>, op: Op, inputs: &[ValueId]) -> Result<ValueId, GraphError> {
        Ok(self.add_node(name, op, inputs, 1)?[0])
    }

    pub fn set_outputs(&mut self, outputs: Vec<ValueId>) {
        self.outputs = outputs;
    }

    /// A value name not used yet, derived from `base`. Costs a pass over every value: to make
    /// many names, use one [`NameTable`].
    pub fn fresh_name(&self, base: &str) -> String {
        NameTable::new(self).fresh(base)
    }

    /// For each value, the index of the node producing it (None for inputs and constants).
    pub fn producers(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for o in &n.outputs {
                p[o.0] = Some(i);
            }
        }
        p
    }

    /// For every value, the indices of the nodes that read it (once per input slot).
    pub fn consumers(&self) -> Vec<Vec<usize>> {
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for v in &n.inputs {
                consumers[v.0].push(i);
            }
        }
        consumers
    }

    /// For each value, how many node inputs and graph outputs read it.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.values.len()];
        for n in &self.nodes {
            for i in &n.inputs {
                c[i.0] += 1;
            }
        }
        for o in &self.outputs {
            c[o.0] += 1;
        }
        c
    }

    /// Total bytes of constant data referenced by nodes or outputs.
    pub fn parameter_bytes(&self) -> usize {
        let uses = self.use_counts();
        self.values
            .iter()
            .zip(uses)
            .filter(|(v, n)| v.constant.is_some() && *n > 0)
            .map(|(v, _)| v.ty.size_bytes())
            .sum()
    }

    /// Replaces every use of `from` (node inputs and graph outputs) by `to`.
    pub fn replace_uses(&mut self, from: ValueId, to: ValueId) {
        for n in &mut self.nodes {
            n.inputs.iter_mut().filter(|i| **i == from).for_each(|i| *i = to);
        }
        self.outputs.iter_mut().filter(|i| **i == from).for_each(|i| *i = to);
    }
}

/// The names in use, for making many fresh ones in constant time each.
#[derive(Clone, Debug, Default)]
pub struct NameTable {
    taken: HashSet<String>,
}

impl NameTable {
    /// The names of every value of `graph`.
    pub fn new(graph: &Graph) -> NameTable {
        NameTable { taken: graph.values.iter().map(|v| v.name.clone()).collect() }
    }

    /// Marks `name` as used.
    pub fn reserve(&mut self, name: &str) {
        self.taken.insert(name.to_string());
    }

    /// A name not used yet, derived from `base` (`base`, else `base_1`, `base_2`, ...), now used.
    pub fn fresh(&mut self, base: &str) -> String {
        let name = if self.taken.contains(base) {
            (1..).map(|i| format!("{base}_{i}")).find(|n| !self.taken.contains(n)).expect("unbounded")
        } else {
            base.to_string()
        };
        self.taken.insert(name.clone());
        name
    }
}

impl fmt::Display for Graph {
    /// A readable listing: inputs, one line per node, outputs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let desc = |id: &ValueId| format!("%{}: {}", self.value(*id).name, self.ty(*id));
        for i in &self.inputs {
            writeln!(f, "input {}", desc(i))?;
        }
        for n in &self.nodes {
            let ins: Vec<String> = n.inputs.iter().map(|i| format!("%{}", self.value(*i).name)).collect();
            let outs: Vec<String> = n.outputs.iter().map(desc).collect();
            writeln!(f, "{} = {}({}) [{}]", outs.join(", "), n.op, ins.join(", "), n.name)?;
        }
        for o in &self.outputs {
            writeln!(f, "output {}", desc(o))?;
        }
        Ok(())
    }
}
