//! Models with symbolic dimensions (`batch`, `sequence`, ...): compiled once per distinct set of
//! input shapes, on first use, and cached.
//!
//! Compiled code has fixed shapes (that is what lets every buffer sit at a planned offset), so
//! a model exported with `dynamic_axes` is specialized: the shapes of the inputs a run is given
//! bind the symbolic dimensions, the model is imported and compiled for them, and the result is
//! kept for the next run with the same shapes. The cache holds at most
//! [`DynamicModel::CACHE_CAPACITY`] specializations (the oldest is dropped first).

use std::path::Path;
use std::sync::{Arc, Mutex};

use heron_ir::Tensor;
use heron_ir::onnx::{DeclaredInput, Dim, ImportError, ImportOptions, declared_inputs, import_model};

use crate::{CompileOptions, CompiledModel, Compiler, Model, RuntimeError};

/// Compiled specializations by their input shapes, oldest first.
type Specializations = Vec<(Vec<Vec<usize>>, Arc<CompiledModel>)>;

/// A model file whose inputs may have symbolic dimensions, specialized per input shape.
pub struct DynamicModel {
    name: String,
    bytes: Vec<u8>,
    declared: Vec<DeclaredInput>,
    import: ImportOptions,
    compiler: Compiler,
    cache: Mutex<Specializations>,
}

impl DynamicModel {
    /// Specializations kept at once.
    pub const CACHE_CAPACITY: usize = 16;

    /// Reads an ONNX file; `import` supplies limits (and may pin dimensions with `dims`),
    /// `compile` the options every specialization is compiled with.
    pub fn load(
        path: impl AsRef<Path>,
        import: ImportOptions,
        compile: CompileOptions,
    ) -> Result<DynamicModel, RuntimeError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| ImportError::Io { path: path.display().to_string(), reason: e.to_string() })?;
        let declared = declared_inputs(&bytes)?;
        let name = path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
        let import = import.reading_data_beside(path);
        Ok(DynamicModel {
            name,
            bytes,
            declared,
            import,
            compiler: Compiler::new(compile),
            cache: Mutex::new(Vec::new()),
        })
    }

    /// The graph inputs as declared, symbolic dimensions by name.
    pub fn inputs(&self) -> &[DeclaredInput] {
        &self.declared
    }

    /// Whether any input has a symbolic dimension.
    pub fn is_dynamic(&self) -> bool {
        self.declared.iter().any(|i| i.dims.iter().any(|d| matches!(d, Dim::Symbolic(_))))
    }

    /// The model imported for these input shapes (in input order), not compiled.
    pub fn model_for(&self, shapes: &[Vec<usize>]) -> Result<Model, RuntimeError> {
        if shapes.len() != self.declared.len() {
            return Err(RuntimeError::InputCount {
                expected: self.declared.len(),
                got: shapes.len(),
                names: self.declared.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", "),
            });
        }
        let mut options = self.import.clone();
        options.input_shapes = self.declared.iter().map(|i| i.name.clone()).zip(shapes.iter().cloned()).collect();
        Model::from_graph(self.name.clone(), import_model(&self.bytes, &options)?)
    }

    /// The model compiled for these input shapes: from the cache, or compiled now and cached.
    pub fn specialize(&self, shapes: &[Vec<usize>]) -> Result<Arc<CompiledModel>, RuntimeError> {
        if let Some((_, c)) = self.lock().iter().find(|(s, _)| s == shapes) {
            return Ok(c.clone());
        }
        // Compiled outside the lock: other shapes keep running meanwhile.
        let compiled = Arc::new(self.compiler.compile(&self.model_for(shapes)?)?);
        let mut cache = self.lock();
        if let Some((_, c)) = cache.iter().find(|(s, _)| s == shapes) {
            return Ok(c.clone());
        }
        if cache.len() == Self::CACHE_CAPACITY {
            cache.remove(0);
        }
        cache.push((shapes.to_vec(), compiled.clone()));
        Ok(compiled)
    }

    /// Runs on `inputs` (in input order), specializing for their shapes.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
        self.specialize(&shapes)?.run(inputs)
    }

    /// How many specializations the cache holds.
    pub fn cached(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Specializations> {
        // A panic while holding the lock leaves the cache consistent (a push or a remove).
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}
