//! Convolution (as im2col + matrix product), Gemm and batched MatMul, in float and integer forms.
//!
//! f16 is computed in f32; integer products accumulate in wrapping i64 and wrap to the i32 result,
//! so overflow behaves like the two's-complement hardware the compiled code targets.

use std::num::Wrapping;

use ndarray::{Array2, ArrayD, ArrayView2, ArrayViewD, Axis, IxDyn, LinalgScalar};

use crate::dtype::DType;
use crate::infer::{conv_output_shape, matmul_shape};
use crate::op::ConvAttrs;
use crate::tensor::{Element, Tensor};

use super::{KernelError, unravel};

type WI64 = Wrapping<i64>;

/// N-d grouped convolution: `x` (N, C, spatial...), `w` (M, C/group, kernel...).
pub(crate) fn conv_nd<T: LinalgScalar>(
    x: ArrayViewD<'_, T>,
    w: ArrayViewD<'_, T>,
    attrs: &ConvAttrs,
) -> Result<ArrayD<T>, KernelError> {
    let out_shape = conv_output_shape(attrs, x.shape(), w.shape())?;
    let x = x.as_standard_layout();
    let w = w.as_standard_layout();
    let (n, c, m, g) = (x.shape()[0], x.shape()[1], w.shape()[0], attrs.group);
    let (cg, mg) = (c / g, m / g);
    let in_sp = &x.shape()[2..];
    let out_sp = &out_shape[2..];
    let k = in_sp.len();
    let ks: usize = attrs.window.kernel.iter().product();
    let os: usize = out_sp.iter().product();
    let is: usize = in_sp.iter().product();
    let xs = x.as_slice().expect("standard layout");

    // Output positions are processed in blocks, so the im2col matrix stays small whatever the
    // output size (a few MiB, or one column when a single column is larger).
    let block = ((16 << 20) / (cg * ks * size_of::<T>()).max(1)).clamp(1, os.max(1));
    let mut out = vec![T::zero(); n * m * os];
    let mut cols = Array2::<T>::zeros((cg * ks, block));
    let w2 = w.to_shape((m, cg * ks)).map_err(|e| e.to_string())?;
    let (mut kc, mut oc) = (vec![0; k], vec![0; k]);
    // The flat spatial input index of kernel offset `kidx` at output position `oidx`, or None
    // when it falls into padding.
    let mut tap = |kidx: usize, oidx: usize| -> Option<usize> {
        unravel(kidx, &attrs.window.kernel, &mut kc);
        unravel(oidx, out_sp, &mut oc);
        let mut flat = 0usize;
        for d in 0..k {
            let pos = (oc[d] * attrs.window.strides[d] + kc[d] * attrs.window.dilations[d]) as isize
                - attrs.window.pads_begin[d] as isize;
            if pos < 0 || pos as usize >= in_sp[d] {
                return None;
            }
            flat = flat * in_sp[d] + pos as usize;
        }
        Some(flat)
    };
    for o0 in (0..os).step_by(block) {
        let width = block.min(os - o0);
        let taps: Vec<Option<usize>> =
            (0..ks).flat_map(|kidx| (o0..o0 + width).map(move |o| (kidx, o))).map(|(kidx, o)| tap(kidx, o)).collect();
        for b in 0..n {
            for gi in 0..g {
                for ci in 0..cg {
                    let plane = &xs[(b * c + gi * cg + ci) * is..][..is];
                    for kidx in 0..ks {
                        let mut row = cols.row_mut(ci * ks + kidx);
                        for (dst, t) in row.iter_mut().zip(&taps[kidx * width..][..width]) {
                            *dst = t.map_or(T::zero(), |i| plane[i]);
                        }
                    }
                }
                let res = w2.slice(ndarray::s![gi * mg..(gi + 1) * mg, ..]).dot(&cols.slice(ndarray::s![.., ..width]));
                for (r, row) in res.outer_iter().enumerate() {
                    let base = (b * m + gi * mg + r) * os + o0;
                    for (dst, v) in out[base..base + width].iter_mut().zip(row.iter()) {
                        *dst = *v;
                    }
                }
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| e.to_string().into())
}

fn add_channel_bias<T: LinalgScalar>(out: &mut ArrayD<T>, bias: &[T]) {
    for (ch, &bv) in bias.iter().enumerate() {
        out.index_axis_mut(Axis(1), ch).mapv_inplace(|v| v + bv);
    }
}

fn to_f32<T: Element>(a: &ArrayD<T>) -> ArrayD<f32> {
    a.mapv(|v| v.to_f64() as f32)
}

pub(crate) fn conv(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, attrs: &ConvAttrs) -> Result<Tensor, KernelError> {
    fn go<T: LinalgScalar + Element>(
        x: &ArrayD<T>,
        w: &Tensor,
        bias: Option<&Tensor>,
        attrs: &ConvAttrs,
    ) -> Result<ArrayD<T>, KernelError> {
        let w = T::array(w).ok_or("weight element type differs")?;
        let mut out = conv_nd(x.view(), w.view(), attrs)?;
        if let Some(b) = bias {
            let b = T::array(b).ok_or("bias element type differs")?;
            add_channel_bias(&mut out, &b.iter().copied().collect::<Vec<_>>());
        }
        Ok(out)
    }
    match x {
        Tensor::F32(a) => Ok(Tensor::F32(go(a, w, bias, attrs)?)),
        Tensor::F64(a) => Ok(Tensor::F64(go(a, w, bias, attrs)?)),
        Tensor::F16(a) => {
            let w = w.cast(DType::F32);
            let bias = bias.map(|b| b.cast(DType::F32));
            Ok(Tensor::F32(go(&to_f32(a), &w, bias.as_ref(), attrs)?).cast(DType::F16))
        }
        other => Err(format!("Conv does not support {}", other.dtype()).into()),
    }
}

/// Zero-point-corrected 8-bit operand as wrapping i64.
fn corrected(t: &Tensor, zp: &Tensor, axis: usize) -> Result<ArrayD<WI64>, KernelError> {
    let vals = t.to_i64_vec().ok_or("expected an integer tensor")?;
    let zps = zp.to_i64_vec().ok_or("expected an integer zero point")?;
    let shape = t.shape().to_vec();
    let stride: usize = shape[axis + 1..].iter().product();
    let n = shape.get(axis).copied().unwrap_or(1);
    let data = vals
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let z = if zps.len() == 1 { zps[0] } else { zps[(i / stride) % n] };
            Wrapping(v - z)
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(&shape), data).map_err(|e| e.to_string().into())
}

fn wrap_to_i32(a: ArrayD<WI64>) -> Tensor {
    Tensor::I32(a.mapv(|v| v.0 as i32))
}

pub(crate) fn conv_integer(
    x: &Tensor,
    w: &Tensor,
    x_zp: &Tensor,
    w_zp: &Tensor,
    attrs: &ConvAttrs,
) -> Result<Tensor, KernelError> {
    let xc = corrected(x, x_zp, 0)?;
    let wc = corrected(w, w_zp, 0)?;
    Ok(wrap_to_i32(conv_nd(xc.view(), wc.view(), attrs)?))
}

/// numpy matmul over any ndarray scalar, with 1-d promotion and batch broadcasting.
pub(crate) fn matmul_nd<T: LinalgScalar>(a: &ArrayD<T>, b: &ArrayD<T>) -> Result<ArrayD<T>, KernelError> {
    let out_shape = matmul_shape(a.shape(), b.shape())?;
    let a2 = if a.ndim() == 1 { a.view().insert_axis(Axis(0)) } else { a.view() };
    let b2 = if b.ndim() == 1 { b.view().insert_axis(Axis(1)) } else { b.view() };
    let (ra, rb) = (a2.ndim(), b2.ndim());
    let (m, n) = (a2.shape()[ra - 2], b2.shape()[rb - 1]);
    let batch = crate::infer::broadcast_shapes(&a2.shape()[..ra - 2], &b2.shape()[..rb - 2])?;
    let mut ashape = batch.clone();
    ashape.extend_from_slice(&a2.shape()[ra - 2..]);
    let mut bshape = batch.clone();
    bshape.extend_from_slice(&b2.shape()[rb - 2..]);
    let av = a2.broadcast(IxDyn(&ashape)).ok_or("broadcast failed")?;
    let bv = b2.broadcast(IxDyn(&bshape)).ok_or("broadcast failed")?;
    let nb: usize = batch.iter().product();
    let mut data = Vec::with_capacity(nb * m * n);
    let mut idx = vec![0; batch.len()];
    for bi in 0..nb {
        unravel(bi, &batch, &mut idx);
        let mut am = av.view();
        let mut bm = bv.view();
        for &i in &idx {
            am.index_axis_inplace(Axis(0), i);
            bm.index_axis_inplace(Axis(0), i);
        }
        let am: ArrayView2<'_, T> = am.into_dimensionality().map_err(|e| e.to_string())?;
        let bm: ArrayView2<'_, T> = bm.into_dimensionality().map_err(|e| e.to_string())?;
        data.extend(am.dot(&bm).iter().copied());
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), data).map_err(|e| e.to_string().into())
}

pub(crate) fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => Ok(Tensor::F32(matmul_nd(x, y)?)),
        (Tensor::F64(x), Tensor::F64(y)) => Ok(Tensor::F64(matmul_nd(x, y)?)),
        (Tensor::F16(x), Tensor::F16(y)) => Ok(Tensor::F32(matmul_nd(&to_f32(x), &to_f32(y))?).cast(DType::F16)),
        _ if a.dtype() == b.dtype() && a.dtype().is_int() => {
            let wrap = |t: &Tensor| -> Result<ArrayD<WI64>, KernelError> {
                let v = t.to_i64_vec().ok_or("expected integers")?;
                ArrayD::from_shape_vec(IxDyn(t.shape()), v.into_iter().map(Wrapping).collect())
                    .map_err(|e| e.to_string().into())
            };
            let r = matmul_nd(&wrap(a)?, &wrap(b)?)?;
            let dtype = a.dtype();
            Ok(Tensor::I64(r.mapv(|v| v.0)).cast(dtype))
        }
        _ => Err(format!("MatMul does not support {} x {}", a.dtype(), b.dtype()).into()),
    }
}

pub(crate) fn matmul_integer(a: &Tensor, b: &Tensor, a_zp: &Tensor, b_zp: &Tensor) -> Result<Tensor, KernelError> {
    // a's zero point runs along its rows (axis -2), b's along its columns (axis -1).
    let a_axis = a.shape().len().saturating_sub(2);
    let b_axis = b.shape().len().saturating_sub(1);
    let ac = if a.shape().len() >= 2 { corrected(a, a_zp, a_axis)? } else { corrected(a, a_zp, 0)? };
    let bc = corrected(b, b_zp, b_axis)?;
    Ok(wrap_to_i32(matmul_nd(&ac, &bc)?))
}

pub(crate) fn gemm(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> Result<Tensor, KernelError> {
    fn go<T: LinalgScalar + Element>(
        a: &ArrayD<T>,
        b: &ArrayD<T>,
        c: Option<&ArrayD<T>>,
        alpha: f32,
        beta: f32,
        ta: bool,
        tb: bool,
    ) -> Result<ArrayD<T>, KernelError> {
        let a: ArrayView2<'_, T> = a.view().into_dimensionality().map_err(|e| e.to_string())?;
        let b: ArrayView2<'_, T> = b.view().into_dimensionality().map_err(|e| e.to_string())?;
        let a = if ta { a.t() } else { a };
        let b = if tb { b.t() } else { b };
        let mut y = a.dot(&b);
        if alpha != 1.0 {
            let al = T::from_f64(alpha as f64);
            y.mapv_inplace(|v| v * al);
        }
        if let Some(c) = c {
            let be = T::from_f64(beta as f64);
            let cb = c.broadcast(IxDyn(y.shape())).ok_or("C does not broadcast")?;
            y.zip_mut_with(&cb, |v, &cv| *v = *v + be * cv);
        }
        Ok(y.into_dyn())
    }
    match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => {
            let c = c.map(|c| c.as_array::<f32>().ok_or("C element type differs")).transpose()?;
            Ok(Tensor::F32(go(x, y, c, alpha, beta, trans_a, trans_b)?))
        }
        (Tensor::F64(x), Tensor::F64(y)) => {
            let c = c.map(|c| c.as_array::<f64>().ok_or("C element type differs")).transpose()?;
            Ok(Tensor::F64(go(x, y, c, alpha, beta, trans_a, trans_b)?))
        }
        (Tensor::F16(x), Tensor::F16(y)) => {
            let c32 = c.map(|c| c.cast(DType::F32));
            let c = c32.as_ref().and_then(|c| c.as_array::<f32>());
            let r = go(&to_f32(x), &to_f32(y), c, alpha, beta, trans_a, trans_b)?;
            Ok(Tensor::F32(r).cast(DType::F16))
        }
        _ => Err(format!("Gemm does not support {} x {}", a.dtype(), b.dtype()).into()),
    }
}
