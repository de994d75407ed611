//! Hand-built programs: uploading micro-ops and running a raw instruction stream through any
//! driver, without the runtime's command queue (what VTA's hardware tests do).

use crate::VtaError;
use crate::config::INSN_BYTES;
use crate::driver::{DeviceId, Driver};
use crate::isa::{Insn, Isa, Uop};
use crate::memory::DramBlock;

/// Copies `uops` into a fresh DRAM block; a UOP load reads them at `block.phys / 4`.
pub fn upload_uops(driver: &mut dyn Driver, isa: &Isa, uops: &[Uop]) -> Result<DramBlock, VtaError> {
    let mut bytes = Vec::with_capacity(uops.len() * 4);
    for u in uops {
        bytes.extend_from_slice(&isa.encode_uop(u)?.to_le_bytes());
    }
    upload(driver, &bytes)
}

/// Copies `bytes` into a fresh DRAM block.
pub fn upload(driver: &mut dyn Driver, bytes: &[u8]) -> Result<DramBlock, VtaError> {
    let block = driver.mem_alloc(bytes.len().max(1), true)?;
    driver.copy_from_host(block.virt, bytes)?;
    Ok(block)
}

/// Encodes `insns`, runs them on `device` and frees the instruction buffer.
pub fn run_stream(driver: &mut dyn Driver, device: DeviceId, isa: &Isa, insns: &[Insn]) -> Result<(), VtaError> {
    let mut bytes = Vec::with_capacity(insns.len() * INSN_BYTES);
    for insn in insns {
        bytes.extend_from_slice(&isa.encode(insn)?.to_le_bytes());
    }
    let block = upload(driver, &bytes)?;
    let result = driver.device_run(device, block.phys, insns.len() as u32, 0);
    driver.mem_free(block.virt)?;
    result
}

/// A blocked int8 GEMM with bias as one hand-built stream (VTA's `blocked_gemm_test`):
/// out[b][o] = int8(bias[b][o] + sum_k inp[b][k] * wgt[o][k]), in VTA's packed layouts
/// (inp (batch, in_blocks) elements, wgt (out_blocks, in_blocks), bias and out
/// (batch, out_blocks)). Tiles of `tile_rows` x `tile_in` / `tile_out` blocks; with
/// `double_buffer`, loads of the next tile overlap compute on the current one (two virtual
/// threads' worth of SRAM and tokens).
#[derive(Clone, Copy, Debug)]
pub struct BlockedGemm {
    pub batch: usize,
    pub in_blocks: usize,
    pub out_blocks: usize,
    pub tile_rows: usize,
    pub tile_in: usize,
    pub tile_out: usize,
    /// One uop per row with both block loops in the GEMM's loop fields, instead of one uop
    /// per multiply.
    pub compressed: bool,
    pub double_buffer: bool,
}

/// Physical addresses of a [`BlockedGemm`]'s operands.
#[derive(Clone, Copy, Debug)]
pub struct GemmBuffers {
    pub inp: u64,
    pub wgt: u64,
    pub bias: u64,
    pub out: u64,
    pub uops: u64,
}

impl BlockedGemm {
    fn buffers(&self) -> usize {
        if self.double_buffer { 2 } else { 1 }
    }

    fn kernel_len(&self) -> usize {
        if self.compressed { self.tile_rows } else { self.tile_rows * self.tile_out * self.tile_in }
    }

    /// The uops: one kernel per (inp/wgt buffer, acc buffer) pair.
    pub fn uops(&self) -> Vec<Uop> {
        let (rows, tin, tout) = (self.tile_rows as u32, self.tile_in as u32, self.tile_out as u32);
        let mut uops = Vec::new();
        for buf in 0..self.buffers() as u32 {
            for abuf in 0..self.buffers() as u32 {
                let (inp, wgt, acc) = (buf * rows * tin, buf * tout * tin, abuf * rows * tout);
                for r in 0..rows {
                    if self.compressed {
                        uops.push(Uop { dst: acc + r * tout, src: inp + r * tin, wgt });
                        continue;
                    }
                    for o in 0..tout {
                        for i in 0..tin {
                            uops.push(Uop { dst: acc + r * tout + o, src: inp + r * tin + i, wgt: wgt + o * tin + i });
                        }
                    }
                }
            }
        }
        uops
    }

    /// Multiply-accumulates of the whole product (int8 x int8).
    pub fn macs(&self) -> u64 {
        (self.batch * self.in_blocks * self.out_blocks) as u64 * 16 * 16
    }

    /// The instruction stream (the uops of [`BlockedGemm::uops`] at `b.uops`).
    pub fn stream(&self, b: &GemmBuffers) -> Vec<Insn> {
        use crate::isa::{DepFlags, GemmInsn, MemInsn, UopLoops};
        let lag = self.buffers();
        let (rows, tin, tout) = (self.tile_rows, self.tile_in, self.tile_out);
        let tiles = (self.batch / rows) * (self.out_blocks / tout);
        let loads = tiles * (self.in_blocks / tin);
        let n_uops = self.uops().len();
        let mem =
            |id: crate::MemId, sram: usize, dram: u64, y: usize, x: usize, stride: usize, deps: DepFlags| MemInsn {
                deps,
                memory_type: id as u8,
                sram_base: sram as u16,
                dram_base: dram as u32,
                y_size: y as u16,
                x_size: x as u16,
                x_stride: stride as u16,
                ..MemInsn::default()
            };
        let mut insns = vec![Insn::Load(mem(crate::MemId::Uop, 0, b.uops / 4, 1, n_uops, n_uops, DepFlags::default()))];
        let (mut t, mut k) = (0, 0);
        for bt in 0..self.batch / rows {
            for ot in 0..self.out_blocks / tout {
                let abuf = t % lag;
                let first_acc = bt * rows * self.out_blocks + ot * tout;
                let deps = DepFlags { pop_next: t >= lag, ..DepFlags::default() };
                insns.push(Insn::Load(mem(
                    crate::MemId::Acc,
                    abuf * rows * tout,
                    b.bias / 64 + first_acc as u64,
                    rows,
                    tout,
                    self.out_blocks,
                    deps,
                )));
                for it in 0..self.in_blocks / tin {
                    let buf = k % lag;
                    let deps = DepFlags { pop_next: k >= lag, ..DepFlags::default() };
                    let wgt = b.wgt / 256 + (ot * tout * self.in_blocks + it * tin) as u64;
                    insns.push(Insn::Load(mem(
                        crate::MemId::Wgt,
                        buf * tout * tin,
                        wgt,
                        tout,
                        tin,
                        self.in_blocks,
                        deps,
                    )));
                    let deps = DepFlags { push_next: true, ..DepFlags::default() };
                    let inp = b.inp / 16 + (bt * rows * self.in_blocks + it * tin) as u64;
                    insns.push(Insn::Load(mem(
                        crate::MemId::Inp,
                        buf * rows * tin,
                        inp,
                        rows,
                        tin,
                        self.in_blocks,
                        deps,
                    )));
                    let kernel = (buf * lag + abuf) * self.kernel_len();
                    let mut loops = UopLoops {
                        uop_bgn: kernel as u32,
                        uop_end: (kernel + self.kernel_len()) as u32,
                        iter_out: 1,
                        iter_in: 1,
                        ..UopLoops::default()
                    };
                    let (mut wgt_factor_out, mut wgt_factor_in) = (0, 0);
                    if self.compressed {
                        (loops.iter_out, loops.src_factor_out, wgt_factor_out) = (tin as u32, 1, 1);
                        (loops.iter_in, loops.dst_factor_in, wgt_factor_in) = (tout as u32, 1, tin as u32);
                    }
                    let deps = DepFlags {
                        pop_prev: true,
                        push_prev: k + lag < loads,
                        push_next: it + 1 == self.in_blocks / tin,
                        ..DepFlags::default()
                    };
                    insns.push(Insn::Gemm(GemmInsn { deps, reset: false, loops, wgt_factor_out, wgt_factor_in }));
                    k += 1;
                }
                let deps =
                    DepFlags { pop_prev: true, push_prev: t + lag < tiles || t + 1 == tiles, ..DepFlags::default() };
                let out = b.out / 16 + first_acc as u64;
                insns.push(Insn::Store(mem(
                    crate::MemId::Out,
                    abuf * rows * tout,
                    out,
                    rows,
                    tout,
                    self.out_blocks,
                    deps,
                )));
                t += 1;
            }
        }
        insns.push(Insn::Finish(DepFlags { pop_next: true, ..DepFlags::default() }));
        insns
    }
}
