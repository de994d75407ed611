//! Loops marked vectorized, emitted with 128-bit SIMD in the register shape the target chose
//! ([`VectorShape`]: vectors per block and tail), optionally jammed with an unrolled loop
//! around them. The tiling is decided by the target (`crate::schedule`) and printed in the
//! loop IR; this module only emits it.
//!
//! `for v in 0..n vectorized(lanes=4, vectors=U, tail=T) { body }` runs its main part `4 * U`
//! iterations at a time: every value that depends on `v` becomes U four-lane registers (F32X4
//! for f32, I32X4 for i32 and for i8/u8/i16/u16 loads widened by sign, I32X4 masks for
//! conditions), everything else stays scalar and is computed once, through the ordinary scalar
//! translator. Loads and stores whose index moves by 1 with `v` are vector loads/stores; by 0,
//! a scalar broadcast; by another constant or non-affinely (clamped padding reads), lane-by-lane
//! gathers; index comparisons (padding guards) become lane masks. Loop-local accumulators become
//! vector registers, inner (reduction) loops stay loops around vector bodies, unrolled as
//! marked, so a convolution or GEMM reduction keeps U vectors of outputs in registers. The
//! tail runs as scalar iterations, as single vectors overlapping the main part (`overlap`), or
//! the whole row is one block whose vector starts are clamped to `n - 4` (`clamp`).
//!
//! `for j in 0..m unrolled(J) { for v in 0..n vectorized(..) { body } }` is unrolled-and-jammed:
//! J copies of the body (j, j+1, ...) share each inner loop, so a J x U block of outputs stays
//! in registers and a value that does not depend on `j` (an input vector) is loaded once for
//! all J. This is the register-blocked microkernel shape (4 output channels x 12 positions),
//! with multiply-adds fused when the ISA has FMA.
//!
//! Branches on varying conditions are predicated when they only update registers (max pooling's
//! running maximum): both sides run and each lane keeps its own outcome.
//!
//! Anything else (varying i64 or narrow arithmetic, data-dependent indices, memory writes under
//! varying conditions, calls) is left to the scalar translator: [`try_emit`] says so before emitting
//! anything.

use std::collections::{HashMap, HashSet};

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::types::{F32, F32X4, F64, I8, I8X16, I16, I16X8, I32, I32X4, I64, I64X2};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::Variable;
use heron_ir::DType;
use heron_ir::loop_ir::analysis::{VarRanges, affine_terms, substitute};
use heron_ir::loop_ir::{
    BinOp, BufferId, Expr, ForKind, MathOp, PrimFunc, Scope, Stmt, VarId, VectorShape, VectorTail,
};

use crate::CodegenError;
use crate::codegen::{Buf, FuncTranslator};
use crate::int8::QUAD;
use crate::math;

const LANES: i64 = 4;

/// The loop being vectorized and the optional jammed loop around it.
#[derive(Clone, Copy)]
struct Shape {
    v: VarId,
    jam: Option<VarId>,
    /// Vectors per value.
    u: usize,
    /// Jammed copies (1 without jam).
    j: usize,
    /// A row shorter than its block runs as one block whose vectors start at `4u` but at most
    /// here (the last overlaps its neighbour), so the whole row shares one reduction pass.
    cap: Option<i64>,
}

impl Shape {
    /// First lane of vector `u` within a block.
    fn offset(&self, u: usize) -> i64 {
        let at = LANES * u as i64;
        self.cap.map_or(at, |c| at.min(c))
    }
}

/// A value in vector mode: scalar or U vectors, shared by all jammed copies or one per copy.
#[derive(Clone, Debug)]
struct Tile {
    per_j: bool,
    vector: bool,
    vals: Vec<Value>,
}

impl Tile {
    fn uniform(v: Value) -> Tile {
        Tile { per_j: false, vector: false, vals: vec![v] }
    }

    fn at(&self, sh: Shape, j: usize, u: usize) -> Value {
        let jj = if self.per_j { j } else { 0 };
        if self.vector { self.vals[jj * sh.u + u] } else { self.vals[jj] }
    }
}

/// What the body depends on: the vectorized variable, the jammed one.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Deps {
    v: bool,
    j: bool,
}

impl Deps {
    fn or(self, o: Deps) -> Deps {
        Deps { v: self.v || o.v, j: self.j || o.j }
    }
}

struct VecCtx {
    sh: Shape,
    /// Integer `let`s, substituted into index expressions.
    index_lets: HashMap<VarId, Expr>,
    /// Float `let`s in vector mode.
    tile_lets: HashMap<VarId, Tile>,
    /// Loop-local buffers as vector registers: per element, J x U variables.
    locals: HashMap<BufferId, Vec<Variable>>,
    /// The lanes whose register updates count, inside branches on varying conditions.
    pred: Option<Tile>,
    /// Buffers the body stores to: loop-local ones among them are vector registers; the others
    /// (a softmax's row maximum and sum) are loop-invariant scalars.
    written: HashSet<BufferId>,
}

/// Vectorizes `for var in 0..extent { body }` with the register shape the target chose (jammed
/// `factor` times with `jam` = (var, extent, factor) when given); returns false, having
/// emitted nothing, when the body is not of a supported form.
pub(crate) fn try_emit(
    t: &mut FuncTranslator<'_>,
    var: VarId,
    extent: &Expr,
    shape: VectorShape,
    body: &Stmt,
    jam: Option<(VarId, &Expr, u32)>,
) -> Result<bool, CodegenError> {
    if i64::from(shape.lanes) != LANES {
        return Err(t.unsupported(format!("{} lanes per vector (this code generator emits {LANES})", shape.lanes)));
    }
    let cap = match shape.tail {
        VectorTail::Clamp => Some(
            extent
                .as_int()
                .map(|n| n - LANES)
                .ok_or_else(|| t.unsupported("a clamped vector block of unknown extent"))?,
        ),
        _ => None,
    };
    let sh = Shape {
        v: var,
        jam: jam.map(|(v, _, _)| v),
        u: shape.vectors as usize,
        j: jam.map_or(1, |(_, _, k)| k as usize),
        cap,
    };
    let mut ranges = t.ranges.clone();
    ranges.set(var, loop_range(&ranges, extent));
    if let Some((jv, e, _)) = jam {
        ranges.set(jv, loop_range(&ranges, e));
    }
    let mut stored: HashMap<BufferId, Vec<Expr>> = HashMap::new();
    body.walk(&mut |s| {
        if let Stmt::Store { buffer, indices, .. } = s {
            stored.entry(*buffer).or_default().push(t.linear_index(*buffer, indices));
        }
    });
    let mut check = Checker {
        t,
        sh,
        ranges,
        depth: 0,
        predicated: 0,
        defined: HashSet::new(),
        stored,
        index_lets: HashMap::new(),
        float_lets: HashMap::new(),
    };
    if check.deps(extent).v || !check.stmt(body) {
        return Ok(false);
    }
    if let Some((_, e, _)) = jam
        && (check.deps(e).v || check.deps(e).j)
    {
        return Ok(false);
    }
    // Registers live only inside the loop: a loop-local buffer the body writes must not be read
    // anywhere else in the function (its scalar copy would be stale).
    let count_loads = |s: &Stmt, b: BufferId| {
        let mut n = 0usize;
        s.walk(&mut |x| x.for_each_expr(|e| n += loads_of(e, b)));
        n
    };
    let escapes = check
        .stored
        .keys()
        .any(|&b| t.f.buffer(b).scope == Scope::Local && count_loads(&t.f.body, b) != count_loads(body, b));
    if escapes {
        return Ok(false);
    }
    t.ranges = check.ranges;
    let overlap = shape.tail == VectorTail::Overlap;
    match jam {
        None => emit_v_loop(t, sh, extent, body, None, overlap)?,
        Some((jv, jext, _)) => {
            let m = t.expr(jext)?;
            let main_end = round_down(t, m, sh.j as i64);
            let start = t.b.ins().iconst(I64, 0);
            t.counted_loop(jv, start, main_end, sh.j as i64, |t| {
                let jb = t.b.use_var(t.var(jv)?);
                emit_v_loop(t, sh, extent, body, Some(jb), overlap)
            })?;
            // Left-over copies one at a time.
            let single = Shape { j: 1, ..sh };
            t.counted_loop(jv, main_end, m, 1, |t| {
                let jb = t.b.use_var(t.var(jv)?);
                emit_v_loop(t, single, extent, body, Some(jb), overlap)
            })?;
        }
    }
    Ok(true)
}

fn round_down(t: &mut FuncTranslator<'_>, n: Value, step: i64) -> Value {
    let q = t.b.ins().sdiv_imm_s(n, step);
    t.b.ins().imul_imm_s(q, step)
}

/// The vector main loop over `v` and the remainder, for jam base `jb` (if jammed). With
/// `overlap` (extent >= 4, body free of read-after-write), the remainder is single vectors, the
/// last one ending exactly at the extent; otherwise scalar iterations.
fn emit_v_loop(
    t: &mut FuncTranslator<'_>,
    sh: Shape,
    extent: &Expr,
    body: &Stmt,
    jb: Option<Value>,
    overlap: bool,
) -> Result<(), CodegenError> {
    let zero = t.b.ins().iconst(I64, 0);
    let mut ctx = VecCtx::new(sh, body);
    if sh.cap.is_some() {
        let one = t.b.ins().iconst(I64, 1);
        return t.counted_loop(sh.v, zero, one, 1, |t| ctx.stmt(t, body, jb));
    }
    let n = t.expr(extent)?;
    let step = LANES * sh.u as i64;
    let main_end = round_down(t, n, step);
    t.counted_loop(sh.v, zero, main_end, step, |t| ctx.stmt(t, body, jb))?;
    if overlap {
        let last = t.b.ins().iadd_imm_s(n, -LANES);
        let one = Shape { u: 1, ..sh };
        let mut tail = VecCtx::new(one, body);
        return t.counted_loop(sh.v, main_end, n, LANES, |t| {
            let var = t.var(sh.v)?;
            let i = t.b.use_var(var);
            let at = t.b.ins().smin(i, last);
            t.b.def_var(var, at);
            tail.stmt(t, body, jb)
        });
    }
    for j in 0..sh.j {
        if let (Some(jv), Some(jb)) = (sh.jam, jb) {
            let jv_var = t.var(jv)?;
            let val = t.b.ins().iadd_imm_s(jb, j as i64);
            t.b.def_var(jv_var, val);
        }
        t.counted_loop(sh.v, main_end, n, 1, |t| t.stmt(body))?;
    }
    Ok(())
}

/// Decides, without emitting code, whether a body can be vectorized.
struct Checker<'t, 'a> {
    t: &'t FuncTranslator<'a>,
    sh: Shape,
    ranges: VarRanges,
    /// Loop nesting inside the vectorized body.
    depth: usize,
    /// Nesting of branches on varying conditions.
    predicated: usize,
    /// Loop-local buffers stored at the top of the body so far: each iteration sets them
    /// before reading them, so no value crosses iterations.
    defined: HashSet<BufferId>,
    /// Linear store indices per global buffer the body writes.
    stored: HashMap<BufferId, Vec<Expr>>,
    index_lets: HashMap<VarId, Deps>,
    float_lets: HashMap<VarId, Deps>,
}

impl Checker<'_, '_> {
    fn deps(&self, e: &Expr) -> Deps {
        let mut d = match e {
            Expr::Var(x) if *x == self.sh.v => Deps { v: true, j: false },
            Expr::Var(x) if Some(*x) == self.sh.jam => Deps { v: false, j: true },
            Expr::Var(x) => self.index_lets.get(x).or(self.float_lets.get(x)).copied().unwrap_or_default(),
            Expr::Load { buffer, .. } if self.is_local(*buffer) && self.stored.contains_key(buffer) => {
                Deps { v: true, j: true }
            }
            _ => Deps::default(),
        };
        e.for_each_child(|c| d = d.or(self.deps(c)));
        d
    }

    fn is_local(&self, b: BufferId) -> bool {
        self.t.f.buffer(b).scope == Scope::Local
    }

    fn stmt(&mut self, s: &Stmt) -> bool {
        match s {
            Stmt::Seq(v) => v.iter().all(|s| self.stmt(s)),
            Stmt::For { var, extent, body, .. } => {
                let d = self.deps(extent);
                self.ranges.set(*var, loop_range(&self.ranges, extent));
                self.depth += 1;
                let ok = !d.v && !d.j && self.stmt(body);
                self.depth -= 1;
                ok
            }
            Stmt::Let { var, value } => {
                let d = self.deps(value);
                let dtype = self.t.f.var(*var).dtype;
                if dtype.is_int() && !has_load(value) {
                    self.index_lets.insert(*var, d);
                    self.ranges.set(*var, self.ranges.range(value));
                    true
                } else if dtype == DType::F32 && self.value_ok(value) {
                    self.float_lets.insert(*var, d);
                    true
                } else {
                    !d.v && !d.j
                }
            }
            Stmt::Store { buffer, indices, value } => {
                let buf = self.t.f.buffer(*buffer);
                let mask_local = buf.dtype == DType::Bool && self.is_local(*buffer);
                let narrow_global = narrow_int(buf.dtype) && !self.is_local(*buffer);
                if !(lane_dtype(buf.dtype) || mask_local || narrow_global) || !self.value_ok(value) {
                    return false;
                }
                if self.is_local(*buffer) {
                    if self.depth == 0 {
                        self.defined.insert(*buffer);
                    }
                    return matches!(self.t.bufs[buffer.0 as usize], Buf::Vars(_));
                }
                // Under a varying condition only registers may change (lanes are selected).
                self.predicated == 0 && matches!(self.access(*buffer, indices), Some(c) if c != 0)
            }
            Stmt::If { cond, then, otherwise } => {
                let d = self.deps(cond);
                // A varying condition predicates its branches: they run for every lane and
                // only the selected lanes of their register updates are kept.
                let varying = d.v || d.j;
                if varying && !self.value_ok(cond) {
                    return false;
                }
                self.depth += 1;
                self.predicated += varying as usize;
                let ok = self.stmt(then) && otherwise.as_ref().is_none_or(|o| self.stmt(o));
                self.predicated -= varying as usize;
                self.depth -= 1;
                ok
            }
            _ => false,
        }
    }

    /// The index's step per `v` when the access is affine in `v`, proven in bounds and free of
    /// data-dependent parts.
    fn access(&self, buffer: BufferId, indices: &[Expr]) -> Option<i64> {
        let lin = self.in_bounds(buffer, indices)?;
        affine_step(&lin, self.sh.v, &|x| self.index_lets.get(&x).is_some_and(|d| d.v))
    }

    /// The linear index of an access that is proven in bounds, free of data-dependent parts
    /// and not reading another lane's output.
    fn in_bounds(&self, buffer: BufferId, indices: &[Expr]) -> Option<Expr> {
        if indices.iter().any(has_load) {
            return None;
        }
        let lin = self.t.linear_index(buffer, indices);
        // Reading a buffer the body writes, anywhere but where this iteration writes it, could
        // see another lane's value.
        if self.stored.get(&buffer).is_some_and(|st| st.iter().any(|s| *s != lin)) {
            return None;
        }
        let len = self.t.f.buffer(buffer).num_elements() as i128;
        self.ranges.range(&lin).is_some_and(|(lo, hi)| lo >= 0 && hi < len).then_some(lin)
    }

    /// An index expression (no loads) whose values fit i32 lanes, so comparisons on it (padding
    /// guards) can be done lane-wise.
    fn small_index(&self, e: &Expr) -> bool {
        !has_load(e) && self.ranges.range(e).is_some_and(|(lo, hi)| lo >= i32::MIN as i128 && hi <= i32::MAX as i128)
    }

    /// A value expression the vector translator handles: v-dependent parts are f32 or i32 lanes
    /// or masks (narrow integers only as loads widened to i32).
    fn value_ok(&self, e: &Expr) -> bool {
        if !self.deps(e).v {
            return true;
        }
        let f = self.t.f;
        match e {
            Expr::Var(x) => self.float_lets.contains_key(x),
            Expr::Binary { op, lhs, rhs } => match lhs.dtype(f) {
                // Narrow values live extended in i32 lanes: min and max keep that exact.
                d if narrow_int(d) => matches!(op, BinOp::Min | BinOp::Max) && self.value_ok(lhs) && self.value_ok(rhs),
                DType::F32 => {
                    matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max)
                        && self.value_ok(lhs)
                        && self.value_ok(rhs)
                }
                DType::I32 => {
                    let shift_ok = !matches!(op, BinOp::Shl | BinOp::Shr) || !self.deps(rhs).v;
                    matches!(
                        op,
                        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Min | BinOp::Max | BinOp::Shl | BinOp::Shr
                    ) && shift_ok
                        && self.value_ok(lhs)
                        && self.value_ok(rhs)
                }
                DType::Bool => matches!(op, BinOp::And | BinOp::Or) && self.value_ok(lhs) && self.value_ok(rhs),
                _ => false,
            },
            Expr::Cmp { lhs, rhs, .. } if lhs.dtype(f) == DType::I64 => self.small_index(lhs) && self.small_index(rhs),
            Expr::Cmp { lhs, rhs, .. } => {
                let d = lhs.dtype(f);
                (lane_dtype(d) || narrow_int(d)) && self.value_ok(lhs) && self.value_ok(rhs)
            }
            Expr::Not(x) => self.value_ok(x),
            Expr::Select { cond, then, otherwise } => {
                let d = then.dtype(f);
                (lane_dtype(d) || narrow_int(d))
                    && self.value_ok(cond)
                    && self.value_ok(then)
                    && self.value_ok(otherwise)
            }
            Expr::Cast { dtype, value } if *dtype == DType::F32 || *dtype == DType::I32 || narrow_int(*dtype) => {
                let from = value.dtype(f);
                (matches!(from, DType::F32 | DType::I32 | DType::Bool) || narrow_int(from)) && self.value_ok(value)
            }
            Expr::Math { arg, .. } => arg.dtype(f) == DType::F32 && self.value_ok(arg),
            Expr::Load { buffer, indices } => {
                let buf = f.buffer(*buffer);
                let narrow_global = narrow_int(buf.dtype) && !self.is_local(*buffer);
                if !(lane_dtype(buf.dtype) || (buf.dtype == DType::Bool && self.is_local(*buffer)) || narrow_global) {
                    return false;
                }
                if self.is_local(*buffer) {
                    self.defined.contains(buffer) && matches!(self.t.bufs[buffer.0 as usize], Buf::Vars(_))
                } else {
                    // Non-affine indices (clamped padding reads) are gathered lane by lane.
                    self.in_bounds(*buffer, indices).is_some()
                }
            }
            _ => false,
        }
    }
}

/// Element types that live in vector lanes as they are (f32 or i32).
fn lane_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::I32)
}

/// Integer types narrower than a lane: their values live in i32 lanes, extended by their own
/// signedness, and are narrowed again when stored.
fn narrow_int(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8 | DType::U16 | DType::I16)
}

/// i32 lanes holding any values, wrapped into narrow type `d` (`as` semantics), extended.
fn wrap_lanes(t: &mut FuncTranslator<'_>, v: Value, d: DType) -> Value {
    let bits = d.size_bytes() as i64 * 8;
    if d.is_signed_int() {
        let up = t.b.ins().ishl_imm_s(v, 32 - bits);
        t.b.ins().sshr_imm_s(up, 32 - bits)
    } else {
        let mask = t.b.ins().iconst(I32, (1i64 << bits) - 1);
        let mask = t.b.ins().splat(I32X4, mask);
        t.b.ins().band(v, mask)
    }
}

/// f32 lanes converted to narrow type `d` as Rust's `as` does: truncated, saturated to the
/// type's range, NaN to 0.
fn saturate_lanes(t: &mut FuncTranslator<'_>, v: Value, d: DType) -> Value {
    let i = t.b.ins().fcvt_to_sint_sat(I32X4, v);
    let bits = d.size_bytes() as u32 * 8;
    let (lo, hi) =
        if d.is_signed_int() { (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1) } else { (0, (1i64 << bits) - 1) };
    let (lo, hi) = (t.b.ins().iconst(I32, lo), t.b.ins().iconst(I32, hi));
    let (lo, hi) = (t.b.ins().splat(I32X4, lo), t.b.ins().splat(I32X4, hi));
    let i = t.b.ins().smax(i, lo);
    t.b.ins().smin(i, hi)
}

/// The 4-lane vector type for lanes of `d`.
fn lanes_of(d: DType) -> Type {
    if d == DType::F32 { F32X4 } else { I32X4 }
}

/// `(a, b, c)` when `lhs + rhs` is `a * b + c` (either side the product).
fn product<'e>(lhs: &'e Expr, rhs: &'e Expr) -> Option<(&'e Expr, &'e Expr, &'e Expr)> {
    match (lhs, rhs) {
        (_, Expr::Binary { op: BinOp::Mul, lhs: a, rhs: b }) => Some((a, b, lhs)),
        (Expr::Binary { op: BinOp::Mul, lhs: a, rhs: b }, _) => Some((a, b, rhs)),
        _ => None,
    }
}

/// `mask ? x : y` lane-wise for f32 or i32 lanes.
fn lane_select(t: &mut FuncTranslator<'_>, mask: Value, x: Value, y: Value) -> Value {
    let ty = t.b.func.dfg.value_type(x);
    if ty == I32X4 { t.b.ins().bitselect(mask, x, y) } else { math::select_by(&mut t.b, ty, mask, x, y) }
}

fn loads_of(e: &Expr, b: BufferId) -> usize {
    let mut n = matches!(e, Expr::Load { buffer, .. } if *buffer == b) as usize;
    e.for_each_child(|c| n += loads_of(c, b));
    n
}

fn has_load(e: &Expr) -> bool {
    let mut found = matches!(e, Expr::Load { .. });
    e.for_each_child(|c| found |= has_load(c));
    found
}

/// The range of `var` in `for var in 0..extent`.
pub(crate) fn loop_range(ranges: &VarRanges, extent: &Expr) -> Option<(i128, i128)> {
    ranges.range(extent).map(|(_, hi)| (0, (hi - 1).max(0)))
}

/// The constant step of `e` per unit of `v` when `e` is affine in `v`; `varies` says which
/// other variables depend on `v` (then the step is unknown).
fn affine_step(e: &Expr, v: VarId, varies: &dyn Fn(VarId) -> bool) -> Option<i64> {
    match e {
        Expr::Var(x) if *x == v => Some(1),
        Expr::Var(x) => (!varies(*x)).then_some(0),
        Expr::Int { .. } => Some(0),
        Expr::Binary { op: BinOp::Add, lhs, rhs } => {
            affine_step(lhs, v, varies)?.checked_add(affine_step(rhs, v, varies)?)
        }
        Expr::Binary { op: BinOp::Sub, lhs, rhs } => {
            affine_step(lhs, v, varies)?.checked_sub(affine_step(rhs, v, varies)?)
        }
        Expr::Binary { op: BinOp::Mul, lhs, rhs } => {
            let (a, b) = (affine_step(lhs, v, varies)?, affine_step(rhs, v, varies)?);
            match (a, b, lhs.as_int(), rhs.as_int()) {
                (0, 0, _, _) => Some(0),
                (_, 0, _, Some(k)) => a.checked_mul(k),
                (0, _, Some(k), _) => b.checked_mul(k),
                _ => None,
            }
        }
        other => {
            // Anything else must not involve v at all.
            let mut uses = false;
            other.for_each_child(|c| uses |= affine_step(c, v, varies) != Some(0));
            (!uses).then_some(0)
        }
    }
}

/// One factor of a dot-product quad, as the bytes `vpdpbusd` reads.
#[derive(Clone, Copy)]
enum Bytes<'e> {
    /// Four consecutive bytes of `buffer` from `indices` (taken at the quad's first position),
    /// the top bit flipped when `flip` (an i8 read as u8 + 128, or a u8 as i8 - 128).
    Load { buffer: BufferId, indices: &'e [Expr], flip: bool },
    /// One byte, four times.
    Const(u8),
}

/// The values a byte factor takes: unsigned (0..=255), signed (-128..=127) or both.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sign {
    Unsigned,
    Signed,
    Either,
}

/// `for q in 0..4 { acc = acc + x * y }` with unsigned bytes `x` and signed bytes `y` whose
/// indices step by one with `q` (the shape [`crate::int8`] gives integer GEMMs and
/// convolutions): per lane, four byte products summed — AVX-VNNI's `vpdpbusd`.
struct DotQuad<'e> {
    acc: BufferId,
    acc_indices: &'e [Expr],
    unsigned: Bytes<'e>,
    signed: Bytes<'e>,
}

impl<'e> DotQuad<'e> {
    fn of(f: &PrimFunc, body: &'e Stmt) -> Option<DotQuad<'e>> {
        let Stmt::Store { buffer, indices, value: Expr::Binary { op: BinOp::Add, lhs, rhs } } = body else {
            return None;
        };
        if f.buffer(*buffer).scope != Scope::Local || f.buffer(*buffer).dtype != DType::I32 {
            return None;
        }
        let is_acc = |e: &Expr| matches!(e, Expr::Load { buffer: b, indices: i } if b == buffer && i == indices);
        let product = if is_acc(lhs) {
            &**rhs
        } else if is_acc(rhs) {
            &**lhs
        } else {
            return None;
        };
        let Expr::Binary { op: BinOp::Mul, lhs: x, rhs: y } = product else { return None };
        let ((a, sa), (b, sb)) = (byte_factor(x, f)?, byte_factor(y, f)?);
        let (unsigned, signed) = match (sa, sb) {
            (Sign::Unsigned | Sign::Either, Sign::Signed | Sign::Either) => (a, b),
            (Sign::Signed, Sign::Unsigned | Sign::Either) | (Sign::Either, Sign::Unsigned) => (b, a),
            _ => return None,
        };
        Some(DotQuad { acc: *buffer, acc_indices: indices, unsigned, signed })
    }
}

/// A byte factor: a constant, `cast<i32>(u8 or i8 load)`, or that load moved into the other
/// signedness by `+ 128` (i8) or `- 128` (u8).
fn byte_factor<'e>(e: &'e Expr, f: &PrimFunc) -> Option<(Bytes<'e>, Sign)> {
    match e {
        Expr::Int { value, .. } => match *value {
            0..=127 => Some((Bytes::Const(*value as u8), Sign::Either)),
            128..=255 => Some((Bytes::Const(*value as u8), Sign::Unsigned)),
            -128..=-1 => Some((Bytes::Const(*value as i8 as u8), Sign::Signed)),
            _ => None,
        },
        Expr::Cast { dtype: DType::I32, value } => match &**value {
            Expr::Load { buffer, indices } => {
                let sign = match f.buffer(*buffer).dtype {
                    DType::U8 => Sign::Unsigned,
                    DType::I8 => Sign::Signed,
                    _ => return None,
                };
                Some((Bytes::Load { buffer: *buffer, indices, flip: false }, sign))
            }
            _ => None,
        },
        Expr::Binary { op: BinOp::Add, lhs, rhs } => {
            let (Bytes::Load { buffer, indices, flip: false }, sign) = byte_factor(lhs, f)? else { return None };
            let flipped = Bytes::Load { buffer, indices, flip: true };
            match (sign, rhs.as_int()?) {
                (Sign::Signed, 128) => Some((flipped, Sign::Unsigned)),
                (Sign::Unsigned, -128) => Some((flipped, Sign::Signed)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `acc + Σ unsigned[4l..4l+4] * signed[4l..4l+4]` per i32 lane: the widening tree Cranelift
/// fuses into one `vpdpbusd` (AVX-VNNI or AVX512-VNNI) and otherwise computes with
/// widening multiplies and pairwise adds.
fn dot_accumulate(t: &mut FuncTranslator<'_>, unsigned: Value, signed: Value, acc: Value) -> Value {
    let b = &mut t.b;
    let lo = {
        let (s, u) = (b.ins().swiden_low(signed), b.ins().uwiden_low(unsigned));
        b.ins().imul(s, u)
    };
    let hi = {
        let (s, u) = (b.ins().swiden_high(signed), b.ins().uwiden_high(unsigned));
        b.ins().imul(s, u)
    };
    let pairs = |b: &mut cranelift_frontend::FunctionBuilder<'_>, x: Value| {
        let (l, h) = (b.ins().swiden_low(x), b.ins().swiden_high(x));
        b.ins().iadd_pairwise(l, h)
    };
    let (lo, hi) = (pairs(b, lo), pairs(b, hi));
    let dot = b.ins().iadd_pairwise(lo, hi);
    b.ins().iadd(dot, acc)
}

impl VecCtx {
    fn new(sh: Shape, body: &Stmt) -> VecCtx {
        let mut written = HashSet::new();
        body.walk(&mut |s| {
            if let Stmt::Store { buffer, .. } = s {
                written.insert(*buffer);
            }
        });
        VecCtx {
            sh,
            index_lets: HashMap::new(),
            tile_lets: HashMap::new(),
            locals: HashMap::new(),
            pred: None,
            written,
        }
    }

    fn jam_value(&self, t: &mut FuncTranslator<'_>, jb: Option<Value>, j: usize) -> Result<(), CodegenError> {
        if let (Some(jv), Some(jb)) = (self.sh.jam, jb) {
            t.def_offset_var(jv, jb, j as i64)?;
        }
        Ok(())
    }

    fn deps(&self, t: &FuncTranslator<'_>, e: &Expr) -> Deps {
        let mut d = match e {
            Expr::Var(x) if *x == self.sh.v => Deps { v: true, j: false },
            Expr::Var(x) if Some(*x) == self.sh.jam => Deps { v: false, j: true },
            Expr::Var(x) => {
                if let Some(tile) = self.tile_lets.get(x) {
                    Deps { v: tile.vector, j: tile.per_j }
                } else if let Some(sub) = self.index_lets.get(x) {
                    self.deps(t, sub)
                } else {
                    Deps::default()
                }
            }
            Expr::Load { buffer, .. } if t.f.buffer(*buffer).scope == Scope::Local && self.written.contains(buffer) => {
                Deps { v: true, j: true }
            }
            _ => Deps::default(),
        };
        e.for_each_child(|c| d = d.or(self.deps(t, c)));
        d
    }

    /// A scalar expression (not depending on v) evaluated once, or once per jammed copy.
    fn scalar(
        &self,
        t: &mut FuncTranslator<'_>,
        e: &Expr,
        jb: Option<Value>,
        per_j: bool,
    ) -> Result<Tile, CodegenError> {
        let e = substitute(e, &self.index_lets);
        // Narrow integers live extended in i32 lanes; their scalars too, so they broadcast.
        let d = e.dtype(t.f);
        let eval = |t: &mut FuncTranslator<'_>| -> Result<Value, CodegenError> {
            let v = t.expr(&e)?;
            Ok(if narrow_int(d) { t.cast(v, d, DType::I32)? } else { v })
        };
        if !per_j {
            return Ok(Tile::uniform(eval(t)?));
        }
        let mut vals = Vec::with_capacity(self.sh.j);
        for j in 0..self.sh.j {
            self.jam_value(t, jb, j)?;
            vals.push(eval(t)?);
        }
        Ok(Tile { per_j: true, vector: false, vals })
    }

    fn stmt(&mut self, t: &mut FuncTranslator<'_>, s: &Stmt, jb: Option<Value>) -> Result<(), CodegenError> {
        match s {
            Stmt::Seq(v) => {
                for s in v {
                    self.stmt(t, s, jb)?;
                }
            }
            Stmt::For { var, extent, body, kind } => {
                let extent = substitute(extent, &self.index_lets);
                let r = loop_range(&t.ranges, &extent);
                t.ranges.set(*var, r);
                if extent.as_int() == Some(QUAD)
                    && self.pred.is_none()
                    && let Some(quad) = DotQuad::of(t.f, body).filter(|q| self.quad_steps(t, *var, q))
                {
                    return self.dot_quad(t, *var, &quad, jb);
                }
                match (kind, extent.as_int()) {
                    (ForKind::Unrolled(factor), Some(n)) => {
                        t.unrolled_loop(*var, n, i64::from(*factor), |t| self.stmt(t, body, jb))?
                    }
                    _ => t.serial_loop(*var, &extent, |t| self.stmt(t, body, jb))?,
                }
            }
            Stmt::Let { var, value } => {
                if t.f.var(*var).dtype.is_int() && !has_load(value) && self.deps(t, value) != Deps::default() {
                    let sub = substitute(value, &self.index_lets);
                    self.index_lets.insert(*var, sub);
                } else if t.f.var(*var).dtype == DType::F32 && self.deps(t, value) != Deps::default() {
                    let tile = self.value(t, value, jb)?;
                    self.tile_lets.insert(*var, tile);
                } else {
                    t.stmt(s)?;
                }
            }
            Stmt::Store { buffer, indices, value } => {
                let tile = self.value(t, value, jb)?;
                self.store(t, *buffer, indices, tile, jb)?;
            }
            Stmt::If { cond, then, otherwise } if self.deps(t, cond) != Deps::default() => {
                let c = self.value(t, cond, jb)?;
                let outer = self.pred.take();
                let (then_pred, else_pred) = self.branch_masks(t, outer.as_ref(), &c);
                self.pred = Some(then_pred);
                self.stmt(t, then, jb)?;
                if let Some(o) = otherwise {
                    self.pred = Some(else_pred);
                    self.stmt(t, o, jb)?;
                }
                self.pred = outer;
            }
            Stmt::If { cond, then, otherwise } => {
                let c = t.expr(&substitute(cond, &self.index_lets))?;
                let (tb, eb, merge) = (t.b.create_block(), t.b.create_block(), t.b.create_block());
                t.b.ins().brif(c, tb, &[], eb, &[]);
                t.b.switch_to_block(tb);
                self.stmt(t, then, jb)?;
                t.b.ins().jump(merge, &[]);
                t.b.switch_to_block(eb);
                if let Some(o) = otherwise {
                    self.stmt(t, o, jb)?;
                }
                t.b.ins().jump(merge, &[]);
                t.b.switch_to_block(merge);
            }
            other => return Err(t.unsupported(format!("vectorizing {other:?}"))),
        }
        Ok(())
    }

    /// Whether a quad's loads step by one byte with the quad position `q` and affinely with
    /// the vectorized variable.
    fn quad_steps(&self, t: &FuncTranslator<'_>, q: VarId, quad: &DotQuad<'_>) -> bool {
        [quad.unsigned, quad.signed].iter().all(|bytes| match *bytes {
            Bytes::Const(_) => true,
            Bytes::Load { buffer, indices, .. } => {
                let lin = substitute(&t.linear_index(buffer, indices), &self.index_lets);
                affine_step(&lin, q, &|_| false) == Some(1) && affine_step(&lin, self.sh.v, &|_| false).is_some()
            }
        })
    }

    /// Emits a dot-product quad: per (j, u), one `vpdpbusd` into the accumulator registers.
    fn dot_quad(
        &mut self,
        t: &mut FuncTranslator<'_>,
        q: VarId,
        quad: &DotQuad<'_>,
        jb: Option<Value>,
    ) -> Result<(), CodegenError> {
        // The operands' first bytes: the quad position at 0.
        let var = t.var(q)?;
        let zero = t.b.ins().iconst(I64, 0);
        t.b.def_var(var, zero);
        let unsigned = self.quad_bytes(t, quad.unsigned, jb)?;
        let signed = self.quad_bytes(t, quad.signed, jb)?;
        let vars = self.local_vars(t, quad.acc);
        let slot = Self::local_slot(t, quad.acc, quad.acc_indices)?;
        let sh = self.sh;
        for j in 0..sh.j {
            for u in 0..sh.u {
                let var = vars[slot * sh.j * sh.u + j * sh.u + u];
                let acc = t.b.use_var(var);
                let sum = dot_accumulate(t, unsigned.at(sh, j, u), signed.at(sh, j, u), acc);
                t.b.def_var(var, sum);
            }
        }
        Ok(())
    }

    /// A byte factor as I8X16 vectors, lane `l` holding its four bytes for lane `l`: one load
    /// when the lanes' quads are contiguous, a splat when all lanes read the same quad, else
    /// a quad per lane.
    fn quad_bytes(
        &self,
        t: &mut FuncTranslator<'_>,
        bytes: Bytes<'_>,
        jb: Option<Value>,
    ) -> Result<Tile, CodegenError> {
        let (buffer, indices, flip) = match bytes {
            Bytes::Const(c) => {
                let k = t.b.ins().iconst(I8, c as i8 as i64);
                return Ok(Tile::uniform(t.b.ins().splat(I8X16, k)));
            }
            Bytes::Load { buffer, indices, flip } => (buffer, indices, flip),
        };
        let base = t.buffer_ptr(buffer)?;
        let flags = MemFlagsData::new().with_notrap();
        let lin = substitute(&t.linear_index(buffer, indices), &self.index_lets);
        let step = affine_step(&lin, self.sh.v, &|_| false).ok_or_else(|| t.unsupported("a non-affine quad"))?;
        let mut tile = if step == 0 {
            let per_j = self.deps(t, &lin).j;
            let at = self.scalar(t, &lin, jb, per_j)?;
            let mut vals = Vec::with_capacity(at.vals.len());
            for &ix in &at.vals {
                let addr = t.b.ins().iadd(base, ix);
                let word = t.b.ins().load(I32, flags, addr, 0);
                let lanes = t.b.ins().splat(I32X4, word);
                vals.push(math::bitcast(&mut t.b, I8X16, lanes));
            }
            Tile { vals, ..at }
        } else {
            let (lanes, per_j) = self.lane_indices(t, buffer, indices, jb)?;
            let mut vals = Vec::with_capacity(lanes.len());
            for l in &lanes {
                if step == QUAD {
                    let addr = t.b.ins().iadd(base, l[0]);
                    vals.push(t.b.ins().load(I8X16, flags, addr, 0));
                } else {
                    let zero = t.b.ins().iconst(I32, 0);
                    let mut v = t.b.ins().splat(I32X4, zero);
                    for (lane, &ix) in l.iter().enumerate() {
                        let addr = t.b.ins().iadd(base, ix);
                        let word = t.b.ins().load(I32, flags, addr, 0);
                        v = t.b.ins().insertlane(v, word, lane as u8);
                    }
                    vals.push(math::bitcast(&mut t.b, I8X16, v));
                }
            }
            Tile { per_j, vector: true, vals }
        };
        if flip {
            let top = t.b.ins().iconst(I8, 0x80u8 as i8 as i64);
            let top = t.b.ins().splat(I8X16, top);
            for v in &mut tile.vals {
                *v = t.b.ins().bxor(*v, top);
            }
        }
        Ok(tile)
    }

    fn local_vars(&mut self, t: &mut FuncTranslator<'_>, buffer: BufferId) -> Vec<Variable> {
        let n = self.sh.j * self.sh.u;
        self.locals
            .entry(buffer)
            .or_insert_with(|| {
                let (elems, ty) = (t.f.buffer(buffer).num_elements(), lanes_of(t.f.buffer(buffer).dtype));
                (0..elems * n).map(|_| t.b.declare_var(ty)).collect()
            })
            .clone()
    }

    fn local_slot(t: &FuncTranslator<'_>, buffer: BufferId, indices: &[Expr]) -> Result<usize, CodegenError> {
        let shape = &t.f.buffer(buffer).shape;
        let mut lin = 0usize;
        for (k, ix) in indices.iter().enumerate() {
            let i = ix.as_int().filter(|&i| i >= 0 && (i as usize) < shape[k]);
            lin = lin * shape[k] + i.ok_or_else(|| t.unsupported("dynamic index into a register buffer"))? as usize;
        }
        Ok(lin)
    }

    /// Lane-0 element index of an access for each (j, u), and the step per lane.
    fn indices(
        &self,
        t: &mut FuncTranslator<'_>,
        buffer: BufferId,
        indices: &[Expr],
        jb: Option<Value>,
    ) -> Result<(Vec<Value>, i64, bool), CodegenError> {
        let lin = substitute(&t.linear_index(buffer, indices), &self.index_lets);
        let step =
            affine_step(&lin, self.sh.v, &|_| false).ok_or_else(|| t.unsupported("a non-affine vector access"))?;
        let per_j = self.deps(t, &lin).j;
        // Affine indices through `index`, which keeps the loop-invariant part hoistable.
        let base = if affine_terms(&lin).is_some() {
            let mut vals = Vec::with_capacity(self.sh.j);
            for j in 0..if per_j { self.sh.j } else { 1 } {
                self.jam_value(t, jb, j)?;
                vals.push(t.index(&lin)?);
            }
            if per_j { Tile { per_j: true, vector: false, vals } } else { Tile::uniform(vals[0]) }
        } else {
            self.scalar(t, &lin, jb, per_j)?
        };
        let mut out = Vec::with_capacity(self.sh.j * self.sh.u);
        for j in 0..self.sh.j {
            for u in 0..self.sh.u {
                let b = base.at(self.sh, j, 0);
                out.push(if u == 0 { b } else { t.b.ins().iadd_imm_s(b, step * self.sh.offset(u)) });
            }
        }
        Ok((out, step, per_j))
    }

    /// Element index of every lane of an access, per (j, u) (j only when the index depends on
    /// it): from the affine step, or, for other indices, evaluated lane by lane.
    fn lane_indices(
        &self,
        t: &mut FuncTranslator<'_>,
        buffer: BufferId,
        indices: &[Expr],
        jb: Option<Value>,
    ) -> Result<(Vec<[Value; LANES as usize]>, bool), CodegenError> {
        let lin = substitute(&t.linear_index(buffer, indices), &self.index_lets);
        let per_j = self.deps(t, &lin).j;
        let copies = if per_j { self.sh.j } else { 1 };
        if affine_step(&lin, self.sh.v, &|_| false).is_some() {
            let (base, step, _) = self.indices(t, buffer, indices, jb)?;
            let mut out = Vec::new();
            for &b in &base[..copies * self.sh.u] {
                out.push(std::array::from_fn(|l| if l == 0 { b } else { t.b.ins().iadd_imm_s(b, step * l as i64) }));
            }
            return Ok((out, per_j));
        }
        let v = t.var(self.sh.v)?;
        let vb = t.b.use_var(v);
        let mut out = Vec::new();
        for j in 0..copies {
            self.jam_value(t, jb, j)?;
            for u in 0..self.sh.u {
                let mut lanes = [vb; LANES as usize];
                for (l, slot) in lanes.iter_mut().enumerate() {
                    let at = t.b.ins().iadd_imm_s(vb, self.sh.offset(u) + l as i64);
                    t.b.def_var(v, at);
                    *slot = t.index(&lin)?;
                }
                out.push(lanes);
            }
        }
        // The rest of the body sees the block's first lane again.
        t.b.def_var(v, vb);
        Ok((out, per_j))
    }

    /// An i64 index expression as i32 lanes (its range fits, see `Checker::small_index`):
    /// uniform parts stay scalar, varying ones are evaluated per lane.
    fn index_lanes(&self, t: &mut FuncTranslator<'_>, e: &Expr, jb: Option<Value>) -> Result<Tile, CodegenError> {
        let e = substitute(e, &self.index_lets);
        let d = self.deps(t, &e);
        if !d.v {
            let s = self.scalar(t, &e, jb, d.j)?;
            let vals = s.vals.iter().map(|&v| t.b.ins().ireduce(I32, v)).collect();
            return Ok(Tile { vals, ..s });
        }
        let v = t.var(self.sh.v)?;
        let vb = t.b.use_var(v);
        let copies = if d.j { self.sh.j } else { 1 };
        let mut vals = Vec::new();
        for j in 0..copies {
            self.jam_value(t, jb, j)?;
            for u in 0..self.sh.u {
                let zero = t.b.ins().iconst(I32, 0);
                let mut lanes = t.b.ins().splat(I32X4, zero);
                for l in 0..LANES {
                    let at = t.b.ins().iadd_imm_s(vb, self.sh.offset(u) + l);
                    t.b.def_var(v, at);
                    let x = t.index(&e)?;
                    let x = t.b.ins().ireduce(I32, x);
                    lanes = t.b.ins().insertlane(lanes, x, l as u8);
                }
                vals.push(lanes);
            }
        }
        t.b.def_var(v, vb);
        Ok(Tile { per_j: d.j, vector: true, vals })
    }

    /// Loads one element per lane into a vector of `vty` lanes of `sty` (widened from `mem` by
    /// sign when narrower).
    fn gather(
        t: &mut FuncTranslator<'_>,
        buffer: BufferId,
        lanes: &[Value; LANES as usize],
        vty: Type,
        sty: Type,
        mem: Type,
        signed: bool,
    ) -> Result<Value, CodegenError> {
        let base = t.buffer_ptr(buffer)?;
        let flags = MemFlagsData::new().with_notrap();
        let elem = mem.bytes() as i64;
        let zero = if sty == F32 { t.b.ins().f32const(0.0) } else { t.b.ins().iconst(I32, 0) };
        let mut v = t.b.ins().splat(vty, zero);
        for (lane, &ix) in lanes.iter().enumerate() {
            let off = t.b.ins().imul_imm_s(ix, elem);
            let addr = t.b.ins().iadd(base, off);
            let x = t.b.ins().load(mem, flags, addr, 0);
            let x = match (mem == sty, signed) {
                (true, _) => x,
                (false, true) => t.b.ins().sextend(sty, x),
                (false, false) => t.b.ins().uextend(sty, x),
            };
            v = t.b.ins().insertlane(v, x, lane as u8);
        }
        Ok(v)
    }

    fn address(t: &mut FuncTranslator<'_>, buffer: BufferId, index: Value) -> Result<Value, CodegenError> {
        let base = t.buffer_ptr(buffer)?;
        let off = t.b.ins().imul_imm_s(index, 4);
        Ok(t.b.ins().iadd(base, off))
    }

    fn store(
        &mut self,
        t: &mut FuncTranslator<'_>,
        buffer: BufferId,
        indices: &[Expr],
        tile: Tile,
        jb: Option<Value>,
    ) -> Result<(), CodegenError> {
        let sh = self.sh;
        if t.f.buffer(buffer).scope == Scope::Local {
            let vars = self.local_vars(t, buffer);
            let slot = Self::local_slot(t, buffer, indices)?;
            let is_mask = t.f.buffer(buffer).dtype == DType::Bool;
            for j in 0..sh.j {
                for u in 0..sh.u {
                    let var = vars[slot * sh.j * sh.u + j * sh.u + u];
                    let mut v = if is_mask { self.mask(t, &tile, j, u) } else { self.vector(t, &tile, j, u) };
                    if let Some(p) = &self.pred {
                        let m = self.mask(t, p, j, u);
                        let old = t.b.use_var(var);
                        v = lane_select(t, m, v, old);
                    }
                    t.b.def_var(var, v);
                }
            }
            return Ok(());
        }
        let (idx, step, _) = self.indices(t, buffer, indices, jb)?;
        let flags = MemFlagsData::new().with_notrap();
        let dtype = t.f.buffer(buffer).dtype;
        if narrow_int(dtype) {
            return self.narrowing_store(t, buffer, &tile, &idx, step, dtype);
        }
        for j in 0..sh.j {
            for u in 0..sh.u {
                let v = self.vector(t, &tile, j, u);
                let addr = Self::address(t, buffer, idx[j * sh.u + u])?;
                if step == 1 {
                    t.b.ins().store(flags, v, addr, 0);
                } else {
                    for lane in 0..LANES {
                        let x = t.b.ins().extractlane(v, lane as u8);
                        t.b.ins().store(flags, x, addr, (lane * step * 4) as i32);
                    }
                }
            }
        }
        Ok(())
    }

    /// Stores extended i32 lanes into a narrow buffer: the lanes narrowed through I16X8 (and
    /// I8X16) and written as one 64- or 32-bit store when contiguous, else lane by lane.
    fn narrowing_store(
        &self,
        t: &mut FuncTranslator<'_>,
        buffer: BufferId,
        tile: &Tile,
        idx: &[Value],
        step: i64,
        dtype: DType,
    ) -> Result<(), CodegenError> {
        let base = t.buffer_ptr(buffer)?;
        let sh = self.sh;
        let flags = MemFlagsData::new().with_notrap();
        let elem = dtype.size_bytes() as i64;
        for j in 0..sh.j {
            for u in 0..sh.u {
                let v = self.vector(t, tile, j, u);
                let off = t.b.ins().imul_imm_s(idx[j * sh.u + u], elem);
                let addr = t.b.ins().iadd(base, off);
                if step != 1 {
                    for lane in 0..LANES {
                        let x = t.b.ins().extractlane(v, lane as u8);
                        let x = t.b.ins().ireduce(if elem == 1 { I8 } else { I16 }, x);
                        t.b.ins().store(flags, x, addr, (lane * step * elem) as i32);
                    }
                    continue;
                }
                // Narrowing saturates: negative lanes keep only their low bits first (unsigned
                // lanes are in range already).
                let same_width = if elem == 1 { DType::U8 } else { DType::U16 };
                let unsigned = if dtype.is_signed_int() { wrap_lanes(t, v, same_width) } else { v };
                let halves = t.b.ins().unarrow(unsigned, unsigned);
                let (packed, word, lanes) =
                    if elem == 1 { (t.b.ins().unarrow(halves, halves), I32, I32X4) } else { (halves, I64, I64X2) };
                let words = math::bitcast(&mut t.b, lanes, packed);
                let x = t.b.ins().extractlane(words, 0);
                debug_assert_eq!(t.b.func.dfg.value_type(x), word);
                t.b.ins().store(flags, x, addr, 0);
            }
        }
        Ok(())
    }

    /// A vector tile built lane group by lane group: `f(self, t, j, u)` for every jammed copy
    /// (only the first unless `per_j`) and vector.
    fn lanewise(
        &self,
        t: &mut FuncTranslator<'_>,
        per_j: bool,
        mut f: impl FnMut(&Self, &mut FuncTranslator<'_>, usize, usize) -> Result<Value, CodegenError>,
    ) -> Result<Tile, CodegenError> {
        let copies = if per_j { self.sh.j } else { 1 };
        let mut vals = Vec::with_capacity(copies * self.sh.u);
        for j in 0..copies {
            for u in 0..self.sh.u {
                vals.push(f(self, t, j, u)?);
            }
        }
        Ok(Tile { per_j, vector: true, vals })
    }

    /// The (j, u) vector of a tile, broadcasting scalars.
    fn vector(&self, t: &mut FuncTranslator<'_>, tile: &Tile, j: usize, u: usize) -> Value {
        let v = tile.at(self.sh, j, u);
        if tile.vector {
            return v;
        }
        let ty = if t.b.func.dfg.value_type(v) == F32 { F32X4 } else { I32X4 };
        t.b.ins().splat(ty, v)
    }

    fn value(&mut self, t: &mut FuncTranslator<'_>, e: &Expr, jb: Option<Value>) -> Result<Tile, CodegenError> {
        let d = self.deps(t, e);
        if !d.v {
            return self.scalar(t, e, jb, d.j);
        }
        let sh = self.sh;
        let per_j = |tiles: &[&Tile]| tiles.iter().any(|x| x.per_j);
        Ok(match e {
            Expr::Var(x) => self.tile_lets.get(x).cloned().ok_or_else(|| t.unsupported("a varying variable"))?,
            Expr::Load { buffer, indices } if narrow_int(t.f.buffer(*buffer).dtype) => {
                self.widening_load(t, *buffer, indices, jb)?
            }
            Expr::Load { buffer, indices } => {
                if t.f.buffer(*buffer).scope == Scope::Local {
                    let vars = self.local_vars(t, *buffer);
                    let slot = Self::local_slot(t, *buffer, indices)?;
                    let vals = (0..sh.j * sh.u).map(|k| t.b.use_var(vars[slot * sh.j * sh.u + k])).collect();
                    Tile { per_j: true, vector: true, vals }
                } else {
                    let (vty, sty) = if t.f.buffer(*buffer).dtype == DType::F32 { (F32X4, F32) } else { (I32X4, I32) };
                    let lin = substitute(&t.linear_index(*buffer, indices), &self.index_lets);
                    let mut vals = Vec::new();
                    let per_j;
                    if affine_step(&lin, sh.v, &|_| false) == Some(1) {
                        let (idx, _, pj) = self.indices(t, *buffer, indices, jb)?;
                        per_j = pj;
                        let flags = MemFlagsData::new().with_notrap();
                        for &ix in &idx[..if per_j { sh.j * sh.u } else { sh.u }] {
                            let addr = Self::address(t, *buffer, ix)?;
                            vals.push(t.b.ins().load(vty, flags, addr, 0));
                        }
                    } else {
                        let (lanes, pj) = self.lane_indices(t, *buffer, indices, jb)?;
                        per_j = pj;
                        for l in &lanes {
                            vals.push(Self::gather(t, *buffer, l, vty, sty, sty, false)?);
                        }
                    }
                    Tile { per_j, vector: true, vals }
                }
            }
            Expr::Binary { op: BinOp::Add, lhs, rhs }
                if t.options.fma && lhs.dtype(t.f) == DType::F32 && product(lhs, rhs).is_some() =>
            {
                let (p, q, acc) = product(lhs, rhs).expect("checked");
                let (a, b, c) = (self.value(t, p, jb)?, self.value(t, q, jb)?, self.value(t, acc, jb)?);
                self.lanewise(t, per_j(&[&a, &b, &c]), |s, t, j, u| {
                    let (x, y, z) = (s.vector(t, &a, j, u), s.vector(t, &b, j, u), s.vector(t, &c, j, u));
                    Ok(t.b.ins().fma(x, y, z))
                })?
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.value(t, lhs, jb)?, self.value(t, rhs, jb)?);
                self.lanewise(t, per_j(&[&a, &b]), |s, t, j, u| {
                    if matches!(op, BinOp::And | BinOp::Or) {
                        let (x, y) = (s.mask(t, &a, j, u), s.mask(t, &b, j, u));
                        return Ok(if *op == BinOp::And { t.b.ins().band(x, y) } else { t.b.ins().bor(x, y) });
                    }
                    let (x, y) = (s.vector(t, &a, j, u), s.vector(t, &b, j, u));
                    Ok(match op {
                        // Against a constant, compare-and-select is one instruction and
                        // still lets NaN through: the constant wins only when the comparison
                        // holds.
                        BinOp::Max | BinOp::Min if matches!(**rhs, Expr::Float { .. }) => {
                            let cc = if *op == BinOp::Max { FloatCC::GreaterThan } else { FloatCC::LessThan };
                            let c = t.b.ins().fcmp(cc, y, x);
                            math::select_by(&mut t.b, F32X4, c, y, x)
                        }
                        // Shift amounts are uniform: Cranelift shifts every lane by a scalar.
                        BinOp::Shl | BinOp::Shr => {
                            let amount = b.at(sh, j, u);
                            t.binary(*op, x, amount, DType::I32)?
                        }
                        _ => {
                            let d = lhs.dtype(t.f);
                            t.binary(*op, x, y, if narrow_int(d) { DType::I32 } else { d })?
                        }
                    })
                })?
            }
            Expr::Cmp { op, lhs, rhs } if lhs.dtype(t.f) == DType::I64 => {
                let (a, b) = (self.index_lanes(t, lhs, jb)?, self.index_lanes(t, rhs, jb)?);
                self.lanewise(t, per_j(&[&a, &b]), |s, t, j, u| {
                    let (x, y) = (s.vector(t, &a, j, u), s.vector(t, &b, j, u));
                    Ok(t.compare(*op, x, y, DType::I32))
                })?
            }
            Expr::Cmp { op, lhs, rhs } => {
                let (a, b) = (self.value(t, lhs, jb)?, self.value(t, rhs, jb)?);
                let dtype = if narrow_int(lhs.dtype(t.f)) { DType::I32 } else { lhs.dtype(t.f) };
                self.lanewise(t, per_j(&[&a, &b]), |s, t, j, u| {
                    let (x, y) = (s.vector(t, &a, j, u), s.vector(t, &b, j, u));
                    Ok(t.compare(*op, x, y, dtype))
                })?
            }
            Expr::Not(x) => {
                let a = self.value(t, x, jb)?;
                let vals = a.vals.iter().map(|&v| t.b.ins().bnot(v)).collect();
                Tile { vals, ..a }
            }
            Expr::Select { cond, then, otherwise } => {
                let (c, a, b) = (self.value(t, cond, jb)?, self.value(t, then, jb)?, self.value(t, otherwise, jb)?);
                self.lanewise(t, per_j(&[&c, &a, &b]), |s, t, j, u| {
                    let (x, y) = (s.vector(t, &a, j, u), s.vector(t, &b, j, u));
                    let m = s.mask(t, &c, j, u);
                    Ok(lane_select(t, m, x, y))
                })?
            }
            Expr::Cast { dtype: to, value } => {
                let from = value.dtype(t.f);
                let a = self.value(t, value, jb)?;
                // Narrow values are already extended i32 lanes.
                if from == *to || (*to == DType::I32 && narrow_int(from)) {
                    return Ok(a);
                }
                // Booleans become 0/1 lanes below, in range for every narrow type.
                if narrow_int(*to) && from != DType::Bool {
                    let mut vals = Vec::with_capacity(a.vals.len());
                    for k in 0..a.vals.len() {
                        let v = self.vector(t, &a, k / sh.u, k % sh.u);
                        vals.push(if from == DType::F32 { saturate_lanes(t, v, *to) } else { wrap_lanes(t, v, *to) });
                    }
                    return Ok(Tile { vals, ..a });
                }
                let mut vals = Vec::new();
                for k in 0..a.vals.len() {
                    let (j, u) = (k / sh.u, k % sh.u);
                    vals.push(match (from, to) {
                        (DType::Bool, _) => {
                            let m = self.mask(t, &a, j, u);
                            let (one, zero) = if *to == DType::F32 {
                                (math::fconst(&mut t.b, F32X4, 1.0), math::fconst(&mut t.b, F32X4, 0.0))
                            } else {
                                let (o, z) = (t.b.ins().iconst(I32, 1), t.b.ins().iconst(I32, 0));
                                (t.b.ins().splat(I32X4, o), t.b.ins().splat(I32X4, z))
                            };
                            lane_select(t, m, one, zero)
                        }
                        (f, _) if f == DType::I32 || narrow_int(f) => {
                            let v = self.vector(t, &a, j, u);
                            t.b.ins().fcvt_from_sint(F32X4, v)
                        }
                        _ => {
                            let v = self.vector(t, &a, j, u);
                            t.b.ins().fcvt_to_sint_sat(I32X4, v)
                        }
                    });
                }
                Tile { vals, ..a }
            }
            Expr::Math { op, arg } => {
                let a = self.value(t, arg, jb)?;
                if let Some(name) = op.libm_name() {
                    // No vector libm: each lane through the f64 function, as the scalar code.
                    let vals = a.vals.iter().map(|&v| lanewise_libm(t, name, v)).collect();
                    return Ok(Tile { vals, ..a });
                }
                let vals = a
                    .vals
                    .iter()
                    .map(|&v| match op {
                        MathOp::Exp => math::exp(&mut t.b, F32X4, v),
                        MathOp::Tanh => math::tanh(&mut t.b, F32X4, v),
                        MathOp::Erf => math::erf(&mut t.b, F32X4, v),
                        MathOp::Sigmoid => math::sigmoid(&mut t.b, F32X4, v),
                        MathOp::Sqrt => t.b.ins().sqrt(v),
                        MathOp::Abs => t.b.ins().fabs(v),
                        MathOp::Floor => t.b.ins().floor(v),
                        MathOp::Ceil => t.b.ins().ceil(v),
                        // Round (the libm ones returned above).
                        _ => t.b.ins().nearest(v),
                    })
                    .collect();
                Tile { vals, ..a }
            }
            other => return Err(t.unsupported(format!("vectorizing {other:?}"))),
        })
    }

    /// i8/u8/i16/u16 elements loaded and widened (by their signedness) to i32 lanes: four
    /// contiguous elements as one 32- or 64-bit load widened through I8X16 / I16X8, others one
    /// lane at a time.
    fn widening_load(
        &self,
        t: &mut FuncTranslator<'_>,
        buffer: BufferId,
        indices: &[Expr],
        jb: Option<Value>,
    ) -> Result<Tile, CodegenError> {
        let dtype = t.f.buffer(buffer).dtype;
        let (elem, signed) = (dtype.size_bytes() as i64, dtype.is_signed_int());
        let lin = substitute(&t.linear_index(buffer, indices), &self.index_lets);
        if affine_step(&lin, self.sh.v, &|_| false) == Some(1) {
            let base = t.buffer_ptr(buffer)?;
            let (idx, _, per_j) = self.indices(t, buffer, indices, jb)?;
            let flags = MemFlagsData::new().with_notrap();
            let mut vals = Vec::new();
            for &ix in &idx[..if per_j { self.sh.j * self.sh.u } else { self.sh.u }] {
                let off = t.b.ins().imul_imm_s(ix, elem);
                let addr = t.b.ins().iadd(base, off);
                let (word, packed) = if elem == 1 { (I32, I32X4) } else { (I64, I64X2) };
                let bits = t.b.ins().load(word, flags, addr, 0);
                let v = t.b.ins().scalar_to_vector(packed, bits);
                let mut v = math::bitcast(&mut t.b, if elem == 1 { I8X16 } else { I16X8 }, v);
                for _ in 0..if elem == 1 { 2 } else { 1 } {
                    v = if signed { t.b.ins().swiden_low(v) } else { t.b.ins().uwiden_low(v) };
                }
                vals.push(v);
            }
            return Ok(Tile { per_j, vector: true, vals });
        }
        let (lanes, per_j) = self.lane_indices(t, buffer, indices, jb)?;
        let narrow = if elem == 1 { I8 } else { I16 };
        let mut vals = Vec::new();
        for l in &lanes {
            vals.push(Self::gather(t, buffer, l, I32X4, I32, narrow, signed)?);
        }
        Ok(Tile { per_j, vector: true, vals })
    }

    /// Lane masks for the two branches of `if c` inside the current predicate `outer`.
    fn branch_masks(&self, t: &mut FuncTranslator<'_>, outer: Option<&Tile>, c: &Tile) -> (Tile, Tile) {
        let sh = self.sh;
        let (mut then_vals, mut else_vals) = (Vec::new(), Vec::new());
        for j in 0..sh.j {
            for u in 0..sh.u {
                let m = self.mask(t, c, j, u);
                let not_m = t.b.ins().bnot(m);
                let (a, b) = match outer {
                    Some(o) => {
                        let om = self.mask(t, o, j, u);
                        (t.b.ins().band(om, m), t.b.ins().band(om, not_m))
                    }
                    None => (m, not_m),
                };
                then_vals.push(a);
                else_vals.push(b);
            }
        }
        let tile = |vals| Tile { per_j: true, vector: true, vals };
        (tile(then_vals), tile(else_vals))
    }

    /// The (j, u) lane mask of a boolean tile: vector masks as they are, scalar bools widened
    /// to all-ones / all-zeros.
    fn mask(&self, t: &mut FuncTranslator<'_>, tile: &Tile, j: usize, u: usize) -> Value {
        let v = tile.at(self.sh, j, u);
        if tile.vector {
            return v;
        }
        let wide = t.b.ins().uextend(I32, v);
        let m = t.b.ins().ineg(wide);
        t.b.ins().splat(I32X4, m)
    }
}

/// `name` (an f64 libm function) applied to each f32 lane of `v`.
fn lanewise_libm(t: &mut FuncTranslator<'_>, name: &str, v: Value) -> Value {
    let mut out = v;
    for lane in 0..4u8 {
        let x = t.b.ins().extractlane(v, lane);
        let wide = t.b.ins().fpromote(F64, x);
        let r = t.libm(name, wide);
        let r = t.b.ins().fdemote(F32, r);
        out = t.b.ins().insertlane(out, r, lane);
    }
    out
}
