//! Elementwise functions at the full vector width. Generated code computes activations such as
//! SiLU (`x · sigmoid(x)`), hard-swish or a squeeze-excitation scale four lanes at a time;
//! here a small [`Program`] (a stack machine over at most [`MAX_INPUTS`] inputs and
//! [`MAX_CONSTS`] constants) runs on blocks of 64 elements: four vectors of 16 lanes (AVX-512)
//! or eight of 8 (AVX2), each operation dispatched once per block. A program that is a chain
//! (one input's value through unary functions and binary operations whose other operand is an
//! input or a constant: ReLU, clamps, hard-swish, `exp` alone) keeps its values in registers
//! instead, eight vectors at a time, without the stack's stores and loads (`exp` over a large
//! tensor: 1.6x faster).
//!
//! The output is `rows × cols`, row-major. An input is either the same shape ([`Operand::Full`])
//! or one value per row broadcast along it ([`Operand::PerRow`]: a per-channel scale over a
//! channel's plane). Every ISA computes each element with the same operations in the same
//! order (fused multiply-adds in `exp`), so they give the same bits; `min`/`max` propagate NaN
//! and otherwise pick as `a < b ? a : b` / `a > b ? a : b`.

use crate::{Isa, KernelError, check_share, share};

pub const MAX_OPS: usize = 16;
pub const MAX_INPUTS: usize = 3;
pub const MAX_CONSTS: usize = 4;
/// The deepest stack a program may use.
const MAX_DEPTH: usize = 4;
/// Elements per block: four vectors of the widest ISA.
const BLOCK: usize = 64;

/// One step of a [`Program`]: push an operand, or replace the top one or two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapOp {
    Input(u8),
    Const(u8),
    Neg,
    Abs,
    Sqrt,
    Exp,
    /// The natural logarithm (see `scalar::ln`).
    Ln,
    Sigmoid,
    /// `tanh`, an odd rational function (see `scalar::TANH`).
    Tanh,
    /// The error function, an odd rational function (see `scalar::ERF`; GELU's
    /// `x · (1 + erf(x / √2)) / 2`).
    Erf,
    /// `tanh(ln(1 + e^x))`, Mish's `x · tanh(softplus(x))` without the logarithm (see
    /// `scalar::tanh_softplus`).
    TanhSoftplus,
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    /// Pops `a`, `b`, `then`, `otherwise`; pushes `a < b ? then : otherwise` (false when
    /// either is NaN): LeakyReLU, ELU, a threshold.
    LessSelect,
    /// As [`MapOp::LessSelect`] with `a <= b`.
    LessEqSelect,
}

impl MapOp {
    /// Whether it is one of the functions the routine computes faster than generated code
    /// (which has only 128-bit vectors and keeps arithmetic alone in registers as well).
    pub fn is_transcendental(self) -> bool {
        matches!(self, MapOp::Exp | MapOp::Ln | MapOp::Sigmoid | MapOp::Tanh | MapOp::Erf | MapOp::TanhSoftplus)
    }

    fn is_unary(self) -> bool {
        self.is_transcendental() || matches!(self, MapOp::Neg | MapOp::Abs | MapOp::Sqrt)
    }

    fn is_binary(self) -> bool {
        matches!(self, MapOp::Add | MapOp::Sub | MapOp::Mul | MapOp::Div | MapOp::Min | MapOp::Max)
    }

    fn code(self) -> u8 {
        match self {
            MapOp::Input(k) => 0x10 | k,
            MapOp::Const(k) => 0x20 | k,
            MapOp::Neg => 0x30,
            MapOp::Abs => 0x31,
            MapOp::Sqrt => 0x32,
            MapOp::Exp => 0x33,
            MapOp::Ln => 0x38,
            MapOp::Sigmoid => 0x34,
            MapOp::Tanh => 0x35,
            MapOp::Erf => 0x36,
            MapOp::TanhSoftplus => 0x37,
            MapOp::Add => 0x40,
            MapOp::Sub => 0x41,
            MapOp::Mul => 0x42,
            MapOp::Div => 0x43,
            MapOp::Min => 0x44,
            MapOp::Max => 0x45,
            MapOp::LessSelect => 0x50,
            MapOp::LessEqSelect => 0x51,
        }
    }

    fn from_code(code: u8) -> Option<MapOp> {
        Some(match code {
            0x10..=0x1f => MapOp::Input(code & 0xf),
            0x20..=0x2f => MapOp::Const(code & 0xf),
            0x30 => MapOp::Neg,
            0x31 => MapOp::Abs,
            0x32 => MapOp::Sqrt,
            0x33 => MapOp::Exp,
            0x38 => MapOp::Ln,
            0x34 => MapOp::Sigmoid,
            0x35 => MapOp::Tanh,
            0x36 => MapOp::Erf,
            0x37 => MapOp::TanhSoftplus,
            0x40 => MapOp::Add,
            0x41 => MapOp::Sub,
            0x42 => MapOp::Mul,
            0x43 => MapOp::Div,
            0x44 => MapOp::Min,
            0x45 => MapOp::Max,
            0x50 => MapOp::LessSelect,
            0x51 => MapOp::LessEqSelect,
            _ => return None,
        })
    }

    /// Values it pops and pushes.
    fn arity(self) -> (usize, usize) {
        match self {
            MapOp::Input(_) | MapOp::Const(_) => (0, 1),
            MapOp::Neg
            | MapOp::Abs
            | MapOp::Sqrt
            | MapOp::Exp
            | MapOp::Ln
            | MapOp::Sigmoid
            | MapOp::Tanh
            | MapOp::Erf
            | MapOp::TanhSoftplus => (1, 1),
            MapOp::LessSelect | MapOp::LessEqSelect => (4, 1),
            _ => (2, 1),
        }
    }
}

/// A checked program: it reads inputs below [`MAX_INPUTS`] and constants below
/// [`MAX_CONSTS`], never pops an empty stack nor grows it past its depth limit, and leaves
/// exactly one value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Program {
    ops: [MapOp; MAX_OPS],
    len: usize,
    consts: [f32; MAX_CONSTS],
}

impl Program {
    pub fn new(ops: &[MapOp], consts: &[f32]) -> Result<Program, KernelError> {
        let bad = |why| Err(KernelError::Program(why));
        if ops.is_empty() || ops.len() > MAX_OPS {
            return bad("it takes 1 to 16 operations");
        }
        if consts.len() > MAX_CONSTS {
            return bad("it takes at most 4 constants");
        }
        let mut depth = 0usize;
        for &op in ops {
            match op {
                MapOp::Input(k) if usize::from(k) >= MAX_INPUTS => return bad("an input index is past 2"),
                MapOp::Const(k) if usize::from(k) >= consts.len() => {
                    return bad("a constant index is past its constants");
                }
                _ => {}
            }
            let (pops, pushes) = op.arity();
            if depth < pops {
                return bad("an operation pops an empty stack");
            }
            depth = depth - pops + pushes;
            if depth > MAX_DEPTH {
                return bad("the stack grows past 4 values");
            }
        }
        if depth != 1 {
            return bad("it must leave exactly one value");
        }
        let mut program = Program { ops: [MapOp::Neg; MAX_OPS], len: ops.len(), consts: [0.0; MAX_CONSTS] };
        program.ops[..ops.len()].copy_from_slice(ops);
        program.consts[..consts.len()].copy_from_slice(consts);
        Ok(program)
    }

    /// The input a chain of steps starts from, if the program is one (see `Chain`): the vector
    /// code runs it with its values in registers when that input is a whole tensor.
    pub fn chain_input(&self) -> Option<u8> {
        Chain::of(self).map(|(input, _)| input)
    }

    pub fn ops(&self) -> &[MapOp] {
        &self.ops[..self.len]
    }

    /// The constants, unused ones zero.
    pub fn consts(&self) -> [f32; MAX_CONSTS] {
        self.consts
    }

    /// The operations as two words of eight one-byte codes (zero ends the program), as the
    /// entry point takes them.
    pub fn encode(&self) -> [i64; 2] {
        let mut words = [0u64; 2];
        for (k, op) in self.ops().iter().enumerate() {
            words[k / 8] |= u64::from(op.code()) << (8 * (k % 8));
        }
        words.map(|w| w as i64)
    }

    /// The program [`Program::encode`] gave `words` for, with its constants.
    pub fn decode(words: [i64; 2], consts: [f32; MAX_CONSTS]) -> Result<Program, KernelError> {
        let mut ops = [MapOp::Neg; MAX_OPS];
        let mut len = 0;
        for k in 0..MAX_OPS {
            let code = ((words[k / 8] as u64) >> (8 * (k % 8))) as u8;
            if code == 0 {
                break;
            }
            ops[k] = MapOp::from_code(code).ok_or(KernelError::Program("an unknown operation code"))?;
            len += 1;
        }
        Program::new(&ops[..len], &consts)
    }
}

/// How an input lines up with the output's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// `rows × cols`, as the output.
    Full,
    /// One value per row.
    PerRow,
}

impl Operand {
    fn len(self, rows: usize, cols: usize) -> Result<usize, KernelError> {
        match self {
            Operand::Full => rows.checked_mul(cols).ok_or(KernelError::Overflow("elementwise output")),
            Operand::PerRow => Ok(rows),
        }
    }
}

/// How an operand of a [`Tail`] lines up with the kernel's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailOperand {
    /// Shaped and laid out as the output.
    Full,
    /// One value per output channel.
    PerChannel,
}

/// An elementwise program a convolution kernel runs over its output once the values are
/// final, while they are still in cache (an activation its own epilogue has no form for:
/// hard-swish, SiLU, LeakyReLU, ELU, a sigmoid): `Input(0)` reads the output itself,
/// `Input(1)` and `Input(2)` the operands.
#[derive(Clone, Copy, Debug)]
pub struct Tail<'a> {
    pub program: Program,
    pub operands: [Option<(&'a [f32], TailOperand)>; MAX_INPUTS - 1],
}

impl Tail<'_> {
    /// Checks that every operand the program reads is given and holds what its kind says for
    /// an output of `out_len` elements and `channels` channels.
    pub fn check(&self, out_len: usize, channels: usize) -> Result<(), KernelError> {
        for op in self.program.ops() {
            let MapOp::Input(k) = *op else { continue };
            if k == 0 {
                continue;
            }
            let Some(Some((data, kind))) = self.operands.get(usize::from(k) - 1) else {
                return Err(KernelError::Program("it reads an operand that was not given"));
            };
            let want = match kind {
                TailOperand::Full => out_len,
                TailOperand::PerChannel => channels,
            };
            crate::need("tail operand", data.len(), want)?;
        }
        Ok(())
    }
}

/// A program that is a chain of steps on one input's value, the running value its only
/// stack entry but for one operand at a time: `Input(k)`, then unary functions and binary
/// operations whose right operand is an input or a constant. The vector code keeps the value
/// of a block in registers through it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chain {
    steps: [Step; MAX_OPS],
    len: usize,
}

/// One step of a [`Chain`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    Unary(MapOp),
    /// The operation and its right operand.
    Binary(MapOp, Right),
}

/// The right operand of a [`Step::Binary`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Right {
    Input(u8),
    Const(u8),
}

impl Chain {
    /// The input the chain starts from and its steps, if `program` is one.
    pub(crate) fn of(program: &Program) -> Option<(u8, Chain)> {
        let ops = program.ops();
        let Some(&MapOp::Input(first)) = ops.first() else { return None };
        let mut chain = Chain { steps: [Step::Unary(MapOp::Neg); MAX_OPS], len: 0 };
        let mut rest = &ops[1..];
        while let [op, tail @ ..] = rest {
            let (step, tail) = match (*op, tail) {
                (MapOp::Input(k), [binary, tail @ ..]) if binary.is_binary() => {
                    (Step::Binary(*binary, Right::Input(k)), tail)
                }
                (MapOp::Const(k), [binary, tail @ ..]) if binary.is_binary() => {
                    (Step::Binary(*binary, Right::Const(k)), tail)
                }
                (unary, _) if unary.is_unary() => (Step::Unary(unary), tail),
                _ => return None,
            };
            chain.steps[chain.len] = step;
            chain.len += 1;
            rest = tail;
        }
        Some((first, chain))
    }

    pub(crate) fn steps(&self) -> &[Step] {
        &self.steps[..self.len]
    }
}

/// Where a block reads an input: a pointer at the block's first element, one value, or a
/// vector's worth of values repeated (`Lanes(p, n)`: element `i` is `p[i % n]`, a per-channel
/// value over a channel-blocked tensor's pixels).
#[derive(Clone, Copy)]
pub(crate) enum Source {
    Full(*const f32),
    Value(f32),
    Lanes(*const f32, usize),
}

/// Share `task` of `tasks` of `out[r, c] = program(inputs[k][r, c] ...)`; `inputs[k]` is
/// read for `Input(k)`.
pub fn map_share(
    isa: Isa,
    program: &Program,
    inputs: &[(&[f32], Operand)],
    out: &mut [f32],
    (rows, cols): (usize, usize),
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    check_share(task, tasks)?;
    let total = Operand::Full.len(rows, cols)?;
    crate::need("elementwise output", out.len(), total)?;
    for op in program.ops() {
        if let MapOp::Input(k) = op {
            let Some((data, operand)) = inputs.get(usize::from(*k)) else {
                return Err(KernelError::Program("it reads an input that was not given"));
            };
            crate::need("elementwise input", data.len(), operand.len(rows, cols)?)?;
        }
    }
    let mut pointers = [(std::ptr::null(), Operand::Full); MAX_INPUTS];
    for (p, (data, operand)) in pointers.iter_mut().zip(inputs) {
        *p = (data.as_ptr(), *operand);
    }
    // SAFETY: each input the program reads holds its operand's length, checked above, and
    // `out` is a distinct mutable slice of `rows × cols` elements.
    unsafe { map_raw(isa, program, pointers, out.as_mut_ptr(), (rows, cols), (task, tasks)) };
    Ok(())
}

/// [`map_share`] on pointers.
///
/// # Safety
/// Every input the program reads holds its operand's length (`rows × cols`, or `rows`); `out`
/// holds `rows × cols` elements, and each input either does not overlap it or is it (a `Full`
/// input at the same address: each block is read before it is written).
pub(crate) unsafe fn map_raw(
    isa: Isa,
    program: &Program,
    inputs: [(*const f32, Operand); MAX_INPUTS],
    out: *mut f32,
    (rows, cols): (usize, usize),
    (task, tasks): (usize, usize),
) {
    let total = rows * cols;
    let mut read = [false; MAX_INPUTS];
    for op in program.ops() {
        if let MapOp::Input(k) = op {
            read[usize::from(*k)] = true;
        }
    }
    let (lo, hi) = share(total.div_ceil(BLOCK), tasks, task);
    let (lo, hi) = (lo * BLOCK, (hi * BLOCK).min(total));
    let mut at = lo;
    while at < hi {
        let (row, col) = (at / cols, at % cols);
        let len = (cols - col).min(hi - at);
        let mut sources = [Source::Value(0.0); MAX_INPUTS];
        for ((source, &(p, operand)), read) in sources.iter_mut().zip(&inputs).zip(read) {
            if read && !p.is_null() {
                *source = match operand {
                    // SAFETY: the element is inside the input (the caller's promise).
                    Operand::Full => Source::Full(unsafe { p.add(at) }),
                    Operand::PerRow => Source::Value(unsafe { *p.add(row) }),
                };
            }
        }
        // SAFETY: `len` elements from `at` lie inside the output and every full input.
        unsafe { segment(isa, program, sources, out.add(at), len) };
        at += len;
    }
}

/// `len` elements of one row.
///
/// # Safety
/// Each `Full` source and `out` hold `len` elements.
pub(crate) unsafe fn segment(isa: Isa, program: &Program, sources: [Source; MAX_INPUTS], out: *mut f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        // The vector code reads a pattern as one whole vector per vector of the output.
        let fits = |lanes: usize| sources.iter().all(|s| !matches!(s, Source::Lanes(_, n) if *n != lanes));
        if isa == Isa::Avx512 && Isa::Avx512.is_available() && fits(16) {
            // SAFETY: the CPU has AVX-512F; the rest is the caller's promise.
            return unsafe { x86::avx512(program, sources, out, len) };
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() && fits(8) {
            // SAFETY: the CPU has AVX2 and FMA; the rest is the caller's promise.
            return unsafe { x86::avx2(program, sources, out, len) };
        }
    }
    let _ = isa;
    for i in 0..len {
        let mut stack = [0.0f32; MAX_DEPTH];
        let mut sp = 0;
        for &op in program.ops() {
            match op {
                MapOp::Input(k) => {
                    stack[sp] = match sources[usize::from(k)] {
                        // SAFETY: `i < len`, inside the source; a pattern holds `n` values.
                        Source::Full(p) => unsafe { *p.add(i) },
                        Source::Value(v) => v,
                        Source::Lanes(p, n) => unsafe { *p.add(i % n) },
                    };
                    sp += 1;
                }
                MapOp::Const(k) => {
                    stack[sp] = program.consts[usize::from(k)];
                    sp += 1;
                }
                MapOp::Neg => stack[sp - 1] = -stack[sp - 1],
                MapOp::Abs => stack[sp - 1] = stack[sp - 1].abs(),
                MapOp::Sqrt => stack[sp - 1] = stack[sp - 1].sqrt(),
                MapOp::Exp => stack[sp - 1] = scalar::exp(stack[sp - 1]),
                MapOp::Ln => stack[sp - 1] = scalar::ln(stack[sp - 1]),
                MapOp::Sigmoid => stack[sp - 1] = scalar::sigmoid(stack[sp - 1]),
                MapOp::Tanh => stack[sp - 1] = scalar::tanh(stack[sp - 1]),
                MapOp::Erf => stack[sp - 1] = scalar::erf(stack[sp - 1]),
                MapOp::TanhSoftplus => stack[sp - 1] = scalar::tanh_softplus(stack[sp - 1]),
                MapOp::LessSelect | MapOp::LessEqSelect => {
                    let [a, b, then, otherwise] = [stack[sp - 4], stack[sp - 3], stack[sp - 2], stack[sp - 1]];
                    sp -= 3;
                    let taken = if op == MapOp::LessSelect { a < b } else { a <= b };
                    stack[sp - 1] = if taken { then } else { otherwise };
                }
                binary => {
                    let (a, b) = (stack[sp - 2], stack[sp - 1]);
                    sp -= 1;
                    stack[sp - 1] = match binary {
                        MapOp::Add => a + b,
                        MapOp::Sub => a - b,
                        MapOp::Mul => a * b,
                        MapOp::Div => a / b,
                        MapOp::Min if a.is_nan() || b.is_nan() => a + b,
                        MapOp::Max if a.is_nan() || b.is_nan() => a + b,
                        MapOp::Min => {
                            if a < b {
                                a
                            } else {
                                b
                            }
                        }
                        _ => {
                            if a > b {
                                a
                            } else {
                                b
                            }
                        }
                    };
                }
            }
        }
        // SAFETY: `i < len`.
        unsafe { *out.add(i) = stack[0] };
    }
}

/// `e^x` and the sigmoid (eighths of a power of two from a table, a degree-4 polynomial), the
/// vector code's steps one lane at a time.
pub(crate) mod scalar {
    /// Where `exp` clamps its input: `e^89` overflows and `e^-104` rounds to 0, so the clamped
    /// input's result is the true one's (∞ or 0) and no special case is needed past them.
    pub(super) const EXP_HI: f32 = 89.0;
    pub(super) const EXP_LO: f32 = -104.0;
    pub(super) const MAGIC: f32 = 12_582_912.0;
    /// `ln 2` in two parts, the first with few enough bits that `k · C1 / 8` (the exponential's
    /// `k`) and `e · C1` (the logarithm's exponent `e`) are exact.
    pub(super) const C1: f32 = 0.693_359_4;
    pub(super) const C2: f32 = -2.121_944_4e-4;

    /// Where a sigmoid's `-|x|` is clamped, and below which its result is 0: `e^-87` (and the
    /// power of two that builds it) is still a normal float, so for inputs of at least 2^-125
    /// in magnitude no step and no result of the sigmoid or SiLU is subnormal. Each subnormal
    /// costs a microcode assist: a 1×1 layer's SiLU over outputs mostly below −87 took 30
    /// cycles per 16 lanes instead of 7.4 on Zen 5. The true sigmoid there is below 1.7e-38.
    pub(super) const SIGMOID_LO: f32 = -87.0;
    /// `2^(j/8)` for `j` in `0..8`, rounded: the sigmoid's exponential takes eighths of a power
    /// of two from this table (one register), which leaves a short polynomial.
    pub(super) const EIGHTHS: [f32; 8] =
        [1.0, 1.090_507_7, 1.189_207_1, 1.296_839_6, 1.414_213_5, 1.542_210_8, 1.681_792_9, 1.834_008_1];
    /// `e^r - 1 - r = r² · (EIGHTHS_POLY[2] + r · (EIGHTHS_POLY[1] + r · EIGHTHS_POLY[0]))` for
    /// `|r| <= ln 2 / 16` (Taylor: its error is below 1.5e-9 there).
    pub(super) const EIGHTHS_POLY: [f32; 3] = [1.0 / 24.0, 1.0 / 6.0, 0.5];

    /// `1 / (1 + e^-x)`, as `e^x / (1 + e^x)` below zero (`e^-x` would overflow there), with
    /// `e^-|x| = 2^n · 2^(j/8) · e^r`: `8n + j` the nearest integer to `-8|x| log2 e` and the
    /// remainder `|r| <= ln 2 / 16`; `-|x|` clamped at [`SIGMOID_LO`], and 0 below it (as
    /// at −∞). Within 2e-7 of the true value, relative, from −87 up.
    pub(crate) fn sigmoid(x: f32) -> f32 {
        let t = -x.abs();
        let t = if t < SIGMOID_LO { SIGMOID_LO } else { t };
        let (shifted, _, p) = eighths(t);
        let bits = shifted.to_bits();
        let power = f32::from_bits(EIGHTHS_BITS[(bits & 7) as usize].wrapping_add(bits << 20));
        let e = power.mul_add(p, power);
        let numerator = if x.is_sign_negative() { e } else { 1.0 };
        if x < SIGMOID_LO { 0.0 } else { numerator / (1.0 + e) }
    }

    /// An odd function's rational approximation `f(x) ≈ c · P(c²) / Q(c²)`, `c` the input
    /// clamped to `±bound` (past where `f` rounds to ±1 in f32, and where these steps reach
    /// ±1, so large inputs and ±∞ give exactly ±1), the result clamped to ±1; both polynomials
    /// highest power first, `P(0) = Q(0) = 1` for tanh (tiny inputs returned as they are). One division and a dozen multiply-adds,
    /// no branch or table: half the steps of `1 − 2·sigmoid(−2|x|)` for tanh, a third of
    /// Abramowitz-Stegun's `1 − t·P(t)·e^-x²` for erf.
    pub(super) struct OddRational<const P: usize, const Q: usize> {
        pub(super) bound: f32,
        pub(super) p: [f32; P],
        pub(super) q: [f32; Q],
    }

    /// tanh: fitted here for relative error on [0, 10.5] (Loeb's linearised least squares
    /// with Lawson's reweighting towards minimax, in f64, `P(0)` fixed at 1); its f32 steps
    /// stay within 3e-7 of tanh on the floats sampled (the tests allow 4e-7).
    pub(super) const TANH: OddRational<7, 4> = OddRational {
        bound: 10.5,
        p: [-5.370_443_3e-14, 3.965_224_3e-11, -1.731_88e-8, 1.040_539_6e-5, 3.030_719e-3, 1.301_803_4e-1, 1.0],
        q: [2.440_423_3e-4, 2.420_219e-2, 4.635_135e-1, 1.0],
    };
    /// erf: fitted as [`TANH`] on [0, 3.92] (erf rounds to 1 above), `P(0)` free; its f32 steps
    /// stay within 3.5e-7 of erf on the floats sampled.
    pub(super) const ERF: OddRational<7, 5> = OddRational {
        bound: 3.92,
        p: [
            1.992_404_6e-8,
            -1.957_829_2e-6,
            1.418_513_1e-4,
            3.701_661_7e-3,
            5.057_350_5e-2,
            1.999_258_5e-1,
            1.128_379_1,
        ],
        q: [9.560_504e-4, 1.435_331_5e-2, 1.149_989_6e-1, 5.105_113_4e-1, 1.0],
    };

    /// `a > b ? a : b`: `b` when either is NaN (as the x86 `max` instruction).
    fn max_or_second(a: f32, b: f32) -> f32 {
        if a > b { a } else { b }
    }
    /// `a < b ? a : b`: `b` when either is NaN (as the x86 `min` instruction).
    fn min_or_second(a: f32, b: f32) -> f32 {
        if a < b { a } else { b }
    }

    /// `f(x)` by `f`'s [`OddRational`]: NaN and −0 kept.
    pub(super) fn odd_rational<const P: usize, const Q: usize>(f: &OddRational<P, Q>, x: f32) -> f32 {
        let c = min_or_second(f.bound, max_or_second(-f.bound, x));
        let z = c * c;
        let p = f.p[1..].iter().fold(f.p[0], |p, &k| p.mul_add(z, k));
        let q = f.q[1..].iter().fold(f.q[0], |q, &k| q.mul_add(z, k));
        min_or_second(1.0, max_or_second(-1.0, (c * p) / q))
    }

    /// `tanh x` (see [`TANH`]).
    pub(crate) fn tanh(x: f32) -> f32 {
        odd_rational(&TANH, x)
    }

    /// `erf x` (see [`ERF`]).
    pub(crate) fn erf(x: f32) -> f32 {
        odd_rational(&ERF, x)
    }

    /// Where [`tanh_softplus`] clamps its input: from about 9 up its result rounds to 1, and
    /// `e^x (e^x + 2)` stays finite.
    pub(super) const SOFTPLUS_HI: f32 = 20.0;

    /// `tanh(ln(1 + e^x))` as `n / (n + 2)` with `n = e^x (e^x + 2)`: the same value (`tanh y =
    /// (e^2y − 1) / (e^2y + 1)` and `e^y = 1 + e^x`), with no logarithm, and no cancellation
    /// where `1 + e^x` rounds to 1 (the logarithm's form gives 0 there, this `≈ e^x`). The
    /// input clamped to `SIGMOID_LO..=SOFTPLUS_HI`, and 0 below (as at −∞; the true value is
    /// below 1.7e-38 there), so no step is subnormal; NaN stays NaN.
    pub(crate) fn tanh_softplus(x: f32) -> f32 {
        let e = exp(min_or_second(SOFTPLUS_HI, max_or_second(SIGMOID_LO, x)));
        let n = e * (e + 2.0);
        if x < SIGMOID_LO { 0.0 } else { n / (n + 2.0) }
    }

    /// [`EIGHTHS`]' bits as `2^n · 2^(j/8)` is built from them: the bits of `shifted = 8n + j +
    /// MAGIC`, shifted left by 20, are `n << 23` (into the exponent) plus `j << 20` (MAGIC's own
    /// bits shift out: their low 12 are zero), so entry `j` holds the table's bits less `j <<
    /// 20`; one integer add then completes the power (normal for `n >= -126`).
    pub(super) const EIGHTHS_BITS: [u32; 8] = {
        assert!(MAGIC.to_bits() & 0xfff == 0);
        let mut entries = [0; 8];
        let mut j = 0;
        while j < 8 {
            entries[j] = EIGHTHS[j].to_bits().wrapping_sub((j as u32) << 20);
            j += 1;
        }
        entries
    };

    /// Where SiLU's exponent is clamped (its input, to ±SILU_BOUND): `e^87` and `e^-87`, and
    /// the powers of two that build them, are normal floats.
    pub(crate) const SILU_BOUND: f32 = 87.0;

    /// SiLU, `x · sigmoid(x)`: `x / (1 + e^-c)`, `c` the input clamped to ±[`SILU_BOUND`] (past
    /// +87 the sigmoid rounds to 1), and `x · 0` below −87 where [`sigmoid`] is 0 (`−0`, NaN at
    /// −∞, as `x · sigmoid(x)`). `e^-c = 2^n · 2^(j/8) · e^r` with [`sigmoid`]'s steps (the same
    /// `e^-|x|` for `x >= 0`), its remainder negated (`s = -r`) so that `-c` is never formed:
    /// three fewer steps than `x · sigmoid(x)`, whose bits it need not match; within 2.5e-7 of
    /// the true value, relative, from −87 up (below, the true value is under `1.7e-38 · |x|`).
    pub(crate) fn silu(x: f32) -> f32 {
        let c = min_or_second(SILU_BOUND, max_or_second(-SILU_BOUND, x));
        let shifted = (-c).mul_add(8.0 * std::f32::consts::LOG2_E, MAGIC);
        let k = shifted - MAGIC;
        let s = k.mul_add(C1 / 8.0, c);
        let s = k.mul_add(C2 / 8.0, s);
        let [c4, c3, c2] = EIGHTHS_POLY;
        let q = s.mul_add(c4, -c3).mul_add(s, c2);
        let p = q.mul_add(s * s, -s);
        let bits = shifted.to_bits();
        let power = f32::from_bits(EIGHTHS_BITS[(bits & 7) as usize].wrapping_add(bits << 20));
        if x < -SILU_BOUND { x * 0.0 } else { x / (1.0 + power.mul_add(p, power)) }
    }

    /// `e^x = 2^n · 2^(j/8) · e^r` as the sigmoid's exponential ([`sigmoid`]), `x` clamped to
    /// `EXP_LO..=EXP_HI` (NaN stays NaN), and `2^(j/8) · e^r` scaled by `2^n` with one rounding
    /// ([`scale`]), so the results from −104 to −87.3 are the correctly rounded subnormals of
    /// that product. Within 1.5e-7 of the true value, relative, where it is normal.
    pub(crate) fn exp(x: f32) -> f32 {
        let (shifted, k, p) = eighths(min_or_second(EXP_HI, max_or_second(EXP_LO, x)));
        let t = EIGHTHS[(shifted.to_bits() & 7) as usize];
        scale(t.mul_add(p, t), k)
    }

    /// The bits of `√½`: [`ln`] reduces its input to `2^e · m` with `m` in `[√½, √2)`.
    pub(super) const HALF_SQRT2_BITS: i32 = 0x3f35_04f3;
    /// `ln(1 + f) = f − f²/2 + f³ · P(f)` for `f` in `[√½ − 1, √2 − 1]`, `P` highest power first
    /// (Cephes' `logf`: within 1 ulp or so of the true value there).
    pub(super) const LN_POLY: [f32; 9] = [
        7.037_683_6e-2,
        -1.151_461e-1,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_4e-1,
        -2.499_999_4e-1,
        3.333_333e-1,
    ];
    /// Subnormal inputs are scaled by `2^23` into the normal range first.
    pub(super) const TWO_23: f32 = 8_388_608.0;

    /// The natural logarithm: `x = 2^e · m`, `m` in `[√½, √2)` (subnormals scaled by 2^23
    /// first), `ln x = e ln 2 + ln(1 + f)` with `f = m − 1` (see [`LN_POLY`]), by integer steps
    /// on the bits and a dozen multiply-adds, no table; `−∞` at ±0, NaN below zero and at NaN,
    /// `+∞` at `+∞`. Within an ulp of the true value (the tests sweep the floats).
    pub(crate) fn ln(x: f32) -> f32 {
        let tiny = x < f32::MIN_POSITIVE;
        let (e, m) = exponent_and_mantissa(if tiny { x * TWO_23 } else { x });
        let e = e + if tiny { -23.0 } else { 0.0 };
        let f = m - 1.0;
        let z = f * f;
        let p = LN_POLY[1..].iter().fold(LN_POLY[0], |p, &k| p.mul_add(f, k));
        let y = e.mul_add(C2, (p * f) * z);
        let y = z.mul_add(-0.5, y);
        let r = e.mul_add(C1, f + y);
        if x.is_nan() {
            x
        } else if x > f32::MAX {
            f32::INFINITY
        } else if x < 0.0 {
            f32::NAN
        } else if x <= 0.0 {
            f32::NEG_INFINITY
        } else {
            r
        }
    }

    /// `(e, m)` with `x = 2^e · m` and `m` in `[√½, √2)`, for a positive normal `x` (other
    /// inputs give finite values the callers replace), by integer steps on the bits.
    fn exponent_and_mantissa(x: f32) -> (f32, f32) {
        let bits = (x.to_bits() as i32).wrapping_sub(HALF_SQRT2_BITS);
        ((bits >> 23) as f32, f32::from_bits(((bits & 0x7f_ffff) + HALF_SQRT2_BITS) as u32))
    }

    /// `e^t = 2^n · 2^(j/8) · (1 + p)` for the exponentials of [`sigmoid`] and [`exp`]: `shifted
    /// = 8n + j + MAGIC`, `k = 8n + j` the nearest integer to `8t log2 e`, and `p = e^r − 1` for
    /// the remainder `|r| <= ln 2 / 16`.
    fn eighths(t: f32) -> (f32, f32, f32) {
        let shifted = t.mul_add(8.0 * std::f32::consts::LOG2_E, MAGIC);
        let k = shifted - MAGIC;
        let r = (-k).mul_add(C1 / 8.0, t);
        let r = (-k).mul_add(C2 / 8.0, r);
        let [c4, c3, c2] = EIGHTHS_POLY;
        let q = r.mul_add(c4, c3).mul_add(r, c2);
        (shifted, k, q.mul_add(r * r, r))
    }

    /// `e · 2^n` rounded once, for `e` in `[0.5, 2)` and `n = ⌊k / 8⌋` in `-150..=128` (`k`
    /// an integer): two normal factors `2^⌊n/2⌋` and `2^(n − ⌊n/2⌋)`, the first product exact.
    /// AVX-512's `vscalefps` gives the same bits in one step.
    fn scale(e: f32, k: f32) -> f32 {
        let n = (k as i32) >> 3;
        let half = n >> 1;
        let power = |m: i32| f32::from_bits(((m + 127) << 23) as u32);
        e * power(half) * power(n - half)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::scalar::{
        C1, C2, EIGHTHS, EIGHTHS_BITS, EIGHTHS_POLY, ERF, EXP_HI, EXP_LO, HALF_SQRT2_BITS, LN_POLY, MAGIC, OddRational,
        SIGMOID_LO, SILU_BOUND, SOFTPLUS_HI, TANH, TWO_23,
    };
    use super::{BLOCK, Chain, MAX_DEPTH, MapOp, Program, Right, Source, Step};

    /// Evaluates `program` on `len` elements, a block of [`BLOCK`] (vectors of `$lanes`) at a
    /// time, with this ISA's operations (module `$ops`); the stack lives across blocks (zeroing
    /// it per block, and blocks of four 8-lane vectors, cost a third of a copy's time).
    macro_rules! evaluator {
        ($name:ident, $feature:literal, $lanes:literal, $chain:literal, $ops:ident, $v:ty) => {
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $name(program: &Program, sources: [Source; 3], out: *mut f32, len: usize) {
                use $name::{VECTORS, block, chain};
                let mut at = 0;
                // A chain on one whole input (a standalone activation, a clamp, a residual
                // add): its whole blocks in registers, without the stack.
                if len >= $name::CHAIN_VECTORS * $lanes
                    && let Some((k, steps)) = Chain::of(program)
                    && let Source::Full(src) = sources[usize::from(k)]
                {
                    // SAFETY: the caller's promise, for elements `0..len`.
                    at = unsafe { chain(program, &steps, &sources, src, out, len) };
                }
                let mut stack = [[$ops::zero(); VECTORS]; MAX_DEPTH];
                while at < len {
                    let n = (len - at).min(VECTORS * $lanes);
                    // SAFETY: the caller's promise, for elements `at..at + n`. A whole block
                    // takes its own copy of the code, every lane count a constant (no masks
                    // nor branches per vector).
                    unsafe {
                        if n == VECTORS * $lanes {
                            block::<true>(program, &sources, out, at, n, &mut stack)
                        } else {
                            block::<false>(program, &sources, out, at, n, &mut stack)
                        }
                    }
                    at += n;
                }
            }

            mod $name {
                use super::{BLOCK, Chain, MAX_DEPTH, MapOp, Program, Right, Source, Step, $ops};

                pub(super) const VECTORS: usize = BLOCK / $lanes;
                /// Vectors a chain takes at a time: enough to hide its dispatch per step, few
                /// enough to stay in registers through a step's polynomial (AVX2's 16: eight
                /// spilled, and took 1.6-2.4x the time of four for ReLU, exp, sigmoid, tanh and
                /// erf over 64K elements on Zen 3).
                pub(super) const CHAIN_VECTORS: usize = $chain;

                /// `out[i] = steps(src[i])` over the whole blocks of `0..len`; returns where
                /// they end.
                ///
                /// # Safety
                /// `src`, `out` and every `Full` source hold `len` elements.
                #[inline]
                #[target_feature(enable = $feature)]
                pub(super) unsafe fn chain(
                    program: &Program,
                    steps: &Chain,
                    sources: &[Source; 3],
                    src: *const f32,
                    out: *mut f32,
                    len: usize,
                ) -> usize {
                    let step = CHAIN_VECTORS * $lanes;
                    let mut at = 0;
                    while at + step <= len {
                        let mut acc = [$ops::zero(); CHAIN_VECTORS];
                        for (v, x) in acc.iter_mut().enumerate() {
                            // SAFETY: `at + step <= len`.
                            *x = unsafe { $ops::load(src.add(at + v * $lanes), $lanes) };
                        }
                        for &step in steps.steps() {
                            acc = match step {
                                Step::Unary(MapOp::Exp) => $ops::exp(acc),
                                Step::Unary(MapOp::Ln) => $ops::ln(acc),
                                Step::Unary(MapOp::Sigmoid) => $ops::sigmoid(acc),
                                Step::Unary(MapOp::Tanh) => $ops::tanh(acc),
                                Step::Unary(MapOp::Erf) => $ops::erf(acc),
                                Step::Unary(MapOp::TanhSoftplus) => $ops::tanh_softplus(acc),
                                Step::Unary(MapOp::Neg) => acc.map(|x| $ops::neg(x)),
                                Step::Unary(MapOp::Abs) => acc.map(|x| $ops::abs(x)),
                                Step::Unary(_) => acc.map(|x| $ops::sqrt(x)),
                                Step::Binary(op, right) => {
                                    let b: [$v; CHAIN_VECTORS] = match right {
                                        Right::Const(k) => [$ops::splat(program.consts[usize::from(k)]); CHAIN_VECTORS],
                                        Right::Input(j) => match sources[usize::from(j)] {
                                            // SAFETY: `at + step <= len`, inside the source.
                                            Source::Full(p) => std::array::from_fn(|v| unsafe {
                                                $ops::load(p.add(at + v * $lanes), $lanes)
                                            }),
                                            Source::Value(x) => [$ops::splat(x); CHAIN_VECTORS],
                                            // SAFETY: a pattern of this ISA's lanes.
                                            Source::Lanes(p, _) => [unsafe { $ops::load(p, $lanes) }; CHAIN_VECTORS],
                                        },
                                    };
                                    match op {
                                        MapOp::Add => std::array::from_fn(|v| $ops::add(acc[v], b[v])),
                                        MapOp::Sub => std::array::from_fn(|v| $ops::sub(acc[v], b[v])),
                                        MapOp::Mul => std::array::from_fn(|v| $ops::mul(acc[v], b[v])),
                                        MapOp::Div => std::array::from_fn(|v| $ops::div(acc[v], b[v])),
                                        MapOp::Min => std::array::from_fn(|v| $ops::min(acc[v], b[v])),
                                        _ => std::array::from_fn(|v| $ops::max(acc[v], b[v])),
                                    }
                                }
                            };
                        }
                        for (v, y) in acc.into_iter().enumerate() {
                            // SAFETY: as the load.
                            unsafe { $ops::store(out.add(at + v * $lanes), y, $lanes) };
                        }
                        at += step;
                    }
                    at
                }

                /// Elements `at..at + n` (`n` a whole block when `FULL`).
                ///
                /// # Safety
                /// As the evaluator, for those elements.
                #[inline]
                #[target_feature(enable = $feature)]
                pub(super) unsafe fn block<const FULL: bool>(
                    program: &Program,
                    sources: &[Source; 3],
                    out: *mut f32,
                    at: usize,
                    n: usize,
                    stack: &mut [[$v; VECTORS]; MAX_DEPTH],
                ) {
                    let n = if FULL { VECTORS * $lanes } else { n };
                    let mut sp = 0;
                    for &op in program.ops() {
                        match op {
                            MapOp::Input(k) => {
                                for v in 0..VECTORS {
                                    let lanes = n.saturating_sub(v * $lanes).min($lanes);
                                    stack[sp][v] = match sources[usize::from(k)] {
                                        // A partial block's vectors past its end: no pointer
                                        // is formed past the source.
                                        Source::Full(_) if lanes == 0 => $ops::zero(),
                                        // SAFETY: `lanes` (> 0) elements from `at + v·lanes`
                                        // are inside the source.
                                        Source::Full(p) => unsafe { $ops::load(p.add(at + v * $lanes), lanes) },
                                        Source::Value(x) => $ops::splat(x),
                                        // SAFETY: a pattern of this ISA's lanes (checked by
                                        // `segment`), read from a vector's start (`at` and
                                        // `v·lanes` are multiples of it).
                                        Source::Lanes(p, _) => unsafe { $ops::load(p, $lanes) },
                                    };
                                }
                                sp += 1;
                            }
                            MapOp::Const(k) => {
                                stack[sp] = [$ops::splat(program.consts[usize::from(k)]); VECTORS];
                                sp += 1;
                            }
                            MapOp::Exp => stack[sp - 1] = $ops::exp(stack[sp - 1]),
                            MapOp::Ln => stack[sp - 1] = $ops::ln(stack[sp - 1]),
                            MapOp::Sigmoid => stack[sp - 1] = $ops::sigmoid(stack[sp - 1]),
                            MapOp::Tanh => stack[sp - 1] = $ops::tanh(stack[sp - 1]),
                            MapOp::Erf => stack[sp - 1] = $ops::erf(stack[sp - 1]),
                            MapOp::TanhSoftplus => stack[sp - 1] = $ops::tanh_softplus(stack[sp - 1]),
                            MapOp::LessSelect | MapOp::LessEqSelect => {
                                sp -= 3;
                                for v in 0..VECTORS {
                                    let (a, b) = (stack[sp - 1][v], stack[sp][v]);
                                    let (then, otherwise) = (stack[sp + 1][v], stack[sp + 2][v]);
                                    let taken = if op == MapOp::LessSelect { $ops::lt(a, b) } else { $ops::le(a, b) };
                                    stack[sp - 1][v] = $ops::select(taken, then, otherwise);
                                }
                            }
                            MapOp::Neg | MapOp::Abs | MapOp::Sqrt => {
                                for v in 0..VECTORS {
                                    let x = stack[sp - 1][v];
                                    stack[sp - 1][v] = match op {
                                        MapOp::Neg => $ops::neg(x),
                                        MapOp::Abs => $ops::abs(x),
                                        _ => $ops::sqrt(x),
                                    };
                                }
                            }
                            binary => {
                                sp -= 1;
                                for v in 0..VECTORS {
                                    let (a, b) = (stack[sp - 1][v], stack[sp][v]);
                                    stack[sp - 1][v] = match binary {
                                        MapOp::Add => $ops::add(a, b),
                                        MapOp::Sub => $ops::sub(a, b),
                                        MapOp::Mul => $ops::mul(a, b),
                                        MapOp::Div => $ops::div(a, b),
                                        MapOp::Min => $ops::min(a, b),
                                        _ => $ops::max(a, b),
                                    };
                                }
                            }
                        }
                    }
                    // Only the vectors the block reaches (all of them in a whole block).
                    for v in 0..n.div_ceil($lanes) {
                        let lanes = n.saturating_sub(v * $lanes).min($lanes);
                        // SAFETY: `lanes` elements from `at + v·lanes` are inside the output.
                        unsafe { $ops::store(out.add(at + v * $lanes), stack[0][v], lanes) };
                    }
                }
            }
        };
    }

    evaluator!(avx512, "avx512f", 16, 8, z, std::arch::x86_64::__m512);
    evaluator!(avx2, "avx2,fma", 8, 4, y, std::arch::x86_64::__m256);

    /// `exp`, `sigmoid`, SiLU, `tanh`, `erf` and `tanh(softplus)` over a module's primitives (`splat`, `add`,
    /// `sub`, `mul`, `div`, `neg`, `abs`, `fmadd`, `fnmadd`, `fmsub`, `lt`, `select`, `min_or_second`,
    /// `max_or_second`, `if_sign`, `scale`, `eighth`, `power_of_two`): the scalar code's steps.
    macro_rules! transcendentals {
        ($feature:literal, $v:ty) => {
            /// `1 / (1 + e^-x)` on `N` vectors (their steps interleaved): the scalar code's
            /// steps.
            #[inline]
            #[target_feature(enable = $feature)]
            pub(crate) fn sigmoid<const N: usize>(x: [$v; N]) -> [$v; N] {
                let mut out = x;
                for v in 0..N {
                    let (shifted, _, p) = eighths(max_or_second(splat(SIGMOID_LO), neg(abs(x[v]))));
                    let power = power_of_two(shifted);
                    let e = fmadd(power, p, power);
                    let sigmoid = div(if_sign(x[v], e, splat(1.0)), add(splat(1.0), e));
                    out[v] = select(lt(x[v], splat(SIGMOID_LO)), splat(0.0), sigmoid);
                }
                out
            }
            /// SiLU of `N` vectors: the scalar code's steps.
            #[inline]
            #[target_feature(enable = $feature)]
            pub(crate) fn silu<const N: usize>(x: [$v; N]) -> [$v; N] {
                let [c4, c3, c2] = EIGHTHS_POLY;
                let mut out = x;
                for v in 0..N {
                    let c = min_or_second(splat(SILU_BOUND), max_or_second(splat(-SILU_BOUND), x[v]));
                    let shifted = fnmadd(c, splat(8.0 * std::f32::consts::LOG2_E), splat(MAGIC));
                    let k = sub(shifted, splat(MAGIC));
                    let s = fmadd(k, splat(C2 / 8.0), fmadd(k, splat(C1 / 8.0), c));
                    let q = fmadd(fmadd(s, splat(c4), splat(-c3)), s, splat(c2));
                    let p = fmsub(q, mul(s, s), s);
                    let power = power_of_two(shifted);
                    let silu = div(x[v], add(splat(1.0), fmadd(power, p, power)));
                    out[v] = select(lt(x[v], splat(-SILU_BOUND)), mul(x[v], splat(0.0)), silu);
                }
                out
            }
            /// `f` on `N` vectors by its [`OddRational`]: the scalar code's steps.
            #[inline]
            #[target_feature(enable = $feature)]
            fn odd_rational<const N: usize, const P: usize, const Q: usize>(
                f: &OddRational<P, Q>,
                x: [$v; N],
            ) -> [$v; N] {
                let mut out = x;
                for v in 0..N {
                    let c = min_or_second(splat(f.bound), max_or_second(splat(-f.bound), x[v]));
                    let z = mul(c, c);
                    let p = f.p[1..].iter().fold(splat(f.p[0]), |p, &k| fmadd(p, z, splat(k)));
                    let q = f.q[1..].iter().fold(splat(f.q[0]), |q, &k| fmadd(q, z, splat(k)));
                    out[v] = min_or_second(splat(1.0), max_or_second(splat(-1.0), div(mul(c, p), q)));
                }
                out
            }
            /// `tanh` on a block of vectors: the scalar code's steps.
            #[inline]
            #[target_feature(enable = $feature)]
            pub(crate) fn tanh<const N: usize>(x: [$v; N]) -> [$v; N] {
                odd_rational(&TANH, x)
            }
            /// `erf` on a block of vectors: the scalar code's steps.
            #[inline]
            #[target_feature(enable = $feature)]
            pub(crate) fn erf<const N: usize>(x: [$v; N]) -> [$v; N] {
                odd_rational(&ERF, x)
            }
            /// `tanh(ln(1 + e^x))` on `N` vectors: the scalar code's steps.
            #[inline]
            #[target_feature(enable = $feature)]
            pub(crate) fn tanh_softplus<const N: usize>(x: [$v; N]) -> [$v; N] {
                let mut out = x;
                for v in 0..N {
                    out[v] = min_or_second(splat(SOFTPLUS_HI), max_or_second(splat(SIGMOID_LO), x[v]));
                }
                let mut e = exp(out);
                for v in 0..N {
                    let n = mul(e[v], add(e[v], splat(2.0)));
                    e[v] = select(lt(x[v], splat(SIGMOID_LO)), splat(0.0), div(n, add(n, splat(2.0))));
                }
                e
            }
            /// `e^x` on `N` vectors: the scalar code's steps.
            #[inline]
            #[target_feature(enable = $feature)]
            pub(crate) fn exp<const N: usize>(x: [$v; N]) -> [$v; N] {
                let mut out = x;
                for v in 0..N {
                    let (shifted, k, p) = eighths(min_or_second(splat(EXP_HI), max_or_second(splat(EXP_LO), x[v])));
                    let t = eighth(shifted);
                    out[v] = scale(fmadd(t, p, t), k);
                }
                out
            }
            /// `ln x` on `N` vectors: the scalar code's steps, its cases as selects.
            #[inline]
            #[target_feature(enable = $feature)]
            pub(crate) fn ln<const N: usize>(x: [$v; N]) -> [$v; N] {
                let mut out = x;
                for v in 0..N {
                    let tiny = lt(x[v], splat(f32::MIN_POSITIVE));
                    let (e, m) = exponent_and_mantissa(select(tiny, mul(x[v], splat(TWO_23)), x[v]));
                    let e = add(e, select(tiny, splat(-23.0), splat(0.0)));
                    let f = sub(m, splat(1.0));
                    let z = mul(f, f);
                    let p = LN_POLY[1..].iter().fold(splat(LN_POLY[0]), |p, &k| fmadd(p, f, splat(k)));
                    let y = fmadd(e, splat(C2), mul(mul(p, f), z));
                    let y = fmadd(z, splat(-0.5), y);
                    let r = fmadd(e, splat(C1), add(f, y));
                    let r = select(le(x[v], splat(0.0)), splat(f32::NEG_INFINITY), r);
                    let r = select(lt(x[v], splat(0.0)), splat(f32::NAN), r);
                    let r = select(lt(splat(f32::MAX), x[v]), splat(f32::INFINITY), r);
                    out[v] = select(le(x[v], splat(f32::INFINITY)), r, x[v]);
                }
                out
            }
            /// The scalar `eighths`' steps: `shifted`, `k` and `p` of `e^t`.
            #[inline]
            #[target_feature(enable = $feature)]
            fn eighths(t: $v) -> ($v, $v, $v) {
                let shifted = fmadd(t, splat(8.0 * std::f32::consts::LOG2_E), splat(MAGIC));
                let k = sub(shifted, splat(MAGIC));
                let r = fnmadd(k, splat(C2 / 8.0), fnmadd(k, splat(C1 / 8.0), t));
                let [c4, c3, c2] = EIGHTHS_POLY;
                let q = fmadd(fmadd(r, splat(c4), splat(c3)), r, splat(c2));
                (shifted, k, fmadd(q, mul(r, r), r))
            }
        };
    }
    use transcendentals;

    /// AVX-512 operations.
    pub(crate) mod z {
        use std::arch::x86_64::*;

        use super::{
            C1, C2, EIGHTHS, EIGHTHS_BITS, EIGHTHS_POLY, ERF, EXP_HI, EXP_LO, HALF_SQRT2_BITS, LN_POLY, MAGIC,
            OddRational, SIGMOID_LO, SILU_BOUND, SOFTPLUS_HI, TANH, TWO_23,
        };

        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn splat(x: f32) -> __m512 {
            _mm512_set1_ps(x)
        }
        fn mask(lanes: usize) -> __mmask16 {
            if lanes >= 16 { 0xFFFF } else { ((1u32 << lanes) - 1) as __mmask16 }
        }
        /// # Safety
        /// `lanes` (at most 16) elements at `p`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn load(p: *const f32, lanes: usize) -> __m512 {
            unsafe { _mm512_maskz_loadu_ps(mask(lanes), p) }
        }
        /// # Safety
        /// Room for `lanes` (at most 16) elements at `p`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn store(p: *mut f32, v: __m512, lanes: usize) {
            unsafe { _mm512_mask_storeu_ps(p, mask(lanes), v) }
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn add(a: __m512, b: __m512) -> __m512 {
            _mm512_add_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn sub(a: __m512, b: __m512) -> __m512 {
            _mm512_sub_ps(a, b)
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
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn neg(a: __m512) -> __m512 {
            _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(i32::MIN)))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn abs(a: __m512) -> __m512 {
            _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(i32::MAX)))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn sqrt(a: __m512) -> __m512 {
            _mm512_sqrt_ps(a)
        }
        /// `a < b ? a : b`, NaN (`a + b`) when either is.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn min(a: __m512, b: __m512) -> __m512 {
            let m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b), b, a);
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b), m, _mm512_add_ps(a, b))
        }
        /// `a > b ? a : b`, NaN (`a + b`) when either is.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn max(a: __m512, b: __m512) -> __m512 {
            let m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b), b, a);
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b), m, _mm512_add_ps(a, b))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn fnmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fnmadd_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn fmsub(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmsub_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn lt(a: __m512, b: __m512) -> __mmask16 {
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn le(a: __m512, b: __m512) -> __mmask16 {
            _mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, b)
        }
        /// `mask ? then : otherwise` lane-wise.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn select(mask: __mmask16, then: __m512, otherwise: __m512) -> __m512 {
            _mm512_mask_blend_ps(mask, otherwise, then)
        }
        /// `e · 2^⌊k/8⌋` rounded once (the scalar `scale`).
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn scale(e: __m512, k: __m512) -> __m512 {
            _mm512_scalef_ps(e, _mm512_mul_ps(k, _mm512_set1_ps(0.125)))
        }
        /// `2^(j/8)` for the `8n + j` in `shifted` (`8n + j + MAGIC`): the [`EIGHTHS`] entry
        /// (the table twice over, since the lookup reads four bits).
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn eighth(shifted: __m512) -> __m512 {
            let [t0, t1, t2, t3, t4, t5, t6, t7] = EIGHTHS;
            let table = _mm512_setr_ps(t0, t1, t2, t3, t4, t5, t6, t7, t0, t1, t2, t3, t4, t5, t6, t7);
            _mm512_permutexvar_ps(_mm512_castps_si512(shifted), table)
        }
        /// `a < b ? a : b`: `b` when either is NaN.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn min_or_second(a: __m512, b: __m512) -> __m512 {
            _mm512_min_ps(a, b)
        }
        /// `a > b ? a : b`: `b` when either is NaN.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn max_or_second(a: __m512, b: __m512) -> __m512 {
            _mm512_max_ps(a, b)
        }
        /// `x`'s sign bit set ? `then` : `otherwise`, lane-wise.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn if_sign(x: __m512, then: __m512, otherwise: __m512) -> __m512 {
            _mm512_mask_blend_ps(
                _mm512_cmplt_epi32_mask(_mm512_castps_si512(x), _mm512_setzero_si512()),
                otherwise,
                then,
            )
        }
        /// `2^n · 2^(j/8)` for the `8n + j` in `shifted` (`8n + j + MAGIC`): the
        /// [`EIGHTHS_BITS`] entry (the table twice over, since the lookup reads four bits) plus
        /// `shifted`'s bits shifted left by 20.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn power_of_two(shifted: __m512) -> __m512 {
            let [t0, t1, t2, t3, t4, t5, t6, t7] = EIGHTHS_BITS.map(|t| t as i32);
            let table = _mm512_setr_epi32(t0, t1, t2, t3, t4, t5, t6, t7, t0, t1, t2, t3, t4, t5, t6, t7);
            let bits = _mm512_castps_si512(shifted);
            let entry = _mm512_permutexvar_epi32(bits, table);
            _mm512_castsi512_ps(_mm512_add_epi32(entry, _mm512_slli_epi32::<20>(bits)))
        }
        /// The scalar `exponent_and_mantissa`'s integer steps.
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn exponent_and_mantissa(x: __m512) -> (__m512, __m512) {
            let bits = _mm512_sub_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(HALF_SQRT2_BITS));
            let mantissa = _mm512_and_si512(bits, _mm512_set1_epi32(0x7f_ffff));
            (
                _mm512_cvtepi32_ps(_mm512_srai_epi32::<23>(bits)),
                _mm512_castsi512_ps(_mm512_add_epi32(mantissa, _mm512_set1_epi32(HALF_SQRT2_BITS))),
            )
        }
        /// `v` with its lanes from `lanes` on replaced by `fill`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn fill_past(v: __m512, lanes: usize, fill: f32) -> __m512 {
            _mm512_mask_blend_ps(mask(lanes), _mm512_set1_ps(fill), v)
        }
        /// The largest lane, NaN when any lane is.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn max_across(v: __m512) -> f32 {
            if _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v) != 0 { f32::NAN } else { _mm512_reduce_max_ps(v) }
        }
        super::transcendentals!("avx512f", __m512);
    }

    /// AVX2 operations.
    pub(crate) mod y {
        use std::arch::x86_64::*;

        use super::{
            C1, C2, EIGHTHS, EIGHTHS_BITS, EIGHTHS_POLY, ERF, EXP_HI, EXP_LO, HALF_SQRT2_BITS, LN_POLY, MAGIC,
            OddRational, SIGMOID_LO, SILU_BOUND, SOFTPLUS_HI, TANH, TWO_23,
        };

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn splat(x: f32) -> __m256 {
            _mm256_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn mask(lanes: usize) -> __m256i {
            _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
        }
        /// # Safety
        /// `lanes` (at most 8) elements at `p`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn load(p: *const f32, lanes: usize) -> __m256 {
            if lanes >= 8 { unsafe { _mm256_loadu_ps(p) } } else { unsafe { _mm256_maskload_ps(p, mask(lanes)) } }
        }
        /// # Safety
        /// Room for `lanes` (at most 8) elements at `p`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) unsafe fn store(p: *mut f32, v: __m256, lanes: usize) {
            if lanes >= 8 {
                unsafe { _mm256_storeu_ps(p, v) }
            } else {
                unsafe { _mm256_maskstore_ps(p, mask(lanes), v) }
            }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn add(a: __m256, b: __m256) -> __m256 {
            _mm256_add_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn sub(a: __m256, b: __m256) -> __m256 {
            _mm256_sub_ps(a, b)
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
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn neg(a: __m256) -> __m256 {
            _mm256_xor_ps(a, _mm256_set1_ps(-0.0))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn abs(a: __m256) -> __m256 {
            _mm256_andnot_ps(_mm256_set1_ps(-0.0), a)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn sqrt(a: __m256) -> __m256 {
            _mm256_sqrt_ps(a)
        }
        /// `mask ? then : otherwise` lane-wise.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn select(mask: __m256, then: __m256, otherwise: __m256) -> __m256 {
            _mm256_blendv_ps(otherwise, then, mask)
        }
        /// `a < b ? a : b`, NaN (`a + b`) when either is.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn min(a: __m256, b: __m256) -> __m256 {
            let m = select(_mm256_cmp_ps::<_CMP_LT_OQ>(a, b), a, b);
            select(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, b), _mm256_add_ps(a, b), m)
        }
        /// `a > b ? a : b`, NaN (`a + b`) when either is.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn max(a: __m256, b: __m256) -> __m256 {
            let m = select(_mm256_cmp_ps::<_CMP_GT_OQ>(a, b), a, b);
            select(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, b), _mm256_add_ps(a, b), m)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn fnmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fnmadd_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn fmsub(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmsub_ps(a, b, c)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn lt(a: __m256, b: __m256) -> __m256 {
            _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn le(a: __m256, b: __m256) -> __m256 {
            _mm256_cmp_ps::<_CMP_LE_OQ>(a, b)
        }
        /// `e · 2^⌊k/8⌋` rounded once: the scalar `scale`'s two factors.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn scale(e: __m256, k: __m256) -> __m256 {
            let n = _mm256_srai_epi32::<3>(_mm256_cvtps_epi32(k));
            let half = _mm256_srai_epi32::<1>(n);
            let bias = _mm256_set1_epi32(127);
            let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(half, bias)));
            let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_sub_epi32(n, half), bias)));
            _mm256_mul_ps(_mm256_mul_ps(e, s1), s2)
        }
        /// `a < b ? a : b`: `b` when either is NaN.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn min_or_second(a: __m256, b: __m256) -> __m256 {
            _mm256_min_ps(a, b)
        }
        /// `a > b ? a : b`: `b` when either is NaN.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn max_or_second(a: __m256, b: __m256) -> __m256 {
            _mm256_max_ps(a, b)
        }
        /// `x`'s sign bit set ? `then` : `otherwise`, lane-wise.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn if_sign(x: __m256, then: __m256, otherwise: __m256) -> __m256 {
            _mm256_blendv_ps(otherwise, then, x)
        }
        /// `2^(j/8)` for the `8n + j` in `shifted` (`8n + j + MAGIC`): the [`EIGHTHS`] entry.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn eighth(shifted: __m256) -> __m256 {
            let [t0, t1, t2, t3, t4, t5, t6, t7] = EIGHTHS;
            _mm256_permutevar8x32_ps(_mm256_setr_ps(t0, t1, t2, t3, t4, t5, t6, t7), _mm256_castps_si256(shifted))
        }
        /// `2^n · 2^(j/8)` for the `8n + j` in `shifted` (`8n + j + MAGIC`): the
        /// [`EIGHTHS_BITS`] entry plus `shifted`'s bits shifted left by 20.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn power_of_two(shifted: __m256) -> __m256 {
            let [t0, t1, t2, t3, t4, t5, t6, t7] = EIGHTHS_BITS.map(|t| t as i32);
            let bits = _mm256_castps_si256(shifted);
            let entry = _mm256_permutevar8x32_epi32(_mm256_setr_epi32(t0, t1, t2, t3, t4, t5, t6, t7), bits);
            _mm256_castsi256_ps(_mm256_add_epi32(entry, _mm256_slli_epi32::<20>(bits)))
        }
        /// The scalar `exponent_and_mantissa`'s integer steps.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn exponent_and_mantissa(x: __m256) -> (__m256, __m256) {
            let bits = _mm256_sub_epi32(_mm256_castps_si256(x), _mm256_set1_epi32(HALF_SQRT2_BITS));
            let mantissa = _mm256_and_si256(bits, _mm256_set1_epi32(0x7f_ffff));
            (
                _mm256_cvtepi32_ps(_mm256_srai_epi32::<23>(bits)),
                _mm256_castsi256_ps(_mm256_add_epi32(mantissa, _mm256_set1_epi32(HALF_SQRT2_BITS))),
            )
        }
        /// `v` with its lanes from `lanes` on replaced by `fill`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn fill_past(v: __m256, lanes: usize, fill: f32) -> __m256 {
            if lanes >= 8 { v } else { select(_mm256_castsi256_ps(mask(lanes)), v, _mm256_set1_ps(fill)) }
        }
        /// The largest lane, NaN when any lane is.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn max_across(v: __m256) -> f32 {
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) != 0 {
                return f32::NAN;
            }
            let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
        }
        super::transcendentals!("avx2,fma", __m256);
    }
}
