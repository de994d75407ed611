//! The VTA instruction set: 128-bit instructions (LOAD, STORE, GEMM, ALU, FINISH) and 32-bit
//! micro-ops, encoded and decoded at the bit positions of VTA-FACTS §2. Field positions follow
//! the C bit-field rule the hardware headers use (fields fill 64-bit words from the low bit; one
//! that would straddle bit 64 starts at bit 64), with index widths derived from the
//! [`HwConfig`], so non-default configurations encode correctly too.

use std::fmt;

use crate::VtaError;
use crate::config::{HwConfig, LOOP_ITER_BITS, MemId};

/// Dependency-token flags every instruction carries (bits 3..6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DepFlags {
    pub pop_prev: bool,
    pub pop_next: bool,
    pub push_prev: bool,
    pub push_next: bool,
}

/// ALU operations (§2.1, §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    Min = 0,
    Max = 1,
    Add = 2,
    /// Arithmetic shift right; a negative amount shifts left.
    Shr = 3,
    /// 32-bit wrapping multiply (fsim only).
    Mul = 4,
}

impl AluOp {
    pub fn from_bits(v: u64) -> Option<AluOp> {
        Some(match v {
            0 => AluOp::Min,
            1 => AluOp::Max,
            2 => AluOp::Add,
            3 => AluOp::Shr,
            4 => AluOp::Mul,
            _ => return None,
        })
    }
}

/// LOAD or STORE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemInsn {
    pub deps: DepFlags,
    /// Raw memory id (validated by the simulator, kept raw so any stream round-trips).
    pub memory_type: u8,
    pub sram_base: u16,
    /// DRAM address in elements of `memory_type`.
    pub dram_base: u32,
    pub y_size: u16,
    pub x_size: u16,
    pub x_stride: u16,
    pub y_pad_0: u8,
    pub y_pad_1: u8,
    pub x_pad_0: u8,
    pub x_pad_1: u8,
}

impl MemInsn {
    /// A 2D transfer of `y` rows of `x` elements of `memory`, rows `stride` elements apart in
    /// DRAM, no padding and no dependency flags. Fields are truncated to their widths (callers
    /// pass values the ISA can hold; `Isa::encode` still checks them).
    pub fn transfer(memory: MemId, sram: usize, dram: u64, y: usize, x: usize, stride: usize) -> MemInsn {
        MemInsn {
            memory_type: memory as u8,
            sram_base: sram as u16,
            dram_base: dram as u32,
            y_size: y as u16,
            x_size: x as u16,
            x_stride: stride as u16,
            ..MemInsn::default()
        }
    }

    pub fn with_deps(self, deps: DepFlags) -> MemInsn {
        MemInsn { deps, ..self }
    }
}

/// The loop nest shared by GEMM and ALU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UopLoops {
    pub uop_bgn: u32,
    pub uop_end: u32,
    pub iter_out: u32,
    pub iter_in: u32,
    pub dst_factor_out: u32,
    pub dst_factor_in: u32,
    pub src_factor_out: u32,
    pub src_factor_in: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GemmInsn {
    pub deps: DepFlags,
    pub reset: bool,
    pub loops: UopLoops,
    pub wgt_factor_out: u32,
    pub wgt_factor_in: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AluInsn {
    pub deps: DepFlags,
    pub reset: bool,
    pub loops: UopLoops,
    pub op: AluOp,
    pub use_imm: bool,
    pub imm: i16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Insn {
    Load(MemInsn),
    Store(MemInsn),
    Gemm(GemmInsn),
    Alu(AluInsn),
    Finish(DepFlags),
}

pub const OP_LOAD: u64 = 0;
pub const OP_STORE: u64 = 1;
pub const OP_GEMM: u64 = 2;
pub const OP_FINISH: u64 = 3;
pub const OP_ALU: u64 = 4;

/// Bit position and width of every field of one instruction format.
#[derive(Clone, Debug)]
struct Layout(Vec<(u32, u32)>);

impl Layout {
    /// Positions for fields of `widths`, packed like C bit-fields in 64-bit units.
    fn pack(widths: &[u32]) -> Layout {
        let mut at = 0;
        let mut fields = Vec::with_capacity(widths.len());
        for &w in widths {
            if at < 64 && at + w > 64 {
                at = 64;
            }
            fields.push((at, w));
            at += w;
        }
        debug_assert!(at <= 128, "fields overflow 128 bits");
        Layout(fields)
    }

    fn get(&self, bits: u128, field: usize) -> u64 {
        let (at, w) = self.0[field];
        ((bits >> at) & ((1u128 << w) - 1)) as u64
    }

    /// Sets `field` to `value`, which must fit its width.
    fn set(&self, bits: &mut u128, field: usize, value: u64, name: &str) -> Result<(), VtaError> {
        let (at, w) = self.0[field];
        if w < 64 && value >> w != 0 {
            return Err(VtaError::Encode(format!("{name} = {value} does not fit in {w} bits")));
        }
        *bits |= (value as u128) << at;
        Ok(())
    }
}

/// Field indices: the common header, then per format.
const OPCODE: usize = 0;
const POP_PREV: usize = 1;
const POP_NEXT: usize = 2;
const PUSH_PREV: usize = 3;
const PUSH_NEXT: usize = 4;

/// Encoders and decoders for one hardware configuration.
#[derive(Clone, Debug)]
pub struct Isa {
    pub config: HwConfig,
    mem: Layout,
    gemm: Layout,
    alu: Layout,
    uop: Layout,
}

/// A micro-op: indices into acc (dst), inp or acc (src) and wgt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Uop {
    pub dst: u32,
    pub src: u32,
    pub wgt: u32,
}

impl Isa {
    pub fn new(config: HwConfig) -> Result<Isa, VtaError> {
        config.validate()?;
        let header = [3, 1, 1, 1, 1];
        let with = |rest: &[u32]| Layout::pack(&[&header[..], rest].concat());
        let (uop, acc, inp, wgt) =
            (config.log_uop_depth(), config.log_acc_depth(), config.log_inp_depth(), config.log_wgt_depth());
        let loops = [1, uop, uop + 1, LOOP_ITER_BITS, LOOP_ITER_BITS, acc, acc, inp, inp];
        Ok(Isa {
            config,
            mem: with(&[3, 16, 32, 16, 16, 16, 4, 4, 4, 4]),
            gemm: with(&[&loops[..], &[wgt, wgt]].concat()),
            alu: with(&[&loops[..], &[3, 1, 16]].concat()),
            uop: Layout::pack(&[acc, acc.max(inp), wgt]),
        })
    }

    fn header(&self, layout: &Layout, bits: &mut u128, opcode: u64, d: DepFlags) -> Result<(), VtaError> {
        layout.set(bits, OPCODE, opcode, "opcode")?;
        for (f, v) in
            [(POP_PREV, d.pop_prev), (POP_NEXT, d.pop_next), (PUSH_PREV, d.push_prev), (PUSH_NEXT, d.push_next)]
        {
            layout.set(bits, f, v as u64, "dependency flag")?;
        }
        Ok(())
    }

    fn loops(&self, layout: &Layout, bits: &mut u128, reset: bool, l: &UopLoops) -> Result<(), VtaError> {
        let values = [
            (reset as u64, "reset_reg"),
            (l.uop_bgn as u64, "uop_bgn"),
            (l.uop_end as u64, "uop_end"),
            (l.iter_out as u64, "iter_out"),
            (l.iter_in as u64, "iter_in"),
            (l.dst_factor_out as u64, "dst_factor_out"),
            (l.dst_factor_in as u64, "dst_factor_in"),
            (l.src_factor_out as u64, "src_factor_out"),
            (l.src_factor_in as u64, "src_factor_in"),
        ];
        for (k, (v, name)) in values.into_iter().enumerate() {
            layout.set(bits, 5 + k, v, name)?;
        }
        Ok(())
    }

    /// The 128-bit word of `insn` (bit 0 = bit 0 of the first little-endian u64).
    pub fn encode(&self, insn: &Insn) -> Result<u128, VtaError> {
        let mut bits = 0u128;
        match insn {
            Insn::Load(m) | Insn::Store(m) => {
                let op = if matches!(insn, Insn::Load(_)) { OP_LOAD } else { OP_STORE };
                self.header(&self.mem, &mut bits, op, m.deps)?;
                let values = [
                    (m.memory_type as u64, "memory_type"),
                    (m.sram_base as u64, "sram_base"),
                    (m.dram_base as u64, "dram_base"),
                    (0, "unused"),
                    (m.y_size as u64, "y_size"),
                    (m.x_size as u64, "x_size"),
                    (m.x_stride as u64, "x_stride"),
                    (m.y_pad_0 as u64, "y_pad_0"),
                    (m.y_pad_1 as u64, "y_pad_1"),
                    (m.x_pad_0 as u64, "x_pad_0"),
                    (m.x_pad_1 as u64, "x_pad_1"),
                ];
                // The 6 unused bits after dram_base are not a field of the packed layout.
                for (k, (v, name)) in values.into_iter().filter(|(_, n)| *n != "unused").enumerate() {
                    self.mem.set(&mut bits, 5 + k, v, name)?;
                }
            }
            Insn::Gemm(g) => {
                self.header(&self.gemm, &mut bits, OP_GEMM, g.deps)?;
                self.loops(&self.gemm, &mut bits, g.reset, &g.loops)?;
                self.gemm.set(&mut bits, 14, g.wgt_factor_out as u64, "wgt_factor_out")?;
                self.gemm.set(&mut bits, 15, g.wgt_factor_in as u64, "wgt_factor_in")?;
            }
            Insn::Alu(a) => {
                self.header(&self.alu, &mut bits, OP_ALU, a.deps)?;
                self.loops(&self.alu, &mut bits, a.reset, &a.loops)?;
                self.alu.set(&mut bits, 14, a.op as u64, "alu_opcode")?;
                self.alu.set(&mut bits, 15, a.use_imm as u64, "use_imm")?;
                self.alu.set(&mut bits, 16, a.imm as u16 as u64, "imm")?;
            }
            Insn::Finish(d) => self.header(&self.gemm, &mut bits, OP_FINISH, *d)?,
        }
        Ok(bits)
    }

    /// Decodes one instruction word; an undefined opcode or ALU opcode is an error.
    pub fn decode(&self, bits: u128) -> Result<Insn, VtaError> {
        let deps = |l: &Layout| DepFlags {
            pop_prev: l.get(bits, POP_PREV) != 0,
            pop_next: l.get(bits, POP_NEXT) != 0,
            push_prev: l.get(bits, PUSH_PREV) != 0,
            push_next: l.get(bits, PUSH_NEXT) != 0,
        };
        let loops = |l: &Layout| UopLoops {
            uop_bgn: l.get(bits, 6) as u32,
            uop_end: l.get(bits, 7) as u32,
            iter_out: l.get(bits, 8) as u32,
            iter_in: l.get(bits, 9) as u32,
            dst_factor_out: l.get(bits, 10) as u32,
            dst_factor_in: l.get(bits, 11) as u32,
            src_factor_out: l.get(bits, 12) as u32,
            src_factor_in: l.get(bits, 13) as u32,
        };
        let opcode = self.mem.get(bits, OPCODE);
        Ok(match opcode {
            OP_LOAD | OP_STORE => {
                let m = &self.mem;
                let mem = MemInsn {
                    deps: deps(m),
                    memory_type: m.get(bits, 5) as u8,
                    sram_base: m.get(bits, 6) as u16,
                    dram_base: m.get(bits, 7) as u32,
                    y_size: m.get(bits, 8) as u16,
                    x_size: m.get(bits, 9) as u16,
                    x_stride: m.get(bits, 10) as u16,
                    y_pad_0: m.get(bits, 11) as u8,
                    y_pad_1: m.get(bits, 12) as u8,
                    x_pad_0: m.get(bits, 13) as u8,
                    x_pad_1: m.get(bits, 14) as u8,
                };
                if opcode == OP_LOAD { Insn::Load(mem) } else { Insn::Store(mem) }
            }
            OP_GEMM => Insn::Gemm(GemmInsn {
                deps: deps(&self.gemm),
                reset: self.gemm.get(bits, 5) != 0,
                loops: loops(&self.gemm),
                wgt_factor_out: self.gemm.get(bits, 14) as u32,
                wgt_factor_in: self.gemm.get(bits, 15) as u32,
            }),
            OP_ALU => {
                let a = &self.alu;
                let code = a.get(bits, 14);
                Insn::Alu(AluInsn {
                    deps: deps(a),
                    reset: a.get(bits, 5) != 0,
                    loops: loops(a),
                    op: AluOp::from_bits(code).ok_or(VtaError::BadAluOpcode(code))?,
                    use_imm: a.get(bits, 15) != 0,
                    imm: a.get(bits, 16) as u16 as i16,
                })
            }
            OP_FINISH => Insn::Finish(deps(&self.gemm)),
            other => return Err(VtaError::BadOpcode(other)),
        })
    }

    pub fn encode_uop(&self, u: &Uop) -> Result<u32, VtaError> {
        let mut bits = 0u128;
        self.uop.set(&mut bits, 0, u.dst as u64, "uop dst")?;
        self.uop.set(&mut bits, 1, u.src as u64, "uop src")?;
        self.uop.set(&mut bits, 2, u.wgt as u64, "uop wgt")?;
        Ok(bits as u32)
    }

    pub fn decode_uop(&self, word: u32) -> Uop {
        let bits = word as u128;
        Uop { dst: self.uop.get(bits, 0) as u32, src: self.uop.get(bits, 1) as u32, wgt: self.uop.get(bits, 2) as u32 }
    }
}

/// The words of a stream of little-endian 16-byte instructions.
pub fn words(bytes: &[u8]) -> Result<impl Iterator<Item = u128> + '_, VtaError> {
    let (whole, rest) = bytes.as_chunks::<16>();
    if !rest.is_empty() {
        return Err(VtaError::Stream(format!("{} bytes is not a whole number of 16-byte instructions", bytes.len())));
    }
    Ok(whole.iter().map(|c| u128::from_le_bytes(*c)))
}

impl fmt::Display for DepFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (self.pop_prev, "pop_prev"),
            (self.pop_next, "pop_next"),
            (self.push_prev, "push_prev"),
            (self.push_next, "push_next"),
        ];
        let set: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect();
        if set.is_empty() { Ok(()) } else { write!(f, " [{}]", set.join(" ")) }
    }
}

impl fmt::Display for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let loops = |f: &mut fmt::Formatter<'_>, l: &UopLoops| {
            write!(
                f,
                "uops [{}, {}) out {} x (dst {}, src {}) in {} x (dst {}, src {})",
                l.uop_bgn,
                l.uop_end,
                l.iter_out,
                l.dst_factor_out,
                l.src_factor_out,
                l.iter_in,
                l.dst_factor_in,
                l.src_factor_in
            )
        };
        match self {
            Insn::Load(m) | Insn::Store(m) => {
                let kind = if matches!(self, Insn::Load(_)) { "LOAD" } else { "STORE" };
                let mem = MemId::from_bits(m.memory_type as u64)
                    .map_or(format!("mem{}", m.memory_type), |id| id.name().into());
                if m.x_size == 0 {
                    return write!(f, "NOP ({kind} {mem}){}", m.deps);
                }
                write!(
                    f,
                    "{kind} {mem} sram {} dram {:#x} y {} x {} stride {} pad y ({}, {}) x ({}, {}){}",
                    m.sram_base,
                    m.dram_base,
                    m.y_size,
                    m.x_size,
                    m.x_stride,
                    m.y_pad_0,
                    m.y_pad_1,
                    m.x_pad_0,
                    m.x_pad_1,
                    m.deps
                )
            }
            Insn::Gemm(g) => {
                write!(f, "GEMM{} ", if g.reset { " reset" } else { "" })?;
                loops(f, &g.loops)?;
                write!(f, " wgt ({}, {}){}", g.wgt_factor_out, g.wgt_factor_in, g.deps)
            }
            Insn::Alu(a) => {
                write!(f, "ALU {:?} ", a.op)?;
                if a.use_imm {
                    write!(f, "imm {} ", a.imm)?;
                }
                loops(f, &a.loops)?;
                write!(f, "{}", a.deps)
            }
            Insn::Finish(d) => write!(f, "FINISH{d}"),
        }
    }
}

/// A readable listing of a raw stream: index, the two words (high, low) and the instruction.
pub fn disassemble(isa: &Isa, bytes: &[u8]) -> Result<String, VtaError> {
    let mut out = String::new();
    for (k, w) in words(bytes)?.enumerate() {
        let text = match isa.decode(w) {
            Ok(insn) => insn.to_string(),
            Err(e) => format!("<{e}>"),
        };
        out.push_str(&format!("{k:5}  {:016x} {:016x}  {text}\n", (w >> 64) as u64, w as u64));
    }
    Ok(out)
}
