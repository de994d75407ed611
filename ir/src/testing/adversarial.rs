//! A corpus of hostile ONNX models: sizes that overflow, deep chains, huge fan-in and fan-out,
//! huge pads/strides/dilations/kernels, bad axes and permutations, short or external data,
//! cyclic and duplicate-name graphs, opset and domain nonsense, zero-size tensors and integer
//! division traps. Every case must give a clear error or a correct result on every engine and
//! subcommand — never a panic, signal, abort or hang (`runtime/tests/adversarial.rs`).

use crate::onnx::proto::{OperatorSetIdProto, StringStringEntryProto, TensorProto};
use crate::tensor::Tensor;
use crate::testing::onnx::{OnnxModel, attr_float, attr_int, attr_ints, attr_string, attr_tensor};
use crate::{DType, f16};

/// One hostile model with the inputs to run it on (in model input order).
pub struct AdversarialCase {
    pub name: String,
    pub model: Vec<u8>,
    pub inputs: Vec<Tensor>,
}

/// How large the scaling cases are.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    /// Nodes in the longest chains.
    pub chain: usize,
    /// Inputs of the widest Concat / Max nodes.
    pub fan_in: usize,
    /// Graph outputs of the widest graph.
    pub outputs: usize,
}

impl Scale {
    /// The sizes the issue names: 100,000-node chains, 50,000-input nodes, 20,000 outputs.
    pub const FULL: Scale = Scale { chain: 100_000, fan_in: 50_000, outputs: 20_000 };
    /// What the test suite runs: the issue's fan-in and fan-out, chains of 20,000.
    pub const CI: Scale = Scale { chain: 20_000, ..Scale::FULL };
}

const BIG: i64 = 1 << 62;

fn f32s(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec::<f32>(shape, super::data(seed, n)).expect("shape matches")
}

fn i32s(shape: &[usize], values: Vec<i32>) -> Tensor {
    Tensor::from_vec::<i32>(shape, values).expect("shape matches")
}

/// A model with float input `x` of `dims`, built by `f`, and output `y`.
fn unary_model(opset: i64, dims: &[i64], f: impl FnOnce(&mut OnnxModel)) -> OnnxModel {
    let mut m = OnnxModel::new(opset);
    m.input("x", DType::F32, dims);
    f(&mut m);
    m.output("y");
    m
}

fn input_for(dims: &[i64], seed: u64) -> Vec<Tensor> {
    let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    vec![f32s(&shape, seed)]
}

/// Raw tensor proto with arbitrary dims and data.
fn raw_tensor(name: &str, dtype: i32, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto { name: name.into(), data_type: dtype, dims: dims.to_vec(), raw_data: raw, ..Default::default() }
}

struct Corpus {
    cases: Vec<AdversarialCase>,
}

impl Corpus {
    fn add(&mut self, name: impl Into<String>, m: &OnnxModel, inputs: Vec<Tensor>) {
        self.cases.push(AdversarialCase { name: name.into(), model: m.to_bytes(), inputs });
    }

    /// `x: f32[dims]` -> one node `op` with `attrs` (and extra inputs) -> `y`.
    fn single(&mut self, name: &str, op: &str, dims: &[i64], extra: &[(&str, Tensor)], attrs: Vec<AttrFn>) {
        let m = unary_model(13, dims, |m| {
            let mut ins = vec!["x"];
            for (n, t) in extra {
                m.initializer(n, t);
                ins.push(n);
            }
            m.node(op, &ins, &["y"], attrs.into_iter().map(|f| f()).collect());
        });
        self.add(name, &m, input_for(dims, 7));
    }
}

type AttrFn = Box<dyn FnOnce() -> crate::onnx::proto::AttributeProto>;

fn ints(name: &'static str, v: Vec<i64>) -> AttrFn {
    Box::new(move || attr_ints(name, &v))
}

fn int(name: &'static str, v: i64) -> AttrFn {
    Box::new(move || attr_int(name, v))
}

fn string(name: &'static str, v: &'static str) -> AttrFn {
    Box::new(move || attr_string(name, v))
}

/// The corpus at `scale`.
pub fn corpus(scale: Scale) -> Vec<AdversarialCase> {
    let mut c = Corpus { cases: Vec::new() };
    sizes(&mut c);
    windows(&mut c);
    scaling(&mut c, scale);
    axes_and_perms(&mut c);
    data(&mut c);
    structure(&mut c);
    opsets(&mut c);
    arithmetic(&mut c);
    zero_size(&mut c);
    c.cases
}

/// Element counts and byte sizes that overflow or exceed every limit.
fn sizes(c: &mut Corpus) {
    // The issue's reproduction: pads that make the padded extent wrap.
    let m = unary_model(13, &[1, 1, 1], |m| {
        m.ints("p", &[0, 0, 0, 0, 0, BIG]);
        m.node("Pad", &["x", "p"], &["z"], vec![]);
        m.node("GlobalAveragePool", &["z"], &["y"], vec![]);
    });
    c.add("pad_wrap", &m, input_for(&[1, 1, 1], 1));
    for (name, pads) in [
        ("pad_i64_max", vec![0, 0, i64::MAX, 0, 0, i64::MAX]),
        ("pad_crop_below_zero", vec![0, 0, -BIG, 0, 0, 0]),
        ("pad_edge_huge", vec![0, 0, 1 << 40, 0, 0, 1 << 40]),
        ("pad_sum_wraps", vec![0, 0, i64::MAX, 0, 0, i64::MAX - 1]),
    ] {
        let m = unary_model(13, &[1, 1, 2], |m| {
            m.ints("p", &pads);
            let mode = if name == "pad_edge_huge" { "edge" } else { "constant" };
            m.node("Pad", &["x", "p"], &["y"], vec![attr_string("mode", mode)]);
        });
        c.add(name, &m, input_for(&[1, 1, 2], 2));
    }
    // Initializers whose dims overflow, with or without a zero among them.
    for (name, dims) in [
        ("init_zero_then_huge", vec![0, BIG, BIG]),
        ("init_huge_then_zero", vec![BIG, 0]),
        ("init_dims_overflow", vec![BIG, BIG]),
        ("init_negative_dim", vec![-1, 4]),
        ("init_i64_min_dim", vec![i64::MIN]),
        ("init_many_dims", vec![1; 10_000]),
    ] {
        let mut m = OnnxModel::new(13);
        m.raw_initializer(raw_tensor("w", 1, &dims, vec![]));
        m.node("Identity", &["w"], &["y"], vec![]);
        m.output("y");
        c.add(name, &m, vec![]);
    }
    // Declared input shapes that overflow; the zero-size one can even be given.
    let m = unary_model(13, &[BIG, 0], |m| {
        m.node("Relu", &["x"], &["y"], vec![]);
    });
    let zero = Tensor::zeros(&crate::TensorType::new(DType::F32, vec![BIG as usize, 0]));
    c.add("input_huge_then_zero", &m, vec![zero]);
    let m = unary_model(13, &[1 << 40, 1 << 40], |m| {
        m.node("Relu", &["x"], &["y"], vec![]);
    });
    c.add("input_dims_overflow", &m, vec![]);
    // Reshapes whose target element count wraps to the input's.
    for (name, n, target) in [
        ("reshape_wraps_to_4", 4, vec![4, BIG + 1]),
        ("reshape_wraps_to_8", 8, vec![8, (1 << 61) + 1]),
        ("reshape_infer_huge", 4, vec![-1, BIG]),
        ("reshape_two_minus_one", 4, vec![-1, -1]),
        ("reshape_negative", 4, vec![-4, -1]),
    ] {
        let m = unary_model(13, &[n], |m| {
            m.ints("s", &target);
            m.node("Reshape", &["x", "s"], &["y"], vec![]);
        });
        c.add(name, &m, input_for(&[n], 3));
    }
    // Rank far beyond anything real.
    let m = unary_model(13, &[1], |m| {
        m.ints("s", &vec![1; 5000]);
        m.node("Reshape", &["x", "s"], &["r"], vec![]);
        m.node("Relu", &["r"], &["y"], vec![]);
    });
    c.add("reshape_rank_5000", &m, input_for(&[1], 4));
    let m = unary_model(13, &vec![1; 5000], |m| {
        m.node("Relu", &["x"], &["y"], vec![]);
    });
    c.add("input_rank_5000", &m, vec![]);
    let m = unary_model(13, &[1], |m| {
        m.ints("axes", &(1..=3000).collect::<Vec<_>>());
        m.node("Unsqueeze", &["x", "axes"], &["y"], vec![]);
    });
    c.add("unsqueeze_rank_3001", &m, input_for(&[1], 5));
    // The highest rank allowed, through ops whose lowering nests a loop (or more) per axis.
    let r64 = [1i64; 64];
    // Padding on the last axis only: deep loop nests, small tensors.
    let pads = |spatial: usize| (0..2 * spatial).map(|i| (i % spatial == spatial - 1) as i64).collect::<Vec<_>>();
    let window = move || vec![ints("kernel_shape", vec![1; 62]), ints("pads", pads(62))];
    c.single("rank_64_relu", "Relu", &r64, &[], vec![]);
    c.single("rank_64_transpose", "Transpose", &r64, &[], vec![]);
    c.single("rank_64_maxpool", "MaxPool", &r64, &[], window());
    c.single("rank_64_averagepool", "AveragePool", &r64, &[], window());
    let w = Tensor::from_vec::<f32>(&[1; 64], vec![0.5]).expect("one element");
    c.single("rank_64_conv", "Conv", &r64, &[("w", w)], vec![ints("pads", pads(62))]);
    let m = unary_model(13, &r64, |m| {
        m.ints("p", &pads(64));
        m.node("Pad", &["x", "p"], &["y"], vec![attr_string("mode", "edge")]);
    });
    c.add("rank_64_pad", &m, input_for(&r64, 52));
    let m = unary_model(13, &r64, |m| {
        m.node("Softmax", &["x"], &["s"], vec![attr_int("axis", 30)]);
        m.node("Concat", &["s", "x"], &["y"], vec![attr_int("axis", 63)]);
    });
    c.add("rank_64_softmax_concat", &m, input_for(&r64, 53));
    // Outputs too large for any machine.
    let m = unary_model(13, &[1, 1], |m| {
        m.raw_initializer(raw_tensor("b", 1, &[1 << 20, 1 << 20], vec![]));
        m.node("Add", &["x", "b"], &["y"], vec![]);
    });
    c.add("broadcast_to_huge_init", &m, input_for(&[1, 1], 6));
    let m = unary_model(13, &[1 << 16, 1], |m| {
        m.node("Transpose", &["x"], &["t"], vec![attr_ints("perm", &[1, 0])]);
        m.node("Mul", &["x", "t"], &["y"], vec![]);
    });
    c.add("broadcast_outer_product_16g", &m, input_for(&[1 << 16, 1], 7));
    let m = unary_model(13, &[1, 4], |m| {
        m.ints("s", &[BIG, 1]);
        m.node("Reshape", &["x", "s"], &["r"], vec![attr_int("allowzero", 0)]);
        m.node("Relu", &["r"], &["y"], vec![]);
    });
    c.add("reshape_to_huge", &m, input_for(&[1, 4], 8));
}

/// Convolution and pooling windows: huge pads, strides, dilations, kernels, groups.
fn windows(c: &mut Corpus) {
    let x4 = [1i64, 1, 4, 4];
    c.single(
        "maxpool_dilated_window_wraps",
        "MaxPool",
        &x4,
        &[],
        vec![ints("kernel_shape", vec![(1 << 32) + 1, 1]), ints("dilations", vec![1 << 32, 1])],
    );
    c.single("maxpool_kernel_2e40", "MaxPool", &x4, &[], vec![ints("kernel_shape", vec![1 << 40, 1])]);
    c.single(
        "maxpool_huge_kernel_and_pads",
        "MaxPool",
        &[1, 1, 4],
        &[],
        vec![ints("kernel_shape", vec![1 << 20]), ints("pads", vec![(1 << 20) - 1, (1 << 20) - 1])],
    );
    c.single(
        "averagepool_huge_kernel_and_pads",
        "AveragePool",
        &[1, 1, 4],
        &[],
        vec![
            ints("kernel_shape", vec![1 << 20]),
            ints("pads", vec![(1 << 20) - 1, (1 << 20) - 1]),
            int("count_include_pad", 1),
        ],
    );
    c.single(
        "averagepool_ceil_huge_stride",
        "AveragePool",
        &x4,
        &[],
        vec![ints("kernel_shape", vec![2, 2]), ints("strides", vec![BIG, BIG]), int("ceil_mode", 1)],
    );
    c.single(
        "maxpool_pads_i64_max",
        "MaxPool",
        &x4,
        &[],
        vec![ints("kernel_shape", vec![1, 1]), ints("pads", vec![i64::MAX, 0, i64::MAX, 0])],
    );
    c.single(
        "maxpool_same_upper_huge_stride",
        "MaxPool",
        &x4,
        &[],
        vec![ints("kernel_shape", vec![3, 3]), ints("strides", vec![BIG, 1]), string("auto_pad", "SAME_UPPER")],
    );
    for (name, attrs) in [
        ("maxpool_zero_kernel", vec![ints("kernel_shape", vec![0, 1])]),
        ("maxpool_negative_stride", vec![ints("kernel_shape", vec![1, 1]), ints("strides", vec![-1, 1])]),
        ("maxpool_zero_dilation", vec![ints("kernel_shape", vec![1, 1]), ints("dilations", vec![0, 1])]),
        ("maxpool_kernel_rank_mismatch", vec![ints("kernel_shape", vec![1, 1, 1, 1])]),
        ("maxpool_pads_rank_mismatch", vec![ints("kernel_shape", vec![1, 1]), ints("pads", vec![1])]),
        ("maxpool_storage_order_7", vec![ints("kernel_shape", vec![1, 1]), int("storage_order", 7)]),
        ("maxpool_ceil_mode_2", vec![ints("kernel_shape", vec![1, 1]), int("ceil_mode", 2)]),
    ] {
        c.single(name, "MaxPool", &x4, &[], attrs);
    }
    let w = |shape: &[usize]| f32s(shape, 11);
    let conv = |c: &mut Corpus, name: &str, x: &[i64], wshape: &[usize], attrs: Vec<AttrFn>| {
        c.single(name, "Conv", x, &[("w", w(wshape))], attrs);
    };
    conv(c, "conv_pads_100000", &[1, 1, 1, 1], &[1, 1, 1, 1], vec![ints("pads", vec![100_000; 4])]);
    conv(c, "conv_pads_20000", &[1, 1, 1, 1], &[1, 1, 1, 1], vec![ints("pads", vec![20_000; 4])]);
    conv(c, "conv_pads_2e40", &[1, 1, 1, 1], &[1, 1, 1, 1], vec![ints("pads", vec![1 << 40; 4])]);
    conv(
        c,
        "conv_pads_2e40_stride_2e41",
        &[1, 1, 1, 1],
        &[1, 1, 1, 1],
        vec![ints("pads", vec![1 << 40; 4]), ints("strides", vec![1 << 41, 1 << 41])],
    );
    conv(
        c,
        "conv_dilated_same_lower",
        &[1, 1, 8, 8],
        &[1, 1, 3, 3],
        vec![ints("dilations", vec![1 << 40, 1 << 40]), string("auto_pad", "SAME_LOWER")],
    );
    conv(
        c,
        "conv_dilated_same_upper_2e30",
        &[1, 2, 6, 5],
        &[3, 2, 3, 2],
        vec![ints("dilations", vec![1 << 30, 3]), string("auto_pad", "SAME_UPPER")],
    );
    conv(c, "conv_dilation_overflow", &[1, 1, 8, 8], &[1, 1, 3, 3], vec![ints("dilations", vec![BIG, BIG])]);
    conv(c, "conv_huge_stride", &[1, 1, 5, 5], &[1, 1, 2, 2], vec![ints("strides", vec![BIG, BIG])]);
    conv(
        c,
        "conv_stride_and_pads_large",
        &[1, 1, 5, 5],
        &[1, 1, 2, 2],
        vec![ints("strides", vec![1 << 31, 7]), ints("pads", vec![1 << 31, 3, 1 << 31, 3])],
    );
    conv(c, "conv_pads_i64_max", &[1, 1, 5, 5], &[1, 1, 1, 1], vec![ints("pads", vec![i64::MAX, 0, 0, 0])]);
    conv(c, "conv_group_zero", &[1, 2, 4, 4], &[2, 1, 1, 1], vec![int("group", 0)]);
    conv(c, "conv_group_huge", &[1, 2, 4, 4], &[2, 1, 1, 1], vec![int("group", BIG)]);
    conv(c, "conv_group_negative", &[1, 2, 4, 4], &[2, 1, 1, 1], vec![int("group", -2)]);
    conv(c, "conv_kernel_shape_lies", &[1, 1, 4, 4], &[1, 1, 2, 2], vec![ints("kernel_shape", vec![BIG, BIG])]);
    conv(c, "conv_kernel_larger_than_input", &[1, 1, 2, 2], &[1, 1, 3, 3], vec![]);
    conv(c, "conv_weight_rank_mismatch", &[1, 1, 4, 4], &[1, 1, 3], vec![]);
    conv(
        c,
        "conv_dilated_kernel_spans_padding",
        &[1, 3, 7, 7],
        &[4, 3, 3, 3],
        vec![ints("dilations", vec![5, 5]), ints("pads", vec![5, 5, 5, 5])],
    );
    conv(
        c,
        "conv_large_pads_small_input",
        &[2, 3, 3, 2],
        &[4, 3, 2, 2],
        vec![ints("pads", vec![300, 2, 100, 2]), ints("strides", vec![3, 1])],
    );
}

/// Long chains, huge fan-in and fan-out.
fn scaling(c: &mut Corpus, s: Scale) {
    let chain = |c: &mut Corpus, name: &str, n: usize, step: &dyn Fn(&mut OnnxModel, &str, &str)| {
        let mut m = OnnxModel::new(13);
        m.input("x", DType::F32, &[2, 3]);
        m.initializer("k", &Tensor::from_vec::<f32>(&[], vec![0.5]).expect("scalar"));
        let mut prev = "x".to_string();
        for i in 0..n {
            let out = if i + 1 == n { "y".to_string() } else { format!("v{i}") };
            step(&mut m, &prev, &out);
            prev = out;
        }
        m.output("y");
        c.add(name, &m, input_for(&[2, 3], 9));
    };
    let n = s.chain;
    chain(c, &format!("chain_relu_{n}"), n, &|m, a, b| {
        m.node("Relu", &[a], &[b], vec![]);
    });
    chain(c, &format!("chain_add_{n}"), n, &|m, a, b| {
        m.node("Add", &[a, "k"], &[b], vec![]);
    });
    chain(c, &format!("chain_leakyrelu_{n}"), n, &|m, a, b| {
        m.node("LeakyRelu", &[a], &[b], vec![attr_float("alpha", 0.5)]);
    });
    chain(c, "chain_leakyrelu_40", 40, &|m, a, b| {
        m.node("LeakyRelu", &[a], &[b], vec![attr_float("alpha", 0.5)]);
    });
    let mixed = ["Relu", "Sigmoid", "Tanh", "Exp", "Clip", "Mul", "Sub", "Max"];
    chain(c, &format!("chain_mixed_{n}"), n, &|m, a, b| {
        let op = mixed[m.graph().node.len() % mixed.len()];
        match op {
            "Mul" | "Sub" | "Max" => m.node(op, &["k", a], &[b], vec![]),
            _ => m.node(op, &[a], &[b], vec![]),
        };
    });
    chain(c, &format!("chain_transpose_{n}"), n, &|m, a, b| {
        m.node("Transpose", &[a], &[b], vec![]);
    });
    chain(c, &format!("chain_reshape_{n}"), n, &|m, a, b| {
        let shape = if m.graph().node.len() % 2 == 0 { "s6" } else { "s23" };
        if m.graph().initializer.len() < 3 {
            m.ints("s6", &[6]);
            m.ints("s23", &[2, 3]);
        }
        m.node("Reshape", &[a, shape], &[b], vec![]);
    });
    // Wide: one input read by many nodes, concatenated / folded back.
    let f = s.fan_in;
    for op in ["Concat", "Max", "Min", "Sum", "Mean"] {
        let mut m = OnnxModel::new(13);
        m.input("x", DType::F32, &[1, 2]);
        let ins = vec!["x"; f];
        let attrs = if op == "Concat" { vec![attr_int("axis", 0)] } else { vec![] };
        m.node(op, &ins, &["y"], attrs);
        m.output("y");
        c.add(format!("{}_{f}_inputs", op.to_lowercase()), &m, input_for(&[1, 2], 10));
    }
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[2]);
    let names: Vec<String> = (0..f).map(|i| format!("c{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        m.initializer(n, &Tensor::from_vec::<f32>(&[1], vec![i as f32]).expect("1 element"));
    }
    let mut ins: Vec<&str> = vec!["x"];
    ins.extend(names.iter().map(String::as_str));
    m.node("Concat", &ins, &["y"], vec![attr_int("axis", 0)]);
    m.output("y");
    c.add(format!("concat_{f}_distinct_constants"), &m, input_for(&[2], 11));
    // Many outputs: distinct nodes, and one value listed many times.
    let o = s.outputs;
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[3]);
    for i in 0..o {
        let name = format!("y{i}");
        m.node("Relu", &["x"], &[&name], vec![]);
        m.output(&name);
    }
    c.add(format!("outputs_{o}_distinct"), &m, input_for(&[3], 12));
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[3]);
    m.node("Relu", &["x"], &["y"], vec![]);
    for _ in 0..o {
        m.output("y");
    }
    c.add(format!("outputs_{o}_same_value"), &m, input_for(&[3], 13));
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[3]);
    for _ in 0..o {
        m.output("x");
    }
    c.add(format!("outputs_{o}_input_itself"), &m, input_for(&[3], 14));
    // Many inputs nobody can supply, and many independent branches.
    let mut m = OnnxModel::new(13);
    for i in 0..o {
        m.input(&format!("x{i}"), DType::F32, &[1]);
    }
    m.node("Identity", &["x0"], &["y"], vec![]);
    m.output("y");
    c.add(format!("inputs_{o}"), &m, vec![]);
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[4]);
    let branches: Vec<String> = (0..o).map(|i| format!("b{i}")).collect();
    for b in &branches {
        m.node("Sigmoid", &["x"], &[b], vec![]);
    }
    let refs: Vec<&str> = branches.iter().map(String::as_str).collect();
    m.node("Concat", &refs, &["y"], vec![attr_int("axis", 0)]);
    m.output("y");
    c.add(format!("branches_{o}_concat"), &m, input_for(&[4], 15));
}

/// Axes, permutations and other index attributes out of range.
fn axes_and_perms(c: &mut Corpus) {
    let x = [2i64, 3, 4];
    for (name, perm) in [
        ("transpose_perm_duplicate", vec![0, 0, 1]),
        ("transpose_perm_out_of_range", vec![0, 1, 5]),
        ("transpose_perm_negative", vec![-1, 0, 1]),
        ("transpose_perm_short", vec![1, 0]),
        ("transpose_perm_huge", vec![BIG, 0, 1]),
        ("transpose_perm_i64_min", vec![i64::MIN, 0, 1]),
    ] {
        c.single(name, "Transpose", &x, &[], vec![ints("perm", perm)]);
    }
    for (name, axis) in [("concat_axis_huge", BIG), ("concat_axis_minus_huge", -BIG), ("concat_axis_rank", 3)] {
        c.single(name, "Concat", &x, &[], vec![int("axis", axis)]);
    }
    c.single("concat_no_axis", "Concat", &x, &[], vec![]);
    for (name, axis) in [("softmax_axis_huge", BIG), ("softmax_axis_i64_min", i64::MIN), ("softmax_axis_3", 3)] {
        c.single(name, "Softmax", &x, &[], vec![int("axis", axis)]);
    }
    for (name, axis) in [("flatten_axis_4", 4), ("flatten_axis_minus_4", -4), ("flatten_axis_i64_min", i64::MIN)] {
        c.single(name, "Flatten", &x, &[], vec![int("axis", axis)]);
    }
    let ones = [1i64, 3, 1];
    for (name, axes) in [
        ("squeeze_axis_not_one", vec![1]),
        ("squeeze_axis_huge", vec![BIG]),
        ("squeeze_axes_duplicate", vec![0, 0, -3]),
        ("squeeze_axis_i64_min", vec![i64::MIN]),
    ] {
        let m = unary_model(13, &ones, |m| {
            m.ints("a", &axes);
            m.node("Squeeze", &["x", "a"], &["y"], vec![]);
        });
        c.add(name, &m, input_for(&ones, 16));
    }
    for (name, axes) in [
        ("unsqueeze_axis_huge", vec![BIG]),
        ("unsqueeze_axes_duplicate", vec![1, 1]),
        ("unsqueeze_axis_negative_out_of_range", vec![-5]),
        ("unsqueeze_axis_i64_min", vec![i64::MIN]),
    ] {
        let m = unary_model(13, &x, |m| {
            m.ints("a", &axes);
            m.node("Unsqueeze", &["x", "a"], &["y"], vec![]);
        });
        c.add(name, &m, input_for(&x, 17));
    }
    for (name, axes) in [("pad_axes_duplicate", vec![0, 0]), ("pad_axes_out_of_range", vec![7, 0])] {
        let m = unary_model(18, &x, |m| {
            m.ints("p", &[1, 1, 1, 1]);
            m.ints("a", &axes);
            m.node("Pad", &["x", "p", "", "a"], &["y"], vec![]);
        });
        c.add(name, &m, input_for(&x, 18));
    }
    for (name, axis, block) in [
        ("quantize_axis_huge", BIG, 0),
        ("quantize_block_huge", 1, BIG),
        ("quantize_block_negative", 1, -3),
        ("quantize_block_zero_blocked_scale", 1, 0),
    ] {
        let m = unary_model(21, &x, |m| {
            let scale_shape: &[usize] = if block == 0 && axis == 1 { &[2, 1, 4] } else { &[3] };
            let n = scale_shape.iter().product();
            m.initializer("s", &Tensor::from_vec::<f32>(scale_shape, vec![0.5; n]).expect("scale"));
            m.node("QuantizeLinear", &["x", "s"], &["y"], vec![attr_int("axis", axis), attr_int("block_size", block)]);
        });
        c.add(name, &m, input_for(&x, 19));
    }
}

/// Initializer data that is short, long, external, of the wrong type or missing.
fn data(c: &mut Corpus) {
    let init_model = |t: TensorProto| {
        let mut m = OnnxModel::new(13);
        m.input("x", DType::F32, &[4]);
        m.raw_initializer(t);
        m.node("Add", &["x", "w"], &["y"], vec![]);
        m.output("y");
        m
    };
    let cases: Vec<(&str, TensorProto)> = vec![
        ("init_raw_short", raw_tensor("w", 1, &[4], vec![0; 7])),
        ("init_raw_long", raw_tensor("w", 1, &[4], vec![0; 17])),
        ("init_raw_huge_dims", raw_tensor("w", 1, &[1 << 30], vec![0; 4])),
        (
            "init_float_data_short",
            TensorProto {
                name: "w".into(),
                data_type: 1,
                dims: vec![4],
                float_data: vec![1.0; 3],
                ..Default::default()
            },
        ),
        (
            "init_int64_for_float",
            TensorProto { name: "w".into(), data_type: 1, dims: vec![4], int64_data: vec![1; 4], ..Default::default() },
        ),
        ("init_type_zero", raw_tensor("w", 0, &[4], vec![0; 16])),
        (
            "init_type_string",
            TensorProto {
                name: "w".into(),
                data_type: 8,
                dims: vec![4],
                string_data: vec![b"a".to_vec(); 4],
                ..Default::default()
            },
        ),
        ("init_type_bfloat16", raw_tensor("w", 16, &[4], vec![0; 8])),
        ("init_type_999", raw_tensor("w", 999, &[4], vec![0; 16])),
        ("init_type_negative", raw_tensor("w", -1, &[4], vec![0; 16])),
        ("init_wrong_dtype_for_add", raw_tensor("w", 7, &[4], vec![0; 32])),
        ("init_no_data", raw_tensor("w", 1, &[4], vec![])),
    ];
    for (name, t) in cases {
        c.add(name, &init_model(t), input_for(&[4], 20));
    }
    for (name, location) in [
        ("external_data_parent_dir", "../../../../etc/passwd"),
        ("external_data_absolute", "/etc/passwd"),
        ("external_data_missing", "no_such_file.bin"),
        ("external_data_empty_location", ""),
    ] {
        let mut t = raw_tensor("w", 1, &[4], vec![]);
        t.data_location = 1;
        t.external_data = vec![
            StringStringEntryProto { key: "location".into(), value: location.into() },
            StringStringEntryProto { key: "offset".into(), value: "18446744073709551615".into() },
            StringStringEntryProto { key: "length".into(), value: "16".into() },
        ];
        c.add(name, &init_model(t), input_for(&[4], 21));
    }
    // Constant nodes with bad payloads.
    let const_model = |attrs: Vec<crate::onnx::proto::AttributeProto>| {
        let mut m = OnnxModel::new(13);
        m.node("Constant", &[], &["y"], attrs);
        m.output("y");
        m
    };
    let huge = raw_tensor("", 1, &[BIG, BIG], vec![]);
    c.add("constant_huge_dims", &const_model(vec![attr_tensor("value", huge)]), vec![]);
    c.add("constant_no_attribute", &const_model(vec![]), vec![]);
    c.add(
        "constant_two_attributes",
        &const_model(vec![attr_int("value_int", 1), attr_float("value_float", 1.0)]),
        vec![],
    );
    c.add("constant_unknown_attribute", &const_model(vec![attr_int("value_bogus", 1)]), vec![]);
    let mut bad_type = attr_int("value_int", 3);
    bad_type.r#type = 42;
    c.add("constant_attribute_type_42", &const_model(vec![bad_type]), vec![]);
    let mut reference = attr_int("value_int", 3);
    reference.ref_attr_name = "outer".into();
    c.add("constant_ref_attr", &const_model(vec![reference]), vec![]);
}

/// Graph structure: cycles, duplicate names, missing pieces.
fn structure(c: &mut Corpus) {
    let base = || {
        let mut m = OnnxModel::new(13);
        m.input("x", DType::F32, &[3]);
        m
    };
    let mut m = base();
    m.node("Add", &["x", "b"], &["a"], vec![]).node("Relu", &["a"], &["b"], vec![]).output("b");
    c.add("cycle_two_nodes", &m, input_for(&[3], 22));
    let mut m = base();
    m.node("Add", &["x", "y"], &["y"], vec![]).output("y");
    c.add("cycle_self_loop", &m, input_for(&[3], 23));
    let mut m = base();
    m.node("Relu", &["x"], &["y"], vec![]).node("Sigmoid", &["x"], &["y"], vec![]).output("y");
    c.add("duplicate_node_output", &m, input_for(&[3], 24));
    let mut m = base();
    m.node("Relu", &["x"], &["x"], vec![]).output("x");
    c.add("node_output_is_input", &m, input_for(&[3], 25));
    let mut m = base();
    m.initializer("w", &f32s(&[3], 1)).node("Relu", &["x"], &["w"], vec![]).output("w");
    c.add("node_output_is_initializer", &m, input_for(&[3], 26));
    let mut m = base();
    m.initializer("w", &f32s(&[3], 1)).initializer("w", &f32s(&[2], 2));
    m.node("Add", &["x", "w"], &["y"], vec![]).output("y");
    c.add("duplicate_initializer", &m, input_for(&[3], 27));
    let mut m = base();
    m.input("x", DType::F32, &[3]).node("Relu", &["x"], &["y"], vec![]).output("y");
    c.add("duplicate_input", &m, input_for(&[3], 28));
    let mut m = base();
    m.initializer("x", &Tensor::from_vec::<i64>(&[2], vec![1, 2]).expect("2 elements"));
    m.node("Relu", &["x"], &["y"], vec![]).output("y");
    c.add("input_shadowed_by_initializer_of_other_type", &m, vec![]);
    let mut m = base();
    m.node("Relu", &["x"], &["y"], vec![]).output("nowhere");
    c.add("undefined_output", &m, input_for(&[3], 29));
    let mut m = base();
    m.node("Relu", &["ghost"], &["y"], vec![]).output("y");
    c.add("undefined_node_input", &m, input_for(&[3], 30));
    let mut m = base();
    m.node("Relu", &["x"], &[], vec![]).output("x");
    c.add("node_without_outputs", &m, input_for(&[3], 31));
    let mut m = base();
    m.node("Relu", &[], &["y"], vec![]).output("y");
    c.add("node_without_inputs", &m, input_for(&[3], 32));
    let mut m = base();
    m.node("Relu", &["x", "x", "x"], &["y"], vec![]).output("y");
    c.add("relu_three_inputs", &m, input_for(&[3], 33));
    let mut m = base();
    m.node("Relu", &["x"], &["y", "z", "w"], vec![]).output("y");
    c.add("relu_three_outputs", &m, input_for(&[3], 34));
    let mut m = base();
    m.node("Add", &["x", ""], &["y"], vec![]).output("y");
    c.add("add_empty_input_name", &m, input_for(&[3], 35));
    let mut m = base();
    m.output("x");
    c.add("no_nodes_output_is_input", &m, input_for(&[3], 36));
    let m = base();
    c.add("no_nodes_no_outputs", &m, input_for(&[3], 37));
    let mut m = base();
    m.node("Relu", &["x"], &["y"], vec![]);
    c.add("nodes_no_outputs", &m, input_for(&[3], 38));
    let mut m = OnnxModel::new(13);
    m.model.graph = None;
    c.add("no_graph", &m, vec![]);
    let mut m = OnnxModel::new(13);
    m.initializer("w", &f32s(&[3], 3)).output("w");
    c.add("output_is_initializer_no_inputs", &m, vec![]);
    let mut m = base();
    m.node("Relu", &["x"], &["y"], vec![]);
    m.graph().output.push(crate::testing::onnx::value_info("y", DType::I64, &[7, 7]));
    c.add("declared_output_type_lies", &m, input_for(&[3], 39));
    let mut m = base();
    m.graph().node.push(crate::onnx::proto::NodeProto {
        op_type: "Relu".into(),
        name: "n".repeat(1 << 16),
        input: vec!["x".into()],
        output: vec!["y".into()],
        ..Default::default()
    });
    m.output("y");
    c.add("huge_node_name", &m, input_for(&[3], 40));
    let mut bytes = base().to_bytes();
    bytes.truncate(bytes.len() / 2);
    c.cases.push(AdversarialCase { name: "truncated_protobuf".into(), model: bytes, inputs: vec![] });
    c.cases.push(AdversarialCase { name: "empty_file".into(), model: vec![], inputs: vec![] });
    c.cases.push(AdversarialCase { name: "garbage_bytes".into(), model: vec![0xff; 64], inputs: vec![] });
}

/// Opset and domain nonsense.
fn opsets(c: &mut Corpus) {
    for (name, imports) in [
        ("opset_zero", vec![("", 0)]),
        ("opset_negative", vec![("", -5)]),
        ("opset_i64_max", vec![("", i64::MAX)]),
        ("opset_2e62", vec![("", BIG)]),
        ("opset_missing", vec![]),
        ("opset_foreign_domain_only", vec![("com.evil", 13)]),
        ("opset_two_default_entries", vec![("", 13), ("ai.onnx", 7)]),
        ("opset_ai_onnx_domain", vec![("ai.onnx", 13)]),
    ] {
        let mut m = unary_model(13, &[3], |m| {
            m.node("Relu", &["x"], &["y"], vec![]);
        });
        m.model.opset_import =
            imports.iter().map(|&(d, v)| OperatorSetIdProto { domain: d.into(), version: v }).collect();
        c.add(name, &m, input_for(&[3], 41));
    }
    for (name, domain, op) in [
        ("node_domain_ml", "ai.onnx.ml", "Relu"),
        ("node_domain_evil", "com.evil", "Relu"),
        ("node_op_empty", "", ""),
        ("node_op_unknown", "", "Frobnicate"),
        ("node_op_lowercase", "", "relu"),
    ] {
        let mut m = unary_model(13, &[3], |m| {
            m.node(op, &["x"], &["y"], vec![]);
        });
        m.graph().node[0].domain = domain.into();
        c.add(name, &m, input_for(&[3], 42));
    }
    let mut m = unary_model(13, &[3], |m| {
        m.node("Relu", &["x"], &["y"], vec![]);
    });
    m.model.ir_version = -1;
    c.add("ir_version_negative", &m, input_for(&[3], 43));
}

/// Arithmetic that traps in hardware or panics in Rust when done naively.
fn arithmetic(c: &mut Corpus) {
    let int_binary = |c: &mut Corpus, name: &str, op: &str, dtype: DType, a: Tensor, b: Tensor| {
        let mut m = OnnxModel::new(13);
        let dims: Vec<i64> = a.shape().iter().map(|&d| d as i64).collect();
        m.input("a", dtype, &dims);
        m.initializer("b", &b);
        m.node(op, &["a", "b"], &["y"], vec![]);
        m.output("y");
        c.add(name, &m, vec![a]);
    };
    int_binary(c, "div_i32_by_zero", "Div", DType::I32, i32s(&[3], vec![1, -7, 0]), i32s(&[3], vec![0, 0, 0]));
    int_binary(
        c,
        "div_i32_min_by_minus_one",
        "Div",
        DType::I32,
        i32s(&[2], vec![i32::MIN, 5]),
        i32s(&[2], vec![-1, -1]),
    );
    let i64s = |v: Vec<i64>| Tensor::from_vec::<i64>(&[v.len()], v).expect("1-d");
    int_binary(c, "div_i64_min_by_minus_one", "Div", DType::I64, i64s(vec![i64::MIN, 9]), i64s(vec![-1, 0]));
    let u8s = |v: Vec<u8>| Tensor::from_vec::<u8>(&[v.len()], v).expect("1-d");
    int_binary(c, "div_u8_by_zero", "Div", DType::U8, u8s(vec![200, 3]), u8s(vec![0, 0]));
    int_binary(
        c,
        "bitshift_huge",
        "BitShift",
        DType::I32,
        i32s(&[3], vec![1, -1, 7]),
        i32s(&[3], vec![i32::MAX, -1, 33]),
    );
    let mut m = OnnxModel::new(13);
    m.input("a", DType::I32, &[3]);
    m.initializer("b", &i32s(&[3], vec![i32::MAX, i32::MIN, -1]));
    m.node("BitShift", &["a", "b"], &["y"], vec![attr_string("direction", "LEFT")]);
    m.output("y");
    c.add("bitshift_left_extreme", &m, vec![i32s(&[3], vec![i32::MIN, 3, 1])]);
    let mut m = OnnxModel::new(13);
    m.input("a", DType::I32, &[4]);
    m.initializer("b", &i32s(&[], vec![i32::MIN]));
    m.node("Mul", &["a", "b"], &["m"], vec![]).node("Sub", &["m", "b"], &["s"], vec![]);
    m.node("Add", &["s", "s"], &["y"], vec![]).output("y");
    c.add("int_overflow_wraps", &m, vec![i32s(&[4], vec![-1, 2, i32::MAX, i32::MIN])]);
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[4]);
    m.node("Cast", &["x"], &["y"], vec![attr_int("to", DType::I32.onnx_code() as i64)]).output("y");
    let special = Tensor::from_vec::<f32>(&[4], vec![f32::NAN, f32::INFINITY, -1e30, 3.7]).expect("4");
    c.add("cast_nan_inf_to_int", &m, vec![special]);
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[4]);
    m.node("Cast", &["x"], &["y"], vec![attr_int("to", 999)]).output("y");
    c.add("cast_to_unknown_type", &m, input_for(&[4], 44));
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[1, 2, 2, 2]);
    for (i, n) in ["s", "b", "mean", "var"].iter().enumerate() {
        m.initializer(n, &Tensor::from_vec::<f32>(&[2], vec![i as f32 - 1.0, f32::NAN]).expect("2"));
    }
    m.node("BatchNormalization", &["x", "s", "b", "mean", "var"], &["y"], vec![attr_float("epsilon", -1e30)]);
    m.output("y");
    c.add("batchnorm_nan_negative_epsilon", &m, input_for(&[1, 2, 2, 2], 45));
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[4]);
    m.initializer("lo", &Tensor::from_vec::<f32>(&[], vec![5.0]).expect("scalar"));
    m.initializer("hi", &Tensor::from_vec::<f32>(&[], vec![-5.0]).expect("scalar"));
    m.node("Clip", &["x", "lo", "hi"], &["y"], vec![]).output("y");
    c.add("clip_min_above_max", &m, input_for(&[4], 46));
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F32, &[2, 3]);
    m.initializer("s", &Tensor::from_vec::<f32>(&[], vec![0.0]).expect("scalar"));
    m.initializer("z", &Tensor::from_vec::<i8>(&[], vec![-128]).expect("scalar"));
    m.node("QuantizeLinear", &["x", "s", "z"], &["y"], vec![]).output("y");
    c.add("quantize_scale_zero", &m, input_for(&[2, 3], 47));
    let mut m = OnnxModel::new(13);
    m.input("x", DType::F16, &[3]);
    m.node("Exp", &["x"], &["y"], vec![]).output("y");
    let h = Tensor::from_vec::<f16>(&[3], vec![f16::from_f32(20.0), f16::from_f32(-20.0), f16::NAN]).expect("3");
    c.add("f16_exp_overflow", &m, vec![h]);
}

/// Zero-size tensors through every kind of op.
fn zero_size(c: &mut Corpus) {
    c.single("relu_zero_size", "Relu", &[0, 3], &[], vec![]);
    c.single("softmax_zero_axis", "Softmax", &[2, 0], &[], vec![int("axis", 1)]);
    c.single("transpose_zero_size", "Transpose", &[0, 4, 1], &[], vec![]);
    c.single("conv_zero_batch", "Conv", &[0, 1, 4, 4], &[("w", f32s(&[2, 1, 3, 3], 1))], vec![]);
    c.single("conv_zero_out_channels", "Conv", &[1, 1, 4, 4], &[("w", f32s(&[0, 1, 3, 3], 1))], vec![]);
    c.single("conv_zero_in_channels", "Conv", &[1, 0, 4, 4], &[("w", f32s(&[2, 0, 3, 3], 1))], vec![]);
    c.single("matmul_zero_k", "MatMul", &[3, 0], &[("b", f32s(&[0, 2], 1))], vec![]);
    c.single("gemm_zero_m", "Gemm", &[0, 4], &[("b", f32s(&[4, 2], 1))], vec![]);
    c.single("globalaveragepool_zero_spatial", "GlobalAveragePool", &[1, 2, 0, 3], &[], vec![]);
    c.single("maxpool_zero_spatial", "MaxPool", &[1, 1, 0, 3], &[], vec![ints("kernel_shape", vec![1, 1])]);
    c.single("flatten_zero", "Flatten", &[2, 0, 3], &[], vec![int("axis", 2)]);
    let m = unary_model(13, &[0, 2], |m| {
        m.ints("p", &[1, 0, 1, 0]);
        m.node("Pad", &["x", "p"], &["y"], vec![attr_string("mode", "constant")]);
    });
    c.add("pad_grows_zero_size", &m, input_for(&[0, 2], 48));
    let m = unary_model(13, &[0, 2], |m| {
        m.ints("p", &[1, 0, 1, 0]);
        m.node("Pad", &["x", "p"], &["y"], vec![attr_string("mode", "reflect")]);
    });
    c.add("pad_reflect_zero_size", &m, input_for(&[0, 2], 49));
    let m = unary_model(13, &[2, 0], |m| {
        m.raw_initializer(raw_tensor("z", 1, &[2, 3], vec![0; 24]));
        m.node("Concat", &["x", "z", "x"], &["y"], vec![attr_int("axis", 1)]);
    });
    c.add("concat_with_zero_size", &m, input_for(&[2, 0], 50));
    let m = unary_model(13, &[0], |m| {
        m.ints("s", &[0, 5, 7]);
        m.node("Reshape", &["x", "s"], &["y"], vec![attr_int("allowzero", 1)]);
    });
    c.add("reshape_zero_allowzero", &m, input_for(&[0], 51));
}
