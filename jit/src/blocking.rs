//! Which activations the CPU target stores channel-blocked (`NCHW{B}c`, `B` the kernels'
//! vector width: see `heron_kernels::blocked`), decided over the whole module before the kernel
//! pass rewrites any function. A pixel's channels are then one vector: depthwise convolutions
//! need no plane copies, pointwise ones store whole vectors, and a chain of convolutions never
//! reorders its tensors.
//!
//! A tensor of `main` is blocked when
//! - it has at least three quarters of a block of channels: fewer (LeNet's 6 or 8 with
//!   AVX-512's 16 lanes) would leave most of every vector idle, where the planar kernels put
//!   pixels in the lanes (LeNet-style models ran 1.2-1.8× faster planar on Zen 5; with AVX2's
//!   8 lanes, 6 channels stay blocked, the planar direct form being AVX-512 only);
//! - a convolution or pool kernel produces it (kernels write zeros into the lanes past the channels,
//!   so nothing stale ever sits there), or generated code produces it for a convolution and
//!   its channels fill whole blocks (no lanes past them), and it is neither an input nor an
//!   output of the model;
//! - every other function that touches it reads it with its shape: a convolution or pool
//!   kernel, or generated code (which reads it through the layout's index map) that takes no
//!   windows of it; GEMM and elementwise kernels index row-major tensors and keep them planar;
//! - the kernels agree: a depthwise kernel reads and writes the same layout, a residual has
//!   its output's layout, a pool writes blocked only what it reads blocked, and a layer
//!   Winograd computes faster (3×3, stride 1) keeps its tensors planar.
//!
//! A strided dense convolution between planar tensors, with taps in both directions, output
//! rows of 7 or more and three quarters of a block of output channels (a ResNet's downsampling
//! 3×3 between Winograd layers), runs the blocked kernel all the same, reading and writing them
//! planar.
//!
//! The decisions are layout transforms on `main`'s buffers, printed at the target stage; each
//! blocked convolution's call names its layouts.

use std::collections::{BTreeMap, HashMap, HashSet};

use heron_ir::DType;
use heron_ir::loop_ir::index_map::IndexMap;
use heron_ir::loop_ir::{Arg, BufferId, Call, Callee, Expr, Module, Stmt};
use heron_kernels::Isa;
use heron_kernels::blocked::{BlockedConv, Layout, block_for};
use heron_kernels::conv::ConvMethod;
use heron_kernels::pool::PoolKind;

use crate::kernels::{Found, Kernel, KernelConfig, Plan};

/// The decision: `main`'s blocked tensors; per function index the blocked convolution it
/// runs (one of its tensors, at least, blocked, or a strided one between planar tensors), or
/// the output layout of a pool reading a blocked input.
pub(crate) struct Blocking {
    pub block: usize,
    pub tensors: HashSet<BufferId>,
    pub convs: HashMap<usize, BlockedConv>,
    pub pools: HashMap<usize, Layout>,
}

/// `lambda n, c, h, w: [n, c // B, h, w, c % B]`.
pub(crate) fn blocked_map(block: usize) -> IndexMap {
    IndexMap::parse(&format!("lambda n, c, h, w: [n, c // {block}, h, w, c % {block}]")).expect("valid map")
}

/// A kernel plan's tensors in `main`: input, output and residual (when they are parameters
/// bound there).
struct KernelUse {
    func: usize,
    /// `None`: a pool.
    conv: Option<BlockedConv>,
    input: Option<BufferId>,
    output: Option<BufferId>,
    residual: Option<BufferId>,
    /// Computed faster planar (Winograd).
    planar: bool,
    /// An average pool: over a planar input it stays generated code, which may write a
    /// blocked output whose channels fill whole blocks.
    average: bool,
}

pub(crate) fn choose(module: &Module, main_index: usize, found: &[(usize, Found)], config: KernelConfig) -> Blocking {
    let block = block_for(config.isa);
    let mut none = Blocking { block, tensors: HashSet::new(), convs: HashMap::new(), pools: HashMap::new() };
    if config.isa == Isa::Scalar {
        return none;
    }
    let main = &module.funcs[main_index];
    let index_of: HashMap<&str, usize> = module.funcs.iter().enumerate().map(|(k, f)| (f.name.as_str(), k)).collect();
    let plans: HashMap<usize, &Found> = found.iter().map(|(k, p)| (*k, p)).collect();
    // The call of every function, in function order (the decision must not depend on hashing;
    // a function called more than once keeps planar tensors).
    let mut calls: BTreeMap<usize, Vec<Vec<Arg>>> = BTreeMap::new();
    main.body.walk(&mut |s| {
        if let Stmt::Evaluate(Call { callee: Callee::Func(name), args }) = s
            && let Some(&k) = index_of.get(name.as_str())
        {
            calls.entry(k).or_default().push(args.clone());
        }
    });
    let mut candidates: HashSet<BufferId> = HashSet::new();
    main.body.walk(&mut |s| {
        if let Stmt::Allocate { buffer, .. } = s
            && main.buffer(*buffer).shape.len() == 4
            && main.buffer(*buffer).dtype == DType::F32
            && fills_block(main.buffer(*buffer).shape[1], block)
        {
            candidates.insert(*buffer);
        }
    });
    let mut uses: Vec<KernelUse> = Vec::new();
    let mut produced: HashSet<BufferId> = HashSet::new();
    for (&k, args) in &calls {
        let f = &module.funcs[k];
        let [args] = &args[..] else {
            args.iter().flat_map(|a| a.iter()).for_each(|a| {
                if let Arg::Buffer(b) = a {
                    candidates.remove(b);
                }
            });
            continue;
        };
        let bound = |param: BufferId| {
            let pos = f.params.iter().position(|&p| p == param)?;
            match args.get(pos) {
                Some(Arg::Buffer(b)) => Some(*b),
                _ => None,
            }
        };
        let mut roles: Vec<BufferId> = Vec::new();
        let kernel_use = match plans.get(&k) {
            Some(Found::Contraction(plan)) => blockable(plan, block, config.isa).map(|(conv, planar, plan)| {
                let Kernel::Conv { input, .. } = &plan.kernel else { unreachable!("a convolution plan") };
                let residual = plan.fused.as_ref().and_then(|fused| fused.residual);
                roles.extend([*input, plan.out].into_iter().chain(residual));
                KernelUse {
                    func: k,
                    conv: Some(conv),
                    input: bound(*input),
                    output: bound(plan.out),
                    residual: residual.and_then(bound),
                    planar,
                    average: false,
                }
            }),
            Some(Found::Pool(pool)) => {
                roles.extend([pool.input, pool.out]);
                Some(KernelUse {
                    func: k,
                    conv: None,
                    input: bound(pool.input),
                    output: bound(pool.out),
                    residual: None,
                    planar: false,
                    average: pool.kind != PoolKind::Max,
                })
            }
            _ => None,
        };
        let takes_blocked = kernel_use.is_some();
        if let Some(use_) = kernel_use {
            produced.extend(use_.output);
            uses.push(use_);
        }
        for (pos, a) in args.iter().enumerate() {
            let Arg::Buffer(b) = a else { continue };
            if !candidates.contains(b) {
                continue;
            }
            let Some(&param) = f.params.get(pos) else { continue };
            let same_shape = f.buffer(param).shape == main.buffer(*b).shape;
            // Generated code reads and writes it through the index map; a kernel of another
            // kind indexes it row-major. Generated code writes it only when its channels fill
            // whole blocks: no lanes past them are left stale.
            let other_kernel = plans.contains_key(&k) && !takes_blocked;
            let whole_blocks = main.buffer(*b).shape.get(1).is_some_and(|&c| c % block == 0);
            // Generated code reading it at computed offsets (the taps of a pool too large for
            // the pool kernels' matchers) would take
            // `// B` and `% B` for every tap, and the bounds checks with them (measured 5x
            // slower).
            let generated_windows = !plans.contains_key(&k) && reads_windows(f, param);
            let ok = same_shape
                && (roles.contains(&param)
                    || !(other_kernel || generated_windows || (writes(f, param) && !whole_blocks)));
            if !ok {
                candidates.remove(b);
            }
        }
    }
    // Blocked: what a kernel produces, and what generated code produces for a convolution
    // (which then reads whole vectors; e.g. a squeeze-excitation's scaled tensor).
    let conv_inputs: HashSet<BufferId> = uses.iter().filter(|u| u.conv.is_some()).filter_map(|u| u.input).collect();
    candidates.retain(|b| (produced.contains(b) || conv_inputs.contains(b)) && !main.params.contains(b));
    // Constraints between a convolution's tensors, until nothing changes.
    loop {
        let mut changed = false;
        for c in &uses {
            let is = |b: Option<BufferId>| b.is_some_and(|b| candidates.contains(&b));
            let (x, y, r) = (is(c.input), is(c.output), is(c.residual));
            let mut drop = |b: Option<BufferId>| {
                if let Some(b) = b {
                    changed |= candidates.remove(&b);
                }
            };
            let depthwise = c.conv.is_some_and(|conv| conv.geo.is_depthwise());
            if c.planar || (depthwise && x != y) {
                drop(c.input);
                drop(c.output);
                drop(c.residual);
            }
            // A pool over a planar input has no blocked kernel; an average pool's generated
            // code writes a blocked output only in whole blocks (no stale lanes past them).
            let whole_blocks =
                |b: Option<BufferId>| b.is_some_and(|b| main.buffer(b).shape.get(1).is_some_and(|c| c % block == 0));
            if c.conv.is_none() && !x && !(c.average && whole_blocks(c.output)) {
                drop(c.output);
            }
            if c.residual.is_some() && r != y {
                drop(c.output);
                drop(c.residual);
            }
        }
        if !changed {
            break;
        }
    }
    for c in uses {
        let is = |b: Option<BufferId>| b.is_some_and(|b| candidates.contains(&b));
        let layout = |blocked: bool| if blocked { Layout::Blocked } else { Layout::Planar };
        let (x, y) = (is(c.input), is(c.output));
        match c.conv {
            Some(conv) if x || y || strided_faster_blocked(&conv) => {
                none.convs.insert(c.func, BlockedConv { input: layout(x), output: layout(y), ..conv });
            }
            None if x => {
                none.pools.insert(c.func, layout(y));
            }
            _ => {}
        }
    }
    none.tensors = candidates;
    none
}

/// The blocked convolution a plan could run (f32, one group or depthwise), and whether its
/// planar kernel is faster (Winograd).
fn blockable(plan: &Plan, block: usize, isa: Isa) -> Option<(BlockedConv, bool, &Plan)> {
    let Kernel::Conv { geo, .. } = &plan.kernel else { return None };
    if plan.quant.is_some() {
        return None;
    }
    let conv = BlockedConv { geo: *geo, block, input: Layout::Blocked, output: Layout::Blocked };
    if !(geo.groups == 1 || geo.is_depthwise()) || conv.check().is_err() {
        return None;
    }
    Some((conv, geo.method(isa) == ConvMethod::Winograd, plan))
}

/// Whether a dense convolution between planar tensors runs faster as the blocked kernel
/// reading and writing them planar: strided layers with taps in both directions, output rows
/// of 7 or more and at least three quarters of a block of output channels (fewer leave the
/// blocked kernel's lanes idle, as for blocked tensors). Broadcasting the input beats the
/// planar forms' pixel lanes there, whose rows of half a vector or so waste lanes and whose
/// im2col panels cost a strided gather (Zen 5, 1 thread: 3×3/2 64→128 to 20×20 0.47 → 0.29
/// ms, to 28×28 0.71 → 0.54, 128→256 to 14×14 0.70 → 0.62, 256→512 to 7×7 0.70 → 0.60; to
/// 5×5 the GEMM form was faster, measured before the blocked kernel widened small inputs,
/// not since). Winograd layers are stride 1, so never among them.
fn strided_faster_blocked(conv: &BlockedConv) -> bool {
    let g = &conv.geo;
    g.groups == 1
        && g.stride.0 > 1
        && g.stride.1 > 1
        && g.kernel.0 > 1
        && g.kernel.1 > 1
        && g.out_w >= 7
        && fills_block(g.out_channels, conv.block)
}

/// Whether `channels` fill at least three quarters of a block: fewer leave most of every
/// vector of a blocked kernel idle (see the module doc).
fn fills_block(channels: usize, block: usize) -> bool {
    4 * channels >= 3 * block
}

/// Whether `f` loads `b` at an index that is more than a variable or a constant: a window's tap
/// (`y + r - 1`), a slice's offset, a resize's `h / 2`; elementwise code and global reductions
/// index with variables only.
fn reads_windows(f: &heron_ir::loop_ir::PrimFunc, b: BufferId) -> bool {
    fn visit(e: &Expr, b: BufferId, found: &mut bool) {
        if let Expr::Load { buffer, indices } = e
            && *buffer == b
            && indices.iter().any(|i| !matches!(i, Expr::Var(_) | Expr::Int { .. }))
        {
            *found = true;
        }
        e.for_each_child(|c| visit(c, b, found));
    }
    let mut found = false;
    f.body.walk(&mut |s| s.for_each_expr(|e| visit(e, b, &mut found)));
    found
}

/// Whether `f` stores to its buffer `b` or hands it to a call (which may).
fn writes(f: &heron_ir::loop_ir::PrimFunc, b: BufferId) -> bool {
    let mut written = false;
    f.body.walk(&mut |s| match s {
        Stmt::Store { buffer, .. } if *buffer == b => written = true,
        Stmt::Evaluate(call) if call.args.iter().any(|a| matches!(a, Arg::Buffer(x) if *x == b)) => written = true,
        _ => {}
    });
    written
}
