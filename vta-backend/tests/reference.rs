//! Re-creations of VTA's reference tests (VTA-FACTS §8.1 through the runtime API, §8.3 as raw
//! instruction streams), asserting results against integer formulas computed here.

use std::sync::Arc;

use heron_vta::driver::{DeviceId, Driver, SimDriver};
use heron_vta::isa::{AluInsn, DepFlags, GemmInsn, Insn, MemInsn, UopLoops};
use heron_vta::memory::DramBlock;
use heron_vta::program::{BlockedGemm, GemmBuffers, run_stream, upload, upload_uops};
use heron_vta::runtime::{CommandQueue, DEFAULT_WAIT_CYCLES, KernelRecorder, UopKernel};
use heron_vta::{AluOp, HwConfig, Isa, MemId, Uop};

/// Deterministic test data (xorshift64*).
struct Rng(u64);

impl Rng {
    fn range(&mut self, lo: i32, hi: i32) -> i32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33;
        lo + (r % (hi - lo) as u64) as i32
    }

    fn vec(&mut self, n: usize, lo: i32, hi: i32) -> Vec<i32> {
        (0..n).map(|_| self.range(lo, hi)).collect()
    }
}

fn i8_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().map(|&x| x as i8 as u8).collect()
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

struct Session {
    driver: SimDriver,
    queue: CommandQueue,
}

impl Session {
    fn new() -> Session {
        let isa = Isa::new(HwConfig::default()).unwrap();
        let mut driver = SimDriver::new(isa.clone());
        let queue = CommandQueue::new(isa, &mut driver).unwrap();
        Session { driver, queue }
    }

    fn buffer(&mut self, bytes: &[u8]) -> DramBlock {
        upload(&mut self.driver, bytes).unwrap()
    }

    fn read(&self, b: &DramBlock, len: usize) -> Vec<i8> {
        let mut out = vec![0u8; len];
        self.driver.copy_to_host(&mut out, b.virt).unwrap();
        out.into_iter().map(|x| x as i8).collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn load(&mut self, b: &DramBlock, x: u32, y: u32, stride: u32, pads: [u32; 4], sram: u32, id: MemId) {
        let [xb, yb, xa, ya] = pads;
        self.queue.load_buffer_2d(&mut self.driver, b.phys, 0, x, y, stride, xb, yb, xa, ya, sram, id as u32).unwrap();
    }

    fn store(&mut self, sram: u32, b: &DramBlock, x: u32, y: u32, stride: u32) {
        self.queue.dep_push(2, 3).unwrap();
        self.queue.dep_pop(2, 3).unwrap();
        self.queue.store_buffer_2d(&mut self.driver, sram, MemId::Out as u32, b.phys, 0, x, y, stride).unwrap();
    }

    fn sync(&mut self) {
        self.queue.synchronize(&mut self.driver, DEFAULT_WAIT_CYCLES).unwrap();
    }
}

/// One ALU uop over `n` acc elements: acc[i] = op(acc[i], imm or acc[src_offset + i]).
fn alu_kernel(n: u32, src_offset: u32, op: AluOp, imm: Option<i32>) -> Arc<UopKernel> {
    let mut k = KernelRecorder::default();
    k.loop_begin(n, 1, 1, 0);
    k.push(1, false, 0, src_offset, 0, op as u32, imm.is_some(), imm.unwrap_or(0));
    k.loop_end();
    k.finish().unwrap()
}

fn alu_ref(op: AluOp, a: i32, b: i32) -> i32 {
    heron_vta::sim::alu_op(op, a, b)
}

#[test]
fn runtime_array_round_trips() {
    let mut s = Session::new();
    let x = Rng(1).vec(100 * 100 * 16, 1, 10);
    let b = s.buffer(&i8_bytes(&x));
    assert_eq!(s.read(&b, x.len()), x.iter().map(|&v| v as i8).collect::<Vec<_>>());
}

#[test]
fn save_load_out() {
    let mut s = Session::new();
    let x = Rng(2).vec(36 * 16, 1, 10);
    let src = s.buffer(&i32_bytes(&x));
    let out = s.buffer(&[0; 36 * 16]);
    s.load(&src, 36, 1, 36, [0; 4], 0, MemId::Acc);
    s.queue.push_kernel(&alu_kernel(36, 0, AluOp::Shr, Some(0))).unwrap();
    s.store(0, &out, 36, 1, 36);
    s.sync();
    assert_eq!(s.read(&out, 36 * 16), x.iter().map(|&v| v as i8).collect::<Vec<_>>());
}

#[test]
fn padded_loads() {
    // (pad before, pad after) on dims (y, x).
    for (name, pb, pa) in [
        ("Y0", [2, 0], [0, 0]),
        ("Y1", [0, 2], [0, 0]),
        ("X0", [0, 0], [2, 0]),
        ("X1", [0, 0], [0, 2]),
        ("all", [1, 1], [1, 1]),
    ] {
        let mut s = Session::new();
        let x = Rng(3).vec(3 * 5 * 16, 0, 10);
        let (rows, cols) = (3 + pb[0] + pa[0], 5 + pb[1] + pa[1]);
        let src = s.buffer(&i32_bytes(&x));
        let out = s.buffer(&vec![0xAA; rows * cols * 16]);
        s.load(&src, 5, 3, 5, [pb[1] as u32, pb[0] as u32, pa[1] as u32, pa[0] as u32], 0, MemId::Acc);
        let n = (rows * cols) as u32;
        s.queue.push_kernel(&alu_kernel(n, 0, AluOp::Shr, Some(0))).unwrap();
        s.store(0, &out, n, 1, n);
        s.sync();
        let got = s.read(&out, rows * cols * 16);
        for r in 0..rows {
            for c in 0..cols {
                for l in 0..16 {
                    let inside = (pb[0]..pb[0] + 3).contains(&r) && (pb[1]..pb[1] + 5).contains(&c);
                    let want = if inside { x[((r - pb[0]) * 5 + c - pb[1]) * 16 + l] as i8 } else { 0 };
                    assert_eq!(got[(r * cols + c) * 16 + l], want, "{name} at ({r}, {c}, {l})");
                }
            }
        }
    }
}

/// test_gemm: 4 batch rows, 1 input block, 4 output blocks; y = clip((x . w^T) >> 8, 0, 127).
/// `threads` = 2 splits the batch between two virtual threads whose instructions and tokens
/// interleave (the "smt" schedule).
fn gemm_case(threads: usize, serial: bool) {
    let mut s = Session::new();
    if serial {
        s.queue.set_debug(heron_vta::runtime::DEBUG_FORCE_SERIAL);
    }
    let mut rng = Rng(4 + threads as u64);
    let (batch, m) = (4usize, 4usize);
    let x = rng.vec(batch * 16, -128, 128);
    let w = rng.vec(m * 256, -128, 128);
    let xb = s.buffer(&i8_bytes(&x));
    let wb = s.buffer(&i8_bytes(&w));
    let out = s.buffer(&vec![0; batch * m * 16]);
    let rows = batch / threads;
    s.load(&wb, m as u32, 1, m as u32, [0; 4], 0, MemId::Wgt);
    let kernels: Vec<(Arc<UopKernel>, Arc<UopKernel>)> = (0..threads as u32)
        .map(|t| {
            let base = t * rows as u32;
            let mut reset = KernelRecorder::default();
            reset.loop_begin(rows as u32, m as u32, 0, 0);
            for i in 0..m as u32 {
                reset.push(0, true, base * m as u32 + i, 0, 0, 0, false, 0);
            }
            reset.loop_end();
            let mut gemm = KernelRecorder::default();
            gemm.loop_begin(rows as u32, m as u32, 1, 0);
            for i in 0..m as u32 {
                gemm.push(0, false, base * m as u32 + i, base, i, 0, false, 0);
            }
            gemm.loop_end();
            (reset.finish().unwrap(), gemm.finish().unwrap())
        })
        .collect();
    for t in 0..threads {
        let sub = DramBlock { phys: xb.phys + (t * rows * 16) as u64, ..xb };
        s.load(&sub, rows as u32, 1, rows as u32, [0; 4], (t * rows) as u32, MemId::Inp);
        s.queue.dep_push(1, 2).unwrap();
    }
    for (reset, gemm) in &kernels {
        s.queue.dep_pop(1, 2).unwrap();
        s.queue.push_kernel(reset).unwrap();
        s.queue.push_kernel(gemm).unwrap();
        let n = (rows * m) as u32;
        let t = kernels.iter().position(|k| Arc::ptr_eq(&k.1, gemm)).unwrap() as u32;
        for (op, imm) in [(AluOp::Shr, 8), (AluOp::Max, 0), (AluOp::Min, 127)] {
            let mut k = KernelRecorder::default();
            k.loop_begin(n, 1, 1, 0);
            k.push(1, false, t * n, t * n, 0, op as u32, true, imm);
            k.loop_end();
            s.queue.push_kernel(&k.finish().unwrap()).unwrap();
        }
    }
    s.store(0, &out, (batch * m) as u32, 1, (batch * m) as u32);
    s.sync();
    let got = s.read(&out, batch * m * 16);
    for b in 0..batch {
        for i in 0..m {
            for o in 0..16 {
                let dot: i32 = (0..16).map(|k| x[b * 16 + k] * w[i * 256 + o * 16 + k]).sum();
                assert_eq!(
                    got[(b * m + i) * 16 + o],
                    (dot >> 8).clamp(0, 127) as i8,
                    "threads {threads} b {b} i {i} o {o}"
                );
            }
        }
    }
}

#[test]
fn gemm_default_and_two_virtual_threads() {
    gemm_case(1, false);
    gemm_case(2, false);
    // The runtime's debug mode that chains every hand-off with tokens gives the same result.
    gemm_case(1, true);
    gemm_case(2, true);
}

/// test_alu, test_relu and test_shift_and_scale: loads of a (and b), ALU op(s), store, cast.
fn alu_program(m: usize, lo: i32, hi: i32, ops: &[(AluOp, Option<i32>)], seed: u64) {
    let mut s = Session::new();
    let mut rng = Rng(seed);
    let n = m * 8;
    let a = rng.vec(n * 16, lo, hi);
    let b = rng.vec(n * 16, lo, hi);
    let ab = s.buffer(&i32_bytes(&[a.clone(), b.clone()].concat()));
    let out = s.buffer(&vec![0; n * 16]);
    s.load(&ab, 2 * n as u32, 1, 2 * n as u32, [0; 4], 0, MemId::Acc);
    for &(op, imm) in ops {
        s.queue.push_kernel(&alu_kernel(n as u32, n as u32, op, imm)).unwrap();
    }
    s.store(0, &out, n as u32, 1, n as u32);
    s.sync();
    let got = s.read(&out, n * 16);
    for i in 0..n * 16 {
        let want = ops.iter().fold(a[i], |acc, &(op, imm)| alu_ref(op, acc, imm.unwrap_or(b[i])));
        assert_eq!(got[i], want as i8, "{ops:?} lane {i}");
    }
}

#[test]
fn alu_ops_relu_and_shift_and_scale() {
    let imm = Rng(9).range(1, 5);
    for ops in [
        vec![(AluOp::Shr, Some(-imm))],
        vec![(AluOp::Max, Some(imm))],
        vec![(AluOp::Max, None)],
        vec![(AluOp::Add, Some(imm))],
        vec![(AluOp::Add, None)],
        vec![(AluOp::Shr, Some(imm))],
        vec![(AluOp::Mul, Some(-imm))],
        vec![(AluOp::Min, None)],
    ] {
        alu_program(8, -16, 16, &ops, 10);
    }
    alu_program(10, -256, 256, &[(AluOp::Max, Some(0)), (AluOp::Min, Some(127))], 11);
    let (shift, scale) = (Rng(12).range(0, 8), Rng(13).range(1, 5));
    alu_program(2, -10, 10, &[(AluOp::Add, Some(shift)), (AluOp::Shr, Some(scale))], 14);
}

fn sim() -> (Isa, SimDriver, DeviceId) {
    let isa = Isa::new(HwConfig::default()).unwrap();
    let mut driver = SimDriver::new(isa.clone());
    let device = driver.device_alloc().unwrap();
    (isa, driver, device)
}

fn mem(id: MemId, sram: u32, dram: u64, y: u16, x: u16, deps: DepFlags) -> MemInsn {
    MemInsn::transfer(id, sram as usize, dram, y as usize, x as usize, x as usize).with_deps(deps)
}

/// alu_test of the hardware tests: per row, load a (and b), one ALU (compressed into loop
/// fields or one uop per element), store; tokens chain the rows.
fn hw_alu_test(op: AluOp, use_imm: bool, compressed: bool) {
    let (isa, mut driver, dev) = sim();
    let (batch, tx) = (16usize, 8usize);
    let (lo, hi, ilo, ihi) = match op {
        AluOp::Shr => (-8, 8, -8, 8),
        AluOp::Add => (-32, 32, -16384, 16384),
        _ => (-64, 64, -16384, 16384),
    };
    let mut rng = Rng(20 + op as u64);
    let width = if use_imm { tx } else { 2 * tx };
    let input = rng.vec(batch * width * 16, lo, hi);
    let imms: Vec<i32> = (0..batch).map(|_| rng.range(ilo, ihi)).collect();
    let src = upload(&mut driver, &i32_bytes(&input)).unwrap();
    let out = upload(&mut driver, &vec![0; batch * tx * 16]).unwrap();
    let uops: Vec<Uop> = if compressed {
        vec![Uop { dst: 0, src: tx as u32, wgt: 0 }]
    } else {
        (0..tx as u32).map(|i| Uop { dst: i, src: tx as u32 + i, wgt: 0 }).collect()
    };
    let ub = upload_uops(&mut driver, &isa, &uops).unwrap();
    let mut insns = vec![Insn::Load(mem(MemId::Uop, 0, ub.phys / 4, 1, uops.len() as u16, DepFlags::default()))];
    for (b, &imm) in imms.iter().enumerate() {
        let dram = src.phys / 64 + (b * width) as u64;
        insns.push(Insn::Load(mem(
            MemId::Acc,
            0,
            dram,
            1,
            width as u16,
            DepFlags { pop_next: b > 0, ..DepFlags::default() },
        )));
        let loops = if compressed {
            UopLoops {
                uop_bgn: 0,
                uop_end: 1,
                iter_out: 1,
                iter_in: tx as u32,
                dst_factor_in: 1,
                src_factor_in: 1,
                ..UopLoops::default()
            }
        } else {
            UopLoops { uop_bgn: 0, uop_end: tx as u32, iter_out: 1, iter_in: 1, ..UopLoops::default() }
        };
        let deps = DepFlags { push_next: true, ..DepFlags::default() };
        insns.push(Insn::Alu(AluInsn { deps, reset: false, loops, op, use_imm, imm: imm as i16 }));
        let deps = DepFlags { pop_prev: true, push_prev: true, ..DepFlags::default() };
        insns.push(Insn::Store(mem(MemId::Out, 0, out.phys / 16 + (b * tx) as u64, 1, tx as u16, deps)));
    }
    insns.push(Insn::Finish(DepFlags { pop_next: true, ..DepFlags::default() }));
    run_stream(&mut driver, dev, &isa, &insns).unwrap();
    let mut got = vec![0u8; batch * tx * 16];
    driver.copy_to_host(&mut got, out.virt).unwrap();
    for b in 0..batch {
        for i in 0..tx * 16 {
            let a = input[b * width * 16 + i];
            let operand = if use_imm { imms[b] } else { input[b * width * 16 + tx * 16 + i] };
            assert_eq!(
                got[b * tx * 16 + i] as i8,
                alu_ref(op, a, operand) as i8,
                "{op:?} imm {use_imm} row {b} lane {i}"
            );
        }
    }
    let p = driver.profile().unwrap();
    assert_eq!(p.alu_counter, (batch * tx) as u64);
    assert_eq!(p.out_store_nbytes, (batch * tx * 16) as u64);
}

#[test]
fn hardware_alu_tests() {
    for op in [AluOp::Min, AluOp::Max, AluOp::Add, AluOp::Shr] {
        for use_imm in [true, false] {
            for compressed in [true, false] {
                hw_alu_test(op, use_imm, compressed);
            }
        }
    }
}

/// gemm_test(4, 64, 64): bias + dot, narrowed; one GEMM with or without uop compression.
fn hw_gemm_test(compressed: bool) {
    let (isa, mut driver, dev) = sim();
    let (batch, in_b, out_b) = (4usize, 4usize, 4usize);
    let mut rng = Rng(30);
    let inp = rng.vec(batch * in_b * 16, -128, 128);
    let wgt = rng.vec(out_b * in_b * 256, -128, 128);
    let bias = rng.vec(batch * out_b * 16, -(1 << 20), 1 << 20);
    let (ib, wb, bb) = (
        upload(&mut driver, &i8_bytes(&inp)).unwrap(),
        upload(&mut driver, &i8_bytes(&wgt)).unwrap(),
        upload(&mut driver, &i32_bytes(&bias)).unwrap(),
    );
    let out = upload(&mut driver, &vec![0; batch * out_b * 16]).unwrap();
    let mut uops = Vec::new();
    let (ib_u, ob_u) = (in_b as u32, out_b as u32);
    for i in 0..batch as u32 {
        if compressed {
            uops.push(Uop { dst: i * ob_u, src: i * ib_u, wgt: 0 });
            continue;
        }
        for j in 0..ib_u {
            for k in 0..ob_u {
                uops.push(Uop { dst: i * ob_u + k, src: i * ib_u + j, wgt: k * ib_u + j });
            }
        }
    }
    let ub = upload_uops(&mut driver, &isa, &uops).unwrap();
    let none = DepFlags::default();
    let mut loops = UopLoops { uop_bgn: 0, uop_end: uops.len() as u32, iter_out: 1, iter_in: 1, ..UopLoops::default() };
    let (mut wo, mut wi) = (0, 0);
    if compressed {
        (loops.iter_out, loops.src_factor_out, wo) = (ib_u, 1, 1);
        (loops.iter_in, loops.dst_factor_in, wi) = (ob_u, 1, ib_u);
    }
    let insns = vec![
        Insn::Load(mem(MemId::Uop, 0, ub.phys / 4, 1, uops.len() as u16, none)),
        Insn::Load(mem(MemId::Acc, 0, bb.phys / 64, 1, (batch * out_b) as u16, DepFlags { push_prev: true, ..none })),
        Insn::Load(mem(MemId::Wgt, 0, wb.phys / 256, 1, (out_b * in_b) as u16, DepFlags { pop_next: true, ..none })),
        Insn::Load(mem(MemId::Inp, 0, ib.phys / 16, 1, (batch * in_b) as u16, DepFlags { push_next: true, ..none })),
        Insn::Gemm(GemmInsn {
            deps: DepFlags { pop_prev: true, push_next: true, ..none },
            reset: false,
            loops,
            wgt_factor_out: wo,
            wgt_factor_in: wi,
        }),
        Insn::Store(mem(
            MemId::Out,
            0,
            out.phys / 16,
            1,
            (batch * out_b) as u16,
            DepFlags { pop_prev: true, push_prev: true, ..none },
        )),
        Insn::Finish(DepFlags { pop_next: true, ..none }),
    ];
    run_stream(&mut driver, dev, &isa, &insns).unwrap();
    let mut got = vec![0u8; batch * out_b * 16];
    driver.copy_to_host(&mut got, out.virt).unwrap();
    for i in 0..batch {
        for j in 0..out_b * 16 {
            let (ob, o) = (j / 16, j % 16);
            let dot = (0..in_b * 16)
                .map(|k| inp[i * in_b * 16 + k].wrapping_mul(wgt[(ob * in_b + k / 16) * 256 + o * 16 + k % 16]))
                .fold(bias[i * out_b * 16 + j], i32::wrapping_add);
            assert_eq!(got[i * out_b * 16 + j] as i8, dot as i8, "compressed {compressed} ({i}, {j})");
        }
    }
    assert_eq!(driver.profile().unwrap().gemm_counter, (batch * in_b * out_b) as u64);
}

#[test]
fn hardware_gemm_test() {
    hw_gemm_test(false);
    hw_gemm_test(true);
}

/// blocked_gemm_test(256, 256, 64) with one and two virtual threads, with and without uop
/// compression.
#[test]
fn blocked_gemm_tests() {
    for double_buffer in [false, true] {
        for compressed in [false, true] {
            let g = BlockedGemm::reference_256(compressed, double_buffer);
            let (isa, mut driver, dev) = sim();
            let mut rng = Rng(40);
            let inp = rng.vec(256 * 256, -128, 128);
            let wgt = rng.vec(256 * 256, -128, 128);
            let bias = rng.vec(256 * 256, -1000, 1000);
            let uops = upload_uops(&mut driver, &isa, &g.uops()).unwrap();
            let bufs = GemmBuffers {
                inp: upload(&mut driver, &i8_bytes(&inp)).unwrap().phys,
                wgt: upload(&mut driver, &i8_bytes(&wgt)).unwrap().phys,
                bias: upload(&mut driver, &i32_bytes(&bias)).unwrap().phys,
                out: upload(&mut driver, &[0; 256 * 256]).unwrap().phys,
                uops: uops.phys,
            };
            run_stream(&mut driver, dev, &isa, &g.stream(&bufs)).unwrap();
            let out = driver.memory().read(bufs.out, 256 * 256).unwrap();
            for b in (0..256).step_by(37) {
                for o in 0..256 {
                    let (ob, ol) = (o / 16, o % 16);
                    let dot = (0..256)
                        .map(|k| inp[b * 256 + k] * wgt[(ob * 16 + k / 16) * 256 + ol * 16 + k % 16])
                        .fold(bias[b * 256 + o], i32::wrapping_add);
                    assert_eq!(out[b * 256 + o] as i8, dot as i8, "db {double_buffer} c {compressed} ({b}, {o})");
                }
            }
            assert_eq!(driver.profile().unwrap().gemm_counter, 256 * 16 * 16);
        }
    }
}

/// The hand-built 3x3 convolution stream (used to time ResNet-18's C2 layer) against a direct
/// convolution.
#[test]
fn conv3x3_stream_matches_a_direct_convolution() {
    use heron_vta::program::Conv3x3;
    let c = Conv3x3 { h: 7, w: 9, in_blocks: 2, out_blocks: 2 };
    let (isa, mut driver, dev) = sim();
    let mut rng = Rng(50);
    let (ci, co) = (c.in_blocks * 16, c.out_blocks * 16);
    // Logical tensors: x[ci][y][x], wt[co][ci][ky][kx].
    let x = rng.vec(ci * c.h * c.w, -128, 128);
    let wt = rng.vec(co * ci * 9, -128, 128);
    let mut packed_x = vec![0i32; x.len()];
    for ch in 0..ci {
        for p in 0..c.h * c.w {
            packed_x[((ch / 16) * c.h * c.w + p) * 16 + ch % 16] = x[ch * c.h * c.w + p];
        }
    }
    let mut packed_w = vec![0i32; wt.len()];
    for o in 0..co {
        for i in 0..ci {
            for t in 0..9 {
                let elem = ((o / 16) * c.in_blocks + i / 16) * 9 + t;
                packed_w[elem * 256 + (o % 16) * 16 + i % 16] = wt[(o * ci + i) * 9 + t];
            }
        }
    }
    let uops = upload_uops(&mut driver, &isa, &c.uops()).unwrap();
    let out = upload(&mut driver, &vec![0; co * c.h * c.w]).unwrap();
    let bufs = GemmBuffers {
        inp: upload(&mut driver, &i8_bytes(&packed_x)).unwrap().phys,
        wgt: upload(&mut driver, &i8_bytes(&packed_w)).unwrap().phys,
        bias: 0,
        out: out.phys,
        uops: uops.phys,
    };
    run_stream(&mut driver, dev, &isa, &c.stream(&bufs)).unwrap();
    let got = driver.memory().read(out.phys, co * c.h * c.w).unwrap();
    for o in 0..co {
        for y in 0..c.h {
            for xx in 0..c.w {
                let mut acc = 0i32;
                for i in 0..ci {
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (sy, sx) = (y as i64 + ky as i64 - 1, xx as i64 + kx as i64 - 1);
                            if (0..c.h as i64).contains(&sy) && (0..c.w as i64).contains(&sx) {
                                acc += x[(i * c.h + sy as usize) * c.w + sx as usize]
                                    * wt[((o * ci + i) * 3 + ky) * 3 + kx];
                            }
                        }
                    }
                }
                let at = ((o / 16) * c.h * c.w + y * c.w + xx) * 16 + o % 16;
                assert_eq!(got[at] as i8, (acc >> 8).clamp(0, 127) as i8, "o {o} y {y} x {xx}");
            }
        }
    }
    assert_eq!(driver.profile().unwrap().gemm_counter * 256, c.macs());
}

/// A non-default configuration (32-lane blocks, larger buffers): the ISA's field widths follow
/// it and a GEMM computes a 32x32 block product.
#[test]
fn non_default_configuration_runs_a_gemm() {
    let config = HwConfig {
        log_block_in: 5,
        log_block_out: 5,
        log_inp_buff_size: 16,
        log_wgt_buff_size: 20,
        log_acc_buff_size: 18,
        ..HwConfig::default()
    };
    let isa = Isa::new(config).unwrap();
    assert_eq!(
        (config.elem_bytes(MemId::Inp), config.elem_bytes(MemId::Wgt), config.elem_bytes(MemId::Acc)),
        (32, 1024, 128)
    );
    let mut driver = SimDriver::new(isa.clone());
    let dev = driver.device_alloc().unwrap();
    let mut rng = Rng(60);
    let x = rng.vec(32, -128, 128);
    let w = rng.vec(1024, -128, 128);
    let (xb, wb) = (upload(&mut driver, &i8_bytes(&x)).unwrap(), upload(&mut driver, &i8_bytes(&w)).unwrap());
    let out = upload(&mut driver, &[0; 32]).unwrap();
    let ub = upload_uops(&mut driver, &isa, &[Uop { dst: 0, src: 0, wgt: 0 }]).unwrap();
    let none = DepFlags::default();
    let load =
        |id: MemId, dram: u64, deps: DepFlags| Insn::Load(MemInsn::transfer(id, 0, dram, 1, 1, 1).with_deps(deps));
    let one = UopLoops { uop_bgn: 0, uop_end: 1, iter_out: 1, iter_in: 1, ..UopLoops::default() };
    let insns = vec![
        load(MemId::Uop, ub.phys / 4, none),
        load(MemId::Wgt, wb.phys / 1024, none),
        load(MemId::Inp, xb.phys / 32, DepFlags { push_next: true, ..none }),
        Insn::Gemm(GemmInsn {
            deps: DepFlags { pop_prev: true, ..none },
            reset: true,
            loops: one,
            wgt_factor_out: 0,
            wgt_factor_in: 0,
        }),
        Insn::Gemm(GemmInsn {
            deps: DepFlags { push_next: true, ..none },
            reset: false,
            loops: one,
            wgt_factor_out: 0,
            wgt_factor_in: 0,
        }),
        Insn::Store(MemInsn {
            deps: DepFlags { pop_prev: true, push_prev: true, ..none },
            memory_type: MemId::Out as u8,
            dram_base: (out.phys / 32) as u32,
            y_size: 1,
            x_size: 1,
            x_stride: 1,
            ..MemInsn::default()
        }),
        Insn::Finish(DepFlags { pop_next: true, ..none }),
    ];
    for insn in &insns {
        assert_eq!(isa.decode(isa.encode(insn).unwrap()).unwrap(), *insn);
    }
    run_stream(&mut driver, dev, &isa, &insns).unwrap();
    let got = driver.memory().read(out.phys, 32).unwrap();
    for o in 0..32 {
        let dot: i32 = (0..32).map(|k| x[k] * w[o * 32 + k]).sum();
        assert_eq!(got[o] as i8, dot as i8, "lane {o}");
    }
}
