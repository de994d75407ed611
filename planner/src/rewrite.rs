//! The rewrite to the post-USMP form: every planned allocation becomes a view into a pool at
//! its planned offset, every function takes the pool base buffers as trailing parameters, and
//! `main` receives them from its caller. This is what the code generators consume.

use std::collections::HashMap;

use heron_ir::DType;
use heron_ir::loop_ir::{Arg, Buffer, BufferId, Module, PrimFunc, Scope, Stmt};

use crate::extract::{BufferRef, Extracted};
use crate::types::{Plan, PlanError, PoolInfo, PoolKind};

/// A planned module and what its caller must provide.
#[derive(Clone, Debug)]
pub struct Rewritten {
    pub module: Module,
    pub pools: Vec<PoolInfo>,
    pub pool_sizes: Vec<u64>,
    /// Initial contents of each constant pool (the constants at their offsets); `None` for
    /// workspace pools.
    pub images: Vec<Option<Vec<u8>>>,
}

fn pool_param_name(f: &PrimFunc, pool: &str) -> String {
    let mut name = pool.to_string();
    let mut k = 1;
    while f.buffers.iter().any(|b| b.name == name) {
        name = format!("{pool}_{k}");
        k += 1;
    }
    name
}

/// Rewrites `module` (the module `problem` was extracted from) to the pool offsets of `plan`,
/// after checking the plan against every conflict of `problem`, listed or implied by live
/// ranges: a plan made without regard to the implied ones is refused, never compiled.
pub fn rewrite(module: &Module, problem: &Extracted, pools: &[PoolInfo], plan: &Plan) -> Result<Rewritten, PlanError> {
    let invalid = |e: Vec<String>| PlanError::Invalid(e.join("; "));
    crate::verify_plan(&problem.buffers, pools, plan).map_err(invalid)?;
    let implied: Vec<usize> = (0..problem.buffers.len()).filter(|&i| problem.implied[i]).collect();
    let implied_plan = Plan {
        algorithm: plan.algorithm.clone(),
        allocations: implied.iter().map(|&i| plan.allocations[i].clone()).collect(),
        pool_sizes: plan.pool_sizes.clone(),
    };
    let implied_buffers: Vec<_> = implied.iter().map(|&i| problem.buffers[i].clone()).collect();
    crate::sweep::verify_live_ranges(&implied_buffers, pools, &implied_plan).map_err(invalid)?;
    let placed: HashMap<&BufferRef, usize> = problem.refs.iter().enumerate().map(|(i, r)| (r, i)).collect();
    let mut images: Vec<Option<Vec<u8>>> = Vec::with_capacity(pools.len());
    for (p, &size) in pools.iter().zip(&plan.pool_sizes) {
        images.push(if p.kind == PoolKind::Constant {
            let mut image = Vec::new();
            let bytes = usize::try_from(size).unwrap_or(usize::MAX);
            image.try_reserve_exact(bytes).map_err(|_| PlanError::TooLarge {
                buffer: p.name.clone(),
                size,
                why: "the constant pool's contents do not fit in memory".into(),
            })?;
            image.resize(bytes, 0);
            Some(image)
        } else {
            None
        });
    }
    let mut funcs = Vec::with_capacity(module.funcs.len());
    for f in &module.funcs {
        let mut f = f.clone();
        let pool_params: Vec<BufferId> = pools
            .iter()
            .zip(&plan.pool_sizes)
            .map(|(p, &size)| {
                let name = pool_param_name(&f, &p.name);
                f.buffers.push(Buffer {
                    name,
                    dtype: DType::U8,
                    shape: vec![size as usize],
                    axis_separators: vec![],
                    scope: Scope::Global,
                });
                let id = BufferId(f.buffers.len() as u32 - 1);
                f.params.push(id);
                id
            })
            .collect();
        let name = f.name.clone();
        let mut failure: Option<PlanError> = None;
        let body = std::mem::replace(&mut f.body, Stmt::Seq(vec![]));
        f.body = body.map_stmts(&mut |s| match s {
            Stmt::Allocate { buffer, pools: _ } | Stmt::AllocateConst { buffer, pools: _, .. }
                if placed.contains_key(&BufferRef { func: name.clone(), buffer }) =>
            {
                let i = placed[&BufferRef { func: name.clone(), buffer }];
                let a = &plan.allocations[i];
                if let (Stmt::AllocateConst { data, .. }, Some(image)) = (&s, images[a.pool].as_mut()) {
                    let bytes = data.to_le_bytes();
                    let start = a.offset as usize;
                    match image.get_mut(start..start + bytes.len()) {
                        Some(dst) => dst.copy_from_slice(&bytes),
                        None => {
                            failure = Some(PlanError::BadBuffer {
                                buffer: problem.buffers[i].name.clone(),
                                reason: "constant outside its pool".into(),
                            })
                        }
                    }
                } else if matches!(s, Stmt::AllocateConst { .. }) {
                    failure = Some(PlanError::BadBuffer {
                        buffer: problem.buffers[i].name.clone(),
                        reason: format!("constant placed in workspace pool '{}'", pools[a.pool].name),
                    });
                }
                Stmt::DeclPoolBuffer { buffer, pool: pool_params[a.pool], byte_offset: a.offset }
            }
            // Callees in the module take the pools too; routines outside it keep their
            // signatures.
            Stmt::Evaluate(mut call) if matches!(call.callee, heron_ir::loop_ir::Callee::Func(_)) => {
                call.args.extend(pool_params.iter().map(|&p| Arg::Buffer(p)));
                Stmt::Evaluate(call)
            }
            other => other,
        });
        if let Some(e) = failure {
            return Err(e);
        }
        funcs.push(f);
    }
    Ok(Rewritten { module: Module { funcs }, pools: pools.to_vec(), pool_sizes: plan.pool_sizes.clone(), images })
}
