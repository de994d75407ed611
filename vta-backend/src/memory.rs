//! The simulator's DRAM: page-granular blocks with physical addresses, allocated the way VTA's
//! simulator does (the block starting at page-table slot p has physical address (p + 1) * 4096,
//! so 0 is never valid; freed blocks are reused by requests of at most their size). Each block
//! is host memory whose address is the block's "virtual" address, as C callers see it; it stays
//! put until the block is freed. Sizes and addresses come from callers, so all arithmetic on them
//! is checked: an impossible request is an error, never a wrapped size or an alias.

use std::collections::BTreeMap;

use crate::VtaError;

pub const PAGE_BYTES: usize = 4096;
/// Physical addresses are 32-bit (`vta_phy_addr_t`): every block ends below this.
const PHYS_END: u64 = 1 << 32;

#[derive(Debug)]
struct Block {
    /// First page-table slot.
    slot: usize,
    pages: usize,
    /// The host memory: a page more than the block, so the block can start on a page boundary
    /// (C callers check pool alignment on the host address too).
    raw: Box<[u8]>,
    start: usize,
    len: usize,
}

impl Block {
    fn data(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }

    /// Offset of `[phys, phys + len)` in this block starting at `start`, if it lies inside.
    fn offset(&self, start: u64, phys: u64, len: usize) -> Option<usize> {
        let offset = usize::try_from(phys.checked_sub(start)?).ok()?;
        (offset.checked_add(len)? <= self.len).then_some(offset)
    }
}

/// All DRAM blocks of one driver.
#[derive(Debug, Default)]
pub struct SimMemory {
    /// Live blocks by physical address.
    blocks: BTreeMap<u64, Block>,
    /// Physical address of each live block by its host (virtual) address.
    by_virt: BTreeMap<usize, u64>,
    /// Freed (slot, pages) ranges, reusable.
    free: Vec<(usize, usize)>,
    next_slot: usize,
}

/// A DRAM allocation: host address and physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DramBlock {
    pub virt: usize,
    pub phys: u64,
    pub size: usize,
}

/// Physical address of page-table slot `slot`.
fn slot_phys(slot: usize) -> Option<u64> {
    u64::try_from(slot.checked_add(1)?.checked_mul(PAGE_BYTES)?).ok()
}

/// `len` zeroed bytes of host memory, or an error where `vec!` would abort the process. The
/// fallible reservation asks the allocator for the same size first; the block is then allocated
/// zeroed, which keeps untouched pages uncommitted (a 32 MiB buffer costs nothing until used,
/// where zero-filling the reservation would touch every page).
fn zeroed(len: usize) -> Result<Box<[u8]>, VtaError> {
    Vec::<u8>::new().try_reserve_exact(len).map_err(|_| VtaError::HostMemory(len))?;
    Ok(vec![0u8; len].into_boxed_slice())
}

impl SimMemory {
    /// Allocates `size` bytes (rounded up to whole pages, zeroed), physical addresses fitting
    /// 32 bits. A failed request changes nothing.
    pub fn alloc(&mut self, size: usize) -> Result<DramBlock, VtaError> {
        let oom = || VtaError::OutOfMemory(size);
        let pages = size.div_ceil(PAGE_BYTES).max(1);
        // The smallest freed range that is large enough, as the reference's free map does.
        let reuse = self.free.iter().enumerate().filter(|(_, f)| f.1 >= pages).min_by_key(|(_, f)| (f.1, f.0));
        let (reused, slot, pages) = match reuse {
            Some((k, &(slot, pages))) => (Some(k), slot, pages),
            None => {
                let end = self.next_slot.checked_add(pages).and_then(slot_phys).filter(|&end| end < PHYS_END);
                end.ok_or_else(oom)?;
                (None, self.next_slot, pages)
            }
        };
        let phys = slot_phys(slot).ok_or_else(oom)?;
        let len = pages.checked_mul(PAGE_BYTES).ok_or_else(oom)?;
        let raw = zeroed(len.checked_add(PAGE_BYTES).ok_or_else(oom)?)?;
        let start = (raw.as_ptr() as usize).next_multiple_of(PAGE_BYTES) - raw.as_ptr() as usize;
        match reused {
            Some(k) => {
                self.free.swap_remove(k);
            }
            None => self.next_slot += pages,
        }
        let block = Block { slot, pages, raw, start, len };
        let virt = block.data().as_ptr() as usize;
        self.blocks.insert(phys, block);
        self.by_virt.insert(virt, phys);
        Ok(DramBlock { virt, phys, size })
    }

    /// Frees the block starting at host address `virt`.
    pub fn free(&mut self, virt: usize) -> Result<(), VtaError> {
        let phys = self.by_virt.get(&virt).copied().ok_or(VtaError::UnknownBuffer(virt))?;
        let block = self.blocks.remove(&phys).ok_or(VtaError::UnknownBuffer(virt))?;
        self.by_virt.remove(&virt);
        self.free.push((block.slot, block.pages));
        Ok(())
    }

    /// Physical address of `[virt, virt + len)` when it lies inside one live block (interior
    /// pointers accepted).
    pub fn phys_range(&self, virt: usize, len: usize) -> Result<u64, VtaError> {
        let unknown = || VtaError::UnknownBuffer(virt);
        let (&start, &base) = self.by_virt.range(..=virt).next_back().ok_or_else(unknown)?;
        let block = self.blocks.get(&base).ok_or_else(unknown)?;
        let offset = virt - start;
        if offset >= block.len {
            return Err(unknown());
        }
        let phys = base + offset as u64;
        block.offset(base, phys, len).map(|_| phys).ok_or(VtaError::DramOutOfRange { phys, len })
    }

    /// Physical address of a host address inside a live block (interior pointers accepted).
    pub fn phys_of(&self, virt: usize) -> Option<u64> {
        self.phys_range(virt, 0).ok()
    }

    /// Host address of a physical address inside a live block.
    pub fn virt_of(&self, phys: u64) -> Option<usize> {
        let (&start, block) = self.blocks.range(..=phys).next_back()?;
        let offset = block.offset(start, phys, 0).filter(|&o| o < block.len)?;
        Some(block.data().as_ptr() as usize + offset)
    }

    /// The block holding `[phys, phys + len)` and the offset of `phys` in it.
    fn locate(&self, phys: u64, len: usize) -> Result<(u64, usize), VtaError> {
        let out = || VtaError::DramOutOfRange { phys, len };
        let (&start, block) = self.blocks.range(..=phys).next_back().ok_or_else(out)?;
        Ok((start, block.offset(start, phys, len).ok_or_else(out)?))
    }

    /// `len` bytes at physical address `phys`, which must lie inside one block.
    pub fn read(&self, phys: u64, len: usize) -> Result<&[u8], VtaError> {
        let (start, offset) = self.locate(phys, len)?;
        let data = self.blocks.get(&start).ok_or(VtaError::DramOutOfRange { phys, len })?.data();
        data.get(offset..offset + len).ok_or(VtaError::DramOutOfRange { phys, len })
    }

    pub fn write(&mut self, phys: u64, bytes: &[u8]) -> Result<(), VtaError> {
        let len = bytes.len();
        let (start, offset) = self.locate(phys, len)?;
        let out = VtaError::DramOutOfRange { phys, len };
        let block = self.blocks.get_mut(&start).ok_or(out.clone())?;
        block.data_mut().get_mut(offset..offset + len).ok_or(out)?.copy_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn physical_addresses_follow_the_reference_page_table() {
        let mut m = SimMemory::default();
        let uops = m.alloc(32 << 20).unwrap();
        let insns = m.alloc(32 << 20).unwrap();
        let user = m.alloc(100).unwrap();
        assert_eq!((uops.phys, insns.phys, user.phys), (0x1000, 0x200_1000, 0x400_1000));
        assert_eq!(m.phys_of(user.virt + 10), Some(0x400_100a));
        assert_eq!(m.virt_of(0x400_100a), Some(user.virt + 10));
        assert!(m.read(0x400_1000 + 4090, 10).is_err(), "a read past the block's pages");
        m.free(user.virt).unwrap();
        assert_eq!(m.alloc(10).unwrap().phys, 0x400_1000, "freed pages are reused");
        assert!(m.read(0, 1).is_err());
    }

    /// SIZE_MAX used to wrap the page arithmetic into a tiny block that later allocations
    /// aliased; huge lengths used to wrap `offset + len` and panic on slicing.
    #[test]
    fn huge_requests_fail_cleanly_and_never_alias() {
        let mut m = SimMemory::default();
        let first = m.alloc(4096).unwrap();
        for size in [usize::MAX, usize::MAX - 4095, 1 << 52, 1 << 40, 1 << 32, u32::MAX as usize] {
            assert_eq!(m.alloc(size), Err(VtaError::OutOfMemory(size)), "{size:#x}");
        }
        let next = m.alloc(4096).unwrap();
        assert_eq!(next.phys, first.phys + 4096, "failed requests reserve nothing");
        // One byte more than fits below 4 GiB of physical addresses (the next block would start
        // at 0x3000 and must end by 2^32 - 4096).
        let too_big = (PHYS_END - 0x3000 - 0x1000 + 1) as usize;
        assert_eq!(m.alloc(too_big), Err(VtaError::OutOfMemory(too_big)));
        for len in [usize::MAX, usize::MAX - 10, 1 << 63] {
            assert!(m.read(first.phys + 8, len).is_err());
            assert!(m.phys_range(first.virt + 8, len).is_err());
        }
        assert!(m.read(u64::MAX, 1).is_err() && m.virt_of(u64::MAX).is_none());
        assert_eq!(m.phys_range(first.virt, 4096), Ok(first.phys));
        assert!(m.phys_range(first.virt + 1, 4096).is_err());
        assert!(m.free(first.virt).is_ok() && m.free(first.virt).is_err(), "double free");
        assert!(m.phys_of(first.virt).is_none() && m.read(first.phys, 1).is_err());
    }
}
