//! Operators translated into several graph nodes, following the function bodies the ONNX
//! schemas define: normalizations (with their optional statistics outputs), LRN, Sum/Mean,
//! PRelu, IsNaN/IsInf, the loss functions; and the parametric activations.

use crate::dtype::{DType, TensorType};
use crate::graph::ValueId;
use crate::op::{Activation, BinaryOp, CompareOp, LogicalOp, Op, PoolAttrs, ReduceOp, UnaryOp, Window};
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::build::{constant, output, scalar, step, wants};
use super::tensor_ops::input_id;
use super::{NodeCtx, input_type, norm_axis};
use crate::infer::window_span;

/// The operators translated here.
pub(super) const OPS: &[&str] = &[
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "ThresholdedRelu",
    "Swish",
    "LayerNormalization",
    "RMSNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "LRN",
    "Sum",
    "Mean",
    "PRelu",
    "IsNaN",
    "IsInf",
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    "Attention",
    "ConvTranspose",
    "GlobalMaxPool",
    "LpNormalization",
    "Shrink",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
    "MeanVarianceNormalization",
    "CenterCropPad",
    "DynamicQuantizeLinear",
    "LpPool",
    "RotaryEmbedding",
    "QLinearMatMul",
    "QLinearConv",
    "SwiGLU",
];

pub(super) fn import(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let activation = |a: Activation| -> Result<(Op, Vec<ValueId>), ImportError> {
        Ok((Op::Activation(a), vec![input_id(im, ctx, 0)?]))
    };
    let (op, ins) = match ctx.node.op_type.as_str() {
        "Elu" => activation(Activation::Elu { alpha: ctx.float("alpha", 1.0)? })?,
        "Selu" => activation(Activation::Selu {
            alpha: ctx.float("alpha", 1.673_263_2)?,
            gamma: ctx.float("gamma", 1.050_701)?,
        })?,
        "Celu" => activation(Activation::Celu { alpha: ctx.float("alpha", 1.0)? })?,
        "HardSigmoid" => {
            activation(Activation::HardSigmoid { alpha: ctx.float("alpha", 0.2)?, beta: ctx.float("beta", 0.5)? })?
        }
        "ThresholdedRelu" => activation(Activation::ThresholdedRelu { alpha: ctx.float("alpha", 1.0)? })?,
        "Swish" => activation(Activation::Swish { alpha: ctx.float("alpha", 1.0)? })?,
        "SwiGLU" => {
            // Swish(a) * b over equal shapes (no broadcasting).
            let (a, b) = (input_type(im, ctx, 0)?, input_type(im, ctx, 1)?);
            if a != b || !a.dtype.is_float() {
                return Err(ctx.bad(format!("A {a} and B {b} must be float tensors of one shape")));
            }
            let swish = Op::Activation(Activation::Swish { alpha: ctx.float("alpha", 1.0)? });
            let gate = step(im, ctx, "swish", swish, &[input_id(im, ctx, 0)?])?;
            (Op::Binary(BinaryOp::Mul), vec![gate, input_id(im, ctx, 1)?])
        }
        "LayerNormalization" | "RMSNormalization" => return layer_norm(im, ctx),
        "InstanceNormalization" => return instance_norm(im, ctx),
        "GroupNormalization" => return group_norm(im, ctx),
        "LRN" => return lrn(im, ctx),
        "Sum" | "Mean" => return sum_mean(im, ctx),
        "Attention" => return attention(im, ctx),
        "ConvTranspose" => return conv_transpose(im, ctx),
        "DynamicQuantizeLinear" => return dynamic_quantize(im, ctx),
        "LpPool" => return lp_pool(im, ctx),
        "RotaryEmbedding" => return rotary_embedding(im, ctx),
        "QLinearMatMul" | "QLinearConv" => return qlinear(im, ctx),
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
            // A compile-time size gives a constant window.
            let size = super::const_ints(im, ctx, 0, "size")?.ok_or_else(|| ctx.bad("input 0 (size) is required"))?;
            let size = match size.as_slice() {
                [n] if *n >= 0 => *n as usize,
                _ => return Err(ctx.bad(format!("size must be one non-negative value, got {size:?}"))),
            };
            let dtype = DType::from_onnx_code(ctx.int("output_datatype", 1)? as i32).map_err(|dtype| {
                ImportError::UnsupportedDtype { context: format!("node '{}' output_datatype", ctx.name), dtype }
            })?;
            im.graph.limits.check_shape(dtype, &[size]).map_err(|e| ctx.bad(e.to_string()))?;
            let periodic = ctx.flag("periodic", true)?;
            let n = if periodic { size as f64 } else { size as f64 - 1.0 };
            let pi = std::f64::consts::PI;
            let window: Vec<f64> = (0..size)
                .map(|i| {
                    let i = i as f64;
                    match ctx.node.op_type.as_str() {
                        "HannWindow" => (i * pi / n).sin().powi(2),
                        "HammingWindow" => 25.0 / 46.0 - (i * pi * 2.0 / n).cos() * (21.0 / 46.0),
                        _ => 0.42 - 0.5 * (i * pi * 2.0 / n).cos() + 0.08 * (i * pi * 4.0 / n).cos(),
                    }
                })
                .collect();
            let t = Tensor::from_vec::<f64>(&[size], window).map_err(|e| ctx.bad(e))?.cast(dtype);
            (Op::Identity, vec![constant(im, ctx, "window", t)])
        }
        "MeanVarianceNormalization" => {
            // The schema's body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
            let x = input_type(im, ctx, 0)?;
            let axes = ctx.ints("axes")?.unwrap_or(vec![0, 2, 3]);
            let mut axes = axes.iter().map(|&a| norm_axis(ctx, "axes", a, x.rank())).collect::<Result<Vec<_>, _>>()?;
            axes.sort_unstable();
            axes.dedup();
            let xin = input_id(im, ctx, 0)?;
            let mean = Op::Reduce { op: ReduceOp::Mean, axes, keepdims: true };
            let m = step(im, ctx, "mean", mean.clone(), &[xin])?;
            let m2 = step(im, ctx, "mean_squared", Op::Binary(BinaryOp::Mul), &[m, m])?;
            let sq = step(im, ctx, "squared", Op::Binary(BinaryOp::Mul), &[xin, xin])?;
            let e2 = step(im, ctx, "mean_of_squares", mean, &[sq])?;
            let var = step(im, ctx, "variance", Op::Binary(BinaryOp::Sub), &[e2, m2])?;
            let std = step(im, ctx, "std", Op::Unary(UnaryOp::Sqrt), &[var])?;
            let eps = scalar(im, ctx, "epsilon", x.dtype, 1e-9);
            let den = step(im, ctx, "std_eps", Op::Binary(BinaryOp::Add), &[std, eps])?;
            let centered = step(im, ctx, "centered", Op::Binary(BinaryOp::Sub), &[xin, m])?;
            (Op::Binary(BinaryOp::Div), vec![centered, den])
        }
        "CenterCropPad" => {
            // Crops or zero-pads each listed axis to the target around its center.
            let x = input_type(im, ctx, 0)?;
            let target =
                super::const_ints(im, ctx, 1, "shape")?.ok_or_else(|| ctx.bad("input 1 (shape) is required"))?;
            let axes = match ctx.ints("axes")? {
                Some(a) => a.iter().map(|&a| norm_axis(ctx, "axes", a, x.rank())).collect::<Result<Vec<_>, _>>()?,
                None => (0..x.rank()).collect(),
            };
            if target.len() != axes.len() || target.iter().any(|&t| t < 0) {
                return Err(ctx.bad(format!("shape {target:?} must give {} non-negative sizes", axes.len())));
            }
            let r = x.rank();
            let mut slice: Vec<crate::op::SliceAxis> =
                x.shape.iter().map(|&len| crate::op::SliceAxis { start: 0, step: 1, len }).collect();
            let mut pads = vec![0i64; 2 * r];
            for (&a, &t) in axes.iter().zip(&target) {
                let (dim, t) = (x.shape[a], t as usize);
                if t < dim {
                    slice[a] = crate::op::SliceAxis { start: (dim - t) / 2, step: 1, len: t };
                } else if t > dim {
                    pads[a] = ((t - dim) / 2) as i64;
                    pads[a + r] = (t - dim - (t - dim) / 2) as i64;
                }
            }
            let xin = input_id(im, ctx, 0)?;
            let cropped = step(im, ctx, "cropped", Op::Slice { axes: slice }, &[xin])?;
            let value = Tensor::scalar_from_f64(x.dtype, 0.0);
            (Op::Pad { pads, mode: crate::op::PadMode::Constant, value }, vec![cropped])
        }
        "GlobalMaxPool" => {
            let x = input_type(im, ctx, 0)?;
            if x.rank() < 3 {
                return Err(ctx.bad(format!("input must have rank >= 3, got {:?}", x.shape)));
            }
            (
                Op::Reduce { op: ReduceOp::Max, axes: (2..x.rank()).collect(), keepdims: true },
                vec![input_id(im, ctx, 0)?],
            )
        }
        "LpNormalization" => {
            let x = input_type(im, ctx, 0)?;
            let axis = norm_axis(ctx, "axis", ctx.int("axis", -1)?, x.rank())?;
            let op = match ctx.int("p", 2)? {
                1 => ReduceOp::L1,
                2 => ReduceOp::L2,
                p => return Err(ctx.bad_attr("p", format!("must be 1 or 2, got {p}"))),
            };
            let xin = input_id(im, ctx, 0)?;
            let norm = step(im, ctx, "norm", Op::Reduce { op, axes: vec![axis], keepdims: true }, &[xin])?;
            // A zero vector stays zero (its norm counts as 1).
            let (zero, one) = (scalar(im, ctx, "zero", x.dtype, 0.0), scalar(im, ctx, "one", x.dtype, 1.0));
            let is_zero = step(im, ctx, "zero_norm", Op::Compare(CompareOp::Equal), &[norm, zero])?;
            let norm = step(im, ctx, "safe_norm", Op::Where, &[is_zero, one, norm])?;
            (Op::Binary(BinaryOp::Div), vec![xin, norm])
        }
        "Shrink" => {
            // x < -lambd ? x + bias : (x > lambd ? x - bias : 0)
            let x = input_type(im, ctx, 0)?;
            let (lambd, bias) = (ctx.float("lambd", 0.5)? as f64, ctx.float("bias", 0.0)? as f64);
            let xin = input_id(im, ctx, 0)?;
            let c = |im: &mut Importer<'_>, what: &str, v: f64| scalar(im, ctx, what, x.dtype, v);
            let (lo, hi, b, zero) =
                (c(im, "neg_lambd", -lambd), c(im, "lambd", lambd), c(im, "bias", bias), c(im, "zero", 0.0));
            let below = step(im, ctx, "below", Op::Compare(CompareOp::Less), &[xin, lo])?;
            let above = step(im, ctx, "above", Op::Compare(CompareOp::Greater), &[xin, hi])?;
            let up = step(im, ctx, "raised", Op::Binary(BinaryOp::Add), &[xin, b])?;
            let down = step(im, ctx, "lowered", Op::Binary(BinaryOp::Sub), &[xin, b])?;
            let upper = step(im, ctx, "upper", Op::Where, &[above, down, zero])?;
            (Op::Where, vec![below, up, upper])
        }
        "PRelu" => {
            let x = input_type(im, ctx, 0)?;
            let (xin, slope) = (input_id(im, ctx, 0)?, input_id(im, ctx, 1)?);
            let zero = scalar(im, ctx, "zero", x.dtype, 0.0);
            let negative = step(im, ctx, "negative", Op::Compare(CompareOp::Less), &[xin, zero])?;
            let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[xin, slope])?;
            (Op::Where, vec![negative, scaled, xin])
        }
        "IsNaN" => {
            let xin = input_id(im, ctx, 0)?;
            let same = step(im, ctx, "self_equal", Op::Compare(CompareOp::Equal), &[xin, xin])?;
            (Op::Not, vec![same])
        }
        "IsInf" => {
            let x = input_type(im, ctx, 0)?;
            let xin = input_id(im, ctx, 0)?;
            let (pos, neg) = (ctx.flag("detect_positive", true)?, ctx.flag("detect_negative", true)?);
            let inf = |im: &mut Importer<'_>, what: &str, v: f64| scalar(im, ctx, what, x.dtype, v);
            match (pos, neg) {
                (true, true) => {
                    let p = inf(im, "inf", f64::INFINITY);
                    let n = inf(im, "neg_inf", f64::NEG_INFINITY);
                    let is_p = step(im, ctx, "is_pos", Op::Compare(CompareOp::Equal), &[xin, p])?;
                    let is_n = step(im, ctx, "is_neg", Op::Compare(CompareOp::Equal), &[xin, n])?;
                    (Op::Logical(LogicalOp::Or), vec![is_p, is_n])
                }
                // Nothing equals NaN: neither sign detected is all false.
                (p, n) => {
                    let v = if p {
                        f64::INFINITY
                    } else if n {
                        f64::NEG_INFINITY
                    } else {
                        f64::NAN
                    };
                    (Op::Compare(CompareOp::Equal), vec![xin, inf(im, "target", v)])
                }
            }
        }
        "NegativeLogLikelihoodLoss" => {
            let x = input_type(im, ctx, 0)?;
            let (xin, target) = (input_id(im, ctx, 0)?, input_id(im, ctx, 1)?);
            let weight = ctx.input(2).map(|_| input_id(im, ctx, 2)).transpose()?;
            return nll(im, ctx, (xin, &x), target, weight);
        }
        "SoftmaxCrossEntropyLoss" => {
            let x = input_type(im, ctx, 0)?;
            if x.rank() < 2 {
                return Err(ctx.bad(format!("scores must have rank >= 2, got {:?}", x.shape)));
            }
            let xin = input_id(im, ctx, 0)?;
            let log_prob = step(im, ctx, "log_prob", Op::Softmax { axis: 1, coerce_2d: false, log: true }, &[xin])?;
            let (target, weight) = (input_id(im, ctx, 1)?, ctx.input(2).map(|_| input_id(im, ctx, 2)).transpose()?);
            if wants(ctx, 1) {
                output(im, ctx, 1, Op::Identity, &[log_prob])?;
            }
            return nll(im, ctx, (log_prob, &x), target, weight);
        }
        other => return Err(ctx.bad(format!("no translation for {other}"))),
    };
    output(im, ctx, 0, op, &ins)
}

/// DynamicQuantizeLinear: u8 quantization of `x` with a scale and zero point from its range
/// (widened to hold 0), as the schema's function body computes them, except that a range of 0
/// gives scale 1 as ONNX Runtime does (the body would divide by 0).
fn dynamic_quantize(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    if x.dtype != DType::F32 {
        return Err(ctx.bad(format!("x must be f32, got {}", x.dtype)));
    }
    let xin = input_id(im, ctx, 0)?;
    let all: Vec<usize> = (0..x.rank()).collect();
    let f = |im: &mut Importer<'_>, what: &str, v: f64| scalar(im, ctx, what, DType::F32, v);
    let (zero, one, q_max) = (f(im, "zero", 0.0), f(im, "one", 1.0), f(im, "q_max", 255.0));
    let reduce = |op| Op::Reduce { op, axes: all.clone(), keepdims: false };
    let lowest = step(im, ctx, "min", reduce(ReduceOp::Min), &[xin])?;
    let lowest = step(im, ctx, "min_with_zero", Op::Binary(BinaryOp::Min), &[lowest, zero])?;
    let highest = step(im, ctx, "max", reduce(ReduceOp::Max), &[xin])?;
    let highest = step(im, ctx, "max_with_zero", Op::Binary(BinaryOp::Max), &[highest, zero])?;
    let range = step(im, ctx, "range", Op::Binary(BinaryOp::Sub), &[highest, lowest])?;
    let flat = step(im, ctx, "flat", Op::Compare(CompareOp::Equal), &[range, zero])?;
    let per_step = step(im, ctx, "range_per_step", Op::Binary(BinaryOp::Div), &[range, q_max])?;
    let scale = step(im, ctx, "scale", Op::Where, &[flat, one, per_step])?;
    let min_steps = step(im, ctx, "min_steps", Op::Binary(BinaryOp::Div), &[lowest, scale])?;
    let zp = step(im, ctx, "zero_point_f32", Op::Unary(UnaryOp::Neg), &[min_steps])?;
    let clip = Op::Clip {
        min: Some(Tensor::scalar_from_f64(DType::F32, 0.0)),
        max: Some(Tensor::scalar_from_f64(DType::F32, 255.0)),
    };
    let zp = step(im, ctx, "zero_point_clipped", clip, &[zp])?;
    let zp = step(im, ctx, "zero_point_rounded", Op::Unary(UnaryOp::Round), &[zp])?;
    let zp = step(im, ctx, "zero_point", Op::Cast { to: DType::U8 }, &[zp])?;
    output(im, ctx, 1, Op::Identity, &[scale])?;
    output(im, ctx, 2, Op::Identity, &[zp])?;
    output(im, ctx, 0, Op::QuantizeLinear { axis: crate::op::QuantAxis::PerTensor }, &[xin, scale, zp])
}

/// LpPool: `(sum over the window of |x|^p)^(1/p)`, the sum a depthwise convolution with ones
/// (padding adds zeros; in ceil mode the last window's overhang is padding too).
fn lp_pool(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    if !x.dtype.is_float() {
        return Err(ctx.bad(format!("x must be a float tensor, got {}", x.dtype)));
    }
    let pool = super::pool_attrs(ctx, &x)?;
    let p = ctx.int("p", 2)?;
    if p < 1 {
        return Err(ctx.bad_attr("p", format!("must be >= 1, got {p}")));
    }
    let out =
        crate::infer::window_output_spatial(&pool.window, &x.shape[2..], pool.ceil_mode).map_err(|e| ctx.bad(e))?;
    let mut window = pool.window;
    for (d, &o) in out.iter().enumerate() {
        let span = window_span(window.kernel[d], window.dilations[d]).ok_or_else(|| ctx.bad("the window overflows"))?;
        let reach =
            (o.saturating_sub(1) * window.strides[d] + span).saturating_sub(x.shape[2 + d] + window.pads_begin[d]);
        window.pads_end[d] = window.pads_end[d].max(reach);
    }
    let channels = x.shape[1];
    let weights = ones(im, ctx, x.dtype, &[[channels, 1].as_slice(), &window.kernel].concat())?;
    let xin = input_id(im, ctx, 0)?;
    let powered = match p {
        1 => step(im, ctx, "abs", Op::Unary(UnaryOp::Abs), &[xin])?,
        2 => step(im, ctx, "squared", Op::Binary(BinaryOp::Mul), &[xin, xin])?,
        _ => {
            let a = step(im, ctx, "abs", Op::Unary(UnaryOp::Abs), &[xin])?;
            let e = scalar(im, ctx, "p", x.dtype, p as f64);
            step(im, ctx, "powered", Op::Binary(BinaryOp::Pow), &[a, e])?
        }
    };
    let conv = Op::Conv(crate::op::ConvAttrs { window, group: channels });
    let sum = step(im, ctx, "window_sum", conv, &[powered, weights])?;
    match p {
        1 => output(im, ctx, 0, Op::Identity, &[sum]),
        2 => output(im, ctx, 0, Op::Unary(UnaryOp::Sqrt), &[sum]),
        _ => {
            let e = scalar(im, ctx, "inverse_p", x.dtype, 1.0 / p as f64);
            output(im, ctx, 0, Op::Binary(BinaryOp::Pow), &[sum, e])
        }
    }
}

/// RotaryEmbedding (23): the first `rotary_embedding_dim` features of each head rotated pairwise
/// by the cached angles of each position (halves, or even/odd features when interleaved); the
/// rest pass through. `[batch, heads, seq, head]` or `[batch, seq, hidden]` with `num_heads`.
fn rotary_embedding(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    if !x.dtype.is_float() {
        return Err(ctx.bad(format!("input must be a float tensor, got {}", x.dtype)));
    }
    let xin = input_id(im, ctx, 0)?;
    // Work on [batch, heads, seq, head] or [batch, seq, heads, head]; the angles broadcast over
    // the heads axis.
    let (work, heads_axis) = match x.rank() {
        4 => (xin, 1),
        3 => {
            let heads = ctx.int("num_heads", 0)?;
            let h = usize::try_from(heads).ok().filter(|&h| h > 0 && x.shape[2] % h == 0).ok_or_else(|| {
                ctx.bad_attr(
                    "num_heads",
                    format!("must divide the hidden size {} of a 3-D input, got {heads}", x.shape[2]),
                )
            })?;
            let shape = vec![x.shape[0], x.shape[1], h, x.shape[2] / h];
            (step(im, ctx, "heads", Op::Reshape { shape }, &[xin])?, 2)
        }
        _ => return Err(ctx.bad(format!("input must have rank 3 or 4, got {:?}", x.shape))),
    };
    let shape = im.graph.ty(work).shape.clone();
    let head = shape[3];
    let dim = match ctx.int("rotary_embedding_dim", 0)? {
        0 => head,
        d => usize::try_from(d).ok().filter(|&d| d <= head && d % 2 == 0).ok_or_else(|| {
            ctx.bad_attr("rotary_embedding_dim", format!("must be even and at most the head size {head}, got {d}"))
        })?,
    };
    if dim % 2 != 0 {
        return Err(ctx.bad(format!("the head size {head} must be even")));
    }
    let half = dim / 2;
    let mut angle = |i: usize, what: &str| -> Result<ValueId, ImportError> {
        let mut cache = input_id(im, ctx, i)?;
        if ctx.input(3).is_some() {
            let positions = input_id(im, ctx, 3)?;
            cache = step(im, ctx, &format!("{what}_at_positions"), Op::Gather { axis: 0 }, &[cache, positions])?;
        }
        let ty = im.graph.ty(cache);
        if ty.rank() != 3 || ty.shape[2] != half {
            return Err(ctx.bad(format!("the {what} cache must give [batch, seq, {half}] angles, got {:?}", ty.shape)));
        }
        step(im, ctx, what, Op::Unsqueeze { axes: vec![heads_axis] }, &[cache])
    };
    let (cos, sin) = (angle(1, "cos")?, angle(2, "sin")?);
    let last = |start: usize, step_by: i64, len: usize| {
        let mut axes: Vec<crate::op::SliceAxis> =
            shape.iter().map(|&len| crate::op::SliceAxis { start: 0, step: 1, len }).collect();
        axes[3] = crate::op::SliceAxis { start, step: step_by, len };
        Op::Slice { axes }
    };
    let interleaved = ctx.flag("interleaved", false)?;
    let (a, b) =
        if interleaved { (last(0, 2, half), last(1, 2, half)) } else { (last(0, 1, half), last(half, 1, half)) };
    let (x1, x2) = (step(im, ctx, "x1", a, &[work])?, step(im, ctx, "x2", b, &[work])?);
    let mul = |im: &mut Importer<'_>, what: &str, p: ValueId, q: ValueId| {
        step(im, ctx, what, Op::Binary(BinaryOp::Mul), &[p, q])
    };
    let (c1, s2) = (mul(im, "cos_x1", cos, x1)?, mul(im, "sin_x2", sin, x2)?);
    let (s1, c2) = (mul(im, "sin_x1", sin, x1)?, mul(im, "cos_x2", cos, x2)?);
    let real = step(im, ctx, "real", Op::Binary(BinaryOp::Sub), &[c1, s2])?;
    let imag = step(im, ctx, "imag", Op::Binary(BinaryOp::Add), &[s1, c2])?;
    let mut rotated = if interleaved {
        let real = step(im, ctx, "real_pairs", Op::Unsqueeze { axes: vec![4] }, &[real])?;
        let imag = step(im, ctx, "imag_pairs", Op::Unsqueeze { axes: vec![4] }, &[imag])?;
        let pairs = step(im, ctx, "pairs", Op::Concat { axis: 4 }, &[real, imag])?;
        let shape = vec![shape[0], shape[1], shape[2], dim];
        step(im, ctx, "rotated", Op::Reshape { shape }, &[pairs])?
    } else {
        step(im, ctx, "rotated", Op::Concat { axis: 3 }, &[real, imag])?
    };
    if dim < head {
        let rest = step(im, ctx, "passed", last(dim, 1, head - dim), &[work])?;
        rotated = step(im, ctx, "joined", Op::Concat { axis: 3 }, &[rotated, rest])?;
    }
    if x.rank() == 3 {
        output(im, ctx, 0, Op::Reshape { shape: x.shape.clone() }, &[rotated])
    } else {
        output(im, ctx, 0, Op::Identity, &[rotated])
    }
}

/// QLinearMatMul / QLinearConv: the integer product (MatMulInteger / ConvInteger, plus the i32
/// bias), scaled by `a_scale * b_scale / y_scale` in f32 and requantized to `y_zero_point`'s
/// type (round half to even, saturate): what ONNX Runtime's kernels compute.
fn qlinear(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let conv = ctx.node.op_type == "QLinearConv";
    let ids = (0..8).map(|i| input_id(im, ctx, i)).collect::<Result<Vec<_>, _>>()?;
    let (a, w) = (input_type(im, ctx, 0)?, input_type(im, ctx, 3)?);
    let (product, channel_axis) = if conv {
        let attrs = super::conv_attrs(ctx, &a, &w)?;
        (Op::ConvInteger(attrs), 1)
    } else {
        (Op::MatMulInteger, usize::MAX)
    };
    let mut acc = step(im, ctx, "accumulators", product, &[ids[0], ids[3], ids[2], ids[5]])?;
    let rank = im.graph.ty(acc).rank();
    // A per-channel vector along the output channels of a convolution.
    let per_channel = |im: &mut Importer<'_>, what: &str, v: ValueId| -> Result<ValueId, ImportError> {
        let ty = im.graph.ty(v).clone();
        if channel_axis == usize::MAX || ty.rank() != 1 || ty.shape[0] == 1 {
            return Ok(v);
        }
        let mut shape = vec![1; rank - 1];
        shape[0] = ty.shape[0];
        step(im, ctx, what, Op::Reshape { shape }, &[v])
    };
    if conv && ctx.input(8).is_some() {
        let bias = input_id(im, ctx, 8)?;
        let bias = per_channel(im, "bias_per_channel", bias)?;
        acc = step(im, ctx, "biased", Op::Binary(BinaryOp::Add), &[acc, bias])?;
    }
    let acc = step(im, ctx, "accumulators_f32", Op::Cast { to: DType::F32 }, &[acc])?;
    let mut f32_of = |i: usize, what: &str| -> Result<ValueId, ImportError> {
        let v = ids[i];
        match im.graph.ty(v).dtype {
            DType::F32 => Ok(v),
            d if d.is_float() => step(im, ctx, what, Op::Cast { to: DType::F32 }, &[v]),
            d => Err(ctx.bad(format!("input {i} ({what}) must be a float scale, got {d}"))),
        }
    };
    let (mut sa, sb, sy) = (f32_of(1, "a_scale")?, f32_of(4, "b_scale")?, f32_of(6, "y_scale")?);
    // A per-row a_scale of a matrix product scales rows: [M] -> [M, 1].
    let a_scale = im.graph.ty(sa).clone();
    if !conv && a_scale.rank() == 1 && a_scale.shape[0] > 1 {
        sa = step(im, ctx, "a_scale_rows", Op::Reshape { shape: vec![a_scale.shape[0], 1] }, &[sa])?;
    }
    let scale = step(im, ctx, "input_scale", Op::Binary(BinaryOp::Mul), &[sa, sb])?;
    let scale = step(im, ctx, "output_scale", Op::Binary(BinaryOp::Div), &[scale, sy])?;
    let scale = per_channel(im, "output_scale_per_channel", scale)?;
    let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[acc, scale])?;
    let one = scalar(im, ctx, "one", DType::F32, 1.0);
    output(im, ctx, 0, Op::QuantizeLinear { axis: crate::op::QuantAxis::PerTensor }, &[scaled, one, ids[7]])
}

/// `p` broadcast to `shape` (an Expand node when its shape differs).
fn expand_to(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, p: ValueId, shape: &[usize]) -> Result<ValueId, ImportError> {
    if im.graph.ty(p).shape == shape {
        return Ok(p);
    }
    step(im, ctx, "expanded", Op::Expand { shape: shape.to_vec() }, &[p])
}

fn ones(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, dtype: DType, shape: &[usize]) -> Result<ValueId, ImportError> {
    // Checked as the f64 buffer it is built in, before anything is allocated.
    im.graph.limits.check_shape(DType::F64, shape).map_err(|e| ctx.bad(e.to_string()))?;
    let n = shape.iter().product();
    let t = Tensor::from_vec::<f64>(shape, vec![1.0; n]).map_err(|e| ctx.bad(e))?.cast(dtype);
    Ok(constant(im, ctx, "ones", t))
}

fn layer_norm(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let axis = norm_axis(ctx, "axis", ctx.int("axis", -1)?, x.rank())?;
    let epsilon = ctx.float("epsilon", 1e-5)?;
    let rms = ctx.node.op_type == "RMSNormalization";
    let xin = input_id(im, ctx, 0)?;
    let normalized = x.shape[axis..].to_vec();
    let scale = input_id(im, ctx, 1)?;
    let bias = if rms { None } else { ctx.input(2).map(|_| input_id(im, ctx, 2)).transpose()? };
    if !(wants(ctx, 1) || wants(ctx, 2)) {
        let mut ins = vec![xin, expand_to(im, ctx, scale, &normalized)?];
        if let Some(b) = bias {
            ins.push(expand_to(im, ctx, b, &normalized)?);
        }
        return output(im, ctx, 0, Op::Normalize { axis, epsilon, rms }, &ins);
    }
    // The statistics are wanted too: the schema's function body, node by node.
    let axes: Vec<usize> = (axis..x.rank()).collect();
    let mean_op = Op::Reduce { op: ReduceOp::Mean, axes: axes.clone(), keepdims: true };
    let mean = step(im, ctx, "mean", mean_op.clone(), &[xin])?;
    let d = step(im, ctx, "centered", Op::Binary(BinaryOp::Sub), &[xin, mean])?;
    let sq = step(im, ctx, "squared", Op::Binary(BinaryOp::Mul), &[d, d])?;
    let var = step(im, ctx, "variance", mean_op, &[sq])?;
    let eps = scalar(im, ctx, "epsilon", x.dtype, epsilon as f64);
    let var_eps = step(im, ctx, "variance_eps", Op::Binary(BinaryOp::Add), &[var, eps])?;
    let std = step(im, ctx, "std", Op::Unary(UnaryOp::Sqrt), &[var_eps])?;
    let inv = step(im, ctx, "inv_std", Op::Unary(UnaryOp::Reciprocal), &[std])?;
    let normed = step(im, ctx, "normalized", Op::Binary(BinaryOp::Mul), &[d, inv])?;
    match bias {
        Some(b) => {
            let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[normed, scale])?;
            output(im, ctx, 0, Op::Binary(BinaryOp::Add), &[scaled, b])?;
        }
        None => output(im, ctx, 0, Op::Binary(BinaryOp::Mul), &[normed, scale])?,
    }
    output(im, ctx, 1, Op::Identity, &[mean])?;
    output(im, ctx, 2, Op::Identity, &[inv])
}

/// `[C]` reshaped to broadcast along axis 1 of a rank-`rank` tensor.
fn per_channel(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, p: ValueId, rank: usize) -> Result<ValueId, ImportError> {
    let c = im.graph.ty(p).num_elements();
    let mut shape = vec![1; rank - 1];
    shape[0] = c;
    step(im, ctx, "per_channel", Op::Reshape { shape }, &[p])
}

fn instance_norm(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    if x.rank() < 3 {
        return Err(ctx.bad(format!("input must have rank >= 3, got {:?}", x.shape)));
    }
    let epsilon = ctx.float("epsilon", 1e-5)?;
    let xin = input_id(im, ctx, 0)?;
    let one = ones(im, ctx, x.dtype, &x.shape[2..])?;
    let normed = step(im, ctx, "normalized", Op::Normalize { axis: 2, epsilon, rms: false }, &[xin, one])?;
    let scale = input_id(im, ctx, 1)?;
    let scale = per_channel(im, ctx, scale, x.rank())?;
    let bias = input_id(im, ctx, 2)?;
    let bias = per_channel(im, ctx, bias, x.rank())?;
    let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[normed, scale])?;
    output(im, ctx, 0, Op::Binary(BinaryOp::Add), &[scaled, bias])
}

fn group_norm(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let groups = ctx.int("num_groups", 0)?;
    let c = x.shape.get(1).copied().unwrap_or(0);
    if x.rank() < 3 || groups < 1 || !c.is_multiple_of(groups as usize) {
        return Err(ctx.bad(format!("input {:?} does not split into num_groups = {groups}", x.shape)));
    }
    let g = groups as usize;
    let epsilon = ctx.float("epsilon", 1e-5)?;
    let rest = x.num_elements() / (x.shape[0] * g).max(1);
    let xin = input_id(im, ctx, 0)?;
    let grouped = step(im, ctx, "grouped", Op::Reshape { shape: vec![x.shape[0], g, rest] }, &[xin])?;
    let one = ones(im, ctx, x.dtype, &[rest])?;
    let normed = step(im, ctx, "normalized", Op::Normalize { axis: 2, epsilon, rms: false }, &[grouped, one])?;
    let (scale, bias) = (input_id(im, ctx, 1)?, input_id(im, ctx, 2)?);
    if ctx.version < 21 {
        // Version 18: one scale and bias per group.
        let scale = step(im, ctx, "group_scale", Op::Reshape { shape: vec![g, 1] }, &[scale])?;
        let bias = step(im, ctx, "group_bias", Op::Reshape { shape: vec![g, 1] }, &[bias])?;
        let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[normed, scale])?;
        let shifted = step(im, ctx, "shifted", Op::Binary(BinaryOp::Add), &[scaled, bias])?;
        return output(im, ctx, 0, Op::Reshape { shape: x.shape.clone() }, &[shifted]);
    }
    let back = step(im, ctx, "ungrouped", Op::Reshape { shape: x.shape.clone() }, &[normed])?;
    let scale = per_channel(im, ctx, scale, x.rank())?;
    let bias = per_channel(im, ctx, bias, x.rank())?;
    let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[back, scale])?;
    output(im, ctx, 0, Op::Binary(BinaryOp::Add), &[scaled, bias])
}

/// LRN: the sum of squares over a window of channels is an average pool (padding counted) of
/// the squares seen as `[N, 1, C, spatial]`, times the window size.
fn lrn(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let size = ctx.attr("size", super::at::INT)?.ok_or_else(|| ctx.bad_attr("size", "is required"))?.i;
    if x.rank() < 3 || size < 1 {
        return Err(ctx.bad(format!("needs rank >= 3 and size >= 1, got {:?} and {size}", x.shape)));
    }
    let size = size as usize;
    let (alpha, beta, bias) = (ctx.float("alpha", 1e-4)?, ctx.float("beta", 0.75)?, ctx.float("bias", 1.0)?);
    let xin = input_id(im, ctx, 0)?;
    let spatial: usize = x.shape[2..].iter().product();
    let sq = step(im, ctx, "squared", Op::Binary(BinaryOp::Mul), &[xin, xin])?;
    let view = step(im, ctx, "channels", Op::Reshape { shape: vec![x.shape[0], 1, x.shape[1], spatial] }, &[sq])?;
    let before = (size - 1) / 2;
    let window = Window {
        kernel: vec![size, 1],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads_begin: vec![before, 0],
        pads_end: vec![size - 1 - before, 0],
    };
    let pool = Op::AveragePool { pool: PoolAttrs { window, ceil_mode: false }, count_include_pad: true };
    let avg = step(im, ctx, "window_mean", pool, &[view])?;
    let avg = step(im, ctx, "window_mean_nd", Op::Reshape { shape: x.shape.clone() }, &[avg])?;
    let a = scalar(im, ctx, "alpha", x.dtype, alpha as f64);
    let b = scalar(im, ctx, "bias", x.dtype, bias as f64);
    let e = scalar(im, ctx, "beta", x.dtype, beta as f64);
    let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[avg, a])?;
    let base = step(im, ctx, "base", Op::Binary(BinaryOp::Add), &[scaled, b])?;
    let den = step(im, ctx, "denominator", Op::Binary(BinaryOp::Pow), &[base, e])?;
    output(im, ctx, 0, Op::Binary(BinaryOp::Div), &[xin, den])
}

fn sum_mean(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let names: Vec<&str> = (0..ctx.node.input.len()).filter_map(|i| ctx.input(i)).collect();
    let ids = names.iter().map(|n| im.value(ctx.name, n)).collect::<Result<Vec<_>, _>>()?;
    let Some((&first, rest)) = ids.split_first() else {
        return Err(ctx.bad("needs at least one input"));
    };
    let mean = ctx.node.op_type == "Mean";
    if rest.is_empty() {
        return output(im, ctx, 0, Op::Identity, &[first]);
    }
    let mut acc = first;
    for (i, &v) in rest.iter().enumerate() {
        if i + 1 == rest.len() && !mean {
            return output(im, ctx, 0, Op::Binary(BinaryOp::Add), &[acc, v]);
        }
        acc = step(im, ctx, &format!("partial{i}"), Op::Binary(BinaryOp::Add), &[acc, v])?;
    }
    let n = scalar(im, ctx, "count", im.graph.ty(first).dtype, ids.len() as f64);
    output(im, ctx, 0, Op::Binary(BinaryOp::Div), &[acc, n])
}

/// NegativeLogLikelihoodLoss of `input` ([N, C, d...], log-probabilities) against `target`
/// ([N, d...]), with optional class weights, `ignore_index` and the reduction.
fn nll(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    (input, x): (ValueId, &TensorType),
    target: ValueId,
    weight: Option<ValueId>,
) -> Result<(), ImportError> {
    if x.rank() < 2 {
        return Err(ctx.bad(format!("input must have rank >= 2, got {:?}", x.shape)));
    }
    let reduction = ctx.string("reduction", "mean")?;
    if !matches!(reduction.as_str(), "none" | "sum" | "mean") {
        return Err(ctx.bad_attr("reduction", format!("'{reduction}' is not none, sum or mean")));
    }
    let mut t = target;
    if im.graph.ty(t).dtype != DType::I64 {
        t = step(im, ctx, "target", Op::Cast { to: DType::I64 }, &[t])?;
    }
    let keep = match ctx.attr("ignore_index", super::at::INT)? {
        Some(a) => {
            let ignore = scalar(im, ctx, "ignore_index", DType::I64, a.i as f64);
            let ignored = step(im, ctx, "ignored", Op::Compare(CompareOp::Equal), &[t, ignore])?;
            let keep = step(im, ctx, "kept", Op::Not, &[ignored])?;
            let zero = scalar(im, ctx, "zero_index", DType::I64, 0.0);
            t = step(im, ctx, "safe_target", Op::Where, &[keep, t, zero])?;
            Some(keep)
        }
        None => None,
    };
    let t1 = step(im, ctx, "target_1", Op::Unsqueeze { axes: vec![1] }, &[t])?;
    let picked = step(im, ctx, "picked", Op::GatherElements { axis: 1 }, &[input, t1])?;
    let picked = step(im, ctx, "picked_nd", Op::Squeeze { axes: vec![1] }, &[picked])?;
    let mut w = match weight {
        Some(w) => Some(step(im, ctx, "weight", Op::Gather { axis: 0 }, &[w, t])?),
        None => None,
    };
    if let Some(keep) = keep {
        let one = scalar(im, ctx, "one", x.dtype, 1.0);
        let zero = scalar(im, ctx, "zero", x.dtype, 0.0);
        w = Some(step(im, ctx, "kept_weight", Op::Where, &[keep, w.unwrap_or(one), zero])?);
    }
    let weighted = match w {
        Some(w) => step(im, ctx, "weighted", Op::Binary(BinaryOp::Mul), &[picked, w])?,
        None => picked,
    };
    let all: Vec<usize> = (0..im.graph.ty(weighted).rank()).collect();
    let sum = |axes: &[usize]| Op::Reduce { op: ReduceOp::Sum, axes: axes.to_vec(), keepdims: false };
    match (reduction.as_str(), w) {
        ("none", _) => output(im, ctx, 0, Op::Unary(UnaryOp::Neg), &[weighted]),
        ("sum", _) => {
            let total = step(im, ctx, "total", sum(&all), &[weighted])?;
            output(im, ctx, 0, Op::Unary(UnaryOp::Neg), &[total])
        }
        (_, None) => {
            let mean =
                step(im, ctx, "mean", Op::Reduce { op: ReduceOp::Mean, axes: all, keepdims: false }, &[weighted])?;
            output(im, ctx, 0, Op::Unary(UnaryOp::Neg), &[mean])
        }
        (_, Some(w)) => {
            let total = step(im, ctx, "total", sum(&all), &[weighted])?;
            let wsum = step(im, ctx, "weight_total", sum(&all), &[w])?;
            let neg = step(im, ctx, "negated", Op::Unary(UnaryOp::Neg), &[total])?;
            output(im, ctx, 0, Op::Binary(BinaryOp::Div), &[neg, wsum])
        }
    }
}

/// Attention (versions 23 to 25), as its function body: optional 3-d inputs split into heads,
/// the KV cache concatenated, grouped-query heads repeated, `softmax(Q K^T * scale + bias) V`
/// with the bias from the mask, causality and sliding windows (bottom-right aligned) and the
/// non-padded KV lengths; a query row whose bias is all `-inf` gives zeros.
fn attention(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let q_ty = input_type(im, ctx, 0)?;
    let dtype = q_ty.dtype;
    let rank = q_ty.rank();
    if rank != 3 && rank != 4 {
        return Err(ctx.bad(format!("Q must be 3-d or 4-d, got {:?}", q_ty.shape)));
    }
    let heads = |im: &mut Importer<'_>, i: usize, attr: &str| -> Result<(ValueId, usize), ImportError> {
        let id = input_id(im, ctx, i)?;
        let ty = im.graph.ty(id).clone();
        if ty.rank() != rank {
            return Err(ctx.bad(format!("Q, K and V must have one rank, got {:?} and {:?}", q_ty.shape, ty.shape)));
        }
        if rank == 4 {
            return Ok((id, ty.shape[1]));
        }
        let h = ctx.int(attr, 0)?;
        if h < 1 || !ty.shape[2].is_multiple_of(h as usize) {
            return Err(ctx.bad_attr(attr, format!("{h} heads do not split hidden size {}", ty.shape[2])));
        }
        let h = h as usize;
        let split = vec![ty.shape[0], ty.shape[1], h, ty.shape[2] / h];
        let r = step(im, ctx, "heads", Op::Reshape { shape: split }, &[id])?;
        Ok((step(im, ctx, "heads_first", Op::Transpose { perm: vec![0, 2, 1, 3] }, &[r])?, h))
    };
    let (q, qh) = heads(im, 0, "q_num_heads")?;
    let (mut k, kh) = heads(im, 1, "kv_num_heads")?;
    let (mut v, vh) = heads(im, 2, "kv_num_heads")?;
    let head_size = im.graph.ty(q).shape[3];
    let past = ctx.input(4).is_some();
    if past != ctx.input(5).is_some() {
        return Err(ctx.bad("past_key and past_value must be given together"));
    }
    if past {
        let (pk, pv) = (input_id(im, ctx, 4)?, input_id(im, ctx, 5)?);
        k = step(im, ctx, "key_cache", Op::Concat { axis: 2 }, &[pk, k])?;
        v = step(im, ctx, "value_cache", Op::Concat { axis: 2 }, &[pv, v])?;
    }
    output(im, ctx, 1, Op::Identity, &[k])?;
    output(im, ctx, 2, Op::Identity, &[v])?;
    let (sq, skv) = (im.graph.ty(q).shape[2], im.graph.ty(k).shape[2]);
    let past_len = if past { im.graph.ty(input_id(im, ctx, 4)?).shape[2] } else { 0 };
    let nonpad = if ctx.version >= 24 { ctx.input(6).map(|_| input_id(im, ctx, 6)).transpose()? } else { None };
    if nonpad.is_some() && past {
        return Err(ctx.bad("nonpad_kv_seqlen cannot be combined with past_key/past_value"));
    }
    let neg_inf = scalar(im, ctx, "neg_inf", dtype, f64::NEG_INFINITY);
    let zero = scalar(im, ctx, "zero", dtype, 0.0);
    // The additive bias: the mask (padded to the KV length), then causality, then padding.
    let mut bias = match ctx.input(3) {
        None => None,
        Some(_) => {
            let mut m = input_id(im, ctx, 3)?;
            let mty = im.graph.ty(m).clone();
            let is_bool = mty.dtype == DType::Bool;
            let last = *mty.shape.last().ok_or_else(|| ctx.bad("attn_mask must have rank >= 1"))?;
            if last < skv {
                let mut pads = vec![0i64; 2 * mty.rank()];
                pads[2 * mty.rank() - 1] = (skv - last) as i64;
                let value = if is_bool {
                    Tensor::from_vec::<bool>(&[], vec![false])
                } else {
                    Ok(Tensor::scalar_from_f64(dtype, f64::NEG_INFINITY))
                }
                .map_err(|e| ctx.bad(e))?;
                m = step(im, ctx, "mask_padded", Op::Pad { pads, mode: crate::op::PadMode::Constant, value }, &[m])?;
            }
            Some(if is_bool { step(im, ctx, "mask_bias", Op::Where, &[m, zero, neg_inf])? } else { m })
        }
    };
    // Causal and window masks compare each key position j with the query's position
    // i + offset: offset is the cache length, or per batch nonpad_kv_seqlen[b] - sq.
    let (left, right) = if ctx.version >= 25 {
        (ctx.int("left_window_size", -1)?, ctx.int("right_window_size", -1)?)
    } else {
        (-1, -1)
    };
    let causal = ctx.int("is_causal", 0)? != 0;
    if causal || left >= 0 || right >= 0 {
        let offset = match nonpad {
            None => scalar(im, ctx, "query_offset", DType::I64, past_len as f64),
            Some(lens) => {
                let lens = step(im, ctx, "kv_lens", Op::Cast { to: DType::I64 }, &[lens])?;
                let b = im.graph.ty(lens).num_elements();
                let lens = step(im, ctx, "kv_lens_4d", Op::Reshape { shape: vec![b, 1, 1, 1] }, &[lens])?;
                let sq_c = scalar(im, ctx, "q_len", DType::I64, sq as f64);
                step(im, ctx, "query_offset", Op::Binary(BinaryOp::Sub), &[lens, sq_c])?
            }
        };
        // rel[i, j] = j - i.
        let data: Vec<i64> = (0..sq * skv).map(|p| (p % skv) as i64 - (p / skv) as i64).collect();
        let rel =
            constant(im, ctx, "relative_positions", Tensor::from_vec::<i64>(&[sq, skv], data).map_err(|e| ctx.bad(e))?);
        let mut add_mask = |im: &mut Importer<'_>, what: &str, allowed: ValueId| -> Result<(), ImportError> {
            let m = step(im, ctx, what, Op::Where, &[allowed, zero, neg_inf])?;
            bias = Some(match bias {
                Some(b) => step(im, ctx, what, Op::Binary(BinaryOp::Add), &[b, m])?,
                None => m,
            });
            Ok(())
        };
        if causal {
            let allowed = step(im, ctx, "causal_allowed", Op::Compare(CompareOp::LessOrEqual), &[rel, offset])?;
            add_mask(im, "causal", allowed)?;
        }
        // diff = i + offset - j; keys within `left` before and `right` after the query.
        let diff = step(im, ctx, "distance", Op::Binary(BinaryOp::Sub), &[offset, rel])?;
        if left >= 0 {
            let l = scalar(im, ctx, "left_window", DType::I64, left as f64);
            let allowed = step(im, ctx, "left_allowed", Op::Compare(CompareOp::LessOrEqual), &[diff, l])?;
            add_mask(im, "left_window", allowed)?;
        }
        if right >= 0 {
            let r = scalar(im, ctx, "right_window", DType::I64, -right as f64);
            let allowed = step(im, ctx, "right_allowed", Op::Compare(CompareOp::GreaterOrEqual), &[diff, r])?;
            add_mask(im, "right_window", allowed)?;
        }
    }
    if let Some(lens) = nonpad {
        let lens = step(im, ctx, "pad_lens", Op::Cast { to: DType::I64 }, &[lens])?;
        let b = im.graph.ty(lens).num_elements();
        let lens = step(im, ctx, "pad_lens_4d", Op::Reshape { shape: vec![b, 1, 1, 1] }, &[lens])?;
        let t = Tensor::from_vec::<i64>(&[skv], (0..skv as i64).collect()).map_err(|e| ctx.bad(e))?;
        let j = constant(im, ctx, "kv_positions", t);
        let valid = step(im, ctx, "kv_valid", Op::Compare(CompareOp::Less), &[j, lens])?;
        let padding = step(im, ctx, "padding", Op::Where, &[valid, zero, neg_inf])?;
        bias = Some(match bias {
            Some(b) => step(im, ctx, "padded_bias", Op::Binary(BinaryOp::Add), &[b, padding])?,
            None => padding,
        });
    }
    // Grouped-query attention: each KV head serves qh / kh consecutive query heads.
    if qh != kh {
        if kh != vh || !qh.is_multiple_of(kh) {
            return Err(ctx.bad(format!("{qh} query heads cannot share {kh} key and {vh} value heads")));
        }
        let repeat = |im: &mut Importer<'_>, x: ValueId, what: &str| -> Result<ValueId, ImportError> {
            let s = im.graph.ty(x).shape.clone();
            let u = step(im, ctx, what, Op::Unsqueeze { axes: vec![2] }, &[x])?;
            let e = step(im, ctx, what, Op::Expand { shape: vec![s[0], kh, qh / kh, s[2], s[3]] }, &[u])?;
            step(im, ctx, what, Op::Reshape { shape: vec![s[0], qh, s[2], s[3]] }, &[e])
        };
        k = repeat(im, k, "key_repeated")?;
        v = repeat(im, v, "value_repeated")?;
    }
    let scale = match ctx.attr("scale", super::at::FLOAT)? {
        Some(a) => a.f as f64,
        None => 1.0 / (head_size as f64).sqrt(),
    };
    // Q and K each scaled by sqrt(scale), as the function body does.
    let s = scalar(im, ctx, "scale_sqrt", dtype, (scale.sqrt() as f32) as f64);
    let qs = step(im, ctx, "q_scaled", Op::Binary(BinaryOp::Mul), &[q, s])?;
    let ks = step(im, ctx, "k_scaled", Op::Binary(BinaryOp::Mul), &[k, s])?;
    let kt = step(im, ctx, "k_transposed", Op::Transpose { perm: vec![0, 1, 3, 2] }, &[ks])?;
    let mut qk = step(im, ctx, "qk", Op::MatMul, &[qs, kt])?;
    let softcap = ctx.float("softcap", 0.0)?;
    if softcap > 0.0 {
        let c = scalar(im, ctx, "softcap", dtype, softcap as f64);
        let d = step(im, ctx, "qk_over_cap", Op::Binary(BinaryOp::Div), &[qk, c])?;
        let t = step(im, ctx, "qk_tanh", Op::Unary(UnaryOp::Tanh), &[d])?;
        qk = step(im, ctx, "qk_capped", Op::Binary(BinaryOp::Mul), &[t, c])?;
    }
    let scores = match bias {
        Some(b) => step(im, ctx, "qk_biased", Op::Binary(BinaryOp::Add), &[qk, b])?,
        None => qk,
    };
    let mode = ctx.int("qk_matmul_output_mode", 0)?;
    let last = im.graph.ty(scores).rank() - 1;
    let mut probs = step(im, ctx, "probs", Op::Softmax { axis: last, coerce_2d: false, log: false }, &[scores])?;
    if let Some(b) = bias {
        // Rows whose bias is all -inf attend nothing: zeros, not NaN.
        let brank = im.graph.ty(b).rank();
        let max = Op::Reduce { op: ReduceOp::Max, axes: vec![brank - 1], keepdims: true };
        let m = step(im, ctx, "bias_max", max, &[b])?;
        let masked = step(im, ctx, "row_masked", Op::Compare(CompareOp::Equal), &[m, neg_inf])?;
        probs = step(im, ctx, "probs_guarded", Op::Where, &[masked, zero, probs])?;
    }
    match mode {
        0 | 1 => output(im, ctx, 3, Op::Identity, &[qk])?,
        2 => output(im, ctx, 3, Op::Identity, &[scores])?,
        3 => output(im, ctx, 3, Op::Identity, &[probs])?,
        m => return Err(ctx.bad_attr("qk_matmul_output_mode", format!("{m} is not 0, 1, 2 or 3"))),
    }
    if rank == 4 {
        return output(im, ctx, 0, Op::MatMul, &[probs, v]);
    }
    let y = step(im, ctx, "y_heads", Op::MatMul, &[probs, v])?;
    let y = step(im, ctx, "y_seq_first", Op::Transpose { perm: vec![0, 2, 1, 3] }, &[y])?;
    let s = im.graph.ty(y).shape.clone();
    output(im, ctx, 0, Op::Reshape { shape: vec![s[0], s[1], s[2] * s[3]] }, &[y])
}

/// ConvTranspose as a convolution: the input with `stride - 1` zeros between elements, padded
/// by `(k - 1) * dilation - pad` (cropped where that is negative, plus `output_padding` at the
/// end), convolved with the weights' in/out channels swapped per group and taps reversed.
fn conv_transpose(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let w = input_type(im, ctx, 1)?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(ctx.bad(format!("input {:?} and weight {:?} must have equal rank >= 3", x.shape, w.shape)));
    }
    let m = x.rank() - 2;
    let group = ctx.int("group", 1)?;
    let (cin, cout_g) = (x.shape[1], w.shape[1]);
    if group < 1 || w.shape[0] != cin || !cin.is_multiple_of(group as usize) {
        return Err(ctx.bad(format!("weight {:?} does not fit input channels {cin} in {group} groups", w.shape)));
    }
    let g = group as usize;
    let ints = |name: &str, default: usize| -> Result<Vec<usize>, ImportError> {
        match ctx.ints(name)? {
            Some(v) if v.len() == m => super::to_usizes(ctx, name, &v, 0),
            Some(v) => Err(ctx.bad_attr(name, format!("has {} entries for {m} spatial axes", v.len()))),
            None => Ok(vec![default; m]),
        }
    };
    let kernel = match ctx.ints("kernel_shape")? {
        Some(k) => super::to_usizes(ctx, "kernel_shape", &k, 1)?,
        None => w.shape[2..].to_vec(),
    };
    if kernel != w.shape[2..] {
        return Err(ctx.bad_attr("kernel_shape", format!("{kernel:?} differs from the weight's {:?}", &w.shape[2..])));
    }
    let strides = ints("strides", 1)?;
    let dilations = ints("dilations", 1)?;
    let out_pad = ints("output_padding", 0)?;
    if strides.iter().chain(&dilations).any(|&v| v == 0) {
        return Err(ctx.bad("strides and dilations must be >= 1"));
    }
    // Bounded so the extent arithmetic below stays far inside i64 (any larger output is over
    // every tensor limit anyway).
    const MAX_EXTENT: i64 = 1 << 40;
    let fits = |v: i64| (0..=MAX_EXTENT).contains(&v);
    let spans = (0..m).map(|d| {
        (strides[d] as i128 * (x.shape[d + 2] as i128) + out_pad[d] as i128 + kernel[d] as i128 * dilations[d] as i128)
            .min(i64::MAX as i128) as i64
    });
    if spans.into_iter().any(|v| !fits(v)) || ctx.ints("pads")?.unwrap_or_default().iter().any(|&p| !fits(p)) {
        return Err(
            ctx.bad(format!("strides, dilations, pads or output_padding make an axis longer than {MAX_EXTENT}"))
        );
    }
    let span = |d: usize| (kernel[d] as i64 - 1) * dilations[d] as i64 + 1;
    let full = |d: usize| strides[d] as i64 * (x.shape[d + 2] as i64 - 1) + out_pad[d] as i64 + span(d);
    let auto_pad = ctx.string("auto_pad", "NOTSET")?;
    let output_shape = ctx.ints("output_shape")?.map(|s| s[s.len().saturating_sub(m)..].to_vec());
    if !matches!(auto_pad.as_str(), "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER") {
        return Err(ctx.bad_attr("auto_pad", format!("unknown value '{auto_pad}'")));
    }
    let explicit = || -> Result<(Vec<i64>, Vec<i64>), ImportError> {
        let pads = ctx.ints("pads")?.unwrap_or(vec![0; 2 * m]);
        if pads.len() != 2 * m || pads.iter().any(|&p| p < 0) {
            return Err(ctx.bad_attr("pads", format!("{pads:?} must be {} non-negative values", 2 * m)));
        }
        Ok((pads[..m].to_vec(), pads[m..].to_vec()))
    };
    let target = match output_shape {
        Some(t) if t.len() == m && t.iter().all(|&v| fits(v)) => Some(t),
        Some(t) => return Err(ctx.bad_attr("output_shape", format!("{t:?} needs {m} spatial sizes"))),
        None => None,
    };
    let (pads_begin, pads_end): (Vec<i64>, Vec<i64>) = match (auto_pad.as_str(), target) {
        ("VALID", _) => (vec![0; m], vec![0; m]),
        // An explicit output shape keeps the start padding; the end grows or shrinks to fit.
        ("NOTSET", Some(t)) => {
            let (begin, _) = explicit()?;
            let end = (0..m).map(|d| full(d) - t[d] - begin[d]).collect();
            (begin, end)
        }
        ("NOTSET", None) => explicit()?,
        (mode, target) => {
            // SAME: the output is `output_shape`, or the input times the stride.
            let t = target.unwrap_or_else(|| (0..m).map(|d| x.shape[d + 2] as i64 * strides[d] as i64).collect());
            (0..m)
                .map(|d| {
                    let total = full(d) - t[d];
                    let half = total.div_euclid(2);
                    if mode == "SAME_UPPER" { (half, total - half) } else { (total - half, half) }
                })
                .unzip()
        }
    };
    for d in 0..m {
        if full(d) - pads_begin[d] - pads_end[d] < 1 {
            return Err(
                ctx.bad(format!("spatial axis {d} has no output (padding {} + {})", pads_begin[d], pads_end[d]))
            );
        }
    }
    let mut xin = input_id(im, ctx, 0)?;
    let (n, spatial) = (x.shape[0], x.shape[2..].to_vec());
    // Zeros between the input's elements: [N, C, D, 1, ...] padded to [N, C, D, s, ...].
    if strides.iter().any(|&s| s > 1) {
        let mut split = vec![n, cin];
        let mut pads = vec![0i64; 2 * (2 + 2 * m)];
        for d in 0..m {
            split.extend([spatial[d], 1]);
            pads[2 + 2 * m + 3 + 2 * d] = strides[d] as i64 - 1;
        }
        let r = step(im, ctx, "split_spatial", Op::Reshape { shape: split }, &[xin])?;
        let zero = Tensor::scalar_from_f64(x.dtype, 0.0);
        let p = step(im, ctx, "zero_stuffed", Op::Pad { pads, mode: crate::op::PadMode::Constant, value: zero }, &[r])?;
        let mut joined = vec![n, cin];
        joined.extend((0..m).map(|d| spatial[d] * strides[d]));
        xin = step(im, ctx, "stuffed", Op::Reshape { shape: joined }, &[p])?;
    }
    // Crop the stuffing's tail and any negative padding; pad the rest in the convolution.
    let mut axes: Vec<crate::op::SliceAxis> =
        im.graph.ty(xin).shape.iter().map(|&len| crate::op::SliceAxis { start: 0, step: 1, len }).collect();
    let (mut conv_begin, mut conv_end) = (vec![0usize; m], vec![0usize; m]);
    let mut crop = false;
    for d in 0..m {
        let stuffed = (spatial[d] as i64 - 1) * strides[d] as i64 + 1;
        let left = span(d) - 1 - pads_begin[d];
        let right = span(d) - 1 - pads_end[d] + out_pad[d] as i64;
        let start = (-left).max(0);
        let end = stuffed - (-right).max(0);
        if end <= start {
            return Err(ctx.bad(format!("padding crops all of spatial axis {d}")));
        }
        crop |= start > 0 || end != axes[d + 2].len as i64;
        axes[d + 2] = crate::op::SliceAxis { start: start as usize, step: 1, len: (end - start) as usize };
        conv_begin[d] = left.max(0) as usize;
        conv_end[d] = right.max(0) as usize;
    }
    if crop {
        xin = step(im, ctx, "cropped", Op::Slice { axes }, &[xin])?;
    }
    // Weights [Cin, Cout/g, k...] -> [g * Cout/g, Cin/g, k...], taps reversed.
    let win = input_id(im, ctx, 1)?;
    let cin_g = cin / g;
    let mut grouped = vec![g, cin_g, cout_g];
    grouped.extend_from_slice(&kernel);
    let wr = step(im, ctx, "w_grouped", Op::Reshape { shape: grouped }, &[win])?;
    let mut perm = vec![0, 2, 1];
    perm.extend(3..3 + m);
    let wt = step(im, ctx, "w_swapped", Op::Transpose { perm }, &[wr])?;
    let mut conv_w = vec![g * cout_g, cin_g];
    conv_w.extend_from_slice(&kernel);
    let wc = step(im, ctx, "w_conv", Op::Reshape { shape: conv_w.clone() }, &[wt])?;
    let flip = conv_w
        .iter()
        .enumerate()
        .map(|(d, &len)| {
            if d < 2 || len == 1 {
                crate::op::SliceAxis { start: 0, step: 1, len }
            } else {
                crate::op::SliceAxis { start: len - 1, step: -1, len }
            }
        })
        .collect();
    let wf = step(im, ctx, "w_flipped", Op::Slice { axes: flip }, &[wc])?;
    let window = Window {
        kernel: kernel.clone(),
        strides: vec![1; m],
        dilations: dilations.clone(),
        pads_begin: conv_begin,
        pads_end: conv_end,
    };
    let mut ins = vec![xin, wf];
    if ctx.input(2).is_some() {
        ins.push(input_id(im, ctx, 2)?);
    }
    output(im, ctx, 0, Op::Conv(crate::op::ConvAttrs { window, group: g }), &ins)
}
