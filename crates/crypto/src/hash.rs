//! The hash functions LUKS names in its headers (FIPS 180-4 SHA-1/SHA-2,
//! RIPEMD-160), and HMAC (RFC 2104) over them.

use crate::Error;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Digest;
use std::fmt;

/// A hash algorithm, named as cryptsetup names it (`hash-spec` in LUKS1,
/// `hash` in LUKS2 keyslot/digest JSON).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlg {
    /// SHA-1 (FIPS 180-4), 20-byte digest.
    Sha1,
    /// SHA-256 (FIPS 180-4), 32-byte digest.
    Sha256,
    /// SHA-512 (FIPS 180-4), 64-byte digest.
    Sha512,
    /// RIPEMD-160, 20-byte digest (old LUKS1 headers).
    Ripemd160,
}

impl HashAlg {
    /// Every supported hash.
    pub const ALL: [HashAlg; 4] = [
        HashAlg::Sha1,
        HashAlg::Sha256,
        HashAlg::Sha512,
        HashAlg::Ripemd160,
    ];

    /// Parses a cryptsetup hash name: `sha1`, `sha256`, `sha512`, `ripemd160`
    /// (case-insensitive, also `sha-256` style).
    pub fn parse(s: &str) -> Result<HashAlg, Error> {
        match s.to_ascii_lowercase().replace('-', "").as_str() {
            "sha1" => Ok(HashAlg::Sha1),
            "sha256" => Ok(HashAlg::Sha256),
            "sha512" => Ok(HashAlg::Sha512),
            "ripemd160" | "rmd160" => Ok(HashAlg::Ripemd160),
            _ => Err(Error::UnsupportedHash(s.to_string())),
        }
    }

    /// The cryptsetup name, e.g. `sha256`.
    pub fn name(self) -> &'static str {
        match self {
            HashAlg::Sha1 => "sha1",
            HashAlg::Sha256 => "sha256",
            HashAlg::Sha512 => "sha512",
            HashAlg::Ripemd160 => "ripemd160",
        }
    }

    /// Digest length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            HashAlg::Sha1 | HashAlg::Ripemd160 => 20,
            HashAlg::Sha256 => 32,
            HashAlg::Sha512 => 64,
        }
    }

    /// The digest of `data`.
    pub fn digest(&self, data: &[u8]) -> Vec<u8> {
        self.digest_parts(&[data])
    }

    /// The digest of the concatenation of `parts` (no copy is made).
    pub fn digest_parts(&self, parts: &[&[u8]]) -> Vec<u8> {
        fn run<D: Digest>(parts: &[&[u8]]) -> Vec<u8> {
            let mut h = D::new();
            for p in parts {
                h.update(p);
            }
            h.finalize().to_vec()
        }
        match self {
            HashAlg::Sha1 => run::<sha1::Sha1>(parts),
            HashAlg::Sha256 => run::<sha2::Sha256>(parts),
            HashAlg::Sha512 => run::<sha2::Sha512>(parts),
            HashAlg::Ripemd160 => run::<ripemd::Ripemd160>(parts),
        }
    }

    /// HMAC (RFC 2104) of `data` under `key` with this hash.
    pub fn hmac(&self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            // HMAC accepts keys of any length, so this cannot fail.
            let mut m = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        match self {
            HashAlg::Sha1 => run::<Hmac<sha1::Sha1>>(key, data),
            HashAlg::Sha256 => run::<Hmac<sha2::Sha256>>(key, data),
            HashAlg::Sha512 => run::<Hmac<sha2::Sha512>>(key, data),
            HashAlg::Ripemd160 => run::<Hmac<ripemd::Ripemd160>>(key, data),
        }
    }
}

impl fmt::Display for HashAlg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn names_round_trip() {
        for h in HashAlg::ALL {
            assert_eq!(HashAlg::parse(h.name()).unwrap(), h);
            assert_eq!(h.digest(b"").len(), h.digest_len());
        }
        assert!(HashAlg::parse("md5").is_err());
    }

    #[test]
    fn abc_digests() {
        // FIPS 180-4 examples and the RIPEMD-160 paper's "abc".
        assert_eq!(
            hex(&HashAlg::Sha1.digest(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&HashAlg::Sha256.digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&HashAlg::Sha512.digest_parts(&[b"a", b"bc"]))[..32],
            *"ddaf35a193617abacc417349ae204131"
        );
        assert_eq!(
            hex(&HashAlg::Ripemd160.digest(b"abc")),
            "8eb208f7e05d987a9b044a8e98c6b087f15a0bfc"
        );
    }

    #[test]
    fn hmac_rfc4231_case2() {
        // RFC 4231 test case 2.
        assert_eq!(
            hex(&HashAlg::Sha256.hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
