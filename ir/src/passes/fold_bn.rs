//! Folds an inference BatchNormalization into the Conv or Gemm that produces its input:
//! `bn(conv(x, W, b)) = conv(x, W * k, (b - mean) * k + bias)` with `k = scale / sqrt(var + eps)`
//! per output channel; and likewise a product by a constant of one value per output channel
//! (or one value), `conv(x, W, b) * k = conv(x, W * k, b * k)` (ResNet variants scale their
//! residual branch so; ONNX Runtime folds it too). Requires constant weights and parameters,
//! finite folded values, and a producer whose output feeds nothing else.

use crate::dtype::DType;
use crate::graph::{Graph, NameTable, ValueId};
use crate::op::{BinaryOp, Op};
use crate::tensor::Tensor;

/// Folds every eligible BatchNormalization and per-channel product; returns how many were
/// folded. Linear in the graph
/// size: producers, use counts and names are looked up in tables built once.
pub fn fold_batch_norm(graph: &mut Graph) -> usize {
    let mut ctx = FoldContext {
        producer: graph.producers(),
        uses: graph.use_counts(),
        is_output: vec![false; graph.values.len()],
        names: NameTable::new(graph),
    };
    graph.outputs.iter().for_each(|o| ctx.is_output[o.0] = true);
    let removed: Vec<bool> = (0..graph.nodes.len()).map(|i| try_fold(graph, i, &mut ctx)).collect();
    let folded = removed.iter().filter(|&&r| r).count();
    let mut flags = removed.iter();
    graph.nodes.retain(|_| !*flags.next().expect("one flag per node"));
    folded
}

/// What [`try_fold`] looks up, kept current as folds happen.
struct FoldContext {
    /// Producing node of each value (folded BNs' outputs move to their producer).
    producer: Vec<Option<usize>>,
    uses: Vec<usize>,
    is_output: Vec<bool>,
    names: NameTable,
}

fn constant_f64(graph: &Graph, id: ValueId) -> Option<Vec<f64>> {
    graph.constant(id).map(Tensor::to_f64_vec)
}

/// `values` rounded once to `dtype`, or `None` when one is not finite there (a product past
/// f16's or f32's range: a folded infinity would turn a finite product, a zero input, into
/// NaN).
fn in_type(shape: &[usize], values: Vec<f64>, dtype: DType) -> Option<Tensor> {
    let t = Tensor::from_vec::<f64>(shape, values).expect("sizes match").cast(dtype);
    t.to_f64_vec().iter().all(|v| v.is_finite()).then_some(t)
}

/// Where a weight's output channel is, in row-major order: runs of `per` elements per channel
/// (a convolution's `[M, C/g, kh, kw]`, a transposed GEMM's `[N, K]`), or the channel the
/// fastest index (a GEMM's `[K, N]`).
#[derive(Clone, Copy)]
enum Channels {
    Runs { per: usize },
    Innermost,
}

/// The weights `w` with each element times its channel's `k`, in f64, rounded once to `dtype`
/// (see [`in_type`]). f32 weights are scaled in one pass over runs of a channel: ResNet-style
/// residual scales fold megabytes of weights at compile time.
fn scaled(w: &Tensor, dtype: DType, k: &[f64], channels: Channels) -> Option<Tensor> {
    // Every element has its channel: the weights hold whole runs, or whole rows of channels.
    let whole = match channels {
        Channels::Runs { per } => per.checked_mul(k.len()) == Some(w.len()),
        Channels::Innermost => !k.is_empty() && w.len() % k.len() == 0,
    };
    if !whole {
        return None;
    }
    let runs = |len: usize| match channels {
        Channels::Runs { per } => (per.max(1), true),
        Channels::Innermost => (k.len().max(1).min(len.max(1)), false),
    };
    if dtype == DType::F32
        && let Some(values) = w.as_array::<f32>().and_then(|a| a.as_slice())
    {
        let (run, per_run) = runs(values.len());
        let mut out = Vec::with_capacity(values.len());
        for (r, chunk) in values.chunks(run).enumerate() {
            if per_run {
                let k = k[r];
                out.extend(chunk.iter().map(|&v| (f64::from(v) * k) as f32));
            } else {
                out.extend(chunk.iter().zip(k).map(|(&v, &k)| (f64::from(v) * k) as f32));
            }
        }
        return out.iter().all(|v| v.is_finite()).then(|| Tensor::from_vec(w.shape(), out).expect("sizes match"));
    }
    let (run, per_run) = runs(w.len());
    let v = w.to_f64_vec().iter().enumerate().map(|(i, v)| v * k[if per_run { i / run } else { i % run }]).collect();
    in_type(w.shape(), v, dtype)
}

/// A per-channel affine map of a producer's output: `(x − mean) · k + bias`, one value per
/// channel each.
struct ChannelAffine {
    x: ValueId,
    k: Vec<f64>,
    mean: Vec<f64>,
    bias: Vec<f64>,
}

/// Node `index` as a per-channel affine map of its input `x`, with `channels(x)` the channel
/// count of `x` (its producer's output channels): an inference BatchNormalization with
/// constant parameters, or a product by a constant that broadcasts one value per channel or
/// one value over `x` (its dimensions 1 but the channel axis, `axis(x)`).
fn channel_affine(
    graph: &Graph,
    index: usize,
    producer_of: impl Fn(ValueId) -> Option<(usize, usize)>,
) -> Option<ChannelAffine> {
    let node = &graph.nodes[index];
    match node.op {
        Op::BatchNormalization { epsilon } => {
            let x = node.inputs[0];
            let params: Option<Vec<Vec<f64>>> = node.inputs[1..].iter().map(|&p| constant_f64(graph, p)).collect();
            let params = params?;
            let (scale, bias, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
            let k: Vec<f64> = scale.iter().zip(var).map(|(s, v)| s / (v + epsilon as f64).sqrt()).collect();
            Some(ChannelAffine { x, k, mean: mean.clone(), bias: bias.clone() })
        }
        Op::Binary(BinaryOp::Mul) => {
            let (x, c) = match (graph.constant(node.inputs[0]), graph.constant(node.inputs[1])) {
                (None, Some(_)) => (node.inputs[0], node.inputs[1]),
                (Some(_), None) => (node.inputs[1], node.inputs[0]),
                _ => return None,
            };
            let (channels, axis) = producer_of(x)?;
            let (x_shape, c_shape) = (&graph.ty(x).shape, &graph.ty(c).shape);
            // Right-aligned against `x`, every dimension of the constant is 1 but the channel
            // axis, which is 1 or the channel count: the product has `x`'s shape.
            let offset = x_shape.len().checked_sub(c_shape.len())?;
            let per_channel = c_shape.iter().enumerate().all(|(d, &n)| n == 1 || (d + offset == axis && n == channels));
            let values = constant_f64(graph, c)?;
            if !per_channel || graph.ty(c).dtype != graph.ty(x).dtype {
                return None;
            }
            let k = if values.len() == 1 { vec![values[0]; channels] } else { values };
            Some(ChannelAffine { x, k, mean: vec![0.0; channels], bias: vec![0.0; channels] })
        }
        _ => None,
    }
}

/// Rewrites the producer of node `index` (a BatchNormalization or a per-channel product) to
/// include its scaling. Returns false (and changes nothing) when the pattern does not apply.
fn try_fold(graph: &mut Graph, index: usize, ctx: &mut FoldContext) -> bool {
    // The producer of a value and its output channels and their axis.
    let producer_of = |x: ValueId| {
        let p = ctx.producer[x.0].filter(|&p| graph.nodes[p].outputs.first() == Some(&x))?;
        let shape = &graph.ty(x).shape;
        let axis = match graph.nodes[p].op {
            Op::Conv(_) if shape.len() >= 3 => 1,
            Op::Gemm { .. } if shape.len() == 2 => 1,
            _ => return None,
        };
        Some((shape[axis], axis))
    };
    let Some(ChannelAffine { x, k, mean, bias }) = channel_affine(graph, index, producer_of) else {
        return false;
    };
    let dtype = graph.ty(x).dtype;
    if !dtype.is_float() || ctx.is_output[x.0] || ctx.uses[x.0] != 1 {
        return false;
    }
    let bn_out = graph.nodes[index].outputs[0];
    let Some(p) = ctx.producer[x.0].filter(|&p| graph.nodes[p].outputs.first() == Some(&x)) else {
        return false;
    };
    let producer = graph.nodes[p].clone();
    let channels = k.len();
    if graph.ty(x).shape.get(1) != Some(&channels) || [&mean, &bias].iter().any(|v| v.len() != channels) {
        return false;
    }
    let (new_op, weight, new_bias) = match &producer.op {
        Op::Conv(_) => {
            let Some(w) = graph.constant(producer.inputs[1]) else {
                return false;
            };
            let b = match producer.inputs.get(2) {
                Some(&b) => match constant_f64(graph, b) {
                    Some(b) => b,
                    None => return false,
                },
                None => vec![0.0; channels],
            };
            let per = w.len() / channels;
            let w = scaled(w, dtype, &k, Channels::Runs { per });
            let b: Vec<f64> = (0..channels).map(|c| (b[c] - mean[c]) * k[c] + bias[c]).collect();
            (producer.op.clone(), w, b)
        }
        Op::Gemm { alpha, beta, trans_a, trans_b } => {
            let Some(w) = graph.constant(producer.inputs[1]) else {
                return false;
            };
            let c = match producer.inputs.get(2) {
                Some(&c) => {
                    let shape = graph.ty(c).shape.clone();
                    let per_column = shape.iter().product::<usize>() == channels && shape.last() == Some(&channels);
                    let scalar = shape.iter().product::<usize>() == 1;
                    match constant_f64(graph, c) {
                        Some(v) if per_column => v,
                        Some(v) if scalar => vec![v[0]; channels],
                        _ => return false,
                    }
                }
                None => vec![0.0; channels],
            };
            // Output column n scales by k[n]: columns of B, or rows when B is transposed.
            let per = w.len() / channels;
            let w = scaled(w, dtype, &k, if *trans_b { Channels::Runs { per } } else { Channels::Innermost });
            let b: Vec<f64> = (0..channels).map(|n| (*beta as f64 * c[n] - mean[n]) * k[n] + bias[n]).collect();
            (Op::Gemm { alpha: *alpha, beta: 1.0, trans_a: *trans_a, trans_b: *trans_b }, w, b)
        }
        _ => return false,
    };

    let new_bias = in_type(&[channels], new_bias, dtype);
    let (Some(weight), Some(new_bias)) = (weight, new_bias) else {
        return false;
    };
    let w_name = ctx.names.fresh(&format!("{}:folded_weight", producer.name));
    let w_id = graph.add_constant(w_name, weight);
    let b_name = ctx.names.fresh(&format!("{}:folded_bias", producer.name));
    let b_id = graph.add_constant(b_name, new_bias);
    ctx.producer[bn_out.0] = Some(p);
    let node = &mut graph.nodes[p];
    node.op = new_op;
    node.inputs = vec![node.inputs[0], w_id, b_id];
    node.outputs[0] = bn_out;
    true
}
