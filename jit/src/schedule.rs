//! Loop schedules for the CPU target ([`crate::target::CpuTarget`]), applied to a lowered module
//! before layouts, flattening and planning; loop kinds survive both, so the code generator emits
//! exactly what is printed at the target stage.
//!
//! For every perfectly nested chain of loops whose innermost loop `L` writes a global buffer
//! (the output loop of an operator: its body may hold an accumulator init, reduction loops and
//! the output store), `L` is marked vectorized with its register shape, and one of the spatial
//! loops above it is moved right around it and marked `unrolled(J)`, which the code generator
//! unrolls and jams into a register block (see [`crate::vector`]); the reduction loops inside
//! are marked unrolled too. The loop to jam is the one whose variable appears in the fewest
//! loads that also move with `L` — for a 1x1 convolution the output channel, so an input vector
//! is loaded once for several channels. Every tiling number the emitter uses is chosen here
//! ([`register_block`], [`unroll_reductions`]) and printed at the target stage.
//!
//! Only loops whose variable indexes every global store of the body are moved or jammed: their
//! iterations write disjoint outputs, so reordering them cannot change results. For the same
//! reason [`block_lanes_innermost`] reorders only bodies that read the buffers they store to at
//! the element being written.

use std::collections::{HashMap, HashSet};

use heron_ir::loop_ir::analysis::{
    affine_terms, mentions_any, reads, reads_none_of_its_outputs, reads_only_own_outputs, substitute,
};
use heron_ir::loop_ir::{
    Arg, BinOp, BufferId, Callee, Expr, ForKind, IndexMap, Module, PrimFunc, Scope, Stmt, VarDecl, VarId, VectorShape,
    VectorTail,
};

/// Smallest extent worth a vector loop (one F32X4).
const MIN_VECTOR_EXTENT: i64 = 4;

/// Marks the loops of every function for vectorization and unroll-and-jam.
pub fn schedule(module: &mut Module) {
    for f in module.funcs.iter_mut().filter(|f| f.target.is_none()) {
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

/// The perfectly nested chain of loops `s` opens with, outermost first, and the body inside.
fn peel(s: Stmt) -> (Vec<Header>, Stmt) {
    let mut headers = Vec::new();
    let mut cur = s;
    while let Stmt::For { var, extent, kind, body } = cur {
        headers.push(Header { var, extent, kind });
        cur = *body;
    }
    (headers, cur)
}

/// The loops `headers` (outermost first) around `body`.
fn rebuild(headers: Vec<Header>, body: Stmt) -> Stmt {
    headers.into_iter().rev().fold(body, |inner, h| Stmt::For {
        var: h.var,
        extent: h.extent,
        kind: h.kind,
        body: Box::new(inner),
    })
}

fn schedule_chain(s: Stmt, f: &PrimFunc) -> Stmt {
    let (mut headers, body) = peel(s);
    if headers.is_empty() {
        return body;
    }
    let last = headers.len() - 1;
    let stores = global_stores(&body, f);
    let innermost_spatial =
        stores.as_ref().is_some_and(|st| !st.is_empty() && st.iter().all(|idx| mentions_any(idx, headers[last].var)))
            && headers[last].extent.as_int().is_some_and(|n| n >= MIN_VECTOR_EXTENT)
            && reads_only_own_outputs(&body, f)
            && stores_stay_contiguous(&body, f);
    let body = if innermost_spatial {
        let stores = stores.expect("checked");
        // Spatial loops directly above, innermost first, up to the first one that is not.
        let mut movable = Vec::new();
        for i in (0..last).rev() {
            let h = &headers[i];
            if !(h.extent.as_int().is_some_and(|n| n >= 2) && stores.iter().all(|idx| mentions_any(idx, h.var))) {
                break;
            }
            movable.push(i);
        }
        let moving_loads = varying_loads(&body, f, headers[last].var);
        let jam =
            movable.iter().min_by_key(|&&i| moving_loads.iter().filter(|e| mentions_any(e, headers[i].var)).count());
        let n = headers[last].extent.as_int().expect("checked");
        let (shape, factor) = register_block(n, jam.is_some(), reads_none_of_its_outputs(&body, f));
        headers[last].kind = ForKind::Vectorized(shape);
        if let Some(&best) = jam {
            let h = headers.remove(best);
            headers.insert(last - 1, Header { kind: ForKind::Unrolled(factor), ..h });
        }
        unroll_reductions(longest_reduction_innermost(body, f))
    } else {
        schedule_stmt(body, f)
    };
    rebuild(headers, body)
}

/// Lanes of the code generator's vectors (128-bit f32).
const LANES: i64 = 4;
/// Reduction loops in a vector body up to this long are unrolled completely; longer ones by 2.
const MAX_FULL_UNROLL: i64 = 4;

/// The register block of a vectorized output loop of `n` iterations: vectors per value, tail,
/// and the jam factor when the loop around it is jammed. x86-64 has 16 xmm registers: a
/// jammed block is 4 copies x 3 vectors (12 accumulators, the other 4 registers hold one
/// reduction step's operands; measured best against 4 x 8, 3 x 12 and 6 x 8), an unjammed one
/// 4 vectors (16 lanes). `repeats_ok`: the body reads none of its outputs, so the tail may be
/// vectors overlapping the main part instead of scalar iterations.
fn register_block(n: i64, jammed: bool, repeats_ok: bool) -> (VectorShape, u32) {
    let (max_vectors, mut factor) = if jammed { (3, 4) } else { (4, 1) };
    let vectors = vectors_per_value(n, max_vectors);
    // Rows too short for one full block run as single vectors: jam twice as many copies so
    // the block still holds 8 accumulators.
    if jammed && n < 2 * LANES {
        factor = 8;
    }
    let overlap = repeats_ok && n >= LANES;
    let tail = if overlap { VectorTail::Overlap } else { VectorTail::Scalar };
    let shape = VectorShape { lanes: LANES as u32, vectors: vectors as u32, tail };
    // A jammed short row (7 or 14 wide in late CNN layers) as one clamped block of 12
    // accumulators, rather than full blocks plus tail passes that each repeat the reduction
    // with fewer accumulators.
    if overlap && jammed && n > LANES && n <= 4 * LANES && n % LANES != 0 {
        let vectors = (n + LANES - 1) / LANES;
        return (VectorShape { vectors: vectors as u32, tail: VectorTail::Clamp, ..shape }, (12 / vectors) as u32);
    }
    (shape, factor)
}

/// Vectors per value for a loop of `n` lanes: the fewest blocks (full `4u`-lane blocks plus
/// single-vector tail chunks), ties to the larger `u`.
fn vectors_per_value(n: i64, max_u: i64) -> i64 {
    let blocks = |u: i64| n / (LANES * u) + (n % (LANES * u) + LANES - 1) / LANES;
    (1..=max_u).rev().min_by_key(|&u| blocks(u)).unwrap_or(1)
}

/// Marks the constant-extent serial loops inside a vector body unrolled: short ones (3x3 kernel
/// windows) completely, so their index terms fold to constants; longer ones by 2, so the loop
/// overhead and the register shuffles on the back edge count half.
fn unroll_reductions(body: Stmt) -> Stmt {
    body.map_stmts(&mut |s| match s {
        Stmt::For { var, extent, kind: ForKind::Serial, body } if extent.as_int().is_some() => {
            let n = extent.as_int().expect("checked");
            let factor = if n <= MAX_FULL_UNROLL { n.max(1) } else { 2 };
            Stmt::For { var, extent, kind: ForKind::Unrolled(factor as u32), body }
        }
        other => other,
    })
}

/// Reorders each pure accumulation nest in `body` (`for .. { acc[i] = acc[i] + e }`, a
/// reduction into a loop-local accumulator) so its longest loop is innermost: the input
/// channels of a convolution rather than a 3-wide kernel window, so the innermost loop runs
/// long and its body stays small. Only the summation order changes.
fn longest_reduction_innermost(body: Stmt, f: &PrimFunc) -> Stmt {
    let reorder = |s: Stmt| -> Stmt {
        let (mut headers, inner) = peel(s);
        // `acc = acc + e` with `e` not reading `acc`: the terms commute.
        let accumulates = matches!(&inner, Stmt::Store { buffer, indices, value: Expr::Binary { op: BinOp::Add, lhs, rhs } }
            if f.buffer(*buffer).scope == Scope::Local
                && matches!(&**lhs, Expr::Load { buffer: b, indices: i } if b == buffer && i == indices)
                && !reads(rhs, *buffer));
        let constant = headers.iter().all(|h| h.extent.as_int().is_some() && h.kind == ForKind::Serial);
        if accumulates && constant {
            headers.sort_by_key(|h| h.extent.as_int());
        }
        rebuild(headers, inner)
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
            && mentions_any(indices, v)
        {
            out.push(indices.clone());
        }
        e.for_each_child(|c| collect(c, f, v, out));
    }
    body.walk(&mut |s| s.for_each_expr(|e| collect(e, f, v, &mut out)));
    out
}

/// Reorders the loops of each elementwise function that stores channel-blocked tensors
/// (`NCHWnc`, chosen for the kernels) so that a block's lanes run innermost: its channel loop
/// `c` becomes `c_block` (in `c`'s place) and `c_lane` (innermost), `c = c_block · B + c_lane`.
/// [`schedule`] then vectorizes `c_lane`, whose lanes are contiguous, instead of the width,
/// whose elements sit a block apart (a strided gather and scatter per vector: a
/// squeeze-excitation product over a blocked tensor ran at 0.8 ns an element). Taken only when
/// every load that moves with `c` is contiguous along it as well: the same blocked layout at
/// the same channel, or a per-channel operand (`c` indexes its last axis of more than one).
pub fn block_lanes_innermost(module: &mut Module) {
    let Some(main) = module.funcs.iter().find(|f| f.name == heron_ir::loop_ir::MAIN) else { return };
    let params: HashMap<&str, &[BufferId]> =
        module.funcs.iter().map(|f| (f.name.as_str(), f.params.as_slice())).collect();
    // Per function and parameter: the block of the tensor every call binds it to, 0 for an
    // untransformed one; absent when calls disagree or the tensor has another layout.
    let mut bound: HashMap<String, HashMap<BufferId, Option<usize>>> = HashMap::new();
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(call) = s
            && let Callee::Func(name) = &call.callee
            && let Some(ps) = params.get(name.as_str())
        {
            let entry = bound.entry(name.clone()).or_default();
            for (&p, a) in ps.iter().zip(&call.args) {
                let Arg::Buffer(b) = a else { continue };
                let block = match main.layout_transforms.get(b) {
                    None => Some(0),
                    Some(map) => {
                        heron_kernels::blocked::BLOCKS.into_iter().find(|&n| *map == crate::blocking::blocked_map(n))
                    }
                };
                let seen = entry.entry(p).or_insert(block);
                if *seen != block {
                    *seen = None;
                }
            }
        }
    });
    for f in module.funcs.iter_mut().filter(|f| f.target.is_none()) {
        let Some(bound) = bound.get(&f.name) else { continue };
        let Stmt::Seq(items) = &f.body else { continue };
        let mut loops = items.iter().enumerate().filter(|(_, s)| matches!(s, Stmt::For { .. }));
        let (Some((at, top)), None) = (loops.next(), loops.next()) else { continue };
        let Some((nest, new_vars)) = lanes_innermost(top.clone(), f, bound) else { continue };
        f.vars.extend(new_vars);
        if let Stmt::Seq(items) = &mut f.body {
            items[at] = nest;
        }
    }
}

/// [`block_lanes_innermost`] on one loop nest of `f`: the reordered nest and the two variables
/// it adds (after `f`'s), or `None` when the nest does not qualify: constant extents, serial
/// loops, no loop or `let` inside the body, every global store to a parameter bound to a
/// blocked tensor at `[_, c, _, _]` for one loop variable `c` whose extent is whole blocks,
/// stored buffers read only at the element being written, and every other load that moves
/// with `c` contiguous along it.
fn lanes_innermost(nest: Stmt, f: &PrimFunc, bound: &HashMap<BufferId, Option<usize>>) -> Option<(Stmt, [VarDecl; 2])> {
    let (mut headers, body) = peel(nest);
    let mut simple = true;
    body.walk(&mut |s| simple &= !matches!(s, Stmt::For { .. } | Stmt::Let { .. }));
    let stores = heron_ir::loop_ir::analysis::global_stores(&body, f);
    // The channel variable and block of the first store; every store must agree.
    let (block, c) = stores.first().and_then(|(b, idx)| match (bound.get(b), idx.get(1)) {
        (Some(Some(block)), Some(Expr::Var(c))) if *block > 0 && idx.len() == 4 => Some((*block, *c)),
        _ => None,
    })?;
    let at = headers.iter().position(|h| h.var == c)?;
    let channels = headers[at].extent.as_int()?;
    let blocked_at_c = |b: &BufferId, idx: &[Expr]| {
        bound.get(b) == Some(&Some(block))
            && idx.len() == 4
            && idx[1] == Expr::Var(c)
            && idx.iter().enumerate().all(|(k, e)| k == 1 || !mentions_any(std::slice::from_ref(e), c))
    };
    let per_channel = |b: &BufferId, idx: &[Expr]| {
        let shape = &f.buffer(*b).shape;
        bound.get(b) == Some(&Some(0))
            && idx.iter().enumerate().all(|(k, e)| {
                !mentions_any(std::slice::from_ref(e), c)
                    || (*e == Expr::Var(c) && shape[k + 1..].iter().all(|&d| d == 1))
            })
    };
    let mut loads_ok = true;
    body.walk(&mut |s| {
        s.for_each_expr(|e| {
            fn each_load(e: &Expr, f: &mut impl FnMut(&BufferId, &[Expr])) {
                if let Expr::Load { buffer, indices } = e {
                    f(buffer, indices);
                }
                e.for_each_child(|x| each_load(x, f));
            }
            each_load(e, &mut |b, idx| {
                loads_ok &= f.buffer(*b).scope != Scope::Global
                    || !mentions_any(idx, c)
                    || blocked_at_c(b, idx)
                    || per_channel(b, idx);
            });
        });
    });
    let qualifies = simple
        && loads_ok
        && reads_only_own_outputs(&body, f)
        && channels > 0
        && channels % block as i64 == 0
        && headers.iter().all(|h| h.kind == ForKind::Serial && h.extent.as_int().is_some())
        && stores.iter().all(|(b, idx)| blocked_at_c(b, idx));
    if !qualifies {
        return None;
    }
    let decl = &f.vars[c.0 as usize];
    let new_vars = [
        VarDecl { name: format!("{}_block", decl.name), dtype: decl.dtype },
        VarDecl { name: format!("{}_lane", decl.name), dtype: decl.dtype },
    ];
    let (outer, lane) = (VarId(f.vars.len() as u32), VarId(f.vars.len() as u32 + 1));
    let channel = Expr::binary(
        BinOp::Add,
        Expr::binary(BinOp::Mul, Expr::Var(outer), Expr::index(block as i64)),
        Expr::Var(lane),
    );
    let with: HashMap<VarId, Expr> = [(c, channel)].into_iter().collect();
    let body = body.map_exprs(&mut |e| substitute(&e, &with));
    headers[at] = Header { var: outer, extent: Expr::index(channels / block as i64), kind: ForKind::Serial };
    headers.push(Header { var: lane, extent: Expr::index(block as i64), kind: ForKind::Serial });
    Some((rebuild(headers, body), new_vars))
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
    crate::int8::rewrite(module);
    let mut probe = module.clone();
    schedule(&mut probe);
    // Parameters (function, position) worth transposing.
    let access: Vec<VectorAccess> = probe.funcs.iter().map(VectorAccess::of).collect();
    let mut wanted: HashSet<(&str, usize)> = HashSet::new();
    for (f, access) in probe.funcs.iter().zip(&access) {
        for (pos, &p) in f.params.iter().enumerate() {
            if f.buffer(p).shape.len() >= 2 && access.leading_axis_vectorized(p) {
                wanted.insert((f.name.as_str(), pos));
            }
        }
    }
    for ((f, probed), access) in module.funcs.iter_mut().zip(&probe.funcs).zip(&access) {
        if f.target.is_some() {
            continue;
        }
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
            if let Some(stride) = access.strided_innermost(b) {
                f.layout_transforms.insert(b, phase_split(probed.buffer(b).shape.len(), stride));
            }
        }
    }
    let Some(main_index) = module.funcs.iter().position(|f| f.name == heron_ir::loop_ir::MAIN) else { return };
    let main = &module.funcs[main_index];
    let mut constants: HashSet<BufferId> = HashSet::new();
    main.body.walk(&mut |s| {
        if let Stmt::AllocateConst { buffer, .. } = s {
            constants.insert(*buffer);
        }
    });
    // A constant qualifies when every call that receives it wants it transposed.
    let mut verdict: HashMap<BufferId, bool> = HashMap::new();
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(call) = s
            && let Callee::Func(name) = &call.callee
        {
            for (pos, a) in call.args.iter().enumerate() {
                if let Arg::Buffer(b) = a
                    && constants.contains(b)
                {
                    let ok = wanted.contains(&(name.as_str(), pos));
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

/// How a function's buffers are read inside vectorized loops, found in one walk over its body
/// (per buffer, so a function with thousands of buffers is still walked once).
struct VectorAccess {
    /// Some load was seen, and every load is `p[e0, ...]` inside a loop vectorized over `v`,
    /// with `e0` moving by 1 with `v` and the other indices free of `v`; the buffer is neither
    /// stored to nor passed to a call.
    leading: Vec<(bool, bool)>,
    /// `None`: no load seen; `Some(None)`: disqualified; `Some(Some(s))`: every load so far is
    /// `b[..., s*v + k]` inside a loop vectorized over `v` (`s >= 2`), the other indices free
    /// of `v`, and the buffer is not passed to a call.
    strided: Vec<Option<Option<i64>>>,
}

impl VectorAccess {
    fn of(f: &PrimFunc) -> VectorAccess {
        let n = f.buffers.len();
        let mut a = VectorAccess { leading: vec![(false, true); n], strided: vec![None; n] };
        a.walk(&f.body, None);
        a
    }

    /// A buffer worth storing with its leading axis innermost.
    fn leading_axis_vectorized(&self, b: BufferId) -> bool {
        self.leading[b.0 as usize] == (true, true)
    }

    /// The stride of a buffer worth storing phase-split.
    fn strided_innermost(&self, b: BufferId) -> Option<i64> {
        self.strided[b.0 as usize].flatten()
    }

    fn walk(&mut self, s: &Stmt, v: Option<VarId>) {
        let v = match s {
            Stmt::For { var, kind: ForKind::Vectorized(_), .. } => Some(*var),
            _ => v,
        };
        s.for_each_expr(|e| self.loads(e, v));
        match s {
            Stmt::Seq(list) => list.iter().for_each(|x| self.walk(x, v)),
            Stmt::For { body, .. } => self.walk(body, v),
            Stmt::If { then, otherwise, .. } => {
                self.walk(then, v);
                if let Some(o) = otherwise {
                    self.walk(o, v);
                }
            }
            Stmt::Evaluate(call) => {
                for a in &call.args {
                    if let Arg::Buffer(b) = a {
                        self.leading[b.0 as usize].1 = false;
                        self.strided[b.0 as usize] = Some(None);
                    }
                }
            }
            Stmt::Store { buffer, .. } => self.leading[buffer.0 as usize].1 = false,
            _ => {}
        }
    }

    fn loads(&mut self, e: &Expr, v: Option<VarId>) {
        if let Expr::Load { buffer, indices } = e {
            let b = buffer.0 as usize;
            let leading = match (v, indices.split_first()) {
                (Some(v), Some((first, rest))) => {
                    affine_terms(first).is_some_and(|(t, _)| t.get(&v) == Some(&1)) && !mentions_any(rest, v)
                }
                _ => false,
            };
            self.leading[b] = (true, self.leading[b].1 && leading);
            let stride = match (v, indices.split_last()) {
                (Some(v), Some((last, rest))) if !mentions_any(rest, v) => {
                    affine_terms(last).and_then(|(t, _)| t.get(&v).copied()).filter(|&c| c >= 2)
                }
                _ => None,
            };
            self.strided[b] = match (self.strided[b], stride) {
                (None, s) => Some(s),
                (Some(Some(a)), Some(c)) if a == c => Some(Some(a)),
                _ => Some(None),
            };
        }
        e.for_each_child(|c| self.loads(c, v));
    }
}

/// True unless the body stores into a buffer whose layout transform makes neighbours along the
/// last logical axis non-adjacent in memory (a phase-split padded input): such stores cannot
/// be vector stores, so the loop is left scalar instead of being marked vectorized.
fn stores_stay_contiguous(body: &Stmt, f: &PrimFunc) -> bool {
    let mut ok = true;
    body.walk(&mut |s| {
        if let Stmt::Store { buffer, .. } = s
            && let Some(map) = f.layout_transforms.get(buffer)
        {
            ok &= last_axis_contiguous(map, &f.buffer(*buffer).shape);
        }
    });
    ok
}

fn last_axis_contiguous(map: &IndexMap, shape: &[usize]) -> bool {
    let Ok(transformed) = map.transformed_shape(shape) else { return false };
    if shape.last().is_none_or(|&n| n < 2) {
        return true;
    }
    let origin = vec![0i64; shape.len()];
    let mut next = origin.clone();
    *next.last_mut().expect("rank >= 1") = 1;
    let (a, b) = (map.physical_index(&transformed, &origin), map.physical_index(&transformed, &next));
    a.len() == 1 && b.len() == 1 && b[0] - a[0] == 1
}

/// Fewest loop iterations (counting every nested loop) for which a function is worth splitting
/// across threads: below this, waking the workers costs more than it saves. (At 2^16,
/// MobileNet-v3's activations on 14×14 planes stayed on one thread: 2 threads 1.74 -> 1.60 ms
/// at 2^14.)
const MIN_PARALLEL_WORK: u64 = 1 << 14;

/// Marks one loop of each operator function parallel where that is safe and worth it: the
/// function's body is a single perfect chain of loops (besides local allocations), and the
/// outermost serial loop of the chain with constant extent >= 2 whose iterations write disjoint
/// elements of every buffer the body stores to (see [`splits_safely`]), whose body reads
/// no other iteration's output, and whose nest does at least [`MIN_PARALLEL_WORK`] iterations.
/// When only loops of one iteration sit above the vectorized output loop (a matrix-vector
/// product), that loop is split into a parallel loop over chunks around a vector loop; a
/// jammed (`unrolled(k)`) output loop first met (the rows of a 2-d elementwise nest) is split
/// into a parallel loop over chunks of whole jams, or, when its rows do not make two such
/// chunks, the vector loop inside it into chunks around it.
pub fn mark_parallel(module: &mut Module) {
    let block = channel_block(module);
    for f in module.funcs.iter_mut().filter(|f| f.target.is_none() && f.name != heron_ir::loop_ir::MAIN) {
        let Stmt::Seq(items) = &f.body else { continue };
        let mut loops = items.iter().enumerate().filter(|(_, s)| !is_local_allocation(s, f));
        let (Some((index, top)), None) = (loops.next(), loops.next()) else { continue };
        if !matches!(top, Stmt::For { .. }) || iterations(top) < MIN_PARALLEL_WORK {
            continue;
        }
        let mut path = Vec::new();
        let mut cur = top;
        // Whether every loop above `cur` runs once.
        let mut single_iterations = true;
        let chosen = loop {
            let Stmt::For { var, extent, kind, body } = cur else { break None };
            let safe = || extent.as_int().is_some_and(|n| n >= 2) && splits_safely(*var, body, f);
            match kind {
                ForKind::Serial if safe() => break Some((path, None)),
                // A jammed output loop (rows of a 2-d elementwise nest): in chunks of whole
                // jams.
                ForKind::Unrolled(k) if safe() => {
                    if let Some(chunks) = extent.as_int().and_then(|n| unrolled_chunks(n, *k)) {
                        break Some((path, Some(Split::Unrolled(chunks, *k))));
                    }
                    // Rows that do not split into chunks of whole jams (a `[4, N]` elementwise
                    // nest, all its rows one jam): the vector loop inside, in chunks around the
                    // jam.
                    if single_iterations
                        && let Stmt::For { var: v, extent: n, kind: ForKind::Vectorized(_), body: inner } = &**body
                        && splits_safely(*v, inner, f)
                        && let Some(chunks) = n.as_int().and_then(|n| parallel_chunks(n, contains_loop(inner), block))
                        && let repeats_ok = reads_none_of_its_outputs(inner, f)
                        && register_block(n.as_int().unwrap_or(0) / chunks, true, repeats_ok).1 == *k
                    {
                        break Some((path, Some(Split::AroundJam(chunks, repeats_ok))));
                    }
                }
                // No loop above to split (a GEMM with one row): the vector loop itself, in chunks.
                ForKind::Vectorized(_) if single_iterations && safe() => {
                    match extent.as_int().and_then(|n| parallel_chunks(n, contains_loop(body), block)) {
                        Some(chunks) => {
                            break Some((path, Some(Split::Vector(chunks, reads_none_of_its_outputs(body, f)))));
                        }
                        None => break None,
                    }
                }
                _ => {}
            }
            single_iterations &= extent.as_int() == Some(1);
            path.push(());
            cur = body;
        };
        let Some((path, split)) = chosen else { continue };
        let mut vars = std::mem::take(&mut f.vars);
        let Stmt::Seq(items) = &mut f.body else { continue };
        let mut target = &mut items[index];
        for () in path {
            let Stmt::For { body, .. } = target else { break };
            target = body;
        }
        match split {
            None => {
                if let Stmt::For { kind, .. } = target {
                    *kind = ForKind::Parallel;
                }
            }
            Some(split) => {
                let inner = std::mem::replace(target, Stmt::Seq(vec![]));
                *target = split_loop(inner, split, &mut vars);
            }
        }
        f.vars = vars;
    }
}

/// Most chunks a vector loop is split into for threads (a fixed number, so the code does not
/// depend on the thread count; threads take contiguous runs of chunks).
const MAX_PARALLEL_CHUNKS: i64 = 16;

/// The channel block of the module's blocked tensors (`NCHW{B}c`, one `B` per module: the
/// kernels' vector width), or 8 when none is blocked.
fn channel_block(module: &Module) -> i64 {
    let main = module.funcs.iter().find(|f| f.name == heron_ir::loop_ir::MAIN);
    let transforms = main.map(|m| m.layout_transforms.values().collect::<Vec<_>>()).unwrap_or_default();
    let block = heron_kernels::blocked::BLOCKS
        .into_iter()
        .rev()
        .find(|&n| transforms.iter().any(|map| **map == crate::blocking::blocked_map(n)));
    block.map_or(8, |b| b as i64)
}

/// Most channel blocks a reducing vector loop is split into, one block a chunk.
const MAX_BLOCK_CHUNKS: i64 = 256;

/// The number of equal chunks of at least one vector each to split a vector loop of `n`
/// iterations into, `block` the module's channel block. A loop that `reduces` (a loop inside
/// it: a global average, a matrix-vector product) over at most [`MAX_BLOCK_CHUNKS`] whole
/// blocks takes one block a chunk: over a channel-blocked tensor its lanes are then one block's
/// contiguous channels, which other chunks reach only through `// B` and `% B` in every index
/// (measured 5-10x slower), and its reduction is long enough that the shorter vector loop costs
/// nothing. Otherwise the largest divisor of `n` up to [`MAX_PARALLEL_CHUNKS`] whose chunks are
/// runs of whole blocks, when there are at least half that many of them, else the largest
/// divisor (`None`: below 2).
fn parallel_chunks(n: i64, reduces: bool, block: i64) -> Option<i64> {
    if reduces && n % block == 0 && (2..=MAX_BLOCK_CHUNKS).contains(&(n / block)) {
        return Some(n / block);
    }
    let divides = |d: &i64| n % d == 0 && n / d >= LANES;
    let whole_blocks =
        (MAX_PARALLEL_CHUNKS / 2..=MAX_PARALLEL_CHUNKS).rev().find(|d| divides(d) && (n / d) % block == 0);
    whole_blocks.or_else(|| (2..=MAX_PARALLEL_CHUNKS).rev().find(divides))
}

/// Whether `s` holds a loop.
fn contains_loop(s: &Stmt) -> bool {
    let mut found = false;
    s.walk(&mut |s| found |= matches!(s, Stmt::For { .. }));
    found
}

/// How a loop is cut into parallel chunks.
enum Split {
    /// A vector loop in this many chunks; `bool`: its body reads none of its outputs.
    Vector(i64, bool),
    /// A loop unrolled by the factor in this many chunks, each a whole number of unrolls.
    Unrolled(i64, u32),
    /// The vector loop right inside a jammed loop, in this many chunks around the jam; `bool`
    /// as for `Vector`.
    AroundJam(i64, bool),
}

/// Chunks for a loop of `n` iterations unrolled by `k`: the largest count up to
/// [`MAX_PARALLEL_CHUNKS`] (at least 2) that leaves each chunk whole unrolls.
fn unrolled_chunks(n: i64, k: u32) -> Option<i64> {
    let k = i64::from(k.max(1));
    (n % k == 0).then(|| (2..=MAX_PARALLEL_CHUNKS).rev().find(|d| (n / k) % d == 0)).flatten()
}

/// `for v in 0..n { body }` as `for v_chunk in 0..chunks parallel { for v_in in 0..n/chunks
/// { body[v := v_chunk * (n/chunks) + v_in] } }`, the inner loop vectorized (its register
/// block chosen for its own extent) or unrolled as `split` says; or, for
/// [`Split::AroundJam`], the vector loop inside `s` cut so, the chunk loop around `s`. Each
/// chunk writes its own outputs with the same per-element arithmetic, so results do not
/// change.
fn split_loop(s: Stmt, split: Split, vars: &mut Vec<VarDecl>) -> Stmt {
    let Stmt::For { var, extent, kind, body } = s else { return s };
    let (chunks, inner_kind): (i64, &dyn Fn(i64) -> ForKind) = match split {
        Split::Vector(chunks, repeats_ok) => {
            (chunks, &move |len| ForKind::Vectorized(register_block(len, false, repeats_ok).0))
        }
        Split::Unrolled(chunks, k) => (chunks, &move |_| ForKind::Unrolled(k)),
        Split::AroundJam(chunks, repeats_ok) => {
            // `for r unrolled(k) { for v vectorized { body } }` as `for v_chunk parallel { for
            // r unrolled(k) { for v_in vectorized { body } } }`.
            let jam = |body| Stmt::For { var, extent: extent.clone(), kind, body };
            let Stmt::For { var: v, extent: n, kind: v_kind, body: inner } = *body else { return jam(body) };
            let Some((outer, chunk)) = chunked(v, &n, chunks, vars) else {
                return jam(Box::new(Stmt::For { var: v, extent: n, kind: v_kind, body: inner }));
            };
            let vector = Stmt::For {
                var: chunk.var,
                extent: Expr::index(chunk.len),
                kind: ForKind::Vectorized(register_block(chunk.len, true, repeats_ok).0),
                body: Box::new(inner.map_exprs(&mut |e| substitute(&e, &chunk.at))),
            };
            let body = Box::new(jam(Box::new(vector)));
            return Stmt::For { var: outer, extent: Expr::index(chunks), kind: ForKind::Parallel, body };
        }
    };
    let Some((outer, chunk)) = chunked(var, &extent, chunks, vars) else {
        return Stmt::For { var, extent, kind, body };
    };
    let body = body.map_exprs(&mut |e| substitute(&e, &chunk.at));
    let inner_loop =
        Stmt::For { var: chunk.var, extent: Expr::index(chunk.len), kind: inner_kind(chunk.len), body: Box::new(body) };
    Stmt::For { var: outer, extent: Expr::index(chunks), kind: ForKind::Parallel, body: Box::new(inner_loop) }
}

/// The inner loop of a loop over `var` cut into `chunks`: its variable, its length, and
/// `var`'s value in terms of the chunk's and its own.
struct Chunk {
    var: VarId,
    len: i64,
    at: HashMap<VarId, Expr>,
}

/// New variables `var_chunk` (returned) and `var_in` for `var`'s loop of `extent` in `chunks`;
/// `None` unless the extent is a constant.
fn chunked(var: VarId, extent: &Expr, chunks: i64, vars: &mut Vec<VarDecl>) -> Option<(VarId, Chunk)> {
    let len = extent.as_int()? / chunks;
    let decl = vars[var.0 as usize].clone();
    let outer = VarId(vars.len() as u32);
    vars.push(VarDecl { name: format!("{}_chunk", decl.name), dtype: decl.dtype });
    let inner = VarId(vars.len() as u32);
    vars.push(VarDecl { name: format!("{}_in", decl.name), dtype: decl.dtype });
    let at = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, Expr::Var(outer), Expr::index(len)), Expr::Var(inner));
    Some((outer, Chunk { var: inner, len, at: [(var, at)].into_iter().collect() }))
}

fn is_local_allocation(s: &Stmt, f: &PrimFunc) -> bool {
    matches!(s, Stmt::Allocate { buffer, .. } if f.buffer(*buffer).scope == Scope::Local)
}

/// Iterations of every loop in `s`, saturating (a loop of unknown extent counts as large).
fn iterations(s: &Stmt) -> u64 {
    match s {
        Stmt::For { extent, body, .. } => {
            let n = extent.as_int().map_or(MIN_PARALLEL_WORK, |n| n.max(0) as u64);
            n.saturating_mul(iterations(body).max(1))
        }
        Stmt::Seq(v) => v.iter().map(iterations).fold(0, u64::saturating_add),
        Stmt::If { then, otherwise, .. } => {
            iterations(then).saturating_add(otherwise.as_ref().map_or(0, |o| iterations(o)))
        }
        _ => 1,
    }
}

/// Whether iterations of a loop over `var` with `body` may run on different threads: the
/// global stores into each buffer share an index position that is `var` itself, or `var · k`
/// plus terms of loops inside the body that stay below `k` (a channel block and its lanes), with
/// one `k` per buffer, so iterations write disjoint elements; and loads of the buffers the body
/// writes read only the element being written.
fn splits_safely(var: VarId, body: &Stmt, f: &PrimFunc) -> bool {
    // The largest extent of each loop variable inside (a variable may name sibling loops).
    let mut extents: HashMap<VarId, i64> = HashMap::new();
    body.walk(&mut |s| {
        if let Stmt::For { var, extent, .. } = s {
            let n = extent.as_int().unwrap_or(i64::MAX);
            let e = extents.entry(*var).or_insert(n);
            *e = (*e).max(n);
        }
    });
    // `Some(k)` when `e` is `var · k` plus inner terms spanning less than `k`.
    let stride = |e: &Expr| -> Option<i64> {
        if matches!(e, Expr::Var(v) if *v == var) {
            return Some(1);
        }
        let (terms, 0) = affine_terms(e)? else { return None };
        let k = *terms.get(&var)?;
        let mut span = 0i64;
        for (v, &coefficient) in terms.iter().filter(|(v, _)| **v != var) {
            let n = *extents.get(v)?;
            if coefficient <= 0 || n < 1 {
                return None;
            }
            span = span.checked_add(coefficient.checked_mul(n - 1)?)?;
        }
        (span < k).then_some(k)
    };
    // Per buffer, the (position, k) pairs every store so far owns.
    let mut owned: HashMap<BufferId, HashSet<(usize, i64)>> = HashMap::new();
    let mut stores = 0;
    body.walk(&mut |s| {
        if let Stmt::Store { buffer, indices, .. } = s
            && f.buffer(*buffer).scope == Scope::Global
        {
            stores += 1;
            let here: HashSet<(usize, i64)> =
                indices.iter().enumerate().filter_map(|(p, e)| stride(e).map(|k| (p, k))).collect();
            owned.entry(*buffer).and_modify(|o| o.retain(|x| here.contains(x))).or_insert(here);
        }
    });
    stores > 0 && owned.values().all(|o| !o.is_empty()) && reads_only_own_outputs(body, f)
}
