//! Normalisation kernels: Softmax and inference-mode BatchNormalization, computed in f64.

use ndarray::{ArrayD, Axis, IxDyn};

use crate::tensor::{Element, Tensor};

use super::KernelError;

/// Softmax over `axis`, or over all axes from `axis` on when `coerce_2d` (opset < 13).
pub(crate) fn softmax(x: &Tensor, axis: usize, coerce_2d: bool) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, axis: usize, coerce_2d: bool) -> Result<Tensor, KernelError> {
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
            lane.mapv_inplace(|v| (v - m).exp());
            let s: f64 = lane.sum();
            lane.mapv_inplace(|v| v / s);
        }
        let w = w.into_shape_with_order(IxDyn(&shape)).map_err(|e| e.to_string())?;
        Ok(T::into_tensor(w.mapv(T::from_f64)))
    }
    crate::dispatch_tensor!(x, a, T => go::<T>(a, axis, coerce_2d))
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
