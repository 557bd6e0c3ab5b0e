//! The LUKS2 binary header (4096 bytes, big-endian), one per metadata copy
//! (LUKS2 on-disk format specification v1.1.x §2, cryptsetup `struct luks2_hdr_disk`).

use cryptkeep_crypto::HashAlg;

use crate::error::{bad, Error};
use crate::util::{c_str, put_c_str};

/// Binary header length. Changing this changes the format.
pub const BIN_LEN: usize = 4096;
/// Primary header magic.
pub const MAGIC_1ST: [u8; 6] = *b"LUKS\xba\xbe";
/// Secondary header magic.
pub const MAGIC_2ND: [u8; 6] = *b"SKUL\xba\xbe";
/// Allowed `hdr_size` values (binary header + JSON area), which are also the
/// offsets where a secondary header may sit.
pub const HDR_SIZES: [u64; 9] = [
    0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000,
];
/// Length of the per-copy salt.
pub const SALT_LEN: usize = 64;

const OFF_VERSION: usize = 6;
const OFF_HDR_SIZE: usize = 8;
const OFF_SEQID: usize = 16;
const OFF_LABEL: usize = 24;
const OFF_CSUM_ALG: usize = 72;
const OFF_SALT: usize = 104;
const OFF_UUID: usize = 168;
const OFF_SUBSYSTEM: usize = 208;
const OFF_HDR_OFFSET: usize = 256;
const OFF_CSUM: usize = 448;
const CSUM_LEN: usize = 64;

/// The decoded fields of one binary header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryHeader {
    /// Whether this is the secondary copy (magic `SKUL\xba\xbe`).
    pub secondary: bool,
    /// Bytes of binary header + JSON area.
    pub hdr_size: u64,
    /// Sequence id, bumped on every update; the higher copy wins.
    pub seqid: u64,
    /// Label (at most 47 bytes).
    pub label: String,
    /// Checksum algorithm, "sha256" in practice.
    pub csum_alg: String,
    /// Per-copy random salt.
    pub salt: [u8; SALT_LEN],
    /// UUID string.
    pub uuid: String,
    /// Subsystem label (at most 47 bytes).
    pub subsystem: String,
    /// Offset of this copy on the device.
    pub hdr_offset: u64,
    /// Stored checksum (first `digest_len` bytes used).
    pub csum: [u8; CSUM_LEN],
}

fn be64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(a)
}

impl BinaryHeader {
    /// Decode the header read at `offset`, checking magic, version, hdr_size
    /// and hdr_offset (cryptsetup `hdr_disk_sanity_check_pre`). `what` names
    /// the copy in errors ("primary header", "secondary header").
    pub fn parse(
        b: &[u8],
        offset: u64,
        secondary: bool,
        what: &str,
    ) -> Result<BinaryHeader, Error> {
        if b.len() < BIN_LEN {
            return Err(bad(format!(
                "{what} truncated: {} of {BIN_LEN} bytes",
                b.len()
            )));
        }
        let magic = if secondary { MAGIC_2ND } else { MAGIC_1ST };
        if b[..6] != magic {
            return Err(if secondary {
                bad(format!("{what} at offset {offset}: bad magic"))
            } else {
                Error::NotLuks
            });
        }
        let version = u16::from_be_bytes([b[OFF_VERSION], b[OFF_VERSION + 1]]);
        if version != 2 {
            return Err(bad(format!(
                "{what} at offset {offset}: version is {version}, expected 2"
            )));
        }
        let hdr_size = be64(b, OFF_HDR_SIZE);
        if !HDR_SIZES.contains(&hdr_size) {
            return Err(bad(format!(
                "{what} at offset {offset}: hdr_size {hdr_size} is not one of 16 KiB, 32 KiB, … 4 MiB"
            )));
        }
        let hdr_offset = be64(b, OFF_HDR_OFFSET);
        if hdr_offset != offset {
            return Err(bad(format!(
                "{what} at offset {offset}: hdr_offset field says {hdr_offset}"
            )));
        }
        if secondary && offset != hdr_size {
            return Err(bad(format!(
                "{what} at offset {offset}: hdr_size {hdr_size} does not match its position"
            )));
        }
        let mut salt = [0u8; SALT_LEN];
        salt.copy_from_slice(&b[OFF_SALT..OFF_SALT + SALT_LEN]);
        let mut csum = [0u8; CSUM_LEN];
        csum.copy_from_slice(&b[OFF_CSUM..OFF_CSUM + CSUM_LEN]);
        Ok(BinaryHeader {
            secondary,
            hdr_size,
            seqid: be64(b, OFF_SEQID),
            label: c_str(&b[OFF_LABEL..OFF_LABEL + 48], &format!("{what} label"))?,
            csum_alg: c_str(
                &b[OFF_CSUM_ALG..OFF_CSUM_ALG + 32],
                &format!("{what} checksum_alg"),
            )?,
            salt,
            uuid: c_str(&b[OFF_UUID..OFF_UUID + 40], &format!("{what} uuid"))?,
            subsystem: c_str(
                &b[OFF_SUBSYSTEM..OFF_SUBSYSTEM + 48],
                &format!("{what} subsystem"),
            )?,
            hdr_offset,
            csum,
        })
    }

    /// Encode with the checksum field zeroed.
    pub fn to_bytes_without_csum(&self) -> Result<Vec<u8>, Error> {
        let mut b = vec![0u8; BIN_LEN];
        b[..6].copy_from_slice(if self.secondary {
            &MAGIC_2ND
        } else {
            &MAGIC_1ST
        });
        b[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&2u16.to_be_bytes());
        b[OFF_HDR_SIZE..OFF_HDR_SIZE + 8].copy_from_slice(&self.hdr_size.to_be_bytes());
        b[OFF_SEQID..OFF_SEQID + 8].copy_from_slice(&self.seqid.to_be_bytes());
        put_c_str(&mut b[OFF_LABEL..OFF_LABEL + 48], &self.label, "label")?;
        put_c_str(
            &mut b[OFF_CSUM_ALG..OFF_CSUM_ALG + 32],
            &self.csum_alg,
            "checksum_alg",
        )?;
        b[OFF_SALT..OFF_SALT + SALT_LEN].copy_from_slice(&self.salt);
        put_c_str(&mut b[OFF_UUID..OFF_UUID + 40], &self.uuid, "uuid")?;
        put_c_str(
            &mut b[OFF_SUBSYSTEM..OFF_SUBSYSTEM + 48],
            &self.subsystem,
            "subsystem",
        )?;
        b[OFF_HDR_OFFSET..OFF_HDR_OFFSET + 8].copy_from_slice(&self.hdr_offset.to_be_bytes());
        Ok(b)
    }

    /// The checksum algorithm, parsed.
    pub fn csum_hash(&self, what: &str) -> Result<HashAlg, Error> {
        HashAlg::parse(&self.csum_alg).map_err(|_| {
            bad(format!(
                "{what}: unsupported checksum_alg '{}'",
                self.csum_alg
            ))
        })
    }
}

/// Checksum of a copy: hash(binary header with csum zeroed ‖ whole JSON area).
pub fn checksum(alg: HashAlg, bin_without_csum: &[u8], json_area: &[u8]) -> Vec<u8> {
    let mut all = Vec::with_capacity(bin_without_csum.len() + json_area.len());
    all.extend_from_slice(bin_without_csum);
    all.extend_from_slice(json_area);
    alg.digest(&all)
}

/// Put `csum` into the checksum field of an encoded header.
pub fn set_csum(bin: &mut [u8], csum: &[u8]) {
    bin[OFF_CSUM..OFF_CSUM + CSUM_LEN].fill(0);
    bin[OFF_CSUM..OFF_CSUM + csum.len()].copy_from_slice(csum);
}

/// Zero the checksum field of a raw header (for verification).
pub fn zero_csum(bin: &mut [u8]) {
    bin[OFF_CSUM..OFF_CSUM + CSUM_LEN].fill(0);
}

/// Offset of the seqid field (for tests and tamper generators).
pub const SEQID_OFFSET: usize = OFF_SEQID;
/// Offset of the hdr_size field.
pub const HDR_SIZE_OFFSET: usize = OFF_HDR_SIZE;
/// Offset of the checksum field.
pub const CSUM_OFFSET: usize = OFF_CSUM;

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned offsets (spec table 1): changing them changes the format.
    #[test]
    fn offsets() {
        assert_eq!(
            [
                OFF_HDR_SIZE,
                OFF_SEQID,
                OFF_LABEL,
                OFF_CSUM_ALG,
                OFF_SALT,
                OFF_UUID,
                OFF_SUBSYSTEM,
                OFF_HDR_OFFSET,
                OFF_CSUM
            ],
            [8, 16, 24, 72, 104, 168, 208, 256, 448]
        );
        assert_eq!(BIN_LEN, 4096);
    }
}
