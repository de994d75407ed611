//! Loop schedules for the CPU, applied to a flat module before planning and code generation.
//!
//! For every perfectly nested chain of loops whose innermost loop `L` writes a global buffer
//! (the output loop of an operator: its body may hold an accumulator init, reduction loops and
//! the output store), `L` is marked vectorized, and one of the spatial loops above it is moved
//! right around it and marked unrolled, which the code generator unrolls and jams into a
//! register block (see [`crate::vector`]). The loop to jam is the one whose variable appears in
//! the fewest loads that also move with `L` — for a 1x1 convolution the output channel, so an
//! input vector is loaded once for several channels.
//!
//! Only loops whose variable indexes every global store of the body are moved or jammed: their
//! iterations write disjoint outputs, so reordering them cannot change results.

use heron_ir::loop_ir::{Arg, BinOp, BufferId, Callee, Expr, ForKind, IndexMap, Module, PrimFunc, Scope, Stmt, VarId};

/// Smallest extent worth a vector loop (one F32X4).
const MIN_VECTOR_EXTENT: i64 = 4;

/// Marks the loops of every function for vectorization and unroll-and-jam.
pub fn schedule(module: &mut Module) {
    for f in &mut module.funcs {
        let body = std::mem::replace(&mut f.body, Stmt::Seq(vec![]));
        f.body = schedule_stmt(body, f);
    }
}

fn schedule_stmt(s: Stmt, f: &PrimFunc) -> Stmt {
    match s {
        Stmt::Seq(v) => Stmt::Seq(v.into_iter().map(|s| schedule_stmt(s, f)).collect()),
        Stmt::If { cond, then, otherwise } => Stmt::If {
            cond,
            then: Box::new(schedule_stmt(*then, f)),
            otherwise: otherwise.map(|o| Box::new(schedule_stmt(*o, f))),
        },
        s @ Stmt::For { .. } => schedule_chain(s, f),
        other => other,
    }
}

/// A loop header: what a `For` is without its body.
struct Header {
    var: VarId,
    extent: Expr,
    kind: ForKind,
}

fn schedule_chain(s: Stmt, f: &PrimFunc) -> Stmt {
    // Peel the perfectly nested chain.
    let mut headers = Vec::new();
    let mut cur = s;
    let body = loop {
        match cur {
            Stmt::For { var, extent, kind, body } => {
                headers.push(Header { var, extent, kind });
                match *body {
                    inner @ Stmt::For { .. } => cur = inner,
                    other => break other,
                }
            }
            other => break other,
        }
    };
    let last = headers.len() - 1;
    let stores = global_stores(&body, f);
    let innermost_spatial =
        stores.as_ref().is_some_and(|st| !st.is_empty() && st.iter().all(|idx| mentions(idx, headers[last].var)))
            && headers[last].extent.as_int().is_some_and(|n| n >= MIN_VECTOR_EXTENT)
            && reads_only_own_outputs(&body, f);
    let body = if innermost_spatial {
        let stores = stores.expect("checked");
        headers[last].kind = ForKind::Vectorized;
        // Spatial loops directly above, innermost first, up to the first one that is not.
        let mut movable = Vec::new();
        for i in (0..last).rev() {
            let h = &headers[i];
            if !(h.extent.as_int().is_some_and(|n| n >= 2) && stores.iter().all(|idx| mentions(idx, h.var))) {
                break;
            }
            movable.push(i);
        }
        let moving_loads = varying_loads(&body, f, headers[last].var);
        if let Some(&best) =
            movable.iter().min_by_key(|&&i| moving_loads.iter().filter(|e| mentions(e, headers[i].var)).count())
        {
            let h = headers.remove(best);
            headers.insert(last - 1, Header { kind: ForKind::Unrolled, ..h });
        }
        longest_reduction_innermost(body, f)
    } else {
        schedule_stmt(body, f)
    };
    headers.into_iter().rev().fold(body, |inner, h| Stmt::For {
        var: h.var,
        extent: h.extent,
        kind: h.kind,
        body: Box::new(inner),
    })
}

/// Reorders each pure accumulation nest in `body` (`for .. { acc[i] = acc[i] + e }`, a
/// reduction into a loop-local accumulator) so its longest loop is innermost: the input
/// channels of a convolution rather than a 3-wide kernel window, so the innermost loop runs
/// long and its body stays small. Only the summation order changes.
fn longest_reduction_innermost(body: Stmt, f: &PrimFunc) -> Stmt {
    let reorder = |s: Stmt| -> Stmt {
        let mut headers = Vec::new();
        let mut cur = s;
        let inner = loop {
            match cur {
                Stmt::For { var, extent, kind, body } => {
                    headers.push(Header { var, extent, kind });
                    cur = *body;
                }
                other => break other,
            }
        };
        // `acc = acc + e` with `e` not reading `acc`: the terms commute.
        let accumulates = matches!(&inner, Stmt::Store { buffer, indices, value: Expr::Binary { op: BinOp::Add, lhs, rhs } }
            if f.buffer(*buffer).scope == Scope::Local
                && matches!(&**lhs, Expr::Load { buffer: b, indices: i } if b == buffer && i == indices)
                && !reads(rhs, *buffer));
        let constant = headers.iter().all(|h| h.extent.as_int().is_some() && h.kind == ForKind::Serial);
        if accumulates && constant {
            headers.sort_by_key(|h| h.extent.as_int());
        }
        headers.into_iter().rev().fold(inner, |b, h| Stmt::For {
            var: h.var,
            extent: h.extent,
            kind: h.kind,
            body: Box::new(b),
        })
    };
    match body {
        Stmt::Seq(v) => {
            Stmt::Seq(v.into_iter().map(|s| if matches!(s, Stmt::For { .. }) { reorder(s) } else { s }).collect())
        }
        s @ Stmt::For { .. } => reorder(s),
        other => other,
    }
}

/// Linear index expressions of the global stores in `body`, or `None` when a global store sits
/// inside a nested loop or branch (a reduction into memory: not a spatial loop body).
fn global_stores(body: &Stmt, f: &PrimFunc) -> Option<Vec<Vec<Expr>>> {
    let top: Vec<&Stmt> = match body {
        Stmt::Seq(v) => v.iter().collect(),
        other => vec![other],
    };
    let mut out = Vec::new();
    for s in top {
        match s {
            Stmt::Store { buffer, indices, .. } if f.buffer(*buffer).scope == Scope::Global => {
                out.push(indices.clone());
            }
            Stmt::Store { .. } | Stmt::Let { .. } | Stmt::Allocate { .. } => {}
            nested => {
                let mut deep = false;
                nested.walk(&mut |x| {
                    deep |= matches!(x, Stmt::Store { buffer, .. } if f.buffer(*buffer).scope == Scope::Global)
                });
                if deep {
                    return None;
                }
            }
        }
    }
    Some(out)
}

/// Index lists of the global loads in `body` that move with `v`.
fn varying_loads(body: &Stmt, f: &PrimFunc, v: VarId) -> Vec<Vec<Expr>> {
    let mut out = Vec::new();
    fn collect(e: &Expr, f: &PrimFunc, v: VarId, out: &mut Vec<Vec<Expr>>) {
        if let Expr::Load { buffer, indices } = e
            && f.buffer(*buffer).scope == Scope::Global
            && mentions(indices, v)
        {
            out.push(indices.clone());
        }
        e.for_each_child(|c| collect(c, f, v, out));
    }
    body.walk(&mut |s| s.for_each_expr(|e| collect(e, f, v, &mut out)));
    out
}

/// Whether any of `exprs` uses `v`.
fn mentions(exprs: &[Expr], v: VarId) -> bool {
    fn go(e: &Expr, v: VarId) -> bool {
        let mut found = matches!(e, Expr::Var(x) if *x == v);
        e.for_each_child(|c| found |= go(c, v));
        found
    }
    exprs.iter().any(|e| go(e, v))
}

/// Picks physical layouts for the CPU kernels, before layout transforms are applied:
/// - scratch buffers inside operators keep their logical (row-major) layout, since the
///   kernels vectorize along the innermost logical axis (a channel-blocked scratch would make
///   those loads strided);
/// - a constant read as `W[v, ...]` inside a loop vectorized over `v` (e.g. GEMM weights with
///   output features first) is stored with that axis innermost, so the vector loads are
///   contiguous;
/// - a scratch buffer read only as `P[..., s*v + k]` with a stride `s >= 2` (the padded input
///   of a strided convolution) is stored phase-split, `P[..., x % s, x // s]`, so those reads
///   become contiguous vectors instead of lane-by-lane gathers (its writer runs scalar).
pub fn choose_layouts(module: &mut Module) {
    for f in &mut module.funcs {
        let params = f.params.clone();
        f.layout_transforms.retain(|b, _| params.contains(b));
    }
    crate::int8::rewrite(module);
    let mut probe = module.clone();
    schedule(&mut probe);
    // Parameters (function, position) worth transposing.
    let mut wanted: Vec<(String, usize)> = Vec::new();
    for f in &probe.funcs {
        for (pos, &p) in f.params.iter().enumerate() {
            if f.buffer(p).shape.len() >= 2 && leading_axis_vectorized(&f.body, p) {
                wanted.push((f.name.clone(), pos));
            }
        }
    }
    for (f, probed) in module.funcs.iter_mut().zip(&probe.funcs) {
        let mut scratch = Vec::new();
        probed.body.walk(&mut |s| {
            if let Stmt::Allocate { buffer, .. } = s
                && probed.buffer(*buffer).scope == Scope::Global
            {
                scratch.push(*buffer);
            }
        });
        for b in scratch {
            if f.layout_transforms.contains_key(&b) {
                continue;
            }
            if let Some(stride) = strided_innermost(&probed.body, b) {
                f.layout_transforms.insert(b, phase_split(probed.buffer(b).shape.len(), stride));
            }
        }
    }
    let Some(main_index) = module.funcs.iter().position(|f| f.name == heron_ir::loop_ir::MAIN) else { return };
    let main = &module.funcs[main_index];
    let mut constants: Vec<BufferId> = Vec::new();
    main.body.walk(&mut |s| {
        if let Stmt::AllocateConst { buffer, .. } = s {
            constants.push(*buffer);
        }
    });
    // A constant qualifies when every call that receives it wants it transposed.
    let mut verdict: std::collections::HashMap<BufferId, bool> = std::collections::HashMap::new();
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(call) = s
            && let Callee::Func(name) = &call.callee
        {
            for (pos, a) in call.args.iter().enumerate() {
                if let Arg::Buffer(b) = a
                    && constants.contains(b)
                {
                    let ok = wanted.iter().any(|(n, p)| n == name && *p == pos);
                    let e = verdict.entry(*b).or_insert(true);
                    *e &= ok;
                }
            }
        }
    });
    let main = &mut module.funcs[main_index];
    for (b, ok) in verdict {
        let rank = main.buffer(b).shape.len();
        if ok && rank >= 2 && !main.layout_transforms.contains_key(&b) {
            main.layout_transforms.insert(b, leading_axis_last(rank));
        }
    }
}

/// `lambda d0, d1, ..., dn: [d1, ..., dn, d0]`: the leading axis moves innermost (for a
/// matrix, the transpose).
fn leading_axis_last(rank: usize) -> IndexMap {
    let names: Vec<String> = (0..rank).map(|k| format!("d{k}")).collect();
    let mut out = names[1..].to_vec();
    out.push(names[0].clone());
    IndexMap::parse(&format!("lambda {}: [{}]", names.join(", "), out.join(", "))).expect("valid map")
}

/// `lambda d0, ..., dn: [d0, ..., dn % s, dn // s]`: the innermost axis split into `s` phases.
fn phase_split(rank: usize, s: i64) -> IndexMap {
    let names: Vec<String> = (0..rank).map(|k| format!("d{k}")).collect();
    let last = &names[rank - 1];
    let mut out = names[..rank - 1].to_vec();
    out.extend([format!("{last} % {s}"), format!("{last} // {s}")]);
    IndexMap::parse(&format!("lambda {}: [{}]", names.join(", "), out.join(", "))).expect("valid map")
}

/// The stride `s >= 2` when every load of `b` in `body` is `b[..., s*v + k]` inside a loop
/// vectorized over `v`, with the other indices free of `v`.
fn strided_innermost(body: &Stmt, b: BufferId) -> Option<i64> {
    fn walk(s: &Stmt, b: BufferId, v: Option<VarId>, stride: &mut Option<Option<i64>>) {
        let v = match s {
            Stmt::For { var, kind: ForKind::Vectorized, .. } => Some(*var),
            _ => v,
        };
        s.for_each_expr(|e| loads(e, b, v, stride));
        match s {
            Stmt::Seq(list) => list.iter().for_each(|x| walk(x, b, v, stride)),
            Stmt::For { body, .. } => walk(body, b, v, stride),
            Stmt::If { then, otherwise, .. } => {
                walk(then, b, v, stride);
                if let Some(o) = otherwise {
                    walk(o, b, v, stride);
                }
            }
            Stmt::Evaluate(call) if call.args.iter().any(|a| matches!(a, Arg::Buffer(x) if *x == b)) => {
                *stride = Some(None)
            }
            _ => {}
        }
    }
    // `None`: no load seen yet; `Some(None)`: disqualified; `Some(Some(s))`: stride so far.
    fn loads(e: &Expr, b: BufferId, v: Option<VarId>, stride: &mut Option<Option<i64>>) {
        if let Expr::Load { buffer, indices } = e
            && *buffer == b
        {
            let this = match (v, indices.split_last()) {
                (Some(v), Some((last, rest))) if !mentions(rest, v) => {
                    crate::codegen::affine_terms(last).and_then(|(t, _)| t.get(&v).copied()).filter(|&c| c >= 2)
                }
                _ => None,
            };
            *stride = match (*stride, this) {
                (None, s) => Some(s),
                (Some(Some(a)), Some(c)) if a == c => Some(Some(a)),
                _ => Some(None),
            };
        }
        e.for_each_child(|c| loads(c, b, v, stride));
    }
    let mut stride = None;
    walk(body, b, None, &mut stride);
    stride.flatten()
}

/// True when every load of `p` in `body` is `p[e0, e1, ...]` inside a loop vectorized over `v`,
/// with `e0` moving by 1 with `v` and the other indices free of `v`.
fn leading_axis_vectorized(body: &Stmt, p: BufferId) -> bool {
    fn walk(s: &Stmt, p: BufferId, v: Option<VarId>, seen: &mut bool) -> bool {
        let v = match s {
            Stmt::For { var, kind: ForKind::Vectorized, .. } => Some(*var),
            _ => v,
        };
        let mut ok = true;
        s.for_each_expr(|e| ok &= loads_ok(e, p, v, seen));
        match s {
            Stmt::Seq(list) => ok && list.iter().all(|x| walk(x, p, v, seen)),
            Stmt::For { body, .. } => ok && walk(body, p, v, seen),
            Stmt::If { then, otherwise, .. } => {
                ok && walk(then, p, v, seen) && otherwise.as_ref().is_none_or(|o| walk(o, p, v, seen))
            }
            Stmt::Evaluate(call) => ok && !call.args.iter().any(|a| matches!(a, Arg::Buffer(b) if *b == p)),
            Stmt::Store { buffer, .. } => ok && *buffer != p,
            _ => ok,
        }
    }
    fn loads_ok(e: &Expr, p: BufferId, v: Option<VarId>, seen: &mut bool) -> bool {
        let mut ok = match e {
            Expr::Load { buffer, indices } if *buffer == p => {
                *seen = true;
                match (v, indices.split_first()) {
                    (Some(v), Some((first, rest))) => {
                        let unit = crate::codegen::affine_terms(first).is_some_and(|(t, _)| t.get(&v) == Some(&1));
                        unit && !mentions(rest, v)
                    }
                    _ => false,
                }
            }
            _ => true,
        };
        e.for_each_child(|c| ok &= loads_ok(c, p, v, seen));
        ok
    }
    let mut seen = false;
    walk(body, p, None, &mut seen) && seen
}

/// Whether `e` loads from `b`.
fn reads(e: &Expr, b: BufferId) -> bool {
    let mut found = matches!(e, Expr::Load { buffer, .. } if *buffer == b);
    e.for_each_child(|c| found |= reads(c, b));
    found
}

/// True when every load of a global buffer the body writes reads exactly the element this
/// iteration writes (an in-place update), so no iteration sees another's output and the loops
/// may be reordered or vectorized.
fn reads_only_own_outputs(body: &Stmt, f: &PrimFunc) -> bool {
    let mut written: Vec<(BufferId, Vec<Expr>)> = Vec::new();
    body.walk(&mut |s| {
        if let Stmt::Store { buffer, indices, .. } = s
            && f.buffer(*buffer).scope == Scope::Global
        {
            written.push((*buffer, indices.clone()));
        }
    });
    fn ok(e: &Expr, written: &[(BufferId, Vec<Expr>)]) -> bool {
        let own = match e {
            Expr::Load { buffer, indices } => {
                let stores: Vec<_> = written.iter().filter(|(b, _)| b == buffer).collect();
                stores.is_empty() || stores.iter().all(|(_, idx)| idx == indices)
            }
            _ => true,
        };
        let mut children = true;
        e.for_each_child(|c| children &= ok(c, written));
        own && children
    }
    let mut all = true;
    body.walk(&mut |s| s.for_each_expr(|e| all &= ok(e, &written)));
    all
}
