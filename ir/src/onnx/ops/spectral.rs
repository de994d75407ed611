//! DFT (versions 17 and 20) and STFT (17) as one matrix product with a constant transform
//! matrix: the signal's samples and its real/imaginary component, flattened together, times a
//! `[samples x components, bins x components]` matrix of cosines and sines built here in f64.
//! Truncation, zero padding, one-sided output, the inverse and the inverse real transform
//! (Hermitian input, real output) are all choices of that matrix; a constant STFT window is
//! folded into it. The cost is O(n^2) per transform (a GEMM, which the JIT vectorizes), so the
//! matrix size goes through the size limits like every tensor.

use crate::dtype::{DType, TensorType};
use crate::graph::ValueId;
use crate::op::{BinaryOp, Op};
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::build::{constant, output, slice_axis, step};
use super::tensor_ops::{const_scalar, input_id};
use super::{NodeCtx, input_type, norm_axis};

/// Which transform a matrix computes.
#[derive(Clone, Copy)]
enum Direction {
    /// `X[k] = sum_n x[n] e^(-2 pi i k n / L)`.
    Forward,
    /// `x[n] = (1/L) sum_k X[k] e^(2 pi i k n / L)`.
    Inverse,
    /// numpy's `irfft`: the one-sided bins of a Hermitian spectrum to a real signal of length L.
    InverseReal,
}

/// One transform along the second-to-last axis of `[lead..., samples, components]`.
struct Transform {
    length: usize,
    samples: usize,
    components_in: usize,
    bins: usize,
    direction: Direction,
}

impl Transform {
    fn components_out(&self) -> usize {
        match self.direction {
            Direction::InverseReal => 1,
            _ => 2,
        }
    }

    /// The `[samples * components_in, bins * components_out]` matrix, row-major; row `n` is
    /// scaled by `window[n]` when given.
    fn matrix(&self, window: Option<&[f64]>) -> Vec<f64> {
        let (ci, co) = (self.components_in, self.components_out());
        let cols = self.bins * co;
        let mut m = vec![0.0; self.samples * ci * cols];
        let l = self.length as u128;
        let scale = 1.0 / self.length as f64;
        for n in 0..self.samples {
            let w = window.map_or(1.0, |w| w[n]);
            for k in 0..self.bins {
                // The phase reduced exactly in integers keeps large n * k accurate.
                let phase = (n as u128 * k as u128 % l) as f64 / self.length as f64;
                let (sin, cos) = (2.0 * std::f64::consts::PI * phase).sin_cos();
                let at = |row: usize, col: usize| row * cols + col;
                match self.direction {
                    Direction::InverseReal => {
                        // Bin n stands for itself and its mirror L - n, except DC and Nyquist,
                        // whose imaginary parts do not contribute.
                        let edge = n == 0 || 2 * n == self.length;
                        let weight = if edge { 1.0 } else { 2.0 } * scale * w;
                        m[at(n * ci, k)] = weight * cos;
                        if ci == 2 && !edge {
                            m[at(n * ci + 1, k)] = -weight * sin;
                        }
                    }
                    Direction::Forward | Direction::Inverse => {
                        let (re, im) = match self.direction {
                            Direction::Forward => (cos * w, -sin * w),
                            _ => (cos * scale * w, sin * scale * w),
                        };
                        // (xr + i xi)(re + i im) = (xr re - xi im) + i (xr im + xi re).
                        m[at(n * ci, 2 * k)] = re;
                        m[at(n * ci, 2 * k + 1)] = im;
                        if ci == 2 {
                            m[at(n * ci + 1, 2 * k)] = -im;
                            m[at(n * ci + 1, 2 * k + 1)] = re;
                        }
                    }
                }
            }
        }
        m
    }

    /// `x` (`[lead..., samples, components_in]`, already cut to `samples`) transformed to
    /// `[lead..., bins, components_out]`.
    fn apply(
        &self,
        im: &mut Importer<'_>,
        ctx: &NodeCtx<'_>,
        x: ValueId,
        window: Option<&[f64]>,
    ) -> Result<ValueId, ImportError> {
        let ty = im.graph.ty(x).clone();
        let lead = &ty.shape[..ty.rank() - 2];
        let (rows, cols) = (self.samples * self.components_in, self.bins * self.components_out());
        // Checked as the f64 matrix it is built in.
        im.graph.limits.check_shape(DType::F64, &[rows, cols]).map_err(|e| {
            ctx.bad(format!("its {rows} x {cols} transform matrix (length {}) is too large: {e}", self.length))
        })?;
        let matrix = Tensor::from_vec::<f64>(&[rows, cols], self.matrix(window)).map_err(|e| ctx.bad(e))?;
        let matrix = constant(im, ctx, "dft_matrix", matrix.cast(ty.dtype));
        let flat = [lead, &[rows]].concat();
        let flat = step(im, ctx, "flat_signal", Op::Reshape { shape: flat }, &[x])?;
        let spectrum = step(im, ctx, "flat_spectrum", Op::MatMul, &[flat, matrix])?;
        let shape = [lead, &[self.bins, self.components_out()]].concat();
        step(im, ctx, "spectrum", Op::Reshape { shape }, &[spectrum])
    }
}

/// Checks `[..., components]` with 1 (real) or 2 (complex) components of a float type.
fn check_signal(ctx: &NodeCtx<'_>, x: &TensorType, min_rank: usize) -> Result<(), ImportError> {
    if !x.dtype.is_float() {
        return Err(ctx.bad(format!("the signal must be a float tensor, got {:?}", x.dtype)));
    }
    if x.rank() < min_rank || !matches!(x.shape.last(), Some(1 | 2)) {
        return Err(ctx.bad(format!(
            "the signal must have rank >= {min_rank} and a last axis of 1 (real) or 2 (complex) components, got \
             shape {:?}",
            x.shape
        )));
    }
    Ok(())
}

pub(super) fn dft(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    check_signal(ctx, &x, 2)?;
    let r = x.rank();
    let axis = if ctx.version >= 20 {
        if ctx.input(2).is_some() { const_scalar(im, ctx, 2, "axis")? } else { -2 }
    } else {
        ctx.int("axis", 1)?
    };
    let axis = norm_axis(ctx, "axis", axis, r)?;
    if axis == r - 1 {
        return Err(ctx.bad_attr("axis", "must not be the last (component) axis"));
    }
    let (inverse, onesided) = (ctx.flag("inverse", false)?, ctx.flag("onesided", false)?);
    let n_in = x.shape[axis];
    let length = if ctx.input(1).is_some() {
        let l = const_scalar(im, ctx, 1, "dft_length")?;
        usize::try_from(l).ok().filter(|&l| l > 0).ok_or_else(|| ctx.bad(format!("dft_length must be > 0, got {l}")))?
    } else if inverse && onesided {
        2 * n_in.saturating_sub(1)
    } else {
        n_in
    };
    if length == 0 || n_in == 0 {
        return Err(ctx.bad(format!("the transform is empty (axis {axis} of {:?}, length {length})", x.shape)));
    }
    let transform = match (inverse, onesided) {
        (true, true) => Transform {
            length,
            samples: n_in.min(length / 2 + 1),
            components_in: x.shape[r - 1],
            bins: length,
            direction: Direction::InverseReal,
        },
        (inverse, onesided) => Transform {
            length,
            samples: n_in.min(length),
            components_in: x.shape[r - 1],
            bins: if onesided { length / 2 + 1 } else { length },
            direction: if inverse { Direction::Inverse } else { Direction::Forward },
        },
    };
    let xin = input_id(im, ctx, 0)?;
    let xin = slice_axis(im, ctx, "truncated", xin, axis, 0, transform.samples)?;
    // The transformed axis goes next to the component axis, then back.
    let perm: Vec<usize> = (0..r - 1).filter(|&a| a != axis).chain([axis, r - 1]).collect();
    let moved = perm.iter().enumerate().any(|(i, &p)| i != p);
    let xin = if moved { step(im, ctx, "moved", Op::Transpose { perm: perm.clone() }, &[xin])? } else { xin };
    let y = transform.apply(im, ctx, xin, None)?;
    if moved {
        let mut back = vec![0; r];
        for (i, &p) in perm.iter().enumerate() {
            back[p] = i;
        }
        output(im, ctx, 0, Op::Transpose { perm: back }, &[y])
    } else {
        output(im, ctx, 0, Op::Identity, &[y])
    }
}

pub(super) fn stft(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let mut x = input_type(im, ctx, 0)?;
    let mut xin = input_id(im, ctx, 0)?;
    if x.rank() == 2 {
        // [batch, length] is a real signal (as ONNX Runtime reads it; torch exports it so).
        x.shape.push(1);
        xin = step(im, ctx, "real_signal", Op::Reshape { shape: x.shape.clone() }, &[xin])?;
    }
    check_signal(ctx, &x, 3)?;
    if x.rank() != 3 {
        return Err(ctx.bad(format!("the signal must be [batch, length(, components)], got {:?}", x.shape)));
    }
    let (signal_len, components) = (x.shape[1], x.shape[2]);
    let hop = const_scalar(im, ctx, 1, "frame_step")?;
    let hop = usize::try_from(hop)
        .ok()
        .filter(|&h| h > 0)
        .ok_or_else(|| ctx.bad(format!("frame_step must be > 0, got {hop}")))?;
    let window = match ctx.input(2) {
        Some(_) => {
            let w = input_type(im, ctx, 2)?;
            if w.rank() != 1 || w.dtype != x.dtype {
                return Err(
                    ctx.bad(format!("the window must be 1-D of the signal's type, got {:?} {:?}", w.dtype, w.shape))
                );
            }
            Some((input_id(im, ctx, 2)?, w.shape[0]))
        }
        None => None,
    };
    let frame_len = match (ctx.input(3).map(|_| const_scalar(im, ctx, 3, "frame_length")).transpose()?, window) {
        (Some(f), _) => usize::try_from(f)
            .ok()
            .filter(|&f| f > 0)
            .ok_or_else(|| ctx.bad(format!("frame_length must be > 0, got {f}")))?,
        (None, Some((_, w))) => w,
        (None, None) => signal_len,
    };
    if let Some((_, w)) = window.filter(|&(_, w)| w != frame_len) {
        return Err(ctx.bad(format!("the window has {w} values but frames have {frame_len}")));
    }
    if frame_len == 0 || frame_len > signal_len {
        return Err(ctx.bad(format!("frames of {frame_len} do not fit a signal of {signal_len}")));
    }
    let frames = (signal_len - frame_len) / hop + 1;
    let onesided = ctx.flag("onesided", true)?;
    let transform = Transform {
        length: frame_len,
        samples: frame_len,
        components_in: components,
        bins: if onesided { frame_len / 2 + 1 } else { frame_len },
        direction: Direction::Forward,
    };
    // Frame f is samples f * hop .. f * hop + frame_len: one Gather along the signal axis.
    for (dtype, shape) in
        [(x.dtype, vec![x.shape[0], frames, frame_len, components]), (DType::I64, vec![frames, frame_len])]
    {
        im.graph.limits.check_shape(dtype, &shape).map_err(|e| ctx.bad(e.to_string()))?;
    }
    let starts = (0..frames).flat_map(|f| (0..frame_len).map(move |n| (f * hop + n) as i64)).collect();
    let indices = Tensor::from_vec::<i64>(&[frames, frame_len], starts).map_err(|e| ctx.bad(e))?;
    let indices = constant(im, ctx, "frame_indices", indices);
    let mut framed = step(im, ctx, "frames", Op::Gather { axis: 1 }, &[xin, indices])?;
    // A constant window is folded into the matrix; a computed one multiplies the frames.
    let window_values = match window {
        Some((w, _)) => match super::const_input_opt(im, ctx, 2)? {
            Some(t) => Some(t.to_f64_vec()),
            None => {
                let column = step(im, ctx, "window_column", Op::Reshape { shape: vec![frame_len, 1] }, &[w])?;
                framed = step(im, ctx, "windowed", Op::Binary(BinaryOp::Mul), &[framed, column])?;
                None
            }
        },
        None => None,
    };
    let y = transform.apply(im, ctx, framed, window_values.as_deref())?;
    output(im, ctx, 0, Op::Identity, &[y])
}
