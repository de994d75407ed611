//! Building one region's program: instructions with slot-relative DRAM addresses (each
//! recorded as a relocation, and the bytes it touches as the slot's extent), micro-ops, and
//! the checked conversions into the ISA's field widths.

use heron_vta::isa::{AluInsn, GemmInsn, MemInsn, UopLoops};
use heron_vta::region::{RegionProgram, SLOTS, UOP_SLOT};
use heron_vta::{AluOp, DepFlags, HwConfig, Insn, MemId, Uop};

use crate::CompileError;

/// Zero padding of a load: rows before and after, elements before and after each row.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pads {
    pub top: usize,
    pub bottom: usize,
    pub left: usize,
    pub right: usize,
}

pub(crate) struct Builder {
    config: HwConfig,
    insns: Vec<Insn>,
    relocs: Vec<(u32, u8)>,
    uops: Vec<Uop>,
    slot_bytes: [u64; SLOTS],
}

fn field<T: TryFrom<u64>>(v: u64, what: &str) -> Result<T, CompileError> {
    T::try_from(v).map_err(|_| CompileError::Tiling(format!("{what} = {v} does not fit its instruction field")))
}

impl Builder {
    pub fn new(config: HwConfig) -> Builder {
        Builder { config, insns: Vec::new(), relocs: Vec::new(), uops: Vec::new(), slot_bytes: [0; SLOTS] }
    }

    /// The index the next micro-op gets.
    pub fn next_uop(&self) -> u32 {
        self.uops.len() as u32
    }

    /// Adds a micro-op; returns its index in the uop SRAM (uops are loaded once, at the start).
    pub fn uop(&mut self, dst: usize, src: usize, wgt: usize) -> Result<u32, CompileError> {
        let depth = self.config.depth(MemId::Uop);
        if self.uops.len() >= depth {
            return Err(CompileError::Tiling(format!("more than {depth} micro-ops")));
        }
        self.uops.push(Uop {
            dst: field(dst as u64, "uop dst")?,
            src: field(src as u64, "uop src")?,
            wgt: field(wgt as u64, "uop wgt")?,
        });
        Ok((self.uops.len() - 1) as u32)
    }

    /// A LOAD of `y` rows of `x` elements of `memory` from slot `slot` (element offset `dram`,
    /// rows `stride` apart) into SRAM at `sram`, padded with zeros.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        &mut self,
        memory: MemId,
        slot: u8,
        sram: usize,
        dram: u64,
        (y, x, stride): (usize, usize, usize),
        pads: Pads,
    ) -> Result<usize, CompileError> {
        let m = self.mem(memory, slot, sram, dram, (y, x, stride))?;
        let pad = |v: usize, what| {
            field::<u8>(v as u64, what).and_then(|p| {
                if p < 16 {
                    Ok(p)
                } else {
                    Err(CompileError::Tiling(format!("{what} = {v} exceeds the 4-bit pad field")))
                }
            })
        };
        let m = MemInsn {
            y_pad_0: pad(pads.top, "y_pad_0")?,
            y_pad_1: pad(pads.bottom, "y_pad_1")?,
            x_pad_0: pad(pads.left, "x_pad_0")?,
            x_pad_1: pad(pads.right, "x_pad_1")?,
            ..m
        };
        self.insns.push(Insn::Load(m));
        Ok(self.insns.len() - 1)
    }

    /// A STORE of `y` rows of `x` accumulator elements at `sram` (contiguous) to slot `slot`.
    pub fn store(
        &mut self,
        slot: u8,
        sram: usize,
        dram: u64,
        shape: (usize, usize, usize),
    ) -> Result<usize, CompileError> {
        let m = self.mem(MemId::Out, slot, sram, dram, shape)?;
        self.insns.push(Insn::Store(m));
        Ok(self.insns.len() - 1)
    }

    fn mem(
        &mut self,
        memory: MemId,
        slot: u8,
        sram: usize,
        dram: u64,
        (y, x, stride): (usize, usize, usize),
    ) -> Result<MemInsn, CompileError> {
        let unit = self.config.elem_bytes(memory) as u64;
        let end =
            (y as u64).saturating_sub(1).saturating_mul(stride as u64).saturating_add(x as u64).saturating_add(dram);
        let bytes = end.saturating_mul(unit);
        let s = &mut self.slot_bytes[slot as usize];
        *s = (*s).max(bytes);
        self.relocs.push((self.insns.len() as u32, slot));
        Ok(MemInsn {
            memory_type: memory as u8,
            sram_base: field(sram as u64, "sram_base")?,
            dram_base: field(dram, "dram_base")?,
            y_size: field(y as u64, "y_size")?,
            x_size: field(x as u64, "x_size")?,
            x_stride: field(stride as u64, "x_stride")?,
            ..MemInsn::default()
        })
    }

    /// A GEMM over uops `uops` in loops `(iter_out, iter_in)` with factors `(dst, src, wgt)` per
    /// loop.
    pub fn gemm(&mut self, reset: bool, uops: (u32, u32), outer: Loop, inner: Loop) -> Result<usize, CompileError> {
        let loops = loops(uops, outer, inner)?;
        let (wo, wi) = (field(outer.wgt as u64, "wgt_factor_out")?, field(inner.wgt as u64, "wgt_factor_in")?);
        self.insns.push(Insn::Gemm(GemmInsn {
            deps: DepFlags::default(),
            reset,
            loops,
            wgt_factor_out: wo,
            wgt_factor_in: wi,
        }));
        Ok(self.insns.len() - 1)
    }

    /// An ALU operation with an immediate (`Some`) or the accumulator at `src` as operand.
    pub fn alu(
        &mut self,
        op: AluOp,
        imm: Option<i32>,
        uop: u32,
        outer: Loop,
        inner: Loop,
    ) -> Result<usize, CompileError> {
        let loops = loops((uop, uop + 1), outer, inner)?;
        let imm16 = match imm {
            Some(v) => {
                i16::try_from(v).map_err(|_| CompileError::Tiling(format!("ALU immediate {v} exceeds 16 bits")))?
            }
            None => 0,
        };
        self.insns.push(Insn::Alu(AluInsn {
            deps: DepFlags::default(),
            reset: false,
            loops,
            op,
            use_imm: imm.is_some(),
            imm: imm16,
        }));
        Ok(self.insns.len() - 1)
    }

    pub fn deps(&mut self, insn: usize) -> &mut DepFlags {
        match &mut self.insns[insn] {
            Insn::Load(m) | Insn::Store(m) => &mut m.deps,
            Insn::Gemm(g) => &mut g.deps,
            Insn::Alu(a) => &mut a.deps,
            Insn::Finish(d) => d,
        }
    }

    /// The program: one UOP load of every micro-op first, FINISH last (popping the store
    /// module's last token, so every token pushed is popped).
    pub fn finish(mut self, name: &str) -> Result<RegionProgram, CompileError> {
        let n = self.uops.len();
        let load_uops = MemInsn::transfer(MemId::Uop, 0, 0, 1, n, n);
        self.insns.insert(0, Insn::Load(MemInsn { x_size: field(n as u64, "uop count")?, ..load_uops }));
        for r in self.relocs.iter_mut() {
            r.0 += 1;
        }
        self.relocs.insert(0, (0, UOP_SLOT));
        self.insns.push(Insn::Finish(DepFlags { pop_next: true, ..DepFlags::default() }));
        Ok(RegionProgram {
            name: name.to_string(),
            config: self.config,
            insns: self.insns,
            uops: self.uops,
            relocs: self.relocs,
            slot_bytes: self.slot_bytes,
        })
    }
}

/// One loop of a GEMM/ALU instruction: extent and per-iteration index steps.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Loop {
    pub extent: usize,
    pub dst: usize,
    pub src: usize,
    pub wgt: usize,
}

impl Loop {
    pub fn new(extent: usize, dst: usize, src: usize, wgt: usize) -> Loop {
        // A single iteration never steps: its factors stay 0 (they might not fit a field).
        if extent <= 1 { Loop { extent: 1, ..Loop::default() } } else { Loop { extent, dst, src, wgt } }
    }
}

fn loops((bgn, end): (u32, u32), outer: Loop, inner: Loop) -> Result<UopLoops, CompileError> {
    let iter = |v: usize, what| {
        if v < 1 << heron_vta::config::LOOP_ITER_BITS {
            Ok(v as u32)
        } else {
            Err(CompileError::Tiling(format!("{what} = {v} exceeds 14 bits")))
        }
    };
    Ok(UopLoops {
        uop_bgn: bgn,
        uop_end: end,
        iter_out: iter(outer.extent, "iter_out")?,
        iter_in: iter(inner.extent, "iter_in")?,
        dst_factor_out: field(outer.dst as u64, "dst_factor_out")?,
        dst_factor_in: field(inner.dst as u64, "dst_factor_in")?,
        src_factor_out: field(outer.src as u64, "src_factor_out")?,
        src_factor_in: field(inner.src as u64, "src_factor_in")?,
    })
}

/// The ALU steps of `Requantize(shift, min, max)` on accumulators: exactly its i64 semantics
/// (`floor((x + 2^(k-1)) / 2^k)`, or `x * 2^-k`, then clip) with 32-bit operations that never
/// overflow and 16-bit immediates:
/// - `k >= 2`: shift by `j = max(1, k - 15)` first, then add `2^(k-1-j)` and shift by `k - j`
///   (`2^(k-1)` is a multiple of `2^j`, so the floors compose exactly);
/// - `k == 1`: clamp to `<= 32767` first (every larger value clips to `max` anyway);
/// - `k < 0`: clamp to `[-129, 128]` (`[-1, 1]` for shifts of 8 or more) before shifting left:
///   every value outside clips to `min`/`max` anyway;
/// - then `MAX min`, `MIN max`; the STORE narrows to int8.
pub(crate) fn requantize_steps(shift: i32, min: i32, max: i32) -> Vec<(AluOp, i32)> {
    let mut steps = Vec::new();
    match shift {
        0 => {}
        1 => steps.extend([(AluOp::Min, 32767), (AluOp::Add, 1), (AluOp::Shr, 1)]),
        k if k >= 2 => {
            let j = (k - 15).max(1);
            steps.extend([(AluOp::Shr, j), (AluOp::Add, 1 << (k - 1 - j)), (AluOp::Shr, k - j)]);
        }
        k => {
            let m = -k;
            let (lo, hi, m) = if m >= 8 { (-1, 1, 8) } else { (-129, 128, m) };
            steps.extend([(AluOp::Min, hi), (AluOp::Max, lo), (AluOp::Shr, -m)]);
        }
    }
    steps.extend([(AluOp::Max, min), (AluOp::Min, max)]);
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ALU steps in 32-bit arithmetic, as the simulator runs them.
    fn run_steps(x: i32, steps: &[(AluOp, i32)]) -> i32 {
        steps.iter().fold(x, |a, &(op, v)| heron_vta::sim::alu_op(op, a, v))
    }

    fn reference(x: i32, k: i32, min: i32, max: i32) -> i32 {
        let v = i64::from(x);
        let r = if k > 0 { (v + (1i64 << (k - 1))) >> k } else { v << -k };
        r.clamp(i64::from(min), i64::from(max)) as i32
    }

    #[test]
    fn requantize_steps_equal_the_i64_rule_everywhere_that_matters() {
        let mut xs: Vec<i32> = vec![i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, 0, 1, -1];
        for p in 0..31 {
            for d in [-1i64, 0, 1] {
                for s in [-1i64, 1] {
                    xs.push((s * ((1i64 << p) + d)).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32);
                }
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            xs.push(seed as i32 >> (seed >> 59));
        }
        for k in -31..=31 {
            for (min, max) in [(-128, 127), (0, 127), (-5, 3)] {
                let steps = requantize_steps(k, min, max);
                for &x in &xs {
                    assert_eq!(run_steps(x, &steps), reference(x, k, min, max), "x {x} shift {k} clip {min}..{max}");
                }
            }
        }
    }
}
