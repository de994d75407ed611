//! Static ranges of index expressions, so that accesses proven in bounds need no run-time
//! check. Loop variables range over `0..extent`, `let` variables over their value's range;
//! anything loaded from memory is unknown and gets a check in the generated code.

use heron_ir::loop_ir::{BinOp, Expr, VarId};

/// Inclusive range of an integer expression.
pub type Range = (i128, i128);

/// Ranges known for variables, indexed by `VarId`.
#[derive(Clone, Debug, Default)]
pub struct VarRanges(Vec<Option<Range>>);

impl VarRanges {
    pub fn new(vars: usize) -> VarRanges {
        VarRanges(vec![None; vars])
    }

    pub fn set(&mut self, v: VarId, r: Option<Range>) {
        self.0[v.0 as usize] = r;
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
