//! Element types of tensors, and their mapping to ONNX `TensorProto.DataType` codes.

use std::fmt;

/// The element types Heron's graph IR can hold.
///
/// The compiler back ends support a subset (f32 and the 8/32/64-bit integers); the graph IR and
/// the reference interpreter accept every type here so that ONNX models using them can be
/// imported, checked and evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::F16,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64)
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// Numbers of bits of an integer type (0 for floats and bool).
    pub fn int_bits(self) -> u32 {
        if self.is_int() { 8 * self.size_bytes() as u32 } else { 0 }
    }

    /// The lower-case name used in messages, the CLI and `.npy`-like contexts.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
        }
    }

    /// The ONNX `TensorProto.DataType` code of this type.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
        }
    }

    /// Maps an ONNX data type code to a Heron dtype; `Err` carries the ONNX name of a type
    /// Heron does not support (string, bfloat16, float8, int4, complex, ...).
    pub fn from_onnx_code(code: i32) -> Result<DType, String> {
        Ok(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            other => return Err(onnx_type_name(other).to_string()),
        })
    }
}

/// ONNX's own name for a data type code, for error messages about unsupported types.
pub fn onnx_type_name(code: i32) -> &'static str {
    match code {
        0 => "UNDEFINED",
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        17 => "FLOAT8E4M3FN",
        18 => "FLOAT8E4M3FNUZ",
        19 => "FLOAT8E5M2",
        20 => "FLOAT8E5M2FNUZ",
        21 => "UINT4",
        22 => "INT4",
        23 => "FLOAT4E2M1",
        24 => "FLOAT8E8M0",
        25 => "UINT2",
        26 => "INT2",
        _ => "UNKNOWN",
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor's static type: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: impl Into<Vec<usize>>) -> TensorType {
        TensorType { dtype, shape: shape.into() }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The element count, saturating at `usize::MAX`: a type that passed
    /// [`Limits::check`](crate::limits::Limits::check) never saturates, and an unchecked one
    /// reads as too large rather than wrapping to something small.
    pub fn num_elements(&self) -> usize {
        self.shape.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
    }

    /// The byte size, saturating like [`TensorType::num_elements`].
    pub fn size_bytes(&self) -> usize {
        self.num_elements().saturating_mul(self.dtype.size_bytes())
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}
