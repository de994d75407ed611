//! The GEMM microkernels every f32 contraction runs on: one call computes a tile of up to
//! `MR × NR` outputs of `C = A · B` over the whole reduction, keeping the tile in registers
//! (AVX-512: 12 × 32 in 24 zmm; AVX2: 6 × 16 in 12 ymm), starting from the bias and applying
//! the epilogue (residual add, clamp) before its one store. A is read either row-major (an
//! activation, `a[r * lda + p]`) or k-major (weights packed at compile time into slabs of
//! `MR` rows, or Winograd's transformed tiles: `a[p * lda + r]`); B rows are `NR` contiguous values `ldb` apart (a packed panel, or an
//! activation whose rows are long enough). Column tails are masked, so nothing outside the
//! tile's `rows × cols` block of C is touched.
//!
//! Every variant adds in the same order (fused multiply-adds over `p = 0..k`, from the bias),
//! so the result of an element does not depend on the ISA, the tile it falls in or the thread
//! that computes it.

use crate::Isa;

/// Columns of B per packed panel (the tile's width).
pub fn panel_width(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 32,
        Isa::Avx2Fma => 16,
        Isa::Scalar => 8,
    }
}

/// Rows of C per full tile (the rows of a packed A slab).
pub fn block_rows(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 12,
        Isa::Avx2Fma => 6,
        Isa::Scalar => 4,
    }
}

/// One tile's operands, as raw pointers: callers check every extent before building one.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    pub k: usize,
    /// The tile's first A row (row-major) or its first row's value at `p = 0` (k-major).
    pub a: *const f32,
    /// Row stride of a row-major A; stride between a k-major A's `p` steps (`MR` for a packed
    /// slab).
    pub lda: usize,
    pub packed_a: bool,
    /// The first of `k` rows of `NR` values, `ldb` apart.
    pub b: *const f32,
    pub ldb: usize,
    pub c: *mut f32,
    pub ldc: usize,
    /// `1..=MR` rows and `1..=NR` columns of C are written.
    pub rows: usize,
    pub cols: usize,
    /// `rows` values (null: none), added to every column of their row.
    pub row_bias: *const f32,
    /// `cols` values (null: none), added to every row.
    pub col_bias: *const f32,
    /// A `rows × cols` block added after the products (null: none), row stride `ldr`.
    pub residual: *const f32,
    pub ldr: usize,
    /// The result is clamped to `lo..=hi` when `clamp` is set.
    pub clamp: bool,
    /// B comes from memory, read once for this tile and again from cache by the tiles after
    /// it (Winograd's weights streamed through a layer): the kernel prefetches its rows ahead.
    pub stream_b: bool,
    pub lo: f32,
    pub hi: f32,
}

/// Runs one tile with `isa`'s microkernel (the scalar one, with `isa`'s tile shape, when the
/// CPU lacks the ISA).
///
/// # Safety
/// Every pointer of `t` must be valid for the extents its fields describe: `rows` A rows of
/// `k` (row-major) or `k` steps of `rows` at stride `lda` (k-major), `k` B rows of `NR` at stride `ldb`, and the
/// `rows × cols` blocks of C and the residual.
pub(crate) unsafe fn run(isa: Isa, t: &Tile) {
    debug_assert!(t.rows >= 1 && t.rows <= block_rows(isa) && t.cols >= 1 && t.cols <= panel_width(isa));
    #[cfg(target_arch = "x86_64")]
    {
        // A tile at most one vector wide (a narrow last panel) computes one vector per row.
        macro_rules! by_rows {
            ($module:ident, $($n:literal)*) => {
                match (t.rows, t.packed_a, t.cols <= x86::$module::LANES) {
                    $(($n, true, false) => unsafe { x86::$module::tile::<$n, true, 2>(t) },
                      ($n, false, false) => unsafe { x86::$module::tile::<$n, false, 2>(t) },
                      ($n, true, true) => unsafe { x86::$module::tile::<$n, true, 1>(t) },
                      ($n, false, true) => unsafe { x86::$module::tile::<$n, false, 1>(t) },)*
                    _ => unreachable!("rows checked by the caller"),
                }
            };
        }
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            return by_rows!(avx512, 1 2 3 4 5 6 7 8 9 10 11 12);
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            return by_rows!(avx2, 1 2 3 4 5 6);
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe { scalar_tile(t) }
}

/// The reference microkernel: the same operations in the same order, one lane at a time.
unsafe fn scalar_tile(t: &Tile) {
    // SAFETY: the caller guarantees the extents (see `run`).
    unsafe {
        for r in 0..t.rows {
            for col in 0..t.cols {
                let mut acc = if t.col_bias.is_null() { 0.0f32 } else { *t.col_bias.add(col) };
                if !t.row_bias.is_null() {
                    acc += *t.row_bias.add(r);
                }
                for p in 0..t.k {
                    let a = if t.packed_a { *t.a.add(p * t.lda + r) } else { *t.a.add(r * t.lda + p) };
                    acc = a.mul_add(*t.b.add(p * t.ldb + col), acc);
                }
                if !t.residual.is_null() {
                    acc += *t.residual.add(r * t.ldr + col);
                }
                if t.clamp {
                    acc = acc.max(t.lo).min(t.hi);
                }
                *t.c.add(r * t.ldc + col) = acc;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    /// The microkernel, written once over the vector helpers of the module it expands in
    /// (`zero`, `load`, `load_n`, `store_n`, `splat`, `fma`, `add`, `max`, `min`, `LANES`):
    /// `W` (1 or 2) vectors per row of C, `R` rows.
    macro_rules! tile_kernel {
        ($feature:literal) => {
            /// # Safety
            /// The CPU has the module's features and `t` satisfies [`super::super::run`]'s
            /// contract with `t.rows == R`.
            #[target_feature(enable = $feature)]
            pub(crate) unsafe fn tile<const R: usize, const PACKED_A: bool, const W: usize>(t: &super::super::Tile) {
                // SAFETY: every access is inside the extents the caller guarantees.
                unsafe {
                    // Lanes of C's row in each of the `W` vectors.
                    let n: [usize; W] = std::array::from_fn(|w| t.cols.saturating_sub(w * LANES).min(LANES));
                    let mut init = [zero(); W];
                    if !t.col_bias.is_null() {
                        init = std::array::from_fn(|w| load_n(t.col_bias.add(w * LANES), n[w]));
                    }
                    let mut acc = [init; R];
                    if !t.row_bias.is_null() {
                        for (r, row) in acc.iter_mut().enumerate() {
                            let rb = splat(*t.row_bias.add(r));
                            row.iter_mut().for_each(|v| *v = add(*v, rb));
                        }
                    }
                    for p in 0..t.k {
                        let bp = t.b.add(p * t.ldb);
                        if R <= super::STREAMING_ROWS || t.stream_b {
                            for line in (0..W * LANES).step_by(16) {
                                super::prefetch(bp.wrapping_add(super::PREFETCH_ROWS * t.ldb + line));
                            }
                        }
                        let b: [_; W] = std::array::from_fn(|w| load(bp.add(w * LANES)));
                        for (r, row) in acc.iter_mut().enumerate() {
                            let a = if PACKED_A { *t.a.add(p * t.lda + r) } else { *t.a.add(r * t.lda + p) };
                            let av = splat(a);
                            for (v, bw) in row.iter_mut().zip(b) {
                                *v = fma(av, bw, *v);
                            }
                        }
                    }
                    let (lo, hi) = (splat(t.lo), splat(t.hi));
                    for (r, row) in acc.iter().enumerate() {
                        let out = t.c.add(r * t.ldc);
                        for (w, &v) in row.iter().enumerate() {
                            let mut v = v;
                            if !t.residual.is_null() {
                                v = add(v, load_n(t.residual.add(r * t.ldr + w * LANES), n[w]));
                            }
                            if t.clamp {
                                v = min(max(v, lo), hi);
                            }
                            if n[w] > 0 {
                                store_n(out.add(w * LANES), v, n[w]);
                            }
                        }
                    }
                }
            }
        };
    }
    pub(crate) use tile_kernel;

    /// Tiles of at most this many rows (a GEMV, a small batch) do too few multiply-adds per
    /// row of B to hide its misses: B streams from L3 once, so they prefetch it.
    const STREAMING_ROWS: usize = 4;
    /// How many rows of B ahead they, and tiles streaming B, prefetch (2 KiB of an AVX-512
    /// panel).
    const PREFETCH_ROWS: usize = 16;

    /// Asks for the cache line at `p` into L1; the address need not be valid (a prefetch past
    /// the end of B never faults).
    #[inline(always)]
    fn prefetch(p: *const f32) {
        // SAFETY: a prefetch reads nothing the program sees and cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast()) }
    }

    /// Asks for the cache line at `p` into L2 (not L1, which holds what runs now); the address
    /// need not be valid.
    #[inline(always)]
    fn prefetch_l2(p: *const f32) {
        // SAFETY: a prefetch reads nothing the program sees and cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast()) }
    }

    pub(crate) mod avx512 {
        use std::arch::x86_64::*;

        pub(crate) const LANES: usize = 16;
        pub(crate) const MR: usize = 12;
        /// The depthwise row kernel's block: output rows, vectors along a row.
        pub(crate) const DW_ROWS: usize = 4;
        pub(crate) const DW_VECTORS: usize = 2;
        pub(crate) type Vector = __m512;

        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn load(p: *const f32) -> __m512 {
            unsafe { _mm512_loadu_ps(p) }
        }
        /// The first `n` (0..=16) lanes from `p`, the rest zero; nothing past them is read.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn load_n(p: *const f32, n: usize) -> __m512 {
            unsafe { _mm512_maskz_loadu_ps(mask(n), p) }
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn store_n(p: *mut f32, v: __m512, n: usize) {
            unsafe { _mm512_mask_storeu_ps(p, mask(n), v) }
        }
        #[inline]
        fn mask(n: usize) -> __mmask16 {
            if n >= 16 { 0xFFFF } else { ((1u32 << n) - 1) as __mmask16 }
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn splat(x: f32) -> __m512 {
            _mm512_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn add(a: __m512, b: __m512) -> __m512 {
            _mm512_add_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn max(a: __m512, b: __m512) -> __m512 {
            _mm512_max_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn min(a: __m512, b: __m512) -> __m512 {
            _mm512_min_ps(a, b)
        }
        /// The even lanes of the 32 values `lo ++ hi`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn even(lo: __m512, hi: __m512) -> __m512 {
            let idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            _mm512_permutex2var_ps(lo, idx, hi)
        }

        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn sub(a: __m512, b: __m512) -> __m512 {
            _mm512_sub_ps(a, b)
        }
        /// The lanes whose bit is set, from `p + lane`; the others are zero and read nothing.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn load_bits(p: *const f32, bits: u32) -> __m512 {
            unsafe { _mm512_maskz_loadu_ps(bits as __mmask16, p) }
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn store_bits(p: *mut f32, bits: u32, v: __m512) {
            unsafe { _mm512_mask_storeu_ps(p, bits as __mmask16, v) }
        }
        /// The odd lanes of the 32 values `lo ++ hi`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn odd(lo: __m512, hi: __m512) -> __m512 {
            let idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            _mm512_permutex2var_ps(lo, idx, hi)
        }
        /// The first halves of `a` and `b` interleaved: `a0 b0 a1 b1 … a7 b7`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn zip_lo(a: __m512, b: __m512) -> __m512 {
            let idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            _mm512_permutex2var_ps(a, idx, b)
        }
        /// The second halves of `a` and `b` interleaved: `a8 b8 … a15 b15`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn zip_hi(a: __m512, b: __m512) -> __m512 {
            let idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            _mm512_permutex2var_ps(a, idx, b)
        }

        /// The 16 × 16 matrix of `rows` transposed: lane `i` of result `j` is lane `j` of
        /// `rows[i]` (32-bit, then 64-bit interleaves within 128-bit lanes, then two rounds of
        /// 128-bit lane shuffles: 64 shuffles).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn transpose(rows: [__m512; 16]) -> [__m512; 16] {
            let mut t = rows;
            for k in 0..8 {
                t[2 * k] = _mm512_unpacklo_ps(rows[2 * k], rows[2 * k + 1]);
                t[2 * k + 1] = _mm512_unpackhi_ps(rows[2 * k], rows[2 * k + 1]);
            }
            // u[4q + m], 128-bit lane L: channel 4L + m of rows 4q..4q + 4.
            let mut u = t;
            for q in 0..4 {
                let (a, b) = (_mm512_castps_pd(t[4 * q]), _mm512_castps_pd(t[4 * q + 1]));
                let (c, d) = (_mm512_castps_pd(t[4 * q + 2]), _mm512_castps_pd(t[4 * q + 3]));
                u[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
                u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
                u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
                u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
            }
            let mut out = u;
            for m in 0..4 {
                let (a, b, c, d) = (u[m], u[4 + m], u[8 + m], u[12 + m]);
                let x0 = _mm512_shuffle_f32x4::<0x44>(a, b);
                let x1 = _mm512_shuffle_f32x4::<0x44>(c, d);
                let x2 = _mm512_shuffle_f32x4::<0xEE>(a, b);
                let x3 = _mm512_shuffle_f32x4::<0xEE>(c, d);
                out[m] = _mm512_shuffle_f32x4::<0x88>(x0, x1);
                out[4 + m] = _mm512_shuffle_f32x4::<0xDD>(x0, x1);
                out[8 + m] = _mm512_shuffle_f32x4::<0x88>(x2, x3);
                out[12 + m] = _mm512_shuffle_f32x4::<0xDD>(x2, x3);
            }
            out
        }

        /// Lanes `s..s + 16` of `lo ++ hi`, for `s` ≤ 4.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn shifted(lo: __m512, hi: __m512, s: usize) -> __m512 {
            #[inline]
            #[target_feature(enable = "avx512f")]
            fn align<const S: i32>(lo: __m512, hi: __m512) -> __m512 {
                _mm512_castsi512_ps(_mm512_alignr_epi32::<S>(_mm512_castps_si512(hi), _mm512_castps_si512(lo)))
            }
            debug_assert!(s <= 4);
            match s {
                0 => lo,
                1 => align::<1>(lo, hi),
                2 => align::<2>(lo, hi),
                3 => align::<3>(lo, hi),
                _ => align::<4>(lo, hi),
            }
        }

        /// `if_set` in the lanes whose bit is set, `otherwise` in the others.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn select(bits: u32, if_set: __m512, otherwise: __m512) -> __m512 {
            _mm512_mask_blend_ps(bits as __mmask16, otherwise, if_set)
        }

        /// `1 / (1 + e^-x)`, as the elementwise programs compute it.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn sigmoid(x: __m512) -> __m512 {
            crate::elementwise::x86::z::sigmoid([x])[0]
        }
        /// [`sigmoid`] of `N` vectors, their steps interleaved (the same bits per lane).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn sigmoid_row<const N: usize>(x: [__m512; N]) -> [__m512; N] {
            crate::elementwise::x86::z::sigmoid(x)
        }
        /// SiLU of `N` vectors (see [`crate::conv::Activation::Silu`]; steps interleaved).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn silu_row<const N: usize>(x: [__m512; N]) -> [__m512; N] {
            crate::elementwise::x86::z::silu(x)
        }
        /// `tanh` of `N` vectors, as the elementwise programs compute it (steps interleaved).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn tanh_row<const N: usize>(x: [__m512; N]) -> [__m512; N] {
            crate::elementwise::x86::z::tanh(x)
        }
        /// `erf` of `N` vectors, as the elementwise programs compute it (steps interleaved).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn erf_row<const N: usize>(x: [__m512; N]) -> [__m512; N] {
            crate::elementwise::x86::z::erf(x)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn mul(a: __m512, b: __m512) -> __m512 {
            _mm512_mul_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn div(a: __m512, b: __m512) -> __m512 {
            _mm512_div_ps(a, b)
        }
        /// `min(max(alpha · x + beta, 0), 1)`, a NaN kept (see [`crate::conv::Activation`]).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn hard_sigmoid(x: __m512, alpha: __m512, beta: __m512) -> __m512 {
            let t = _mm512_add_ps(_mm512_mul_ps(alpha, x), beta);
            _mm512_min_ps(_mm512_set1_ps(1.0), _mm512_max_ps(_mm512_setzero_ps(), t))
        }
        /// `x < 0 ? x · alpha : x` (see [`crate::conv::Activation`]).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn leaky_relu(x: __m512, alpha: __m512) -> __m512 {
            _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps()), x, alpha)
        }
        /// `x · min(max(x / 6 + 0.5, 0), 1)`, a NaN kept (see [`crate::conv::Activation`]).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn hard_swish(x: __m512) -> __m512 {
            let t = _mm512_add_ps(_mm512_div_ps(x, _mm512_set1_ps(6.0)), _mm512_set1_ps(0.5));
            // `max`/`min` return their second operand when either is NaN.
            let t = _mm512_min_ps(_mm512_set1_ps(1.0), _mm512_max_ps(_mm512_setzero_ps(), t));
            _mm512_mul_ps(x, t)
        }

        super::tile_kernel!("avx512f");
        crate::blocked::blocked_kernel!("avx512f");
        crate::depthwise::depthwise_kernel!("avx512f");
        crate::depthwise::depthwise_rows_kernel!("avx512f");
        crate::direct::direct_kernel!("avx512f");
        crate::pool::max_pool_kernel!("avx512f");
        crate::pool::pool_blocked_kernel!("avx512f");
        crate::winograd::winograd_kernel!(#[target_feature(enable = "avx512f")]);
    }

    pub(crate) mod avx2 {
        use std::arch::x86_64::*;

        pub(crate) const LANES: usize = 8;
        pub(crate) type Vector = __m256;

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn load(p: *const f32) -> __m256 {
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn mask(n: usize) -> __m256i {
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
        }
        /// The first `n` (0..=8) lanes from `p`, the rest zero; nothing past them is read.
        /// Full vectors take a plain load: masked moves cost several times more on some CPUs
        /// (AMD's masked stores most of all).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn load_n(p: *const f32, n: usize) -> __m256 {
            unsafe { if n >= 8 { _mm256_loadu_ps(p) } else { _mm256_maskload_ps(p, mask(n)) } }
        }
        /// Stores the first `n` (0..=8) lanes of `v` at `p`: a partial vector as 4-, 2- and
        /// 1-lane pieces, which AMD's cores run many times faster than a masked store.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn store_n(p: *mut f32, v: __m256, n: usize) {
            if n >= 8 {
                return unsafe { _mm256_storeu_ps(p, v) };
            }
            let (mut p, mut n, mut part) = (p, n, _mm256_castps256_ps128(v));
            // SAFETY: each piece stores lanes below `n`.
            unsafe {
                if n >= 4 {
                    _mm_storeu_ps(p, part);
                    (p, n, part) = (p.add(4), n - 4, _mm256_extractf128_ps::<1>(v));
                }
                if n >= 2 {
                    _mm_store_sd(p.cast(), _mm_castps_pd(part));
                    (p, n, part) = (p.add(2), n - 2, _mm_movehl_ps(part, part));
                }
                if n == 1 {
                    _mm_store_ss(p, part);
                }
            }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn splat(x: f32) -> __m256 {
            _mm256_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn add(a: __m256, b: __m256) -> __m256 {
            _mm256_add_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn max(a: __m256, b: __m256) -> __m256 {
            _mm256_max_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn min(a: __m256, b: __m256) -> __m256 {
            _mm256_min_ps(a, b)
        }
        /// The even lanes of the 16 values `lo ++ hi`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn even(lo: __m256, hi: __m256) -> __m256 {
            // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the 64-bit pairs in order 0 2 1 3.
            let mixed = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(mixed)))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn sub(a: __m256, b: __m256) -> __m256 {
            _mm256_sub_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn bit_mask(bits: u32) -> __m256i {
            let bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
            _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits as i32), bit), bit)
        }
        /// The lanes whose bit is set, from `p + lane`; the others are zero and read nothing.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn load_bits(p: *const f32, bits: u32) -> __m256 {
            unsafe { if bits & 0xFF == 0xFF { _mm256_loadu_ps(p) } else { _mm256_maskload_ps(p, bit_mask(bits)) } }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn store_bits(p: *mut f32, bits: u32, v: __m256) {
            unsafe {
                if bits & 0xFF == 0xFF { _mm256_storeu_ps(p, v) } else { _mm256_maskstore_ps(p, bit_mask(bits), v) }
            }
        }
        /// The odd lanes of the 16 values `lo ++ hi`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn odd(lo: __m256, hi: __m256) -> __m256 {
            let mixed = _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(mixed)))
        }
        /// The first halves of `a` and `b` interleaved: `a0 b0 a1 b1 a2 b2 a3 b3`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn zip_lo(a: __m256, b: __m256) -> __m256 {
            _mm256_permute2f128_ps::<0x20>(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b))
        }
        /// The second halves of `a` and `b` interleaved: `a4 b4 … a7 b7`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn zip_hi(a: __m256, b: __m256) -> __m256 {
            _mm256_permute2f128_ps::<0x31>(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b))
        }

        /// The 8 × 8 matrix of `rows` transposed: lane `i` of result `j` is lane `j` of
        /// `rows[i]` (32-bit, then 64-bit interleaves within 128-bit lanes, then one round of
        /// 128-bit lane swaps: 24 shuffles).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn transpose(rows: [__m256; 8]) -> [__m256; 8] {
            let mut t = rows;
            for k in 0..4 {
                t[2 * k] = _mm256_unpacklo_ps(rows[2 * k], rows[2 * k + 1]);
                t[2 * k + 1] = _mm256_unpackhi_ps(rows[2 * k], rows[2 * k + 1]);
            }
            // u[4q + m], 128-bit lane L: channel 4L + m of rows 4q..4q + 4.
            let mut u = t;
            for q in 0..2 {
                let (a, b) = (_mm256_castps_pd(t[4 * q]), _mm256_castps_pd(t[4 * q + 1]));
                let (c, d) = (_mm256_castps_pd(t[4 * q + 2]), _mm256_castps_pd(t[4 * q + 3]));
                u[4 * q] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
                u[4 * q + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
                u[4 * q + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
                u[4 * q + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
            }
            let mut out = u;
            for m in 0..4 {
                out[m] = _mm256_permute2f128_ps::<0x20>(u[m], u[4 + m]);
                out[4 + m] = _mm256_permute2f128_ps::<0x31>(u[m], u[4 + m]);
            }
            out
        }

        /// `if_set` in the lanes whose bit is set, `otherwise` in the others.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn select(bits: u32, if_set: __m256, otherwise: __m256) -> __m256 {
            _mm256_blendv_ps(otherwise, if_set, _mm256_castsi256_ps(bit_mask(bits)))
        }

        /// `1 / (1 + e^-x)`, as the elementwise programs compute it.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn sigmoid(x: __m256) -> __m256 {
            crate::elementwise::x86::y::sigmoid([x])[0]
        }
        /// [`sigmoid`] of `N` vectors, their steps interleaved (the same bits per lane).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn sigmoid_row<const N: usize>(x: [__m256; N]) -> [__m256; N] {
            crate::elementwise::x86::y::sigmoid(x)
        }
        /// SiLU of `N` vectors (see [`crate::conv::Activation::Silu`]; steps interleaved).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn silu_row<const N: usize>(x: [__m256; N]) -> [__m256; N] {
            crate::elementwise::x86::y::silu(x)
        }
        /// `tanh` of `N` vectors, as the elementwise programs compute it (steps interleaved).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn tanh_row<const N: usize>(x: [__m256; N]) -> [__m256; N] {
            crate::elementwise::x86::y::tanh(x)
        }
        /// `erf` of `N` vectors, as the elementwise programs compute it (steps interleaved).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn erf_row<const N: usize>(x: [__m256; N]) -> [__m256; N] {
            crate::elementwise::x86::y::erf(x)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn mul(a: __m256, b: __m256) -> __m256 {
            _mm256_mul_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn div(a: __m256, b: __m256) -> __m256 {
            _mm256_div_ps(a, b)
        }
        /// `min(max(alpha · x + beta, 0), 1)`, a NaN kept (see [`crate::conv::Activation`]).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn hard_sigmoid(x: __m256, alpha: __m256, beta: __m256) -> __m256 {
            let t = _mm256_add_ps(_mm256_mul_ps(alpha, x), beta);
            _mm256_min_ps(_mm256_set1_ps(1.0), _mm256_max_ps(_mm256_setzero_ps(), t))
        }
        /// `x < 0 ? x · alpha : x` (see [`crate::conv::Activation`]).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn leaky_relu(x: __m256, alpha: __m256) -> __m256 {
            _mm256_blendv_ps(x, _mm256_mul_ps(x, alpha), _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps()))
        }
        /// `x · min(max(x / 6 + 0.5, 0), 1)`, a NaN kept (see [`crate::conv::Activation`]).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn hard_swish(x: __m256) -> __m256 {
            let t = _mm256_add_ps(_mm256_div_ps(x, _mm256_set1_ps(6.0)), _mm256_set1_ps(0.5));
            // `max`/`min` return their second operand when either is NaN.
            let t = _mm256_min_ps(_mm256_set1_ps(1.0), _mm256_max_ps(_mm256_setzero_ps(), t));
            _mm256_mul_ps(x, t)
        }

        super::tile_kernel!("avx2,fma");
        crate::blocked::blocked_kernel!("avx2,fma");
        crate::depthwise::depthwise_kernel!("avx2,fma");
        crate::pool::max_pool_kernel!("avx2,fma");
        crate::pool::pool_blocked_kernel!("avx2,fma");
        crate::winograd::winograd_kernel!(#[target_feature(enable = "avx2,fma")]);
    }
}
