//! The LUKS1 partition header (`phdr`): 592 big-endian bytes at offset 0,
//! as in the LUKS1 on-disk format specification v1.2.3 §2.4 and cryptsetup
//! `struct luks_phdr`.

use crate::area::{material_len, AF_STRIPES};
use crate::error::{bad, Error};
use crate::util::{c_str, put_c_str};

/// Size of the header proper. Changing this changes the format.
pub const PHDR_LEN: usize = 592;
/// `LUKS\xba\xbe`.
pub const MAGIC: [u8; 6] = *b"LUKS\xba\xbe";
/// Number of keyslots.
pub const NUM_KEYSLOTS: usize = 8;
/// `active` value of a keyslot in use.
pub const KEY_ENABLED: u32 = 0x00AC_71F3;
/// `active` value of a free keyslot.
pub const KEY_DISABLED: u32 = 0x0000_DEAD;
/// Length of the master-key digest (SHA-1 sized, truncated for other hashes).
pub const DIGEST_LEN: usize = 20;
/// Length of every LUKS1 salt.
pub const SALT_LEN: usize = 32;
/// Largest key cryptsetup accepts (4096 bits).
pub const MAX_KEY_BYTES: u32 = 512;

const OFF_VERSION: usize = 6;
const OFF_CIPHER_NAME: usize = 8;
const OFF_CIPHER_MODE: usize = 40;
const OFF_HASH_SPEC: usize = 72;
const OFF_PAYLOAD: usize = 104;
const OFF_KEY_BYTES: usize = 108;
const OFF_MK_DIGEST: usize = 112;
const OFF_MK_SALT: usize = 132;
const OFF_MK_ITER: usize = 164;
const OFF_UUID: usize = 168;
const OFF_KEYSLOTS: usize = 208;
const KEYSLOT_LEN: usize = 48;

/// One of the eight keyslot descriptors (48 bytes each, from offset 208).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyslot {
    /// [`KEY_ENABLED`] or [`KEY_DISABLED`].
    pub active: u32,
    /// PBKDF2 iterations for the passphrase.
    pub iterations: u32,
    /// PBKDF2 salt.
    pub salt: [u8; SALT_LEN],
    /// Start of the key material, in 512-byte sectors.
    pub key_material_offset: u32,
    /// AF stripes (always 4000).
    pub stripes: u32,
}

impl Keyslot {
    /// Whether the slot holds key material.
    pub fn is_active(&self) -> bool {
        self.active == KEY_ENABLED
    }
}

/// The decoded LUKS1 header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phdr {
    /// e.g. "aes".
    pub cipher_name: String,
    /// e.g. "xts-plain64".
    pub cipher_mode: String,
    /// PBKDF2/AF hash, e.g. "sha256".
    pub hash_spec: String,
    /// Start of the data, in 512-byte sectors (0 for a detached header).
    pub payload_offset: u32,
    /// Volume key length in bytes.
    pub key_bytes: u32,
    /// PBKDF2(volume key) truncated to 20 bytes.
    pub mk_digest: [u8; DIGEST_LEN],
    /// Salt of the master-key digest.
    pub mk_digest_salt: [u8; SALT_LEN],
    /// Iterations of the master-key digest.
    pub mk_digest_iter: u32,
    /// The UUID string.
    pub uuid: String,
    /// The eight keyslots.
    pub keyslots: [Keyslot; NUM_KEYSLOTS],
}

fn be32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_be_bytes(a)
}

/// Whether the first bytes carry the LUKS magic, and which version they claim.
pub fn probe_version(b: &[u8]) -> Option<u16> {
    if b.len() < 8 || b[..6] != MAGIC {
        return None;
    }
    Some(u16::from_be_bytes([b[OFF_VERSION], b[OFF_VERSION + 1]]))
}

impl Phdr {
    /// The header's hash (hash-spec), parsed.
    pub(crate) fn hash_alg(&self) -> Result<cryptkeep_crypto::HashAlg, Error> {
        cryptkeep_crypto::HashAlg::parse(&self.hash_spec).map_err(Error::Crypto)
    }

    /// Decode and validate a header (like cryptsetup `_check_and_convert_hdr`
    /// and `LUKS_check_keyslots`, plus sanity limits on every number).
    pub fn parse(b: &[u8]) -> Result<Phdr, Error> {
        if b.len() < PHDR_LEN {
            return Err(bad(format!(
                "LUKS1 header truncated: {} bytes, need {PHDR_LEN}",
                b.len()
            )));
        }
        match probe_version(b) {
            None => return Err(Error::NotLuks),
            Some(1) => {}
            Some(v) => return Err(bad(format!("version field at offset 6 is {v}, expected 1"))),
        }
        let mut mk_digest = [0u8; DIGEST_LEN];
        mk_digest.copy_from_slice(&b[OFF_MK_DIGEST..OFF_MK_DIGEST + DIGEST_LEN]);
        let mut mk_digest_salt = [0u8; SALT_LEN];
        mk_digest_salt.copy_from_slice(&b[OFF_MK_SALT..OFF_MK_SALT + SALT_LEN]);
        let keyslots = std::array::from_fn(|i| {
            let o = OFF_KEYSLOTS + i * KEYSLOT_LEN;
            let mut salt = [0u8; SALT_LEN];
            salt.copy_from_slice(&b[o + 8..o + 8 + SALT_LEN]);
            Keyslot {
                active: be32(b, o),
                iterations: be32(b, o + 4),
                salt,
                key_material_offset: be32(b, o + 40),
                stripes: be32(b, o + 44),
            }
        });
        let h = Phdr {
            cipher_name: c_str(
                &b[OFF_CIPHER_NAME..OFF_CIPHER_NAME + 32],
                "cipher-name (offset 8)",
            )?,
            cipher_mode: c_str(
                &b[OFF_CIPHER_MODE..OFF_CIPHER_MODE + 32],
                "cipher-mode (offset 40)",
            )?,
            hash_spec: c_str(
                &b[OFF_HASH_SPEC..OFF_HASH_SPEC + 32],
                "hash-spec (offset 72)",
            )?,
            payload_offset: be32(b, OFF_PAYLOAD),
            key_bytes: be32(b, OFF_KEY_BYTES),
            mk_digest,
            mk_digest_salt,
            mk_digest_iter: be32(b, OFF_MK_ITER),
            uuid: c_str(&b[OFF_UUID..OFF_UUID + 40], "uuid (offset 168)")?,
            keyslots,
        };
        h.validate()?;
        Ok(h)
    }

    /// Check every field for consistency; the error names the field.
    pub fn validate(&self) -> Result<(), Error> {
        if cryptkeep_crypto::HashAlg::parse(&self.hash_spec).is_err() {
            return Err(Error::Unsupported(format!(
                "LUKS1 hash-spec (offset 72) '{}' is not a supported hash",
                self.hash_spec
            )));
        }
        if self.key_bytes == 0 || self.key_bytes > MAX_KEY_BYTES {
            return Err(bad(format!(
                "key-bytes (offset 108) is {}, must be 1..={MAX_KEY_BYTES}",
                self.key_bytes
            )));
        }
        if self.mk_digest_iter == 0 {
            return Err(bad("mk-digest-iter (offset 164) is 0"));
        }
        if self.cipher_name.is_empty() || self.cipher_mode.is_empty() {
            return Err(bad("cipher-name or cipher-mode (offsets 8/40) is empty"));
        }
        let mat = material_len(self.key_bytes as usize, AF_STRIPES);
        let mut areas = Vec::with_capacity(NUM_KEYSLOTS);
        for (i, ks) in self.keyslots.iter().enumerate() {
            let at = OFF_KEYSLOTS + i * KEYSLOT_LEN;
            if ks.active != KEY_ENABLED && ks.active != KEY_DISABLED {
                return Err(bad(format!(
                    "keyslot {i} active field (offset {at}) is {:#010x}, expected 0x00ac71f3 or 0x0000dead",
                    ks.active
                )));
            }
            if ks.stripes != AF_STRIPES {
                return Err(bad(format!(
                    "keyslot {i} stripes (offset {}) is {}, must be {AF_STRIPES}",
                    at + 44,
                    ks.stripes
                )));
            }
            if ks.is_active() && ks.iterations == 0 {
                return Err(bad(format!(
                    "keyslot {i} iterations (offset {}) is 0",
                    at + 4
                )));
            }
            let start = u64::from(ks.key_material_offset) * 512;
            if start < PHDR_LEN as u64 {
                return Err(bad(format!(
                    "keyslot {i} key-material-offset (offset {}) is sector {}, which overlaps the header",
                    at + 40,
                    ks.key_material_offset
                )));
            }
            let end = start + mat;
            if self.payload_offset != 0 && end > u64::from(self.payload_offset) * 512 {
                return Err(bad(format!(
                    "keyslot {i} key material (bytes {start}..{end}) runs past payload-offset (sector {})",
                    self.payload_offset
                )));
            }
            areas.push((start, end, i));
        }
        areas.sort();
        for w in areas.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(bad(format!(
                    "keyslot {} key material (bytes {}..{}) overlaps keyslot {} (bytes {}..{})",
                    w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1
                )));
            }
        }
        Ok(())
    }

    /// End of the last keyslot's key material, in bytes.
    pub fn keyslots_end(&self) -> u64 {
        let mat = material_len(self.key_bytes as usize, AF_STRIPES);
        self.keyslots
            .iter()
            .map(|k| u64::from(k.key_material_offset) * 512 + mat)
            .max()
            .unwrap_or(0)
    }

    /// Encode to the 592-byte on-disk form.
    pub fn to_bytes(&self) -> Result<[u8; PHDR_LEN], Error> {
        let mut b = [0u8; PHDR_LEN];
        b[..6].copy_from_slice(&MAGIC);
        b[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&1u16.to_be_bytes());
        put_c_str(
            &mut b[OFF_CIPHER_NAME..OFF_CIPHER_NAME + 32],
            &self.cipher_name,
            "cipher-name",
        )?;
        put_c_str(
            &mut b[OFF_CIPHER_MODE..OFF_CIPHER_MODE + 32],
            &self.cipher_mode,
            "cipher-mode",
        )?;
        put_c_str(
            &mut b[OFF_HASH_SPEC..OFF_HASH_SPEC + 32],
            &self.hash_spec,
            "hash-spec",
        )?;
        b[OFF_PAYLOAD..OFF_PAYLOAD + 4].copy_from_slice(&self.payload_offset.to_be_bytes());
        b[OFF_KEY_BYTES..OFF_KEY_BYTES + 4].copy_from_slice(&self.key_bytes.to_be_bytes());
        b[OFF_MK_DIGEST..OFF_MK_DIGEST + DIGEST_LEN].copy_from_slice(&self.mk_digest);
        b[OFF_MK_SALT..OFF_MK_SALT + SALT_LEN].copy_from_slice(&self.mk_digest_salt);
        b[OFF_MK_ITER..OFF_MK_ITER + 4].copy_from_slice(&self.mk_digest_iter.to_be_bytes());
        put_c_str(&mut b[OFF_UUID..OFF_UUID + 40], &self.uuid, "uuid")?;
        for (i, ks) in self.keyslots.iter().enumerate() {
            let o = OFF_KEYSLOTS + i * KEYSLOT_LEN;
            b[o..o + 4].copy_from_slice(&ks.active.to_be_bytes());
            b[o + 4..o + 8].copy_from_slice(&ks.iterations.to_be_bytes());
            b[o + 8..o + 40].copy_from_slice(&ks.salt);
            b[o + 40..o + 44].copy_from_slice(&ks.key_material_offset.to_be_bytes());
            b[o + 44..o + 48].copy_from_slice(&ks.stripes.to_be_bytes());
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned field offsets: changing them changes the format.
    #[test]
    fn layout_constants() {
        assert_eq!(PHDR_LEN, 592);
        assert_eq!(OFF_KEYSLOTS + NUM_KEYSLOTS * KEYSLOT_LEN, 592);
        assert_eq!(OFF_UUID, 168);
        assert_eq!(KEY_ENABLED, 0x00AC71F3);
        assert_eq!(KEY_DISABLED, 0x0000DEAD);
    }
}
