//! [`Error`]: everything that can go wrong reading an integrity image.

use std::fmt;

/// What went wrong, where, and what to do about it.
#[derive(Debug)]
pub enum Error {
    /// Reading the image failed.
    Io {
        /// What was being read.
        what: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// No "integrt" superblock at the start of the image.
    NotIntegrity,
    /// The superblock holds a value the kernel would refuse.
    BadSuperblock(String),
    /// The superblock asks for something this implementation cannot do
    /// (yet): say what.
    Unsupported(String),
    /// The tag of a block does not match its data (the kernel answers
    /// `EILSEQ`).
    TagMismatch {
        /// The first 512-byte sector of the block, counted in the
        /// provided data.
        sector: u64,
    },
    /// A tag algorithm or key that cannot be used.
    BadHash(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, source } => write!(f, "cannot read {what}: {source}"),
            Error::NotIntegrity => write!(
                f,
                "no dm-integrity superblock (magic \"integrt\") at the start of the device"
            ),
            Error::BadSuperblock(why) => write!(f, "damaged dm-integrity superblock: {why}"),
            Error::Unsupported(what) => write!(f, "not supported: {what}"),
            Error::TagMismatch { sector } => write!(
                f,
                "integrity tag mismatch at sector {sector}: the data or its tag was changed"
            ),
            Error::BadHash(why) => write!(f, "integrity algorithm: {why}"),
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
