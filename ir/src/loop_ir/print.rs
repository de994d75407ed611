//! The text form of the loop IR, read back by [`super::parse`]. Example:
//!
//! ```text
//! func @relu(%x: f32[4], %y: f32[4]) {
//!   for %i0: i64 in 0..4 serial {
//!     %y[%i0] = max(%x[%i0], f32(0.0))
//!   }
//! }
//! ```
//!
//! Binary operators are fully parenthesised; literals other than i64 carry their type
//! (`f32(1.5)`, `i8(-3)`); constant data is printed as little-endian hex, or elided for display.

use std::fmt::Write;

use super::{Arg, BinOp, Buffer, Callee, CmpOp, Expr, ForKind, MathOp, Module, PrimFunc, Scope, Stmt, VectorTail};

/// Whether constant data is printed in full (round-trips) or elided (readable, for goldens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstData {
    Full,
    Elided,
}

pub fn print_module(m: &Module, data: ConstData) -> String {
    let mut out = String::new();
    for (i, f) in m.funcs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&print_func(f, data));
    }
    out
}

pub fn print_func(f: &PrimFunc, data: ConstData) -> String {
    let mut p = Printer { f, out: String::new(), data };
    p.func();
    p.out
}

pub(crate) fn buffer_type(b: &Buffer) -> String {
    let dims: Vec<String> = b.shape.iter().map(|d| d.to_string()).collect();
    let mut s = format!("{}[{}]", b.dtype, dims.join(", "));
    if !b.axis_separators.is_empty() {
        let seps: Vec<String> = b.axis_separators.iter().map(|d| d.to_string()).collect();
        write!(s, " sep [{}]", seps.join(", ")).expect("write to string");
    }
    if b.scope == Scope::Local {
        s.push_str(" local");
    }
    s
}

fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// `%name`/`@name` sigil form: plain when the name is a simple identifier, quoted otherwise.
pub(crate) fn sigil_name(sigil: char, name: &str) -> String {
    let simple = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if simple { format!("{sigil}{name}") } else { format!("{sigil}{}", quote(name)) }
}

pub(crate) fn binop_text(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::FloorDiv => "//",
        BinOp::FloorMod => "%",
        BinOp::Shl => "<<",
        BinOp::Shr => ">>",
        BinOp::And => "&&",
        BinOp::Or => "||",
        BinOp::BitAnd => "&",
        BinOp::BitOr => "|",
        BinOp::BitXor => "^",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::Pow => "pow",
        BinOp::Fmod => "fmod",
    }
}

pub(crate) fn cmp_text(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

pub(crate) fn math_text(op: MathOp) -> &'static str {
    match op {
        MathOp::Exp => "exp",
        MathOp::Tanh => "tanh",
        MathOp::Erf => "erf",
        MathOp::Sigmoid => "sigmoid",
        MathOp::Sqrt => "sqrt",
        MathOp::Round => "round",
        MathOp::Abs => "abs",
        MathOp::Floor => "floor",
        MathOp::Ceil => "ceil",
        MathOp::Log => "log",
        MathOp::Sin => "sin",
        MathOp::Cos => "cos",
        MathOp::Tan => "tan",
        MathOp::Asin => "asin",
        MathOp::Acos => "acos",
        MathOp::Atan => "atan",
        MathOp::Sinh => "sinh",
        MathOp::Cosh => "cosh",
        MathOp::Asinh => "asinh",
        MathOp::Acosh => "acosh",
        MathOp::Atanh => "atanh",
    }
}

impl std::fmt::Display for ForKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForKind::Serial => f.write_str("serial"),
            ForKind::Vectorized(v) => {
                let tail = match v.tail {
                    VectorTail::Scalar => "scalar",
                    VectorTail::Overlap => "overlap",
                    VectorTail::Clamp => "clamp",
                };
                write!(f, "vectorized(lanes={}, vectors={}, tail={tail})", v.lanes, v.vectors)
            }
            ForKind::Unrolled(k) => write!(f, "unrolled({k})"),
            ForKind::Parallel => f.write_str("parallel"),
        }
    }
}

fn float_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{v:?}")
    }
}

fn pools_text(pools: &[String]) -> String {
    let p: Vec<String> = pools.iter().map(|s| quote(s)).collect();
    format!("pools [{}]", p.join(", "))
}

struct Printer<'f> {
    f: &'f PrimFunc,
    out: String,
    data: ConstData,
}

impl Printer<'_> {
    fn buf(&self, id: super::BufferId) -> String {
        sigil_name('%', &self.f.buffer(id).name)
    }

    fn func(&mut self) {
        let params: Vec<String> =
            self.f.params.iter().map(|&p| format!("{}: {}", self.buf(p), buffer_type(self.f.buffer(p)))).collect();
        writeln!(self.out, "func {}({}) {{", sigil_name('@', &self.f.name), params.join(", "))
            .expect("write to string");
        if let Some(target) = &self.f.target {
            writeln!(self.out, "  target {}", quote(target)).expect("write to string");
        }
        for (b, map) in &self.f.layout_transforms {
            writeln!(self.out, "  layout {} {}", self.buf(*b), quote(&map.to_string())).expect("write to string");
        }
        match &self.f.body {
            Stmt::Seq(v) => v.iter().for_each(|s| self.stmt(s, 1)),
            s => self.stmt(s, 1),
        }
        self.out.push_str("}\n");
    }

    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn block(&mut self, s: &Stmt, depth: usize) {
        match s {
            Stmt::Seq(v) => v.iter().for_each(|st| self.stmt(st, depth)),
            other => self.stmt(other, depth),
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        match s {
            Stmt::Seq(v) => {
                self.line(depth, "{");
                v.iter().for_each(|st| self.stmt(st, depth + 1));
                self.line(depth, "}");
            }
            Stmt::For { var, extent, kind, body } => {
                let v = self.f.var(*var);
                let head =
                    format!("for {}: {} in 0..{} {} {{", sigil_name('%', &v.name), v.dtype, self.expr(extent), kind);
                self.line(depth, &head);
                self.block(body, depth + 1);
                self.line(depth, "}");
            }
            Stmt::Store { buffer, indices, value } => {
                let text = format!("{}[{}] = {}", self.buf(*buffer), self.exprs(indices), self.expr(value));
                self.line(depth, &text);
            }
            Stmt::Allocate { buffer, pools } => {
                let b = self.f.buffer(*buffer);
                let text = format!("allocate {}: {} {}", self.buf(*buffer), buffer_type(b), pools_text(pools));
                self.line(depth, &text);
            }
            Stmt::AllocateConst { buffer, data, pools } => {
                let b = self.f.buffer(*buffer);
                let body = match self.data {
                    ConstData::Full => {
                        let mut hex = String::with_capacity(2 * data.size_bytes());
                        for byte in data.to_le_bytes() {
                            write!(hex, "{byte:02x}").expect("write to string");
                        }
                        format!("hex {}", quote(&hex))
                    }
                    ConstData::Elided => "<elided>".to_string(),
                };
                let text = format!("constant {}: {} {} = {body}", self.buf(*buffer), buffer_type(b), pools_text(pools));
                self.line(depth, &text);
            }
            Stmt::DeclPoolBuffer { buffer, pool, byte_offset } => {
                let b = self.f.buffer(*buffer);
                let text =
                    format!("view {}: {} in {} at {byte_offset}", self.buf(*buffer), buffer_type(b), self.buf(*pool));
                self.line(depth, &text);
            }
            Stmt::Evaluate(call) => {
                let args: Vec<String> = call
                    .args
                    .iter()
                    .map(|a| match a {
                        Arg::Buffer(b) => self.buf(*b),
                        Arg::Expr(e) => self.expr(e),
                    })
                    .collect();
                let callee = match &call.callee {
                    Callee::Func(n) => sigil_name('@', n),
                    Callee::Extern(n) => format!("extern {}", quote(n)),
                };
                self.line(depth, &format!("call {callee}({})", args.join(", ")));
            }
            Stmt::If { cond, then, otherwise } => {
                self.line(depth, &format!("if {} {{", self.expr(cond)));
                self.block(then, depth + 1);
                if let Some(o) = otherwise {
                    self.line(depth, "} else {");
                    self.block(o, depth + 1);
                }
                self.line(depth, "}");
            }
            Stmt::Let { var, value } => {
                let v = self.f.var(*var);
                let text = format!("let {}: {} = {}", sigil_name('%', &v.name), v.dtype, self.expr(value));
                self.line(depth, &text);
            }
        }
    }

    fn exprs(&self, es: &[Expr]) -> String {
        es.iter().map(|e| self.expr(e)).collect::<Vec<_>>().join(", ")
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Int { value, dtype } if *dtype == crate::dtype::DType::I64 => value.to_string(),
            Expr::Int { value, dtype } => format!("{dtype}({value})"),
            Expr::Float { value, dtype } => format!("{dtype}({})", float_text(*value)),
            Expr::Var(v) => sigil_name('%', &self.f.var(*v).name),
            Expr::Binary { op: op @ (BinOp::Min | BinOp::Max | BinOp::Pow | BinOp::Fmod), lhs, rhs } => {
                format!("{}({}, {})", binop_text(*op), self.expr(lhs), self.expr(rhs))
            }
            Expr::Binary { op, lhs, rhs } => format!("({} {} {})", self.expr(lhs), binop_text(*op), self.expr(rhs)),
            Expr::Cmp { op, lhs, rhs } => {
                format!("({} {} {})", self.expr(lhs), cmp_text(*op), self.expr(rhs))
            }
            Expr::Not(x) => format!("!{}", self.expr(x)),
            Expr::Select { cond, then, otherwise } => {
                format!("select({}, {}, {})", self.expr(cond), self.expr(then), self.expr(otherwise))
            }
            Expr::Cast { dtype, value } => format!("cast<{dtype}>({})", self.expr(value)),
            Expr::Math { op, arg } => format!("{}({})", math_text(*op), self.expr(arg)),
            Expr::Load { buffer, indices } => {
                format!("{}[{}]", self.buf(*buffer), self.exprs(indices))
            }
        }
    }
}
