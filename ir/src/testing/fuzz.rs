//! Fuzzing on stable Rust: deterministic generators and mutators driven by a seed, so every
//! finding is reproduced by its seed alone. The fuzz targets (`*/tests/fuzz.rs`) run
//! `HERON_FUZZ_CASES` seeds (a small default in the test suite) starting at `HERON_FUZZ_SEED`
//! (default 0); a long run is `HERON_FUZZ_CASES=1000000 cargo test --release --test fuzz`.

use std::ops::Range;

use crate::DType;
use crate::onnx::proto::AttributeProto;
use crate::tensor::Tensor;
use crate::testing::onnx::{OnnxModel, attr_float, attr_int, attr_ints, attr_string};

/// The seeds a fuzz target runs: `HERON_FUZZ_SEED ..+ HERON_FUZZ_CASES` (default `default`).
pub fn seeds(default: u64) -> Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let start = var("HERON_FUZZ_SEED").unwrap_or(0);
    start..start.saturating_add(var("HERON_FUZZ_CASES").unwrap_or(default))
}

/// splitmix64: cheap, deterministic, every seed a good stream; enough to explore inputs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next_u64() % n as u64) as usize }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// An integer from the edges of every range that matters: 0, ±1, powers of two around
    /// 2^31, 2^32, 2^62, `i64::MIN`/`MAX`, or a small value.
    pub fn extreme_int(&mut self) -> i64 {
        const EDGES: [i64; 14] = [
            0,
            1,
            -1,
            2,
            i32::MAX as i64,
            i32::MIN as i64,
            1 << 31,
            (1 << 32) + 1,
            1 << 40,
            1 << 61,
            1 << 62,
            (1 << 62) + 1,
            i64::MAX,
            i64::MIN,
        ];
        if self.chance(0.5) { *self.pick(&EDGES) } else { self.below(9) as i64 - 2 }
    }
}

/// `bytes` with a few random edits: bit flips, byte overwrites (often with 0x00/0xff/0x80),
/// deletions, duplications of a slice, truncation.
pub fn mutate_bytes(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for _ in 0..1 + rng.below(8) {
        if b.is_empty() {
            b.push(rng.next_u64() as u8);
            continue;
        }
        let at = rng.below(b.len());
        match rng.below(6) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = *rng.pick(&[0x00, 0xff, 0x80, 0x7f, 0x01]),
            2 => {
                let n = 1 + rng.below(16.min(b.len() - at));
                b.drain(at..at + n);
            }
            3 => {
                let n = 1 + rng.below(64.min(b.len() - at));
                let chunk = b[at..at + n].to_vec();
                let to = rng.below(b.len());
                b.splice(to..to, chunk);
            }
            4 => b.truncate(at),
            _ => b[at] = rng.next_u64() as u8,
        }
    }
    b
}

/// `text` with a few token-level edits: numbers replaced by extreme ones, punctuation and
/// words deleted, duplicated or swapped.
pub fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut tokens: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        let word = c.is_ascii_alphanumeric() || c == '_' || c == '%' || c == '-';
        if !word && !cur.is_empty() {
            tokens.push(std::mem::take(&mut cur));
        }
        if word { cur.push(c) } else { tokens.push(c.to_string()) }
    }
    tokens.push(cur);
    for _ in 0..1 + rng.below(6) {
        if tokens.is_empty() {
            break;
        }
        let at = rng.below(tokens.len());
        match rng.below(5) {
            0 if tokens[at].parse::<i64>().is_ok() => tokens[at] = rng.extreme_int().to_string(),
            1 => {
                tokens.remove(at);
            }
            2 => {
                let t = tokens[at].clone();
                tokens.insert(at, t);
            }
            3 => {
                let other = rng.below(tokens.len());
                tokens.swap(at, other);
            }
            _ => {
                tokens[at] = rng.pick(&["(", ")", "{", "}", "[", "]", ",", ":", "0", "1<<62", "f32", "%x"]).to_string()
            }
        }
    }
    tokens.concat()
}

/// A random small ONNX model: a chain of up to 8 ops over a float input of rank 1 to 4 (axes
/// of length 0 to 5), each op with attributes valid for the shape it sees most of the time and
/// extreme otherwise. Returns the model and an input for it.
pub fn random_model(rng: &mut Rng) -> (Vec<u8>, Vec<Tensor>) {
    let rank = 1 + rng.below(4);
    let mut shape: Vec<i64> = (0..rank).map(|_| if rng.chance(0.1) { 0 } else { 1 + rng.below(5) as i64 }).collect();
    let input_dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let mut m = OnnxModel::new(*rng.pick(&[13, 17, 21]));
    m.input("x", DType::F32, &shape);
    let mut prev = "x".to_string();
    let nodes = 1 + rng.below(8);
    for k in 0..nodes {
        let out = if k + 1 == nodes { "y".to_string() } else { format!("v{k}") };
        add_random_node(rng, &mut m, &prev, &out, &mut shape, k);
        prev = out;
    }
    m.output("y");
    let n = input_dims.iter().product();
    let input = Tensor::from_vec::<f32>(&input_dims, super::data(rng.next_u64(), n)).expect("shape matches");
    (m.to_bytes(), vec![input])
}

/// A value for an attribute: usually `good`, sometimes an extreme integer.
fn maybe_extreme(rng: &mut Rng, good: impl FnOnce(&mut Rng) -> i64) -> i64 {
    if rng.chance(0.08) { rng.extreme_int() } else { good(rng) }
}

/// `n` values drawn with `f`.
fn draw(rng: &mut Rng, n: usize, mut f: impl FnMut(&mut Rng) -> i64) -> Vec<i64> {
    (0..n).map(|_| f(rng)).collect()
}

fn ints_attr(rng: &mut Rng, name: &str, good: Vec<i64>) -> AttributeProto {
    let v: Vec<i64> = good.into_iter().map(|g| maybe_extreme(rng, |_| g)).collect();
    attr_ints(name, &v)
}

/// Appends one random node reading `input` (of `shape`, updated to the output's as far as
/// the generator tracks it) and writing `out`.
fn add_random_node(rng: &mut Rng, m: &mut OnnxModel, input: &str, out: &str, shape: &mut Vec<i64>, k: usize) {
    let r = shape.len();
    let init = |m: &mut OnnxModel, rng: &mut Rng, name: &str, dims: &[i64]| {
        let d: Vec<usize> = dims.iter().map(|&x| x.clamp(0, 8) as usize).collect();
        let n = d.iter().product();
        m.initializer(name, &Tensor::from_vec::<f32>(&d, super::data(rng.next_u64(), n)).expect("shape"));
    };
    let c = format!("c{k}");
    match rng.below(16) {
        0 => {
            let op = *rng.pick(&["Relu", "Sigmoid", "Tanh", "Exp", "Sqrt", "Erf", "Identity"]);
            m.node(op, &[input], &[out], vec![]);
        }
        1 => {
            let op = *rng.pick(&["Add", "Sub", "Mul", "Div", "Max", "Min"]);
            // Broadcast from a suffix of the shape (or a scalar).
            let keep = rng.below(r + 1);
            let dims: Vec<i64> = shape[r - keep..].iter().map(|&d| if rng.chance(0.3) { 1 } else { d }).collect();
            init(m, rng, &c, &dims);
            m.node(op, &[input, &c], &[out], vec![]);
        }
        2 => {
            let alpha = if rng.chance(0.1) { f32::NAN } else { 0.1 };
            m.node("LeakyRelu", &[input], &[out], vec![attr_float("alpha", alpha)]);
        }
        3 => {
            let mut perm: Vec<i64> = (0..r as i64).collect();
            for i in (1..r).rev() {
                perm.swap(i, rng.below(i + 1));
            }
            let attr = ints_attr(rng, "perm", perm.clone());
            m.node("Transpose", &[input], &[out], vec![attr]);
            *shape = perm.iter().map(|&p| shape[p.clamp(0, r as i64 - 1) as usize]).collect();
        }
        4 => {
            let axis = maybe_extreme(rng, |rng| rng.below(r) as i64);
            m.node("Softmax", &[input], &[out], vec![attr_int("axis", axis)]);
        }
        5 => {
            let axis = maybe_extreme(rng, |rng| rng.below(r + 1) as i64);
            m.node("Flatten", &[input], &[out], vec![attr_int("axis", axis)]);
            let a = (axis.clamp(0, r as i64)) as usize;
            *shape = vec![shape[..a].iter().product(), shape[a..].iter().product()];
        }
        6 => {
            let axis = maybe_extreme(rng, |rng| rng.below(r) as i64);
            m.node("Concat", &[input, input], &[out], vec![attr_int("axis", axis)]);
            if let Some(d) = shape.get_mut(axis.clamp(0, r as i64 - 1) as usize) {
                *d *= 2;
            }
        }
        7 => {
            let pads: Vec<i64> = (0..2 * r).map(|_| maybe_extreme(rng, |rng| rng.below(3) as i64)).collect();
            m.ints(&c, &pads);
            let mode = *rng.pick(&["constant", "edge", "reflect", "wrap"]);
            m.node("Pad", &[input, &c], &[out], vec![attr_string("mode", mode)]);
            for d in 0..r {
                shape[d] += pads[d].clamp(0, 2) + pads[d + r].clamp(0, 2);
            }
        }
        8 => {
            let mut target: Vec<i64> = shape.clone();
            target.reverse();
            if rng.chance(0.3) {
                target = vec![-1];
            }
            let target: Vec<i64> = target.into_iter().map(|t| maybe_extreme(rng, |_| t)).collect();
            m.ints(&c, &target);
            m.node("Reshape", &[input, &c], &[out], vec![]);
            shape.reverse();
        }
        9 | 10 if r >= 3 => {
            let sp = r - 2;
            let kernel: Vec<i64> = (0..sp).map(|_| 1 + rng.below(3) as i64).collect();
            let mut attrs = vec![
                ints_attr(rng, "kernel_shape", kernel.clone()),
                {
                    let v = draw(rng, sp, |rng| 1 + rng.below(2) as i64);
                    ints_attr(rng, "strides", v)
                },
                {
                    let v = draw(rng, 2 * sp, |rng| rng.below(2) as i64);
                    ints_attr(rng, "pads", v)
                },
            ];
            if rng.chance(0.3) {
                let auto_pad = *rng.pick(&["SAME_UPPER", "SAME_LOWER", "VALID"]);
                attrs.push(attr_string("auto_pad", auto_pad));
                attrs.remove(2);
            }
            let op = if rng.chance(0.5) { "MaxPool" } else { "AveragePool" };
            if op == "MaxPool" {
                attrs.push({
                    let v = draw(rng, sp, |rng| 1 + rng.below(2) as i64);
                    ints_attr(rng, "dilations", v)
                });
            } else {
                attrs.push(attr_int("count_include_pad", rng.below(2) as i64));
            }
            if rng.chance(0.3) {
                attrs.push(attr_int("ceil_mode", 1));
            }
            m.node(op, &[input], &[out], attrs);
            // The exact output shape is left to the importer: later nodes adapt or fail cleanly.
        }
        11 if r >= 3 => {
            let sp = r - 2;
            let (cin, cout) = (shape[1].max(0), 1 + rng.below(3) as i64);
            let mut wdims = vec![cout, cin];
            wdims.extend((0..sp).map(|_| 1 + rng.below(3) as i64));
            init(m, rng, &c, &wdims);
            let attrs = vec![
                {
                    let v = draw(rng, 2 * sp, |rng| rng.below(2) as i64);
                    ints_attr(rng, "pads", v)
                },
                {
                    let v = draw(rng, sp, |rng| 1 + rng.below(2) as i64);
                    ints_attr(rng, "strides", v)
                },
                {
                    let v = draw(rng, sp, |rng| 1 + rng.below(2) as i64);
                    ints_attr(rng, "dilations", v)
                },
            ];
            m.node("Conv", &[input, &c], &[out], attrs);
            shape[1] = cout;
        }
        12 if r >= 2 => {
            let k = shape[r - 1];
            let n = 1 + rng.below(4) as i64;
            let rows = maybe_extreme(rng, |_| k);
            init(m, rng, &c, &[rows, n]);
            m.node("MatMul", &[input, &c], &[out], vec![]);
            shape[r - 1] = n;
        }
        13 => {
            let axes: Vec<i64> = vec![maybe_extreme(rng, |rng| rng.below(r + 1) as i64)];
            m.ints(&c, &axes);
            m.node("Unsqueeze", &[input, &c], &[out], vec![]);
            shape.insert(axes[0].clamp(0, r as i64) as usize, 1);
        }
        14 => {
            m.initializer(&c, &Tensor::from_vec::<f32>(&[], vec![-0.5]).expect("scalar"));
            let hi = format!("{c}_hi");
            m.initializer(&hi, &Tensor::from_vec::<f32>(&[], vec![0.5]).expect("scalar"));
            m.node("Clip", &[input, &c, &hi], &[out], vec![]);
        }
        _ if r >= 3 => {
            m.node("GlobalAveragePool", &[input], &[out], vec![]);
            shape[2..].iter_mut().for_each(|d| *d = 1);
        }
        _ => {
            m.node("Relu", &[input], &[out], vec![]);
        }
    }
}
