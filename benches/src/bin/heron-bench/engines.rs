//! The engines a worker can time, behind one small interface: prepare once, run many times, read
//! the outputs of one more run.

use std::path::Path;

use anyhow::{Context, Result, bail};
use heron_ir::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    Heron,
    Ort,
    Tract,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Heron => "heron",
            EngineKind::Ort => "ort",
            EngineKind::Tract => "tract",
        }
    }

    /// Whether this binary was built with the engine's cargo feature.
    pub fn check_built(self) -> Result<()> {
        let built = match self {
            EngineKind::Heron => true,
            EngineKind::Ort => cfg!(feature = "ort"),
            EngineKind::Tract => cfg!(feature = "tract"),
        };
        if !built {
            bail!(
                "heron-bench was built without the `{0}` feature: rebuild with \
                 `cargo run --release -p heron-benches --features {0} --bin heron-bench -- ...`",
                self.name()
            );
        }
        Ok(())
    }
}

/// One output, as f64 values in row-major order, for comparing engines.
pub struct Output {
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
}

pub trait Runner {
    fn run(&mut self) -> Result<()>;
    /// Runs once more and returns every output.
    fn outputs(&mut self) -> Result<Vec<Output>>;
    fn version(&self) -> String;
    /// The engine's own compile time, where it reports one apart from loading.
    fn compile_ms(&self) -> Option<f64> {
        None
    }
    /// Bytes of planned workspace memory, where the engine plans it.
    fn workspace_bytes(&self) -> Option<u64> {
        None
    }
}

/// Loads and prepares `model` for `engine` with `threads` threads; `inputs` are in the model's
/// input order, named.
pub fn prepare(
    engine: EngineKind,
    model: &Path,
    inputs: &[(String, Tensor)],
    threads: usize,
    ort_lib: Option<&Path>,
) -> Result<Box<dyn Runner>> {
    match engine {
        EngineKind::Heron => Ok(Box::new(HeronRunner::new(model, inputs, threads)?)),
        #[cfg(feature = "ort")]
        EngineKind::Ort => Ok(Box::new(ort_engine::OrtRunner::new(model, inputs, threads, ort_lib)?)),
        #[cfg(feature = "tract")]
        EngineKind::Tract => Ok(Box::new(tract_engine::TractRunner::new(model, inputs, threads)?)),
        // An engine this binary was built without: check_built says which feature it needs.
        #[allow(unreachable_patterns)]
        missing => {
            let _ = ort_lib;
            missing.check_built()?;
            bail!("{} is not built into heron-bench", missing.name())
        }
    }
}

struct HeronRunner {
    compiled: heron_runtime::CompiledModel,
    workspace: heron_runtime::Workspace,
    inputs: Vec<Tensor>,
    /// Written in place by every timed run (`run_into`), as ONNX Runtime's arena holds its
    /// outputs from run to run.
    outputs: Vec<Tensor>,
}

impl HeronRunner {
    fn new(model: &Path, inputs: &[(String, Tensor)], threads: usize) -> Result<HeronRunner> {
        // The inputs' shapes bind any symbolic dimensions.
        let options = heron_ir::onnx::ImportOptions {
            input_shapes: inputs.iter().map(|(n, t)| (n.clone(), t.shape().to_vec())).collect(),
            ..Default::default()
        }
        .reading_data_beside(model);
        let model = heron_runtime::Model::load_with(model, &options)?;
        let inputs = model.bind_inputs(inputs.iter().map(|(n, t)| (Some(n.clone()), t.clone())).collect())?;
        let options = heron_runtime::CompileOptions { threads, ..Default::default() };
        let compiled = heron_runtime::Compiler::new(options).compile(&model)?;
        let mut workspace = compiled.workspace()?;
        let outputs = compiled.run_with(&mut workspace, &inputs)?;
        Ok(HeronRunner { compiled, workspace, inputs, outputs })
    }
}

impl Runner for HeronRunner {
    fn run(&mut self) -> Result<()> {
        self.compiled.run_into(&mut self.workspace, &self.inputs, &mut self.outputs)?;
        Ok(())
    }

    fn outputs(&mut self) -> Result<Vec<Output>> {
        let outputs = self.compiled.run_with(&mut self.workspace, &self.inputs)?;
        Ok(outputs.iter().map(|t| Output { shape: t.shape().to_vec(), values: t.to_f64_vec() }).collect())
    }

    fn version(&self) -> String {
        let kernels = heron_jit::kernels::KernelConfig::host(1).map_or("off", |k| k.isa.name());
        format!("{} (kernels: {kernels})", env!("CARGO_PKG_VERSION"))
    }

    fn compile_ms(&self) -> Option<f64> {
        Some(self.compiled.stats().total.as_secs_f64() * 1e3)
    }

    fn workspace_bytes(&self) -> Option<u64> {
        u64::try_from(self.workspace.pool_bytes()).ok()
    }
}

#[cfg_attr(not(any(feature = "ort", feature = "tract")), allow(unused_macros))]
/// Calls `$make::<T>` with the Rust element type of a Heron dtype the peers accept as input.
macro_rules! by_dtype {
    ($dtype:expr, $make:ident, $($arg:expr),*) => {
        match $dtype {
            heron_ir::DType::F32 => $make::<f32>($($arg),*),
            heron_ir::DType::F64 => $make::<f64>($($arg),*),
            heron_ir::DType::I64 => $make::<i64>($($arg),*),
            heron_ir::DType::I32 => $make::<i32>($($arg),*),
            heron_ir::DType::I8 => $make::<i8>($($arg),*),
            heron_ir::DType::U8 => $make::<u8>($($arg),*),
            heron_ir::DType::Bool => $make::<bool>($($arg),*),
            other => anyhow::bail!("inputs of type {other} are not passed to the peers"),
        }
    };
}

/// A Heron tensor's elements, in row-major order.
#[cfg_attr(not(any(feature = "ort", feature = "tract")), allow(dead_code))]
fn elements<T: heron_ir::Element + Clone>(t: &Tensor) -> Result<Vec<T>> {
    let array = t.as_array::<T>().with_context(|| format!("a {} tensor", t.dtype()))?;
    Ok(array.iter().cloned().collect())
}

#[cfg(feature = "ort")]
mod ort_engine {
    use std::path::{Path, PathBuf};

    use anyhow::{Context, Result, anyhow, bail};
    use heron_ir::tensor::Tensor;
    use ort::session::Session;
    use ort::value::{DynValue, TensorElementType, ValueType};

    use super::{Output, Runner, elements};

    pub struct OrtRunner {
        session: Session,
        inputs: Vec<DynValue>,
        version: String,
    }

    impl OrtRunner {
        pub fn new(model: &Path, inputs: &[(String, Tensor)], threads: usize, lib: Option<&Path>) -> Result<OrtRunner> {
            use ort::session::builder::GraphOptimizationLevel;
            let lib: PathBuf = match lib {
                Some(l) => l.to_path_buf(),
                None => std::env::var_os("ORT_DYLIB_PATH")
                    .map(PathBuf::from)
                    .context("ONNX Runtime's library is not given: set ORT_DYLIB_PATH or pass --ort-lib")?,
            };
            let env = ort::init_from(&lib)
                .map_err(|e| anyhow!("loading ONNX Runtime from {}: {e}", lib.display()))?
                .with_name("heron-bench")
                .with_telemetry(false)
                .build()
                .map_err(|e| anyhow!("ONNX Runtime environment: {e}"))?;
            // ORT's defaults for a latency run: every graph optimization, sequential execution,
            // `threads` intra-op threads (spinning and arenas as shipped).
            let session = Session::builder(&env)
                .and_then(|b| b.with_optimization_level(GraphOptimizationLevel::All).map_err(Into::into))
                .and_then(|b| b.with_intra_threads(threads).map_err(Into::into))
                .and_then(|b| b.with_inter_threads(1).map_err(Into::into))
                .and_then(|b| b.with_parallel_execution(false).map_err(Into::into))
                .map_err(|e: ort::Error| anyhow!("ONNX Runtime session options: {e}"))?
                .commit_from_file(model)
                .map_err(|e| anyhow!("loading {} in ONNX Runtime: {e}", model.display()))?;
            // Positional inputs, in the session's order.
            let inputs = session
                .inputs()
                .iter()
                .map(|outlet| {
                    let (_, t) = inputs
                        .iter()
                        .find(|(n, _)| n == outlet.name())
                        .with_context(|| format!("no input named {:?}", outlet.name()))?;
                    by_dtype!(t.dtype(), ort_value, t)
                })
                .collect::<Result<Vec<_>>>()?;
            // The wheel's library is libonnxruntime.so.X.Y.Z.
            let file = lib.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            let version = file.split_once(".so.").map_or(file.clone(), |(_, v)| v.to_string());
            Ok(OrtRunner { session, inputs, version })
        }
    }

    fn ort_value<T>(t: &Tensor) -> Result<DynValue>
    where
        T: heron_ir::Element + Clone + ort::value::PrimitiveTensorElementType + std::fmt::Debug + 'static,
    {
        let shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
        let value = ort::value::Tensor::from_array((shape, elements::<T>(t)?))
            .map_err(|e| anyhow!("ONNX Runtime input tensor: {e}"))?;
        Ok(value.into_dyn())
    }

    impl Runner for OrtRunner {
        fn run(&mut self) -> Result<()> {
            self.session
                .run(self.inputs.as_slice().iter().map(Into::into).collect::<Vec<_>>().as_slice())
                .map_err(|e| anyhow!("ONNX Runtime run: {e}"))?;
            Ok(())
        }

        fn outputs(&mut self) -> Result<Vec<Output>> {
            let values: Vec<_> = self.inputs.iter().map(Into::into).collect();
            let outputs = self.session.run(values.as_slice()).map_err(|e| anyhow!("ONNX Runtime run: {e}"))?;
            let mut result = Vec::new();
            for (_, value) in outputs.iter() {
                let ty = match value.dtype() {
                    ValueType::Tensor { ty, .. } => *ty,
                    other => bail!("ONNX Runtime returned a non-tensor output ({other:?})"),
                };
                macro_rules! extract {
                    ($t:ty) => {{
                        let (shape, data) =
                            value.try_extract_tensor::<$t>().map_err(|e| anyhow!("ONNX Runtime output: {e}"))?;
                        Output {
                            shape: shape.iter().map(|&d| d as usize).collect(),
                            values: data.iter().map(|&v| v as f64).collect(),
                        }
                    }};
                }
                result.push(match ty {
                    TensorElementType::Float32 => extract!(f32),
                    TensorElementType::Float64 => extract!(f64),
                    TensorElementType::Int64 => extract!(i64),
                    TensorElementType::Int32 => extract!(i32),
                    TensorElementType::Int8 => extract!(i8),
                    TensorElementType::Uint8 => extract!(u8),
                    other => bail!("ONNX Runtime output of type {other:?} is not compared"),
                });
            }
            Ok(result)
        }

        fn version(&self) -> String {
            self.version.clone()
        }
    }
}

#[cfg(feature = "tract")]
mod tract_engine {
    use std::path::Path;

    use anyhow::{Context, Result};
    use heron_ir::tensor::Tensor as HeronTensor;
    use tract_onnx::prelude::*;

    use super::{Output, Runner, elements};

    /// The tract-onnx version pinned in benches/Cargo.toml.
    const TRACT_VERSION: &str = "0.23.9";

    pub struct TractRunner {
        state: TypedSimpleState,
        inputs: TVec<TValue>,
    }

    impl TractRunner {
        pub fn new(model: &Path, inputs: &[(String, HeronTensor)], threads: usize) -> Result<TractRunner> {
            if threads > 1 {
                multithread::set_default_executor(multithread::Executor::multithread(threads));
            }
            let mut graph =
                onnx().model_for_path(model).with_context(|| format!("loading {} in tract", model.display()))?;
            let mut values = TVec::new();
            for (k, (_, t)) in inputs.iter().enumerate() {
                let tensor: Tensor = by_dtype!(t.dtype(), tract_tensor, t)?;
                graph = graph.with_input_fact(k, InferenceFact::dt_shape(tensor.datum_type(), tensor.shape()))?;
                values.push(tensor.into_tvalue());
            }
            let plan = graph.into_optimized()?.into_runnable()?;
            Ok(TractRunner { state: plan.spawn()?, inputs: values })
        }
    }

    fn tract_tensor<T: heron_ir::Element + Clone + Datum>(t: &HeronTensor) -> Result<Tensor> {
        Ok(tract_ndarray::ArrayD::from_shape_vec(t.shape().to_vec(), elements::<T>(t)?)?.into_tensor())
    }

    impl Runner for TractRunner {
        fn run(&mut self) -> Result<()> {
            self.state.run(self.inputs.clone())?;
            Ok(())
        }

        fn outputs(&mut self) -> Result<Vec<Output>> {
            let outputs = self.state.run(self.inputs.clone())?;
            outputs
                .iter()
                .map(|o| {
                    let values = o.cast_to::<f64>()?;
                    Ok(Output {
                        shape: o.shape().to_vec(),
                        values: values.to_plain_array_view::<f64>()?.iter().copied().collect(),
                    })
                })
                .collect()
        }

        fn version(&self) -> String {
            TRACT_VERSION.to_string()
        }
    }
}
