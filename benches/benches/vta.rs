//! The VTA simulator's speed: a 256x256x256 blocked int8 GEMM (throughput in multiply-
//! accumulates per second) and ResNet-18's layer C2 (56x56, 64->64, 3x3) as hand-built streams.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use heron_vta::driver::{DeviceId, Driver, SimDriver};
use heron_vta::isa::Insn;
use heron_vta::program::{BlockedGemm, Conv3x3, GemmBuffers, run_stream, upload, upload_uops};
use heron_vta::{HwConfig, Isa, Uop};

/// A simulator with operands of the given sizes (pseudo-random bytes) and uops uploaded.
fn setup(uops: &[Uop], inp: usize, wgt: usize, bias: usize, out: usize) -> (Isa, SimDriver, DeviceId, GemmBuffers) {
    let isa = Isa::new(HwConfig::default()).unwrap();
    let mut driver = SimDriver::new(isa.clone());
    let device = driver.device_alloc().unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    };
    let bufs = GemmBuffers {
        uops: upload_uops(&mut driver, &isa, uops).unwrap().phys,
        inp: upload(&mut driver, &bytes(inp)).unwrap().phys,
        wgt: upload(&mut driver, &bytes(wgt)).unwrap().phys,
        bias: upload(&mut driver, &bytes(bias)).unwrap().phys,
        out: upload(&mut driver, &vec![0; out]).unwrap().phys,
    };
    (isa, driver, device, bufs)
}

fn bench_stream(
    c: &mut Criterion,
    name: &str,
    macs: u64,
    mut parts: (Isa, SimDriver, DeviceId, GemmBuffers),
    stream: Vec<Insn>,
) {
    let mut group = c.benchmark_group("vta_sim");
    group.sample_size(10).measurement_time(Duration::from_secs(5)).throughput(Throughput::Elements(macs));
    let (isa, driver, device, _) = &mut parts;
    group.bench_function(name, |b| b.iter(|| run_stream(driver, *device, isa, &stream).unwrap()));
    group.finish();
}

fn simulator(c: &mut Criterion) {
    let gemm = BlockedGemm::reference_256(true, true);
    let parts = setup(&gemm.uops(), 256 * 256, 256 * 256, 256 * 256 * 4, 256 * 256);
    let stream = gemm.stream(&parts.3);
    bench_stream(c, "gemm_256x256x256", gemm.macs(), parts, stream);

    let conv = Conv3x3 { h: 56, w: 56, in_blocks: 4, out_blocks: 4 };
    let parts = setup(&conv.uops(), 64 * 56 * 56, 64 * 64 * 9, 0, 64 * 56 * 56);
    let stream = conv.stream(&parts.3);
    bench_stream(c, "resnet18_c2_conv3x3_56x56_64to64", conv.macs(), parts, stream);
}

criterion_group!(benches, simulator);
criterion_main!(benches);
