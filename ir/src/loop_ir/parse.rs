//! Parser for the text form written by [`super::print`]; `parse_module(print_module(m)) == m`
//! when constant data is printed in full.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::index_map::IndexMap;
use super::{
    Arg, BinOp, Buffer, BufferId, Call, Callee, CmpOp, Expr, ForKind, MAX_NESTING, MathOp, Module, PrimFunc, Scope,
    Stmt, VarDecl, VarId, VectorShape, VectorTail,
};
use crate::dtype::{DType, TensorType};
use crate::tensor::Tensor;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Int(i128),
    /// A float literal's text (only inside typed literals such as `f32(1.5e-3)`).
    Float(String),
    Str(String),
    Local(String),
    Global(String),
    Punct(&'static str),
}

const PUNCTS: [&str; 30] = [
    "..", "//", "<<", ">>", "&&", "||", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ":", "=", "+", "-",
    "*", "/", "%", "<", ">", "!", "&", "|", "^",
];

struct Lexer<'t> {
    text: &'t str,
    pos: usize,
}

fn position(text: &str, pos: usize) -> (usize, usize) {
    let before = &text[..pos.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(before.len(), |n| before.len() - n - 1) + 1;
    (line, column)
}

impl Lexer<'_> {
    fn err(&self, pos: usize, message: impl Into<String>) -> ParseError {
        let (line, column) = position(self.text, pos);
        ParseError { line, column, message: message.into() }
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.text[self.pos..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, 'r')) => out.push('\r'),
                    Some((_, '0')) => out.push('\0'),
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, '\'')) => out.push('\''),
                    Some((_, 'u')) => {
                        let rest: String = chars.by_ref().map(|(_, c)| c).take_while(|&c| c != '}').collect();
                        let code = rest.trim_start_matches('{');
                        let ch = u32::from_str_radix(code, 16).ok().and_then(char::from_u32);
                        out.push(ch.ok_or_else(|| self.err(start, "bad \\u escape"))?);
                    }
                    _ => return Err(self.err(start, "bad escape in string")),
                },
                c => out.push(c),
            }
        }
        Err(self.err(start, "unterminated string"))
    }

    fn tokens(mut self) -> Result<Vec<(Tok, usize)>, ParseError> {
        let mut out = Vec::new();
        loop {
            let rest = &self.text[self.pos..];
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            if trimmed.is_empty() {
                return Ok(out);
            }
            let start = self.pos;
            let c = trimmed.chars().next().expect("non-empty");
            let word_len =
                |s: &str| s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(s.len());
            let tok = if c == '"' {
                Tok::Str(self.string()?)
            } else if c == '%' || c == '@' {
                let after = &trimmed[1..];
                let name = if after.starts_with('"') {
                    self.pos += 1;
                    self.string()?
                } else {
                    let n = word_len(after);
                    if n == 0 {
                        if c == '%' {
                            self.pos += 1;
                            out.push((Tok::Punct("%"), start));
                            continue;
                        }
                        return Err(self.err(start, "expected a name after `@`"));
                    }
                    self.pos += 1 + n;
                    after[..n].to_string()
                };
                if c == '%' { Tok::Local(name) } else { Tok::Global(name) }
            } else if c.is_ascii_digit() {
                let b = trimmed.as_bytes();
                let digits = |mut i: usize| {
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    i
                };
                let mut n = digits(0);
                let mut float = false;
                // `1.5` is a float, `0..4` is a range.
                if n + 1 < b.len() && b[n] == b'.' && b[n + 1].is_ascii_digit() {
                    n = digits(n + 1);
                    float = true;
                }
                if n < b.len() && (b[n] == b'e' || b[n] == b'E') {
                    let mut m = n + 1;
                    if m < b.len() && (b[m] == b'+' || b[m] == b'-') {
                        m += 1;
                    }
                    if m < b.len() && b[m].is_ascii_digit() {
                        n = digits(m);
                        float = true;
                    }
                }
                self.pos += n;
                if float {
                    Tok::Float(trimmed[..n].to_string())
                } else {
                    Tok::Int(trimmed[..n].parse().map_err(|_| self.err(start, "integer out of range"))?)
                }
            } else if c.is_ascii_alphabetic() || c == '_' {
                let n = word_len(trimmed);
                self.pos += n;
                Tok::Ident(trimmed[..n].to_string())
            } else if let Some(p) = PUNCTS.iter().find(|p| trimmed.starts_with(**p)) {
                self.pos += p.len();
                Tok::Punct(p)
            } else {
                return Err(self.err(start, format!("unexpected character `{c}`")));
            };
            out.push((tok, start));
        }
    }
}

fn dtype_named(s: &str) -> Option<DType> {
    DType::ALL.iter().copied().find(|d| d.name() == s)
}

pub fn parse_module(text: &str) -> Result<Module, ParseError> {
    let toks = Lexer { text, pos: 0 }.tokens()?;
    let mut p = Parser { text, toks, i: 0, func: None, buffers: HashMap::new(), vars: HashMap::new(), depth: 0 };
    let mut funcs = Vec::new();
    while p.i < p.toks.len() {
        funcs.push(p.func()?);
    }
    Ok(Module { funcs })
}

struct Parser<'t> {
    text: &'t str,
    toks: Vec<(Tok, usize)>,
    i: usize,
    func: Option<PrimFunc>,
    buffers: HashMap<String, BufferId>,
    vars: HashMap<String, VarId>,
    /// Current nesting of statements and expressions (bounded by [`MAX_NESTING`]).
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> ParseError {
        let pos = self.toks.get(self.i).map_or(self.text.len(), |t| t.1);
        let (line, column) = position(self.text, pos);
        ParseError { line, column, message: message.into() }
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i).map(|t| &t.0)
    }

    fn next(&mut self) -> Result<Tok, ParseError> {
        let t = self.toks.get(self.i).map(|t| t.0.clone()).ok_or_else(|| self.err("unexpected end of input"))?;
        self.i += 1;
        Ok(t)
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p) || matches!(self.peek(), Some(Tok::Ident(q)) if q == p)
    }

    fn eat(&mut self, p: &str) -> bool {
        if self.is(p) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), ParseError> {
        if self.eat(p) { Ok(()) } else { Err(self.err(format!("expected `{p}`"))) }
    }

    fn local(&mut self) -> Result<String, ParseError> {
        match self.next()? {
            Tok::Local(n) => Ok(n),
            _ => {
                self.i -= 1;
                Err(self.err("expected a `%name`"))
            }
        }
    }

    fn to_i64(&self, v: i128, neg: bool) -> Result<i64, ParseError> {
        i64::try_from(if neg { -v } else { v }).map_err(|_| self.err("integer out of range"))
    }

    fn int(&mut self) -> Result<i64, ParseError> {
        let neg = self.eat("-");
        match self.next()? {
            Tok::Int(v) => self.to_i64(v, neg),
            _ => {
                self.i -= 1;
                Err(self.err("expected an integer"))
            }
        }
    }

    /// `serial`, `parallel`, `unrolled(K)` or `vectorized(lanes=L, vectors=V, tail=T)`.
    fn for_kind(&mut self) -> Result<ForKind, ParseError> {
        if self.eat("serial") {
            return Ok(ForKind::Serial);
        }
        if self.eat("parallel") {
            return Ok(ForKind::Parallel);
        }
        if self.eat("unrolled") {
            self.expect("(")?;
            let factor = self.small_count()?;
            self.expect(")")?;
            return Ok(ForKind::Unrolled(factor));
        }
        if self.eat("vectorized") {
            self.expect("(")?;
            let field = |p: &mut Self, name: &str| -> Result<(), ParseError> {
                p.expect(name)?;
                p.expect("=")
            };
            field(self, "lanes")?;
            let lanes = self.small_count()?;
            self.expect(",")?;
            field(self, "vectors")?;
            let vectors = self.small_count()?;
            self.expect(",")?;
            field(self, "tail")?;
            let tail = match self.next()? {
                Tok::Ident(t) if t == "scalar" => VectorTail::Scalar,
                Tok::Ident(t) if t == "overlap" => VectorTail::Overlap,
                Tok::Ident(t) if t == "clamp" => VectorTail::Clamp,
                _ => {
                    self.i -= 1;
                    return Err(self.err("expected a vector tail (scalar, overlap, clamp)"));
                }
            };
            self.expect(")")?;
            return Ok(ForKind::Vectorized(VectorShape { lanes, vectors, tail }));
        }
        Err(self.err("expected a loop kind (serial, vectorized(..), unrolled(K), parallel)"))
    }

    /// A count in `1..=u32::MAX` (the verifier bounds it further).
    fn small_count(&mut self) -> Result<u32, ParseError> {
        let n = self.int()?;
        u32::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| self.err(format!("expected a count >= 1, got {n}")))
    }

    fn usize_list(&mut self) -> Result<Vec<usize>, ParseError> {
        self.expect("[")?;
        let mut v = Vec::new();
        while !self.eat("]") {
            if !v.is_empty() {
                self.expect(",")?;
            }
            let x = self.int()?;
            v.push(usize::try_from(x).map_err(|_| self.err("expected a non-negative integer"))?);
        }
        Ok(v)
    }

    fn dtype(&mut self) -> Result<DType, ParseError> {
        match self.next()? {
            Tok::Ident(s) => dtype_named(&s).ok_or_else(|| {
                self.i -= 1;
                self.err(format!("unknown dtype `{s}`"))
            }),
            _ => {
                self.i -= 1;
                Err(self.err("expected a dtype"))
            }
        }
    }

    fn buffer_type(&mut self, name: String) -> Result<Buffer, ParseError> {
        let dtype = self.dtype()?;
        let shape = self.usize_list()?;
        let axis_separators = if self.eat("sep") { self.usize_list()? } else { vec![] };
        let scope = if self.eat("local") { Scope::Local } else { Scope::Global };
        Ok(Buffer { name, dtype, shape, axis_separators, scope })
    }

    fn f(&mut self) -> &mut PrimFunc {
        self.func.as_mut().expect("inside a function")
    }

    fn declare_buffer(&mut self, b: Buffer) -> Result<BufferId, ParseError> {
        if self.buffers.contains_key(&b.name) || self.vars.contains_key(&b.name) {
            return Err(self.err(format!("name `%{}` declared twice", b.name)));
        }
        let id = BufferId(self.f().buffers.len() as u32);
        self.buffers.insert(b.name.clone(), id);
        self.f().buffers.push(b);
        Ok(id)
    }

    fn declare_var(&mut self, name: String, dtype: DType) -> Result<VarId, ParseError> {
        if self.buffers.contains_key(&name) {
            return Err(self.err(format!("name `%{name}` is a buffer")));
        }
        if let Some(&v) = self.vars.get(&name) {
            if self.func.as_ref().expect("in func").var(v).dtype != dtype {
                return Err(self.err(format!("variable `%{name}` redeclared with another type")));
            }
            return Ok(v);
        }
        let id = VarId(self.f().vars.len() as u32);
        self.vars.insert(name.clone(), id);
        self.f().vars.push(VarDecl { name, dtype });
        Ok(id)
    }

    fn func(&mut self) -> Result<PrimFunc, ParseError> {
        self.expect("func")?;
        let name = match self.next()? {
            Tok::Global(n) => n,
            _ => return Err(self.err("expected `@name`")),
        };
        self.buffers.clear();
        self.vars.clear();
        self.func = Some(PrimFunc {
            name,
            params: vec![],
            buffers: vec![],
            vars: vec![],
            body: Stmt::Seq(vec![]),
            layout_transforms: BTreeMap::new(),
            target: None,
        });
        self.expect("(")?;
        while !self.eat(")") {
            if !self.f().params.is_empty() {
                self.expect(",")?;
            }
            let n = self.local()?;
            self.expect(":")?;
            let b = self.buffer_type(n)?;
            let id = self.declare_buffer(b)?;
            self.f().params.push(id);
        }
        self.expect("{")?;
        if self.eat("target") {
            let target = match self.next()? {
                Tok::Str(s) => s,
                _ => return Err(self.err("expected a quoted target name")),
            };
            self.f().target = Some(target);
        }
        let mut layouts = Vec::new();
        while self.eat("layout") {
            let n = self.local()?;
            let map = match self.next()? {
                Tok::Str(s) => IndexMap::parse(&s).map_err(|e| self.err(e.to_string()))?,
                _ => return Err(self.err("expected a quoted index map")),
            };
            layouts.push((n, map));
        }
        let body = self.stmts()?;
        for (n, map) in layouts {
            let id = *self.buffers.get(&n).ok_or_else(|| self.err(format!("layout for unknown buffer `%{n}`")))?;
            self.f().layout_transforms.insert(id, map);
        }
        let mut f = self.func.take().expect("inside a function");
        f.body = body;
        Ok(f)
    }

    /// Statements up to and including the closing `}`.
    fn stmts(&mut self) -> Result<Stmt, ParseError> {
        let mut v = Vec::new();
        while !self.eat("}") {
            v.push(self.stmt()?);
        }
        Ok(Stmt::Seq(v))
    }

    fn block(&mut self) -> Result<Box<Stmt>, ParseError> {
        self.expect("{")?;
        let s = self.stmts()?;
        Ok(Box::new(match s {
            Stmt::Seq(mut v) if v.len() == 1 => v.pop().expect("one"),
            s => s,
        }))
    }

    fn pools(&mut self) -> Result<Vec<String>, ParseError> {
        self.expect("pools")?;
        self.expect("[")?;
        let mut v = Vec::new();
        while !self.eat("]") {
            if !v.is_empty() {
                self.expect(",")?;
            }
            match self.next()? {
                Tok::Str(s) => v.push(s),
                _ => return Err(self.err("expected a quoted pool name")),
            }
        }
        Ok(v)
    }

    /// Runs `f` one nesting level deeper, refusing to go past [`MAX_NESTING`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, ParseError>) -> Result<T, ParseError> {
        if self.depth >= MAX_NESTING {
            return Err(self.err(format!("nested more than {MAX_NESTING} levels deep")));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    fn stmt(&mut self) -> Result<Stmt, ParseError> {
        self.nested(Self::stmt_here)
    }

    fn stmt_here(&mut self) -> Result<Stmt, ParseError> {
        if self.eat("{") {
            return self.stmts();
        }
        if self.eat("for") {
            let n = self.local()?;
            self.expect(":")?;
            let dtype = self.dtype()?;
            let var = self.declare_var(n, dtype)?;
            self.expect("in")?;
            if self.int()? != 0 {
                return Err(self.err("loops start at 0"));
            }
            self.expect("..")?;
            let extent = self.expr()?;
            let kind = self.for_kind()?;
            let body = self.block()?;
            return Ok(Stmt::For { var, extent, kind, body });
        }
        if self.eat("allocate") {
            let n = self.local()?;
            self.expect(":")?;
            let b = self.buffer_type(n)?;
            let pools = self.pools()?;
            let buffer = self.declare_buffer(b)?;
            return Ok(Stmt::Allocate { buffer, pools });
        }
        if self.eat("view") {
            let n = self.local()?;
            self.expect(":")?;
            let b = self.buffer_type(n)?;
            self.expect("in")?;
            let pn = self.local()?;
            let pool = *self.buffers.get(&pn).ok_or_else(|| self.err(format!("unknown pool buffer `%{pn}`")))?;
            self.expect("at")?;
            let byte_offset = u64::try_from(self.int()?).map_err(|_| self.err("negative byte offset"))?;
            let buffer = self.declare_buffer(b)?;
            return Ok(Stmt::DeclPoolBuffer { buffer, pool, byte_offset });
        }
        if self.eat("constant") {
            let n = self.local()?;
            self.expect(":")?;
            let b = self.buffer_type(n)?;
            let pools = self.pools()?;
            self.expect("=")?;
            self.expect("hex")?;
            let hex = match self.next()? {
                Tok::Str(s) => s,
                _ => return Err(self.err("expected quoted hex data")),
            };
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| self.err("malformed hex data"))?;
            let ty = TensorType::new(b.dtype, b.shape.clone());
            let data = Tensor::from_le_bytes(&ty, &bytes).map_err(|e| self.err(format!("constant data {e}")))?;
            let buffer = self.declare_buffer(b)?;
            return Ok(Stmt::AllocateConst { buffer, data: Arc::new(data), pools });
        }
        if self.eat("call") {
            let callee = match self.next()? {
                Tok::Global(n) => Callee::Func(n),
                Tok::Ident(k) if k == "extern" => match self.next()? {
                    Tok::Str(s) => Callee::Extern(s),
                    _ => return Err(self.err("expected a quoted extern name")),
                },
                _ => return Err(self.err("expected `@func` or `extern \"name\"`")),
            };
            self.expect("(")?;
            let mut args = Vec::new();
            while !self.eat(")") {
                if !args.is_empty() {
                    self.expect(",")?;
                }
                let is_buffer_arg = match (self.peek(), self.toks.get(self.i + 1).map(|t| &t.0)) {
                    (Some(Tok::Local(n)), next) => self.buffers.contains_key(n) && next != Some(&Tok::Punct("[")),
                    _ => false,
                };
                if is_buffer_arg {
                    let n = self.local()?;
                    args.push(Arg::Buffer(self.buffers[&n]));
                } else {
                    args.push(Arg::Expr(self.expr()?));
                }
            }
            return Ok(Stmt::Evaluate(Call { callee, args }));
        }
        if self.eat("if") {
            let cond = self.expr()?;
            let then = self.block()?;
            let otherwise = if self.eat("else") { Some(self.block()?) } else { None };
            return Ok(Stmt::If { cond, then, otherwise });
        }
        if self.eat("let") {
            let n = self.local()?;
            self.expect(":")?;
            let dtype = self.dtype()?;
            self.expect("=")?;
            let value = self.expr()?;
            let var = self.declare_var(n, dtype)?;
            return Ok(Stmt::Let { var, value });
        }
        let n = self.local()?;
        let buffer = *self.buffers.get(&n).ok_or_else(|| self.err(format!("unknown buffer `%{n}`")))?;
        let indices = self.index_list()?;
        self.expect("=")?;
        let value = self.expr()?;
        Ok(Stmt::Store { buffer, indices, value })
    }

    fn index_list(&mut self) -> Result<Vec<Expr>, ParseError> {
        self.expect("[")?;
        let mut v = Vec::new();
        while !self.eat("]") {
            if !v.is_empty() {
                self.expect(",")?;
            }
            v.push(self.expr()?);
        }
        Ok(v)
    }

    fn args<const N: usize>(&mut self) -> Result<[Expr; N], ParseError> {
        self.expect("(")?;
        let mut v = Vec::with_capacity(N);
        for i in 0..N {
            if i > 0 {
                self.expect(",")?;
            }
            v.push(self.expr()?);
        }
        self.expect(")")?;
        Ok(v.try_into().unwrap_or_else(|_| unreachable!("exactly N arguments")))
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        self.nested(Self::expr_here)
    }

    fn expr_here(&mut self) -> Result<Expr, ParseError> {
        match self.next()? {
            Tok::Punct("(") => {
                let lhs = self.expr()?;
                let op = match self.next()? {
                    Tok::Punct(p) => p,
                    _ => return Err(self.err("expected an operator")),
                };
                let rhs = self.expr()?;
                self.expect(")")?;
                let bin = |op| Ok(Expr::binary(op, lhs.clone(), rhs.clone()));
                let cmp = |op| Ok(Expr::cmp(op, lhs.clone(), rhs.clone()));
                match op {
                    "+" => bin(BinOp::Add),
                    "-" => bin(BinOp::Sub),
                    "*" => bin(BinOp::Mul),
                    "/" => bin(BinOp::Div),
                    "//" => bin(BinOp::FloorDiv),
                    "%" => bin(BinOp::FloorMod),
                    "<<" => bin(BinOp::Shl),
                    ">>" => bin(BinOp::Shr),
                    "&&" => bin(BinOp::And),
                    "||" => bin(BinOp::Or),
                    "&" => bin(BinOp::BitAnd),
                    "|" => bin(BinOp::BitOr),
                    "^" => bin(BinOp::BitXor),
                    "==" => cmp(CmpOp::Eq),
                    "!=" => cmp(CmpOp::Ne),
                    "<" => cmp(CmpOp::Lt),
                    "<=" => cmp(CmpOp::Le),
                    ">" => cmp(CmpOp::Gt),
                    ">=" => cmp(CmpOp::Ge),
                    other => Err(self.err(format!("unknown operator `{other}`"))),
                }
            }
            Tok::Punct("!") => Ok(Expr::Not(Box::new(self.expr()?))),
            Tok::Punct("-") => match self.next()? {
                Tok::Int(v) => Ok(Expr::index(self.to_i64(v, true)?)),
                _ => Err(self.err("expected an integer after `-`")),
            },
            Tok::Int(v) => Ok(Expr::index(self.to_i64(v, false)?)),
            Tok::Local(n) => {
                if let Some(&b) = self.buffers.get(&n) {
                    let indices = self.index_list()?;
                    Ok(Expr::Load { buffer: b, indices })
                } else if let Some(&v) = self.vars.get(&n) {
                    Ok(Expr::Var(v))
                } else {
                    self.i -= 1;
                    Err(self.err(format!("unknown variable `%{n}`")))
                }
            }
            Tok::Ident(word) => {
                if let Some(dtype) = dtype_named(&word) {
                    return self.literal(dtype);
                }
                match word.as_str() {
                    "min" | "max" | "pow" | "fmod" => {
                        let [a, b] = self.args::<2>()?;
                        let op = match word.as_str() {
                            "min" => BinOp::Min,
                            "max" => BinOp::Max,
                            "pow" => BinOp::Pow,
                            _ => BinOp::Fmod,
                        };
                        Ok(Expr::binary(op, a, b))
                    }
                    "select" => {
                        let [c, a, b] = self.args::<3>()?;
                        Ok(Expr::select(c, a, b))
                    }
                    "cast" => {
                        self.expect("<")?;
                        let dtype = self.dtype()?;
                        self.expect(">")?;
                        let [v] = self.args::<1>()?;
                        Ok(Expr::cast(dtype, v))
                    }
                    _ => {
                        let op = match word.as_str() {
                            "exp" => MathOp::Exp,
                            "tanh" => MathOp::Tanh,
                            "erf" => MathOp::Erf,
                            "sigmoid" => MathOp::Sigmoid,
                            "sqrt" => MathOp::Sqrt,
                            "round" => MathOp::Round,
                            "abs" => MathOp::Abs,
                            "floor" => MathOp::Floor,
                            "ceil" => MathOp::Ceil,
                            "log" => MathOp::Log,
                            "sin" => MathOp::Sin,
                            "cos" => MathOp::Cos,
                            "tan" => MathOp::Tan,
                            "asin" => MathOp::Asin,
                            "acos" => MathOp::Acos,
                            "atan" => MathOp::Atan,
                            "sinh" => MathOp::Sinh,
                            "cosh" => MathOp::Cosh,
                            "asinh" => MathOp::Asinh,
                            "acosh" => MathOp::Acosh,
                            "atanh" => MathOp::Atanh,

                            _ => {
                                self.i -= 1;
                                return Err(self.err(format!("unknown function `{word}`")));
                            }
                        };
                        let [a] = self.args::<1>()?;
                        Ok(Expr::math(op, a))
                    }
                }
            }
            _ => {
                self.i -= 1;
                Err(self.err("expected an expression"))
            }
        }
    }

    /// `dtype(value)` literal; the dtype name was just consumed.
    fn literal(&mut self, dtype: DType) -> Result<Expr, ParseError> {
        self.expect("(")?;
        let neg = self.eat("-");
        let e = if dtype.is_float() {
            let v = match self.next()? {
                Tok::Float(t) => t.parse::<f64>().map_err(|_| self.err(format!("bad float literal `{t}`")))?,
                Tok::Int(v) => v as f64,
                Tok::Ident(w) if w == "inf" => f64::INFINITY,
                Tok::Ident(w) if w == "nan" => f64::NAN,
                _ => return Err(self.err("expected a float literal")),
            };
            Expr::float(if neg { -v } else { v }, dtype)
        } else {
            let v = match self.next()? {
                Tok::Int(v) => self.to_i64(v, neg)?,
                _ => return Err(self.err("expected an integer literal")),
            };
            Expr::int(v, dtype)
        };
        self.expect(")")?;
        Ok(e)
    }
}
