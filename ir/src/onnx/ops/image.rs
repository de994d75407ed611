//! Image-space operators built from graph ops: AffineGrid (a constant grid of normalized
//! coordinates times each batch's affine matrix), Col2Im (the blocks of an unfolded image
//! summed back, one shifted copy per kernel position), ImageScaler (the experimental per-channel
//! affine of opset 1-9 models).

use crate::dtype::DType;
use crate::graph::ValueId;
use crate::op::{BinaryOp, Op, PadMode, SliceAxis};
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::build::{constant, output, step};
use super::tensor_ops::input_id;
use super::{NodeCtx, const_ints, input_type, to_usizes};

/// Most kernel positions Col2Im expands to (each is a few graph nodes).
const MAX_KERNEL_POSITIONS: usize = 1 << 12;

pub(super) fn import(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    match ctx.node.op_type.as_str() {
        "AffineGrid" => affine_grid(im, ctx),
        "Col2Im" => col2im(im, ctx),
        _ => image_scaler(im, ctx),
    }
}

/// `grid[n, spatial..., :] = theta[n] @ (x, y[, z], 1)` over normalized coordinates in [-1, 1]
/// (pixel centers, or corners with `align_corners`).
fn affine_grid(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let theta = input_type(im, ctx, 0)?;
    let size = const_ints(im, ctx, 1, "size")?.ok_or_else(|| ctx.bad("input 1 (size) is required"))?;
    let size = to_usizes(ctx, "size", &size, 1)?;
    let k = size.len().saturating_sub(2);
    if !matches!(k, 2 | 3) || !theta.dtype.is_float() || theta.shape != [size[0], k, k + 1] {
        return Err(ctx.bad(format!(
            "theta {} must be [N, 2, 3] or [N, 3, 4] floats matching size {size:?} ([N, C, H, W] or [N, C, D, H, W])",
            theta
        )));
    }
    let spatial = &size[2..];
    // The base grid is built in f64: checked as such before anything is allocated.
    im.graph.limits.check_shape(DType::F64, &[spatial, &[k + 1]].concat()).map_err(|e| ctx.bad(e.to_string()))?;
    let points: usize = spatial.iter().product();
    let align = ctx.flag("align_corners", false)?;
    let coordinate = |i: usize, len: usize| -> f64 {
        match (align, len) {
            (true, 1) => -1.0,
            (true, _) => -1.0 + 2.0 * i as f64 / (len - 1) as f64,
            (false, _) => -1.0 + (2 * i + 1) as f64 / len as f64,
        }
    };
    // Row p of the base grid: the point's coordinates, fastest axis (x) first, then 1.
    let mut base = Vec::with_capacity(points * (k + 1));
    for p in 0..points {
        let mut rest = p;
        let mut index = vec![0; k];
        for d in (0..k).rev() {
            index[d] = rest % spatial[d];
            rest /= spatial[d];
        }
        base.extend((0..k).rev().map(|d| coordinate(index[d], spatial[d])));
        base.push(1.0);
    }
    let base = Tensor::from_vec::<f64>(&[points, k + 1], base).map_err(|e| ctx.bad(e))?.cast(theta.dtype);
    let base = constant(im, ctx, "base_grid", base);
    let t = input_id(im, ctx, 0)?;
    let t = step(im, ctx, "theta_t", Op::Transpose { perm: vec![0, 2, 1] }, &[t])?;
    let grid = step(im, ctx, "grid_points", Op::MatMul, &[base, t])?;
    let shape = [&[size[0]], spatial, &[k]].concat();
    output(im, ctx, 0, Op::Reshape { shape }, &[grid])
}

/// Col2Im: `[N, C * prod(block), L]` columns to `[N, C, image...]`, overlapping blocks summed.
fn col2im(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let image = const_ints(im, ctx, 1, "image_shape")?.ok_or_else(|| ctx.bad("input 1 (image_shape) is required"))?;
    let block = const_ints(im, ctx, 2, "block_shape")?.ok_or_else(|| ctx.bad("input 2 (block_shape) is required"))?;
    let (image, block) = (to_usizes(ctx, "image_shape", &image, 1)?, to_usizes(ctx, "block_shape", &block, 1)?);
    let m = image.len();
    let attr = |name: &str, default: usize, len: usize| -> Result<Vec<usize>, ImportError> {
        let v = ctx.ints(name)?.map_or(Ok(vec![default; len]), |v| to_usizes(ctx, name, &v, default.min(1) as i64))?;
        if v.len() != len {
            return Err(ctx.bad_attr(name, format!("has {} entries, need {len}", v.len())));
        }
        Ok(v)
    };
    let (dilations, strides, pads) = (attr("dilations", 1, m)?, attr("strides", 1, m)?, attr("pads", 0, 2 * m)?);
    // Bounded so every extent below stays far inside i64 (anything larger exceeds the limits).
    const MAX_EXTENT: usize = 1 << 40;
    if image.iter().chain(&block).chain(&dilations).chain(&strides).chain(&pads).any(|&v| v > MAX_EXTENT) {
        return Err(ctx.bad(format!("image, block, dilations, strides or pads exceed {MAX_EXTENT}")));
    }
    let positions = block.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).filter(|&k| k <= MAX_KERNEL_POSITIONS);
    let Some(positions) = positions.filter(|_| m >= 1 && block.len() == m && x.rank() == 3) else {
        return Err(ctx.bad(format!(
            "input {:?} must be [N, C * prod(block), L] with image {image:?} and block {block:?} of one rank and at most \
             {MAX_KERNEL_POSITIONS} kernel positions",
            x.shape
        )));
    };
    if x.shape[1] % positions != 0 {
        return Err(ctx.bad(format!("{} columns do not divide into blocks of {positions}", x.shape[1])));
    }
    let channels = x.shape[1] / positions;
    // Blocks along each axis, as a convolution over the padded image would slide them.
    let mut blocks = Vec::with_capacity(m);
    for d in 0..m {
        let span = (block[d] - 1).checked_mul(dilations[d]).map(|s| s + 1);
        let padded = image[d].checked_add(pads[d]).and_then(|v| v.checked_add(pads[m + d]));
        match (span, padded) {
            (Some(s), Some(p)) if p >= s => blocks.push((p - s) / strides[d] + 1),
            _ => return Err(ctx.bad(format!("block {block:?} does not fit image {image:?} on axis {d}"))),
        }
    }
    if crate::limits::checked_elements(&blocks) != Some(x.shape[2]) {
        return Err(ctx.bad(format!("{} blocks given, the image and block shapes make {blocks:?}", x.shape[2])));
    }
    let n = x.shape[0];
    let mut cols = input_id(im, ctx, 0)?;
    cols = step(im, ctx, "blocks", Op::Reshape { shape: [&[n, channels, positions][..], &blocks].concat() }, &[cols])?;
    // Stride zeros between blocks: [.., b, 1, ..] padded to [.., b, s, ..].
    let stretched: Vec<usize> = (0..m).map(|d| blocks[d] * strides[d]).collect();
    if strides.iter().any(|&s| s > 1) {
        let mut split = vec![n, channels, positions];
        let mut pad = vec![0i64; 2 * (3 + 2 * m)];
        for d in 0..m {
            split.extend([blocks[d], 1]);
            pad[3 + 2 * m + 3 + 2 * d + 1] = strides[d] as i64 - 1;
        }
        let r = step(im, ctx, "split_blocks", Op::Reshape { shape: split }, &[cols])?;
        let zero = Tensor::scalar_from_f64(x.dtype, 0.0);
        let p = step(im, ctx, "strided", Op::Pad { pads: pad, mode: PadMode::Constant, value: zero }, &[r])?;
        cols = step(
            im,
            ctx,
            "stretched",
            Op::Reshape { shape: [&[n, channels, positions][..], &stretched].concat() },
            &[p],
        )?;
    }
    // Kernel position k adds its blocks shifted by k * dilation - pad_begin.
    let mut sum: Option<ValueId> = None;
    let full: Vec<SliceAxis> = [&[n, channels, positions][..], &stretched]
        .concat()
        .iter()
        .map(|&len| SliceAxis { start: 0, step: 1, len })
        .collect();
    for k in 0..positions {
        let mut axes = full.clone();
        axes[2] = SliceAxis { start: k, step: 1, len: 1 };
        let part = step(im, ctx, "position", Op::Slice { axes }, &[cols])?;
        let part =
            step(im, ctx, "position_plane", Op::Reshape { shape: [&[n, channels][..], &stretched].concat() }, &[part])?;
        let mut rest = k;
        let mut pad = vec![0i64; 2 * (2 + m)];
        for d in (0..m).rev() {
            let offset = (rest % block[d]) as i64 * dilations[d] as i64 - pads[d] as i64;
            rest /= block[d];
            pad[2 + d] = offset;
            pad[2 + m + 2 + d] = image[d] as i64 - offset - stretched[d] as i64;
        }
        let zero = Tensor::scalar_from_f64(x.dtype, 0.0);
        let placed = step(im, ctx, "placed", Op::Pad { pads: pad, mode: PadMode::Constant, value: zero }, &[part])?;
        sum = Some(match sum {
            None => placed,
            Some(s) => step(im, ctx, "summed", Op::Binary(BinaryOp::Add), &[s, placed])?,
        });
    }
    let sum = sum.ok_or_else(|| ctx.bad("no kernel positions"))?;
    output(im, ctx, 0, Op::Identity, &[sum])
}

/// ImageScaler (experimental, opsets 1-9): `scale * x + bias[c]` over NCHW.
fn image_scaler(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let bias = ctx.floats("bias")?.unwrap_or_default();
    if x.rank() < 2 || !x.dtype.is_float() || (!bias.is_empty() && bias.len() != x.shape[1]) {
        return Err(ctx.bad(format!("bias {bias:?} must give one value per channel of {}", x)));
    }
    let xin = input_id(im, ctx, 0)?;
    let scale = ctx.float("scale", 1.0)?;
    let s = constant(im, ctx, "scale", Tensor::scalar_from_f64(x.dtype, f64::from(scale)));
    let scaled = step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[xin, s])?;
    let mut shape = vec![1; x.rank() - 1];
    shape[0] = x.shape[1];
    let values = if bias.is_empty() { vec![0.0; x.shape[1]] } else { bias.iter().map(|&b| f64::from(b)).collect() };
    let b = Tensor::from_vec::<f64>(&shape, values).map_err(|e| ctx.bad(e))?.cast(x.dtype);
    let b = constant(im, ctx, "bias", b);
    output(im, ctx, 0, Op::Binary(BinaryOp::Add), &[scaled, b])
}
