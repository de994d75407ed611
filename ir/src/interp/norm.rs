//! Normalisation and reduction kernels: Softmax / LogSoftmax, inference-mode
//! BatchNormalization, ReduceX and ArgMax/ArgMin, computed in f64 (integers in i128).

use ndarray::{ArrayD, Axis, IxDyn};

use crate::op::ReduceOp;
use crate::tensor::{Element, Tensor};

use super::KernelError;

/// Softmax over `axis`, or over all axes from `axis` on when `coerce_2d` (opset < 13).
pub(crate) fn softmax(x: &Tensor, axis: usize, coerce_2d: bool, log: bool) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, axis: usize, coerce_2d: bool, log: bool) -> Result<Tensor, KernelError> {
        let shape = a.shape().to_vec();
        let mut w: ArrayD<f64> = a.mapv(|v| v.to_f64());
        let (mut w, lane_axis) = if coerce_2d {
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis..].iter().product();
            (w.into_shape_with_order(IxDyn(&[outer, inner])).map_err(|e| e.to_string())?, 1)
        } else {
            w = w.as_standard_layout().into_owned();
            (w, axis)
        };
        for mut lane in w.lanes_mut(Axis(lane_axis)) {
            let m = lane.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if log {
                let s: f64 = lane.iter().map(|v| (v - m).exp()).sum();
                let ls = s.ln();
                lane.mapv_inplace(|v| v - m - ls);
                continue;
            }
            lane.mapv_inplace(|v| (v - m).exp());
            let s: f64 = lane.sum();
            lane.mapv_inplace(|v| v / s);
        }
        let w = w.into_shape_with_order(IxDyn(&shape)).map_err(|e| e.to_string())?;
        Ok(T::into_tensor(w.mapv(T::from_f64)))
    }
    crate::dispatch_tensor!(x, a, T => go::<T>(a, axis, coerce_2d, log))
}

/// `y = scale * (x - mean) / sqrt(var + epsilon) + bias`, channels on axis 1.
pub(crate) fn batch_norm(x: &Tensor, params: [&Tensor; 4], epsilon: f32) -> Result<Tensor, KernelError> {
    let [scale, bias, mean, var] = params.map(|p| p.to_f64_vec());
    fn go<T: Element>(a: &ArrayD<T>, p: [&[f64]; 4], eps: f64) -> Tensor {
        let [scale, bias, mean, var] = p;
        let mut out = a.clone();
        for (c, mut plane) in out.axis_iter_mut(Axis(1)).enumerate() {
            let k = scale[c] / (var[c] + eps).sqrt();
            plane.mapv_inplace(|v| T::from_f64((v.to_f64() - mean[c]) * k + bias[c]));
        }
        T::into_tensor(out)
    }
    let p = [&scale[..], &bias[..], &mean[..], &var[..]];
    Ok(crate::dispatch_tensor!(x, a, T => go::<T>(a, p, epsilon as f64)))
}

/// A reduction over `axes`, computed in f64 for floats and i128 (wrapping back) for integers.
pub(crate) fn reduce(op: ReduceOp, x: &Tensor, axes: &[usize], keepdims: bool) -> Result<Tensor, KernelError> {
    fn go<T: Element>(op: ReduceOp, a: &ArrayD<T>, axes: &[usize], keepdims: bool) -> Result<Tensor, KernelError> {
        let shape = a.shape().to_vec();
        let out_shape = crate::infer::reduced_shape(&shape, axes, keepdims);
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
        let groups: usize = kept.iter().map(|&d| shape[d]).product();
        let count: usize = axes.iter().map(|&d| shape[d]).product();
        let float = T::DTYPE.is_float();
        let mut acc: Vec<Vec<f64>> = vec![Vec::with_capacity(count); groups];
        let mut ints: Vec<Vec<i128>> = vec![Vec::new(); groups];
        for (idx, &v) in a.indexed_iter() {
            let g = kept.iter().fold(0usize, |g, &d| g * shape[d] + idx[d]);
            if float {
                acc[g].push(v.to_f64());
            } else {
                ints[g].push(super::elementwise::to_i128(v));
            }
        }
        let out: Vec<T> = (0..groups)
            .map(|g| {
                if !float {
                    let xs = &ints[g];
                    let r = match op {
                        ReduceOp::Sum => xs.iter().fold(0i128, |s, &x| s.wrapping_add(x)),
                        ReduceOp::Prod => xs.iter().fold(1i128, |s, &x| s.wrapping_mul(x)),
                        ReduceOp::Max => xs.iter().copied().max().unwrap_or(i128::MIN),
                        ReduceOp::Min => xs.iter().copied().min().unwrap_or(i128::MAX),
                        ReduceOp::L1 => xs.iter().fold(0i128, |s, &x| s.wrapping_add(x.abs())),
                        _ => xs.iter().fold(0i128, |s, &x| s.wrapping_add(x.wrapping_mul(x))),
                    };
                    // Empty max/min saturate to the type's extremes.
                    return if xs.is_empty() && matches!(op, ReduceOp::Max | ReduceOp::Min) {
                        T::from_f64(if op == ReduceOp::Max { f64::NEG_INFINITY } else { f64::INFINITY })
                    } else {
                        super::elementwise::from_i128(r)
                    };
                }
                let xs = &acc[g];
                let sum = |f: &dyn Fn(f64) -> f64| xs.iter().map(|&x| f(x)).sum::<f64>();
                T::from_f64(match op {
                    ReduceOp::Sum => sum(&|x| x),
                    ReduceOp::Mean => sum(&|x| x) / xs.len() as f64,
                    ReduceOp::Max => xs
                        .iter()
                        .copied()
                        .fold(f64::NEG_INFINITY, |m, x| if x.is_nan() || m.is_nan() { f64::NAN } else { m.max(x) }),
                    ReduceOp::Min => xs
                        .iter()
                        .copied()
                        .fold(f64::INFINITY, |m, x| if x.is_nan() || m.is_nan() { f64::NAN } else { m.min(x) }),
                    ReduceOp::Prod => xs.iter().product(),
                    ReduceOp::L1 => sum(&|x| x.abs()),
                    ReduceOp::L2 => sum(&|x| x * x).sqrt(),
                    ReduceOp::SumSquare => sum(&|x| x * x),
                    ReduceOp::LogSum => sum(&|x| x).ln(),
                    ReduceOp::LogSumExp => sum(&|x| x.exp()).ln(),
                })
            })
            .collect();
        Ok(T::into_tensor(ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| e.to_string())?))
    }
    crate::dispatch_tensor!(x, a, T => go::<T>(op, a, axes, keepdims))
}

/// ArgMax / ArgMin along `axis` (NaN is never selected unless every element is NaN).
pub(crate) fn arg_reduce(
    x: &Tensor,
    max: bool,
    axis: usize,
    keepdims: bool,
    last: bool,
) -> Result<Tensor, KernelError> {
    fn go<T: Element>(
        a: &ArrayD<T>,
        max: bool,
        axis: usize,
        keepdims: bool,
        last: bool,
    ) -> Result<Tensor, KernelError> {
        let shape = a.shape().to_vec();
        let out_shape = crate::infer::reduced_shape(&shape, &[axis], keepdims);
        let out: Vec<i64> = a
            .lanes(Axis(axis))
            .into_iter()
            .map(|lane| {
                let mut best = 0usize;
                for (i, &v) in lane.iter().enumerate().skip(1) {
                    let (v, b) = (v.to_f64(), lane[best].to_f64());
                    let better = if max { v > b || (last && v == b) } else { v < b || (last && v == b) };
                    if better {
                        best = i;
                    }
                }
                best as i64
            })
            .collect();
        Ok(Tensor::I64(ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| e.to_string())?))
    }
    crate::dispatch_tensor!(x, a, T => go::<T>(a, max, axis, keepdims, last))
}

/// LayerNormalization (or with `rms`, RMSNormalization) over the axes `axis..`, in f64.
pub(crate) fn normalize(
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    axis: usize,
    epsilon: f32,
    rms: bool,
) -> Result<Tensor, KernelError> {
    let (scale, bias) = (scale.to_f64_vec(), bias.map(Tensor::to_f64_vec));
    fn go<T: Element>(a: &ArrayD<T>, scale: &[f64], bias: Option<&[f64]>, axis: usize, eps: f64, rms: bool) -> Tensor {
        let inner: usize = a.shape()[axis..].iter().product();
        let data: Vec<f64> = a.iter().map(|v| v.to_f64()).collect();
        let mut out = Vec::with_capacity(data.len());
        for row in data.chunks(inner.max(1)) {
            let n = row.len() as f64;
            let mean = if rms { 0.0 } else { row.iter().sum::<f64>() / n };
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let inv = 1.0 / (var + eps).sqrt();
            for (j, v) in row.iter().enumerate() {
                let y = (v - mean) * inv * scale[j] + bias.map_or(0.0, |b| b[j]);
                out.push(T::from_f64(y));
            }
        }
        T::into_tensor(ArrayD::from_shape_vec(IxDyn(a.shape()), out).expect("same element count"))
    }
    Ok(crate::dispatch_tensor!(x, a, T => go::<T>(a, &scale, bias.as_deref(), axis, epsilon as f64, rms)))
}
