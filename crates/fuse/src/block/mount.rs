//! Mounting the block file system, and [`BlockFileMount`], the handle that
//! unmounts it or waits for it to be unmounted.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cryptkeep_volume::Engine;
use fuser::{Config, MountOption, Session, SessionACL};

use super::fs::BlockFs;
use super::{BlockFileOptions, BlockFileTuning};
use crate::mountinfo::{unmount, wait_for};
use crate::Error;

/// How long to wait for a mount to show up in /proc/self/mountinfo.
const LIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A mounted block file system, served by background threads.
///
/// Dropping it unmounts (if it can; a busy mount stays up and served).
/// There is no `auto_unmount`: a detached daemon keeps serving until
/// `fusermount3 -u` or [`BlockFileMount::unmount`].
#[derive(Debug)]
pub struct BlockFileMount {
    mountpoint: PathBuf,
    thread: Option<JoinHandle<io::Result<()>>>,
}

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
/// `tuning.threads` dispatch threads, each on its own cloned /dev/fuse fd.
/// Returns once the mount appears in /proc/self/mountinfo.
pub fn mount_block_file_with(
    engine: Arc<Engine>,
    mountpoint: &Path,
    opts: &BlockFileOptions,
    tuning: BlockFileTuning,
) -> Result<BlockFileMount, Error> {
    let bad = |reason: String| Error::Mountpoint {
        path: mountpoint.to_path_buf(),
        reason,
    };
    let canonical = mountpoint.canonicalize().map_err(|e| bad(e.to_string()))?;
    if !canonical.is_dir() {
        return Err(bad("not a directory".into()));
    }
    if opts.file_name.is_empty()
        || opts.file_name.contains('/')
        || opts.file_name == "."
        || opts.file_name == ".."
    {
        return Err(bad(format!("invalid file name {:?}", opts.file_name)));
    }
    let read_only = opts.read_only || engine.read_only();
    let mut options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype("cryptkeep".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
        MountOption::NoAtime,
    ];
    options.push(if read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    let mut config = Config::default();
    config.mount_options = options;
    config.acl = SessionACL::Owner;
    config.n_threads = Some(tuning.threads.max(1));
    config.clone_fd = true;

    let fs = BlockFs::new(engine, opts, tuning);
    let session = Session::new(fs, &canonical, &config).map_err(|source| Error::Mount {
        path: canonical.clone(),
        source,
    })?;
    let thread = std::thread::Builder::new()
        .name("ck-fuse-session".into())
        .spawn(move || session.run())
        .map_err(Error::Session)?;
    let mount = BlockFileMount {
        mountpoint: canonical,
        thread: Some(thread),
    };
    if !wait_for(&mount.mountpoint, true, LIVE_TIMEOUT) {
        return Err(Error::NotLive {
            path: mount.mountpoint.clone(),
        });
    }
    Ok(mount)
}

impl BlockFileMount {
    /// The (canonical) mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the session threads to finish. Fails with
    /// [`Error::Unmount`] (typically `EBUSY`) while a loop device or an open
    /// file still uses the volume; the file system then stays mounted and
    /// served, and can be unmounted later with `fusermount3 -u`.
    pub fn unmount(mut self) -> Result<(), Error> {
        self.try_unmount()?;
        self.join_session()
    }

    /// Unmounts without consuming the handle, so a busy mount can be
    /// retried. The session threads finish in the background.
    pub fn try_unmount(&mut self) -> Result<(), Error> {
        // Also unmounts a mount whose session died ("transport endpoint is
        // not connected"); nothing to do once it is gone from mountinfo.
        if wait_for(&self.mountpoint, false, Duration::ZERO) {
            return Ok(());
        }
        unmount(&self.mountpoint, false).map_err(|source| Error::Unmount {
            path: self.mountpoint.clone(),
            source,
        })
    }

    /// Blocks until the file system is unmounted from outside (e.g.
    /// `fusermount3 -u`, `umount`), then returns.
    pub fn wait(mut self) {
        let _ = self.join_session();
    }

    /// Like [`BlockFileMount::wait`], but reports how the session ended.
    pub fn join(mut self) -> Result<(), Error> {
        self.join_session()
    }

    fn join_session(&mut self) -> Result<(), Error> {
        crate::mount::join_session(&mut self.thread)
    }
}

impl Drop for BlockFileMount {
    fn drop(&mut self) {
        if self.thread.is_some() && self.try_unmount().is_ok() {
            let _ = self.join_session();
        }
        // Otherwise the mount is busy: leave it up and served (detached).
    }
}
