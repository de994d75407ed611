//! RNN, GRU and LSTM (every direction, layout, activation, clip, `input_forget`,
//! `linear_before_reset`, peepholes, initial states, constant sequence lengths), unrolled over
//! the static sequence length into graph nodes: one MatMul of the whole sequence by the input
//! weights, then per step the recurrent MatMul, the gates and the state update.

use crate::dtype::DType;
use crate::graph::ValueId;
use crate::op::{Activation, BinaryOp, Op, UnaryOp};
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::build::{constant, output, scalar, slice_axis, step, wants};
use super::tensor_ops::input_id;
use super::{NodeCtx, const_input, input_type};

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

/// An activation function by its ONNX RNN name, with its alpha and beta.
struct Act {
    name: String,
    alpha: Option<f32>,
    beta: Option<f32>,
}

fn apply(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, a: &Act, x: ValueId, dtype: DType) -> Result<ValueId, ImportError> {
    let (alpha, beta) = (a.alpha, a.beta);
    let op = match a.name.to_ascii_lowercase().as_str() {
        "sigmoid" => Op::Unary(UnaryOp::Sigmoid),
        "tanh" => Op::Unary(UnaryOp::Tanh),
        "relu" => Op::Unary(UnaryOp::Relu),
        "softsign" => Op::Unary(UnaryOp::Softsign),
        "softplus" => Op::Unary(UnaryOp::Softplus),
        "leakyrelu" => Op::LeakyRelu { alpha: alpha.unwrap_or(0.01) },
        "thresholdedrelu" => Op::Activation(Activation::ThresholdedRelu { alpha: alpha.unwrap_or(1.0) }),
        "hardsigmoid" => {
            Op::Activation(Activation::HardSigmoid { alpha: alpha.unwrap_or(0.2), beta: beta.unwrap_or(0.5) })
        }
        "elu" => Op::Activation(Activation::Elu { alpha: alpha.unwrap_or(1.0) }),
        "affine" | "scaledtanh" => {
            let (alpha, beta) = (
                alpha.unwrap_or(1.0) as f64,
                beta.unwrap_or(if a.name.eq_ignore_ascii_case("affine") { 0.0 } else { 1.0 }) as f64,
            );
            let (ca, cb) = (scalar(im, ctx, "act_alpha", dtype, alpha), scalar(im, ctx, "act_beta", dtype, beta));
            if a.name.eq_ignore_ascii_case("affine") {
                let m = step(im, ctx, "affine_scaled", Op::Binary(BinaryOp::Mul), &[x, ca])?;
                return step(im, ctx, "affine", Op::Binary(BinaryOp::Add), &[m, cb]);
            }
            let m = step(im, ctx, "scaled_tanh_in", Op::Binary(BinaryOp::Mul), &[x, cb])?;
            let t = step(im, ctx, "scaled_tanh_t", Op::Unary(UnaryOp::Tanh), &[m])?;
            return step(im, ctx, "scaled_tanh", Op::Binary(BinaryOp::Mul), &[t, ca]);
        }
        other => return Err(ctx.bad_attr("activations", format!("unknown activation '{other}'"))),
    };
    step(im, ctx, "act", op, &[x])
}

/// `x[.., start..start + len]` along the last axis.
fn cols(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    x: ValueId,
    start: usize,
    len: usize,
) -> Result<ValueId, ImportError> {
    let last = im.graph.ty(x).rank() - 1;
    slice_axis(im, ctx, "gate", x, last, start, len)
}

/// Direction `d` of a `[dirs, ...]` tensor.
fn direction(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, x: ValueId, d: usize) -> Result<ValueId, ImportError> {
    let at = scalar(im, ctx, "direction", DType::I64, d as f64);
    step(im, ctx, "per_direction", Op::Gather { axis: 0 }, &[x, at])
}

fn bin(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId, ImportError> {
    step(im, ctx, "cell", Op::Binary(op), &[a, b])
}

pub(super) fn import(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let cell = match ctx.node.op_type.as_str() {
        "RNN" => Cell::Rnn,
        "GRU" => Cell::Gru,
        _ => Cell::Lstm,
    };
    let gates = match cell {
        Cell::Rnn => 1,
        Cell::Gru => 3,
        Cell::Lstm => 4,
    };
    let x_ty = input_type(im, ctx, 0)?;
    let w_ty = input_type(im, ctx, 1)?;
    let dtype = x_ty.dtype;
    if !dtype.is_float() || x_ty.rank() != 3 || w_ty.rank() != 3 {
        return Err(ctx.bad(format!("X {x_ty} and W {w_ty} must be 3-d floats")));
    }
    let layout = ctx.version >= 14 && ctx.flag("layout", false)?;
    let direction_name = ctx.string("direction", "forward")?;
    let dirs = match direction_name.as_str() {
        "forward" | "reverse" => 1,
        "bidirectional" => 2,
        other => return Err(ctx.bad_attr("direction", format!("unknown direction '{other}'"))),
    };
    let hidden = w_ty.shape[1] / gates;
    let declared = ctx.int("hidden_size", hidden as i64)?;
    if w_ty.shape[0] != dirs || w_ty.shape[1] != gates * hidden || declared != hidden as i64 {
        return Err(ctx.bad(format!("W {w_ty} does not hold {dirs} directions of {gates} gates of {declared} units")));
    }
    let mut x = input_id(im, ctx, 0)?;
    if layout {
        x = step(im, ctx, "time_major", Op::Transpose { perm: vec![1, 0, 2] }, &[x])?;
    }
    let [seq, batch, _] = <[usize; 3]>::try_from(im.graph.ty(x).shape.clone()).expect("3-d");
    // Per-batch valid lengths: compile-time values only (they decide which steps run).
    let lens: Option<Vec<usize>> = match ctx.input(4) {
        None => None,
        Some(_) => {
            let t = const_input(im, ctx, 4, "sequence_lens")?.expect("present");
            let v = t.to_i64_vec().ok_or_else(|| ctx.bad("sequence_lens must be integers"))?;
            if v.len() != batch || v.iter().any(|&l| l < 0 || l as usize > seq) {
                return Err(ctx.bad(format!("sequence_lens {v:?} must be {batch} lengths up to {seq}")));
            }
            Some(v.iter().map(|&l| l as usize).collect()).filter(|v: &Vec<usize>| v.iter().any(|&l| l != seq))
        }
    };
    if lens.is_some() && direction_name != "forward" {
        return Err(ctx.bad("sequences of different lengths are supported in the forward direction only"));
    }
    let clip = ctx.attr("clip", super::at::FLOAT)?.map(|a| a.f);
    let input_forget = cell == Cell::Lstm && ctx.flag("input_forget", false)?;
    let linear_before_reset = cell == Cell::Gru && ctx.flag("linear_before_reset", false)?;
    let per_dir = match cell {
        Cell::Rnn => 1,
        Cell::Gru => 2,
        Cell::Lstm => 3,
    };
    let defaults: &[&str] = match cell {
        Cell::Rnn => &["Tanh", "Tanh"],
        Cell::Gru => &["Sigmoid", "Tanh", "Sigmoid", "Tanh"],
        Cell::Lstm => &["Sigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Tanh"],
    };
    let names: Vec<String> = match ctx.attr("activations", super::at::STRINGS)? {
        Some(a) => a.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        None => defaults.iter().map(|s| s.to_string()).collect(),
    };
    if names.len() < per_dir * dirs {
        return Err(ctx.bad_attr("activations", format!("need {} names, got {}", per_dir * dirs, names.len())));
    }
    let alphas = ctx.floats("activation_alpha")?.unwrap_or_default();
    let betas = ctx.floats("activation_beta")?.unwrap_or_default();
    let acts: Vec<Act> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Act { name: n.clone(), alpha: alphas.get(i).copied(), beta: betas.get(i).copied() })
        .collect();
    let (w_all, r_all) = (input_id(im, ctx, 1)?, input_id(im, ctx, 2)?);
    let zeros = |im: &mut Importer<'_>, what: &str, shape: &[usize]| {
        constant(im, ctx, what, Tensor::zeros(&crate::dtype::TensorType::new(dtype, shape.to_vec())))
    };
    let b_all = match ctx.input(3) {
        Some(_) => input_id(im, ctx, 3)?,
        None => zeros(im, "bias", &[dirs, 2 * gates * hidden]),
    };
    let state = |im: &mut Importer<'_>, i: usize, what: &str| -> Result<ValueId, ImportError> {
        match ctx.input(i) {
            Some(_) => {
                let s = input_id(im, ctx, i)?;
                if layout { step(im, ctx, what, Op::Transpose { perm: vec![1, 0, 2] }, &[s]) } else { Ok(s) }
            }
            None => Ok(zeros(im, what, &[dirs, batch, hidden])),
        }
    };
    let h0_all = state(im, 5, "initial_h")?;
    let c0_all = if cell == Cell::Lstm { Some(state(im, 6, "initial_c")?) } else { None };
    let p_all = if cell == Cell::Lstm && ctx.input(7).is_some() { Some(input_id(im, ctx, 7)?) } else { None };
    let one = scalar(im, ctx, "one", dtype, 1.0);
    let zero = scalar(im, ctx, "zero", dtype, 0.0);
    let clip_gates = |im: &mut Importer<'_>, g: ValueId| -> Result<ValueId, ImportError> {
        match clip {
            Some(c) => step(
                im,
                ctx,
                "clipped",
                Op::Clip {
                    min: Some(Tensor::scalar_from_f64(dtype, -(c as f64))),
                    max: Some(Tensor::scalar_from_f64(dtype, c as f64)),
                },
                &[g],
            ),
            None => Ok(g),
        }
    };
    let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..dirs {
        let reverse = direction_name == "reverse" || d == 1;
        let act = &acts[d * per_dir..(d + 1) * per_dir];
        let w = direction(im, ctx, w_all, d)?;
        let wt = step(im, ctx, "w_t", Op::Transpose { perm: vec![1, 0] }, &[w])?;
        let r = direction(im, ctx, r_all, d)?;
        let rt = step(im, ctx, "r_t", Op::Transpose { perm: vec![1, 0] }, &[r])?;
        let b = direction(im, ctx, b_all, d)?;
        let wb = cols(im, ctx, b, 0, gates * hidden)?;
        let rb = cols(im, ctx, b, gates * hidden, gates * hidden)?;
        // The input projection of every step at once: [seq, batch, gates * hidden].
        let xw = step(im, ctx, "x_w", Op::MatMul, &[x, wt])?;
        let xw = bin(im, ctx, BinaryOp::Add, xw, wb)?;
        let mut h = direction(im, ctx, h0_all, d)?;
        let mut c = match c0_all {
            Some(c0) => Some(direction(im, ctx, c0, d)?),
            None => None,
        };
        let peep = match p_all {
            Some(p) => {
                let p = direction(im, ctx, p, d)?;
                Some([
                    cols(im, ctx, p, 0, hidden)?,
                    cols(im, ctx, p, hidden, hidden)?,
                    cols(im, ctx, p, 2 * hidden, hidden)?,
                ])
            }
            None => None,
        };
        let mut outs: Vec<ValueId> = vec![zero; seq];
        for k in 0..seq {
            let t = if reverse { seq - 1 - k } else { k };
            let at = scalar(im, ctx, "t", DType::I64, t as f64);
            let xt = step(im, ctx, "x_t", Op::Gather { axis: 0 }, &[xw, at])?;
            let (h_new, c_new) = match cell {
                Cell::Rnn => {
                    let hr = step(im, ctx, "h_r", Op::MatMul, &[h, rt])?;
                    let hr = bin(im, ctx, BinaryOp::Add, hr, rb)?;
                    let g = bin(im, ctx, BinaryOp::Add, xt, hr)?;
                    let g = clip_gates(im, g)?;
                    (apply(im, ctx, &act[0], g, dtype)?, None)
                }
                Cell::Gru => {
                    // z and r from both projections; the candidate per linear_before_reset.
                    let rzr = cols(im, ctx, rt, 0, 2 * hidden)?;
                    let hr = step(im, ctx, "h_r", Op::MatMul, &[h, rzr])?;
                    let rb_zr = cols(im, ctx, rb, 0, 2 * hidden)?;
                    let hr = bin(im, ctx, BinaryOp::Add, hr, rb_zr)?;
                    let xzr = cols(im, ctx, xt, 0, 2 * hidden)?;
                    let zr = bin(im, ctx, BinaryOp::Add, xzr, hr)?;
                    let zr = clip_gates(im, zr)?;
                    let zr = apply(im, ctx, &act[0], zr, dtype)?;
                    let (z, rg) = (cols(im, ctx, zr, 0, hidden)?, cols(im, ctx, zr, hidden, hidden)?);
                    let rh = cols(im, ctx, rt, 2 * hidden, hidden)?;
                    let rbh = cols(im, ctx, rb, 2 * hidden, hidden)?;
                    let xh = cols(im, ctx, xt, 2 * hidden, hidden)?;
                    let inner = if linear_before_reset {
                        let hh = step(im, ctx, "h_rh", Op::MatMul, &[h, rh])?;
                        let hh = bin(im, ctx, BinaryOp::Add, hh, rbh)?;
                        bin(im, ctx, BinaryOp::Mul, rg, hh)?
                    } else {
                        let reset = bin(im, ctx, BinaryOp::Mul, rg, h)?;
                        let hh = step(im, ctx, "h_rh", Op::MatMul, &[reset, rh])?;
                        bin(im, ctx, BinaryOp::Add, hh, rbh)?
                    };
                    let cand = bin(im, ctx, BinaryOp::Add, xh, inner)?;
                    let cand = clip_gates(im, cand)?;
                    let cand = apply(im, ctx, &act[1], cand, dtype)?;
                    // H = (1 - z) * candidate + z * H.
                    let keep = bin(im, ctx, BinaryOp::Sub, one, z)?;
                    let a = bin(im, ctx, BinaryOp::Mul, keep, cand)?;
                    let b2 = bin(im, ctx, BinaryOp::Mul, z, h)?;
                    (bin(im, ctx, BinaryOp::Add, a, b2)?, None)
                }
                Cell::Lstm => {
                    let c_prev = c.expect("LSTM has a cell state");
                    let hr = step(im, ctx, "h_r", Op::MatMul, &[h, rt])?;
                    let hr = bin(im, ctx, BinaryOp::Add, hr, rb)?;
                    let g = bin(im, ctx, BinaryOp::Add, xt, hr)?;
                    let g = clip_gates(im, g)?;
                    // Gates in ONNX order: input, output, forget, cell.
                    let mut gi = cols(im, ctx, g, 0, hidden)?;
                    let mut go = cols(im, ctx, g, hidden, hidden)?;
                    let mut gf = cols(im, ctx, g, 2 * hidden, hidden)?;
                    let gc = cols(im, ctx, g, 3 * hidden, hidden)?;
                    if let Some([pi, _, pf]) = peep {
                        let ti = bin(im, ctx, BinaryOp::Mul, pi, c_prev)?;
                        gi = bin(im, ctx, BinaryOp::Add, gi, ti)?;
                        let tf = bin(im, ctx, BinaryOp::Mul, pf, c_prev)?;
                        gf = bin(im, ctx, BinaryOp::Add, gf, tf)?;
                    }
                    let i = apply(im, ctx, &act[0], gi, dtype)?;
                    let f = if input_forget {
                        bin(im, ctx, BinaryOp::Sub, one, i)?
                    } else {
                        apply(im, ctx, &act[0], gf, dtype)?
                    };
                    let cand = apply(im, ctx, &act[1], gc, dtype)?;
                    let kept = bin(im, ctx, BinaryOp::Mul, f, c_prev)?;
                    let added = bin(im, ctx, BinaryOp::Mul, i, cand)?;
                    let c_new = bin(im, ctx, BinaryOp::Add, kept, added)?;
                    if let Some([_, po, _]) = peep {
                        let to = bin(im, ctx, BinaryOp::Mul, po, c_new)?;
                        go = bin(im, ctx, BinaryOp::Add, go, to)?;
                    }
                    let o = apply(im, ctx, &act[0], go, dtype)?;
                    let hc = apply(im, ctx, &act[2], c_new, dtype)?;
                    (bin(im, ctx, BinaryOp::Mul, o, hc)?, Some(c_new))
                }
            };
            // Finished sequences keep their state and output zeros.
            let (h_next, c_next, y) = match &lens {
                Some(lens) => {
                    let live: Vec<bool> = lens.iter().map(|&l| t < l).collect();
                    let live = constant(im, ctx, "live", Tensor::from_vec(&[batch, 1], live).map_err(|e| ctx.bad(e))?);
                    let hn = step(im, ctx, "h_kept", Op::Where, &[live, h_new, h])?;
                    let cn = match (c_new, c) {
                        (Some(cn), Some(cp)) => Some(step(im, ctx, "c_kept", Op::Where, &[live, cn, cp])?),
                        _ => None,
                    };
                    (hn, cn, step(im, ctx, "y_t", Op::Where, &[live, h_new, zero])?)
                }
                None => (h_new, c_new, h_new),
            };
            h = h_next;
            c = c_next;
            outs[t] = step(im, ctx, "y_t", Op::Unsqueeze { axes: vec![0, 1] }, &[y])?;
        }
        ys.push(if seq == 1 { outs[0] } else { step(im, ctx, "y_dir", Op::Concat { axis: 0 }, &outs)? });
        hs.push(step(im, ctx, "h_dir", Op::Unsqueeze { axes: vec![0] }, &[h])?);
        if let Some(c) = c {
            cs.push(step(im, ctx, "c_dir", Op::Unsqueeze { axes: vec![0] }, &[c])?);
        }
    }
    let join = |im: &mut Importer<'_>, parts: &[ValueId], axis: usize| -> Result<ValueId, ImportError> {
        if parts.len() == 1 { Ok(parts[0]) } else { step(im, ctx, "directions", Op::Concat { axis }, parts) }
    };
    if seq == 0 {
        return Err(ctx.bad("the sequence is empty"));
    }
    let y = join(im, &ys, 1)?;
    let yh = join(im, &hs, 0)?;
    let (y_perm, s_perm) = (vec![2, 0, 1, 3], vec![1, 0, 2]);
    let finish = |im: &mut Importer<'_>, i: usize, v: ValueId, perm: &[usize]| -> Result<(), ImportError> {
        if !wants(ctx, i) {
            return Ok(());
        }
        if layout {
            output(im, ctx, i, Op::Transpose { perm: perm.to_vec() }, &[v])
        } else {
            output(im, ctx, i, Op::Identity, &[v])
        }
    };
    finish(im, 0, y, &y_perm)?;
    finish(im, 1, yh, &s_perm)?;
    if cell == Cell::Lstm {
        let yc = join(im, &cs, 0)?;
        finish(im, 2, yc, &s_perm)?;
    }
    Ok(())
}
