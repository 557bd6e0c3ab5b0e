//! The two KDFs gocryptfs uses: scrypt (RFC 7914) from the password to the
//! key-encryption key, and HKDF-SHA256 (RFC 5869, empty salt) from the master
//! key to the per-purpose keys.

use crate::error::{Error, Result};
use cryptkeep_crypto::SecretBytes;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// HKDF info for the EME name key. Part of the on-disk format.
pub const HKDF_INFO_EME_NAMES: &str = "EME filename encryption";
/// HKDF info for the AES-GCM content key. Part of the on-disk format.
pub const HKDF_INFO_GCM_CONTENT: &str = "AES-GCM file content encryption";
/// HKDF info for the 64-byte AES-SIV content key. Part of the on-disk format.
pub const HKDF_INFO_SIV_CONTENT: &str = "AES-SIV file content encryption";
/// HKDF info for the XChaCha20-Poly1305 content key. Part of the on-disk format.
pub const HKDF_INFO_XCHACHA_CONTENT: &str = "XChaCha20-Poly1305 file content encryption";

/// The smallest scrypt log2(N) gocryptfs accepts.
pub const SCRYPT_MIN_LOG_N: u8 = 10;
/// gocryptfs's default scrypt log2(N) (64 MiB of memory).
pub const SCRYPT_DEFAULT_LOG_N: u8 = 16;
/// The salt length gocryptfs writes (and the minimum it reads).
pub const SCRYPT_SALT_LEN: usize = 32;

/// HKDF-SHA256 with an empty salt: `out_len` bytes for `info`.
pub fn hkdf_derive(ikm: &[u8], info: &str, out_len: usize) -> Result<SecretBytes> {
    let mut out = SecretBytes::new(out_len);
    hkdf::Hkdf::<Sha256>::new(None, ikm)
        .expand(info.as_bytes(), out.as_mut_slice())
        .map_err(|_| Error::InvalidArgument(format!("HKDF output of {out_len} bytes")))?;
    Ok(out)
}

/// The `ScryptObject` of `gocryptfs.conf`: scrypt parameters and salt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScryptParams {
    /// The salt (base64 in JSON, like Go's `[]byte`).
    #[serde(rename = "Salt", with = "crate::config::b64_bytes")]
    pub salt: Vec<u8>,
    /// CPU/memory cost N (a power of two).
    #[serde(rename = "N")]
    pub n: u64,
    /// Block size r.
    #[serde(rename = "R")]
    pub r: u32,
    /// Parallelism p.
    #[serde(rename = "P")]
    pub p: u32,
    /// Output length in bytes (32).
    #[serde(rename = "KeyLen")]
    pub key_len: usize,
}

impl ScryptParams {
    /// New parameters with a random salt: N = 2^log_n, r = 8, p = 1, 32-byte output
    /// (what `gocryptfs -init -scryptn log_n` writes).
    pub fn new(log_n: u8) -> Result<ScryptParams> {
        let mut salt = vec![0u8; SCRYPT_SALT_LEN];
        cryptkeep_crypto::rand::fill_random(&mut salt)?;
        let p = ScryptParams {
            salt,
            n: 1u64 << log_n.min(63),
            r: 8,
            p: 1,
            key_len: 32,
        };
        p.validate().map_err(Error::InvalidArgument)?;
        Ok(p)
    }

    /// log2(N).
    pub fn log_n(&self) -> u8 {
        self.n.trailing_zeros() as u8
    }

    /// Checks the limits gocryptfs enforces (N ≥ 2^10 and a power of two,
    /// r ≥ 8, p ≥ 1, salt ≥ 32 bytes, output ≥ 32 bytes), plus an upper bound
    /// on memory (r·N·128 ≤ 4 GiB) so a hostile config cannot exhaust RAM.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !self.n.is_power_of_two() || self.log_n() < SCRYPT_MIN_LOG_N {
            return Err(format!(
                "scrypt N={} must be a power of two of at least 2^{SCRYPT_MIN_LOG_N}",
                self.n
            ));
        }
        if self.r < 8 {
            return Err(format!("scrypt R={} is below the minimum 8", self.r));
        }
        if self.p < 1 {
            return Err("scrypt P=0 is below the minimum 1".into());
        }
        if self.salt.len() < SCRYPT_SALT_LEN {
            return Err(format!(
                "scrypt salt of {} bytes is below the minimum {SCRYPT_SALT_LEN}",
                self.salt.len()
            ));
        }
        if self.key_len < 32 || self.key_len > 1024 {
            return Err(format!("scrypt KeyLen={} must be 32..=1024", self.key_len));
        }
        let mem = u128::from(self.r) * u128::from(self.n) * 128;
        if mem > 4 << 30 {
            return Err(format!(
                "scrypt N={} R={} would need {mem} bytes of memory",
                self.n, self.r
            ));
        }
        Ok(())
    }

    /// Runs scrypt on `password`.
    pub fn derive(&self, password: &[u8]) -> Result<SecretBytes> {
        self.validate().map_err(Error::InvalidArgument)?;
        let params = scrypt::Params::new(self.log_n(), self.r, self.p)
            .map_err(|_| Error::InvalidArgument("scrypt parameters".into()))?;
        let mut out = SecretBytes::new(self.key_len);
        scrypt::scrypt(password, &self.salt, &params, out.as_mut_slice())
            .map_err(|_| Error::InvalidArgument("scrypt output length".into()))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// RFC 5869 test case 3 (SHA-256, empty salt and info) checks the HKDF wiring;
    /// gocryptfs's info strings are pinned because they shape the format.
    #[test]
    fn hkdf_known_answer_and_infos() {
        let ikm = [0x0bu8; 22];
        let okm = hkdf::Hkdf::<Sha256>::new(None, &ikm);
        let mut out = [0u8; 42];
        okm.expand(&[], &mut out).unwrap();
        assert_eq!(
            hex(&out),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        );
        assert_eq!(HKDF_INFO_EME_NAMES, "EME filename encryption");
        assert_eq!(HKDF_INFO_GCM_CONTENT, "AES-GCM file content encryption");
        assert_eq!(HKDF_INFO_SIV_CONTENT, "AES-SIV file content encryption");
        assert_eq!(
            HKDF_INFO_XCHACHA_CONTENT,
            "XChaCha20-Poly1305 file content encryption"
        );
    }

    /// RFC 7914 section 12, second vector (N=1024, r=8, p=16), first 16 bytes.
    #[test]
    fn scrypt_known_answer() {
        let p = ScryptParams {
            salt: b"NaCl".to_vec(),
            n: 1024,
            r: 8,
            p: 16,
            key_len: 64,
        };
        let params = scrypt::Params::new(p.log_n(), p.r, p.p).unwrap();
        let mut out = [0u8; 64];
        scrypt::scrypt(b"password", &p.salt, &params, &mut out).unwrap();
        assert_eq!(hex(&out[..16]), "fdbabe1c9d3472007856e7190d01e9fe");
    }

    #[test]
    fn weak_params_refused() {
        let good = ScryptParams::new(10).unwrap();
        assert!(good.validate().is_ok());
        let mut p = good.clone();
        p.n = 512;
        assert!(p.validate().is_err());
        let mut p = good.clone();
        p.n = 1000;
        assert!(p.validate().is_err());
        let mut p = good.clone();
        p.r = 4;
        assert!(p.validate().is_err());
        let mut p = good.clone();
        p.salt.truncate(16);
        assert!(p.validate().is_err());
        let mut p = good;
        p.p = 0;
        assert!(p.derive(b"x").is_err());
    }
}
