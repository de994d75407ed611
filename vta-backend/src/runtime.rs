//! VTA's runtime as a safe Rust API: a command queue that builds instruction streams exactly as
//! the reference runtime does for the same call sequence (VTA-FACTS §6.3-§6.6): 2D loads and
//! stores, micro-op kernels recorded once and cached in uop SRAM, dependency push/pop with the
//! reference's flag placement and NOPs, and the synchronize epilogue. The C API (`capi`) is a
//! thin layer over this.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::VtaError;
use crate::config::{INSN_BYTES, MemId, UOP_BYTES};
use crate::driver::{DeviceId, Driver};
use crate::isa::{AluInsn, AluOp, DepFlags, GemmInsn, Insn, Isa, MemInsn, Uop, UopLoops};
use crate::memory::DramBlock;
use crate::sim::{Module, module_of};

pub use crate::config::MAX_XFER;
/// `VTASynchronize`'s wait_cycles as TVM passes it.
pub const DEFAULT_WAIT_CYCLES: u32 = 1 << 31;

/// Debug flags of `VTASetDebugMode`.
pub const DEBUG_DUMP_INSN: u32 = 2;
pub const DEBUG_DUMP_UOP: u32 = 4;
pub const DEBUG_SKIP_READ_BARRIER: u32 = 8;
pub const DEBUG_SKIP_WRITE_BARRIER: u32 = 16;
pub const DEBUG_FORCE_SERIAL: u32 = 32;

/// Queue ids of `VTADepPush` / `VTADepPop`.
pub const QID_LOAD: i32 = 1;
pub const QID_COMPUTE: i32 = 2;
pub const QID_STORE: i32 = 3;

/// GEMM or ALU: what a kernel's uops drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelMode {
    Gemm = 0,
    Alu = 1,
}

/// One `VTAUopLoopBegin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UopLoop {
    pub extent: u32,
    pub dst_factor: u32,
    pub src_factor: u32,
    pub wgt_factor: u32,
}

/// A recorded micro-op kernel: its uops, up to two loops and the shared mode fields.
#[derive(Debug, PartialEq, Eq)]
pub struct UopKernel {
    id: u64,
    pub uops: Vec<Uop>,
    pub loops: Vec<UopLoop>,
    pub mode: KernelMode,
    pub reset: bool,
    pub alu_op: AluOp,
    pub use_imm: bool,
    pub imm: i16,
}

static NEXT_KERNEL: AtomicU64 = AtomicU64::new(1);

/// The most uops a kernel can hold: no configuration's uop SRAM is deeper (16-bit indices), so
/// a longer kernel could never be placed, and the cap bounds what a `finit` callback can record.
pub const MAX_KERNEL_UOPS: usize = 1 << 16;

/// Instructions the synchronize epilogue may add (up to two NOPs per dependency push, one per
/// pop, the compute NOP and FINISH): operations other than loads and stores (which synchronize
/// on their own near the limit, as the reference does) leave this much room.
const EPILOGUE: usize = 8;

/// Records a kernel with the reference's rules (loops first, at most two, uops agreeing on
/// mode, reset and ALU fields, no write hazard on the two preceding destinations).
#[derive(Debug, Default)]
pub struct KernelRecorder {
    uops: Vec<Uop>,
    loops: Vec<UopLoop>,
    open_loops: usize,
    first: Option<(KernelMode, bool, AluOp, bool, i16)>,
    error: Option<VtaError>,
}

impl KernelRecorder {
    fn fail(&mut self, why: String) {
        self.error.get_or_insert(VtaError::Runtime(why));
    }

    pub fn loop_begin(&mut self, extent: u32, dst_factor: u32, src_factor: u32, wgt_factor: u32) {
        if !self.uops.is_empty() {
            self.fail("VTAUopLoopBegin after the kernel's first uop".into());
        } else if self.loops.len() == 2 {
            self.fail("more than two uop loops in a kernel".into());
        } else {
            self.loops.push(UopLoop { extent, dst_factor, src_factor, wgt_factor });
            self.open_loops += 1;
        }
    }

    pub fn loop_end(&mut self) {
        match self.open_loops.checked_sub(1) {
            Some(n) => self.open_loops = n,
            None => self.fail("VTAUopLoopEnd without a loop".into()),
        }
    }

    /// `VTAUopPush(mode, reset_out, dst, src, wgt, opcode, use_imm, imm)`.
    #[allow(clippy::too_many_arguments)]
    pub fn push(&mut self, mode: u32, reset: bool, dst: u32, src: u32, wgt: u32, opcode: u32, use_imm: bool, imm: i32) {
        let mode = match mode {
            0 => KernelMode::Gemm,
            1 => KernelMode::Alu,
            m => return self.fail(format!("uop mode {m} (0 = GEMM, 1 = ALU)")),
        };
        let Some(op) = AluOp::from_bits(opcode as u64) else {
            return self.fail(format!("undefined ALU opcode {opcode}"));
        };
        // The reference stores the immediate in 16 bits.
        let fields = (mode, reset, op, use_imm, imm as i16);
        let first = *self.first.get_or_insert(fields);
        if (first.0, first.1) != (mode, reset) {
            return self.fail("uops of one kernel must share mode and reset".into());
        }
        if mode == KernelMode::Alu && first != fields {
            return self.fail("ALU uops of one kernel must share opcode and immediate".into());
        }
        if self.uops.len() == MAX_KERNEL_UOPS {
            return self.fail(format!("more than {MAX_KERNEL_UOPS} uops in a kernel"));
        }
        if self.uops.iter().rev().take(2).any(|u| u.dst == dst) {
            return self.fail(format!("uop destination {dst} repeats within two uops (write hazard)"));
        }
        self.uops.push(Uop { dst, src, wgt });
    }

    /// The finished kernel, or the first rule it broke.
    pub fn finish(self) -> Result<Arc<UopKernel>, VtaError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.open_loops != 0 {
            return Err(VtaError::Runtime("uop loop not closed with VTAUopLoopEnd".into()));
        }
        let (mode, reset, alu_op, use_imm, imm) = self.first.unwrap_or((KernelMode::Gemm, false, AluOp::Min, false, 0));
        Ok(Arc::new(UopKernel {
            id: NEXT_KERNEL.fetch_add(1, Ordering::Relaxed),
            uops: self.uops,
            loops: self.loops,
            mode,
            reset,
            alu_op,
            use_imm,
            imm,
        }))
    }
}

/// A kernel resident in uop SRAM at `begin..end`.
#[derive(Debug)]
struct CacheEntry {
    kernel: Arc<UopKernel>,
    begin: u32,
    end: u32,
}

/// Pending pops per module (prev, next).
#[derive(Clone, Copy, Debug, Default)]
struct Pops {
    prev: bool,
    next: bool,
}

/// The command queue: one device, the uop staging and instruction buffers, the stream being
/// built and the uop cache.
#[derive(Debug)]
pub struct CommandQueue {
    isa: Isa,
    device: DeviceId,
    uop_buffer: DramBlock,
    insn_buffer: DramBlock,
    insns: Vec<Insn>,
    pops: [Pops; 3],
    cache: Vec<CacheEntry>,
    cache_index: usize,
    sram_end: u32,
    debug: u32,
}

fn module_index(qid: i32) -> Result<usize, VtaError> {
    match qid {
        QID_LOAD => Ok(Module::Load as usize),
        QID_COMPUTE => Ok(Module::Compute as usize),
        QID_STORE => Ok(Module::Store as usize),
        other => Err(VtaError::Runtime(format!("queue id {other} (1 load, 2 compute, 3 store)"))),
    }
}

impl CommandQueue {
    /// Allocates the 32 MiB uop staging and instruction buffers and a device, in that order
    /// (so the physical addresses match the reference's).
    pub fn new(isa: Isa, driver: &mut dyn Driver) -> Result<CommandQueue, VtaError> {
        let uop_buffer = driver.mem_alloc(MAX_XFER, true)?;
        let insn_buffer = driver.mem_alloc(MAX_XFER, true)?;
        let device = driver.device_alloc()?;
        Ok(CommandQueue {
            isa,
            device,
            uop_buffer,
            insn_buffer,
            insns: Vec::new(),
            pops: [Pops::default(); 3],
            cache: Vec::new(),
            cache_index: 0,
            sram_end: 0,
            debug: 0,
        })
    }

    /// Releases the device and the queue's buffers (all of them, even if one fails).
    pub fn shutdown(self, driver: &mut dyn Driver) -> Result<(), VtaError> {
        let device = driver.device_free(self.device);
        let insns = driver.mem_free(self.insn_buffer.virt);
        let uops = driver.mem_free(self.uop_buffer.virt);
        device.and(insns).and(uops)
    }

    pub fn isa(&self) -> &Isa {
        &self.isa
    }

    /// The uop staging and instruction buffers: the queue's own, freed by `shutdown` only.
    pub fn dram(&self) -> [DramBlock; 2] {
        [self.uop_buffer, self.insn_buffer]
    }

    pub fn set_debug(&mut self, flags: u32) {
        self.debug = flags;
    }

    /// The instructions queued since the last synchronize.
    pub fn pending(&self) -> &[Insn] {
        &self.insns
    }

    fn take_pops(&mut self, module: usize) -> DepFlags {
        let p = std::mem::take(&mut self.pops[module]);
        DepFlags { pop_prev: p.prev, pop_next: p.next, ..DepFlags::default() }
    }

    /// A zero-size memory instruction of `module` (moves tokens only).
    fn nop(module: usize, deps: DepFlags) -> Insn {
        let mem = |memory_type: MemId| MemInsn { deps, memory_type: memory_type as u8, ..MemInsn::default() };
        match module {
            0 => Insn::Load(mem(MemId::Inp)),
            1 => Insn::Load(mem(MemId::Uop)),
            _ => Insn::Store(mem(MemId::Uop)),
        }
    }

    fn flush_pops(&mut self, module: usize) {
        let p = self.pops[module];
        if p.prev || p.next {
            let deps = self.take_pops(module);
            self.insns.push(Self::nop(module, deps));
        }
    }

    fn elem_bytes(&self, id: MemId) -> Result<u64, VtaError> {
        let bytes = self.isa.config.elem_bytes(id);
        if bytes > crate::memory::PAGE_BYTES {
            return Err(VtaError::Runtime(format!("{} elements of {bytes} bytes exceed a page", id.name())));
        }
        Ok(bytes as u64)
    }

    /// Refuses to grow the stream by `n` more instructions past the transfer limit (less room
    /// for the epilogue): without a synchronize, the stream could only fail later.
    fn reserve(&self, n: usize) -> Result<(), VtaError> {
        if (self.insns.len() + n + EPILOGUE) * INSN_BYTES > MAX_XFER {
            return Err(VtaError::Runtime(format!(
                "the stream of {} instructions reached the transfer limit; synchronize first",
                self.insns.len()
            )));
        }
        Ok(())
    }

    fn auto_sync(&mut self, driver: &mut dyn Driver) -> Result<(), VtaError> {
        if (self.insns.len() + 6) * INSN_BYTES > MAX_XFER {
            self.synchronize(driver, DEFAULT_WAIT_CYCLES)?;
        }
        Ok(())
    }

    /// `VTALoadBuffer2D` from DRAM at physical address `src_phys`.
    #[allow(clippy::too_many_arguments)]
    pub fn load_buffer_2d(
        &mut self,
        driver: &mut dyn Driver,
        src_phys: u64,
        src_elem_offset: u32,
        x_size: u32,
        y_size: u32,
        x_stride: u32,
        x_pad_before: u32,
        y_pad_before: u32,
        x_pad_after: u32,
        y_pad_after: u32,
        dst_sram_index: u32,
        dst_memory_type: u32,
    ) -> Result<(), VtaError> {
        let id = MemId::from_bits(dst_memory_type as u64)
            .filter(|&m| m != MemId::Out)
            .ok_or(VtaError::BadMemoryType { insn: "VTALoadBuffer2D", id: dst_memory_type as u8 })?;
        let dram_base = (src_phys / self.elem_bytes(id)?).checked_add(src_elem_offset as u64);
        let narrow = |v: u32, bits: u32, what: &str| {
            if bits < 32 && v >> bits != 0 {
                Err(VtaError::Encode(format!("{what} = {v} does not fit in {bits} bits")))
            } else {
                Ok(v)
            }
        };
        let mut insn = MemInsn {
            deps: DepFlags::default(),
            memory_type: id as u8,
            sram_base: narrow(dst_sram_index, 16, "sram index")? as u16,
            dram_base: dram_field(dram_base)?,
            y_size: narrow(y_size, 16, "y_size")? as u16,
            x_size: narrow(x_size, 16, "x_size")? as u16,
            x_stride: narrow(x_stride, 16, "x_stride")? as u16,
            y_pad_0: narrow(y_pad_before, 4, "y_pad_before")? as u8,
            y_pad_1: narrow(y_pad_after, 4, "y_pad_after")? as u8,
            x_pad_0: narrow(x_pad_before, 4, "x_pad_before")? as u8,
            x_pad_1: narrow(x_pad_after, 4, "x_pad_after")? as u8,
        };
        let module = module_of(&Insn::Load(insn)) as usize;
        insn.deps = self.take_pops(module);
        self.insns.push(Insn::Load(insn));
        self.auto_sync(driver)
    }

    /// `VTAStoreBuffer2D` to DRAM at physical address `dst_phys`.
    #[allow(clippy::too_many_arguments)]
    pub fn store_buffer_2d(
        &mut self,
        driver: &mut dyn Driver,
        src_sram_index: u32,
        src_memory_type: u32,
        dst_phys: u64,
        dst_elem_offset: u32,
        x_size: u32,
        y_size: u32,
        x_stride: u32,
    ) -> Result<(), VtaError> {
        let dram_base = (dst_phys / self.elem_bytes(MemId::Out)?).checked_add(dst_elem_offset as u64);
        let fits16 = |v: u32, what: &str| {
            u16::try_from(v).map_err(|_| VtaError::Encode(format!("{what} = {v} does not fit in 16 bits")))
        };
        let deps = self.take_pops(Module::Store as usize);
        self.insns.push(Insn::Store(MemInsn {
            deps,
            memory_type: u8::try_from(src_memory_type).unwrap_or(u8::MAX).min(7),
            sram_base: fits16(src_sram_index, "sram index")?,
            dram_base: dram_field(dram_base)?,
            y_size: fits16(y_size, "y_size")?,
            x_size: fits16(x_size, "x_size")?,
            x_stride: fits16(x_stride, "x_stride")?,
            ..MemInsn::default()
        }));
        self.auto_sync(driver)
    }

    /// Places `kernel` in uop SRAM unless resident (the reference's cache: kernels in SRAM
    /// order; one that does not fit after the last restarts at 0 and evicts the kernels it
    /// overlaps); returns the range and, when placed now, the UOP load to emit.
    fn place_kernel(&mut self, kernel: &Arc<UopKernel>) -> Result<((u32, u32), Option<MemInsn>), VtaError> {
        if let Some(e) = self.cache.iter().find(|e| e.kernel.id == kernel.id) {
            return Ok(((e.begin, e.end), None));
        }
        let n = kernel.uops.len() as u32;
        let depth = self.isa.config.depth(MemId::Uop) as u32;
        if n > depth {
            return Err(VtaError::Runtime(format!("a kernel of {n} uops exceeds the uop SRAM ({depth})")));
        }
        let begin = if self.sram_end + n > depth {
            self.cache_index = 0;
            0
        } else {
            self.sram_end
        };
        self.sram_end = begin + n;
        let evict_begin = self.cache_index;
        while self.cache_index < self.cache.len() && self.cache[self.cache_index].begin < self.sram_end {
            self.cache_index += 1;
        }
        self.cache
            .splice(evict_begin..self.cache_index, [CacheEntry { kernel: kernel.clone(), begin, end: self.sram_end }]);
        self.cache_index = evict_begin + 1;
        let offset: usize = self.cache[..evict_begin].iter().map(|e| e.kernel.uops.len()).sum();
        if (offset + n as usize) * UOP_BYTES > MAX_XFER {
            return Err(VtaError::Runtime("uop staging buffer full; synchronize more often".into()));
        }
        let dram_base = (self.uop_buffer.phys + (offset * UOP_BYTES) as u64) / UOP_BYTES as u64;
        let load = MemInsn::transfer(MemId::Uop, begin as usize, dram_base, 1, n as usize, n as usize);
        Ok(((begin, self.sram_end), Some(load)))
    }

    fn loops_of(kernel: &UopKernel, (bgn, end): (u32, u32), single_is_outer: bool) -> (UopLoops, u32, u32) {
        let mut l = UopLoops { uop_bgn: bgn, uop_end: end, iter_out: 1, iter_in: 1, ..UopLoops::default() };
        let (mut wgt_out, mut wgt_in) = (0, 0);
        let mut set_outer = |l: &mut UopLoops, lp: &UopLoop| {
            (l.iter_out, l.dst_factor_out, l.src_factor_out, wgt_out) =
                (lp.extent, lp.dst_factor, lp.src_factor, lp.wgt_factor);
        };
        match kernel.loops.as_slice() {
            [] => {}
            [only] if single_is_outer => set_outer(&mut l, only),
            [only] => {
                (l.iter_in, l.dst_factor_in, l.src_factor_in, wgt_in) =
                    (only.extent, only.dst_factor, only.src_factor, only.wgt_factor)
            }
            [outer, inner, ..] => {
                set_outer(&mut l, outer);
                (l.iter_in, l.dst_factor_in, l.src_factor_in, wgt_in) =
                    (inner.extent, inner.dst_factor, inner.src_factor, inner.wgt_factor);
            }
        }
        (l, wgt_out, wgt_in)
    }

    /// Emits `kernel` (loading its uops first when they are not resident).
    pub fn push_kernel(&mut self, kernel: &Arc<UopKernel>) -> Result<(), VtaError> {
        self.reserve(2)?;
        let (range, load) = self.place_kernel(kernel)?;
        let compute = Module::Compute as usize;
        if let Some(mut load) = load {
            load.deps = self.take_pops(compute);
            self.insns.push(Insn::Load(load));
        }
        let deps = self.take_pops(compute);
        let insn = match kernel.mode {
            KernelMode::Gemm => {
                let (loops, wgt_factor_out, wgt_factor_in) = Self::loops_of(kernel, range, true);
                Insn::Gemm(GemmInsn { deps, reset: kernel.reset, loops, wgt_factor_out, wgt_factor_in })
            }
            KernelMode::Alu => {
                let (loops, _, _) = Self::loops_of(kernel, range, false);
                Insn::Alu(AluInsn {
                    deps,
                    reset: kernel.reset,
                    loops,
                    op: kernel.alu_op,
                    use_imm: kernel.use_imm,
                    imm: kernel.imm,
                })
            }
        };
        // Catch fields the ISA cannot hold before the stream is built.
        self.isa.encode(&insn)?;
        self.insns.push(insn);
        Ok(())
    }

    /// `VTADepPop(from, to)`: the next instruction of `to` waits for a token from `from`.
    pub fn dep_pop(&mut self, from: i32, to: i32) -> Result<(), VtaError> {
        self.reserve(1)?;
        self.pop_dep(from, to)
    }

    /// `VTADepPush(from, to)`: the last instruction of `from` (or a NOP) sends a token to `to`.
    pub fn dep_push(&mut self, from: i32, to: i32) -> Result<(), VtaError> {
        self.reserve(2)?;
        self.push_dep(from, to)
    }

    /// `dep_pop` without the room check (the epilogue has room reserved).
    fn pop_dep(&mut self, from: i32, to: i32) -> Result<(), VtaError> {
        let (f, t) = (module_index(from)?, module_index(to)?);
        check_neighbours(f, t)?;
        if f < t && self.pops[t].prev || f > t && self.pops[t].next {
            self.flush_pops(t);
        }
        if f < t {
            self.pops[t].prev = true;
        } else {
            self.pops[t].next = true;
        }
        Ok(())
    }

    fn push_dep(&mut self, from: i32, to: i32) -> Result<(), VtaError> {
        let (f, t) = (module_index(from)?, module_index(to)?);
        check_neighbours(f, t)?;
        self.flush_pops(f);
        let last_of_from = self.insns.last_mut().filter(|i| match i {
            // A zero-size LOAD belongs to no module; a zero-size STORE is still a store.
            Insn::Load(m) if m.x_size == 0 => false,
            other => module_of(other) as usize == f,
        });
        if let Some(last) = last_of_from {
            let deps = deps_mut(last);
            let flag = if f < t { &mut deps.push_next } else { &mut deps.push_prev };
            if !*flag {
                *flag = true;
                return Ok(());
            }
        }
        let deps = if f < t {
            DepFlags { push_next: true, ..DepFlags::default() }
        } else {
            DepFlags { push_prev: true, ..DepFlags::default() }
        };
        self.insns.push(Self::nop(f, deps));
        Ok(())
    }

    /// Finishes the stream (epilogue and FINISH), copies uops and instructions to device
    /// memory, runs them and starts a new stream. Runs a short stream even when empty.
    pub fn synchronize(&mut self, driver: &mut dyn Driver, wait_cycles: u32) -> Result<(), VtaError> {
        let compute = Module::Compute as usize;
        if self.debug & DEBUG_FORCE_SERIAL != 0 {
            self.serialize()?;
        } else {
            self.push_dep(QID_STORE, QID_COMPUTE)?;
            self.push_dep(QID_LOAD, QID_COMPUTE)?;
            self.pop_dep(QID_STORE, QID_COMPUTE)?;
            self.pop_dep(QID_LOAD, QID_COMPUTE)?;
            self.flush_pops(compute);
        }
        self.insns.push(Insn::Finish(DepFlags::default()));
        let result = self.run(driver, wait_cycles);
        self.insns.clear();
        self.pops = [Pops::default(); 3];
        self.cache.clear();
        self.cache_index = 0;
        self.sram_end = 0;
        result
    }

    fn run(&mut self, driver: &mut dyn Driver, wait_cycles: u32) -> Result<(), VtaError> {
        let mut staging = Vec::new();
        for e in &self.cache {
            for u in &e.kernel.uops {
                staging.extend_from_slice(&self.isa.encode_uop(u)?.to_le_bytes());
            }
        }
        let mut stream = Vec::with_capacity(self.insns.len() * INSN_BYTES);
        for insn in &self.insns {
            stream.extend_from_slice(&self.isa.encode(insn)?.to_le_bytes());
        }
        if stream.len() > MAX_XFER || staging.len() > MAX_XFER {
            return Err(VtaError::Runtime("stream larger than the transfer limit".into()));
        }
        if self.debug & DEBUG_DUMP_INSN != 0 {
            eprint!("{}", crate::isa::disassemble(&self.isa, &stream)?);
        }
        driver.copy_from_host(self.uop_buffer.virt, &staging)?;
        driver.copy_from_host(self.insn_buffer.virt, &stream)?;
        driver.flush_cache(self.uop_buffer.virt, self.uop_buffer.phys, staging.len());
        driver.flush_cache(self.insn_buffer.virt, self.insn_buffer.phys, stream.len());
        driver.device_run(self.device, self.insn_buffer.phys, self.insns.len() as u32, wait_cycles)
    }

    /// FORCE_SERIAL, as the reference rewrites the stream: every hand-off between adjacent
    /// instructions of neighbouring modules carries a token (all other flags are cleared), and
    /// FINISH waits for the last store and the last load.
    fn serialize(&mut self) -> Result<(), VtaError> {
        let (load, compute, store) = (Module::Load as usize, Module::Compute as usize, Module::Store as usize);
        let mut last_store = None;
        for i in 1..self.insns.len() {
            let (prev, now) = (module_of(&self.insns[i - 1]) as usize, module_of(&self.insns[i]) as usize);
            // (push_prev, push_next) of the earlier instruction, (pop_prev, pop_next) of the later.
            let (push, pop) = match (prev, now) {
                (p, n) if p + 1 == n => ((false, true), (true, false)),
                (p, n) if n + 1 == p => ((true, false), (false, true)),
                _ => ((false, false), (false, false)),
            };
            let d = deps_mut(&mut self.insns[i - 1]);
            (d.push_prev, d.push_next) = push;
            let d = deps_mut(&mut self.insns[i]);
            (d.pop_prev, d.pop_next) = pop;
            if now == store {
                last_store = Some(i);
            }
        }
        let qid = |m: usize| m as i32 + 1;
        let ends_with_store = last_store.is_some_and(|i| i + 1 == self.insns.len());
        if let Some(last) = self.insns.last_mut().filter(|_| ends_with_store) {
            deps_mut(last).push_prev = true;
            if !self.pops[compute].next {
                self.pop_dep(qid(store), qid(compute))?;
            }
            self.flush_pops(compute);
        } else {
            self.pops[compute].next = false;
        }
        self.push_dep(qid(compute), qid(load))?;
        self.pop_dep(qid(load), qid(compute))?;
        if !self.pops[load].next {
            self.pop_dep(qid(compute), qid(load))?;
        }
        self.flush_pops(load);
        self.push_dep(qid(load), qid(compute))?;
        self.flush_pops(compute);
        Ok(())
    }
}

fn deps_mut(insn: &mut Insn) -> &mut DepFlags {
    match insn {
        Insn::Load(m) | Insn::Store(m) => &mut m.deps,
        Insn::Gemm(g) => &mut g.deps,
        Insn::Alu(a) => &mut a.deps,
        Insn::Finish(d) => d,
    }
}

/// The 32-bit `dram_base` field for an element address, if it has one.
fn dram_field(elem: Option<u64>) -> Result<u32, VtaError> {
    elem.and_then(|e| u32::try_from(e).ok()).ok_or_else(|| VtaError::Encode("DRAM address above 32 bits".into()))
}

fn check_neighbours(from: usize, to: usize) -> Result<(), VtaError> {
    if from.abs_diff(to) != 1 {
        return Err(VtaError::Runtime(format!(
            "dependency between queues {} and {}: only load<->compute and compute<->store exist",
            from + 1,
            to + 1
        )));
    }
    Ok(())
}
