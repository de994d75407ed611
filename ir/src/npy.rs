//! `.npy` files <-> [`Tensor`], with the element type taken from the file's header.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::Path;

use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use crate::dtype::DType;
use crate::limits::Limits;
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

/// What a .npy header says: the element type descriptor (e.g. `<f4`), the shape, and where
/// the data starts.
struct Header {
    descr: String,
    shape: Vec<usize>,
    fortran_order: bool,
    data_offset: usize,
}

/// Parses the header dictionary (`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`).
fn parse_header(bytes: &[u8]) -> Result<Header, String> {
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
    let field = |key: &str| header.find(key).map(|at| &header[at + key.len()..]).ok_or(format!("header has no {key}"));
    let rest = field("'descr'")?;
    let open = rest.find('\'').ok_or("malformed 'descr'")?;
    let close = rest[open + 1..].find('\'').ok_or("malformed 'descr'")?;
    let descr = rest[open + 1..open + 1 + close].to_string();
    let rest = field("'shape'")?;
    let open = rest.find('(').ok_or("malformed 'shape'")?;
    let close = rest[open..].find(')').ok_or("malformed 'shape'")?;
    let fortran_order = field("'fortran_order'").is_ok_and(|r| r.trim_start_matches([':', ' ']).starts_with("True"));
    let shape = rest[open + 1..open + close]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().map_err(|_| format!("bad dimension '{d}' in 'shape'")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Header { descr, shape, fortran_order, data_offset: start + len })
}

fn descr_dtype(descr: &str) -> Option<DType> {
    let d = descr.trim_start_matches(['<', '|', '=']);
    Some(match d {
        "f2" => DType::F16,
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
    parse_npy(&bytes, &p)
}

/// Decodes the bytes of a `.npy` file; `origin` names it in errors.
pub fn parse_npy(bytes: &[u8], origin: &str) -> Result<Tensor, NpyError> {
    let p = origin.to_string();
    let invalid = |reason: String| NpyError::Invalid { path: p.clone(), reason };
    let header = parse_header(bytes).map_err(invalid)?;
    let descr = header.descr;
    let dtype =
        descr_dtype(&descr).ok_or_else(|| NpyError::UnsupportedDtype { path: p.clone(), descr: descr.clone() })?;
    // The shape must fit the limits and the file must hold its data, checked before the reader
    // allocates what the header claims.
    Limits::DEFAULT.check_shape(dtype, &header.shape).map_err(|e| invalid(e.to_string()))?;
    let need = crate::limits::checked_elements(&header.shape).and_then(|n| n.checked_mul(dtype.size_bytes()));
    let have = bytes.len().saturating_sub(header.data_offset);
    if need.is_none_or(|n| n > have) {
        return Err(invalid(format!("shape {:?} needs more data than the file's {have} bytes", header.shape)));
    }
    fn read<T: Element + ndarray_npy::ReadableElement>(bytes: &[u8]) -> Result<Tensor, String> {
        ArrayD::<T>::read_npy(bytes).map(T::into_tensor).map_err(|e| e.to_string())
    }
    let r = match dtype {
        DType::F32 => read::<f32>(bytes),
        DType::F64 => read::<f64>(bytes),
        DType::I8 => read::<i8>(bytes),
        DType::I16 => read::<i16>(bytes),
        DType::I32 => read::<i32>(bytes),
        DType::I64 => read::<i64>(bytes),
        DType::U8 => read::<u8>(bytes),
        DType::U16 => read::<u16>(bytes),
        DType::U32 => read::<u32>(bytes),
        DType::U64 => read::<u64>(bytes),
        DType::Bool => read::<bool>(bytes),
        // ndarray-npy has no f16: the values are read here, in C order only.
        DType::F16 => {
            if header.fortran_order {
                return Err(invalid("f16 data in Fortran order is not supported".into()));
            }
            let n = crate::limits::checked_elements(&header.shape).unwrap_or(0);
            let data = &bytes[header.data_offset..header.data_offset + 2 * n];
            let values = data.chunks_exact(2).map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]]))).collect();
            Tensor::from_vec::<half::f16>(&header.shape, values)
        }
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
