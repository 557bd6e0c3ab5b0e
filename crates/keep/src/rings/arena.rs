//! The arena: one sealed memfd shared by the I/O process and the keep,
//! holding the header, the rings and the data slots. Layout (all integers
//! little-endian, offsets in bytes; docs/format/keep-rings.md):
//!
//! ```text
//! 0       header page (4096)
//!   0       magic "CKKEEP01" (8)
//!   8       version u32 = 1
//!   12      queues u32            (1..=64)
//!   16      depth u32             (ring entries; power of two, 2..=64)
//!   20      slot_bytes u32        (multiple of 4096)
//!   24      workers u32           (set by the keep before it hands the arena over)
//!   64      shutdown u32          (non-zero: the keep is stopping; own cache line)
//!   128+64w doorbell of worker w: seq u32 @+0, sleeping u32 @+4 (w < 32),
//!           cpu u32 @+8 (1 + the CPU the worker is pinned to; 0: not pinned)
//! 4096+4096q  queue q (4096 each)
//!   0       sq_tail u32   written by the I/O side
//!   64      sq_head u32   written by the keep
//!   128     cq_tail u32   written by the keep; the I/O side sleeps on it
//!   192     cq_head u32   written by the I/O side
//!   256     waiting u32   the I/O side sleeps on cq_tail (keep must wake it)
//!   512     submission entries, 64 bytes each:
//!             tag u64, op u32, 0 u32, arg u64, offset u64, in_len u32, cap u32
//!   512+64*depth  completion entries, 16 bytes each: tag u64, status u32, out_len u32
//! data    = 4096 + 4096*queues: queue q's slot at data + q*slot_bytes
//! ```
//!
//! Seals `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` make the size
//! permanent, so neither process can make the other fault on a truncated
//! mapping.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;

use crate::Error;

/// "CKKEEP01".
pub const MAGIC: [u8; 8] = *b"CKKEEP01";
/// Layout version.
pub const VERSION: u32 = 1;
const PAGE: usize = 4096;
const QUEUE_BYTES: usize = 4096;
/// Most queues an arena may have.
pub const MAX_QUEUES: usize = 64;
/// Most workers whose doorbells fit the header.
pub const MAX_WORKERS: usize = 32;
/// Bytes of one submission entry.
pub const SQE_BYTES: usize = 64;
/// Bytes of one completion entry.
pub const CQE_BYTES: usize = 16;
const SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// Geometry of a new arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    /// Number of queue pairs (concurrent requests in flight).
    pub queues: usize,
    /// Bytes of each queue's data slot: the largest request.
    pub slot_bytes: usize,
    /// Entries per ring.
    pub depth: usize,
}

impl Default for ArenaConfig {
    /// 8 queues of 1 MiB (FUSE's largest request), rings of 8.
    fn default() -> Self {
        ArenaConfig {
            queues: 8,
            slot_bytes: 1 << 20,
            depth: 8,
        }
    }
}

/// A mapped arena.
pub struct Arena {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    cfg: ArenaConfig,
}

// SAFETY: the mapping is shared memory accessed through atomics (indices,
// flags) and through slices whose exclusive use is arranged by the rings;
// the pointer itself is just an address valid for the Arena's lifetime.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

fn total_len(cfg: &ArenaConfig) -> usize {
    PAGE + QUEUE_BYTES * cfg.queues + cfg.slot_bytes * cfg.queues
}

fn check(cfg: &ArenaConfig) -> Result<(), Error> {
    let ok = (1..=MAX_QUEUES).contains(&cfg.queues)
        && cfg.depth.is_power_of_two()
        && (2..=64).contains(&cfg.depth)
        && cfg.slot_bytes >= PAGE
        && cfg.slot_bytes.is_multiple_of(PAGE)
        && cfg.slot_bytes <= 64 << 20
        && 512 + cfg.depth * (SQE_BYTES + CQE_BYTES) <= QUEUE_BYTES;
    if ok {
        Ok(())
    } else {
        Err(Error::Layout(format!("unsupported geometry {cfg:?}")))
    }
}

fn map(fd: &OwnedFd, len: usize) -> Result<*mut u8, Error> {
    // SAFETY: mapping `len` bytes of a memfd at least that long; the
    // kernel chooses the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os("mmap of the arena"));
    }
    Ok(p as *mut u8)
}

impl Arena {
    /// Creates, sizes, seals and maps a new arena (the keep's side).
    pub fn create(cfg: ArenaConfig) -> Result<Arena, Error> {
        check(&cfg)?;
        let len = total_len(&cfg);
        // SAFETY: the name is a valid C string; flags are valid.
        let raw = unsafe {
            libc::memfd_create(
                c"cryptkeep-keep-arena".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(Error::last_os("memfd_create"));
        }
        // SAFETY: raw is a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::last_os("ftruncate of the arena"));
        }
        // SAFETY: adding seals to our own memfd.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
            return Err(Error::last_os("sealing the arena"));
        }
        let base = map(&fd, len)?;
        let a = Arena { fd, base, len, cfg };
        // SAFETY: the header page is inside the fresh (zeroed) mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), base, 8);
            (base.add(8) as *mut u32).write_unaligned(VERSION.to_le());
            (base.add(12) as *mut u32).write_unaligned((cfg.queues as u32).to_le());
            (base.add(16) as *mut u32).write_unaligned((cfg.depth as u32).to_le());
            (base.add(20) as *mut u32).write_unaligned((cfg.slot_bytes as u32).to_le());
        }
        Ok(a)
    }

    /// Maps an arena received from the keep (the I/O side), after checking
    /// its seals, size and header. Anything else is refused with
    /// [`Error::Layout`].
    pub fn from_fd(fd: OwnedFd) -> Result<Arena, Error> {
        // SAFETY: F_GET_SEALS on a descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0
            || seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
                != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
        {
            return Err(Error::Layout(
                "the arena is not sealed against shrinking and growing".into(),
            ));
        }
        // SAFETY: fstat on a descriptor we own into a valid out-pointer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(Error::last_os("fstat of the arena"));
        }
        let size = st.st_size as usize;
        if size < PAGE {
            return Err(Error::Layout(format!("the arena is only {size} bytes")));
        }
        let head = map(&fd, PAGE)?;
        // SAFETY: the first page is mapped.
        let (magic, version, q, d, s) = unsafe {
            let mut m = [0u8; 8];
            std::ptr::copy_nonoverlapping(head, m.as_mut_ptr(), 8);
            (
                m,
                u32::from_le((head.add(8) as *const u32).read_unaligned()),
                u32::from_le((head.add(12) as *const u32).read_unaligned()) as usize,
                u32::from_le((head.add(16) as *const u32).read_unaligned()) as usize,
                u32::from_le((head.add(20) as *const u32).read_unaligned()) as usize,
            )
        };
        // SAFETY: unmapping the probe mapping made above.
        unsafe { libc::munmap(head as *mut libc::c_void, PAGE) };
        if magic != MAGIC || version != VERSION {
            return Err(Error::Layout(format!(
                "not a cryptkeep arena of version {VERSION} (magic {magic:02x?}, version {version})"
            )));
        }
        let cfg = ArenaConfig {
            queues: q,
            depth: d,
            slot_bytes: s,
        };
        check(&cfg)?;
        let len = total_len(&cfg);
        if size != len {
            return Err(Error::Layout(format!(
                "the arena is {size} bytes, its header describes {len}"
            )));
        }
        let base = map(&fd, len)?;
        Ok(Arena { fd, base, len, cfg })
    }

    /// The memfd, to hand to the other process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The geometry.
    pub fn config(&self) -> ArenaConfig {
        self.cfg
    }

    /// A 32-bit word of shared state at byte `off` (4-byte aligned).
    pub(crate) fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.len && off.is_multiple_of(4));
        // SAFETY: off is inside the mapping and aligned; AtomicU32 has the
        // layout of u32, and the mapping lives as long as &self.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// Number of workers the keep serves with (0 until it serves).
    pub(crate) fn workers(&self) -> &AtomicU32 {
        self.word(24)
    }

    /// The shutdown flag.
    pub(crate) fn shutdown(&self) -> &AtomicU32 {
        self.word(64)
    }

    /// Worker `w`'s doorbell sequence word.
    pub(crate) fn doorbell_seq(&self, w: usize) -> &AtomicU32 {
        self.word(128 + 64 * (w % MAX_WORKERS))
    }

    /// Whether worker `w` sleeps on its doorbell.
    pub(crate) fn doorbell_sleeping(&self, w: usize) -> &AtomicU32 {
        self.word(128 + 64 * (w % MAX_WORKERS) + 4)
    }

    /// 1 + the CPU worker `w` is pinned to, or 0: set by the worker
    /// before the arena is handed over.
    pub(crate) fn worker_cpu(&self, w: usize) -> &AtomicU32 {
        self.word(128 + 64 * (w % MAX_WORKERS) + 8)
    }

    /// Byte offset of queue `q`'s control block.
    pub(crate) fn queue_off(&self, q: usize) -> usize {
        PAGE + QUEUE_BYTES * q
    }

    /// Pointer to submission entry `i` (masked) of queue `q`.
    pub(crate) fn sqe(&self, q: usize, i: u32) -> *mut u8 {
        let slot = i as usize & (self.cfg.depth - 1);
        // SAFETY: inside queue q's block (checked geometry).
        unsafe { self.base.add(self.queue_off(q) + 512 + slot * SQE_BYTES) }
    }

    /// Pointer to completion entry `i` (masked) of queue `q`.
    pub(crate) fn cqe(&self, q: usize, i: u32) -> *mut u8 {
        let slot = i as usize & (self.cfg.depth - 1);
        // SAFETY: inside queue q's block (checked geometry).
        unsafe {
            self.base
                .add(self.queue_off(q) + 512 + self.cfg.depth * SQE_BYTES + slot * CQE_BYTES)
        }
    }

    /// Byte offset of the data area.
    pub(crate) fn data_off(&self) -> usize {
        PAGE + QUEUE_BYTES * self.cfg.queues
    }

    /// Pointer to byte `off` of the data area (no bounds check: callers
    /// check against [`Arena::data_len`]).
    pub(crate) fn data_ptr(&self, off: usize) -> *mut u8 {
        // SAFETY: callers keep off within the data area.
        unsafe { self.base.add(self.data_off() + off) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no references outlive self.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
