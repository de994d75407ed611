//! 2-D pooling. Max pooling over NCHW planes, with the semantics of the graph interpreter's MaxPool:
//! per output, the taps inside the input (padding is never a candidate) in window order, the
//! first one taken, each later one only when it compares greater (`x > acc`; so a NaN wins
//! only as an output's first tap); an output with no tap inside is −∞.
//!
//! Over planar planes, vectors run along the output row at column strides 1 and 2 (even lanes
//! of two loads), each tap's lanes inside the input known from masks; other strides run the
//! scalar reference. Over a channel-blocked input ([`crate::blocked`]), a vector is one
//! pixel's block of channels and every tap one load and one `max`, at any stride; the output
//! is blocked or planar.
//!
//! Average pooling runs over channel-blocked inputs only (a planar one is generated code's),
//! with the semantics of lowering's average pool: the taps inside the input summed in window
//! order from 0, divided by the count of the taps inside the input or, for
//! `count_include_pad`, inside the padded input ([`Divisor`]); 0 where none count. Every tap
//! is one load and one add.

use crate::blocked::{Layout, block_for, taps_inside, tensor_len};
use crate::conv::Conv2d;
use crate::{Isa, KernelError, check_share, need, share};

/// Checks that `geo` is a pooling window: a depthwise convolution's geometry (as many
/// channels in as out, one per group) with consistent extents.
pub fn check(geo: &Conv2d) -> Result<(), KernelError> {
    geo.check_shape()?;
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

/// What a pool computes over the taps of each window inside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// The maximum, as [`max_pool2d_share`]'s (−∞ where no tap is inside).
    Max,
    /// The mean, as lowering's average pool computes it: the taps inside summed in window
    /// order from 0, divided by the count of the taps `divisor` counts (0 where none count).
    Average(Divisor),
}

/// The taps an average pool divides its sum by (ONNX's `count_include_pad`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Divisor {
    /// Those inside the input.
    Inside,
    /// Those inside the padded input, `end` rows and columns from its top left corner (the
    /// input's extent and both pads): a ceil-mode window's overhang past the far pads does
    /// not count.
    Padded { end: (usize, usize) },
}

/// An average's window has fewer taps than this: its count is then exact as an f32 (as
/// lowering's f32 count, which it uses below this bound).
const AVERAGE_TAPS: usize = 1 << 24;

/// One output row of one channel block of a pool over a blocked input, as raw pointers.
pub(crate) struct PoolRow {
    /// The input at the block's tap row `r_lo`, column 0.
    pub x: *const f32,
    /// Input elements between consecutive tap rows (`dilation · row`).
    pub x_tap_row: usize,
    pub tap_rows: usize,
    pub kw: usize,
    pub in_w: usize,
    pub pad: usize,
    pub stride: usize,
    pub dilation: usize,
    pub out_w: usize,
    /// The row's output (pixel 0): blocked (`planar` false: a block per pixel) or planar
    /// (each channel `plane` elements after the previous, pixels 1 apart).
    pub out: *mut f32,
    pub planar: bool,
    pub plane: usize,
    /// Channels of the block that exist (fewer than the block in a last one).
    pub channels: usize,
    /// An average's divisor: the window's rows that count, and where columns stop counting
    /// (see [`PoolRow::divisor`]); unused by a max pool.
    pub counted_rows: usize,
    pub divisor: Divisor,
}

impl PoolRow {
    /// The taps `s_lo..s_hi` of output column `ox` inside the input and the input column of
    /// the first (0 when there is none).
    pub(crate) fn columns(&self, ox: usize) -> (usize, usize, usize) {
        let left = ox * self.stride;
        let (s_lo, s_hi) = taps_inside(left, self.kw, self.dilation, self.pad, self.in_w);
        let first = if s_lo < s_hi { left + s_lo * self.dilation - self.pad } else { 0 };
        (s_lo, s_hi, first)
    }

    /// The output columns `lo..hi` whose every tap lies inside the input (`lo == hi`: none).
    pub(crate) fn interior(&self) -> (usize, usize) {
        let lo = self.pad.div_ceil(self.stride.max(1)).min(self.out_w);
        let reach = self.kw.saturating_sub(1).saturating_mul(self.dilation).saturating_add(1);
        // Column `ox`'s last tap, `ox·stride − pad + reach − 1`, is below `in_w`.
        let hi = self.in_w.saturating_add(self.pad).checked_sub(reach).map_or(0, |last| last / self.stride.max(1) + 1);
        (lo, hi.clamp(lo, self.out_w))
    }

    /// What an average divides output column `ox`'s sum by (exact: below [`AVERAGE_TAPS`]).
    pub(crate) fn divisor(&self, ox: usize) -> f32 {
        let cols = match self.divisor {
            Divisor::Inside => {
                let (s_lo, s_hi, _) = self.columns(ox);
                s_hi - s_lo
            }
            Divisor::Padded { end } => taps_inside(ox * self.stride, self.kw, self.dilation, 0, end.1).1,
        };
        (self.counted_rows * cols) as f32
    }
}

/// Share `task` of `tasks` of `out = kind(x)` over the window `geo` (see [`check`]), `x`
/// channel-blocked (`block` channels per vector) and `out` stored as `output` says; a blocked
/// output holds zero in the lanes past the channels.
#[allow(clippy::too_many_arguments)]
pub fn pool2d_blocked_share(
    isa: Isa,
    geo: &Conv2d,
    kind: PoolKind,
    block: usize,
    output: Layout,
    x: &[f32],
    out: &mut [f32],
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    check(geo)?;
    check_share(task, tasks)?;
    if !crate::blocked::BLOCKS.contains(&block) {
        return Err(KernelError::Geometry("the block must be 8 or 16 channels"));
    }
    let g = geo;
    let divisor = match kind {
        PoolKind::Max => Divisor::Inside,
        PoolKind::Average(divisor) => {
            if g.kernel.0.checked_mul(g.kernel.1).is_none_or(|taps| taps >= AVERAGE_TAPS) {
                return Err(KernelError::Geometry("an average pool's window must have fewer than 2^24 taps"));
            }
            divisor
        }
    };
    need("input", x.len(), tensor_len(Layout::Blocked, block, [g.batch, g.in_channels, g.in_h, g.in_w])?)?;
    need("output", out.len(), tensor_len(output, block, [g.batch, g.out_channels, g.out_h, g.out_w])?)?;
    let blocks = g.in_channels.div_ceil(block);
    let (rows, plane_in, plane_out) = (g.out_h, g.in_h * g.in_w, g.out_h * g.out_w);
    let (lo, hi) = share(g.batch * blocks * rows, tasks, task);
    let vector = isa != Isa::Scalar && isa.is_available() && block_for(isa) == block;
    for item in lo..hi {
        let (oy, cb, n) = (item % rows, item / rows % blocks, item / rows / blocks);
        let (r_lo, r_hi) = taps_inside(oy * g.stride.0, g.kernel.0, g.dilation.0, g.pad.0, g.in_h);
        let counted_rows = match divisor {
            Divisor::Inside => r_hi - r_lo,
            Divisor::Padded { end } => taps_inside(oy * g.stride.0, g.kernel.0, g.dilation.0, 0, end.0).1,
        };
        let x_at = ((n * blocks + cb) * plane_in
            + (oy * g.stride.0 + r_lo * g.dilation.0).saturating_sub(g.pad.0) * g.in_w)
            * block;
        let out_at = match output {
            Layout::Blocked => ((n * blocks + cb) * plane_out + oy * g.out_w) * block,
            Layout::Planar => (n * g.in_channels + cb * block) * plane_out + oy * g.out_w,
        };
        let row = PoolRow {
            x: x[if r_lo < r_hi { x_at } else { 0 }..].as_ptr(),
            x_tap_row: g.dilation.0 * g.in_w * block,
            tap_rows: r_hi - r_lo,
            kw: g.kernel.1,
            in_w: g.in_w,
            pad: g.pad.1,
            stride: g.stride.1,
            dilation: g.dilation.1,
            out_w: g.out_w,
            out: out[out_at..].as_mut_ptr(),
            planar: output == Layout::Planar,
            plane: plane_out,
            channels: (g.in_channels - cb * block).min(block),
            counted_rows,
            divisor,
        };
        #[cfg(target_arch = "x86_64")]
        if vector {
            use crate::tile::x86::{avx2, avx512};
            // SAFETY: `vector` says the CPU has the ISA and the block is its width; the row's
            // taps (rows `r_lo..r_hi`, columns per pixel) are inside the input, its pixels and
            // channels inside the output.
            unsafe {
                match (isa == Isa::Avx512, kind) {
                    (true, PoolKind::Max) => avx512::max_pool_blocked_row(&row),
                    (true, PoolKind::Average(_)) => avx512::average_pool_blocked_row(&row),
                    (false, PoolKind::Max) => avx2::max_pool_blocked_row(&row),
                    (false, PoolKind::Average(_)) => avx2::average_pool_blocked_row(&row),
                }
            }
            continue;
        }
        let _ = vector;
        // SAFETY: as above.
        unsafe { scalar_blocked_row(&row, kind, block) };
    }
    Ok(())
}

/// The reference blocked row: per lane, the first tap inside, then each later one that
/// compares greater; or the sum of the taps inside from 0, divided by the row's divisor.
///
/// # Safety
/// As [`pool2d_blocked_share`]'s rows.
unsafe fn scalar_blocked_row(row: &PoolRow, kind: PoolKind, block: usize) {
    // SAFETY: the row's taps and outputs are inside its tensors.
    unsafe {
        for ox in 0..row.out_w {
            let (s_lo, s_hi, first) = row.columns(ox);
            for lane in 0..block {
                let mut acc: Option<f32> = None;
                let mut sum = 0.0f32;
                for r in 0..row.tap_rows {
                    for s in 0..s_hi - s_lo {
                        let v = *row.x.add(r * row.x_tap_row + (first + s * row.dilation) * block + lane);
                        sum += v;
                        acc = Some(match acc {
                            Some(a) if v > a => v,
                            Some(a) => a,
                            None => v,
                        });
                    }
                }
                let v = match kind {
                    PoolKind::Max => acc.unwrap_or(f32::NEG_INFINITY),
                    PoolKind::Average(_) => {
                        let count = row.divisor(ox);
                        if count == 0.0 { 0.0 } else { sum / count }
                    }
                };
                if lane >= row.channels {
                    if !row.planar {
                        *row.out.add(ox * block + lane) = 0.0;
                    }
                } else if row.planar {
                    *row.out.add(lane * row.plane + ox) = v;
                } else {
                    *row.out.add(ox * block + lane) = v;
                }
            }
        }
    }
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

/// The blocked pool rows, written over a module's vector helpers (`max(v, acc)` is
/// `v > acc ? v : acc`: a later tap replaces the maximum only when it compares greater).
#[cfg(target_arch = "x86_64")]
macro_rules! pool_blocked_kernel {
    ($feature:literal) => {
        /// # Safety
        /// The CPU has the module's features, the block is `LANES`, and the row's pointers
        /// are valid for its extents (see [`crate::pool::PoolRow`]).
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn max_pool_blocked_row(row: &crate::pool::PoolRow) {
            // SAFETY: forwarded.
            unsafe { pool_blocked_row(row, |v| v, |acc, v| max(v, acc), |_, acc| acc, splat(f32::NEG_INFINITY)) }
        }

        /// # Safety
        /// As [`max_pool_blocked_row`]'s.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn average_pool_blocked_row(row: &crate::pool::PoolRow) {
            // SAFETY: forwarded.
            unsafe {
                pool_blocked_row(
                    row,
                    // From 0, as lowering's sum (`0 + -0` is `+0`).
                    |v| add(zero(), v),
                    |acc, v| add(acc, v),
                    |ox, sum| {
                        let count = row.divisor(ox);
                        if count == 0.0 { zero() } else { div(sum, splat(count)) }
                    },
                    zero(),
                )
            }
        }

        /// A row `LANES` pixels at a time: each pixel's taps inside the input in window order,
        /// the first as `first(v)`, each later one `step(acc, v)` (`empty` when there is
        /// none), then `finish(column, acc)`. Where every tap of all `LANES` pixels lies
        /// inside, the pixels advance together tap by tap: `LANES` independent chains instead
        /// of one (an `add` waits for the previous one's result). A planar output takes the
        /// pixels transposed, a plane's run of pixels per store (one lane per store wrote a
        /// line of every plane per pixel).
        ///
        /// # Safety
        /// As [`max_pool_blocked_row`]'s.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn pool_blocked_row(
            row: &crate::pool::PoolRow,
            first: impl Fn(Vector) -> Vector,
            step: impl Fn(Vector, Vector) -> Vector,
            finish: impl Fn(usize, Vector) -> Vector,
            empty: Vector,
        ) {
            let valid = if row.channels < LANES { (1u32 << row.channels) - 1 } else { u32::MAX };
            let (inside_lo, inside_hi) = row.interior();
            let (step_x, step_tap) = (row.stride * LANES, row.dilation * LANES);
            // SAFETY: every tap read is inside the input, every store inside the output.
            unsafe {
                for ox0 in (0..row.out_w).step_by(LANES) {
                    let n = (row.out_w - ox0).min(LANES);
                    let mut pixels = [empty; LANES];
                    let whole = n == LANES && row.tap_rows > 0 && ox0 >= inside_lo && ox0 + LANES <= inside_hi;
                    if whole {
                        let x = row.x.add(row.columns(ox0).2 * LANES);
                        for (k, acc) in pixels.iter_mut().enumerate() {
                            *acc = first(load(x.add(k * step_x)));
                        }
                        for r in 0..row.tap_rows {
                            let xr = x.add(r * row.x_tap_row);
                            for s in usize::from(r == 0)..row.kw {
                                let xs = xr.add(s * step_tap);
                                for (k, acc) in pixels.iter_mut().enumerate() {
                                    *acc = step(*acc, load(xs.add(k * step_x)));
                                }
                            }
                        }
                    } else {
                        for (k, acc) in pixels.iter_mut().enumerate().take(n) {
                            let (s_lo, s_hi, col) = row.columns(ox0 + k);
                            if row.tap_rows == 0 || s_lo == s_hi {
                                continue;
                            }
                            let x = row.x.add(col * LANES);
                            *acc = first(load(x));
                            for r in 0..row.tap_rows {
                                let xr = x.add(r * row.x_tap_row);
                                for s in usize::from(r == 0)..s_hi - s_lo {
                                    *acc = step(*acc, load(xr.add(s * step_tap)));
                                }
                            }
                        }
                    }
                    for (k, acc) in pixels.iter_mut().enumerate().take(n) {
                        *acc = finish(ox0 + k, *acc);
                    }
                    if row.planar {
                        for (c, &v) in transpose(pixels).iter().enumerate().take(row.channels) {
                            store_n(row.out.add(c * row.plane + ox0), v, n);
                        }
                    } else {
                        for (k, &acc) in pixels.iter().enumerate().take(n) {
                            store_n(row.out.add((ox0 + k) * LANES), select(valid, acc, zero()), LANES);
                        }
                    }
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use pool_blocked_kernel;

#[cfg(test)]
mod tests {
    use super::{Divisor, PoolRow};

    /// `interior` is exactly the columns whose taps all lie inside, on every small window.
    #[test]
    fn interior_columns_are_those_with_every_tap_inside() {
        for (in_w, kw, stride, dilation, pad) in small_windows() {
            let out_w = (in_w + 2 * pad).saturating_sub((kw - 1) * dilation + 1) / stride + 2;
            let row = PoolRow {
                x: std::ptr::null(),
                x_tap_row: 0,
                tap_rows: 1,
                kw,
                in_w,
                pad,
                stride,
                dilation,
                out_w,
                out: std::ptr::null_mut(),
                planar: false,
                plane: 0,
                channels: 1,
                counted_rows: 1,
                divisor: Divisor::Inside,
            };
            let (lo, hi) = row.interior();
            for ox in 0..out_w {
                let whole = matches!(row.columns(ox), (0, s_hi, _) if s_hi == kw);
                assert_eq!(whole, (lo..hi).contains(&ox), "{in_w} {kw} {stride} {dilation} {pad}: column {ox}");
            }
        }
    }

    fn small_windows() -> impl Iterator<Item = (usize, usize, usize, usize, usize)> {
        (1..12).flat_map(|in_w| {
            (1..5).flat_map(move |kw| {
                (1..4).flat_map(move |s| (1..3).flat_map(move |d| (0..4).map(move |p| (in_w, kw, s, d, p))))
            })
        })
    }
}
