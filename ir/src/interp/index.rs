//! Indexing kernels: Gather, GatherElements, GatherND, ScatterElements, ScatterND, Slice, Expand,
//! Tile, CumSum and TopK. Data is read through row-major flat offsets; every index read from a
//! tensor is checked before it is used.

use ndarray::{ArrayD, IxDyn};

use crate::op::{GridMode, GridPadding, ScatterReduction, SliceAxis};
use crate::tensor::{Element, Tensor};

use super::KernelError;
use super::elementwise::{from_i128, to_i128};

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The row-major coordinates of flat offset `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize], out: &mut [usize]) {
    for d in (0..shape.len()).rev() {
        out[d] = flat % shape[d].max(1);
        flat /= shape[d].max(1);
    }
}

/// An index read from a tensor, counted from the end when negative; out of `-n..n` is an error.
fn resolve(i: i64, n: usize, what: &str) -> Result<usize, KernelError> {
    let r = if i < 0 { i + n as i64 } else { i };
    if r < 0 || r >= n as i64 {
        return Err(format!("{what} index {i} is out of range for an axis of size {n}").into());
    }
    Ok(r as usize)
}

fn flat_data<T: Element>(a: &ArrayD<T>) -> Vec<T> {
    a.iter().copied().collect()
}

fn indices_of(t: &Tensor) -> Result<Vec<i64>, KernelError> {
    t.to_i64_vec().ok_or_else(|| "indices must be integers".into())
}

fn build<T: Element>(shape: &[usize], data: Vec<T>) -> Result<Tensor, KernelError> {
    Ok(T::into_tensor(ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| e.to_string())?))
}

pub(crate) fn gather(x: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, indices: &Tensor, axis: usize) -> Result<Tensor, KernelError> {
        let shape = a.shape();
        let n = shape[axis];
        let idx = indices_of(indices)?.iter().map(|&i| resolve(i, n, "Gather")).collect::<Result<Vec<_>, _>>()?;
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let data = flat_data(a);
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &j in &idx {
                let base = (o * n + j) * inner;
                out.extend_from_slice(&data[base..base + inner]);
            }
        }
        let mut out_shape = shape[..axis].to_vec();
        out_shape.extend_from_slice(indices.shape());
        out_shape.extend_from_slice(&shape[axis + 1..]);
        build(&out_shape, out)
    }
    dispatch_tensor!(x, a, T => go::<T>(a, indices, axis))
}

/// The data offset each position of `indices` (shaped like it) addresses along `axis`.
fn element_offsets(data_shape: &[usize], indices: &Tensor, axis: usize, what: &str) -> Result<Vec<usize>, KernelError> {
    let ishape = indices.shape();
    let ds = strides(data_shape);
    let mut coord = vec![0; ishape.len()];
    indices_of(indices)?
        .iter()
        .enumerate()
        .map(|(p, &i)| {
            unravel(p, ishape, &mut coord);
            coord[axis] = resolve(i, data_shape[axis], what)?;
            Ok(coord.iter().zip(&ds).map(|(c, s)| c * s).sum())
        })
        .collect()
}

pub(crate) fn gather_elements(x: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, indices: &Tensor, axis: usize) -> Result<Tensor, KernelError> {
        let data = flat_data(a);
        let offsets = element_offsets(a.shape(), indices, axis, "GatherElements")?;
        build(indices.shape(), offsets.iter().map(|&o| data[o]).collect())
    }
    dispatch_tensor!(x, a, T => go::<T>(a, indices, axis))
}

/// For GatherND/ScatterND: the data offset of every index tuple (the indices' last axis) and
/// the length of the contiguous slice each addresses.
fn tuple_offsets(
    data_shape: &[usize],
    indices: &Tensor,
    batch_dims: usize,
) -> Result<(Vec<usize>, usize), KernelError> {
    let ishape = indices.shape();
    let k = *ishape.last().ok_or("indices must have rank >= 1")?;
    let ds = strides(data_shape);
    let slice: usize = data_shape[batch_dims + k..].iter().product();
    let batch_stride: usize = data_shape[batch_dims..].iter().product();
    let per_batch: usize = ishape[batch_dims..ishape.len() - 1].iter().product();
    let idx = indices_of(indices)?;
    let tuples = idx.len() / k.max(1);
    let mut out = Vec::with_capacity(tuples);
    for t in 0..if k == 0 { ishape[..ishape.len() - 1].iter().product() } else { tuples } {
        let mut off = (t / per_batch.max(1)) * batch_stride;
        for j in 0..k {
            let d = batch_dims + j;
            off += resolve(idx[t * k + j], data_shape[d], "GatherND/ScatterND")? * ds[d];
        }
        out.push(off);
    }
    Ok((out, slice))
}

pub(crate) fn gather_nd(x: &Tensor, indices: &Tensor, batch_dims: usize) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, indices: &Tensor, batch_dims: usize) -> Result<Tensor, KernelError> {
        let out_shape = crate::infer::gather_nd_shape(a.shape(), indices.shape(), batch_dims)?;
        let data = flat_data(a);
        let (offsets, len) = tuple_offsets(a.shape(), indices, batch_dims)?;
        let mut out = Vec::with_capacity(offsets.len() * len);
        for o in offsets {
            out.extend_from_slice(&data[o..o + len]);
        }
        build(&out_shape, out)
    }
    dispatch_tensor!(x, a, T => go::<T>(a, indices, batch_dims))
}

fn combine<T: Element>(old: T, new: T, reduction: ScatterReduction) -> T {
    let wide = |f: fn(f64, f64) -> f64, g: fn(i128, i128) -> i128| {
        if T::DTYPE.is_float() {
            T::from_f64(f(old.to_f64(), new.to_f64()))
        } else {
            from_i128(g(to_i128(old), to_i128(new)))
        }
    };
    match reduction {
        ScatterReduction::None => new,
        ScatterReduction::Add => wide(|a, b| a + b, i128::wrapping_add),
        ScatterReduction::Mul => wide(|a, b| a * b, i128::wrapping_mul),
        ScatterReduction::Max => wide(f64::max, i128::max),
        ScatterReduction::Min => wide(f64::min, i128::min),
    }
}

pub(crate) fn scatter_elements(
    x: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    axis: usize,
    reduction: ScatterReduction,
) -> Result<Tensor, KernelError> {
    fn go<T: Element>(
        a: &ArrayD<T>,
        indices: &Tensor,
        updates: &Tensor,
        axis: usize,
        reduction: ScatterReduction,
    ) -> Result<Tensor, KernelError> {
        let upd = flat_data(T::array(updates).ok_or("updates differ in element type")?);
        let mut data = flat_data(a);
        for (o, u) in element_offsets(a.shape(), indices, axis, "ScatterElements")?.into_iter().zip(upd) {
            data[o] = combine(data[o], u, reduction);
        }
        build(a.shape(), data)
    }
    dispatch_tensor!(x, a, T => go::<T>(a, indices, updates, axis, reduction))
}

pub(crate) fn scatter_nd(
    x: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    reduction: ScatterReduction,
) -> Result<Tensor, KernelError> {
    fn go<T: Element>(
        a: &ArrayD<T>,
        indices: &Tensor,
        updates: &Tensor,
        reduction: ScatterReduction,
    ) -> Result<Tensor, KernelError> {
        let upd = flat_data(T::array(updates).ok_or("updates differ in element type")?);
        let mut data = flat_data(a);
        let (offsets, len) = tuple_offsets(a.shape(), indices, 0)?;
        for (t, o) in offsets.into_iter().enumerate() {
            for j in 0..len {
                data[o + j] = combine(data[o + j], upd[t * len + j], reduction);
            }
        }
        build(a.shape(), data)
    }
    dispatch_tensor!(x, a, T => go::<T>(a, indices, updates, reduction))
}

pub(crate) fn slice(x: &Tensor, axes: &[SliceAxis]) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, axes: &[SliceAxis]) -> Tensor {
        let shape: Vec<usize> = axes.iter().map(|s| s.len).collect();
        let mut src = vec![0usize; axes.len()];
        T::into_tensor(ArrayD::from_shape_fn(IxDyn(&shape), |o| {
            for (d, s) in axes.iter().enumerate() {
                src[d] = (s.start as i64 + o[d] as i64 * s.step) as usize;
            }
            a[IxDyn(&src)]
        }))
    }
    Ok(dispatch_tensor!(x, a, T => go::<T>(a, axes)))
}

pub(crate) fn expand(x: &Tensor, shape: &[usize]) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, shape: &[usize]) -> Result<Tensor, KernelError> {
        let out = crate::infer::broadcast_shapes(a.shape(), shape)?;
        Ok(T::into_tensor(a.broadcast(IxDyn(&out)).ok_or("Expand: shapes do not broadcast")?.to_owned()))
    }
    dispatch_tensor!(x, a, T => go::<T>(a, shape))
}

pub(crate) fn tile(x: &Tensor, repeats: &[usize]) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, repeats: &[usize]) -> Tensor {
        let shape: Vec<usize> = a.shape().iter().zip(repeats).map(|(n, r)| n * r).collect();
        let mut src = vec![0usize; shape.len()];
        T::into_tensor(ArrayD::from_shape_fn(IxDyn(&shape), |o| {
            for d in 0..src.len() {
                src[d] = o[d] % a.shape()[d];
            }
            a[IxDyn(&src)]
        }))
    }
    Ok(dispatch_tensor!(x, a, T => go::<T>(a, repeats)))
}

/// The outer count, axis length and inner count of `shape` around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

pub(crate) fn cumulative(
    x: &Tensor,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    product: bool,
) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, axis: usize, flags: (bool, bool, bool)) -> Result<Tensor, KernelError> {
        let (exclusive, reverse, product) = flags;
        let (outer, n, inner) = around(a.shape(), axis);
        let data = flat_data(a);
        let mut out = vec![T::default(); data.len()];
        let unit = if product { 1 } else { 0 };
        for o in 0..outer {
            for i in 0..inner {
                let (mut facc, mut iacc) = (unit as f64, unit as i128);
                for step in 0..n {
                    let l = if reverse { n - 1 - step } else { step };
                    let p = (o * n + l) * inner + i;
                    let v = data[p];
                    let bump = |facc: &mut f64, iacc: &mut i128| {
                        if product {
                            *facc *= v.to_f64();
                            *iacc = iacc.wrapping_mul(to_i128(v));
                        } else {
                            *facc += v.to_f64();
                            *iacc = iacc.wrapping_add(to_i128(v));
                        }
                        // Integers wrap in the element type as the compiled code's do.
                        *iacc = to_i128(from_i128::<T>(*iacc));
                    };
                    if !exclusive {
                        bump(&mut facc, &mut iacc);
                    }
                    out[p] = if T::DTYPE.is_float() { T::from_f64(facc) } else { from_i128(iacc) };
                    if exclusive {
                        bump(&mut facc, &mut iacc);
                    }
                }
            }
        }
        build(a.shape(), out)
    }
    dispatch_tensor!(x, a, T => go::<T>(a, axis, (exclusive, reverse, product)))
}

/// Whether `a` (at index `i`) comes before `b` (at `j`) in TopK's order: larger (or smaller)
/// first, NaN above every number, the lower index first among equals.
fn topk_before<T: Element>(a: T, i: usize, b: T, j: usize, largest: bool) -> bool {
    #[allow(clippy::eq_op)]
    let nan = |v: T| v != v;
    let ord = match (nan(a), nan(b)) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal),
    };
    let ord = if largest { ord.reverse() } else { ord };
    ord.then(i.cmp(&j)).is_lt()
}

pub(crate) fn topk(x: &Tensor, axis: usize, k: usize, largest: bool) -> Result<Vec<Tensor>, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, axis: usize, k: usize, largest: bool) -> Result<Vec<Tensor>, KernelError> {
        let (outer, n, inner) = around(a.shape(), axis);
        let data = flat_data(a);
        let mut out_shape = a.shape().to_vec();
        out_shape[axis] = k;
        let (mut values, mut indices) = (vec![T::default(); outer * k * inner], vec![0i64; outer * k * inner]);
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for o in 0..outer {
            for i in 0..inner {
                let at = |l: usize| data[(o * n + l) * inner + i];
                order.clear();
                order.extend(0..n);
                order.sort_by(|&p, &q| {
                    if p == q {
                        std::cmp::Ordering::Equal
                    } else if topk_before(at(p), p, at(q), q, largest) {
                        std::cmp::Ordering::Less
                    } else {
                        std::cmp::Ordering::Greater
                    }
                });
                for (r, &l) in order[..k].iter().enumerate() {
                    values[(o * k + r) * inner + i] = at(l);
                    indices[(o * k + r) * inner + i] = l as i64;
                }
            }
        }
        Ok(vec![build(&out_shape, values)?, build(&out_shape, indices)?])
    }
    dispatch_tensor!(x, a, T => go::<T>(a, axis, k, largest))
}

/// Separable interpolation through per-axis tap tables (see [`crate::op::Op::Resample`]).
pub(crate) fn resample(
    x: &Tensor,
    tables: &[&Tensor],
    axes: &[usize],
    extrapolation: Option<f32>,
) -> Result<Tensor, KernelError> {
    let per_axis: Vec<(Vec<i64>, Vec<f64>, usize)> = tables
        .chunks(2)
        .map(|t| Ok((indices_of(t[0])?, t[1].to_f64_vec(), t[0].shape()[1])))
        .collect::<Result<_, KernelError>>()?;
    fn go<T: Element>(
        a: &ArrayD<T>,
        per_axis: &[(Vec<i64>, Vec<f64>, usize)],
        axes: &[usize],
        extrapolation: Option<f32>,
    ) -> Result<Tensor, KernelError> {
        let mut out_shape = a.shape().to_vec();
        for (k, &d) in axes.iter().enumerate() {
            out_shape[d] = per_axis[k].0.len() / per_axis[k].2.max(1);
        }
        let taps: Vec<usize> = per_axis.iter().map(|p| p.2).collect();
        let combos: usize = taps.iter().product();
        let mut src = vec![0usize; a.ndim()];
        let mut tap = vec![0usize; axes.len()];
        let mut failed = None;
        let out = ArrayD::from_shape_fn(IxDyn(&out_shape), |o| {
            if extrapolation.is_some() && axes.iter().enumerate().any(|(k, &d)| per_axis[k].0[o[d] * taps[k]] < 0) {
                return T::from_f64(extrapolation.unwrap_or_default() as f64);
            }
            let mut sum = 0.0;
            for c in 0..combos {
                unravel(c, &taps, &mut tap);
                for (d, s) in src.iter_mut().enumerate() {
                    *s = o[d];
                }
                let mut w = 1.0;
                for (k, &d) in axes.iter().enumerate() {
                    let at = o[d] * taps[k] + tap[k];
                    let i = per_axis[k].0[at];
                    if i < 0 || i as usize >= a.shape()[d] {
                        failed = Some(i);
                    }
                    src[d] = (i.max(0) as usize).min(a.shape()[d].saturating_sub(1));
                    w *= per_axis[k].1[at];
                }
                sum += w * a[IxDyn(&src)].to_f64();
            }
            T::from_f64(sum)
        });
        if let Some(i) = failed {
            return Err(format!("Resize table index {i} is out of range").into());
        }
        Ok(T::into_tensor(out))
    }
    dispatch_tensor!(x, a, T => go::<T>(a, &per_axis, axes, extrapolation))
}

/// GridSample's coordinate along an axis of `len` for the normalized grid value `g`.
pub(crate) fn grid_denormalize(g: f64, len: usize, align_corners: bool) -> f64 {
    let l = len as f64;
    if align_corners { (g + 1.0) / 2.0 * (l - 1.0) } else { ((g + 1.0) * l - 1.0) / 2.0 }
}

/// `x` reflected by the nearer border until it lies in `lo..=hi`.
pub(crate) fn grid_reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    let fold = |dx: f64, near: f64, far: f64, sign: f64| {
        let n = (dx / range).trunc();
        let r = dx - n * range;
        if n.rem_euclid(2.0) == 0.0 { near + sign * r } else { far - sign * r }
    };
    if x < lo {
        fold(lo - x, lo, hi, 1.0)
    } else if x > hi {
        fold(x - hi, hi, lo, -1.0)
    } else {
        x
    }
}

/// Keys' cubic convolution kernel with coefficient `a` at distance `x`.
pub fn keys_cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
    } else if x < 2.0 {
        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
    } else {
        0.0
    }
}

/// Keys' cubic weights of the four taps around a point `t` past the second one.
pub fn cubic_weights(t: f64, a: f64) -> [f64; 4] {
    [t + 1.0, t, 1.0 - t, 2.0 - t].map(|x| keys_cubic(x, a))
}

pub(crate) fn grid_sample(
    x: &Tensor,
    grid: &Tensor,
    mode: GridMode,
    padding: GridPadding,
    align_corners: bool,
) -> Result<Tensor, KernelError> {
    let grid_shape = grid.shape().to_vec();
    let g = grid.to_f64_vec();
    fn go<T: Element>(
        a: &ArrayD<T>,
        g: &[f64],
        grid_shape: &[usize],
        (mode, padding, align_corners): (GridMode, GridPadding, bool),
    ) -> Result<Tensor, KernelError> {
        let dims = a.shape()[2..].to_vec();
        let k = dims.len();
        let mut out_shape = vec![a.shape()[0], a.shape()[1]];
        out_shape.extend_from_slice(&grid_shape[1..grid_shape.len() - 1]);
        let points: usize = grid_shape[1..grid_shape.len() - 1].iter().product();
        let (lo, hi): (Vec<f64>, Vec<f64>) =
            dims.iter().map(|&l| if align_corners { (0.0, l as f64 - 1.0) } else { (-0.5, l as f64 - 0.5) }).unzip();
        let taps: usize = match mode {
            GridMode::Nearest => 1,
            GridMode::Linear => 2,
            GridMode::Cubic => 4,
        };
        let mut tap = vec![0usize; k];
        let tap_counts = vec![taps; k];
        let mut src = vec![0usize; k + 2];
        let out = ArrayD::from_shape_fn(IxDyn(&out_shape), |o| {
            let p = (0..k).fold(0, |acc, d| acc * out_shape[2 + d] + o[2 + d]);
            let at = (o[0] * points + p) * k;
            // Per axis: the first tap's index and every tap's weight.
            let mut first = vec![0i64; k];
            let mut weights = vec![[0.0f64; 4]; k];
            for d in 0..k {
                let mut x = grid_denormalize(g[at + k - 1 - d], dims[d], align_corners);
                if mode == GridMode::Nearest {
                    x = x.round_ties_even();
                }
                if x < lo[d] || x > hi[d] {
                    x = match padding {
                        GridPadding::Border => x.clamp(0.0, dims[d] as f64 - 1.0),
                        GridPadding::Reflection => grid_reflect(x, lo[d], hi[d]),
                        GridPadding::Zeros => x,
                    };
                }
                let x0 = x.floor();
                let t = x - x0;
                (first[d], weights[d]) = match mode {
                    GridMode::Nearest => (x as i64, [1.0, 0.0, 0.0, 0.0]),
                    GridMode::Linear => (x0 as i64, [1.0 - t, t, 0.0, 0.0]),
                    GridMode::Cubic => (x0 as i64 - 1, cubic_weights(t, -0.75)),
                };
            }
            let mut sum = 0.0;
            'taps: for c in 0..taps.pow(k as u32) {
                unravel(c, &tap_counts, &mut tap);
                src[0] = o[0];
                src[1] = o[1];
                let mut w = 1.0;
                for d in 0..k {
                    let i = first[d] + tap[d] as i64;
                    let len = dims[d] as i64;
                    let i = match padding {
                        GridPadding::Zeros if i < 0 || i >= len => continue 'taps,
                        GridPadding::Zeros => i,
                        GridPadding::Border => i.clamp(0, len - 1),
                        GridPadding::Reflection => (grid_reflect(i as f64, lo[d], hi[d]) as i64).clamp(0, len - 1),
                    };
                    src[2 + d] = i as usize;
                    w *= weights[d][tap[d]];
                }
                sum += w * a[IxDyn(&src)].to_f64();
            }
            T::from_f64(sum)
        });
        Ok(T::into_tensor(out))
    }
    dispatch_tensor!(x, a, T => go::<T>(a, &g, &grid_shape, (mode, padding, align_corners)))
}
