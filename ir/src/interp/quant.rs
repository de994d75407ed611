//! QuantizeLinear and DequantizeLinear with per-tensor, per-axis and blocked scales.

use ndarray::{ArrayD, IxDyn};

use crate::dtype::DType;
use crate::op::QuantAxis;
use crate::tensor::{Element, Tensor};

use super::KernelError;

/// For each element of a tensor of `shape` (row-major), the flat index of its scale.
fn scale_indices(shape: &[usize], axis: QuantAxis) -> Vec<usize> {
    let n: usize = shape.iter().product();
    match axis {
        QuantAxis::PerTensor => vec![0; n],
        QuantAxis::PerAxis { axis } => {
            let inner: usize = shape[axis + 1..].iter().product();
            (0..n).map(|i| (i / inner) % shape[axis]).collect()
        }
        QuantAxis::Blocked { axis, block_size } => {
            let inner: usize = shape[axis + 1..].iter().product();
            let blocks = shape[axis].div_ceil(block_size);
            (0..n)
                .map(|i| {
                    let (outer, rest) = (i / (inner * shape[axis]), i % inner);
                    let a = (i / inner) % shape[axis];
                    (outer * blocks + a / block_size) * inner + rest
                })
                .collect()
        }
    }
}

/// `saturate(round_half_even(x / scale) + zero_point)`; the division is done in the input's
/// float precision, as the ONNX reference does.
pub(crate) fn quantize(x: &Tensor, scale: &Tensor, zp: &Tensor, axis: QuantAxis) -> Result<Tensor, KernelError> {
    let xs = x.to_f64_vec();
    let ss = scale.to_f64_vec();
    let zs = zp.to_f64_vec();
    let idx = scale_indices(x.shape(), axis);
    let narrow = |v: f64| -> f64 {
        match x.dtype() {
            DType::F32 => v as f32 as f64,
            DType::F16 => half::f16::from_f64(v).to_f64(),
            _ => v,
        }
    };
    fn go<T: Element>(shape: &[usize], q: impl Iterator<Item = f64>) -> Result<Tensor, KernelError> {
        let (lo, hi) = (T::from_f64(f64::NEG_INFINITY).to_f64(), T::from_f64(f64::INFINITY).to_f64());
        let data: Vec<T> = q.map(|v| T::from_f64(v.clamp(lo, hi))).collect();
        Ok(T::into_tensor(ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| e.to_string())?))
    }
    let q = xs.iter().zip(&idx).map(|(&v, &i)| narrow(v / ss[i]).round_ties_even() + zs[i]);
    crate::for_dtype!(zp.dtype(), T => go::<T>(x.shape(), q))
}

/// `(x - zero_point) * scale` in the scale's precision.
pub(crate) fn dequantize(x: &Tensor, scale: &Tensor, zp: &Tensor, axis: QuantAxis) -> Result<Tensor, KernelError> {
    let xs = x.to_i64_vec().ok_or("DequantizeLinear input must be an integer tensor")?;
    let zs = zp.to_i64_vec().ok_or("zero point must be an integer tensor")?;
    let ss = scale.to_f64_vec();
    let idx = scale_indices(x.shape(), axis);
    let vals: Vec<f64> = xs.iter().zip(&idx).map(|(&v, &i)| (v - zs[i]) as f64 * ss[i]).collect();
    let t = Tensor::from_vec::<f64>(x.shape(), vals)?;
    Ok(t.cast(scale.dtype()))
}

/// [`crate::Op::Requantize`]: int32 accumulators to int8, rounding half up.
pub(crate) fn requantize(x: &Tensor, shift: i32, min: i32, max: i32) -> Result<Tensor, KernelError> {
    let xs = x.to_i64_vec().ok_or("Requantize input must be an integer tensor")?;
    let y: Vec<i8> = xs.iter().map(|&v| round_shift(v, shift).clamp(i64::from(min), i64::from(max)) as i8).collect();
    Ok(Tensor::from_vec(x.shape(), y)?)
}

/// `floor((v + 2^(k-1)) / 2^k)` for `k > 0`, `v * 2^-k` otherwise (`|v| < 2^32`, `|k| <= 31`,
/// so nothing overflows i64).
pub fn round_shift(v: i64, k: i32) -> i64 {
    if k > 0 { (v + (1 << (k - 1))) >> k } else { v << -k }
}
