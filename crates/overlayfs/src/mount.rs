//! Mounting the overlay (and the reverse view) with the transports of
//! `cryptkeep_fuse`.

use std::path::Path;
use std::sync::Arc;

use cryptkeep_fuse::{Error, Mount, MountOptions};
use cryptkeep_overlay::CipherDir;

use super::fs::OverlayFs;
use super::OverlayOptions;

/// A mounted overlay; dropping it unmounts.
pub type OverlayMount = Mount;

impl OverlayOptions {
    fn transport(&self, read_only: bool) -> MountOptions {
        MountOptions {
            read_only,
            allow_other: self.allow_other,
            threads: self.threads,
            fs_name: self.fs_name.clone(),
            subtype: "cryptkeep-fs".into(),
            io_uring: self.io_uring,
            read_ahead_kib: self.read_ahead_kib,
            default_permissions: false,
            noexec_noatime: false,
        }
    }
}

/// Mounts the gocryptfs-format overlay of the opened cipher directory `cd`
/// at `mountpoint` (an existing directory); returns once the mount is live.
pub fn mount_overlay(
    cd: Arc<CipherDir>,
    mountpoint: &Path,
    opts: &OverlayOptions,
) -> Result<OverlayMount, Error> {
    let fs = OverlayFs::new(cd, opts.read_only, opts.writeback_cache, opts.cache_ttl)
        .map_err(Error::Session)?;
    let prefetch = fs.prefetch.clone();
    cryptkeep_fuse::mount(fs, mountpoint, &opts.transport(opts.read_only))
        .inspect_err(|_| prefetch.stop())
}

/// Mounts the read-only reverse view (gocryptfs `-reverse`) of the
/// plaintext directory behind `cd` (opened with
/// [`CipherDir::open_reverse`]) at `mountpoint`; always over `/dev/fuse`.
pub fn mount_reverse(
    cd: Arc<CipherDir>,
    mountpoint: &Path,
    opts: &OverlayOptions,
) -> Result<OverlayMount, Error> {
    let fs = super::reverse::ReverseFs::new(cd).map_err(Error::Session)?;
    let transport = MountOptions {
        io_uring: false,
        ..opts.transport(true)
    };
    cryptkeep_fuse::mount(fs, mountpoint, &transport)
}
