//! Residual adds on VTA: `a * 2^i + b * 2^j`, requantized, over two int8 tensors of one packed
//! shape. Each tile loads a run of elements of both operands into the accumulators (ACC_8BIT
//! loads sign-extend int8; they are an extension of VTA's functional simulator, as TVM's
//! residual adds used), aligns them with left shifts, adds, requantizes and stores.

use heron_vta::region::RegionProgram;
use heron_vta::{AluOp, HwConfig, MemId};

use crate::CompileError;
use crate::partition::Requant;
use crate::program::{Builder, Loop, Pads, requantize_steps};

pub const SLOT_A: u8 = 0;
pub const SLOT_B: u8 = 1;
pub const SLOT_OUTPUT: u8 = 2;

const ITER_LIMIT: usize = (1 << heron_vta::config::LOOP_ITER_BITS) - 1;

/// Packed elements of a tensor of logical shape `shape` (NCHW or NC).
pub fn packed_elements(shape: &[usize], c: &HwConfig) -> usize {
    let blocks = shape[0].div_ceil(c.batch()) * shape[1].div_ceil(c.block_out());
    blocks * shape[2..].iter().product::<usize>()
}

/// Elements per tile: half the accumulator each operand, within the loop and load fields.
pub fn plan_add(shape: &[usize], c: &HwConfig) -> Result<usize, CompileError> {
    if c.block_in() != c.block_out() {
        return Err(CompileError::Tiling("BLOCK_IN != BLOCK_OUT".into()));
    }
    let total = packed_elements(shape, c);
    let tile = (c.depth(MemId::Acc) / 2).min(ITER_LIMIT).min(total);
    if tile == 0 {
        return Err(CompileError::Tiling("an empty tensor or an accumulator of one element".into()));
    }
    Ok(tile)
}

/// The program of a residual add: operands in slots 0 and 1, output in slot 2.
pub fn emit_add(
    name: &str,
    shape: &[usize],
    shifts: [u32; 2],
    requant: Requant,
    c: &HwConfig,
) -> Result<RegionProgram, CompileError> {
    let tile = plan_add(shape, c)?;
    let total = packed_elements(shape, c);
    let mut b = Builder::new(*c);
    let u_a = b.uop(0, 0, 0)?;
    let u_sum = b.uop(0, tile, 0)?;
    let u_b = b.uop(tile, 0, 0)?;
    let steps = requantize_steps(requant.shift, requant.min, requant.max);
    let starts: Vec<usize> = (0..total).step_by(tile).collect();
    for (k, &at) in starts.iter().enumerate() {
        let n = tile.min(total - at);
        let la = b.load(MemId::Acc8Bit, SLOT_A, 0, at as u64, (1, n, n), Pads::default())?;
        b.deps(la).pop_next = k > 0;
        b.load(MemId::Acc8Bit, SLOT_B, tile, at as u64, (1, n, n), Pads::default())?;
        let all = Loop::new(n, 1, 1, 0);
        let one = Loop::new(1, 0, 0, 0);
        for (shift, uop) in [(shifts[0], u_a), (shifts[1], u_b)] {
            if shift > 0 {
                b.alu(AluOp::Shr, Some(-(shift as i32)), uop, Loop { src: 0, ..all }, one)?;
            }
        }
        let mut last = b.alu(AluOp::Add, None, u_sum, all, one)?;
        for &(op, imm) in &steps {
            last = b.alu(op, Some(imm), u_a, Loop { src: 0, ..all }, one)?;
        }
        b.deps(last).push_next = true;
        let st = b.store(SLOT_OUTPUT, 0, at as u64, (1, n, n))?;
        b.deps(st).pop_prev = true;
        b.deps(st).push_prev = true;
    }
    b.finish(name)
}
