//! 2-D max pooling over NCHW planes, with the semantics of the graph interpreter's MaxPool:
//! per output, the taps inside the input (padding is never a candidate) in window order, the
//! first one taken, each later one only when it compares greater (`x > acc`; so a NaN wins
//! only as an output's first tap); an output with no tap inside is −∞.
//!
//! Vectors run along the output row at column strides 1 and 2 (even lanes of two loads), each
//! tap's lanes inside the input known from masks; other strides run the scalar reference.

use crate::conv::Conv2d;
use crate::{Isa, KernelError, check_share, need, share};

/// Checks that `geo` is a pooling window: a depthwise convolution's geometry (as many
/// channels in as out, one per group) with consistent extents.
pub fn check(geo: &Conv2d) -> Result<(), KernelError> {
    geo.check()?;
    if geo.in_channels != geo.out_channels || geo.groups != geo.in_channels {
        return Err(KernelError::Geometry("a pooling window keeps the channels: one per group"));
    }
    let small = |n: usize| n <= i32::MAX as usize;
    let extents = [geo.in_h, geo.in_w, geo.out_h, geo.out_w, geo.pad.0, geo.pad.1, geo.stride.1, geo.dilation.1];
    if !extents.into_iter().all(small) {
        return Err(KernelError::Geometry("pooling extents, pads and strides must fit in 31 bits"));
    }
    Ok(())
}

/// The window geometry from the 14 integers the entry point takes (see
/// [`crate::abi::heron_maxpool2d_f32`]): batch, channels, input height and width, output
/// height and width, kernel, strides, dilations (each height then width), top and left pad.
pub fn window_from_dims(d: [usize; 14]) -> Conv2d {
    Conv2d {
        batch: d[0],
        in_channels: d[1],
        in_h: d[2],
        in_w: d[3],
        out_channels: d[1],
        out_h: d[4],
        out_w: d[5],
        kernel: (d[6], d[7]),
        stride: (d[8], d[9]),
        dilation: (d[10], d[11]),
        groups: d[1],
        pad: (d[12], d[13]),
    }
}

/// The 14 integers of [`window_from_dims`] for `geo`.
pub fn window_dims(geo: &Conv2d) -> [usize; 14] {
    let g = geo;
    [
        g.batch,
        g.in_channels,
        g.in_h,
        g.in_w,
        g.out_h,
        g.out_w,
        g.kernel.0,
        g.kernel.1,
        g.stride.0,
        g.stride.1,
        g.dilation.0,
        g.dilation.1,
        g.pad.0,
        g.pad.1,
    ]
}

/// Share `task` of `tasks` of `out = max_pool(x)` over the window `geo` (see [`check`]).
pub fn max_pool2d_share(
    isa: Isa,
    geo: &Conv2d,
    x: &[f32],
    out: &mut [f32],
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    check(geo)?;
    check_share(task, tasks)?;
    need("input", x.len(), geo.input_len()?)?;
    need("output", out.len(), geo.output_len()?)?;
    let (plane_in, plane_out) = (geo.in_h * geo.in_w, geo.out_h * geo.out_w);
    let (lo, hi) = share(geo.batch * geo.in_channels, tasks, task);
    for item in lo..hi {
        let (x, out) = (&x[item * plane_in..(item + 1) * plane_in], &mut out[item * plane_out..(item + 1) * plane_out]);
        #[cfg(target_arch = "x86_64")]
        if matches!(geo.stride.1, 1 | 2) {
            use crate::tile::x86::{avx2, avx512};
            // SAFETY: the ISA is available; `x` and `out` are the planes `geo` describes (its
            // extents checked to fit 31 bits), and the kernel reads only lanes inside `x`.
            if isa == Isa::Avx512 && Isa::Avx512.is_available() {
                unsafe { avx512::max_pool_plane(geo, x, out) };
                continue;
            }
            if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
                unsafe { avx2::max_pool_plane(geo, x, out) };
                continue;
            }
        }
        scalar_plane(geo, x, out);
    }
    Ok(())
}

/// The reference the vector kernels match bit for bit.
fn scalar_plane(geo: &Conv2d, x: &[f32], out: &mut [f32]) {
    for oy in 0..geo.out_h {
        for ox in 0..geo.out_w {
            let mut acc: Option<f32> = None;
            for r in 0..geo.kernel.0 {
                let Some(y) = geo.tap_row(oy, r) else { continue };
                for s in 0..geo.kernel.1 {
                    let Some(c) = geo.tap_col(ox, s) else { continue };
                    let v = x[y * geo.in_w + c];
                    acc = Some(match acc {
                        Some(a) if v > a => v,
                        Some(a) => a,
                        None => v,
                    });
                }
            }
            out[oy * geo.out_w + ox] = acc.unwrap_or(f32::NEG_INFINITY);
        }
    }
}

/// Bit `l` (for `l < 32`) set when element `start + l·stride` lies in `0..len`.
pub(crate) fn strided_window(start: isize, stride: usize, len: usize) -> u32 {
    let stride = stride as isize;
    // Lanes `l` with `0 ≤ start + l·stride < len`: `lo ≤ l < hi`.
    let lo = if start >= 0 { 0 } else { (-start + stride - 1) / stride };
    let hi = if (len as isize) <= start { 0 } else { (len as isize - start + stride - 1) / stride };
    let below = |n: isize| if n >= 32 { u32::MAX } else { (1u32 << n.max(0)) - 1 };
    below(hi) & !below(lo)
}

/// The vector max pool plane, written once over a module's vector helpers (see
/// [`crate::tile`]; `select` and `max` with x86's `maxps` semantics: `a > b ? a : b`).
#[cfg(target_arch = "x86_64")]
macro_rules! max_pool_kernel {
    ($feature:literal) => {
        /// # Safety
        /// The CPU has the module's features; `x` and `out` hold the planes `geo` describes,
        /// whose extents fit 31 bits, and `geo.stride.1` is 1 or 2.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn max_pool_plane(geo: &crate::conv::Conv2d, x: &[f32], out: &mut [f32]) {
            let (sw, dw) = (geo.stride.1, geo.dilation.1);
            // Tap `s` of the vector from output column `ow`: its first input column, the lanes
            // inside the input, and the masks of the two loads a stride-2 tap reads.
            let tap = |ow: usize, s: usize| {
                let first = (ow * sw + s * dw) as isize - geo.pad.1 as isize;
                let raw = |at: isize| crate::winograd::window(at, geo.in_w);
                (first, crate::pool::strided_window(first, sw, geo.in_w), raw(first), raw(first + LANES as isize))
            };
            // The masks depend on the column only: computed once per column of vectors for
            // the first `CACHED` taps of a row.
            const CACHED: usize = 16;
            for ow in (0..geo.out_w).step_by(LANES) {
                let n = (geo.out_w - ow).min(LANES);
                let mut taps = [(0isize, 0u32, 0u32, 0u32); CACHED];
                for (s, t) in taps.iter_mut().enumerate().take(geo.kernel.1) {
                    *t = tap(ow, s);
                }
                for oy in 0..geo.out_h {
                    let mut acc = splat(f32::NEG_INFINITY);
                    // Lanes that have had no tap inside the input yet.
                    let mut unset = u32::MAX;
                    for r in 0..geo.kernel.0 {
                        let y = (oy * geo.stride.0 + r * geo.dilation.0) as isize - geo.pad.0 as isize;
                        if !(0..geo.in_h as isize).contains(&y) {
                            continue;
                        }
                        let row = x.as_ptr().wrapping_offset(y * geo.in_w as isize);
                        for s in 0..geo.kernel.1 {
                            let (first, inside, lo, hi) = if s < CACHED { taps[s] } else { tap(ow, s) };
                            // SAFETY: masked loads read only the elements inside the row.
                            let v = unsafe {
                                if sw == 1 {
                                    load_bits(row.wrapping_offset(first), inside)
                                } else {
                                    let second = row.wrapping_offset(first + LANES as isize);
                                    even(load_bits(row.wrapping_offset(first), lo), load_bits(second, hi))
                                }
                            };
                            acc = select(inside & !unset, max(v, acc), acc);
                            acc = select(inside & unset, v, acc);
                            unset &= !inside;
                        }
                    }
                    // SAFETY: lanes `ow..ow + n` of output row `oy`.
                    unsafe { store_n(out.as_mut_ptr().add(oy * geo.out_w + ow), acc, n) };
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use max_pool_kernel;
