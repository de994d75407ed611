//! Graph-to-graph passes. Each preserves the graph's outputs (values, names and order) and is
//! tested against the reference interpreter on the unoptimised graph.

mod fold_bn;
mod integer_form;
mod trim_taps;

use std::collections::HashMap;
use std::sync::Arc;

use crate::graph::{Graph, ValueId};
use crate::interp::eval_op;

pub use fold_bn::fold_batch_norm;
pub use integer_form::{IntegerFormReport, integer_form};
pub use trim_taps::trim_conv_taps;

/// What [`optimize`] changed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassStats {
    pub folded_constants: usize,
    /// BatchNormalizations, and products by a constant per channel, folded into their Conv or
    /// Gemm.
    pub folded_batch_norms: usize,
    pub removed_identities: usize,
    pub removed_dead_nodes: usize,
    /// Pow nodes with a constant exponent of 0.5, 1, 2 or 3 rewritten as Sqrt or products.
    pub reduced_powers: usize,
    /// Convolutions whose taps that only read padding were dropped.
    pub trimmed_convolutions: usize,
    /// The quantized (QDQ) patterns rewritten into the integer form, and those left in float
    /// with the reason.
    pub integer_form: IntegerFormReport,
}

/// Runs every pass: identity removal, the integer form of quantized patterns (before constant
/// folding, which would turn the dequantized weights it matches into float constants),
/// constant folding, BatchNormalization and per-channel product folding, tap trimming,
/// dead-node elimination.
pub fn optimize(graph: &mut Graph) -> PassStats {
    let mut stats = PassStats { removed_identities: remove_identities(graph), ..PassStats::default() };
    if graph.nodes.iter().any(|n| matches!(n.op, crate::Op::DequantizeLinear { .. })) {
        // A failed rewrite leaves the graph as it was: the float QDQ semantics still hold.
        let before = graph.clone();
        match integer_form(graph) {
            Ok(report) => {
                stats.integer_form = report;
                stats.removed_dead_nodes = eliminate_dead_nodes(graph);
            }
            Err(_) => *graph = before,
        }
    }
    stats.folded_constants = fold_constants(graph);
    stats.reduced_powers = reduce_powers(graph);
    stats.folded_batch_norms = fold_batch_norm(graph);
    stats.trimmed_convolutions = trim_conv_taps(graph);
    stats.removed_dead_nodes += eliminate_dead_nodes(graph);
    stats
}

/// Rewrites `Pow(x, c)` whose exponent is a constant holding one value of 0.5, 1, 2 or 3 (and
/// that does not broadcast x) as `Sqrt(x)`, `x`, `x * x` or `x * x * x`: exporters write GELU's
/// cube and variances this way, and a libm `pow` per element costs far more than a multiply.
pub fn reduce_powers(graph: &mut Graph) -> usize {
    use crate::op::{BinaryOp, UnaryOp};
    let mut names = crate::graph::NameTable::new(graph);
    let mut reduced = 0;
    let mut out = Vec::with_capacity(graph.nodes.len());
    for node in std::mem::take(&mut graph.nodes) {
        let exponent = match (&node.op, node.inputs.as_slice()) {
            (crate::Op::Binary(BinaryOp::Pow), &[x, e]) => graph.values[e.0].constant.as_ref().and_then(|c| {
                let v = c.to_f64_vec();
                let same = v.first().filter(|f| v.iter().all(|g| g == *f)).copied();
                let keeps_shape = crate::infer::broadcast_shapes(&graph.ty(x).shape, c.shape()).ok()
                    == Some(graph.ty(x).shape.clone());
                same.filter(|f| keeps_shape && [0.5, 1.0, 2.0, 3.0].contains(f)).map(|f| (x, f))
            }),
            _ => None,
        };
        let Some((x, e)) = exponent else {
            out.push(node);
            continue;
        };
        let y = node.outputs[0];
        let (op, inputs) = match e {
            0.5 => (crate::Op::Unary(UnaryOp::Sqrt), vec![x]),
            1.0 => (crate::Op::Identity, vec![x]),
            2.0 => (crate::Op::Binary(BinaryOp::Mul), vec![x, x]),
            _ => {
                let sq = graph.values.len();
                let name = names.fresh(&format!("{}:square", node.name));
                graph.values.push(crate::graph::Value { name, ty: graph.ty(x).clone(), constant: None });
                let sq = ValueId(sq);
                out.push(crate::graph::Node {
                    name: format!("{}:square", node.name),
                    op: crate::Op::Binary(BinaryOp::Mul),
                    inputs: vec![x, x],
                    outputs: vec![sq],
                });
                (crate::Op::Binary(BinaryOp::Mul), vec![sq, x])
            }
        };
        out.push(crate::graph::Node { name: node.name, op, inputs, outputs: vec![y] });
        reduced += 1;
    }
    graph.nodes = out;
    reduced
}

/// Evaluates every node whose inputs are all constants and turns its outputs into constants.
/// Nodes whose evaluation fails (e.g. integer division by zero, or not enough memory) are left
/// to fail at run time, and so are nodes whose outputs would be much larger than their inputs
/// (Pad, broadcasting): a few bytes of model must not become gigabytes of constant data.
pub fn fold_constants(graph: &mut Graph) -> usize {
    /// Outputs may exceed the inputs by this much.
    const GROWTH_ALLOWANCE: usize = 1 << 20;
    let mut folded = 0;
    let mut keep = Vec::with_capacity(graph.nodes.len());
    for node in std::mem::take(&mut graph.nodes) {
        let consts: Option<Vec<Arc<crate::Tensor>>> =
            node.inputs.iter().map(|i| graph.values[i.0].constant.clone()).collect();
        let result = consts.filter(|c| {
            let input_bytes = c.iter().map(|t| t.size_bytes()).fold(0, usize::saturating_add);
            let output_bytes = node.outputs.iter().map(|o| graph.ty(*o).size_bytes()).fold(0, usize::saturating_add);
            output_bytes <= input_bytes.saturating_add(GROWTH_ALLOWANCE)
        });
        let result = result.and_then(|c| {
            let refs: Vec<&crate::Tensor> = c.iter().map(|t| t.as_ref()).collect();
            eval_op(&node.op, &refs).ok()
        });
        match result {
            Some(outs) => {
                for (&o, t) in node.outputs.iter().zip(outs) {
                    graph.values[o.0].constant = Some(Arc::new(t));
                }
                folded += 1;
            }
            None => keep.push(node),
        }
    }
    graph.nodes = keep;
    folded
}

/// Removes Identity and Dropout nodes by reading their input directly. When the node's output
/// is a graph output, its name is kept by renaming the input value, unless that input is itself
/// a graph input, a graph output or a constant (then the node stays). Linear in the graph size.
pub fn remove_identities(graph: &mut Graph) -> usize {
    let uses = graph.use_counts();
    let mut is_input = vec![false; graph.values.len()];
    graph.inputs.iter().for_each(|i| is_input[i.0] = true);
    let mut is_output = vec![false; graph.values.len()];
    graph.outputs.iter().for_each(|o| is_output[o.0] = true);
    // replacement[v]: the value v now reads from (itself when unchanged); chains resolve to
    // the first source.
    let mut replacement: Vec<ValueId> = (0..graph.values.len()).map(ValueId).collect();
    let resolve = |r: &Vec<ValueId>, mut v: ValueId| {
        while r[v.0] != v {
            v = r[v.0];
        }
        v
    };
    let mut removed = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        let extra_outputs_used = node.outputs[1..].iter().any(|o| uses[o.0] > 0);
        if !node.op.is_identity_like() || extra_outputs_used {
            continue;
        }
        let (src, dst) = (resolve(&replacement, node.inputs[0]), node.outputs[0]);
        if is_output[dst.0] {
            if is_input[src.0] || is_output[src.0] || graph.values[src.0].constant.is_some() {
                continue;
            }
            let name = std::mem::take(&mut graph.values[dst.0].name);
            graph.values[dst.0].name = std::mem::replace(&mut graph.values[src.0].name, name);
            is_output[src.0] = true;
        }
        replacement[dst.0] = src;
        removed[i] = true;
    }
    let count = removed.iter().filter(|&&r| r).count();
    let mut flags = removed.iter();
    graph.nodes.retain(|_| !*flags.next().expect("one flag per node"));
    for node in &mut graph.nodes {
        node.inputs.iter_mut().for_each(|v| *v = resolve(&replacement, *v));
    }
    graph.outputs.iter_mut().for_each(|v| *v = resolve(&replacement, *v));
    count
}

/// Removes nodes none of whose outputs reach a graph output, then drops values nothing refers
/// to (renumbering the rest).
pub fn eliminate_dead_nodes(graph: &mut Graph) -> usize {
    let mut live = vec![false; graph.values.len()];
    for o in &graph.outputs {
        live[o.0] = true;
    }
    let mut keep = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|o| live[o.0]) {
            keep[i] = true;
            for inp in &node.inputs {
                live[inp.0] = true;
            }
        }
    }
    let before = graph.nodes.len();
    let mut k = keep.iter();
    graph.nodes.retain(|_| *k.next().expect("one flag per node"));
    let removed = before - graph.nodes.len();
    compact_values(graph);
    removed
}

/// Drops values not referenced by any node, input or output, renumbering the rest.
fn compact_values(graph: &mut Graph) {
    let mut used = vec![false; graph.values.len()];
    let ids = graph
        .inputs
        .iter()
        .chain(&graph.outputs)
        .chain(graph.nodes.iter().flat_map(|n| n.inputs.iter().chain(&n.outputs)));
    for id in ids {
        used[id.0] = true;
    }
    let mut remap: HashMap<usize, usize> = HashMap::new();
    let old = std::mem::take(&mut graph.values);
    for (i, v) in old.into_iter().enumerate() {
        if used[i] {
            remap.insert(i, graph.values.len());
            graph.values.push(v);
        }
    }
    let fix = |id: &mut ValueId| id.0 = remap[&id.0];
    graph.inputs.iter_mut().for_each(fix);
    graph.outputs.iter_mut().for_each(fix);
    for n in &mut graph.nodes {
        n.inputs.iter_mut().for_each(fix);
        n.outputs.iter_mut().for_each(fix);
    }
}
