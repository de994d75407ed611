//! Pointwise convolutions (1×1, stride 1, unpadded, ungrouped) on small planes, computed
//! transposed: `outᵀ[P × M] = xᵀ[P × C] · Wᵀ[C × M]`. With the pixels in the vector lanes (the
//! GEMM form) a 7×7 plane's 49 pixels fill four vectors of 16 to 77%; with the output channels
//! in the lanes (multiples of 16 in most networks) every lane works.
//!
//! `Wᵀ` is packed at compile time into the GEMM's panels of [`panel_width`] channels. Per
//! block of [`block_rows`] pixels, the input's columns are packed k-major (as weight slabs are)
//! into the task's scratch; each panel multiplies them into a block of the scratch, bias
//! first; the residual and the clamp are applied as the block is written back transposed, the
//! activation over each channel's run just after.

use crate::conv::{Conv2d, ConvEpilogue};
use crate::gemm::{pack_b, packed_b_len};
use crate::tile::{self, Tile, block_rows, panel_width};
use crate::{Isa, KernelError, share};

/// Planes up to this many pixels run transposed (7×7: 49 pixels fill 77% of four vectors;
/// 10×10: 100 fill 78% of eight), when the reduction is at least [`MIN_CHANNELS`] deep: the
/// transposed write-back costs per output what the multiplies cost per output and input
/// channel, so shallower layers lose more to it than the idle lanes cost (measured: 960→160 on
/// 7×7 64% → 78% of peak, 160→960 71% → 55%). Up to 10×10: MobileNet-v2 at 160² equal on one
/// thread, 4.86 → 4.56 ms on two (its items split more evenly).
const MAX_PIXELS: usize = 100;
const MIN_CHANNELS: usize = 384;

/// Whether `geo` runs transposed.
pub(crate) fn applies(geo: &Conv2d) -> bool {
    geo.kernel == (1, 1)
        && geo.stride == (1, 1)
        && geo.pad == (0, 0)
        && geo.groups == 1
        && (geo.in_h, geo.in_w) == (geo.out_h, geo.out_w)
        && geo.out_h.saturating_mul(geo.out_w) <= MAX_PIXELS
        && geo.in_channels >= MIN_CHANNELS
}

pub(crate) fn packed_weights_len(geo: &Conv2d, isa: Isa) -> Result<usize, KernelError> {
    packed_b_len(isa, geo.in_channels, geo.out_channels)
}

/// Packs `Wᵀ` (`C × M`; `W[m, c]` at `m·C + c`) into panels.
pub(crate) fn pack_weights(geo: &Conv2d, isa: Isa, w: &[f32], packed: &mut [f32]) -> Result<(), KernelError> {
    pack_b(isa, w, (1, geo.in_channels), (geo.in_channels, geo.out_channels), packed)
}

/// The packed pixel block (`C × MR`) and the product block (`MR × NR`).
pub(crate) fn scratch_len(geo: &Conv2d, isa: Isa) -> Result<usize, KernelError> {
    let (mr, nr) = (block_rows(isa), panel_width(isa));
    geo.in_channels.checked_mul(mr).and_then(|a| a.checked_add(mr * nr)).ok_or(KernelError::Overflow("scratch"))
}

/// The transposed form of [`crate::conv::conv2d_share`]; the caller checked every length.
/// Items are (image, pixel block, panel), panels innermost so that a packed block serves them
/// all.
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
    let (mr, nr) = (block_rows(isa), panel_width(isa));
    let (c, m, pixels) = (geo.in_channels, geo.out_channels, geo.out_h * geo.out_w);
    let (blocks, panels) = (pixels.div_ceil(mr), m.div_ceil(nr));
    let (packed_x, products) = scratch.split_at_mut(c * mr);
    let (lo, hi) = share(geo.batch * blocks * panels, tasks, task);
    let mut packed: Option<usize> = None;
    for item in lo..hi {
        let (image_block, j) = (item / panels, item % panels);
        let (n, p0) = (image_block / blocks, (image_block % blocks) * mr);
        let rows = (pixels - p0).min(mr);
        if packed != Some(image_block) {
            for (k, dst) in packed_x.chunks_exact_mut(mr).enumerate() {
                let at = (n * c + k) * pixels + p0;
                dst[..rows].copy_from_slice(&x[at..at + rows]);
            }
            packed = Some(image_block);
        }
        let (oc, cols) = (j * nr, (m - j * nr).min(nr));
        let t = Tile {
            k: c,
            a: packed_x.as_ptr(),
            lda: mr,
            packed_a: true,
            b: packed_w[j * c * nr..].as_ptr(),
            ldb: nr,
            c: products.as_mut_ptr(),
            ldc: nr,
            rows,
            cols,
            row_bias: std::ptr::null(),
            col_bias: epilogue.bias.map_or(std::ptr::null(), |b| b[oc..].as_ptr()),
            residual: std::ptr::null(),
            ldr: 0,
            clamp: false,
            lo: 0.0,
            hi: 0.0,
            stream_b: false,
        };
        // SAFETY: the packed block holds `C × MR` values (its first `rows` of each `MR` set),
        // panel `j` of the packed weights `C × NR`, the product block `MR × NR`, and `cols`
        // bias values are from `oc` (`oc + cols <= m`).
        unsafe { tile::run(isa, &t) };
        for col in 0..cols {
            let at = (n * m + oc + col) * pixels + p0;
            let residual = epilogue.residual.map(|r| &r[at..at + rows]);
            for (r, o) in out[at..at + rows].iter_mut().enumerate() {
                let mut v = products[r * nr + col];
                if let Some(res) = residual {
                    v += res[r];
                }
                if let Some((lo, hi)) = epilogue.clamp {
                    v = v.max(lo).min(hi);
                }
                *o = v;
            }
            crate::conv::activate(isa, epilogue.activation, &mut out[at..at + rows]);
        }
    }
}
