//! Convolutions over channel-blocked tensors on every ISA variant against a direct f64
//! formula: dense (planar or blocked input and output) and depthwise, random shapes with
//! channel counts across block tails, strides 1-3, dilations, padding on every side, 1×1
//! planes flattened into one row, every epilogue (activations in registers, a tail program
//! with a per-channel operand) and task split; blocked outputs hold zeros
//! past their channels; all ISAs and splits give the same bits; bad shapes are errors.

mod common;

use common::{activation_reference, activations, clamp, close, values};
use heron_kernels::blocked::{BlockedConv, Layout, conv_share, tensor_len};
use heron_kernels::conv::{Activation, Conv2d, ConvEpilogue};
use heron_kernels::elementwise::{MapOp, Program, Tail, TailOperand};
use heron_kernels::{Isa, KernelError};
use proptest::prelude::*;

/// Element `(n, c, y, x)`'s offset in a `[_, channels, h, w]` tensor stored as `layout`.
fn offset(layout: Layout, block: usize, [channels, h, w]: [usize; 3], [n, c, y, x]: [usize; 4]) -> usize {
    match layout {
        Layout::Planar => ((n * channels + c) * h + y) * w + x,
        Layout::Blocked => (((n * channels.div_ceil(block) + c / block) * h + y) * w + x) * block + c % block,
    }
}

/// Stores a logical NCHW tensor as `layout` (padding lanes zero).
fn store(layout: Layout, block: usize, dims: [usize; 4], logical: &[f32]) -> Vec<f32> {
    let [b, c, h, w] = dims;
    let mut out = vec![0.0; tensor_len(layout, block, dims).unwrap()];
    for n in 0..b {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    out[offset(layout, block, [c, h, w], [n, ch, y, x])] = logical[((n * c + ch) * h + y) * w + x];
                }
            }
        }
    }
    out
}

fn reference(
    geo: &Conv2d,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    bounds: Option<(f32, f32)>,
) -> Vec<f64> {
    let (kh, kw) = geo.kernel;
    let depthwise = geo.is_depthwise();
    let cg = if depthwise { 1 } else { geo.in_channels };
    let mut out = vec![0.0; geo.output_len().unwrap()];
    for n in 0..geo.batch {
        for oc in 0..geo.out_channels {
            for oh in 0..geo.out_h {
                for ow in 0..geo.out_w {
                    let mut acc = bias.map_or(0.0, |b| b[oc] as f64);
                    for ci in 0..cg {
                        let c = if depthwise { oc } else { ci };
                        for r in 0..kh {
                            for s in 0..kw {
                                let ih = (oh * geo.stride.0 + r * geo.dilation.0).wrapping_sub(geo.pad.0);
                                let iw = (ow * geo.stride.1 + s * geo.dilation.1).wrapping_sub(geo.pad.1);
                                if ih >= geo.in_h || iw >= geo.in_w {
                                    continue;
                                }
                                let xi = ((n * geo.in_channels + c) * geo.in_h + ih) * geo.in_w + iw;
                                acc += x[xi] as f64 * w[((oc * cg + ci) * kh + r) * kw + s] as f64;
                            }
                        }
                    }
                    let at = ((n * geo.out_channels + oc) * geo.out_h + oh) * geo.out_w + ow;
                    acc += residual.map_or(0.0, |r| r[at] as f64);
                    out[at] = clamp(acc, bounds);
                }
            }
        }
    }
    out
}

/// Dense (one group) or depthwise geometries: channels across block tails (1-40), kernels
/// 1×1 to 5×5, strides and dilations 1-3, padding on any side, rows wider than a tile.
fn geometry() -> impl Strategy<Value = Conv2d> {
    (
        1usize..3,
        1usize..40,
        1usize..40,
        prop_oneof![Just((1usize, 1usize)), Just((3, 3)), Just((5, 5)), (1usize..6, 1usize..6)],
        prop_oneof![2 => Just((1usize, 1usize)), 1 => (1usize..4, 1usize..4)],
        prop_oneof![3 => Just((1usize, 1usize)), 1 => (1usize..3, 1usize..3)],
        (1usize..9, prop_oneof![3 => 1usize..20, 1 => 30usize..120]),
        (0usize..4, 0usize..4, 0usize..4, 0usize..4),
        any::<bool>(),
    )
        .prop_map(|(batch, c, m, kernel, stride, dilation, (oh, ow), (pt, pl, pb, pr), depthwise)| {
            let (c, m) = if depthwise { (c.max(2), c.max(2)) } else { (c, m) };
            let reach = |o: usize, k: usize, s: usize, d: usize, p: usize| {
                ((o - 1) * s + (k - 1) * d + 1).saturating_sub(p).max(1)
            };
            Conv2d {
                batch,
                in_channels: c,
                in_h: reach(oh, kernel.0, stride.0, dilation.0, pt + pb),
                in_w: reach(ow, kernel.1, stride.1, dilation.1, pl + pr),
                out_channels: m,
                out_h: oh,
                out_w: ow,
                kernel,
                stride,
                dilation,
                groups: if depthwise { c } else { 1 },
                pad: (pt, pl),
            }
        })
}

/// Runs the kernel on `isa` in `tasks` shares and returns the physical output.
#[allow(clippy::too_many_arguments)]
fn run(
    isa: Isa,
    conv: &BlockedConv,
    x: &[f32],
    packed: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    bounds: Option<(f32, f32)>,
    (finish, scale): (Finish, &[f32]),
    tasks: usize,
) -> Vec<f32> {
    // Garbage where nothing must be read: padding lanes of the output are overwritten.
    let mut out = vec![f32::NAN; conv.output_len().unwrap()];
    let sigmoid_of_scaled = Program::new(&[MapOp::Input(0), MapOp::Input(1), MapOp::Mul, MapOp::Sigmoid], &[]).unwrap();
    let (activation, tail) = match finish {
        Finish::None => (None, None),
        Finish::Activation(a) => (Some(a), None),
        Finish::Tail => {
            (None, Some(Tail { program: sigmoid_of_scaled, operands: [Some((scale, TailOperand::PerChannel)), None] }))
        }
    };
    let epilogue = ConvEpilogue { bias, residual, clamp: bounds, activation, tail };
    // Each share its own scratch, garbage at first: a widened copy must zero its borders and
    // hold every input row the share's items read.
    let per_task = conv.scratch_len().unwrap();
    let mut scratch = vec![f32::NAN; per_task * tasks];
    for task in 0..tasks {
        let own = &mut scratch[task * per_task..(task + 1) * per_task];
        conv_share(isa, conv, x, packed, &mut out, epilogue, own, (task, tasks)).unwrap();
    }
    out
}

/// Pointwise layers (1×1, stride 1, no padding: the kernels' whole-plane path) with channel
/// counts across block tails and planes that end inside a tile.
fn pointwise() -> impl Strategy<Value = Conv2d> {
    (1usize..3, 1usize..70, 1usize..70, 1usize..12, 1usize..40).prop_map(|(batch, c, m, h, w)| Conv2d {
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

/// What runs after the clamp: nothing, an activation in registers, or a tail program
/// (`sigmoid(x · scale[c])`, a per-channel operand).
#[derive(Clone, Copy, Debug)]
enum Finish {
    None,
    Activation(Activation),
    Tail,
}

type Epilogue = (bool, bool, Option<(f32, f32)>, Finish);

fn epilogues() -> impl Strategy<Value = Epilogue> {
    (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(None), Just(Some((0.0f32, 6.0f32))), Just(Some((-0.5f32, 0.25f32)))],
        prop_oneof![
            2 => Just(Finish::None),
            8 => activations().prop_map(Finish::Activation),
            1 => Just(Finish::Tail),
        ],
    )
}

/// The finish of channel `c`'s value `v`, in f64.
fn finish_reference(finish: Finish, scale: &[f32], c: usize, v: f64) -> f64 {
    match finish {
        Finish::None => v,
        Finish::Activation(activation) => activation_reference(activation, v),
        Finish::Tail => 1.0 / (1.0 + (-v * scale[c] as f64).exp()),
    }
}

/// The kernel on every ISA this CPU has, in one and in `tasks` shares, against the formula;
/// lanes past the channels of a blocked output are zero and every run gives the same bits.
fn check_conv(
    geo: Conv2d,
    block: usize,
    (planar_in, planar_out): (bool, bool),
    (with_bias, with_residual, bounds, finish): Epilogue,
    tasks: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let depthwise = geo.is_depthwise();
    let layout = |planar: bool| if planar && !depthwise { Layout::Planar } else { Layout::Blocked };
    let conv = BlockedConv { geo, block, input: layout(planar_in), output: layout(planar_out) };
    let x = values(geo.input_len().unwrap(), seed);
    let w = values(geo.weights_len().unwrap(), seed ^ 1);
    let bias = with_bias.then(|| values(geo.out_channels, seed ^ 2));
    let residual = with_residual.then(|| values(geo.output_len().unwrap(), seed ^ 3));
    let scale = values(geo.out_channels, seed ^ 4);
    let want = reference(&geo, &x, &w, bias.as_deref(), residual.as_deref(), bounds);
    let out_dims = [geo.batch, geo.out_channels, geo.out_h, geo.out_w];
    let x_stored = store(conv.input, block, [geo.batch, geo.in_channels, geo.in_h, geo.in_w], &x);
    let residual_stored = residual.as_ref().map(|r| store(conv.output, block, out_dims, r));
    let mut packed = vec![0.0; conv.packed_weights_len().unwrap()];
    conv.pack_weights(&w, &mut packed).unwrap();
    let mut first: Option<Vec<f32>> = None;
    for isa in Isa::available() {
        for t in [1, tasks] {
            let got = run(
                isa,
                &conv,
                &x_stored,
                &packed,
                bias.as_deref(),
                residual_stored.as_deref(),
                bounds,
                (finish, &scale),
                t,
            );
            for (i, &want) in want.iter().enumerate() {
                let (n, rest) =
                    (i / (geo.out_channels * geo.out_h * geo.out_w), i % (geo.out_channels * geo.out_h * geo.out_w));
                let (c, rest) = (rest / (geo.out_h * geo.out_w), rest % (geo.out_h * geo.out_w));
                let at = offset(
                    conv.output,
                    block,
                    [geo.out_channels, geo.out_h, geo.out_w],
                    [n, c, rest / geo.out_w, rest % geo.out_w],
                );
                let want = finish_reference(finish, &scale, c, want);
                prop_assert!(close(got[at], want), "{isa:?} {conv:?} {finish:?} element {i}: {} vs {want}", got[at]);
            }
            if conv.output == Layout::Blocked {
                // Lanes past the channels are zero.
                let stored_want = store(Layout::Blocked, block, out_dims, &vec![1.0; geo.output_len().unwrap()]);
                for (g, s) in got.iter().zip(&stored_want) {
                    prop_assert!(*s != 0.0 || *g == 0.0, "a padding lane holds {g}");
                }
            }
            match &first {
                None => first = Some(got),
                Some(f) => prop_assert!(
                    f.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{isa:?}, {t} tasks: other bits"
                ),
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn blocked_conv_matches_the_formula(
        geo in geometry(),
        block in prop_oneof![Just(8usize), Just(16usize)],
        layouts in (any::<bool>(), any::<bool>()),
        epilogue in epilogues(),
        tasks in 1usize..4,
        seed in any::<u64>(),
    ) {
        check_conv(geo, block, layouts, epilogue, tasks, seed)?;
    }

    #[test]
    fn pointwise_conv_matches_the_formula(
        geo in pointwise(),
        block in prop_oneof![Just(8usize), Just(16usize)],
        layouts in (any::<bool>(), any::<bool>()),
        epilogue in epilogues(),
        tasks in 1usize..4,
        seed in any::<u64>(),
    ) {
        check_conv(geo, block, layouts, epilogue, tasks, seed)?;
    }
}

#[test]
fn bad_shapes_are_errors() {
    let geo = Conv2d::from_dims([1, 4, 5, 5, 6, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1]);
    let conv = |block, input, output, groups| BlockedConv {
        geo: Conv2d { groups, out_channels: if groups > 1 { 4 } else { 6 }, ..geo },
        block,
        input,
        output,
    };
    assert!(matches!(conv(12, Layout::Blocked, Layout::Blocked, 1).check(), Err(KernelError::Geometry(_))));
    assert!(matches!(conv(8, Layout::Blocked, Layout::Blocked, 2).check(), Err(KernelError::Geometry(_))));
    assert!(matches!(conv(8, Layout::Planar, Layout::Blocked, 4).check(), Err(KernelError::Geometry(_))));
    let ok = conv(8, Layout::Blocked, Layout::Planar, 1);
    ok.check().unwrap();
    let (x, w) = (vec![0.0; ok.input_len().unwrap()], vec![0.0; ok.packed_weights_len().unwrap()]);
    let mut out = vec![0.0; ok.output_len().unwrap() - 1];
    let err = conv_share(Isa::Scalar, &ok, &x, &w, &mut out, ConvEpilogue::default(), &mut [], (0, 1));
    assert!(matches!(err, Err(KernelError::TooShort { what: "output", .. })));
    let mut out = vec![0.0; ok.output_len().unwrap()];
    assert!(matches!(
        conv_share(Isa::Scalar, &ok, &x, &w, &mut out, ConvEpilogue::default(), &mut [], (1, 1)),
        Err(KernelError::Share { .. })
    ));
    // A 3×3 layer on a small image takes a widened copy, which needs its scratch.
    let short = ok.scratch_len().unwrap() - 1;
    assert!(short > 0);
    let err = conv_share(Isa::Scalar, &ok, &x, &w, &mut out, ConvEpilogue::default(), &mut vec![0.0; short], (0, 1));
    assert!(matches!(err, Err(KernelError::TooShort { what: "scratch", .. })), "{err:?}");
}

/// Images too large to copy widened run their border pixels one at a time with their own taps
/// (small ones take every tap from a widened copy, which the proptests cover): both forms
/// match the formula, on every ISA and split, with every layout.
#[test]
fn wide_images_keep_their_border_pixels() {
    let wide = |s: usize, d: usize| {
        Conv2d::from_dims([2, 56, 4, 300, 20, 4usize.div_ceil(s), 300usize.div_ceil(s), 3, 3, s, s, d, d, 1, d, d])
    };
    for (stride, dilation) in [(1, 1), (2, 1), (1, 2)] {
        let geo = wide(stride, dilation);
        for block in [8, 16] {
            for layouts in [(false, false), (true, true), (true, false)] {
                let layout = |planar: bool| if planar { Layout::Planar } else { Layout::Blocked };
                let conv = BlockedConv { geo, block, input: layout(layouts.0), output: layout(layouts.1) };
                assert_eq!((conv.width_padding(), conv.scratch_len().unwrap()), (None, 0), "{conv:?}");
                let small = BlockedConv { geo: Conv2d { in_w: 30, out_w: 30usize.div_ceil(stride), ..geo }, ..conv };
                assert_eq!(small.width_padding(), Some((dilation, if stride == 1 { dilation } else { 0 })));
                let epilogue = (true, true, Some((-0.5, 0.25)), Finish::Activation(Activation::Silu));
                check_conv(geo, block, layouts, epilogue, 3, 7).unwrap();
            }
        }
    }
}

/// 1×1 layers over a few pixels group their output blocks in threes (the last one, two or
/// three blocks), wider ones in pairs: every block count from one to seven, both block widths,
/// match the formula on every ISA and split.
#[test]
fn few_pixel_pointwise_layers_group_blocks_in_threes() {
    for (side, out_blocks) in [(1, 1), (1, 4), (2, 5), (2, 6), (1, 7), (3, 7)] {
        for block in [8, 16] {
            let m = out_blocks * block - 3;
            let geo = Conv2d::from_dims([2, 40, side, side, m, side, side, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
            for layouts in [(false, false), (true, true)] {
                check_conv(geo, block, layouts, (true, false, Some((0.0, 6.0)), Finish::None), 3, 5).unwrap();
            }
        }
    }
}

/// Batches of small images under large weights run group by group over the whole batch, the
/// widened copies of every image in the scratch at once (a scratch of `batch` images), unless
/// the batch passes the copy budget (image by image, each over every group): both match the
/// formula on every ISA and split, with every layout, at strides 1 and 2.
#[test]
fn batches_of_small_images_share_each_group_of_weights() {
    // The last: 6 widened images of 256 channels at 6×8 pass the 256 KiB budget.
    for (batch, c, side, stride) in [(3, 64, 3, 1), (4, 64, 5, 2), (2, 64, 2, 1), (6, 256, 6, 1)] {
        let out = (side + 2 - 3) / stride + 1;
        let geo = Conv2d::from_dims([batch, c, side, side, 64, out, out, 3, 3, stride, stride, 1, 1, 1, 1, 1]);
        for block in [8, 16] {
            for layouts in [(false, false), (true, true), (true, false)] {
                let layout = |planar: bool| if planar { Layout::Planar } else { Layout::Blocked };
                let conv = BlockedConv { geo, block, input: layout(layouts.0), output: layout(layouts.1) };
                let one = BlockedConv { geo: Conv2d { batch: 1, ..geo }, ..conv };
                let images = conv.scratch_len().unwrap() / one.scratch_len().unwrap();
                assert_eq!(images, if batch == 6 { 1 } else { batch }, "{conv:?}");
                let epilogue = (true, true, Some((-0.5, 0.25)), Finish::Activation(Activation::Silu));
                for tasks in [1, 3] {
                    check_conv(geo, block, layouts, epilogue, tasks, 11).unwrap();
                }
            }
        }
    }
}

/// SiLU across its range, every 1/64 from −120 to 120 and far past it: within 2.5e-7 of the f64
/// value, relative, from −87 up; below, `x · 0` (the true value is under `1.7e-38 · |x|`);
/// +∞ gives +∞ and −∞ NaN, as `x · sigmoid(x)`.
#[test]
fn silu_is_accurate_over_its_range() {
    let mut x: Vec<f32> = (-120 * 64..=120 * 64).map(|k| k as f32 / 64.0).collect();
    x.extend([1e-30, -1e-30, 1e30, -1e30, 87.0, -87.0, 86.99, -86.99]);
    for x in x {
        let got = f64::from(Activation::Silu.apply(x));
        let (x, want) = (f64::from(x), f64::from(x) / (1.0 + (-f64::from(x)).exp()));
        let bound = if x >= -87.0 { 2.5e-7 * want.abs() } else { 1.7e-38 * x.abs() };
        assert!((got - want).abs() <= bound, "silu({x}) = {got}, want {want}");
    }
    assert_eq!(Activation::Silu.apply(f32::INFINITY), f32::INFINITY);
    assert!(Activation::Silu.apply(f32::NEG_INFINITY).is_nan());
    assert_eq!(Activation::Silu.apply(-100.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(Activation::Silu.apply(-0.0).to_bits(), (-0.0f32).to_bits());
    assert!(Activation::Silu.apply(f32::NAN).is_nan());
}

/// SiLU of ±∞ in registers (a layer with zero weights adds its residual, which holds them): on
/// every ISA the scalar bits, +∞ and NaN (as `x · sigmoid(x)`).
#[test]
fn silu_of_infinities_in_registers() {
    let geo = Conv2d::from_dims([1, 16, 1, 4, 16, 1, 4, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
    let residual: Vec<f32> = (0..64).map(|i| [f32::INFINITY, f32::NEG_INFINITY, 1.0, -90.0][i % 4]).collect();
    for block in [8, 16] {
        let conv = BlockedConv { geo, block, input: Layout::Blocked, output: Layout::Blocked };
        let x = vec![0.0; conv.input_len().unwrap()];
        let packed = vec![0.0; conv.packed_weights_len().unwrap()];
        let stored = store(Layout::Blocked, block, [1, 16, 1, 4], &residual);
        for isa in Isa::available() {
            let mut out = vec![0.0; conv.output_len().unwrap()];
            let epilogue =
                ConvEpilogue { residual: Some(&stored), activation: Some(Activation::Silu), ..ConvEpilogue::default() };
            conv_share(isa, &conv, &x, &packed, &mut out, epilogue, &mut [], (0, 1)).unwrap();
            for (got, r) in out.iter().zip(&stored) {
                let want = Activation::Silu.apply(*r);
                assert_eq!(got.to_bits(), want.to_bits(), "{isa:?} block {block}: silu({r}) = {got}, scalar {want}");
            }
        }
    }
    assert!(Activation::Silu.apply(f32::NEG_INFINITY).is_nan());
}

/// SiLU far below zero (where the true value is subnormal or rounds to zero), at NaN and at the
/// edges (±87, ±f32::MAX, the smallest normals, a subnormal, zero), in registers and swept over
/// stored results: no subnormal result for inputs of at least 2^-125, within `1.7e-38 · |x|`
/// of the formula, NaN kept, and on every ISA the bits of the scalar `Activation::apply` (a
/// 1×1 layer copying its input channel by channel, so its outputs are the values chosen).
#[test]
fn silu_far_below_zero_is_never_subnormal() {
    // 75 pixels: a sweep's last vectors go one at a time.
    let (c, h, w) = (16, 3, 25);
    let geo = Conv2d::from_dims([1, c, h, w, c, h, w, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
    let edges =
        [87.0, -87.0, 86.99, -86.99, -87.0001, f32::MAX, -f32::MAX, 1e-38, -1e-38, f32::MIN_POSITIVE, 1e-45, 0.0];
    let logical: Vec<f32> = (0..c * h * w)
        .map(|i| match i {
            7 => f32::NAN,
            // Channel 0 only: the other channels add them times 0.
            11..23 => edges[i - 11],
            _ => -1000.0 + 1050.0 * i as f32 / (c * h * w) as f32,
        })
        .collect();
    let identity: Vec<f32> = (0..c * c).map(|i| if i / c == i % c { 1.0 } else { 0.0 }).collect();
    for block in [8, 16] {
        let conv = BlockedConv { geo, block, input: Layout::Blocked, output: Layout::Blocked };
        let x = store(Layout::Blocked, block, [1, c, h, w], &logical);
        let mut packed = vec![0.0; conv.packed_weights_len().unwrap()];
        conv.pack_weights(&identity, &mut packed).unwrap();
        // Swept over stored results, or (after a clamp) in registers.
        for (isa, clamp) in Isa::available().into_iter().flat_map(|isa| [(isa, None), (isa, Some((-1e30, 1e30)))]) {
            let mut out = vec![0.0; conv.output_len().unwrap()];
            let epilogue = ConvEpilogue { activation: Some(Activation::Silu), clamp, ..ConvEpilogue::default() };
            conv_share(isa, &conv, &x, &packed, &mut out, epilogue, &mut [], (0, 1)).unwrap();
            for (i, &v) in logical.iter().enumerate() {
                // The NaN at channel 0, pixel 7 reaches every channel of its pixel (0 · NaN).
                let v = if i % (h * w) == 7 { f32::NAN } else { v };
                // As the kernels clamp (a NaN becomes the lower bound).
                let v = clamp.map_or(v, |(lo, hi)| v.max(lo).min(hi));
                let at = offset(Layout::Blocked, block, [c, h, w], [0, i / (h * w), i / w % h, i % w]);
                let got = out[at];
                let want = Activation::Silu.apply(v);
                assert_eq!(got.to_bits(), want.to_bits(), "{isa:?} block {block}: silu({v}) = {got}, scalar {want}");
                if v.is_nan() {
                    assert!(got.is_nan());
                    continue;
                }
                assert!(!got.is_subnormal() || v.abs() < 2f32.powi(-125), "silu({v}) = {got}: subnormal");
                let exact = f64::from(v) / (1.0 + (-f64::from(v)).exp());
                assert!(
                    (f64::from(got) - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                    "silu({v}) = {got}, want {exact}"
                );
                assert!((f64::from(got) - exact).abs() <= 1.7e-38 * f64::from(v).abs() || v > -87.0);
            }
        }
    }
}
