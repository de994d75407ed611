//! Model-local functions (`ModelProto.functions`, as `torch.onnx.export(...,
//! export_modules_as_functions=...)` writes them): every call is replaced by the function's
//! body before import, so the importer only ever sees standard operators.
//!
//! A call binds the function's formal inputs and outputs to the node's values; every other name
//! of the body (subgraphs included) gets a prefix unique to the call, and attributes that refer
//! to the caller's (`ref_attr_name`) take the caller's value or the function's default. Calls
//! inside bodies expand too, up to a depth and a total node count, so a recursive or
//! exponentially nested model is an error, not a hang.

use std::collections::HashMap;

use super::ImportError;
use super::proto::{AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto};

/// Deepest chain of calls expanded.
const MAX_DEPTH: usize = 64;
/// Most nodes all expansions may add.
const MAX_INLINED_NODES: usize = 1 << 18;
/// Most bytes (encoded) the inlined nodes may take, subgraphs and prefixed names included.
const MAX_INLINED_BYTES: usize = 1 << 28;

type Key = (String, String, String);

fn domain_of(d: &str) -> &str {
    if d == "ai.onnx" { "" } else { d }
}

/// Replaces every call of a model-local function in the main graph by the function's body;
/// `opset` is the model's default-domain opset, which every function body must share.
pub(super) fn inline_functions(model: &mut ModelProto, opset: i64) -> Result<(), ImportError> {
    if model.functions.is_empty() {
        return Ok(());
    }
    let mut functions: HashMap<Key, &FunctionProto> = HashMap::new();
    for f in &model.functions {
        let bad = |reason: String| ImportError::BadFunction { function: f.name.clone(), reason };
        if let Some(v) = f.opset_import.iter().find(|o| domain_of(&o.domain).is_empty()).map(|o| o.version)
            && v != opset
        {
            return Err(bad(format!("its body imports opset {v}, the model opset {opset}")));
        }
        let key = (domain_of(&f.domain).to_string(), f.name.clone(), f.overload.clone());
        if functions.insert(key, f).is_some() {
            return Err(bad("is defined more than once".into()));
        }
    }
    let Some(graph) = model.graph.as_mut() else { return Ok(()) };
    let mut inliner = Inliner { functions: &functions, calls: 0, added: 0, bytes: 0 };
    inliner.expand_graph(graph, 0)
}

struct Inliner<'a> {
    functions: &'a HashMap<Key, &'a FunctionProto>,
    /// Calls expanded so far: numbers each call's prefix.
    calls: usize,
    added: usize,
    bytes: usize,
}

impl Inliner<'_> {
    fn expand_graph(&mut self, g: &mut GraphProto, depth: usize) -> Result<(), ImportError> {
        let mut out = Vec::with_capacity(g.node.len());
        for node in std::mem::take(&mut g.node) {
            self.expand_node(node, depth, &mut out)?;
        }
        g.node = out;
        Ok(())
    }

    fn expand_node(&mut self, mut node: NodeProto, depth: usize, out: &mut Vec<NodeProto>) -> Result<(), ImportError> {
        for a in &mut node.attribute {
            if let Some(g) = &mut a.g {
                self.expand_graph(g, depth)?;
            }
        }
        let key = (domain_of(&node.domain).to_string(), node.op_type.clone(), node.overload.clone());
        let Some(&f) = self.functions.get(&key) else {
            out.push(node);
            return Ok(());
        };
        let bad = |reason: String| ImportError::BadFunction { function: f.name.clone(), reason };
        if depth >= MAX_DEPTH {
            return Err(bad(format!("calls nest deeper than {MAX_DEPTH} (a recursive function?)")));
        }
        self.added = self.added.saturating_add(f.node.len());
        if self.added > MAX_INLINED_NODES {
            return Err(bad(format!("inlining its calls adds more than {MAX_INLINED_NODES} nodes")));
        }
        if node.input.len() > f.input.len() || node.output.len() > f.output.len() {
            return Err(bad(format!(
                "node '{}' passes {} inputs and {} outputs, the function takes {} and {}",
                node.name,
                node.input.len(),
                node.output.len(),
                f.input.len(),
                f.output.len()
            )));
        }
        self.calls += 1;
        let prefix = format!("{}/{}#{}/", node.name, f.name, self.calls);
        let mut bound: HashMap<&str, String> = HashMap::new();
        for (i, formal) in f.input.iter().enumerate() {
            bound.insert(formal, node.input.get(i).cloned().unwrap_or_default());
        }
        for (i, formal) in f.output.iter().enumerate() {
            // An output the caller does not want keeps a private name.
            let actual = node.output.get(i).filter(|o| !o.is_empty()).cloned();
            bound.insert(formal, actual.unwrap_or_else(|| format!("{prefix}{formal}")));
        }
        let rename = |n: &str| -> String {
            if n.is_empty() { String::new() } else { bound.get(n).cloned().unwrap_or_else(|| format!("{prefix}{n}")) }
        };
        for body in &f.node {
            let mut b = body.clone();
            b.name = format!("{prefix}{}", b.name);
            rename_node(&mut b, &rename);
            let mut attributes = Vec::with_capacity(b.attribute.len());
            for a in b.attribute {
                if a.ref_attr_name.is_empty() {
                    attributes.push(a);
                    continue;
                }
                let given = node.attribute.iter().chain(&f.attribute_proto).find(|c| c.name == a.ref_attr_name);
                if let Some(given) = given {
                    if given.r#type != a.r#type && a.r#type != 0 {
                        return Err(bad(format!("attribute '{}' has the wrong type", a.ref_attr_name)));
                    }
                    attributes.push(AttributeProto { name: a.name, ..given.clone() });
                }
            }
            b.attribute = attributes;
            self.bytes = self.bytes.saturating_add(prost::Message::encoded_len(&b));
            if self.bytes > MAX_INLINED_BYTES {
                return Err(bad(format!("inlining its calls takes more than {MAX_INLINED_BYTES} bytes of nodes")));
            }
            self.expand_node(b, depth + 1, out)?;
        }
        Ok(())
    }
}

/// Renames every value a node reads or writes, in its subgraphs too.
fn rename_node(n: &mut NodeProto, rename: &impl Fn(&str) -> String) {
    for v in n.input.iter_mut().chain(n.output.iter_mut()) {
        *v = rename(v);
    }
    for a in &mut n.attribute {
        if let Some(g) = &mut a.g {
            rename_graph(g, rename);
        }
    }
}

fn rename_graph(g: &mut GraphProto, rename: &impl Fn(&str) -> String) {
    for v in g.input.iter_mut().chain(g.output.iter_mut()).chain(g.value_info.iter_mut()) {
        v.name = rename(&v.name);
    }
    for t in &mut g.initializer {
        t.name = rename(&t.name);
    }
    for n in &mut g.node {
        n.name = rename(&n.name);
        rename_node(n, rename);
    }
}
