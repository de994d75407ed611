//! Static statistics of a graph: op counts, parameter and activation bytes, FLOPs.

use std::collections::BTreeMap;

use crate::graph::Graph;
use crate::op::Op;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphStats {
    /// Node count per op name.
    pub op_counts: BTreeMap<&'static str, usize>,
    /// Bytes of constant data the graph reads.
    pub parameter_bytes: usize,
    /// Bytes of all intermediate tensors (node outputs that are not graph outputs).
    pub activation_bytes: usize,
    /// Largest total size of intermediate tensors alive at once when nodes run in order (a
    /// node's inputs and outputs alive together; graph inputs, outputs and constants excluded):
    /// the lower bound for a memory planner that neither fuses nor works in place.
    pub peak_activation_bytes: usize,
    /// 2 x multiply-accumulates of Conv, ConvInteger, Gemm, MatMul and MatMulInteger.
    pub flops: u64,
}

/// Multiply-accumulates of one node.
fn macs(graph: &Graph, node: &crate::graph::Node) -> u64 {
    let shape = |i: usize| &graph.ty(node.inputs[i]).shape;
    let out = &graph.ty(node.outputs[0]).shape;
    match &node.op {
        Op::Conv(a) | Op::ConvInteger(a) => {
            let per_output: usize = shape(1)[1] * a.window.kernel.iter().product::<usize>();
            (out.iter().product::<usize>() * per_output) as u64
        }
        Op::Gemm { trans_a, .. } => {
            let k = if *trans_a { shape(0)[0] } else { shape(0)[1] };
            (out.iter().product::<usize>() * k) as u64
        }
        Op::MatMul | Op::MatMulInteger => {
            let a = shape(0);
            (out.iter().product::<usize>() * a[a.len() - 1]) as u64
        }
        _ => 0,
    }
}

pub fn graph_stats(graph: &Graph) -> GraphStats {
    let mut op_counts = BTreeMap::new();
    for n in &graph.nodes {
        *op_counts.entry(n.op.name()).or_insert(0) += 1;
    }
    let is_activation = |id: crate::ValueId| {
        let v = graph.value(id);
        v.constant.is_none() && !graph.inputs.contains(&id) && !graph.outputs.contains(&id)
    };
    // Live range of every activation: [producing node, last reading node].
    let mut first = vec![usize::MAX; graph.values.len()];
    let mut last = vec![0usize; graph.values.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        for &o in &n.outputs {
            first[o.0] = i;
            last[o.0] = last[o.0].max(i);
        }
        for &inp in &n.inputs {
            last[inp.0] = last[inp.0].max(i);
        }
    }
    let activations: Vec<_> =
        graph.nodes.iter().flat_map(|n| n.outputs.iter().copied()).filter(|&id| is_activation(id)).collect();
    let activation_bytes = activations.iter().map(|&id| graph.ty(id).size_bytes()).sum();
    let peak_activation_bytes = (0..graph.nodes.len())
        .map(|i| {
            activations
                .iter()
                .filter(|&&id| first[id.0] <= i && i <= last[id.0])
                .map(|&id| graph.ty(id).size_bytes())
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    let flops = graph.nodes.iter().map(|n| 2 * macs(graph, n)).sum();
    GraphStats { op_counts, parameter_bytes: graph.parameter_bytes(), activation_bytes, peak_activation_bytes, flops }
}

/// Whether the graph output `name` holds class scores: a float vector (`[N]` or `[1, N]`, at
/// least two classes) made by a classifier head (Softmax, LogSoftmax, Gemm, MatMul, a bias Add,
/// or the DequantizeLinear after a quantized one), which `heron run` lists the top five of.
pub fn is_class_scores(graph: &Graph, name: &str) -> bool {
    let Some(&id) = graph.outputs.iter().find(|&&o| graph.value(o).name == name) else { return false };
    let ty = graph.ty(id);
    let classes = ty.shape.last().copied().unwrap_or(0);
    let vector = ty.shape.len() <= 2 && ty.shape.iter().rev().skip(1).all(|&d| d == 1);
    if !ty.dtype.is_float() || !vector || classes < 2 {
        return false;
    }
    let producers = graph.producers();
    producers[id.0].is_some_and(|n| {
        matches!(graph.nodes[n].op.name(), "Softmax" | "LogSoftmax" | "Gemm" | "MatMul" | "Add" | "DequantizeLinear")
    })
}
