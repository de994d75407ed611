//! VTA's driver and runtime C APIs with their exact names and signatures (VTA-FACTS §5, §6),
//! plus `heron_vta_*` extras (last error, profiler, driver loading, work limit); declared in
//! `include/heron_vta.h`. One process-wide state behind a mutex holds the driver (the simulator,
//! or the library `HERON_VTA_DRIVER` names), the command queue and the handle tables.
//!
//! Where VTA's runtime aborts on misuse, these functions never do (a panic is caught and
//! reported like an error): functions returning a value return a failure code (NULL, 0 or
//! non-zero status); void functions record the first error on the command queue, which then
//! refuses further work (`VTASynchronize` runs nothing) until `VTARuntimeShutdown`.
//! `heron_vta_last_error` returns the message or NULL.
//!
//! Buffers, devices, the command queue and uop kernel tables are named by opaque handles
//! ([`crate::handles`]) checked on every use, so NULL, freed, forged and garbage handles are
//! errors rather than dereferences. Device memory a caller may write through (`VTAMemAlloc`'s
//! address, `VTABufferCPUPtr`) stays in place until freed, and every copy checks its device side
//! against the live allocation before touching memory.
#![allow(unsafe_code)]
// The exported functions take raw pointers by contract (the C API); each documents its safety
// requirements in the header, and Rust callers use the safe modules instead.
#![allow(clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::driver::{DEFAULT_WORK_LIMIT, DeviceId, Driver, DynamicDriver, SimDriver};
use crate::handles::{Kind, Table, is_handle};
use crate::runtime::{CommandQueue, KernelMode, KernelRecorder, UopKernel};
use crate::{HwConfig, Isa, VtaError};

/// A runtime buffer (`VTABufferAlloc`): what its handle names.
#[derive(Debug)]
struct DataBuffer {
    virt: usize,
    size: usize,
}

/// The kernels recorded under one `VTAPushGEMMOp` / `VTAPushALUOp` handle, by signature key.
type KernelTable = HashMap<usize, Arc<UopKernel>>;

const MAX_SIGNATURE_KEYS: usize = 100;
/// Recorded kernels live as long as the process, as in VTA's runtime: at most this many uop
/// handles, holding at most this many uops together (about 200 MB).
const MAX_KERNEL_HANDLES: u64 = 1 << 20;
const MAX_RECORDED_UOPS: usize = 1 << 24;

struct State {
    isa: Isa,
    driver: Box<dyn Driver>,
    /// Applied to every driver: `heron_vta_set_work_limit` / `HERON_VTA_WORK_LIMIT`.
    work_limit: Option<u64>,
    /// The command queue, at most one live (VTA's "thread-local" queue is process-wide).
    queues: Table<CommandQueue>,
    buffers: Table<DataBuffer>,
    devices: Table<DeviceId>,
    /// Never freed: call sites keep their uop handles across shutdowns, as in VTA's runtime.
    kernels: Table<KernelTable>,
    /// Uops of all recorded kernels.
    recorded_uops: usize,
    /// The kernel being recorded by a `finit` callback.
    recording: Option<KernelRecorder>,
    /// The first error of the command queue; further work is refused until shutdown.
    queue_error: Option<String>,
    last_error: Option<CString>,
    profile_json: CString,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// `HERON_VTA_WORK_LIMIT` (cycles, 0 for none), else the default.
fn work_limit_from_env() -> Option<u64> {
    let Ok(v) = std::env::var("HERON_VTA_WORK_LIMIT") else { return Some(DEFAULT_WORK_LIMIT) };
    match v.trim().parse::<u64>() {
        Ok(n) => (n != 0).then_some(n),
        Err(_) => {
            eprintln!("heron-vta: HERON_VTA_WORK_LIMIT={v:?} is not a number of cycles; using the default");
            Some(DEFAULT_WORK_LIMIT)
        }
    }
}

impl State {
    fn new() -> Result<State, VtaError> {
        let isa = Isa::new(HwConfig::default())?;
        let mut driver: Box<dyn Driver> = match std::env::var("HERON_VTA_DRIVER") {
            Ok(path) if !path.is_empty() => match DynamicDriver::load(&path) {
                Ok(d) => Box::new(d),
                Err(e) => {
                    eprintln!("heron-vta: {e}; falling back to the simulator");
                    Box::new(SimDriver::new(isa.clone()))
                }
            },
            _ => Box::new(SimDriver::new(isa.clone())),
        };
        let work_limit = work_limit_from_env();
        driver.set_work_limit(work_limit);
        Ok(State {
            isa,
            driver,
            work_limit,
            queues: Table::new(Kind::Command),
            buffers: Table::new(Kind::Buffer),
            devices: Table::new(Kind::Device),
            kernels: Table::new(Kind::Kernels),
            recorded_uops: 0,
            recording: None,
            queue_error: None,
            last_error: None,
            profile_json: CString::default(),
        })
    }

    /// The live command queue's handle, creating the queue if there is none.
    fn current_queue(&mut self) -> Result<usize, VtaError> {
        if let Some(h) = self.queues.any_live() {
            return Ok(h);
        }
        let queue = CommandQueue::new(self.isa.clone(), self.driver.as_mut())?;
        Ok(self.queues.insert(queue))
    }

    /// The command queue `handle` names, and the driver.
    fn queue(&mut self, handle: usize) -> Result<(&mut CommandQueue, &mut dyn Driver), VtaError> {
        Ok((self.queues.get_mut(handle)?, self.driver.as_mut()))
    }

    /// Host address and physical address of `len` bytes at `offset` in a buffer handle or a raw
    /// DRAM pointer, checked against the buffer and the allocation holding it.
    fn device_range(&self, ptr: *const c_void, offset: usize, len: usize) -> Result<(usize, u64), VtaError> {
        let ptr = ptr as usize;
        let overrun = |size| VtaError::Runtime(format!("{len} bytes at offset {offset} overrun a {size}-byte buffer"));
        let virt = if is_handle(ptr) {
            let b = self.buffers.get(ptr)?;
            offset.checked_add(len).filter(|&end| end <= b.size).ok_or_else(|| overrun(b.size))?;
            b.virt + offset
        } else {
            ptr.checked_add(offset).ok_or(VtaError::UnknownBuffer(ptr))?
        };
        Ok((virt, self.driver.phys_range(virt, len)?))
    }

    /// One side of a copy: `len` bytes at `ptr + offset`. Device memory when `device` says so,
    /// when `ptr` is a handle or when the address lies in a live allocation (checked against
    /// it); otherwise host memory the caller vouches for.
    fn side(&self, ptr: *const c_void, offset: usize, len: usize, device: bool) -> Result<Side, VtaError> {
        let addr = (ptr as usize).checked_add(offset);
        if device || is_handle(ptr as usize) || addr.is_some_and(|a| self.driver.phys_addr(a).is_some()) {
            return Ok(Side::Device(self.device_range(ptr, offset, len)?.0));
        }
        match addr {
            _ if len == 0 => Ok(Side::Host(0)),
            Some(addr) if !ptr.is_null() && isize::try_from(len).is_ok() => Ok(Side::Host(addr)),
            _ => Err(VtaError::Runtime(format!("{len} bytes at host address {ptr:p} + {offset}"))),
        }
    }

    /// Copies `len` bytes between two sides (device sides through the driver's checked copies).
    ///
    /// # Safety
    /// Host sides must be valid for `len` bytes.
    unsafe fn copy(&mut self, src: Side, dst: Side, len: usize) -> Result<(), VtaError> {
        if len == 0 {
            return Ok(());
        }
        match (src, dst) {
            (Side::Device(src), Side::Device(dst)) => {
                let mut bytes = Vec::new();
                bytes.try_reserve_exact(len).map_err(|_| VtaError::HostMemory(len))?;
                bytes.resize(len, 0);
                self.driver.copy_to_host(&mut bytes, src)?;
                self.driver.copy_from_host(dst, &bytes)
            }
            (Side::Host(src), Side::Device(dst)) => {
                // SAFETY: the caller guarantees the host source is readable for `len` bytes.
                let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
                self.driver.copy_from_host(dst, bytes)
            }
            (Side::Device(src), Side::Host(dst)) => {
                // SAFETY: the caller guarantees the host destination is writable for `len` bytes.
                let bytes = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
                self.driver.copy_to_host(bytes, src)
            }
            (Side::Host(src), Side::Host(dst)) => {
                // SAFETY: both are host memory the caller vouches for; `copy` tolerates overlap.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
                Ok(())
            }
        }
    }
}

/// Where one side of a copy is: a host address in device memory, or host memory.
#[derive(Clone, Copy)]
enum Side {
    Device(usize),
    Host(usize),
}

/// Runs `f` on the state (created on first use); an error, or a panic, is remembered for
/// `heron_vta_last_error` and returned. A panic also stops the command queue, which it may have
/// left half updated.
fn try_api<T>(f: impl FnOnce(&mut State) -> Result<T, VtaError>) -> Result<T, VtaError> {
    let mut guard: MutexGuard<'_, Option<State>> = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let s = match &mut *guard {
            Some(s) => s,
            none => none.insert(State::new()?),
        };
        f(s)
    }));
    let (error, stop_queue) = match outcome {
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => (e, false),
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().copied().or(panic.downcast_ref::<String>().map(String::as_str));
            (VtaError::Runtime(format!("internal error: {}", what.unwrap_or("panic"))), true)
        }
    };
    if let Some(s) = guard.as_mut() {
        s.last_error = CString::new(error.to_string().replace('\0', " ")).ok();
        if stop_queue {
            s.queue_error.get_or_insert(error.to_string());
        }
    }
    Err(error)
}

/// [`try_api`] for functions that report failure as `on_error`.
fn api<T>(on_error: T, f: impl FnOnce(&mut State) -> Result<T, VtaError>) -> T {
    try_api(f).unwrap_or(on_error)
}

/// Which command queue an operation works on.
#[derive(Clone, Copy)]
enum Queue {
    /// The one a `VTACommandHandle` argument names.
    Handle(*mut c_void),
    /// The live one, created if needed (for the uop kernel calls, which take no handle).
    Current,
}

/// Runs a command-queue operation `f(state, queue handle)`: refused after an earlier failure;
/// its own failure is recorded as the queue's error.
fn with_queue<T>(on_error: T, which: Queue, f: impl FnOnce(&mut State, usize) -> Result<T, VtaError>) -> T {
    api(on_error, |s| {
        let result = (|| {
            if let Some(e) = &s.queue_error {
                return Err(VtaError::Runtime(format!("command queue stopped after an earlier error: {e}")));
            }
            let handle = match which {
                Queue::Handle(h) => s.queues.get(h as usize).map(|_| h as usize)?,
                Queue::Current => s.current_queue()?,
            };
            f(s, handle)
        })();
        if let Err(e) = &result {
            s.queue_error.get_or_insert_with(|| e.to_string());
        }
        result
    })
}

/// Ok(()) as status 0 (errors become the caller's failure status).
fn as_status(result: Result<(), VtaError>) -> Result<c_int, VtaError> {
    result.map(|()| 0)
}

// ---------------------------------------------------------------------------------------------
// Driver API (driver.h)

#[unsafe(no_mangle)]
pub extern "C" fn VTADeviceAlloc() -> *mut c_void {
    api(std::ptr::null_mut(), |s| {
        let device = s.driver.device_alloc()?;
        Ok(s.devices.insert(device) as *mut c_void)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADeviceFree(handle: *mut c_void) {
    api((), |s| {
        let device = s.devices.remove(handle as usize)?;
        s.driver.device_free(device)
    })
}

/// 0 on success, 1 on timeout (as VTA's drivers), 2 on any other failure.
#[unsafe(no_mangle)]
pub extern "C" fn VTADeviceRun(handle: *mut c_void, insn_phy_addr: u32, insn_count: u32, wait_cycles: u32) -> c_int {
    let run = try_api(|s| {
        let device = *s.devices.get(handle as usize)?;
        s.driver.device_run(device, insn_phy_addr as u64, insn_count, wait_cycles)
    });
    match run {
        Ok(()) => 0,
        Err(e) if e.is_timeout() => 1,
        Err(_) => 2,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAMemAlloc(size: usize, cached: c_int) -> *mut c_void {
    api(std::ptr::null_mut(), |s| Ok(s.driver.mem_alloc(size, cached != 0)?.virt as *mut c_void))
}

/// Blocks the runtime owns (buffers, the command queue's) are refused: freeing one would leave
/// its owner to free, later, whatever block the host puts at that address next.
#[unsafe(no_mangle)]
pub extern "C" fn VTAMemFree(buf: *mut c_void) {
    api((), |s| {
        let virt = buf as usize;
        if s.buffers.values().any(|b| b.virt == virt) {
            return Err(VtaError::Runtime(format!("{buf:p} belongs to a VTABufferAlloc buffer; use VTABufferFree")));
        }
        if s.queues.values().any(|q| q.dram().iter().any(|b| b.virt == virt)) {
            return Err(VtaError::Runtime(format!("{buf:p} belongs to the command queue")));
        }
        s.driver.mem_free(virt)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAMemGetPhyAddr(buf: *mut c_void) -> u32 {
    api(0, |s| {
        let phys = s.driver.phys_range(buf as usize, 0)?;
        u32::try_from(phys).map_err(|_| VtaError::Driver(format!("physical address {phys:#x} above 32 bits")))
    })
}

/// The driver API knows nothing of the runtime's handles.
fn no_handles(pointers: [*const c_void; 2]) -> Result<(), VtaError> {
    match pointers.into_iter().find(|&p| is_handle(p as usize)) {
        Some(p) => Err(VtaError::UnknownBuffer(p as usize)),
        None => Ok(()),
    }
}

/// # Safety
/// `src` must be readable for `size` bytes; `dst` is checked to lie in device memory first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTAMemCopyFromHost(dst: *mut c_void, src: *const c_void, size: usize) {
    api((), |s| {
        no_handles([dst, src])?;
        let (dst, src) = (s.side(dst, 0, size, true)?, s.side(src, 0, size, false)?);
        // SAFETY: the caller guarantees the host side.
        unsafe { s.copy(src, dst, size) }
    })
}

/// # Safety
/// `dst` must be writable for `size` bytes; `src` is checked to lie in device memory first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTAMemCopyToHost(dst: *mut c_void, src: *const c_void, size: usize) {
    api((), |s| {
        no_handles([dst, src])?;
        let (src, dst) = (s.side(src, 0, size, true)?, s.side(dst, 0, size, false)?);
        // SAFETY: the caller guarantees the host side.
        unsafe { s.copy(src, dst, size) }
    })
}

/// The checked arguments of a cache operation: a range inside one allocation, at `phy_addr`.
fn cache_range(s: &State, vir_addr: *mut c_void, phy_addr: u32, size: c_int) -> Result<(usize, u64, usize), VtaError> {
    let size = usize::try_from(size).map_err(|_| VtaError::Runtime(format!("cache operation of {size} bytes")))?;
    let phys = s.driver.phys_range(vir_addr as usize, size)?;
    if phys != phy_addr as u64 {
        return Err(VtaError::Runtime(format!("{vir_addr:p} is at physical {phys:#x}, not {phy_addr:#x}")));
    }
    Ok((vir_addr as usize, phys, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAFlushCache(vir_addr: *mut c_void, phy_addr: u32, size: c_int) {
    api((), |s| {
        let (virt, phys, size) = cache_range(s, vir_addr, phy_addr, size)?;
        s.driver.flush_cache(virt, phys, size);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAInvalidateCache(vir_addr: *mut c_void, phy_addr: u32, size: c_int) {
    api((), |s| {
        let (virt, phys, size) = cache_range(s, vir_addr, phy_addr, size)?;
        s.driver.invalidate_cache(virt, phys, size);
        Ok(())
    })
}

/// Programs an FPGA bitstream: nothing to do for the simulator.
#[unsafe(no_mangle)]
pub extern "C" fn VTAProgram(_bitstream: *const c_char) {}

// ---------------------------------------------------------------------------------------------
// Runtime API (runtime.h)

#[unsafe(no_mangle)]
pub extern "C" fn VTABufferAlloc(size: usize) -> *mut c_void {
    api(std::ptr::null_mut(), |s| {
        let block = s.driver.mem_alloc(size, true)?;
        Ok(s.buffers.insert(DataBuffer { virt: block.virt, size }) as *mut c_void)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTABufferFree(buffer: *mut c_void) {
    api((), |s| {
        let b = s.buffers.remove(buffer as usize)?;
        s.driver.mem_free(b.virt)
    })
}

/// Bit 1 of `kind_mask`: `from` is device memory; bit 0: `to` is. A buffer handle, or an
/// address inside device memory, is device memory whatever the mask says.
///
/// # Safety
/// Host-side pointers must be valid for `size` bytes at their offset.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTABufferCopy(
    from: *const c_void,
    from_offset: usize,
    to: *mut c_void,
    to_offset: usize,
    size: usize,
    kind_mask: c_int,
) {
    api((), |s| {
        // Both sides are checked before any memory is touched: device sides bound `size`.
        let src = s.side(from, from_offset, size, kind_mask & 2 != 0)?;
        let dst = s.side(to, to_offset, size, kind_mask & 1 != 0)?;
        // SAFETY: the caller guarantees the host sides.
        unsafe { s.copy(src, dst, size) }
    })
}

/// A buffer handle's host address; any other non-NULL pointer is returned unchanged.
#[unsafe(no_mangle)]
pub extern "C" fn VTABufferCPUPtr(cmd: *mut c_void, buffer: *mut c_void) -> *mut c_void {
    api(std::ptr::null_mut(), |s| {
        s.queues.get(cmd as usize)?;
        if is_handle(buffer as usize) {
            return Ok(s.buffers.get(buffer as usize)?.virt as *mut c_void);
        }
        if buffer.is_null() {
            return Err(VtaError::Runtime("VTABufferCPUPtr of NULL".into()));
        }
        Ok(buffer)
    })
}

/// The command queue's handle (one process-wide queue, created on first use; a new handle
/// after `VTARuntimeShutdown`).
#[unsafe(no_mangle)]
pub extern "C" fn VTATLSCommandHandle() -> *mut c_void {
    api(std::ptr::null_mut(), |s| Ok(s.current_queue()? as *mut c_void))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTARuntimeShutdown() {
    api((), |s| {
        s.queue_error = None;
        s.last_error = None;
        s.recording = None;
        match s.queues.any_live() {
            Some(h) => s.queues.remove(h)?.shutdown(s.driver.as_mut()),
            None => Ok(()),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTASetDebugMode(cmd: *mut c_void, debug_flag: c_int) {
    with_queue((), Queue::Handle(cmd), |s, q| {
        s.queue(q)?.0.set_debug(debug_flag as u32);
        Ok(())
    })
}

/// Coherent memory: the barriers check their arguments (the element range lies in the buffer).
fn barrier(cmd: *mut c_void, buffer: *mut c_void, elem_bits: u32, start: u32, extent: u32) {
    with_queue((), Queue::Handle(cmd), |s, _| {
        // Products of two u32 values fit a u64.
        let first = start as u64 * elem_bits as u64 / 8;
        let bytes = (extent as u64 * elem_bits as u64).div_ceil(8);
        let range = |v: u64| usize::try_from(v).map_err(|_| VtaError::Runtime(format!("barrier of {v} bytes")));
        s.device_range(buffer, range(first)?, range(bytes)?).map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAWriteBarrier(cmd: *mut c_void, buffer: *mut c_void, elem_bits: u32, start: u32, extent: u32) {
    barrier(cmd, buffer, elem_bits, start, extent)
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAReadBarrier(cmd: *mut c_void, buffer: *mut c_void, elem_bits: u32, start: u32, extent: u32) {
    barrier(cmd, buffer, elem_bits, start, extent)
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn VTALoadBuffer2D(
    cmd: *mut c_void,
    src_dram_addr: *mut c_void,
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
) {
    with_queue((), Queue::Handle(cmd), |s, q| {
        let (_, phys) = s.device_range(src_dram_addr, 0, 0)?;
        let (q, d) = s.queue(q)?;
        q.load_buffer_2d(
            d,
            phys,
            src_elem_offset,
            x_size,
            y_size,
            x_stride,
            x_pad_before,
            y_pad_before,
            x_pad_after,
            y_pad_after,
            dst_sram_index,
            dst_memory_type,
        )
    })
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn VTAStoreBuffer2D(
    cmd: *mut c_void,
    src_sram_index: u32,
    src_memory_type: u32,
    dst_dram_addr: *mut c_void,
    dst_elem_offset: u32,
    x_size: u32,
    y_size: u32,
    x_stride: u32,
) {
    with_queue((), Queue::Handle(cmd), |s, q| {
        let (_, phys) = s.device_range(dst_dram_addr, 0, 0)?;
        let (q, d) = s.queue(q)?;
        q.store_buffer_2d(d, src_sram_index, src_memory_type, phys, dst_elem_offset, x_size, y_size, x_stride)
    })
}

/// Applies `f` to the kernel being recorded; outside a `finit` callback that is an error.
fn with_recorder(what: &str, f: impl FnOnce(&mut KernelRecorder)) {
    api((), |s| match s.recording.as_mut() {
        _ if s.queue_error.is_some() => Err(VtaError::Runtime(format!("{what} refused after an earlier error"))),
        Some(r) => {
            f(r);
            Ok(())
        }
        None => {
            let e = format!("{what} outside a VTAPushGEMMOp/VTAPushALUOp kernel callback");
            s.queue_error.get_or_insert(e.clone());
            Err(VtaError::Runtime(e))
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAUopLoopBegin(extent: u32, dst_factor: u32, src_factor: u32, wgt_factor: u32) {
    with_recorder("VTAUopLoopBegin", |r| r.loop_begin(extent, dst_factor, src_factor, wgt_factor));
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAUopLoopEnd() {
    with_recorder("VTAUopLoopEnd", KernelRecorder::loop_end);
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn VTAUopPush(
    mode: u32,
    reset_out: u32,
    dst_index: u32,
    src_index: u32,
    wgt_index: u32,
    opcode: u32,
    use_imm: u32,
    imm_val: i32,
) {
    with_recorder("VTAUopPush", |r| {
        r.push(mode, reset_out != 0, dst_index, src_index, wgt_index, opcode, use_imm != 0, imm_val)
    });
}

type Finit = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;

/// The kernel of `uop_handle` for `signature`, recorded now through `finit` if it is new.
///
/// # Safety
/// `uop_handle` must point to a readable and writable slot (its content is checked: NULL or a
/// uop kernel handle); `signature` must be readable for `nbytes` bytes.
unsafe fn kernel_for(
    uop_handle: *mut *mut c_void,
    finit: Finit,
    signature: *mut c_void,
    nbytes: c_int,
) -> Result<Arc<UopKernel>, VtaError> {
    if uop_handle.is_null() {
        return Err(VtaError::Runtime("NULL uop handle".into()));
    }
    let key = match nbytes {
        0 => 0,
        4 if signature.is_null() => return Err(VtaError::Runtime("NULL kernel signature of 4 bytes".into())),
        4 => {
            // SAFETY: the caller guarantees 4 readable bytes.
            let v = unsafe { signature.cast::<i32>().read_unaligned() };
            usize::try_from(v).ok().map(|v| v + 1).filter(|&k| k < MAX_SIGNATURE_KEYS).ok_or_else(|| {
                VtaError::Runtime(format!("kernel signature {v} outside 0..{}", MAX_SIGNATURE_KEYS - 1))
            })?
        }
        n => return Err(VtaError::Runtime(format!("kernel signature of {n} bytes (0 or 4 supported)"))),
    };
    // SAFETY: the caller guarantees the slot is readable.
    let slot = unsafe { uop_handle.read() } as usize;
    // The kernel if recorded; else the table to record it in and the callback, recording started.
    let found = try_api(|s| {
        if let Some(e) = &s.queue_error {
            return Err(VtaError::Runtime(format!("command queue stopped after an earlier error: {e}")));
        }
        if slot != 0
            && let Some(k) = s.kernels.get(slot)?.get(&key)
        {
            return Ok(Ok(k.clone()));
        }
        if s.recording.is_some() {
            return Err(VtaError::Runtime("a kernel callback pushed another kernel".into()));
        }
        let finit = finit.ok_or_else(|| VtaError::Runtime("NULL kernel callback".into()))?;
        if slot == 0 && s.kernels.issued() == MAX_KERNEL_HANDLES {
            return Err(VtaError::Runtime(format!("{MAX_KERNEL_HANDLES} uop handles exist already")));
        }
        s.recording = Some(KernelRecorder::default());
        Ok(Err((if slot == 0 { s.kernels.insert(KernelTable::new()) } else { slot }, finit)))
    })?;
    let (table, finit) = match found {
        Ok(kernel) => return Ok(kernel),
        Err(record) => record,
    };
    if slot == 0 {
        // SAFETY: the caller guarantees the slot is writable.
        unsafe { uop_handle.write(table as *mut c_void) };
    }
    // The lock is released: the callback calls back into VTAUopPush & co.
    // SAFETY: a C function pointer with the documented signature, given its own signature.
    let status = unsafe { finit(signature) };
    try_api(|s| {
        let recorder = s
            .recording
            .take()
            .ok_or_else(|| VtaError::Runtime("the runtime was shut down while a kernel was being recorded".into()))?;
        if status != 0 {
            return Err(VtaError::Runtime(format!("kernel callback returned {status}")));
        }
        let kernel = recorder.finish()?;
        let total = s.recorded_uops + kernel.uops.len();
        if total > MAX_RECORDED_UOPS {
            return Err(VtaError::Runtime(format!("recorded kernels would hold over {MAX_RECORDED_UOPS} uops")));
        }
        s.kernels.get_mut(table)?.insert(key, kernel.clone());
        s.recorded_uops = total;
        Ok(kernel)
    })
}

fn push_op(
    uop_handle: *mut *mut c_void,
    finit: Finit,
    signature: *mut c_void,
    nbytes: c_int,
    mode: KernelMode,
) -> c_int {
    // SAFETY: forwarded from the C caller, which owns the contract of `kernel_for`.
    let kernel = catch_unwind(AssertUnwindSafe(|| unsafe { kernel_for(uop_handle, finit, signature, nbytes) }))
        .unwrap_or_else(|_| Err(VtaError::Runtime("internal error recording a kernel".into())));
    with_queue(1, Queue::Current, |s, q| {
        let kernel = kernel?;
        if !kernel.uops.is_empty() && kernel.mode != mode {
            return Err(VtaError::Runtime("a GEMM kernel pushed as ALU or the reverse".into()));
        }
        as_status(s.queue(q)?.0.push_kernel(&kernel))
    })
}

/// # Safety
/// As `kernel_for`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTAPushGEMMOp(
    uop_handle: *mut *mut c_void,
    finit: Finit,
    signature: *mut c_void,
    nbytes: c_int,
) -> c_int {
    push_op(uop_handle, finit, signature, nbytes, KernelMode::Gemm)
}

/// # Safety
/// As `kernel_for`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTAPushALUOp(
    uop_handle: *mut *mut c_void,
    finit: Finit,
    signature: *mut c_void,
    nbytes: c_int,
) -> c_int {
    push_op(uop_handle, finit, signature, nbytes, KernelMode::Alu)
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADepPush(cmd: *mut c_void, from_qid: c_int, to_qid: c_int) -> c_int {
    with_queue(1, Queue::Handle(cmd), |s, q| as_status(s.queue(q)?.0.dep_push(from_qid, to_qid)))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADepPop(cmd: *mut c_void, from_qid: c_int, to_qid: c_int) -> c_int {
    with_queue(1, Queue::Handle(cmd), |s, q| as_status(s.queue(q)?.0.dep_pop(from_qid, to_qid)))
}

/// Runs the queued stream within `wait_cycles` cycles (0: no limit from the caller) and the
/// work limit; a timeout is an error like any other.
#[unsafe(no_mangle)]
pub extern "C" fn VTASynchronize(cmd: *mut c_void, wait_cycles: u32) {
    with_queue((), Queue::Handle(cmd), |s, q| {
        let (q, d) = s.queue(q)?;
        q.synchronize(d, wait_cycles)
    })
}

// ---------------------------------------------------------------------------------------------
// Heron extras

/// The last error message, or NULL; valid until the next call into this library.
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_last_error() -> *const c_char {
    api(std::ptr::null(), |s| Ok(s.last_error.as_ref().map_or(std::ptr::null(), |e| e.as_ptr())))
}

/// Forgets the last error, so a caller can tell whether the next (void) call failed.
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_clear_error() {
    api((), |s| {
        s.last_error = None;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_profiler_clear() {
    api((), |s| {
        s.driver.clear_profile();
        Ok(())
    })
}

/// The simulator's counters as JSON (keys in VTA-FACTS §5.1 order); valid until the next call.
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_profiler_status() -> *const c_char {
    api(std::ptr::null(), |s| {
        let json = s.driver.profile().map_or_else(|| "{}".to_string(), |p| p.to_json());
        s.profile_json = CString::new(json).unwrap_or_default();
        Ok(s.profile_json.as_ptr())
    })
}

/// Simulator debug flags (bit 0: skip execution; counters still advance, UOP loads execute).
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_profiler_debug_mode(flags: c_int) {
    api((), |s| {
        s.driver.set_sim_debug(flags as u32);
        Ok(())
    })
}

/// Caps every run at `cycles` cycles whatever `wait_cycles` asks; 0 removes the cap.
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_set_work_limit(cycles: u64) {
    api((), |s| {
        s.work_limit = (cycles != 0).then_some(cycles);
        s.driver.set_work_limit(s.work_limit);
        Ok(())
    })
}

/// Replaces the driver with the library at `path` (NULL: the built-in simulator). Resets the
/// runtime; buffers, devices and the command queue of the old driver become invalid (their
/// handles read as freed). Returns 0 on success.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_vta_load_driver(path: *const c_char) -> c_int {
    let path = if path.is_null() {
        None
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned())
    };
    api(1, |s| {
        let mut driver: Box<dyn Driver> = match &path {
            Some(p) => Box::new(DynamicDriver::load(p)?),
            None => Box::new(SimDriver::new(s.isa.clone())),
        };
        driver.set_work_limit(s.work_limit);
        s.queues.clear();
        s.buffers.clear();
        s.devices.clear();
        s.queue_error = None;
        s.recording = None;
        s.driver = driver;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long fuzz run found this: a stale VTAMemAlloc pointer the host had reused for the
    /// command queue's uop buffer freed that buffer, and the queue's shutdown then freed the
    /// caller's next block, which had taken the same address.
    #[test]
    fn the_command_queue_s_buffers_cannot_be_freed_from_outside() {
        let cmd = VTATLSCommandHandle();
        let dram = try_api(|s| Ok(s.queues.get(cmd as usize)?.dram())).unwrap();
        for block in dram {
            VTAMemFree(block.virt as *mut c_void);
            let error = try_api(|s| Ok(s.last_error.clone())).unwrap().unwrap();
            assert!(error.to_string_lossy().contains("belongs to the command queue"), "{error:?}");
        }
        assert_eq!(VTADepPush(cmd, 1, 2), 0, "the queue still works");
        VTASynchronize(cmd, 0);
        VTARuntimeShutdown();
        assert!(heron_vta_last_error().is_null(), "the shutdown freed the queue's own buffers");
    }
}
