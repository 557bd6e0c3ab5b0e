//! Where LUKS1 puts keyslot material and data when formatting, following
//! cryptsetup `LUKS_generate_phdr`: keyslots start at sector 8 (4096 bytes)
//! and each is aligned to 8 sectors; the payload is aligned to 1 MiB.

use crate::area::{material_len, AF_STRIPES};
use crate::error::Error;

/// Keyslot alignment in 512-byte sectors (cryptsetup `LUKS_ALIGN_KEYSLOTS` / 512).
pub const KEYSLOT_ALIGN_SECTORS: u64 = 8;
/// Default payload alignment in sectors (1 MiB, cryptsetup `DEFAULT_DISK_ALIGNMENT`).
pub const PAYLOAD_ALIGN_SECTORS: u64 = 2048;

/// Computed layout: each keyslot's material offset and the payload offset, in sectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Key material offset of slots 0..8 (sectors).
    pub keyslot_offsets: [u32; 8],
    /// First sector after the last keyslot's aligned material.
    pub header_sectors: u64,
    /// Payload offset in sectors (0 for a detached header without one).
    pub payload_offset: u32,
}

/// Layout for a `key_bytes` volume key; `data_offset` in bytes overrides the
/// payload offset, except 0, which means the default as in cryptsetup
/// (`crypt_set_data_offset(cd, 0)`); `detached` without a data offset gives
/// payload offset 0.
pub fn compute(
    key_bytes: usize,
    data_offset: Option<u64>,
    detached: bool,
) -> Result<Layout, Error> {
    let slot_sectors = material_len(key_bytes, AF_STRIPES) / 512;
    let mut cur = KEYSLOT_ALIGN_SECTORS;
    let mut keyslot_offsets = [0u32; 8];
    for off in keyslot_offsets.iter_mut() {
        *off = u32::try_from(cur)
            .map_err(|_| Error::InvalidArgument("key too large for LUKS1".into()))?;
        cur = (cur + slot_sectors).div_ceil(KEYSLOT_ALIGN_SECTORS) * KEYSLOT_ALIGN_SECTORS;
    }
    let payload = match data_offset.filter(|&b| b != 0) {
        Some(bytes) => {
            if bytes % 512 != 0 {
                return Err(Error::InvalidArgument(format!(
                    "data offset {bytes} is not a multiple of 512 bytes"
                )));
            }
            bytes / 512
        }
        None if detached => 0,
        None => cur.div_ceil(PAYLOAD_ALIGN_SECTORS) * PAYLOAD_ALIGN_SECTORS,
    };
    if payload != 0 && payload < cur {
        return Err(Error::InvalidArgument(format!(
            "data offset {} bytes is inside the LUKS1 header and keyslots (which end at {} bytes)",
            payload * 512,
            cur * 512
        )));
    }
    Ok(Layout {
        keyslot_offsets,
        header_sectors: cur,
        payload_offset: u32::try_from(payload).map_err(|_| {
            Error::InvalidArgument("data offset too large for LUKS1 (u32 sectors)".into())
        })?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned against `cryptsetup luksFormat --type luks1`: changing this changes the format.
    #[test]
    fn matches_cryptsetup() {
        let l = compute(64, None, false).unwrap();
        assert_eq!(
            l.keyslot_offsets,
            [8, 512, 1016, 1520, 2024, 2528, 3032, 3536]
        );
        assert_eq!(l.payload_offset, 4096);
        let l = compute(32, None, false).unwrap();
        assert_eq!(
            l.keyslot_offsets,
            [8, 264, 520, 776, 1032, 1288, 1544, 1800]
        );
        assert_eq!(l.payload_offset, 4096);
        let l = compute(32, None, true).unwrap();
        assert_eq!(l.payload_offset, 0);
        assert!(compute(64, Some(512 * 100), false).is_err());
        // 0 is the default, never a payload on top of an attached header.
        assert_eq!(compute(64, Some(0), false).unwrap().payload_offset, 4096);
        assert_eq!(compute(64, Some(0), true).unwrap().payload_offset, 0);
    }
}
