//! The volume crate's error type and its mapping to errno values.

use std::fmt;
use std::io;

/// Everything that can go wrong in the sector engine.
///
/// Each variant maps to one errno through [`Error::errno`], which is what the
/// FUSE and NBD frontends hand to the kernel or the client.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call on the backing store failed.
    Io {
        /// The operation that failed ("read", "write", "fdatasync", ...).
        what: &'static str,
        /// Byte offset in the backing store where it failed.
        offset: u64,
        /// The operating system's error.
        source: io::Error,
    },
    /// The sector cipher refused or failed (wrong buffer size, backend error).
    Crypt(String),
    /// A write or discard was attempted on a volume opened read-only.
    ReadOnly,
    /// The request reaches past the end of the data segment.
    OutOfRange {
        /// First byte of the request, relative to the data segment.
        offset: u64,
        /// Length of the request in bytes.
        len: u64,
        /// Size of the data segment in bytes.
        size: u64,
    },
    /// The key process that holds the volume key is no longer reachable.
    KeepGone,
    /// The volume's geometry is unusable (sector size, data offset or size).
    Geometry(String),
    /// A sector of an authenticated volume failed its tag: its data or
    /// metadata was changed (or never written). Nothing of it is returned.
    Authentication {
        /// The first failing sector, in sector-size units from the start
        /// of the data segment.
        sector: u64,
    },
    /// The integrity layer under an authenticated volume failed.
    Integrity(String),
}

impl Error {
    /// The errno a frontend should report for this error: the OS error for
    /// I/O failures, `EIO` for crypto and keep failures, `EROFS` for writes to
    /// a read-only volume, `ENOSPC` for requests past the end, `EINVAL` for a
    /// bad geometry.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Crypt(_)
            | Error::KeepGone
            | Error::Authentication { .. }
            | Error::Integrity(_) => libc::EIO,
            Error::ReadOnly => libc::EROFS,
            Error::OutOfRange { .. } => libc::ENOSPC,
            Error::Geometry(_) => libc::EINVAL,
        }
    }

    pub(crate) fn io(what: &'static str, offset: u64, source: io::Error) -> Error {
        Error::Io {
            what,
            offset,
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io {
                what,
                offset,
                source,
            } => write!(
                f,
                "{what} of the backing store at byte {offset} failed: {source}; check the underlying file or device"
            ),
            Error::Crypt(msg) => write!(
                f,
                "sector encryption failed: {msg}; the volume key or cipher backend is unusable"
            ),
            Error::ReadOnly => write!(
                f,
                "the volume is open read-only; reopen it read-write to change it"
            ),
            Error::OutOfRange { offset, len, size } => write!(
                f,
                "request of {len} bytes at byte {offset} reaches past the end of the {size}-byte volume"
            ),
            Error::KeepGone => write!(
                f,
                "the key process (keep) holding the volume key is gone; close and reopen the volume"
            ),
            Error::Geometry(msg) => write!(f, "unusable volume geometry: {msg}"),
            Error::Authentication { sector } => write!(
                f,
                "sector {sector} failed authentication: its data or tag was changed on disk (or never written)"
            ),
            Error::Integrity(msg) => write!(f, "the integrity layer failed: {msg}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<cryptkeep_crypto::Error> for Error {
    fn from(e: cryptkeep_crypto::Error) -> Error {
        Error::Crypt(e.to_string())
    }
}
