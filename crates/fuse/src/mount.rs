//! Mounting a file system's [`Ops`] over FUSE — requests read from
//! `/dev/fuse`, or over io_uring queues — and [`Mount`], the handle that
//! unmounts it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};

use crate::mountinfo::{is_fuse_mounted, unmount_when_idle, wait_for};
use crate::ops::Ops;
use crate::session::{Session, MAX_PAYLOAD};
use crate::Error;

/// How to mount: what the transport and the kernel need to know.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Refuse every change.
    pub read_only: bool,
    /// Let other users in; the kernel then checks every caller's mode bits
    /// (`default_permissions`).
    pub allow_other: bool,
    /// `/dev/fuse` dispatch threads (one when requests come over io_uring).
    pub threads: usize,
    /// The source shown in `mount` output.
    pub fs_name: String,
    /// The `fuse.SUBTYPE` shown in `mount` output.
    pub subtype: String,
    /// Serve requests over FUSE-over-io_uring queues, one per CPU, each
    /// answered on the CPU that asked; `/dev/fuse` then carries only
    /// INIT, FORGET and INTERRUPT.
    pub io_uring: bool,
    /// The mount's read-ahead in KiB (its `/sys/class/bdi/*/read_ahead_kb`),
    /// set once the mount is live when this process may (root); 0 leaves
    /// the kernel's default.
    pub read_ahead_kib: u32,
    /// Let the kernel check every caller's mode bits even when only the
    /// owner may enter (`default_permissions`; always on with
    /// `allow_other`).
    pub default_permissions: bool,
    /// Mount `noexec` and `noatime` (a file that is a device image, not a
    /// tree of programs).
    pub noexec_noatime: bool,
}

impl MountOptions {
    /// Options for a file system `fs_name` of type `fuse.SUBTYPE`: owner
    /// only, one `/dev/fuse` thread, no io_uring, the kernel's read-ahead.
    pub fn new(fs_name: &str, subtype: &str) -> MountOptions {
        MountOptions {
            read_only: false,
            allow_other: false,
            threads: 1,
            fs_name: fs_name.to_string(),
            subtype: subtype.to_string(),
            io_uring: false,
            read_ahead_kib: 0,
            default_permissions: false,
            noexec_noatime: false,
        }
    }
}

/// A mounted file system, served by background threads; dropping it
/// unmounts (a busy mount stays up and served).
#[derive(Debug)]
pub struct Mount {
    mountpoint: PathBuf,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// The io_uring queue threads, joined after the session: each holds
    /// the file system (and any key in it) until the connection ends.
    queues: Vec<JoinHandle<()>>,
}

/// How long joining waits for the io_uring queue threads once the session
/// ended (they end as soon as the kernel has given their entries back).
const QUEUES_JOIN_WAIT: Duration = Duration::from_secs(5);

/// Mounts `fs` at `mountpoint` (an existing directory) with `opts`;
/// returns once the mount is live. With `opts.io_uring`, the kernel must
/// offer FUSE over io_uring ([`Error::IoUringOff`] otherwise, and
/// [`Error::IoUringRefused`] when it declines at INIT).
pub fn mount<F: Ops>(fs: F, mountpoint: &Path, opts: &MountOptions) -> Result<Mount, Error> {
    let bad = |reason: String| Error::Mountpoint {
        path: mountpoint.to_path_buf(),
        reason,
    };
    let canonical = mountpoint.canonicalize().map_err(|e| bad(e.to_string()))?;
    if !canonical.is_dir() {
        return Err(bad("not a directory".into()));
    }
    let fs = Arc::new(fs);
    if !opts.io_uring {
        return mount_session(Session::new(fs, false), canonical, opts, |_| Ok(Vec::new()));
    }
    if !crate::uring::kernel_allows() {
        return Err(Error::IoUringOff);
    }
    let queues = fs.clone();
    // Only INIT, FORGET and INTERRUPT come through /dev/fuse now.
    let opts = MountOptions {
        threads: 1,
        ..opts.clone()
    };
    mount_session(Session::new(fs, true), canonical, &opts, move |dev| {
        crate::uring::start_queues(queues, dev, MAX_PAYLOAD)
    })
}

/// Mounts `session`; `with_dev` gets a duplicate of the session's
/// `/dev/fuse` descriptor before the session starts (for the io_uring
/// queues).
fn mount_session<F: Ops>(
    session: Session<F>,
    canonical: PathBuf,
    opts: &MountOptions,
    with_dev: impl FnOnce(std::os::fd::OwnedFd) -> io::Result<Vec<JoinHandle<()>>>,
) -> Result<Mount, Error> {
    let mut options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype(opts.subtype.clone()),
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    // Shared with other users, the kernel checks each caller's permission
    // bits. Otherwise only the owner, who is the user this process runs
    // as, can enter, and the backing store already checks what it may do
    // (as with gocryptfs); without `default_permissions` the kernel need
    // not re-read a directory's attributes after every change in it
    // before the next path walk (a GETATTR per file created or removed).
    if opts.allow_other || opts.default_permissions {
        options.push(MountOption::DefaultPermissions);
    }
    if opts.noexec_noatime {
        options.extend([MountOption::NoExec, MountOption::NoAtime]);
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
    let refused = session.uring_refused.clone();
    let fuse =
        fuser::Session::new(session, &canonical, &config).map_err(|source| Error::Mount {
            path: canonical.clone(),
            source,
        })?;
    let dev = std::os::fd::AsFd::as_fd(&fuse)
        .try_clone_to_owned()
        .map_err(Error::Session)?;
    let queues = with_dev(dev).map_err(Error::Session)?;
    let thread = std::thread::Builder::new()
        .name("ck-fuse-session".into())
        .spawn(move || fuse.run())
        .map_err(Error::Session)?;
    let m = Mount {
        mountpoint: canonical,
        thread: Some(thread),
        queues,
    };
    if !wait_for(&m.mountpoint, true, Duration::from_secs(10)) {
        return Err(Error::NotLive {
            path: m.mountpoint.clone(),
        });
    }
    if refused.load(Ordering::Acquire) {
        // Dropping `m` unmounts.
        return Err(Error::IoUringRefused {
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
            "cryptkeep: read-ahead of {} stays at the kernel's default ({knob}: {e})",
            mountpoint.display()
        ),
    }
}

impl Mount {
    /// The (canonical) mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the session to end. A mount that stays busy
    /// (an open file, a loop device attached) for two seconds fails with
    /// [`Error::Unmount`] (`EBUSY`) and stays mounted and served.
    pub fn unmount(mut self) -> Result<(), Error> {
        // Busy right after the last close is common (releases and
        // write-back still in flight).
        self.unmount_within(Duration::from_secs(2))?;
        self.join_session()
    }

    /// Unmounts without consuming the handle, once, so a busy mount can be
    /// retried; the session ends in the background. A mount already gone
    /// (or whose session died) is fine.
    pub fn try_unmount(&mut self) -> Result<(), Error> {
        self.unmount_within(Duration::ZERO)
    }

    fn unmount_within(&mut self, patience: Duration) -> Result<(), Error> {
        if !is_fuse_mounted(&self.mountpoint) {
            return Ok(());
        }
        unmount_when_idle(&self.mountpoint, patience).map_err(|source| Error::Unmount {
            path: self.mountpoint.clone(),
            source,
        })
    }

    /// Blocks until the file system is unmounted from outside (e.g.
    /// `fusermount3 -u`, `umount`), then returns.
    pub fn wait(mut self) {
        let _ = self.join_session();
    }

    /// Like [`Mount::wait`], but reports how the session ended.
    pub fn join(mut self) -> Result<(), Error> {
        self.join_session()
    }

    fn join_session(&mut self) -> Result<(), Error> {
        let r = join_session(&mut self.thread);
        join_queues(&mut self.queues);
        r
    }
}

/// Joins the io_uring queue threads of a session that ended, waiting at
/// most [`QUEUES_JOIN_WAIT`]; threads still running then are left (and
/// said so on stderr), rather than hang the caller's close.
fn join_queues(queues: &mut Vec<JoinHandle<()>>) {
    let deadline = std::time::Instant::now() + QUEUES_JOIN_WAIT;
    while queues.iter().any(|t| !t.is_finished()) {
        if std::time::Instant::now() >= deadline {
            eprintln!(
                "cryptkeep: {} io_uring queue thread(s) still running after the FUSE session ended; left behind",
                queues.iter().filter(|t| !t.is_finished()).count()
            );
            queues.clear();
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for t in queues.drain(..) {
        let _ = t.join();
    }
}

/// Waits for a mount's session thread (once; later calls return at once)
/// and reports how the session ended.
fn join_session(thread: &mut Option<JoinHandle<io::Result<()>>>) -> Result<(), Error> {
    let Some(t) = thread.take() else {
        return Ok(());
    };
    match t.join() {
        Ok(r) => r.map_err(Error::Session),
        Err(_) => Err(Error::Session(io::Error::other(
            "a FUSE dispatch thread panicked",
        ))),
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.thread.is_some() && self.unmount_within(Duration::from_secs(2)).is_ok() {
            let _ = self.join_session();
        }
        // Otherwise the mount is busy: leave it up and served (detached).
    }
}
