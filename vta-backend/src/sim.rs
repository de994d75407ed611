//! The functional simulator device: on-chip SRAMs, the load / compute / store modules with the
//! four dependency-token queues, and the execution semantics of VTA's reference simulator
//! (VTA-FACTS §3-§5), with profiling counters. A malformed stream is an error, never a panic or
//! a hang: undefined opcodes, SRAM or uop indices out of range, DRAM outside any allocation and
//! token pops that can never be satisfied (deadlock) are all reported.
//!
//! Runs are bounded in *cycles*, the unit of `VTADeviceRun`'s and `VTASynchronize`'s
//! `wait_cycles` and of the drivers' work limit. A cycle is roughly what VTA's hardware spends in
//! one clock: fetching one instruction (every instruction of the stream, charged when the run
//! starts), executing one micro-op (one GEMM or ALU uop at one loop iteration) and moving one SRAM
//! element with a LOAD (padding included) or a STORE. An instruction runs only if all of its
//! cycles fit the limit; otherwise the run stops with [`VtaError::Timeout`] before it.

use crate::VtaError;
use crate::config::{INSN_BYTES, MAX_XFER, MemId, UOP_BYTES};
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
}

/// The cycles (unit: see the module docs) a run has spent against its limit.
struct Clock {
    spent: u64,
    limit: u64,
}

impl Clock {
    /// Spends `cycles`, or fails without spending when that would pass the limit.
    fn charge(&mut self, cycles: u64) -> Result<(), VtaError> {
        match self.spent.checked_add(cycles).filter(|&total| total <= self.limit) {
            Some(total) => {
                self.spent = total;
                Ok(())
            }
            None => Err(VtaError::Timeout { spent: self.spent, limit: self.limit, needed: cycles }),
        }
    }
}

/// Cycles one instruction costs once fetched: the SRAM elements a LOAD writes (padding
/// included) or a STORE reads, and the uops a GEMM or ALU executes (every loop iteration).
/// Products of 16-bit fields and 14-bit loop extents, so they cannot overflow a u64.
pub fn cycles(insn: &Insn) -> u64 {
    match insn {
        Insn::Load(m) | Insn::Store(m) if m.x_size == 0 => 0,
        Insn::Load(m) => {
            let row = m.x_pad_0 as u64 + m.x_size as u64 + m.x_pad_1 as u64;
            row * (m.y_pad_0 as u64 + m.y_size as u64 + m.y_pad_1 as u64)
        }
        Insn::Store(m) => m.x_size as u64 * m.y_size as u64,
        Insn::Gemm(GemmInsn { loops, .. }) | Insn::Alu(AluInsn { loops, .. }) => {
            loops.iter_out as u64 * loops.iter_in as u64 * loops.uop_end.saturating_sub(loops.uop_bgn) as u64
        }
        Insn::Finish(_) => 0,
    }
}

/// Physical byte address of row `r` of a LOAD or STORE: (dram_base + r * x_stride) * element bytes.
fn row_address(m: &MemInsn, r: usize, elem_bytes: usize) -> Result<u64, VtaError> {
    (r as u64)
        .checked_mul(m.x_stride as u64)
        .and_then(|offset| offset.checked_add(m.dram_base as u64))
        .and_then(|elem| elem.checked_mul(elem_bytes as u64))
        .ok_or(VtaError::DramOutOfRange { phys: u64::MAX, len: elem_bytes })
}

/// The SRAM tile `[base, base + rows * row)` of a LOAD or STORE, checked against `depth`.
fn sram_tile(what: &'static str, base: u16, rows: u64, row: u64, depth: usize) -> Result<(), VtaError> {
    let end = base as u64 + rows * row;
    if end > depth as u64 {
        return Err(VtaError::SramOutOfRange { what, index: end - 1, depth });
    }
    Ok(())
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

    /// Runs `count` instructions at physical address `insn_phys` until FINISH executes, in at
    /// most `max_cycles` cycles; returns the cycles spent. A failed run (timeout included) keeps
    /// what the instructions before the failing one did to SRAM and DRAM, and clears the token
    /// queues so that the next run starts clean.
    pub fn run(
        &mut self,
        mem: &mut SimMemory,
        profile: &mut Profile,
        insn_phys: u64,
        count: u32,
        max_cycles: u64,
    ) -> Result<u64, VtaError> {
        let mut clock = Clock { spent: 0, limit: max_cycles };
        let result = self.run_stream(mem, profile, insn_phys, count as usize, &mut clock);
        if result.is_err() {
            self.tokens = Tokens::default();
        }
        result.map(|()| clock.spent)
    }

    fn run_stream(
        &mut self,
        mem: &mut SimMemory,
        profile: &mut Profile,
        insn_phys: u64,
        count: usize,
        clock: &mut Clock,
    ) -> Result<(), VtaError> {
        if count > MAX_XFER / INSN_BYTES {
            return Err(VtaError::Stream(format!(
                "{count} instructions exceed the transfer limit of {}",
                MAX_XFER / INSN_BYTES
            )));
        }
        // Fetching costs a cycle per instruction, charged first: decoding is bounded by the limit.
        clock.charge(count as u64)?;
        let mut insns = Vec::new();
        insns.try_reserve_exact(count).map_err(|_| VtaError::HostMemory(count * size_of::<Insn>()))?;
        for (k, w) in words(mem.read(insn_phys, count * INSN_BYTES)?)?.enumerate() {
            insns.push(self.isa.decode(w).map_err(|e| VtaError::AtInstruction { index: k, error: Box::new(e) })?);
        }
        // Each module runs its own instructions in stream order: next[m] is the index of the
        // next instruction module m has not executed.
        let mut next = [0usize; 3];
        let next_of = |m: usize, from: usize| {
            (from..insns.len()).find(|&k| module_of(&insns[k]) as usize == m).unwrap_or(insns.len())
        };
        for (m, n) in next.iter_mut().enumerate() {
            *n = next_of(m, 0);
        }
        loop {
            let mut progress = false;
            let mut finished = false;
            for (m, next) in next.iter_mut().enumerate() {
                while let Some(insn) = insns.get(*next) {
                    if !self.try_pop(insn) {
                        break;
                    }
                    let k = *next;
                    *next = next_of(m, k + 1);
                    progress = true;
                    self.execute(mem, profile, clock, insn)
                        .map_err(|e| VtaError::AtInstruction { index: k, error: Box::new(e) })?;
                    self.push(insn);
                    finished |= matches!(insn, Insn::Finish(_));
                }
            }
            if finished {
                return Ok(());
            }
            if !progress {
                let stuck: Vec<String> =
                    next.iter().filter_map(|&k| insns.get(k).map(|i| format!("#{k} {i}"))).collect();
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

    /// Executes `insn` if the clock allows all of it; otherwise nothing of it happens.
    fn execute(
        &mut self,
        mem: &mut SimMemory,
        profile: &mut Profile,
        clock: &mut Clock,
        insn: &Insn,
    ) -> Result<(), VtaError> {
        clock.charge(cycles(insn))?;
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
        let bad_type = VtaError::BadMemoryType { insn: "LOAD", id: m.memory_type };
        let id = MemId::from_bits(m.memory_type as u64).ok_or(bad_type.clone())?;
        let c = self.isa.config;
        let (xs, ys) = (m.x_size as usize, m.y_size as usize);
        let row = m.x_pad_0 as usize + xs + m.x_pad_1 as usize;
        let rows = m.y_pad_0 as u64 + ys as u64 + m.y_pad_1 as u64;
        sram_tile(id.name(), m.sram_base, rows, row as u64, c.depth(id))?;
        let elems = (xs * ys) as u64;
        // ACC_8BIT loads count at the accumulator's element size, as the reference does.
        let (counter, counted_bytes) = match id {
            MemId::Inp => (&mut profile.inp_load_nbytes, c.elem_bytes(id)),
            MemId::Wgt => (&mut profile.wgt_load_nbytes, c.elem_bytes(id)),
            MemId::Acc | MemId::Acc8Bit => (&mut profile.acc_load_nbytes, c.elem_bytes(MemId::Acc)),
            MemId::Uop => (&mut profile.uop_load_nbytes, UOP_BYTES),
            MemId::Out => return Err(bad_type),
        };
        *counter += elems * counted_bytes as u64;
        if self.skip_exec && id != MemId::Uop {
            return Ok(());
        }
        let lanes = c.lanes(id);
        let eb = c.elem_bytes(id);
        // Zero the whole tile first, then copy the rows in (padding is all-zero bits).
        let base = m.sram_base as usize;
        let tile = row * rows as usize;
        let (start, end) = (base * lanes, (base + tile) * lanes);
        match id {
            MemId::Uop => self.uop[base..base + tile].fill(0),
            MemId::Inp => self.inp[start..end].fill(0),
            MemId::Wgt => self.wgt[start..end].fill(0),
            // (OUT was rejected above.)
            MemId::Acc | MemId::Acc8Bit | MemId::Out => self.acc[start..end].fill(0),
        }
        for r in 0..ys {
            let bytes = mem.read(row_address(m, r, eb)?, xs * eb)?;
            let dst = base + (m.y_pad_0 as usize + r) * row + m.x_pad_0 as usize;
            let lanes_of = dst * lanes..(dst + xs) * lanes;
            match id {
                MemId::Uop => {
                    for (u, b) in self.uop[dst..dst + xs].iter_mut().zip(bytes.as_chunks::<4>().0) {
                        *u = u32::from_le_bytes(*b);
                    }
                }
                MemId::Inp => copy_i8(&mut self.inp[lanes_of], bytes),
                MemId::Wgt => copy_i8(&mut self.wgt[lanes_of], bytes),
                MemId::Acc => {
                    for (a, b) in self.acc[lanes_of].iter_mut().zip(bytes.as_chunks::<4>().0) {
                        *a = i32::from_le_bytes(*b);
                    }
                }
                // (OUT was rejected above.)
                MemId::Acc8Bit | MemId::Out => {
                    for (a, &b) in self.acc[lanes_of].iter_mut().zip(bytes) {
                        *a = b as i8 as i32;
                    }
                }
            }
        }
        Ok(())
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
        sram_tile("ACC (store source)", m.sram_base, ys as u64, xs as u64, c.depth(MemId::Acc))?;
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
            mem.write(row_address(m, r, c.elem_bytes(MemId::Out))?, &row)?;
        }
        Ok(())
    }

    /// Checks the uop range of a GEMM/ALU; returns the uops it executes.
    fn check_loops(&self, l: &UopLoops) -> Result<u64, VtaError> {
        let depth = self.isa.config.depth(MemId::Uop);
        if l.uop_end as usize > depth || l.uop_bgn > l.uop_end {
            return Err(VtaError::UopOutOfRange { bgn: l.uop_bgn, end: l.uop_end, depth });
        }
        Ok(l.iter_out as u64 * l.iter_in as u64 * (l.uop_end - l.uop_bgn) as u64)
    }

    /// (dst, src, wgt) element indices of uop `u` at loop iteration (`i_out`, `i_in`): fields of
    /// at most 16 bits times 14-bit iteration counts, so u64 holds them.
    fn uop_indices(&self, u: u32, l: &UopLoops, wgt_factors: (u32, u32), i_out: u64, i_in: u64) -> [u64; 3] {
        let uop = self.isa.decode_uop(self.uop[u as usize]);
        let at = |base: u32, out: u32, inner: u32| base as u64 + i_out * out as u64 + i_in * inner as u64;
        [
            at(uop.dst, l.dst_factor_out, l.dst_factor_in),
            at(uop.src, l.src_factor_out, l.src_factor_in),
            at(uop.wgt, wgt_factors.0, wgt_factors.1),
        ]
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
        for i_out in 0..l.iter_out as u64 {
            for i_in in 0..l.iter_in as u64 {
                for u in l.uop_bgn..l.uop_end {
                    let [dst, src, w] = self.uop_indices(u, l, (g.wgt_factor_out, g.wgt_factor_in), i_out, i_in);
                    let dst = check_index("ACC", dst, acc_depth)?;
                    let acc = &mut self.acc[dst * batch * bout..(dst + 1) * batch * bout];
                    if g.reset {
                        acc.fill(0);
                        continue;
                    }
                    let src = check_index("INP", src, inp_depth)?;
                    let w = check_index("WGT", w, wgt_depth)?;
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
        for i_out in 0..l.iter_out as u64 {
            for i_in in 0..l.iter_in as u64 {
                for u in l.uop_bgn..l.uop_end {
                    let [dst, src, _] = self.uop_indices(u, l, (0, 0), i_out, i_in);
                    let dst = check_index("ACC", dst, depth)?;
                    let src = if a.use_imm { 0 } else { check_index("ACC", src, depth)? };
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

/// `index` as an SRAM element index, if below `depth`.
fn check_index(what: &'static str, index: u64, depth: usize) -> Result<usize, VtaError> {
    usize::try_from(index).ok().filter(|&i| i < depth).ok_or(VtaError::SramOutOfRange { what, index, depth })
}

fn copy_i8(dst: &mut [i8], src: &[u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s as i8;
    }
}
