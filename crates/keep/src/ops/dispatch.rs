//! [`Ops`]: the state a keep holds for its enclave-style operations and
//! the in-place dispatcher the ring handler calls: read `buf[..in_len]`,
//! answer into `buf`, return the answer's length or a status. Input comes
//! from a possibly compromised I/O process; bad input is a status, never a
//! panic.

use std::sync::Mutex;

use zeroize::Zeroizing;

use super::gcm::Gcm;
use super::rsa::RsaKeyPair;
use super::seal::SealKey;
use crate::proto::*;

/// A keep's operation state: sealing key, message key, RSA key pair.
pub struct Ops {
    seal: SealKey,
    message: Gcm,
    rsa: Mutex<Option<RsaKeyPair>>,
}

impl Ops {
    /// State with `seal` and a fresh random AES-256-GCM message key.
    pub fn new(seal: SealKey) -> Ops {
        let mut k = Zeroizing::new([0u8; 32]);
        cryptkeep_crypto::rand::fill_random(&mut k[..])
            .unwrap_or_else(|e| panic!("no randomness for the message key: {e}"));
        Ops {
            seal,
            message: Gcm::new(&k),
            rsa: Mutex::new(None),
        }
    }

    fn with_rsa<R>(&self, f: impl FnOnce(&RsaKeyPair) -> Result<R, u32>) -> Result<R, u32> {
        let g = self.rsa.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_ref() {
            Some(k) => f(k),
            None => Err(STATUS_FAILED),
        }
    }

    /// Answers one operation in place (see the module doc).
    pub fn handle(&self, op: u32, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        if in_len > buf.len() {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        let put = |buf: &mut [u8], out: &[u8]| -> Result<usize, u32> {
            buf.get_mut(..out.len())
                .ok_or(STATUS_FAILED)?
                .copy_from_slice(out);
            Ok(out.len())
        };
        let failed = |_| STATUS_FAILED;
        match op {
            OP_SHA256 => {
                let d = super::sha256(&buf[..in_len]);
                put(buf, &d)
            }
            OP_SEAL => self.seal.seal_in_place(buf, in_len).map_err(failed),
            OP_UNSEAL => self.seal.unseal_in_place(buf, in_len).map_err(failed),
            OP_GCM_ENCRYPT => self
                .message
                .encrypt_in_place(buf, in_len, &[])
                .map_err(failed),
            OP_GCM_DECRYPT => self
                .message
                .decrypt_in_place(buf, in_len, &[])
                .map_err(failed),
            OP_RSA_GENERATE => {
                let k = RsaKeyPair::generate_2048().map_err(failed)?;
                let public = k.public_key_der();
                let n = put(buf, &public)?;
                *self.rsa.lock().unwrap_or_else(|p| p.into_inner()) = Some(k);
                Ok(n)
            }
            OP_RSA_ENCRYPT => {
                let ct =
                    self.with_rsa(|k| k.encrypt_oaep_sha256(&buf[..in_len]).map_err(failed))?;
                put(buf, &ct)
            }
            OP_RSA_DECRYPT => {
                let pt =
                    self.with_rsa(|k| k.decrypt_oaep_sha256(&buf[..in_len]).map_err(failed))?;
                let pt = Zeroizing::new(pt);
                put(buf, &pt)
            }
            OP_RSA_SIGN => {
                let sig = self.with_rsa(|k| k.sign_pss_sha256(&buf[..in_len]).map_err(failed))?;
                put(buf, &sig)
            }
            _ => Err(STATUS_UNSUPPORTED),
        }
    }
}
