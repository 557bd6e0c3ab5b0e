//! `cryptkeep fs`: a file system that shows the plaintext view of a
//! gocryptfs-format cipher directory, served by the transports of
//! `cryptkeep_fuse` (`/dev/fuse` or FUSE over io_uring) through its
//! [`cryptkeep_fuse::ops::Ops`]. It knows nothing of how requests arrive,
//! and it reaches the cipher directory only through directory
//! descriptors, one name at a time (`dirfds.rs`, `resolve.rs`).
//!
//! Names, contents, symlinks and xattrs are translated with
//! `cryptkeep_overlay`; inode numbers are the backing files' (hard links
//! stay hard links); each open inode has one cipher file behind one lock,
//! so read-modify-write of partial blocks is never interleaved.
//! Directories are listed without OPENDIR (`listings.rs`), and a listed
//! directory's subdirectories are read ahead on another thread
//! (`prefetch.rs`), as fresh as the kernel's attribute cache allows
//! ([`OverlayOptions::cache_ttl`]).
//! Removed files are freed on a reaper thread, off the UNLINK request
//! (`reaper.rs`).
//! [`mount_reverse`] shows the read-only reverse view (gocryptfs
//! `-reverse`) of a plaintext directory.

mod attr;
mod data;
mod dirfds;
mod entries;
mod fs;
mod items;
mod listings;
mod mount;
mod nodes;
mod open_files;
mod ops;
mod prefetch;
#[cfg(test)]
mod read_ahead_tests;
mod reaper;
mod resolve;
mod reverse;
mod room;
mod snapshot;
mod space;
mod xattr;

pub use cryptkeep_fuse::Error;
pub use mount::{mount_overlay, mount_reverse, OverlayMount};
use std::time::Duration;

/// How to mount the overlay.
#[derive(Debug, Clone)]
pub struct OverlayOptions {
    /// Refuse every change (`--ro`).
    pub read_only: bool,
    /// Let other users in (`--allow-other`).
    pub allow_other: bool,
    /// FUSE dispatch threads.
    pub threads: usize,
    /// The source shown in `mount` output.
    pub fs_name: String,
    /// Let the kernel cache writes (FUSE writeback cache): far faster small
    /// writes; the kernel then owns size and mtime while pages are dirty.
    pub writeback_cache: bool,
    /// Serve requests over FUSE-over-io_uring queues, one per CPU, each
    /// answered on the CPU that asked (needs the fuse module's
    /// `enable_uring`); `/dev/fuse` then carries only INIT and FORGET.
    pub io_uring: bool,
    /// The mount's read-ahead in KiB (its `/sys/class/bdi/*/read_ahead_kb`;
    /// the kernel's default is 128), set once the mount is live when this
    /// process may (root), as mergerfs's `readahead` option does; 0
    /// leaves the kernel's default.
    pub read_ahead_kib: u32,
    /// How long the kernel may cache entries and attributes (and a
    /// read-ahead listing or a directory IV stays servable); zero for
    /// none, when the cipher directory is also changed behind the mount's
    /// back (gocryptfs's `-sharedstorage`; then turn `writeback_cache` off
    /// too: with it the kernel keeps its own file sizes). See
    /// [`DEFAULT_CACHE_TTL`].
    pub cache_ttl: Duration,
}

/// The default cache time-out: 10 s. Like gocryptfs, the mount assumes it
/// is the only writer of its cipher directory (gocryptfs's "usual
/// (exclusive) use-case"); then the kernel's caches can only go stale
/// through changes made behind its back, and how long they are kept costs
/// nothing else. gocryptfs keeps go-fuse's 1 s, securefs 30 s; 10 s still
/// shows such changes (a sync client's) within seconds, while a tree walk
/// that takes longer than 1 s (rsync, rm -r of a source tree) no longer
/// revalidates every entry with a LOOKUP (measured: rsync -an of the
/// 83k-entry tree after du ~2.3 -> ~1.0 s).
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(10);

/// The read-ahead the overlay asks for: 2 MiB, two of the largest READ
/// requests (1 MiB), so a streaming reader finds the next one decrypted
/// (measured: 100 MiB read with dd bs=4k at ~1.4 GB/s with the
/// kernel's 128 KiB, ~1.65 GB/s with 2 MiB).
pub const DEFAULT_READ_AHEAD_KIB: u32 = 2048;

impl Default for OverlayOptions {
    fn default() -> OverlayOptions {
        OverlayOptions {
            read_only: false,
            allow_other: false,
            threads: 4,
            fs_name: "cryptkeep-fs".into(),
            writeback_cache: true,
            io_uring: false,
            read_ahead_kib: DEFAULT_READ_AHEAD_KIB,
            cache_ttl: DEFAULT_CACHE_TTL,
        }
    }
}

impl OverlayOptions {
    /// These options with requests served over FUSE-over-io_uring queues;
    /// [`Error::IoUringOff`] (which says how to turn it on) when the
    /// kernel does not allow it.
    pub fn over_io_uring(self) -> Result<OverlayOptions, Error> {
        if !cryptkeep_fuse::uring::kernel_allows() {
            return Err(Error::IoUringOff);
        }
        Ok(OverlayOptions {
            io_uring: true,
            ..self
        })
    }
}
