//! The CPU target's kernel pass: operators that lowering emitted as an f32 nest a precompiled
//! kernel computes (`heron_kernels`) become a parallel loop of routine calls.
//!
//! A nest qualifies when its shape is recognised exactly, from the affine offsets of its loads:
//! - **2-D convolution** over an NCHW input, dense or depthwise, weights a constant:
//!   `heron_conv2d_f32_v4`, weights packed at compile time for the chosen ISA. The zero-padded
//!   copy of the input that lowering makes goes away: the kernel reads the input itself and
//!   applies the padding where it packs;
//! - **GEMM with a constant right operand** (`MatMul` / `Gemm`, batched rows contiguous):
//!   `heron_gemm_f32_v2`, B packed into panels at compile time;
//! - the same two shapes over u8/i8 bytes with zero points, accumulating in i32
//!   (`ConvInteger`, `MatMulInteger`, the QLinear operators): `heron_conv2d_q8`,
//!   `heron_gemm_q8` (`heron_kernels::qgemm`), zero points constants. The i32 result is the
//!   output, or a scratch buffer the rest of the epilogue (requantization) reads;
//! - **2-D pooling** (`crate::pooling`): lowering's max pool nest (`acc`/`found`, a constant
//!   window, the in-bounds tests the simplifier left) as `heron_maxpool2d_f32`, or over a
//!   channel-blocked input `heron_maxpool2d_blocked_f32`; an f32 average pool's nest over a
//!   channel-blocked input as `heron_avgpool2d_blocked_f32`.
//!
//! The accumulator's initial value (a convolution's bias) is fused; so is an epilogue made of
//! additions of a bias per column or a residual shaped like the output, then a ReLU or Clip
//! (a `let` before the store, lowering's form of a value read twice, is written into it). Of
//! an activation over a residual sum (`tanh(acc + r)`, `(acc + r) · sigmoid(acc + r)`) the
//! kernel adds the residual and the rest runs over its output. A convolution (planar or
//! blocked) or a GEMM then applies an activation it knows itself (LeakyReLU, HardSigmoid,
//! hard-swish, sigmoid, SiLU, tanh, GELU: its call's flags), over each run of results it has
//! just stored.
//! Any other epilogue stays
//! generated code: the kernel writes the raw result and a loop over the output applies the
//! rest in place. Everything else keeps its loop nest. The calls print
//! at the target stage with every shape, the ISA, the epilogue flags and the task split: the
//! loop `for %task in 0..T parallel` runs share `task` of `T` (`T` is the compile-time thread
//! count, times four for kernels without scratch and blocked convolutions with little, whose
//! shares the pool balances across the threads; results do not depend on it), with per-task
//! scratch planned like any buffer.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use heron_ir::loop_ir::analysis::affine_terms;
use heron_ir::loop_ir::interp::{ExternArg, Externs};
use heron_ir::loop_ir::{
    Arg, BinOp, Buffer, BufferId, Call, Callee, CmpOp, Expr, ForKind, MAIN, MathOp, Module, PrimFunc, Scope, Stmt,
    VarDecl, VarId,
};
use heron_ir::{DType, Tensor};
pub use heron_kernels::Isa;
use heron_kernels::abi::{
    AVGPOOL2D_BLOCKED_F32, CONV2D_BLOCKED_F32, CONV2D_F32, CONV2D_Q8, GEMM_F32, GEMM_Q8, MAP_F32,
    MAXPOOL2D_BLOCKED_F32, MAXPOOL2D_F32, SOFTMAX_F32, blocked_layouts, flags, layouts,
};
use heron_kernels::blocked::{BlockedConv, Layout};
use heron_kernels::conv::{Activation, Conv2d, ConvEpilogue, conv2d_share};
use heron_kernels::elementwise::{Operand, Program, Tail, TailOperand, map_share};
use heron_kernels::softmax::{SoftmaxShape, softmax_share};

use crate::elementwise::TailInput;
use heron_kernels::gemm;
use heron_kernels::pool::{Divisor, PoolKind, max_pool2d_share, pool2d_blocked_share, window_from_dims};
pub use heron_kernels::qgemm::Int8Isa;
use heron_kernels::qgemm::{self, Bytes};

use crate::int8::{Factor, factor, peel};
use crate::routines::{Routine, RoutineParam, RoutineSignature};

/// What the kernel pass uses: the ISAs weights are packed for (f32 and integer kernels), and
/// the task count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelConfig {
    pub isa: Isa,
    pub int8: Int8Isa,
    pub tasks: usize,
}

/// Bytes of scratch a blocked convolution's shares may take together (one widened image of at
/// most 256 KiB each): with two threads, always (ResNet-18 at 160×160 ran 1-3% faster on two
/// threads of a shared Zen 5 with shares for its 5×5 layers); with more, only small images.
const SHARED_SCRATCH_BUDGET: usize = 2 << 20;

/// Shares per thread of a kernel that needs no per-task scratch (or a blocked convolution
/// within [`SHARED_SCRATCH_BUDGET`]).
const SHARES_PER_THREAD: usize = 4;

/// Multiply-adds below which a contraction takes half as many shares: each share's setup and
/// hand-over cost more than the balance gains on layers of a few microseconds. Two threads on
/// Zen 5, half the shares for every layer: a ResNet of widths 32-256 at 64×64 0.243 -> 0.229
/// ms, MobileNet-v2 at 48×48 0.204 -> 0.188, ResNet-18, resnet_ish and MobileNet-v2 at
/// 224×224 alike; this rule, in busier minutes: 0.331 -> 0.313 and 0.346 -> 0.319 ms.
const SMALL_CONTRACTION: u64 = 16 << 20;

impl KernelConfig {
    /// The task count for a kernel without per-task scratch (or a blocked convolution within
    /// [`SHARED_SCRATCH_BUDGET`]): several shares per thread, which
    /// the pool hands out as threads come free (`heron_threads`), so a slower core takes fewer.
    pub(crate) fn with_shares(self) -> KernelConfig {
        self.with_shares_per_thread(SHARES_PER_THREAD)
    }

    fn with_shares_per_thread(self, shares: usize) -> KernelConfig {
        let tasks = if self.tasks > 1 { self.tasks * shares } else { 1 };
        KernelConfig { tasks, ..self }
    }

    /// Kernels for this CPU, unless `HERON_KERNELS=off` (pure generated code, for comparison).
    /// `HERON_KERNEL_ISA=avx512|avx2|scalar` forces a variant (one this CPU has).
    pub fn host(tasks: usize) -> Option<KernelConfig> {
        if std::env::var("HERON_KERNELS").is_ok_and(|v| v == "off" || v == "0") {
            return None;
        }
        let forced = std::env::var("HERON_KERNEL_ISA").ok();
        let isa = Isa::available()
            .into_iter()
            .find(|i| forced.as_deref().is_none_or(|name| name == i.name()))
            .unwrap_or_else(Isa::detect);
        Some(KernelConfig { isa, int8: Int8Isa::for_isa(isa), tasks: tasks.max(1) })
    }
}

/// The routines the kernel pass calls, with their addresses, in the kernels' table order
/// ([`heron_kernels::abi::ROUTINE_NAMES`]: the order of every run context's table).
pub fn routines() -> Vec<Routine> {
    use RoutineParam::{Buffer as B, F32, I64};
    let params = |name: &str| match name {
        CONV2D_F32 => [vec![B; 6], vec![I64; 18], vec![F32, F32, I64, I64, F32, F32]].concat(),
        CONV2D_BLOCKED_F32 => {
            [vec![B; 5], vec![I64; 20], vec![F32, F32, I64, I64], vec![B; 2], vec![I64; 3], vec![F32; 4], vec![B]]
                .concat()
        }
        GEMM_F32 => [vec![B; 5], vec![I64; 5], vec![F32, F32, I64, I64, F32, F32]].concat(),
        MAXPOOL2D_F32 => [vec![B; 2], vec![I64; 17]].concat(),
        MAXPOOL2D_BLOCKED_F32 => [vec![B; 2], vec![I64; 19]].concat(),
        AVGPOOL2D_BLOCKED_F32 => [vec![B; 2], vec![I64; 22]].concat(),
        MAP_F32 => [vec![B; 4], vec![I64; 6], vec![F32; 4], vec![I64; 2]].concat(),
        SOFTMAX_F32 => [vec![B; 2], vec![I64; 7]].concat(),
        CONV2D_Q8 => [vec![B; 4], vec![I64; 21]].concat(),
        GEMM_Q8 => [vec![B; 4], vec![I64; 8]].concat(),
        other => unreachable!("kernel routine '{other}' has no signature"),
    };
    heron_kernels::abi::ROUTINE_NAMES
        .iter()
        .zip(heron_kernels::abi::routine_addresses())
        .map(|(&name, address)| Routine {
            signature: RoutineSignature { name: name.into(), params: params(name) },
            features: Vec::new(),
            address,
        })
        .collect()
}

/// A function's kernel plan. Every function is matched before any is rewritten, so that the
/// layouts of the tensors between kernels are chosen over all of them ([`crate::blocking`]).
pub(crate) enum Found {
    Contraction(Plan),
    Pool(crate::pooling::PoolPlan),
    Map(crate::elementwise::MapPlan),
    Softmax(crate::softmax::SoftmaxPlan),
}

/// Replaces every qualifying contraction nest of `module` with kernel calls, and stores the
/// activations between convolution kernels channel-blocked where that pays
/// ([`crate::blocking`]).
pub fn use_kernels(module: &mut Module, config: KernelConfig) {
    let Some(main_index) = module.funcs.iter().position(|f| f.name == MAIN) else { return };
    let eligible =
        |k: usize, f: &PrimFunc, main: &PrimFunc| k != main_index && f.target.is_none() && row_major(f, main);
    let main = &module.funcs[main_index];
    let mut contractions: HashMap<usize, Plan> = module
        .funcs
        .iter()
        .enumerate()
        .filter(|&(k, f)| eligible(k, f, main))
        .filter_map(|(k, f)| Some((k, match_contraction(f, main)?)))
        .collect();
    inline_scalar_constants(module, main_index, &contractions);
    let main = &module.funcs[main_index];
    let found: Vec<(usize, Found)> = module
        .funcs
        .iter()
        .enumerate()
        .filter(|&(k, f)| eligible(k, f, main))
        .filter_map(|(k, f)| {
            let found = if let Some(plan) = contractions.remove(&k) {
                Found::Contraction(plan)
            } else if let Some(pool) = crate::pooling::match_pool(f) {
                Found::Pool(pool)
            } else if let Some(softmax) = crate::softmax::match_softmax(f) {
                Found::Softmax(softmax)
            } else {
                Found::Map(crate::elementwise::match_map(f)?)
            };
            Some((k, found))
        })
        .collect();
    // Arithmetic maps are generated code while layouts are chosen, and the routine only where
    // their tensors stay planar: a squeeze-excitation's product between blocked convolutions
    // is better stored blocked by generated code than planar by the routine.
    let (arithmetic, found): (Vec<_>, Vec<_>) =
        found.into_iter().partition(|(_, found)| matches!(found, Found::Map(map) if map.arithmetic()));
    let crate::blocking::Blocking { block, tensors: blocked_tensors, mut convs, mut pools } =
        crate::blocking::choose(module, main_index, &found, config);
    let mut touch_blocked: HashSet<String> = HashSet::new();
    module.funcs[main_index].body.walk(&mut |s| {
        if let Stmt::Evaluate(Call { callee: Callee::Func(name), args }) = s
            && args.iter().any(|a| matches!(a, Arg::Buffer(b) if blocked_tensors.contains(b)))
        {
            touch_blocked.insert(name.clone());
        }
    });
    // Without vectors the routine is a scalar loop: generated code's 4-lane vectors win.
    let vectors = config.isa != Isa::Scalar;
    let arithmetic: Vec<_> =
        arithmetic.into_iter().filter(|&(k, _)| vectors && !touch_blocked.contains(&module.funcs[k].name)).collect();
    for (k, found) in found.into_iter().chain(arithmetic) {
        let (before, rest) = module.funcs.split_at_mut(k.max(main_index));
        let (f, main) =
            if k < main_index { (&mut before[k], &mut rest[0]) } else { (&mut rest[0], &mut before[main_index]) };
        match found {
            Found::Contraction(plan) => apply(plan, f, main, config, (convs.remove(&k), &blocked_tensors)),
            Found::Pool(pool) => crate::pooling::apply_pool(pool, f, config, pools.remove(&k)),
            Found::Map(map) => crate::elementwise::apply_map(map, f, config),
            Found::Softmax(softmax) => crate::softmax::apply_softmax(softmax, f, config),
        }
    }
    let main = &mut module.funcs[main_index];
    for b in blocked_tensors {
        main.layout_transforms.insert(b, crate::blocking::blocked_map(block));
    }
}

/// Reads of a one-element f32 constant (GELU's `√2`, `1` and `½` as exported: initializers, not
/// attributes) become literals in each function `main` calls once (and nothing else calls):
/// the elementwise routine takes literals but not scalar buffers, and generated code keeps a
/// literal in a register. Contractions keep their loads: a one-channel bias is the start value
/// the convolution and GEMM matchers read as a load.
fn inline_scalar_constants(module: &mut Module, main_index: usize, contractions: &HashMap<usize, Plan>) {
    // One walk of each function (a model may hold tens of thousands of constants and
    // functions): the one-element f32 constants' values, and each function's call count and
    // the arguments of its call from `main`.
    let mut scalars: HashMap<BufferId, f64> = HashMap::new();
    let mut calls: HashMap<String, (usize, Option<Vec<Arg>>)> = HashMap::new();
    for (k, f) in module.funcs.iter().enumerate() {
        f.body.walk(&mut |s| match s {
            Stmt::AllocateConst { buffer, data, .. }
                if k == main_index && data.dtype() == DType::F32 && data.len() == 1 =>
            {
                scalars.insert(*buffer, data.to_f64_vec()[0]);
            }
            Stmt::Evaluate(Call { callee: Callee::Func(name), args }) => {
                let entry = calls.entry(name.clone()).or_insert((0, None));
                entry.0 += 1;
                if k == main_index {
                    entry.1 = Some(args.clone());
                }
            }
            _ => {}
        });
    }
    for (k, f) in module.funcs.iter_mut().enumerate() {
        let Some((1, Some(args))) = calls.get(&f.name) else { continue };
        if k == main_index || f.target.is_some() || contractions.contains_key(&k) {
            continue;
        }
        let inlined: HashMap<BufferId, f64> = f
            .params
            .iter()
            .zip(args)
            .filter_map(|(&p, a)| match a {
                Arg::Buffer(b) => scalars.get(b).map(|&v| (p, v)),
                _ => None,
            })
            .collect();
        if inlined.is_empty() {
            continue;
        }
        let body = std::mem::replace(&mut f.body, Stmt::Seq(Vec::new()));
        f.body = body.map_exprs(&mut |e| {
            e.map(&mut |e| match e {
                Expr::Load { buffer, .. } if let Some(&v) = inlined.get(&buffer) => Expr::float(v, DType::F32),
                other => other,
            })
        });
    }
}

/// Whether every buffer `f` works on is stored row-major: the kernels index their operands
/// by their logical shapes, so a buffer another target laid out (VTA's packed tensors) keeps
/// generated code.
fn row_major(f: &PrimFunc, main: &PrimFunc) -> bool {
    let mut plain = f.layout_transforms.is_empty();
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(Call { callee: Callee::Func(name), args }) = s
            && *name == f.name
        {
            plain &= args.iter().all(|a| !matches!(a, Arg::Buffer(b) if main.layout_transforms.contains_key(b)));
        }
    });
    plain
}

/// The kernel a nest maps to.
pub(crate) enum Kernel {
    Conv { geo: Conv2d, input: BufferId, bias: Option<BufferId> },
    Gemm { m: usize, n: usize, k: usize, a: BufferId, b_strides: (usize, usize) },
}

impl Kernel {
    /// Multiply-adds of one run (saturating).
    fn multiply_adds(&self) -> u64 {
        let dims = match self {
            Kernel::Conv { geo, .. } => vec![
                geo.batch,
                geo.out_channels,
                geo.out_h,
                geo.out_w,
                geo.in_channels / geo.groups.max(1),
                geo.kernel.0,
                geo.kernel.1,
            ],
            Kernel::Gemm { m, n, k, .. } => vec![*m, *n, *k],
        };
        dims.into_iter().fold(1u64, |p, d| p.saturating_mul(d as u64))
    }
}

/// What fuses into the kernel's epilogue.
#[derive(Default)]
pub(crate) struct Fused {
    col_bias: Option<BufferId>,
    pub residual: Option<BufferId>,
    clamp: Option<(f32, f32)>,
}

/// An integer product's operands: the input's (the operand read at run time) kind and zero
/// point, the weights' kind and zero points (one, or one per output channel or column).
pub(crate) struct Quant {
    input_signed: bool,
    input_zero: i32,
    weights_signed: bool,
    weights_zero: Vec<i32>,
}

pub(crate) struct Plan {
    pub kernel: Kernel,
    /// `Some`: an integer product, accumulated in i32.
    pub quant: Option<Quant>,
    /// The weights parameter (position in `f.params`) and the constant it is in `main`.
    weights: (usize, BufferId),
    pub out: BufferId,
    /// The output loops (variable, extent), outermost first.
    out_loops: Vec<(VarId, i64)>,
    /// `Some(epilogue)`: fused; `None`: the store's expression runs after the kernel, in place.
    pub fused: Option<Fused>,
    /// With `fused`, what of the store's expression runs after the kernel over its output
    /// (the accumulator standing for it), in place; `None`: nothing.
    rest: Option<Expr>,
    acc: BufferId,
    epilogue: Expr,
    /// Statements before the nest (a padded copy of the input) that stay.
    prelude: Vec<Stmt>,
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(shape[d + 1] as i64);
    }
    s
}

/// A load's flat element offset as `coefficient per variable + constant`.
fn flat_offset(f: &PrimFunc, buffer: BufferId, indices: &[Expr]) -> Option<(HashMap<VarId, i64>, i64)> {
    let shape = &f.buffer(buffer).shape;
    if indices.len() != shape.len() {
        return None;
    }
    let (mut terms, mut constant) = (HashMap::new(), 0i64);
    for (idx, stride) in indices.iter().zip(strides(shape)) {
        let (t, c) = affine_terms(idx)?;
        constant = constant.checked_add(c.checked_mul(stride)?)?;
        for (v, k) in t {
            let e = terms.entry(v).or_insert(0i64);
            *e = e.checked_add(k.checked_mul(stride)?)?;
        }
    }
    terms.retain(|_, k| *k != 0);
    Some((terms, constant))
}

fn is_acc(e: &Expr, acc: BufferId) -> bool {
    matches!(e, Expr::Load { buffer, indices } if *buffer == acc && indices.len() == 1 && indices[0].as_int() == Some(0))
}

/// The position of parameter `param` of `f` and the buffer `main` passes there, when `f` is
/// called once.
fn bound_arg(f: &PrimFunc, main: &PrimFunc, param: BufferId) -> Option<(usize, BufferId)> {
    let pos = f.params.iter().position(|&p| p == param)?;
    let mut calls = Vec::new();
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(Call { callee: Callee::Func(name), args }) = s
            && *name == f.name
        {
            calls.push(args.clone());
        }
    });
    let [args] = &calls[..] else { return None };
    let Some(Arg::Buffer(bound)) = args.get(pos) else { return None };
    Some((pos, *bound))
}

/// The data of `main`'s constant `buffer`.
fn constant_data(main: &PrimFunc, buffer: BufferId) -> Option<Arc<Tensor>> {
    let mut data = None;
    main.body.walk(&mut |s| {
        if let Stmt::AllocateConst { buffer: b, data: d, .. } = s
            && *b == buffer
        {
            data = Some(Arc::clone(d));
        }
    });
    data
}

/// The buffer a constant parameter of `f` is bound to in `main`, when `f` is called once and
/// the constant is passed to nothing else.
fn sole_constant(f: &PrimFunc, main: &PrimFunc, param: BufferId) -> Option<(usize, BufferId)> {
    let (pos, bound) = bound_arg(f, main, param)?;
    let mut uses = 0;
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(call) = s {
            uses += call.args.iter().filter(|a| matches!(a, Arg::Buffer(b) if *b == bound)).count()
        }
    });
    (constant_data(main, bound).is_some() && uses == 1).then_some((pos, bound))
}

fn match_contraction(f: &PrimFunc, main: &PrimFunc) -> Option<Plan> {
    let Stmt::Seq(items) = &f.body else { return None };
    let (nest, head) = items.split_last()?;
    let (acc_alloc, prelude) = head.split_last()?;
    let Stmt::Allocate { buffer: acc, .. } = acc_alloc else { return None };
    let acc = *acc;
    // f32, or an integer product's i32.
    let integer = match f.buffer(acc).dtype {
        DType::F32 => false,
        DType::I32 => true,
        _ => return None,
    };
    if f.buffer(acc).scope != Scope::Local {
        return None;
    }
    // The prelude may only allocate and fill a scratch copy (the padded input).
    if prelude.len() > 2 || prelude.iter().any(|s| !matches!(s, Stmt::Allocate { .. } | Stmt::For { .. })) {
        return None;
    }
    let (out_loops, body) = peel(nest);
    let Stmt::Seq(parts) = body else { return None };
    // The epilogue's store, with the value of a `let` before it (a residual sum an activation
    // reads twice: `e = acc + r; out = e · sigmoid(e)`) written into it.
    let (init, reduce, out, out_idx, epilogue) = match &parts[..] {
        [Stmt::Store { buffer: a0, indices: i0, value: init }, reduce, Stmt::Store { buffer, indices, value }]
            if *a0 == acc && i0.len() == 1 && i0[0].as_int() == Some(0) =>
        {
            (init, reduce, buffer, indices, value.clone())
        }
        [
            Stmt::Store { buffer: a0, indices: i0, value: init },
            reduce,
            Stmt::Let { var, value: bound },
            Stmt::Store { buffer, indices, value },
        ] if *a0 == acc && i0.len() == 1 && i0[0].as_int() == Some(0) => {
            let inlined = value.clone().map(&mut |x| if x == Expr::Var(*var) { bound.clone() } else { x });
            (init, reduce, buffer, indices, inlined)
        }
        _ => return None,
    };
    let epilogue = &epilogue;
    let out = *out;
    let out_shape = f.buffer(out).shape.clone();
    if (!integer && f.buffer(out).dtype != DType::F32)
        || !f.params.contains(&out)
        || out_loops.len() != out_shape.len()
        || out_loops.iter().zip(&out_shape).any(|((_, n), &s)| *n != s as i64)
        || out_idx.len() != out_loops.len()
        || out_idx.iter().zip(&out_loops).any(|(e, (v, _))| !matches!(e, Expr::Var(x) if x == v))
    {
        return None;
    }
    let (red_loops, red_body) = peel(reduce);
    let Stmt::Store { buffer: a1, indices: i1, value: update } = red_body else { return None };
    if *a1 != acc || i1.len() != 1 || i1[0].as_int() != Some(0) {
        return None;
    }
    let Expr::Binary { op: BinOp::Add, lhs, rhs } = update else { return None };
    if !is_acc(lhs, acc) {
        return None;
    }
    let Expr::Binary { op: BinOp::Mul, lhs: l, rhs: r } = &**rhs else { return None };
    let factors = if integer {
        let reduction: Vec<VarId> = red_loops.iter().map(|(v, _)| *v).collect();
        [factor(l, f, &reduction)?, factor(r, f, &reduction)?]
    } else {
        let load = |e: &Expr| match e {
            Expr::Load { buffer, indices } if f.buffer(*buffer).dtype == DType::F32 => {
                Some(Factor { buffer: *buffer, indices: indices.clone(), zero: None })
            }
            _ => None,
        };
        [load(l)?, load(r)?]
    };
    let loads =
        [(factors[0].buffer, factors[0].indices.as_slice()), (factors[1].buffer, factors[1].indices.as_slice())];
    let (mut kernel, weights) = match (out_loops.len(), red_loops.len()) {
        (4, 3) => match_conv(f, main, &loads, &out_loops, &red_loops, init)?,
        (r, 1) if r >= 2 => match_gemm(f, main, &loads, &out_loops, red_loops[0], init)?,
        _ => return None,
    };
    let quant =
        if integer { Some(match_quant(f, main, &factors, &kernel, f.params[weights.0], &out_loops)?) } else { None };
    let mut prelude = prelude.to_vec();
    if let Kernel::Conv { geo, input, .. } = &mut kernel {
        // The padding holds zeros, or an integer input's zero point.
        let input_factor = factors.iter().find(|x| x.buffer == *input);
        let fill = match input_factor.and_then(|x| x.zero.as_ref()) {
            _ if !integer => Some(Expr::float(0.0, DType::F32)),
            Some(Expr::Cast { value, .. }) => Some((**value).clone()),
            _ => None,
        };
        if let Some(fill) = fill
            && let Some((source, pad)) = padded_copy(f, &prelude, *input, &fill)
        {
            let [_, _, in_h, in_w] = <[usize; 4]>::try_from(f.buffer(source).shape.as_slice()).ok()?;
            let unpadded = Conv2d { in_h, in_w, pad, ..*geo };
            if unpadded.check().is_ok() {
                (*geo, *input) = (unpadded, source);
                prelude.clear();
            }
        }
    }
    let gemm = matches!(kernel, Kernel::Gemm { .. });
    let (fused, rest) = if integer {
        // The kernel's i32 result is the output only when the epilogue stores it unchanged.
        ((is_acc(epilogue, acc) && f.buffer(out).dtype == DType::I32).then(Fused::default), None)
    } else if let Some(fused) = fuse_epilogue(f, epilogue, acc, &out_loops, out, gemm) {
        (Some(fused), None)
    } else {
        // An activation of a residual sum (`tanh(acc + r)`) or of a GEMM's sum with its bias
        // per column (`sigmoid(acc + b)`): the kernel adds the residual or bias, the rest runs
        // over its output, and the residual is the kernel's, laid out as its output.
        residual_sums_under(epilogue, acc)
            .into_iter()
            .find_map(|(sum, rest)| {
                let fused = fuse_epilogue(f, &sum, acc, &out_loops, out, gemm)?;
                (fused.residual.is_some() || fused.col_bias.is_some()).then_some((Some(fused), Some(rest)))
            })
            .unwrap_or((None, None))
    };
    Some(Plan { kernel, quant, weights, out, out_loops, fused, rest, acc, epilogue: epilogue.clone(), prelude })
}

/// An integer product's operand kinds and zero points, when the kernels take them: the
/// input's zero point one constant, the weights' one constant or one per output channel
/// (convolution) or column (GEMM), each within its bytes' range.
fn match_quant(
    f: &PrimFunc,
    main: &PrimFunc,
    factors: &[Factor; 2],
    kernel: &Kernel,
    weights_param: BufferId,
    out_loops: &[(VarId, i64)],
) -> Option<Quant> {
    let (w, x) =
        if factors[0].buffer == weights_param { (&factors[0], &factors[1]) } else { (&factors[1], &factors[0]) };
    if w.buffer != weights_param {
        return None;
    }
    if let Kernel::Conv { geo, .. } = kernel
        && geo.groups > 1
    {
        return None;
    }
    // The loop a per-line weights zero point is indexed by: the output channel or column.
    let per_line = match kernel {
        Kernel::Conv { .. } => out_loops[1],
        Kernel::Gemm { .. } => *out_loops.last()?,
    };
    let signed = |b: BufferId| f.buffer(b).dtype == DType::I8;
    let in_range = |v: &i32, signed: bool| if signed { (-128..=127).contains(v) } else { (0..=255).contains(v) };
    let input_zero = match zero_values(f, main, x.zero.as_ref(), None)?[..] {
        [z] if in_range(&z, signed(x.buffer)) => z,
        _ => return None,
    };
    let weights_zero = zero_values(f, main, w.zero.as_ref(), Some(per_line))?;
    if !weights_zero.iter().all(|z| in_range(z, signed(w.buffer))) {
        return None;
    }
    Some(Quant { input_signed: signed(x.buffer), input_zero, weights_signed: signed(w.buffer), weights_zero })
}

/// A factor's zero point as constants: none (0), a literal, or a constant parameter read
/// at one place (one value) or at `per_line`'s variable over that loop's extent (one value
/// per line).
fn zero_values(f: &PrimFunc, main: &PrimFunc, zero: Option<&Expr>, per_line: Option<(VarId, i64)>) -> Option<Vec<i32>> {
    let Some(zero) = zero else { return Some(vec![0]) };
    let e = match zero {
        Expr::Cast { dtype: DType::I32, value } => &**value,
        other => other,
    };
    let to_i32 = |v: i64| i32::try_from(v).ok();
    if let Some(v) = e.as_int() {
        return Some(vec![to_i32(v)?]);
    }
    let Expr::Load { buffer, indices } = e else { return None };
    let data = constant_data(main, bound_arg(f, main, *buffer)?.1)?;
    let values = data.to_i64_vec()?;
    if values.len() == 1 {
        return Some(vec![to_i32(values[0])?]);
    }
    let (var, n) = per_line?;
    (matches!(&indices[..], [Expr::Var(v)] if *v == var) && values.len() as i64 == n)
        .then(|| values.into_iter().map(to_i32).collect())?
}

/// When `prelude` is exactly lowering's padded copy of an NCHW tensor into `padded`
/// (`allocate`, then `padded[n, c, y, x] = select(in range, source[n, c, clamp(y - top),
/// clamp(x - left)], fill)`, simplified over the loops' ranges as lowering leaves it: with no
/// padding before an axis, `clamp(y)` is `min(y, extent - 1)`), the source and `(top, left)`.
fn padded_copy(f: &PrimFunc, prelude: &[Stmt], padded: BufferId, fill: &Expr) -> Option<(BufferId, (usize, usize))> {
    use heron_ir::loop_ir::build::{and, idx, in_range, max, min, sub};
    let [Stmt::Allocate { buffer, .. }, nest @ Stmt::For { .. }] = prelude else { return None };
    if *buffer != padded {
        return None;
    }
    let (loops, body) = peel(nest);
    let Stmt::Store { buffer: dst, indices, value } = body else { return None };
    let shape = &f.buffer(padded).shape;
    let vars: Vec<Expr> = loops.iter().map(|(v, _)| Expr::Var(*v)).collect();
    if *dst != padded
        || loops.len() != 4
        || *indices != vars
        || loops.iter().zip(shape).any(|((_, n), &s)| *n != s as i64)
    {
        return None;
    }
    let Expr::Select { then, .. } = value else { return None };
    let Expr::Load { buffer: source, indices: src_idx } = &**then else { return None };
    let src_shape = &f.buffer(*source).shape;
    if src_shape.len() != 4 || src_shape[..2] != shape[..2] {
        return None;
    }
    // The offsets, read off `min(max(v - offset, 0), extent - 1)` (or none: 0), then the whole
    // expression rebuilt as lowering builds it, simplified, and compared.
    let offset = |e: &Expr| -> Option<i64> {
        let sub = match e {
            Expr::Binary { op: BinOp::Min, lhs, .. } => match &**lhs {
                Expr::Binary { op: BinOp::Max, lhs, .. } => Some(&**lhs),
                _ => None,
            },
            _ => None,
        };
        match sub {
            Some(Expr::Binary { op: BinOp::Sub, rhs, .. }) => rhs.as_int().filter(|&o| o >= 0),
            _ => Some(0),
        }
    };
    let (top, left) = (offset(src_idx.get(2)?)?, offset(src_idx.get(3)?)?);
    let clamp = |e: Expr, n: usize| min(max(e, idx(0)), idx(n as i64 - 1));
    let (y, x) = (sub(vars[2].clone(), idx(top)), sub(vars[3].clone(), idx(left)));
    let expected = Expr::select(
        and(in_range(y.clone(), src_shape[2]), in_range(x.clone(), src_shape[3])),
        Expr::load(*source, vec![vars[0].clone(), vars[1].clone(), clamp(y, src_shape[2]), clamp(x, src_shape[3])]),
        fill.clone(),
    );
    let mut ranges = heron_ir::loop_ir::analysis::VarRanges::new(f.vars.len());
    for &(v, n) in &loops {
        ranges.set(v, Some((0, i128::from(n) - 1)));
    }
    let expected = heron_ir::loop_ir::simplify::simplify(expected, f, &ranges);
    (*value == expected && src_shape[2] > 0 && src_shape[3] > 0).then_some((*source, (top as usize, left as usize)))
}

fn coefficient(terms: &HashMap<VarId, i64>, v: VarId) -> i64 {
    terms.get(&v).copied().unwrap_or(0)
}

fn match_conv(
    f: &PrimFunc,
    main: &PrimFunc,
    loads: &[(BufferId, &[Expr]); 2],
    out_loops: &[(VarId, i64)],
    red_loops: &[(VarId, i64)],
    init: &Expr,
) -> Option<(Kernel, (usize, BufferId))> {
    let [(n, batch), (oc, m), (oh, out_h), (ow, out_w)] = out_loops.try_into().ok()?;
    let [(ci, cg), (r, kh), (s, kw)] = red_loops.try_into().ok()?;
    // The weights: `w[oc, ci, r, s]`, a constant.
    let is_weights = |(b, idx): &(BufferId, &[Expr])| {
        let want = [oc, ci, r, s];
        idx.len() == 4
            && idx.iter().zip(want).all(|(e, v)| matches!(e, Expr::Var(x) if *x == v))
            && f.buffer(*b).shape == [m as usize, cg as usize, kh as usize, kw as usize]
    };
    let (w, x) = if is_weights(&loads[0]) {
        (loads[0], loads[1])
    } else if is_weights(&loads[1]) {
        (loads[1], loads[0])
    } else {
        return None;
    };
    let weights = sole_constant(f, main, w.0)?;
    let x_shape = f.buffer(x.0).shape.clone();
    let [xb, c, in_h, in_w] = <[usize; 4]>::try_from(x_shape).ok()?;
    let (terms, constant) = flat_offset(f, x.0, x.1)?;
    let plane = (in_h * in_w) as i64;
    let known = [n, oc, oh, ow, ci, r, s];
    if constant != 0 || terms.keys().any(|v| !known.contains(v)) || xb as i64 != batch {
        return None;
    }
    let co = |v| coefficient(&terms, v);
    let (w_, c_) = (in_w as i64, c as i64);
    // Each variable's coefficient, or any value when its loop runs once.
    let fits = |v: VarId, extent: i64, want: i64| extent == 1 || co(v) == want;
    let groups = if co(oc) == 0 && cg == c_ {
        1
    } else if m == c_ && cg == 1 && co(oc) == plane {
        c_
    } else {
        return None;
    };
    let step = |v: VarId, extent: i64, unit: i64| -> Option<usize> {
        if extent == 1 {
            return Some(1);
        }
        let k = co(v);
        (k > 0 && k % unit == 0).then(|| (k / unit) as usize)
    };
    let (sh, sw) = (step(oh, out_h, w_)?, step(ow, out_w, 1)?);
    let (dh, dw) = (step(r, kh, w_)?, step(s, kw, 1)?);
    if !fits(n, batch, c_ * plane) || !fits(ci, cg, plane) {
        return None;
    }
    let geo = Conv2d {
        batch: batch as usize,
        in_channels: c,
        in_h,
        in_w,
        out_channels: m as usize,
        out_h: out_h as usize,
        out_w: out_w as usize,
        kernel: (kh as usize, kw as usize),
        stride: (sh, sw),
        dilation: (dh, dw),
        groups: groups as usize,
        pad: (0, 0),
    };
    geo.check().ok()?;
    let bias = match init {
        Expr::Float { value, .. } if *value == 0.0 => None,
        Expr::Int { value: 0, .. } => None,
        Expr::Load { buffer, indices }
            if f.buffer(*buffer).shape == [m as usize]
                && matches!(&indices[..], [Expr::Var(v)] if *v == oc)
                && f.buffer(*buffer).dtype == DType::F32 =>
        {
            Some(*buffer)
        }
        _ => return None,
    };
    Some((Kernel::Conv { geo, input: x.0, bias }, weights))
}

fn match_gemm(
    f: &PrimFunc,
    main: &PrimFunc,
    loads: &[(BufferId, &[Expr]); 2],
    out_loops: &[(VarId, i64)],
    (kv, k): (VarId, i64),
    init: &Expr,
) -> Option<(Kernel, (usize, BufferId))> {
    if !matches!(init, Expr::Float { value, .. } if *value == 0.0) && !matches!(init, Expr::Int { value: 0, .. }) {
        return None;
    }
    let (nv, n) = *out_loops.last()?;
    let rows = &out_loops[..out_loops.len() - 1];
    let m: i64 = rows.iter().map(|(_, e)| e).product();
    // B: depends on the reduction and the column only, a constant.
    let b_strides = |(b, idx): &(BufferId, &[Expr])| -> Option<(usize, usize)> {
        let (terms, constant) = flat_offset(f, *b, idx)?;
        let (sk, sn) = (coefficient(&terms, kv), coefficient(&terms, nv));
        let only = terms.keys().all(|v| *v == kv || *v == nv);
        let elements = f.buffer(*b).num_elements() as i64;
        (constant == 0 && only && sk >= 0 && sn >= 0 && (k - 1) * sk + (n - 1) * sn < elements)
            .then_some((sk as usize, sn as usize))
    };
    let pick = [(0, 1), (1, 0)].into_iter().find_map(|(bi, ai)| {
        let strides = b_strides(&loads[bi])?;
        let weights = sole_constant(f, main, loads[bi].0)?;
        Some((strides, weights, loads[ai]))
    });
    let (b_strides, weights, a) = pick?;
    // A: rows of k contiguous values, the output's row loops flattened in order.
    let (terms, constant) = flat_offset(f, a.0, a.1)?;
    let mut stride = k;
    for &(v, extent) in rows.iter().rev() {
        if extent != 1 && coefficient(&terms, v) != stride {
            return None;
        }
        stride = stride.checked_mul(extent)?;
    }
    let known: Vec<VarId> = rows.iter().map(|(v, _)| *v).chain([kv]).collect();
    if constant != 0
        || coefficient(&terms, kv) != 1
        || terms.keys().any(|v| !known.contains(v))
        || f.buffer(a.0).num_elements() as i64 != m.checked_mul(k)?
    {
        return None;
    }
    Some((Kernel::Gemm { m: m as usize, n: n as usize, k: k as usize, a: a.0, b_strides }, weights))
}

/// The epilogue as fused parts (`Some`), or `None` when it must stay generated code.
fn fuse_epilogue(
    f: &PrimFunc,
    e: &Expr,
    acc: BufferId,
    out_loops: &[(VarId, i64)],
    out: BufferId,
    gemm: bool,
) -> Option<Fused> {
    let mut fused = Fused::default();
    // The clamp: max(x, lo), min(x, hi), min(max(x, lo), hi) or max(min(x, hi), lo).
    fn bounded(e: &Expr, op: BinOp) -> Option<(&Expr, f32)> {
        match e {
            Expr::Binary { op: o, lhs, rhs: bound } if *o == op => match **bound {
                Expr::Float { value, .. } => Some((&**lhs, value as f32)),
                _ => None,
            },
            _ => None,
        }
    }
    let mut sum = e;
    let clamp = match (bounded(e, BinOp::Max), bounded(e, BinOp::Min)) {
        (Some((x, lo)), _) => Some(match bounded(x, BinOp::Min) {
            Some((y, hi)) => (y, lo, hi),
            None => (x, lo, f32::INFINITY),
        }),
        (_, Some((x, hi))) => Some(match bounded(x, BinOp::Max) {
            Some((y, lo)) => (y, lo, hi),
            None => (x, f32::NEG_INFINITY, hi),
        }),
        _ => None,
    };
    if let Some((inner, lo, hi)) = clamp {
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return None;
        }
        fused.clamp = Some((lo, hi));
        sum = inner;
    }
    // The rest: a sum of the accumulator, a bias per column and a residual.
    let mut terms = Vec::new();
    let mut stack = vec![sum];
    while let Some(t) = stack.pop() {
        match t {
            Expr::Binary { op: BinOp::Add, lhs, rhs } => {
                stack.push(rhs);
                stack.push(lhs);
            }
            other => terms.push(other),
        }
    }
    let mut seen_acc = false;
    let out_index: Vec<Expr> = out_loops.iter().map(|(v, _)| Expr::Var(*v)).collect();
    // Variables of loops that run once index nothing.
    let out_offset = flat_offset(f, out, &out_index).map(|(mut t, c)| {
        t.retain(|v, _| out_loops.iter().any(|(x, n)| x == v && *n > 1));
        (t, c)
    });
    for t in terms {
        if is_acc(t, acc) && !seen_acc {
            seen_acc = true;
            continue;
        }
        let Expr::Load { buffer, indices } = t else { return None };
        if f.buffer(*buffer).dtype != DType::F32 || *buffer == out || !f.params.contains(buffer) {
            return None;
        }
        // Shaped like the output, or broadcast only along axes of extent 1.
        let residual_like = f.buffer(*buffer).num_elements() == f.buffer(out).num_elements()
            && flat_offset(f, *buffer, indices).is_some_and(|(mut t, c)| {
                t.retain(|v, _| out_loops.iter().any(|(x, n)| x == v && *n > 1));
                out_offset.as_ref().is_some_and(|(want, _)| c == 0 && t == *want)
            });
        if residual_like && fused.residual.is_none() {
            fused.residual = Some(*buffer);
            continue;
        }
        let (n_var, n) = *out_loops.last()?;
        let (terms, constant) = flat_offset(f, *buffer, indices)?;
        let per_column = constant == 0
            && terms.len() == 1
            && coefficient(&terms, n_var) == 1
            && f.buffer(*buffer).num_elements() as i64 == n;
        if gemm && per_column && fused.col_bias.is_none() {
            fused.col_bias = Some(*buffer);
            continue;
        }
        return None;
    }
    seen_acc.then_some(fused)
}

/// The sums holding the accumulator in `e`, outermost first, each where every use of the
/// accumulator is in a copy of it, with `e` with the accumulator in its place: `tanh(acc + r)`
/// is `acc + r` and `tanh(acc)`; `(acc + r) · sigmoid(acc + r)` is `acc + r` and `acc ·
/// sigmoid(acc)`; HardSigmoid's `min(max(α(acc + r) + β, 0), 1)` is first `α(acc + r) + β`
/// (which no kernel fuses), then `acc + r`.
fn residual_sums_under(e: &Expr, acc: BufferId) -> Vec<(Expr, Expr)> {
    let count = |e: &Expr, what: &dyn Fn(&Expr) -> bool| {
        let mut n = 0usize;
        e.clone().map(&mut |x| {
            n += usize::from(what(&x));
            x
        });
        n
    };
    let holds_acc = |e: &Expr| count(e, &|x| is_acc(x, acc)) > 0;
    let acc_load = Expr::load(acc, vec![Expr::index(0)]);
    let uses = count(e, &|x| is_acc(x, acc));
    let split = |sum: &Expr| {
        let copies = count(e, &|x| x == sum);
        if copies == 0 || uses != copies * count(sum, &|x| is_acc(x, acc)) {
            return None;
        }
        let rest = e.clone().map(&mut |x| if x == *sum { acc_load.clone() } else { x });
        // The bottom-up rewrite can meet a copy again in a parent it made (`(acc + r) + r`
        // became `acc + r`): only a split that gives `e` back when the sum is written for the
        // accumulator holds.
        let back = rest.clone().map(&mut |x| if is_acc(&x, acc) { sum.clone() } else { x });
        (rest != acc_load && back == *e).then(|| (sum.clone(), rest))
    };
    // Top-down, so that an outer sum comes before the sums inside it.
    let mut splits = Vec::new();
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        if let Expr::Binary { op: BinOp::Add, .. } = x
            && holds_acc(x)
        {
            splits.extend(split(x));
        }
        match x {
            Expr::Binary { lhs, rhs, .. } | Expr::Cmp { lhs, rhs, .. } => stack.extend([&**rhs, &**lhs]),
            Expr::Not(a) | Expr::Cast { value: a, .. } | Expr::Math { arg: a, .. } => stack.push(a),
            Expr::Select { cond, then, otherwise } => stack.extend([&**otherwise, &**then, &**cond]),
            _ => {}
        }
    }
    splits
}

/// The weights packed for the kernel, the name their constant shows (the packing: ISA and
/// method), and the scratch per task (elements, type).
struct Packed {
    weights: Tensor,
    name: String,
    scratch: (usize, DType),
}

fn pack(plan: &Plan, data: &Tensor, name: &str, config: KernelConfig, blocked: Option<&BlockedConv>) -> Option<Packed> {
    let isa = config.isa;
    if let Some(q) = &plan.quant {
        let isa = config.int8;
        let bits = data.to_le_bytes();
        let w = Bytes { data: &bits, signed: q.weights_signed, zero: &q.weights_zero };
        let (packed, scratch) = match &plan.kernel {
            Kernel::Conv { geo, .. } => {
                let mut p = vec![0; qgemm::conv_packed_weights_len(isa, geo).ok()?];
                qgemm::conv_pack_weights(isa, geo, w, &mut p).ok()?;
                (p, qgemm::conv_scratch_len(isa, geo).ok()?)
            }
            Kernel::Gemm { n, k, b_strides, .. } => {
                let mut p = vec![0; qgemm::packed_b_len(isa, *k, *n).ok()?];
                qgemm::pack_b(isa, w, *b_strides, (*k, *n), &mut p).ok()?;
                (p, qgemm::gemm_scratch_len(isa, *k).ok()?)
            }
        };
        let weights = Tensor::from_vec(&[packed.len()], packed).ok()?;
        return Some(Packed { weights, name: format!("{name}_{}_q8", isa.name()), scratch: (scratch, DType::U8) });
    }
    let array = data.as_array::<f32>()?;
    // A standard-layout constant is read in place: copying a large model's weights element by
    // element through ndarray's iterator shows in the compile time.
    let owned;
    let values = match array.as_slice() {
        Some(v) => v,
        None => {
            owned = array.iter().copied().collect::<Vec<f32>>();
            &owned
        }
    };
    let (packed, scratch, name) = match &plan.kernel {
        Kernel::Conv { .. } if let Some(conv) = blocked => {
            let mut p = vec![0.0; conv.packed_weights_len().ok()?];
            conv.pack_weights(values, &mut p).ok()?;
            (p, conv.scratch_len().ok()?, format!("{name}_{}_nchw{}c", isa.name(), conv.block))
        }
        Kernel::Conv { geo, .. } => {
            let mut p = vec![0.0; geo.packed_weights_len(isa).ok()?];
            geo.pack_weights(isa, values, &mut p).ok()?;
            (p, geo.scratch_len(isa).ok()?, format!("{name}_{}_{}", isa.name(), geo.method(isa).name()))
        }
        Kernel::Gemm { n, k, b_strides, .. } => {
            let mut p = vec![0.0; gemm::packed_b_len(isa, *k, *n).ok()?];
            gemm::pack_b(isa, values, *b_strides, (*k, *n), &mut p).ok()?;
            (p, 0, format!("{name}_{}", isa.name()))
        }
    };
    let weights = Tensor::from_vec(&[packed.len()], packed).ok()?;
    Some(Packed { weights, name, scratch: (scratch, DType::F32) })
}

/// Rewrites `f`'s nest as the kernel call `plan` found: `blocked` is the blocked convolution
/// it runs instead (if any: over channel-blocked tensors, or a strided one between planar
/// tensors) and `main`'s blocked tensors.
fn apply(
    plan: Plan,
    f: &mut PrimFunc,
    main: &mut PrimFunc,
    config: KernelConfig,
    (blocked, blocked_tensors): (Option<BlockedConv>, &HashSet<BufferId>),
) {
    let isa = config.isa;
    let (pos, constant) = plan.weights;
    // Pack the weights into a new constant, in kernel order.
    let Some(data) = constant_data(main, constant) else { return };
    let Some(packed) = pack(&plan, &data, &main.buffer(constant).name, config, blocked.as_ref()) else { return };
    // Kernels without scratch take more shares than threads: the pool hands them out as the
    // threads come free, so a slower core takes fewer. So do blocked convolutions while the
    // widened images of all their shares stay within `SHARED_SCRATCH_BUDGET`.
    let shares = if plan.kernel.multiply_adds() < SMALL_CONTRACTION {
        config.with_shares_per_thread(SHARES_PER_THREAD / 2)
    } else {
        config.with_shares()
    };
    let shared_scratch = packed.scratch.0.saturating_mul(shares.tasks).saturating_mul(size_of::<f32>());
    let config = if packed.scratch.0 == 0 || (blocked.is_some() && shared_scratch <= SHARED_SCRATCH_BUDGET) {
        shares
    } else {
        config
    };
    let Some(scratch_len) = packed.scratch.0.checked_mul(config.tasks) else { return };
    let len = packed.weights.len();
    let tensor = Arc::new(packed.weights);
    main.buffers.push(Buffer::new(packed.name, tensor.dtype(), vec![len]));
    let new_const = BufferId(main.buffers.len() as u32 - 1);
    let mut body = main.take_body();
    let mut uses_left = 0;
    for s in &mut body {
        match s {
            Stmt::Evaluate(Call { callee: Callee::Func(callee), args }) if *callee == f.name => {
                args[pos] = Arg::Buffer(new_const);
            }
            Stmt::Evaluate(call) => {
                uses_left += call.args.iter().filter(|a| matches!(a, Arg::Buffer(b) if *b == constant)).count()
            }
            _ => {}
        }
    }
    let mut rewritten = Vec::with_capacity(body.len() + 1);
    for s in body {
        match s {
            Stmt::AllocateConst { buffer, data, pools } if buffer == constant => {
                rewritten.push(Stmt::AllocateConst {
                    buffer: new_const,
                    data: Arc::clone(&tensor),
                    pools: pools.clone(),
                });
                if uses_left > 0 {
                    rewritten.push(Stmt::AllocateConst { buffer, data, pools });
                }
            }
            other => rewritten.push(other),
        }
    }
    main.body = Stmt::Seq(rewritten);

    // The function: its weights parameter now holds the packed weights.
    let weights_param = f.params[pos];
    let param = &mut f.buffers[weights_param.0 as usize];
    (param.shape, param.dtype) = (vec![len], tensor.dtype());
    let out = plan.out;
    let (fused, generic) = match plan.fused {
        Some(fused) => (fused, plan.rest),
        None => (Fused::default(), Some(plan.epilogue)),
    };
    let i = |v: usize| Arg::Expr(Expr::index(v as i64));
    f.vars.push(VarDecl { name: "task".into(), dtype: DType::I64 });
    let task = VarId(f.vars.len() as u32 - 1);
    let mut stmts = plan.prelude;
    let mut new_buffer = |f: &mut PrimFunc, name: &str, dtype: DType, shape: Vec<usize>| {
        f.buffers.push(Buffer::new(name, dtype, shape));
        let b = BufferId(f.buffers.len() as u32 - 1);
        stmts.push(Stmt::Allocate { buffer: b, pools: vec![] });
        b
    };
    let scratch =
        if scratch_len > 0 { new_buffer(f, "kernel_scratch", packed.scratch.1, vec![scratch_len]) } else { out };
    // Where the kernel writes: the output, or for an integer product whose epilogue does more
    // than store it, an i32 buffer the epilogue reads.
    let raw = match (&plan.quant, &generic) {
        (Some(_), Some(_)) => new_buffer(f, "accumulators", DType::I32, f.buffer(out).shape.clone()),
        _ => out,
    };
    let conv_dims = |geo: &Conv2d| geo.dims().map(i);
    // A blocked convolution applies the rest of its epilogue itself: an activation it knows in
    // registers, anything else a tail program holds (PReLU's per-channel slope, ELU, ...) on
    // each tile while it is in cache, instead of generated code going over the blocked output
    // again through its index map.
    // A planar convolution or a GEMM applies an activation it knows too, swept over each run
    // of results it has just stored.
    let rest = generic.as_ref().filter(|_| plan.quant.is_none());
    let activation = rest.and_then(|e| native_activation(e, plan.acc));
    let out_blocked = blocked.as_ref().is_some_and(|b| b.output == Layout::Blocked);
    let tail = rest
        .filter(|_| blocked.is_some() && activation.is_none())
        .and_then(|e| tail_of(f, e, plan.acc, out, &plan.out_loops))
        .filter(|(_, operands)| operands_stored_as(f, main, blocked_tensors, operands, out_blocked));
    let (routine, args) = if let Some(q) = &plan.quant {
        let (routine, input, dims) = match &plan.kernel {
            Kernel::Conv { geo, input, .. } => (CONV2D_Q8, *input, conv_dims(geo).to_vec()),
            Kernel::Gemm { m, n, k, a, .. } => (GEMM_Q8, *a, vec![i(*m), i(*n), i(*k)]),
        };
        let mut args = vec![Arg::Buffer(input), Arg::Buffer(weights_param), Arg::Buffer(raw), Arg::Buffer(scratch)];
        args.push(Arg::Expr(Expr::index(config.int8.code())));
        args.extend(dims);
        args.extend([
            Arg::Expr(Expr::index(i64::from(q.input_signed))),
            Arg::Expr(Expr::index(i64::from(q.input_zero))),
            Arg::Expr(Expr::Var(task)),
            i(config.tasks),
        ]);
        (routine, args)
    } else {
        let mut flag_bits = 0;
        let mut buffer_or_out = |b: Option<BufferId>, bit: i64| {
            b.map_or(Arg::Buffer(out), |b| {
                flag_bits |= bit;
                Arg::Buffer(b)
            })
        };
        let (routine, mut args) = match &plan.kernel {
            Kernel::Conv { geo, input, bias } if let Some(conv) = blocked => {
                let mut args = vec![
                    Arg::Buffer(*input),
                    Arg::Buffer(weights_param),
                    buffer_or_out(*bias, flags::BIAS),
                    buffer_or_out(fused.residual, flags::RESIDUAL),
                    Arg::Buffer(out),
                    Arg::Expr(Expr::index(isa.code())),
                ];
                args.extend(conv_dims(geo));
                let bit = |layout: Layout, bit: i64| if layout == Layout::Blocked { bit } else { 0 };
                args.extend([
                    i(conv.block),
                    Arg::Expr(Expr::index(bit(conv.input, layouts::INPUT) | bit(conv.output, layouts::OUTPUT))),
                ]);
                (CONV2D_BLOCKED_F32, args)
            }
            Kernel::Conv { geo, input, bias } => {
                let mut args = vec![
                    Arg::Buffer(*input),
                    Arg::Buffer(weights_param),
                    buffer_or_out(*bias, flags::BIAS),
                    buffer_or_out(fused.residual, flags::RESIDUAL),
                    Arg::Buffer(out),
                    Arg::Buffer(scratch),
                    Arg::Expr(Expr::index(isa.code())),
                ];
                args.extend(conv_dims(geo));
                (CONV2D_F32, args)
            }
            Kernel::Gemm { m, n, k, a, .. } => {
                let args = vec![
                    Arg::Buffer(*a),
                    Arg::Buffer(weights_param),
                    buffer_or_out(fused.col_bias, flags::BIAS),
                    buffer_or_out(fused.residual, flags::RESIDUAL),
                    Arg::Buffer(out),
                    Arg::Expr(Expr::index(isa.code())),
                    i(*m),
                    i(*n),
                    i(*k),
                ];
                (GEMM_F32, args)
            }
        };
        let (lo, hi) = fused.clamp.map_or((0.0, 0.0), |(lo, hi)| {
            flag_bits |= flags::CLAMP;
            (lo, hi)
        });
        let (activation_bit, [a0, a1]) = flags::of(activation);
        flag_bits |= activation_bit;
        args.extend([
            Arg::Expr(Expr::index(flag_bits)),
            Arg::Expr(Expr::float(f64::from(lo), DType::F32)),
            Arg::Expr(Expr::float(f64::from(hi), DType::F32)),
            Arg::Expr(Expr::Var(task)),
            i(config.tasks),
        ]);
        if routine == CONV2D_BLOCKED_F32 {
            let (program, operands) = match &tail {
                Some((program, operands)) => (Some(program), &operands[..]),
                None => (None, &[][..]),
            };
            let mut per_channel = 0;
            for k in 0..2 {
                let (buffer, kind) = operands.get(k).copied().unwrap_or((out, TailOperand::Full));
                args.push(Arg::Buffer(buffer));
                if kind == TailOperand::PerChannel {
                    per_channel |= 1 << k;
                }
            }
            let [lo, hi] = program.map_or([0, 0], Program::encode);
            args.extend([lo, hi, per_channel].map(|v| Arg::Expr(Expr::index(v))));
            let consts = program.map_or([a0, a1, 0.0, 0.0], Program::consts);
            args.extend(consts.map(|c| Arg::Expr(Expr::float(f64::from(c), DType::F32))));
            args.push(Arg::Buffer(scratch));
        } else {
            // The planar convolution's and the GEMM's activation constants.
            args.extend([a0, a1].map(|c| Arg::Expr(Expr::float(f64::from(c), DType::F32))));
        }
        (routine, args)
    };
    stmts.push(Stmt::For {
        var: task,
        extent: Expr::index(config.tasks as i64),
        kind: if config.tasks > 1 { ForKind::Parallel } else { ForKind::Serial },
        body: Box::new(Stmt::Evaluate(Call { callee: Callee::Extern(routine.into()), args })),
    });
    // A planar convolution's other tail with `exp` (ELU, Softplus, ...) runs as the elementwise
    // routine over its output, after every task of the kernel.
    let planar_map = match (&plan.kernel, &generic, routine) {
        (Kernel::Conv { geo, .. }, Some(e), CONV2D_F32) if activation.is_none() => {
            tail_of(f, e, plan.acc, out, &plan.out_loops)
                .filter(|(program, _)| program.ops().iter().any(|op| op.is_transcendental()))
                // The routine's per-row values are per plane: per channel only for one image.
                .filter(|(_, operands)| geo.batch == 1 || operands.iter().all(|(_, k)| *k == TailOperand::Full))
                .filter(|(_, operands)| operands_stored_as(f, main, blocked_tensors, operands, false))
                .map(|(program, operands)| {
                    let planes = (geo.batch * geo.out_channels, geo.out_h * geo.out_w);
                    crate::elementwise::map_in_place(out, &operands, program, planes)
                })
        }
        // So does a GEMM's (`log(a·b + bias)`, the bias added in the kernel), when its operands
        // are whole tensors (the routine's per-row values are not per column).
        (Kernel::Gemm { m, n, .. }, Some(e), GEMM_F32) if activation.is_none() => {
            tail_of(f, e, plan.acc, out, &plan.out_loops)
                .filter(|(program, _)| program.ops().iter().any(|op| op.is_transcendental()))
                .filter(|(_, operands)| operands.iter().all(|(_, k)| *k == TailOperand::Full))
                .filter(|(_, operands)| operands_stored_as(f, main, blocked_tensors, operands, false))
                .map(|(program, operands)| crate::elementwise::map_in_place(out, &operands, program, (*m, *n)))
        }
        _ => None,
    };
    if let Some(map) = planar_map {
        stmts.push(crate::elementwise::map_call(map, f, config));
        f.body = Stmt::Seq(stmts);
        return;
    }
    if let Some(e) = generic.filter(|_| tail.is_none() && activation.is_none()) {
        // The rest of the epilogue: the accumulator is the kernel's output (in place, unless
        // an integer product wrote its own buffer).
        let idx: Vec<Expr> = plan.out_loops.iter().map(|(v, _)| Expr::Var(*v)).collect();
        let here = Expr::load(raw, idx.clone());
        let acc = plan.acc;
        let value = e.map(&mut |x| if is_acc(&x, acc) { here.clone() } else { x });
        let store = Stmt::Store { buffer: out, indices: idx, value };
        stmts.push(plan.out_loops.iter().rev().fold(store, |body, &(var, n)| Stmt::For {
            var,
            extent: Expr::index(n),
            kind: ForKind::Serial,
            body: Box::new(body),
        }));
    }
    f.body = Stmt::Seq(stmts);
}

/// Whether a tail's whole-tensor operands are stored as its output is (channel-blocked or
/// not): the tail reads them at the output's offsets. Per-channel operands hold `C` values in
/// channel order either way. `main` binds `f`'s parameters to its buffers.
fn operands_stored_as(
    f: &PrimFunc,
    main: &PrimFunc,
    blocked_tensors: &HashSet<BufferId>,
    operands: &[(BufferId, TailOperand)],
    blocked: bool,
) -> bool {
    let mut args: Option<Vec<Arg>> = None;
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(Call { callee: Callee::Func(name), args: a }) = s
            && *name == f.name
        {
            args = Some(a.clone());
        }
    });
    let Some(args) = args else { return false };
    operands.iter().all(|&(b, kind)| {
        kind == TailOperand::PerChannel
            || match f.params.iter().position(|&p| p == b).and_then(|k| args.get(k)) {
                Some(Arg::Buffer(m)) => blocked_tensors.contains(m) == blocked,
                _ => false,
            }
    })
}

/// The activation a convolution or GEMM kernel computes that `e`, its store expression over
/// its accumulator `acc`, is: LeakyReLU, hard-swish, HardSigmoid, a sigmoid,
/// SiLU, tanh or GELU (erf's or tanh's form) as lowering writes them.
fn native_activation(e: &Expr, acc: BufferId) -> Option<Activation> {
    let float = |e: &Expr| match e {
        Expr::Float { value, .. } => Some(*value),
        _ => None,
    };
    fn binary(e: &Expr, want: BinOp) -> Option<(&Expr, &Expr)> {
        match e {
            Expr::Binary { op, lhs, rhs } if *op == want => Some((&**lhs, &**rhs)),
            _ => None,
        }
    }
    let x = |e: &Expr| is_acc(e, acc);
    let sigmoid_of_x = |e: &Expr| match e {
        // Swish's `sigmoid(1 · x)` too.
        Expr::Math { op: MathOp::Sigmoid, arg } => {
            x(arg) || binary(arg, BinOp::Mul).is_some_and(|(one, v)| float(one) == Some(1.0) && x(v))
        }
        _ => false,
    };
    if sigmoid_of_x(e) {
        return Some(Activation::Sigmoid);
    }
    if let Some((v, s)) = binary(e, BinOp::Mul)
        && ((x(v) && sigmoid_of_x(s)) || (x(s) && sigmoid_of_x(v)))
    {
        return Some(Activation::Silu);
    }
    if let Expr::Math { op: MathOp::Tanh, arg } = e
        && x(arg)
    {
        return Some(Activation::Tanh);
    }
    // GELU: `(0.5 · x) · (1 + erf(x · (1/√2)))`, constants compared as the f32 the kernel uses.
    let f32_of = |e: &Expr| float(e).map(|v| v as f32);
    if let Some((half_x, gate)) = binary(e, BinOp::Mul)
        && let Some((half, v)) = binary(half_x, BinOp::Mul)
        && let Some((one, erf)) = binary(gate, BinOp::Add)
        && let Expr::Math { op: MathOp::Erf, arg } = erf
        && let Some((w, scale)) = binary(arg, BinOp::Mul)
        && x(v)
        && x(w)
        && [f32_of(half), f32_of(one), f32_of(scale)] == [Some(0.5), Some(1.0), Some(std::f32::consts::FRAC_1_SQRT_2)]
    {
        return Some(Activation::Gelu);
    }
    // GELU's tanh form: `x · sigmoid(k · x + k3 · ((x · x) · x))`.
    if let Some((v, gate)) = binary(e, BinOp::Mul)
        && let Expr::Math { op: MathOp::Sigmoid, arg } = gate
        && let Some((linear, cubic)) = binary(arg, BinOp::Add)
        && let Some((k, w)) = binary(linear, BinOp::Mul)
        && let Some((k3, cube)) = binary(cubic, BinOp::Mul)
        && let Some((square, c)) = binary(cube, BinOp::Mul)
        && let Some((a, b)) = binary(square, BinOp::Mul)
        && [v, w, c, a, b].iter().all(|e| x(e))
        && [f32_of(k), f32_of(k3)] == heron_kernels::conv::GELU_TANH_K.map(Some)
    {
        return Some(Activation::GeluTanh);
    }
    match e {
        // `x < 0 ? x · alpha : x`.
        Expr::Select { cond, then, otherwise } => {
            let Expr::Cmp { op: CmpOp::Lt, lhs, rhs } = &**cond else { return None };
            let (scaled, alpha) = binary(then, BinOp::Mul)?;
            let alpha = float(alpha)?;
            (x(lhs) && float(rhs) == Some(0.0) && x(scaled) && x(otherwise))
                .then_some(Activation::LeakyRelu(alpha as f32))
        }
        // `min(max(alpha · x + beta, 0), 1)`, and `x · min(max(x / 6 + 0.5, 0), 1)`.
        _ if let Some((gate, one)) = binary(e, BinOp::Min)
            && let Some((gate, zero)) = binary(gate, BinOp::Max)
            && let Some((scaled, beta)) = binary(gate, BinOp::Add)
            && let Some((alpha, v)) = binary(scaled, BinOp::Mul) =>
        {
            let (alpha, beta) = (float(alpha)?, float(beta)?);
            (x(v) && float(one) == Some(1.0) && float(zero) == Some(0.0))
                .then_some(Activation::HardSigmoid { alpha: alpha as f32, beta: beta as f32 })
        }
        _ => {
            let (v, gate) = binary(e, BinOp::Mul)?;
            let (gate, one) = binary(gate, BinOp::Min)?;
            let (gate, zero) = binary(gate, BinOp::Max)?;
            let (gate, half) = binary(gate, BinOp::Add)?;
            let (w, six) = binary(gate, BinOp::Div)?;
            let constants = [float(one), float(zero), float(half), float(six)];
            (x(v) && x(w) && constants == [Some(1.0), Some(0.0), Some(0.5), Some(6.0)]).then_some(Activation::HardSwish)
        }
    }
}

/// The tail program of a convolution whose store expression is `e` over its accumulator
/// `acc`: the kernel's result, buffers shaped like the output, and values per channel.
fn tail_of(
    f: &PrimFunc,
    e: &Expr,
    acc: BufferId,
    out: BufferId,
    out_loops: &[(VarId, i64)],
) -> Option<(Program, Vec<(BufferId, TailOperand)>)> {
    // A convolution's per-channel operands; a GEMM's (two loops) are whole tensors only.
    let channel = match out_loops {
        &[_, channel, _, _] => Some(channel),
        [_, _] => None,
        _ => return None,
    };
    // Variables of loops that run once index nothing.
    let live = |(mut terms, constant): (HashMap<VarId, i64>, i64)| {
        terms.retain(|v, _| out_loops.iter().any(|(x, n)| x == v && *n > 1));
        (terms, constant)
    };
    let out_index: Vec<Expr> = out_loops.iter().map(|(v, _)| Expr::Var(*v)).collect();
    let (out_terms, _) = live(flat_offset(f, out, &out_index)?);
    let out_len = f.buffer(out).num_elements();
    let mut classify = |x: &Expr| {
        if is_acc(x, acc) {
            return Some(TailInput::Output);
        }
        let Expr::Load { buffer, indices } = x else { return None };
        let b = f.buffer(*buffer);
        if b.dtype != DType::F32 || *buffer == out || !f.params.contains(buffer) {
            return None;
        }
        let (terms, constant) = live(flat_offset(f, *buffer, indices)?);
        if constant != 0 {
            return None;
        }
        if b.num_elements() == out_len && terms == out_terms {
            return Some(TailInput::Operand(*buffer, TailOperand::Full));
        }
        let (c_var, channels) = channel?;
        let per_channel =
            if channels > 1 { terms.len() == 1 && coefficient(&terms, c_var) == 1 } else { terms.is_empty() };
        (per_channel && b.num_elements() as i64 == channels)
            .then_some(TailInput::Operand(*buffer, TailOperand::PerChannel))
    };
    crate::elementwise::match_tail(e, &mut classify)
}

/// The kernel routines for the loop-IR interpreter: the same kernels on copies of the buffers,
/// so modules with kernel calls are checked against the graph interpreter too.
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelExterns;

fn floats(arg: &ExternArg) -> Result<Vec<f32>, String> {
    match arg {
        ExternArg::Buffer(bytes) => {
            Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
        }
        _ => Err("expected a buffer".into()),
    }
}

fn ints(args: &[ExternArg]) -> Result<Vec<usize>, String> {
    args.iter()
        .map(|a| match a {
            ExternArg::Int(v) => usize::try_from(*v).map_err(|_| format!("negative argument {v}")),
            _ => Err("expected an integer".into()),
        })
        .collect()
}

fn float(arg: &ExternArg) -> Result<f32, String> {
    match arg {
        ExternArg::Float(v) => Ok(*v as f32),
        _ => Err("expected a float".into()),
    }
}

fn bytes(arg: &ExternArg) -> Result<&[u8], String> {
    match arg {
        ExternArg::Buffer(bytes) => Ok(bytes),
        _ => Err("expected a buffer".into()),
    }
}

/// The integer kernels' routines: `(input, weights, out, scratch, isa, dims..., signed, zero,
/// task, tasks)`.
fn call_q8(name: &str, args: &mut [ExternArg]) -> Result<Vec<usize>, String> {
    let dims = match (name, args.len()) {
        (CONV2D_Q8, 25) => 16,
        (GEMM_Q8, 12) => 3,
        _ => return Err(format!("no kernel routine '{name}' with {} arguments", args.len())),
    };
    let int = |a: &ExternArg| match a {
        ExternArg::Int(v) => Ok(*v),
        _ => Err("expected an integer".to_string()),
    };
    let isa = Int8Isa::from_code(int(&args[4])?).ok_or("unknown integer kernel ISA")?;
    let d = ints(&args[5..5 + dims])?;
    let signed = match int(&args[5 + dims])? {
        0 => false,
        1 => true,
        other => return Err(format!("the input's kind must be 0 (u8) or 1 (i8), got {other}")),
    };
    let zero = [i32::try_from(int(&args[6 + dims])?).map_err(|e| e.to_string())?];
    let t = ints(&args[7 + dims..9 + dims])?;
    let input = Bytes { data: bytes(&args[0])?, signed, zero: &zero };
    let weights = bytes(&args[1])?;
    let mut out: Vec<i32> =
        bytes(&args[2])?.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
    let result = if name == CONV2D_Q8 {
        let geo = Conv2d::from_dims(d[..16].try_into().expect("16 dimensions"));
        let mut scratch = vec![0; qgemm::conv_scratch_len(isa, &geo).map_err(|e| e.to_string())?];
        qgemm::conv_share(isa, &geo, input, weights, &mut out, &mut scratch, (t[0], t[1]))
    } else {
        let mut scratch = vec![0; qgemm::gemm_scratch_len(isa, d[2]).map_err(|e| e.to_string())?];
        qgemm::gemm_share(isa, (d[0], d[1], d[2]), input, weights, &mut out, &mut scratch, (t[0], t[1]))
    };
    result.map_err(|e| e.to_string())?;
    args[2] = ExternArg::Buffer(out.iter().flat_map(|v| v.to_le_bytes()).collect());
    Ok(vec![2])
}

impl Externs for KernelExterns {
    fn call(&self, name: &str, args: &mut [ExternArg]) -> Result<Vec<usize>, String> {
        let isa_of = |a: &ExternArg| match a {
            ExternArg::Int(code) => Isa::from_code(*code).ok_or_else(|| format!("unknown ISA code {code}")),
            _ => Err("expected an ISA code".to_string()),
        };
        let (out_pos, result) = match name {
            CONV2D_F32 if args.len() == 30 => {
                let isa = isa_of(&args[6])?;
                let d = ints(&args[7..24])?;
                let t = ints(&args[26..28])?;
                let geo = Conv2d::from_dims(d[..16].try_into().expect("16 dimensions"));
                let bits = d[16] as i64;
                let (x, w, bias, residual) =
                    (floats(&args[0])?, floats(&args[1])?, floats(&args[2])?, floats(&args[3])?);
                let mut out = floats(&args[4])?;
                let per_task = geo.scratch_len(isa).map_err(|e| e.to_string())?;
                let mut scratch = vec![0.0; per_task];
                let epilogue = ConvEpilogue {
                    bias: (bits & flags::BIAS != 0).then_some(&bias[..]),
                    residual: (bits & flags::RESIDUAL != 0).then_some(&residual[..]),
                    clamp: (bits & flags::CLAMP != 0).then_some((float(&args[24])?, float(&args[25])?)),
                    activation: flags::activation(bits, [float(&args[28])?, float(&args[29])?])?,
                    tail: None,
                };
                let r = conv2d_share(isa, &geo, &x, &w, &mut out, epilogue, &mut scratch, (t[0], t[1]));
                (4, r.map(|()| out))
            }
            CONV2D_BLOCKED_F32 if args.len() == 39 => {
                let isa = isa_of(&args[5])?;
                let d = ints(&args[6..25])?;
                let t = ints(&args[27..29])?;
                let (input, output) = blocked_layouts(d[17] as i64).ok_or("bad layout bits")?;
                let geo = Conv2d::from_dims(d[..16].try_into().expect("16 dimensions"));
                let conv = BlockedConv { geo, block: d[16], input, output };
                let bits = d[18] as i64;
                let (x, w, bias, residual) =
                    (floats(&args[0])?, floats(&args[1])?, floats(&args[2])?, floats(&args[3])?);
                let mut out = floats(&args[4])?;
                let operands = [floats(&args[29])?, floats(&args[30])?];
                let tail = match (&args[31], &args[32], &args[33]) {
                    (ExternArg::Int(0), ..) => None,
                    (ExternArg::Int(lo), ExternArg::Int(hi), ExternArg::Int(per_channel)) => {
                        let consts = [float(&args[34])?, float(&args[35])?, float(&args[36])?, float(&args[37])?];
                        let program = Program::decode([*lo, *hi], consts).map_err(|e| e.to_string())?;
                        let kind = |k: usize| {
                            if per_channel >> k & 1 == 1 { TailOperand::PerChannel } else { TailOperand::Full }
                        };
                        Some(Tail {
                            program,
                            operands: [Some((&operands[0][..], kind(0))), Some((&operands[1][..], kind(1)))],
                        })
                    }
                    _ => return Err("expected the tail program's words".into()),
                };
                let epilogue = ConvEpilogue {
                    bias: (bits & flags::BIAS != 0).then_some(&bias[..]),
                    residual: (bits & flags::RESIDUAL != 0).then_some(&residual[..]),
                    clamp: (bits & flags::CLAMP != 0).then_some((float(&args[25])?, float(&args[26])?)),
                    activation: flags::activation(bits, [float(&args[34])?, float(&args[35])?])?,
                    tail,
                };
                let mut scratch = vec![0.0; conv.scratch_len().map_err(|e| e.to_string())?];
                let r = heron_kernels::blocked::conv_share(
                    isa,
                    &conv,
                    &x,
                    &w,
                    &mut out,
                    epilogue,
                    &mut scratch,
                    (t[0], t[1]),
                );
                (4, r.map(|()| out))
            }
            GEMM_F32 if args.len() == 16 => {
                let isa = isa_of(&args[5])?;
                let d = ints(&args[6..10])?;
                let t = ints(&args[12..14])?;
                let (m, n, k, bits) = (d[0], d[1], d[2], d[3] as i64);
                let (a, b, bias, residual) =
                    (floats(&args[0])?, floats(&args[1])?, floats(&args[2])?, floats(&args[3])?);
                let mut c = floats(&args[4])?;
                let epilogue = gemm::Epilogue {
                    bias: (bits & flags::BIAS != 0).then_some(&bias[..]),
                    residual: (bits & flags::RESIDUAL != 0).then_some((&residual[..], n)),
                    clamp: (bits & flags::CLAMP != 0).then_some((float(&args[10])?, float(&args[11])?)),
                    activation: flags::activation(bits, [float(&args[14])?, float(&args[15])?])?,
                };
                let r = gemm::sgemm_share(isa, (m, n, k), (&a, k), &b, (&mut c, n), epilogue, (t[0], t[1]));
                (4, r.map(|()| c))
            }
            MAXPOOL2D_F32 if args.len() == 19 => {
                let isa = isa_of(&args[2])?;
                let d = ints(&args[3..19])?;
                let geo = window_from_dims(d[..14].try_into().expect("14 dimensions"));
                let x = floats(&args[0])?;
                let mut out = floats(&args[1])?;
                let r = max_pool2d_share(isa, &geo, &x, &mut out, (d[14], d[15]));
                (1, r.map(|()| out))
            }
            MAXPOOL2D_BLOCKED_F32 | AVGPOOL2D_BLOCKED_F32 => {
                let (kind, rest) = match (name, args.len()) {
                    (MAXPOOL2D_BLOCKED_F32, 21) => (PoolKind::Max, 17),
                    (AVGPOOL2D_BLOCKED_F32, 24) => {
                        let d = ints(&args[17..20])?;
                        let divisor = match d[0] {
                            0 => Divisor::Inside,
                            1 => Divisor::Padded { end: (d[1], d[2]) },
                            _ => return Err("bad average divisor".into()),
                        };
                        (PoolKind::Average(divisor), 20)
                    }
                    _ => return Err(format!("no kernel routine '{name}' with {} arguments", args.len())),
                };
                let isa = isa_of(&args[2])?;
                let d = ints(&args[3..17])?;
                let geo = window_from_dims(d[..].try_into().expect("14 dimensions"));
                let t = ints(&args[rest..rest + 4])?;
                let (_, output) = blocked_layouts(t[1] as i64).ok_or("bad layout bits")?;
                let x = floats(&args[0])?;
                let mut out = floats(&args[1])?;
                let r = pool2d_blocked_share(isa, &geo, kind, t[0], output, &x, &mut out, (t[2], t[3]));
                (1, r.map(|()| out))
            }
            MAP_F32 if args.len() == 16 => {
                let isa = isa_of(&args[4])?;
                let d = ints(&args[5..8])?;
                let words = match (&args[8], &args[9]) {
                    (ExternArg::Int(lo), ExternArg::Int(hi)) => [*lo, *hi],
                    _ => return Err("expected the program's two words".into()),
                };
                let consts = [float(&args[10])?, float(&args[11])?, float(&args[12])?, float(&args[13])?];
                let t = ints(&args[14..16])?;
                let program = Program::decode(words, consts).map_err(|e| e.to_string())?;
                let (rows, cols, per_row) = (d[0], d[1], d[2]);
                let inputs = [floats(&args[1])?, floats(&args[2])?, floats(&args[3])?];
                let operands: Vec<(&[f32], Operand)> = inputs
                    .iter()
                    .enumerate()
                    .map(|(k, v)| (&v[..], if per_row >> k & 1 == 1 { Operand::PerRow } else { Operand::Full }))
                    .collect();
                let mut out = floats(&args[0])?;
                let r = map_share(isa, &program, &operands, &mut out, (rows, cols), (t[0], t[1]));
                (0, r.map(|()| out))
            }
            SOFTMAX_F32 if args.len() == 9 => {
                let isa = isa_of(&args[2])?;
                let d = ints(&args[3..9])?;
                let log = match d[3] {
                    0 => false,
                    1 => true,
                    other => return Err(format!("log flag {other} is neither 0 nor 1")),
                };
                let shape = SoftmaxShape { outer: d[0], n: d[1], inner: d[2], log };
                let x = floats(&args[1])?;
                let mut out = floats(&args[0])?;
                let r = softmax_share(isa, shape, &x, &mut out, (d[4], d[5]));
                (0, r.map(|()| out))
            }
            CONV2D_Q8 | GEMM_Q8 => return call_q8(name, args),
            _ => return Err(format!("no kernel routine '{name}' with {} arguments", args.len())),
        };
        let out = result.map_err(|e| e.to_string())?;
        args[out_pos] = ExternArg::Buffer(out.iter().flat_map(|v| v.to_le_bytes()).collect());
        Ok(vec![out_pos])
    }
}
