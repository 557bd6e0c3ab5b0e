//! The block-file frontend: a FUSE file system with one regular file, a
//! [`BlockStore`] (the decrypted volume's engine, or an integrity device),
//! meant to be attached to a loop device.
//!
//! - The root directory (inode 1, mode 0755) holds one file (inode 2, mode
//!   0600, owned by root) whose size is the engine's size.
//! - The file is opened with `FOPEN_DIRECT_IO` (and parallel direct writes),
//!   so the loop device's direct I/O reaches the engine without the page
//!   cache; `FUSE_ASYNC_DIO` lets the kernel keep many requests in flight.
//! - It is an [`Ops`](crate::ops::Ops) served by the crate's transport
//!   like any other file system: requests of up to 1 MiB (`max_write`,
//!   `max_pages`) read by several dispatch threads, each with its own
//!   cloned /dev/fuse fd, each marked `PR_SET_IO_FLUSHER` so its
//!   allocations never wait on the writeback it is itself serving.
//! - flush/fsync → [`Engine::flush`](cryptkeep_volume::Engine::flush);
//!   `fallocate(PUNCH_HOLE)` → [`Engine::discard`](cryptkeep_volume::Engine::discard)
//!   only with `allow_discards` (otherwise `EOPNOTSUPP`), and then holes
//!   read as zeros, because the loop driver also sends "write zeroes" as a
//!   hole punch; `fallocate(ZERO_RANGE)` → encrypted zeros; writes on a
//!   read-only volume → `EROFS`; other failures → the engine error's errno
//!   (`EIO` for crypto and keep failures).

mod attr;
mod data;
mod flusher;
mod fs;
mod mount;
mod store;

use std::path::{Path, PathBuf};

pub use mount::{mount_block_file, mount_block_file_with, mount_block_store, BlockFileMount};
pub use store::BlockStore;

/// What to mount: the frontend's visible choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFileOptions {
    /// Refuse writes (`EROFS`) and mount the file system read-only.
    pub read_only: bool,
    /// Pass `fallocate(PUNCH_HOLE)` (loop-device discards) to the engine;
    /// the engine then reads holes as zeros (see
    /// `Engine::set_holes_read_as_zero`).
    pub allow_discards: bool,
    /// Name of the volume file in the mount's root directory.
    pub file_name: String,
    /// Source shown in the mount table, e.g. `cryptkeep:NAME`.
    pub fs_name: String,
}

impl Default for BlockFileOptions {
    fn default() -> Self {
        BlockFileOptions {
            read_only: false,
            allow_discards: false,
            file_name: "volume".to_string(),
            fs_name: "cryptkeep".to_string(),
        }
    }
}

/// How the FUSE session is run (for tuning and benchmarks; the default is
/// what `cryptkeep open` uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockFileTuning {
    /// Number of dispatch threads reading /dev/fuse (each holds fuser's
    /// 16 MiB request buffer, mostly never touched). Four keeps two cores
    /// busy with the 4–8 requests a direct-I/O loop device keeps in flight;
    /// 2, 4 and 8 measured within noise of each other.
    pub threads: usize,
    /// Largest read or write request to negotiate, in bytes (the kernel caps
    /// it at `max_pages`, 256 pages by default).
    pub max_io: u32,
    /// Largest number of asynchronous requests the kernel keeps in flight.
    pub max_background: u16,
    /// Serve requests over FUSE-over-io_uring queues, one per CPU, instead
    /// of the `threads` readers of /dev/fuse (Linux 6.14+, the fuse
    /// module's `enable_uring` on; the mount fails otherwise). Each small
    /// request is answered on the CPU that made it: random 4 KiB I/O
    /// through a keep ran about twice as fast on a quiet machine. Off by
    /// default: a stream's 1 MiB reads from the loop device came to one
    /// CPU's queue and its one read helper, and ran at 0.5–0.6 of the
    /// speed over /dev/fuse (docs/guide/performance.md).
    pub io_uring: bool,
}

impl Default for BlockFileTuning {
    fn default() -> Self {
        BlockFileTuning {
            threads: 4,
            max_io: 1 << 20,
            max_background: 64,
            io_uring: false,
        }
    }
}

impl BlockFileTuning {
    /// The default tuning with `threads` dispatch threads.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The default tuning with another request size limit.
    pub fn with_max_io(mut self, max_io: u32) -> Self {
        self.max_io = max_io;
        self
    }

    /// The default tuning, served over io_uring queues when `on`.
    pub fn with_io_uring(mut self, on: bool) -> Self {
        self.io_uring = on;
        self
    }

    /// The default tuning with another in-flight limit.
    pub fn with_max_background(mut self, max_background: u16) -> Self {
        self.max_background = max_background.max(1);
        self
    }
}

/// Where the volume file appears once mounted: `mountpoint/file_name`.
pub fn block_file_path(mountpoint: &Path, opts: &BlockFileOptions) -> PathBuf {
    mountpoint.join(&opts.file_name)
}
