//! Loading a compiled model as a shared library (libloading) and calling its C entry from Rust.
//! The only unsafe code of the crate lives here: opening the library, and the call, after every
//! buffer has been checked against the metadata.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use heron_jit::threads::{RunContext, ThreadPool};

use crate::metadata::{Metadata, PoolMeta, PoolRole, TensorMeta};
use crate::{AotError, io_error};

/// `heron_<name>_run_checked_ctx`: each pointer struct followed by its sizes struct, then the
/// run context.
type EntryFn = unsafe extern "C" fn(
    *const *const u8,
    *const usize,
    *const *mut u8,
    *const usize,
    *const *mut u8,
    *const usize,
    *const *const u8,
    *const usize,
    *const RunContext,
) -> i32;

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
        _ => Err(AotError::Metadata(format!(
            "{}: several .json files; give the model's own (`heron run {}/NAME.json`)",
            dir.display(),
            dir.display()
        ))),
    }
}

impl AotLibrary {
    /// Opens the model `heron compile` wrote into a folder (`path`, holding one `NAME.json`, or
    /// that `NAME.json` itself): reads the metadata, links `NAME.o` into `NAME.so` with the
    /// system C compiler unless that exists and is newer, and loads it.
    pub fn open(path: &Path) -> Result<AotLibrary, AotError> {
        let (dir, json_path) = if path.is_file() {
            (path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")), path.to_path_buf())
        } else {
            (path, find_metadata(path)?)
        };
        let text = std::fs::read_to_string(&json_path).map_err(io_error(&json_path))?;
        let metadata: Metadata =
            serde_json::from_str(&text).map_err(|e| AotError::Metadata(format!("{}: {e}", json_path.display())))?;
        let object = dir.join(format!("{}.o", metadata.name));
        let shared = dir.join(format!("{}.so", metadata.name));
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if modified(&shared).is_none() || modified(&shared) < modified(&object) {
            crate::link::link_shared(&[&object], &shared)?;
        }
        if metadata.entry_checked_ctx.is_empty() {
            return Err(AotError::Metadata(format!(
                "{}: no entry_checked_ctx (compiled by an older heron; run `heron compile` again)",
                json_path.display()
            )));
        }
        // SAFETY: the library is an object heron compiled: it has no initialisers and exports
        // `metadata.entry_checked_ctx` with the C signature `EntryFn` (see `emit::define_entry`).
        let library = unsafe { libloading::Library::new(&shared) }
            .map_err(|e| AotError::Load { path: shared.display().to_string(), reason: e.to_string() })?;
        // SAFETY: as above; the pointer stays valid while `library` lives, which `AotLibrary`
        // guarantees by owning it.
        let entry = unsafe {
            *library
                .get::<EntryFn>(metadata.entry_checked_ctx.as_bytes())
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
            .user_pools(PoolRole::Parameter)
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

    /// Runs the model, its parallel loops on `threads` (whose context also provides the
    /// kernels an object compiled with them calls; `None`: the calling thread, no routines).
    /// Buffers in metadata order; `workspaces` / `parameters` are the user-provided pools
    /// only. Counts, sizes and alignments are checked before the call, and the call goes
    /// through the checked entry, so the object checks every size itself too (whatever the
    /// metadata file says). Nothing is allocated for up to 32 buffers of each kind.
    pub fn run<'a>(
        &self,
        inputs: impl IntoIterator<Item = &'a [u8]>,
        outputs: impl IntoIterator<Item = &'a mut [u8]>,
        workspaces: impl IntoIterator<Item = &'a mut [u8]>,
        parameters: impl IntoIterator<Item = &'a [u8]>,
        threads: Option<&ThreadPool>,
    ) -> Result<(), AotError> {
        let m = &self.metadata;
        let ins =
            Pointers::gather("inputs", inputs.into_iter().map(|b| (b.as_ptr(), b.len())), m.inputs.iter().map(tensor))?;
        let outs = Pointers::gather(
            "outputs",
            outputs.into_iter().map(|b| (b.as_mut_ptr().cast_const(), b.len())),
            m.outputs.iter().map(tensor),
        )?;
        let ws = Pointers::gather(
            "workspace pools",
            workspaces.into_iter().map(|b| (b.as_mut_ptr().cast_const(), b.len())),
            m.user_pools(PoolRole::Workspace).map(pool),
        )?;
        let ps = Pointers::gather(
            "parameter pools",
            parameters.into_iter().map(|b| (b.as_ptr(), b.len())),
            m.user_pools(PoolRole::Parameter).map(pool),
        )?;
        // SAFETY: every pointer and size array matches the struct layout of the header (one
        // entry per field, in metadata order; NULL for an empty struct), every size is the
        // length of the slice the pointer came from, and every buffer was checked to be large
        // enough and aligned for what the compiled code reads and writes; outputs and
        // workspaces came from exclusive borrows; the pool (borrowed, so it outlives the call
        // and runs no other job meanwhile) gives a context valid while it lives.
        let code = unsafe {
            (self.entry)(
                ins.pointers().cast(),
                ins.sizes(),
                outs.pointers().cast(),
                outs.sizes(),
                ws.pointers().cast(),
                ws.sizes(),
                ps.pointers().cast(),
                ps.sizes(),
                threads.map_or(std::ptr::null(), ThreadPool::context),
            )
        };
        match code {
            0 => Ok(()),
            1 => Err(AotError::Run("the model rejected a NULL or misaligned pointer".into())),
            2 => Err(AotError::Run("a data-dependent index (e.g. Gather) was out of range".into())),
            3 => Err(AotError::Run("the model rejected a buffer smaller than it needs".into())),
            4 => Err(AotError::Run(format!(
                "the model calls routines ({}) that its run context does not provide",
                m.routines.join(", ")
            ))),
            other => Err(AotError::Run(format!("the model returned status {other}"))),
        }
    }
}

/// (name, bytes, alignment) a tensor buffer must satisfy: its size, aligned to its element.
fn tensor(t: &TensorMeta) -> (&str, u64, u64) {
    (t.name.as_str(), t.size_bytes as u64, t.dtype().map_or(1, |d| d.size_bytes() as u64))
}

fn pool(p: &PoolMeta) -> (&str, u64, u64) {
    (p.name.as_str(), p.size_bytes, p.alignment)
}

/// Buffer addresses and byte sizes laid out as one of the header's pointer structs and its
/// sizes struct.
struct Pointers {
    inline: [usize; 32],
    inline_sizes: [usize; 32],
    spilled: Vec<usize>,
    spilled_sizes: Vec<usize>,
    len: usize,
}

impl Pointers {
    /// Checks `buffers` against `specs` (name, bytes needed, alignment) and collects them.
    fn gather<'s>(
        what: &str,
        buffers: impl Iterator<Item = (*const u8, usize)>,
        mut specs: impl Iterator<Item = (&'s str, u64, u64)>,
    ) -> Result<Pointers, AotError> {
        let mut p =
            Pointers { inline: [0; 32], inline_sizes: [0; 32], spilled: Vec::new(), spilled_sizes: Vec::new(), len: 0 };
        for (ptr, len) in buffers {
            let Some((name, need, align)) = specs.next() else {
                return Err(AotError::Run(format!("more {what} than the model takes ({})", p.len)));
            };
            if (len as u64) < need {
                return Err(AotError::Run(format!("'{name}' needs {need} bytes, got {len}")));
            }
            if !(ptr as usize).is_multiple_of(align.max(1) as usize) {
                return Err(AotError::Run(format!("'{name}' must be {align}-byte aligned")));
            }
            if p.len < p.inline.len() {
                p.inline[p.len] = ptr as usize;
                p.inline_sizes[p.len] = len;
            } else {
                if p.spilled.is_empty() {
                    p.spilled.extend_from_slice(&p.inline);
                    p.spilled_sizes.extend_from_slice(&p.inline_sizes);
                }
                p.spilled.push(ptr as usize);
                p.spilled_sizes.push(len);
            }
            p.len += 1;
        }
        if specs.next().is_some() {
            return Err(AotError::Run(format!("too few {what}: got {}", p.len)));
        }
        Ok(p)
    }

    /// The pointer array's address, or NULL when empty (as the header documents).
    fn pointers(&self) -> *const usize {
        match self.len {
            0 => std::ptr::null(),
            n if n <= self.inline.len() => self.inline.as_ptr(),
            _ => self.spilled.as_ptr(),
        }
    }

    /// The sizes array's address, or NULL when empty.
    fn sizes(&self) -> *const usize {
        match self.len {
            0 => std::ptr::null(),
            n if n <= self.inline.len() => self.inline_sizes.as_ptr(),
            _ => self.spilled_sizes.as_ptr(),
        }
    }
}
