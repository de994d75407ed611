//! The elementwise pass of the CPU target: a function that is one perfect nest storing
//! `out[i0, .., in] = f(loads...)` where `f` takes an `exp`, a logarithm, a sigmoid, `tanh` or `erf` — SiLU,
//! sigmoid, a squeeze-excitation gate, GELU — or is a large arithmetic chain on a whole tensor
//! (ReLU, a clamp, hard-swish; see [`match_map`]) becomes a call of the kernels' elementwise
//! routine (`call extern "heron_map_f32"(...)`, shown at `--stage target`), which evaluates `f`
//! as a small program on full-width vectors (`heron_kernels::elementwise`). `f` may read up to
//! three f32 buffers, each either element for element (the output's shape; a buffer of lower
//! rank lines up with the trailing axes) or one value per row of a `rows × cols` view of the
//! output (trailing axes broadcast: a per-channel value over a plane), up to four literals, and
//! `+ - × ÷ min max`, `exp`, `ln`, `sigmoid`, `tanh`, `erf`, `sqrt`, `abs` and `tanh` of a softplus
//! (Mish); any other function stays generated code.

use heron_ir::DType;
use heron_ir::loop_ir::{
    Arg, BinOp, BufferId, Call, Callee, CmpOp, Expr, ForKind, MathOp, PrimFunc, Stmt, VarDecl, VarId,
};
use heron_kernels::abi::MAP_F32;
use heron_kernels::elementwise::{MAX_CONSTS, MAX_INPUTS, MAX_OPS, MapOp, Operand, Program, TailOperand};

use crate::int8::peel;
use crate::kernels::KernelConfig;

/// Elements below which a call runs as one task: splitting it would cost more than it saves.
const ELEMENTS_PER_TASK: usize = 4096;

pub(crate) struct MapPlan {
    out: BufferId,
    inputs: Vec<(BufferId, Operand)>,
    program: Program,
    rows: usize,
    cols: usize,
}

impl MapPlan {
    /// Whether the program is arithmetic alone: generated code computes it as fast, and keeps
    /// its tensors free to be channel-blocked between convolutions, unless it is large.
    pub(crate) fn arithmetic(&self) -> bool {
        !self.program.ops().iter().any(|op| op.is_transcendental())
    }
}

/// Builds a program while walking a stored expression: `classify` names the input a leaf of
/// the expression reads (a buffer load, or a kernel's accumulator), or refuses it.
struct Builder<'c, K> {
    ops: Vec<MapOp>,
    consts: Vec<f32>,
    inputs: Vec<K>,
    classify: &'c mut dyn FnMut(&Expr) -> Option<K>,
}

impl<K: PartialEq> Builder<'_, K> {
    /// Appends `op` (the stack depth is checked when the program is made).
    fn push(&mut self, op: MapOp) -> Option<()> {
        (self.ops.len() < MAX_OPS).then(|| self.ops.push(op))
    }

    fn expr(&mut self, e: &Expr) -> Option<()> {
        match e {
            Expr::Float { value, dtype: DType::F32 } => self.constant(*value as f32),
            Expr::Load { .. } => {
                let key = (self.classify)(e)?;
                let k = match self.inputs.iter().position(|i| *i == key) {
                    Some(k) => k,
                    None if self.inputs.len() < MAX_INPUTS => {
                        self.inputs.push(key);
                        self.inputs.len() - 1
                    }
                    None => return None,
                };
                self.push(MapOp::Input(k as u8))
            }
            // `a < b ? t : f` and the other orders (`>` and `>=` as `<` and `<=` swapped).
            Expr::Select { cond, then, otherwise } => {
                let Expr::Cmp { op, lhs, rhs } = &**cond else { return None };
                let (a, b, select) = match op {
                    CmpOp::Lt => (lhs, rhs, MapOp::LessSelect),
                    CmpOp::Le => (lhs, rhs, MapOp::LessEqSelect),
                    CmpOp::Gt => (rhs, lhs, MapOp::LessSelect),
                    CmpOp::Ge => (rhs, lhs, MapOp::LessEqSelect),
                    CmpOp::Eq | CmpOp::Ne => return None,
                };
                for x in [a, b, then, otherwise] {
                    self.expr(x)?;
                }
                self.push(select)
            }
            Expr::Binary { op, lhs, rhs } => {
                let op = match op {
                    BinOp::Add => MapOp::Add,
                    BinOp::Sub => MapOp::Sub,
                    BinOp::Mul => MapOp::Mul,
                    BinOp::Div => MapOp::Div,
                    BinOp::Min => MapOp::Min,
                    BinOp::Max => MapOp::Max,
                    _ => return None,
                };
                // A sum or product takes its deeper operand first, and a constant second: the
                // stack stays shallower, and `0.2 · x + 0.5` is a chain the routine keeps in
                // registers (`a + b`, `a · b` are the same bits either way round).
                let constant = |e: &Expr| matches!(e, Expr::Float { .. });
                let swap = matches!(op, MapOp::Add | MapOp::Mul)
                    && (depth(rhs) > depth(lhs) || (constant(lhs) && !constant(rhs)));
                let (first, second) = if swap { (rhs, lhs) } else { (lhs, rhs) };
                self.expr(first)?;
                self.expr(second)?;
                self.push(op)
            }
            Expr::Math { op: MathOp::Tanh, arg } if let Some(a) = softplus_of(arg) => {
                self.expr(a)?;
                self.push(MapOp::TanhSoftplus)
            }
            Expr::Math { op, arg } => {
                let op = match op {
                    MathOp::Exp => MapOp::Exp,
                    MathOp::Log => MapOp::Ln,
                    MathOp::Sigmoid => MapOp::Sigmoid,
                    MathOp::Tanh => MapOp::Tanh,
                    MathOp::Erf => MapOp::Erf,
                    MathOp::Sqrt => MapOp::Sqrt,
                    MathOp::Abs => MapOp::Abs,
                    _ => return None,
                };
                self.expr(arg)?;
                self.push(op)
            }
            _ => None,
        }
    }

    fn constant(&mut self, v: f32) -> Option<()> {
        let k = match self.consts.iter().position(|c| c.to_bits() == v.to_bits()) {
            Some(k) => k,
            None if self.consts.len() < MAX_CONSTS => {
                self.consts.push(v);
                self.consts.len() - 1
            }
            None => return None,
        };
        self.push(MapOp::Const(k as u8))
    }
}

/// `a` when `e` is `ln(e^a + 1)` (either order of the sum), as Mish's softplus lowers: `tanh` of
/// it is one of the routine's functions, computed without the logarithm.
fn softplus_of(e: &Expr) -> Option<&Expr> {
    let Expr::Math { op: MathOp::Log, arg } = e else { return None };
    let Expr::Binary { op: BinOp::Add, lhs, rhs } = &**arg else { return None };
    let one = |x: &Expr| matches!(x, Expr::Float { value, dtype: DType::F32 } if *value == 1.0);
    let exp = match (&**lhs, &**rhs) {
        (x, o) | (o, x) if one(o) => x,
        _ => return None,
    };
    match exp {
        Expr::Math { op: MathOp::Exp, arg } => Some(arg),
        _ => None,
    }
}

/// The stack depth evaluating `e` takes (as [`Builder::expr`] orders it; saturating, for what
/// it refuses).
fn depth(e: &Expr) -> usize {
    let above = |d: usize, n: usize| d.saturating_add(n);
    match e {
        Expr::Binary { op, lhs, rhs } => {
            let (l, r) = (depth(lhs), depth(rhs));
            if matches!(op, BinOp::Add | BinOp::Mul) { l.max(r).max(above(l.min(r), 1)) } else { l.max(above(r, 1)) }
        }
        Expr::Select { cond, then, otherwise } => match &**cond {
            Expr::Cmp { lhs, rhs, .. } => {
                depth(lhs).max(above(depth(rhs), 1)).max(above(depth(then), 2)).max(above(depth(otherwise), 3))
            }
            _ => usize::MAX,
        },
        // One step on `a`'s value (see `Builder::expr`).
        Expr::Math { op: MathOp::Tanh, arg } if let Some(a) = softplus_of(arg) => depth(a),
        Expr::Math { arg, .. } => above(depth(arg), 1),
        _ => 1,
    }
}

/// How `buffer[indices]` lines up with a map's output: every index the loop variable of its
/// axis (or anything on an axis of extent 1), or that up to a split (the first per-row input
/// fixes it in `split`) and 0 on the trailing axes where the buffer has extent 1.
fn map_operand(
    f: &PrimFunc,
    loops: &[(VarId, i64)],
    split: &mut Option<usize>,
    buffer: BufferId,
    indices: &[Expr],
) -> Option<Operand> {
    {
        let b = f.buffer(buffer);
        // A buffer of lower rank (a `[C, 1, 1]` scale) lines up with the trailing loops; the
        // leading ones must then be of extent 1.
        let leading = loops.len().checked_sub(indices.len())?;
        if b.dtype != DType::F32 || b.shape.len() != indices.len() || loops[..leading].iter().any(|&(_, e)| e != 1) {
            return None;
        }
        let mut first_broadcast = None;
        for (j, ((idx, &(var, extent)), &dim)) in indices.iter().zip(&loops[leading..]).zip(&b.shape).enumerate() {
            let j = j + leading;
            if extent == 1 {
                if dim != 1 || idx.as_int().is_some_and(|v| v != 0) {
                    return None;
                }
                continue;
            }
            match idx {
                Expr::Var(v) if *v == var && dim as i64 == extent && first_broadcast.is_none() => {}
                _ if idx.as_int() == Some(0) && dim == 1 => {
                    first_broadcast.get_or_insert(j);
                }
                _ => return None,
            }
        }
        let Some(first) = first_broadcast else { return Some(Operand::Full) };
        if *split.get_or_insert(first) != first {
            return None;
        }
        Some(Operand::PerRow)
    }
}

/// Elements from which an arithmetic chain runs as the routine (below, its call costs more
/// than generated code's narrower vectors: 1024 ReLUs take 0.2 us against 0.1).
const MIN_CHAIN_ELEMENTS: usize = 4096;

/// The plan for `f` if it is a single elementwise nest the routine computes.
pub(crate) fn match_map(f: &PrimFunc) -> Option<MapPlan> {
    let nest = match &f.body {
        Stmt::Seq(items) => match &items[..] {
            [nest] => nest,
            _ => return None,
        },
        nest => nest,
    };
    let (loops, body) = peel(nest);
    let Stmt::Store { buffer: out, indices, value } = body else { return None };
    let out_buffer = f.buffer(*out);
    let matches_loops = indices.len() == loops.len()
        && out_buffer.shape.len() == loops.len()
        && indices.iter().zip(&loops).zip(&out_buffer.shape).all(|((idx, &(var, extent)), &dim)| {
            dim as i64 == extent
                && (matches!(idx, Expr::Var(v) if *v == var) || (extent == 1 && idx.as_int() == Some(0)))
        });
    if out_buffer.dtype != DType::F32 || !matches_loops || loops.is_empty() {
        return None;
    }
    let mut split = None;
    let mut classify = |e: &Expr| match e {
        Expr::Load { buffer, indices } => {
            map_operand(f, &loops, &mut split, *buffer, indices).map(|operand| (*buffer, operand))
        }
        _ => None,
    };
    let mut builder = Builder { ops: Vec::new(), consts: Vec::new(), inputs: Vec::new(), classify: &mut classify };
    builder.expr(value)?;
    let (ops, consts, inputs) = (builder.ops, builder.consts, builder.inputs);
    // The routine's wide vectors win where `exp` is (SiLU: measured 4x).
    let transcendental = ops.iter().any(|op| op.is_transcendental());
    if inputs.is_empty() {
        return None;
    }
    let program = Program::new(&ops, &consts).ok()?;
    // Without per-row inputs the whole output is one row.
    let split = split.unwrap_or(0);
    let product =
        |axes: &[(VarId, i64)]| axes.iter().try_fold(1usize, |p, &(_, e)| p.checked_mul(usize::try_from(e).ok()?));
    let (rows, cols) = (product(&loops[..split])?, product(&loops[split..])?);
    // Arithmetic alone runs as fast in generated code on small tensors, whose values stay in
    // registers too; on large ones the routine's full-width vectors win where it keeps the
    // values in registers (a chain: ReLU, clamps, hard-swish; measured 1.2-1.6x), and lose to
    // its stack where it does not (LeakyReLU's select: 2.5x slower).
    // A chain from a per-row input would run on the routine's stack.
    let whole_start = program.chain_input().is_some_and(|k| inputs[usize::from(k)].1 == Operand::Full);
    let large_chain = whole_start && rows.checked_mul(cols)? >= MIN_CHAIN_ELEMENTS;
    (transcendental || large_chain).then_some(MapPlan { out: *out, inputs, program, rows, cols })
}

/// Replaces `f`'s body with the routine's call, in a parallel loop over tasks.
pub(crate) fn apply_map(plan: MapPlan, f: &mut PrimFunc, config: KernelConfig) {
    f.body = Stmt::Seq(vec![map_call(plan, f, config)]);
}

/// The routine's call for `plan`, in a parallel loop over tasks (a new variable of `f`).
pub(crate) fn map_call(plan: MapPlan, f: &mut PrimFunc, config: KernelConfig) -> Stmt {
    let MapPlan { out, inputs, program, rows, cols } = plan;
    f.vars.push(VarDecl { name: "task".into(), dtype: DType::I64 });
    let task = VarId(f.vars.len() as u32 - 1);
    // Shares as for the kernels without scratch: a pass after a convolution whose threads
    // ran at different speeds (a shared core) is balanced by the pool.
    let tasks = config.with_shares().tasks.min((rows.saturating_mul(cols) / ELEMENTS_PER_TASK).max(1));
    let int = |v: i64| Arg::Expr(Expr::index(v));
    let mut args = vec![Arg::Buffer(out)];
    let mut per_row = 0i64;
    for k in 0..MAX_INPUTS {
        let (buffer, operand) = inputs.get(k).copied().unwrap_or((out, Operand::Full));
        args.push(Arg::Buffer(buffer));
        if operand == Operand::PerRow {
            per_row |= 1 << k;
        }
    }
    let [ops_lo, ops_hi] = program.encode();
    args.extend([int(config.isa.code()), int(rows as i64), int(cols as i64), int(per_row), int(ops_lo), int(ops_hi)]);
    args.extend(program.consts().iter().map(|&c| Arg::Expr(Expr::float(f64::from(c), DType::F32))));
    args.extend([Arg::Expr(Expr::Var(task)), int(tasks as i64)]);
    Stmt::For {
        var: task,
        extent: Expr::index(tasks as i64),
        kind: if tasks > 1 { ForKind::Parallel } else { ForKind::Serial },
        body: Box::new(Stmt::Evaluate(Call { callee: Callee::Extern(MAP_F32.into()), args })),
    }
}

/// The elementwise routine running `program` (a tail program: input 0 the output) in place
/// over a planar `[N, C, H, W]` output of `rows = N·C` planes of `cols = H·W`, its operands
/// whole tensors or one value per channel (per plane: the routine's rows).
pub(crate) fn map_in_place(
    out: BufferId,
    operands: &[(BufferId, TailOperand)],
    program: Program,
    (rows, cols): (usize, usize),
) -> MapPlan {
    let mut inputs = vec![(out, Operand::Full)];
    inputs.extend(
        operands
            .iter()
            .map(|&(b, kind)| (b, if kind == TailOperand::PerChannel { Operand::PerRow } else { Operand::Full })),
    );
    MapPlan { out, inputs, program, rows, cols }
}

/// A leaf of a convolution's store expression, as its tail program reads it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TailInput {
    /// The kernel's result.
    Output,
    Operand(BufferId, TailOperand),
}

/// The tail program (`heron_kernels::elementwise::Tail`) computing `e`, a convolution's store
/// expression, over the kernel's result: what its own epilogue has no form for (ELU, PReLU,
/// a Swish, arithmetic with other tensors) runs on each of the kernel's tiles while they are
/// in cache, instead of generated code going over the whole output again. `classify` names each
/// leaf; `None` when `e` needs more than the program holds.
pub(crate) fn match_tail(
    e: &Expr,
    classify: &mut dyn FnMut(&Expr) -> Option<TailInput>,
) -> Option<(Program, Vec<(BufferId, TailOperand)>)> {
    let mut builder = Builder { ops: Vec::new(), consts: Vec::new(), inputs: vec![TailInput::Output], classify };
    builder.expr(e)?;
    let program = Program::new(&builder.ops, &builder.consts).ok()?;
    let operands = builder.inputs[1..]
        .iter()
        .map(|input| match input {
            TailInput::Operand(b, kind) => Some((*b, *kind)),
            TailInput::Output => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((program, operands))
}
