//! [`AuthSpec`]: which authenticated sector mode a LUKS2 segment uses, and
//! the sizes that follow from it (cryptsetup `lib/integrity/integrity.c`
//! `INTEGRITY_tag_size`/`INTEGRITY_key_size`, `lib/utils_crypt.c`
//! `crypt_parse_integrity_mode`, `lib/libdevmapper.c` `cipher_dm2c`).

use crate::{CipherSpec, Error};
use std::fmt;

/// The hash of an `authenc(hmac(…),xts(aes))` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum MacHash {
    /// HMAC-SHA-1 (20-byte key and tag).
    Sha1,
    /// HMAC-SHA-256 (32-byte key and tag).
    Sha256,
    /// HMAC-SHA-512 (64-byte key and tag).
    Sha512,
}

impl MacHash {
    /// Digest size = cryptsetup's default MAC key size = the tag size.
    pub(crate) fn len(self) -> usize {
        match self {
            MacHash::Sha1 => 20,
            MacHash::Sha256 => 32,
            MacHash::Sha512 => 64,
        }
    }

    fn name(self) -> &'static str {
        match self {
            MacHash::Sha1 => "sha1",
            MacHash::Sha256 => "sha256",
            MacHash::Sha512 => "sha512",
        }
    }
}

/// The modes, as the engines see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    /// `aes-xts-plain64` + `hmac(…)`: kernel `authenc(hmac(…),xts(aes))`.
    XtsHmac(MacHash),
    /// `aegis128-random` + `aead`: kernel `aegis128`.
    Aegis128,
    /// `chacha20-random` + `poly1305`: kernel `rfc7539(chacha20,poly1305)`.
    ChaCha20Poly1305,
    /// `aes-gcm-random` + `aead`: kernel `gcm(aes)`.
    AesGcm,
}

/// One of the authenticated sector modes of LUKS2 (`cryptsetup luksFormat
/// --integrity …`, dm-crypt over dm-integrity), parsed and sized:
///
/// | header `encryption` | header `integrity.type` | CLI `--integrity` | kernel (dm table) |
/// |---|---|---|---|
/// | `aes-xts-plain64` | `hmac(sha256)` / `hmac(sha1)` / `hmac(sha512)` | `hmac-sha256` … | `capi:authenc(hmac(sha256),xts(aes))-plain64` |
/// | `aegis128-random` | `aead` | `aead` | `capi:aegis128-random` |
/// | `chacha20-random` | `poly1305` | `poly1305` | `capi:rfc7539(chacha20,poly1305)-random` |
/// | `aes-gcm-random` | `aead` | `aead` | `capi:gcm(aes)-random` |
///
/// docs/format/luks2-integrity.md has the sources of every size here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSpec {
    mode: Mode,
}

/// The error for an encryption/integrity pair this crate does not implement.
fn unsupported(encryption: &str, integrity: &str) -> Error {
    Error::UnsupportedIntegrity {
        encryption: encryption.to_string(),
        integrity: integrity.to_string(),
    }
}

impl AuthSpec {
    /// From LUKS2 header strings (segment `encryption` and
    /// `integrity.type`): `("aes-xts-plain64", "hmac(sha256)")` (also
    /// `hmac(sha1)`, `hmac(sha512)`), `("aegis128-random", "aead")`,
    /// `("chacha20-random", "poly1305")`, `("aes-gcm-random", "aead")`.
    /// Anything else is [`Error::UnsupportedIntegrity`] naming the pair.
    pub fn parse(encryption: &str, integrity: &str) -> Result<AuthSpec, Error> {
        let mode = match (encryption, integrity) {
            ("aes-xts-plain64", "hmac(sha1)") => Mode::XtsHmac(MacHash::Sha1),
            ("aes-xts-plain64", "hmac(sha256)") => Mode::XtsHmac(MacHash::Sha256),
            ("aes-xts-plain64", "hmac(sha512)") => Mode::XtsHmac(MacHash::Sha512),
            ("aegis128-random", "aead") => Mode::Aegis128,
            ("chacha20-random", "poly1305") => Mode::ChaCha20Poly1305,
            ("aes-gcm-random", "aead") => Mode::AesGcm,
            _ => return Err(unsupported(encryption, integrity)),
        };
        Ok(AuthSpec { mode })
    }

    /// From cryptsetup's command line, `--cipher X --integrity Y`, where Y is
    /// `hmac-sha256`, `hmac-sha1`, `hmac-sha512`, `aead` or `poly1305`
    /// (cryptsetup `crypt_parse_integrity_mode`), e.g.
    /// `from_cli("aes-xts-plain64", "hmac-sha256")`.
    pub fn from_cli(cipher: &str, integrity: &str) -> Result<AuthSpec, Error> {
        let header = match integrity {
            "hmac-sha1" => "hmac(sha1)",
            "hmac-sha256" => "hmac(sha256)",
            "hmac-sha512" => "hmac(sha512)",
            "aead" => "aead",
            "poly1305" => "poly1305",
            _ => return Err(unsupported(cipher, integrity)),
        };
        AuthSpec::parse(cipher, header).map_err(|_| unsupported(cipher, integrity))
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// The LUKS2 segment `encryption` string, e.g. `"aes-xts-plain64"`.
    pub fn encryption(&self) -> &str {
        match self.mode {
            Mode::XtsHmac(_) => "aes-xts-plain64",
            Mode::Aegis128 => "aegis128-random",
            Mode::ChaCha20Poly1305 => "chacha20-random",
            Mode::AesGcm => "aes-gcm-random",
        }
    }

    /// The LUKS2 segment `integrity.type` string, e.g. `"hmac(sha256)"`.
    pub fn integrity(&self) -> &str {
        match self.mode {
            Mode::XtsHmac(MacHash::Sha1) => "hmac(sha1)",
            Mode::XtsHmac(MacHash::Sha256) => "hmac(sha256)",
            Mode::XtsHmac(MacHash::Sha512) => "hmac(sha512)",
            Mode::Aegis128 | Mode::AesGcm => "aead",
            Mode::ChaCha20Poly1305 => "poly1305",
        }
    }

    /// The MAC key bytes at the end of the volume key (0 for the native
    /// AEADs). cryptsetup's default: the HMAC digest size.
    pub fn mac_key_bytes(&self) -> usize {
        match self.mode {
            Mode::XtsHmac(h) => h.len(),
            _ => 0,
        }
    }

    /// The volume key size cryptsetup's `luksFormat` uses without
    /// `--key-size` (`get_adjusted_key_size`: 512-bit XTS plus the MAC key;
    /// 256 bits otherwise), except for `aegis128-random`: cryptsetup would
    /// ask for 32 bytes there, which the kernel's `aegis128` rejects
    /// (its release notes format with `--key-size 128`), so this is 16.
    pub fn default_key_bytes(&self) -> usize {
        match self.mode {
            Mode::XtsHmac(h) => 64 + h.len(),
            Mode::Aegis128 => 16,
            Mode::ChaCha20Poly1305 | Mode::AesGcm => 32,
        }
    }

    /// Checks a volume key size: XTS 32, 48 or 64 bytes plus the MAC key
    /// for the HMAC modes; 16 for AEGIS-128; 32 for ChaCha20-Poly1305;
    /// 16, 24 or 32 for AES-GCM (what the kernel's `setkey` accepts).
    pub fn check_key_bytes(&self, n: usize) -> Result<(), Error> {
        let bad = |allowed: &'static str| Error::InvalidKeySize {
            spec: format!("{}+{}", self.encryption(), self.integrity()),
            got: n,
            allowed,
        };
        match self.mode {
            Mode::XtsHmac(h) => {
                let allowed = match h {
                    MacHash::Sha1 => "52, 68 or 84",
                    MacHash::Sha256 => "64, 80 or 96",
                    MacHash::Sha512 => "96, 112 or 128",
                };
                let xts = n.checked_sub(h.len()).ok_or_else(|| bad(allowed))?;
                CipherSpec::parse("aes-xts-plain64")?
                    .check_key_size(xts)
                    .map_err(|_| bad(allowed))
            }
            Mode::Aegis128 if n == 16 => Ok(()),
            Mode::Aegis128 => Err(bad("16")),
            Mode::ChaCha20Poly1305 if n == 32 => Ok(()),
            Mode::ChaCha20Poly1305 => Err(bad("32")),
            Mode::AesGcm if matches!(n, 16 | 24 | 32) => Ok(()),
            Mode::AesGcm => Err(bad("16, 24 or 32")),
        }
    }

    /// Authentication tag bytes per sector: the full HMAC (20/32/64), or 16
    /// for the native AEADs (cryptsetup `INTEGRITY_tag_size`; dm-crypt sets
    /// the AEAD's authsize to the dm-integrity tag size minus the IV).
    pub fn tag_bytes(&self) -> usize {
        match self.mode {
            Mode::XtsHmac(h) => h.len(),
            _ => 16,
        }
    }

    /// IV bytes stored per sector: 0 for `plain64`, else the kernel AEAD's
    /// IV size (16 for `aegis128`, 12 for `rfc7539` and `gcm`).
    pub fn iv_bytes(&self) -> usize {
        match self.mode {
            Mode::XtsHmac(_) => 0,
            Mode::Aegis128 => 16,
            Mode::ChaCha20Poly1305 | Mode::AesGcm => 12,
        }
    }

    /// `tag_bytes + iv_bytes`: the per-sector metadata tuple, and the
    /// dm-integrity `tag_size` of the volume.
    pub fn tuple_bytes(&self) -> usize {
        self.tag_bytes() + self.iv_bytes()
    }

    /// A warning to show when formatting with this mode, if any.
    /// cryptsetup itself prints none beyond its man page's "This extension
    /// is EXPERIMENTAL"; these are cryptkeep's.
    pub fn warning(&self) -> Option<&'static str> {
        match self.mode {
            Mode::AesGcm => Some(
                "aes-gcm-random draws a random 96-bit nonce for every sector write; \
                 after about 2^32 writes under one volume key a repeated nonce becomes \
                 likely, and a repeated GCM nonce reveals the authentication key. \
                 Prefer aegis128-random or aes-xts-plain64 with hmac-sha256.",
            ),
            Mode::ChaCha20Poly1305 => Some(
                "chacha20-random draws a random 96-bit nonce for every sector write; \
                 after about 2^32 writes under one volume key a repeated nonce becomes \
                 likely, and a repeated nonce lets writes be forged. \
                 Prefer aegis128-random or aes-xts-plain64 with hmac-sha256.",
            ),
            Mode::XtsHmac(MacHash::Sha1) => {
                Some("hmac-sha1 is kept for old volumes; prefer hmac-sha256 for new ones.")
            }
            _ => None,
        }
    }

    /// The cipher string dm-crypt gets (cryptsetup `cipher_dm2c`), e.g.
    /// `capi:authenc(hmac(sha256),xts(aes))-plain64`.
    pub fn kernel_name(&self) -> String {
        match self.mode {
            Mode::XtsHmac(h) => format!("capi:authenc(hmac({}),xts(aes))-plain64", h.name()),
            Mode::Aegis128 => "capi:aegis128-random".to_string(),
            Mode::ChaCha20Poly1305 => "capi:rfc7539(chacha20,poly1305)-random".to_string(),
            Mode::AesGcm => "capi:gcm(aes)-random".to_string(),
        }
    }

    /// dm-crypt's optional parameter for this mode, e.g. `integrity:32:aead`
    /// (always `aead` here: every mode is an AEAD to the kernel).
    pub fn dm_integrity_arg(&self) -> String {
        format!("integrity:{}:aead", self.tuple_bytes())
    }
}

impl fmt::Display for AuthSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} + {}", self.encryption(), self.integrity())
    }
}
