//! Integer dot products for the CPU: the reductions of `MatMulInteger` and `ConvInteger`
//! (`acc += (x - zx) * (w - zw)` over u8/i8 bytes) rewritten into the shape the vector
//! translator emits as AVX-VNNI `vpdpbusd`: four unsigned-by-signed byte products summed into
//! each i32 lane (Cranelift fuses the widening dot-product tree into that instruction).
//!
//! The rewrite works on the logical loop IR, before layouts are applied:
//! - a reduction loop whose variable indexes both operands directly (a convolution's input
//!   channels, a GEMM's K) is split into quads, the position in the quad innermost
//!   (`for rr in 0..4`);
//! - each operand is stored with that axis blocked by 4 innermost
//!   ([`heron_ir::loop_ir::layouts::axis_blocked`]), so a quad is 4 contiguous bytes: constant
//!   weights through `main`'s layout transforms, scratch (a convolution's padded input)
//!   directly, any other operand through a staging copy (unless the axis is already innermost);
//! - one operand is made unsigned and the other signed by flipping the top bit of an i8
//!   operand (`x + 128`) or of a u8 one (`w - 128`), and the zero points and flips move out of
//!   the loop: `Σ (x - zx)(w - zw) = Σ x'w' + β Σ x' - α Σ w' - n α β` with `α = ox + zx` and
//!   `β = ow - zw` (`ox`, `ow` the flips). `Σ x'` and `Σ w'` are computed by their own nests,
//!   once per index they depend on (a convolution's weight sums once per output channel), and
//!   skipped when their factor is a known zero; zero points that are constants in `main` are
//!   folded in.
//!
//! All of it is exact wrapping i32 algebra, like the original reduction, so the loop-IR
//! interpreter runs the rewritten program too (the property tests compare both).

use std::collections::{HashMap, btree_map};
use std::sync::Arc;

use heron_ir::loop_ir::analysis::{mentions, substitute};
use heron_ir::loop_ir::layouts::axis_blocked;
use heron_ir::loop_ir::{
    Arg, BinOp, Buffer, BufferId, Callee, Expr, ForKind, IndexMap, MAIN, Module, PrimFunc, Scope, Stmt, VarDecl, VarId,
};
use heron_ir::{DType, Tensor};

/// Bytes per lane of one dot-product instruction.
pub const QUAD: i64 = 4;

/// One factor of the product: `cast<i32>(buffer[indices]) - zero`.
#[derive(Clone, Debug)]
pub(crate) struct Factor {
    pub(crate) buffer: BufferId,
    pub(crate) indices: Vec<Expr>,
    /// The zero point subtracted (an i32 expression), if any.
    pub(crate) zero: Option<Expr>,
}

/// `for o.. { acc = 0; for r.. { acc = acc + p * q }; rest }`: the output nest of an integer
/// GEMM or convolution as lowered.
struct DotNest {
    outputs: Vec<(VarId, i64)>,
    acc: BufferId,
    acc_indices: Vec<Expr>,
    reductions: Vec<(VarId, i64)>,
    factors: [Factor; 2],
    rest: Vec<Stmt>,
}

/// What `main` passes to the operator functions.
struct Callers {
    /// Per function: per call, the buffer passed at each position (None for expressions).
    args: HashMap<String, Vec<Vec<Option<BufferId>>>>,
    /// `main`'s constants.
    constants: HashMap<BufferId, Arc<Tensor>>,
}

impl Callers {
    fn of(main: &PrimFunc) -> Callers {
        let mut args: HashMap<String, Vec<Vec<Option<BufferId>>>> = HashMap::new();
        let mut constants = HashMap::new();
        main.body.walk(&mut |s| match s {
            Stmt::Evaluate(call) => {
                if let Callee::Func(name) = &call.callee {
                    let passed =
                        call.args.iter().map(|a| if let Arg::Buffer(b) = a { Some(*b) } else { None }).collect();
                    args.entry(name.clone()).or_default().push(passed);
                }
            }
            Stmt::AllocateConst { buffer, data, .. } => {
                constants.insert(*buffer, data.clone());
            }
            _ => {}
        });
        Callers { args, constants }
    }

    /// The constants `main` passes as parameter `pos` of `func`, when every call passes one.
    fn constant_args(&self, func: &str, pos: usize) -> Option<Vec<BufferId>> {
        let calls = self.args.get(func)?;
        calls.iter().map(|c| c.get(pos).copied().flatten().filter(|b| self.constants.contains_key(b))).collect()
    }

    /// The value every element of parameter `pos` of `func` has in every call, when it is
    /// constant.
    fn constant_value(&self, func: &str, pos: usize) -> Option<i64> {
        let mut value = None;
        for b in self.constant_args(func, pos)? {
            for v in self.constants[&b].to_i64_vec()? {
                if *value.get_or_insert(v) != v {
                    return None;
                }
            }
        }
        value
    }
}

/// Rewrites the integer dot-product nests of every operator function of `module`.
pub fn rewrite(module: &mut Module) {
    let Some(mi) = module.funcs.iter().position(|f| f.name == MAIN) else { return };
    let callers = Callers::of(&module.funcs[mi]);
    for fi in 0..module.funcs.len() {
        // Functions another target claimed are its own.
        if fi == mi || module.funcs[fi].target.is_some() {
            continue;
        }
        let (f, main) = if fi < mi {
            let (a, b) = module.funcs.split_at_mut(mi);
            (&mut a[fi], &mut b[0])
        } else {
            let (a, b) = module.funcs.split_at_mut(fi);
            (&mut b[0], &mut a[mi])
        };
        let items = f.take_body();
        let mut out = Vec::with_capacity(items.len());
        for s in items {
            match match_nest(&s, f).and_then(|n| Rewriter { f: &mut *f, main: &mut *main, callers: &callers }.nest(n)) {
                Some(stmts) => out.extend(stmts),
                None => out.push(s),
            }
        }
        f.body = Stmt::Seq(out);
    }
}

/// The perfectly nested serial loops of constant extent at the top of `s`, and what they
/// hold.
pub(crate) fn peel(s: &Stmt) -> (Vec<(VarId, i64)>, &Stmt) {
    let mut loops = Vec::new();
    let mut cur = s;
    while let Stmt::For { var, extent, kind: ForKind::Serial, body } = cur {
        let Some(n) = extent.as_int() else { break };
        loops.push((*var, n));
        cur = body;
    }
    (loops, cur)
}

fn match_nest(s: &Stmt, f: &PrimFunc) -> Option<DotNest> {
    let (outputs, body) = peel(s);
    let Stmt::Seq(items) = body else { return None };
    let [Stmt::Store { buffer: acc, indices: acc_indices, value: init }, reduce, rest @ ..] = &items[..] else {
        return None;
    };
    let accumulator = f.buffer(*acc);
    if outputs.is_empty() || accumulator.scope != Scope::Local || accumulator.dtype != DType::I32 {
        return None;
    }
    if !matches!(init, Expr::Int { value: 0, .. }) {
        return None;
    }
    let (reductions, inner) = peel(reduce);
    let Stmt::Store { buffer, indices, value: Expr::Binary { op: BinOp::Add, lhs, rhs } } = inner else {
        return None;
    };
    let reads_acc = matches!(&**lhs, Expr::Load { buffer: b, indices: i } if b == acc && i == acc_indices);
    if reductions.is_empty() || buffer != acc || indices != acc_indices || !reads_acc {
        return None;
    }
    let Expr::Binary { op: BinOp::Mul, lhs: p, rhs: q } = &**rhs else { return None };
    let reduction_vars: Vec<VarId> = reductions.iter().map(|r| r.0).collect();
    let factors = [factor(p, f, &reduction_vars)?, factor(q, f, &reduction_vars)?];
    Some(DotNest { outputs, acc: *acc, acc_indices: acc_indices.clone(), reductions, factors, rest: rest.to_vec() })
}

/// `cast<i32>(b[...])` or `cast<i32>(b[...]) - zero` for a u8/i8 buffer `b`, with the zero
/// point independent of the reduction.
pub(crate) fn factor(e: &Expr, f: &PrimFunc, reduction: &[VarId]) -> Option<Factor> {
    match e {
        Expr::Cast { dtype: DType::I32, value } => match &**value {
            Expr::Load { buffer, indices }
                if matches!(f.buffer(*buffer).dtype, DType::U8 | DType::I8) && !indices.iter().any(has_load) =>
            {
                Some(Factor { buffer: *buffer, indices: indices.clone(), zero: None })
            }
            _ => None,
        },
        Expr::Binary { op: BinOp::Sub, lhs, rhs } if rhs.dtype(f) == DType::I32 => {
            let mut x = factor(lhs, f, reduction)?;
            if x.zero.is_some() || reduction.iter().any(|&r| mentions(rhs, r)) {
                return None;
            }
            x.zero = Some((**rhs).clone());
            Some(x)
        }
        _ => None,
    }
}

fn has_load(e: &Expr) -> bool {
    let mut found = matches!(e, Expr::Load { .. });
    e.for_each_child(|c| found |= has_load(c));
    found
}

/// The axis of `indices` that is exactly `r`, when no other axis mentions `r`.
fn direct_axis(indices: &[Expr], r: VarId) -> Option<usize> {
    let mut axes = indices.iter().enumerate().filter(|(_, e)| mentions(e, r));
    let (axis, e) = axes.next()?;
    (axes.next().is_none() && *e == Expr::Var(r)).then_some(axis)
}

fn i32c(v: i64) -> Expr {
    Expr::int(v, DType::I32)
}

/// `a op b` on i32 expressions (add, sub or mul), folding constants and identities.
fn fold(op: BinOp, a: Expr, b: Expr) -> Expr {
    if let (Some(x), Some(y)) = (a.as_int(), b.as_int()) {
        let (x, y) = (x as i32, y as i32);
        let v = match op {
            BinOp::Add => x.wrapping_add(y),
            BinOp::Sub => x.wrapping_sub(y),
            _ => x.wrapping_mul(y),
        };
        return i32c(v as i64);
    }
    match (op, a.as_int(), b.as_int()) {
        (BinOp::Add, Some(0), _) | (BinOp::Mul, Some(1), _) => b,
        (BinOp::Add | BinOp::Sub, _, Some(0)) | (BinOp::Mul, _, Some(1)) => a,
        _ => Expr::binary(op, a, b),
    }
}

fn add(a: Expr, b: Expr) -> Expr {
    fold(BinOp::Add, a, b)
}

fn sub(a: Expr, b: Expr) -> Expr {
    fold(BinOp::Sub, a, b)
}

fn mul(a: Expr, b: Expr) -> Expr {
    fold(BinOp::Mul, a, b)
}

/// A factor's byte as the instruction reads it: its value moved into the other signedness by
/// `shift` (`+128` makes an i8 unsigned, `-128` a u8 signed).
fn byte(buffer: BufferId, indices: Vec<Expr>, shift: i64) -> Expr {
    add(Expr::cast(DType::I32, Expr::load(buffer, indices)), i32c(shift))
}

/// Where a factor is read from in the rewritten nest.
struct Source {
    buffer: BufferId,
    dtype: DType,
    indices: Vec<Expr>,
}

struct Rewriter<'a> {
    f: &'a mut PrimFunc,
    main: &'a mut PrimFunc,
    callers: &'a Callers,
}

impl Rewriter<'_> {
    fn new_var(&mut self, base: &str) -> VarId {
        let name = format!("{base}{}", self.f.vars.len());
        self.f.vars.push(VarDecl { name, dtype: DType::I64 });
        VarId(self.f.vars.len() as u32 - 1)
    }

    fn new_buffer(&mut self, name: String, dtype: DType, shape: Vec<usize>, scope: Scope) -> BufferId {
        let name = format!("{name}_{}", self.f.buffers.len());
        self.f.buffers.push(Buffer { scope, ..Buffer::new(name, dtype, shape) });
        BufferId(self.f.buffers.len() as u32 - 1)
    }

    /// The replacement for `nest`: staging copies and operand sums, then the rewritten nest;
    /// None (nothing changed) when it does not qualify.
    fn nest(&mut self, nest: DotNest) -> Option<Vec<Stmt>> {
        // The reduction to split: the longest whose variable indexes both factors directly.
        let (ri, r, n) = nest
            .reductions
            .iter()
            .enumerate()
            .filter(|(_, (_, n))| *n >= QUAD && n % QUAD == 0)
            .filter(|(_, (r, _))| nest.factors.iter().all(|x| direct_axis(&x.indices, *r).is_some()))
            .max_by_key(|(i, (_, n))| (*n, std::cmp::Reverse(*i)))
            .map(|(i, &(r, n))| (i, r, n))?;
        let mut prelude = Vec::new();
        let sources = [0, 1].map(|k| self.source(&nest.factors[k], r, &mut prelude));
        // Which factor is read unsigned and which signed, and the flips that make them so.
        let (u, s) = match (sources[0].dtype, sources[1].dtype) {
            (DType::I8, DType::U8) => (1, 0),
            _ => (0, 1),
        };
        let u_shift = if sources[u].dtype == DType::I8 { 128 } else { 0 };
        let s_shift = if sources[s].dtype == DType::U8 { -128 } else { 0 };
        let zero = |k: usize, this: &Self| nest.factors[k].zero.clone().map_or(i32c(0), |z| this.fold_constant(z));
        // x = x' - u_shift and w = w' + (-s_shift): α = u_shift + zx, β = -s_shift - zw.
        let alpha = add(i32c(u_shift), zero(u, self));
        let beta = sub(i32c(-s_shift), zero(s, self));
        let count: i64 = nest.reductions.iter().map(|r| r.1).product();

        // The main reduction, split into quads.
        let (rq, rr) = (self.new_var("rq"), self.new_var("rr"));
        let split = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, Expr::Var(rq), Expr::index(QUAD)), Expr::Var(rr));
        let at = |src: &Source| substitute_all(&src.indices, &HashMap::from([(r, split.clone())]));
        let product =
            mul(byte(sources[u].buffer, at(&sources[u]), u_shift), byte(sources[s].buffer, at(&sources[s]), s_shift));
        let update = Stmt::Store {
            buffer: nest.acc,
            indices: nest.acc_indices.clone(),
            value: add(Expr::load(nest.acc, nest.acc_indices.clone()), product),
        };
        let reduce = quad_nest(&nest.reductions, ri, rq, rr, update);

        // Operand sums and the epilogue that applies them.
        let mut epilogue = Expr::load(nest.acc, nest.acc_indices.clone());
        let mut sum_acc = None;
        if beta.as_int() != Some(0) {
            let (stmts, sum) = self.sums(&nest, &sources[u], u_shift, ri, n, &mut sum_acc);
            prelude.extend(stmts);
            epilogue = add(epilogue, mul(beta.clone(), sum));
        }
        if alpha.as_int() != Some(0) {
            let (stmts, sum) = self.sums(&nest, &sources[s], s_shift, ri, n, &mut sum_acc);
            prelude.extend(stmts);
            epilogue = sub(epilogue, mul(alpha.clone(), sum));
        }
        if alpha.as_int() != Some(0) && beta.as_int() != Some(0) {
            epilogue = sub(epilogue, mul(i32c(count), mul(alpha, beta)));
        }
        let mut body =
            vec![Stmt::Store { buffer: nest.acc, indices: nest.acc_indices.clone(), value: i32c(0) }, reduce];
        if !matches!(&epilogue, Expr::Load { buffer, .. } if *buffer == nest.acc) {
            body.push(Stmt::Store { buffer: nest.acc, indices: nest.acc_indices.clone(), value: epilogue });
        }
        body.extend(nest.rest);
        prelude.push(wrap(&nest.outputs, Stmt::Seq(body)));
        Some(prelude)
    }

    /// `z` with loads of parameters that are the same constant in every call folded in.
    fn fold_constant(&self, z: Expr) -> Expr {
        let f = &*self.f;
        z.map(&mut |e| match e {
            Expr::Load { buffer, .. } if f.params.contains(&buffer) => {
                let pos = f.params.iter().position(|p| *p == buffer).expect("a parameter");
                match self.callers.constant_value(&f.name, pos) {
                    Some(v) => Expr::int(v, f.buffer(buffer).dtype),
                    None => e,
                }
            }
            // Integer values fit every integer type they are cast to here (bytes into i32).
            Expr::Cast { dtype: DType::I32, value } if matches!(*value, Expr::Int { .. }) => {
                Expr::int(value.as_int().expect("an integer"), DType::I32)
            }
            other => other,
        })
    }

    /// Where factor `x` is read from, with its split axis blocked by quads innermost: the
    /// buffer itself when that needs no layout or takes one, else a staging copy (its nest
    /// appended to `prelude`).
    fn source(&mut self, x: &Factor, r: VarId, prelude: &mut Vec<Stmt>) -> Source {
        let buf = self.f.buffer(x.buffer).clone();
        let axis = direct_axis(&x.indices, r).expect("checked by the caller");
        let rank = buf.shape.len();
        // Row-major already keeps a quad contiguous when the axis is innermost.
        let map = if axis == rank - 1 { IndexMap::identity(rank) } else { axis_blocked(rank, axis, QUAD as usize) };
        let same = Source { buffer: x.buffer, dtype: buf.dtype, indices: x.indices.clone() };
        if let Some(pos) = self.f.params.iter().position(|p| *p == x.buffer) {
            // Constants take the layout in `main` (pinned, so no later choice moves them);
            // other arguments are row-major unless `main` lays them out.
            if let Some(constants) = self.callers.constant_args(&self.f.name, pos) {
                if constants.iter().all(|c| self.main.layout_transforms.get(c).is_none_or(|m| *m == map)) {
                    for c in constants {
                        self.main.layout_transforms.insert(c, map.clone());
                    }
                    return same;
                }
            } else if axis == rank - 1 && self.main_layouts(pos).is_some_and(|maps| maps.iter().all(Option::is_none)) {
                return same;
            }
        } else if let btree_map::Entry::Vacant(slot) = self.f.layout_transforms.entry(x.buffer) {
            if axis != rank - 1 {
                slot.insert(map);
            }
            return same;
        }
        // A staging copy in the blocked layout.
        let stage = self.new_buffer(format!("{}_quads", buf.name), buf.dtype, buf.shape.clone(), Scope::Global);
        if axis != rank - 1 {
            self.f.layout_transforms.insert(stage, map);
        }
        let vars: Vec<VarId> = (0..rank).map(|_| self.new_var("s")).collect();
        let idx: Vec<Expr> = vars.iter().map(|&v| Expr::Var(v)).collect();
        let copy = Stmt::Store { buffer: stage, indices: idx.clone(), value: Expr::load(x.buffer, idx) };
        let loops: Vec<(VarId, i64)> = vars.iter().zip(&buf.shape).map(|(&v, &n)| (v, n as i64)).collect();
        prelude.push(Stmt::Allocate { buffer: stage, pools: vec![] });
        prelude.push(wrap(&loops, copy));
        Source { buffer: stage, dtype: buf.dtype, indices: x.indices.clone() }
    }

    /// Layouts `main` gives the arguments passed as parameter `pos`, per call (None when some
    /// call passes no buffer).
    fn main_layouts(&self, pos: usize) -> Option<Vec<Option<IndexMap>>> {
        let calls = self.callers.args.get(&self.f.name)?;
        calls
            .iter()
            .map(|c| c.get(pos).copied().flatten().map(|b| self.main.layout_transforms.get(&b).cloned()))
            .collect()
    }

    /// Fresh variables named `prefix` for `loops`, with the old variables renamed to them.
    fn fresh_loops(
        &mut self,
        loops: &[(VarId, i64)],
        prefix: &str,
        rename: &mut HashMap<VarId, Expr>,
    ) -> Vec<(VarId, i64)> {
        loops
            .iter()
            .map(|&(old, n)| {
                let v = self.new_var(prefix);
                rename.insert(old, Expr::Var(v));
                (v, n)
            })
            .collect()
    }

    /// A nest computing, per value of the output variables `src` depends on, the sum of its
    /// bytes (as the instruction reads them) over the reduction; returns the statements and
    /// the expression reading the sum inside the output nest.
    fn sums(
        &mut self,
        nest: &DotNest,
        src: &Source,
        shift: i64,
        ri: usize,
        n: i64,
        sum_acc: &mut Option<BufferId>,
    ) -> (Vec<Stmt>, Expr) {
        let mut stmts = Vec::new();
        let acc = *sum_acc.get_or_insert_with(|| {
            let b = self.new_buffer("sum_acc".into(), DType::I32, vec![1], Scope::Local);
            stmts.push(Stmt::Allocate { buffer: b, pools: vec![] });
            b
        });
        let used: Vec<(VarId, i64)> =
            nest.outputs.iter().copied().filter(|&(o, _)| src.indices.iter().any(|e| mentions(e, o))).collect();
        let shape: Vec<usize> = if used.is_empty() { vec![1] } else { used.iter().map(|&(_, n)| n as usize).collect() };
        let name = format!("{}_sums", self.f.buffer(src.buffer).name);
        let sums = self.new_buffer(name, DType::I32, shape, Scope::Global);
        // Fresh variables for the sum nest's own loops.
        let mut rename: HashMap<VarId, Expr> = HashMap::new();
        let outer = self.fresh_loops(&used, "so", &mut rename);
        let reductions = self.fresh_loops(&nest.reductions, "sr", &mut rename);
        let (rq, rr) = (self.new_var("rq"), self.new_var("rr"));
        let split = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, Expr::Var(rq), Expr::index(QUAD)), Expr::Var(rr));
        debug_assert_eq!(nest.reductions[ri].1, n);
        rename.insert(nest.reductions[ri].0, split);
        let value = byte(src.buffer, substitute_all(&src.indices, &rename), shift);
        let one = i32c(1);
        let update = Stmt::Store {
            buffer: acc,
            indices: vec![Expr::index(0)],
            value: add(Expr::load(acc, vec![Expr::index(0)]), Expr::binary(BinOp::Mul, value, one)),
        };
        let at = |vars: &[(VarId, i64)]| -> Vec<Expr> {
            if vars.is_empty() { vec![Expr::index(0)] } else { vars.iter().map(|&(v, _)| Expr::Var(v)).collect() }
        };
        let body = Stmt::Seq(vec![
            Stmt::Store { buffer: acc, indices: vec![Expr::index(0)], value: i32c(0) },
            quad_nest(&reductions, ri, rq, rr, update),
            Stmt::Store { buffer: sums, indices: at(&outer), value: Expr::load(acc, vec![Expr::index(0)]) },
        ]);
        stmts.push(Stmt::Allocate { buffer: sums, pools: vec![] });
        stmts.push(wrap(&outer, body));
        (stmts, Expr::load(sums, at(&used)))
    }
}

/// `indices` with variables replaced.
fn substitute_all(indices: &[Expr], with: &HashMap<VarId, Expr>) -> Vec<Expr> {
    indices.iter().map(|e| substitute(e, with)).collect()
}

/// The reduction loops with loop `ri` split into its quads (`rq`) and the position in the quad
/// (`rr`, marked unrolled so the schedule keeps it innermost) around `body`. The quads run
/// inside the other reduction loops: a long loop with a small body (one quad per register),
/// where a short kernel window inside would be unrolled into one block too big for the
/// registers.
fn quad_nest(reductions: &[(VarId, i64)], ri: usize, rq: VarId, rr: VarId, body: Stmt) -> Stmt {
    let inner =
        Stmt::For { var: rr, extent: Expr::index(QUAD), kind: ForKind::Unrolled(QUAD as u32), body: Box::new(body) };
    let mut loops: Vec<(VarId, i64)> =
        reductions.iter().enumerate().filter(|&(i, _)| i != ri).map(|(_, &l)| l).collect();
    loops.push((rq, reductions[ri].1 / QUAD));
    wrap(&loops, inner)
}

/// `body` inside serial loops, the first outermost.
fn wrap(loops: &[(VarId, i64)], body: Stmt) -> Stmt {
    loops.iter().rev().fold(body, |b, &(var, n)| Stmt::For {
        var,
        extent: Expr::index(n),
        kind: ForKind::Serial,
        body: Box::new(b),
    })
}
