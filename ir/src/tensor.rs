//! `Tensor`: an n-dimensional array of one of the [`DType`]s, backed by ndarray.
//!
//! Kernels are written once, generically over [`Element`], and dispatched over the enum with the
//! [`dispatch_tensor!`](crate::dispatch_tensor) macro.

use std::fmt;

use half::f16;
use ndarray::{ArrayD, IxDyn};

use crate::dtype::{DType, TensorType};

/// A dense tensor with a static element type.
#[derive(Clone, PartialEq)]
pub enum Tensor {
    F16(ArrayD<f16>),
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I8(ArrayD<i8>),
    I16(ArrayD<i16>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    U8(ArrayD<u8>),
    U16(ArrayD<u16>),
    U32(ArrayD<u32>),
    U64(ArrayD<u64>),
    Bool(ArrayD<bool>),
}

/// A value of any element type, widened without loss: the hub through which casts go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wide {
    I(i64),
    U(u64),
    F(f64),
}

/// An element type a [`Tensor`] can hold.
pub trait Element: Copy + Default + PartialEq + PartialOrd + fmt::Debug + Send + Sync + 'static {
    const DTYPE: DType;
    fn into_tensor(a: ArrayD<Self>) -> Tensor;
    fn array(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn widen(self) -> Wide;
    /// Conversion with Rust `as` semantics from the widened value (floats round to nearest,
    /// float to int truncates toward zero and saturates, int to int wraps).
    fn from_wide(w: Wide) -> Self;
    fn to_f64(self) -> f64 {
        match self.widen() {
            Wide::I(v) => v as f64,
            Wide::U(v) => v as f64,
            Wide::F(v) => v,
        }
    }
    fn from_f64(v: f64) -> Self {
        Self::from_wide(Wide::F(v))
    }
}

/// Implements [`Element`] for a primitive number type; `$wide` is the [`Wide`] variant that
/// holds it without loss.
macro_rules! primitive_element {
    ($t:ty, $variant:ident, $wide:ident, $wt:ty) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn into_tensor(a: ArrayD<Self>) -> Tensor {
                Tensor::$variant(a)
            }
            fn array(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn widen(self) -> Wide {
                Wide::$wide(self as $wt)
            }
            fn from_wide(w: Wide) -> Self {
                match w {
                    Wide::I(v) => v as $t,
                    Wide::U(v) => v as $t,
                    Wide::F(v) => v as $t,
                }
            }
        }
    };
}

primitive_element!(i8, I8, I, i64);
primitive_element!(i16, I16, I, i64);
primitive_element!(i32, I32, I, i64);
primitive_element!(i64, I64, I, i64);
primitive_element!(u8, U8, U, u64);
primitive_element!(u16, U16, U, u64);
primitive_element!(u32, U32, U, u64);
primitive_element!(u64, U64, U, u64);

primitive_element!(f32, F32, F, f64);
primitive_element!(f64, F64, F, f64);

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn into_tensor(a: ArrayD<Self>) -> Tensor {
        Tensor::F16(a)
    }
    fn array(t: &Tensor) -> Option<&ArrayD<Self>> {
        match t {
            Tensor::F16(a) => Some(a),
            _ => None,
        }
    }
    fn widen(self) -> Wide {
        Wide::F(self.to_f64())
    }
    fn from_wide(w: Wide) -> Self {
        match w {
            // Integers go through f32 first only when exact there; f64 -> f16 rounds once.
            Wide::I(v) => f16::from_f64(v as f64),
            Wide::U(v) => f16::from_f64(v as f64),
            Wide::F(v) => f16::from_f64(v),
        }
    }
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn into_tensor(a: ArrayD<Self>) -> Tensor {
        Tensor::Bool(a)
    }
    fn array(t: &Tensor) -> Option<&ArrayD<Self>> {
        match t {
            Tensor::Bool(a) => Some(a),
            _ => None,
        }
    }
    fn widen(self) -> Wide {
        Wide::U(self as u64)
    }
    fn from_wide(w: Wide) -> Self {
        match w {
            Wide::I(v) => v != 0,
            Wide::U(v) => v != 0,
            Wide::F(v) => v != 0.0,
        }
    }
}

impl Tensor {
    pub fn dtype(&self) -> DType {
        dispatch_tensor!(self, _a, T => <T as Element>::DTYPE)
    }

    pub fn shape(&self) -> &[usize] {
        dispatch_tensor!(self, a, _T => a.shape())
    }

    pub fn len(&self) -> usize {
        dispatch_tensor!(self, a, _T => a.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn tensor_type(&self) -> TensorType {
        TensorType::new(self.dtype(), self.shape())
    }

    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }

    /// A tensor of the given type filled with zeros (false for bool).
    pub fn zeros(ty: &TensorType) -> Tensor {
        fn z<T: Element>(shape: &[usize]) -> Tensor {
            T::into_tensor(ArrayD::from_elem(IxDyn(shape), T::default()))
        }
        for_dtype!(ty.dtype, T => z::<T>(&ty.shape))
    }

    /// A scalar (rank 0) tensor of `dtype` holding `v` converted with `as` semantics.
    pub fn scalar_from_f64(dtype: DType, v: f64) -> Tensor {
        fn s<T: Element>(v: f64) -> Tensor {
            T::into_tensor(ArrayD::from_elem(IxDyn(&[]), T::from_f64(v)))
        }
        for_dtype!(dtype, T => s::<T>(v))
    }

    pub fn from_vec<T: Element>(shape: &[usize], data: Vec<T>) -> Result<Tensor, String> {
        ArrayD::from_shape_vec(IxDyn(shape), data)
            .map(T::into_tensor)
            .map_err(|e| format!("data does not fit shape {shape:?}: {e}"))
    }

    /// The typed array, if the tensor holds `T`.
    pub fn as_array<T: Element>(&self) -> Option<&ArrayD<T>> {
        T::array(self)
    }

    /// Converts every element to `dtype` (ONNX Cast semantics for the supported types).
    pub fn cast(&self, dtype: DType) -> Tensor {
        fn to<T: Element, U: Element>(a: &ArrayD<T>) -> Tensor {
            U::into_tensor(a.mapv(|v| U::from_wide(v.widen())))
        }
        dispatch_tensor!(self, a, S => for_dtype!(dtype, D => to::<S, D>(a)))
    }

    /// Every element as f64 in row-major order (lossy for 64-bit integers beyond 2^53).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.first_f64(usize::MAX)
    }

    /// The first `n` elements (at most) as f64, in row-major order, without converting the
    /// rest.
    pub fn first_f64(&self, n: usize) -> Vec<f64> {
        dispatch_tensor!(self, a, _T => a.iter().take(n).map(|v| v.to_f64()).collect())
    }

    /// A zero tensor of `ty` (like [`Tensor::zeros`]), or an error when the memory cannot be
    /// had.
    pub fn try_zeros(ty: &TensorType) -> Result<Tensor, String> {
        fn z<T: Element>(ty: &TensorType) -> Result<Tensor, String> {
            let n = ty.num_elements();
            let mut v: Vec<T> = Vec::new();
            v.try_reserve_exact(n).map_err(|_| format!("out of memory: cannot allocate {ty}"))?;
            v.resize(n, T::default());
            Tensor::from_vec(&ty.shape, v)
        }
        for_dtype!(ty.dtype, T => z::<T>(ty))
    }

    /// Every element as i64 in row-major order; `None` for float and bool tensors.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        if !self.dtype().is_int() {
            return None;
        }
        Some(dispatch_tensor!(self, a, _T => a.iter().map(|v| match v.widen() {
            Wide::I(x) => x,
            Wide::U(x) => x as i64,
            Wide::F(x) => x as i64,
        }).collect()))
    }

    /// Reshapes to `shape` (same element count), keeping row-major element order.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor, String> {
        dispatch_tensor!(self, a, T => {
            let data: Vec<T> = a.iter().copied().collect();
            Tensor::from_vec(shape, data)
        })
    }

    /// The elements' memory as little-endian bytes in row-major order, without copying: `None`
    /// unless the tensor is in standard (C) order on a little-endian machine. Generated code
    /// reads inputs straight from here instead of from a copy.
    pub fn le_bytes(&self) -> Option<&[u8]> {
        if cfg!(target_endian = "big") {
            return None;
        }
        dispatch_tensor!(self, a, _T => a.as_slice().map(bytemuck::cast_slice))
    }

    /// [`Tensor::le_bytes`] for writing, so generated code can store outputs in place: also
    /// `None` for bool, whose bytes must stay 0 or 1.
    pub fn le_bytes_mut(&mut self) -> Option<&mut [u8]> {
        macro_rules! view {
            ($a:expr) => {
                $a.as_slice_mut().map(|v| bytemuck::cast_slice_mut(v))
            };
        }
        if cfg!(target_endian = "big") {
            return None;
        }
        match self {
            Tensor::F16(a) => view!(a),
            Tensor::F32(a) => view!(a),
            Tensor::F64(a) => view!(a),
            Tensor::I8(a) => view!(a),
            Tensor::I16(a) => view!(a),
            Tensor::I32(a) => view!(a),
            Tensor::I64(a) => view!(a),
            Tensor::U8(a) => view!(a),
            Tensor::U16(a) => view!(a),
            Tensor::U32(a) => view!(a),
            Tensor::U64(a) => view!(a),
            Tensor::Bool(_) => None,
        }
    }

    /// Raw little-endian bytes of the elements in row-major order (bool as 0/1).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.size_bytes()];
        self.write_le_bytes(&mut out);
        out
    }

    /// Writes [`Tensor::to_le_bytes`] into `dst` without allocating; `dst` must hold exactly
    /// `size_bytes()` bytes.
    pub fn write_le_bytes(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.size_bytes(), "destination size");
        // A standard-layout array is walked as a slice: ndarray's n-d iterator costs several
        // nanoseconds an element, which shows in a small model's latency.
        macro_rules! encode {
            ($a:expr, $n:expr) => {
                match $a.as_slice() {
                    Some(values) => {
                        for (chunk, v) in dst.chunks_exact_mut($n).zip(values) {
                            chunk.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                    None => {
                        for (chunk, v) in dst.chunks_exact_mut($n).zip($a.iter()) {
                            chunk.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            };
        }
        match self {
            Tensor::F16(a) => encode!(a, 2),
            Tensor::F32(a) => encode!(a, 4),
            Tensor::F64(a) => encode!(a, 8),
            Tensor::I8(a) => encode!(a, 1),
            Tensor::I16(a) => encode!(a, 2),
            Tensor::I32(a) => encode!(a, 4),
            Tensor::I64(a) => encode!(a, 8),
            Tensor::U8(a) => encode!(a, 1),
            Tensor::U16(a) => encode!(a, 2),
            Tensor::U32(a) => encode!(a, 4),
            Tensor::U64(a) => encode!(a, 8),
            Tensor::Bool(a) => dst.iter_mut().zip(a.iter()).for_each(|(d, v)| *d = *v as u8),
        }
    }

    /// Builds a tensor from raw little-endian bytes (the layout of ONNX `raw_data`). Fails,
    /// rather than aborting, when the memory for the elements cannot be had.
    pub fn from_le_bytes(ty: &TensorType, bytes: &[u8]) -> Result<Tensor, String> {
        let want = ty.size_bytes();
        if bytes.len() != want {
            return Err(format!("holds {} bytes, but {} needs {want}", bytes.len(), ty));
        }
        let n = ty.num_elements();
        macro_rules! decode {
            ($t:ty, $n:expr) => {
                Tensor::from_vec::<$t>(
                    &ty.shape,
                    try_collect(
                        n,
                        bytes.chunks_exact($n).map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size"))),
                    )?,
                )
            };
        }
        match ty.dtype {
            DType::F16 => decode!(f16, 2),
            DType::F32 => decode!(f32, 4),
            DType::F64 => decode!(f64, 8),
            DType::I8 => decode!(i8, 1),
            DType::I16 => decode!(i16, 2),
            DType::I32 => decode!(i32, 4),
            DType::I64 => decode!(i64, 8),
            DType::U8 => decode!(u8, 1),
            DType::U16 => decode!(u16, 2),
            DType::U32 => decode!(u32, 4),
            DType::U64 => decode!(u64, 8),
            DType::Bool => Tensor::from_vec::<bool>(&ty.shape, try_collect(n, bytes.iter().map(|b| *b != 0))?),
        }
    }
}

/// `n` items collected into a vector allocated fallibly.
fn try_collect<T>(n: usize, items: impl Iterator<Item = T>) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| format!("out of memory: cannot allocate {n} elements"))?;
    v.extend(items);
    Ok(v)
}

impl<T: Element> From<ArrayD<T>> for Tensor {
    fn from(a: ArrayD<T>) -> Tensor {
        T::into_tensor(a)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor<{}>", self.tensor_type())?;
        if self.len() <= 16 {
            dispatch_tensor!(self, a, _T => write!(f, " {:?}", a.iter().collect::<Vec<_>>()))?;
        }
        Ok(())
    }
}
