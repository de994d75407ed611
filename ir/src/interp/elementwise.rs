//! Elementwise kernels: broadcasting binary ops, unary math, clipping, bit shifts.
//!
//! Float math is computed in f64 and rounded once to the element type, which for + - * / and
//! sqrt gives exactly the IEEE result of the narrow type. Integer math is computed in i128 and
//! wrapped to the element type, which is two's-complement wrapping arithmetic.

use ndarray::{ArrayD, IxDyn, Zip};

use crate::infer::broadcast_shapes;
use crate::op::{Activation, BinaryOp, CompareOp, LogicalOp, UnaryOp};
use crate::tensor::{Element, Tensor, Wide};

use super::KernelError;

pub(crate) fn to_i128<T: Element>(v: T) -> i128 {
    match v.widen() {
        Wide::I(x) => x as i128,
        Wide::U(x) => x as i128,
        Wide::F(x) => x as i128,
    }
}

/// Wraps an i128 into `T` modulo 2^bits.
pub(crate) fn from_i128<T: Element>(v: i128) -> T {
    T::from_wide(Wide::I(v as i64))
}

/// Applies `f` to `a` and `b` broadcast against each other (numpy rules).
pub(crate) fn zip_broadcast<T: Element, U: Element>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    mut f: impl FnMut(T, T) -> U,
) -> Result<ArrayD<U>, KernelError> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let av = a.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let bv = b.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y)))
}

fn float_binary(kind: BinaryOp, x: f64, y: f64) -> f64 {
    match kind {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        // numpy maximum/minimum propagate NaN.
        BinaryOp::Max if x.is_nan() || y.is_nan() => f64::NAN,
        BinaryOp::Min if x.is_nan() || y.is_nan() => f64::NAN,
        BinaryOp::Max => x.max(y),
        BinaryOp::Min => x.min(y),
        BinaryOp::Pow => x.powf(y),
        BinaryOp::Fmod => x % y,
        BinaryOp::Mod => {
            let r = x % y;
            if r != 0.0 && (r < 0.0) != (y < 0.0) { r + y } else { r }
        }
    }
}

fn int_binary(kind: BinaryOp, x: i128, y: i128) -> Option<i128> {
    Some(match kind {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        // Truncating division, as C and ONNX Runtime do.
        BinaryOp::Div => x.checked_div(y)?,
        BinaryOp::Max => x.max(y),
        BinaryOp::Min => x.min(y),
        // Integer powers are not defined (infer refuses them).
        BinaryOp::Pow => return None,
        BinaryOp::Mod => x.checked_rem_euclid(y).map(|r| if r != 0 && y < 0 { r + y } else { r })?,
        BinaryOp::Fmod => x.checked_rem(y)?,
    })
}

pub(crate) fn binary(kind: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    fn go<T: Element>(kind: BinaryOp, a: &ArrayD<T>, b: &Tensor) -> Result<Tensor, KernelError> {
        let b = T::array(b).ok_or("operand element types differ")?;
        if T::DTYPE.is_float() {
            return Ok(T::into_tensor(zip_broadcast(a, b, |x, y| {
                T::from_f64(float_binary(kind, x.to_f64(), y.to_f64()))
            })?));
        }
        let mut div_by_zero = false;
        let out = zip_broadcast(a, b, |x, y| match int_binary(kind, to_i128(x), to_i128(y)) {
            Some(v) => from_i128::<T>(v),
            None => {
                div_by_zero = true;
                T::default()
            }
        })?;
        if div_by_zero {
            return Err("integer division by zero".into());
        }
        Ok(T::into_tensor(out))
    }
    dispatch_tensor!(a, x, T => go::<T>(kind, x, b))
}

/// Elementwise comparison (through f64 for floats, i128 for integers: exact either way).
pub(crate) fn compare(kind: CompareOp, a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    fn go<T: Element>(kind: CompareOp, a: &ArrayD<T>, b: &Tensor) -> Result<Tensor, KernelError> {
        let b = T::array(b).ok_or("operand element types differ")?;
        let float = T::DTYPE.is_float();
        let out = zip_broadcast(a, b, |x, y| {
            let ord = if float { x.to_f64().partial_cmp(&y.to_f64()) } else { Some(to_i128(x).cmp(&to_i128(y))) };
            use std::cmp::Ordering::*;
            match (kind, ord) {
                // NaN compares false.
                (_, None) => false,
                (CompareOp::Equal, Some(o)) => o == Equal,
                (CompareOp::Less, Some(o)) => o == Less,
                (CompareOp::LessOrEqual, Some(o)) => o != Greater,
                (CompareOp::Greater, Some(o)) => o == Greater,
                (CompareOp::GreaterOrEqual, Some(o)) => o != Less,
            }
        })?;
        Ok(Tensor::Bool(out))
    }
    dispatch_tensor!(a, x, T => go::<T>(kind, x, b))
}

/// Logical on bools, bitwise on integers.
pub(crate) fn logical(kind: LogicalOp, a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    fn bitwise<T: Element>(kind: LogicalOp, a: &ArrayD<T>, b: &Tensor) -> Result<Tensor, KernelError> {
        let b = T::array(b).ok_or("operand element types differ")?;
        Ok(T::into_tensor(zip_broadcast(a, b, |x, y| {
            let (x, y) = (to_i128(x), to_i128(y));
            from_i128::<T>(match kind {
                LogicalOp::And => x & y,
                LogicalOp::Or => x | y,
                LogicalOp::Xor => x ^ y,
            })
        })?))
    }
    if a.dtype().is_int() {
        return dispatch_tensor!(a, x, T => bitwise::<T>(kind, x, b));
    }
    let (Tensor::Bool(a), Tensor::Bool(b)) = (a, b) else {
        return Err("logical ops take bool tensors (bitwise ones integers)".into());
    };
    Ok(Tensor::Bool(zip_broadcast(a, b, |x, y| match kind {
        LogicalOp::And => x && y,
        LogicalOp::Or => x || y,
        LogicalOp::Xor => x != y,
    })?))
}

pub(crate) fn not(a: &Tensor) -> Result<Tensor, KernelError> {
    let Tensor::Bool(a) = a else { return Err("Not takes a bool tensor".into()) };
    Ok(Tensor::Bool(a.mapv(|v| !v)))
}

/// `cond ? x : y`, broadcast together.
pub(crate) fn where_(cond: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor, KernelError> {
    fn go<T: Element>(c: &ArrayD<bool>, x: &ArrayD<T>, y: &Tensor) -> Result<Tensor, KernelError> {
        let y = T::array(y).ok_or("operand element types differ")?;
        let shape = broadcast_shapes(&broadcast_shapes(c.shape(), x.shape())?, y.shape())?;
        let view = |s: &[usize]| IxDyn(s);
        let (c, x, y) = (
            c.broadcast(view(&shape)).ok_or("broadcast failed")?,
            x.broadcast(view(&shape)).ok_or("broadcast failed")?,
            y.broadcast(view(&shape)).ok_or("broadcast failed")?,
        );
        Ok(T::into_tensor(Zip::from(&c).and(&x).and(&y).map_collect(|&c, &x, &y| if c { x } else { y })))
    }
    let Tensor::Bool(c) = cond else { return Err("Where's condition must be bool".into()) };
    dispatch_tensor!(x, a, T => go::<T>(c, a, y))
}

/// Maps every element of a float tensor through `f` computed in f64.
pub(crate) fn map_float(t: &Tensor, f: impl Fn(f64) -> f64) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, f: impl Fn(f64) -> f64) -> Tensor {
        T::into_tensor(a.mapv(|v| T::from_f64(f(v.to_f64()))))
    }
    match t {
        Tensor::F16(a) => Ok(go(a, f)),
        Tensor::F32(a) => Ok(go(a, f)),
        Tensor::F64(a) => Ok(go(a, f)),
        other => Err(format!("expected a float tensor, got {}", other.dtype()).into()),
    }
}

pub(crate) fn unary(kind: UnaryOp, t: &Tensor) -> Result<Tensor, KernelError> {
    if !t.dtype().is_float() {
        // Relu, Abs, Neg and Sign of integers: Neg wraps, Abs saturates (|MIN| is MAX), as the
        // compiled code computes them.
        fn int<T: Element>(a: &ArrayD<T>, kind: UnaryOp) -> Tensor {
            T::into_tensor(a.mapv(|v| {
                let x = to_i128(v);
                match kind {
                    UnaryOp::Relu => from_i128(x.max(0)),
                    UnaryOp::Abs => T::from_f64(v.to_f64().abs()),
                    UnaryOp::Neg => from_i128(-x),
                    UnaryOp::Sign => from_i128(x.signum()),
                    _ => v,
                }
            }))
        }
        if !kind.takes_integers() {
            return Err(format!("{kind:?} of {} (float only)", t.dtype()).into());
        }
        return dispatch_tensor!(t, a, T => Ok(int::<T>(a, kind)));
    }
    let softplus = |x: f64| x.max(0.0) + (-x.abs()).exp().ln_1p();
    map_float(t, |x| match kind {
        UnaryOp::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Erf => erf(x),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::Log => x.ln(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tan => x.tan(),
        UnaryOp::Asin => x.asin(),
        UnaryOp::Acos => x.acos(),
        UnaryOp::Atan => x.atan(),
        UnaryOp::Sinh => x.sinh(),
        UnaryOp::Cosh => x.cosh(),
        UnaryOp::Asinh => x.asinh(),
        UnaryOp::Acosh => x.acosh(),
        UnaryOp::Atanh => x.atanh(),
        UnaryOp::Softplus => softplus(x),
        UnaryOp::Softsign => x / (1.0 + x.abs()),
        UnaryOp::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        UnaryOp::Mish => x * softplus(x).tanh(),
        UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        UnaryOp::GeluTanh => {
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
    })
}

/// The error function to double precision: its Taylor series near 0, the continued fraction of
/// erfc (Lentz's method) further out.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(a) = 2/sqrt(pi) * sum_n (-1)^n a^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, a2) = (a, a, a * a);
        for n in 1..100 {
            term *= -a2 / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if a > 6.0 {
        1.0
    } else {
        // erfc(a) = exp(-a^2)/sqrt(pi) / (a + 1/2/(a + 1/(a + 3/2/(a + 2/(a + ...)))))
        let tiny = 1e-300;
        let mut f = a;
        let (mut c, mut d) = (a, 0.0);
        for n in 1..300 {
            let an = n as f64 / 2.0;
            d = a + an * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = a + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    r.copysign(x)
}

fn sigmoid(x: f64) -> f64 {
    // Split by sign so exp never overflows.
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

pub(crate) fn activation(t: &Tensor, a: Activation) -> Result<Tensor, KernelError> {
    map_float(t, |x| activation_f64(a, x))
}

/// A parametric activation in f64 (the parameters as the f32 the model stores).
pub(crate) fn activation_f64(a: Activation, x: f64) -> f64 {
    match a {
        Activation::Elu { alpha } => {
            if x < 0.0 {
                alpha as f64 * x.exp_m1()
            } else {
                x
            }
        }
        Activation::Selu { alpha, gamma } => gamma as f64 * if x <= 0.0 { alpha as f64 * x.exp_m1() } else { x },
        Activation::Celu { alpha } => {
            let alpha = alpha as f64;
            x.max(0.0) + (alpha * (x / alpha).exp_m1()).min(0.0)
        }
        Activation::HardSigmoid { alpha, beta } => (alpha as f64 * x + beta as f64).clamp(0.0, 1.0),
        Activation::ThresholdedRelu { alpha } => {
            if x > alpha as f64 {
                x
            } else {
                0.0
            }
        }
        Activation::Swish { alpha } => x * sigmoid(alpha as f64 * x),
    }
}

pub(crate) fn leaky_relu(t: &Tensor, alpha: f32) -> Result<Tensor, KernelError> {
    let alpha = alpha as f64;
    map_float(t, |x| if x < 0.0 { alpha * x } else { x })
}

/// ONNX Clip: `min(max(x, lo), hi)`, so `hi` wins when `lo > hi`.
pub(crate) fn clip(t: &Tensor, lo: Option<&Tensor>, hi: Option<&Tensor>) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, lo: Option<&Tensor>, hi: Option<&Tensor>) -> Result<Tensor, KernelError> {
        let bound = |b: Option<&Tensor>| -> Result<Option<T>, KernelError> {
            b.map(|b| T::array(b).and_then(|a| a.iter().next().copied()).ok_or_else(|| "bad clip bound".into()))
                .transpose()
        };
        let (lo, hi) = (bound(lo)?, bound(hi)?);
        Ok(T::into_tensor(a.mapv(|mut v| {
            if let Some(l) = lo
                && v < l
            {
                v = l;
            }
            if let Some(h) = hi
                && v > h
            {
                v = h;
            }
            v
        })))
    }
    dispatch_tensor!(t, a, T => go::<T>(a, lo, hi))
}

/// Shifts outside `[0, bits)` shift everything out: 0, or -1 for negative values shifted right.
pub(crate) fn bit_shift(x: &Tensor, shift: &Tensor, left: bool) -> Result<Tensor, KernelError> {
    fn go<T: Element>(a: &ArrayD<T>, s: &Tensor, left: bool) -> Result<Tensor, KernelError> {
        let s = T::array(s).ok_or("operand element types differ")?;
        let bits = T::DTYPE.int_bits() as i128;
        Ok(T::into_tensor(zip_broadcast(a, s, |x, y| {
            let (x, y) = (to_i128(x), to_i128(y));
            let v = if (0..bits).contains(&y) {
                if left { x << y } else { x >> y }
            } else if !left && x < 0 {
                -1
            } else {
                0
            };
            from_i128::<T>(v)
        })?))
    }
    dispatch_tensor!(x, a, T => go::<T>(a, shift, left))
}
