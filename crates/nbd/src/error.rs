//! The crate's error type: what failed serving an export, or on which
//! server and export the client failed, and how a client error maps to an
//! errno for the volume engine and the CLI.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What can go wrong serving (or reaching) an NBD export.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A socket operation of the server failed.
    Io {
        /// What was being done ("bind unix:/run/x.sock", "accept", ...).
        what: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// An endpoint is not `unix:PATH` or `tcp:ADDR:PORT`.
    Endpoint(String),
    /// A unix socket path is taken: a live process listens there, or it
    /// is not a stale socket of this user (a file, a symlink, another
    /// user's socket), which is never removed.
    InUse(String),
    /// The URI is not one the client understands.
    Uri {
        /// The URI as given.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server cannot be reached (connect failed).
    Unreachable {
        /// The server's address as the URI names it.
        server: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The server does not know the export.
    UnknownExport {
        /// The server's address.
        server: String,
        /// The export name asked for.
        export: String,
        /// The server's message, if any.
        message: String,
    },
    /// The server refused an option of the handshake.
    Refused {
        /// The server's address.
        server: String,
        /// What was asked for.
        what: String,
        /// The server's reply code (`NBD_REP_ERR_*`).
        code: u32,
        /// The server's message, if any.
        message: String,
    },
    /// The server accepted the connection but did not finish the handshake
    /// in time (typically: it serves one client at a time and has one).
    HandshakeTimeout {
        /// The server's address.
        server: String,
        /// How long it was given, in seconds.
        seconds: u64,
    },
    /// The export is read-only but writes were asked for.
    ReadOnly {
        /// The server's address.
        server: String,
        /// The export name.
        export: String,
    },
    /// The peer broke the protocol (bad magic, wrong cookie, oversized or
    /// inconsistent reply); the connection is dropped.
    Protocol(String),
    /// The server answered a request with an error (`NBD_E*`).
    Server {
        /// The request ("read", "write", "flush", ...).
        what: &'static str,
        /// The errno the server sent.
        errno: u32,
        /// The server's message, if any.
        message: String,
    },
    /// The export does not support an operation.
    Unsupported(&'static str),
    /// The client's connection broke while talking to the server.
    Connection(io::Error),
    /// A TLS certificate, key or CA file cannot be used.
    TlsFile {
        /// What the file was to hold ("certificate", "private key", ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// TLS with the peer failed (the handshake, or the peer's certificate).
    Tls {
        /// The peer's address.
        peer: String,
        /// What failed.
        reason: String,
    },
    /// The server stayed unreachable for longer than the configured timeout.
    TimedOut {
        /// The server's address.
        server: String,
        /// The timeout in seconds.
        seconds: u64,
        /// The last error seen.
        last: String,
    },
}

impl Error {
    /// The errno this error stands for: the server's errno for its error
    /// replies, `EROFS` for a read-only export, `EOPNOTSUPP` for an
    /// unsupported operation, `EIO` for everything else.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Server { errno, .. } => match *errno {
                0 => libc::EIO,
                e => i32::try_from(e).unwrap_or(libc::EIO),
            },
            Error::ReadOnly { .. } => libc::EROFS,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::Connection(e) => e.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        }
    }

    /// Whether the connection is unusable after this error (it must be
    /// dropped and made again): it broke, the peer broke the protocol, or
    /// the server said it is shutting down (`ESHUTDOWN`: the request may
    /// succeed once it is back).
    pub(crate) fn is_lost(&self) -> bool {
        matches!(self, Error::Connection(_) | Error::Protocol(_))
            || matches!(self, Error::Server { errno, .. } if *errno == crate::proto::err::ESHUTDOWN)
    }

    pub(crate) fn protocol(msg: impl Into<String>) -> Error {
        Error::Protocol(msg.into())
    }

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
            Error::InUse(s) => write!(
                f,
                "{s} is taken (a process listens there, or it is not a stale socket of this user): choose another path"
            ),
            Error::Uri { uri, reason } => write!(f, "bad NBD URI {uri:?}: {reason}"),
            Error::Unreachable { server, source } => {
                write!(f, "cannot reach the NBD server {server}: {source}")
            }
            Error::UnknownExport {
                server,
                export,
                message,
            } => {
                write!(f, "the NBD server {server} has no export {export:?}")?;
                if !message.is_empty() {
                    write!(f, " ({message})")?;
                }
                Ok(())
            }
            Error::Refused {
                server,
                what,
                code,
                message,
            } => {
                write!(
                    f,
                    "the NBD server {server} refused {what} (reply {})",
                    code & !crate::proto::rep::FLAG_ERROR
                )?;
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            Error::HandshakeTimeout { server, seconds } => write!(
                f,
                "the NBD server {server} accepted the connection but did not answer the handshake within {seconds} s"
            ),
            Error::ReadOnly { server, export } => write!(
                f,
                "the NBD server {server} exports {export:?} read-only and refuses writes"
            ),
            Error::Protocol(msg) => write!(f, "NBD protocol error: {msg}"),
            Error::Server {
                what,
                errno,
                message,
            } => {
                let e = io::Error::from_raw_os_error(i32::try_from(*errno).unwrap_or(libc::EIO));
                write!(f, "the NBD server failed the {what}: {e}")?;
                if !message.is_empty() {
                    write!(f, " ({message})")?;
                }
                Ok(())
            }
            Error::Unsupported(what) => write!(f, "the NBD export does not support {what}"),
            Error::Connection(e) => write!(f, "NBD connection failed: {e}"),
            Error::TlsFile { what, path, reason } => write!(
                f,
                "cannot use the TLS {what} {}: {reason}",
                path.display()
            ),
            Error::Tls { peer, reason } => write!(f, "TLS with {peer} failed: {reason}"),
            Error::TimedOut {
                server,
                seconds,
                last,
            } => write!(
                f,
                "the NBD server {server} stayed unreachable for {seconds} s ({last})"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Unreachable { source, .. }
            | Error::Io { source, .. }
            | Error::Connection(source) => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    /// A broken client connection.
    fn from(e: io::Error) -> Error {
        Error::Connection(e)
    }
}

impl From<Error> for io::Error {
    /// The `io::Error` of [`Error::errno`] (the client reports the details
    /// on standard error where it gives up).
    fn from(e: Error) -> io::Error {
        match e {
            Error::Connection(e) => e,
            e => io::Error::from_raw_os_error(e.errno()),
        }
    }
}
