//! heron-kernels: precompiled CPU kernels for the hot loops Cranelift's 128-bit vectors cannot
//! bring to peak (see `shared/notes/cpu-kernels-facts.md`). Each kernel has an AVX-512 variant
//! and an AVX2+FMA variant, chosen at run time from CPUID ([`Isa::detect`]), and a scalar
//! reference the variants are property-tested against; all of them compute every element in
//! the same order, so results are bit-identical across ISAs, tilings and thread counts.
//! Kernels allocate nothing: packed operands and scratch are slices the caller provides
//! (planned pool memory), sized by the kernel's `*_len` functions.
//!
//! - [`gemm`]: `C = A · B` with B packed (weights), bias per column, residual, clamp,
//!   activation.
//! - [`conv`]: 2-D convolution (GEMM form with packed weights and im2col panels; direct for
//!   first and strided layers; transposed pointwise for small planes; Winograd F(2×2, 3×3)
//!   for 3×3 stride-1 layers; depthwise).
//! - [`pool`]: 2-D max pooling, and average pooling over channel-blocked inputs.
//! - [`softmax`]: softmax and log-softmax along an axis.
//! - [`qgemm`]: integer GEMM and convolution (u8/i8 with zero points, i32 results; AVX-512
//!   VNNI, AVX2).
//! - [`abi`]: the `extern "C"` entry points generated code calls, one share of the work per
//!   task of a parallel loop.
//!
//! This is the only crate of the workspace with `unsafe` code besides the memory and loader
//! modules: SIMD intrinsics behind `#[target_feature]`, called only after the feature was
//! detected, on slices whose lengths are checked before any vector access.

#![allow(unsafe_code)]

pub mod abi;
pub mod blocked;
pub mod conv;
mod depthwise;
mod direct;
pub mod elementwise;
pub mod gemm;
pub mod peak;
pub mod pool;
pub mod qgemm;
pub mod softmax;
mod tile;
mod transposed;
mod winograd;

/// The instruction set a kernel runs with. It also fixes the shapes packed operands have
/// ([`gemm::panel_width`], [`gemm::block_rows`]); on a CPU without it, a kernel computes the
/// same results with scalar code for those shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512F: 16 f32 lanes, 32 vector registers.
    Avx512,
    /// AVX2 with FMA: 8 f32 lanes, 16 vector registers.
    Avx2Fma,
    /// Portable scalar code (the reference, and the fallback on other CPUs).
    Scalar,
}

impl Isa {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        Isa::available()[0]
    }

    /// Whether this CPU can run kernels of this instruction set.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every instruction set this CPU can run, best first.
    pub fn available() -> Vec<Isa> {
        [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar].into_iter().filter(|i| i.is_available()).collect()
    }

    /// The number generated code passes for this ISA (see [`abi`]).
    pub fn code(self) -> i64 {
        match self {
            Isa::Scalar => 0,
            Isa::Avx2Fma => 1,
            Isa::Avx512 => 2,
        }
    }

    pub fn from_code(code: i64) -> Option<Isa> {
        [Isa::Scalar, Isa::Avx2Fma, Isa::Avx512].into_iter().find(|i| i.code() == code)
    }

    /// The name `heron lower` prints and `HERON_KERNEL_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2Fma => "avx2",
            Isa::Scalar => "scalar",
        }
    }
}

/// Why a kernel refused its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("{what} holds {got} elements, the kernel needs {need}")]
    TooShort { what: &'static str, got: usize, need: usize },
    #[error("the sizes overflow: {0}")]
    Overflow(&'static str),
    #[error("bad convolution shape: {0}")]
    Geometry(&'static str),
    #[error("task {task} of {tasks}: the task must be below a positive task count")]
    Share { task: usize, tasks: usize },
    #[error("bad elementwise program: {0}")]
    Program(&'static str),
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

fn check_share(task: usize, tasks: usize) -> Result<(), KernelError> {
    if task < tasks { Ok(()) } else { Err(KernelError::Share { task, tasks }) }
}

/// Items `lo..hi` of `0..items` for task `task` of `tasks`: contiguous, sizes differing by at
/// most one, and the larger ones spread out (task `t` starts at `⌊t · items / tasks⌋`), so any
/// run of consecutive tasks (one thread's slice of them) holds its fair part of the items to
/// within one. With the larger shares first instead, a 28-item layer in 8 shares gave the
/// first thread 16 items and the second 12.
fn share(items: usize, tasks: usize, task: usize) -> (usize, usize) {
    // (At most `items`, for any task.)
    let at = |t: usize| (t.min(tasks) as u128 * items as u128 / tasks.max(1) as u128) as usize;
    (at(task), at(task.saturating_add(1)))
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_tile_the_items_and_every_run_of_tasks_is_fair() {
        for items in 0..70 {
            for tasks in 1..20 {
                let spans: Vec<_> = (0..tasks).map(|t| share(items, tasks, t)).collect();
                assert_eq!(spans[0].0, 0);
                assert_eq!(spans[tasks - 1].1, items);
                for (t, &(lo, hi)) in spans.iter().enumerate() {
                    assert!(hi - lo == items / tasks || hi - lo == items.div_ceil(tasks), "{items} {tasks} {t}");
                    if t > 0 {
                        assert_eq!(spans[t - 1].1, lo);
                    }
                }
                // Any run of consecutive tasks holds its fair part of the items to within one.
                for a in 0..tasks {
                    for b in a + 1..=tasks {
                        let got = (spans[b - 1].1 - spans[a].0) as f64;
                        let fair = items as f64 * (b - a) as f64 / tasks as f64;
                        assert!((got - fair).abs() < 1.0, "{items} items, {tasks} tasks, {a}..{b}: {got}");
                    }
                }
            }
        }
        // Out-of-range tasks get nothing past the items (callers check the task first).
        assert_eq!(share(10, 4, 7), (10, 10));
    }
}
