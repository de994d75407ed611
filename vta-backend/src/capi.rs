//! VTA's driver and runtime C APIs with their exact names and signatures (VTA-FACTS §5, §6),
//! plus `heron_vta_*` extras (last error, profiler, driver loading); declared in
//! `include/heron_vta.h`. One process-wide state behind a mutex holds the driver (the simulator,
//! or the library `HERON_VTA_DRIVER` names), the command queue and the buffer handles.
//!
//! Where VTA's runtime aborts on misuse, these functions never do: functions returning a value
//! return a failure code (NULL, 0 or non-zero status); void functions record the first error on
//! the command queue, which then refuses further work (`VTASynchronize` runs nothing) until
//! `VTARuntimeShutdown`. `heron_vta_last_error` returns the message or NULL.
#![allow(unsafe_code)]
// The exported functions take raw pointers by contract (the C API); each documents its safety
// requirements in the header, and Rust callers use the safe modules instead.
#![allow(clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::driver::{DeviceId, Driver, DynamicDriver, SimDriver};
use crate::runtime::{CommandQueue, KernelRecorder, UopKernel};
use crate::{HwConfig, Isa, VtaError};

/// A runtime buffer (`VTABufferAlloc`): what the opaque handle points to.
#[derive(Debug)]
struct DataBuffer {
    virt: usize,
    phys: u64,
    size: usize,
}

/// The kernels recorded under one `VTAPushGEMMOp` / `VTAPushALUOp` handle, by signature key.
struct KernelTable {
    kernels: Vec<Option<Arc<UopKernel>>>,
}

const MAX_SIGNATURE_KEYS: usize = 100;

struct State {
    isa: Isa,
    driver: Box<dyn Driver>,
    queue: Option<CommandQueue>,
    /// Live `VTABufferAlloc` handles (handle address -> buffer).
    buffers: HashMap<usize, Box<DataBuffer>>,
    /// The kernel being recorded by a `finit` callback.
    recording: Option<KernelRecorder>,
    /// The first error of the command queue; further work is refused until shutdown.
    queue_error: Option<String>,
    last_error: Option<CString>,
    profile_json: CString,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn default_driver(isa: &Isa) -> Result<Box<dyn Driver>, VtaError> {
    match std::env::var("HERON_VTA_DRIVER") {
        Ok(path) if !path.is_empty() => Ok(Box::new(DynamicDriver::load(&path)?)),
        _ => Ok(Box::new(SimDriver::new(isa.clone()))),
    }
}

/// The process-wide state, created on first use.
fn state() -> MutexGuard<'static, Option<State>> {
    let mut guard = STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if guard.is_none() {
        let isa = Isa::new(HwConfig::default()).expect("the default configuration is valid");
        let driver = match default_driver(&isa) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("heron-vta: {e}; falling back to the simulator");
                Box::new(SimDriver::new(isa.clone()))
            }
        };
        *guard = Some(State {
            isa,
            driver,
            queue: None,
            buffers: HashMap::new(),
            recording: None,
            queue_error: None,
            last_error: None,
            profile_json: CString::default(),
        });
    }
    guard
}

/// Runs `f` on the state; an error is remembered for `heron_vta_last_error` and turned into
/// `on_error`.
fn with_state<T>(on_error: T, f: impl FnOnce(&mut State) -> Result<T, VtaError>) -> T {
    let mut guard = state();
    let s = guard.as_mut().expect("initialised by state()");
    match f(s) {
        Ok(v) => v,
        Err(e) => {
            s.last_error = CString::new(e.to_string().replace('\0', " ")).ok();
            on_error
        }
    }
}

/// Runs a command-queue operation: refused after an earlier failure, which it records first.
fn with_queue(
    f: impl FnOnce(&mut CommandQueue, &mut dyn Driver, &HashMap<usize, Box<DataBuffer>>) -> Result<(), VtaError>,
) {
    with_state((), |s| {
        if let Some(e) = &s.queue_error {
            return Err(VtaError::Runtime(format!("command queue stopped after an earlier error: {e}")));
        }
        if s.queue.is_none() {
            s.queue = Some(CommandQueue::new(s.isa.clone(), s.driver.as_mut())?);
        }
        let queue = s.queue.as_mut().expect("created above");
        let result = f(queue, s.driver.as_mut(), &s.buffers);
        if let Err(e) = &result {
            s.queue_error = Some(e.to_string());
        }
        result
    })
}

/// Physical address of a runtime buffer handle or of a raw `VTAMemAlloc` pointer.
fn phys_of(
    driver: &dyn Driver,
    buffers: &HashMap<usize, Box<DataBuffer>>,
    ptr: *const c_void,
) -> Result<u64, VtaError> {
    let key = ptr as usize;
    if let Some(b) = buffers.get(&key) {
        return Ok(b.phys);
    }
    driver.phys_addr(key).ok_or(VtaError::UnknownBuffer(key))
}

// ---------------------------------------------------------------------------------------------
// Driver API (driver.h)

/// Device handles are `id + 1`, so a valid handle is never NULL.
fn device_of(handle: *mut c_void) -> Result<DeviceId, VtaError> {
    (handle as usize).checked_sub(1).map(DeviceId).ok_or(VtaError::UnknownDevice)
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADeviceAlloc() -> *mut c_void {
    with_state(std::ptr::null_mut(), |s| Ok((s.driver.device_alloc()?.0 + 1) as *mut c_void))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADeviceFree(handle: *mut c_void) {
    with_state((), |s| s.driver.device_free(device_of(handle)?))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADeviceRun(handle: *mut c_void, insn_phy_addr: u32, insn_count: u32, wait_cycles: u32) -> c_int {
    with_state(1, |s| {
        s.driver.device_run(device_of(handle)?, insn_phy_addr as u64, insn_count, wait_cycles)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAMemAlloc(size: usize, cached: c_int) -> *mut c_void {
    with_state(std::ptr::null_mut(), |s| Ok(s.driver.mem_alloc(size, cached != 0)?.virt as *mut c_void))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAMemFree(buf: *mut c_void) {
    with_state((), |s| s.driver.mem_free(buf as usize))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAMemGetPhyAddr(buf: *mut c_void) -> u32 {
    with_state(0, |s| {
        let phys = s.driver.phys_addr(buf as usize).ok_or(VtaError::UnknownBuffer(buf as usize))?;
        Ok(phys as u32)
    })
}

/// # Safety
/// `src` must be readable for `size` bytes; `dst` must lie in device memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTAMemCopyFromHost(dst: *mut c_void, src: *const c_void, size: usize) {
    if size == 0 || src.is_null() {
        return;
    }
    // SAFETY: the caller guarantees `src` is readable for `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), size) };
    with_state((), |s| s.driver.copy_from_host(dst as usize, bytes))
}

/// # Safety
/// `dst` must be writable for `size` bytes; `src` must lie in device memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTAMemCopyToHost(dst: *mut c_void, src: *const c_void, size: usize) {
    if size == 0 || dst.is_null() {
        return;
    }
    // SAFETY: the caller guarantees `dst` is writable for `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), size) };
    with_state((), |s| s.driver.copy_to_host(bytes, src as usize))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAFlushCache(vir_addr: *mut c_void, phy_addr: u32, size: c_int) {
    with_state((), |s| {
        s.driver.flush_cache(vir_addr as usize, phy_addr as u64, size.max(0) as usize);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAInvalidateCache(vir_addr: *mut c_void, phy_addr: u32, size: c_int) {
    with_state((), |s| {
        s.driver.invalidate_cache(vir_addr as usize, phy_addr as u64, size.max(0) as usize);
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
    with_state(std::ptr::null_mut(), |s| {
        let block = s.driver.mem_alloc(size, true)?;
        let buffer = Box::new(DataBuffer { virt: block.virt, phys: block.phys, size });
        let handle = &*buffer as *const DataBuffer as usize;
        s.buffers.insert(handle, buffer);
        Ok(handle as *mut c_void)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTABufferFree(buffer: *mut c_void) {
    with_state((), |s| {
        let b = s.buffers.remove(&(buffer as usize)).ok_or(VtaError::UnknownBuffer(buffer as usize))?;
        s.driver.mem_free(b.virt)
    })
}

/// # Safety
/// Host-side pointers (those that are not buffer handles) must be valid for `size` bytes at
/// their offset.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn VTABufferCopy(
    from: *const c_void,
    from_offset: usize,
    to: *mut c_void,
    to_offset: usize,
    size: usize,
    _kind_mask: c_int,
) {
    with_state((), |s| {
        // A handle resolves to its memory (checked against its size); anything else is a host
        // pointer the caller vouches for.
        let resolve = |p: usize, offset: usize| match s.buffers.get(&p) {
            Some(b) if offset.checked_add(size).is_some_and(|end| end <= b.size) => Ok(b.virt + offset),
            Some(b) => {
                Err(VtaError::Runtime(format!("copy of {size} bytes at {offset} overruns a {}-byte buffer", b.size)))
            }
            None if p == 0 => Err(VtaError::Runtime("VTABufferCopy with a NULL pointer".into())),
            None => Ok(p + offset),
        };
        let (src, dst) = (resolve(from as usize, from_offset)?, resolve(to as usize, to_offset)?);
        if size > 0 {
            // SAFETY: both ranges were checked above (device buffers) or are the caller's
            // responsibility (host pointers); `copy` tolerates overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size) };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTABufferCPUPtr(_cmd: *mut c_void, buffer: *mut c_void) -> *mut c_void {
    with_state(buffer, |s| Ok(s.buffers.get(&(buffer as usize)).map_or(buffer, |b| b.virt as *mut c_void)))
}

/// The command queue's handle: any non-NULL value (there is one process-wide queue).
#[unsafe(no_mangle)]
pub extern "C" fn VTATLSCommandHandle() -> *mut c_void {
    with_state(std::ptr::null_mut(), |s| {
        if s.queue.is_none() {
            s.queue = Some(CommandQueue::new(s.isa.clone(), s.driver.as_mut())?);
        }
        Ok(std::ptr::addr_of!(STATE) as *mut c_void)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTARuntimeShutdown() {
    with_state((), |s| {
        s.queue_error = None;
        s.last_error = None;
        s.recording = None;
        match s.queue.take() {
            Some(q) => q.shutdown(s.driver.as_mut()),
            None => Ok(()),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn VTASetDebugMode(_cmd: *mut c_void, debug_flag: c_int) {
    with_queue(|q, _, _| {
        q.set_debug(debug_flag as u32);
        Ok(())
    })
}

/// Coherent memory: the barriers only check their arguments.
#[unsafe(no_mangle)]
pub extern "C" fn VTAWriteBarrier(_cmd: *mut c_void, buffer: *mut c_void, _elem_bits: u32, _start: u32, _extent: u32) {
    with_queue(|_, d, b| phys_of(d, b, buffer).map(|_| ()))
}

#[unsafe(no_mangle)]
pub extern "C" fn VTAReadBarrier(_cmd: *mut c_void, buffer: *mut c_void, _elem_bits: u32, _start: u32, _extent: u32) {
    with_queue(|_, d, b| phys_of(d, b, buffer).map(|_| ()))
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn VTALoadBuffer2D(
    _cmd: *mut c_void,
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
    with_queue(|q, d, b| {
        let phys = phys_of(d, b, src_dram_addr)?;
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
    _cmd: *mut c_void,
    src_sram_index: u32,
    src_memory_type: u32,
    dst_dram_addr: *mut c_void,
    dst_elem_offset: u32,
    x_size: u32,
    y_size: u32,
    x_stride: u32,
) {
    with_queue(|q, d, b| {
        let phys = phys_of(d, b, dst_dram_addr)?;
        q.store_buffer_2d(d, src_sram_index, src_memory_type, phys, dst_elem_offset, x_size, y_size, x_stride)
    })
}

/// Applies `f` to the kernel being recorded; outside a `finit` callback that is an error.
fn with_recorder(what: &str, f: impl FnOnce(&mut KernelRecorder)) {
    with_state((), |s| match s.recording.as_mut() {
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

/// The kernel of `handle` for `signature`, recorded now through `finit` if it is new.
///
/// # Safety
/// `uop_handle` must point to a slot that is NULL or holds a table this function made;
/// `signature` must be readable for `nbytes` bytes.
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
        4 if !signature.is_null() => {
            // SAFETY: the caller guarantees 4 readable bytes.
            let v = unsafe { signature.cast::<i32>().read_unaligned() };
            usize::try_from(v).ok().map(|v| v + 1).filter(|&k| k < MAX_SIGNATURE_KEYS).ok_or_else(|| {
                VtaError::Runtime(format!("kernel signature {v} outside 0..{}", MAX_SIGNATURE_KEYS - 1))
            })?
        }
        n => return Err(VtaError::Runtime(format!("kernel signature of {n} bytes (0 or 4 supported)"))),
    };
    // SAFETY: the slot is the caller's static handle.
    let slot = unsafe { &mut *uop_handle };
    if slot.is_null() {
        let table = Box::new(KernelTable { kernels: vec![None; MAX_SIGNATURE_KEYS] });
        *slot = Box::into_raw(table).cast();
    }
    // SAFETY: a non-NULL slot holds a table created above, never freed (like the reference's,
    // kernels live as long as their call site).
    let table = unsafe { &mut *slot.cast::<KernelTable>() };
    if let Some(k) = &table.kernels[key] {
        return Ok(k.clone());
    }
    let finit = finit.ok_or_else(|| VtaError::Runtime("NULL kernel callback".into()))?;
    with_state(Err(()), |s| {
        if s.recording.is_some() {
            return Err(VtaError::Runtime("a kernel callback pushed another kernel".into()));
        }
        s.recording = Some(KernelRecorder::default());
        Ok(Ok(()))
    })
    .map_err(|()| VtaError::Runtime("cannot start recording a kernel".into()))?;
    // The lock is released: the callback calls back into VTAUopPush & co.
    // SAFETY: a C function pointer with the documented signature, given its own signature.
    let status = unsafe { finit(signature) };
    let recorder = with_state(None, |s| Ok(s.recording.take())).unwrap_or_default();
    if status != 0 {
        return Err(VtaError::Runtime(format!("kernel callback returned {status}")));
    }
    let kernel = recorder.finish()?;
    table.kernels[key] = Some(kernel.clone());
    Ok(kernel)
}

fn push_op(uop_handle: *mut *mut c_void, finit: Finit, signature: *mut c_void, nbytes: c_int, gemm: bool) -> c_int {
    let refused = with_state(true, |s| Ok(s.queue_error.is_some()));
    if refused {
        with_queue(|_, _, _| Ok(()));
        return 1;
    }
    // SAFETY: forwarded from the C caller, which owns the contract of `kernel_for`.
    let kernel = unsafe { kernel_for(uop_handle, finit, signature, nbytes) };
    let mut status = 0;
    with_queue(|q, _, _| {
        let kernel = kernel?;
        let wants = if gemm { crate::runtime::KernelMode::Gemm } else { crate::runtime::KernelMode::Alu };
        if !kernel.uops.is_empty() && kernel.mode != wants {
            return Err(VtaError::Runtime("a GEMM kernel pushed as ALU or the reverse".into()));
        }
        q.push_kernel(&kernel)
    });
    with_state((), |s| {
        if s.queue_error.is_some() {
            status = 1;
        }
        Ok(())
    });
    status
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
    push_op(uop_handle, finit, signature, nbytes, true)
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
    push_op(uop_handle, finit, signature, nbytes, false)
}

fn dep(from: c_int, to: c_int, push: bool) -> c_int {
    let mut status = 1;
    with_queue(|q, _, _| {
        if push { q.dep_push(from, to) } else { q.dep_pop(from, to) }?;
        status = 0;
        Ok(())
    });
    status
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADepPush(_cmd: *mut c_void, from_qid: c_int, to_qid: c_int) -> c_int {
    dep(from_qid, to_qid, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn VTADepPop(_cmd: *mut c_void, from_qid: c_int, to_qid: c_int) -> c_int {
    dep(from_qid, to_qid, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn VTASynchronize(_cmd: *mut c_void, wait_cycles: u32) {
    with_queue(|q, d, _| q.synchronize(d, wait_cycles))
}

// ---------------------------------------------------------------------------------------------
// Heron extras

/// The last error message, or NULL; valid until the next call into this library.
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_last_error() -> *const c_char {
    with_state(std::ptr::null(), |s| Ok(s.last_error.as_ref().map_or(std::ptr::null(), |e| e.as_ptr())))
}

#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_profiler_clear() {
    with_state((), |s| {
        s.driver.clear_profile();
        Ok(())
    })
}

/// The simulator's counters as JSON (keys in VTA-FACTS §5.1 order); valid until the next call.
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_profiler_status() -> *const c_char {
    with_state(std::ptr::null(), |s| {
        let json = s.driver.profile().map_or_else(|| "{}".to_string(), |p| p.to_json());
        s.profile_json = CString::new(json).expect("JSON has no NUL");
        Ok(s.profile_json.as_ptr())
    })
}

/// Simulator debug flags (bit 0: skip execution; counters still advance, UOP loads execute).
#[unsafe(no_mangle)]
pub extern "C" fn heron_vta_profiler_debug_mode(flags: c_int) {
    with_state((), |s| {
        s.driver.set_sim_debug(flags as u32);
        Ok(())
    })
}

/// Replaces the driver with the library at `path` (NULL: the built-in simulator). Resets the
/// runtime; buffers of the old driver become invalid. Returns 0 on success.
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
    with_state(1, |s| {
        let driver: Box<dyn Driver> = match &path {
            Some(p) => Box::new(DynamicDriver::load(p)?),
            None => Box::new(SimDriver::new(s.isa.clone())),
        };
        s.queue = None;
        s.buffers.clear();
        s.queue_error = None;
        s.recording = None;
        s.driver = driver;
        Ok(0)
    })
}
