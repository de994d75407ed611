//! Lowering from the graph IR to the loop IR: one PrimFunc per (fused) operator and a `main`
//! that declares constants and inter-operator tensors and calls the operators in order.
//!
//! Fusion ([`fuse`]) attaches chains of elementwise consumers (bias adds, activations, clips,
//! residual adds) to the operator producing their input, so the intermediate tensors never
//! exist. The per-operator loop nests live in [`ops`].

mod fuse;
mod ops;

use std::collections::HashMap;

use crate::graph::{Graph, NameTable, Node, ValueId};
use crate::loop_ir::build::FuncBuilder;
use crate::loop_ir::simplify::simplify_func;
use crate::loop_ir::{Arg, BufferId, Call, Callee, MAIN, Module, Stmt};
use crate::op::Op;

pub use fuse::{Epilogue, Group, fuse};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowerError {
    #[error("node '{node}' ({op}): cannot lower: {reason}")]
    Unsupported { node: String, op: String, reason: String },
    #[error("operator '{func}': scratch buffer '{buffer}': {reason}")]
    TooLarge { func: String, buffer: String, reason: String },
    #[error("node '{node}' ({op}): {reason}")]
    Graph { node: String, op: String, reason: String },
}

/// Concats with more inputs than this are lowered as a tree of smaller ones: operator
/// functions keep a bounded number of parameters however wide the model.
pub const MAX_CONCAT_INPUTS: usize = 64;

/// `graph` with every Concat of more than [`MAX_CONCAT_INPUTS`] inputs split into a tree of
/// Concats (None when there is none).
fn split_wide_concats(graph: &Graph) -> Result<Option<Graph>, LowerError> {
    let wide = |n: &Node| matches!(n.op, Op::Concat { .. }) && n.inputs.len() > MAX_CONCAT_INPUTS;
    if !graph.nodes.iter().any(wide) {
        return Ok(None);
    }
    let mut g = graph.clone();
    let mut names = NameTable::new(&g);
    for node in std::mem::take(&mut g.nodes) {
        if !wide(&node) {
            g.nodes.push(node);
            continue;
        }
        let mut level = node.inputs.clone();
        while level.len() > MAX_CONCAT_INPUTS {
            let mut next = Vec::with_capacity(level.len().div_ceil(MAX_CONCAT_INPUTS));
            for chunk in level.chunks(MAX_CONCAT_INPUTS) {
                let name = names.fresh(&format!("{}:part", node.name));
                let part = g.add_node_named(name.clone(), node.op.clone(), chunk, vec![name]).map_err(|e| {
                    LowerError::Graph { node: node.name.clone(), op: node.op.name().into(), reason: e.to_string() }
                })?;
                next.push(part[0]);
            }
            level = next;
        }
        g.nodes.push(Node { inputs: level, ..node });
    }
    Ok(Some(g))
}

/// Default pool candidates of lowered allocations: empty means "the default workspace pool"
/// (constants: "the default constant pool"); the planner resolves them.
const DEFAULT_POOLS: Vec<String> = Vec::new();

/// Lowers a verified graph to a loop-IR module. Every scratch buffer lowering adds is checked
/// against the graph's limits.
pub fn lower(graph: &Graph) -> Result<Module, LowerError> {
    let split = split_wide_concats(graph)?;
    let graph = split.as_ref().unwrap_or(graph);
    let groups = fuse(graph);
    let mut module = Module::default();
    let mut main = FuncBuilder::new(MAIN);
    let mut main_buf: HashMap<ValueId, BufferId> = HashMap::new();
    let mut body = Vec::new();

    for &i in &graph.inputs {
        let v = graph.value(i);
        main_buf.insert(i, main.param(&v.name, v.ty.dtype, v.ty.shape.clone()));
    }
    // Graph outputs are parameters too, unless the same value is output twice or is an input
    // or constant: then a copy fills the extra parameter.
    let mut copies: Vec<(ValueId, BufferId)> = Vec::new();
    for &o in &graph.outputs {
        let v = graph.value(o);
        let p = main.param(&v.name, v.ty.dtype, v.ty.shape.clone());
        if main_buf.contains_key(&o) || v.constant.is_some() {
            copies.push((o, p));
        } else {
            main_buf.insert(o, p);
        }
    }

    let mut ensure = |main: &mut FuncBuilder, body: &mut Vec<Stmt>, id: ValueId| -> BufferId {
        if let Some(&b) = main_buf.get(&id) {
            return b;
        }
        let v = graph.value(id);
        let b = main.buffer(&v.name, v.ty.dtype, v.ty.shape.clone(), crate::loop_ir::Scope::Global);
        body.push(match &v.constant {
            Some(data) => Stmt::AllocateConst { buffer: b, data: data.clone(), pools: DEFAULT_POOLS },
            None => Stmt::Allocate { buffer: b, pools: DEFAULT_POOLS },
        });
        main_buf.insert(id, b);
        b
    };

    for (k, group) in groups.iter().enumerate() {
        let func = ops::lower_group(graph, group, k)?;
        // Parameters are graph tensors, checked already; the rest is scratch lowering added.
        for (i, buf) in func.buffers.iter().enumerate() {
            if func.params.contains(&BufferId(i as u32)) {
                continue;
            }
            graph.limits.check_shape(buf.dtype, &buf.shape).map_err(|e| LowerError::TooLarge {
                func: func.name.clone(),
                buffer: buf.name.clone(),
                reason: e.to_string(),
            })?;
        }
        let mut args = Vec::new();
        for &v in group.inputs.iter().chain(&group.outputs) {
            args.push(Arg::Buffer(ensure(&mut main, &mut body, v)));
        }
        body.push(Stmt::Evaluate(Call { callee: Callee::Func(func.name.clone()), args }));
        module.funcs.push(func);
    }
    for (k, (value, param)) in copies.into_iter().enumerate() {
        let src = ensure(&mut main, &mut body, value);
        let ty = graph.ty(value);
        let func = ops::copy_func(&format!("copy_output_{k}"), ty);
        body.push(Stmt::Evaluate(Call {
            callee: Callee::Func(func.name.clone()),
            args: vec![Arg::Buffer(src), Arg::Buffer(param)],
        }));
        module.funcs.push(func);
    }
    module.funcs.push(main.finish(Stmt::Seq(body)));
    module.funcs.iter_mut().for_each(simplify_func);
    Ok(module)
}

/// The ops whose lowering stores each output element once, so an elementwise epilogue can be
/// applied at the store.
pub(crate) fn takes_epilogue(op: &Op) -> bool {
    matches!(
        op,
        Op::Conv(_)
            | Op::ConvInteger(_)
            | Op::Gemm { .. }
            | Op::MatMul
            | Op::MatMulInteger
            | Op::Binary(_)
            | Op::Unary(_)
            | Op::LeakyRelu { .. }
            | Op::Activation(_)
            | Op::Clip { .. }
            | Op::AveragePool { .. }
            | Op::GlobalAveragePool
            | Op::BatchNormalization { .. }
    )
}
