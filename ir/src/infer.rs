//! Shape and dtype inference: the static type of every op's outputs from its inputs' types.
//!
//! Kept apart from evaluation (`interp`): inference never looks at tensor data, and kernels may
//! assume the checks done here.

use crate::dtype::{DType, TensorType};
use crate::limits::checked_elements;
use crate::op::{ConvAttrs, Op, PadMode, PoolAttrs, QuantAxis, ReduceOp, Window};

/// Output types of every output `op` can produce (optional outputs included, in order).
pub fn infer_types(op: &Op, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
    check_arity(op, inputs.len())?;
    let x = inputs[0];
    let one = |ty: TensorType| Ok(vec![ty]);
    match op {
        Op::Conv(attrs) => {
            expect_float(op, x)?;
            same_dtype(op, x, inputs[1])?;
            let out = conv_output_shape(attrs, &x.shape, &inputs[1].shape)?;
            if let Some(bias) = inputs.get(2) {
                same_dtype(op, x, bias)?;
                if bias.shape != [out[1]] {
                    return Err(format!("bias shape {:?} must be [{}]", bias.shape, out[1]));
                }
            }
            one(TensorType::new(x.dtype, out))
        }
        Op::ConvInteger(attrs) => {
            expect_8bit(op, x)?;
            expect_8bit(op, inputs[1])?;
            let out = conv_output_shape(attrs, &x.shape, &inputs[1].shape)?;
            check_zero_point(op, "x_zero_point", x, inputs[2], &[1])?;
            check_zero_point(op, "w_zero_point", inputs[1], inputs[3], &[1, out[1]])?;
            one(TensorType::new(DType::I32, out))
        }
        Op::Gemm { trans_a, trans_b, .. } => {
            expect_float(op, x)?;
            let b = inputs[1];
            same_dtype(op, x, b)?;
            if x.rank() != 2 || b.rank() != 2 {
                return Err(format!("A and B must be 2-d, got {:?} and {:?}", x.shape, b.shape));
            }
            let (m, ka) = if *trans_a { (x.shape[1], x.shape[0]) } else { (x.shape[0], x.shape[1]) };
            let (kb, n) = if *trans_b { (b.shape[1], b.shape[0]) } else { (b.shape[0], b.shape[1]) };
            if ka != kb {
                return Err(format!(
                    "inner dimensions differ: A {:?} (transA={}) and B {:?} (transB={})",
                    x.shape, *trans_a as u8, b.shape, *trans_b as u8
                ));
            }
            if let Some(c) = inputs.get(2) {
                same_dtype(op, x, c)?;
                let bc = broadcast_shapes(&c.shape, &[m, n])?;
                if bc != [m, n] {
                    return Err(format!("C {:?} does not broadcast to [{m}, {n}]", c.shape));
                }
            }
            one(TensorType::new(x.dtype, vec![m, n]))
        }
        Op::MatMul => {
            expect_numeric(op, x)?;
            same_dtype(op, x, inputs[1])?;
            one(TensorType::new(x.dtype, matmul_shape(&x.shape, &inputs[1].shape)?))
        }
        Op::MatMulInteger => {
            let b = inputs[1];
            expect_8bit(op, x)?;
            expect_8bit(op, b)?;
            let out = matmul_shape(&x.shape, &b.shape)?;
            let rows = if x.rank() >= 2 { x.shape[x.rank() - 2] } else { 1 };
            let cols = if b.rank() >= 2 { b.shape[b.rank() - 1] } else { 1 };
            check_zero_point(op, "a_zero_point", x, inputs[2], &[1, rows])?;
            check_zero_point(op, "b_zero_point", b, inputs[3], &[1, cols])?;
            one(TensorType::new(DType::I32, out))
        }
        Op::Binary(_) => {
            let b = inputs[1];
            same_dtype(op, x, b)?;
            let ok = match op {
                Op::Binary(crate::op::BinaryOp::Pow) => x.dtype.is_float(),
                Op::Binary(crate::op::BinaryOp::Mod) => x.dtype != DType::Bool,
                _ => x.dtype != DType::Bool,
            };
            if !ok {
                return Err(unsupported_dtype(op, x.dtype));
            }
            one(TensorType::new(x.dtype, broadcast_shapes(&x.shape, &b.shape)?))
        }
        Op::Compare(c) => {
            let b = inputs[1];
            same_dtype(op, x, b)?;
            if x.dtype == DType::Bool && *c != crate::op::CompareOp::Equal {
                return Err(unsupported_dtype(op, x.dtype));
            }
            one(TensorType::new(DType::Bool, broadcast_shapes(&x.shape, &b.shape)?))
        }
        Op::Logical(_) if x.dtype.is_int() => {
            // On integers: bitwise (BitwiseAnd / BitwiseOr / BitwiseXor).
            same_dtype(op, x, inputs[1])?;
            one(TensorType::new(x.dtype, broadcast_shapes(&x.shape, &inputs[1].shape)?))
        }
        Op::Logical(_) | Op::Not => {
            for t in inputs {
                if t.dtype != DType::Bool {
                    return Err(unsupported_dtype(op, t.dtype));
                }
            }
            let shape = match inputs.get(1) {
                Some(b) => broadcast_shapes(&x.shape, &b.shape)?,
                None => x.shape.clone(),
            };
            one(TensorType::new(DType::Bool, shape))
        }
        Op::Reduce { op: r, axes, keepdims } => {
            expect_numeric(op, x)?;
            let float_only = !matches!(
                r,
                ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod | ReduceOp::SumSquare | ReduceOp::L1
            );
            if float_only && !x.dtype.is_float() {
                return Err(unsupported_dtype(op, x.dtype));
            }
            for &a in axes {
                check_axis(a, x.rank())?;
            }
            one(TensorType::new(x.dtype, reduced_shape(&x.shape, axes, *keepdims)))
        }
        Op::ArgReduce { axis, keepdims, .. } => {
            expect_numeric(op, x)?;
            check_axis(*axis, x.rank())?;
            if x.shape[*axis] == 0 {
                return Err("ArgMax/ArgMin over an empty axis".into());
            }
            one(TensorType::new(DType::I64, reduced_shape(&x.shape, &[*axis], *keepdims)))
        }
        Op::Where => {
            let (a, b) = (inputs[1], inputs[2]);
            if x.dtype != DType::Bool {
                return Err(format!("Where's condition must be bool, got {}", x.dtype));
            }
            same_dtype(op, a, b)?;
            let shape = broadcast_shapes(&broadcast_shapes(&x.shape, &a.shape)?, &b.shape)?;
            one(TensorType::new(a.dtype, shape))
        }
        Op::Activation(_) => {
            expect_float(op, x)?;
            one(x.clone())
        }
        Op::Gather { axis } => {
            check_axis(*axis, x.rank())?;
            let idx = expect_indices(op, inputs[1])?;
            let mut out = x.shape[..*axis].to_vec();
            out.extend_from_slice(&idx.shape);
            out.extend_from_slice(&x.shape[axis + 1..]);
            checked_elements(&out).ok_or_else(|| too_many(&out))?;
            one(TensorType::new(x.dtype, out))
        }
        Op::GatherElements { axis } => {
            check_axis(*axis, x.rank())?;
            let idx = expect_indices(op, inputs[1])?;
            if idx.rank() != x.rank() {
                return Err(format!("indices {:?} must have the data's rank {}", idx.shape, x.rank()));
            }
            one(TensorType::new(x.dtype, idx.shape.clone()))
        }
        Op::GatherND { batch_dims } => {
            let idx = expect_indices(op, inputs[1])?;
            let out = gather_nd_shape(&x.shape, &idx.shape, *batch_dims)?;
            one(TensorType::new(x.dtype, out))
        }
        Op::ScatterElements { axis, .. } => {
            check_axis(*axis, x.rank())?;
            let (idx, upd) = (expect_indices(op, inputs[1])?, inputs[2]);
            same_dtype(op, x, upd)?;
            if idx.shape != upd.shape || idx.rank() != x.rank() {
                return Err(format!(
                    "indices {:?} and updates {:?} must share a shape of the data's rank {}",
                    idx.shape,
                    upd.shape,
                    x.rank()
                ));
            }
            one(x.clone())
        }
        Op::ScatterND { .. } => {
            let (idx, upd) = (expect_indices(op, inputs[1])?, inputs[2]);
            same_dtype(op, x, upd)?;
            let want = gather_nd_shape(&x.shape, &idx.shape, 0)?;
            if upd.shape != want {
                return Err(format!("updates {:?} must have shape {want:?}", upd.shape));
            }
            one(x.clone())
        }
        Op::Slice { axes } => {
            if axes.len() != x.rank() {
                return Err(format!("{} slice axes for rank {}", axes.len(), x.rank()));
            }
            for (d, a) in axes.iter().enumerate() {
                let last = a.start as i128 + (a.len as i128 - 1) * a.step as i128;
                let inside = |i: i128| (0..x.shape[d] as i128).contains(&i);
                if a.step == 0 || (a.len > 0 && !(inside(a.start as i128) && inside(last))) {
                    return Err(format!("slice {a:?} is out of range for axis {d} of size {}", x.shape[d]));
                }
            }
            one(TensorType::new(x.dtype, axes.iter().map(|a| a.len).collect::<Vec<_>>()))
        }
        Op::Expand { shape } => {
            let out = broadcast_shapes(&x.shape, shape)?;
            checked_elements(&out).ok_or_else(|| too_many(&out))?;
            one(TensorType::new(x.dtype, out))
        }
        Op::Tile { repeats } => {
            if repeats.len() != x.rank() {
                return Err(format!("{} repeats for rank {}", repeats.len(), x.rank()));
            }
            let out = x
                .shape
                .iter()
                .zip(repeats)
                .map(|(&n, &r)| n.checked_mul(r))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| too_many(&x.shape))?;
            checked_elements(&out).ok_or_else(|| too_many(&out))?;
            one(TensorType::new(x.dtype, out))
        }
        Op::Normalize { axis, .. } => {
            expect_float(op, x)?;
            check_axis(*axis, x.rank())?;
            for p in &inputs[1..] {
                same_dtype(op, x, p)?;
                if p.shape != x.shape[*axis..] {
                    return Err(format!("scale and bias must have shape {:?}, got {:?}", &x.shape[*axis..], p.shape));
                }
            }
            one(x.clone())
        }
        Op::Resample { axes, .. } => {
            expect_numeric(op, x)?;
            if inputs.len() != 1 + 2 * axes.len() {
                return Err(format!("takes x and two tables per resampled axis, got {} inputs", inputs.len()));
            }
            let wdtype = if x.dtype.is_float() { x.dtype } else { DType::F32 };
            let mut out = x.shape.clone();
            for (k, &a) in axes.iter().enumerate() {
                check_axis(a, x.rank())?;
                let (idx, w) = (inputs[1 + 2 * k], inputs[2 + 2 * k]);
                if idx.dtype != DType::I64 || w.dtype != wdtype || idx.rank() != 2 || idx.shape != w.shape {
                    return Err(format!(
                        "tables of axis {a} must be i64 and {wdtype} of one [out, taps] shape, got {idx} and {w}"
                    ));
                }
                out[a] = idx.shape[0];
            }
            one(TensorType::new(x.dtype, out))
        }
        Op::GridSample { .. } => {
            let grid = inputs[1];
            expect_float(op, x)?;
            same_dtype(op, x, grid)?;
            let k = x
                .rank()
                .checked_sub(2)
                .filter(|&k| k >= 1)
                .ok_or_else(|| format!("X {:?} needs spatial axes", x.shape))?;
            if x.shape[2..].contains(&0) {
                return Err(format!("X {:?} has an empty spatial axis to sample from", x.shape));
            }
            if grid.rank() != x.rank() || grid.shape[0] != x.shape[0] || grid.shape[grid.rank() - 1] != k {
                return Err(format!("grid {:?} must be [N, out..., {k}] for X {:?}", grid.shape, x.shape));
            }
            let mut out = vec![x.shape[0], x.shape[1]];
            out.extend_from_slice(&grid.shape[1..grid.rank() - 1]);
            checked_elements(&out).ok_or_else(|| too_many(&out))?;
            one(TensorType::new(x.dtype, out))
        }
        Op::CumSum { axis, .. } => {
            expect_numeric(op, x)?;
            check_axis(*axis, x.rank())?;
            one(x.clone())
        }
        Op::TopK { axis, k, .. } => {
            expect_numeric(op, x)?;
            check_axis(*axis, x.rank())?;
            if *k > x.shape[*axis] {
                return Err(format!("k = {k} exceeds axis {axis}'s size {}", x.shape[*axis]));
            }
            let mut out = x.shape.clone();
            out[*axis] = *k;
            Ok(vec![TensorType::new(x.dtype, out.clone()), TensorType::new(DType::I64, out)])
        }
        Op::Unary(kind) => {
            let ok = x.dtype.is_float() || (kind.takes_integers() && x.dtype.is_int() && x.dtype != DType::Bool);
            if !ok {
                return Err(unsupported_dtype(op, x.dtype));
            }
            one(x.clone())
        }
        Op::LeakyRelu { .. } | Op::Softmax { .. } => {
            expect_float(op, x)?;
            if let Op::Softmax { axis, .. } = op {
                check_axis(*axis, x.rank())?;
            }
            one(x.clone())
        }
        Op::Clip { min, max } => {
            expect_numeric(op, x)?;
            for bound in [min, max].into_iter().flatten() {
                if bound.dtype() != x.dtype || !bound.shape().is_empty() {
                    return Err(format!("bounds must be {} scalars, got {}", x.dtype, bound.tensor_type()));
                }
            }
            one(x.clone())
        }
        Op::MaxPool { pool, .. } => {
            if !(x.dtype.is_float() || matches!(x.dtype, DType::I8 | DType::U8)) {
                return Err(unsupported_dtype(op, x.dtype));
            }
            let out = pool_output_shape(pool, &x.shape)?;
            Ok(vec![TensorType::new(x.dtype, out.clone()), TensorType::new(DType::I64, out)])
        }
        Op::AveragePool { pool, .. } => {
            expect_float(op, x)?;
            one(TensorType::new(x.dtype, pool_output_shape(pool, &x.shape)?))
        }
        Op::GlobalAveragePool => {
            expect_float(op, x)?;
            if x.rank() < 2 {
                return Err(format!("input must have rank >= 2, got {:?}", x.shape));
            }
            let mut out = x.shape.clone();
            out[2..].iter_mut().for_each(|d| *d = 1);
            one(TensorType::new(x.dtype, out))
        }
        Op::BatchNormalization { .. } => {
            expect_float(op, x)?;
            if x.rank() < 2 {
                return Err(format!("input must have rank >= 2, got {:?}", x.shape));
            }
            for (i, p) in inputs[1..].iter().enumerate() {
                same_dtype(op, x, p)?;
                if p.shape != [x.shape[1]] {
                    let names = ["scale", "B", "input_mean", "input_var"];
                    return Err(format!("{} has shape {:?}, expected [{}]", names[i], p.shape, x.shape[1]));
                }
            }
            one(x.clone())
        }
        Op::Flatten { axis } => {
            if *axis > x.rank() {
                return Err(format!("axis {axis} out of range for rank {}", x.rank()));
            }
            let outer = checked_elements(&x.shape[..*axis]).ok_or_else(|| too_many(&x.shape))?;
            let inner = checked_elements(&x.shape[*axis..]).ok_or_else(|| too_many(&x.shape))?;
            one(TensorType::new(x.dtype, vec![outer, inner]))
        }
        Op::Reshape { shape } => {
            let from = checked_elements(&x.shape).ok_or_else(|| too_many(&x.shape))?;
            let to = checked_elements(shape).ok_or_else(|| too_many(shape))?;
            if to != from {
                return Err(format!("cannot reshape {:?} ({from} elements) to {shape:?} ({to} elements)", x.shape));
            }
            one(TensorType::new(x.dtype, shape.clone()))
        }
        Op::Transpose { perm } => {
            let mut seen = vec![false; x.rank()];
            if perm.len() != x.rank() || perm.iter().any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true)) {
                return Err(format!("perm {perm:?} is not a permutation of 0..{}", x.rank()));
            }
            one(TensorType::new(x.dtype, perm.iter().map(|&p| x.shape[p]).collect::<Vec<_>>()))
        }
        Op::Concat { axis } => {
            check_axis(*axis, x.rank())?;
            let mut out = x.shape.clone();
            for t in &inputs[1..] {
                same_dtype(op, x, t)?;
                let same_rest = t.rank() == x.rank() && (0..x.rank()).all(|d| d == *axis || t.shape[d] == x.shape[d]);
                if !same_rest {
                    return Err(format!("inputs {:?} and {:?} differ outside axis {axis}", x.shape, t.shape));
                }
                out[*axis] = out[*axis]
                    .checked_add(t.shape[*axis])
                    .ok_or_else(|| format!("the joined axis {axis} overflows"))?;
            }
            one(TensorType::new(x.dtype, out))
        }
        Op::Pad { pads, mode, value } => {
            if pads.len() != 2 * x.rank() {
                return Err(format!("{} pads for rank {}; need {}", pads.len(), x.rank(), 2 * x.rank()));
            }
            if value.dtype() != x.dtype || !value.shape().is_empty() {
                return Err(format!("pad value must be a {} scalar", x.dtype));
            }
            let r = x.rank();
            let mut out = Vec::with_capacity(r);
            for d in 0..r {
                let (b, e) = (pads[d], pads[d + r]);
                // Larger pads always make the output too large (or crop more than any tensor
                // holds); refusing them keeps every index computed from them inside i64.
                if b.unsigned_abs() > MAX_WINDOW_EXTENT as u64 || e.unsigned_abs() > MAX_WINDOW_EXTENT as u64 {
                    return Err(format!("pads {b}, {e} of axis {d} are out of range"));
                }
                let len = x.shape[d] as i128 + b as i128 + e as i128;
                if len < 0 {
                    return Err(format!("pads {b}, {e} crop axis {d} of size {} below zero", x.shape[d]));
                }
                if len > isize::MAX as i128 {
                    return Err(format!("pads {b}, {e} make axis {d} of size {} overflow", x.shape[d]));
                }
                let grows = b > 0 || e > 0;
                if grows && *mode != PadMode::Constant && x.shape[d] == 0 {
                    return Err(format!("{mode:?} padding of empty axis {d}"));
                }
                out.push(len as usize);
            }
            one(TensorType::new(x.dtype, out))
        }
        Op::Squeeze { axes } => {
            for &a in axes {
                check_axis(a, x.rank())?;
                if x.shape[a] != 1 {
                    return Err(format!("cannot squeeze axis {a} of size {}", x.shape[a]));
                }
            }
            let out = (0..x.rank()).filter(|d| !axes.contains(d)).map(|d| x.shape[d]).collect::<Vec<_>>();
            one(TensorType::new(x.dtype, out))
        }
        Op::Unsqueeze { axes } => {
            let rank = x.rank() + axes.len();
            let mut out = Vec::with_capacity(rank);
            let mut src = x.shape.iter();
            for d in 0..rank {
                if axes.contains(&d) {
                    out.push(1);
                } else {
                    out.push(*src.next().ok_or_else(|| format!("axes {axes:?} out of range"))?);
                }
            }
            if src.next().is_some() || axes.iter().any(|&a| a >= rank) {
                return Err(format!("axes {axes:?} invalid for output rank {rank}"));
            }
            one(TensorType::new(x.dtype, out))
        }
        Op::Identity => one(x.clone()),
        Op::Dropout => Ok(vec![x.clone(), TensorType::new(DType::Bool, x.shape.clone())]),
        Op::Cast { to } => one(TensorType::new(*to, x.shape.clone())),
        Op::QuantizeLinear { axis } => {
            if !matches!(x.dtype, DType::F32 | DType::F16 | DType::I32) {
                return Err(unsupported_dtype(op, x.dtype));
            }
            let (scale, zp) = (inputs[1], inputs[2]);
            expect_float(op, scale)?;
            if !matches!(zp.dtype, DType::I8 | DType::U8 | DType::I16 | DType::U16) {
                return Err(format!("unsupported quantized type {}", zp.dtype));
            }
            check_quant_params(*axis, &x.shape, scale, zp)?;
            one(TensorType::new(zp.dtype, x.shape.clone()))
        }
        Op::DequantizeLinear { axis } => {
            if !matches!(x.dtype, DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32) {
                return Err(unsupported_dtype(op, x.dtype));
            }
            let (scale, zp) = (inputs[1], inputs[2]);
            expect_float(op, scale)?;
            same_dtype(op, x, zp)?;
            check_quant_params(*axis, &x.shape, scale, zp)?;
            one(TensorType::new(scale.dtype, x.shape.clone()))
        }
        Op::Requantize { shift, min, max } => {
            if x.dtype != DType::I32 {
                return Err(unsupported_dtype(op, x.dtype));
            }
            if !((-31..=31).contains(shift) && -128 <= *min && min <= max && *max <= 127) {
                return Err(format!("shift {shift} (-31..=31) or bounds {min}..={max} (within -128..=127)"));
            }
            one(TensorType::new(DType::I8, x.shape.clone()))
        }
        Op::BitShift { .. } => {
            if !x.dtype.is_int() {
                return Err(unsupported_dtype(op, x.dtype));
            }
            same_dtype(op, x, inputs[1])?;
            one(TensorType::new(x.dtype, broadcast_shapes(&x.shape, &inputs[1].shape)?))
        }
    }
}

/// The shape of a reduction of `shape` over `axes`: those axes dropped, or kept with extent 1.
pub fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &n)| match (axes.contains(&d), keepdims) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(n),
        })
        .collect()
}

/// Allowed input counts of `op` (inclusive range).
pub fn arity(op: &Op) -> (usize, usize) {
    match op {
        Op::Conv(_) | Op::Gemm { .. } => (2, 3),
        Op::ConvInteger(_) | Op::MatMulInteger => (4, 4),
        Op::MatMul | Op::Binary(_) | Op::BitShift { .. } | Op::Compare(_) | Op::Logical(_) => (2, 2),
        Op::Where | Op::ScatterElements { .. } | Op::ScatterND { .. } => (3, 3),
        Op::Gather { .. } | Op::GatherElements { .. } | Op::GatherND { .. } | Op::GridSample { .. } => (2, 2),
        Op::Normalize { .. } => (2, 3),
        Op::Resample { .. } => (1, usize::MAX),
        Op::BatchNormalization { .. } => (5, 5),
        Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => (3, 3),
        Op::Concat { .. } => (1, usize::MAX),
        _ => (1, 1),
    }
}

fn check_arity(op: &Op, n: usize) -> Result<(), String> {
    let (lo, hi) = arity(op);
    if n < lo || n > hi {
        let want = if lo == hi {
            format!("{lo}")
        } else if hi == usize::MAX {
            format!("at least {lo}")
        } else {
            format!("{lo} to {hi}")
        };
        return Err(format!("takes {want} inputs, got {n}"));
    }
    Ok(())
}

fn too_many(shape: &[usize]) -> String {
    format!("the element count of {shape:?} overflows")
}

fn unsupported_dtype(op: &Op, dtype: DType) -> String {
    format!("{op} does not support element type {dtype}")
}

fn expect_float(op: &Op, t: &TensorType) -> Result<(), String> {
    if t.dtype.is_float() { Ok(()) } else { Err(unsupported_dtype(op, t.dtype)) }
}

fn expect_numeric(op: &Op, t: &TensorType) -> Result<(), String> {
    if t.dtype != DType::Bool { Ok(()) } else { Err(unsupported_dtype(op, t.dtype)) }
}

fn expect_8bit(op: &Op, t: &TensorType) -> Result<(), String> {
    if matches!(t.dtype, DType::I8 | DType::U8) { Ok(()) } else { Err(unsupported_dtype(op, t.dtype)) }
}

fn same_dtype(op: &Op, a: &TensorType, b: &TensorType) -> Result<(), String> {
    if a.dtype == b.dtype {
        Ok(())
    } else {
        Err(format!("{op} inputs must share one element type, got {} and {}", a.dtype, b.dtype))
    }
}

fn check_axis(axis: usize, rank: usize) -> Result<(), String> {
    if axis < rank { Ok(()) } else { Err(format!("axis {axis} out of range for rank {rank}")) }
}

/// A zero point must have its operand's dtype and a scalar, `[1]` or `[n]` shape for an allowed
/// `n` in `lens`.
fn check_zero_point(op: &Op, name: &str, operand: &TensorType, zp: &TensorType, lens: &[usize]) -> Result<(), String> {
    same_dtype(op, operand, zp).map_err(|_| format!("{name} must be {}, got {}", operand.dtype, zp.dtype))?;
    let ok = zp.rank() == 0 || (zp.rank() == 1 && lens.contains(&zp.shape[0]));
    if !ok {
        return Err(format!("{name} shape {:?} must be a scalar or one of {lens:?}", zp.shape));
    }
    Ok(())
}

fn check_quant_params(axis: QuantAxis, x: &[usize], scale: &TensorType, zp: &TensorType) -> Result<(), String> {
    // Per-tensor parameters may be 0-d or 1-element 1-d each (exporters mix the two).
    let single = |t: &TensorType| t.num_elements() == 1 && t.rank() <= 1;
    if scale.shape != zp.shape && !(axis == QuantAxis::PerTensor && single(scale) && single(zp)) {
        return Err(format!("scale {:?} and zero point {:?} shapes differ", scale.shape, zp.shape));
    }
    match axis {
        QuantAxis::PerTensor => {
            if !single(scale) {
                return Err(format!("per-tensor scale must be a scalar, got {:?}", scale.shape));
            }
        }
        QuantAxis::PerAxis { axis } => {
            check_axis(axis, x.len())?;
            if scale.shape != [x[axis]] {
                return Err(format!("per-axis scale shape {:?} must be [{}]", scale.shape, x[axis]));
            }
        }
        QuantAxis::Blocked { axis, block_size } => {
            check_axis(axis, x.len())?;
            if block_size == 0 {
                return Err("block_size must be positive".into());
            }
            let want: Vec<usize> =
                x.iter().enumerate().map(|(d, &n)| if d == axis { n.div_ceil(block_size) } else { n }).collect();
            if scale.shape != want {
                return Err(format!(
                    "blocked scale shape {:?} must be {want:?} for block size {block_size}",
                    scale.shape
                ));
            }
        }
    }
    Ok(())
}

/// Gather-style index tensors are i32 or i64.
fn expect_indices<'t>(op: &Op, t: &'t TensorType) -> Result<&'t TensorType, String> {
    if matches!(t.dtype, DType::I32 | DType::I64) {
        Ok(t)
    } else {
        Err(format!("{op} indices must be i32 or i64, got {}", t.dtype))
    }
}

/// GatherND's output shape: `indices.shape[..-1] ++ data.shape[batch_dims + k..]` where `k` is
/// the indices' last extent.
pub fn gather_nd_shape(data: &[usize], indices: &[usize], batch_dims: usize) -> Result<Vec<usize>, String> {
    let Some((&k, outer)) = indices.split_last() else {
        return Err("indices must have rank >= 1".into());
    };
    if batch_dims >= indices.len() || batch_dims + k > data.len() || data[..batch_dims] != indices[..batch_dims] {
        return Err(format!("indices {indices:?} do not index data {data:?} with batch_dims {batch_dims}"));
    }
    let mut out = outer.to_vec();
    out.extend_from_slice(&data[batch_dims + k..]);
    checked_elements(&out).ok_or_else(|| too_many(&out))?;
    Ok(out)
}

/// Multidirectional (numpy) broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(format!("shapes {a:?} and {b:?} do not broadcast ({x} vs {y})")),
        })
        .collect()
}

/// numpy matmul result shape: 1-d operands are promoted and the promoted axis removed again.
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul operands must have rank >= 1".into());
    }
    let a2: Vec<usize> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<usize> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != kb {
        return Err(format!("MatMul inner dimensions differ: {a:?} x {b:?}"));
    }
    let mut out = broadcast_shapes(&a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(out)
}

/// Output extent of a sliding window along one axis (floor or ceil mode). In ceil mode a last
/// window that would start inside the end padding is dropped, as ONNX and PyTorch do.
pub fn window_output_len(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    ceil_mode: bool,
) -> Result<usize, String> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return Err(format!("kernel {kernel}, stride {stride} and dilation {dilation} must be positive"));
    }
    let overflow = || format!("window (kernel {kernel}, dilation {dilation}, pads {pad_begin}+{pad_end}) overflows");
    let span = window_span(kernel, dilation).ok_or_else(overflow)?;
    let padded = padded_extent(input, pad_begin, pad_end).ok_or_else(overflow)?;
    if padded < span {
        return Err(format!("window of extent {span} does not fit in padded input of extent {padded}"));
    }
    let steps = padded - span;
    let mut out = if ceil_mode { steps.div_ceil(stride) + 1 } else { steps / stride + 1 };
    // (out - 1) * stride <= steps + stride - 1 can exceed usize; then the window starts beyond.
    if ceil_mode && (out - 1).checked_mul(stride).is_none_or(|start| start >= input + pad_begin) {
        out -= 1;
    }
    Ok(out)
}

/// The largest window span or padded extent: small enough that a tap position
/// `o * stride + k * dilation - pad` (each term at most this) never overflows `i64`.
pub const MAX_WINDOW_EXTENT: usize = 1 << 61;

/// Extent `dilation * (kernel - 1) + 1` of a dilated window, if at most [`MAX_WINDOW_EXTENT`].
pub fn window_span(kernel: usize, dilation: usize) -> Option<usize> {
    let span = dilation.checked_mul(kernel.checked_sub(1)?)?.checked_add(1)?;
    (span <= MAX_WINDOW_EXTENT).then_some(span)
}

/// `input + pad_begin + pad_end`, if at most [`MAX_WINDOW_EXTENT`].
pub fn padded_extent(input: usize, pad_begin: usize, pad_end: usize) -> Option<usize> {
    let padded = input.checked_add(pad_begin)?.checked_add(pad_end)?;
    (padded <= MAX_WINDOW_EXTENT).then_some(padded)
}

/// Output spatial extents of `window` slid over `spatial` input extents.
pub fn window_output_spatial(window: &Window, spatial: &[usize], ceil_mode: bool) -> Result<Vec<usize>, String> {
    let k = spatial.len();
    let lens = [
        ("kernel_shape", window.kernel.len()),
        ("strides", window.strides.len()),
        ("dilations", window.dilations.len()),
        ("pads", window.pads_begin.len()),
        ("pads", window.pads_end.len()),
    ];
    for (name, len) in lens {
        if len != k {
            return Err(format!("{name} has {len} entries for {k} spatial axes"));
        }
    }
    (0..k)
        .map(|d| {
            window_output_len(
                spatial[d],
                window.kernel[d],
                window.strides[d],
                window.dilations[d],
                window.pads_begin[d],
                window.pads_end[d],
                ceil_mode,
            )
        })
        .collect()
}

/// Output shape of a convolution of `x` (N, C, spatial...) with `w` (M, C/group, kernel...).
pub fn conv_output_shape(attrs: &ConvAttrs, x: &[usize], w: &[usize]) -> Result<Vec<usize>, String> {
    if x.len() < 3 || w.len() != x.len() {
        return Err(format!("input {x:?} and weight {w:?} must have equal rank >= 3"));
    }
    let g = attrs.group;
    if g == 0 || !x[1].is_multiple_of(g) || !w[0].is_multiple_of(g) || w[1].checked_mul(g) != Some(x[1]) {
        return Err(format!("input channels {} and weight shape {w:?} do not match group {g}", x[1]));
    }
    if attrs.window.kernel[..] != w[2..] {
        return Err(format!("kernel_shape {:?} differs from weight shape {w:?}", attrs.window.kernel));
    }
    let mut out = vec![x[0], w[0]];
    out.extend(window_output_spatial(&attrs.window, &x[2..], false)?);
    Ok(out)
}

/// Output shape of a pooling of `x` (N, C, spatial...).
pub fn pool_output_shape(attrs: &PoolAttrs, x: &[usize]) -> Result<Vec<usize>, String> {
    if x.len() < 3 {
        return Err(format!("input {x:?} must have rank >= 3"));
    }
    let mut out = vec![x[0], x[1]];
    out.extend(window_output_spatial(&attrs.window, &x[2..], attrs.ceil_mode)?);
    Ok(out)
}
