//! The adversarial corpus (`heron_ir::testing::adversarial`) through the CLI as an attacker
//! would run it: `heron run --engine interp`, `heron run --engine jit` (between guard pages)
//! and `heron compile`, two processes at a time, each under a 9 GiB address-space limit. Every run must end in a clear
//! error (exit 1 or 2) or a result — never a signal, a panic ("internal error", exit 101), an
//! allocation abort or a hang — and where both engines give a result, they agree.
//!
//! `HERON_ADVERSARIAL_FULL=1` runs the full scale (100,000-node chains); the default is the
//! suite's scale (20,000-node chains; 50,000-input nodes and 20,000 outputs either way).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use heron_ir::npy::{read_npy, write_npy};
use heron_ir::testing::adversarial::{AdversarialCase, Scale, corpus};
use heron_ir::testing::assert_engines_agree;

/// A run longer than this counts as a hang (the acceptance bar is 30 s on an idle machine; CI
/// machines are shared).
const HANG: Duration = Duration::from_secs(90);
/// 9 GiB, in the KiB `ulimit -v` takes.
const ADDRESS_SPACE_KIB: u64 = 9 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Interp,
    Jit,
    Compile,
}

struct Outcome {
    ok: bool,
    elapsed: Duration,
}

/// A fresh directory, removed when the value drops.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("heron-adversarial-").tempdir().expect("scratch dir")
}

/// Runs one case in one mode; `Err` describes a failure of the promise.
fn run(dir: &Path, case: &AdversarialCase, mode: Mode) -> Result<Outcome, String> {
    let model = dir.join(format!("{}.onnx", case.name));
    let mut args: Vec<String> = match mode {
        Mode::Compile => {
            let out = dir.join(format!("{}.aot", case.name));
            vec![
                "compile".into(),
                model.display().to_string(),
                "--name".into(),
                "m".into(),
                "-o".into(),
                out.display().to_string(),
            ]
        }
        Mode::Interp | Mode::Jit => {
            let engine = if mode == Mode::Jit { "jit" } else { "interp" };
            let out = dir.join(format!("{}.{engine}", case.name));
            let mut a = vec!["run".into(), model.display().to_string(), "--engine".into(), engine.into()];
            if mode == Mode::Jit {
                // Between guard pages, so a stray access faults instead of going unnoticed;
                // half the cases flush each buffer's end against a guard, half its start.
                let guard = if case.name.len().is_multiple_of(2) { "end" } else { "start" };
                a.extend(["--guard-pages".into(), guard.into()]);
            }
            a.extend(["--output-dir".into(), out.display().to_string()]);
            for i in 0..case.inputs.len() {
                a.extend(["--input".into(), dir.join(format!("{}.input{i}.npy", case.name)).display().to_string()]);
            }
            a
        }
    };
    let script = format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\"");
    args.insert(0, env!("CARGO_BIN_EXE_heron").into());
    let start = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start heron: {e}"))?;
    // Read stderr while the child runs: a long message must not fill the pipe and stall it.
    let mut pipe = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("hang: still running after {HANG:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    let stderr = reader.join().unwrap_or_default();
    let last = stderr.lines().last().unwrap_or_default().chars().take(300).collect::<String>();
    match status.code() {
        Some(0) => Ok(Outcome { ok: true, elapsed }),
        Some(1 | 2) if !stderr.contains("internal error") && stderr.starts_with("error: ") => {
            Ok(Outcome { ok: false, elapsed })
        }
        Some(code) => Err(format!("exit {code}: {last}")),
        None => Err(format!("killed by a signal: {last}")),
    }
}

/// Where both engines gave a result, the results agree (the project's float rule).
fn compare(dir: &Path, case: &AdversarialCase) -> Result<(), String> {
    let (interp, jit) = (dir.join(format!("{}.interp", case.name)), dir.join(format!("{}.jit", case.name)));
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&interp).map_err(|e| e.to_string())?.map(|e| e.unwrap().path()).collect();
    files.sort();
    for want_path in files {
        let name = want_path.file_name().expect("file name");
        let want = read_npy(&want_path).map_err(|e| e.to_string())?;
        let got = read_npy(&jit.join(name)).map_err(|e| e.to_string())?;
        assert_engines_agree(&got, &want)
            .map_err(|e| format!("output {}: JIT and interpreter differ: {e}", name.display()))?;
    }
    Ok(())
}

#[test]
fn hostile_models_fail_cleanly_or_run_correctly() {
    let full = std::env::var_os("HERON_ADVERSARIAL_FULL").is_some();
    let cases = corpus(if full { Scale::FULL } else { Scale::CI });
    let tmp = scratch();
    let dir = tmp.path();
    for case in &cases {
        std::fs::write(dir.join(format!("{}.onnx", case.name)), &case.model).expect("write model");
        for (i, t) in case.inputs.iter().enumerate() {
            write_npy(&dir.join(format!("{}.input{i}.npy", case.name)), t).expect("write input");
        }
    }
    let jobs: Vec<(usize, Mode)> =
        (0..cases.len()).flat_map(|c| [Mode::Interp, Mode::Jit, Mode::Compile].map(|m| (c, m))).collect();
    let next = Mutex::new(0usize);
    let results = Mutex::new(Vec::new());
    // Two processes at a time, as the acceptance harness runs them.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let k = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(&(c, mode)) = jobs.get(k) else { break };
                    let r = run(dir, &cases[c], mode);
                    results.lock().unwrap().push((c, mode, r));
                }
            });
        }
    });
    let results = results.into_inner().unwrap();
    let mut failures = Vec::new();
    let mut slowest: Vec<(Duration, String)> = Vec::new();
    let outcome = |c: usize, m: Mode| results.iter().find(|r| r.0 == c && r.1 == m).and_then(|r| r.2.as_ref().ok());
    for (c, mode, r) in &results {
        match r {
            Err(e) => failures.push(format!("{} ({mode:?}): {e}", cases[*c].name)),
            Ok(o) => slowest.push((o.elapsed, format!("{} ({mode:?})", cases[*c].name))),
        }
    }
    for (c, case) in cases.iter().enumerate() {
        if outcome(c, Mode::Interp).is_some_and(|o| o.ok)
            && outcome(c, Mode::Jit).is_some_and(|o| o.ok)
            && let Err(e) = compare(dir, case)
        {
            failures.push(format!("{}: {e}", case.name));
        }
    }
    slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
    for (t, what) in slowest.iter().take(8) {
        println!("slowest: {what} {:.2} s", t.as_secs_f64());
    }
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        failures.is_empty(),
        "{} of {} runs broke the promise:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
    println!("{} cases, {} runs: every one a clear error or a correct result", cases.len(), jobs.len());
}

/// The deepest programs lowering makes (rank-64 tensors: a loop per axis, convolution and
/// pooling windows with another per axis) compile and run on a thread with a 1 MiB stack, half
/// of what Rust gives a spawned thread: nothing recurses in proportion to the input.
#[test]
fn the_deepest_models_fit_a_small_stack() {
    use heron_ir::onnx::{ImportOptions, import_model};
    use heron_runtime::{CompileOptions, Compiler, Engine, Model};
    let cases: Vec<AdversarialCase> = corpus(Scale { chain: 10, fan_in: 10, outputs: 10 })
        .into_iter()
        .filter(|c| c.name.starts_with("rank_64"))
        .collect();
    assert!(cases.len() >= 6);
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            for case in &cases {
                let graph = import_model(&case.model, &ImportOptions::default()).expect("imports");
                let model = Model::from_graph(&case.name, graph).expect("verifies");
                let want = model.run_interpreter(&case.inputs).expect("interpreter");
                for engine in [Engine::Jit, Engine::Interpreter] {
                    let compiled = Compiler::new(CompileOptions { engine, ..CompileOptions::default() })
                        .compile(&model)
                        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
                    assert_eq!(compiled.run(&case.inputs).expect("run"), want, "{}", case.name);
                }
                Compiler::new(CompileOptions::default())
                    .compile_aot(&model, &heron_aot::AotOptions::new("deep"))
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            }
        })
        .expect("thread")
        .join()
        .expect("no panic");
}

/// The deepest loop IR the parser and verifier accept (`MAX_NESTING` levels of loops, or of
/// expression) compiles, runs and prints on a thread with Rust's default 2 MiB stack.
#[test]
fn the_deepest_loop_ir_compiles_on_a_default_stack() {
    use heron_ir::loop_ir::MAX_NESTING;
    use heron_jit::{JitArg, JitModule, JitOptions};
    // `depth` loops around `y[0] = y[0] + 1`, or `y[0] = (((y[0] + 1) + 1) ... + 1)` `depth` deep.
    let program = |depth: usize, loops: bool| {
        let mut text = String::from("func @main(%y: f32[1]) {\n");
        let (nest, sum) = if loops { (depth, 1) } else { (0, depth) };
        for k in 0..nest {
            text.push_str(&format!("for %i{k}: i64 in 0..1 serial {{\n"));
        }
        text.push_str(&format!("%y[0] = {}%y[0]{}\n", "(".repeat(sum), " + f32(1.0))".repeat(sum)));
        text.push_str(&"}\n".repeat(nest + 1));
        heron_ir::loop_ir::parse::parse_module(&text).ok().map(|m| (m, sum))
    };
    for loops in [true, false] {
        // As deep as the verifier takes.
        let (module, sum) = (MAX_NESTING - 10..MAX_NESTING)
            .rev()
            .filter_map(|d| program(d, loops))
            .find(|(m, _)| heron_ir::loop_ir::verify::verify_module(m).is_ok())
            .expect("a program at the limit");
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let jit = JitModule::compile(&module, &[false], JitOptions::default()).expect("compiles");
                let mut y = [0u8; 4];
                jit.run([JitArg::Write(&mut y)]).expect("runs");
                assert_eq!(f32::from_le_bytes(y), sum as f32);
                heron_ir::loop_ir::print::print_module(&module, heron_ir::loop_ir::print::ConstData::Full);
            })
            .expect("thread")
            .join()
            .expect("no stack overflow");
    }
}
