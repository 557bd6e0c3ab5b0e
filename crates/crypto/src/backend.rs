//! Which implementation runs the block cipher.

use crate::Error;
use std::fmt;

/// The implementation behind a [`crate::SectorCipher`] or an AEAD.
///
/// * `Accelerated`: aws-lc's EVP interface (AES-NI/VAES assembly). aws-lc has no
///   AES-128-XTS or AES-192-XTS and refuses XTS keys whose halves are equal;
///   for those, the accelerated request is served by the portable code, and
///   the cipher's [`crate::SectorCipher::backend`] reports `Portable`.
///   For AEADs, AES-256-GCM runs on this crate's VAES/AVX2 code where the
///   CPU has it (see [`crate::aead::AeadImpl`]).
/// * `Portable`: pure Rust on the `aes` crate (which itself detects AES-NI
///   and VAES at run time), with this crate's own XTS and CBC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// aws-lc (the default).
    #[default]
    Accelerated,
    /// Pure Rust.
    Portable,
}

impl Backend {
    /// Both backends, accelerated first.
    pub const ALL: [Backend; 2] = [Backend::Accelerated, Backend::Portable];

    /// Parses `accelerated` (or `aws-lc`) and `portable` (or `rust`).
    pub fn parse(s: &str) -> Result<Backend, Error> {
        match s.to_ascii_lowercase().as_str() {
            "accelerated" | "aws-lc" | "awslc" => Ok(Backend::Accelerated),
            "portable" | "rust" => Ok(Backend::Portable),
            _ => Err(Error::UnsupportedBackend(s.to_string())),
        }
    }

    /// The name [`Backend::parse`] accepts: `accelerated` or `portable`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Accelerated => "accelerated",
            Backend::Portable => "portable",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
