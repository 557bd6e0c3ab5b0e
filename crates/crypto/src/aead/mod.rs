//! Authenticated encryption with associated data for whole messages:
//! AES-256-GCM (NIST SP 800-38D, any nonce length, 16-byte tag), AES-SIV
//! (RFC 5297, 64-byte key, the nonce as the last header) and
//! XChaCha20-Poly1305 (draft-irtf-cfrg-xchacha, 24-byte nonce).
//!
//! The sealed form is the algorithm's own layout: `ciphertext ‖ tag` for GCM
//! and XChaCha20-Poly1305, `SIV ‖ ciphertext` for AES-SIV (as RFC 5297 and
//! gocryptfs lay it out). Every tag is 16 bytes.
//!
//! [`Backend::Accelerated`] runs GCM on this crate's VAES/VPCLMULQDQ code
//! where the CPU has those but no AVX-512 (x86-64; with AVX-512 aws-lc's
//! own VAES code is wider), and otherwise, like
//! XChaCha20-Poly1305, on aws-lc's `EVP_AEAD` (one keyed context, shared
//! by all threads); AES-SIV has no aws-lc implementation and always runs
//! on the portable code. [`new_aead_with`] picks the code exactly.
//! [`Backend::Portable`] is RustCrypto's `aes-gcm`, `aes-siv` and
//! `chacha20poly1305`.

mod accel;
mod portable;
#[cfg(target_arch = "x86_64")]
mod vaes_gcm;

use crate::{Backend, Error};
use std::fmt;

/// The tag (or SIV) length of every algorithm here, in bytes.
pub const TAG_LEN: usize = 16;

/// An AEAD algorithm.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AeadAlg {
    /// AES-256-GCM; nonces of 12 or 16 bytes (16-byte nonces go through
    /// GHASH as SP 800-38D specifies).
    Aes256Gcm,
    /// AES-SIV with a 64-byte key (CMAC key ‖ CTR key), S2V over the
    /// headers `[associated data, nonce]`; 16-byte nonces.
    Aes256Siv,
    /// XChaCha20-Poly1305, 24-byte nonces.
    XChaCha20Poly1305,
}

impl AeadAlg {
    /// Key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            AeadAlg::Aes256Gcm | AeadAlg::XChaCha20Poly1305 => 32,
            AeadAlg::Aes256Siv => 64,
        }
    }

    /// Whether `n` is a nonce length this crate accepts for the algorithm.
    pub fn nonce_len_ok(self, n: usize) -> bool {
        match self {
            AeadAlg::Aes256Gcm => n == 12 || n == 16,
            AeadAlg::Aes256Siv => n == 16,
            AeadAlg::XChaCha20Poly1305 => n == 24,
        }
    }

    /// A short name, e.g. `aes-256-gcm`.
    pub fn name(self) -> &'static str {
        match self {
            AeadAlg::Aes256Gcm => "aes-256-gcm",
            AeadAlg::Aes256Siv => "aes-256-siv",
            AeadAlg::XChaCha20Poly1305 => "xchacha20-poly1305",
        }
    }
}

impl fmt::Display for AeadAlg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Opening failed: the tag did not verify (the message, nonce, associated
/// data or key is not the one it was sealed with), or the sealed message was
/// too short to hold a tag. Deliberately carries no detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthError;

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("message authentication failed: the data was changed, or the key is wrong")
    }
}

impl std::error::Error for AuthError {}

/// The code that runs an [`Aead`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AeadImpl {
    /// This crate's AES-256-GCM on 256-bit VAES and VPCLMULQDQ with AVX2
    /// (x86-64; [`Backend::Accelerated`]'s GCM where the CPU has them and
    /// no AVX-512).
    VaesAvx2,
    /// aws-lc's `EVP_AEAD` ([`Backend::Accelerated`] otherwise).
    AwsLc,
    /// RustCrypto's crates ([`Backend::Portable`], and AES-SIV always).
    RustCrypto,
}

impl AeadImpl {
    /// Every implementation, fastest first.
    pub const ALL: [AeadImpl; 3] = [AeadImpl::VaesAvx2, AeadImpl::AwsLc, AeadImpl::RustCrypto];

    /// A short name: `vaes-avx2`, `aws-lc` or `rustcrypto`.
    pub fn name(self) -> &'static str {
        match self {
            AeadImpl::VaesAvx2 => "vaes-avx2",
            AeadImpl::AwsLc => "aws-lc",
            AeadImpl::RustCrypto => "rustcrypto",
        }
    }
}

/// A keyed AEAD, usable from many threads at once.
pub trait Aead: Send + Sync {
    /// The algorithm.
    fn alg(&self) -> AeadAlg;

    /// The backend that actually runs it.
    fn backend(&self) -> Backend;

    /// The code that runs it.
    fn implementation(&self) -> AeadImpl;

    /// Seals `plaintext` into `out`, which must be exactly
    /// `plaintext.len() + TAG_LEN` bytes long (layout: see the module docs).
    /// AES-GCM and XChaCha20-Poly1305 read each plaintext byte once and tag
    /// the ciphertext they wrote into `out`, in every implementation here
    /// (the keep relies on it to seal from memory another process writes);
    /// AES-SIV reads the plaintext twice (S2V, then CTR).
    fn seal(&self, nonce: &[u8], ad: &[u8], plaintext: &[u8], out: &mut [u8]) -> Result<(), Error>;

    /// Opens `sealed` into `out`, which must be exactly
    /// `sealed.len() - TAG_LEN` bytes long. On failure `out` holds no
    /// plaintext (it is zeroed).
    fn open(&self, nonce: &[u8], ad: &[u8], sealed: &[u8], out: &mut [u8])
        -> Result<(), AuthError>;

    /// Opens `sealed` into `out` (as [`Aead::open`]) in two passes, the
    /// tag first: `out` is written only once the tag verified, so memory
    /// another process reads never holds plaintext (nor key stream) that
    /// did not authenticate. `sealed` is read twice: pass memory no one
    /// else writes. `None` when this implementation opens in one pass
    /// only: the caller then opens into memory of its own and copies.
    fn open_verified(
        &self,
        nonce: &[u8],
        ad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
    ) -> Option<Result<(), AuthError>> {
        let _ = (nonce, ad, sealed, out);
        None
    }

    /// Seals into a new vector of `plaintext.len() + TAG_LEN` bytes.
    fn seal_vec(&self, nonce: &[u8], ad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = vec![0u8; plaintext.len() + TAG_LEN];
        self.seal(nonce, ad, plaintext, &mut out)?;
        Ok(out)
    }

    /// Opens into a new vector of `sealed.len() - TAG_LEN` bytes.
    fn open_vec(&self, nonce: &[u8], ad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, AuthError> {
        let n = sealed.len().checked_sub(TAG_LEN).ok_or(AuthError)?;
        let mut out = vec![0u8; n];
        self.open(nonce, ad, sealed, &mut out)?;
        Ok(out)
    }
}

/// Keys `alg` with `key` on `backend`. AES-SIV always runs on the portable
/// backend (its [`Aead::backend`] says so); accelerated AES-256-GCM runs on
/// [`AeadImpl::VaesAvx2`] where the CPU allows.
pub fn new_aead(alg: AeadAlg, key: &[u8], backend: Backend) -> Result<Box<dyn Aead>, Error> {
    let choice = match (backend, alg) {
        (Backend::Accelerated, AeadAlg::Aes256Gcm) if vaes_preferred() => AeadImpl::VaesAvx2,
        (Backend::Accelerated, AeadAlg::Aes256Gcm | AeadAlg::XChaCha20Poly1305) => AeadImpl::AwsLc,
        _ => AeadImpl::RustCrypto,
    };
    new_aead_with(alg, key, choice)
}

/// Keys `alg` with `key` on exactly `imp` (for benchmarks and
/// cross-checks); fails if `imp` does not implement `alg` or this CPU
/// cannot run it.
pub fn new_aead_with(alg: AeadAlg, key: &[u8], imp: AeadImpl) -> Result<Box<dyn Aead>, Error> {
    if key.len() != alg.key_len() {
        return Err(Error::InvalidKeySize {
            spec: alg.name().to_string(),
            got: key.len(),
            allowed: if alg.key_len() == 64 { "64" } else { "32" },
        });
    }
    let unsupported = || Error::Backend(format!("{} does not run {alg} here", imp.name()));
    match imp {
        #[cfg(target_arch = "x86_64")]
        AeadImpl::VaesAvx2 if alg == AeadAlg::Aes256Gcm => {
            let key: &[u8; 32] = key.try_into().map_err(|_| unsupported())?;
            let g = vaes_gcm::VaesGcm::new(key).ok_or_else(unsupported)?;
            Ok(Box::new(g))
        }
        AeadImpl::AwsLc if alg != AeadAlg::Aes256Siv => {
            Ok(Box::new(accel::AccelAead::new(alg, key)?))
        }
        AeadImpl::RustCrypto => portable::new(alg, key),
        _ => Err(unsupported()),
    }
}

/// Whether this CPU runs [`AeadImpl::VaesAvx2`] and aws-lc has nothing
/// wider (its VAES GCM needs AVX-512).
fn vaes_preferred() -> bool {
    #[cfg(target_arch = "x86_64")]
    return vaes_gcm::preferred();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Checks the shapes of a seal call.
fn check_seal(alg: AeadAlg, nonce: &[u8], plaintext: &[u8], out: &[u8]) -> Result<(), Error> {
    if !alg.nonce_len_ok(nonce.len()) {
        return Err(Error::InvalidLength {
            what: "AEAD nonce",
            got: nonce.len(),
            expected: format!("a nonce length {alg} accepts"),
        });
    }
    if out.len() != plaintext.len() + TAG_LEN {
        return Err(Error::InvalidLength {
            what: "AEAD output buffer",
            got: out.len(),
            expected: format!("{} (plaintext + 16)", plaintext.len() + TAG_LEN),
        });
    }
    Ok(())
}

/// Checks the shapes of an open call.
fn check_open(alg: AeadAlg, nonce: &[u8], sealed: &[u8], out: &[u8]) -> Result<(), AuthError> {
    if !alg.nonce_len_ok(nonce.len())
        || sealed.len() < TAG_LEN
        || out.len() + TAG_LEN != sealed.len()
    {
        return Err(AuthError);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
