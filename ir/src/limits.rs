//! Size limits: how large a tensor, a memory pool and a rank may be, checked wherever a size is
//! computed from input (import, shape inference, lowering, planning) so that every size the
//! compiled code relies on was computed without overflow and fits the machine.
//!
//! A tensor's size is measured with every zero-length axis counted as length 1: that bounds the
//! bytes it needs *and* the iterations of any loop nest over its shape (a `[2^62, 0]` tensor
//! holds nothing, but a loop over its first axis would never end).

use std::fmt;

use crate::dtype::{DType, TensorType};

/// Limits on what a model may ask for. The defaults suit any model meant for one machine;
/// raise them (or lower them, to reject models early) through the import and compile options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest tensor, operator scratch buffer or constant, in bytes.
    pub max_tensor_bytes: u64,
    /// Largest total of the workspace pools a compiled model needs, in bytes.
    pub max_workspace_bytes: u64,
    /// Highest tensor rank (numpy's limit).
    pub max_rank: usize,
}

impl Limits {
    /// 16 GiB per tensor, 64 GiB of workspace, rank 64.
    pub const DEFAULT: Limits = Limits { max_tensor_bytes: 1 << 34, max_workspace_bytes: 1 << 36, max_rank: 64 };

    /// The hard ceiling no limit may exceed: sizes and offsets must fit `isize` (Rust slices,
    /// pointer offsets) and stay far from `i64` overflow in index arithmetic.
    pub const ABSOLUTE_MAX_BYTES: u64 = isize::MAX as u64;

    /// Checks a tensor type against the limits.
    pub fn check(&self, ty: &TensorType) -> Result<(), SizeError> {
        self.check_shape(ty.dtype, &ty.shape)
    }

    pub fn check_shape(&self, dtype: DType, shape: &[usize]) -> Result<(), SizeError> {
        if shape.len() > self.max_rank {
            return Err(SizeError::Rank { rank: shape.len(), max: self.max_rank });
        }
        let limit = self.max_tensor_bytes.min(Self::ABSOLUTE_MAX_BYTES);
        match span_bytes(dtype, shape) {
            Some(bytes) if bytes <= limit => Ok(()),
            bytes => Err(SizeError::TooLarge { what: describe(dtype, shape), bytes, limit, name: "max_tensor_bytes" }),
        }
    }

    /// Checks the total bytes of the workspace pools.
    pub fn check_workspace(&self, bytes: u64) -> Result<(), SizeError> {
        let limit = self.max_workspace_bytes.min(Self::ABSOLUTE_MAX_BYTES);
        if bytes <= limit {
            Ok(())
        } else {
            Err(SizeError::TooLarge {
                what: "the workspace".into(),
                bytes: Some(bytes),
                limit,
                name: "max_workspace_bytes",
            })
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Elements of `shape` with zero-length axes counted as 1, or `None` on overflow.
pub fn span_elements(shape: &[usize]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d.max(1) as u64))
}

/// Bytes of `shape` with zero-length axes counted as 1, or `None` on overflow.
pub fn span_bytes(dtype: DType, shape: &[usize]) -> Option<u64> {
    span_elements(shape)?.checked_mul(dtype.size_bytes() as u64)
}

/// The element count of `shape`, or `None` on overflow.
pub fn checked_elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

fn describe(dtype: DType, shape: &[usize]) -> String {
    // A rank-5,000 shape would make a 20 KB message.
    if shape.len() > 16 {
        format!(
            "{dtype}[{}, ... ({} axes)]",
            shape[..8].iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
            shape.len()
        )
    } else {
        format!("{dtype}{shape:?}")
    }
}

/// A size beyond the limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("rank {rank} exceeds the limit of {max} axes")]
    Rank { rank: usize, max: usize },
    #[error("{what} needs {} bytes, more than the limit of {limit} ({name})", Bytes(*bytes))]
    TooLarge { what: String, bytes: Option<u64>, limit: u64, name: &'static str },
}

/// A byte count that may have overflowed.
struct Bytes(Option<u64>);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(b) => write!(f, "{b}"),
            None => f.write_str("more than 2^64"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_axes_count_as_one() {
        let l = Limits::DEFAULT;
        assert!(l.check_shape(DType::F32, &[0, 1 << 62]).is_err());
        assert!(l.check_shape(DType::F32, &[1 << 62, 0]).is_err());
        assert!(l.check_shape(DType::F32, &[0, 1000]).is_ok());
        assert_eq!(span_elements(&[0, 3, 0, 5]), Some(15));
        assert_eq!(checked_elements(&[0, 3, 0, 5]), Some(0));
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let l = Limits { max_tensor_bytes: u64::MAX, ..Limits::DEFAULT };
        let e = l.check_shape(DType::F32, &[4, (1 << 62) + 1]).unwrap_err();
        assert!(e.to_string().contains("more than 2^64"), "{e}");
        assert!(l.check_shape(DType::F64, &[1 << 61]).is_err(), "2^64 bytes");
        assert!(l.check_shape(DType::U8, &[1 << 62, 2]).is_err(), "beyond isize::MAX");
        assert!(matches!(l.check_shape(DType::U8, &[1; 65]), Err(SizeError::Rank { rank: 65, max: 64 })));
    }
}
