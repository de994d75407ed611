//! Queries on loop-IR expressions shared by the passes and code generators: which variables an
//! expression mentions, which buffers it reads, substitution, and affine forms.

use std::collections::HashMap;

use super::{BinOp, BufferId, Expr, VarId};
use crate::dtype::DType;

/// Whether `e` uses variable `v`.
pub fn mentions(e: &Expr, v: VarId) -> bool {
    let mut found = matches!(e, Expr::Var(x) if *x == v);
    e.for_each_child(|c| found |= mentions(c, v));
    found
}

/// Whether any of `exprs` uses variable `v`.
pub fn mentions_any(exprs: &[Expr], v: VarId) -> bool {
    exprs.iter().any(|e| mentions(e, v))
}

/// Whether `e` loads from buffer `b`.
pub fn reads(e: &Expr, b: BufferId) -> bool {
    let mut found = matches!(e, Expr::Load { buffer, .. } if *buffer == b);
    e.for_each_child(|c| found |= reads(c, b));
    found
}

/// `e` with the variables in `with` replaced by their expressions.
pub fn substitute(e: &Expr, with: &HashMap<VarId, Expr>) -> Expr {
    e.clone().map(&mut |x| match x {
        Expr::Var(v) if with.contains_key(&v) => with[&v].clone(),
        other => other,
    })
}

/// `e` as `sum(coefficient * variable) + constant` when it is an affine i64 expression (sums,
/// differences, products with a constant); `None` otherwise or on overflow.
pub fn affine_terms(e: &Expr) -> Option<(HashMap<VarId, i64>, i64)> {
    fn go(e: &Expr, scale: i64, terms: &mut HashMap<VarId, i64>, constant: &mut i64) -> Option<()> {
        match e {
            Expr::Int { value, dtype: DType::I64 } => *constant = constant.checked_add(value.checked_mul(scale)?)?,
            Expr::Var(v) => {
                let t = terms.entry(*v).or_insert(0);
                *t = t.checked_add(scale)?;
            }
            Expr::Binary { op: BinOp::Add, lhs, rhs } => {
                go(lhs, scale, terms, constant)?;
                go(rhs, scale, terms, constant)?;
            }
            Expr::Binary { op: BinOp::Sub, lhs, rhs } => {
                go(lhs, scale, terms, constant)?;
                go(rhs, scale.checked_neg()?, terms, constant)?;
            }
            Expr::Binary { op: BinOp::Mul, lhs, rhs } => match (lhs.as_int(), rhs.as_int()) {
                (_, Some(k)) => go(lhs, scale.checked_mul(k)?, terms, constant)?,
                (Some(k), _) => go(rhs, scale.checked_mul(k)?, terms, constant)?,
                _ => return None,
            },
            _ => return None,
        }
        Some(())
    }
    let (mut terms, mut constant) = (HashMap::new(), 0i64);
    go(e, 1, &mut terms, &mut constant)?;
    Some((terms, constant))
}
