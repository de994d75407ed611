//! The golden vectors of VTA-FACTS §7, produced by the reference runtime and simulator: the
//! same call sequence through our runtime must give the same instruction words, the same
//! counters and the same output.

use heron_vta::driver::{Driver, SimDriver};
use heron_vta::runtime::{CommandQueue, DEFAULT_WAIT_CYCLES, KernelRecorder};
use heron_vta::{AluOp, HwConfig, Isa, MemId};

const GOLDEN: [(u64, u64); 16] = [
    (0x0000000200020001, 0x0001000400000100),
    (0x0000000100010001, 0x00001000800000c0),
    (0x0000000100010001, 0x0000001000000008),
    (0x0000000000000001, 0x0002001000200082),
    (0x0000000100010001, 0x0000001004000400),
    (0x0000000000400001, 0x0002001000400102),
    (0x0000000100010001, 0x0000001008000800),
    (0x0004b00200000800, 0x0004000800600204),
    (0x0000000100010001, 0x000000100c000c00),
    (0x0000900200000800, 0x0004000800800304),
    (0x0000000100010001, 0x0000001010001000),
    (0x007f800200000800, 0x0004000800a00444),
    (0x0000000200020001, 0x0001000c00000229),
    (0x0000000000000000, 0x0000000000000140),
    (0x0000000000000000, 0x0000000000000018),
    (0x0000000000000000, 0x0000000000000003),
];

fn kernel(build: impl FnOnce(&mut KernelRecorder)) -> std::sync::Arc<heron_vta::runtime::UopKernel> {
    let mut k = KernelRecorder::default();
    build(&mut k);
    k.finish().expect("valid kernel")
}

fn stream_words(driver: &SimDriver, count: usize) -> Vec<(u64, u64)> {
    let bytes = driver.memory().read(0x200_1000, count * 16).expect("instruction buffer");
    bytes
        .chunks_exact(16)
        .map(|c| (u64::from_le_bytes(c[8..].try_into().unwrap()), u64::from_le_bytes(c[..8].try_into().unwrap())))
        .collect()
}

#[test]
fn golden_stream_words_counters_and_output() {
    let isa = Isa::new(HwConfig::default()).unwrap();
    let mut driver = SimDriver::new(isa.clone());
    let mut q = CommandQueue::new(isa, &mut driver).unwrap();
    let inp = driver.mem_alloc(32, true).unwrap();
    let wgt = driver.mem_alloc(256, true).unwrap();
    let out = driver.mem_alloc(32, true).unwrap();
    assert_eq!((inp.phys, wgt.phys, out.phys), (0x400_1000, 0x400_2000, 0x400_3000));
    let x: Vec<i8> = (0..32).map(|i| (i * 7 % 23 - 11) as i8).collect();
    let w: Vec<i8> = (0..256).map(|i| (i * 5 % 19 - 9) as i8).collect();
    driver.copy_from_host(inp.virt, &x.iter().map(|&v| v as u8).collect::<Vec<_>>()).unwrap();
    driver.copy_from_host(wgt.virt, &w.iter().map(|&v| v as u8).collect::<Vec<_>>()).unwrap();

    let d: &mut dyn Driver = &mut driver;
    q.load_buffer_2d(d, inp.phys, 0, 2, 1, 2, 0, 0, 0, 0, 0, MemId::Inp as u32).unwrap();
    q.load_buffer_2d(d, wgt.phys, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemId::Wgt as u32).unwrap();
    q.dep_push(1, 2).unwrap();
    q.dep_pop(1, 2).unwrap();
    let reset = kernel(|k| {
        k.loop_begin(2, 1, 0, 0);
        k.push(0, true, 0, 0, 0, 0, false, 0);
        k.loop_end();
    });
    let gemm = kernel(|k| {
        k.loop_begin(2, 1, 1, 0);
        k.push(0, false, 0, 0, 0, 0, false, 0);
        k.loop_end();
    });
    q.push_kernel(&reset).unwrap();
    q.push_kernel(&gemm).unwrap();
    for (op, imm) in [(AluOp::Shr, 4), (AluOp::Max, 0), (AluOp::Min, 127)] {
        let alu = kernel(|k| {
            k.loop_begin(2, 1, 1, 0);
            k.push(1, false, 0, 0, 0, op as u32, true, imm);
            k.loop_end();
        });
        q.push_kernel(&alu).unwrap();
    }
    q.dep_push(2, 3).unwrap();
    q.dep_pop(2, 3).unwrap();
    q.store_buffer_2d(d, 0, MemId::Out as u32, out.phys, 0, 2, 1, 2).unwrap();
    q.synchronize(d, DEFAULT_WAIT_CYCLES).unwrap();

    assert_eq!(stream_words(&driver, 16), GOLDEN);
    let p = driver.profile().unwrap();
    let counters = [
        p.inp_load_nbytes,
        p.wgt_load_nbytes,
        p.acc_load_nbytes,
        p.uop_load_nbytes,
        p.out_store_nbytes,
        p.gemm_counter,
        p.alu_counter,
    ];
    assert_eq!(counters, [32, 256, 0, 20, 32, 2, 6]);
    let mut got = vec![0u8; 32];
    driver.copy_to_host(&mut got, out.virt).unwrap();
    for r in 0..2 {
        for o in 0..16 {
            let dot: i32 = (0..16).map(|k| x[r * 16 + k] as i32 * w[o * 16 + k] as i32).sum();
            assert_eq!(got[r * 16 + o] as i8, (dot >> 4).clamp(0, 127) as i8, "row {r} lane {o}");
        }
    }

    // Second run in the same process: a padded ACC load into a 3x3 tile, stored whole.
    driver.clear_profile();
    let acc = driver.mem_alloc(128, true).unwrap();
    let out9 = driver.mem_alloc(144, true).unwrap();
    assert_eq!(acc.phys, 0x400_4000);
    let values: Vec<i32> = (0..32).map(|i| if i == 0 { -4000 } else { i * 10 }).collect();
    driver.copy_from_host(acc.virt, &values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    let d: &mut dyn Driver = &mut driver;
    q.load_buffer_2d(d, acc.phys, 0, 2, 1, 2, 1, 1, 0, 1, 0, MemId::Acc as u32).unwrap();
    q.dep_push(2, 3).unwrap();
    assert_eq!(
        q.isa().encode(&q.pending()[0]).unwrap(),
        (0x0111000200020001u128 << 64) | 0x00004004000001c0,
        "the LOAD ACC words, push_next set by the DepPush"
    );
    q.dep_pop(2, 3).unwrap();
    q.store_buffer_2d(d, 0, MemId::Out as u32, out9.phys, 0, 9, 1, 9).unwrap();
    q.synchronize(d, DEFAULT_WAIT_CYCLES).unwrap();
    let p = driver.profile().unwrap();
    assert_eq!((p.acc_load_nbytes, p.out_store_nbytes), (128, 144));
    let mut got = vec![0u8; 144];
    driver.copy_to_host(&mut got, out9.virt).unwrap();
    // Row 0 is padding; row 1 is [pad, a0, a1]; row 2 padding.
    assert!(got[..64].iter().all(|&b| b == 0) && got[96..].iter().all(|&b| b == 0));
    assert_eq!(got[64] as i8, 96, "-4000 narrows to 96");
    assert_eq!(got[65] as i8, 10);
    assert_eq!(got[80 + 15] as i8, (310 & 0xff) as u8 as i8);
}

/// The uop cache as VTA's runtime keeps it: kernels placed one after another; one that does not
/// fit restarts at 0 and evicts what it overlaps; resident kernels are not reloaded.
#[test]
fn uop_cache_places_and_evicts_like_the_reference() {
    use heron_vta::isa::Insn;
    let isa = Isa::new(HwConfig::default()).unwrap();
    let mut driver = SimDriver::new(isa.clone());
    let mut q = CommandQueue::new(isa, &mut driver).unwrap();
    let big = |first_dst: u32| {
        kernel(|k| {
            for i in 0..3000 {
                k.push(1, false, (first_dst + i) % 2048, 0, 0, AluOp::Add as u32, true, 1);
            }
        })
    };
    let (k1, k2, k3) = (big(0), big(1), big(2));
    let uop_loads = |q: &CommandQueue| -> Vec<(u16, u32)> {
        q.pending()
            .iter()
            .filter_map(|i| match i {
                Insn::Load(m) if m.memory_type == MemId::Uop as u8 => Some((m.sram_base, m.dram_base - 0x1000 / 4)),
                _ => None,
            })
            .collect()
    };
    for k in [&k1, &k2, &k3, &k2, &k1] {
        q.push_kernel(k).unwrap();
    }
    // k1 at 0, k2 at 3000, k3 restarts at 0 (evicting k1; staging offset 0), k2 is still
    // resident, k1 comes back after k3 at 3000 (evicting k2; staging offset 3000 uops).
    assert_eq!(uop_loads(&q), [(0, 0), (3000, 3000), (0, 0), (3000, 3000)]);
}
