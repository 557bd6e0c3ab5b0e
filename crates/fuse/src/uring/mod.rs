//! FUSE over io_uring (Linux 6.14+, `Documentation/filesystems/fuse-io-uring.rst`):
//! one request queue per CPU, served by a thread pinned to that CPU, so a
//! request is answered on the CPU of the process that made it. On a
//! `/dev/fuse` read the kernel wakes whichever daemon thread waited
//! longest, usually on another CPU; on a small virtual machine (2 vCPUs)
//! those cross-CPU wake-ups were most of the cost of a metadata request
//! (extracting 10,000 files took 1.4 s with tar and the daemon on one
//! CPU, 4 s left to the scheduler).
//!
//! The kernel offers it when the fuse module's `enable_uring` parameter is
//! on and the daemon asks for `FUSE_OVER_IO_URING` at INIT. Each queue
//! thread then REGISTERs ring entries (a header buffer and a payload
//! buffer each); a completion means a request is in an entry, and
//! COMMIT_AND_FETCH sends the answer and waits for the next one in one
//! step. `/dev/fuse` keeps INIT, FORGET and INTERRUPT. Large READs are
//! the exception to "answered on the caller's CPU": each queue hands them
//! to a helper thread on another CPU (`reader.rs`), so a streaming reader
//! and the decryption run side by side. The helper commits the answers on
//! its own ring (the kernel copies a committed answer into the reader's
//! pages in the committing thread, so that copy leaves the reader's CPU
//! too); an entry the helper committed comes back on the helper's ring,
//! and one that then holds anything but a large READ is handed back to
//! the queue thread, whose commit returns it to the queue's ring.

mod abi;
mod dispatch;
mod entry;
mod payloads;
mod queue;
mod reader;
mod ring;
mod wire;

pub(crate) use queue::start_queues;

use std::sync::atomic::{AtomicU64, Ordering};

/// Requests answered over io_uring rings in this process.
static SERVED: AtomicU64 = AtomicU64::new(0);

/// How many requests this process has answered over io_uring rings (not
/// `/dev/fuse`): what shows that a mount really is served by its queues.
pub fn requests_served() -> u64 {
    SERVED.load(Ordering::Relaxed)
}

/// Counts one request answered over a ring.
pub(crate) fn served_one() {
    SERVED.fetch_add(1, Ordering::Relaxed);
}

/// The fuse module parameter that lets a daemon use io_uring.
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the running kernel lets FUSE daemons use io_uring (the module
/// parameter [`ENABLE_PARAM`] is `Y`).
pub fn kernel_allows() -> bool {
    std::fs::read_to_string(ENABLE_PARAM).is_ok_and(|s| s.trim() == "Y")
}
