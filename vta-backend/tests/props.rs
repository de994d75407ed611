//! Property tests and fuzz targets of the simulator: random byte strings as streams give errors
//! or results, never panics or hangs; random valid streams always run and their counters follow
//! the formulas of VTA-FACTS §5.1; every instruction round-trips through encode/decode; valid
//! GEMM and convolution streams mutated bit by bit and field by field (every opcode, huge loop
//! extents and transfer sizes, reordered and miscounted instructions) run or fail cleanly within
//! their cycle limit, deterministically, and time out exactly when the limit is one cycle short.
//!
//! Case counts and the seed come from `HERON_FUZZ_CASES` / `HERON_FUZZ_SEED` (tests/common).

mod common;

use common::fuzz_config;
use heron_vta::driver::{DeviceId, Driver, SimDriver};
use heron_vta::isa::{AluInsn, DepFlags, GemmInsn, Insn, MemInsn, UopLoops};
use heron_vta::program::{BlockedGemm, Conv3x3, GemmBuffers, run_stream, upload, upload_uops};
use heron_vta::sim::Profile;
use heron_vta::{AluOp, HwConfig, Isa, MemId, Uop};
use proptest::prelude::*;

fn sim() -> (Isa, SimDriver) {
    let isa = Isa::new(HwConfig::default()).unwrap();
    let mut driver = SimDriver::new(isa.clone());
    // Random loop fields can describe valid programs of 10^12 steps: keep the test bounded.
    driver.set_work_limit(Some(1 << 20));
    (isa, driver)
}

proptest! {
    #![proptest_config(fuzz_config(200))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), extra in 0u32..3) {
        let (_, mut driver) = sim();
        let dev = driver.device_alloc().unwrap();
        let block = upload(&mut driver, &bytes).unwrap();
        // Also claim more instructions than were written: reads past the data are errors or
        // zero-filled page contents, never out-of-bounds accesses.
        let count = (bytes.len() / 16) as u32 + extra;
        let _ = driver.device_run(dev, block.phys, count, 0);
        let _ = driver.device_run(dev, block.phys + 8, count, 0);
    }

    #[test]
    fn encode_decode_round_trips(words in proptest::collection::vec(any::<u128>(), 1..50)) {
        let isa = Isa::new(HwConfig::default()).unwrap();
        for w in words {
            if let Ok(insn) = isa.decode(w) {
                let again = isa.decode(isa.encode(&insn).unwrap()).unwrap();
                prop_assert_eq!(again, insn);
            }
        }
    }
}

/// One random valid compute step and its counter contribution.
#[derive(Debug, Clone)]
enum Step {
    LoadInp { sram: u16, x: u16, y: u16, pads: [u8; 4] },
    LoadWgt { sram: u16, x: u16 },
    LoadAcc { sram: u16, x: u16, eight_bit: bool },
    Gemm { reset: bool, uops: (u32, u32), iters: (u32, u32), factors: [u32; 6] },
    Alu { op: u8, imm: Option<i16>, uops: (u32, u32), iters: (u32, u32), factors: [u32; 4] },
    Store { sram: u16, x: u16, y: u16 },
}

fn step() -> impl Strategy<Value = Step> {
    let small = 0u32..4;
    prop_oneof![
        (0u16..1000, 1u16..8, 1u16..8, proptest::array::uniform4(0u8..3))
            .prop_map(|(sram, x, y, pads)| Step::LoadInp { sram, x, y, pads }),
        (0u16..900, 1u16..16).prop_map(|(sram, x)| Step::LoadWgt { sram, x }),
        (0u16..1900, 1u16..32, any::<bool>()).prop_map(|(sram, x, eight_bit)| Step::LoadAcc { sram, x, eight_bit }),
        (any::<bool>(), (0u32..30, 0u32..30), (1u32..4, 1u32..4), proptest::array::uniform6(small.clone())).prop_map(
            |(reset, (a, b), iters, factors)| Step::Gemm { reset, uops: (a.min(b), a.max(b)), iters, factors }
        ),
        (
            0u8..5,
            proptest::option::of(-300i16..300),
            (0u32..30, 0u32..30),
            (1u32..4, 1u32..4),
            proptest::array::uniform4(small)
        )
            .prop_map(|(op, imm, (a, b), iters, factors)| Step::Alu {
                op,
                imm,
                uops: (a.min(b), a.max(b)),
                iters,
                factors
            }),
        (0u16..1900, 1u16..16, 1u16..4).prop_map(|(sram, x, y)| Step::Store { sram, x, y }),
    ]
}

proptest! {
    #![proptest_config(fuzz_config(100))]

    #[test]
    fn random_valid_streams_run_and_count_as_specified(steps in proptest::collection::vec(step(), 1..30), seed in any::<u64>()) {
        let (isa, mut driver) = sim();
        let dev = driver.device_alloc().unwrap();
        // 30 uops with indices small enough that index + 3 * 3 * factor stays in range.
        let mut s = seed | 1;
        let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
        let uops: Vec<Uop> = (0..30).map(|_| Uop { dst: (next() % 2000) as u32, src: (next() % 2000) as u32, wgt: (next() % 1000) as u32 }).collect();
        let ub = upload_uops(&mut driver, &isa, &uops).unwrap();
        let data = upload(&mut driver, &(0..64 * 1024).map(|_| next() as u8).collect::<Vec<_>>()).unwrap();
        let out = upload(&mut driver, &[0u8; 4096]).unwrap();
        let none = DepFlags::default();
        let mem = |id: MemId, sram: u16, dram: u64, x: u16, y: u16| {
            MemInsn::transfer(id, sram as usize, dram, y as usize, x as usize, x as usize)
        };
        let mut insns = vec![Insn::Load(mem(MemId::Uop, 0, ub.phys / 4, 30, 1))];
        let mut want = Profile { uop_load_nbytes: 120, ..Profile::default() };
        let mut expect_error = false;
        for st in &steps {
            match *st {
                Step::LoadInp { sram, x, y, pads } => {
                    let mut m = mem(MemId::Inp, sram, data.phys / 16, x, y);
                    [m.y_pad_0, m.y_pad_1, m.x_pad_0, m.x_pad_1] = pads;
                    insns.push(Insn::Load(m));
                    want.inp_load_nbytes += x as u64 * y as u64 * 16;
                }
                Step::LoadWgt { sram, x } => {
                    insns.push(Insn::Load(mem(MemId::Wgt, sram, data.phys / 256, x, 1)));
                    want.wgt_load_nbytes += x as u64 * 256;
                }
                Step::LoadAcc { sram, x, eight_bit } => {
                    let (id, unit) = if eight_bit { (MemId::Acc8Bit, 16) } else { (MemId::Acc, 64) };
                    insns.push(Insn::Load(mem(id, sram, data.phys / unit, x, 1)));
                    want.acc_load_nbytes += x as u64 * 64;
                }
                Step::Gemm { reset, uops: (b, e), iters: (io, ii), factors: f } => {
                    let loops = UopLoops { uop_bgn: b, uop_end: e, iter_out: io, iter_in: ii, dst_factor_out: f[0], dst_factor_in: f[1], src_factor_out: f[2], src_factor_in: f[3] };
                    insns.push(Insn::Gemm(GemmInsn { deps: none, reset, loops, wgt_factor_out: f[4], wgt_factor_in: f[5] }));
                    if !reset { want.gemm_counter += (io * ii * (e - b)) as u64; }
                    let top = |base: u32, fo: u32, fi: u32| base + (io - 1) * fo + (ii - 1) * fi;
                    expect_error |= uops[b as usize..e as usize].iter().any(|u| top(u.dst, f[0], f[1]) >= 2048 || (!reset && (top(u.src, f[2], f[3]) >= 2048 || top(u.wgt, f[4], f[5]) >= 1024)));
                }
                Step::Alu { op, imm, uops: (b, e), iters: (io, ii), factors: f } => {
                    let loops = UopLoops { uop_bgn: b, uop_end: e, iter_out: io, iter_in: ii, dst_factor_out: f[0], dst_factor_in: f[1], src_factor_out: f[2], src_factor_in: f[3] };
                    let op = AluOp::from_bits(op as u64).unwrap();
                    insns.push(Insn::Alu(AluInsn { deps: none, reset: false, loops, op, use_imm: imm.is_some(), imm: imm.unwrap_or(0) }));
                    want.alu_counter += (io * ii * (e - b)) as u64;
                    let top = |base: u32, fo: u32, fi: u32| base + (io - 1) * fo + (ii - 1) * fi;
                    expect_error |= uops[b as usize..e as usize].iter().any(|u| top(u.dst, f[0], f[1]) >= 2048 || (imm.is_none() && top(u.src, f[2], f[3]) >= 2048));
                }
                Step::Store { sram, x, y } => {
                    insns.push(Insn::Store(mem(MemId::Out, sram, out.phys / 16, x, y)));
                    want.out_store_nbytes += x as u64 * y as u64 * 16;
                }
            }
            if expect_error { break; }
        }
        insns.push(Insn::Finish(none));
        let result = run_stream(&mut driver, dev, &isa, &insns);
        if expect_error {
            prop_assert!(result.is_err(), "an out-of-range index must be reported");
        } else {
            prop_assert!(result.is_ok(), "{:?}", result);
            prop_assert_eq!(driver.profile().unwrap(), want);
        }
    }
}

/// Cycle limit of the mutated runs: big enough for the unmutated programs, small enough that a
/// mutation into a huge loop costs milliseconds.
const FUZZ_WORK_LIMIT: u64 = 1 << 18;

/// The valid programs mutations start from.
#[derive(Clone, Copy, Debug)]
enum Program {
    Gemm { compressed: bool, double_buffer: bool },
    Conv,
}

fn program() -> impl Strategy<Value = Program> {
    prop_oneof![
        (any::<bool>(), any::<bool>())
            .prop_map(|(compressed, double_buffer)| Program::Gemm { compressed, double_buffer }),
        Just(Program::Conv),
    ]
}

/// A fresh simulator with `program`'s operands (pseudo-random from `data`), its instruction
/// words and the output block.
fn setup(program: Program, data: u64) -> (SimDriver, DeviceId, Vec<u128>, u64) {
    let isa = Isa::new(HwConfig::default()).unwrap();
    let mut driver = SimDriver::new(isa.clone());
    driver.set_work_limit(Some(FUZZ_WORK_LIMIT));
    let dev = driver.device_alloc().unwrap();
    let mut s = data | 1;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    };
    let gemm = |compressed, double_buffer| BlockedGemm {
        batch: 16,
        in_blocks: 4,
        out_blocks: 2,
        tile_rows: 8,
        tile_in: 2,
        tile_out: 1,
        compressed,
        double_buffer,
    };
    let conv = Conv3x3 { h: 3, w: 5, in_blocks: 1, out_blocks: 2 };
    let (uops, sizes) = match program {
        Program::Gemm { compressed, double_buffer } => {
            (gemm(compressed, double_buffer).uops(), [16 * 4 * 16, 2 * 4 * 256, 16 * 2 * 64, 16 * 2 * 16])
        }
        Program::Conv => (conv.uops(), [15 * 16, 2 * 9 * 256, 0, 2 * 15 * 16]),
    };
    let [inp, wgt, bias, out] = sizes.map(|n| upload(&mut driver, &bytes(n.max(1))).unwrap().phys);
    let uops = upload_uops(&mut driver, &isa, &uops).unwrap().phys;
    let bufs = GemmBuffers { inp, wgt, bias, out, uops };
    let stream = match program {
        Program::Gemm { compressed, double_buffer } => gemm(compressed, double_buffer).stream(&bufs),
        Program::Conv => conv.stream(&bufs),
    };
    let words = stream.iter().map(|i| isa.encode(i).unwrap()).collect();
    (driver, dev, words, out)
}

/// One change to a stream.
#[derive(Clone, Debug)]
enum Mutation {
    /// Flip one of the 128 bits of instruction `.0`.
    Flip(usize, u8),
    /// Write `.3` into `.2` bits at bit `.1`.
    Bits(usize, u8, u8, u64),
    /// Replace the opcode (5..7 are undefined).
    Opcode(usize, u8),
    /// Set field `.1` of a decodable instruction to the largest value it holds: loop extents,
    /// uop ranges, index factors, transfer sizes, strides, pads, DRAM and SRAM bases.
    Max(usize, u8),
    Duplicate(usize),
    Delete(usize),
    Swap(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        4 => (at, 0u8..128).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (at, 0u8..128, 1u8..33, any::<u64>()).prop_map(|(i, b, w, v)| Mutation::Bits(i, b, w, v)),
        2 => (at, 0u8..8).prop_map(|(i, op)| Mutation::Opcode(i, op)),
        3 => (at, 0u8..12).prop_map(|(i, f)| Mutation::Max(i, f)),
        1 => at.prop_map(Mutation::Duplicate),
        1 => at.prop_map(Mutation::Delete),
        1 => (at, at).prop_map(|(a, b)| Mutation::Swap(a, b)),
    ]
}

/// Sets field `f` (cycling through the format's fields) to its largest encodable value.
fn max_field(insn: &mut Insn, f: u8) {
    const ITER: u32 = (1 << 14) - 1;
    match insn {
        Insn::Load(m) | Insn::Store(m) => match f % 8 {
            0 => m.x_size = u16::MAX,
            1 => m.y_size = u16::MAX,
            2 => m.x_stride = u16::MAX,
            3 => m.dram_base = u32::MAX,
            4 => m.sram_base = u16::MAX,
            5 => (m.x_pad_0, m.x_pad_1) = (15, 15),
            6 => (m.y_pad_0, m.y_pad_1) = (15, 15),
            _ => m.memory_type = 7,
        },
        Insn::Gemm(GemmInsn { loops: l, .. }) | Insn::Alu(AluInsn { loops: l, .. }) => match f % 6 {
            0 => l.iter_out = ITER,
            1 => l.iter_in = ITER,
            2 => (l.iter_out, l.iter_in) = (ITER, ITER),
            3 => l.uop_end = ITER,
            4 => (l.dst_factor_out, l.src_factor_in) = (2047, 2047),
            _ => l.uop_bgn = 8191,
        },
        Insn::Finish(d) => d.pop_prev = true,
    }
}

fn mutate(isa: &Isa, words: &mut Vec<u128>, m: &Mutation) {
    if words.is_empty() {
        return;
    }
    let n = words.len();
    match *m {
        Mutation::Flip(i, b) => words[i % n] ^= 1 << b,
        Mutation::Bits(i, at, width, v) => {
            let mask = ((1u128 << width) - 1) << at;
            words[i % n] = (words[i % n] & !mask) | (((v as u128) << at) & mask);
        }
        Mutation::Opcode(i, op) => words[i % n] = (words[i % n] & !7) | op as u128,
        Mutation::Max(i, f) => {
            if let Ok(mut insn) = isa.decode(words[i % n]) {
                max_field(&mut insn, f);
                if let Ok(w) = isa.encode(&insn) {
                    words[i % n] = w;
                }
            }
        }
        Mutation::Duplicate(i) => words.insert(i % n, words[i % n]),
        Mutation::Delete(i) => {
            words.remove(i % n);
        }
        Mutation::Swap(a, b) => words.swap(a % n, b % n),
    }
}

/// Runs `words` (claiming `count` instructions) on a fresh setup: the outcome (cycles or the
/// error) and the output block afterwards.
fn run_mutated(
    program: Program,
    data: u64,
    words: &[u128],
    count: u32,
    wait: u32,
) -> (Result<u64, heron_vta::VtaError>, Vec<u8>) {
    let (mut driver, dev, _, out) = setup(program, data);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let stream = upload(&mut driver, &bytes).unwrap();
    let result = driver.device_run(dev, stream.phys, count, wait).map(|()| driver.last_run_cycles());
    (result, driver.memory().read(out, 16).unwrap().to_vec())
}

#[test]
fn unmutated_programs_run() {
    for program in [
        Program::Gemm { compressed: false, double_buffer: false },
        Program::Gemm { compressed: true, double_buffer: true },
        Program::Conv,
    ] {
        let (_, _, words, _) = setup(program, 1);
        let (result, _) = run_mutated(program, 1, &words, words.len() as u32, 0);
        assert!(result.is_ok(), "{program:?}: {result:?}");
    }
}

proptest! {
    #![proptest_config(fuzz_config(1000))]

    #[test]
    fn mutated_streams_fail_cleanly_within_their_limit(
        program in program(),
        data in any::<u64>(),
        mutations in proptest::collection::vec(mutation(), 1..6),
        count_delta in -2i64..3,
        wait in prop_oneof![Just(0u32), 1u32..20_000, Just(u32::MAX)],
    ) {
        let isa = Isa::new(HwConfig::default()).unwrap();
        let (_, _, mut words, _) = setup(program, data);
        for m in &mutations {
            mutate(&isa, &mut words, m);
        }
        let count = (words.len() as i64 + count_delta).max(0) as u32;
        let limit = if wait == 0 { FUZZ_WORK_LIMIT } else { FUZZ_WORK_LIMIT.min(wait as u64) };
        let (first, out) = run_mutated(program, data, &words, count, wait);
        match first {
            Ok(cycles) => {
                prop_assert!(cycles <= limit);
                // The same run with exactly its cycles does the same; one cycle less times out.
                let (again, out_again) = run_mutated(program, data, &words, count, cycles as u32);
                prop_assert_eq!(again, Ok(cycles));
                prop_assert_eq!(out_again, out);
                if cycles > 1 {
                    let (short, _) = run_mutated(program, data, &words, count, cycles as u32 - 1);
                    prop_assert!(short.as_ref().is_err_and(|e| e.is_timeout()), "{:?}", short);
                }
            }
            Err(e) => {
                // Errors are deterministic too.
                let (again, out_again) = run_mutated(program, data, &words, count, wait);
                prop_assert_eq!(again, Err(e.clone()));
                prop_assert_eq!(out_again, out);
                let mut inner = &e;
                while let heron_vta::VtaError::AtInstruction { error, .. } = inner {
                    inner = error;
                }
                if let heron_vta::VtaError::Timeout { spent, limit: l, .. } = *inner {
                    prop_assert!(spent <= l && l == limit, "{}", e);
                }
            }
        }
    }
}
