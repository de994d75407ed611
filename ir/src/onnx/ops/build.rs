//! Helpers for translations that expand one ONNX node into several graph nodes (the op's
//! function body, as the ONNX schema defines it).

use crate::graph::ValueId;
use crate::op::Op;
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::{NodeCtx, fold_if_constant};

/// An intermediate node of `ctx`'s expansion, named after the node; folded to a constant when
/// its inputs are constants.
pub(super) fn step(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    what: &str,
    op: Op,
    inputs: &[ValueId],
) -> Result<ValueId, ImportError> {
    let name = im.fresh_name(&format!("{}:{what}", ctx.name));
    let id = im.graph.add_op(name, op, inputs)?;
    fold_if_constant(im, &[id]);
    Ok(id)
}

/// `x[.., start..start + len, ..]` along `axis` (`x` itself when that is all of it).
pub(super) fn slice_axis(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    what: &str,
    x: ValueId,
    axis: usize,
    start: usize,
    len: usize,
) -> Result<ValueId, ImportError> {
    let shape = im.graph.ty(x).shape.clone();
    if start == 0 && shape[axis] == len {
        return Ok(x);
    }
    let mut axes: Vec<crate::op::SliceAxis> =
        shape.iter().map(|&len| crate::op::SliceAxis { start: 0, step: 1, len }).collect();
    axes[axis] = crate::op::SliceAxis { start, step: 1, len };
    step(im, ctx, what, Op::Slice { axes }, &[x])
}

/// A constant of `ctx`'s expansion.
pub(super) fn constant(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, what: &str, t: Tensor) -> ValueId {
    let name = im.fresh_name(&format!("{}:{what}", ctx.name));
    im.graph.add_constant(name, t)
}

/// A scalar constant of `dtype`.
pub(super) fn scalar(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, what: &str, dtype: crate::DType, v: f64) -> ValueId {
    constant(im, ctx, what, Tensor::scalar_from_f64(dtype, v))
}

/// The node producing ONNX output `i` of `ctx` (named as the model names it, so graph outputs
/// keep their names).
pub(super) fn output(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    i: usize,
    op: Op,
    inputs: &[ValueId],
) -> Result<(), ImportError> {
    let Some(out) = ctx.node.output.get(i).filter(|o| !o.is_empty()).cloned() else {
        return Ok(());
    };
    let name = if i == 0 { ctx.name.to_string() } else { im.fresh_name(&format!("{}:{i}", ctx.name)) };
    let ids = im.graph.add_node_named(name, op, inputs, vec![out.clone()])?;
    fold_if_constant(im, &ids);
    if im.names.insert(out.clone(), ids[0]).is_some() {
        return Err(ImportError::DuplicateValue(out));
    }
    Ok(())
}

/// Whether ONNX output `i` of `ctx` is wanted.
pub(super) fn wants(ctx: &NodeCtx<'_>, i: usize) -> bool {
    ctx.node.output.get(i).is_some_and(|o| !o.is_empty())
}
