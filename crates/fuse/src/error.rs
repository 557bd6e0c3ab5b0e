//! The FUSE crate's error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What can go wrong while mounting, serving or unmounting a FUSE frontend.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The mount point does not exist or is not a directory.
    Mountpoint {
        /// The path given.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// Mounting failed (no /dev/fuse, no permission, fusermount3 missing...).
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The error from the mount call or fusermount3.
        source: io::Error,
    },
    /// The kernel accepted the mount but it never showed up in
    /// /proc/self/mountinfo.
    NotLive {
        /// The mount point.
        path: PathBuf,
    },
    /// Unmounting failed (typically EBUSY: a loop device or a process still
    /// uses the file). The file system stays mounted and served.
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// The error from umount(2) or fusermount3 -u.
        source: io::Error,
    },
    /// The FUSE session ended with an error.
    Session(io::Error),
    /// FUSE over io_uring was asked for, but the kernel does not offer it.
    IoUringOff,
    /// FUSE over io_uring was asked for and the kernel offers it, but the
    /// capability was refused at INIT (the mount was undone).
    IoUringRefused {
        /// The mount point.
        path: PathBuf,
    },
    /// The volume engine failed.
    Volume(cryptkeep_volume::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Mountpoint { path, reason } => write!(
                f,
                "cannot mount on {}: {reason}; give an existing empty directory",
                path.display()
            ),
            Error::Mount { path, source } => write!(
                f,
                "mounting FUSE on {} failed: {source}; check that /dev/fuse exists, \
                 fusermount3 is installed (package fuse3) and you may mount there",
                path.display()
            ),
            Error::NotLive { path } => write!(
                f,
                "the FUSE mount on {} did not appear in /proc/self/mountinfo",
                path.display()
            ),
            Error::Unmount { path, source } => write!(
                f,
                "unmounting {} failed: {source}; detach loop devices and close files using it, then retry",
                path.display()
            ),
            Error::Session(e) => write!(f, "the FUSE session failed: {e}"),
            Error::IoUringOff => write!(
                f,
                "FUSE over io_uring is off in this kernel ({} is not Y): as root, \
                 echo Y > {}, or mount without --io-uring",
                crate::uring::ENABLE_PARAM,
                crate::uring::ENABLE_PARAM
            ),
            Error::IoUringRefused { path } => write!(
                f,
                "the FUSE session on {} was refused FUSE over io_uring at INIT (the kernel \
                 or the FUSE library declined the capability); the mount was undone: mount \
                 without --io-uring",
                path.display()
            ),
            Error::Volume(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Mount { source, .. } | Error::Unmount { source, .. } => Some(source),
            Error::Session(e) => Some(e),
            Error::Volume(e) => Some(e),
            _ => None,
        }
    }
}

impl From<cryptkeep_volume::Error> for Error {
    fn from(e: cryptkeep_volume::Error) -> Error {
        Error::Volume(e)
    }
}
