//! Input files for `heron run` and `heron bench`: `.npy` (any dtype Heron has, f16 included),
//! `.npz` (numpy's zip of arrays, stored or deflated) and ONNX `TensorProto` `.pb` files, each
//! read within the tensor size limits.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};
use heron_ir::npy::parse_npy;
use heron_runtime::{Limits, Tensor};
use prost::Message;

/// The tensors `arg` (`[NAME=]FILE`) names: one for `.npy` and `.pb` files (named by `NAME=`,
/// else positional), one per array for `.npz` (named by their keys, positional where numpy
/// made the keys up: `arr_0`, `arr_1`, ...).
pub fn read_input_arg(arg: &str, limits: &Limits) -> Result<Vec<(Option<String>, Tensor)>> {
    let (name, file) = match arg.split_once('=') {
        Some((n, f)) if !n.is_empty() && !Path::new(arg).exists() => (Some(n.to_string()), f),
        _ => (None, arg),
    };
    let path = Path::new(file);
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let bytes = read_limited(path, limits)?;
    let origin = path.display().to_string();
    let tensors = match extension.as_str() {
        "npz" => {
            if name.is_some() {
                bail!("{origin}: an .npz file names its arrays itself; give it without NAME=");
            }
            read_npz(&bytes, &origin, limits)?
        }
        "pb" => vec![(name, read_tensor_proto(&bytes, &origin, limits)?)],
        _ => vec![(name, parse_npy(&bytes, &origin)?)],
    };
    for (_, t) in &tensors {
        limits.check(&t.tensor_type()).with_context(|| origin.to_string())?;
    }
    Ok(tensors)
}

/// A file's bytes, refused when larger than a tensor may be (plus room for headers).
fn read_limited(path: &Path, limits: &Limits) -> Result<Vec<u8>> {
    let cap = limits.max_tensor_bytes.saturating_add(1 << 20);
    let file = std::fs::File::open(path).with_context(|| format!("cannot read input {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes).with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > cap {
        bail!(
            "{}: larger than the tensor size limit ({} bytes; see --max-tensor-bytes)",
            path.display(),
            limits.max_tensor_bytes
        );
    }
    Ok(bytes)
}

fn read_npz(bytes: &[u8], origin: &str, limits: &Limits) -> Result<Vec<(Option<String>, Tensor)>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .with_context(|| format!("{origin}: not an .npz file (a zip of .npy arrays)"))?;
    let cap = limits.max_tensor_bytes.saturating_add(1 << 20);
    let mut tensors = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).with_context(|| format!("{origin}: entry {i}"))?;
        let key = entry.name().with_context(|| format!("{origin}: entry {i}"))?.trim_end_matches(".npy").to_string();
        let member = format!("{origin}[{key}]");
        // Decompressed size is what the archive claims; the reader stops past the limit anyway
        // (a zip bomb is an error, not an exhausted machine).
        let mut data = Vec::new();
        (&mut entry).take(cap.saturating_add(1)).read_to_end(&mut data).with_context(|| member.clone())?;
        if data.len() as u64 > cap {
            bail!("{member}: larger than the tensor size limit ({} bytes)", limits.max_tensor_bytes);
        }
        let positional = key.strip_prefix("arr_").is_some_and(|n| n.parse::<usize>().is_ok());
        tensors.push(((!positional).then_some(key), parse_npy(&data, &member)?));
    }
    if tensors.is_empty() {
        bail!("{origin}: the archive holds no arrays");
    }
    Ok(tensors)
}

fn read_tensor_proto(bytes: &[u8], origin: &str, limits: &Limits) -> Result<Tensor> {
    let proto = heron_ir::onnx::proto::TensorProto::decode(bytes)
        .with_context(|| format!("{origin}: not an ONNX TensorProto (.pb) file"))?;
    heron_ir::onnx::tensor_from_proto_within(&proto, limits).with_context(|| origin.to_string())
}
