//! The integer form of a quantized (QDQ) model: the patterns a QDQ export writes around an
//! operator become integer arithmetic, which the CPU's dot-product kernels run and which is the
//! oracle an accelerator's result must equal bit for bit.
//!
//! `DequantizeLinear(x_q, s_x) -> Conv/Gemm/MatMul(., DequantizeLinear(w_q, s_w),
//! DequantizeLinear(b_q, s_x * s_w)) -> [Relu] -> QuantizeLinear(., s_y)` becomes
//! `ConvInteger/MatMulInteger(x_q, w_q) + b_q -> Requantize(shift = log2(s_y / (s_x * s_w)))`:
//! int8 x int8 products accumulated exactly in int32, the bias added in int32, then one
//! rounding shift and a clip (to 0..=127 when a Relu was fused, else -128..=127). A residual
//! `Add` of two dequantized tensors (then `[Relu ->] QuantizeLinear`) adds them in int32 at the
//! finer of their scales and requantizes; a `MaxPool` between quantizations of one scale runs
//! on the int8 values.
//!
//! Rounding rule: `Requantize` rounds half up (`floor((acc + 2^(k-1)) / 2^k)`), which an add and
//! an arithmetic shift compute (VTA's ALU). ONNX Runtime executes the same QDQ model in float
//! and rounds half to even, and sums in float, so its result may differ by one quantization step
//! on some elements.
//!
//! Only per-tensor scales whose requantization ratio is a power of two (what `heron quantize`
//! writes by default), zero points of 0 and int8 data are converted; every other pattern stays
//! as it was (run in float, exactly as ONNX's QDQ semantics say), and the report says why.

use std::collections::HashMap;

use crate::graph::{Graph, Node, ValueId};
use crate::op::{BinaryOp, Op, QuantAxis, UnaryOp};
use crate::tensor::Tensor;
use crate::{DType, GraphError, NameTable};

/// What [`integer_form`] converted and what it left alone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntegerFormReport {
    /// Operator nodes now running on integers.
    pub converted: Vec<String>,
    /// Conv/Gemm/MatMul nodes with quantized inputs left in float, and why.
    pub left: Vec<(String, String)>,
}

/// A matched pattern: everything needed to write its integer replacement.
struct Pattern {
    /// The QuantizeLinear node that ends the pattern (the replacement goes where it was).
    end: usize,
    /// The operator node's name.
    name: String,
    /// The int8 values the pattern dequantized.
    inputs: Vec<ValueId>,
    kind: Kind,
    /// The requantization shift and the int8 range its output is clipped to (narrower than
    /// -128..=127 when a Relu or Clip was fused).
    shift: i32,
    bounds: (i32, i32),
}

enum Kind {
    /// Conv/Gemm/MatMul of `inputs[0]` with this weight (and bias).
    Dot { op: Op, w_q: Box<Tensor>, bias: Option<Box<Tensor>> },
    /// `inputs[0] * 2^shifts[0] + inputs[1] * 2^shifts[1]` in int32 (both at the finer scale).
    Add { shifts: [u32; 2] },
    /// MaxPool of `inputs[0]`, whose scale the output keeps.
    MaxPool { op: Op },
}

/// The graph with its producer, use-count and consumer tables, which the matchers read.
struct Lookup<'g> {
    graph: &'g Graph,
    producers: Vec<Option<usize>>,
    uses: Vec<usize>,
    consumers: Vec<Vec<usize>>,
    is_output: Vec<bool>,
}

/// Rewrites every convertible QDQ pattern of `graph` into integer operations (the old nodes
/// become dead; run dead-node elimination after).
pub fn integer_form(graph: &mut Graph) -> Result<IntegerFormReport, GraphError> {
    let mut report = IntegerFormReport::default();
    let mut is_output = vec![false; graph.values.len()];
    graph.outputs.iter().for_each(|o| is_output[o.0] = true);
    let lookup = Lookup {
        graph,
        producers: graph.producers(),
        uses: graph.use_counts(),
        consumers: graph.consumers(),
        is_output,
    };
    let producers = &lookup.producers;
    let lookup_is_output = lookup.is_output.clone();
    let mut patterns: HashMap<usize, Pattern> = HashMap::new();
    for n in &graph.nodes {
        if !matches!(n.op, Op::Conv(_) | Op::Gemm { .. } | Op::MatMul | Op::Binary(BinaryOp::Add) | Op::MaxPool { .. })
        {
            continue;
        }
        let dq = |v: ValueId| {
            producers[v.0].map(|p| &graph.nodes[p]).filter(|p| matches!(p.op, Op::DequantizeLinear { .. }))
        };
        if dq(n.inputs[0]).is_none() {
            continue;
        }
        if n.inputs.iter().any(|&v| dq(v).is_none()) {
            report.left.push((n.name.clone(), "an input that is not a DequantizeLinear output".into()));
            continue;
        }
        let matched = match n.op {
            Op::Binary(_) => lookup.match_add(n),
            Op::MaxPool { .. } => lookup.match_max_pool(n),
            _ => lookup.match_dot(n),
        };
        match matched {
            Ok(p) => {
                patterns.insert(p.end, p);
            }
            Err(why) => report.left.push((n.name.clone(), why)),
        }
    }
    // One table for every made-up name (building one per name would be quadratic).
    let mut names = NameTable::new(graph);
    let old = std::mem::take(&mut graph.nodes);
    let mut renamed: HashMap<ValueId, ValueId> = HashMap::new();
    for (i, mut node) in old.into_iter().enumerate() {
        for v in node.inputs.iter_mut() {
            if let Some(&r) = renamed.get(v) {
                *v = r;
            }
        }
        let end_output = node.outputs[0];
        graph.nodes.push(node);
        if let Some(mut p) = patterns.remove(&i) {
            // An input may itself be the output of a pattern rewritten above.
            for v in p.inputs.iter_mut() {
                *v = renamed.get(v).copied().unwrap_or(*v);
            }
            let y = write_integer(graph, &mut names, &p)?;
            if lookup_is_output[end_output.0] {
                // Graph outputs keep their names: the replacement takes it over.
                let fresh = names.fresh(&format!("{}_qdq", graph.values[end_output.0].name));
                let name = std::mem::replace(&mut graph.values[end_output.0].name, fresh);
                graph.values[y.0].name = name;
            }
            renamed.insert(end_output, y);
            report.converted.push(p.name);
        }
    }
    for o in graph.outputs.iter_mut() {
        if let Some(&r) = renamed.get(o) {
            *o = r;
        }
    }
    Ok(report)
}

/// Per-tensor `(scale, zero point)` of a Quantize/DequantizeLinear node whose parameters are
/// constants, when the zero point is 0.
fn params(graph: &Graph, node: &Node) -> Result<f32, String> {
    if !matches!(
        node.op,
        Op::QuantizeLinear { axis: QuantAxis::PerTensor } | Op::DequantizeLinear { axis: QuantAxis::PerTensor }
    ) {
        return Err(format!("'{}' is not per-tensor", node.name));
    }
    let (Some(scale), Some(zero)) = (graph.constant(node.inputs[1]), graph.constant(node.inputs[2])) else {
        return Err(format!("'{}' has scales computed at run time", node.name));
    };
    if zero.to_i64_vec().is_none_or(|z| z.iter().any(|&v| v != 0)) {
        return Err(format!("'{}' has a zero point other than 0", node.name));
    }
    let s = scale.to_f64_vec()[0] as f32;
    if !(s.is_finite() && s > 0.0) {
        return Err(format!("'{}' has scale {s}", node.name));
    }
    Ok(s)
}

impl Lookup<'_> {
    fn match_dot(&self, n: &Node) -> Result<Pattern, String> {
        let graph = self.graph;
        let dq = |k: usize| &graph.nodes[self.producers[n.inputs[k].0].expect("checked by the caller")];
        let (x_q, s_x) = self.dequantized_input(n, 0)?;
        let dq_w = dq(1);
        let s_w = params(graph, dq_w)?;
        let Some(w_q) = graph.constant(dq_w.inputs[0]).cloned() else {
            return Err("the weight is not a constant".into());
        };
        if w_q.dtype() != DType::I8 {
            return Err("the weight is not int8".into());
        }
        if let Op::Gemm { alpha, beta, trans_a, .. } = n.op
            && (alpha != 1.0 || beta != 1.0 || trans_a)
        {
            return Err("Gemm with alpha, beta or transA".into());
        }
        let (w_q, channels) = match &n.op {
            Op::Conv(_) if w_q.shape().len() == 4 => (w_q.clone(), w_q.shape()[0]),
            Op::Gemm { trans_b: true, .. } if w_q.shape().len() == 2 => {
                (transpose_2d(&w_q).ok_or("weight transpose")?, w_q.shape()[0])
            }
            Op::Gemm { trans_b: false, .. } | Op::MatMul
                if w_q.shape().len() == 2 && graph.ty(x_q).shape.len() == 2 =>
            {
                (w_q.clone(), w_q.shape()[1])
            }
            _ => return Err("operand ranks the integer form does not cover".into()),
        };
        let bias = match n.inputs.get(2) {
            None => None,
            Some(_) => {
                let dq_b = dq(2);
                let s_b = params(graph, dq_b)?;
                if s_b != s_x * s_w {
                    return Err(format!("bias scale {s_b} is not input scale x weight scale {}", s_x * s_w));
                }
                match graph.constant(dq_b.inputs[0]) {
                    Some(b) if b.dtype() == DType::I32 && b.shape() == [channels] => Some(b.clone()),
                    _ => return Err("the bias is not an int32 constant with one value per output channel".into()),
                }
            }
        };
        let (end, bounds, s_y) = self.quantized_output(n)?;
        let shift = power_of_two(f64::from(s_y) / (f64::from(s_x) * f64::from(s_w)), 31)?;
        let kind = Kind::Dot { op: n.op.clone(), w_q: Box::new(w_q), bias: bias.map(Box::new) };
        Ok(Pattern { end, name: n.name.clone(), inputs: vec![x_q], kind, shift, bounds })
    }

    /// The chain after `n`: `[Relu | Clip ->] QuantizeLinear` to int8, each output used once:
    /// the QuantizeLinear node, the int8 range the output is clipped to, the output scale. A
    /// Clip is exact in the integer form when its bounds are whole quantization steps (then
    /// clipping commutes with rounding).
    fn quantized_output(&self, n: &Node) -> Result<(usize, (i32, i32), f32), String> {
        let graph = self.graph;
        let only = |v: ValueId| -> Option<usize> {
            (self.uses[v.0] == 1 && !self.is_output[v.0]).then(|| self.consumers[v.0].first().copied()).flatten()
        };
        let mut cur = only(n.outputs[0]).ok_or("its output is used more than once")?;
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        let activation = match &graph.nodes[cur].op {
            Op::Unary(UnaryOp::Relu) => {
                lo = 0.0;
                true
            }
            Op::Clip { min, max } => {
                let scalar =
                    |t: &Option<Tensor>| t.as_ref().map(|t| t.to_f64_vec().first().copied().unwrap_or(f64::NAN));
                lo = scalar(min).unwrap_or(lo);
                hi = scalar(max).unwrap_or(hi);
                true
            }
            _ => false,
        };
        if activation {
            let name = graph.nodes[cur].op.name();
            cur = only(graph.nodes[cur].outputs[0]).ok_or(format!("its {name}'s output is used more than once"))?;
        }
        let q = &graph.nodes[cur];
        if !matches!(q.op, Op::QuantizeLinear { .. }) {
            return Err(format!("its output goes to {} rather than QuantizeLinear", q.op.name()));
        }
        let s_y = params(graph, q)?;
        if graph.ty(q.outputs[0]).dtype != DType::I8 {
            return Err("the output is not quantized to int8".into());
        }
        let step = |bound: f64, default: i32| -> Result<i32, String> {
            if bound.is_infinite() {
                return Ok(default);
            }
            let steps = bound / f64::from(s_y);
            if steps.is_nan() || steps.fract() != 0.0 {
                return Err(format!("its clip bound {bound} is not a whole number of steps of {s_y}"));
            }
            Ok(steps.clamp(-128.0, 127.0) as i32)
        };
        let bounds = (step(lo, -128)?, step(hi, 127)?);
        if bounds.0 > bounds.1 {
            return Err("its clip bounds are empty".into());
        }
        Ok((cur, bounds, s_y))
    }

    /// The int8 input and scale of the DequantizeLinear feeding input `k` of `n`.
    fn dequantized_input(&self, n: &Node, k: usize) -> Result<(ValueId, f32), String> {
        let graph = self.graph;
        let dq = &graph.nodes[self.producers[n.inputs[k].0].expect("checked by the caller")];
        let s = params(graph, dq)?;
        if graph.ty(dq.inputs[0]).dtype != DType::I8 {
            return Err("data is not int8".into());
        }
        Ok((dq.inputs[0], s))
    }

    /// A residual add of two quantized tensors: both brought to the finer scale by left shifts
    /// (exact in int32), added, requantized.
    fn match_add(&self, n: &Node) -> Result<Pattern, String> {
        let (a, s_a) = self.dequantized_input(n, 0)?;
        let (b, s_b) = self.dequantized_input(n, 1)?;
        let fine = s_a.min(s_b);
        // int8 values shifted left by up to 23 bits, summed: within int32.
        let shifts = [power_of_two(f64::from(s_a / fine), 23)?, power_of_two(f64::from(s_b / fine), 23)?];
        let (end, bounds, s_y) = self.quantized_output(n)?;
        let shift = power_of_two(f64::from(s_y) / f64::from(fine), 31)?;
        let kind = Kind::Add { shifts: shifts.map(|k| k as u32) };
        Ok(Pattern { end, name: n.name.clone(), inputs: vec![a, b], kind, shift, bounds })
    }

    /// A max pool between quantizations of the same scale runs on the int8 values (the maximum
    /// commutes with a positive scale).
    fn match_max_pool(&self, n: &Node) -> Result<Pattern, String> {
        let (x, s_x) = self.dequantized_input(n, 0)?;
        if n.outputs.get(1).is_some_and(|i| self.uses[i.0] > 0) {
            return Err("its indices are used".into());
        }
        let (end, bounds, s_y) = self.quantized_output(n)?;
        if bounds != (-128, 127) || s_y != s_x {
            return Err("a Relu, a Clip or a different output scale after it".into());
        }
        Ok(Pattern {
            end,
            name: n.name.clone(),
            inputs: vec![x],
            kind: Kind::MaxPool { op: n.op.clone() },
            shift: 0,
            bounds,
        })
    }
}

/// `log2(ratio)` when it is an integer within `-limit..=limit`.
fn power_of_two(ratio: f64, limit: i32) -> Result<i32, String> {
    let k = ratio.log2();
    if k.fract() != 0.0 || k.abs() > f64::from(limit) {
        return Err(format!("scale ratio {ratio} is not a power of two within 2^-{limit}..2^{limit}"));
    }
    Ok(k as i32)
}

fn transpose_2d(t: &Tensor) -> Option<Tensor> {
    let a = t.as_array::<i8>()?;
    let (r, c) = (t.shape()[0], t.shape()[1]);
    let data: Vec<i8> = (0..c * r).map(|k| a[[k % r, k / r].as_slice()]).collect();
    Tensor::from_vec(&[c, r], data).ok()
}

/// Appends the integer nodes of `p` and returns the int8 value that replaces the pattern's
/// QuantizeLinear output.
fn write_integer(graph: &mut Graph, names: &mut NameTable, p: &Pattern) -> Result<ValueId, GraphError> {
    let name = p.name.as_str();
    let acc = match &p.kind {
        Kind::MaxPool { op } => {
            let y_name = names.fresh(&format!("{name}_int8"));
            return graph.add_op(y_name, op.clone(), &[p.inputs[0]]);
        }
        Kind::Dot { op, w_q, bias } => {
            let mut zero = |g: &mut Graph| {
                let n = names.fresh(&format!("{name}_zero_point"));
                g.add_constant(n, Tensor::from_vec::<i8>(&[], vec![0]).expect("scalar"))
            };
            let (zx, zw) = (zero(graph), zero(graph));
            let w_name = names.fresh(&format!("{name}_weight_int8"));
            let w = graph.add_constant(w_name, (**w_q).clone());
            let (op, bias_shape) = match op {
                Op::Conv(attrs) => (Op::ConvInteger(attrs.clone()), vec![w_q.shape()[0], 1, 1]),
                _ => (Op::MatMulInteger, vec![w_q.shape()[1]]),
            };
            let acc_name = names.fresh(&format!("{name}_acc"));
            let mut acc = graph.add_op(acc_name, op, &[p.inputs[0], w, zx, zw])?;
            if let Some(b) = bias {
                let b = b.reshape(&bias_shape).map_err(|message| GraphError::Shape {
                    node: name.to_string(),
                    op: "Requantize".into(),
                    message,
                })?;
                let b_name = names.fresh(&format!("{name}_bias_int32"));
                let b = graph.add_constant(b_name, b);
                let sum_name = names.fresh(&format!("{name}_acc_bias"));
                acc = graph.add_op(sum_name, Op::Binary(BinaryOp::Add), &[acc, b])?;
            }
            acc
        }
        Kind::Add { shifts } => {
            let mut terms = Vec::with_capacity(2);
            for (&v, &k) in p.inputs.iter().zip(shifts) {
                let wide_name = names.fresh(&format!("{name}_int32"));
                let mut t = graph.add_op(wide_name, Op::Cast { to: DType::I32 }, &[v])?;
                if k > 0 {
                    let f_name = names.fresh(&format!("{name}_align"));
                    let f = graph.add_constant(f_name, Tensor::from_vec::<i32>(&[], vec![1 << k]).expect("scalar"));
                    let s_name = names.fresh(&format!("{name}_aligned"));
                    t = graph.add_op(s_name, Op::Binary(BinaryOp::Mul), &[t, f])?;
                }
                terms.push(t);
            }
            let sum_name = names.fresh(&format!("{name}_sum"));
            graph.add_op(sum_name, Op::Binary(BinaryOp::Add), &terms)?
        }
    };
    let (min, max) = p.bounds;
    let y_name = names.fresh(&format!("{name}_int8"));
    graph.add_op(y_name, Op::Requantize { shift: p.shift, min, max }, &[acc])
}
