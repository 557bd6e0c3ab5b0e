//! The accelerated AEAD backend: aws-lc's `EVP_AEAD` interface for
//! AES-256-GCM (which takes any non-empty nonce length, so gocryptfs's
//! 128-bit nonces work) and XChaCha20-Poly1305.
//!
//! One `EVP_AEAD_CTX` is keyed once; `EVP_AEAD_CTX_seal`/`_open` take it by
//! const pointer and do not modify it, so all threads share it.

use super::{check_open, check_seal, Aead, AeadAlg, AuthError, TAG_LEN};
use crate::{Backend, Error};
use aws_lc_sys as sys;
use std::ptr::NonNull;
use zeroize::Zeroize;

/// An aws-lc AEAD context with its key.
pub(super) struct AccelAead {
    alg: AeadAlg,
    ctx: NonNull<sys::EVP_AEAD_CTX>,
}

// SAFETY: the context is only read by seal/open after construction (they take
// a const pointer and keep no per-call state in it), and freed once in Drop;
// aws-lc documents EVP_AEAD_CTX as safe for concurrent seal/open.
unsafe impl Send for AccelAead {}
// SAFETY: see `Send`: shared access is read-only.
unsafe impl Sync for AccelAead {}

impl AccelAead {
    /// Keys `alg` (AES-256-GCM or XChaCha20-Poly1305) with a 32-byte key.
    pub(super) fn new(alg: AeadAlg, key: &[u8]) -> Result<AccelAead, Error> {
        // SAFETY: these functions return pointers to static EVP_AEAD tables.
        let aead = unsafe {
            match alg {
                AeadAlg::Aes256Gcm => sys::EVP_aead_aes_256_gcm(),
                AeadAlg::XChaCha20Poly1305 => sys::EVP_aead_xchacha20_poly1305(),
                AeadAlg::Aes256Siv => {
                    return Err(Error::Backend("aws-lc has no AES-SIV".into()));
                }
            }
        };
        // SAFETY: `aead` is a valid static table, `key` is valid for
        // key.len() bytes (the caller checked it equals the AEAD's key length),
        // and the tag length is the AEAD's full 16 bytes.
        let ctx = unsafe { sys::EVP_AEAD_CTX_new(aead, key.as_ptr(), key.len(), TAG_LEN) };
        let ctx = NonNull::new(ctx)
            .ok_or_else(|| Error::Backend(format!("EVP_AEAD_CTX_new failed for {alg}")))?;
        Ok(AccelAead { alg, ctx })
    }
}

impl Drop for AccelAead {
    fn drop(&mut self) {
        // SAFETY: we own the context; EVP_AEAD_CTX_free cleanses the key state.
        unsafe { sys::EVP_AEAD_CTX_free(self.ctx.as_ptr()) }
    }
}

impl Aead for AccelAead {
    fn alg(&self) -> AeadAlg {
        self.alg
    }

    fn implementation(&self) -> super::AeadImpl {
        super::AeadImpl::AwsLc
    }

    fn backend(&self) -> Backend {
        Backend::Accelerated
    }

    fn seal(&self, nonce: &[u8], ad: &[u8], plaintext: &[u8], out: &mut [u8]) -> Result<(), Error> {
        check_seal(self.alg, nonce, plaintext, out)?;
        let mut out_len = 0usize;
        // SAFETY: the context is keyed; every pointer/length pair describes a
        // live slice; `out` (plaintext + 16 bytes, checked above) is a distinct
        // &mut borrow, so it cannot overlap `plaintext`, `nonce` or `ad`.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_seal(
                self.ctx.as_ptr(),
                out.as_mut_ptr(),
                &mut out_len,
                out.len(),
                nonce.as_ptr(),
                nonce.len(),
                plaintext.as_ptr(),
                plaintext.len(),
                ad.as_ptr(),
                ad.len(),
            )
        };
        if ok != 1 || out_len != out.len() {
            return Err(Error::Backend(format!(
                "EVP_AEAD_CTX_seal failed for {}",
                self.alg
            )));
        }
        Ok(())
    }

    fn open(
        &self,
        nonce: &[u8],
        ad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
    ) -> Result<(), AuthError> {
        check_open(self.alg, nonce, sealed, out)?;
        let mut out_len = 0usize;
        // SAFETY: as in `seal`; `out` holds sealed.len() - 16 bytes (checked),
        // which is what open writes at most, and does not overlap the inputs.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_open(
                self.ctx.as_ptr(),
                out.as_mut_ptr(),
                &mut out_len,
                out.len(),
                nonce.as_ptr(),
                nonce.len(),
                sealed.as_ptr(),
                sealed.len(),
                ad.as_ptr(),
                ad.len(),
            )
        };
        if ok != 1 || out_len != out.len() {
            out.zeroize();
            // Clear aws-lc's thread-local error queue so it does not pile up.
            // SAFETY: no preconditions.
            unsafe { sys::ERR_clear_error() };
            return Err(AuthError);
        }
        Ok(())
    }
}
