//! ONNX external data: tensors whose bytes live in a file beside the model (`location`,
//! `offset`, `length` entries), as models over 2 GB and many exporters write them.
//!
//! The bytes are read into the tensor's `raw_data` before import, so the ordinary decoding
//! (dims against the limits, byte count against the dims) checks them. A location is a
//! relative path that must stay inside the model's directory, symbolic links resolved, as the
//! ONNX checker requires: a hostile model cannot make Heron read `/etc/shadow` or `../..`.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use crate::limits::Limits;

use super::ImportError;
use super::proto::{GraphProto, TensorProto};

/// Reads every external tensor of `graph` (initializers and tensor attributes, subgraphs
/// included) from files in `dir`; `dir` None makes any external tensor an error. No file is
/// read for more bytes than it holds, so many tensors naming one file cannot multiply it.
pub(super) fn load_external_data(
    graph: &mut GraphProto,
    dir: Option<&Path>,
    limits: &Limits,
) -> Result<(), ImportError> {
    Reader { dir, limits, read: HashMap::new() }.graph(graph)
}

struct Reader<'a> {
    dir: Option<&'a Path>,
    limits: &'a Limits,
    /// Bytes read so far from each file.
    read: HashMap<PathBuf, u64>,
}

impl Reader<'_> {
    fn graph(&mut self, graph: &mut GraphProto) -> Result<(), ImportError> {
        for t in &mut graph.initializer {
            self.tensor(t)?;
        }
        for a in graph.node.iter_mut().flat_map(|n| n.attribute.iter_mut()) {
            if let Some(t) = &mut a.t {
                self.tensor(t)?;
            }
            if let Some(g) = &mut a.g {
                self.graph(g)?;
            }
        }
        Ok(())
    }

    fn tensor(&mut self, t: &mut TensorProto) -> Result<(), ImportError> {
        let (dir, limits) = (self.dir, self.limits);
        const EXTERNAL: i32 = 1;
        if t.data_location != EXTERNAL && t.external_data.is_empty() {
            return Ok(());
        }
        let bad = |reason: String| ImportError::ExternalData { name: t.name.clone(), reason };
        let Some(dir) = dir else {
            return Err(bad(
                "is in a file beside the model, but the model was given as bytes: load it from its file".into()
            ));
        };
        let (mut location, mut offset, mut length) = (None, 0u64, None);
        for entry in &t.external_data {
            let number = || {
                entry
                    .value
                    .parse::<u64>()
                    .map_err(|_| bad(format!("{} '{}' is not a byte count", entry.key, entry.value)))
            };
            match entry.key.as_str() {
                "location" => location = Some(entry.value.clone()),
                "offset" => offset = number()?,
                "length" => length = Some(number()?),
                _ => {}
            }
        }
        let location = location.ok_or_else(|| bad("has no location".into()))?;
        let relative = Path::new(&location);
        if location.is_empty() || !relative.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(bad(format!("location '{location}' must be a relative path inside the model's directory")));
        }
        let inside = |p: &Path| p.canonicalize().map_err(|e| bad(format!("'{}': {e}", p.display())));
        let (root, path) = (inside(dir)?, inside(&dir.join(relative))?);
        if !path.starts_with(&root) {
            return Err(bad(format!("location '{location}' leads outside the model's directory")));
        }
        // Only a regular file: opening a FIFO would block forever.
        let meta = std::fs::metadata(&path).map_err(|e| bad(format!("'{}': {e}", path.display())))?;
        if !meta.is_file() {
            return Err(bad(format!("location '{location}' is not a regular file")));
        }
        let mut file = std::fs::File::open(&path).map_err(|e| bad(format!("'{}': {e}", path.display())))?;
        let size = file.metadata().map_err(|e| bad(format!("'{}': {e}", path.display())))?.len();
        let available = size
            .checked_sub(offset)
            .ok_or_else(|| bad(format!("offset {offset} is past the end of '{location}' ({size} bytes)")))?;
        let length = length.unwrap_or(available);
        if length > available {
            return Err(bad(format!(
                "{length} bytes at offset {offset} run past the end of '{location}' ({size} bytes)"
            )));
        }
        let total = self.read.entry(path.clone()).or_insert(0);
        *total = total.saturating_add(length);
        if *total > size {
            return Err(bad(format!("tensors read more bytes from '{location}' than its {size}: they overlap")));
        }
        if length > limits.max_tensor_bytes {
            return Err(bad(format!(
                "{length} bytes exceed the tensor size limit of {} bytes",
                limits.max_tensor_bytes
            )));
        }
        let n = usize::try_from(length).map_err(|_| bad(format!("{length} bytes do not fit in memory")))?;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(n).map_err(|e| bad(format!("{length} bytes: {e}")))?;
        file.seek(SeekFrom::Start(offset)).map_err(|e| bad(format!("'{location}': {e}")))?;
        file.take(length).read_to_end(&mut bytes).map_err(|e| bad(format!("'{location}': {e}")))?;
        if bytes.len() != n {
            return Err(bad(format!("'{location}' ended after {} of {length} bytes", bytes.len())));
        }
        t.raw_data = bytes;
        t.data_location = 0;
        t.external_data.clear();
        Ok(())
    }
}
