//! The native AEADs of the random-IV modes, one sector at a time:
//! AEGIS-128 (kernel `aegis128`), ChaCha20-Poly1305 (RFC 7539/8439, kernel
//! `rfc7539(chacha20,poly1305)`, 12-byte nonce) and AES-GCM (SP 800-38D,
//! kernel `gcm(aes)`, 12-byte nonce). Each gets the associated data
//! dm-crypt builds (`sector_le64 ‖ IV`) and the IV as its nonce.

use super::aegis128::Aegis128;
use crate::aead::{new_aead, Aead, AeadAlg};
use crate::secret::ct_eq;
use crate::{Backend, Error};
use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{AeadInOut, KeyInit, Nonce, Tag};
use aes_gcm::aes::{Aes128, Aes192};
use aes_gcm::AesGcm;
use chacha20poly1305::ChaCha20Poly1305;
use zeroize::Zeroize;

/// A keyed native AEAD.
pub(super) enum Native {
    /// AEGIS-128 (16-byte key, 16-byte nonce).
    Aegis(Aegis128),
    /// ChaCha20-Poly1305 (RustCrypto; 32-byte key, 12-byte nonce).
    ChaCha(Box<ChaCha20Poly1305>),
    /// AES-128-GCM (RustCrypto).
    Gcm128(Box<AesGcm<Aes128, U12>>),
    /// AES-192-GCM (RustCrypto).
    Gcm192(Box<AesGcm<Aes192, U12>>),
    /// AES-256-GCM on the crate's fastest code for this CPU
    /// ([`crate::aead::new_aead`], accelerated backend).
    Gcm256(Box<dyn Aead>),
}

impl Native {
    /// Keys the AEAD of a random-IV mode; `key` was checked by the caller.
    pub(super) fn new(mode: super::spec::Mode, key: &[u8]) -> Result<Native, Error> {
        use super::spec::Mode;
        let bad = |allowed: &'static str| Error::InvalidKeySize {
            spec: format!("{mode:?}"),
            got: key.len(),
            allowed,
        };
        Ok(match mode {
            Mode::Aegis128 => {
                let k: &[u8; 16] = key.try_into().map_err(|_| bad("16"))?;
                Native::Aegis(Aegis128::new(k))
            }
            Mode::ChaCha20Poly1305 => Native::ChaCha(Box::new(
                ChaCha20Poly1305::new_from_slice(key).map_err(|_| bad("32"))?,
            )),
            Mode::AesGcm => match key.len() {
                16 => Native::Gcm128(Box::new(
                    AesGcm::new_from_slice(key).map_err(|_| bad("16, 24 or 32"))?,
                )),
                24 => Native::Gcm192(Box::new(
                    AesGcm::new_from_slice(key).map_err(|_| bad("16, 24 or 32"))?,
                )),
                32 => Native::Gcm256(new_aead(AeadAlg::Aes256Gcm, key, Backend::Accelerated)?),
                _ => return Err(bad("16, 24 or 32")),
            },
            Mode::XtsHmac(_) => return Err(bad("an AEAD key")),
        })
    }

    /// Encrypts one sector in place with nonce `iv` and associated data
    /// `ad`; writes the 16-byte tag to `tag`. `scratch` is a reusable buffer (it only ever holds ciphertext).
    pub(super) fn seal(
        &self,
        iv: &[u8],
        ad: &[u8],
        data: &mut [u8],
        tag: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let failed = || Error::Backend("sector AEAD seal failed".into());
        match self {
            Native::Aegis(a) => {
                let n: &[u8; 16] = iv.try_into().map_err(|_| failed())?;
                tag.copy_from_slice(&a.seal(n, ad, data));
            }
            Native::ChaCha(c) => tag.copy_from_slice(&rc_seal(&**c, iv, ad, data)?),
            Native::Gcm128(c) => tag.copy_from_slice(&rc_seal(&**c, iv, ad, data)?),
            Native::Gcm192(c) => tag.copy_from_slice(&rc_seal(&**c, iv, ad, data)?),
            Native::Gcm256(g) => {
                scratch.resize(data.len() + 16, 0);
                g.seal(iv, ad, data, scratch)?;
                data.copy_from_slice(&scratch[..data.len()]);
                tag.copy_from_slice(&scratch[data.len()..]);
            }
        }
        Ok(())
    }

    /// Checks and decrypts one sector in place; false when the tag does
    /// not verify (then `data` is zeroed).
    pub(super) fn open(
        &self,
        iv: &[u8],
        ad: &[u8],
        data: &mut [u8],
        tag: &[u8],
        scratch: &mut Vec<u8>,
    ) -> bool {
        let ok = match self {
            Native::Aegis(a) => match <&[u8; 16]>::try_from(iv) {
                Ok(n) => ct_eq(&a.open_raw(n, ad, data), tag),
                Err(_) => false,
            },
            Native::ChaCha(c) => rc_open(&**c, iv, ad, data, tag),
            Native::Gcm128(c) => rc_open(&**c, iv, ad, data, tag),
            Native::Gcm192(c) => rc_open(&**c, iv, ad, data, tag),
            Native::Gcm256(g) => {
                scratch.clear();
                scratch.extend_from_slice(data);
                scratch.extend_from_slice(tag);
                // The scratch holds ciphertext and tag only: nothing to wipe.
                g.open(iv, ad, scratch, data).is_ok()
            }
        };
        if !ok {
            data.zeroize();
        }
        ok
    }

    /// The AEGIS-128 engine, for the two-sector path.
    pub(super) fn aegis(&self) -> Option<&Aegis128> {
        match self {
            Native::Aegis(a) => Some(a),
            _ => None,
        }
    }
}

/// In-place detached seal with a RustCrypto AEAD.
fn rc_seal<T: AeadInOut>(c: &T, iv: &[u8], ad: &[u8], data: &mut [u8]) -> Result<Tag<T>, Error> {
    let n = <&Nonce<T>>::try_from(iv).map_err(|_| Error::InvalidLength {
        what: "sector AEAD nonce",
        got: iv.len(),
        expected: "12".into(),
    })?;
    c.encrypt_inout_detached(n, ad, data.into())
        .map_err(|_| Error::Backend("sector AEAD seal failed".into()))
}

/// In-place detached open with a RustCrypto AEAD; false on a bad tag.
fn rc_open<T: AeadInOut>(c: &T, iv: &[u8], ad: &[u8], data: &mut [u8], tag: &[u8]) -> bool {
    let (Ok(n), Ok(t)) = (<&Nonce<T>>::try_from(iv), <&Tag<T>>::try_from(tag)) else {
        return false;
    };
    c.decrypt_inout_detached(n, ad, data.into(), t).is_ok()
}
