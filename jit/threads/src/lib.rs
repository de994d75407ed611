//! The run context generated code receives, and the thread pool behind it.
//!
//! `main` takes a pointer to a [`RunContext`] (or null) besides its argument table. A call of a
//! function with a parallel loop goes through `parallel_for`, read from the context's first
//! word with `call_indirect`, so JIT and AOT code call it the same way; with a null context the
//! function runs on the calling thread alone. The pool is persistent: the calling thread plus
//! N-1 workers. A job is published by bumping a generation counter (its own cache line) after
//! writing the job; workers spin on it for a while (not at all when the threads outnumber the
//! CPUs), yield, then park, and keep off the CPU of the thread that created the pool. Each thread runs chunks of its
//! own contiguous slice of the iterations, then chunks left in the others' slices (each chunk
//! claimed by one atomic increment), so a thread on a busier core takes fewer; an iteration
//! computes the same thing on any thread, so results do not depend on timing. Completion is
//! signalled on a second counter. Nothing is allocated per job.
//!
//! C programs running an AOT object's `heron_<name>_run_ctx` get a context from this crate's
//! static library (`libheron_threads.a`, declared in `include/heron_threads.h`):
//! `heron_threads_new`, `heron_threads_context`, `heron_threads_free`. A pool's context also
//! lists the precompiled kernels ([`KERNEL_ROUTINES`]), which the library carries, so objects
//! compiled to call them (`heron compile --kernels`) run with it.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};

/// One thread's share of a parallel function: `task(argv, status, context, lo, hi)` runs
/// iterations `lo..hi` of its parallel loop with the buffer pointers in `argv`.
pub type TaskFn = extern "C" fn(*const *mut u8, *mut i32, *const RunContext, i64, i64);

/// `parallel_for(context, task, argv, status, extent)`: runs `task` over `0..extent`, split
/// across the pool's threads, and returns when every slice is done.
pub type ParallelForFn = extern "C" fn(*const RunContext, TaskFn, *const *mut u8, *mut i32, i64);

/// An opaque handle of a device (an accelerator's runtime object) that precompiled routines
/// receive from the run context.
pub type DeviceHandle = *mut std::ffi::c_void;

/// What generated code reaches at run time. `#[repr(C)]`: generated code loads
/// `parallel_for` from offset 0, the routine table from [`RunContext::ROUTINES_OFFSET`] and
/// the device table from [`RunContext::DEVICES_OFFSET`].
#[repr(C)]
pub struct RunContext {
    pub parallel_for: ParallelForFn,
    /// The pool's state; NULL runs parallel loops on the calling thread.
    shared: *const Shared,
    /// The precompiled routines, in the order the module was compiled with.
    routines: *const RoutineEntry,
    routine_count: usize,
    /// Device handles by slot, handed to routines that take one.
    devices: *const DeviceHandle,
    device_count: usize,
}

impl RunContext {
    /// Byte offset of the routine table pointer ([`RoutineEntry`] elements).
    pub const ROUTINES_OFFSET: i32 = std::mem::offset_of!(RunContext, routines) as i32;
    /// Byte offset of the device table pointer.
    pub const DEVICES_OFFSET: i32 = std::mem::offset_of!(RunContext, devices) as i32;
    /// Byte offsets of the two tables' lengths (generated code checks them before a call).
    pub const ROUTINE_COUNT_OFFSET: i32 = std::mem::offset_of!(RunContext, routine_count) as i32;
    pub const DEVICE_COUNT_OFFSET: i32 = std::mem::offset_of!(RunContext, device_count) as i32;

    /// A context running parallel loops on `pool` (or on the calling thread), with `routines`
    /// and `devices`, which must outlive every run given this context.
    pub fn new(pool: Option<&ThreadPool>, routines: &[RoutineEntry], devices: &[DeviceHandle]) -> RunContext {
        RunContext {
            parallel_for,
            shared: pool.map_or(std::ptr::null(), |p| Arc::as_ptr(&p.shared)),
            routines: routines.as_ptr(),
            routine_count: routines.len(),
            devices: devices.as_ptr(),
            device_count: devices.len(),
        }
    }
}

/// Busy-waiting, then yielding, then parking: a waiting thread first spins (the next job or
/// the last slice usually comes within microseconds), then yields its core (so a thread it
/// waits for can run when there are more threads than cores), then a worker parks. A pool with
/// more threads than the CPUs it may use does not spin: the thread it waits for may need its
/// core (an MLP on two threads kept to one CPU: 650 µs a run spinning, 34 µs yielding).
const SPINS: u32 = 1 << 12;
const YIELDS: u32 = 1 << 8;

/// Pads a value to its own cache line, so the counters the threads poll do not share one.
#[repr(align(128))]
struct CacheLine<T>(T);

#[derive(Clone, Copy)]
struct Job {
    task: Option<TaskFn>,
    argv: *const *mut u8,
    status: *mut i32,
    context: *const RunContext,
    extent: i64,
}

struct Shared {
    /// Written by the caller only while no worker reads it (between jobs).
    job: UnsafeCell<Job>,
    generation: CacheLine<AtomicU64>,
    pending: CacheLine<AtomicUsize>,
    /// Per thread, the next unclaimed iteration of its slice of the job.
    next: Box<[CacheLine<AtomicI64>]>,
    shutdown: AtomicBool,
    /// [`SPINS`], or 0 when the threads outnumber the CPUs.
    spins: u32,
    threads: usize,
    /// The workers, to unpark; set once they all started.
    workers: OnceLock<Vec<Thread>>,
}

// SAFETY: `job` is written only by the thread that owns the pool, before a generation bump
// (release) and after every worker finished the previous job (acquire on `pending`); workers
// read it only after seeing the bump (acquire). The raw pointers inside point at memory that
// the caller keeps alive until `pending` reaches zero.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// One entry of a run context's routine table. Generated code calls entry `k` only if its `id`
/// is the [`routine_id`] of the name it was compiled to call there; any other table (an older
/// library, another model's context) fails the run with a status instead of calling the wrong
/// function. A routine's name stands for its C signature: a new signature takes a new name.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RoutineEntry {
    pub id: u64,
    pub address: *const u8,
}

impl RoutineEntry {
    /// Byte offsets generated code loads from, and the entry's size.
    pub const ID_OFFSET: i32 = std::mem::offset_of!(RoutineEntry, id) as i32;
    pub const ADDRESS_OFFSET: i32 = std::mem::offset_of!(RoutineEntry, address) as i32;
    pub const SIZE: usize = size_of::<RoutineEntry>();

    pub fn new(name: &str, address: *const u8) -> RoutineEntry {
        RoutineEntry { id: routine_id(name), address }
    }
}

/// A routine's id: the 64-bit FNV-1a hash of its name (stable across builds and machines).
pub const fn routine_id(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut k = 0;
    while k < bytes.len() {
        hash = (hash ^ bytes[k] as u64).wrapping_mul(0x0000_0100_0000_01b3);
        k += 1;
    }
    hash
}

/// How many routines a pool's context lists: the kernels, in `heron_kernels::abi` order.
pub const KERNEL_ROUTINES: usize = heron_kernels::abi::ROUTINE_NAMES.len();

/// The kernels' routine entries in table order, for contexts that list them after their own
/// routines (VTA's).
pub fn kernel_routines() -> [RoutineEntry; KERNEL_ROUTINES] {
    let addresses = heron_kernels::abi::routine_addresses();
    std::array::from_fn(|k| RoutineEntry::new(heron_kernels::abi::ROUTINE_NAMES[k], addresses[k]))
}

/// The calling thread plus `threads - 1` persistent workers.
pub struct ThreadPool {
    shared: Arc<Shared>,
    joins: Vec<JoinHandle<()>>,
    context: Box<RunContext>,
    /// The context's routine table (boxed: the context points at it).
    _kernels: Box<[RoutineEntry; KERNEL_ROUTINES]>,
}

// SAFETY: the context's pointer targets `shared`, owned by the pool; a pool runs one job at a
// time from whichever thread holds it (`run` borrows it).
unsafe impl Send for ThreadPool {}

/// Iterations `lo..hi` of `0..extent` for thread `index` of `threads`: contiguous, sizes
/// differing by at most one, the same on every run.
pub fn slice(extent: i64, threads: usize, index: usize) -> (i64, i64) {
    let (n, i) = (threads as i64, index as i64);
    let (base, rest) = (extent / n, extent % n);
    let lo = i * base + i.min(rest);
    (lo, lo + base + i64::from(i < rest))
}

impl ThreadPool {
    /// A pool of `threads` threads in all (at least 1; the caller is one of them).
    pub fn new(threads: usize) -> std::io::Result<ThreadPool> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            job: UnsafeCell::new(Job {
                task: None,
                argv: std::ptr::null(),
                status: std::ptr::null_mut(),
                context: std::ptr::null(),
                extent: 0,
            }),
            generation: CacheLine(AtomicU64::new(0)),
            pending: CacheLine(AtomicUsize::new(0)),
            next: (0..threads).map(|_| CacheLine(AtomicI64::new(0))).collect(),
            shutdown: AtomicBool::new(false),
            spins: if std::thread::available_parallelism().is_ok_and(|n| n.get() < threads) { 0 } else { SPINS },
            threads,
            workers: OnceLock::new(),
        });
        let mut joins = Vec::with_capacity(threads - 1);
        let cpus = Arc::new(worker_cpus());
        for index in 1..threads {
            let s = Arc::clone(&shared);
            let cpus = Arc::clone(&cpus);
            let spawned = std::thread::Builder::new().name(format!("heron-worker-{index}")).spawn(move || {
                if !cpus.is_empty() {
                    keep_to(&cpus);
                }
                work(&s, index)
            });
            match spawned {
                Ok(h) => joins.push(h),
                Err(e) => {
                    stop(&shared, &mut joins);
                    return Err(e);
                }
            }
        }
        shared.workers.set(joins.iter().map(|h| h.thread().clone()).collect()).expect("set once, here");
        let kernels = Box::new(kernel_routines());
        let context = Box::new(RunContext {
            parallel_for,
            shared: Arc::as_ptr(&shared),
            routines: kernels.as_ptr(),
            routine_count: KERNEL_ROUTINES,
            devices: std::ptr::null(),
            device_count: 0,
        });
        Ok(ThreadPool { shared, joins, context, _kernels: kernels })
    }

    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// The context for AOT objects: the pool's threads and the kernels as routines (the table
    /// an object compiled with kernels indexes); valid while the pool lives.
    pub fn context(&self) -> *const RunContext {
        &*self.context
    }
}

/// The CPUs the workers keep to: those the creating thread may run on other than the one it
/// runs on now (none to keep to when that leaves nothing, or off Linux); the scheduler still
/// places and balances them among those. Workers left free were found on the creating
/// thread's CPU after a wake-up (the scheduler places a woken thread near its waker) in a
/// quarter of the processes on a 2-vCPU machine, and stayed there: each parallel loop then
/// waited for a time slice, and a 15 µs MLP took 630 µs.
#[cfg(target_os = "linux")]
fn worker_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit set the call fills; `sched_getcpu` has no preconditions.
    let (allowed, current) = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect();
        (allowed, usize::try_from(libc::sched_getcpu()).ok())
    };
    others(&allowed, current)
}

#[cfg(not(target_os = "linux"))]
fn worker_cpus() -> Vec<usize> {
    Vec::new()
}

/// `allowed` without `current`; empty when that leaves nothing or `current` is not among them
/// (then there is nothing to keep off).
fn others(allowed: &[usize], current: Option<usize>) -> Vec<usize> {
    if !current.is_some_and(|c| allowed.contains(&c)) {
        return Vec::new();
    }
    allowed.iter().copied().filter(|&c| Some(c) != current).collect()
}

/// Keeps the calling thread on `cpus` (if the system refuses, the thread stays free: only where
/// it runs changes, never what it computes).
#[cfg(target_os = "linux")]
fn keep_to(cpus: &[usize]) {
    // SAFETY: `set` is a plain bit set; every CPU is below `CPU_SETSIZE` (each came from one).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(not(target_os = "linux"))]
fn keep_to(_cpus: &[usize]) {}

fn stop(shared: &Shared, joins: &mut Vec<JoinHandle<()>>) {
    shared.shutdown.store(true, Ordering::Release);
    shared.generation.0.fetch_add(1, Ordering::Release);
    for handle in joins.iter() {
        handle.thread().unpark();
    }
    for handle in joins.drain(..) {
        // A worker only runs generated code, which does not panic; nothing to report.
        let _ = handle.join();
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        stop(&self.shared, &mut self.joins);
    }
}

fn work(shared: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        loop {
            let g = shared.generation.0.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if spins < shared.spins {
                std::hint::spin_loop();
            } else if spins < shared.spins + YIELDS {
                std::thread::yield_now();
            } else {
                // An unpark between the load and here makes this return at once.
                std::thread::park();
            }
            spins = spins.saturating_add(1);
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: see `Shared`: the job is stable until this worker decrements `pending`.
        let job = unsafe { *shared.job.get() };
        if let Some(task) = job.task {
            run_share(shared, &job, task, index);
        }
        shared.pending.0.fetch_sub(1, Ordering::Release);
    }
}

/// Runs thread `index`'s share of `job`: chunks of its own slice in order, then chunks left in
/// the other threads' slices, so a thread that runs slower (a busier core) takes fewer while
/// balanced threads keep to their slices. Every chunk is claimed by one atomic increment, and
/// which thread runs an iteration never changes what it computes.
fn run_share(shared: &Shared, job: &Job, task: TaskFn, index: usize) {
    let threads = shared.threads;
    // Four chunks per slice: enough to even out the threads, few enough to keep each one's
    // iterations together.
    let chunk = ((job.extent + threads as i64 - 1) / threads as i64 + 3) / 4;
    let chunk = chunk.max(1);
    for k in 0..threads {
        let owner = (index + k) % threads;
        let (_, hi) = slice(job.extent, threads, owner);
        loop {
            let lo = shared.next[owner].0.fetch_add(chunk, Ordering::Relaxed);
            if lo >= hi {
                break;
            }
            task(job.argv, job.status, job.context, lo, (lo + chunk).min(hi));
        }
    }
}

extern "C" fn parallel_for(
    context: *const RunContext,
    task: TaskFn,
    argv: *const *mut u8,
    status: *mut i32,
    extent: i64,
) {
    // SAFETY: generated code passes the context it was given, which `JitModule::run_in` (or an
    // AOT caller) made for a pool the running thread holds, or with no pool.
    let Some(shared) = (unsafe { (*context).shared.as_ref() }) else {
        task(argv, status, context, 0, extent);
        return;
    };
    let workers = shared.threads - 1;
    if workers == 0 || extent < 2 {
        task(argv, status, context, 0, extent);
        return;
    }
    // SAFETY: no worker reads the job now: the previous one finished (`pending` was zero).
    unsafe { *shared.job.get() = Job { task: Some(task), argv, status, context, extent } };
    for (index, next) in shared.next.iter().enumerate() {
        next.0.store(slice(extent, shared.threads, index).0, Ordering::Relaxed);
    }
    shared.pending.0.store(workers, Ordering::Relaxed);
    shared.generation.0.fetch_add(1, Ordering::Release);
    for t in shared.workers.get().into_iter().flatten() {
        t.unpark();
    }
    run_share(shared, &Job { task: Some(task), argv, status, context, extent }, task, 0);
    let mut spins = 0u32;
    while shared.pending.0.load(Ordering::Acquire) != 0 {
        if spins < shared.spins {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// C: `HeronThreads *heron_threads_new(size_t threads)`: a pool of `threads` threads in all
/// (the caller and `threads - 1` workers; 0 counts as 1), or NULL when a thread cannot start.
#[unsafe(no_mangle)]
pub extern "C" fn heron_threads_new(threads: usize) -> *mut ThreadPool {
    match ThreadPool::new(threads) {
        Ok(pool) => Box::into_raw(Box::new(pool)),
        Err(_) => std::ptr::null_mut(),
    }
}

/// C: `const HeronRunContext *heron_threads_context(const HeronThreads *pool)`: the context to
/// pass to `heron_<name>_run_ctx`, valid until the pool is freed; NULL for a NULL pool.
///
/// # Safety
/// `pool` is NULL or a pool from [`heron_threads_new`] not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_threads_context(pool: *const ThreadPool) -> *const RunContext {
    // SAFETY: the caller's promise above.
    unsafe { pool.as_ref() }.map_or(std::ptr::null(), ThreadPool::context)
}

/// C: `void heron_threads_free(HeronThreads *pool)`: stops and joins the workers; NULL is a
/// no-op.
///
/// # Safety
/// `pool` is NULL or a pool from [`heron_threads_new`] not yet freed, with no run using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn heron_threads_free(pool: *mut ThreadPool) {
    if !pool.is_null() {
        // SAFETY: the caller's promise above: the box came from `heron_threads_new`.
        drop(unsafe { Box::from_raw(pool) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_range_once_in_order() {
        for threads in 1..6 {
            for extent in 0..40 {
                let mut next = 0;
                for i in 0..threads {
                    let (lo, hi) = slice(extent, threads, i);
                    assert_eq!(lo, next, "contiguous");
                    assert!(hi - lo <= extent / threads as i64 + 1, "balanced");
                    next = hi;
                }
                assert_eq!(next, extent);
            }
        }
    }

    /// Adds 1 to `counts[i]` for every `i` in `lo..hi`; reports a status for `i == 13`.
    extern "C" fn count(argv: *const *mut u8, status: *mut i32, _context: *const RunContext, lo: i64, hi: i64) {
        // SAFETY: the test passes one pointer to a `[u32; 64]`; slices are disjoint.
        let counts = unsafe { (*argv).cast::<u32>() };
        for i in lo..hi {
            // SAFETY: `i < 64` and no other thread touches element `i`.
            unsafe { *counts.add(i as usize) += 1 };
            if i == 13 {
                // SAFETY: the status word is an `AtomicI32` owned by the test.
                unsafe { (*status.cast::<std::sync::atomic::AtomicI32>()).store(7, Ordering::Relaxed) };
            }
        }
    }

    #[test]
    fn every_iteration_runs_once_per_job_on_any_thread_count() {
        for threads in [1, 2, 3, 5] {
            let pool = ThreadPool::new(threads).expect("threads");
            assert_eq!(pool.threads(), threads);
            let mut counts = [0u32; 64];
            let status = std::sync::atomic::AtomicI32::new(0);
            for job in 0..2_000 {
                let argv = [counts.as_mut_ptr().cast::<u8>()];
                let extent = (job % 64) as i64 + 1;
                let context = pool.context();
                // SAFETY: the context comes from a live pool; generated code calls it the same way.
                unsafe { ((*context).parallel_for)(context, count, argv.as_ptr(), status.as_ptr(), extent) };
            }
            let want: Vec<u32> =
                (0..64).map(|i| (0..2_000).filter(|job| (job % 64) as usize >= i).count() as u32).collect();
            assert_eq!(counts.to_vec(), want, "{threads} threads");
            assert_eq!(status.load(Ordering::Relaxed), 7);
        }
    }

    /// Workers keep to the CPUs the creating thread may use other than its own (nothing to keep
    /// to when that leaves none); a pool with more threads than CPUs yields instead of
    /// spinning, and still runs every iteration once.
    #[test]
    fn workers_keep_off_the_creators_cpu_and_outnumbered_cpus_are_not_spun_on() {
        assert_eq!(others(&[0, 1, 2, 3], Some(1)), [0, 2, 3]);
        assert_eq!(others(&[4, 7], Some(7)), [4]);
        assert!(others(&[3], Some(3)).is_empty());
        assert!(others(&[0, 1], Some(5)).is_empty());
        assert!(others(&[0, 1], None).is_empty());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = ThreadPool::new(cpus + 1).expect("threads");
        assert_eq!(pool.shared.spins, 0);
        let mut counts = [0u32; 64];
        let status = std::sync::atomic::AtomicI32::new(0);
        let argv = [counts.as_mut_ptr().cast::<u8>()];
        let context = pool.context();
        // SAFETY: the context comes from a live pool; generated code calls it the same way.
        unsafe { ((*context).parallel_for)(context, count, argv.as_ptr(), status.as_ptr(), 64) };
        assert_eq!(counts, [1; 64]);
        assert_eq!(ThreadPool::new(1).expect("one").shared.spins, SPINS);
    }
}
