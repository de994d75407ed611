//! Softmax and log-softmax along the middle axis of an `[outer, n, inner]` tensor, at the full
//! vector width with the elementwise module's `exp` (generated code computes `exp` one scalar
//! lane at a time, 20-40x slower than ONNX Runtime on a 1024-wide row).
//!
//! Each line `x[o, 0..n, i]` is three passes: its maximum `m`; `e = exp(x - m)`, stored into
//! the output while summed into `s`; then `out = e · (1 / s)` (softmax) or `out = (x - m) -
//! ln s` (log-softmax): the loop-IR lowering's formulas to within rounding (its sum runs in
//! order and it divides). With `inner = 1` a line is a contiguous row, vectorized along it (a
//! row of at most [`PARTIALS`] elements kept in registers through the three: loaded once,
//! stored once); otherwise [`LINE_BLOCK`] lines side by side are vectorized across, one lane
//! per line.
//!
//! A line whose maximum is not finite (a NaN in it, or an infinity) is NaN throughout, the
//! canonical NaN. Every ISA gives the same bits: `exp` is the same operations in every
//! variant, and a row's sum has a fixed shape that does not depend on the vector width
//! (element `j` goes to partial sum `j mod 64`, the partials folded as a fixed tree); a line
//! across lanes is summed in order.

use crate::elementwise::scalar;
use crate::{Isa, KernelError, check_share, need, share};

/// Partial sums of a row (and the elements a vectorized row step takes).
const PARTIALS: usize = 64;
/// Lines a strided step takes side by side.
pub const LINE_BLOCK: usize = 64;

/// The shape of a softmax: lines `x[o, 0..n, i]` for `o < outer`, `i < inner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftmaxShape {
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
    /// Log-softmax instead.
    pub log: bool,
}

impl SoftmaxShape {
    /// Elements of the input (and output).
    pub fn elements(&self) -> Result<usize, KernelError> {
        self.outer
            .checked_mul(self.n)
            .and_then(|x| x.checked_mul(self.inner))
            .ok_or(KernelError::Overflow("softmax shape"))
    }

    /// Units of work the tasks share: rows, or blocks of [`LINE_BLOCK`] strided lines.
    pub fn units(&self) -> usize {
        if self.inner == 1 { self.outer } else { self.outer.saturating_mul(self.inner.div_ceil(LINE_BLOCK)) }
    }
}

/// Share `task` of `tasks` of `out = softmax(x)` (or log-softmax) for `shape`.
pub fn softmax_share(
    isa: Isa,
    shape: SoftmaxShape,
    x: &[f32],
    out: &mut [f32],
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    check_share(task, tasks)?;
    let len = shape.elements()?;
    need("softmax input", x.len(), len)?;
    need("softmax output", out.len(), len)?;
    // SAFETY: both hold the shape's elements (checked above) and are distinct slices.
    unsafe { softmax_raw(isa, shape, x.as_ptr(), out.as_mut_ptr(), (task, tasks)) };
    Ok(())
}

/// [`softmax_share`] on pointers.
///
/// # Safety
/// `x` and `out` hold `shape.elements()` elements each and do not overlap.
pub(crate) unsafe fn softmax_raw(
    isa: Isa,
    shape: SoftmaxShape,
    x: *const f32,
    out: *mut f32,
    (task, tasks): (usize, usize),
) {
    let (lo, hi) = share(shape.units(), tasks, task);
    let n = shape.n;
    if n == 0 {
        return;
    }
    for unit in lo..hi {
        if shape.inner == 1 {
            // SAFETY: row `unit` (< outer) holds `n` elements in both.
            unsafe { row(isa, shape.log, x.add(unit * n), out.add(unit * n), n) };
        } else {
            let blocks = shape.inner.div_ceil(LINE_BLOCK);
            let (o, first) = (unit / blocks, unit % blocks * LINE_BLOCK);
            let lines = (shape.inner - first).min(LINE_BLOCK);
            let at = o * n * shape.inner + first;
            // SAFETY: lines `first..first + lines` of slab `o` lie inside both.
            unsafe { strided(isa, shape.log, x.add(at), out.add(at), n, shape.inner, lines) };
        }
    }
}

/// The partial sums folded as a fixed tree: halves added lane by lane, from `width` (half
/// the partials still apart) down. The vector code takes the steps wider than a vector with
/// vector additions, then this.
fn fold(partials: &mut [f32], mut width: usize) -> f32 {
    while width > 0 {
        for j in 0..width {
            partials[j] += partials[j + width];
        }
        width /= 2;
    }
    partials[0]
}

/// `a > b ? a : b`, NaN when either is (the loop IR's `max`).
fn max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        a + b
    } else if a > b {
        a
    } else {
        b
    }
}

/// One contiguous row of `n` (> 0) elements.
///
/// # Safety
/// `x` and `out` hold `n` elements.
unsafe fn row(isa: Isa, log: bool, x: *const f32, out: *mut f32, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            // SAFETY: the CPU has AVX-512F; the rest is the caller's promise.
            return unsafe { x86::row_avx512(log, x, out, n) };
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            // SAFETY: the CPU has AVX2 and FMA; the rest is the caller's promise.
            return unsafe { x86::row_avx2(log, x, out, n) };
        }
    }
    let _ = isa;
    // SAFETY: the caller's promise.
    let (x, out) = unsafe { (std::slice::from_raw_parts(x, n), std::slice::from_raw_parts_mut(out, n)) };
    let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| max(m, v));
    if !m.is_finite() {
        out.fill(f32::NAN);
        return;
    }
    let mut partials = [0.0f32; PARTIALS];
    for (j, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        *o = scalar::exp(v - m);
        partials[j % PARTIALS] += *o;
    }
    finish_row(log, x, out, m, fold(&mut partials, PARTIALS / 2));
}

/// The third pass of a row, given its maximum and sum (scalar: it is one pass of division).
fn finish_row(log: bool, x: &[f32], out: &mut [f32], m: f32, s: f32) {
    if log {
        let ln_s = s.ln();
        out.iter_mut().zip(x).for_each(|(o, &v)| *o = (v - m) - ln_s);
    } else {
        let r = 1.0 / s;
        out.iter_mut().for_each(|o| *o *= r);
    }
}

/// `lines` (1..=[`LINE_BLOCK`]) lines side by side, each `n` (> 0) elements `stride` apart.
///
/// # Safety
/// Element `l · stride + i` is inside `x` and `out` for `l < n`, `i < lines`.
unsafe fn strided(isa: Isa, log: bool, x: *const f32, out: *mut f32, n: usize, stride: usize, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            // SAFETY: the CPU has AVX-512F; the rest is the caller's promise.
            return unsafe { x86::strided_avx512(log, x, out, n, stride, lines) };
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            // SAFETY: the CPU has AVX2 and FMA; the rest is the caller's promise.
            return unsafe { x86::strided_avx2(log, x, out, n, stride, lines) };
        }
    }
    let _ = isa;
    for i in 0..lines {
        // SAFETY: the caller's promise, element by element.
        let at = |l: usize| l * stride + i;
        let m = (0..n).fold(f32::NEG_INFINITY, |m, l| max(m, unsafe { *x.add(at(l)) }));
        if !m.is_finite() {
            // SAFETY: as above.
            (0..n).for_each(|l| unsafe { *out.add(at(l)) = f32::NAN });
            continue;
        }
        let mut s = 0.0f32;
        for l in 0..n {
            // SAFETY: as above.
            unsafe {
                let e = scalar::exp(*x.add(at(l)) - m);
                *out.add(at(l)) = e;
                s += e;
            }
        }
        let (ln_s, r) = if log { (s.ln(), 0.0) } else { (0.0, 1.0 / s) };
        for l in 0..n {
            // SAFETY: as above.
            unsafe {
                let o = out.add(at(l));
                *o = if log { (*x.add(at(l)) - m) - ln_s } else { *o * r };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{LINE_BLOCK, PARTIALS, fold};
    use crate::elementwise::x86::{y, z};

    /// The row and strided passes for one ISA (`$ops`: its vector operations, `$lanes` wide).
    macro_rules! passes {
        ($row:ident, $strided:ident, $feature:literal, $lanes:literal, $ops:ident, $v:ty) => {
            /// [`super::row`] with this ISA: [`PARTIALS`] elements a step, as `VECTORS` vectors
            /// (their `exp` steps interleaved); the last step masked.
            ///
            /// # Safety
            /// `x` and `out` hold `n` (> 0) elements; the CPU has this ISA.
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $row(log: bool, x: *const f32, out: *mut f32, n: usize) {
                const VECTORS: usize = PARTIALS / $lanes;
                /// Lanes of vector `v` in the step at `at`: all of them in a full step, 0 past
                /// the end (no pointer formed there).
                fn lanes<const FULL: bool>(at: usize, v: usize, n: usize) -> usize {
                    if FULL { $lanes } else { n.saturating_sub(at + v * $lanes).min($lanes) }
                }
                /// The running maxima over the step at `at` (`FULL`: all `PARTIALS` inside).
                ///
                /// # Safety
                /// `x` holds `n` elements.
                #[inline]
                #[target_feature(enable = $feature)]
                unsafe fn max_step<const FULL: bool>(x: *const f32, at: usize, n: usize, m: &mut [$v; VECTORS]) {
                    for v in 0..VECTORS {
                        let k = lanes::<FULL>(at, v, n);
                        if k > 0 {
                            // SAFETY: `k` elements from `at + v·lanes` are inside `x`.
                            let xv = unsafe { $ops::load(x.add(at + v * $lanes), k) };
                            let xv = if FULL { xv } else { $ops::fill_past(xv, k, f32::NEG_INFINITY) };
                            m[v] = $ops::max_or_second(m[v], xv);
                        }
                    }
                }
                /// `out = exp(x - m)` over the step at `at`, summed into `sums`.
                ///
                /// # Safety
                /// `x` and `out` hold `n` elements.
                #[inline]
                #[target_feature(enable = $feature)]
                unsafe fn exp_step<const FULL: bool>(
                    x: *const f32,
                    out: *mut f32,
                    at: usize,
                    n: usize,
                    m: $v,
                    sums: &mut [$v; VECTORS],
                ) {
                    let mut d = [$ops::zero(); VECTORS];
                    for v in 0..VECTORS {
                        let k = lanes::<FULL>(at, v, n);
                        if k > 0 {
                            // SAFETY: as above.
                            d[v] = $ops::sub(unsafe { $ops::load(x.add(at + v * $lanes), k) }, m);
                        }
                    }
                    let e = $ops::exp(d);
                    for v in 0..VECTORS {
                        let k = lanes::<FULL>(at, v, n);
                        if k > 0 {
                            // SAFETY: room for `k` elements from `at + v·lanes` in `out`.
                            unsafe { $ops::store(out.add(at + v * $lanes), e[v], k) };
                            sums[v] = $ops::add(sums[v], if FULL { e[v] } else { $ops::fill_past(e[v], k, 0.0) });
                        }
                    }
                }
                /// The row's maximum from the running maxima (NaN or ±∞ when the row is
                /// NaN throughout), and its sum from the partial sums: the tree's steps wider
                /// than a vector, then the rest lane by lane. One step a vector for the
                /// maxima: a NaN may drop out of them, but then the sum is NaN.
                #[inline]
                #[target_feature(enable = $feature)]
                fn maximum(m: [$v; VECTORS]) -> f32 {
                    $ops::max_across((1..VECTORS).fold(m[0], |a, v| $ops::max_or_second(a, m[v])))
                }
                #[inline]
                #[target_feature(enable = $feature)]
                fn total(mut sums: [$v; VECTORS]) -> f32 {
                    let mut width = VECTORS / 2;
                    while width > 0 {
                        for v in 0..width {
                            sums[v] = $ops::add(sums[v], sums[v + width]);
                        }
                        width /= 2;
                    }
                    let mut lanes_left = [0.0f32; $lanes];
                    // SAFETY: `lanes_left` holds one vector.
                    unsafe { $ops::store(lanes_left.as_mut_ptr(), sums[0], $lanes) };
                    fold(&mut lanes_left, $lanes / 2)
                }
                let nan_row = || {
                    for at in 0..n {
                        // SAFETY: `at < n`.
                        unsafe { *out.add(at) = f32::NAN };
                    }
                };
                if n <= PARTIALS {
                    // One step, kept in registers: the row loaded once and stored once, with
                    // the passes' operations (the lanes past it −∞, whose `exp` adds 0).
                    let mut xs = [$ops::splat(f32::NEG_INFINITY); VECTORS];
                    for (v, xs) in xs.iter_mut().enumerate() {
                        let k = lanes::<false>(0, v, n);
                        if k > 0 {
                            // SAFETY: `k` elements from `v·lanes` are inside `x`.
                            *xs = $ops::fill_past(unsafe { $ops::load(x.add(v * $lanes), k) }, k, f32::NEG_INFINITY);
                        }
                    }
                    // The running maxima after one step are the step's values (−∞ past the row).
                    let m = maximum(xs);
                    if !m.is_finite() {
                        return nan_row();
                    }
                    let mv = $ops::splat(m);
                    // `exp` of the vectors the row reaches, up to four interleaved; those past
                    // it add 0.
                    let mut e = [$ops::zero(); VECTORS];
                    let (used, mut v) = (n.div_ceil($lanes), 0);
                    while v < used {
                        let d = |k: usize| $ops::sub(xs[v + k], mv);
                        match used - v {
                            1 => e[v] = $ops::exp([d(0)])[0],
                            2 => [e[v], e[v + 1]] = $ops::exp([d(0), d(1)]),
                            3 => [e[v], e[v + 1], e[v + 2]] = $ops::exp([d(0), d(1), d(2)]),
                            _ => [e[v], e[v + 1], e[v + 2], e[v + 3]] = $ops::exp([d(0), d(1), d(2), d(3)]),
                        }
                        v += 4;
                    }
                    let s = total(e);
                    if s.is_nan() {
                        return nan_row();
                    }
                    let (ln_s, r) =
                        if log { ($ops::splat(s.ln()), $ops::zero()) } else { ($ops::zero(), $ops::splat(1.0 / s)) };
                    for v in 0..VECTORS {
                        let k = lanes::<false>(0, v, n);
                        if k > 0 {
                            let y = if log { $ops::sub($ops::sub(xs[v], mv), ln_s) } else { $ops::mul(e[v], r) };
                            // SAFETY: room for `k` elements from `v·lanes` in `out`.
                            unsafe { $ops::store(out.add(v * $lanes), y, k) };
                        }
                    }
                    return;
                }
                let full = n - n % PARTIALS;
                let mut m = [$ops::splat(f32::NEG_INFINITY); VECTORS];
                for at in (0..full).step_by(PARTIALS) {
                    // SAFETY: the caller's promise.
                    unsafe { max_step::<true>(x, at, n, &mut m) };
                }
                if full < n {
                    // SAFETY: the caller's promise.
                    unsafe { max_step::<false>(x, full, n, &mut m) };
                }
                let m = maximum(m);
                if !m.is_finite() {
                    return nan_row();
                }
                let mv = $ops::splat(m);
                let mut sums = [$ops::zero(); VECTORS];
                for at in (0..full).step_by(PARTIALS) {
                    // SAFETY: the caller's promise.
                    unsafe { exp_step::<true>(x, out, at, n, mv, &mut sums) };
                }
                if full < n {
                    // SAFETY: the caller's promise.
                    unsafe { exp_step::<false>(x, out, full, n, mv, &mut sums) };
                }
                let s = total(sums);
                if s.is_nan() {
                    return nan_row();
                }
                let (ln_s, r) =
                    if log { ($ops::splat(s.ln()), $ops::zero()) } else { ($ops::zero(), $ops::splat(1.0 / s)) };
                let normalize = |at: usize, k: usize| {
                    // SAFETY: `k` elements from `at` are inside both (the caller's promise).
                    unsafe {
                        let v = if log {
                            $ops::sub($ops::sub($ops::load(x.add(at), k), mv), ln_s)
                        } else {
                            $ops::mul($ops::load(out.add(at), k), r)
                        };
                        $ops::store(out.add(at), v, k);
                    }
                };
                let whole = n - n % $lanes;
                for at in (0..whole).step_by($lanes) {
                    normalize(at, $lanes);
                }
                if whole < n {
                    normalize(whole, n - whole);
                }
            }

            /// [`super::strided`] with this ISA: the lines as `lines / lanes` vectors side
            /// by side, each lane one line summed in order.
            ///
            /// # Safety
            /// As [`super::strided`]; the CPU has this ISA.
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $strided(
                log: bool,
                x: *const f32,
                out: *mut f32,
                n: usize,
                stride: usize,
                lines: usize,
            ) {
                const VECTORS: usize = LINE_BLOCK / $lanes;
                let lanes = |v: usize| lines.saturating_sub(v * $lanes).min($lanes);
                let mut m = [$ops::splat(f32::NEG_INFINITY); VECTORS];
                for l in 0..n {
                    for v in 0..VECTORS {
                        let k = lanes(v);
                        if k > 0 {
                            // SAFETY: `k` lines from `v·lanes` at element `l` are inside `x`.
                            m[v] = $ops::max(m[v], unsafe { $ops::load(x.add(l * stride + v * $lanes), k) });
                        }
                    }
                }
                let mut maxima = [0.0f32; LINE_BLOCK];
                for v in 0..VECTORS {
                    // SAFETY: `maxima` holds `VECTORS` vectors.
                    unsafe { $ops::store(maxima.as_mut_ptr().add(v * $lanes), m[v], $lanes) };
                }
                if !maxima[..lines].iter().all(|m| m.is_finite()) {
                    // SAFETY: the caller's promise.
                    return unsafe { super::strided(crate::Isa::Scalar, log, x, out, n, stride, lines) };
                }
                let mut s = [$ops::zero(); VECTORS];
                for l in 0..n {
                    let mut d = [$ops::zero(); VECTORS];
                    for v in 0..VECTORS {
                        let k = lanes(v);
                        if k > 0 {
                            // SAFETY: as above.
                            d[v] = $ops::sub(unsafe { $ops::load(x.add(l * stride + v * $lanes), k) }, m[v]);
                        }
                    }
                    let e = $ops::exp(d);
                    for v in 0..VECTORS {
                        let k = lanes(v);
                        if k > 0 {
                            // SAFETY: as above, in `out`.
                            unsafe { $ops::store(out.add(l * stride + v * $lanes), e[v], k) };
                            s[v] = $ops::add(s[v], e[v]);
                        }
                    }
                }
                // The logarithms lane by lane, as the scalar code takes them; or reciprocals.
                let mut ln_s = s;
                let mut r = s;
                if !log {
                    for v in 0..VECTORS {
                        r[v] = $ops::div($ops::splat(1.0), s[v]);
                    }
                } else {
                    for v in 0..VECTORS {
                        let mut lane = [0.0f32; $lanes];
                        // SAFETY: `lane` holds one vector.
                        unsafe { $ops::store(lane.as_mut_ptr(), s[v], $lanes) };
                        lane.iter_mut().for_each(|t| *t = t.ln());
                        // SAFETY: as above.
                        ln_s[v] = unsafe { $ops::load(lane.as_ptr(), $lanes) };
                    }
                }
                for l in 0..n {
                    for v in 0..VECTORS {
                        let k = lanes(v);
                        if k > 0 {
                            let at = l * stride + v * $lanes;
                            // SAFETY: as above.
                            unsafe {
                                let r = if log {
                                    $ops::sub($ops::sub($ops::load(x.add(at), k), m[v]), ln_s[v])
                                } else {
                                    $ops::mul($ops::load(out.add(at), k), r[v])
                                };
                                $ops::store(out.add(at), r, k);
                            }
                        }
                    }
                }
            }
        };
    }

    passes!(row_avx512, strided_avx512, "avx512f", 16, z, std::arch::x86_64::__m512);
    passes!(row_avx2, strided_avx2, "avx2,fma", 8, y, std::arch::x86_64::__m256);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The loop-IR formulas in f64: what every variant must be within rounding of.
    fn reference(shape: SoftmaxShape, x: &[f32]) -> Vec<f64> {
        let SoftmaxShape { outer, n, inner, log } = shape;
        let mut out = vec![0.0; x.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |l: usize| (o * n + l) * inner + i;
                let m = (0..n).map(|l| f64::from(x[at(l)])).fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (0..n).map(|l| (f64::from(x[at(l)]) - m).exp()).sum();
                for l in 0..n {
                    let d = f64::from(x[at(l)]) - m;
                    out[at(l)] = if log { d - s.ln() } else { d.exp() / s };
                }
            }
        }
        out
    }

    fn run(isa: Isa, shape: SoftmaxShape, x: &[f32], tasks: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; x.len()];
        for task in 0..tasks {
            softmax_share(isa, shape, x, &mut out, (task, tasks)).expect("share");
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Every ISA this CPU has gives the scalar code's bits, for any split into tasks, and
        /// the scalar code is the formula to within float rounding.
        #[test]
        fn variants_match_the_scalar_code_and_the_formula(
            outer in 1usize..5, n in 1usize..150, inner in prop::sample::select(vec![1usize, 2, 7, 16, 17, 70]),
            log in any::<bool>(), tasks in 1usize..4, seed in any::<u64>(),
        ) {
            let shape = SoftmaxShape { outer, n, inner, log };
            let len = shape.elements().unwrap();
            let mut state = seed | 1;
            let x: Vec<f32> = (0..len).map(|_| {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17;
                (state % 20_000) as f32 / 1000.0 - 10.0
            }).collect();
            let want = run(Isa::Scalar, shape, &x, 1);
            for (got, exact) in want.iter().zip(reference(shape, &x)) {
                prop_assert!((f64::from(*got) - exact).abs() <= 1e-5 * exact.abs().max(1.0), "{got} vs {exact}");
            }
            for isa in Isa::available() {
                let got = run(isa, shape, &x, tasks);
                prop_assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa:?} differs");
            }
        }
    }

    #[test]
    fn infinities_and_nan_follow_the_formula() {
        let x = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 1.0];
        for isa in Isa::available() {
            let out = run(isa, SoftmaxShape { outer: 1, n: 4, inner: 1, log: false }, &x, 1);
            assert_eq!(out[0], 0.0, "{isa:?}");
            assert!((out[3] - 1.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-6, "{isa:?}");
            let nan = run(isa, SoftmaxShape { outer: 1, n: 2, inner: 2, log: true }, &[1.0, f32::NAN, 2.0, 3.0], 1);
            assert!(nan[1].is_nan() && nan[3].is_nan() && !nan[0].is_nan(), "{isa:?}: {nan:?}");
        }
        // A negative NaN (x86's default NaN) or an infinity in a row (one step, and several),
        // ahead of larger values: every ISA gives the scalar code's bits, NaN throughout.
        for (n, special) in [(40, -f32::NAN), (150, -f32::NAN), (40, f32::INFINITY), (150, f32::INFINITY)] {
            let mut row: Vec<f32> = (0..n).map(|i| i as f32 / 7.0).collect();
            row[17] = special;
            for log in [false, true] {
                let shape = SoftmaxShape { outer: 1, n, inner: 1, log };
                let want: Vec<u32> = run(Isa::Scalar, shape, &row, 1).iter().map(|v| v.to_bits()).collect();
                assert!(want.iter().all(|&b| f32::from_bits(b).is_nan()), "n {n}, log {log}");
                for isa in Isa::available() {
                    let got: Vec<u32> = run(isa, shape, &row, 1).iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "{isa:?}, n {n}, log {log}");
                }
            }
        }
    }

    #[test]
    fn a_short_buffer_is_an_error() {
        let shape = SoftmaxShape { outer: 2, n: 3, inner: 1, log: false };
        let mut out = [0.0; 6];
        assert!(softmax_share(Isa::Scalar, shape, &[0.0; 5], &mut out, (0, 1)).is_err());
        assert!(softmax_share(Isa::Scalar, shape, &[0.0; 6], &mut out, (1, 1)).is_err());
    }
}
