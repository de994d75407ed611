//! VTA's packed layouts as index maps, derived from the hardware configuration (the buffer
//! layout seed): the layout pass rearranges constants and rewrites every CPU access through
//! them, so CPU operators next to a region read and write the packed tensors directly and no
//! conversion runs at region boundaries. Channel counts that are not whole blocks are padded
//! (the map's splits do not divide; padded weights are zero, so whatever the padded input
//! lanes hold adds nothing).

use heron_ir::Tensor;
use heron_ir::loop_ir::IndexMap;
use heron_vta::HwConfig;

fn parse(text: &str) -> IndexMap {
    IndexMap::parse(text).expect("the packed-layout maps are well formed")
}

/// `NCHW -> NCHW{BATCH}n{BLOCK}c` (rank 4) or `NC -> NC{BATCH}n{BLOCK}c` (rank 2).
pub fn activation_map(rank: usize, c: &HwConfig) -> Option<IndexMap> {
    let (b, k) = (c.batch(), c.block_out());
    match rank {
        4 => Some(parse(&format!("lambda n, c, h, w: [n // {b}, c // {k}, h, w, n % {b}, c % {k}]"))),
        2 => Some(parse(&format!("lambda n, c: [n // {b}, c // {k}, n % {b}, c % {k}]"))),
        _ => None,
    }
}

/// Convolution weights `OIHW -> OIHW{BLOCK_OUT}o{BLOCK_IN}i`.
pub fn conv_weight_map(c: &HwConfig) -> IndexMap {
    let (bo, bi) = (c.block_out(), c.block_in());
    parse(&format!("lambda o, i, h, w: [o // {bo}, i // {bi}, h, w, o % {bo}, i % {bi}]"))
}

/// Dense weights `[K, N]` (MatMul's right operand) transposed and packed like a 1x1
/// convolution's: `[N/BO][K/BI][BO][BI]`.
pub fn dense_weight_map(c: &HwConfig) -> IndexMap {
    let (bo, bi) = (c.block_out(), c.block_in());
    parse(&format!("lambda k, n: [n // {bo}, k // {bi}, n % {bo}, k % {bi}]"))
}

/// Per-channel int32 biases as accumulator elements `[O/BO][BATCH][BO]`, each replicated over
/// the batch lanes (which no index map expresses: one logical value, several places), padded
/// with zeros.
pub fn packed_bias(bias: &Tensor, channels: usize, c: &HwConfig) -> Tensor {
    let (b, bo) = (c.batch(), c.block_out());
    let blocks = channels.div_ceil(bo);
    let values = bias.to_i64_vec().unwrap_or_default();
    let mut out = vec![0i32; blocks * b * bo];
    for (o, &v) in values.iter().enumerate().take(channels) {
        for lane in 0..b {
            out[((o / bo) * b + lane) * bo + o % bo] = v as i32;
        }
    }
    Tensor::from_vec(&[blocks, b, bo], out).expect("shape matches the data")
}
