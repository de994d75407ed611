//! `TensorProto` <-> [`Tensor`]: raw_data and every typed data field.

use half::f16;

use crate::dtype::{DType, TensorType};
use crate::limits::Limits;
use crate::tensor::Tensor;

use super::ImportError;
use super::proto::TensorProto;

/// Decodes an ONNX tensor (initializer, Constant attribute or a test-data `.pb`) within the
/// default [`Limits`].
pub fn tensor_from_proto(t: &TensorProto) -> Result<Tensor, ImportError> {
    tensor_from_proto_within(t, &Limits::DEFAULT)
}

/// Decodes an ONNX tensor whose type must respect `limits`: its dims are checked before
/// anything is allocated, so hostile dims are an error, never an overflow or an abort.
pub fn tensor_from_proto_within(t: &TensorProto, limits: &Limits) -> Result<Tensor, ImportError> {
    let name = if t.name.is_empty() { "<unnamed tensor>".to_string() } else { t.name.clone() };
    let bad = |reason: String| ImportError::BadTensor { name: name.clone(), reason };
    if t.data_location == 1 || !t.external_data.is_empty() {
        return Err(ImportError::ExternalData { name, reason: "was not read (import the model from its file)".into() });
    }
    let dtype = DType::from_onnx_code(t.data_type)
        .map_err(|dtype| ImportError::UnsupportedDtype { context: format!("tensor '{name}'"), dtype })?;
    let shape = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| bad(format!("negative dimension {d}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let ty = TensorType::new(dtype, shape);
    limits
        .check(&ty)
        .map_err(|e| ImportError::TooLarge { context: format!("tensor '{name}'"), reason: e.to_string() })?;
    let n = ty.num_elements();
    if !t.raw_data.is_empty() || n == 0 {
        if n == 0 {
            return Ok(Tensor::zeros(&ty));
        }
        return Tensor::from_le_bytes(&ty, &t.raw_data).map_err(|e| bad(format!("raw_data {e}")));
    }
    let count_err = |field: &str, got: usize| bad(format!("{field} has {got} values, shape {:?} needs {n}", ty.shape));
    macro_rules! typed {
        ($field:ident, $name:literal, $conv:expr) => {{
            if t.$field.len() != n {
                return Err(count_err($name, t.$field.len()));
            }
            Tensor::from_vec(&ty.shape, t.$field.iter().map($conv).collect()).map_err(bad)
        }};
    }
    match dtype {
        DType::F32 => typed!(float_data, "float_data", |v: &f32| *v),
        DType::F64 => typed!(double_data, "double_data", |v: &f64| *v),
        DType::I64 => typed!(int64_data, "int64_data", |v: &i64| *v),
        DType::U32 => typed!(uint64_data, "uint64_data", |v: &u64| *v as u32),
        DType::U64 => typed!(uint64_data, "uint64_data", |v: &u64| *v),
        // The narrow types (and f16's raw bits) travel in int32_data.
        DType::F16 => typed!(int32_data, "int32_data", |v: &i32| f16::from_bits(*v as u16)),
        DType::I8 => typed!(int32_data, "int32_data", |v: &i32| *v as i8),
        DType::I16 => typed!(int32_data, "int32_data", |v: &i32| *v as i16),
        DType::I32 => typed!(int32_data, "int32_data", |v: &i32| *v),
        DType::U8 => typed!(int32_data, "int32_data", |v: &i32| *v as u8),
        DType::U16 => typed!(int32_data, "int32_data", |v: &i32| *v as u16),
        DType::Bool => typed!(int32_data, "int32_data", |v: &i32| *v != 0),
    }
}

/// Encodes a tensor as an ONNX `TensorProto` with raw_data.
pub fn tensor_to_proto(name: &str, t: &Tensor) -> TensorProto {
    TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: t.dtype().onnx_code(),
        name: name.to_string(),
        raw_data: t.to_le_bytes(),
        ..Default::default()
    }
}
