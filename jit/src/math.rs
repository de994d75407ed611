//! exp, tanh, sigmoid and erf as inline polynomials on F32 or F32X4 values (Cranelift has no such
//! opcodes, and libcalls in hot loops cost 7-8 ns each), and the f16 <-> f32 conversions that
//! let f16 tensors live as f32 values in registers. Accuracy, checked in tests against
//! f64: exp within 2e-6 relative on [-87, 88] (0 below about -104, inf above 88.72), tanh and
//! sigmoid and erf within 2e-6 absolute everywhere; NaN in, NaN out.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, I32, I32X4};
use cranelift_codegen::ir::{Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

/// A float constant of type `ty` (splatted for vectors).
pub fn fconst(b: &mut FunctionBuilder<'_>, ty: Type, v: f32) -> Value {
    let s = b.ins().f32const(v);
    if ty.is_vector() { b.ins().splat(ty, s) } else { s }
}

fn iconst(b: &mut FunctionBuilder<'_>, ity: Type, v: i64) -> Value {
    let s = b.ins().iconst(I32, v);
    if ity.is_vector() { b.ins().splat(ity, s) } else { s }
}

/// Bit casts between same-width types; vectors need an explicit lane order.
pub fn bitcast(b: &mut FunctionBuilder<'_>, to: Type, v: Value) -> Value {
    let flags =
        if to.is_vector() { MemFlagsData::new().with_endianness(Endianness::Little) } else { MemFlagsData::new() };
    b.ins().bitcast(to, flags, v)
}

/// `cond ? x : y` lane-wise, where `cond` is the result of an `fcmp` on values of type `ty`.
pub fn select_by(b: &mut FunctionBuilder<'_>, ty: Type, cond: Value, x: Value, y: Value) -> Value {
    if ty.is_vector() {
        let mask = bitcast(b, ty, cond);
        b.ins().bitselect(mask, x, y)
    } else {
        b.ins().select(cond, x, y)
    }
}

fn int_type(ty: Type) -> Type {
    if ty.is_vector() { I32X4 } else { I32 }
}

/// Horner's scheme: c[0] * x^(n-1) + ... + c[n-1].
fn horner(b: &mut FunctionBuilder<'_>, ty: Type, x: Value, coeffs: &[f32]) -> Value {
    let mut acc = fconst(b, ty, coeffs[0]);
    for &c in &coeffs[1..] {
        let k = fconst(b, ty, c);
        let m = b.ins().fmul(acc, x);
        acc = b.ins().fadd(m, k);
    }
    acc
}

/// 2^n for the integer `ni` in [-252, 254], as two factors so neither exponent overflows.
fn pow2(b: &mut FunctionBuilder<'_>, ty: Type, ni: Value) -> (Value, Value) {
    let ity = int_type(ty);
    let one = b.ins().iconst(I32, 1);
    let half = b.ins().sshr(ni, one);
    let rest = b.ins().isub(ni, half);
    let bias = iconst(b, ity, 127);
    let shift = b.ins().iconst(I32, 23);
    let mut factor = |v: Value| {
        let e = b.ins().iadd(v, bias);
        let bits = b.ins().ishl(e, shift);
        bitcast(b, ty, bits)
    };
    (factor(half), factor(rest))
}

/// e^x (Cody-Waite range reduction, then a degree-6 polynomial on [-ln2/2, ln2/2]).
///
/// Compares and selects clamp the argument and a magic-number add rounds `x·log2 e` to the
/// nearest integer and gives its bits: the same values as `fmin`/`fmax`, `nearest` and a
/// float-to-int conversion, which Cranelift lowers (NaN- and overflow-exact) to several
/// instructions each on vectors.
pub fn exp(b: &mut FunctionBuilder<'_>, ty: Type, x: Value) -> Value {
    const HI: f32 = 88.722_84;
    const LO: f32 = -103.972_08;
    // 1.5 · 2^23: adding it rounds |t| < 2^22 to an integer (ties to even, the default
    // rounding mode), which then sits in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let (hi, lo) = (fconst(b, ty, HI), fconst(b, ty, LO));
    // A NaN compares false both times, so it flows through to the result.
    let above = b.ins().fcmp(FloatCC::GreaterThan, x, hi);
    let below = b.ins().fcmp(FloatCC::LessThan, x, lo);
    let xc = select_by(b, ty, above, hi, x);
    let xc = select_by(b, ty, below, lo, xc);
    let log2e = fconst(b, ty, std::f32::consts::LOG2_E);
    let t = b.ins().fmul(xc, log2e);
    let magic = fconst(b, ty, MAGIC);
    let shifted = b.ins().fadd(t, magic);
    let n = b.ins().fsub(shifted, magic);
    let ni = bitcast(b, int_type(ty), shifted);
    let magic_bits = iconst(b, int_type(ty), i64::from(MAGIC.to_bits()));
    let ni = b.ins().isub(ni, magic_bits);
    let (c1, c2) = (fconst(b, ty, 0.693_359_4), fconst(b, ty, -2.121_944_4e-4));
    let m1 = b.ins().fmul(n, c1);
    let r = b.ins().fsub(xc, m1);
    let m2 = b.ins().fmul(n, c2);
    let r = b.ins().fsub(r, m2);
    let p = horner(b, ty, r, &[1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5]);
    let r2 = b.ins().fmul(r, r);
    let p = b.ins().fmul(p, r2);
    let p = b.ins().fadd(p, r);
    let one = fconst(b, ty, 1.0);
    let e = b.ins().fadd(p, one);
    let (s1, s2) = pow2(b, ty, ni);
    let e = b.ins().fmul(e, s1);
    let e = b.ins().fmul(e, s2);
    let inf = fconst(b, ty, f32::INFINITY);
    let zero = fconst(b, ty, 0.0);
    let e = select_by(b, ty, above, inf, e);
    select_by(b, ty, below, zero, e)
}

/// tanh x: an odd polynomial near 0, 1 - 2 / (e^{2|x|} + 1) elsewhere, with the sign of x.
pub fn tanh(b: &mut FunctionBuilder<'_>, ty: Type, x: Value) -> Value {
    let ax = b.ins().fabs(x);
    // Large branch.
    let two = fconst(b, ty, 2.0);
    let one = fconst(b, ty, 1.0);
    let x2 = b.ins().fmul(ax, two);
    let e = exp(b, ty, x2);
    let d = b.ins().fadd(e, one);
    let q = b.ins().fdiv(two, d);
    let large = b.ins().fsub(one, q);
    let large = copysign(b, ty, large, x);
    // Small branch (|x| < 0.625).
    let z = b.ins().fmul(x, x);
    let p = horner(b, ty, z, &[-5.704_988_7e-3, 2.063_909e-2, -5.373_971_6e-2, 1.333_144_2e-1, -3.333_328e-1]);
    let p = b.ins().fmul(p, z);
    let p = b.ins().fmul(p, x);
    let small = b.ins().fadd(p, x);
    let limit = fconst(b, ty, 0.625);
    let is_small = b.ins().fcmp(FloatCC::LessThan, ax, limit);
    select_by(b, ty, is_small, small, large)
}

/// |mag| with the sign of `sign` (x64 has no vector `fcopysign`: done on the bits).
fn copysign(b: &mut FunctionBuilder<'_>, ty: Type, mag: Value, sign: Value) -> Value {
    if !ty.is_vector() {
        return b.ins().fcopysign(mag, sign);
    }
    let (m, s) = (bitcast(b, I32X4, mag), bitcast(b, I32X4, sign));
    let sign_bit = iconst(b, I32X4, i32::MIN as i64);
    let rest = b.ins().bnot(sign_bit);
    let s = b.ins().band(s, sign_bit);
    let m = b.ins().band(m, rest);
    let r = b.ins().bor(m, s);
    bitcast(b, ty, r)
}

/// 1 / (1 + e^-x).
pub fn sigmoid(b: &mut FunctionBuilder<'_>, ty: Type, x: Value) -> Value {
    let nx = b.ins().fneg(x);
    let e = exp(b, ty, nx);
    let one = fconst(b, ty, 1.0);
    let d = b.ins().fadd(e, one);
    b.ins().fdiv(one, d)
}

/// Whether `ty` is one the polynomials above are written for.
pub fn supported(ty: Type) -> bool {
    ty == F32 || ty == cranelift_codegen::ir::types::F32X4
}

/// The f32 value of IEEE half-precision bits `h` (an I16).
pub fn f16_bits_to_f32(b: &mut FunctionBuilder<'_>, h: Value) -> Value {
    let h = b.ins().uextend(I32, h);
    let magnitude = b.ins().band_imm_s(h, 0x7fff);
    let shifted = b.ins().ishl_imm_s(magnitude, 13);
    // Rebias by multiplying with 2^112: exact for normals and subnormals alike.
    let as_float = bitcast(b, F32, shifted);
    let scale = b.ins().f32const(f32::from_bits((127 + 112) << 23));
    let scaled = b.ins().fmul(as_float, scale);
    let scaled_bits = bitcast(b, I32, scaled);
    // Exponent 31: infinity or NaN keeps its payload.
    let exponent = b.ins().band_imm_s(h, 0x7c00);
    let special = b.ins().icmp_imm_s(IntCC::Equal, exponent, 0x7c00);
    let inf_nan = b.ins().bor_imm_s(shifted, 0x7f80_0000);
    let bits = b.ins().select(special, inf_nan, scaled_bits);
    let sign = b.ins().band_imm_s(h, 0x8000);
    let sign = b.ins().ishl_imm_s(sign, 16);
    let bits = b.ins().bor(bits, sign);
    bitcast(b, F32, bits)
}

/// IEEE half-precision bits (an I16) of `x`, rounded to nearest even; overflow gives infinity,
/// NaN stays NaN.
pub fn f32_to_f16_bits(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let f = bitcast(b, I32, x);
    let sign = b.ins().band_imm_s(f, i32::MIN as i64);
    let abs = b.ins().bxor(f, sign);
    // NaN or too large for f16: NaN becomes a quiet NaN, the rest infinity.
    let is_nan = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, abs, 0x7f80_0000);
    let nan = b.ins().iconst(I32, 0x7e00);
    let inf = b.ins().iconst(I32, 0x7c00);
    let big = b.ins().select(is_nan, nan, inf);
    // Subnormal f16 (or zero): let the FPU round by adding a magic number.
    let magic = b.ins().f32const(f32::from_bits(((127 - 15) + (23 - 10) + 1) << 23));
    let absf = bitcast(b, F32, abs);
    let sum = b.ins().fadd(absf, magic);
    let sum_bits = bitcast(b, I32, sum);
    let magic_bits = b.ins().iconst(I32, (((127 - 15) + (23 - 10) + 1) << 23) as i64);
    let small = b.ins().isub(sum_bits, magic_bits);
    // Normal: rebias and round to nearest even by hand.
    let odd = b.ins().ushr_imm_s(abs, 13);
    let odd = b.ins().band_imm_s(odd, 1);
    let rebias = b.ins().iadd_imm_s(abs, (((15 - 127) << 23) + 0xfff) as i64);
    let rounded = b.ins().iadd(rebias, odd);
    let normal = b.ins().ushr_imm_s(rounded, 13);
    let is_big = b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, abs, ((127 + 16) << 23) as i64);
    let is_small = b.ins().icmp_imm_s(IntCC::SignedLessThan, abs, (113 << 23) as i64);
    let out = b.ins().select(is_small, small, normal);
    let out = b.ins().select(is_big, big, out);
    let sign16 = b.ins().ushr_imm_s(sign, 16);
    let out = b.ins().bor(out, sign16);
    b.ins().ireduce(cranelift_codegen::ir::types::I16, out)
}

/// `x` rounded to the nearest f16 value, kept as f32 (how f16 values live in registers).
pub fn round_to_f16(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let bits = f32_to_f16_bits(b, x);
    f16_bits_to_f32(b, bits)
}

/// erf x: Abramowitz & Stegun 7.1.26, 1 - (a1 t + ... + a5 t^5) e^{-x^2} with t = 1 / (1 + p|x|),
/// absolute error below 1.5e-7, with the sign of x.
pub fn erf(b: &mut FunctionBuilder<'_>, ty: Type, x: Value) -> Value {
    let ax = b.ins().fabs(x);
    let p = fconst(b, ty, 0.327_591_1);
    let one = fconst(b, ty, 1.0);
    let d = b.ins().fmul(p, ax);
    let d = b.ins().fadd(d, one);
    let t = b.ins().fdiv(one, d);
    let poly = horner(b, ty, t, &[1.061_405_4, -1.453_152_1, 1.421_413_8, -0.284_496_72, 0.254_829_6]);
    let poly = b.ins().fmul(poly, t);
    let x2 = b.ins().fmul(ax, ax);
    let nx2 = b.ins().fneg(x2);
    let e = exp(b, ty, nx2);
    let tail = b.ins().fmul(poly, e);
    let r = b.ins().fsub(one, tail);
    copysign(b, ty, r, x)
}
