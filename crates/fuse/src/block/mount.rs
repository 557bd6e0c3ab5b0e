//! Mounting the block file system through the crate's generic [`mount`]:
//! the block file is one more [`Ops`](crate::ops::Ops) on the same
//! transport as the overlay file system.

use std::path::Path;
use std::sync::Arc;

use cryptkeep_volume::Engine;

use super::fs::BlockFs;
use super::store::BlockStore;
use super::{BlockFileOptions, BlockFileTuning};
use crate::mount::{mount, Mount, MountOptions};
use crate::Error;

/// A mounted block file system, served by background threads.
///
/// Dropping it unmounts (if it can; a busy mount stays up and served).
/// There is no `auto_unmount`: a detached daemon keeps serving until
/// `fusermount3 -u` or [`Mount::unmount`].
pub type BlockFileMount = Mount;

/// Mounts the block file system for `engine` at `mountpoint` (an existing
/// directory) with the default [`BlockFileTuning`]; returns once the mount
/// is live. See [`mount_block_file_with`].
pub fn mount_block_file(
    engine: Arc<Engine>,
    mountpoint: &Path,
    opts: &BlockFileOptions,
) -> Result<BlockFileMount, Error> {
    mount_block_file_with(engine, mountpoint, opts, BlockFileTuning::default())
}

/// Mounts the block file system for `engine` at `mountpoint`: the FUSE
/// mount (direct `mount(2)` as root, `fusermount3` otherwise, through
/// fuser's pure-Rust mounter; no libfuse), the INIT handshake, then
/// `tuning.threads` dispatch threads, each on its own cloned /dev/fuse fd
/// (or, with `tuning.io_uring`, one io_uring queue thread per CPU).
/// Owner-only, `default_permissions`, `nodev,nosuid,noexec,noatime`.
/// Returns once the mount appears in /proc/self/mountinfo.
pub fn mount_block_file_with(
    engine: Arc<Engine>,
    mountpoint: &Path,
    opts: &BlockFileOptions,
    tuning: BlockFileTuning,
) -> Result<BlockFileMount, Error> {
    mount_block_store(engine, mountpoint, opts, tuning)
}

/// Mounts the block file system for any [`BlockStore`] (the volume engine,
/// an integrity device, ...) with `tuning`, as [`mount_block_file_with`].
pub fn mount_block_store<S: BlockStore>(
    engine: Arc<S>,
    mountpoint: &Path,
    opts: &BlockFileOptions,
    tuning: BlockFileTuning,
) -> Result<BlockFileMount, Error> {
    let name = &opts.file_name;
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Error::Mountpoint {
            path: mountpoint.to_path_buf(),
            reason: format!("invalid file name {name:?}"),
        });
    }
    let fs = BlockFs::new(engine, opts, tuning);
    let transport = MountOptions {
        read_only: fs.read_only,
        threads: tuning.threads.max(1),
        default_permissions: true,
        noexec_noatime: true,
        io_uring: tuning.io_uring,
        ..MountOptions::new(&opts.fs_name, "cryptkeep")
    };
    mount(fs, mountpoint, &transport)
}
