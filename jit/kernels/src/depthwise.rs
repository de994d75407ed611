//! Depthwise convolution (`groups == C == M`): each channel plane on its own, vectors along
//! the output row. Every kernel accumulates an output's taps in the same order (tap rows top to
//! bottom, each left to right, after the bias), taps in the padding multiplying a zero, so
//! all of them give the same bits.
//!
//! - **Row kernel** (AVX-512; 3×3 or 5×5 taps, strides (1, 1) or (2, 2), undilated: the
//!   depthwise layers of MobileNets and EfficientNets): a block of output rows loads each
//!   input row it reads once, with the padding masked out of the loads, and makes every tap's
//!   window from those vectors in registers (lane shifts; even and odd lanes at stride 2).
//!   Small planes pay no copy and no per-tap load.
//! - **General kernel** (AVX2 for every shape, AVX-512 for the rest; vectors along the row at
//!   column strides 1 and 2, scalar code at others): the plane is laid out in the task's
//!   scratch with its zero border, at column stride 2 each row as its even columns followed by
//!   its odd ones ([`PaddedPlane`]), so that every tap of a vector of outputs is one plain
//!   load; blocks of up to [`ACCUMULATORS`] output vectors take each tap's weight once. AVX2
//!   has neither cheap masked loads nor cheap lane shifts across its two halves: there this
//!   runs MobileNet layers 1.7× faster than the row kernel did (measured).

use crate::conv::{Conv2d, ConvEpilogue};
use crate::{Isa, KernelError, share};

/// The general kernel's blocks: at most 12 accumulators (with the tap's weight, 13 of AVX2's
/// 16 registers), along a row at most 3 vectors.
pub(crate) const ACCUMULATORS: usize = 12;
pub(crate) const MAX_VECTORS: usize = 3;

/// Planes the row kernel computes at once.
pub(crate) const ROW_KERNEL_PLANES: usize = 3;

/// Whether the row kernel runs the depthwise convolution `geo` (on a CPU with the ISA).
fn row_kernel_fits(geo: &Conv2d) -> bool {
    let small = |n: usize| n <= i32::MAX as usize;
    matches!(geo.kernel, (3, 3) | (5, 5))
        && matches!(geo.stride, (1, 1) | (2, 2))
        && geo.dilation == (1, 1)
        && [geo.in_h, geo.in_w, geo.out_h, geo.out_w, geo.pad.0, geo.pad.1].into_iter().all(small)
}

/// Scratch elements one task needs: the laid-out plane the general kernel reads, if any.
pub(crate) fn scratch_len(isa: Isa, geo: &Conv2d) -> Result<usize, KernelError> {
    match PlaneKernel::intended(isa, geo) {
        PlaneKernel::General => PaddedPlane::of(geo)?.len(),
        _ => Ok(0),
    }
}

/// How one plane is computed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PlaneKernel {
    Rows,
    General,
    Scalar,
}

impl PlaneKernel {
    /// The kernel `isa` runs `geo` with on a CPU that has the ISA (scratch is sized for it,
    /// wherever the code runs).
    fn intended(isa: Isa, geo: &Conv2d) -> PlaneKernel {
        if !cfg!(target_arch = "x86_64") || isa == Isa::Scalar {
            PlaneKernel::Scalar
        } else if isa == Isa::Avx512 && row_kernel_fits(geo) {
            // AVX-512's masked loads and lane shifts are cheap enough to spare the copy; on
            // AVX2 the copy and plain loads are faster (2× on MobileNet layers, measured).
            PlaneKernel::Rows
        } else if matches!(geo.stride.1, 1 | 2) {
            PlaneKernel::General
        } else {
            PlaneKernel::Scalar
        }
    }

    fn choose(isa: Isa, geo: &Conv2d) -> PlaneKernel {
        if isa.is_available() { PlaneKernel::intended(isa, geo) } else { PlaneKernel::Scalar }
    }
}

/// Elements the general kernel may read past a laid-out plane: the rest of the last row's
/// last vector (of at most 16 lanes).
const SLACK: usize = 16;

/// How the general kernel lays a plane out in the task's scratch: the `height × width` plane
/// the taps span, zero where they fall in the padding, and at column stride 2 each row's
/// even columns (the first `evens` elements) followed by its odd ones. Every tap of a
/// vector of outputs is then one contiguous load.
pub(crate) struct PaddedPlane {
    pub height: usize,
    pub width: usize,
    /// Where a row's odd columns start when split, else the row's width.
    pub evens: usize,
    pub split: bool,
}

impl PaddedPlane {
    pub(crate) fn of(geo: &Conv2d) -> Result<PaddedPlane, KernelError> {
        let (height, width) = geo.padded_extent()?;
        let split = geo.stride.1 == 2;
        Ok(PaddedPlane { height, width, evens: if split { width.div_ceil(2) } else { width }, split })
    }

    pub(crate) fn len(&self) -> Result<usize, KernelError> {
        self.height.checked_mul(self.width).and_then(|n| n.checked_add(SLACK)).ok_or(KernelError::Overflow("scratch"))
    }

    /// Where in a laid-out row output column 0's tap at padded column `c` is (output column
    /// `x` is `x` further).
    pub(crate) fn tap(&self, c: usize) -> usize {
        if self.split { (c % 2) * self.evens + c / 2 } else { c }
    }

    /// Writes the rows and columns of input plane `src` that the taps reach into `dst`,
    /// whose padding is already zero.
    fn fill(&self, isa: Isa, geo: &Conv2d, src: &[f32], dst: &mut [f32]) {
        let (pt, pl) = geo.pad;
        let width = geo.in_w.min(self.width.saturating_sub(pl));
        if width == 0 {
            return;
        }
        for y in pt..self.height.min(pt + geo.in_h) {
            let from = &src[(y - pt) * geo.in_w..][..width];
            let row = &mut dst[y * self.width..][..self.width];
            if !self.split {
                row[pl..pl + width].copy_from_slice(from);
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            {
                use crate::tile::x86::{avx2, avx512};
                // SAFETY: `from` holds `width` values; the row holds `width` ≥ `pl + width`
                // elements, of which the split writes `pl + width` at most (see `split_row`).
                let (x, to) = (from.as_ptr(), row.as_mut_ptr());
                match isa {
                    Isa::Avx512 => unsafe { avx512::split_row(x, width, pl, to, self.evens) },
                    Isa::Avx2Fma => unsafe { avx2::split_row(x, width, pl, to, self.evens) },
                    Isa::Scalar => {}
                }
                if isa != Isa::Scalar {
                    continue;
                }
            }
            for (x, &v) in from.iter().enumerate() {
                row[self.tap(pl + x)] = v;
            }
        }
    }
}

/// The depthwise form of [`crate::conv::conv2d_share`]; the caller checked every length.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_share(
    isa: Isa,
    geo: &Conv2d,
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    epilogue: ConvEpilogue<'_>,
    scratch: &mut [f32],
    (task, tasks): (usize, usize),
) {
    let (plane_in, plane_out) = (geo.in_h * geo.in_w, geo.out_h * geo.out_w);
    let kernel = PlaneKernel::choose(isa, geo);
    let (lo, hi) = share(geo.batch * geo.in_channels, tasks, task);
    let layout = PaddedPlane::of(geo).expect("checked");
    let laid_out = layout.len().expect("checked");
    if kernel == PlaneKernel::General && lo < hi {
        // The padding and slack are zeroed once: each plane writes only the rest.
        scratch[..laid_out].fill(0.0);
    }
    let plane = |item: usize| {
        let (ch, taps) = (item % geo.in_channels, geo.kernel.0 * geo.kernel.1);
        Plane {
            x: &x[item * plane_in..(item + 1) * plane_in],
            w: &w[ch * taps..(ch + 1) * taps],
            bias: epilogue.bias.map_or(0.0, |b| b[ch]),
            residual: epilogue.residual.map(|r| &r[item * plane_out..(item + 1) * plane_out]),
            clamp: epilogue.clamp,
        }
    };
    let mut item = lo;
    while item < hi {
        // The row kernel takes `ROW_KERNEL_PLANES` consecutive planes at once: their
        // accumulator chains interleave where one narrow plane's would wait on FMA latency.
        let n = if kernel == PlaneKernel::Rows && hi - item >= ROW_KERNEL_PLANES { ROW_KERNEL_PLANES } else { 1 };
        let outputs = &mut out[item * plane_out..(item + n) * plane_out];
        match kernel {
            PlaneKernel::Rows if n == ROW_KERNEL_PLANES => {
                let planes: [Plane<'_>; ROW_KERNEL_PLANES] = std::array::from_fn(|i| plane(item + i));
                run_rows(isa, geo, &planes, outputs);
            }
            PlaneKernel::Rows => run_rows(isa, geo, &[plane(item)], outputs),
            PlaneKernel::General => {
                let p = plane(item);
                layout.fill(isa, geo, p.x, &mut scratch[..laid_out]);
                run_general(isa, geo, &layout, &scratch[..laid_out], &p, outputs);
            }
            PlaneKernel::Scalar => scalar_plane(geo, &plane(item), outputs),
        }
        crate::conv::activate(isa, epilogue.activation, outputs);
        item += n;
    }
}

/// The row kernel on consecutive planes (`out` holds their output planes one after the
/// other).
fn run_rows(isa: Isa, geo: &Conv2d, planes: &[Plane<'_>], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: `choose` picked the row kernel only on a CPU with AVX-512 and for the
        // shapes it takes; each plane's `x` holds an input plane, `w` the taps, and `out` and
        // the residuals the output planes. It reads only elements inside them (masked loads).
        return unsafe { crate::tile::x86::avx512::depthwise_rows(geo, planes, out) };
    }
    let _ = (geo, planes, out);
    unreachable!("the row kernel is chosen for AVX-512 only ({isa:?})")
}

/// The general kernel on one plane laid out in `src`.
fn run_general(isa: Isa, geo: &Conv2d, layout: &PaddedPlane, src: &[f32], p: &Plane<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::tile::x86::{avx2, avx512};
        // SAFETY: `choose` picked the general kernel only on a CPU with the ISA and at
        // column stride 1 or 2; `src` holds the laid-out plane with its slack, `out` and the
        // residual an output plane.
        match isa {
            Isa::Avx512 => return unsafe { avx512::depthwise_plane(geo, layout, src.as_ptr(), p, out) },
            Isa::Avx2Fma => return unsafe { avx2::depthwise_plane(geo, layout, src.as_ptr(), p, out) },
            Isa::Scalar => {}
        }
    }
    let _ = (geo, layout, src, p, out);
    unreachable!("the general kernel is chosen for vector ISAs only ({isa:?})")
}

/// One channel of a depthwise convolution: its input plane (`in_h × in_w` of `geo`), taps
/// and epilogue.
pub(crate) struct Plane<'a> {
    pub x: &'a [f32],
    pub w: &'a [f32],
    pub bias: f32,
    pub residual: Option<&'a [f32]>,
    pub clamp: Option<(f32, f32)>,
}

/// The reference every vector kernel matches bit for bit.
fn scalar_plane(geo: &Conv2d, p: &Plane<'_>, out: &mut [f32]) {
    let (kh, kw) = geo.kernel;
    for oh in 0..geo.out_h {
        for ow in 0..geo.out_w {
            let mut acc = p.bias;
            for r in 0..kh {
                let row = geo.tap_row(oh, r);
                for s in 0..kw {
                    let col = geo.tap_col(ow, s);
                    let x = match (row, col) {
                        (Some(y), Some(c)) => p.x[y * geo.in_w + c],
                        _ => 0.0,
                    };
                    acc = p.w[r * kw + s].mul_add(x, acc);
                }
            }
            let at = oh * geo.out_w + ow;
            if let Some(r) = p.residual {
                acc += r[at];
            }
            if let Some((lo, hi)) = p.clamp {
                acc = acc.max(lo).min(hi);
            }
            out[at] = acc;
        }
    }
}

/// The row kernel, written over a module's vector helpers (see [`crate::tile`]; `DW_ROWS`
/// and `DW_VECTORS` size its block).
///
/// Each output vector has its own accumulator and a block holds several: a single chain of
/// FMAs per output vector would wait out the FMA latency at every tap.
#[cfg(target_arch = "x86_64")]
macro_rules! depthwise_rows_kernel {
    ($feature:literal) => {
        /// The row kernel (see the module documentation) on 1 or `ROW_KERNEL_PLANES`
        /// consecutive planes, whose output planes `out` holds one after the other.
        ///
        /// # Safety
        /// The CPU has the module's features; each plane's `x` holds the unpadded
        /// `in_h × in_w` plane, `w` the `K × K` taps, `residual` an output plane; the shape is
        /// one the row kernel takes.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn depthwise_rows(
            geo: &crate::conv::Conv2d,
            planes: &[crate::depthwise::Plane<'_>],
            out: &mut [f32],
        ) {
            // SAFETY: forwarded.
            unsafe {
                match (geo.kernel.0, geo.stride.0) {
                    (3, 1) => rows_planes::<3, 1>(geo, planes, out),
                    (3, _) => rows_planes::<3, 2>(geo, planes, out),
                    (5, 1) => rows_planes::<5, 1>(geo, planes, out),
                    _ => rows_planes::<5, 2>(geo, planes, out),
                }
            }
        }

        /// # Safety
        /// As [`depthwise_rows`], with `K × K` taps and stride `S`.
        #[target_feature(enable = $feature)]
        unsafe fn rows_planes<const K: usize, const S: usize>(
            geo: &crate::conv::Conv2d,
            planes: &[crate::depthwise::Plane<'_>],
            out: &mut [f32],
        ) {
            const C: usize = crate::depthwise::ROW_KERNEL_PLANES;
            // Blocks of one vector per row take several planes; wider blocks have chains
            // enough in one.
            let narrow = geo.out_w <= LANES || DW_VECTORS == 1;
            let (plane_out, width) = (geo.out_h * geo.out_w, if narrow { LANES } else { DW_VECTORS * LANES });
            let blocks = (0..geo.out_w)
                .step_by(width)
                .flat_map(|ow| (0..geo.out_h).step_by(DW_ROWS).map(move |oh| (oh, ow, (geo.out_w - ow).min(width))));
            // SAFETY: forwarded; every block starts inside the output plane.
            unsafe {
                match <&[_; C]>::try_from(planes) {
                    Ok(group) if narrow => blocks.for_each(|at| rows_block::<K, S, 1, C>(geo, group, out, at)),
                    _ => {
                        for (p, out) in planes.iter().zip(out.chunks_exact_mut(plane_out)) {
                            let p = std::array::from_ref(p);
                            for at in blocks.clone() {
                                if at.2 > LANES {
                                    rows_block::<K, S, DW_VECTORS, 1>(geo, p, out, at)
                                } else {
                                    rows_block::<K, S, 1, 1>(geo, p, out, at)
                                }
                            }
                        }
                    }
                }
            }
        }

        /// Output rows `oh..oh + DW_ROWS` (those inside the plane), columns `ow..ow + cols`
        /// (`cols` ≤ `V·LANES`) of `C` planes. Input row `oh·S + t − pad.0` is read as
        /// `S·V + 1` vectors from column `ow·S − pad.1`: at stride 1, tap `s` of vector `j` is
        /// lanes `s..s + LANES` of vectors `j` and `j + 1`; at stride 2, the even (or odd)
        /// lanes of vectors `2j, 2j + 1` followed by those of `2j + 2`, shifted by `s / 2`.
        ///
        /// # Safety
        /// As [`rows_planes`], `out` holding the `C` output planes, `oh < out_h` and
        /// `ow + cols ≤ out_w`.
        #[target_feature(enable = $feature)]
        unsafe fn rows_block<const K: usize, const S: usize, const V: usize, const C: usize>(
            geo: &crate::conv::Conv2d,
            planes: &[crate::depthwise::Plane<'_>; C],
            out: &mut [f32],
            (oh, ow, cols): (usize, usize, usize),
        ) {
            // S·V + 1 for S, V ≤ 2.
            const MAX_LOADS: usize = 5;
            let loads = S * V + 1;
            let first = (ow * S) as isize - geo.pad.1 as isize;
            // Loops, not `array::from_fn`: its closures are not inlined into target-feature
            // functions.
            let mut bits = [0u32; MAX_LOADS];
            for (j, b) in bits.iter_mut().enumerate() {
                *b = crate::winograd::window(first + (j * LANES) as isize, geo.in_w);
            }
            let mut acc = [[[zero(); V]; DW_ROWS]; C];
            for (p, acc) in planes.iter().zip(acc.iter_mut()) {
                *acc = [[splat(p.bias); V]; DW_ROWS];
            }
            // An opaque trip count keeps this a loop: fully unrolled, every row's loads were
            // hoisted ahead of the FMAs and spilled (1.1-1.9× slower, measured); as a loop,
            // each row is loaded, shifted and accumulated in registers.
            for t in 0..std::hint::black_box((DW_ROWS - 1) * S + K) {
                let y = (oh * S + t) as isize - geo.pad.0 as isize;
                let row_inside = (0..geo.in_h as isize).contains(&y);
                for (p, acc) in planes.iter().zip(acc.iter_mut()) {
                    let mut x = [zero(); MAX_LOADS];
                    if row_inside {
                        let row = p.x.as_ptr().wrapping_offset(y * geo.in_w as isize + first);
                        for (j, v) in x.iter_mut().enumerate().take(loads) {
                            // SAFETY: row `y` is in the plane and `bits[j]` sets only the lanes
                            // whose column is in `0..in_w`; no other lane is read.
                            *v = unsafe { load_bits(row.wrapping_add(j * LANES), bits[j]) };
                        }
                    }
                    let w = p.w.as_ptr();
                    for j in 0..V {
                        let mut taps = [zero(); K];
                        if S == 1 {
                            for (s, tap) in taps.iter_mut().enumerate() {
                                *tap = shifted(x[j], x[j + 1], s);
                            }
                        } else {
                            let (lo, hi, next) = (x[2 * j], x[2 * j + 1], x[2 * j + 2]);
                            let even_lanes = (even(lo, hi), even(next, zero()));
                            let odd_lanes = (odd(lo, hi), odd(next, zero()));
                            for (s, tap) in taps.iter_mut().enumerate() {
                                let (first, then) = if s % 2 == 0 { even_lanes } else { odd_lanes };
                                *tap = shifted(first, then, s / 2);
                            }
                        }
                        for (o, acc_row) in acc.iter_mut().enumerate() {
                            // Output row `oh + o` reads this row with tap row `t − o·S`.
                            let Some(r) = t.checked_sub(o * S).filter(|&r| r < K) else { continue };
                            for (s, tap) in taps.iter().enumerate() {
                                // SAFETY: `r·K + s < K·K`, the taps' length.
                                acc_row[j] = fma(splat(unsafe { *w.add(r * K + s) }), *tap, acc_row[j]);
                            }
                        }
                    }
                }
            }
            let plane_out = geo.out_h * geo.out_w;
            for (c, (p, acc)) in planes.iter().zip(&acc).enumerate() {
                for (o, acc_row) in acc.iter().enumerate().take(geo.out_h - oh) {
                    for (j, &v) in acc_row.iter().enumerate() {
                        let n = cols.saturating_sub(j * LANES).min(LANES);
                        if n > 0 {
                            let at = (oh + o) * geo.out_w + ow + j * LANES;
                            // SAFETY: the output row is in the plane, its lanes `n` in `cols`.
                            unsafe { finish(p, &mut out[c * plane_out..], at, v, n) };
                        }
                    }
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use depthwise_rows_kernel;

/// The general kernel and the epilogue of both, written over a module's vector helpers
/// (sized by [`ACCUMULATORS`] and [`MAX_VECTORS`]).
#[cfg(target_arch = "x86_64")]
macro_rules! depthwise_kernel {
    ($feature:literal) => {
        /// Adds the residual to the `n` lanes of `v`, clamps them, and stores them at output
        /// element `at`.
        ///
        /// # Safety
        /// Elements `at..at + n` are in the output plane.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn finish(p: &crate::depthwise::Plane<'_>, out: &mut [f32], at: usize, v: Vector, n: usize) {
            let mut v = v;
            // SAFETY: forwarded; the residual is shaped like the output.
            unsafe {
                if let Some(res) = p.residual {
                    v = add(v, load_n(res.as_ptr().add(at), n));
                }
                if let Some((lo, hi)) = p.clamp {
                    v = min(max(v, splat(lo)), splat(hi));
                }
                store_n(out.as_mut_ptr().add(at), v, n);
            }
        }

        /// The general kernel on one plane laid out as `layout` in `src` (see
        /// [`crate::depthwise::PaddedPlane`]): columns of up to `MAX_VECTORS` vectors,
        /// each cut into even blocks of at most `ACCUMULATORS / vectors` rows.
        ///
        /// # Safety
        /// The CPU has the module's features; `src` holds `layout.len()` elements, the plane
        /// laid out as `layout` says; `p.w` holds the taps, `out` and `p.residual` an output
        /// plane; `geo.stride.1` is 1 or 2.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn depthwise_plane(
            geo: &crate::conv::Conv2d,
            layout: &crate::depthwise::PaddedPlane,
            src: *const f32,
            p: &crate::depthwise::Plane<'_>,
            out: &mut [f32],
        ) {
            let vectors = geo.out_w.div_ceil(LANES);
            let mut first = 0;
            while first < vectors {
                let v = (vectors - first).min(crate::depthwise::MAX_VECTORS);
                let (ow, most_rows) = (first * LANES, crate::depthwise::ACCUMULATORS / v);
                let cols = (geo.out_w - ow).min(v * LANES);
                let mut blocks = geo.out_h.div_ceil(most_rows);
                let mut oh = 0;
                while oh < geo.out_h {
                    let rows = (geo.out_h - oh).div_ceil(blocks);
                    let at = (oh, ow, cols);
                    let args = (geo, layout, src, p, &mut *out, at);
                    // SAFETY: forwarded; the block lies inside the output plane.
                    unsafe {
                        match (v, rows) {
                            (1, 1) => depthwise_block::<1, 1>(args),
                            (1, 2) => depthwise_block::<2, 1>(args),
                            (1, 3) => depthwise_block::<3, 1>(args),
                            (1, 4) => depthwise_block::<4, 1>(args),
                            (1, 5) => depthwise_block::<5, 1>(args),
                            (1, 6) => depthwise_block::<6, 1>(args),
                            (1, 7) => depthwise_block::<7, 1>(args),
                            (1, 8) => depthwise_block::<8, 1>(args),
                            (1, 9) => depthwise_block::<9, 1>(args),
                            (1, 10) => depthwise_block::<10, 1>(args),
                            (1, 11) => depthwise_block::<11, 1>(args),
                            (1, _) => depthwise_block::<12, 1>(args),
                            (2, 1) => depthwise_block::<1, 2>(args),
                            (2, 2) => depthwise_block::<2, 2>(args),
                            (2, 3) => depthwise_block::<3, 2>(args),
                            (2, 4) => depthwise_block::<4, 2>(args),
                            (2, 5) => depthwise_block::<5, 2>(args),
                            (2, _) => depthwise_block::<6, 2>(args),
                            (_, 1) => depthwise_block::<1, 3>(args),
                            (_, 2) => depthwise_block::<2, 3>(args),
                            (_, 3) => depthwise_block::<3, 3>(args),
                            (_, _) => depthwise_block::<4, 3>(args),
                        }
                    }
                    oh += rows;
                    blocks -= 1;
                }
                first += v;
            }
        }

        /// Output rows `oh..oh + R`, columns `ow..ow + cols` (`cols` in `(V - 1)·LANES + 1 ..=
        /// V·LANES`): every tap of every vector one load from the laid-out plane. Lanes past
        /// `cols` read the next row or the layout's slack and are not stored.
        ///
        /// # Safety
        /// As [`depthwise_plane`], and the block lies inside the output plane.
        #[target_feature(enable = $feature)]
        #[allow(clippy::type_complexity)]
        unsafe fn depthwise_block<const R: usize, const V: usize>(
            (geo, layout, src, p, out, (oh, ow, cols)): (
                &crate::conv::Conv2d,
                &crate::depthwise::PaddedPlane,
                *const f32,
                &crate::depthwise::Plane<'_>,
                &mut [f32],
                (usize, usize, usize),
            ),
        ) {
            let (kh, kw) = geo.kernel;
            let row_step = geo.stride.0 * layout.width;
            let mut acc = [[splat(p.bias); V]; R];
            // SAFETY: a valid lane of output row `oh + i`, column `ow + c` reads tap `(r, s)`
            // at `layout.at((oh + i)·sh + r·dh, ow + c, s·dw)`, inside the plane; a lane past
            // `cols` reads at most `LANES − 1` elements further, inside the slack.
            unsafe {
                let origin = src.add(oh * row_step + ow);
                let mut weights = p.w.as_ptr();
                for r in 0..kh {
                    let row = origin.add(r * geo.dilation.0 * layout.width);
                    for s in 0..kw {
                        let w = splat(*weights);
                        weights = weights.add(1);
                        let tap = row.add(layout.tap(s * geo.dilation.1));
                        for (i, acc_row) in acc.iter_mut().enumerate() {
                            for (j, a) in acc_row.iter_mut().enumerate() {
                                *a = fma(w, load(tap.add(i * row_step + j * LANES)), *a);
                            }
                        }
                    }
                }
                // The epilogue loop is not unrolled and indexes the accumulators: handing it a
                // copy keeps them in registers through the loop above, where it stored every
                // one to the stack after each FMA (1.5× slower, measured).
                let acc = std::hint::black_box(acc);
                for (i, acc_row) in acc.iter().enumerate() {
                    for (j, &a) in acc_row.iter().enumerate() {
                        let n = cols.saturating_sub(j * LANES).min(LANES);
                        finish(p, out, (oh + i) * geo.out_w + ow + j * LANES, a, n);
                    }
                }
            }
        }

        /// Writes input row `src` (`width` values, those the taps reach) into a laid-out
        /// row split at stride 2: value `x` to padded column `c = pad + x`, the even columns
        /// from `dst`, the odd ones from `dst + evens` (see
        /// [`crate::depthwise::PaddedPlane`]).
        ///
        /// # Safety
        /// The CPU has the module's features; `src` holds `width` values and the row at `dst`
        /// the padded row.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn split_row(src: *const f32, width: usize, pad: usize, dst: *mut f32, evens: usize) {
            // Values at even `x` land at `⌊pad/2⌋ + x/2` of the part of `pad`'s parity, odd
            // `x` at `⌈pad/2⌉ + x/2` of the other.
            let (even_part, odd_part) =
                if pad % 2 == 0 { (dst, dst.wrapping_add(evens)) } else { (dst.wrapping_add(evens), dst) };
            let (even_part, odd_part) = (even_part.wrapping_add(pad / 2), odd_part.wrapping_add(pad.div_ceil(2)));
            let mut x = 0;
            // SAFETY: loads stay in `width`, stores in the row's parts (each takes half the
            // values).
            unsafe {
                while x < width {
                    let n = (width - x).min(2 * LANES);
                    let lo = load_n(src.add(x), n.min(LANES));
                    let hi = load_n(src.wrapping_add(x + LANES), n.saturating_sub(LANES));
                    store_n(even_part.add(x / 2), even(lo, hi), n.div_ceil(2));
                    if n > 1 {
                        store_n(odd_part.add(x / 2), odd(lo, hi), n / 2);
                    }
                    x += 2 * LANES;
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use depthwise_kernel;
