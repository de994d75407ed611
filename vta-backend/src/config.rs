//! The hardware configuration (VTA's `vta_config.json`) and everything derived from it: element
//! sizes, SRAM depths and the widths of the index fields in instructions and micro-ops.

use crate::VtaError;

/// Memory ids of LOAD/STORE instructions (§2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemId {
    Uop = 0,
    Wgt = 1,
    Inp = 2,
    Acc = 3,
    Out = 4,
    /// int8 data sign-extended into the accumulator (an fsim extension).
    Acc8Bit = 5,
}

impl MemId {
    pub fn from_bits(v: u64) -> Option<MemId> {
        Some(match v {
            0 => MemId::Uop,
            1 => MemId::Wgt,
            2 => MemId::Inp,
            3 => MemId::Acc,
            4 => MemId::Out,
            5 => MemId::Acc8Bit,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            MemId::Uop => "UOP",
            MemId::Wgt => "WGT",
            MemId::Inp => "INP",
            MemId::Acc => "ACC",
            MemId::Out => "OUT",
            MemId::Acc8Bit => "ACC_8BIT",
        }
    }
}

/// A VTA hardware configuration. The simulator supports 8-bit inputs and weights with 32-bit
/// accumulators (the arithmetic VTA's functional simulator defines); batch, block and buffer
/// sizes are free within the ISA's field widths. `#[repr(C)]`: C programs pass it as
/// `HeronVtaConfig` (`heron_vta_session_new`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwConfig {
    pub log_inp_width: u32,
    pub log_wgt_width: u32,
    pub log_acc_width: u32,
    pub log_batch: u32,
    pub log_block_in: u32,
    pub log_block_out: u32,
    pub log_uop_buff_size: u32,
    pub log_inp_buff_size: u32,
    pub log_wgt_buff_size: u32,
    pub log_acc_buff_size: u32,
}

impl Default for HwConfig {
    /// `fsim_sample.json`: 1x16 blocks, i8 inputs and weights, i32 accumulators.
    fn default() -> Self {
        HwConfig {
            log_inp_width: 3,
            log_wgt_width: 3,
            log_acc_width: 5,
            log_batch: 0,
            log_block_in: 4,
            log_block_out: 4,
            log_uop_buff_size: 15,
            log_inp_buff_size: 15,
            log_wgt_buff_size: 18,
            log_acc_buff_size: 17,
        }
    }
}

/// Bytes of one uop and one instruction.
pub const UOP_BYTES: usize = 4;
pub const INSN_BYTES: usize = 16;
/// The contiguous-transfer limit of VTA's driver (`VTA_MAX_XFER`): the largest instruction
/// stream or uop staging area.
pub const MAX_XFER: usize = 1 << 25;
/// Width of the loop-iteration fields of GEMM/ALU instructions.
pub const LOOP_ITER_BITS: u32 = 14;

impl HwConfig {
    /// Checks the configuration is one the simulator and the ISA can represent.
    pub fn validate(&self) -> Result<(), VtaError> {
        let bad = |why: String| Err(VtaError::Config(why));
        if (self.log_inp_width, self.log_wgt_width, self.log_acc_width) != (3, 3, 5) {
            return bad("only 8-bit inputs/weights with 32-bit accumulators are simulated".into());
        }
        if self.log_batch > 4 || self.log_block_in > 6 || self.log_block_out > 6 {
            return bad("batch at most 16 and blocks at most 64 lanes".into());
        }
        for (name, depth) in [
            ("uop", self.log_uop_depth()),
            ("inp", self.log_inp_depth()),
            ("wgt", self.log_wgt_depth()),
            ("acc", self.log_acc_depth()),
        ] {
            if !(1..=16).contains(&depth) {
                return bad(format!("the {name} buffer depth 2^{depth} is outside 2^1..2^16 (16-bit SRAM indices)"));
            }
        }
        let uop_bits = self.log_acc_depth() + self.log_acc_depth().max(self.log_inp_depth()) + self.log_wgt_depth();
        if uop_bits != 32 {
            return bad(format!("micro-op fields take {uop_bits} bits; they must fill exactly 32"));
        }
        Ok(())
    }

    pub fn batch(&self) -> usize {
        1 << self.log_batch
    }

    pub fn block_in(&self) -> usize {
        1 << self.log_block_in
    }

    pub fn block_out(&self) -> usize {
        1 << self.log_block_out
    }

    /// log2 of the number of elements each SRAM holds.
    pub fn log_uop_depth(&self) -> u32 {
        (self.log_uop_buff_size + 3).saturating_sub(5)
    }

    pub fn log_inp_depth(&self) -> u32 {
        (self.log_inp_buff_size + 3).saturating_sub(self.log_batch + self.log_block_in + self.log_inp_width)
    }

    pub fn log_wgt_depth(&self) -> u32 {
        (self.log_wgt_buff_size + 3).saturating_sub(self.log_block_out + self.log_block_in + self.log_wgt_width)
    }

    pub fn log_acc_depth(&self) -> u32 {
        (self.log_acc_buff_size + 3).saturating_sub(self.log_batch + self.log_block_out + self.log_acc_width)
    }

    /// Elements each SRAM holds.
    pub fn depth(&self, mem: MemId) -> usize {
        1 << match mem {
            MemId::Uop => self.log_uop_depth(),
            MemId::Inp => self.log_inp_depth(),
            MemId::Wgt => self.log_wgt_depth(),
            MemId::Acc | MemId::Out | MemId::Acc8Bit => self.log_acc_depth(),
        }
    }

    /// Lanes (scalars) of one element of `mem`.
    pub fn lanes(&self, mem: MemId) -> usize {
        match mem {
            MemId::Uop => 1,
            MemId::Inp => self.batch() * self.block_in(),
            MemId::Wgt => self.block_out() * self.block_in(),
            MemId::Acc | MemId::Out | MemId::Acc8Bit => self.batch() * self.block_out(),
        }
    }

    /// Bytes of one element of `mem` in DRAM: the unit of `dram_base` and `x_stride`.
    pub fn elem_bytes(&self, mem: MemId) -> usize {
        match mem {
            MemId::Uop => UOP_BYTES,
            MemId::Inp | MemId::Wgt | MemId::Out | MemId::Acc8Bit => self.lanes(mem),
            MemId::Acc => self.lanes(mem) * 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_matches_the_fact_sheet() {
        let c = HwConfig::default();
        c.validate().unwrap();
        assert_eq!((c.log_uop_depth(), c.log_inp_depth(), c.log_wgt_depth(), c.log_acc_depth()), (13, 11, 10, 11));
        let bytes: Vec<usize> = [MemId::Uop, MemId::Wgt, MemId::Inp, MemId::Acc, MemId::Out, MemId::Acc8Bit]
            .map(|m| c.elem_bytes(m))
            .into();
        assert_eq!(bytes, [4, 256, 16, 64, 16, 16]);
        assert_eq!(c.depth(MemId::Wgt), 1024);
    }

    #[test]
    fn configs_whose_uops_do_not_fill_32_bits_are_rejected() {
        let c = HwConfig { log_acc_buff_size: 16, ..HwConfig::default() };
        assert!(c.validate().is_err());
    }
}
