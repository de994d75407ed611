//! Integer matrix products, the reductions of `MatMulInteger`, `ConvInteger` and the QLinear
//! operators: `C[r, c] = Σ_d (P[r, d] − zp[r]) · (Q[d, c] − zq[c])` over u8 or i8 bytes, in
//! wrapping i32 arithmetic, which is what the loop IR computes, so results are the
//! interpreter's bit for bit on every ISA. P's rows are broadcast and Q's columns are vector
//! lanes: a GEMM's A is P and its constant B is Q; a convolution's weights are P and its input,
//! gathered panel by panel (im2col), is Q.
//!
//! Two packed layouts. Both hold 4 bytes per (depth step, line), so one step of one line of P
//! is one broadcast 32-bit value:
//! - **quads** (AVX-512 VNNI `vpdpbusd`, 64 byte products per instruction): 4 depth bytes per
//!   step, Q unsigned and P signed, a byte of the other kind moved over by flipping its top
//!   bit. Zero points and flips apply after the dot, through
//!   `Σ (p' − α)(q' − β) = Σ p'q' − β·Σ p' − α·Σ q' + D·α·β`; each packed block stores its
//!   lines' offsets (`α` or `β`) and sums;
//! - **pairs** (AVX2 `vpmaddwd`, and the scalar code): 2 depth values per step as i16, each
//!   the byte minus its zero point. This is exact: both factors lie within ±255, so a pair's
//!   two products sum below 2^17. The dot is then the result.
//!
//! Packed blocks hold [`Int8Isa::block_rows`] lines of P or [`Int8Isa::panel_width`] lines
//! of Q; lines and depth past the operand are zero, which adds nothing to dots or sums.

use crate::conv::{Conv2d, pack_panel};
use crate::{KernelError, check_share, need, share};

/// The instruction set of the integer kernels, which fixes the packed layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Int8Isa {
    /// AVX-512 with VNNI: quads, 8 rows × 32 columns per tile.
    Vnni512,
    /// AVX2: pairs, 6 rows × 16 columns per tile.
    Avx2,
    /// Portable scalar code: pairs, as AVX2.
    Scalar,
}

impl Int8Isa {
    /// The best variant of this CPU.
    pub fn detect() -> Int8Isa {
        [Int8Isa::Vnni512, Int8Isa::Avx2].into_iter().find(|i| i.is_available()).unwrap_or(Int8Isa::Scalar)
    }

    /// The variant that goes with the f32 kernels' `isa` on this CPU: VNNI beside AVX-512
    /// when the CPU has it, else AVX2 when it has that.
    pub fn for_isa(isa: crate::Isa) -> Int8Isa {
        match isa {
            crate::Isa::Avx512 if Int8Isa::Vnni512.is_available() => Int8Isa::Vnni512,
            crate::Isa::Avx512 | crate::Isa::Avx2Fma if Int8Isa::Avx2.is_available() => Int8Isa::Avx2,
            _ => Int8Isa::Scalar,
        }
    }

    /// Whether this CPU runs the variant's vector code (otherwise it runs scalar code on the
    /// variant's layout, with the same results).
    pub fn is_available(self) -> bool {
        match self {
            Int8Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Int8Isa::Vnni512 => {
                std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            Int8Isa::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The number generated code passes for this variant (see [`crate::abi`]).
    pub fn code(self) -> i64 {
        match self {
            Int8Isa::Scalar => 0,
            Int8Isa::Avx2 => 1,
            Int8Isa::Vnni512 => 2,
        }
    }

    pub fn from_code(code: i64) -> Option<Int8Isa> {
        [Int8Isa::Scalar, Int8Isa::Avx2, Int8Isa::Vnni512].into_iter().find(|i| i.code() == code)
    }

    /// The name `heron lower` prints.
    pub fn name(self) -> &'static str {
        match self {
            Int8Isa::Vnni512 => "avx512vnni",
            Int8Isa::Avx2 => "avx2",
            Int8Isa::Scalar => "scalar",
        }
    }

    fn quads(self) -> bool {
        self == Int8Isa::Vnni512
    }

    /// Lines of P per packed block (the rows of a tile).
    pub fn block_rows(self) -> usize {
        if self.quads() { 8 } else { 6 }
    }

    /// Lines of Q per packed block (the columns of a tile).
    pub fn panel_width(self) -> usize {
        if self.quads() { 32 } else { 16 }
    }

    /// Depth values per step.
    fn step_depth(self) -> usize {
        if self.quads() { 4 } else { 2 }
    }

    fn steps(self, depth: usize) -> usize {
        depth.div_ceil(self.step_depth())
    }

    /// Bytes of one packed block of `lines` lines: the steps, then with quads each line's
    /// offset and sum (two i32).
    fn block_bytes(self, lines: usize, depth: usize) -> Result<usize, KernelError> {
        let overflow = KernelError::Overflow("packed block");
        let data = self.steps(depth).checked_mul(lines * 4).ok_or(overflow.clone())?;
        data.checked_add(if self.quads() { lines * 8 } else { 0 }).ok_or(overflow)
    }
}

/// The largest tile, for the stack arrays every variant shares.
const MAX_ROWS: usize = 8;
const MAX_COLS: usize = 32;

/// One operand's bytes: their bit patterns, read as i8 when `signed`, else as u8.
fn value(bits: u8, signed: bool) -> i32 {
    if signed { i32::from(bits as i8) } else { i32::from(bits) }
}

/// Which operand a packed block holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    P,
    Q,
}

/// Packs one block of `lanes` lines (the first `width` of them real) and `depth` values:
/// `line_values(d, values)` gives the bytes of the real lines at depth `d`, `zero[l]` is line
/// `l`'s zero point. `out` holds at least [`Int8Isa::block_bytes`]. A step's values are
/// gathered first, then written as one contiguous row of the block.
fn pack_block(
    isa: Int8Isa,
    side: Side,
    signed: bool,
    (lanes, width, depth): (usize, usize, usize),
    zero: &[i32; MAX_COLS],
    mut line_values: impl FnMut(usize, &mut [u8]),
    out: &mut [u8],
) {
    let step = isa.step_depth();
    let steps = isa.steps(depth);
    let mut values = [[0u8; MAX_COLS]; 4];
    let mut sums = [0i32; MAX_COLS];
    // The bit that turns the operand's bytes into the quads' kind: P signed, Q unsigned.
    let flip = if signed == (side == Side::P) { 0 } else { 0x80 };
    for (s, row) in out[..steps * lanes * 4].chunks_exact_mut(lanes * 4).enumerate() {
        let count = (depth - s * step).min(step);
        for (t, v) in values[..count].iter_mut().enumerate() {
            line_values(s * step + t, &mut v[..width]);
        }
        row[width * 4..].fill(0);
        // Depth past the operand reads as the value that packs to zero.
        for v in &mut values[count..step] {
            if isa.quads() {
                v[..width].fill(flip);
            } else {
                for (b, z) in v[..width].iter_mut().zip(zero) {
                    *b = *z as u8;
                }
            }
        }
        // One 32-bit word per line, so that the compiler vectorizes the loop.
        let words = row[..width * 4].chunks_exact_mut(4);
        if isa.quads() {
            let [a, b, c, d] = &values;
            for (l, word) in words.enumerate() {
                let quad = [a[l] ^ flip, b[l] ^ flip, c[l] ^ flip, d[l] ^ flip];
                let sum: i32 = quad.iter().map(|&q| value(q, side == Side::P)).sum();
                sums[l] = sums[l].wrapping_add(sum);
                word.copy_from_slice(&quad);
            }
        } else {
            let [a, b, ..] = &values;
            for (l, word) in words.enumerate() {
                // Within ±255: an i16.
                let lo = (value(a[l], signed) - zero[l]) as u16 as u32;
                let hi = (value(b[l], signed) - zero[l]) as u16 as u32;
                word.copy_from_slice(&(lo | hi << 16).to_le_bytes());
            }
        }
    }
    if isa.quads() {
        // The offset: p − zp = p' − α and q − zq = q' − β.
        let shift = if flip == 0 { 0 } else { 128 };
        let data = steps * lanes * 4;
        let terms = &mut out[data..data + lanes * 8];
        for (l, term) in terms.chunks_exact_mut(8).enumerate() {
            let (offset, sum) = if l < width {
                (if side == Side::P { zero[l] - shift } else { zero[l] + shift }, sums[l])
            } else {
                (0, 0)
            };
            term[..4].copy_from_slice(&offset.to_le_bytes());
            term[4..].copy_from_slice(&sum.to_le_bytes());
        }
    }
}

/// One tile: a packed block of P and one of Q, and how many of their lines are real.
struct Tile<'a> {
    depth: usize,
    p: &'a [u8],
    q: &'a [u8],
    rows: usize,
    cols: usize,
}

fn term(block: &[u8], data: usize, line: usize) -> (i32, i32) {
    let at = data + line * 8;
    let word = |k: usize| i32::from_le_bytes(block[k..k + 4].try_into().expect("4 bytes"));
    (word(at), word(at + 4))
}

/// Computes a tile into `c` (row `r` at `c[r * ldc..]`, `cols` values), with the variant's
/// vector code when `vectors` (the CPU has it: checked once per call, not per tile).
fn run_tile(isa: Int8Isa, vectors: bool, t: &Tile<'_>, c: &mut [i32], ldc: usize) {
    let (mr, nr) = (isa.block_rows(), isa.panel_width());
    let steps = isa.steps(t.depth);
    let mut dot = [0i32; MAX_ROWS * MAX_COLS];
    let (p_data, q_data) = (steps * mr * 4, steps * nr * 4);
    let done = vectors && simd::dot(isa, steps, &t.p[..p_data], &t.q[..q_data], &mut dot);
    if !done {
        dot_scalar(isa, steps, &t.p[..p_data], &t.q[..q_data], &mut dot);
    }
    let depth = t.depth as i32;
    for r in 0..t.rows {
        let row = &mut c[r * ldc..r * ldc + t.cols];
        let dots = &dot[r * nr..r * nr + t.cols];
        if isa.quads() {
            let (alpha, p_sum) = term(t.p, p_data, r);
            for (col, (out, &v)) in row.iter_mut().zip(dots).enumerate() {
                let (beta, q_sum) = term(t.q, q_data, col);
                *out = v
                    .wrapping_sub(beta.wrapping_mul(p_sum))
                    .wrapping_sub(alpha.wrapping_mul(q_sum))
                    .wrapping_add(depth.wrapping_mul(alpha).wrapping_mul(beta));
            }
        } else {
            row.copy_from_slice(dots);
        }
    }
}

/// The dot products of one block of P and one of Q, `dot[r * NR + c]`: the reference every
/// vector variant matches.
fn dot_scalar(isa: Int8Isa, steps: usize, p: &[u8], q: &[u8], dot: &mut [i32]) {
    let (mr, nr) = (isa.block_rows(), isa.panel_width());
    dot[..mr * nr].fill(0);
    for s in 0..steps {
        for r in 0..mr {
            let pw = &p[(s * mr + r) * 4..][..4];
            for c in 0..nr {
                let qw = &q[(s * nr + c) * 4..][..4];
                let sum = if isa.quads() {
                    (0..4).fold(0i32, |acc, t| acc + i32::from(pw[t] as i8) * i32::from(qw[t]))
                } else {
                    let half = |w: &[u8], t: usize| i32::from(i16::from_le_bytes([w[2 * t], w[2 * t + 1]]));
                    half(pw, 0) * half(qw, 0) + half(pw, 1) * half(qw, 1)
                };
                dot[r * nr + c] = dot[r * nr + c].wrapping_add(sum);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{Int8Isa, MAX_COLS, MAX_ROWS};

    /// The dot products with the variant's instructions; false when it has none here.
    pub(super) fn dot(isa: Int8Isa, steps: usize, p: &[u8], q: &[u8], dot: &mut [i32; MAX_ROWS * MAX_COLS]) -> bool {
        let (mr, nr) = (isa.block_rows(), isa.panel_width());
        assert!(p.len() >= steps * mr * 4 && q.len() >= steps * nr * 4, "packed blocks shorter than their steps");
        // SAFETY: the caller checked the features; the blocks hold `steps` steps (asserted).
        unsafe {
            match isa {
                Int8Isa::Vnni512 => quads_512(steps, p.as_ptr(), q.as_ptr(), dot),
                Int8Isa::Avx2 => pairs_256(steps, p.as_ptr(), q.as_ptr(), dot),
                Int8Isa::Scalar => return false,
            }
        }
        true
    }

    /// 8 rows × 32 columns: per step, two vectors of Q (16 columns × 4 bytes each) and one
    /// broadcast quad of P per row.
    ///
    /// # Safety
    /// AVX-512F/BW/VNNI present; `p` holds `steps × 8 × 4` bytes, `q` `steps × 32 × 4`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn quads_512(steps: usize, p: *const u8, q: *const u8, dot: &mut [i32; MAX_ROWS * MAX_COLS]) {
        let mut acc = [[_mm512_setzero_si512(); 2]; 8];
        for s in 0..steps {
            // SAFETY: within the blocks (the caller's promise).
            unsafe {
                let qs = q.add(s * 128);
                let (q0, q1) = (_mm512_loadu_si512(qs.cast()), _mm512_loadu_si512(qs.add(64).cast()));
                let ps = p.add(s * 32);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let pr = _mm512_set1_epi32(ps.add(r * 4).cast::<i32>().read_unaligned());
                    acc[0] = _mm512_dpbusd_epi32(acc[0], q0, pr);
                    acc[1] = _mm512_dpbusd_epi32(acc[1], q1, pr);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: row `r` of the 8 × 32 result lies within `dot`.
            unsafe {
                _mm512_storeu_si512(dot.as_mut_ptr().add(r * 32).cast(), acc[0]);
                _mm512_storeu_si512(dot.as_mut_ptr().add(r * 32 + 16).cast(), acc[1]);
            }
        }
    }

    /// 6 rows × 16 columns: per step, two vectors of Q (8 columns × 2 i16 each) and one
    /// broadcast pair of P per row, multiplied and summed pairwise by `vpmaddwd`.
    ///
    /// # Safety
    /// AVX2 present; `p` holds `steps × 6 × 4` bytes, `q` `steps × 16 × 4`.
    #[target_feature(enable = "avx2")]
    unsafe fn pairs_256(steps: usize, p: *const u8, q: *const u8, dot: &mut [i32; MAX_ROWS * MAX_COLS]) {
        let mut acc = [[_mm256_setzero_si256(); 2]; 6];
        for s in 0..steps {
            // SAFETY: within the blocks (the caller's promise).
            unsafe {
                let qs = q.add(s * 64);
                let (q0, q1) = (_mm256_loadu_si256(qs.cast()), _mm256_loadu_si256(qs.add(32).cast()));
                let ps = p.add(s * 24);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let pr = _mm256_set1_epi32(ps.add(r * 4).cast::<i32>().read_unaligned());
                    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(q0, pr));
                    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(q1, pr));
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: row `r` of the 6 × 16 result lies within `dot`.
            unsafe {
                _mm256_storeu_si256(dot.as_mut_ptr().add(r * 16).cast(), acc[0]);
                _mm256_storeu_si256(dot.as_mut_ptr().add(r * 16 + 8).cast(), acc[1]);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    use super::{Int8Isa, MAX_COLS, MAX_ROWS};

    pub(super) fn dot(_: Int8Isa, _: usize, _: &[u8], _: &[u8], _: &mut [i32; MAX_ROWS * MAX_COLS]) -> bool {
        false
    }
}

/// Zero points of the lines of one block, from one value per line or one for all.
fn block_zeros(zero: &[i32], first: usize, width: usize) -> [i32; MAX_COLS] {
    let mut z = [0; MAX_COLS];
    for (l, v) in z[..width].iter_mut().enumerate() {
        *v = if zero.len() == 1 { zero[0] } else { zero[first + l] };
    }
    z
}

/// One zero point for all lines or one per line, each a value of the operand's bytes.
fn check_zeros(bytes: &Bytes<'_>, lines: usize) -> Result<(), KernelError> {
    let range = if bytes.signed { -128..=127 } else { 0..=255 };
    if bytes.zero.len() != 1 && bytes.zero.len() != lines {
        Err(KernelError::Geometry("a zero point per line or one for all"))
    } else if !bytes.zero.iter().all(|z| range.contains(z)) {
        Err(KernelError::Geometry("a zero point outside its bytes' range"))
    } else {
        Ok(())
    }
}

/// A byte operand: its bits, whether they are i8, and its zero point.
#[derive(Clone, Copy, Debug)]
pub struct Bytes<'a> {
    pub data: &'a [u8],
    pub signed: bool,
    /// One zero point for all, or one per row (of P) or column (of Q).
    pub zero: &'a [i32],
}

/// Bytes of B (`k × n`) packed for `isa`: `ceil(n / NR)` panels.
pub fn packed_b_len(isa: Int8Isa, k: usize, n: usize) -> Result<usize, KernelError> {
    n.div_ceil(isa.panel_width())
        .checked_mul(isa.block_bytes(isa.panel_width(), k)?)
        .ok_or(KernelError::Overflow("packed B"))
}

/// Packs B (`k × n`; element `(p, j)` at `b.data[p * strides.0 + j * strides.1]`), its zero
/// point one for all or one per column.
pub fn pack_b(
    isa: Int8Isa,
    b: Bytes<'_>,
    strides: (usize, usize),
    (k, n): (usize, usize),
    packed: &mut [u8],
) -> Result<(), KernelError> {
    check_zeros(&b, n)?;
    if k > 0 && n > 0 {
        let last = (k - 1)
            .checked_mul(strides.0)
            .and_then(|r| (n - 1).checked_mul(strides.1).and_then(|c| r.checked_add(c)))
            .ok_or(KernelError::Overflow("B"))?;
        need("B", b.data.len(), last + 1)?;
    }
    need("packed B", packed.len(), packed_b_len(isa, k, n)?)?;
    let nr = isa.panel_width();
    let block = isa.block_bytes(nr, k)?;
    for j in 0..n.div_ceil(nr) {
        let width = (n - j * nr).min(nr);
        let zero = block_zeros(b.zero, j * nr, width);
        let values = |p: usize, line: &mut [u8]| {
            for (c, v) in line.iter_mut().enumerate() {
                *v = b.data[p * strides.0 + (j * nr + c) * strides.1];
            }
        };
        pack_block(isa, Side::Q, b.signed, (nr, width, k), &zero, values, &mut packed[j * block..(j + 1) * block]);
    }
    Ok(())
}

/// Scratch bytes per task of [`gemm_share`]: one packed block of A's rows.
pub fn gemm_scratch_len(isa: Int8Isa, k: usize) -> Result<usize, KernelError> {
    isa.block_bytes(isa.block_rows(), k)
}

/// Share `task` of `tasks` of `C = Σ (A − za)(B − zb)`: `a` row-major `m × k` (one zero point
/// for all rows, or one per row), B packed by [`pack_b`] for the same `isa`, `c` row-major
/// `m × n`. The tiles, row block by row block, are split into `tasks` contiguous runs, so a
/// task packs each of its row blocks of A once.
pub fn gemm_share(
    isa: Int8Isa,
    (m, n, k): (usize, usize, usize),
    a: Bytes<'_>,
    packed_b: &[u8],
    c: &mut [i32],
    scratch: &mut [u8],
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    check_share(task, tasks)?;
    check_zeros(&a, m)?;
    let mn = m.checked_mul(n).ok_or(KernelError::Overflow("C"))?;
    need("A", a.data.len(), m.checked_mul(k).ok_or(KernelError::Overflow("A"))?)?;
    need("C", c.len(), mn)?;
    need("packed B", packed_b.len(), packed_b_len(isa, k, n)?)?;
    need("scratch", scratch.len(), gemm_scratch_len(isa, k)?)?;
    if mn == 0 {
        return Ok(());
    }
    let (mr, nr) = (isa.block_rows(), isa.panel_width());
    let (q_block, p_block) = (isa.block_bytes(nr, k)?, gemm_scratch_len(isa, k)?);
    let panels = n.div_ceil(nr);
    let (lo, hi) = share(m.div_ceil(mr) * panels, tasks, task);
    let vectors = isa.is_available();
    let mut packed_row_block = None;
    for item in lo..hi {
        let (i, j) = ((item / panels) * mr, item % panels);
        let rows = (m - i).min(mr);
        if packed_row_block != Some(i) {
            let zero = block_zeros(a.zero, i, rows);
            let values = |p: usize, line: &mut [u8]| {
                for (r, v) in line.iter_mut().enumerate() {
                    *v = a.data[(i + r) * k + p];
                }
            };
            pack_block(isa, Side::P, a.signed, (mr, rows, k), &zero, values, &mut scratch[..p_block]);
            packed_row_block = Some(i);
        }
        let cols = (n - j * nr).min(nr);
        let t = Tile { depth: k, p: &scratch[..p_block], q: &packed_b[j * q_block..(j + 1) * q_block], rows, cols };
        run_tile(isa, vectors, &t, &mut c[i * n + j * nr..], n);
    }
    Ok(())
}

/// Bytes of a convolution's weights packed for `isa`: per group, blocks of its output
/// channels' rows.
pub fn conv_packed_weights_len(isa: Int8Isa, geo: &Conv2d) -> Result<usize, KernelError> {
    geo.check()?;
    let blocks = (geo.out_channels / geo.groups).div_ceil(isa.block_rows()).checked_mul(geo.groups);
    blocks
        .and_then(|b| b.checked_mul(isa.block_bytes(isa.block_rows(), geo.depth().ok()?).ok()?))
        .ok_or(KernelError::Overflow("packed weights"))
}

/// Packs a convolution's weights (`[M, C/g, KH, KW]` bytes), their zero point one for all or
/// one per output channel.
pub fn conv_pack_weights(isa: Int8Isa, geo: &Conv2d, w: Bytes<'_>, packed: &mut [u8]) -> Result<(), KernelError> {
    check_zeros(&w, geo.out_channels)?;
    need("weights", w.data.len(), geo.weights_len()?)?;
    need("packed weights", packed.len(), conv_packed_weights_len(isa, geo)?)?;
    let (mr, depth) = (isa.block_rows(), geo.depth()?);
    let mg = geo.out_channels / geo.groups;
    let block = isa.block_bytes(mr, depth)?;
    let mut at = 0;
    for g in 0..geo.groups {
        for first in (0..mg).step_by(mr) {
            let (oc, width) = (g * mg + first, (mg - first).min(mr));
            let zero = block_zeros(w.zero, oc, width);
            let values = |d: usize, line: &mut [u8]| {
                for (r, v) in line.iter_mut().enumerate() {
                    *v = w.data[(oc + r) * depth + d];
                }
            };
            pack_block(isa, Side::P, w.signed, (mr, width, depth), &zero, values, &mut packed[at..at + block]);
            at += block;
        }
    }
    Ok(())
}

/// Scratch bytes per task of [`conv_share`]: one packed panel of the input, and the same
/// panel gathered (im2col) before packing.
pub fn conv_scratch_len(isa: Int8Isa, geo: &Conv2d) -> Result<usize, KernelError> {
    let (nr, depth) = (isa.panel_width(), geo.depth()?);
    let gathered = depth.checked_mul(nr).ok_or(KernelError::Overflow("scratch"))?;
    isa.block_bytes(nr, depth)?.checked_add(gathered).ok_or(KernelError::Overflow("scratch"))
}

/// Share `task` of `tasks` of the integer convolution `out = Σ (x − zx)(w − zw)`: `x` the
/// NCHW input bytes with one zero point, which the padding holds (as `ConvInteger` pads),
/// weights packed by [`conv_pack_weights`] for the same `isa`, `out` NCHW i32. The work is
/// split by panels of output pixels (per image and group); each task gathers a panel once
/// and multiplies every weight block of its group with it.
pub fn conv_share(
    isa: Int8Isa,
    geo: &Conv2d,
    x: Bytes<'_>,
    packed_w: &[u8],
    out: &mut [i32],
    scratch: &mut [u8],
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    check_share(task, tasks)?;
    check_zeros(&x, 1)?;
    need("input", x.data.len(), geo.input_len()?)?;
    need("output", out.len(), geo.output_len()?)?;
    need("packed weights", packed_w.len(), conv_packed_weights_len(isa, geo)?)?;
    need("scratch", scratch.len(), conv_scratch_len(isa, geo)?)?;
    let (mr, nr, depth) = (isa.block_rows(), isa.panel_width(), geo.depth()?);
    let (cg, mg) = (geo.in_channels / geo.groups, geo.out_channels / geo.groups);
    let pixels = geo.out_h * geo.out_w;
    let plane = geo.in_h * geo.in_w;
    let (p_block, q_block) = (isa.block_bytes(mr, depth)?, isa.block_bytes(nr, depth)?);
    let row_blocks = mg.div_ceil(mr);
    let panels = pixels.div_ceil(nr);
    let items = geo.batch.checked_mul(geo.groups).and_then(|b| b.checked_mul(panels));
    let (lo, hi) = share(items.ok_or(KernelError::Overflow("panels"))?, tasks, task);
    let vectors = isa.is_available();
    let pad_bits = x.zero[0] as u8;
    let zero = [x.zero[0]; MAX_COLS];
    for item in lo..hi {
        let (image, g, j) = (item / (geo.groups * panels), item / panels % geo.groups, item % panels);
        let width = (pixels - j * nr).min(nr);
        // The panel gathered row by row (im2col), then packed from those rows.
        let channels = &x.data[(image * geo.in_channels + g * cg) * plane..][..cg * plane];
        let (packed, gathered) = scratch.split_at_mut(q_block);
        let gathered = &mut gathered[..depth * nr];
        pack_panel(geo, channels, (j * nr, width), nr, gathered, pad_bits);
        let values = |d: usize, line: &mut [u8]| line.copy_from_slice(&gathered[d * nr..d * nr + line.len()]);
        pack_block(isa, Side::Q, x.signed, (nr, width, depth), &zero, values, packed);
        for b in 0..row_blocks {
            let rows = (mg - b * mr).min(mr);
            let p = &packed_w[(g * row_blocks + b) * p_block..][..p_block];
            let t = Tile { depth, p, q: packed, rows, cols: width };
            let first = (image * geo.out_channels + g * mg + b * mr) * pixels + j * nr;
            run_tile(isa, vectors, &t, &mut out[first..], pixels);
        }
    }
    Ok(())
}
