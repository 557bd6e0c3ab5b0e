//! A minimal io_uring (io_uring(7), `io_uring_setup(2)`,
//! `io_uring_enter(2)`) for one thread: 128-byte SQEs, which
//! `IORING_OP_URING_CMD` needs for its 80-byte command area, and 16-byte
//! CQEs. Only what the FUSE queues use: queue an SQE, submit and wait.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::wire::Sqe128;

/// SQEs are 128 bytes (`IORING_SETUP_SQE128`).
const IORING_SETUP_SQE128: u32 = 1 << 10;
/// Completion work runs when this thread enters the kernel, not by
/// interrupting it (`IORING_SETUP_COOP_TASKRUN`).
const IORING_SETUP_COOP_TASKRUN: u32 = 1 << 8;
/// Only this thread submits (`IORING_SETUP_SINGLE_ISSUER`).
const IORING_SETUP_SINGLE_ISSUER: u32 = 1 << 12;
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x0800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
/// `IORING_OP_URING_CMD`.
pub(crate) const OP_URING_CMD: u8 = 46;
/// Size of one SQE with `IORING_SETUP_SQE128`.
pub(crate) const SQE_LEN: usize = 128;

#[repr(C)]
#[derive(Default)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

/// One completion: the SQE's `user_data` and its result (`-errno` on failure).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completion {
    pub(crate) user_data: u64,
    pub(crate) res: i32,
}

struct Map {
    ptr: NonNull<u8>,
    len: usize,
}

impl Map {
    fn new(fd: &OwnedFd, len: usize, off: i64) -> io::Result<Map> {
        // SAFETY: a fresh shared mapping of the ring fd at a kernel-defined
        // offset; nothing else refers to the range.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Map { ptr, len })
    }

    fn at<T>(&self, off: u32) -> *mut T {
        // SAFETY: offsets come from the kernel's io_uring_params and lie
        // inside the mapping it sized.
        unsafe { self.ptr.as_ptr().add(off as usize) as *mut T }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

/// An io_uring owned by one thread.
pub(crate) struct Ring {
    fd: OwnedFd,
    /// The rings' mappings, held until drop.
    _sq: Map,
    _cq: Map,
    sqes: Map,
    sq_entries: u32,
    sq_mask: u32,
    cq_mask: u32,
    sq_head: *const AtomicU32,
    sq_tail: *const AtomicU32,
    sq_array: *mut u32,
    cq_head: *const AtomicU32,
    cq_tail: *const AtomicU32,
    cqes: *const u8,
    /// SQEs queued since the last submit.
    pending: u32,
}

// SAFETY: the raw pointers point into mappings the Ring owns; the ring is
// used by one thread at a time (it is moved into its queue's thread).
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of `entries` SQEs (a power of two) and twice as many CQEs.
    pub(crate) fn new(entries: u32) -> io::Result<Ring> {
        let mut p = Params {
            flags: IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER,
            ..Params::default()
        };
        // SAFETY: io_uring_setup reads and fills the params struct.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, entries, &mut p) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let sq_len = p.sq_off.array as usize + p.sq_entries as usize * 4;
        let cq_len = p.cq_off.cqes as usize + p.cq_entries as usize * 16;
        let sq = Map::new(&fd, sq_len, IORING_OFF_SQ_RING)?;
        let cq = Map::new(&fd, cq_len, IORING_OFF_CQ_RING)?;
        let sqes = Map::new(&fd, p.sq_entries as usize * SQE_LEN, IORING_OFF_SQES)?;
        // SAFETY: the mask words are inside the rings and never change.
        let (sq_mask, cq_mask) = unsafe {
            (
                *sq.at::<u32>(p.sq_off.ring_mask),
                *cq.at::<u32>(p.cq_off.ring_mask),
            )
        };
        Ok(Ring {
            sq_head: sq.at(p.sq_off.head),
            sq_tail: sq.at(p.sq_off.tail),
            sq_array: sq.at(p.sq_off.array),
            cq_head: cq.at(p.cq_off.head),
            cq_tail: cq.at(p.cq_off.tail),
            cqes: cq.at(p.cq_off.cqes),
            sq_entries: p.sq_entries,
            sq_mask,
            cq_mask,
            fd,
            _sq: sq,
            _cq: cq,
            sqes,
            pending: 0,
        })
    }

    /// Queues one SQE; submitted by the next [`Ring::submit_and_wait`] or
    /// [`Ring::submit_and_poll`]. Fails when the queue is full.
    ///
    /// # Safety
    /// The kernel reads and writes whatever the SQE points at (its
    /// `addr`: an iovec array and the buffers it names, or a read buffer)
    /// until the command completes: those must stay allocated, and untouched
    /// by this process, until its completion is drained.
    pub(crate) unsafe fn push(&mut self, sqe: &Sqe128) -> io::Result<()> {
        // SAFETY: head and tail are the kernel's shared u32 words.
        let (head, tail) = unsafe {
            (
                (*self.sq_head).load(Ordering::Acquire),
                (*self.sq_tail).load(Ordering::Relaxed),
            )
        };
        if tail.wrapping_sub(head) >= self.sq_entries {
            return Err(io::Error::other("io_uring submission queue full"));
        }
        let idx = tail & self.sq_mask;
        // SAFETY: idx < sq_entries, so the slot and the array word are in
        // their mappings; the kernel reads them only after the tail moves.
        unsafe {
            std::ptr::copy_nonoverlapping(
                zerocopy::IntoBytes::as_bytes(sqe).as_ptr(),
                self.sqes.ptr.as_ptr().add(idx as usize * SQE_LEN),
                SQE_LEN,
            );
            *self.sq_array.add(idx as usize) = idx;
            (*self.sq_tail).store(tail.wrapping_add(1), Ordering::Release);
        }
        self.pending += 1;
        Ok(())
    }

    /// Submits what was queued and waits for at least one completion.
    pub(crate) fn submit_and_wait(&mut self) -> io::Result<()> {
        self.enter(1)
    }

    /// Submits what was queued and runs pending completion work without
    /// waiting (a poll).
    pub(crate) fn submit_and_poll(&mut self) -> io::Result<()> {
        self.enter(0)
    }

    fn enter(&mut self, min_complete: u32) -> io::Result<()> {
        loop {
            // SAFETY: io_uring_enter on our ring with no signal mask.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    self.fd.as_raw_fd(),
                    self.pending,
                    min_complete,
                    IORING_ENTER_GETEVENTS,
                    std::ptr::null::<libc::c_void>(),
                    0usize,
                )
            };
            if r >= 0 {
                self.pending -= (r as u32).min(self.pending);
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Takes every completion that is ready.
    pub(crate) fn drain(&mut self, out: &mut Vec<Completion>) {
        // SAFETY: the CQ words are shared with the kernel; entries between
        // head and tail are complete and ours to read until head moves.
        unsafe {
            let mut head = (*self.cq_head).load(Ordering::Relaxed);
            let tail = (*self.cq_tail).load(Ordering::Acquire);
            while head != tail {
                let e = self.cqes.add((head & self.cq_mask) as usize * 16);
                let user_data = std::ptr::read_unaligned(e as *const u64);
                let res = std::ptr::read_unaligned(e.add(8) as *const i32);
                out.push(Completion { user_data, res });
                head = head.wrapping_add(1);
            }
            (*self.cq_head).store(head, Ordering::Release);
        }
    }
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ring({} entries)", self.sq_entries)
    }
}
