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
    /// VTA's `blocked_gemm_test(256, 256, 64)`: a 256x256x256 product in 64-wide tiles.
    pub fn reference_256(compressed: bool, double_buffer: bool) -> BlockedGemm {
        BlockedGemm {
            batch: 256,
            in_blocks: 16,
            out_blocks: 16,
            tile_rows: 64,
            tile_in: 4,
            tile_out: 4,
            compressed,
            double_buffer,
        }
    }

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
        let mem = |id, sram, dram, y, x, stride, deps| MemInsn::transfer(id, sram, dram, y, x, stride).with_deps(deps);
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

/// A 3x3, stride-1, pad-1 convolution (batch 1) as one hand-built stream, row by row with
/// double-buffered input rows and accumulators: out = clip(conv >> 8, 0, 127) as int8, in VTA's
/// packed layouts (input (in_blocks, h, w), weights (out_blocks, in_blocks, 3, 3), output
/// (out_blocks, h, w) elements of 16 channels). Padding comes from padded INP loads.
#[derive(Clone, Copy, Debug)]
pub struct Conv3x3 {
    pub h: usize,
    pub w: usize,
    pub in_blocks: usize,
    pub out_blocks: usize,
}

impl Conv3x3 {
    fn row_elems(&self) -> usize {
        self.in_blocks * 3 * (self.w + 2)
    }

    fn taps(&self) -> usize {
        self.in_blocks * 9
    }

    /// GEMM kernels per (input buffer, acc buffer), then reset and ALU uops per acc buffer.
    pub fn uops(&self) -> Vec<Uop> {
        let (wp, row, acc) = ((self.w + 2) as u32, self.row_elems() as u32, (self.out_blocks * self.w) as u32);
        let mut uops = Vec::new();
        for b in 0..2 {
            for a in 0..2 {
                for i in 0..self.in_blocks as u32 {
                    for ky in 0..3 {
                        for kx in 0..3 {
                            uops.push(Uop {
                                dst: a * acc,
                                src: b * row + i * 3 * wp + ky * wp + kx,
                                wgt: (i * 3 + ky) * 3 + kx,
                            });
                        }
                    }
                }
            }
        }
        uops.extend((0..2).map(|a| Uop { dst: a * acc, src: 0, wgt: 0 }));
        uops.extend((0..2).map(|a| Uop { dst: a * acc, src: a * acc, wgt: 0 }));
        uops
    }

    pub fn macs(&self) -> u64 {
        (self.h * self.w * self.in_blocks * self.out_blocks * 9) as u64 * 256
    }

    /// The stream; `b.inp`, `b.wgt`, `b.out`, `b.uops` are used (no bias).
    pub fn stream(&self, b: &GemmBuffers) -> Vec<Insn> {
        use crate::isa::{AluInsn, AluOp, DepFlags, GemmInsn, MemInsn, UopLoops};
        let (h, w, ib, ob) = (self.h, self.w, self.in_blocks, self.out_blocks);
        let n_uops = self.uops().len();
        let taps = self.taps();
        let (reset_at, alu_at) = (4 * taps, 4 * taps + 2);
        let none = DepFlags::default();
        let mem = MemInsn::transfer;
        let mut insns = vec![
            Insn::Load(mem(crate::MemId::Uop, 0, b.uops / 4, 1, n_uops, n_uops)),
            Insn::Load(mem(crate::MemId::Wgt, 0, b.wgt / 256, 1, ob * ib * 9, ob * ib * 9)),
        ];
        for y in 0..h {
            let (buf, abuf) = (y % 2, y % 2);
            for i in 0..ib {
                let top = y.saturating_sub(1);
                let bottom = (y + 1).min(h - 1);
                let mut m = mem(
                    crate::MemId::Inp,
                    buf * self.row_elems() + i * 3 * (w + 2),
                    b.inp / 16 + ((i * h + top) * w) as u64,
                    bottom - top + 1,
                    w,
                    w,
                );
                (m.x_pad_0, m.x_pad_1, m.y_pad_0, m.y_pad_1) = (1, 1, (y == 0) as u8, (y == h - 1) as u8);
                m.deps = DepFlags { pop_next: i == 0 && y >= 2, push_next: i + 1 == ib, ..none };
                insns.push(Insn::Load(m));
            }
            let loops =
                |bgn: usize, end: usize, io: usize, dst_out: usize, ii: usize, dst_in: usize, src_in: usize| UopLoops {
                    uop_bgn: bgn as u32,
                    uop_end: end as u32,
                    iter_out: io as u32,
                    iter_in: ii as u32,
                    dst_factor_out: dst_out as u32,
                    dst_factor_in: dst_in as u32,
                    src_factor_out: 0,
                    src_factor_in: src_in as u32,
                };
            let reset = loops(reset_at + abuf, reset_at + abuf + 1, ob, w, w, 1, 0);
            insns.push(Insn::Gemm(GemmInsn {
                deps: DepFlags { pop_next: y >= 2, ..none },
                reset: true,
                loops: reset,
                wgt_factor_out: 0,
                wgt_factor_in: 0,
            }));
            let kernel = (buf * 2 + abuf) * taps;
            let conv = loops(kernel, kernel + taps, ob, w, w, 1, 1);
            let deps = DepFlags { pop_prev: true, push_prev: y + 2 < h, ..none };
            insns.push(Insn::Gemm(GemmInsn {
                deps,
                reset: false,
                loops: conv,
                wgt_factor_out: (ib * 9) as u32,
                wgt_factor_in: 0,
            }));
            for (k, (op, imm)) in [(AluOp::Shr, 8), (AluOp::Max, 0), (AluOp::Min, 127)].into_iter().enumerate() {
                let l = loops(alu_at + abuf, alu_at + abuf + 1, 1, 0, ob * w, 1, 1);
                let deps = DepFlags { push_next: k == 2, ..none };
                insns.push(Insn::Alu(AluInsn { deps, reset: false, loops: l, op, use_imm: true, imm }));
            }
            let mut st = mem(crate::MemId::Out, abuf * ob * w, b.out / 16 + (y * w) as u64, ob, w, h * w);
            st.deps = DepFlags { pop_prev: true, push_prev: y + 2 < h || y + 1 == h, ..none };
            insns.push(Insn::Store(st));
        }
        insns.push(Insn::Finish(DepFlags { pop_next: true, ..none }));
        insns
    }
}
