//! The reference interpreter: evaluates a [`Graph`] node by node over ndarray tensors.
//!
//! Written to be obviously right rather than fast; it is the oracle every compiled path is
//! checked against. Per-op kernels live in the submodules.

mod elementwise;
mod layout;
mod linalg;
mod norm;
mod pool;
mod quant;

pub use elementwise::erf;

use std::sync::Arc;

use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::Tensor;

/// A kernel's complaint about its operands (which inference should have ruled out) or about the
/// data (integer division by zero).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelError(pub String);

impl From<String> for KernelError {
    fn from(s: String) -> Self {
        KernelError(s)
    }
}

impl From<&str> for KernelError {
    fn from(s: &str) -> Self {
        KernelError(s.to_string())
    }
}

/// Writes the row-major coordinates of flat index `flat` within `dims` into `out`.
fn unravel(mut flat: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = flat % dims[d];
        flat /= dims[d];
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    #[error("the model takes {expected} inputs, got {got}")]
    InputCount { expected: usize, got: usize },
    #[error("input '{name}' must be {expected}, got {got}")]
    InputType { name: String, expected: String, got: String },
    #[error("node '{node}' ({op}) failed: {message}")]
    Kernel { node: String, op: String, message: String },
    #[error("value '{0}' is read before it is defined (run the verifier)")]
    Undefined(String),
}

/// Evaluates one op on concrete inputs, returning every output the op can produce.
pub fn eval_op(op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, KernelError> {
    let x = inputs[0];
    let one = |t: Tensor| Ok(vec![t]);
    match op {
        Op::Conv(attrs) => one(linalg::conv(x, inputs[1], inputs.get(2).copied(), attrs)?),
        Op::ConvInteger(attrs) => one(linalg::conv_integer(x, inputs[1], inputs[2], inputs[3], attrs)?),
        Op::Gemm { alpha, beta, trans_a, trans_b } => {
            one(linalg::gemm(x, inputs[1], inputs.get(2).copied(), *alpha, *beta, *trans_a, *trans_b)?)
        }
        Op::MatMul => one(linalg::matmul(x, inputs[1])?),
        Op::MatMulInteger => one(linalg::matmul_integer(x, inputs[1], inputs[2], inputs[3])?),
        Op::Binary(kind) => one(elementwise::binary(*kind, x, inputs[1])?),
        Op::Unary(kind) => one(elementwise::unary(*kind, x)?),
        Op::LeakyRelu { alpha } => one(elementwise::leaky_relu(x, *alpha)?),
        Op::Clip { min, max } => one(elementwise::clip(x, min.as_ref(), max.as_ref())?),
        Op::Softmax { axis, coerce_2d } => one(norm::softmax(x, *axis, *coerce_2d)?),
        Op::MaxPool { pool, storage_order_col_major } => {
            let (v, i) = pool::max_pool(x, pool, *storage_order_col_major)?;
            Ok(vec![v, i])
        }
        Op::AveragePool { pool, count_include_pad } => one(pool::average_pool(x, pool, *count_include_pad)?),
        Op::GlobalAveragePool => one(pool::global_average_pool(x)?),
        Op::BatchNormalization { epsilon } => {
            one(norm::batch_norm(x, [inputs[1], inputs[2], inputs[3], inputs[4]], *epsilon)?)
        }
        Op::Flatten { .. } | Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
            let ty = crate::infer::infer_types(op, &[&x.tensor_type()])?;
            one(x.reshape(&ty[0].shape)?)
        }
        Op::Transpose { perm } => one(layout::transpose(x, perm)?),
        Op::Concat { axis } => one(layout::concat(inputs, *axis)?),
        Op::Pad { pads, mode, value } => one(layout::pad(x, pads, *mode, value)?),
        Op::Identity => one(x.clone()),
        Op::Dropout => {
            let mask = Tensor::Bool(ndarray::ArrayD::from_elem(x.shape(), true));
            Ok(vec![x.clone(), mask])
        }
        Op::Cast { to } => one(x.cast(*to)),
        Op::QuantizeLinear { axis } => one(quant::quantize(x, inputs[1], inputs[2], *axis)?),
        Op::DequantizeLinear { axis } => one(quant::dequantize(x, inputs[1], inputs[2], *axis)?),
        Op::BitShift { left } => one(elementwise::bit_shift(x, inputs[1], *left)?),
    }
}

/// Runs `graph` on `inputs` (in the order of `graph.inputs`) and returns its outputs.
///
/// Inputs are checked for count, dtype and shape before anything runs. Intermediate values are
/// dropped after their last use.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, InterpError> {
    if inputs.len() != graph.inputs.len() {
        return Err(InterpError::InputCount { expected: graph.inputs.len(), got: inputs.len() });
    }
    let mut env: Vec<Option<Arc<Tensor>>> = graph.values.iter().map(|v| v.constant.clone()).collect();
    for (&id, t) in graph.inputs.iter().zip(inputs) {
        let v = graph.value(id);
        if t.tensor_type() != v.ty {
            return Err(InterpError::InputType {
                name: v.name.clone(),
                expected: v.ty.to_string(),
                got: t.tensor_type().to_string(),
            });
        }
        env[id.0] = Some(Arc::new(t.clone()));
    }
    let mut remaining = graph.use_counts();
    for node in &graph.nodes {
        let args = node
            .inputs
            .iter()
            .map(|i| env[i.0].clone().ok_or_else(|| InterpError::Undefined(graph.value(*i).name.clone())))
            .collect::<Result<Vec<Arc<Tensor>>, _>>()?;
        let refs: Vec<&Tensor> = args.iter().map(|a| a.as_ref()).collect();
        let outs = eval_op(&node.op, &refs).map_err(|e| InterpError::Kernel {
            node: node.name.clone(),
            op: node.op.name().to_string(),
            message: e.0,
        })?;
        drop(refs);
        for (&o, t) in node.outputs.iter().zip(outs) {
            env[o.0] = Some(Arc::new(t));
        }
        for i in &node.inputs {
            remaining[i.0] -= 1;
            if remaining[i.0] == 0 && graph.values[i.0].constant.is_none() {
                env[i.0] = None;
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            let t = env[o.0].clone().ok_or_else(|| InterpError::Undefined(graph.value(*o).name.clone()))?;
            Ok((*t).clone())
        })
        .collect()
}
