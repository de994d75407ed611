//! The f32 convolution (GEMM form, Winograd and depthwise) on every ISA variant against a direct f64
//! formula: random shapes with strides 1-3, dilations, groups, 1×1 and depthwise 3×3/5×5,
//! zero padding on every side (inputs larger than the taps reach, too), every epilogue (every
//! activation) and task split; all ISAs give the same bits; bad shapes are errors.

#[allow(dead_code)]
mod common;

use common::{activation_reference, activations, clamp, close, values};
use heron_kernels::conv::{Activation, Conv2d, ConvEpilogue, conv2d_share};
use heron_kernels::{Isa, KernelError};
use proptest::prelude::*;

fn reference(
    geo: &Conv2d,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    bounds: Option<(f32, f32)>,
    activation: Option<Activation>,
) -> Vec<f64> {
    let (cg, mg) = (geo.in_channels / geo.groups, geo.out_channels / geo.groups);
    let (kh, kw) = geo.kernel;
    let mut out = vec![0.0; geo.output_len().unwrap()];
    for n in 0..geo.batch {
        for oc in 0..geo.out_channels {
            let g = oc / mg;
            for oh in 0..geo.out_h {
                for ow in 0..geo.out_w {
                    let mut acc = bias.map_or(0.0, |b| b[oc] as f64);
                    for ci in 0..cg {
                        for r in 0..kh {
                            for s in 0..kw {
                                let ih = (oh * geo.stride.0 + r * geo.dilation.0).wrapping_sub(geo.pad.0);
                                let iw = (ow * geo.stride.1 + s * geo.dilation.1).wrapping_sub(geo.pad.1);
                                if ih >= geo.in_h || iw >= geo.in_w {
                                    continue;
                                }
                                let xi = ((n * geo.in_channels + g * cg + ci) * geo.in_h + ih) * geo.in_w + iw;
                                let wi = ((oc * cg + ci) * kh + r) * kw + s;
                                acc += x[xi] as f64 * w[wi] as f64;
                            }
                        }
                    }
                    let at = ((n * geo.out_channels + oc) * geo.out_h + oh) * geo.out_w + ow;
                    acc += residual.map_or(0.0, |r| r[at] as f64);
                    let v = clamp(acc, bounds);
                    out[at] = activation.map_or(v, |a| activation_reference(a, v));
                }
            }
        }
    }
    out
}

fn geometry() -> impl Strategy<Value = Conv2d> {
    (
        1usize..3,
        prop_oneof![Just(1usize), 1usize..4, Just(4usize)],
        1usize..7,
        1usize..40,
        // Output rows wider than a kernel block (4 vectors), sometimes.
        (1usize..13, prop_oneof![3 => 1usize..23, 1 => 60usize..140]),
        (1usize..6, 1usize..6),
        (1usize..4, 1usize..4),
        (1usize..3, 1usize..3),
        any::<bool>(),
        // Padding: (top, left, bottom, right), and whether the input is wider than the taps.
        (0usize..4, 0usize..4, 0usize..4, 0usize..4, any::<bool>()),
    )
        .prop_map(
            |(batch, groups, cg, mg, (oh, ow), kernel, stride, dilation, depthwise, (pt, pl, pb, pr, slack))| {
                let (groups, cg, mg) = if depthwise { (groups.max(2) * 3, 1, 1) } else { (groups, cg, mg) };
                let kernel = if depthwise { [(3, 3), (5, 5), kernel][kernel.0 % 3] } else { kernel };
                let (pt, pl, pb, pr) = if pt == 3 { (0, 0, 0, 0) } else { (pt, pl, pb, pr) };
                let extra = |s: usize| if slack { s / 2 } else { 0 };
                let reach = |o: usize, k: usize, s: usize, d: usize, p: usize| {
                    ((o - 1) * s + (k - 1) * d + 1).saturating_sub(p).max(1) + extra(s)
                };
                let in_h = reach(oh, kernel.0, stride.0, dilation.0, pt + pb);
                let in_w = reach(ow, kernel.1, stride.1, dilation.1, pl + pr);
                Conv2d {
                    batch,
                    in_channels: groups * cg,
                    in_h,
                    in_w,
                    out_channels: groups * mg,
                    out_h: oh,
                    out_w: ow,
                    kernel,
                    stride,
                    dilation,
                    groups,
                    pad: (pt, pl),
                }
            },
        )
}

/// Winograd F(2×2, 3×3) geometries: 3×3, stride 1, at least 16 channels in and out, odd and
/// even output extents of at least 10 tiles, padding on any side, several tile blocks per
/// image.
fn winograd_geometry() -> impl Strategy<Value = Conv2d> {
    (
        1usize..3,
        16usize..40,
        16usize..30,
        1usize..12,
        // Rows of more than one full segment of tiles (16 lanes: 32 outputs), sometimes.
        prop_oneof![3 => 1usize..20, 1 => 30usize..70],
        (0usize..3, 0usize..3, 0usize..3, 0usize..3),
    )
        .prop_map(|(batch, c, m, oh, ow, (pt, pl, pb, pr))| {
            // Enough tile columns for 10 tiles (fewer run the direct form).
            let ow = ow.max(2 * 10usize.div_ceil(oh.div_ceil(2)) - 1);
            Conv2d {
                batch,
                in_channels: c,
                in_h: (oh + 2).saturating_sub(pt + pb).max(1),
                in_w: (ow + 2).saturating_sub(pl + pr).max(1),
                out_channels: m,
                out_h: oh,
                out_w: ow,
                kernel: (3, 3),
                stride: (1, 1),
                dilation: (1, 1),
                groups: 1,
                pad: (pt, pl),
            }
        })
}

/// Depthwise geometries the row kernel takes: 3×3 and 5×5 taps, strides (1, 1) and (2, 2),
/// padding up to 3 on any side (more than a tap's reach, too), planes from 1×1 to rows wider
/// than a block (2 vectors of 16), inputs wider than the taps reach.
fn depthwise_row_geometry() -> impl Strategy<Value = Conv2d> {
    (
        1usize..3,
        2usize..7,
        prop_oneof![Just(3usize), Just(5usize)],
        1usize..3,
        (1usize..11, prop_oneof![3 => 1usize..20, 1 => 30usize..70]),
        (0usize..4, 0usize..4, 0usize..4, 0usize..4),
        (0usize..2, 0usize..2),
    )
        .prop_map(|(batch, c, k, stride, (oh, ow), (pt, pl, pb, pr), (slack_h, slack_w))| Conv2d {
            batch,
            in_channels: c,
            in_h: ((oh - 1) * stride + k).saturating_sub(pt + pb).max(1) + slack_h,
            in_w: ((ow - 1) * stride + k).saturating_sub(pl + pr).max(1) + slack_w,
            out_channels: c,
            out_h: oh,
            out_w: ow,
            kernel: (k, k),
            stride: (stride, stride),
            dilation: (1, 1),
            groups: c,
            pad: (pt, pl),
        })
}

/// Geometries of the direct form: ungrouped, 1-8 input channels (or more, on output rows at
/// least 12 wide), taps 3 or 5 wide at column stride 1 and 3, 5 or 7 wide at stride 2, any
/// kernel height, row stride and row dilation, padding on any side, rows wider than a vector,
/// output channels past one slab.
fn direct_geometry() -> impl Strategy<Value = Conv2d> {
    (
        1usize..3,
        prop_oneof![3 => 1usize..9, 1 => 9usize..40],
        1usize..30,
        (1usize..8, prop_oneof![Just((3usize, 1usize)), Just((5, 1)), Just((3, 2)), Just((5, 2)), Just((7, 2))]),
        (1usize..3, 1usize..3),
        (1usize..9, prop_oneof![3 => 1usize..20, 1 => 30usize..70]),
        (0usize..4, 0usize..4, 0usize..4, 0usize..4),
    )
        .prop_map(|(batch, c, m, (kh, (kw, sw)), (sh, dh), (oh, ow), (pt, pl, pb, pr))| {
            // Deeper inputs take the direct form on wide rows; fewer than 16 outputs keep
            // 3×3 stride-1 layers off Winograd.
            let (m, ow) = if c > 8 { (m % 15 + 1, ow.max(12)) } else { (m, ow) };
            Conv2d {
                batch,
                in_channels: c,
                in_h: ((oh - 1) * sh + (kh - 1) * dh + 1).saturating_sub(pt + pb).max(1),
                in_w: ((ow - 1) * sw + kw).saturating_sub(pl + pr).max(1),
                out_channels: m,
                out_h: oh,
                out_w: ow,
                kernel: (kh, kw),
                stride: (sh, sw),
                dilation: (dh, 1),
                groups: 1,
                pad: (pt, pl),
            }
        })
}

/// Pointwise geometries run transposed: at least 384 channels in, output channels across
/// panel tails, planes of 1 to 64 pixels (several pixel blocks).
fn transposed_geometry() -> impl Strategy<Value = Conv2d> {
    (1usize..3, 384usize..420, 1usize..70, 1usize..11, 1usize..11).prop_map(|(batch, c, m, h, w)| Conv2d {
        batch,
        in_channels: c,
        in_h: h,
        in_w: w,
        out_channels: m,
        out_h: h,
        out_w: w,
        kernel: (1, 1),
        stride: (1, 1),
        dilation: (1, 1),
        groups: 1,
        pad: (0, 0),
    })
}

/// Bias, residual, clamp (none, ReLU's, ReLU6's) and activation.
type Epilogue = (bool, bool, usize, Option<Activation>);

fn epilogues() -> impl Strategy<Value = Epilogue> {
    (any::<bool>(), any::<bool>(), 0usize..3, prop_oneof![1 => Just(None), 2 => activations().prop_map(Some)])
}

/// Runs `geo` on every ISA variant (split into `tasks` shares) and checks each against the
/// reference and against the first variant, bit for bit.
fn check_every_isa(
    geo: &Conv2d,
    (bias, residual, clamp_kind, activation): Epilogue,
    tasks: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let x = values(geo.input_len().unwrap(), seed);
    let w = values(geo.weights_len().unwrap(), seed ^ 0x55);
    let bias_values = values(geo.out_channels, seed ^ 0xAA);
    let bias = bias.then_some(&bias_values[..]);
    let residual_values = values(geo.output_len().unwrap(), seed ^ 0x33);
    let residual = residual.then_some(&residual_values[..]);
    let bounds = [None, Some((0.0, f32::INFINITY)), Some((0.0, 6.0))][clamp_kind];
    let want = reference(geo, &x, &w, bias, residual, bounds, activation);
    let mut first: Option<Vec<f32>> = None;
    for isa in [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar] {
        let mut packed = vec![f32::NAN; geo.packed_weights_len(isa).unwrap()];
        geo.pack_weights(isa, &w, &mut packed).unwrap();
        let per_task = geo.scratch_len(isa).unwrap();
        let mut scratch = vec![f32::NAN; per_task * tasks];
        let mut out = vec![f32::NAN; geo.output_len().unwrap()];
        let epilogue = ConvEpilogue { bias, residual, clamp: bounds, activation, tail: None };
        let shares = scratch.chunks_mut(per_task.max(1)).chain(std::iter::repeat_with(|| &mut [][..]));
        for (task, s) in shares.take(tasks).enumerate() {
            conv2d_share(isa, geo, &x, &packed, &mut out, epilogue, s, (task, tasks)).unwrap();
        }
        for (i, (&got, &w)) in out.iter().zip(&want).enumerate() {
            prop_assert!(close(got, w), "{isa:?} {geo:?} [{i}]: {got} vs {w}");
        }
        match &first {
            None => first = Some(out),
            Some(f) => prop_assert!(f.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa:?} differs"),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_isa_matches_the_reference(
        geo in geometry(), epilogue in epilogues(),
        tasks in 1usize..4, seed in any::<u64>(),
    ) {
        check_every_isa(&geo, epilogue, tasks, seed)?;
    }

    #[test]
    fn depthwise_rows_match_the_reference(
        geo in depthwise_row_geometry(), epilogue in epilogues(),
        tasks in 1usize..4, seed in any::<u64>(),
    ) {
        check_every_isa(&geo, epilogue, tasks, seed)?;
    }

    #[test]
    fn direct_matches_the_reference(
        geo in direct_geometry(), epilogue in epilogues(),
        tasks in 1usize..4, seed in any::<u64>(),
    ) {
        prop_assert_eq!(geo.method(Isa::Avx512), heron_kernels::conv::ConvMethod::Direct);
        prop_assert_eq!(geo.method(Isa::Avx2Fma), heron_kernels::conv::ConvMethod::Gemm);
        check_every_isa(&geo, epilogue, tasks, seed)?;
    }

    #[test]
    fn transposed_matches_the_reference(
        geo in transposed_geometry(), epilogue in epilogues(),
        tasks in 1usize..4, seed in any::<u64>(),
    ) {
        prop_assert_eq!(geo.method(Isa::Avx512), heron_kernels::conv::ConvMethod::Transposed);
        check_every_isa(&geo, epilogue, tasks, seed)?;
    }

    #[test]
    fn winograd_matches_the_reference(
        geo in winograd_geometry(), epilogue in epilogues(),
        tasks in 1usize..4, seed in any::<u64>(),
    ) {
        prop_assert_eq!(geo.method(Isa::Avx512), heron_kernels::conv::ConvMethod::Winograd);
        check_every_isa(&geo, epilogue, tasks, seed)?;
    }
}

/// Winograd takes 3×3 stride-1 layers from 10 output tiles per image (a 7×7 output: 16), not a
/// 5×5 or 6×6 one (9), whose transformed weights cost more to stream than the products saved.
#[test]
fn winograd_needs_ten_tiles() {
    let layer = |h: usize, w: usize| Conv2d::from_dims([2, 64, h, w, 64, h, w, 3, 3, 1, 1, 1, 1, 1, 1, 1]);
    for (h, w, winograd) in [(5, 5, false), (6, 6, false), (7, 7, true), (2, 19, true), (2, 17, false), (8, 8, true)] {
        let method = layer(h, w).method(Isa::Avx512);
        assert_eq!(method == heron_kernels::conv::ConvMethod::Winograd, winograd, "{h}x{w}: {method:?}");
    }
}

#[test]
fn bad_shapes_are_errors() {
    let geo = Conv2d {
        batch: 1,
        in_channels: 4,
        in_h: 5,
        in_w: 5,
        out_channels: 6,
        out_h: 3,
        out_w: 3,
        kernel: (3, 3),
        stride: (1, 1),
        dilation: (1, 1),
        groups: 2,
        pad: (0, 0),
    };
    geo.check().unwrap();
    assert!(matches!(Conv2d { dilation: (1, 0), ..geo }.check(), Err(KernelError::Geometry(_))));
    assert!(matches!(Conv2d { pad: (0, usize::MAX), ..geo }.check(), Err(KernelError::Overflow(_))));
    assert!(matches!(Conv2d { groups: 3, ..geo }.check(), Err(KernelError::Geometry(_))));
    assert!(matches!(Conv2d { stride: (0, 1), ..geo }.check(), Err(KernelError::Geometry(_))));
    assert!(matches!(
        Conv2d { in_channels: usize::MAX / 2 + 1, groups: 1, ..geo }.check(),
        Err(KernelError::Overflow(_))
    ));
    let isa = Isa::detect();
    let x = vec![0.0; geo.input_len().unwrap()];
    let w = vec![0.0; geo.packed_weights_len(isa).unwrap()];
    let mut out = vec![0.0; geo.output_len().unwrap() - 1];
    let mut scratch = vec![0.0; geo.scratch_len(isa).unwrap()];
    let err = conv2d_share(isa, &geo, &x, &w, &mut out, ConvEpilogue::default(), &mut scratch, (0, 1)).unwrap_err();
    assert!(matches!(err, KernelError::TooShort { what: "output", .. }), "{err}");
}
