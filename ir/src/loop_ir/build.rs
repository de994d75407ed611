//! Helpers to build PrimFuncs: a [`FuncBuilder`] that hands out buffers and variables with
//! unique names, and short constructors for index arithmetic.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{BinOp, Buffer, BufferId, CmpOp, Expr, ForKind, PrimFunc, Scope, Stmt, VarDecl, VarId};
use crate::dtype::DType;

pub struct FuncBuilder {
    func: PrimFunc,
    names: HashSet<String>,
    /// The next suffix to try for each base name, so a function with thousands of loops named
    /// `i0` still names each in constant time.
    next_suffix: HashMap<String, usize>,
}

impl FuncBuilder {
    pub fn new(name: impl Into<String>) -> FuncBuilder {
        FuncBuilder {
            func: PrimFunc {
                name: name.into(),
                params: vec![],
                buffers: vec![],
                vars: vec![],
                body: Stmt::Seq(vec![]),
                layout_transforms: BTreeMap::new(),
                target: None,
            },
            names: HashSet::new(),
            next_suffix: HashMap::new(),
        }
    }

    fn unique(&mut self, base: &str) -> String {
        let base = if base.is_empty() { "v" } else { base };
        if self.names.insert(base.to_string()) {
            return base.to_string();
        }
        let next = self.next_suffix.entry(base.to_string()).or_insert(1);
        loop {
            let name = format!("{base}_{next}");
            *next += 1;
            if self.names.insert(name.clone()) {
                return name;
            }
        }
    }

    /// Declares a buffer (for an `Allocate`, or a parameter via [`FuncBuilder::param`]).
    pub fn buffer(&mut self, name: &str, dtype: DType, shape: Vec<usize>, scope: Scope) -> BufferId {
        let name = self.unique(name);
        self.func.buffers.push(Buffer { name, dtype, shape, axis_separators: vec![], scope });
        BufferId(self.func.buffers.len() as u32 - 1)
    }

    pub fn param(&mut self, name: &str, dtype: DType, shape: Vec<usize>) -> BufferId {
        let id = self.buffer(name, dtype, shape, Scope::Global);
        self.func.params.push(id);
        id
    }

    pub fn var(&mut self, name: &str, dtype: DType) -> VarId {
        let name = self.unique(name);
        self.func.vars.push(VarDecl { name, dtype });
        VarId(self.func.vars.len() as u32 - 1)
    }

    pub fn buffer_info(&self, id: BufferId) -> &Buffer {
        self.func.buffer(id)
    }

    /// A (possibly empty) nest of serial loops over `shape`; `body` receives the index
    /// variables, outermost first. Loop variables are named `<prefix><axis>`. A shape with a
    /// zero-length axis has no iterations, so it gives an empty statement (and no loop that
    /// would count through the other axes for nothing).
    pub fn loop_nest(&mut self, prefix: &str, shape: &[usize], body: impl FnOnce(&mut Self, &[Expr]) -> Stmt) -> Stmt {
        if shape.contains(&0) {
            return Stmt::Seq(vec![]);
        }
        let vars: Vec<VarId> = (0..shape.len()).map(|d| self.var(&format!("{prefix}{d}"), DType::I64)).collect();
        let idx: Vec<Expr> = vars.iter().map(|&v| Expr::Var(v)).collect();
        let mut stmt = body(self, &idx);
        for (d, v) in vars.into_iter().enumerate().rev() {
            stmt = for_loop(v, shape[d], ForKind::Serial, stmt);
        }
        stmt
    }

    /// The function with `body`; a function body is always a sequence (the canonical form).
    pub fn finish(mut self, body: Stmt) -> PrimFunc {
        self.func.body = match body {
            Stmt::Seq(v) => Stmt::Seq(v),
            s => Stmt::Seq(vec![s]),
        };
        self.func
    }
}

pub fn for_loop(var: VarId, extent: usize, kind: ForKind, body: Stmt) -> Stmt {
    Stmt::For { var, extent: Expr::index(extent as i64), kind, body: Box::new(body) }
}

pub fn idx(v: i64) -> Expr {
    Expr::index(v)
}

pub fn add(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Add, a, b)
}

pub fn sub(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Sub, a, b)
}

pub fn mul(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Mul, a, b)
}

pub fn div(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Div, a, b)
}

pub fn floordiv(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::FloorDiv, a, b)
}

pub fn floormod(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::FloorMod, a, b)
}

pub fn min(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Min, a, b)
}

pub fn max(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Max, a, b)
}

pub fn and(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::And, a, b)
}

pub fn lt(a: Expr, b: Expr) -> Expr {
    Expr::cmp(CmpOp::Lt, a, b)
}

pub fn ge(a: Expr, b: Expr) -> Expr {
    Expr::cmp(CmpOp::Ge, a, b)
}

/// `0 <= e < n` as a bool expression.
pub fn in_range(e: Expr, n: usize) -> Expr {
    and(ge(e.clone(), idx(0)), lt(e, idx(n as i64)))
}

/// Row-major flat index of `indices` within `shape`.
pub fn flat_index(indices: &[Expr], shape: &[usize]) -> Expr {
    let mut acc: Option<Expr> = None;
    for (i, d) in indices.iter().zip(shape) {
        acc = Some(match acc {
            None => i.clone(),
            Some(a) => add(mul(a, idx(*d as i64)), i.clone()),
        });
    }
    acc.unwrap_or_else(|| idx(0))
}

/// Splits a row-major flat index into per-axis indices of `shape`.
pub fn unflatten_index(flat: Expr, shape: &[usize]) -> Vec<Expr> {
    let mut out = vec![idx(0); shape.len()];
    let mut inner = 1usize;
    for d in (0..shape.len()).rev() {
        let q = if inner == 1 { flat.clone() } else { floordiv(flat.clone(), idx(inner as i64)) };
        out[d] = if d == 0 { q } else { floormod(q, idx(shape[d] as i64)) };
        inner *= shape[d];
    }
    out
}
