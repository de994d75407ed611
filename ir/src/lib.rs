//! heron-ir: Heron's graph IR, ONNX import, shape inference, the reference interpreter and graph
//! passes.
//!
//! ```
//! use heron_ir::{DType, Graph, Op, Tensor, TensorType, UnaryOp, interp};
//!
//! let mut g = Graph::new();
//! let x = g.add_input("x", TensorType::new(DType::F32, vec![3]));
//! let y = g.add_op("relu", Op::Unary(UnaryOp::Relu), &[x]).unwrap();
//! g.set_outputs(vec![y]);
//! heron_ir::verify(&g).unwrap();
//!
//! let input = Tensor::from_vec::<f32>(&[3], vec![-1.0, 0.5, 2.0]).unwrap();
//! let out = interp::run(&g, &[input]).unwrap();
//! assert_eq!(out[0].to_f64_vec(), vec![0.0, 0.5, 2.0]);
//! ```

#[macro_use]
mod macros;

pub mod dtype;
pub mod graph;
pub mod infer;
pub mod interp;
pub mod limits;
pub mod loop_ir;
pub mod lower;
pub mod npy;
pub mod onnx;
pub mod op;
pub mod passes;
pub mod quantize;
pub mod stats;
pub mod tensor;
pub mod testing;
pub mod verify;

pub use dtype::{DType, TensorType};
pub use graph::{Graph, GraphError, NameTable, Node, Value, ValueId};
pub use half::f16;
pub use limits::{Limits, SizeError};
pub use op::{BinaryOp, CompareOp, ConvAttrs, LogicalOp, Op, PadMode, PoolAttrs, QuantAxis, ReduceOp, UnaryOp, Window};
pub use tensor::{Element, Tensor};
pub use verify::{VerifyErrors, verify};
