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

/// The smallest scrypt log2(N) gocryptfs accepts (`scryptMinLogN`).
pub const SCRYPT_MIN_LOG_N: u8 = 10;
/// gocryptfs's default scrypt log2(N) (64 MiB of memory).
pub const SCRYPT_DEFAULT_LOG_N: u8 = 16;
/// The salt length gocryptfs writes (and the minimum it reads).
pub const SCRYPT_SALT_LEN: usize = 32;
/// The smallest block size r gocryptfs accepts (`scryptMinR`).
pub const SCRYPT_MIN_R: u32 = 8;
/// The key-encryption key length: gocryptfs reads no less (`KeyLen` check)
/// and its ciphers take exactly this many bytes.
pub const SCRYPT_KEY_LEN: usize = 32;
/// golang.org/x/crypto/scrypt refuses r·p at or above this ("scrypt:
/// parameters are too large"), as RFC 7914 requires.
pub const SCRYPT_MAX_RP: u64 = 1 << 30;
/// The largest N-block table scrypt may allocate here, 128·r·N bytes:
/// 4 GiB is N = 2^22 at r = 8, 64 times gocryptfs's default.
pub const SCRYPT_MAX_TABLE: u64 = 4 << 30;
/// The largest p-block input scrypt may allocate here, 128·r·p bytes:
/// p = 16384 at r = 8 (gocryptfs writes p = 1).
pub const SCRYPT_MAX_INPUT: u64 = 16 << 20;

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
    #[serde(rename = "Salt", with = "crate::b64_bytes")]
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

    /// Checks the limits gocryptfs and golang.org/x/crypto/scrypt enforce
    /// (N a power of two of at least 2^10, r ≥ 8, p ≥ 1, r·p < 2^30, salt
    /// ≥ 32 bytes, a 32-byte output), plus [`SCRYPT_MAX_TABLE`] and
    /// [`SCRYPT_MAX_INPUT`], so that a hostile config cannot make
    /// [`derive`](Self::derive) allocate more.
    /// The message names the parameter.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !self.n.is_power_of_two() || self.log_n() < SCRYPT_MIN_LOG_N {
            return Err(format!(
                "scrypt N={} must be a power of two of at least 2^{SCRYPT_MIN_LOG_N}",
                self.n
            ));
        }
        if self.r < SCRYPT_MIN_R {
            return Err(format!(
                "scrypt R={} is below the minimum {SCRYPT_MIN_R}",
                self.r
            ));
        }
        if self.p < 1 {
            return Err("scrypt P=0 is below the minimum 1".into());
        }
        if u64::from(self.r) * u64::from(self.p) >= SCRYPT_MAX_RP {
            return Err(format!(
                "scrypt parameters are too large: R={} times P={} must be below 2^30",
                self.r, self.p
            ));
        }
        if self.salt.len() < SCRYPT_SALT_LEN {
            return Err(format!(
                "scrypt salt of {} bytes is below the minimum {SCRYPT_SALT_LEN}",
                self.salt.len()
            ));
        }
        if self.key_len != SCRYPT_KEY_LEN {
            return Err(format!(
                "scrypt KeyLen={} must be {SCRYPT_KEY_LEN}",
                self.key_len
            ));
        }
        let table = 128 * u128::from(self.r) * u128::from(self.n);
        if table > u128::from(SCRYPT_MAX_TABLE) {
            return Err(format!(
                "scrypt N=2^{} with R={} would need {} MiB of memory, more than the {} MiB allowed",
                self.log_n(),
                self.r,
                table >> 20,
                SCRYPT_MAX_TABLE >> 20
            ));
        }
        let input = 128 * u128::from(self.r) * u128::from(self.p);
        if input > u128::from(SCRYPT_MAX_INPUT) {
            return Err(format!(
                "scrypt P={} with R={} would need {} MiB of input blocks, more than the {} MiB allowed",
                self.p,
                self.r,
                input >> 20,
                SCRYPT_MAX_INPUT >> 20
            ));
        }
        Ok(())
    }

    /// The bytes scrypt allocates for these parameters: 128·r·(N + p + 1).
    pub fn memory(&self) -> u128 {
        128 * u128::from(self.r) * (u128::from(self.n) + u128::from(self.p) + 1)
    }

    /// Runs scrypt on `password`. Refuses parameters [`validate`](Self::validate)
    /// refuses, and memory the allocator cannot give now, before scrypt
    /// allocates anything.
    pub fn derive(&self, password: &[u8]) -> Result<SecretBytes> {
        self.validate().map_err(Error::InvalidArgument)?;
        let params = scrypt::Params::new(self.log_n(), self.r, self.p)
            .map_err(|_| Error::InvalidArgument("scrypt parameters".into()))?;
        reserve_probe(self.memory())?;
        let mut out = SecretBytes::new(self.key_len);
        scrypt::scrypt(password, &self.salt, &params, out.as_mut_slice())
            .map_err(|_| Error::InvalidArgument("scrypt output length".into()))?;
        Ok(out)
    }
}

/// Asks the allocator for `bytes` and gives them back at once (untouched,
/// so no page is faulted in): scrypt then allocates as much in one piece,
/// and an allocator that cannot give it becomes an error here instead of an
/// abort there.
fn reserve_probe(bytes: u128) -> Result<()> {
    let oom = || {
        Error::Crypto(cryptkeep_crypto::Error::Kdf(format!(
            "scrypt could not allocate {} MiB of memory",
            bytes >> 20
        )))
    };
    let n = usize::try_from(bytes).map_err(|_| oom())?;
    let mut probe: Vec<u8> = Vec::new();
    probe.try_reserve_exact(n).map_err(|_| oom())?;
    Ok(())
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

    /// Parameters gocryptfs's scrypt refuses as "too large", and those past
    /// our memory bound, are refused by `validate` and by `derive` before
    /// anything is allocated (P = 2^31 asked for 2 TiB and aborted).
    #[test]
    fn hostile_params_refused_before_allocating() {
        let good = ScryptParams::new(10).unwrap();
        let bad = |f: &dyn Fn(&mut ScryptParams), want: &str| {
            let mut p = good.clone();
            f(&mut p);
            let e = p.validate().unwrap_err();
            assert!(e.contains(want), "{e}");
            let e = p.derive(b"x").unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        };
        bad(&|p| p.p = 1 << 31, "P=2147483648");
        bad(&|p| p.p = u32::MAX, "too large");
        bad(&|p| p.r = 1 << 27, "R=134217728");
        bad(&|p| p.p = (1 << 27) - 1, "MiB of input blocks");
        bad(&|p| p.p = 16385, "P=16385");
        bad(&|p| p.n = 1 << 23, "N=2^23");
        bad(&|p| p.n = 1 << 63, "N=2^63");
        bad(&|p| p.key_len = 64, "KeyLen=64");
        bad(&|p| p.key_len = usize::MAX, "KeyLen=");
        bad(&|p| p.n = 1 << 23, "more than the 4096 MiB allowed");
        let mut edge = good.clone();
        edge.n = 1 << 22;
        edge.p = 16384;
        assert!(
            edge.validate().is_ok(),
            "N=2^22 and P=16384 at R=8 stay allowed"
        );
    }
}
