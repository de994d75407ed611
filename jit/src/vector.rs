//! Loops marked vectorized, emitted with 128-bit SIMD.

use heron_ir::loop_ir::{Expr, Stmt, VarId};

use crate::CodegenError;
use crate::codegen::FuncTranslator;

/// Emits `for var in 0..extent vectorized { body }` with SIMD when the body allows it; false
/// when it does not (the caller emits it serially).
pub(crate) fn try_emit(
    _t: &mut FuncTranslator<'_>,
    _var: VarId,
    _extent: &Expr,
    _body: &Stmt,
) -> Result<bool, CodegenError> {
    Ok(false)
}
