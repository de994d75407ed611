//! `.npy` files <-> [`Tensor`], with the element type taken from the file's header.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::Path;

use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use crate::dtype::DType;
use crate::tensor::{Element, Tensor};

#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{path} is not a valid .npy file: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: unsupported .npy element type '{descr}'")]
    UnsupportedDtype { path: String, descr: String },
    #[error("cannot write {path}: {reason}")]
    Write { path: String, reason: String },
}

/// The `descr` field of a .npy header, e.g. `<f4`.
fn header_descr(bytes: &[u8]) -> Result<String, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("unsupported format version {v}")),
    };
    let header = bytes.get(start..start + len).ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    let at = header.find("'descr'").ok_or("header has no 'descr'")?;
    let rest = &header[at + 7..];
    let open = rest.find('\'').ok_or("malformed 'descr'")?;
    let close = rest[open + 1..].find('\'').ok_or("malformed 'descr'")?;
    Ok(rest[open + 1..open + 1 + close].to_string())
}

fn descr_dtype(descr: &str) -> Option<DType> {
    let d = descr.trim_start_matches(['<', '|', '=']);
    Some(match d {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => return None,
    })
}

/// Reads a `.npy` file of any supported element type.
pub fn read_npy(path: &Path) -> Result<Tensor, NpyError> {
    let p = path.display().to_string();
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| BufReader::new(f).read_to_end(&mut bytes))
        .map_err(|e| NpyError::Io { path: p.clone(), reason: e.to_string() })?;
    let descr = header_descr(&bytes).map_err(|reason| NpyError::Invalid { path: p.clone(), reason })?;
    let dtype =
        descr_dtype(&descr).ok_or_else(|| NpyError::UnsupportedDtype { path: p.clone(), descr: descr.clone() })?;
    fn read<T: Element + ndarray_npy::ReadableElement>(bytes: &[u8]) -> Result<Tensor, String> {
        ArrayD::<T>::read_npy(bytes).map(T::into_tensor).map_err(|e| e.to_string())
    }
    let r = match dtype {
        DType::F32 => read::<f32>(&bytes),
        DType::F64 => read::<f64>(&bytes),
        DType::I8 => read::<i8>(&bytes),
        DType::I16 => read::<i16>(&bytes),
        DType::I32 => read::<i32>(&bytes),
        DType::I64 => read::<i64>(&bytes),
        DType::U8 => read::<u8>(&bytes),
        DType::U16 => read::<u16>(&bytes),
        DType::U32 => read::<u32>(&bytes),
        DType::U64 => read::<u64>(&bytes),
        DType::Bool => read::<bool>(&bytes),
        DType::F16 => return Err(NpyError::UnsupportedDtype { path: p, descr }),
    };
    r.map_err(|reason| NpyError::Invalid { path: p, reason })
}

/// Writes a tensor as a `.npy` file (f16 is written as f32, which .npy readers all support).
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), NpyError> {
    let p = path.display().to_string();
    let file = File::create(path).map_err(|e| NpyError::Write { path: p.clone(), reason: e.to_string() })?;
    let w = BufWriter::new(file);
    let r = match t {
        Tensor::F16(_) => match t.cast(DType::F32) {
            Tensor::F32(a) => a.write_npy(w),
            _ => unreachable!("cast to f32 yields f32"),
        },
        Tensor::F32(a) => a.write_npy(w),
        Tensor::F64(a) => a.write_npy(w),
        Tensor::I8(a) => a.write_npy(w),
        Tensor::I16(a) => a.write_npy(w),
        Tensor::I32(a) => a.write_npy(w),
        Tensor::I64(a) => a.write_npy(w),
        Tensor::U8(a) => a.write_npy(w),
        Tensor::U16(a) => a.write_npy(w),
        Tensor::U32(a) => a.write_npy(w),
        Tensor::U64(a) => a.write_npy(w),
        Tensor::Bool(a) => a.write_npy(w),
    };
    r.map_err(|e| NpyError::Write { path: p, reason: e.to_string() })
}
