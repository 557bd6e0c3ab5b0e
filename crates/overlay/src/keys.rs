//! The 256-bit gocryptfs master key (the keys derived from it are in
//! `derive.rs`).

use crate::error::{Error, Result};
use cryptkeep_crypto::SecretBytes;

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

    /// The key as a secret buffer.
    pub(crate) fn secret(&self) -> &SecretBytes {
        &self.0
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
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
