//! Opaque handles of the C API (buffers, devices, command queues, uop kernel tables).
//!
//! A handle is a tagged value, not an address: the top 16 bits hold a tag no host address has
//! (it makes the value non-canonical on x86-64 with 4- or 5-level page tables, and outside the
//! user address range on AArch64), then 8 bits of kind, then a serial number that is never
//! reused. So any value a caller passes can be classified without dereferencing it: a live
//! handle of the expected kind, a freed one, one of another kind, one this library never issued,
//! NULL, or not a handle at all (a host pointer).

use std::collections::HashMap;

use crate::VtaError;

const TAG: u64 = 0x5654;
const TAG_SHIFT: u32 = 48;
const KIND_SHIFT: u32 = 40;
const SERIAL_MASK: u64 = (1 << KIND_SHIFT) - 1;

const _: () = assert!(usize::BITS == 64, "C handles are tagged 64-bit values");

/// What a handle names; part of its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Buffer = 1,
    Device = 2,
    Command = 3,
    Kernels = 4,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Buffer => "buffer",
            Kind::Device => "device",
            Kind::Command => "command queue",
            Kind::Kernels => "uop kernel",
        }
    }
}

/// Whether `value` has the shape of a handle (any kind, live or not): never a host pointer.
pub fn is_handle(value: usize) -> bool {
    value as u64 >> TAG_SHIFT == TAG
}

/// The live objects of one kind by serial number, and how many serials were issued.
#[derive(Debug)]
pub struct Table<T> {
    kind: Kind,
    live: HashMap<u64, T>,
    issued: u64,
}

impl<T> Table<T> {
    pub fn new(kind: Kind) -> Table<T> {
        Table { kind, live: HashMap::new(), issued: 0 }
    }

    /// Stores `value` under a new handle (2^40 serials: never exhausted in practice).
    pub fn insert(&mut self, value: T) -> usize {
        let serial = self.issued;
        self.issued += 1;
        self.live.insert(serial, value);
        self.handle_of(serial & SERIAL_MASK)
    }

    fn handle_of(&self, serial: u64) -> usize {
        ((TAG << TAG_SHIFT) | ((self.kind as u64) << KIND_SHIFT) | serial) as usize
    }

    /// The serial number in `handle` if it is a handle of this kind (live or not).
    fn serial(&self, handle: usize) -> Result<u64, VtaError> {
        let value = handle as u64;
        let problem = match () {
            _ if handle == 0 => "is NULL",
            _ if !is_handle(handle) => "was not issued by this library",
            _ if (value >> KIND_SHIFT) & 0xff != self.kind as u64 => "names another kind of object",
            _ => return Ok(value & SERIAL_MASK),
        };
        Err(VtaError::BadHandle { kind: self.kind.name(), handle, problem })
    }

    pub fn get(&self, handle: usize) -> Result<&T, VtaError> {
        let serial = self.serial(handle)?;
        self.live.get(&serial).ok_or_else(|| not_live(self.kind, self.issued, handle, serial))
    }

    pub fn get_mut(&mut self, handle: usize) -> Result<&mut T, VtaError> {
        let serial = self.serial(handle)?;
        let (kind, issued) = (self.kind, self.issued);
        self.live.get_mut(&serial).ok_or_else(|| not_live(kind, issued, handle, serial))
    }

    /// Frees `handle`; freeing it again is an error.
    pub fn remove(&mut self, handle: usize) -> Result<T, VtaError> {
        let serial = self.serial(handle)?;
        self.live.remove(&serial).ok_or_else(|| not_live(self.kind, self.issued, handle, serial))
    }

    /// Frees every handle (they all become "freed").
    pub fn clear(&mut self) {
        self.live.clear();
    }

    /// Some live handle, if any (the command queue table holds at most one).
    pub fn any_live(&self) -> Option<usize> {
        self.live.keys().next().map(|&serial| self.handle_of(serial))
    }

    /// How many handles were ever issued.
    pub fn issued(&self) -> u64 {
        self.issued
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.live.values()
    }
}

/// Why a well-formed handle with no live object is bad.
fn not_live(kind: Kind, issued: u64, handle: usize, serial: u64) -> VtaError {
    let problem = if serial < issued { "was freed" } else { "was not issued by this library" };
    VtaError::BadHandle { kind: kind.name(), handle, problem }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_classified_without_dereferencing() {
        let mut buffers = Table::new(Kind::Buffer);
        let mut devices = Table::<()>::new(Kind::Device);
        let a = buffers.insert("a");
        let b = buffers.insert("b");
        let d = devices.insert(());
        assert!(is_handle(a) && is_handle(d) && !is_handle(0) && !is_handle(&a as *const usize as usize));
        assert_eq!(buffers.get(a), Ok(&"a"));
        assert_eq!(buffers.remove(a), Ok("a"));
        let problem = |r: Result<&&str, VtaError>| match r {
            Err(VtaError::BadHandle { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        assert_eq!(problem(buffers.get(a)), "was freed");
        assert!(buffers.remove(a).is_err(), "double free");
        assert_eq!(problem(buffers.get(0)), "is NULL");
        assert_eq!(problem(buffers.get(d)), "names another kind of object");
        assert_eq!(problem(buffers.get(b + 100)), "was not issued by this library");
        assert_eq!(problem(buffers.get(0xdead_beef)), "was not issued by this library");
        assert_eq!(buffers.any_live(), Some(b));
        buffers.clear();
        assert_eq!(problem(buffers.get(b)), "was freed");
        assert_ne!(buffers.insert("c"), b, "serials are never reused");
    }
}
