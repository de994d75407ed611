//! The `heron` Python package's native module (`heron._heron`): load an ONNX model, compile
//! it (JIT, interpreter or VTA offload), run it on numpy arrays, compile it ahead of time,
//! quantize it. The Python-facing documentation lives in the docstrings below and in
//! `python/heron/_heron.pyi`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use heron_runtime::{
    CompileOptions, CompiledModel, Compiler, DType, Engine, GuardPages, ImportOptions, Model, RuntimeError, Tensor,
    TensorInfo,
};
use numpy::ndarray::ArrayD;
use numpy::{Element, IntoPyArray, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

pyo3::create_exception!(
    heron,
    HeronError,
    PyException,
    "An error from Heron: a model it cannot load or compile, inputs that do not match, a run that failed."
);

fn heron_error(e: impl std::fmt::Display) -> PyErr {
    HeronError::new_err(e.to_string())
}

/// numpy's name for a dtype.
fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "float16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
    }
}

/// An input or output of a model: its name, shape and numpy dtype.
#[pyclass(frozen, module = "heron", name = "TensorInfo")]
struct PyTensorInfo {
    #[pyo3(get)]
    name: String,
    shape: Vec<usize>,
    dtype: DType,
}

#[pymethods]
impl PyTensorInfo {
    /// The shape, a tuple of ints.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The element type, a `numpy.dtype`.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("numpy")?.getattr("dtype")?.call1((numpy_name(self.dtype),))
    }

    fn __repr__(&self) -> String {
        format!("TensorInfo(name={:?}, shape={:?}, dtype={})", self.name, self.shape, numpy_name(self.dtype))
    }
}

fn infos(list: &[TensorInfo]) -> Vec<PyTensorInfo> {
    list.iter().map(|i| PyTensorInfo { name: i.name.clone(), shape: i.ty.shape.clone(), dtype: i.ty.dtype }).collect()
}

/// A numpy array (any layout) as a tensor of element type `T`, if it is one.
fn tensor_of<T: Element + Clone>(array: &Bound<'_, PyAny>) -> Option<ArrayD<T>> {
    let array = array.cast::<PyArrayDyn<T>>().ok()?;
    Some(array.readonly().as_array().to_owned())
}

/// `value` as a tensor: a numpy array of a supported dtype, or anything `numpy.asarray` takes
/// (converted to `dtype`, the input's, when known).
fn to_tensor(value: &Bound<'_, PyAny>, dtype: Option<DType>) -> PyResult<Tensor> {
    let py = value.py();
    let array = if value.cast::<PyUntypedArray>().is_ok() {
        value.clone()
    } else {
        let asarray = py.import("numpy")?.getattr("asarray")?;
        match dtype {
            Some(d) => asarray.call1((value, numpy_name(d)))?,
            None => asarray.call1((value,))?,
        }
    };
    macro_rules! try_dtypes {
        ($($t:ty => $variant:ident),*) => {
            $(if let Some(a) = tensor_of::<$t>(&array) { return Ok(Tensor::$variant(a)); })*
        };
    }
    try_dtypes!(f32 => F32, f64 => F64, half::f16 => F16, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
        u8 => U8, u16 => U16, u32 => U32, u64 => U64, bool => Bool);
    let dtype = array.cast::<PyUntypedArray>()?.dtype();
    Err(PyTypeError::new_err(format!(
        "heron cannot take arrays of dtype {dtype} (supported: float16/32/64, int8-64, uint8-64, bool)"
    )))
}

/// Outputs as numpy arrays; each takes over its tensor's buffer (no copy).
fn to_numpy<'py>(py: Python<'py>, t: Tensor) -> Bound<'py, PyAny> {
    match t {
        Tensor::F16(a) => a.into_pyarray(py).into_any(),
        Tensor::F32(a) => a.into_pyarray(py).into_any(),
        Tensor::F64(a) => a.into_pyarray(py).into_any(),
        Tensor::I8(a) => a.into_pyarray(py).into_any(),
        Tensor::I16(a) => a.into_pyarray(py).into_any(),
        Tensor::I32(a) => a.into_pyarray(py).into_any(),
        Tensor::I64(a) => a.into_pyarray(py).into_any(),
        Tensor::U8(a) => a.into_pyarray(py).into_any(),
        Tensor::U16(a) => a.into_pyarray(py).into_any(),
        Tensor::U32(a) => a.into_pyarray(py).into_any(),
        Tensor::U64(a) => a.into_pyarray(py).into_any(),
        Tensor::Bool(a) => a.into_pyarray(py).into_any(),
    }
}

/// Inputs given as a dict by name, a list or tuple in input order, or (for a model with one
/// input) a single array.
fn given_inputs(inputs: &Bound<'_, PyAny>, infos: &[TensorInfo]) -> PyResult<Vec<(Option<String>, Tensor)>> {
    let dtype_of = |name: &str| infos.iter().find(|i| i.name == name).map(|i| i.ty.dtype);
    if let Ok(dict) = inputs.cast::<PyDict>() {
        let mut given = Vec::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            let name: String =
                key.extract().map_err(|_| PyTypeError::new_err(format!("input names are strings, got {key:?}")))?;
            let t = to_tensor(&value, dtype_of(&name))?;
            given.push((Some(name), t));
        }
        return Ok(given);
    }
    if inputs.cast::<PyList>().is_ok() || inputs.cast::<PyTuple>().is_ok() {
        let mut given = Vec::new();
        for (i, value) in inputs.try_iter()?.enumerate() {
            given.push((None, to_tensor(&value?, infos.get(i).map(|i| i.ty.dtype))?));
        }
        return Ok(given);
    }
    if inputs.cast::<PyUntypedArray>().is_ok() {
        return Ok(vec![(None, to_tensor(inputs, None)?)]);
    }
    Err(PyTypeError::new_err(format!(
        "inputs are a dict {{name: array}}, a list of arrays in input order, or one array; got {}",
        inputs.get_type().name()?
    )))
}

fn outputs_dict<'py>(py: Python<'py>, infos: &[TensorInfo], tensors: Vec<Tensor>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (info, t) in infos.iter().zip(tensors) {
        dict.set_item(&info.name, to_numpy(py, t))?;
    }
    Ok(dict)
}

/// An imported ONNX model, verified, ready to compile. Made by `heron.load`.
#[pyclass(frozen, module = "heron", name = "Model")]
struct PyModel {
    model: Arc<Model>,
}

fn engine_of(name: &str) -> PyResult<Engine> {
    match name {
        "jit" => Ok(Engine::Jit),
        "interp" | "interpreter" => Ok(Engine::Interpreter),
        "aot" => Ok(Engine::Aot),
        other => Err(PyValueError::new_err(format!("engine must be 'jit', 'interp' or 'aot', not {other:?}"))),
    }
}

#[pymethods]
impl PyModel {
    /// The model's name (its file name without the extension).
    #[getter]
    fn name(&self) -> &str {
        self.model.name()
    }

    /// The inputs, in order: a list of `TensorInfo`.
    #[getter]
    fn inputs(&self) -> Vec<PyTensorInfo> {
        infos(&self.model.inputs())
    }

    /// The outputs, in order: a list of `TensorInfo`.
    #[getter]
    fn outputs(&self) -> Vec<PyTensorInfo> {
        infos(&self.model.outputs())
    }

    /// Compiles the model.
    ///
    /// threads: threads a run uses (default: the machine's physical cores); results are the
    ///     same bits on any count.
    /// target: "cpu", or "vta" to offload the int8 regions of a quantized model to VTA (the
    ///     simulator unless HERON_VTA_DRIVER names a driver).
    /// engine: "jit" (Cranelift machine code), "interp" (the reference interpreter) or "aot"
    ///     (an object compiled ahead of time, linked and loaded in-process).
    /// kernels: call the precompiled AVX-512/AVX2 kernels where they fit (False: generated
    ///     code only).
    /// vta_config: a VTA hardware configuration file (JSON) for target="vta".
    /// guard_pages: "off", "end" or "start": place every pool between guard pages.
    #[pyo3(signature = (*, threads=None, target="cpu", engine="jit", kernels=true, vta_config=None, guard_pages=None))]
    #[allow(clippy::too_many_arguments)]
    fn compile(
        &self,
        py: Python<'_>,
        threads: Option<usize>,
        target: &str,
        engine: &str,
        kernels: bool,
        vta_config: Option<PathBuf>,
        guard_pages: Option<&str>,
    ) -> PyResult<PyCompiledModel> {
        let mut options = CompileOptions { engine: engine_of(engine)?, kernels, ..CompileOptions::default() };
        if let Some(n) = threads {
            if n == 0 {
                return Err(PyValueError::new_err("threads must be at least 1"));
            }
            options.threads = n;
        }
        options.vta = match (target, vta_config) {
            ("cpu", None) => None,
            ("cpu", Some(_)) => return Err(PyValueError::new_err("vta_config needs target='vta'")),
            ("vta", None) => Some(heron_runtime::HwConfig::default()),
            ("vta", Some(path)) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| heron_error(format!("cannot read {}: {e}", path.display())))?;
                Some(heron_runtime::vta::hw_config_from_json(&text).map_err(heron_error)?)
            }
            (other, _) => return Err(PyValueError::new_err(format!("target must be 'cpu' or 'vta', not {other:?}"))),
        };
        if let Some(g) = guard_pages {
            options.guard_pages = GuardPages::parse(g).ok_or_else(|| {
                PyValueError::new_err(format!("guard_pages must be 'off', 'end' or 'start', not {g:?}"))
            })?;
        }
        let model = Arc::clone(&self.model);
        let compiled = py.detach(move || Compiler::new(options).compile(&model)).map_err(heron_error)?;
        Ok(PyCompiledModel::new(compiled))
    }

    /// Runs the model on the reference interpreter (the oracle): inputs as for
    /// `CompiledModel.run`, outputs a dict of numpy arrays by name.
    fn run_interpreter<'py>(&self, py: Python<'py>, inputs: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let given = given_inputs(inputs, &self.model.inputs())?;
        let model = Arc::clone(&self.model);
        let outputs = py
            .detach(move || -> Result<_, RuntimeError> { model.run_interpreter(&model.bind_inputs(given)?) })
            .map_err(heron_error)?;
        outputs_dict(py, &self.model.outputs(), outputs)
    }

    fn __repr__(&self) -> String {
        let list =
            |l: Vec<TensorInfo>| l.iter().map(|i| format!("{}: {}", i.name, i.ty)).collect::<Vec<_>>().join(", ");
        format!(
            "Model({:?}, inputs=[{}], outputs=[{}])",
            self.model.name(),
            list(self.model.inputs()),
            list(self.model.outputs())
        )
    }
}

/// A compiled model. `run` may be called from several Python threads at once: each call takes
/// a workspace (its memory pools) from a shared stack, or makes one, and runs without the GIL.
#[pyclass(frozen, module = "heron", name = "CompiledModel")]
struct PyCompiledModel {
    compiled: Arc<CompiledModel>,
    /// Workspaces not in use; a run takes one and puts it back.
    workspaces: Arc<Mutex<Vec<heron_runtime::Workspace>>>,
}

impl PyCompiledModel {
    fn new(compiled: CompiledModel) -> PyCompiledModel {
        PyCompiledModel { compiled: Arc::new(compiled), workspaces: Arc::default() }
    }
}

#[pymethods]
impl PyCompiledModel {
    /// The model's name.
    #[getter]
    fn name(&self) -> &str {
        self.compiled.name()
    }

    /// The inputs, in order: a list of `TensorInfo`.
    #[getter]
    fn inputs(&self) -> Vec<PyTensorInfo> {
        infos(self.compiled.inputs())
    }

    /// The outputs, in order: a list of `TensorInfo`.
    #[getter]
    fn outputs(&self) -> Vec<PyTensorInfo> {
        infos(self.compiled.outputs())
    }

    /// How it runs: "jit", "interp" or "aot".
    #[getter]
    fn engine(&self) -> &'static str {
        match self.compiled.engine() {
            Engine::Jit => "jit",
            Engine::Interpreter => "interp",
            Engine::Aot => "aot",
        }
    }

    /// Milliseconds compiling took.
    #[getter]
    fn compile_ms(&self) -> f64 {
        self.compiled.stats().total.as_secs_f64() * 1e3
    }

    /// Bytes of each planned pool, by name (empty for the interpreter).
    #[getter]
    fn pools(&self) -> HashMap<String, u64> {
        self.compiled.pools().iter().map(|p| (p.name.clone(), p.size_bytes)).collect()
    }

    /// Runs the model. `inputs`: a dict {name: array}, a list of arrays in input order, or one
    /// array for a one-input model; arrays must have the input's dtype and shape (lists and
    /// scalars are converted to the input's dtype). Returns a dict {output name: numpy array}.
    fn run<'py>(&self, py: Python<'py>, inputs: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let given = given_inputs(inputs, self.compiled.inputs())?;
        let (compiled, workspaces) = (Arc::clone(&self.compiled), Arc::clone(&self.workspaces));
        let outputs = py
            .detach(move || -> Result<_, RuntimeError> {
                let bound = compiled.bind_inputs(given)?;
                let idle = workspaces.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let mut ws = match idle {
                    Some(ws) => ws,
                    None => compiled.workspace()?,
                };
                let outputs = compiled.run_with(&mut ws, &bound);
                workspaces.lock().unwrap_or_else(|p| p.into_inner()).push(ws);
                outputs
            })
            .map_err(heron_error)?;
        outputs_dict(py, self.compiled.outputs(), outputs)
    }

    fn __repr__(&self) -> String {
        format!("CompiledModel({:?}, engine={})", self.compiled.name(), self.engine())
    }
}

/// Loads an ONNX model.
///
/// input_shapes: shapes for inputs by name ({"x": [4, 3, 224, 224]}): they bind the inputs'
///     symbolic dimensions.
/// dims: values of symbolic dimensions by name ({"batch": 4}).
#[pyfunction]
#[pyo3(signature = (path, *, input_shapes=None, dims=None))]
fn load(
    py: Python<'_>,
    path: PathBuf,
    input_shapes: Option<HashMap<String, Vec<usize>>>,
    dims: Option<HashMap<String, usize>>,
) -> PyResult<PyModel> {
    let options = ImportOptions {
        input_shapes: input_shapes.unwrap_or_default(),
        dims: dims.unwrap_or_default(),
        ..ImportOptions::default()
    };
    let model = py.detach(|| Model::load_with(&path, &options)).map_err(heron_error)?;
    Ok(PyModel { model: Arc::new(model) })
}

/// Loads a model compiled ahead of time into `dir` (by `heron compile` or `compile_aot`) and
/// returns it ready to run.
#[pyfunction]
fn load_aot(py: Python<'_>, dir: PathBuf) -> PyResult<PyCompiledModel> {
    let compiled = py.detach(|| Model::load_aot(&dir)).map_err(heron_error)?;
    Ok(PyCompiledModel::new(compiled))
}

/// Compiles `model` ahead of time into `out_dir`: NAME.o (an ELF object), NAME.h (its C
/// header), NAME.json and parameter blobs. Returns a dict with the written "object" and
/// "header" paths and the "link" command line for a C program `prog.c`.
///
/// name: the C name (default: the model's name).
/// kernels: call the precompiled kernels (then link the static library the link line names).
/// threads: tasks the kernels split into (with kernels).
/// embed_workspace: the workspace pool becomes a static buffer inside the object.
#[pyfunction]
#[pyo3(signature = (model, out_dir, *, name=None, kernels=false, threads=1, embed_workspace=false))]
fn compile_aot(
    py: Python<'_>,
    model: &PyModel,
    out_dir: PathBuf,
    name: Option<String>,
    kernels: bool,
    threads: usize,
    embed_workspace: bool,
) -> PyResult<HashMap<String, String>> {
    let model = Arc::clone(&model.model);
    py.detach(move || -> Result<_, RuntimeError> {
        let options = CompileOptions { threads: threads.max(1), ..CompileOptions::default() };
        let mut aot = heron_runtime::AotOptions::new(name.unwrap_or_else(|| model.name().to_string()));
        aot.kernels = kernels;
        aot.embed_workspace = embed_workspace;
        let artifacts = Compiler::new(options).compile_aot(&model, &aot)?;
        artifacts.write(&out_dir)?;
        let base = &artifacts.metadata.name;
        let path = |ext: &str| out_dir.join(format!("{base}.{ext}")).display().to_string();
        Ok(HashMap::from([
            ("object".to_string(), path("o")),
            ("header".to_string(), path("h")),
            ("link".to_string(), artifacts.link_line(&out_dir)),
        ]))
    })
    .map_err(heron_error)
}

/// Quantizes an ONNX model to int8 (QuantizeLinear/DequantizeLinear pairs) and writes it to
/// `output`. `calibration`: samples, each a dict {name: array} or a list of arrays in input
/// order; without samples, `global_scale` sets every activation's range. Returns a dict of
/// what was quantized ("anchors", "activations", "left_float").
///
/// per_channel: weight scales per output channel (opset 13 or newer).
/// percentile: calibrate activation ranges at this percentile instead of the maximum.
/// skip: names of nodes to leave in float.
/// scales: "pow2" (powers of two, as VTA needs) or "float".
#[pyfunction]
#[pyo3(signature = (path, output, calibration=None, *, per_channel=false, percentile=None, skip=Vec::new(), global_scale=None, scales="pow2"))]
#[allow(clippy::too_many_arguments)]
fn quantize<'py>(
    py: Python<'py>,
    path: PathBuf,
    output: PathBuf,
    calibration: Option<Vec<Bound<'py, PyAny>>>,
    per_channel: bool,
    percentile: Option<f64>,
    skip: Vec<String>,
    global_scale: Option<f32>,
    scales: &str,
) -> PyResult<Bound<'py, PyDict>> {
    use heron_runtime::quantize::{Calibration, QuantizeOptions, ScaleKind};
    let model = py.detach(|| Model::load(&path)).map_err(heron_error)?;
    let infos = model.inputs();
    let mut samples = Vec::new();
    for sample in calibration.unwrap_or_default() {
        let given = given_inputs(&sample, &infos)?;
        samples.push(model.bind_inputs(given).map_err(heron_error)?);
    }
    let options = QuantizeOptions {
        calibration: percentile.map_or(Calibration::MaxAbs, Calibration::Percentile),
        per_channel,
        skip,
        global_scale,
        scales: match scales {
            "pow2" => ScaleKind::Pow2,
            "float" => ScaleKind::Float,
            other => return Err(PyValueError::new_err(format!("scales must be 'pow2' or 'float', not {other:?}"))),
        },
    };
    let report = py
        .detach(|| -> Result<_, String> {
            let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let (quantized, report) =
                heron_runtime::quantize::quantize_model(&bytes, &samples, &options).map_err(|e| e.to_string())?;
            std::fs::write(&output, quantized).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
            Ok(report)
        })
        .map_err(heron_error)?;
    let dict = PyDict::new(py);
    dict.set_item("anchors", &report.anchors)?;
    dict.set_item("activations", &report.activations)?;
    dict.set_item("left_float", &report.left_float)?;
    Ok(dict)
}

/// Heron: a small-footprint ML compiler and runtime. Load an ONNX model with `heron.load`,
/// compile it with `Model.compile`, run it with `CompiledModel.run`.
#[pymodule]
fn _heron(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("HeronError", m.py().get_type::<HeronError>())?;
    m.add_class::<PyTensorInfo>()?;
    m.add_class::<PyModel>()?;
    m.add_class::<PyCompiledModel>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(load_aot, m)?)?;
    m.add_function(wrap_pyfunction!(compile_aot, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    Ok(())
}
