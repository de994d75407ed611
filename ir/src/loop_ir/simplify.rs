//! Index simplification: constant folding, and affine rewriting of i64 index arithmetic with
//! loop-variable ranges, so flattened indices read like hand-written ones:
//! `x // 1 -> x`, `(a*4 + b) // 4 -> a` and `(a*4 + b) % 4 -> b` when `0 <= b < 4`,
//! `(i*8 + j)*16 + k -> i*128 + j*16 + k`, comparisons decided by ranges folded away.
//!
//! Only i64 (index) expressions are rewritten algebraically; float arithmetic is never
//! reassociated.

use super::analysis::VarRanges;
use super::{BinOp, CmpOp, Expr, PrimFunc, Stmt};
use crate::dtype::DType;

/// Simplifies every expression of `f`, using the ranges of enclosing loops.
pub fn simplify_func(f: &mut PrimFunc) {
    let body = std::mem::replace(&mut f.body, Stmt::Seq(vec![]));
    let mut ranges = VarRanges::new(f.vars.len());
    f.body = simplify_stmt(body, f, &mut ranges);
}

fn simplify_stmt(s: Stmt, f: &PrimFunc, ranges: &mut VarRanges) -> Stmt {
    match s {
        Stmt::Seq(v) => Stmt::Seq(v.into_iter().map(|s| simplify_stmt(s, f, ranges)).collect()),
        Stmt::For { var, extent, kind, body } => {
            let extent = simplify(extent, f, ranges);
            if let Some(n) = extent.as_int() {
                ranges.set(var, Some((0, i128::from(n) - 1)));
            }
            let body = simplify_stmt(*body, f, ranges);
            ranges.set(var, None);
            Stmt::For { var, extent, kind, body: Box::new(body) }
        }
        Stmt::If { cond, then, otherwise } => {
            let cond = simplify(cond, f, ranges);
            let then = unwrap_single(simplify_stmt(*then, f, ranges));
            let otherwise = otherwise.map(|o| unwrap_single(simplify_stmt(*o, f, ranges)));
            match (cond.as_int(), otherwise) {
                (Some(1), _) => then,
                (Some(0), Some(o)) => o,
                (Some(0), None) => Stmt::Seq(vec![]),
                (_, o) => Stmt::If { cond, then: Box::new(then), otherwise: o.map(Box::new) },
            }
        }
        other => other.map_exprs(&mut |e| simplify(e, f, ranges)),
    }
}

/// Loop and branch bodies holding one statement hold it directly (the canonical form the
/// printer and parser agree on).
fn unwrap_single(s: Stmt) -> Stmt {
    match s {
        Stmt::Seq(mut v) if v.len() == 1 => v.pop().expect("one statement"),
        s => s,
    }
}

/// A sum of `coefficient * atom` terms plus a constant, over i64.
#[derive(Clone, Debug, Default)]
struct Linear {
    terms: Vec<(Expr, i64)>,
    constant: i64,
}

impl Linear {
    fn constant(c: i64) -> Linear {
        Linear { terms: vec![], constant: c }
    }

    fn atom(e: Expr) -> Linear {
        Linear { terms: vec![(e, 1)], constant: 0 }
    }

    fn add(mut self, other: Linear, sign: i64) -> Linear {
        for (atom, c) in other.terms {
            match self.terms.iter_mut().find(|(a, _)| *a == atom) {
                Some(t) => t.1 += sign * c,
                None => self.terms.push((atom, sign * c)),
            }
        }
        self.terms.retain(|(_, c)| *c != 0);
        self.constant += sign * other.constant;
        self
    }

    fn scale(mut self, k: i64) -> Linear {
        if k == 0 {
            return Linear::constant(0);
        }
        self.terms.iter_mut().for_each(|t| t.1 *= k);
        self.constant *= k;
        self
    }

    fn as_constant(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }

    fn range(&self, ranges: &VarRanges) -> Option<(i64, i64)> {
        let (mut lo, mut hi) = (self.constant, self.constant);
        for (atom, c) in &self.terms {
            let (a, b) = ranges.range_i64(atom)?;
            let (x, y) = (a.checked_mul(*c)?, b.checked_mul(*c)?);
            lo = lo.checked_add(x.min(y))?;
            hi = hi.checked_add(x.max(y))?;
        }
        Some((lo, hi))
    }

    fn to_expr(&self) -> Expr {
        let mut acc: Option<Expr> = None;
        for (atom, c) in &self.terms {
            let mag = c.unsigned_abs() as i64;
            let term = if mag == 1 { atom.clone() } else { Expr::binary(BinOp::Mul, atom.clone(), Expr::index(mag)) };
            acc = Some(match (acc, *c > 0) {
                (None, true) => term,
                (None, false) => Expr::binary(BinOp::Sub, Expr::index(0), term),
                (Some(a), true) => Expr::binary(BinOp::Add, a, term),
                (Some(a), false) => Expr::binary(BinOp::Sub, a, term),
            });
        }
        match acc {
            None => Expr::index(self.constant),
            Some(a) if self.constant > 0 => Expr::binary(BinOp::Add, a, Expr::index(self.constant)),
            Some(a) if self.constant < 0 => Expr::binary(BinOp::Sub, a, Expr::index(-self.constant)),
            Some(a) => a,
        }
    }
}

fn linear(e: Expr, f: &PrimFunc, ranges: &VarRanges) -> Linear {
    match e {
        Expr::Int { value, dtype: DType::I64 } => Linear::constant(value),
        Expr::Binary { op: BinOp::Add, lhs, rhs } => linear(*lhs, f, ranges).add(linear(*rhs, f, ranges), 1),
        Expr::Binary { op: BinOp::Sub, lhs, rhs } => linear(*lhs, f, ranges).add(linear(*rhs, f, ranges), -1),
        Expr::Binary { op: BinOp::Mul, lhs, rhs } => {
            let (a, b) = (linear(*lhs, f, ranges), linear(*rhs, f, ranges));
            match (a.as_constant(), b.as_constant()) {
                (Some(k), _) => b.scale(k),
                (_, Some(k)) => a.scale(k),
                _ => Linear::atom(Expr::binary(BinOp::Mul, a.to_expr(), b.to_expr())),
            }
        }
        Expr::Binary { op: op @ (BinOp::FloorDiv | BinOp::FloorMod), lhs, rhs } => {
            let a = linear(*lhs, f, ranges);
            let b = linear(*rhs, f, ranges);
            match b.as_constant() {
                Some(c) if c > 0 => div_mod(op, a, c, ranges),
                _ => Linear::atom(Expr::binary(op, a.to_expr(), b.to_expr())),
            }
        }
        Expr::Binary { op: op @ (BinOp::Min | BinOp::Max), lhs, rhs } => {
            let (a, b) = (linear(*lhs, f, ranges), linear(*rhs, f, ranges));
            if let (Some(x), Some(y)) = (a.range(ranges), b.range(ranges)) {
                let a_smaller = x.1 <= y.0;
                let b_smaller = y.1 <= x.0;
                match (op, a_smaller, b_smaller) {
                    (BinOp::Min, true, _) | (BinOp::Max, _, true) => return a,
                    (BinOp::Min, _, true) | (BinOp::Max, true, _) => return b,
                    _ => {}
                }
            }
            Linear::atom(Expr::binary(op, a.to_expr(), b.to_expr()))
        }
        other => Linear::atom(simplify_children(other, f, ranges)),
    }
}

/// `floordiv(L, c)` / `floormod(L, c)` for c > 0: the terms of L that are multiples of c pass
/// through the division (and vanish in the modulus); the rest is decided by its range.
fn div_mod(op: BinOp, a: Linear, c: i64, ranges: &VarRanges) -> Linear {
    if c == 1 {
        return if op == BinOp::FloorDiv { a } else { Linear::constant(0) };
    }
    let mut quotient = Linear::constant(a.constant.div_euclid(c));
    let mut rest = Linear::constant(a.constant.rem_euclid(c));
    for (atom, k) in a.terms {
        if k % c == 0 {
            quotient.terms.push((atom, k / c));
        } else {
            rest.terms.push((atom, k));
        }
    }
    let rest_range = rest.range(ranges);
    match op {
        BinOp::FloorDiv => match rest_range {
            Some((lo, hi)) if lo.div_euclid(c) == hi.div_euclid(c) => {
                quotient.add(Linear::constant(lo.div_euclid(c)), 1)
            }
            _ => quotient.add(Linear::atom(Expr::binary(BinOp::FloorDiv, rest.to_expr(), Expr::index(c))), 1),
        },
        _ => match rest_range {
            Some((lo, hi)) if lo.div_euclid(c) == hi.div_euclid(c) => {
                rest.add(Linear::constant(lo.div_euclid(c) * c), -1)
            }
            _ => Linear::atom(Expr::binary(BinOp::FloorMod, rest.to_expr(), Expr::index(c))),
        },
    }
}

fn simplify_children(e: Expr, f: &PrimFunc, ranges: &VarRanges) -> Expr {
    match e {
        Expr::Binary { op, lhs, rhs } => fold_binary(op, simplify(*lhs, f, ranges), simplify(*rhs, f, ranges)),
        Expr::Cmp { op, lhs, rhs } => fold_cmp(op, simplify(*lhs, f, ranges), simplify(*rhs, f, ranges), f, ranges),
        Expr::Not(x) => match simplify(*x, f, ranges) {
            Expr::Int { value, dtype: DType::Bool } => Expr::bool(value == 0),
            x => Expr::Not(Box::new(x)),
        },
        Expr::Select { cond, then, otherwise } => {
            let cond = simplify(*cond, f, ranges);
            let (then, otherwise) = (simplify(*then, f, ranges), simplify(*otherwise, f, ranges));
            match cond.as_int() {
                Some(0) => otherwise,
                Some(_) => then,
                None if then == otherwise => then,
                None => Expr::select(cond, then, otherwise),
            }
        }
        Expr::Cast { dtype, value } => {
            let v = simplify(*value, f, ranges);
            match v {
                Expr::Int { value, dtype: from } if from.is_int() && dtype == DType::I64 => Expr::index(value),
                v if v.dtype(f) == dtype => v,
                v => Expr::cast(dtype, v),
            }
        }
        Expr::Math { op, arg } => Expr::math(op, simplify(*arg, f, ranges)),
        Expr::Load { buffer, indices } => {
            Expr::load(buffer, indices.into_iter().map(|i| simplify(i, f, ranges)).collect())
        }
        leaf => leaf,
    }
}

/// Folds boolean logic and constant non-index integer arithmetic.
fn fold_binary(op: BinOp, a: Expr, b: Expr) -> Expr {
    match (op, a.as_int(), b.as_int(), &a) {
        (BinOp::And, Some(0), _, _) | (BinOp::And, _, Some(0), _) => Expr::bool(false),
        (BinOp::And, Some(_), _, _) => b,
        (BinOp::And, _, Some(_), _) => a,
        (BinOp::Or, Some(x), _, _) if x != 0 => Expr::bool(true),
        (BinOp::Or, _, Some(y), _) if y != 0 => Expr::bool(true),
        (BinOp::Or, Some(_), _, _) => b,
        (BinOp::Or, _, Some(_), _) => a,
        _ => Expr::binary(op, a, b),
    }
}

fn fold_cmp(op: CmpOp, a: Expr, b: Expr, f: &PrimFunc, ranges: &VarRanges) -> Expr {
    if a.dtype(f) == DType::I64
        && let (Some(x), Some(y)) = (ranges.range_i64(&a), ranges.range_i64(&b))
    {
        let decided = match op {
            CmpOp::Lt if x.1 < y.0 => Some(true),
            CmpOp::Lt if x.0 >= y.1 => Some(false),
            CmpOp::Le if x.1 <= y.0 => Some(true),
            CmpOp::Le if x.0 > y.1 => Some(false),
            CmpOp::Gt if x.0 > y.1 => Some(true),
            CmpOp::Gt if x.1 <= y.0 => Some(false),
            CmpOp::Ge if x.0 >= y.1 => Some(true),
            CmpOp::Ge if x.1 < y.0 => Some(false),
            CmpOp::Eq if x.0 == x.1 && y.0 == y.1 => Some(x.0 == y.0),
            CmpOp::Ne if x.0 == x.1 && y.0 == y.1 => Some(x.0 != y.0),
            _ => None,
        };
        if let Some(d) = decided {
            return Expr::bool(d);
        }
    }
    Expr::cmp(op, a, b)
}

/// Simplifies one expression given loop-variable ranges.
pub fn simplify(e: Expr, f: &PrimFunc, ranges: &VarRanges) -> Expr {
    if e.dtype(f) == DType::I64 && !matches!(e, Expr::Load { .. } | Expr::Select { .. } | Expr::Cast { .. }) {
        linear(e, f, ranges).to_expr()
    } else {
        simplify_children(e, f, ranges)
    }
}
