//! f32 GEMM: `C[m×n] = A[m×k] · B[k×n]` plus a fused epilogue (bias per column, residual,
//! clamp, activation), B packed once (weights: at compile time) into zero-padded panels of
//! [`panel_width`] columns, A and C row-major with leading dimensions. Panels are the outer
//! loop: one panel (k × NR) stays in cache while every row block of A streams past it. With
//! one row (a GEMV), each panel is streamed once by a one-row tile.

use crate::tile::{self, Tile};
use crate::{Isa, KernelError, check_share, need, share, span};

pub use crate::tile::{block_rows, panel_width};

/// Bytes of A rows a band of [`sgemm_share`] keeps in L2 (half of 512 KiB, the smallest L2 of
/// the machines it targets: the panel of B and C's tiles need the rest).
const L2_BUDGET: usize = 256 << 10;

/// The fused tail of a GEMM: `activation(clamp(A·B + bias + residual))`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    /// One value per column of C, added to every row.
    pub bias: Option<&'a [f32]>,
    /// An `m × n` matrix (row stride given) added to C.
    pub residual: Option<(&'a [f32], usize)>,
    /// Bounds the result is clamped to (ReLU: `(0, inf)`; ReLU6: `(0, 6)`).
    pub clamp: Option<(f32, f32)>,
    /// Applied to each tile's results just after they are stored (see
    /// [`crate::conv::activate`]).
    pub activation: Option<crate::conv::Activation>,
}

/// Elements of B packed for `isa`: `ceil(n / NR)` panels of `k × NR`.
pub fn packed_b_len(isa: Isa, k: usize, n: usize) -> Result<usize, KernelError> {
    let nr = panel_width(isa);
    n.div_ceil(nr).checked_mul(nr).and_then(|w| w.checked_mul(k)).ok_or(KernelError::Overflow("packed B"))
}

/// Packs B (`k × n`; element `(p, j)` at `b[p * strides.0 + j * strides.1]`, so a transposed
/// B is packed by swapping the strides) into `packed` for `isa`.
pub fn pack_b(
    isa: Isa,
    b: &[f32],
    strides: (usize, usize),
    (k, n): (usize, usize),
    packed: &mut [f32],
) -> Result<(), KernelError> {
    if k > 0 && n > 0 {
        let last = (k - 1)
            .checked_mul(strides.0)
            .and_then(|r| (n - 1).checked_mul(strides.1).and_then(|c| r.checked_add(c)))
            .ok_or(KernelError::Overflow("B"))?;
        need("B", b.len(), last + 1)?;
    }
    let len = packed_b_len(isa, k, n)?;
    need("packed B", packed.len(), len)?;
    let nr = panel_width(isa);
    for (j, panel) in packed[..len].chunks_exact_mut((k * nr).max(1)).enumerate().take(n.div_ceil(nr)) {
        let cols = (n - j * nr).min(nr);
        for p in 0..k {
            let row = &mut panel[p * nr..(p + 1) * nr];
            for (c, v) in row[..cols].iter_mut().enumerate() {
                *v = b[p * strides.0 + (j * nr + c) * strides.1];
            }
            row[cols..].fill(0.0);
        }
    }
    Ok(())
}

/// `C = A · B` with the epilogue, B packed by [`pack_b`] for the same `isa`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    isa: Isa,
    dims: (usize, usize, usize),
    a: &[f32],
    lda: usize,
    packed_b: &[f32],
    c: &mut [f32],
    ldc: usize,
    epilogue: Epilogue<'_>,
) -> Result<(), KernelError> {
    sgemm_share(isa, dims, (a, lda), packed_b, (c, ldc), epilogue, (0, 1))
}

/// Share `task` of `tasks` of [`sgemm`]: the tiles (panel-major) are split into `tasks`
/// contiguous runs, so tasks write disjoint parts of C and together all of it.
pub fn sgemm_share(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    (a, lda): (&[f32], usize),
    packed_b: &[f32],
    (c, ldc): (&mut [f32], usize),
    epilogue: Epilogue<'_>,
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    check_share(task, tasks)?;
    need("A", a.len(), span(m, k, lda, "A")?)?;
    need("C", c.len(), span(m, n, ldc, "C")?)?;
    need("packed B", packed_b.len(), packed_b_len(isa, k, n)?)?;
    if let Some(bias) = epilogue.bias {
        need("bias", bias.len(), n)?;
    }
    if let Some((r, ldr)) = epilogue.residual {
        need("residual", r.len(), span(m, n, ldr, "residual")?)?;
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (mr, nr) = (block_rows(isa), panel_width(isa));
    let (row_blocks, panels) = (m.div_ceil(mr), n.div_ceil(nr));
    // Rows are taken in bands whose A rows fit half of a 512 KiB L2 cache, every panel of B
    // passing each band: A is then read from L2, B panels stream from L3 once per band (all
    // of A per panel would stream from L3, which other cores' traffic slows). Which tile an
    // element falls in does not change, nor its sum: the order only moves memory traffic.
    let band = (L2_BUDGET / (k.max(1) * 4) / mr).clamp(1, row_blocks);
    let (lo, hi) = share(panels * row_blocks, tasks, task);
    let (clamp, (clo, chi)) = (epilogue.clamp.is_some(), epilogue.clamp.unwrap_or((0.0, 0.0)));
    for item in lo..hi {
        // Items run band by band, panel by panel within a band, row block by row block within
        // a panel; the last band may be short.
        let first = item / (band * panels) * band;
        let blocks = band.min(row_blocks - first);
        let within = item - first * panels;
        let (j, i) = (within / blocks, (first + within % blocks) * mr);
        let (rows, cols) = ((m - i).min(mr), (n - j * nr).min(nr));
        let t = Tile {
            k,
            // With k = 0, A may be empty and is never read.
            a: a.as_ptr().wrapping_add(i * lda),
            lda,
            packed_a: false,
            b: packed_b[j * k * nr..].as_ptr(),
            ldb: nr,
            c: c[i * ldc + j * nr..].as_mut_ptr(),
            ldc,
            rows,
            cols,
            row_bias: std::ptr::null(),
            col_bias: epilogue.bias.map_or(std::ptr::null(), |b| b[j * nr..].as_ptr()),
            residual: epilogue.residual.map_or(std::ptr::null(), |(r, ldr)| r[i * ldr + j * nr..].as_ptr()),
            ldr: epilogue.residual.map_or(0, |(_, ldr)| ldr),
            clamp,
            lo: clo,
            hi: chi,
            stream_b: false,
        };
        // SAFETY: the lengths checked above cover the tile: rows `i..i + rows` of A (k each)
        // and of C and the residual (`j * nr + cols <= n` columns), panel `j` of B (k × NR),
        // and `cols` bias values.
        unsafe { tile::run(isa, &t) };
        crate::conv::activate_rows(isa, epilogue.activation, c, (i * ldc + j * nr, rows, cols, ldc));
    }
    Ok(())
}
