//! Loading a compiled model as a shared library (libloading) and calling its C entry from Rust.
//! The only unsafe code of the crate lives here: opening the library, and the call, after every
//! buffer has been checked against the metadata.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use crate::metadata::{Metadata, PoolSource};
use crate::{AotError, io_error};

type EntryFn = unsafe extern "C" fn(*const *const u8, *const *mut u8, *const *mut u8, *const *const u8) -> i32;

/// A model's shared library, loaded.
pub struct AotLibrary {
    metadata: Metadata,
    dir: PathBuf,
    entry: EntryFn,
    // Keeps `entry` mapped; dropped last.
    _library: libloading::Library,
}

impl std::fmt::Debug for AotLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AotLibrary").field("name", &self.metadata.name).field("dir", &self.dir).finish()
    }
}

/// The one `NAME.json` in `dir`, or the error saying why not.
fn find_metadata(dir: &Path) -> Result<PathBuf, AotError> {
    let entries = std::fs::read_dir(dir).map_err(io_error(dir))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(AotError::Metadata(format!("{}: no NAME.json (run `heron compile` into it)", dir.display()))),
        _ => Err(AotError::Metadata(format!("{}: several .json files; load one by name", dir.display()))),
    }
}

impl AotLibrary {
    /// Opens the model `heron compile` wrote into `dir`: reads `NAME.json`, links `NAME.o` into
    /// `NAME.so` with the system C compiler unless that exists and is newer, and loads it.
    pub fn open(dir: &Path) -> Result<AotLibrary, AotError> {
        let json_path = find_metadata(dir)?;
        let text = std::fs::read_to_string(&json_path).map_err(io_error(&json_path))?;
        let metadata: Metadata =
            serde_json::from_str(&text).map_err(|e| AotError::Metadata(format!("{}: {e}", json_path.display())))?;
        let object = dir.join(format!("{}.o", metadata.name));
        let shared = dir.join(format!("{}.so", metadata.name));
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if modified(&shared).is_none() || modified(&shared) < modified(&object) {
            crate::link::link_shared(&[&object], &shared)?;
        }
        // SAFETY: the library is an object heron compiled: it has no initialisers and exports
        // `metadata.entry` with the C signature `EntryFn` (see `emit::define_entry`).
        let library = unsafe { libloading::Library::new(&shared) }
            .map_err(|e| AotError::Load { path: shared.display().to_string(), reason: e.to_string() })?;
        // SAFETY: as above; the pointer stays valid while `library` lives, which `AotLibrary`
        // guarantees by owning it.
        let entry = unsafe {
            *library
                .get::<EntryFn>(metadata.entry.as_bytes())
                .map_err(|e| AotError::Load { path: shared.display().to_string(), reason: e.to_string() })?
        };
        Ok(AotLibrary { metadata, dir: dir.to_path_buf(), entry, _library: library })
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Contents of every user-provided parameter pool, from the `.params` blobs, in pool order.
    pub fn read_parameters(&self) -> Result<Vec<Vec<u8>>, AotError> {
        self.metadata
            .parameter_pools()
            .filter(|p| p.source == PoolSource::User)
            .map(|p| {
                let file = p.params_file.as_deref().unwrap_or_default();
                let path = self.dir.join(file);
                let bytes = std::fs::read(&path).map_err(io_error(&path))?;
                if bytes.len() as u64 != p.size_bytes {
                    return Err(AotError::Metadata(format!(
                        "{}: {} bytes, the pool '{}' has {}",
                        path.display(),
                        bytes.len(),
                        p.name,
                        p.size_bytes
                    )));
                }
                Ok(bytes)
            })
            .collect()
    }

    /// Runs the model. Buffers in metadata order; `workspaces` / `parameters` hold the
    /// user-provided pools only. Sizes and alignments are checked before the call.
    pub fn run(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        workspaces: &mut [&mut [u8]],
        parameters: &[&[u8]],
    ) -> Result<(), AotError> {
        let m = &self.metadata;
        let user = |kind: &'static str| m.pools.iter().filter(move |p| p.kind == kind && p.source == PoolSource::User);
        let check = |what: &str, got: usize, want: usize| {
            if got == want { Ok(()) } else { Err(AotError::Run(format!("{want} {what} expected, got {got}"))) }
        };
        check("inputs", inputs.len(), m.inputs.len())?;
        check("outputs", outputs.len(), m.outputs.len())?;
        check("workspace pools", workspaces.len(), user("workspace").count())?;
        check("parameter pools", parameters.len(), user("parameter").count())?;
        let fits = |name: &str, ptr: *const u8, len: usize, need: u64, align: u64| {
            if (len as u64) < need {
                Err(AotError::Run(format!("'{name}' needs {need} bytes, got {len}")))
            } else if !(ptr as usize).is_multiple_of(align.max(1) as usize) {
                Err(AotError::Run(format!("'{name}' must be {align}-byte aligned")))
            } else {
                Ok(())
            }
        };
        let elem = |t: &crate::metadata::TensorMeta| t.dtype().map_or(1, |d| d.size_bytes() as u64);
        for (b, t) in inputs.iter().zip(&m.inputs) {
            fits(&t.name, b.as_ptr(), b.len(), t.size_bytes as u64, elem(t))?;
        }
        for (b, t) in outputs.iter().zip(&m.outputs) {
            fits(&t.name, b.as_ptr(), b.len(), t.size_bytes as u64, elem(t))?;
        }
        for (b, p) in workspaces.iter().zip(user("workspace")) {
            fits(&p.name, b.as_ptr(), b.len(), p.size_bytes, p.alignment)?;
        }
        for (b, p) in parameters.iter().zip(user("parameter")) {
            fits(&p.name, b.as_ptr(), b.len(), p.size_bytes, p.alignment)?;
        }
        let ins: Vec<*const u8> = inputs.iter().map(|b| b.as_ptr()).collect();
        let outs: Vec<*mut u8> = outputs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let ws: Vec<*mut u8> = workspaces.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let ps: Vec<*const u8> = parameters.iter().map(|b| b.as_ptr()).collect();
        // An empty struct is passed as NULL, as the header documents.
        let or_null = |v: &[*const u8]| if v.is_empty() { std::ptr::null() } else { v.as_ptr() };
        let or_null_mut = |v: &[*mut u8]| if v.is_empty() { std::ptr::null() } else { v.as_ptr() };
        // SAFETY: every pointer array matches the struct layout of the header (one pointer per
        // field, in metadata order), and every buffer was checked above to be large enough and
        // aligned for what the compiled code reads and writes.
        let code = unsafe { (self.entry)(or_null(&ins), or_null_mut(&outs), or_null_mut(&ws), or_null(&ps)) };
        match code {
            0 => Ok(()),
            1 => Err(AotError::Run("the model rejected a NULL or misaligned pointer".into())),
            2 => Err(AotError::Run("a data-dependent index (e.g. Gather) was out of range".into())),
            other => Err(AotError::Run(format!("the model returned status {other}"))),
        }
    }
}
