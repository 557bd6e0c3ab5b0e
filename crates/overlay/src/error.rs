//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Everything that can fail in `cryptkeep-overlay`.
///
/// Messages say what failed, where, and what to do. Authentication failures
/// are opaque on purpose: [`Error::WrongPassword`] for the config's key wrap,
/// [`Error::Auth`] for everything else that carries a tag.
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// A system call on a file failed.
    Io {
        /// What was being done, e.g. `"read"`.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `gocryptfs.conf` is not valid JSON of the expected shape.
    ConfigSyntax {
        /// The config file.
        path: PathBuf,
        /// What the parser said.
        detail: String,
    },
    /// The config names a feature flag this implementation does not know.
    UnknownFeatureFlag {
        /// The config file.
        path: PathBuf,
        /// The flag, as written.
        flag: String,
    },
    /// The config is well-formed but describes something this implementation
    /// refuses (wrong version, weak scrypt parameters, conflicting flags,
    /// FIDO2).
    ConfigUnsupported {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The password does not unlock the master key (or the config's
    /// encrypted key was altered).
    WrongPassword {
        /// The config file.
        path: PathBuf,
    },
    /// Authenticated decryption failed: the ciphertext (or its position, or
    /// the key) is not what it was written with.
    Auth {
        /// The cipher file, when known.
        path: Option<PathBuf>,
        /// The content block number, for file contents.
        block: Option<u64>,
    },
    /// A cipher file's 18-byte header is malformed.
    BadHeader {
        /// The cipher file, when known.
        path: Option<PathBuf>,
        /// What is wrong.
        detail: String,
    },
    /// An encrypted name (file, long-name file, xattr) does not decode or decrypt.
    BadName {
        /// The encrypted name.
        name: String,
        /// What is wrong.
        detail: &'static str,
    },
    /// A plaintext name cannot be stored (empty, `.`/`..`, contains `/` or
    /// NUL, or longer than 255 bytes).
    InvalidName {
        /// The name (lossy UTF-8).
        name: String,
        /// What is wrong.
        detail: &'static str,
    },
    /// A directory's `gocryptfs.diriv` is missing or malformed.
    DirIv {
        /// The diriv file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// `init` was pointed at a directory that is not empty.
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// Bad arguments to an operation (e.g. a master key of the wrong length).
    InvalidArgument(String),
    /// The crypto crate refused an operation.
    Crypto(cryptkeep_crypto::Error),
    /// The key holder (the keep) could not do the crypto: it exited, or it
    /// refused the request.
    KeyHolder(String),
}

impl Error {
    /// An [`Error::Io`] for `op` on `path`.
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Attaches a file path to errors that lack one (content and header errors).
    pub fn at(self, p: &Path) -> Error {
        match self {
            Error::Auth { path: None, block } => Error::Auth {
                path: Some(p.to_path_buf()),
                block,
            },
            Error::BadHeader { path: None, detail } => Error::BadHeader {
                path: Some(p.to_path_buf()),
                detail,
            },
            e => e,
        }
    }

    /// True for the opaque authentication failures ([`Error::Auth`] and
    /// [`Error::WrongPassword`]).
    pub fn is_auth(&self) -> bool {
        matches!(self, Error::Auth { .. } | Error::WrongPassword { .. })
    }
}

fn opt_path(p: &Option<PathBuf>) -> String {
    match p {
        Some(p) => format!(" of {}", p.display()),
        None => String::new(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "cannot {op} {}: {source}", path.display())
            }
            Error::ConfigSyntax { path, detail } => write!(
                f,
                "{} is not a valid gocryptfs config ({detail}): restore it from a backup",
                path.display()
            ),
            Error::UnknownFeatureFlag { path, flag } => write!(
                f,
                "{} uses the unknown feature flag \"{flag}\": this file system needs a newer \
                 gocryptfs-compatible tool",
                path.display()
            ),
            Error::ConfigUnsupported { path, detail } => {
                write!(f, "{}: unsupported config: {detail}", path.display())
            }
            Error::WrongPassword { path } => write!(
                f,
                "the password does not unlock {} (wrong password, or the config was altered)",
                path.display()
            ),
            Error::Auth { path, block } => match block {
                Some(b) => write!(
                    f,
                    "authentication failed for block {b}{}: the ciphertext was changed or \
                     damaged; restore the file from a backup",
                    opt_path(path)
                ),
                None => write!(
                    f,
                    "authentication failed{}: the ciphertext was changed or damaged",
                    opt_path(path)
                ),
            },
            Error::BadHeader { path, detail } => write!(
                f,
                "corrupt file header{}: {detail}; restore the file from a backup",
                opt_path(path)
            ),
            Error::BadName { name, detail } => {
                write!(f, "cannot decrypt the name \"{name}\": {detail}")
            }
            Error::InvalidName { name, detail } => {
                write!(f, "invalid file name \"{name}\": {detail}")
            }
            Error::DirIv { path, detail } => write!(
                f,
                "{}: {detail}; the names in this directory cannot be decrypted without it",
                path.display()
            ),
            Error::NotEmpty { path } => write!(
                f,
                "{} is not empty: create the file system in an empty directory",
                path.display()
            ),
            Error::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Error::Crypto(e) => write!(f, "{e}"),
            Error::KeyHolder(s) => write!(
                f,
                "the keep could not do the file system's crypto ({s}); if it has exited, \
                 unmount and mount again"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Crypto(e) => Some(e),
            _ => None,
        }
    }
}

impl From<cryptkeep_crypto::Error> for Error {
    fn from(e: cryptkeep_crypto::Error) -> Error {
        Error::Crypto(e)
    }
}

/// Shorthand for results in this crate.
pub type Result<T> = std::result::Result<T, Error>;
