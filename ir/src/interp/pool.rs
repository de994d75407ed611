//! N-d pooling: MaxPool (with optional argmax indices), AveragePool, GlobalAveragePool.

use ndarray::{ArrayD, IxDyn};

use crate::infer::pool_output_shape;
use crate::op::PoolAttrs;
use crate::tensor::{Element, Tensor};

use super::{KernelError, unravel};

/// The kernel offsets `k` in `0..kernel` whose tap `o * stride + k * dilation - pad_begin`
/// lies in `0..limit` (`limit` measured from the start of the input), as a half-open range.
/// Clipping windows this way keeps the work proportional to the taps that exist, however
/// large the kernel and the padding.
fn tap_range(
    o: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    limit: usize,
) -> (usize, usize) {
    let (o, s, d, p) = (o as i128, stride as i128, dilation as i128, pad_begin as i128);
    let start = o * s - p;
    // k >= ceil(-start / d) and k < ceil((limit - start) / d).
    let lo = (-start).max(0);
    let lo = (lo + d - 1) / d;
    let hi = (limit as i128 - start).max(0);
    let hi = ((hi + d - 1) / d).min(kernel as i128);
    (lo.min(hi) as usize, hi as usize)
}

/// Visits every pooling window: `f(plane, taps, padded_count)` where `taps` lists the flat
/// spatial input indices (row-major and, when `col_major`, also in column-major order) of
/// the taps inside the input, in kernel order, and `padded_count` is how many kernel offsets
/// fall inside the input or its explicit padding (not the extra ceil-mode overhang).
fn for_each_window(
    attrs: &PoolAttrs,
    in_shape: &[usize],
    col_major: bool,
    mut f: impl FnMut(usize, &[(usize, usize)], usize),
) -> Result<Vec<usize>, KernelError> {
    let out_shape = pool_output_shape(attrs, in_shape)?;
    let w = &attrs.window;
    let in_sp = &in_shape[2..];
    let out_sp = &out_shape[2..];
    let k = in_sp.len();
    let planes = in_shape[0] * in_shape[1];
    let os: usize = out_sp.iter().product();
    let mut oc = vec![0; k];
    let mut ranges = vec![(0, 0); k];
    let mut taps: Vec<(usize, usize)> = Vec::new();
    for p in 0..planes {
        for o in 0..os {
            unravel(o, out_sp, &mut oc);
            let mut padded_count = 1usize;
            for d in 0..k {
                ranges[d] = tap_range(oc[d], w.kernel[d], w.strides[d], w.dilations[d], w.pads_begin[d], in_sp[d]);
                let padded = in_sp[d] + w.pads_begin[d] + w.pads_end[d];
                let (lo, hi) = tap_range(oc[d], w.kernel[d], w.strides[d], w.dilations[d], 0, padded);
                padded_count = padded_count.saturating_mul(hi - lo);
            }
            taps.clear();
            if ranges.iter().all(|(lo, hi)| lo < hi) {
                // Odometer over the valid kernel offsets, last axis fastest (kernel order).
                let mut kc: Vec<usize> = ranges.iter().map(|r| r.0).collect();
                loop {
                    let pos = |d: usize| oc[d] * w.strides[d] + kc[d] * w.dilations[d] - w.pads_begin[d];
                    let row = (0..k).fold(0, |acc, d| acc * in_sp[d] + pos(d));
                    let col = if col_major { (0..k).rev().fold(0, |acc, d| acc * in_sp[d] + pos(d)) } else { row };
                    taps.push((row, col));
                    let Some(d) = (0..k).rev().find(|&d| kc[d] + 1 < ranges[d].1) else { break };
                    kc[d] += 1;
                    for (e, later) in kc.iter_mut().enumerate().skip(d + 1) {
                        *later = ranges[e].0;
                    }
                }
            }
            f(p, &taps, padded_count);
        }
    }
    Ok(out_shape)
}

/// Returns `(values, indices)`; indices flatten (n, c, spatial) as ONNX's MaxPool defines.
pub(crate) fn max_pool(x: &Tensor, attrs: &PoolAttrs, col_major: bool) -> Result<(Tensor, Tensor), KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, attrs: &PoolAttrs, col_major: bool) -> Result<(Tensor, Tensor), KernelError> {
        let a = a.as_standard_layout();
        let data = a.as_slice().expect("standard layout");
        let in_sp = &a.shape()[2..];
        let is: usize = in_sp.iter().product();
        let lowest = T::from_f64(f64::NEG_INFINITY);
        let mut vals = Vec::new();
        let mut idxs = Vec::new();
        let shape = for_each_window(attrs, a.shape(), col_major, |p, taps, _| {
            let mut best: Option<(T, usize)> = None;
            for &(row, col) in taps {
                let v = data[p * is + row];
                if best.is_none_or(|(b, _)| v > b) {
                    best = Some((v, p * is + col));
                }
            }
            let (v, i) = best.unwrap_or((lowest, 0));
            vals.push(v);
            idxs.push(i as i64);
        })?;
        Ok((
            T::into_tensor(ArrayD::from_shape_vec(IxDyn(&shape), vals).map_err(|e| e.to_string())?),
            Tensor::I64(ArrayD::from_shape_vec(IxDyn(&shape), idxs).map_err(|e| e.to_string())?),
        ))
    }
    crate::dispatch_tensor!(x, a, T => go::<T>(a, attrs, col_major))
}

pub(crate) fn average_pool(x: &Tensor, attrs: &PoolAttrs, count_include_pad: bool) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, attrs: &PoolAttrs, count_include_pad: bool) -> Result<Tensor, KernelError> {
        let a = a.as_standard_layout();
        let data = a.as_slice().expect("standard layout");
        let in_sp = &a.shape()[2..];
        let is: usize = in_sp.iter().product();
        let mut vals = Vec::new();
        let shape = for_each_window(attrs, a.shape(), false, |p, taps, padded_count| {
            let sum: f64 = taps.iter().map(|&(row, _)| data[p * is + row].to_f64()).sum();
            let count = if count_include_pad { padded_count } else { taps.len() };
            vals.push(T::from_f64(if count == 0 { 0.0 } else { sum / count as f64 }));
        })?;
        Ok(T::into_tensor(ArrayD::from_shape_vec(IxDyn(&shape), vals).map_err(|e| e.to_string())?))
    }
    crate::dispatch_tensor!(x, a, T => go::<T>(a, attrs, count_include_pad))
}

pub(crate) fn global_average_pool(x: &Tensor) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>) -> Result<Tensor, KernelError> {
        let a = a.as_standard_layout();
        let data = a.as_slice().expect("standard layout");
        let sp: usize = a.shape()[2..].iter().product();
        let planes = a.shape()[0] * a.shape()[1];
        let vals: Vec<T> = (0..planes)
            .map(|p| {
                let s: f64 = data[p * sp..(p + 1) * sp].iter().map(|v| v.to_f64()).sum();
                T::from_f64(if sp == 0 { 0.0 } else { s / sp as f64 })
            })
            .collect();
        let mut shape = a.shape().to_vec();
        shape[2..].iter_mut().for_each(|d| *d = 1);
        Ok(T::into_tensor(ArrayD::from_shape_vec(IxDyn(&shape), vals).map_err(|e| e.to_string())?))
    }
    crate::dispatch_tensor!(x, a, T => go::<T>(a))
}
