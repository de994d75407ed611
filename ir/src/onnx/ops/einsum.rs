//! Einsum as the graph ops it is made of: diagonals by an identity mask, letters no other term
//! needs summed out, and each pair of terms contracted as one batched MatMul (batch letters,
//! then the free letters of each side, then the summed ones), operands folded left to right.

use crate::dtype::DType;
use crate::graph::ValueId;
use crate::op::{BinaryOp, Op, ReduceOp};
use crate::tensor::Tensor;

use super::super::{ImportError, Importer};
use super::build::{constant, output, step};
use super::tensor_ops::input_id;
use super::{NodeCtx, input_type};

/// A tensor during the contraction: its value and one letter per axis.
#[derive(Clone)]
struct Term {
    value: ValueId,
    letters: Vec<char>,
}

/// Splits the equation into input terms and the output term, expanding `...` to letters that
/// do not occur elsewhere (right-aligned, numpy broadcasting).
fn parse(ctx: &NodeCtx<'_>, eq: &str, ranks: &[usize]) -> Result<(Vec<Vec<char>>, Vec<char>), ImportError> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err(ctx.bad(format!("equation '{eq}' has {} terms for {} inputs", terms.len(), ranks.len())));
    }
    let bad = |why: &str| ctx.bad_attr("equation", format!("'{eq}': {why}"));
    let spare: Vec<char> = ('A'..='Z').chain('a'..='z').filter(|c| !eq.contains(*c)).collect();
    let mut ellipsis_rank = 0;
    let mut parsed = Vec::new();
    for (t, &rank) in terms.iter().zip(ranks) {
        let named: Vec<char> = t.replace("...", "").chars().collect();
        if named.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(bad("terms hold letters and '...' only"));
        }
        let mut letters = Vec::new();
        if t.contains("...") {
            let e = rank.checked_sub(named.len()).ok_or_else(|| bad("a term has more letters than axes"))?;
            ellipsis_rank = ellipsis_rank.max(e);
            let (before, after) = t.split_once("...").expect("contains");
            letters.extend(before.chars());
            letters.extend(spare[spare.len() - e..].iter());
            letters.extend(after.chars());
        } else {
            letters = named;
        }
        if letters.len() != rank {
            return Err(bad(&format!("a term has {} letters for rank {rank}", letters.len())));
        }
        parsed.push(letters);
    }
    let broadcast: Vec<char> = spare[spare.len() - ellipsis_rank..].to_vec();
    let out = match rhs {
        Some(r) => {
            let mut out = Vec::new();
            let (before, after) = r.split_once("...").map_or((r.as_str(), ""), |(b, a)| (b, a));
            out.extend(before.chars());
            if r.contains("...") {
                out.extend(&broadcast);
            }
            out.extend(after.chars());
            if out.iter().any(|c| !c.is_ascii_alphabetic()) {
                return Err(bad("the output holds letters and '...' only"));
            }
            out
        }
        None => {
            // Implicit output: the broadcast axes, then the letters used once, alphabetically.
            let mut once: Vec<char> = parsed.iter().flatten().copied().filter(|c| !broadcast.contains(c)).collect();
            once.sort_unstable();
            let single: Vec<char> =
                once.iter().copied().filter(|c| once.iter().filter(|d| *d == c).count() == 1).collect();
            broadcast.iter().copied().chain(single).collect()
        }
    };
    Ok((parsed, out))
}

pub(super) fn import(im: &mut Importer<'_>, ctx: &NodeCtx<'_>) -> Result<(), ImportError> {
    let eq = ctx.string("equation", "")?;
    let n = (0..ctx.node.input.len()).filter(|&i| ctx.input(i).is_some()).count();
    let tys = (0..n).map(|i| input_type(im, ctx, i)).collect::<Result<Vec<_>, _>>()?;
    let (terms, out) = parse(ctx, &eq, &tys.iter().map(|t| t.rank()).collect::<Vec<_>>())?;
    let dtype = tys.first().ok_or_else(|| ctx.bad("needs at least one input"))?.dtype;
    let mut size = std::collections::HashMap::new();
    for (t, ty) in terms.iter().zip(&tys) {
        for (&c, &d) in t.iter().zip(&ty.shape) {
            let s = size.entry(c).or_insert(d);
            if *s != d && d != 1 && *s != 1 {
                return Err(ctx.bad(format!("letter '{c}' is {s} in one place and {d} in another")));
            }
            *s = (*s).max(d);
        }
    }
    if out.iter().any(|c| !size.contains_key(c)) {
        return Err(ctx.bad_attr("equation", format!("'{eq}': the output uses a letter no input has")));
    }
    let mut pending: Vec<Term> = Vec::new();
    for (i, letters) in terms.into_iter().enumerate() {
        let value = input_id(im, ctx, i)?;
        pending.push(diagonals(im, ctx, Term { value, letters }, dtype)?);
    }
    let mut acc = pending.remove(0);
    while !pending.is_empty() {
        let next = pending.remove(0);
        let later: Vec<char> =
            pending.iter().flat_map(|t| t.letters.iter().copied()).chain(out.iter().copied()).collect();
        let acc_only = sum_unneeded(im, ctx, acc, &later, &next.letters)?;
        let next_only = sum_unneeded(im, ctx, next, &later, &acc_only.letters)?;
        acc = contract(im, ctx, acc_only, next_only, &later, &size)?;
    }
    let acc = sum_unneeded(im, ctx, acc, &out, &[])?;
    // Transpose to the output order.
    let perm: Vec<usize> = out
        .iter()
        .map(|c| acc.letters.iter().position(|d| d == c).ok_or_else(|| ctx.bad("lost an output letter")))
        .collect::<Result<_, _>>()?;
    output(im, ctx, 0, Op::Transpose { perm }, &[acc.value])
}

/// Repeated letters within one term: the diagonal, by multiplying with an identity mask and
/// summing the second occurrence away.
fn diagonals(im: &mut Importer<'_>, ctx: &NodeCtx<'_>, mut t: Term, dtype: DType) -> Result<Term, ImportError> {
    while let Some((p, q)) = (0..t.letters.len())
        .flat_map(|p| (p + 1..t.letters.len()).map(move |q| (p, q)))
        .find(|&(p, q)| t.letters[p] == t.letters[q])
    {
        let shape = im.graph.ty(t.value).shape.clone();
        let n = shape[p];
        let mut mask_shape = vec![1; shape.len()];
        mask_shape[p] = n;
        mask_shape[q] = n;
        let eye = (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 }).collect();
        let eye = Tensor::from_vec::<f64>(&mask_shape, eye).map_err(|e| ctx.bad(e))?.cast(dtype);
        let mask = constant(im, ctx, "identity", eye);
        let masked = step(im, ctx, "diagonal_masked", Op::Binary(BinaryOp::Mul), &[t.value, mask])?;
        let value =
            step(im, ctx, "diagonal", Op::Reduce { op: ReduceOp::Sum, axes: vec![q], keepdims: false }, &[masked])?;
        t.letters.remove(q);
        t = Term { value, letters: t.letters };
    }
    Ok(t)
}

/// Sums out the letters of `t` that neither `keep` nor `other` has.
fn sum_unneeded(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    t: Term,
    keep: &[char],
    other: &[char],
) -> Result<Term, ImportError> {
    let axes: Vec<usize> =
        (0..t.letters.len()).filter(|&a| !keep.contains(&t.letters[a]) && !other.contains(&t.letters[a])).collect();
    if axes.is_empty() {
        return Ok(t);
    }
    let letters = (0..t.letters.len()).filter(|a| !axes.contains(a)).map(|a| t.letters[a]).collect();
    let value = step(im, ctx, "summed", Op::Reduce { op: ReduceOp::Sum, axes, keepdims: false }, &[t.value])?;
    Ok(Term { value, letters })
}

/// `a` and `b` contracted over their shared letters that `keep` lacks, as one batched MatMul.
fn contract(
    im: &mut Importer<'_>,
    ctx: &NodeCtx<'_>,
    a: Term,
    b: Term,
    keep: &[char],
    size: &std::collections::HashMap<char, usize>,
) -> Result<Term, ImportError> {
    let shared = |c: &char| a.letters.contains(c) && b.letters.contains(c);
    let batch: Vec<char> = a.letters.iter().copied().filter(|c| shared(c) && keep.contains(c)).collect();
    let summed: Vec<char> = a.letters.iter().copied().filter(|c| shared(c) && !keep.contains(c)).collect();
    let free_a: Vec<char> = a.letters.iter().copied().filter(|c| !shared(c)).collect();
    let free_b: Vec<char> = b.letters.iter().copied().filter(|c| !shared(c)).collect();
    let prod = |cs: &[char]| cs.iter().map(|c| size[c]).product::<usize>();
    // Each side in [batch, rows, cols] order, broadcast to full extents, as 3-d.
    let arrange =
        |im: &mut Importer<'_>, t: &Term, order: Vec<char>, shape3: Vec<usize>| -> Result<ValueId, ImportError> {
            let perm: Vec<usize> =
                order.iter().map(|c| t.letters.iter().position(|d| d == c).expect("has letter")).collect();
            let mut v = step(im, ctx, "einsum_order", Op::Transpose { perm }, &[t.value])?;
            let full: Vec<usize> = order.iter().map(|c| size[c]).collect();
            if im.graph.ty(v).shape != full {
                v = step(im, ctx, "einsum_broadcast", Op::Expand { shape: full }, &[v])?;
            }
            step(im, ctx, "einsum_3d", Op::Reshape { shape: shape3 }, &[v])
        };
    let (nb, ns) = (prod(&batch), prod(&summed));
    let a_order: Vec<char> = batch.iter().chain(&free_a).chain(&summed).copied().collect();
    let b_order: Vec<char> = batch.iter().chain(&summed).chain(&free_b).copied().collect();
    let a3 = arrange(im, &a, a_order, vec![nb, prod(&free_a), ns])?;
    let b3 = arrange(im, &b, b_order, vec![nb, ns, prod(&free_b)])?;
    let m = step(im, ctx, "einsum_matmul", Op::MatMul, &[a3, b3])?;
    let letters: Vec<char> = batch.iter().chain(&free_a).chain(&free_b).copied().collect();
    let shape: Vec<usize> = letters.iter().map(|c| size[c]).collect();
    let value = step(im, ctx, "einsum_result", Op::Reshape { shape }, &[m])?;
    Ok(Term { value, letters })
}
