//! Resize (versions 10 to 19) and Upsample (7, 9): every mode, coordinate transformation,
//! nearest rounding, cubic coefficient, `exclude_outside`, `antialias`, `axes` and
//! `keep_aspect_ratio_policy`, following the ONNX reference. Shapes are static, so each
//! resized axis becomes a table of taps (input indices and weights per output index), computed
//! here in f64, and the graph op [`Op::Resample`] applies the tables.

use crate::dtype::DType;
use crate::interp::{cubic_weights, keys_cubic};
use crate::op::Op;
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::build::{constant, output};
use super::tensor_ops::input_id;
use super::{NodeCtx, const_input, const_ints, input_type, norm_axis};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// How one axis is resampled.
struct AxisSpec<'a> {
    input: usize,
    output: usize,
    scale: f64,
    coordinates: &'a str,
    roi: (f64, f64),
}

pub(super) fn import(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let r = x.rank();
    let v = ctx.version;
    let upsample = ctx.node.op_type == "Upsample";
    let modern = !upsample && v >= 11;
    let mode = match ctx.string("mode", "nearest")?.as_str() {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" if upsample || v >= 10 => Mode::Linear,
        "cubic" if modern => Mode::Cubic,
        other => return Err(ctx.bad_attr("mode", format!("'{other}' is not supported at version {v}"))),
    };
    let coordinates =
        if modern { ctx.string("coordinate_transformation_mode", "half_pixel")? } else { "asymmetric".to_string() };
    let known_coordinates = [
        "half_pixel",
        "half_pixel_symmetric",
        "pytorch_half_pixel",
        "align_corners",
        "asymmetric",
        "tf_crop_and_resize",
        // Opset 11 only in the spec, but tf2onnx writes it at every opset and ONNX Runtime
        // runs it: every Keras nearest UpSampling2D.
        "tf_half_pixel_for_nn",
    ];
    if !known_coordinates.contains(&coordinates.as_str()) || (coordinates == "half_pixel_symmetric" && v < 19) {
        return Err(ctx.bad_attr("coordinate_transformation_mode", format!("'{coordinates}' is not supported")));
    }
    let nearest = if modern { ctx.string("nearest_mode", "round_prefer_floor")? } else { "floor".to_string() };
    if !["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"].contains(&nearest.as_str()) {
        return Err(ctx.bad_attr("nearest_mode", format!("'{nearest}' is not supported")));
    }
    let cubic_a = ctx.float("cubic_coeff_a", -0.75)? as f64;
    let exclude_outside = modern && ctx.flag("exclude_outside", false)?;
    let extrapolation = ctx.float("extrapolation_value", 0.0)?;
    let antialias = modern && v >= 18 && ctx.flag("antialias", false)?;
    if antialias && mode == Mode::Nearest {
        return Err(ctx.bad_attr("antialias", "is not defined for nearest"));
    }
    let axes: Vec<usize> = match (modern && v >= 18).then(|| ctx.ints("axes")).transpose()?.flatten() {
        Some(a) => a.iter().map(|&a| norm_axis(ctx, "axes", a, r)).collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    let floats = |t: Option<Tensor>| t.map(|t| t.to_f64_vec()).filter(|v| !v.is_empty());
    let (roi, scales, sizes) = if upsample {
        let scales = if v < 9 {
            ctx.floats("scales")?.map(|f| f.iter().map(|&f| f as f64).collect())
        } else {
            floats(const_input(im, ctx, 1, "scales")?)
        };
        (None, scales, None)
    } else if v < 11 {
        (None, floats(const_input(im, ctx, 1, "scales")?), None)
    } else {
        let roi = floats(const_input(im, ctx, 1, "roi")?);
        let scales = floats(const_input(im, ctx, 2, "scales")?);
        let sizes = const_ints(im, ctx, 3, "sizes")?.filter(|s| !s.is_empty());
        (roi, scales, sizes)
    };
    let n = axes.len();
    let mut scale: Vec<f64> = vec![1.0; r];
    let mut out: Vec<usize> = x.shape.clone();
    match (scales, sizes) {
        (Some(s), None) => {
            if s.len() != n || s.iter().any(|&f| !(f > 0.0 && f.is_finite())) {
                return Err(ctx.bad(format!("scales {s:?} must be {n} positive numbers")));
            }
            for (k, &d) in axes.iter().enumerate() {
                scale[d] = s[k];
                // In f32 as ONNX Runtime computes it (and tf2onnx declares it): 2.05f * 20 is 41,
                // not 40.99999.
                let len = f64::from((s[k] as f32 * x.shape[d] as f32).floor());
                out[d] =
                    if len < 1e15 { len as usize } else { return Err(ctx.bad(format!("scale {} overflows", s[k]))) };
            }
        }
        (None, Some(z)) => {
            if z.len() != n || z.iter().any(|&v| v < 0) {
                return Err(ctx.bad(format!("sizes {z:?} must be {n} non-negative sizes")));
            }
            for (k, &d) in axes.iter().enumerate() {
                scale[d] = z[k] as f64 / x.shape[d] as f64;
                out[d] = z[k] as usize;
            }
            let policy = if v >= 18 { ctx.string("keep_aspect_ratio_policy", "stretch")? } else { "stretch".into() };
            let pick = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some(axes.iter().map(|&d| scale[d]).fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some(axes.iter().map(|&d| scale[d]).fold(f64::NEG_INFINITY, f64::max)),
                other => return Err(ctx.bad_attr("keep_aspect_ratio_policy", format!("'{other}' is unknown"))),
            };
            if let Some(s) = pick {
                for &d in &axes {
                    scale[d] = s;
                    out[d] = (s * x.shape[d] as f64 + 0.5) as usize;
                }
            }
        }
        _ => return Err(ctx.bad("exactly one of scales and sizes must be given")),
    }
    let roi_of = |d: usize| -> Result<(f64, f64), ImportError> {
        match &roi {
            Some(roi) if coordinates == "tf_crop_and_resize" => {
                let k = axes.iter().position(|&a| a == d).unwrap_or(0);
                if roi.len() != 2 * n {
                    return Err(ctx.bad(format!("roi has {} values, need {}", roi.len(), 2 * n)));
                }
                Ok((roi[k], roi[n + k]))
            }
            None if coordinates == "tf_crop_and_resize" => Err(ctx.bad("tf_crop_and_resize needs roi")),
            _ => Ok((0.0, 1.0)),
        }
    };
    im.graph.limits.check_shape(x.dtype, &out).map_err(|e| ctx.bad(e.to_string()))?;
    let wdtype = if x.dtype.is_float() { x.dtype } else { DType::F32 };
    let mut ins = vec![input_id(im, ctx, 0)?];
    let mut resampled = Vec::new();
    for &d in &axes {
        let roi = roi_of(d)?;
        let identity = (scale[d] - 1.0).abs() < 1e-9 && out[d] == x.shape[d] && roi == (0.0, 1.0);
        if identity {
            continue;
        }
        if x.shape[d] == 0 {
            return Err(ctx.bad(format!("cannot resize empty axis {d}")));
        }
        let spec = AxisSpec { input: x.shape[d], output: out[d], scale: scale[d], coordinates: &coordinates, roi };
        let (idx, w, taps) = taps(&spec, mode, &nearest, cubic_a, exclude_outside, antialias);
        let idx = Tensor::from_vec::<i64>(&[out[d], taps], idx).map_err(|e| ctx.bad(e))?;
        let w = Tensor::from_vec::<f64>(&[out[d], taps], w).map_err(|e| ctx.bad(e))?.cast(wdtype);
        ins.push(constant(im, ctx, &format!("taps{d}"), idx));
        ins.push(constant(im, ctx, &format!("weights{d}"), w));
        resampled.push(d);
    }
    if resampled.is_empty() {
        return output(im, ctx, 0, Op::Identity, &ins[..1]);
    }
    let extrapolation = (coordinates == "tf_crop_and_resize").then_some(extrapolation);
    output(im, ctx, 0, Op::Resample { axes: resampled, extrapolation }, &ins)
}

/// The source coordinate of output index `y`, and whether it lies outside the input
/// (tf_crop_and_resize only). Computed in f32 as ONNX Runtime, PyTorch and the ONNX reference
/// do: a nearest pick depends on the last bit (17 / 1.7f is exactly 10 in f32, 9.99... in f64).
fn source(spec: &AxisSpec<'_>, y: usize) -> (f64, bool) {
    let (y, scale, input) = (y as f32, spec.scale as f32, spec.input as f32);
    let out_f = scale * input;
    let x = match spec.coordinates {
        "align_corners" if out_f == 1.0 => 0.0,
        "align_corners" => y * (input - 1.0) / (out_f - 1.0),
        "asymmetric" => y / scale,
        "tf_half_pixel_for_nn" => (y + 0.5) / scale,
        "tf_crop_and_resize" => {
            let (start, end) = (spec.roi.0 as f32, spec.roi.1 as f32);
            let x = if out_f == 1.0 {
                (end - start) * (input - 1.0) / 2.0
            } else {
                y * (end - start) * (input - 1.0) / (out_f - 1.0)
            };
            let x = x + start * (input - 1.0);
            return (f64::from(x), x < 0.0 || x > input - 1.0);
        }
        "pytorch_half_pixel" if out_f == 1.0 => -0.5,
        "half_pixel_symmetric" => {
            let adjustment = spec.output as f32 / out_f;
            let offset = input / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
        _ => (y + 0.5) / scale - 0.5,
    };
    (f64::from(x), false)
}

fn coefficients(mode: Mode, ratio: f64, scale: f64, nearest: &str, a: f64, antialias: bool) -> Vec<f64> {
    match mode {
        Mode::Nearest => {
            let right = match nearest {
                _ if ratio == 1.0 => true,
                "round_prefer_floor" => ratio > 0.5,
                "round_prefer_ceil" => ratio >= 0.5,
                "floor" => false,
                _ => true,
            };
            vec![f64::from(!right as u8), f64::from(right as u8)]
        }
        Mode::Linear if antialias => {
            let scale = scale.min(1.0);
            let start = (-1.0 / scale).floor() as i64 + 1;
            let coeffs: Vec<f64> = (start..start + 2 - 2 * start)
                .map(|i| (1.0 - ((i as f64 - ratio) * scale).abs()).clamp(0.0, 1.0))
                .collect();
            let sum: f64 = coeffs.iter().sum();
            coeffs.iter().map(|c| c / sum).collect()
        }
        Mode::Linear => vec![1.0 - ratio, ratio],
        Mode::Cubic if antialias => {
            let scale = scale.min(1.0);
            let start = (-2.0 / scale).floor() as i64 + 1;
            let coeffs: Vec<f64> = (start..2 - start).map(|i| keys_cubic(scale * (i as f64 - ratio), a)).collect();
            let sum: f64 = coeffs.iter().sum();
            coeffs.iter().map(|c| c / sum).collect()
        }
        Mode::Cubic => cubic_weights(ratio, a).to_vec(),
    }
}

/// Tap tables of one axis: `(indices, weights, taps per output)`, rows of extrapolated
/// outputs starting with index -1.
fn taps(
    spec: &AxisSpec<'_>,
    mode: Mode,
    nearest: &str,
    a: f64,
    exclude_outside: bool,
    antialias: bool,
) -> (Vec<i64>, Vec<f64>, usize) {
    let n = coefficients(mode, 0.5, spec.scale, nearest, a, antialias).len();
    let (mut indices, mut weights) = (Vec::with_capacity(spec.output * n), Vec::with_capacity(spec.output * n));
    let last = spec.input as i64 - 1;
    for y in 0..spec.output {
        let (x, outside) = source(spec, y);
        let xi = x.floor();
        // The ratio is in (0, 1]: an integer coordinate prefers the pixel on its left.
        let ratio = if x == xi { 1.0 } else { x - xi };
        let mut coeffs = coefficients(mode, ratio, spec.scale, nearest, a, antialias);
        let pad = n.div_ceil(2) as f64;
        let padded = x + pad;
        let p = padded.floor();
        let frac = padded - p;
        let offset = if n.is_multiple_of(2) {
            if frac == 0.0 { -(n as i64 / 2) } else { -(n as i64 / 2) + 1 }
        } else {
            let base = -((n as i64 - 1) / 2);
            if frac <= 0.5 { base } else { base + 1 }
        };
        let start = p as i64 + offset - pad as i64;
        if exclude_outside {
            for (t, c) in coeffs.iter_mut().enumerate() {
                let i = start + t as i64;
                if i < 0 || i > last {
                    *c = 0.0;
                }
            }
            let sum: f64 = coeffs.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            coeffs.iter_mut().for_each(|c| *c /= sum);
        }
        for (t, c) in coeffs.iter().enumerate() {
            let i = if outside && t == 0 { -1 } else { (start + t as i64).clamp(0, last) };
            indices.push(i);
            weights.push(*c);
        }
    }
    (indices, weights, n)
}
