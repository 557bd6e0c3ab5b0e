//! The 256-bit master key and the keys gocryptfs derives from it
//! (`cryptocore.New`): with the HKDF flag, HKDF-SHA256 per purpose; without
//! it, the master key itself (GCM, EME) or SHA-512 of it (AES-SIV).

use crate::config::{Config, ContentAlg};
use crate::error::{Error, Result};
use crate::flags::FeatureFlag;
use crate::kdf::{
    hkdf_derive, HKDF_INFO_EME_NAMES, HKDF_INFO_GCM_CONTENT, HKDF_INFO_SIV_CONTENT,
    HKDF_INFO_XCHACHA_CONTENT,
};
use cryptkeep_crypto::SecretBytes;
use sha2::{Digest, Sha512};

/// Master key length in bytes.
pub const MASTER_KEY_LEN: usize = 32;

/// A gocryptfs master key (zeroized on drop).
#[derive(Clone, PartialEq, Eq)]
pub struct MasterKey(SecretBytes);

impl MasterKey {
    /// A fresh random key.
    pub fn random() -> Result<MasterKey> {
        let mut s = SecretBytes::new(MASTER_KEY_LEN);
        cryptkeep_crypto::rand::fill_random(s.as_mut_slice())?;
        Ok(MasterKey(s))
    }

    /// Wraps 32 secret bytes.
    pub fn from_secret(s: SecretBytes) -> Result<MasterKey> {
        if s.len() != MASTER_KEY_LEN {
            return Err(Error::InvalidArgument(format!(
                "a master key is {MASTER_KEY_LEN} bytes, got {}",
                s.len()
            )));
        }
        Ok(MasterKey(s))
    }

    /// Copies 32 bytes.
    pub fn from_bytes(b: &[u8]) -> Result<MasterKey> {
        MasterKey::from_secret(SecretBytes::from_slice(b))
    }

    /// Parses 64 hex digits; dashes and spaces are ignored, so gocryptfs's
    /// `-masterkey` form (`01234567-89abcdef-…`) works.
    pub fn from_hex(s: &str) -> Result<MasterKey> {
        let digits: Vec<u8> = s
            .bytes()
            .filter(|c| !matches!(c, b'-' | b' ' | b'\n' | b'\t'))
            .collect();
        let bad = || Error::InvalidArgument("the master key must be 64 hex digits".into());
        if digits.len() != 2 * MASTER_KEY_LEN {
            return Err(bad());
        }
        let mut key = SecretBytes::new(MASTER_KEY_LEN);
        for (i, pair) in digits.chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16).ok_or_else(bad)?;
            let lo = (pair[1] as char).to_digit(16).ok_or_else(bad)?;
            key.as_mut_slice()[i] = (hi * 16 + lo) as u8;
        }
        MasterKey::from_secret(key)
    }

    /// gocryptfs's display form: 8 groups of 8 hex digits joined by dashes.
    pub fn to_display_hex(&self) -> String {
        let hex: String = self
            .0
            .as_slice()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        hex.as_bytes()
            .chunks(8)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join("-")
    }

    /// The raw key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_slice()
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

/// The content key for the config's AEAD.
pub(crate) fn content_key(mk: &MasterKey, cfg: &Config) -> Result<SecretBytes> {
    let hkdf = cfg.has(FeatureFlag::HKDF);
    Ok(match (cfg.content_alg(), hkdf) {
        (ContentAlg::AesGcm, true) => hkdf_derive(mk.as_bytes(), HKDF_INFO_GCM_CONTENT, 32)?,
        (ContentAlg::AesGcm, false) => mk.0.clone(),
        (ContentAlg::AesSiv, true) => hkdf_derive(mk.as_bytes(), HKDF_INFO_SIV_CONTENT, 64)?,
        (ContentAlg::AesSiv, false) => {
            SecretBytes::from_vec(Sha512::digest(mk.as_bytes()).to_vec())
        }
        (ContentAlg::XChaCha20Poly1305, _) => {
            hkdf_derive(mk.as_bytes(), HKDF_INFO_XCHACHA_CONTENT, 32)?
        }
    })
}

/// The EME name key.
pub(crate) fn name_key(mk: &MasterKey, cfg: &Config) -> Result<SecretBytes> {
    if cfg.has(FeatureFlag::HKDF) {
        hkdf_derive(mk.as_bytes(), HKDF_INFO_EME_NAMES, 32)
    } else {
        Ok(mk.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let k = MasterKey::from_bytes(&(0..32).collect::<Vec<u8>>()).unwrap();
        let s = k.to_display_hex();
        assert_eq!(s.len(), 64 + 7);
        assert!(s.starts_with("00010203-04050607-"));
        assert_eq!(MasterKey::from_hex(&s).unwrap(), k);
        assert!(MasterKey::from_hex("abc").is_err());
        assert!(MasterKey::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(format!("{k:?}"), "MasterKey(..)");
    }
}
