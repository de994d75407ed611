//! Offloaded regions as compiled code runs them.
//!
//! The compiler (heron-vta-compiler) turns each VTA region of a model into a [`RegionProgram`]:
//! an instruction stream whose DRAM addresses are element offsets into the region's buffers
//! (argument *slots*), its micro-ops, and relocations naming the slot each memory instruction
//! addresses. Its bytes ([`RegionProgram::to_bytes`]) are a constant of the compiled module.
//! Generated code calls [`heron_vta_region`] with the device handle of its run context (a
//! [`Session`]), the program and the buffers; the session uploads the program once, relocates
//! the stream to the buffers' physical addresses (again only when they change) and runs it
//! through its [`Driver`]: the built-in simulator, or the library `HERON_VTA_DRIVER` names.
//!
//! Errors cannot unwind through generated code: the first one is kept in the session, later
//! regions of the run are skipped, and the executor reports it after the run
//! ([`Session::take_error`]).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::VtaError;
use crate::config::{HwConfig, INSN_BYTES, MAX_XFER, MemId, UOP_BYTES};
use crate::driver::{DeviceId, Driver, DynamicDriver, SimDriver};
use crate::isa::{Insn, Isa, Uop};
use crate::memory::DramBlock;
use crate::sim::Profile;

/// Buffer arguments a region takes (unused ones are never addressed).
pub const SLOTS: usize = 5;
/// The relocation slot of the program's own micro-ops.
pub const UOP_SLOT: u8 = SLOTS as u8;

const MAGIC: &[u8; 8] = b"HVTAPRG1";
/// The largest program blob accepted.
const MAX_PROGRAM_BYTES: u64 = 1 << 30;

/// One region's VTA program.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionProgram {
    pub name: String,
    pub config: HwConfig,
    /// The stream, DRAM addresses relative to the slot each relocation names.
    pub insns: Vec<Insn>,
    pub uops: Vec<Uop>,
    /// (instruction index, slot): LOAD/STORE instructions whose `dram_base` is an offset into
    /// argument `slot` (or into the micro-ops, [`UOP_SLOT`]).
    pub relocs: Vec<(u32, u8)>,
    /// Bytes of each argument buffer the stream may touch; checked against the buffer's
    /// device allocation before every run.
    pub slot_bytes: [u64; SLOTS],
}

/// A little-endian reader that fails instead of reading past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], VtaError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| VtaError::Stream("region program is truncated".into()))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, VtaError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, VtaError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, VtaError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, VtaError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

fn config_bytes(c: &HwConfig) -> [u8; 10] {
    [
        c.log_inp_width,
        c.log_wgt_width,
        c.log_acc_width,
        c.log_batch,
        c.log_block_in,
        c.log_block_out,
        c.log_uop_buff_size,
        c.log_inp_buff_size,
        c.log_wgt_buff_size,
        c.log_acc_buff_size,
    ]
    .map(|v| v as u8)
}

impl RegionProgram {
    /// The program's bytes: magic, total length, configuration, name, counts, slot sizes, then
    /// the encoded instructions, micro-ops and relocations.
    pub fn to_bytes(&self) -> Result<Vec<u8>, VtaError> {
        let isa = Isa::new(self.config)?;
        let mut out = Vec::with_capacity(64 + self.insns.len() * INSN_BYTES + self.uops.len() * UOP_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&config_bytes(&self.config));
        let name = self.name.as_bytes();
        let name = &name[..name.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
        let count = |n: usize, what: &str| {
            u32::try_from(n).map_err(|_| VtaError::Encode(format!("{n} {what} in one region program")))
        };
        out.extend_from_slice(&count(self.insns.len(), "instructions")?.to_le_bytes());
        out.extend_from_slice(&count(self.uops.len(), "micro-ops")?.to_le_bytes());
        out.extend_from_slice(&count(self.relocs.len(), "relocations")?.to_le_bytes());
        for s in self.slot_bytes {
            out.extend_from_slice(&s.to_le_bytes());
        }
        for insn in &self.insns {
            out.extend_from_slice(&isa.encode(insn)?.to_le_bytes());
        }
        for u in &self.uops {
            out.extend_from_slice(&isa.encode_uop(u)?.to_le_bytes());
        }
        for &(i, slot) in &self.relocs {
            out.extend_from_slice(&i.to_le_bytes());
            out.push(slot);
        }
        let len = out.len() as u64;
        out[8..16].copy_from_slice(&len.to_le_bytes());
        Ok(out)
    }

    /// Parses and checks a program: every relocation names a LOAD/STORE and a slot, and the
    /// configuration is valid.
    pub fn from_bytes(bytes: &[u8]) -> Result<RegionProgram, VtaError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(8)? != MAGIC {
            return Err(VtaError::Stream("not a region program (bad magic)".into()));
        }
        if r.u64()? != bytes.len() as u64 {
            return Err(VtaError::Stream("region program length does not match its header".into()));
        }
        let c: Vec<u32> = r.take(10)?.iter().map(|&b| u32::from(b)).collect();
        let config = HwConfig {
            log_inp_width: c[0],
            log_wgt_width: c[1],
            log_acc_width: c[2],
            log_batch: c[3],
            log_block_in: c[4],
            log_block_out: c[5],
            log_uop_buff_size: c[6],
            log_inp_buff_size: c[7],
            log_wgt_buff_size: c[8],
            log_acc_buff_size: c[9],
        };
        let isa = Isa::new(config)?;
        let name_len = r.u16()? as usize;
        let name = String::from_utf8_lossy(r.take(name_len)?).into_owned();
        let (n_insn, n_uop, n_reloc) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
        let mut slot_bytes = [0u64; SLOTS];
        for s in slot_bytes.iter_mut() {
            *s = r.u64()?;
        }
        // Counts are checked against the remaining bytes before anything is allocated.
        let need = n_insn as u128 * INSN_BYTES as u128 + n_uop as u128 * UOP_BYTES as u128 + n_reloc as u128 * 5;
        if need != (bytes.len() - r.at) as u128 {
            return Err(VtaError::Stream("region program counts do not match its length".into()));
        }
        let mut insns = Vec::with_capacity(n_insn);
        for _ in 0..n_insn {
            insns.push(isa.decode(u128::from_le_bytes(r.take(INSN_BYTES)?.try_into().expect("16 bytes")))?);
        }
        let mut uops = Vec::with_capacity(n_uop);
        for _ in 0..n_uop {
            uops.push(isa.decode_uop(r.u32()?));
        }
        let mut relocs = Vec::with_capacity(n_reloc);
        for _ in 0..n_reloc {
            let (i, slot) = (r.u32()?, r.u8()?);
            let is_mem = matches!(insns.get(i as usize), Some(Insn::Load(_) | Insn::Store(_)));
            if !is_mem || slot > UOP_SLOT {
                return Err(VtaError::Stream(format!("relocation of instruction {i} to slot {slot} is invalid")));
            }
            relocs.push((i, slot));
        }
        Ok(RegionProgram { name, config, insns, uops, relocs, slot_bytes })
    }
}

/// A program uploaded to one session's device memory.
struct Loaded {
    program: RegionProgram,
    name: std::sync::Arc<str>,
    insn_block: DramBlock,
    uop_block: DramBlock,
    /// The argument addresses the uploaded stream is relocated to.
    relocated_for: Option<[u64; SLOTS]>,
}

/// One region call of a run, for the executor's report.
#[derive(Clone, Debug)]
pub struct RegionCall {
    /// The program's name, shared (recording a call allocates nothing once the log has room).
    pub name: std::sync::Arc<str>,
    /// When the call began and ended.
    pub start: Instant,
    pub end: Instant,
    /// Time inside the driver's run.
    pub device_time: Duration,
    /// Simulated cycles, from drivers that count them.
    pub cycles: Option<u64>,
}

/// A device of one driver and the region programs uploaded to it: the handle generated code
/// receives in its run context. One session runs one region at a time; a workspace owns one.
pub struct Session {
    isa: Isa,
    driver: Box<dyn Driver>,
    device: DeviceId,
    loaded: HashMap<usize, Loaded>,
    /// Device memory handed out by [`Session::alloc`], freed with the session.
    blocks: Vec<DramBlock>,
    error: Option<VtaError>,
    calls: Vec<RegionCall>,
}

// SAFETY: the session owns its driver (which is `Send`) and the device memory it allocated;
// raw addresses inside are plain integers.
unsafe impl Send for Session {}

impl Session {
    /// A session on the driver `HERON_VTA_DRIVER` names (a shared library exporting VTA's driver
    /// API), or on the simulator for `config`.
    pub fn new(config: HwConfig) -> Result<Session, VtaError> {
        let isa = Isa::new(config)?;
        let driver: Box<dyn Driver> = match std::env::var("HERON_VTA_DRIVER") {
            Ok(path) if !path.is_empty() => Box::new(DynamicDriver::load(&path)?),
            _ => Box::new(SimDriver::new(isa.clone())),
        };
        Session::with_driver(isa, driver)
    }

    pub fn with_driver(isa: Isa, mut driver: Box<dyn Driver>) -> Result<Session, VtaError> {
        let device = driver.device_alloc()?;
        Ok(Session { isa, driver, device, loaded: HashMap::new(), blocks: Vec::new(), error: None, calls: Vec::new() })
    }

    pub fn config(&self) -> HwConfig {
        self.isa.config
    }

    pub fn driver_name(&self) -> String {
        self.driver.name()
    }

    /// Device memory of `size` bytes holding `init` (then zeros), host-visible, alive as long as
    /// the session; returns its index for [`Session::memory`].
    pub fn alloc(&mut self, size: usize, init: &[u8]) -> Result<usize, VtaError> {
        let block = self.driver.mem_alloc(size.max(1), true)?;
        self.blocks.push(block);
        // The simulator zeroes blocks; a loaded driver may not.
        let mut bytes = vec![0u8; block.size];
        let n = init.len().min(bytes.len());
        bytes[..n].copy_from_slice(&init[..n]);
        self.driver.copy_from_host(block.virt, &bytes)?;
        self.driver.flush_cache(block.virt, block.phys, block.size);
        Ok(self.blocks.len() - 1)
    }

    /// The blocks [`Session::alloc`] handed out, as byte slices (in allocation order), for the
    /// CPU side of a run. The device reads and writes the same memory while regions run.
    pub fn memory(&mut self) -> Vec<&mut [u8]> {
        self.blocks
            .iter()
            // SAFETY: each block is a live allocation of `size` host-visible bytes owned by this
            // session (freed only on drop); blocks do not overlap, and the slices borrow the
            // session mutably, so nothing else hands them out meanwhile.
            .map(|b| unsafe { std::slice::from_raw_parts_mut(b.virt as *mut u8, b.size) })
            .collect()
    }

    /// The profiling counters since the last [`Session::clear_profile`] (simulators only).
    pub fn profile(&self) -> Option<Profile> {
        self.driver.profile()
    }

    pub fn clear_profile(&mut self) {
        self.driver.clear_profile();
    }

    /// The first error of the calls since the last take; the session runs regions again.
    pub fn take_error(&mut self) -> Option<VtaError> {
        self.error.take()
    }

    /// The region calls since the last take or clear.
    pub fn take_calls(&mut self) -> Vec<RegionCall> {
        std::mem::take(&mut self.calls)
    }

    /// Forgets the recorded calls, keeping the log's memory (the executor clears it before
    /// every run, so the log holds one run's calls however many runs a workspace makes).
    pub fn clear_calls(&mut self) {
        self.calls.clear();
    }

    /// Runs the program whose bytes start at `program` on `buffers` (host addresses).
    ///
    /// # Safety
    /// `program` must point at a complete program blob (its header says its length).
    pub unsafe fn run_region(&mut self, program: *const u8, buffers: [usize; SLOTS]) -> Result<(), VtaError> {
        let start = Instant::now();
        let key = program as usize;
        if !self.loaded.contains_key(&key) {
            // SAFETY: the caller passes a program blob; its first 16 bytes are the magic and
            // the length, which the parse then checks again.
            let header = unsafe { std::slice::from_raw_parts(program, 16) };
            if &header[..8] != MAGIC {
                return Err(VtaError::Stream("not a region program (bad magic)".into()));
            }
            let len = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
            if !(16..=MAX_PROGRAM_BYTES).contains(&len) {
                return Err(VtaError::Stream(format!("region program of {len} bytes")));
            }
            // SAFETY: as above; the blob is `len` bytes long.
            let bytes = unsafe { std::slice::from_raw_parts(program, len as usize) };
            let loaded = self.upload(RegionProgram::from_bytes(bytes)?)?;
            self.loaded.insert(key, loaded);
        }
        let loaded = self.loaded.get_mut(&key).expect("inserted above");
        let p = &loaded.program;
        let mut phys = [0u64; SLOTS];
        for (s, (&virt, &bytes)) in buffers.iter().zip(&p.slot_bytes).enumerate() {
            if bytes > 0 {
                let len = usize::try_from(bytes).map_err(|_| VtaError::DramOutOfRange { phys: 0, len: usize::MAX })?;
                phys[s] = self.driver.phys_range(virt, len).map_err(|e| {
                    VtaError::Runtime(format!(
                        "region '{}': argument {s} is not device memory of {bytes} bytes: {e}",
                        p.name
                    ))
                })?;
            }
        }
        if loaded.relocated_for != Some(phys) {
            let mut stream = Vec::with_capacity(p.insns.len() * INSN_BYTES);
            let mut insns = p.insns.clone();
            for &(i, slot) in &p.relocs {
                let base = if slot == UOP_SLOT { loaded.uop_block.phys } else { phys[slot as usize] };
                let (Insn::Load(m) | Insn::Store(m)) = &mut insns[i as usize] else { continue };
                let id = MemId::from_bits(u64::from(m.memory_type))
                    .ok_or(VtaError::BadMemoryType { insn: "LOAD/STORE", id: m.memory_type })?;
                let unit = self.isa.config.elem_bytes(id) as u64;
                if base % unit != 0 {
                    return Err(VtaError::Runtime(format!(
                        "region '{}': buffer at {base:#x} is not aligned to {unit}-byte {} elements",
                        p.name,
                        id.name()
                    )));
                }
                let at = u64::from(m.dram_base) + base / unit;
                m.dram_base = u32::try_from(at).map_err(|_| VtaError::DramOutOfRange { phys: at, len: 0 })?;
            }
            for insn in &insns {
                stream.extend_from_slice(&self.isa.encode(insn)?.to_le_bytes());
            }
            self.driver.copy_from_host(loaded.insn_block.virt, &stream)?;
            loaded.relocated_for = Some(phys);
        }
        let (block, count) = (loaded.insn_block, p.insns.len() as u32);
        self.driver.flush_cache(block.virt, block.phys, block.size);
        let device_start = Instant::now();
        self.driver.device_run(self.device, block.phys, count, 0)?;
        let device_time = device_start.elapsed();
        let name = loaded.name.clone();
        self.calls.push(RegionCall {
            name,
            start,
            end: Instant::now(),
            device_time,
            cycles: self.driver.last_run_cycles(),
        });
        Ok(())
    }

    fn upload(&mut self, program: RegionProgram) -> Result<Loaded, VtaError> {
        if program.config != self.isa.config {
            return Err(VtaError::Config(format!(
                "region '{}' was compiled for another hardware configuration than this device's",
                program.name
            )));
        }
        let insn_bytes = program.insns.len() * INSN_BYTES;
        if insn_bytes > MAX_XFER {
            return Err(VtaError::Stream(format!("region '{}': {insn_bytes} bytes of instructions", program.name)));
        }
        let insn_block = self.driver.mem_alloc(insn_bytes.max(1), true)?;
        let mut uop_bytes = Vec::with_capacity(program.uops.len() * UOP_BYTES);
        for u in &program.uops {
            uop_bytes.extend_from_slice(&self.isa.encode_uop(u)?.to_le_bytes());
        }
        let uop_block = self.driver.mem_alloc(uop_bytes.len().max(1), true)?;
        self.driver.copy_from_host(uop_block.virt, &uop_bytes)?;
        self.driver.flush_cache(uop_block.virt, uop_block.phys, uop_block.size);
        let name = program.name.as_str().into();
        Ok(Loaded { program, name, insn_block, uop_block, relocated_for: None })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Best effort: the driver outlives nothing of ours.
        for l in self.loaded.values() {
            let _ = self.driver.mem_free(l.insn_block.virt);
            let _ = self.driver.mem_free(l.uop_block.virt);
        }
        for b in &self.blocks {
            let _ = self.driver.mem_free(b.virt);
        }
        let _ = self.driver.device_free(self.device);
    }
}

/// The routine generated code calls for one region: `session` is the device handle of the run
/// context, `program` the region's program blob, `b0..b4` its buffers. Errors (and panics) are
/// kept in the session; after the first one, later regions of the run are skipped.
///
/// # Safety
/// `session` is a live [`Session`] used by no other thread during the call; `program` points
/// at a program blob.
pub unsafe extern "C" fn heron_vta_region(
    session: *mut std::ffi::c_void,
    program: *const u8,
    b0: *mut u8,
    b1: *mut u8,
    b2: *mut u8,
    b3: *mut u8,
    b4: *mut u8,
) {
    if session.is_null() {
        return;
    }
    // SAFETY: the run context's device slot holds the workspace's session (see the contract).
    let session = unsafe { &mut *(session as *mut Session) };
    if session.error.is_some() {
        return;
    }
    let buffers = [b0, b1, b2, b3, b4].map(|b| b as usize);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `program` is a program blob (the contract).
        unsafe { session.run_region(program, buffers) }
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => session.error = Some(e),
        Err(_) => session.error = Some(VtaError::Runtime("a region run panicked".into())),
    }
}

/// Sessions handed to C, so a forged or freed handle is an error rather than a dereference.
static LIVE_SESSIONS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

thread_local! {
    /// The message of the last failed `heron_vta_session_*` call on this thread.
    static LAST_ERROR: std::cell::RefCell<std::ffi::CString> = std::cell::RefCell::new(std::ffi::CString::default());
}

fn set_error(message: String) {
    let c = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn live(session: *mut Session) -> Option<&'static mut Session> {
    let sessions = LIVE_SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    if session.is_null() || !sessions.contains(&(session as usize)) {
        set_error("not a live session from heron_vta_session_new".into());
        return None;
    }
    // SAFETY: the address is a live session created by heron_vta_session_new and not freed;
    // the caller uses a session from one thread at a time (the header's contract).
    Some(unsafe { &mut *session })
}

/// A session on the simulator (or `HERON_VTA_DRIVER`) for `config` (NULL: the default
/// configuration); NULL on error (see [`heron_vta_session_last_error`]).
///
/// # Safety
/// `config` is NULL or points at a `HeronVtaConfig`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_session_new(config: *const HwConfig) -> *mut Session {
    // SAFETY: the caller passes NULL or a HeronVtaConfig, which is HwConfig's C layout.
    let config = unsafe { config.as_ref() }.copied().unwrap_or_default();
    match std::panic::catch_unwind(|| Session::new(config)) {
        Ok(Ok(s)) => {
            let p = Box::into_raw(Box::new(s));
            LIVE_SESSIONS.lock().unwrap_or_else(|e| e.into_inner()).push(p as usize);
            p
        }
        Ok(Err(e)) => {
            set_error(e.to_string());
            std::ptr::null_mut()
        }
        Err(_) => {
            set_error("creating the session panicked".into());
            std::ptr::null_mut()
        }
    }
}

/// Frees a session and its device memory; NULL is a no-op.
///
/// # Safety
/// No run may be using the session.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_session_free(session: *mut Session) {
    let mut sessions = LIVE_SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = sessions.iter().position(|&s| s == session as usize) {
        sessions.swap_remove(k);
        // SAFETY: the address came from Box::into_raw in heron_vta_session_new and was live.
        drop(unsafe { Box::from_raw(session) });
    }
}

/// Device memory of `size` bytes for a VTA pool, holding the `init_len` bytes at `init` (may be
/// NULL when `init_len` is 0) and zeros after; NULL on error. Freed with the session.
///
/// # Safety
/// `init` points at `init_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_session_alloc(
    session: *mut Session,
    size: usize,
    init: *const u8,
    init_len: usize,
) -> *mut u8 {
    let Some(s) = live(session) else { return std::ptr::null_mut() };
    if init_len > size || (init.is_null() && init_len > 0) {
        set_error(format!("{init_len} initial bytes for {size} bytes of memory"));
        return std::ptr::null_mut();
    }
    // SAFETY: `init` holds `init_len` bytes (the contract).
    let bytes = if init_len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(init, init_len) } };
    match s.alloc(size, bytes) {
        Ok(k) => s.blocks[k].virt as *mut u8,
        Err(e) => {
            set_error(e.to_string());
            std::ptr::null_mut()
        }
    }
}

/// The error that stopped the session's regions in the last run (then clears it), or NULL.
/// The string stays valid until the next call on this thread.
///
/// # Safety
/// `session` is NULL or a pointer from heron_vta_session_new.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_session_take_error(session: *mut Session) -> *const std::ffi::c_char {
    let Some(s) = live(session) else { return std::ptr::null() };
    match s.take_error() {
        Some(e) => {
            set_error(e.to_string());
            LAST_ERROR.with(|e| e.borrow().as_ptr())
        }
        None => std::ptr::null(),
    }
}

/// The message of the last failed `heron_vta_session_*` call on this thread, or NULL.
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_session_last_error() -> *const std::ffi::c_char {
    LAST_ERROR.with(|e| if e.borrow().is_empty() { std::ptr::null() } else { e.borrow().as_ptr() })
}

/// The name region functions call [`heron_vta_region`] by (its routine table entry's id).
pub const ROUTINE: &str = "heron_vta_region";

/// A run context for `heron_<name>_run_ctx` of an object with VTA regions: the routine table
/// `[heron_vta_region, the kernels...]` (the JIT's order), the session in device slot 0, and
/// parallel loops on `threads` (NULL: the calling thread).
pub struct VtaContext {
    routines: [heron_threads::RoutineEntry; 1 + heron_threads::KERNEL_ROUTINES],
    devices: [heron_threads::DeviceHandle; 1],
    context: heron_threads::RunContext,
}

/// A context running `session`'s regions (and parallel loops on `threads`, or NULL); NULL on
/// error. It must not outlive the session or the thread pool.
///
/// # Safety
/// `threads` is NULL or a live pool from heron_threads_new.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_context_new(
    session: *mut Session,
    threads: *const heron_threads::ThreadPool,
) -> *mut VtaContext {
    if live(session).is_none() {
        return std::ptr::null_mut();
    }
    // SAFETY: `threads` is NULL or a live pool (the contract).
    let pool = unsafe { threads.as_ref() };
    let mut ctx = Box::new(VtaContext {
        routines: std::array::from_fn(|k| match k {
            0 => heron_threads::RoutineEntry::new(ROUTINE, heron_vta_region as *const u8),
            k => heron_threads::kernel_routines()[k - 1],
        }),
        devices: [session as heron_threads::DeviceHandle],
        context: heron_threads::RunContext::new(None, &[], &[]),
    });
    // The tables live in the same box, which never moves.
    ctx.context = heron_threads::RunContext::new(pool, &ctx.routines, &ctx.devices);
    Box::into_raw(ctx)
}

/// The run context to pass to `heron_<name>_run_ctx`; NULL for NULL.
///
/// # Safety
/// `ctx` is NULL or a live context from heron_vta_context_new.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_context(ctx: *const VtaContext) -> *const heron_threads::RunContext {
    // SAFETY: as the contract says.
    unsafe { ctx.as_ref() }.map_or(std::ptr::null(), |c| &c.context as *const _)
}

/// Frees a context; NULL is a no-op.
///
/// # Safety
/// `ctx` is NULL or a context from heron_vta_context_new, used by no run.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_context_free(ctx: *mut VtaContext) {
    if !ctx.is_null() {
        // SAFETY: from Box::into_raw in heron_vta_context_new (the contract).
        drop(unsafe { Box::from_raw(ctx) });
    }
}

/// The session's seven profiling counters since the last call, as VTA's simulator prints them
/// (`{"inp_load_nbytes": .., ..., "alu_counter": ..}`), then cleared; NULL for drivers without
/// counters. Valid until the next call on this thread.
///
/// # Safety
/// `session` is NULL or a pointer from heron_vta_session_new.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_session_counters(session: *mut Session) -> *const std::ffi::c_char {
    let Some(s) = live(session) else { return std::ptr::null() };
    let Some(p) = s.profile() else { return std::ptr::null() };
    s.clear_profile();
    set_error(p.to_json());
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
