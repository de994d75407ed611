//! Operator fusion: groups an anchor op with the chain of elementwise ops that consume its
//! output (activations, clips, bias and residual adds), so the chain is applied at the anchor's
//! store and its intermediate tensors are never materialised.

use crate::DType;
use crate::graph::{Graph, ValueId};
use crate::op::{Activation, BinaryOp, CompareOp, Op, UnaryOp};
use crate::tensor::Tensor;

use super::takes_epilogue;

/// One elementwise step applied to a value at its store.
// Chains are a few steps long; boxing the clip bounds would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Epilogue {
    Unary(UnaryOp),
    LeakyRelu(f32),
    /// An activation with parameters (f32 values only); SiLU (`x · sigmoid(x)`, a Sigmoid and
    /// a Mul reading the same value) fuses as `Swish { alpha: 1 }`.
    Activation(Activation),
    Clip {
        min: Option<Tensor>,
        max: Option<Tensor>,
    },
    /// PReLU, `value < 0 ? value · slope : value`, `slope` broadcast to the value's shape
    /// (ONNX `PRelu` imports as a Less, a Mul and a Where reading the same value).
    PRelu {
        slope: ValueId,
    },
    /// `input < 0 ? value : input`: a PReLU on a value no group fused it into (a graph
    /// input), anchored on its product `input · slope`.
    PReluOfProduct {
        input: ValueId,
    },
    /// `value op other` (or `other op value` when `value_is_lhs` is false), `other`
    /// broadcast to the value's shape.
    Binary {
        op: BinaryOp,
        other: ValueId,
        value_is_lhs: bool,
    },
}

/// A fused operator: the anchor node, its epilogue chain, and the tensors crossing its
/// boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub anchor: usize,
    /// Node indices of the fused consumers, in application order.
    pub fused: Vec<usize>,
    pub epilogue: Vec<Epilogue>,
    /// Distinct input tensors: the anchor's, then the epilogue operands.
    pub inputs: Vec<ValueId>,
    /// Output tensors, with the anchor output slot each one comes from.
    pub outputs: Vec<ValueId>,
    pub output_slots: Vec<usize>,
}

/// The longest epilogue chain fused into one operator. Longer chains continue in a new group:
/// the fused expression (and every recursive walk over it) stays bounded whatever the model.
pub const MAX_EPILOGUE: usize = 32;

/// Partitions the graph's (live) nodes into fused groups, in execution order.
pub fn fuse(graph: &Graph) -> Vec<Group> {
    let producers = graph.producers();
    let uses = graph.use_counts();
    let consumers = graph.consumers();
    let mut is_output = vec![false; graph.values.len()];
    graph.outputs.iter().for_each(|o| is_output[o.0] = true);
    let reads = Reads { graph, consumers: &consumers, uses: &uses, is_output: &is_output };
    let mut absorbed = vec![false; graph.nodes.len()];
    let mut groups = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if absorbed[i] {
            continue;
        }
        let live: Vec<usize> = (0..node.outputs.len()).filter(|&s| uses[node.outputs[s].0] > 0).collect();
        if live.is_empty() {
            continue;
        }
        let mut group = Group {
            anchor: i,
            fused: vec![],
            epilogue: vec![],
            inputs: vec![],
            outputs: live.iter().map(|&s| node.outputs[s]).collect(),
            output_slots: live,
        };
        // A PReLU whose value no anchor took (a graph input): one group on its product, which
        // runs where its Less stood (the slope must exist by then; the product not yet emitted
        // as a group of its own).
        if node.op == Op::Compare(CompareOp::Less)
            && let Some(prelu) = prelu(&reads, &absorbed, node.inputs[0])
            && prelu.nodes[0] == i
            && prelu.nodes[1] > i
            && producers[prelu.slope.0].is_none_or(|p| p < i)
        {
            let [less, product, select] = prelu.nodes;
            let input = node.inputs[0];
            prelu.nodes.iter().for_each(|&n| absorbed[n] = true);
            let inputs = graph.nodes[product].inputs.clone();
            groups.push(Group {
                anchor: product,
                fused: vec![less, select],
                epilogue: vec![Epilogue::PReluOfProduct { input }],
                inputs,
                outputs: vec![graph.nodes[select].outputs[0]],
                output_slots: vec![0],
            });
            continue;
        }
        if takes_epilogue(&node.op) && node.outputs.len() == 1 {
            let mut cur = node.outputs[0];
            loop {
                if is_output[cur.0] || group.epilogue.len() >= MAX_EPILOGUE {
                    break;
                }
                // A function of `cur` written as several nodes: one step, the last node's value.
                let written_out = gated(&reads, &absorbed, cur)
                    .map(|(gate, mul, step)| (step, vec![gate, mul]))
                    .or_else(|| mish(&reads, &absorbed, cur).map(|n| (Epilogue::Unary(UnaryOp::Mish), n.to_vec())))
                    .or_else(|| gelu(&reads, &absorbed, cur).map(|n| (Epilogue::Unary(UnaryOp::Gelu), n.to_vec())));
                if let Some((step, nodes)) = written_out {
                    group.epilogue.push(step);
                    nodes.iter().for_each(|&n| absorbed[n] = true);
                    cur = graph.nodes[*nodes.last().expect("a pattern has nodes")].outputs[0];
                    group.fused.extend(nodes);
                    continue;
                }
                if let Some(prelu) = prelu(&reads, &absorbed, cur) {
                    // The slope must exist before the anchor runs.
                    if producers[prelu.slope.0].is_none_or(|p| p < i) {
                        group.epilogue.push(Epilogue::PRelu { slope: prelu.slope });
                        group.fused.extend(prelu.nodes);
                        prelu.nodes.iter().for_each(|&n| absorbed[n] = true);
                        cur = graph.nodes[prelu.nodes[2]].outputs[0];
                        continue;
                    }
                }
                if uses[cur.0] != 1 {
                    break;
                }
                let c = consumers[cur.0][0];
                let cn = &graph.nodes[c];
                if absorbed[c] || cn.outputs.len() != 1 || graph.ty(cn.outputs[0]) != graph.ty(cur) {
                    break;
                }
                let step = match &cn.op {
                    Op::Unary(u) => Epilogue::Unary(*u),
                    Op::LeakyRelu { alpha } => Epilogue::LeakyRelu(*alpha),
                    Op::Activation(a) if graph.ty(cur).dtype == DType::F32 => Epilogue::Activation(*a),
                    Op::Clip { min, max } => Epilogue::Clip { min: min.clone(), max: max.clone() },
                    Op::Binary(op) => {
                        let (lhs, rhs) = (cn.inputs[0], cn.inputs[1]);
                        let (other, value_is_lhs) = if lhs == cur { (rhs, true) } else { (lhs, false) };
                        // The other operand must exist before the anchor runs.
                        let ready = producers[other.0].is_none_or(|p| p < i);
                        if other == cur || !ready {
                            break;
                        }
                        Epilogue::Binary { op: *op, other, value_is_lhs }
                    }
                    _ => break,
                };
                group.epilogue.push(step);
                group.fused.push(c);
                absorbed[c] = true;
                cur = cn.outputs[0];
            }
            if !group.fused.is_empty() {
                group.outputs = vec![cur];
                group.output_slots = vec![0];
            }
        }
        let mut inputs: Vec<ValueId> = Vec::new();
        let extra = group.epilogue.iter().filter_map(Epilogue::operand);
        let mut seen = std::collections::HashSet::new();
        for v in node.inputs.iter().copied().chain(extra) {
            if seen.insert(v) {
                inputs.push(v);
            }
        }
        group.inputs = inputs;
        groups.push(group);
    }
    groups
}

impl Epilogue {
    /// The tensor the step reads besides the value, if any.
    pub fn operand(&self) -> Option<ValueId> {
        match self {
            Epilogue::Binary { other, .. } => Some(*other),
            Epilogue::PRelu { slope } => Some(*slope),
            Epilogue::PReluOfProduct { input } => Some(*input),
            _ => None,
        }
    }
}

/// Who reads each value, for the patterns below: its consuming nodes, its use count, whether
/// it is a graph output.
#[derive(Clone, Copy)]
struct Reads<'g> {
    graph: &'g Graph,
    consumers: &'g [Vec<usize>],
    uses: &'g [usize],
    is_output: &'g [bool],
}

/// A PReLU on a value: its Less, Mul and Where nodes (in that order) and the slope.
struct PRelu {
    nodes: [usize; 3],
    slope: ValueId,
}

/// PReLU on `v` as the importer writes it: `v`'s only consumers are `Less(v, 0)` (a constant
/// zero), `Mul(v, slope)` (either order) and `Where(less, mul, v)`, the first two read by
/// nothing else, none a graph output or fused already, `v`, the product and the result all f32
/// and shaped alike.
fn prelu(reads: &Reads<'_>, absorbed: &[bool], v: ValueId) -> Option<PRelu> {
    let Reads { graph, consumers, uses, is_output } = *reads;
    if uses[v.0] != 3 || consumers[v.0].len() != 3 || graph.ty(v).dtype != DType::F32 {
        return None;
    }
    let find = |op: &Op| consumers[v.0].iter().copied().find(|&c| graph.nodes[c].op == *op);
    let less = find(&Op::Compare(CompareOp::Less))?;
    let mul = find(&Op::Binary(BinaryOp::Mul))?;
    let select = find(&Op::Where)?;
    let (ln, mn, wn) = (&graph.nodes[less], &graph.nodes[mul], &graph.nodes[select]);
    let zero = graph.constant(*ln.inputs.get(1)?).is_some_and(|t| t.len() == 1 && t.to_f64_vec()[0] == 0.0);
    let slope = match mn.inputs[..] {
        [a, b] if a == v && b != v => b,
        [a, b] if b == v && a != v => a,
        _ => return None,
    };
    let (l, m) = (ln.outputs[0], mn.outputs[0]);
    let only_here = |x: ValueId| uses[x.0] == 1 && !is_output[x.0];
    let ok = ln.inputs[0] == v
        && zero
        && wn.inputs[..] == [l, m, v]
        && only_here(l)
        && only_here(m)
        && graph.ty(m) == graph.ty(v)
        && wn.outputs.len() == 1
        && graph.ty(wn.outputs[0]) == graph.ty(v)
        && [less, mul, select].iter().all(|&n| !absorbed[n]);
    ok.then_some(PRelu { nodes: [less, mul, select], slope })
}

/// `v` times a gate of itself: SiLU (`v · sigmoid(v)`, as `Swish { alpha: 1 }`) or hard-swish
/// (`v · HardSigmoid(v)` with HardSwish's `alpha = 1/6`, `beta = 1/2`): `v`'s only consumers
/// are the gate and a Mul of `v` and the gate (the gate's value read by nothing else, neither a
/// graph output), both f32 and unfused; the two nodes' indices and the fused step.
fn gated(reads: &Reads<'_>, absorbed: &[bool], v: ValueId) -> Option<(usize, usize, Epilogue)> {
    let Reads { graph, consumers, uses, is_output } = *reads;
    if uses[v.0] != 2 || consumers[v.0].len() != 2 || graph.ty(v).dtype != DType::F32 {
        return None;
    }
    let step = |op: &Op| match op {
        Op::Unary(UnaryOp::Sigmoid) => Some(Epilogue::Activation(Activation::Swish { alpha: 1.0 })),
        Op::Activation(Activation::HardSigmoid { alpha, beta }) if *alpha == 1.0 / 6.0 && *beta == 0.5 => {
            Some(Epilogue::Unary(UnaryOp::HardSwish))
        }
        _ => None,
    };
    let (gate, step) = consumers[v.0].iter().find_map(|&c| Some((c, step(&graph.nodes[c].op)?)))?;
    let mul = *consumers[v.0].iter().find(|&&c| c != gate)?;
    let g = graph.nodes[gate].outputs[0];
    let (m, inputs) = (&graph.nodes[mul], &graph.nodes[mul].inputs);
    let reads = inputs.len() == 2 && (inputs[..] == [v, g] || inputs[..] == [g, v]);
    let ok = m.op == Op::Binary(BinaryOp::Mul)
        && reads
        && uses[g.0] == 1
        && !is_output[g.0]
        && !absorbed[gate]
        && !absorbed[mul]
        && m.outputs.len() == 1
        && graph.ty(m.outputs[0]) == graph.ty(v);
    ok.then_some((gate, mul, step))
}

/// Mish on `v` as exporters write it before opset 18's Mish: `Softplus(v)` → `Tanh` →
/// `Mul(v, ·)` (either order), `v`'s only consumers the first and last node, the softplus and
/// tanh read once and no graph output, all f32, shaped like `v` and unfused; the three nodes'
/// indices in that order.
fn mish(reads: &Reads<'_>, absorbed: &[bool], v: ValueId) -> Option<[usize; 3]> {
    let Reads { graph, consumers, uses, is_output } = *reads;
    if uses[v.0] != 2 || consumers[v.0].len() != 2 || graph.ty(v).dtype != DType::F32 {
        return None;
    }
    let softplus = *consumers[v.0].iter().find(|&&c| graph.nodes[c].op == Op::Unary(UnaryOp::Softplus))?;
    let mul = *consumers[v.0].iter().find(|&&c| c != softplus)?;
    let s = graph.nodes[softplus].outputs[0];
    let only_here = |x: ValueId| uses[x.0] == 1 && !is_output[x.0] && graph.ty(x) == graph.ty(v);
    let tanh = *consumers[s.0].first()?;
    let (tn, mn) = (&graph.nodes[tanh], &graph.nodes[mul]);
    let t = *tn.outputs.first()?;
    let ok = only_here(s)
        && tn.op == Op::Unary(UnaryOp::Tanh)
        && tn.inputs[..] == [s]
        && only_here(t)
        && mn.op == Op::Binary(BinaryOp::Mul)
        && (mn.inputs[..] == [v, t] || mn.inputs[..] == [t, v])
        && mn.outputs.len() == 1
        && graph.ty(mn.outputs[0]) == graph.ty(v)
        && [softplus, tanh, mul].iter().all(|&n| !absorbed[n]);
    ok.then_some([softplus, tanh, mul])
}

/// GELU on `v` as exporters write `x · ½ · (1 + erf(x / √2))` (opsets before Gelu's 20):
/// `Div(v, √2)` (or `Mul(v, 1/√2)`) → `Erf` → `Add(·, 1)` → `Mul(v, ·)` → `Mul(·, ½)`, operands
/// of the adds and products in either order, the constants one-element f32 tensors (√2 and
/// its inverse within 1e-6), `v`'s only consumers the first and fourth node, every
/// intermediate read once and no graph output, all f32, shaped like `v` and unfused; the five
/// nodes' indices in that order.
fn gelu(reads: &Reads<'_>, absorbed: &[bool], v: ValueId) -> Option<[usize; 5]> {
    let Reads { graph, consumers, uses, is_output } = *reads;
    if uses[v.0] != 2 || consumers[v.0].len() != 2 || graph.ty(v).dtype != DType::F32 {
        return None;
    }
    let scalar =
        |x: ValueId| graph.constant(x).filter(|t| t.len() == 1 && t.dtype() == DType::F32).map(|t| t.to_f64_vec()[0]);
    let near = |x: ValueId, want: f64| scalar(x).is_some_and(|c| (c - want).abs() <= 1e-6);
    // The other operand of a binary node `n` of kind `op` that reads `x`.
    let other = |n: usize, op: BinaryOp, x: ValueId| -> Option<ValueId> {
        let node = &graph.nodes[n];
        match node.inputs[..] {
            _ if node.op != Op::Binary(op) => None,
            [a, b] if a == x && b != x => Some(b),
            [a, b] if b == x && a != x && op == BinaryOp::Mul => Some(a),
            _ => None,
        }
    };
    // The single consumer of `x`, when `x` is an intermediate read once.
    let next = |x: ValueId| (uses[x.0] == 1 && !is_output[x.0] && consumers[x.0].len() == 1).then(|| consumers[x.0][0]);
    let scaled = |n: usize| {
        other(n, BinaryOp::Div, v).is_some_and(|c| near(c, std::f64::consts::SQRT_2))
            || other(n, BinaryOp::Mul, v).is_some_and(|c| near(c, std::f64::consts::FRAC_1_SQRT_2))
    };
    let (&first, &second) = (consumers[v.0].first()?, consumers[v.0].get(1)?);
    let (div, mul) = if scaled(first) { (first, second) } else { (second, first) };
    if !scaled(div) {
        return None;
    }
    let erf = next(graph.nodes[div].outputs[0])?;
    if graph.nodes[erf].op != Op::Unary(UnaryOp::Erf) {
        return None;
    }
    let e = graph.nodes[erf].outputs[0];
    let add = next(e)?;
    let one = match graph.nodes[add].inputs[..] {
        [a, b] if a == e => b,
        [a, b] if b == e => a,
        _ => return None,
    };
    if graph.nodes[add].op != Op::Binary(BinaryOp::Add) || scalar(one) != Some(1.0) {
        return None;
    }
    let sum = graph.nodes[add].outputs[0];
    if other(mul, BinaryOp::Mul, v) != Some(sum) || next(sum) != Some(mul) {
        return None;
    }
    let product = graph.nodes[mul].outputs[0];
    let half = next(product)?;
    if other(half, BinaryOp::Mul, product).and_then(scalar) != Some(0.5) {
        return None;
    }
    let nodes = [div, erf, add, mul, half];
    let ok = nodes.iter().all(|&n| !absorbed[n] && graph.nodes[n].outputs.len() == 1)
        && nodes.iter().all(|&n| graph.ty(graph.nodes[n].outputs[0]) == graph.ty(v));
    ok.then_some(nodes)
}
