//! Post-training quantization: a float ONNX model in, a standard QDQ ONNX model out
//! (QuantizeLinear/DequantizeLinear pairs, int8, symmetric, zero points 0), which ONNX Runtime
//! and Heron both load.
//!
//! What is quantized: every Conv, Gemm and MatMul whose weight is an initializer (its input
//! activation, its weight — per tensor or per output channel — and its bias as int32 with scale
//! `s_input * s_weight`), and the activations of Add, MaxPool and GlobalAveragePool whose inputs
//! are all quantized. An anchor's output is quantized after the Relu or Clip that is its only consumer,
//! so `conv -> relu -> requantize` stays one integer pattern. `--skip NODE` leaves a node float.
//!
//! Batch normalizations right after a Conv are folded into it first (as TVM's quantization
//! does), so their scale is quantized with the weights.
//!
//! Scales: activation ranges come from running the float model on calibration inputs (the
//! largest |x|, or a percentile of |x|), or from one global scale (TVM's scheme: every
//! activation has step `S / 128`). With power-of-two scales (the default) every scale is
//! `2^k`, so every requantization ratio is a power of two: add-round, shift and clip, as VTA's
//! ALU runs it. Quantized values are clipped to -127..=127 (symmetric, as TVM does).

use std::collections::{HashMap, HashSet};

use prost::Message;

use crate::graph::ValueId;
use crate::interp::{InterpError, run_observed};
use crate::onnx::proto::{AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, attribute_type};
use crate::onnx::{ImportError, ImportOptions, import_model, tensor_from_proto, tensor_to_proto};
use crate::tensor::Tensor;
use crate::{DType, Graph};

/// How an activation's range is taken from the calibration data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Calibration {
    /// The largest |x| seen.
    MaxAbs,
    /// This percentile (in `(0, 100]`) of all |x| seen, which ignores rare outliers.
    Percentile(f64),
}

/// How scales are rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleKind {
    /// The smallest power of two that keeps the range within +-127 steps (VTA-friendly).
    Pow2,
    /// Exactly `range / 127` (for CPU-only use).
    Float,
}

#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub calibration: Calibration,
    /// Weight scales per output channel instead of per tensor (needs opset 13 or newer).
    pub per_channel: bool,
    /// Names of nodes to leave in float.
    pub skip: Vec<String>,
    /// Every activation's step is `global_scale / 128` (no calibration data needed).
    pub global_scale: Option<f32>,
    pub scales: ScaleKind,
}

impl Default for QuantizeOptions {
    fn default() -> QuantizeOptions {
        QuantizeOptions {
            calibration: Calibration::MaxAbs,
            per_channel: false,
            skip: Vec::new(),
            global_scale: None,
            scales: ScaleKind::Pow2,
        }
    }
}

/// What was quantized.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantizeReport {
    /// Conv/Gemm/MatMul nodes with quantized inputs and weights.
    pub anchors: Vec<String>,
    /// Activations given a QuantizeLinear/DequantizeLinear pair, with their scales.
    pub activations: Vec<(String, f32)>,
    /// Nodes left in float, with the reason.
    pub left_float: Vec<(String, String)>,
    /// BatchNormalizations folded into the Conv before them.
    pub folded_batch_norms: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("cannot decode the model: {0}")]
    Decode(String),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error("calibration: {0}")]
    Calibration(String),
    #[error("running the float model on calibration input {index}: {error}")]
    Run { index: usize, error: InterpError },
    #[error("{0}")]
    Unsupported(String),
}

/// Quantizes the float ONNX model `bytes`, calibrating activations on `calibration` (each entry
/// one set of the model's inputs, in input order) unless `options.global_scale` is given.
pub fn quantize_model(
    bytes: &[u8],
    calibration: &[Vec<Tensor>],
    options: &QuantizeOptions,
) -> Result<(Vec<u8>, QuantizeReport), QuantizeError> {
    let mut model = ModelProto::decode(bytes).map_err(|e| QuantizeError::Decode(e.to_string()))?;
    let opset =
        model.opset_import.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map_or(1, |o| o.version);
    if opset < 10 {
        return Err(QuantizeError::Unsupported(format!("opset {opset}: QuantizeLinear needs opset 10 or newer")));
    }
    if options.per_channel && opset < 13 {
        return Err(QuantizeError::Unsupported(format!("opset {opset}: per-channel scales need opset 13 or newer")));
    }
    if let Calibration::Percentile(p) = options.calibration
        && !(p > 0.0 && p <= 100.0)
    {
        return Err(QuantizeError::Calibration(format!("percentile {p} is not in (0, 100]")));
    }
    let Some(g) = model.graph.as_mut() else { return Err(QuantizeError::Decode("the model has no graph".into())) };
    bypass_identities_of_initializers(g);
    let folded_batch_norms = fold_batch_norms(g)?;
    // Calibration runs the model as it will be quantized (batch norms folded).
    let graph = import_model(&model.encode_to_vec(), &ImportOptions::default())?;
    let Some(g) = model.graph.as_mut() else { return Err(QuantizeError::Decode("the model has no graph".into())) };
    let plan = Plan::of(&g.node, &g.initializer, &graph, options);
    let step = match options.global_scale {
        Some(s) => Some(global_step(s, options.scales)?),
        None if calibration.is_empty() => {
            return Err(QuantizeError::Calibration(
                "no calibration data: give --calibration FILE.npy (one per model input) or --global-scale S".into(),
            ));
        }
        None => None,
    };
    let ranges = match step {
        Some(_) => HashMap::new(),
        None => calibrate(&graph, calibration, &plan.activations, options.calibration)?,
    };
    let mut scales: HashMap<String, f32> = HashMap::new();
    for name in &plan.activations {
        let s = match step {
            Some(s) => s,
            None => scale_for(ranges.get(name).copied().unwrap_or(0.0), options.scales),
        };
        scales.insert(name.clone(), s);
    }
    let mut names: HashSet<String> = g.node.iter().flat_map(|n| n.input.iter().chain(&n.output)).cloned().collect();
    names.extend(g.initializer.iter().map(|t| t.name.clone()));
    names.extend(g.input.iter().chain(&g.output).map(|v| v.name.clone()));
    let mut fresh = |base: String| -> String {
        let mut name = base.clone();
        let mut k = 1;
        while !names.insert(name.clone()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        name
    };
    let mut report =
        QuantizeReport { left_float: plan.left_float.clone(), folded_batch_norms, ..QuantizeReport::default() };
    // Activation pairs: X -> QuantizeLinear -> DequantizeLinear -> X_dequantized.
    let mut dequantized: HashMap<String, String> = HashMap::new();
    let mut after: HashMap<String, Vec<NodeProto>> = HashMap::new();
    let mut new_inits: Vec<TensorProto> = Vec::new();
    // A graph output keeps its name on the DequantizeLinear; its producer writes `<name>_float`.
    let graph_outputs: HashSet<String> = g.output.iter().map(|v| v.name.clone()).collect();
    let mut float_name: HashMap<String, String> = HashMap::new();
    for name in &plan.activations {
        let s = scales[name];
        report.activations.push((name.clone(), s));
        let (scale, zero) = (fresh(format!("{name}_scale")), fresh(format!("{name}_zero_point")));
        new_inits.push(tensor_to_proto(&scale, &Tensor::from_vec::<f32>(&[], vec![s]).expect("scalar")));
        new_inits.push(tensor_to_proto(&zero, &Tensor::from_vec::<i8>(&[], vec![0]).expect("scalar")));
        let (input, dq) = if graph_outputs.contains(name) {
            let float = fresh(format!("{name}_float"));
            float_name.insert(name.clone(), float.clone());
            (float, name.clone())
        } else {
            (name.clone(), fresh(format!("{name}_dequantized")))
        };
        let q = fresh(format!("{name}_quantized"));
        let nodes = vec![
            node("QuantizeLinear", fresh(format!("{name}_QuantizeLinear")), &[&input, &scale, &zero], &q, vec![]),
            node("DequantizeLinear", fresh(format!("{name}_DequantizeLinear")), &[&q, &scale, &zero], &dq, vec![]),
        ];
        after.entry(name.clone()).or_default().extend(nodes);
        if dq != *name {
            dequantized.insert(name.clone(), dq);
        }
    }
    let initializers: HashMap<String, usize> =
        g.initializer.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
    let mut nodes_out: Vec<NodeProto> = Vec::with_capacity(g.node.len() * 2);
    // Pairs for graph inputs come first.
    for v in &g.input {
        if let Some(pair) = after.remove(&v.name) {
            nodes_out.extend(pair);
        }
    }
    let anchors: HashMap<&str, &Anchor> = plan.anchors.iter().map(|a| (a.name.as_str(), a)).collect();
    for mut n in std::mem::take(&mut g.node) {
        if let Some(anchor) = anchors.get(n.name.as_str()) {
            let s_x = scales[&n.input[0]];
            let weight = tensor_from_proto(&g.initializer[initializers[&n.input[1]]])?;
            let (wq, w_scales) = quantize_weight(&weight, anchor.channel_axis, options)?;
            let w_name = fresh(format!("{}_quantized", n.input[1]));
            let ws_name = fresh(format!("{}_scale", n.input[1]));
            let wz_name = fresh(format!("{}_zero_point", n.input[1]));
            let wdq = fresh(format!("{}_dequantized", n.input[1]));
            let channels = w_scales.len();
            let shape: &[usize] = if options.per_channel { &[channels] } else { &[] };
            new_inits.push(tensor_to_proto(&w_name, &wq));
            new_inits.push(tensor_to_proto(&ws_name, &Tensor::from_vec(shape, w_scales.clone()).expect("scales")));
            new_inits
                .push(tensor_to_proto(&wz_name, &Tensor::from_vec::<i8>(shape, vec![0; channels]).expect("zeros")));
            let axis = if options.per_channel { vec![int_attr("axis", anchor.channel_axis as i64)] } else { vec![] };
            nodes_out.push(node(
                "DequantizeLinear",
                fresh(format!("{}_DequantizeLinear", n.input[1])),
                &[&w_name, &ws_name, &wz_name],
                &wdq,
                axis.clone(),
            ));
            n.input[1] = wdq;
            if let Some(bias_name) = n.input.get(2).filter(|b| anchor.bias && initializers.contains_key(*b)).cloned() {
                let bias = tensor_from_proto(&g.initializer[initializers[&bias_name]])?;
                let b_scales: Vec<f32> = w_scales.iter().map(|&s| s * s_x).collect();
                let bq = quantize_bias(&bias, &b_scales)?;
                let (bq_name, bs_name, bdq) = (
                    fresh(format!("{bias_name}_quantized")),
                    fresh(format!("{bias_name}_scale")),
                    fresh(format!("{bias_name}_dequantized")),
                );
                new_inits.push(tensor_to_proto(&bq_name, &bq));
                new_inits.push(tensor_to_proto(&bs_name, &Tensor::from_vec(shape, b_scales).expect("scales")));
                nodes_out.push(node(
                    "DequantizeLinear",
                    fresh(format!("{bias_name}_DequantizeLinear")),
                    &[&bq_name, &bs_name],
                    &bdq,
                    if options.per_channel { vec![int_attr("axis", 0)] } else { vec![] },
                ));
                n.input[2] = bdq;
            }
            report.anchors.push(n.name.clone());
        }
        for i in n.input.iter_mut() {
            if let Some(dq) = dequantized.get(i) {
                *i = dq.clone();
            }
        }
        let outputs = n.output.clone();
        for o in n.output.iter_mut() {
            if let Some(f) = float_name.get(o) {
                *o = f.clone();
            }
        }
        nodes_out.push(n);
        for o in outputs {
            if let Some(pair) = after.remove(&o) {
                nodes_out.extend(pair);
            }
        }
    }
    // Float weights and biases nothing reads any more are dropped.
    let read: HashSet<&str> = nodes_out.iter().flat_map(|n| n.input.iter().map(String::as_str)).collect();
    let outputs: HashSet<&str> = g.output.iter().map(|v| v.name.as_str()).collect();
    g.initializer.retain(|t| read.contains(t.name.as_str()) || outputs.contains(t.name.as_str()));
    g.initializer.extend(new_inits);
    g.node = nodes_out;
    Ok((model.encode_to_vec(), report))
}

/// Exporters share weights through `Identity` nodes (torchvision's biases): readers of such an
/// Identity read its initializer directly, and the Identity (unless a graph output) goes.
fn bypass_identities_of_initializers(g: &mut GraphProto) {
    let mut alias: HashMap<String, String> = HashMap::new();
    let initializers: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    let outputs: HashSet<&str> = g.output.iter().map(|v| v.name.as_str()).collect();
    for n in &g.node {
        if n.op_type == "Identity"
            && n.input.len() == 1
            && n.output.len() == 1
            && !outputs.contains(n.output[0].as_str())
        {
            let source = alias.get(&n.input[0]).cloned().unwrap_or_else(|| n.input[0].clone());
            if initializers.contains(source.as_str()) {
                alias.insert(n.output[0].clone(), source);
            }
        }
    }
    g.node.retain(|n| !(n.op_type == "Identity" && n.output.len() == 1 && alias.contains_key(&n.output[0])));
    for n in &mut g.node {
        for i in n.input.iter_mut() {
            if let Some(a) = alias.get(i) {
                *i = a.clone();
            }
        }
    }
}

/// Folds every BatchNormalization (inference form, initializer parameters) that alone consumes
/// a Conv's output into that Conv, as TVM's quantization does first: the batch norm's scale
/// lands in the int8 weights and its shift in the int32 bias, so `Conv -> BN -> Relu/Clip`
/// quantizes as one pattern. New initializers are written (shared ones stay as they were).
/// Returns how many were folded.
fn fold_batch_norms(g: &mut GraphProto) -> Result<usize, QuantizeError> {
    let mut uses: HashMap<String, usize> = HashMap::new();
    for name in g.node.iter().flat_map(|n| n.input.iter()).chain(g.output.iter().map(|v| &v.name)) {
        *uses.entry(name.clone()).or_default() += 1;
    }
    let producer: HashMap<String, usize> =
        g.node.iter().enumerate().flat_map(|(k, n)| n.output.iter().map(move |o| (o.clone(), k))).collect();
    let init: HashMap<String, usize> = g.initializer.iter().enumerate().map(|(k, t)| (t.name.clone(), k)).collect();
    let floats = |name: &str| -> Option<Vec<f32>> {
        let t = tensor_from_proto(&g.initializer[*init.get(name)?]).ok()?;
        (t.dtype() == DType::F32).then(|| t.to_f64_vec().into_iter().map(|v| v as f32).collect())
    };
    let mut folds = Vec::new();
    for (b, bn) in g.node.iter().enumerate() {
        let single_output = bn.output.iter().skip(1).all(|o| o.is_empty() || !uses.contains_key(o));
        if bn.op_type != "BatchNormalization" || bn.input.len() != 5 || !single_output {
            continue;
        }
        let Some(&c) = producer.get(&bn.input[0]) else { continue };
        let conv = &g.node[c];
        if conv.op_type != "Conv" || uses.get(&bn.input[0]) != Some(&1) || conv.input.len() < 2 {
            continue;
        }
        let Some(w) = init.get(&conv.input[1]).map(|&k| &g.initializer[k]) else { continue };
        let Some(weight) = floats(&conv.input[1]) else { continue };
        let params: Option<Vec<Vec<f32>>> = bn.input[1..].iter().map(|n| floats(n)).collect();
        let channels = w.dims.first().copied().unwrap_or(0) as usize;
        let Some(params) = params.filter(|p| channels > 0 && p.iter().all(|v| v.len() == channels)) else { continue };
        let bias = match conv.input.get(2).filter(|b| !b.is_empty()) {
            Some(b) => match floats(b) {
                Some(v) if v.len() == channels => v,
                _ => continue,
            },
            None => vec![0.0; channels],
        };
        let eps = bn.attribute.iter().find(|a| a.name == "epsilon").map_or(1e-5, |a| a.f);
        let (scale, shift, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
        let k: Vec<f32> = (0..channels).map(|o| scale[o] / (var[o] + eps).sqrt()).collect();
        let per = weight.len() / channels;
        let new_w: Vec<f32> = weight.iter().enumerate().map(|(i, &v)| v * k[i / per]).collect();
        let new_b: Vec<f32> = (0..channels).map(|o| (bias[o] - mean[o]) * k[o] + shift[o]).collect();
        let dims: Vec<usize> = w.dims.iter().map(|&d| d as usize).collect();
        let weight = Tensor::from_vec(&dims, new_w).map_err(QuantizeError::Unsupported)?;
        let bias = Tensor::from_vec(&[channels], new_b).map_err(QuantizeError::Unsupported)?;
        folds.push((c, b, weight, bias));
    }
    let names: HashSet<String> = g.initializer.iter().map(|t| t.name.clone()).chain(uses.keys().cloned()).collect();
    let mut removed = HashSet::new();
    for (c, b, weight, bias) in &folds {
        let base = if g.node[*c].name.is_empty() { g.node[*c].output[0].clone() } else { g.node[*c].name.clone() };
        let fresh = |suffix: &str| {
            let mut name = format!("{base}_{suffix}");
            while names.contains(&name) {
                name.push('_');
            }
            name
        };
        let (w_name, b_name) = (fresh("bn_folded_weight"), fresh("bn_folded_bias"));
        g.initializer.push(tensor_to_proto(&w_name, weight));
        g.initializer.push(tensor_to_proto(&b_name, bias));
        let out = g.node[*b].output[0].clone();
        let conv = &mut g.node[*c];
        conv.input[1] = w_name;
        conv.input.truncate(2);
        conv.input.push(b_name);
        conv.output[0] = out;
        removed.insert(*b);
    }
    let mut k = 0;
    g.node.retain(|_| {
        k += 1;
        !removed.contains(&(k - 1))
    });
    Ok(folds.len())
}

/// A Conv/Gemm/MatMul to quantize.
struct Anchor {
    name: String,
    /// The weight axis of the output channels.
    channel_axis: usize,
    /// Whether input 2 is a per-output-channel bias to store as int32.
    bias: bool,
}

/// Which nodes and activations get quantized.
struct Plan {
    anchors: Vec<Anchor>,
    /// Activation names, in the order first marked.
    activations: Vec<String>,
    left_float: Vec<(String, String)>,
}

impl Plan {
    fn of(nodes: &[NodeProto], initializers: &[TensorProto], graph: &Graph, options: &QuantizeOptions) -> Plan {
        let float_init: HashMap<&str, &TensorProto> = initializers
            .iter()
            .filter(|t| t.data_type == DType::F32.onnx_code())
            .map(|t| (t.name.as_str(), t))
            .collect();
        let mut consumers: HashMap<&str, Vec<&NodeProto>> = HashMap::new();
        for n in nodes {
            for i in &n.input {
                consumers.entry(i.as_str()).or_default().push(n);
            }
        }
        let float_values: HashSet<&str> =
            graph.values.iter().filter(|v| v.ty.dtype == DType::F32).map(|v| v.name.as_str()).collect();
        let mut plan = Plan { anchors: Vec::new(), activations: Vec::new(), left_float: Vec::new() };
        let mut marked: HashSet<String> = HashSet::new();
        let mark = |plan: &mut Plan, marked: &mut HashSet<String>, name: &str| {
            if float_values.contains(name) && !float_init.contains_key(name) && marked.insert(name.to_string()) {
                plan.activations.push(name.to_string());
            }
        };
        // An anchor's or an Add's output, after the Relu or Clip (ReLU6) that is its only
        // consumer.
        let activation_out = |n: &NodeProto| -> String {
            let out = &n.output[0];
            match consumers.get(out.as_str()).map(Vec::as_slice) {
                Some([act])
                    if ["Relu", "Clip"].contains(&act.op_type.as_str()) && !options.skip.contains(&act.name) =>
                {
                    act.output[0].clone()
                }
                _ => out.clone(),
            }
        };
        for n in nodes {
            let skipped = options.skip.contains(&n.name);
            match n.op_type.as_str() {
                "Conv" | "Gemm" | "MatMul" => {
                    if skipped {
                        plan.left_float.push((n.name.clone(), "--skip".into()));
                        continue;
                    }
                    let Some(w) = n.input.get(1).and_then(|w| float_init.get(w.as_str())) else {
                        plan.left_float.push((n.name.clone(), "its weight is not a float initializer".into()));
                        continue;
                    };
                    let attr = |name: &str| n.attribute.iter().find(|a| a.name == name);
                    let scaled = ["alpha", "beta"].into_iter().any(|k| attr(k).is_some_and(|a| a.f != 1.0));
                    if n.op_type == "Gemm" && (scaled || attr("transA").is_some_and(|a| a.i != 0)) {
                        plan.left_float.push((n.name.clone(), "Gemm with alpha, beta or transA".into()));
                        continue;
                    }
                    let trans_b = attr("transB").is_some_and(|a| a.i != 0);
                    let channel_axis = match n.op_type.as_str() {
                        "Conv" => 0,
                        "Gemm" if trans_b => 0,
                        _ => 1,
                    };
                    if w.dims.len() < 2 || (n.op_type == "MatMul" && w.dims.len() != 2) {
                        plan.left_float.push((n.name.clone(), format!("weight of rank {}", w.dims.len())));
                        continue;
                    }
                    let channels = w.dims[channel_axis];
                    let bias =
                        n.input.get(2).and_then(|b| float_init.get(b.as_str())).is_some_and(|b| b.dims == [channels]);
                    mark(&mut plan, &mut marked, &n.input[0]);
                    let out = activation_out(n);
                    mark(&mut plan, &mut marked, &out);
                    plan.anchors.push(Anchor { name: n.name.clone(), channel_axis, bias });
                }
                "Add" if !skipped && n.input.iter().all(|i| marked.contains(i)) => {
                    let out = activation_out(n);
                    mark(&mut plan, &mut marked, &out);
                }
                "MaxPool" | "GlobalAveragePool" if !skipped && marked.contains(&n.input[0]) => {
                    mark(&mut plan, &mut marked, &n.output[0]);
                }
                _ => {}
            }
        }
        plan
    }
}

/// The activation step for a global scale: `s / 128` (a power of two in pow2 mode).
fn global_step(s: f32, kind: ScaleKind) -> Result<f32, QuantizeError> {
    let step = s / 128.0;
    if !(step.is_finite() && step > 0.0) {
        return Err(QuantizeError::Calibration(format!("global scale {s} is not a positive number")));
    }
    if kind == ScaleKind::Pow2 && step.log2().fract() != 0.0 {
        return Err(QuantizeError::Calibration(format!(
            "global scale {s} gives step {s}/128 = {step}, not a power of two (use --scales float, or a power of two)"
        )));
    }
    Ok(step)
}

/// The scale that maps `range` to at most 127 steps.
fn scale_for(range: f32, kind: ScaleKind) -> f32 {
    // An activation that was always 0 (or a weight of zeros): any scale is exact.
    if range.is_nan() || range <= 0.0 {
        return 1.0;
    }
    let exact = range / 127.0;
    match kind {
        ScaleKind::Float => exact,
        ScaleKind::Pow2 => 2f32.powi(exact.log2().ceil() as i32),
    }
}

/// Ranges of the activations in `wanted` over every calibration input set.
fn calibrate(
    graph: &Graph,
    calibration: &[Vec<Tensor>],
    wanted: &[String],
    method: Calibration,
) -> Result<HashMap<String, f32>, QuantizeError> {
    let wanted_set: HashSet<&str> = wanted.iter().map(String::as_str).collect();
    let ids: HashMap<ValueId, &str> = graph
        .values
        .iter()
        .enumerate()
        .filter(|(_, v)| wanted_set.contains(v.name.as_str()))
        .map(|(i, v)| (ValueId(i), v.name.as_str()))
        .collect();
    let mut seen: HashMap<&str, Vec<f32>> = HashMap::new();
    let mut max: HashMap<&str, f32> = HashMap::new();
    let mut non_finite: Option<String> = None;
    for (index, inputs) in calibration.iter().enumerate() {
        let mut observe = |id: ValueId, t: &Tensor| {
            let Some(&name) = ids.get(&id) else { return };
            let values = t.to_f64_vec();
            if values.iter().any(|v| !v.is_finite()) {
                non_finite.get_or_insert_with(|| name.to_string());
            }
            let m = max.entry(name).or_insert(0.0);
            for &v in &values {
                *m = m.max(v.abs() as f32);
            }
            if matches!(method, Calibration::Percentile(_)) {
                seen.entry(name).or_default().extend(values.iter().map(|v| v.abs() as f32));
            }
        };
        run_observed(graph, inputs, &mut observe).map_err(|error| QuantizeError::Run { index, error })?;
    }
    if let Some(name) = non_finite {
        return Err(QuantizeError::Calibration(format!("activation '{name}' is not finite on the calibration data")));
    }
    if let Some(missing) = wanted.iter().find(|w| !max.contains_key(w.as_str())) {
        return Err(QuantizeError::Calibration(format!("activation '{missing}' was never computed")));
    }
    Ok(match method {
        Calibration::MaxAbs => max.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        Calibration::Percentile(p) => seen
            .into_iter()
            .map(|(k, mut v)| {
                let rank = ((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
                let (_, x, _) = v.select_nth_unstable_by(rank, f32::total_cmp);
                (k.to_string(), *x)
            })
            .collect(),
    })
}

/// `w` as int8 in -127..=127 with one scale per tensor or per channel along `axis`.
fn quantize_weight(w: &Tensor, axis: usize, options: &QuantizeOptions) -> Result<(Tensor, Vec<f32>), QuantizeError> {
    let values = w.to_f64_vec();
    if values.iter().any(|v| !v.is_finite()) {
        return Err(QuantizeError::Unsupported("a weight holds a value that is not finite".into()));
    }
    let shape = w.shape();
    let inner: usize = shape[axis + 1..].iter().product();
    let channels = shape[axis];
    let channel_of = |i: usize| (i / inner) % channels;
    let scales: Vec<f32> = if options.per_channel {
        let mut range = vec![0f32; channels];
        for (i, v) in values.iter().enumerate() {
            let c = channel_of(i);
            range[c] = range[c].max(v.abs() as f32);
        }
        range.into_iter().map(|r| scale_for(r, options.scales)).collect()
    } else {
        vec![scale_for(values.iter().fold(0f32, |m, v| m.max(v.abs() as f32)), options.scales)]
    };
    let q: Vec<i8> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let s = if options.per_channel { scales[channel_of(i)] } else { scales[0] };
            (v / f64::from(s)).round_ties_even().clamp(-127.0, 127.0) as i8
        })
        .collect();
    Ok((Tensor::from_vec(shape, q).map_err(QuantizeError::Unsupported)?, scales))
}

/// A bias as int32 at `scales` (one per tensor or per channel), rounded half to even.
fn quantize_bias(b: &Tensor, scales: &[f32]) -> Result<Tensor, QuantizeError> {
    let values = b.to_f64_vec();
    let q: Vec<i32> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let s = f64::from(if scales.len() == 1 { scales[0] } else { scales[i] });
            (v / s).round_ties_even().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
        })
        .collect();
    Tensor::from_vec(b.shape(), q).map_err(QuantizeError::Unsupported)
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::INT, i: v, ..Default::default() }
}

fn node(op: &str, name: String, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name,
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        attribute,
        ..Default::default()
    }
}
