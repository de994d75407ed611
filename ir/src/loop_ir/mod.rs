//! The loop-level IR, modelled on TVM's TIR: per-operator `PrimFunc`s made of loop nests over
//! buffers, called in order from a `main` function.
//!
//! A [`Module`] is what the memory planner and the code generators consume. Buffers carry a
//! logical shape until [`layout::apply_layout_transforms`] rewrites them to their physical
//! layout and [`flatten::flatten`] reduces them to 1-d (or N-d, per `axis_separators`).
//!
//! Scoping: `Allocate`, `AllocateConst`, `DeclPoolBuffer` and `Let` are declarations; what they declare is visible
//! from the declaration to the end of the enclosing `Seq` (like `let` in Rust).

pub mod analysis;
pub mod build;
pub mod flatten;
pub mod index_map;
pub mod interp;
pub mod layout;
pub mod layouts;
pub mod parse;
pub mod print;
pub mod simplify;
pub mod target;
pub mod verify;
pub mod workspace;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::dtype::DType;
use crate::tensor::Tensor;

pub use index_map::IndexMap;

/// Index of a buffer in [`PrimFunc::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// Index of a scalar variable in [`PrimFunc::vars`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// Where a buffer lives: ordinary memory, or registers/stack-like scratch private to a loop
/// body (accumulators).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Global,
    Local,
}

/// A typed n-dimensional buffer. Indices into it are row-major over `shape`.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Positions in `shape` where a new physical axis starts (see the layout seed). After
    /// flattening to N-d this is `0..N-1`, so flattening again changes nothing.
    pub axis_separators: Vec<usize>,
    pub scope: Scope,
}

impl Buffer {
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<usize>) -> Buffer {
        Buffer { name: name.into(), dtype, shape, axis_separators: vec![], scope: Scope::Global }
    }

    /// The element count, saturating at `usize::MAX` (never for a verified buffer: see
    /// [`verify`], which bounds every buffer's size).
    pub fn num_elements(&self) -> usize {
        self.shape.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
    }

    /// The byte size, saturating like [`Buffer::num_elements`].
    pub fn size_bytes(&self) -> usize {
        self.num_elements().saturating_mul(self.dtype.size_bytes())
    }
}

/// How deep statements and expressions may nest. Every pass over the loop IR recurses through
/// them; the parser and the verifier refuse deeper programs, and lowering never makes them
/// (ranks are at most 64, fused epilogues at most 32 steps), so no input can exhaust the stack.
pub const MAX_NESTING: usize = 512;

#[derive(Clone, Debug, PartialEq)]
pub struct VarDecl {
    pub name: String,
    pub dtype: DType,
}

/// How a loop runs. Every kind has the serial loop's meaning (the verifier rejects annotations
/// whose reordering could change results); the kinds other than `Serial` are a target's
/// decisions for the code generator, which emits them as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForKind {
    Serial,
    /// Run as SIMD vectors of the given shape.
    Vectorized(VectorShape),
    /// `factor` iterations per step (the whole loop when `factor` >= the extent), the leftover
    /// ones one at a time. Directly around a vectorized loop it is unroll-and-jam: `factor`
    /// copies of the vector body share each inner loop, a `factor x vectors` register block.
    Unrolled(u32),
    /// Split across threads: the function runs once per chunk of this loop's iterations a
    /// thread takes (each thread its own contiguous slice first, then chunks left in others'),
    /// running everything outside the loop each time. So a target marks a loop parallel only
    /// when its iterations write disjoint outputs and nothing else in the function writes
    /// global memory. At most one per function, outside
    /// `main`, with a constant extent (the verifier checks); interpreters run it serially.
    Parallel,
}

/// The register shape of a vectorized loop: `lanes`-wide vectors, `vectors` of them per block
/// (each value that moves with the loop variable is `vectors` registers), and how the
/// iterations that a whole block does not cover run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VectorShape {
    pub lanes: u32,
    pub vectors: u32,
    pub tail: VectorTail,
}

/// What runs after the last whole block of a vectorized loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VectorTail {
    /// The leftover iterations one at a time, as scalar code.
    Scalar,
    /// Single vectors, the last one ending at the extent and so repeating iterations already
    /// done: only for a constant extent of at least `lanes`, and a body that reads none of the
    /// global buffers it writes (repeating an iteration then rewrites the same values).
    Overlap,
    /// The whole loop as one block of `vectors` vectors whose starts are clamped to
    /// `extent - lanes` (a row shorter than a block, e.g. 7 or 14 wide, in one reduction pass):
    /// only for a constant extent in `lanes + 1..=lanes * vectors`, under `Overlap`'s condition.
    Clamp,
}

impl VectorShape {
    /// The iterations in the order the vector code visits them, repeats included, for a loop of
    /// `extent` iterations (the order the loop-IR interpreter runs): whole blocks, then the tail.
    pub fn visit_order(&self, extent: i64) -> Vec<std::ops::Range<i64>> {
        let (lanes, block) = (i64::from(self.lanes), i64::from(self.lanes) * i64::from(self.vectors));
        let n = extent.max(0);
        match self.tail {
            VectorTail::Clamp => {
                (0..i64::from(self.vectors)).map(|k| (k * lanes).min(n - lanes)).map(|s| s..s + lanes).collect()
            }
            VectorTail::Scalar => std::iter::once(0..n).collect(),
            VectorTail::Overlap => {
                let main_end = n - n % block;
                let mut out: Vec<_> = std::iter::once(0..main_end).collect();
                out.extend((main_end..n).step_by(lanes as usize).map(|s| s.min(n - lanes)).map(|s| s..s + lanes));
                out
            }
        }
    }
}

/// Binary operators. `Div` is IEEE division on floats and truncating division on integers;
/// `FloorDiv`/`FloorMod` round toward negative infinity (integers only). `Shr` is arithmetic on
/// signed and logical on unsigned integers. `And`/`Or` are logical (bool operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    FloorMod,
    Min,
    Max,
    Shl,
    Shr,
    /// Logical and / or of bools.
    And,
    Or,
    /// Bitwise and / or / xor of integers.
    BitAnd,
    BitOr,
    BitXor,
    /// `x^y` (floats).
    Pow,
    /// The remainder of `x / y` truncated toward zero, with `x`'s sign (C's fmod; floats).
    Fmod,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Elementwise math on floats (the code generators emit these inline, not as libcalls).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathOp {
    Exp,
    Tanh,
    Sigmoid,
    Erf,
    Sqrt,
    /// Round to nearest, ties to even.
    Round,
    Abs,
    Floor,
    Ceil,
    Log,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
}

impl MathOp {
    /// The libm function computing it in f64 (named as the op prints), for those code
    /// generation calls.
    pub fn libm_name(self) -> Option<&'static str> {
        use MathOp::*;
        matches!(self, Log | Sin | Cos | Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh | Acosh | Atanh)
            .then(|| print::math_text(self))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An integer (or bool, 0/1) constant of `dtype`. Index arithmetic uses i64.
    Int {
        value: i64,
        dtype: DType,
    },
    Float {
        value: f64,
        dtype: DType,
    },
    Var(VarId),
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// A comparison; the result is bool.
    Cmp {
        op: CmpOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Not(Box<Expr>),
    Select {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    /// Conversion with Rust `as` semantics (float->int truncates toward zero and saturates).
    Cast {
        dtype: DType,
        value: Box<Expr>,
    },
    Math {
        op: MathOp,
        arg: Box<Expr>,
    },
    Load {
        buffer: BufferId,
        indices: Vec<Expr>,
    },
}

/// What a call statement calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Callee {
    /// Another PrimFunc of the module.
    Func(String),
    /// A function outside the module, resolved by the code generator or the runtime.
    Extern(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Buffer(BufferId),
    Expr(Expr),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub callee: Callee,
    pub args: Vec<Arg>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Seq(Vec<Stmt>),
    /// `for var in 0..extent`.
    For {
        var: VarId,
        extent: Expr,
        kind: ForKind,
        body: Box<Stmt>,
    },
    Store {
        buffer: BufferId,
        indices: Vec<Expr>,
        value: Expr,
    },
    /// Declares scratch or an intermediate tensor; `pools` lists candidate memory pools in order
    /// of preference (empty: the default workspace pool).
    Allocate {
        buffer: BufferId,
        pools: Vec<String>,
    },
    /// Declares constant data (weights), placed in a constant pool.
    AllocateConst {
        buffer: BufferId,
        data: Arc<Tensor>,
        pools: Vec<String>,
    },
    /// Declares `buffer` as the bytes of pool `pool` (a `u8` buffer) from `byte_offset` on:
    /// what planning turns allocations into.
    DeclPoolBuffer {
        buffer: BufferId,
        pool: BufferId,
        byte_offset: u64,
    },
    Evaluate(Call),
    If {
        cond: Expr,
        then: Box<Stmt>,
        otherwise: Option<Box<Stmt>>,
    },
    Let {
        var: VarId,
        value: Expr,
    },
}

/// A function over buffers.
#[derive(Clone, Debug, PartialEq)]
pub struct PrimFunc {
    pub name: String,
    pub params: Vec<BufferId>,
    pub buffers: Vec<Buffer>,
    pub vars: Vec<VarDecl>,
    pub body: Stmt,
    /// Layout transforms still to apply (`layout_transform_map` in the seed), by buffer.
    pub layout_transforms: BTreeMap<BufferId, IndexMap>,
    /// The target that runs this function (`cpu`, `vta`), set by the target layer; `None`
    /// before it ran. Pool placement follows from it (see `heron_planner::extract`).
    pub target: Option<String>,
}

impl PrimFunc {
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }

    pub fn var(&self, id: VarId) -> &VarDecl {
        &self.vars[id.0 as usize]
    }

    pub fn find_buffer(&self, name: &str) -> Option<BufferId> {
        self.buffers.iter().position(|b| b.name == name).map(|i| BufferId(i as u32))
    }

    /// The body's top-level statements, leaving the body empty (for passes that rebuild it).
    pub fn take_body(&mut self) -> Vec<Stmt> {
        match std::mem::replace(&mut self.body, Stmt::Seq(vec![])) {
            Stmt::Seq(v) => v,
            other => vec![other],
        }
    }
}

/// A set of PrimFuncs; `main` calls the operator functions in order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Module {
    pub funcs: Vec<PrimFunc>,
}

/// Name of the entry function of a lowered model.
pub const MAIN: &str = "main";

impl Module {
    /// The function called `name` (a linear search: for many lookups, use [`Module::by_name`]).
    pub fn func(&self, name: &str) -> Option<&PrimFunc> {
        self.funcs.iter().find(|f| f.name == name)
    }

    /// Every function by name, for constant-time lookups.
    pub fn by_name(&self) -> HashMap<&str, &PrimFunc> {
        self.funcs.iter().map(|f| (f.name.as_str(), f)).collect()
    }

    pub fn main(&self) -> Option<&PrimFunc> {
        self.func(MAIN)
    }
}

impl Expr {
    pub fn index(v: i64) -> Expr {
        Expr::Int { value: v, dtype: DType::I64 }
    }

    pub fn int(v: i64, dtype: DType) -> Expr {
        Expr::Int { value: v, dtype }
    }

    pub fn float(v: f64, dtype: DType) -> Expr {
        Expr::Float { value: v, dtype }
    }

    pub fn bool(v: bool) -> Expr {
        Expr::Int { value: v as i64, dtype: DType::Bool }
    }

    pub fn binary(op: BinOp, lhs: Expr, rhs: Expr) -> Expr {
        Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }
    }

    pub fn cmp(op: CmpOp, lhs: Expr, rhs: Expr) -> Expr {
        Expr::Cmp { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }
    }

    pub fn select(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
        Expr::Select { cond: Box::new(cond), then: Box::new(then), otherwise: Box::new(otherwise) }
    }

    pub fn cast(dtype: DType, value: Expr) -> Expr {
        Expr::Cast { dtype, value: Box::new(value) }
    }

    pub fn math(op: MathOp, arg: Expr) -> Expr {
        Expr::Math { op, arg: Box::new(arg) }
    }

    pub fn load(buffer: BufferId, indices: Vec<Expr>) -> Expr {
        Expr::Load { buffer, indices }
    }

    /// The constant value, when the expression is an integer literal.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::Int { value, .. } => Some(*value),
            _ => None,
        }
    }

    /// The static type of the expression in `func`.
    pub fn dtype(&self, func: &PrimFunc) -> DType {
        match self {
            Expr::Int { dtype, .. } | Expr::Float { dtype, .. } | Expr::Cast { dtype, .. } => *dtype,
            Expr::Var(v) => func.var(*v).dtype,
            Expr::Binary { lhs, .. } => lhs.dtype(func),
            Expr::Cmp { .. } | Expr::Not(_) => DType::Bool,
            Expr::Select { then, .. } => then.dtype(func),
            Expr::Math { arg, .. } => arg.dtype(func),
            Expr::Load { buffer, .. } => func.buffer(*buffer).dtype,
        }
    }

    /// Calls `f` on every direct sub-expression.
    pub fn for_each_child(&self, mut f: impl FnMut(&Expr)) {
        match self {
            Expr::Int { .. } | Expr::Float { .. } | Expr::Var(_) => {}
            Expr::Binary { lhs, rhs, .. } | Expr::Cmp { lhs, rhs, .. } => {
                f(lhs);
                f(rhs);
            }
            Expr::Not(e) | Expr::Cast { value: e, .. } | Expr::Math { arg: e, .. } => f(e),
            Expr::Select { cond, then, otherwise } => {
                f(cond);
                f(then);
                f(otherwise);
            }
            Expr::Load { indices, .. } => indices.iter().for_each(f),
        }
    }

    /// Rebuilds the expression bottom-up, applying `f` to every node after its children.
    pub fn map(self, f: &mut impl FnMut(Expr) -> Expr) -> Expr {
        let e = match self {
            Expr::Binary { op, lhs, rhs } => Expr::binary(op, lhs.map(f), rhs.map(f)),
            Expr::Cmp { op, lhs, rhs } => Expr::cmp(op, lhs.map(f), rhs.map(f)),
            Expr::Not(e) => Expr::Not(Box::new(e.map(f))),
            Expr::Select { cond, then, otherwise } => Expr::select(cond.map(f), then.map(f), otherwise.map(f)),
            Expr::Cast { dtype, value } => Expr::cast(dtype, value.map(f)),
            Expr::Math { op, arg } => Expr::math(op, arg.map(f)),
            Expr::Load { buffer, indices } => Expr::load(buffer, indices.into_iter().map(|i| i.map(f)).collect()),
            leaf => leaf,
        };
        f(e)
    }
}

impl Stmt {
    /// Flattens nested sequences and drops empty ones.
    pub fn seq(stmts: Vec<Stmt>) -> Stmt {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s {
                Stmt::Seq(inner) => out.extend(inner),
                other => out.push(other),
            }
        }
        if out.len() == 1 { out.pop().expect("one statement") } else { Stmt::Seq(out) }
    }

    /// Calls `f` on every statement in pre-order.
    pub fn walk(&self, f: &mut impl FnMut(&Stmt)) {
        f(self);
        match self {
            Stmt::Seq(v) => v.iter().for_each(|s| s.walk(f)),
            Stmt::For { body, .. } => body.walk(f),
            Stmt::If { then, otherwise, .. } => {
                then.walk(f);
                if let Some(o) = otherwise {
                    o.walk(f);
                }
            }
            _ => {}
        }
    }

    /// Calls `f` on every expression directly held by this statement (not nested statements).
    pub fn for_each_expr(&self, mut f: impl FnMut(&Expr)) {
        match self {
            Stmt::For { extent, .. } => f(extent),
            Stmt::Store { indices, value, .. } => {
                indices.iter().for_each(&mut f);
                f(value);
            }
            Stmt::Evaluate(call) => call.args.iter().for_each(|a| {
                if let Arg::Expr(e) = a {
                    f(e)
                }
            }),
            Stmt::If { cond, .. } => f(cond),
            Stmt::Let { value, .. } => f(value),
            Stmt::Seq(_) | Stmt::Allocate { .. } | Stmt::AllocateConst { .. } | Stmt::DeclPoolBuffer { .. } => {}
        }
    }

    /// Rewrites every expression (including those of nested statements) with `f`.
    pub fn map_exprs(self, f: &mut impl FnMut(Expr) -> Expr) -> Stmt {
        match self {
            Stmt::Seq(v) => Stmt::Seq(v.into_iter().map(|s| s.map_exprs(f)).collect()),
            Stmt::For { var, extent, kind, body } => {
                Stmt::For { var, extent: f(extent), kind, body: Box::new(body.map_exprs(f)) }
            }
            Stmt::Store { buffer, indices, value } => {
                Stmt::Store { buffer, indices: indices.into_iter().map(&mut *f).collect(), value: f(value) }
            }
            Stmt::Evaluate(Call { callee, args }) => Stmt::Evaluate(Call {
                callee,
                args: args
                    .into_iter()
                    .map(|a| match a {
                        Arg::Expr(e) => Arg::Expr(f(e)),
                        b => b,
                    })
                    .collect(),
            }),
            Stmt::If { cond, then, otherwise } => Stmt::If {
                cond: f(cond),
                then: Box::new(then.map_exprs(f)),
                otherwise: otherwise.map(|o| Box::new(o.map_exprs(f))),
            },
            Stmt::Let { var, value } => Stmt::Let { var, value: f(value) },
            other => other,
        }
    }

    /// Rewrites the index list of every load and store (in expressions and statements) with
    /// `f(buffer, indices)`.
    pub fn map_accesses(self, f: &mut impl FnMut(BufferId, Vec<Expr>) -> Vec<Expr>) -> Stmt {
        let s = self.map_exprs(&mut |e| {
            e.map(&mut |e| match e {
                Expr::Load { buffer, indices } => {
                    let indices = f(buffer, indices);
                    Expr::Load { buffer, indices }
                }
                other => other,
            })
        });
        s.map_stores(f)
    }

    /// Every buffer this statement (and everything nested in it) loads, stores or passes to a
    /// call, in visiting order, with repeats. Declarations are not uses.
    pub fn buffers_used(&self) -> Vec<BufferId> {
        fn loads(e: &Expr, out: &mut Vec<BufferId>) {
            if let Expr::Load { buffer, .. } = e {
                out.push(*buffer);
            }
            e.for_each_child(|c| loads(c, out));
        }
        let mut out = Vec::new();
        self.walk(&mut |st| {
            match st {
                Stmt::Store { buffer, .. } => out.push(*buffer),
                Stmt::Evaluate(call) => out.extend(call.args.iter().filter_map(|a| match a {
                    Arg::Buffer(b) => Some(*b),
                    Arg::Expr(_) => None,
                })),
                _ => {}
            }
            st.for_each_expr(|e| loads(e, &mut out));
        });
        out
    }

    /// Rewrites every statement bottom-up with `f` (children first).
    pub fn map_stmts(self, f: &mut impl FnMut(Stmt) -> Stmt) -> Stmt {
        let s = match self {
            Stmt::Seq(v) => Stmt::Seq(v.into_iter().map(|s| s.map_stmts(f)).collect()),
            Stmt::For { var, extent, kind, body } => Stmt::For { var, extent, kind, body: Box::new(body.map_stmts(f)) },
            Stmt::If { cond, then, otherwise } => Stmt::If {
                cond,
                then: Box::new(then.map_stmts(f)),
                otherwise: otherwise.map(|o| Box::new(o.map_stmts(f))),
            },
            other => other,
        };
        f(s)
    }

    fn map_stores(self, f: &mut impl FnMut(BufferId, Vec<Expr>) -> Vec<Expr>) -> Stmt {
        match self {
            Stmt::Seq(v) => Stmt::Seq(v.into_iter().map(|s| s.map_stores(f)).collect()),
            Stmt::For { var, extent, kind, body } => {
                Stmt::For { var, extent, kind, body: Box::new(body.map_stores(f)) }
            }
            Stmt::If { cond, then, otherwise } => Stmt::If {
                cond,
                then: Box::new(then.map_stores(f)),
                otherwise: otherwise.map(|o| Box::new(o.map_stores(f))),
            },
            Stmt::Store { buffer, indices, value } => {
                let indices = f(buffer, indices);
                Stmt::Store { buffer, indices, value }
            }
            other => other,
        }
    }
}
