//! Winograd F(2×2, 3×3) for 3×3, stride-1, undilated, ungrouped convolutions: each 2×2 block
//! of outputs (a *tile*) is computed from a 4×4 input patch with 16 products per channel pair
//! instead of 36, so the multiplies drop 2.25× (Lavin & Gray, "Fast Algorithms for
//! Convolutional Neural Networks", 2016). F(2, 3)'s transforms hold only 0, ±1 and ±½, so it
//! keeps the float rule where the larger tiles (F(4, 3), F(6, 3)) lose digits.
//!
//! With `d` a patch, `g` a filter and `m` the 16 products:
//! - the filters are transformed once, at compile time: `U = G·g·Gᵀ` (16 values per output
//!   and input channel pair), packed per group of output channels (slabs of `MR` with
//!   channel rows, panels of `NR` with tile rows) as the group's 16 matrices, k-major, one
//!   after the other: a group's weights are one contiguous stream (from memory, in a network
//!   whose weights outgrow L3, 16 interleaved streams ran ResNet-18 at 128×128 9-12% slower);
//! - per block of tiles of one image (near-equal blocks of at most [`panel_width`] with
//!   channel rows, of as many as fit L2 with tile rows), every channel's patches are transformed,
//!   `V = Bᵀ·d·B`, into 16 panels of `C × width` in the task's scratch, a cache line apart
//!   (lanes = tiles of one tile row, read as the even and odd lanes of contiguous masked
//!   loads, so the zero padding is never materialised);
//! - the 16 products `M_ξ = U_ξ · V_ξ` run on the GEMM microkernel in one of two
//!   orientations ([`Orientation`]), and `Y = Aᵀ·M·A` plus bias, residual and clamp writes
//!   the 2×2 blocks (masked at the output's edges), the activation swept over the block's
//!   rows of each group's channels just after:
//!   - *channel rows*: per slab of `MR` output channels, 16 calls with the tiles in the
//!     vector lanes fill a `16 × MR × NR` scratch, transformed back a tile segment at a time;
//!   - *tile rows*: per panel of `NR` output channels, the block's tiles are the rows (runs
//!     of at most `MR`, read k-major from the transformed panels with the block's width as
//!     stride) and the channels the lanes, so few tiles (a 7×7 or 14×14 output has 16 or 49)
//!     still fill every lane; the products (`16 × tiles × NR`) are transformed back a tile
//!     segment and a vector of channels at a time, transposed to rows of the output planes.
//!
//! [`orientation`] picks tile rows where they fill more of the lanes or where a block's
//! transformed input outgrows 256 KiB, channel rows otherwise.
//!
//! Every variant (AVX-512, AVX2, scalar) performs the same operations per element in the same
//! order, so the result does not depend on the ISA, the block a tile falls in or the task.

use crate::conv::{Conv2d, ConvEpilogue};
use crate::tile::{self, Tile, block_rows, panel_width};
use crate::{Isa, KernelError, share};

/// Transformed values per tile: a 4×4 patch.
const XI: usize = 16;

/// Tiles an image's output needs at least for Winograd: each transformed weight serves one
/// multiply-add per tile, and the transformed weights are 16/9 the direct ones, so on fewer
/// tiles (a 5×5 or 6×6 output) streaming them costs more than the multiply-adds saved. In
/// ResNet-18 at 160×160, whose 512-channel weights come from memory, the whole network ran
/// 8-15% faster (Zen 5, one and two threads) with its 5×5 layers on the direct blocked kernel,
/// though Winograd wins on a lone layer whose weights stay in cache.
const MIN_TILES: usize = 10;

/// Whether a convolution runs as Winograd F(2×2, 3×3): 3×3, stride 1, undilated, ungrouped,
/// wide enough in channels that the GEMMs outweigh the transforms, on at least [`MIN_TILES`]
/// tiles. Extents and padding stay below `i32::MAX`, so the signed column arithmetic of the
/// padding cannot overflow.
pub(crate) fn applies(geo: &Conv2d) -> bool {
    let fits = |v: usize| v <= i32::MAX as usize;
    geo.kernel == (3, 3)
        && geo.stride == (1, 1)
        && geo.dilation == (1, 1)
        && geo.groups == 1
        && geo.in_channels >= 16
        && geo.out_channels >= 16
        && tiles(geo).0.saturating_mul(tiles(geo).1) >= MIN_TILES
        && [geo.in_h, geo.in_w, geo.out_h, geo.out_w, geo.pad.0, geo.pad.1].into_iter().all(fits)
}

fn mul(a: usize, b: usize, what: &'static str) -> Result<usize, KernelError> {
    a.checked_mul(b).ok_or(KernelError::Overflow(what))
}

fn tiles(geo: &Conv2d) -> (usize, usize) {
    (geo.out_h.div_ceil(2), geo.out_w.div_ceil(2))
}

/// Which operand of the 16 products sits in the vector lanes. Both orientations perform the
/// same operations per output element in the same order (the microkernel's fused
/// multiply-adds over the input channels from zero, then the same output transform), so the
/// choice never changes a bit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Orientation {
    /// Output channels are the microkernel's rows (slabs of `MR`), tiles its lanes.
    ChannelRows,
    /// Tiles are the rows, output channels the lanes (panels of `NR`).
    TileRows,
}

/// The orientation `geo` runs in on `isa`: tile rows where they fill 2% more of the lanes or
/// where a block's transformed panels outgrow [`CHANNEL_ROWS_PANEL_VALUES`], else channel
/// rows. Rows are never wasted (a short slab or run computes fewer rows), lanes are: with
/// channel rows the tiles of a block fill them (a 28×28 output's 196 tiles in 7 blocks of 28
/// fill 87.5% of AVX-512's 32), with tile rows the output channels do (64 fill two panels).
/// At equal lanes channel rows read contiguous operands (tile rows' panels are read with a
/// stride: a 40×40 output with 64 channels ran 5% slower as tile rows with AVX2).
pub(crate) fn orientation(geo: &Conv2d, isa: Isa) -> Orientation {
    let (th, tw) = tiles(geo);
    let tiles = th * tw;
    let nr = panel_width(isa);
    let blocks = tiles.div_ceil(nr).max(1);
    let (narrow, wide) = (tiles / blocks, tiles % blocks);
    // Lanes computed per image: blocks of near-equal widths, as `conv_share` makes them.
    let channel_rows_lanes =
        wide as u128 * computed_lanes(narrow + 1, isa) + (blocks - wide) as u128 * computed_lanes(narrow, isa);
    let tile_rows_lanes = computed_lanes(geo.out_channels, isa);
    // Tile rows' share of useful lanes, out_channels / tile_rows_lanes, above 1.02 × channel
    // rows', tiles / channel_rows_lanes.
    let (useful_tiles, useful_channels) = (tiles as u128, geo.out_channels as u128);
    // (Saturating: extents near `i32::MAX` would overflow even 128 bits.)
    let fuller = useful_channels.saturating_mul(channel_rows_lanes).saturating_mul(100)
        > useful_tiles.saturating_mul(tile_rows_lanes).saturating_mul(102);
    if fuller || geo.in_channels.saturating_mul(nr) > CHANNEL_ROWS_PANEL_VALUES {
        Orientation::TileRows
    } else {
        Orientation::ChannelRows
    }
}

/// Input channels × tiles of a channel-rows block at most: every slab of `MR` output
/// channels reads the block's 16 transformed panels again, which past 256 KiB come from L2
/// (tile rows read them once per `NR` channels; a 7×7 output with 512 channels ran 1.8×
/// slower as channel rows with AVX2).
const CHANNEL_ROWS_PANEL_VALUES: usize = 4096;

/// Lanes the microkernel computes for `columns` columns, counted as whole panels of `NR`: a
/// last partial panel one vector wide computes half the lanes ([`tile::run`]) but with one
/// multiply-add per broadcast of A instead of two, no faster (a 7×7 output's 16 tiles ran
/// slower as lanes than as rows); the scalar kernel computes only the columns.
fn computed_lanes(columns: usize, isa: Isa) -> u128 {
    match isa {
        Isa::Scalar => columns as u128,
        _ => columns.div_ceil(panel_width(isa)) as u128 * panel_width(isa) as u128,
    }
}

/// Output channels per group of the products: slabs of `MR` (channel rows) or panels of `NR`
/// (tile rows).
fn group_width(isa: Isa, orientation: Orientation) -> usize {
    match orientation {
        Orientation::ChannelRows => block_rows(isa),
        Orientation::TileRows => panel_width(isa),
    }
}

fn channel_groups(geo: &Conv2d, isa: Isa, orientation: Orientation) -> usize {
    geo.out_channels.div_ceil(group_width(isa, orientation))
}

/// Elements of the transformed, packed filters: groups × 16 × C × group width.
pub(crate) fn packed_weights_len(geo: &Conv2d, isa: Isa) -> Result<usize, KernelError> {
    packed_len(geo, isa, orientation(geo, isa))
}

fn packed_len(geo: &Conv2d, isa: Isa, orientation: Orientation) -> Result<usize, KernelError> {
    mul(
        mul(XI, channel_groups(geo, isa, orientation), "packed weights")?,
        mul(geo.in_channels, group_width(isa, orientation), "packed weights")?,
        "packed weights",
    )
}

/// Scratch per task: the 16 transformed input panels (C × block width each, [`panel_stride`]
/// apart) and the group's 16 product blocks (MR × NR channel rows, block width × NR tile
/// rows).
pub(crate) fn scratch_len(geo: &Conv2d, isa: Isa) -> Result<usize, KernelError> {
    scratch_len_in(geo, isa, orientation(geo, isa))
}

fn scratch_len_in(geo: &Conv2d, isa: Isa, orientation: Orientation) -> Result<usize, KernelError> {
    let width = block_width(geo, isa, orientation);
    let stride = panel_stride(geo.in_channels, width).ok_or(KernelError::Overflow("scratch"))?;
    let panels = mul(XI, stride, "scratch")?;
    let product_rows = match orientation {
        Orientation::ChannelRows => block_rows(isa),
        Orientation::TileRows => width,
    };
    panels.checked_add(XI * product_rows * panel_width(isa)).ok_or(KernelError::Overflow("scratch"))
}

/// Elements between the starts of two transformed input panels of `c × width` values: an odd
/// number of cache lines (the values rounded up to two lines, plus one), so the 16 stores of a
/// patch's transform (one per panel) fall in 16 different cache sets. Panels a multiple of
/// 4 KiB long (64 channels × 32 tiles) put all 16 in one set of the 12-way L1, and the
/// transform took a third of a 56×56 layer.
fn panel_stride(c: usize, width: usize) -> Option<usize> {
    const LINE: usize = 16;
    c.checked_mul(width)?.checked_next_multiple_of(2 * LINE)?.checked_add(LINE)
}

/// Input channels × tiles of a tile-rows block at most (above a minimum width): its 16
/// transformed panels, 512 KiB, stay in L2 while every output channel panel reads them.
/// Whole images of 400 tiles × 64 channels (1.6 MiB) ran 6% slower than blocks of 100, and
/// two blocks of a 100-tile image split between two threads without transforming any twice.
const TILE_ROWS_BLOCK_VALUES: usize = 8192;

/// Tiles per block: the microkernel's panel width with channel rows; with tile rows as many
/// of the image's tiles as [`TILE_ROWS_BLOCK_VALUES`] allows (at least two runs of `MR`, so
/// that very wide layers still stream their weights through few times), in near-equal blocks.
fn block_width(geo: &Conv2d, isa: Isa, orientation: Orientation) -> usize {
    match orientation {
        Orientation::ChannelRows => panel_width(isa),
        Orientation::TileRows => {
            let (th, tw) = tiles(geo);
            let tiles = (th * tw).max(1);
            let most = (TILE_ROWS_BLOCK_VALUES / geo.in_channels.max(1)).max(2 * block_rows(isa));
            tiles.div_ceil(tiles.div_ceil(most))
        }
    }
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

/// Packs `[K, C, 3, 3]` filters: for each group of output channels (slabs of `MR` or panels
/// of `NR`, the last padded with zeros), its 16 matrices in ξ order, each `C × width`,
/// k-major. The caller checked the lengths.
pub(crate) fn pack_weights(geo: &Conv2d, isa: Isa, w: &[f32], packed: &mut [f32]) {
    pack(geo, isa, orientation(geo, isa), w, packed)
}

fn pack(geo: &Conv2d, isa: Isa, orientation: Orientation, w: &[f32], packed: &mut [f32]) {
    let (width, c) = (group_width(isa, orientation), geo.in_channels);
    let groups = channel_groups(geo, isa, orientation);
    assert!(width <= 32, "every ISA's groups are at most 32 channels");
    // Group by group and channel by channel, so the 16 destinations are written in order.
    for s in 0..groups {
        for ci in 0..c {
            // The group's transformed filters, zero past the last output channel.
            let mut u = [[0.0f32; XI]; 32];
            for (k, filter) in (s * width..geo.out_channels.min((s + 1) * width)).zip(u.iter_mut()) {
                *filter = transform_filter(&w[(k * c + ci) * 9..(k * c + ci + 1) * 9]);
            }
            for xi in 0..XI {
                let at = ((s * XI + xi) * c + ci) * width;
                for (dst, filter) in packed[at..at + width].iter_mut().zip(&u) {
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

/// One channel group's output stage: `rows` output channels from `oc`, their planes at `out`
/// (and `residual`) `pixels` apart.
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
    share_of: (usize, usize),
) {
    conv_share_in(isa, geo, orientation(geo, isa), x, packed_w, out, epilogue, scratch, share_of)
}

/// [`conv_share`] in `orientation`, with weights and scratch sized and packed for it.
#[allow(clippy::too_many_arguments)]
fn conv_share_in(
    isa: Isa,
    geo: &Conv2d,
    orientation: Orientation,
    x: &[f32],
    packed_w: &[f32],
    out: &mut [f32],
    epilogue: ConvEpilogue<'_>,
    scratch: &mut [f32],
    (task, tasks): (usize, usize),
) {
    let (mr, nr, c) = (block_rows(isa), panel_width(isa), geo.in_channels);
    let (th, tw) = tiles(geo);
    let width = group_width(isa, orientation);
    let bw = block_width(geo, isa, orientation);
    let (blocks, groups) = ((th * tw).div_ceil(bw), channel_groups(geo, isa, orientation));
    let (plane_in, pixels) = (geo.in_h * geo.in_w, geo.out_h * geo.out_w);
    let block_items = geo.batch * blocks;
    // A few blocks that do not divide among the tasks (a 28×28 output's 7 at two threads:
    // 4 against 3) are split into channel parts as well, so each task does the same work,
    // transforming at most two blocks that another task transforms too.
    let slab_parts = match crate::conv::slab_parts(block_items, groups, tasks) {
        1 if block_items % tasks != 0 && block_items < 8 * tasks => tasks.min(groups),
        parts => parts,
    };
    let (lo, hi) = share(block_items * slab_parts, tasks, task);
    let stride = panel_stride(c, bw).expect("checked by scratch_len");
    let (panels, products) = scratch.split_at_mut(XI * stride);
    let product_rows = match orientation {
        Orientation::ChannelRows => mr,
        Orientation::TileRows => bw,
    };
    let products = &mut products[..XI * product_rows * nr];
    let mut transformed: Option<usize> = None;
    let mut block = Block { t0: 0, cols: 0, tw };
    for item in lo..hi {
        // Blocks outermost: a task's consecutive items share a block, transformed once.
        let (block_item, part) = (item / slab_parts, item % slab_parts);
        let (n, b) = (block_item / blocks, block_item % blocks);
        if transformed != Some(block_item) {
            // Blocks of near-equal width (7 of 28 tiles, not 6 of 32 and one of 4), so that
            // tasks holding equal counts hold equal work.
            let (t0, t1) = share(th * tw, blocks, b);
            block = Block { t0, cols: t1 - t0, tw };
            let image = &x[n * c * plane_in..(n + 1) * c * plane_in];
            transform_input(isa, geo, image, block, panels, (bw, stride));
            transformed = Some(block_item);
        }
        let (s_lo, s_hi) = share(groups, slab_parts, part);
        for s in s_lo..s_hi {
            let oc = s * width;
            let rows = (geo.out_channels - oc).min(width);
            let weights = |xi: usize| packed_w[(s * XI + xi) * c * width..].as_ptr();
            for xi in 0..XI {
                let blank = Tile {
                    k: c,
                    a: std::ptr::null(),
                    lda: 0,
                    packed_a: true,
                    b: std::ptr::null(),
                    ldb: nr,
                    c: std::ptr::null_mut(),
                    ldc: nr,
                    rows: 0,
                    cols: 0,
                    row_bias: std::ptr::null(),
                    col_bias: std::ptr::null(),
                    residual: std::ptr::null(),
                    ldr: 0,
                    clamp: false,
                    lo: 0.0,
                    hi: 0.0,
                    stream_b: false,
                };
                match orientation {
                    Orientation::ChannelRows => {
                        let t = Tile {
                            a: weights(xi),
                            lda: mr,
                            b: panels[xi * stride..].as_ptr(),
                            c: products[xi * mr * nr..].as_mut_ptr(),
                            rows,
                            cols: block.cols,
                            ..blank
                        };
                        // SAFETY: slab `s` of matrix ξ holds C × MR packed values, panel ξ
                        // C × NR, and product block ξ MR × NR.
                        unsafe { tile::run(isa, &t) };
                    }
                    Orientation::TileRows => {
                        // The block's tiles in near-equal runs of at most MR rows.
                        let runs = block.cols.div_ceil(mr);
                        for run in 0..runs {
                            let (r0, r1) = share(block.cols, runs, run);
                            let t = Tile {
                                a: panels[xi * stride + r0..].as_ptr(),
                                lda: bw,
                                b: weights(xi),
                                c: products[(xi * bw + r0) * nr..].as_mut_ptr(),
                                rows: r1 - r0,
                                cols: rows,
                                // The first run reads the panel's weights from memory
                                // (ResNet-18's 512-channel layers transform theirs into
                                // 16 MiB); the runs after find them in cache.
                                stream_b: run == 0,
                                ..blank
                            };
                            // SAFETY: panel ξ holds C steps of `bw` tiles (rows r0..r1 <= bw
                            // read), panel `s` of matrix ξ C × NR packed values, and product
                            // block ξ `bw` × NR (rows r0..r1 written).
                            unsafe { tile::run(isa, &t) };
                        }
                    }
                }
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
            // SAFETY: the group's `rows` output (and residual) planes start at `at` (checked
            // lengths); the stores stay inside them.
            unsafe { transform_output(isa, orientation, block, products, (bw, nr, mr), &slab) };
            if epilogue.activation.is_some() {
                // The block's outputs of the group's channels, while in cache: each segment
                // of tiles covers two output rows (one at an odd bottom edge).
                for (ty, tx, count, _) in block.segments(usize::MAX) {
                    let (x0, x1) = (2 * tx, (2 * (tx + count)).min(geo.out_w));
                    for y in 2 * ty..(2 * ty + 2).min(geo.out_h) {
                        let span = (at + y * geo.out_w + x0, rows, x1 - x0, pixels);
                        crate::conv::activate_rows(isa, epilogue.activation, out, span);
                    }
                }
            }
        }
    }
}

/// `x` holds the image's `geo.in_channels` planes and `panels` 16 panels of C × `nr` values,
/// `stride` apart (both checked by the caller of [`conv_share`]), `nr >= block.cols`.
fn transform_input(isa: Isa, geo: &Conv2d, x: &[f32], block: Block, panels: &mut [f32], (nr, stride): (usize, usize)) {
    assert!(x.len() >= geo.in_channels * geo.in_h * geo.in_w);
    assert!(stride >= geo.in_channels * nr && panels.len() >= (XI - 1) * stride + geo.in_channels * nr);
    assert!(block.cols <= nr);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the lengths are asserted, and the CPU has the features.
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            return unsafe { tile::x86::avx512::winograd_input(geo, x, block, panels, (nr, stride)) };
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            return unsafe { tile::x86::avx2::winograd_input(geo, x, block, panels, (nr, stride)) };
        }
    }
    // SAFETY: the lengths are asserted.
    unsafe { scalar::winograd_input(geo, x, block, panels, (nr, stride)) }
}

/// # Safety
/// `products` holds 16 blocks of MR × NR values (channel rows: the first `slab.rows` rows and
/// `block.cols` columns written) or `bw` × NR (tile rows: the first `block.cols` rows and
/// `slab.rows` columns written), and `slab`'s planes hold what it says.
unsafe fn transform_output(
    isa: Isa,
    orientation: Orientation,
    block: Block,
    products: &[f32],
    (bw, nr, mr): (usize, usize, usize),
    slab: &SlabOut,
) {
    macro_rules! run {
        ($module:path) => {{
            use $module as m;
            // SAFETY: forwarded, on a CPU with the module's features.
            unsafe {
                match orientation {
                    Orientation::ChannelRows => m::winograd_output(block, products, nr, mr, slab),
                    Orientation::TileRows => m::winograd_output_tile_rows(block, products, (bw, nr), slab),
                }
            }
        }};
    }
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            return run!(tile::x86::avx512);
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            return run!(tile::x86::avx2);
        }
    }
    run!(scalar)
}

/// One lane at a time: the reference the vector variants match bit for bit, and the path on
/// CPUs without them.
mod scalar {
    pub(crate) const LANES: usize = 1;
    pub(crate) type Vector = f32;

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
    /// A 1 × 1 matrix is its own transpose.
    pub(crate) fn transpose(rows: [f32; 1]) -> [f32; 1] {
        rows
    }

    crate::winograd::winograd_kernel!();
}

/// The transforms, written once over a module's vector helpers (`LANES`, `zero`, `add`,
/// `sub`, `splat`, `max`, `min`, `even`, `odd`, `zip_lo`, `zip_hi`, `load_n`, `store_n`,
/// `load_bits`, `store_bits`, `transpose`), with the attributes given. Lane `l` of a segment is tile
/// `tx + l`, whose patch columns are input columns `2(tx + l) − pl + j`: the even and odd
/// lanes of two contiguous vectors.
macro_rules! winograd_kernel {
    ($(#[$attr:meta])*) => {
        /// `V = Bᵀ·d·B` of every channel's patches of the block, into `panels[ξ][c][column]`
        /// (panel ξ from `ξ · stride`),
        /// `Bᵀ = [[1, 0, −1, 0], [0, 1, 1, 0], [0, −1, 1, 0], [0, 1, 0, −1]]`; columns past
        /// the block's tiles are zero.
        ///
        /// # Safety
        /// The CPU has the module's features; `x` holds `geo.in_channels` planes and `panels`
        /// 16 panels of C × `nr` values, `stride` apart.
        $(#[$attr])*
        pub(crate) unsafe fn winograd_input(
            geo: &crate::conv::Conv2d,
            x: &[f32],
            block: crate::winograd::Block,
            panels: &mut [f32],
            (nr, stride): (usize, usize),
        ) {
            let (c, plane, w) = (geo.in_channels, geo.in_h * geo.in_w, geo.in_w);
            let (pt, pl) = (geo.pad.0 as isize, geo.pad.1 as isize);
            if block.cols < nr {
                // A few lanes per row: vector stores, where `fill` called `memset` per row
                // (7% of a 40×40 layer).
                for panel in panels.chunks_mut(stride).take(16) {
                    for row in panel[..c * nr].chunks_exact_mut(nr) {
                        for at in (block.cols..nr).step_by(LANES) {
                            // SAFETY: lanes `at..nr` (at most `LANES` from `at`) lie inside the row.
                            unsafe { store_n(row.as_mut_ptr().add(at), zero(), (nr - at).min(LANES)) };
                        }
                    }
                }
            }
            // The four vectors of a patch row: from its first column and from two past it.
            let offsets = [0, LANES as isize, 2, 2 + LANES as isize];
            // Segments outermost: their masks and patch rows are worked out once for all the
            // channels (per channel, that scalar work took longer than the vector work).
            for (ty, tx, n, col) in block.segments(LANES) {
                let x0 = 2 * tx as isize - pl;
                let bits = offsets.map(|o| crate::winograd::window(x0 + o, w));
                // Each patch row's first column from a plane's start, and whether the row lies
                // inside the image (not in the padding).
                let ys: [isize; 4] = std::array::from_fn(|i| 2 * ty as isize - pt + i as isize);
                let inside = ys.map(|y| (0..geo.in_h as isize).contains(&y));
                let rows = ys.map(|y| y * w as isize + x0);
                for ci in 0..c {
                    let base = x[ci * plane..].as_ptr();
                    // SAFETY: a row is read only where its lane's bit says the element lies
                    // inside it (masked loads touch nothing else, so the pointer may lie
                    // outside); the stores write `n` panel columns from `col + n <= nr`.
                    unsafe {
                        let mut d = [[zero(); 4]; 4];
                        for (i, d) in d.iter_mut().enumerate() {
                            if inside[i] {
                                let row = base.wrapping_offset(rows[i]);
                                for (k, v) in d.iter_mut().enumerate() {
                                    *v = load_bits(row.wrapping_offset(offsets[k]), bits[k]);
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
                                store_n(panels.as_mut_ptr().add((i * 4 + j) * stride + ci * nr + col), v, n);
                            }
                        }
                    }
                }
            }
        }

        /// `Y = Aᵀ·M·A` of one tile's 16 products (in each lane): its 2×2 outputs, row by row,
        /// by the same operations for either orientation.
        $(#[$attr])*
        #[inline]
        fn winograd_tile_output(m: [Vector; 16]) -> [[Vector; 2]; 2] {
            let s0: [_; 4] = std::array::from_fn(|j| add(add(m[j], m[4 + j]), m[8 + j]));
            let s1: [_; 4] = std::array::from_fn(|j| sub(sub(m[4 + j], m[8 + j]), m[12 + j]));
            [
                [add(add(s0[0], s0[1]), s0[2]), sub(sub(s0[1], s0[2]), s0[3])],
                [add(add(s1[0], s1[1]), s1[2]), sub(sub(s1[1], s1[2]), s1[3])],
            ]
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
                        let out = winograd_tile_output(m);
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

        /// [`winograd_output`] of tile-rows products (`products[ξ][tile][channel]`, `bw`
        /// tiles of `nr` channels), with the same operations per element: per segment of a
        /// tile row and vector of the group's channels, the 2×2 outputs of each tile (channels
        /// in the lanes) plus bias fill one vector per output pixel of the segment's two rows;
        /// each row's square is transposed, so every channel's pixels of the row are one
        /// vector, and the residual, clamp and store run on whole rows of a plane. (Scattering
        /// each lane to its plane took a fifth of a 40×40 layer.)
        ///
        /// # Safety
        /// The CPU has the module's features; `products` holds 16 × `bw` × `nr` values (rows
        /// below `block.cols`, columns below `slab.rows` written), `slab` describes
        /// `slab.rows` output planes (and residual planes and biases) of the block's geometry.
        $(#[$attr])*
        pub(crate) unsafe fn winograd_output_tile_rows(
            block: crate::winograd::Block,
            products: &[f32],
            (bw, nr): (usize, usize),
            slab: &crate::winograd::SlabOut,
        ) {
            // Tiles per segment: two output columns each fill a vector of pixels (two
            // vectors of one lane without vectors).
            const TILES: usize = if LANES >= 2 { LANES / 2 } else { 1 };
            const CHUNKS: usize = (2 * TILES).div_ceil(LANES);
            let (lo, hi) = slab.clamp.map_or((splat(0.0), splat(0.0)), |(l, h)| (splat(l), splat(h)));
            for (ty, tx, tiles, col) in block.segments(TILES) {
                let (y, x) = (2 * ty, 2 * tx);
                // Output columns x..x + pixels exist in both rows.
                let pixels = (2 * tiles).min(slab.out_w - x);
                for ch in (0..slab.rows).step_by(LANES) {
                    let n = (slab.rows - ch).min(LANES);
                    // SAFETY: product rows `col..col + tiles <= block.cols` and columns
                    // `ch..ch + n <= slab.rows` were written and only those are read; biases,
                    // residuals and outputs are touched for channels below `slab.rows` and
                    // pixels inside the plane only.
                    unsafe {
                        let bias = if slab.bias.is_null() { None } else { Some(load_n(slab.bias.add(ch), n)) };
                        // rows[i][chunk][pixel]: output row y + i, channels in the lanes.
                        let mut rows = [[[zero(); LANES]; CHUNKS]; 2];
                        for tile in 0..tiles {
                            let m: [_; 16] = std::array::from_fn(|xi| {
                                load_n(products.as_ptr().add((xi * bw + col + tile) * nr + ch), n)
                            });
                            let out = winograd_tile_output(m);
                            for (i, pair) in out.into_iter().enumerate() {
                                for (j, v) in pair.into_iter().enumerate() {
                                    // (One lane without vectors: every pixel a chunk.)
                                    #[allow(clippy::modulo_one)]
                                    let (chunk, lane) = ((2 * tile + j) / LANES, (2 * tile + j) % LANES);
                                    rows[i][chunk][lane] = match bias {
                                        Some(bias) => add(v, bias),
                                        None => v,
                                    };
                                }
                            }
                        }
                        for (i, chunks) in rows.into_iter().enumerate() {
                            if y + i >= slab.out_h {
                                break;
                            }
                            for (q, square) in chunks.into_iter().enumerate() {
                                let (p0, count) = (q * LANES, pixels.saturating_sub(q * LANES).min(LANES));
                                if count == 0 {
                                    break;
                                }
                                // Lane p of plane vector c: pixel p0 + p of channel ch + c.
                                let planes = transpose(square);
                                for (c, mut v) in planes.into_iter().take(n).enumerate() {
                                    let at = (ch + c) * slab.pixels + (y + i) * slab.out_w + x + p0;
                                    if !slab.residual.is_null() {
                                        v = add(v, load_n(slab.residual.add(at), count));
                                    }
                                    if slab.clamp.is_some() {
                                        v = min(max(v, lo), hi);
                                    }
                                    store_n(slab.out.add(at), v, count);
                                }
                            }
                        }
                    }
                }
            }
        }
    };
}
pub(crate) use winograd_kernel;

#[cfg(test)]
mod tests {
    use super::*;

    /// Both orientations give the same bits, on every ISA this CPU has, for geometries with
    /// partial blocks, partial channel groups, padding and every epilogue.
    #[test]
    fn orientations_agree_bit_for_bit() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // The last cases are wide: tile-rows blocks split (input channels × tiles above
        // 8192) and channel groups of more than 128 input channels.
        for case in 0..28 {
            let wide = case >= 24;
            let (oh, ow) = if wide {
                (12 + next() as usize % 12, 12 + next() as usize % 12)
            } else {
                (1 + next() as usize % 11, 1 + next() as usize % 40)
            };
            let (pt, pl) = (next() as usize % 3, next() as usize % 3);
            let geo = Conv2d {
                batch: 1 + case % 2,
                in_channels: if wide { 130 + next() as usize % 170 } else { 16 + next() as usize % 24 },
                in_h: (oh + 2).saturating_sub(pt + next() as usize % 3).max(1),
                in_w: (ow + 2).saturating_sub(pl + next() as usize % 3).max(1),
                out_channels: 16 + next() as usize % 40,
                out_h: oh,
                out_w: ow,
                kernel: (3, 3),
                stride: (1, 1),
                dilation: (1, 1),
                groups: 1,
                pad: (pt, pl),
            };
            let mut values = |n: usize| (0..n).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect::<Vec<f32>>();
            let (x, w, bias, residual) = (
                values(geo.input_len().unwrap()),
                values(geo.weights_len().unwrap()),
                values(geo.out_channels),
                values(geo.output_len().unwrap()),
            );
            for isa in Isa::available() {
                let tasks = 1 + case % 3;
                let results = [Orientation::ChannelRows, Orientation::TileRows].map(|o| {
                    let mut packed = vec![0.0; packed_len(&geo, isa, o).unwrap()];
                    pack(&geo, isa, o, &w, &mut packed);
                    let per_task = scratch_len_in(&geo, isa, o).unwrap();
                    let mut scratch = vec![f32::NAN; per_task * tasks];
                    let mut y = vec![f32::NAN; geo.output_len().unwrap()];
                    for (task, scratch) in scratch.chunks_exact_mut(per_task).enumerate() {
                        let epilogue = ConvEpilogue {
                            bias: Some(&bias),
                            residual: (case % 2 == 0).then_some(&residual[..]),
                            clamp: (case % 3 == 0).then_some((-0.5, 0.75)),
                            // Swept over each block's rows, which wrap tile rows and end at odd
                            // edges.
                            activation: [
                                None,
                                Some(crate::conv::Activation::Silu),
                                Some(crate::conv::Activation::Tanh),
                            ][case % 3],
                            ..ConvEpilogue::default()
                        };
                        conv_share_in(isa, &geo, o, &x, &packed, &mut y, epilogue, scratch, (task, tasks));
                    }
                    y
                });
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&results[0]), bits(&results[1]), "{isa:?} {case}");
                assert!(results[0].iter().all(|v| v.is_finite()), "every output written");
            }
        }
    }
}
