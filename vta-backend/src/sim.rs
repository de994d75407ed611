//! The functional simulator device: on-chip SRAMs, the load / compute / store modules with the
//! four dependency-token queues, and the execution semantics of VTA's reference simulator
//! (VTA-FACTS §3-§5), with profiling counters. A malformed stream is an error, never a panic or
//! a hang: undefined opcodes, SRAM or uop indices out of range, DRAM outside any allocation and
//! token pops that can never be satisfied (deadlock) are all reported.

use std::collections::VecDeque;

use crate::VtaError;
use crate::config::{INSN_BYTES, MemId, UOP_BYTES};
use crate::isa::{AluInsn, AluOp, DepFlags, GemmInsn, Insn, Isa, MemInsn, UopLoops, words};
use crate::memory::SimMemory;

/// Profiling counters, in the order `profiler_status` reports them (§5.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    pub inp_load_nbytes: u64,
    pub wgt_load_nbytes: u64,
    pub acc_load_nbytes: u64,
    pub uop_load_nbytes: u64,
    pub out_store_nbytes: u64,
    pub gemm_counter: u64,
    pub alu_counter: u64,
}

impl Profile {
    /// The counters as the reference's JSON object, keys in §5.1 order.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"inp_load_nbytes\": {}, \"wgt_load_nbytes\": {}, \"acc_load_nbytes\": {}, \"uop_load_nbytes\": {}, \
             \"out_store_nbytes\": {}, \"gemm_counter\": {}, \"alu_counter\": {}}}",
            self.inp_load_nbytes,
            self.wgt_load_nbytes,
            self.acc_load_nbytes,
            self.uop_load_nbytes,
            self.out_store_nbytes,
            self.gemm_counter,
            self.alu_counter
        )
    }
}

/// The three modules instructions are routed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    Load = 0,
    Compute = 1,
    Store = 2,
}

/// Token FIFOs (only their fill counts matter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    pub load_to_compute: u64,
    pub compute_to_load: u64,
    pub compute_to_store: u64,
    pub store_to_compute: u64,
}

/// Which module runs an instruction (§2.8).
pub fn module_of(insn: &Insn) -> Module {
    match insn {
        Insn::Load(m) if m.memory_type == MemId::Inp as u8 || m.memory_type == MemId::Wgt as u8 => Module::Load,
        Insn::Store(_) => Module::Store,
        _ => Module::Compute,
    }
}

fn deps_of(insn: &Insn) -> DepFlags {
    match insn {
        Insn::Load(m) | Insn::Store(m) => m.deps,
        Insn::Gemm(g) => g.deps,
        Insn::Alu(a) => a.deps,
        Insn::Finish(d) => *d,
    }
}

/// One simulated VTA core. SRAM contents and leftover tokens persist across runs.
#[derive(Clone, Debug)]
pub struct SimDevice {
    isa: Isa,
    uop: Vec<u32>,
    inp: Vec<i8>,
    wgt: Vec<i8>,
    acc: Vec<i32>,
    pub tokens: Tokens,
    /// Debug mode: counters advance but only UOP loads execute (the reference's skip-exec).
    pub skip_exec: bool,
    /// A watchdog for untrusted streams: at most this many uop executions (GEMM/ALU loop
    /// iterations) per run; `None` runs any valid stream to completion, as VTA's simulator does.
    pub work_limit: Option<u64>,
    work_done: u64,
}

impl SimDevice {
    pub fn new(isa: Isa) -> SimDevice {
        let c = isa.config;
        SimDevice {
            uop: vec![0; c.depth(MemId::Uop)],
            inp: vec![0; c.depth(MemId::Inp) * c.lanes(MemId::Inp)],
            wgt: vec![0; c.depth(MemId::Wgt) * c.lanes(MemId::Wgt)],
            acc: vec![0; c.depth(MemId::Acc) * c.lanes(MemId::Acc)],
            tokens: Tokens::default(),
            skip_exec: false,
            work_limit: None,
            work_done: 0,
            isa,
        }
    }

    pub fn isa(&self) -> &Isa {
        &self.isa
    }

    /// Accumulator lanes of element `index` (for tests and debugging).
    pub fn acc_element(&self, index: usize) -> &[i32] {
        let lanes = self.isa.config.lanes(MemId::Acc);
        &self.acc[index * lanes..(index + 1) * lanes]
    }

    /// Runs `count` instructions at physical address `insn_phys` until FINISH executes.
    pub fn run(
        &mut self,
        mem: &mut SimMemory,
        profile: &mut Profile,
        insn_phys: u64,
        count: u32,
    ) -> Result<(), VtaError> {
        self.work_done = 0;
        let bytes = mem.read(insn_phys, count as usize * INSN_BYTES)?;
        let mut queues: [VecDeque<(usize, Insn)>; 3] = Default::default();
        for (k, w) in words(bytes)?.into_iter().enumerate() {
            let insn = self.isa.decode(w).map_err(|e| VtaError::AtInstruction { index: k, error: Box::new(e) })?;
            queues[module_of(&insn) as usize].push_back((k, insn));
        }
        loop {
            let mut progress = false;
            let mut finished = false;
            for queue in &mut queues {
                while let Some(&(k, insn)) = queue.front() {
                    if !self.try_pop(&insn) {
                        break;
                    }
                    queue.pop_front();
                    progress = true;
                    self.execute(mem, profile, &insn)
                        .map_err(|e| VtaError::AtInstruction { index: k, error: Box::new(e) })?;
                    self.push(&insn);
                    finished |= matches!(insn, Insn::Finish(_));
                }
            }
            if finished {
                return Ok(());
            }
            if !progress {
                let stuck: Vec<String> =
                    queues.iter().filter_map(|q| q.front()).map(|(k, i)| format!("#{k} {i}")).collect();
                return Err(if stuck.is_empty() {
                    VtaError::NoFinish
                } else {
                    VtaError::Deadlock { stuck: stuck.join("; "), tokens: format!("{:?}", self.tokens) }
                });
            }
        }
    }

    /// Takes the tokens `insn` pops, if all are there.
    fn try_pop(&mut self, insn: &Insn) -> bool {
        let d = deps_of(insn);
        let t = &mut self.tokens;
        let (prev, next) = match module_of(insn) {
            // Load has no upstream queue and store no downstream one: those flags are ignored.
            Module::Load => (None, Some(&mut t.compute_to_load)),
            Module::Compute => (Some(&mut t.load_to_compute), Some(&mut t.store_to_compute)),
            Module::Store => (Some(&mut t.compute_to_store), None),
        };
        let want_prev = d.pop_prev && prev.is_some();
        let want_next = d.pop_next && next.is_some();
        if (want_prev && prev.as_ref().is_some_and(|c| **c == 0))
            || (want_next && next.as_ref().is_some_and(|c| **c == 0))
        {
            return false;
        }
        if want_prev && let Some(c) = prev {
            *c -= 1;
        }
        if want_next && let Some(c) = next {
            *c -= 1;
        }
        true
    }

    fn push(&mut self, insn: &Insn) {
        let d = deps_of(insn);
        let t = &mut self.tokens;
        match module_of(insn) {
            Module::Load => t.load_to_compute += d.push_next as u64,
            Module::Compute => {
                t.compute_to_load += d.push_prev as u64;
                t.compute_to_store += d.push_next as u64;
            }
            Module::Store => t.store_to_compute += d.push_prev as u64,
        }
    }

    fn execute(&mut self, mem: &mut SimMemory, profile: &mut Profile, insn: &Insn) -> Result<(), VtaError> {
        match insn {
            Insn::Load(m) => self.load(mem, profile, m),
            Insn::Store(m) => self.store(mem, profile, m),
            Insn::Gemm(g) => self.gemm(profile, g),
            Insn::Alu(a) => self.alu(profile, a),
            Insn::Finish(_) => Ok(()),
        }
    }

    fn load(&mut self, mem: &SimMemory, profile: &mut Profile, m: &MemInsn) -> Result<(), VtaError> {
        if m.x_size == 0 {
            return Ok(());
        }
        let id = MemId::from_bits(m.memory_type as u64)
            .filter(|&id| id != MemId::Out)
            .ok_or(VtaError::BadMemoryType { insn: "LOAD", id: m.memory_type })?;
        let c = self.isa.config;
        let (xs, ys) = (m.x_size as usize, m.y_size as usize);
        let row = m.x_pad_0 as usize + xs + m.x_pad_1 as usize;
        let rows = m.y_pad_0 as usize + ys + m.y_pad_1 as usize;
        let depth = c.depth(id);
        let end = m.sram_base as usize + row * rows;
        if end > depth {
            return Err(VtaError::SramOutOfRange { what: id.name(), index: end - 1, depth });
        }
        let elems = (xs * ys) as u64;
        match id {
            MemId::Inp => profile.inp_load_nbytes += elems * c.elem_bytes(id) as u64,
            MemId::Wgt => profile.wgt_load_nbytes += elems * c.elem_bytes(id) as u64,
            MemId::Acc | MemId::Acc8Bit => profile.acc_load_nbytes += elems * c.elem_bytes(MemId::Acc) as u64,
            MemId::Uop => profile.uop_load_nbytes += elems * UOP_BYTES as u64,
            MemId::Out => unreachable!("rejected above"),
        }
        if self.skip_exec && id != MemId::Uop {
            return Ok(());
        }
        let lanes = c.lanes(id);
        let eb = c.elem_bytes(id);
        // Zero the whole tile first, then copy the rows in (padding is all-zero bits).
        let base = m.sram_base as usize;
        self.fill_zero(id, base, row * rows);
        for r in 0..ys {
            let src = (m.dram_base as u64 + (r * m.x_stride as usize) as u64) * eb as u64;
            let bytes = mem.read(src, xs * eb)?;
            let dst = base + (m.y_pad_0 as usize + r) * row + m.x_pad_0 as usize;
            match id {
                MemId::Uop => {
                    for (k, b) in bytes.chunks_exact(4).enumerate() {
                        self.uop[dst + k] = u32::from_le_bytes(b.try_into().expect("4 bytes"));
                    }
                }
                MemId::Inp => copy_i8(&mut self.inp[dst * lanes..(dst + xs) * lanes], bytes),
                MemId::Wgt => copy_i8(&mut self.wgt[dst * lanes..(dst + xs) * lanes], bytes),
                MemId::Acc => {
                    for (a, b) in self.acc[dst * lanes..(dst + xs) * lanes].iter_mut().zip(bytes.chunks_exact(4)) {
                        *a = i32::from_le_bytes(b.try_into().expect("4 bytes"));
                    }
                }
                MemId::Acc8Bit => {
                    for (a, &b) in self.acc[dst * lanes..(dst + xs) * lanes].iter_mut().zip(bytes) {
                        *a = b as i8 as i32;
                    }
                }
                MemId::Out => unreachable!("rejected above"),
            }
        }
        Ok(())
    }

    fn fill_zero(&mut self, id: MemId, base: usize, count: usize) {
        let lanes = self.isa.config.lanes(id);
        let range = base * lanes..(base + count) * lanes;
        match id {
            MemId::Uop => self.uop[base..base + count].fill(0),
            MemId::Inp => self.inp[range].fill(0),
            MemId::Wgt => self.wgt[range].fill(0),
            MemId::Acc | MemId::Acc8Bit | MemId::Out => self.acc[range].fill(0),
        }
    }

    fn store(&mut self, mem: &mut SimMemory, profile: &mut Profile, m: &MemInsn) -> Result<(), VtaError> {
        // A zero-size STORE is the store module's NOP (the runtime writes it with memory type 0).
        if m.x_size == 0 {
            return Ok(());
        }
        if m.memory_type != MemId::Out as u8 {
            return Err(VtaError::BadMemoryType { insn: "STORE", id: m.memory_type });
        }
        if m.x_pad_0 | m.x_pad_1 | m.y_pad_0 | m.y_pad_1 != 0 {
            return Err(VtaError::Stream("STORE with padding".into()));
        }
        let c = self.isa.config;
        let (xs, ys) = (m.x_size as usize, m.y_size as usize);
        let depth = c.depth(MemId::Acc);
        let end = m.sram_base as usize + xs * ys;
        if end > depth {
            return Err(VtaError::SramOutOfRange { what: "ACC (store source)", index: end - 1, depth });
        }
        profile.out_store_nbytes += (xs * ys * c.elem_bytes(MemId::Out)) as u64;
        if self.skip_exec {
            return Ok(());
        }
        let lanes = c.lanes(MemId::Out);
        let mut row = vec![0u8; xs * lanes];
        for r in 0..ys {
            let src = m.sram_base as usize + r * xs;
            for (o, &a) in row.iter_mut().zip(&self.acc[src * lanes..(src + xs) * lanes]) {
                *o = a as u8;
            }
            let dst = (m.dram_base as u64 + (r * m.x_stride as usize) as u64) * lanes as u64;
            mem.write(dst, &row)?;
        }
        Ok(())
    }

    /// Checks the uop range of a GEMM/ALU and the watchdog; returns the work it represents.
    fn check_loops(&mut self, l: &UopLoops) -> Result<u64, VtaError> {
        let depth = self.isa.config.depth(MemId::Uop);
        if l.uop_end as usize > depth || l.uop_bgn > l.uop_end {
            return Err(VtaError::UopOutOfRange { bgn: l.uop_bgn, end: l.uop_end, depth });
        }
        let work = l.iter_out as u64 * l.iter_in as u64 * (l.uop_end - l.uop_bgn) as u64;
        self.work_done += work;
        if let Some(limit) = self.work_limit
            && self.work_done > limit
        {
            return Err(VtaError::WorkLimit(limit));
        }
        Ok(work)
    }

    /// (dst, src, wgt) element indices of uop `u` at loop iteration (`i_out`, `i_in`).
    fn uop_indices(
        &self,
        u: u32,
        l: &UopLoops,
        wgt_factors: (u32, u32),
        i_out: usize,
        i_in: usize,
    ) -> (usize, usize, usize) {
        let uop = self.isa.decode_uop(self.uop[u as usize]);
        let at = |base: u32, out: u32, inner: u32| base as usize + i_out * out as usize + i_in * inner as usize;
        (
            at(uop.dst, l.dst_factor_out, l.dst_factor_in),
            at(uop.src, l.src_factor_out, l.src_factor_in),
            at(uop.wgt, wgt_factors.0, wgt_factors.1),
        )
    }

    fn gemm(&mut self, profile: &mut Profile, g: &GemmInsn) -> Result<(), VtaError> {
        let work = self.check_loops(&g.loops)?;
        if !g.reset {
            profile.gemm_counter += work;
        }
        if self.skip_exec {
            return Ok(());
        }
        let c = self.isa.config;
        let (batch, bin, bout) = (c.batch(), c.block_in(), c.block_out());
        let (acc_depth, inp_depth, wgt_depth) = (c.depth(MemId::Acc), c.depth(MemId::Inp), c.depth(MemId::Wgt));
        let l = &g.loops;
        for i_out in 0..l.iter_out as usize {
            for i_in in 0..l.iter_in as usize {
                for u in l.uop_bgn..l.uop_end {
                    let (dst, src, w) = self.uop_indices(u, l, (g.wgt_factor_out, g.wgt_factor_in), i_out, i_in);
                    check_index("ACC", dst, acc_depth)?;
                    let acc = &mut self.acc[dst * batch * bout..(dst + 1) * batch * bout];
                    if g.reset {
                        acc.fill(0);
                        continue;
                    }
                    check_index("INP", src, inp_depth)?;
                    check_index("WGT", w, wgt_depth)?;
                    let inp = &self.inp[src * batch * bin..(src + 1) * batch * bin];
                    let wgt = &self.wgt[w * bout * bin..(w + 1) * bout * bin];
                    for (b, acc_row) in acc.chunks_exact_mut(bout).enumerate() {
                        let x = &inp[b * bin..(b + 1) * bin];
                        for (a, wrow) in acc_row.iter_mut().zip(wgt.chunks_exact(bin)) {
                            let dot = x.iter().zip(wrow).fold(0i32, |s, (&p, &q)| s.wrapping_add(p as i32 * q as i32));
                            *a = a.wrapping_add(dot);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn alu(&mut self, profile: &mut Profile, a: &AluInsn) -> Result<(), VtaError> {
        profile.alu_counter += self.check_loops(&a.loops)?;
        if self.skip_exec {
            return Ok(());
        }
        let c = self.isa.config;
        let lanes = c.lanes(MemId::Acc);
        let depth = c.depth(MemId::Acc);
        let l = &a.loops;
        for i_out in 0..l.iter_out as usize {
            for i_in in 0..l.iter_in as usize {
                for u in l.uop_bgn..l.uop_end {
                    let (dst, src, _) = self.uop_indices(u, l, (0, 0), i_out, i_in);
                    check_index("ACC", dst, depth)?;
                    if !a.use_imm {
                        check_index("ACC", src, depth)?;
                    }
                    for lane in 0..lanes {
                        let x = self.acc[dst * lanes + lane];
                        let y = if a.use_imm { a.imm as i32 } else { self.acc[src * lanes + lane] };
                        self.acc[dst * lanes + lane] = alu_op(a.op, x, y);
                    }
                }
            }
        }
        Ok(())
    }
}

/// One ALU lane (§4.4). Shift amounts use their low 5 bits, as the reference's compiled C++
/// does on x86 (larger amounts are undefined there).
pub fn alu_op(op: AluOp, x: i32, y: i32) -> i32 {
    match op {
        AluOp::Min => x.min(y),
        AluOp::Max => x.max(y),
        AluOp::Add => x.wrapping_add(y),
        AluOp::Shr if y >= 0 => x.wrapping_shr(y as u32),
        AluOp::Shr => x.wrapping_shl(y.unsigned_abs()),
        AluOp::Mul => x.wrapping_mul(y),
    }
}

fn check_index(what: &'static str, index: usize, depth: usize) -> Result<(), VtaError> {
    if index >= depth { Err(VtaError::SramOutOfRange { what, index, depth }) } else { Ok(()) }
}

fn copy_i8(dst: &mut [i8], src: &[u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s as i8;
    }
}
