//! Guard-page mode: every pool and staging buffer sits between inaccessible pages, flush
//! against the following one (`end`) or the preceding one (`start`), so generated code that
//! left its buffers would fault at once. The mechanism is shown to fault (in a child process);
//! then the reference models (JIT and AOT) run in both modes with results identical to
//! ordinary memory (the ONNX conformance suite does too: `jit_conformance.rs`). The whole
//! suite runs in a mode with `HERON_GUARD_PAGES=end cargo test --release --workspace` (and
//! `=start`).

use std::process::Command;

use heron_ir::npy::read_npy;
use heron_ir::testing::shared_dir;
use heron_runtime::memory::{Block, GuardPages};
use heron_runtime::{CompileOptions, Compiler, Engine, Model};

const MODES: [GuardPages; 2] = [GuardPages::End, GuardPages::Start];

/// Run by `guards_fault_on_the_first_byte_outside` in a child process: touches the byte just
/// past (`end`) or just before (`start`) a guarded block, which must kill the process.
#[test]
#[ignore = "run as a child process by guards_fault_on_the_first_byte_outside"]
#[allow(unsafe_code)]
fn touch_outside_a_guarded_block() {
    let Some(mode) = std::env::var("HERON_GUARD_CHILD").ok().and_then(|m| GuardPages::parse(&m)) else { return };
    let block = Block::zeroed(3 * 4096 + 64, 64, mode, "probe").expect("block");
    let inside = block.bytes();
    assert_eq!(inside.iter().map(|&b| b as u64).sum::<u64>(), 0, "the whole block is readable");
    let outside = match mode {
        GuardPages::End => inside.as_ptr_range().end,
        _ => inside.as_ptr().wrapping_sub(1),
    };
    // SAFETY: not safe at all, on purpose: this address is a guard page, and the read must
    // kill the process before it returns.
    let byte = unsafe { std::ptr::read_volatile(outside) };
    println!("read {byte} outside the block: the guard did not fault");
}

#[test]
fn guards_fault_on_the_first_byte_outside() {
    for mode in MODES {
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args(["touch_outside_a_guarded_block", "--exact", "--ignored", "--nocapture"])
            .env("HERON_GUARD_CHILD", mode.to_string())
            .output()
            .expect("run the child");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(11),
            "{mode}: expected SIGSEGV, got {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn reference_models_run_identically_between_guard_pages() {
    let dir = shared_dir().join("reference");
    for name in ["tiny_relu", "mlp", "lenet", "mobilenet_ish", "resnet_ish"] {
        let model = Model::load(dir.join(format!("{name}.onnx"))).expect("model");
        let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
        for engine in [Engine::Jit, Engine::Aot] {
            let compile = |guard_pages| {
                let options = CompileOptions { engine, guard_pages, ..CompileOptions::default() };
                Compiler::new(options).compile(&model).unwrap_or_else(|e| panic!("{name}: {e}"))
            };
            let want = compile(GuardPages::Off).run(std::slice::from_ref(&input)).expect("run");
            for mode in MODES {
                let got = compile(mode).run(std::slice::from_ref(&input)).expect("run between guard pages");
                assert_eq!(got, want, "{name} on {engine:?} with guard pages at the {mode}");
            }
        }
    }
}

/// A load from an empty buffer (under a select that discards it) has no element to fall back
/// to: it is reported, and reads scratch instead of the guard page right after the buffer.
#[test]
fn a_load_from_an_empty_buffer_stays_inside() {
    use heron_jit::{JitArg, JitModule, JitOptions, JitRunError};
    let text = "func @main(%x: f32[0], %y: f32[2]) {\n  for %i: i64 in 0..2 serial {\n    %y[%i] = select(bool(0), %x[%i], f32(1.0))\n  }\n}\n";
    let module = heron_ir::loop_ir::parse::parse_module(text).expect("valid loop IR");
    let jit = JitModule::compile(&module, &[true, false], JitOptions::default()).expect("compile");
    for mode in MODES {
        let x = Block::zeroed(0, 4, mode, "x").expect("x");
        let mut y = Block::zeroed(8, 4, mode, "y").expect("y");
        let err = jit.run([JitArg::Read(x.bytes()), JitArg::Write(y.bytes_mut())]).expect_err("reported");
        assert!(matches!(err, JitRunError::IndexOutOfRange { .. }), "{err}");
    }
}
