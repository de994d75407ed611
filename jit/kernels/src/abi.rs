//! The `extern "C"` entry points generated code calls (`call extern "heron_conv2d_f32_v4"(...)`
//! in loop IR, through the run context's routine table), each inside a parallel loop over
//! `task in 0..tasks`: a call computes its task's share (see [`crate::conv::conv2d_share`],
//! [`crate::gemm::sgemm_share`], [`crate::pool::max_pool2d_share`]). Shapes arrive as integers, the epilogue as [`flags`] and
//! clamp bounds.
//!
//! The CPU target emits these calls only with shapes it checked against the buffers it
//! passes; the entry points check the shapes again (consistency, overflow) and do nothing
//! when they are wrong, but they trust each pointer to hold what the shapes say, as any
//! routine does (`heron_jit::routines`).

use crate::Isa;
use crate::blocked::{BlockedConv, Layout};
use crate::conv::{Conv2d, ConvEpilogue, conv2d_share};
use crate::elementwise::{MAX_INPUTS, MapOp, Operand, Program, Tail, TailOperand, map_raw};
use crate::gemm::{Epilogue, sgemm_share};
use crate::pool::{Divisor, PoolKind, max_pool2d_share, pool2d_blocked_share, window_from_dims};
use crate::qgemm::{self, Bytes, Int8Isa};
use crate::softmax::{SoftmaxShape, softmax_share};

/// Routine names. A name stands for a signature and a packing of the weights (objects built
/// earlier call routines by name): the planar convolution is `_v4` since it applies an
/// activation (two constants after `tasks`); its Winograd weights are packed group by group in
/// the orientation that fills each ISA's lanes.
pub const CONV2D_F32: &str = "heron_conv2d_f32_v4";
/// The GEMM is `_v2` since it applies an activation (two constants after `tasks`).
pub const GEMM_F32: &str = "heron_gemm_f32_v2";
pub const MAXPOOL2D_F32: &str = "heron_maxpool2d_f32";
pub const MAP_F32: &str = "heron_map_f32";
pub const CONV2D_Q8: &str = "heron_conv2d_q8";
pub const GEMM_Q8: &str = "heron_gemm_q8";
pub const CONV2D_BLOCKED_F32: &str = "heron_conv2d_blocked_f32_v3";
pub const MAXPOOL2D_BLOCKED_F32: &str = "heron_maxpool2d_blocked_f32";
pub const SOFTMAX_F32: &str = "heron_softmax_f32";
pub const AVGPOOL2D_BLOCKED_F32: &str = "heron_avgpool2d_blocked_f32";

/// The kernels' routine table, in the one order every run context lists them
/// (`heron_threads_context`, the JIT's, VTA's after its own routine): generated code indexes
/// it by position, fixed when the module was compiled.
pub const ROUTINE_NAMES: [&str; 10] = [
    CONV2D_F32,
    GEMM_F32,
    MAXPOOL2D_F32,
    MAP_F32,
    CONV2D_Q8,
    GEMM_Q8,
    CONV2D_BLOCKED_F32,
    MAXPOOL2D_BLOCKED_F32,
    SOFTMAX_F32,
    AVGPOOL2D_BLOCKED_F32,
];

/// The entry points of [`ROUTINE_NAMES`], in that order.
pub fn routine_addresses() -> [*const u8; 10] {
    [
        heron_conv2d_f32_v4 as *const u8,
        heron_gemm_f32_v2 as *const u8,
        heron_maxpool2d_f32 as *const u8,
        heron_map_f32 as *const u8,
        heron_conv2d_q8 as *const u8,
        heron_gemm_q8 as *const u8,
        heron_conv2d_blocked_f32_v3 as *const u8,
        heron_maxpool2d_blocked_f32 as *const u8,
        heron_softmax_f32 as *const u8,
        heron_avgpool2d_blocked_f32 as *const u8,
    ]
}

/// Bits of the `flags` argument: which epilogue parts apply.
pub mod flags {
    pub const BIAS: i64 = 1;
    pub const RESIDUAL: i64 = 2;
    pub const CLAMP: i64 = 4;
    /// The activations, after the clamp, of [`heron_conv2d_f32_v4`], [`heron_gemm_f32_v2`]
    /// and (with no tail program) [`heron_conv2d_blocked_f32_v3`]: LeakyReLU, its slope the
    /// first constant (the blocked one's tail's).
    pub const LEAKY_RELU: i64 = 8;
    /// Hard-swish.
    pub const HARD_SWISH: i64 = 16;
    /// A sigmoid.
    pub const SIGMOID: i64 = 32;
    /// SiLU.
    pub const SILU: i64 = 64;
    /// HardSigmoid, its `alpha` and `beta` the first two constants.
    pub const HARD_SIGMOID: i64 = 128;
    /// Tanh.
    pub const TANH: i64 = 256;
    /// GELU (erf's).
    pub const GELU: i64 = 512;
    /// GELU's tanh form.
    pub const GELU_TANH: i64 = 1024;

    /// Every bit a call may set: any other makes the call compute nothing (an object built for
    /// a later kernel library names its routines apart).
    pub const KNOWN: i64 =
        BIAS | RESIDUAL | CLAMP | LEAKY_RELU | HARD_SWISH | SIGMOID | SILU | HARD_SIGMOID | TANH | GELU | GELU_TANH;

    /// The activation the bits of `flags` name (LeakyReLU's slope or HardSigmoid's `alpha`,
    /// and its `beta`, given), or `Err` when they name more than one or set a bit outside
    /// [`KNOWN`].
    pub fn activation(flags: i64, [slope, beta]: [f32; 2]) -> Result<Option<crate::conv::Activation>, &'static str> {
        let named = named(slope, beta);
        if flags & !KNOWN != 0 {
            return Err("a bit no flag names");
        }
        let mut found = named.iter().filter(|(bit, _)| flags & bit != 0).map(|(_, a)| *a);
        let first = found.next();
        if found.next().is_some() { Err("more than one activation") } else { Ok(first) }
    }

    /// The flag bit and the two constants a call passes for `activation` (0 and zeros for
    /// none): what [`activation`] decodes.
    pub fn of(activation: Option<crate::conv::Activation>) -> (i64, [f32; 2]) {
        use crate::conv::Activation;
        let constants = match activation {
            Some(Activation::LeakyRelu(slope)) => [slope, 0.0],
            Some(Activation::HardSigmoid { alpha, beta }) => [alpha, beta],
            _ => [0.0; 2],
        };
        let bit = named(constants[0], constants[1]).iter().find(|(_, a)| Some(*a) == activation).map_or(0, |(b, _)| *b);
        (bit, constants)
    }

    /// Each activation's flag, with LeakyReLU's slope or HardSigmoid's `alpha` and `beta`.
    fn named(slope: f32, beta: f32) -> [(i64, crate::conv::Activation); 8] {
        use crate::conv::Activation;
        [
            (LEAKY_RELU, Activation::LeakyRelu(slope)),
            (HARD_SWISH, Activation::HardSwish),
            (SIGMOID, Activation::Sigmoid),
            (SILU, Activation::Silu),
            (HARD_SIGMOID, Activation::HardSigmoid { alpha: slope, beta }),
            (TANH, Activation::Tanh),
            (GELU, Activation::Gelu),
            (GELU_TANH, Activation::GeluTanh),
        ]
    }
}

/// Bits of [`heron_conv2d_blocked_f32_v3`]'s `layouts` argument: which tensors are blocked
/// (the others planar NCHW).
pub mod layouts {
    pub const INPUT: i64 = 1;
    pub const OUTPUT: i64 = 2;
}

/// The layouts a [`heron_conv2d_blocked_f32_v3`] call names.
pub fn blocked_layouts(bits: i64) -> Option<(Layout, Layout)> {
    let layout = |bit: i64| if bits & bit != 0 { Layout::Blocked } else { Layout::Planar };
    (0..4).contains(&bits).then(|| (layout(layouts::INPUT), layout(layouts::OUTPUT)))
}

fn size(v: i64) -> Option<usize> {
    usize::try_from(v).ok()
}

/// Every value as a size, or `None` if one is negative.
fn sizes<const N: usize>(values: [i64; N]) -> Option<[usize; N]> {
    let mut out = [0; N];
    for (o, v) in out.iter_mut().zip(values) {
        *o = size(v)?;
    }
    Some(out)
}

/// Whether `len` elements of `T` can be one slice (at most `isize::MAX` bytes).
fn sliceable<T>(len: usize) -> bool {
    len.checked_mul(size_of::<T>()).is_some_and(|bytes| bytes <= isize::MAX as usize)
}

/// A slice of `len` elements at `p`, or an empty one (`p` unused) when `len` is 0, `p` is
/// null or the length is more than a slice can hold (the kernel then refuses the short
/// buffer).
///
/// # Safety
/// With `len > 0`, `p` points at `len` initialised elements no one else writes meanwhile.
unsafe fn view<'a, T>(p: *const T, len: usize) -> &'a [T] {
    if len == 0 || p.is_null() || !sliceable::<T>(len) {
        return &[];
    }
    // SAFETY: forwarded from the caller.
    unsafe { std::slice::from_raw_parts(p, len) }
}

/// # Safety
/// As [`view`], and no one else reads or writes the elements meanwhile.
unsafe fn view_mut<'a, T>(p: *mut T, len: usize) -> &'a mut [T] {
    if len == 0 || p.is_null() || !sliceable::<T>(len) {
        return &mut [];
    }
    // SAFETY: forwarded from the caller.
    unsafe { std::slice::from_raw_parts_mut(p, len) }
}

/// `out = activation(clamp(conv2d(x, w) + bias + residual))`, share `task` of `tasks`: `x` is
/// the NCHW input `[batch, c, h, w]` with `pad_top` zero rows above and `pad_left` zero columns
/// left (see [`Conv2d`]), `w` the weights packed for `isa` ([`Conv2d::pack_weights`]), `out`
/// `[batch, m, oh, ow]`, `scratch` [`Conv2d::scratch_len`] elements per task; at most one
/// activation of [`flags`], LeakyReLU's slope or HardSigmoid's `alpha` in `a0` and its `beta`
/// in `a1`. Two activations, or a bit outside [`flags::KNOWN`], compute nothing.
///
/// # Safety
/// Every pointer holds the elements its shape says (scratch: `tasks` times the per-task
/// length); concurrent calls differ in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_conv2d_f32_v4(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    residual: *const f32,
    out: *mut f32,
    scratch: *mut f32,
    isa: i64,
    batch: i64,
    c: i64,
    h: i64,
    width: i64,
    m: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    dh: i64,
    dw: i64,
    groups: i64,
    pad_top: i64,
    pad_left: i64,
    flags: i64,
    lo: f32,
    hi: f32,
    task: i64,
    tasks: i64,
    a0: f32,
    a1: f32,
) {
    let Some(isa) = Isa::from_code(isa) else { return };
    let Ok(activation) = flags::activation(flags, [a0, a1]) else { return };
    let dims = [batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left, task, tasks];
    let Some([batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left, task, tasks]) =
        sizes(dims)
    else {
        return;
    };
    let geo = Conv2d::from_dims([batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left]);
    let lens = (|| {
        (task < tasks).then_some(())?;
        geo.check().ok()?;
        let per_task = geo.scratch_len(isa).ok()?;
        let at = per_task.checked_mul(task)?;
        Some((geo.input_len().ok()?, geo.packed_weights_len(isa).ok()?, geo.output_len().ok()?, per_task, at))
    })();
    let Some((x_len, w_len, out_len, per_task, at)) = lens else { return };
    // SAFETY: the caller guarantees each buffer holds what the checked shapes say.
    unsafe {
        let epilogue = ConvEpilogue {
            bias: (flags & flags::BIAS != 0).then(|| view(bias, m)),
            residual: (flags & flags::RESIDUAL != 0).then(|| view(residual, out_len)),
            clamp: (flags & flags::CLAMP != 0).then_some((lo, hi)),
            activation,
            tail: None,
        };
        let scratch = if per_task == 0 || scratch.is_null() { &mut [] } else { view_mut(scratch.add(at), per_task) };
        let _ = conv2d_share(
            isa,
            &geo,
            view(x, x_len),
            view(w, w_len),
            view_mut(out, out_len),
            epilogue,
            scratch,
            (task, tasks),
        );
    }
}

/// `out = clamp(conv2d(x, w) + bias + residual)` over channel-blocked tensors, share `task` of
/// `tasks` (see [`crate::blocked`]): `x` and `out` stored as `layouts` says (blocks of `block`
/// channels, or planar NCHW), `w` packed by [`BlockedConv::pack_weights`], the residual
/// stored like the output; the shape as [`heron_conv2d_f32_v4`]'s. Then, unless `tail_ops_lo` is
/// zero, the tail program ([`crate::elementwise::Tail`]: two words and four constants as
/// [`heron_map_f32`] takes them) over the result, its input 0 the output and inputs 1 and 2
/// `tail_a` and `tail_b` (bit `k` of `tail_per_channel`: operand `k` holds one value per
/// output channel, else the output's shape and layout). Instead of a program, `flags` may name
/// an activation the kernel applies in registers ([`flags::LEAKY_RELU`], its slope in `t0`,
/// [`flags::HARD_SWISH`], [`flags::SIGMOID`], [`flags::SILU`], [`flags::HARD_SIGMOID`], its
/// `alpha` and `beta` in `t0` and `t1`, [`flags::TANH`], [`flags::GELU`] or
/// [`flags::GELU_TANH`]). An invalid program, or both, or a bit outside [`flags::KNOWN`],
/// computes nothing. `scratch` holds [`BlockedConv::scratch_len`] elements per task (may be NULL
/// when that is 0).
///
/// # Safety
/// Every pointer holds the elements its shape and layout say (a tail operand the program does
/// not read may be NULL; scratch: `tasks` times the per-task elements); concurrent calls differ
/// in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_conv2d_blocked_f32_v3(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    residual: *const f32,
    out: *mut f32,
    isa: i64,
    batch: i64,
    c: i64,
    h: i64,
    width: i64,
    m: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    dh: i64,
    dw: i64,
    groups: i64,
    pad_top: i64,
    pad_left: i64,
    block: i64,
    layouts: i64,
    flags: i64,
    lo: f32,
    hi: f32,
    task: i64,
    tasks: i64,
    tail_a: *const f32,
    tail_b: *const f32,
    tail_ops_lo: i64,
    tail_ops_hi: i64,
    tail_per_channel: i64,
    t0: f32,
    t1: f32,
    t2: f32,
    t3: f32,
    scratch: *mut f32,
) {
    let Some(isa) = Isa::from_code(isa) else { return };
    let Some((input, output)) = blocked_layouts(layouts) else { return };
    let dims = [batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left, block, task, tasks];
    let Some([batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left, block, task, tasks]) =
        sizes(dims)
    else {
        return;
    };
    let geo = Conv2d::from_dims([batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left]);
    let conv = BlockedConv { geo, block, input, output };
    let lens = (|| {
        conv.check().ok()?;
        (task < tasks).then_some(())?;
        let per_task = conv.scratch_len().ok()?;
        let at = per_task.checked_mul(task)?;
        Some((conv.input_len().ok()?, conv.packed_weights_len().ok()?, conv.output_len().ok()?, per_task, at))
    })();
    let Some((x_len, w_len, out_len, per_task, at)) = lens else { return };
    let Ok(activation) = flags::activation(flags, [t0, t1]) else { return };
    if activation.is_some() && tail_ops_lo != 0 {
        return;
    }
    let tail = if tail_ops_lo == 0 {
        None
    } else {
        let Ok(program) = Program::decode([tail_ops_lo, tail_ops_hi], [t0, t1, t2, t3]) else { return };
        let mut operands = [None; MAX_INPUTS - 1];
        for (k, (slot, p)) in operands.iter_mut().zip([tail_a, tail_b]).enumerate() {
            let read = program.ops().contains(&MapOp::Input(k as u8 + 1));
            if !read {
                continue;
            }
            if p.is_null() {
                return;
            }
            let (kind, len) = if tail_per_channel >> k & 1 == 1 {
                (TailOperand::PerChannel, m)
            } else {
                (TailOperand::Full, out_len)
            };
            // SAFETY: the caller guarantees an operand the program reads holds `len` elements.
            *slot = Some((unsafe { view(p, len) }, kind));
        }
        Some(Tail { program, operands })
    };
    // SAFETY: the caller guarantees each buffer holds what the checked shapes say.
    unsafe {
        let epilogue = ConvEpilogue {
            bias: (flags & flags::BIAS != 0).then(|| view(bias, m)),
            residual: (flags & flags::RESIDUAL != 0).then(|| view(residual, out_len)),
            clamp: (flags & flags::CLAMP != 0).then_some((lo, hi)),
            activation,
            tail,
        };
        let _ = crate::blocked::conv_share(
            isa,
            &conv,
            view(x, x_len),
            view(w, w_len),
            view_mut(out, out_len),
            epilogue,
            if per_task == 0 || scratch.is_null() { &mut [] } else { view_mut(scratch.add(at), per_task) },
            (task, tasks),
        );
    }
}

/// `c = activation(clamp(a · b + bias + residual))`, share `task` of `tasks`: `a` row-major
/// `m × k`, `b` packed for `isa` ([`crate::gemm::pack_b`]), `bias` `n` values, `c` and
/// `residual` `m × n`; the activation and its constants `a0`, `a1` as
/// [`heron_conv2d_f32_v4`]'s.
///
/// # Safety
/// Every pointer holds the elements its shape says; concurrent calls differ in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_gemm_f32_v2(
    a: *const f32,
    b: *const f32,
    bias: *const f32,
    residual: *const f32,
    c: *mut f32,
    isa: i64,
    m: i64,
    n: i64,
    k: i64,
    flags: i64,
    lo: f32,
    hi: f32,
    task: i64,
    tasks: i64,
    a0: f32,
    a1: f32,
) {
    let Some(isa) = Isa::from_code(isa) else { return };
    let Ok(activation) = flags::activation(flags, [a0, a1]) else { return };
    let [Some(m), Some(n), Some(k), Some(task), Some(tasks)] = [m, n, k, task, tasks].map(size) else { return };
    let lens = (|| Some((m.checked_mul(k)?, crate::gemm::packed_b_len(isa, k, n).ok()?, m.checked_mul(n)?)))();
    let Some((a_len, b_len, c_len)) = lens else { return };
    // SAFETY: the caller guarantees each buffer holds what the shapes say.
    unsafe {
        let epilogue = Epilogue {
            bias: (flags & flags::BIAS != 0).then(|| view(bias, n)),
            residual: (flags & flags::RESIDUAL != 0).then(|| (view(residual, c_len), n)),
            clamp: (flags & flags::CLAMP != 0).then_some((lo, hi)),
            activation,
        };
        let _ = sgemm_share(
            isa,
            (m, n, k),
            (view(a, a_len), k),
            view(b, b_len),
            (view_mut(c, c_len), n),
            epilogue,
            (task, tasks),
        );
    }
}

/// `out = max_pool(x)`, share `task` of `tasks`: `x` the NCHW input `[batch, c, h, w]` read
/// as if `pad_top` rows above and `pad_left` columns left lay outside it (never candidates),
/// `out` `[batch, c, oh, ow]`, the window `kh × kw` at strides `sh, sw` and dilations
/// `dh, dw`.
///
/// # Safety
/// Both pointers hold the elements their shapes say; concurrent calls differ in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_maxpool2d_f32(
    x: *const f32,
    out: *mut f32,
    isa: i64,
    batch: i64,
    c: i64,
    h: i64,
    width: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    dh: i64,
    dw: i64,
    pad_top: i64,
    pad_left: i64,
    task: i64,
    tasks: i64,
) {
    let Some(isa) = Isa::from_code(isa) else { return };
    let Some(dims) = sizes([batch, c, h, width, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left]) else { return };
    let Some([task, tasks]) = sizes([task, tasks]) else { return };
    let geo = window_from_dims(dims);
    let Some((x_len, out_len)) = (|| Some((geo.input_len().ok()?, geo.output_len().ok()?)))() else { return };
    // SAFETY: the caller guarantees each buffer holds what the shapes say.
    unsafe {
        let _ = max_pool2d_share(isa, &geo, view(x, x_len), view_mut(out, out_len), (task, tasks));
    }
}

/// `out = max_pool(x)` over a channel-blocked input, share `task` of `tasks`: the window as
/// [`heron_maxpool2d_f32`]'s, `block` channels per block, `layouts` as
/// [`heron_conv2d_blocked_f32_v3`]'s (the input blocked; the output blocked or planar).
///
/// # Safety
/// Both pointers hold the elements their shapes and layouts say; concurrent calls differ in
/// `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_maxpool2d_blocked_f32(
    x: *const f32,
    out: *mut f32,
    isa: i64,
    batch: i64,
    c: i64,
    h: i64,
    width: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    dh: i64,
    dw: i64,
    pad_top: i64,
    pad_left: i64,
    block: i64,
    layouts: i64,
    task: i64,
    tasks: i64,
) {
    let dims = [batch, c, h, width, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left];
    // SAFETY: forwarded.
    unsafe { pool_blocked(x, out, isa, dims, Some(PoolKind::Max), [block, layouts, task, tasks]) }
}

/// `out = average_pool(x)` over a channel-blocked input, share `task` of `tasks`: the window,
/// block and layouts as [`heron_maxpool2d_blocked_f32`]'s; each output the sum of its taps
/// inside the input (in window order, from 0) divided by the count of the taps inside the
/// input (`include_pad` 0) or inside the padded input's `end_h × end_w` (1; see
/// [`Divisor::Padded`]), 0 where none count.
///
/// # Safety
/// As [`heron_maxpool2d_blocked_f32`]'s.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_avgpool2d_blocked_f32(
    x: *const f32,
    out: *mut f32,
    isa: i64,
    batch: i64,
    c: i64,
    h: i64,
    width: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    dh: i64,
    dw: i64,
    pad_top: i64,
    pad_left: i64,
    include_pad: i64,
    end_h: i64,
    end_w: i64,
    block: i64,
    layouts: i64,
    task: i64,
    tasks: i64,
) {
    let dims = [batch, c, h, width, oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left];
    let divisor = match (include_pad, sizes([end_h, end_w])) {
        (0, _) => Some(Divisor::Inside),
        (1, Some([h, w])) => Some(Divisor::Padded { end: (h, w) }),
        _ => None,
    };
    // SAFETY: forwarded.
    unsafe { pool_blocked(x, out, isa, dims, divisor.map(PoolKind::Average), [block, layouts, task, tasks]) }
}

/// The blocked pools' common entry: checks the arguments (nothing computed when one is
/// wrong, `kind` `None` included) and runs the share.
///
/// # Safety
/// As [`heron_maxpool2d_blocked_f32`]'s.
unsafe fn pool_blocked(
    x: *const f32,
    out: *mut f32,
    isa: i64,
    dims: [i64; 14],
    kind: Option<PoolKind>,
    [block, layouts, task, tasks]: [i64; 4],
) {
    let Some(kind) = kind else { return };
    let Some(isa) = Isa::from_code(isa) else { return };
    let Some((Layout::Blocked, output)) = blocked_layouts(layouts) else { return };
    let Some(dims) = sizes(dims) else { return };
    let Some([block, task, tasks]) = sizes([block, task, tasks]) else { return };
    let geo = window_from_dims(dims);
    let lens = (|| {
        let input = crate::blocked::tensor_len(Layout::Blocked, block, [dims[0], dims[1], dims[2], dims[3]]).ok()?;
        Some((input, crate::blocked::tensor_len(output, block, [dims[0], dims[1], dims[4], dims[5]]).ok()?))
    })();
    let Some((x_len, out_len)) = lens else { return };
    // SAFETY: the caller guarantees each buffer holds what the shapes say.
    unsafe {
        let _ =
            pool2d_blocked_share(isa, &geo, kind, block, output, view(x, x_len), view_mut(out, out_len), (task, tasks));
    }
}

/// `out[r, c] = program(inputs...)` over a row-major `rows × cols` output, share `task` of
/// `tasks`: the program as [`Program::encode`]'s two words and its four constants; bit `k` of
/// `per_row` makes input `k` one value per row ([`Operand::PerRow`]). Inputs the program does
/// not read may be NULL. An invalid program or shape computes nothing.
///
/// # Safety
/// Each input the program reads holds its operand's elements, `out` holds `rows × cols`, and
/// an input either does not overlap `out` or is `out` itself; concurrent calls differ in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_map_f32(
    out: *mut f32,
    in0: *const f32,
    in1: *const f32,
    in2: *const f32,
    isa: i64,
    rows: i64,
    cols: i64,
    per_row: i64,
    ops_lo: i64,
    ops_hi: i64,
    c0: f32,
    c1: f32,
    c2: f32,
    c3: f32,
    task: i64,
    tasks: i64,
) {
    let Some(isa) = Isa::from_code(isa) else { return };
    let Some([rows, cols, task, tasks]) = sizes([rows, cols, task, tasks]) else { return };
    let Ok(program) = Program::decode([ops_lo, ops_hi], [c0, c1, c2, c3]) else { return };
    if task >= tasks || rows.checked_mul(cols).is_none() || out.is_null() {
        return;
    }
    let pointers = [in0, in1, in2];
    let mut inputs = [(std::ptr::null(), Operand::Full); MAX_INPUTS];
    for (k, (slot, p)) in inputs.iter_mut().zip(pointers).enumerate() {
        *slot = (p, if per_row >> k & 1 == 1 { Operand::PerRow } else { Operand::Full });
    }
    // SAFETY: the caller's promise above; `map_raw` reads only inputs the program names.
    unsafe { map_raw(isa, &program, inputs, out, (rows, cols), (task, tasks)) }
}

/// `out = softmax(x)` along the middle axis of `[outer, n, inner]` (log-softmax when `log` is
/// 1), share `task` of `tasks` of [`SoftmaxShape::units`]. A bad shape computes nothing.
///
/// # Safety
/// `x` and `out` hold `outer · n · inner` elements each and do not overlap; concurrent calls
/// differ in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_softmax_f32(
    out: *mut f32,
    x: *const f32,
    isa: i64,
    outer: i64,
    n: i64,
    inner: i64,
    log: i64,
    task: i64,
    tasks: i64,
) {
    let Some(isa) = Isa::from_code(isa) else { return };
    let Some([outer, n, inner, task, tasks]) = sizes([outer, n, inner, task, tasks]) else { return };
    let log = match log {
        0 => false,
        1 => true,
        _ => return,
    };
    let shape = SoftmaxShape { outer, n, inner, log };
    let Ok(len) = shape.elements() else { return };
    // SAFETY: the caller guarantees both buffers hold the shape's elements.
    unsafe {
        let _ = softmax_share(isa, shape, view(x, len), view_mut(out, len), (task, tasks));
    }
}

/// A byte operand's zero point as passed (an i64 holding a u8 or i8 value).
fn zero_point(zero: i64, signed: i64) -> Option<(bool, [i32; 1])> {
    let signed = match signed {
        0 => false,
        1 => true,
        _ => return None,
    };
    let range = if signed { -128..=127 } else { 0..=255 };
    range.contains(&zero).then_some((signed, [zero as i32]))
}

/// `out = Σ (x − x_zero)(w − zw)` (i32), share `task` of `tasks`: `x` the NCHW input bytes
/// (i8 when `x_signed` is 1, u8 when 0), padded with `x_zero` as `ConvInteger` pads, `w` the
/// weights packed for `isa` ([`qgemm::conv_pack_weights`], their zero points inside), `out`
/// `[batch, m, oh, ow]` i32, `scratch` [`qgemm::conv_scratch_len`] bytes per task. The other
/// arguments as [`heron_conv2d_f32_v4`]'s.
///
/// # Safety
/// Every pointer holds the elements its shape says (scratch: `tasks` times the per-task
/// length); concurrent calls differ in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_conv2d_q8(
    x: *const u8,
    w: *const u8,
    out: *mut i32,
    scratch: *mut u8,
    isa: i64,
    batch: i64,
    c: i64,
    h: i64,
    width: i64,
    m: i64,
    oh: i64,
    ow: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    dh: i64,
    dw: i64,
    groups: i64,
    pad_top: i64,
    pad_left: i64,
    x_signed: i64,
    x_zero: i64,
    task: i64,
    tasks: i64,
) {
    let Some(isa) = Int8Isa::from_code(isa) else { return };
    let Some((signed, zero)) = zero_point(x_zero, x_signed) else { return };
    let dims = [batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left, task, tasks];
    let Some([batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left, task, tasks]) =
        sizes(dims)
    else {
        return;
    };
    let geo = Conv2d::from_dims([batch, c, h, width, m, oh, ow, kh, kw, sh, sw, dh, dw, groups, pad_top, pad_left]);
    let lens = (|| {
        (task < tasks).then_some(())?;
        let per_task = qgemm::conv_scratch_len(isa, &geo).ok()?;
        let at = per_task.checked_mul(task)?;
        let w_len = qgemm::conv_packed_weights_len(isa, &geo).ok()?;
        Some((geo.input_len().ok()?, w_len, geo.output_len().ok()?, per_task, at))
    })();
    let Some((x_len, w_len, out_len, per_task, at)) = lens else { return };
    // SAFETY: the caller guarantees each buffer holds what the checked shapes say.
    unsafe {
        let x = Bytes { data: view(x, x_len), signed, zero: &zero };
        // A null scratch stays null (refused as too short), not offset into a dangling one.
        let scratch = if scratch.is_null() { &mut [] } else { view_mut(scratch.add(at), per_task) };
        let _ = qgemm::conv_share(isa, &geo, x, view(w, w_len), view_mut(out, out_len), scratch, (task, tasks));
    }
}

/// `c = Σ (a − a_zero)(b − zb)` (i32), share `task` of `tasks`: `a` row-major `m × k` bytes
/// (i8 when `a_signed` is 1), `b` packed for `isa` ([`qgemm::pack_b`], its zero points
/// inside), `c` row-major `m × n`, `scratch` [`qgemm::gemm_scratch_len`] bytes per task.
///
/// # Safety
/// Every pointer holds the elements its shape says; concurrent calls differ in `task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn heron_gemm_q8(
    a: *const u8,
    b: *const u8,
    c: *mut i32,
    scratch: *mut u8,
    isa: i64,
    m: i64,
    n: i64,
    k: i64,
    a_signed: i64,
    a_zero: i64,
    task: i64,
    tasks: i64,
) {
    let Some(isa) = Int8Isa::from_code(isa) else { return };
    let Some((signed, zero)) = zero_point(a_zero, a_signed) else { return };
    let Some([m, n, k, task, tasks]) = sizes([m, n, k, task, tasks]) else { return };
    let lens = (|| {
        (task < tasks).then_some(())?;
        let per_task = qgemm::gemm_scratch_len(isa, k).ok()?;
        Some((
            m.checked_mul(k)?,
            qgemm::packed_b_len(isa, k, n).ok()?,
            m.checked_mul(n)?,
            per_task,
            per_task.checked_mul(task)?,
        ))
    })();
    let Some((a_len, b_len, c_len, per_task, at)) = lens else { return };
    // SAFETY: the caller guarantees each buffer holds what the shapes say.
    unsafe {
        let a = Bytes { data: view(a, a_len), signed, zero: &zero };
        // A null scratch stays null (refused as too short), not offset into a dangling one.
        let scratch = if scratch.is_null() { &mut [] } else { view_mut(scratch.add(at), per_task) };
        let _ = qgemm::gemm_share(isa, (m, n, k), a, view(b, b_len), view_mut(c, c_len), scratch, (task, tasks));
    }
}

#[cfg(test)]
mod tests {
    use super::flags;
    use crate::conv::Activation;

    #[test]
    fn flags_name_one_activation_and_no_unknown_bit() {
        let bits = flags::BIAS | flags::CLAMP | flags::GELU_TANH;
        assert_eq!(flags::activation(bits, [0.0, 0.0]), Ok(Some(Activation::GeluTanh)));
        assert_eq!(flags::activation(flags::BIAS, [0.0, 0.0]), Ok(None));
        assert!(flags::activation(flags::GELU | flags::GELU_TANH, [0.0, 0.0]).is_err());
        assert!(flags::activation(flags::BIAS | 1 << 11, [0.0, 0.0]).is_err());
        assert!(flags::activation(-1, [0.0, 0.0]).is_err());
    }

    /// Every activation encodes to the bit and constants that decode to it.
    #[test]
    fn flags_encode_what_they_decode() {
        let all = [
            Activation::LeakyRelu(0.3),
            Activation::HardSwish,
            Activation::Sigmoid,
            Activation::Silu,
            Activation::HardSigmoid { alpha: 0.2, beta: 0.6 },
            Activation::Tanh,
            Activation::Gelu,
            Activation::GeluTanh,
        ];
        let mut bits = 0;
        for activation in all.map(Some).into_iter().chain([None]) {
            let (bit, constants) = flags::of(activation);
            assert_eq!(flags::activation(flags::BIAS | bit, constants), Ok(activation));
            assert_eq!(bits & bit, 0, "{activation:?} has its own bit");
            bits |= bit;
        }
    }

    /// The planar convolution's entry point applies the activation its flags name, with its
    /// constants, as `conv2d_share` does; two activations or an unknown bit compute nothing.
    #[test]
    fn planar_conv_entry_applies_its_activation() {
        use crate::Isa;
        use crate::conv::{Conv2d, ConvEpilogue, conv2d_share};
        let geo = Conv2d::from_dims([1, 3, 6, 6, 5, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1]);
        let isa = Isa::detect();
        let x: Vec<f32> = (0..geo.input_len().unwrap()).map(|i| (i % 13) as f32 / 6.0 - 1.0).collect();
        let w: Vec<f32> = (0..geo.weights_len().unwrap()).map(|i| (i % 7) as f32 / 7.0 - 0.5).collect();
        let mut packed = vec![0.0; geo.packed_weights_len(isa).unwrap()];
        geo.pack_weights(isa, &w, &mut packed).unwrap();
        let mut scratch = vec![0.0; geo.scratch_len(isa).unwrap()];
        let call = |bits: i64, a0: f32, out: &mut [f32], scratch: &mut [f32]| {
            let d = geo.dims().map(|v| v as i64);
            // SAFETY: every buffer holds what the shape says, the scratch one task's share.
            unsafe {
                super::heron_conv2d_f32_v4(
                    x.as_ptr(),
                    packed.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    out.as_mut_ptr(),
                    scratch.as_mut_ptr(),
                    isa.code(),
                    d[0],
                    d[1],
                    d[2],
                    d[3],
                    d[4],
                    d[5],
                    d[6],
                    d[7],
                    d[8],
                    d[9],
                    d[10],
                    d[11],
                    d[12],
                    d[13],
                    d[14],
                    d[15],
                    bits,
                    0.0,
                    0.0,
                    0,
                    1,
                    a0,
                    0.0,
                )
            }
        };
        let len = geo.output_len().unwrap();
        for (bits, activation) in [(flags::SILU, Activation::Silu), (flags::LEAKY_RELU, Activation::LeakyRelu(0.25))] {
            let mut got = vec![f32::NAN; len];
            call(bits, 0.25, &mut got, &mut scratch);
            let mut want = vec![f32::NAN; len];
            let epilogue = ConvEpilogue { activation: Some(activation), ..ConvEpilogue::default() };
            conv2d_share(isa, &geo, &x, &packed, &mut want, epilogue, &mut scratch, (0, 1)).unwrap();
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{activation:?}");
            assert!(got.iter().any(|&v| v < 0.0) && got.iter().all(|v| v.is_finite()));
        }
        for bits in [flags::SILU | flags::TANH, 1 << 11] {
            let mut out = vec![f32::NAN; len];
            call(bits, 0.0, &mut out, &mut scratch);
            assert!(out.iter().all(|v| v.is_nan()), "bits {bits:#x} computed");
        }
    }

    /// So does the GEMM's.
    #[test]
    fn gemm_entry_applies_its_activation() {
        use crate::Isa;
        use crate::gemm::{Epilogue, pack_b, packed_b_len, sgemm};
        let (m, n, k) = (5, 19, 7);
        let isa = Isa::detect();
        let a: Vec<f32> = (0..m * k).map(|i| (i % 11) as f32 / 2.0 - 2.5).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 9) as f32 / 4.0 - 1.0).collect();
        let mut packed = vec![0.0; packed_b_len(isa, k, n).unwrap()];
        pack_b(isa, &b, (n, 1), (k, n), &mut packed).unwrap();
        let call = |bits: i64, a1: f32, c: &mut [f32]| {
            let null = std::ptr::null();
            let dims = [m, n, k].map(|v| v as i64);
            // SAFETY: every buffer holds what the shape says.
            unsafe {
                super::heron_gemm_f32_v2(
                    a.as_ptr(),
                    packed.as_ptr(),
                    null,
                    null,
                    c.as_mut_ptr(),
                    isa.code(),
                    dims[0],
                    dims[1],
                    dims[2],
                    bits,
                    0.0,
                    0.0,
                    0,
                    1,
                    0.2,
                    a1,
                )
            }
        };
        let activation = Activation::HardSigmoid { alpha: 0.2, beta: 0.5 };
        let mut got = vec![f32::NAN; m * n];
        call(flags::HARD_SIGMOID, 0.5, &mut got);
        let mut want = vec![f32::NAN; m * n];
        let epilogue = Epilogue { activation: Some(activation), ..Epilogue::default() };
        sgemm(isa, (m, n, k), &a, k, &packed, &mut want, n, epilogue).unwrap();
        assert!(got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(got.iter().any(|&v| v == 0.0) && got.iter().any(|&v| v > 0.0 && v < 1.0));
        let mut untouched = vec![f32::NAN; m * n];
        call(flags::SIGMOID | flags::GELU, 0.0, &mut untouched);
        assert!(untouched.iter().all(|v| v.is_nan()));
    }
}
