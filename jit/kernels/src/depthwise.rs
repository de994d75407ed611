//! Depthwise convolution (`groups == C == M`): each channel plane on its own, vectors along
//! the output row. Every kernel accumulates an output's taps in the same order (tap rows top to
//! bottom, each left to right, after the bias), taps in the padding multiplying a zero, so
//! all of them give the same bits.
//!
//! - **Row kernel** (3×3 or 5×5 taps, strides (1, 1) or (2, 2), undilated: the depthwise
//!   layers of MobileNets and EfficientNets): a block of output rows loads each input row it
//!   reads once, with the padding masked out of the loads, and makes every tap's window from
//!   those vectors in registers (lane shifts; even and odd lanes at stride 2). Small planes pay
//!   no copy and no per-tap load.
//! - **General kernel** (any taps, strides, dilations): a plane that reads padding is copied
//!   with its zero border into the task's scratch; vectors along the row at strides 1 and 2,
//!   scalar code at other strides.

use crate::conv::{Conv2d, ConvEpilogue};
use crate::{Isa, KernelError, share};

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

/// Scratch elements one task needs: the padded plane the general kernel reads, if any.
pub(crate) fn scratch_len(geo: &Conv2d) -> Result<usize, KernelError> {
    if row_kernel_fits(geo) || !geo.reads_padding() {
        return Ok(0);
    }
    let (ph, pw) = geo.padded_extent()?;
    ph.checked_mul(pw).ok_or(KernelError::Overflow("scratch"))
}

/// How one plane is computed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PlaneKernel {
    Rows,
    General,
    Scalar,
}

impl PlaneKernel {
    fn choose(isa: Isa, geo: &Conv2d) -> PlaneKernel {
        let vectors = cfg!(target_arch = "x86_64") && isa != Isa::Scalar && isa.is_available();
        if !vectors {
            PlaneKernel::Scalar
        } else if row_kernel_fits(geo) {
            PlaneKernel::Rows
        } else if matches!(geo.stride.1, 1 | 2) {
            PlaneKernel::General
        } else {
            PlaneKernel::Scalar
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
    // The general kernel reads a plane with padding from the scratch plane, whose border is
    // zeroed once: it then reads only memory it owns.
    let padded = kernel == PlaneKernel::General && geo.reads_padding();
    let (ph, pw) = geo.padded_extent().expect("checked");
    let plane_geo = if padded { Conv2d { in_h: ph, in_w: pw, pad: (0, 0), ..*geo } } else { *geo };
    let (lo, hi) = share(geo.batch * geo.in_channels, tasks, task);
    if padded && lo < hi {
        scratch[..ph * pw].fill(0.0);
    }
    // A function, not a closure: its planes borrow the input or the scratch plane alike.
    fn plane<'p>(geo: &Conv2d, w: &'p [f32], epilogue: ConvEpilogue<'p>, item: usize, x: &'p [f32]) -> Plane<'p> {
        let (ch, taps, plane_out) = (item % geo.in_channels, geo.kernel.0 * geo.kernel.1, geo.out_h * geo.out_w);
        Plane {
            x,
            w: &w[ch * taps..(ch + 1) * taps],
            bias: epilogue.bias.map_or(0.0, |b| b[ch]),
            residual: epilogue.residual.map(|r| &r[item * plane_out..(item + 1) * plane_out]),
            clamp: epilogue.clamp,
        }
    }
    let input = |item: usize| &x[item * plane_in..(item + 1) * plane_in];
    let mut item = lo;
    while item < hi {
        // The row kernel takes `ROW_KERNEL_PLANES` consecutive planes at once: their
        // accumulator chains interleave where one narrow plane's would wait on FMA latency.
        let n = if kernel == PlaneKernel::Rows && hi - item >= ROW_KERNEL_PLANES { ROW_KERNEL_PLANES } else { 1 };
        let outputs = &mut out[item * plane_out..(item + n) * plane_out];
        if n == ROW_KERNEL_PLANES {
            let planes: [Plane<'_>; ROW_KERNEL_PLANES] =
                std::array::from_fn(|i| plane(geo, w, epilogue, item + i, input(item + i)));
            run_planes(kernel, isa, geo, &planes, outputs);
        } else if padded {
            copy_into_padded(geo, input(item), (ph, pw), &mut scratch[..ph * pw]);
            run_planes(kernel, isa, &plane_geo, &[plane(geo, w, epilogue, item, &scratch[..ph * pw])], outputs);
        } else {
            run_planes(kernel, isa, geo, &[plane(geo, w, epilogue, item, input(item))], outputs);
        }
        item += n;
    }
}

/// Copies the input plane's rows and columns that the taps reach into the `ph × pw` padded
/// plane `dst` (whose border is already zero).
fn copy_into_padded(geo: &Conv2d, src: &[f32], (ph, pw): (usize, usize), dst: &mut [f32]) {
    let (pt, pl) = geo.pad;
    let width = geo.in_w.min(pw.saturating_sub(pl));
    if width == 0 {
        return;
    }
    for y in pt..ph.min(pt + geo.in_h) {
        let from = (y - pt) * geo.in_w;
        dst[y * pw + pl..y * pw + pl + width].copy_from_slice(&src[from..from + width]);
    }
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

/// Consecutive planes (`out` holds their output planes one after the other): several only
/// for the row kernel.
fn run_planes(kernel: PlaneKernel, isa: Isa, geo: &Conv2d, planes: &[Plane<'_>], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::tile::x86::{avx2, avx512};
        // SAFETY: `choose` picked a vector kernel only for an ISA this CPU has and the shapes
        // that kernel takes; each plane's `x` holds the input plane `geo` describes (the padded
        // copy when the general kernel would read padding), `w` the taps, and `out` and the
        // residuals the output planes. The kernels read only elements inside them (masked
        // loads).
        match (kernel, isa) {
            (PlaneKernel::Rows, Isa::Avx512) => return unsafe { avx512::depthwise_rows(geo, planes, out) },
            (PlaneKernel::Rows, Isa::Avx2Fma) => return unsafe { avx2::depthwise_rows(geo, planes, out) },
            (PlaneKernel::General, Isa::Avx512) => return unsafe { avx512::depthwise_plane(geo, &planes[0], out) },
            (PlaneKernel::General, Isa::Avx2Fma) => return unsafe { avx2::depthwise_plane(geo, &planes[0], out) },
            _ => {}
        }
    }
    let _ = kernel;
    for (p, out) in planes.iter().zip(out.chunks_exact_mut(geo.out_h * geo.out_w)) {
        scalar_plane(geo, p, out);
    }
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

/// The vector depthwise kernels, written once over a module's vector helpers (see
/// [`crate::tile`]; `DW_ROWS` and `DW_VECTORS` size the row kernel's block).
///
/// Each output vector has its own accumulator and a block holds several: a single chain of
/// FMAs per output vector would wait out the FMA latency at every tap.
#[cfg(target_arch = "x86_64")]
macro_rules! depthwise_kernel {
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

        /// The general kernel: blocks of `R` output rows × `V` vectors along a row, `R·V` ≤ 4,
        /// every tap loaded from the (padded) plane.
        ///
        /// # Safety
        /// The CPU has the module's features; the plane's slices hold what `geo` says, no tap
        /// reads padding (`pad == (0, 0)` and every tap inside the plane) and `geo.stride.1`
        /// is 1 or 2.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn depthwise_plane(
            geo: &crate::conv::Conv2d,
            p: &crate::depthwise::Plane<'_>,
            out: &mut [f32],
        ) {
            let mut ow = 0;
            while ow < geo.out_w {
                let cols = (geo.out_w - ow).min(4 * LANES);
                let vectors = cols.div_ceil(LANES);
                let rows = 4 / vectors;
                let mut oh = 0;
                // SAFETY: forwarded; each block stays inside the output plane.
                unsafe {
                    while oh + rows <= geo.out_h {
                        match (rows, vectors) {
                            (4, 1) => depthwise_block::<4, 1>(geo, p, out, (oh, ow, cols)),
                            (2, 2) => depthwise_block::<2, 2>(geo, p, out, (oh, ow, cols)),
                            (1, 3) => depthwise_block::<1, 3>(geo, p, out, (oh, ow, cols)),
                            _ => depthwise_block::<1, 4>(geo, p, out, (oh, ow, cols)),
                        }
                        oh += rows;
                    }
                    while oh < geo.out_h {
                        match vectors {
                            1 => depthwise_block::<1, 1>(geo, p, out, (oh, ow, cols)),
                            _ => depthwise_block::<1, 2>(geo, p, out, (oh, ow, cols)),
                        }
                        oh += 1;
                    }
                }
                ow += cols;
            }
        }

        /// Output rows `oh..oh + R`, columns `ow..ow + cols` (`cols` in `(V - 1)·LANES + 1 ..=
        /// V·LANES`).
        ///
        /// # Safety
        /// As [`depthwise_plane`], and the block lies inside the output plane.
        #[target_feature(enable = $feature)]
        unsafe fn depthwise_block<const R: usize, const V: usize>(
            geo: &crate::conv::Conv2d,
            p: &crate::depthwise::Plane<'_>,
            out: &mut [f32],
            (oh, ow, cols): (usize, usize, usize),
        ) {
            let (kh, kw) = geo.kernel;
            let (sh, sw) = geo.stride;
            let (dh, dw) = geo.dilation;
            let last = cols - (V - 1) * LANES;
            let lanes = |j: usize| if j == V - 1 { last } else { LANES };
            let mut acc = [[splat(p.bias); V]; R];
            // SAFETY: for output column `c` of the block the tap at `s` reads input column
            // `c * sw + s * dw <= (out_w - 1) * sw + (kw - 1) * dw < in_w`, row likewise;
            // stride 2 reads the `2n - 1` values from the vector's first tap, the last of
            // which is that tap.
            unsafe {
                let mut weights = p.w.as_ptr();
                for r in 0..kh {
                    let rows: [*const f32; R] =
                        std::array::from_fn(|i| p.x.as_ptr().add(((oh + i) * sh + r * dh) * geo.in_w + ow * sw));
                    for s in 0..kw {
                        let w = splat(*weights);
                        weights = weights.add(1);
                        for (row, acc_row) in rows.iter().zip(acc.iter_mut()) {
                            let row = row.add(s * dw);
                            for (j, a) in acc_row.iter_mut().enumerate() {
                                let (at, n) = (row.add(j * LANES * sw), lanes(j));
                                let xv = if sw == 1 {
                                    if n == LANES { load(at) } else { load_n(at, n) }
                                } else {
                                    let m = 2 * n - 1;
                                    even(load_n(at, m.min(LANES)), load_n(at.add(LANES), m.saturating_sub(LANES)))
                                };
                                *a = fma(w, xv, *a);
                            }
                        }
                    }
                }
                for (i, acc_row) in acc.iter().enumerate() {
                    for (j, &a) in acc_row.iter().enumerate() {
                        finish(p, out, (oh + i) * geo.out_w + ow + j * LANES, a, lanes(j));
                    }
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use depthwise_kernel;
