//! Property tests of the simulator: random byte strings as streams give errors or results,
//! never panics or hangs; random valid streams always run and their counters follow the
//! formulas of VTA-FACTS §5.1; every instruction round-trips through encode/decode.

use heron_vta::driver::{Driver, SimDriver};
use heron_vta::isa::{AluInsn, DepFlags, GemmInsn, Insn, MemInsn, UopLoops};
use heron_vta::program::{run_stream, upload, upload_uops};
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
    #![proptest_config(ProptestConfig::with_cases(200))]

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
    #![proptest_config(ProptestConfig::with_cases(100))]

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
