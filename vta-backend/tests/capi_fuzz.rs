//! Fuzz target of the C API: random sequences of calls through the exported `extern "C"`
//! functions, with NULL, freed, forged, wrong-kind, garbage, huge and valid arguments, checked
//! against a model of what must happen: calls with a bad handle or an out-of-range device side
//! fail with an error (never a crash, an abort or a hang), valid copies succeed, allocations never
//! overlap, and buffer contents never change except through the caller's own writes and the
//! streams it runs. Host pointers are always valid (that is the caller's promise); device-side
//! arguments are anything.
//!
//! The C API has one process-wide state, so this file holds a single test. Case count and seed:
//! `HERON_FUZZ_CASES`, `HERON_FUZZ_SEED` (tests/common).
#![allow(unsafe_code)] // it calls the C API, as a C program would

mod common;

use std::ffi::{CStr, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use common::fuzz_config;
use heron_vta::capi::*;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

/// Cycle cap of every run here: long streams time out in microseconds.
const WORK_LIMIT: u64 = 1 << 16;

/// Device-side pointer arguments.
#[derive(Clone, Copy, Debug)]
enum Dev {
    /// Live buffer handle `.0` (modulo the live count; NULL when there is none).
    Buffer(usize),
    FreedBuffer(usize),
    /// Live `VTAMemAlloc` pointer `.0` plus `.1` bytes.
    Mem(usize, u16),
    /// A freed `VTAMemAlloc` pointer (the address may have been reused: no expectation).
    FreedMem(usize),
    /// Handles of other kinds.
    Device(usize),
    Cmd,
    /// A live buffer handle moved past every serial issued.
    Forged(usize),
    /// Addresses nothing lives at (a tagged one included).
    Garbage(u8),
    Null,
}

const GARBAGE: [u64; 6] = [0x10, 0xdead_beef, u64::MAX, 1 << 63, 0x5654_0001_0000_1234, 0x5654_0900_0000_0001];

/// Sizes: small, or beyond any allocation.
#[derive(Clone, Copy, Debug)]
enum Size {
    Small(u32),
    Huge(u8),
}

const HUGE: [usize; 6] = [usize::MAX, usize::MAX - 4095, 1 << 63, 1 << 40, 1 << 32, u32::MAX as usize];

impl Size {
    fn get(self) -> usize {
        match self {
            Size::Small(n) => n as usize,
            Size::Huge(k) => HUGE[k as usize % HUGE.len()],
        }
    }
}

/// A recorded uop kernel, as the `finit` callback replays it.
#[derive(Clone, Debug)]
struct Kernel {
    loops: Vec<[u32; 4]>,
    close_loops: bool,
    uops: Vec<(u32, u32, [u32; 3], u32, u32, i32)>,
    status: c_int,
    /// Pushes another kernel from inside the callback, or shuts the runtime down.
    nested: bool,
    shutdown: bool,
}

/// Where `VTAPushGEMMOp`'s `uop_handle` points.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Fresh,
    Existing(usize),
    Garbage(u8),
    Buffer(usize),
    NullPointer,
}

#[derive(Clone, Copy, Debug)]
enum Cmd {
    Live,
    Stale(usize),
    Null,
    Garbage(u8),
    Buffer(usize),
}

#[derive(Clone, Debug)]
enum Call {
    BufferAlloc(Size),
    BufferFree(Dev),
    CopyIn {
        to: Dev,
        offset: Size,
        size: Size,
        fill: u8,
    },
    CopyOut {
        from: Dev,
        offset: Size,
        size: Size,
    },
    CopyDevice {
        from: Dev,
        from_offset: Size,
        to: Dev,
        to_offset: Size,
        size: Size,
    },
    CpuPtrWrite {
        cmd: Cmd,
        buffer: Dev,
        at: u16,
        fill: u8,
    },
    MemAlloc(Size),
    MemFree(Dev),
    /// `VTAMemFree` of a buffer's host address.
    FreeBufferMemory(usize),
    MemPhys(Dev),
    MemCopyIn {
        dst: Dev,
        size: Size,
        fill: u8,
    },
    MemCopyOut {
        src: Dev,
        size: Size,
    },
    Flush {
        ptr: Dev,
        size: u16,
        wrong_phys: bool,
    },
    DeviceAlloc,
    DeviceFree(Dev),
    DeviceRun {
        device: Dev,
        words: Vec<u128>,
        extra: u32,
        wait: u32,
    },
    CommandHandle,
    Shutdown,
    LoadDriver,
    SetDebug(Cmd, c_int),
    Barrier {
        cmd: Cmd,
        buffer: Dev,
        elem_bits: u32,
        start: u32,
        extent: u32,
    },
    Load {
        cmd: Cmd,
        src: Dev,
        args: [u32; 10],
    },
    Store {
        cmd: Cmd,
        dst: Dev,
        args: [u32; 6],
    },
    /// Pushed as the kernel's own mode (GEMM unless its first uop says ALU), or the other.
    Push {
        other_mode: bool,
        slot: Slot,
        kernel: Kernel,
        signature: (c_int, i32),
    },
    UopPushOutside,
    Dep {
        cmd: Cmd,
        push: bool,
        from: c_int,
        to: c_int,
    },
    Sync {
        cmd: Cmd,
        wait: u32,
    },
    WorkLimit(u64),
    Profiler,
}

fn dev() -> impl Strategy<Value = Dev> {
    dev_weighted(6)
}

/// Device pointers for queue operations: mostly live buffers, so streams get built and run.
fn queue_dev() -> impl Strategy<Value = Dev> {
    dev_weighted(60)
}

fn dev_weighted(live_buffers: u32) -> impl Strategy<Value = Dev> {
    let i = 0usize..8;
    prop_oneof![
        live_buffers => i.clone().prop_map(Dev::Buffer),
        2 => i.clone().prop_map(Dev::FreedBuffer),
        4 => (i.clone(), prop_oneof![3 => 0u16..64, 1 => any::<u16>()]).prop_map(|(i, o)| Dev::Mem(i, o)),
        1 => i.clone().prop_map(Dev::FreedMem),
        1 => i.clone().prop_map(Dev::Device),
        1 => Just(Dev::Cmd),
        1 => i.prop_map(Dev::Forged),
        1 => any::<u8>().prop_map(Dev::Garbage),
        1 => Just(Dev::Null),
    ]
}

/// Device handle arguments: mostly live devices.
fn device() -> impl Strategy<Value = Dev> {
    prop_oneof![6 => (0usize..8).prop_map(Dev::Device), 1 => dev()]
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![
        3 => (0u32..300).prop_map(Size::Small),
        2 => (0u32..70_000).prop_map(Size::Small),
        1 => any::<u8>().prop_map(Size::Huge),
    ]
}

fn offset() -> impl Strategy<Value = Size> {
    prop_oneof![4 => (0u32..100).prop_map(Size::Small), 1 => size()]
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        40 => Just(Cmd::Live),
        1 => (0usize..4).prop_map(Cmd::Stale),
        1 => Just(Cmd::Null),
        1 => any::<u8>().prop_map(Cmd::Garbage),
        1 => (0usize..8).prop_map(Cmd::Buffer),
    ]
}

/// Small values, field-width edges and huge ones.
fn field() -> impl Strategy<Value = u32> {
    prop_oneof![6 => 0u32..6, 2 => 0u32..300, 1 => Just(15), 1 => Just(16), 1 => Just(65535), 1 => Just(65536), 1 => any::<u32>()]
}

fn kernel() -> impl Strategy<Value = Kernel> {
    let extent = prop_oneof![6 => 1u32..4, 1 => Just(16383), 1 => Just(16384), 1 => Just(0)];
    let factor = || (0u32..3).boxed();
    let loops = proptest::collection::vec([extent.boxed(), factor(), factor(), factor()], 0..3);
    // Mostly well-formed: one mode, reset flag, opcode and immediate; distinct destinations.
    let tidy = (0u32..2, prop::bool::weighted(0.2), 0u32..5, 0u32..2, -40i32..40, 0u32..64, 1usize..5).prop_map(
        |(mode, reset, opcode, use_imm, imm, base, n)| {
            (0..n as u32)
                .map(|i| (mode, reset as u32, [base + i, base + 2 * i, i], opcode, use_imm, imm))
                .collect::<Vec<_>>()
        },
    );
    let index = prop_oneof![6 => 0u32..16, 1 => 0u32..2048, 1 => any::<u32>()];
    let wild = proptest::collection::vec(
        (0u32..4, 0u32..2, [index.clone(), index.clone(), index], 0u32..7, 0u32..2, any::<i32>()),
        0..6,
    );
    let uops = prop_oneof![4 => tidy, 1 => wild];
    let status = prop_oneof![19 => Just(0), 1 => -2i32..3];
    (loops, prop::bool::weighted(0.95), uops, status, prop::bool::weighted(0.03), prop::bool::weighted(0.03)).prop_map(
        |(loops, close_loops, uops, status, nested, shutdown)| Kernel {
            loops,
            close_loops,
            uops,
            status,
            nested,
            shutdown,
        },
    )
}

/// Instruction words: valid-looking GEMM/ALU/LOAD/STORE/FINISH headers with random fields.
fn words() -> impl Strategy<Value = Vec<u128>> {
    let word = (0u128..8, any::<u128>(), prop::bool::weighted(0.7))
        .prop_map(|(op, bits, tame)| if tame { op | (bits & 0xffff_0000_ffff_ff80) } else { (bits & !7) | op });
    (proptest::collection::vec(word, 0..12), any::<bool>()).prop_map(|(mut words, finish)| {
        words.extend(finish.then_some(3));
        words
    })
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        4 => size().prop_map(Call::BufferAlloc),
        2 => dev().prop_map(Call::BufferFree),
        5 => (dev(), offset(), size(), any::<u8>()).prop_map(|(to, offset, size, fill)| Call::CopyIn { to, offset, size, fill }),
        5 => (dev(), offset(), size()).prop_map(|(from, offset, size)| Call::CopyOut { from, offset, size }),
        2 => (dev(), offset(), dev(), offset(), size())
            .prop_map(|(from, from_offset, to, to_offset, size)| Call::CopyDevice { from, from_offset, to, to_offset, size }),
        2 => (cmd(), dev(), any::<u16>(), any::<u8>()).prop_map(|(cmd, buffer, at, fill)| Call::CpuPtrWrite { cmd, buffer, at, fill }),
        2 => size().prop_map(Call::MemAlloc),
        1 => prop_oneof![4 => (0usize..8).prop_map(|i| Dev::Mem(i, 0)), 1 => dev()].prop_map(Call::MemFree),
        1 => (0usize..8).prop_map(Call::FreeBufferMemory),
        1 => dev().prop_map(Call::MemPhys),
        2 => (dev(), size(), any::<u8>()).prop_map(|(dst, size, fill)| Call::MemCopyIn { dst, size, fill }),
        2 => (dev(), size()).prop_map(|(src, size)| Call::MemCopyOut { src, size }),
        1 => (dev(), any::<u16>(), prop::bool::weighted(0.2)).prop_map(|(ptr, size, wrong_phys)| Call::Flush { ptr, size, wrong_phys }),
        1 => Just(Call::DeviceAlloc),
        1 => device().prop_map(Call::DeviceFree),
        3 => (device(), words(), 0u32..3, prop_oneof![Just(0u32), 1u32..3000, Just(u32::MAX)])
            .prop_map(|(device, words, extra, wait)| Call::DeviceRun { device, words, extra, wait }),
        2 => Just(Call::CommandHandle),
        6 => Just(Call::Shutdown),
        1 => Just(Call::LoadDriver),
        1 => (cmd(), any::<c_int>()).prop_map(|(c, f)| Call::SetDebug(c, f)),
        1 => (cmd(), queue_dev(), prop_oneof![Just(8u32), Just(32), any::<u32>()], field(), field())
            .prop_map(|(cmd, buffer, elem_bits, start, extent)| Call::Barrier { cmd, buffer, elem_bits, start, extent }),
        5 => (cmd(), queue_dev(), [(); 10].map(|()| field().boxed()), 0u32..7)
            .prop_map(|(cmd, src, mut args, memory)| {
                args[9] = memory;
                Call::Load { cmd, src, args }
            }),
        3 => (cmd(), queue_dev(), [(); 6].map(|()| field().boxed()), prop_oneof![Just(4u32), 0u32..8])
            .prop_map(|(cmd, dst, mut args, memory)| {
                args[1] = memory;
                Call::Store { cmd, dst, args }
            }),
        5 => (prop::bool::weighted(0.05), prop_oneof![8 => Just(Slot::Fresh), 8 => (0usize..8).prop_map(Slot::Existing), 1 => any::<u8>().prop_map(Slot::Garbage), 1 => (0usize..8).prop_map(Slot::Buffer), 1 => Just(Slot::NullPointer)], kernel(), prop_oneof![8 => Just((0, 0)), 6 => (Just(4), -1i32..101), 1 => (any::<c_int>(), any::<i32>())])
            .prop_map(|(other_mode, slot, kernel, signature)| Call::Push { other_mode, slot, kernel, signature }),
        1 => Just(Call::UopPushOutside),
        4 => (cmd(), any::<bool>(), prop_oneof![6 => prop::sample::select(vec![(1, 2), (2, 1), (2, 3), (3, 2)]), 1 => (-1i32..5, -1i32..5)])
            .prop_map(|(cmd, push, (from, to))| Call::Dep { cmd, push, from, to }),
        3 => (cmd(), prop_oneof![Just(0u32), Just(1000), 1u32..100, Just(1 << 31), Just(u32::MAX)]).prop_map(|(cmd, wait)| Call::Sync { cmd, wait }),
        1 => (1u64..WORK_LIMIT).prop_map(Call::WorkLimit),
        1 => Just(Call::Profiler),
    ]
}

/// A live allocation: its handle or pointer, host address, size and known contents (`None`
/// once a stream may have written it).
struct Block {
    at: usize,
    host: usize,
    size: usize,
    contents: Option<Vec<u8>>,
}

/// What the test knows of the library's state.
#[derive(Default)]
struct Model {
    buffers: Vec<Block>,
    freed_buffers: Vec<usize>,
    mems: Vec<Block>,
    freed_mems: Vec<usize>,
    devices: Vec<usize>,
    cmd: Option<usize>,
    stale_cmds: Vec<usize>,
    /// Uop handle slots (as a C program's statics).
    slots: Vec<*mut c_void>,
    /// The queue refuses work after an error, until shutdown.
    stopped: bool,
    /// A STORE is queued: the next synchronize may write any device memory.
    store_queued: bool,
}

/// Whether a call must succeed, must fail, or may do either.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Ok,
    Fail,
    Either,
}

/// A device pointer argument: its value, and the block it is known to address (buffer or not,
/// index, byte offset of the pointer in it) when live.
struct Arg {
    value: usize,
    target: Option<(bool, usize, usize)>,
}

fn pick<T>(v: &[T], i: usize) -> Option<&T> {
    (!v.is_empty()).then(|| &v[i % v.len()])
}

impl Model {
    fn arg(&self, d: Dev) -> Arg {
        let plain = |value: usize| Arg { value, target: None };
        match d {
            Dev::Buffer(i) => match self.buffers.is_empty() {
                true => plain(0),
                false => Arg {
                    value: self.buffers[i % self.buffers.len()].at,
                    target: Some((true, i % self.buffers.len(), 0)),
                },
            },
            Dev::FreedBuffer(i) => plain(pick(&self.freed_buffers, i).copied().unwrap_or(0)),
            Dev::Mem(i, off) => match self.mems.is_empty() {
                true => plain(0),
                false => {
                    let k = i % self.mems.len();
                    Arg { value: self.mems[k].at + off as usize, target: Some((false, k, off as usize)) }
                }
            },
            Dev::FreedMem(i) => {
                // The host may have given the address to a new block since.
                let value = pick(&self.freed_mems, i).copied().unwrap_or(0);
                let reused = self.mems.iter().position(|b| b.at == value);
                Arg { value, target: reused.map(|k| (false, k, 0)) }
            }
            Dev::Device(i) => plain(pick(&self.devices, i).copied().unwrap_or(0)),
            Dev::Cmd => plain(self.cmd.unwrap_or(0)),
            Dev::Forged(i) => plain(pick(&self.buffers, i).map_or(GARBAGE[4] as usize, |b| b.at + (1 << 30))),
            Dev::Garbage(k) => plain(GARBAGE[k as usize % GARBAGE.len()] as usize),
            Dev::Null => plain(0),
        }
    }

    /// Whether `len` bytes at `offset` from `arg` are a valid device range.
    fn expect_range(&self, d: Dev, arg: &Arg, offset: usize, len: usize) -> Expect {
        match (d, arg.target) {
            (_, Some((true, k, _))) => {
                let fits = offset.checked_add(len).is_some_and(|end| end <= self.buffers[k].size);
                if fits { Expect::Ok } else { Expect::Fail }
            }
            (_, Some((false, k, off))) => {
                let size = self.mems[k].size;
                match off.checked_add(offset).map(|start| (start, start.checked_add(len))) {
                    Some((start, Some(end))) if end <= size && (start < size || start == 0) => Expect::Ok,
                    // Blocks are whole pages (more when a freed range is reused).
                    Some((_, Some(end))) if end < 1 << 32 => Expect::Either,
                    _ => Expect::Fail,
                }
            }
            (Dev::FreedMem(_) | Dev::Mem(..) | Dev::Buffer(_) | Dev::FreedBuffer(_), None) if arg.value != 0 => {
                // A freed VTAMemAlloc address may be live again (the host reuses addresses).
                if matches!(d, Dev::FreedMem(_)) { Expect::Either } else { Expect::Fail }
            }
            _ => Expect::Fail,
        }
    }

    /// The known contents of `len` bytes at `offset` from the block `arg` addresses.
    fn contents(&mut self, arg: &Arg, offset: usize, len: usize) -> Option<&mut [u8]> {
        let (buffer, k, off) = arg.target?;
        let block = if buffer { &mut self.buffers[k] } else { &mut self.mems[k] };
        let start = off.checked_add(offset)?;
        block.contents.as_mut()?.get_mut(start..start.checked_add(len)?)
    }

    /// Records a successful write of `data` at `offset` from `arg`. Past a `VTAMemAlloc`
    /// block's requested size, the address may be its page slack or any other block.
    fn written(&mut self, arg: &Arg, offset: usize, data: &[u8]) {
        match self.contents(arg, offset, data.len()) {
            Some(c) => c.copy_from_slice(data),
            None => self.forget_contents(),
        }
    }

    /// Streams may write any device memory.
    fn forget_contents(&mut self) {
        for b in self.buffers.iter_mut().chain(&mut self.mems) {
            b.contents = None;
        }
    }

    /// A command handle argument and whether it is the live one. `Live` asks for the handle
    /// (creating the queue), as TVM's kernels do before each use.
    fn cmd(&mut self, c: Cmd) -> (usize, bool) {
        match c {
            Cmd::Live => {
                let h = VTATLSCommandHandle() as usize;
                self.cmd = Some(h);
                (h, h != 0)
            }
            Cmd::Stale(i) => (pick(&self.stale_cmds, i).copied().unwrap_or(0), false),
            Cmd::Null => (0, false),
            Cmd::Garbage(k) => (GARBAGE[k as usize % GARBAGE.len()] as usize, false),
            Cmd::Buffer(i) => (pick(&self.buffers, i).map_or(0, |b| b.at), false),
        }
    }

    /// A queue operation with a command handle: must fail if the queue is stopped or the handle
    /// bad; may fail otherwise (and then stops the queue).
    fn queue_op(&mut self, valid_cmd: bool, valid_args: bool, run: impl FnOnce()) -> Result<bool, String> {
        let expect = if self.stopped || !valid_cmd || !valid_args { Expect::Fail } else { Expect::Either };
        let failed = failed(run);
        check(expect, failed, "queue operation")?;
        self.stopped |= failed;
        Ok(failed)
    }

    fn shutdown(&mut self) {
        self.stale_cmds.extend(self.cmd.take());
        self.stopped = false;
        self.store_queued = false;
    }

    /// The host address of a live buffer handle (creating the command queue if needed).
    fn cpu(&mut self, handle: usize) -> usize {
        let cmd = VTATLSCommandHandle();
        self.cmd = Some(cmd as usize);
        VTABufferCPUPtr(cmd, handle as *mut c_void) as usize
    }

    fn alloc(&mut self, buffer: bool, size: Size) -> Result<(), String> {
        let n = size.get();
        let at = if buffer { VTABufferAlloc(n) } else { VTAMemAlloc(n, 1) } as usize;
        match size {
            Size::Huge(_) => check(Expect::Fail, at == 0, "huge allocation")?,
            Size::Small(_) => check(Expect::Ok, at == 0, "allocation")?,
        }
        if at == 0 {
            return Ok(());
        }
        let host = if buffer { self.cpu(at) } else { at };
        if host == 0 {
            return Err(format!("no host address for the new buffer: {:?}", last_error()));
        }
        let new = host..host + n.max(1);
        for b in self.buffers.iter().chain(&self.mems) {
            let old = b.host..b.host + b.size.max(1);
            if new.start < old.end && old.start < new.end {
                return Err(format!("new block {host:#x}+{n} overlaps {:#x}+{}", b.host, b.size));
            }
        }
        let mut block = Block { at, host, size: n, contents: None };
        block.contents = Some(read(buffer, &block)?);
        if buffer {
            self.buffers.push(block)
        } else {
            self.mems.push(block)
        }
        Ok(())
    }

    fn check_contents(&self) -> Result<(), String> {
        let blocks = self.buffers.iter().map(|b| (true, b)).chain(self.mems.iter().map(|b| (false, b)));
        for (k, (buffer, b)) in blocks.enumerate() {
            let got = read(buffer, b)?;
            if b.contents.as_ref().is_some_and(|want| *want != got) {
                return Err(format!("block {k} changed"));
            }
        }
        Ok(())
    }
}

/// The contents of a block the model holds live, read through the library's checked copies (so
/// a model mistake is a failure, not a read of freed memory).
fn read(buffer: bool, b: &Block) -> Result<Vec<u8>, String> {
    let mut bytes = vec![0u8; b.size];
    let failed = failed(|| {
        let dst = bytes.as_mut_ptr().cast();
        // SAFETY: a host buffer of `b.size` bytes.
        unsafe {
            if buffer {
                VTABufferCopy(b.at as *const c_void, 0, dst, 0, b.size, 2)
            } else {
                VTAMemCopyToHost(dst, b.at as *const c_void, b.size)
            }
        }
    });
    if failed { Err(format!("block at {:#x} unreadable: {:?}", b.at, last_error())) } else { Ok(bytes) }
}

fn last_error() -> Option<String> {
    let e = heron_vta_last_error();
    // SAFETY: NULL or a NUL-terminated message valid until the next call.
    (!e.is_null()).then(|| unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned())
}

/// Runs `f` and tells whether it reported an error; an internal error (a caught panic) is a bug.
fn failed(f: impl FnOnce()) -> bool {
    heron_vta_clear_error();
    f();
    match last_error() {
        Some(e) if e.contains("internal error") => panic!("caught a panic: {e}"),
        e => e.is_some(),
    }
}

/// Buffer handles are not device addresses for the driver API.
fn driver_expect(expect: Expect, arg: &Arg) -> Expect {
    if matches!(arg.target, Some((true, ..))) { Expect::Fail } else { expect }
}

fn check(expect: Expect, failed: bool, what: &str) -> Result<(), String> {
    match (expect, failed) {
        (Expect::Ok, true) => Err(format!("{what} failed: {}", last_error().unwrap_or_default())),
        (Expect::Fail, false) => Err(format!("{what} succeeded where it must fail")),
        _ => Ok(()),
    }
}

/// The kernel the `finit` callback records.
static KERNEL: Mutex<Option<Kernel>> = Mutex::new(None);
/// Whether the callback shut the runtime down.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn finit(_signature: *mut c_void) -> c_int {
    let Some(k) = KERNEL.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return 0 };
    for l in &k.loops {
        VTAUopLoopBegin(l[0], l[1], l[2], l[3]);
    }
    for &(mode, reset, [dst, src, wgt], opcode, use_imm, imm) in &k.uops {
        VTAUopPush(mode, reset, dst, src, wgt, opcode, use_imm, imm);
    }
    if k.close_loops {
        for _ in &k.loops {
            VTAUopLoopEnd();
        }
    }
    if k.nested {
        let mut slot: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid slot; the nested push is refused.
        unsafe { VTAPushGEMMOp(&mut slot, Some(finit), std::ptr::null_mut(), 0) };
    }
    if k.shutdown {
        VTARuntimeShutdown();
        SHUT_DOWN.store(true, Ordering::Relaxed);
    }
    k.status
}

fn apply(m: &mut Model, call: &Call) -> Result<(), String> {
    match call {
        Call::BufferAlloc(size) => m.alloc(true, *size)?,
        Call::MemAlloc(size) => m.alloc(false, *size)?,
        Call::BufferFree(d) => {
            let arg = m.arg(*d);
            let live = matches!(d, Dev::Buffer(_)) && arg.target.is_some();
            check(
                if live { Expect::Ok } else { Expect::Fail },
                failed(|| VTABufferFree(arg.value as *mut c_void)),
                "VTABufferFree",
            )?;
            if let (true, Some((_, k, _))) = (live, arg.target) {
                let b = m.buffers.swap_remove(k);
                m.freed_buffers.push(b.at);
            }
        }
        Call::MemFree(d) => {
            let arg = m.arg(*d);
            let expect = match arg.target {
                Some((false, _, 0)) => Expect::Ok,
                // Past a block's size may be another block's start.
                Some((false, k, off)) if off >= m.mems[k].size => Expect::Either,
                None if matches!(d, Dev::FreedMem(_)) => Expect::Either,
                _ => Expect::Fail,
            };
            let failed = failed(|| VTAMemFree(arg.value as *mut c_void));
            check(expect, failed, "VTAMemFree")?;
            if !failed && let Some(k) = m.mems.iter().position(|b| b.at == arg.value) {
                let b = m.mems.swap_remove(k);
                m.freed_mems.push(b.at);
            }
        }
        Call::FreeBufferMemory(i) => {
            let Some(host) = pick(&m.buffers, *i).map(|b| b.host) else { return Ok(()) };
            check(Expect::Fail, failed(|| VTAMemFree(host as *mut c_void)), "VTAMemFree of a buffer's memory")?;
        }
        Call::MemPhys(d) => {
            let arg = m.arg(*d);
            let expect = driver_expect(m.expect_range(*d, &arg, 0, 0), &arg);
            let phys = VTAMemGetPhyAddr(arg.value as *mut c_void);
            check(expect, phys == 0, "VTAMemGetPhyAddr")?;
        }
        Call::CopyIn { to, offset, size, fill } => {
            let (arg, offset, n) = (m.arg(*to), offset.get(), size.get());
            let expect = m.expect_range(*to, &arg, offset, n);
            let host = vec![*fill; n.min(1 << 17)];
            // SAFETY: host memory for every size the device side can accept (larger sizes are
            // refused before the host side is read).
            let failed =
                failed(|| unsafe { VTABufferCopy(host.as_ptr().cast(), 0, arg.value as *mut c_void, offset, n, 1) });
            check(expect, failed, "VTABufferCopy to the device")?;
            if !failed {
                m.written(&arg, offset, &host);
            }
        }
        Call::CopyOut { from, offset, size } => {
            let (arg, offset, n) = (m.arg(*from), offset.get(), size.get());
            let expect = m.expect_range(*from, &arg, offset, n);
            let mut host = vec![0u8; n.min(1 << 17)];
            // SAFETY: as above.
            let failed = failed(|| unsafe {
                VTABufferCopy(arg.value as *const c_void, offset, host.as_mut_ptr().cast(), 0, n, 2)
            });
            check(expect, failed, "VTABufferCopy from the device")?;
            if !failed
                && let Some(c) = m.contents(&arg, offset, n)
                && *c != host[..]
            {
                return Err("VTABufferCopy read something else than was written".into());
            }
        }
        Call::CopyDevice { from, from_offset, to, to_offset, size } => {
            let (src, dst, n) = (m.arg(*from), m.arg(*to), size.get());
            let (fo, to_off) = (from_offset.get(), to_offset.get());
            let expect = match (m.expect_range(*from, &src, fo, n), m.expect_range(*to, &dst, to_off, n)) {
                (Expect::Fail, _) | (_, Expect::Fail) => Expect::Fail,
                (Expect::Ok, Expect::Ok) => Expect::Ok,
                _ => Expect::Either,
            };
            // SAFETY: both sides are device memory (kind 3): nothing of the host is touched.
            let failed = failed(|| unsafe {
                VTABufferCopy(src.value as *const c_void, fo, dst.value as *mut c_void, to_off, n, 3)
            });
            check(expect, failed, "VTABufferCopy between device buffers")?;
            if !failed {
                match m.contents(&src, fo, n).map(|c| c.to_vec()) {
                    Some(data) => m.written(&dst, to_off, &data),
                    None => m.forget_contents(),
                }
            }
        }
        Call::CpuPtrWrite { cmd, buffer, at, fill } => {
            let ((c, valid_cmd), arg) = (m.cmd(*cmd), m.arg(*buffer));
            let ptr = VTABufferCPUPtr(c as *mut c_void, arg.value as *mut c_void) as usize;
            let want = match (buffer, arg.target) {
                _ if !valid_cmd => 0,
                (Dev::Buffer(_), Some((true, k, _))) => m.buffers[k].host,
                // Other pointers come back unchanged; NULL and every other handle give NULL.
                (Dev::Mem(..) | Dev::FreedMem(_), _) => arg.value,
                (Dev::Garbage(k), _) if GARBAGE[*k as usize % GARBAGE.len()] >> 48 != 0x5654 => arg.value,
                _ => 0,
            };
            if ptr != want {
                return Err(format!("VTABufferCPUPtr({c:#x}, {:#x}) = {ptr:#x}, want {want:#x}", arg.value));
            }
            if let (true, Some((true, k, _))) = (ptr != 0, arg.target) {
                let b = &mut m.buffers[k];
                if b.size > 0 {
                    let i = *at as usize % b.size;
                    // SAFETY: inside the live buffer, as a C caller may write.
                    unsafe { *(ptr as *mut u8).add(i) = *fill };
                    if let Some(c) = &mut b.contents {
                        c[i] = *fill;
                    }
                }
            }
        }
        Call::MemCopyIn { dst, size, fill } => {
            let (arg, n) = (m.arg(*dst), size.get());
            let expect = driver_expect(m.expect_range(*dst, &arg, 0, n), &arg);
            let host = vec![*fill; n.min(1 << 17)];
            // SAFETY: as for VTABufferCopy.
            let failed = failed(|| unsafe { VTAMemCopyFromHost(arg.value as *mut c_void, host.as_ptr().cast(), n) });
            check(if n == 0 { Expect::Either } else { expect }, failed, "VTAMemCopyFromHost")?;
            if !failed {
                m.written(&arg, 0, &host[..n.min(host.len())]);
            }
        }
        Call::MemCopyOut { src, size } => {
            let (arg, n) = (m.arg(*src), size.get());
            let expect = driver_expect(m.expect_range(*src, &arg, 0, n), &arg);
            let mut host = vec![0u8; n.min(1 << 17)];
            // SAFETY: as for VTABufferCopy.
            let failed =
                failed(|| unsafe { VTAMemCopyToHost(host.as_mut_ptr().cast(), arg.value as *const c_void, n) });
            check(if n == 0 { Expect::Either } else { expect }, failed, "VTAMemCopyToHost")?;
            if !failed
                && let Some(c) = m.contents(&arg, 0, n)
                && *c != host[..]
            {
                return Err("VTAMemCopyToHost read something else than was written".into());
            }
        }
        Call::Flush { ptr, size, wrong_phys } => {
            let arg = m.arg(*ptr);
            let phys = VTAMemGetPhyAddr(arg.value as *mut c_void) + *wrong_phys as u32;
            let expect = if *wrong_phys {
                Expect::Fail
            } else {
                driver_expect(m.expect_range(*ptr, &arg, 0, *size as usize), &arg)
            };
            check(expect, failed(|| VTAFlushCache(arg.value as *mut c_void, phys, *size as c_int)), "VTAFlushCache")?;
        }
        Call::DeviceAlloc => {
            let d = VTADeviceAlloc() as usize;
            check(Expect::Ok, d == 0, "VTADeviceAlloc")?;
            m.devices.push(d);
        }
        Call::DeviceFree(d) => {
            let arg = m.arg(*d);
            let live = matches!(d, Dev::Device(_)) && m.devices.contains(&arg.value);
            check(
                if live { Expect::Ok } else { Expect::Fail },
                failed(|| VTADeviceFree(arg.value as *mut c_void)),
                "VTADeviceFree",
            )?;
            m.devices.retain(|&x| !live || x != arg.value);
        }
        Call::DeviceRun { device, words, extra, wait } => {
            let arg = m.arg(*device);
            let live = matches!(device, Dev::Device(_)) && m.devices.contains(&arg.value);
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let stream = VTAMemAlloc(bytes.len().max(1), 1);
            // SAFETY: a fresh block of that many bytes, from host bytes.
            unsafe { VTAMemCopyFromHost(stream, bytes.as_ptr().cast(), bytes.len()) };
            let count = words.len() as u32 + extra;
            let code = VTADeviceRun(arg.value as *mut c_void, VTAMemGetPhyAddr(stream), count, *wait);
            VTAMemFree(stream);
            if !live && code != 2 {
                return Err(format!("VTADeviceRun on a bad device returned {code}"));
            }
            if code == 1 && !last_error().is_some_and(|e| e.contains("timed out")) {
                return Err("a timeout without its message".into());
            }
            if words.iter().any(|w| w & 7 == 1) {
                m.forget_contents();
            }
        }
        Call::CommandHandle => {
            let h = VTATLSCommandHandle() as usize;
            check(Expect::Ok, h == 0, "VTATLSCommandHandle")?;
            if m.cmd.is_some_and(|c| c != h) {
                return Err("the command handle changed without a shutdown".into());
            }
            m.cmd = Some(h);
        }
        Call::Shutdown => {
            VTARuntimeShutdown();
            m.shutdown();
        }
        Call::LoadDriver => {
            // SAFETY: NULL selects the built-in simulator.
            check(Expect::Ok, unsafe { heron_vta_load_driver(std::ptr::null()) } != 0, "heron_vta_load_driver")?;
            heron_vta_set_work_limit(WORK_LIMIT);
            m.freed_buffers.extend(m.buffers.drain(..).map(|b| b.at));
            m.freed_mems.extend(m.mems.drain(..).map(|b| b.at));
            m.devices.clear();
            m.shutdown();
        }
        Call::SetDebug(c, flags) => {
            let (c, valid) = m.cmd(*c);
            // No instruction dumps on stderr.
            m.queue_op(valid, true, || VTASetDebugMode(c as *mut c_void, flags & !6))?;
        }
        Call::Barrier { cmd, buffer, elem_bits, start, extent } => {
            let ((c, valid), arg) = (m.cmd(*cmd), m.arg(*buffer));
            let valid_args = m.expect_range(*buffer, &arg, 0, 0) != Expect::Fail;
            m.queue_op(valid, valid_args, || {
                VTAWriteBarrier(c as *mut c_void, arg.value as *mut c_void, *elem_bits, *start, *extent)
            })?;
        }
        Call::Load { cmd, src, args: a } => {
            let ((c, valid), arg) = (m.cmd(*cmd), m.arg(*src));
            let valid_args = m.expect_range(*src, &arg, 0, 0) != Expect::Fail;
            m.queue_op(valid, valid_args, || {
                VTALoadBuffer2D(
                    c as *mut c_void,
                    arg.value as *mut c_void,
                    a[0],
                    a[1],
                    a[2],
                    a[3],
                    a[4],
                    a[5],
                    a[6],
                    a[7],
                    a[8],
                    a[9],
                )
            })?;
        }
        Call::Store { cmd, dst, args: a } => {
            let ((c, valid), arg) = (m.cmd(*cmd), m.arg(*dst));
            let valid_args = m.expect_range(*dst, &arg, 0, 0) != Expect::Fail;
            let failed = m.queue_op(valid, valid_args, || {
                VTAStoreBuffer2D(c as *mut c_void, a[0], a[1], arg.value as *mut c_void, a[2], a[3], a[4], a[5])
            })?;
            m.store_queued |= !failed;
        }
        Call::Push { other_mode, slot, kernel, signature } => {
            let gemm = kernel.uops.first().is_none_or(|u| u.0 != 1) != *other_mode;
            // The slot's index in `m.slots`, a new one holding `fresh` unless an existing one is chosen.
            let fresh = match slot {
                Slot::Fresh => Some(0),
                Slot::Existing(_) if m.slots.is_empty() => Some(0),
                Slot::Existing(_) | Slot::NullPointer => None,
                Slot::Garbage(k) => Some(GARBAGE[*k as usize % GARBAGE.len()] as usize),
                Slot::Buffer(i) => Some(pick(&m.buffers, *i).map_or(GARBAGE[1] as usize, |b| b.at)),
            };
            if let Some(value) = fresh {
                m.slots.push(value as *mut c_void);
            }
            let slot_ptr: *mut *mut c_void = match slot {
                Slot::NullPointer => std::ptr::null_mut(),
                Slot::Existing(i) if fresh.is_none() => {
                    let n = m.slots.len();
                    &mut m.slots[i % n]
                }
                _ => m.slots.last_mut().map_or(std::ptr::null_mut(), |p| p),
            };
            let bad_slot = slot_ptr.is_null() || matches!(slot, Slot::Garbage(_) | Slot::Buffer(_));
            *KERNEL.lock().unwrap_or_else(|p| p.into_inner()) = Some(kernel.clone());
            let (nbytes, mut sig) = *signature;
            let expect = if m.stopped || bad_slot { Expect::Fail } else { Expect::Either };
            SHUT_DOWN.store(false, Ordering::Relaxed);
            let mut status = 0;
            let failed = failed(|| {
                let sig: *mut c_void = if nbytes == 4 { (&mut sig as *mut i32).cast() } else { std::ptr::null_mut() };
                // SAFETY: the slot is NULL or ours; the signature is 4 readable bytes when nbytes is 4.
                status = unsafe {
                    if gemm {
                        VTAPushGEMMOp(slot_ptr, Some(finit), sig, nbytes)
                    } else {
                        VTAPushALUOp(slot_ptr, Some(finit), sig, nbytes)
                    }
                };
            });
            check(expect, failed, "VTAPush*Op")?;
            if failed != (status != 0) {
                return Err(format!("status {status} with error {:?}", last_error()));
            }
            if SHUT_DOWN.load(Ordering::Relaxed) {
                m.shutdown();
            }
            m.stopped |= failed;
            if m.cmd.is_none() && !failed {
                m.cmd = Some(VTATLSCommandHandle() as usize);
            }
        }
        Call::UopPushOutside => {
            check(Expect::Fail, failed(|| VTAUopPush(0, 0, 0, 0, 0, 0, 0, 0)), "VTAUopPush outside a kernel")?;
            m.stopped = true;
        }
        Call::Dep { cmd, push, from, to } => {
            let (c, valid) = m.cmd(*cmd);
            let mut status = 0;
            let failed = m.queue_op(valid, true, || {
                status = if *push {
                    VTADepPush(c as *mut c_void, *from, *to)
                } else {
                    VTADepPop(c as *mut c_void, *from, *to)
                };
            })?;
            if failed != (status != 0) {
                return Err(format!("VTADep* returned {status} with error {:?}", last_error()));
            }
        }
        Call::Sync { cmd, wait } => {
            let (c, valid) = m.cmd(*cmd);
            m.queue_op(valid, true, || VTASynchronize(c as *mut c_void, *wait))?;
            if valid && m.store_queued {
                m.forget_contents();
            }
            m.store_queued &= !valid;
        }
        Call::WorkLimit(n) => heron_vta_set_work_limit(*n),
        Call::Profiler => {
            let json = heron_vta_profiler_status();
            // SAFETY: a NUL-terminated string valid until the next call.
            let json = unsafe { CStr::from_ptr(json) }.to_string_lossy().into_owned();
            if !json.starts_with("{\"inp_load_nbytes\": ") {
                return Err(format!("profiler status {json}"));
            }
        }
    }
    if m.buffers.len() + m.mems.len() > 48 {
        // Keep the model small: free the oldest blocks.
        for b in m.buffers.drain(..8) {
            VTABufferFree(b.at as *mut c_void);
            m.freed_buffers.push(b.at);
        }
    }
    Ok(())
}

fn run_case(calls: &[Call]) -> Result<(), String> {
    // A fresh driver and queue per case, with a few blocks and a device to work on.
    // SAFETY: NULL selects the built-in simulator.
    unsafe { heron_vta_load_driver(std::ptr::null()) };
    heron_vta_set_work_limit(WORK_LIMIT);
    VTARuntimeShutdown();
    let mut m = Model::default();
    let prelude = [
        Call::CommandHandle,
        Call::BufferAlloc(Size::Small(64)),
        Call::BufferAlloc(Size::Small(4096)),
        Call::BufferAlloc(Size::Small(3000)),
        Call::MemAlloc(Size::Small(100)),
        Call::MemAlloc(Size::Small(8192)),
        Call::DeviceAlloc,
    ];
    for call in &prelude {
        apply(&mut m, call).map_err(|e| format!("prelude {call:?}: {e}"))?;
    }
    for (k, call) in calls.iter().enumerate() {
        apply(&mut m, call).map_err(|e| format!("call {k} {call:?}: {e}"))?;
        if k % 8 == 7 || k + 1 == calls.len() {
            m.check_contents().map_err(|e| format!("after call {k} {call:?}: {e}"))?;
        }
    }
    Ok(())
}

#[test]
fn random_c_api_call_sequences_fail_cleanly() {
    let mut runner = TestRunner::new(fuzz_config(1000));
    let result =
        runner.run(&proptest::collection::vec(call(), 1..60), |calls| run_case(&calls).map_err(TestCaseError::fail));
    VTARuntimeShutdown();
    // SAFETY: NULL selects the built-in simulator.
    unsafe { heron_vta_load_driver(std::ptr::null()) };
    heron_vta_set_work_limit(heron_vta::driver::DEFAULT_WORK_LIMIT);
    if let Err(e) = result {
        panic!("{e}");
    }
}
