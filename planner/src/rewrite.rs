//! The rewrite to the post-USMP form: every planned allocation becomes a view into a pool at
//! its planned offset, every function takes the pool base buffers as trailing parameters, and
//! `main` receives them from its caller. This is what the code generators consume.

use std::collections::HashMap;
use std::sync::Arc;

use heron_ir::loop_ir::{Arg, Buffer, BufferId, Module, PrimFunc, Scope, Stmt};
use heron_ir::{DType, Tensor};

use crate::extract::{BufferRef, Extracted};
use crate::types::{Plan, PlanError, PoolInfo, PoolKind};

/// A planned module and what its caller must provide.
#[derive(Clone, Debug)]
pub struct Rewritten {
    pub module: Module,
    pub pools: Vec<PoolInfo>,
    pub pool_sizes: Vec<u64>,
    /// Initial contents of each constant pool; `None` for workspace pools.
    pub images: Vec<Option<PoolImage>>,
}

/// A constant pool's contents: its constants at their offsets, every one inside the pool
/// (checked when the image is made). They are written straight into the memory that holds the
/// pool: a large model's constants are copied once, not through an intermediate image.
#[derive(Clone, Debug, Default)]
pub struct PoolImage {
    pub size: usize,
    pub constants: Vec<(usize, Arc<Tensor>)>,
}

impl PoolImage {
    /// Writes the constants into `dst` (the pool: at least `size` bytes, zeroed where no
    /// constant lies).
    pub fn write_into(&self, dst: &mut [u8]) {
        for (offset, data) in &self.constants {
            data.write_le_bytes(&mut dst[*offset..*offset + data.size_bytes()]);
        }
    }

    /// The pool's bytes, `size` long, or an error when they do not fit in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>, PlanError> {
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(self.size).map_err(|_| PlanError::TooLarge {
            buffer: "constant pool".into(),
            size: self.size as u64,
            why: "the constant pool's contents do not fit in memory".into(),
        })?;
        bytes.resize(self.size, 0);
        self.write_into(&mut bytes);
        Ok(bytes)
    }
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
    let mut images: Vec<Option<PoolImage>> = pools
        .iter()
        .zip(&plan.pool_sizes)
        .map(|(p, &size)| {
            (p.kind == PoolKind::Constant)
                .then(|| PoolImage { size: usize::try_from(size).unwrap_or(usize::MAX), constants: Vec::new() })
        })
        .collect();
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
                    let start = a.offset as usize;
                    match start.checked_add(data.size_bytes()).filter(|&end| end <= image.size) {
                        Some(_) => image.constants.push((start, Arc::clone(data))),
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
