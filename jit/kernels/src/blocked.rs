//! 2-D convolution over channel-blocked activations (`NCHW{B}c`, as ONNX Runtime's MLAS and
//! oneDNN lay them out): a tensor `[N, C, H, W]` is stored as `[N, ⌈C/B⌉, H, W, B]`, `B` (the
//! block) being the vector width, 8 for AVX2 and 16 for AVX-512. A pixel's `B` channels are
//! one vector, so
//!
//! - a **dense** convolution (one group) keeps `OB` blocks of output channels × `P` output
//!   pixels of a row in registers, and for every input channel and tap loads `OB` weight
//!   vectors and broadcasts `P` input values: no im2col panel, and every store is a whole
//!   vector. Its input may also be plain NCHW (a network's first layer, whose 3 channels would
//!   fill no block), and its output plain NCHW (a tensor a consumer reads unblocked);
//! - a **depthwise** convolution is one multiply-add of a weight vector and an input vector
//!   per tap and output pixel: no plane copy, no lane shifts.
//!
//! Padding rows are never materialised: taps outside the input are skipped. Padding columns
//! of a dense convolution are, when one image of its input widened by them is small (see
//! [`BlockedConv::width_padding`]): each share copies the rows of the image it reads (or of the
//! whole batch, see [`BlockedConv::scratch_len`]), widened with zeros, into its scratch, and
//! every pixel takes every tap column; otherwise a row's border pixels are computed one at a
//! time with the taps that exist. Every output element adds its taps
//! in the order (input channel, tap row, tap column) after the bias, except in narrow tiles
//! of a multi-tap layer, which add a whole input block in up to four sets of sums (channels
//! taken in turn, see [`narrow_chains`]). Tiles depend on the block alone, and the scalar
//! kernel takes the vector one's, so for a block every ISA and thread count gives the same
//! bits (blocks of 8 and of 16 tile rows differently). The lanes of a last block past `C`
//! hold zeros in every blocked tensor a kernel writes; readers never depend on them.
//!
//! Work is split into items (image, output block group or channel block, output row) and task
//! `t` of `T` runs a contiguous run of them.

use crate::conv::{Activation, Conv2d, ConvEpilogue};
use crate::elementwise::{MAX_INPUTS, Source, Tail, TailOperand, segment};
use crate::{Isa, KernelError, check_share, need, share};

/// How a 4-D activation is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `[N, C, H, W]`, row-major.
    Planar,
    /// `[N, ⌈C/B⌉, H, W, B]`.
    Blocked,
}

/// The block sizes the kernels take: one f32 vector of AVX2 or of AVX-512.
pub const BLOCKS: [usize; 2] = [8, 16];

/// The block the vector kernels of `isa` use (AVX2: 8 lanes, AVX-512: 16; scalar code runs
/// either, and takes 8).
pub fn block_for(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 16,
        Isa::Avx2Fma | Isa::Scalar => 8,
    }
}

/// A convolution of blocked (or, for a dense one, planar) tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedConv {
    pub geo: Conv2d,
    /// Channels per block: one of [`BLOCKS`].
    pub block: usize,
    pub input: Layout,
    pub output: Layout,
}

/// Where element `(n, c, y, x)` of a 4-D tensor is: `n·image + (c / lanes)·channel + c % lanes
/// + y·row + x·pixel`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Strides {
    pub image: usize,
    pub channel: usize,
    pub lanes: usize,
    pub row: usize,
    pub pixel: usize,
}

impl Strides {
    /// Strides of a `[n, c, h, w]` tensor; the caller checked the sizes.
    fn of(layout: Layout, block: usize, c: usize, h: usize, w: usize) -> Strides {
        match layout {
            Layout::Planar => Strides { image: c * h * w, channel: h * w, lanes: 1, row: w, pixel: 1 },
            Layout::Blocked => Strides {
                image: c.div_ceil(block) * h * w * block,
                channel: h * w * block,
                lanes: block,
                row: w * block,
                pixel: block,
            },
        }
    }

    fn at(&self, n: usize, c: usize, y: usize, x: usize) -> usize {
        n * self.image + (c / self.lanes) * self.channel + c % self.lanes + y * self.row + x * self.pixel
    }
}

/// Elements of a `[n, c, h, w]` tensor stored as `layout`.
pub fn tensor_len(layout: Layout, block: usize, dims: [usize; 4]) -> Result<usize, KernelError> {
    let [n, c, h, w] = dims;
    let channels = match layout {
        Layout::Planar => c,
        Layout::Blocked => c.div_ceil(block.max(1)).checked_mul(block).ok_or(KernelError::Overflow("channels"))?,
    };
    [n, channels, h, w].into_iter().try_fold(1usize, |acc, d| acc.checked_mul(d)).ok_or(KernelError::Overflow("tensor"))
}

/// Pixels a depthwise tile holds.
pub(crate) const DEPTHWISE_PIXELS: usize = 8;

/// Pixels a dense tile of `blocks` output blocks holds: its accumulators, weight vectors and
/// broadcast input fit the registers (AVX2's 16: 12 + 2 + 1, or with three blocks 9 + 3 + 1;
/// AVX-512's 32: 24 + 3 + 1), at most 12 pixels.
pub(crate) fn dense_pixels(isa: Isa, blocks: usize) -> usize {
    let accumulators = match (isa, blocks) {
        (Isa::Avx512, _) => 24,
        (_, 3) => 9,
        _ => 12,
    };
    (accumulators / blocks.max(1)).min(12)
}

/// Output blocks per group of a dense convolution's tiles: pairs, or threes in a 1×1 layer of
/// at most [`FEW_PIXELS`] output pixels per image, whose tiles are a pixel or two wide: there
/// each input channel's weights are a few vectors read once (streamed from L3 in MobileNet-v2's
/// deep layers at small resolutions) for one multiply-add each, and three blocks keep three
/// streams and sums in flight with a third fewer items (eight 160->960->160 pairs at 1×1:
/// 0.127 -> 0.115 ms; MobileNet-v2 at 32×32 about 1% faster on one and two threads; Zen 5).
/// Pairs elsewhere: threes left two threads fewer, coarser groups to share in ResNet-18's
/// 3×3 layers at 56×56 (1.19 -> 1.27 ms).
fn group_size(geo: &Conv2d) -> usize {
    if geo.kernel == (1, 1) && geo.out_h * geo.out_w <= FEW_PIXELS { 3 } else { 2 }
}

/// Output pixels per image up to which a 1×1 layer groups its blocks in threes.
const FEW_PIXELS: usize = 4;

/// How `blocks` output blocks are grouped into tiles of `size` (2 or 3) blocks: the last group
/// takes what is left, up to `size + 1` with pairs (three, never a single block alone), up to
/// three with threes.
fn block_groups(blocks: usize, size: usize) -> usize {
    if size == 3 {
        blocks.div_ceil(3)
    } else if blocks <= 3 {
        1
    } else {
        blocks / 2
    }
}

/// Group `g`'s first block and block count (groups of `size`, see [`block_groups`]).
fn block_group(blocks: usize, size: usize, g: usize) -> (usize, usize) {
    let groups = block_groups(blocks, size);
    if g + 1 < groups { (size * g, size) } else { (size * g, blocks - size * g) }
}

impl BlockedConv {
    pub fn check(&self) -> Result<(), KernelError> {
        let geo = &self.geo;
        geo.check_shape()?;
        if !BLOCKS.contains(&self.block) {
            return Err(KernelError::Geometry("the block must be 8 or 16 channels"));
        }
        if geo.is_depthwise() {
            if (self.input, self.output) != (Layout::Blocked, Layout::Blocked) {
                return Err(KernelError::Geometry("a blocked depthwise convolution reads and writes blocked tensors"));
            }
        } else if geo.groups != 1 {
            return Err(KernelError::Geometry("a blocked convolution has one group or is depthwise"));
        }
        self.input_len()?;
        self.output_len()?;
        self.packed_weights_len()?;
        // Offsets of taps stay inside the padded plane's extent (checked by `Conv2d::check_shape`).
        Ok(())
    }

    pub fn input_len(&self) -> Result<usize, KernelError> {
        let g = &self.geo;
        tensor_len(self.input, self.block, [g.batch, g.in_channels, g.in_h, g.in_w])
    }

    pub fn output_len(&self) -> Result<usize, KernelError> {
        let g = &self.geo;
        tensor_len(self.output, self.block, [g.batch, g.out_channels, g.out_h, g.out_w])
    }

    fn taps(&self) -> usize {
        self.geo.kernel.0 * self.geo.kernel.1
    }

    /// Elements of the packed weights: per block of `B` output channels, for every input
    /// channel and tap (in that order) one vector of the block's weights; a depthwise
    /// convolution's per channel block, one vector per tap. Channels past `M` are zero.
    pub fn packed_weights_len(&self) -> Result<usize, KernelError> {
        let g = &self.geo;
        let blocks = g.out_channels.div_ceil(self.block);
        let per_block = if g.is_depthwise() { Some(self.taps()) } else { g.in_channels.checked_mul(self.taps()) };
        per_block
            .and_then(|p| p.checked_mul(self.block))
            .and_then(|p| p.checked_mul(blocks))
            .ok_or(KernelError::Overflow("packed weights"))
    }

    /// The columns `(left, right)` a dense convolution's input is widened by, in a copy with
    /// zeros there, so that every output pixel takes every tap column: `None` when no tap
    /// falls outside the input's columns, or when one image's copy would pass
    /// [`PADDED_IMAGE_BUDGET`]. Without the copy, a row's border pixels run one at a time with
    /// their own taps and its interior in tiles as wide as what is left between them: at a
    /// 5×5 output, tiles of one and of three pixels, whose few sums wait on the FMA latency
    /// (measured on Zen 5, one thread: 3×3 512→512 at 5×5 1.08 → 0.54 ms, at 7×7 1.52 → 0.87,
    /// 256→256 at 10×10 0.66 → 0.45, at 14×14 1.01 → 0.90, 128→128 at 28×28 0.98 → 0.92;
    /// 3×3/2 256→512 to 5×5 0.40 → 0.26). The zeros add `0 · w` to the border pixels' sums,
    /// as ONNX's zero padding does: with an infinite or NaN weight those are NaN here, and
    /// finite for images past the budget, whose border taps are skipped.
    pub fn width_padding(&self) -> Option<(usize, usize)> {
        let g = &self.geo;
        if g.is_depthwise() || g.kernel.1 < 2 || g.out_w == 0 {
            return None;
        }
        // Padded columns the last pixel's last tap reaches.
        let reach = (g.out_w - 1)
            .checked_mul(g.stride.1)?
            .checked_add((g.kernel.1 - 1).checked_mul(g.dilation.1)?)?
            .checked_add(1)?;
        let (left, right) = (g.pad.1, reach.saturating_sub(g.pad.1.checked_add(g.in_w)?));
        if left == 0 && right == 0 {
            return None;
        }
        let bytes = self.padded_image_len(left + right).ok()?.checked_mul(size_of::<f32>())?;
        (bytes <= PADDED_IMAGE_BUDGET).then_some((left, right))
    }

    /// Elements of one image of the input widened by `extra` columns.
    fn padded_image_len(&self, extra: usize) -> Result<usize, KernelError> {
        let g = &self.geo;
        let width = g.in_w.checked_add(extra).ok_or(KernelError::Overflow("padded input"))?;
        tensor_len(self.input, self.block, [1, g.in_channels, g.in_h, width])
    }

    /// Whether the work items take the output groups outermost (see [`Items`]): the packed
    /// weights outweigh the input.
    fn groups_outer(&self) -> Result<bool, KernelError> {
        Ok(self.packed_weights_len()? > self.input_len()?)
    }

    /// Images of the widened input a share's scratch holds: the whole batch when the groups are
    /// outermost (each group visits every image) and it fits [`PADDED_IMAGE_BUDGET`], else one.
    fn widened_images(&self, image_len: usize) -> Result<usize, KernelError> {
        let batch = self.geo.batch.max(1);
        let whole = batch.saturating_mul(image_len).saturating_mul(size_of::<f32>()) <= PADDED_IMAGE_BUDGET;
        Ok(if batch > 1 && whole && self.groups_outer()? { batch } else { 1 })
    }

    /// Elements of the scratch each share takes: the images of the widened input (see
    /// [`BlockedConv::width_padding`]), or none.
    pub fn scratch_len(&self) -> Result<usize, KernelError> {
        match self.width_padding() {
            Some((left, right)) => {
                let image = self.padded_image_len(left + right)?;
                image.checked_mul(self.widened_images(image)?).ok_or(KernelError::Overflow("scratch"))
            }
            None => Ok(0),
        }
    }

    /// Packs `[M, C/g, KH, KW]` weights (see [`BlockedConv::packed_weights_len`]).
    pub fn pack_weights(&self, w: &[f32], packed: &mut [f32]) -> Result<(), KernelError> {
        self.check()?;
        let g = &self.geo;
        let len = self.packed_weights_len()?;
        need("weights", w.len(), g.weights_len()?)?;
        need("packed weights", packed.len(), len)?;
        let (b, taps, depth) = (self.block, self.taps(), g.depth()?);
        let channels = if g.is_depthwise() { 1 } else { g.in_channels };
        for (i, v) in packed[..len].iter_mut().enumerate() {
            // i = ((block · channels + ci) · taps + tap) · B + lane
            let (lane, rest) = (i % b, i / b);
            let (tap, rest) = (rest % taps, rest / taps);
            let (ci, block) = (rest % channels, rest / channels);
            let oc = block * b + lane;
            *v = if oc < g.out_channels { w[oc * depth + ci * taps + tap] } else { 0.0 };
        }
        Ok(())
    }

    /// Output rows the work is cut into per image and channel group: a pointwise convolution
    /// over the whole plane is one row of `H·W` pixels, cut into chunks.
    fn canonical(&self) -> Conv2d {
        let g = self.geo;
        let pointwise =
            g.kernel == (1, 1) && g.stride == (1, 1) && g.pad == (0, 0) && (g.in_h, g.in_w) == (g.out_h, g.out_w);
        if pointwise {
            let pixels = g.out_h * g.out_w;
            Conv2d { in_h: 1, in_w: pixels, out_h: 1, out_w: pixels, ..g }
        } else {
            g
        }
    }
}

/// Bytes one image of a widened input may take (see [`BlockedConv::width_padding`]), and a
/// share's copies of the whole batch (see [`BlockedConv::widened_images`]): copied once per
/// image and task, and read for every output block from the L2 cache (a quarter of Zen 4's
/// and Zen 5's 1 MiB; Sapphire Rapids has 2 MiB).
const PADDED_IMAGE_BUDGET: usize = 256 << 10;

/// Bytes of weights of a group and the next one up to which the dense kernel prefetches the
/// next: larger pairs evict from L2 (1 MiB on Zen 4 and 5) the group that the next output row
/// reads again (3×3 layers over 128 input channels or more with AVX-512's 16-channel blocks;
/// ResNet-18 at 96×96, whose 3×3 groups over 256 and 512 channels are 295 and 590 KB: 3.90 ->
/// 3.26 ms on one thread, 2.15 -> 1.86 on two, without their prefetch; Zen 5).
const PREFETCH_GROUPS_BYTES: usize = 256 << 10;

/// Bytes of each output block's weights ahead of the ones being read that a run streaming its
/// weights from L3 or memory asks for (see [`stream_ahead`]): 8 input channels of a 3×3
/// layer's 16-channel blocks.
const STREAM_AHEAD_BYTES: usize = 4608;

/// The input channels ahead that a run of `w_channel` weights per channel and block prefetches
/// when its weights are not in L2 yet, else 0: the first item of a group that the previous
/// item's prefetch did not bring (`fresh`). Only narrow tiles take it, whose few multiply-adds
/// per weight ask for the most bytes per cycle: there the hardware's prefetchers alone kept
/// the 512-channel 2×2 layers of ResNet-18 at 64×64 (9.4 MB each, read once) near 20 GB/s
/// where a plain read streams 50 (Zen 5, one thread: 12 such layers 5.5 -> 4.2 ms, the network
/// 2.72 -> 2.23 ms; two threads 1.49 -> 1.25). Wider tiles keep up without it and lost up to
/// 4% with it (3×3 256→256 at 6×6).
fn stream_ahead(fresh: bool, w_channel: usize) -> usize {
    if fresh { STREAM_AHEAD_BYTES.div_ceil(w_channel.max(1) * size_of::<f32>()) } else { 0 }
}

/// Pixels per work item of a pointwise convolution's single row, at most.
const CHUNK: usize = 96;

/// A dense convolution's work items: per image, output group (a [`block_group`] of output
/// blocks), and output row or chunk of the row: `(image, group, row, first pixel, pixels)`.
/// Weights larger than the input are visited once per image (groups outermost), or once for
/// the whole batch (groups outermost, then the images: each group's weights read from memory
/// once, not once per image) when each share's scratch holds every image it reads (see
/// [`BlockedConv::widened_images`]: otherwise each image would be copied again per group);
/// smaller weights with each input row once (images, then rows outermost).
struct Items {
    geo: Conv2d,
    /// Output blocks, the blocks per group (see [`group_size`]) and the groups.
    blocks: usize,
    group_size: usize,
    groups: usize,
    rows: usize,
    chunks: usize,
    /// Pixels per chunk.
    chunk: usize,
    groups_outer: bool,
    /// With groups outermost, the images inside each group (else each image its own pass
    /// over the groups).
    images_inner: bool,
}

impl Items {
    fn new(conv: &BlockedConv, geo: Conv2d, groups_outer: bool, images_inner: bool) -> Items {
        let blocks = geo.out_channels.div_ceil(conv.block);
        let chunks = if geo.out_h == 1 { geo.out_w.div_ceil(CHUNK) } else { 1 };
        // Chunks of equal size (the last may be shorter by less than one per chunk).
        let chunk = geo.out_w.div_ceil(chunks);
        let images_inner = groups_outer && images_inner;
        let size = group_size(&geo);
        let groups = block_groups(blocks, size);
        Items { geo, blocks, group_size: size, groups, rows: geo.out_h, chunks, chunk, groups_outer, images_inner }
    }

    /// Group `g`'s first block and block count.
    fn group(&self, g: usize) -> (usize, usize) {
        block_group(self.blocks, self.group_size, g)
    }

    fn count(&self) -> usize {
        self.geo.batch * self.groups * self.rows * self.chunks
    }

    /// The first and last output rows of image `n` that items `lo..hi` (some of them of image
    /// `n`) cover.
    fn output_rows(&self, lo: usize, hi: usize, n: usize) -> (usize, usize) {
        let last_row = self.rows.saturating_sub(1);
        if self.groups_outer {
            return (0, last_row);
        }
        let row_of = |item: usize| self.walk(item, item + 1).next().filter(|i| i.0 == n).map(|i| i.2);
        (row_of(lo).unwrap_or(0), hi.checked_sub(1).and_then(row_of).unwrap_or(last_row))
    }

    /// Items `lo..hi` in order, as `(image, group, row, first pixel, pixels)`: the first one
    /// decoded, the rest counted on (a division per item showed in small layers' profiles).
    fn walk(&self, lo: usize, hi: usize) -> impl Iterator<Item = (usize, usize, usize, usize, usize)> + '_ {
        // (At least 1: with no items, nothing below is used.)
        let (groups, chunks, row_chunks) = (self.groups.max(1), self.chunks.max(1), (self.rows * self.chunks).max(1));
        let (n, group, row_chunk) = if self.images_inner {
            let per_group = self.geo.batch.max(1) * row_chunks;
            (lo % per_group / row_chunks, lo / per_group, lo % row_chunks)
        } else {
            let (n, rest) = (lo / (groups * row_chunks), lo % (groups * row_chunks));
            if self.groups_outer {
                (n, rest / row_chunks, rest % row_chunks)
            } else {
                (n, rest % groups, rest / groups)
            }
        };
        let mut at = (n, group, row_chunk / chunks, row_chunk % chunks);
        (lo..hi).map(move |_| {
            let (n, group, row, chunk) = at;
            at = self.next(at);
            let first = chunk * self.chunk;
            (n, group, row, first, self.geo.out_w.saturating_sub(first).min(self.chunk))
        })
    }

    /// The item after `(image, group, row, chunk)`.
    fn next(&self, (n, group, row, chunk): (usize, usize, usize, usize)) -> (usize, usize, usize, usize) {
        if self.groups_outer {
            if chunk + 1 < self.chunks {
                return (n, group, row, chunk + 1);
            }
            if row + 1 < self.rows {
                return (n, group, row + 1, 0);
            }
            if self.images_inner {
                return if n + 1 < self.geo.batch { (n + 1, group, 0, 0) } else { (0, group + 1, 0, 0) };
            }
            if group + 1 < self.groups {
                return (n, group + 1, 0, 0);
            }
        } else {
            if group + 1 < self.groups {
                return (n, group + 1, row, chunk);
            }
            if chunk + 1 < self.chunks {
                return (n, 0, row, chunk + 1);
            }
            if row + 1 < self.rows {
                return (n, 0, row + 1, 0);
            }
        }
        (n + 1, 0, 0, 0)
    }
}

/// The taps `lo..hi` of a window starting at padded position `start` (`k` taps `dilation`
/// apart) that fall inside `pad..pad + extent`. Without dilation, no division.
pub(crate) fn taps_inside(start: usize, k: usize, dilation: usize, pad: usize, extent: usize) -> (usize, usize) {
    let over = |n: usize| if dilation == 1 { n } else { n.div_ceil(dilation) };
    let lo = over(pad.saturating_sub(start)).min(k);
    let end = pad + extent;
    let hi = if end <= start { 0 } else { over(end - start).min(k) };
    (lo, hi.max(lo))
}

/// The taps of output row `oy` that fall inside the input: `r_lo..r_hi`.
pub(crate) fn tap_rows(geo: &Conv2d, oy: usize) -> (usize, usize) {
    taps_inside(oy * geo.stride.0, geo.kernel.0, geo.dilation.0, geo.pad.0, geo.in_h)
}

/// The taps of output column `ox` inside the input: `s_lo..s_hi`.
fn tap_cols(geo: &Conv2d, ox: usize) -> (usize, usize) {
    taps_inside(ox * geo.stride.1, geo.kernel.1, geo.dilation.1, geo.pad.1, geo.in_w)
}

/// The output columns every tap of which is inside the input: `lo..hi` (possibly empty).
fn interior(geo: &Conv2d) -> (usize, usize) {
    let (sw, reach) = (geo.stride.1, (geo.kernel.1 - 1) * geo.dilation.1);
    let lo = geo.pad.1.div_ceil(sw).min(geo.out_w);
    // ox·sw + reach − pad < in_w  ⇔  ox·sw < in_w + pad − reach.
    let hi = (geo.in_w + geo.pad.1).checked_sub(reach).map_or(0, |limit| limit.div_ceil(sw)).min(geo.out_w);
    (lo, hi.max(lo))
}

/// Where a tile's results go, as raw pointers: callers check every extent.
#[derive(Clone, Copy)]
pub(crate) struct Sink {
    /// The output (and residual) at the tile's first block and pixel.
    pub out: *mut f32,
    pub residual: *const f32,
    pub strides: Strides,
    /// Output channels from the tile's first block on (fewer than its lanes in a last block).
    pub channels_left: usize,
    /// The bias from the tile's first channel (null: none).
    pub bias: *const f32,
    pub clamp: Option<(f32, f32)>,
    pub activation: Option<Activation>,
    /// The accumulators start from the output (a later chunk of the input channels) instead
    /// of the bias.
    pub accumulate: bool,
    /// The last chunk: the epilogue applies; otherwise the raw sums are stored.
    pub finish: bool,
}

impl Sink {
    /// This sink without its activation when a kernel's run of `blocks` output blocks of
    /// `lanes` channels, pixels one block apart, should store plain sums and sweep the
    /// activation over them afterwards (see the kernels' `activate_vectors`): a transcendental
    /// one (sigmoid, SiLU, tanh, GELU), the last chunk, no residual or clamp before it, whole
    /// blocks (a sweep would turn a short block's zero lanes into sigmoid(0)).
    pub(crate) fn deferring_sweep(&self, blocks: usize, lanes: usize, pixel: usize) -> Option<Sink> {
        let swept = matches!(
            self.activation,
            Some(Activation::Sigmoid | Activation::Silu | Activation::Tanh | Activation::Gelu | Activation::GeluTanh)
        );
        let plain = self.residual.is_null() && self.clamp.is_none();
        let whole = self.strides.lanes == lanes && pixel == lanes && self.channels_left >= blocks * lanes;
        (self.finish && swept && plain && whole).then_some(Sink { activation: None, ..*self })
    }

    /// The epilogue of one value stored at offset `at` (the last chunk: residual, clamp,
    /// activation; otherwise the raw sum), one lane of what the vector code computes.
    ///
    /// # Safety
    /// A residual holds element `at`.
    pub(crate) unsafe fn finish_value(&self, mut v: f32, at: usize) -> f32 {
        if self.finish {
            if !self.residual.is_null() {
                // SAFETY: the caller's promise.
                v += unsafe { *self.residual.add(at) };
            }
            if let Some((lo, hi)) = self.clamp {
                v = v.max(lo).min(hi);
            }
            if let Some(act) = self.activation {
                v = act.apply(v);
            }
        }
        v
    }
}

/// Runs of dense tiles along an output row, as raw pointers and strides.
#[derive(Clone, Copy)]
pub(crate) struct DenseRun {
    /// The input at the first tap `(r_lo, s_lo)` of the first pixel, the chunk's first channel.
    pub x: *const f32,
    pub x_strides: Strides,
    /// Input elements between consecutive pixels (`stride · pixel`).
    pub x_step: usize,
    /// Input elements between consecutive tap rows / columns.
    pub x_tap_row: usize,
    pub x_tap_col: usize,
    /// Input channels of the chunk.
    pub channels: usize,
    /// Taps visited: rows and columns.
    pub tap_rows: usize,
    pub tap_cols: usize,
    /// The weights of the first block at the first tap and channel.
    pub w: *const f32,
    /// Weight elements between input channels, tap rows (`KW·B`), output blocks.
    pub w_channel: usize,
    pub w_tap_row: usize,
    pub w_block: usize,
    /// Consecutive tiles of the kernel's pixels (the next one starts that many pixels on).
    pub tiles: usize,
    /// Sets of partial sums each whole input block is added in (see [`narrow_chains`]).
    pub chains: usize,
    pub sink: Sink,
    /// Cache lines of 16 floats from `ahead` a later item reads (the next group's weights),
    /// asked for into L2 a few per input block of the run's tiles (see `conv_share`).
    pub ahead: *const f32,
    pub ahead_lines: usize,
    /// Input channels ahead of the one being read whose weights a narrow first tile (see
    /// [`narrow_chains`]) asks for, every block's taps, as it reads each channel (0: none); see
    /// [`stream_ahead`].
    pub stream: usize,
}

/// Sets of partial sums a tile of `accumulators` takes over each whole input block (the
/// vector kernels and the scalar one alike): with fewer than 8 (a border pixel, a row's last
/// few), each accumulator is one chain of dependent multiply-adds that waits out the FMA
/// latency at every step; with input channels taken in turn by the sets (1, 2 or 4: a divisor
/// of every block), up to 8 independent sums are in flight. The sets are added in order at
/// the block's end.
pub(crate) fn narrow_chains(accumulators: usize) -> usize {
    (8 / accumulators.max(1)).clamp(1, MAX_CHAINS)
}

/// One output row of one channel block of a depthwise convolution, as raw pointers.
#[derive(Clone, Copy)]
pub(crate) struct DepthwiseRow {
    /// The input at the block's tap row `r_lo`, column 0.
    pub x: *const f32,
    /// Input elements between consecutive tap rows (`dilation · row`).
    pub x_tap_row: usize,
    pub tap_rows: usize,
    /// The weights of the block at tap `(r_lo, 0)`.
    pub w: *const f32,
    pub kw: usize,
    /// Columns: input width, left padding, stride, dilation; output width and its interior
    /// (where every tap column is inside the input).
    pub in_w: usize,
    pub pad: usize,
    pub stride: usize,
    pub dilation: usize,
    pub out_w: usize,
    pub interior: (usize, usize),
    /// The row's output (pixel 0).
    pub sink: Sink,
}

impl DepthwiseRow {
    /// The tap columns of output pixel `ox` inside the input (`s_lo..s_hi`), and the input
    /// column of its first one (`ox · stride + s_lo · dilation − pad`, 0 when there is none).
    pub(crate) fn columns(&self, ox: usize) -> (usize, usize, usize) {
        let left = ox * self.stride;
        let (s_lo, s_hi) = taps_inside(left, self.kw, self.dilation, self.pad, self.in_w);
        let first = if s_lo < s_hi { left + s_lo * self.dilation - self.pad } else { 0 };
        (s_lo, s_hi, first)
    }
}

/// Consecutive output rows of one channel block of a depthwise convolution, as raw pointers:
/// one call runs them all (a row of a small plane is little work).
#[derive(Clone, Copy)]
pub(crate) struct DepthwiseRows {
    /// The block's input plane (row 0, column 0) and its weights (tap 0).
    pub x: *const f32,
    pub w: *const f32,
    pub geo: Conv2d,
    pub block: usize,
    pub interior: (usize, usize),
    /// Output rows `first..first + count`; the sink at row `first`, pixel 0.
    pub first: usize,
    pub count: usize,
    pub sink: Sink,
}

impl DepthwiseRows {
    /// Row `k` of the run.
    pub(crate) fn row(&self, k: usize) -> DepthwiseRow {
        let (g, b) = (&self.geo, self.block);
        let oy = self.first + k;
        let (r_lo, r_hi) = tap_rows(g, oy);
        let x_row = g.in_w * b;
        let x = if r_lo < r_hi { (oy * g.stride.0 + r_lo * g.dilation.0 - g.pad.0) * x_row } else { 0 };
        let at = k * g.out_w * b;
        let offset = |p: *const f32| if p.is_null() { p } else { p.wrapping_add(at) };
        DepthwiseRow {
            x: self.x.wrapping_add(x),
            x_tap_row: g.dilation.0 * x_row,
            tap_rows: r_hi - r_lo,
            w: self.w.wrapping_add(r_lo.min(g.kernel.0.saturating_sub(1)) * g.kernel.1 * b),
            kw: g.kernel.1,
            in_w: g.in_w,
            pad: g.pad.1,
            stride: g.stride.1,
            dilation: g.dilation.1,
            out_w: g.out_w,
            interior: self.interior,
            sink: Sink { out: self.sink.out.wrapping_add(at), residual: offset(self.sink.residual), ..self.sink },
        }
    }
}

/// Output pixels a depthwise work item covers at least (whole rows of a plane).
const DEPTHWISE_ITEM: usize = 256;

/// Share `task` of `tasks` of the convolution: `out = clamp(conv(x, w) + bias + residual)`,
/// `w` packed by [`BlockedConv::pack_weights`], the residual stored like the output.
pub fn conv_share(
    isa: Isa,
    conv: &BlockedConv,
    x: &[f32],
    packed_w: &[f32],
    out: &mut [f32],
    epilogue: ConvEpilogue<'_>,
    scratch: &mut [f32],
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    conv.check()?;
    check_share(task, tasks)?;
    let (x_len, w_len, out_len) = (conv.input_len()?, conv.packed_weights_len()?, conv.output_len()?);
    need("input", x.len(), x_len)?;
    need("packed weights", packed_w.len(), w_len)?;
    need("output", out.len(), out_len)?;
    let scratch_len = conv.scratch_len()?;
    need("scratch", scratch.len(), scratch_len)?;
    if let Some(b) = epilogue.bias {
        need("bias", b.len(), conv.geo.out_channels)?;
    }
    if let Some(r) = epilogue.residual {
        need("residual", r.len(), out_len)?;
    }
    if let Some(tail) = &epilogue.tail {
        tail.check(out_len, conv.geo.out_channels)?;
    }
    let geo = conv.canonical();
    let x_strides = Strides::of(conv.input, conv.block, geo.in_channels, geo.in_h, geo.in_w);
    let out_strides = Strides::of(conv.output, conv.block, geo.out_channels, geo.out_h, geo.out_w);
    let (ilo, ihi) = interior(&geo);
    let b = conv.block;
    let (kh, kw) = geo.kernel;
    let vector = isa != Isa::Scalar && isa.is_available() && block_for(isa) == b;
    // Every kernel call below writes through this pointer (the tiles, then the tail).
    let (out, out_len) = (out.as_mut_ptr(), out.len());
    let sink = |n: usize, oc: usize, oy: usize, ox: usize| {
        let at = out_strides.at(n, oc, oy, ox);
        assert!(at < out_len, "a tile starts inside the output");
        Sink {
            out: out.wrapping_add(at),
            residual: epilogue.residual.map_or(std::ptr::null(), |r| r[at..].as_ptr()),
            strides: out_strides,
            channels_left: geo.out_channels - oc,
            bias: epilogue.bias.map_or(std::ptr::null(), |bias| bias[oc..].as_ptr()),
            clamp: epilogue.clamp,
            activation: epilogue.activation,
            accumulate: false,
            finish: true,
        }
    };
    if geo.is_depthwise() {
        // Items are (image, channel block, run of rows): runs of at least `DEPTHWISE_ITEM`
        // pixels, so a small plane is one call.
        let rows = (DEPTHWISE_ITEM.div_ceil(geo.out_w)).clamp(1, geo.out_h);
        let (runs, blocks) = (geo.out_h.div_ceil(rows), geo.out_channels.div_ceil(b));
        let (lo, hi) = share(geo.batch * blocks * runs, tasks, task);
        for item in lo..hi {
            let (run, block, n) = (item % runs, item / runs % blocks, item / runs / blocks);
            let (oc, first) = (block * b, run * rows);
            let plane = DepthwiseRows {
                x: x[x_strides.at(n, oc, 0, 0)..].as_ptr(),
                w: packed_w[block * kh * kw * b..].as_ptr(),
                geo,
                block: b,
                interior: (ilo, ihi),
                first,
                count: rows.min(geo.out_h - first),
                sink: sink(n, oc, first, 0),
            };
            // SAFETY: each row's taps lie inside the checked input (rows from `tap_rows`,
            // columns from `columns` per pixel), its pixels and block inside the output.
            unsafe { run_depthwise_rows(isa, vector, b, &plane) };
            if let Some(tail) = &epilogue.tail {
                let span = plane.count * geo.out_w;
                // SAFETY: the rows' pixels of the block lie inside the output (checked above).
                unsafe { run_tail(isa, tail, out, &out_strides, &geo, (n, oc, b), (first, 0, span)) };
            }
        }
        return Ok(());
    }
    let (w_channel, w_block) = (kh * kw * b, geo.in_channels * kh * kw * b);
    // A 1×1 layer's block is too short a run for sets of sums to pay (a stride-2 one ran
    // 1.13× the time with them).
    let one_tap = (kh, kw) == (1, 1);
    let widened = conv.width_padding();
    // One image's widened copy, and whether the scratch holds every image (see
    // `BlockedConv::widened_images`).
    let image_len = widened.map_or(Ok(0), |(left, right)| conv.padded_image_len(left + right))?;
    let whole_batch = widened.is_some() && conv.widened_images(image_len)? > 1;
    let items = Items::new(conv, geo, conv.groups_outer()?, widened.is_none() || whole_batch);
    let (lo, hi) = share(items.count(), tasks, task);
    // With a widened copy (see `BlockedConv::width_padding`), the taps read it: every column
    // inside, so every pixel of a row in tiles of near-equal width. The rows of each image the
    // share's items read are copied once (items run image by image; with groups outermost a
    // share's items may span groups, each reading every row), or every image at once into a
    // scratch that holds the batch when the images run inside each group.
    let (tap_geo, tap_strides) = match widened {
        Some((left, right)) => {
            let tap_geo = Conv2d { in_w: geo.in_w + left + right, pad: (geo.pad.0, 0), ..geo };
            (tap_geo, Strides::of(conv.input, b, geo.in_channels, geo.in_h, tap_geo.in_w))
        }
        None => (geo, x_strides),
    };
    let (ilo, ihi) = interior(&tap_geo);
    let mut copied = None;
    // Per group size (1 to 3 blocks): the tile's pixels and the input channels per pass. The
    // scalar kernel takes the vector one's tiles for the block: a tile's width sets its sets
    // of sums, hence the bits.
    let tile_isa = if b == block_for(Isa::Avx512) { Isa::Avx512 } else { Isa::Avx2Fma };
    let per_size: [(usize, usize); 4] =
        std::array::from_fn(|blocks| (dense_pixels(tile_isa, blocks), channel_chunk(conv, blocks)));
    // The last item's pass over a group (its image, or 0 when the images run inside the
    // groups, and the group), and the one its prefetch brought into L2.
    let (mut last, mut brought) = (None, None);
    for (n, group, oy, first, pixels) in items.walk(lo, hi) {
        // Weights larger than the input are read group by group, each group's first from
        // memory: the next group's are prefetched over this group's items, a part of them per
        // item (by its image, row and chunk) and per run (by its part of the item's work). MobileNet-v2
        // on one thread 3.35 -> 3.15 ms (its 14x14 and 7x7 layers; Zen 5); a 160->960 1x1
        // layer over 7x7 with cold caches 0.110 -> 0.088 ms. Only while both groups' weights
        // fit [`PREFETCH_GROUPS_BYTES`].
        let (first_block, blocks) = items.group(group);
        let next = (items.groups_outer && group + 1 < items.groups).then(|| items.group(group + 1)).filter(
            |&(_, next_blocks)| {
                (blocks + next_blocks).saturating_mul(w_block) <= PREFETCH_GROUPS_BYTES / size_of::<f32>()
            },
        );
        // The images a group's items cover, and this item's among them.
        let (images, image_at) = if items.images_inner { (geo.batch, n) } else { (1, 0) };
        let (item_ahead, item_lines) = if let Some((next_first, next_blocks)) = next {
            let lines = (next_blocks * w_block).div_ceil(16);
            let per_item = lines.div_ceil(images * items.rows * items.chunks);
            let first_line = ((image_at * items.rows + oy) * items.chunks + first / items.chunk) * per_item;
            (next_first * w_block + first_line * 16, per_item.min(lines.saturating_sub(first_line)))
        } else {
            (0, 0)
        };
        // A group's first item read in this share streams its weights from L3 or memory
        // (with groups outermost; images inside a group find them in L2, as rows outermost
        // re-read smaller weights from L2).
        let pass = (n - image_at, group);
        let entering = last != Some(pass);
        let fresh = items.groups_outer && entering && brought != Some(pass);
        if entering {
            // The next group is prefetched whole only by a share that runs this one whole.
            brought = (next.is_some() && image_at == 0 && oy == 0 && first == 0).then_some((pass.0, group + 1));
        }
        last = Some(pass);
        let stream = stream_ahead(fresh, w_channel);
        let item_work = pixels * geo.in_channels;
        let mut sent = 0;
        // The scratch holds image `n` at `slot` (the whole batch, or one image at a time).
        let slot = if whole_batch { n } else { 0 };
        if let Some((left, _)) = widened
            && copied != Some(n)
            && !(whole_batch && copied.is_some())
        {
            let images = if whole_batch { 0..geo.batch } else { n..n + 1 };
            for m in images {
                let rows = input_rows(&geo, items.output_rows(lo, hi, m));
                let at = if whole_batch { m } else { 0 };
                widen(x, &x_strides, (m, geo.in_h, geo.in_w, left), rows, &mut scratch[at * image_len..][..image_len]);
            }
            copied = Some(n);
        }
        let (source, image): (&[f32], usize) = if widened.is_some() { (&scratch[..scratch_len], slot) } else { (x, n) };
        let (most, chunk) = per_size[blocks];
        let (r_lo, r_hi) = tap_rows(&geo, oy);
        let oc = first_block * b;
        for c0 in (0..geo.in_channels).step_by(chunk) {
            let c1 = (c0 + chunk).min(geo.in_channels);
            // Runs of pixels: border pixels one at a time with their own taps, the interior
            // in tiles of near-equal width, at most `most` (a narrow last tile, as a 7×7
            // output's 49 pixels in 4 × 12 + 1, waits on its few accumulators' latency): the
            // wider ones first, the narrower ones in the loop's next iteration.
            let mut ox = first;
            while ox < first + pixels {
                let inside = ox >= ilo && ox < ihi;
                let left = if inside { ihi.min(first + pixels) - ox } else { 1 };
                let count = left.div_ceil(most);
                let (p, tiles) = match left % count {
                    0 => (left / count, count),
                    wider => (left / count + 1, wider),
                };
                let (s_lo, s_hi) = if inside { (0, kw) } else { tap_cols(&tap_geo, ox) };
                let (iy, ix) = (oy * geo.stride.0 + r_lo * geo.dilation.0, ox * geo.stride.1 + s_lo * geo.dilation.1);
                // The first tap's input position and weights, when there is one (else nothing
                // is read).
                let (x_at, w_at) = if r_lo < r_hi && s_lo < s_hi {
                    (
                        tap_strides.at(image, c0, iy - geo.pad.0, ix - tap_geo.pad.1),
                        first_block * w_block + c0 * w_channel + (r_lo * kw + s_lo) * b,
                    )
                } else {
                    (0, 0)
                };
                // This run's part of the item's prefetch: up to its share of the item's work.
                let done = c0 * pixels + (c1 - c0) * (ox + p * tiles - first);
                let target = (item_lines as u128 * done as u128).div_ceil(item_work.max(1) as u128) as usize;
                let run_lines = target.min(item_lines).saturating_sub(sent);
                let run = DenseRun {
                    x: source[x_at..].as_ptr(),
                    x_strides: tap_strides,
                    x_step: geo.stride.1 * tap_strides.pixel,
                    x_tap_row: geo.dilation.0 * tap_strides.row,
                    x_tap_col: geo.dilation.1 * tap_strides.pixel,
                    channels: c1 - c0,
                    tap_rows: r_hi - r_lo,
                    tap_cols: s_hi - s_lo,
                    w: packed_w[w_at..].as_ptr(),
                    w_channel,
                    w_tap_row: kw * b,
                    w_block,
                    tiles,
                    chains: if one_tap { 1 } else { narrow_chains(blocks * p) },
                    sink: Sink { accumulate: c0 > 0, finish: c1 == geo.in_channels, ..sink(n, oc, oy, ox) },
                    ahead: packed_w.as_ptr().wrapping_add(item_ahead + sent * 16),
                    ahead_lines: run_lines,
                    stream,
                };
                sent += run_lines;
                // SAFETY: the tiles' taps, pixels and blocks lie inside the checked tensors:
                // the pixels `ox..ox + p·tiles` are in the row, their taps `r_lo..r_hi ×
                // s_lo..s_hi` inside the input, the channels `c0..c1` inside its channels,
                // the blocks below the output's block count.
                unsafe { run_dense(isa, vector, b, &run, blocks, p) };
                ox += p * tiles;
            }
        }
        if let Some(tail) = &epilogue.tail {
            // SAFETY: the item's pixels and blocks lie inside the output (checked above).
            unsafe { run_tail(isa, tail, out, &out_strides, &geo, (n, oc, blocks * b), (oy, first, pixels)) };
        }
    }
    Ok(())
}

/// The input rows `lo..hi` that the output rows `first..=last` read.
fn input_rows(geo: &Conv2d, (first, last): (usize, usize)) -> (usize, usize) {
    let reach = geo.kernel.0.saturating_sub(1).saturating_mul(geo.dilation.0).saturating_add(1);
    let lo = first.saturating_mul(geo.stride.0).saturating_sub(geo.pad.0);
    let hi = last.saturating_mul(geo.stride.0).saturating_add(reach).saturating_sub(geo.pad.0).min(geo.in_h);
    (lo.min(hi), hi)
}

/// Copies the input rows `rows` of image `n` of `x` (`in_h` rows of `in_w` pixels, laid out as
/// `strides` says) into `widened`: each row at column `left` of a row as long as `widened`
/// holds per row, zeros around it. Only the rows a share's items read: each share copies into
/// its own scratch (a first layer over 96×96 copied the whole image in each of its 8 shares:
/// 4% of MobileNet-v2's time at that size on two threads).
fn widen(
    x: &[f32],
    strides: &Strides,
    (n, in_h, in_w, left): (usize, usize, usize, usize),
    rows: (usize, usize),
    widened: &mut [f32],
) {
    let row = in_w * strides.pixel;
    // Rows of every channel (block) and input row, one after another in either layout.
    let all_rows = strides.image.checked_div(row).unwrap_or(0);
    debug_assert!(all_rows > 0 && widened.len() % all_rows == 0, "every extent is positive");
    let Some(width) = widened.len().checked_div(all_rows) else { return };
    let image = &x[n * strides.image..][..strides.image];
    let needed = |(k, _): &(usize, _)| (rows.0..rows.1).contains(&(k % in_h.max(1)));
    for (_, (src, dst)) in image.chunks_exact(row).zip(widened.chunks_exact_mut(width)).enumerate().filter(needed) {
        let (before, rest) = dst.split_at_mut(left * strides.pixel);
        let (copy, after) = rest.split_at_mut(row);
        before.fill(0.0);
        copy.copy_from_slice(src);
        after.fill(0.0);
    }
}

/// Runs `tail` over the output channels `c0..c0 + channels` (whole blocks from `c0`) of image
/// `n`, from row `oy`, pixel `ox`, for `span` pixels (a run of whole rows when it passes a
/// row's end), in place and while the kernel's results are in cache. A blocked output's lanes
/// past the channels stay zero.
///
/// # Safety
/// The pixels and channels lie inside `out` (laid out as `strides` says) and the tail's
/// operands (checked by [`Tail::check`]).
unsafe fn run_tail(
    isa: Isa,
    tail: &Tail<'_>,
    out: *mut f32,
    strides: &Strides,
    geo: &Conv2d,
    (n, c0, channels): (usize, usize, usize),
    (oy, ox, span): (usize, usize, usize),
) {
    let m = geo.out_channels;
    let last = (c0 + channels).min(m);
    let source = |at: usize, lanes: &[f32; 16], block: usize, c: usize| {
        let mut sources = [Source::Value(0.0); MAX_INPUTS];
        sources[0] = Source::Full(out.wrapping_add(at));
        for (s, operand) in sources[1..].iter_mut().zip(&tail.operands) {
            *s = match operand {
                Some((data, TailOperand::Full)) => Source::Full(data.as_ptr().wrapping_add(at)),
                Some((_, TailOperand::PerChannel)) if block > 1 => Source::Lanes(lanes.as_ptr(), block),
                Some((data, TailOperand::PerChannel)) => Source::Value(data[c]),
                None => Source::Value(0.0),
            };
        }
        sources
    };
    if strides.lanes == 1 {
        for c in c0..last {
            let at = strides.at(n, c, oy, ox);
            // SAFETY: the caller's promise; a plane's pixels are contiguous.
            unsafe { segment(isa, &tail.program, source(at, &[0.0; 16], 1, c), out.add(at), span) };
        }
        return;
    }
    let block = strides.lanes;
    for first in (c0..last).step_by(block) {
        let valid = (m - first).min(block);
        let at = strides.at(n, first, oy, ox);
        // One block's per-channel values, zero past the channels (the operand holds `m`).
        let mut lanes = [[0.0f32; 16]; MAX_INPUTS - 1];
        for (values, operand) in lanes.iter_mut().zip(&tail.operands) {
            if let Some((data, TailOperand::PerChannel)) = operand {
                values[..valid].copy_from_slice(&data[first..first + valid]);
            }
        }
        let mut sources = source(at, &lanes[0], block, first);
        if let (Some((_, TailOperand::PerChannel)), Source::Lanes(..)) = (&tail.operands[1], sources[2]) {
            sources[2] = Source::Lanes(lanes[1].as_ptr(), block);
        }
        // SAFETY: the caller's promise; a block's pixels are contiguous.
        unsafe {
            segment(isa, &tail.program, sources, out.add(at), span * block);
            if valid < block {
                for p in 0..span {
                    std::slice::from_raw_parts_mut(out.add(at + p * block + valid), block - valid).fill(0.0);
                }
            }
        }
    }
}

/// Input channels a dense tile takes per pass: as many as keep its weights within 64 KiB, a
/// multiple of the input's lanes. A tile reads each weight vector for a dozen multiply-adds,
/// so weights from the L2 cache keep up, while every further pass adds a round trip of the
/// partial sums (measured on Zen 5 against 16 KiB, which kept them in L1: 3×3/2 128→256 at
/// 28×28 75% → 83-86% of peak, 1×1 144→24 at 56×56 59% → 63-65%). Partial sums go through
/// the output, which must then be blocked; the order of every element's additions does not
/// change.
fn channel_chunk(conv: &BlockedConv, blocks: usize) -> usize {
    let g = &conv.geo;
    if conv.output != Layout::Blocked {
        return usize::MAX;
    }
    let lanes = if conv.input == Layout::Blocked { conv.block } else { 1 };
    let per_channel = blocks * g.kernel.0 * g.kernel.1 * conv.block * size_of::<f32>();
    let chunk = (64 * 1024 / per_channel.max(1)) / lanes * lanes;
    chunk.max(lanes)
}

/// Runs dense tiles with `isa`'s vector kernel when `vector`, else with the scalar one.
///
/// # Safety
/// The run's pointers are valid for its extents (see [`DenseRun`]).
unsafe fn run_dense(isa: Isa, vector: bool, block: usize, t: &DenseRun, blocks: usize, pixels: usize) {
    #[cfg(target_arch = "x86_64")]
    if vector {
        use crate::tile::x86::{avx2, avx512};
        macro_rules! dense {
            ($module:ident, [$($p1:literal)*], [$($p2:literal)*], [$($p3:literal)*]) => {
                match (blocks, pixels) {
                    $((1, $p1) => $module::blocked_dense::<1, $p1>(t),)*
                    $((2, $p2) => $module::blocked_dense::<2, $p2>(t),)*
                    $((3, $p3) => $module::blocked_dense::<3, $p3>(t),)*
                    _ => unreachable!("tiles hold at most the ISA's blocks and pixels"),
                }
            };
        }
        // SAFETY: `vector` says the CPU has the ISA and the block is its vector width.
        unsafe {
            if isa == Isa::Avx512 {
                dense!(avx512, [1 2 3 4 5 6 7 8 9 10 11 12], [1 2 3 4 5 6 7 8 9 10 11 12], [1 2 3 4 5 6 7 8])
            } else {
                dense!(avx2, [1 2 3 4 5 6 7 8 9 10 11 12], [1 2 3 4 5 6], [1 2 3])
            }
        }
        return;
    }
    let _ = (isa, vector);
    // SAFETY: forwarded.
    unsafe { scalar_dense(t, block, blocks, pixels) }
}

/// Runs a depthwise run of rows with `isa`'s vector kernel when `vector`, else with the
/// scalar one.
///
/// # Safety
/// The rows' pointers are valid for their extents (see [`DepthwiseRows`]).
unsafe fn run_depthwise_rows(isa: Isa, vector: bool, block: usize, rows: &DepthwiseRows) {
    #[cfg(target_arch = "x86_64")]
    if vector {
        use crate::tile::x86::{avx2, avx512};
        // SAFETY: `vector` says the CPU has the ISA and the block is its vector width.
        unsafe {
            if isa == Isa::Avx512 { avx512::blocked_depthwise_rows(rows) } else { avx2::blocked_depthwise_rows(rows) }
        }
        return;
    }
    let _ = (isa, vector);
    for k in 0..rows.count {
        // SAFETY: forwarded.
        unsafe { scalar_depthwise_row(&rows.row(k), block) }
    }
}

/// Offset of channel `c` (from the sink's first, a multiple of the block) at pixel `p`.
fn sink_offset(sink: &Sink, block: usize, c: usize, p: usize) -> usize {
    let os = &sink.strides;
    let channel = if os.lanes == 1 { c * os.channel } else { (c / block) * os.channel + c % block };
    channel + p * os.pixel
}

/// The reference epilogue of channel `c` at pixel `p`: the start value, then after the sums
/// `finish`. Lanes past the channels hold zero in a blocked output.
///
/// # Safety
/// The sink's pointers hold channel `c` at pixel `p`.
unsafe fn scalar_start(sink: &Sink, block: usize, c: usize, p: usize) -> f32 {
    // SAFETY: forwarded.
    unsafe {
        if sink.accumulate {
            *sink.out.add(sink_offset(sink, block, c, p))
        } else if sink.bias.is_null() || c >= sink.channels_left {
            0.0
        } else {
            *sink.bias.add(c)
        }
    }
}

/// # Safety
/// As [`scalar_start`].
unsafe fn scalar_finish(sink: &Sink, block: usize, c: usize, p: usize, acc: f32) {
    let at = sink_offset(sink, block, c, p);
    // SAFETY: forwarded.
    unsafe {
        if c >= sink.channels_left {
            if sink.strides.lanes != 1 {
                *sink.out.add(at) = 0.0;
            }
            return;
        }
        *sink.out.add(at) = sink.finish_value(acc, at);
    }
}

/// The reference dense tiles: the same operations in the same order, one lane at a time.
///
/// # Safety
/// As [`run_dense`].
unsafe fn scalar_dense(t: &DenseRun, block: usize, blocks: usize, pixels: usize) {
    let xs = &t.x_strides;
    // SAFETY: every offset is inside the run's extents.
    unsafe {
        for p in 0..pixels * t.tiles {
            for c in 0..blocks * block {
                // Input channel `ci`'s tap `(r, s)` added to `acc`.
                let tap = |ci: usize, r: usize, s: usize, acc: f32| {
                    let x = t.x.add((ci / xs.lanes) * xs.channel + ci % xs.lanes + p * t.x_step);
                    let w = t.w.add((c / block) * t.w_block + ci * t.w_channel + c % block);
                    (*w.add(r * t.w_tap_row + s * block)).mul_add(*x.add(r * t.x_tap_row + s * t.x_tap_col), acc)
                };
                let mut acc = scalar_start(&t.sink, block, c, p);
                // Plain input blocks in the vector kernels' sets of sums (`narrow_chains`).
                let whole = if t.chains > 1 && xs.lanes == block { t.channels / block * block } else { 0 };
                for b0 in (0..whole).step_by(block) {
                    let mut part = [0.0; MAX_CHAINS];
                    part[0] = acc;
                    for l in (0..block).step_by(t.chains) {
                        for r in 0..t.tap_rows {
                            for s in 0..t.tap_cols {
                                for (k, sum) in part.iter_mut().enumerate().take(t.chains) {
                                    *sum = tap(b0 + l + k, r, s, *sum);
                                }
                            }
                        }
                    }
                    acc = part[1..t.chains].iter().fold(part[0], |a, &v| a + v);
                }
                for ci in whole..t.channels {
                    for r in 0..t.tap_rows {
                        for s in 0..t.tap_cols {
                            acc = tap(ci, r, s, acc);
                        }
                    }
                }
                scalar_finish(&t.sink, block, c, p, acc);
            }
        }
    }
}

/// The reference depthwise row.
///
/// # Safety
/// As [`run_depthwise_row`].
unsafe fn scalar_depthwise_row(row: &DepthwiseRow, block: usize) {
    // SAFETY: every offset is inside the row's extents.
    unsafe {
        for ox in 0..row.out_w {
            let (s_lo, s_hi, first) = row.columns(ox);
            for lane in 0..block {
                let mut acc = scalar_start(&row.sink, block, lane, ox);
                for r in 0..row.tap_rows {
                    for s in s_lo..s_hi {
                        let x = *row.x.add(r * row.x_tap_row + (first + (s - s_lo) * row.dilation) * block + lane);
                        acc = (*row.w.add((r * row.kw + s) * block + lane)).mul_add(x, acc);
                    }
                }
                scalar_finish(&row.sink, block, lane, ox, acc);
            }
        }
    }
}

/// How a tile of blocks of a blocked output (the last one possibly partial) finishes when
/// each value takes a vector operation or two (a plain store, a clamp, a residual, the
/// piecewise-linear activations): decided once per run of tiles (`plain_finish` in a kernel's
/// module), with the output's pointer and strides copied out. Decided per tile (the epilogue's
/// kind matched anew from the sink), the accumulators went through memory before the branch
/// to the general path (`finish_general`) on every tile: a 16→96 1×1 layer over 112×112 took
/// 0.234 ms that way and 0.19 this one, 24→144 over 56×56 0.111 and 0.098, a 3×3 depthwise 144
/// over 56×56 0.073 and 0.066, and with a partial last block 144→24 over 56×56 0.136 and 0.115
/// (Zen 5, one thread).
#[derive(Clone, Copy)]
pub(crate) struct Plain<V> {
    pub kind: PlainKind<V>,
    pub out: *mut f32,
    pub channel: usize,
    pub pixel: usize,
    /// The lanes of the tile's last block inside the channels, when it is a last partial block
    /// the epilogue finishes (its other lanes are stored as zeros).
    pub last_lanes: Option<u32>,
}

#[derive(Clone, Copy)]
pub(crate) enum PlainKind<V> {
    Store,
    Clamp(V, V),
    Residual(*const f32),
    ResidualClamp(*const f32, V, V),
    LeakyRelu(V),
    HardSwish,
    HardSigmoid(V, V),
}

/// The epilogue and stores of one tile's accumulators (`[[Vector; P]; OB]`) at output
/// offset `$at` (elements from the sink's first pixel), `$whole` the run's [`Plain`] (or
/// `None`): whole blocks of a blocked output in place, one unrolled pass per kind of epilogue
/// (a macro: a function taking them was not inlined, and the accumulators went through
/// memory; branches inside the pass kept it from being unrolled, and it then cost as much as
/// a short reduction); a transcendental activation a block's pixels at once; a last partial
/// block with its lanes past the channels set to zero; a planar output's channels, each to its
/// own plane, by `planar_store`. Expands inside a kernel, over its module's vector helpers.
#[cfg(target_arch = "x86_64")]
macro_rules! blocked_finish {
    ($whole:expr, $sink:expr, $acc:expr, $at:expr) => {{
        let acc = $acc;
        let base = $at;
        if let Some(whole) = $whole {
            let crate::blocked::Plain { kind, out, channel, pixel, last_lanes } = whole;
            match kind {
                crate::blocked::PlainKind::Store => {
                    crate::blocked::each_vector!(acc, base, (out, channel, pixel, last_lanes), |v, _at| v)
                }
                crate::blocked::PlainKind::Clamp(lo, hi) => {
                    crate::blocked::each_vector!(acc, base, (out, channel, pixel, last_lanes), |v, _at| min(
                        max(v, lo),
                        hi
                    ))
                }
                crate::blocked::PlainKind::Residual(residual) => {
                    crate::blocked::each_vector!(acc, base, (out, channel, pixel, last_lanes), |v, at| add(
                        v,
                        load(residual.add(at))
                    ))
                }
                crate::blocked::PlainKind::ResidualClamp(residual, lo, hi) => {
                    crate::blocked::each_vector!(acc, base, (out, channel, pixel, last_lanes), |v, at| min(
                        max(add(v, load(residual.add(at))), lo),
                        hi
                    ))
                }
                crate::blocked::PlainKind::LeakyRelu(alpha) => {
                    crate::blocked::each_vector!(acc, base, (out, channel, pixel, last_lanes), |v, _at| leaky_relu(
                        v, alpha
                    ))
                }
                crate::blocked::PlainKind::HardSwish => {
                    crate::blocked::each_vector!(acc, base, (out, channel, pixel, last_lanes), |v, _at| hard_swish(v))
                }
                crate::blocked::PlainKind::HardSigmoid(alpha, beta) => {
                    crate::blocked::each_vector!(acc, base, (out, channel, pixel, last_lanes), |v, _at| hard_sigmoid(
                        v, alpha, beta
                    ))
                }
            }
        } else {
            // A copy made here: the accumulators go to memory on this path only.
            let copy = acc;
            finish_general($sink, &copy, base);
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use blocked_finish;

/// Stores `value(v, at)` for every accumulator `v` of a tile at its output offset `at` (a
/// blocked output's blocks; a last partial one's lanes past the channels as zeros when
/// `last_lanes` says).
#[cfg(target_arch = "x86_64")]
macro_rules! each_vector {
    ($acc:expr, $base:expr, ($out:expr, $channel:expr, $pixel:expr, $last_lanes:expr), |$v:ident, $at:ident| $value:expr) => {{
        // Two loops rather than a test per vector: the test kept the whole blocks' stores
        // from running as fast as without it (a 32→192 1×1 layer: 1.08× the time).
        match $last_lanes {
            None => {
                for (ob, row) in $acc.iter().enumerate() {
                    for (p, &$v) in row.iter().enumerate() {
                        let $at = $base + ob * $channel + p * $pixel;
                        store_n($out.add($at), $value, LANES);
                    }
                }
            }
            Some(lanes) => {
                let last = $acc.len() - 1;
                for (ob, row) in $acc.iter().enumerate() {
                    for (p, &$v) in row.iter().enumerate() {
                        let $at = $base + ob * $channel + p * $pixel;
                        let value = if ob == last { select(lanes, $value, zero()) } else { $value };
                        store_n($out.add($at), value, LANES);
                    }
                }
            }
        }
    }};
}

/// Sets of partial sums a narrow tile keeps at most (see [`narrow_chains`]).
pub(crate) const MAX_CHAINS: usize = 4;

/// One input channel and tap of a dense tile: the `OB` blocks' weights loaded, then each
/// pixel's input broadcast and multiplied into its `OB` accumulators (`OB` loads, `P`
/// broadcasts, `OB·P` multiply-adds; `OB + 1 + OB·P` registers).
#[cfg(target_arch = "x86_64")]
macro_rules! blocked_step {
    ($acc:expr, $x:expr, $w:expr, $t:expr) => {{
        let (x, w, t) = ($x, $w, $t);
        let mut wv = [zero(); OB];
        for (ob, v) in wv.iter_mut().enumerate() {
            *v = load(w.add(ob * t.w_block));
        }
        for p in 0..P {
            let xv = splat(*x.add(p * t.x_step));
            for ob in 0..OB {
                $acc[ob][p] = fma(wv[ob], xv, $acc[ob][p]);
            }
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use blocked_step;
#[cfg(target_arch = "x86_64")]
pub(crate) use each_vector;

/// The vector kernels, written over a module's vector helpers (see [`crate::tile`]).
#[cfg(target_arch = "x86_64")]
macro_rules! blocked_kernel {
    ($feature:literal) => {
        use crate::blocked::{blocked_finish, blocked_step};

        /// The epilogue and stores of a tile no [`crate::blocked::Plain`] covers: a
        /// transcendental activation (after a residual or clamp, or short of whole blocks) a
        /// block's pixels at once (a sigmoid's dependency chains interleaved across them), a
        /// last partial block with its lanes past the channels set to zero, a planar output's
        /// channels each to its own plane. Not inlined: its accumulators go through memory,
        /// and inlined, they did so on every tile's path, the whole ones' too.
        ///
        /// # Safety
        /// The sink's output (and residual) hold the tile's pixels and blocks at `base`.
        #[inline(never)]
        #[target_feature(enable = $feature)]
        unsafe fn finish_general<const OB: usize, const P: usize>(
            sink: &crate::blocked::Sink,
            acc: &[[Vector; P]; OB],
            base: usize,
        ) {
            let os = &sink.strides;
            let clamp = if sink.finish { sink.clamp } else { None };
            let residual = if sink.finish { sink.residual } else { std::ptr::null() };
            let activation = if sink.finish { sink.activation } else { None };
            // SAFETY: the caller's promise.
            unsafe {
                for (ob, row) in acc.iter().enumerate() {
                    let first = ob * LANES;
                    if first >= sink.channels_left {
                        continue;
                    }
                    let valid = (sink.channels_left - first).min(LANES);
                    if os.lanes != LANES {
                        planar_store(sink, first, valid, base, row);
                        continue;
                    }
                    let row = with_residual_and_clamp(*row, residual, clamp, base + ob * os.channel, os.pixel);
                    for (p, &v) in activate_row(row, activation).iter().enumerate() {
                        let v = if sink.finish && valid < LANES { select((1u32 << valid) - 1, v, zero()) } else { v };
                        store_n(sink.out.add(base + ob * os.channel + p * os.pixel), v, LANES);
                    }
                }
            }
        }

        /// How tiles of `blocks` blocks finish into `sink` when its epilogue takes a vector
        /// operation or two (see [`crate::blocked::Plain`]).
        #[inline]
        #[target_feature(enable = $feature)]
        fn plain_finish(sink: &crate::blocked::Sink, blocks: usize) -> Option<crate::blocked::Plain<Vector>> {
            use crate::blocked::PlainKind as K;
            use crate::conv::Activation;
            let os = &sink.strides;
            // Every block but the last whole (tiles group the blocks below the channel count).
            let full = blocks.checked_sub(1)? * LANES;
            if os.lanes != LANES || sink.channels_left <= full {
                return None;
            }
            let partial = sink.channels_left - full < LANES;
            let last_lanes = (sink.finish && partial).then(|| (1u32 << (sink.channels_left - full)) - 1);
            let kind = if !sink.finish {
                K::Store
            } else {
                let residual = (!sink.residual.is_null()).then_some(sink.residual);
                match (residual, sink.clamp, sink.activation) {
                    (None, None, None) => K::Store,
                    (None, Some((lo, hi)), None) => K::Clamp(splat(lo), splat(hi)),
                    (Some(r), None, None) => K::Residual(r),
                    (Some(r), Some((lo, hi)), None) => K::ResidualClamp(r, splat(lo), splat(hi)),
                    (None, None, Some(Activation::LeakyRelu(alpha))) => K::LeakyRelu(splat(alpha)),
                    (None, None, Some(Activation::HardSwish)) => K::HardSwish,
                    (None, None, Some(Activation::HardSigmoid { alpha, beta })) => {
                        K::HardSigmoid(splat(alpha), splat(beta))
                    }
                    _ => return None,
                }
            };
            Some(crate::blocked::Plain { kind, out: sink.out, channel: os.channel, pixel: os.pixel, last_lanes })
        }

        /// The starting value of block `ob` at output offset `at`: the partial sums stored
        /// there (a later chunk of channels; the output is then blocked), or the bias (zero
        /// past the channels).
        ///
        /// # Safety
        /// As the kernels.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn blocked_start(sink: &crate::blocked::Sink, ob: usize, at: usize) -> Vector {
            let first = ob * LANES;
            // SAFETY: a blocked output holds whole blocks; the bias holds the channels below
            // `channels_left`.
            unsafe {
                if sink.accumulate {
                    return load(sink.out.add(at + ob * sink.strides.channel));
                }
                if sink.bias.is_null() || first >= sink.channels_left {
                    return zero();
                }
                load_n(sink.bias.add(first), (sink.channels_left - first).min(LANES))
            }
        }

        /// `activation` of `v`: the scalar [`crate::conv::Activation::apply`] lane by lane.
        #[inline]
        #[target_feature(enable = $feature)]
        fn activate(v: Vector, activation: Option<crate::conv::Activation>) -> Vector {
            match activation {
                None => v,
                Some(crate::conv::Activation::LeakyRelu(alpha)) => leaky_relu(v, splat(alpha)),
                Some(crate::conv::Activation::HardSwish) => hard_swish(v),
                Some(crate::conv::Activation::Sigmoid) => sigmoid(v),
                Some(crate::conv::Activation::Silu) => silu_row([v])[0],
                Some(crate::conv::Activation::HardSigmoid { alpha, beta }) => {
                    hard_sigmoid(v, splat(alpha), splat(beta))
                }
                Some(crate::conv::Activation::Tanh) => tanh_row([v])[0],
                Some(crate::conv::Activation::Gelu) => gelu_row([v])[0],
                Some(crate::conv::Activation::GeluTanh) => gelu_tanh_row([v])[0],
            }
        }

        /// GELU's tanh form of `N` vectors (see [`crate::conv::Activation::GeluTanh`]; steps
        /// interleaved).
        #[inline]
        #[target_feature(enable = $feature)]
        fn gelu_tanh_row<const N: usize>(x: [Vector; N]) -> [Vector; N] {
            let [k, k3] = crate::conv::GELU_TANH_K;
            let mut u = x;
            for v in &mut u {
                *v = add(mul(splat(k), *v), mul(splat(k3), mul(mul(*v, *v), *v)));
            }
            let mut out = sigmoid_row(u);
            for (o, &v) in out.iter_mut().zip(&x) {
                *o = mul(v, *o);
            }
            out
        }

        /// GELU of `N` vectors (see [`crate::conv::Activation::Gelu`]; steps interleaved).
        /// Loops, not `map`: a closure with the target's features is not inlined into `map`,
        /// which has none (a call per vector).
        #[inline]
        #[target_feature(enable = $feature)]
        fn gelu_row<const N: usize>(x: [Vector; N]) -> [Vector; N] {
            let mut scaled = x;
            for v in &mut scaled {
                *v = mul(*v, splat(std::f32::consts::FRAC_1_SQRT_2));
            }
            let mut out = erf_row(scaled);
            for (o, &v) in out.iter_mut().zip(&x) {
                *o = mul(mul(splat(0.5), v), add(splat(1.0), *o));
            }
            out
        }

        /// A block's pixels plus the residual (when not null; pixel `p` at `at + p · pixel`),
        /// then clamped.
        ///
        /// # Safety
        /// The residual, when given, holds the block's pixels at those offsets.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn with_residual_and_clamp<const P: usize>(
            mut row: [Vector; P],
            residual: *const f32,
            clamp: Option<(f32, f32)>,
            at: usize,
            pixel: usize,
        ) -> [Vector; P] {
            for (p, v) in row.iter_mut().enumerate() {
                if !residual.is_null() {
                    // SAFETY: forwarded.
                    *v = add(*v, unsafe { load(residual.add(at + p * pixel)) });
                }
                if let Some((lo, hi)) = clamp {
                    *v = min(max(*v, splat(lo)), splat(hi));
                }
            }
            row
        }

        /// [`activate`] on a block's pixels; a transcendental's steps interleaved across them,
        /// which hides the latency of its chain (one pixel at a time, the core waits).
        #[inline]
        #[target_feature(enable = $feature)]
        fn activate_row<const P: usize>(row: [Vector; P], activation: Option<crate::conv::Activation>) -> [Vector; P] {
            match activation {
                Some(crate::conv::Activation::Sigmoid) => sigmoid_row(row),
                Some(crate::conv::Activation::Silu) => silu_row(row),
                Some(crate::conv::Activation::Tanh) => tanh_row(row),
                Some(crate::conv::Activation::Gelu) => gelu_row(row),
                Some(crate::conv::Activation::GeluTanh) => gelu_tanh_row(row),
                // A loop, not `map`: a closure with the target's features is not inlined into
                // `map`, which has none (a call per vector: a quarter of LeNet's time).
                _ => {
                    let mut row = row;
                    for v in &mut row {
                        *v = activate(*v, activation);
                    }
                    row
                }
            }
        }

        /// The epilogue and stores of one output block's pixels (`row`, at most 12) into a
        /// planar output: channels `first..first + valid`, each a run of pixels in its plane.
        ///
        /// # Safety
        /// As the kernels.
        #[inline(never)]
        #[target_feature(enable = $feature)]
        unsafe fn planar_store(sink: &crate::blocked::Sink, first: usize, valid: usize, at: usize, row: &[Vector]) {
            let os = &sink.strides;
            let mut pixels = [[0.0f32; LANES]; 12];
            // SAFETY: the channels below `valid` are planes of the output (and residual),
            // the row's pixels inside them.
            unsafe {
                if sink.finish {
                    // The epilogue on vectors (the scalar one's `mul_add` is a libm call in
                    // code built without FMA: a tanh ResNet spent an eighth of its time there),
                    // the residual's channels gathered from their planes.
                    let mut v = [zero(); 12];
                    for (p, (v, &r)) in v.iter_mut().zip(row).enumerate() {
                        *v = r;
                        if !sink.residual.is_null() {
                            let mut lanes = [0.0f32; LANES];
                            for (c, lane) in lanes.iter_mut().enumerate().take(valid) {
                                *lane = *sink.residual.add(at + (first + c) * os.channel + p * os.pixel);
                            }
                            *v = add(*v, load(lanes.as_ptr()));
                        }
                        if let Some((lo, hi)) = sink.clamp {
                            *v = min(max(*v, splat(lo)), splat(hi));
                        }
                    }
                    let v = if sink.activation.is_some() { activate_row(v, sink.activation) } else { v };
                    for (lanes, &v) in pixels.iter_mut().zip(&v[..row.len()]) {
                        store_n(lanes.as_mut_ptr(), v, LANES);
                    }
                } else {
                    for (lanes, &v) in pixels.iter_mut().zip(row) {
                        store_n(lanes.as_mut_ptr(), v, LANES);
                    }
                }
                for c in 0..valid {
                    let plane = at + (first + c) * os.channel;
                    for (p, lanes) in pixels.iter().enumerate().take(row.len()) {
                        *sink.out.add(plane + p * os.pixel) = lanes[c];
                    }
                }
            }
        }

        /// Runs of dense tiles: `OB` output blocks × `P` pixels each.
        ///
        /// # Safety
        /// The CPU has the module's features, the block is `LANES` and the run's pointers
        /// are valid for its extents.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn blocked_dense<const OB: usize, const P: usize>(t: &crate::blocked::DenseRun) {
            let xs = t.x_strides;
            let one_tap = t.tap_rows == 1 && t.tap_cols == 1;
            let pointwise = one_tap && xs.lanes == LANES && t.x_step == LANES && t.w_channel == LANES;
            let pixel = t.sink.strides.pixel;
            // The input channels as blocks of `xs.lanes` (a planar input's one by one), the
            // last `rest` channels short of a whole block: walked with pointer steps, no
            // division per block.
            let (full, rest) = (t.channels / xs.lanes, t.channels % xs.lanes);
            let blocks = full + usize::from(rest > 0);
            // The blocks' starting values when they do not accumulate: the same for every
            // tile (the bias, or zero).
            let mut starts = [zero(); OB];
            for (ob, v) in starts.iter_mut().enumerate() {
                // SAFETY: the bias holds the channels below `channels_left`.
                *v = unsafe { blocked_start(&crate::blocked::Sink { accumulate: false, ..t.sink }, ob, 0) };
            }
            let deferred = t.sink.deferring_sweep(OB, LANES, pixel);
            let sink = deferred.as_ref().unwrap_or(&t.sink);
            let whole = plain_finish(sink, OB);
            // The lines to prefetch after each input block of each tile, and the next one.
            let (per_block, mut line) = (t.ahead_lines.div_ceil((t.tiles * blocks).max(1)), 0);
            // SAFETY: every offset is inside the run's extents.
            unsafe {
                for tile in 0..t.tiles {
                    let (x0, at) = (t.x.add(tile * P * t.x_step), tile * P * pixel);
                    // The first tile reads the weights first; the others find them in cache.
                    let stream = if tile == 0 { t.stream } else { 0 };
                    let mut acc = [[zero(); P]; OB];
                    for (ob, row) in acc.iter_mut().enumerate() {
                        for (p, v) in row.iter_mut().enumerate() {
                            *v = if t.sink.accumulate {
                                load(t.sink.out.add(at + ob * t.sink.strides.channel + p * pixel))
                            } else {
                                starts[ob]
                            };
                        }
                    }
                    let (mut xb, mut wb) = (x0, t.w);
                    for b in 0..blocks {
                        let lanes = if b < full { xs.lanes } else { rest };
                        if t.chains > 1 && lanes == LANES {
                            acc = narrow_block(acc, xb, wb, t, stream);
                        } else if pointwise && lanes == LANES {
                            // A whole input block of a stride-1 pointwise layer: pixels one
                            // block apart and a channel's weights one vector on, so every
                            // offset is a constant and the unrolled block runs only loads,
                            // broadcasts and multiply-adds (no address arithmetic per channel,
                            // which a core shared with another thread pays for).
                            for l in 0..LANES {
                                let mut wv = [zero(); OB];
                                for (ob, v) in wv.iter_mut().enumerate() {
                                    *v = load(wb.add(ob * t.w_block + l * LANES));
                                }
                                for p in 0..P {
                                    let xv = splat(*xb.add(p * LANES + l));
                                    for ob in 0..OB {
                                        acc[ob][p] = fma(wv[ob], xv, acc[ob][p]);
                                    }
                                }
                            }
                        } else if one_tap && lanes == LANES && OB == 3 {
                            // A whole input block of a 1×1 layer on a three-block tile: unrolled,
                            // every offset a constant (its nine multiply-adds per channel leave
                            // the loop's bookkeeping in the way: 0.8-0.9× the time, measured;
                            // two-block tiles ran slower unrolled).
                            for l in 0..LANES {
                                blocked_step!(acc, xb.add(l), wb.add(l * t.w_channel), t);
                            }
                        } else {
                            let (mut x, mut w) = (xb, wb);
                            for _ in 0..lanes {
                                if one_tap {
                                    blocked_step!(acc, x, w, t);
                                } else {
                                    for r in 0..t.tap_rows {
                                        let (xr, wr) = (x.add(r * t.x_tap_row), w.add(r * t.w_tap_row));
                                        for s in 0..t.tap_cols {
                                            let (xt, wt) = (xr.add(s * t.x_tap_col), wr.add(s * LANES));
                                            blocked_step!(acc, xt, wt, t);
                                        }
                                    }
                                }
                                x = x.add(1);
                                w = w.add(t.w_channel);
                            }
                        }
                        xb = xb.add(xs.channel);
                        wb = wb.add(xs.lanes * t.w_channel);
                        let end = (line + per_block).min(t.ahead_lines);
                        while line < end {
                            super::prefetch_l2(t.ahead.wrapping_add(line * 16));
                            line += 1;
                        }
                    }
                    blocked_finish!(whole, sink, acc, at);
                }
                if deferred.is_some() {
                    for ob in 0..OB {
                        activate_vectors(t.sink.activation, t.sink.out.add(ob * t.sink.strides.channel), t.tiles * P);
                    }
                }
            }
        }

        /// Asks for the weights `stream` input channels past `w` (every block's, every tap) into
        /// L1 (see [`crate::blocked::DenseRun::stream`]).
        #[inline(always)]
        fn stream_weights<const OB: usize>(w: *const f32, stream: usize, t: &crate::blocked::DenseRun) {
            let ahead = w.wrapping_add(stream * t.w_channel);
            for ob in 0..OB {
                let block = ahead.wrapping_add(ob * t.w_block);
                let mut line = 0;
                while line < t.w_channel {
                    super::prefetch(block.wrapping_add(line));
                    line += 16;
                }
            }
        }

        /// `activation` over `vectors` consecutive stored vectors at `out`. A kernel stores a
        /// run's plain sums, then sweeps them while they are in cache: in a tile's epilogue a
        /// transcendental's dozen constants and temporaries share the 16 registers with the
        /// accumulators and spill (a 32→128 1×1 layer's sigmoid took 3.5 ns a vector there,
        /// 2.9 swept).
        ///
        /// # Safety
        /// `out` holds `vectors · LANES` elements.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn activate_vectors(activation: Option<crate::conv::Activation>, out: *mut f32, vectors: usize) {
            use crate::conv::Activation;
            // SAFETY: forwarded.
            unsafe {
                match activation {
                    Some(Activation::Sigmoid) => sweep(out, vectors, activation, |v: [Vector; SWEPT]| sigmoid_row(v)),
                    Some(Activation::Silu) => sweep(out, vectors, activation, |v: [Vector; SWEPT]| silu_row(v)),
                    Some(Activation::Tanh) => sweep(out, vectors, activation, |v: [Vector; SWEPT]| tanh_row(v)),
                    Some(Activation::Gelu) => sweep(out, vectors, activation, |v: [Vector; SWEPT]| gelu_row(v)),
                    Some(Activation::GeluTanh) => {
                        sweep(out, vectors, activation, |v: [Vector; SWEPT]| gelu_tanh_row(v))
                    }
                    other => sweep(out, vectors, other, |v: [Vector; SWEPT]| activate_row(v, other)),
                }
            }
        }

        /// `activation` over the `len` consecutive values at `out`: whole vectors as a sweep,
        /// the last few values in a masked one (a planar convolution's output rows, which
        /// need not be whole vectors).
        ///
        /// # Safety
        /// `out` holds `len` elements.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn activate_span(activation: crate::conv::Activation, out: *mut f32, len: usize) {
            let (vectors, rest) = (len / LANES, len % LANES);
            // SAFETY: only the `len` elements are read or written.
            unsafe {
                activate_vectors(Some(activation), out, vectors);
                if rest > 0 {
                    let at = out.add(vectors * LANES);
                    store_n(at, activate(load_n(at, rest), Some(activation)), rest);
                }
            }
        }

        /// Vectors a sweep takes at once: four transcendentals' chains (a division each)
        /// overlap, and their constants are loaded once per four.
        const SWEPT: usize = 4;

        /// `f` over `vectors` consecutive vectors at `out`, [`SWEPT`] at a time, the last few
        /// one by one (`activate` with `activation`): copies of a number of vectors known only
        /// at run time became `memcpy` calls.
        ///
        /// # Safety
        /// `out` holds `vectors · LANES` elements.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn sweep(
            out: *mut f32,
            vectors: usize,
            activation: Option<crate::conv::Activation>,
            f: impl Fn([Vector; SWEPT]) -> [Vector; SWEPT],
        ) {
            // SAFETY: the caller's promise; only vectors below `vectors` are read or written.
            unsafe {
                let mut i = 0;
                while i + SWEPT <= vectors {
                    let at = out.add(i * LANES);
                    let mut v = [zero(); SWEPT];
                    for (k, v) in v.iter_mut().enumerate() {
                        *v = load(at.add(k * LANES));
                    }
                    for (k, &r) in f(v).iter().enumerate() {
                        store_n(at.add(k * LANES), r, LANES);
                    }
                    i += SWEPT;
                }
                for i in i..vectors {
                    let at = out.add(i * LANES);
                    store_n(at, activate(load(at), activation), LANES);
                }
            }
        }

        /// A whole input block at `xb` (weights at `wb`) added to a narrow tile's sums `acc`:
        /// `t.chains` channels in turn feed their own sets of sums (see `narrow_chains`),
        /// added in order at the end. Its own function, so the sets never compete for registers
        /// with the tile loop's wide tiles, and its set count a constant of the tile's shape:
        /// sets picked by a count read at run time lived in memory (a layer with narrow tiles
        /// ran 1.4× the time that way).
        ///
        /// # Safety
        /// As [`blocked_dense`], the block inside the run's input channels.
        #[inline(never)]
        #[target_feature(enable = $feature)]
        unsafe fn narrow_block<const OB: usize, const P: usize>(
            acc: [[Vector; P]; OB],
            xb: *const f32,
            wb: *const f32,
            t: &crate::blocked::DenseRun,
            stream: usize,
        ) -> [[Vector; P]; OB] {
            // A constant of the tile's shape (as `t.chains`), so the sets stay in registers.
            let chains = crate::blocked::narrow_chains(OB * P);
            debug_assert!(chains == t.chains && LANES % chains == 0);
            let mut part = [[[zero(); P]; OB]; crate::blocked::MAX_CHAINS];
            part[0] = acc;
            // SAFETY: forwarded; every channel of the block and tap of the run is inside.
            unsafe {
                for l in (0..LANES).step_by(chains) {
                    if stream > 0 {
                        for c in 0..chains {
                            stream_weights::<OB>(wb.add((l + c) * t.w_channel), stream, t);
                        }
                    }
                    for r in 0..t.tap_rows {
                        for s in 0..t.tap_cols {
                            let tap = (r * t.x_tap_row + s * t.x_tap_col, r * t.w_tap_row + s * LANES);
                            for (c, sums) in part.iter_mut().enumerate().take(chains) {
                                let (xt, wt) = (xb.add(l + c + tap.0), wb.add((l + c) * t.w_channel + tap.1));
                                blocked_step!(sums, xt, wt, t);
                            }
                        }
                    }
                }
            }
            let mut acc = part[0];
            for sums in &part[1..chains] {
                for (row, add_row) in acc.iter_mut().zip(sums) {
                    for (v, &a) in row.iter_mut().zip(add_row) {
                        *v = add(*v, a);
                    }
                }
            }
            acc
        }

        /// `P` pixels of a depthwise row from output column `ox`, their tap columns
        /// `s_lo..s_hi` (the same for all), the first read at input column `first`.
        ///
        /// # Safety
        /// As [`blocked_depthwise_row`], the pixels' taps inside the input.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn depthwise_pixels<const P: usize>(
            row: &crate::blocked::DepthwiseRow,
            whole: Option<crate::blocked::Plain<Vector>>,
            ox: usize,
            (s_lo, s_hi, first): (usize, usize, usize),
        ) {
            let (step, tap_col) = (row.stride * LANES, row.dilation * LANES);
            // SAFETY: forwarded.
            unsafe {
                let at = ox * LANES;
                let mut acc = [zero(); P];
                for (p, v) in acc.iter_mut().enumerate() {
                    *v = blocked_start(&row.sink, 0, at + p * LANES);
                }
                let x0 = row.x.add(first * LANES);
                for r in 0..row.tap_rows {
                    let (xr, wr) = (x0.add(r * row.x_tap_row), row.w.add((r * row.kw + s_lo) * LANES));
                    for s in 0..s_hi - s_lo {
                        let (xt, wv) = (xr.add(s * tap_col), load(wr.add(s * LANES)));
                        for (p, a) in acc.iter_mut().enumerate() {
                            *a = fma(wv, load(xt.add(p * step)), *a);
                        }
                    }
                }
                blocked_finish!(whole, &row.sink, [acc], at);
            }
        }

        /// Up to four pixels of a depthwise row, each with its own tap columns (border pixels,
        /// and an interior one left over by the tiles): their multiply-add chains interleave,
        /// where one pixel at a time would wait out the latency of each.
        ///
        /// # Safety
        /// As [`blocked_depthwise_row`], the pixels inside the row.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn depthwise_ragged<const N: usize>(
            row: &crate::blocked::DepthwiseRow,
            whole: Option<crate::blocked::Plain<Vector>>,
            pixels: &[usize; 4],
        ) {
            let tap_col = row.dilation * LANES;
            let mut cols = [(0, 0, 0); N];
            for (c, &ox) in cols.iter_mut().zip(pixels) {
                *c = row.columns(ox);
            }
            // SAFETY: forwarded; each pixel reads only its tap columns inside the input.
            unsafe {
                let mut acc = [zero(); N];
                for (v, &ox) in acc.iter_mut().zip(pixels) {
                    *v = blocked_start(&row.sink, 0, ox * LANES);
                }
                for r in 0..row.tap_rows {
                    for (a, &(s_lo, s_hi, first)) in acc.iter_mut().zip(&cols) {
                        let xr = row.x.add(r * row.x_tap_row + first * LANES);
                        let wr = row.w.add((r * row.kw + s_lo) * LANES);
                        for s in 0..s_hi - s_lo {
                            *a = fma(load(wr.add(s * LANES)), load(xr.add(s * tap_col)), *a);
                        }
                    }
                }
                for (&v, &ox) in acc.iter().zip(pixels) {
                    blocked_finish!(whole, &row.sink, [[v]], ox * LANES);
                }
            }
        }

        /// A run of output rows of a depthwise channel block.
        ///
        /// # Safety
        /// The CPU has the module's features, the block is `LANES` and the rows' pointers
        /// are valid for their extents.
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn blocked_depthwise_rows(rows: &crate::blocked::DepthwiseRows) {
            // A transcendental activation swept over the run's rows (one after another in the
            // output).
            if let Some(sink) = rows.sink.deferring_sweep(1, LANES, LANES) {
                // SAFETY: forwarded; the rows hold `count · out_w` vectors from the sink's output.
                unsafe {
                    blocked_depthwise_rows_in_registers(&crate::blocked::DepthwiseRows { sink, ..*rows });
                    activate_vectors(rows.sink.activation, rows.sink.out, rows.count * rows.geo.out_w);
                }
                return;
            }
            // SAFETY: forwarded.
            unsafe { blocked_depthwise_rows_in_registers(rows) }
        }

        /// [`blocked_depthwise_rows`] with its epilogue in registers.
        ///
        /// # Safety
        /// As [`blocked_depthwise_rows`].
        #[target_feature(enable = $feature)]
        unsafe fn blocked_depthwise_rows_in_registers(rows: &crate::blocked::DepthwiseRows) {
            let g = &rows.geo;
            // SAFETY: forwarded.
            unsafe {
                if g.kernel == (3, 3) && g.dilation == (1, 1) {
                    match g.stride.1 {
                        1 => return depthwise_rows_3x3::<1>(rows),
                        2 => return depthwise_rows_3x3::<2>(rows),
                        _ => {}
                    }
                }
                for k in 0..rows.count {
                    blocked_depthwise_row(&rows.row(k));
                }
            }
        }

        /// Rows of a 3×3 depthwise block at column stride `S`, undilated (MobileNets' and
        /// EfficientNets' layers): the interior runs eight pixels at a time (eight independent
        /// sums hide the FMA latency; four left the chain of nine dependent FMAs exposed), with
        /// every tap unrolled over the tap rows inside the input (all three, or those at the
        /// plane's top and bottom edges); each border pixel takes its tap columns inside.
        ///
        /// # Safety
        /// As [`blocked_depthwise_rows`].
        #[target_feature(enable = $feature)]
        unsafe fn depthwise_rows_3x3<const S: usize>(rows: &crate::blocked::DepthwiseRows) {
            let g = &rows.geo;
            let (lo, hi) = rows.interior;
            // SAFETY: the weights hold nine vectors; every pixel below reads only taps inside
            // the input (interior pixels all three columns, rows from `tap_rows`).
            unsafe {
                let mut w = [[zero(); 3]; 3];
                for (r, wr) in w.iter_mut().enumerate() {
                    for (s, v) in wr.iter_mut().enumerate() {
                        *v = load(rows.w.add((r * 3 + s) * LANES));
                    }
                }
                for k in 0..rows.count {
                    let row = rows.row(k);
                    let (r_lo, _) = crate::blocked::tap_rows(g, rows.first + k);
                    let w = &w[r_lo..r_lo + row.tap_rows];
                    let whole = plain_finish(&row.sink, 1);
                    let mut ox = lo;
                    while ox + 8 <= hi {
                        depthwise_3x3_interior::<S, 8>(&row, whole, w, ox);
                        ox += 8;
                    }
                    if ox + 4 <= hi {
                        depthwise_3x3_interior::<S, 4>(&row, whole, w, ox);
                        ox += 4;
                    }
                    if ox + 2 <= hi {
                        depthwise_3x3_interior::<S, 2>(&row, whole, w, ox);
                        ox += 2;
                    }
                    if ox < hi {
                        depthwise_3x3_interior::<S, 1>(&row, whole, w, ox);
                    }
                    for ox in (0..lo).chain(hi..row.out_w) {
                        depthwise_3x3_border::<S>(&row, whole, w, ox);
                    }
                }
            }
        }

        /// `N` interior pixels of a 3×3 depthwise row from `ox`, the weights' tap rows `w`.
        ///
        /// # Safety
        /// As [`depthwise_rows_3x3`]; the pixels are interior ones of the row.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn depthwise_3x3_interior<const S: usize, const N: usize>(
            row: &crate::blocked::DepthwiseRow,
            whole: Option<crate::blocked::Plain<Vector>>,
            w: &[[Vector; 3]],
            ox: usize,
        ) {
            // SAFETY: interior pixels read all three tap columns inside the input.
            unsafe {
                let x = row.x.add((ox * S - row.pad) * LANES);
                let at = ox * LANES;
                let mut acc = [zero(); N];
                for (p, v) in acc.iter_mut().enumerate() {
                    *v = blocked_start(&row.sink, 0, at + p * LANES);
                }
                for (r, wr) in w.iter().enumerate() {
                    let xr = x.add(r * row.x_tap_row);
                    for (s, &ws) in wr.iter().enumerate() {
                        for (p, a) in acc.iter_mut().enumerate() {
                            *a = fma(ws, load(xr.add((p * S + s) * LANES)), *a);
                        }
                    }
                }
                blocked_finish!(whole, &row.sink, [acc], at);
            }
        }

        /// Border pixel `ox` of a 3×3 depthwise row: only its tap columns inside the input are
        /// read (a padded tap is skipped, not multiplied by zero, so inf/NaN stay out).
        ///
        /// # Safety
        /// As [`depthwise_rows_3x3`]; the pixel is in the row.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn depthwise_3x3_border<const S: usize>(
            row: &crate::blocked::DepthwiseRow,
            whole: Option<crate::blocked::Plain<Vector>>,
            w: &[[Vector; 3]],
            ox: usize,
        ) {
            let (s_lo, s_hi) = crate::blocked::taps_inside(ox * S, 3, 1, row.pad, row.in_w);
            // SAFETY: the pixel reads only its tap columns inside the input.
            unsafe {
                let mut acc = blocked_start(&row.sink, 0, ox * LANES);
                if s_lo < s_hi {
                    let x = row.x.add((ox * S + s_lo - row.pad) * LANES);
                    for (r, wr) in w.iter().enumerate() {
                        let xr = x.add(r * row.x_tap_row);
                        for (j, &ws) in wr[s_lo..s_hi].iter().enumerate() {
                            acc = fma(ws, load(xr.add(j * LANES)), acc);
                        }
                    }
                }
                blocked_finish!(whole, &row.sink, [[acc]], ox * LANES);
            }
        }

        /// One output row of a depthwise channel block: border pixels one at a time with
        /// the taps that exist, the interior in tiles of `DEPTHWISE_PIXELS` (then 4, 2, 1).
        ///
        /// # Safety
        /// As [`blocked_depthwise_rows`], for the row.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn blocked_depthwise_row(row: &crate::blocked::DepthwiseRow) {
            const WIDE: usize = crate::blocked::DEPTHWISE_PIXELS;
            let (lo, hi) = row.interior;
            let whole = plain_finish(&row.sink, 1);
            // SAFETY: forwarded; interior pixels read every tap column.
            unsafe {
                let mut ox = lo;
                while hi - ox >= 2 {
                    let cols = (0, row.kw, ox * row.stride - row.pad);
                    match hi - ox {
                        n if n >= WIDE => {
                            depthwise_pixels::<WIDE>(row, whole, ox, cols);
                            ox += WIDE;
                        }
                        n if n >= 4 => {
                            depthwise_pixels::<4>(row, whole, ox, cols);
                            ox += 4;
                        }
                        _ => {
                            depthwise_pixels::<2>(row, whole, ox, cols);
                            ox += 2;
                        }
                    }
                }
                // The border pixels and an interior one left over, four at a time.
                let (mut group, mut n) = ([0usize; 4], 0);
                for ox in (0..lo).chain(ox..hi).chain(hi..row.out_w) {
                    group[n] = ox;
                    n += 1;
                    if n == 4 {
                        depthwise_ragged::<4>(row, whole, &group);
                        n = 0;
                    }
                }
                match n {
                    1 => depthwise_ragged::<1>(row, whole, &group),
                    2 => depthwise_ragged::<2>(row, whole, &group),
                    3 => depthwise_ragged::<3>(row, whole, &group),
                    _ => {}
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use blocked_kernel;
