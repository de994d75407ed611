//! Precompiled routines called from generated code (`call extern "name"(...)`): the kernel
//! layer's hook for microkernels that are not generated (e.g. hand-written AVX-512 ones).
#![allow(unsafe_code)]

use heron_ir::loop_ir::parse::parse_module;
use heron_jit::{CodegenError, JitArg, JitModule, JitOptions};

/// y[i] = k * x[i] + 1 for i < n.
extern "C" fn axpy_one(x: *const f32, y: *mut f32, n: i64, k: f32) {
    // SAFETY: the test's module passes buffers of at least `n` elements.
    let (x, y) = unsafe { (std::slice::from_raw_parts(x, n as usize), std::slice::from_raw_parts_mut(y, n as usize)) };
    for (o, i) in y.iter_mut().zip(x) {
        *o = k * i + 1.0;
    }
}

const MODULE: &str = "func @main(%x: f32[6], %y: f32[6]) {\n  call extern \"axpy_one\"(%x, %y, 6, f32(2.5))\n}\n";

#[test]
fn generated_code_calls_a_precompiled_routine() {
    let module = parse_module(MODULE).expect("valid loop IR");
    let options = JitOptions { routines: vec![("axpy_one".into(), axpy_one as *const u8)], ..JitOptions::default() };
    let jit = JitModule::compile(&module, &[true, false], options).expect("compile");
    let input: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut out = vec![0u8; 24];
    jit.run([JitArg::Read(&input), JitArg::Write(&mut out)]).expect("run");
    let got: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, vec![1.0, 3.5, 6.0, 8.5, 11.0, 13.5]);
}

#[test]
fn a_missing_routine_is_an_error_not_a_panic() {
    let module = parse_module(MODULE).expect("valid loop IR");
    let err = JitModule::compile(&module, &[true, false], JitOptions::default()).err().expect("must fail");
    assert!(matches!(&err, CodegenError::Unsupported { what, .. } if what.contains("axpy_one")), "{err}");
}
