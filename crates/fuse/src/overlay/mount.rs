//! Mounting the overlay, and [`OverlayMount`], the handle that unmounts it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cryptkeep_overlay::CipherDir;
use fuser::{Config, MountOption, Session, SessionACL};

use super::fs::OverlayFs;
use super::OverlayOptions;
use crate::mountinfo::{is_fuse_mounted, unmount_path, wait_for};
use crate::Error;

/// A mounted overlay, served by background threads; dropping it unmounts
/// (a busy mount stays up and served).
#[derive(Debug)]
pub struct OverlayMount {
    mountpoint: PathBuf,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// Stopped when the session ends (its worker holds the file system).
    prefetch: Option<Arc<super::prefetch::Prefetch>>,
}

/// Mounts the gocryptfs-format overlay of the opened cipher directory `cd`
/// at `mountpoint` (an existing directory); returns once the mount is live.
pub fn mount_overlay(
    cd: Arc<CipherDir>,
    mountpoint: &Path,
    opts: &OverlayOptions,
) -> Result<OverlayMount, Error> {
    let bad = |reason: String| Error::Mountpoint {
        path: mountpoint.to_path_buf(),
        reason,
    };
    let canonical = mountpoint.canonicalize().map_err(|e| bad(e.to_string()))?;
    if !canonical.is_dir() {
        return Err(bad("not a directory".into()));
    }
    let mut fs = OverlayFs::new(cd, opts.read_only, opts.writeback_cache, opts.cache_ttl)
        .map_err(Error::Session)?;
    let prefetch = fs.prefetch.clone();
    let with_prefetch = |m: Result<OverlayMount, Error>| {
        m.map(|mut m| {
            m.prefetch = Some(prefetch.clone());
            m
        })
        .inspect_err(|_| prefetch.stop())
    };
    if !opts.io_uring {
        return with_prefetch(mount_fs(fs, canonical, opts, |_| Ok(())));
    }
    if !crate::uring::kernel_allows() {
        return Err(Error::IoUringOff);
    }
    fs.io_uring = true;
    let queues = fs.clone();
    // Only INIT, FORGET and INTERRUPT come through /dev/fuse now.
    let opts = OverlayOptions {
        threads: 1,
        ..opts.clone()
    };
    with_prefetch(mount_fs(fs, canonical, &opts, move |dev| {
        crate::uring::start_queues(queues, dev, MAX_PAYLOAD)
    }))
}

/// Largest request or answer payload: max_write and max_pages (see
/// `OverlayFs::init`) are both 1 MiB.
const MAX_PAYLOAD: usize = 1 << 20;

/// Mounts the read-only reverse view (gocryptfs `-reverse`) of the
/// plaintext directory behind `cd` (opened with
/// [`CipherDir::open_reverse`]) at `mountpoint`.
pub fn mount_reverse(
    cd: Arc<CipherDir>,
    mountpoint: &Path,
    opts: &OverlayOptions,
) -> Result<OverlayMount, Error> {
    let canonical = mountpoint.canonicalize().map_err(|e| Error::Mountpoint {
        path: mountpoint.to_path_buf(),
        reason: e.to_string(),
    })?;
    let opts = OverlayOptions {
        read_only: true,
        writeback_cache: false,
        ..opts.clone()
    };
    let fs = super::reverse::ReverseFs::new(cd).map_err(Error::Session)?;
    mount_fs(fs, canonical, &opts, |_| Ok(()))
}

/// Mounts `fs`; `with_dev` gets a duplicate of the session's `/dev/fuse`
/// descriptor before the session starts (for the io_uring queues).
fn mount_fs<F: fuser::Filesystem + Send + Sync + 'static>(
    fs: F,
    canonical: PathBuf,
    opts: &OverlayOptions,
    with_dev: impl FnOnce(std::os::fd::OwnedFd) -> io::Result<()>,
) -> Result<OverlayMount, Error> {
    let mut options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype("cryptkeep-fs".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    // Shared with other users, the kernel checks each caller's permission
    // bits. Otherwise only the owner, who is the user this process runs
    // as, can enter, and the backing file system already checks what it
    // may do (as with gocryptfs); without `default_permissions` the
    // kernel need not re-read a directory's attributes after every
    // change in it before the next path walk (a GETATTR per file
    // created or removed).
    if opts.allow_other {
        options.push(MountOption::DefaultPermissions);
    }
    options.push(if opts.read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    let mut config = Config::default();
    config.mount_options = options;
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    let session = Session::new(fs, &canonical, &config).map_err(|source| Error::Mount {
        path: canonical.clone(),
        source,
    })?;
    let dev = std::os::fd::AsFd::as_fd(&session)
        .try_clone_to_owned()
        .map_err(Error::Session)?;
    with_dev(dev).map_err(Error::Session)?;
    let thread = std::thread::Builder::new()
        .name("ck-overlay-session".into())
        .spawn(move || session.run())
        .map_err(Error::Session)?;
    let m = OverlayMount {
        mountpoint: canonical,
        thread: Some(thread),
        prefetch: None,
    };
    if !wait_for(&m.mountpoint, true, Duration::from_secs(10)) {
        return Err(Error::NotLive {
            path: m.mountpoint.clone(),
        });
    }
    set_read_ahead(&m.mountpoint, opts.read_ahead_kib);
    Ok(m)
}

/// Sets the read-ahead of the FUSE mount at `mountpoint` to `kib` KiB
/// through its backing device info (`/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`,
/// Documentation/ABI/testing/sysfs-class-bdi). Only root may: a refusal
/// leaves the kernel's default without a word; anything else is reported
/// on stderr and the mount stays as it is.
fn set_read_ahead(mountpoint: &Path, kib: u32) {
    use std::os::unix::fs::MetadataExt;
    if kib == 0 {
        return;
    }
    let dev = match std::fs::metadata(mountpoint) {
        Ok(m) => m.dev(),
        Err(_) => return,
    };
    let knob = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    match std::fs::write(&knob, format!("{kib}\n")) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EPERM | libc::EROFS)
            ) => {}
        Err(e) => eprintln!(
            "cryptkeep fs: read-ahead of {} stays at the kernel's default ({knob}: {e})",
            mountpoint.display()
        ),
    }
}

impl OverlayMount {
    /// The (canonical) mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the session to end.
    pub fn unmount(mut self) -> Result<(), Error> {
        self.try_unmount()?;
        self.join()
    }

    fn try_unmount(&mut self) -> Result<(), Error> {
        if !is_fuse_mounted(&self.mountpoint) {
            return Ok(());
        }
        // Busy right after the last close is common (releases and
        // write-back still in flight): retry for up to two seconds.
        let mut tries = 0;
        loop {
            match unmount_path(&self.mountpoint) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 40 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(source) => {
                    return Err(Error::Unmount {
                        path: self.mountpoint.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Blocks until the file system is unmounted from outside.
    pub fn wait(mut self) {
        let _ = self.join();
    }

    fn join(&mut self) -> Result<(), Error> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        let ended = t.join();
        if let Some(p) = self.prefetch.take() {
            p.stop();
        }
        match ended {
            Ok(r) => r.map_err(Error::Session),
            Err(_) => Err(Error::Session(io::Error::other(
                "a FUSE dispatch thread panicked",
            ))),
        }
    }
}

impl Drop for OverlayMount {
    fn drop(&mut self) {
        if self.thread.is_some() && self.try_unmount().is_ok() {
            let _ = self.join();
        }
    }
}
