//! Loop nests of the indexing operators (Gather family, Scatter family, Slice, Expand, Tile),
//! running sums and TopK, normalization and the parametric activations.
//!
//! Indices read from tensors are used as they are (after counting negative ones from the
//! end): the verifier cannot prove them in range, so the code generators check those accesses
//! at run time and the loop-IR interpreter reports them.

use super::{Epi, Operand, acc_dtype, cast_to, elementwise, get, lit, local, loops, set};
use crate::dtype::DType;
use crate::loop_ir::build::{FuncBuilder, add, and, idx, in_range, lt, max, min, mul, sub};
use crate::loop_ir::{BinOp, CmpOp, Expr, MathOp, Stmt};
use crate::op::{Activation, GridMode, GridPadding, ScatterReduction, SliceAxis};

/// The index stored at `at` in `indices`, as i64, counted from the end of an axis of `n` when
/// negative.
fn index_value(indices: &Operand, at: Vec<Expr>, n: usize) -> Expr {
    let v = Expr::cast(DType::I64, indices.load(at));
    Expr::select(lt(v.clone(), idx(0)), add(v.clone(), idx(n as i64)), v)
}

pub(super) fn gather(
    fb: &mut FuncBuilder,
    data: &Operand,
    indices: &Operand,
    axis: usize,
    out: &Operand,
    epi: &Epi,
) -> Stmt {
    let r = indices.shape.len();
    elementwise(fb, out, epi, |_, o| {
        let mut src = o[..axis].to_vec();
        src.push(index_value(indices, o[axis..axis + r].to_vec(), data.shape[axis]));
        src.extend_from_slice(&o[axis + r..]);
        data.load(src)
    })
}

pub(super) fn gather_elements(
    fb: &mut FuncBuilder,
    data: &Operand,
    indices: &Operand,
    axis: usize,
    out: &Operand,
    epi: &Epi,
) -> Stmt {
    elementwise(fb, out, epi, |_, o| {
        let mut src = o.to_vec();
        src[axis] = index_value(indices, o.to_vec(), data.shape[axis]);
        data.load(src)
    })
}

/// The data coordinates of GatherND/ScatterND's index tuple at `tuple` (the indices' leading
/// coordinates), followed by `rest` for the axes the tuple does not index.
fn tuple_coords(data: &Operand, indices: &Operand, batch_dims: usize, tuple: &[Expr], rest: &[Expr]) -> Vec<Expr> {
    let k = *indices.shape.last().expect("indices have rank >= 1");
    let mut src = tuple[..batch_dims].to_vec();
    for j in 0..k {
        let mut at = tuple.to_vec();
        at.push(idx(j as i64));
        src.push(index_value(indices, at, data.shape[batch_dims + j]));
    }
    src.extend_from_slice(rest);
    src
}

pub(super) fn gather_nd(
    fb: &mut FuncBuilder,
    data: &Operand,
    indices: &Operand,
    batch_dims: usize,
    out: &Operand,
    epi: &Epi,
) -> Stmt {
    let q = indices.shape.len() - 1;
    elementwise(fb, out, epi, |_, o| data.load(tuple_coords(data, indices, batch_dims, &o[..q], &o[q..])))
}

fn combine(reduction: ScatterReduction, old: Expr, new: Expr) -> Expr {
    match reduction {
        ScatterReduction::None => new,
        ScatterReduction::Add => add(old, new),
        ScatterReduction::Mul => mul(old, new),
        ScatterReduction::Max => max(old, new),
        ScatterReduction::Min => min(old, new),
    }
}

/// Copies `data` to `out`, then writes (or combines) every update at the coordinates `target`
/// gives for its position in `updates`.
fn scatter(
    fb: &mut FuncBuilder,
    data: &Operand,
    updates: &Operand,
    out: &Operand,
    reduction: ScatterReduction,
    target: impl FnOnce(&[Expr]) -> Vec<Expr>,
) -> Stmt {
    let copy = loops(fb, "c", &out.shape.clone(), |_, o| Stmt::Store {
        buffer: out.buf,
        indices: o.to_vec(),
        value: data.load(o.to_vec()),
    });
    let write = loops(fb, "u", &updates.shape.clone(), |_, u| {
        let at = target(u);
        let value = combine(reduction, out.load(at.clone()), updates.load(u.to_vec()));
        Stmt::Store { buffer: out.buf, indices: at, value }
    });
    Stmt::seq(vec![copy, write])
}

pub(super) fn scatter_elements(
    fb: &mut FuncBuilder,
    ins: &[Operand],
    axis: usize,
    reduction: ScatterReduction,
    out: &Operand,
) -> Stmt {
    let (data, indices, updates) = (&ins[0], &ins[1], &ins[2]);
    scatter(fb, data, updates, out, reduction, |u| {
        let mut at = u.to_vec();
        at[axis] = index_value(indices, u.to_vec(), data.shape[axis]);
        at
    })
}

pub(super) fn scatter_nd(fb: &mut FuncBuilder, ins: &[Operand], reduction: ScatterReduction, out: &Operand) -> Stmt {
    let (data, indices, updates) = (&ins[0], &ins[1], &ins[2]);
    let q = indices.shape.len() - 1;
    scatter(fb, data, updates, out, reduction, |u| tuple_coords(data, indices, 0, &u[..q], &u[q..]))
}

pub(super) fn slice(fb: &mut FuncBuilder, x: &Operand, axes: &[SliceAxis], out: &Operand, epi: &Epi) -> Stmt {
    elementwise(fb, out, epi, |_, o| {
        let src = axes
            .iter()
            .zip(o)
            .map(|(a, i)| match a.step {
                1 => add(idx(a.start as i64), i.clone()),
                s => add(idx(a.start as i64), mul(i.clone(), idx(s))),
            })
            .collect();
        x.load(src)
    })
}

pub(super) fn tile(fb: &mut FuncBuilder, x: &Operand, out: &Operand, epi: &Epi) -> Stmt {
    elementwise(fb, out, epi, |_, o| {
        let src = x
            .shape
            .iter()
            .zip(o)
            .zip(&out.shape)
            .map(
                |((&n, i), &m)| {
                    if n == m { i.clone() } else { Expr::binary(BinOp::FloorMod, i.clone(), idx(n as i64)) }
                },
            )
            .collect();
        x.load(src)
    })
}

/// CumSum / CumProd on the `[outer, n, inner]` view.
pub(super) fn cumulative(
    fb: &mut FuncBuilder,
    x: &Operand,
    (exclusive, reverse, product): (bool, bool, bool),
    out: &Operand,
) -> Stmt {
    let acc_t = acc_dtype(x.dtype);
    let [outer, n, inner] = [x.shape[0], x.shape[1], x.shape[2]];
    let (acc, alloc) = local(fb, "acc", acc_t);
    let nest = loops(fb, "o", &[outer, inner], |fb, o| {
        let run = loops(fb, "l", &[n], |_, l| {
            let pos = if reverse { sub(idx(n as i64 - 1), l[0].clone()) } else { l[0].clone() };
            let at = vec![o[0].clone(), pos, o[1].clone()];
            let v = cast_to(acc_t, x.load(at.clone()), x.dtype);
            let bump = set(acc, if product { mul(get(acc), v) } else { add(get(acc), v) });
            let store = Stmt::Store { buffer: out.buf, indices: at, value: cast_to(out.dtype, get(acc), acc_t) };
            Stmt::seq(if exclusive { vec![store, bump] } else { vec![bump, store] })
        });
        Stmt::seq(vec![set(acc, lit(acc_t, if product { 1.0 } else { 0.0 })), run])
    });
    Stmt::seq(vec![alloc, nest])
}

/// TopK on the `[outer, n, inner]` view: each element's rank is the number of elements that
/// come before it (larger, or smaller, NaN above every number, ties by index); the first `k`
/// ranks are stored.
pub(super) fn topk(
    fb: &mut FuncBuilder,
    x: &Operand,
    largest: bool,
    values: &Operand,
    indices: Option<&Operand>,
) -> Stmt {
    let [outer, n, inner] = [x.shape[0], x.shape[1], x.shape[2]];
    let k = values.shape[1];
    let (rank, alloc) = local(fb, "rank", DType::I64);
    let nest = loops(fb, "o", &[outer, inner], |fb, o| {
        loops(fb, "i", &[n], |fb, i| {
            let at = |l: &Expr| vec![o[0].clone(), l.clone(), o[1].clone()];
            let xi = x.load(at(&i[0]));
            let count = loops(fb, "j", &[n], |_, j| {
                let xj = x.load(at(&j[0]));
                let nan = |v: &Expr| Expr::cmp(CmpOp::Ne, v.clone(), v.clone());
                let (hi, lo) = if largest { (xj.clone(), xi.clone()) } else { (xi.clone(), xj.clone()) };
                let mut before = Expr::cmp(CmpOp::Gt, hi, lo);
                if x.dtype.is_float() {
                    // NaN sorts above every number.
                    let nan_first = if largest {
                        and(nan(&xj), Expr::Not(Box::new(nan(&xi))))
                    } else {
                        and(nan(&xi), Expr::Not(Box::new(nan(&xj))))
                    };
                    before = Expr::binary(BinOp::Or, before, nan_first);
                }
                let tie = if x.dtype.is_float() {
                    Expr::binary(BinOp::Or, Expr::cmp(CmpOp::Eq, xi.clone(), xj.clone()), and(nan(&xi), nan(&xj)))
                } else {
                    Expr::cmp(CmpOp::Eq, xi.clone(), xj.clone())
                };
                let before = Expr::binary(BinOp::Or, before, and(tie, lt(j[0].clone(), i[0].clone())));
                set(rank, add(get(rank), Expr::cast(DType::I64, before)))
            });
            let slot = vec![o[0].clone(), get(rank), o[1].clone()];
            let mut stores = vec![Stmt::Store { buffer: values.buf, indices: slot.clone(), value: xi }];
            if let Some(ix) = indices {
                stores.push(Stmt::Store { buffer: ix.buf, indices: slot, value: i[0].clone() });
            }
            let write =
                Stmt::If { cond: lt(get(rank), idx(k as i64)), then: Box::new(Stmt::seq(stores)), otherwise: None };
            Stmt::seq(vec![set(rank, idx(0)), count, write])
        })
    });
    Stmt::seq(vec![alloc, nest])
}

/// LayerNormalization / RMSNormalization on the `[outer, inner]` view, scale and bias `[inner]`.
pub(super) fn normalize(fb: &mut FuncBuilder, ins: &[Operand], epsilon: f32, rms: bool, out: &Operand) -> Stmt {
    let x = &ins[0];
    let acc_t = acc_dtype(x.dtype);
    let [outer, inner] = [x.shape[0], x.shape[1]];
    let (mean, a1) = local(fb, "mean", acc_t);
    let (var, a2) = local(fb, "var", acc_t);
    let n = lit(acc_t, inner as f64);
    let nest = loops(fb, "o", &[outer], |fb, o| {
        let xv = |l: &Expr| cast_to(acc_t, x.load(vec![o[0].clone(), l.clone()]), x.dtype);
        let param = |p: &Operand, l: &Expr| cast_to(acc_t, p.load(vec![l.clone()]), p.dtype);
        let mut stmts = vec![set(mean, lit(acc_t, 0.0))];
        if !rms {
            stmts.push(loops(fb, "l", &[inner], |_, l| set(mean, add(get(mean), xv(&l[0])))));
            stmts.push(set(mean, Expr::binary(BinOp::Div, get(mean), n.clone())));
        }
        stmts.push(set(var, lit(acc_t, 0.0)));
        stmts.push(loops(fb, "l", &[inner], |_, l| {
            let d = sub(xv(&l[0]), get(mean));
            set(var, add(get(var), mul(d.clone(), d)))
        }));
        // var becomes 1 / sqrt(var / n + epsilon).
        let std =
            Expr::math(MathOp::Sqrt, add(Expr::binary(BinOp::Div, get(var), n.clone()), lit(acc_t, epsilon as f64)));
        stmts.push(set(var, Expr::binary(BinOp::Div, lit(acc_t, 1.0), std)));
        stmts.push(loops(fb, "l", &[inner], |_, l| {
            let mut y = mul(mul(sub(xv(&l[0]), get(mean)), get(var)), param(&ins[1], &l[0]));
            if let Some(b) = ins.get(2) {
                y = add(y, param(b, &l[0]));
            }
            Stmt::Store {
                buffer: out.buf,
                indices: vec![o[0].clone(), l[0].clone()],
                value: cast_to(out.dtype, y, acc_t),
            }
        }));
        Stmt::seq(stmts)
    });
    Stmt::seq(vec![a1, a2, nest])
}

/// A parametric activation of `v` (float `dtype`).
pub(super) fn activation_expr(a: Activation, v: Expr, dtype: DType) -> Expr {
    let c = |x: f32| lit(dtype, x as f64);
    let expm1 = |v: Expr| sub(Expr::math(MathOp::Exp, v), lit(dtype, 1.0));
    let neg =
        |v: &Expr, strict: bool| Expr::cmp(if strict { CmpOp::Lt } else { CmpOp::Le }, v.clone(), lit(dtype, 0.0));
    match a {
        Activation::Elu { alpha } => Expr::select(neg(&v, true), mul(c(alpha), expm1(v.clone())), v),
        Activation::Selu { alpha, gamma } => {
            mul(c(gamma), Expr::select(neg(&v, false), mul(c(alpha), expm1(v.clone())), v))
        }
        Activation::Celu { alpha } => {
            let e = mul(c(alpha), expm1(Expr::binary(BinOp::Div, v.clone(), c(alpha))));
            add(max(v, lit(dtype, 0.0)), min(e, lit(dtype, 0.0)))
        }
        Activation::HardSigmoid { alpha, beta } => {
            min(max(add(mul(c(alpha), v), c(beta)), lit(dtype, 0.0)), lit(dtype, 1.0))
        }
        Activation::ThresholdedRelu { alpha } => {
            Expr::select(Expr::cmp(CmpOp::Gt, v.clone(), c(alpha)), v, lit(dtype, 0.0))
        }
        Activation::Swish { alpha } => mul(v.clone(), Expr::math(MathOp::Sigmoid, mul(c(alpha), v))),
    }
}

/// Separable interpolation: for each output element, the sum over every combination of taps
/// of the weights' product times the input at the taps' indices (clamped into the axis: the
/// tables hold in-range indices, -1 only on extrapolated rows, which the select replaces).
pub(super) fn resample(
    fb: &mut FuncBuilder,
    ins: &[Operand],
    axes: &[usize],
    extrapolation: Option<f32>,
    out: &Operand,
) -> Stmt {
    let x = &ins[0];
    let acc_t = if x.dtype.is_float() { acc_dtype(x.dtype) } else { DType::F32 };
    let taps: Vec<usize> = (0..axes.len()).map(|k| ins[1 + 2 * k].shape[1]).collect();
    let (acc, alloc) = local(fb, "acc", acc_t);
    let nest = loops(fb, "o", &out.shape.clone(), |fb, o| {
        let sum = loops(fb, "t", &taps, |_, t| {
            let mut src = o.to_vec();
            let mut w = lit(acc_t, 1.0);
            for (k, &d) in axes.iter().enumerate() {
                let (table, wt) = (&ins[1 + 2 * k], &ins[2 + 2 * k]);
                let at = vec![o[d].clone(), t[k].clone()];
                src[d] = min(max(table.load(at.clone()), idx(0)), idx(x.shape[d] as i64 - 1));
                w = mul(w, cast_to(acc_t, wt.load(at), wt.dtype));
            }
            set(acc, add(get(acc), mul(w, cast_to(acc_t, x.load(src), x.dtype))))
        });
        let mut value = cast_to(out.dtype, get(acc), acc_t);
        if let Some(e) = extrapolation {
            let inside = axes
                .iter()
                .enumerate()
                .map(|(k, &d)| Expr::cmp(CmpOp::Ge, ins[1 + 2 * k].load(vec![o[d].clone(), idx(0)]), idx(0)))
                .reduce(and)
                .unwrap_or_else(|| Expr::bool(true));
            value = Expr::select(inside, value, lit(out.dtype, e as f64));
        }
        Stmt::seq(vec![set(acc, lit(acc_t, 0.0)), sum, Stmt::Store { buffer: out.buf, indices: o.to_vec(), value }])
    });
    Stmt::seq(vec![alloc, nest])
}

/// `x` reflected into `lo..=hi` (f64), as [`crate::interp`]'s GridSample does.
fn reflect_expr(x: Expr, lo: f64, hi: f64) -> Expr {
    let f = |v: f64| Expr::float(v, DType::F64);
    let range = hi - lo;
    let fold = |dx: Expr, near: f64, far: f64, sign: f64| {
        let n = Expr::cast(DType::I64, Expr::binary(BinOp::Div, dx.clone(), f(range)));
        let r = sub(dx, mul(Expr::cast(DType::F64, n.clone()), f(range)));
        let even = Expr::cmp(CmpOp::Eq, Expr::binary(BinOp::FloorMod, n, idx(2)), idx(0));
        Expr::select(even, add(f(near), mul(f(sign), r.clone())), sub(f(far), mul(f(sign), r)))
    };
    let below = fold(sub(f(lo), x.clone()), lo, hi, 1.0);
    let above = fold(sub(x.clone(), f(hi)), hi, lo, -1.0);
    Expr::select(lt(x.clone(), f(lo)), below, Expr::select(Expr::cmp(CmpOp::Gt, x.clone(), f(hi)), above, x))
}

/// GridSample: per output point, each spatial axis's coordinate from the grid (f64), then the
/// sum over the taps (1, 2 or 4 per axis) of the weights' product times the pixel, read as the
/// padding mode says.
pub(super) fn grid_sample(
    fb: &mut FuncBuilder,
    ins: &[Operand],
    (mode, padding, align_corners): (GridMode, GridPadding, bool),
    out: &Operand,
) -> Stmt {
    let (x, grid) = (&ins[0], &ins[1]);
    let dims = x.shape[2..].to_vec();
    let k = dims.len();
    let f = |v: f64| Expr::float(v, DType::F64);
    let taps: usize = match mode {
        GridMode::Nearest => 1,
        GridMode::Linear => 2,
        GridMode::Cubic => 4,
    };
    loops(fb, "o", &out.shape.clone(), |fb, o| {
        let mut stmts = Vec::new();
        let mut first = Vec::new();
        let mut weights: Vec<Vec<Expr>> = Vec::new();
        for (d, &len) in dims.iter().enumerate() {
            let len = len as f64;
            let (lo, hi) = if align_corners { (0.0, len - 1.0) } else { (-0.5, len - 0.5) };
            let mut at = vec![o[0].clone()];
            at.extend_from_slice(&o[2..]);
            at.push(idx((k - 1 - d) as i64));
            let g = cast_to(DType::F64, grid.load(at), grid.dtype);
            let mut c = if align_corners {
                mul(Expr::binary(BinOp::Div, add(g, f(1.0)), f(2.0)), f(len - 1.0))
            } else {
                Expr::binary(BinOp::Div, sub(mul(add(g, f(1.0)), f(len)), f(1.0)), f(2.0))
            };
            if mode == GridMode::Nearest {
                c = Expr::math(MathOp::Round, c);
            }
            let cv = fb.var("coord", DType::F64);
            stmts.push(Stmt::Let { var: cv, value: c });
            let c = Expr::Var(cv);
            let outside = Expr::binary(BinOp::Or, lt(c.clone(), f(lo)), Expr::cmp(CmpOp::Gt, c.clone(), f(hi)));
            let c = match padding {
                GridPadding::Zeros => c,
                GridPadding::Border => Expr::select(outside, min(max(c.clone(), f(0.0)), f(len - 1.0)), c),
                GridPadding::Reflection => reflect_expr(c, lo, hi),
            };
            let pv = fb.var("pos", DType::F64);
            stmts.push(Stmt::Let { var: pv, value: c });
            let c = Expr::Var(pv);
            let floor = Expr::math(MathOp::Floor, c.clone());
            let tv = fb.var("frac", DType::F64);
            stmts.push(Stmt::Let { var: tv, value: sub(c.clone(), floor.clone()) });
            let t = Expr::Var(tv);
            let (start, w) = match mode {
                GridMode::Nearest => (Expr::cast(DType::I64, c), vec![f(1.0)]),
                GridMode::Linear => (Expr::cast(DType::I64, floor), vec![sub(f(1.0), t.clone()), t]),
                GridMode::Cubic => {
                    let a = -0.75;
                    let near =
                        |x: Expr| add(mul(sub(mul(f(a + 2.0), x.clone()), f(a + 3.0)), mul(x.clone(), x)), f(1.0));
                    let far = |x: Expr| {
                        sub(mul(add(mul(sub(mul(f(a), x.clone()), f(5.0 * a)), x.clone()), f(8.0 * a)), x), f(4.0 * a))
                    };
                    let one_minus = sub(f(1.0), t.clone());
                    (
                        sub(Expr::cast(DType::I64, floor), idx(1)),
                        vec![
                            far(add(t.clone(), f(1.0))),
                            near(t.clone()),
                            near(one_minus.clone()),
                            far(add(one_minus, f(1.0))),
                        ],
                    )
                }
            };
            let sv = fb.var("first", DType::I64);
            stmts.push(Stmt::Let { var: sv, value: start });
            first.push(Expr::Var(sv));
            weights.push(w);
        }
        let mut terms = Vec::new();
        for combo in 0..taps.pow(k as u32) {
            let mut src = vec![o[0].clone(), o[1].clone()];
            let (mut w, mut valid) = (f(1.0), Vec::new());
            let mut rest = combo;
            for d in (0..k).rev() {
                let t = rest % taps;
                rest /= taps;
                let len = dims[d] as i64;
                let i = add(first[d].clone(), idx(t as i64));
                let i = match padding {
                    GridPadding::Zeros => {
                        valid.push(in_range(i.clone(), dims[d]));
                        i
                    }
                    GridPadding::Border => i,
                    GridPadding::Reflection => {
                        let (lo, hi) = if align_corners { (0.0, len as f64 - 1.0) } else { (-0.5, len as f64 - 0.5) };
                        Expr::cast(DType::I64, reflect_expr(Expr::cast(DType::F64, i), lo, hi))
                    }
                };
                src.insert(2, min(max(i, idx(0)), idx(len - 1)));
                w = mul(w, weights[d][t].clone());
            }
            let pixel = cast_to(DType::F64, x.load(src), x.dtype);
            let term = mul(w, pixel);
            terms.push(match valid.into_iter().reduce(and) {
                Some(ok) => Expr::select(ok, term, f(0.0)),
                None => term,
            });
        }
        let sum = terms.into_iter().reduce(add).unwrap_or_else(|| f(0.0));
        stmts.push(Stmt::Store { buffer: out.buf, indices: o.to_vec(), value: cast_to(out.dtype, sum, DType::F64) });
        Stmt::seq(stmts)
    })
}
