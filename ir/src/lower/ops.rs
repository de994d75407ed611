//! Loop nests for every op of the graph IR.
//!
//! Conventions: loads under a guard use clamped indices inside a `select`, so no access is ever
//! out of bounds even when both sides are evaluated (as vectorised code does); accumulators are
//! one-element `local` buffers; f16 math accumulates in f32 like the reference interpreter.

use std::collections::HashMap;

mod indexing;

use super::LowerError;
use super::fuse::{Epilogue, Group};
use crate::dtype::{DType, TensorType};
use crate::graph::{Graph, ValueId};
use crate::loop_ir::build::{FuncBuilder, add, and, flat_index, floordiv, ge, idx, in_range, lt, max, min, mul, sub};
use crate::loop_ir::{BinOp, BufferId, CmpOp, Expr, ForKind, MathOp, PrimFunc, Scope, Stmt};
use crate::op::{
    BinaryOp, CompareOp, ConvAttrs, LogicalOp, Op, PadMode, PoolAttrs, QuantAxis, ReduceOp, UnaryOp, Window,
};
use crate::tensor::Tensor;

/// A tensor as seen inside an operator function.
#[derive(Clone, Debug)]
struct Operand {
    buf: BufferId,
    shape: Vec<usize>,
    dtype: DType,
}

impl Operand {
    fn load(&self, indices: Vec<Expr>) -> Expr {
        Expr::load(self.buf, indices)
    }

    /// Load with numpy broadcasting against an output index of rank >= this rank.
    fn load_broadcast(&self, out_idx: &[Expr]) -> Expr {
        let off = out_idx.len() - self.shape.len();
        let indices = self
            .shape
            .iter()
            .enumerate()
            .map(|(d, &n)| if n == 1 { idx(0) } else { out_idx[off + d].clone() })
            .collect();
        self.load(indices)
    }

    /// Load of a scalar-like operand (shape [] or [1]).
    fn load_scalar(&self) -> Expr {
        self.load(vec![idx(0); self.shape.len()])
    }
}

/// Type used for accumulation and intermediate math: f16 computes in f32.
fn acc_dtype(d: DType) -> DType {
    if d == DType::F16 { DType::F32 } else { d }
}

/// A literal of `dtype` with value `v` (`as` semantics).
fn lit(dtype: DType, v: f64) -> Expr {
    if dtype.is_float() { Expr::float(v, dtype) } else { Expr::int(v as i64, dtype) }
}

fn scalar_literal(t: &Tensor) -> Expr {
    let dtype = t.dtype();
    if dtype.is_float() {
        Expr::float(t.to_f64_vec()[0], dtype)
    } else {
        Expr::int(t.to_i64_vec().map_or(0, |v| v[0]), dtype)
    }
}

fn cast_to(dtype: DType, e: Expr, from: DType) -> Expr {
    if dtype == from { e } else { Expr::cast(dtype, e) }
}

fn binary_expr(op: BinaryOp, a: Expr, b: Expr, dtype: DType) -> Expr {
    let op = match op {
        BinaryOp::Add => BinOp::Add,
        BinaryOp::Sub => BinOp::Sub,
        BinaryOp::Mul => BinOp::Mul,
        BinaryOp::Div => BinOp::Div,
        BinaryOp::Max => BinOp::Max,
        BinaryOp::Min => BinOp::Min,
        BinaryOp::Pow => BinOp::Pow,
        BinaryOp::Mod if dtype.is_float() => {
            // fmod, moved into the divisor's sign.
            let r = Expr::binary(BinOp::Fmod, a, b.clone());
            let zero = lit(dtype, 0.0);
            let signs_differ = Expr::cmp(
                CmpOp::Ne,
                Expr::cmp(CmpOp::Lt, r.clone(), zero.clone()),
                Expr::cmp(CmpOp::Lt, b.clone(), zero.clone()),
            );
            let adjust = Expr::binary(BinOp::And, Expr::cmp(CmpOp::Ne, r.clone(), zero), signs_differ);
            return Expr::select(adjust, add(r.clone(), b), r);
        }
        BinaryOp::Mod => BinOp::FloorMod,
        // Integers: the remainder of the truncating division; floats: C's fmod.
        BinaryOp::Fmod if !dtype.is_float() => {
            return sub(a.clone(), mul(Expr::binary(BinOp::Div, a, b.clone()), b));
        }
        BinaryOp::Fmod => BinOp::Fmod,
    };
    Expr::binary(op, a, b)
}

fn unary_expr(u: UnaryOp, v: Expr, dtype: DType) -> Expr {
    let c = |x: f64| lit(dtype, x);
    let div = |a: Expr, b: Expr| Expr::binary(BinOp::Div, a, b);
    let math = Expr::math;
    // `ln(e^x + 1)`: Mish's form, whose `tanh` the CPU target computes without the logarithm.
    let softplus = |v: Expr| math(MathOp::Log, add(math(MathOp::Exp, v), c(1.0)));
    match u {
        UnaryOp::Relu => max(v, c(0.0)),
        UnaryOp::Sigmoid => math(MathOp::Sigmoid, v),
        UnaryOp::Tanh => math(MathOp::Tanh, v),
        UnaryOp::Erf => math(MathOp::Erf, v),
        UnaryOp::Exp => math(MathOp::Exp, v),
        UnaryOp::Sqrt => math(MathOp::Sqrt, v),
        UnaryOp::Abs => math(MathOp::Abs, v),
        UnaryOp::Neg => mul(v, c(-1.0)),
        UnaryOp::Floor => math(MathOp::Floor, v),
        UnaryOp::Ceil => math(MathOp::Ceil, v),
        UnaryOp::Round => math(MathOp::Round, v),
        UnaryOp::Sign => {
            let negative = Expr::select(Expr::cmp(CmpOp::Lt, v.clone(), c(0.0)), c(-1.0), c(0.0));
            Expr::select(Expr::cmp(CmpOp::Gt, v, c(0.0)), c(1.0), negative)
        }
        UnaryOp::Reciprocal => div(c(1.0), v),
        UnaryOp::Log => math(MathOp::Log, v),
        UnaryOp::Sin => math(MathOp::Sin, v),
        UnaryOp::Cos => math(MathOp::Cos, v),
        UnaryOp::Tan => math(MathOp::Tan, v),
        UnaryOp::Asin => math(MathOp::Asin, v),
        UnaryOp::Acos => math(MathOp::Acos, v),
        UnaryOp::Atan => math(MathOp::Atan, v),
        UnaryOp::Sinh => math(MathOp::Sinh, v),
        UnaryOp::Cosh => math(MathOp::Cosh, v),
        UnaryOp::Asinh => math(MathOp::Asinh, v),
        UnaryOp::Acosh => math(MathOp::Acosh, v),
        UnaryOp::Atanh => math(MathOp::Atanh, v),
        // `max(x, 0) + ln(1 + e^-|x|)`: no overflow past e^88 (`ln(e^x + 1)` is ∞ there).
        UnaryOp::Softplus => {
            let decay = math(MathOp::Exp, mul(math(MathOp::Abs, v.clone()), c(-1.0)));
            add(max(v, c(0.0)), math(MathOp::Log, add(decay, c(1.0))))
        }
        UnaryOp::Softsign => div(v.clone(), add(c(1.0), math(MathOp::Abs, v))),
        UnaryOp::HardSwish => mul(v.clone(), min(max(add(div(v, c(6.0)), c(0.5)), c(0.0)), c(1.0))),
        UnaryOp::Mish => mul(v.clone(), math(MathOp::Tanh, softplus(v))),
        UnaryOp::Gelu => {
            let inner = math(MathOp::Erf, mul(v.clone(), c(std::f64::consts::FRAC_1_SQRT_2)));
            mul(mul(c(0.5), v), add(c(1.0), inner))
        }
        // `x/2 · (1 + tanh(u))` with `u = √(2/π) (x + 0.044715 x³)` is `x · sigmoid(2u)`: the same
        // function in a form the kernels' programs hold (14 steps, where the tanh form's 18 left
        // a convolution's output to a pass of generated code, 7x the time of erf's GELU), and
        // without `1 + tanh(u)`'s cancellation for negative `x`.
        UnaryOp::GeluTanh => {
            let k = 2.0 * (2.0 / std::f64::consts::PI).sqrt();
            let cube = mul(mul(v.clone(), v.clone()), v.clone());
            mul(v.clone(), math(MathOp::Sigmoid, add(mul(c(k), v), mul(c(k * 0.044715), cube))))
        }
    }
}

fn leaky_expr(v: Expr, alpha: f32, dtype: DType) -> Expr {
    Expr::select(Expr::cmp(CmpOp::Lt, v.clone(), lit(dtype, 0.0)), mul(v.clone(), lit(dtype, alpha as f64)), v)
}

fn clip_expr(mut v: Expr, lo: Option<&Tensor>, hi: Option<&Tensor>) -> Expr {
    if let Some(l) = lo {
        v = max(v, scalar_literal(l));
    }
    if let Some(h) = hi {
        v = min(v, scalar_literal(h));
    }
    v
}

/// Epilogue steps with their operands resolved to buffers of the function.
struct Epi {
    steps: Vec<(Epilogue, Option<Operand>)>,
    dtype: DType,
}

impl Epi {
    /// Stores `value`, with the epilogue applied, at `out[o]`.
    fn store(&self, fb: &mut FuncBuilder, out: BufferId, o: &[Expr], value: Expr) -> Stmt {
        let mut lets = Vec::new();
        let value = self.apply(fb, value, o, &mut lets);
        lets.push(Stmt::Store { buffer: out, indices: o.to_vec(), value });
        Stmt::seq(lets)
    }

    /// `v` for a step that reads it more than once: a `let` (pushed to `lets`) unless it is a
    /// leaf, so the expression grows linearly with the chain, never exponentially.
    fn reused(&self, fb: &mut FuncBuilder, v: Expr, lets: &mut Vec<Stmt>) -> Expr {
        if matches!(v, Expr::Var(_) | Expr::Load { .. } | Expr::Int { .. } | Expr::Float { .. }) {
            return v;
        }
        let var = fb.var("e", self.dtype);
        lets.push(Stmt::Let { var, value: v });
        Expr::Var(var)
    }

    /// The epilogue applied to `v` (steps reading it twice through [`Epi::reused`]).
    fn apply(&self, fb: &mut FuncBuilder, mut v: Expr, out_idx: &[Expr], lets: &mut Vec<Stmt>) -> Expr {
        for (step, operand) in &self.steps {
            v = match step {
                Epilogue::Unary(u) => unary_expr(*u, v, self.dtype),
                Epilogue::LeakyRelu(a) => leaky_expr(self.reused(fb, v, lets), *a, self.dtype),
                Epilogue::Activation(a) => indexing::activation_expr(*a, self.reused(fb, v, lets), self.dtype),
                Epilogue::Clip { min, max } => clip_expr(v, min.as_ref(), max.as_ref()),
                Epilogue::PRelu { .. } => {
                    let v = self.reused(fb, v, lets);
                    let slope = operand.as_ref().expect("PReLU has a slope").load_broadcast(out_idx);
                    let negative = Expr::cmp(CmpOp::Lt, v.clone(), lit(self.dtype, 0.0));
                    Expr::select(negative, mul(v.clone(), slope), v)
                }
                Epilogue::PReluOfProduct { .. } => {
                    let input = operand.as_ref().expect("a PReLU of a product has its input").load_broadcast(out_idx);
                    let negative = Expr::cmp(CmpOp::Lt, input.clone(), lit(self.dtype, 0.0));
                    Expr::select(negative, v, input)
                }
                Epilogue::Binary { op, value_is_lhs, .. } => {
                    let o = operand.as_ref().expect("binary epilogue has an operand").load_broadcast(out_idx);
                    if *value_is_lhs { binary_expr(*op, v, o, self.dtype) } else { binary_expr(*op, o, v, self.dtype) }
                }
            };
        }
        v
    }
}

/// Builds the PrimFunc of one fused group.
pub(crate) fn lower_group(graph: &Graph, group: &Group, k: usize) -> Result<PrimFunc, LowerError> {
    let node = &graph.nodes[group.anchor];
    let mut names: Vec<String> = vec![node.op.name().to_lowercase()];
    names.extend(group.fused.iter().map(|&c| graph.nodes[c].op.name().to_lowercase()));
    let mut fb = FuncBuilder::new(format!("{}_{k}", names.join("_")));
    // Ops that only move data see flat (or 3-d for Softmax) views of their tensors.
    let view = |v: ValueId, ty: &TensorType| -> Vec<usize> {
        match &node.op {
            op if op.is_reshape_like() || op.is_identity_like() => vec![ty.num_elements()],
            Op::Softmax { axis, coerce_2d, .. } => softmax_view(&ty.shape, *axis, *coerce_2d).to_vec(),
            Op::CumSum { axis, .. } | Op::TopK { axis, .. } => softmax_view(&ty.shape, *axis, false).to_vec(),
            // x and y as [outer, inner], scale and bias as [inner].
            Op::Normalize { axis, .. } if v == node.inputs[0] || node.outputs.contains(&v) => {
                vec![ty.shape[..*axis].iter().product(), ty.shape[*axis..].iter().product()]
            }
            Op::Normalize { .. } => vec![ty.num_elements()],
            _ => ty.shape.clone(),
        }
    };
    let mut params: HashMap<ValueId, Operand> = HashMap::new();
    for &v in group.inputs.iter().chain(&group.outputs) {
        let ty = graph.ty(v);
        let shape = view(v, ty);
        let name = graph.value(v).name.clone();
        let buf = fb.param(&name, ty.dtype, shape.clone());
        params.insert(v, Operand { buf, shape, dtype: ty.dtype });
    }
    let ins: Vec<Operand> = node.inputs.iter().map(|v| params[v].clone()).collect();
    let mut outs: Vec<Option<Operand>> = vec![None; node.outputs.len()];
    for (&v, &slot) in group.outputs.iter().zip(&group.output_slots) {
        outs[slot] = Some(params[&v].clone());
    }
    let out_dtype = graph.ty(node.outputs[0]).dtype;
    let epi = Epi {
        steps: group
            .epilogue
            .iter()
            .map(|e| {
                let operand = e.operand().map(|v| params[&v].clone());
                (e.clone(), operand)
            })
            .collect(),
        dtype: out_dtype,
    };
    let out0 = || outs[0].clone().expect("first output is stored");
    let body = match &node.op {
        Op::Conv(a) => conv(&mut fb, &ins[0], &ins[1], ins.get(2), None, a, &out0(), &epi),
        Op::ConvInteger(a) => conv(&mut fb, &ins[0], &ins[1], None, Some((&ins[2], &ins[3])), a, &out0(), &epi),
        Op::Gemm { alpha, beta, trans_a, trans_b } => {
            gemm(&mut fb, &ins[0], &ins[1], ins.get(2), (*alpha, *beta, *trans_a, *trans_b), &out0(), &epi)
        }
        Op::MatMul => matmul(&mut fb, &ins[0], &ins[1], None, &out0(), &epi),
        Op::MatMulInteger => matmul(&mut fb, &ins[0], &ins[1], Some((&ins[2], &ins[3])), &out0(), &epi),
        Op::Binary(b) => elementwise(&mut fb, &out0(), &epi, |_, o| {
            binary_expr(*b, ins[0].load_broadcast(o), ins[1].load_broadcast(o), ins[0].dtype)
        }),
        Op::Unary(u) => {
            elementwise(&mut fb, &out0(), &epi, |_, o| unary_expr(*u, ins[0].load(o.to_vec()), ins[0].dtype))
        }
        Op::Compare(c) => elementwise(&mut fb, &out0(), &epi, |_, o| {
            let op = match c {
                CompareOp::Equal => CmpOp::Eq,
                CompareOp::Less => CmpOp::Lt,
                CompareOp::LessOrEqual => CmpOp::Le,
                CompareOp::Greater => CmpOp::Gt,
                CompareOp::GreaterOrEqual => CmpOp::Ge,
            };
            Expr::cmp(op, ins[0].load_broadcast(o), ins[1].load_broadcast(o))
        }),
        Op::Logical(l) => elementwise(&mut fb, &out0(), &epi, |_, o| {
            let (a, b) = (ins[0].load_broadcast(o), ins[1].load_broadcast(o));
            match (l, out_dtype.is_int()) {
                (LogicalOp::And, false) => Expr::binary(BinOp::And, a, b),
                (LogicalOp::Or, false) => Expr::binary(BinOp::Or, a, b),
                (LogicalOp::Xor, false) => Expr::cmp(CmpOp::Ne, a, b),
                (LogicalOp::And, true) => Expr::binary(BinOp::BitAnd, a, b),
                (LogicalOp::Or, true) => Expr::binary(BinOp::BitOr, a, b),
                (LogicalOp::Xor, true) => Expr::binary(BinOp::BitXor, a, b),
            }
        }),
        Op::Not => elementwise(&mut fb, &out0(), &epi, |_, o| Expr::Not(Box::new(ins[0].load(o.to_vec())))),
        Op::Reduce { op, axes, keepdims } => reduce(&mut fb, &ins[0], *op, axes, *keepdims, &out0()),
        Op::ArgReduce { max, axis, keepdims, last } => {
            arg_reduce(&mut fb, &ins[0], (*max, *last), *axis, *keepdims, &out0())
        }
        Op::Where => elementwise(&mut fb, &out0(), &epi, |_, o| {
            Expr::select(ins[0].load_broadcast(o), ins[1].load_broadcast(o), ins[2].load_broadcast(o))
        }),
        Op::Activation(a) => elementwise(&mut fb, &out0(), &epi, |_, o| {
            let acc_t = acc_dtype(ins[0].dtype);
            let v = indexing::activation_expr(*a, cast_to(acc_t, ins[0].load(o.to_vec()), ins[0].dtype), acc_t);
            cast_to(ins[0].dtype, v, acc_t)
        }),
        Op::Gather { axis } => indexing::gather(&mut fb, &ins[0], &ins[1], *axis, &out0(), &epi),
        Op::GatherElements { axis } => indexing::gather_elements(&mut fb, &ins[0], &ins[1], *axis, &out0(), &epi),
        Op::GatherND { batch_dims } => indexing::gather_nd(&mut fb, &ins[0], &ins[1], *batch_dims, &out0(), &epi),
        Op::ScatterElements { axis, reduction } => {
            indexing::scatter_elements(&mut fb, &ins, *axis, *reduction, &out0())
        }
        Op::ScatterND { reduction } => indexing::scatter_nd(&mut fb, &ins, *reduction, &out0()),
        Op::Slice { axes } => indexing::slice(&mut fb, &ins[0], axes, &out0(), &epi),
        Op::Expand { .. } => elementwise(&mut fb, &out0(), &epi, |_, o| ins[0].load_broadcast(o)),
        Op::Tile { .. } => indexing::tile(&mut fb, &ins[0], &out0(), &epi),
        Op::Normalize { epsilon, rms, .. } => indexing::normalize(&mut fb, &ins, *epsilon, *rms, &out0()),
        Op::Resample { axes, extrapolation } => indexing::resample(&mut fb, &ins, axes, *extrapolation, &out0()),
        Op::GridSample { mode, padding, align_corners } => {
            indexing::grid_sample(&mut fb, &ins, (*mode, *padding, *align_corners), &out0())
        }
        Op::CumSum { exclusive, reverse, product, .. } => {
            indexing::cumulative(&mut fb, &ins[0], (*exclusive, *reverse, *product), &out0())
        }
        Op::TopK { axis, largest, .. } => {
            let mut stmts = Vec::new();
            let values = outs[0].clone().unwrap_or_else(|| {
                // Nothing reads the values: operator scratch takes them.
                let shape = softmax_view(&graph.ty(node.outputs[0]).shape, *axis, false).to_vec();
                let buf = fb.buffer("topk_values", ins[0].dtype, shape.clone(), Scope::Global);
                stmts.push(Stmt::Allocate { buffer: buf, pools: vec![] });
                Operand { buf, shape, dtype: ins[0].dtype }
            });
            stmts.push(indexing::topk(&mut fb, &ins[0], *largest, &values, outs.get(1).and_then(|o| o.as_ref())));
            Stmt::seq(stmts)
        }
        Op::LeakyRelu { alpha } => {
            elementwise(&mut fb, &out0(), &epi, |_, o| leaky_expr(ins[0].load(o.to_vec()), *alpha, ins[0].dtype))
        }
        Op::Clip { min, max } => {
            elementwise(&mut fb, &out0(), &epi, |_, o| clip_expr(ins[0].load(o.to_vec()), min.as_ref(), max.as_ref()))
        }
        Op::BitShift { left } => elementwise(&mut fb, &out0(), &epi, |_, o| bit_shift(&ins[0], &ins[1], *left, o)),
        Op::Requantize { shift, min, max } => {
            elementwise(&mut fb, &out0(), &epi, |_, o| requantize(&ins[0], *shift, *min, *max, o))
        }
        Op::Cast { to } => elementwise(&mut fb, &out0(), &epi, |_, o| Expr::cast(*to, ins[0].load(o.to_vec()))),
        Op::BatchNormalization { epsilon } => elementwise(&mut fb, &out0(), &epi, |_, o| batch_norm(&ins, *epsilon, o)),
        Op::QuantizeLinear { axis } => elementwise(&mut fb, &out0(), &epi, |_, o| quantize(&ins, *axis, out_dtype, o)),
        Op::DequantizeLinear { axis } => elementwise(&mut fb, &out0(), &epi, |_, o| dequantize(&ins, *axis, o)),
        Op::MaxPool { pool, storage_order_col_major } => {
            max_pool(&mut fb, &ins[0], pool, *storage_order_col_major, &outs)
        }
        Op::AveragePool { pool, count_include_pad } => {
            average_pool(&mut fb, &ins[0], pool, *count_include_pad, &out0(), &epi)
        }
        Op::GlobalAveragePool => global_average_pool(&mut fb, &ins[0], &out0(), &epi),
        Op::Softmax { log, .. } => softmax(&mut fb, &ins[0], &out0(), *log),
        Op::Transpose { perm } => elementwise(&mut fb, &out0(), &epi, |_, o| {
            let mut src = vec![idx(0); perm.len()];
            for (d, &p) in perm.iter().enumerate() {
                src[p] = o[d].clone();
            }
            ins[0].load(src)
        }),
        Op::Concat { axis } => concat(&mut fb, &ins, *axis, &out0()),
        Op::Pad { pads, mode, value } => {
            elementwise(&mut fb, &out0(), &epi, |_, o| pad(&ins[0], pads, *mode, value, o))
        }
        Op::Flatten { .. }
        | Op::Reshape { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Identity
        | Op::Dropout => {
            let mut stmts = Vec::new();
            if let Some(y) = &outs[0] {
                stmts.push(copy_loop(&mut fb, &ins[0], y));
            }
            if let Some(mask) = outs.get(1).cloned().flatten() {
                stmts.push(fb.loop_nest("i", &mask.shape.clone(), |_, o| Stmt::Store {
                    buffer: mask.buf,
                    indices: o.to_vec(),
                    value: Expr::bool(true),
                }));
            }
            Stmt::seq(stmts)
        }
    };
    Ok(fb.finish(body))
}

/// A function copying a tensor (used for graph outputs that alias an input or constant).
pub(crate) fn copy_func(name: &str, ty: &TensorType) -> PrimFunc {
    let mut fb = FuncBuilder::new(name);
    let n = ty.num_elements();
    let src = Operand { buf: fb.param("src", ty.dtype, vec![n]), shape: vec![n], dtype: ty.dtype };
    let dst = Operand { buf: fb.param("dst", ty.dtype, vec![n]), shape: vec![n], dtype: ty.dtype };
    let body = copy_loop(&mut fb, &src, &dst);
    fb.finish(body)
}

fn copy_loop(fb: &mut FuncBuilder, src: &Operand, dst: &Operand) -> Stmt {
    fb.loop_nest("i", &dst.shape.clone(), |_, o| Stmt::Store {
        buffer: dst.buf,
        indices: o.to_vec(),
        value: src.load(o.to_vec()),
    })
}

/// `out[i] = epilogue(f(i))` over the output shape.
fn elementwise(
    fb: &mut FuncBuilder,
    out: &Operand,
    epi: &Epi,
    f: impl FnOnce(&mut FuncBuilder, &[Expr]) -> Expr,
) -> Stmt {
    let buf = out.buf;
    fb.loop_nest("i", &out.shape.clone(), |fb, o| {
        let v = f(fb, o);
        epi.store(fb, buf, o, v)
    })
}

fn local(fb: &mut FuncBuilder, name: &str, dtype: DType) -> (BufferId, Stmt) {
    let b = fb.buffer(name, dtype, vec![1], Scope::Local);
    (b, Stmt::Allocate { buffer: b, pools: vec![] })
}

fn get(b: BufferId) -> Expr {
    Expr::load(b, vec![idx(0)])
}

fn set(b: BufferId, v: Expr) -> Stmt {
    Stmt::Store { buffer: b, indices: vec![idx(0)], value: v }
}

/// Nested serial loops over `extents` around `body`, with fresh variables named `prefix<i>`.
fn loops(
    fb: &mut FuncBuilder,
    prefix: &str,
    extents: &[usize],
    body: impl FnOnce(&mut FuncBuilder, &[Expr]) -> Stmt,
) -> Stmt {
    fb.loop_nest(prefix, extents, body)
}

fn clamp(e: Expr, n: usize) -> Expr {
    min(max(e, idx(0)), idx(n as i64 - 1))
}

/// Window tap position along spatial axis `d`: `o*stride + k*dilation - pad_begin`.
fn tap(w: &Window, d: usize, o: &Expr, k: &Expr) -> Expr {
    sub(
        add(mul(o.clone(), idx(w.strides[d] as i64)), mul(k.clone(), idx(w.dilations[d] as i64))),
        idx(w.pads_begin[d] as i64),
    )
}

fn all(conds: Vec<Expr>) -> Expr {
    conds.into_iter().reduce(and).unwrap_or_else(|| Expr::bool(true))
}

#[allow(clippy::too_many_arguments)]
fn conv(
    fb: &mut FuncBuilder,
    x: &Operand,
    w: &Operand,
    bias: Option<&Operand>,
    zero_points: Option<(&Operand, &Operand)>,
    attrs: &ConvAttrs,
    out: &Operand,
    epi: &Epi,
) -> Stmt {
    let win = &attrs.window;
    let k = x.shape.len() - 2;
    let (c, m, g) = (x.shape[1], w.shape[0], attrs.group);
    let (cg, mg) = (c / g, m / g);
    let acc_t = if zero_points.is_some() { DType::I32 } else { acc_dtype(x.dtype) };
    let mut prelude = Vec::new();

    // A padded copy of the input (scratch) lets the inner loop run without bounds checks (and
    // is the form the CPU target's kernel pass reads the padding from, dropping the copy);
    // when the padding is large next to the input (more than 4x its elements: a 5x5 window
    // padded by 2 on a 7x7 plane is 2.5x), or the input is empty, taps are guarded instead, so
    // the scratch never dwarfs the tensors.
    let mut padded_shape = x.shape.clone();
    for d in 0..k {
        padded_shape[d + 2] += win.pads_begin[d] + win.pads_end[d];
    }
    let x_elems = x.shape.iter().product::<usize>();
    let padded = win.pads_begin.iter().chain(&win.pads_end).any(|&p| p > 0);
    let copy_elems = crate::limits::span_elements(&padded_shape);
    let guarded = padded && (x_elems == 0 || copy_elems.is_none_or(|n| n > 4 * x_elems as u64 + 4096));
    let fill = match zero_points {
        Some((xzp, _)) => xzp.load_scalar(),
        None => lit(x.dtype, 0.0),
    };
    let src = if padded && !guarded {
        let shape = padded_shape;
        let pad_buf = fb.buffer("pad", x.dtype, shape.clone(), Scope::Global);
        prelude.push(Stmt::Allocate { buffer: pad_buf, pools: vec![] });
        let x2 = x.clone();
        let fill = fill.clone();
        prelude.push(loops(fb, "p", &shape, |_, p| {
            let mut conds = Vec::new();
            let mut src_idx = vec![p[0].clone(), p[1].clone()];
            for d in 0..k {
                let pos = sub(p[d + 2].clone(), idx(win.pads_begin[d] as i64));
                conds.push(in_range(pos.clone(), x2.shape[d + 2]));
                src_idx.push(clamp(pos, x2.shape[d + 2]));
            }
            Stmt::Store {
                buffer: pad_buf,
                indices: p.to_vec(),
                value: Expr::select(all(conds), x2.load(src_idx), fill),
            }
        }));
        Operand { buf: pad_buf, shape, dtype: x.dtype }
    } else {
        x.clone()
    };

    let (acc, alloc) = local(fb, "acc", acc_t);
    prelude.push(alloc);
    let nest = loops(fb, "o", &out.shape.clone(), |fb, o| {
        let (n, oc) = (o[0].clone(), o[1].clone());
        let grp = if g == 1 { idx(0) } else { floordiv(oc.clone(), idx(mg as i64)) };
        let init = match bias {
            Some(b) => cast_to(acc_t, b.load(vec![oc.clone()]), b.dtype),
            None => lit(acc_t, 0.0),
        };
        let mut extents = vec![cg];
        extents.extend(&win.kernel);
        let reduce = loops(fb, "r", &extents, |_, r| {
            let ch = if g == 1 { r[0].clone() } else { add(mul(grp.clone(), idx(cg as i64)), r[0].clone()) };
            let mut xi = vec![n.clone(), ch];
            let mut wi = vec![oc.clone(), r[0].clone()];
            wi.extend(r[1..].iter().cloned());
            let xv = if guarded {
                let t = taps(win, &x.shape[2..], o, &r[1..]);
                xi.extend(t.clamped);
                // An empty input has nothing to load: every tap is padding.
                if x_elems == 0 { fill.clone() } else { Expr::select(t.inside, src.load(xi), fill.clone()) }
            } else {
                for d in 0..k {
                    // In the padded copy, tap positions are never negative.
                    xi.push(add(
                        mul(o[d + 2].clone(), idx(win.strides[d] as i64)),
                        mul(r[d + 1].clone(), idx(win.dilations[d] as i64)),
                    ));
                }
                src.load(xi)
            };
            let wv = w.load(wi);
            let term = match zero_points {
                Some((xzp, wzp)) => {
                    let wz = if wzp.shape.iter().product::<usize>() > 1 {
                        wzp.load(vec![oc.clone()])
                    } else {
                        wzp.load_scalar()
                    };
                    mul(
                        sub(Expr::cast(DType::I32, xv), Expr::cast(DType::I32, xzp.load_scalar())),
                        sub(Expr::cast(DType::I32, wv), Expr::cast(DType::I32, wz)),
                    )
                }
                None => mul(cast_to(acc_t, xv, x.dtype), cast_to(acc_t, wv, w.dtype)),
            };
            set(acc, add(get(acc), term))
        });
        let value = cast_to(out.dtype, get(acc), acc_t);
        Stmt::seq(vec![set(acc, init), reduce, epi.store(fb, out.buf, o, value)])
    });
    prelude.push(nest);
    Stmt::seq(prelude)
}

fn gemm(
    fb: &mut FuncBuilder,
    a: &Operand,
    b: &Operand,
    c: Option<&Operand>,
    params: (f32, f32, bool, bool),
    out: &Operand,
    epi: &Epi,
) -> Stmt {
    let (alpha, beta, ta, tb) = params;
    let acc_t = acc_dtype(a.dtype);
    let kk = if ta { a.shape[0] } else { a.shape[1] };
    let (acc, alloc) = local(fb, "acc", acc_t);
    let nest = loops(fb, "o", &out.shape.clone(), |fb, o| {
        let (m, n) = (o[0].clone(), o[1].clone());
        let reduce = loops(fb, "r", &[kk], |_, r| {
            let ai = if ta { vec![r[0].clone(), m.clone()] } else { vec![m.clone(), r[0].clone()] };
            let bi = if tb { vec![n.clone(), r[0].clone()] } else { vec![r[0].clone(), n.clone()] };
            set(acc, add(get(acc), mul(cast_to(acc_t, a.load(ai), a.dtype), cast_to(acc_t, b.load(bi), b.dtype))))
        });
        let mut v = get(acc);
        if alpha != 1.0 {
            v = mul(v, lit(acc_t, alpha as f64));
        }
        if let Some(c) = c {
            let cv = cast_to(acc_t, c.load_broadcast(o), c.dtype);
            v = add(v, if beta == 1.0 { cv } else { mul(lit(acc_t, beta as f64), cv) });
        }
        let value = cast_to(out.dtype, v, acc_t);
        Stmt::seq(vec![set(acc, lit(acc_t, 0.0)), reduce, epi.store(fb, out.buf, o, value)])
    });
    Stmt::seq(vec![alloc, nest])
}

fn matmul(
    fb: &mut FuncBuilder,
    a: &Operand,
    b: &Operand,
    zero_points: Option<(&Operand, &Operand)>,
    out: &Operand,
    epi: &Epi,
) -> Stmt {
    let acc_t = if zero_points.is_some() { DType::I32 } else { acc_dtype(a.dtype) };
    let (ra, rb, ro) = (a.shape.len(), b.shape.len(), out.shape.len());
    let kk = a.shape[ra - 1];
    let batch = ro - (ra > 1) as usize - (rb > 1) as usize;
    let (acc, alloc) = local(fb, "acc", acc_t);
    let nest = loops(fb, "o", &out.shape.clone(), |fb, o| {
        let m = (ra > 1).then(|| o[batch].clone());
        let n = (rb > 1).then(|| o[ro - 1].clone());
        let batch_idx = |shape: &[usize]| -> Vec<Expr> {
            let nb = shape.len() - 2;
            (0..nb).map(|d| if shape[d] == 1 { idx(0) } else { o[batch - nb + d].clone() }).collect()
        };
        let reduce = loops(fb, "r", &[kk], |_, r| {
            let ai = if ra == 1 {
                vec![r[0].clone()]
            } else {
                [batch_idx(&a.shape), vec![m.clone().expect("rank > 1"), r[0].clone()]].concat()
            };
            let bi = if rb == 1 {
                vec![r[0].clone()]
            } else {
                [batch_idx(&b.shape), vec![r[0].clone(), n.clone().expect("rank > 1")]].concat()
            };
            let term = match zero_points {
                Some((azp, bzp)) => {
                    let az = if azp.shape.iter().product::<usize>() > 1 {
                        azp.load(vec![m.clone().expect("rows")])
                    } else {
                        azp.load_scalar()
                    };
                    let bz = if bzp.shape.iter().product::<usize>() > 1 {
                        bzp.load(vec![n.clone().expect("cols")])
                    } else {
                        bzp.load_scalar()
                    };
                    mul(
                        sub(Expr::cast(DType::I32, a.load(ai)), Expr::cast(DType::I32, az)),
                        sub(Expr::cast(DType::I32, b.load(bi)), Expr::cast(DType::I32, bz)),
                    )
                }
                None => mul(cast_to(acc_t, a.load(ai), a.dtype), cast_to(acc_t, b.load(bi), b.dtype)),
            };
            set(acc, add(get(acc), term))
        });
        let value = cast_to(out.dtype, get(acc), acc_t);
        Stmt::seq(vec![set(acc, lit(acc_t, 0.0)), reduce, epi.store(fb, out.buf, o, value)])
    });
    Stmt::seq(vec![alloc, nest])
}

/// Spatial tap positions, their in-bounds conditions and clamped indices for window op `o`.
struct Taps {
    pos: Vec<Expr>,
    inside: Expr,
    clamped: Vec<Expr>,
}

/// Kernels with more offsets than this visit only the taps inside the input (see
/// [`window_loops`]); smaller ones keep constant loop extents, which vectorize.
const CLIPPED_WINDOW_TAPS: usize = 64;

/// Whether pooling `x` with `win` visits only the taps inside the input.
fn clip_window(win: &Window, x: &Operand) -> bool {
    let taps = win.kernel.iter().try_fold(1usize, |acc, &k| acc.checked_mul(k));
    taps.is_none_or(|t| t > CLIPPED_WINDOW_TAPS) || x.shape.contains(&0)
}

/// First kernel offset along axis `d` whose tap at output position `o` is at or after
/// position `from` (measured from the start of the padding): `ceil((from - o*stride) / dil)`.
fn first_offset_at(win: &Window, d: usize, o: &Expr, from: usize) -> Expr {
    let dil = win.dilations[d] as i64;
    floordiv(sub(idx(from as i64 + dil - 1), mul(o.clone(), idx(win.strides[d] as i64))), idx(dil))
}

/// The reduction loops over the kernel offsets of the window at output position `o`; `body`
/// gets the offsets. With `clip`, each axis visits only the offsets whose tap lies inside the
/// input (loop extents computed per output position), so the work follows the taps that exist
/// however large the kernel and the padding; otherwise every offset, with constant extents.
fn window_loops(
    fb: &mut FuncBuilder,
    win: &Window,
    in_sp: &[usize],
    o: &[Expr],
    clip: bool,
    body: impl FnOnce(&mut FuncBuilder, &[Expr]) -> Stmt,
) -> Stmt {
    if !clip {
        return loops(fb, "r", &win.kernel, body);
    }
    let mut offsets = Vec::with_capacity(in_sp.len());
    let mut nest = Vec::with_capacity(in_sp.len());
    for d in 0..in_sp.len() {
        let lo = max(first_offset_at(win, d, &o[d + 2], win.pads_begin[d]), idx(0));
        let hi = min(first_offset_at(win, d, &o[d + 2], win.pads_begin[d] + in_sp[d]), idx(win.kernel[d] as i64));
        let var = fb.var(&format!("r{d}"), DType::I64);
        offsets.push(add(lo.clone(), Expr::Var(var)));
        nest.push((var, max(sub(hi, lo), idx(0))));
    }
    let mut stmt = body(fb, &offsets);
    for (var, extent) in nest.into_iter().rev() {
        stmt = Stmt::For { var, extent, kind: ForKind::Serial, body: Box::new(stmt) };
    }
    stmt
}

/// How many kernel offsets of the window at `o` fall inside the input or its explicit padding
/// (not the ceil-mode overhang beyond it).
fn offsets_in_padding(win: &Window, in_sp: &[usize], o: &[Expr]) -> Expr {
    (0..in_sp.len())
        .map(|d| {
            let padded = in_sp[d] + win.pads_begin[d] + win.pads_end[d];
            let end = first_offset_at(win, d, &o[d + 2], padded);
            max(min(end, idx(win.kernel[d] as i64)), idx(0))
        })
        .reduce(mul)
        .unwrap_or_else(|| idx(1))
}

fn taps(win: &Window, in_sp: &[usize], o: &[Expr], r: &[Expr]) -> Taps {
    let k = in_sp.len();
    let pos: Vec<Expr> = (0..k).map(|d| tap(win, d, &o[d + 2], &r[d])).collect();
    let inside = all(pos.iter().zip(in_sp).map(|(p, &n)| in_range(p.clone(), n)).collect());
    let clamped = pos.iter().zip(in_sp).map(|(p, &n)| clamp(p.clone(), n)).collect();
    Taps { pos, inside, clamped }
}

fn max_pool(fb: &mut FuncBuilder, x: &Operand, pool: &PoolAttrs, col_major: bool, outs: &[Option<Operand>]) -> Stmt {
    let win = &pool.window;
    let in_sp = x.shape[2..].to_vec();
    let (acc, a1) = local(fb, "acc", x.dtype);
    let (found, a2) = local(fb, "found", DType::Bool);
    let with_indices = matches!(outs.get(1), Some(Some(_)));
    let arg = with_indices.then(|| local(fb, "arg", DType::I64));
    let out_shape = outs.iter().flatten().next().expect("a stored output").shape.clone();
    let plane: usize = in_sp.iter().product();
    let channels = x.shape[1];
    let clip = clip_window(win, x);
    let nest = loops(fb, "o", &out_shape, |fb, o| {
        let reduce = window_loops(fb, win, &in_sp, o, clip, |_, r| {
            let t = taps(win, &in_sp, o, r);
            let v = x.load([vec![o[0].clone(), o[1].clone()], t.clamped.clone()].concat());
            let spatial = if col_major {
                let rev_pos: Vec<Expr> = t.pos.iter().rev().cloned().collect();
                let rev_shape: Vec<usize> = in_sp.iter().rev().copied().collect();
                flat_index(&rev_pos, &rev_shape)
            } else {
                flat_index(&t.pos, &in_sp)
            };
            let flat = add(mul(add(mul(o[0].clone(), idx(channels as i64)), o[1].clone()), idx(plane as i64)), spatial);
            let better =
                Expr::binary(BinOp::Or, Expr::Not(Box::new(get(found))), Expr::cmp(CmpOp::Gt, v.clone(), get(acc)));
            let mut update = vec![set(acc, v), set(found, Expr::bool(true))];
            if let Some((arg, _)) = &arg {
                update.push(set(*arg, flat));
            }
            Stmt::If { cond: and(t.inside, better), then: Box::new(Stmt::seq(update)), otherwise: None }
        });
        let mut stmts = vec![set(found, Expr::bool(false)), set(acc, lit(x.dtype, f64::NEG_INFINITY))];
        if let Some((arg, _)) = &arg {
            stmts.push(set(*arg, idx(0)));
        }
        stmts.push(reduce);
        if let Some(y) = &outs[0] {
            stmts.push(Stmt::Store { buffer: y.buf, indices: o.to_vec(), value: get(acc) });
        }
        if let (Some(Some(i)), Some((arg, _))) = (outs.get(1), &arg) {
            stmts.push(Stmt::Store { buffer: i.buf, indices: o.to_vec(), value: get(*arg) });
        }
        Stmt::seq(stmts)
    });
    let mut stmts = vec![a1, a2];
    if let Some((_, alloc)) = arg.clone() {
        stmts.push(alloc);
    }
    stmts.push(nest);
    Stmt::seq(stmts)
}

fn average_pool(
    fb: &mut FuncBuilder,
    x: &Operand,
    pool: &PoolAttrs,
    include_pad: bool,
    out: &Operand,
    epi: &Epi,
) -> Stmt {
    let win = &pool.window;
    let in_sp = x.shape[2..].to_vec();
    let acc_t = acc_dtype(x.dtype);
    let (sum, a1) = local(fb, "sum", acc_t);
    // The count in the sum's float type while it stays exact (windows under 2^24 taps), so
    // the vector code keeps one lane type instead of converting i64 lanes.
    let taps_per_window = win.kernel.iter().try_fold(1usize, |p, &k| p.checked_mul(k));
    let count_t = if acc_t.is_float() && taps_per_window.is_some_and(|n| n < 1 << 24) { acc_t } else { DType::I64 };
    let (count, a2) = local(fb, "count", count_t);
    let clip = clip_window(win, x);
    let nest = loops(fb, "o", &out.shape.clone(), |fb, o| {
        let reduce = window_loops(fb, win, &in_sp, o, clip, |_, r| {
            let t = taps(win, &in_sp, o, r);
            let v = cast_to(acc_t, x.load([vec![o[0].clone(), o[1].clone()], t.clamped.clone()].concat()), x.dtype);
            let inc = set(count, add(get(count), lit(count_t, 1.0)));
            if clip {
                // Only taps inside the input are visited; padding is counted after the loop.
                let mut then = vec![set(sum, add(get(sum), v))];
                then.extend((!include_pad).then_some(inc));
                return Stmt::If { cond: t.inside, then: Box::new(Stmt::seq(then)), otherwise: None };
            }
            // With count_include_pad, taps in the explicit padding count; ceil-mode overhang
            // beyond it does not.
            let in_padding = all(t
                .pos
                .iter()
                .zip(&in_sp)
                .enumerate()
                .map(|(d, (p, &n))| lt(p.clone(), idx((n + win.pads_end[d]) as i64)))
                .collect());
            Stmt::If {
                cond: t.inside,
                then: Box::new(Stmt::seq(vec![set(sum, add(get(sum), v)), inc.clone()])),
                otherwise: include_pad
                    .then(|| Box::new(Stmt::If { cond: in_padding, then: Box::new(inc), otherwise: None })),
            }
        });
        let mean = Expr::select(
            Expr::cmp(CmpOp::Eq, get(count), lit(count_t, 0.0)),
            lit(acc_t, 0.0),
            Expr::binary(BinOp::Div, get(sum), cast_to(acc_t, get(count), count_t)),
        );
        let value = cast_to(out.dtype, mean, acc_t);
        let mut stmts = vec![set(sum, lit(acc_t, 0.0)), set(count, lit(count_t, 0.0)), reduce];
        if clip && include_pad {
            stmts.push(set(count, cast_to(count_t, offsets_in_padding(win, &in_sp, o), DType::I64)));
        }
        stmts.push(epi.store(fb, out.buf, o, value));
        Stmt::seq(stmts)
    });
    Stmt::seq(vec![a1, a2, nest])
}

fn global_average_pool(fb: &mut FuncBuilder, x: &Operand, out: &Operand, epi: &Epi) -> Stmt {
    let acc_t = acc_dtype(x.dtype);
    let sp = x.shape[2..].to_vec();
    let count: usize = sp.iter().product();
    let (sum, alloc) = local(fb, "sum", acc_t);
    let nest = loops(fb, "o", &x.shape[..2], |fb, o| {
        let reduce = loops(fb, "r", &sp, |_, r| {
            let v = cast_to(acc_t, x.load([o.to_vec(), r.to_vec()].concat()), x.dtype);
            set(sum, add(get(sum), v))
        });
        let mut out_idx = o.to_vec();
        out_idx.extend(sp.iter().map(|_| idx(0)));
        let mean =
            if count == 0 { lit(acc_t, 0.0) } else { Expr::binary(BinOp::Div, get(sum), lit(acc_t, count as f64)) };
        let value = cast_to(out.dtype, mean, acc_t);
        let store = epi.store(fb, out.buf, &out_idx, value);
        Stmt::seq(vec![set(sum, lit(acc_t, 0.0)), reduce, store])
    });
    Stmt::seq(vec![alloc, nest])
}

/// `[outer, lane, inner]` view of a softmax input.
fn softmax_view(shape: &[usize], axis: usize, coerce_2d: bool) -> [usize; 3] {
    let outer = shape[..axis].iter().product();
    if coerce_2d {
        [outer, shape[axis..].iter().product(), 1]
    } else {
        [outer, shape[axis], shape[axis + 1..].iter().product()]
    }
}

fn softmax(fb: &mut FuncBuilder, x: &Operand, out: &Operand, log: bool) -> Stmt {
    let acc_t = acc_dtype(x.dtype);
    let [outer, lane, inner] = [x.shape[0], x.shape[1], x.shape[2]];
    let (mx, a1) = local(fb, "max", acc_t);
    let (sum, a2) = local(fb, "sum", acc_t);
    let nest = loops(fb, "o", &[outer, inner], |fb, o| {
        let at = |l: &Expr| vec![o[0].clone(), l.clone(), o[1].clone()];
        let xv = |l: &Expr| cast_to(acc_t, x.load(at(l)), x.dtype);
        let find_max = loops(fb, "l", &[lane], |_, l| set(mx, max(get(mx), xv(&l[0]))));
        let exp_sum =
            loops(fb, "l", &[lane], |_, l| set(sum, add(get(sum), Expr::math(MathOp::Exp, sub(xv(&l[0]), get(mx))))));
        let write = loops(fb, "l", &[lane], |_, l| {
            let v = if log {
                sub(sub(xv(&l[0]), get(mx)), Expr::math(MathOp::Log, get(sum)))
            } else {
                Expr::binary(BinOp::Div, Expr::math(MathOp::Exp, sub(xv(&l[0]), get(mx))), get(sum))
            };
            Stmt::Store { buffer: out.buf, indices: at(&l[0]), value: cast_to(out.dtype, v, acc_t) }
        });
        Stmt::seq(vec![set(mx, lit(acc_t, f64::NEG_INFINITY)), find_max, set(sum, lit(acc_t, 0.0)), exp_sum, write])
    });
    Stmt::seq(vec![a1, a2, nest])
}

/// The smallest (`!max`) or largest value of `dtype` (infinities for floats).
fn extreme(dtype: DType, max: bool) -> Expr {
    if dtype.is_float() {
        return lit(dtype, if max { f64::INFINITY } else { f64::NEG_INFINITY });
    }
    let bits = 8 * dtype.size_bytes() as u32;
    let v = match (dtype.is_signed_int(), max) {
        (true, true) => (1i128 << (bits - 1)) - 1,
        (true, false) => -(1i128 << (bits - 1)),
        (false, true) => (1i128 << bits) - 1,
        (false, false) => 0,
    };
    Expr::int(v.clamp(i64::MIN as i128, i64::MAX as i128) as i64, dtype)
}

/// The input index of output position `o` and reduction position `r`: kept axes from `o` (all
/// of `o`'s axes when `keepdims`, the reduced ones then being 0), reduced axes from `r`.
fn reduction_index(rank: usize, axes: &[usize], keepdims: bool, o: &[Expr], r: &[Expr]) -> Vec<Expr> {
    let (mut ko, mut kr) = (0, 0);
    (0..rank)
        .map(|d| {
            if axes.contains(&d) {
                kr += 1;
                if keepdims {
                    ko += 1;
                }
                r[kr - 1].clone()
            } else {
                ko += 1;
                o[ko - 1].clone()
            }
        })
        .collect()
}

fn reduce(fb: &mut FuncBuilder, x: &Operand, op: ReduceOp, axes: &[usize], keepdims: bool, out: &Operand) -> Stmt {
    let acc_t = acc_dtype(x.dtype);
    let rank = x.shape.len();
    let red: Vec<usize> = axes.iter().map(|&d| x.shape[d]).collect();
    let count: usize = red.iter().product();
    let (acc, alloc) = local(fb, "acc", acc_t);
    let init = match op {
        ReduceOp::Max => extreme(acc_t, false),
        ReduceOp::Min => extreme(acc_t, true),
        ReduceOp::Prod => lit(acc_t, 1.0),
        _ => lit(acc_t, 0.0),
    };
    let nest = loops(fb, "o", &out.shape.clone(), |fb, o| {
        let o = o.to_vec();
        let reduction = loops(fb, "r", &red, |_, r| {
            let v = cast_to(acc_t, x.load(reduction_index(rank, axes, keepdims, &o, r)), x.dtype);
            set(
                acc,
                match op {
                    ReduceOp::Max => max(get(acc), v),
                    ReduceOp::Min => min(get(acc), v),
                    ReduceOp::Prod => mul(get(acc), v),
                    ReduceOp::L1 => add(get(acc), Expr::math(MathOp::Abs, v)),
                    ReduceOp::L2 | ReduceOp::SumSquare => add(get(acc), mul(v.clone(), v)),
                    ReduceOp::LogSumExp => add(get(acc), Expr::math(MathOp::Exp, v)),
                    ReduceOp::Sum | ReduceOp::Mean | ReduceOp::LogSum => add(get(acc), v),
                },
            )
        });
        let result = match op {
            ReduceOp::Mean => Expr::binary(BinOp::Div, get(acc), lit(acc_t, count as f64)),
            ReduceOp::L2 => Expr::math(MathOp::Sqrt, get(acc)),
            ReduceOp::LogSum | ReduceOp::LogSumExp => Expr::math(MathOp::Log, get(acc)),
            _ => get(acc),
        };
        let store = Stmt::Store { buffer: out.buf, indices: o.clone(), value: cast_to(out.dtype, result, acc_t) };
        Stmt::seq(vec![set(acc, init.clone()), reduction, store])
    });
    Stmt::seq(vec![alloc, nest])
}

fn arg_reduce(
    fb: &mut FuncBuilder,
    x: &Operand,
    (max_wins, last): (bool, bool),
    axis: usize,
    keepdims: bool,
    out: &Operand,
) -> Stmt {
    let rank = x.shape.len();
    let (best, a1) = local(fb, "best", x.dtype);
    let (at, a2) = local(fb, "at", DType::I64);
    let nest = loops(fb, "o", &out.shape.clone(), |fb, o| {
        let o = o.to_vec();
        let first = x.load(reduction_index(rank, &[axis], keepdims, &o, &[idx(0)]));
        let scan = loops(fb, "r", &[x.shape[axis]], |_, r| {
            let v = x.load(reduction_index(rank, &[axis], keepdims, &o, r));
            let op = match (max_wins, last) {
                (true, false) => CmpOp::Gt,
                (true, true) => CmpOp::Ge,
                (false, false) => CmpOp::Lt,
                (false, true) => CmpOp::Le,
            };
            let better = Expr::cmp(op, v.clone(), get(best));
            Stmt::seq(vec![
                set(at, Expr::select(better.clone(), r[0].clone(), get(at))),
                set(best, Expr::select(better, v, get(best))),
            ])
        });
        let store = Stmt::Store { buffer: out.buf, indices: o, value: get(at) };
        Stmt::seq(vec![set(best, first), set(at, idx(0)), scan, store])
    });
    Stmt::seq(vec![a1, a2, nest])
}

fn concat(fb: &mut FuncBuilder, ins: &[Operand], axis: usize, out: &Operand) -> Stmt {
    let mut offset = 0;
    let mut stmts = Vec::new();
    for x in ins {
        let off = offset;
        stmts.push(loops(fb, "i", &x.shape.clone(), |_, o| {
            let mut dst = o.to_vec();
            dst[axis] = add(dst[axis].clone(), idx(off as i64));
            Stmt::Store { buffer: out.buf, indices: dst, value: x.load(o.to_vec()) }
        }));
        offset += x.shape[axis];
    }
    Stmt::seq(stmts)
}

fn pad(x: &Operand, pads: &[i64], mode: PadMode, value: &Tensor, o: &[Expr]) -> Expr {
    // An empty input has nothing to read: every output element is padding (only constant
    // padding can grow an empty axis).
    if x.shape.contains(&0) {
        return scalar_literal(value);
    }
    let r = x.shape.len();
    let mut src = Vec::with_capacity(r);
    let mut conds = Vec::new();
    for d in 0..r {
        let n = x.shape[d] as i64;
        let i = sub(o[d].clone(), idx(pads[d]));
        src.push(match mode {
            PadMode::Constant => {
                conds.push(in_range(i.clone(), n as usize));
                clamp(i, n as usize)
            }
            PadMode::Edge => clamp(i, n as usize),
            PadMode::Wrap => Expr::binary(BinOp::FloorMod, i, idx(n)),
            PadMode::Reflect if n == 1 => idx(0),
            PadMode::Reflect => {
                let period = 2 * (n - 1);
                let m = Expr::binary(BinOp::FloorMod, i, idx(period));
                Expr::select(lt(m.clone(), idx(n)), m.clone(), sub(idx(period), m))
            }
        });
    }
    let v = x.load(src);
    if conds.is_empty() { v } else { Expr::select(all(conds), v, scalar_literal(value)) }
}

fn bit_shift(x: &Operand, s: &Operand, left: bool, o: &[Expr]) -> Expr {
    let dt = x.dtype;
    let (xv, sv) = (x.load_broadcast(o), s.load_broadcast(o));
    let bits = dt.int_bits() as i64;
    let ok = and(ge(sv.clone(), Expr::int(0, dt)), lt(sv.clone(), Expr::int(bits, dt)));
    // The shift amount is clamped so the shift itself is always defined.
    let safe = min(max(sv, Expr::int(0, dt)), Expr::int(bits - 1, dt));
    let shifted = Expr::binary(if left { BinOp::Shl } else { BinOp::Shr }, xv.clone(), safe);
    let fill = if !left && dt.is_signed_int() {
        Expr::select(lt(xv, Expr::int(0, dt)), Expr::int(-1, dt), Expr::int(0, dt))
    } else {
        Expr::int(0, dt)
    };
    Expr::select(ok, shifted, fill)
}

fn batch_norm(ins: &[Operand], eps: f32, o: &[Expr]) -> Expr {
    let x = &ins[0];
    let t = acc_dtype(x.dtype);
    let p = |i: usize| cast_to(t, ins[i].load(vec![o[1].clone()]), ins[i].dtype);
    let k = Expr::binary(BinOp::Div, p(1), Expr::math(MathOp::Sqrt, add(p(4), lit(t, eps as f64))));
    let v = add(mul(sub(cast_to(t, x.load(o.to_vec()), x.dtype), p(3)), k), p(2));
    cast_to(x.dtype, v, t)
}

/// Index of the scale (and zero point) of output element `o`.
fn quant_param_index(axis: QuantAxis, param: &Operand, o: &[Expr]) -> Vec<Expr> {
    match axis {
        QuantAxis::PerTensor => vec![idx(0); param.shape.len()],
        QuantAxis::PerAxis { axis } => vec![o[axis].clone()],
        QuantAxis::Blocked { axis, block_size } => {
            let mut i = o.to_vec();
            i[axis] = floordiv(i[axis].clone(), idx(block_size as i64));
            i
        }
    }
}

fn quantize(ins: &[Operand], axis: QuantAxis, out_dtype: DType, o: &[Expr]) -> Expr {
    let (x, scale, zp) = (&ins[0], &ins[1], &ins[2]);
    let (si, zi) = (quant_param_index(axis, scale, o), quant_param_index(axis, zp, o));
    // The division happens in the input's precision, as the ONNX reference does.
    let t = if x.dtype == DType::I32 { DType::F64 } else { DType::F32 };
    let mut q =
        Expr::binary(BinOp::Div, cast_to(t, x.load(o.to_vec()), x.dtype), cast_to(t, scale.load(si), scale.dtype));
    if x.dtype == DType::F16 {
        q = Expr::cast(DType::F32, Expr::cast(DType::F16, q));
    }
    let q = add(Expr::math(MathOp::Round, q), Expr::cast(t, zp.load(zi)));
    let lo = lit(t, Tensor::scalar_from_f64(out_dtype, f64::NEG_INFINITY).to_f64_vec()[0]);
    let hi = lit(t, Tensor::scalar_from_f64(out_dtype, f64::INFINITY).to_f64_vec()[0]);
    Expr::cast(out_dtype, min(max(q, lo), hi))
}

/// [`Op::Requantize`] in i64: add half, arithmetic shift (or multiply), clamp, narrow.
fn requantize(x: &Operand, shift: i32, lo: i32, hi: i32, o: &[Expr]) -> Expr {
    let v = Expr::cast(DType::I64, x.load(o.to_vec()));
    let shifted = if shift > 0 {
        Expr::binary(BinOp::Shr, add(v, Expr::index(1 << (shift - 1))), Expr::index(i64::from(shift)))
    } else {
        mul(v, Expr::index(1 << -shift))
    };
    Expr::cast(DType::I8, min(max(shifted, Expr::index(i64::from(lo))), Expr::index(i64::from(hi))))
}

fn dequantize(ins: &[Operand], axis: QuantAxis, o: &[Expr]) -> Expr {
    let (x, scale, zp) = (&ins[0], &ins[1], &ins[2]);
    let (si, zi) = (quant_param_index(axis, scale, o), quant_param_index(axis, zp, o));
    let diff = sub(Expr::cast(DType::I64, x.load(o.to_vec())), Expr::cast(DType::I64, zp.load(zi)));
    mul(Expr::cast(scale.dtype, diff), scale.load(si))
}
