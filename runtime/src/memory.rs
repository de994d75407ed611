//! Memory for pools and staging buffers: zeroed, aligned, allocated fallibly (a model asking for
//! more than the machine has is an error, never an abort), and optionally placed between
//! inaccessible guard pages so that any access outside a buffer faults at once.
//!
//! Guard pages work at page granularity, so a buffer can be flush against only one of its
//! guards: [`GuardPages::End`] places each buffer's end against the following guard page (an
//! overrun faults on its first byte), [`GuardPages::Start`] its start against the preceding one
//! (an underrun does). Running a test suite in both modes covers both directions, up to the
//! buffer's alignment.
#![allow(unsafe_code)]

use std::fmt;

/// Where buffers sit relative to guard pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GuardPages {
    /// Ordinary heap memory.
    #[default]
    Off,
    /// Each buffer ends where a guard page begins (as far as its alignment allows).
    End,
    /// Each buffer starts where a guard page ends.
    Start,
}

impl GuardPages {
    /// `off`, `end` or `start`.
    pub fn parse(s: &str) -> Option<GuardPages> {
        match s {
            "off" => Some(GuardPages::Off),
            "end" => Some(GuardPages::End),
            "start" => Some(GuardPages::Start),
            _ => None,
        }
    }

    /// The mode the environment asks for: `HERON_GUARD_PAGES=end|start` (tests run their
    /// engines in it); `Off` when unset.
    pub fn from_env() -> GuardPages {
        std::env::var("HERON_GUARD_PAGES").ok().and_then(|v| GuardPages::parse(&v)).unwrap_or_default()
    }
}

impl fmt::Display for GuardPages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GuardPages::Off => "off",
            GuardPages::End => "end",
            GuardPages::Start => "start",
        })
    }
}

/// The size of a transparent huge page on x86-64 Linux; blocks at least this large get their
/// own mapping.
const HUGE_PAGE: usize = 2 << 20;

/// A huge page's first touch that takes longer than this had the kernel compact memory to
/// find it (a normal one, zeroing 2 MiB, takes about a quarter of a millisecond).
const HUGE_PAGE_STALL: std::time::Duration = std::time::Duration::from_millis(1);

/// Asks Linux to back bytes `start..start + len` of `mapping` with huge pages where they come
/// cheap, and faults them in. Where `transparent_hugepage/defrag` is `madvise` (a common
/// default) and memory is fragmented, the fault of an advised huge page compacts memory first:
/// measured on a busy host, 5-13 ms per page, a 77 MB pool's filling a quarter of a second
/// instead of 9 ms. So the pages are touched here, one by one and timed, and after the first
/// stall (a touch over `stall`) the rest is advised back to small pages (about 1.4 µs a fault
/// per 4 KiB). Advice only: the memory is the same, zeroed, in whichever pages; and all of it
/// is resident from here on (a pool's pages are all used by every run). Returns the offset of
/// the page that stalled, if one did.
#[cfg(target_os = "linux")]
fn advise_huge_pages(
    mapping: &mut region::Allocation,
    start: usize,
    len: usize,
    stall: std::time::Duration,
) -> Option<usize> {
    // SAFETY: every range below lies inside the mapping (`start + len` <= its length), whose
    // pages this process owns and nothing else references yet; the advice changes no contents
    // and the touches write the zero the fresh page already holds.
    unsafe {
        let base = mapping.as_mut_ptr::<u8>().add(start);
        libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE);
        for offset in (0..len).step_by(HUGE_PAGE) {
            let touched = std::time::Instant::now();
            base.add(offset).write_volatile(0);
            if touched.elapsed() > stall {
                let rest = offset + HUGE_PAGE;
                if rest < len {
                    let advised = libc::madvise(base.add(rest).cast(), len - rest, libc::MADV_NOHUGEPAGE);
                    debug_assert_eq!(advised, 0, "the range is the mapping's own");
                }
                return Some(offset);
            }
        }
    }
    None
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_: &mut region::Allocation, _: usize, _: usize, _: std::time::Duration) -> Option<usize> {
    None
}

/// The memory could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("out of memory: cannot allocate {bytes} bytes for {what}{}", .detail.as_ref().map_or(String::new(), |d| format!(" ({d})")))]
pub struct AllocError {
    /// What the memory was for.
    pub what: String,
    /// How much was asked for.
    pub bytes: usize,
    /// The system's reason, when it gave one.
    pub detail: Option<String>,
}

enum Storage {
    Heap(Vec<u8>),
    /// A large buffer's own mapping, in huge pages where the system allows.
    Mapped(region::Allocation),
    /// The whole mapping: guard page, buffer pages, guard page.
    Guarded(region::Allocation),
}

/// A zeroed, aligned byte buffer.
pub struct Block {
    storage: Storage,
    start: usize,
    len: usize,
}

// SAFETY: a `Block` owns its memory exclusively (the guarded mapping is never shared or
// aliased), so moving it to, or reading it from, another thread is as safe as for a Vec<u8>.
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

impl fmt::Debug for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.storage {
            Storage::Heap(_) => "heap",
            Storage::Mapped(_) => "mapped",
            Storage::Guarded(_) => "guarded",
        };
        write!(f, "Block({kind}, {} bytes)", self.len)
    }
}

impl Block {
    /// `len` zero bytes aligned to `align` (a power of two), in `guard` mode; `what` names
    /// the buffer in errors.
    pub fn zeroed(len: usize, align: usize, guard: GuardPages, what: &str) -> Result<Block, AllocError> {
        let fail = |detail: Option<String>| AllocError { what: what.to_string(), bytes: len, detail };
        let align = align.max(1);
        match guard {
            GuardPages::Off if len >= HUGE_PAGE => {
                // Its own mapping, aligned to a huge page and marked for huge pages: a model's
                // constants and activations span many megabytes, which 4 KiB pages make cost
                // a fault per page to fill and a TLB miss per page to read (Linux maps huge
                // pages where `transparent_hugepage` is `always` or `madvise`).
                let total = len.checked_add(HUGE_PAGE.max(align)).ok_or_else(|| fail(None))?;
                let mut mapping =
                    region::alloc(total, region::Protection::READ_WRITE).map_err(|e| fail(Some(e.to_string())))?;
                let base = mapping.as_ptr::<u8>() as usize;
                let start = base.next_multiple_of(HUGE_PAGE.max(align)) - base;
                advise_huge_pages(&mut mapping, start, len, HUGE_PAGE_STALL);
                Ok(Block { storage: Storage::Mapped(mapping), start, len })
            }
            GuardPages::Off => {
                let total = len.checked_add(align).ok_or_else(|| fail(None))?;
                let mut storage = Vec::new();
                storage.try_reserve_exact(total).map_err(|e| fail(Some(e.to_string())))?;
                storage.resize(total, 0);
                let start = storage.as_ptr().align_offset(align);
                Ok(Block { storage: Storage::Heap(storage), start, len })
            }
            GuardPages::End | GuardPages::Start => {
                let page = region::page::size();
                let pages = len.div_ceil(page).max(1);
                let inner = pages.checked_mul(page).ok_or_else(|| fail(None))?;
                let total = inner.checked_add(2 * page).ok_or_else(|| fail(None))?;
                let mut mapping =
                    region::alloc(total, region::Protection::NONE).map_err(|e| fail(Some(e.to_string())))?;
                let base = mapping.as_mut_ptr::<u8>();
                // SAFETY: the range is the mapping's own middle pages, whole pages inside it.
                unsafe { region::protect(base.add(page), inner, region::Protection::READ_WRITE) }
                    .map_err(|e| fail(Some(e.to_string())))?;
                let start = match guard {
                    // The end flush against the trailing guard page, rounded down to `align`.
                    GuardPages::End => (page + inner - len) & !(align - 1),
                    _ => page,
                };
                Ok(Block { storage: Storage::Guarded(mapping), start, len })
            }
        }
    }

    /// `len` bytes `fill` writes into zeroed memory, as [`Block::zeroed`] places them; then
    /// read-only when guarded, so a stray write faults too.
    pub fn read_only_filled(
        len: usize,
        align: usize,
        guard: GuardPages,
        what: &str,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Block, AllocError> {
        let mut block = Block::zeroed(len, align, guard, what)?;
        fill(block.bytes_mut());
        if let Storage::Guarded(mapping) = &block.storage {
            let page = region::page::size();
            let base = mapping.as_ptr::<u8>();
            // SAFETY: the buffer's pages, inside the mapping (as made writable above).
            unsafe { region::protect(base.add(page), mapping.len() - 2 * page, region::Protection::READ) }
                .map_err(|e| AllocError { what: what.to_string(), bytes: len, detail: Some(e.to_string()) })?;
        }
        Ok(block)
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Heap(v) => &v[self.start..self.start + self.len],
            // SAFETY: `start..start + len` lies in the mapping's readable pages, which live as
            // long as `self`; the shared borrow of `self` rules out writers.
            Storage::Guarded(m) | Storage::Mapped(m) => unsafe {
                std::slice::from_raw_parts(m.as_ptr::<u8>().add(self.start), self.len)
            },
        }
    }

    /// Its bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.storage {
            Storage::Heap(v) => &mut v[self.start..self.start + self.len],
            // SAFETY: as in `bytes`, with the exclusive borrow of `self`; only blocks made by
            // `zeroed` (read-write pages) are ever borrowed mutably: `read_only_filled` blocks
            // are only shared once filled.
            Storage::Guarded(m) | Storage::Mapped(m) => unsafe {
                std::slice::from_raw_parts_mut(m.as_mut_ptr::<u8>().add(self.start), self.len)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_zeroed_aligned_and_sized() {
        for guard in [GuardPages::Off, GuardPages::End, GuardPages::Start] {
            // Past 2 MiB an unguarded block is its own huge-page mapping.
            for len in [0, 1, 63, 4096, 10_000, 3 << 20] {
                let mut b = Block::zeroed(len, 64, guard, "test").unwrap();
                assert_eq!(b.len(), len);
                assert!(b.bytes().iter().all(|&x| x == 0));
                assert_eq!(b.bytes().as_ptr() as usize % 64, 0, "{guard} {len}");
                b.bytes_mut().iter_mut().for_each(|x| *x = 7);
            }
        }
        let page = region::page::size();
        let b = Block::zeroed(4 * page, 64, GuardPages::End, "test").unwrap();
        let end = b.bytes().as_ptr() as usize + b.len();
        assert_eq!(end % page, 0, "an end-flush block ends at a page boundary");
        let b = Block::zeroed(100, 64, GuardPages::Start, "test").unwrap();
        assert_eq!(b.bytes().as_ptr() as usize % page, 0, "a start-flush block starts at a page boundary");
    }

    #[test]
    fn huge_pages_given_up_after_a_stall_leave_the_memory_zeroed_and_writable() {
        // Every touch counts as a stall: the first huge page is kept, the rest advised back.
        let len = 4 * HUGE_PAGE + 100;
        let mut mapping = region::alloc(len + HUGE_PAGE, region::Protection::READ_WRITE).unwrap();
        let base = mapping.as_ptr::<u8>() as usize;
        let start = base.next_multiple_of(HUGE_PAGE) - base;
        let stalled = advise_huge_pages(&mut mapping, start, len, std::time::Duration::ZERO);
        assert_eq!(stalled, cfg!(target_os = "linux").then_some(0), "the first touch counts as a stall");
        // SAFETY: `start..start + len` lies inside the mapping, which nothing else references.
        let bytes = unsafe { std::slice::from_raw_parts_mut(mapping.as_mut_ptr::<u8>().add(start), len) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes.fill(3);
        assert!(bytes.iter().all(|&b| b == 3));
    }

    #[test]
    fn read_only_blocks_hold_what_was_written() {
        for guard in [GuardPages::Off, GuardPages::End, GuardPages::Start] {
            for len in [5, 3 << 20] {
                let b = Block::read_only_filled(len, 64, guard, "test", |dst| dst[len - 1] = 9).unwrap();
                assert_eq!(b.bytes()[len - 1], 9);
                assert!(b.bytes()[..len - 1].iter().all(|&x| x == 0));
            }
        }
    }

    #[test]
    fn impossible_sizes_are_errors() {
        let e = Block::zeroed(usize::MAX - 10, 64, GuardPages::Off, "the pool").unwrap_err();
        assert!(e.to_string().contains("the pool"), "{e}");
        assert!(Block::zeroed(1 << 62, 64, GuardPages::Off, "x").is_err());
        assert!(Block::zeroed(1 << 62, 64, GuardPages::End, "x").is_err());
    }
}
