//! f32 GEMM: `C[m×n] = A[m×k] · B[k×n]`, then a fused epilogue (bias per column, ReLU). B is
//! packed once (weights: at compile time) into panels of `panel_width` columns, zero-padded;
//! A and C are row-major with leading dimensions. The microkernel keeps an `MR × NR` block of C
//! in registers over the whole reduction (AVX-512: 12 × 32 in 24 zmm; AVX2: 6 × 16 in 12 ymm),
//! so C is written once, with the epilogue applied. Panels are the outer loop: one panel of B
//! (k × NR) stays in cache while every row block of A streams past it. Edge blocks go through
//! the caller's scratch (A rows padded to MR, a C tile), so vector loads and stores never leave
//! the operands.

use crate::{Isa, KernelError};

/// The fused tail of a GEMM.
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    /// Added to every row (one value per column of C).
    pub bias: Option<&'a [f32]>,
    /// max(x, 0) after the bias.
    pub relu: bool,
}

/// Columns of B per packed panel.
pub fn panel_width(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 32,
        Isa::Avx2Fma => 16,
        Isa::Scalar => 8,
    }
}

/// Rows of C per microkernel call.
pub fn block_rows(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 12,
        Isa::Avx2Fma => 6,
        Isa::Scalar => 4,
    }
}

/// Elements of B packed for `isa`: `ceil(n / NR)` panels of `k × NR`.
pub fn packed_b_len(isa: Isa, k: usize, n: usize) -> Result<usize, KernelError> {
    let nr = panel_width(isa);
    n.div_ceil(nr).checked_mul(nr).and_then(|w| w.checked_mul(k)).ok_or(KernelError::Overflow("packed B"))
}

/// Elements of scratch one call needs: A rows padded to MR, and one C tile.
pub fn scratch_len(isa: Isa, k: usize) -> Result<usize, KernelError> {
    let (mr, nr) = (block_rows(isa), panel_width(isa));
    mr.checked_mul(k).and_then(|a| a.checked_add(mr * nr)).ok_or(KernelError::Overflow("scratch"))
}

fn need(what: &'static str, got: usize, need: usize) -> Result<(), KernelError> {
    if got < need { Err(KernelError::TooShort { what, got, need }) } else { Ok(()) }
}

/// Elements a row-major `rows × cols` matrix with leading dimension `ld` spans.
fn span(rows: usize, cols: usize, ld: usize, what: &'static str) -> Result<usize, KernelError> {
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    if ld < cols {
        return Err(KernelError::TooShort { what, got: ld, need: cols });
    }
    (rows - 1).checked_mul(ld).and_then(|x| x.checked_add(cols)).ok_or(KernelError::Overflow(what))
}

/// Packs B (`k × n`, row-major, leading dimension `ldb`) into `packed` for `isa`.
pub fn pack_b(isa: Isa, b: &[f32], ldb: usize, k: usize, n: usize, packed: &mut [f32]) -> Result<(), KernelError> {
    need("B", b.len(), span(k, n, ldb, "B")?)?;
    let len = packed_b_len(isa, k, n)?;
    need("packed B", packed.len(), len)?;
    let nr = panel_width(isa);
    for (j, panel) in packed[..len].chunks_exact_mut((k * nr).max(1)).enumerate().take(n.div_ceil(nr)) {
        let cols = (n - j * nr).min(nr);
        for p in 0..k {
            let row = &mut panel[p * nr..(p + 1) * nr];
            row[..cols].copy_from_slice(&b[p * ldb + j * nr..p * ldb + j * nr + cols]);
            row[cols..].fill(0.0);
        }
    }
    Ok(())
}

/// `C = A · B` with the epilogue, B packed by [`pack_b`] for the same `isa`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    lda: usize,
    packed_b: &[f32],
    c: &mut [f32],
    ldc: usize,
    epilogue: Epilogue<'_>,
    scratch: &mut [f32],
) -> Result<(), KernelError> {
    if !isa.is_available() {
        return Err(KernelError::Unavailable { isa });
    }
    need("A", a.len(), span(m, k, lda, "A")?)?;
    need("C", c.len(), span(m, n, ldc, "C")?)?;
    need("packed B", packed_b.len(), packed_b_len(isa, k, n)?)?;
    need("scratch", scratch.len(), scratch_len(isa, k)?)?;
    if let Some(bias) = epilogue.bias {
        need("bias", bias.len(), n)?;
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // No products: C is the epilogue of zero (A may then hold nothing at all).
        for i in 0..m {
            for (j, out) in c[i * ldc..i * ldc + n].iter_mut().enumerate() {
                let v = epilogue.bias.map_or(0.0, |b| b[j]);
                *out = if epilogue.relu { v.max(0.0) } else { v };
            }
        }
        return Ok(());
    }
    let (mr, nr) = (block_rows(isa), panel_width(isa));
    let (a_pad, tile) = scratch.split_at_mut(mr * k);
    for j in 0..n.div_ceil(nr) {
        let cols = (n - j * nr).min(nr);
        let panel = &packed_b[j * k * nr..(j + 1) * k * nr];
        // The panel's bias, zero-padded to whole vectors (32 is the widest panel).
        let mut bias_tile = [0.0f32; 32];
        if let Some(bias) = epilogue.bias {
            bias_tile[..cols].copy_from_slice(&bias[j * nr..j * nr + cols]);
        }
        let bias_tile = &bias_tile[..nr];
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(mr);
            let a_block: (&[f32], usize) = if rows == mr {
                (&a[i * lda..], lda)
            } else {
                for r in 0..mr {
                    let dst = &mut a_pad[r * k..(r + 1) * k];
                    if r < rows {
                        dst.copy_from_slice(&a[(i + r) * lda..(i + r) * lda + k]);
                    } else {
                        dst.fill(0.0);
                    }
                }
                (&a_pad[..], k)
            };
            if rows == mr && cols == nr {
                kernel(isa, k, a_block, panel, (&mut c[i * ldc + j * nr..], ldc), bias_tile, epilogue.relu);
            } else {
                kernel(isa, k, a_block, panel, (&mut tile[..], nr), bias_tile, epilogue.relu);
                for r in 0..rows {
                    let at = (i + r) * ldc + j * nr;
                    c[at..at + cols].copy_from_slice(&tile[r * nr..r * nr + cols]);
                }
            }
            i += rows;
        }
    }
    Ok(())
}

/// One `MR × NR` block: `a` holds MR rows of k (stride given), `panel` k rows of NR, `c` MR rows
/// of NR (stride given). Callers checked every extent.
fn kernel(
    isa: Isa,
    k: usize,
    (a, lda): (&[f32], usize),
    panel: &[f32],
    (c, ldc): (&mut [f32], usize),
    bias: &[f32],
    relu: bool,
) {
    let (mr, nr) = (block_rows(isa), panel_width(isa));
    assert!(k == 0 || a.len() >= (mr - 1) * lda + k, "A block in bounds");
    assert!(panel.len() >= k * nr && bias.len() >= nr && c.len() >= (mr - 1) * ldc + nr, "operands in bounds");
    match isa {
        // SAFETY: the ISA was detected (`sgemm` checked `is_available`), and the asserts above
        // bound every access the kernels make.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe {
            x86::kernel_avx512(k, a.as_ptr(), lda, panel.as_ptr(), c.as_mut_ptr(), ldc, bias.as_ptr(), relu)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => unsafe {
            x86::kernel_avx2(k, a.as_ptr(), lda, panel.as_ptr(), c.as_mut_ptr(), ldc, bias.as_ptr(), relu)
        },
        _ => scalar_kernel(k, (a, lda), panel, (c, ldc), bias, relu, (mr, nr)),
    }
}

/// The reference microkernel (also the kernel on CPUs without AVX2).
fn scalar_kernel(
    k: usize,
    (a, lda): (&[f32], usize),
    panel: &[f32],
    (c, ldc): (&mut [f32], usize),
    bias: &[f32],
    relu: bool,
    (mr, nr): (usize, usize),
) {
    for r in 0..mr {
        for col in 0..nr {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc = a[r * lda + p].mul_add(panel[p * nr + col], acc);
            }
            let v = acc + bias[col];
            c[r * ldc + col] = if relu { v.max(0.0) } else { v };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// One microkernel per vector width: MR rows of two vectors of C each (2 * MR accumulators),
    /// two B vectors and one broadcast in registers.
    macro_rules! microkernel {
        ($name:ident, $feature:literal, $mr:literal, $lanes:literal, $zero:ident, $load:ident, $splat:ident,
         $fma:ident, $add:ident, $max:ident, $store:ident) => {
            /// The caller guarantees MR rows of k at stride `lda` in `a`, k rows of `2 * lanes`
            /// in `b`, MR rows of `2 * lanes` at stride `ldc` in `c`, and `2 * lanes` values in
            /// `bias`, and that the CPU has the target feature.
            #[target_feature(enable = $feature)]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name(
                k: usize,
                a: *const f32,
                lda: usize,
                b: *const f32,
                c: *mut f32,
                ldc: usize,
                bias: *const f32,
                relu: bool,
            ) {
                const NR: usize = 2 * $lanes;
                // SAFETY: every access is inside the extents the caller guarantees (above).
                unsafe {
                    let mut acc = [[$zero(); 2]; $mr];
                    for p in 0..k {
                        let b0 = $load(b.add(p * NR));
                        let b1 = $load(b.add(p * NR + $lanes));
                        for (r, row) in acc.iter_mut().enumerate() {
                            let av = $splat(*a.add(r * lda + p));
                            row[0] = $fma(av, b0, row[0]);
                            row[1] = $fma(av, b1, row[1]);
                        }
                    }
                    let (bias0, bias1) = ($load(bias), $load(bias.add($lanes)));
                    let zero = $zero();
                    for (r, row) in acc.iter().enumerate() {
                        let (mut v0, mut v1) = ($add(row[0], bias0), $add(row[1], bias1));
                        if relu {
                            (v0, v1) = ($max(v0, zero), $max(v1, zero));
                        }
                        $store(c.add(r * ldc), v0);
                        $store(c.add(r * ldc + $lanes), v1);
                    }
                }
            }
        };
    }

    microkernel!(
        kernel_avx512,
        "avx512f",
        12,
        16,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_add_ps,
        _mm512_max_ps,
        _mm512_storeu_ps
    );
    microkernel!(
        kernel_avx2,
        "avx2,fma",
        6,
        8,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_add_ps,
        _mm256_max_ps,
        _mm256_storeu_ps
    );
}
