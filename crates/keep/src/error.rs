//! The keep crate's error type.

use std::fmt;
use std::io;

/// Everything that can go wrong in the keep or on its transport.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    Sys {
        /// What was being done ("memfd_create", "mmap", "futex", ...).
        what: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// The keep (or, seen from the keep, the I/O process) is gone: its
    /// process died or closed its end. Requests fail with EIO from here on.
    Gone,
    /// A descriptor or message from the peer is malformed (out of range,
    /// overlapping, too long, unknown operation). Only that request fails.
    BadRequest(String),
    /// The shared-memory layout is not one this build understands.
    Layout(String),
    /// The keep refused or failed an operation; `status` is the wire status.
    Refused {
        /// The operation's name.
        op: &'static str,
        /// The wire status code (see [`crate::proto`]).
        status: u32,
        /// What it means.
        detail: String,
    },
    /// A sandboxing step (seccomp, Landlock, prctl) could not be applied.
    Sandbox(String),
    /// Secret memory could not be allocated or protected.
    SecretMem(String),
    /// A cryptographic primitive failed or refused its input.
    Crypto(String),
}

impl Error {
    /// A [`Error::Sys`] from the last OS error.
    pub fn last_os(what: &'static str) -> Error {
        Error::Sys {
            what,
            source: io::Error::last_os_error(),
        }
    }

    /// The errno a frontend should report: `EIO` for everything but
    /// malformed requests (`EINVAL`).
    pub fn errno(&self) -> i32 {
        match self {
            Error::BadRequest(_) => libc::EINVAL,
            _ => libc::EIO,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sys { what, source } => write!(f, "{what} failed: {source}"),
            Error::Gone => write!(
                f,
                "the keep is gone (its process exited or closed the channel)"
            ),
            Error::BadRequest(m) => write!(f, "malformed request: {m}"),
            Error::Layout(m) => write!(f, "unusable shared-memory layout: {m}"),
            Error::Refused { op, status, detail } => {
                write!(f, "the keep refused {op} (status {status}): {detail}")
            }
            Error::Sandbox(m) => write!(f, "sandbox: {m}"),
            Error::SecretMem(m) => write!(f, "secret memory: {m}"),
            Error::Crypto(m) => write!(f, "crypto: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sys { source, .. } => Some(source),
            _ => None,
        }
    }
}
