//! Queries on loop IR shared by the passes, the verifier and the code generators: which
//! variables an expression mentions, which buffers it reads, substitution, affine forms, value
//! ranges of integer expressions (for the simplifier and for the code generator's bounds
//! proofs: loop variables range over `0..extent`, `let` variables over their value's range,
//! anything loaded from memory is unknown), and what a loop body writes and reads back (the
//! conditions for reordering its iterations).

use std::collections::HashMap;

use super::{BinOp, BufferId, Expr, PrimFunc, Scope, Stmt, VarId};
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

fn is_global(f: &PrimFunc, b: BufferId) -> bool {
    f.buffers.get(b.0 as usize).is_some_and(|buf| buf.scope == Scope::Global)
}

/// The stores into global buffers anywhere in `body`: buffer and indices.
pub fn global_stores(body: &Stmt, f: &PrimFunc) -> Vec<(BufferId, Vec<Expr>)> {
    let mut out = Vec::new();
    body.walk(&mut |s| {
        if let Stmt::Store { buffer, indices, .. } = s
            && is_global(f, *buffer)
        {
            out.push((*buffer, indices.clone()));
        }
    });
    out
}

/// True when every load of a global buffer the body writes reads exactly the element this
/// iteration writes (an in-place update), so no iteration sees another's output and the loop's
/// iterations may be reordered, interleaved or vectorized.
pub fn reads_only_own_outputs(body: &Stmt, f: &PrimFunc) -> bool {
    let written = global_stores(body, f);
    fn ok(e: &Expr, written: &[(BufferId, Vec<Expr>)]) -> bool {
        let own = match e {
            Expr::Load { buffer, indices } => written.iter().all(|(b, idx)| b != buffer || idx == indices),
            _ => true,
        };
        let mut children = true;
        e.for_each_child(|c| children &= ok(c, written));
        own && children
    }
    let mut all = true;
    body.walk(&mut |s| s.for_each_expr(|e| all &= ok(e, &written)));
    all
}

/// True when the body reads none of the global buffers it writes, so running an iteration
/// twice stores the same values twice.
pub fn reads_none_of_its_outputs(body: &Stmt, f: &PrimFunc) -> bool {
    let written = global_stores(body, f);
    let mut none = true;
    body.walk(&mut |s| s.for_each_expr(|e| none &= !written.iter().any(|(b, _)| reads(e, *b))));
    none
}

/// True when every global store in `body` has an index that uses `v`: a necessary condition
/// for different values of `v` to write different elements.
pub fn stores_move_with(body: &Stmt, f: &PrimFunc, v: VarId) -> bool {
    global_stores(body, f).iter().all(|(_, idx)| mentions_any(idx, v))
}

/// Inclusive range of an integer expression.
pub type Range = (i128, i128);

/// Ranges known for variables, indexed by `VarId`.
#[derive(Clone, Debug, Default)]
pub struct VarRanges(Vec<Option<Range>>);

impl VarRanges {
    pub fn new(vars: usize) -> VarRanges {
        VarRanges(vec![None; vars])
    }

    /// Records (or with `None` forgets) the range of `v`.
    pub fn set(&mut self, v: VarId, r: Option<Range>) {
        let i = v.0 as usize;
        if i >= self.0.len() {
            self.0.resize(i + 1, None);
        }
        self.0[i] = r;
    }

    /// [`Self::range`] in i64.
    pub fn range_i64(&self, e: &Expr) -> Option<(i64, i64)> {
        let (lo, hi) = self.range(e)?;
        Some((lo as i64, hi as i64))
    }

    /// The range of an integer expression, or `None` when it cannot be bounded (or could wrap
    /// around in 64-bit arithmetic on the way).
    pub fn range(&self, e: &Expr) -> Option<Range> {
        let r = self.range_unchecked(e)?;
        (r.0 >= i64::MIN as i128 && r.1 <= i64::MAX as i128).then_some(r)
    }

    fn range_unchecked(&self, e: &Expr) -> Option<Range> {
        match e {
            Expr::Int { value, .. } => Some((*value as i128, *value as i128)),
            Expr::Var(v) => self.0.get(v.0 as usize).copied().flatten(),
            Expr::Cast { value, dtype } if dtype.is_int() && value.dtype_hint_int() => {
                // A cast that could wrap is not modelled.
                let r = self.range(value)?;
                let bits = dtype.int_bits();
                let (lo, hi) = if dtype.is_signed_int() {
                    (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
                } else {
                    (0, (1i128 << bits) - 1)
                };
                (r.0 >= lo && r.1 <= hi).then_some(r)
            }
            Expr::Select { then, otherwise, .. } => {
                let (a, b) = (self.range(then)?, self.range(otherwise)?);
                Some((a.0.min(b.0), a.1.max(b.1)))
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.range(lhs)?, self.range(rhs)?);
                match op {
                    BinOp::Add => Some((a.0.checked_add(b.0)?, a.1.checked_add(b.1)?)),
                    BinOp::Sub => Some((a.0.checked_sub(b.1)?, a.1.checked_sub(b.0)?)),
                    BinOp::Mul => {
                        let c = [
                            a.0.checked_mul(b.0)?,
                            a.0.checked_mul(b.1)?,
                            a.1.checked_mul(b.0)?,
                            a.1.checked_mul(b.1)?,
                        ];
                        Some((*c.iter().min()?, *c.iter().max()?))
                    }
                    BinOp::Min => Some((a.0.min(b.0), a.1.min(b.1))),
                    BinOp::Max => Some((a.0.max(b.0), a.1.max(b.1))),
                    // Division by a positive constant keeps the order.
                    BinOp::FloorDiv if b.0 == b.1 && b.0 > 0 => Some((a.0.div_euclid(b.0), a.1.div_euclid(b.0))),
                    BinOp::Div if b.0 == b.1 && b.0 > 0 => Some((a.0 / b.0, a.1 / b.0)),
                    // Within one period the remainder keeps the order.
                    BinOp::FloorMod if b.0 == b.1 && b.0 > 0 && a.0.div_euclid(b.0) == a.1.div_euclid(b.0) => {
                        Some((a.0.rem_euclid(b.0), a.1.rem_euclid(b.0)))
                    }
                    BinOp::FloorMod if b.0 > 0 => Some((0, b.1 - 1)),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

trait IntHint {
    fn dtype_hint_int(&self) -> bool;
}

impl IntHint for Expr {
    /// True when the expression is integer-valued without needing the function's types: casts
    /// from floats would truncate, which the ranges above do not model.
    fn dtype_hint_int(&self) -> bool {
        match self {
            Expr::Float { .. } | Expr::Math { .. } | Expr::Load { .. } => false,
            Expr::Cast { dtype, .. } => dtype.is_int(),
            Expr::Int { .. } | Expr::Var(_) | Expr::Cmp { .. } | Expr::Not(_) => true,
            Expr::Binary { lhs, .. } => lhs.dtype_hint_int(),
            Expr::Select { then, .. } => then.dtype_hint_int(),
        }
    }
}
