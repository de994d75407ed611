//! The simulator's DRAM: page-granular blocks with physical addresses, allocated the way VTA's
//! simulator does (the block starting at page-table slot p has physical address (p + 1) * 4096,
//! so 0 is never valid; freed blocks are reused by requests of at most their size). Each block
//! is host memory whose address is the block's "virtual" address, as C callers see it.

use std::collections::BTreeMap;

use crate::VtaError;

pub const PAGE_BYTES: usize = 4096;

#[derive(Debug)]
struct Block {
    /// First page-table slot.
    slot: usize,
    pages: usize,
    data: Box<[u8]>,
}

impl Block {
    fn phys(&self) -> u64 {
        ((self.slot + 1) * PAGE_BYTES) as u64
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

impl SimMemory {
    /// Allocates `size` bytes (rounded up to whole pages, zeroed), physical addresses fitting
    /// 32 bits.
    pub fn alloc(&mut self, size: usize) -> Result<DramBlock, VtaError> {
        let pages = size.div_ceil(PAGE_BYTES).max(1);
        // The smallest freed range that is large enough, as the reference's free map does.
        let reuse = self.free.iter().enumerate().filter(|(_, f)| f.1 >= pages).min_by_key(|(_, f)| (f.1, f.0));
        let (slot, pages) = match reuse {
            Some((k, &range)) => {
                self.free.swap_remove(k);
                range
            }
            None => {
                let slot = self.next_slot;
                if (slot + pages + 1) * PAGE_BYTES > u32::MAX as usize {
                    return Err(VtaError::OutOfMemory(size));
                }
                self.next_slot += pages;
                (slot, pages)
            }
        };
        let data = vec![0u8; pages * PAGE_BYTES].into_boxed_slice();
        let block = Block { slot, pages, data };
        let (phys, virt) = (block.phys(), block.data.as_ptr() as usize);
        self.blocks.insert(phys, block);
        self.by_virt.insert(virt, phys);
        Ok(DramBlock { virt, phys, size })
    }

    /// Frees the block starting at host address `virt`.
    pub fn free(&mut self, virt: usize) -> Result<(), VtaError> {
        let phys = self.by_virt.remove(&virt).ok_or(VtaError::UnknownBuffer(virt))?;
        let block = self.blocks.remove(&phys).expect("indexed block");
        self.free.push((block.slot, block.pages));
        Ok(())
    }

    /// Physical address of a host address inside a live block (interior pointers accepted).
    pub fn phys_of(&self, virt: usize) -> Option<u64> {
        let (&start, &phys) = self.by_virt.range(..=virt).next_back()?;
        let block = &self.blocks[&phys];
        (virt < start + block.data.len()).then(|| phys + (virt - start) as u64)
    }

    /// Host address of a physical address inside a live block.
    pub fn virt_of(&self, phys: u64) -> Option<usize> {
        let (&start, block) = self.blocks.range(..=phys).next_back()?;
        (phys < start + block.data.len() as u64).then(|| block.data.as_ptr() as usize + (phys - start) as usize)
    }

    fn block_at(&self, phys: u64, len: usize) -> Result<(&Block, usize), VtaError> {
        let out = || VtaError::DramOutOfRange { phys, len };
        let (&start, block) = self.blocks.range(..=phys).next_back().ok_or_else(out)?;
        let offset = (phys - start) as usize;
        if offset + len > block.data.len() {
            return Err(out());
        }
        Ok((block, offset))
    }

    /// `len` bytes at physical address `phys`, which must lie inside one block.
    pub fn read(&self, phys: u64, len: usize) -> Result<&[u8], VtaError> {
        let (block, offset) = self.block_at(phys, len)?;
        Ok(&block.data[offset..offset + len])
    }

    pub fn write(&mut self, phys: u64, bytes: &[u8]) -> Result<(), VtaError> {
        let (_, offset) = self.block_at(phys, bytes.len())?;
        let (&start, _) = self.blocks.range(..=phys).next_back().expect("found above");
        let block = self.blocks.get_mut(&start).expect("found above");
        block.data[offset..offset + bytes.len()].copy_from_slice(bytes);
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
}
