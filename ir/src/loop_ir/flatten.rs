//! `Flatten`: reduces every buffer to its physical rank — 1-d by row-major traversal, or one axis
//! per group of `axis_separators` — and rewrites every access. Afterwards a buffer of physical
//! rank N has `axis_separators = 0..N-1`, which marks it flat, so flattening again changes
//! nothing.

use std::sync::Arc;

use super::index_map::group_bounds;
use super::simplify::simplify_func;
use super::{Buffer, Expr, Module, PrimFunc, Stmt};

/// True when the buffer is already in physical form.
pub fn is_flat(b: &Buffer) -> bool {
    b.shape.len() <= 1 || b.axis_separators == (0..b.shape.len() - 1).collect::<Vec<_>>()
}

/// Axis groups of a not-yet-flat buffer.
fn groups(b: &Buffer) -> Vec<(usize, usize)> {
    group_bounds(&b.axis_separators, b.shape.len())
}

fn flat_indices(b: &Buffer, indices: Vec<Expr>) -> Vec<Expr> {
    groups(b).into_iter().map(|(a, e)| super::build::flat_index(&indices[a..e], &b.shape[a..e])).collect()
}

pub fn flatten_func(f: &mut PrimFunc) {
    let originals = f.buffers.clone();
    let todo: Vec<bool> = originals.iter().map(|b| !is_flat(b)).collect();
    if !todo.iter().any(|&t| t) {
        return;
    }
    let body = std::mem::replace(&mut f.body, Stmt::Seq(vec![]));
    // Constant data keeps its row-major order; only its shape changes.
    let body = body.map_stmts(&mut |s| match s {
        Stmt::AllocateConst { buffer, data, pools } if todo[buffer.0 as usize] => {
            let b = &originals[buffer.0 as usize];
            let shape: Vec<usize> = groups(b).into_iter().map(|(a, e)| b.shape[a..e].iter().product()).collect();
            let data = Arc::new(data.reshape(&shape).expect("same element count"));
            Stmt::AllocateConst { buffer, data, pools }
        }
        other => other,
    });
    f.body = body.map_accesses(&mut |buffer, indices| {
        let i = buffer.0 as usize;
        // Rank mismatches are left for the verifier to report.
        if todo[i] && indices.len() == originals[i].shape.len() {
            flat_indices(&originals[i], indices)
        } else {
            indices
        }
    });
    for (b, t) in f.buffers.iter_mut().zip(&todo) {
        if *t {
            let shape: Vec<usize> = groups(b).into_iter().map(|(a, e)| b.shape[a..e].iter().product()).collect();
            b.axis_separators = (0..shape.len().saturating_sub(1)).collect();
            b.shape = shape;
        }
    }
    simplify_func(f);
}

/// Flattens every function of the module.
pub fn flatten(m: &mut Module) {
    m.funcs.iter_mut().for_each(flatten_func);
}
