//! Max pooling on every ISA variant against a direct formula of the interpreter's semantics
//! (taps inside the input in window order, the first taken, a later one when greater), and
//! average pooling over channel-blocked inputs against lowering's (the taps inside summed in
//! window order from 0, divided by the count of the taps inside the input or inside the padded
//! input's extent, 0 where none count): random windows with strides 1-3, dilations, padding on
//! any side (outputs past every tap, too), rows wider than a vector, NaN, ±∞ and ±0 among the
//! values, every task split, planar or over channel-blocked inputs (8 or 16 channels a block,
//! blocked or planar outputs). All ISAs give the reference's bits.

// The float rule's helpers serve the other kernel tests: pooling is exact.
#[allow(dead_code)]
mod common;

use common::values;
use heron_kernels::blocked::{Layout, tensor_len};
use heron_kernels::conv::Conv2d;
use heron_kernels::pool::{Divisor, PoolKind, max_pool2d_share, pool2d_blocked_share};
use heron_kernels::{Isa, KernelError};
use proptest::prelude::*;

fn reference(geo: &Conv2d, x: &[f32]) -> Vec<f32> {
    pool_reference(geo, PoolKind::Max, x)
}

fn pool_reference(geo: &Conv2d, kind: PoolKind, x: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(geo.output_len().unwrap());
    for plane in 0..geo.batch * geo.in_channels {
        for oy in 0..geo.out_h {
            for ox in 0..geo.out_w {
                let (mut acc, mut found) = (f32::NEG_INFINITY, false);
                let (mut sum, mut count) = (0.0f32, 0usize);
                for r in 0..geo.kernel.0 {
                    for s in 0..geo.kernel.1 {
                        // Positions in the padded input.
                        let (py, px) = (oy * geo.stride.0 + r * geo.dilation.0, ox * geo.stride.1 + s * geo.dilation.1);
                        let (y, c) = (py as isize - geo.pad.0 as isize, px as isize - geo.pad.1 as isize);
                        let inside = y >= 0 && c >= 0 && y < geo.in_h as isize && c < geo.in_w as isize;
                        count += usize::from(match kind {
                            PoolKind::Average(Divisor::Padded { end }) => py < end.0 && px < end.1,
                            _ => inside,
                        });
                        if !inside {
                            continue;
                        }
                        let v = x[(plane * geo.in_h + y as usize) * geo.in_w + c as usize];
                        sum += v;
                        if !found || v > acc {
                            (acc, found) = (v, true);
                        }
                    }
                }
                out.push(match kind {
                    PoolKind::Max => acc,
                    PoolKind::Average(_) if count == 0 => 0.0,
                    PoolKind::Average(_) => sum / count as f32,
                });
            }
        }
    }
    out
}

fn geometry() -> impl Strategy<Value = Conv2d> {
    (
        1usize..3,
        1usize..5,
        (1usize..4, 1usize..4),
        (1usize..4, 1usize..4),
        (1usize..3, 1usize..3),
        (1usize..8, prop_oneof![3 => 1usize..20, 1 => 30usize..60]),
        (0usize..4, 0usize..4, 0usize..4, 0usize..4),
    )
        .prop_map(|(batch, c, kernel, stride, dilation, (oh, ow), (pt, pl, pb, pr))| {
            let reach = |o: usize, k: usize, s: usize, d: usize, p: usize| {
                ((o - 1) * s + (k - 1) * d + 1).saturating_sub(p).max(1)
            };
            Conv2d {
                batch,
                in_channels: c,
                in_h: reach(oh, kernel.0, stride.0, dilation.0, pt + pb),
                in_w: reach(ow, kernel.1, stride.1, dilation.1, pl + pr),
                out_channels: c,
                out_h: oh,
                out_w: ow,
                kernel,
                stride,
                dilation,
                groups: c,
                pad: (pt, pl),
            }
        })
}

/// Random values with NaN, ±∞ and ±0 sprinkled in.
fn special_values(len: usize, seed: u64) -> Vec<f32> {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
    values(len, seed)
        .into_iter()
        .enumerate()
        .map(|(i, v)| if (i as u64 ^ seed).is_multiple_of(7) { specials[(i / 7) % specials.len()] } else { v })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_isa_matches_the_reference(geo in geometry(), tasks in 1usize..4, seed in any::<u64>()) {
        let x = special_values(geo.input_len().unwrap(), seed);
        let want = reference(&geo, &x);
        for isa in [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar] {
            let mut out = vec![1234.5; geo.output_len().unwrap()];
            for task in 0..tasks {
                max_pool2d_share(isa, &geo, &x, &mut out, (task, tasks)).unwrap();
            }
            for (i, (g, w)) in out.iter().zip(&want).enumerate() {
                prop_assert!(g.to_bits() == w.to_bits(), "{isa:?} {geo:?} [{i}]: {g} vs {w}");
            }
        }
    }
}

/// Element `(n, c, y, x)` of a `[_, channels, h, w]` tensor stored as `layout`.
fn offset(layout: Layout, block: usize, [channels, h, w]: [usize; 3], [n, c, y, x]: [usize; 4]) -> usize {
    match layout {
        Layout::Planar => ((n * channels + c) * h + y) * w + x,
        Layout::Blocked => (((n * channels.div_ceil(block) + c / block) * h + y) * w + x) * block + c % block,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn blocked_inputs_match_the_reference(
        geo in geometry(),
        channels in 1usize..40,
        block in prop_oneof![Just(8usize), Just(16usize)],
        planar_out in any::<bool>(),
        kind in 0usize..3,
        past_pads in (0usize..4, 0usize..4),
        tasks in 1usize..4,
        seed in any::<u64>(),
    ) {
        let geo = Conv2d { in_channels: channels, out_channels: channels, groups: channels, ..geo };
        // An average's padded extent: the input's and the leading pad's, and up to 3 more
        // (windows may reach past it, as ceil mode's past the far pads).
        let end = (geo.pad.0 + geo.in_h + past_pads.0, geo.pad.1 + geo.in_w + past_pads.1);
        let kind = [PoolKind::Max, PoolKind::Average(Divisor::Inside), PoolKind::Average(Divisor::Padded { end })][kind];
        let x = special_values(geo.input_len().unwrap(), seed);
        let want = pool_reference(&geo, kind, &x);
        let mut blocked = vec![0.0; tensor_len(Layout::Blocked, block, [geo.batch, channels, geo.in_h, geo.in_w]).unwrap()];
        let (g, i) = (&geo, [channels, geo.in_h, geo.in_w]);
        for (k, v) in x.iter().enumerate() {
            let (n, c, y, c2) = (k / (channels * g.in_h * g.in_w), k / (g.in_h * g.in_w) % channels, k / g.in_w % g.in_h, k % g.in_w);
            blocked[offset(Layout::Blocked, block, i, [n, c, y, c2])] = *v;
        }
        let output = if planar_out { Layout::Planar } else { Layout::Blocked };
        let o = [channels, g.out_h, g.out_w];
        for isa in [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar] {
            let mut out = vec![1234.5; tensor_len(output, block, [g.batch, channels, g.out_h, g.out_w]).unwrap()];
            for task in 0..tasks {
                pool2d_blocked_share(isa, &geo, kind, block, output, &blocked, &mut out, (task, tasks)).unwrap();
            }
            for (k, w) in want.iter().enumerate() {
                let (n, c, y, x) = (k / (channels * g.out_h * g.out_w), k / (g.out_h * g.out_w) % channels, k / g.out_w % g.out_h, k % g.out_w);
                let got = out[offset(output, block, o, [n, c, y, x])];
                // A sum of NaNs keeps the payload of whichever operand comes first, which the
                // compiler may swap (addition commutes): averages agree as any NaN.
                let same = got.to_bits() == w.to_bits() || (kind != PoolKind::Max && got.is_nan() && w.is_nan());
                prop_assert!(same, "{isa:?} {kind:?} {geo:?} [{k}]: {got} vs {w}");
            }
            if output == Layout::Blocked {
                // Lanes past the channels are zero.
                for (k, v) in out.iter().enumerate() {
                    let channel = k / (block * g.out_h * g.out_w) % channels.div_ceil(block) * block + k % block;
                    prop_assert!(channel < channels || *v == 0.0, "padding lane {k} holds {v}");
                }
            }
        }
    }
}

#[test]
fn bad_windows_are_errors() {
    let geo = Conv2d {
        batch: 1,
        in_channels: 2,
        in_h: 4,
        in_w: 4,
        out_channels: 2,
        out_h: 2,
        out_w: 2,
        kernel: (2, 2),
        stride: (2, 2),
        dilation: (1, 1),
        groups: 2,
        pad: (0, 0),
    };
    let (x, mut out) = (vec![0.0; 32], vec![0.0; 8]);
    max_pool2d_share(Isa::detect(), &geo, &x, &mut out, (0, 1)).unwrap();
    let err = max_pool2d_share(Isa::detect(), &Conv2d { out_channels: 4, groups: 1, ..geo }, &x, &mut out, (0, 1));
    assert!(matches!(err, Err(KernelError::Geometry(_))), "{err:?}");
    let err = max_pool2d_share(Isa::detect(), &geo, &x[..31], &mut out, (0, 1));
    assert!(matches!(err, Err(KernelError::TooShort { what: "input", .. })), "{err:?}");
    let err = max_pool2d_share(Isa::detect(), &geo, &x, &mut out, (1, 1));
    assert!(matches!(err, Err(KernelError::Share { .. })), "{err:?}");
    // An average's count must be exact as an f32: fewer than 2^24 taps.
    let huge = Conv2d { in_h: 1 << 12, in_w: 1 << 12, kernel: (1 << 12, 1 << 12), out_h: 1, out_w: 1, ..geo };
    let average = PoolKind::Average(Divisor::Inside);
    let err = pool2d_blocked_share(Isa::detect(), &huge, average, 8, Layout::Blocked, &[], &mut [], (0, 1));
    assert!(matches!(err, Err(KernelError::Geometry(_))), "{err:?}");
}

/// The average pool's entry point computes nothing from bad arguments (a divisor kind other
/// than 0 or 1, a negative extent, a block other than 8 or 16, a planar input, a task past the
/// split) and the same as the share function from good ones.
#[test]
#[allow(unsafe_code)] // Calls the `extern "C"` entry point, as generated code does.
fn the_average_entry_point_checks_its_arguments() {
    use heron_kernels::abi::{heron_avgpool2d_blocked_f32, layouts};
    let (c, h, w) = (8i64, 4i64, 4i64);
    let x = values((c * h * w) as usize, 3);
    let blocked = layouts::INPUT | layouts::OUTPUT;
    let isa = Isa::detect().code();
    // (include_pad, end_h, end_w, block, layouts, task)
    let run = |include: i64, end: i64, block: i64, layouts: i64, task: i64| {
        let mut out = vec![1234.5f32; (c * 2 * 2) as usize];
        // SAFETY: the buffers hold the shapes' elements (8 channels: one block of 8, or half
        // a block of 16 whose input would be too short, which the entry refuses to form).
        unsafe {
            heron_avgpool2d_blocked_f32(
                x.as_ptr(),
                out.as_mut_ptr(),
                isa,
                1,
                c,
                h,
                w,
                2,
                2,
                3,
                3,
                2,
                2,
                1,
                1,
                1,
                1,
                include,
                end,
                end,
                block,
                layouts,
                task,
                1,
            )
        };
        out
    };
    for (include, end, block, layouts, task) in [
        (2, 5, 8, blocked, 0),
        (1, -1, 8, blocked, 0),
        (0, 5, 0, blocked, 0),
        (0, 5, 8, layouts::OUTPUT, 0),
        (0, 5, 8, blocked, 1),
    ] {
        let out = run(include, end, block, layouts, task);
        assert!(out.iter().all(|&v| v == 1234.5), "{include} {end} {block} {layouts} {task}: {out:?}");
    }
    let geo = Conv2d {
        batch: 1,
        in_channels: 8,
        in_h: 4,
        in_w: 4,
        out_channels: 8,
        out_h: 2,
        out_w: 2,
        kernel: (3, 3),
        stride: (2, 2),
        dilation: (1, 1),
        groups: 8,
        pad: (1, 1),
    };
    for (include, divisor) in [(0, Divisor::Inside), (1, Divisor::Padded { end: (5, 5) })] {
        let mut want = vec![0.0; 32];
        pool2d_blocked_share(
            Isa::detect(),
            &geo,
            PoolKind::Average(divisor),
            8,
            Layout::Blocked,
            &x,
            &mut want,
            (0, 1),
        )
        .unwrap();
        assert_eq!(run(include, 5, 8, blocked, 0), want, "{divisor:?}");
    }
}
