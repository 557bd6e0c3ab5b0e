//! The crate's error type.

use std::fmt;

/// Everything that can go wrong reading, writing or unlocking a LUKS header.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O call failed; `what` says which object at which offset.
    Io {
        /// What was being read or written, with its offset.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// No LUKS magic at offset 0 (nor a LUKS2 secondary header at a known offset).
    NotLuks,
    /// The header is present but malformed; `what` names the field and the problem.
    BadHeader {
        /// Which field is wrong and why.
        what: String,
    },
    /// No keyslot opened with the passphrase given.
    WrongPassphrase,
    /// Every keyslot (8 for LUKS1, 32 for LUKS2) or the keyslots area is in use.
    NoFreeKeyslot,
    /// The keyslot named is not active.
    KeyslotInactive(usize),
    /// The keyslot number is beyond the format's limit.
    KeyslotOutOfRange(usize),
    /// The keyslot named is already active.
    KeyslotActive(usize),
    /// The header carries a mandatory requirement we do not implement.
    UnmetRequirement(String),
    /// A valid header uses a feature this crate does not support.
    Unsupported(String),
    /// A caller-supplied option is invalid (key size, sector size, label…).
    InvalidArgument(String),
    /// The volume key given does not match the header's digest.
    WrongVolumeKey,
    /// A cryptographic primitive failed.
    Crypto(cryptkeep_crypto::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, source } => write!(f, "I/O error {what}: {source}"),
            Error::NotLuks => write!(
                f,
                "not a LUKS device: no LUKS magic at offset 0 (and no LUKS2 secondary header); \
                 check the path, or restore a header backup"
            ),
            Error::BadHeader { what } => write!(
                f,
                "invalid LUKS header: {what}; the header is damaged or was not written by cryptsetup; \
                 restore a header backup or try `cryptsetup repair`"
            ),
            Error::WrongPassphrase => write!(
                f,
                "no keyslot could be opened with this passphrase; check the passphrase or key file"
            ),
            Error::NoFreeKeyslot => write!(
                f,
                "no free keyslot (or no room left in the keyslots area); remove a keyslot first"
            ),
            Error::KeyslotInactive(n) => write!(f, "keyslot {n} is not active; list keyslots with `dump`"),
            Error::KeyslotOutOfRange(n) => write!(
                f,
                "keyslot {n} is out of range (LUKS1 has slots 0-7, LUKS2 slots 0-31)"
            ),
            Error::KeyslotActive(n) => write!(
                f,
                "keyslot {n} is already in use; choose another slot or remove it first"
            ),
            Error::UnmetRequirement(r) => write!(
                f,
                "the LUKS2 header has mandatory requirement '{r}' which this program does not support; \
                 finish the operation (e.g. reencryption) with cryptsetup first"
            ),
            Error::Unsupported(what) => write!(f, "unsupported LUKS feature: {what}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::WrongVolumeKey => write!(f, "the volume key does not match the header's digest"),
            Error::Crypto(e) => write!(f, "cryptographic operation failed: {e}"),
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
    fn from(e: cryptkeep_crypto::Error) -> Self {
        Error::Crypto(e)
    }
}

/// Shorthand for a [`Error::BadHeader`] with a formatted message.
pub(crate) fn bad(what: impl Into<String>) -> Error {
    Error::BadHeader { what: what.into() }
}
