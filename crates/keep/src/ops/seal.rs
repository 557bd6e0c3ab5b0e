//! Sealing: a blob only a keep with the same sealing key opens
//! (docs/format/sealed-blob.md). Only the runtime keep seals; its key is
//! random and lives as long as the keep. Blob: `"CKS1" ‖ nonce(12) ‖ ct ‖ tag(16)`,
//! AES-256-GCM with the magic as associated data.

use zeroize::Zeroizing;

use super::gcm::{Gcm, OVERHEAD};
use crate::Error;

/// The blob's first four bytes.
pub const MAGIC: &[u8; 4] = b"CKS1";
/// Bytes a sealed blob adds to its content.
pub const SEAL_OVERHEAD: usize = 4 + OVERHEAD;

/// A sealing key (the key bytes are wiped once the cipher is set up).
pub struct SealKey(Gcm);

impl SealKey {
    /// A random key, made when the runtime keep starts.
    pub fn random() -> SealKey {
        let mut k = Zeroizing::new([0u8; 32]);
        // If the system RNG failed, sealing would be unsafe: refuse loudly.
        cryptkeep_crypto::rand::fill_random(&mut k[..])
            .unwrap_or_else(|e| panic!("no randomness for the sealing key: {e}"));
        SealKey(Gcm::new(&k))
    }

    /// Seals `buf[..in_len]` in place; returns the blob's length.
    pub fn seal_in_place(&self, buf: &mut [u8], in_len: usize) -> Result<usize, Error> {
        if in_len + SEAL_OVERHEAD > buf.len() {
            return Err(Error::Crypto(format!(
                "sealing {in_len} bytes needs {} bytes of room",
                in_len + SEAL_OVERHEAD
            )));
        }
        buf.copy_within(..in_len, 4);
        buf[..4].copy_from_slice(MAGIC);
        let n = self.0.encrypt_in_place(&mut buf[4..], in_len, MAGIC)?;
        Ok(4 + n)
    }

    /// Opens a blob `buf[..in_len]` in place; returns the content's length.
    pub fn unseal_in_place(&self, buf: &mut [u8], in_len: usize) -> Result<usize, Error> {
        if in_len < SEAL_OVERHEAD || in_len > buf.len() || &buf[..4] != MAGIC {
            return Err(Error::Crypto("not a cryptkeep sealed blob (CKS1)".into()));
        }
        let n = self.0.decrypt_in_place(&mut buf[4..], in_len - 4, MAGIC)?;
        buf.copy_within(4..4 + n, 0);
        Ok(n)
    }

    /// Seals `data`.
    pub fn seal(&self, data: &[u8]) -> Result<Vec<u8>, Error> {
        let mut b = vec![0u8; data.len() + SEAL_OVERHEAD];
        b[..data.len()].copy_from_slice(data);
        let n = self.seal_in_place(&mut b, data.len())?;
        b.truncate(n);
        Ok(b)
    }

    /// Opens a blob.
    pub fn unseal(&self, blob: &[u8]) -> Result<Vec<u8>, Error> {
        let mut b = blob.to_vec();
        let n = self.unseal_in_place(&mut b, blob.len())?;
        b.truncate(n);
        Ok(b)
    }
}
