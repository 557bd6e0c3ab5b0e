//! AES-256-GCM (NIST SP 800-38D) with 96-bit random nonces, as
//! `nonce(12) ‖ ciphertext ‖ tag(16)`, on AWS-LC through cryptkeep-crypto's
//! AEAD. A [`Gcm`] keeps its key schedule, so repeated messages pay for the
//! key setup once.

use cryptkeep_crypto::aead::{new_aead, Aead, AeadAlg, TAG_LEN};
use cryptkeep_crypto::Backend;
use zeroize::Zeroize;

use crate::Error;

/// Nonce length.
pub const NONCE_LEN: usize = 12;
/// Bytes added to a message: nonce and tag.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// Messages up to this long are staged on the stack, not the heap.
const SMALL: usize = 512;

/// An AES-256-GCM key, ready to use.
pub struct Gcm(Box<dyn Aead>);

impl Gcm {
    /// Prepares `key`.
    pub fn new(key: &[u8; 32]) -> Gcm {
        // A 32-byte key is always accepted.
        Gcm(new_aead(AeadAlg::Aes256Gcm, key, Backend::Accelerated)
            .or_else(|_| new_aead(AeadAlg::Aes256Gcm, key, Backend::Portable))
            .unwrap_or_else(|e| unreachable!("AES-256-GCM refused a 32-byte key: {e}")))
    }

    /// Encrypts `buf[..in_len]` in place into `nonce ‖ ct ‖ tag` with a
    /// random nonce; returns the output length. Fails if it does not fit.
    pub fn encrypt_in_place(
        &self,
        buf: &mut [u8],
        in_len: usize,
        aad: &[u8],
    ) -> Result<usize, Error> {
        let mut nonce = [0u8; NONCE_LEN];
        cryptkeep_crypto::rand::fill_random(&mut nonce)
            .map_err(|e| Error::Crypto(e.to_string()))?;
        self.encrypt_with_nonce_in_place(&nonce, buf, in_len, aad)
    }

    /// [`Gcm::encrypt_in_place`] with a given nonce (known-answer tests).
    #[doc(hidden)]
    pub fn encrypt_with_nonce_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        buf: &mut [u8],
        in_len: usize,
        aad: &[u8],
    ) -> Result<usize, Error> {
        let out_len = in_len + OVERHEAD;
        if in_len > buf.len() || out_len > buf.len() {
            return Err(Error::Crypto(format!(
                "{in_len} bytes need {out_len} bytes of room, the buffer has {}",
                buf.len()
            )));
        }
        // Small messages go through the stack: inside the keep every heap
        // block is secret memory, allocated under a lock and wiped on free.
        let mut small = [0u8; SMALL];
        let mut big = Vec::new();
        let pt: &mut [u8] = if in_len <= SMALL {
            &mut small[..in_len]
        } else {
            big.resize(in_len, 0);
            &mut big
        };
        pt.copy_from_slice(&buf[..in_len]);
        let (head, rest) = buf.split_at_mut(NONCE_LEN);
        head.copy_from_slice(nonce);
        let r = self
            .0
            .seal(nonce, aad, pt, &mut rest[..in_len + TAG_LEN])
            .map_err(|e| Error::Crypto(e.to_string()));
        pt.zeroize();
        r.map(|_| out_len)
    }

    /// Decrypts `buf[..in_len]` (`nonce ‖ ct ‖ tag`) in place; returns the
    /// plaintext length. Fails on a wrong tag or a short input.
    pub fn decrypt_in_place(
        &self,
        buf: &mut [u8],
        in_len: usize,
        aad: &[u8],
    ) -> Result<usize, Error> {
        if in_len < OVERHEAD || in_len > buf.len() {
            return Err(Error::Crypto(format!(
                "{in_len} bytes are too short for AES-GCM"
            )));
        }
        let n = in_len - OVERHEAD;
        let mut small = [0u8; SMALL];
        let mut big = Vec::new();
        let pt: &mut [u8] = if n <= SMALL {
            &mut small[..n]
        } else {
            big.resize(n, 0);
            &mut big
        };
        let nonce: [u8; NONCE_LEN] = buf[..NONCE_LEN].try_into().unwrap_or_default();
        self.0
            .open(&nonce, aad, &buf[NONCE_LEN..in_len], pt)
            .map_err(|e| Error::Crypto(e.to_string()))?;
        buf[..n].copy_from_slice(pt);
        pt.zeroize();
        Ok(n)
    }

    /// Encrypts a message: `nonce ‖ ct ‖ tag`.
    pub fn encrypt(&self, msg: &[u8], aad: &[u8]) -> Result<Vec<u8>, Error> {
        let mut buf = vec![0u8; msg.len() + OVERHEAD];
        buf[..msg.len()].copy_from_slice(msg);
        let n = self.encrypt_in_place(&mut buf, msg.len(), aad)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Decrypts what [`Gcm::encrypt`] made.
    pub fn decrypt(&self, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>, Error> {
        let mut buf = sealed.to_vec();
        let n = self.decrypt_in_place(&mut buf, sealed.len(), aad)?;
        buf.truncate(n);
        Ok(buf)
    }
}
