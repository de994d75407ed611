//! The loop-IR interpreter: a second oracle that executes a [`Module`] statement by statement.
//!
//! Every intermediate result is rounded or wrapped to its static type, so float results match
//! f32 hardware arithmetic and integer results match two's-complement wrapping. Every buffer
//! access is bounds-checked: an out-of-bounds index is an error naming the buffer, which makes
//! this interpreter a checker for lowering and layout passes.

use std::cell::RefCell;
use std::rc::Rc;

use super::{Arg, BinOp, BufferId, Callee, CmpOp, Expr, ForKind, MAIN, MathOp, Module, PrimFunc, Stmt};
use crate::dtype::DType;
use crate::tensor::{Element, Tensor, Wide};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoopInterpError {
    #[error("module has no function '{0}'")]
    NoFunction(String),
    #[error("function '{func}' takes {expected} buffers, got {got}")]
    Arity { func: String, expected: usize, got: usize },
    #[error("function '{func}': argument for '{buffer}' must be {expected}, got {got}")]
    ArgType { func: String, buffer: String, expected: String, got: String },
    #[error("function '{func}': index {index:?} out of bounds for buffer '{buffer}' of shape {shape:?}")]
    OutOfBounds { func: String, buffer: String, index: Vec<i64>, shape: Vec<usize> },
    #[error("function '{func}': {message}")]
    Eval { func: String, message: String },
    #[error("applying the module's layout transforms: {0}")]
    Layout(#[from] super::layout::LayoutError),
}

/// A scalar value; integers are kept wrapped to their dtype, floats rounded to theirs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Val {
    I(i64),
    U(u64),
    F(f64),
}

impl Val {
    fn wide(self) -> Wide {
        match self {
            Val::I(v) => Wide::I(v),
            Val::U(v) => Wide::U(v),
            Val::F(v) => Wide::F(v),
        }
    }

    fn from_wide(w: Wide) -> Val {
        match w {
            Wide::I(v) => Val::I(v),
            Wide::U(v) => Val::U(v),
            Wide::F(v) => Val::F(v),
        }
    }

    fn as_i128(self) -> i128 {
        match self {
            Val::I(v) => v as i128,
            Val::U(v) => v as i128,
            Val::F(v) => v as i128,
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Val::I(v) => v as f64,
            Val::U(v) => v as f64,
            Val::F(v) => v,
        }
    }

    fn truthy(self) -> bool {
        self.as_i128() != 0
    }
}

/// Converts with `as` semantics into `dtype` (also used to normalise results).
fn convert(v: Val, dtype: DType) -> Val {
    fn go<T: Element>(w: Wide) -> Val {
        Val::from_wide(T::from_wide(w).widen())
    }
    let w = v.wide();
    crate::for_dtype!(dtype, T => go::<T>(w))
}

fn from_i128(v: i128, dtype: DType) -> Val {
    if dtype.is_unsigned_int() { convert(Val::U(v as u64), dtype) } else { convert(Val::I(v as i64), dtype) }
}

fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && ((a < 0) != (b < 0)) { q - 1 } else { q }
}

fn binary(op: BinOp, a: Val, b: Val, dtype: DType) -> Result<Val, String> {
    if dtype.is_float() {
        let (x, y) = (a.as_f64(), b.as_f64());
        let r = match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Div => x / y,
            BinOp::Min if x.is_nan() || y.is_nan() => f64::NAN,
            BinOp::Max if x.is_nan() || y.is_nan() => f64::NAN,
            BinOp::Min => x.min(y),
            BinOp::Max => x.max(y),
            BinOp::Pow => x.powf(y),
            BinOp::Fmod => x % y,
            other => return Err(format!("{other:?} is not defined on {dtype}")),
        };
        return Ok(convert(Val::F(r), dtype));
    }
    let (x, y) = (a.as_i128(), b.as_i128());
    let bits = if dtype == DType::Bool { 1 } else { dtype.int_bits() as i128 };
    let r = match op {
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod if y == 0 => {
            return Err("integer division by zero".into());
        }
        BinOp::Div => x / y,
        BinOp::FloorDiv => floor_div(x, y),
        BinOp::FloorMod => x - floor_div(x, y) * y,
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::Shl | BinOp::Shr if !(0..bits).contains(&y) => {
            return Err(format!("shift by {y} outside 0..{bits}"));
        }
        BinOp::Shl => x << y,
        BinOp::Shr => x >> y,
        BinOp::And => (x != 0 && y != 0) as i128,
        BinOp::Or => (x != 0 || y != 0) as i128,
        BinOp::BitAnd => x & y,
        BinOp::BitOr => x | y,
        BinOp::BitXor => x ^ y,
        BinOp::Pow | BinOp::Fmod => return Err(format!("{op:?} is not defined on {dtype}")),
    };
    Ok(from_i128(r, dtype))
}

fn compare(op: CmpOp, a: Val, b: Val, float: bool) -> bool {
    fn by<T: PartialOrd>(op: CmpOp, x: T, y: T) -> bool {
        match op {
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
        }
    }
    if float { by(op, a.as_f64(), b.as_f64()) } else { by(op, a.as_i128(), b.as_i128()) }
}

fn math(op: MathOp, v: f64) -> f64 {
    match op {
        MathOp::Exp => v.exp(),
        MathOp::Tanh => v.tanh(),
        MathOp::Erf => crate::interp::erf(v),
        MathOp::Sigmoid => {
            if v >= 0.0 {
                1.0 / (1.0 + (-v).exp())
            } else {
                let e = v.exp();
                e / (1.0 + e)
            }
        }
        MathOp::Sqrt => v.sqrt(),
        MathOp::Round => v.round_ties_even(),
        MathOp::Abs => v.abs(),
        MathOp::Floor => v.floor(),
        MathOp::Ceil => v.ceil(),
        MathOp::Log => v.ln(),
        MathOp::Sin => v.sin(),
        MathOp::Cos => v.cos(),
        MathOp::Tan => v.tan(),
        MathOp::Asin => v.asin(),
        MathOp::Acos => v.acos(),
        MathOp::Atan => v.atan(),
        MathOp::Sinh => v.sinh(),
        MathOp::Cosh => v.cosh(),
        MathOp::Asinh => v.asinh(),
        MathOp::Acosh => v.acosh(),
        MathOp::Atanh => v.atanh(),
    }
}

/// Byte-addressed memory, so that buffers declared inside a pool share its bytes exactly as
/// compiled code does.
type Memory = Rc<RefCell<Vec<u8>>>;

/// A buffer's memory and the byte offset where it starts.
#[derive(Clone)]
struct View {
    memory: Memory,
    base: usize,
}

fn decode(bytes: &[u8], dtype: DType) -> Val {
    macro_rules! le {
        ($t:ty) => {
            <$t>::from_le_bytes(bytes.try_into().expect("element size"))
        };
    }
    match dtype {
        DType::F16 => Val::F(half::f16::from_le_bytes(bytes.try_into().expect("2 bytes")).to_f64()),
        DType::F32 => Val::F(le!(f32) as f64),
        DType::F64 => Val::F(le!(f64)),
        DType::I8 => Val::I(le!(i8) as i64),
        DType::I16 => Val::I(le!(i16) as i64),
        DType::I32 => Val::I(le!(i32) as i64),
        DType::I64 => Val::I(le!(i64)),
        DType::U8 => Val::U(le!(u8) as u64),
        DType::U16 => Val::U(le!(u16) as u64),
        DType::U32 => Val::U(le!(u32) as u64),
        DType::U64 => Val::U(le!(u64)),
        DType::Bool => Val::I((bytes[0] != 0) as i64),
    }
}

fn encode(v: Val, dtype: DType, out: &mut [u8]) {
    let v = convert(v, dtype);
    match (dtype, v) {
        (DType::F16, Val::F(x)) => out.copy_from_slice(&half::f16::from_f64(x).to_le_bytes()),
        (DType::F32, Val::F(x)) => out.copy_from_slice(&(x as f32).to_le_bytes()),
        (DType::F64, Val::F(x)) => out.copy_from_slice(&x.to_le_bytes()),
        (DType::Bool, v) => out[0] = (v.as_i128() != 0) as u8,
        (_, Val::I(x)) => out.copy_from_slice(&x.to_le_bytes()[..out.len()]),
        (_, Val::U(x)) => out.copy_from_slice(&x.to_le_bytes()[..out.len()]),
        (_, Val::F(x)) => out.copy_from_slice(&(x as i64).to_le_bytes()[..out.len()]),
    }
}

struct Frame<'m> {
    func: &'m PrimFunc,
    buffers: Vec<Option<View>>,
    vars: Vec<Option<Val>>,
}

/// An argument of a `call extern`, as the interpreter hands it to [`Externs`].
#[derive(Clone, Debug, PartialEq)]
pub enum ExternArg {
    /// A copy of the buffer's bytes (little-endian elements).
    Buffer(Vec<u8>),
    Int(i64),
    Float(f64),
}

/// Precompiled routines the interpreter can run for `call extern "name"(...)` (the CPU
/// kernels), so a module that calls them is still checked here.
pub trait Externs {
    /// Runs routine `name` on `args`; returns the positions of the buffers it wrote, whose
    /// bytes are copied back.
    fn call(&self, name: &str, args: &mut [ExternArg]) -> Result<Vec<usize>, String>;
}

struct Machine<'m> {
    funcs: std::collections::HashMap<&'m str, &'m PrimFunc>,
    externs: Option<&'m dyn Externs>,
    /// Guards against unbounded recursion through calls.
    depth: usize,
}

impl<'m> Frame<'m> {
    fn err(&self, message: impl Into<String>) -> LoopInterpError {
        LoopInterpError::Eval { func: self.func.name.clone(), message: message.into() }
    }

    fn storage(&self, id: BufferId) -> Result<&View, LoopInterpError> {
        self.buffers
            .get(id.0 as usize)
            .and_then(|b| b.as_ref())
            .ok_or_else(|| self.err(format!("buffer #{} used before it is allocated", id.0)))
    }

    /// The memory, byte position and size of one element.
    fn element(
        &self,
        id: BufferId,
        indices: &[Expr],
        m: &Machine<'_>,
    ) -> Result<(View, usize, usize), LoopInterpError> {
        let flat = self.offset(id, indices, m)?;
        let view = self.storage(id)?.clone();
        let size = self.func.buffer(id).dtype.size_bytes();
        let start = view.base + flat * size;
        if start + size > view.memory.borrow().len() {
            return Err(self.err(format!("access to '{}' runs past its memory", self.func.buffer(id).name)));
        }
        Ok((view, start, size))
    }

    fn offset(&self, id: BufferId, indices: &[Expr], m: &Machine<'_>) -> Result<usize, LoopInterpError> {
        let buf = self.func.buffer(id);
        if indices.len() != buf.shape.len() {
            return Err(self.err(format!(
                "buffer '{}' has rank {}, accessed with {} indices",
                buf.name,
                buf.shape.len(),
                indices.len()
            )));
        }
        let mut vals = Vec::with_capacity(indices.len());
        for e in indices {
            vals.push(self.eval(e, m)?.as_i128() as i64);
        }
        let mut flat = 0usize;
        for (&i, &d) in vals.iter().zip(&buf.shape) {
            if i < 0 || i as usize >= d {
                return Err(LoopInterpError::OutOfBounds {
                    func: self.func.name.clone(),
                    buffer: buf.name.clone(),
                    index: vals.clone(),
                    shape: buf.shape.clone(),
                });
            }
            flat = flat * d + i as usize;
        }
        Ok(flat)
    }

    fn eval(&self, e: &Expr, m: &Machine<'_>) -> Result<Val, LoopInterpError> {
        Ok(match e {
            Expr::Int { value, dtype } => convert(Val::I(*value), *dtype),
            Expr::Float { value, dtype } => convert(Val::F(*value), *dtype),
            Expr::Var(v) => self.vars[v.0 as usize]
                .ok_or_else(|| self.err(format!("variable '{}' read before it is set", self.func.var(*v).name)))?,
            Expr::Binary { op, lhs, rhs } => {
                let dtype = e.dtype(self.func);
                binary(*op, self.eval(lhs, m)?, self.eval(rhs, m)?, dtype).map_err(|msg| self.err(msg))?
            }
            Expr::Cmp { op, lhs, rhs } => {
                let float = lhs.dtype(self.func).is_float();
                Val::I(compare(*op, self.eval(lhs, m)?, self.eval(rhs, m)?, float) as i64)
            }
            Expr::Not(x) => Val::I(!self.eval(x, m)?.truthy() as i64),
            Expr::Select { cond, then, otherwise } => {
                // Only the chosen side is evaluated: guarded loads may be out of bounds.
                if self.eval(cond, m)?.truthy() { self.eval(then, m)? } else { self.eval(otherwise, m)? }
            }
            Expr::Cast { dtype, value } => convert(self.eval(value, m)?, *dtype),
            Expr::Math { op, arg } => {
                let dtype = arg.dtype(self.func);
                convert(Val::F(math(*op, self.eval(arg, m)?.as_f64())), dtype)
            }
            Expr::Load { buffer, indices } => {
                let (view, start, size) = self.element(*buffer, indices, m)?;
                let dtype = self.func.buffer(*buffer).dtype;
                decode(&view.memory.borrow()[start..start + size], dtype)
            }
        })
    }

    fn exec(&mut self, s: &Stmt, m: &mut Machine<'m>) -> Result<(), LoopInterpError> {
        match s {
            Stmt::Seq(v) => {
                for st in v {
                    self.exec(st, m)?;
                }
            }
            Stmt::For { var, extent, body, kind } => {
                let n = self.eval(extent, m)?.as_i128();
                let n = i64::try_from(n.max(0)).map_err(|_| self.err(format!("loop extent {n}")))?;
                // A vectorized loop runs in the vector code's order, its tail's repeats included.
                let order = match kind {
                    ForKind::Vectorized(shape) => shape.visit_order(n),
                    _ => std::iter::once(0..n).collect(),
                };
                for i in order.into_iter().flatten() {
                    self.vars[var.0 as usize] = Some(Val::I(i));
                    self.exec(body, m)?;
                }
            }
            Stmt::Store { buffer, indices, value } => {
                let (view, start, size) = self.element(*buffer, indices, m)?;
                let v = self.eval(value, m)?;
                let dtype = self.func.buffer(*buffer).dtype;
                encode(v, dtype, &mut view.memory.borrow_mut()[start..start + size]);
            }
            Stmt::Allocate { buffer, .. } => {
                let b = self.func.buffer(*buffer);
                self.buffers[buffer.0 as usize] =
                    Some(View { memory: Rc::new(RefCell::new(vec![0; b.size_bytes()])), base: 0 });
            }
            Stmt::AllocateConst { buffer, data, .. } => {
                let b = self.func.buffer(*buffer);
                if data.len() != b.num_elements() || data.dtype() != b.dtype {
                    let msg = format!(
                        "constant '{}' holds {} but the buffer is {}{:?}",
                        b.name,
                        data.tensor_type(),
                        b.dtype,
                        b.shape
                    );
                    return Err(self.err(msg));
                }
                self.buffers[buffer.0 as usize] =
                    Some(View { memory: Rc::new(RefCell::new(data.to_le_bytes())), base: 0 });
            }
            Stmt::DeclPoolBuffer { buffer, pool, byte_offset } => {
                let p = self.storage(*pool)?.clone();
                let b = self.func.buffer(*buffer);
                let start = p.base + *byte_offset as usize;
                if start + b.size_bytes() > p.memory.borrow().len() {
                    return Err(self.err(format!("buffer '{}' overruns its pool", b.name)));
                }
                self.buffers[buffer.0 as usize] = Some(View { memory: p.memory, base: start });
            }
            Stmt::Evaluate(call) => {
                let name = match &call.callee {
                    Callee::Func(name) => name,
                    Callee::Extern(name) => return self.call_extern(name, &call.args, m),
                };
                let mut bufs = Vec::with_capacity(call.args.len());
                for a in &call.args {
                    match a {
                        Arg::Buffer(b) => bufs.push((self.storage(*b)?.clone(), self.func.buffer(*b).clone())),
                        Arg::Expr(_) => {
                            return Err(self.err("scalar call arguments are not supported"));
                        }
                    }
                }
                m.call(name, bufs)?;
            }
            Stmt::If { cond, then, otherwise } => {
                if self.eval(cond, m)?.truthy() {
                    self.exec(then, m)?;
                } else if let Some(o) = otherwise {
                    self.exec(o, m)?;
                }
            }
            Stmt::Let { var, value } => {
                let v = convert(self.eval(value, m)?, self.func.var(*var).dtype);
                self.vars[var.0 as usize] = Some(v);
            }
        }
        Ok(())
    }
}

impl<'m> Frame<'m> {
    fn call_extern(&self, name: &str, call_args: &[Arg], m: &Machine<'_>) -> Result<(), LoopInterpError> {
        let Some(externs) = m.externs else {
            return Err(self.err(format!("extern call '{name}' cannot be interpreted without its routines")));
        };
        let mut args = Vec::with_capacity(call_args.len());
        for a in call_args {
            args.push(match a {
                Arg::Buffer(b) => {
                    let view = self.storage(*b)?;
                    let size = self.func.buffer(*b).size_bytes();
                    ExternArg::Buffer(view.memory.borrow()[view.base..view.base + size].to_vec())
                }
                Arg::Expr(e) => match self.eval(e, m)? {
                    Val::F(x) => ExternArg::Float(x),
                    v => ExternArg::Int(v.as_i128() as i64),
                },
            });
        }
        let written = externs.call(name, &mut args).map_err(|e| self.err(format!("routine '{name}': {e}")))?;
        for k in written {
            if let (Some(Arg::Buffer(b)), Some(ExternArg::Buffer(bytes))) = (call_args.get(k), args.get(k)) {
                let view = self.storage(*b)?;
                view.memory.borrow_mut()[view.base..view.base + bytes.len()].copy_from_slice(bytes);
            }
        }
        Ok(())
    }
}

impl<'m> Machine<'m> {
    fn call(&mut self, name: &str, args: Vec<(View, super::Buffer)>) -> Result<(), LoopInterpError> {
        let func = *self.funcs.get(name).ok_or_else(|| LoopInterpError::NoFunction(name.to_string()))?;
        if args.len() != func.params.len() {
            return Err(LoopInterpError::Arity { func: name.into(), expected: func.params.len(), got: args.len() });
        }
        if self.depth > 64 {
            return Err(LoopInterpError::Eval { func: name.into(), message: "call depth exceeds 64".into() });
        }
        let mut frame = Frame { func, buffers: vec![None; func.buffers.len()], vars: vec![None; func.vars.len()] };
        for (&p, (storage, given)) in func.params.iter().zip(args) {
            let want = func.buffer(p);
            // A buffer may be passed under another shape of the same size (a reshape view).
            if want.dtype != given.dtype || want.num_elements() != given.num_elements() {
                return Err(LoopInterpError::ArgType {
                    func: name.into(),
                    buffer: want.name.clone(),
                    expected: format!("{}{:?}", want.dtype, want.shape),
                    got: format!("{}{:?}", given.dtype, given.shape),
                });
            }
            frame.buffers[p.0 as usize] = Some(storage);
        }
        self.depth += 1;
        let r = frame.exec(&func.body, self);
        self.depth -= 1;
        r
    }
}

/// Runs `main` of `module` with `params[i]` bound to main's i-th parameter (zero-filled when
/// `None`), and returns every parameter's final contents with main's parameter shapes.
pub fn run_params(module: &Module, params: Vec<Option<Tensor>>) -> Result<Vec<Tensor>, LoopInterpError> {
    run_params_with(module, params, None)
}

/// [`run_params`], running `call extern` with `externs`.
pub fn run_params_with(
    module: &Module,
    params: Vec<Option<Tensor>>,
    externs: Option<&dyn Externs>,
) -> Result<Vec<Tensor>, LoopInterpError> {
    // Layout transforms not applied yet (a program before the layout stage) are applied
    // first: generated code computes the same values either way, but a routine reads its
    // buffers as the layout stage stores them.
    if module.funcs.iter().any(|f| !f.layout_transforms.is_empty()) {
        let mut laid_out = module.clone();
        super::layout::apply_layout_transforms(&mut laid_out)?;
        return run_params_with(&laid_out, params, externs);
    }
    let main = module.main().ok_or_else(|| LoopInterpError::NoFunction(MAIN.into()))?;
    if params.len() > main.params.len() {
        return Err(LoopInterpError::Arity { func: MAIN.into(), expected: main.params.len(), got: params.len() });
    }
    let mut args = Vec::new();
    for (i, &p) in main.params.iter().enumerate() {
        let b = main.buffer(p).clone();
        let bytes = match params.get(i).cloned().flatten() {
            Some(t) => {
                if t.dtype() != b.dtype || t.len() != b.num_elements() {
                    return Err(LoopInterpError::ArgType {
                        func: MAIN.into(),
                        buffer: b.name.clone(),
                        expected: format!("{}{:?}", b.dtype, b.shape),
                        got: t.tensor_type().to_string(),
                    });
                }
                t.to_le_bytes()
            }
            None => vec![0; b.size_bytes()],
        };
        args.push((View { memory: Rc::new(RefCell::new(bytes)), base: 0 }, b));
    }
    let all = args.clone();
    Machine { funcs: module.by_name(), externs, depth: 0 }.call(MAIN, args)?;
    Ok(all
        .iter()
        .map(|(v, b)| {
            let ty = crate::dtype::TensorType::new(b.dtype, b.shape.clone());
            Tensor::from_le_bytes(&ty, &v.memory.borrow()).expect("parameter memory has the parameter's size")
        })
        .collect())
}

/// Runs `main` of `module`. `inputs` fill main's first parameters in order; the remaining
/// parameters are outputs, returned with main's parameter shapes.
pub fn run(module: &Module, inputs: &[Tensor]) -> Result<Vec<Tensor>, LoopInterpError> {
    run_with(module, inputs, None)
}

/// [`run`], running `call extern` with `externs`.
pub fn run_with(
    module: &Module,
    inputs: &[Tensor],
    externs: Option<&dyn Externs>,
) -> Result<Vec<Tensor>, LoopInterpError> {
    let n = inputs.len();
    let mut all = run_params_with(module, inputs.iter().cloned().map(Some).collect(), externs)?;
    Ok(all.split_off(n))
}
