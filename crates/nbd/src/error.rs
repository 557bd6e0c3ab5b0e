//! The crate's error type.

use std::fmt;
use std::io;

/// What can go wrong serving (or reaching) an NBD export.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A socket operation failed.
    Io {
        /// What was being done ("bind unix:/run/x.sock", "accept", ...).
        what: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// An endpoint is not `unix:PATH` or `tcp:ADDR:PORT`.
    Endpoint(String),
    /// The peer broke the protocol; the connection is closed.
    Protocol(String),
    /// A unix socket path is already served by a live process.
    InUse(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Endpoint(s) => write!(
                f,
                "bad NBD endpoint {s:?}: expected unix:PATH or tcp:ADDR:PORT"
            ),
            Error::Protocol(s) => write!(f, "NBD protocol violation: {s}"),
            Error::InUse(s) => write!(
                f,
                "{s} is a socket another process is listening on; choose another path"
            ),
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
