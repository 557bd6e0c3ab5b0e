//! Marks the threads that serve the block file as I/O flushers
//! (`prctl(PR_SET_IO_FLUSHER)`, Linux 5.6+), as userspace block drivers
//! should: their memory allocations then never wait for writeback, which
//! could be writeback to the very loop device they serve (a deadlock under
//! memory pressure).

use std::cell::Cell;

/// `PR_SET_IO_FLUSHER` from linux/prctl.h (not exported by libc for Linux).
const PR_SET_IO_FLUSHER: libc::c_int = 57;

thread_local! {
    static MARKED: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread once; best effort (needs CAP_SYS_RESOURCE).
pub(crate) fn mark_thread() {
    MARKED.with(|m| {
        if !m.get() {
            m.set(true);
            // SAFETY: prctl with integer arguments only; failure is harmless.
            let _ = unsafe { libc::prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) };
        }
    })
}
