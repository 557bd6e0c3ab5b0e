//! The crate's one error type.

use std::fmt;

/// Everything that can fail in `cryptkeep-crypto`.
///
/// Messages say what failed, with which parameters, and what to do about it.
/// No variant carries key material.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The cipher specification is not one this crate implements
    /// (the string is the specification as given).
    UnsupportedCipher(String),
    /// The hash name is not one this crate implements.
    UnsupportedHash(String),
    /// The authenticated sector mode (LUKS2 segment `encryption` plus
    /// `integrity.type`, or cryptsetup's `--cipher`/`--integrity`) is not
    /// one [`crate::sector_aead`] implements.
    UnsupportedIntegrity {
        /// The encryption (cipher) string as given.
        encryption: String,
        /// The integrity string as given.
        integrity: String,
    },
    /// The backend name is neither `accelerated` nor `portable`.
    UnsupportedBackend(String),
    /// The key has the wrong length for the cipher.
    InvalidKeySize {
        /// The cipher specification, e.g. `aes-xts-plain64`.
        spec: String,
        /// The key length given, in bytes.
        got: usize,
        /// The lengths the cipher accepts, in bytes, e.g. `"32 or 64"`.
        allowed: &'static str,
    },
    /// A buffer or size parameter has a length the operation cannot use.
    InvalidLength {
        /// What was wrong, e.g. `"sector size"` or `"AF material"`.
        what: &'static str,
        /// The length given.
        got: usize,
        /// What is required, e.g. `"a multiple of 16"`.
        expected: String,
    },
    /// A key-derivation function failed or was given parameters it rejects.
    Kdf(String),
    /// The crypto backend (aws-lc) reported a failure.
    Backend(String),
    /// The operating system's random number generator failed.
    Random,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnsupportedCipher(s) => write!(
                f,
                "unsupported cipher \"{s}\": use aes-xts-plain64, aes-xts-plain, aes-xts-plain64be, \
                 aes-cbc-essiv:sha256, aes-cbc-plain64, aes-cbc-plain or aes-ecb"
            ),
            Error::UnsupportedHash(s) => write!(
                f,
                "unsupported hash \"{s}\": use sha1, sha256, sha512 or ripemd160"
            ),
            Error::UnsupportedIntegrity {
                encryption,
                integrity,
            } => write!(
                f,
                "unsupported authenticated encryption \"{encryption}\" with integrity \"{integrity}\": \
                 use aes-xts-plain64 with hmac(sha256), hmac(sha1) or hmac(sha512) \
                 (--integrity hmac-sha256 …), aegis128-random with aead, \
                 chacha20-random with poly1305, or aes-gcm-random with aead"
            ),
            Error::UnsupportedBackend(s) => write!(
                f,
                "unknown crypto backend \"{s}\": use \"accelerated\" or \"portable\""
            ),
            Error::InvalidKeySize { spec, got, allowed } => write!(
                f,
                "{spec} needs a key of {allowed} bytes, got {got} bytes ({} bits): \
                 pass a key size the cipher supports",
                got * 8
            ),
            Error::InvalidLength {
                what,
                got,
                expected,
            } => write!(f, "invalid {what}: got {got}, expected {expected}"),
            Error::Kdf(s) => write!(f, "key derivation failed: {s}"),
            Error::Backend(s) => write!(
                f,
                "crypto backend failed: {s}; retry with the portable backend"
            ),
            Error::Random => write!(
                f,
                "the system random number generator failed (getrandom): check /dev/urandom"
            ),
        }
    }
}

impl std::error::Error for Error {}
