//! A small builder for ONNX models in tests: graphs with declared inputs and outputs,
//! initializers, nodes with attributes, and full control over every field, so tests can write
//! well-formed models and hostile ones alike.

use prost::Message;

use crate::DType;
use crate::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto, attribute_type, tensor_shape_proto, type_proto,
};
use crate::onnx::tensor_to_proto;
use crate::tensor::Tensor;

/// An ONNX model under construction. Fields are public so a test can break any of them.
#[derive(Clone, Debug)]
pub struct OnnxModel {
    pub model: ModelProto,
}

/// A declared tensor type (`dims`: `Some(d)` a fixed size, `None` a symbolic one).
pub fn tensor_type(dtype: DType, dims: &[i64]) -> TypeProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension { value: Some(tensor_shape_proto::dimension::Value::DimValue(d)) })
        .collect();
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: dtype.onnx_code(),
            shape: Some(TensorShapeProto { dim }),
        })),
    }
}

pub fn value_info(name: &str, dtype: DType, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto { name: name.into(), r#type: Some(tensor_type(dtype, dims)) }
}

pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::INT, i: v, ..Default::default() }
}

pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::INTS, ints: v.to_vec(), ..Default::default() }
}

pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::FLOAT, f: v, ..Default::default() }
}

pub fn attr_string(name: &str, v: &str) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::STRING, s: v.as_bytes().to_vec(), ..Default::default() }
}

pub fn attr_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::TENSOR, t: Some(t), ..Default::default() }
}

impl OnnxModel {
    /// An empty graph named `g` importing the default domain at `opset`.
    pub fn new(opset: i64) -> OnnxModel {
        OnnxModel {
            model: ModelProto {
                ir_version: 8,
                opset_import: vec![OperatorSetIdProto { domain: String::new(), version: opset }],
                graph: Some(GraphProto { name: "g".into(), ..Default::default() }),
                ..Default::default()
            },
        }
    }

    pub fn graph(&mut self) -> &mut GraphProto {
        self.model.graph.get_or_insert_with(Default::default)
    }

    pub fn input(&mut self, name: &str, dtype: DType, dims: &[i64]) -> &mut Self {
        self.graph().input.push(value_info(name, dtype, dims));
        self
    }

    /// A graph output without a declared type (Heron infers it).
    pub fn output(&mut self, name: &str) -> &mut Self {
        self.graph().output.push(ValueInfoProto { name: name.into(), r#type: None });
        self
    }

    pub fn initializer(&mut self, name: &str, t: &Tensor) -> &mut Self {
        self.graph().initializer.push(tensor_to_proto(name, t));
        self
    }

    /// An initializer given as a raw proto (any dims, any data, however inconsistent).
    pub fn raw_initializer(&mut self, t: TensorProto) -> &mut Self {
        self.graph().initializer.push(t);
        self
    }

    /// An i64 initializer of shape `[values.len()]`.
    pub fn ints(&mut self, name: &str, values: &[i64]) -> &mut Self {
        let t = Tensor::from_vec::<i64>(&[values.len()], values.to_vec()).expect("1-d shape");
        self.initializer(name, &t)
    }

    pub fn node(&mut self, op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> &mut Self {
        let n = self.graph().node.len();
        self.graph().node.push(NodeProto {
            op_type: op.into(),
            name: format!("{}_{n}", op.to_lowercase()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.model.encode_to_vec()
    }
}

/// A small float CNN (opset 13) for quantization tests: x[1,3,8,8] -> conv1(3->8, 3x3) -> relu -> conv2(8->8, 3x3) -> add(relu1) -> relu -> maxpool
/// -> global average pool -> flatten -> dense(8->4).
pub fn small_cnn() -> Vec<u8> {
    let mut m = OnnxModel::new(13);
    let conv = || vec![attr_ints("kernel_shape", &[3, 3]), attr_ints("pads", &[1, 1, 1, 1])];
    m.input("x", DType::F32, &[1, 3, 8, 8])
        .initializer("w1", &scaled(1, &[8, 3, 3, 3], 0.5))
        .initializer("b1", &scaled(2, &[8], 0.1))
        .initializer("w2", &scaled(3, &[8, 8, 3, 3], 0.3))
        .initializer("b2", &scaled(4, &[8], 0.1))
        .initializer("wd", &scaled(5, &[4, 8], 0.7))
        .initializer("bd", &scaled(6, &[4], 0.2))
        .node("Conv", &["x", "w1", "b1"], &["c1"], conv())
        .node("Relu", &["c1"], &["r1"], vec![])
        .node("Conv", &["r1", "w2", "b2"], &["c2"], conv())
        .node("Add", &["c2", "r1"], &["s"], vec![])
        .node("Relu", &["s"], &["r2"], vec![])
        .node("MaxPool", &["r2"], &["p"], vec![attr_ints("kernel_shape", &[2, 2]), attr_ints("strides", &[2, 2])])
        .node("GlobalAveragePool", &["p"], &["g"], vec![])
        .node("Flatten", &["g"], &["f"], vec![attr_int("axis", 1)])
        .node("Gemm", &["f", "wd", "bd"], &["y"], vec![attr_int("transB", 1)])
        .output("y");
    m.to_bytes()
}

/// `data(seed, n)` times `scale`, shaped.
fn scaled(seed: u64, shape: &[usize], scale: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, super::data(seed, n).into_iter().map(|v| v * scale).collect()).expect("shape")
}
