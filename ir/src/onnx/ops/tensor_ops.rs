//! Indexing and data-movement operators: Gather family, Scatter family, Slice, Split, Expand,
//! Tile, Range, EyeLike, Trilu, CumSum, TopK, OneHot, DepthToSpace, SpaceToDepth, Hardmax.

use crate::dtype::{DType, TensorType};
use crate::graph::ValueId;
use crate::op::{CompareOp, Op, ScatterReduction, SliceAxis};
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::build::{constant, output, scalar, step, wants};
use super::{NodeCtx, const_ints, input_type, norm_axis, to_usizes};

/// The value of input `i` (required).
pub(super) fn input_id(im: &Importer<'_>, ctx: &NodeCtx<'_>, i: usize) -> Result<ValueId, ImportError> {
    let name = ctx.input(i).ok_or_else(|| ctx.bad(format!("input {i} is required")))?;
    im.value(ctx.name, name)
}

/// A scalar compile-time integer input (Range, CumSum's axis, TopK's k, OneHot's depth).
pub(super) fn const_scalar(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, i: usize, what: &str) -> Result<i64, ImportError> {
    let v = const_ints(im, ctx, i, what)?.ok_or_else(|| ctx.bad(format!("input {i} ({what}) is required")))?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(ctx.bad(format!("{what} must hold one value, got {}", v.len()))),
    }
}

/// The operators translated here.
pub(super) const OPS: &[&str] = &[
    "Gather",
    "GatherElements",
    "GatherND",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Slice",
    "Split",
    "Expand",
    "Tile",
    "Range",
    "EyeLike",
    "Trilu",
    "CumSum",
    "CumProd",
    "TopK",
    "OneHot",
    "DepthToSpace",
    "SpaceToDepth",
    "Hardmax",
    "NonZero",
    "Compress",
    "GridSample",
    "ReverseSequence",
    "MaxUnpool",
    "TensorScatter",
];

pub(super) fn import(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let v = ctx.version;
    match ctx.node.op_type.as_str() {
        "Gather" => {
            let x = input_type(im, ctx, 0)?;
            let axis = norm_axis(ctx, "axis", ctx.int("axis", 0)?, x.rank())?;
            let ins = [input_id(im, ctx, 0)?, input_id(im, ctx, 1)?];
            output(im, ctx, 0, Op::Gather { axis }, &ins)
        }
        "GatherElements" => {
            let x = input_type(im, ctx, 0)?;
            let axis = norm_axis(ctx, "axis", ctx.int("axis", 0)?, x.rank())?;
            let ins = [input_id(im, ctx, 0)?, input_id(im, ctx, 1)?];
            output(im, ctx, 0, Op::GatherElements { axis }, &ins)
        }
        "GatherND" => {
            let batch_dims = if v >= 12 { ctx.int("batch_dims", 0)? } else { 0 };
            let batch_dims = to_usizes(ctx, "batch_dims", &[batch_dims], 0)?[0];
            let ins = [input_id(im, ctx, 0)?, input_id(im, ctx, 1)?];
            output(im, ctx, 0, Op::GatherND { batch_dims }, &ins)
        }
        "ScatterElements" | "Scatter" | "ScatterND" => {
            let reduction = match ctx.string("reduction", "none")?.as_str() {
                "none" => ScatterReduction::None,
                "add" if v >= 16 => ScatterReduction::Add,
                "mul" if v >= 16 => ScatterReduction::Mul,
                "max" if v >= 18 => ScatterReduction::Max,
                "min" if v >= 18 => ScatterReduction::Min,
                other => return Err(ctx.bad_attr("reduction", format!("'{other}' is not defined at version {v}"))),
            };
            let ins = [input_id(im, ctx, 0)?, input_id(im, ctx, 1)?, input_id(im, ctx, 2)?];
            let op = if ctx.node.op_type == "ScatterND" {
                Op::ScatterND { reduction }
            } else {
                let x = input_type(im, ctx, 0)?;
                Op::ScatterElements { axis: norm_axis(ctx, "axis", ctx.int("axis", 0)?, x.rank())?, reduction }
            };
            output(im, ctx, 0, op, &ins)
        }
        "Slice" => {
            let x = input_type(im, ctx, 0)?;
            let (starts, ends, axes, steps) = if v < 10 {
                let starts = ctx.ints("starts")?.ok_or_else(|| ctx.bad_attr("starts", "is required"))?;
                let ends = ctx.ints("ends")?.ok_or_else(|| ctx.bad_attr("ends", "is required"))?;
                (starts, ends, ctx.ints("axes")?, None)
            } else {
                let starts =
                    const_ints(im, ctx, 1, "starts")?.ok_or_else(|| ctx.bad("input 1 (starts) is required"))?;
                let ends = const_ints(im, ctx, 2, "ends")?.ok_or_else(|| ctx.bad("input 2 (ends) is required"))?;
                (starts, ends, const_ints(im, ctx, 3, "axes")?, const_ints(im, ctx, 4, "steps")?)
            };
            let axes = slice_axes(ctx, &x.shape, &starts, &ends, axes.as_deref(), steps.as_deref())?;
            let ins = [input_id(im, ctx, 0)?];
            output(im, ctx, 0, Op::Slice { axes }, &ins)
        }
        "Split" => import_split(im, ctx),
        "Expand" => {
            let shape = const_ints(im, ctx, 1, "shape")?.ok_or_else(|| ctx.bad("input 1 (shape) is required"))?;
            let shape = to_usizes(ctx, "shape", &shape, 0)?;
            let ins = [input_id(im, ctx, 0)?];
            output(im, ctx, 0, Op::Expand { shape }, &ins)
        }
        "Tile" => {
            let repeats = const_ints(im, ctx, 1, "repeats")?.ok_or_else(|| ctx.bad("input 1 (repeats) is required"))?;
            let repeats = to_usizes(ctx, "repeats", &repeats, 0)?;
            let ins = [input_id(im, ctx, 0)?];
            output(im, ctx, 0, Op::Tile { repeats }, &ins)
        }
        "Range" => import_range(im, ctx),
        "ReverseSequence" => import_reverse_sequence(im, ctx),
        "MaxUnpool" => import_max_unpool(im, ctx),
        "TensorScatter" => import_tensor_scatter(im, ctx),
        "EyeLike" => {
            let x = input_type(im, ctx, 0)?;
            if x.rank() != 2 {
                return Err(ctx.bad(format!("input must be 2-d, got {:?}", x.shape)));
            }
            let dtype = match ctx.attr("dtype", super::at::INT)? {
                Some(a) => DType::from_onnx_code(a.i as i32).map_err(|dtype| ImportError::UnsupportedDtype {
                    context: format!("node '{}' (EyeLike) dtype", ctx.name),
                    dtype,
                })?,
                None => x.dtype,
            };
            let k = ctx.int("k", 0)?;
            let (rows, cols) = (x.shape[0], x.shape[1]);
            let data = (0..rows * cols).map(|p| ((p % cols) as i64 - (p / cols) as i64 == k) as u8 as f64).collect();
            let eye = Tensor::from_vec::<f64>(&x.shape, data).map_err(|e| ctx.bad(e))?.cast(dtype);
            let id = constant(im, ctx, "eye", eye);
            output(im, ctx, 0, Op::Identity, &[id])
        }
        "Trilu" => {
            let x = input_type(im, ctx, 0)?;
            if x.rank() < 2 {
                return Err(ctx.bad(format!("input must have rank >= 2, got {:?}", x.shape)));
            }
            let k = match ctx.input(1) {
                Some(_) => const_scalar(im, ctx, 1, "k")?,
                None => 0,
            };
            let upper = ctx.flag("upper", true)?;
            let (rows, cols) = (x.shape[x.rank() - 2], x.shape[x.rank() - 1]);
            let keep: Vec<bool> = (0..rows * cols)
                .map(|p| {
                    let d = (p % cols) as i128 - (p / cols) as i128;
                    if upper { d >= k as i128 } else { d <= k as i128 }
                })
                .collect();
            let mask = constant(im, ctx, "mask", Tensor::from_vec(&[rows, cols], keep).map_err(|e| ctx.bad(e))?);
            let zero = scalar(im, ctx, "zero", x.dtype, 0.0);
            let xin = input_id(im, ctx, 0)?;
            output(im, ctx, 0, Op::Where, &[mask, xin, zero])
        }
        "CumSum" | "CumProd" => {
            let x = input_type(im, ctx, 0)?;
            let axis = norm_axis(ctx, "axis", const_scalar(im, ctx, 1, "axis")?, x.rank())?;
            let op = Op::CumSum {
                axis,
                exclusive: ctx.flag("exclusive", false)?,
                reverse: ctx.flag("reverse", false)?,
                product: ctx.node.op_type == "CumProd",
            };
            let ins = [input_id(im, ctx, 0)?];
            output(im, ctx, 0, op, &ins)
        }
        "TopK" => {
            let x = input_type(im, ctx, 0)?;
            let axis = norm_axis(ctx, "axis", ctx.int("axis", -1)?, x.rank())?;
            let k = if v < 10 {
                ctx.attr("k", super::at::INT)?.ok_or_else(|| ctx.bad_attr("k", "is required"))?.i
            } else {
                const_scalar(im, ctx, 1, "k")?
            };
            let k = to_usizes(ctx, "k", &[k], 0)?[0];
            let largest = v < 11 || ctx.flag("largest", true)?;
            let name = ctx.name.to_string();
            let outs: Vec<String> = (0..2)
                .map(|i| match ctx.node.output.get(i).filter(|o| !o.is_empty()) {
                    Some(o) => o.clone(),
                    None => im.fresh_name(&format!("{name}:unused{i}")),
                })
                .collect();
            let ins = [input_id(im, ctx, 0)?];
            let ids = im.graph.add_node_named(name, Op::TopK { axis, k, largest }, &ins, outs.clone())?;
            for (i, (o, id)) in outs.into_iter().zip(ids).enumerate() {
                if wants(ctx, i) && im.names.insert(o.clone(), id).is_some() {
                    return Err(ImportError::DuplicateValue(o));
                }
            }
            Ok(())
        }
        "OneHot" => import_one_hot(im, ctx),
        "DepthToSpace" | "SpaceToDepth" => import_depth_space(im, ctx),
        "Hardmax" => import_hardmax(im, ctx),
        "GridSample" => {
            use crate::op::{GridMode, GridPadding};
            let default = if v < 20 { "bilinear" } else { "linear" };
            let mode = match ctx.string("mode", default)?.as_str() {
                "nearest" => GridMode::Nearest,
                "bilinear" if v < 20 => GridMode::Linear,
                "bicubic" if v < 20 => GridMode::Cubic,
                "linear" if v >= 20 => GridMode::Linear,
                "cubic" if v >= 20 => GridMode::Cubic,
                other => return Err(ctx.bad_attr("mode", format!("'{other}' is not defined at version {v}"))),
            };
            let padding = match ctx.string("padding_mode", "zeros")?.as_str() {
                "zeros" => GridPadding::Zeros,
                "border" => GridPadding::Border,
                "reflection" => GridPadding::Reflection,
                other => return Err(ctx.bad_attr("padding_mode", format!("unknown mode '{other}'"))),
            };
            let x = input_type(im, ctx, 0)?;
            if v < 20 && x.rank() != 4 {
                return Err(ctx.bad(format!("version {v} samples 4-d inputs, got {:?}", x.shape)));
            }
            let op = Op::GridSample { mode, padding, align_corners: ctx.flag("align_corners", false)? };
            let ins = [input_id(im, ctx, 0)?, input_id(im, ctx, 1)?];
            output(im, ctx, 0, op, &ins)
        }
        "NonZero" => {
            // Folds when its input is a constant; otherwise how many elements are non-zero
            // decides the output's shape.
            let Some(t) = super::const_input_opt(im, ctx, 0)? else {
                return Err(data_dependent(
                    ctx,
                    "the count of non-zero elements; it is supported on compile-time constants",
                ));
            };
            let flat = t.to_f64_vec();
            let shape = t.shape().to_vec();
            let hits: Vec<usize> = (0..flat.len()).filter(|&p| flat[p] != 0.0).collect();
            let mut coords = vec![0i64; shape.len() * hits.len()];
            for (j, &p) in hits.iter().enumerate() {
                let mut rest = p;
                for d in (0..shape.len()).rev() {
                    coords[d * hits.len() + j] = (rest % shape[d]) as i64;
                    rest /= shape[d];
                }
            }
            let t = Tensor::from_vec::<i64>(&[shape.len(), hits.len()], coords).map_err(|e| ctx.bad(e))?;
            let id = constant(im, ctx, "nonzero", t);
            output(im, ctx, 0, Op::Identity, &[id])
        }
        "Compress" => {
            // A constant condition selects fixed indices: a Gather.
            let Some(cond) = super::const_input_opt(im, ctx, 1)? else {
                return Err(data_dependent(
                    ctx,
                    "the count of true conditions; it is supported with a compile-time condition",
                ));
            };
            let x = input_type(im, ctx, 0)?;
            let mut xin = input_id(im, ctx, 0)?;
            let axis = match ctx.attr("axis", super::at::INT)? {
                Some(a) => norm_axis(ctx, "axis", a.i, x.rank())?,
                None => {
                    xin = step(im, ctx, "flat", Op::Reshape { shape: vec![x.num_elements()] }, &[xin])?;
                    0
                }
            };
            let len = im.graph.ty(xin).shape[axis];
            let keep: Vec<i64> = cond
                .to_f64_vec()
                .iter()
                .enumerate()
                .filter(|&(i, &c)| c != 0.0 && i < len)
                .map(|(i, _)| i as i64)
                .collect();
            let idx = constant(im, ctx, "kept", Tensor::from_vec::<i64>(&[keep.len()], keep).map_err(|e| ctx.bad(e))?);
            output(im, ctx, 0, Op::Gather { axis }, &[xin, idx])
        }
        other => Err(ctx.bad(format!("no translation for {other}"))),
    }
}

fn data_dependent(ctx: &NodeCtx<'_>, reason: &str) -> ImportError {
    ImportError::DataDependent { node: ctx.name.to_string(), op: ctx.op(), reason: reason.to_string() }
}

/// ONNX Slice's clamping rules, per axis.
fn slice_axes(
    ctx: &NodeCtx<'_>,
    shape: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<SliceAxis>, ImportError> {
    let r = shape.len();
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&a| norm_axis(ctx, "axes", a, r)).collect::<Result<_, _>>()?,
        None => (0..starts.len()).collect(),
    };
    let steps = steps.map_or_else(|| vec![1; axes.len()], <[i64]>::to_vec);
    if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
        return Err(ctx.bad(format!(
            "starts ({}), ends ({}), axes ({}) and steps ({}) must have one entry per sliced axis",
            starts.len(),
            ends.len(),
            axes.len(),
            steps.len()
        )));
    }
    let mut out: Vec<SliceAxis> = shape.iter().map(|&n| SliceAxis { start: 0, step: 1, len: n }).collect();
    let mut seen = vec![false; r];
    for (j, &a) in axes.iter().enumerate() {
        if std::mem::replace(&mut seen[a], true) {
            return Err(ctx.bad_attr("axes", format!("axis {a} is repeated")));
        }
        let n = shape[a] as i128;
        let step = steps[j];
        if step == 0 {
            return Err(ctx.bad("steps must not be 0"));
        }
        if n == 0 {
            out[a] = SliceAxis { start: 0, step, len: 0 };
            continue;
        }
        let norm = |v: i64| if v < 0 { v as i128 + n } else { v as i128 };
        let (start, len) = if step > 0 {
            let (s, e) = (norm(starts[j]).clamp(0, n), norm(ends[j]).clamp(0, n));
            (s, ((e - s).max(0) as u128).div_ceil(step as u128))
        } else {
            let (s, e) = (norm(starts[j]).clamp(0, n - 1), norm(ends[j]).clamp(-1, n - 1));
            (s, ((s - e).max(0) as u128).div_ceil(step.unsigned_abs() as u128))
        };
        out[a] = SliceAxis { start: if len == 0 { 0 } else { start as usize }, step, len: len as usize };
    }
    Ok(out)
}

fn import_split(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let axis = norm_axis(ctx, "axis", ctx.int("axis", 0)?, x.rank())?;
    let n = x.shape[axis];
    let outputs = ctx.node.output.len();
    let split = if ctx.version < 13 { ctx.ints("split")? } else { const_ints(im, ctx, 1, "split")? };
    let sizes: Vec<usize> = match split {
        Some(s) => to_usizes(ctx, "split", &s, 0)?,
        None if ctx.version >= 18 && ctx.attr("num_outputs", super::at::INT)?.is_some() => {
            let k = ctx.int("num_outputs", 0)?;
            if k < 1 || k as usize != outputs {
                return Err(ctx.bad_attr("num_outputs", format!("{k} does not match the {outputs} outputs")));
            }
            let chunk = n.div_ceil(k as usize);
            (0..k as usize).map(|i| chunk.min(n.saturating_sub(i * chunk))).collect()
        }
        None => {
            if outputs == 0 || !n.is_multiple_of(outputs) {
                return Err(ctx.bad(format!("axis {axis} of size {n} does not split evenly into {outputs} outputs")));
            }
            vec![n / outputs; outputs]
        }
    };
    if sizes.len() != outputs || sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s)) != Some(n) {
        return Err(ctx.bad(format!("split {sizes:?} does not cover axis {axis} of size {n} with {outputs} outputs")));
    }
    let xin = input_id(im, ctx, 0)?;
    let mut start = 0;
    for (i, &len) in sizes.iter().enumerate() {
        let mut axes: Vec<SliceAxis> = x.shape.iter().map(|&d| SliceAxis { start: 0, step: 1, len: d }).collect();
        axes[axis] = SliceAxis { start: if len == 0 { 0 } else { start }, step: 1, len };
        output(im, ctx, i, Op::Slice { axes }, &[xin])?;
        start += len;
    }
    Ok(())
}

fn import_range(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let mut vals = Vec::new();
    for (i, what) in ["start", "limit", "delta"].iter().enumerate() {
        let t =
            super::const_input(im, ctx, i, what)?.ok_or_else(|| ctx.bad(format!("input {i} ({what}) is required")))?;
        if t.len() != 1 {
            return Err(ctx.bad(format!("{what} must be a scalar, got {}", t.tensor_type())));
        }
        vals.push(t);
    }
    let dtype = vals[0].dtype();
    let (start, limit, delta) = (vals[0].to_f64_vec()[0], vals[1].to_f64_vec()[0], vals[2].to_f64_vec()[0]);
    if delta == 0.0 || !(start.is_finite() && limit.is_finite() && delta.is_finite()) {
        return Err(ctx.bad(format!("Range({start}, {limit}, {delta}) has no finite length")));
    }
    let len = ((limit - start) / delta).ceil().max(0.0);
    let ty = TensorType::new(dtype, vec![len.min(usize::MAX as f64) as usize]);
    im.graph.limits.check(&ty).map_err(|e| ctx.bad(e.to_string()))?;
    let t = if dtype.is_float() {
        let data = (0..ty.shape[0]).map(|i| start + i as f64 * delta).collect();
        Tensor::from_vec::<f64>(&ty.shape, data).map_err(|e| ctx.bad(e))?.cast(dtype)
    } else {
        let (s, d) = (vals[0].to_i64_vec().unwrap_or_default()[0], vals[2].to_i64_vec().unwrap_or_default()[0]);
        let data = (0..ty.shape[0] as i64).map(|i| s.wrapping_add(i.wrapping_mul(d))).collect();
        Tensor::from_vec::<i64>(&ty.shape, data).map_err(|e| ctx.bad(e))?.cast(dtype)
    };
    let id = constant(im, ctx, "range", t);
    output(im, ctx, 0, Op::Identity, &[id])
}

/// `[0, 1, ..., n-1]` as i64, shaped to lie along `axis` of a rank-`rank` tensor.
fn iota(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, n: usize, axis: usize, rank: usize) -> Result<ValueId, ImportError> {
    let mut shape = vec![1; rank];
    shape[axis] = n;
    im.graph.limits.check_shape(DType::I64, &shape).map_err(|e| ctx.bad(e.to_string()))?;
    let t = Tensor::from_vec::<i64>(&shape, (0..n as i64).collect()).map_err(|e| ctx.bad(e))?;
    Ok(constant(im, ctx, "iota", t))
}

/// ReverseSequence: along the time axis, the first `sequence_lens[b]` steps of batch `b`
/// reversed, the rest kept: a GatherElements with `t < len ? len - 1 - t : t` (a length past
/// the time axis is an out-of-range index: an error when the model runs).
fn import_reverse_sequence(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let (time, batch) = (ctx.int("time_axis", 0)?, ctx.int("batch_axis", 1)?);
    if x.rank() < 2 || !matches!((time, batch), (0, 1) | (1, 0)) {
        return Err(ctx.bad(format!("time_axis {time} and batch_axis {batch} must be 0 and 1 of a rank >= 2 input")));
    }
    let (time, batch) = (time as usize, batch as usize);
    let lens = input_type(im, ctx, 1)?;
    if lens.shape != [x.shape[batch]] || !lens.dtype.is_int() {
        return Err(ctx.bad(format!("sequence_lens {lens} must be [{}] integers", x.shape[batch])));
    }
    let mut l = input_id(im, ctx, 1)?;
    if lens.dtype != DType::I64 {
        l = step(im, ctx, "lens_i64", Op::Cast { to: DType::I64 }, &[l])?;
    }
    let mut along_batch = vec![1, 1];
    along_batch[batch] = x.shape[batch];
    let l = step(im, ctx, "lens", Op::Reshape { shape: along_batch }, &[l])?;
    let t = iota(im, ctx, x.shape[time], time, 2)?;
    let inside = step(im, ctx, "inside", Op::Compare(CompareOp::Less), &[t, l])?;
    let one = scalar(im, ctx, "one", DType::I64, 1.0);
    let last = step(im, ctx, "last", Op::Binary(crate::op::BinaryOp::Sub), &[l, one])?;
    let mirrored = step(im, ctx, "mirrored", Op::Binary(crate::op::BinaryOp::Sub), &[last, t])?;
    let index = step(im, ctx, "index", Op::Where, &[inside, mirrored, t])?;
    let mut shape = vec![1; x.rank()];
    shape[..2].copy_from_slice(&x.shape[..2]);
    let index = step(im, ctx, "index_column", Op::Reshape { shape }, &[index])?;
    let index = step(im, ctx, "index_full", Op::Expand { shape: x.shape.clone() }, &[index])?;
    let xin = input_id(im, ctx, 0)?;
    output(im, ctx, 0, Op::GatherElements { axis: time }, &[xin, index])
}

/// MaxUnpool: zeros with each value written at its MaxPool index (flat over the pooling's
/// input, whose size follows from the kernel, strides and pads); an `output_shape` input pads
/// (or crops) that result at the end of each spatial axis, as the spec's example does.
fn import_max_unpool(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let indices = input_type(im, ctx, 1)?;
    if x.rank() < 3 || indices.shape != x.shape || indices.dtype != DType::I64 {
        return Err(ctx.bad(format!("x {x} and indices {indices} must have one shape of rank >= 3, indices i64")));
    }
    let m = x.rank() - 2;
    let kernel = ctx.ints("kernel_shape")?.ok_or_else(|| ctx.bad_attr("kernel_shape", "is required"))?;
    let kernel = to_usizes(ctx, "kernel_shape", &kernel, 1)?;
    let strides = to_usizes(ctx, "strides", &ctx.ints("strides")?.unwrap_or(vec![1; m]), 1)?;
    let pads = to_usizes(ctx, "pads", &ctx.ints("pads")?.unwrap_or(vec![0; 2 * m]), 0)?;
    if kernel.len() != m || strides.len() != m || pads.len() != 2 * m {
        return Err(ctx.bad(format!("kernel_shape, strides and pads must fit {m} spatial axes")));
    }
    let mut unpooled = x.shape[..2].to_vec();
    for d in 0..m {
        let full = (x.shape[d + 2].saturating_sub(1)).checked_mul(strides[d]).and_then(|v| v.checked_add(kernel[d]));
        let len = full.and_then(|v| v.checked_sub(pads[d] + pads[m + d])).filter(|&v| v > 0);
        unpooled.push(len.ok_or_else(|| ctx.bad(format!("spatial axis {d} has no valid output size")))?);
    }
    let target = match ctx.input(2).map(|_| const_ints(im, ctx, 2, "output_shape")).transpose()?.flatten() {
        Some(s) => to_usizes(ctx, "output_shape", &s, 0)?,
        None => unpooled.clone(),
    };
    if target.len() != x.rank() || target[..2] != x.shape[..2] {
        return Err(ctx.bad(format!("output shape {target:?} must keep the batch and channels of {:?}", x.shape)));
    }
    for shape in [&unpooled, &target] {
        im.graph.limits.check_shape(x.dtype, shape).map_err(|e| ctx.bad(e.to_string()))?;
    }
    let total: usize = unpooled.iter().product();
    let zeros = Tensor::try_zeros(&TensorType::new(x.dtype, vec![total])).map_err(|e| ctx.bad(e))?;
    let zeros = constant(im, ctx, "zeros", zeros);
    let n = x.shape.iter().product();
    let (xin, iin) = (input_id(im, ctx, 0)?, input_id(im, ctx, 1)?);
    let values = step(im, ctx, "flat_values", Op::Reshape { shape: vec![n] }, &[xin])?;
    let at = step(im, ctx, "flat_indices", Op::Reshape { shape: vec![n] }, &[iin])?;
    let scatter = Op::ScatterElements { axis: 0, reduction: ScatterReduction::None };
    let flat = step(im, ctx, "unpooled_flat", scatter, &[zeros, at, values])?;
    if target == unpooled {
        return output(im, ctx, 0, Op::Reshape { shape: unpooled }, &[flat]);
    }
    let shaped = step(im, ctx, "unpooled", Op::Reshape { shape: unpooled.clone() }, &[flat])?;
    let mut pads = vec![0i64; 2 * x.rank()];
    for d in 2..x.rank() {
        pads[x.rank() + d] = target[d] as i64 - unpooled[d] as i64;
    }
    let value = Tensor::scalar_from_f64(x.dtype, 0.0);
    output(im, ctx, 0, Op::Pad { pads, mode: crate::op::PadMode::Constant, value }, &[shaped])
}

/// TensorScatter (24, a KV-cache update): `update` written into `past_cache` along `axis`
/// from `write_indices[b]` on for batch `b` (wrapping around the axis in `circular` mode; in
/// `linear` mode a write past the end is a run-time error), as one ScatterElements.
fn import_tensor_scatter(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let (cache, update) = (input_type(im, ctx, 0)?, input_type(im, ctx, 1)?);
    let r = cache.rank();
    let axis = norm_axis(ctx, "axis", ctx.int("axis", -2)?, r)?;
    let fits = update.rank() == r
        && update.dtype == cache.dtype
        && (0..r)
            .all(|d| if d == axis { update.shape[d] <= cache.shape[d] } else { update.shape[d] == cache.shape[d] });
    if axis == 0 || !fits {
        return Err(
            ctx.bad(format!("update {update} does not fit cache {cache} along axis {axis} (axis 0 is the batch)"))
        );
    }
    let circular = match ctx.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => return Err(ctx.bad_attr("mode", format!("'{other}' is unknown (linear or circular)"))),
    };
    let mut start_shape = vec![1; r];
    start_shape[0] = cache.shape[0];
    let starts = match ctx.input(2) {
        Some(_) => {
            let w = input_type(im, ctx, 2)?;
            if w.shape != [cache.shape[0]] || !w.dtype.is_int() {
                return Err(ctx.bad(format!("write_indices {w} must be [{}] integers", cache.shape[0])));
            }
            let mut s = input_id(im, ctx, 2)?;
            if w.dtype != DType::I64 {
                s = step(im, ctx, "write_i64", Op::Cast { to: DType::I64 }, &[s])?;
            }
            step(im, ctx, "write_starts", Op::Reshape { shape: start_shape }, &[s])?
        }
        None => scalar(im, ctx, "write_start", DType::I64, 0.0),
    };
    let offsets = iota(im, ctx, update.shape[axis], axis, r)?;
    let mut index = step(im, ctx, "positions", Op::Binary(crate::op::BinaryOp::Add), &[starts, offsets])?;
    if circular {
        let len = scalar(im, ctx, "cache_length", DType::I64, cache.shape[axis] as f64);
        index = step(im, ctx, "wrapped", Op::Binary(crate::op::BinaryOp::Mod), &[index, len])?;
    }
    let index = step(im, ctx, "index", Op::Expand { shape: update.shape.clone() }, &[index])?;
    let ins = [input_id(im, ctx, 0)?, index, input_id(im, ctx, 1)?];
    output(im, ctx, 0, Op::ScatterElements { axis, reduction: ScatterReduction::None }, &ins)
}

fn import_one_hot(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let indices = input_type(im, ctx, 0)?;
    let values = input_type(im, ctx, 2)?;
    if values.num_elements() != 2 || values.rank() != 1 {
        return Err(ctx.bad(format!("values must be [off, on], got {:?}", values.shape)));
    }
    let depth = super::const_input(im, ctx, 1, "depth")?.ok_or_else(|| ctx.bad("input 1 (depth) is required"))?;
    let depth = depth.to_f64_vec();
    let depth = match depth.as_slice() {
        [d] if *d >= 1.0 && d.is_finite() => *d as usize,
        _ => return Err(ctx.bad(format!("depth must be one positive value, got {depth:?}"))),
    };
    let rank = indices.rank() + 1;
    let axis = norm_axis(ctx, "axis", ctx.int("axis", -1)?, rank)?;
    let mut idx = input_id(im, ctx, 0)?;
    if indices.dtype != DType::I64 {
        idx = step(im, ctx, "indices", Op::Cast { to: DType::I64 }, &[idx])?;
    }
    // Negative indices count from the end.
    let zero = scalar(im, ctx, "zero", DType::I64, 0.0);
    let n = scalar(im, ctx, "depth", DType::I64, depth as f64);
    let negative = step(im, ctx, "negative", Op::Compare(CompareOp::Less), &[idx, zero])?;
    let wrapped = step(im, ctx, "wrapped", Op::Binary(crate::op::BinaryOp::Add), &[idx, n])?;
    let idx = step(im, ctx, "resolved", Op::Where, &[negative, wrapped, idx])?;
    let idx = step(im, ctx, "unsqueezed", Op::Unsqueeze { axes: vec![axis] }, &[idx])?;
    let range = iota(im, ctx, depth, axis, rank)?;
    let hot = step(im, ctx, "hot", Op::Compare(CompareOp::Equal), &[idx, range])?;
    let vals = input_id(im, ctx, 2)?;
    let pick = |im: &mut Importer<'_>, what: &str, i: f64| -> Result<ValueId, ImportError> {
        let at = scalar(im, ctx, what, DType::I64, i);
        step(im, ctx, what, Op::Gather { axis: 0 }, &[vals, at])
    };
    let (off, on) = (pick(im, "off", 0.0)?, pick(im, "on", 1.0)?);
    output(im, ctx, 0, Op::Where, &[hot, on, off])
}

fn import_depth_space(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let b = ctx.int("blocksize", 0)?;
    if x.rank() != 4 || b < 1 {
        return Err(ctx.bad(format!("needs a 4-d input and blocksize >= 1, got {:?} and {b}", x.shape)));
    }
    let b = b as usize;
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let xin = input_id(im, ctx, 0)?;
    let (split, perm, last) = if ctx.node.op_type == "DepthToSpace" {
        if !c.is_multiple_of(b * b) {
            return Err(ctx.bad(format!("channels {c} are not a multiple of blocksize^2 = {}", b * b)));
        }
        let co = c / (b * b);
        let crd = ctx.version >= 11 && ctx.string("mode", "DCR")? == "CRD";
        let (split, perm) = if crd {
            (vec![n, co, b, b, h, w], vec![0, 1, 4, 2, 5, 3])
        } else {
            (vec![n, b, b, co, h, w], vec![0, 3, 4, 1, 5, 2])
        };
        (split, perm, vec![n, co, h * b, w * b])
    } else {
        if !h.is_multiple_of(b) || !w.is_multiple_of(b) {
            return Err(ctx.bad(format!("spatial {h}x{w} is not a multiple of blocksize {b}")));
        }
        // The newest schema adds `mode` (absent before, so DCR).
        let perm = if ctx.string("mode", "DCR")? == "CRD" { vec![0, 1, 3, 5, 2, 4] } else { vec![0, 3, 5, 1, 2, 4] };
        (vec![n, c, h / b, b, w / b, b], perm, vec![n, c * b * b, h / b, w / b])
    };
    let r = step(im, ctx, "split", Op::Reshape { shape: split }, &[xin])?;
    let t = step(im, ctx, "permuted", Op::Transpose { perm }, &[r])?;
    output(im, ctx, 0, Op::Reshape { shape: last }, &[t])
}

fn import_hardmax(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let v = ctx.version;
    let axis = norm_axis(ctx, "axis", ctx.int("axis", if v < 13 { 1 } else { -1 })?, x.rank())?;
    let mut xin = input_id(im, ctx, 0)?;
    // Before version 13 the input is seen as 2-d, split at `axis`.
    let (view, axis) = if v < 13 {
        (vec![x.shape[..axis].iter().product(), x.shape[axis..].iter().product()], 1)
    } else {
        (x.shape.clone(), axis)
    };
    if view != x.shape {
        xin = step(im, ctx, "coerced", Op::Reshape { shape: view.clone() }, &[xin])?;
    }
    let arg = step(im, ctx, "argmax", Op::ArgReduce { max: true, axis, keepdims: true, last: false }, &[xin])?;
    let range = iota(im, ctx, view[axis], axis, view.len())?;
    let hot = step(im, ctx, "hot", Op::Compare(CompareOp::Equal), &[arg, range])?;
    if view == x.shape {
        return output(im, ctx, 0, Op::Cast { to: x.dtype }, &[hot]);
    }
    let hot = step(im, ctx, "cast", Op::Cast { to: x.dtype }, &[hot])?;
    output(im, ctx, 0, Op::Reshape { shape: x.shape.clone() }, &[hot])
}
