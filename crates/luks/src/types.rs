//! The plain data types of the crate's API: versions, segments, keyslot
//! states and format options (defaults of cryptsetup 2.6 `luksFormat`).

use cryptkeep_crypto::{kdf, CipherSpec, HashAlg, Pbkdf};

use crate::error::Error;

/// Which LUKS version a header is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LuksVersion {
    /// LUKS1 (592-byte header, 8 PBKDF2 keyslots).
    V1,
    /// LUKS2 (binary headers + JSON metadata).
    V2,
}

/// The encrypted data area the volume engine maps (dm-crypt table semantics).
#[derive(Clone, Debug)]
pub struct Segment {
    /// Bytes from the start of the data device.
    pub offset: u64,
    /// Length in bytes; `None` = dynamic: to the end of the device.
    pub size: Option<u64>,
    /// Added to every IV sector number (dm-crypt `iv_offset`), in 512-byte units.
    pub iv_tweak: u64,
    /// Cipher, chaining mode and IV generator.
    pub cipher: CipherSpec,
    /// Volume key length in bytes.
    pub key_bytes: usize,
    /// Encryption sector size (512 for LUKS1). LUKS2 does not set
    /// `iv_large_sectors`: IVs count 512-byte sectors even with 4096-byte sectors.
    pub sector_size: u32,
}

/// The data segment of a LUKS2 volume with authenticated encryption
/// (dm-crypt over dm-integrity, `cryptsetup luksFormat --integrity`). The
/// cipher and tag algorithm stay header strings: the volume engine maps them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSegment {
    /// Byte offset of the segment on the data device: where the dm-integrity
    /// superblock lies.
    pub offset: u64,
    /// Length in bytes; `None` = dynamic: to the end of the device.
    pub size: Option<u64>,
    /// Encryption sector size (512..4096).
    pub sector_size: u32,
    /// Added to every IV sector number (dm-crypt `iv_offset`), in 512-byte units.
    pub iv_tweak: u64,
    /// dm-crypt cipher spec, e.g. `aes-xts-plain64`, `aes-xts-random`,
    /// `aes-gcm-random`, `aegis128-random`, `chacha20-random`.
    pub encryption: String,
    /// Tag algorithm, e.g. `hmac(sha256)`, `aead`, `poly1305`.
    pub integrity: String,
    /// dm-integrity journal encryption (always `none`: nothing else is accepted).
    pub journal_encryption: String,
    /// dm-integrity journal MAC (always `none`: nothing else is accepted).
    pub journal_integrity: String,
    /// Volume key size in bytes, from a keyslot bound to the segment: the
    /// cipher key followed by the integrity key.
    pub key_bytes: usize,
    /// Bytes at the end of the volume key that key the tag MAC (`hmac(…)`:
    /// the segment's `integrity.key_size`, else the hash length); 0 for
    /// `aead` and `poly1305`, whose tags come from the cipher key.
    pub integrity_key_bytes: usize,
}

/// What [`FormatOptions::auth`] asks for: an authenticated LUKS2 segment,
/// given as the strings the header stores (checked for known algorithms and
/// key sizes, not for kernel support).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthFormat {
    /// Segment cipher spec, e.g. `aes-xts-plain64`, `aes-gcm-random`, `aegis128-random`.
    pub encryption: String,
    /// Tag algorithm as the header names it: `hmac(sha256)` (cryptsetup
    /// `--integrity hmac-sha256`), `hmac(sha1)`, `hmac(sha512)`, `aead`, `poly1305`.
    pub integrity: String,
}

/// State of one keyslot.
#[derive(Clone, Debug)]
pub struct KeyslotInfo {
    /// Slot number.
    pub slot: usize,
    /// Whether the slot holds key material.
    pub active: bool,
    /// Its KDF, if active and of a known type.
    pub kdf: Option<Pbkdf>,
    /// LUKS2 priority (0 ignore, 1 normal, 2 preferred); `None` for LUKS1.
    pub priority: Option<u8>,
}

/// What [`crate::Luks::format`] writes. Defaults follow cryptsetup 2.6 `luksFormat`.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    /// LUKS1 or LUKS2.
    pub version: LuksVersion,
    /// Data cipher (also encrypts LUKS1 key material); not used when
    /// [`FormatOptions::auth`] is set.
    pub cipher: CipherSpec,
    /// Volume key length in bytes (64 for aes-xts-plain64 with AES-256; with
    /// [`FormatOptions::auth`] the cipher key plus the integrity key, e.g.
    /// 96 for aes-xts-plain64 with hmac(sha256)).
    pub key_bytes: usize,
    /// Encryption sector size (LUKS1: 512 only; LUKS2: 512..4096).
    pub sector_size: u32,
    /// LUKS1 header hash, LUKS2 digest and AF hash.
    pub hash: HashAlg,
    /// LUKS2 label.
    pub label: Option<String>,
    /// LUKS2 subsystem.
    pub subsystem: Option<String>,
    /// UUID; random v4 if `None`.
    pub uuid: Option<String>,
    /// Data offset in bytes; default 16 MiB (LUKS2) or the 1 MiB-aligned end of
    /// the keyslots (LUKS1); 0 for a detached header unless given.
    pub data_offset: Option<u64>,
    /// The header lives on a separate device or file.
    pub detached_header: bool,
    /// LUKS2 hdr_size (binary header + JSON area): 16 KiB … 4 MiB; default 16 KiB
    /// (cryptsetup `--luks2-metadata-size`).
    pub luks2_metadata_size: Option<u64>,
    /// LUKS2 keyslots area size (cryptsetup `--luks2-keyslots-size`); default
    /// fills the space up to the data offset (16 MiB − 2 × hdr_size).
    pub luks2_keyslots_size: Option<u64>,
    /// LUKS2 only: an authenticated segment (dm-crypt over dm-integrity)
    /// with this cipher and tag algorithm instead of [`FormatOptions::cipher`].
    /// Keyslots then use aes-xts-plain64 with a 512-bit key, like cryptsetup.
    /// Only the header is written: the dm-integrity superblock at the data
    /// offset is the caller's to format.
    pub auth: Option<AuthFormat>,
    /// Volume-key digest iterations; `None` benchmarks like cryptsetup:
    /// max(1000, PBKDF2 iterations per second × 125 / 1000).
    pub digest_iterations: Option<u32>,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            version: LuksVersion::V2,
            cipher: CipherSpec::parse("aes-xts-plain64").unwrap_or_else(|_| unreachable_spec()),
            key_bytes: 64,
            sector_size: 512,
            hash: HashAlg::Sha256,
            label: None,
            subsystem: None,
            uuid: None,
            data_offset: None,
            detached_header: false,
            luks2_metadata_size: None,
            luks2_keyslots_size: None,
            auth: None,
            digest_iterations: None,
        }
    }
}

#[allow(clippy::panic)]
fn unreachable_spec() -> CipherSpec {
    panic!("the crypto crate cannot parse aes-xts-plain64")
}

/// Digest iterations: the option, or cryptsetup's 125 ms benchmark rule.
pub(crate) fn default_digest_iterations(
    opts: &FormatOptions,
    hash: HashAlg,
    key_bytes: usize,
) -> Result<u32, Error> {
    if let Some(n) = opts.digest_iterations {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "digest iterations must be at least 1".into(),
            ));
        }
        return Ok(n);
    }
    let per_sec = kdf::pbkdf2_iterations_per_second(hash, key_bytes)?;
    let n = (per_sec.saturating_mul(125) / 1000).max(1000);
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}
