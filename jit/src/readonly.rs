//! Read-only buffers: model inputs and constant pools are handed to generated code as shared
//! borrows, so no store may reach them. This check follows read-only-ness from `main`'s
//! parameters through pool views and call arguments and rejects any store into such a buffer.

use std::collections::HashMap;

use heron_ir::loop_ir::{Arg, Callee, MAIN, Module, Stmt};

use crate::CodegenError;

/// Fails when a store can reach a buffer derived from a `main` parameter marked read-only.
pub fn check_read_only(ir: &Module, main_read_only: &[bool]) -> Result<(), CodegenError> {
    let main = ir.main().ok_or_else(|| CodegenError::NoFunction(MAIN.into()))?;
    // Read-only flags per function and buffer, grown until nothing changes (calls may nest).
    let mut ro: HashMap<&str, Vec<bool>> =
        ir.funcs.iter().map(|f| (f.name.as_str(), vec![false; f.buffers.len()])).collect();
    for (k, &p) in main.params.iter().enumerate() {
        ro.get_mut(MAIN).expect("main")[p.0 as usize] = main_read_only.get(k).copied().unwrap_or(false);
    }
    let by_name = ir.by_name();
    for _round in 0..=ir.funcs.len() {
        let mut changed = false;
        for f in &ir.funcs {
            let mut mine = ro[f.name.as_str()].clone();
            let mut calls = Vec::new();
            f.body.walk(&mut |s| match s {
                Stmt::DeclPoolBuffer { buffer, pool, .. } if mine[pool.0 as usize] && !mine[buffer.0 as usize] => {
                    mine[buffer.0 as usize] = true;
                    changed = true;
                }
                Stmt::Evaluate(call) => calls.push(call.clone()),
                _ => {}
            });
            for call in calls {
                let Callee::Func(name) = &call.callee else { continue };
                let Some(callee) = by_name.get(name.as_str()) else { continue };
                for (arg, &param) in call.args.iter().zip(&callee.params) {
                    if let Arg::Buffer(b) = arg
                        && mine[b.0 as usize]
                        && !ro[name.as_str()][param.0 as usize]
                    {
                        ro.get_mut(name.as_str()).expect("callee")[param.0 as usize] = true;
                        changed = true;
                    }
                }
            }
            *ro.get_mut(f.name.as_str()).expect("func") = mine;
        }
        if !changed {
            break;
        }
    }
    for f in &ir.funcs {
        let mine = &ro[f.name.as_str()];
        let mut bad = None;
        f.body.walk(&mut |s| {
            if let Stmt::Store { buffer, .. } = s
                && mine[buffer.0 as usize]
            {
                bad.get_or_insert(*buffer);
            }
        });
        if let Some(b) = bad {
            return Err(CodegenError::Unsupported {
                func: f.name.clone(),
                what: format!("a store into read-only buffer '{}'", f.buffer(b).name),
            });
        }
    }
    Ok(())
}
