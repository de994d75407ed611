//! The closed set of graph operators and their attributes.
//!
//! Attributes are stored fully resolved: the ONNX importer turns `auto_pad` into explicit pads,
//! shape-deciding inputs (Reshape's shape, Pad's pads, Clip's bounds, ...) into fields, and
//! version-dependent defaults into values, so no consumer needs to know the opset.

use std::fmt;

use crate::dtype::DType;
use crate::tensor::Tensor;

/// A sliding window over `k` spatial axes (input layout N, C, spatial...), shared by
/// convolution and pooling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Kernel extent per spatial axis.
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Padding at the start of each spatial axis.
    pub pads_begin: Vec<usize>,
    /// Padding at the end of each spatial axis.
    pub pads_end: Vec<usize>,
}

impl Window {
    /// A window with unit strides and dilations and no padding.
    pub fn dense(kernel: Vec<usize>) -> Window {
        let k = kernel.len();
        Window { kernel, strides: vec![1; k], dilations: vec![1; k], pads_begin: vec![0; k], pads_end: vec![0; k] }
    }
}

/// A convolution: its window (kernel taken from the weight shape) and group count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvAttrs {
    pub window: Window,
    pub group: usize,
}

/// A pooling window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAttrs {
    pub window: Window,
    /// Output extent rounds up instead of down; a window starting in the end padding is dropped.
    pub ceil_mode: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    /// `x^y` (floats).
    Pow,
    /// Remainder with the divisor's sign (ONNX Mod with `fmod = 0`, numpy's mod).
    Mod,
    /// Remainder with the dividend's sign (C's fmod: ONNX Mod with `fmod = 1`).
    Fmod,
}

/// Elementwise comparisons (numpy broadcasting; the output is bool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareOp {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

/// Reductions over axes (ONNX's ReduceX).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    /// Sum of absolute values.
    L1,
    /// Square root of the sum of squares.
    L2,
    SumSquare,
    /// `log(sum(x))`.
    LogSum,
    /// `log(sum(exp(x)))`.
    LogSumExp,
}

/// Elementwise logic on bool tensors (numpy broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogicalOp {
    And,
    Or,
    Xor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Relu,
    Sigmoid,
    Tanh,
    Exp,
    Sqrt,
    Erf,
    Abs,
    Neg,
    Floor,
    Ceil,
    Round,
    Sign,
    Reciprocal,
    Log,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Softplus,
    Softsign,
    HardSwish,
    Mish,
    /// `0.5 x (1 + erf(x / sqrt 2))`.
    Gelu,
    /// Gelu's tanh approximation (`approximate="tanh"`).
    GeluTanh,
}

impl UnaryOp {
    /// Whether the op takes integer tensors too (as ONNX defines it).
    pub fn takes_integers(self) -> bool {
        matches!(self, UnaryOp::Relu | UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    Constant,
    Edge,
    Reflect,
    Wrap,
}

/// Which blocks of a tensor one quantization scale covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantAxis {
    /// One scale (and zero point) for the whole tensor.
    PerTensor,
    /// One scale per index along `axis`.
    PerAxis { axis: usize },
    /// One scale per `block_size` consecutive indices along `axis`; the scale tensor has the
    /// input's rank.
    Blocked { axis: usize, block_size: usize },
}

/// One axis of a [`Op::Slice`]: output index `i` reads input index `start + i * step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceAxis {
    pub start: usize,
    pub step: i64,
    pub len: usize,
}

/// How ScatterElements/ScatterND combine an update with the value already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterReduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

/// How GridSample reads between pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GridMode {
    Nearest,
    Linear,
    Cubic,
}

/// What GridSample reads outside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GridPadding {
    Zeros,
    Border,
    Reflection,
}

/// Elementwise activations with parameters (ONNX's defaults filled in by the importer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// `x < 0 ? alpha * (exp(x) - 1) : x`.
    Elu { alpha: f32 },
    /// `gamma * (x <= 0 ? alpha * (exp(x) - 1) : x)`.
    Selu { alpha: f32, gamma: f32 },
    /// `max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`.
    Celu { alpha: f32 },
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid { alpha: f32, beta: f32 },
    /// `x > alpha ? x : 0`.
    ThresholdedRelu { alpha: f32 },
    /// `x * sigmoid(alpha * x)`.
    Swish { alpha: f32 },
}

impl Activation {
    pub fn name(&self) -> &'static str {
        match self {
            Activation::Elu { .. } => "Elu",
            Activation::Selu { .. } => "Selu",
            Activation::Celu { .. } => "Celu",
            Activation::HardSigmoid { .. } => "HardSigmoid",
            Activation::ThresholdedRelu { .. } => "ThresholdedRelu",
            Activation::Swish { .. } => "Swish",
        }
    }
}

/// A graph operator. Inputs are listed per variant as `[a, b, (optional c)]`; a missing optional
/// input is simply absent from the node's input list (only trailing inputs can be missing).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `[x, w, (bias)]` -> `[y]`, float types.
    Conv(ConvAttrs),
    /// `[x, w, x_zero_point, w_zero_point]` -> `[y: i32]`; x and w are i8 or u8. w_zero_point is
    /// a scalar or one value per output channel.
    ConvInteger(ConvAttrs),
    /// `[a, b, (c)]` -> `alpha * op(a) @ op(b) + beta * c`, `c` broadcast to the result.
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    /// `[a, b]` -> numpy matmul (1-d promotion, batched broadcasting).
    MatMul,
    /// `[a, b, a_zero_point, b_zero_point]` -> `[y: i32]`, numpy matmul of the
    /// zero-point-corrected operands. a_zero_point is a scalar or one per row of a; b_zero_point a
    /// scalar or one per column of b.
    MatMulInteger,
    /// `[a, b]` -> elementwise with multidirectional broadcasting.
    Binary(BinaryOp),
    Unary(UnaryOp),
    Compare(CompareOp),
    Logical(LogicalOp),
    /// Logical negation of a bool tensor.
    Not,
    /// A reduction over `axes` (sorted, distinct; empty: the identity), kept as extent-1 axes
    /// with `keepdims`.
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdims: bool,
    },
    /// The index (i64) of the largest (`max`) or smallest element along `axis`, the first one
    /// or with `last` the last one among equals.
    ArgReduce {
        max: bool,
        axis: usize,
        keepdims: bool,
        last: bool,
    },
    /// `condition ? x : y`, the three broadcast together.
    Where,
    /// A parametric elementwise activation (floats).
    Activation(Activation),
    /// `[data, indices]` -> numpy `take` along `axis`: the output shape is
    /// `data.shape[..axis] ++ indices.shape ++ data.shape[axis + 1..]`. Indices (i32 or i64)
    /// count from the end when negative; one outside `-n..n` is an error when it is read.
    Gather {
        axis: usize,
    },
    /// `[data, indices]` -> `out[i] = data[i with axis `axis` replaced by indices[i]]` (indices as
    /// in Gather; the output has the indices' shape).
    GatherElements {
        axis: usize,
    },
    /// `[data, indices]` -> ONNX GatherND: the last axis of `indices` (length k) indexes
    /// `data`'s axes `batch_dims..batch_dims + k`; the first `batch_dims` axes are shared.
    GatherND {
        batch_dims: usize,
    },
    /// `[data, indices, updates]` -> `data` with `updates[i]` written (or combined) at `i` with
    /// axis `axis` replaced by `indices[i]`.
    ScatterElements {
        axis: usize,
        reduction: ScatterReduction,
    },
    /// `[data, indices, updates]` -> `data` with the slices `updates[j...]` written (or
    /// combined) at `data[indices[j...]]`.
    ScatterND {
        reduction: ScatterReduction,
    },
    /// A strided slice, one entry per axis.
    Slice {
        axes: Vec<SliceAxis>,
    },
    /// Broadcasts the input to `broadcast(x.shape, shape)`.
    Expand {
        shape: Vec<usize>,
    },
    /// The input repeated `repeats[d]` times along each axis.
    Tile {
        repeats: Vec<usize>,
    },
    /// `[x, scale, (bias)]` -> normalization over the axes `axis..` (floats): with `rms`,
    /// `x / sqrt(mean(x^2) + epsilon)`, else `(x - mean) / sqrt(var + epsilon)`; then times
    /// `scale` plus `bias`, both shaped like the normalized axes.
    Normalize {
        axis: usize,
        epsilon: f32,
        rms: bool,
    },
    /// `[x, indices_0, weights_0, indices_1, weights_1, ...]` -> separable interpolation
    /// (Resize, Upsample): along each of `axes`, output index `o` is
    /// `sum_t weights_k[o, t] * x[indices_k[o, t]]` (tables `[out_len, taps]`, indices i64 within
    /// the axis, weights of x's type, f32 for integer x), the products over the axes summed. A row
    /// whose first index is -1 lies outside the input: the output there is `extrapolation`.
    Resample {
        axes: Vec<usize>,
        extrapolation: Option<f32>,
    },
    /// `[x: [N, C, D...], grid: [N, O..., k]]` -> `[N, C, O...]`: x sampled at the grid's
    /// normalized coordinates (`grid[..., 0]` along the last axis, `-1..1` spanning the input,
    /// corner pixels' centers with `align_corners`).
    GridSample {
        mode: GridMode,
        padding: GridPadding,
        align_corners: bool,
    },
    /// Running sum (or with `product`, product) along `axis`; `exclusive` leaves the current
    /// element out, `reverse` runs from the end.
    CumSum {
        axis: usize,
        exclusive: bool,
        reverse: bool,
        product: bool,
    },
    /// `[x]` -> `[values, indices: i64]`, the `k` largest (or smallest) along `axis`, in order
    /// (ties: the lower index first).
    TopK {
        axis: usize,
        k: usize,
        largest: bool,
    },
    LeakyRelu {
        alpha: f32,
    },
    /// Bounds are scalars of the input's dtype; a missing bound does not clip.
    Clip {
        min: Option<Tensor>,
        max: Option<Tensor>,
    },
    /// Softmax over `axis`; with `coerce_2d` (ONNX opset < 13) over all axes from `axis` on,
    /// as if the input were flattened to 2-d there; with `log`, LogSoftmax
    /// (`x - max - log(sum(exp(x - max)))`).
    Softmax {
        axis: usize,
        coerce_2d: bool,
        log: bool,
    },
    /// `[x]` -> `[y, (indices: i64)]`. Indices flatten (n, c, spatial) in row-major order, or
    /// with the spatial axes in column-major order when `storage_order_col_major`.
    MaxPool {
        pool: PoolAttrs,
        storage_order_col_major: bool,
    },
    AveragePool {
        pool: PoolAttrs,
        count_include_pad: bool,
    },
    GlobalAveragePool,
    /// `[x, scale, bias, mean, var]` -> `[y]`, inference mode, channels on axis 1.
    BatchNormalization {
        epsilon: f32,
    },
    Flatten {
        axis: usize,
    },
    /// Target shape with every 0 and -1 already resolved.
    Reshape {
        shape: Vec<usize>,
    },
    Transpose {
        perm: Vec<usize>,
    },
    /// Variadic: `[x0, x1, ...]` joined along `axis`.
    Concat {
        axis: usize,
    },
    /// `pads` holds begin values for every axis, then end values; negative values crop.
    /// `value` is a scalar of the input dtype used by `PadMode::Constant`.
    Pad {
        pads: Vec<i64>,
        mode: PadMode,
        value: Tensor,
    },
    Squeeze {
        axes: Vec<usize>,
    },
    Unsqueeze {
        axes: Vec<usize>,
    },
    Identity,
    /// Inference-mode dropout: `[x]` -> `[x, (mask: all true)]`.
    Dropout,
    Cast {
        to: DType,
    },
    /// `[x, scale, zero_point]` -> `saturate(round_half_even(x / scale) + zero_point)`,
    /// result dtype = zero point dtype.
    QuantizeLinear {
        axis: QuantAxis,
    },
    /// `[x, scale, zero_point]` -> `(x - zero_point) * scale`, result dtype = scale dtype.
    DequantizeLinear {
        axis: QuantAxis,
    },
    /// `[x, shift]`; shifts outside `[0, bits)` give 0 (or -1 for negative x shifted right).
    BitShift {
        left: bool,
    },
    /// Not an ONNX op: the integer requantization of a quantized model's accumulators
    /// (see [`crate::passes::integer_form`]). `[x: i32]` -> `[y: i8]`,
    /// `y = clamp(round_shift(x, shift), min, max)` where `round_shift(x, k)` is
    /// `floor((x + 2^(k-1)) / 2^k)` for `k > 0` (rounding half up, as an add and an arithmetic
    /// shift: what VTA's ALU runs), `x` for `k = 0` and `x * 2^-k` for `k < 0`; `shift` in
    /// `-31..=31`, `-128 <= min <= max <= 127`.
    Requantize {
        shift: i32,
        min: i32,
        max: i32,
    },
}

impl Op {
    /// The ONNX operator type this op corresponds to.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Conv(_) => "Conv",
            Op::ConvInteger(_) => "ConvInteger",
            Op::Gemm { .. } => "Gemm",
            Op::MatMul => "MatMul",
            Op::MatMulInteger => "MatMulInteger",
            Op::Binary(b) => match b {
                BinaryOp::Add => "Add",
                BinaryOp::Sub => "Sub",
                BinaryOp::Mul => "Mul",
                BinaryOp::Div => "Div",
                BinaryOp::Max => "Max",
                BinaryOp::Min => "Min",
                BinaryOp::Pow => "Pow",
                BinaryOp::Mod | BinaryOp::Fmod => "Mod",
            },
            Op::Unary(u) => match u {
                UnaryOp::Relu => "Relu",
                UnaryOp::Sigmoid => "Sigmoid",
                UnaryOp::Tanh => "Tanh",
                UnaryOp::Erf => "Erf",
                UnaryOp::Exp => "Exp",
                UnaryOp::Sqrt => "Sqrt",
                UnaryOp::Abs => "Abs",
                UnaryOp::Neg => "Neg",
                UnaryOp::Floor => "Floor",
                UnaryOp::Ceil => "Ceil",
                UnaryOp::Round => "Round",
                UnaryOp::Sign => "Sign",
                UnaryOp::Reciprocal => "Reciprocal",
                UnaryOp::Log => "Log",
                UnaryOp::Sin => "Sin",
                UnaryOp::Cos => "Cos",
                UnaryOp::Tan => "Tan",
                UnaryOp::Asin => "Asin",
                UnaryOp::Acos => "Acos",
                UnaryOp::Atan => "Atan",
                UnaryOp::Sinh => "Sinh",
                UnaryOp::Cosh => "Cosh",
                UnaryOp::Asinh => "Asinh",
                UnaryOp::Acosh => "Acosh",
                UnaryOp::Atanh => "Atanh",
                UnaryOp::Softplus => "Softplus",
                UnaryOp::Softsign => "Softsign",
                UnaryOp::HardSwish => "HardSwish",
                UnaryOp::Mish => "Mish",
                UnaryOp::Gelu | UnaryOp::GeluTanh => "Gelu",
            },
            Op::LeakyRelu { .. } => "LeakyRelu",
            Op::Clip { .. } => "Clip",
            Op::Softmax { log: false, .. } => "Softmax",
            Op::Softmax { log: true, .. } => "LogSoftmax",
            Op::MaxPool { .. } => "MaxPool",
            Op::AveragePool { .. } => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::BatchNormalization { .. } => "BatchNormalization",
            Op::Flatten { .. } => "Flatten",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Concat { .. } => "Concat",
            Op::Pad { .. } => "Pad",
            Op::Squeeze { .. } => "Squeeze",
            Op::Unsqueeze { .. } => "Unsqueeze",
            Op::Identity => "Identity",
            Op::Dropout => "Dropout",
            Op::Cast { .. } => "Cast",
            Op::QuantizeLinear { .. } => "QuantizeLinear",
            Op::DequantizeLinear { .. } => "DequantizeLinear",
            Op::BitShift { .. } => "BitShift",
            Op::Requantize { .. } => "Requantize",
            Op::Compare(c) => match c {
                CompareOp::Equal => "Equal",
                CompareOp::Less => "Less",
                CompareOp::LessOrEqual => "LessOrEqual",
                CompareOp::Greater => "Greater",
                CompareOp::GreaterOrEqual => "GreaterOrEqual",
            },
            Op::Logical(l) => match l {
                LogicalOp::And => "And",
                LogicalOp::Or => "Or",
                LogicalOp::Xor => "Xor",
            },
            Op::Not => "Not",
            Op::Reduce { op, .. } => match op {
                ReduceOp::Sum => "ReduceSum",
                ReduceOp::Mean => "ReduceMean",
                ReduceOp::Max => "ReduceMax",
                ReduceOp::Min => "ReduceMin",
                ReduceOp::Prod => "ReduceProd",
                ReduceOp::L1 => "ReduceL1",
                ReduceOp::L2 => "ReduceL2",
                ReduceOp::SumSquare => "ReduceSumSquare",
                ReduceOp::LogSum => "ReduceLogSum",
                ReduceOp::LogSumExp => "ReduceLogSumExp",
            },
            Op::ArgReduce { max: true, .. } => "ArgMax",
            Op::ArgReduce { max: false, .. } => "ArgMin",
            Op::Where => "Where",
            Op::Activation(a) => a.name(),
            Op::Gather { .. } => "Gather",
            Op::GatherElements { .. } => "GatherElements",
            Op::GatherND { .. } => "GatherND",
            Op::ScatterElements { .. } => "ScatterElements",
            Op::ScatterND { .. } => "ScatterND",
            Op::Slice { .. } => "Slice",
            Op::Expand { .. } => "Expand",
            Op::Tile { .. } => "Tile",
            Op::Normalize { rms: false, .. } => "LayerNormalization",
            Op::Normalize { rms: true, .. } => "RMSNormalization",
            Op::CumSum { product: false, .. } => "CumSum",
            Op::CumSum { product: true, .. } => "CumProd",
            Op::Resample { .. } => "Resize",
            Op::GridSample { .. } => "GridSample",
            Op::TopK { .. } => "TopK",
        }
    }

    /// Ops that only reinterpret their input's shape: the output has the input's elements in the
    /// same row-major order.
    pub fn is_reshape_like(&self) -> bool {
        matches!(self, Op::Flatten { .. } | Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. })
    }

    /// Ops whose (first) output equals their first input.
    pub fn is_identity_like(&self) -> bool {
        matches!(self, Op::Identity | Op::Dropout)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
