//! The reference interpreter: evaluates a [`Graph`] node by node over ndarray tensors.
//!
//! Written to be obviously right rather than fast; it is the oracle every compiled path is
//! checked against. Per-op kernels live in the submodules.

mod elementwise;
mod index;
mod layout;
mod linalg;
mod norm;
mod pool;
mod quant;

pub use elementwise::erf;
pub use index::{cubic_weights, keys_cubic};

use std::sync::Arc;

use crate::graph::{Graph, ValueId};
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

/// Kernels whose working set is at least this large first check that the memory exists.
const PROBE_BYTES: usize = 64 << 20;

/// Fails cleanly, instead of aborting the process inside a kernel, when the memory `op` will
/// allocate is not available: the kernels allocate through ndarray, which cannot report
/// failure, so the working set is reserved once up front (and released: the address space is
/// returned, so the kernel's own allocations of at most that size then succeed). The estimate
/// is generous: outputs plus 32 bytes per input and output element for the f64/i64
/// intermediates some kernels use.
fn check_working_set(op: &Op, inputs: &[&Tensor]) -> Result<(), KernelError> {
    let types: Vec<crate::TensorType> = inputs.iter().map(|t| t.tensor_type()).collect();
    let refs: Vec<&crate::TensorType> = types.iter().collect();
    let outputs = crate::infer::infer_types(op, &refs)?;
    let elements = inputs.iter().map(|t| t.len()).chain(outputs.iter().map(|t| t.num_elements()));
    let bytes = outputs
        .iter()
        .map(|t| t.size_bytes())
        .chain(elements.map(|n| n.saturating_mul(32)))
        .fold(0usize, usize::saturating_add);
    if bytes >= PROBE_BYTES {
        let mut probe: Vec<u8> = Vec::new();
        probe
            .try_reserve_exact(bytes)
            .map_err(|_| KernelError(format!("out of memory: evaluating it needs about {bytes} bytes")))?;
    }
    Ok(())
}

/// Evaluates one op on concrete inputs, returning every output the op can produce. Fails
/// cleanly when the memory it needs is not available.
pub fn eval_op(op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, KernelError> {
    check_working_set(op, inputs)?;
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
        Op::Compare(c) => one(elementwise::compare(*c, x, inputs[1])?),
        Op::Logical(l) => one(elementwise::logical(*l, x, inputs[1])?),
        Op::Not => one(elementwise::not(x)?),
        Op::Reduce { op, axes, keepdims } => one(norm::reduce(*op, x, axes, *keepdims)?),
        Op::ArgReduce { max, axis, keepdims, last } => one(norm::arg_reduce(x, *max, *axis, *keepdims, *last)?),
        Op::Where => one(elementwise::where_(x, inputs[1], inputs[2])?),
        Op::Activation(a) => one(elementwise::activation(x, *a)?),
        Op::Gather { axis } => one(index::gather(x, inputs[1], *axis)?),
        Op::GatherElements { axis } => one(index::gather_elements(x, inputs[1], *axis)?),
        Op::GatherND { batch_dims } => one(index::gather_nd(x, inputs[1], *batch_dims)?),
        Op::ScatterElements { axis, reduction } => {
            one(index::scatter_elements(x, inputs[1], inputs[2], *axis, *reduction)?)
        }
        Op::ScatterND { reduction } => one(index::scatter_nd(x, inputs[1], inputs[2], *reduction)?),
        Op::Slice { axes } => one(index::slice(x, axes)?),
        Op::Expand { shape } => one(index::expand(x, shape)?),
        Op::Tile { repeats } => one(index::tile(x, repeats)?),
        Op::Normalize { axis, epsilon, rms } => {
            one(norm::normalize(x, inputs[1], inputs.get(2).copied(), *axis, *epsilon, *rms)?)
        }
        Op::Resample { axes, extrapolation } => one(index::resample(x, &inputs[1..], axes, *extrapolation)?),
        Op::GridSample { mode, padding, align_corners } => {
            one(index::grid_sample(x, inputs[1], *mode, *padding, *align_corners)?)
        }
        Op::CumSum { axis, exclusive, reverse, product } => {
            one(index::cumulative(x, *axis, *exclusive, *reverse, *product)?)
        }
        Op::TopK { axis, k, largest } => index::topk(x, *axis, *k, *largest),
        Op::LeakyRelu { alpha } => one(elementwise::leaky_relu(x, *alpha)?),
        Op::Clip { min, max } => one(elementwise::clip(x, min.as_ref(), max.as_ref())?),
        Op::Softmax { axis, coerce_2d, log } => one(norm::softmax(x, *axis, *coerce_2d, *log)?),
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
        Op::Requantize { shift, min, max } => one(quant::requantize(x, *shift, *min, *max)?),
    }
}

/// A value during a run: the caller's input (borrowed, never copied) or one the run holds.
#[derive(Clone)]
enum Slot<'a> {
    Input(&'a Tensor),
    Held(Arc<Tensor>),
}

impl Slot<'_> {
    fn tensor(&self) -> &Tensor {
        match self {
            Slot::Input(t) => t,
            Slot::Held(t) => t,
        }
    }

    /// The tensor, moved out when this was its last reference.
    fn into_tensor(self) -> Tensor {
        match self {
            Slot::Input(t) => t.clone(),
            Slot::Held(t) => Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone()),
        }
    }
}

/// Runs `graph` on `inputs` (in the order of `graph.inputs`) and returns its outputs.
///
/// Inputs are checked for count, dtype and shape before anything runs. Intermediate values are
/// dropped after their last use.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, InterpError> {
    run_observed(graph, inputs, &mut |_, _| {})
}

/// [`run`], showing `observe` every input and every value a node computes, as it is computed
/// (calibration collects activation statistics this way).
pub fn run_observed(
    graph: &Graph,
    inputs: &[Tensor],
    observe: &mut dyn FnMut(ValueId, &Tensor),
) -> Result<Vec<Tensor>, InterpError> {
    if inputs.len() != graph.inputs.len() {
        return Err(InterpError::InputCount { expected: graph.inputs.len(), got: inputs.len() });
    }
    let mut env: Vec<Option<Slot<'_>>> = graph.values.iter().map(|v| v.constant.clone().map(Slot::Held)).collect();
    for (&id, t) in graph.inputs.iter().zip(inputs) {
        let v = graph.value(id);
        if t.tensor_type() != v.ty {
            return Err(InterpError::InputType {
                name: v.name.clone(),
                expected: v.ty.to_string(),
                got: t.tensor_type().to_string(),
            });
        }
        env[id.0] = Some(Slot::Input(t));
        observe(id, t);
    }
    let mut remaining = graph.use_counts();
    for node in &graph.nodes {
        let args = node
            .inputs
            .iter()
            .map(|i| env[i.0].clone().ok_or_else(|| InterpError::Undefined(graph.value(*i).name.clone())))
            .collect::<Result<Vec<Slot<'_>>, _>>()?;
        let refs: Vec<&Tensor> = args.iter().map(Slot::tensor).collect();
        let outs = eval_op(&node.op, &refs).map_err(|e| InterpError::Kernel {
            node: node.name.clone(),
            op: node.op.name().to_string(),
            message: e.0,
        })?;
        drop(refs);
        drop(args);
        for (&o, t) in node.outputs.iter().zip(outs) {
            observe(o, &t);
            env[o.0] = Some(Slot::Held(Arc::new(t)));
        }
        for i in &node.inputs {
            remaining[i.0] -= 1;
            if remaining[i.0] == 0 && graph.values[i.0].constant.is_none() {
                env[i.0] = None;
            }
        }
    }
    // A value listed as an output several times is copied for all but its last listing, where
    // (like every other output) its last reference is moved out.
    let mut last_listing = vec![0; graph.values.len()];
    for (k, o) in graph.outputs.iter().enumerate() {
        last_listing[o.0] = k;
    }
    let mut outputs = Vec::with_capacity(graph.outputs.len());
    for (k, o) in graph.outputs.iter().enumerate() {
        let t = if last_listing[o.0] != k { env[o.0].clone() } else { env[o.0].take() };
        let t = t.map(Slot::into_tensor);
        outputs.push(t.ok_or_else(|| InterpError::Undefined(graph.value(*o).name.clone()))?);
    }
    Ok(outputs)
}
