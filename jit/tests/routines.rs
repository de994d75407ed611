//! Precompiled routines called from generated code (`call extern "name"(...)`): the kernel
//! layer's hook for microkernels that are not generated (e.g. hand-written AVX-512 ones). They
//! are registered with a typed signature and the CPU features they need, and called through
//! the run context's routine table, also from parallel loops on several threads.
#![allow(unsafe_code)]

use heron_ir::loop_ir::parse::parse_module;
use heron_jit::routines::{Routine, RoutineParam, RoutineSignature};
use heron_jit::threads::{DeviceHandle, ThreadPool};
use heron_jit::{CodegenError, JitArg, JitModule, JitOptions, JitRunError};

/// y[i] = k * x[i] + 1 for i < n.
extern "C" fn axpy_one(x: *const f32, y: *mut f32, n: i64, k: f32) {
    // SAFETY: the test's modules pass buffers of at least `n` elements.
    let (x, y) = unsafe { (std::slice::from_raw_parts(x, n as usize), std::slice::from_raw_parts_mut(y, n as usize)) };
    for (o, i) in y.iter_mut().zip(x) {
        *o = k * i + 1.0;
    }
}

/// Row `row` of 8-wide matrices: y[row, i] = k * x[row, i] + 1.
extern "C" fn row_axpy_one(x: *const f32, y: *mut f32, row: i64, k: f32) {
    // SAFETY: the test's module passes 64 x 8 matrices and rows below 64; each row is written
    // by one iteration only.
    let (x, y) = unsafe { (x.add(row as usize * 8), y.add(row as usize * 8)) };
    axpy_one(x, y, 8, k);
}

fn axpy(features: &[&str]) -> Routine {
    use RoutineParam::{Buffer, F32, I64};
    Routine {
        signature: RoutineSignature { name: "axpy_one".into(), params: vec![Buffer, Buffer, I64, F32] },
        features: features.iter().map(|f| f.to_string()).collect(),
        address: axpy_one as *const u8,
    }
}

const MODULE: &str = "func @main(%x: f32[6], %y: f32[6]) {\n  call extern \"axpy_one\"(%x, %y, 6, f32(2.5))\n}\n";

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn generated_code_calls_a_precompiled_routine() {
    let module = parse_module(MODULE).expect("valid loop IR");
    let options = JitOptions { routines: vec![axpy(&["sse4.1"])], ..JitOptions::default() };
    let jit = JitModule::compile(&module, &[true, false], options).expect("compile");
    let input: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut out = vec![0u8; 24];
    jit.run([JitArg::Read(&input), JitArg::Write(&mut out)]).expect("run");
    assert_eq!(floats(&out), vec![1.0, 3.5, 6.0, 8.5, 11.0, 13.5]);
}

#[test]
fn routines_are_called_from_parallel_loops_on_every_thread() {
    // Each row of a 64 x 8 matrix through the routine, rows split across threads.
    let text = "func @rows(%x: f32[64, 8], %y: f32[64, 8]) {
  for %r: i64 in 0..64 parallel {
    call extern \"row_axpy_one\"(%x, %y, %r, f32(3.0))
  }
}

func @main(%x: f32[64, 8], %y: f32[64, 8]) {
  call @rows(%x, %y)
}
";
    let module = parse_module(text).expect("valid loop IR");
    use RoutineParam::{Buffer, F32, I64};
    let row = Routine {
        signature: RoutineSignature { name: "row_axpy_one".into(), params: vec![Buffer, Buffer, I64, F32] },
        features: Vec::new(),
        address: row_axpy_one as *const u8,
    };
    let options = JitOptions { routines: vec![axpy(&[]), row], ..JitOptions::default() };
    let jit = JitModule::compile(&module, &[true, false], options).expect("compile");
    let input: Vec<u8> = (0..512).flat_map(|i| (i as f32).to_le_bytes()).collect();
    for threads in [1, 2, 3] {
        let pool = ThreadPool::new(threads).expect("threads");
        let mut out = vec![0u8; 2048];
        jit.run_in([JitArg::Read(&input), JitArg::Write(&mut out)], Some(&pool), &[]).expect("run");
        let want: Vec<f32> = (0..512).map(|i| 3.0 * i as f32 + 1.0).collect();
        assert_eq!(floats(&out), want, "{threads} threads");
    }
}

#[test]
fn a_missing_routine_is_an_error_not_a_panic() {
    let module = parse_module(MODULE).expect("valid loop IR");
    let err = JitModule::compile(&module, &[true, false], JitOptions::default()).err().expect("must fail");
    assert!(matches!(&err, CodegenError::Unsupported { what, .. } if what.contains("axpy_one")), "{err}");
}

#[test]
fn a_call_that_does_not_match_the_registered_signature_is_an_error() {
    for call in ["(%x, %y, 6)", "(%x, %y, f32(6.0), f32(2.5))", "(%x, 6, 6, f32(2.5))", "(%x, %y, 6, f64(2.5))"] {
        let text = MODULE.replace("(%x, %y, 6, f32(2.5))", call);
        let module = parse_module(&text).expect("valid loop IR");
        let options = JitOptions { routines: vec![axpy(&[])], ..JitOptions::default() };
        let err = JitModule::compile(&module, &[true, false], options).err().expect("must fail");
        assert!(err.to_string().contains("does not match its registered signature"), "{call}: {err}");
    }
}

#[test]
fn routines_needing_features_the_cpu_lacks_or_unknown_ones_are_refused() {
    let module = parse_module(MODULE).expect("valid loop IR");
    let options = JitOptions { routines: vec![axpy(&["avx9000"])], ..JitOptions::default() };
    let err = JitModule::compile(&module, &[true, false], options).err().expect("must fail");
    assert!(err.to_string().contains("unknown CPU feature 'avx9000'"), "{err}");
    if !std::is_x86_feature_detected!("avx512f") {
        let options = JitOptions { routines: vec![axpy(&["avx512f"])], ..JitOptions::default() };
        let err = JitModule::compile(&module, &[true, false], options).err().expect("must fail");
        assert!(err.to_string().contains("needs avx512f, which this CPU lacks"), "{err}");
    }
}

/// A stand-in device: it counts the rows it was asked to process.
struct CountingDevice {
    rows: std::sync::atomic::AtomicI64,
}

/// y[row, i] = x[row, i] + device id, counting the call on the device.
extern "C" fn device_row(device: DeviceHandle, x: *const f32, y: *mut f32, row: i64) {
    // SAFETY: the test registers this routine with a `CountingDevice` in slot 1, which outlives
    // the run; rows are below 16 and written by one iteration each.
    let device = unsafe { &*device.cast::<CountingDevice>() };
    device.rows.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (x, y) = unsafe { (x.add(row as usize * 4), y.add(row as usize * 4)) };
    for i in 0..4 {
        unsafe { *y.add(i) = *x.add(i) + 100.0 };
    }
}

#[test]
fn routines_receive_device_handles_from_the_run_context() {
    let text = "func @main(%x: f32[16, 4], %y: f32[16, 4]) {
  for %r: i64 in 0..16 serial {
    call extern \"device_row\"(%x, %y, %r)
  }
}
";
    let module = parse_module(text).expect("valid loop IR");
    use RoutineParam::{Buffer, Device, I64};
    let routine = Routine {
        signature: RoutineSignature { name: "device_row".into(), params: vec![Device(1), Buffer, Buffer, I64] },
        features: Vec::new(),
        address: device_row as *const u8,
    };
    let options = JitOptions { routines: vec![routine], ..JitOptions::default() };
    let jit = JitModule::compile(&module, &[true, false], options).expect("compile");
    assert_eq!(jit.device_slots(), 2);
    let input: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut out = vec![0u8; 256];
    let err = jit.run([JitArg::Read(&input), JitArg::Write(&mut out)]).unwrap_err();
    assert!(matches!(err, JitRunError::MissingDevices { needed: 2, got: 0 }), "{err}");
    let unused = CountingDevice { rows: 0.into() };
    let device = CountingDevice { rows: 0.into() };
    let devices = [&unused as *const CountingDevice as DeviceHandle, &device as *const CountingDevice as DeviceHandle];
    jit.run_in([JitArg::Read(&input), JitArg::Write(&mut out)], None, &devices).expect("run");
    assert_eq!(floats(&out), (0..64).map(|i| i as f32 + 100.0).collect::<Vec<_>>());
    assert_eq!(device.rows.load(std::sync::atomic::Ordering::Relaxed), 16);
    assert_eq!(unused.rows.load(std::sync::atomic::Ordering::Relaxed), 0);
}
