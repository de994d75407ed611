//! The loop-IR verifier: every buffer has a size that fits the machine, every buffer access has
//! the buffer's rank and integer indices, buffers and variables are used in scope, operand
//! dtypes agree, calls match their callees, nothing nests deeper than [`MAX_NESTING`]. Reports
//! every problem found.
//!
//! Code generation relies on it: a verified module's buffer sizes, element counts and constant
//! loop extents were computed without overflow, so the ranges proved from them are sound.

use std::collections::{HashMap, HashSet};

use super::analysis::{reads_none_of_its_outputs, reads_only_own_outputs, stores_move_with};
use super::{
    Arg, BinOp, BufferId, Callee, Expr, ForKind, MAIN, MAX_NESTING, MathOp, Module, PrimFunc, Stmt, VarId, VectorShape,
    VectorTail,
};
use crate::dtype::DType;
use crate::limits::{Limits, span_bytes};
use crate::verify::VerifyErrors;

/// The highest buffer rank (the graph's own limit).
const MAX_BUFFER_RANK: usize = Limits::DEFAULT.max_rank;

/// Verifies every function of the module and every call between them.
pub fn verify_module(m: &Module) -> Result<(), VerifyErrors> {
    let mut errors = Vec::new();
    let mut names = HashSet::new();
    let by_name = m.by_name();
    for f in &m.funcs {
        if !names.insert(f.name.as_str()) {
            errors.push(format!("function '{}' is defined twice", f.name));
        }
        if let Err(VerifyErrors(e)) = verify_in(f, Some(&by_name)) {
            errors.extend(e);
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(VerifyErrors(errors)) }
}

/// Verifies one function; with `module`, calls are checked against their callees.
pub fn verify_func(f: &PrimFunc, module: Option<&Module>) -> Result<(), VerifyErrors> {
    verify_in(f, module.map(Module::by_name).as_ref())
}

fn verify_in(f: &PrimFunc, module: Option<&HashMap<&str, &PrimFunc>>) -> Result<(), VerifyErrors> {
    let mut v = Verifier {
        f,
        module,
        errors: vec![],
        buffers: HashSet::new(),
        vars: HashSet::new(),
        ever_declared: HashSet::new(),
        depth: 0,
    };
    if let Some(t) = &f.target
        && (t.is_empty() || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        v.err(format!("target name {t:?} is not a plain identifier"));
    }
    for buf in &f.buffers {
        if buf.shape.len() > MAX_BUFFER_RANK {
            v.err(format!("buffer '{}' has rank {}, more than {MAX_BUFFER_RANK}", buf.name, buf.shape.len()));
        }
        // Zero-length axes count as 1: that also bounds loops over the shape.
        if span_bytes(buf.dtype, &buf.shape).is_none_or(|b| b > Limits::ABSOLUTE_MAX_BYTES) {
            v.err(format!("buffer '{}' ({}{:?}) is too large to address", buf.name, buf.dtype, buf.shape));
        }
    }
    let mut parallel = 0;
    f.body.walk(&mut |s| {
        if let Stmt::For { var, kind, extent, body } = s {
            if *kind == ForKind::Parallel {
                parallel += 1;
            }
            if let Err(e) = check_loop_kind(f, *var, *kind, extent, body) {
                v.err(format!("loop '{}' ({kind}): {e}", f.vars.get(var.0 as usize).map_or("?", |d| d.name.as_str())));
            }
        }
    });
    if parallel > 1 || (parallel == 1 && f.name == MAIN) {
        v.err(format!("{parallel} parallel loops: a function other than main may have one"));
    }
    for &p in &f.params {
        if (p.0 as usize) >= f.buffers.len() {
            v.err(format!("parameter buffer #{} does not exist", p.0));
        } else if !v.buffers.insert(p) {
            v.err(format!("buffer '{}' is a parameter twice", f.buffer(p).name));
        }
        v.ever_declared.insert(p);
    }
    for (b, map) in &f.layout_transforms {
        match f.buffers.get(b.0 as usize) {
            None => v.err(format!("layout transform for buffer #{} which does not exist", b.0)),
            Some(buf) => {
                if let Err(e) = map.transformed_shape(&buf.shape) {
                    v.err(format!("layout transform of '{}': {e}", buf.name));
                }
            }
        }
    }
    v.stmt(&f.body);
    if v.errors.is_empty() { Ok(()) } else { Err(VerifyErrors(v.errors)) }
}

/// Unroll factors above this would only blow up code size.
const MAX_UNROLL_FACTOR: u32 = 64;
/// Vector shapes beyond these have no machine to run on.
const MAX_LANES: u32 = 64;
const MAX_VECTORS: u32 = 16;

/// Checks that a loop kind keeps the serial loop's meaning: a parallel or vectorized loop, or
/// an unrolled one jammed around a vectorized loop, runs iterations out of order, so its
/// iterations must write different elements and read no other iteration's output; overlapping
/// and clamped vector tails repeat iterations, so the body must not read what it writes.
fn check_loop_kind(f: &PrimFunc, var: VarId, kind: ForKind, extent: &Expr, body: &Stmt) -> Result<(), String> {
    let independent = |what: &str| {
        if stores_move_with(body, f, var) && reads_only_own_outputs(body, f) {
            Ok(())
        } else {
            Err(format!("{what} needs iterations that write different elements and read no other iteration's output"))
        }
    };
    match kind {
        ForKind::Serial => Ok(()),
        ForKind::Parallel => {
            if extent.as_int().is_none() {
                return Err("a parallel loop needs a constant extent".into());
            }
            independent("a parallel loop")
        }
        ForKind::Unrolled(k) => {
            if k > MAX_UNROLL_FACTOR {
                return Err(format!("unroll factor {k} is more than {MAX_UNROLL_FACTOR}"));
            }
            if extent.as_int().is_none() {
                return Err("an unrolled loop needs a constant extent".into());
            }
            match body {
                Stmt::For { kind: ForKind::Vectorized(_), .. } if k > 1 => independent("unroll-and-jam"),
                _ => Ok(()),
            }
        }
        ForKind::Vectorized(shape) => {
            let VectorShape { lanes, vectors, tail } = shape;
            if !lanes.is_power_of_two() || lanes > MAX_LANES {
                return Err(format!("{lanes} lanes: a power of two up to {MAX_LANES} expected"));
            }
            if vectors > MAX_VECTORS {
                return Err(format!("{vectors} vectors per block: at most {MAX_VECTORS}"));
            }
            independent("a vectorized loop")?;
            let n = extent.as_int();
            let (lanes, block) = (i64::from(lanes), i64::from(lanes) * i64::from(vectors));
            match tail {
                VectorTail::Scalar => return Ok(()),
                VectorTail::Overlap if n.is_none_or(|n| n < lanes) => {
                    return Err(format!("an overlapping tail needs a constant extent of at least {lanes}"));
                }
                VectorTail::Clamp if n.is_none_or(|n| n <= lanes || n > block) => {
                    return Err(format!("a clamped block needs a constant extent in {}..={block}", lanes + 1));
                }
                _ => {}
            }
            if reads_none_of_its_outputs(body, f) {
                Ok(())
            } else {
                Err("a vector tail that repeats iterations needs a body that reads none of the buffers it writes"
                    .into())
            }
        }
    }
}

struct Verifier<'a> {
    f: &'a PrimFunc,
    module: Option<&'a HashMap<&'a str, &'a PrimFunc>>,
    errors: Vec<String>,
    /// Buffers visible at the current point.
    buffers: HashSet<BufferId>,
    vars: HashSet<VarId>,
    /// Buffers declared anywhere so far (a buffer is declared once per function).
    ever_declared: HashSet<BufferId>,
    /// Current nesting of statements and expressions.
    depth: usize,
}

impl Verifier<'_> {
    fn err(&mut self, msg: String) {
        self.errors.push(format!("function '{}': {msg}", self.f.name));
    }

    fn buffer_ok(&mut self, b: BufferId) -> bool {
        if (b.0 as usize) >= self.f.buffers.len() {
            self.err(format!("buffer #{} does not exist", b.0));
            return false;
        }
        if !self.buffers.contains(&b) {
            self.err(format!("buffer '{}' is used outside its scope", self.f.buffer(b).name));
            return false;
        }
        true
    }

    fn declare_buffer(&mut self, b: BufferId) {
        if (b.0 as usize) >= self.f.buffers.len() {
            self.err(format!("buffer #{} does not exist", b.0));
        } else if !self.ever_declared.insert(b) {
            self.err(format!("buffer '{}' is declared twice", self.f.buffer(b).name));
        }
        self.buffers.insert(b);
    }

    fn var_ok(&mut self, v: VarId) -> bool {
        if (v.0 as usize) >= self.f.vars.len() {
            self.err(format!("variable #{} does not exist", v.0));
            return false;
        }
        true
    }

    fn access(&mut self, b: BufferId, indices: &[Expr], what: &str) {
        if !self.buffer_ok(b) {
            return;
        }
        let buf = self.f.buffer(b);
        if indices.len() != buf.shape.len() {
            let msg = format!(
                "{what} of '{}' uses {} indices, the buffer has rank {}",
                buf.name,
                indices.len(),
                buf.shape.len()
            );
            self.err(msg);
        }
        for i in indices {
            if let Some(t) = self.expr(i)
                && !t.is_int()
            {
                self.err(format!("{what} of '{}' has a {t} index", self.f.buffer(b).name));
            }
        }
    }

    /// Enters one nesting level; false (with an error) past [`MAX_NESTING`].
    fn descend(&mut self) -> bool {
        if self.depth >= MAX_NESTING {
            if self.depth == MAX_NESTING {
                self.err(format!("statements or expressions nest more than {MAX_NESTING} levels deep"));
                // Report once, and never descend further.
                self.depth += 1;
            }
            return false;
        }
        self.depth += 1;
        true
    }

    /// Checks an expression and returns its dtype (None after an error that hides it).
    fn expr(&mut self, e: &Expr) -> Option<DType> {
        if !self.descend() {
            return None;
        }
        let t = self.expr_here(e);
        self.depth -= 1;
        t
    }

    fn expr_here(&mut self, e: &Expr) -> Option<DType> {
        match e {
            Expr::Int { dtype, .. } => {
                if dtype.is_float() {
                    self.err(format!("integer literal of float type {dtype}"));
                }
                Some(*dtype)
            }
            Expr::Float { dtype, .. } => {
                if !dtype.is_float() {
                    self.err(format!("float literal of non-float type {dtype}"));
                }
                Some(*dtype)
            }
            Expr::Var(v) => {
                if !self.var_ok(*v) {
                    return None;
                }
                if !self.vars.contains(v) {
                    self.err(format!("variable '{}' is used outside its scope", self.f.var(*v).name));
                }
                Some(self.f.var(*v).dtype)
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.expr(lhs)?, self.expr(rhs)?);
                if a != b {
                    self.err(format!("{op:?} of {a} and {b}"));
                    return None;
                }
                let ok = match op {
                    BinOp::FloorDiv
                    | BinOp::FloorMod
                    | BinOp::Shl
                    | BinOp::Shr
                    | BinOp::BitAnd
                    | BinOp::BitOr
                    | BinOp::BitXor => a.is_int(),
                    BinOp::And | BinOp::Or => a == DType::Bool,
                    BinOp::Pow | BinOp::Fmod => a.is_float(),
                    _ => a != DType::Bool,
                };
                if !ok {
                    self.err(format!("{op:?} is not defined on {a}"));
                }
                Some(a)
            }
            Expr::Cmp { op, lhs, rhs } => {
                let (a, b) = (self.expr(lhs)?, self.expr(rhs)?);
                if a != b {
                    self.err(format!("{op:?} compares {a} with {b}"));
                }
                Some(DType::Bool)
            }
            Expr::Not(x) => {
                if self.expr(x)? != DType::Bool {
                    self.err("`!` of a non-bool".into());
                }
                Some(DType::Bool)
            }
            Expr::Select { cond, then, otherwise } => {
                let c = self.expr(cond);
                if c.is_some_and(|c| c != DType::Bool) {
                    self.err("select condition is not bool".into());
                }
                let (a, b) = (self.expr(then)?, self.expr(otherwise)?);
                if a != b {
                    self.err(format!("select branches are {a} and {b}"));
                }
                Some(a)
            }
            Expr::Cast { dtype, value } => {
                self.expr(value);
                Some(*dtype)
            }
            Expr::Math { op, arg } => {
                let t = self.expr(arg)?;
                // Abs and Round are defined on integers too (Round is the identity there).
                let on_integers = matches!(op, MathOp::Abs | MathOp::Round) && t.is_int() && t != DType::Bool;
                if !t.is_float() && !on_integers {
                    self.err(format!("{op:?} of non-float {t}"));
                }
                Some(t)
            }
            Expr::Load { buffer, indices } => {
                self.access(*buffer, indices, "load");
                self.f.buffers.get(buffer.0 as usize).map(|b| b.dtype)
            }
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        if self.descend() {
            self.stmt_here(s);
            self.depth -= 1;
        }
    }

    fn stmt_here(&mut self, s: &Stmt) {
        match s {
            Stmt::Seq(v) => {
                // Declarations inside a sequence are visible to its end only.
                let (saved_b, saved_v) = (self.buffers.clone(), self.vars.clone());
                v.iter().for_each(|st| self.stmt(st));
                self.buffers = saved_b;
                self.vars = saved_v;
            }
            Stmt::For { var, extent, body, .. } => {
                if let Some(t) = self.expr(extent)
                    && !t.is_int()
                {
                    self.err(format!("loop extent is {t}"));
                }
                if !self.var_ok(*var) {
                    return;
                }
                if !self.f.var(*var).dtype.is_int() {
                    self.err(format!("loop variable '{}' is not an integer", self.f.var(*var).name));
                }
                if !self.vars.insert(*var) {
                    self.err(format!("loop variable '{}' is already bound", self.f.var(*var).name));
                }
                self.stmt(body);
                self.vars.remove(var);
            }
            Stmt::Store { buffer, indices, value } => {
                self.access(*buffer, indices, "store");
                if let (Some(t), Some(b)) = (self.expr(value), self.f.buffers.get(buffer.0 as usize))
                    && t != b.dtype
                {
                    let msg = format!("store of {t} into {} buffer '{}'", b.dtype, b.name);
                    self.err(msg);
                }
            }
            Stmt::Allocate { buffer, .. } => self.declare_buffer(*buffer),
            Stmt::DeclPoolBuffer { buffer, pool, byte_offset } => {
                if self.buffer_ok(*pool) {
                    let p = self.f.buffer(*pool);
                    let pool_bytes = p.size_bytes() as u64;
                    if p.dtype != DType::U8 || p.shape.len() != 1 {
                        let msg = format!("pool '{}' must be a 1-d u8 buffer, is {}{:?}", p.name, p.dtype, p.shape);
                        self.err(msg);
                    }
                    if let Some(b) = self.f.buffers.get(buffer.0 as usize) {
                        // The static guarantee behind compiled code staying inside its pools.
                        let end = byte_offset.checked_add(b.size_bytes() as u64);
                        if end.is_none_or(|e| e > pool_bytes) {
                            let msg = format!(
                                "buffer '{}' ({} bytes at {byte_offset}) overruns pool '{}' of {pool_bytes} bytes",
                                b.name,
                                b.size_bytes(),
                                p.name
                            );
                            self.err(msg);
                        }
                        if b.dtype.size_bytes() > 1 && byte_offset % b.dtype.size_bytes() as u64 != 0 {
                            let msg = format!(
                                "buffer '{}' at byte offset {byte_offset} is not aligned to its {} elements",
                                b.name, b.dtype
                            );
                            self.err(msg);
                        }
                    }
                }
                self.declare_buffer(*buffer);
            }
            Stmt::AllocateConst { buffer, data, .. } => {
                self.declare_buffer(*buffer);
                if let Some(b) = self.f.buffers.get(buffer.0 as usize)
                    && (data.dtype() != b.dtype || data.len() != b.num_elements())
                {
                    let msg = format!(
                        "constant '{}' holds {} for a {}{:?} buffer",
                        b.name,
                        data.tensor_type(),
                        b.dtype,
                        b.shape
                    );
                    self.err(msg);
                }
            }
            Stmt::Evaluate(call) => {
                for a in &call.args {
                    match a {
                        Arg::Buffer(b) => {
                            self.buffer_ok(*b);
                        }
                        Arg::Expr(e) => {
                            self.expr(e);
                        }
                    }
                }
                if let (Callee::Func(name), Some(m)) = (&call.callee, self.module) {
                    match m.get(name.as_str()) {
                        None => self.err(format!("call to unknown function '{name}'")),
                        Some(callee) => self.check_call(callee, &call.args),
                    }
                }
            }
            Stmt::If { cond, then, otherwise } => {
                if self.expr(cond).is_some_and(|t| t != DType::Bool) {
                    self.err("if condition is not bool".into());
                }
                self.stmt(then);
                if let Some(o) = otherwise {
                    self.stmt(o);
                }
            }
            Stmt::Let { var, value } => {
                let t = self.expr(value);
                if !self.var_ok(*var) {
                    return;
                }
                if t.is_some_and(|t| t != self.f.var(*var).dtype) {
                    let msg = format!(
                        "let binds {} to {} variable '{}'",
                        t.expect("checked"),
                        self.f.var(*var).dtype,
                        self.f.var(*var).name
                    );
                    self.err(msg);
                }
                self.vars.insert(*var);
            }
        }
    }

    fn check_call(&mut self, callee: &PrimFunc, args: &[Arg]) {
        if args.len() != callee.params.len() {
            self.err(format!(
                "call to '{}' passes {} arguments, it takes {}",
                callee.name,
                args.len(),
                callee.params.len()
            ));
            return;
        }
        for (a, &p) in args.iter().zip(&callee.params) {
            let want = callee.buffer(p);
            match a {
                Arg::Buffer(b) if (b.0 as usize) < self.f.buffers.len() => {
                    let got = self.f.buffer(*b);
                    if got.dtype != want.dtype || got.num_elements() != want.num_elements() {
                        let msg = format!(
                            "call to '{}' passes '{}' ({}{:?}) for '{}' ({}{:?})",
                            callee.name, got.name, got.dtype, got.shape, want.name, want.dtype, want.shape
                        );
                        self.err(msg);
                    }
                }
                Arg::Buffer(_) => {}
                Arg::Expr(_) => {
                    self.err(format!("call to '{}' passes a scalar for buffer '{}'", callee.name, want.name))
                }
            }
        }
    }
}
