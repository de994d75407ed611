//! The elementwise pass of the CPU target: a function that is one perfect nest storing
//! `out[i0, .., in] = f(loads...)` where `f` takes an `exp` or a sigmoid — SiLU, sigmoid, a
//! squeeze-excitation gate — becomes a call of the kernels' elementwise routine
//! (`call extern "heron_map_f32"(...)`, shown at `--stage target`), which evaluates `f` as a
//! small program on full-width vectors (`heron_kernels::elementwise`). `f` may read up to three
//! f32 buffers, each either element for element (the output's shape) or one value per row of a
//! `rows × cols` view of the output (trailing axes broadcast: a per-channel value over a
//! plane), up to four literals, and `+ - × ÷ min max`, `exp`, `sigmoid`, `sqrt`, `abs`; any
//! other function stays generated code.

use heron_ir::DType;
use heron_ir::loop_ir::{Arg, BinOp, BufferId, Call, Callee, Expr, ForKind, MathOp, PrimFunc, Stmt, VarDecl, VarId};
use heron_kernels::abi::MAP_F32;
use heron_kernels::elementwise::{MAX_CONSTS, MAX_INPUTS, MAX_OPS, MapOp, Operand, Program};

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

/// Builds the program while walking the stored expression.
struct Builder<'f> {
    f: &'f PrimFunc,
    loops: &'f [(VarId, i64)],
    ops: Vec<MapOp>,
    consts: Vec<f32>,
    inputs: Vec<(BufferId, Operand)>,
    /// Where per-row inputs start broadcasting (the first axis of `cols`).
    split: Option<usize>,
}

impl Builder<'_> {
    /// Appends `op` (the stack depth is checked when the program is made).
    fn push(&mut self, op: MapOp) -> Option<()> {
        (self.ops.len() < MAX_OPS).then(|| self.ops.push(op))
    }

    fn expr(&mut self, e: &Expr) -> Option<()> {
        match e {
            Expr::Float { value, dtype: DType::F32 } => {
                let v = *value as f32;
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
            Expr::Load { buffer, indices } => {
                let operand = self.operand(*buffer, indices)?;
                let k = match self.inputs.iter().position(|i| *i == (*buffer, operand)) {
                    Some(k) => k,
                    None if self.inputs.len() < MAX_INPUTS => {
                        self.inputs.push((*buffer, operand));
                        self.inputs.len() - 1
                    }
                    None => return None,
                };
                self.push(MapOp::Input(k as u8))
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
                self.expr(lhs)?;
                self.expr(rhs)?;
                self.push(op)
            }
            Expr::Math { op, arg } => {
                let op = match op {
                    MathOp::Exp => MapOp::Exp,
                    MathOp::Sigmoid => MapOp::Sigmoid,
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

    /// How `buffer[indices]` lines up with the output: every index the loop variable of its
    /// axis (or anything on an axis of extent 1), or that up to a split and 0 on the trailing
    /// axes where the buffer has extent 1.
    fn operand(&mut self, buffer: BufferId, indices: &[Expr]) -> Option<Operand> {
        let b = self.f.buffer(buffer);
        if b.dtype != DType::F32 || indices.len() != self.loops.len() || b.shape.len() != self.loops.len() {
            return None;
        }
        let mut first_broadcast = None;
        for (j, ((idx, &(var, extent)), &dim)) in indices.iter().zip(self.loops).zip(&b.shape).enumerate() {
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
        let Some(split) = first_broadcast else { return Some(Operand::Full) };
        if *self.split.get_or_insert(split) != split {
            return None;
        }
        Some(Operand::PerRow)
    }
}

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
    let mut builder =
        Builder { f, loops: &loops, ops: Vec::new(), consts: Vec::new(), inputs: Vec::new(), split: None };
    builder.expr(value)?;
    // Arithmetic alone runs as fast in generated code, whose values stay in registers; the
    // routine's stack machine wins where `exp` is (SiLU: measured 4x).
    let transcendental = builder.ops.iter().any(|op| matches!(op, MapOp::Exp | MapOp::Sigmoid));
    if builder.inputs.is_empty() || !transcendental {
        return None;
    }
    let program = Program::new(&builder.ops, &builder.consts).ok()?;
    // Without per-row inputs the whole output is one row.
    let split = builder.split.unwrap_or(0);
    let product =
        |axes: &[(VarId, i64)]| axes.iter().try_fold(1usize, |p, &(_, e)| p.checked_mul(usize::try_from(e).ok()?));
    let (rows, cols) = (product(&loops[..split])?, product(&loops[split..])?);
    Some(MapPlan { out: *out, inputs: builder.inputs, program, rows, cols })
}

/// Replaces `f`'s body with the routine's call, in a parallel loop over tasks.
pub(crate) fn apply_map(plan: MapPlan, f: &mut PrimFunc, config: KernelConfig) {
    let MapPlan { out, inputs, program, rows, cols } = plan;
    f.vars.push(VarDecl { name: "task".into(), dtype: DType::I64 });
    let task = VarId(f.vars.len() as u32 - 1);
    let tasks = config.tasks.min((rows.saturating_mul(cols) / ELEMENTS_PER_TASK).max(1));
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
    f.body = Stmt::Seq(vec![Stmt::For {
        var: task,
        extent: Expr::index(tasks as i64),
        kind: if tasks > 1 { ForKind::Parallel } else { ForKind::Serial },
        body: Box::new(Stmt::Evaluate(Call { callee: Callee::Extern(MAP_F32.into()), args })),
    }]);
}
