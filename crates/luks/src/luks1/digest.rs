//! The LUKS1 master-key digest: PBKDF2(hash-spec, volume key, mk-digest-salt,
//! mk-digest-iter) truncated to 20 bytes (spec §2.4).

use cryptkeep_crypto::{kdf, Pbkdf};

use super::header::{Phdr, DIGEST_LEN};
use crate::error::Error;
use crate::util::ct_eq;

/// Compute the 20-byte digest of `key` with the header's parameters.
pub(crate) fn compute(h: &Phdr, key: &[u8]) -> Result<[u8; DIGEST_LEN], Error> {
    let kdf = Pbkdf::Pbkdf2 {
        hash: h.hash_alg()?,
        iterations: h.mk_digest_iter,
    };
    let d = kdf::derive(&kdf, key, &h.mk_digest_salt, DIGEST_LEN)?;
    let mut out = [0u8; DIGEST_LEN];
    out.copy_from_slice(d.as_slice());
    Ok(out)
}

/// Whether `key` matches the header's digest.
pub(crate) fn verify(h: &Phdr, key: &[u8]) -> Result<bool, Error> {
    if key.len() != h.key_bytes as usize {
        return Ok(false);
    }
    Ok(ct_eq(&compute(h, key)?, &h.mk_digest))
}
