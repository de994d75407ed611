//! AOT compilation end to end: the seed's use cases U1-U3 as C programs (`aot/examples/`) built
//! with the system C compiler and checked against the interpreter / ONNX Runtime's outputs; the
//! shared-library path against the JIT bit for bit; the header's naming rule in a C program;
//! what the object imports and exports.

use std::path::{Path, PathBuf};
use std::process::Command;

use heron_aot::link::{build_c_program, exported_symbols, undefined_symbols};
use heron_aot::{ALLOWED_IMPORTS, AotOptions, Artifacts};
use heron_ir::npy::{read_npy, write_npy};
use heron_ir::testing::{assert_float_rule, shared_dir};
use heron_ir::{BinaryOp, DType, Graph, Op, Tensor, TensorType};
use heron_planner::spec::parse_pool_spec;
use heron_planner::{PoolInfo, PoolKind};
use heron_runtime::{CompileOptions, Compiler, Engine, Model};

/// A fresh directory, removed when the value drops.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("heron-aot-test-{name}-")).tempdir().expect("scratch dir")
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../aot/examples")
}

fn reference(name: &str) -> (Model, Tensor, Tensor) {
    let dir = shared_dir().join("reference");
    let model = Model::load(dir.join(format!("{name}.onnx"))).expect("model");
    let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
    let want = read_npy(&dir.join(format!("{name}.ref.npy"))).expect("reference output");
    (model, input, want)
}

fn pools(workspace: &[&str], parameter: &[&str]) -> Vec<PoolInfo> {
    let mut pools: Vec<PoolInfo> =
        workspace.iter().map(|s| parse_pool_spec(s, PoolKind::Workspace).expect("workspace pool")).collect();
    pools.extend(parameter.iter().map(|s| parse_pool_spec(s, PoolKind::Constant).expect("parameter pool")));
    if parameter.is_empty() {
        pools.push(PoolInfo::constant("constants", None));
    }
    pools
}

/// Compiles `model` ahead of time into `dir` and checks what the object imports and exports.
fn compile_into(model: &Model, dir: &Path, name: &str, pools: Vec<PoolInfo>, embed_workspace: bool) -> Artifacts {
    let embed_parameters = !pools.iter().any(|p| p.kind == PoolKind::Constant && p.name != "constants");
    let options = CompileOptions { pools, ..CompileOptions::default() };
    let mut aot = AotOptions::new(name);
    aot.embed_workspace = embed_workspace;
    aot.embed_parameters = embed_parameters;
    let artifacts = Compiler::new(options).compile_aot(model, &aot).expect("compile_aot");
    artifacts.write(dir).expect("write artifacts");
    let imports = undefined_symbols(&artifacts.object).expect("object parses");
    assert!(imports.iter().all(|s| ALLOWED_IMPORTS.contains(&s.as_str())), "unexpected imports {imports:?}");
    let mut exported = exported_symbols(&artifacts.object).expect("object parses");
    exported.sort();
    let c_name = &artifacts.metadata.c_name;
    assert_eq!(
        exported,
        [
            format!("heron_{c_name}_run"),
            format!("heron_{c_name}_run_checked"),
            format!("heron_{c_name}_run_checked_ctx"),
            format!("heron_{c_name}_run_ctx")
        ]
    );
    artifacts
}

fn write_raw(t: &Tensor, path: &Path) {
    let mut bytes = vec![0u8; t.tensor_type().size_bytes()];
    t.write_le_bytes(&mut bytes);
    std::fs::write(path, bytes).expect("write input");
}

fn read_raw(path: &Path, like: &Tensor) -> Tensor {
    Tensor::from_le_bytes(&like.tensor_type(), &std::fs::read(path).expect("program output")).expect("output size")
}

fn run_program(exe: &Path, args: &[&Path]) {
    let out = Command::new(exe).args(args).output().expect("run the C program");
    assert!(out.status.success(), "{} failed: {}", exe.display(), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn u1_single_model_with_embedded_workspace_and_constants() {
    let tmp = scratch("u1");
    let dir = tmp.path();
    let (model, input, want) = reference("lenet");
    let artifacts = compile_into(&model, dir, "lenet", pools(&["workspace"], &[]), true);
    assert!(!artifacts.header.contains("WORKSPACE_BUFFER_SIZE 0"));
    assert!(artifacts.header.contains("void* reserved;"), "no user pools: placeholder members");
    let exe = dir.join("u1");
    build_c_program(&[&examples().join("u1_embedded/main.c")], &[&dir.join("lenet.o")], dir, &exe).expect("cc");
    // The examples read and write .npy files (raw bytes under any other name: U2, U3's output).
    write_npy(&dir.join("in.npy"), &input).expect("write input");
    run_program(&exe, &[&dir.join("in.npy"), &dir.join("out.npy")]);
    let got = read_npy(&dir.join("out.npy")).expect("an .npy output").reshape(want.shape()).unwrap();
    assert_float_rule(&got, &model.run_interpreter(std::slice::from_ref(&input)).expect("interpreter")[0])
        .expect("U1 equals the interpreter");
    // Another dtype is refused with the conversion to make.
    write_npy(&dir.join("f64.npy"), &input.cast(DType::F64)).expect("write");
    let out = Command::new(&exe).args([dir.join("f64.npy"), dir.join("x.npy")]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("x.astype(np.float32)"));
    assert_float_rule(&got, &want).expect("U1 equals ONNX Runtime");
}

#[test]
fn u2_two_models_share_one_workspace_buffer() {
    let tmp = scratch("u2");
    let dir = tmp.path();
    let (lenet, lenet_in, _) = reference("lenet");
    let (mlp, mlp_in, _) = reference("mlp");
    let a = compile_into(&lenet, dir, "lenet", pools(&["shared"], &[]), false);
    let b = compile_into(&mlp, dir, "mlp", pools(&["shared"], &[]), false);
    let size = |art: &Artifacts| art.metadata.pools[0].size_bytes;
    assert_ne!(size(&a), size(&b), "the models need different workspace sizes");
    let exe = dir.join("u2");
    let objects = [dir.join("lenet.o"), dir.join("mlp.o")];
    build_c_program(&[&examples().join("u2_shared_workspace/main.c")], &[&objects[0], &objects[1]], dir, &exe)
        .expect("cc");
    write_raw(&lenet_in, &dir.join("lenet_in.bin"));
    write_raw(&mlp_in, &dir.join("mlp_in.bin"));
    let outs = [dir.join("lenet_out.bin"), dir.join("mlp_out.bin")];
    run_program(&exe, &[&dir.join("lenet_in.bin"), &dir.join("mlp_in.bin"), &outs[0], &outs[1]]);
    for (model, input, out) in [(&lenet, &lenet_in, &outs[0]), (&mlp, &mlp_in, &outs[1])] {
        let want = &model.run_interpreter(std::slice::from_ref(input)).expect("interpreter")[0];
        assert_float_rule(&read_raw(out, want), want).unwrap_or_else(|e| panic!("{}: {e}", model.name()));
    }
}

#[test]
fn u3_two_workspace_pools_with_fallback_and_user_parameters() {
    let tmp = scratch("u3");
    let dir = tmp.path();
    let (model, input, want) = reference("mobilenet_ish");
    let artifacts = compile_into(&model, dir, "net", pools(&["sram:size_hint=262144", "dram"], &["flash"]), false);
    let meta = &artifacts.metadata;
    let pool = |name: &str| meta.pools.iter().find(|p| p.name == name).expect("pool");
    assert!(pool("sram").size_bytes > 0 && pool("sram").size_bytes <= 262144, "the fast pool holds something");
    assert!(pool("dram").size_bytes > 262144, "the rest falls back to the large pool");
    assert_eq!(pool("flash").params_file.as_deref(), Some("net.flash.params"));
    assert_eq!(std::fs::metadata(dir.join("net.flash.params")).expect("params blob").len(), pool("flash").size_bytes);
    let exe = dir.join("u3");
    build_c_program(&[&examples().join("u3_pools_and_parameters/main.c")], &[&dir.join("net.o")], dir, &exe)
        .expect("cc");
    write_npy(&dir.join("in.npy"), &input).expect("write input");
    run_program(&exe, &[&dir.join("net.flash.params"), &dir.join("in.npy"), &dir.join("out.bin")]);
    // mobilenet_ish is big: checked against the stored ONNX Runtime output.
    assert_float_rule(&read_raw(&dir.join("out.bin"), &want), &want).expect("U3 equals ONNX Runtime");
    // The same directory loads in-process through the inference API.
    let loaded = Model::load_aot(dir).expect("load_aot");
    assert_eq!(loaded.engine(), Engine::Aot);
    let got = loaded.run(std::slice::from_ref(&input)).expect("run the shared library");
    assert_float_rule(&got[0], &want).expect("shared library equals ONNX Runtime");
}

/// The shared library built for this CPU computes exactly what the JIT computes with the same
/// generated code, with the kernels off, and on (the object calls them through its workspace's
/// pool context) at 1 and 2 threads.
#[test]
fn shared_library_equals_the_jit_bit_for_bit() {
    let settings = [(false, 1), (true, 1), (true, 2)];
    for (name, (kernels, threads)) in ["tiny_relu", "mlp", "lenet", "mobilenet_ish", "resnet_ish"]
        .into_iter()
        .flat_map(|name| settings.iter().map(move |&s| (name, s)))
    {
        let (model, input, want) = reference(name);
        let options = |engine| CompileOptions { engine, kernels, threads, ..CompileOptions::default() };
        let compile = |engine| Compiler::new(options(engine)).compile(&model);
        let jit = compile(Engine::Jit).expect("jit");
        let aot = compile(Engine::Aot).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(aot.engine(), Engine::Aot);
        let (a, b) = (jit.run(std::slice::from_ref(&input)).expect("jit run"), aot.run(std::slice::from_ref(&input)));
        let b = b.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(a, b, "{name}: AOT differs from the JIT");
        assert_float_rule(&b[0], &want).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Wrong inputs are refused before the library runs.
        assert!(aot.run(&[]).is_err());
    }
}

/// Names that are not C identifiers, collide, or are keywords: the header still compiles and a C
/// program using the documented identifiers gets the right answer.
#[test]
fn awkward_names_follow_the_identifier_rule() {
    let mut g = Graph::new();
    let ty = TensorType::new(DType::F32, vec![2, 3]);
    let a = g.add_input("in:0", ty.clone());
    let b = g.add_input("int", ty.clone());
    let c = g.add_input("3d", TensorType::new(DType::I32, vec![2, 3]));
    let sum = g.add_op("a-b", Op::Binary(BinaryOp::Add), &[a, b]).expect("add");
    let diff = g.add_op("a_b", Op::Binary(BinaryOp::Sub), &[a, b]).expect("sub");
    let square = g.add_op("A_B", Op::Binary(BinaryOp::Mul), &[c, c]).expect("mul");
    g.set_outputs(vec![sum, diff, square]);
    let model = Model::from_graph("odd model", g).expect("graph verifies");
    let tmp = scratch("names");
    let dir = tmp.path();
    let artifacts = compile_into(&model, dir, "odd model", pools(&["work.pool"], &[]), false);
    let ids = &artifacts.metadata.identifiers;
    assert_eq!(ids.model["odd model"], "odd_model");
    assert_eq!(ids.pools["work.pool"], "work_pool");
    let outputs: Vec<&str> = artifacts.metadata.outputs.iter().map(|t| t.c_name.as_str()).collect();
    assert_eq!(outputs, ["a_b", "a_b_2", "A_B_3"]);
    let inputs: Vec<&str> = artifacts.metadata.inputs.iter().map(|t| t.c_name.as_str()).collect();
    assert_eq!(inputs, ["in_0", "t_int", "t_3d"]);
    let program = r#"
#include <stdio.h>
#include "odd model.h"
static _Alignas(HERON_ODD_MODEL_WORK_POOL_ALIGNMENT) uint8_t ws[HERON_ODD_MODEL_WORK_POOL_WORKSPACE_BUFFER_SIZE + 1];
int main(void) {
  float x[HERON_ODD_MODEL_IN_0_SIZE] = {1, 2, 3, 4, 5, 6}, y[HERON_ODD_MODEL_T_INT_SIZE] = {6, 5, 4, 3, 2, 1};
  int32_t z[HERON_ODD_MODEL_T_3D_SIZE] = {-1, 2, -3, 4, -5, 6}, w[HERON_ODD_MODEL_A_B_3_SIZE];
  float s[HERON_ODD_MODEL_A_B_SIZE], d[HERON_ODD_MODEL_A_B_2_SIZE];
  HeronInputs_odd_model in = { .in_0 = x, .t_int = y, .t_3d = z };
  HeronOutputs_odd_model out = { .a_b = s, .a_b_2 = d, .A_B_3 = w };
  HeronWorkspaces_odd_model pools = { .work_pool = ws };
  if (heron_odd_model_run(&in, &out, &pools, NULL) != HERON_OK) return 1;
  for (int i = 0; i < 6; i++) if (s[i] != 7 || d[i] != 2 * i - 5 || w[i] != (i + 1) * (i + 1)) return 2;
  /* A misaligned workspace is refused. */
  HeronWorkspaces_odd_model bad = { .work_pool = ws + 1 };
  if (HERON_ODD_MODEL_WORK_POOL_WORKSPACE_BUFFER_SIZE > 0 && heron_odd_model_run(&in, &out, &bad, NULL) != HERON_ERROR_ARGUMENT) return 3;
  /* The checked entry takes every buffer's byte size. */
  HeronInputSizes_odd_model in_sizes = { .in_0 = sizeof x, .t_int = sizeof y, .t_3d = sizeof z };
  HeronOutputSizes_odd_model out_sizes = { .a_b = sizeof s, .a_b_2 = sizeof d, .A_B_3 = sizeof w };
  HeronWorkspaceSizes_odd_model pool_sizes = { .work_pool = sizeof ws };
  for (int i = 0; i < 6; i++) s[i] = d[i] = -1;
  if (heron_odd_model_run_checked(&in, &in_sizes, &out, &out_sizes, &pools, &pool_sizes, NULL, NULL) != HERON_OK) return 4;
  for (int i = 0; i < 6; i++) if (s[i] != 7 || d[i] != 2 * i - 5) return 5;
  /* One element short anywhere: refused before anything is written. */
  for (int i = 0; i < 6; i++) s[i] = -1;
  HeronOutputSizes_odd_model short_out = out_sizes;
  short_out.a_b_2 -= sizeof(float);
  if (heron_odd_model_run_checked(&in, &in_sizes, &out, &short_out, &pools, &pool_sizes, NULL, NULL) != HERON_ERROR_SIZE) return 6;
  for (int i = 0; i < 6; i++) if (s[i] != -1) return 7;
  HeronInputSizes_odd_model short_in = in_sizes;
  short_in.t_3d = 0;
  if (heron_odd_model_run_checked(&in, &short_in, &out, &out_sizes, &pools, &pool_sizes, NULL, NULL) != HERON_ERROR_SIZE) return 8;
  HeronWorkspaceSizes_odd_model short_pool = { .work_pool = HERON_ODD_MODEL_WORK_POOL_WORKSPACE_BUFFER_SIZE - 1 };
  if (HERON_ODD_MODEL_WORK_POOL_WORKSPACE_BUFFER_SIZE > 0 && heron_odd_model_run_checked(&in, &in_sizes, &out, &out_sizes, &pools, &short_pool, NULL, NULL) != HERON_ERROR_SIZE) return 9;
  /* A missing sizes struct is an argument error, not a dereference. */
  if (heron_odd_model_run_checked(&in, NULL, &out, &out_sizes, &pools, &pool_sizes, NULL, NULL) != HERON_ERROR_ARGUMENT) return 10;
  return 0;
}
"#;
    std::fs::write(dir.join("main.c"), program).expect("write program");
    let exe = dir.join("names");
    build_c_program(&[&dir.join("main.c")], &[&dir.join("odd model.o")], dir, &exe).expect("cc");
    run_program(&exe, &[]);
}

/// Does this CPU have a VNNI byte dot product (AVX-VNNI or AVX512-VNNI)?
fn host_has_vnni() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .is_ok_and(|info| info.split_whitespace().any(|flag| flag == "avx_vnni" || flag == "avx512_vnni"))
}

/// An int8 convolution with channels in quads, compiled for this CPU, computes its reduction
/// with `vpdpbusd` (checked in the disassembly when objdump and a VNNI CPU are there).
#[test]
fn int8_convolutions_use_vnni_dot_products() {
    let objdump = Command::new("objdump").arg("--version").output();
    if objdump.is_err() || !host_has_vnni() {
        eprintln!("skipped: needs objdump and a CPU with AVX-VNNI or AVX512-VNNI");
        return;
    }
    let (c, m) = (16, 8);
    let mut g = Graph::new();
    let x = g.add_input("x", TensorType::new(DType::U8, vec![1, c, 10, 10]));
    let w = g.add_constant("w", Tensor::from_vec(&[m, c, 3, 3], vec![3i8; m * c * 9]).unwrap());
    let zx = g.add_constant("zx", Tensor::from_vec::<u8>(&[], vec![128]).unwrap());
    let zw = g.add_constant("zw", Tensor::from_vec::<i8>(&[], vec![0]).unwrap());
    let conv = Op::ConvInteger(heron_ir::ConvAttrs { window: heron_ir::Window::dense(vec![3, 3]), group: 1 });
    let y = g.add_op("conv", conv, &[x, w, zx, zw]).unwrap();
    g.set_outputs(vec![y]);
    let model = Model::from_graph("int8conv", g).unwrap();
    let mut aot = AotOptions::new("int8conv");
    aot.target_cpu = heron_jit::isa::TargetCpu::Native;
    let artifacts = Compiler::new(CompileOptions::default()).compile_aot(&model, &aot).expect("compile_aot");
    let tmp = scratch("vnni");
    let dir = tmp.path();
    artifacts.write(dir).expect("write artifacts");
    let listing = Command::new("objdump").arg("-d").arg(dir.join("int8conv.o")).output().expect("objdump runs");
    let text = String::from_utf8_lossy(&listing.stdout);
    assert!(text.contains("vpdpbusd"), "no vpdpbusd in the int8 convolution:\n{text}");
}

/// Builds the C program `main_c` (including `net.h` and `heron_threads.h`) against `net.o` in
/// `dir` and libheron_threads.a, runs it on `input` and returns what it wrote, shaped like
/// `like`.
fn run_with_threads_library(dir: &Path, main_c: &str, input: &Tensor, like: &Tensor) -> Tensor {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../jit/threads/include");
    std::fs::copy(include.join("heron_threads.h"), dir.join("heron_threads.h")).expect("header");
    std::fs::write(dir.join("main.c"), main_c).expect("write main.c");
    let exe = dir.join("program");
    let threads = heron_ir::testing::static_library("heron_threads");
    heron_aot::link::build_c_program_with_runtime(
        &[&dir.join("main.c")],
        &[&dir.join("net.o")],
        Some(&threads),
        dir,
        &exe,
    )
    .expect("cc");
    write_raw(input, &dir.join("in.bin"));
    run_program(&exe, &[&dir.join("in.bin"), &dir.join("out.bin")]);
    read_raw(&dir.join("out.bin"), like)
}

/// An object compiled with the kernels runs from C with a context of libheron_threads.a, which
/// carries them: bit-identical on 1-3 threads, through `_run_ctx` and `_run_checked_ctx`; without
/// a context it refuses to run.
#[test]
fn objects_call_the_kernels_through_the_thread_pool_context() {
    let tmp = scratch("kernels");
    let dir = tmp.path();
    let (model, input, want) = reference("mobilenet_ish");
    let mut aot = AotOptions::new("net");
    aot.kernels = true;
    let options = CompileOptions { threads: 2, pools: pools(&["workspace"], &[]), ..CompileOptions::default() };
    let artifacts = Compiler::new(options).compile_aot(&model, &aot).expect("compile_aot");
    let kernels: Vec<String> = heron_jit::kernels::routines().into_iter().map(|r| r.signature.name).collect();
    assert_eq!(artifacts.metadata.routines, kernels);
    artifacts.write(dir).expect("write artifacts");
    let imports = undefined_symbols(&artifacts.object).expect("object parses");
    assert!(imports.iter().all(|s| ALLOWED_IMPORTS.contains(&s.as_str())), "kernels are not linked: {imports:?}");
    let got = run_with_threads_library(
        dir,
        r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net.h"
#include "heron_threads.h"
static float input[HERON_NET_INPUT_SIZE], first[HERON_NET_FC_111_SIZE], again[HERON_NET_FC_111_SIZE];
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb");
  if (!f || fread(input, 1, sizeof input, f) != sizeof input) return 10;
  fclose(f);
  uint8_t* ws = aligned_alloc(HERON_NET_WORKSPACE_ALIGNMENT, HERON_NET_WORKSPACE_WORKSPACE_BUFFER_SIZE);
  if (!ws) return 11;
  HeronInputs_net in = { .input = input };
  HeronOutputs_net out = { .fc_111 = first };
  HeronWorkspaces_net w = { .workspace = ws };
  /* The kernels come from a context: none, no run. */
  if (heron_net_run(&in, &out, &w, NULL) != HERON_ERROR_CONTEXT) return 12;
  if (heron_net_run_ctx(&in, &out, &w, NULL, NULL) != HERON_ERROR_CONTEXT) return 13;
  HeronThreads* one = heron_threads_new(1);
  if (!one || heron_net_run_ctx(&in, &out, &w, NULL, heron_threads_context(one)) != HERON_OK) return 14;
  heron_threads_free(one);
  out.fc_111 = again;
  for (size_t threads = 1; threads <= 3; threads++) {
    HeronThreads* pool = heron_threads_new(threads);
    if (!pool) return 15;
    memset(again, 0, sizeof again);
    if (heron_net_run_ctx(&in, &out, &w, NULL, heron_threads_context(pool)) != HERON_OK) return 16;
    if (memcmp(again, first, sizeof first) != 0) return 17;
    HeronInputSizes_net in_sizes = { .input = sizeof input };
    HeronOutputSizes_net out_sizes = { .fc_111 = sizeof again };
    HeronWorkspaceSizes_net w_sizes = { .workspace = HERON_NET_WORKSPACE_WORKSPACE_BUFFER_SIZE };
    memset(again, 0, sizeof again);
    if (heron_net_run_checked_ctx(&in, &in_sizes, &out, &out_sizes, &w, &w_sizes, NULL, NULL,
                                  heron_threads_context(pool)) != HERON_OK) return 18;
    if (memcmp(again, first, sizeof first) != 0) return 19;
    w_sizes.workspace -= 1;
    if (heron_net_run_checked_ctx(&in, &in_sizes, &out, &out_sizes, &w, &w_sizes, NULL, NULL,
                                  heron_threads_context(pool)) != HERON_ERROR_SIZE) return 20;
    heron_threads_free(pool);
  }
  free(ws);
  f = fopen(argv[2], "wb");
  if (!f || fwrite(first, 1, sizeof first, f) != sizeof first) return 21;
  fclose(f);
  return 0;
}
"#,
        &input,
        &want,
    );
    assert_float_rule(&got, &model.run_interpreter(std::slice::from_ref(&input)).expect("interpreter")[0])
        .expect("equals the interpreter");
    assert_float_rule(&got, &want).expect("equals ONNX Runtime");
}

#[test]
fn run_ctx_splits_parallel_loops_across_a_c_thread_pool() {
    let tmp = scratch("ctx");
    let dir = tmp.path();
    let (model, input, want) = reference("mobilenet_ish");
    let artifacts = compile_into(&model, dir, "net", pools(&["workspace"], &[]), true);
    assert!(artifacts.header.contains("int32_t heron_net_run_ctx("), "the header declares the entry");
    let got = run_with_threads_library(
        dir,
        r#"#include <stdio.h>
#include <string.h>
#include "net.h"
#include "heron_threads.h"
static float input[HERON_NET_INPUT_SIZE], alone[HERON_NET_FC_111_SIZE], pooled[HERON_NET_FC_111_SIZE];
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb");
  if (!f || fread(input, 1, sizeof input, f) != sizeof input) return 10;
  fclose(f);
  HeronInputs_net in = { .input = input };
  HeronOutputs_net out = { .fc_111 = alone };
  if (heron_net_run(&in, &out, NULL, NULL) != HERON_OK) return 11;
  for (size_t threads = 1; threads <= 3; threads++) {
    HeronThreads* pool = heron_threads_new(threads);
    if (!pool) return 12;
    out.fc_111 = pooled;
    for (int run = 0; run < 3; run++) {
      memset(pooled, 0, sizeof pooled);
      if (heron_net_run_ctx(&in, &out, NULL, NULL, heron_threads_context(pool)) != HERON_OK) return 13;
      if (memcmp(pooled, alone, sizeof alone) != 0) return 14;
    }
    heron_threads_free(pool);
  }
  /* A NULL context runs on this thread; a NULL output is still refused. */
  if (heron_net_run_ctx(&in, &out, NULL, NULL, NULL) != HERON_OK || memcmp(pooled, alone, sizeof alone)) return 15;
  out.fc_111 = NULL;
  if (heron_net_run_ctx(&in, &out, NULL, NULL, heron_threads_context(NULL)) != HERON_ERROR_ARGUMENT) return 16;
  heron_threads_free(NULL);
  f = fopen(argv[2], "wb");
  if (!f || fwrite(alone, 1, sizeof alone, f) != sizeof alone) return 17;
  fclose(f);
  return 0;
}
"#,
        &input,
        &want,
    );
    assert_float_rule(&got, &want).expect("equals ONNX Runtime");
}
