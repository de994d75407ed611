//! N-d pooling: MaxPool (with optional argmax indices), AveragePool, GlobalAveragePool.

use ndarray::{ArrayD, IxDyn};

use crate::infer::pool_output_shape;
use crate::op::PoolAttrs;
use crate::tensor::{Element, Tensor};

use super::{KernelError, unravel};

/// Visits every pooling window: `f(plane, out_flat, taps)` where `taps` lists, for each kernel
/// offset, the spatial input coordinates (`None` when outside the input) and whether the offset
/// lies inside the explicit padding (as opposed to the extra ceil-mode overhang).
fn for_each_window(
    attrs: &PoolAttrs,
    in_shape: &[usize],
    mut f: impl FnMut(usize, usize, &[(Option<Vec<usize>>, bool)]),
) -> Result<Vec<usize>, KernelError> {
    let out_shape = pool_output_shape(attrs, in_shape)?;
    let in_sp = &in_shape[2..];
    let out_sp = &out_shape[2..];
    let k = in_sp.len();
    let planes = in_shape[0] * in_shape[1];
    let os: usize = out_sp.iter().product();
    let ks: usize = attrs.window.kernel.iter().product();
    let mut windows: Vec<Vec<(Option<Vec<usize>>, bool)>> = Vec::with_capacity(os);
    let mut oc = vec![0; k];
    let mut kc = vec![0; k];
    for o in 0..os {
        unravel(o, out_sp, &mut oc);
        let mut taps = Vec::with_capacity(ks);
        for kidx in 0..ks {
            unravel(kidx, &attrs.window.kernel, &mut kc);
            let mut coords = Vec::with_capacity(k);
            let mut inside = true;
            let mut in_padded = true;
            for d in 0..k {
                let pos = (oc[d] * attrs.window.strides[d] + kc[d] * attrs.window.dilations[d]) as isize
                    - attrs.window.pads_begin[d] as isize;
                if pos < 0 || pos as usize >= in_sp[d] {
                    inside = false;
                }
                if pos >= (in_sp[d] + attrs.window.pads_end[d]) as isize {
                    in_padded = false;
                }
                coords.push(pos.max(0) as usize);
            }
            taps.push((inside.then_some(coords), in_padded));
        }
        windows.push(taps);
    }
    for p in 0..planes {
        for (o, taps) in windows.iter().enumerate() {
            f(p, o, taps);
        }
    }
    Ok(out_shape)
}

fn flat_index(coords: &[usize], dims: &[usize], col_major: bool) -> usize {
    if col_major {
        coords.iter().zip(dims).rev().fold(0, |acc, (c, d)| acc * d + c)
    } else {
        coords.iter().zip(dims).fold(0, |acc, (c, d)| acc * d + c)
    }
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
        let shape = for_each_window(attrs, a.shape(), |p, _, taps| {
            let mut best: Option<(T, usize)> = None;
            for (coords, _) in taps {
                if let Some(c) = coords {
                    let v = data[p * is + flat_index(c, in_sp, false)];
                    if best.is_none_or(|(b, _)| v > b) {
                        best = Some((v, p * is + flat_index(c, in_sp, col_major)));
                    }
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
        let shape = for_each_window(attrs, a.shape(), |p, _, taps| {
            let (mut sum, mut count) = (0.0f64, 0usize);
            for (coords, in_padded) in taps {
                match coords {
                    Some(c) => {
                        sum += data[p * is + flat_index(c, in_sp, false)].to_f64();
                        count += 1;
                    }
                    None if count_include_pad && *in_padded => count += 1,
                    None => {}
                }
            }
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
