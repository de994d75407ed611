//! Named layouts used by the compiler, as [`IndexMap`]s over logical NCHW / OIHW / (M, K)
//! indices.
//!
//! - [`axis_blocked`]: one axis split into blocks, the position inside a block innermost (NCHWc
//!   for axis 1; the CPU's int8 dot products use it).
//! - The VTA packed layouts (`shared/vta/VTA-FACTS.md` §1.4): tensors tiled so the innermost
//!   block is one SRAM element — NCHW1n16c data, OIHW16o16i kernels, and the GEMM tilings.

use super::IndexMap;

fn parse(text: String) -> IndexMap {
    IndexMap::parse(&text).expect("layout constructors produce valid maps")
}

/// Axis `axis` of a rank-`rank` tensor split into blocks of `block`, the position inside a
/// block innermost: `[d0, .., d_axis // block, .., d_last, d_axis % block]`.
pub fn axis_blocked(rank: usize, axis: usize, block: usize) -> IndexMap {
    let names: Vec<String> = (0..rank).map(|k| format!("d{k}")).collect();
    let mut out: Vec<String> =
        names.iter().enumerate().map(|(k, d)| if k == axis { format!("{d} // {block}") } else { d.clone() }).collect();
    out.push(format!("{} % {block}", names[axis]));
    parse(format!("lambda {}: [{}]", names.join(", "), out.join(", ")))
}

/// VTA conv data NCHW -> (N/batch, C/block_in, H, W, batch, block_in); NCHW1n16c by default.
pub fn vta_conv_data(batch: usize, block_in: usize) -> IndexMap {
    parse(format!("lambda n, c, h, w: [n // {batch}, c // {block_in}, h, w, n % {batch}, c % {block_in}]"))
}

/// VTA conv kernel OIHW -> (O/block_out, I/block_in, KH, KW, block_out, block_in); OIHW16o16i.
pub fn vta_conv_kernel(block_out: usize, block_in: usize) -> IndexMap {
    parse(format!("lambda o, i, h, w: [o // {block_out}, i // {block_in}, h, w, o % {block_out}, i % {block_in}]"))
}

/// VTA GEMM data (batch, in) -> (batch/BATCH, in/BLOCK_IN, BATCH, BLOCK_IN); also the result
/// layout with BLOCK_OUT in place of BLOCK_IN.
pub fn vta_gemm_data(batch: usize, block: usize) -> IndexMap {
    parse(format!("lambda b, k: [b // {batch}, k // {block}, b % {batch}, k % {block}]"))
}

/// VTA GEMM weight (out, in) -> (out/BLOCK_OUT, in/BLOCK_IN, BLOCK_OUT, BLOCK_IN).
pub fn vta_gemm_weight(block_out: usize, block_in: usize) -> IndexMap {
    parse(format!("lambda o, k: [o // {block_out}, k // {block_in}, o % {block_out}, k % {block_in}]"))
}
