//! Direct convolution, for layers with few input channels (a network's first layers, on RGB
//! or grayscale images: there the GEMM form's im2col panel costs more to pack than its
//! multiplies, every packed value being used by one slab or two) and for layers whose output
//! rows fill most of a vector (strided 3×3 convolutions: no panel to pack at all).
//!
//! The weights are packed as for the GEMM form (slabs of `MR` output channels, k-major). For
//! one output row and one vector of pixels, each input row a tap row reads is loaded once,
//! with its padding masked out of the loads; every tap's window is made from those vectors in
//! registers (lane shifts; even and odd lanes at stride 2) and multiplied into the slab's `MR`
//! accumulators. The products are summed in the GEMM form's order (bias, then `k`), so both
//! forms give the same bits: a CPU without the ISA runs the GEMM form.
//!
//! AVX-512 only: with AVX2's 16 registers the slab's accumulators and the windows do not fit
//! (measured on AVX2: strided 3×3 layers 36-41% of peak against the GEMM form's 65-74%, first
//! layers no better than the GEMM form).

use crate::conv::{Conv2d, ConvEpilogue, block_rows};
use crate::{Isa, share};

/// Input channels up to which the direct form replaces the GEMM form on any row width.
const MAX_CHANNELS: usize = 8;
/// Output row width from which it does on any channel count: 12 of 16 lanes busy or more
/// (measured: 3×3/2 64→128 to 28 wide 75% → 83% of peak, 128→256 to 14 wide 77% → 82%;
/// 256→512 to 7 wide 66% → 42%).
const MIN_WIDTH: usize = 12;

/// Whether the direct form computes `geo`: ungrouped, at most [`MAX_CHANNELS`] input channels
/// or output rows at least [`MIN_WIDTH`] wide, taps 3 or 5 wide at column stride 1, 3, 5 or 7
/// wide at column stride 2, undilated along rows (any kernel height, row stride and row
/// dilation).
pub(crate) fn applies(geo: &Conv2d) -> bool {
    let small = |n: usize| n <= i32::MAX as usize;
    geo.groups == 1
        && (geo.in_channels <= MAX_CHANNELS || geo.out_w >= MIN_WIDTH)
        && geo.dilation.1 == 1
        && matches!((geo.kernel.1, geo.stride.1), (3 | 5, 1) | (3 | 5 | 7, 2))
        && [geo.in_h, geo.in_w, geo.out_h, geo.out_w, geo.pad.0, geo.pad.1].into_iter().all(small)
}

/// Whether the direct form has a variant for `isa` (weights packed for `isa` may run it).
pub(crate) fn has_variant(isa: Isa) -> bool {
    cfg!(target_arch = "x86_64") && isa == Isa::Avx512
}

/// Whether this CPU runs the direct form for `isa` (otherwise the GEMM form does).
pub(crate) fn available(isa: Isa) -> bool {
    has_variant(isa) && isa.is_available()
}

/// One output row of one image for one slab: the image's input planes, the slab's packed
/// weights (`depth × MR`), `rows` output channels' bias and residual rows (`pixels` apart).
pub(crate) struct SlabRow<'a> {
    pub x: &'a [f32],
    pub w: &'a [f32],
    pub oy: usize,
    pub rows: usize,
    pub bias: Option<&'a [f32]>,
    pub residual: Option<&'a [f32]>,
    pub clamp: Option<(f32, f32)>,
}

/// The direct form of [`crate::conv::conv2d_share`] for an ISA this CPU has; the caller
/// checked every length. Items are (image, output row, slab), slabs innermost, so the input
/// rows one output row reads are read for every slab while in cache.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_share(
    isa: Isa,
    geo: &Conv2d,
    x: &[f32],
    packed_w: &[f32],
    out: &mut [f32],
    epilogue: ConvEpilogue<'_>,
    (task, tasks): (usize, usize),
) {
    let mr = block_rows(isa);
    let (k, slabs) = (geo.depth().expect("checked"), geo.out_channels.div_ceil(mr));
    let (pixels, image_in) = (geo.out_h * geo.out_w, geo.in_channels * geo.in_h * geo.in_w);
    let (lo, hi) = share(geo.batch * geo.out_h * slabs, tasks, task);
    for item in lo..hi {
        let (row_item, slab) = (item / slabs, item % slabs);
        let (n, oy) = (row_item / geo.out_h, row_item % geo.out_h);
        let oc = slab * mr;
        let at = (n * geo.out_channels + oc) * pixels + oy * geo.out_w;
        let job = SlabRow {
            x: &x[n * image_in..(n + 1) * image_in],
            w: &packed_w[slab * k * mr..(slab + 1) * k * mr],
            oy,
            rows: (geo.out_channels - oc).min(mr),
            bias: epilogue.bias.map(|b| &b[oc..]),
            residual: epilogue.residual.map(|r| &r[at..]),
            clamp: epilogue.clamp,
        };
        #[cfg(target_arch = "x86_64")]
        {
            use crate::tile::x86::avx512;
            let out = &mut out[at..];
            // SAFETY: `applies` and `available` hold (the caller chose this form); the slices
            // hold the image, the slab and, from `at`, `rows` output (and residual) rows of
            // `out_w` values `pixels` apart, the last ending inside the tensor.
            match isa {
                Isa::Avx512 => unsafe { avx512::direct_row(geo, &job, out) },
                Isa::Avx2Fma | Isa::Scalar => unreachable!("the direct form runs on AVX-512 only"),
            }
            crate::conv::activate_rows(isa, epilogue.activation, out, (0, job.rows, geo.out_w, pixels));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (job, &mut *out);
    }
}

/// The direct kernel, written once over a module's vector helpers (see [`crate::tile`]).
#[cfg(target_arch = "x86_64")]
macro_rules! direct_kernel {
    ($feature:literal) => {
        /// One output row of one slab.
        ///
        /// # Safety
        /// The CPU has the module's features; [`crate::direct::applies`] holds; `job.x` holds
        /// the image's planes, `job.w` the slab's `depth × MR` weights, `job.bias` `rows`
        /// values; `out` (and the residual) hold `rows` rows of `out_w` values `out_h·out_w`
        /// apart.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn direct_row(geo: &crate::conv::Conv2d, job: &crate::direct::SlabRow<'_>, out: &mut [f32]) {
            // SAFETY: forwarded.
            unsafe {
                match (geo.kernel.1, geo.stride.1) {
                    (3, 1) => direct_row_rows::<3, 1>(geo, job, out),
                    (5, 1) => direct_row_rows::<5, 1>(geo, job, out),
                    (3, _) => direct_row_rows::<3, 2>(geo, job, out),
                    (5, _) => direct_row_rows::<5, 2>(geo, job, out),
                    _ => direct_row_rows::<7, 2>(geo, job, out),
                }
            }
        }

        /// [`direct_row`] with as many accumulators as the slab's rows need, in thirds of
        /// `MR`: a layer with few output channels (or a last slab with few) would otherwise
        /// multiply padding rows.
        ///
        /// # Safety
        /// As [`direct_row_taps`].
        #[target_feature(enable = $feature)]
        unsafe fn direct_row_rows<const KW: usize, const S: usize>(
            geo: &crate::conv::Conv2d,
            job: &crate::direct::SlabRow<'_>,
            out: &mut [f32],
        ) {
            const THIRD: usize = MR / 3;
            // SAFETY: forwarded; `job.rows` ≤ the accumulators.
            unsafe {
                match job.rows.div_ceil(THIRD) {
                    1 => direct_row_taps::<KW, S, THIRD>(geo, job, out),
                    2 => direct_row_taps::<KW, S, { 2 * THIRD }>(geo, job, out),
                    _ => direct_row_taps::<KW, S, MR>(geo, job, out),
                }
            }
        }

        /// [`direct_row`] with taps `KW` wide at column stride `S`, `R` accumulators. Input row `y` is read as
        /// `S + 1` vectors from column `ow·S − pad.1`: at stride 1 tap `s` is lanes
        /// `s..s + LANES` of the first two; at stride 2, the even (or odd) lanes of the first
        /// two followed by those of the third, shifted by `s / 2`.
        ///
        /// # Safety
        /// As [`direct_row`], with `geo.kernel.1 == KW`, `geo.stride.1 == S` and
        /// `job.rows ≤ R ≤ MR`.
        #[target_feature(enable = $feature)]
        unsafe fn direct_row_taps<const KW: usize, const S: usize, const R: usize>(
            geo: &crate::conv::Conv2d,
            job: &crate::direct::SlabRow<'_>,
            out: &mut [f32],
        ) {
            let (kh, plane, pixels) = (geo.kernel.0, geo.in_h * geo.in_w, geo.out_h * geo.out_w);
            let mut bias = [0.0f32; R];
            if let Some(b) = job.bias {
                bias[..job.rows].copy_from_slice(&b[..job.rows]);
            }
            for ow in (0..geo.out_w).step_by(LANES) {
                let n = (geo.out_w - ow).min(LANES);
                let first = (ow * S) as isize - geo.pad.1 as isize;
                let mut bits = [0u32; 3];
                for (j, b) in bits.iter_mut().enumerate() {
                    *b = crate::winograd::window(first + (j * LANES) as isize, geo.in_w);
                }
                // The GEMM form's order: zero plus the bias, then the products by `k`.
                let mut acc = [zero(); R];
                for (a, &b) in acc.iter_mut().zip(&bias) {
                    *a = add(zero(), splat(b));
                }
                let mut w = job.w.as_ptr();
                for c in 0..geo.in_channels {
                    for r in 0..kh {
                        let y = (job.oy * geo.stride.0 + r * geo.dilation.0) as isize - geo.pad.0 as isize;
                        let mut x = [zero(); 3];
                        if (0..geo.in_h as isize).contains(&y) {
                            let row =
                                job.x.as_ptr().wrapping_offset((c * plane) as isize + y * geo.in_w as isize + first);
                            for (j, v) in x.iter_mut().enumerate().take(S + 1) {
                                // SAFETY: row `y` of plane `c` is in the image and `bits[j]`
                                // sets only the lanes whose column is in `0..in_w`.
                                *v = unsafe { load_bits(row.wrapping_add(j * LANES), bits[j]) };
                            }
                        }
                        let (even_lanes, odd_lanes) = if S == 2 {
                            ((even(x[0], x[1]), even(x[2], zero())), (odd(x[0], x[1]), odd(x[2], zero())))
                        } else {
                            ((x[0], x[1]), (x[0], x[1]))
                        };
                        for s in 0..KW {
                            let tap = if S == 1 {
                                shifted(x[0], x[1], s)
                            } else if s % 2 == 0 {
                                shifted(even_lanes.0, even_lanes.1, s / 2)
                            } else {
                                shifted(odd_lanes.0, odd_lanes.1, s / 2)
                            };
                            for (m, a) in acc.iter_mut().enumerate() {
                                // SAFETY: `w` walks the slab's `depth × MR` weights.
                                *a = fma(splat(unsafe { *w.add(m) }), tap, *a);
                            }
                            // SAFETY: at most one past the slab's end.
                            w = unsafe { w.add(MR) };
                        }
                    }
                }
                let (lo, hi) = job.clamp.unwrap_or((0.0, 0.0));
                for (m, &a) in acc.iter().enumerate().take(job.rows) {
                    let at = m * pixels + ow;
                    let mut v = a;
                    // SAFETY: row `m < rows` of the output (and residual), lanes `ow..ow + n`.
                    unsafe {
                        if let Some(res) = job.residual {
                            v = add(v, load_n(res.as_ptr().add(at), n));
                        }
                        if job.clamp.is_some() {
                            v = min(max(v, splat(lo)), splat(hi));
                        }
                        store_n(out.as_mut_ptr().add(at), v, n);
                    }
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use direct_kernel;
