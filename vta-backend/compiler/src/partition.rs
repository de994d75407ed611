//! Automatic partitioning of an integer graph (after `heron_ir::passes::integer_form`) into VTA
//! regions and CPU operators. A region is an anchor with its elementwise tail:
//!
//! - `ConvInteger(x, w) [+ bias] -> Requantize`: any stride, padding (up to 15, VTA's padded
//!   loads) and dilation; channel counts are zero-padded to whole blocks; grouped convolutions
//!   whose groups are whole blocks of channels;
//! - `MatMulInteger(x[M, K], w[K, N]) [+ bias] -> Requantize` (dense layers, Gemm);
//! - `Cast(a) [* 2^i] + Cast(b) [* 2^j] -> Requantize`: a residual add of two int8 tensors.
//!
//! Every operator left on the CPU gets the reason, and a region whose tiles cannot fit the
//! SRAMs stays on the CPU with the tiler's reason: decisions are data, printed by
//! `heron inspect --target vta`.

use std::fmt;

use heron_ir::{BinaryOp, DType, Graph, Op, ValueId};
use heron_vta::HwConfig;

use crate::conv::{ConvShape, plan_conv};
use crate::eltwise::plan_add;

/// `Requantize`'s parameters: round half up by `shift`, clip to `min..=max`, narrow to int8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requant {
    pub shift: i32,
    pub min: i32,
    pub max: i32,
}

/// What a region computes.
#[derive(Clone, Debug, PartialEq)]
pub enum RegionKind {
    /// A convolution (or a dense layer, as a 1x1 convolution over M "images" of 1x1 pixels)
    /// with its bias and requantization.
    Conv { x: ValueId, weight: ValueId, bias: Option<ValueId>, shape: ConvShape, requant: Requant, dense: bool },
    /// `a * 2^shifts[0] + b * 2^shifts[1]`, requantized.
    Add { a: ValueId, b: ValueId, shifts: [u32; 2], requant: Requant },
}

/// One offloaded region.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub name: String,
    /// Graph node indices, in graph order.
    pub nodes: Vec<usize>,
    pub kind: RegionKind,
    /// The int8 value the region produces.
    pub output: ValueId,
    /// Multiply-accumulates of the float operator (0 for adds).
    pub macs: u64,
}

impl Region {
    /// The int8 activations the region reads.
    pub fn inputs(&self) -> Vec<ValueId> {
        match &self.kind {
            RegionKind::Conv { x, .. } => vec![*x],
            RegionKind::Add { a, b, .. } => vec![*a, *b],
        }
    }
}

/// An operator left on the CPU, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOp {
    pub node: usize,
    pub reason: String,
}

/// A graph's split between VTA and the CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    pub regions: Vec<Region>,
    pub cpu: Vec<CpuOp>,
    /// Multiply-accumulates of every Conv/Gemm/MatMul-like node, offloaded or not.
    pub total_macs: u64,
}

impl Partition {
    /// Multiply-accumulates running on VTA.
    pub fn offloaded_macs(&self) -> u64 {
        self.regions.iter().map(|r| r.macs).sum()
    }
}

/// The partition, printable: regions in graph order with their ops, then the CPU operators with
/// their reasons.
pub struct Display<'a> {
    pub partition: &'a Partition,
    pub graph: &'a Graph,
}

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, g) = (self.partition, self.graph);
        let share = if p.total_macs == 0 { 0.0 } else { 100.0 * p.offloaded_macs() as f64 / p.total_macs as f64 };
        writeln!(
            f,
            "partition: {} VTA regions, {} CPU operators; {} of {} multiply-accumulates on VTA ({share:.1}%)",
            p.regions.len(),
            p.cpu.len(),
            p.offloaded_macs(),
            p.total_macs
        )?;
        let mut cpu = p.cpu.iter().peekable();
        for r in &p.regions {
            let first = r.nodes[0];
            while let Some(c) = cpu.next_if(|c| c.node < first) {
                let n = &g.nodes[c.node];
                writeln!(f, "  cpu  {:<28} {:<18} {}", n.name, n.op.name(), c.reason)?;
            }
            let ops: Vec<&str> = r.nodes.iter().map(|&i| g.nodes[i].op.name()).collect();
            let what = match &r.kind {
                RegionKind::Conv { shape: s, dense: true, .. } => format!("dense {}x{} -> {}", s.n, s.c, s.o),
                RegionKind::Conv { shape: s, .. } => format!(
                    "conv {}x{}x{}x{} -> {} k{}x{} s{}x{} groups {}",
                    s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.sh, s.sw, s.groups
                ),
                RegionKind::Add { .. } => "residual add".to_string(),
            };
            writeln!(f, "  vta  {:<28} {:<18} {what} [{}]", r.name, "region", ops.join(", "))?;
        }
        for c in cpu {
            let n = &g.nodes[c.node];
            writeln!(f, "  cpu  {:<28} {:<18} {}", n.name, n.op.name(), c.reason)?;
        }
        Ok(())
    }
}

/// The graph's tables the matchers read.
struct Lookup<'g> {
    graph: &'g Graph,
    producers: Vec<Option<usize>>,
    consumers: Vec<Vec<usize>>,
    is_output: Vec<bool>,
    config: HwConfig,
}

/// Splits `graph` between VTA (configuration `config`) and the CPU.
pub fn partition(graph: &Graph, config: &HwConfig) -> Partition {
    let mut is_output = vec![false; graph.values.len()];
    graph.outputs.iter().for_each(|o| is_output[o.0] = true);
    let lookup =
        Lookup { graph, producers: graph.producers(), consumers: graph.consumers(), is_output, config: *config };
    let mut in_region = vec![false; graph.nodes.len()];
    let mut regions = Vec::new();
    let mut reasons: Vec<Option<String>> = vec![None; graph.nodes.len()];
    let mut total_macs = 0u64;
    for (i, node) in graph.nodes.iter().enumerate() {
        if in_region[i] {
            continue;
        }
        total_macs = total_macs.saturating_add(dot_macs(graph, i));
        let matched = match &node.op {
            Op::ConvInteger(_) | Op::MatMulInteger => Some(lookup.match_dot(i)),
            Op::Binary(BinaryOp::Add) if graph.ty(node.outputs[0]).dtype == DType::I32 => Some(lookup.match_add(i)),
            _ => None,
        };
        match matched {
            Some(Ok(region)) if region.nodes.iter().all(|&n| !in_region[n]) => {
                region.nodes.iter().for_each(|&n| in_region[n] = true);
                regions.push(region);
            }
            Some(Ok(_)) => reasons[i] = Some("its tail is part of another region".into()),
            Some(Err(why)) => {
                if matches!(node.op, Op::ConvInteger(_) | Op::MatMulInteger) {
                    for t in lookup.tail_nodes(i) {
                        reasons[t].get_or_insert_with(|| format!("tail of '{}', which stays on the CPU", node.name));
                    }
                }
                reasons[i].get_or_insert(why);
            }
            None => {}
        }
    }
    let cpu = (0..graph.nodes.len())
        .filter(|&i| !in_region[i])
        .map(|i| CpuOp { node: i, reason: reasons[i].take().unwrap_or_else(|| default_reason(&graph.nodes[i].op)) })
        .collect();
    regions.sort_by_key(|r| r.nodes[0]);
    Partition { regions, cpu, total_macs }
}

fn default_reason(op: &Op) -> String {
    match op {
        Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => "converts between float and int8".into(),
        Op::Conv(_) | Op::Gemm { .. } | Op::MatMul => {
            "float operator (not quantized to the integer form; see `heron quantize`)".into()
        }
        Op::MaxPool { .. } | Op::AveragePool { .. } | Op::GlobalAveragePool => {
            "pooling (Heron has no VTA pooling kernel)".into()
        }
        Op::Requantize { .. } | Op::Cast { .. } | Op::Binary(_) => {
            "not part of an offloadable pattern (an int8 Conv/Gemm/MatMul tail or a residual add)".into()
        }
        other => format!("{} has no VTA lowering", other.name()),
    }
}

/// Multiply-accumulates of a Conv/ConvInteger/Gemm/MatMul/MatMulInteger node (0 for others).
pub fn dot_macs(graph: &Graph, i: usize) -> u64 {
    let n = &graph.nodes[i];
    let out: u64 = graph.ty(n.outputs[0]).shape.iter().map(|&d| d as u64).product();
    let w = n.inputs.get(1).map(|&v| graph.ty(v).shape.clone()).unwrap_or_default();
    match &n.op {
        // Each output element sums over (input channels per group) x kernel.
        Op::Conv(_) | Op::ConvInteger(_) if w.len() >= 2 => {
            out.saturating_mul(w[1..].iter().map(|&d| d as u64).product())
        }
        Op::Gemm { trans_a, .. } => {
            let a = graph.ty(n.inputs[0]).shape.clone();
            let k = if *trans_a { a.first() } else { a.last() };
            out.saturating_mul(k.copied().unwrap_or(1) as u64)
        }
        Op::MatMul | Op::MatMulInteger => {
            let a = graph.ty(n.inputs[0]).shape.clone();
            out.saturating_mul(a.last().copied().unwrap_or(1) as u64)
        }
        _ => 0,
    }
}

/// The all-zero check of an optional zero-point input.
fn zero_point(graph: &Graph, v: Option<&ValueId>) -> Result<(), String> {
    let Some(&v) = v else { return Ok(()) };
    let t = graph.constant(v).ok_or("a zero point computed at run time")?;
    match t.to_i64_vec() {
        Some(z) if z.iter().all(|&z| z == 0) => Ok(()),
        _ => Err("a zero point other than 0".into()),
    }
}

impl Lookup<'_> {
    /// The sole consumer of `v`, if `v` is used once and is not a graph output.
    fn only_consumer(&self, v: ValueId) -> Option<usize> {
        match self.consumers[v.0].as_slice() {
            [c] if !self.is_output[v.0] && self.graph.nodes[*c].inputs.iter().filter(|&&i| i == v).count() == 1 => {
                Some(*c)
            }
            _ => None,
        }
    }

    /// The bias add and requantization following node `i`'s output, as far as they are its
    /// sole consumers.
    fn tail_nodes(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut cur = self.graph.nodes[i].outputs[0];
        while let Some(c) = self.only_consumer(cur) {
            let n = &self.graph.nodes[c];
            if !matches!(n.op, Op::Binary(BinaryOp::Add) | Op::Requantize { .. }) {
                break;
            }
            out.push(c);
            if matches!(n.op, Op::Requantize { .. }) {
                break;
            }
            cur = n.outputs[0];
        }
        out
    }

    /// `value -> [Add(bias)] -> Requantize`: the bias value, the tail's nodes and the
    /// requantization. The bias must be one int32 per output channel, on the channel axis:
    /// `channel_from_end` counts from the last axis (3 for NCHW, 1 for a matrix's columns).
    fn tail(
        &self,
        value: ValueId,
        channels: usize,
        channel_from_end: usize,
    ) -> Result<(Option<ValueId>, Vec<usize>, Requant), String> {
        let g = self.graph;
        let mut nodes = Vec::new();
        let mut cur = value;
        let mut bias = None;
        let mut next = self.only_consumer(cur).ok_or("its accumulator is used elsewhere")?;
        if let Op::Binary(BinaryOp::Add) = g.nodes[next].op {
            let n = &g.nodes[next];
            let other = if n.inputs[0] == cur { n.inputs[1] } else { n.inputs[0] };
            let b = g.constant(other).ok_or("a bias computed at run time")?;
            let s = b.shape();
            let on_channel_axis = s.len() >= channel_from_end
                && s.iter().enumerate().all(|(k, &d)| d == 1 || (k + channel_from_end == s.len() && d == channels));
            if b.dtype() != DType::I32 || !on_channel_axis || g.ty(n.outputs[0]) != g.ty(cur) {
                return Err("a bias that is not one int32 per output channel".into());
            }
            bias = Some(other);
            nodes.push(next);
            cur = n.outputs[0];
            next = self.only_consumer(cur).ok_or("its biased accumulator is used elsewhere")?;
        }
        let Op::Requantize { shift, min, max } = g.nodes[next].op else {
            return Err(format!("its accumulator goes to {} rather than Requantize", g.nodes[next].op.name()));
        };
        nodes.push(next);
        Ok((bias, nodes, Requant { shift, min, max }))
    }

    fn match_dot(&self, i: usize) -> Result<Region, String> {
        let g = self.graph;
        let n = &g.nodes[i];
        let x = n.inputs[0];
        let weight = *n.inputs.get(1).ok_or("no weight")?;
        if g.ty(x).dtype != DType::I8 {
            return Err(format!("{} input (VTA multiplies int8 by int8)", g.ty(x).dtype));
        }
        let w = g.constant(weight).ok_or("a weight computed at run time")?;
        if w.dtype() != DType::I8 {
            return Err(format!("{} weights (VTA multiplies int8 by int8)", w.dtype()));
        }
        zero_point(g, n.inputs.get(2))?;
        zero_point(g, n.inputs.get(3))?;
        let xs = g.ty(x).shape.clone();
        let (shape, dense) = match &n.op {
            Op::ConvInteger(attrs) => {
                let win = &attrs.window;
                if xs.len() != 4 || w.shape().len() != 4 || win.kernel.len() != 2 {
                    return Err("not a 2-D convolution".into());
                }
                let ys = &g.ty(n.outputs[0]).shape;
                let s = ConvShape {
                    n: xs[0],
                    c: xs[1],
                    h: xs[2],
                    w: xs[3],
                    o: w.shape()[0],
                    kh: win.kernel[0],
                    kw: win.kernel[1],
                    sh: win.strides[0],
                    sw: win.strides[1],
                    dh: win.dilations[0],
                    dw: win.dilations[1],
                    pt: win.pads_begin[0],
                    pl: win.pads_begin[1],
                    pb: win.pads_end[0],
                    pr: win.pads_end[1],
                    groups: attrs.group,
                    oh: ys[2],
                    ow: ys[3],
                };
                (s, false)
            }
            _ => {
                if xs.len() != 2 || w.shape().len() != 2 {
                    return Err("a batched matrix product (VTA regions take 2-D operands)".into());
                }
                (ConvShape::dense(xs[0], xs[1], w.shape()[1]), true)
            }
        };
        shape.check_offloadable(&self.config)?;
        let (bias, tail, requant) = self.tail(n.outputs[0], shape.o, if dense { 1 } else { 3 })?;
        let output = g.nodes[*tail.last().expect("Requantize")].outputs[0];
        plan_conv(&shape, &self.config).map_err(|e| e.to_string())?;
        let mut nodes = vec![i];
        nodes.extend(tail);
        Ok(Region {
            name: n.name.clone(),
            nodes,
            kind: RegionKind::Conv { x, weight, bias, shape, requant, dense },
            output,
            macs: dot_macs(g, i),
        })
    }

    /// `Cast(v)` or `Cast(v) * 2^k` producing `t`: (v, k, nodes).
    fn widened(&self, t: ValueId) -> Option<(ValueId, u32, Vec<usize>)> {
        let g = self.graph;
        let p = self.producers[t.0]?;
        let node = &g.nodes[p];
        match &node.op {
            Op::Cast { to: DType::I32 } if g.ty(node.inputs[0]).dtype == DType::I8 => {
                Some((node.inputs[0], 0, vec![p]))
            }
            Op::Binary(BinaryOp::Mul) => {
                let (a, b) = (node.inputs[0], node.inputs[1]);
                let (cast, factor) = if g.constant(b).is_some() { (a, b) } else { (b, a) };
                let f = g.constant(factor)?.to_i64_vec()?;
                let [f] = f.as_slice() else { return None };
                let k = (*f as u64).trailing_zeros();
                if *f <= 0 || *f != 1i64 << k || k > 31 || self.only_consumer(cast) != Some(p) {
                    return None;
                }
                let (v, 0, mut nodes) = self.widened(cast)? else { return None };
                nodes.push(p);
                Some((v, k, nodes))
            }
            _ => None,
        }
    }

    fn match_add(&self, i: usize) -> Result<Region, String> {
        let g = self.graph;
        let n = &g.nodes[i];
        let not_pattern = || "not an add of two widened int8 tensors".to_string();
        let mut nodes = Vec::new();
        let mut parts = Vec::new();
        for &t in &n.inputs {
            if self.only_consumer(t) != Some(i) {
                return Err(not_pattern());
            }
            let (v, k, ns) = self.widened(t).ok_or_else(not_pattern)?;
            nodes.extend(ns);
            parts.push((v, k));
        }
        let [(a, ka), (b, kb)] = parts[..] else { return Err(not_pattern()) };
        if g.ty(a).shape != g.ty(b).shape || g.ty(a).shape != g.ty(n.outputs[0]).shape {
            return Err("an add with broadcasting".into());
        }
        let rank = g.ty(a).shape.len();
        if rank != 2 && rank != 4 {
            return Err(format!("a rank-{rank} add (packed layouts are NCHW or NC)"));
        }
        let next = self.only_consumer(n.outputs[0]).ok_or("its sum is used elsewhere")?;
        let Op::Requantize { shift, min, max } = g.nodes[next].op else {
            return Err("its sum is not requantized".into());
        };
        nodes.push(i);
        nodes.push(next);
        nodes.sort_unstable();
        let requant = Requant { shift, min, max };
        plan_add(&g.ty(a).shape, &self.config).map_err(|e| e.to_string())?;
        Ok(Region {
            name: n.name.clone(),
            nodes,
            kind: RegionKind::Add { a, b, shifts: [ka, kb], requant },
            output: g.nodes[next].outputs[0],
            macs: 0,
        })
    }
}
