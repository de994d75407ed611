//! `ApplyLayoutTransforms` (seed 001): rewrites each annotated buffer to its transformed shape
//! and every access to it through the buffer's [`IndexMap`], for parameters and allocates alike.
//!
//! At module level, a transform on a tensor `main` passes to an operator function is carried to
//! that function's parameter, so caller and callee agree on the physical layout.

use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use super::index_map::{IndexMap, IndexMapError, MapExpr};
use super::simplify::simplify_func;
use super::{Arg, BinOp, Expr, MAIN, Module, PrimFunc, Stmt};
use crate::tensor::{Element, Tensor};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error("function '{func}': no buffer named '{buffer}'")]
    UnknownBuffer { func: String, buffer: String },
    #[error("function '{func}', buffer '{buffer}': {source}")]
    Map { func: String, buffer: String, source: IndexMapError },
    #[error("function '{func}', parameter '{buffer}' receives tensors with different layouts")]
    Conflict { func: String, buffer: String },
    #[error("no function named '{0}'")]
    UnknownFunction(String),
    #[error(
        "function '{func}' sees parameter '{buffer}' as shape {param:?}, not as the tensor's shape {tensor:?}: its layout cannot be changed"
    )]
    ShapeView { func: String, buffer: String, param: Vec<usize>, tensor: Vec<usize> },
}

/// Annotates buffer `buffer` of function `func` with a layout transform.
pub fn set_layout(m: &mut Module, func: &str, buffer: &str, map: IndexMap) -> Result<(), LayoutError> {
    let f = m.funcs.iter_mut().find(|f| f.name == func).ok_or_else(|| LayoutError::UnknownFunction(func.into()))?;
    let id =
        f.find_buffer(buffer).ok_or_else(|| LayoutError::UnknownBuffer { func: func.into(), buffer: buffer.into() })?;
    f.layout_transforms.insert(id, map);
    Ok(())
}

fn to_expr(e: &MapExpr, args: &[Expr]) -> Expr {
    let bin = |op, a: &MapExpr, b: &MapExpr| Expr::binary(op, to_expr(a, args), to_expr(b, args));
    match e {
        MapExpr::Var(i) => args[*i].clone(),
        MapExpr::Const(c) => Expr::index(*c),
        MapExpr::Add(a, b) => bin(BinOp::Add, a, b),
        MapExpr::Sub(a, b) => bin(BinOp::Sub, a, b),
        MapExpr::Mul(a, b) => bin(BinOp::Mul, a, b),
        MapExpr::FloorDiv(a, b) => bin(BinOp::FloorDiv, a, b),
        MapExpr::FloorMod(a, b) => bin(BinOp::FloorMod, a, b),
    }
}

fn remap(indices: Vec<Expr>, map: &IndexMap) -> Vec<Expr> {
    map.exprs.iter().map(|e| to_expr(e, &indices)).collect()
}

/// Applies and removes every layout transform of one function.
pub fn apply_func(f: &mut PrimFunc) -> Result<(), LayoutError> {
    let maps = std::mem::take(&mut f.layout_transforms);
    if maps.is_empty() {
        return Ok(());
    }
    for (&b, map) in &maps {
        let buf = f
            .buffers
            .get_mut(b.0 as usize)
            .ok_or_else(|| LayoutError::UnknownBuffer { func: f.name.clone(), buffer: format!("#{}", b.0) })?;
        let err = |source| LayoutError::Map { func: f.name.clone(), buffer: buf.name.clone(), source };
        map.check_injective(&buf.shape).map_err(err)?;
        let shape = map.transformed_shape(&buf.shape).map_err(err)?;
        buf.shape = shape;
        buf.axis_separators = map.axis_separators.clone();
    }
    let body = std::mem::replace(&mut f.body, Stmt::Seq(vec![]));
    // Constant data moves to its new layout.
    let body = body.map_stmts(&mut |s| match s {
        Stmt::AllocateConst { buffer, data, pools } if maps.contains_key(&buffer) => {
            let data = Arc::new(relayout(&data, &maps[&buffer], &f.buffers[buffer.0 as usize].shape));
            Stmt::AllocateConst { buffer, data, pools }
        }
        other => other,
    });
    f.body = body.map_accesses(&mut |buffer, indices| match maps.get(&buffer) {
        Some(m) if indices.len() == m.vars.len() => remap(indices, m),
        _ => indices,
    });
    simplify_func(f);
    Ok(())
}

/// `data` (logical layout) rearranged into the physical layout `map` gives it; padding is 0.
/// When every final index reads at most one logical index (splits, reorders: every packed
/// layout), the physical offset is a sum of one table lookup per logical axis; otherwise the
/// map is evaluated per element. Either way the logical indices are walked row-major with an
/// odometer: weights of millions of elements relayout in milliseconds.
fn relayout(data: &Tensor, map: &IndexMap, new_shape: &[usize]) -> Tensor {
    fn go<T: Element>(a: &ArrayD<T>, map: &IndexMap, new_shape: &[usize]) -> Tensor {
        let mut strides = vec![1usize; new_shape.len()];
        for d in (0..new_shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * new_shape[d + 1];
        }
        let shape = a.shape().to_vec();
        // Per logical axis, the offset each of its values contributes (separable maps only).
        let mut separable = true;
        let mut tables: Vec<Vec<usize>> = shape.iter().map(|&n| vec![0; n]).collect();
        let mut base = 0usize;
        let mut idx = vec![0i64; shape.len()];
        for (e, &stride) in map.exprs.iter().zip(&strides) {
            let mut vars = Vec::new();
            e.mentions(&mut vars);
            vars.dedup();
            match vars.as_slice() {
                [] => base += e.eval(&idx) as usize * stride,
                [v] if vars.iter().all(|x| x == v) => {
                    for (i, slot) in tables[*v].iter_mut().enumerate() {
                        idx[*v] = i as i64;
                        *slot += e.eval(&idx) as usize * stride;
                    }
                    idx[*v] = 0;
                }
                _ => separable = false,
            }
        }
        let mut out = vec![T::default(); new_shape.iter().product()];
        let mut logical = vec![0i64; shape.len()];
        let mut physical = Vec::with_capacity(new_shape.len());
        // `iter` visits a standard-layout array's elements in row-major order, as the odometer.
        for v in a.iter() {
            let at: usize = if separable {
                base + logical.iter().enumerate().map(|(d, &i)| tables[d][i as usize]).sum::<usize>()
            } else {
                physical.clear();
                physical.extend(map.exprs.iter().map(|e| e.eval(&logical)));
                physical.iter().zip(&strides).map(|(&p, &st)| p as usize * st).sum()
            };
            out[at] = *v;
            for d in (0..shape.len()).rev() {
                logical[d] += 1;
                if (logical[d] as usize) < shape[d] {
                    break;
                }
                logical[d] = 0;
            }
        }
        T::into_tensor(ArrayD::from_shape_vec(IxDyn(new_shape), out).expect("shape matches length"))
    }
    crate::dispatch_tensor!(data, a, T => go::<T>(a, map, new_shape))
}

/// Carries transforms on tensors `main` passes to operator functions over to the callees'
/// parameters, then applies every function's transforms.
pub fn apply_layout_transforms(m: &mut Module) -> Result<(), LayoutError> {
    let mut to_callees: Vec<(String, usize, IndexMap, Vec<usize>)> = Vec::new();
    if let Some(main) = m.func(MAIN) {
        main.body.walk(&mut |s| {
            if let Stmt::Evaluate(call) = s
                && let super::Callee::Func(name) = &call.callee
            {
                for (i, a) in call.args.iter().enumerate() {
                    if let Arg::Buffer(b) = a
                        && let Some(map) = main.layout_transforms.get(b)
                    {
                        to_callees.push((name.clone(), i, map.clone(), main.buffer(*b).shape.clone()));
                    }
                }
            }
        });
    }
    for (name, i, map, tensor) in to_callees {
        let f =
            m.funcs.iter_mut().find(|f| f.name == name).ok_or_else(|| LayoutError::UnknownFunction(name.clone()))?;
        let Some(&p) = f.params.get(i) else { continue };
        if f.buffer(p).shape != tensor {
            let (buffer, param) = (f.buffer(p).name.clone(), f.buffer(p).shape.clone());
            return Err(LayoutError::ShapeView { func: f.name.clone(), buffer, param, tensor });
        }
        match f.layout_transforms.get(&p) {
            Some(existing) if *existing != map => {
                return Err(LayoutError::Conflict { func: f.name.clone(), buffer: f.buffer(p).name.clone() });
            }
            _ => {
                f.layout_transforms.insert(p, map);
            }
        }
    }
    m.funcs.iter_mut().try_for_each(apply_func)
}
