//! Cycle limits and resource bounds of the Rust API: `wait_cycles` and the work limit stop long
//! streams promptly and leave the device and the command queue usable; real layers fit TVM's
//! `wait_cycles` (1 << 31) and the default work limit with a wide margin; streams, kernels and
//! DRAM requests that could grow without bound are refused.

use std::time::{Duration, Instant};

use heron_vta::driver::{DEFAULT_WORK_LIMIT, DeviceId, Driver, MAX_SIM_DEVICES, SimDriver};
use heron_vta::isa::{AluInsn, DepFlags, Insn, MemInsn, UopLoops};
use heron_vta::program::{BlockedGemm, Conv3x3, GemmBuffers, upload, upload_uops};
use heron_vta::runtime::{CommandQueue, DEFAULT_WAIT_CYCLES, KernelRecorder, MAX_KERNEL_UOPS, UopKernel};
use heron_vta::{AluOp, HwConfig, Isa, MemId, Uop, VtaError};

fn isa() -> Isa {
    Isa::new(HwConfig::default()).unwrap()
}

/// One ALU uop adding `imm` to acc[0], `n * n` times (n up to 16383: 2.7e8 cycles).
fn add_kernel(n: u32, imm: i32) -> std::sync::Arc<UopKernel> {
    let mut k = KernelRecorder::default();
    k.loop_begin(n, 0, 0, 0);
    k.loop_begin(n, 0, 0, 0);
    k.push(1, false, 0, 0, 0, AluOp::Add as u32, true, imm);
    k.loop_end();
    k.loop_end();
    k.finish().unwrap()
}

/// Loads acc[0] from `src`, adds through `kernel`, stores acc[0] to `out`, synchronizes.
fn add_program(
    q: &mut CommandQueue,
    driver: &mut SimDriver,
    src: u64,
    out: u64,
    kernel: &std::sync::Arc<UopKernel>,
    wait: u32,
) -> Result<(), VtaError> {
    q.load_buffer_2d(driver, src, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemId::Acc as u32)?;
    q.push_kernel(kernel)?;
    q.dep_push(2, 3)?;
    q.dep_pop(2, 3)?;
    q.store_buffer_2d(driver, 0, MemId::Out as u32, out, 0, 1, 1, 1)?;
    q.synchronize(driver, wait)
}

#[test]
fn a_long_kernel_times_out_promptly_and_the_queue_stays_usable() {
    let mut driver = SimDriver::new(isa());
    let mut q = CommandQueue::new(isa(), &mut driver).unwrap();
    let src = upload(&mut driver, &[1u8; 64]).unwrap();
    let out = driver.mem_alloc(16, true).unwrap();
    let started = Instant::now();
    let err = add_program(&mut q, &mut driver, src.phys, out.phys, &add_kernel(16383, 1), 1000).unwrap_err();
    let latency = started.elapsed();
    assert!(err.is_timeout(), "{err}");
    let message = err.to_string();
    assert!(message.contains("timed out after") && message.contains("limit of 1000"), "{message}");
    assert!(latency < Duration::from_millis(100), "timeout took {latency:?}");
    println!("timeout after wait_cycles 1000 in {latency:?}: {message}");
    // The same queue and device run the next stream normally (the token queues start clean).
    add_program(&mut q, &mut driver, src.phys, out.phys, &add_kernel(4, 2), DEFAULT_WAIT_CYCLES).unwrap();
    let mut got = [0u8; 16];
    driver.copy_to_host(&mut got, out.virt).unwrap();
    assert_eq!(got[0], 1 + 2 * 16, "acc lane 0 after 16 additions of 2");
}

/// A run stops before the first instruction its limit cannot pay for: the instructions before
/// it have run, it and those after have not.
#[test]
fn a_timeout_stops_between_instructions() {
    let isa = isa();
    let mut driver = SimDriver::new(isa.clone());
    let dev = driver.device_alloc().unwrap();
    let uops = upload_uops(&mut driver, &isa, &[Uop::default()]).unwrap();
    let loops = UopLoops { uop_bgn: 0, uop_end: 1, iter_out: 10, iter_in: 10, ..UopLoops::default() };
    let add =
        Insn::Alu(AluInsn { deps: DepFlags::default(), reset: false, loops, op: AluOp::Add, use_imm: true, imm: 1 });
    let mut insns = vec![
        Insn::Load(MemInsn::transfer(MemId::Uop, 0, uops.phys / 4, 1, 1, 1)),
        Insn::Load(MemInsn::transfer(MemId::Acc, 0, upload(&mut driver, &[0; 64]).unwrap().phys / 64, 1, 1, 1)),
    ];
    insns.extend([add; 5]);
    insns.push(Insn::Finish(DepFlags::default()));
    let mut bytes = Vec::new();
    for insn in &insns {
        bytes.extend_from_slice(&isa.encode(insn).unwrap().to_le_bytes());
    }
    let stream = upload(&mut driver, &bytes).unwrap();
    let count = insns.len() as u32;
    // 8 fetched + 1 uop + 1 acc element + 5 x 100 uop executions.
    driver.device_run(dev, stream.phys, count, 0).unwrap();
    assert_eq!(driver.last_run_cycles(), 8 + 1 + 1 + 500);
    assert_eq!(driver.device(dev).unwrap().acc_element(0)[0], 500);
    // Room for three of the five additions.
    let err = driver.device_run(dev, stream.phys, count, 8 + 2 + 350).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(err.to_string().contains("instruction 5: timed out after 310 cycles"), "{err}");
    assert_eq!(driver.device(dev).unwrap().acc_element(0)[0], 300);
    // Exactly the cycles it needs is enough; fewer fetch cycles than instructions is not.
    driver.device_run(dev, stream.phys, count, 510).unwrap();
    assert!(driver.device_run(dev, stream.phys, count, 509).unwrap_err().is_timeout());
    assert!(driver.device_run(dev, stream.phys, count, 7).unwrap_err().is_timeout());
}

/// Runs `stream` with TVM's wait_cycles; returns the cycles it took.
fn cycles_of(parts: (Isa, SimDriver, DeviceId), stream: &[Insn]) -> u64 {
    let (isa, mut driver, dev) = parts;
    let mut bytes = Vec::new();
    for insn in stream {
        bytes.extend_from_slice(&isa.encode(insn).unwrap().to_le_bytes());
    }
    let block = upload(&mut driver, &bytes).unwrap();
    driver.device_run(dev, block.phys, stream.len() as u32, DEFAULT_WAIT_CYCLES).unwrap();
    driver.last_run_cycles()
}

fn setup(uops: &[Uop], sizes: [usize; 4]) -> ((Isa, SimDriver, DeviceId), GemmBuffers) {
    let isa = isa();
    let mut driver = SimDriver::new(isa.clone());
    let dev = driver.device_alloc().unwrap();
    let [inp, wgt, bias, out] = sizes.map(|n| upload(&mut driver, &vec![1; n.max(1)]).unwrap().phys);
    let uops = upload_uops(&mut driver, &isa, uops).unwrap().phys;
    ((isa, driver, dev), GemmBuffers { inp, wgt, bias, out, uops })
}

/// ResNet-18's C2 layer and the 256^3 blocked GEMM as single streams: they need a tiny fraction
/// of TVM's wait_cycles and of the default work limit.
#[test]
fn real_layers_fit_tvm_wait_cycles_with_a_wide_margin() {
    let conv = Conv3x3 { h: 56, w: 56, in_blocks: 4, out_blocks: 4 };
    let (parts, bufs) = setup(&conv.uops(), [64 * 56 * 56, 64 * 64 * 9, 0, 64 * 56 * 56]);
    let c2 = cycles_of(parts, &conv.stream(&bufs));
    let mut worst = c2;
    for compressed in [false, true] {
        let gemm = BlockedGemm::reference_256(compressed, true);
        let (parts, bufs) = setup(&gemm.uops(), [256 * 256, 256 * 256, 256 * 256 * 4, 256 * 256]);
        let cycles = cycles_of(parts, &gemm.stream(&bufs));
        println!(
            "256^3 GEMM (compressed {compressed}): {cycles} cycles, {}x under 1<<31, {}x under the work limit",
            (1u64 << 31) / cycles,
            DEFAULT_WORK_LIMIT / cycles
        );
        worst = worst.max(cycles);
    }
    println!(
        "ResNet-18 C2 ({} MACs): {c2} cycles, {}x under 1<<31, {}x under the work limit",
        conv.macs(),
        (1u64 << 31) / c2,
        DEFAULT_WORK_LIMIT / c2
    );
    assert!(worst * 400 < DEFAULT_WORK_LIMIT, "{worst} cycles");
}

#[test]
fn the_work_limit_caps_every_run_whatever_wait_cycles_says() {
    let isa = isa();
    let mut driver = SimDriver::new(isa.clone());
    let dev = driver.device_alloc().unwrap();
    // One GEMM of 16383 x 16383 x 8192 uop executions (2.2e12 cycles): refused before it runs.
    let loops = UopLoops { uop_bgn: 0, uop_end: 8192, iter_out: 16383, iter_in: 16383, ..UopLoops::default() };
    let gemm = Insn::Gemm(heron_vta::isa::GemmInsn {
        deps: DepFlags::default(),
        reset: false,
        loops,
        wgt_factor_out: 0,
        wgt_factor_in: 0,
    });
    let mut bytes = isa.encode(&gemm).unwrap().to_le_bytes().to_vec();
    bytes.extend_from_slice(&isa.encode(&Insn::Finish(DepFlags::default())).unwrap().to_le_bytes());
    let stream = upload(&mut driver, &bytes).unwrap();
    let started = Instant::now();
    for (limit, wait) in [(Some(DEFAULT_WORK_LIMIT), 0), (Some(DEFAULT_WORK_LIMIT), u32::MAX), (None, u32::MAX)] {
        driver.set_work_limit(limit);
        let err = driver.device_run(dev, stream.phys, 2, wait).unwrap_err();
        let bound = limit.unwrap_or(u64::MAX).min(if wait == 0 { u64::MAX } else { wait as u64 });
        assert!(err.is_timeout() && err.to_string().contains(&format!("limit of {bound}")), "{err}");
    }
    assert!(started.elapsed() < Duration::from_millis(100));
    // A stream of many small steps is cut after at most the limit.
    driver.set_work_limit(Some(5000));
    let small = Insn::Load(MemInsn::transfer(MemId::Inp, 0, stream.phys / 16, 1, 1, 1));
    let mut bytes = Vec::new();
    for _ in 0..10_000 {
        bytes.extend_from_slice(&isa.encode(&small).unwrap().to_le_bytes());
    }
    let stream = upload(&mut driver, &bytes).unwrap();
    let err = driver.device_run(dev, stream.phys, 10_000, 0).unwrap_err();
    assert!(err.is_timeout() && err.to_string().contains("limit of 5000"), "{err}");
}

#[test]
fn streams_kernels_and_dram_requests_are_bounded() {
    let isa = isa();
    let mut driver = SimDriver::new(isa.clone());
    let dev = driver.device_alloc().unwrap();
    // More instructions than one transfer can hold: refused without reading them.
    let err = driver.device_run(dev, 0x1000, u32::MAX, 0).unwrap_err();
    assert!(err.to_string().contains("exceed the transfer limit"), "{err}");
    // A stream of NOPs through the runtime stops growing at the transfer limit.
    let mut q = CommandQueue::new(isa.clone(), &mut driver).unwrap();
    let pushes = (0..3_000_000).position(|_| q.dep_push(1, 2).is_err()).expect("the stream is capped");
    assert!(pushes <= (1 << 25) / 16, "{pushes} NOPs queued");
    q.synchronize(&mut driver, DEFAULT_WAIT_CYCLES).unwrap();
    // A kernel holds at most as many uops as the deepest uop SRAM.
    let mut k = KernelRecorder::default();
    for i in 0..=MAX_KERNEL_UOPS as u32 {
        k.push(1, false, i % 3, 0, 0, 0, true, 0);
    }
    assert!(k.finish().unwrap_err().to_string().contains("uops in a kernel"));
    // Requests the 32-bit physical space cannot hold are errors, and leave nothing behind.
    for size in [usize::MAX, 1 << 40, 1 << 32] {
        assert_eq!(driver.mem_alloc(size, true), Err(VtaError::OutOfMemory(size)));
    }
    let err = q.load_buffer_2d(&mut driver, 0xffff_f000, u32::MAX, 1, 1, 1, 0, 0, 0, 0, 0, MemId::Inp as u32);
    assert!(err.unwrap_err().to_string().contains("above 32 bits"));
    // Simulated devices (their SRAMs) are capped; freeing one makes room.
    let mut driver = SimDriver::new(isa);
    let devices: Vec<DeviceId> = (0..MAX_SIM_DEVICES).map(|_| driver.device_alloc().unwrap()).collect();
    assert!(driver.device_alloc().is_err());
    driver.device_free(devices[3]).unwrap();
    assert!(driver.device_free(devices[3]).is_err(), "double free");
    assert!(!devices.contains(&driver.device_alloc().unwrap()), "device ids are not reused");
}
