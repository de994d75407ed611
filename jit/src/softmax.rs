//! The softmax pass of the CPU target: a function that is the loop nest lowering writes for
//! `Softmax` or `LogSoftmax` over an `[outer, n, inner]` f32 view (a maximum, a sum of `exp`,
//! then the normalized output, per line) becomes a call of the kernels' softmax routine
//! (`call extern "heron_softmax_f32"(...)`, shown at `--stage target`), which takes the three
//! passes on full-width vectors instead of generated code's one scalar `exp` at a time.

use heron_ir::DType;
use heron_ir::loop_ir::{
    Arg, BinOp, BufferId, Call, Callee, Expr, ForKind, MathOp, PrimFunc, Scope, Stmt, VarDecl, VarId,
};
use heron_kernels::abi::SOFTMAX_F32;
use heron_kernels::softmax::SoftmaxShape;

use crate::kernels::KernelConfig;

/// Elements below which a call runs as one task.
const ELEMENTS_PER_TASK: usize = 4096;

pub(crate) struct SoftmaxPlan {
    input: BufferId,
    out: BufferId,
    shape: SoftmaxShape,
}

/// The plan for `f` if its body is lowering's softmax nest:
///
/// ```text
/// allocate %max, %sum (local f32)
/// for o0 in 0..outer { for o1 in 0..inner {
///   max = -inf;  for l { max = max(max, x[o0, l, o1]) }
///   sum = 0;     for l { sum = sum + exp(x[o0, l, o1] - max) }
///   for l { out[o0, l, o1] = exp(x[o0, l, o1] - max) / sum }      (softmax)
///   for l { out[o0, l, o1] = (x[o0, l, o1] - max) - log(sum) }    (log-softmax)
/// } }
/// ```
pub(crate) fn match_softmax(f: &PrimFunc) -> Option<SoftmaxPlan> {
    let Stmt::Seq(items) = &f.body else { return None };
    let [Stmt::Allocate { buffer: mx, .. }, Stmt::Allocate { buffer: sum, .. }, nest] = &items[..] else {
        return None;
    };
    let scalar = |b: BufferId| {
        let buf = f.buffer(b);
        buf.scope == Scope::Local && buf.dtype == DType::F32 && buf.shape == [1]
    };
    if !scalar(*mx) || !scalar(*sum) {
        return None;
    }
    let (loops, body) = crate::int8::peel(nest);
    let [(o0, outer), (o1, inner)] = loops[..] else { return None };
    let Stmt::Seq(steps) = body else { return None };
    let [init_max, find_max, init_sum, exp_sum, write] = &steps[..] else { return None };
    let at =
        |b: BufferId, l: VarId| Expr::Load { buffer: b, indices: vec![Expr::Var(o0), Expr::Var(l), Expr::Var(o1)] };
    let cell = |b: BufferId| Expr::Load { buffer: b, indices: vec![Expr::index(0)] };
    let set = |s: &Stmt, b: BufferId, value: &Expr| matches!(s, Stmt::Store { buffer, indices, value: v } if *buffer == b && indices == &[Expr::index(0)] && v == value);
    if !set(init_max, *mx, &Expr::float(f64::NEG_INFINITY, DType::F32))
        || !set(init_sum, *sum, &Expr::float(0.0, DType::F32))
    {
        return None;
    }
    // `max = max(max, x[o0, l, o1])` names the input.
    let (l, n, step) = line(find_max)?;
    let Stmt::Store { value: Expr::Binary { op: BinOp::Max, rhs, .. }, .. } = step else { return None };
    let Expr::Load { buffer: input, .. } = &**rhs else { return None };
    let input = *input;
    if !set(step, *mx, &Expr::binary(BinOp::Max, cell(*mx), at(input, l))) {
        return None;
    }
    let shifted = |l: VarId| Expr::binary(BinOp::Sub, at(input, l), cell(*mx));
    let (l, n_sum, step) = line(exp_sum)?;
    let exp_term = Expr::binary(BinOp::Add, cell(*sum), Expr::math(MathOp::Exp, shifted(l)));
    if n_sum != n || !set(step, *sum, &exp_term) {
        return None;
    }
    let (l, n_write, step) = line(write)?;
    let Stmt::Store { buffer: out, indices, value } = step else { return None };
    let softmax = Expr::binary(BinOp::Div, Expr::math(MathOp::Exp, shifted(l)), cell(*sum));
    let log_softmax = Expr::binary(BinOp::Sub, shifted(l), Expr::math(MathOp::Log, cell(*sum)));
    let log = match value {
        v if *v == softmax => false,
        v if *v == log_softmax => true,
        _ => return None,
    };
    let want = [Expr::Var(o0), Expr::Var(l), Expr::Var(o1)];
    let [outer, n, inner] = [outer, n, inner].map(|v| usize::try_from(v).ok());
    let shape = SoftmaxShape { outer: outer?, n: n?, inner: inner?, log };
    let global = |b: BufferId| {
        let buf = f.buffer(b);
        f.params.contains(&b) && buf.dtype == DType::F32 && buf.shape == [shape.outer, shape.n, shape.inner]
    };
    (n_write as usize == shape.n && *indices == want && *out != input && global(input) && global(*out))
        .then_some(SoftmaxPlan { input, out: *out, shape })
}

/// A serial loop over a line: its variable, extent and body.
fn line(s: &Stmt) -> Option<(VarId, i64, &Stmt)> {
    match s {
        Stmt::For { var, extent, kind: ForKind::Serial, body } => Some((*var, extent.as_int()?, &**body)),
        _ => None,
    }
}

/// Replaces `f`'s body with the routine's call, in a parallel loop over tasks.
pub(crate) fn apply_softmax(plan: SoftmaxPlan, f: &mut PrimFunc, config: KernelConfig) {
    let SoftmaxPlan { input, out, shape } = plan;
    f.vars.push(VarDecl { name: "task".into(), dtype: DType::I64 });
    let task = VarId(f.vars.len() as u32 - 1);
    let elements = shape.elements().unwrap_or(usize::MAX);
    let tasks = config.with_shares().tasks.min(shape.units()).min((elements / ELEMENTS_PER_TASK).max(1)).max(1);
    let int = |v: usize| Arg::Expr(Expr::index(v as i64));
    let args = vec![
        Arg::Buffer(out),
        Arg::Buffer(input),
        Arg::Expr(Expr::index(config.isa.code())),
        int(shape.outer),
        int(shape.n),
        int(shape.inner),
        int(usize::from(shape.log)),
        Arg::Expr(Expr::Var(task)),
        int(tasks),
    ];
    f.body = Stmt::Seq(vec![Stmt::For {
        var: task,
        extent: Expr::index(tasks as i64),
        kind: if tasks > 1 { ForKind::Parallel } else { ForKind::Serial },
        body: Box::new(Stmt::Evaluate(Call { callee: Callee::Extern(SOFTMAX_F32.into()), args })),
    }]);
}
