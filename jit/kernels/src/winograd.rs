//! Winograd F(2×2, 3×3) for 3×3, stride-1, undilated, ungrouped convolutions: each 2×2 block
//! of outputs (a *tile*) is computed from a 4×4 input patch with 16 products per channel pair
//! instead of 36, so the multiplies drop 2.25× (Lavin & Gray, "Fast Algorithms for
//! Convolutional Neural Networks", 2016). F(2, 3)'s transforms hold only 0, ±1 and ±½, so it
//! keeps the float rule where the larger tiles (F(4, 3), F(6, 3)) lose digits.
//!
//! With `d` a patch, `g` a filter and `m` the 16 products:
//! - the filters are transformed once, at compile time: `U = G·g·Gᵀ` (16 values per output
//!   and input channel pair), packed as 16 matrices of slabs of `MR` output channels, k-major;
//! - per block of [`panel_width`] tiles of one image, every channel's patches are transformed,
//!   `V = Bᵀ·d·B`, into 16 panels of `C × NR` in the task's scratch (lanes = tiles of one
//!   tile row, read as the even and odd lanes of contiguous masked loads, so the zero padding
//!   is never materialised);
//! - for each slab of output channels, 16 microkernel calls `M_ξ = U_ξ · V_ξ` fill a
//!   `16 × MR × NR` scratch, and `Y = Aᵀ·M·A` plus bias, residual and clamp writes the
//!   slab's 2×2 blocks (masked at the output's edges).
//!
//! Every variant (AVX-512, AVX2, scalar) performs the same operations per element in the same
//! order, so the result does not depend on the ISA, the block a tile falls in or the task.

use crate::conv::{Conv2d, ConvEpilogue};
use crate::tile::{self, Tile, block_rows, panel_width};
use crate::{Isa, KernelError, share};

/// Transformed values per tile: a 4×4 patch.
const XI: usize = 16;

/// Whether a convolution runs as Winograd F(2×2, 3×3): 3×3, stride 1, undilated, ungrouped,
/// and wide enough in channels that the GEMMs outweigh the transforms. Extents and padding
/// stay below `i32::MAX`, so the signed column arithmetic of the padding cannot overflow.
pub(crate) fn applies(geo: &Conv2d) -> bool {
    let fits = |v: usize| v <= i32::MAX as usize;
    geo.kernel == (3, 3)
        && geo.stride == (1, 1)
        && geo.dilation == (1, 1)
        && geo.groups == 1
        && geo.in_channels >= 16
        && geo.out_channels >= 16
        && [geo.in_h, geo.in_w, geo.out_h, geo.out_w, geo.pad.0, geo.pad.1].into_iter().all(fits)
}

fn mul(a: usize, b: usize, what: &'static str) -> Result<usize, KernelError> {
    a.checked_mul(b).ok_or(KernelError::Overflow(what))
}

fn tiles(geo: &Conv2d) -> (usize, usize) {
    (geo.out_h.div_ceil(2), geo.out_w.div_ceil(2))
}

fn slabs(geo: &Conv2d, isa: Isa) -> usize {
    geo.out_channels.div_ceil(block_rows(isa))
}

/// Elements of the transformed, packed filters: 16 × slabs × C × MR.
pub(crate) fn packed_weights_len(geo: &Conv2d, isa: Isa) -> Result<usize, KernelError> {
    mul(
        mul(XI, slabs(geo, isa), "packed weights")?,
        mul(geo.in_channels, block_rows(isa), "packed weights")?,
        "packed weights",
    )
}

/// Scratch per task: the 16 transformed input panels (C × NR each) and the slab's 16 product
/// blocks (MR × NR each).
pub(crate) fn scratch_len(geo: &Conv2d, isa: Isa) -> Result<usize, KernelError> {
    let nr = panel_width(isa);
    let panels = mul(mul(XI, geo.in_channels, "scratch")?, nr, "scratch")?;
    panels.checked_add(XI * block_rows(isa) * nr).ok_or(KernelError::Overflow("scratch"))
}

/// `U = G·g·Gᵀ` of one 3×3 filter, `G = [[1, 0, 0], [½, ½, ½], [½, −½, ½], [0, 0, 1]]`,
/// computed in f64 and rounded once.
fn transform_filter(g: &[f32]) -> [f32; XI] {
    let g = |r: usize, s: usize| f64::from(g[r * 3 + s]);
    let rows: [[f64; 3]; 4] = std::array::from_fn(|i| {
        std::array::from_fn(|s| match i {
            0 => g(0, s),
            1 => (g(0, s) + g(1, s) + g(2, s)) / 2.0,
            2 => (g(0, s) - g(1, s) + g(2, s)) / 2.0,
            _ => g(2, s),
        })
    });
    std::array::from_fn(|xi| {
        let t = rows[xi / 4];
        (match xi % 4 {
            0 => t[0],
            1 => (t[0] + t[1] + t[2]) / 2.0,
            2 => (t[0] - t[1] + t[2]) / 2.0,
            _ => t[2],
        }) as f32
    })
}

/// Packs `[K, C, 3, 3]` filters: for each ξ, slabs of `MR` output channels (the last padded
/// with zeros), each `C × MR`, k-major. The caller checked the lengths.
pub(crate) fn pack_weights(geo: &Conv2d, isa: Isa, w: &[f32], packed: &mut [f32]) {
    let (mr, c, slabs) = (block_rows(isa), geo.in_channels, slabs(geo, isa));
    assert!(mr <= 12, "every ISA's slabs are at most 12 rows");
    // Slab by slab and channel by channel, so the 16 destinations are written in order.
    for s in 0..slabs {
        for ci in 0..c {
            // The slab's transformed filters, zero past the last output channel (MR <= 12).
            let mut u = [[0.0f32; XI]; 12];
            for (k, filter) in (s * mr..geo.out_channels.min((s + 1) * mr)).zip(u.iter_mut()) {
                *filter = transform_filter(&w[(k * c + ci) * 9..(k * c + ci + 1) * 9]);
            }
            for xi in 0..XI {
                let at = ((xi * slabs + s) * c + ci) * mr;
                for (dst, filter) in packed[at..at + mr].iter_mut().zip(&u) {
                    *dst = filter[xi];
                }
            }
        }
    }
}

/// A block of `cols` consecutive tiles of one image from tile `t0` (row-major over the
/// image's `tw`-wide grid of tiles). The transforms walk it in *segments*: runs of at most
/// `LANES` tiles within one tile row, whose patches are contiguous input rows.
#[derive(Clone, Copy)]
pub(crate) struct Block {
    pub t0: usize,
    pub cols: usize,
    pub tw: usize,
}

impl Block {
    /// The segments `(ty, tx, n, col)`: `n` tiles from `(ty, tx)`, panel columns `col..col + n`.
    pub(crate) fn segments(self, lanes: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let end = self.t0 + self.cols;
        let mut t = self.t0;
        std::iter::from_fn(move || {
            (t < end).then(|| {
                let (ty, tx) = (t / self.tw, t % self.tw);
                let n = (self.tw - tx).min(lanes).min(end - t);
                let segment = (ty, tx, n, t - self.t0);
                t += n;
                segment
            })
        })
    }
}

/// Bit `e` (for `e < 32`) set when `start + e` lies in `0..len`: the lanes of a vector at
/// element `start` of a `len`-long row that are inside it.
pub(crate) fn window(start: isize, len: usize) -> u32 {
    let lo = (-start).clamp(0, 32) as u32;
    let hi = (len as isize).saturating_sub(start).clamp(0, 32) as u32;
    let below = |n: u32| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
    below(hi) & !below(lo)
}

/// One slab's output stage: `rows` output channels from `oc`, their planes at `out` (and
/// `residual`) `pixels` apart.
pub(crate) struct SlabOut {
    pub rows: usize,
    pub bias: *const f32,
    pub residual: *const f32,
    pub out: *mut f32,
    pub pixels: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub clamp: Option<(f32, f32)>,
}

/// The Winograd form of [`crate::conv::conv2d_share`]; the caller checked every length and
/// that [`applies`] holds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_share(
    isa: Isa,
    geo: &Conv2d,
    x: &[f32],
    packed_w: &[f32],
    out: &mut [f32],
    epilogue: ConvEpilogue<'_>,
    scratch: &mut [f32],
    (task, tasks): (usize, usize),
) {
    let (mr, nr, c) = (block_rows(isa), panel_width(isa), geo.in_channels);
    let (th, tw) = tiles(geo);
    let (blocks, slabs) = ((th * tw).div_ceil(nr), slabs(geo, isa));
    let (plane_in, pixels) = (geo.in_h * geo.in_w, geo.out_h * geo.out_w);
    let block_items = geo.batch * blocks;
    let slab_parts = crate::conv::slab_parts(block_items, slabs, tasks);
    let (lo, hi) = share(block_items * slab_parts, tasks, task);
    let (panels, products) = scratch.split_at_mut(XI * c * nr);
    let products = &mut products[..XI * mr * nr];
    let mut transformed: Option<usize> = None;
    let mut block = Block { t0: 0, cols: 0, tw };
    for item in lo..hi {
        let (block_item, part) = (item / slab_parts, item % slab_parts);
        let (n, b) = (block_item / blocks, block_item % blocks);
        if transformed != Some(block_item) {
            block = Block { t0: b * nr, cols: (th * tw - b * nr).min(nr), tw };
            let image = &x[n * c * plane_in..(n + 1) * c * plane_in];
            transform_input(isa, geo, image, block, panels);
            transformed = Some(block_item);
        }
        let (s_lo, s_hi) = share(slabs, slab_parts, part);
        for s in s_lo..s_hi {
            let oc = s * mr;
            let rows = (geo.out_channels - oc).min(mr);
            for xi in 0..XI {
                let t = Tile {
                    k: c,
                    a: packed_w[(xi * slabs + s) * c * mr..].as_ptr(),
                    lda: 0,
                    packed_a: true,
                    b: panels[xi * c * nr..].as_ptr(),
                    ldb: nr,
                    c: products[xi * mr * nr..].as_mut_ptr(),
                    ldc: nr,
                    rows,
                    cols: block.cols,
                    row_bias: std::ptr::null(),
                    col_bias: std::ptr::null(),
                    residual: std::ptr::null(),
                    ldr: 0,
                    clamp: false,
                    lo: 0.0,
                    hi: 0.0,
                };
                // SAFETY: slab `s` of matrix ξ holds C × MR packed values, panel ξ C × NR,
                // and product block ξ MR × NR.
                unsafe { tile::run(isa, &t) };
            }
            let at = (n * geo.out_channels + oc) * pixels;
            let slab = SlabOut {
                rows,
                bias: epilogue.bias.map_or(std::ptr::null(), |b| b[oc..].as_ptr()),
                residual: epilogue.residual.map_or(std::ptr::null(), |r| r[at..].as_ptr()),
                out: out[at..].as_mut_ptr(),
                pixels,
                out_h: geo.out_h,
                out_w: geo.out_w,
                clamp: epilogue.clamp,
            };
            // SAFETY: the slab's `rows` output (and residual) planes start at `at` (checked
            // lengths); the stores stay inside them.
            unsafe { transform_output(isa, block, products, nr, mr, &slab) };
        }
    }
}

/// `x` holds the image's `geo.in_channels` planes and `panels` 16 × C × NR values (both
/// checked by the caller of [`conv_share`]).
fn transform_input(isa: Isa, geo: &Conv2d, x: &[f32], block: Block, panels: &mut [f32]) {
    let nr = panel_width(isa);
    assert!(x.len() >= geo.in_channels * geo.in_h * geo.in_w && panels.len() >= XI * geo.in_channels * nr);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the lengths are asserted, and the CPU has the features.
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            return unsafe { tile::x86::avx512::winograd_input(geo, x, block, panels, nr) };
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            return unsafe { tile::x86::avx2::winograd_input(geo, x, block, panels, nr) };
        }
    }
    // SAFETY: the lengths are asserted.
    unsafe { scalar::winograd_input(geo, x, block, panels, nr) }
}

/// # Safety
/// `products` holds 16 × MR × NR values (the first `slab.rows` rows and `block.cols` columns
/// written), and `slab`'s planes hold what it says.
unsafe fn transform_output(isa: Isa, block: Block, products: &[f32], nr: usize, mr: usize, slab: &SlabOut) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: forwarded, on a CPU with the features.
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            return unsafe { tile::x86::avx512::winograd_output(block, products, nr, mr, slab) };
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            return unsafe { tile::x86::avx2::winograd_output(block, products, nr, mr, slab) };
        }
    }
    // SAFETY: forwarded.
    unsafe { scalar::winograd_output(block, products, nr, mr, slab) }
}

/// One lane at a time: the reference the vector variants match bit for bit, and the path on
/// CPUs without them.
mod scalar {
    pub(crate) const LANES: usize = 1;

    pub(crate) fn zero() -> f32 {
        0.0
    }
    pub(crate) fn add(a: f32, b: f32) -> f32 {
        a + b
    }
    pub(crate) fn sub(a: f32, b: f32) -> f32 {
        a - b
    }
    pub(crate) fn splat(x: f32) -> f32 {
        x
    }
    pub(crate) fn max(a: f32, b: f32) -> f32 {
        a.max(b)
    }
    pub(crate) fn min(a: f32, b: f32) -> f32 {
        a.min(b)
    }
    /// With one lane, the even and odd lanes of `a ++ b` are `a` and `b`.
    pub(crate) fn even(a: f32, _: f32) -> f32 {
        a
    }
    pub(crate) fn odd(_: f32, b: f32) -> f32 {
        b
    }
    /// With one lane, `a` and `b` interleaved are `a` then `b`.
    pub(crate) fn zip_lo(a: f32, _: f32) -> f32 {
        a
    }
    pub(crate) fn zip_hi(_: f32, b: f32) -> f32 {
        b
    }
    pub(crate) unsafe fn load_n(p: *const f32, n: usize) -> f32 {
        if n == 0 { 0.0 } else { unsafe { *p } }
    }
    pub(crate) unsafe fn store_n(p: *mut f32, v: f32, n: usize) {
        if n > 0 {
            unsafe { *p = v }
        }
    }
    pub(crate) unsafe fn load_bits(p: *const f32, bits: u32) -> f32 {
        if bits & 1 == 0 { 0.0 } else { unsafe { *p } }
    }
    pub(crate) unsafe fn store_bits(p: *mut f32, bits: u32, v: f32) {
        if bits & 1 != 0 {
            unsafe { *p = v }
        }
    }

    crate::winograd::winograd_kernel!();
}

/// The transforms, written once over a module's vector helpers (`LANES`, `zero`, `add`,
/// `sub`, `splat`, `max`, `min`, `even`, `odd`, `zip_lo`, `zip_hi`, `load_n`, `store_n`,
/// `load_bits`, `store_bits`), with the attributes given. Lane `l` of a segment is tile
/// `tx + l`, whose patch columns are input columns `2(tx + l) − pl + j`: the even and odd
/// lanes of two contiguous vectors.
macro_rules! winograd_kernel {
    ($(#[$attr:meta])*) => {
        /// `V = Bᵀ·d·B` of every channel's patches of the block, into `panels[ξ][c][column]`,
        /// `Bᵀ = [[1, 0, −1, 0], [0, 1, 1, 0], [0, −1, 1, 0], [0, 1, 0, −1]]`; columns past
        /// the block's tiles are zero.
        ///
        /// # Safety
        /// The CPU has the module's features; `x` holds `geo.in_channels` planes and `panels`
        /// 16 × C × `nr` values.
        $(#[$attr])*
        pub(crate) unsafe fn winograd_input(
            geo: &crate::conv::Conv2d,
            x: &[f32],
            block: crate::winograd::Block,
            panels: &mut [f32],
            nr: usize,
        ) {
            let (c, plane, w) = (geo.in_channels, geo.in_h * geo.in_w, geo.in_w);
            let (pt, pl) = (geo.pad.0 as isize, geo.pad.1 as isize);
            if block.cols < nr {
                panels.chunks_exact_mut(nr).for_each(|row| row[block.cols..].fill(0.0));
            }
            // The four vectors of a patch row: from its first column and from two past it.
            let offsets = [0, LANES as isize, 2, 2 + LANES as isize];
            for ci in 0..c {
                let base = x[ci * plane..].as_ptr();
                for (ty, tx, n, col) in block.segments(LANES) {
                    let x0 = 2 * tx as isize - pl;
                    let bits = offsets.map(|o| crate::winograd::window(x0 + o, w));
                    // SAFETY: a row is read only where its lane's bit says the element lies
                    // inside it (masked loads touch nothing else, so the pointer may lie
                    // outside); the stores write `n` panel columns from `col + n <= nr`.
                    unsafe {
                        // Loops, not `array::from_fn`: this closure was not inlined (a call
                        // per patch row, measured).
                        let mut d = [[zero(); 4]; 4];
                        for (i, d) in d.iter_mut().enumerate() {
                            let y = 2 * ty as isize - pt + i as isize;
                            if (0..geo.in_h as isize).contains(&y) {
                                let row = base.wrapping_add(y as usize * w);
                                for (k, v) in d.iter_mut().enumerate() {
                                    *v = load_bits(row.wrapping_offset(x0 + offsets[k]), bits[k]);
                                }
                            }
                        }
                        let t: [[_; 4]; 4] = [
                            std::array::from_fn(|k| sub(d[0][k], d[2][k])),
                            std::array::from_fn(|k| add(d[1][k], d[2][k])),
                            std::array::from_fn(|k| sub(d[2][k], d[1][k])),
                            std::array::from_fn(|k| sub(d[1][k], d[3][k])),
                        ];
                        for (i, t) in t.iter().enumerate() {
                            let (e0, o0) = (even(t[0], t[1]), odd(t[0], t[1]));
                            let (e2, o2) = (even(t[2], t[3]), odd(t[2], t[3]));
                            let v = [sub(e0, e2), add(o0, e2), sub(e2, o0), sub(o0, o2)];
                            for (j, v) in v.into_iter().enumerate() {
                                store_n(panels.as_mut_ptr().add(((i * 4 + j) * c + ci) * nr + col), v, n);
                            }
                        }
                    }
                }
            }
        }

        /// `Y = Aᵀ·M·A` of the slab's products, `Aᵀ = [[1, 1, 1, 0], [0, 1, −1, −1]]`, plus
        /// bias, residual and clamp, written to the tiles' outputs that exist.
        ///
        /// # Safety
        /// The CPU has the module's features; `products` holds 16 × `mr` × `nr` values,
        /// `slab` describes `slab.rows` output planes (and residual planes and biases) of the
        /// block's geometry.
        $(#[$attr])*
        pub(crate) unsafe fn winograd_output(
            block: crate::winograd::Block,
            products: &[f32],
            nr: usize,
            mr: usize,
            slab: &crate::winograd::SlabOut,
        ) {
            let (lo, hi) = slab.clamp.map_or((splat(0.0), splat(0.0)), |(l, h)| (splat(l), splat(h)));
            for (ty, tx, n, col) in block.segments(LANES) {
                let (y, x) = (2 * ty, 2 * tx);
                // The segment's outputs in a row: columns x..limit, interleaved y_i0, y_i1.
                let limit = (x + 2 * n).min(slab.out_w);
                let bits = [0, LANES].map(|o| crate::winograd::window((x + o) as isize, limit));
                for r in 0..slab.rows {
                    // SAFETY: product rows below `rows`, columns `col..col + n`, were
                    // written and only those are read; the stores write output columns
                    // `x..limit` of rows `y` and (if it exists) `y + 1` of plane `r`.
                    unsafe {
                        let m: [_; 16] =
                            std::array::from_fn(|xi| load_n(products.as_ptr().add((xi * mr + r) * nr + col), n));
                        let s0: [_; 4] = std::array::from_fn(|j| add(add(m[j], m[4 + j]), m[8 + j]));
                        let s1: [_; 4] = std::array::from_fn(|j| sub(sub(m[4 + j], m[8 + j]), m[12 + j]));
                        let out = [
                            [add(add(s0[0], s0[1]), s0[2]), sub(sub(s0[1], s0[2]), s0[3])],
                            [add(add(s1[0], s1[1]), s1[2]), sub(sub(s1[1], s1[2]), s1[3])],
                        ];
                        let bias = if slab.bias.is_null() { None } else { Some(splat(*slab.bias.add(r))) };
                        for (i, [a, b]) in out.into_iter().enumerate() {
                            if y + i >= slab.out_h {
                                break;
                            }
                            let (a, b) = match bias {
                                Some(bias) => (add(a, bias), add(b, bias)),
                                None => (a, b),
                            };
                            let at = r * slab.pixels + (y + i) * slab.out_w + x;
                            for (k, v) in [zip_lo(a, b), zip_hi(a, b)].into_iter().enumerate() {
                                let at = at + k * LANES;
                                let mut v = v;
                                if !slab.residual.is_null() {
                                    v = add(v, load_bits(slab.residual.wrapping_add(at), bits[k]));
                                }
                                if slab.clamp.is_some() {
                                    v = min(max(v, lo), hi);
                                }
                                store_bits(slab.out.wrapping_add(at), bits[k], v);
                            }
                        }
                    }
                }
            }
        }
    };
}
pub(crate) use winograd_kernel;
