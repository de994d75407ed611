//! Compile time and run latency of every reference model on the JIT (`cargo bench -p
//! heron-benches --bench models`); needs `shared/reference/` beside the repository.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use heron_ir::npy::read_npy;
use heron_ir::testing::shared_dir;
use heron_runtime::{CompileOptions, Compiler, Model};

fn models(c: &mut Criterion) {
    let dir = shared_dir().join("reference");
    for name in ["tiny_relu", "mlp", "lenet", "mobilenet_ish", "resnet_ish"] {
        let model = Model::load(dir.join(format!("{name}.onnx"))).expect("reference model");
        let input = read_npy(&dir.join(format!("{name}.input.npy"))).expect("input");
        let compiler = Compiler::new(CompileOptions::default());
        let mut group = c.benchmark_group(name);
        group.sample_size(10).measurement_time(Duration::from_secs(5));
        group.bench_function("compile", |b| b.iter(|| compiler.compile(&model).expect("compile")));
        let compiled = compiler.compile(&model).expect("compile");
        let mut ws = compiled.workspace().unwrap();
        let inputs = [input];
        group.bench_function("run", |b| b.iter(|| compiled.run_with(&mut ws, &inputs).expect("run")));
        group.finish();
    }
}

criterion_group!(benches, models);
criterion_main!(benches);
