//! Control flow with a compile-time shape: If on a condition known at import, Loop with a known
//! trip count (or a condition that becomes known), Scan over a static sequence. The chosen
//! branch or every iteration of the body is inlined into the graph, its values renamed per
//! copy; anything else is an error naming the node.

use std::collections::HashMap;

use crate::graph::ValueId;
use crate::op::Op;
use crate::tensor::Tensor;

use super::super::proto::{GraphProto, NodeProto};
use super::super::{ImportError, Importer, node_name, topological_order};
use super::build::{constant, output, step};
use super::tensor_ops::input_id;
use super::{NodeCtx, const_input, input_type, norm_axis};

/// Iterations a Loop or Scan may unroll to.
pub const MAX_UNROLLED_ITERATIONS: usize = 4096;

/// The subgraph attribute `name`.
fn body<'g>(ctx: &NodeCtx<'g>, name: &str) -> Result<&'g GraphProto, ImportError> {
    let a = ctx.node.attribute.iter().find(|a| a.name == name).ok_or_else(|| ctx.bad_attr(name, "is required"))?;
    a.g.as_deref().ok_or_else(|| ctx.bad_attr(name, "holds no graph"))
}

/// Imports a copy of `g` whose inputs are `inputs`, seeing the enclosing scope's values, and
/// returns its outputs. Every value it defines gets a fresh name ending in `suffix`.
fn inline(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    g: &GraphProto,
    inputs: &[ValueId],
    suffix: &str,
) -> Result<Vec<ValueId>, ImportError> {
    if g.input.len() != inputs.len() {
        return Err(ctx.bad(format!("the subgraph takes {} inputs, given {}", g.input.len(), inputs.len())));
    }
    let outer = im.names.clone();
    let result = inline_in_scope(im, ctx, g, inputs, suffix);
    im.names = outer;
    result
}

fn inline_in_scope(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    g: &GraphProto,
    inputs: &[ValueId],
    suffix: &str,
) -> Result<Vec<ValueId>, ImportError> {
    let mut renamed: HashMap<String, String> = HashMap::new();
    let fresh = |im: &mut Importer<'_>, renamed: &mut HashMap<String, String>, name: &str| {
        let n = im.fresh_name(&format!("{name}{suffix}"));
        renamed.insert(name.to_string(), n.clone());
        n
    };
    for init in &g.initializer {
        let t = super::super::tensor_from_proto_within(init, &im.graph.limits)?;
        let n = fresh(im, &mut renamed, &init.name);
        let id = im.graph.add_constant(n.clone(), t);
        im.names.insert(n, id);
    }
    for (vi, &id) in g.input.iter().zip(inputs) {
        let n = fresh(im, &mut renamed, &vi.name);
        im.names.insert(n, id);
    }
    // Order the body's nodes with every visible name defined.
    let mut visible = im.names.clone();
    for (old, new) in &renamed {
        visible.insert(old.clone(), im.names[new]);
    }
    let order = topological_order(g, &visible)?;
    let nodes: Vec<NodeProto> = order.iter().map(|&i| g.node[i].clone()).collect();
    for node in &nodes {
        for o in node.output.iter().filter(|o| !o.is_empty()) {
            fresh(im, &mut renamed, o);
        }
    }
    // Within this copy the body's own names resolve to the copy's values too (nested
    // subgraphs read them by their original names).
    for (old, new) in &renamed {
        if let Some(&id) = im.names.get(new) {
            im.names.insert(old.clone(), id);
        }
    }
    for (k, original) in nodes.into_iter().enumerate() {
        let mut node = original.clone();
        let name = format!("{}{suffix}", node_name(&node, k));
        for n in node.input.iter_mut().chain(node.output.iter_mut()) {
            if let Some(r) = renamed.get(n.as_str()) {
                *n = r.clone();
            }
        }
        super::import_node(im, &node, &name)?;
        for (o, r) in original.output.iter().zip(&node.output).filter(|(o, _)| !o.is_empty()) {
            if let Some(&id) = im.names.get(r) {
                im.names.insert(o.clone(), id);
            }
        }
    }
    g.output
        .iter()
        .map(|o| {
            let n = renamed.get(&o.name).cloned().unwrap_or_else(|| o.name.clone());
            im.value(ctx.name, &n)
        })
        .collect()
}

pub(super) fn import(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    match ctx.node.op_type.as_str() {
        "If" => {
            let cond = const_input(im, ctx, 0, "condition")?.ok_or_else(|| ctx.bad("input 0 is required"))?;
            let take = cond.to_f64_vec().first().copied().ok_or_else(|| ctx.bad("the condition is empty"))? != 0.0;
            let branch = body(ctx, if take { "then_branch" } else { "else_branch" })?;
            let outs = inline(im, ctx, branch, &[], &format!(":{}", if take { "then" } else { "else" }))?;
            for (i, id) in outs.into_iter().enumerate() {
                output(im, ctx, i, Op::Identity, &[id])?;
            }
            Ok(())
        }
        "Loop" => import_loop(im, ctx),
        _ => import_scan(im, ctx),
    }
}

fn import_loop(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let g = body(ctx, "body")?;
    let trip = match ctx.input(0) {
        Some(_) => {
            let m = const_input(im, ctx, 0, "trip count")?.expect("present");
            Some(m.to_i64_vec().and_then(|v| v.first().copied()).ok_or_else(|| ctx.bad("M must be an integer"))?)
        }
        None => None,
    };
    let mut cond = match ctx.input(1) {
        Some(_) => {
            let c = const_input(im, ctx, 1, "loop condition")?.expect("present");
            c.to_f64_vec().first().copied().unwrap_or(0.0) != 0.0
        }
        None => true,
    };
    let carried_count = ctx.node.input.len().saturating_sub(2);
    let mut carried: Vec<ValueId> = (0..carried_count).map(|i| input_id(im, ctx, i + 2)).collect::<Result<_, _>>()?;
    let scans = g.output.len().checked_sub(1 + carried_count).ok_or_else(|| ctx.bad("the body has too few outputs"))?;
    let mut scanned: Vec<Vec<ValueId>> = vec![Vec::new(); scans];
    let mut k = 0i64;
    while cond && trip.is_none_or(|m| k < m) {
        if k as usize >= MAX_UNROLLED_ITERATIONS {
            return Err(ctx.bad(format!("unrolls to more than {MAX_UNROLLED_ITERATIONS} iterations")));
        }
        let iter = constant(im, ctx, "iteration", Tensor::from_vec::<i64>(&[], vec![k]).map_err(|e| ctx.bad(e))?);
        let cond_in = constant(im, ctx, "cond", Tensor::from_vec::<bool>(&[], vec![true]).map_err(|e| ctx.bad(e))?);
        let mut ins = vec![iter, cond_in];
        ins.extend(&carried);
        let outs = inline(im, ctx, g, &ins, &format!(":iter{k}"))?;
        cond = match im.evaluate(outs[0], 0) {
            Some(c) => c.to_f64_vec().first().copied().unwrap_or(0.0) != 0.0,
            None if trip.is_some() && ctx.input(1).is_none() => true,
            None => return Err(ctx.bad("the loop condition must be known at compile time")),
        };
        carried = outs[1..=carried_count].to_vec();
        for (s, &v) in scanned.iter_mut().zip(&outs[1 + carried_count..]) {
            s.push(v);
        }
        k += 1;
    }
    for (i, &v) in carried.iter().enumerate() {
        output(im, ctx, i, Op::Identity, &[v])?;
    }
    for (j, values) in scanned.into_iter().enumerate() {
        let stacked = stack(im, ctx, &values, 0)?;
        output(im, ctx, carried_count + j, Op::Identity, &[stacked])?;
    }
    Ok(())
}

/// `values` stacked along a new axis `axis`.
fn stack(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, values: &[ValueId], axis: usize) -> Result<ValueId, ImportError> {
    if values.is_empty() {
        return Err(ctx.bad("a scan output of zero iterations has no static shape"));
    }
    let parts = values
        .iter()
        .map(|&v| step(im, ctx, "scan_part", Op::Unsqueeze { axes: vec![axis] }, &[v]))
        .collect::<Result<Vec<_>, _>>()?;
    if parts.len() == 1 { Ok(parts[0]) } else { step(im, ctx, "scanned", Op::Concat { axis }, &parts) }
}

fn import_scan(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let g = body(ctx, "body")?;
    let num_scan = ctx.int("num_scan_inputs", 0)?;
    let inputs = ctx.node.input.len();
    if num_scan < 1 || num_scan as usize > inputs {
        return Err(ctx.bad_attr("num_scan_inputs", format!("{num_scan} does not fit {inputs} inputs")));
    }
    let num_scan = num_scan as usize;
    let states = inputs - num_scan;
    let list = |name: &str, n: usize| -> Result<Vec<i64>, ImportError> {
        let v = ctx.ints(name)?.unwrap_or(vec![0; n]);
        if v.len() != n {
            return Err(ctx.bad_attr(name, format!("needs {n} entries, has {}", v.len())));
        }
        Ok(v)
    };
    let in_axes = list("scan_input_axes", num_scan)?;
    let in_dirs = list("scan_input_directions", num_scan)?;
    let num_out = g.output.len().checked_sub(states).ok_or_else(|| ctx.bad("the body has too few outputs"))?;
    let out_axes = list("scan_output_axes", num_out)?;
    let out_dirs = list("scan_output_directions", num_out)?;
    let mut scan_in = Vec::new();
    let mut seq = None;
    for j in 0..num_scan {
        let ty = input_type(im, ctx, states + j)?;
        let axis = norm_axis(ctx, "scan_input_axes", in_axes[j], ty.rank())?;
        if *seq.get_or_insert(ty.shape[axis]) != ty.shape[axis] {
            return Err(ctx.bad("scan inputs differ in sequence length"));
        }
        scan_in.push((input_id(im, ctx, states + j)?, axis, in_dirs[j] != 0));
    }
    let seq = seq.unwrap_or(0);
    if seq > MAX_UNROLLED_ITERATIONS {
        return Err(ctx.bad(format!("unrolls to more than {MAX_UNROLLED_ITERATIONS} iterations")));
    }
    let mut state: Vec<ValueId> = (0..states).map(|i| input_id(im, ctx, i)).collect::<Result<_, _>>()?;
    let mut scanned: Vec<Vec<ValueId>> = vec![Vec::new(); num_out];
    for t in 0..seq {
        let mut ins = state.clone();
        for &(x, axis, reverse) in &scan_in {
            let at = if reverse { seq - 1 - t } else { t };
            let i = constant(im, ctx, "t", Tensor::from_vec::<i64>(&[], vec![at as i64]).map_err(|e| ctx.bad(e))?);
            ins.push(step(im, ctx, "scan_in", Op::Gather { axis }, &[x, i])?);
        }
        let outs = inline(im, ctx, g, &ins, &format!(":step{t}"))?;
        state = outs[..states].to_vec();
        for (s, &v) in scanned.iter_mut().zip(&outs[states..]) {
            s.push(v);
        }
    }
    for (i, &v) in state.iter().enumerate() {
        output(im, ctx, i, Op::Identity, &[v])?;
    }
    for (j, mut values) in scanned.into_iter().enumerate() {
        if out_dirs[j] != 0 {
            values.reverse();
        }
        let rank = values.first().map_or(0, |&v| im.graph.ty(v).rank()) + 1;
        let axis = norm_axis(ctx, "scan_output_axes", out_axes[j], rank)?;
        let stacked = stack(im, ctx, &values, axis)?;
        output(im, ctx, states + j, Op::Identity, &[stacked])?;
    }
    Ok(())
}
