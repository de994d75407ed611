//! Data-movement kernels: transpose, concat, pad (all modes).

use ndarray::{ArrayD, Axis, IxDyn};

use crate::op::PadMode;
use crate::tensor::{Element, Tensor};

use super::KernelError;

pub(crate) fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, perm: &[usize]) -> Tensor {
        T::into_tensor(a.view().permuted_axes(IxDyn(perm)).as_standard_layout().into_owned())
    }
    Ok(dispatch_tensor!(x, a, T => go::<T>(a, perm)))
}

pub(crate) fn concat(xs: &[&Tensor], axis: usize) -> Result<Tensor, KernelError> {
    fn go<T: Element>(first: &ArrayD<T>, xs: &[&Tensor], axis: usize) -> Result<Tensor, KernelError> {
        let views = xs
            .iter()
            .map(|t| T::array(t).map(|a| a.view()).ok_or("Concat inputs differ in element type"))
            .collect::<Result<Vec<_>, _>>()?;
        debug_assert_eq!(views[0].shape(), first.shape());
        let out = ndarray::concatenate(Axis(axis), &views).map_err(|e| e.to_string())?;
        Ok(T::into_tensor(out))
    }
    dispatch_tensor!(xs[0], a, T => go::<T>(a, xs, axis))
}

/// Maps an output coordinate to the input coordinate it reads, or `None` for the constant.
fn source_index(o: i64, begin: i64, len: i64, mode: PadMode) -> Option<usize> {
    let i = o - begin;
    if (0..len).contains(&i) {
        return Some(i as usize);
    }
    let i = match mode {
        PadMode::Constant => return None,
        PadMode::Edge => i.clamp(0, len - 1),
        PadMode::Wrap => i.rem_euclid(len),
        PadMode::Reflect => {
            if len == 1 {
                0
            } else {
                // Mirror without repeating the edge: period 2 * (len - 1).
                let period = 2 * (len - 1);
                let r = i.rem_euclid(period);
                if r < len { r } else { period - r }
            }
        }
    };
    Some(i as usize)
}

pub(crate) fn pad(x: &Tensor, pads: &[i64], mode: PadMode, value: &Tensor) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, pads: &[i64], mode: PadMode, value: &Tensor) -> Result<Tensor, KernelError> {
        let r = a.ndim();
        let fill = T::array(value).and_then(|v| v.iter().next().copied()).ok_or("pad value type differs")?;
        let out_shape: Vec<usize> =
            (0..r).map(|d| (a.shape()[d] as i64 + pads[d] + pads[d + r]).max(0) as usize).collect();
        let mut src = vec![0usize; r];
        let out = ArrayD::from_shape_fn(IxDyn(&out_shape), |idx| {
            for d in 0..r {
                match source_index(idx[d] as i64, pads[d], a.shape()[d] as i64, mode) {
                    Some(s) => src[d] = s,
                    None => return fill,
                }
            }
            a[IxDyn(&src)]
        });
        Ok(T::into_tensor(out))
    }
    dispatch_tensor!(x, a, T => go::<T>(a, pads, mode, value))
}
