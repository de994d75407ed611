//! f32 2-D convolution over NCHW tensors with zero padding, and a fused epilogue (bias per
//! output channel, residual, clamp, activation). The padding is applied where the input is packed, never
//! as a padded copy of the whole tensor.
//!
//! - **Winograd F(2×2, 3×3)** (3×3, stride 1, undilated, ungrouped, at least 16 channels in
//!   and out, at least 10 output tiles per image): see the `winograd` module; 2.25× fewer
//!   multiplies than the GEMM form.
//! - **Transposed** (pointwise, at least 384 channels in, planes of at most 64 pixels): see
//!   the `transposed` module; the output channels in the vector lanes, where a small plane's
//!   pixels would leave lanes idle.
//! - **Direct** (taps 3-7 wide at strides 1-2, with at most 8 input channels or output rows
//!   at least 12 wide: first layers, strided 3×3 layers): see the `direct` module; the GEMM
//!   form's weights and bits without its im2col panels.
//! - **GEMM form** (every other convolution that is not depthwise): per image and group,
//!   `out[M × P] = W[M × K] · col[K × P]`, `K = C/g · KH · KW`, `P = OH · OW`. The weights are
//!   packed once (at compile time) into slabs of [`block_rows`] output channels, k-major; the
//!   input is packed into one panel of [`panel_width`] output pixels at a time (im2col straight
//!   into the panel, in the caller's per-task scratch, taps in the padding read as zero),
//!   which every slab then multiplies. An unpadded 1×1, stride-1 convolution reads full
//!   panels from the input itself.
//! - **Depthwise** (`groups == C == M`): each channel plane on its own, vectors along the
//!   output row; see the `depthwise` module.
//!
//! Work is split into items (image, group, panel or tile block, slab range) or (image,
//! channel), and task
//! `t` of `T` runs a contiguous run of them: results do not depend on `T`.

use crate::tile::{self, Tile};
use crate::{Isa, KernelError, check_share, depthwise, direct, need, share, transposed, winograd};

pub use crate::tile::{block_rows, panel_width};

/// A convolution's shapes: input `[batch, in_channels, in_h, in_w]`, weights
/// `[out_channels, in_channels / groups, kernel_h, kernel_w]`, output
/// `[batch, out_channels, out_h, out_w]`. The input is read as if `pad.0` rows of zeros were
/// above it and `pad.1` columns left of it, and as many below and right as the output's taps
/// reach: output `(oy, ox)` tap `(r, s)` reads input `(oy·sh + r·dh − pad.0, ox·sw + s·dw − pad.1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
    /// Zero rows above and zero columns left of the input.
    pub pad: (usize, usize),
}

/// How [`conv2d_share`] computes a convolution (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvMethod {
    /// im2col panels times packed weights.
    Gemm,
    /// Winograd F(2×2, 3×3): transformed patches times transformed weights.
    Winograd,
    /// Few input channels: taps' windows made in registers from the input rows.
    Direct,
    /// A pointwise convolution on a small plane: output channels in the vector lanes.
    Transposed,
    /// One channel plane at a time.
    Depthwise,
}

impl ConvMethod {
    pub fn name(self) -> &'static str {
        match self {
            ConvMethod::Gemm => "gemm",
            ConvMethod::Winograd => "winograd",
            ConvMethod::Direct => "direct",
            ConvMethod::Transposed => "transposed",
            ConvMethod::Depthwise => "depthwise",
        }
    }
}

/// The fused tail of a convolution: `activation(clamp(conv + bias + residual))`, or a blocked
/// kernel's tail program.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvEpilogue<'a> {
    /// One value per output channel.
    pub bias: Option<&'a [f32]>,
    /// A tensor shaped like the output, added to it.
    pub residual: Option<&'a [f32]>,
    pub clamp: Option<(f32, f32)>,
    /// An activation after the clamp: a blocked kernel's in registers or (a sigmoid, SiLU,
    /// tanh or GELU) swept over a run's stored results, a planar one's swept over each run of
    /// results it has just stored (see [`activate`]).
    pub activation: Option<Activation>,
    /// An elementwise program over the result (blocked kernels only, see
    /// [`crate::blocked::conv_share`]).
    pub tail: Option<crate::elementwise::Tail<'a>>,
}

/// An activation a convolution kernel applies to its results.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// `x < 0 ? x · alpha : x`.
    LeakyRelu(f32),
    /// `x · min(max(x / 6 + 0.5, 0), 1)`.
    HardSwish,
    /// `1 / (1 + e^-x)`, as the elementwise programs compute it.
    Sigmoid,
    /// SiLU, `x · sigmoid(x)`, computed as `x / (1 + e^-x)` with no subnormal step (see the
    /// elementwise `silu`: `x · 0` below −87, where the elementwise sigmoid is 0).
    Silu,
    /// `min(max(alpha · x + beta, 0), 1)`.
    HardSigmoid { alpha: f32, beta: f32 },
    /// `tanh x`, as the elementwise programs compute it.
    Tanh,
    /// GELU, `x / 2 · (1 + erf(x / √2))` in the steps lowering writes (`(½ · x) · (1 + erf(x ·
    /// (1/√2)))`), erf as the elementwise programs compute it.
    Gelu,
    /// GELU's tanh form, `x / 2 · (1 + tanh(u))` with `u = √(2/π) (x + 0.044715 x³)`, in the
    /// steps lowering writes: `x · sigmoid(k · x + k · 0.044715 · ((x · x) · x))`, `k = 2√(2/π)`
    /// (see [`GELU_TANH_K`]), the sigmoid as the elementwise programs compute it.
    GeluTanh,
}

/// [`Activation::GeluTanh`]'s factors of `x` and of `x³` inside its sigmoid, as f32.
pub const GELU_TANH_K: [f32; 2] = [1.595_769_2, 0.071_354_814];

impl Activation {
    /// The activation of one value (NaN-propagating `min`/`max`, as the vector code).
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::LeakyRelu(alpha) => {
                if x < 0.0 {
                    x * alpha
                } else {
                    x
                }
            }
            Activation::HardSwish => {
                let t = x / 6.0 + 0.5;
                let t = if t.is_nan() { t } else { t.max(0.0).min(1.0) };
                x * t
            }
            Activation::Sigmoid => crate::elementwise::scalar::sigmoid(x),
            Activation::Silu => crate::elementwise::scalar::silu(x),
            Activation::HardSigmoid { alpha, beta } => {
                let t = alpha * x + beta;
                if t.is_nan() { t } else { t.max(0.0).min(1.0) }
            }
            Activation::Tanh => crate::elementwise::scalar::tanh(x),
            Activation::Gelu => {
                (0.5 * x) * (1.0 + crate::elementwise::scalar::erf(x * std::f32::consts::FRAC_1_SQRT_2))
            }
            Activation::GeluTanh => {
                let [k, k3] = GELU_TANH_K;
                x * crate::elementwise::scalar::sigmoid(k * x + k3 * (x * x * x))
            }
        }
    }
}

/// `activation` over `out`, a run of a planar convolution's results swept just after they
/// are stored (in cache; no pass over the whole output after the kernel): `isa`'s vector code
/// on a CPU that has it, else [`Activation::apply`], which it matches bit for bit.
pub(crate) fn activate(isa: Isa, activation: Option<Activation>, out: &mut [f32]) {
    let Some(activation) = activation else { return };
    #[cfg(target_arch = "x86_64")]
    {
        use crate::tile::x86::{avx2, avx512};
        // SAFETY: the CPU has the ISA, and `out` holds `out.len()` elements.
        if isa == Isa::Avx512 && Isa::Avx512.is_available() {
            return unsafe { avx512::activate_span(activation, out.as_mut_ptr(), out.len()) };
        }
        if isa == Isa::Avx2Fma && Isa::Avx2Fma.is_available() {
            return unsafe { avx2::activate_span(activation, out.as_mut_ptr(), out.len()) };
        }
    }
    out.iter_mut().for_each(|v| *v = activation.apply(*v));
}

/// [`activate`] over `rows` runs of `cols` values from `at`, `ld` apart (a tile's output
/// channels or output rows).
pub(crate) fn activate_rows(
    isa: Isa,
    activation: Option<Activation>,
    out: &mut [f32],
    (at, rows, cols, ld): (usize, usize, usize, usize),
) {
    if activation.is_some() {
        for r in 0..rows {
            let start = at + r * ld;
            activate(isa, activation, &mut out[start..start + cols]);
        }
    }
}

fn mul(a: usize, b: usize, what: &'static str) -> Result<usize, KernelError> {
    a.checked_mul(b).ok_or(KernelError::Overflow(what))
}

impl Conv2d {
    /// Checks that the shapes are consistent: positive extents, channels divisible by the
    /// groups, sizes (the padded plane's included) without overflow, and the packed weights
    /// and scratch of every ISA's method.
    pub fn check(&self) -> Result<(), KernelError> {
        self.check_shape()?;
        for isa in [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar] {
            self.packed_weights_len(isa)?;
            self.scratch_len(isa)?;
        }
        Ok(())
    }

    /// [`Conv2d::check`] without the planar methods' packing and scratch: for kernels that
    /// size their own (blocked convolutions, pooling), and check per call (the planar sizes
    /// of three ISAs took a third of a small blocked call's 200 ns).
    pub fn check_shape(&self) -> Result<(), KernelError> {
        let bad = |why: &'static str| Err(KernelError::Geometry(why));
        // Every dimension but the batch and the padding.
        if self.dims()[1..14].contains(&0) {
            return bad("every extent, stride, dilation and the group count must be positive");
        }
        if !self.in_channels.is_multiple_of(self.groups) || !self.out_channels.is_multiple_of(self.groups) {
            return bad("the channel counts must be multiples of the group count");
        }
        let (ph, pw) = self.padded_extent()?;
        mul(ph, pw, "padded plane")?;
        self.pad.0.checked_add(self.in_h).ok_or(KernelError::Overflow("padding"))?;
        self.pad.1.checked_add(self.in_w).ok_or(KernelError::Overflow("padding"))?;
        self.input_len()?;
        self.output_len()?;
        self.weights_len()?;
        Ok(())
    }

    /// The extent of the padded plane the taps span: `(oh − 1)·sh + (kh − 1)·dh + 1` rows
    /// (and the same for columns).
    pub(crate) fn padded_extent(&self) -> Result<(usize, usize), KernelError> {
        let extent = |out: usize, stride, kernel: usize, dilation| {
            mul(out.saturating_sub(1), stride, "taps")?
                .checked_add(mul(kernel.saturating_sub(1), dilation, "taps")?)
                .and_then(|last| last.checked_add(1))
                .ok_or(KernelError::Overflow("taps"))
        };
        Ok((
            extent(self.out_h, self.stride.0, self.kernel.0, self.dilation.0)?,
            extent(self.out_w, self.stride.1, self.kernel.1, self.dilation.1)?,
        ))
    }

    /// The input row tap `r` of output row `oy` reads, `None` in the padding.
    pub(crate) fn tap_row(&self, oy: usize, r: usize) -> Option<usize> {
        (oy * self.stride.0 + r * self.dilation.0).checked_sub(self.pad.0).filter(|&y| y < self.in_h)
    }

    /// The input column tap `s` of output column `ox` reads, `None` in the padding.
    pub(crate) fn tap_col(&self, ox: usize, s: usize) -> Option<usize> {
        (ox * self.stride.1 + s * self.dilation.1).checked_sub(self.pad.1).filter(|&x| x < self.in_w)
    }

    /// Whether some tap falls outside the input (in the zero padding).
    pub(crate) fn reads_padding(&self) -> bool {
        self.pad != (0, 0) || self.padded_extent().is_ok_and(|(ph, pw)| ph > self.in_h || pw > self.in_w)
    }

    /// The shape as the kernels' entry points take it: batch, channels in, input height and
    /// width, channels out, output height and width, kernel, stride, dilation (each height
    /// then width), groups, padding top and left.
    pub fn dims(&self) -> [usize; 16] {
        [
            self.batch,
            self.in_channels,
            self.in_h,
            self.in_w,
            self.out_channels,
            self.out_h,
            self.out_w,
            self.kernel.0,
            self.kernel.1,
            self.stride.0,
            self.stride.1,
            self.dilation.0,
            self.dilation.1,
            self.groups,
            self.pad.0,
            self.pad.1,
        ]
    }

    /// The inverse of [`Conv2d::dims`].
    pub fn from_dims(d: [usize; 16]) -> Conv2d {
        Conv2d {
            batch: d[0],
            in_channels: d[1],
            in_h: d[2],
            in_w: d[3],
            out_channels: d[4],
            out_h: d[5],
            out_w: d[6],
            kernel: (d[7], d[8]),
            stride: (d[9], d[10]),
            dilation: (d[11], d[12]),
            groups: d[13],
            pad: (d[14], d[15]),
        }
    }

    pub fn input_len(&self) -> Result<usize, KernelError> {
        mul(mul(self.batch, self.in_channels, "input")?, mul(self.in_h, self.in_w, "input")?, "input")
    }

    pub fn output_len(&self) -> Result<usize, KernelError> {
        mul(mul(self.batch, self.out_channels, "output")?, self.pixels()?, "output")
    }

    fn pixels(&self) -> Result<usize, KernelError> {
        mul(self.out_h, self.out_w, "output")
    }

    /// The reduction length per output: `C/g · KH · KW`.
    pub fn depth(&self) -> Result<usize, KernelError> {
        mul(self.in_channels / self.groups.max(1), mul(self.kernel.0, self.kernel.1, "weights")?, "weights")
    }

    pub fn weights_len(&self) -> Result<usize, KernelError> {
        mul(self.out_channels, self.depth()?, "weights")
    }

    /// One channel per group and one output per channel: the depthwise kernel runs it.
    pub fn is_depthwise(&self) -> bool {
        self.groups == self.in_channels && self.groups == self.out_channels && self.groups > 1
    }

    /// The algorithm the kernel runs this convolution with, weights packed for `isa`.
    pub fn method(&self, isa: Isa) -> ConvMethod {
        if self.is_depthwise() {
            ConvMethod::Depthwise
        } else if winograd::applies(self) {
            ConvMethod::Winograd
        } else if transposed::applies(self) {
            ConvMethod::Transposed
        } else if direct::applies(self) && direct::has_variant(isa) {
            ConvMethod::Direct
        } else {
            ConvMethod::Gemm
        }
    }

    /// An unpadded 1×1, stride-1 convolution reading the whole input: its panels are the
    /// input's rows.
    fn is_pointwise(&self) -> bool {
        self.kernel == (1, 1)
            && self.stride == (1, 1)
            && self.pad == (0, 0)
            && (self.in_h, self.in_w) == (self.out_h, self.out_w)
    }

    /// Output channels per group, and slabs of `MR` of them.
    fn slabs(&self, isa: Isa) -> usize {
        (self.out_channels / self.groups.max(1)).div_ceil(block_rows(isa))
    }

    /// Elements of the weights packed for `isa` by [`Conv2d::pack_weights`].
    pub fn packed_weights_len(&self, isa: Isa) -> Result<usize, KernelError> {
        if self.is_depthwise() {
            return self.weights_len();
        }
        if winograd::applies(self) {
            return winograd::packed_weights_len(self, isa);
        }
        if transposed::applies(self) {
            return transposed::packed_weights_len(self, isa);
        }
        mul(
            mul(self.groups, self.slabs(isa), "packed weights")?,
            mul(self.depth()?, block_rows(isa), "packed weights")?,
            "packed weights",
        )
    }

    /// Packs `[M, C/g, KH, KW]` weights for `isa`: per group, slabs of `MR` output channels
    /// (the last zero-padded), each `K × MR`, k-major. Depthwise weights stay as they are.
    pub fn pack_weights(&self, isa: Isa, w: &[f32], packed: &mut [f32]) -> Result<(), KernelError> {
        self.check()?;
        let (len, k) = (self.packed_weights_len(isa)?, self.depth()?);
        need("weights", w.len(), self.weights_len()?)?;
        need("packed weights", packed.len(), len)?;
        if self.is_depthwise() {
            packed[..len].copy_from_slice(&w[..len]);
            return Ok(());
        }
        if winograd::applies(self) {
            winograd::pack_weights(self, isa, w, &mut packed[..len]);
            return Ok(());
        }
        if transposed::applies(self) {
            return transposed::pack_weights(self, isa, w, &mut packed[..len]);
        }
        let (mr, mg) = (block_rows(isa), self.out_channels / self.groups);
        for (slab_index, slab) in packed[..len].chunks_exact_mut(k * mr).enumerate() {
            let (g, s) = (slab_index / self.slabs(isa), slab_index % self.slabs(isa));
            for r in 0..mr {
                let oc = s * mr + r;
                for p in 0..k {
                    slab[p * mr + r] = if oc < mg { w[(g * mg + oc) * k + p] } else { 0.0 };
                }
            }
        }
        Ok(())
    }

    /// Scratch elements one task needs: one packed input panel (the direct form's too: a CPU
    /// without the ISA runs it as the GEMM form), a Winograd block's transformed panels and
    /// products, or for a depthwise convolution that reads padding, one padded plane.
    pub fn scratch_len(&self, isa: Isa) -> Result<usize, KernelError> {
        if winograd::applies(self) {
            return winograd::scratch_len(self, isa);
        }
        if transposed::applies(self) {
            return transposed::scratch_len(self, isa);
        }
        if self.is_depthwise() {
            return depthwise::scratch_len(isa, self);
        }
        mul(self.depth()?, panel_width(isa), "scratch")
    }
}

/// Share `task` of `tasks` of the convolution: `out = activation(clamp(conv(x, w) + bias +
/// residual))`,
/// `w` packed by [`Conv2d::pack_weights`] for the same `isa`, `scratch` holding
/// [`Conv2d::scratch_len`] elements for this task.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_share(
    isa: Isa,
    geo: &Conv2d,
    x: &[f32],
    packed_w: &[f32],
    out: &mut [f32],
    epilogue: ConvEpilogue<'_>,
    scratch: &mut [f32],
    (task, tasks): (usize, usize),
) -> Result<(), KernelError> {
    geo.check()?;
    check_share(task, tasks)?;
    need("input", x.len(), geo.input_len()?)?;
    need("packed weights", packed_w.len(), geo.packed_weights_len(isa)?)?;
    need("output", out.len(), geo.output_len()?)?;
    need("scratch", scratch.len(), geo.scratch_len(isa)?)?;
    if let Some(b) = epilogue.bias {
        need("bias", b.len(), geo.out_channels)?;
    }
    if let Some(r) = epilogue.residual {
        need("residual", r.len(), geo.output_len()?)?;
    }
    if epilogue.tail.is_some() {
        return Err(KernelError::Geometry("a planar convolution runs no tail program"));
    }
    if geo.batch == 0 {
        return Ok(());
    }
    match geo.method(isa) {
        ConvMethod::Depthwise => depthwise::conv_share(isa, geo, x, packed_w, out, epilogue, scratch, (task, tasks)),
        ConvMethod::Winograd => winograd::conv_share(isa, geo, x, packed_w, out, epilogue, scratch, (task, tasks)),
        ConvMethod::Transposed => transposed::conv_share(isa, geo, x, packed_w, out, epilogue, scratch, (task, tasks)),
        ConvMethod::Direct if direct::available(isa) => {
            direct::conv_share(isa, geo, x, packed_w, out, epilogue, (task, tasks))
        }
        ConvMethod::Gemm | ConvMethod::Direct => {
            gemm_form(isa, geo, x, packed_w, out, epilogue, scratch, (task, tasks))
        }
    }
    Ok(())
}

/// The GEMM form; the caller checked every length.
#[allow(clippy::too_many_arguments)]
fn gemm_form(
    isa: Isa,
    geo: &Conv2d,
    x: &[f32],
    packed_w: &[f32],
    out: &mut [f32],
    epilogue: ConvEpilogue<'_>,
    scratch: &mut [f32],
    (task, tasks): (usize, usize),
) {
    let (mr, nr) = (block_rows(isa), panel_width(isa));
    let (g, k, slabs) = (geo.groups, geo.depth().expect("checked"), geo.slabs(isa));
    let (cg, mg) = (geo.in_channels / g, geo.out_channels / g);
    let (pixels, plane) = (geo.out_h * geo.out_w, geo.in_h * geo.in_w);
    let panels = pixels.div_ceil(nr);
    let panel_items = geo.batch * g * panels;
    // Few panels (a small plane, whose last panel is narrow) split by panels would load the
    // tasks unevenly; a pointwise convolution packs nothing, so each task then takes every
    // panel and its share of the slabs.
    let by_slabs = geo.is_pointwise() && tasks > 1 && panel_items < 8 * tasks;
    let slab_parts = if by_slabs { tasks.min(slabs) } else { slab_parts(panel_items, slabs, tasks) };
    let (lo, hi) = share(panel_items * slab_parts, tasks, task);
    let (clamp, (clo, chi)) = (epilogue.clamp.is_some(), epilogue.clamp.unwrap_or((0.0, 0.0)));
    // A pointwise convolution's full panels are read from the input itself. Without slab
    // parts, a run of consecutive panels is taken slab by slab: each slab then writes its
    // rows of the run contiguously, and the run's input (about 32 KiB) is reused from the
    // L1/L2 cache by every slab. One panel at a time, a layer with few input channels wrote
    // one line to every output channel's row per panel (1.4x slower on 16 -> 96 channels at
    // 112², measured; runs of 128 or 512 KiB were slower than 32).
    let direct = |panel_item: usize| geo.is_pointwise() && (panel_item % panels + 1) * nr <= pixels;
    let panel_of = |item: usize| if by_slabs { item % panel_items } else { item / slab_parts };
    let run = if slab_parts == 1 { (32 * 1024 / (k * nr * 4).max(1)).clamp(1, 64) } else { 1 };
    let mut packed: Option<usize> = None;
    let mut item = lo;
    while item < hi {
        // Items `item..end` are one slab range of full direct panels, or a single item.
        let mut end = item + 1;
        // At most one panel of a run is packed: the scratch holds one.
        let mut packed_in_run = !direct(panel_of(item));
        while end < hi && end - item < run && geo.is_pointwise() && (!packed_in_run || direct(panel_of(end))) {
            packed_in_run |= !direct(panel_of(end));
            end += 1;
        }
        let (first_panel, part) = (panel_of(item), if by_slabs { item / panel_items } else { item % slab_parts });
        let (s_lo, s_hi) = share(slabs, slab_parts, part);
        for s in s_lo..s_hi {
            for panel_item in first_panel..first_panel + (end - item) {
                let (image_group, j) = (panel_item / panels, panel_item % panels);
                let (n, grp) = (image_group / g, image_group % g);
                let x_group = &x[(n * geo.in_channels + grp * cg) * plane..];
                let (p0, cols) = (j * nr, (pixels - j * nr).min(nr));
                let (b, ldb) = if direct(panel_item) {
                    (x_group[p0..].as_ptr(), plane)
                } else {
                    if packed != Some(panel_item) {
                        pack_panel(geo, x_group, (p0, cols), nr, &mut scratch[..k * nr], 0.0);
                        packed = Some(panel_item);
                    }
                    (scratch.as_ptr(), nr)
                };
                let oc = grp * mg + s * mr;
                let at = (n * geo.out_channels + oc) * pixels + p0;
                let t = Tile {
                    k,
                    a: packed_w[(grp * slabs + s) * k * mr..].as_ptr(),
                    lda: mr,
                    packed_a: true,
                    b,
                    ldb,
                    c: out[at..].as_mut_ptr(),
                    ldc: pixels,
                    rows: (mg - s * mr).min(mr),
                    cols,
                    row_bias: epilogue.bias.map_or(std::ptr::null(), |b| b[oc..].as_ptr()),
                    col_bias: std::ptr::null(),
                    residual: epilogue.residual.map_or(std::ptr::null(), |r| r[at..].as_ptr()),
                    ldr: pixels,
                    clamp,
                    lo: clo,
                    hi: chi,
                    stream_b: false,
                };
                // SAFETY: slab `s` of group `grp` holds k × MR packed weights; B is either the
                // packed panel (k × NR in scratch) or, for a full pointwise panel, k input
                // rows `plane` apart with NR values from `p0` (p0 + NR <= pixels = plane);
                // the output and residual blocks are `rows` channels of `pixels` from `at`,
                // `cols` wide.
                unsafe { tile::run(isa, &t) };
                activate_rows(isa, epilogue.activation, out, (at, t.rows, cols, pixels));
            }
        }
        item = end;
    }
}

/// How many parts each of `items` column panels' `slabs` is split into: few panels (small
/// late layers) would leave threads idle, so their slabs are shared out as well.
pub(crate) fn slab_parts(items: usize, slabs: usize, tasks: usize) -> usize {
    if items >= 2 * tasks { 1 } else { slabs.min((2 * tasks).div_ceil(items)) }
}

/// im2col of output pixels `p0..p0 + cols` of one image and group into a `K × nr` panel,
/// `fill` (zero, or an integer input's zero point) in columns past `cols` and taps in the
/// padding; row `k = (ci · KH + r) · KW + s`, as the weights.
pub(crate) fn pack_panel<T: Copy>(
    geo: &Conv2d,
    x_group: &[T],
    (p0, cols): (usize, usize),
    nr: usize,
    dst: &mut [T],
    fill: T,
) {
    let (kh, kw) = geo.kernel;
    let sw = geo.stride.1;
    let dw = geo.dilation.1;
    let pl = geo.pad.1;
    let cg = geo.in_channels / geo.groups;
    let plane = geo.in_h * geo.in_w;
    let padded = geo.reads_padding();
    let mut col = 0;
    while col < cols {
        // A run of pixels in one output row.
        let (oh, ow) = ((p0 + col) / geo.out_w, (p0 + col) % geo.out_w);
        let len = (geo.out_w - ow).min(cols - col);
        // Tap columns outermost: which of a run's columns lie in the padding depends on the
        // column alone, so it is worked out once per tap column, not per channel and tap row
        // (two divisions per row made a strided layer's packing cost a quarter of the layer).
        for s in 0..kw {
            // Columns `first + c·sw` (padded) for c < len; those in `pl..pl + in_w` are
            // `c_lo..c_hi`.
            let first = ow * sw + s * dw;
            let (c_lo, c_hi) = if padded {
                let c_lo = pl.saturating_sub(first).div_ceil(sw).min(len);
                (c_lo, (pl + geo.in_w).saturating_sub(first).div_ceil(sw).clamp(c_lo, len))
            } else {
                (0, len)
            };
            for ci in 0..cg {
                for r in 0..kh {
                    let k = (ci * kh + r) * kw + s;
                    let row = &mut dst[k * nr + col..k * nr + col + len];
                    // The tap row in padded coordinates; outside the input it is all zeros.
                    let Some(y) = geo.tap_row(oh, r) else {
                        row.fill(fill);
                        continue;
                    };
                    let src_row = &x_group[ci * plane + y * geo.in_w..ci * plane + (y + 1) * geo.in_w];
                    if !padded {
                        copy_strided(row, &src_row[first..], sw);
                        continue;
                    }
                    row[..c_lo].fill(fill);
                    row[c_hi..].fill(fill);
                    if c_lo < c_hi {
                        copy_strided(&mut row[c_lo..c_hi], &src_row[first + c_lo * sw - pl..], sw);
                    }
                }
            }
        }
        col += len;
    }
    if cols < nr {
        for row in dst.chunks_exact_mut(nr) {
            row[cols..].fill(fill);
        }
    }
}

/// `dst[c] = src[c · stride]`.
fn copy_strided<T: Copy>(dst: &mut [T], src: &[T], stride: usize) {
    if stride == 1 {
        dst.copy_from_slice(&src[..dst.len()]);
    } else if stride == 2 && !dst.is_empty() {
        // Pairs, so that the compiler vectorizes it (loads and shuffles): element by element
        // the first layers' panels cost more than their multiplies.
        let (last, body) = dst.split_last_mut().expect("not empty");
        for (v, pair) in body.iter_mut().zip(src.chunks_exact(2)) {
            *v = pair[0];
        }
        *last = src[2 * body.len()];
    } else {
        for (c, v) in dst.iter_mut().enumerate() {
            *v = src[c * stride];
        }
    }
}
