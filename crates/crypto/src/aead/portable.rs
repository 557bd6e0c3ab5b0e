//! The portable AEAD backend: RustCrypto's `aes-gcm` (12- and 16-byte
//! nonces), `aes-siv` (S2V headers `[ad, nonce]`, tag first) and
//! `chacha20poly1305` (XChaCha20-Poly1305).

use super::{check_open, check_seal, Aead, AeadAlg, AuthError, TAG_LEN};
use crate::{Backend, Error};
use aes_gcm::aead::consts::{U12, U16};
use aes_gcm::aead::inout::InOutBuf;
use aes_gcm::aead::{AeadCore, AeadInOut, KeyInit};
use aes_gcm::aes::Aes256;
use aes_gcm::AesGcm;
use zeroize::Zeroize;

/// Where the tag goes in the sealed message.
#[derive(Clone, Copy)]
enum TagAt {
    End,
    Front,
}

/// One RustCrypto AEAD behind the [`Aead`] trait.
struct Rc<T> {
    alg: AeadAlg,
    cipher: T,
    tag_at: TagAt,
}

/// Keys the portable implementation of `alg`; the key length is checked by the caller.
pub(super) fn new(alg: AeadAlg, key: &[u8]) -> Result<Box<dyn Aead>, Error> {
    let bad = || Error::InvalidKeySize {
        spec: alg.name().to_string(),
        got: key.len(),
        allowed: "32 or 64",
    };
    Ok(match alg {
        AeadAlg::Aes256Gcm => Box::new(Gcm {
            n12: Rc {
                alg,
                cipher: AesGcm::<Aes256, U12>::new_from_slice(key).map_err(|_| bad())?,
                tag_at: TagAt::End,
            },
            n16: Rc {
                alg,
                cipher: AesGcm::<Aes256, U16>::new_from_slice(key).map_err(|_| bad())?,
                tag_at: TagAt::End,
            },
        }),
        AeadAlg::Aes256Siv => Box::new(Rc {
            alg,
            cipher: aes_siv::Aes256SivAead::new_from_slice(key).map_err(|_| bad())?,
            tag_at: TagAt::Front,
        }),
        AeadAlg::XChaCha20Poly1305 => Box::new(Rc {
            alg,
            cipher: chacha20poly1305::XChaCha20Poly1305::new_from_slice(key).map_err(|_| bad())?,
            tag_at: TagAt::End,
        }),
    })
}

impl<T> Aead for Rc<T>
where
    T: AeadInOut + AeadCore<TagSize = U16> + Send + Sync,
{
    fn alg(&self) -> AeadAlg {
        self.alg
    }

    fn implementation(&self) -> super::AeadImpl {
        super::AeadImpl::RustCrypto
    }

    fn backend(&self) -> Backend {
        Backend::Portable
    }

    fn seal(&self, nonce: &[u8], ad: &[u8], plaintext: &[u8], out: &mut [u8]) -> Result<(), Error> {
        check_seal(self.alg, nonce, plaintext, out)?;
        let n = <&aead_nonce::Nonce<T>>::try_from(nonce).map_err(|_| Error::InvalidLength {
            what: "AEAD nonce",
            got: nonce.len(),
            expected: format!("a nonce length {} accepts", self.alg),
        })?;
        let (body, tag_slot) = match self.tag_at {
            TagAt::End => {
                let (b, t) = out.split_at_mut(plaintext.len());
                (b, t)
            }
            TagAt::Front => {
                let (t, b) = out.split_at_mut(TAG_LEN);
                (b, t)
            }
        };
        let buf =
            InOutBuf::new(plaintext, body).map_err(|_| Error::Backend("buffer size".into()))?;
        let tag = self
            .cipher
            .encrypt_inout_detached(n, ad, buf)
            .map_err(|_| Error::Backend(format!("{} seal failed", self.alg)))?;
        tag_slot.copy_from_slice(&tag);
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
        let n = <&aead_nonce::Nonce<T>>::try_from(nonce).map_err(|_| AuthError)?;
        let (body, tag) = match self.tag_at {
            TagAt::End => sealed.split_at(sealed.len() - TAG_LEN),
            TagAt::Front => {
                let (t, b) = sealed.split_at(TAG_LEN);
                (b, t)
            }
        };
        let tag = <&aead_nonce::Tag<T>>::try_from(tag).map_err(|_| AuthError)?;
        let buf = InOutBuf::new(body, out).map_err(|_| AuthError)?;
        let r = self.cipher.decrypt_inout_detached(n, ad, buf, tag);
        if r.is_err() {
            out.zeroize();
            return Err(AuthError);
        }
        Ok(())
    }
}

/// Nonce and tag array types of a RustCrypto AEAD.
mod aead_nonce {
    pub(super) type Nonce<T> = aes_gcm::aead::Nonce<T>;
    pub(super) type Tag<T> = aes_gcm::aead::Tag<T>;
}

/// AES-256-GCM keyed for both nonce lengths gocryptfs uses (96-bit for the
/// pre-HKDF master-key wrap, 128-bit everywhere else).
struct Gcm {
    n12: Rc<AesGcm<Aes256, U12>>,
    n16: Rc<AesGcm<Aes256, U16>>,
}

impl Aead for Gcm {
    fn alg(&self) -> AeadAlg {
        AeadAlg::Aes256Gcm
    }

    fn implementation(&self) -> super::AeadImpl {
        super::AeadImpl::RustCrypto
    }

    fn backend(&self) -> Backend {
        Backend::Portable
    }

    fn seal(&self, nonce: &[u8], ad: &[u8], plaintext: &[u8], out: &mut [u8]) -> Result<(), Error> {
        if nonce.len() == 12 {
            self.n12.seal(nonce, ad, plaintext, out)
        } else {
            self.n16.seal(nonce, ad, plaintext, out)
        }
    }

    fn open(
        &self,
        nonce: &[u8],
        ad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
    ) -> Result<(), AuthError> {
        if nonce.len() == 12 {
            self.n12.open(nonce, ad, sealed, out)
        } else {
            self.n16.open(nonce, ad, sealed, out)
        }
    }
}
