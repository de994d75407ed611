//! Drops the kernel taps of a convolution that only ever read padding: a 3×3 convolution over a
//! 1×1 image with one pixel of padding is a 1×1 convolution with the kernel's centre, and a
//! kernel wider than its padded image keeps only the taps that reach inside. ResNet-18 at 32×32
//! ends in such layers; their weights, 9× those the centre taps need, were most of its time.
//!
//! A dropped tap only ever adds `0 · w`: the pass keeps a convolution whose dropped weights
//! are not all finite (`0 · inf` is NaN), and otherwise changes no sum but for the sign of a
//! zero.

use crate::graph::{Graph, NameTable};
use crate::op::{ConvAttrs, Op};
use crate::tensor::{Element, Tensor};
use ndarray::ArrayD;

/// Trims every convolution with constant weights and taps that only read padding; returns how
/// many were trimmed.
pub fn trim_conv_taps(graph: &mut Graph) -> usize {
    let mut names = NameTable::new(graph);
    let mut trimmed = 0;
    for i in 0..graph.nodes.len() {
        let node = &graph.nodes[i];
        let Op::Conv(attrs) = &node.op else { continue };
        let attrs = attrs.clone();
        let (Some(&x), Some(&w), Some(&y)) = (node.inputs.first(), node.inputs.get(1), node.outputs.first()) else {
            continue;
        };
        // Empty weights leave nothing to trim (and do not bound the kernel's extents, which
        // the search below walks).
        let Some(weights) = graph.constant(w).filter(|t| !t.is_empty()) else { continue };
        let (x_shape, y_shape) = (&graph.ty(x).shape, &graph.ty(y).shape);
        if x_shape.len() != y_shape.len() || x_shape.len() != weights.shape().len() {
            continue;
        }
        let kept: Option<Vec<(usize, usize)>> = (0..attrs.window.kernel.len())
            .map(|d| used_taps(&attrs.window, d, x_shape[2 + d], y_shape[2 + d]))
            .collect();
        let Some(kept) = kept else { continue };
        if kept.iter().zip(&attrs.window.kernel).all(|(&(lo, hi), &k)| (lo, hi) == (0, k)) {
            continue;
        }
        let Some(sliced) = slice_taps(weights, &kept) else { continue };
        let mut window = attrs.window.clone();
        for (d, &(lo, hi)) in kept.iter().enumerate() {
            let dilation = window.dilations[d];
            window.pads_begin[d] -= lo * dilation;
            window.pads_end[d] -= (window.kernel[d] - hi) * dilation;
            window.kernel[d] = hi - lo;
        }
        let name = names.fresh(&format!("{}:trimmed_weight", node.name));
        let w_id = graph.add_constant(name, sliced);
        let node = &mut graph.nodes[i];
        node.op = Op::Conv(ConvAttrs { window, group: attrs.group });
        node.inputs[1] = w_id;
        trimmed += 1;
    }
    trimmed
}

/// The taps `lo..hi` of spatial axis `d` that some output position reads inside the input (of
/// `input` positions, `output` outputs), widened where needed so that the trimmed window's
/// paddings stay non-negative; `None` when no tap reads inside (the output is the bias alone:
/// nothing to keep) or an extent is out of range.
fn used_taps(window: &crate::op::Window, d: usize, input: usize, output: usize) -> Option<(usize, usize)> {
    let (k, s, dil, pb, pe) =
        (window.kernel[d], window.strides[d], window.dilations[d], window.pads_begin[d], window.pads_end[d]);
    if output == 0 || input == 0 || s == 0 || dil == 0 {
        return None;
    }
    // Every term is at most `MAX_WINDOW_EXTENT` (2^61, checked at import): i128 holds them.
    let (s, dil, pb, input, last) = (s as i128, dil as i128, pb as i128, input as i128, (output - 1) as i128);
    let reads_inside = |r: usize| {
        let first = r as i128 * dil - pb;
        // The first output at or past position 0, and whether it is an output and inside.
        let o = if first >= 0 { 0 } else { (-first + s - 1) / s };
        o <= last && first + o * s < input
    };
    let lo = (0..k).find(|&r| reads_inside(r))?;
    let hi = (lo..k).rev().find(|&r| reads_inside(r))? + 1;
    // Keep the paddings non-negative: taps from one the padding reaches at the start, and up
    // to one whose end padding covers what follows.
    let lo = lo.min(window.pads_begin[d] / window.dilations[d]);
    let hi = hi.max(k - (pe / window.dilations[d]).min(k));
    Some((lo, hi))
}

/// `weights` (`[M, C/g, k...]`) with spatial axis `d` cut to `kept[d]`, if every weight cut
/// away is finite.
fn slice_taps(weights: &Tensor, kept: &[(usize, usize)]) -> Option<Tensor> {
    let kernel = &weights.shape()[2..];
    // Per tap (row-major over the kernel), whether it is kept: a tap's weights repeat every
    // `taps` elements of the row-major weights, and the kept ones in order are the cut tensor.
    let mut keep = vec![true];
    for (&k, &(lo, hi)) in kernel.iter().zip(kept) {
        keep = keep.iter().flat_map(|&outer| (0..k).map(move |t| outer && (lo..hi).contains(&t))).collect();
    }
    let mut shape = weights.shape()[..2].to_vec();
    shape.extend(kept.iter().map(|&(lo, hi)| hi - lo));
    fn slice<T: Element>(a: &ArrayD<T>, keep: &[bool], shape: &[usize]) -> Option<Tensor> {
        let a = a.as_standard_layout();
        let data = a.as_slice()?;
        let mut cut = Vec::with_capacity(shape.iter().product());
        for lane in data.chunks_exact(keep.len()) {
            for (&v, &kept) in lane.iter().zip(keep) {
                if kept {
                    cut.push(v);
                } else if !v.to_f64().is_finite() {
                    return None;
                }
            }
        }
        Tensor::from_vec(shape, cut).ok()
    }
    crate::dispatch_tensor!(weights, a, T => slice::<T>(a, &keep, &shape))
}
