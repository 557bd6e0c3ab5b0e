//! [`TagHash`]: the per-block tag of a standalone integrity device (the
//! kernel's `internal_hash`), computed as `integrity_sector_checksum`
//! does: over the superblock salt (with `fix_hmac`), the block's first
//! data sector as a little-endian u64, and the block's data; the digest
//! is cut (or zero-padded) to the tag size.

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroizing;

use crate::Error;

/// A tag algorithm, by integritysetup's name.
#[derive(Clone)]
pub enum TagHash {
    /// CRC-32C (Castagnoli), 4 bytes, stored little-endian.
    Crc32c,
    /// SHA-1, 20 bytes.
    Sha1,
    /// SHA-256, 32 bytes.
    Sha256,
    /// HMAC-SHA-1, keyed once (the inner and outer key blocks hashed;
    /// each tag starts from a copy).
    HmacSha1(Box<Hmac<Sha1>>),
    /// HMAC-SHA-256, keyed once.
    HmacSha256(Box<Hmac<Sha256>>),
    /// HMAC-SHA-512, keyed once.
    HmacSha512(Box<Hmac<Sha512>>),
}

impl std::fmt::Debug for TagHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl TagHash {
    /// Whether the algorithm takes a key (the hmac ones).
    pub fn is_keyed(&self) -> bool {
        matches!(
            self,
            TagHash::HmacSha1(_) | TagHash::HmacSha256(_) | TagHash::HmacSha512(_)
        )
    }

    /// The algorithm named `name` (`--integrity`), with `key` for the
    /// hmac ones (required there, refused elsewhere).
    pub fn by_name(name: &str, key: Option<Zeroizing<Vec<u8>>>) -> Result<TagHash, Error> {
        let need = |k: Option<Zeroizing<Vec<u8>>>| {
            k.filter(|k| !k.is_empty())
                .ok_or_else(|| Error::BadHash(format!("{name} needs a key (--integrity-key-file)")))
        };
        let h = match name {
            "crc32c" => TagHash::Crc32c,
            "sha1" => TagHash::Sha1,
            "sha256" => TagHash::Sha256,
            "hmac-sha1" | "hmac(sha1)" => return Ok(TagHash::HmacSha1(keyed(&need(key)?)?)),
            "hmac-sha256" | "hmac(sha256)" => return Ok(TagHash::HmacSha256(keyed(&need(key)?)?)),
            "hmac-sha512" | "hmac(sha512)" => return Ok(TagHash::HmacSha512(keyed(&need(key)?)?)),
            other => {
                return Err(Error::BadHash(format!(
                    "unknown or unsupported algorithm {other:?} (crc32c, sha1, sha256, \
                     hmac-sha1, hmac-sha256, hmac-sha512)"
                )))
            }
        };
        if key.is_some() {
            return Err(Error::BadHash(format!("{name} takes no key")));
        }
        Ok(h)
    }

    /// integritysetup's name of the algorithm.
    pub fn name(&self) -> &'static str {
        match self {
            TagHash::Crc32c => "crc32c",
            TagHash::Sha1 => "sha1",
            TagHash::Sha256 => "sha256",
            TagHash::HmacSha1(_) => "hmac-sha1",
            TagHash::HmacSha256(_) => "hmac-sha256",
            TagHash::HmacSha512(_) => "hmac-sha512",
        }
    }

    /// The digest size, the default tag size.
    pub fn digest_size(&self) -> usize {
        match self {
            TagHash::Crc32c => 4,
            TagHash::Sha1 | TagHash::HmacSha1(_) => 20,
            TagHash::Sha256 | TagHash::HmacSha256(_) => 32,
            TagHash::HmacSha512(_) => 64,
        }
    }

    /// Writes the tag of `data` (one block starting at data sector
    /// `sector`) into `out` (the tag size): the digest's first bytes, zero
    /// padded if the tag is longer.
    pub fn tag(&self, salt: Option<&[u8; 16]>, sector: u64, data: &[u8], out: &mut [u8]) {
        let sector = sector.to_le_bytes();
        let parts: [&[u8]; 3] = [salt.map_or(&[][..], |s| &s[..]), &sector, data];
        let mut digest = Zeroizing::new([0u8; 64]);
        let n = self.digest_size();
        match self {
            TagHash::Crc32c => {
                let mut c = 0u32;
                for p in parts {
                    c = crc32c::crc32c_append(c, p);
                }
                digest[..4].copy_from_slice(&c.to_le_bytes());
            }
            TagHash::Sha1 => hash_into::<Sha1>(&parts, &mut digest[..]),
            TagHash::Sha256 => hash_into::<Sha256>(&parts, &mut digest[..]),
            TagHash::HmacSha1(k) => mac_into(&**k, &parts, &mut digest[..]),
            TagHash::HmacSha256(k) => mac_into(&**k, &parts, &mut digest[..]),
            TagHash::HmacSha512(k) => mac_into(&**k, &parts, &mut digest[..]),
        }
        let m = out.len().min(n);
        out[..m].copy_from_slice(&digest[..m]);
        out[m..].fill(0);
    }
}

/// The digest of `parts` into the start of `out` (no allocation: this
/// runs once per block).
fn hash_into<D: Digest>(parts: &[&[u8]], out: &mut [u8]) {
    let mut d = D::new();
    for p in parts {
        d.update(p);
    }
    let r = d.finalize();
    out[..r.len()].copy_from_slice(&r);
}

/// An HMAC keyed with `key`.
fn keyed<M: Mac + KeyInit>(key: &[u8]) -> Result<Box<M>, Error> {
    <M as KeyInit>::new_from_slice(key)
        .map(Box::new)
        .map_err(|e| Error::BadHash(format!("the HMAC key: {e}")))
}

/// The MAC of `parts` under the keyed `mac` into the start of `out`.
fn mac_into<M: Mac + Clone>(mac: &M, parts: &[&[u8]], out: &mut [u8]) {
    let mut m = mac.clone();
    for p in parts {
        m.update(p);
    }
    let r = m.finalize().into_bytes();
    out[..r.len()].copy_from_slice(&r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_is_the_castagnoli_check_value() {
        // RFC 3720 B.4: 32 bytes of zeros → 0x8a9136aa.
        let mut out = [0u8; 4];
        TagHash::Crc32c.tag(None, 0, &[0u8; 24], &mut out);
        assert_eq!(u32::from_le_bytes(out), 0x8a91_36aa);
    }

    #[test]
    fn keys_are_required_exactly_where_needed() {
        assert!(TagHash::by_name("hmac-sha256", None).is_err());
        assert!(TagHash::by_name("sha256", Some(Zeroizing::new(vec![1]))).is_err());
        assert!(TagHash::by_name("crc32", None).is_err());
        let h = TagHash::by_name("hmac-sha256", Some(Zeroizing::new(vec![7; 32]))).unwrap();
        assert_eq!(h.digest_size(), 32);
    }

    #[test]
    fn short_tags_are_cut_and_long_ones_padded() {
        let mut long = [0xffu8; 40];
        TagHash::Sha256.tag(None, 9, b"x", &mut long);
        let mut short = [0u8; 8];
        TagHash::Sha256.tag(None, 9, b"x", &mut short);
        assert_eq!(&long[..8], &short);
        assert_eq!(&long[32..], &[0u8; 8]);
    }
}
