//! Convolutions (and dense layers, as 1x1 convolutions) on VTA: the tiling, chosen so every
//! tile provably fits the INP/WGT/ACC/UOP SRAMs, and the instruction stream.
//!
//! Data in DRAM, in elements (an element is one SRAM word):
//! - input `[N/B][C/BI][H][W]` (`NCHW{B}n{BI}c`), output `[N/B][O/BO][OH][OW]`;
//! - weights `[O/BO][Cg/BI][KH][KW]` (`OIHW{BO}o{BI}i`), Cg the input channels per group;
//! - bias `[O/BO]` accumulator elements (each bias replicated over the batch lanes).
//!
//! A tile is `tob` output-channel blocks x `toh` output rows x `tow` output columns of one
//! batch block and group, accumulated over the input-channel blocks in groups of `tib`:
//! per group, one padded INP load per channel block (the zero padding of the convolution is
//! the load's padding) and one WGT load, then one GEMM whose two loops run over the output
//! channel blocks and rows and whose micro-ops cover channel block x kernel tap x column.
//! Then bias (LOAD ACC + ALU ADD), the requantization's ALU steps and one STORE per channel
//! block. Dependency tokens: loads -> GEMM (RAW on INP/WGT), GEMM -> next loads (WAR),
//! last ALU -> stores (RAW on ACC), stores -> next tile's reset (WAR on ACC).

use heron_vta::region::RegionProgram;
use heron_vta::{AluOp, HwConfig, MemId};

use crate::CompileError;
use crate::partition::Requant;
use crate::program::{Builder, Loop, Pads, requantize_steps};

/// The argument slots of a convolution region.
pub const SLOT_INPUT: u8 = 0;
pub const SLOT_WEIGHT: u8 = 1;
pub const SLOT_BIAS: u8 = 2;
pub const SLOT_OUTPUT: u8 = 3;

/// A 2-D convolution's shape (NCHW, weights OIHW).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    /// Padding: top, left, bottom, right.
    pub pt: usize,
    pub pl: usize,
    pub pb: usize,
    pub pr: usize,
    pub groups: usize,
    pub oh: usize,
    pub ow: usize,
}

/// Tile sizes, in blocks (channels) and pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    pub tob: usize,
    pub tib: usize,
    pub toh: usize,
    pub tow: usize,
}

impl ConvShape {
    /// `x[m, k] . w[k, n]` as a convolution of m 1x1 images.
    pub fn dense(m: usize, k: usize, n: usize) -> ConvShape {
        ConvShape {
            n: m,
            c: k,
            h: 1,
            w: 1,
            o: n,
            kh: 1,
            kw: 1,
            sh: 1,
            sw: 1,
            dh: 1,
            dw: 1,
            pt: 0,
            pl: 0,
            pb: 0,
            pr: 0,
            groups: 1,
            oh: 1,
            ow: 1,
        }
    }

    /// Input / output channels per group.
    pub fn cg(&self) -> usize {
        self.c / self.groups
    }
    pub fn og(&self) -> usize {
        self.o / self.groups
    }

    /// Channel blocks per group (input, output) and batch blocks.
    fn blocks(&self, c: &HwConfig) -> (usize, usize, usize) {
        (self.cg().div_ceil(c.block_in()), self.og().div_ceil(c.block_out()), self.n.div_ceil(c.batch()))
    }

    /// GEMM micro-op executions of the whole convolution (what `gemm_counter` counts).
    pub fn gemm_ops(&self, c: &HwConfig) -> u64 {
        let (cgb, ogb, nb) = self.blocks(c);
        [nb, self.groups, ogb, self.oh, self.ow, cgb, self.kh, self.kw].iter().map(|&v| v as u64).product()
    }

    /// Whether VTA can run this convolution at all (tiling is checked separately).
    pub fn check_offloadable(&self, c: &HwConfig) -> Result<(), String> {
        if c.block_in() != c.block_out() {
            return Err("BLOCK_IN != BLOCK_OUT: one packed layout cannot serve as input and output".into());
        }
        if self.groups == 0 || !self.c.is_multiple_of(self.groups) || !self.o.is_multiple_of(self.groups) {
            return Err("channels do not split into the groups".into());
        }
        if self.groups > 1 && (!self.cg().is_multiple_of(c.block_in()) || !self.og().is_multiple_of(c.block_out())) {
            if self.cg() == 1 {
                return Err(format!(
                    "depthwise convolution: padding each channel to a {}-lane block would multiply its work by {}",
                    c.block_in(),
                    c.block_in() * c.block_out()
                ));
            }
            return Err(format!(
                "grouped convolution with {} input / {} output channels per group, not whole {}-lane blocks",
                self.cg(),
                self.og(),
                c.block_in()
            ));
        }
        let span = |k: usize, d: usize| (k - 1) * d;
        for (pad, what, k, d) in [
            (self.pt, "top", self.kh, self.dh),
            (self.pb, "bottom", self.kh, self.dh),
            (self.pl, "left", self.kw, self.dw),
            (self.pr, "right", self.kw, self.dw),
        ] {
            if pad > 15 {
                return Err(format!("{what} padding {pad} exceeds VTA's padded loads (at most 15)"));
            }
            if pad > span(k, d) {
                return Err(format!("{what} padding {pad} is wider than the kernel: output pixels of padding only"));
            }
        }
        if self.kh == 0 || self.kw == 0 || self.sh == 0 || self.sw == 0 || self.oh == 0 || self.ow == 0 {
            return Err("an empty convolution".into());
        }
        Ok(())
    }

    fn ih_span(&self, toh: usize) -> usize {
        (toh - 1) * self.sh + (self.kh - 1) * self.dh + 1
    }
    fn iw_span(&self, tow: usize) -> usize {
        (tow - 1) * self.sw + (self.kw - 1) * self.dw + 1
    }
}

/// The distinct values of `ceil(x / k)` for k = 1..=x: the tile sizes worth trying.
fn tile_candidates(x: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (1..=x).map(|k| x.div_ceil(k)).collect();
    v.dedup();
    v
}

/// Sizes of the edge tiles next to `tile`: the full tile and the remainder, if any.
fn variants(total: usize, tile: usize) -> Vec<usize> {
    if total.is_multiple_of(tile) { vec![tile] } else { vec![tile, total % tile] }
}

const ITER_LIMIT: usize = (1 << heron_vta::config::LOOP_ITER_BITS) - 1;

impl Tiling {
    /// Checks every capacity and field limit; returns the micro-ops it needs.
    fn check(&self, s: &ConvShape, c: &HwConfig) -> Result<usize, String> {
        let (cgb, _, _) = s.blocks(c);
        let (ih, iw) = (s.ih_span(self.toh), s.iw_span(self.tow));
        let taps = s.kh * s.kw;
        let inp = self.tib * ih * iw;
        let wgt = self.tob * self.tib * taps;
        let acc = self.tob * self.toh * self.tow + self.tob;
        let mut uops = 3;
        for tib in variants(cgb, self.tib) {
            for tow in variants(s.ow, self.tow) {
                uops += tib * taps * tow;
            }
        }
        let fits = |what: &str, need: usize, mem: MemId| {
            let depth = c.depth(mem);
            if need <= depth { Ok(()) } else { Err(format!("{what} needs {need} of {depth} elements")) }
        };
        fits("INP", inp, MemId::Inp)?;
        fits("WGT", wgt, MemId::Wgt)?;
        fits("ACC", acc, MemId::Acc)?;
        fits("UOP", uops, MemId::Uop)?;
        if self.tob * self.toh > ITER_LIMIT || self.tow > ITER_LIMIT || self.toh * self.tow > ITER_LIMIT {
            return Err("loop extents exceed 14 bits".into());
        }
        if iw > u16::MAX as usize || s.w > u16::MAX as usize || s.ow > u16::MAX as usize {
            return Err("rows wider than a load's 16-bit fields".into());
        }
        Ok(uops)
    }

    /// Bytes moved (loads and stores) plus a charge per instruction: what the search minimises.
    fn cost(&self, s: &ConvShape, c: &HwConfig) -> u64 {
        let (cgb, ogb, nb) = s.blocks(c);
        let tiles = (nb * s.groups * ogb.div_ceil(self.tob) * s.oh.div_ceil(self.toh) * s.ow.div_ceil(self.tow)) as u64;
        let groups = cgb.div_ceil(self.tib) as u64;
        let inp = tiles * (cgb * s.ih_span(self.toh) * s.iw_span(self.tow) * c.elem_bytes(MemId::Inp)) as u64;
        let wgt = tiles * (self.tob * cgb * s.kh * s.kw * c.elem_bytes(MemId::Wgt)) as u64;
        let insns = tiles * (groups * (self.tib as u64 + 2) + self.tob as u64 + 8);
        inp + wgt + insns * 64
    }
}

/// The cheapest tiling of `s` that fits the SRAMs of `c`, or why there is none.
pub fn plan_conv(s: &ConvShape, c: &HwConfig) -> Result<Tiling, CompileError> {
    s.check_offloadable(c).map_err(CompileError::Tiling)?;
    let (cgb, ogb, _) = s.blocks(c);
    let mut best: Option<(u64, Tiling)> = None;
    let mut why = String::from("no tile sizes");
    for &tob in &tile_candidates(ogb) {
        for &tib in &tile_candidates(cgb) {
            for &toh in &tile_candidates(s.oh) {
                for &tow in &tile_candidates(s.ow) {
                    let t = Tiling { tob, tib, toh, tow };
                    match t.check(s, c) {
                        Ok(_) => {
                            let cost = t.cost(s, c);
                            if best.is_none_or(|(b, _)| cost < b) {
                                best = Some((cost, t));
                            }
                        }
                        Err(e) => why = e,
                    }
                }
            }
        }
    }
    best.map(|(_, t)| t).ok_or_else(|| CompileError::Tiling(format!("no tiling fits the SRAMs (smallest tile: {why})")))
}

/// The VTA program of a convolution region: `x` in slot 0, weights 1, bias 2 (if any),
/// output 3.
pub fn emit_conv(
    name: &str,
    s: &ConvShape,
    bias: bool,
    requant: Requant,
    c: &HwConfig,
) -> Result<RegionProgram, CompileError> {
    let t = plan_conv(s, c)?;
    let (cgb, ogb, nb) = s.blocks(c);
    let (cb_total, ob_total) = (s.groups * cgb, s.groups * ogb);
    let taps = s.kh * s.kw;
    let mut b = Builder::new(*c);
    // Uop SRAM: 0 = (0, 0, 0) for resets and immediates, 1 = bias add, then the GEMM kernels
    // of each (channel blocks, columns) tile variant.
    let bias_base = t.tob * t.toh * t.tow;
    let u_zero = b.uop(0, 0, 0)?;
    let u_bias = b.uop(0, bias_base, 0)?;
    let mut kernels = Vec::new();
    for tib in variants(cgb, t.tib) {
        for tow in variants(s.ow, t.tow) {
            let block_stride = s.ih_span(t.toh) * s.iw_span(tow);
            let bgn = b.next_uop();
            for ib in 0..tib {
                for ky in 0..s.kh {
                    for kx in 0..s.kw {
                        for x in 0..tow {
                            let src = ib * block_stride + ky * s.dh * s.iw_span(tow) + x * s.sw + kx * s.dw;
                            b.uop(x, src, (ib * s.kh + ky) * s.kw + kx)?;
                        }
                    }
                }
            }
            kernels.push(((tib, tow), (bgn, bgn + (tib * taps * tow) as u32)));
        }
    }
    let kernel = |tib: usize, tow: usize| kernels.iter().find(|(k, _)| *k == (tib, tow)).expect("every variant").1;

    let steps = requantize_steps(requant.shift, requant.min, requant.max);
    let groups_per_tile = cgb.div_ceil(t.tib);
    let tiles: Vec<(usize, usize, usize, usize, usize)> = (0..nb)
        .flat_map(|n| (0..s.groups).map(move |g| (n, g)))
        .flat_map(|(n, g)| (0..ogb).step_by(t.tob).map(move |ob| (n, g, ob)))
        .flat_map(|(n, g, ob)| (0..s.oh).step_by(t.toh).map(move |oh| (n, g, ob, oh)))
        .flat_map(|(n, g, ob, oh)| (0..s.ow).step_by(t.tow).map(move |ow| (n, g, ob, oh, ow)))
        .collect();
    let total_groups = tiles.len() * groups_per_tile;
    let mut group = 0;
    for (k, &(n, g, ob0, oh0, ow0)) in tiles.iter().enumerate() {
        let tob = t.tob.min(ogb - ob0);
        let toh = t.toh.min(s.oh - oh0);
        let tow = t.tow.min(s.ow - ow0);
        let pixels = toh * tow;
        let (ih_span, iw_span) = (s.ih_span(toh), s.iw_span(tow));
        let block_stride = s.ih_span(t.toh) * iw_span;
        // Reset the accumulator tile, once the previous tile's stores are done with it.
        let reset = b.gemm(true, (u_zero, u_zero + 1), Loop::new(tob * pixels, 1, 0, 0), Loop::new(1, 0, 0, 0))?;
        b.deps(reset).pop_next = k > 0;
        for ib0 in (0..cgb).step_by(t.tib) {
            let tib = t.tib.min(cgb - ib0);
            // Input rows/columns this tile reads; what falls outside the image is padding.
            let ih0 = (oh0 * s.sh) as i64 - s.pt as i64;
            let iw0 = (ow0 * s.sw) as i64 - s.pl as i64;
            let (ih1, iw1) = (ih0 + ih_span as i64, iw0 + iw_span as i64);
            let (r0, r1) = (ih0.max(0) as usize, ih1.min(s.h as i64) as usize);
            let (c0, c1) = (iw0.max(0) as usize, iw1.min(s.w as i64) as usize);
            let pads = Pads {
                top: (-ih0).max(0) as usize,
                bottom: (ih1 - s.h as i64).max(0) as usize,
                left: (-iw0).max(0) as usize,
                right: (iw1 - s.w as i64).max(0) as usize,
            };
            let mut first_load = None;
            for ib in 0..tib {
                let cb = g * cgb + ib0 + ib;
                let dram = (((n * cb_total + cb) * s.h + r0) * s.w + c0) as u64;
                let l = b.load(MemId::Inp, SLOT_INPUT, ib * block_stride, dram, (r1 - r0, c1 - c0, s.w), pads)?;
                first_load.get_or_insert(l);
            }
            let obg = g * ogb + ob0;
            let dram = ((obg * cgb + ib0) * taps) as u64;
            let w = b.load(MemId::Wgt, SLOT_WEIGHT, 0, dram, (tob, tib * taps, cgb * taps), Pads::default())?;
            b.deps(first_load.expect("at least one block")).pop_next = group > 0;
            b.deps(w).push_next = true;
            let gemm = b.gemm(
                false,
                kernel(tib, tow),
                Loop::new(tob, pixels, 0, tib * taps),
                Loop::new(toh, tow, s.sh * iw_span, 0),
            )?;
            b.deps(gemm).pop_prev = true;
            b.deps(gemm).push_prev = group + 1 < total_groups;
            group += 1;
        }
        // The tile's accumulators are contiguous: (channel block, row) x column.
        let (rows, cols) = (Loop::new(tob * toh, tow, 0, 0), Loop::new(tow, 1, 0, 0));
        let mut last_alu = None;
        if bias {
            let obg = g * ogb + ob0;
            b.load(MemId::Acc, SLOT_BIAS, bias_base, obg as u64, (1, tob, tob), Pads::default())?;
            last_alu =
                Some(b.alu(AluOp::Add, None, u_bias, Loop::new(tob, pixels, 1, 0), Loop::new(pixels, 1, 0, 0))?);
        }
        for &(op, imm) in &steps {
            last_alu = Some(b.alu(op, Some(imm), u_zero, rows, cols)?);
        }
        let last_alu = last_alu.expect("the clip steps are always there");
        b.deps(last_alu).push_next = true;
        for ob in 0..tob {
            let obg = g * ogb + ob0 + ob;
            let dram = (((n * ob_total + obg) * s.oh + oh0) * s.ow + ow0) as u64;
            let st = b.store(SLOT_OUTPUT, ob * pixels, dram, (toh, tow, s.ow))?;
            b.deps(st).pop_prev = ob == 0;
            b.deps(st).push_prev = ob + 1 == tob;
        }
    }
    b.finish(name)
}
