//! LUKS2 `pbkdf2` digests: PBKDF2(hash, volume key, salt, iterations) with
//! the hash's output length (spec §3.4, cryptsetup `luks2_digest_pbkdf2.c`).

use cryptkeep_crypto::{kdf, HashAlg, Pbkdf};

use super::json::{Digest, B64};
use super::validate::SALT_LEN;
use crate::error::{bad, Error};
use crate::util::{ct_eq, random_bytes};

/// Whether `key` matches digest `d`.
pub fn verify(d: &Digest, key: &[u8]) -> Result<bool, Error> {
    if d.kind != "pbkdf2" {
        return Err(Error::Unsupported(format!(
            "LUKS2 digest type '{}'",
            d.kind
        )));
    }
    let hash = HashAlg::parse(&d.hash)
        .map_err(|_| bad(format!("digest hash '{}' unsupported", d.hash)))?;
    let k = Pbkdf::Pbkdf2 {
        hash,
        iterations: d.iterations,
    };
    let out = kdf::derive(&k, key, &d.salt.0, d.digest.0.len())?;
    Ok(ct_eq(out.as_slice(), &d.digest.0))
}

/// A new digest of `key` with a fresh 32-byte salt.
pub fn create(key: &[u8], hash: HashAlg, iterations: u32) -> Result<Digest, Error> {
    let salt = random_bytes(SALT_LEN)?;
    let k = Pbkdf::Pbkdf2 { hash, iterations };
    let out = kdf::derive(&k, key, &salt, hash.digest_len())?;
    Ok(Digest {
        kind: "pbkdf2".into(),
        keyslots: Vec::new(),
        segments: vec!["0".into()],
        hash: hash.name().into(),
        iterations,
        salt: B64(salt),
        digest: B64(out.as_slice().to_vec()),
        extra: Default::default(),
    })
}
