//! The CPU schedule: it vectorizes and jams only loops whose iterations are independent, and the
//! scheduled code computes what the loop-IR interpreter computes on the unscheduled program.

use heron_ir::Tensor;
use heron_ir::loop_ir::parse::parse_module;
use heron_ir::loop_ir::print::{ConstData, print_module};
use heron_ir::loop_ir::{Module, interp};
use heron_jit::schedule::schedule;
use heron_jit::{JitArg, JitModule, JitOptions};

fn run_jit(m: &Module, x: &[f32], out_len: usize) -> Vec<f32> {
    let jit = JitModule::compile(m, &[true, false], JitOptions::default()).expect("compile");
    let input: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = vec![0u8; 4 * out_len];
    jit.run([JitArg::Read(&input), JitArg::Write(&mut out)]).expect("run");
    out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn interpret(m: &Module, x: &[f32]) -> Vec<f32> {
    let input = Tensor::from_vec(&[x.len()], x.to_vec()).expect("input");
    interp::run(m, &[input]).expect("interpreter")[0].to_f64_vec().into_iter().map(|v| v as f32).collect()
}

#[test]
fn a_running_sum_stays_serial() {
    // y[i + 1] = y[i] + x[i]: each iteration reads the previous one's output.
    let text = "func @main(%x: f32[40], %y: f32[41]) {\n  for %i: i64 in 0..40 serial {\n    %y[(%i + 1)] = (%y[%i] + %x[%i])\n  }\n}\n";
    let mut m = parse_module(text).expect("valid loop IR");
    let want = interpret(&m, &(0..40).map(|i| i as f32).collect::<Vec<_>>());
    schedule(&mut m);
    let printed = print_module(&m, ConstData::Elided);
    assert!(!printed.contains("vectorized") && !printed.contains("unrolled"), "{printed}");
    assert_eq!(run_jit(&m, &(0..40).map(|i| i as f32).collect::<Vec<_>>(), 41), want);
}

#[test]
fn an_elementwise_nest_is_vectorized_and_jammed() {
    let text = "func @main(%x: f32[300], %y: f32[300]) {\n  for %i: i64 in 0..10 serial {\n    for %j: i64 in 0..30 serial {\n      %y[((%i * 30) + %j)] = max((%x[((%i * 30) + %j)] * f32(2.0)), f32(0.0))\n    }\n  }\n}\n";
    let mut m = parse_module(text).expect("valid loop IR");
    let x: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) / 7.0).collect();
    let want = interpret(&m, &x);
    schedule(&mut m);
    let printed = print_module(&m, ConstData::Elided);
    assert!(printed.contains("vectorized") && printed.contains("unrolled"), "{printed}");
    assert_eq!(run_jit(&m, &x, 300), want);
}

/// A loop runs in parallel only when its iterations store disjoint elements: `a[v·512 + l·64
/// + w]` (the inner loops span less than 512) qualifies, and the same nest storing `a[v]` as
/// well does not (iteration 0 writes `a[1]` through its inner loops, iteration 1 directly).
#[test]
fn a_loop_runs_in_parallel_only_when_its_iterations_store_disjoint_elements() {
    use heron_jit::schedule::mark_parallel;
    let nest = |extra: &str| {
        format!(
            "func @f(%x: f32[32768], %a: f32[32768]) {{\n  for %v: i64 in 0..64 serial {{\n    for %l: i64 in 0..8 serial {{\n      for %w: i64 in 0..64 serial {{\n        %a[(((%v * 512) + (%l * 64)) + %w)] = (%x[(((%v * 512) + (%l * 64)) + %w)] * f32(2.0))\n      }}\n    }}\n{extra}  }}\n}}\n"
        )
    };
    for (extra, parallel) in [("", true), ("    %a[%v] = f32(1.0)\n", false)] {
        let mut m = parse_module(&nest(extra)).expect("valid loop IR");
        mark_parallel(&mut m);
        let printed = print_module(&m, ConstData::Elided);
        assert_eq!(printed.contains("%v: i64 in 0..64 parallel"), parallel, "{printed}");
    }
}

/// A 2-d elementwise nest, whose row loop the schedule jams around the vector loop, runs its
/// rows in parallel chunks of whole jams, and computes what the interpreter does.
#[test]
fn jammed_rows_run_in_parallel_chunks() {
    use heron_jit::schedule::mark_parallel;
    let text = "func @f(%x: f32[65536], %y: f32[65536]) {\n  for %i: i64 in 0..256 serial {\n    for %j: i64 in 0..256 serial {\n      %y[((%i * 256) + %j)] = max(%x[((%i * 256) + %j)], f32(0.0))\n    }\n  }\n}\n\nfunc @main(%x: f32[65536], %y: f32[65536]) {\n  call @f(%x, %y)\n}\n";
    let mut m = parse_module(text).expect("valid loop IR");
    let x: Vec<f32> = (0..65536).map(|i| (i % 777) as f32 - 388.0).collect();
    let want = interpret(&m, &x);
    schedule(&mut m);
    mark_parallel(&mut m);
    let printed = print_module(&m, ConstData::Elided);
    assert!(printed.contains("%i_chunk: i64 in 0..16 parallel"), "{printed}");
    assert!(printed.contains("%i_in: i64 in 0..16 unrolled(4)"), "{printed}");
    assert_eq!(run_jit(&m, &x, 65536), want);
}

/// A 2-d elementwise nest with all its rows in one jam (4 rows of 8000) runs its vector loop in
/// parallel chunks around the jam, and computes what the interpreter does.
#[test]
fn rows_in_one_jam_run_their_columns_in_parallel_chunks() {
    use heron_jit::schedule::mark_parallel;
    let text = "func @f(%x: f32[4, 8000], %y: f32[4, 8000]) {\n  for %i: i64 in 0..4 serial {\n    for %j: i64 in 0..8000 serial {\n      %y[%i, %j] = (f32(1.0) / %x[%i, %j])\n    }\n  }\n}\n\nfunc @main(%x: f32[4, 8000], %y: f32[4, 8000]) {\n  call @f(%x, %y)\n}\n";
    let mut m = parse_module(text).expect("valid loop IR");
    let x: Vec<f32> = (0..32000).map(|i| (i % 777) as f32 - 388.5).collect();
    let want = interpret(&m, &x);
    schedule(&mut m);
    mark_parallel(&mut m);
    let printed = print_module(&m, ConstData::Elided);
    assert!(printed.contains("%j_chunk: i64 in 0..10 parallel"), "{printed}");
    assert!(printed.contains("%i: i64 in 0..4 unrolled(4)"), "{printed}");
    assert!(printed.contains("%j_in: i64 in 0..800 vectorized"), "{printed}");
    assert_eq!(run_jit(&m, &x, 32000), want);
}
