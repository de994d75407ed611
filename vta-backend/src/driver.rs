//! The device-driver layer, in the style of a HAL: a [`Driver`] owns devices and DRAM
//! allocations (host address + physical address), copies between host and device memory and
//! runs instruction streams. [`SimDriver`] is the functional simulator; [`DynamicDriver`] loads
//! any shared library exporting VTA's driver C API (a board's driver, another simulator), so
//! it can replace ours without recompiling (`HERON_VTA_DRIVER=/path/to/driver.so`).

use std::collections::HashMap;

use crate::VtaError;
use crate::isa::Isa;
use crate::memory::{DramBlock, SimMemory};
use crate::sim::{Profile, SimDevice};

/// The work limit drivers start with, in cycles (the unit is described in [`crate::sim`]):
/// about 20 s of simulated GEMM, 480 times what ResNet-18's C2 layer needs as one stream.
pub const DEFAULT_WORK_LIMIT: u64 = 1 << 28;

/// The cycle limit of one run: `wait_cycles` (0: none from the caller) and the driver's work
/// limit, whichever is smaller; `None` when neither limits it.
pub fn run_limit(wait_cycles: u32, work_limit: Option<u64>) -> Option<u64> {
    (wait_cycles != 0).then_some(wait_cycles as u64).into_iter().chain(work_limit).min()
}

/// Live simulated devices at most: each holds its SRAMs (about 450 KiB by default), and VTA
/// boards have one.
pub const MAX_SIM_DEVICES: usize = 64;

/// A device handle, as the driver hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId(pub usize);

/// What the runtime needs from a VTA driver (VTA's `driver.h`).
pub trait Driver: Send {
    fn name(&self) -> String;
    fn device_alloc(&mut self) -> Result<DeviceId, VtaError>;
    fn device_free(&mut self, device: DeviceId) -> Result<(), VtaError>;
    /// Runs `count` instructions at physical address `insn_phys` to completion, within
    /// [`run_limit`]`(wait_cycles, work limit)` cycles.
    fn device_run(&mut self, device: DeviceId, insn_phys: u64, count: u32, wait_cycles: u32) -> Result<(), VtaError>;
    /// Caps the cycles of every run, whatever `wait_cycles` asks (`None`: only `wait_cycles`
    /// does); drivers start with [`DEFAULT_WORK_LIMIT`].
    fn set_work_limit(&mut self, limit: Option<u64>);
    /// DRAM the device can read: host address and physical address.
    fn mem_alloc(&mut self, size: usize, cached: bool) -> Result<DramBlock, VtaError>;
    fn mem_free(&mut self, virt: usize) -> Result<(), VtaError>;
    /// Physical address of `[virt, virt + len)` when it lies inside one live allocation
    /// (interior pointers allowed).
    fn phys_range(&self, virt: usize, len: usize) -> Result<u64, VtaError>;
    /// Physical address of a host address inside a live allocation.
    fn phys_addr(&self, virt: usize) -> Option<u64> {
        self.phys_range(virt, 0).ok()
    }
    /// Copies host bytes into device memory at host address `virt` (checked against the
    /// allocation holding it).
    fn copy_from_host(&mut self, virt: usize, src: &[u8]) -> Result<(), VtaError>;
    /// Copies device memory at host address `virt` into `dst` (checked likewise).
    fn copy_to_host(&self, dst: &mut [u8], virt: usize) -> Result<(), VtaError>;
    /// Cache maintenance of a range inside a live allocation (others are ignored).
    fn flush_cache(&mut self, virt: usize, phys: u64, size: usize);
    fn invalidate_cache(&mut self, virt: usize, phys: u64, size: usize);
    /// Simulator profiling counters, for drivers that keep them.
    fn profile(&self) -> Option<Profile> {
        None
    }
    fn clear_profile(&mut self) {}
    /// Simulated cycles of the last successful run, for drivers that count them.
    fn last_run_cycles(&self) -> Option<u64> {
        None
    }
    /// Simulator debug mode (bit 0: skip execution, counters still advance).
    fn set_sim_debug(&mut self, _flags: u32) {}
}

/// The functional simulator as a driver: devices share one DRAM and one set of counters.
#[derive(Debug)]
pub struct SimDriver {
    isa: Isa,
    memory: SimMemory,
    /// Live devices by id (ids are never reused).
    devices: HashMap<usize, SimDevice>,
    next_device: usize,
    profile: Profile,
    skip_exec: bool,
    work_limit: Option<u64>,
    last_cycles: u64,
}

impl SimDriver {
    pub fn new(isa: Isa) -> SimDriver {
        SimDriver {
            isa,
            memory: SimMemory::default(),
            devices: HashMap::new(),
            next_device: 0,
            profile: Profile::default(),
            skip_exec: false,
            work_limit: Some(DEFAULT_WORK_LIMIT),
            last_cycles: 0,
        }
    }

    /// Cycles the last successful run spent.
    pub fn last_run_cycles(&self) -> u64 {
        self.last_cycles
    }

    pub fn memory(&self) -> &SimMemory {
        &self.memory
    }

    pub fn device(&self, id: DeviceId) -> Option<&SimDevice> {
        self.devices.get(&id.0)
    }
}

impl Default for SimDriver {
    fn default() -> Self {
        SimDriver::new(Isa::new(crate::HwConfig::default()).expect("the default configuration is valid"))
    }
}

impl Driver for SimDriver {
    fn name(&self) -> String {
        "heron functional simulator".into()
    }

    fn device_alloc(&mut self) -> Result<DeviceId, VtaError> {
        if self.devices.len() == MAX_SIM_DEVICES {
            return Err(VtaError::Driver(format!("{MAX_SIM_DEVICES} simulated devices are live already")));
        }
        let id = self.next_device;
        self.next_device += 1;
        self.devices.insert(id, SimDevice::new(self.isa.clone()));
        Ok(DeviceId(id))
    }

    fn device_free(&mut self, device: DeviceId) -> Result<(), VtaError> {
        self.devices.remove(&device.0).map(|_| ()).ok_or(VtaError::UnknownDevice)
    }

    fn device_run(&mut self, device: DeviceId, insn_phys: u64, count: u32, wait_cycles: u32) -> Result<(), VtaError> {
        let dev = self.devices.get_mut(&device.0).ok_or(VtaError::UnknownDevice)?;
        dev.skip_exec = self.skip_exec;
        let limit = run_limit(wait_cycles, self.work_limit).unwrap_or(u64::MAX);
        self.last_cycles = dev.run(&mut self.memory, &mut self.profile, insn_phys, count, limit)?;
        Ok(())
    }

    fn set_work_limit(&mut self, limit: Option<u64>) {
        self.work_limit = limit;
    }

    fn last_run_cycles(&self) -> Option<u64> {
        Some(self.last_cycles)
    }

    fn mem_alloc(&mut self, size: usize, _cached: bool) -> Result<DramBlock, VtaError> {
        self.memory.alloc(size)
    }

    fn mem_free(&mut self, virt: usize) -> Result<(), VtaError> {
        self.memory.free(virt)
    }

    fn phys_range(&self, virt: usize, len: usize) -> Result<u64, VtaError> {
        self.memory.phys_range(virt, len)
    }

    fn copy_from_host(&mut self, virt: usize, src: &[u8]) -> Result<(), VtaError> {
        let phys = self.memory.phys_range(virt, src.len())?;
        self.memory.write(phys, src)
    }

    fn copy_to_host(&self, dst: &mut [u8], virt: usize) -> Result<(), VtaError> {
        let phys = self.memory.phys_range(virt, dst.len())?;
        dst.copy_from_slice(self.memory.read(phys, dst.len())?);
        Ok(())
    }

    // Coherent memory: nothing to flush or invalidate.
    fn flush_cache(&mut self, _virt: usize, _phys: u64, _size: usize) {}

    fn invalidate_cache(&mut self, _virt: usize, _phys: u64, _size: usize) {}

    fn profile(&self) -> Option<Profile> {
        Some(self.profile)
    }

    fn clear_profile(&mut self) {
        self.profile = Profile::default();
    }

    fn set_sim_debug(&mut self, flags: u32) {
        self.skip_exec = flags & 1 != 0;
    }
}

pub use dynamic::DynamicDriver;

/// Drivers in other shared libraries, reached through VTA's driver C API. The only unsafe code
/// of this module: calling foreign functions with the C signatures of `driver.h`.
#[allow(unsafe_code)]
mod dynamic {
    use std::collections::BTreeMap;
    use std::ffi::c_void;

    use super::{DEFAULT_WORK_LIMIT, DeviceId, Driver, run_limit};
    use crate::VtaError;
    use crate::memory::DramBlock;

    type DeviceAlloc = unsafe extern "C" fn() -> *mut c_void;
    type DeviceFree = unsafe extern "C" fn(*mut c_void);
    type DeviceRun = unsafe extern "C" fn(*mut c_void, u32, u32, u32) -> i32;
    type MemAlloc = unsafe extern "C" fn(usize, i32) -> *mut c_void;
    type MemFree = unsafe extern "C" fn(*mut c_void);
    type GetPhyAddr = unsafe extern "C" fn(*mut c_void) -> u32;
    type Copy = unsafe extern "C" fn(*mut c_void, *const c_void, usize);
    type Cache = unsafe extern "C" fn(*mut c_void, u32, i32);

    /// A driver loaded from a shared library exporting `VTADeviceAlloc`, `VTAMemAlloc`, ....
    pub struct DynamicDriver {
        path: String,
        device_alloc: DeviceAlloc,
        device_free: DeviceFree,
        device_run: DeviceRun,
        mem_alloc: MemAlloc,
        mem_free: MemFree,
        phy_addr: GetPhyAddr,
        copy_from_host: Copy,
        copy_to_host: Copy,
        flush: Cache,
        invalidate: Cache,
        devices: Vec<Option<usize>>,
        /// Live allocations (host address -> size): the driver API cannot say how large a block
        /// is, so copies and frees are checked here before the driver sees them.
        allocations: BTreeMap<usize, usize>,
        work_limit: Option<u64>,
        // Keeps the function pointers valid; declared last so it is dropped last.
        _library: libloading::Library,
    }

    // SAFETY: the driver API is called only through `&mut self` (or `&self` for pure lookups)
    // while the global runtime lock is held, so calls never overlap.
    unsafe impl Send for DynamicDriver {}

    impl std::fmt::Debug for DynamicDriver {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("DynamicDriver").field("path", &self.path).finish()
        }
    }

    impl DynamicDriver {
        /// Loads the driver library at `path` and resolves every function of the driver API.
        pub fn load(path: &str) -> Result<DynamicDriver, VtaError> {
            let fail = |e: libloading::Error| VtaError::Driver(format!("{path}: {e}"));
            // SAFETY: loading a driver library runs its initialisers; the user chose it.
            let library = unsafe { libloading::Library::new(path) }.map_err(fail)?;
            // SAFETY: each symbol is looked up with the C signature driver.h gives it.
            unsafe {
                Ok(DynamicDriver {
                    path: path.to_string(),
                    device_alloc: *library.get(b"VTADeviceAlloc").map_err(fail)?,
                    device_free: *library.get(b"VTADeviceFree").map_err(fail)?,
                    device_run: *library.get(b"VTADeviceRun").map_err(fail)?,
                    mem_alloc: *library.get(b"VTAMemAlloc").map_err(fail)?,
                    mem_free: *library.get(b"VTAMemFree").map_err(fail)?,
                    phy_addr: *library.get(b"VTAMemGetPhyAddr").map_err(fail)?,
                    copy_from_host: *library.get(b"VTAMemCopyFromHost").map_err(fail)?,
                    copy_to_host: *library.get(b"VTAMemCopyToHost").map_err(fail)?,
                    flush: *library.get(b"VTAFlushCache").map_err(fail)?,
                    invalidate: *library.get(b"VTAInvalidateCache").map_err(fail)?,
                    devices: Vec::new(),
                    allocations: BTreeMap::new(),
                    work_limit: Some(DEFAULT_WORK_LIMIT),
                    _library: library,
                })
            }
        }

        fn handle(&self, device: DeviceId) -> Result<*mut c_void, VtaError> {
            self.devices.get(device.0).copied().flatten().map(|h| h as *mut c_void).ok_or(VtaError::UnknownDevice)
        }

        /// The C arguments of a cache operation on a range inside a live allocation.
        fn cache_range(&self, virt: usize, phys: u64, size: usize) -> Option<(u32, i32)> {
            self.check(virt, size).ok()?;
            Some((u32::try_from(phys).ok()?, i32::try_from(size).ok()?))
        }

        /// Checks that `[virt, virt + len)` lies inside one live allocation.
        fn check(&self, virt: usize, len: usize) -> Result<(), VtaError> {
            let (&start, &size) = self.allocations.range(..=virt).next_back().ok_or(VtaError::UnknownBuffer(virt))?;
            let offset = virt - start;
            if offset >= size.max(1) {
                return Err(VtaError::UnknownBuffer(virt));
            }
            match offset.checked_add(len) {
                Some(end) if end <= size => Ok(()),
                _ => Err(VtaError::Driver(format!("{len} bytes at {virt:#x} overrun a {size}-byte allocation"))),
            }
        }
    }

    impl Driver for DynamicDriver {
        fn name(&self) -> String {
            self.path.clone()
        }

        fn device_alloc(&mut self) -> Result<DeviceId, VtaError> {
            // SAFETY: driver.h: `VTADeviceHandle VTADeviceAlloc(void)`.
            let h = unsafe { (self.device_alloc)() };
            if h.is_null() {
                return Err(VtaError::Driver(format!("{}: VTADeviceAlloc returned NULL", self.path)));
            }
            self.devices.push(Some(h as usize));
            Ok(DeviceId(self.devices.len() - 1))
        }

        fn device_free(&mut self, device: DeviceId) -> Result<(), VtaError> {
            let h = self.handle(device)?;
            self.devices[device.0] = None;
            // SAFETY: `h` came from VTADeviceAlloc and is freed once.
            unsafe { (self.device_free)(h) };
            Ok(())
        }

        fn device_run(
            &mut self,
            device: DeviceId,
            insn_phys: u64,
            count: u32,
            wait_cycles: u32,
        ) -> Result<(), VtaError> {
            let h = self.handle(device)?;
            let phys = u32::try_from(insn_phys).map_err(|_| VtaError::Driver("address above 32 bits".into()))?;
            // The driver counts in its own unit; the work limit caps what it is asked to wait.
            let wait = run_limit(wait_cycles, self.work_limit).map_or(0, |l| u32::try_from(l).unwrap_or(u32::MAX));
            // SAFETY: a live device handle; the stream lives in driver memory.
            match unsafe { (self.device_run)(h, phys, count, wait) } {
                0 => Ok(()),
                1 => Err(VtaError::DriverTimeout { driver: self.path.clone(), wait }),
                code => Err(VtaError::Driver(format!("{}: VTADeviceRun returned {code}", self.path))),
            }
        }

        fn set_work_limit(&mut self, limit: Option<u64>) {
            self.work_limit = limit;
        }

        fn mem_alloc(&mut self, size: usize, cached: bool) -> Result<DramBlock, VtaError> {
            // SAFETY: driver.h: `void* VTAMemAlloc(size_t size, int cached)`.
            let virt = unsafe { (self.mem_alloc)(size, cached as i32) };
            if virt.is_null() {
                return Err(VtaError::OutOfMemory(size));
            }
            // SAFETY: `virt` was just returned by the driver.
            let phys = unsafe { (self.phy_addr)(virt) } as u64;
            self.allocations.insert(virt as usize, size);
            Ok(DramBlock { virt: virt as usize, phys, size })
        }

        fn mem_free(&mut self, virt: usize) -> Result<(), VtaError> {
            self.allocations.remove(&virt).ok_or(VtaError::UnknownBuffer(virt))?;
            // SAFETY: a live address VTAMemAlloc returned, freed once (removed above).
            unsafe { (self.mem_free)(virt as *mut c_void) };
            Ok(())
        }

        fn phys_range(&self, virt: usize, len: usize) -> Result<u64, VtaError> {
            self.check(virt, len)?;
            // SAFETY: `virt` lies inside a live allocation of this driver.
            match unsafe { (self.phy_addr)(virt as *mut c_void) } {
                0 => Err(VtaError::UnknownBuffer(virt)),
                phys => Ok(phys as u64),
            }
        }

        fn copy_from_host(&mut self, virt: usize, src: &[u8]) -> Result<(), VtaError> {
            self.check(virt, src.len())?;
            // SAFETY: `virt` is device memory of at least `src.len()` bytes (checked above).
            unsafe { (self.copy_from_host)(virt as *mut c_void, src.as_ptr().cast(), src.len()) };
            Ok(())
        }

        fn copy_to_host(&self, dst: &mut [u8], virt: usize) -> Result<(), VtaError> {
            self.check(virt, dst.len())?;
            // SAFETY: as above, in the other direction.
            unsafe { (self.copy_to_host)(dst.as_mut_ptr().cast(), virt as *const c_void, dst.len()) };
            Ok(())
        }

        fn flush_cache(&mut self, virt: usize, phys: u64, size: usize) {
            if let Some((phys, size)) = self.cache_range(virt, phys, size) {
                // SAFETY: a range inside a live allocation.
                unsafe { (self.flush)(virt as *mut c_void, phys, size) };
            }
        }

        fn invalidate_cache(&mut self, virt: usize, phys: u64, size: usize) {
            if let Some((phys, size)) = self.cache_range(virt, phys, size) {
                // SAFETY: as above.
                unsafe { (self.invalidate)(virt as *mut c_void, phys, size) };
            }
        }
    }
}
