//! Per-operator ONNX translation, dispatched on each operator's own schema version.
//!
//! An op's semantics only change at the versions listed in its schema history, so a model
//! importing opset 22 uses, for Relu, the version-14 schema. Inputs that decide shapes or
//! attributes are resolved to constants here; the resulting [`Op`] carries no opset knowledge.

use crate::dtype::{DType, TensorType};
use crate::infer::window_span;
use crate::limits::checked_elements;
use crate::op::{
    BinaryOp, CompareOp, ConvAttrs, LogicalOp, Op, PadMode, PoolAttrs, QuantAxis, ReduceOp, UnaryOp, Window,
};
use crate::tensor::Tensor;

mod build;
mod composite;
mod control;
mod einsum;
mod image;
mod recurrent;
mod resize;
mod spectral;
mod tensor_ops;

use super::proto::{AttributeProto, NodeProto, attribute_type as at};
use super::{ImportError, Importer, tensor_from_proto_within};

/// Every supported op type with the opset versions at which its schema changed.
pub const SUPPORTED_OPS: &[(&str, &[i64])] = &[
    ("Add", &[1, 6, 7, 13, 14]),
    ("AveragePool", &[1, 7, 10, 11, 19, 22]),
    ("BatchNormalization", &[1, 6, 7, 9, 14, 15]),
    ("BitShift", &[11]),
    ("Cast", &[1, 6, 9, 13, 19, 21, 23, 24, 25]),
    ("Clip", &[1, 6, 11, 12, 13]),
    ("Concat", &[1, 4, 11, 13]),
    ("Constant", &[1, 9, 11, 12, 13, 19, 21, 23, 24, 25]),
    ("Conv", &[1, 11, 22]),
    ("ConvInteger", &[10]),
    ("DequantizeLinear", &[10, 13, 19, 21, 23, 24, 25]),
    ("Div", &[1, 6, 7, 13, 14]),
    ("Dropout", &[1, 6, 7, 10, 12, 13, 22]),
    ("Exp", &[1, 6, 13]),
    ("Flatten", &[1, 9, 11, 13, 21, 23, 24, 25]),
    ("Gemm", &[1, 6, 7, 9, 11, 13]),
    ("GlobalAveragePool", &[1, 22]),
    ("Identity", &[1, 13, 14, 16, 19, 21, 23, 24, 25]),
    ("LeakyRelu", &[1, 6, 16]),
    ("MatMul", &[1, 9, 13]),
    ("MatMulInteger", &[10]),
    ("Max", &[1, 6, 8, 12, 13]),
    ("MaxPool", &[1, 8, 10, 11, 12, 22]),
    ("Min", &[1, 6, 8, 12, 13]),
    ("Mul", &[1, 6, 7, 13, 14]),
    ("Pad", &[1, 2, 11, 13, 18, 19, 21, 23, 24, 25]),
    ("QuantizeLinear", &[10, 13, 19, 21, 23, 24, 25]),
    ("Relu", &[1, 6, 13, 14]),
    ("Reshape", &[1, 5, 13, 14, 19, 21, 23, 24, 25]),
    ("Sigmoid", &[1, 6, 13]),
    ("Softmax", &[1, 11, 13]),
    ("Sqrt", &[1, 6, 13]),
    ("Squeeze", &[1, 11, 13, 21, 23, 24, 25]),
    ("Sub", &[1, 6, 7, 13, 14]),
    ("Tanh", &[1, 6, 13]),
    ("Erf", &[9, 13]),
    ("Transpose", &[1, 13, 21, 23, 24, 25]),
    ("Unsqueeze", &[1, 11, 13, 21, 23, 24, 25]),
    ("Abs", &[1, 6, 13]),
    ("Neg", &[1, 6, 13]),
    ("Floor", &[1, 6, 13]),
    ("Ceil", &[1, 6, 13]),
    ("Round", &[11, 22]),
    ("Sign", &[9, 13]),
    ("Reciprocal", &[1, 6, 13]),
    ("Log", &[1, 6, 13]),
    ("Sin", &[7, 22]),
    ("Cos", &[7, 22]),
    ("Tan", &[7, 22]),
    ("Asin", &[7, 22]),
    ("Acos", &[7, 22]),
    ("Atan", &[7, 22]),
    ("Sinh", &[9, 22]),
    ("Cosh", &[9, 22]),
    ("Asinh", &[9, 22]),
    ("Acosh", &[9, 22]),
    ("Atanh", &[9, 22]),
    ("Softplus", &[1, 22]),
    ("Softsign", &[1, 22]),
    ("HardSwish", &[14, 22]),
    ("Mish", &[18, 22]),
    ("Gelu", &[20]),
    ("LogSoftmax", &[1, 11, 13]),
    ("Pow", &[1, 7, 12, 13, 15]),
    ("Mod", &[10, 13]),
    ("Shape", &[1, 13, 15, 19, 21, 23, 24, 25]),
    ("Size", &[1, 13, 19, 21, 23, 24, 25]),
    ("CastLike", &[15, 19, 21, 23, 24, 25]),
    ("ConstantOfShape", &[9, 20, 21, 23, 24, 25]),
    ("ReduceSum", &[1, 11, 13]),
    ("ReduceMean", &[1, 11, 13, 18]),
    ("ReduceMax", &[1, 11, 12, 13, 18, 20]),
    ("ReduceMin", &[1, 11, 12, 13, 18, 20]),
    ("ReduceProd", &[1, 11, 13, 18]),
    ("ReduceL1", &[1, 11, 13, 18]),
    ("ReduceL2", &[1, 11, 13, 18]),
    ("ReduceSumSquare", &[1, 11, 13, 18]),
    ("ReduceLogSum", &[1, 11, 13, 18]),
    ("ReduceLogSumExp", &[1, 11, 13, 18]),
    ("ArgMax", &[1, 11, 12, 13]),
    ("ArgMin", &[1, 11, 12, 13]),
    ("Equal", &[1, 7, 11, 13, 19]),
    ("Less", &[1, 7, 9, 13]),
    ("LessOrEqual", &[12, 16]),
    ("Greater", &[1, 7, 9, 13]),
    ("GreaterOrEqual", &[12, 16]),
    ("And", &[1, 7]),
    ("Or", &[1, 7]),
    ("Xor", &[1, 7]),
    ("Not", &[1]),
    ("Where", &[9, 16]),
    ("Gather", &[1, 11, 13]),
    ("GatherElements", &[11, 13]),
    ("GatherND", &[11, 12, 13]),
    ("Scatter", &[9, 11]),
    ("ScatterElements", &[11, 13, 16, 18]),
    ("ScatterND", &[11, 13, 16, 18]),
    ("Slice", &[1, 10, 11, 13]),
    ("Split", &[1, 2, 11, 13, 18]),
    ("Expand", &[8, 13]),
    ("Tile", &[1, 6, 13]),
    ("Range", &[11]),
    ("EyeLike", &[9, 22]),
    ("Trilu", &[14]),
    ("CumSum", &[11, 14]),
    ("TopK", &[1, 10, 11, 24]),
    ("OneHot", &[9, 11]),
    ("DepthToSpace", &[1, 11, 13]),
    ("SpaceToDepth", &[1, 13]),
    ("Hardmax", &[1, 11, 13]),
    ("Elu", &[1, 6, 22]),
    ("Selu", &[1, 6, 22]),
    ("Celu", &[12]),
    ("HardSigmoid", &[1, 6, 22]),
    ("ThresholdedRelu", &[10, 22]),
    ("Swish", &[24]),
    ("LayerNormalization", &[17]),
    ("RMSNormalization", &[23]),
    ("InstanceNormalization", &[1, 6, 22]),
    ("GroupNormalization", &[18, 21]),
    ("LRN", &[1, 13]),
    ("Sum", &[1, 6, 8, 13]),
    ("Mean", &[1, 6, 8, 13]),
    ("PRelu", &[1, 6, 7, 9, 16]),
    ("IsNaN", &[9, 13, 20]),
    ("IsInf", &[10, 20]),
    ("NegativeLogLikelihoodLoss", &[12, 13, 22]),
    ("SoftmaxCrossEntropyLoss", &[12, 13]),
    ("Attention", &[23, 24, 25]),
    ("Resize", &[10, 11, 13, 18, 19]),
    ("Upsample", &[7, 9]),
    ("ConvTranspose", &[1, 11, 22]),
    ("NonZero", &[9, 13]),
    ("If", &[1, 11, 13, 16, 19, 21, 23, 24, 25]),
    ("Loop", &[1, 11, 13, 16, 19, 21, 23, 24, 25]),
    ("Scan", &[9, 11, 16, 19, 21, 23, 24, 25]),
    ("Einsum", &[12]),
    ("DFT", &[17, 20]),
    ("DynamicQuantizeLinear", &[11]),
    ("LpPool", &[1, 2, 11, 18, 22]),
    ("RotaryEmbedding", &[23]),
    ("AffineGrid", &[20]),
    ("ReverseSequence", &[10]),
    ("MaxUnpool", &[9, 11, 22]),
    ("TensorScatter", &[24]),
    ("SwiGLU", &[28]),
    ("BitwiseAnd", &[18]),
    ("BitwiseOr", &[18]),
    ("BitwiseXor", &[18]),
    ("BitwiseNot", &[18]),
    ("Col2Im", &[18]),
    ("ImageScaler", &[1]),
    ("QLinearMatMul", &[10, 21]),
    ("QLinearConv", &[10]),
    ("STFT", &[17]),
    ("GridSample", &[16, 20, 22]),
    ("CumProd", &[26]),
    ("GlobalMaxPool", &[1, 22]),
    ("LpNormalization", &[1, 22]),
    ("Shrink", &[9]),
    ("HannWindow", &[17]),
    ("HammingWindow", &[17]),
    ("BlackmanWindow", &[17]),
    ("MeanVarianceNormalization", &[9, 13]),
    ("CenterCropPad", &[18]),
    ("RNN", &[7, 14, 22]),
    ("GRU", &[7, 14, 22]),
    ("LSTM", &[7, 14, 22]),
    ("Compress", &[9, 11]),
];

/// The schema version of `op_type` that a model importing `opset` uses, if Heron supports the op.
pub fn schema_version(op_type: &str, opset: i64) -> Option<i64> {
    let (_, versions) = SUPPORTED_OPS.iter().find(|(name, _)| *name == op_type)?;
    versions.iter().copied().filter(|&v| v <= opset).max()
}

/// One node being translated: its proto, display name and schema version.
struct NodeCtx<'n> {
    node: &'n NodeProto,
    name: &'n str,
    version: i64,
}

impl NodeCtx<'_> {
    fn op(&self) -> String {
        self.node.op_type.clone()
    }

    fn bad(&self, reason: impl Into<String>) -> ImportError {
        ImportError::BadNode { node: self.name.to_string(), op: self.op(), reason: reason.into() }
    }

    fn bad_attr(&self, attr: &str, reason: impl Into<String>) -> ImportError {
        ImportError::BadAttribute {
            node: self.name.to_string(),
            op: self.op(),
            attr: attr.to_string(),
            reason: reason.into(),
        }
    }

    fn attr(&self, name: &str, kind: i32) -> Result<Option<&AttributeProto>, ImportError> {
        let Some(a) = self.node.attribute.iter().find(|a| a.name == name) else {
            return Ok(None);
        };
        if !a.ref_attr_name.is_empty() {
            return Err(self.bad_attr(name, "attribute references are only valid inside functions"));
        }
        // Old exporters leave `type` unset; trust the field then.
        if a.r#type != 0 && a.r#type != kind {
            return Err(self.bad_attr(name, format!("has attribute type {}, expected {kind}", a.r#type)));
        }
        Ok(Some(a))
    }

    fn int(&self, name: &str, default: i64) -> Result<i64, ImportError> {
        Ok(self.attr(name, at::INT)?.map_or(default, |a| a.i))
    }

    fn float(&self, name: &str, default: f32) -> Result<f32, ImportError> {
        Ok(self.attr(name, at::FLOAT)?.map_or(default, |a| a.f))
    }

    fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, ImportError> {
        Ok(self.attr(name, at::FLOATS)?.map(|a| a.floats.clone()))
    }

    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, ImportError> {
        Ok(self.attr(name, at::INTS)?.map(|a| a.ints.clone()))
    }

    fn string(&self, name: &str, default: &str) -> Result<String, ImportError> {
        match self.attr(name, at::STRING)? {
            None => Ok(default.to_string()),
            Some(a) => String::from_utf8(a.s.clone()).map_err(|_| self.bad_attr(name, "is not UTF-8")),
        }
    }

    fn flag(&self, name: &str, default: bool) -> Result<bool, ImportError> {
        match self.int(name, default as i64)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad_attr(name, format!("must be 0 or 1, got {v}"))),
        }
    }

    /// Name of input `i`, or None when absent or left empty (an omitted optional input).
    fn input(&self, i: usize) -> Option<&str> {
        self.node.input.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }

    fn num_outputs(&self) -> usize {
        self.node.output.iter().rposition(|o| !o.is_empty()).map_or(0, |p| p + 1)
    }
}

/// Normalises a possibly negative axis against `rank`.
fn norm_axis(ctx: &NodeCtx<'_>, attr: &str, axis: i64, rank: usize) -> Result<usize, ImportError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(ctx.bad_attr(attr, format!("axis {axis} out of range for rank {rank}")));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

fn to_usizes(ctx: &NodeCtx<'_>, attr: &str, v: &[i64], min: i64) -> Result<Vec<usize>, ImportError> {
    v.iter()
        .map(|&x| if x < min { Err(ctx.bad_attr(attr, format!("value {x} must be >= {min}"))) } else { Ok(x as usize) })
        .collect()
}

pub(crate) fn import_node(im: &mut Importer<'_>, node: &NodeProto, name: &str) -> Result<(), ImportError> {
    let domain_ok = node.domain.is_empty() || node.domain == "ai.onnx";
    // Ops whose output shape is decided by values: no static plan can hold them.
    let data_dependent = match node.op_type.as_str() {
        "NonMaxSuppression" => Some("the count of boxes kept"),
        "Unique" => Some("the count of distinct values"),
        _ => None,
    };
    if let (true, Some(reason)) = (domain_ok, data_dependent) {
        return Err(ImportError::DataDependent {
            node: name.to_string(),
            op: node.op_type.clone(),
            reason: format!("{reason}; it has no static-shape form"),
        });
    }
    let version = schema_version(&node.op_type, im.opset).filter(|_| domain_ok);
    let Some(version) = version else {
        return Err(ImportError::UnsupportedOp {
            op_type: node.op_type.clone(),
            domain: if node.domain.is_empty() { "ai.onnx".into() } else { node.domain.clone() },
            node: name.to_string(),
            opset: im.opset,
        });
    };
    let ctx = NodeCtx { node, name, version };
    match node.op_type.as_str() {
        "Constant" => return import_constant(im, &ctx),
        "Shape" | "Size" => return import_shape(im, &ctx),
        "Resize" | "Upsample" => return resize::import(im, &ctx),
        "RNN" | "GRU" | "LSTM" => return recurrent::import(im, &ctx),
        "If" | "Loop" | "Scan" => return control::import(im, &ctx),
        "Einsum" => return einsum::import(im, &ctx),
        "DFT" => return spectral::dft(im, &ctx),
        "AffineGrid" | "Col2Im" | "ImageScaler" => return image::import(im, &ctx),
        "STFT" => return spectral::stft(im, &ctx),
        op if tensor_ops::OPS.contains(&op) => return tensor_ops::import(im, &ctx),
        op if composite::OPS.contains(&op) => return composite::import(im, &ctx),
        _ => {}
    }
    let (op, operand_names) = translate(im, &ctx)?;
    let operands = operand_names
        .iter()
        .map(|n| match n {
            Operand::Named(n) => im.value(name, n),
            Operand::Made(id) => Ok(*id),
        })
        .collect::<Result<Vec<_>, _>>()?;
    wire(im, &ctx, op, &operands)
}

/// An operand of the translated op: an ONNX value, or a value the importer made (a
/// materialised default zero point, an intermediate of a variadic op).
enum Operand {
    Named(String),
    Made(crate::graph::ValueId),
}

fn named(ctx: &NodeCtx<'_>, i: usize) -> Result<Operand, ImportError> {
    ctx.input(i).map(|s| Operand::Named(s.to_string())).ok_or_else(|| ctx.bad(format!("input {i} is required")))
}

/// Adds the node with the ONNX output names.
fn wire(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    op: Op,
    operands: &[crate::graph::ValueId],
) -> Result<(), ImportError> {
    let n = ctx.num_outputs();
    if n == 0 {
        return Err(ctx.bad("has no outputs"));
    }
    let mut out_names = Vec::with_capacity(n);
    for (i, o) in ctx.node.output[..n].iter().enumerate() {
        out_names.push(if o.is_empty() { im.fresh_name(&format!("{}:unused{i}", ctx.name)) } else { o.clone() });
    }
    let ids = im.graph.add_node_named(ctx.name.to_string(), op, operands, out_names.clone())?;
    fold_if_constant(im, &ids);
    for (o, id) in ctx.node.output[..n].iter().zip(ids) {
        if !o.is_empty() && im.names.insert(o.clone(), id).is_some() {
            return Err(ImportError::DuplicateValue(o.clone()));
        }
    }
    Ok(())
}

fn input_type(im: &Importer<'_>, ctx: &NodeCtx<'_>, i: usize) -> Result<TensorType, ImportError> {
    let name = ctx.input(i).ok_or_else(|| ctx.bad(format!("input {i} is required")))?;
    Ok(im.graph.ty(im.value(ctx.name, name)?).clone())
}

/// The compile-time value of input `i` (None when the optional input is absent).
fn const_input(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, i: usize, what: &str) -> Result<Option<Tensor>, ImportError> {
    let Some(name) = ctx.input(i) else {
        return Ok(None);
    };
    im.value(ctx.name, name)?;
    im.constant_value(name).map(Some).ok_or_else(|| ImportError::NotConstant {
        node: ctx.name.to_string(),
        op: ctx.op(),
        input: name.to_string(),
        what: what.to_string(),
    })
}

/// The compile-time value of input `i`, or None when it is not known at compile time.
fn const_input_opt(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, i: usize) -> Result<Option<Tensor>, ImportError> {
    let name = ctx.input(i).ok_or_else(|| ctx.bad(format!("input {i} is required")))?;
    im.value(ctx.name, name)?;
    Ok(im.constant_value(name))
}

fn const_ints(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, i: usize, what: &str) -> Result<Option<Vec<i64>>, ImportError> {
    match const_input(im, ctx, i, what)? {
        None => Ok(None),
        Some(t) => t.to_i64_vec().map(Some).ok_or_else(|| ctx.bad(format!("{what} must be an integer tensor"))),
    }
}

/// A scalar zero of `dtype`, or zeros shaped like `shape`, added as a constant.
fn zeros_operand(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, what: &str, ty: TensorType) -> Operand {
    let name = im.fresh_name(&format!("{}:{what}", ctx.name));
    Operand::Made(im.graph.add_constant(name, Tensor::zeros(&ty)))
}

/// Input `i` if present, else a scalar zero of `dtype` (the ONNX default zero point).
fn zero_point(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    i: usize,
    what: &str,
    dtype: DType,
) -> Result<Operand, ImportError> {
    match ctx.input(i) {
        Some(_) => named(ctx, i),
        None => Ok(zeros_operand(im, ctx, what, TensorType::new(dtype, vec![]))),
    }
}

fn translate(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(Op, Vec<Operand>), ImportError> {
    let v = ctx.version;
    let all_inputs = || -> Result<Vec<Operand>, ImportError> {
        (0..ctx.node.input.len()).filter(|&i| ctx.input(i).is_some()).map(|i| named(ctx, i)).collect()
    };
    let unary = |u: UnaryOp| Ok((Op::Unary(u), vec![named(ctx, 0)?]));
    let binary = |b: BinaryOp| Ok((Op::Binary(b), vec![named(ctx, 0)?, named(ctx, 1)?]));
    match ctx.node.op_type.as_str() {
        "Add" => binary(BinaryOp::Add),
        "Sub" => binary(BinaryOp::Sub),
        "Mul" => binary(BinaryOp::Mul),
        "Div" => binary(BinaryOp::Div),
        "Max" => variadic(im, ctx, BinaryOp::Max),
        "Min" => variadic(im, ctx, BinaryOp::Min),
        "Relu" => unary(UnaryOp::Relu),
        "Sigmoid" => unary(UnaryOp::Sigmoid),
        "Tanh" => unary(UnaryOp::Tanh),
        "Erf" => unary(UnaryOp::Erf),
        "Exp" => unary(UnaryOp::Exp),
        "Sqrt" => unary(UnaryOp::Sqrt),
        "Abs" => unary(UnaryOp::Abs),
        "Neg" => unary(UnaryOp::Neg),
        "Floor" => unary(UnaryOp::Floor),
        "Ceil" => unary(UnaryOp::Ceil),
        "Round" => unary(UnaryOp::Round),
        "Sign" => unary(UnaryOp::Sign),
        "Reciprocal" => unary(UnaryOp::Reciprocal),
        "Log" => unary(UnaryOp::Log),
        "Sin" => unary(UnaryOp::Sin),
        "Cos" => unary(UnaryOp::Cos),
        "Tan" => unary(UnaryOp::Tan),
        "Asin" => unary(UnaryOp::Asin),
        "Acos" => unary(UnaryOp::Acos),
        "Atan" => unary(UnaryOp::Atan),
        "Sinh" => unary(UnaryOp::Sinh),
        "Cosh" => unary(UnaryOp::Cosh),
        "Asinh" => unary(UnaryOp::Asinh),
        "Acosh" => unary(UnaryOp::Acosh),
        "Atanh" => unary(UnaryOp::Atanh),
        "Softplus" => unary(UnaryOp::Softplus),
        "Softsign" => unary(UnaryOp::Softsign),
        "HardSwish" => unary(UnaryOp::HardSwish),
        "Mish" => unary(UnaryOp::Mish),
        "Equal" => Ok((Op::Compare(CompareOp::Equal), vec![named(ctx, 0)?, named(ctx, 1)?])),
        "Less" => Ok((Op::Compare(CompareOp::Less), vec![named(ctx, 0)?, named(ctx, 1)?])),
        "LessOrEqual" => Ok((Op::Compare(CompareOp::LessOrEqual), vec![named(ctx, 0)?, named(ctx, 1)?])),
        "Greater" => Ok((Op::Compare(CompareOp::Greater), vec![named(ctx, 0)?, named(ctx, 1)?])),
        "GreaterOrEqual" => Ok((Op::Compare(CompareOp::GreaterOrEqual), vec![named(ctx, 0)?, named(ctx, 1)?])),
        "And" | "Or" | "Xor" => {
            // Bools only (integers are the Bitwise ops').
            for i in 0..2 {
                let t = input_type(im, ctx, i)?;
                if t.dtype != DType::Bool {
                    return Err(ctx.bad(format!("{} takes bools, input {i} is {t}", ctx.node.op_type)));
                }
            }
            let op = match ctx.node.op_type.as_str() {
                "And" => LogicalOp::And,
                "Or" => LogicalOp::Or,
                _ => LogicalOp::Xor,
            };
            Ok((Op::Logical(op), vec![named(ctx, 0)?, named(ctx, 1)?]))
        }
        "Not" => Ok((Op::Not, vec![named(ctx, 0)?])),
        "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitwiseNot" => {
            let x = input_type(im, ctx, 0)?;
            if !x.dtype.is_int() {
                return Err(ctx.bad(format!("{} takes integers, got {}", ctx.node.op_type, x.dtype)));
            }
            let op = match ctx.node.op_type.as_str() {
                "BitwiseAnd" => LogicalOp::And,
                "BitwiseOr" => LogicalOp::Or,
                _ => LogicalOp::Xor,
            };
            if ctx.node.op_type != "BitwiseNot" {
                return Ok((Op::Logical(op), vec![named(ctx, 0)?, named(ctx, 1)?]));
            }
            // Not x = x ^ (all bits set).
            let ones = if x.dtype.is_signed_int() { -1.0 } else { 2f64.powi(x.dtype.int_bits() as i32) - 1.0 };
            let name = im.fresh_name(&format!("{}:all_ones", ctx.name));
            let ones = im.graph.add_constant(name, Tensor::scalar_from_f64(x.dtype, ones));
            Ok((Op::Logical(op), vec![named(ctx, 0)?, Operand::Made(ones)]))
        }
        "Pow" => {
            // The exponent may have another type (version 12 on): it is cast to the base's.
            let (base, exponent) = (input_type(im, ctx, 0)?, input_type(im, ctx, 1)?);
            if !base.dtype.is_float() && base.dtype != DType::Bool {
                // An integer base: the power in f64 (exact while the result is below 2^53),
                // truncated back to the base's type as ONNX Runtime does.
                let wide = |im: &mut Importer<'_>, i: usize| -> Result<crate::graph::ValueId, ImportError> {
                    let id = im.value(ctx.name, ctx.input(i).unwrap_or_default())?;
                    build::step(im, ctx, "as_f64", Op::Cast { to: DType::F64 }, &[id])
                };
                let (b, e) = (wide(im, 0)?, wide(im, 1)?);
                let power = build::step(im, ctx, "power", Op::Binary(BinaryOp::Pow), &[b, e])?;
                return Ok((Op::Cast { to: base.dtype }, vec![Operand::Made(power)]));
            }
            let e = if base.dtype == exponent.dtype {
                named(ctx, 1)?
            } else {
                let id = im.value(ctx.name, ctx.input(1).unwrap_or_default())?;
                let name = im.fresh_name(&format!("{}:exponent", ctx.name));
                Operand::Made(im.graph.add_op(name, Op::Cast { to: base.dtype }, &[id])?)
            };
            Ok((Op::Binary(BinaryOp::Pow), vec![named(ctx, 0)?, e]))
        }
        "Mod" => {
            let fmod = ctx.int("fmod", 0)? != 0;
            binary(if fmod { BinaryOp::Fmod } else { BinaryOp::Mod })
        }
        "CastLike" => {
            let like = input_type(im, ctx, 1)?;
            Ok((Op::Cast { to: like.dtype }, vec![named(ctx, 0)?]))
        }
        "ConstantOfShape" => {
            let shape = const_ints(im, ctx, 0, "shape")?.ok_or_else(|| ctx.bad("input 0 is required"))?;
            let shape = to_usizes(ctx, "shape", &shape, 0)?;
            let value = match ctx.attr("value", at::TENSOR)? {
                Some(a) => tensor_from_proto_within(
                    a.t.as_ref().ok_or_else(|| ctx.bad_attr("value", "has no tensor"))?,
                    &im.graph.limits,
                )?,
                None => Tensor::scalar_from_f64(DType::F32, 0.0),
            };
            let ty = TensorType::new(value.dtype(), shape);
            im.graph.limits.check_shape(ty.dtype, &ty.shape).map_err(|e| ctx.bad(e.to_string()))?;
            let fill = value.to_f64_vec().first().copied().unwrap_or(0.0);
            let n = ty.shape.iter().product();
            let filled = Tensor::from_vec::<f64>(&ty.shape, vec![fill; n]).map_err(|e| ctx.bad(e))?.cast(ty.dtype);
            let name = im.fresh_name(&format!("{}:value", ctx.name));
            Ok((Op::Identity, vec![Operand::Made(im.graph.add_constant(name, filled))]))
        }
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2"
        | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => import_reduce(im, ctx),
        "ArgMax" | "ArgMin" => {
            let x = input_type(im, ctx, 0)?;
            let axis = norm_axis(ctx, "axis", ctx.int("axis", 0)?, x.rank())?;
            let keepdims = ctx.int("keepdims", 1)? != 0;
            let last = v >= 12 && ctx.int("select_last_index", 0)? != 0;
            let max = ctx.node.op_type == "ArgMax";
            Ok((Op::ArgReduce { max, axis, keepdims, last }, vec![named(ctx, 0)?]))
        }
        "Where" => Ok((Op::Where, vec![named(ctx, 0)?, named(ctx, 1)?, named(ctx, 2)?])),
        "Gelu" => match ctx.string("approximate", "none")?.as_str() {
            "none" => unary(UnaryOp::Gelu),
            "tanh" => unary(UnaryOp::GeluTanh),
            other => Err(ctx.bad(format!("approximate = '{other}' (expected none or tanh)"))),
        },
        "LeakyRelu" => Ok((Op::LeakyRelu { alpha: ctx.float("alpha", 0.01)? }, vec![named(ctx, 0)?])),
        "Identity" => Ok((Op::Identity, vec![named(ctx, 0)?])),
        "Clip" => import_clip(im, ctx),
        "Conv" => {
            let x = input_type(im, ctx, 0)?;
            let w = input_type(im, ctx, 1)?;
            let attrs = conv_attrs(ctx, &x, &w)?;
            Ok((Op::Conv(attrs), all_inputs()?))
        }
        "ConvInteger" => {
            let x = input_type(im, ctx, 0)?;
            let w = input_type(im, ctx, 1)?;
            let attrs = conv_attrs(ctx, &x, &w)?;
            let x_zp = zero_point(im, ctx, 2, "x_zero_point", x.dtype)?;
            let w_zp = zero_point(im, ctx, 3, "w_zero_point", w.dtype)?;
            Ok((Op::ConvInteger(attrs), vec![named(ctx, 0)?, named(ctx, 1)?, x_zp, w_zp]))
        }
        "Gemm" => {
            let op = Op::Gemm {
                alpha: ctx.float("alpha", 1.0)?,
                beta: ctx.float("beta", 1.0)?,
                trans_a: ctx.flag("transA", false)?,
                trans_b: ctx.flag("transB", false)?,
            };
            Ok((op, all_inputs()?))
        }
        "MatMul" => Ok((Op::MatMul, vec![named(ctx, 0)?, named(ctx, 1)?])),
        "MatMulInteger" => {
            let a = input_type(im, ctx, 0)?;
            let b = input_type(im, ctx, 1)?;
            let a_zp = zero_point(im, ctx, 2, "a_zero_point", a.dtype)?;
            let b_zp = zero_point(im, ctx, 3, "b_zero_point", b.dtype)?;
            Ok((Op::MatMulInteger, vec![named(ctx, 0)?, named(ctx, 1)?, a_zp, b_zp]))
        }
        "Softmax" | "LogSoftmax" => {
            let x = input_type(im, ctx, 0)?;
            let default = if v < 13 { 1 } else { -1 };
            let axis = norm_axis(ctx, "axis", ctx.int("axis", default)?, x.rank())?;
            let log = ctx.node.op_type == "LogSoftmax";
            Ok((Op::Softmax { axis, coerce_2d: v < 13, log }, vec![named(ctx, 0)?]))
        }
        "MaxPool" => {
            let x = input_type(im, ctx, 0)?;
            let pool = pool_attrs(ctx, &x)?;
            let order = ctx.int("storage_order", 0)?;
            if !(0..=1).contains(&order) {
                return Err(ctx.bad_attr("storage_order", format!("must be 0 or 1, got {order}")));
            }
            Ok((Op::MaxPool { pool, storage_order_col_major: order == 1 }, vec![named(ctx, 0)?]))
        }
        "AveragePool" => {
            let x = input_type(im, ctx, 0)?;
            let pool = pool_attrs(ctx, &x)?;
            let count_include_pad = ctx.flag("count_include_pad", false)?;
            Ok((Op::AveragePool { pool, count_include_pad }, vec![named(ctx, 0)?]))
        }
        "GlobalAveragePool" => Ok((Op::GlobalAveragePool, vec![named(ctx, 0)?])),
        "BatchNormalization" => {
            let training = if v >= 14 { ctx.flag("training_mode", false)? } else { ctx.num_outputs() > 1 };
            if training {
                return Err(ImportError::TrainingMode { node: ctx.name.to_string(), op: ctx.op() });
            }
            let epsilon = ctx.float("epsilon", 1e-5)?;
            // Before version 9, `spatial = 0` keeps statistics per element of x.shape[1..]:
            // the formula with the parameters broadcast over the batch only.
            if v < 9 && ctx.int("spatial", 1)? == 0 {
                let x = input_type(im, ctx, 0)?;
                if x.rank() < 2 {
                    return Err(ctx.bad(format!("input {x} must have rank >= 2")));
                }
                let ids = (0..5)
                    .map(|i| im.value(ctx.name, ctx.input(i).unwrap_or_default()))
                    .collect::<Result<Vec<_>, _>>()?;
                for &p in &ids[1..] {
                    let p = im.graph.ty(p);
                    if p.shape != x.shape[1..] && p.num_elements() != x.shape[1..].iter().product::<usize>() {
                        return Err(
                            ctx.bad(format!("spatial = 0 needs parameters of shape {:?}, got {p}", &x.shape[1..]))
                        );
                    }
                }
                let per_element = |im: &mut Importer<'_>, i: usize, what: &str| {
                    build::step(im, ctx, what, Op::Reshape { shape: x.shape[1..].to_vec() }, &[ids[i]])
                };
                let (scale, bias, mean, var) = (
                    per_element(im, 1, "scale")?,
                    per_element(im, 2, "bias")?,
                    per_element(im, 3, "mean")?,
                    per_element(im, 4, "var")?,
                );
                let eps = build::scalar(im, ctx, "epsilon", x.dtype, f64::from(epsilon));
                let var = build::step(im, ctx, "var_eps", Op::Binary(BinaryOp::Add), &[var, eps])?;
                let std = build::step(im, ctx, "std", Op::Unary(UnaryOp::Sqrt), &[var])?;
                let centered = build::step(im, ctx, "centered", Op::Binary(BinaryOp::Sub), &[ids[0], mean])?;
                let normed = build::step(im, ctx, "normalized", Op::Binary(BinaryOp::Div), &[centered, std])?;
                let scaled = build::step(im, ctx, "scaled", Op::Binary(BinaryOp::Mul), &[normed, scale])?;
                return Ok((Op::Binary(BinaryOp::Add), vec![Operand::Made(scaled), Operand::Made(bias)]));
            }
            Ok((Op::BatchNormalization { epsilon }, (0..5).map(|i| named(ctx, i)).collect::<Result<_, _>>()?))
        }
        "Flatten" => {
            let x = input_type(im, ctx, 0)?;
            let axis = ctx.int("axis", 1)?;
            // Flatten's axis may equal the rank.
            let axis = if axis == x.rank() as i64 { x.rank() } else { norm_axis(ctx, "axis", axis, x.rank())? };
            Ok((Op::Flatten { axis }, vec![named(ctx, 0)?]))
        }
        "Reshape" => {
            let x = input_type(im, ctx, 0)?;
            let target =
                const_ints(im, ctx, 1, "target shape")?.ok_or_else(|| ctx.bad("input 1 (shape) is required"))?;
            let allow_zero = v >= 14 && ctx.flag("allowzero", false)?;
            let shape = resolve_reshape(ctx, &x.shape, &target, allow_zero)?;
            Ok((Op::Reshape { shape }, vec![named(ctx, 0)?]))
        }
        "Transpose" => {
            let x = input_type(im, ctx, 0)?;
            let perm = match ctx.ints("perm")? {
                Some(p) => to_usizes(ctx, "perm", &p, 0)?,
                None => (0..x.rank()).rev().collect(),
            };
            Ok((Op::Transpose { perm }, vec![named(ctx, 0)?]))
        }
        "Concat" => {
            let x = input_type(im, ctx, 0)?;
            let axis = ctx.attr("axis", at::INT)?.ok_or_else(|| ctx.bad_attr("axis", "is required"))?.i;
            let axis = norm_axis(ctx, "axis", axis, x.rank())?;
            Ok((Op::Concat { axis }, all_inputs()?))
        }
        "Pad" => import_pad(im, ctx),
        "Squeeze" => {
            let x = input_type(im, ctx, 0)?;
            let axes = if v < 13 { ctx.ints("axes")? } else { const_ints(im, ctx, 1, "axes")? };
            let mut axes = match axes {
                Some(a) => a.iter().map(|&a| norm_axis(ctx, "axes", a, x.rank())).collect::<Result<Vec<_>, _>>()?,
                None => (0..x.rank()).filter(|&d| x.shape[d] == 1).collect(),
            };
            axes.sort_unstable();
            axes.dedup();
            Ok((Op::Squeeze { axes }, vec![named(ctx, 0)?]))
        }
        "Unsqueeze" => {
            let x = input_type(im, ctx, 0)?;
            let axes = if v < 13 { ctx.ints("axes")? } else { const_ints(im, ctx, 1, "axes")? };
            let axes = axes.ok_or_else(|| ctx.bad("axes are required"))?;
            let out_rank = x.rank() + axes.len();
            let mut norm = axes.iter().map(|&a| norm_axis(ctx, "axes", a, out_rank)).collect::<Result<Vec<_>, _>>()?;
            norm.sort_unstable();
            if norm.windows(2).any(|w| w[0] == w[1]) {
                return Err(ctx.bad_attr("axes", format!("{axes:?} has duplicates")));
            }
            Ok((Op::Unsqueeze { axes: norm }, vec![named(ctx, 0)?]))
        }
        "Dropout" => {
            if v >= 12 {
                let training = const_input(im, ctx, 2, "training_mode")?;
                if training.is_some_and(|t| t.to_f64_vec().first().is_some_and(|&b| b != 0.0)) {
                    return Err(ImportError::TrainingMode { node: ctx.name.to_string(), op: ctx.op() });
                }
            } else if v < 7 && !ctx.flag("is_test", false)? {
                return Err(ImportError::TrainingMode { node: ctx.name.to_string(), op: ctx.op() });
            }
            Ok((Op::Dropout, vec![named(ctx, 0)?]))
        }
        "Cast" => {
            let to = ctx.attr("to", at::INT)?.ok_or_else(|| ctx.bad_attr("to", "is required"))?.i;
            let to = DType::from_onnx_code(to as i32).map_err(|dtype| ImportError::UnsupportedDtype {
                context: format!("node '{}' (Cast) target", ctx.name),
                dtype,
            })?;
            Ok((Op::Cast { to }, vec![named(ctx, 0)?]))
        }
        "QuantizeLinear" | "DequantizeLinear" => import_quant(im, ctx),
        "BitShift" => {
            let dir = ctx.string("direction", "")?;
            let left = match dir.as_str() {
                "LEFT" => true,
                "RIGHT" => false,
                other => {
                    return Err(ctx.bad_attr("direction", format!("must be LEFT or RIGHT, got '{other}'")));
                }
            };
            Ok((Op::BitShift { left }, vec![named(ctx, 0)?, named(ctx, 1)?]))
        }
        other => Err(ctx.bad(format!("no translation for {other}"))),
    }
}

/// Max/Min take any number of inputs: one is a copy, more fold left into binary nodes.
fn variadic(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, kind: BinaryOp) -> Result<(Op, Vec<Operand>), ImportError> {
    let names: Vec<&str> = (0..ctx.node.input.len()).filter_map(|i| ctx.input(i)).collect();
    match names.len() {
        0 => Err(ctx.bad("needs at least one input")),
        1 => Ok((Op::Identity, vec![Operand::Named(names[0].to_string())])),
        n => {
            let mut acc = im.value(ctx.name, names[0])?;
            for (i, name) in names[1..n - 1].iter().enumerate() {
                let rhs = im.value(ctx.name, name)?;
                let tmp = im.fresh_name(&format!("{}:partial{i}", ctx.name));
                acc = im.graph.add_op(tmp, Op::Binary(kind), &[acc, rhs])?;
            }
            Ok((Op::Binary(kind), vec![Operand::Made(acc), Operand::Named(names[n - 1].to_string())]))
        }
    }
}

fn import_constant(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let out = ctx.node.output.first().filter(|o| !o.is_empty()).ok_or_else(|| ctx.bad("has no output"))?;
    let set: Vec<&AttributeProto> = ctx.node.attribute.iter().collect();
    if set.len() != 1 {
        return Err(ctx.bad(format!("needs exactly one value attribute, has {}", set.len())));
    }
    let a = set[0];
    let tensor = match a.name.as_str() {
        "value" => tensor_from_proto_within(
            a.t.as_ref().ok_or_else(|| ctx.bad_attr("value", "has no tensor"))?,
            &im.graph.limits,
        )?,
        "value_float" => Tensor::scalar_from_f64(DType::F32, a.f as f64),
        "value_int" => Tensor::from_vec::<i64>(&[], vec![a.i]).map_err(|e| ctx.bad(e))?,
        "value_floats" => Tensor::from_vec::<f32>(&[a.floats.len()], a.floats.clone()).map_err(|e| ctx.bad(e))?,
        "value_ints" => Tensor::from_vec::<i64>(&[a.ints.len()], a.ints.clone()).map_err(|e| ctx.bad(e))?,
        "value_string" | "value_strings" => {
            return Err(ImportError::UnsupportedDtype {
                context: format!("node '{}' (Constant)", ctx.name),
                dtype: "STRING".into(),
            });
        }
        "sparse_value" => {
            return Err(ImportError::UnsupportedDtype {
                context: format!("node '{}' (Constant)", ctx.name),
                dtype: "sparse tensor".into(),
            });
        }
        other => return Err(ctx.bad_attr(other, "is not a Constant value attribute")),
    };
    let id = im.graph.add_constant(out.clone(), tensor);
    if im.names.insert(out.clone(), id).is_some() {
        return Err(ImportError::DuplicateValue(out.clone()));
    }
    Ok(())
}

/// Shape and Size of a tensor: constants, since every shape is static once the inputs' shapes
/// are known (Shape's `start`/`end` from version 15, clamped like a slice).
fn import_shape(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let out = ctx.node.output.first().filter(|o| !o.is_empty()).ok_or_else(|| ctx.bad("has no output"))?;
    let dims: Vec<i64> = x.shape.iter().map(|&d| d as i64).collect();
    let tensor = if ctx.node.op_type == "Size" {
        Tensor::from_vec::<i64>(&[], vec![dims.iter().product()])
    } else {
        let r = dims.len() as i64;
        let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
        let start = clamp(if ctx.version >= 15 { ctx.int("start", 0)? } else { 0 });
        let end = clamp(if ctx.version >= 15 { ctx.int("end", r)? } else { r }).max(start);
        let part = dims[start as usize..end as usize].to_vec();
        Tensor::from_vec::<i64>(&[part.len()], part)
    }
    .map_err(|e| ctx.bad(e))?;
    let id = im.graph.add_constant(out.clone(), tensor);
    if im.names.insert(out.clone(), id).is_some() {
        return Err(ImportError::DuplicateValue(out.clone()));
    }
    Ok(())
}

/// Evaluates the node just added when every input is a constant and its outputs are small
/// (shape arithmetic: Gather, Concat, Unsqueeze, Cast, ... on Shape's output): its outputs
/// become constants, so Reshape targets and other shape inputs computed in the graph are known
/// at import. Anything that fails to evaluate stays a node (and fails at run time as before).
fn fold_if_constant(im: &mut Importer<'_>, outputs: &[crate::graph::ValueId]) {
    /// Outputs up to this many elements are folded.
    const MAX_FOLDED_ELEMENTS: usize = 1 << 16;
    let Some(node) = im.graph.nodes.last() else { return };
    // Quantization pairs stay: the integer form matches them (a dequantized weight folded to
    // float would lose its int8 values).
    if matches!(node.op, Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. }) {
        return;
    }
    let inputs: Option<Vec<&Tensor>> = node.inputs.iter().map(|&v| im.graph.constant(v)).collect();
    let Some(inputs) = inputs else { return };
    let small = outputs.iter().all(|&o| im.graph.ty(o).shape.iter().product::<usize>() <= MAX_FOLDED_ELEMENTS);
    if !small {
        return;
    }
    let Ok(results) = crate::interp::eval_op(&node.op, &inputs) else { return };
    if results.len() != outputs.len() || results.iter().zip(outputs).any(|(t, &o)| t.tensor_type() != *im.graph.ty(o)) {
        return;
    }
    im.graph.nodes.pop();
    for (t, &o) in results.into_iter().zip(outputs) {
        im.graph.values[o.0].constant = Some(std::sync::Arc::new(t));
    }
}

fn import_clip(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(Op, Vec<Operand>), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let bound = |t: Option<Tensor>| -> Result<Option<Tensor>, ImportError> {
        match t {
            None => Ok(None),
            Some(t) if t.len() == 1 && t.dtype() == x.dtype => Ok(Some(t.reshape(&[]).map_err(|e| ctx.bad(e))?)),
            Some(t) => Err(ctx.bad(format!("bounds must be {} scalars, got {}", x.dtype, t.tensor_type()))),
        }
    };
    let (min, max) = if ctx.version < 11 {
        let lo = ctx.attr("min", at::FLOAT)?.map(|a| Tensor::scalar_from_f64(x.dtype, a.f as f64));
        let hi = ctx.attr("max", at::FLOAT)?.map(|a| Tensor::scalar_from_f64(x.dtype, a.f as f64));
        (lo, hi)
    } else {
        (bound(const_input(im, ctx, 1, "min")?)?, bound(const_input(im, ctx, 2, "max")?)?)
    };
    Ok((Op::Clip { min, max }, vec![named(ctx, 0)?]))
}

fn import_pad(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(Op, Vec<Operand>), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let r = x.rank();
    let mode = match ctx.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "edge" => PadMode::Edge,
        "reflect" => PadMode::Reflect,
        "wrap" if ctx.version >= 19 => PadMode::Wrap,
        other => {
            return Err(ctx.bad_attr("mode", format!("unsupported mode '{other}' at Pad version {}", ctx.version)));
        }
    };
    let (raw, value, axes) = if ctx.version < 11 {
        let pads = ctx.ints("pads")?.ok_or_else(|| ctx.bad_attr("pads", "is required"))?;
        let value = Tensor::scalar_from_f64(x.dtype, ctx.float("value", 0.0)? as f64);
        (pads, value, None)
    } else {
        let pads = const_ints(im, ctx, 1, "pads")?.ok_or_else(|| ctx.bad("input 1 (pads) is required"))?;
        let value = match const_input(im, ctx, 2, "constant_value")? {
            Some(v) if v.len() == 1 && v.dtype() == x.dtype => v.reshape(&[]).map_err(|e| ctx.bad(e))?,
            Some(v) => {
                return Err(ctx.bad(format!("constant_value must be a {} scalar, got {}", x.dtype, v.tensor_type())));
            }
            None => Tensor::zeros(&TensorType::new(x.dtype, vec![])),
        };
        let axes = if ctx.version >= 18 { const_ints(im, ctx, 3, "axes")? } else { None };
        (pads, value, axes)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&a| norm_axis(ctx, "axes", a, r)).collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    if raw.len() != 2 * axes.len() {
        return Err(ctx.bad(format!("{} pads for {} axes; need {}", raw.len(), axes.len(), 2 * axes.len())));
    }
    let mut pads = vec![0i64; 2 * r];
    for (i, &a) in axes.iter().enumerate() {
        pads[a] = raw[i];
        pads[a + r] = raw[i + axes.len()];
    }
    Ok((Op::Pad { pads, mode, value }, vec![named(ctx, 0)?]))
}

fn import_quant(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(Op, Vec<Operand>), ImportError> {
    let quantize = ctx.node.op_type == "QuantizeLinear";
    let x = input_type(im, ctx, 0)?;
    let scale = input_type(im, ctx, 1)?;
    let axis = if ctx.version >= 13 { ctx.int("axis", 1)? } else { 1 };
    let block_size = if ctx.version >= 21 { ctx.int("block_size", 0)? } else { 0 };
    let per_tensor = scale.num_elements() == 1 && scale.rank() <= 1;
    let axis = if per_tensor {
        QuantAxis::PerTensor
    } else {
        let axis = norm_axis(ctx, "axis", axis, x.rank())?;
        match block_size {
            0 => QuantAxis::PerAxis { axis },
            b if b > 0 => QuantAxis::Blocked { axis, block_size: b as usize },
            b => return Err(ctx.bad_attr("block_size", format!("must be >= 0, got {b}"))),
        }
    };
    let zp = match ctx.input(2) {
        Some(_) => named(ctx, 2)?,
        None => {
            let dtype = if quantize {
                match ctx.int("output_dtype", 0)? {
                    0 => DType::U8,
                    code => DType::from_onnx_code(code as i32).map_err(|dtype| ImportError::UnsupportedDtype {
                        context: format!("node '{}' output_dtype", ctx.name),
                        dtype,
                    })?,
                }
            } else {
                x.dtype
            };
            zeros_operand(im, ctx, "zero_point", TensorType::new(dtype, scale.shape.clone()))
        }
    };
    let op = if quantize { Op::QuantizeLinear { axis } } else { Op::DequantizeLinear { axis } };
    Ok((op, vec![named(ctx, 0)?, named(ctx, 1)?, zp]))
}

fn resolve_reshape(
    ctx: &NodeCtx<'_>,
    input: &[usize],
    target: &[i64],
    allow_zero: bool,
) -> Result<Vec<usize>, ImportError> {
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(1);
            }
            -1 => return Err(ctx.bad(format!("shape {target:?} has more than one -1"))),
            0 if !allow_zero => {
                let d = *input
                    .get(i)
                    .ok_or_else(|| ctx.bad(format!("shape {target:?}: 0 at {i} has no input dimension to copy")))?;
                out.push(d);
            }
            d if d < 0 => {
                return Err(ctx.bad(format!("shape {target:?} has invalid dimension {d}")));
            }
            d => out.push(d as usize),
        }
    }
    if let Some(i) = infer_at {
        let cannot = || ctx.bad(format!("cannot reshape {input:?} to {target:?}"));
        let total = checked_elements(input).ok_or_else(cannot)?;
        let known = checked_elements(&out).ok_or_else(cannot)?;
        if known == 0 || !total.is_multiple_of(known) {
            return Err(cannot());
        }
        out[i] = total / known;
    }
    Ok(out)
}

/// Explicit begin/end pads for one spatial axis under `auto_pad`, or `None` when they overflow.
fn auto_pads(mode: &str, input: usize, kernel: usize, stride: usize, dilation: usize) -> Option<(usize, usize)> {
    let out = input.div_ceil(stride.max(1));
    let span = window_span(kernel.max(1), dilation)?;
    let total = (out.max(1) - 1).checked_mul(stride)?.checked_add(span)?.saturating_sub(input);
    let small = total / 2;
    Some(if mode == "SAME_LOWER" { (total - small, small) } else { (small, total - small) })
}

fn window(ctx: &NodeCtx<'_>, spatial: &[usize], kernel: Vec<usize>) -> Result<Window, ImportError> {
    let k = spatial.len();
    if kernel.len() != k {
        return Err(ctx.bad_attr("kernel_shape", format!("has {} entries for {k} spatial axes", kernel.len())));
    }
    let ones = vec![1i64; k];
    let strides = to_usizes(ctx, "strides", &ctx.ints("strides")?.unwrap_or(ones.clone()), 1)?;
    let dilations = to_usizes(ctx, "dilations", &ctx.ints("dilations")?.unwrap_or(ones), 1)?;
    if strides.len() != k || dilations.len() != k {
        return Err(ctx.bad(format!("strides/dilations must have {k} entries")));
    }
    let auto_pad = ctx.string("auto_pad", "NOTSET")?;
    let (pads_begin, pads_end) = match auto_pad.as_str() {
        "NOTSET" => {
            let pads = to_usizes(ctx, "pads", &ctx.ints("pads")?.unwrap_or(vec![0; 2 * k]), 0)?;
            if pads.len() != 2 * k {
                return Err(ctx.bad_attr("pads", format!("has {} entries, need {}", pads.len(), 2 * k)));
            }
            (pads[..k].to_vec(), pads[k..].to_vec())
        }
        "VALID" => (vec![0; k], vec![0; k]),
        "SAME_UPPER" | "SAME_LOWER" => (0..k)
            .map(|d| {
                auto_pads(&auto_pad, spatial[d], kernel[d], strides[d], dilations[d])
                    .ok_or_else(|| ctx.bad(format!("{auto_pad} padding of spatial axis {d} overflows")))
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip(),
        other => return Err(ctx.bad_attr("auto_pad", format!("unknown value '{other}'"))),
    };
    Ok(Window { kernel, strides, dilations, pads_begin, pads_end })
}

fn conv_attrs(ctx: &NodeCtx<'_>, x: &TensorType, w: &TensorType) -> Result<ConvAttrs, ImportError> {
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(ctx.bad(format!("input {:?} and weight {:?} must have equal rank >= 3", x.shape, w.shape)));
    }
    let kernel = match ctx.ints("kernel_shape")? {
        Some(k) => to_usizes(ctx, "kernel_shape", &k, 1)?,
        None => w.shape[2..].to_vec(),
    };
    let win = window(ctx, &x.shape[2..], kernel)?;
    let group = ctx.int("group", 1)?;
    if group < 1 {
        return Err(ctx.bad_attr("group", format!("must be >= 1, got {group}")));
    }
    Ok(ConvAttrs { window: win, group: group as usize })
}

fn pool_attrs(ctx: &NodeCtx<'_>, x: &TensorType) -> Result<PoolAttrs, ImportError> {
    if x.rank() < 3 {
        return Err(ctx.bad(format!("input {:?} must have rank >= 3", x.shape)));
    }
    let kernel = ctx.ints("kernel_shape")?.ok_or_else(|| ctx.bad_attr("kernel_shape", "is required"))?;
    let kernel = to_usizes(ctx, "kernel_shape", &kernel, 1)?;
    let win = window(ctx, &x.shape[2..], kernel)?;
    let ceil_mode = ctx.version >= 10 && ctx.flag("ceil_mode", false)?;
    Ok(PoolAttrs { window: win, ceil_mode })
}

/// ReduceX: axes from the attribute (ReduceSum before 13, the others before 18) or the optional
/// second input; no axes reduce everything, or nothing with `noop_with_empty_axes`.
fn import_reduce(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(Op, Vec<Operand>), ImportError> {
    let x = input_type(im, ctx, 0)?;
    let op = match ctx.node.op_type.as_str() {
        "ReduceSum" => ReduceOp::Sum,
        "ReduceMean" => ReduceOp::Mean,
        "ReduceMax" => ReduceOp::Max,
        "ReduceMin" => ReduceOp::Min,
        "ReduceProd" => ReduceOp::Prod,
        "ReduceL1" => ReduceOp::L1,
        "ReduceL2" => ReduceOp::L2,
        "ReduceSumSquare" => ReduceOp::SumSquare,
        "ReduceLogSum" => ReduceOp::LogSum,
        _ => ReduceOp::LogSumExp,
    };
    let axes_from_input = ctx.version >= if op == ReduceOp::Sum { 13 } else { 18 };
    let axes = if axes_from_input { const_ints(im, ctx, 1, "axes")? } else { ctx.ints("axes")? };
    let noop = axes_from_input && ctx.int("noop_with_empty_axes", 0)? != 0;
    let mut axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a.iter().map(|&a| norm_axis(ctx, "axes", a, x.rank())).collect::<Result<_, _>>()?,
        _ if noop => Vec::new(),
        _ => (0..x.rank()).collect(),
    };
    axes.sort_unstable();
    if axes.windows(2).any(|w| w[0] == w[1]) {
        return Err(ctx.bad_attr("axes", "repeats an axis"));
    }
    let keepdims = ctx.int("keepdims", 1)? != 0;
    if x.dtype == DType::Bool && matches!(op, ReduceOp::Max | ReduceOp::Min) {
        // Any / all, as the max / min of bytes: an empty max is 0 (false), an empty min 255
        // (true).
        let id = im.value(ctx.name, ctx.input(0).unwrap_or_default())?;
        let bytes = build::step(im, ctx, "as_u8", Op::Cast { to: DType::U8 }, &[id])?;
        let reduced = build::step(im, ctx, "reduced", Op::Reduce { op, axes, keepdims }, &[bytes])?;
        return Ok((Op::Cast { to: DType::Bool }, vec![Operand::Made(reduced)]));
    }
    Ok((Op::Reduce { op, axes, keepdims }, vec![named(ctx, 0)?]))
}
