//! 2-D pooling nests as kernel calls: a max pool as lowering emits it runs
//! `heron_maxpool2d_f32` (planar) or `heron_maxpool2d_blocked_f32`; an average pool runs
//! `heron_avgpool2d_blocked_f32` when its input is channel-blocked ([`crate::blocking`]) and
//! stays generated code otherwise (whose vectors along the output row serve a planar input).
//! Both match the lowered nest after the simplifier dropped the bounds tests it proved, and
//! read the window's geometry (a depthwise convolution's, see `heron_kernels::pool`) from the
//! tap's index expressions.

use std::collections::HashMap;

use heron_ir::DType;
use heron_ir::loop_ir::analysis::affine_terms;
use heron_ir::loop_ir::{Arg, BinOp, BufferId, Call, Callee, CmpOp, Expr, ForKind, PrimFunc, Stmt, VarDecl, VarId};
use heron_kernels::abi::{AVGPOOL2D_BLOCKED_F32, MAXPOOL2D_BLOCKED_F32, MAXPOOL2D_F32, layouts};
use heron_kernels::blocked::Layout;
use heron_kernels::conv::Conv2d;
use heron_kernels::pool::{Divisor, PoolKind, window_dims, window_from_dims};

use crate::int8::peel;
use crate::kernels::KernelConfig;

/// A pool nest's window, kind, input and output.
pub(crate) struct PoolPlan {
    geo: Conv2d,
    pub kind: PoolKind,
    pub input: BufferId,
    pub out: BufferId,
}

/// A max pool nest (locals `acc` and `found`, every tap of a constant window visited with its
/// in-bounds test, the output stored unchanged) or an f32 average pool nest (locals `sum` and
/// `count`, the count an f32, every tap visited, the mean stored unchanged).
pub(crate) fn match_pool(f: &PrimFunc) -> Option<PoolPlan> {
    let Stmt::Seq(items) = &f.body else { return None };
    let [Stmt::Allocate { buffer: first, .. }, Stmt::Allocate { buffer: second, .. }, nest] = &items[..] else {
        return None;
    };
    let (out_loops, body) = peel(nest);
    let Stmt::Seq(parts) = body else { return None };
    let [init_first, init_second, reduce, store] = &parts[..] else { return None };
    let &[(n, batch), (c, channels), (oy, oh), (ox, ow)] = &out_loops[..] else { return None };
    let (red_loops, red_body) = peel(reduce);
    let &[(r, kh), (s, kw)] = &red_loops[..] else { return None };
    let Stmt::Store { buffer: out, indices: out_idx, value: stored } = store else { return None };
    let o = [n, c, oy, ox].map(Expr::Var);
    if *out_idx != o {
        return None;
    }
    // A max pool allocates `acc` then `found` and sets `found` first; an average pool `sum`
    // then `count`.
    let (kind, load, taps) = if *init_first == set(*second, Expr::bool(false))
        && *init_second == set(*first, Expr::float(f64::NEG_INFINITY, DType::F32))
        && *stored == get(*first)
    {
        let (load, bounds) = max_taps(red_body, *first, *second)?;
        (PoolKind::Max, load, Taps { inside: bounds, padded: None })
    } else if *init_first == set(*first, Expr::float(0.0, DType::F32))
        && *init_second == set(*second, Expr::float(0.0, DType::F32))
        && *stored == mean(*first, *second)
    {
        let (load, taps) = average_taps(red_body, *first, *second)?;
        (PoolKind::Average(Divisor::Inside), load, taps)
    } else {
        return None;
    };
    let Expr::Load { buffer: input, indices } = load else { return None };
    let (input, out) = (*input, *out);
    let [b, ch, in_h, in_w] = <[usize; 4]>::try_from(f.buffer(input).shape.as_slice()).ok()?;
    let [i0, i1, y, x] = &indices[..] else { return None };
    if *i0 != o[0] || *i1 != o[1] {
        return None;
    }
    // A tap's position `o·stride + k·dilation − pad`: (stride, dilation, pad).
    let (y_terms, x_terms) = (affine_terms(unclamped(y))?, affine_terms(unclamped(x))?);
    let window = |(terms, constant): &(HashMap<VarId, i64>, i64), o: VarId, k: VarId| {
        let (stride, dilation) = (*terms.get(&o)?, *terms.get(&k)?);
        (terms.len() == 2).then_some(())?;
        Some((usize::try_from(stride).ok()?, usize::try_from(dilation).ok()?, usize::try_from(-constant).ok()?))
    };
    let ((sh, dh, pt), (sw, dw, pl)) = (window(&y_terms, oy, r)?, window(&x_terms, ox, s)?);
    let size = |v: i64| usize::try_from(v).ok();
    let (oh, ow, kh, kw) = (size(oh)?, size(ow)?, size(kh)?, size(kw)?);
    let geo = window_from_dims([b, ch, in_h, in_w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl]);
    let f32_param = |b: BufferId| f.params.contains(&b) && f.buffer(b).dtype == DType::F32;
    if !f32_param(input)
        || !f32_param(out)
        || f.buffer(out).shape != [b, ch, geo.out_h, geo.out_w]
        || (size(batch)?, size(channels)?) != (b, ch)
        || heron_kernels::pool::check(&geo).is_err()
    {
        return None;
    }
    let positions = [&y_terms, &x_terms];
    // The bounds left are tests `position >= 0` and `position < extent` of the two positions;
    // each one missing must hold for every tap (the simplifier proved it).
    let mut tested = [false; 4];
    for e in conjuncts(taps.inside) {
        let Expr::Cmp { op, lhs, rhs } = e else { return None };
        let terms = affine_terms(lhs)?;
        let axis = positions.iter().position(|t| **t == terms)?;
        match (op, rhs.as_int()?) {
            (CmpOp::Ge, 0) => tested[2 * axis] = true,
            (CmpOp::Lt, end) if size(end)? == [in_h, in_w][axis] => tested[2 * axis + 1] = true,
            _ => return None,
        }
    }
    // The last tap's position past the padding start, plus one: where a window ends.
    let reach = |o: usize, stride: usize, k: usize, dilation: usize| (o - 1) * stride + (k - 1) * dilation + 1;
    let reach = [reach(geo.out_h, sh, geo.kernel.0, dh), reach(geo.out_w, sw, geo.kernel.1, dw)];
    let always = [pt == 0, reach[0] <= in_h + pt, pl == 0, reach[1] <= in_w + pl];
    if !tested.iter().zip(always).all(|(&t, a)| t || a) {
        return None;
    }
    // With `count_include_pad`, the taps that count also outside the input: those before the
    // padded input's end, each test `position < extent + pad_end` (missing where every tap
    // passes it).
    let kind = match taps.padded {
        None => kind,
        Some(padded) => {
            let mut end = [reach[0].max(in_h + pt), reach[1].max(in_w + pl)];
            for e in conjuncts(padded) {
                let Expr::Cmp { op: CmpOp::Lt, lhs, rhs } = e else { return None };
                let terms = affine_terms(lhs)?;
                let axis = positions.iter().position(|t| **t == terms)?;
                // In the padded input's coordinates: past the leading pad. The kernel counts
                // rows and columns apart, right only while the inside taps all count.
                let bound = size(rhs.as_int()?)?.checked_add([pt, pl][axis])?;
                end[axis] = end[axis].min(bound);
            }
            if end[0] < in_h + pt || end[1] < in_w + pl {
                return None;
            }
            PoolKind::Average(Divisor::Padded { end: (end[0], end[1]) })
        }
    };
    Some(PoolPlan { geo, kind, input, out })
}

/// What an average pool's taps test: the bounds of a tap inside the input, and with
/// `count_include_pad` those of a tap the count takes outside it (`Some(None)` when the
/// simplifier proved every such tap counts).
struct Taps<'a> {
    inside: Option<&'a Expr>,
    padded: Option<Option<&'a Expr>>,
}

/// The conjuncts of `e` (none when there is no test).
fn conjuncts(e: Option<&Expr>) -> Vec<&Expr> {
    let (mut out, mut stack) = (Vec::new(), e.into_iter().collect::<Vec<_>>());
    while let Some(e) = stack.pop() {
        match e {
            Expr::Binary { op: BinOp::And, lhs, rhs } => stack.extend([&**lhs, &**rhs]),
            other => out.push(other),
        }
    }
    out
}

fn get(b: BufferId) -> Expr {
    Expr::load(b, vec![Expr::index(0)])
}

fn set(b: BufferId, v: Expr) -> Stmt {
    Stmt::Store { buffer: b, indices: vec![Expr::index(0)], value: v }
}

/// `select(count == 0, 0, sum / count)`.
fn mean(sum: BufferId, count: BufferId) -> Expr {
    let zero = Expr::float(0.0, DType::F32);
    Expr::select(Expr::cmp(CmpOp::Eq, get(count), zero.clone()), zero, Expr::binary(BinOp::Div, get(sum), get(count)))
}

/// A max pool's tap, `if (bounds && (!found || x > acc)) { acc = x; found = true }` (`bounds`
/// possibly gone): the load and the bounds.
fn max_taps(body: &Stmt, acc: BufferId, found: BufferId) -> Option<(&Expr, Option<&Expr>)> {
    let Stmt::If { cond, then, otherwise: None } = body else { return None };
    let (bounds, better) = match cond {
        Expr::Binary { op: BinOp::And, lhs, rhs } => (Some(&**lhs), &**rhs),
        other => (None, other),
    };
    let Expr::Binary { op: BinOp::Or, lhs: not_found, rhs: greater } = better else { return None };
    let Expr::Cmp { op: CmpOp::Gt, lhs: load, rhs: current } = &**greater else { return None };
    let taken = Stmt::Seq(vec![set(acc, (**load).clone()), set(found, Expr::bool(true))]);
    (**not_found == Expr::Not(Box::new(get(found))) && **current == get(acc) && **then == taken)
        .then_some((&**load, bounds))
}

/// An average pool's tap: `sum += x; count += 1`, under `if (bounds)` when some tap may lie
/// outside the input, with `else if (padded) count += 1` (`padded` possibly gone) for
/// `count_include_pad`: the load and the tests.
fn average_taps(body: &Stmt, sum: BufferId, count: BufferId) -> Option<(&Expr, Taps<'_>)> {
    let counted = set(count, Expr::binary(BinOp::Add, get(count), Expr::float(1.0, DType::F32)));
    fn summed<'a>(s: &'a Stmt, sum: BufferId, counted: &Stmt) -> Option<&'a Expr> {
        let Stmt::Seq(steps) = s else { return None };
        let [Stmt::Store { value: Expr::Binary { op: BinOp::Add, rhs: load, .. }, .. }, step] = &steps[..] else {
            return None;
        };
        (steps[0] == set(sum, Expr::binary(BinOp::Add, get(sum), (**load).clone())) && step == counted)
            .then_some(&**load)
    }
    if let Some(load) = summed(body, sum, &counted) {
        return Some((load, Taps { inside: None, padded: None }));
    }
    let Stmt::If { cond, then, otherwise } = body else { return None };
    let load = summed(then, sum, &counted)?;
    let padded = match otherwise.as_deref() {
        None => None,
        Some(s) if *s == counted => Some(None),
        Some(Stmt::If { cond, then, otherwise: None }) if **then == counted => Some(Some(cond)),
        Some(_) => return None,
    };
    Some((load, Taps { inside: Some(cond), padded }))
}

/// `e` without `min(·, constant)` / `max(·, constant)` wrappers (the clamps of a tap's index).
fn unclamped(mut e: &Expr) -> &Expr {
    while let Expr::Binary { op: BinOp::Min | BinOp::Max, lhs, rhs } = e
        && rhs.as_int().is_some()
    {
        e = lhs;
    }
    e
}

/// The pool nest becomes a parallel loop of kernel calls: over a channel-blocked input when
/// `blocked_output` names the output's layout; a max pool otherwise over planar planes, an
/// average pool then stays as it is.
pub(crate) fn apply_pool(plan: PoolPlan, f: &mut PrimFunc, config: KernelConfig, blocked_output: Option<Layout>) {
    let config = config.with_shares();
    let PoolPlan { geo, kind, input, out } = plan;
    let i = |v: usize| Arg::Expr(Expr::index(v as i64));
    let mut args = vec![Arg::Buffer(input), Arg::Buffer(out), Arg::Expr(Expr::index(config.isa.code()))];
    args.extend(window_dims(&geo).map(i));
    let routine = match (kind, blocked_output) {
        (PoolKind::Max, None) => MAXPOOL2D_F32,
        (PoolKind::Average(_), None) => return,
        (kind, Some(output)) => {
            if let PoolKind::Average(divisor) = kind {
                let (include, (end_h, end_w)) = match divisor {
                    Divisor::Inside => (0, (0, 0)),
                    Divisor::Padded { end } => (1, end),
                };
                args.extend([i(include), i(end_h), i(end_w)]);
            }
            let bits = layouts::INPUT | if output == Layout::Blocked { layouts::OUTPUT } else { 0 };
            args.extend([i(heron_kernels::blocked::block_for(config.isa)), Arg::Expr(Expr::index(bits))]);
            if kind == PoolKind::Max { MAXPOOL2D_BLOCKED_F32 } else { AVGPOOL2D_BLOCKED_F32 }
        }
    };
    f.vars.push(VarDecl { name: "task".into(), dtype: DType::I64 });
    let task = VarId(f.vars.len() as u32 - 1);
    args.extend([Arg::Expr(Expr::Var(task)), i(config.tasks)]);
    f.body = Stmt::Seq(vec![Stmt::For {
        var: task,
        extent: Expr::index(config.tasks as i64),
        kind: if config.tasks > 1 { ForKind::Parallel } else { ForKind::Serial },
        body: Box::new(Stmt::Evaluate(Call { callee: Callee::Extern(routine.into()), args })),
    }]);
}
