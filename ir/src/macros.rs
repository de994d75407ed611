//! Dispatch macros over [`Tensor`](crate::tensor::Tensor) variants and [`DType`](crate::dtype::DType)s.

/// Runs `$body` with `$a` bound to the typed array inside `$t`, for every variant.
/// `$T` names the element type inside the body.
#[macro_export]
macro_rules! dispatch_tensor {
    ($t:expr, $a:ident, $T:ident => $body:expr) => {{
        #[allow(unused_imports)]
        use $crate::tensor::Tensor as __T;
        match $t {
            __T::F16($a) => {
                type $T = $crate::f16;
                $body
            }
            __T::F32($a) => {
                type $T = f32;
                $body
            }
            __T::F64($a) => {
                type $T = f64;
                $body
            }
            __T::I8($a) => {
                type $T = i8;
                $body
            }
            __T::I16($a) => {
                type $T = i16;
                $body
            }
            __T::I32($a) => {
                type $T = i32;
                $body
            }
            __T::I64($a) => {
                type $T = i64;
                $body
            }
            __T::U8($a) => {
                type $T = u8;
                $body
            }
            __T::U16($a) => {
                type $T = u16;
                $body
            }
            __T::U32($a) => {
                type $T = u32;
                $body
            }
            __T::U64($a) => {
                type $T = u64;
                $body
            }
            __T::Bool($a) => {
                type $T = bool;
                $body
            }
        }
    }};
}

/// Runs `$body` with `$T` bound to the Rust element type of the [`DType`] `$d`.
#[macro_export]
macro_rules! for_dtype {
    ($d:expr, $T:ident => $body:expr) => {{
        use $crate::dtype::DType as __D;
        match $d {
            __D::F16 => {
                type $T = $crate::f16;
                $body
            }
            __D::F32 => {
                type $T = f32;
                $body
            }
            __D::F64 => {
                type $T = f64;
                $body
            }
            __D::I8 => {
                type $T = i8;
                $body
            }
            __D::I16 => {
                type $T = i16;
                $body
            }
            __D::I32 => {
                type $T = i32;
                $body
            }
            __D::I64 => {
                type $T = i64;
                $body
            }
            __D::U8 => {
                type $T = u8;
                $body
            }
            __D::U16 => {
                type $T = u16;
                $body
            }
            __D::U32 => {
                type $T = u32;
                $body
            }
            __D::U64 => {
                type $T = u64;
                $body
            }
            __D::Bool => {
                type $T = bool;
                $body
            }
        }
    }};
}
