//! dm-crypt cipher specifications: `cipher-chainmode-ivmode`, e.g.
//! `aes-xts-plain64` (kernel `Documentation/admin-guide/device-mapper/dm-crypt.rst`),
//! and LUKS1's split form (`cipher-name` = `aes`, `cipher-mode` = `xts-plain64`).

use crate::{Error, HashAlg};
use std::fmt;

/// The block cipher. Only AES (FIPS 197) for now.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CipherAlg {
    /// AES-128/192/256, chosen by key length.
    Aes,
}

/// The chaining mode of a sector.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainMode {
    /// XTS (IEEE 1619, NIST SP 800-38E); the key is two AES keys.
    Xts,
    /// CBC (NIST SP 800-38A).
    Cbc,
    /// ECB: each block alone, no IV.
    Ecb,
}

/// How the IV of a sector is made from its sector number, exactly as the
/// kernel's dm-crypt generators do (`crypt_iv_*_gen`). The IV is 16 bytes.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IvMode {
    /// `plain`: the low 32 bits of the sector number, little-endian, then zeros.
    Plain,
    /// `plain64`: the 64-bit sector number, little-endian, then zeros.
    Plain64,
    /// `plain64be`: zeros, then the 64-bit sector number big-endian in the
    /// last 8 bytes.
    Plain64Be,
    /// `essiv:<hash>`: the plain64 block encrypted with AES under
    /// `hash(volume key)` (the whole key, XTS included).
    Essiv(HashAlg),
    /// `null`: an all-zero IV (also what `aes-ecb` means).
    Null,
}

/// A parsed dm-crypt cipher specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CipherSpec {
    /// The block cipher.
    pub cipher: CipherAlg,
    /// The chaining mode.
    pub mode: ChainMode,
    /// The IV generator.
    pub iv: IvMode,
}

impl CipherSpec {
    /// `aes-xts-plain64`, the LUKS2 default.
    pub const AES_XTS_PLAIN64: CipherSpec = CipherSpec {
        cipher: CipherAlg::Aes,
        mode: ChainMode::Xts,
        iv: IvMode::Plain64,
    };

    /// `aes-cbc-essiv:sha256`, the old LUKS1 default.
    pub const AES_CBC_ESSIV_SHA256: CipherSpec = CipherSpec {
        cipher: CipherAlg::Aes,
        mode: ChainMode::Cbc,
        iv: IvMode::Essiv(HashAlg::Sha256),
    };

    /// Parses a dm-crypt string such as `aes-xts-plain64`,
    /// `aes-cbc-essiv:sha256` or `aes-ecb` (case-insensitive).
    pub fn parse(s: &str) -> Result<CipherSpec, Error> {
        let unsupported = || Error::UnsupportedCipher(s.to_string());
        let lower = s.trim().to_ascii_lowercase();
        let (cipher, rest) = lower.split_once('-').ok_or_else(unsupported)?;
        CipherSpec::parse_luks1(cipher, rest).map_err(|_| unsupported())
    }

    /// Parses LUKS1's two header fields, `cipher-name` (`aes`) and
    /// `cipher-mode` (`xts-plain64`, `cbc-essiv:sha256`, `ecb`, ...).
    pub fn parse_luks1(cipher_name: &str, cipher_mode: &str) -> Result<CipherSpec, Error> {
        let unsupported = || Error::UnsupportedCipher(format!("{cipher_name}-{cipher_mode}"));
        let cipher = match cipher_name.trim().to_ascii_lowercase().as_str() {
            "aes" => CipherAlg::Aes,
            _ => return Err(unsupported()),
        };
        let mode_l = cipher_mode.trim().to_ascii_lowercase();
        let (chain, iv) = match mode_l.split_once('-') {
            Some((c, i)) => (c, Some(i)),
            None => (mode_l.as_str(), None),
        };
        let mode = match chain {
            "xts" => ChainMode::Xts,
            "cbc" => ChainMode::Cbc,
            "ecb" => ChainMode::Ecb,
            _ => return Err(unsupported()),
        };
        let iv = match (mode, iv) {
            (ChainMode::Ecb, None | Some("null")) => IvMode::Null,
            (ChainMode::Ecb, Some(_)) | (_, None) => return Err(unsupported()),
            (_, Some(i)) => parse_iv(i).ok_or_else(unsupported)?,
        };
        Ok(CipherSpec { cipher, mode, iv })
    }

    /// The LUKS1 `cipher-name` field: `aes`.
    pub fn luks1_cipher_name(&self) -> String {
        match self.cipher {
            CipherAlg::Aes => "aes".to_string(),
        }
    }

    /// The LUKS1 `cipher-mode` field, e.g. `xts-plain64` or `ecb`.
    pub fn luks1_cipher_mode(&self) -> String {
        let chain = match self.mode {
            ChainMode::Xts => "xts",
            ChainMode::Cbc => "cbc",
            ChainMode::Ecb => return "ecb".to_string(),
        };
        let iv = match self.iv {
            IvMode::Plain => "plain".to_string(),
            IvMode::Plain64 => "plain64".to_string(),
            IvMode::Plain64Be => "plain64be".to_string(),
            IvMode::Essiv(h) => format!("essiv:{}", h.name()),
            IvMode::Null => "null".to_string(),
        };
        format!("{chain}-{iv}")
    }

    /// The key lengths (bytes) this specification accepts, as text for messages.
    pub fn allowed_key_sizes(&self) -> &'static str {
        match self.mode {
            ChainMode::Xts => "32, 48 or 64",
            ChainMode::Cbc | ChainMode::Ecb => "16, 24 or 32",
        }
    }

    /// Checks that `key_bytes` is a valid key length: XTS takes two AES keys
    /// (32, 48 or 64 bytes), CBC and ECB one (16, 24 or 32 bytes). ESSIV also
    /// needs a hash whose digest is an AES key (sha256).
    pub fn check_key_size(&self, key_bytes: usize) -> Result<(), Error> {
        if let IvMode::Essiv(h) = self.iv {
            if !matches!(h.digest_len(), 16 | 24 | 32) {
                return Err(Error::UnsupportedCipher(format!(
                    "{self} (ESSIV needs a hash whose digest is an AES key, e.g. sha256)"
                )));
            }
        }
        let ok = match self.mode {
            ChainMode::Xts => matches!(key_bytes, 32 | 48 | 64),
            ChainMode::Cbc | ChainMode::Ecb => matches!(key_bytes, 16 | 24 | 32),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidKeySize {
                spec: self.to_string(),
                got: key_bytes,
                allowed: self.allowed_key_sizes(),
            })
        }
    }
}

fn parse_iv(s: &str) -> Option<IvMode> {
    Some(match s {
        "plain" => IvMode::Plain,
        "plain64" => IvMode::Plain64,
        "plain64be" => IvMode::Plain64Be,
        "null" => IvMode::Null,
        _ => {
            let h = s.strip_prefix("essiv:")?;
            IvMode::Essiv(HashAlg::parse(h).ok()?)
        }
    })
}

impl fmt::Display for CipherSpec {
    /// The dm-crypt string, e.g. `aes-xts-plain64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}",
            self.luks1_cipher_name(),
            self.luks1_cipher_mode()
        )
    }
}

impl std::str::FromStr for CipherSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<CipherSpec, Error> {
        CipherSpec::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for s in [
            "aes-xts-plain64",
            "aes-xts-plain",
            "aes-xts-plain64be",
            "aes-cbc-essiv:sha256",
            "aes-cbc-plain64",
            "aes-cbc-plain",
            "aes-cbc-null",
            "aes-ecb",
        ] {
            let spec = CipherSpec::parse(s).unwrap();
            assert_eq!(spec.to_string(), s);
            let again =
                CipherSpec::parse_luks1(&spec.luks1_cipher_name(), &spec.luks1_cipher_mode())
                    .unwrap();
            assert_eq!(again, spec);
        }
        assert_eq!(
            CipherSpec::parse("AES-XTS-PLAIN64").unwrap(),
            CipherSpec::AES_XTS_PLAIN64
        );
        assert_eq!(
            CipherSpec::parse("aes-cbc-essiv:sha256").unwrap(),
            CipherSpec::AES_CBC_ESSIV_SHA256
        );
        assert_eq!(
            CipherSpec::parse("aes-ecb-null").unwrap().to_string(),
            "aes-ecb"
        );
    }

    #[test]
    fn rejects() {
        for s in [
            "",
            "aes",
            "aes-xts",
            "twofish-xts-plain64",
            "aes-ctr-plain64",
            "aes-xts-benbi",
            "aes-ecb-plain64",
            "aes-cbc-essiv:md5",
            "aes-cbc-essiv",
        ] {
            assert!(CipherSpec::parse(s).is_err(), "{s} parsed");
        }
    }

    #[test]
    fn key_sizes() {
        let xts = CipherSpec::AES_XTS_PLAIN64;
        for k in [32, 48, 64] {
            xts.check_key_size(k).unwrap();
        }
        for k in [0, 16, 24, 33, 128] {
            assert!(xts.check_key_size(k).is_err());
        }
        let cbc = CipherSpec::AES_CBC_ESSIV_SHA256;
        for k in [16, 24, 32] {
            cbc.check_key_size(k).unwrap();
        }
        assert!(cbc.check_key_size(64).is_err());
        let sha1 = CipherSpec::parse("aes-cbc-essiv:sha1").unwrap();
        assert!(matches!(
            sha1.check_key_size(32),
            Err(Error::UnsupportedCipher(_))
        ));
        let msg = xts.check_key_size(16).unwrap_err().to_string();
        assert!(
            msg.contains("aes-xts-plain64") && msg.contains("16"),
            "{msg}"
        );
    }
}
